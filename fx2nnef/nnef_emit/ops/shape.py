"""Shape and layout ops: reshape, transpose, squeeze, expand, concat, split, casts, flip, roll, repeat_interleave.

Sizes may be ints or :class:`SymDim` expressions; they are written into NNEF attributes as
they are. tract rejects ``split`` and negative slice bounds, and aborts on a slice with a
negative stride, so splits are slices with non-negative bounds and flip has a tract override.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...errors import EmitError
from ...ir import DType, SymDim, Value, product, simplify
from ...ir.dims import exact_quotient, substitute, with_fewer_divisions
from ..context import EmitContext
from ..helpers import (axes, axis, cast, dim_value, dims_list, ew, opaque, producer, rank, result_dtype, tiled_from,
                       unsqueeze_to)
from ..registry import register

# ---------------------------------------------------------------------------------------
# building blocks, also used by the indexing family


def _divide(total, known):
    """``total / known`` for dims when it is exact and expressible, else None."""
    if isinstance(total, int) and isinstance(known, int):
        return total // known if known and total % known == 0 else None
    if isinstance(known, int):
        terms = total.terms
        if known and all(c % known == 0 for c in terms.values()):
            return simplify(SymDim({m: c // known for m, c in terms.items()}))
        return None
    if len(known.terms) == 1 and not isinstance(total, int):
        (mono, coef), = known.terms.items()
        out = {}
        for m, c in total.terms.items():
            rest = list(m)
            for s in mono:
                if s not in rest:
                    return None
                rest.remove(s)
            if c % coef:
                return None
            out[tuple(rest)] = c // coef
        return simplify(SymDim(out))
    return exact_quotient(total, known)


def resolve_sizes(in_shape, sizes: list) -> tuple:
    """The shape that ``sizes`` (one of them possibly -1) describes for ``in_shape`` elements."""
    holes = [i for i, s in enumerate(sizes) if isinstance(s, int) and s == -1]
    if not holes:
        return tuple(sizes)
    if len(holes) > 1:
        raise EmitError(f"at most one size may be -1, got {sizes}")
    rest = product(s for i, s in enumerate(sizes) if i != holes[0])
    out = list(sizes)
    out[holes[0]] = _divide(product(in_shape), rest) if None not in in_shape else None
    return tuple(out)


def size_args(sizes: tuple) -> list:
    """Sizes given as varargs (``view(2, 3)``) or as one sequence (``view((2, 3))``)."""
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = sizes[0]
    return dims_list(sizes)


def reshape_to(ctx: EmitContext, x: Value, sizes: list) -> Value:
    """``x`` reshaped to ``sizes`` (ints, SymDims, at most one -1); no op when unchanged."""
    sizes = dims_list(sizes)
    if x.shape is not None and list(x.shape) == sizes:
        return x
    if not sizes and x.shape is not None:
        # to rank 0: tract builds a reshape's shape with a concat, which refuses an empty list at load
        return ctx.op("squeeze", x, axes=list(range(len(x.shape))), out_shape=(), out_dtype=x.dtype)
    out_shape = resolve_sizes(x.shape, sizes) if x.shape is not None else None
    if out_shape is not None and -1 in sizes and out_shape[sizes.index(-1)] is not None:
        rest = product(s for s in sizes if not (isinstance(s, int) and s == -1))
        if isinstance(rest, SymDim) and len(rest.terms) > 1:
            # the size tract would compute as the volume over the other sizes, given: tract divides
            # by a product of symbols, not by a sum (12*B*(L-1)**2 by (L-1)**2, L a floor division
            # of T). Elsewhere -1 stays: tract's volume holds for every size, while a shape of the
            # IR may hold only within the exported range (one chunk of a sequence of at most 16)
            sizes = list(out_shape)
    if _volumes_differ(ctx, x.shape, out_shape):
        return _reshape_by_gather(ctx, x, out_shape)
    return ctx.op("reshape", x, shape=sizes, out_shape=out_shape, out_dtype=x.dtype)


def _volumes_differ(ctx: EmitContext, in_shape, out_shape) -> bool:
    """Whether the two shapes' volumes differ as tract sees them, as polynomials with floor
    divisions taken as symbols, though equal at every size the model runs at: ``[B, S, 4]`` and
    ``[(B*S)/2, 8]``. A symbol the export steps (``H = 4*H_4``) is written so first, as tract
    reads it: ``(H)/4`` is then ``H_4``."""
    if in_shape is None or out_shape is None or None in in_shape or None in out_shape:
        return False
    stepped = {r.symbol: r.step * SymDim.symbol(f"{r.symbol}~{r.step}") + r.rest % r.step
               for r in getattr(ctx, "ranges", {}).values() if r.step > 1}
    diff = substitute(simplify(product(in_shape) - product(out_shape)), stepped)
    # only where a floor division is involved: other shapes keep the reshape (and its -1)
    return isinstance(diff, SymDim) and bool(diff.symbols - diff.input_symbols)


def _reshape_by_gather(ctx: EmitContext, x: Value, out_shape: tuple) -> Value:
    """``x`` reshaped to ``out_shape`` as a gather from its flattened items at the row-major
    positions of ``out_shape``.

    NOTE: tract 0.23.9 proves at load that a reshape keeps the volume, and cannot when a size is a
    floor division (``4*B*S`` against ``8*((B*S)/2)``: "Reshape: ... should be equal to ..."); a
    -1 there does not help (it computes ``4*B*S / 8`` as ``B*S``). A gather has no such check."""
    flat = ctx.op("reshape", x, shape=[-1], out_shape=(simplify(product(x.shape)),), out_dtype=x.dtype)
    idx = None
    for k, d in enumerate(out_shape):
        pos = ctx.call("nnef.range", 0, d, 1, DType.I64, (d,))
        if idx is None:
            idx = pos
            continue
        idx = ctx.op("unsqueeze", idx, axes=[k], out_shape=idx.shape + (1,), out_dtype=DType.I64)
        size = d if isinstance(d, int) else dim_value(ctx, d, DType.I64)
        idx = ew(ctx, "add", ew(ctx, "mul", idx, size), reshape_to(ctx, pos, [1] * k + [d]))
    if idx is None:  # rank 0
        return reshape_to(ctx, flat, [])
    return ctx.call("nnef.gather", flat, idx, 0, tuple(out_shape))


def permute_axes(ctx: EmitContext, x: Value, perm: list) -> Value:
    """``x`` with its axes in the order ``perm``; no op for the identity."""
    r = rank(x)
    perm = [axis(p, r) for p in perm]
    if sorted(perm) != list(range(r)):
        raise EmitError(f"{perm} is not a permutation of the {r} axes")
    if perm == list(range(r)):
        return x
    found = tiled_from(ctx, x)
    if found is not None:
        # the transpose of the untiled tensor, tiled afterwards: an expand stays next to the matmul
        # or conv that reads it, where converters avoid tract's mis-handling of broadcasts
        src, reps = found
        return _tile(ctx, permute_axes(ctx, src, perm), [reps[p] for p in perm])
    return ctx.op("transpose", x, axes=perm, out_shape=tuple(x.shape[p] for p in perm), out_dtype=x.dtype)


def slice_axis(ctx: EmitContext, x: Value, ax: int, begin, end, step: int = 1) -> Value:
    """``x`` restricted to ``begin:end:step`` (non-negative bounds) along axis ``ax``."""
    if begin == 0 and end == x.shape[ax] and step == 1:
        return x
    return slice_axes(ctx, x, [(ax, begin, end, step)])


def slice_axes(ctx: EmitContext, x: Value, ranges: list) -> Value:
    """One NNEF slice for ``(axis, begin, end, step)`` ranges with non-negative bounds."""
    if not ranges:
        return x
    # a step that keeps one item is no step (tract fails to pull a Downsample over an AddAxis)
    ranges = [(ax, b, b + 1, 1) if s != 1 and slice_length(b, e, s) == 1 else (ax, b, e, s) for ax, b, e, s in ranges]
    if any(r[3] != 1 for r in ranges):
        untiled = _slice_before_tile(ctx, x, ranges)
        if untiled is not None:
            return untiled
        if ctx.profile.strides_without_downsample and x.shape is not None:
            strided = [r for r in ranges if r[3] > 1 and all(isinstance(v, int) for v in (x.shape[r[0]], r[1], r[2]))
                       and slice_length(r[1], min(r[2], x.shape[r[0]]), r[3]) >= 2]
            # a dynamic axis or bound: the items are gathered (no Downsample for tract to pull either)
            gathered = [r for r in ranges if r[3] > 1
                        and not all(isinstance(v, int) for v in (x.shape[r[0]], r[1], r[2]))]
            if strided or gathered:
                x = slice_axes(ctx, x, [r for r in ranges if r not in strided and r not in gathered])
                for ax, b, e, step in strided:
                    x = _every_kth(ctx, x, ax, b, e, step)
                for ax, b, e, step in gathered:
                    x = _gather_every_kth(ctx, x, ax, b, e, step)
                return x
    x, ranges = _crops_from_zero(ctx, x, list(ranges))
    shape = list(x.shape)
    for ax, b, e, s in ranges:
        shape[ax] = slice_length(b, e, s)
    attrs = dict(axes=[r[0] for r in ranges], begin=dims_list([r[1] for r in ranges]),
                 end=dims_list([r[2] for r in ranges]))
    if any(r[3] != 1 for r in ranges):
        attrs["stride"] = [r[3] for r in ranges]
    return ctx.op("slice", x, out_shape=tuple(shape), out_dtype=x.dtype, **attrs)


def _every_kth(ctx: EmitContext, x: Value, ax: int, begin: int, end: int, step: int) -> Value:
    """NOTE: tract 0.23.9 cannot load a strided slice below a reshape (its declutter pulls the
    Downsample over the reshape and fails: "Pulling Downsample over Reshape: Invalid axis", as
    in LeViT's ``x.view(B, r, r, C)[:, ::2, ::2]``). Items ``begin:end:step`` of a static axis are
    rows of ``step`` items of which the first is kept: unit-step slices and reshapes only."""
    end = min(end, x.shape[ax])
    m = slice_length(begin, end, step)
    full = min(m, (x.shape[ax] - begin) // step)  # rows of step items within the axis
    parts = []
    if full:
        rows = slice_axis(ctx, x, ax, begin, begin + full * step)
        shape = list(rows.shape)
        rows = reshape_to(ctx, rows, shape[:ax] + [full, step] + shape[ax + 1:])
        rows = slice_axis(ctx, rows, ax + 1, 0, 1)
        parts.append(reshape_to(ctx, rows, shape[:ax] + [full] + shape[ax + 1:]))
    if m > full:  # the last item, whose row runs past the end
        last = begin + full * step
        parts.append(slice_axis(ctx, x, ax, last, last + 1))
    return concat(ctx, parts, ax)


def _gather_every_kth(ctx: EmitContext, x: Value, ax: int, begin, end, step: int) -> Value:
    """NOTE: tract 0.23.9 mis-pulls a strided slice of a dynamic axis up through elementwise ops
    (``(a - b)[::2]`` with ``a`` from a long chain: "Can not broadcast 2 against 3" at run time).
    Items ``begin:end:step`` are gathered at ``range(begin, end, step)``."""
    n = slice_length(begin, end, step)
    indices = ctx.call("nnef.range", begin, end, step, DType.I64, (n,))
    shape = list(x.shape)
    shape[ax] = n
    return ctx.call("nnef.gather", x, indices, ax, tuple(shape))


def _slice_before_tile(ctx: EmitContext, x: Value, ranges: list) -> Optional[Value]:
    """NOTE: tract 0.23.9 cannot load a strided slice of a ``tile`` (its declutter pulls the
    Downsample over the broadcast and fails: "Trying to substitute a 3,1,9,4,F32 by 3,2,9,4,F32").
    The slice of the tile's input, tiled afterwards, is the same tensor: an axis the tile does not
    repeat is sliced before it; an axis of size 1 that it repeats is repeated fewer times."""
    st = producer(ctx, x)
    if st is None or st.op != "tile" or not st.args or not isinstance(st.args[0], Value):
        return None
    src, reps = st.args[0], list(st.attrs.get("repeats", []))
    if src.shape is None or len(reps) != len(src.shape):
        return None
    inner = []
    for ax, b, e, step in ranges:
        if isinstance(reps[ax], int) and reps[ax] == 1:
            inner.append((ax, b, e, step))
        elif src.shape[ax] == 1:
            reps[ax] = slice_length(b, e, step)
        else:
            return None
    return _tile(ctx, slice_axes(ctx, src, inner), reps)


def _crops_from_zero(ctx: EmitContext, x: Value, ranges: list) -> tuple:
    """``(x, ranges)`` where each step-1 range whose begin is a floor division of a size and whose
    length ``end - begin`` has fewer divisions than its end (after :func:`with_fewer_divisions`)
    is cut in two: ``x[begin:]`` first, then ``[0:length]``.

    NOTE: tract computes a slice's length as end - begin and proves sizes equal by their terms; the
    writer rewrites a subtracted division next to another one (``H/2 + 8 - (H+2)/4`` becomes
    ``(3*H+1)/4 + H/2 + 8 - H``, see ``dim_text``), so a centred crop (SD3's position table:
    ``top = (16 - h) // 2``, then ``top:top + h``) gets a length tract cannot match with ``h``
    elsewhere ("16*B*broadcast(...)" at a later reshape: the asset does not load)."""
    whole = []
    for i, (ax, b, e, s) in enumerate(ranges):  # the whole-axis slices made here are not cut again
        if s != 1 or not _subtracts_division(b) or e == x.shape[ax]:
            continue
        length = slice_length(b, e)
        if isinstance(length, SymDim) and len(length.input_symbols) == 1:
            (sym,) = length.input_symbols
            r = getattr(ctx, "ranges", {}).get(sym)
            length = with_fewer_divisions(length, max(1, r.lo) if r is not None and r.lo is not None else 1)
        if _divisions(length) < _divisions(e):
            whole.append((ax, b, x.shape[ax], 1))
            ranges[i] = (ax, 0, length, 1)
    if whole:
        x = slice_axes(ctx, x, whole)
    return x, ranges


def _subtracts_division(d) -> bool:
    """Whether the size ``d`` subtracts a floor division (``8 - (H+2)/4``)."""
    return isinstance(d, SymDim) and any(c < 0 and any(a not in d.input_symbols for a in m) for m, c in d.terms.items())


def _divisions(d) -> int:
    return len(d.symbols - d.input_symbols) if isinstance(d, SymDim) else 0


def slice_length(begin, end, step: int = 1):
    """Length of ``begin:end:step`` (a symbolic length assumes ``end >= begin``)."""
    if step == 1:
        return simplify(end - begin)
    if isinstance(begin, int) and isinstance(end, int):
        return max(0, -(-(end - begin) // step))
    return SymDim.floordiv(end - begin + (step - 1), step)


def concat(ctx: EmitContext, parts: list, ax: int) -> Value:
    """Concatenation along ``ax`` of the parts that are not None."""
    parts = [p for p in parts if p is not None]
    if len(parts) == 1:
        return parts[0]
    shape = list(parts[0].shape)
    shape[ax] = simplify(sum((p.shape[ax] for p in parts), 0))
    return ctx.op("concat", parts, axis=ax, out_shape=tuple(shape), out_dtype=parts[0].dtype)


def expand_to(ctx: EmitContext, x: Value, shape) -> Value:
    """Broadcast ``x`` to ``shape`` (leading unit axes, then ``tile`` along unit axes)."""
    shape = tuple(shape)
    if len(shape) < rank(x):
        raise EmitError(f"cannot expand a rank-{rank(x)} tensor to {list(shape)}")
    x = unsqueeze_to(ctx, x, len(shape))
    repeats = []
    for have, want in zip(x.shape, shape):
        if have == want:
            repeats.append(1)
        elif have == 1:
            repeats.append(want)
        else:
            raise EmitError(f"cannot expand {list(x.shape)} to {list(shape)}: size {have} is not 1")
    if all(isinstance(r, int) and r == 1 for r in repeats):
        return x
    y = ctx.op("tile", x, repeats=dims_list(repeats), out_shape=shape, out_dtype=x.dtype)
    return opaque(ctx, y) if x.is_constant and any(isinstance(r, SymDim) for r in repeats) else y


def full_like_value(ctx: EmitContext, value, dtype: DType, shape) -> Value:
    """A tensor of ``shape`` filled with the Python number or tensor ``value``; a number that
    follows the dynamic sizes (``x[0, :] = n - 3`` of a size ``n``) is computed in the graph."""
    if isinstance(value, SymDim):
        value = ctx.call("nnef.size", value, dtype)
    elif not isinstance(value, Value):
        value = ctx.const(np.full([1] * len(shape), value, dtype=dtype.numpy_name), dtype)
    return expand_to(ctx, cast(ctx, value, dtype), shape)


# ---------------------------------------------------------------------------------------
# reshapes


@register("Tensor.view")
def view(ctx: EmitContext, input: Value, *size, dtype: Optional[DType] = None):
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)  (also view(ScalarType dtype))"""
    if dtype is not None or len(size) == 1 and isinstance(size[0], DType):
        raise EmitError("view(dtype) reinterprets bits, which NNEF cannot express; use .to(dtype) to convert values")
    return reshape_to(ctx, input, size_args(size))


@register("Tensor.reshape")
def reshape_method(ctx: EmitContext, input: Value, *shape):
    """reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"""
    return reshape_to(ctx, input, size_args(shape))


@register(torch.reshape)
def reshape(ctx: EmitContext, input: Value, shape):
    """reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"""
    return reshape_to(ctx, input, size_args((shape,)))


@register("Tensor.view_as", "Tensor.reshape_as")
def view_as(ctx: EmitContext, input: Value, other: Value):
    """view_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return reshape_to(ctx, input, list(other.shape))


@register(torch.flatten, "Tensor.flatten")
def flatten(ctx: EmitContext, input: Value, start_dim: int = 0, end_dim: int = -1):
    """flatten(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"""
    r = rank(input)
    if r == 0:
        return reshape_to(ctx, input, [1])
    start, end = axis(start_dim, r), axis(end_dim, r)
    if start >= end:
        return input
    shape = input.shape[:start] + (simplify(product(input.shape[start:end + 1])),) + input.shape[end + 1:]
    return ctx.op("reshape", input, shape=[-1], axis_start=start, axis_count=end - start + 1,
                  out_shape=shape, out_dtype=input.dtype)


@register(torch.unflatten, "Tensor.unflatten")
def unflatten(ctx: EmitContext, input: Value, dim: int, sizes):
    """unflatten(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"""
    d = axis(dim, rank(input))
    sizes = dims_list(sizes)
    inner = resolve_sizes((input.shape[d],), sizes)
    shape = input.shape[:d] + inner + input.shape[d + 1:]
    return ctx.op("reshape", input, shape=sizes, axis_start=d, axis_count=1, out_shape=shape, out_dtype=input.dtype)


@register(torch.squeeze, "Tensor.squeeze")
def squeeze(ctx: EmitContext, input: Value, dim=None):
    """squeeze.dims(Tensor(a) self, int[]? dim=None) -> Tensor(a)"""
    r = rank(input)
    unit = [a for a in axes(dim, r) if isinstance(input.shape[a], int) and input.shape[a] == 1] if r else []
    if not unit:
        return input
    shape = tuple(d for a, d in enumerate(input.shape) if a not in unit)
    return ctx.op("squeeze", input, axes=unit, out_shape=shape, out_dtype=input.dtype)


@register(torch.unsqueeze, "Tensor.unsqueeze")
def unsqueeze(ctx: EmitContext, input: Value, dim: int):
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    d = axis(dim, rank(input) + 1)
    shape = input.shape[:d] + (1,) + input.shape[d:]
    return ctx.op("unsqueeze", input, axes=[d], out_shape=shape, out_dtype=input.dtype)


# ---------------------------------------------------------------------------------------
# axis permutations


@register("Tensor.permute")
def permute_method(ctx: EmitContext, input: Value, *dims):
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    return permute_axes(ctx, input, size_args(dims))


@register(torch.permute)
def permute(ctx: EmitContext, input: Value, dims):
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    return permute_axes(ctx, input, list(dims))


@register(torch.transpose, "Tensor.transpose", torch.swapdims, "Tensor.swapdims")
def transpose(ctx: EmitContext, input: Value, dim0: int, dim1: int):
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    r = rank(input)
    perm = list(range(r))
    a, b = axis(dim0, r), axis(dim1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return permute_axes(ctx, input, perm)


@register(torch.swapaxes, "Tensor.swapaxes")
def swapaxes(ctx: EmitContext, input: Value, axis0: int, axis1: int):
    """swapaxes(Tensor(a) self, int axis0, int axis1) -> Tensor(a)"""
    return transpose(ctx, input, axis0, axis1)


@register(torch.t, "Tensor.t")
def t(ctx: EmitContext, input: Value):
    """t(Tensor(a) self) -> Tensor(a)"""
    return input if rank(input) < 2 else permute_axes(ctx, input, [1, 0])


@register(torch.movedim, "Tensor.movedim", torch.moveaxis, "Tensor.moveaxis")
def movedim(ctx: EmitContext, input: Value, source, destination):
    """movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)"""
    r = rank(input)
    src = [axis(s, r) for s in ([source] if isinstance(source, int) else source)]
    dst = [axis(d, r) for d in ([destination] if isinstance(destination, int) else destination)]
    perm = [None] * r
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(a for a in range(r) if a not in src)
    return permute_axes(ctx, input, [p if p is not None else next(rest) for p in perm])


# ---------------------------------------------------------------------------------------
# broadcasting and repetition


def _expand_sizes(x: Value, sizes: list) -> tuple:
    lead = len(sizes) - rank(x)
    if lead < 0:
        raise EmitError(f"expand to {sizes}: fewer sizes than the {rank(x)} axes of the input")
    return tuple(x.shape[i - lead] if isinstance(s, int) and s == -1 else s for i, s in enumerate(sizes))


@register("Tensor.expand")
def expand(ctx: EmitContext, input: Value, *size, implicit: bool = False):
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    return expand_to(ctx, input, _expand_sizes(input, size_args(size)))


@register(torch.broadcast_to, "Tensor.broadcast_to")
def broadcast_to(ctx: EmitContext, input: Value, *size):
    """broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)  (the method also takes sizes as varargs)"""
    return expand_to(ctx, input, _expand_sizes(input, size_args(size)))


@register("Tensor.expand_as")
def expand_as(ctx: EmitContext, input: Value, other: Value):
    """expand_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return expand_to(ctx, input, other.shape)


def _tile(ctx: EmitContext, x: Value, repeats: list) -> Value:
    x = unsqueeze_to(ctx, x, len(repeats))
    if all(isinstance(r, int) and r == 1 for r in repeats):
        return x
    shape = tuple(simplify(d * r) for d, r in zip(x.shape, repeats))
    return ctx.op("tile", x, repeats=repeats, out_shape=shape, out_dtype=x.dtype)


@register("Tensor.repeat")
def repeat(ctx: EmitContext, input: Value, *repeats):
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    repeats = size_args(repeats)
    if len(repeats) < rank(input):
        raise EmitError(f"repeat needs at least {rank(input)} counts, got {repeats}")
    return _tile(ctx, input, repeats)


@register(torch.tile, "Tensor.tile")
def tile(ctx: EmitContext, input: Value, *dims):
    """tile(Tensor self, SymInt[] dims) -> Tensor  (the method also takes counts as varargs)"""
    dims = size_args(dims)
    return _tile(ctx, input, [1] * (rank(input) - len(dims)) + dims)


# ---------------------------------------------------------------------------------------
# joining and splitting


def _same_dtype(ctx: EmitContext, tensors: list) -> list:
    dtype = result_dtype(*tensors)
    return [cast(ctx, t, dtype) for t in tensors]


@register(torch.cat, torch.concat, torch.concatenate)
def cat(ctx: EmitContext, tensors: list, dim: int = 0):
    """cat(Tensor[] tensors, int dim=0) -> Tensor"""
    tensors = [t for t in tensors if t.shape != (0,)]  # torch skips legacy empty 1-D tensors
    if not tensors:
        raise EmitError("cat of empty tensors only")
    return concat(ctx, _same_dtype(ctx, tensors), axis(dim, rank(tensors[0])))


@register(torch.stack)
def stack(ctx: EmitContext, tensors: list, dim: int = 0):
    """stack(Tensor[] tensors, int dim=0) -> Tensor"""
    tensors = _same_dtype(ctx, tensors)
    d = axis(dim, rank(tensors[0]) + 1)
    shape = tensors[0].shape[:d] + (len(tensors),) + tensors[0].shape[d:]
    return ctx.op("stack", tensors, axis=d, out_shape=shape, out_dtype=tensors[0].dtype)


def _split(ctx: EmitContext, x: Value, ax: int, sizes: list) -> tuple:
    """Consecutive slices of ``sizes`` along ``ax``."""
    out, begin = [], 0
    for size in sizes:
        end = simplify(begin + size)
        out.append(slice_axis(ctx, x, ax, begin, end))
        begin = end
    return tuple(out)


def _static_dim(x: Value, ax: int, what: str) -> int:
    n = x.shape[ax]
    if not isinstance(n, int):
        raise EmitError(f"{what} along axis {ax} needs a static size, but that axis has the dynamic size {n}; "
                        "make this axis static")
    return n


def _piece_count(ctx: EmitContext, what: str, n) -> int:
    """How many tensors the traced call returned (a dynamic length gives no count of its own).

    The tracer records that count as a guard, so a size where torch gives another count is
    caught, not exported wrong.
    """
    if ctx.node is None or not ctx.node.outputs:
        raise EmitError(f"{what} of the dynamic size {n}: the number of pieces is unknown here")
    return len(ctx.node.outputs)


def _even_sizes(ctx: EmitContext, n, size, what: str) -> list:
    """Pieces of ``size`` (the last one shorter) covering a length ``n``: torch's split rule."""
    if isinstance(n, int) and isinstance(size, int):
        return [min(size, n - b) for b in range(0, n, size)] or [0]
    count = _piece_count(ctx, what, n)
    return [size] * (count - 1) + [simplify(n - (count - 1) * size)]


@register(torch.split)
def split(ctx: EmitContext, tensor: Value, split_size_or_sections, dim: int = 0):
    """split(Tensor tensor, int|int[] split_size_or_sections, int dim=0) -> Tensor[]"""
    ax = axis(dim, rank(tensor))
    if isinstance(split_size_or_sections, (list, tuple)):
        return _split(ctx, tensor, ax, dims_list(split_size_or_sections))
    size = dims_list([split_size_or_sections])[0]
    return _split(ctx, tensor, ax, _even_sizes(ctx, tensor.shape[ax], size, "split"))


@register("Tensor.split")
def split_method(ctx: EmitContext, input: Value, split_size, dim: int = 0):
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    return split(ctx, input, split_size, dim)


@register(torch.split_with_sizes, "Tensor.split_with_sizes")
def split_with_sizes(ctx: EmitContext, input: Value, split_sizes, dim: int = 0):
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"""
    return _split(ctx, input, axis(dim, rank(input)), dims_list(split_sizes))


@register(torch.chunk, "Tensor.chunk")
def chunk(ctx: EmitContext, input: Value, chunks: int, dim: int = 0):
    """chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]"""
    ax = axis(dim, rank(input))
    n = input.shape[ax]
    size = max(1, -(-n // chunks)) if isinstance(n, int) else SymDim.floordiv(n + (chunks - 1), chunks)
    return _split(ctx, input, ax, _even_sizes(ctx, n, size, "chunk"))


@register(torch.tensor_split, "Tensor.tensor_split")
def tensor_split(ctx: EmitContext, input: Value, sections=None, dim: int = 0, *, indices=None,
                 tensor_indices_or_sections=None):
    """tensor_split.sections(Tensor(a -> *) self, SymInt sections, int dim=0) -> Tensor(a)[]

    Also ``tensor_split.indices(Tensor self, SymInt[] indices, int dim=0)`` and a tensor of either.
    With a dynamic axis, constant indices hold while the length is at least the largest index.
    """
    indices_or_sections = next(v for v in (sections, indices, tensor_indices_or_sections, 1) if v is not None)
    ax = axis(dim, rank(input))
    n = input.shape[ax]
    if isinstance(indices_or_sections, Value):
        if not indices_or_sections.is_constant:
            raise EmitError("tensor_split with indices computed from tensor data is not supported")
        indices_or_sections = indices_or_sections.data.tolist()
    if isinstance(indices_or_sections, (list, tuple)):
        bounds = [0] + [_clamped_index(i, n) for i in dims_list(indices_or_sections)] + [n]
        return tuple(slice_axis(ctx, input, ax, b, max(b, e) if isinstance(b, int) and isinstance(e, int) else e)
                     for b, e in zip(bounds, bounds[1:]))
    sections = indices_or_sections
    if not isinstance(sections, int) or sections <= 0:
        raise EmitError(f"tensor_split needs a positive number of sections, got {sections!r}")
    # piece j (0-based) holds floor((n + sections - 1 - j) / sections) items: the first n % sections get one more
    sizes = [(n + sections - 1 - j) // sections if isinstance(n, int) else SymDim.floordiv(n + (sections - 1 - j), sections)
             for j in range(sections)]
    return _split(ctx, input, ax, sizes)


def _split_like(ctx: EmitContext, input: Value, sections, indices, dim: int, name: str):
    """hsplit/vsplit/dsplit: tensor_split along ``dim``, an int needing an exact division."""
    spec = sections if sections is not None else indices
    n = input.shape[dim]
    if isinstance(spec, int) and not (isinstance(n, int) and n % spec == 0):
        raise EmitError(f"{name}({spec}) needs the size {n} of axis {dim} to be a multiple of {spec}")
    return tensor_split(ctx, input, spec, dim)


@register(torch.hsplit, "Tensor.hsplit")
def hsplit(ctx: EmitContext, input: Value, sections=None, indices=None):
    """hsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]  (also hsplit.array(int[] indices))"""
    return _split_like(ctx, input, sections, indices, 1 if rank(input) > 1 else 0, "hsplit")


@register(torch.vsplit, "Tensor.vsplit")
def vsplit(ctx: EmitContext, input: Value, sections=None, indices=None):
    """vsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]  (also vsplit.array(int[] indices))"""
    return _split_like(ctx, input, sections, indices, 0, "vsplit")


@register(torch.dsplit, "Tensor.dsplit")
def dsplit(ctx: EmitContext, input: Value, sections=None, indices=None):
    """dsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]  (also dsplit.array(int[] indices))"""
    return _split_like(ctx, input, sections, indices, 2, "dsplit")


def _clamped_index(i, n):
    """A tensor_split index: negatives count from the end, and torch clamps to [0, n]."""
    if isinstance(i, int) and isinstance(n, int):
        return min(max(i + n if i < 0 else i, 0), n)
    if isinstance(i, int) and i < 0:
        return simplify(n + i)
    return i


@register(torch.unbind, "Tensor.unbind")
def unbind(ctx: EmitContext, input: Value, dim: int = 0):
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    ax = axis(dim, rank(input))
    n = input.shape[ax]
    if not isinstance(n, int):
        raise EmitError(f"unbind along axis {ax} gives one tensor per item, but that axis has the dynamic size {n}; "
                        "make this axis static, or index the items you need (x.select(dim, i))")
    shape = input.shape[:ax] + input.shape[ax + 1:]
    outs = ctx.op("unstack", input, axis=ax, n_out=n, out_shape=shape, out_dtype=input.dtype, __array__=True)
    return (outs,) if n == 1 else outs


# stacking helpers (numpy style)


def _at_least(ctx: EmitContext, x: Value, r: int) -> Value:
    """numpy's atleast_{1,2,3}d: a 0-d tensor becomes [1]*r, 1-d [n] becomes [1, n] (and [1, n, 1]),
    2-d [m, n] becomes [m, n, 1]."""
    shape = tuple(x.shape)
    if len(shape) >= r:
        return x
    if len(shape) == 0:
        new = (1,) * r
    elif len(shape) == 1:
        new = ((1,) + shape + (1,))[:r]
    else:
        new = shape + (1,)
    return reshape_to(ctx, x, list(new))


def _at_least_each(r: int):
    def convert(ctx: EmitContext, *tensors):
        items = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
        out = tuple(_at_least(ctx, t, r) for t in items)
        return out[0] if len(tensors) == 1 and isinstance(tensors[0], Value) else out

    convert.__name__ = f"atleast_{r}d"
    convert.__doc__ = f"atleast_{r}d(Tensor|Tensor[] *tensors) -> Tensor|Tensor[]"
    return convert


for _r, _fn in ((1, torch.atleast_1d), (2, torch.atleast_2d), (3, torch.atleast_3d)):
    register(_fn)(_at_least_each(_r))


@register(torch.vstack, torch.row_stack)
def vstack(ctx: EmitContext, tensors: list):
    """vstack(Tensor[] tensors) -> Tensor"""
    return cat(ctx, [_at_least(ctx, t, 2) for t in tensors], 0)


@register(torch.hstack)
def hstack(ctx: EmitContext, tensors: list):
    """hstack(Tensor[] tensors) -> Tensor"""
    parts = [_at_least(ctx, t, 1) for t in tensors]
    return cat(ctx, parts, 0 if rank(parts[0]) == 1 else 1)


@register(torch.dstack)
def dstack(ctx: EmitContext, tensors: list):
    """dstack(Tensor[] tensors) -> Tensor"""
    return cat(ctx, [_at_least(ctx, t, 3) for t in tensors], 2)


@register(torch.column_stack)
def column_stack(ctx: EmitContext, tensors: list):
    """column_stack(Tensor[] tensors) -> Tensor"""
    parts = [reshape_to(ctx, t, [t.shape[0] if rank(t) else 1, 1]) if rank(t) < 2 else t for t in tensors]
    return cat(ctx, parts, 1)


# ---------------------------------------------------------------------------------------
# identities and casts


@register("Tensor.contiguous", torch.clone, "Tensor.clone", torch.detach, "Tensor.detach", "Tensor.cpu")
def identity(ctx: EmitContext, input: Value, *, memory_format=None):
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"""
    return input


@register("Tensor.to")
def to(ctx: EmitContext, input: Value, *args, dtype=None, device=None, tensor: Optional[Value] = None,
       non_blocking: bool = False, copy: bool = False, memory_format=None):
    """to(Tensor self, Device? device=None, ScalarType? dtype=None, bool non_blocking=False, bool copy=False) -> Tensor

    Also ``to(ScalarType dtype, ...)`` and ``to(Tensor tensor, ...)``.
    """
    if tensor is not None:
        dtype = tensor.dtype
    for a in args:
        if isinstance(a, DType):
            dtype = a
        elif isinstance(a, Value):
            dtype = a.dtype
    return input if dtype is None else cast(ctx, input, dtype)


@register("Tensor.type")
def type_(ctx: EmitContext, input: Value, dtype=None, non_blocking: bool = False):
    """type(Tensor self, ScalarType dtype, bool non_blocking=False) -> Tensor"""
    if not isinstance(dtype, DType):
        raise EmitError(f"type({dtype!r}): give a torch dtype such as torch.float32")
    return cast(ctx, input, dtype)


@register("Tensor.type_as")
def type_as(ctx: EmitContext, input: Value, other: Value):
    """type_as(Tensor self, Tensor other) -> Tensor"""
    return cast(ctx, input, other.dtype)


# Tensor method -> dtype it converts to
CAST_METHODS = {
    "float": DType.F32, "half": DType.F16, "double": DType.F64, "bfloat16": DType.BF16, "long": DType.I64,
    "int": DType.I32, "short": DType.I16, "char": DType.I8, "byte": DType.U8, "bool": DType.BOOL,
}


def _cast_method(dtype: DType):
    def convert(ctx: EmitContext, input: Value, memory_format=None):
        return cast(ctx, input, dtype)

    convert.__name__ = f"to_{dtype.value}"
    convert.__doc__ = f"{dtype.value}(Tensor self, MemoryFormat? memory_format=None) -> Tensor"
    return convert


for _name, _dtype in CAST_METHODS.items():
    register(f"Tensor.{_name}")(_cast_method(_dtype))


# ---------------------------------------------------------------------------------------
# reversals and rotations


@register("Tensor.flip")
def flip_method(ctx: EmitContext, input: Value, *dims):
    """flip(Tensor self, int[] dims) -> Tensor  (the method also takes dims as varargs)"""
    return ctx.call("torch.flip", input, size_args(dims))


@register(torch.flip)
def flip(ctx: EmitContext, input: Value, dims):
    """flip(Tensor self, int[] dims) -> Tensor"""
    ax = axes(dims, rank(input))
    n = [_static_dim(input, a, "flip") for a in ax]
    return ctx.op("slice", input, axes=ax, begin=[-1] * len(ax), end=[-d - 1 for d in n], stride=[-1] * len(ax),
                  out_shape=input.shape, out_dtype=input.dtype)


@register(torch.fliplr, "Tensor.fliplr")
def fliplr(ctx: EmitContext, input: Value):
    """fliplr(Tensor self) -> Tensor"""
    if rank(input) < 2:
        raise EmitError("fliplr needs a tensor of at least 2 dimensions")
    return ctx.call("torch.flip", input, [1])


@register(torch.flipud, "Tensor.flipud")
def flipud(ctx: EmitContext, input: Value):
    """flipud(Tensor self) -> Tensor"""
    if rank(input) < 1:
        raise EmitError("flipud needs a tensor of at least 1 dimension")
    return ctx.call("torch.flip", input, [0])


@register(torch.rot90, "Tensor.rot90")
def rot90(ctx: EmitContext, input: Value, k: int = 1, dims=(0, 1)):
    """rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor"""
    r = rank(input)
    if len(dims) != 2:
        raise EmitError(f"rot90 needs two dims, got {list(dims)}")
    d0, d1 = axis(dims[0], r), axis(dims[1], r)
    if d0 == d1:
        raise EmitError(f"rot90 needs two different dims, got {list(dims)}")
    k %= 4
    if k == 0:
        return input
    if k == 2:
        return ctx.call("torch.flip", input, [d0, d1])
    flipped = ctx.call("torch.flip", input, [d1 if k == 1 else d0])
    return transpose(ctx, flipped, d0, d1)


def _roll_axis(ctx: EmitContext, x: Value, ax: int, shift) -> Value:
    n = x.shape[ax]
    if isinstance(shift, SymDim):
        return _roll_by_size(ctx, x, ax, shift)
    if isinstance(n, SymDim):
        return _roll_dynamic(ctx, x, ax, shift) if shift else x
    shift %= max(n, 1)
    if shift == 0:
        return x
    return concat(ctx, [slice_axis(ctx, x, ax, n - shift, n), slice_axis(ctx, x, ax, 0, n - shift)], ax)


def _roll_dynamic(ctx: EmitContext, x: Value, ax: int, shift: int) -> Value:
    """Roll on a dynamic axis of size n: a gather at ``(i - shift) mod n``, right for any n
    (the shift may exceed n: 2 on a size of 1 leaves the tensor as it is)."""
    n = x.shape[ax]
    i = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    j = ew(ctx, "add", i, dim_value(ctx, simplify(abs(shift) * n - shift), DType.I64))  # >= 0
    size = dim_value(ctx, n, DType.I64)
    index = ew(ctx, "sub", j, ew(ctx, "mul", ew(ctx, "div", j, size), size))  # j >= 0: div is a floor
    return ctx.call("nnef.gather", x, index, ax, x.shape)


def _roll_by_size(ctx: EmitContext, x: Value, ax: int, shift: SymDim) -> Value:
    """Roll by a shift read from dynamic sizes (``x.shape[1] // 3``, ``-(x.size(1) // 2)``), of
    either sign: a gather at ``(i - shift) mod n`` with the modulo computed in the graph (tract's
    integer division truncates: ``shift - (shift / n) * n`` is in ``(-n, n)``, so ``i - that + n``
    is positive and its remainder by n a floor one)."""
    n = x.shape[ax]
    i = ctx.call("nnef.range", 0, n, 1, DType.I64, (n,))
    size = ew(ctx, "max", dim_value(ctx, n, DType.I64), ctx.const([1], DType.I64))  # no division by 0
    s = dim_value(ctx, shift, DType.I64)
    rest = ew(ctx, "sub", s, ew(ctx, "mul", ew(ctx, "div", s, size), size))
    j = ew(ctx, "add", ew(ctx, "sub", i, rest), size)
    index = ew(ctx, "sub", j, ew(ctx, "mul", ew(ctx, "div", j, size), size))
    return ctx.call("nnef.gather", x, index, ax, x.shape)


@register(torch.roll, "Tensor.roll")
def roll(ctx: EmitContext, input: Value, shifts, dims=()):
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    shifts = [shifts] if isinstance(shifts, (int, SymDim)) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims:
        flat = reshape_to(ctx, input, [-1])
        return reshape_to(ctx, _roll_axis(ctx, flat, 0, shifts[0]), list(input.shape))
    if len(dims) != len(shifts):
        raise EmitError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    x = input
    for shift, d in zip(shifts, dims):
        x = _roll_axis(ctx, x, axis(d, rank(input)), shift)
    return x


# ---- repeat_interleave ---------------------------------------------------------------------------------------------
def repeat_axis(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """Each item along ``ax`` repeated ``repeats`` times in a row: unsqueeze, tile, merge the two axes."""
    shape = tuple(x.shape)
    tiled_shape = shape[:ax + 1] + (repeats,) + shape[ax + 1:]
    y = ctx.op("unsqueeze", x, axes=[ax + 1], out_shape=shape[:ax + 1] + (1,) + shape[ax + 1:])
    reps = [1] * len(tiled_shape)
    reps[ax + 1] = repeats
    y = ctx.op("tile", y, repeats=reps, out_shape=tiled_shape)
    return ctx.op("reshape", y, shape=[-1], axis_start=ax, axis_count=2,
                  out_shape=shape[:ax] + (shape[ax] * repeats,) + shape[ax + 1:])


def _count(ctx: EmitContext, repeats) -> int:
    """An integer repeat count, from a Python int or a constant tensor whose items are all equal."""
    if isinstance(repeats, Value) and repeats.is_constant and np.unique(repeats.data).size == 1:
        return int(repeats.data.reshape(-1)[0])
    if not isinstance(repeats, (int, SymDim)):
        ctx.fail("repeat_interleave supports one repeat count for every item, not per-item counts")
    return repeats


@register(torch.repeat_interleave, "Tensor.repeat_interleave")
def repeat_interleave(ctx: EmitContext, input: Value = None, repeats=None, dim=None, *, output_size=None):
    """repeat_interleave(Tensor self, Tensor|SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""
    if input is None or repeats is None:
        ctx.fail("repeat_interleave(repeats) alone gives indices whose count depends on the data; pass the input tensor")
    if dim is None:
        input = ctx.op("reshape", input, shape=[-1], out_shape=(product(input.shape),))
        dim = 0
    counts = _known_counts(repeats)
    if counts is not None and len(set(counts)) > 1:
        return _repeat_each(ctx, input, axis(dim, rank(input)), counts)
    n = _count(ctx, repeats)
    return ctx.call("nnef.repeat_axis", input, axis(dim, rank(input)), n)


def _known_counts(repeats) -> Optional[list]:
    """Per-item repeat counts known when exporting: a constant tensor, or one built from sizes
    (``torch.tensor([x.shape[1], y.shape[1]])``, ints and dynamic sizes); else None."""
    if not isinstance(repeats, Value) or rank(repeats) != 1:
        return None
    if repeats.is_constant:
        return [int(c) for c in repeats.data.reshape(-1)]
    made = repeats.producer
    if made is not None and made.kind == "torch.tensor" and made.args and isinstance(made.args[0], (list, tuple)) \
            and all(isinstance(c, (int, SymDim)) and not isinstance(c, bool) for c in made.args[0]):
        return list(made.args[0])
    return None


def _repeat_each(ctx: EmitContext, x: Value, ax: int, counts: list) -> Value:
    """Item i along ``ax`` repeated ``counts[i]`` times (a count may be a dynamic size): one
    tiled slice per item, concatenated."""
    if x.shape[ax] != len(counts):
        ctx.fail(f"repeat_interleave: {len(counts)} repeat counts for {x.shape[ax]} items")
    pieces = []
    for i, c in enumerate(counts):
        if isinstance(c, int) and c <= 0:
            continue
        item = slice_axis(ctx, x, ax, i, i + 1)
        reps = [1] * rank(x)
        reps[ax] = c
        shape = tuple(c if a == ax else d for a, d in enumerate(x.shape))
        pieces.append(ctx.op("tile", item, repeats=reps, out_shape=shape, out_dtype=x.dtype))
    if not pieces:
        return slice_axis(ctx, x, ax, 0, 0)
    return concat(ctx, pieces, ax) if len(pieces) > 1 else pieces[0]


@register("nnef.repeat_axis")
def repeat_axis_rule(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """Each item along ``ax`` repeated ``repeats`` times in a row."""
    return repeat_axis(ctx, x, ax, repeats)


