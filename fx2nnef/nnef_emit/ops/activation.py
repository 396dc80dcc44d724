"""Activations and composite elementwise math: softmax, GELU family, clamps, shrinks, dropout, erf, fmod, ...

The first section holds a per-channel view builder that norm.py uses too; the element-wise
builders (``ew``, ``compare``, ``un``, ``select``, ``to_float``) are in ``nnef_emit.helpers``.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import axis, cast, compare, ew, rank, result_dtype, select, to_float, un
from ..registry import register, sources

SQRT1_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654
# Abramowitz & Stegun 7.1.26: erf(x) = 1 - t * P(t) * exp(-x^2), t = 1 / (1 + p |x|); |error| < 1.5e-7
ERF_P = 0.3275911
ERF_COEFS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
SELU_ALPHA = 1.6732632423543772
SELU_SCALE = 1.0507009873554805


def channel_view(ctx: EmitContext, v: Value, r: int, dtype: DType) -> Value:
    """A per-channel vector ``[C]`` shaped ``[1, C, 1, ...]`` to broadcast over axis 1 of a rank-``r`` tensor."""
    v = cast(ctx, v, dtype)
    if r < 2 or rank(v) != 1:
        return v
    shape = (1, v.shape[0]) + (1,) * (r - 2)
    if v.is_constant:
        return ctx.const(v.data.reshape(shape), dtype, name=v.name)
    return ctx.op("unsqueeze", v, axes=[0] + list(range(2, r)), out_shape=shape)


def erf_polynomial(ctx: EmitContext, x: Value) -> Value:
    """erf with standard NNEF ops only (Abramowitz & Stegun 7.1.26)."""
    t = ew(ctx, "div", 1.0, ew(ctx, "add", ew(ctx, "mul", un(ctx, "abs", x), ERF_P), 1.0))
    p = ERF_COEFS[0]
    for c in ERF_COEFS[1:]:
        p = ew(ctx, "add", ew(ctx, "mul", t, p), c)
    tail = ew(ctx, "mul", ew(ctx, "mul", t, p), un(ctx, "exp", un(ctx, "neg", ew(ctx, "mul", x, x))))
    return ew(ctx, "mul", un(ctx, "sign", x), ew(ctx, "sub", 1.0, tail))


def _trunc(ctx: EmitContext, x: Value) -> Value:
    """Round toward zero; integer tensors are returned as they are."""
    if not x.dtype.is_float:
        return x
    return select(ctx, compare(ctx, "lt", x, 0.0), un(ctx, "ceil", x), un(ctx, "floor", x))


def _exp_minus_1(ctx: EmitContext, x: Value, scale: float = 1.0) -> Value:
    """``exp(scale * x) - 1``."""
    return ew(ctx, "sub", un(ctx, "exp", x if scale == 1.0 else ew(ctx, "mul", x, scale)), 1.0)


def _positive_or(ctx: EmitContext, x: Value, value: Value) -> Value:
    """``x`` where it is positive, ``value`` elsewhere."""
    return select(ctx, compare(ctx, "gt", x, 0.0), x, value)


def _clamp_const(ctx: EmitContext, x: Value, lo: float, hi: float) -> Value:
    """``min(max(x, lo), hi)`` as torch's hardtanh computes it."""
    return ew(ctx, "min", ew(ctx, "max", x, float(lo)), float(hi))


# softmax family ------------------------------------------------------------------------
def _implicit_softmax_dim(r: int) -> int:
    """The axis torch picks for ``F.softmax(x)`` without ``dim`` (deprecated behaviour)."""
    return 0 if r in (0, 1, 3) else 1


@register(torch.softmax, "Tensor.softmax", torch.special.softmax)
def softmax(ctx: EmitContext, input: Value, dim: int, dtype: Optional[DType] = None):
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    x = to_float(ctx, cast(ctx, input, dtype) if dtype else input)
    return un(ctx, "softmax", x, axes=[axis(dim, rank(x))])


@register(torch.log_softmax, "Tensor.log_softmax", torch.special.log_softmax)
def log_softmax(ctx: EmitContext, input: Value, dim: int, dtype: Optional[DType] = None):
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    x = to_float(ctx, cast(ctx, input, dtype) if dtype else input)
    a = [axis(dim, rank(x))]
    shifted = ew(ctx, "sub", x, ctx.op("max_reduce", x, axes=a, out_shape=_keep(x.shape, a)))
    total = ctx.op("sum_reduce", un(ctx, "exp", shifted), axes=a, out_shape=_keep(x.shape, a))
    return ew(ctx, "sub", shifted, un(ctx, "log", total))


@register(F.softmax)
def softmax_functional(ctx: EmitContext, input: Value, dim: Optional[int] = None, _stacklevel: int = 3,
                       dtype: Optional[DType] = None):
    """softmax(Tensor input, int? dim=None, int _stacklevel=3, ScalarType? dtype=None) -> Tensor"""
    return ctx.call("torch.softmax", input, _implicit_softmax_dim(rank(input)) if dim is None else dim, dtype)


@register(F.log_softmax)
def log_softmax_functional(ctx: EmitContext, input: Value, dim: Optional[int] = None, _stacklevel: int = 3,
                           dtype: Optional[DType] = None):
    """log_softmax(Tensor input, int? dim=None, int _stacklevel=3, ScalarType? dtype=None) -> Tensor"""
    return ctx.call("torch.log_softmax", input, _implicit_softmax_dim(rank(input)) if dim is None else dim, dtype)


def _keep(shape, axes_: list):
    return None if shape is None else tuple(1 if i in axes_ else d for i, d in enumerate(shape))


# erf and GELU --------------------------------------------------------------------------
@register(*sources("erf"))
def erf(ctx: EmitContext, input: Value):
    """erf(Tensor self) -> Tensor"""
    return erf_polynomial(ctx, to_float(ctx, input))


@register(F.gelu)
def gelu(ctx: EmitContext, input: Value, approximate: str = "none"):
    """gelu(Tensor self, *, str approximate='none') -> Tensor"""
    if approximate == "tanh":
        cube = ew(ctx, "mul", ew(ctx, "mul", ew(ctx, "mul", input, input), input), 0.044715)
        inner = ew(ctx, "mul", ew(ctx, "add", input, cube), SQRT_2_OVER_PI)
        return ew(ctx, "mul", ew(ctx, "mul", input, 0.5), ew(ctx, "add", un(ctx, "tanh", inner), 1.0))
    if approximate != "none":
        ctx.fail(f"gelu: unknown approximate={approximate!r}")
    phi = ew(ctx, "add", ctx.call("torch.erf", ew(ctx, "mul", input, SQRT1_2)), 1.0)
    return ew(ctx, "mul", ew(ctx, "mul", input, 0.5), phi)


@register(F.silu)
def silu(ctx: EmitContext, input: Value, inplace: bool = False):
    """silu(Tensor self) -> Tensor"""
    return ew(ctx, "mul", input, un(ctx, "sigmoid", input))


@register(F.mish)
def mish(ctx: EmitContext, input: Value, inplace: bool = False):
    """mish(Tensor self) -> Tensor"""
    softplus_ = un(ctx, "log", ew(ctx, "add", un(ctx, "exp", input), 1.0))
    return ew(ctx, "mul", input, un(ctx, "tanh", softplus_))


# ELU family and friends ----------------------------------------------------------------
@register(F.elu)
def elu(ctx: EmitContext, input: Value, alpha: float = 1.0, inplace: bool = False):
    """elu(Tensor self, Scalar alpha=1) -> Tensor"""
    # NOTE: tract's own elu ignores alpha, hence the explicit formula
    return _positive_or(ctx, input, ew(ctx, "mul", _exp_minus_1(ctx, input), float(alpha)))


@register(*sources("selu"))
def selu(ctx: EmitContext, input: Value, inplace: bool = False):
    """selu(Tensor self) -> Tensor"""
    return ew(ctx, "mul", elu(ctx, input, SELU_ALPHA), SELU_SCALE)


@register(*sources("celu"))
def celu(ctx: EmitContext, input: Value, alpha: float = 1.0, inplace: bool = False):
    """celu(Tensor self, Scalar alpha=1.0) -> Tensor"""
    return _positive_or(ctx, input, ew(ctx, "mul", _exp_minus_1(ctx, input, 1.0 / alpha), float(alpha)))


@register(F.leaky_relu)
def leaky_relu(ctx: EmitContext, input: Value, negative_slope: float = 0.01, inplace: bool = False):
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    return un(ctx, "leaky_relu", input, alpha=float(negative_slope))


@register(*sources("prelu"))
def prelu(ctx: EmitContext, input: Value, weight: Value):
    """prelu(Tensor self, Tensor weight) -> Tensor"""
    w = channel_view(ctx, weight, rank(input), input.dtype)
    return select(ctx, compare(ctx, "lt", input, 0.0), ew(ctx, "mul", input, w), input)


@register(F.hardtanh)
def hardtanh(ctx: EmitContext, input: Value, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    return _clamp_const(ctx, input, min_val, max_val)


@register(F.relu6)
def relu6(ctx: EmitContext, input: Value, inplace: bool = False):
    """relu6(Tensor self) -> Tensor"""
    return _clamp_const(ctx, input, 0.0, 6.0)


@register(F.hardsigmoid)
def hardsigmoid(ctx: EmitContext, input: Value, inplace: bool = False):
    """hardsigmoid(Tensor self) -> Tensor"""
    return ew(ctx, "div", _clamp_const(ctx, ew(ctx, "add", input, 3.0), 0.0, 6.0), 6.0)


@register(F.hardswish)
def hardswish(ctx: EmitContext, input: Value, inplace: bool = False):
    """hardswish(Tensor self) -> Tensor"""
    gate = _clamp_const(ctx, ew(ctx, "add", input, 3.0), 0.0, 6.0)
    return ew(ctx, "div", ew(ctx, "mul", input, gate), 6.0)


@register(F.softplus)
def softplus(ctx: EmitContext, input: Value, beta: float = 1.0, threshold: float = 20.0):
    """softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"""
    scaled = input if beta == 1 else ew(ctx, "mul", input, float(beta))
    soft = un(ctx, "log", ew(ctx, "add", un(ctx, "exp", scaled), 1.0))
    if beta != 1:
        soft = ew(ctx, "div", soft, float(beta))
    return select(ctx, compare(ctx, "gt", scaled, float(threshold)), input, soft)


@register(F.logsigmoid)
def logsigmoid(ctx: EmitContext, input: Value):
    """log_sigmoid(Tensor self) -> Tensor"""
    tail = un(ctx, "log", ew(ctx, "add", un(ctx, "exp", un(ctx, "neg", un(ctx, "abs", input))), 1.0))
    return ew(ctx, "sub", ew(ctx, "min", input, 0.0), tail)


@register(F.softsign)
def softsign(ctx: EmitContext, input: Value):
    """softsign(Tensor input) -> Tensor"""
    return ew(ctx, "div", input, ew(ctx, "add", un(ctx, "abs", input), 1.0))


@register(F.tanhshrink)
def tanhshrink(ctx: EmitContext, input: Value):
    """tanhshrink(Tensor input) -> Tensor"""
    return ew(ctx, "sub", input, un(ctx, "tanh", input))


@register(*sources("threshold"))
def threshold(ctx: EmitContext, input: Value, threshold: float, value: float, inplace: bool = False):
    """threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor"""
    return select(ctx, compare(ctx, "gt", input, threshold), input, value)


@register(*sources("hardshrink"))
def hardshrink(ctx: EmitContext, input: Value, lambd: float = 0.5):
    """hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    return select(ctx, compare(ctx, "gt", un(ctx, "abs", input), float(lambd)), input, 0.0)


@register(F.softshrink)
def softshrink(ctx: EmitContext, input: Value, lambd: float = 0.5):
    """softshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    low = select(ctx, compare(ctx, "lt", input, -float(lambd)), ew(ctx, "add", input, float(lambd)), 0.0)
    return select(ctx, compare(ctx, "gt", input, float(lambd)), ew(ctx, "sub", input, float(lambd)), low)


@register(F.glu)
def glu(ctx: EmitContext, input: Value, dim: int = -1):
    """glu(Tensor self, int dim=-1) -> Tensor"""
    d = axis(dim, rank(input))
    size = input.shape[d]
    if not isinstance(size, int):
        ctx.fail(f"glu: the size of axis {dim} must be static to split it in halves, got {size}")
    half = size // 2
    shape = input.shape[:d] + (half,) + input.shape[d + 1:]
    a = ctx.op("slice", input, axes=[d], begin=[0], end=[half], out_shape=shape)
    b = ctx.op("slice", input, axes=[d], begin=[half], end=[size], out_shape=shape)
    return ew(ctx, "mul", a, un(ctx, "sigmoid", b))


# clamps ----------------------------------------------------------------------------------
def _clamp(ctx: EmitContext, x: Value, lo, hi) -> Value:
    dtype = result_dtype(*(v for v in (x, lo, hi) if v is not None))
    y = cast(ctx, x, dtype)
    if lo is not None:
        y = ew(ctx, "max", y, cast(ctx, lo, dtype))
    if hi is not None:
        y = ew(ctx, "min", y, cast(ctx, hi, dtype))
    return y


@register(*sources("clamp"), *sources("clip"))
def clamp(ctx: EmitContext, input: Value, min=None, max=None):
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor"""
    return _clamp(ctx, input, min, max)


@register(*sources("clamp_min"))
def clamp_min(ctx: EmitContext, input: Value, min):
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    return _clamp(ctx, input, min, None)


@register(*sources("clamp_max"))
def clamp_max(ctx: EmitContext, input: Value, max):
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    return _clamp(ctx, input, None, max)


# dropout: identity at inference ------------------------------------------------------------
@register(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d)
def dropout(ctx: EmitContext, input: Value, p: float = 0.5, training: bool = True, inplace: bool = False):
    """dropout(Tensor input, float p=0.5, bool training=True, bool inplace=False) -> Tensor"""
    if training and p > 0:
        ctx.fail("dropout with training=True is random; call model.eval() or pass training=False")
    return input


@register(F.alpha_dropout, F.feature_alpha_dropout)
def alpha_dropout(ctx: EmitContext, input: Value, p: float = 0.5, training: bool = False, inplace: bool = False):
    """alpha_dropout(Tensor input, float p=0.5, bool training=False, bool inplace=False) -> Tensor"""
    return dropout(ctx, input, p, training)


@register(torch.dropout, torch.alpha_dropout, torch.feature_alpha_dropout, torch.feature_dropout)
def dropout_aten(ctx: EmitContext, input: Value, p: float, train: bool):
    """dropout(Tensor input, float p, bool train) -> Tensor"""
    return dropout(ctx, input, p, train)


# composite math --------------------------------------------------------------------------
@register(*sources("reciprocal"))
def reciprocal(ctx: EmitContext, input: Value):
    """reciprocal(Tensor self) -> Tensor"""
    return ew(ctx, "div", 1.0, to_float(ctx, input))


@register(*sources("expm1"))
def expm1(ctx: EmitContext, input: Value):
    """expm1(Tensor self) -> Tensor"""
    x = to_float(ctx, input)
    # NOTE: exp(x) - 1 loses the low bits near 0; there 2t / (1 - t) with t = tanh(x / 2) is exact to ~1 ulp
    t = un(ctx, "tanh", ew(ctx, "mul", x, 0.5))
    small = ew(ctx, "div", ew(ctx, "mul", t, 2.0), ew(ctx, "sub", 1.0, t))
    return select(ctx, compare(ctx, "lt", un(ctx, "abs", x), 0.5), small, _exp_minus_1(ctx, x))


@register(*sources("log1p"))
def log1p(ctx: EmitContext, input: Value):
    """log1p(Tensor self) -> Tensor"""
    x = to_float(ctx, input)
    u = ew(ctx, "add", x, 1.0)
    # NOTE: log(u) * x / (u - 1) cancels the rounding of 1 + x (Goldberg); u == 1 means log1p(x) == x
    # (the ratio first: log(u) * x overflows past x = 3.9e36)
    fixed = ew(ctx, "mul", un(ctx, "log", u), ew(ctx, "div", x, ew(ctx, "sub", u, 1.0)))
    # u == 1 means log1p(x) == x; at x = +inf the correction is inf / inf (NaN): log1p(inf) is inf
    from .elementwise import _largest

    exact = ew(ctx, "or", compare(ctx, "eq", u, 1.0), compare(ctx, "gt", u, _largest(u.dtype)))
    return select(ctx, exact, x, fixed)


@register(*sources("log10"))
def log10(ctx: EmitContext, input: Value):
    """log10(Tensor self) -> Tensor"""
    return ew(ctx, "div", un(ctx, "log", to_float(ctx, input)), math.log(10.0))


@register(*sources("exp2"))
def exp2(ctx: EmitContext, input: Value):
    """exp2(Tensor self) -> Tensor"""
    return un(ctx, "exp", ew(ctx, "mul", to_float(ctx, input), math.log(2.0)))


@register(*sources("sgn"))
def sgn(ctx: EmitContext, input: Value):
    """sgn(Tensor self) -> Tensor"""
    return ctx.call("torch.sign", input)


@register(*sources("trunc"), *sources("fix"))
def trunc(ctx: EmitContext, input: Value):
    """trunc(Tensor self) -> Tensor"""
    return _trunc(ctx, input)


@register(*sources("frac"))
def frac(ctx: EmitContext, input: Value):
    """frac(Tensor self) -> Tensor"""
    return ew(ctx, "sub", input, _trunc(ctx, input))


@register(*sources("lerp"))
def lerp(ctx: EmitContext, input: Value, end: Value, weight):
    """lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor"""
    # torch interpolates from the nearer end: start + w * d for w < 0.5, end - d * (1 - w) otherwise
    diff = ew(ctx, "sub", end, input)
    rest = ew(ctx, "sub", 1.0, weight) if isinstance(weight, Value) else 1.0 - weight
    from_start = ew(ctx, "add", input, ew(ctx, "mul", diff, weight))
    from_end = ew(ctx, "sub", end, ew(ctx, "mul", diff, rest))
    if not isinstance(weight, Value):
        return from_start if weight < 0.5 else from_end
    return select(ctx, compare(ctx, "lt", weight, 0.5), from_start, from_end)


@register(*sources("addcmul"))
def addcmul(ctx: EmitContext, input: Value, tensor1: Value, tensor2: Value, *, value=1):
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    prod = ew(ctx, "mul", tensor1 if value == 1 else ew(ctx, "mul", tensor1, value), tensor2)
    return ew(ctx, "add", input, prod)


@register(*sources("addcdiv"))
def addcdiv(ctx: EmitContext, input: Value, tensor1: Value, tensor2: Value, *, value=1):
    """addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    quot = ew(ctx, "div", tensor1 if value == 1 else ew(ctx, "mul", tensor1, value), tensor2)
    return ew(ctx, "add", input, quot)


@register(*sources("nan_to_num"))
def nan_to_num(ctx: EmitContext, input: Value, nan: Optional[float] = None, posinf: Optional[float] = None,
               neginf: Optional[float] = None):
    """nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor"""
    if not input.dtype.is_float:
        return input
    big = float(np.finfo(input.dtype.numpy_name).max)
    y = select(ctx, compare(ctx, "ne", input, input), float(nan or 0.0), input)
    y = select(ctx, compare(ctx, "gt", input, big), big if posinf is None else float(posinf), y)
    return select(ctx, compare(ctx, "lt", input, -big), -big if neginf is None else float(neginf), y)
