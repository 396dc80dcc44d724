"""Plain tensors that a traced call writes stop being constants.

A tensor the tracer did not get from the inputs (a plain attribute ``self.table`` that is neither
parameter nor buffer, ``torch.zeros(4, 8)`` made with constant sizes, a closure's or a module
global's tensor) is a constant: calls on it alone run eagerly, and a traced call that reads it
records it as a stored copy (``get_attr``). Once a traced call writes into its memory
(``c[..., idx] = x``, ``c.add_(x)``, ``torch.mul(x, 2, out=c)``, through any view of it), its data
depends on the inputs: every later call that reads that memory must be recorded, or its result
is baked in at the example's values.

:class:`WrittenMemory` keeps the memory blocks written so; while one exists, a torch function
mode hands every torch call that receives a plain tensor living in such a block the traced
reading of it instead (a ``get_attr`` of its stored copy, which the in-place pass then reads as
last written). The mode is entered only at the first such write, so that traces without one run
exactly as before.
"""
from __future__ import annotations

import operator
import sys
from typing import Callable

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .structures import storage_keys, tensor_version


def whole_memory(t: torch.Tensor) -> bool:
    """Whether ``t`` is its whole memory block, in order."""
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def flat_memory(t: torch.Tensor) -> torch.Tensor:
    """The whole memory block of ``t`` as a 1-D tensor of its dtype (a view: it shares the memory)."""
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()


def grid_of(numel: int, t: torch.Tensor) -> "tuple | None":
    """A shape for a memory block of ``numel`` items in which ``t``'s strides are whole axes
    (``x[:, 1:3]`` of a (4, 4, 5) tensor: (4, 4, 5)), or None."""
    strides = sorted({s for s, n in zip(t.stride(), t.shape) if n > 1 and s > 0}, reverse=True)
    if not strides:
        return None
    shape, outer = [], numel
    for s in strides:
        if outer % s:
            return None
        shape.append(outer // s)
        outer = s
    if outer > 1:
        shape.append(outer)
    return tuple(shape)


def view_steps(base: torch.Tensor, t: torch.Tensor):
    """Basic views that make ``t`` out of ``base``, a contiguous tensor of the same memory:
    ``(index, order, unit_axes)`` for ``base[index].permute(order)`` with ``unsqueeze`` at
    ``unit_axes``, or None where ``t`` is not such a view (then an ``as_strided`` reading tries)."""
    shape, size, stride = list(base.shape), list(t.shape), list(t.stride())
    strides = list(base.stride())
    offset = t.storage_offset() - base.storage_offset()
    if not base.is_contiguous() or offset < 0 or (base.numel() and offset >= base.numel()):
        return None
    starts = [(offset // s) % n if n else 0 for s, n in zip(strides, shape)]
    if sum(a * s for a, s in zip(starts, strides)) != offset:
        return None
    axis_of: dict = {}  # base axis -> (axis of t, step)
    for a in sorted((a for a in range(len(size)) if size[a] != 1), key=lambda a: -stride[a]):
        for j in range(len(shape)):
            if j in axis_of or stride[a] <= 0 or stride[a] % strides[j]:
                continue
            step = stride[a] // strides[j]
            if starts[j] + (size[a] - 1) * step < shape[j]:
                axis_of[j] = (a, step)
                break
        else:
            return None
    index = tuple(slice(starts[j], starts[j] + (size[axis_of[j][0]] - 1) * axis_of[j][1] + 1, axis_of[j][1])
                  if j in axis_of else starts[j] for j in range(len(shape)))
    kept = [axis_of[j][0] for j in range(len(shape)) if j in axis_of]  # axes of t, in base order
    order = tuple(sorted(range(len(kept)), key=lambda i: kept[i]))
    units = [a for a in range(len(size)) if size[a] == 1]
    made = base[index].permute(order)
    for a in units:
        made = made.unsqueeze(a)
    return (index, order, units) if same_view(made, t) else None


def _plain(obj):
    return obj if isinstance(obj, torch.Tensor) and not isinstance(obj, fx.Proxy) else None


def tensor_versions(args, pick=_plain) -> list:
    """``(item, tensor, version counter)`` for every item of ``args`` (nested lists, tuples and
    dicts) that ``pick`` gives a tensor for: by default the plain (untraced) tensors themselves.
    Tensors without a version counter (made in inference mode) are left out."""
    found: list = []

    def visit(obj):
        if isinstance(obj, (list, tuple)):
            for x in obj:
                visit(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                visit(x)
        else:
            t = pick(obj)
            version = None if t is None else tensor_version(t)
            if version is not None:
                found.append((obj, t, version))

    visit(args)
    return found


class _ReadAsTraced(TorchFunctionMode):
    """Torch calls receiving a plain tensor of written memory receive its traced reading instead."""

    def __init__(self, memory: "WrittenMemory"):
        super().__init__()
        self.memory = memory

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.memory.torch_function(func, args, kwargs or {}, sys._getframe(1))


def _call_traced(func, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)`` where some tensors are now proxies, recorded as the proxies record
    the call when the model makes it on them (``y * 2`` as ``operator.mul``, ``y.add_(x)`` as the
    method, ``y.T`` as the property)."""
    name = getattr(func, "__name__", "")
    if name == "__get__" and args and isinstance(args[0], fx.Proxy):  # a property of Tensor
        return getattr(args[0], getattr(func.__self__, "__name__", ""))
    if name.startswith("__") and name.endswith("__") and len(args) == 2:
        plain = name[2:-2]
        if plain.startswith("r") and hasattr(operator, plain[1:]):  # __rmul__(y, 2): 2 * y
            return getattr(operator, plain[1:])(args[1], args[0])
        if hasattr(operator, plain) and not plain.startswith("i"):
            return getattr(operator, plain)(*args)
    if args and isinstance(args[0], fx.Proxy) and torch.overrides.is_tensor_method_or_property(func):
        return getattr(args[0], name)(*args[1:], **kwargs)
    return func(*args, **kwargs)


def _called_by_user(frame) -> bool:
    """Whether the first frame outside torch, from ``frame`` up, is not fx2nnef's: the call is the
    model's (torch's own Python layers, such as ``F.linear`` or a module's ``__call__``, pass it on)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != "torch" and not name.startswith("torch."):
            return name != "fx2nnef" and not name.startswith("fx2nnef.")
        frame = frame.f_back
    return False


class WrittenMemory:
    """The memory blocks of plain tensors that traced calls wrote; ``as_traced(t)`` gives the
    traced value of such a tensor (the tracer's proxy of its stored copy)."""

    def __init__(self, as_traced: Callable[[torch.Tensor], object]):
        self.keys: set = set()
        self.as_traced = as_traced
        self._mode = None
        # set while a torch function mode of the tracer's own hands every call to
        # :meth:`torch_function` once memory is written: no mode is entered here then (one entered
        # from within another mode's handler is lost when that handler returns)
        self.dispatched = False

    def torch_function(self, func, args, kwargs: dict, frame):
        """A torch call made from ``frame``: the model's receive the traced reading of each plain
        tensor of written memory."""
        if not _called_by_user(frame):
            return func(*args, **kwargs)  # the tracer's own work on example values
        args, kwargs = self.read_as_traced((tuple(args), kwargs))
        return _call_traced(func, args, kwargs)

    def holds(self, t: torch.Tensor) -> bool:
        return bool(self.keys) and any(k in self.keys for k in storage_keys(t))

    def note_writes(self, versions: list) -> bool:
        """Mark the memory of every tensor of ``versions`` (``tensor_versions`` before a traced
        call) whose version counter moved: the call wrote it. Returns whether any did."""
        wrote = False
        for _, t, version in versions:
            if t._version != version:
                wrote = True
                self.keys.update(storage_keys(t))
                if self._mode is None and not self.dispatched:
                    self._mode = _ReadAsTraced(self)
                    self._mode.__enter__()
        return wrote

    def read_as_traced(self, obj):
        """``obj`` with each plain tensor of written memory replaced by its traced reading."""
        def swap(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, fx.Proxy) and self.holds(x):
                return self.as_traced(x)
            return x
        return tree_map(swap, obj)

    def close(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
