"""Mixed integer dtypes follow torch's promotion (u8 with i8 is i16, a Python number does not widen
an integer tensor, ...), and reductions over an axis that is empty at some sizes run in tract as in torch."""
import itertools

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.helpers import result_dtype
from harness import FnModule, OpCase, randn, run_case, tract_matches_eager

# every pair of these meets once when the first is taken as a column and the second as a row
U8 = torch.tensor([0, 1, 127, 128, 200, 255], dtype=torch.uint8).reshape(6, 1)
I8 = torch.tensor([-128, -5, -1, 0, 1, 127], dtype=torch.int8).reshape(1, 6)
I8_NONZERO = torch.tensor([-128, -5, -1, 1, 3, 127], dtype=torch.int8).reshape(1, 6)
I16 = torch.tensor([-32768, -300, -1, 0, 255, 32767], dtype=torch.int16).reshape(1, 6)
I32 = torch.tensor([-2 ** 31, -300, -1, 0, 256, 2 ** 31 - 1], dtype=torch.int32).reshape(1, 6)
I64 = torch.tensor([-2 ** 40, -300, -1, 0, 256, 2 ** 40], dtype=torch.int64).reshape(1, 6)
B = torch.tensor([True, False, True, True, False, False]).reshape(1, 6)

CASES = [
    OpCase("u8_gt_i8_and_sum", lambda u, i: (u > i, i + u), [U8, I8]),
    OpCase("u8_mul_i8", lambda u, i: u * i, [U8, I8]),
    OpCase("i8_sub_u8", lambda u, i: i - u, [U8, I8]),
    OpCase("maximum_minimum_u8_i8", lambda u, i: (torch.maximum(u, i), torch.minimum(i, u)), [U8, I8]),
    OpCase("where_u8_i8", lambda u, i: torch.where(u > 100, u, i), [U8, I8]),
    OpCase("eq_lt_u8_i8", lambda u, i: (u == i, torch.lt(u, i), i <= u), [U8, I8]),
    OpCase("floor_divide_u8_i8", lambda u, i: (torch.floor_divide(u, i), u // i), [U8, I8_NONZERO]),
    OpCase("u8_with_i16", lambda u, i: (u + i, u > i), [U8, I16]),
    OpCase("u8_with_i32", lambda u, i: (u - i, torch.maximum(u, i)), [U8, I32]),
    OpCase("u8_with_i64", lambda u, i: (u + i, u < i), [U8, I64]),
    OpCase("bool_with_ints", lambda b, u, i: (b + u, b * i, torch.where(b, u, b)), [B, U8, I8]),
    OpCase("u8_python_ints", lambda u: (u + 300, u * 3, u - 1, u > 127), [U8]),
    OpCase("i8_python_numbers", lambda i: (i + 1.5, i * 2, i - 1, i // 2), [I8]),
    OpCase("bool_python_int", lambda b: (b + 1, b * 2.5), [B]),
    OpCase("zero_dim_tensors", lambda u, i: (u + i.sum(), u.sum() + i.sum().to(torch.int8)), [U8, I8]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_int_promotion_tract(case, tmp_path):
    r = run_case(case, tmp_path)  # integers and bools are compared exactly, dtypes too
    assert r.check.ok, r.check


_DTYPES = {DType.BOOL: torch.bool, DType.U8: torch.uint8, DType.I8: torch.int8, DType.I16: torch.int16,
           DType.I32: torch.int32, DType.I64: torch.int64, DType.F16: torch.float16, DType.BF16: torch.bfloat16,
           DType.F32: torch.float32, DType.F64: torch.float64}


def _operand(kind: str, dtype: DType):
    """An IR operand (``dim``: rank 2, ``zero``: rank 0) and the torch tensor it stands for."""
    shape = (2, 3) if kind == "dim" else ()
    return Value(name=f"{kind}_{dtype.value}", dtype=dtype, shape=shape), torch.zeros(shape, dtype=_DTYPES[dtype])


@pytest.mark.parametrize("kinds", [("dim", "dim"), ("dim", "zero"), ("zero", "zero")])
def test_result_dtype_matches_torch_on_tensors(kinds):
    for a, b in itertools.product(_DTYPES, repeat=2):
        (va, ta), (vb, tb) = _operand(kinds[0], a), _operand(kinds[1], b)
        assert _DTYPES[result_dtype(va, vb)] == torch.result_type(ta, tb), (kinds, a, b)


@pytest.mark.parametrize("number", [True, 300, -1, 1.5])
def test_result_dtype_matches_torch_with_numbers(number):
    for kind, a in itertools.product(("dim", "zero"), _DTYPES):
        va, ta = _operand(kind, a)
        assert _DTYPES[result_dtype(va, number)] == torch.result_type(ta, number), (kind, a, number)
        assert _DTYPES[result_dtype(number, va)] == torch.result_type(ta, number), (kind, a, number)


# ---- reductions over an axis that is empty at the smallest size of the range ----------------------------------------
X = randn(2, 7) * 2
XI = torch.tensor([[3, -1, 2, 5, 7, -2, 4], [1, 2, 3, 4, 5, 6, 7]])
EMPTY_AT_LOW = [
    OpCase("sum", lambda x: x[:, 4:].sum(1), [X]),
    OpCase("sum_keepdim_int", lambda x: x[:, 4:].sum(1, keepdim=True), [XI]),
    OpCase("sum_all_axes", lambda x: x[:, 4:].sum(), [X]),
    OpCase("mean", lambda x: x[:, 4:].mean(1), [X]),
    OpCase("mean_both_axes", lambda x: x[:, 4:].mean((0, 1)), [X]),
    OpCase("prod", lambda x: x[:, 4:].prod(1), [X]),
    OpCase("prod_int", lambda x: x[:, 4:].prod(-1), [XI]),
    OpCase("logsumexp", lambda x: torch.logsumexp(x[:, 4:], 1), [X]),
    OpCase("any_all", lambda x: (x[:, 4:].gt(0).any(1), x[:, 4:].gt(0).all(1), torch.any(x[:, 4:] > 1, 1)), [X]),
    OpCase("nansum_count_nonzero", lambda x: (x[:, 4:].nansum(1), torch.count_nonzero(x[:, 4:], 1)), [X]),
    OpCase("norm", lambda x: torch.linalg.vector_norm(x[:, 4:], dim=1), [X]),
]


@pytest.mark.parametrize("case", EMPTY_AT_LOW, ids=str)
def test_reduce_over_axis_empty_at_some_sizes(case, tmp_path):
    case.dynamic_axes = {"x0": {1: "S"}}
    r = run_case(case, tmp_path)
    assert r.check.ok and r.ranges["S"].lo == 4, r  # valid from S=4 on: the slice is empty there
    # S=4, where the slice is empty, run in tract whatever sizes the check took
    tract_matches_eager(r.path, FnModule(case.fn), [[x[:, :4]] for x in case.inputs] + [[x[:, :5]] for x in case.inputs])


def test_reduce_over_dynamic_axis_never_empty_is_not_padded(tmp_path):
    r = run_case(OpCase("plain", lambda x: (x.sum(1), x.mean(1), x.prod(1), torch.logsumexp(x, 1)), [X],
                        dynamic_axes={"x0": {1: "S"}}), tmp_path)
    assert r.check.ok and "pad(" not in r.nnef_text, r.nnef_text
