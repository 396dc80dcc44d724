"""Batch 4 of op lowerings: logcumsumexp, diagonal / diag_embed / diag, cross, index_copy,
masked_scatter, median / nanmedian, and elementwise math (logaddexp, xlogy, copysign, heaviside,
sinc, logit, ldexp, float_power, nanmean, trapezoid). Each op is exported, run in tract (and in
nnef_tools where its lowering is common) and compared with PyTorch."""
import pytest
import torch

import fx2nnef
from harness import OpCase, randbool, randint, randn, run_case

INF, NAN = float("inf"), float("nan")
F32 = randn(2, 5, 4)
SQ = randn(2, 4, 4, seed=1)
F16 = randn(2, 5, 4, dtype=torch.float16, seed=2)
I64 = randint(-5, 6, 2, 5, 4, seed=3)
# edge values on the first row of each operand, random values elsewhere
EDGE_A = torch.cat([torch.tensor([[-INF, INF, INF, NAN, 0.0, 100.0, -100.0, 1e-3, -INF, 3.0]]), randn(3, 10, seed=4)])
EDGE_B = torch.cat([torch.tensor([[-INF, INF, -INF, 1.0, 0.0, -100.0, 100.0, 1e-3, 2.0, INF]]), randn(3, 10, seed=5)])
XLOGY_X = torch.tensor([[0.0, 0.0, 1.0, NAN, 0.0, 2.0, -1.5, 0.0, 3.0, 1.0]])
XLOGY_Y = torch.tensor([[NAN, 0.0, 0.0, 1.0, INF, 3.0, 0.5, -1.0, INF, 1e-30]])
SIGN_B = torch.tensor([[-0.0, 0.0, -1.0, 2.0, -INF, INF, -3.0, 0.0, -0.0, 1e-30]])
STEP_X = torch.tensor([[0.0, -0.0, NAN, 1.0, -1.0, INF, -INF, 0.0, 1e-30, -1e-30]])
SINC_X = torch.cat([torch.tensor([[0.0, 1e-20, 0.5, -0.5, 1.0, 2.5, -7.25, 1e-4, -3.0, 0.125]]), randn(2, 10, seed=6)])
PROB = torch.tensor([[0.0, 1.0, 0.5, 1e-8, 1 - 1e-7, 0.25, 2.0, -0.5, NAN, 0.75]])
NANS = torch.where(randn(2, 5, 4, seed=7) > 0.6, NAN, randn(2, 5, 4, seed=8))
NANS[0, :, 0] = NAN  # a row of NaNs only
CUM = torch.tensor([[-INF, -INF, 1.0, 2.0, -50.0, 80.0, 0.0, -INF],
                    [INF, 1.0, 2.0, -INF, 3.0, 4.0, 5.0, 6.0],
                    [0.0, NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
TIES = torch.tensor([[1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
                     [3.0, 1.0, 2.0, 2.0, 9.0, 0.0, 1.0]])
MEDIAN_NAN = torch.tensor([[1.0, NAN, 3.0, NAN, 0.0], [2.0, 1.0, 3.0, 4.0, 0.0], [NAN, NAN, NAN, NAN, NAN],
                           [INF, 1.0, -INF, 2.0, 0.5]])
V3 = randn(2, 3, 4, seed=9)
W3 = randn(2, 3, 4, seed=10)
MASK = randbool(2, 5, 4, seed=11)
DYN1 = {"x0": {1: "S"}}


def pair(result):
    return result[0], result[1]


CASES = [
    # logaddexp family
    OpCase("logaddexp_edges", torch.logaddexp, [EDGE_A, EDGE_B]),
    OpCase("logaddexp_broadcast", lambda a, b: torch.logaddexp(a, b[0]), [F32, randn(1, 4, seed=12)]),
    OpCase("logaddexp_method", lambda a, b: a.logaddexp(b), [F32, F32.flip(0)], khronos=False),
    OpCase("logaddexp_dyn", torch.logaddexp, [F32, randn(2, 5, 4, seed=13)],
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("logaddexp2_edges", torch.logaddexp2, [EDGE_A, EDGE_B]),
    OpCase("logaddexp_f16", torch.logaddexp, [F16, F16.flip(1)], khronos=False),
    # xlogy
    OpCase("xlogy_edges", torch.xlogy, [XLOGY_X, XLOGY_Y]),
    OpCase("xlogy_special_scalar", lambda y: torch.special.xlogy(2.0, y), [XLOGY_Y]),
    OpCase("xlogy_method_dyn", lambda x, y: x.xlogy(y), [F32, F32.abs() + 0.5],
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    # copysign (negative zero)
    OpCase("copysign_edges", torch.copysign, [EDGE_A, SIGN_B]),
    OpCase("copysign_scalar", lambda a: torch.copysign(a, -0.0), [F32]),
    OpCase("copysign_int_dyn", lambda a, b: a.copysign(b), [I64, F32], khronos=False,
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    # heaviside
    OpCase("heaviside_edges", torch.heaviside, [STEP_X, torch.tensor([0.5])]),
    OpCase("heaviside_values", torch.heaviside, [torch.where(F32 > 0.3, 0.0, F32), randn(2, 5, 4, seed=14)]),
    OpCase("heaviside_int", lambda a: torch.heaviside(a, torch.tensor(7)), [I64], khronos=False),
    # sinc, logit
    OpCase("sinc", torch.sinc, [SINC_X]),
    OpCase("sinc_special_int", torch.special.sinc, [I64], khronos=False),
    OpCase("sinc_dyn", lambda a: a.sinc(), [F32], dynamic_axes=DYN1),
    OpCase("logit", torch.logit, [PROB]),
    OpCase("logit_eps", lambda a: torch.logit(a, 1e-6), [PROB]),
    OpCase("logit_special_eps", lambda a: torch.special.logit(a, eps=0.1), [torch.rand(2, 5, 4, generator=torch.Generator().manual_seed(3))]),
    # ldexp, float_power
    OpCase("ldexp", torch.ldexp, [F32, randint(-6, 7, 2, 5, 4, seed=15)], khronos=False),
    OpCase("ldexp_float_exponent", lambda a, e: a.ldexp(e), [F32, randint(-6, 7, 2, 5, 4, seed=15).float()]),
    OpCase("float_power", torch.float_power, [F32.abs() + 0.1, F32], khronos=False),
    OpCase("float_power_scalar", lambda a: a.float_power(2), [F32], khronos=False),
    # nanmean, nansum
    OpCase("nanmean_dim", lambda a: torch.nanmean(a, 1), [NANS]),
    OpCase("nanmean_all", torch.nanmean, [NANS]),
    OpCase("nanmean_keep_dyn", lambda a: a.nanmean(-1, keepdim=True), [NANS], dynamic_axes=DYN1),
    OpCase("nansum_dyn", lambda a: torch.nansum(a, 2), [NANS], dynamic_axes=DYN1),
    # trapezoid
    OpCase("trapz_dx", lambda a: torch.trapz(a, dx=0.5, dim=1), [F32]),
    OpCase("trapezoid_default", torch.trapezoid, [F32]),
    OpCase("trapezoid_x", lambda y, x: torch.trapezoid(y, x, dim=1), [F32, torch.tensor([0.0, 0.5, 1.5, 2.0, 4.0])]),
    OpCase("trapz_x_same_rank", lambda y, x: torch.trapz(y, x), [F32, F32.cumsum(-1)]),
    OpCase("trapezoid_dyn", lambda y: torch.trapezoid(y, dim=1), [F32], dynamic_axes=DYN1),
    # logcumsumexp
    OpCase("logcumsumexp", lambda a: torch.logcumsumexp(a, 1), [F32]),
    OpCase("logcumsumexp_edges", lambda a: torch.logcumsumexp(a, -1), [CUM]),
    OpCase("logcumsumexp_dim0_method", lambda a: a.logcumsumexp(0), [randn(9, 3, seed=16) * 30]),
    OpCase("logcumsumexp_f16", lambda a: torch.logcumsumexp(a, 1), [F16], khronos=False),
    OpCase("logcumsumexp_dyn_axis", lambda a: torch.logcumsumexp(a, 1), [F32 * 40], dynamic_axes=DYN1),
    OpCase("logcumsumexp_dyn_edges", lambda a: torch.logcumsumexp(a, 1), [CUM], dynamic_axes=DYN1),
    OpCase("logcumsumexp_other_axis_dyn", lambda a: torch.logcumsumexp(a, 2), [F32], dynamic_axes=DYN1),
    # diagonal
    OpCase("diagonal", torch.diagonal, [randn(4, 6, seed=17)]),
    OpCase("diagonal_offset_dims", lambda a: torch.diagonal(a, 1, 1, 2), [SQ]),
    OpCase("diagonal_neg_offset", lambda a: a.diagonal(-2, -2, -1), [randn(2, 5, 3, seed=18)]),
    OpCase("diagonal_dims_reversed", lambda a: a.diagonal(offset=1, dim1=2, dim2=0), [randn(3, 2, 5, seed=19)]),
    OpCase("diagonal_length_one", lambda a: a.diagonal(3), [randn(4, 4, seed=20)]),
    OpCase("diagonal_int", lambda a: a.diagonal(0, 1, 2), [I64], khronos=False),
    OpCase("diagonal_dyn_square", lambda a: torch.diagonal(a, 0, -2, -1), [SQ],
           dynamic_axes={"x0": {1: "N", 2: "N"}}),
    OpCase("diagonal_dyn_square_offset", lambda a: a.diagonal(1, 1, 2), [randn(2, 5, 5, seed=21)],
           dynamic_axes={"x0": {1: "N", 2: "N"}}),
    OpCase("diagonal_dyn_batch", lambda a: a.diagonal(-1, 1, 2), [SQ], dynamic_axes={"x0": {0: "B"}}),
    # min(S, 4) and min(S - 1, 5) items, written as tract reads them (refused before: one size is dynamic)
    OpCase("diagonal_min_of_sizes", lambda a: a.diagonal(0, 1, 2), [randn(2, 5, 4, seed=50)], khronos=False,
           dynamic_axes={"x0": {1: "S"}}),
    OpCase("diagonal_min_of_sizes_offset", lambda a: a.diagonal(1, 1, 2), [randn(2, 5, 5, seed=51)], khronos=False,
           dynamic_axes={"x0": {2: "S"}}),
    # diag_embed, diag
    OpCase("diag_embed", torch.diag_embed, [F32]),
    OpCase("diag_embed_offset", lambda a: torch.diag_embed(a, 2), [F32]),
    OpCase("diag_embed_neg_offset_dims", lambda a: torch.diag_embed(a, -1, 0, 2), [F32]),
    OpCase("diag_embed_dims_reversed", lambda a: a.diag_embed(1, -1, 1), [V3]),
    OpCase("diag_embed_dyn", lambda a: torch.diag_embed(a, 1), [F32], dynamic_axes={"x0": {2: "N"}}),
    OpCase("diag_embed_dyn_batch", torch.diag_embed, [F32], dynamic_axes=DYN1),
    OpCase("diag_1d", lambda a: torch.diag(a[0, 0]), [F32]),
    OpCase("diag_1d_offset", lambda a: torch.diag(a, -2), [randn(4, seed=23)]),
    OpCase("diag_2d", lambda a: a.diag(1), [randn(4, 6, seed=24)]),
    OpCase("diag_2d_dyn", torch.diag, [randn(5, 5, seed=25)], dynamic_axes={"x0": {0: "N", 1: "N"}}),
    # cross
    OpCase("cross_dim", lambda a, b: torch.cross(a, b, dim=1), [V3, W3]),
    OpCase("cross_default_dim", torch.cross, [V3, W3]),
    OpCase("linalg_cross", torch.linalg.cross, [randn(4, 3, seed=26), randn(4, 3, seed=27)]),
    OpCase("linalg_cross_broadcast", lambda a, b: torch.linalg.cross(a, b, dim=1), [V3, randn(1, 3, 1, seed=28)]),
    OpCase("cross_method_int", lambda a, b: a.cross(b, dim=-1), [randint(-5, 6, 4, 3, seed=29), randint(-5, 6, 4, 3, seed=30)],
           khronos=False),
    OpCase("cross_dyn", lambda a, b: torch.linalg.cross(a, b), [randn(5, 3, seed=31), randn(5, 3, seed=32)],
           dynamic_axes={"x0": {0: "S"}, "x1": {0: "S"}}),
    # index_copy
    OpCase("index_copy_const", lambda a, s: a.index_copy(1, torch.tensor([3, 0]), s), [F32, randn(2, 2, 4, seed=33)]),
    OpCase("index_copy_fn_last_dim", lambda a, s: torch.index_copy(a, -1, torch.tensor([1, 2, 0]), s),
           [F32, randn(2, 5, 3, seed=34)]),
    OpCase("index_copy_tensor_index", lambda a, i, s: a.index_copy(0, i, s),
           [randn(6, 3, seed=35), torch.tensor([4, 1, 5]), randn(3, 3, seed=36)], khronos=False),
    OpCase("index_copy_inplace", lambda a, s: a.clone().index_copy_(2, torch.tensor([0, 3]), s),
           [F32, randn(2, 5, 2, seed=37)]),
    OpCase("index_copy_dyn", lambda a, s: a.index_copy(2, torch.tensor([2, 0]), s), [F32, randn(2, 5, 2, seed=38)],
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    # masked_scatter
    OpCase("masked_scatter", lambda a, m, s: a.masked_scatter(m, s), [F32, MASK, randn(50, seed=39)], khronos=False),
    OpCase("masked_scatter_broadcast_mask", lambda a, m, s: torch.masked_scatter(a, m, s),
           [F32, randbool(5, 1, seed=40), randn(6, 7, seed=41)], khronos=False),
    OpCase("masked_scatter_int", lambda a, m, s: a.masked_scatter(m, s), [I64, MASK, randint(0, 9, 2, 5, 4, seed=42)],
           khronos=False),
    OpCase("masked_scatter_dyn", lambda a, m, s: a.masked_scatter(m, s), [F32, MASK, randn(2, 5, 4, seed=43)],
           khronos=False, dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}, "x2": {1: "S"}}),
    # median, nanmedian
    OpCase("median_dim", lambda a: pair(torch.median(a, 1)), [F32], khronos=False),
    OpCase("median_dim_even_keep", lambda a: pair(a.median(-1, keepdim=True)), [F32], khronos=False),
    OpCase("median_all", torch.median, [F32], khronos=False),
    OpCase("median_int", lambda a: pair(torch.median(a, 2)), [randint(-50, 50, 2, 3, 7, seed=44) * 100
                                                              + torch.arange(7)], khronos=False),
    OpCase("median_ties_values", lambda a: torch.median(a, 1).values, [TIES], khronos=False),
    OpCase("median_nan", lambda a: pair(torch.median(a, 1)), [MEDIAN_NAN], khronos=False),
    OpCase("median_dyn", lambda a: pair(torch.median(a, 1)), [F32], khronos=False, dynamic_axes=DYN1),
    OpCase("median_other_axis_dyn", lambda a: pair(torch.median(a, 2)), [F32], khronos=False, dynamic_axes=DYN1),
    OpCase("nanmedian_dim", lambda a: pair(torch.nanmedian(a, 1)), [MEDIAN_NAN[:2]], khronos=False),
    OpCase("nanmedian_values", lambda a: torch.nanmedian(a, 1).values, [MEDIAN_NAN], khronos=False),
    OpCase("nanmedian_all", torch.nanmedian, [NANS], khronos=False),
    OpCase("nanmedian_dyn", lambda a: torch.nanmedian(a, 1)[0], [NANS], khronos=False, dynamic_axes=DYN1),
    OpCase("kthvalue_dyn", lambda a: torch.kthvalue(a, 2, 1).values, [F32], khronos=False, dynamic_axes=DYN1),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_refused_khronos(tmp_path):
    """Standard NNEF has no scatter: index_copy with a tensor index and masked_scatter are refused there."""
    with pytest.raises(fx2nnef.UnsupportedOpError, match="constant index"):
        run_case(OpCase("ic", lambda a, i, s: a.index_copy(0, i, s),
                        [randn(6, 3), torch.tensor([4, 1, 5]), randn(3, 3)]), tmp_path, "khronos")
    with pytest.raises(fx2nnef.UnsupportedOpError):
        run_case(OpCase("ms", lambda a, m, s: a.masked_scatter(m, s), [F32, MASK, randn(50)]), tmp_path, "khronos")
