"""Sizes and indices read from tensor content: refused with the line, not baked silently.

``t.item()`` / ``t.tolist()`` on a traced tensor give the example's number, a decision on data
(a "baked" guard). (``int(t)`` cannot be marked: Python makes ``__int__``'s result a plain int;
``data_dep.check_number_reads`` finds where such a number goes by tracing again.) Used as a slice bound, a size or an index (``x[:n]``,
``x.narrow(0, 0, n)``, ``x.view(n, -1)``, ``x[n]``) that number would make the export right for
the example's data only, and a shape that follows data has no NNEF form. Such numbers are
:class:`DataInt` (an ``int`` that remembers where it was read, through arithmetic), and
:func:`check_no_data_sizes` refuses them, and traced tensors, where a size or index goes.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
import torch.fx as fx

from ...errors import TraceError
from ...ir import SourceLoc
from .data_dep import _SIZED_FUNCTIONS, _SIZED_METHODS, depends_on_data
from .source import user_frame_location


class DataInt(int):
    """An int read from tensor data; arithmetic on it keeps the mark."""

    origin: Optional[SourceLoc] = None
    tensor = None  # the traced 1-d tensor it is item ``index`` of (``t.tolist()``), not after arithmetic
    index = None
    read = ""  # "item" for the number ``t.item()`` gave itself (not after arithmetic, not a tolist() item)

    def __new__(cls, value: int, origin: Optional[SourceLoc], tensor=None, index=None):
        obj = super().__new__(cls, value)
        obj.origin = origin
        obj.tensor, obj.index = tensor, index
        return obj


def _marked(op):
    def method(self, *other):
        out = op(int(self), *[int(o) if isinstance(o, DataInt) else o for o in other])
        return DataInt(out, self.origin) if type(out) is int else out
    return method


for _name, _op in [("__add__", operator.add), ("__sub__", operator.sub), ("__mul__", operator.mul),
                   ("__floordiv__", operator.floordiv), ("__mod__", operator.mod), ("__neg__", operator.neg),
                   ("__abs__", operator.abs), ("__radd__", lambda a, b: b + a), ("__rsub__", lambda a, b: b - a),
                   ("__rmul__", lambda a, b: b * a), ("__rfloordiv__", lambda a, b: b // a),
                   ("__rmod__", lambda a, b: b % a)]:
    setattr(DataInt, _name, _marked(_op))


def mark_data_number(value, origin: Optional[SourceLoc], tensor=None):
    """``value`` (a number or a list of them read from data) with its ints marked; the items of
    ``tensor.tolist()`` of a 1-d ``tensor`` also remember it and their index (see ``.grouped``)."""
    if type(value) is int:
        return DataInt(value, origin)
    if isinstance(value, list):
        if tensor is not None and all(type(v) is int for v in value):
            return [DataInt(v, origin, tensor, i) for i, v in enumerate(value)]
        return [mark_data_number(v, origin) for v in value]
    return value


def _find(obj, in_slice: bool = False):
    """The first data-read number or traced tensor in ``obj`` (tensors count inside slices only)."""
    if isinstance(obj, DataInt):
        return obj
    if isinstance(obj, fx.Proxy) and in_slice and isinstance(getattr(obj, "value", None), torch.Tensor) \
            and depends_on_data(obj.node, obj.tracer._data_memo):
        return obj
    if isinstance(obj, slice):
        for v in (obj.start, obj.stop, obj.step):
            found = _find(v, True)
            if found is not None:
                return found
    if isinstance(obj, (list, tuple)):
        for v in obj:
            found = _find(v, in_slice)
            if found is not None:
                return found
    return None


def check_no_data_sizes(kind: str, target, args: tuple, kwargs: dict) -> None:
    """Raise when a size, slice bound or index of this call was read from tensor content."""
    if kind == "call_function" and target is operator.getitem and len(args) == 2:
        found, what = _find(args[1]), "slice bound or index"
    elif (kind == "call_method" and target in _SIZED_METHODS) or (kind == "call_function" and target in _SIZED_FUNCTIONS):
        found, what = _find((args[1:], tuple(kwargs.values()))), "size"
        name = target if isinstance(target, str) else target.__name__
        if target in ("narrow", torch.narrow) and found is None:
            found = _find(args[2:], True)
        what = f"{name}() {what}"
    else:
        return
    if found is None:
        return
    loc = user_frame_location()
    where = f" at {loc}: `{loc.code}`" if loc else ""
    read = (f" (read with item()/tolist() at {found.origin}: `{found.origin.code}`)"
            if isinstance(found, DataInt) and found.origin else " (a traced tensor)")
    raise TraceError(
        f"a {what}{where} comes from tensor content{read}: the result's shape or the element it picks would "
        "follow the input data, which a static NNEF graph cannot express, and baking the example's number would "
        "be wrong for other inputs. Instead keep the full size and mask (torch.where(torch.arange(x.size(0)) < n, "
        "x, 0)), pick data-chosen rows with a tensor index (x[t] or torch.index_select), or make the bound an "
        "input size (a dynamic axis). A slice bound or narrow() start or length may be the integer tensor "
        "itself, computed with torch ops (x[:t + 1], not x[:t.item() + 1]): the graph then reads it.")
