"""Rows split into groups whose sizes are read from data, computed group by group, joined back.

ScatterMoE / MegaBlocks-style mixtures of experts (transformers' JetMoE) sort the token rows by
expert, read each expert's row count with ``counts.tolist()``, cut the rows with
``x.split(counts, dim=0)``, apply expert ``i``'s weights to piece ``i`` and ``torch.cat`` the
pieces back in order. Each piece has a size read from data, which no static graph has.

While tracing, such a split gives every piece as all the rows (``x`` itself), and the ``cat``
that joins the pieces, in order along the split axis, keeps for each row the piece of its group
(group ``g`` holds rows ``sum(counts[:g]) <= r < sum(counts[:g+1])``), selected with ``where``.
Each expert thus runs on every row (the export computes ``len(counts)`` times the rows). The
result is the model's when what is done to a piece treats each row on its own: the ops a
piece may go through are listed (:data:`_ROW_WISE`), anything else is refused with its line.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from ...errors import TraceError
from .data_sizes import DataInt
from .proxy import CustomProxy
from .source import user_frame_location

# ops that treat each row of a piece on its own (the piece as first argument): the other
# arguments are weights or constants, never rows of another tensor
_ROW_WISE_FUNCTIONS = {F.linear, F.silu, F.gelu, F.relu, torch.relu, torch.sigmoid, torch.tanh, F.sigmoid, F.tanh}
_ROW_WISE_METHODS = {"contiguous", "float", "to", "type_as", "relu", "sigmoid", "tanh", "chunk", "__getitem__"}
_ELEMENTWISE = {operator.mul, operator.add, operator.sub, operator.truediv, torch.mul, torch.add, torch.sub,
                torch.div, "mul", "add", "sub", "div"}


def _torch(name: str):
    """``torch.<name>`` itself, not the wrapper the tracer puts there while tracing."""
    fn = getattr(torch, name)
    return getattr(fn, "__wrapped_factory__", fn)


def _split_sizes(kind: str, target, args: tuple, kwargs: dict):
    """``(x, counts proxy, dim)`` of ``x.split(counts.tolist(), dim)``, else None."""
    if not ((kind == "call_method" and target in ("split", "split_with_sizes"))
            or (kind == "call_function" and target in (_torch("split"), _torch("split_with_sizes")))):
        return None

    x = args[0]
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size_or_sections", kwargs.get("split_sizes"))
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    if not isinstance(x, fx.Proxy) or not isinstance(sizes, (list, tuple)) or not sizes:
        return None
    counts = getattr(sizes[0], "tensor", None)
    if counts is None or not all(isinstance(s, DataInt) and s.tensor is counts and s.index == i
                                 for i, s in enumerate(sizes)):
        return None
    if counts.value.dim() != 1 or counts.value.numel() != len(sizes):
        return None
    return x, counts, dim % x.value.dim()


def grouped_split(tracer, kind: str, target, args: tuple, kwargs: dict):
    """The pieces of a split by sizes read from data (each is all the rows), else None."""
    found = _split_sizes(kind, target, args, kwargs)
    if found is None:
        return None
    x, counts, dim = found
    pieces = []
    for i in range(counts.value.numel()):
        piece = tracer.create_proxy("call_method", "contiguous", (x,), {})
        piece.node.meta["grouped"] = (counts.node, i, dim, piece.node.meta.get("source"))
        pieces.append(piece)
    return pieces


def _group_of(node: fx.Node):
    return node.meta.get("grouped") if isinstance(node, fx.Node) else None


def grouped_cat(tracer, kind: str, target, args: tuple, kwargs: dict):
    """``torch.cat`` of the pieces of one grouped split, in order along its axis: each row's own
    group's piece (``where`` on the row's group), else None."""
    if kind != "call_function" or target not in (_torch("cat"), _torch("concat"), _torch("concatenate")):
        return None
    parts = args[0] if args else kwargs.get("tensors")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
    if not isinstance(parts, (list, tuple)) or not parts or not all(isinstance(p, fx.Proxy) for p in parts):
        return None
    groups = [_group_of(p.node) for p in parts]
    if not all(groups):
        return None
    counts, _, axis, _ = groups[0]
    rank = parts[0].value.dim()
    if any(g[0] is not counts or g[1] != i for i, g in enumerate(groups)) or len(parts) != counts.meta["value"].numel() \
            or dim % rank != axis:
        return None

    def call(*a):
        tracer.__dict__["_grouped_joining"] = True
        try:
            return tracer.create_proxy(*a)
        finally:
            tracer.__dict__["_grouped_joining"] = False

    counts_p = CustomProxy(counts, tracer, counts.meta["value"])
    ends = call("call_function", _torch("cumsum"), (counts_p, 0), {})  # the first row past each group
    rows = call("call_function", _torch("arange"), (call("call_method", "size", (parts[0], axis), {}),),
                {"device": parts[0].value.device})
    past = call("call_function", operator.ge, (call("call_method", "unsqueeze", (rows, 1), {}),
                                               call("call_method", "unsqueeze", (ends, 0), {})), {})
    group = call("call_method", "sum", (past, 1), {})  # each row's group
    shape = tuple(-1 if a == axis else 1 for a in range(rank))
    out = parts[-1]
    for i in range(len(parts) - 2, -1, -1):
        mine = call("call_method", "reshape", (call("call_function", operator.eq, (group, i), {}), shape), {})
        out = call("call_function", _torch("where"), (mine, parts[i], out), {})
    return out


def _rows_of_other(arg, piece_value: torch.Tensor, axis: int) -> bool:
    """Whether ``arg`` (another operand of an element-wise op on a piece) has rows along ``axis``
    that the broadcast would pair with the piece's (a tensor of the same rank with size > 1 there)."""
    v = getattr(arg, "value", arg)
    if not isinstance(v, torch.Tensor) or v.dim() == 0:
        return False
    offset = piece_value.dim() - v.dim()
    own = axis - offset
    return own >= 0 and v.shape[own] != 1


def check_grouped(tracer, node: fx.Node) -> None:
    """Carry the group of a piece through the row-wise ops after a grouped split; refuse any other op on it."""
    if getattr(tracer, "_grouped_joining", False):
        return
    if node.op not in ("call_function", "call_method", "call_module"):
        return
    ins = [a for a in node.all_input_nodes if _group_of(a)]
    if not ins or "grouped" in node.meta:
        return
    counts, i, axis, origin = _group_of(ins[0])
    first = node.args[0] if node.args else None
    piece = first if isinstance(first, fx.Node) and _group_of(first) else None
    ok = piece is not None and len(ins) == 1
    value = piece.meta["value"] if ok else None
    contracts = node.target in (F.linear, torch.matmul, operator.matmul) or \
        node.op == "call_module" and str(node.meta.get("module_type", "")).endswith("Linear")
    if ok and contracts and isinstance(value, torch.Tensor) and axis == value.dim() - 1:
        ok = False  # a weight applied along the split axis mixes the groups
    elif ok and node.op == "call_module":
        ok = isinstance(node.meta.get("module_type"), str) and any(
            node.meta["module_type"].endswith(t) for t in ("Linear", "SiLU", "GELU", "ReLU", "Tanh", "Sigmoid"))
    elif ok and node.target in _ELEMENTWISE:
        ok = not any(_rows_of_other(a, value, axis) for a in node.args[1:])
    elif ok and node.target in ("chunk", torch.chunk):
        d = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        ok = d % value.dim() != axis
    elif ok and node.target in (torch.matmul, operator.matmul):  # a weight [in, out]: no batch axis to pair rows
        other = node.args[1] if len(node.args) > 1 else None
        other = other.meta.get("value") if isinstance(other, fx.Node) else other
        ok = isinstance(other, torch.Tensor) and other.dim() <= 2
    elif ok and node.target is operator.getitem:
        index = node.args[1]
        ok = isinstance(index, int) and isinstance(value, (tuple, list)) or \
            isinstance(index, tuple) and axis == 0 and len(index) >= 1 and index[0] == slice(None) \
            and not any(isinstance(x, fx.Node) for x in index)
    elif ok:
        ok = node.target in _ROW_WISE_FUNCTIONS or node.target in _ROW_WISE_METHODS
    if not ok:
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
        loc = user_frame_location()
        raise TraceError(
            f"x.split(counts.tolist()) at {origin or 'an unknown line'} cuts rows into groups sized by data; "
            f"fx2nnef computes each group's op on all rows and keeps each row's own group where the pieces are "
            f"joined back with torch.cat in order, which holds for ops that treat each row on its own. "
            f"{name}{' at ' + str(loc) + ': `' + loc.code + '`' if loc else ''} is not one of them. Compute it "
            "after the torch.cat, or pick the rows with a mask instead (torch.where).")
    node.meta["grouped"] = (counts, i, axis, origin)


def check_grouped_outputs(gm: fx.GraphModule) -> None:
    """Refuse a graph where a piece of a grouped split reaches an output without its torch.cat."""
    for n in gm.graph.nodes:
        if n.op == "output" and any(_group_of(a) for a in n.all_input_nodes):
            origin = next(_group_of(a)[3] for a in n.all_input_nodes if _group_of(a))
            raise TraceError(
                f"x.split(counts.tolist()) at {origin or 'an unknown line'} cuts rows into groups sized by data, and "
                "a piece reaches an output without being joined back with torch.cat: its size follows the data, "
                "which a static graph cannot give. Join the pieces (torch.cat) or mask the rows (torch.where).")
