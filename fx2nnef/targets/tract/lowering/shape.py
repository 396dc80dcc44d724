"""tract's overrides of the shape converters (the common rules: ``fx2nnef.nnef_emit.ops.shape``)."""
from __future__ import annotations

import numpy as np
import torch

from fx2nnef.ir import DType, SymDim, Value, simplify
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import axes, ew, rank
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register(torch.flip, target=TRACT)
def flip_tract(ctx: EmitContext, input: Value, dims):
    """flip(Tensor self, int[] dims) -> Tensor"""
    # NOTE: tract aborts on a slice with a negative stride. Its downsample by -1 reverses an axis, but
    # its declutter fails to pull that downsample through a preceding matmul on a dynamic axis or a
    # reshape ("Pulling Downsample over matmul.unmerge_out Reshape: Invalid axis"): a gather at
    # n-1..0 instead.
    x = input
    for a in axes(dims, rank(input)):
        n = x.shape[a]
        if isinstance(n, SymDim):
            idx = ctx.call("nnef.range", simplify(n - 1), -1, -1, DType.I64, (n,))
        else:
            idx = ctx.const(np.arange(n - 1, -1, -1, dtype=np.int64), DType.I64)
        x = ctx.call("nnef.gather", x, idx, a, x.shape)
    return x


@register("nnef.repeat_axis", target=TRACT)
def repeat_axis_tract(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """NOTE: tract 0.23.9 cannot load a matmul with a constant whose other operand is the reshaped
    tile of ``repeat_axis`` ("Incompatible reshape for shape [1, 1, 2, 2] and Reshape(0, [15],
    [5, 3])", or "Trying to substitute a 5,3,3,S,2 by 5,1,3,S,2 ... EinSum"): a gather at
    ``i // repeats`` gives the same tensor."""
    n = x.shape[ax]
    total = n * repeats
    if isinstance(total, int):
        index = ctx.const(np.repeat(np.arange(n, dtype=np.int64), repeats), DType.I64)
    else:
        index = ew(ctx, "div", ctx.call("nnef.range", 0, total, 1, DType.I64, (total,)), repeats)
    shape = tuple(x.shape[:ax]) + (total,) + tuple(x.shape[ax + 1:])
    return ctx.call("nnef.gather", x, index, ax, shape)
