"""Creation ops (arange, zeros/ones/full/empty, *_like, new_*, tensor, eye) with dynamic sizes and templates.

Creations that depend neither on input data nor on dynamic sizes are folded into constants by
the tracer, so every case here takes its sizes from a dynamic axis or its shape from an input.
"""
import pytest
import torch

import fx2nnef
from harness import OpCase, randbool, randint, randn, run_case

F32 = randn(2, 3)
F16 = randn(2, 3, dtype=torch.float16)
I64 = randint(-5, 5, 2, 3)
B = randbool(2, 3)
DYN_S = {"x0": {1: "S"}}
DYN_B = {"x0": {0: "B"}}

CASES = [
    # meshgrid (ij and xy) and linspace, also over dynamic sizes
    OpCase("meshgrid_ij", lambda a, b: tuple(torch.meshgrid(a, b, indexing="ij")), [randn(3), randn(4, seed=1)]),
    OpCase("meshgrid_xy_three", lambda a, b, c: tuple(torch.meshgrid(a, b, c, indexing="xy")),
           [randn(3), randn(4, seed=1), randn(2, seed=2)], khronos=False),
    OpCase("meshgrid_positions_dyn", lambda x: x[..., None] + torch.stack(torch.meshgrid(
        torch.arange(x.shape[0]), torch.arange(x.shape[1]), indexing="ij"), -1).float(), [F32], khronos=False,
           dynamic_axes={"x0": {0: "B", 1: "S"}}),
    OpCase("linspace_dyn", lambda x: x * torch.linspace(-1.0, 2.5, x.shape[1]), [randn(2, 7)], khronos=False,
           dynamic_axes=DYN_S),
    # arange: one, two and three bounds, dtypes, symbolic bounds
    OpCase("arange_end", lambda x: torch.arange(x.shape[1]), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("arange_start_end", lambda x: torch.arange(2, x.shape[1] + 3), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("arange_step", lambda x: torch.arange(1, x.shape[1] + 4, 2), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("arange_neg_step", lambda x: torch.arange(x.shape[1], 0, -1), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("arange_f32", lambda x: torch.arange(x.shape[1], dtype=torch.float32) * x, [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("arange_float_step1", lambda x: torch.arange(0, x.shape[1], 1.0), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("arange_f16", lambda x: torch.arange(x.shape[1], dtype=torch.float16) + x, [F16], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("arange_positions", lambda x, p: torch.arange(p.shape[1], p.shape[1] + x.shape[1]), [F32, randn(1, 4)],
           khronos=False, dynamic_axes={"x0": {1: "S"}, "x1": {1: "P"}}),
    # zeros / ones / full / empty with symbolic sizes
    OpCase("zeros_varargs", lambda x: torch.zeros(x.shape[0], 4, x.shape[1]), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("zeros_list_i64", lambda x: torch.zeros([x.shape[0], 4], dtype=torch.int64), [F32], khronos=False,
           dynamic_axes=DYN_B),
    OpCase("ones_tuple", lambda x: torch.ones((x.shape[1], 2)), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("ones_bool", lambda x: torch.ones(x.shape[1], dtype=torch.bool), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("full_float", lambda x: torch.full((x.shape[1], 2), 3.5), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("full_int", lambda x: torch.full((x.shape[1] + 1,), 7), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("full_dynamic_value", lambda x: torch.full((2, x.shape[1]), x.shape[1]), [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("full_finfo_min", lambda x: torch.full((x.shape[1], x.shape[1]), torch.finfo(torch.float32).min), [F32],
           khronos=False, dynamic_axes=DYN_S),
    OpCase("full_tensor_value", lambda v: torch.full((2, 2), v), [randn(())]),
    OpCase("full_tensor_value_dyn", lambda x, v: torch.full((x.shape[1], 2), v), [F32, randn(())], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("full_tensor_value_i64", lambda x, v: torch.full((x.shape[1],), v), [F32, randint(0, 9, *())], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("empty_shape", lambda x: torch.ones_like(torch.empty(x.shape[1], 2)), [F32], khronos=False,
           dynamic_axes=DYN_S),
    # *_like on inputs (static for Khronos, dynamic for tract)
    OpCase("zeros_like", lambda x: torch.zeros_like(x) + x, [F32]),
    OpCase("zeros_like_dyn", torch.zeros_like, [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("ones_like", torch.ones_like, [F32]),
    OpCase("ones_like_f16", torch.ones_like, [F16], khronos=False),
    OpCase("ones_like_i64", torch.ones_like, [I64], khronos=False, dynamic_axes=DYN_B),
    OpCase("ones_like_bool", torch.ones_like, [B], khronos=False),
    OpCase("zeros_like_dtype", lambda x: torch.zeros_like(x, dtype=torch.int64), [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("full_like", lambda x: torch.full_like(x, 7), [F32]),
    OpCase("full_like_dyn", lambda x: torch.full_like(x, -2.5), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("full_like_i64", lambda x: torch.full_like(x, 3), [I64], khronos=False),
    OpCase("full_like_tensor_value", lambda x, v: torch.full_like(x, v), [F32, randn(())], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("empty_like", lambda x: torch.ones_like(torch.empty_like(x)), [F32], khronos=False, dynamic_axes=DYN_B),
    # Tensor.new_*
    OpCase("new_zeros", lambda x: x.new_zeros(x.shape[1], 2), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("new_ones_tuple", lambda x: x.new_ones((x.shape[1], 2)), [I64], khronos=False, dynamic_axes=DYN_S),
    OpCase("new_ones_f16", lambda x: x.new_ones(x.shape), [F16], khronos=False, dynamic_axes=DYN_S),
    OpCase("new_full", lambda x: x.new_full((x.shape[0], 3), 1.25), [F32], khronos=False, dynamic_axes=DYN_B),
    OpCase("new_empty", lambda x: torch.ones_like(x.new_empty(x.shape[1])), [F32], khronos=False, dynamic_axes=DYN_S),
    # tensors built from dynamic sizes
    OpCase("tensor_dim", lambda x: torch.tensor(x.shape[1]), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("tensor_list", lambda x: torch.tensor([x.shape[1], 3, x.shape[1] * 2]), [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("scalar_tensor", lambda x: torch.div(x, torch.scalar_tensor(x.shape[1])), [F32], khronos=False,
           dynamic_axes=DYN_S),
    # signal windows over a dynamic length
    OpCase("windows_dyn", lambda x: x[:1] * torch.stack([
        torch.hann_window(x.shape[1]), torch.hann_window(x.shape[1], periodic=False),
        torch.hamming_window(x.shape[1], False, alpha=0.6, beta=0.4), torch.blackman_window(x.shape[1]),
        torch.bartlett_window(x.shape[1], periodic=False)]), [randn(2, 9)], khronos=False, dynamic_axes=DYN_S),
    # one_hot with as many classes as a dynamic size
    OpCase("one_hot_dyn_classes", lambda x: torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).float() * x,
           [randn(2, 5, 7)], khronos=False, dynamic_axes={"x0": {1: "S", 2: "C"}}),
    # eye with a dynamic size
    OpCase("eye_dyn", lambda x: torch.eye(x.shape[1]), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("eye_rect_i64", lambda x: torch.eye(x.shape[1], 4, dtype=torch.int64), [F32], khronos=False,
           dynamic_axes=DYN_S),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# Cases that once failed before reaching these converters (shared-code bugs, now fixed).
TRACER_BUGS = [
    OpCase("ones_like_scalar", torch.ones_like, [randn(())]),
    OpCase("new_tensor", lambda x: x.new_tensor([x.shape[1], 3]), [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("mul_by_dynamic_size", lambda x: x * x.shape[1], [F32], khronos=False, dynamic_axes=DYN_S),
    OpCase("truediv_name", lambda x, y: torch.exp(x / y), [F32, F32.abs() + 1], khronos=False),
]


@pytest.mark.parametrize("case", TRACER_BUGS, ids=str)
def test_tract_tracer_bugs(case, tmp_path):
    run_case(case, tmp_path, "tract")


def test_arange_from_tensor_data_exports_with_its_count(tmp_path):
    """torch.arange(n) of a 0-d integer input: as many items as n says (see test_data_bounds.py)."""
    from harness import FnModule, tract_matches_eager

    case = OpCase("arange_data", lambda n: torch.arange(n), [torch.tensor(4)], khronos=False)
    run_case(case, tmp_path, "tract")
    tract_matches_eager(tmp_path / "tract.nnef.tgz", FnModule(case.fn), [[torch.tensor(1)], [torch.tensor(7)]])


def test_arange_from_float_data_is_refused(tmp_path):
    case = OpCase("arange_data", lambda n: torch.arange(n), [torch.tensor(4.0)], khronos=False)
    with pytest.raises((fx2nnef.UnsupportedOpError, fx2nnef.TraceError)):
        run_case(case, tmp_path, "tract")


def test_windows_of_one_and_two_items(tmp_path):
    """A window of one item is [1] (torch's rule, not the formula's 0); two items, non periodic, end at 0 or 1."""
    from harness import FnModule, tract_matches_eager

    def fn(x):
        n = x.shape[1]
        return torch.stack([torch.hann_window(n, periodic=False), torch.hamming_window(n), torch.blackman_window(n, False),
                            torch.bartlett_window(n), torch.bartlett_window(n, False)]) * x[:1]

    model = FnModule(fn)
    r = fx2nnef.export(model, (randn(2, 6),), tmp_path / "w.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes=DYN_S))
    assert r.check.ok and not r.ranges
    tract_matches_eager(r.path, model, [[randn(2, n)] for n in (1, 2, 3, 64)])
