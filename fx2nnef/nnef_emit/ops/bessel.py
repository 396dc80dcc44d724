"""The modified Bessel functions I0, I1 (and their exponentially scaled forms) and the Kaiser
window built on them.

Special functions are built from elementary NNEF ops: a power series with exact coefficients
where it converges fast, and polynomials fitted here (Chebyshev least squares on float64
references, converted to the power basis and evaluated by Horner's rule in float32) elsewhere.
The accuracy quoted on each function was measured in float32 against float64 references over
the whole float32 range. Half precision inputs are computed in float32 and cast back.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, ew, un
from ..registry import register
from .arith import _cmp, _div, _horner, _mul, _sub, _where, _work


# ---- modified Bessel functions I0, I1 ---------------------------------------------------------------------------------
# |x| <= 8: the power series in t = x^2, I0 = sum t^k / (4^k k!^2), I1 = x sum t^k / (2 4^k k! (k+1)!), 14 terms
# (all positive: no cancellation; relative error below 3e-7 in float32).
# |x| > 8: sqrt(|x|) exp(-|x|) I(|x|) is a polynomial of u = 8 / |x| in [0, 1) (degree 9, fitted here on
# Chebyshev nodes against float64 references; relative error below 8e-8 in float32, 1 / sqrt(2 pi) at u = 0).
_BESSEL_SWITCH = 8.0
_I0_SERIES = tuple(1.0 / (4 ** k * math.factorial(k) ** 2) for k in range(14))
_I1_SERIES = tuple(1.0 / (2 * 4 ** k * math.factorial(k) * math.factorial(k + 1)) for k in range(14))
_I0_LARGE = (0.3989422804124762, 0.006233471017664278, 0.00043835708708324036, 5.6281541499873016e-05,
             1.5596439750864013e-05, -1.2682167926107005e-05, 3.054469788578414e-05, -3.2346547745985536e-05,
             1.896854620693679e-05, -4.128658363858609e-06)
_I1_LARGE = (0.3989422803897053, -0.018700417151727676, -0.0007305550686380526, -7.906347213722734e-05,
             -1.8980805556785954e-05, 1.2907033490526857e-05, -3.2240338135387586e-05, 3.3879164878307376e-05,
             -1.9806409727101073e-05, 4.26325293917207e-06)


def _bessel(ctx: EmitContext, x: Value, order: int, scaled: bool) -> Value:
    """I0 / I1 of ``x`` (float), times exp(-|x|) when ``scaled``.

    As torch computes in float32: unscaled, exp(|x|) overflows past |x| = 88.72 (inf there, also
    where the true value is still finite) and +-inf gives NaN (inf / inf); scaled, +-inf gives 0."""
    mag = un(ctx, "abs", x)
    small = ew(ctx, "min", mag, _BESSEL_SWITCH)  # the series on a clamped argument: no inf * 0 where it is not used
    t = _mul(ctx, small, small)
    series = _horner(ctx, t, _I0_SERIES if order == 0 else _I1_SERIES)
    if order == 1:
        series = _mul(ctx, series, small)
    if scaled:
        series = _mul(ctx, series, un(ctx, "exp", un(ctx, "neg", small)))
    big = ew(ctx, "max", mag, _BESSEL_SWITCH)
    u = _div(ctx, _BESSEL_SWITCH, big)
    large = _div(ctx, _horner(ctx, u, _I0_LARGE if order == 0 else _I1_LARGE), un(ctx, "sqrt", big))
    if not scaled:
        large = _mul(ctx, un(ctx, "exp", big), large)
    y = _where(ctx, _cmp(ctx, "le", mag, _BESSEL_SWITCH), series, large)
    if order == 1:  # odd: the sign of x (I1(-0.0) = -0.0 as in torch)
        y = _where(ctx, _cmp(ctx, "lt", x, 0.0), un(ctx, "neg", y), y)
        y = _where(ctx, _cmp(ctx, "eq", x, 0.0), x, y)
    return _where(ctx, _cmp(ctx, "ne", x, x), x, y)


def _bessel_op(ctx: EmitContext, input: Value, order: int, scaled: bool) -> Value:
    x, out = _work(ctx, input)
    return cast(ctx, _bessel(ctx, x, order, scaled), out)


@register(torch.i0, torch.special.i0, "Tensor.i0", torch.special.modified_bessel_i0)
def i0(ctx: EmitContext, input: Value):
    """i0(Tensor self) -> Tensor: the modified Bessel function of the first kind of order 0
    (relative error below 3e-7 in float32; inf past |x| = 88.72 and NaN at +-inf, as torch's float32)."""
    return _bessel_op(ctx, input, 0, scaled=False)


@register(torch.special.i0e)
def i0e(ctx: EmitContext, input: Value):
    """special_i0e(Tensor self) -> Tensor: exp(-|x|) I0(x) (relative error below 3e-7 in float32)."""
    return _bessel_op(ctx, input, 0, scaled=True)


@register(torch.special.i1, torch.special.modified_bessel_i1)
def i1(ctx: EmitContext, input: Value):
    """special_i1(Tensor self) -> Tensor: the modified Bessel function of the first kind of order 1
    (odd; relative error below 4e-7 in float32; +-inf past |x| = 88.72, NaN at +-inf, as torch's float32)."""
    return _bessel_op(ctx, input, 1, scaled=False)


@register(torch.special.i1e)
def i1e(ctx: EmitContext, input: Value):
    """special_i1e(Tensor self) -> Tensor: exp(-|x|) I1(x) (relative error below 4e-7 in float32)."""
    return _bessel_op(ctx, input, 1, scaled=True)


# ---- Kaiser window ----------------------------------------------------------------------------------------------------
@register(torch.kaiser_window)
def kaiser_window(ctx: EmitContext, window_length, periodic: bool = True, beta: float = 12.0, *,
                  dtype: Optional[DType] = None, layout=None, device=None, pin_memory=False, requires_grad=False):
    """kaiser_window(int window_length, bool periodic=True, float beta=12.0, *, ScalarType? dtype=None, ...) -> Tensor

    ``I0(beta sqrt(1 - ((i - a) / a)^2)) / I0(beta)`` with ``a = M / 2`` (``M`` the window's span,
    see the other windows); the ratio is taken of exponentially scaled I0s, so that it does not
    overflow. A window of one item is ``[1]``; the length may be a dynamic size."""
    from .creation import _window

    if isinstance(beta, Value):
        ctx.fail("kaiser_window with beta read from tensor data is not supported; use a Python number")
    beta = float(beta)
    if dtype is not None and not dtype.is_float:
        ctx.fail("kaiser_window needs a floating point dtype (torch refuses others too)")
    if abs(beta) > 85.0:
        # NOTE: torch computes I0(beta) in float32 and it overflows past 88.7 (inf / inf: NaN items)
        ctx.fail(f"kaiser_window with |beta| = {abs(beta)} > 85: torch's float32 I0(beta) is near overflow there; "
                 "use a smaller beta")
    scale_beta = float(np.float32(np.i0(beta) * math.exp(-abs(beta))))

    def items(ctx, idx, span):
        alpha = _mul(ctx, span, 0.5)
        r = _div(ctx, _sub(ctx, idx, alpha), alpha)
        # (clamped at 0: tract's division may put r one ulp past +-1)
        arg = _mul(ctx, un(ctx, "sqrt", ew(ctx, "max", _sub(ctx, 1.0, _mul(ctx, r, r)), 0.0)), beta)
        # I0(arg) / I0(beta) = i0e(arg) / i0e(beta) * exp(|arg| - |beta|)
        ratio = _div(ctx, _bessel(ctx, arg, 0, scaled=True), scale_beta)
        return _mul(ctx, ratio, un(ctx, "exp", _sub(ctx, un(ctx, "abs", arg), abs(beta))))

    return _window(ctx, window_length, periodic, dtype, items)
