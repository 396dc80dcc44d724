"""Sorting: topk, sort and argsort (tract only: standard NNEF has no sort)."""
from __future__ import annotations

import torch

from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import axis, rank
from ..registry import register
from .creation import dim_tensor


def _topk(ctx: EmitContext, x: Value, k, dim: int, largest: bool) -> tuple:
    """NOTE: tract 0.23.9 gives the result of a ``k`` read from a tensor a size of its own (``k_0``),
    which no later reshape matches with the size it is (gpt-oss's experts sort their 2*S routed
    tokens: "256*broadcast((k_0), (2*S)) should be equal to 512*S"); ``k`` written as an expression
    loads but fails at run time ("Undetermined symbol in expression"). The items are then taken
    again at ``range(0, k)``, whose size tract knows."""
    ax = axis(dim, rank(x))
    count = ctx.op("squeeze", dim_tensor(ctx, k, DType.I64), axes=[0], out_shape=()) if isinstance(k, SymDim) else k
    shape = tuple(x.shape[:ax]) + (k,) + tuple(x.shape[ax + 1:])
    values, indices = ctx.op("tract_core_topk", x, k=count, axis=ax, largest=largest, n_out=2, out_shape=shape)
    indices.dtype = DType.I64
    if isinstance(k, SymDim):
        at = ctx.call("nnef.range", 0, k, 1, DType.I64, (k,))
        values = ctx.op("tract_core_gather", values, at, axis=ax, out_shape=shape, out_dtype=values.dtype)
        indices = ctx.op("tract_core_gather", indices, at, axis=ax, out_shape=shape, out_dtype=DType.I64)
    return values, indices


@register(torch.topk, "Tensor.topk", target="tract")
def topk(ctx: EmitContext, input: Value, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _topk(ctx, input, k, dim, largest)


@register(torch.sort, "Tensor.sort", target="tract")
def sort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """sort(Tensor self, int dim=-1, bool descending=False, *, bool? stable) -> (Tensor values, Tensor indices)

    NOTE: tract's topk keeps equal items in index order (tested both ways), so ``stable=True`` holds.
    """
    return _topk(ctx, input, input.shape[axis(dim, rank(input))], dim, descending)


@register(torch.argsort, "Tensor.argsort", target="tract")
def argsort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """argsort(Tensor self, int dim=-1, bool descending=False, *, bool stable=False) -> Tensor"""
    return sort(ctx, input, dim, descending)[1]
