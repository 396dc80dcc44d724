"""tract's overrides of the reduce converters (the common rules: ``fx2nnef.nnef_emit.ops.reduce``)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from fx2nnef.ir import DType, SymDim, Value, product, simplify
from fx2nnef.nnef_emit.context import EmitContext, TRACT_DATUM
from fx2nnef.nnef_emit.helpers import axes, cast, compare, dim_value, ew, rank, select, to_float, un
from fx2nnef.nnef_emit.ops.reduce import (_accumulate_dtype, _earlier, _numeric, _scan_axis, _scan_steps, cumprod,
                                          logcumsumexp, reduce, reduce_axes, squeeze_unless)
from fx2nnef.nnef_emit.ops.shape import expand_to, full_like_value, reshape_to, slice_axis
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("nnef.size", target=TRACT)
def size_tensor_tract(ctx: EmitContext, size: SymDim, dtype: DType):
    """A size that depends on dynamic input dims, as a scalar tensor of ``dtype``; one reading a count
    made from data is computed from the data (see ``helpers.dim_value``)."""
    if isinstance(size, SymDim) and size.symbols & ctx.data_counts:
        return ctx.op("squeeze", dim_value(ctx, size, dtype), axes=[0], out_dtype=dtype, out_shape=())
    return ctx.op("tract_core_cast", size, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=())


@register(torch.prod, "Tensor.prod", target=TRACT)
def prod_tract(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    return reduce(ctx, "tract_core_product_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.cumsum, "Tensor.cumsum", target=TRACT)
def cumsum_tract(ctx: EmitContext, input: Value, dim: int, *, dtype: Optional[DType] = None):
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    return un(ctx, "tract_core_cumsum", x, axis=axes(dim, rank(x))[0], exclusive=False, reverse=False)


@register(torch.cumprod, "Tensor.cumprod", target=TRACT)
def cumprod_tract(ctx: EmitContext, input: Value, dim: int, *, dtype: Optional[DType] = None):
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    Along a dynamic axis of length n: the product of each prefix, as a product reduction of an
    [n, n] selection (memory grows as n squared).
    """
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    if rank(x) == 0 or isinstance(x.shape[_scan_axis(dim, x)], int):
        return cumprod(ctx, input, dim, dtype=dtype)
    chosen, order, r = _prefixes(ctx, x, dim, 1)
    product = reduce(ctx, "tract_core_product_reduce", chosen, [r], keepdim=False)
    return ctx.call("torch.permute", product, [int(i) for i in np.argsort(order)])


def _prefixes(ctx: EmitContext, x: Value, dim: int, fill) -> tuple:
    """``(chosen, order, r)``: ``x`` with the scanned axis ``dim`` moved last (``order``), spread
    over a new last axis of the same length n where row i keeps the items up to i and ``fill``
    after it (an [..., n, n] tensor, reduced over axis ``r`` to a running reduction)."""
    a, r = _scan_axis(dim, x), rank(x)
    n = x.shape[a]
    order = [i for i in range(r) if i != a] + [a]
    moved = ctx.call("torch.permute", x, order)
    square = tuple(moved.shape) + (n,)
    positions = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    later = expand_to(ctx, reshape_to(ctx, positions, [1] * (r - 1) + [1, n]), square)
    rows = expand_to(ctx, reshape_to(ctx, positions, [1] * (r - 1) + [n, 1]), square)
    prefix = ctx.call("nnef.compare", "le", later, rows)
    items = expand_to(ctx, ctx.op("unsqueeze", moved, axes=[r - 1], out_shape=tuple(moved.shape[:-1]) + (1, n),
                                  out_dtype=x.dtype), square)
    chosen = ctx.op("select", prefix, items, full_like_value(ctx, fill, x.dtype, square), out_dtype=x.dtype,
                    out_shape=square)
    return chosen, order, r


def _lowest(dtype: DType, largest: bool):
    """The identity of a running max (``largest``) or min in ``dtype``."""
    if dtype.is_float:
        return -math.inf if largest else math.inf
    info = np.iinfo(dtype.numpy_name)
    return int(info.min if largest else info.max)


def _running_extreme(ctx: EmitContext, input: Value, dim: int, largest: bool) -> tuple:
    """torch.cummax/cummin: (values, int64 indices); on ties the later index, and a NaN stays
    once met (the last NaN's index), as torch does."""
    x = cast(ctx, input, DType.I64) if input.dtype.is_bool else input
    if rank(x) == 0:
        return input, ctx.const(np.array(0, dtype=np.int64), DType.I64)
    a = _scan_axis(dim, x)
    n = x.shape[a]
    positions = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    shape = [1] * rank(x)
    shape[a] = n
    idx = expand_to(ctx, reshape_to(ctx, positions, shape), x.shape)
    if not isinstance(n, int):
        values, idx = _running_extreme_dynamic(ctx, x, idx, dim, largest)
        return cast(ctx, values, input.dtype), idx
    op = "ge" if largest else "le"
    for k in _scan_steps(ctx, n, "cummax" if largest else "cummin"):
        before, before_idx = _earlier(ctx, x, a, k, _lowest(x.dtype, largest)), _earlier(ctx, idx, a, k, 0)
        take = compare(ctx, op, x, before)
        if x.dtype.is_float:  # NaN: a NaN here wins, a NaN before wins over a number here
            here_nan, before_nan = compare(ctx, "ne", x, x), compare(ctx, "ne", before, before)
            take = ew(ctx, "or", here_nan, ew(ctx, "and", take, un(ctx, "not", before_nan)))
        x, idx = select(ctx, take, x, before), select(ctx, take, idx, before_idx)
    return cast(ctx, x, input.dtype), idx


def _running_extreme_dynamic(ctx: EmitContext, x: Value, idx: Value, dim: int, largest: bool) -> tuple:
    """cummax/cummin along a dynamic axis of length n, over [n, n] prefix selections (memory
    grows as n squared): the extreme of each prefix, its last index among equal items, and a
    NaN met in the prefix (the last one) wins, as torch does."""
    lowest = _lowest(x.dtype, largest)
    chosen, order, r = _prefixes(ctx, x, dim, lowest)
    where, _, _ = _prefixes(ctx, idx, dim, -1)  # the item's index in the prefix, -1 after it
    back = [int(i) for i in np.argsort(order)]
    extreme = reduce(ctx, "max_reduce" if largest else "min_reduce", chosen, [r], keepdim=True)
    hit = ew(ctx, "and", compare(ctx, "eq", chosen, extreme), compare(ctx, "ge", where, 0))
    last = reduce(ctx, "max_reduce", select(ctx, hit, where, -1), [r], keepdim=False)
    values = ctx.op("squeeze", extreme, axes=[r], out_shape=tuple(extreme.shape[:-1]), out_dtype=x.dtype)
    if x.dtype.is_float:
        nan_at = select(ctx, compare(ctx, "ne", x, x), idx, -1)
        nans, _, _ = _prefixes(ctx, nan_at, dim, -1)
        last_nan = reduce(ctx, "max_reduce", nans, [r], keepdim=False)
        met = compare(ctx, "ge", last_nan, 0)
        values = select(ctx, met, math.nan, values)
        last = select(ctx, met, last_nan, last)
    return ctx.call("torch.permute", values, back), ctx.call("torch.permute", last, back)


@register(torch.cummax, "Tensor.cummax", target=TRACT)
def cummax(ctx: EmitContext, input: Value, dim: int):
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _running_extreme(ctx, input, dim, True)


@register(torch.cummin, "Tensor.cummin", target=TRACT)
def cummin(ctx: EmitContext, input: Value, dim: int):
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _running_extreme(ctx, input, dim, False)


@register(torch.kthvalue, "Tensor.kthvalue", target=TRACT)
def kthvalue(ctx: EmitContext, input: Value, k: int, dim: int = -1, keepdim: bool = False):
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    The value is exact. Which index torch returns among equal values depends on its selection
    algorithm (neither the first nor the last), so a graph that uses the indices is refused.
    """
    if ctx.node is not None and len(ctx.node.outputs) > 1 and ctx.is_used(ctx.node.outputs[1]):
        ctx.fail("kthvalue's index among equal values depends on torch's selection algorithm, which tract cannot "
                 "reproduce; use only .values, or torch.sort(..., stable=True) / topk for indices")
    x = _numeric(ctx, input)
    a = _scan_axis(dim, x)
    values, indices = ctx.call("torch.topk", x, k, a, False)
    values, indices = (slice_axis(ctx, v, a, simplify(k - 1), k) for v in (values, indices))
    return (squeeze_unless(ctx, cast(ctx, values, input.dtype), values.shape, [a], keepdim),
            squeeze_unless(ctx, indices, indices.shape, [a], keepdim))


@register(torch.logcumsumexp, "Tensor.logcumsumexp", target=TRACT)
def logcumsumexp_tract(ctx: EmitContext, input: Value, dim: int):
    """logcumsumexp(Tensor self, int dim) -> Tensor

    Along a dynamic axis of length n: for each position, the logsumexp of an [n, n] selection of
    the items up to it (the others -inf), shifted by its own running max (memory grows as n squared)."""
    x = to_float(ctx, input)
    if rank(x) == 0 or isinstance(x.shape[_scan_axis(dim, x)], int):
        return logcumsumexp(ctx, input, dim)
    chosen, order, r = _prefixes(ctx, x, dim, -math.inf)
    square = tuple(chosen.shape)
    m = reduce(ctx, "max_reduce", chosen, [r])
    # an infinite running max (all -inf so far, or a +inf) is not subtracted: torch's logsumexp does the same
    finite = compare(ctx, "le", un(ctx, "abs", m), float(np.finfo(np.float32).max))
    m = select(ctx, finite, m, 0.0)
    total = reduce(ctx, "sum_reduce", un(ctx, "exp", ew(ctx, "sub", chosen, m)), [r])
    out = squeeze_unless(ctx, ew(ctx, "add", un(ctx, "log", total), m), square, [r], False)
    return ctx.call("torch.permute", out, [int(i) for i in np.argsort(order)])
