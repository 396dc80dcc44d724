"""Small builders the special functions share: arithmetic, comparisons and selections of Values and
numbers in the working dtype (f32 for half precision), and Horner's rule."""
from __future__ import annotations

import numpy as np

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, compare, ew, select, un


# ---- small builders -----------------------------------------------------------------------------------------------
def _work(ctx: EmitContext, x: Value):
    """``x`` as the float tensor the computation runs in (f32 for integers, bools and half types),
    and the dtype of torch's result."""
    out = x.dtype if x.dtype.is_float else DType.F32
    return cast(ctx, x, DType.F32 if out in (DType.F16, DType.BF16) else out), out


def _add(ctx, a, b):
    return ew(ctx, "add", a, b)


def _sub(ctx, a, b):
    return ew(ctx, "sub", a, b)


def _mul(ctx, a, b):
    return ew(ctx, "mul", a, b)


def _div(ctx, a, b):
    return ew(ctx, "div", a, b)


def _horner(ctx: EmitContext, t: Value, coeffs) -> Value:
    """``sum(c[k] * t**k)`` (coefficients from the lowest power)."""
    acc = _add(ctx, _mul(ctx, t, float(coeffs[-1])), float(coeffs[-2]))
    for c in reversed(coeffs[:-2]):
        acc = _add(ctx, _mul(ctx, acc, t), float(c))
    return acc


def _where(ctx: EmitContext, cond: Value, a, b) -> Value:
    return select(ctx, cond, a, b)


def _cmp(ctx: EmitContext, op: str, a, b) -> Value:
    return compare(ctx, op, a, b)


def _or(ctx: EmitContext, a: Value, b: Value) -> Value:
    return ew(ctx, "or", a, b)


def _and(ctx: EmitContext, a: Value, b: Value) -> Value:
    return ew(ctx, "and", a, b)


def _const(ctx: EmitContext, value: float, dtype: DType) -> Value:
    """A one-item constant (literals cannot hold infinities or NaN)."""
    return ctx.const(np.array(value, dtype=dtype.numpy_name), dtype)


def _is_neg_zero_or_below(ctx: EmitContext, x: Value) -> Value:
    """``x < 0``, or ``x`` is -0.0 (``1 / x`` is -inf there). A NaN with its sign bit set counts as
    positive: no NNEF op reads a NaN's sign."""
    below = _cmp(ctx, "lt", x, 0.0)
    neg_zero = _and(ctx, _cmp(ctx, "eq", x, 0.0), _cmp(ctx, "lt", _div(ctx, 1.0, x), 0.0))
    return _or(ctx, below, neg_zero)


def _frac_to_nearest(ctx: EmitContext, x: Value) -> Value:
    """``x - round(x)``, in [-0.5, 0.5], exact in floating point: sin(pi x) and tan(pi x) are read
    from it without the loss that ``pi * x`` has for large ``x``."""
    return _sub(ctx, x, un(ctx, "round", x))
