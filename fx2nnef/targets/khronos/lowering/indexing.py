"""The Khronos (standard NNEF) overrides of the indexing converters (the common rules: ``fx2nnef.nnef_emit.ops.indexing``)."""
from __future__ import annotations

from fx2nnef.errors import EmitError
from fx2nnef.ir import Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.ops.shape import concat, slice_axis
from fx2nnef.nnef_emit.registry import register
from ..profile import KHRONOS


@register("nnef.scatter_axis", target=KHRONOS)
def scatter_axis_khronos(ctx: EmitContext, x: Value, idx: Value, v: Value, ax: int):
    """The scatter of a constant index as slices of ``x`` and ``v``, concatenated."""
    n = x.shape[ax]
    if not (idx.is_constant and isinstance(n, int)):
        raise EmitError("Khronos NNEF has no scatter: item assignment with a tensor index needs a constant index and a static axis")
    source = {int(i): j for j, i in enumerate(idx.data)}  # the last write wins, as in torch
    parts, p = [], 0
    while p < n:
        if p in source:
            parts.append(slice_axis(ctx, v, ax, source[p], source[p] + 1))
            p += 1
            continue
        q = next((i for i in range(p, n) if i in source), n)
        parts.append(slice_axis(ctx, x, ax, p, q))
        p = q
    return concat(ctx, parts, ax)
