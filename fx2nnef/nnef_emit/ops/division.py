"""Exact division with rounding: fmod, remainder, floor_divide and ``div(rounding_mode=...)``.

NOTE: tract 0.23.9 divides as ``a * (1 / b)``: about 1 in 4 quotients (f32 and f64 alike) is
one ulp off, and ``x / x`` can be 0.99999994, so ``floor(a / b)`` is not a floor division.
Its add, sub, mul and casts are correctly rounded, which is what the lowerings below rely on:
- float operands (f16/f32) are computed in f64: there the remainder ``a - q * b`` of an integer
  ``q`` of at most 29 significant bits is exact, and a quotient known to 1 f64 ulp, rounded to
  f32, is the correctly rounded f32 quotient (an f32 quotient is never closer than 2^-49 to a
  rounding boundary). Huge quotients are reduced in steps of 29 bits, so every f32 pair is exact.
- integer operands use tract's integer ``div``, which truncates; floor is derived from it.
torch's own algorithms are followed (its ``div_floor_floating``, ``remainder``, ``fmod``).
"""
from __future__ import annotations

import operator

import numpy as np
import torch

from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import cast, compare, ew, result_dtype, scalar_operand, select, un
from ..registry import register, sources

_SPLIT = float(2 ** 24 + 1)  # Veltkamp: q * 2^24+1 splits a f64 into its top 29 bits
_EXACT_Q = float(2 ** 29)
# how many 29-bit reduction steps bring any quotient of two finite values below 2^29
_STEPS = {DType.F16: 2, DType.F32: 11}


def _operands(ctx: EmitContext, a, b) -> tuple:
    """Both operands as tensors of the promoted dtype (Python numbers become constants)."""
    dtype = result_dtype(a, b)
    a, b = (cast(ctx, v, dtype) if isinstance(v, Value) else scalar_operand(ctx, v, dtype) if isinstance(v, SymDim)
            else ctx.const(np.array(v, dtype=dtype.numpy_name), dtype) for v in (a, b))
    return a, b, dtype


def _opmath(dtype: DType) -> DType:
    """The dtype torch rounds each step to: its CPU kernels for these ops compute f16 in f16."""
    return dtype


def _trunc64(ctx: EmitContext, q: Value) -> Value:
    return select(ctx, compare(ctx, "lt", q, 0.0), un(ctx, "ceil", q), un(ctx, "floor", q))


def _fmod_f64(ctx: EmitContext, a: Value, b: Value, dtype: DType) -> Value:
    """fmod of two f64 tensors holding ``dtype`` values, exact (in f64)."""
    r = a
    for _ in range(_STEPS[dtype]):
        q = ew(ctx, "div", r, b)
        c = ew(ctx, "mul", q, _SPLIT)
        top = ew(ctx, "sub", c, ew(ctx, "sub", c, q))
        q = select(ctx, compare(ctx, "lt", un(ctx, "abs", q), _EXACT_Q), _trunc64(ctx, q), top)
        r = ew(ctx, "sub", r, ew(ctx, "mul", q, b))
    # the last quotient may be one off: bring r to the sign of a and below |b|
    sa, mb = un(ctx, "sign", a), un(ctx, "abs", b)
    r = select(ctx, compare(ctx, "lt", ew(ctx, "mul", un(ctx, "sign", r), sa), 0.0), ew(ctx, "add", r, ew(ctx, "mul", sa, mb)), r)
    r = select(ctx, compare(ctx, "ge", un(ctx, "abs", r), mb), ew(ctx, "sub", r, ew(ctx, "mul", sa, mb)), r)
    return r


def float_fmod(ctx: EmitContext, a: Value, b: Value) -> Value:
    """torch.fmod for float tensors of one dtype, exact."""
    wide = _opmath(a.dtype)
    a64, b64 = cast(ctx, a, DType.F64), cast(ctx, b, DType.F64)
    r = _fmod_f64(ctx, a64, b64, wide)
    # a finite a modulo an infinite b is a (the steps above multiply 0 by inf: nan)
    inf = ctx.const(np.array(np.inf, dtype=np.float64), DType.F64)
    finite_a = compare(ctx, "lt", un(ctx, "abs", a64), inf)
    r = select(ctx, compare(ctx, "eq", un(ctx, "abs", b64), inf), select(ctx, finite_a, a64, r), r)
    return cast(ctx, r, a.dtype)


def float_quotient(ctx: EmitContext, a: Value, b: Value, dtype: DType) -> Value:
    """``a / b`` correctly rounded to ``dtype`` (f16 or f32), through f64."""
    return cast(ctx, ew(ctx, "div", cast(ctx, a, DType.F64), cast(ctx, b, DType.F64)), dtype)


# ops whose result jumps where their operand crosses a boundary: a quotient one ulp off there
# gives another integer, bool or index
_ROUNDING = {"floor", "ceil", "round", "trunc", "fix", "floor_divide", "floordiv", "remainder", "mod", "fmod",
             "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal",
             "long", "int", "short", "byte", "char", "bool", "bucketize", "searchsorted", "sign", "heaviside",
             "argmax", "argmin", "div_rounding"}
# ops that carry a quotient on without rounding it more than torch does (elementwise steps, views)
_CARRY = {"add", "sub", "mul", "truediv", "div", "true_divide", "neg", "negative", "abs", "clamp", "clamp_min",
          "clamp_max", "clip", "minimum", "maximum", "multiply", "subtract", "getitem", "reshape", "view",
          "permute", "transpose", "split", "chunk", "cat", "concat", "stack", "expand", "expand_as", "squeeze",
          "unsqueeze", "narrow", "contiguous", "clone", "float", "double", "flatten", "unflatten", "repeat",
          "where", "flip", "roll", "movedim", "add_", "sub_", "mul_", "div_", "clamp_", "neg_", "abs_"}
_INTEGER_DTYPES = ("int", "long", "short", "uint", "bool")


def _stem(kind: str) -> str:
    return kind.rsplit(".", 1)[-1]


def _casts_to_integer(node) -> bool:
    """``.to(torch.long)``, ``.type(torch.int32)``: the cast truncates the quotient."""
    if _stem(node.kind) not in ("to", "type"):
        return False
    named = [a for a in list(node.args[1:]) + list(node.kwargs.values()) if isinstance(a, torch.dtype)]
    return any(str(d).startswith("torch." + p) for d in named for p in _INTEGER_DTYPES)


def feeds_rounding(ctx: EmitContext, limit: int = 16) -> bool:
    """Whether the op being lowered reaches, through elementwise steps and views (the first
    ``limit`` ops reading it and their readers), an op that rounds, compares or casts to an
    integer (``floor(x / T)``, ``x / 20 > 1``).
    There tract's quotient (``a * (1 / b)``, one ulp off in 1 of 4) changes the result by a
    whole unit; elsewhere an ulp is within every tolerance. Beyond a matmul or a reduction the
    quotient is no longer what decides: those round in their own order anyway."""
    node = ctx.node
    if node is None:
        return False
    todo, seen = [o for o in node.outputs], set()
    while todo and len(seen) < limit:
        value = todo.pop()
        for user in value.uses:
            if id(user) in seen:
                continue
            seen.add(id(user))
            stem = _stem(user.kind)
            if stem in _ROUNDING or user.kwargs.get("rounding_mode") is not None or _casts_to_integer(user):
                return True
            if stem in _CARRY:
                todo.extend(user.outputs)
    return False


def _differs(ctx: EmitContext, r: Value, b: Value) -> Value:
    """``r != 0 and (r < 0) != (b < 0)``: a truncated remainder that floor division must move."""
    return compare(ctx, "lt", ew(ctx, "mul", un(ctx, "sign", r), un(ctx, "sign", b)), 0)


def _int_fmod(ctx: EmitContext, a: Value, b: Value) -> tuple:
    q = ew(ctx, "div", a, b)
    return q, ew(ctx, "sub", a, ew(ctx, "mul", q, b))


def fmod_values(ctx: EmitContext, a: Value, b: Value) -> Value:
    """torch.fmod on two tensors of one dtype."""
    if a.dtype.is_float:
        return float_fmod(ctx, a, b)
    if a.dtype is DType.BOOL:
        ctx.fail("fmod of bool tensors is not defined in torch")
    return _int_fmod(ctx, a, b)[1]


def remainder_values(ctx: EmitContext, a: Value, b: Value) -> Value:
    """torch.remainder (the sign of the divisor) on two tensors of one dtype."""
    if a.dtype.is_float:
        wide = _opmath(a.dtype)
        r = cast(ctx, float_fmod(ctx, cast(ctx, a, wide), cast(ctx, b, wide)), wide)
        bw = cast(ctx, b, wide)
        return cast(ctx, select(ctx, _differs(ctx, r, bw), ew(ctx, "add", r, bw), r), a.dtype)
    r = _int_fmod(ctx, a, b)[1]
    return select(ctx, _differs(ctx, r, b), ew(ctx, "add", r, b), r)


def floor_divide_values(ctx: EmitContext, a: Value, b: Value) -> Value:
    """torch.floor_divide / ``div(rounding_mode='floor')`` on two tensors of one dtype."""
    if not a.dtype.is_float:
        q, r = _int_fmod(ctx, a, b)
        return select(ctx, _differs(ctx, r, b), ew(ctx, "sub", q, 1), q)
    out, wide = a.dtype, _opmath(a.dtype)
    a, b = cast(ctx, a, wide), cast(ctx, b, wide)
    mod = cast(ctx, float_fmod(ctx, a, b), wide)
    div = float_quotient(ctx, ew(ctx, "sub", a, mod), b, wide)
    div = select(ctx, _differs(ctx, mod, b), ew(ctx, "sub", div, 1.0), div)
    floor = un(ctx, "floor", div)
    floor = select(ctx, compare(ctx, "gt", ew(ctx, "sub", div, floor), 0.5), ew(ctx, "add", floor, 1.0), floor)
    # b == 0 gives a / b (inf or nan), as torch does
    floor = select(ctx, compare(ctx, "eq", b, 0.0), ew(ctx, "div", a, b), floor)
    return cast(ctx, floor, out)


def trunc_divide_values(ctx: EmitContext, a: Value, b: Value) -> Value:
    """``div(rounding_mode='trunc')``: trunc of the correctly rounded quotient; integers truncate in tract."""
    if not a.dtype.is_float:
        return ew(ctx, "div", a, b)
    wide = _opmath(a.dtype)
    q = float_quotient(ctx, cast(ctx, a, wide), cast(ctx, b, wide), wide)
    return cast(ctx, _trunc64(ctx, q), a.dtype)


def _bool_as_i64(ctx: EmitContext, a: Value, b: Value, dtype: DType) -> tuple:
    if dtype is DType.BOOL:
        return cast(ctx, a, DType.I64), cast(ctx, b, DType.I64), DType.I64
    return a, b, dtype


@register("nnef.div_rounding")
def div_rounding(ctx: EmitContext, input, other, rounding_mode: str):
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor (floor or trunc)"""
    a, b, dtype = _operands(ctx, input, other)
    a, b, dtype = _bool_as_i64(ctx, a, b, dtype)
    if rounding_mode == "floor":
        return floor_divide_values(ctx, a, b)
    if rounding_mode == "trunc":
        return trunc_divide_values(ctx, a, b)
    ctx.fail(f"div: unknown rounding_mode={rounding_mode!r} (torch takes None, 'floor' or 'trunc')")


@register(*sources("fmod"))
def fmod(ctx: EmitContext, input, other):
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor"""
    a, b, _ = _operands(ctx, input, other)
    return fmod_values(ctx, a, b)


@register(*sources("remainder"), operator.mod)
def remainder(ctx: EmitContext, input, other):
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor"""
    a, b, _ = _operands(ctx, input, other)
    return remainder_values(ctx, a, b)


@register(*sources("floor_divide"), operator.floordiv)
def floor_divide(ctx: EmitContext, input, other):
    """floor_divide(Tensor self, Tensor other) -> Tensor"""
    a, b, dtype = _operands(ctx, input, other)
    return floor_divide_values(ctx, *_bool_as_i64(ctx, a, b, dtype)[:2])
