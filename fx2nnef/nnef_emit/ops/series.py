"""Ops along one axis that combine neighbours: diff."""
from __future__ import annotations

import torch

from ...ir import Value
from ..context import EmitContext
from ..helpers import axis, cast, rank, result_dtype
from ..registry import register
from .shape import concat, slice_axis


@register(torch.diff, "Tensor.diff")
def diff(ctx: EmitContext, input: Value, n: int = 1, dim: int = -1, prepend=None, append=None):
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    ax = axis(dim, rank(input))
    dtype = result_dtype(input, prepend, append) if prepend is not None or append is not None else input.dtype
    x = concat(ctx, [cast(ctx, v, dtype) for v in (prepend, input, append) if v is not None], ax)
    for _ in range(n):
        length = x.shape[ax]
        later = slice_axis(ctx, x, ax, 1, length)
        earlier = slice_axis(ctx, x, ax, 0, length - 1)
        op = "ne" if dtype.is_bool else "sub"
        x = ctx.op(op, later, earlier, out_shape=later.shape, out_dtype=dtype)
    return x
