"""Items read or filled at given positions: take, index_fill, embedding_bag."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import axis, cast, ew, rank, select, un
from ..registry import register
from .arith import _add, _and, _cmp, _const, _div, _mul, _sub, _where
from .reduce import reduce
from .shape import reshape_to


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
