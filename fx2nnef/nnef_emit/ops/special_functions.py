"""Special functions (erfinv, lgamma, digamma, ndtr, entr, xlog1py) and small real functions
found missing by an op survey: signbit, angle of real tensors, rrelu in eval mode, dist.

Special functions are built from elementary NNEF ops: a rational or polynomial approximation
fitted for float32 (erfinv), or the recurrence that shifts the argument past 8 and an asymptotic
series there (lgamma, digamma), with the reflection formula for negative arguments. Half
precision inputs are computed in float32 and cast back.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, ew, un
from ..registry import register
from .arith import (_add, _and, _cmp, _const, _div, _frac_to_nearest, _horner, _is_neg_zero_or_below, _mul, _sub,
                    _where, _work)


# ---- signbit, angle -------------------------------------------------------------------------------------------------
@register(torch.signbit, "Tensor.signbit")
def signbit(ctx: EmitContext, input: Value):
    """signbit(Tensor self) -> Tensor: true where the sign bit is set, -0.0 included (a NaN whose
    sign bit is set reads as false: no NNEF op can see it)."""
    if input.dtype.is_bool:
        return _cmp(ctx, "ne", input, input)
    if not input.dtype.is_float:
        return _cmp(ctx, "lt", input, ctx.const(np.array(0, dtype=input.dtype.numpy_name), input.dtype))
    return _is_neg_zero_or_below(ctx, input)


@register(torch.angle, "Tensor.angle")
def angle(ctx: EmitContext, input: Value):
    """angle(Tensor self) -> Tensor of a real tensor: pi where x < 0, else 0; NaN stays NaN (complex
    values are rewritten before the emitter)."""
    x, out = _work(ctx, input)
    r = _where(ctx, _cmp(ctx, "lt", x, 0.0), math.pi, 0.0)
    if input.dtype.is_float:
        r = _where(ctx, _cmp(ctx, "ne", x, x), x, r)
    return cast(ctx, r, out)


# ---- erfinv ---------------------------------------------------------------------------------------------------------
# erfinv(x) = x * p(w) with w = -log((1 - x)(1 + x)): p a polynomial of w - 2.5 for w < 5 and of
# sqrt(w) - 3 beyond (the form of Giles' approximation). Coefficients fitted here by weighted least
# squares against float64 erfinv; in float32 the relative error is below 3e-7 over (-1, 1).
_ERFINV_CENTRAL = (1.5014093572444447, 0.24664027760582358, -0.004177373934514852, -0.0012527204104387827,
                   0.00021833231623193518, -4.977416716091795e-06, -3.4591476439891144e-06,
                   4.6950882337653303e-07, 2.2913151441048368e-08, -9.050867274458592e-09)
_ERFINV_TAIL = (2.832976804124837, 1.0016749887622869, 0.009445102666501606, -0.007637544175782955,
                0.00568880485050019, -0.0035971657870571567, 0.0014793466810253582, -5.453998054727018e-05,
                -0.00030403791419857806, 0.00011202681667885769)


@register(torch.erfinv, torch.special.erfinv, "Tensor.erfinv")
def erfinv(ctx: EmitContext, input: Value):
    """erfinv(Tensor self) -> Tensor: polynomial approximations in ``-log(1 - x^2)`` (relative
    error below 3e-7 in float32); +-inf at +-1, NaN outside [-1, 1]."""
    x, out = _work(ctx, input)
    one_minus = _sub(ctx, 1.0, x)  # exact for x in [0.5, 1]: the tail keeps its precision
    one_plus = _add(ctx, x, 1.0)
    w = un(ctx, "neg", un(ctx, "log", _mul(ctx, one_minus, one_plus)))
    central = _horner(ctx, _sub(ctx, w, 2.5), _ERFINV_CENTRAL)
    # NOTE: w is +inf at |x| = 1 and NaN beyond; the tail is evaluated on a clamped w, the
    # special values are selected below
    finite_w = ew(ctx, "min", w, 100.0)
    tail = _horner(ctx, _sub(ctx, un(ctx, "sqrt", finite_w), 3.0), _ERFINV_TAIL)
    y = _mul(ctx, x, _where(ctx, _cmp(ctx, "lt", w, 5.0), central, tail))
    magnitude = un(ctx, "abs", x)
    inf = _const(ctx, math.inf, x.dtype)
    signed_inf = _where(ctx, _cmp(ctx, "lt", x, 0.0), un(ctx, "neg", inf), inf)
    y = _where(ctx, _cmp(ctx, "eq", magnitude, 1.0), signed_inf, y)
    y = _where(ctx, _cmp(ctx, "gt", magnitude, 1.0), _const(ctx, math.nan, x.dtype), y)
    return cast(ctx, y, out)


# ---- lgamma, digamma ------------------------------------------------------------------------------------------------
_SHIFT = 8  # arguments below are moved up by the recurrence; the asymptotic series holds past 8


def _reflected(ctx: EmitContext, x: Value):
    """(negative, y): where ``x < 0``, ``y = 1 - x``, else ``x`` (the reflection formula's argument)."""
    negative = _cmp(ctx, "lt", x, 0.0)
    return negative, _where(ctx, negative, _sub(ctx, 1.0, x), x)


def _lgamma_positive(ctx: EmitContext, y: Value) -> Value:
    """log Gamma(y) for y >= 0: Stirling's series at z = y + 8, minus the logs of y, y + 1, ..., y + 7."""
    z = _add(ctx, y, float(_SHIFT))
    inv = _div(ctx, 1.0, z)
    inv2 = _mul(ctx, inv, inv)
    series = _mul(ctx, inv, _horner(ctx, inv2, (1 / 12, -1 / 360, 1 / 1260)))
    main = _sub(ctx, _mul(ctx, _sub(ctx, z, 0.5), un(ctx, "log", z)), z)
    stirling = _add(ctx, _add(ctx, main, 0.5 * math.log(2 * math.pi)), series)
    logs = un(ctx, "log", un(ctx, "abs", y))
    for k in range(1, _SHIFT):
        logs = _add(ctx, logs, un(ctx, "log", _add(ctx, y, float(k))))
    return _sub(ctx, stirling, logs)


@register(torch.lgamma, torch.special.gammaln, "Tensor.lgamma")
def lgamma(ctx: EmitContext, input: Value):
    """lgamma(Tensor self) -> Tensor: log|Gamma(x)| (inf at 0 and the negative integers, and at +-inf)."""
    x, out = _work(ctx, input)
    negative, y = _reflected(ctx, x)
    pos = _lgamma_positive(ctx, y)
    # log|Gamma(x)| = log(pi / |sin(pi x)|) - log Gamma(1 - x) for x < 0
    sin = un(ctx, "abs", un(ctx, "sin", _mul(ctx, _frac_to_nearest(ctx, x), math.pi)))
    reflected = _sub(ctx, _sub(ctx, math.log(math.pi), un(ctx, "log", sin)), pos)
    r = _where(ctx, negative, reflected, pos)
    inf = _const(ctx, math.inf, x.dtype)
    r = _where(ctx, _cmp(ctx, "eq", un(ctx, "abs", x), inf), inf, r)  # (inf - inf in the series)
    return cast(ctx, r, out)


def _digamma_positive(ctx: EmitContext, y: Value) -> Value:
    """digamma(y) for y >= 0 (also -0.0): the asymptotic series at z = y + 8, minus 1/y, ..., 1/(y + 7)."""
    z = _add(ctx, y, float(_SHIFT))
    inv = _div(ctx, 1.0, z)
    inv2 = _mul(ctx, inv, inv)
    series = _mul(ctx, inv2, _horner(ctx, inv2, (-1 / 12, 1 / 120, -1 / 252, 1 / 240)))
    asym = _add(ctx, _sub(ctx, un(ctx, "log", z), _mul(ctx, inv, 0.5)), series)
    recips = _div(ctx, 1.0, y)  # 1 / -0.0 is -inf: digamma(-0.0) = +inf as in torch
    for k in range(1, _SHIFT):
        recips = _add(ctx, recips, _div(ctx, 1.0, _add(ctx, y, float(k))))
    return _sub(ctx, asym, recips)


@register(torch.digamma, torch.special.digamma, torch.special.psi, "Tensor.digamma")
def digamma(ctx: EmitContext, input: Value):
    """digamma(Tensor self) -> Tensor: -inf at 0 (+inf at -0.0), NaN at the negative integers and -inf."""
    x, out = _work(ctx, input)
    negative, y = _reflected(ctx, x)
    pos = _digamma_positive(ctx, y)
    # digamma(x) = digamma(1 - x) - pi / tan(pi x) for x < 0
    r0 = _frac_to_nearest(ctx, x)
    tan = un(ctx, "tan", _mul(ctx, r0, math.pi))
    reflected = _sub(ctx, pos, _div(ctx, math.pi, tan))
    r = _where(ctx, negative, reflected, pos)
    pole = _and(ctx, negative, _cmp(ctx, "eq", r0, 0.0))
    r = _where(ctx, pole, _const(ctx, math.nan, x.dtype), r)
    return cast(ctx, r, out)


# ---- ndtr, entr, xlog1py --------------------------------------------------------------------------------------------
@register(torch.special.ndtr)
def ndtr(ctx: EmitContext, input: Value):
    """special_ndtr(Tensor self) -> Tensor: the standard normal CDF, (1 + erf(x / sqrt 2)) / 2
    (absolute error near the float epsilon in the far left tail)."""
    x, out = _work(ctx, input)
    e = ctx.call("torch.erf", _mul(ctx, x, 1 / math.sqrt(2.0)))
    return cast(ctx, _mul(ctx, _add(ctx, e, 1.0), 0.5), out)


@register(torch.special.entr)
def entr(ctx: EmitContext, input: Value):
    """special_entr(Tensor self) -> Tensor: -x log x for x > 0, 0 at 0, -inf below 0, NaN at NaN."""
    x, out = _work(ctx, input)
    positive = _cmp(ctx, "gt", x, 0.0)
    safe = _where(ctx, positive, x, 1.0)
    value = un(ctx, "neg", _mul(ctx, safe, un(ctx, "log", safe)))
    r = _where(ctx, positive, value, 0.0)
    r = _where(ctx, _cmp(ctx, "lt", x, 0.0), un(ctx, "neg", _const(ctx, math.inf, x.dtype)), r)
    r = _where(ctx, _cmp(ctx, "ne", x, x), x, r)
    return cast(ctx, r, out)


@register(torch.special.xlog1py)
def xlog1py(ctx: EmitContext, input, other):
    """special_xlog1py(Tensor self, Tensor other) -> Tensor (and its Scalar overloads):
    x * log1p(y), 0 where x == 0 unless y is NaN."""
    from .elementwise import _float_operands

    a, b, out = _float_operands(ctx, input, other)
    wdt = DType.F32 if out in (DType.F16, DType.BF16) else out
    a, b = cast(ctx, a, wdt), cast(ctx, b, wdt)
    value = _mul(ctx, a, ctx.call("torch.log1p", b))
    r = _where(ctx, _cmp(ctx, "eq", a, 0.0), _mul(ctx, a, 0.0), value)
    r = _where(ctx, _cmp(ctx, "ne", b, b), b, r)
    return cast(ctx, r, out)


# ---- rrelu (eval), dist ---------------------------------------------------------------------------------------------
@register(F.rrelu)
def rrelu(ctx: EmitContext, input: Value, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False):
    """rrelu(input, lower=0.125, upper=0.333, training=False, inplace=False):
    in eval mode a leaky relu of slope (lower + upper) / 2; training draws random slopes (refused)."""
    if training:
        ctx.fail("rrelu with training=True draws a random slope per item, which no graph reproduces; "
                 "export the model in eval mode (model.eval())")
    return ctx.call("F.leaky_relu", input, (float(lower) + float(upper)) / 2)


@register(torch.dist, "Tensor.dist")
def dist(ctx: EmitContext, input: Value, other: Value, p=2):
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor: the p-norm of ``input - other``."""
    return ctx.call("torch.linalg.vector_norm", ctx.call("torch.sub", input, other), float(p))
