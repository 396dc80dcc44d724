"""quantile and nanquantile, for tract only (standard NNEF has no sort)."""
from __future__ import annotations

import math

import numpy as np
import torch

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import cast, dim_value, ew, rank, un
from fx2nnef.nnef_emit.ops.arith import _add, _cmp, _const, _mul, _sub, _where
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


_QUANTILE_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_q(ctx: EmitContext, q, dtype: DType):
    """(q as a float tensor [Q], whether the result keeps a q axis). ``q`` is a Python number, or a
    0-d or 1-D tensor; a constant one is checked to lie in [0, 1] as torch does."""
    if isinstance(q, Value):
        if q.shape is None or len(q.shape) > 1:
            ctx.fail("quantile: q must be a scalar or a 1-D tensor (torch refuses others too)")
        if q.is_constant:
            data = np.asarray(q.data, dtype=np.float64)
            if np.isnan(data).any() or (data < 0).any() or (data > 1).any():
                ctx.fail("quantile: q values must be in the range [0, 1] (torch refuses others too)")
        vector = len(q.shape) == 1
        qv = cast(ctx, q, dtype)
        return (qv if vector else ctx.op("unsqueeze", qv, axes=[0], out_shape=(1,), out_dtype=dtype)), vector
    values = np.asarray(q, dtype=np.float64)
    if values.ndim > 1 or np.isnan(values).any() or (values < 0).any() or (values > 1).any():
        ctx.fail("quantile: q must be a number or a list of numbers in [0, 1] (torch refuses others too)")
    # NOTE: torch rounds q to the input's dtype before it computes the ranks
    rounded = values.astype(dtype.numpy_name).astype(np.float32).reshape(-1)
    return ctx.const(rounded, DType.F32), values.ndim == 1


def _quantile(ctx: EmitContext, input: Value, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool):
    from fx2nnef.nnef_emit.helpers import axis, compare, select
    from fx2nnef.nnef_emit.ops.reduce import reduce
    from fx2nnef.nnef_emit.ops.shape import expand_to, permute_axes, reshape_to
    from .sort import _topk

    name = "nanquantile" if ignore_nan else "quantile"
    if interpolation not in _QUANTILE_MODES:
        ctx.fail(f"{name}: interpolation must be one of {_QUANTILE_MODES}, got {interpolation!r}")
    if not input.dtype.is_float:
        ctx.fail(f"{name} takes a float tensor (torch refuses {input.dtype.value} too): convert with .float()")
    if isinstance(dim, (list, tuple)):
        ctx.fail(f"{name}: dim must be one int or None")
    out_dtype = input.dtype
    x = cast(ctx, input, DType.F32) if out_dtype in (DType.F16, DType.BF16) else input
    qv, vector = _quantile_q(ctx, q, out_dtype)
    qv = cast(ctx, qv, x.dtype)
    r_in = rank(input)
    if dim is None:
        x, a = reshape_to(ctx, x, [-1]), 0
    else:
        x = x if r_in else reshape_to(ctx, x, [1])
        a = axis(dim, max(r_in, 1))
    r = rank(x)
    n = x.shape[a]
    if isinstance(n, int) and n == 0:
        ctx.fail(f"{name} of an empty axis (torch refuses it too)")
    perm = [i for i in range(r) if i != a] + [a]
    x = permute_axes(ctx, x, perm)  # [..., n]
    lead = tuple(x.shape[:-1])
    is_nan = compare(ctx, "ne", x, x)
    keyed = select(ctx, is_nan, _const_inf(ctx, x.dtype), x)  # NaN sorted last (as +inf)
    ordered, _ = _topk(ctx, keyed, n, r - 1, largest=False)
    qrow = reshape_to(ctx, qv, [1] * (r - 1) + [-1])  # [1, ..., 1, Q]
    if ignore_nan:
        valid = reduce(ctx, "sum_reduce", cast(ctx, ctx.op("not", is_nan, out_shape=x.shape, out_dtype=DType.BOOL),
                                                x.dtype), [r - 1], True)  # [..., 1]
        ranks = ew(ctx, "max", _mul(ctx, qrow, _sub(ctx, valid, 1.0)), 0.0)  # every item NaN: rank 0 (a NaN)
    else:
        last = _sub(ctx, cast(ctx, dim_value(ctx, n, DType.I64), x.dtype), 1.0)
        ranks = _mul(ctx, qrow, reshape_to(ctx, last, [1] * r))
    if interpolation == "lower":
        ranks = un(ctx, "floor", ranks)
    elif interpolation == "higher":
        ranks = un(ctx, "ceil", ranks)
    elif interpolation == "nearest":
        ranks = ctx.call("nnef.round_even", ranks)  # torch's round: half to even
    full = lead + (qv.shape[0],)
    ranks = expand_to(ctx, ranks, full) if tuple(ranks.shape) != full else ranks
    y = _read_at_ranks(ctx, ordered, ranks, full, interpolation)
    if not ignore_nan:  # any NaN along the axis: NaN
        has_nan = reduce(ctx, "any_reduce", is_nan, [r - 1], True)
        y = _where(ctx, has_nan, _const(ctx, math.nan, x.dtype), y)
    else:  # nothing but NaN: NaN (the +inf standing for a NaN was read)
        y = _where(ctx, _cmp(ctx, "eq", valid, 0.0), _const(ctx, math.nan, x.dtype), y)
    # [..., Q] -> [Q, ...] with the reduced axis dropped or kept as 1
    y = permute_axes(ctx, y, [r - 1] + list(range(r - 1)))  # [Q, lead...]
    if dim is None:
        kept = [1] * r_in if keepdim else []
    else:
        kept = list(lead)
        if keepdim:
            kept.insert(a, 1)
        kept = kept if r_in else []
    y = reshape_to(ctx, y, ([qv.shape[0]] if vector else []) + kept)
    return cast(ctx, y, out_dtype)


def _read_at_ranks(ctx: EmitContext, ordered: Value, ranks: Value, full: tuple, interpolation: str) -> Value:
    """The items of ``ordered`` (sorted along its last axis) at the float ``ranks`` (of shape
    ``full``), interpolated between the two nearest items as torch does for ``interpolation``."""
    last = rank(ordered) - 1
    below_at = un(ctx, "floor", ranks)
    below = ctx.op("tract_core_gather_elements", ordered, cast(ctx, below_at, DType.I64), axis=last, out_shape=full,
                   out_dtype=ordered.dtype)
    if interpolation not in ("linear", "midpoint"):
        return below
    above = ctx.op("tract_core_gather_elements", ordered, cast(ctx, un(ctx, "ceil", ranks), DType.I64), axis=last,
                   out_shape=full, out_dtype=ordered.dtype)
    weight = _sub(ctx, ranks, below_at) if interpolation == "linear" else None
    diff = _sub(ctx, above, below)
    if weight is None:  # midpoint: torch's lerp at weight 0.5, end - (end - start) * 0.5
        return _sub(ctx, above, _mul(ctx, diff, 0.5))
    # torch's lerp: start + w (end - start) below w = 0.5, end - (end - start)(1 - w) from it
    return _where(ctx, _cmp(ctx, "lt", weight, 0.5), _add(ctx, below, _mul(ctx, weight, diff)),
                  _sub(ctx, above, _mul(ctx, diff, _sub(ctx, 1.0, weight))))


def _const_inf(ctx: EmitContext, dtype: DType) -> Value:
    return _const(ctx, math.inf, dtype)


@register(torch.quantile, "Tensor.quantile", target=TRACT)
def quantile(ctx: EmitContext, input: Value, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear",
             out=None):
    """quantile(Tensor self, Tensor q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor
    (and q a float): a full sort along ``dim`` (the flattened tensor when None), read at the ranks
    ``q * (n - 1)`` as torch computes them, interpolated as torch's lerp; NaN where the axis holds a
    NaN. ``q`` known at export time or read at run time; ``dim`` may be dynamic."""
    return _quantile(ctx, input, q, dim, keepdim, interpolation, ignore_nan=False)


@register(torch.nanquantile, "Tensor.nanquantile", target=TRACT)
def nanquantile(ctx: EmitContext, input: Value, q, dim=None, keepdim: bool = False, *,
                interpolation: str = "linear", out=None):
    """nanquantile(Tensor self, Tensor q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor:
    as quantile over the items that are not NaN (ranks ``q * (count - 1)`` per row); NaN where
    every item is NaN."""
    return _quantile(ctx, input, q, dim, keepdim, interpolation, ignore_nan=True)
