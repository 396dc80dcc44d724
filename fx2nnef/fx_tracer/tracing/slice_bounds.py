"""Slice bounds computed from sizes that count from the end (``x[:, :-pad]``), written from the start.

Python reads a negative bound from the end: ``x[:, :-p]`` keeps ``n - p`` items, except at
``p = 0``, where ``:-0`` is ``:0`` and keeps none. A graph that kept the bound as ``-p`` holds
only where ``p > 0``; a model that pads to a multiple and cuts the padding off under
``if p > 0:`` (Longformer's and LED's windows) then held at the sizes off the multiple only, where
it holds at every size. The bound is written ``n - p`` and the decision that it is negative is
recorded as a guard at the user's line: where it flips (``p = 0``) the probes compare the graph,
which keeps ``n`` items, with the model, and either find them equal (the model did not slice
there) or bound the range.
"""
from __future__ import annotations

import operator

import torch

from .proxy import CustomProxy


def from_the_start(tracer, kind: str, target, args: tuple) -> tuple:
    """``args`` of ``x[index]`` with each slice bound that is a traced size, negative at the
    example, replaced by the axis size plus it (the decision recorded); other calls unchanged."""
    if kind != "call_function" or target is not operator.getitem or len(args) != 2:
        return args
    x, index = args
    if not isinstance(x, CustomProxy) or not isinstance(x.value, torch.Tensor):
        return args
    items = list(index) if isinstance(index, tuple) else [index]
    if not any(_from_end(tracer, b) for i in items if isinstance(i, slice) for b in (i.start, i.stop)):
        return args
    if any(i is Ellipsis or not (i is None or isinstance(i, (int, slice, CustomProxy))) for i in items) or \
            any(isinstance(i, CustomProxy) and not isinstance(i.value, int) for i in items):
        return args  # tensor, mask or Ellipsis items: the axis of each slice is not plain to see
    sizes = None
    out, axis = [], 0
    for item in items:
        if item is None:
            out.append(item)
            continue
        if isinstance(item, slice):
            bounds = []
            for b in (item.start, item.stop):
                if _from_end(tracer, b):
                    if sizes is None:
                        sizes = tracer.size_tuple(x)
                    bool(b < 0)  # the decision: a guard at the user's line (True here)
                    b = sizes[axis] + b
                bounds.append(b)
            item = slice(bounds[0], bounds[1], item.step)
        out.append(item)
        axis += 1
    return (x, tuple(out) if isinstance(index, tuple) else out[0])


def _from_end(tracer, bound) -> bool:
    """Whether ``bound`` is a traced size (no data read) that is negative at the example."""
    return (isinstance(bound, CustomProxy) and type(bound.value) is int and bound.value < 0
            and not tracer._on_data(bound))
