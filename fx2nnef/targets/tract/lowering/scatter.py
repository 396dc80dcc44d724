"""Scatters: scatter (a tensor or a value, optionally reduced), scatter_add, scatter_reduce, index_add.

All become tract's ``tract_core_scatter_elements``, whose indices and updates have one shape:
torch lets ``src`` be larger than ``index`` (only the region of ``index`` is read) and gives
index_add a 1-D index, so both are brought to the shape of the index first. Standard NNEF
has no scatter, so these are tract-only.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import (axis, broadcast_shape, cast, compare, dim_value, ew, rank, scalar_operand,
                                       select, unsqueeze_to)
from fx2nnef.nnef_emit.ops.shape import expand_to, full_like_value, slice_axes
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT

_REDUCTIONS = {None: "none", "add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max",
               "amin": "min"}


def _neutral(reduce: str, dtype: DType):
    """The element a reduction leaves unchanged (what an input element not included becomes)."""
    if reduce in ("sum", "add"):
        return 0
    if reduce in ("prod", "multiply"):
        return 1
    info = np.finfo(dtype.numpy_name) if dtype.is_float else np.iinfo(dtype.numpy_name)
    return (-np.inf if dtype.is_float else info.min) if reduce == "amax" else (np.inf if dtype.is_float else info.max)


def _scatter(ctx: EmitContext, x: Value, ax: int, index: Value, updates, reduce) -> Value:
    """``x`` with ``updates`` (a tensor of at least the index's extent, or a number) scattered at ``index``."""
    if reduce not in _REDUCTIONS:
        ctx.fail(f"scatter with reduce={reduce!r} is not supported (supported: {sorted(k for k in _REDUCTIONS if k)})")
    if isinstance(updates, Value):
        region = [(a, 0, index.shape[a], 1) for a in range(rank(index)) if updates.shape[a] != index.shape[a]]
        updates = cast(ctx, slice_axes(ctx, updates, region), x.dtype)
    else:
        updates = full_like_value(ctx, updates, x.dtype, index.shape)
    return ctx.op("tract_core_scatter_elements", x, cast(ctx, index, DType.I64), updates, axis=ax,
                  reduction=_REDUCTIONS[reduce], out_shape=x.shape, out_dtype=x.dtype)


@register(torch.scatter, "Tensor.scatter", target=TRACT)
def scatter(ctx: EmitContext, input: Value, dim: int, index: Value, src=None, value=None, *,
            reduce: Optional[str] = None):
    """scatter(Tensor self, int dim, Tensor index, Tensor src | Scalar value, *, str? reduce=None) -> Tensor"""
    return _scatter(ctx, input, axis(dim, rank(input)), index, value if src is None else src, reduce)


@register(torch.scatter_add, "Tensor.scatter_add", target=TRACT)
def scatter_add(ctx: EmitContext, input: Value, dim: int, index: Value, src: Value):
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(ctx, input, axis(dim, rank(input)), index, src, "add")


@register(torch.scatter_reduce, "Tensor.scatter_reduce", target=TRACT)
def scatter_reduce(ctx: EmitContext, input: Value, dim: int, index: Value, src: Value, reduce: str, *,
                   include_self: bool = True):
    """scatter_reduce(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""
    ax = axis(dim, rank(input))
    if reduce == "mean":
        return _scatter_mean(ctx, input, ax, index, src, include_self)
    if not include_self:  # the positions written start from the reduction's neutral element
        input = _scatter(ctx, input, ax, index, _neutral(reduce, input.dtype), None)
    return _scatter(ctx, input, ax, index, src, reduce)


def _scatter_mean(ctx: EmitContext, input: Value, ax: int, index: Value, src: Value, include_self: bool) -> Value:
    """scatter_reduce(reduce='mean'): a 'sum' scatter divided by how many items each position
    averages: those written there, plus the position's own item with ``include_self``. A position
    nothing is written to keeps its item (a count of 1)."""
    if not input.dtype.is_float:
        ctx.fail(f"scatter_reduce(reduce='mean') of {input.dtype.name} values is not supported (torch rounds the "
                 "mean of integers down); scatter a float tensor and round the result")
    counts = full_like_value(ctx, 1, input.dtype, input.shape)
    if not include_self:
        input = _scatter(ctx, input, ax, index, 0, None)
        counts = _scatter(ctx, counts, ax, index, 0, None)
    sums = _scatter(ctx, input, ax, index, src, "add")
    counts = _scatter(ctx, counts, ax, index, 1, "add")
    return ew(ctx, "div", sums, counts)


@register(torch.index_add, "Tensor.index_add", target=TRACT)
def index_add(ctx: EmitContext, input: Value, dim: int, index: Value, source: Value, *, alpha=1):
    """index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"""
    ax = axis(dim, rank(input))
    if rank(index) != 1:
        ctx.fail(f"index_add needs a 1-D index, got {rank(index)}-D")
    if alpha != 1:
        source = ctx.op("mul", source, scalar_operand(ctx, alpha, source.dtype), out_shape=source.shape)
    others = [a for a in range(rank(source)) if a != ax]
    shape = tuple(index.shape[0] if a == ax else 1 for a in range(rank(source)))
    idx = ctx.op("unsqueeze", index, axes=others, out_shape=shape, out_dtype=index.dtype) if others else index
    return _scatter(ctx, input, ax, expand_to(ctx, idx, source.shape), source, "add")


@register(torch.index_put, "Tensor.index_put", target=TRACT)
def index_put(ctx: EmitContext, input: Value, indices, values, accumulate: bool = False):
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor

    Integer index tensors on the leading axes (``x.index_put_((rows, cols), v, accumulate=True)``,
    a histogram ``h.index_put_((ids,), ones, accumulate=True)``): tract's ``tract_core_scatter_nd``
    at the broadcast indices stacked on a last axis, negative indices counted from the end.
    With ``accumulate=True`` repeated positions add up, as in torch.
    """
    indices = list(indices)
    if not indices or any(not isinstance(i, Value) for i in indices):
        ctx.fail("index_put with a None (full slice) among the indices is not supported; index the leading axes "
                 "with tensors, or use item assignment x[:, idx] = v")
    if any(i.dtype.is_bool for i in indices):
        ctx.fail("index_put with a boolean mask writes a number of items that depends on the data; use "
                 "torch.where(mask, values, x) (or x + torch.where(mask, values, 0) to accumulate)")
    r = max(rank(i) for i in indices)
    shape = broadcast_shape(*[unsqueeze_to(ctx, i, r) for i in indices])
    columns = []
    for a, i in enumerate(indices):
        i = expand_to(ctx, unsqueeze_to(ctx, cast(ctx, i, DType.I64), r), shape)
        size = input.shape[a]
        if isinstance(size, int):
            i = select(ctx, compare(ctx, "lt", i, 0), ew(ctx, "add", i, size), i)
        else:
            i = select(ctx, compare(ctx, "lt", i, 0), ew(ctx, "add", i, dim_value(ctx, size, DType.I64)), i)
        columns.append(ctx.op("unsqueeze", i, axes=[r], out_shape=tuple(shape) + (1,), out_dtype=DType.I64))
    where = ctx.call("torch.cat", columns, r) if len(columns) > 1 else columns[0]
    updates_shape = tuple(shape) + tuple(input.shape[len(indices):])
    if isinstance(values, Value):
        updates = expand_to(ctx, unsqueeze_to(ctx, cast(ctx, values, input.dtype), len(updates_shape)), updates_shape)
    else:
        updates = full_like_value(ctx, values, input.dtype, updates_shape)
    return ctx.op("tract_core_scatter_nd", input, where, updates, reduction="add" if accumulate else "none",
                  out_shape=input.shape, out_dtype=input.dtype)
