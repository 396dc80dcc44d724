"""More math and indexing ops found missing by an op survey: special functions (erfinv, lgamma,
digamma, ndtr, entr, xlog1py), signbit, angle of real tensors, rrelu in eval mode, dist; take,
index_fill, embedding_bag.

Special functions are built from elementary NNEF ops: a rational or polynomial approximation
fitted for float32 (erfinv), or the recurrence that shifts the argument past 8 and an asymptotic
series there (lgamma, digamma), with the reflection formula for negative arguments. Half
precision inputs are computed in float32 and cast back.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import axis, cast, compare, ew, rank, select, un
from ..registry import register
from .reduce import reduce, reduce_axes
from .shape import reshape_to


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


# ---- take, index_fill -----------------------------------------------------------------------------------------------
def _wrapped(ctx: EmitContext, index: Value, n) -> Value:
    """An i64 index with negative items counted from the end of an axis of size ``n``."""
    index = cast(ctx, index, DType.I64)
    if index.is_constant and isinstance(n, int):
        return ctx.const(np.where(index.data < 0, index.data + n, index.data).astype(np.int64), DType.I64)
    size = ctx.call("nnef.size", n, DType.I64) if not isinstance(n, int) else \
        ctx.const(np.array(n, dtype=np.int64), DType.I64)
    return _where(ctx, _cmp(ctx, "lt", index, ctx.const(np.array(0, dtype=np.int64), DType.I64)),
                  _add(ctx, index, size), index)


@register(torch.take, "Tensor.take")
def take(ctx: EmitContext, input: Value, index: Value):
    """take(Tensor self, Tensor index) -> Tensor: items of the flattened input at ``index``
    (negative items count from the end), in the shape of ``index``."""
    flat = reshape_to(ctx, input, [-1]) if rank(input) != 1 else input
    idx = _wrapped(ctx, index, flat.shape[0])
    from .indexing import gather

    return gather(ctx, flat, idx, 0)


def _positions_hit(ctx: EmitContext, n, index: Value) -> Value:
    """A bool vector of length ``n``: true at every position that ``index`` names."""
    idx = reshape_to(ctx, _wrapped(ctx, index, n), [1, -1])
    positions = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    column = ctx.op("unsqueeze", positions, axes=[1], out_shape=(n, 1), out_dtype=DType.I64)
    return reduce(ctx, "any_reduce", _cmp(ctx, "eq", column, idx), [1], False)


@register("Tensor.index_fill", torch.index_fill)
def index_fill(ctx: EmitContext, input: Value, dim: int, index: Value, value):
    """index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor (and the
    overload with a 0-d tensor ``value``): ``value`` at the positions ``index`` names along ``dim``."""
    if not isinstance(index, Value):
        index = ctx.const(np.asarray(index, dtype=np.int64).reshape(-1), DType.I64)
    r = max(rank(input), 1)
    ax = axis(dim, r)
    x = input if rank(input) else reshape_to(ctx, input, [1])
    n = x.shape[ax]
    hit = _positions_hit(ctx, n, index if rank(index) else reshape_to(ctx, index, [1]))
    hit = reshape_to(ctx, hit, [n if a == ax else 1 for a in range(r)])
    if isinstance(value, Value):
        fill = cast(ctx, value, input.dtype)
        fill = reshape_to(ctx, fill, [1] * r) if rank(fill) != r else fill
    elif input.dtype.is_float:
        fill = _const(ctx, float(value), input.dtype)
    else:
        fill = ctx.const(np.array(value, dtype=input.dtype.numpy_name), input.dtype)
    out = select(ctx, hit, fill, x)
    return out if rank(input) else reshape_to(ctx, out, [])


# ---- embedding_bag --------------------------------------------------------------------------------------------------
@register(F.embedding_bag)
def embedding_bag(ctx: EmitContext, input: Value, weight: Value, offsets: Optional[Value] = None, max_norm=None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Optional[Value] = None, include_last_offset: bool = False,
                  padding_idx: Optional[int] = None):
    """embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
    mode='mean', sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    rows of ``weight`` summed, averaged or maxed per bag. A 2-D input has one bag per row; a 1-D
    input is cut into bags at ``offsets`` (read at run time: each item's bag is the number of
    offsets at or before it, minus one). Items equal to ``padding_idx`` are left out; an empty bag
    gives zeros, as in torch."""
    if mode not in ("sum", "mean", "max"):
        ctx.fail(f"embedding_bag: mode={mode!r} is not one of 'sum', 'mean', 'max'")
    if per_sample_weights is not None and mode != "sum":
        ctx.fail("embedding_bag: per_sample_weights is only defined for mode='sum' (torch refuses it too)")
    rows = ctx.call("F.embedding", input, weight, None, max_norm, float(norm_type))  # [..., D]
    dtype = weight.dtype
    kept = None
    if padding_idx is not None:
        pad = padding_idx + weight.shape[0] if padding_idx < 0 else padding_idx
        kept = _cmp(ctx, "ne", input, ctx.const(np.array(pad, dtype=input.dtype.numpy_name), input.dtype))
    if rank(input) == 2:
        if offsets is not None:
            ctx.fail("embedding_bag: offsets must be None for a 2-D input (torch refuses it too)")
        member = kept  # [B, N] or None: every item belongs to its row's bag
        return _bags(ctx, rows, member, per_sample_weights, mode, dtype, bag_axis=None)
    if rank(input) != 1 or offsets is None:
        ctx.fail("embedding_bag: a 1-D input needs offsets (and a 2-D input none)")
    starts = cast(ctx, offsets, DType.I64)
    n_bags = starts.shape[0]
    length = input.shape[0]
    if include_last_offset:
        n_bags = n_bags - 1
        if not isinstance(n_bags, int) or n_bags < 1:
            ctx.fail("embedding_bag with include_last_offset needs a static number of offsets (at least 2)")
        end = reshape_to(ctx, ctx.op("slice", starts, axes=[0], begin=[n_bags], end=[n_bags + 1], out_shape=(1,),
                                     out_dtype=DType.I64), [1, 1])
        starts = ctx.op("slice", starts, axes=[0], begin=[0], end=[n_bags], out_shape=(n_bags,), out_dtype=DType.I64)
    positions = ctx.call("nnef.range", 0, length, 1, DType.I64, (length,))
    pos_row = ctx.op("unsqueeze", positions, axes=[0], out_shape=(1, length), out_dtype=DType.I64)  # [1, L]
    start_col = ctx.op("unsqueeze", starts, axes=[1], out_shape=(n_bags, 1), out_dtype=DType.I64)  # [B, 1]
    started = cast(ctx, _cmp(ctx, "le", start_col, pos_row), DType.I64)  # [B, L]
    bag_of = _sub(ctx, reduce(ctx, "sum_reduce", started, [0], True), ctx.const(np.array(1, dtype=np.int64), DType.I64))
    bag_ids = ctx.call("nnef.range", 0, n_bags, 1, DType.I64, (n_bags,))
    bag_col = ctx.op("unsqueeze", bag_ids, axes=[1], out_shape=(n_bags, 1), out_dtype=DType.I64)
    member = _cmp(ctx, "eq", bag_col, bag_of)  # [B, L]
    if include_last_offset:
        member = _and(ctx, member, _cmp(ctx, "lt", pos_row, end))
    if kept is not None:
        member = _and(ctx, member, reshape_to(ctx, kept, [1, length]))
    return _bags(ctx, rows, member, per_sample_weights, mode, dtype, bag_axis=0)


def _bags(ctx: EmitContext, rows: Value, member: Optional[Value], weights: Optional[Value], mode: str, dtype: DType,
          bag_axis: Optional[int]) -> Value:
    """Reduce embedding ``rows`` into bags. ``bag_axis=None``: rows is [B, N, D] and ``member``
    ([B, N] or None) marks the items kept; ``bag_axis=0``: rows is [L, D] and ``member`` is [B, L]."""
    if weights is not None:
        rows = _mul(ctx, rows, ctx.op("unsqueeze", cast(ctx, weights, dtype), axes=[rank(weights)],
                                      out_shape=tuple(weights.shape) + (1,), out_dtype=dtype))
    if bag_axis is None:
        if member is None:
            if mode == "max":
                return reduce(ctx, "max_reduce", rows, [1], False)
            return reduce(ctx, "sum_reduce" if mode == "sum" else "mean_reduce", rows, [1], False)
        m = ctx.op("unsqueeze", member, axes=[2], out_shape=tuple(member.shape) + (1,), out_dtype=DType.BOOL)
        items_axis = 1
        expanded = rows
    else:
        b, length = member.shape
        m = ctx.op("unsqueeze", member, axes=[2], out_shape=(b, length, 1), out_dtype=DType.BOOL)  # [B, L, 1]
        expanded = ctx.op("unsqueeze", rows, axes=[0], out_shape=(1,) + tuple(rows.shape), out_dtype=dtype)
        items_axis = 1
    count = reduce(ctx, "sum_reduce", cast(ctx, m, dtype), [items_axis], False)  # [B, 1]
    if mode == "max":
        lowest = un(ctx, "neg", _const(ctx, math.inf, dtype))
        best = reduce(ctx, "max_reduce", select(ctx, m, expanded, lowest), [items_axis], False)
        return select(ctx, _cmp(ctx, "gt", count, 0.0), best, 0.0)
    total = reduce(ctx, "sum_reduce", select(ctx, m, expanded, 0.0), [items_axis], False)
    if mode == "sum":
        return total
    return _div(ctx, total, ew(ctx, "max", count, 1.0))
