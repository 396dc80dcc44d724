"""The error-function and gamma families built from elementary NNEF ops: erfcx, log_ndtr, ndtri,
polygamma, mvlgamma."""
from __future__ import annotations

import math

import numpy as np
import torch

from ...ir import Value
from ..context import EmitContext
from ..helpers import cast, ew, un
from ..registry import register
from .arith import _add, _and, _cmp, _const, _div, _horner, _mul, _or, _sub, _where, _work


# ---- erfcx, log_ndtr, ndtri -------------------------------------------------------------------------------------------
# erfcx(x) for x >= 0: P(t) / (1 + 2x) with t = (x - 2) / (x + 2) in [-1, 1), P of degree 12 fitted here (Chebyshev
# least squares against float64 erfcx, converted to the power basis): relative error below 2.2e-7 in float32 over
# [0, 1e30]; for x < 0, 2 exp(x^2) - erfcx(-x) (inf past x = -9.4, as torch).
_ERFCX_K = 2.0


_ERFCX = (1.27697838142703, -0.09276376277486961, -0.16603038352631508, 0.1640494541394307, -0.054220266615177405,
          -0.008018963078665658, 0.008724607639973436, 0.001217410592140529, -0.0014640709109985705,
          -0.0003579204478283551, 0.0002215715505050751, 6.336945836770154e-05, -2.0255989595605796e-05)


def _erfcx_nonneg(ctx: EmitContext, x: Value) -> Value:
    """erfcx of ``x >= 0`` (+inf gives 0)."""
    xc = ew(ctx, "min", x, 1e30)  # t = 1 from there on (inf / inf is NaN)
    t = _div(ctx, _sub(ctx, xc, _ERFCX_K), _add(ctx, xc, _ERFCX_K))
    return _div(ctx, _horner(ctx, t, _ERFCX), _add(ctx, _mul(ctx, x, 2.0), 1.0))


def _erfcx(ctx: EmitContext, x: Value) -> Value:
    pos = _erfcx_nonneg(ctx, un(ctx, "abs", x))
    neg = _sub(ctx, _mul(ctx, un(ctx, "exp", _mul(ctx, x, x)), 2.0), pos)
    y = _where(ctx, _cmp(ctx, "lt", x, 0.0), neg, pos)
    return _where(ctx, _cmp(ctx, "ne", x, x), x, y)


@register(torch.special.erfcx)
def erfcx(ctx: EmitContext, input: Value):
    """special_erfcx(Tensor self) -> Tensor: exp(x^2) erfc(x) (relative error below 3e-7 in float32
    for x >= 0; for x < 0 that of exp(x^2), about x^2 ulps; inf below -9.4, 0 at +inf)."""
    x, out = _work(ctx, input)
    return cast(ctx, _erfcx(ctx, x), out)


@register(torch.special.log_ndtr)
def log_ndtr(ctx: EmitContext, input: Value):
    """special_log_ndtr(Tensor self) -> Tensor: log of the standard normal CDF, from erfcx:
    ``log(erfcx(-x / sqrt 2) / 2) - x^2 / 2`` below 1 (no underflow in the left tail) and
    ``log1p(-erfcx(x / sqrt 2) exp(-x^2 / 2) / 2)`` from 1 on (no rounding of the CDF to 1)."""
    x, out = _work(ctx, input)
    h = _mul(ctx, x, 1 / math.sqrt(2.0))
    left = _sub(ctx, un(ctx, "log", _mul(ctx, _erfcx_nonneg(ctx, ew(ctx, "max", un(ctx, "neg", h), 0.0)), 0.5)),
                _mul(ctx, _mul(ctx, x, x), 0.5))
    # below 1, -x / sqrt 2 can be negative (down to -0.71): erfcx there from its reflection
    left_small = _sub(ctx, un(ctx, "log", _mul(ctx, _erfcx(ctx, un(ctx, "neg", h)), 0.5)),
                      _mul(ctx, _mul(ctx, x, x), 0.5))
    left = _where(ctx, _cmp(ctx, "le", x, 0.0), left, left_small)
    tail = _mul(ctx, _mul(ctx, _erfcx_nonneg(ctx, ew(ctx, "max", h, 0.0)), un(ctx, "exp", _mul(ctx, _mul(ctx, x, x), -0.5))),
                -0.5)
    right = ctx.call("torch.log1p", tail)
    y = _where(ctx, _cmp(ctx, "lt", x, 1.0), left, right)
    return cast(ctx, _where(ctx, _cmp(ctx, "ne", x, x), x, y), out)


# ndtri: sqrt(2) erfinv(2p - 1) where min(p, 1 - p) >= 0.02; below, -ndtri(q) is a polynomial of s = sqrt(-2 log q)
# (mapped from [a, b] to [-1, 1]; q from 0.02 down to 1e-45), degree 12 fitted here against float64 ndtri: relative
# error below 7e-7 in float32.
_NDTRI_Q = 0.02


_NDTRI_A, _NDTRI_B = 2.797149622536537, 14.395577736564244


_NDTRI_TAIL = (8.234946170170328, 5.96814121880495, -0.09002171499982185, 0.05068984603049042, -0.02941842533720314,
               0.01605281755701147, -0.008970544217092303, 0.009696303484480919, -0.0070425991240187094,
               -0.002854871560664404, 0.0027956396928677666, 0.0039904138705112975, -0.0028231231491460014)


@register(torch.special.ndtri)
def ndtri(ctx: EmitContext, input: Value):
    """special_ndtri(Tensor self) -> Tensor: the inverse of the standard normal CDF; -inf at 0, +inf
    at 1, NaN outside [0, 1] (relative error below 1e-6 in float32, tails included)."""
    p, out = _work(ctx, input)
    q = ew(ctx, "min", p, _sub(ctx, 1.0, p))  # 1 - p is exact from p = 0.5 on
    central = _mul(ctx, ctx.call("torch.erfinv", _sub(ctx, _mul(ctx, p, 2.0), 1.0)), math.sqrt(2.0))
    qc = ew(ctx, "max", q, 1e-45)
    s = ew(ctx, "min", un(ctx, "sqrt", _mul(ctx, un(ctx, "log", qc), -2.0)), _NDTRI_B)
    z = _sub(ctx, _mul(ctx, s, 2.0 / (_NDTRI_B - _NDTRI_A)), (_NDTRI_A + _NDTRI_B) / (_NDTRI_B - _NDTRI_A))
    tail = _horner(ctx, z, _NDTRI_TAIL)
    tail = _where(ctx, _cmp(ctx, "lt", p, 0.5), un(ctx, "neg", tail), tail)
    y = _where(ctx, _cmp(ctx, "lt", q, _NDTRI_Q), tail, central)
    inf = _const(ctx, math.inf, p.dtype)
    y = _where(ctx, _cmp(ctx, "eq", p, 0.0), un(ctx, "neg", inf), y)
    y = _where(ctx, _cmp(ctx, "eq", p, 1.0), inf, y)
    outside = _or(ctx, _cmp(ctx, "lt", p, 0.0), _cmp(ctx, "gt", p, 1.0))
    y = _where(ctx, _or(ctx, outside, _cmp(ctx, "ne", p, p)), _const(ctx, math.nan, p.dtype), y)
    return cast(ctx, y, out)


# ---- polygamma, mvlgamma ----------------------------------------------------------------------------------------------
def _trigamma(ctx: EmitContext, x: Value) -> Value:
    """torch's float trigamma: below 0.5, the reflection ``pi^2 / sin^2(pi x)`` (sin of the float32
    product, as torch: large finite values at the negative integers, +inf at 0), then six terms of
    the recurrence and the asymptotic series."""
    reflect = _cmp(ctx, "lt", x, 0.5)
    sin = un(ctx, "sin", _mul(ctx, x, float(np.float32(math.pi))))
    mirror = un(ctx, "neg", _div(ctx, math.pi ** 2, _mul(ctx, sin, sin)))
    z = _where(ctx, reflect, _sub(ctx, 1.0, x), x)
    acc = None
    for _ in range(6):
        term = _div(ctx, 1.0, _mul(ctx, z, z))
        acc = term if acc is None else _add(ctx, acc, term)
        z = _add(ctx, z, 1.0)
    ixx = _div(ctx, 1.0, _mul(ctx, z, z))
    inner = _sub(ctx, 1.0 / 30, _mul(ctx, ixx, 1.0 / 42))
    inner = _sub(ctx, 1.0 / 6, _mul(ctx, ixx, inner))
    series = _div(ctx, _add(ctx, _add(ctx, _div(ctx, 1.0, _mul(ctx, z, 2.0)), 1.0), _mul(ctx, ixx, inner)), z)
    acc = _add(ctx, acc, series)
    return _where(ctx, reflect, un(ctx, "neg", _add(ctx, mirror, acc)), acc)


# Hurwitz zeta(s, a) for a >= 0: nine terms of the sum, then Euler-Maclaurin at a + 9 with six Bernoulli terms
# (as cephes' zeta, which torch's polygamma uses for n >= 2)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730)


def _hurwitz_zeta(ctx: EmitContext, s: int, a: Value) -> Value:
    acc = None
    for k in range(9):
        term = ew(ctx, "pow", _add(ctx, a, float(k)), float(-s))
        acc = term if acc is None else _add(ctx, acc, term)
    z = _add(ctx, a, 9.0)
    inv = _div(ctx, 1.0, z)
    zs = ew(ctx, "pow", z, float(-s))  # z^-s
    acc = _add(ctx, acc, _add(ctx, _div(ctx, _mul(ctx, zs, z), float(s - 1)), _mul(ctx, zs, 0.5)))
    # sum_j B_2j / (2j)! * s (s + 1) ... (s + 2j - 2) * z^(-s - 2j + 1)
    factor, power = 1.0, _mul(ctx, zs, inv)  # z^(-s-1)
    inv2 = _mul(ctx, inv, inv)
    for j, b in enumerate(_BERNOULLI, start=1):
        factor = float(s) if j == 1 else factor * (s + 2 * j - 3) * (s + 2 * j - 2)
        coef = b / math.factorial(2 * j) * factor
        acc = _add(ctx, acc, _mul(ctx, power, coef))
        power = _mul(ctx, power, inv2)
    return acc


def _cot_derivative_poly(n: int) -> np.ndarray:
    """Coefficients (lowest first) of P_n with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))."""
    from numpy.polynomial import polynomial as P

    poly = np.array([0.0, 1.0])
    for _ in range(n):
        poly = -P.polymul([1.0, 0.0, 1.0], P.polyder(poly))
    return poly


def _polygamma_n(ctx: EmitContext, n: int, x: Value) -> Value:
    """polygamma(n, x) for n >= 2: (-1)^(n+1) n! zeta(n + 1, x) for x >= 0, and below 0 the
    reflection psi_n(x) = -pi d^n/dx^n cot(pi x) + (-1)^n psi_n(1 - x); +-inf at 0 and the
    negative integers (and -inf), NaN at +inf, as torch."""
    sign = -1.0 if n % 2 == 0 else 1.0
    scale = sign * math.factorial(n)
    negative = _cmp(ctx, "lt", x, 0.0)
    y = _where(ctx, negative, _sub(ctx, 1.0, x), x)
    pos = _mul(ctx, _hurwitz_zeta(ctx, n + 1, y), scale)
    frac = _sub(ctx, x, un(ctx, "round", x))
    c = _div(ctx, 1.0, un(ctx, "tan", _mul(ctx, frac, math.pi)))
    coeffs = _cot_derivative_poly(n) * math.pi ** (n + 1)
    cot_term = _horner(ctx, c, tuple(float(v) for v in coeffs))
    reflected = _sub(ctx, _mul(ctx, pos, -sign), cot_term)  # (-1)^n psi_n(1 - x) - pi^(n+1) P_n(c)
    r = _where(ctx, negative, reflected, pos)
    pole = _and(ctx, _cmp(ctx, "le", x, 0.0), _cmp(ctx, "eq", frac, 0.0))
    r = _where(ctx, pole, _const(ctx, sign * math.inf, x.dtype), r)
    neg_inf = _cmp(ctx, "eq", x, _const(ctx, -math.inf, x.dtype))
    r = _where(ctx, neg_inf, _const(ctx, sign * math.inf, x.dtype), r)
    pos_inf = _cmp(ctx, "eq", x, _const(ctx, math.inf, x.dtype))
    return _where(ctx, pos_inf, _const(ctx, math.nan, x.dtype), r)


@register(torch.polygamma, torch.special.polygamma)
def polygamma(ctx: EmitContext, n: int, input: Value):
    """polygamma(int n, Tensor self) -> Tensor: digamma for n = 0, torch's trigamma for n = 1, and
    for n >= 2 the Hurwitz zeta series as torch (with the reflection for negative x)."""
    if isinstance(n, Value) or int(n) != n or n < 0:
        ctx.fail(f"polygamma: n must be a non-negative Python int, got {n!r}")
    n = int(n)
    if n == 0:
        return ctx.call("torch.digamma", input)
    x, out = _work(ctx, input)
    if n == 1:
        return cast(ctx, _trigamma(ctx, x), out)
    if n > 12:
        ctx.fail(f"polygamma of order {n} > 12 is not lowered (its values overflow float32 almost everywhere)")
    return cast(ctx, _polygamma_n(ctx, n, x), out)


@register("Tensor.polygamma")
def polygamma_method(ctx: EmitContext, input: Value, n: int):
    """Tensor.polygamma(int n) -> Tensor (see polygamma)"""
    return polygamma(ctx, n, input)


@register(torch.mvlgamma, torch.special.multigammaln, "Tensor.mvlgamma")
def mvlgamma(ctx: EmitContext, input: Value, p: int):
    """mvlgamma(Tensor self, int p) -> Tensor: ``sum_i lgamma(x - i / 2) + p (p - 1) / 4 log pi``
    (torch refuses, while tracing, inputs at or below (p - 1) / 2)."""
    if isinstance(p, Value) or int(p) != p or p < 1:
        ctx.fail(f"mvlgamma: p must be a Python int >= 1, got {p!r}")
    x, out = _work(ctx, input)
    acc = None
    for i in range(int(p)):
        term = ctx.call("torch.lgamma", _sub(ctx, x, i * 0.5) if i else x)
        acc = term if acc is None else _add(ctx, acc, term)
    acc = _add(ctx, acc, p * (p - 1) / 4 * math.log(math.pi))
    return cast(ctx, acc, out)
