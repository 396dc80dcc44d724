"""Indexing: ``x[...]``, item assignment, gathers, masks, triangles, embeddings.

Item assignment reaches the emitter as ``setitem_functional(x, index, value)`` (the tracer's
in-place pass rewrites ``x[index] = value`` and ``view.copy_(v)`` to it). Slices are written
back by slicing ``x`` around the region and concatenating, which keeps symbolic bounds; a
boolean mask becomes ``select``; a tensor index along one axis, or index tensors on adjacent
axes, becomes a scatter.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import DType, SymDim, Value, flat_values, simplify
from ...ir.dims import settle_extrema
from ..context import EmitContext
from ..helpers import (axis, broadcast_operands, cast, compare, dim_value, env_text, negative_at, opaque, producer, rank,
                       result_dtype, unsqueeze_to)
from ..registry import register
from .data_windows import has_data_bound, narrow_window, output_length, window
from .shape import concat, expand_to, full_like_value, permute_axes, reshape_to, slice_axes, slice_axis, slice_length

# keys of the tracer's functional stand-ins for mutations (fx2nnef.fx_tracer; not imported here)
SETITEM = "fx2nnef.fx_tracer.tracing.tracer.setitem_functional"
COPY = "fx2nnef.fx_tracer.passes.inplace.copy_functional"
FILL = "fx2nnef.fx_tracer.passes.inplace.fill_functional"
ZERO = "fx2nnef.fx_tracer.passes.inplace.zero_functional"

# ---------------------------------------------------------------------------------------
# index normalization


def _is_mask(item) -> bool:
    return isinstance(item, Value) and item.dtype is DType.BOOL


def _consumed(item) -> int:
    """How many input axes an index item consumes."""
    if item is None or isinstance(item, bool) or item is Ellipsis:
        return 0
    return rank(item) if _is_mask(item) else 1


def _items(index, r: int) -> list:
    """The index as one item per input axis (Ellipsis expanded), plus None/True items for new axes."""
    items = list(index) if isinstance(index, tuple) else [index]
    missing = r - sum(_consumed(i) for i in items)
    if missing < 0:
        raise EmitError(f"too many indices for a tensor of rank {r}")
    at = next((k for k, i in enumerate(items) if i is Ellipsis), len(items))
    return items[:at] + [slice(None)] * missing + items[at + 1:]


def _constant_masks_as_positions(ctx: EmitContext, index):
    """``index`` with each constant boolean mask (a buffer, ``torch.tensor([True, False, ...])``)
    replaced by the integer positions of its True items, one index tensor per axis it covers:
    ``x[:, keep]`` is then ``x[:, keep.nonzero()]``, a gather of a known size, as in torch."""
    items = list(index) if isinstance(index, tuple) else [index]
    if not any(_is_mask(i) and i.is_constant for i in items):
        return index
    out = []
    for item in items:
        if not (_is_mask(item) and item.is_constant):
            out.append(item)
            continue
        data = np.asarray(item.data, dtype=bool)
        if data.ndim == 0:  # x[True] adds a unit axis; x[False] selects nothing
            out.append(bool(data))
            continue
        positions = np.nonzero(data)
        if positions[0].size == 0:
            raise EmitError("a constant boolean mask index with no True item selects nothing: empty tensors "
                            "cannot be exported")
        out.extend(ctx.const(p.astype(np.int64), DType.I64) for p in positions)
    return tuple(out)


def _position(i, n, ctx: Optional[EmitContext] = None, clamp: bool = False):
    """A non-negative index into an axis of size ``n``. An index computed from the dynamic sizes
    (``x[..., -S:]``) counts from the end where it is negative: it must be so at every size of
    the export's range or at none (tract reads a negative begin as a position before 0).
    ``clamp``: a slice bound, which torch clamps to 0 (``mems[-512:]`` of S < 512 items): where
    that happens at some sizes of the range only, the bound is ``max(n - 512, 0)``."""
    if isinstance(i, int) and i < 0:
        if isinstance(n, int) and i < -n:
            if clamp:
                return 0
            raise EmitError(f"index {i} is out of range for size {n}")
        before = negative_at(ctx, n + i) if clamp and isinstance(n, SymDim) and ctx is not None else None
        if before is not None:
            within = negative_at(ctx, -(n + i))
            if within is None:
                return 0  # before the start at every size of the range
            # clamped to 0 at some sizes of the range only
            return settle_extrema(SymDim.extremum(max, n + i, 0), ctx.ranges)
        return n + i
    if isinstance(i, SymDim) and ctx is not None:
        negative = negative_at(ctx, i)
        if negative is None:
            return i
        non_negative = negative_at(ctx, -i - 1)
        if non_negative is None:
            return n + i
        raise EmitError(f"the index {i} is negative (counts from the end) at {env_text(negative)} and not at "
                        f"{env_text(non_negative)}: no single slice holds both; compute it so that its sign "
                        "does not change with the sizes")
    return i


def _bounds(item: slice, n, ctx: EmitContext) -> tuple:
    """(begin, end, step) with non-negative bounds, clamped to ``n`` as torch clamps them: where
    both are known, else as :func:`_position` and :func:`_clamped_end` write it (``min(7,S)``)."""
    step = 1 if item.step is None else item.step
    if not isinstance(step, int) or step <= 0:
        raise EmitError(f"slice step {step!r} must be a positive integer")
    begin = 0 if item.start is None else _position(item.start, n, ctx, clamp=True)
    end = n if item.stop is None else _position(item.stop, n, ctx, clamp=True)
    if isinstance(n, int):
        begin = min(max(begin, 0), n) if isinstance(begin, int) else begin
        end = min(max(end, 0), n) if isinstance(end, int) else end
    if isinstance(begin, int) and isinstance(end, int):
        # both clamped alike to a dynamic size (``x[2:1]``, ``x[2:5]`` of S items: ``min(2,S)``), so
        # that an empty slice stays empty and no bound passes the axis at small sizes
        end = _clamped_end(ctx, max(begin, end), n)
        begin = _clamped_end(ctx, begin, n)
        return begin, simplify(end) if isinstance(end, SymDim) else end, step
    else:
        begin = _clamped_end(ctx, begin, n)  # torch clamps the begin to the size too (``x[:, 4:]`` of S < 4)
        length = simplify(end - begin)
        if isinstance(length, int):
            end = begin if length < 0 else end  # ``x[..., -1:-2]``: empty at every size, as torch reads it
        elif negative_at(ctx, length) is not None:
            # empty at some sizes of the range only (``x[:, -1:S - 3]``): torch's end, never before the begin
            end = settle_extrema(SymDim.extremum(max, end, begin), ctx.ranges)
    return begin, _clamped_end(ctx, end, n), step


def _clamped_end(ctx: EmitContext, end, n):
    """A slice end (a constant, or computed from the sizes: ``x[:, i * c:(i + 1) * c]`` of a chunk)
    of a dynamic axis of size ``n``: torch clamps it to the size, tract refuses an end past it.
    Where no size of the export's range exceeds ``end`` (``x[:, 2:100]`` of S items, the range
    ``S <= 99`` set by the fake replay's ``S < 100``), the end is ``n``; where every size reaches
    it, ``end``; on a range on both sides, ``min(end, n)``, which tract reads in a slice's bounds."""
    if not isinstance(end, (int, SymDim)) or not isinstance(n, SymDim):
        return end
    past = negative_at(ctx, end - n)  # a size where the axis is longer than the end: end kept
    if past is None:
        return n
    short = negative_at(ctx, n - end)  # a size where the axis is shorter: torch clamps
    if short is None:
        return end
    return settle_extrema(SymDim.extremum(min, end, n), ctx.ranges)


def _index_tensor(ctx: EmitContext, item, n) -> Value:
    """An integer index (tensor or list of ints) as an i64 tensor, negatives resolved when constant."""
    if isinstance(item, Value):
        if item.is_constant and isinstance(n, int):
            return ctx.const(np.where(item.data < 0, item.data + n, item.data).astype(np.int64), DType.I64)
        if item.is_constant and np.any(np.asarray(item.data) < 0):
            # counting from the end of a dynamic axis: the size added where negative
            data = np.asarray(item.data).astype(np.int64)
            shift = ctx.const((data < 0).astype(np.int64), DType.I64)
            size = dim_value(ctx, n, DType.I64)
            return ctx.op("add", ctx.const(data, DType.I64), ctx.op("mul", shift, size, out_shape=shift.shape,
                                                                    out_dtype=DType.I64),
                          out_shape=shift.shape, out_dtype=DType.I64)
        return item
    data = np.asarray(item)
    if data.dtype.kind not in "iu":
        raise EmitError(f"index {item!r} must hold integers")
    return ctx.const(np.where(data < 0, data + n, data).astype(np.int64) if isinstance(n, int) else data.astype(np.int64), DType.I64)


def _as_traced(ctx: EmitContext, item: slice, n, b, e, s, want):
    """The bounds ``(b, e)`` of ``item`` on an axis of size ``n``, written as the IR's shape
    ``want`` of that axis names its length: a constant bound torch clamps is ``min(7,S)``
    (``max(S-3,0)`` for a begin, or ``S-min(3,S)``) where the fake replay clamped it so or the
    probes fitted its length so, and the plain bound where
    the shapes were settled or fitted at sizes on one side only (``7``, ``S``)."""
    if want is None or not isinstance(n, SymDim) or slice_length(b, e, s) == want:
        return b, e
    begins, ends = [b], [e]
    if type(item.start) is int and item.start < 0:
        begins.append(settle_extrema(SymDim.extremum(max, n + item.start, 0), ctx.ranges))
        # the same begin, for a length fitted from probes as ``min(6,S)``: tract computes the
        # length as end - begin and cannot tell ``S - max(0,S-6)`` is ``min(6,S)`` (fuzz seed 25074)
        begins.append(settle_extrema(n - SymDim.extremum(min, n, -item.start), ctx.ranges))
    if type(item.stop) is int:
        ends.append(settle_extrema(SymDim.extremum(max, n + item.stop, 0) if item.stop < 0
                                   else SymDim.extremum(min, item.stop, n), ctx.ranges))
        ends.append(n)
    for b2 in begins:
        for e2 in ends:
            if slice_length(b2, e2, s) == want:
                return b2, e2
    return b, e


def _not_empty(ctx: EmitContext, begin, n) -> None:
    """Refuse a constant slice begin that is past a dynamic axis at some size of the export's range
    (``x[:, 17:S]`` of a chunk loop traced at S=18, at S=11): torch gives an empty tensor there,
    tract refuses the slice (a begin at the axis's end is an empty slice tract takes)."""
    if not isinstance(begin, int) or begin <= 0 or not isinstance(n, SymDim):
        return
    short = negative_at(ctx, n - begin)
    if short is not None:
        raise EmitError(f"the slice begins at {begin}, which is past the axis of size {n} at {env_text(short)}, "
                        "within the export's range: torch gives an empty tensor there, tract refuses the slice. "
                        "Keep the slice within the axis, or make that axis static")


def _sliced(ctx: EmitContext, x: Value, items: list, want: Optional[tuple] = None):
    """Apply the slice and int items of ``items`` (ints kept as unit axes); returns (x, int axes,
    tensor items). ``want``: the IR's shape of ``x[items]`` (items without tensors), whose sizes
    the slices' bounds are written to match (:func:`_as_traced`)."""
    ranges, ints, tensors, ax = [], [], [], 0
    out_ax = 0  # the axis of the result an item's axis becomes
    for item in items:
        if item is None or isinstance(item, bool):
            out_ax += item is None
            continue
        n = x.shape[ax]
        if isinstance(item, slice):
            b, e, s = _bounds(item, n, ctx)
            if want is not None and out_ax < len(want):
                b, e = _as_traced(ctx, item, n, b, e, s, want[out_ax])
            _not_empty(ctx, b, n)
            out_ax += 1
            if not (b == 0 and e == n and s == 1):
                ranges.append((ax, b, e, s))
        elif isinstance(item, (int, SymDim)):
            i = _position(item, n, ctx)
            ranges.append((ax, i, i + 1, 1))
            ints.append(ax)
        elif isinstance(item, (Value, list)):
            tensors.append((ax, item))
        else:
            raise EmitError(f"index item {item!r} is not supported")
        ax += 1
    return slice_axes(ctx, x, ranges), ints, tensors


# ---------------------------------------------------------------------------------------
# reading


@register("operator.getitem")
def getitem(ctx: EmitContext, input: Value, index):
    """getitem(Tensor self, Index index) -> Tensor"""
    items = _items(_constant_masks_as_positions(ctx, index), rank(input))
    if any(i is False for i in items):
        raise EmitError("x[False] selects nothing: empty tensors cannot be exported")
    if any(_is_mask(i) for i in items):
        return _by_data_mask(ctx, input, items)
    if any(isinstance(i, slice) and has_data_bound(i.start, i.stop) for i in items):
        return _by_data_bounds(ctx, input, items)
    plain = not any(isinstance(i, (Value, list)) for i in items)
    node = ctx.node
    want = node.outputs[0].shape if plain and node is not None and node.kind == "operator.getitem" \
        and len(node.outputs) == 1 and node.args and node.args[0] is input else None
    x, ints, tensors = _sliced(ctx, input, items, want)
    if len(tensors) > 1:
        if ints:
            raise EmitError("int and several tensor indices together in x[...] are not supported")
        return _new_axes(ctx, _gather_nd(ctx, x, tensors), items)
    if tensors:
        (ax, item), = tensors
        idx = _index_tensor(ctx, item, x.shape[ax])
        x = gather(ctx, x, idx, ax)
        ints = [a + rank(idx) - 1 if a > ax else a for a in ints]
    if ints:
        shape = tuple(d for a, d in enumerate(x.shape) if a not in ints)
        x = ctx.op("squeeze", x, axes=ints, out_shape=shape, out_dtype=x.dtype)
    return _new_axes(ctx, x, items)


def _by_data_bounds(ctx: EmitContext, input: Value, items: list) -> Value:
    """``x[..., a:b, ...]`` with a bound read from data (``x[:lengths.max()]``): the other items
    first, then that window (see ``data_windows``)."""
    at = [k for k, i in enumerate(items) if isinstance(i, slice) and has_data_bound(i.start, i.stop)]
    if len(at) > 1 or any(isinstance(i, (Value, list)) for i in items) or items[at[0]].step not in (None, 1):
        raise EmitError("x[...] with a slice bound read from data is exported with one such slice of step 1 and "
                        "plain slices or ints beside it; index the result in a second step")
    k = at[0]
    rest = getitem(ctx, input, tuple(slice(None) if j == k else i for j, i in enumerate(items)))
    out_ax = sum(1 for i in items[:k] if i is None or isinstance(i, slice))
    window_item = items[k]
    return window(ctx, rest, out_ax, window_item.start, window_item.stop, output_length(ctx, out_ax))


def _by_data_mask(ctx: EmitContext, input: Value, items: list) -> Value:
    """``x[..., mask, ...]`` with a mask computed from the data: the mask's axes flattened into one,
    the positions of its true items listed by tract (a count it names at run time), then gathered."""
    masks = [k for k, i in enumerate(items) if _is_mask(i)]
    others = [i for i in items if not _is_mask(i)]
    if len(masks) > 1 or any(not (isinstance(i, slice) and i == slice(None)) for i in others):
        raise EmitError("x[mask] with a mask computed from the data is exported alone only (x[mask], x[:, mask]); "
                        "index the result in a second step")
    if not ctx.profile.data_sized_counts:
        raise EmitError("a boolean mask index computed from the data gives as many items as the mask has True "
                        "items, which this target cannot carry; use torch.where or masked_fill instead")
    at = masks[0]
    mask = items[at]
    covered = input.shape[at:at + rank(mask)]
    x = reshape_to(ctx, input, list(input.shape[:at]) + [simplify(_product(covered))] +
                   list(input.shape[at + rank(mask):]))
    return _selected(ctx, x, reshape_to(ctx, mask, [-1]), at)


def _product(dims) -> object:
    out = 1
    for d in dims:
        out = out * d
    return out


def _selected(ctx: EmitContext, x: Value, mask: Value, ax: int) -> Value:
    """The items of ``x`` along ``ax`` where the flat ``mask`` is true: ``tract_onnx_non_zero`` names
    their count with the symbol that the traced shapes gave this op's output there."""
    if not ctx.profile.data_sized_counts:
        raise EmitError("masked_select with a mask computed from the data gives as many items as the mask has "
                        "True items, which this target cannot carry; keep the shape with torch.where(mask, x, 0) "
                        "/ masked_fill, or reduce with (x * mask).sum() and mask.sum()")
    rows = _true_coordinates(ctx, mask, _count_at(ctx, ax))
    rows = ctx.op("squeeze", rows, axes=[0], out_shape=rows.shape[1:], out_dtype=DType.I64)
    return gather(ctx, x, rows, ax)


def _count_at(ctx: EmitContext, ax: int) -> SymDim:
    """The symbol the traced shapes gave the op's (first) output along ``ax``: the count of true items."""
    node = ctx.node
    want = node.outputs[0].shape if node is not None and node.outputs and node.outputs[0].shape else None
    count = want[ax] if want is not None and len(want) > ax else None
    if not (isinstance(count, SymDim) and len(count.symbols) == 1 and count == SymDim.symbol(next(iter(count.symbols)))):
        raise EmitError(f"the number of items selected by the mask has no symbol of its own here ({count!r}); "
                        "keep the shape with torch.where(mask, x, 0) / masked_fill")
    return count


def _true_coordinates(ctx: EmitContext, cond: Value, count: SymDim) -> Value:
    """``[rank, count]``: the coordinates of the true items of ``cond``, their number named ``count``
    (``tract_onnx_non_zero``); the count's value is noted for the sizes that read it."""
    name = next(iter(count.symbols))
    if not cond.dtype.is_bool:  # torch.nonzero(x) of numbers: the items that are not 0
        cond = compare(ctx, "ne", cond, 0)
    rows = ctx.op("tract_onnx_non_zero", cond, count_symbol=name, out_shape=(rank(cond), count), out_dtype=DType.I64)
    if name not in ctx.count_values:  # its value from the mask: tract folds a shape_of of the coordinates
        # into the symbol, whose value it does not know at run time
        ones = ctx.op("tract_core_cast", reshape_to(ctx, cond, [-1]), to="i64", out_dtype=DType.I64)
        ctx.count_values[name] = ctx.op("sum_reduce", ones, axes=[0], out_dtype=DType.I64, out_shape=(1,))
    return rows


DATA_NONZERO = "fx2nnef.fx_tracer.tracing.padded.data_nonzero"  # the true coordinates (not imported here)


@register(DATA_NONZERO)
def data_nonzero(ctx: EmitContext, cond: Value, as_tuple: bool = False):
    """The coordinates of the true items of ``cond``: ``[count, rank]``, or ``rank`` vectors of ``count``."""
    if not rank(cond):
        ctx.fail("nonzero of a 0-d tensor is not supported")
    if not ctx.profile.data_sized_counts:
        ctx.fail("nonzero of a tensor computed from the data gives as many items as the data has, which this "
                 "target cannot carry; use a mask (torch.where(cond, x, y)) or a fixed-size topk")
    count = _count_at(ctx, 0)
    rows = _true_coordinates(ctx, cond, count)
    if as_tuple:
        return tuple(ctx.op("squeeze", slice_axis(ctx, rows, 0, a, a + 1), axes=[0], out_shape=(count,),
                            out_dtype=DType.I64) for a in range(rank(cond)))
    return ctx.op("transpose", rows, axes=[1, 0], out_shape=(count, rank(cond)), out_dtype=DType.I64)


def _gather_nd(ctx: EmitContext, x: Value, tensors: list) -> Value:
    """``x[..., i0, i1, ...]`` with several tensor indices: their broadcast shape replaces the
    indexed axes (in place when they are adjacent, in front otherwise, as torch does)."""
    axes_ = [ax for ax, _ in tensors]
    idx = [_index_tensor(ctx, item, x.shape[ax]) for ax, item in tensors]
    r = max(rank(i) for i in idx)
    idx = [unsqueeze_to(ctx, cast(ctx, i, DType.I64), r) for i in idx]
    bshape = tuple(_broadcast_dim([i.shape[d] for i in idx]) for d in range(r))
    idx = [expand_to(ctx, i, bshape) for i in idx]
    idx = [ctx.op("unsqueeze", i, axes=[r], out_shape=bshape + (1,), out_dtype=DType.I64) for i in idx]
    stacked = ctx.op("concat", idx, axis=r, out_shape=bshape + (len(idx),), out_dtype=DType.I64)
    others = [a for a in range(rank(x)) if a not in axes_]
    front = permute_axes(ctx, x, axes_ + others)
    rest = tuple(x.shape[a] for a in others)
    out = ctx.call("nnef.gather_nd", front, stacked, bshape + rest)
    first = axes_[0]
    if axes_ != list(range(first, first + len(axes_))) or first == 0:
        return out
    nb = len(bshape)
    perm = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, nb + len(rest)))
    return permute_axes(ctx, out, perm)


def gather(ctx: EmitContext, x: Value, idx: Value, ax: int) -> Value:
    """``x`` indexed along ``ax`` by every entry of ``idx`` (the index's axes replace ``ax``)."""
    shape = x.shape[:ax] + tuple(idx.shape) + x.shape[ax + 1:]
    return ctx.call("nnef.gather", x, idx, ax, shape)


def _new_axes(ctx: EmitContext, x: Value, items: list) -> Value:
    """Unsqueeze the output axes that ``None``/``True`` items create (several adjacent tensor
    indices give their broadcast axes once)."""
    at = [k for k, item in enumerate(items) if isinstance(item, (Value, list))]
    ranks = [rank(items[k]) if isinstance(items[k], Value) else np.ndim(items[k]) for k in at]
    if len(at) > 1 and at != list(range(at[0], at[-1] + 1)) and any(i is None or i is True for i in items):
        raise EmitError("x[...] with tensor indices apart from each other and new axes (None) is not supported")
    new, pos = [], 0
    for k, item in enumerate(items):
        if item is None or item is True:
            new.append(pos)
            pos += 1
        elif isinstance(item, slice):
            pos += 1
        elif k in at and (len(at) == 1 or k == at[0]):
            pos += max(ranks) if len(at) > 1 else ranks[0]
    if not new:
        return x
    shape = list(x.shape)
    for p in new:
        shape.insert(p, 1)
    return ctx.op("unsqueeze", x, axes=new, out_shape=tuple(shape), out_dtype=x.dtype)


# ---------------------------------------------------------------------------------------
# writing


def _value_operand(ctx: EmitContext, value, dtype: DType) -> Value:
    """A fill value as a ``dtype`` tensor operand of ``select``.

    A number becomes a one-element .dat: tract's select does not adapt float literals to f16,
    and literals cannot hold infinities.
    """
    if isinstance(value, Value):
        return cast(ctx, value, dtype)
    return ctx.const(np.array(value, dtype=dtype.numpy_name), dtype)


@register(SETITEM)
def setitem(ctx: EmitContext, x: Value, index, value):
    """setitem_functional(Tensor x, Index index, Tensor|Scalar value) -> Tensor"""
    return _set_items(ctx, x, _items(index, rank(x)), value)


def _set_items(ctx: EmitContext, x: Value, items: list, value) -> Value:
    """``x[items] = value``, one item per axis of ``x`` (Ellipsis expanded) plus None for new axes.
    Forms without a direct lowering are written as torch reads them, through views: an int among
    tensor indices or new axes selects first (``x[0, :, i]`` is ``x[0][:, i]``), a new axis is an
    unsqueeze (``x[:, None, i]`` is ``x.unsqueeze(1)[:, :, i]``), a slice among tensor indices is
    the region they index (``x[i, 1:3, j]`` is ``x[:, 1:3][i, :, j]``); each writes its part back."""
    if any(isinstance(i, bool) for i in items):
        raise EmitError("x[True] = ... / x[False] = ... is not supported in item assignment")
    if not any(_is_mask(i) for i in items):
        general = _set_through_views(ctx, x, items, value)
        if general is not None:
            return general
    masks = [k for k, i in enumerate(items) if _is_mask(i)]
    if masks:
        return _set_mask(ctx, x, items, masks[0], value)
    tensors = [k for k, i in enumerate(items) if isinstance(i, (Value, list))]
    if tensors:
        return _set_tensor_index(ctx, x, items, tensors, value)
    return _set_region(ctx, x, items, value)


def _set_through_views(ctx: EmitContext, x: Value, items: list, value) -> Optional[Value]:
    """The view rewrites of :func:`_set_items`, or None where the items need none."""
    tensors = [k for k, i in enumerate(items) if isinstance(i, (Value, list))]
    news = [k for k, i in enumerate(items) if i is None]
    if not tensors and not news:
        return None
    axes = [k for k, i in enumerate(items) if i is not None]  # the item of each axis of x
    ints = [k for k in axes if not isinstance(items[k], (slice, Value, list))]
    if ints:  # select first: write into the row, then the row back
        k = ints[0]
        ax = axes.index(k)
        row_items = [slice(None)] * rank(x)
        row_items[ax] = items[k]
        row, _, _ = _sliced(ctx, x, row_items)
        row = ctx.op("squeeze", row, axes=[ax], out_shape=row.shape[:ax] + row.shape[ax + 1:], out_dtype=row.dtype)
        new_row = _set_items(ctx, row, items[:k] + items[k + 1:], value)
        return _set_region(ctx, x, row_items, new_row)
    if news:  # new axes: write into x with unit axes there, then drop them
        shape = list(x.shape)
        for k in news:
            shape.insert(k, 1)
        wide = ctx.op("unsqueeze", x, axes=news, out_shape=tuple(shape), out_dtype=x.dtype)
        new = _set_items(ctx, wide, [slice(None) if i is None else i for i in items], value)
        return ctx.op("squeeze", new, axes=news, out_shape=x.shape, out_dtype=x.dtype)
    whole = slice(None)
    if any(isinstance(i, slice) and i != whole for i in items):  # the region the slices keep
        outer = [i if isinstance(i, slice) else whole for i in items]
        region, _, _ = _sliced(ctx, x, outer)
        new_region = _set_items(ctx, region, [whole if isinstance(i, slice) else i for i in items], value)
        return _set_region(ctx, x, outer, new_region)
    if tensors != list(range(tensors[0], tensors[0] + len(tensors))):
        # separated tensor indices: torch puts the indexed axes first in the written region, which
        # is the adjacent form with those axes moved in front of x
        others = [d for d in range(rank(x)) if d not in tensors]
        front = permute_axes(ctx, x, tensors + others)
        new = _set_adjacent_indices(ctx, front, [items[t] for t in tensors] + [whole] * len(others),
                                    list(range(len(tensors))), value)
        back = [0] * rank(x)
        for pos, d in enumerate(tensors + others):
            back[d] = pos
        return permute_axes(ctx, new, back)
    return None


def _set_region(ctx: EmitContext, x: Value, items: list, value) -> Value:
    """``x[slices and ints] = value``: slices of ``x`` around the region, concatenated; an
    axis sliced with a step is written back by a scatter at ``begin, begin + step, ...``."""
    ranges, region = [], list(x.shape)
    named = _value_lengths(items, value)
    for ax, item in enumerate(items):
        n = x.shape[ax]
        b, e, s = _bounds(item, n, ctx) if isinstance(item, slice) else (_position(item, n, ctx), _position(item, n, ctx) + 1, 1)
        if ax in named:  # the region's length as the value names it (``min(6,S)`` for ``x[:, -6:]``)
            b, e = _as_traced(ctx, item, n, b, e, s, named[ax])
        if not (b == 0 and e == n and s == 1):
            ranges.append((ax, b, e, s))
        region[ax] = slice_length(b, e, s)
    if any(isinstance(d, int) and d <= 0 for d in region):
        return x  # an empty region (``x[..., -1:-2]``, whatever the size): torch writes nothing
    v = _region_value(ctx, x, items, value, region)
    return _write(ctx, x, ranges, v)


def _value_lengths(items: list, value) -> dict:
    """axis -> the length that ``value`` (a tensor written to ``x[items]``) gives a sliced axis of
    the region, where it has one of its own there (not 1: broadcast), aligned from the last axis as
    torch broadcasts it."""
    if not isinstance(value, Value) or value.shape is None:
        return {}
    kept = [ax for ax, item in enumerate(items) if isinstance(item, slice)]
    dims = value.shape[max(len(value.shape) - len(kept), 0):]
    return {ax: d for ax, d in zip(kept[len(kept) - len(dims):], dims) if isinstance(d, SymDim)}


def _region_value(ctx: EmitContext, x: Value, items: list, value, region: list) -> Value:
    """``value`` broadcast to the region, with the axes that int items remove put back."""
    if not isinstance(value, Value):
        return full_like_value(ctx, value, x.dtype, region)
    kept = [ax for ax, item in enumerate(items) if isinstance(item, slice)]
    v = unsqueeze_to(ctx, cast(ctx, value, x.dtype), len(kept))
    if rank(v) > len(kept):  # torch drops leading unit axes of the value
        extra = list(range(rank(v) - len(kept)))
        v = ctx.op("squeeze", v, axes=extra, out_shape=v.shape[len(extra):], out_dtype=v.dtype)
    if len(kept) < len(items):
        ints = [ax for ax in range(len(items)) if ax not in kept]
        shape = [1] * len(items)
        for ax, d in zip(kept, v.shape):
            shape[ax] = d
        v = ctx.op("unsqueeze", v, axes=ints, out_shape=tuple(shape), out_dtype=v.dtype)
    return expand_to(ctx, v, region)


def _write(ctx: EmitContext, x: Value, ranges: list, v: Value) -> Value:
    """``x`` with ``v`` written over the box ``ranges`` [(axis, begin, end, step)], one axis at a time."""
    if not ranges:
        return v
    (ax, b, e, s), rest = ranges[0], ranges[1:]
    n = x.shape[ax]
    inner = _write(ctx, slice_axis(ctx, x, ax, b, e, s), rest, v)
    if s != 1:
        count = inner.shape[ax]
        if isinstance(b, int) and isinstance(e, int):
            idx = ctx.const(np.arange(b, e, s, dtype=np.int64), DType.I64)
        else:
            idx = ctx.call("nnef.range", b, simplify(b + count * s), s, DType.I64, (count,))
        return ctx.call("nnef.scatter_axis", x, idx, inner, ax)
    before = slice_axis(ctx, x, ax, 0, b) if not b == 0 else None
    after = slice_axis(ctx, x, ax, e, n) if not e == n else None
    return concat(ctx, [before, inner, after], ax)


def _set_mask(ctx: EmitContext, x: Value, items: list, at: int, value) -> Value:
    """``x[..., mask] = value`` for a value that is one number, or one row that every masked item
    takes (a value broadcasting to the axes after the mask's: T5Gemma2's ``emb[ids == eoi] = vector``):
    ``select``."""
    if any(not (isinstance(i, slice) and i == slice(None)) for k, i in enumerate(items) if k != at):
        raise EmitError("a boolean mask index combined with other indices is not supported in item assignment")
    if isinstance(value, Value) and not (value.shape is not None and all(isinstance(d, int) and d == 1 for d in value.shape)):
        row = _masked_row(ctx, x, items[at], at, value)
        if row is None:
            raise EmitError("x[mask] = tensor needs a value with one element, or one row broadcasting to the axes "
                            "after the mask's: a value with one item per masked item depends on the data")
        return row
    mask = items[at]
    if at:
        mask = ctx.op("unsqueeze", mask, axes=list(range(at)), out_shape=(1,) * at + tuple(mask.shape))
    v = _value_operand(ctx, value, x.dtype)
    if isinstance(v, Value) and rank(v):
        v = ctx.op("squeeze", v, axes=list(range(rank(v))), out_shape=(), out_dtype=v.dtype)
    return ctx.op("select", mask, v, x, out_dtype=x.dtype, out_shape=x.shape)


def _masked_row(ctx: EmitContext, x: Value, mask: Value, at: int, value: Value) -> Optional[Value]:
    """``x[..., mask] = row``: torch broadcasts ``row`` to ``[count] + trailing`` (``trailing`` the axes
    of ``x`` after the mask's), the same row for every masked item when ``row`` broadcasts to
    ``trailing`` alone, which is ``select(mask, row, x)`` with the ranks made equal (NNEF pads the
    lower rank with trailing 1s); None for a value with one row per masked item."""
    trailing = tuple(x.shape[at + rank(mask):])
    vshape = tuple(value.shape or ())
    while len(vshape) > len(trailing) and vshape[0] == 1:
        vshape = vshape[1:]
    if len(vshape) > len(trailing) or any(not (d == 1 or d == t) for d, t in zip(vshape[::-1], trailing[::-1])):
        return None
    v = cast(ctx, value, x.dtype)
    if rank(v) > len(vshape):
        v = ctx.op("squeeze", v, axes=list(range(rank(v) - len(vshape))), out_shape=vshape, out_dtype=v.dtype)
    lead = at + rank(mask) + len(trailing) - len(vshape)
    if lead:
        v = ctx.op("unsqueeze", v, axes=list(range(lead)), out_shape=(1,) * lead + vshape, out_dtype=v.dtype)
    m = mask
    if at:
        m = ctx.op("unsqueeze", m, axes=list(range(at)), out_shape=(1,) * at + tuple(m.shape), out_dtype=m.dtype)
    if trailing:
        m = ctx.op("unsqueeze", m, axes=list(range(rank(m), rank(m) + len(trailing))),
                   out_shape=tuple(m.shape) + (1,) * len(trailing), out_dtype=m.dtype)
    return ctx.op("select", m, v, x, out_dtype=x.dtype, out_shape=x.shape)


def _set_tensor_index(ctx: EmitContext, x: Value, items: list, tensors: list, value) -> Value:
    """``x[:, ..., idx, :] = value`` with a 1-D integer index along one axis: a scatter; with an index of
    another rank, or several index tensors on adjacent axes (``x[arange(b)[:, None], top] = v``, Informer's sparse attention
    writing its rows back), a scatter at the broadcast indices, the indexed axes moved in front."""
    ax = tensors[0]
    if any(not (isinstance(i, slice) and i == slice(None)) for k, i in enumerate(items) if k not in tensors):
        raise EmitError("item assignment with a tensor index is supported with the other axes taken whole")
    if len(tensors) > 1:
        if tensors != list(range(ax, ax + len(tensors))):
            raise EmitError("item assignment with several tensor indices is supported on adjacent axes")
        return _set_adjacent_indices(ctx, x, items, tensors, value)
    idx = _index_tensor(ctx, items[ax], x.shape[ax])
    if rank(idx) != 1:  # the index's shape replaces the axis, as with several indices
        return _set_adjacent_indices(ctx, x, items, tensors, value)
    region = x.shape[:ax] + tuple(idx.shape) + x.shape[ax + 1:]
    v = full_like_value(ctx, value, x.dtype, region)
    return ctx.call("nnef.scatter_axis", x, idx, v, ax)


def _set_adjacent_indices(ctx: EmitContext, x: Value, items: list, tensors: list, value) -> Value:
    """``x[:, i0, i1, :] = value``: torch writes ``value`` broadcast to ``x.shape[:a] + I + rest`` (``I`` the
    broadcast shape of the indices); ``index_put`` on the indexed axes moved in front takes it as
    ``I + x.shape[:a] + rest``."""
    a, k = tensors[0], len(tensors)
    idx = [_index_tensor(ctx, items[t], x.shape[t]) for t in tensors]
    r = max(rank(i) for i in idx)
    idx = [unsqueeze_to(ctx, cast(ctx, i, DType.I64), r) for i in idx]
    bshape = tuple(_broadcast_dim([i.shape[d] for i in idx]) for d in range(r))
    others = [d for d in range(rank(x)) if d not in tensors]
    region = tuple(x.shape[:a]) + bshape + tuple(x.shape[a + k:])
    v = full_like_value(ctx, value, x.dtype, region)
    front = permute_axes(ctx, x, tensors + others) if a else x
    if a:  # the value's index axes in front too
        v = permute_axes(ctx, v, list(range(a, a + r)) + list(range(a)) + list(range(a + r, len(region))))
    out = ctx.call("torch.index_put", front, idx, v, False)
    if not a:
        return out
    back = [0] * rank(x)
    for pos, d in enumerate(tensors + others):
        back[d] = pos
    return permute_axes(ctx, out, back)


@register(COPY)
def copy_(ctx: EmitContext, dst: Value, src):
    """copy_functional(Tensor dst, Tensor src) -> Tensor"""
    return full_like_value(ctx, src, dst.dtype, dst.shape)


@register(FILL)
def fill_(ctx: EmitContext, dst: Value, value):
    """fill_functional(Tensor dst, Scalar|Tensor value) -> Tensor"""
    return full_like_value(ctx, value, dst.dtype, dst.shape)


@register(ZERO)
def zero_(ctx: EmitContext, dst: Value):
    """zero_functional(Tensor dst) -> Tensor"""
    return full_like_value(ctx, 0, dst.dtype, dst.shape)


# ---------------------------------------------------------------------------------------
# selections


@register(torch.narrow, "Tensor.narrow", torch.narrow_copy, "Tensor.narrow_copy")
def narrow(ctx: EmitContext, input: Value, dim: int, start, length):
    """narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    ax = axis(dim, rank(input))
    if isinstance(start, Value) or isinstance(length, Value):
        return narrow_window(ctx, input, dim, start, length)
    begin = _position(start, input.shape[ax], ctx)
    return slice_axis(ctx, input, ax, begin, begin + length)


@register(torch.select, "Tensor.select")
def select(ctx: EmitContext, input: Value, dim: int, index):
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    ax = axis(dim, rank(input))
    return getitem(ctx, input, tuple([slice(None)] * ax + [index]))


@register(torch.index_select, "Tensor.index_select")
def index_select(ctx: EmitContext, input: Value, dim: int, index: Value):
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    ax = axis(dim, rank(input))
    if rank(index) == 0:
        index = ctx.op("unsqueeze", index, axes=[0], out_shape=(1,))
    return gather(ctx, input, _index_tensor(ctx, index, input.shape[ax]), ax)


@register(F.embedding)
def embedding(ctx: EmitContext, input: Value, weight: Value, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """embedding(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None, ...) -> Tensor"""
    rows = gather(ctx, weight, input, 0)
    if max_norm is None:
        return rows
    # torch scales each row it reads whose norm exceeds max_norm by max_norm / (norm + 1e-7), in the
    # weights themselves; a scaled row stays below max_norm, so scaling the rows read gives the
    # same output at every call, without changing the weights
    from ..helpers import ew
    from .reduce import vector_norm

    norms = vector_norm(ctx, rows, float(norm_type), [rank(rows) - 1], True)
    scale = ew(ctx, "div", float(max_norm), ew(ctx, "add", norms, 1e-7))
    scale = _select(ctx, compare(ctx, "gt", norms, float(max_norm)), scale, 1.0)
    return ew(ctx, "mul", rows, scale)


# ---------------------------------------------------------------------------------------
# masks and conditions


def _select(ctx: EmitContext, condition: Value, a, b) -> Value:
    dtype = result_dtype(a, b)
    a, b = _value_operand(ctx, a, dtype), _value_operand(ctx, b, dtype)
    tensors = [t for t in (condition, a, b) if isinstance(t, Value)]
    r = max(rank(t) for t in tensors)
    condition, a, b = [unsqueeze_to(ctx, t, r) if isinstance(t, Value) else t for t in (condition, a, b)]
    shape = tuple(_broadcast_dim([t.shape[i] for t in (condition, a, b) if isinstance(t, Value)]) for i in range(r))
    # NOTE: tract 0.23.9 takes the first operand whatever its value when the condition is one
    # value computed from the sizes alone (``S // 2 > 2``: a decision on sizes exported both
    # ways, torch.cond on sizes), broadcast by select or tiled; hidden from its folding, it is right
    uniform = all(isinstance(d, int) and d == 1 for d in condition.shape)
    if any(isinstance(d, SymDim) for d in shape):
        # NOTE: tract 0.23.9 can fail at run time ("Undetermined symbol") when select broadcasts
        # symbolic dims itself; operands already at the result shape avoid that.
        condition, a, b = [expand_to(ctx, t, shape) if isinstance(t, Value) and tuple(t.shape) != shape else t
                           for t in (condition, a, b)]
    if uniform and ctx.profile.opaque_size_conditions and not condition.is_constant and _from_sizes_only(ctx, condition):
        condition = opaque(ctx, condition)
    return ctx.op("select", condition, a, b, out_dtype=dtype, out_shape=shape)


def _from_sizes_only(ctx: EmitContext, v: Value, depth: int = 0) -> bool:
    """Whether ``v`` is computed from constants and the symbols alone (no input data): what tract
    can fold at load time, as it cannot a value of the inputs or of a loop body's."""
    if v.is_constant:
        return True
    st = producer(ctx, v) if depth < 16 else None
    if st is None or st.op == "tract_core_external":
        return False
    return all(_from_sizes_only(ctx, a, depth + 1) for a in flat_values(st.args))


def _broadcast_dim(dims: list):
    big = [d for d in dims if not (isinstance(d, int) and d == 1)]
    return big[0] if big else 1


@register(torch.where)
def where(ctx: EmitContext, condition: Value, input=None, other=None):
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    if input is None or other is None:
        raise EmitError("torch.where(condition) returns data-dependent indices; use the 3-argument form")
    return _select(ctx, cast(ctx, condition, DType.BOOL), input, other)


@register("Tensor.where")
def where_method(ctx: EmitContext, input: Value, condition: Value, other):
    """where.self(Tensor self, Tensor condition, Tensor other) -> Tensor"""
    return where(ctx, condition, input, other)


@register(torch.masked_fill, "Tensor.masked_fill")
def masked_fill(ctx: EmitContext, input: Value, mask: Value, value):
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"""
    mask, x = broadcast_operands(ctx, mask, input)
    v = _value_operand(ctx, value, input.dtype)
    return ctx.op("select", mask, v, x, out_dtype=input.dtype, out_shape=_broadcast_shape(mask, x))


def _broadcast_shape(a: Value, b: Value):
    if a.shape is None or b.shape is None:
        return None
    return tuple(_broadcast_dim([p, q]) for p, q in zip(a.shape, b.shape))


def _triangle(ctx: EmitContext, x: Value, diagonal: int, upper: bool) -> Value:
    """Keep the upper/lower triangle of the last two axes: a constant mask (static sizes)."""
    rows, cols = x.shape[-2:]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise EmitError("triu/tril over dynamic sizes needs tract (tract_core_trilu)")
    keep = np.triu(np.ones((rows, cols), bool), diagonal) if upper else np.tril(np.ones((rows, cols), bool), diagonal)
    mask = unsqueeze_to(ctx, ctx.const(keep, DType.BOOL), rank(x))
    return ctx.op("select", mask, x, _value_operand(ctx, 0, x.dtype), out_dtype=x.dtype, out_shape=x.shape)


@register(torch.triu, "Tensor.triu")
def triu(ctx: EmitContext, input: Value, diagonal: int = 0):
    """triu(Tensor self, int diagonal=0) -> Tensor"""
    return _triangle(ctx, input, diagonal, True)


@register(torch.tril, "Tensor.tril")
def tril(ctx: EmitContext, input: Value, diagonal: int = 0):
    """tril(Tensor self, int diagonal=0) -> Tensor"""
    return _triangle(ctx, input, diagonal, False)


@register(F.one_hot)
def one_hot(ctx: EmitContext, input: Value, num_classes: int = -1):
    """one_hot(Tensor self, int num_classes=-1) -> Tensor"""
    if not isinstance(num_classes, SymDim) and num_classes < 0:
        raise EmitError("one_hot without num_classes takes its size from the data; pass num_classes")
    r = rank(input)
    x = ctx.op("unsqueeze", input, axes=[r], out_shape=tuple(input.shape) + (1,))
    if isinstance(num_classes, SymDim):  # a dynamic size: the classes are a range
        classes = ctx.call("nnef.range", 0, num_classes, 1, input.dtype, (num_classes,))
        classes = ctx.op("unsqueeze", classes, axes=list(range(r)), out_shape=(1,) * r + (num_classes,)) if r else classes
    else:
        classes = ctx.const(np.arange(num_classes).reshape([1] * r + [num_classes]), input.dtype)
    hit = ctx.op("eq", x, classes, out_dtype=DType.BOOL, out_shape=tuple(input.shape) + (num_classes,))
    one, zero = _value_operand(ctx, 1, DType.I64), _value_operand(ctx, 0, DType.I64)
    return ctx.op("select", hit, one, zero, out_dtype=DType.I64, out_shape=hit.shape)


PADDED_NONZERO = "fx2nnef.fx_tracer.tracing.padded.padded_nonzero"  # the tracer's stand-in for nonzero (not imported here)


@register(PADDED_NONZERO)
def padded_nonzero(ctx: EmitContext, cond: Value, as_tuple: bool = False):
    """Every coordinate of ``cond``'s shape in row-major order: ``[N, rank]``, or ``rank`` vectors of ``N``."""
    shape = tuple(cond.shape)
    if not shape:
        ctx.fail("nonzero of a 0-d tensor is not supported")
    count = 1
    for d in shape:
        count = count * d
    coords = []
    for a, d in enumerate(shape):
        along = ctx.call("nnef.range", 0, d, 1, DType.I64, (d,))
        along = ctx.op("reshape", along, shape=[-1 if b == a else 1 for b in range(len(shape))],
                       out_shape=tuple(d if b == a else 1 for b in range(len(shape))), out_dtype=DType.I64)
        coords.append(reshape_to(ctx, expand_to(ctx, along, shape), (count,)))
    if as_tuple:
        return tuple(coords)
    columns = [ctx.op("unsqueeze", c, axes=[1], out_shape=(count, 1), out_dtype=DType.I64) for c in coords]
    return concat(ctx, columns, 1)


# ---------------------------------------------------------------------------------------
# diagonals


def _diagonal_length(rows, cols, offset: int):
    """Length of the diagonal ``offset`` of a ``rows x cols`` matrix: the smaller of the two sizes
    along it, a ``min(...)`` dim where which one is smaller depends on the sizes."""
    a, b = (rows, cols - offset) if offset >= 0 else (rows + offset, cols)
    a, b = simplify(a), simplify(b)
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return SymDim.extremum(min, a, b)


@register(torch.diagonal, "Tensor.diagonal")
def diagonal_(ctx: EmitContext, input: Value, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)

    The square block holding the diagonal, with ``dim1``/``dim2`` moved last, is flattened; its
    items ``0, L+1, 2(L+1), ...`` are the diagonal: L more items appended make a ``[L, L+1]``
    matrix whose first column they are (slices and reshapes only). With dynamic sizes the length is
    ``min(S, 4)`` of an ``S x 4`` matrix, as tract reads it; a diagonal that starts past a dynamic
    axis at some size of the range (offset -2 of a matrix of S rows, at S=1) is refused."""
    r = rank(input)
    d1, d2 = axis(dim1, r), axis(dim2, r)
    if d1 == d2:
        raise EmitError("diagonal dimensions cannot be identical")
    rows, cols = input.shape[d1], input.shape[d2]
    length = _diagonal_length(rows, cols, offset)
    if isinstance(length, int) and length <= 0:
        raise EmitError("this diagonal is empty: empty tensors cannot be exported")
    others = [a for a in range(r) if a not in (d1, d2)]
    x = permute_axes(ctx, input, others + [d1, d2])
    lead = [x.shape[a] for a in range(r - 2)]
    r0, c0 = max(0, -offset), max(0, offset)
    _not_empty(ctx, r0, rows)
    _not_empty(ctx, c0, cols)
    block = slice_axes(ctx, x, [(ax, b, simplify(b + length), 1) for ax, b, n in ((r - 2, r0, rows), (r - 1, c0, cols))
                                if not (b == 0 and simplify(b + length - n) == 0)])
    if isinstance(length, int) and length == 1:
        return reshape_to(ctx, block, lead + [1])
    flat = reshape_to(ctx, block, lead + [simplify(length * length)])
    padded = concat(ctx, [flat, slice_axis(ctx, flat, r - 2, 0, length)], r - 2)
    grid = reshape_to(ctx, padded, lead + [length, simplify(length + 1)])
    return reshape_to(ctx, slice_axis(ctx, grid, r - 1, 0, 1), lead + [length])


def _identity_mask(ctx: EmitContext, n) -> Value:
    """``[n, n]`` bool, True on the diagonal (a constant for a static ``n``)."""
    if isinstance(n, int):
        return ctx.const(np.eye(n, dtype=bool), DType.BOOL)
    along = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    rows = reshape_to(ctx, along, [n, 1])
    cols = reshape_to(ctx, along, [1, n])
    return ctx.call("nnef.compare", "eq", expand_to(ctx, rows, (n, n)), expand_to(ctx, cols, (n, n)))


@register(torch.diag_embed, "Tensor.diag_embed")
def diag_embed(ctx: EmitContext, input: Value, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor

    The last axis of ``input`` laid on diagonal ``offset`` of new ``(n + |offset|)``-square
    matrices (zeros elsewhere) placed on output axes ``dim1``, ``dim2``."""
    r = rank(input)
    if r == 0:
        raise EmitError("diag_embed needs at least one dimension")
    out_r = r + 1
    d1, d2 = axis(dim1, out_r), axis(dim2, out_r)
    if d1 == d2:
        raise EmitError("diag_embed dimensions cannot be identical")
    n = input.shape[-1]
    lead = list(input.shape[:-1])
    square = tuple(lead) + (n, n)
    items = expand_to(ctx, ctx.op("unsqueeze", input, axes=[r - 1], out_shape=tuple(lead) + (1, n),
                                  out_dtype=input.dtype), square)
    mask = expand_to(ctx, unsqueeze_to(ctx, _identity_mask(ctx, n), out_r), square)
    y = ctx.op("select", mask, items, full_like_value(ctx, 0, input.dtype, square), out_dtype=input.dtype,
               out_shape=square)
    k = abs(offset)
    if k:
        m = simplify(n + k)
        cols = full_like_value(ctx, 0, input.dtype, tuple(lead) + (n, k))
        rows = full_like_value(ctx, 0, input.dtype, tuple(lead) + (k, m))
        if offset > 0:  # shifted right: zero columns in front, zero rows below
            y = concat(ctx, [concat(ctx, [cols, y], r), rows], r - 1)
        else:  # shifted down: zero rows above, zero columns after
            y = concat(ctx, [rows, concat(ctx, [y, cols], r)], r - 1)
    batch = iter(range(r - 1))
    perm = [r - 1 if p == d1 else r if p == d2 else next(batch) for p in range(out_r)]
    return permute_axes(ctx, y, perm)


@register(torch.diag, "Tensor.diag")
def diag(ctx: EmitContext, input: Value, diagonal: int = 0):
    """diag(Tensor self, int diagonal=0) -> Tensor: a 1-D input becomes a matrix, a 2-D input gives its diagonal."""
    if rank(input) == 1:
        return diag_embed(ctx, input, diagonal)
    if rank(input) == 2:
        return diagonal_(ctx, input, diagonal)
    raise EmitError(f"diag takes a 1-D or 2-D tensor, got rank {rank(input)}")


# ---------------------------------------------------------------------------------------
# index_copy, masked_scatter


@register(torch.index_copy, "Tensor.index_copy")
def index_copy(ctx: EmitContext, input: Value, dim: int, index: Value, source: Value):
    """index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor: ``x[..., index, ...] = source``
    along ``dim`` (a scatter in tract; for standard NNEF the index must be constant)."""
    ax = axis(dim, rank(input))
    if rank(index) == 0:
        index = ctx.op("unsqueeze", index, axes=[0], out_shape=(1,), out_dtype=index.dtype)
        if rank(source) == rank(input) - 1:
            source = ctx.op("unsqueeze", source, axes=[ax], out_shape=source.shape[:ax] + (1,) + source.shape[ax:],
                            out_dtype=source.dtype)
    return setitem(ctx, input, tuple([slice(None)] * ax + [index]), source)


@register(torch.masked_select, "Tensor.masked_select")
def masked_select(ctx: EmitContext, input: Value, mask: Value):
    """masked_select(Tensor self, Tensor mask) -> Tensor

    ``x[mask.expand_as(x)]``, flattened. With a constant mask (a buffer, a table) the number of
    items is known: the mask's own axes (the trailing ones, a unit axis of it repeated over a
    static size) select a known set of positions on each index of the axes it is broadcast over
    (leading unit or missing axes, which may be dynamic). A mask computed from the inputs gives a
    count known only from the data."""
    if not mask.is_constant:
        r = max(rank(input), rank(mask))
        x, m = unsqueeze_to(ctx, input, r), unsqueeze_to(ctx, mask, r)
        shape = tuple(_broadcast_dim([a, b]) for a, b in zip(x.shape, m.shape))
        x, m = expand_to(ctx, x, shape), expand_to(ctx, m, shape)
        return _selected(ctx, reshape_to(ctx, x, [-1]), reshape_to(ctx, m, [-1]), 0)
    r = max(rank(input), rank(mask))
    x = unsqueeze_to(ctx, input, r)
    data = np.asarray(mask.data, dtype=bool).reshape((1,) * (r - rank(mask)) + tuple(np.shape(mask.data)))
    shape = tuple(_broadcast_dim([a, b]) for a, b in zip(x.shape, data.shape))
    lead = 0  # the axes the mask is broadcast over, in front of its own
    while lead < r and data.shape[lead] == 1 and shape[lead] != 1:
        lead += 1
    tail = shape[lead:]
    if any(not isinstance(n, int) for n in tail):
        raise EmitError("masked_select with a constant mask broadcast over a dynamic axis behind its own axes is "
                        "not supported; move that axis in front (permute), or make it static")
    x = expand_to(ctx, x, shape)
    keep = np.broadcast_to(data[(0,) * lead], tail)
    if not keep.any():
        raise EmitError("masked_select with a constant mask with no True item selects nothing: empty tensors "
                        "cannot be exported")
    flat = reshape_to(ctx, x, list(shape[:lead]) + [int(np.prod(tail))])
    picked = getitem(ctx, flat, (slice(None),) * lead + (ctx.const(np.flatnonzero(keep), DType.I64),))
    return reshape_to(ctx, picked, [-1])
