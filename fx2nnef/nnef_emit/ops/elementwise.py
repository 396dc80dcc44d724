"""Elementwise math, comparisons, logic and bitwise ops: tables of trivial ops and one generic converter each;
the isnan/isinf family, hypot and isclose.

NOTE: facts about tract 0.23.9 integer arithmetic that the converters below work around:
- ``mul(x, x)`` is rewritten to ``square``, which saturates on i8/u8 and is refused on i16/i32/i64
  (also after folding ``add(x, 0)``, ``bitor(x, 0)``); integer products go through
  ``0 - x * (0 - y)``, which wraps like torch.
- integer ``mul``/``div`` and bool ``and`` lose their broadcast when tract knows an operand is
  uniformly 0 or 1 (see ``activation.ew``).
- ``neg`` saturates on u8 (torch wraps): ``0 - x`` wraps.
- an integer ``gt`` of operands it knows to be uniform is true for a select or an ``and`` whatever
  the values: every integer ``gt`` is emitted as ``lt`` with its operands swapped (``EmitContext.op``).
- ``pow`` saturates on integers and is refused on i8/u8: integer powers are built from products.
- comparisons, ``add``/``mul``/``max``/``min``, ``sign`` and ``square`` are refused on bool;
  ``not`` is refused on anything but bool; ``round`` rounds half away from zero (torch: to even).
"""
from __future__ import annotations

import operator
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import broadcast_operands, broadcast_shape, cast, ew, result_dtype, scalar_operand, select
from ..registry import REGISTRY, register
from .division import feeds_rounding, float_quotient

# op -> NNEF unary op on floats (integer and bool inputs are computed in f32, as torch promotes them)
UNARY = {
    "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan", "sinh": "sinh",
    "cosh": "cosh", "tanh": "tanh", "asin": "asin", "acos": "acos", "atan": "atan", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "sqrt": "sqrt", "rsqrt": "rsqrt", "sigmoid": "sigmoid", "log2": "log2",
}
# op -> NNEF unary op that keeps integer dtypes (bool has its own rule in the converter)
INTEGER_UNARY = {"abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil"}
# op -> NNEF binary op (float or int result)
BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "true_divide": "div",
    "maximum": "max", "minimum": "min", "multiply": "mul", "subtract": "sub",
}
# on bool operands torch's add/mul/max/min are logical
BOOL_BINARY = {"add": "or", "mul": "and", "max": "or", "min": "and"}
COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
           "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le", "not_equal": "ne"}
LOGIC = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}
BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}
SHIFTS = {"bitwise_left_shift": "left", "bitwise_right_shift": "right"}
OPERATORS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
             operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
             operator.le: "le", operator.gt: "gt", operator.ge: "ge"}
_BITS = {DType.I8: 8, DType.U8: 8, DType.I16: 16, DType.I32: 32, DType.I64: 64}


def _zero(ctx: EmitContext, dtype: DType):
    return scalar_operand(ctx, 0, dtype)


def int_mul(ctx: EmitContext, a: Value, b, dtype: DType) -> Value:
    """``a * b`` on integers, wrapping like torch (see the module note on tract's square)."""
    if not isinstance(b, Value):
        return ew(ctx, "mul", a, b)
    return ew(ctx, "sub", _zero(ctx, dtype), ew(ctx, "mul", a, ew(ctx, "sub", _zero(ctx, dtype), b)))


def _unary(nnef_op: str):
    def convert(ctx: EmitContext, input: Value):
        x = input if input.dtype.is_float else cast(ctx, input, DType.F32)
        if nnef_op == "sigmoid" and ctx.profile.exact_sigmoid:
            return exact_sigmoid(ctx, x)
        return ctx.op(nnef_op, x, out_shape=input.shape)

    convert.__name__ = f"unary_{nnef_op}"
    return convert


def exact_sigmoid(ctx: EmitContext, x: Value) -> Value:
    """``1 / (1 + exp(-x))``: tract's own sigmoid is within 5e-7 of the value, not within a
    relative error, so that its small values (3e-7 for 1e-13 at x = -30) are wrong by orders of
    magnitude once divided (``F.normalize`` of a sigmoid). Gates that only scale another value
    (the RNN cells, SiLU) keep tract's op."""
    e = ctx.op("exp", ctx.op("neg", x, out_shape=x.shape), out_shape=x.shape)
    return ctx.op("div", scalar_operand(ctx, 1.0, x.dtype), ctx.op("add", e, scalar_operand(ctx, 1.0, x.dtype),
                                                                    out_shape=x.shape), out_shape=x.shape)


def _integer_unary(nnef_op: str):
    def convert(ctx: EmitContext, input: Value):
        if nnef_op in ("floor", "ceil") and not input.dtype.is_float:
            return input
        if input.dtype.is_bool:
            if nnef_op == "sign":
                return input
            ctx.fail(f"{nnef_op} of a bool tensor is not defined in torch")
        return ctx.op(nnef_op, input, out_shape=input.shape)

    convert.__name__ = f"unary_{nnef_op}"
    return convert


@register(torch.neg, "Tensor.neg", operator.neg, torch.negative, "Tensor.negative")
def neg(ctx: EmitContext, input: Value):
    """neg(Tensor self) -> Tensor (u8 wraps: 0 - x)"""
    if input.dtype is DType.U8:
        return ctx.op("sub", *broadcast_operands(ctx, _zero(ctx, DType.U8), input, DType.U8), out_shape=input.shape)
    return ctx.op("neg", input, out_shape=input.shape)


@register(operator.pos, "Tensor.positive", torch.positive)
def positive(ctx: EmitContext, input: Value):
    """positive(Tensor(a) self) -> Tensor(a)"""
    return input


@register(torch.relu, "Tensor.relu", F.relu)
def relu(ctx: EmitContext, input: Value, inplace: bool = False):
    """relu(Tensor self) -> Tensor"""
    if input.dtype.is_float:
        return ctx.op("relu", input, out_shape=input.shape)
    return ctx.op("max", *broadcast_operands(ctx, input, 0, input.dtype), out_shape=input.shape)


@register(torch.square, "Tensor.square")
def square(ctx: EmitContext, input: Value):
    """square(Tensor self) -> Tensor (bool gives int64)"""
    if input.dtype.is_float:
        return ctx.op("sqr", input, out_shape=input.shape)
    x = cast(ctx, input, DType.I64) if input.dtype.is_bool else input
    return int_mul(ctx, x, x, x.dtype)


@register(torch.logical_not, "Tensor.logical_not")
def logical_not(ctx: EmitContext, input: Value):
    """logical_not(Tensor self) -> Tensor"""
    if input.dtype.is_bool:
        return ctx.op("not", input, out_shape=input.shape)
    return ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, input, 0, input.dtype))


@register(torch.bitwise_not, "Tensor.bitwise_not", operator.invert)
def bitwise_not(ctx: EmitContext, input: Value):
    """bitwise_not(Tensor self) -> Tensor"""
    if input.dtype.is_bool:
        return ctx.op("not", input, out_shape=input.shape)
    if input.dtype.is_float:
        ctx.fail("bitwise_not of a float tensor is not defined in torch")
    return ctx.call("nnef.bitnot", input)


@register("nnef.bitnot")
def bitnot(ctx: EmitContext, x: Value):
    ctx.fail("bitwise ops on integer tensors have no standard NNEF op; export for tract (TractNNEF)")


# rounding ---------------------------------------------------------------------------------
@register("nnef.round_even")
def round_even(ctx: EmitContext, x: Value):
    """Round half to even (the standard ``round``)."""
    return ctx.op("round", x, out_shape=x.shape)


@register(torch.round, "Tensor.round", torch.special.round)
def round_(ctx: EmitContext, input: Value, *, decimals: int = 0):
    """round.decimals(Tensor self, *, int decimals=0) -> Tensor

    torch's kernel: ``nearbyint(x * 10^d) / 10^d`` (``nearbyint(x / 10^-d) * 10^-d`` for d < 0),
    computed in f32 for f16 inputs; the division is made correctly rounded as in torch.
    """
    if not input.dtype.is_float:
        return input
    if decimals == 0:
        return ctx.call("nnef.round_even", input)
    wide = DType.F32 if input.dtype in (DType.F16, DType.BF16) else input.dtype
    x, scale = cast(ctx, input, wide), float(10.0 ** abs(decimals))
    if decimals > 0:
        y = float_quotient(ctx, ctx.call("nnef.round_even", ew(ctx, "mul", x, scale)), ctx.const(scale, wide), wide)
    else:
        y = ew(ctx, "mul", ctx.call("nnef.round_even", float_quotient(ctx, x, ctx.const(scale, wide), wide)), scale)
    return cast(ctx, y, input.dtype)


# binary arithmetic ---------------------------------------------------------------------------
def _binary(nnef_op: str, promote_div: bool = False):
    def convert(ctx: EmitContext, input, other, alpha=1, *, rounding_mode=None, out=None):
        if rounding_mode is not None:
            return ctx.call("nnef.div_rounding", input, other, rounding_mode)
        dtype = result_dtype(input, other)
        if promote_div and not dtype.is_float:
            dtype = DType.F32
        if dtype.is_bool and nnef_op in BOOL_BINARY and alpha in (1, True):
            return ew(ctx, BOOL_BINARY[nnef_op], cast(ctx, input, dtype), cast(ctx, other, dtype))
        if dtype.is_bool:
            ctx.fail(f"{nnef_op} of bool tensors is not defined in torch (or not supported here)")
        a, b = cast(ctx, input, dtype), cast(ctx, other, dtype)
        if alpha != 1:
            b = int_mul(ctx, b, alpha, dtype) if dtype.is_int and isinstance(b, Value) else (
                ctx.op("mul", *broadcast_operands(ctx, b, alpha, dtype), out_dtype=dtype))
        if nnef_op == "mul" and dtype.is_int and isinstance(a, Value) and isinstance(b, Value):
            return int_mul(ctx, a, b, dtype)
        if nnef_op == "div" and dtype.is_float and dtype is not DType.F64 and ctx.profile.rounded_quotients \
                and feeds_rounding(ctx):
            # a quotient that is then floored or compared: correctly rounded, as torch's
            a, b = (v if isinstance(v, (Value, SymDim)) else float(np.array(v, dtype=dtype.numpy_name)) for v in (a, b))
            return float_quotient(ctx, a, b, dtype)
        if nnef_op in ("mul", "div") and dtype.is_float:
            return ew(ctx, nnef_op, a, b, out_dtype=dtype)  # with its guard against tract's FoldUniformMask
        a, b = broadcast_operands(ctx, a, b, dtype)
        return ctx.op(nnef_op, a, b, out_dtype=dtype, out_shape=broadcast_shape(a, b))

    convert.__name__ = f"binary_{nnef_op}"
    return convert


@register(torch.pow, "Tensor.pow", operator.pow)
def pow_(ctx: EmitContext, input, exponent):
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor (also Tensor_Scalar and Scalar_Tensor)"""
    dtype = result_dtype(input, exponent)
    if dtype.is_bool:
        dtype = DType.I64
    if dtype.is_float:
        a, b = cast(ctx, input, dtype), cast(ctx, exponent, dtype)
        a, b = broadcast_operands(ctx, a, b, dtype)
        return ctx.op("pow", a, b, out_dtype=dtype, out_shape=broadcast_shape(a, b))
    base = cast(ctx, input, dtype) if isinstance(input, Value) else ctx.const(input, dtype)
    if not isinstance(exponent, Value):
        return _int_pow_const(ctx, base, int(exponent), dtype)
    top = None  # a constant exponent's largest item: the bits above it are never set
    items = np.asarray(exponent.data) if exponent.is_constant and exponent.data is not None else None
    if items is not None and items.size:
        top = max(int(items.max()), 0)
    return _int_pow_tensor(ctx, base, cast(ctx, exponent, dtype), dtype, top)


def _int_pow_const(ctx: EmitContext, base: Value, k: int, dtype: DType) -> Value:
    """``base ** k`` for a Python int ``k >= 0`` by squaring, wrapping like torch."""
    if k < 0:
        ctx.fail("Integers to negative integer powers are not allowed (torch raises too)")
    result, power = None, base
    while k:
        if k & 1:
            result = power if result is None else int_mul(ctx, result, power, dtype)
        k >>= 1
        if k:
            power = int_mul(ctx, power, power, dtype)
    if result is None:  # k == 0: ones of the base's shape
        result = ew(ctx, "add", ew(ctx, "sub", base, base), 1)
    return result


def _int_pow_tensor(ctx: EmitContext, base: Value, e: Value, dtype: DType, top: Optional[int] = None) -> Value:
    """``base ** e`` for an integer tensor ``e``, bit by bit; a negative ``e`` follows torch
    (1 for base 1, +-1 for base -1, else 0). ``top``: the largest exponent when known (a constant
    one), whose bits are all there is to take: a 64-bit loop made some 1,000 ops, and tract 0.23.9
    did not finish loading them when a slice and a product followed (fuzz 32236)."""
    bits = _BITS[dtype] if top is None else max(1, min(_BITS[dtype], top.bit_length()))
    sel = select
    e_pos = ew(ctx, "max", e, 0)
    ones = ew(ctx, "add", ew(ctx, "sub", e, e), 1)
    result, power = ones, base
    # NOTE: tract 0.23.9 takes minutes (exponential constant folding) on a chain of i64 products of
    # a constant: the powers of a constant base are computed here instead
    powers = None
    if base.is_constant:
        powers, p = [], np.array(base.data)
        with np.errstate(over="ignore"):
            for _ in range(bits):
                powers.append(ctx.const(p, dtype))
                p = p * p
    for i in range(bits):
        half = ew(ctx, "div", e_pos, 2)
        bit = ew(ctx, "sub", e_pos, int_mul(ctx, half, 2, dtype))
        taken = ctx.call("nnef.compare", "ne", *broadcast_operands(ctx, bit, 0, dtype))
        if powers is not None:
            result = int_mul(ctx, result, sel(ctx, taken, powers[i], ones), dtype)
        else:
            result = sel(ctx, taken, int_mul(ctx, result, power, dtype), result)
            power = int_mul(ctx, power, power, dtype) if i + 1 < bits else power
        e_pos = half
    if dtype is DType.U8:
        return result
    # negative exponents: base 1 -> 1, base -1 -> (-1)^e, anything else -> 0
    odd = ctx.call("nnef.compare", "ne", *broadcast_operands(
        ctx, ew(ctx, "sub", e, int_mul(ctx, ew(ctx, "div", e, 2), 2, dtype)), 0, dtype))
    minus_one = sel(ctx, odd, ew(ctx, "sub", ew(ctx, "sub", ones, ones), 1), ones)
    is_one = ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, base, 1, dtype))
    is_minus_one = ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, base, -1, dtype))
    negative = sel(ctx, is_one, ones, sel(ctx, is_minus_one, minus_one, ew(ctx, "sub", ones, ones)))
    return sel(ctx, ctx.call("nnef.compare", "lt", *broadcast_operands(ctx, e, 0, dtype)), negative, result)


# comparisons ---------------------------------------------------------------------------------
def _compare(nnef_op: str):
    def convert(ctx: EmitContext, input, other):
        dtype = result_dtype(input, other)
        a, b = broadcast_operands(ctx, cast(ctx, input, dtype), cast(ctx, other, dtype), dtype)
        return ctx.call("nnef.compare", nnef_op, a, b)

    convert.__name__ = f"compare_{nnef_op}"
    return convert


@register("nnef.compare")
def compare(ctx: EmitContext, nnef_op: str, a, b):
    return ctx.op(nnef_op, a, b, out_dtype=DType.BOOL, out_shape=broadcast_shape(a, b))


# logic and bitwise ----------------------------------------------------------------------------
def _logic(kind: str):
    def convert(ctx: EmitContext, input, other):
        a, b = broadcast_operands(ctx, cast(ctx, input, DType.BOOL), cast(ctx, other, DType.BOOL), DType.BOOL)
        return ctx.call("nnef.bitwise", kind, a, b)

    convert.__name__ = f"logical_{kind}"
    return convert


def _bitwise(kind: str):
    def convert(ctx: EmitContext, input, other):
        dtype = result_dtype(input, other)
        if dtype.is_float:
            ctx.fail(f"bitwise_{kind} of float tensors is not defined in torch")
        a, b = broadcast_operands(ctx, cast(ctx, input, dtype), cast(ctx, other, dtype), dtype)
        return ctx.call("nnef.bitwise", kind, a, b)

    convert.__name__ = f"bitwise_{kind}"
    return convert


@register("nnef.bitwise")
def bitwise(ctx: EmitContext, kind: str, a: Value, b: Value):
    """and / or / xor on bool tensors with standard ops; integers need tract."""
    if not a.dtype.is_bool:
        ctx.fail(f"bitwise_{kind} on integer tensors has no standard NNEF op; export for tract (TractNNEF)")
    if kind == "xor":
        either = ew(ctx, "or", a, b)
        return ew(ctx, "and", either, ctx.op("not", ew(ctx, "and", a, b), out_shape=either.shape))
    return ew(ctx, kind, a, b)


def _shift(direction: str):
    def convert(ctx: EmitContext, input, other):
        dtype = result_dtype(input, other)
        if not dtype.is_int:
            ctx.fail(f"bitwise_{direction}_shift is defined on integer tensors only")
        a = cast(ctx, input, dtype) if isinstance(input, Value) else ctx.const(input, dtype)
        b = cast(ctx, other, dtype) if isinstance(other, Value) else ctx.const(other, dtype)
        return ctx.call("nnef.shift", direction, *broadcast_operands(ctx, a, b, dtype))

    convert.__name__ = f"shift_{direction}"
    return convert


@register("nnef.shift")
def shift(ctx: EmitContext, direction: str, a: Value, b: Value):
    ctx.fail("bit shifts have no standard NNEF op; export for tract (TractNNEF)")


def _sources(name: str) -> list:
    """torch.<name>, Tensor.<name> and F.<name> where they exist."""
    out = [f"Tensor.{name}"]
    for ns in (torch, F, torch.special):
        fn = getattr(ns, name, None)
        if callable(fn) and not isinstance(fn, type):
            out.append(fn)
    return out


def _register_family(table: dict, factory) -> None:
    seen = set()
    for name, nnef_op in table.items():
        conv = factory(nnef_op) if factory is not _binary else _binary(nnef_op, promote_div=name in ("div", "true_divide"))
        for src in _sources(name):
            key = src if isinstance(src, str) else id(src)
            if key in seen:
                continue
            seen.add(key)
            REGISTRY.add(src, conv)


_register_family(UNARY, _unary)
_register_family(INTEGER_UNARY, _integer_unary)
_register_family(BINARY, _binary)
_register_family(COMPARE, _compare)
_register_family(LOGIC, _logic)
_register_family(BITWISE, _bitwise)
_register_family(SHIFTS, _shift)
REGISTRY.add(operator.abs, _integer_unary("abs"))
REGISTRY.add(operator.and_, _bitwise("and"))
REGISTRY.add(operator.or_, _bitwise("or"))
REGISTRY.add(operator.xor, _bitwise("xor"))
REGISTRY.add(operator.lshift, _shift("left"))
REGISTRY.add(operator.rshift, _shift("right"))
for _op, _nnef in OPERATORS.items():
    REGISTRY.add(_op, _binary(_nnef, promote_div=_op is operator.truediv) if _nnef in BINARY.values() else _compare(_nnef))


# ---- isnan / isinf / isfinite --------------------------------------------------------------------------------------
def _largest(dtype: DType) -> float:
    """The largest finite value of a float dtype (f32's for the wider ones, as literals are read as f32)."""
    return float(np.finfo(np.float16 if dtype is DType.F16 else np.float32).max)


@register(torch.isnan, "Tensor.isnan")
def isnan(ctx: EmitContext, input: Value):
    """isnan(Tensor self) -> Tensor"""
    return ctx.call("nnef.compare", "ne", input, input)


# name -> (NNEF comparison, compare |x| rather than x, sign of the bound, result for integers)
CLASSIFIERS = {
    "isinf": ("gt", True, 1, False), "isfinite": ("le", True, 1, True),
    "isposinf": ("gt", False, 1, False), "isneginf": ("lt", False, -1, False),
}


def _classifier(name: str, op: str, magnitude: bool, sign: int, int_result: bool):
    """Compare x (or |x|) with the largest finite value: NaN compares False, inf beyond it."""
    def convert(ctx: EmitContext, input: Value):
        if not input.dtype.is_float:
            return ctx.call("nnef.compare", "eq" if int_result else "ne", input, input)
        x = ctx.op("abs", input, out_shape=input.shape) if magnitude else input
        return ctx.op(op, x, sign * _largest(input.dtype), out_dtype=DType.BOOL, out_shape=input.shape)

    convert.__name__, convert.__doc__ = name, f"{name}(Tensor self) -> Tensor"
    return convert


for _name, _rule in CLASSIFIERS.items():
    register(getattr(torch, _name), f"Tensor.{_name}")(_classifier(_name, *_rule))


# ---- hypot / isclose -------------------------------------------------------------------------------------------
@register(torch.hypot, "Tensor.hypot")
def hypot(ctx: EmitContext, input, other):
    """hypot(Tensor self, Tensor other) -> Tensor (sqrt(a^2 + b^2) in f64: no overflow, rounded once)"""
    dtype = result_dtype(input, other)
    if not dtype.is_float:
        ctx.fail("hypot is defined on float tensors only (torch refuses integers)")
    a, b = (cast(ctx, v, DType.F64) if isinstance(v, Value) else float(v) for v in (input, other))
    total = ew(ctx, "add", ew(ctx, "mul", a, a), ew(ctx, "mul", b, b)) if isinstance(a, Value) else \
        ew(ctx, "add", ew(ctx, "mul", b, b), a * a)
    return cast(ctx, ctx.op("sqrt", total, out_shape=total.shape), dtype)


@register(torch.isclose, "Tensor.isclose")
def isclose(ctx: EmitContext, input: Value, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """isclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> Tensor

    torch's steps: ``a == b``, or (``|a - b|`` finite and ``<= atol + |rtol * b|``), the latter
    in f32 for integer and bool tensors.
    """
    dtype = result_dtype(input, other)
    a, b = cast(ctx, input, dtype), cast(ctx, other, dtype)
    if not isinstance(b, Value):
        b = ctx.const(np.array(b, dtype=dtype.numpy_name), dtype)
    close = ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, a, b, dtype))
    if equal_nan and dtype.is_float:
        both_nan = ew(ctx, "and", ctx.call("nnef.compare", "ne", a, a), ctx.call("nnef.compare", "ne", b, b))
        close = ew(ctx, "or", close, both_nan)
    if rtol == 0 and atol == 0:
        return close
    if not dtype.is_float:
        a, b, dtype = cast(ctx, a, DType.F32), cast(ctx, b, DType.F32), DType.F32
    scaled = ew(ctx, "mul", b, float(rtol))
    allowed = ew(ctx, "add", ctx.op("abs", scaled, out_shape=scaled.shape), float(atol))
    diff = ew(ctx, "sub", a, b)
    actual = ctx.op("abs", diff, out_shape=diff.shape)
    within = ctx.call("nnef.compare", "le", *broadcast_operands(ctx, actual, allowed, dtype))
    finite = ctx.call("nnef.compare", "le", actual, _largest(dtype))
    return ew(ctx, "or", close, ew(ctx, "and", within, finite))


# ---- atan2 / erfc ----------------------------------------------------------------------------------------------------
@register(torch.atan2, torch.arctan2, "Tensor.atan2", "Tensor.arctan2")
def atan2(ctx: EmitContext, input: Value, other, *, out=None):
    """atan2(Tensor self, Tensor other) -> Tensor: the angle of the point (other, self).

    ``atan(y / x)``, plus or minus pi where x < 0 (by the sign of y), and ``sign(y) * pi / 2``
    where x == 0 (0 at the origin), as torch gives for every sign except that of a zero."""
    import math

    dtype = result_dtype(input, other)
    dtype = dtype if dtype.is_float else DType.F32
    y, x = cast(ctx, input, dtype), cast(ctx, other, dtype)
    q = ew(ctx, "div", y, x)
    ratio = ctx.op("atan", q, out_dtype=dtype, out_shape=q.shape)
    turn = select(ctx, ctx.call("nnef.compare", "ge", y, 0.0), math.pi, -math.pi)
    r = select(ctx, ctx.call("nnef.compare", "lt", x, 0.0), ew(ctx, "add", ratio, turn), ratio)
    sign = ctx.op("sign", y, out_dtype=dtype, out_shape=y.shape)
    return select(ctx, ctx.call("nnef.compare", "eq", x, 0.0), ew(ctx, "mul", sign, math.pi / 2), r)


@register(torch.erfc, torch.special.erfc, "Tensor.erfc")
def erfc(ctx: EmitContext, input: Value, *, out=None):
    """erfc(Tensor self) -> Tensor: 1 - erf(x) (absolute error near the float epsilon where it is tiny)."""
    return ew(ctx, "sub", 1.0, ctx.call("torch.erf", input))


# ---- logaddexp, xlogy, copysign, heaviside, sinc, logit, ldexp, float_power ----------------------------------------
def _float_operands(ctx: EmitContext, input, other) -> tuple:
    """Both operands as tensors of torch's float result dtype (integers and bools promote to f32)."""
    dtype = result_dtype(input, other)
    dtype = dtype if dtype.is_float else DType.F32
    a, b = (cast(ctx, v, dtype) if isinstance(v, Value) else ctx.const(np.array(v, dtype=dtype.numpy_name), dtype)
            for v in (input, other))
    return a, b, dtype


def _both(ctx: EmitContext, a: Value, b: Value) -> Value:
    """``a and b`` on bool tensors. NOTE: ``helpers.ew`` guards an ``and`` of two computed tensors
    against tract's FoldUniformMask with a runtime zero, which casts to i64, also for Khronos
    (no standard cast there): a target with ``uniform_folding`` keeps the guard, the others a plain ``and``."""
    if ctx.profile.uniform_folding:
        return ew(ctx, "and", a, b)
    a, b = broadcast_operands(ctx, a, b, DType.BOOL)
    return ctx.op("and", a, b, out_dtype=DType.BOOL, out_shape=broadcast_shape(a, b))


def _is_inf(ctx: EmitContext, x: Value) -> Value:
    return ctx.call("nnef.compare", "gt", ctx.op("abs", x, out_shape=x.shape), _largest(x.dtype))


def _log_add_exp(ctx: EmitContext, input, other, base2: bool) -> Value:
    a, b, _ = _float_operands(ctx, input, other)
    m = ew(ctx, "max", a, b)
    d = ew(ctx, "sub", a, b)
    gap = ctx.op("neg", ctx.op("abs", d, out_shape=d.shape), out_shape=d.shape)
    if base2:
        tail = ew(ctx, "div", ctx.call("torch.log1p", un_exp(ctx, ew(ctx, "mul", gap, float(np.log(2.0))))),
                  float(np.log(2.0)))
    else:
        tail = ctx.call("torch.log1p", un_exp(ctx, gap))
    y = ew(ctx, "add", m, tail)
    # two equal infinities: their difference is NaN, torch returns the infinity
    same_inf = _both(ctx, ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, a, b)), _is_inf(ctx, a))
    return select(ctx, same_inf, a, y)


def un_exp(ctx: EmitContext, x: Value) -> Value:
    return ctx.op("exp", x, out_shape=x.shape)


@register(torch.logaddexp, "Tensor.logaddexp")
def logaddexp(ctx: EmitContext, input, other):
    """logaddexp(Tensor self, Tensor other) -> Tensor: ``max + log1p(exp(-|a - b|))`` (two equal
    infinities give that infinity, as in torch)."""
    return _log_add_exp(ctx, input, other, base2=False)


@register(torch.logaddexp2, "Tensor.logaddexp2")
def logaddexp2(ctx: EmitContext, input, other):
    """logaddexp2(Tensor self, Tensor other) -> Tensor: ``max + log1p(2^-|a - b|) / ln 2``."""
    return _log_add_exp(ctx, input, other, base2=True)


@register(torch.xlogy, torch.special.xlogy, "Tensor.xlogy")
def xlogy(ctx: EmitContext, input, other):
    """xlogy.Tensor(Tensor self, Tensor other) -> Tensor: ``x * log(y)``, 0 where x == 0 unless y is NaN."""
    x, y, _ = _float_operands(ctx, input, other)
    prod = ew(ctx, "mul", x, ctx.op("log", y, out_shape=y.shape))
    zero = _both(ctx, ctx.call("nnef.compare", "eq", x, 0.0), ctx.call("nnef.compare", "eq", y, y))
    return select(ctx, zero, 0.0, prod)


@register(torch.copysign, "Tensor.copysign")
def copysign(ctx: EmitContext, input, other):
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor: ``|a|`` with the sign of ``b``, negative
    zero included (``1 / b`` is -inf there). A NaN ``b`` counts as positive (torch reads its sign
    bit: a NaN with the sign bit set, rare, would differ)."""
    a, b, _ = _float_operands(ctx, input, other)
    mag = ctx.op("abs", a, out_shape=a.shape)
    below = ctx.call("nnef.compare", "lt", b, 0.0)
    inverse = ew(ctx, "div", 1.0, b)
    neg_zero = _both(ctx, ctx.call("nnef.compare", "eq", b, 0.0), ctx.call("nnef.compare", "lt", inverse, 0.0))
    negative = ew(ctx, "or", below, neg_zero)
    return select(ctx, negative, ctx.op("neg", mag, out_shape=mag.shape), mag)


@register(torch.heaviside, "Tensor.heaviside")
def heaviside(ctx: EmitContext, input: Value, values):
    """heaviside(Tensor self, Tensor values) -> Tensor: ``values`` where x == 0, 1 where x > 0,
    else 0 (NaN gives 0, as in torch)."""
    dtype = result_dtype(input, values)
    if dtype.is_bool:
        ctx.fail("heaviside of bool tensors is not supported")
    x = cast(ctx, input, dtype)
    one, zero = (ctx.const(np.array(k, dtype=dtype.numpy_name), dtype) for k in (1, 0))
    step = select(ctx, ctx.call("nnef.compare", "gt", *broadcast_operands(ctx, x, 0, dtype)), one, zero)
    v = cast(ctx, values, dtype) if isinstance(values, Value) else ctx.const(np.array(values, dtype=dtype.numpy_name), dtype)
    return select(ctx, ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, x, 0, dtype)), v, step)


@register(torch.sinc, torch.special.sinc, "Tensor.sinc")
def sinc(ctx: EmitContext, input: Value):
    """sinc(Tensor self) -> Tensor: ``sin(pi x) / (pi x)``, 1 at 0."""
    import math

    x = input if input.dtype.is_float else cast(ctx, input, DType.F32)
    px = ew(ctx, "mul", x, math.pi)
    y = ew(ctx, "div", ctx.op("sin", px, out_shape=px.shape), px)
    return select(ctx, ctx.call("nnef.compare", "eq", x, 0.0), 1.0, y)


@register(torch.logit, torch.special.logit, "Tensor.logit")
def logit(ctx: EmitContext, input: Value, eps=None):
    """logit(Tensor self, float? eps=None) -> Tensor: ``log(z / (1 - z))``, z = x clamped to
    [eps, 1 - eps] when eps is given (NaN stays NaN)."""
    z = input if input.dtype.is_float else cast(ctx, input, DType.F32)
    if eps is not None:
        lo, hi = float(eps), 1.0 - float(eps)
        z = select(ctx, ctx.call("nnef.compare", "lt", z, lo), lo, select(ctx, ctx.call("nnef.compare", "gt", z, hi), hi, z))
    q = ew(ctx, "div", z, ew(ctx, "sub", 1.0, z))
    return ctx.op("log", q, out_shape=q.shape)


@register(torch.ldexp, "Tensor.ldexp")
def ldexp(ctx: EmitContext, input, other):
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor: ``x * 2 ** e`` (a float result)."""
    x, e, dtype = _float_operands(ctx, input, other)
    scale = ew(ctx, "pow", *broadcast_operands(ctx, ctx.const(np.array(2.0, dtype=dtype.numpy_name), dtype), e))
    return ew(ctx, "mul", x, scale)


@register(torch.float_power, "Tensor.float_power")
def float_power(ctx: EmitContext, input, exponent):
    """float_power.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor: ``pow`` in float64."""
    a, b = (cast(ctx, v, DType.F64) if isinstance(v, Value) else ctx.const(np.array(v, dtype=np.float64), DType.F64)
            for v in (input, exponent))
    a, b = broadcast_operands(ctx, a, b, DType.F64)
    return ctx.op("pow", a, b, out_dtype=DType.F64, out_shape=broadcast_shape(a, b))
