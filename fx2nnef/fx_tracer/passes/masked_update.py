"""``y[m] += 1`` / ``y[m] = f(y[m])`` through a boolean mask: a select over the whole tensor.

``y[m]`` has as many rows as ``m`` has true items, a size read from data. When the value
written back through the same mask is computed element-wise from such selections (``y[m]``,
``z[m]``) and operands that broadcast alike (numbers, trailing-dims tensors), the same
computation on the whole tensors gives, at every true position, the value written there:
``setitem_functional(y, m, f(y[m]))`` becomes ``where(m, f(y), y)``. Other writes stay as they
are (the emitter names a data-sized selection it cannot express).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ..tracer import setitem_functional

_ELEMENTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow, operator.floordiv,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.abs, torch.exp, torch.log, torch.sqrt,
    torch.relu, torch.sigmoid, torch.tanh, torch.clamp, torch.sin, torch.cos, torch.pow, torch.maximum,
    torch.minimum,
}
_ELEMENTWISE_METHODS = {
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "clamp",
    "sin", "cos", "pow", "float", "to", "type_as", "maximum", "minimum", "clamp_min", "clamp_max",
}


def _mask_of(index):
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if isinstance(index, fx.Node) and isinstance(index.meta.get("value"), torch.Tensor) \
            and index.meta["value"].dtype == torch.bool:
        return index
    return None


def _is_elementwise(n: fx.Node) -> bool:
    if n.op == "call_function":
        return n.target in _ELEMENTWISE_FUNCTIONS
    return n.op == "call_method" and n.target in _ELEMENTWISE_METHODS


def _whole(value: fx.Node, mask: fx.Node, rest: int, graph: fx.Graph, anchor: fx.Node, memo: dict):
    """``value`` computed on whole tensors instead of ``x[mask]`` selections, or None."""
    if value in memo:
        return memo[value]
    out = None
    if value.op == "call_function" and value.target is operator.getitem and _same_mask(value.args[1], mask):
        out = value.args[0]
    elif _is_elementwise(value):
        failed, replaced = [], []

        def arg(a):
            if not isinstance(a, fx.Node):
                return a
            new = _whole(a, mask, rest, graph, anchor, memo)
            if new is not None:
                replaced.append(a)
                return new
            v = a.meta.get("value")
            if not isinstance(v, torch.Tensor) or v.dim() <= rest:
                return a  # broadcasts alike against the selection and the whole tensor
            failed.append(a)
            return a

        args = fx.node.map_aggregate(value.args, arg)
        kwargs = fx.node.map_aggregate(value.kwargs, arg)
        if replaced and not failed:
            with graph.inserting_before(anchor):
                out = graph.create_node(value.op, value.target, args, kwargs)
            out.meta = {k: v for k, v in value.meta.items() if k != "value"}
            out.meta["value"] = _run(out)
    memo[value] = out
    return out


def _same_mask(a, mask: fx.Node) -> bool:
    """``a`` is ``mask`` or computes the same from the same nodes (``y[y < 0] = y[y < 0] * 2``)."""
    if isinstance(a, tuple) and len(a) == 1:
        a = a[0]
    if a is mask:
        return True
    if not isinstance(a, fx.Node) or a.op != mask.op or a.target != mask.target or a.kwargs != mask.kwargs:
        return False
    return len(a.args) == len(mask.args) and all(
        x is y if isinstance(x, fx.Node) or isinstance(y, fx.Node) else type(x) is type(y) and x == y
        for x, y in zip(a.args, mask.args))


def _run(n: fx.Node):
    a, k = fx.node.map_aggregate((n.args, n.kwargs), lambda x: x.meta.get("value") if isinstance(x, fx.Node) else x)
    with torch.no_grad():
        if n.op == "call_function":
            return n.target(*a, **k)
        return getattr(a[0], n.target)(*a[1:], **k)


def masked_updates(gm: fx.GraphModule) -> bool:
    """Rewrite element-wise writes through a boolean mask as selects. Returns True if changed."""
    changed = False
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not setitem_functional or len(node.args) != 3:
            continue
        base, index, value = node.args
        mask = _mask_of(index)
        if mask is None or not isinstance(value, fx.Node) or not isinstance(base, fx.Node):
            continue
        mv, bv = mask.meta["value"], base.meta.get("value")
        if not isinstance(bv, torch.Tensor) or tuple(bv.shape[:mv.dim()]) != tuple(mv.shape):
            continue
        rest = bv.dim() - mv.dim()
        whole = _whole(value, mask, rest, graph, node, {})
        if whole is None:
            continue
        with graph.inserting_before(node):
            cond = mask
            for _ in range(rest):  # mask the rows: m[..., None] against the trailing dims
                cond = graph.call_method("unsqueeze", (cond, -1))
                cond.meta = dict(mask.meta, value=_run(cond))
            sel = graph.call_function(torch.where, (cond, whole, base))
        sel.meta = {k: v for k, v in node.meta.items()}
        node.replace_all_uses_with(sel)
        graph.erase_node(node)
        changed = True
    if changed:
        from .dead_code import remove_dead_code

        remove_dead_code(gm)
        gm.recompile()
    return changed
