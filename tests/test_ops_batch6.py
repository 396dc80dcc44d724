"""Batch 6 of op lowerings, found missing by an op survey: the modified Bessel functions (i0, i0e,
i1, i1e) and the Kaiser window. Each op is exported and run in tract against PyTorch at a named
tolerance level, with edge values (signed zeros, the switch between approximations, overflow of
float32, infinities, NaN) and dynamic axes where the op allows them."""
import math

import numpy as np
import pytest
import torch

from harness import OpCase, randn, run_case

INF, NAN = float("inf"), float("nan")
DYN1 = {"x0": {1: "S"}}
# Bessel: both sides of the switch at |x| = 8, float32's overflow of exp past 88.72, +-inf, NaN,
# signed zeros, tiny and huge magnitudes, and a dense sweep of both signs
BESSEL_X = torch.cat([torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-3, 7.99, 8.0, 8.01, -8.0, -7.99, 30.0, -50.0, 88.0,
                                    88.8, 89.5, -95.0, 1e30, -1e30, INF, -INF, NAN]),
                      torch.linspace(-100, 100, 401), torch.linspace(-10, 10, 333)])[None]


BESSEL_CASES = [
    OpCase("i0_edges", torch.i0, [BESSEL_X], dynamic_axes=DYN1),
    OpCase("i0_special_method", lambda x: torch.special.i0(x) - x.i0() + torch.special.modified_bessel_i0(x),
           [randn(3, 7) * 6]),
    OpCase("i0_f16", torch.i0, [(randn(3, 7, seed=1) * 4).half()], khronos=False),
    OpCase("i0_int", torch.i0, [torch.tensor([[0, -3, 5, 12, -20]])], khronos=False),
    OpCase("i0e_edges", torch.special.i0e, [BESSEL_X], dynamic_axes=DYN1),
    OpCase("i1_edges", torch.special.i1, [BESSEL_X], dynamic_axes=DYN1),
    OpCase("i1_modified_bessel", torch.special.modified_bessel_i1, [randn(3, 7, seed=2) * 12]),
    OpCase("i1e_edges", torch.special.i1e, [BESSEL_X], dynamic_axes=DYN1),
    OpCase("i1e_f16", torch.special.i1e, [(randn(3, 7, seed=3) * 20).half()], khronos=False),
    # kaiser_window: a length read from a dynamic size (a static length is folded to a constant by the
    # tracer), periodic or symmetric, small and large beta, one item
    OpCase("kaiser_window_dyn", lambda x: x * torch.kaiser_window(x.shape[1]), [randn(3, 9, seed=4)],
           dynamic_axes=DYN1, khronos=False),
    OpCase("kaiser_window_dyn_symmetric_beta30", lambda x: x * torch.kaiser_window(x.shape[1], False, 30.0),
           [randn(3, 16, seed=5)], dynamic_axes=DYN1, khronos=False),
    OpCase("kaiser_window_dyn_one_item", lambda x: x * torch.kaiser_window(x.shape[1], False, 3.0),
           [randn(3, 1, seed=6)], dynamic_axes=DYN1, khronos=False),
    OpCase("kaiser_window_dyn_f64", lambda x: x + torch.kaiser_window(x.shape[0], True, 0.5, dtype=torch.float64),
           [randn(6, dtype=torch.float64, seed=7)], dynamic_axes={"x0": {0: "S"}}, khronos=False),
    OpCase("kaiser_window_static", lambda x: x * torch.kaiser_window(7, True, 8.6), [randn(3, 7, seed=8)]),
]


@pytest.mark.parametrize("case", BESSEL_CASES, ids=str)
def test_bessel_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in BESSEL_CASES if c.khronos], ids=str)
def test_bessel_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_bessel_accuracy_vs_mpmath(tmp_path):
    """The approximations against mpmath's Bessel functions over both regions and both signs:
    relative error below 1e-6 (measured: 3e-7) wherever the float32 results are finite."""
    import mpmath

    import fx2nnef
    from fx2nnef.targets.tract_runner import run_tract
    from harness import FnModule

    x = torch.cat([torch.linspace(-88, 88, 2001), torch.tensor([1e-20, -1e-3, 7.999, 8.001, -60.5])])[None]
    out = tmp_path / "b.nnef.tgz"
    fns = (torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e)
    fx2nnef.export(FnModule(lambda v: tuple(f(v) for f in fns)), (x,), out,
                   target=fx2nnef.TractNNEF(check_io=False), input_names=["x"])
    got = run_tract(out, [x.numpy()])
    xs = [float(v) for v in x[0]]
    for order, scaled, values in ((0, False, got[0]), (0, True, got[1]), (1, False, got[2]), (1, True, got[3])):
        want = np.array([[float(mpmath.besseli(order, v) * (mpmath.exp(-abs(v)) if scaled else 1)) for v in xs]])
        np.testing.assert_allclose(values, want, rtol=1e-6, atol=0, err_msg=f"I{order} scaled={scaled}")


# ---- quantile, nanquantile (tract only: standard NNEF has no sort) -------------------------------------------------
QX = randn(4, 9, seed=10)
QX[0, :4] = QX[0, 4]  # ties
QE = QX.clone()
QE[1, 3] = NAN  # one NaN
QE[2, :] = NAN  # nothing but NaN
QE[3, 0], QE[3, 5] = INF, -INF
# with 9 items: ranks 0, 4.5 and 5.5 (nearest rounds half to even), 7.875, 8
Q_EDGE = torch.tensor([0.0, 0.1, 0.33, 0.5625, 0.6875, 0.984375, 1.0])
MODES = ("linear", "lower", "higher", "midpoint", "nearest")

QUANTILE_CASES = [
    OpCase("quantile_scalar_dim_dyn", lambda x: torch.quantile(x, 0.3, dim=1), [QX], dynamic_axes=DYN1, khronos=False),
    OpCase("quantile_modes_dyn", lambda x: tuple(torch.quantile(x, Q_EDGE, dim=1, interpolation=m) for m in MODES),
           [QX], dynamic_axes=DYN1, khronos=False),
    OpCase("quantile_vector_keepdim_dim0", lambda x: torch.quantile(x, torch.tensor([0.0, 0.25, 0.5, 1.0]), dim=0,
                                                                   keepdim=True), [QX], dynamic_axes={"x0": {0: "S"}},
           khronos=False),
    OpCase("quantile_flat", lambda x: torch.quantile(x, 0.7), [QX], dynamic_axes={"x0": {0: "S"}}, khronos=False),
    OpCase("quantile_flat_keepdim_vector", lambda x: torch.quantile(x, torch.tensor([0.1, 0.9]), keepdim=True), [QX],
           khronos=False),
    OpCase("quantile_nan_inf", lambda x: tuple(torch.quantile(x, Q_EDGE, dim=1, interpolation=m) for m in MODES),
           [QE], khronos=False),
    OpCase("quantile_q_input", lambda x, q: torch.quantile(x, q, dim=-1), [QX, torch.tensor([0.2, 0.5625, 1.0])],
           dynamic_axes=DYN1, khronos=False),
    OpCase("quantile_f64", lambda x: torch.quantile(x, torch.tensor([0.3, 0.5625], dtype=torch.float64), dim=1),
           [QX.double()], dynamic_axes=DYN1, khronos=False),
    OpCase("nanquantile_modes", lambda x: tuple(torch.nanquantile(x, Q_EDGE, dim=1, interpolation=m) for m in MODES),
           [QE], dynamic_axes={"x0": {0: "B"}}, khronos=False),
    OpCase("nanquantile_flat", lambda x: torch.nanquantile(x, 0.5), [QE], khronos=False),
    OpCase("quantile_methods", lambda x: x.quantile(0.25, 1, True) + x.nanquantile(0.5, -1, keepdim=True), [QX],
           dynamic_axes={"x0": {0: "B"}}, khronos=False),
    OpCase("quantile_3d_middle_dim", lambda x: torch.quantile(x, torch.tensor([0.25, 0.75]), dim=1, keepdim=True,
                                                              interpolation="midpoint"),
           [randn(2, 5, 3, seed=11)], dynamic_axes={"x0": {1: "S"}}, khronos=False),
]


@pytest.mark.parametrize("case", QUANTILE_CASES, ids=str)
def test_quantile_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("q", [1.5, torch.tensor([0.5, -0.1])])
def test_quantile_refuses_q_out_of_range(q, tmp_path):
    with pytest.raises(Exception, match="range|in \\[0, 1\\]"):
        run_case(OpCase("q_bad", lambda x: torch.quantile(x, q, dim=1), [QX]), tmp_path, "tract")


# ---- tril_indices / triu_indices of a dynamic square size, logspace with a dynamic number of steps ------------------
DYN0 = {"x0": {0: "S"}}

TRI_CASES = [
    OpCase("tril_indices_dyn", lambda x: torch.tril_indices(x.shape[0], x.shape[0]), [randn(5, 3)], dynamic_axes=DYN0,
           khronos=False),
    OpCase("tril_indices_dyn_sum", lambda x: torch.tril_indices(x.shape[0], x.shape[0]).float().sum(1), [randn(5, 3)],
           dynamic_axes=DYN0, khronos=False),
    OpCase("tril_indices_dyn_below_diagonal", lambda x: torch.tril_indices(x.shape[0], x.shape[0], -1), [randn(6, 3)],
           dynamic_axes=DYN0, khronos=False),
    OpCase("tril_indices_dyn_int32", lambda x: torch.tril_indices(x.shape[1], x.shape[1], dtype=torch.int32),
           [randn(2, 7)], dynamic_axes=DYN1, khronos=False),
    OpCase("triu_indices_dyn_above_diagonal", lambda x: torch.triu_indices(x.shape[0], x.shape[0], 1), [randn(5, 3)],
           dynamic_axes=DYN0, khronos=False),
    OpCase("triu_indices_dyn", lambda x: torch.triu_indices(x.shape[1], x.shape[1]), [randn(3, 40)],
           dynamic_axes=DYN1, khronos=False),
    OpCase("triu_indices_dyn_pairs_gathered", lambda x: x[torch.triu_indices(x.shape[0], x.shape[0], 1)[0]]
           - x[torch.triu_indices(x.shape[0], x.shape[0], 1)[1]], [randn(6, 3)], dynamic_axes=DYN0, khronos=False),
    OpCase("logspace_dyn", lambda x: x[:, 0] * torch.logspace(0, 2, x.shape[0]), [randn(5, 3)], dynamic_axes=DYN0,
           khronos=False),
    OpCase("logspace_dyn_base2", lambda x: x[:, 0] * torch.logspace(-1, 3.5, x.shape[0], base=2.0), [randn(5, 3)],
           dynamic_axes=DYN0, khronos=False),
    OpCase("logspace_dyn_one_step", lambda x: x[:, 0] * torch.logspace(-1, 3.5, x.shape[0], 0.5), [randn(1, 3)],
           dynamic_axes=DYN0, khronos=False),
    OpCase("logspace_dyn_f64", lambda x: torch.logspace(-1, 3.5, x.shape[0], dtype=torch.float64), [randn(4, 3)],
           dynamic_axes=DYN0, khronos=False),
]


@pytest.mark.parametrize("case", TRI_CASES, ids=str)
def test_tri_indices_logspace_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("fn", [lambda n: torch.tril_indices(n, n), lambda n: torch.tril_indices(n, n, -1),
                                lambda n: torch.triu_indices(n, n, 1), lambda n: torch.triu_indices(n, n)],
                         ids=["tril0", "tril-1", "triu1", "triu0"])
def test_tri_indices_at_many_sizes(fn, tmp_path):
    """One asset, run at sizes from 1 to 2500 (3 million items: the float32 square root of the
    closed form is corrected to the exact row), equal to torch's indices item for item."""
    import fx2nnef
    from fx2nnef.targets.tract_runner import run_tract_many
    from harness import FnModule

    out = tmp_path / "t.nnef.tgz"
    fx2nnef.export(FnModule(lambda x: fn(x.shape[0])), (randn(5, 2),), out,
                   target=fx2nnef.TractNNEF(dynamic_axes=DYN0), input_names=["x0"])
    sizes = [1, 2, 3, 7, 64, 2500]
    got = run_tract_many(out, [[np.zeros((n, 2), np.float32)] for n in sizes])
    for n, (g,) in zip(sizes, got):
        np.testing.assert_array_equal(g, fn(n).numpy(), err_msg=f"n={n}")


@pytest.mark.parametrize("fn, match", [
    (lambda x: torch.tril_indices(x.shape[0], x.shape[1]), "square"),
    (lambda x: torch.tril_indices(x.shape[0], x.shape[0], 2), "not lowered"),
    (lambda x: torch.triu_indices(x.shape[0], x.shape[0], -2), "not lowered"),
    (lambda x: torch.tril_indices(x.shape[0], x.shape[0], -3), "below S = 3"),
])
def test_tri_indices_refusals(fn, match, tmp_path):
    with pytest.raises(Exception, match=match):
        run_case(OpCase("bad", fn, [randn(5, 4)], dynamic_axes={"x0": {0: "S", 1: "T"}}), tmp_path, "tract")


# ---- erfcx, log_ndtr, ndtri, polygamma, mvlgamma ------------------------------------------------------------------
SPECIAL_X = torch.cat([torch.tensor([0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 9.0, -9.0, -9.5, 26.0,
                                     -26.0, 40.0, -40.0, 1e10, -1e10, 1e30, INF, -INF, NAN]),
                       torch.linspace(-12, 12, 97)])[None]
# ndtri: both poles, outside [0, 1], NaN, the far tails (subnormal included), both sides of the switch at 0.02
NDTRI_P = torch.cat([torch.tensor([0.0, 1.0, -0.1, 1.1, NAN, 1e-45, 1e-38, 1e-30, 1e-10, 1e-5, 0.0199, 0.0201, 0.5,
                                   0.98, 0.999999, 1 - 6e-8]), torch.linspace(0.001, 0.999, 60)])[None]
# polygamma: poles (0, -0, negative integers), reflection region, tiny, large, +-inf, NaN
POLYGAMMA_X = torch.tensor([[0.0, -0.0, -1.0, -2.0, -2.5, -0.5, -1.5, -7.3, 1e-30, 0.1, 0.49, 0.5, 1.0, 2.0, 9.5, 100.0,
                             1e6, INF, -INF, NAN]])

SPECIAL_CASES = [
    OpCase("erfcx_edges", torch.special.erfcx, [SPECIAL_X], dynamic_axes=DYN1),
    OpCase("log_ndtr_edges", torch.special.log_ndtr, [SPECIAL_X], dynamic_axes=DYN1),
    OpCase("ndtri_edges", torch.special.ndtri, [NDTRI_P], dynamic_axes=DYN1),
    OpCase("polygamma1_edges", lambda x: torch.polygamma(1, x), [POLYGAMMA_X], dynamic_axes=DYN1),
    OpCase("polygamma2_edges", lambda x: torch.polygamma(2, x), [POLYGAMMA_X], dynamic_axes=DYN1),
    OpCase("polygamma3_special", lambda x: torch.special.polygamma(3, x), [POLYGAMMA_X]),
    OpCase("polygamma_method_0_1", lambda x: x.polygamma(0) + x.polygamma(1), [randn(3, 7, seed=21) * 4]),
    OpCase("polygamma4_positive", lambda x: torch.polygamma(4, x), [torch.rand(3, 7, generator=torch.Generator()
                                                                             .manual_seed(22)) * 20 + 0.05]),
    OpCase("mvlgamma_p3", lambda x: torch.mvlgamma(x, 3), [torch.rand(3, 7, generator=torch.Generator()
                                                                      .manual_seed(23)) * 10 + 1.01], dynamic_axes=DYN1),
    OpCase("multigammaln_method", lambda x: torch.special.multigammaln(x, 1) + x.mvlgamma(p=2),
           [torch.rand(3, 7, generator=torch.Generator().manual_seed(24)) * 10 + 0.6]),
]


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=str)
def test_special_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in SPECIAL_CASES if c.khronos], ids=str)
def test_special_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_erfcx_ndtri_accuracy_vs_mpmath(tmp_path):
    """erfcx on [0, 1e30] and ndtri on [1e-40, 1 - 1e-7] against mpmath: relative error below 1e-6."""
    import mpmath

    import fx2nnef
    from fx2nnef.targets.tract_runner import run_tract
    from harness import FnModule

    x = torch.cat([torch.linspace(0, 30, 1501), torch.logspace(1.5, 30, 300)])[None]
    p = torch.cat([torch.logspace(-40, -0.31, 1000), 1 - torch.logspace(-7, -0.31, 500)])[None]
    out = tmp_path / "s.nnef.tgz"
    fx2nnef.export(FnModule(lambda a, b: (torch.special.erfcx(a), torch.special.ndtri(b))), (x, p), out,
                   target=fx2nnef.TractNNEF(check_io=False), input_names=["x", "p"])
    got_erfcx, got_ndtri = run_tract(out, [x.numpy(), p.numpy()])
    with mpmath.workdps(80):  # 1 - 2p for p down to 1e-40
        want_erfcx = np.array([[float(mpmath.exp(mpmath.mpf(float(v)) ** 2) * mpmath.erfc(float(v))) for v in x[0]]])
        want_ndtri = np.array([[float(-mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * mpmath.mpf(float(v)))) if float(v) < 0.5
                                else float(mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(float(v)) - 1)) for v in p[0]]])
    np.testing.assert_allclose(got_erfcx, want_erfcx, rtol=1e-6)
    np.testing.assert_allclose(got_ndtri, want_ndtri, rtol=1e-6)
