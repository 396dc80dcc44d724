"""Fusion: ``x * rsqrt(mean(x^2, axis, keepdim) + eps)`` [``* scale``] -> one ``fused.rms_norm`` node.

Spellings matched (every family of transformers writes one of them): the square as
``x.pow(2)``, ``x ** 2``, ``x * x`` or ``torch.square(x)``; the mean over one axis with
``keepdim=True``; ``+ eps`` with a Python number; then ``x * rsqrt(.)`` (either order) or
``x / sqrt(.)``. The same tensor ``x`` must be squared and normalized, and every value in
between must have no other reader. When the normalized tensor (through casts to its own dtype,
which change nothing) is then multiplied by a rank-1 tensor of the normalized axis' size, the
last axis (Llama's ``weight * x``, Gemma's ``x * (1 + weight)``), that product is fused too, as
the scale. A cast to another dtype in between (f16 models normalize in f32, then cast) ends
the match before the weight: the fused node then stops at the normalization.
"""
from __future__ import annotations

from typing import Optional

from ..graph import Graph, Node
from .match import (ADD, DIV, MUL, arg, cast_root, drop_unused, binary_operands, broadcasts_into, fused_node, is_float, made_by,
                    norm_axis, number, only_kwargs, replace, same_dtype, shapes_equal, static, through_noop_casts,
                    used_once)

KIND = "fused.rms_norm"
POW = ("Tensor.pow", "torch.pow", "operator.pow")
SQUARE = ("torch.square", "Tensor.square")
MEAN = ("Tensor.mean", "torch.mean")
RSQRT = ("torch.rsqrt", "Tensor.rsqrt")
SQRT = ("torch.sqrt", "Tensor.sqrt")


def fuse_rms_norm(graph: Graph) -> int:
    """Rewrite every exact RMS-norm pattern of ``graph``; the number rewritten."""
    count, gone = 0, set()
    for node in list(graph.nodes):
        found = None if id(node) in gone else _match(graph, node)
        if found is None:
            continue
        x, axis, eps, removed = found
        out = node.outputs[0]
        scale, more = _scale(graph, out, axis)
        if scale is not None:
            removed, out = removed + more, more[-1].outputs[0]
        squared = removed[0].args[0]
        replace(graph, removed, fused_node(KIND, (x,), {"axis": axis, "eps": eps, "scale": scale}, out, node))
        if squared is not x:
            drop_unused(graph, [squared])
        gone.update(map(id, removed))
        count += 1
    return count


def _match(graph: Graph, node: Node) -> Optional[tuple]:
    """``(x, axis, eps, nodes)`` when ``node`` ends an RMS normalization."""
    if node.kind not in MUL + DIV or len(node.outputs) != 1:
        return None
    operands = binary_operands(node)
    if operands is None:
        return None
    found = None
    if node.kind in MUL:
        for x, r in (operands, operands[::-1]):
            root = made_by(r, RSQRT)
            if root is not None:
                found = x, root
                break
    else:
        x, r = operands
        root = made_by(r, SQRT)
        found = (x, root) if root is not None else None
    if found is None:
        return None
    x, root = found
    if len(root.args) != 1 or root.kwargs or not is_float(x) or x.shape is None:
        return None
    add = made_by(root.args[0], ADD)
    ops = binary_operands(add) if add is not None else None
    if ops is None:
        return None
    mean_v, eps = (ops[0], number(ops[1])) if number(ops[1]) is not None else (ops[1], number(ops[0]))
    mean = made_by(mean_v, MEAN)
    if mean is None or eps is None or eps < 0 or not only_kwargs(mean, {"input", "dim", "axis", "keepdim", "dtype"}):
        return None
    if arg(mean, 2, "keepdim", default=False) is not True or arg(mean, 3, "dtype", default=None) is not None:
        return None
    axis = norm_axis(arg(mean, 1, "dim", "axis", default=None), len(x.shape))
    if axis is None or not _squares(arg(mean, 0, "input"), x):
        return None
    square = mean.args[0].producer
    chain = [square, mean, add, root]
    values = [n.outputs[0] for n in chain]
    reduced = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    if not same_dtype(x, *values, node.outputs[0]) or not all(used_once(graph, v) for v in values) \
            or not shapes_equal(mean.outputs[0].shape, reduced) or not shapes_equal(node.outputs[0].shape, x.shape):
        return None
    return x, axis, eps, chain + [node]


def _squares(v, x) -> bool:
    """Whether ``v`` is ``x`` squared (pow 2, x * x, square), ``x`` possibly through other casts
    to its own dtype (Gemma's ``x.float()`` of an f32 ``x``)."""
    x = cast_root(x)
    node = made_by(v, POW)
    if node is not None:
        return only_kwargs(node, {"input", "exponent"}) and cast_root(arg(node, 0, "input")) is x \
            and number(arg(node, 1, "exponent")) == 2.0
    node = made_by(v, MUL)
    if node is not None:
        ops = binary_operands(node)
        return ops is not None and ops[0] is ops[1] and cast_root(ops[0]) is x
    node = made_by(v, SQUARE)
    return node is not None and not node.kwargs and len(node.args) == 1 and cast_root(node.args[0]) is x


def _scale(graph: Graph, out, axis: int) -> tuple:
    """``(scale, nodes)`` when the normalized ``out`` is only multiplied (through casts that change
    nothing) by a rank-1 tensor along its last axis; ``(None, [])`` otherwise."""
    if axis != len(out.shape) - 1 or not static(out.shape[-1]):
        return None, []
    end, casts = through_noop_casts(graph, out)
    if not used_once(graph, end) or end.uses[0].kind not in MUL:
        return None, []
    mul = end.uses[0]
    ops = binary_operands(mul)
    if ops is None or len(mul.outputs) != 1:
        return None, []
    scale = ops[1] if ops[0] is end else ops[0]
    if scale is end or not is_float(scale) or scale.shape is None or len(scale.shape) != 1 \
            or not broadcasts_into(scale.shape, out.shape) or scale.shape[0] != out.shape[-1] \
            or not same_dtype(scale, out, mul.outputs[0]) or not shapes_equal(mul.outputs[0].shape, out.shape):
        return None, []
    return scale, casts + [mul]

