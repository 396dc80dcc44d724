"""``Tensor.as_strided`` / ``torch.as_strided`` as ops on the flattened tensor.

``as_strided(size, stride, offset)`` reads memory positions ``offset + sum(i_k * stride_k)``.
On a contiguous tensor, position ``p`` is item ``p - x.storage_offset()`` of ``x.reshape(-1)``,
so the call is recorded as that flat view sliced (when the positions are one contiguous run,
a slice or reshape) or indexed with the constant positions (a gather: overlapping windows,
broadcasts), or, when the strides nest, as a slice of it reshaped to a box, sliced and permuted
(transposes, strided slices). A tensor whose memory order is not its logical order, or
positions outside the tensor, are refused with the line.
"""
from __future__ import annotations

import operator

import torch

from ...errors import TraceError
from .source import user_frame_location

# a gather of constant positions above this many items would store a large index tensor
MAX_GATHERED = 1 << 22


def is_as_strided(kind: str, target) -> bool:
    return (kind == "call_method" and target == "as_strided") or (kind == "call_function" and target is torch.as_strided)


def _bind(args: tuple, kwargs: dict):
    names = ("input", "size", "stride", "storage_offset")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound["input"], bound["size"], bound["stride"], bound.get("storage_offset")


def record_as_strided(tracer, args: tuple, kwargs: dict, unwrap):
    """Record the equivalent of ``as_strided`` through ``tracer``; returns its proxy."""
    x, size, stride, offset = _bind(args, kwargs)
    value = unwrap(x)
    # a size computed from the traced sizes (``n - 2`` windows) is no window length: an unfold
    # takes its length as a number, so where both readings fit the example, the fixed one is the length
    fixed = [not _from_sizes(v) for v in size]
    windows = _sliding_windows(value, [int(v) for v in unwrap(size)], [int(v) for v in unwrap(stride)],
                               unwrap(offset))
    if windows is not None:
        k, step = windows
        proxy = tracer.create_proxy("call_method", "unfold", (x, value.dim() - 1, k, step), {})
        _read_as_number(tracer, size[-1], "a window length")
        return proxy, f"windows of {k} every {step} along the last axis (unfold)"
    found = _memory_windows(tracer, x, value, [int(v) for v in unwrap(size)], [int(v) for v in unwrap(stride)],
                            unwrap(offset), fixed)
    if found is None:
        found = _without_unit_axes(tracer, x, value, [int(v) for v in unwrap(size)],
                                   [int(v) for v in unwrap(stride)], unwrap(offset), fixed)
    if found is not None:
        y, how, length_axis = found
        if length_axis is not None:
            _read_as_number(tracer, size[length_axis], "a window length")
        return y, how
    # the positions read become constants: a size, stride or offset computed from the traced sizes
    # is a decision on them (valid at the sizes where it gives the same number, as int() of it)
    for item in list(size) + list(stride) + ([offset] if offset is not None else []):
        _read_as_number(tracer, item, "a number")
    size, stride, offset = [int(s) for s in unwrap(size)], [int(s) for s in unwrap(stride)], unwrap(offset)
    loc = user_frame_location()
    where = f" at {loc}: `{loc.code}`" if loc else ""
    if not value.is_contiguous():
        raise TraceError(
            f"as_strided{where} reads the memory of a tensor whose layout is not its logical order (a transposed "
            f"or strided view, strides {tuple(value.stride())}); exported tensors have no memory layout. Call it on "
            "x.contiguous() if that is what you mean, or write the view with slicing, permute and reshape.")
    rel = (value.storage_offset() if offset is None else int(offset)) - value.storage_offset()
    positions = torch.full(size, rel, dtype=torch.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        positions = positions + (torch.arange(n) * s).reshape(shape)
    count = positions.numel()
    if count and (int(positions.min()) < 0 or int(positions.max()) >= value.numel()):
        raise TraceError(
            f"as_strided{where} reads memory outside the tensor it is called on (positions {int(positions.min())}.."
            f"{int(positions.max())} of a tensor of {value.numel()} items); only its own items can be exported.")
    flat = tracer.create_proxy("call_method", "reshape", (x, (-1,)), {})
    if torch.equal(positions.reshape(-1), torch.arange(rel, rel + count)):
        part = tracer.create_proxy("call_function", operator.getitem, (flat, slice(rel, rel + count)), {})
        return tracer.create_proxy("call_method", "reshape", (part, tuple(size)), {}), "a slice of the flat tensor"
    boxed = _box(tracer, flat, size, stride, rel, value.numel())
    if boxed is not None:
        return boxed, "a slice of the flat tensor, reshaped, sliced and permuted"
    if count > MAX_GATHERED:
        raise TraceError(f"as_strided{where} picks {count} scattered items: more than {MAX_GATHERED} constant "
                         "positions to store; write the view with slicing, permute and reshape (or unfold)")
    return (tracer.create_proxy("call_function", operator.getitem, (flat, positions), {}),
            "a gather of constant positions of the flat tensor")


def _from_sizes(item) -> bool:
    """Whether an argument of ``as_strided`` is a number the model computed from the traced sizes."""
    return hasattr(item, "node") and hasattr(item, "value")


def _read_as_number(tracer, item, what: str) -> None:
    """``item`` taken as a plain number (``what``: a window length an unfold takes, a position):
    a decision on the sizes when the model computed it from them (the probes then bound the
    range where it changes)."""
    if _from_sizes(item):
        tracer._record_guard(item, "int", int(item.value), f"as_strided reads %{item.node.name} = "
                                                            f"{int(item.value)} as {what}")


def _sliding_windows(value: torch.Tensor, size: list, stride: list, offset) -> "tuple | None":
    """``(k, step)`` when ``as_strided`` reads windows of ``k`` items every ``step`` items along the
    last axis of the contiguous ``value``, every one that fits (the sliding-window idiom of framing
    code, ``x.unfold(-1, k, step)``), else None. unfold computes the number of windows from the
    size, so the export holds at every length; the leading axes are the tensor's own."""
    if not value.is_contiguous() or value.dim() < 1 or len(size) != value.dim() + 1:
        return None
    if offset is not None and int(offset) != value.storage_offset():
        return None
    n, k = size[-2], size[-1]
    step, unit = stride[-2], stride[-1]
    length = value.shape[-1]
    if unit != 1 or step < 1 or k < 1 or k > length or n != (length - k) // step + 1:
        return None
    if list(size[:-2]) != list(value.shape[:-1]) or list(stride[:-2]) != list(value.stride()[:-1]):
        return None
    return k, step


def _memory_windows(tracer, x, value: torch.Tensor, size: list, stride: list, offset, fixed: list):
    """``as_strided`` of a dense tensor (contiguous, or a permutation of it: a transposed view) as
    ops on its axes taken in memory order, or None. The axes are merged into groups (an axis whose
    stride no output axis reads joins the axis inside it); every output axis must read one whole
    group, except at most one pair reading windows of one group: ``k`` items every ``step`` items,
    every window that fits (Longformer's overlapping chunks: ``x.view(B, n, 2w, d)`` read with its
    chunk stride halved). A contiguous tensor takes this route for overlapping windows only. The ops are a permute to memory order, flattens, one ``unfold`` and a
    permute: no size is read as a number, so the export holds at every size."""
    shape = list(value.shape)
    if not shape or 1 in shape or 1 in size:
        return None
    if offset is not None and int(offset) != value.storage_offset():
        return None
    order = sorted(range(len(shape)), key=lambda a: -value.stride(a))
    dense = 1
    for a in reversed(order):
        if value.stride(a) != dense:
            return None  # gaps or overlaps: not a permutation of a contiguous tensor
        dense *= shape[a]
    groups = []  # [first, last] positions in memory order, from the innermost
    for i in reversed(range(len(order))):
        if not groups or value.stride(order[i]) in stride:
            groups.append([i, i])
        else:
            groups[-1][0] = i
    groups.reverse()
    g_stride = [value.stride(order[last]) for _, last in groups]
    g_size = [int(torch.tensor([shape[order[i]] for i in range(first, last + 1)]).prod()) for first, last in groups]
    place, rest = {}, []  # output axis -> group; output axes reading windows
    for a, (n, st) in enumerate(zip(size, stride)):
        g = g_stride.index(st) if st in g_stride else None
        if g is not None and g_size[g] == n and g not in place.values():
            place[a] = g
        else:
            rest.append(a)
    window = None
    if len(rest) == 2:
        fits = []
        for wa, ea in (rest, rest[::-1]):
            g = g_stride.index(stride[ea]) if stride[ea] in g_stride else None
            if g is None or g in place.values() or stride[wa] % stride[ea]:
                continue
            k, step = size[ea], stride[wa] // stride[ea]
            if 1 <= k <= g_size[g] and step >= 1 and size[wa] == (g_size[g] - k) // step + 1:
                fits.append((wa, ea, g, k, step))
        # both readings fit where the two axes have the same stride: the fixed size is the length
        window = next((f for f in reversed(fits) if fixed[f[1]]), fits[-1] if fits else None)
    if (rest and window is None) or len(place) + (window is not None) != len(groups):
        return None
    if value.is_contiguous() and (window is None or window[4] >= window[3]):
        return None  # a permute or a reshape of a contiguous tensor: the flat routes below say which
    y = x
    if order != list(range(len(shape))):
        y = tracer.create_proxy("call_method", "permute", (y, tuple(order)), {})
    for first, last in reversed(groups):  # the inner groups first: the outer ones keep their positions
        if last > first:
            y = tracer.create_proxy("call_method", "flatten", (y, first, last), {})
    axis_of = dict(place)
    how = "the tensor's axes in memory order"
    if window is not None:
        wa, ea, g, k, step = window
        y = tracer.create_proxy("call_method", "unfold", (y, g, k, step), {})
        axis_of.update({wa: g, ea: len(groups)})
        how = f"windows of {k} every {step} items along an axis in memory order (unfold)"
    perm = tuple(axis_of[a] for a in range(len(size)))
    if perm != tuple(range(len(size))):
        y = tracer.create_proxy("call_method", "permute", (y, perm), {})
    return y, how, (window[1] if window is not None else None)


def _without_unit_axes(tracer, x, value: torch.Tensor, size: list, stride: list, offset, fixed: list):
    """``as_strided`` with axes of size 1 in the tensor or in the view (a single head, a width of
    1: Longformer's padding mask read through the chunking of its queries), as the same call on the
    tensor without them, the view's unit axes put back after; or None. An axis of size 1 reads one
    position whatever its stride, so the call is the same; the other axes keep their strides
    (squeeze is a view), and ``_memory_windows`` then reads them as ops on the axes, valid at every
    size, where the constant positions would hold at the example sizes only."""
    if 1 not in value.shape and 1 not in size:
        return None
    keep = [a for a, n in enumerate(size) if n != 1]
    if not keep or value.numel() <= 1:
        return None
    y, sub = x, value
    for a in reversed(range(value.dim())):
        if value.shape[a] == 1:
            y = tracer.create_proxy("call_method", "squeeze", (y, a), {})
            sub = sub.squeeze(a)
    found = _memory_windows(tracer, y, sub, [size[a] for a in keep], [stride[a] for a in keep], offset,
                            [fixed[a] for a in keep])
    if found is None:
        return None
    out, how, length_axis = found
    for a, n in enumerate(size):
        if n == 1:
            out = tracer.create_proxy("call_method", "unsqueeze", (out, a), {})
    return out, how + ", its axes of size 1 set aside", (keep[length_axis] if length_axis is not None else None)


def _box(tracer, flat, size: list, stride: list, rel: int, numel: int):
    """The view as ``flat[rel:rel+L]`` reshaped to nested strides, sliced and permuted, or None
    when the strides do not nest (each larger stride a multiple of the next, covering it)."""
    axes = sorted((a for a in range(len(size)) if size[a] > 1), key=lambda a: -stride[a])
    if not axes or any(stride[a] <= 0 for a in axes):
        return None
    for a, b in zip(axes, axes[1:]):
        if stride[a] % stride[b] or stride[a] < stride[b] * size[b]:
            return None
    box = [size[axes[0]]] + [stride[a] // stride[b] for a, b in zip(axes, axes[1:])] + [stride[axes[-1]]]
    length = box[0] * stride[axes[0]]
    if rel + length > numel:
        return None
    window = tracer.create_proxy("call_function", operator.getitem, (flat, slice(rel, rel + length)), {})
    shaped = tracer.create_proxy("call_method", "reshape", (window, tuple(box)), {})
    index = (slice(None),) + tuple(slice(0, size[a]) for a in axes[1:]) + (0,)
    picked = tracer.create_proxy("call_function", operator.getitem, (shaped, index), {})
    order = sorted(range(len(axes)), key=lambda j: axes[j])  # output order of the non-unit axes
    if order != list(range(len(axes))):
        picked = tracer.create_proxy("call_method", "permute", (picked, tuple(order)), {})
    return tracer.create_proxy("call_method", "reshape", (picked, tuple(size)), {})
