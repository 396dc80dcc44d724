"""Fusion: rotate-half rotary embedding ``x * cos + rotate_half(x) * sin`` -> one ``fused.apply_rope`` node.

``rotate_half(x) = cat((-x[..., D/2:], x[..., :D/2]), dim=-1)`` (Llama, Qwen, Mistral, Gemma,
Phi3 and GPT-NeoX on their rotated part) is what ``tract_transformers_apply_rope`` computes.
Matched exactly: the two halves of the same ``x`` (static, even last dim D), the negated second
half first, both products and the sum in either operand order, ``cos`` and ``sin`` of last dim D
that broadcast into ``x`` without enlarging it, one float dtype throughout, and no other reader
of any value in between. The interleaved form (GPT-J, ``x[..., ::2]``) is not this pattern and is
left as it is.
"""
from __future__ import annotations

from typing import Optional

from ..graph import Graph, Node
from .match import (ADD, CAT, MUL, NEG, arg, binary_operands, broadcasts_into, fused_node, is_float, last_axis_slice,
                    made_by, norm_axis, only_kwargs, replace, same_dtype, shapes_equal, static, used_once)

KIND = "fused.apply_rope"
GETITEM = ("operator.getitem",)


def fuse_rope(graph: Graph) -> int:
    """Rewrite every exact rotate-half rotary pattern of ``graph``; the number rewritten."""
    count, gone = 0, set()
    for node in list(graph.nodes):
        found = None if id(node) in gone else _match(graph, node)
        if found is None:
            continue
        (x, cos, sin), removed = found
        replace(graph, removed, fused_node(KIND, (x, cos, sin), {}, node.outputs[0], node))
        gone.update(map(id, removed))
        count += 1
    return count


def _pairs(node: Optional[Node]):
    ops = binary_operands(node) if node is not None else None
    return [] if ops is None else [ops, ops[::-1]]


def _match(graph: Graph, node: Node) -> Optional[tuple]:
    """``((x, cos, sin), nodes)`` when ``node`` is the sum of a rotate-half rotary embedding."""
    if node.kind not in ADD or len(node.outputs) != 1:
        return None
    for a, b in _pairs(node):
        plain, rotated = made_by(a, MUL), made_by(b, MUL)
        for rot, sin in _pairs(rotated):
            half = _rotate_half(rot)
            if half is None:
                continue
            x, halves = half
            for x_, cos in _pairs(plain):
                if x_ is not x:
                    continue
                nodes = halves + [rotated, plain]
                if _valid(graph, x, cos, sin, nodes, node):
                    return (x, cos, sin), nodes + [node]
    return None


def _rotate_half(v) -> Optional[tuple]:
    """``(x, nodes)`` when ``v`` is ``cat((-x[..., D/2:], x[..., :D/2]), dim=-1)``."""
    cat = made_by(v, CAT)
    if cat is None or not only_kwargs(cat, {"tensors", "dim", "axis"}):
        return None
    tensors = arg(cat, 0, "tensors")
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 2:
        return None
    neg = made_by(tensors[0], NEG)
    second = made_by(neg.args[0], GETITEM) if neg is not None and len(neg.args) == 1 and not neg.kwargs else None
    first = made_by(tensors[1], GETITEM)
    if second is None or first is None or len(first.args) != 2 or len(second.args) != 2 or first.kwargs \
            or second.kwargs or first.args[0] is not second.args[0]:
        return None
    x = first.args[0]
    if not is_float(x) or x.shape is None or not static(x.shape[-1]) or x.shape[-1] % 2:
        return None
    d = x.shape[-1]
    if norm_axis(arg(cat, 1, "dim", "axis", default=0), len(x.shape)) != len(x.shape) - 1:
        return None
    if last_axis_slice(first.args[1], x.shape) != (0, d // 2) or last_axis_slice(second.args[1], x.shape) != (d // 2, d):
        return None
    return x, [first, second, neg, cat]


def _valid(graph: Graph, x, cos, sin, nodes: list, add: Node) -> bool:
    """Dtypes, shapes and readers of a matched pattern."""
    values = [n.outputs[0] for n in nodes]
    if not all(is_float(t) and t.shape is not None for t in (cos, sin)) or cos is x or sin is x:
        return False
    if not same_dtype(x, cos, sin, add.outputs[0], *values):
        return False
    d = x.shape[-1]
    if cos.shape[-1] != d or sin.shape[-1] != d or not broadcasts_into(cos.shape, x.shape) \
            or not broadcasts_into(sin.shape, x.shape):
        return False
    full = [n.outputs[0] for n in nodes[-3:]] + [add.outputs[0]]  # cat, both products, the sum
    return all(shapes_equal(v.shape, x.shape) for v in full) and all(used_once(graph, v) for v in values)
