"""Sorting: topk, sort and argsort (tract only: standard NNEF has no sort); bucketize and searchsorted
(a count of comparisons: integer sums, tract only)."""
from __future__ import annotations

import numpy as np
import torch

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, SymDim, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import axis, cast, compare, dim_value, rank, result_dtype, select
from fx2nnef.nnef_emit.ops.reduce import reduce
from fx2nnef.nnef_emit.ops.shape import unsqueeze
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


def _topk(ctx: EmitContext, x: Value, k, dim: int, largest: bool) -> tuple:
    """NOTE: tract 0.23.9 gives the result of a ``k`` read from a tensor a size of its own (``k_0``),
    which no later reshape matches with the size it is (gpt-oss's experts sort their 2*S routed
    tokens: "256*broadcast((k_0), (2*S)) should be equal to 512*S"); ``k`` written as an expression
    loads but fails at run time ("Undetermined symbol in expression"). The items are then taken
    again at ``range(0, k)``, whose size tract knows."""
    ax = axis(dim, rank(x))
    count = ctx.op("squeeze", dim_value(ctx, k, DType.I64), axes=[0], out_shape=()) if isinstance(k, SymDim) else k
    shape = tuple(x.shape[:ax]) + (k,) + tuple(x.shape[ax + 1:])
    values, indices = ctx.op("tract_core_topk", x, k=count, axis=ax, largest=largest, n_out=2, out_shape=shape)
    indices.dtype = DType.I64
    if isinstance(k, SymDim):
        at = ctx.call("nnef.range", 0, k, 1, DType.I64, (k,))
        values = ctx.op("tract_core_gather", values, at, axis=ax, out_shape=shape, out_dtype=values.dtype)
        indices = ctx.op("tract_core_gather", indices, at, axis=ax, out_shape=shape, out_dtype=DType.I64)
    return values, indices


@register(torch.topk, "Tensor.topk", target=TRACT)
def topk(ctx: EmitContext, input: Value, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _topk(ctx, input, k, dim, largest)


@register(torch.sort, "Tensor.sort", target=TRACT)
def sort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """sort(Tensor self, int dim=-1, bool descending=False, *, bool? stable) -> (Tensor values, Tensor indices)

    NOTE: tract's topk keeps equal items in index order (tested both ways), so ``stable=True`` holds.
    """
    return _topk(ctx, input, input.shape[axis(dim, rank(input))], dim, descending)


@register(torch.argsort, "Tensor.argsort", target=TRACT)
def argsort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """argsort(Tensor self, int dim=-1, bool descending=False, *, bool stable=False) -> Tensor"""
    return sort(ctx, input, dim, descending)[1]


# bucketize / searchsorted: a count of the boundaries below each value -------------------------------
def _count_below(ctx: EmitContext, values: Value, boundaries: Value, right: bool, out_int32: bool,
                 batched: bool) -> Value:
    """For each item of ``values``, how many of ``boundaries`` (sorted along their last axis) are
    below it (``<``; ``<=`` with ``right``): the index a binary search gives. ``batched``:
    ``boundaries [..., M]`` pairs with ``values [..., K]`` on the leading axes, else it is 1-D.
    A NaN value counts as above every boundary, as in torch."""
    if boundaries.is_constant and boundaries.dtype.is_float:
        if np.isnan(np.asarray(boundaries.data, dtype=np.float64)).any():
            raise EmitError("bucketize/searchsorted with NaN among the boundaries: torch sorts NaN last, the "
                            "count of boundaries below a value cannot; drop the NaN boundaries")
    x = unsqueeze(ctx, values, rank(values))  # [..., K, 1]
    b = unsqueeze(ctx, boundaries, rank(boundaries) - 1) if batched else boundaries  # [..., 1, M] or [M]
    dtype = result_dtype(values, boundaries)
    below = compare(ctx, "le" if right else "lt", cast(ctx, b, dtype), cast(ctx, x, dtype))
    count = reduce(ctx, "sum_reduce", cast(ctx, below, DType.I64), [rank(below) - 1], False)
    if values.dtype.is_float:
        n = boundaries.shape[-1]
        count = select(ctx, compare(ctx, "ne", values, values), n if isinstance(n, int) else
                       dim_value(ctx, n, DType.I64), count)
    return cast(ctx, count, DType.I32) if out_int32 else count


@register(torch.bucketize, target=TRACT)
def bucketize(ctx: EmitContext, input: Value, boundaries: Value, *, out_int32: bool = False, right: bool = False,
              out=None):
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    if rank(boundaries) != 1:
        raise EmitError(f"bucketize needs 1-D boundaries, got rank {rank(boundaries)}")
    return _count_below(ctx, input, boundaries, right, out_int32, batched=False)


@register(torch.searchsorted, target=TRACT)
def searchsorted(ctx: EmitContext, sorted_sequence: Value, input: Value, *, out_int32: bool = False,
                 right: bool = False, side=None, sorter=None, out=None):
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor"""
    if sorter is not None:
        raise EmitError("searchsorted with a sorter is not supported; sort the sequence first")
    if side is not None:
        right = side == "right"
    batched = rank(sorted_sequence) > 1
    if batched and rank(sorted_sequence) != rank(input):
        raise EmitError("searchsorted of a batched sequence needs a values tensor of the same rank")
    return _count_below(ctx, input, sorted_sequence, right, out_int32, batched)


# median: the middle of a full sort --------------------------------------------------------------------------------------
def _sorted_middle(ctx: EmitContext, input: Value, dim, keepdim: bool, ignore_nan: bool) -> tuple:
    """(values, indices) of the lower median along ``dim`` (the flattened tensor when None)."""
    from fx2nnef.ir import simplify
    from fx2nnef.nnef_emit.ops.reduce import _arg, squeeze_unless
    from fx2nnef.nnef_emit.ops.shape import reshape_to, slice_axis

    if input.dtype.is_bool:
        raise EmitError("median of a bool tensor is not supported (torch refuses it too)")
    x = input
    if dim is None:
        x, dim, keepdim = reshape_to(ctx, input, [-1]), 0, False
    a = axis(dim, rank(x))
    n = x.shape[a]
    is_nan = compare(ctx, "ne", x, x) if x.dtype.is_float else None
    if ignore_nan and is_nan is not None:
        import math
        keyed = select(ctx, is_nan, math.inf, x)  # NaN sorted last
        values, indices = _topk(ctx, keyed, n, a, largest=False)
        valid = reduce(ctx, "sum_reduce", cast(ctx, ctx.op("not", is_nan, out_shape=x.shape), DType.I64), [a])
        middle = ctx.op("max", ctx.op("div", ctx.op("sub", valid, ctx.const(np.ones([1] * rank(x), np.int64), DType.I64),
                                                      out_shape=valid.shape),
                                      ctx.const(np.full([1] * rank(x), 2, np.int64), DType.I64), out_shape=valid.shape),
                        ctx.const(np.zeros([1] * rank(x), np.int64), DType.I64), out_shape=valid.shape)
        v = ctx.op("tract_core_gather_elements", values, middle, axis=a, out_shape=valid.shape, out_dtype=x.dtype)
        i = ctx.op("tract_core_gather_elements", indices, middle, axis=a, out_shape=valid.shape, out_dtype=DType.I64)
        none = compare(ctx, "eq", valid, 0)  # every item NaN: NaN, as torch
        v = select(ctx, none, float("nan"), v)
        i = select(ctx, none, ctx.const(np.zeros([1] * rank(x), np.int64), DType.I64), i)
    else:
        values, indices = _topk(ctx, x, n, a, largest=False)
        mid = (n - 1) // 2 if isinstance(n, int) else SymDim.floordiv(simplify(n - 1), 2)
        v = slice_axis(ctx, values, a, mid, simplify(mid + 1))
        i = slice_axis(ctx, indices, a, mid, simplify(mid + 1))
        if is_nan is not None:  # any NaN: NaN, at the first NaN's index, as torch
            has_nan = reduce(ctx, "any_reduce", is_nan, [a])
            first_nan = _arg(ctx, "argmax_reduce", cast(ctx, is_nan, DType.I64), a, True)
            v = select(ctx, has_nan, float("nan"), v)
            i = select(ctx, has_nan, first_nan, i)
    return squeeze_unless(ctx, v, v.shape, [a], keepdim), squeeze_unless(ctx, i, i.shape, [a], keepdim)


def _median(ctx: EmitContext, input: Value, dim, keepdim: bool, ignore_nan: bool):
    if isinstance(dim, bool):  # median(x, keepdim) is not a signature; a bool here is a misplaced keepdim
        raise EmitError("median: dim must be an int")
    values, indices = _sorted_middle(ctx, input, dim, keepdim, ignore_nan)
    return values if dim is None else (values, indices)


@register(torch.median, "Tensor.median", target=TRACT)
def median(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False):
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices); median(Tensor self) -> Tensor

    The lower of the two middle values for an even count (as torch), from a full stable sort; a
    NaN along ``dim`` gives NaN at the first NaN's index, as in torch. Indices match torch where
    the values are distinct; among equal values torch's selection algorithm picks one of them
    (neither always the first nor the last), this export the one at the middle of a stable sort,
    which can be another of the equal items."""
    return _median(ctx, input, dim, keepdim, ignore_nan=False)


@register(torch.nanmedian, "Tensor.nanmedian", target=TRACT)
def nanmedian(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False):
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices); nanmedian(Tensor self) -> Tensor

    The lower median of the non-NaN items (NaN where all are NaN); the NaN items are sorted as
    +inf, so with both +inf and NaN along ``dim`` an index may point at a NaN where torch points
    at an equal +inf. Ties: see ``median``."""
    return _median(ctx, input, dim, keepdim, ignore_nan=True)
