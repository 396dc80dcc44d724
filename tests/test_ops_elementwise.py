"""Elementwise math, comparison and logic ops: one-op modules exported and run in tract and nnef_tools."""
import operator

import pytest
import torch

from harness import OpCase, randbool, randint, randn, run_case

F32 = randn(2, 3, 4)
POS = randn(2, 3, 4).abs() + 0.5
F16 = randn(2, 3, 4, dtype=torch.float16)
I64 = randint(-5, 5, 2, 3, 4)
B = randbool(2, 3, 4)

# atan2 at every quadrant, on the axes and at the origin
ANGLES_Y = torch.tensor([[1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0, -3.0, 0.0, 1e-3]])
ANGLES_X = torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0, -5.0]])

CASES = [
    OpCase("atan2_quadrants", torch.atan2, [ANGLES_Y, ANGLES_X], khronos=False),
    OpCase("atan2_method_random", lambda y, x: y.atan2(x), [F32, randn(2, 3, 4, seed=5)]),
    OpCase("erfc", torch.erfc, [F32 * 2]),
    OpCase("exp", torch.exp, [F32]), OpCase("log", torch.log, [POS]), OpCase("sin", torch.sin, [F32]),
    OpCase("cos", torch.cos, [F32]), OpCase("tanh", torch.tanh, [F32]), OpCase("sigmoid", torch.sigmoid, [F32]),
    OpCase("abs", torch.abs, [F32]), OpCase("neg", torch.neg, [F32]), OpCase("sqrt", torch.sqrt, [POS]),
    OpCase("rsqrt", torch.rsqrt, [POS]), OpCase("floor", torch.floor, [F32]), OpCase("ceil", torch.ceil, [F32]),
    OpCase("relu", torch.relu, [F32]), OpCase("square", torch.square, [F32]),
    OpCase("add", torch.add, [F32, randn(4, seed=1)]), OpCase("sub_op", operator.sub, [F32, randn(3, 4, seed=1)]),
    OpCase("mul_scalar", lambda x: x * 3.0, [F32]), OpCase("rsub_scalar", lambda x: 1.0 - x, [F32]),
    OpCase("div", torch.div, [F32, POS]), OpCase("pow_scalar", lambda x: x ** 2, [F32]),
    OpCase("add_alpha", lambda x, y: torch.add(x, y, alpha=2), [F32, F32]),
    OpCase("maximum", torch.maximum, [F32, randn(2, 3, 4, seed=2)]),
    OpCase("exp_f16", torch.exp, [F16], khronos=False),
    OpCase("add_f16", lambda x: x + 1.5, [F16], khronos=False),
    OpCase("add_i64", lambda x: x + 2, [I64], khronos=False),
    OpCase("mul_i64", lambda x, y: x * y, [I64, I64], khronos=False),
    OpCase("abs_i64", torch.abs, [I64], khronos=False),
    OpCase("gt", torch.gt, [F32, randn(2, 3, 4, seed=3)]), OpCase("eq_scalar", lambda x: x == 0, [I64], khronos=False),
    OpCase("le_f16", lambda x: x <= 0.5, [F16], khronos=False),
    OpCase("logical_and", torch.logical_and, [B, randbool(2, 3, 4, seed=4)]),
    OpCase("logical_not", torch.logical_not, [B]),
    # bool operands: logic with standard ops; integer bitwise, wrap-around and exact floor division need tract
    OpCase("logical_xor", torch.logical_xor, [B, randbool(2, 3, 4, seed=4)]),
    OpCase("bitwise_or_bool", torch.bitwise_or, [B, randbool(2, 3, 4, seed=4)]),
    OpCase("logical_not_f32", torch.logical_not, [F32.round()], khronos=False),
    OpCase("and_i64", lambda x: x & 6, [I64], khronos=False),
    OpCase("xor_i64", lambda x, y: x ^ y, [I64, randint(-5, 5, 2, 3, 4, seed=5)], khronos=False),
    OpCase("bitwise_not_i64", torch.bitwise_not, [I64], khronos=False),
    OpCase("neg_u8", torch.neg, [randint(0, 256, 2, 3, 4, dtype=torch.uint8)], khronos=False),
    OpCase("square_i64", torch.square, [I64], khronos=False),
    OpCase("eq_bool", torch.eq, [B, randbool(2, 3, 4, seed=4)], khronos=False),
    OpCase("add_bool", torch.add, [B, randbool(2, 3, 4, seed=4)], khronos=False),
    OpCase("mul_bool_int", lambda x: x * 3, [B], khronos=False),
    OpCase("round_half_even", torch.round, [torch.arange(-6, 6).float() / 2], khronos=False, tolerance="exact"),
    OpCase("round_decimals", lambda x: x.round(decimals=2), [F32 * 10], khronos=False, tolerance="exact"),
    OpCase("floordiv_self", lambda x: x // x, [POS * 7], khronos=False, tolerance="exact"),
    OpCase("fmod_self", lambda x: torch.fmod(x, x), [POS * 7], khronos=False, tolerance="exact"),
    OpCase("floordiv_i64", lambda x: x // -3, [I64], khronos=False),
    OpCase("hypot", torch.hypot, [F32, randn(2, 3, 4, seed=6)], khronos=False),
    OpCase("isclose", lambda x: torch.isclose(x, x * 1.000001), [F32], khronos=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# comparisons of two tensors of symbolic shape take tract's workaround (an opaque zero on one side):
# infinities, NaN and integers at the ends of their range must compare as in torch
SPECIAL = torch.tensor([[1.0, float("inf"), float("nan"), -float("inf"), 2.0, float("inf")]])
SPECIAL_OTHER = torch.tensor([[1.0, float("inf"), float("nan"), 3.0, -float("inf"), -float("inf")]])
HUGE = torch.tensor([[2 ** 62, -2 ** 62, 7, -(2 ** 63), 2 ** 63 - 1, 0]])
DYNAMIC_COMPARE = [
    OpCase("isnan_dynamic", torch.isnan, [SPECIAL], dynamic_axes={"x0": {1: "S"}}),
    OpCase("eq_inf_dynamic", torch.eq, [SPECIAL, SPECIAL_OTHER], dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("ge_inf_dynamic", torch.ge, [SPECIAL, SPECIAL_OTHER], dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("isclose_nan_dynamic", lambda x, y: torch.isclose(x, y, equal_nan=True), [SPECIAL, SPECIAL_OTHER],
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("gt_i64_extremes_dynamic", lambda x: x[:, :, None] > -x[:, None, :], [HUGE], dynamic_axes={"x0": {1: "S"}}),
    OpCase("range_mask_f32_dynamic", lambda x: torch.where(
        torch.arange(x.shape[1], dtype=torch.float32)[:, None] >= torch.arange(x.shape[1], dtype=torch.float32),
        x[:, :, None], 0.0), [F32[0]], dynamic_axes={"x0": {1: "S"}}),
    OpCase("where_int_numbers", lambda x: torch.where(x > 0, 1, 0), [F32]),
    OpCase("where_bool_numbers", lambda x: torch.where(x > 0, True, False), [F32], khronos=False),
]


@pytest.mark.parametrize("case", DYNAMIC_COMPARE, ids=str)
def test_compare_special_values(case, tmp_path):
    run_case(case, tmp_path, "tract")


# a range of a dynamic length compared with a constant: tract knew the mask's regions and sliced
# its readers at the constant whatever the length, so the asset failed at sizes below it
RANGE_AGAINST_CONSTANT = {
    "where_gt": lambda z: torch.where(torch.arange(z.shape[0]) > 1, z, -z),
    "where_constant": lambda z: torch.where(torch.arange(z.shape[0]) > 1, torch.tensor([3.0]), z),
    "masked_fill_ge": lambda z: z.masked_fill(torch.arange(z.shape[0]) >= 2, 0),
    "float_mask": lambda z: (torch.arange(z.shape[0]) > 1).float() * z,
    "unsqueezed_le": lambda z: torch.where(torch.arange(z.shape[0])[:, None] <= 2, z[:, None], 0.0),
    "shifted_lt": lambda z: torch.where(torch.arange(z.shape[0]) * 2 + 1 < 5, z, 1.0),
}


@pytest.mark.parametrize("name", list(RANGE_AGAINST_CONSTANT))
def test_a_range_compared_with_a_constant_runs_below_it(name, tmp_path):
    import fx2nnef
    from harness import FnModule, tract_matches_eager

    fn = RANGE_AGAINST_CONSTANT[name]
    r = fx2nnef.export(FnModule(fn), (randn(5),), tmp_path / "m.nnef.tgz", input_names=["z"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"z": {0: "S"}}))
    assert r.check.ok and not r.ranges, (r.check, r.ranges)
    tract_matches_eager(r.path, FnModule(fn), [[randn(s)] for s in (1, 2, 3, 9)])
