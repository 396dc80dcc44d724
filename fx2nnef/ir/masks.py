"""What the graph says about a boolean attention mask, read from the ops that build it.

``rows_never_empty(mask)`` proves that every query row of a ``[..., L, T]`` keep-mask has at
least one True key, for masks built the way transformers builds causal and sliding-window masks:
comparisons between a key index (``arange`` along the last axis, plus an offset) and a query
index (``arange`` along the axis before it, plus an offset), joined by ``&``. Offsets may be
ints or symbolic sizes (``P``); sizes are never negative. Anything else (a padding mask read
from an input, an index along another axis) is not proved, and the answer is False: the
caller then keeps the rule for rows that see no key.

The proof picks a witness key for each row, ``j = i + d`` (the last key a ``key <= query + c``
comparison lets through, ``d = c``), and checks that it lies in ``[0, T)`` for every row and
passes every comparison; with both indices moving together, each check is one inequality
between offsets, independent of the row.
"""
from __future__ import annotations

from typing import Optional

from .dims import _DIV_ATOMS, _EXTREMA, SymDim, as_sym, simplify
from .graph import Value

ARANGE = ("torch.arange",)
ADD = ("operator.add", "torch.add", "Tensor.add")
SUB = ("operator.sub", "torch.sub", "Tensor.sub")
# ops that keep the values of their first operand (device moves, broadcasting views)
SAME = ("Tensor.to", "Tensor.expand", "Tensor.expand_as", "Tensor.contiguous", "Tensor.clone")
UNSQUEEZE = ("Tensor.unsqueeze", "torch.unsqueeze")
GETITEM = ("operator.getitem",)
AND = ("operator.and_", "torch.logical_and", "Tensor.logical_and", "torch.bitwise_and", "Tensor.bitwise_and",
       "Tensor.__and__")
# comparison kinds -> the relation "first operand REL second operand"
_RELATIONS = {"le": "le", "lt": "lt", "ge": "ge", "gt": "gt"}
_FLIP = {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt"}


def rows_never_empty(mask) -> bool:
    """Whether every row (last axis) of the bool ``mask`` is proved to hold a True."""
    if not isinstance(mask, Value) or mask.shape is None or len(mask.shape) < 2:
        return False
    if mask.producer is None:  # a constant (a static causal mask folded by the tracer) is read
        data = mask.data
        return data is not None and data.dtype == bool and data.size > 0 and bool(data.any(axis=-1).all())
    rank = len(mask.shape)
    atoms = _atoms(mask, rank)
    if not atoms:
        return False  # unknown, or no comparison at all (an all-True constant is not proved here)
    queries, keys = mask.shape[-2], mask.shape[-1]
    for rel, key_off, query_off, key_len, query_len in atoms:
        if not (_same(key_len, keys) and _same(query_len, queries)):
            return False
    candidates = [_as_key_bound(rel, k, q) for rel, k, q, _, _ in atoms]
    for d in (c for c in candidates if c is not None):
        in_range = _nonneg(d) and _nonneg(simplify(as_sym(keys) - as_sym(queries) - d))
        if in_range and all(_holds(rel, k, q, d) for rel, k, q, _, _ in atoms):
            return True
    return False


def _as_key_bound(rel: str, key_off, query_off):
    """``d`` such that ``key <= query + d`` is what the comparison allows at most, or None."""
    if rel == "le":  # j + k <= i + q: j <= i + (q - k)
        return simplify(as_sym(query_off) - key_off)
    if rel == "lt":
        return simplify(as_sym(query_off) - key_off - 1)
    return None


def _holds(rel: str, key_off, query_off, d) -> bool:
    """Whether ``(i + d) + key_off REL i + query_off`` holds for every row i."""
    diff = simplify(as_sym(query_off) - key_off - d)  # right side minus left side
    if rel == "le":
        return _nonneg(diff)
    if rel == "lt":
        return _nonneg(simplify(as_sym(diff) - 1))
    if rel == "ge":
        return _nonneg(simplify(-as_sym(diff)))
    return _nonneg(simplify(-as_sym(diff) - 1))


def _atoms(mask: Value, rank: int) -> Optional[list]:
    """The comparisons ANDed into ``mask``: ``(rel, key offset, query offset, key length, query
    length)`` each, meaning ``key + key_offset REL query + query_offset``; None when not of that form."""
    node = mask.producer
    if node is None:
        return [] if _all_true(mask) else None
    kind = node.kind
    if kind in SAME and node.args and isinstance(node.args[0], Value) and node.args[0].dtype is mask.dtype:
        return _atoms(node.args[0], rank)
    if kind in AND and len(node.args) == 2:
        parts = [_atoms(a, rank) if isinstance(a, Value) else None for a in node.args]
        return None if any(p is None for p in parts) else parts[0] + parts[1]
    rel = _RELATIONS.get(kind.rsplit(".", 1)[-1])
    if rel is None or len(node.args) != 2:
        return None
    a, b = (_index(x, rank) if isinstance(x, Value) else None for x in node.args)
    if a is None or b is None:
        return None
    if a[0] == rank - 2 and b[0] == rank - 1:  # query REL key: key FLIP query
        a, b, rel = b, a, _FLIP[rel]
    if a[0] != rank - 1 or b[0] != rank - 2:
        return None
    return [(rel, a[1], b[1], a[2], b[2])]


def _all_true(v: Value) -> bool:
    data = v.data
    return data is not None and data.dtype == bool and bool(data.all())


def _index(v: Value, rank: int) -> Optional[tuple]:
    """``(axis, offset, length)`` when ``v``, broadcast to ``rank`` axes, holds ``p[axis] + offset``
    at position p (an arange along one axis); None otherwise."""
    found = _index_here(v)
    if found is None or v.shape is None or len(v.shape) > rank:
        return None
    axis, offset, length = found
    return axis + rank - len(v.shape), offset, length


def _index_here(v: Value) -> Optional[tuple]:
    """``(axis, offset, length)`` in ``v``'s own axes."""
    node = v.producer
    if node is None or v.dtype is None or v.dtype.is_float or v.shape is None:
        return None
    args = node.args
    if node.kind in ARANGE:
        if node.kwargs.get("step", 1) != 1 or len(args) > 2 or not args or "start" in node.kwargs:
            return None
        start = args[0] if len(args) == 2 else 0
        return (0, start, v.shape[0]) if _dim(start) and len(v.shape) == 1 else None
    if node.kind in SAME:
        inner = args[0] if args and isinstance(args[0], Value) else None
        return _index_here(inner) if inner is not None and len(inner.shape or ()) == len(v.shape) else None
    if node.kind in ADD + SUB and len(args) == 2 and not node.kwargs:
        x, c = (args if isinstance(args[0], Value) else args[::-1]) if node.kind in ADD else args
        if not isinstance(x, Value) or not _dim(c) or x.shape is None or len(x.shape) != len(v.shape):
            return None
        inner = _index_here(x)
        if inner is None:
            return None
        shift = c if node.kind in ADD else -as_sym(c)
        return inner[0], simplify(as_sym(inner[1]) + shift), inner[2]
    if node.kind in UNSQUEEZE and len(args) == 2 and isinstance(args[0], Value) and isinstance(args[1], int):
        inner = _index_here(args[0])
        where = args[1] % len(v.shape)
        return None if inner is None else (inner[0] + (where <= inner[0]), inner[1], inner[2])
    if node.kind in GETITEM and len(args) == 2 and isinstance(args[0], Value):
        inner = _index_here(args[0])
        axis = None if inner is None else _axis_after_indexing(args[1], len(args[0].shape), inner[0])
        return None if axis is None else (axis, inner[1], inner[2])
    return None


def _axis_after_indexing(index, in_rank: int, axis: int) -> Optional[int]:
    """Where input axis ``axis`` lands after ``x[index]`` when ``index`` holds only None, full
    slices and one Ellipsis; None for any other indexing."""
    items = list(index) if isinstance(index, tuple) else [index]
    if items.count(Ellipsis) > 1:
        return None
    if Ellipsis in items:
        at = items.index(Ellipsis)
        taken = sum(1 for x in items if x is not None and x is not Ellipsis)
        items = items[:at] + [slice(None)] * (in_rank - taken) + items[at + 1:]
    out, seen = 0, 0
    for item in items:
        if item is None:
            out += 1
        elif item == slice(None):
            if seen == axis:
                return out
            seen, out = seen + 1, out + 1
        else:
            return None
    return out + (axis - seen) if axis >= seen else None


def _dim(x) -> bool:
    return isinstance(x, (int, SymDim)) and not isinstance(x, bool)


def _same(a, b) -> bool:
    return simplify(as_sym(a) - b) == 0


def _nonneg(x) -> bool:
    """Whether ``x`` is >= 0 for every size: an int >= 0, or a polynomial of sizes whose
    coefficients are all >= 0 (floor-division or extremum atoms are not read)."""
    x = simplify(x)
    if isinstance(x, int):
        return x >= 0
    return all(c >= 0 for c in x.terms.values()) and not any(s in _DIV_ATOMS or s in _EXTREMA for s in x.symbols)

