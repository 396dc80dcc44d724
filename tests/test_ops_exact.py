"""Arithmetic that must come out exact in tract: integer wrap-around, bitwise ops, bool arithmetic,
floor/trunc division and remainders (tract's own division is not correctly rounded), rounding,
einsum reductions. Each case runs over several dtypes with extreme values and is compared with
PyTorch exactly (integer and bool outputs always are; float outputs of rounding ops use "exact").
"""
import operator

import pytest
import torch

from harness import OpCase, run_case

INTS = {"i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8}
DTYPES = {"f32": torch.float32, **INTS, "bool": torch.bool}


def values(dtype, seed=0, shape=(4, 6), nonzero=False):
    """Random values of ``dtype`` with the extremes of the type written in."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(*shape, generator=g) * 3
        x.view(-1)[:10] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 7.0, -7.0]) * (1.0 + seed)
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -100), min(info.max, 100) + 1, shape, generator=g).to(dtype)
        ext = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.min + 1, info.max - 1]
        x.view(-1)[seed:seed + len(ext)] = torch.tensor(ext, dtype=dtype)
    if nonzero:
        x[x == 0] = 3
    return x.to(dtype)


def shifts(dtype, shape=(4, 6)):
    """Shift amounts, some negative or past the bit width (torch gives 0 or -1 there)."""
    bits = torch.iinfo(dtype).bits
    x = torch.randint(0, bits, shape, generator=torch.Generator().manual_seed(3))
    x.view(-1)[:3] = torch.tensor([bits, bits + 5, 0])
    if torch.iinfo(dtype).min < 0:
        x.view(-1)[3] = -1
    return x.to(dtype)


def cases(name, fn, dtypes, n_inputs=1, nonzero_second=False, **kw):
    out = []
    for dn in dtypes:
        dt = DTYPES[dn]
        inputs = [values(dt)] + [values(dt, seed=1, nonzero=nonzero_second) for _ in range(n_inputs - 1)]
        out.append(OpCase(f"{name}_{dn}", fn, inputs, khronos=False, **kw))
    return out


ALL_INTS = list(INTS)
CASES = [
    # bitwise: real bit operations on integers, logical on bools
    *cases("bitwise_and", torch.bitwise_and, ALL_INTS + ["bool"], 2),
    *cases("bitwise_or", torch.bitwise_or, ALL_INTS + ["bool"], 2),
    *cases("bitwise_xor", torch.bitwise_xor, ALL_INTS + ["bool"], 2),
    *cases("and_op", operator.and_, ALL_INTS + ["bool"], 2),
    *cases("or_op", operator.or_, ALL_INTS + ["bool"], 2),
    *cases("xor_op", operator.xor, ALL_INTS + ["bool"], 2),
    *cases("and_6", lambda x: x & 6, ALL_INTS + ["bool"]),
    *cases("or_6", lambda x: x | 6, ALL_INTS + ["bool"]),
    *cases("bitwise_not", torch.bitwise_not, ALL_INTS + ["bool"]),
    *cases("invert", operator.invert, ALL_INTS + ["bool"]),
    *[OpCase(f"lshift_{dn}", operator.lshift, [values(dt), shifts(dt)], khronos=False) for dn, dt in INTS.items()],
    *[OpCase(f"rshift_{dn}", torch.bitwise_right_shift, [values(dt), shifts(dt)], khronos=False)
      for dn, dt in INTS.items()],
    *cases("lshift_scalar", lambda x: x << 3, ALL_INTS),
    *cases("rshift_scalar", lambda x: x >> 2, ALL_INTS),
    # integer wrap-around and dtypes tract refuses
    *cases("neg", torch.neg, ["f32", "i64", "i32", "i8", "u8"]),
    *cases("abs", torch.abs, ["f32", "i64", "i32", "i8", "u8"]),
    *cases("square", torch.square, list(DTYPES)),
    *cases("mul_self", lambda x: x * x, ["f32", *ALL_INTS]),
    *cases("mul", torch.mul, list(DTYPES), 2),
    *cases("add", torch.add, list(DTYPES), 2),
    *cases("sub", torch.sub, ["f32", *ALL_INTS], 2),
    *cases("add_alpha", lambda x, y: torch.add(x, y, alpha=3), ["f32", *ALL_INTS], 2),
    *cases("maximum", torch.maximum, list(DTYPES), 2),
    *cases("minimum", torch.minimum, list(DTYPES), 2),
    *cases("mul_2", lambda x: x * 2, list(DTYPES)),
    *cases("add_3", lambda x: x + 3, list(DTYPES)),
    *cases("pow_2", lambda x: x ** 2, list(DTYPES)),
    *cases("pow_3", lambda x: torch.pow(x, 3), list(DTYPES)),
    *cases("pow_0", lambda x: x ** 0, ["f32", *ALL_INTS]),
    *[OpCase(f"pow_tensor_{dn}", torch.pow, [values(dt), values(dt, seed=2).remainder(9) - (3 if dn != "u8" else 0)],
             khronos=False) for dn, dt in INTS.items()],
    OpCase("pow_negative_exponent", torch.pow, [torch.tensor([2, -1, 1, 0, 3, -2, -1, 1]),
                                                torch.tensor([-1, -1, -2, -1, -2, -3, -2, -7])], khronos=False),
    OpCase("rpow", lambda x: 2 ** x, [torch.arange(0, 70).reshape(7, 10)], khronos=False),
    *cases("relu", torch.relu, ["f32", *ALL_INTS]),
    *cases("floor", torch.floor, ["f32", *ALL_INTS]),
    *cases("ceil", torch.ceil, ["f32", *ALL_INTS]),
    *cases("trunc", torch.trunc, ["f32", *ALL_INTS]),
    *cases("sign", torch.sign, list(DTYPES)),
    *cases("sgn", torch.sgn, list(DTYPES)),
    *cases("logical_not", torch.logical_not, list(DTYPES)),
    *cases("logical_xor", torch.logical_xor, list(DTYPES), 2),
    *cases("logical_and", torch.logical_and, list(DTYPES), 2),
    *cases("clamp", lambda x: torch.clamp(x, 0, 5), list(DTYPES)),
    *cases("clamp_tensor", lambda x, y: torch.clamp(x, min=y), ["f32", *ALL_INTS], 2),
    *[c for op in ("eq", "ne", "lt", "le", "gt", "ge") for c in cases(op, getattr(torch, op), list(DTYPES), 2)],
    *cases("eq_0", lambda x: x == 0, list(DTYPES)),
    *cases("isnan", torch.isnan, list(DTYPES)),
    *cases("isfinite", torch.isfinite, list(DTYPES)),
    # rounding: half to even, and torch's algorithm for decimals
    *cases("round", torch.round, ["f32", *ALL_INTS], tolerance="exact"),
    OpCase("round_halves", torch.round, [torch.arange(-10, 10).float() / 2 + torch.zeros(3, 1)], khronos=False,
           tolerance="exact"),
    OpCase("round_decimals_2", lambda x: torch.round(x, decimals=2), [values(torch.float32) * 7.77], khronos=False,
           tolerance="exact"),
    OpCase("round_decimals_method", lambda x: x.round(decimals=3), [torch.arange(-2000, 2000).float() / 1024],
           khronos=False, tolerance="exact"),
    OpCase("round_decimals_negative", lambda x: torch.round(x, decimals=-2), [values(torch.float32) * 1000],
           khronos=False, tolerance="exact"),
    OpCase("round_decimals_f16", lambda x: torch.round(x, decimals=1),
           [(values(torch.float32) * 3.3).half()], khronos=False, tolerance="exact"),
    # hypot, isclose
    OpCase("hypot", torch.hypot, [values(torch.float32), values(torch.float32, seed=1)], khronos=False),
    OpCase("hypot_large", torch.hypot, [values(torch.float32) * 1e30, values(torch.float32, seed=1) * 1e30],
           khronos=False),
    OpCase("hypot_f16", torch.hypot, [values(torch.float32).half(), values(torch.float32, seed=1).half()],
           khronos=False),
    OpCase("isclose", torch.isclose, [values(torch.float32), values(torch.float32) + torch.rand(4, 6) * 1e-4],
           khronos=False),
    OpCase("isclose_tol", lambda a, b: torch.isclose(a, b, rtol=1e-2, atol=1e-3),
           [values(torch.float32), values(torch.float32) * 1.005], khronos=False),
    OpCase("isclose_nan", lambda a, b: torch.isclose(a, b, equal_nan=True),
           [torch.tensor([float("nan"), 1.0, float("inf"), float("nan")]),
            torch.tensor([float("nan"), 1.0, float("inf"), 2.0])], khronos=False),
    *cases("isclose", torch.isclose, ALL_INTS + ["bool"], 2),
    *cases("isclose_self", lambda x: torch.isclose(x, x + 0), ["f32", *ALL_INTS]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_exact(case, tmp_path):
    run_case(case, tmp_path, "tract")


# ---- division with rounding ------------------------------------------------------------------------------------
def float_pairs(dtype, n, seed=0):
    """Pairs that floor(a / b) gets wrong in tract: x / x, exact multiples, negatives, huge and tiny ratios."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(n, generator=g) * 10, torch.randn(n, generator=g) * 3
    k = n // 6
    a[:k] = b[:k]
    a[k:2 * k] = b[k:2 * k] * torch.randint(-50, 50, (k,), generator=g)
    scale = torch.exp2(torch.randint(-60, 60, (k,), generator=g).float())
    a[2 * k:3 * k] = torch.randn(k, generator=g) * scale
    b[3 * k:4 * k] = torch.randn(k, generator=g) / scale
    a[4 * k:5 * k] = torch.randint(-1000, 1000, (k,), generator=g).float()
    b[4 * k:5 * k] = torch.randint(1, 30, (k,), generator=g).float() * torch.sign(torch.randn(k, generator=g))
    a, b = a.to(dtype), b.to(dtype)
    b[b == 0] = 1.5
    keep = torch.isfinite(a) & torch.isfinite(b)
    return a[keep], b[keep]


def int_pairs(dtype, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    a = torch.randint(max(info.min, -2 ** 40), min(info.max, 2 ** 40), (n,), generator=g).to(dtype)
    b = torch.randint(-30 if info.min < 0 else 1, 30, (n,), generator=g).to(dtype)
    a[:8] = torch.tensor([info.min, info.max] * 4, dtype=dtype)
    b[b == 0] = 7
    if info.min < 0:
        b[(a == info.min) & (b == -1)] = 3
    return a, b


DIVISIONS = {
    "floordiv": operator.floordiv, "mod": operator.mod, "fmod": torch.fmod, "remainder": torch.remainder,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "floor_divide": torch.floor_divide,
    "self_floordiv": lambda a, b: a // a, "self_mod": lambda a, b: a % a,
}
DIVISION_CASES = [
    OpCase(f"{name}_{dn}", fn, list(float_pairs(dt, 6000) if dt.is_floating_point else int_pairs(dt, 6000)),
           khronos=False, tolerance="exact")
    for dn, dt in {"f32": torch.float32, "f16": torch.float16, **INTS}.items()
    for name, fn in DIVISIONS.items()
    if not (name.startswith("self") and dn in ("i8", "u8"))  # pairs hold 0, and torch raises on 0 // 0
]
DIVISION_CASES += [
    OpCase("floordiv_scalar", lambda a: a // 3.5, [float_pairs(torch.float32, 2000)[0]], khronos=False,
           tolerance="exact"),
    OpCase("mod_scalar_negative", lambda a: a % -3, [int_pairs(torch.int64, 2000)[0]], khronos=False),
    OpCase("rmod_scalar", lambda b: 7.25 % b, [float_pairs(torch.float32, 2000)[1]], khronos=False,
           tolerance="exact"),
    OpCase("floordiv_bool", lambda a, b: torch.floor_divide(a, b), [values(torch.int64), values(torch.int64, 1, nonzero=True)],
           khronos=False),
    OpCase("floordiv_dyn", operator.floordiv, [torch.randn(3, 8) * 10, torch.randn(3, 8) * 3], khronos=False,
           tolerance="exact", dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    # a true quotient then floored or compared: tract's a * (1 / b) is one ulp below 41 / 41
    OpCase("true_div_then_floor", lambda a: torch.floor(a / 41 * 2), [torch.arange(400.0).reshape(8, 50)],
           khronos=False, tolerance="exact"),
    OpCase("true_div_then_compare", lambda a, b: (a / b).clamp(0, 9) >= 1,
           [torch.arange(400.0).reshape(8, 50), torch.full((1, 50), 47.0)], khronos=False),
    OpCase("true_div_by_size_then_cast", lambda a: (a / a.shape[1]).long(), [torch.arange(41.0 * 3).reshape(3, 41)],
           khronos=False, dynamic_axes={"x0": {1: "S"}}),
    OpCase("remainder_dyn_broadcast", torch.remainder, [torch.randn(3, 8) * 10, torch.tensor([0.7, -1.3, 3.0])[:, None]],
           khronos=False, tolerance="exact", dynamic_axes={"x0": {1: "S"}}),
]


@pytest.mark.parametrize("case", DIVISION_CASES, ids=str)
def test_division(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["floordiv", "fmod", "remainder", "div_trunc"])
def test_division_million_pairs(name, dtype, tmp_path):
    a, b = float_pairs(dtype, 1_000_000, seed=7)
    run_case(OpCase(name, DIVISIONS[name], [a, b], khronos=False, tolerance="exact"), tmp_path, "tract")


# ---- einsum -------------------------------------------------------------------------------------------------------
def einsum(eq):
    return lambda *xs: torch.einsum(eq, *xs)


R = lambda *s, seed=0: torch.randn(*s, generator=torch.Generator().manual_seed(seed))  # noqa: E731
EINSUM_CASES = [
    OpCase("einsum_full", einsum("ij->"), [R(3, 4)]),
    OpCase("einsum_full_vector", einsum("i->"), [R(5)]),
    OpCase("einsum_full_two", einsum("ij,jk->"), [R(3, 4), R(4, 5, seed=1)]),
    OpCase("einsum_full_i64", einsum("ij->"), [values(torch.int64, shape=(3, 4)) // 4], khronos=False),
    OpCase("einsum_trace", einsum("ii->"), [R(4, 4)], khronos=False),
    OpCase("einsum_trace_implicit", einsum("ii"), [R(4, 4)], khronos=False),
    OpCase("einsum_diag_times", einsum("ii,i->i"), [R(3, 3), R(3, seed=1)], khronos=False),
    OpCase("einsum_diag_sum", einsum("iij->j"), [R(3, 3, 2)], khronos=False),
    OpCase("einsum_batch_diag", einsum("...ii->...i"), [R(2, 3, 3)], khronos=False),
    OpCase("einsum_outer", einsum("i,j"), [R(3), R(4, seed=1)]),
    OpCase("einsum_three_full", einsum("i,i,i->"), [R(4), R(4, seed=1), R(4, seed=2)]),
    OpCase("einsum_bilinear", einsum("bn,anm,bm->ba"), [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)]),
    OpCase("einsum_ellipsis_batch", einsum("b...,b...->b"), [R(2, 3, 4), R(2, 3, 4, seed=1)]),
    OpCase("einsum_full_dyn", einsum("ij->"), [R(3, 4)], khronos=False, dynamic_axes={"x0": {1: "S"}}),
    OpCase("einsum_diag_dyn", einsum("bii,bi->b"), [R(2, 3, 3), R(2, 3, seed=1)], khronos=False,
           dynamic_axes={"x0": {0: "B"}, "x1": {0: "B"}}),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=str)
def test_einsum_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in EINSUM_CASES if c.khronos], ids=str)
def test_einsum_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# ---- dynamic axes --------------------------------------------------------------------------------------------------
DYN = {"x0": {1: "S"}, "x1": {1: "S"}}
DYNAMIC_CASES = [
    OpCase("bitwise_and_dyn", torch.bitwise_and, [values(torch.int32), values(torch.int32, 1)], khronos=False,
           dynamic_axes=DYN),
    OpCase("eq_bool_dyn", torch.eq, [values(torch.bool), values(torch.bool, 1)], khronos=False, dynamic_axes=DYN),
    OpCase("lt_bool_dyn", torch.lt, [values(torch.bool), values(torch.bool, 1)], khronos=False, dynamic_axes=DYN),
    OpCase("square_i64_dyn", torch.square, [values(torch.int64)], khronos=False, dynamic_axes={"x0": {1: "S"}}),
    OpCase("shift_dyn", operator.rshift, [values(torch.int64), shifts(torch.int64)], khronos=False, dynamic_axes=DYN),
    OpCase("pow_tensor_dyn", torch.pow, [values(torch.int8), values(torch.int8, 2).remainder(7)], khronos=False,
           dynamic_axes=DYN),
]


@pytest.mark.parametrize("case", DYNAMIC_CASES, ids=str)
def test_dynamic(case, tmp_path):
    run_case(case, tmp_path, "tract")


# ---- refusals: named errors, never wrong numbers -------------------------------------------------------------------
def test_khronos_refuses_integer_bitwise(tmp_path):
    import fx2nnef

    with pytest.raises(fx2nnef.UnsupportedOpError, match="bitwise_and on integer tensors"):
        run_case(OpCase("and_i64", torch.bitwise_and, [values(torch.int64), values(torch.int64, 1)]), tmp_path,
                 "khronos")


# ---- matmul on a tiled (expanded) size-1 operand ------------------------------------------------------------------
# tract 0.23.9 cannot load matmul(tile(x[1, K], [M, 1]), W): the product is taken untiled, then tiled
TILED_MATMUL_CASES = [
    OpCase("matmul_expand_rows", lambda x, w: x.expand(4, 5) @ w, [R(1, 5), R(5, 6, seed=1)]),
    OpCase("matmul_expand_cols", lambda x, w: x @ w.expand(5, 6), [R(4, 5), R(5, 1, seed=1)]),
    OpCase("matmul_expand_both", lambda x, w: x.expand(4, 5) @ w.expand(5, 6), [R(1, 5), R(5, 1, seed=1)]),
    OpCase("bmm_expand_rows", lambda x, w: torch.bmm(x.expand(3, 4, 5), w), [R(3, 1, 5), R(3, 5, 6, seed=1)]),
    OpCase("linear_expand", lambda x, w: torch.nn.functional.linear(x.expand(4, 5), w), [R(1, 5), R(6, 5, seed=1)]),
    OpCase("matmul_expand_batch", lambda x, w: x.expand(3, 4, 5) @ w, [R(1, 4, 5), R(3, 5, 6, seed=1)]),
    OpCase("matmul_expand_rows_dyn", lambda x, w: x.expand(x.shape[0], 4, 5) @ w, [R(2, 1, 5), R(2, 5, 6, seed=1)],
           khronos=False, dynamic_axes={"x0": {0: "B"}, "x1": {0: "B"}}),
    OpCase("matmul_expand_sym_rows_dyn", lambda x, w: x[:, :1].expand(-1, x.shape[1], -1) @ w,
           [R(2, 5, 4), R(2, 4, 6, seed=1)], khronos=False, dynamic_axes={"x0": {1: "S"}}),
]


@pytest.mark.parametrize("case", TILED_MATMUL_CASES, ids=str)
def test_tiled_matmul(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in TILED_MATMUL_CASES if c.khronos], ids=str)
def test_tiled_matmul_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# ---- a strided slice after a softmax ---------------------------------------------------------------------------------
# tract 0.23.9 moves a step > 1 slice above a softmax (through elementwise ops and transposes too) and
# normalizes over the kept items only; such softmaxes are spelt out with reductions
SOFTMAX_SLICE_CASES = [
    OpCase("softmax_step_slice", lambda x: torch.softmax(x, -1)[..., ::2], [R(3, 8, 6)], khronos=False),
    OpCase("softmax_step_slice_offset", lambda x: torch.softmax(x, -1)[..., 1::3], [R(3, 8, 6)], khronos=False),
    OpCase("softmax_mul_step_slice", lambda x: (torch.softmax(x, -1) * 2)[..., ::2], [R(3, 8, 6)], khronos=False),
    OpCase("softmax_transpose_step_slice", lambda x: torch.softmax(x, -1).transpose(1, 2)[:, ::2], [R(3, 8, 6)],
           khronos=False),
    OpCase("log_softmax_step_slice", lambda x: torch.log_softmax(x, -1)[..., ::2], [R(3, 8, 6)], khronos=False),
    OpCase("functional_softmax_step_slice", lambda x: torch.nn.functional.softmax(x, dim=-1)[..., ::3],
           [R(3, 8, 6)], khronos=False),
    OpCase("softmax_step_slice_dyn", lambda x: torch.softmax(x, -1)[..., ::2], [R(3, 8, 6)], khronos=False,
           dynamic_axes={"x0": {1: "S"}}),
    OpCase("softmax_step_slice_dyn_axis", lambda x: torch.softmax(x, 1)[:, ::2], [R(3, 8, 6)], khronos=False,
           dynamic_axes={"x0": {1: "S"}}),
    # tract lowers a 1x1 conv or pool with a stride as a Downsample, which it moves above the softmax too
    OpCase("softmax_conv1x1_stride", lambda x: torch.conv2d(torch.softmax(x, -2), torch.ones(2, 2, 1, 1), stride=2),
           [R(1, 2, 5, 5)], khronos=False),
    OpCase("softmax_conv1d_1_stride_dyn", lambda x: torch.conv1d(torch.tanh(x.softmax(2)), torch.ones(1, 4, 1), stride=2),
           [R(5, 4, 8)], khronos=False, dynamic_axes={"x0": {0: "T", 2: "S"}}),
    OpCase("log_softmax_max_pool_1_stride", lambda x: torch.nn.functional.max_pool1d(x.log_softmax(-1), 1, 2),
           [R(2, 3, 8)], khronos=False),
]


@pytest.mark.parametrize("case", SOFTMAX_SLICE_CASES, ids=str)
def test_softmax_then_strided_slice(case, tmp_path):
    run_case(case, tmp_path, "tract")


def test_integer_power_by_a_constant_tensor_takes_the_bits_it_has(tmp_path):
    """``x ** c`` for a constant integer tensor ``c`` (items -2..3, fuzz 32236): the lowering takes
    the two bits the largest item has, not 64. The 64-bit loop made some 1,000 ops, which tract
    did not finish loading within minutes once a slice and a product followed."""
    import fx2nnef
    from harness import FnModule, tract_matches_eager

    c = torch.tensor([3, -2, 0, 1])
    fn = FnModule(lambda x: (x ** c).narrow(-1, 0, 1) * 2)
    x = torch.randint(-3, 10, (8, 4, 4), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(fn, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "S"}}, timeout=60))
    assert r.check.ok and r.nnef_op_counts.get("select", 0) < 40, (r.check, r.nnef_op_counts)
    more = [torch.randint(-3, 10, (n, 4, 4), generator=torch.Generator().manual_seed(n)) for n in (1, 5)]
    tract_matches_eager(r.path, fn, [[t] for t in more])
