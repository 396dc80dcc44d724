"""scaled_dot_product_attention, decomposed: matmul, scale, mask, softmax, matmul.

torch's semantics are kept exactly:
- a bool mask keeps its True entries; ``is_causal`` aligns TOP-LEFT (query i sees keys 0..i,
  also when there are fewer queries than keys);
- a bool mask becomes an additive one (0 where kept, the dtype's lowest finite value elsewhere,
  never -inf), built once at the mask's own shape and added to the scores: tract adds it faster
  than it selects over the scores;
- a query row whose keys are all masked gives 0 as in torch (its safe softmax), never NaN; that
  rule costs a reduction and a select, and is left out where the graph proves that no row is
  empty (a causal mask, with or without a past or a sliding window: ``ir.masks``);
- ``enable_gqa`` repeats each key/value head for consecutive query heads (repeat_interleave).
``tract_transformers_sdpa`` is not used: its ``is_causal`` aligns bottom-right, it adds a bool
mask as 0/1, and the decomposed form is faster on CPU (reference/tract_llm_kv_cache.md, 3 and 5).
"""
from __future__ import annotations

import math

import numpy as np
import torch.nn.functional as F

from ...ir import DType, Value
from ...ir.masks import rows_never_empty
from ..context import EmitContext
from ..helpers import broadcast_operands, cast, rank, result_dtype, unsqueeze_to
from ..registry import register
from .shape import repeat_axis


def lowest(dtype: DType) -> float:
    """The most negative finite value of ``dtype`` (f32's for wider or other types)."""
    return float(np.finfo(np.float16 if dtype is DType.F16 else np.float32).min)


@register("nnef.causal_keep")
def causal_keep(ctx: EmitContext, n_queries, n_keys) -> Value:
    """Bool ``[L, T]``, True where query i may see key j (j <= i: torch's top-left alignment)."""
    if not isinstance(n_queries, int) or not isinstance(n_keys, int):
        ctx.fail("is_causal over dynamic lengths needs the tract target")
    return ctx.const(np.tri(n_queries, n_keys, dtype=bool), DType.BOOL, name="causal")


def zero_empty_rows(ctx: EmitContext, out: Value, mask: Value) -> Value:
    """0 for query rows whose keys are all masked (False, or -inf in a float mask), as torch gives."""
    keep = mask if mask.dtype.is_bool else ctx.op("ge", mask, lowest(mask.dtype), out_dtype=DType.BOOL,
                                                  out_shape=mask.shape)
    rows = ctx.op("any_reduce", keep, axes=[rank(mask) - 1], out_shape=tuple(mask.shape[:-1]) + (1,))
    zero = ctx.const(0, out.dtype, name="zero")
    return ctx.op("select", unsqueeze_to(ctx, rows, rank(out)), out, zero, out_dtype=out.dtype, out_shape=out.shape)


def kv_heads_for(ctx: EmitContext, x: Value, query_heads) -> Value:
    """Key/value heads repeated so that query head h reads kv head h // (Hq / Hkv)."""
    heads = x.shape[-3]
    if heads == query_heads:
        return x
    if not isinstance(heads, int) or not isinstance(query_heads, int) or query_heads % heads:
        ctx.fail(f"enable_gqa needs static head counts with Hq a multiple of Hkv, got {query_heads} and {heads}")
    return repeat_axis(ctx, x, rank(x) - 3, query_heads // heads)


def softmax_dtype(scores: Value, keep) -> DType:
    """The dtype of the scale, mask and softmax: f32 for f16 scores (tract's f16 softmax and
    elementwise ops are many times slower than f32 on x86, and f32 is closer to torch, which
    accumulates the softmax in f32), else the scores' own, promoted with a float mask."""
    dtype = result_dtype(scores, keep) if keep is not None and keep.dtype.is_float else scores.dtype
    return DType.F32 if dtype is DType.F16 else dtype


def apply_mask(ctx: EmitContext, scores: Value, keep) -> Value:
    """Scores where a bool ``keep`` is True (the lowest finite value elsewhere), or scores + a float mask."""
    if keep is None:
        return scores
    if not keep.dtype.is_bool:
        return ctx.op("add", *broadcast_operands(ctx, scores, cast(ctx, keep, scores.dtype)), out_shape=scores.shape)
    return ctx.op("add", *broadcast_operands(ctx, scores, additive_mask(ctx, keep, scores.dtype)),
                  out_shape=scores.shape)


def additive_mask(ctx: EmitContext, keep: Value, dtype: DType) -> Value:
    """0 where the bool ``keep`` is True, the lowest finite value of ``dtype`` elsewhere, at
    ``keep``'s shape; built once per mask and dtype (every layer reads the same mask)."""
    key = ("additive_mask", id(keep), dtype)
    if key not in ctx.memo:
        zero, floor = ctx.const(0, dtype, name="kept"), ctx.const(lowest(dtype), dtype, name="masked")
        ctx.memo[key] = ctx.op("select", keep, zero, floor, out_dtype=dtype, out_shape=keep.shape,
                               out_name="additive_mask")
    return ctx.memo[key]


@register(F.scaled_dot_product_attention)
def scaled_dot_product_attention(ctx: EmitContext, query: Value, key: Value, value: Value, attn_mask=None,
                                 dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    if dropout_p:
        ctx.fail("scaled_dot_product_attention with dropout_p > 0 is random; pass dropout_p=0.0 for export")
    r = max(rank(query), rank(key), rank(value))
    query, key, value = (unsqueeze_to(ctx, t, r) for t in (query, key, value))
    if enable_gqa:
        key, value = kv_heads_for(ctx, key, query.shape[-3]), kv_heads_for(ctx, value, query.shape[-3])
    if scale is None and not isinstance(query.shape[-1], int):
        ctx.fail("the default scale 1/sqrt(head_dim) needs a static head dim; pass scale=")
    shape = tuple(query.shape[:-1]) + (key.shape[-2],)
    scores = ctx.op("matmul", query, key, transposeA=False, transposeB=True, out_shape=shape)
    keep = ctx.call("nnef.causal_keep", query.shape[-2], key.shape[-2]) if is_causal else attn_mask
    scores = cast(ctx, scores, softmax_dtype(scores, keep))
    scale = scale if scale is not None else 1 / math.sqrt(query.shape[-1])
    scores = ctx.op("mul", scores, float(scale), out_shape=shape)
    probs = ctx.op("softmax", apply_mask(ctx, scores, keep), axes=[r - 1], out_shape=shape)
    probs = cast(ctx, probs, query.dtype)
    out = ctx.op("matmul", probs, value, transposeA=False, transposeB=False,
                 out_shape=tuple(query.shape[:-1]) + (value.shape[-1],))
    return out if attn_mask is None or rows_never_empty(attn_mask) else zero_empty_rows(ctx, out, attn_mask)
