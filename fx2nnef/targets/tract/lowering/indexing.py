"""tract's overrides of the indexing converters (the common rules: ``fx2nnef.nnef_emit.ops.indexing``)."""
from __future__ import annotations

import numpy as np
import torch

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import axis, cast, rank, unsqueeze_to
from fx2nnef.nnef_emit.ops.indexing import _broadcast_dim, gather
from fx2nnef.nnef_emit.ops.shape import expand_to, reshape_to
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("nnef.gather_nd", target=TRACT)
def gather_nd_tract(ctx: EmitContext, x: Value, indices: Value, shape=None):
    return ctx.op("tract_core_gather_nd", x, indices, batch_dims=0, out_shape=shape, out_dtype=x.dtype)


@register("nnef.scatter_axis", target=TRACT)
def scatter_axis_tract(ctx: EmitContext, x: Value, idx: Value, v: Value, ax: int):
    """``x`` with ``x[(:,)*ax, idx[j]] = v[(:,)*ax, j]``."""
    lead = [a for a in range(rank(x)) if a != ax]
    shape = [1] * rank(x)
    shape[ax] = idx.shape[0]
    idx = ctx.op("unsqueeze", idx, axes=lead, out_shape=tuple(shape), out_dtype=idx.dtype) if lead else idx
    return ctx.op("tract_core_scatter_elements", x, expand_to(ctx, idx, v.shape), v, axis=ax,
                  out_shape=x.shape, out_dtype=x.dtype)


@register(torch.gather, "Tensor.gather", target=TRACT)
def gather_elements(ctx: EmitContext, input: Value, dim: int, index: Value, *, sparse_grad: bool = False):
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    ax = axis(dim, rank(input))
    return ctx.op("tract_core_gather_elements", input, index, axis=ax, out_shape=index.shape, out_dtype=input.dtype)


@register(torch.take_along_dim, "Tensor.take_along_dim", target=TRACT)
def take_along_dim(ctx: EmitContext, input: Value, indices: Value, dim=None):
    """take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"""
    if dim is None:
        flat = [reshape_to(ctx, t, [-1]) for t in (input, indices)]
        return ctx.op("tract_core_gather_elements", *flat, axis=0, out_shape=flat[1].shape, out_dtype=input.dtype)
    r = max(rank(input), rank(indices))
    ax = axis(dim, r)
    x, idx = unsqueeze_to(ctx, input, r), unsqueeze_to(ctx, indices, r)
    both = [a if b == 1 else b for a, b in zip(x.shape, idx.shape)]
    x = expand_to(ctx, x, [x.shape[a] if a == ax else d for a, d in enumerate(both)])
    idx = expand_to(ctx, idx, [idx.shape[a] if a == ax else d for a, d in enumerate(both)])
    return ctx.op("tract_core_gather_elements", x, idx, axis=ax, out_shape=idx.shape, out_dtype=input.dtype)


@register(torch.triu, "Tensor.triu", target=TRACT)
def triu_tract(ctx: EmitContext, input: Value, diagonal: int = 0):
    """triu(Tensor self, int diagonal=0) -> Tensor"""
    return ctx.op("tract_core_trilu", input, k=diagonal, upper=True, out_shape=input.shape, out_dtype=input.dtype)


@register(torch.tril, "Tensor.tril", target=TRACT)
def tril_tract(ctx: EmitContext, input: Value, diagonal: int = 0):
    """tril(Tensor self, int diagonal=0) -> Tensor"""
    return ctx.op("tract_core_trilu", input, k=diagonal, upper=False, out_shape=input.shape, out_dtype=input.dtype)


@register(torch.masked_scatter, "Tensor.masked_scatter", target=TRACT)
def masked_scatter(ctx: EmitContext, input: Value, mask: Value, source: Value):
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor

    The k-th True item of the mask (broadcast to the input, in row-major order) takes
    ``source.flatten()[k]``: a running count of the flattened mask minus one is the position
    gathered from the flattened source, kept where the mask holds."""
    r = max(rank(input), rank(mask))
    x, m = unsqueeze_to(ctx, input, r), unsqueeze_to(ctx, cast(ctx, mask, DType.BOOL), r)
    shape = tuple(_broadcast_dim([a, b]) for a, b in zip(x.shape, m.shape))
    x, m = expand_to(ctx, x, shape), expand_to(ctx, m, shape)
    flat = reshape_to(ctx, cast(ctx, m, DType.I64), [-1])
    count = ctx.call("torch.cumsum", flat, 0)
    pos = ctx.op("max", ctx.op("sub", count, ctx.const(np.array([1], dtype=np.int64), DType.I64), out_shape=count.shape),
                 ctx.const(np.array([0], dtype=np.int64), DType.I64), out_shape=count.shape)
    src = reshape_to(ctx, cast(ctx, source, input.dtype), [-1])
    picked = reshape_to(ctx, gather(ctx, src, pos, 0), list(shape))
    return ctx.op("select", m, picked, x, out_dtype=input.dtype, out_shape=shape)
