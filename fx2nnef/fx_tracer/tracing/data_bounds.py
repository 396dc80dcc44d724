"""Slice bounds, ``narrow()``'s start and length and ``arange()``'s bounds read from tensor data.

``x[:lengths.max()]``, ``x[:n.item()]``, ``x[:int(t)]``, ``x.narrow(0, 0, int(t))``,
``torch.arange(lengths.max())``: the result has as many items as the data says. Such a bound is
recorded as the traced number itself, an ``item()`` node of the integer tensor it was read from,
so that the graph computes it (the shapes after it then carry a count of their own, see
``shapes/data_counts.py``) instead of keeping the example's number.

A tensor in a bound is a traced value already. A number read with ``int()``, ``operator.index()``
or ``.item()`` is a plain Python int by the time it reaches the call (Python makes ``__int__``'s
result a plain int): a bound equal to such a number read earlier in the trace is taken as that
number (the latest read of that value). The capture traces again with each number read changed
(``data_dep.check_number_reads``): where the bound followed the number, the other trace binds it
the same way; where the equality was a coincidence (a constant ``x[:, :2]`` beside a count of 2),
the bindings of the two traces differ and the export is refused, naming the line. Arithmetic on
the number (``x[:int(t) - 1]``) is not followed: that bound is refused as before.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch

from ...ir import SourceLoc
from .data_dep import depends_on_data
from .data_sizes import DataInt
from .proxy import CustomProxy
from .source import user_frame_location

_ARANGE = torch.arange  # torch's own (the tracer's patch stands in its place while tracing)


@dataclasses.dataclass(frozen=True)
class BoundRead:
    """A bound taken as the ``read``-th number read from data of the trace, at ``source``."""

    read: int
    source: Optional[SourceLoc]


def note_data_read(tracer, proxy, value) -> None:
    """Remember a number read from the data of ``proxy`` (an integer tensor of one item), which a
    later bound equal to it stands for."""
    t = getattr(proxy, "value", None)
    if isinstance(t, torch.Tensor) and _integer(t) and t.numel() == 1 and type(value) is not bool \
            and isinstance(value, int):
        tracer.data_reads.append((int(value), proxy))
    else:
        tracer.data_reads.append((None, proxy))  # read, but no bound stands for it


def bind_data_bounds(tracer, kind: str, target, args: tuple, kwargs: dict):
    """``(args, kwargs)`` of a slice, ``narrow`` or ``arange`` with each bound read from data
    replaced by its traced number; other calls unchanged."""
    if kind == "call_function" and target is operator.getitem and len(args) == 2:
        x, index = args
        if not isinstance(getattr(x, "value", None), torch.Tensor):
            return args, kwargs
        items = index if isinstance(index, tuple) else (index,)
        if not any(isinstance(i, slice) for i in items):
            return args, kwargs
        out = tuple(slice(_bound(tracer, i.start), _bound(tracer, i.stop), i.step) if isinstance(i, slice) else i
                    for i in items)
        return (x, out if isinstance(index, tuple) else out[0]), kwargs
    if target in ("narrow", torch.narrow) and kind in ("call_method", "call_function"):
        args = tuple(_bound(tracer, a) if k >= 2 else a for k, a in enumerate(args))
        return args, {k: _bound(tracer, v) if k in ("start", "length") else v for k, v in kwargs.items()}
    if kind == "call_method" and target == "expand" and len(args) > 1:
        return _expand_kept(tracer, args), kwargs
    if kind == "call_function" and target is _ARANGE:
        args = tuple(_bound(tracer, a) if k < 2 else a for k, a in enumerate(args))
        return args, {k: _bound(tracer, v) if k in ("start", "end") else v for k, v in kwargs.items()}
    return args, kwargs


def _expand_kept(tracer, args: tuple) -> tuple:
    """``t.expand(b, n)`` of ``t = torch.arange(n)`` with ``n`` read from data (torchaudio's
    ``_lengths_to_padding_mask``): a size equal to a number read that repeats the axis's own size
    keeps it (-1), so that it follows the count as the axis does."""
    x, sizes = args[0], args[1:]
    packed = len(sizes) == 1 and isinstance(sizes[0], (tuple, list))
    sizes = tuple(sizes[0]) if packed else sizes
    value = getattr(x, "value", None)
    if not isinstance(value, torch.Tensor) or not tracer.bind_reads or len(sizes) < value.dim():
        return args
    lead = len(sizes) - value.dim()
    out = list(sizes)
    for k in range(lead, len(sizes)):
        b = sizes[k]
        if not _plain_read(b) or b != value.shape[k - lead]:
            continue
        found = next((j for j in range(len(tracer.data_reads) - 1, -1, -1) if tracer.data_reads[j][0] == b), None)
        if found is not None and depends_on_data(x.node, tracer._data_memo):
            out[k] = -1
            tracer.bound_reads.append(BoundRead(found, user_frame_location()))
    return (x, tuple(out)) if packed else (x,) + tuple(out)


def reads_a_bound(tracer, fn, args: tuple, kwargs: dict) -> bool:
    """Whether ``torch.arange`` called with plain numbers (``torch.arange(int(n))``) has a bound
    equal to a number read from data: then recorded, so that the bound is the traced number."""
    if fn is not _ARANGE or not tracer.bind_reads or not tracer.data_reads:
        return False
    bounds = list(args[:2]) + [kwargs.get(k) for k in ("start", "end")]
    values = {v for v, _ in tracer.data_reads if v is not None}
    return any(type(b) is not bool and isinstance(b, int) and int(b) in values for b in bounds)


def _plain_read(b) -> bool:
    """Whether ``b`` may be a number read as it was: an int, not a bool, and of a ``DataInt`` only
    the one ``item()`` gave (an item of ``tolist()`` or arithmetic on a number is refused where it
    lands, as before)."""
    if type(b) is bool or not isinstance(b, int):
        return False
    return not isinstance(b, DataInt) or b.read == "item"


def _integer(t: torch.Tensor) -> bool:
    return not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def _bound(tracer, b):
    """``b`` as the traced number it was read as, when it was read from data; else ``b``."""
    if isinstance(b, CustomProxy):
        t = b.value
        if isinstance(t, torch.Tensor) and _integer(t) and t.numel() == 1 and depends_on_data(b.node, tracer._data_memo):
            return tracer.create_proxy("call_method", "item", (b,), {})
        return b
    if not _plain_read(b) or not tracer.bind_reads:
        return b
    found = next((k for k in range(len(tracer.data_reads) - 1, -1, -1) if tracer.data_reads[k][0] == b), None)
    if found is None:
        return b
    number = tracer.create_proxy("call_method", "item", (tracer.data_reads[found][1],), {})
    # the number the model was handed (another than the data's, in the capture's traces that change it)
    number.__dict__["value"] = int(b)
    number.node.meta["value"] = int(b)
    tracer.bound_reads.append(BoundRead(found, user_frame_location()))
    return number
