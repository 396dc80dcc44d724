"""Fused ops made by the IR fusion passes (``fx2nnef.ir.fusions``, ``TractNNEF(fused=...)``), for tract."""
from __future__ import annotations

from typing import Optional

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext, TRACT_DATUM
from fx2nnef.nnef_emit.helpers import cast, rank, select, unsqueeze_to
from fx2nnef.nnef_emit.ops.attention import lowest, zero_empty_rows as zero_rows_without_keys
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("fused.rms_norm", target=TRACT)
def fused_rms_norm(ctx: EmitContext, input: Value, axis: int, eps: float, scale: Optional[Value] = None):
    """x * rsqrt(mean(x^2, axis) + eps) [* scale (rank 1, along the last axis)]"""
    if scale is None:
        return ctx.op("tract_core_rms_norm", input, axis=axis, eps=float(eps), out_shape=input.shape)
    return ctx.op("tract_core_scaled_rms_norm", input, cast(ctx, scale, input.dtype), axis=axis, eps=float(eps),
                  out_shape=input.shape)


@register("fused.apply_rope", target=TRACT)
def fused_apply_rope(ctx: EmitContext, input: Value, cos: Value, sin: Value):
    """x * cos + cat(-x[..., D/2:], x[..., :D/2]) * sin"""
    r = rank(input)
    return ctx.op("tract_transformers_apply_rope", input, unsqueeze_to(ctx, cos, r), unsqueeze_to(ctx, sin, r),
                  out_shape=input.shape)


@register("fused.sdpa", target=TRACT)
def fused_sdpa(ctx: EmitContext, query: Value, key: Value, value: Value, mask: Optional[Value] = None,
               scale: float = 1.0, zero_empty_rows: bool = False):
    """softmax(q @ k^T * scale + mask) @ v, kv heads shared by Hq / Hkv consecutive query heads.

    A bool mask becomes an additive f32 mask (0 kept, f32's lowest value masked); a float mask
    is read in f32. ``zero_empty_rows``: query rows whose keys are all masked give 0 (torch's sdpa).
    """
    shape = tuple(query.shape[:-1]) + (value.shape[-1],)
    attrs = {"scale": float(scale), "datum_type": TRACT_DATUM[query.dtype], "acc_datum_type": "f32",
             "is_causal": False}
    if mask is not None:
        additive = mask
        if mask.dtype.is_bool:
            additive = select(ctx, mask, 0.0, lowest(DType.F32))
        attrs["mask"] = unsqueeze_to(ctx, cast(ctx, additive, DType.F32), rank(query))
    out = ctx.op("tract_transformers_sdpa", query, key, value, out_shape=shape, **attrs)
    return zero_rows_without_keys(ctx, out, mask) if zero_empty_rows and mask is not None else out
