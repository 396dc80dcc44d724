"""Which nodes of a trace depend on input data (not only on input shapes)."""
from __future__ import annotations

import torch
import torch.fx as fx

from .padded import padded_nonzero

_SHAPE_QUERIES = {"size", "dim", "numel", "nelement", "ndimension"}
# ops whose result depends only on the shape/dtype of their tensor arguments, not on their data
_META_METHODS = {"new_zeros", "new_ones", "new_full", "new_empty"}
_META_FUNCTIONS = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, padded_nonzero}


def is_shape_query(n: fx.Node) -> bool:
    """True when ``n`` reads only shapes/dtypes of its tensor arguments."""
    if n.op == "call_method":
        return n.target in _SHAPE_QUERIES or n.target in _META_METHODS
    if n.op == "call_function":
        if n.target in _META_FUNCTIONS:
            return True
        return n.target is getattr and n.args[1] in ("shape", "dtype", "device", "ndim")
    return False


def data_dependence(gm: fx.GraphModule) -> set:
    """Nodes of ``gm`` whose value depends on input data (a loop slot stands for a different value
    at every step, so it counts as data)."""
    dep = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder" or n.meta.get("loop_slot"):
            dep.add(n)
            continue
        if is_shape_query(n):
            continue
        if any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    return dep


def _is_slot(n: fx.Node) -> bool:
    return bool(n.meta.get("loop_slot"))


def _is_source(n: fx.Node) -> bool:
    return n.op == "placeholder" or _is_slot(n)


def _is_loop(n: fx.Node) -> bool:
    return "control_flow" in n.meta  # the loop node reads its slots but is not inside its body


def in_loop_body(node: fx.Node, memo: dict) -> bool:
    """Whether ``node`` is computed from a loop slot (it is part of a loop body being recorded)."""
    return depends_on_data(node, memo, _is_slot, _is_loop)


def depends_on_data(node: fx.Node, memo: dict, is_source=_is_source, is_barrier=is_shape_query) -> bool:
    """Whether ``node`` depends on input data, for a graph still being recorded (``memo`` caches;
    ``is_source`` says which nodes are data, ``is_barrier`` which nodes stop the dependence)."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if is_source(n):
            memo[n] = True
            stack.pop()
            continue
        if is_barrier(n):
            memo[n] = False
            stack.pop()
            continue
        todo = [a for a in n.all_input_nodes if a not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[n] = any(memo[a] for a in n.all_input_nodes)
        stack.pop()
    return memo[node]
