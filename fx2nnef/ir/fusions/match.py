"""Small helpers shared by the fusion passes: reading a node's arguments by schema name,
following producers, and replacing a matched group of nodes by one node.

A pattern matcher answers None as soon as anything differs from the exact pattern; only a
complete match rewrites the graph.
"""
from __future__ import annotations

from typing import Optional

from ..dims import SymDim
from ..dtypes import DType
from ..graph import Graph, Node, Value

MISSING = object()

ADD = ("operator.add", "torch.add", "Tensor.add")
MUL = ("operator.mul", "torch.mul", "Tensor.mul")
DIV = ("operator.truediv", "torch.div", "Tensor.div", "torch.true_divide", "Tensor.true_divide")
NEG = ("operator.neg", "torch.neg", "Tensor.neg")
CAT = ("torch.cat", "torch.concat", "torch.concatenate")
MATMUL = ("torch.matmul", "Tensor.matmul", "operator.matmul")
# casts that leave a tensor unchanged when the result has the operand's dtype
CASTS = ("Tensor.to", "Tensor.type_as", "Tensor.float", "Tensor.half", "Tensor.type", "Tensor.contiguous")


def arg(node: Node, pos: int, *names: str, default=MISSING):
    """The argument at position ``pos`` or given by one of ``names`` (``default`` when absent)."""
    if pos < len(node.args):
        return node.args[pos]
    for n in names:
        if n in node.kwargs:
            return node.kwargs[n]
    return default


def only_kwargs(node: Node, allowed: set) -> bool:
    """Whether the node's keyword arguments are all in ``allowed``."""
    return set(node.kwargs) <= allowed


def made_by(v, kinds) -> Optional[Node]:
    """The node producing ``v`` when its kind is one of ``kinds``."""
    if isinstance(v, Value) and v.producer is not None and v.producer.kind in kinds:
        return v.producer
    return None


def used_once(graph: Graph, v: Value) -> bool:
    """Read by exactly one node, once, and not a graph output."""
    return len(v.uses) == 1 and not any(v is o for o in graph.outputs) \
        and sum(1 for x in v.uses[0].inputs() if x is v) == 1


def unused(graph: Graph, v: Value) -> bool:
    return not v.uses and not any(v is o for o in graph.outputs)


def binary_operands(node: Node) -> Optional[tuple]:
    """``(a, b)`` of an add/mul/div call without ``alpha``/``rounding_mode``/``out``."""
    if not only_kwargs(node, {"other", "input"}):
        return None
    a, b = arg(node, 0, "input"), arg(node, 1, "other")
    if a is MISSING or b is MISSING:
        return None
    return a, b


def is_float(v) -> bool:
    return isinstance(v, Value) and v.dtype is not None and v.dtype.is_float and v.dtype is not DType.F64


def same_dtype(*values) -> bool:
    dtypes = {v.dtype for v in values}
    return len(dtypes) == 1 and None not in dtypes


def number(x) -> Optional[float]:
    """A Python number (not a bool, not a tensor) as a float."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def static(d) -> bool:
    return isinstance(d, int) and not isinstance(d, bool)


def dims_equal(a, b) -> bool:
    if isinstance(b, SymDim) and not isinstance(a, SymDim):
        a, b = b, a
    if isinstance(a, SymDim):
        return isinstance(b, (int, SymDim)) and a.__eq__(b) is True
    return a == b


def shapes_equal(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b))


def broadcasts_into(small, big) -> bool:
    """Whether ``small`` broadcasts to ``big`` without enlarging it (numpy rules, right-aligned)."""
    if small is None or big is None or len(small) > len(big):
        return False
    return all(dims_equal(s, 1) or dims_equal(s, b) for s, b in zip(reversed(small), reversed(big)))


def norm_axis(dim, rank: int) -> Optional[int]:
    """A non-negative axis, or None when ``dim`` is not one int (or a one-item list) in range."""
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if not static(dim) or not -rank <= dim < rank:
        return None
    return dim % rank


def last_axis_slice(index, shape) -> Optional[tuple]:
    """``(begin, end)`` of ``x[..., begin:end]`` (step 1) slicing only the last axis of a tensor of
    ``shape``, whose last dim must be static; None for any other indexing."""
    if shape is None or not shape or not static(shape[-1]):
        return None
    items = list(index) if isinstance(index, tuple) else [index]
    if items.count(Ellipsis) > 1:
        return None
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items = items[:i] + [slice(None)] * (len(shape) - len(items) + 1) + items[i + 1:]
    if len(items) != len(shape) or not all(isinstance(s, slice) for s in items):
        return None
    if any(s != slice(None) for s in items[:-1]):
        return None
    last = items[-1]
    if last.step not in (None, 1):
        return None
    size = shape[-1]
    begin, end = last.start, last.stop
    if begin is not None and not static(begin) or end is not None and not static(end):
        return None
    begin = 0 if begin is None else (begin + size if begin < 0 else begin)
    end = size if end is None else (end + size if end < 0 else min(end, size))
    return (begin, end) if 0 <= begin <= end <= size else None


def through_noop_casts(graph: Graph, v: Value) -> tuple:
    """Follow ``v``'s single reader while it is a cast to ``v``'s own dtype; ``(last value, casts)``."""
    casts = []
    while used_once(graph, v) and v.uses[0].kind in CASTS:
        node = v.uses[0]
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if out is None or out.dtype is not v.dtype or not shapes_equal(out.shape, v.shape) \
                or next(node.inputs(), None) is not v or not _pure_cast(node):
            break
        casts.append(node)
        v = out
    return v, casts


def cast_root(v):
    """``v`` before any casts to its own dtype and shape (``x.float()`` of an f32 ``x`` is ``x``)."""
    while isinstance(v, Value) and v.producer is not None and v.producer.kind in CASTS \
            and len(v.producer.outputs) == 1 and _pure_cast(v.producer):
        src = next(v.producer.inputs(), None)
        if src is None or src.dtype is not v.dtype or not shapes_equal(src.shape, v.shape) \
                or v.producer.args[0] is not src:
            break
        v = src
    return v


def _pure_cast(node: Node) -> bool:
    """A cast call that neither copies to another device nor changes the memory format."""
    if node.kind == "Tensor.contiguous":
        return not node.args[1:] and not node.kwargs
    return not {"memory_format", "device", "copy"} & set(node.kwargs)


def replace(graph: Graph, removed: list, node: Node) -> Node:
    """Put ``node`` (whose outputs are existing Values) where the last of ``removed`` was, and
    take the ``removed`` nodes out of the graph."""
    position = max(graph.nodes.index(n) for n in removed)
    for n in removed:
        for v in n.inputs():
            if n in v.uses:
                v.uses.remove(n)
    keep = set(map(id, removed))
    before = [n for n in graph.nodes[:position] if id(n) not in keep]
    after = [n for n in graph.nodes[position + 1:] if id(n) not in keep]
    for v in node.inputs():
        v.uses.append(node)
    for out in node.outputs:
        out.producer = node
    if not node.name:
        node.name = node.outputs[0].name
    graph.nodes[:] = before + [node] + after
    return node


def drop_unused(graph: Graph, values) -> None:
    """Remove the producers of ``values`` (and theirs, recursively) that nothing reads any more."""
    todo = [v for v in values if isinstance(v, Value)]
    while todo:
        v = todo.pop()
        node = v.producer
        if node is None or node not in graph.nodes or not all(unused(graph, o) for o in node.outputs):
            continue
        inputs = list(node.inputs())
        graph.remove_node(node)
        todo += inputs


def fused_node(kind: str, args: tuple, kwargs: dict, out: Value, like: Node) -> Node:
    """A node of ``kind`` producing ``out``, attributed to the module and source line of ``like``."""
    return Node(kind, args, kwargs, [out], module_path=like.module_path, module_type=like.module_type,
                source=like.source, name=out.name)
