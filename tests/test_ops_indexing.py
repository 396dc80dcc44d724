"""Indexing, item assignment, gathers, masks and embeddings, exported and run in tract and nnef_tools."""
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.ir import op_key
from harness import OpCase, check_op, randbool, randint, randn, run_case

F32 = randn(2, 3, 4)
F16 = randn(2, 3, 4, dtype=torch.float16)
I64 = randint(-5, 5, 2, 3, 4)
B = randbool(2, 3, 4)
IDX = torch.tensor([2, 0])
DYN1 = {"x0": {1: "S"}}
TRACT = dict(khronos=False)  # no standard NNEF form, or covered by a sibling case
TRACT_ONLY = dict(khronos=False)


def assign(index, value=None):
    """``x[index] = value`` on a copy of x; ``value`` None means the second input."""
    def fn(x, *rest):
        x = x.clone()
        x[index] = rest[0] if value is None else value
        return x
    return fn


def set_at_input_index(x, i, v):
    x = x.clone()
    x[..., i] = v
    return x


def add_then_relu(x):
    x = x.clone()  # export runs the model several times: keep the example input intact
    x.add_(1)
    return torch.relu(x)


def copy_into_view(x, v):
    x = x.clone()
    x[:, 0:2].copy_(v)
    return x


def copy_broadcast(x, v):
    y = x.clone()
    y[:, 0:2].copy_(v)
    return y


def assign_mask_input(x, m):
    x = x.clone()
    x[m] = 1.0
    return x


def fill_view(x):
    x = x.clone()
    x[:, 1].fill_(2.5)
    return x


def zero_view(x):
    x = x.clone()
    x[0].zero_()
    return x


def mul_view_inplace(x):
    y = x.clone()
    y[:, :2].mul_(3)
    return y


def masked_assign(x):
    x = x.clone()
    x[x > 0] = 0.0
    return x


def kernel_border(k, v):
    k = k.clone()
    k[2:-2, 2:-2, :-1] = v
    return k


def slice_dyn_end(x):
    return x[:, : x.shape[1] - 1]


def assign_dyn(x, y):
    x = x.clone()
    x[:, 1 : x.shape[1] - 1] = y[:, 1 : x.shape[1] - 1]
    return x


CASES = [
    # reading
    OpCase("int", lambda x: x[1], [F32], **TRACT),
    OpCase("neg_int", lambda x: x[:, -1], [F32], **TRACT),
    OpCase("ints", lambda x: x[0, 2], [F32], **TRACT),
    OpCase("slice", lambda x: x[:, 1:3], [F32], **TRACT),
    OpCase("slice_neg", lambda x: x[..., -3:-1], [F32], **TRACT),
    OpCase("slice_open", lambda x: x[1:, :2], [F32], **TRACT),
    OpCase("slice_beyond", lambda x: x[:, :10], [F32], **TRACT),
    OpCase("slice_step", lambda x: x[:, ::2, 1::2], [F32]),
    OpCase("none", lambda x: x[:, None], [F32], **TRACT),
    OpCase("none_ellipsis", lambda x: x[None, ..., None, 1:], [F32]),
    OpCase("ellipsis_int", lambda x: x[..., 0], [F32], **TRACT),
    OpCase("bool_true", lambda x: x[True] * 2, [F32], **TRACT),
    OpCase("mixed", lambda x: x[1, None, :, -2:], [F32]),
    OpCase("tensor_index", lambda x: x[torch.tensor([1, 0, 1])], [F32], **TRACT),
    OpCase("tensor_index_input", lambda x, i: x[:, i], [F32, torch.tensor([2, 0, 1, 1])], **TRACT),
    OpCase("tensor_index_2d", lambda x: x[:, :, torch.tensor([[0, 1], [3, 2]])], [F32]),
    OpCase("tensor_index_and_int", lambda x: x[0, :, torch.tensor([3, 1])], [F32]),
    OpCase("tensor_index_neg", lambda x: x[:, torch.tensor([-1, 0])], [F32], **TRACT),
    OpCase("tensor_index_0d", lambda x, i: x[:, i], [F32, torch.tensor(2)], **TRACT),
    OpCase("list_index", lambda x: x[:, [0, 2]], [F32]),
    OpCase("index_i64", lambda x: x[:, 1:, 0], [I64], **TRACT),
    OpCase("index_bool", lambda x: x[0, ..., None], [B], **TRACT),
    OpCase("index_f16", lambda x: x[:, IDX], [F16], **TRACT_ONLY),
    OpCase("slice_dyn", lambda x: x[:, 1:-1], [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("slice_dyn_end", slice_dyn_end, [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("slice_dyn_tail", lambda x: x[:, -2:], [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("int_dyn", lambda x: x[:, -1], [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("narrow", lambda x: x.narrow(2, 1, 2), [F32]),
    OpCase("narrow_dyn", lambda x: torch.narrow(x, 1, 1, x.shape[1] - 1), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("select", lambda x: x.select(1, -1), [F32]),
    OpCase("select_torch", lambda x: torch.select(x, 0, 1), [I64], **TRACT),
    OpCase("index_select", lambda x: torch.index_select(x, 2, torch.tensor([3, 0, 0])), [F32]),
    OpCase("index_select_input", lambda x, i: x.index_select(1, i), [F32, torch.tensor([2, 1])], **TRACT),
    OpCase("gather", lambda x, i: torch.gather(x, 2, i), [F32, randint(0, 4, 2, 3, 5)], **TRACT),
    OpCase("gather_method_i64", lambda x, i: x.gather(1, i), [I64, randint(0, 3, 2, 2, 4)], **TRACT),
    OpCase("take_along_dim", lambda x, i: torch.take_along_dim(x, i, dim=2), [F32, randint(0, 4, 2, 3, 1)], **TRACT),
    OpCase("take_along_dim_flat", lambda x, i: torch.take_along_dim(x, i), [F32, randint(0, 24, 5)], **TRACT),
    OpCase("take_along_argmax", lambda x: x.take_along_dim(torch.tensor([[[1], [0], [3]]]), 2), [F32], **TRACT),
    OpCase("embedding", lambda i: F.embedding(i, torch.arange(40.0).reshape(10, 4)), [randint(0, 10, 2, 3)], **TRACT),
    OpCase("embedding_module", None, [randint(0, 10, 2, 3)], module=torch.nn.Embedding(10, 4, padding_idx=0)),
    OpCase("embedding_dyn", None, [randint(0, 10, 2, 3)], module=torch.nn.Embedding(10, 4), dynamic_axes={"x0": {1: "S"}}, **TRACT),
    # max_norm: rows read whose norm exceeds it are scaled to it (torch does so in the weights)
    OpCase("embedding_max_norm", lambda i: F.embedding(i, torch.arange(40.0).reshape(10, 4) / 8, max_norm=2.0),
           [randint(0, 10, 2, 5)], **TRACT),
    OpCase("embedding_max_norm_p1", lambda i: F.embedding(i, torch.arange(40.0).reshape(10, 4) / 8, max_norm=3.0,
                                                          norm_type=1.0), [randint(0, 10, 2, 5)]),
    OpCase("embedding_module_max_norm_dyn", None, [randint(0, 10, 2, 5)], module=torch.nn.Embedding(10, 4, max_norm=1.0),
           dynamic_axes={"x0": {1: "S"}}, **TRACT),
    # conditions and masks
    # a constant boolean mask (made in forward, or a buffer) reads its True positions: a gather
    OpCase("const_mask_last", lambda x: x[..., torch.tensor([True, False, True, True])], [F32]),
    OpCase("const_mask_two_axes", lambda x: x[:, torch.tensor([[True, False, True, False]] * 2 + [[False] * 3 + [True]])],
           [F32], **TRACT),
    OpCase("const_mask_first_dyn", lambda x: x[:, torch.tensor([False, True, True, False])] * 2, [randn(2, 4, 3)],
           dynamic_axes={"x0": {0: "B"}}, **TRACT),
    OpCase("where", lambda c, x, y: torch.where(c, x, y), [B, F32, randn(3, 4, seed=1)]),
    OpCase("where_scalar", lambda x: torch.where(x > 0, x, 0.0), [F32], **TRACT),
    OpCase("where_scalars_f16", lambda x: torch.where(x > 0, 1.0, x), [F16], **TRACT_ONLY),
    OpCase("where_i64", lambda x: torch.where(x > 0, x, -x), [I64], **TRACT),
    OpCase("where_method", lambda x: x.where(x > 0, torch.zeros(4)), [F32]),
    OpCase("masked_fill", lambda x: x.masked_fill(x > 0, -1e9), [F32]),
    OpCase("masked_fill_inf", lambda x: torch.masked_fill(x, x > 0.5, float("-inf")), [F32], **TRACT),
    OpCase("masked_fill_broadcast", lambda x, m: x.masked_fill(m, 3.0), [F32, randbool(3, 1)]),
    OpCase("masked_fill_tensor", lambda x: x.masked_fill(x < 0, torch.tensor(7.0)), [F32], **TRACT),
    OpCase("masked_fill_i64", lambda x: x.masked_fill(x < 0, 0), [I64], **TRACT),
    OpCase("masked_fill_f16", lambda x: x.masked_fill(x < 0, 2.0), [F16], **TRACT_ONLY),
    OpCase("triu", lambda x: x.triu(), [F32]),
    OpCase("tril_k", lambda x: torch.tril(x, -1), [F32]),
    OpCase("triu_k", lambda x: torch.triu(x, 2), [randn(5, 5)], **TRACT),
    OpCase("tril_i64", lambda x: x.tril(1), [I64], **TRACT),
    OpCase("triu_dyn", lambda x: x.triu(1), [randn(1, 4, 4)], dynamic_axes={"x0": {1: "S", 2: "S"}}, **TRACT),
    OpCase("one_hot", lambda i: F.one_hot(i, 5), [randint(0, 5, 2, 3)], **TRACT),
    # item assignment
    OpCase("set_slice", assign((slice(None), slice(None, 2))), [F32, randn(2, 2, 4, seed=1)], **TRACT),
    OpCase("set_slice_broadcast", assign((slice(None), slice(None, 2))), [F32, randn(4, seed=1)]),
    OpCase("set_scalar", assign((slice(None), slice(1, 3), slice(2, None)), 5.0), [F32], **TRACT),
    OpCase("set_int", assign(1), [F32, randn(3, 4, seed=1)]),
    OpCase("set_int_value_unit_axes", assign(0), [F32, randn(1, 3, 4, seed=1)], **TRACT),
    OpCase("set_int_neg", assign((slice(None), -1), 0.5), [F32], **TRACT),
    OpCase("set_ellipsis", assign((Ellipsis, 0)), [F32, randn(2, 3, seed=1)], **TRACT),
    OpCase("set_kernel_border", kernel_border, [randn(7, 7, 3), randn(3, 3, 2, seed=1)]),
    OpCase("set_i64", assign((0, slice(1, None)), 9), [I64], **TRACT),
    OpCase("set_bool", assign((slice(None), 0), True), [B], **TRACT),
    OpCase("set_f16", assign((slice(None), slice(None, 1))), [F16, randn(2, 1, 4, dtype=torch.float16, seed=1)], **TRACT_ONLY),
    OpCase("set_cast_value", assign((slice(None), slice(None, 2))), [F32, randint(0, 5, 2, 2, 4)], **TRACT),
    OpCase("set_dyn", assign((slice(None), slice(1, -1))), [F32, randn(2, 1, 4, seed=1)], dynamic_axes=DYN1, **TRACT),
    OpCase("set_dyn_sym_bounds", assign_dyn, [F32, randn(2, 3, 4, seed=1)], dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}, **TRACT),
    OpCase("set_dyn_scalar", assign((slice(None), slice(None), slice(None, 2)), 0.0), [F32], dynamic_axes=DYN1, **TRACT),
    OpCase("set_index_tensor", set_at_input_index, [F32, torch.tensor([3, 1]), randn(2, 3, 2, seed=1)], **TRACT),
    OpCase("set_index_const", assign((Ellipsis, torch.tensor([3, 1]))), [F32, randn(2, 3, 2, seed=1)]),
    OpCase("set_index_const_scalar", assign((slice(None), torch.tensor([0, 2])), -1.0), [F32], **TRACT),
    OpCase("set_index_i64", assign((Ellipsis, torch.tensor([-1])), 0), [I64], **TRACT),
    OpCase("set_mask", masked_assign, [F32]),
    OpCase("set_mask_input", assign_mask_input, [F32, B], **TRACT),
    OpCase("set_mask_partial", lambda x, m: assign(m, -2.0)(x), [F32, randbool(2, 3)]),
    OpCase("set_mask_i64", masked_assign, [I64], **TRACT),
    OpCase("set_mask_inf", lambda x: assign(x > 1, float("-inf"))(x), [F32], **TRACT),
    OpCase("add_then_relu", add_then_relu, [F32]),
    OpCase("copy_into_view", copy_into_view, [F32, randn(2, 2, 4, seed=1)]),
    OpCase("copy_broadcast", copy_broadcast, [F32, randn(4, seed=1)], **TRACT),
    OpCase("fill_view", fill_view, [F32]),
    OpCase("zero_view", zero_view, [F32]),
    OpCase("mul_view_inplace", mul_view_inplace, [F32], **TRACT),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_mutation_keys_match_the_tracer():
    from fx2nnef.fx_tracer.passes.inplace import copy_functional, fill_functional, zero_functional
    from fx2nnef.fx_tracer.tracing.tracer import setitem_functional
    from fx2nnef.nnef_emit.ops import indexing

    assert [op_key(f) for f in (setitem_functional, copy_functional, fill_functional, zero_functional)] == [
        indexing.SETITEM, indexing.COPY, indexing.FILL, indexing.ZERO]


@pytest.mark.parametrize("fn, inputs, message", [
    (lambda i: F.one_hot(i), [randint(0, 5, 4)], "num_classes"),
], ids=["one_hot_no_classes"])
def test_refused(fn, inputs, message, tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match=message):
        check_op(fn, inputs, tmp_path)


def test_mask_assign_of_many_values_is_refused(tmp_path):
    def fn(x, m, v):
        x = x.clone()
        x[m] = v
        return x

    with pytest.raises(fx2nnef.UnsupportedOpError, match="one element"):
        check_op(fn, [randn(2, 3), torch.ones(2, 3, dtype=torch.bool), randn(6)], tmp_path)


def test_khronos_scatter_needs_constant_index(tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match="constant index"):
        check_op(set_at_input_index, [F32, torch.tensor([3, 1]), randn(2, 3, 2)], tmp_path, target="khronos")


def test_two_tensor_indices(tmp_path):
    from harness import check_op

    x = randn(3, 5, 4)
    rows = torch.tensor([[0], [2]])
    cols = torch.tensor([[1, 4, 3]])
    check_op(lambda x: x[rows, cols], [x], tmp_path)                       # [2, 3, 4]
    (tmp_path / "b").mkdir()
    check_op(lambda x: x[:, torch.tensor([0, 4]), torch.tensor([1, 2])], [x], tmp_path / "b")  # adjacent, not first
    (tmp_path / "c").mkdir()
    with pytest.raises(fx2nnef.UnsupportedOpError, match="gather_nd"):
        check_op(lambda x: x[rows, cols], [x], tmp_path / "c", target="khronos")