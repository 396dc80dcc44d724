"""Ops users expect beyond the basics: numpy-style stacks and splits, running products and
extremes, kthvalue, flips and rotations, splits and stepped item assignment on dynamic axes,
dynamic sizes used as indices. Each case is exported and run in tract (at the example size and
at a second size for dynamic axes) and, where a standard form exists, in nnef_tools."""
import pytest
import torch

import fx2nnef
from harness import OpCase, check_op, randbool, randint, randn, run_case

F32 = randn(2, 6, 4)
F16 = randn(2, 6, 4, dtype=torch.float16)
I64 = randint(-5, 5, 2, 6, 4)
TIES = randint(0, 3, 3, 7, seed=3).float()  # many equal values
DYN0 = {"x0": {0: "B"}}
DYN1 = {"x0": {1: "S"}}
TRACT = dict(khronos=False)


def pieces(fn):
    """Multi-output ops return a tuple of tensors."""
    return lambda *xs: tuple(fn(*xs))


def assigned(index, value=None):
    """``x[index] = value`` (the value given as a second input when None)."""
    def fn(x, *v):
        x = x.clone()
        x[index] = v[0] if value is None else value
        return x
    return fn


CASES = [
    # numpy-style stacks
    OpCase("vstack", lambda x, y: torch.vstack([x, y]), [randn(3, 4), randn(2, 4, seed=1)]),
    OpCase("vstack_1d", lambda x, y: torch.vstack((x, y)), [randn(4), randn(4, seed=1)]),
    OpCase("row_stack_i64", lambda x: torch.row_stack([x, x]), [I64], **TRACT),
    OpCase("hstack", lambda x, y: torch.hstack([x, y]), [randn(3, 4), randn(3, 2, seed=1)]),
    OpCase("hstack_1d", lambda x, y: torch.hstack([x, y]), [randn(4), randn(2, seed=1)]),
    OpCase("dstack", lambda x, y: torch.dstack([x, y]), [randn(3, 4), randn(3, 4, seed=1)]),
    OpCase("dstack_3d", lambda x: torch.dstack([x, x * 2]), [F32]),
    OpCase("column_stack", lambda x, y: torch.column_stack([x, y]), [randn(5), randn(5, 2, seed=1)]),
    OpCase("atleast_2d", lambda x: torch.atleast_2d(x) * 2, [randn(5)], **TRACT),
    OpCase("atleast_3d_many", pieces(lambda x, y: torch.atleast_3d(x, y)), [randn(5), randn(2, 5)], **TRACT),
    OpCase("vstack_dyn", lambda x: torch.vstack([x, x[:1]]), [randn(3, 4)], dynamic_axes=DYN0, **TRACT),
    OpCase("hstack_dyn", lambda x: torch.hstack([x, x]), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("column_stack_f16", lambda x: torch.column_stack([x, x]), [randn(3, 2, dtype=torch.float16)], **TRACT),
    # splits
    OpCase("tensor_split_sections", pieces(lambda x: torch.tensor_split(x, 4, dim=1)), [F32]),
    OpCase("tensor_split_indices", pieces(lambda x: x.tensor_split([1, 4], 1)), [F32]),
    OpCase("tensor_split_neg_index", pieces(lambda x: x.tensor_split((2, -1), -1)), [F32], **TRACT),
    OpCase("tensor_split_kw", pieces(lambda x: torch.tensor_split(x, indices=[3], dim=1)), [I64], **TRACT),
    OpCase("tensor_split_tensor", pieces(lambda x: torch.tensor_split(x, torch.tensor([1, 3]), 1)), [F32], **TRACT),
    OpCase("hsplit", pieces(lambda x: torch.hsplit(x, 3)), [F32]),
    OpCase("vsplit_indices", pieces(lambda x: x.vsplit([1])), [F32], **TRACT),
    OpCase("dsplit", pieces(lambda x: torch.dsplit(x, 2)), [F32], **TRACT),
    OpCase("split_with_sizes", pieces(lambda x: x.split_with_sizes([2, 4], 1)), [F32], **TRACT),
    # splits on a dynamic axis (checked in tract at S=6 and S=3)
    OpCase("chunk2_dyn", pieces(lambda x: x.chunk(2, 1)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("chunk3_dyn", pieces(lambda x: torch.chunk(x, 3, dim=1)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("chunk3_dyn_cat", lambda x: torch.cat(x.chunk(3, 1)[::-1], 1), [randn(2, 9, 4)], dynamic_axes=DYN1, **TRACT),
    OpCase("chunk_dyn_batch_i64", pieces(lambda x: x.chunk(2, 0)), [randint(0, 9, 4, 3)], dynamic_axes=DYN0, **TRACT),
    OpCase("split_list_dyn", pieces(lambda x: x.split([2, x.shape[1] - 2], 1)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("split_half_up_dyn", pieces(lambda x: x.split((x.shape[1] + 1) // 2, 1)), [randn(2, 8, 4)],
           dynamic_axes=DYN1, **TRACT),
    OpCase("tensor_split_dyn", pieces(lambda x: torch.tensor_split(x, 4, 1)), [randn(2, 11, 3)], dynamic_axes=DYN1, **TRACT),
    OpCase("tensor_split_dyn3", pieces(lambda x: x.tensor_split(3, dim=1)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("tensor_split_indices_dyn", pieces(lambda x: x.tensor_split([1, 4], 1)), [randn(2, 10, 3)],
           dynamic_axes=DYN1, **TRACT),
    # running products and extremes
    OpCase("cumprod", lambda x: torch.cumprod(x, 1), [F32]),
    OpCase("cumprod_last", lambda x: x.cumprod(-1), [randn(3, 9)], **TRACT),
    OpCase("cumprod_i64", lambda x: x.cumprod(dim=1), [I64], **TRACT),
    OpCase("cumprod_bool", lambda x: x.cumprod(0), [randbool(5, 3)], **TRACT),
    OpCase("cumprod_dtype", lambda x: torch.cumprod(x, 0, dtype=torch.float32), [I64], **TRACT),
    OpCase("cumprod_f16", lambda x: x.cumprod(1), [randn(2, 5, dtype=torch.float16) * 0.5 + 1], **TRACT),
    OpCase("cumprod_dyn", lambda x: x.cumprod(1), [F32 * 0.3 + 1], dynamic_axes=DYN1, **TRACT),
    OpCase("cumprod_dyn_i64", lambda x: x.cumprod(dim=0), [randint(-3, 4, 5, 3)], dynamic_axes=DYN0, **TRACT),
    OpCase("cumprod_dyn_other_axis", lambda x: x.cumprod(2), [F32 * 0.3 + 1], dynamic_axes=DYN1, **TRACT),
    OpCase("cummax", pieces(lambda x: torch.cummax(x, 1)), [TIES], **TRACT),
    OpCase("cummax_values", lambda x: x.cummax(0).values, [F32], **TRACT),
    OpCase("cummin", pieces(lambda x: torch.cummin(x, dim=-1)), [TIES], **TRACT),
    OpCase("cummax_i64", pieces(lambda x: x.cummax(2)), [I64], **TRACT),
    OpCase("cummin_bool", pieces(lambda x: x.cummin(1)), [randbool(3, 6)], **TRACT),
    OpCase("cummax_nan", pieces(lambda x: x.cummax(1)),
           [torch.tensor([[1.0, float("nan"), 3.0, 2.0, float("nan"), 0.0], [2.0, 2.0, 1.0, 5.0, 5.0, 0.0]])], **TRACT),
    OpCase("cummax_dyn_batch", pieces(lambda x: x.cummax(1)), [randint(0, 3, 2, 6, 3).float()], dynamic_axes=DYN0,
           **TRACT),
    OpCase("cummin_dyn_other_axis", pieces(lambda x: x.cummin(2)), [I64], dynamic_axes=DYN1, **TRACT),
    OpCase("kthvalue", lambda x: torch.kthvalue(x, 3, 1).values, [TIES], **TRACT),
    OpCase("kthvalue_keepdim", lambda x: x.kthvalue(2, dim=0, keepdim=True)[0], [F32], **TRACT),
    OpCase("kthvalue_distinct_i64", lambda x: x.kthvalue(4).values, [torch.randperm(24).view(2, 12)], **TRACT),
    OpCase("kthvalue_dyn", lambda x: x.kthvalue(2, -1).values, [F32], dynamic_axes=DYN1, **TRACT),
    # flips and rotations
    OpCase("fliplr", lambda x: torch.fliplr(x), [F32]),
    OpCase("flipud", lambda x: x.flipud(), [I64], **TRACT),
    OpCase("flipud_dyn", lambda x: x.flipud(), [F32], dynamic_axes=DYN0, **TRACT),
    *[OpCase(f"rot90_k{k}", lambda x, k=k: torch.rot90(x, k), [randn(3, 5)]) for k in (-3, -1, 0, 1, 2, 3, 6)],
    OpCase("rot90_dims", lambda x: x.rot90(1, (2, 0)), [F32]),
    OpCase("rot90_neg_dims", lambda x: torch.rot90(x, -1, [-1, -2]), [I64], **TRACT),
    OpCase("rot90_dyn", lambda x: x.rot90(1, [1, 2]), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("narrow_copy", lambda x: x.narrow_copy(1, 1, 3), [F32]),
    OpCase("narrow_copy_kw", lambda x: torch.narrow_copy(x, dim=2, start=1, length=2), [F32], **TRACT),
    # item assignment with a step
    OpCase("set_step_value", assigned((slice(None), slice(None, None, 2))), [F32, randn(2, 3, 4, seed=1)]),
    OpCase("set_step_scalar", assigned(slice(1, None, 3), 0.0), [randn(7, 3)]),
    OpCase("set_step_2d", assigned((slice(None, None, 2), slice(1, None, 2)), -1.0), [F32]),
    OpCase("set_step_int_axis", assigned((slice(None), slice(1, 6, 2), 0)), [F32, randn(3, seed=2)]),
    OpCase("set_step_i64", assigned((Ellipsis, slice(None, None, 3)), 7), [I64], **TRACT),
    OpCase("set_step_bool", assigned((slice(None), slice(None, None, 2)), True), [randbool(3, 5)], **TRACT),
    OpCase("set_step_dyn", assigned(slice(1, None, 3), 0.0), [randn(7, 3)], dynamic_axes=DYN0, **TRACT),
    OpCase("set_step_dyn_value", lambda x: assigned((slice(None), slice(None, None, 2)))(x, x[:, ::2] * 2), [F32],
           dynamic_axes=DYN1, **TRACT),
    OpCase("set_step_dyn_other_axis", assigned((slice(None), slice(None), slice(None, None, 2)), 1.0), [F32],
           dynamic_axes=DYN1, **TRACT),
    # strided reads of a dynamic axis (the length is a floor division)
    OpCase("read_step_dyn", lambda x: x[:, ::2] + 1, [randn(2, 7, 4)], dynamic_axes=DYN1, **TRACT),
    OpCase("read_step_offset_dyn", lambda x: x[:, 1::3] * 2, [randn(2, 7, 4)], dynamic_axes=DYN1, **TRACT),
    OpCase("read_step_cat_dyn", lambda x: torch.cat([x[:, ::2], x[:, 1::2]], 1), [randn(2, 7, 4)],
           dynamic_axes=DYN1, **TRACT),
    # a dynamic size used as an index or a length
    OpCase("slice_half_dyn", lambda x: x[:, : x.shape[1] // 2], [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("slice_from_half_dyn", lambda x: x[:, x.size(1) // 2:] * 2, [randn(2, 7, 4)], dynamic_axes=DYN1, **TRACT),
    OpCase("narrow_dyn_length", lambda x: x.narrow(1, 0, x.shape[1] - 1), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("narrow_dyn_start", lambda x: x.narrow(1, x.shape[1] - 2, 2), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("select_dyn_last", lambda x: x.select(1, x.shape[1] - 1), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("index_dyn_last", lambda x: x[:, x.shape[1] - 1], [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("set_dyn_half", assigned((slice(None), slice(None, 3)), 0.0), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("set_dyn_tail", lambda x: assigned((slice(None), slice(x.shape[1] // 2, None)), 0.0)(x), [F32],
           dynamic_axes=DYN1, **TRACT),
    OpCase("roll_dyn_dims", lambda x: torch.roll(x, (1, -1), (1, 2)), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("take_along_dim_dyn", lambda x: torch.take_along_dim(x, x.argsort(dim=1), dim=1), [F32],
           dynamic_axes=DYN1, **TRACT),
    OpCase("movedim_lists_dyn", lambda x: x.movedim([0, 1], [2, 0]), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("diff_dyn", lambda x: torch.diff(x, dim=1), [F32], dynamic_axes=DYN1, **TRACT),
    # triangular solves (gated delta nets solve a unit lower-triangular system per chunk)
    OpCase("solve_triangular_unit_lower",
           lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
           [randn(2, 3, 16, 16, seed=4) * 0.3, randn(2, 3, 16, 5, seed=5)]),
    OpCase("solve_triangular_upper", lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
           [randn(6, 6, seed=6) * 0.3 + 2 * torch.eye(6), randn(6, 2, seed=7)]),
    OpCase("solve_triangular_right_lower_broadcast",
           lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, left=False),
           [randn(1, 5, 5, seed=8) * 0.3 + 2 * torch.eye(5), randn(3, 4, 5, seed=9)]),
    OpCase("solve_triangular_dynamic_batch",
           lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
           [randn(3, 8, 8, seed=10), randn(3, 8, 2, seed=11)], dynamic_axes={"x0": {0: "B"}, "x1": {0: "B"}}, **TRACT),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# calls by keyword, as models write them ------------------------------------------------------
KEYWORD_CASES = [
    OpCase("baddbmm_kw", lambda c, a, b: c.baddbmm(batch1=a, batch2=b, beta=0.5, alpha=2.0),
           [randn(2, 3, 5), randn(2, 3, 4, seed=1), randn(2, 4, 5, seed=2)]),
    OpCase("torch_baddbmm_kw", lambda c, a, b: torch.baddbmm(input=c, batch1=a, batch2=b, beta=0.0),
           [randn(2, 3, 5), randn(2, 3, 4, seed=1), randn(2, 4, 5, seed=2)], **TRACT),
    OpCase("bmm_kw", lambda a, b: a.bmm(mat2=b), [randn(2, 3, 4), randn(2, 4, 5, seed=1)], **TRACT),
    OpCase("addmm_kw", lambda c, a, b: torch.addmm(c, mat1=a, mat2=b, alpha=0.5),
           [randn(3, 5), randn(3, 4, seed=1), randn(4, 5, seed=2)], **TRACT),
    OpCase("max_kw", pieces(lambda x: torch.max(input=x, dim=1, keepdim=True)), [F32], **TRACT),
    OpCase("view_size_kw", lambda x: x.view(size=(12, 4)), [F32]),
    OpCase("reshape_shape_kw", lambda x: x.reshape(shape=(4, -1)), [F32], **TRACT),
    OpCase("expand_size_kw", lambda x: x[:, :1].expand(size=(2, 6, 4)), [F32], **TRACT),
    OpCase("permute_dims_kw", lambda x: x.permute(dims=(2, 0, 1)), [F32], **TRACT),
    OpCase("pow_exponent_kw", lambda x: x.pow(exponent=2), [F32], **TRACT),
    OpCase("to_tensor_kw", lambda x, y: x.to(tensor=y), [F32, I64], **TRACT),
    OpCase("split_kw", pieces(lambda x: torch.split(x, split_size_or_sections=[2, 4], dim=1)), [F32], **TRACT),
    OpCase("split_method_kw", pieces(lambda x: x.split(split_size=2, dim=-1)), [F32], **TRACT),
    OpCase("chunk_kw", pieces(lambda x: x.chunk(chunks=3, dim=1)), [F32], **TRACT),
    OpCase("gather_kw", lambda x, i: torch.gather(x, dim=1, index=i), [F32, randint(0, 6, 2, 3, 4)], **TRACT),
    OpCase("narrow_kw", lambda x: x.narrow(dim=1, start=2, length=3), [F32], **TRACT),
    OpCase("one_hot_kw", lambda x: torch.nn.functional.one_hot(input=x, num_classes=5), [randint(0, 5, 6)], **TRACT),
    OpCase("vector_norm_kw", lambda x: torch.linalg.vector_norm(input=x, dim=-1), [F32], **TRACT),
    OpCase("norm_method_dtype", lambda x: x.norm(2, 1, False, torch.float32), [F32], **TRACT),
    OpCase("subtract_alpha_positional", lambda x: torch.subtract(x, 1.0, 3), [F32], **TRACT),
    OpCase("arange_end_kw", lambda x: x[: x.shape[0]] + torch.arange(end=4), [randn(3, 4)], **TRACT),
    OpCase("cumsum_kw", lambda x: x.cumsum(dim=1, dtype=torch.float32), [F32], **TRACT),
]


@pytest.mark.parametrize("case", KEYWORD_CASES, ids=str)
def test_keyword_calls_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in KEYWORD_CASES if c.khronos], ids=str)
def test_keyword_calls_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# what cannot be exported says so -------------------------------------------------------------
@pytest.mark.parametrize("fn,match", [
    (pieces(lambda x: x.split(2, 1)), "valid at a few sizes only"),  # the number of pieces follows S
    (pieces(lambda x: x.chunk(4, 1)), "valid at a few sizes only"),  # chunk(4) of 6 is 3 pieces, of 7 is 4
    (pieces(lambda x: x.unbind(1)), "tensors here"),
    (pieces(lambda x: x.split(x.shape[1] // 2, 1)), "returns 3 tensors here"),  # 2 pieces at even S, 3 at odd
], ids=["split_int", "chunk_count_varies", "unbind", "split_half_down"])
def test_piece_count_that_follows_a_dynamic_size_is_refused(fn, match, tmp_path):
    with pytest.raises(fx2nnef.GuardError, match=match):
        check_op(fn, [F32], tmp_path, dynamic_axes=DYN1)


@pytest.mark.parametrize("fn", [lambda x: x.cummax(1).values, lambda x: x.cummin(1).values], ids=["cummax", "cummin"])
def test_scan_along_a_dynamic_axis(fn, tmp_path):
    """Along a dynamic axis: [n, n] prefix selections (tests/test_odd_python2.py has indices, ties, NaN)."""
    r = check_op(fn, [F32], tmp_path, dynamic_axes=DYN1)
    assert r.check.ok and len(r.check.cases) >= 3


def test_kthvalue_indices_are_refused(tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match="selection algorithm"):
        check_op(pieces(lambda x: x.kthvalue(2, 1)), [TIES], tmp_path)


def test_kthvalue_has_no_standard_form(tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match="kthvalue"):
        check_op(lambda x: x.kthvalue(2, 1).values, [F32], tmp_path, target="khronos")


def test_unbind_of_dynamic_axis_names_the_fix(tmp_path):
    from fx2nnef.ir import DType, Graph, Node
    from fx2nnef.nnef_emit.emitter import emit_graph

    g = Graph("g")
    g.symbols = ["S"]
    from fx2nnef.ir import SymDim

    x = g.add_input("x", DType.F32, (2, SymDim.symbol("S")))
    out = g.new_value("y", DType.F32, (2,))
    g.add_node(Node("Tensor.unbind", (x, 1), {}, [out]))
    g.outputs, g.output_names = [out], ["y"]
    with pytest.raises(fx2nnef.UnsupportedOpError, match="index the items you need"):
        emit_graph(g, "tract")
