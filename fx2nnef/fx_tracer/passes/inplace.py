"""In-place removal: every mutation becomes a functional op and later uses read its result.

``y.add_(1)`` then ``relu(y)`` becomes ``y2 = add(y, 1)`` then ``relu(y2)``. A mutation of
a view (``x[:, 0:2].copy_(v)``, ``x.view(...).mul_(2)``) also writes the result back into
the viewed tensor, so later readers of that base see the update too.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ...errors import TraceError
from ..tracer import setitem_functional


def copy_functional(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """What ``dst.copy_(src)`` leaves in ``dst``."""
    return src.to(dst.dtype).expand_as(dst).clone()


def fill_functional(dst: torch.Tensor, value) -> torch.Tensor:
    """What ``dst.fill_(value)`` leaves in ``dst``."""
    return torch.full_like(dst, value) if not isinstance(value, torch.Tensor) else value.to(dst.dtype).expand_as(dst).clone()


def zero_functional(dst: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(dst)


_SPECIAL = {"copy_": copy_functional, "fill_": fill_functional, "zero_": zero_functional}
_NOT_MUTATING = {"requires_grad_", "share_memory_", "retain_grad_", "record_stream_", "set_"}


def _mutation(node: fx.Node):
    """(functional target, op kind) for a mutating node, else None."""
    if (node.op == "call_function" and node.target is operator.setitem) or (
            node.op == "call_method" and node.target == "__setitem__"):
        return "call_function", setitem_functional
    if node.op == "call_function" and node.kwargs.get("inplace") is True:
        node.kwargs = {**node.kwargs, "inplace": False}  # F.relu(x, inplace=True) and friends
        return "call_function", node.target
    if node.op == "call_method" and node.target.endswith("_") and not node.target.endswith("__"):
        name = node.target
        if name in _NOT_MUTATING:
            return None
        if name in _SPECIAL:
            return "call_function", _SPECIAL[name]
        return "call_method", name[:-1]
    return None


def _write_back(graph: fx.Graph, view: fx.Node, new_view: fx.Node):
    """Nodes that rebuild the base of ``view`` with ``new_view`` in its place: (base, new_base)."""
    if view.meta.get("view_of") is None:
        return None
    base = view.args[0]  # the current version of the viewed tensor (earlier mutations rewired it)
    op, target, args = view.op, view.target, view.args
    with graph.inserting_after(new_view):
        if op == "call_function" and target is operator.getitem:
            new_base = graph.call_function(setitem_functional, (base, args[1], new_view))
        elif op == "call_method" and target in ("view", "reshape", "flatten", "unflatten", "view_as", "reshape_as"):
            new_base = graph.call_method("view_as", (new_view, base))
        elif op == "call_method" and target in ("transpose", "swapaxes", "swapdims"):
            new_base = graph.call_method("transpose", (new_view, args[1], args[2]))
        elif op == "call_method" and target == "permute":
            perm = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
            inverse = [perm.index(i) for i in range(len(perm))]
            new_base = graph.call_method("permute", (new_view, inverse))
        elif op == "call_method" and target == "unsqueeze":
            new_base = graph.call_method("squeeze", (new_view, args[1]))
        elif op == "call_method" and target == "select":
            index = tuple([slice(None)] * _axis(args[1], base) + [args[2]])
            new_base = graph.call_function(setitem_functional, (base, index, new_view))
        elif op == "call_method" and target == "narrow":
            index = tuple([slice(None)] * _axis(args[1], base) + [slice(args[2], args[2] + args[3])])
            new_base = graph.call_function(setitem_functional, (base, index, new_view))
        else:
            src = view.meta.get("source")
            raise TraceError(
                f"in-place update of a view made by '{target}'{' at ' + str(src) if src else ''} is not supported; "
                "apply the update to the original tensor or make the view a copy with .clone()")
    for key in ("source", "module_path", "module_type"):
        if key in view.meta:
            new_base.meta[key] = view.meta[key]
    return base, new_base


def _axis(dim: int, base: fx.Node) -> int:
    rank = base.meta["value"].dim()
    return dim % rank


def _replace_later_uses(graph: fx.Graph, old: fx.Node, new: fx.Node, after: fx.Node) -> None:
    order = {n: i for i, n in enumerate(graph.nodes)}
    limit = order[after]
    # a constant tensor gets a fresh get_attr node at each use: all stand for the same tensor
    aliases = [old] + ([n for n in graph.nodes if n.op == "get_attr" and n.target == old.target]
                       if old.op == "get_attr" else [])
    for alias in aliases:
        for user in list(alias.users):
            if user is new or order[user] <= limit:
                continue
            user.replace_input_with(alias, new)


def remove_inplace(gm: fx.GraphModule) -> bool:
    """Rewrite every mutating node as a functional one. Returns True if changed."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        found = _mutation(node)
        if found is None:
            continue
        op, target = found
        mutated = node.args[0]
        with graph.inserting_after(node):
            new = graph.create_node(op, target, node.args, node.kwargs)
        new.meta.update({k: v for k, v in node.meta.items() if k in ("source", "module_path", "module_type", "nn_module_stack")})
        new.meta["value"] = mutated.meta.get("value")
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        _replace_later_uses(graph, mutated, new, new)
        # propagate the update into the bases this tensor is a view of
        view, new_view = mutated, new
        while True:
            pair = _write_back(graph, view, new_view)
            if pair is None:
                break
            base, new_base = pair
            new_base.meta["value"] = base.meta.get("value")
            _replace_later_uses(graph, base, new_base, new_base)
            view, new_view = base, new_base
        changed = True
    if changed:
        gm.recompile()
    return changed
