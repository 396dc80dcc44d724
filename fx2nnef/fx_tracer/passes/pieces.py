"""Pieces of a split read by position: ``x.split(4, 1)[0]``, ``x.chunk(2, 1)[1]``, ``x.unbind(1)[0]``.

How many pieces ``split``, ``chunk`` and ``unbind`` give depends on the size they cut, so the
tracer records that count as a decision (a guard): a graph holding three pieces of ``x.split(4, 1)``
traced at S=10 holds for 9 <= S <= 12 only. Code that reads some pieces by their position and
never the others nor their count (no unpacking, no loop over them, no ``[-1]``) does not depend on
the count: the i-th piece is a slice of the input at every size where it exists. Such reads become
those slices, and the guard on the count becomes one on the last piece read existing (``S > 4`` for
``x.split(4, 1)[1]``): where it does not, the model fails (an IndexError) and the range says so.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch
import torch.fx as fx

from ..tracing.tracer import _target_name

_BY_LENGTH = {"split": ("split_size", "split_size_or_sections"), "unsafe_split": ("split_size",)}
_BY_COUNT = {"chunk": ("chunks",), "unsafe_chunk": ("chunks",)}


def _cut(n: fx.Node) -> Optional[tuple]:
    """``(input, kind, amount, dim)`` of a split by a constant length (``"length"``), a chunk into
    a constant count (``"count"``) or an unbind (``"one"``), with ``dim`` non-negative; else None."""
    if n.op not in ("call_function", "call_method") or not n.args:
        return None
    name, x = _target_name(n.target), n.args[0]
    value = x.meta.get("value") if isinstance(x, fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    rest, kwargs = list(n.args[1:]), dict(n.kwargs)
    if name == "unbind":
        kind, amount = "one", 1
    elif name in _BY_LENGTH or name in _BY_COUNT:
        kind = "length" if name in _BY_LENGTH else "count"
        keys = (_BY_LENGTH.get(name) or _BY_COUNT[name])
        amount = rest.pop(0) if rest else next((kwargs.pop(k) for k in keys if k in kwargs), None)
        if type(amount) is not int or amount < 1:
            return None  # a list of lengths, or a traced number
    else:
        return None
    dim = rest.pop(0) if rest else kwargs.pop("dim", 0)
    if rest or kwargs or type(dim) is not int or not -value.dim() <= dim < value.dim():
        return None
    return x, kind, amount, dim % value.dim()


def pieces_as_slices(gm: fx.GraphModule, guards: list) -> bool:
    """Replace the pieces of a split, chunk or unbind read only by position (``operator.getitem``
    with a constant index >= 0, not every piece) by slices of the input, and the guard on their count
    (a :class:`~..tracer.GuardRecord` of op ``"count"`` in ``guards``) by one on the input having
    items past the start of the last piece read. Returns True if changed."""
    graph = gm.graph
    changed = False
    for n in list(graph.nodes):
        cut = _cut(n)
        pieces = n.meta.get("value")
        if cut is None or not isinstance(pieces, (tuple, list)) or not n.users:
            continue
        users = list(n.users)
        if any(u.op != "call_function" or u.target is not operator.getitem or type(u.args[1]) is not int
               or u.args[1] < 0 or u.args[1] >= len(pieces) for u in users):
            continue
        if {u.args[1] for u in users} >= set(range(len(pieces))):
            continue  # every piece read (unpacked, looped over): how many there are matters
        x, kind, amount, dim = cut
        with graph.inserting_before(n):
            size = _int_node(graph, n, "call_method", "size", (x, dim), x.meta["value"].shape[dim])
            length = amount if kind != "count" else _int_node(  # chunk: pieces of ceil(size / count) items
                graph, n, "call_function", operator.floordiv,
                (_int_node(graph, n, "call_function", operator.add, (size, amount - 1)), amount))

        def start(i: int):
            if isinstance(length, int) or i < 2:
                return i * length if isinstance(length, int) else (0 if i == 0 else length)
            return _int_node(graph, n, "call_function", operator.mul, (length, i))

        for u in users:
            i = u.args[1]
            with graph.inserting_before(u):
                if kind == "one":
                    piece = graph.create_node("call_method", "select", (x, dim, i), {})
                else:
                    index = (slice(None),) * dim + (slice(start(i), start(i + 1)),)
                    piece = graph.create_node("call_function", operator.getitem, (x, index), {})
            piece.meta.update(u.meta)
            u.replace_all_uses_with(piece)
            graph.erase_node(u)
        top = max(u.args[1] for u in users)
        exists = None
        if top:  # the last piece read exists: the input has items past its start
            with graph.inserting_before(n):
                exists = _int_node(graph, n, "call_function", operator.gt, (size, start(top)))
        text = f"{_target_name(n.target)}(...)[{top}] exists"
        guards[:] = [g if not (g.node is n and g.op == "count") else dataclasses.replace(
            g, node=exists, op="bool", expected=True, text=text) for g in guards
            if not (g.node is n and g.op == "count" and exists is None)]
        graph.erase_node(n)
        if not size.users:
            graph.erase_node(size)
        changed = True
    if changed:
        gm.recompile()
    return changed


def _int_node(graph: fx.Graph, like: fx.Node, op: str, target, args: tuple, value=None) -> fx.Node:
    """A node computing a number from the sizes, with its value at the example and ``like``'s
    source line."""
    node = graph.create_node(op, target, args, {})
    if value is None:
        value = target(*[a.meta["value"] if isinstance(a, fx.Node) else a for a in args])
    node.meta.update({k: like.meta[k] for k in ("source", "module_path", "module_type") if k in like.meta})
    node.meta["value"] = value
    return node
