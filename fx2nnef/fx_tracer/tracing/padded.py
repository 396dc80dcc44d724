"""Data-sized index lists made shape-static: ``nonzero`` and friends as every coordinate, masked where used.

``cond.nonzero()``, ``torch.where(cond)`` and ``torch.argwhere(cond)`` return as many
coordinates as ``cond`` has true items: a size read from data, which no static graph has. The
mixture-of-experts loops of transformers' "eager" experts (and DBRX) use them in one pattern:
the coordinates of a routing mask select rows (``x[token_idx]``), each row is computed on its
own, and the rows are added back with ``out.index_add_(0, token_idx, rows)``; a loop over the
experts hit (``for e in hit.nonzero()``) runs once per coordinate.

While tracing, these calls record ``padded_nonzero``: every coordinate of ``cond``'s shape, in
the order nonzero lists them, so the count and the loop follow the shape only; an
``index_add`` whose index comes from such coordinates adds only the rows whose ``cond`` item
is true (the others are replaced by zeros with a select, so an inf there cannot leak). The
result is the model's when every padded row reaches the output through such an index_add
only, which :func:`check_padded` enforces; the probes (other sizes, other data) check the rest.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ...errors import TraceError
from .proxy import CustomProxy


def padded_nonzero(cond: torch.Tensor, as_tuple: bool = False):
    """Every coordinate of ``cond``'s shape, as ``cond.nonzero(as_tuple=as_tuple)`` lists the true ones."""
    return torch.nonzero(torch.ones(cond.shape, dtype=torch.bool, device=cond.device), as_tuple=as_tuple)


def data_nonzero(cond: torch.Tensor, as_tuple: bool = False):
    """``cond.nonzero(as_tuple=as_tuple)``: the true coordinates, as many as the data has (the
    exported graph names their count with a symbol of its own, see ``shapes/data_counts.py``)."""
    return torch.nonzero(cond, as_tuple=as_tuple)


def _is_index_add(kind: str, target) -> bool:
    return (kind == "call_method" and target in ("index_add", "index_add_")) or \
        (kind == "call_function" and target is torch.index_add)


def padded_call(kind: str, target, args: tuple, kwargs: dict):
    """``(args, kwargs)`` of the ``padded_nonzero`` call that replaces a data-sized one, else None."""
    if kind == "call_method" and target in ("nonzero", "argwhere") or \
            kind == "call_function" and target in (torch.nonzero, torch.argwhere):
        as_tuple = bool(kwargs.get("as_tuple", False)) and target != "argwhere" and target is not torch.argwhere
        return (args[0], as_tuple), {}
    if kind == "call_function" and target is torch.where and len(args) == 1 and not kwargs:
        return (args[0], True), {}
    return None


def rows_condition(node: fx.Node):
    """The ``cond`` node whose flattened items say which rows of the index ``node`` are real,
    when ``node`` is one axis of padded coordinates (``coords[:, j]``, ``where(cond)[j]``)."""
    while node.op == "call_method" and node.target in ("long", "int", "to", "contiguous", "clone"):
        node = node.args[0]
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    base, index = node.args
    if not isinstance(base, fx.Node) or base.target is not padded_nonzero:
        return None
    cond, as_tuple = base.args
    if as_tuple and isinstance(index, int):
        return cond
    if not as_tuple and isinstance(index, tuple) and len(index) == 2 and index[0] == slice(None) \
            and isinstance(index[1], int):
        return cond
    return None


def masked_index_add(tracer, kind: str, target, args: tuple, kwargs: dict):
    """The arguments of an index_add whose padded rows are zeroed first, or None when its index is
    not padded coordinates. ``tracer.create_proxy`` records the masking ops."""
    if not _is_index_add(kind, target):
        return None
    names = ("input", "dim", "index", "source")
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    index = bound.get("index")
    cond = rows_condition(index.node) if isinstance(index, fx.Proxy) else None
    if cond is None:
        return None
    source, dim = bound["source"], bound["dim"]
    rank = source.value.dim()
    dim = dim % max(rank, 1)
    valid = tracer.create_proxy("call_method", "reshape", (CustomProxy(cond, tracer, cond.meta["value"]), -1), {})
    valid = tracer.create_proxy("call_method", "bool", (valid,), {})
    valid = tracer.create_proxy("call_method", "reshape", (valid, tuple(-1 if a == dim else 1 for a in range(rank))), {})
    bound["source"] = tracer.create_proxy("call_function", torch.where, (valid, source, 0.0), {})
    rest = {k: v for k, v in kwargs.items() if k not in names}
    return tuple(bound[n] for n in names), rest


def mark_padded(node: fx.Node) -> None:
    """Note on ``node`` whether it is computed from padded coordinates (a masked index_add is not)."""
    if node.target is padded_nonzero:
        node.meta["padded"] = True
    elif any(a.meta.get("padded") for a in node.all_input_nodes):
        sink = _is_index_add(node.op, node.target) and isinstance(node.args[0], fx.Node) \
            and not node.args[0].meta.get("padded") and rows_condition(_index_arg(node)) is not None
        node.meta["padded"] = not sink


def _index_arg(node: fx.Node):
    index = node.args[2] if len(node.args) > 2 else node.kwargs.get("index")
    return index if isinstance(index, fx.Node) else None


def wrapped_indices(tracer, kind: str, target, args: tuple):
    """``args`` of ``x[index]`` whose tensor items computed from padded coordinates are taken
    modulo their axis: a padded coordinate may be past the end of another tensor (DBRX's loop
    reaches the sentinel expert), and its rows are masked later anyway."""
    if kind != "call_function" or target is not operator.getitem or not isinstance(args[0], fx.Proxy):
        return args
    base, index = args[0], args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if not any(isinstance(i, fx.Proxy) and i.node.meta.get("padded") for i in items):
        return args

    def consumed(i):
        return 0 if i is None or i is Ellipsis or isinstance(i, bool) else 1

    rank = base.value.dim()
    axes, ax = [], 0
    for i in items:
        axes.append(ax)
        ax += rank - sum(consumed(j) for j in items) if i is Ellipsis else consumed(i)
    out = [tracer.create_proxy("call_function", operator.mod,
                               (i, tracer.create_proxy("call_method", "size", (base, a), {})), {})
           if isinstance(i, fx.Proxy) and i.node.meta.get("padded") and isinstance(i.value, torch.Tensor)
           and i.value.dtype != torch.bool else i
           for i, a in zip(items, axes)]
    return (base, tuple(out) if isinstance(index, tuple) else out[0])


def padded_failure(args, kwargs, what: str, where: str):
    """The TraceError for an op that fails on the example because an input holds padded
    coordinates (every coordinate, not the true ones: sizes differ from the model's), else None."""
    nodes, todo = [], [args, kwargs]
    while todo:
        item = todo.pop()
        if isinstance(item, (tuple, list)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, fx.Proxy) and item.node.meta.get("padded"):
            nodes.append(item.node)
    seen = set()
    while nodes:
        n = nodes.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.target is padded_nonzero:
            origin = n.meta.get("source") or n.name
            return TraceError(
                f"'{what}'{where} reads the coordinates given by nonzero/where(cond) at {origin}: as many items as "
                "the data has, a size no static graph has. fx2nnef lists every coordinate and keeps the real ones "
                "where the list indexes an index_add (the mixture-of-experts pattern); here the list meets tensors "
                "sized by the true items only. Rewrite that code with a mask (torch.where(cond, x, y)) or a "
                "fixed-size topk, or keep that module as a leaf.")
        nodes.extend(a for a in n.all_input_nodes if a.meta.get("padded"))
    return None


def check_padded(gm: fx.GraphModule) -> None:
    """Padded coordinates that reach an output other than through a masked index_add become the true
    ones (:func:`data_nonzero`, their count a symbol of the export) when nothing reads their sizes
    in Python on the way (the trace took those at every coordinate); the graph is refused otherwise."""
    padded = [n for n in gm.graph.nodes if n.target is padded_nonzero]
    if not padded:
        return
    reaching = _reaching_outputs(gm)
    if not reaching:
        return
    for n in reaching:
        if _sizes_read_after(n) or _after(n, lambda u: _is_index_add(u.op, u.target)):
            where = n.meta.get("source") or n.name
            raise TraceError(
                f"nonzero/where(cond) at {where} gives as many items as the data has, and the code reads "
                "how many (a size of them, or an index_add of every coordinate) in Python: an export needs "
                "that number as a tensor. fx2nnef exports the coordinates themselves with their count a "
                "symbol (x[cond], cond.nonzero() then tensor ops), and keeps every coordinate where the list "
                "indexes an index_add (the mixture-of-experts pattern). Rewrite that code with a mask "
                "(torch.where(cond, x, y)) or a fixed-size topk.")
    for n in reaching:
        n.target = data_nonzero
    for n in gm.graph.nodes:
        n.meta.pop("padded", None)
        mark_padded(n)
    gm.recompile()


_SIZE_READS = ("size", "numel", "dim", "__len__")


def _sizes_read_after(start: fx.Node) -> bool:
    """Whether a size of ``start`` or of a tensor computed from it is read (a number the trace took
    at every coordinate, and may have decided on)."""
    return _after(start, lambda n: n.op == "call_method" and n.target in _SIZE_READS or
                  n.op == "call_function" and (n.target is getattr or n.target is len))


def _after(start: fx.Node, test) -> bool:
    """Whether a node computed from ``start`` (not ``start``) passes ``test``."""
    todo, seen = list(start.users), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if test(n):
            return True
        todo.extend(n.users)
    return False


def _reaching_outputs(gm: fx.GraphModule) -> list:
    """The padded coordinates that reach an output other than through a masked index_add."""
    tainted: dict = {}
    reaching: list = []
    for n in gm.graph.nodes:
        if n.target is padded_nonzero:
            tainted[n] = n
            continue
        if _is_index_add(n.op, n.target) and isinstance(n.args[0], fx.Node) and n.args[0] not in tainted:
            index = n.args[2] if len(n.args) > 2 else n.kwargs.get("index")
            if isinstance(index, fx.Node) and rows_condition(index) is not None:
                continue  # the masked rows end here
        origin = next((tainted[a] for a in n.all_input_nodes if a in tainted), None)
        if origin is None:
            continue
        if n.op == "output":
            reaching += [tainted[a] for a in n.all_input_nodes if a in tainted and tainted[a] not in reaching]
        tainted[n] = origin
    return reaching
