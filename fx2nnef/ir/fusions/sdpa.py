"""Fusion: attention -> one ``fused.sdpa`` node (``tract_transformers_sdpa``), where its semantics are met.

Two sources:

- ``F.scaled_dot_product_attention`` without dropout and without ``is_causal`` (tract aligns a
  causal mask bottom-right, torch top-left), with no mask, a float mask or a bool mask (made an
  additive f32 mask when lowered: tract would add a bool mask as 0/1). Rows whose keys are all
  masked give 0 as in torch (``zero_empty_rows``), unless the mask is proved to leave no row
  empty (``ir.masks.rows_never_empty``: causal masks).
- transformers' eager attention in f32: ``matmul(q, k.transpose(-2, -1))``, times a number (or
  divided by one), plus an optional float mask, ``softmax`` over the last axis (casts to its own
  dtype and ``dropout`` with p=0 or not training allowed after it), ``matmul`` with v. Softcapping
  (Gemma2's tanh) or anything else in between is not this pattern.

Shapes must be rank 4 ``[B, H, S, D]``; a mask must give every query row its own row (tract
fails on a mask whose query axis broadcasts) and cover every key. Keys and values that
transformers' ``repeat_kv`` expanded for grouped-query attention are given unrepeated
(tract's own GQA: query head h reads kv head h // (Hq / Hkv), as ``repeat_kv`` does).
"""
from __future__ import annotations

import math
from typing import Optional

from ..dtypes import DType
from ..graph import Graph, Node, Value
from ..masks import rows_never_empty
from .match import (ADD, CASTS, DIV, MATMUL, MUL, arg, binary_operands, broadcasts_into, dims_equal,
                    drop_unused, fused_node, is_float, made_by, norm_axis, number, only_kwargs, replace, same_dtype,
                    shapes_equal, static, used_once)

KIND = "fused.sdpa"
SDPA = ("F.scaled_dot_product_attention",)
SOFTMAX = ("F.softmax", "torch.softmax", "Tensor.softmax")
DROPOUT = ("F.dropout", "torch.dropout")
TRANSPOSE = ("Tensor.transpose", "torch.transpose", "Tensor.swapaxes", "torch.swapaxes")
RESHAPE = ("Tensor.reshape", "torch.reshape", "Tensor.view")
_SDPA_ARGS = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}


def fuse_sdpa(graph: Graph) -> int:
    """Rewrite every attention of ``graph`` that tract's sdpa computes exactly; the number rewritten."""
    count, gone = 0, set()
    for node in list(graph.nodes):
        found = None if id(node) in gone else (_match_sdpa(graph, node) or _match_eager(graph, node))
        if found is None:
            continue
        (q, k, v, mask, scale, zero_rows), removed = found
        old_kv = (k, v)
        k, v = _unrepeated(graph, q, k, v)
        kwargs = {"mask": mask, "scale": scale, "zero_empty_rows": zero_rows}
        replace(graph, removed, fused_node(KIND, (q, k, v), kwargs, node.outputs[0], node))
        drop_unused(graph, [x for x in old_kv if x not in (k, v)])
        gone.update(map(id, removed))
        count += 1
    return count


def _match_sdpa(graph: Graph, node: Node) -> Optional[tuple]:
    if node.kind not in SDPA or len(node.outputs) != 1 or not only_kwargs(node, _SDPA_ARGS):
        return None
    q, k, v = (arg(node, i, n) for i, n in enumerate(("query", "key", "value")))
    mask = arg(node, 3, "attn_mask", default=None)
    if number(arg(node, 4, "dropout_p", default=0.0)) != 0.0 or arg(node, 5, "is_causal", default=False) is not False:
        return None
    scale = arg(node, 6, "scale", default=None)
    scale = _scale(q) if scale is None else number(scale)
    enable_gqa = arg(node, 7, "enable_gqa", default=False)
    if scale is None or enable_gqa not in (True, False) or not _qkv_ok(q, k, v, gqa=enable_gqa):
        return None
    if mask is not None and not _mask_ok(mask, q, k, allow_bool=True):
        return None
    return (q, k, v, mask, scale, mask is not None and not rows_never_empty(mask)), [node]


def _match_eager(graph: Graph, node: Node) -> Optional[tuple]:
    if node.kind not in MATMUL or len(node.outputs) != 1 or not only_kwargs(node, {"input", "other"}):
        return None
    probs, v = arg(node, 0, "input"), arg(node, 1, "other")
    chain = []
    while isinstance(probs, Value) and probs.producer is not None and probs.producer.kind in CASTS + DROPOUT:
        step = probs.producer
        if not _identity_step(step, probs):
            return None
        chain.append(step)
        probs = arg(step, 0, "input")
    softmax = made_by(probs, SOFTMAX)
    if softmax is None or len(softmax.args) > 2 or not only_kwargs(softmax, {"input", "dim", "dtype", "_stacklevel"}):
        return None
    scores = arg(softmax, 0, "input")
    if not isinstance(scores, Value) or scores.shape is None or len(scores.shape) != 4 \
            or norm_axis(arg(softmax, 1, "dim", default=None), 4) != 3 \
            or softmax.kwargs.get("dtype") not in (None, scores.dtype):
        return None
    chain.append(softmax)
    mask = None
    added = made_by(scores, ADD)
    if added is not None:
        ops = binary_operands(added)
        if ops is None:
            return None
        scores, mask = ops if made_by(ops[0], MUL + DIV + MATMUL) is not None else ops[::-1]
        chain.append(added)
    scale = 1.0
    scaled = made_by(scores, MUL + DIV)
    if scaled is not None:
        ops = binary_operands(scaled)
        if ops is None:
            return None
        scores, factor = (ops if number(ops[1]) is not None else ops[::-1]) if scaled.kind in MUL else ops
        factor = number(factor)
        if factor is None or factor == 0.0:
            return None
        scale = factor if scaled.kind in MUL else 1.0 / factor
        chain.append(scaled)
    product = made_by(scores, MATMUL)
    if product is None or not only_kwargs(product, {"input", "other"}):
        return None
    q, kt = arg(product, 0, "input"), arg(product, 1, "other")
    transpose = made_by(kt, TRANSPOSE)
    if transpose is None or len(transpose.args) != 3 or transpose.kwargs or not isinstance(q, Value):
        return None
    k = transpose.args[0]
    if not isinstance(k, Value) or k.shape is None or len(k.shape) != 4 \
            or {norm_axis(transpose.args[1], 4), norm_axis(transpose.args[2], 4)} != {2, 3}:
        return None
    chain += [product, transpose]
    if not _qkv_ok(q, k, v, gqa=False) or q.dtype is not DType.F32:
        return None
    if mask is not None and (not _mask_ok(mask, q, k, allow_bool=False) or mask.dtype is not DType.F32):
        return None
    inner = [n.outputs[0] for n in chain]
    if not all(len(n.outputs) == 1 for n in chain) or not same_dtype(q, *inner, node.outputs[0]) \
            or not all(used_once(graph, x) for x in inner):
        return None
    return (q, k, v, mask, scale, False), chain + [node]


def _identity_step(step: Node, out: Value) -> bool:
    """A cast to the operand's own dtype, or dropout that does nothing (p = 0 or not training)."""
    src = arg(step, 0, "input")
    if not isinstance(src, Value) or len(step.outputs) != 1 or src.dtype is not out.dtype \
            or not shapes_equal(src.shape, out.shape):
        return False
    if step.kind in DROPOUT:
        if not only_kwargs(step, {"input", "p", "training", "inplace", "train"}):
            return False
        p, training = arg(step, 1, "p", default=0.5), arg(step, 2, "training", "train", default=True)
        return number(p) == 0.0 or training is False
    return not {"memory_format", "device", "copy"} & set(step.kwargs)


def _scale(q: Value) -> Optional[float]:
    """torch's default: 1 / sqrt(head dim), when the head dim is static."""
    d = q.shape[-1] if q.shape else None
    return 1.0 / math.sqrt(d) if static(d) and d > 0 else None


def _qkv_ok(q, k, v, gqa: bool) -> bool:
    if not all(is_float(t) and t.shape is not None and len(t.shape) == 4 for t in (q, k, v)):
        return False
    if not same_dtype(q, k, v) or q.dtype not in (DType.F32, DType.F16):
        return False
    if not dims_equal(q.shape[-1], k.shape[-1]) or not dims_equal(k.shape[-2], v.shape[-2]) \
            or not dims_equal(k.shape[1], v.shape[1]):
        return False
    if not all(dims_equal(a, b) for a, b in ((q.shape[0], k.shape[0]), (q.shape[0], v.shape[0]))):
        return False
    hq, hkv = q.shape[1], k.shape[1]
    if dims_equal(hq, hkv):
        return True
    return gqa and static(hq) and static(hkv) and hkv > 0 and hq % hkv == 0


def _mask_ok(mask, q: Value, k: Value, allow_bool: bool) -> bool:
    """A mask tract reads as torch does: float (or bool, made float when lowered), every query
    row and every key present (only batch and head axes may broadcast)."""
    if not isinstance(mask, Value) or mask.shape is None or not 2 <= len(mask.shape) <= 4:
        return False
    if not (is_float(mask) or allow_bool and mask.dtype is DType.BOOL):
        return False
    scores = tuple(q.shape[:-1]) + (k.shape[-2],)
    return broadcasts_into(mask.shape, scores) and dims_equal(mask.shape[-2], q.shape[-2]) \
        and dims_equal(mask.shape[-1], k.shape[-2])


def _unrepeated(graph: Graph, q: Value, k: Value, v: Value) -> tuple:
    """``(k, v)`` before transformers' ``repeat_kv`` when both were repeated the same way for q's heads."""
    pairs = [_repeat_source(graph, t) for t in (k, v)]
    if any(p is None for p in pairs) or pairs[0][1] != pairs[1][1]:
        return k, v
    (k0, n), (v0, _) = pairs
    if not static(q.shape[1]) or not static(k0.shape[1]) or k0.shape[1] * n != q.shape[1]:
        return k, v
    return k0, v0


def _repeat_source(graph: Graph, t: Value) -> Optional[tuple]:
    """``(source, n)`` when ``t`` is ``source[:, :, None].expand(B, H, n, T, D).reshape(B, H*n, T, D)``."""
    reshape = made_by(t, RESHAPE)
    expand = made_by(reshape.args[0], ("Tensor.expand",)) if reshape is not None and reshape.args else None
    index = made_by(expand.args[0], ("operator.getitem",)) if expand is not None and expand.args else None
    if index is None or len(index.args) != 2 or index.kwargs:
        return None
    src = index.args[0]
    if not isinstance(src, Value) or src.shape is None or len(src.shape) != 4 or not static(src.shape[1]):
        return None
    items = list(index.args[1]) if isinstance(index.args[1], tuple) else [index.args[1]]
    if items.count(Ellipsis) > 1:
        return None
    if Ellipsis in items:
        i = items.index(Ellipsis)
        consumed = sum(1 for x in items if x is not Ellipsis and x is not None)
        items = items[:i] + [slice(None)] * (4 - consumed) + items[i + 1:]
    while len(items) < 5:
        items.append(slice(None))
    if items != [slice(None), slice(None), None, slice(None), slice(None)]:
        return None
    b, h, length, d = src.shape
    lifted, repeated = expand.outputs[0].shape, reshape.outputs[0].shape
    if lifted is None or repeated is None or len(lifted) != 5 or not static(lifted[2]):
        return None
    n = lifted[2]
    if not shapes_equal(index.outputs[0].shape, (b, h, 1, length, d)) \
            or not shapes_equal(lifted, (b, h, n, length, d)) or not shapes_equal(repeated, (b, h * n, length, d)):
        return None
    return src, n

