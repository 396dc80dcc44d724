"""``y[m] += 1`` / ``y[m] = f(y[m])`` through a boolean mask: a select over the whole tensor.

``y[m]`` has as many rows as ``m`` has true items, a size read from data. When the value
written back through the same mask is computed element-wise from such selections (``y[m]``,
``z[m]``) and operands that broadcast alike (numbers, trailing-dims tensors), the same
computation on the whole tensors gives, at every true position, the value written there:
``setitem_functional(y, m, f(y[m]))`` becomes ``where(m, f(y), y)``. Other writes stay as they
are (the emitter names a data-sized selection it cannot express).
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from ..tracing.tracer import setitem_functional
from .dead_code import remove_dead_code

_ELEMENTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow, operator.floordiv,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.abs, torch.exp, torch.log, torch.sqrt,
    torch.relu, torch.sigmoid, torch.tanh, torch.clamp, torch.sin, torch.cos, torch.pow, torch.maximum,
    torch.minimum, operator.gt, operator.lt, operator.ge, operator.le, operator.eq, operator.ne, operator.invert,
    operator.and_, operator.or_, torch.gt, torch.lt, torch.ge, torch.le, torch.eq, torch.ne, torch.logical_not,
    torch.logical_and, torch.logical_or,
}
_ELEMENTWISE_METHODS = {
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "clamp",
    "sin", "cos", "pow", "float", "to", "type_as", "maximum", "minimum", "clamp_min", "clamp_max",
    "gt", "lt", "ge", "le", "eq", "ne", "logical_not", "logical_and", "logical_or",
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


def _rows_masked(x: fx.Node, mask: fx.Node):
    """How many trailing dims of ``x`` the boolean ``mask`` leaves whole (``x[m]`` takes rows of
    them), or None when the mask is not over ``x``'s leading dims."""
    xv, mv = x.meta.get("value"), mask.meta.get("value")
    if not isinstance(xv, torch.Tensor) or tuple(xv.shape[:mv.dim()]) != tuple(mv.shape):
        return None
    return xv.dim() - mv.dim()


def _condition(graph: fx.Graph, mask: fx.Node, rest: int) -> fx.Node:
    """``mask`` as a condition over the whole tensor: ``m[..., None]`` against the ``rest``
    trailing dims (inserted where the graph inserts)."""
    cond = mask
    for _ in range(rest):
        cond = graph.call_method("unsqueeze", (cond, -1))
        cond.meta = dict(mask.meta, value=_run(cond))
    return cond


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
        rest = _rows_masked(base, mask)
        whole = None if rest is None else _whole(value, mask, rest, graph, node, {})
        if whole is None:
            continue
        with graph.inserting_before(node):
            sel = graph.call_function(torch.where, (_condition(graph, mask, rest), whole, base))
        sel.meta = {k: v for k, v in node.meta.items()}
        node.replace_all_uses_with(sel)
        graph.erase_node(node)
        changed = True
    if changed:
        remove_dead_code(gm)
        gm.recompile()
    return changed


# reductions of a whole selection --------------------------------------------------------------

_IDENTITY = {"sum": 0, "prod": 1, "any": False, "all": True, "amax": "low", "max": "low", "amin": "high",
             "min": "high", "mean": 0, "nansum": 0}
_REDUCTION_FUNCTIONS = {getattr(torch, name): name for name in _IDENTITY}


def _full_reduction(n: fx.Node):
    """The name of the reduction ``n`` is when it reduces its one tensor argument to a single
    value (``t.sum()``, ``torch.amax(t)``, ``t.mean()``), else None."""
    if n.kwargs or len(n.args) != 1 or not isinstance(n.args[0], fx.Node):
        return None
    if n.op == "call_method" and n.target in _IDENTITY:
        return n.target
    if n.op == "call_function":
        try:
            return _REDUCTION_FUNCTIONS.get(n.target)
        except TypeError:  # an unhashable callable
            return None
    return None


def _selection(value):
    """``(x[mask] node, mask)`` that ``value`` is computed element-wise from, or None."""
    if not isinstance(value, fx.Node):
        return None
    if value.op == "call_function" and value.target is operator.getitem and len(value.args) == 2:
        mask = _mask_of(value.args[1])
        return (value, mask) if mask is not None else None
    if _is_elementwise(value):
        for a in value.all_input_nodes:
            found = _selection(a)
            if found is not None:
                return found
    return None


def _identity_of(name: str, dtype: torch.dtype):
    v = _IDENTITY[name]
    if v not in ("low", "high"):
        return v
    if dtype == torch.bool:
        return v == "high"
    if dtype.is_floating_point:
        return -math.inf if v == "low" else math.inf
    info = torch.iinfo(dtype)
    return info.min if v == "low" else info.max


def masked_reductions(gm: fx.GraphModule) -> bool:
    """``x[m].sum()``, ``x[m].exp().mean()``, ``(x[m] > 0).any()``: a reduction of a whole boolean-mask
    selection (whose length is read from data) is the reduction of the whole tensors where the
    masked-out items are the reduction's identity (0 for a sum, -inf for a max): ``torch.where(m,
    x, 0).sum()``; a mean is that sum over the count of ``m``. The selection itself is left to
    dead code when nothing else reads it. Returns True if changed."""
    changed = False
    graph = gm.graph
    for node in list(graph.nodes):
        name = _full_reduction(node)
        if name is None:
            continue
        source = node.args[0]
        found = _selection(source)
        if found is None:
            continue
        picked, mask = found
        rest = _rows_masked(picked.args[0], mask)
        whole = None if rest is None else _whole(source, mask, rest, graph, node, {})
        if whole is None:
            continue
        wv = whole.meta["value"]
        with graph.inserting_before(node):
            cond = _condition(graph, mask, rest)
            sel = graph.call_function(torch.where, (cond, whole, _identity_of(name, wv.dtype)))
            sel.meta = dict(whole.meta, value=_run(sel))
            if name == "mean":
                total = graph.call_method("sum", (sel,))
                total.meta = dict(node.meta, value=_run(total))
                full = graph.call_method("expand_as", (cond, sel))
                full.meta = dict(mask.meta, value=_run(full))
                count = graph.call_method("sum", (full,))
                count.meta = dict(mask.meta, value=_run(count))
                out = graph.call_function(operator.truediv, (total, count))
            else:
                out = graph.create_node(node.op, node.target, (sel,), {})
        out.meta = dict(node.meta, value=_run(out))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return changed
