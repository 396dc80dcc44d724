"""Python loops over a dynamic size, as the tracer records them: ``range`` of traced sizes notes
where each iteration starts (:func:`loop_range_patch`), and a loop over the pieces of a traced tensor
likewise (:func:`iterate_pieces`). The pass :mod:`..passes.loops` then rolls each such loop into one
scan.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import operator
import sys
from typing import Optional

import torch
import torch.fx as fx

from .proxy import CustomProxy
from .source import _SKIP_PREFIXES, user_frame_location
from .threads import in_tracing_thread

_builtin_range = builtins.range
_builtin_len = builtins.len
_orig_isinstance = builtins.isinstance


@dataclasses.dataclass
class LoopRecord:
    """One ``for`` over a ``range`` of traced sizes, as the tracer ran it."""

    args: tuple  # range's arguments as given (traced sizes or ints)
    values: list  # the loop index at each iteration, in the order run
    guards: list  # the guards range() recorded on its traced arguments
    source: object  # where the range was made
    reverse: bool = False  # iterated through reversed()
    starts: list = dataclasses.field(default_factory=list)  # the graph's last node as each iteration starts
    end: Optional[fx.Node] = None  # the graph's last node when the loop ran out
    done: bool = False  # ran out (no break)
    rolled: bool = False  # rolled into a scan by roll_loops


def _last_node(graph: fx.Graph) -> fx.Node:
    return graph._root.prev


class _LoopIter:
    def __init__(self, tracer, rec: LoopRecord):
        self.tracer, self.rec, self.i = tracer, rec, 0

    def __iter__(self):
        return self

    def __next__(self):
        last = _last_node(self.tracer.graph)
        if self.i == len(self.rec.values):
            self.rec.end, self.rec.done = last, True
            raise StopIteration
        self.rec.starts.append(last)
        self.i += 1
        return self.rec.values[self.i - 1]


_SIZED_RANGES_KEPT = 8


def note_sized_range(tracer, values: range, args: tuple) -> None:
    """Keep a range of traced sizes made while tracing, for :func:`.tracer._range_tensor`."""
    tracer.sized_ranges.append((values, args))
    del tracer.sized_ranges[:-_SIZED_RANGES_KEPT]


class _TracedRange:
    """``range`` of traced sizes: a plain range of their example values (each read recorded as a
    guard, as ``range`` itself does), whose iteration notes where each step starts in the graph."""

    def __init__(self, tracer, args: tuple):
        before = len(tracer.guards)
        self._range = _builtin_range(*[operator.index(a) for a in args])
        self._tracer, self._args = tracer, args
        self._guards = tracer.guards[before:]
        self._source = user_frame_location()
        note_sized_range(tracer, self._range, args)

    def _loop(self, values, reverse: bool):
        rec = LoopRecord(self._args, list(values), list(self._guards), self._source, reverse)
        self._tracer.loops.append(rec)
        return _LoopIter(self._tracer, rec)

    def __iter__(self):
        return self._loop(self._range, False)

    def __reversed__(self):
        return self._loop(self._range[::-1], True)

    def __len__(self):
        return len(self._range)

    def __getitem__(self, i):
        return self._range[i]

    def __contains__(self, v):
        return v in self._range

    def __eq__(self, other):
        return self._range == (other._range if _orig_isinstance(other, _TracedRange) else other)

    def __hash__(self):
        return hash(self._range)

    def __repr__(self):
        return repr(self._range)

    def __getattr__(self, k):  # start, stop, step, index, count
        if k.startswith("_"):
            raise AttributeError(k)
        return getattr(self._range, k)


class _PieceIter:
    """The iteration of a tensor (``for t in x``) or of its ``unbind`` (``for t in x.unbind(d)``)
    as a loop over ``range(x.size(d))`` that takes ``x[i]`` (``x.select(d, i)``) at each step,
    inside the step: the pieces are then index uses of the loop, as ``x[:, t]`` in a range loop."""

    def __init__(self, inner: _LoopIter, x, dim: int):
        self.inner, self.x, self.dim = inner, x, dim

    def __iter__(self):
        return self

    def __next__(self):
        i = next(self.inner)
        return self.x[i] if self.dim == 0 else self.x.select(self.dim, i)


def iterate_pieces(proxy):
    """During the rolling trace, the loop over the pieces of ``proxy`` (a tensor of rank >= 1, or
    the result of ``unbind`` of one along a plain int dim), or None to iterate it as usual."""
    tracer, value, node = proxy.tracer, proxy.value, proxy.node
    if _orig_isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return None
        x, dim, count = proxy, 0, []
    elif _orig_isinstance(value, (tuple, list)) and node.op in ("call_method", "call_function") \
            and _target_text(node) == "unbind" and node.args and _orig_isinstance(node.args[0], fx.Node):
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        base = node.args[0].meta.get("value")
        if not _orig_isinstance(dim, int) or not _orig_isinstance(base, torch.Tensor):
            return None
        x = CustomProxy(node.args[0], tracer)
        x.__dict__["value"] = base
        # unbind's count of pieces is the loop's length: a guard of the loop, dropped when it rolls
        count = [g for g in tracer.guards if g.node is node and g.op == "count"]
    else:
        return None
    size = tracer.create_proxy("call_method", "size", (x, dim), {})
    loop = _TracedRange(tracer, (size,))
    inner = loop._loop(loop._range, False)
    inner.rec.guards.extend(count)
    return _PieceIter(inner, x, dim)


class _RangeType(type):
    def __instancecheck__(cls, obj):
        return _orig_isinstance(obj, (_builtin_range, _TracedRange))


@contextlib.contextmanager
def loop_range_patch(tracer):
    """``range`` that records the loops over traced sizes in ``tracer.loops``; ``len`` of a traced
    tensor, in the model's code, is its traced size (``for t in range(len(x))``)."""
    class Range(metaclass=_RangeType):
        def __new__(cls, *args):
            if any(_orig_isinstance(a, CustomProxy) for a in args) and in_tracing_thread():
                return _TracedRange(tracer, args)
            return _builtin_range(*args)

    def traced_len(obj):
        if _orig_isinstance(obj, CustomProxy) and _orig_isinstance(obj.value, torch.Tensor) and obj.value.dim() > 0 \
                and not sys._getframe(1).f_code.co_filename.startswith(_SKIP_PREFIXES) and in_tracing_thread():
            return tracer.create_proxy("call_method", "size", (obj, 0), {})
        return _builtin_len(obj)

    builtins.range, builtins.len = Range, traced_len
    try:
        yield
    finally:
        builtins.range, builtins.len = _builtin_range, _builtin_len


def _target_text(n: fx.Node) -> str:
    t = n.target
    return t if _orig_isinstance(t, str) else getattr(t, "__name__", type(t).__name__)
