"""Sliding windows: ``Tensor.unfold``, ``F.unfold`` (im2col) and ``F.fold`` (col2im).

NNEF has none of them; all three are slices, reshapes, transposes, pads and adds, so the
values are the input's own (``fold`` adds the overlapping items, as torch does):

- a window axis of ``k`` items every ``step`` is cut into rows of ``g = gcd(k, step)`` items,
  then built from ``k / g`` slices of those rows (patches, ``k == step``, are one reshape);
- ``fold`` places each kernel position's items on a zero-stuffed grid (pad then reshape) and
  adds the ``kh * kw`` grids.
"""
from __future__ import annotations

import dataclasses
import math

import torch.nn.functional as F

from ...errors import EmitError
from ...ir import SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import axis, ew, rank
from ..registry import register
from .conv import ntuple
from .shape import concat, permute_axes, reshape_to, slice_axis


def windows(ctx: EmitContext, x: Value, ax: int, count, size: int, step: int, dilation: int = 1) -> Value:
    """``x`` with axis ``ax`` replaced by ``count`` windows and a new last axis of their ``size``
    items: item ``j`` of window ``i`` is ``x[i*step + j*dilation]`` along ``ax``."""
    r = rank(x)
    g = math.gcd(size, step)
    if dilation == 1 and (g > 1 or step == 1):
        # rows of g items (g divides the step and the window): window i is rows i*a .. i*a + b - 1
        # for a = step/g, b = size/g, so b slices of the rows (of unit step when g is the step)
        a, b = step // g, size // g
        rows = simplify((count - 1) * a + b)
        y = slice_axis(ctx, x, ax, 0, simplify(rows * g))
        shape = list(y.shape)
        y = reshape_to(ctx, y, shape[:ax] + [rows, g] + shape[ax + 1:])
        y = permute_axes(ctx, y, [k for k in range(r + 1) if k != ax + 1] + [ax + 1])
        return concat(ctx, [slice_axis(ctx, y, ax, j, simplify(j + (count - 1) * a + 1), a) for j in range(b)], r)
    pieces = []
    for j in range(size):
        piece = slice_axis(ctx, x, ax, j * dilation, simplify(j * dilation + (count - 1) * step + 1), step)
        pieces.append(reshape_to(ctx, piece, list(piece.shape) + [1]))
    return concat(ctx, pieces, r)


def _window_count(n, size: int, step: int, dilation: int, what: str):
    span = dilation * (size - 1) + 1
    count = SymDim.floordiv(n - span, step) + 1 if isinstance(n, SymDim) else (n - span) // step + 1
    if isinstance(count, int) and count < 1:
        raise EmitError(f"{what}: a window of {span} items does not fit in {n}")
    return simplify(count)


@register("Tensor.unfold")
def unfold_method(ctx: EmitContext, input: Value, dimension: int, size: int, step: int):
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)"""
    if rank(input) == 0:
        return reshape_to(ctx, input, [1])
    ax = axis(dimension, rank(input))
    count = _window_count(input.shape[ax], size, step, 1, "Tensor.unfold")
    return windows(ctx, input, ax, count, size, step)


@register(F.unfold)
def im2col(ctx: EmitContext, input: Value, kernel_size, dilation=1, padding=0, stride=1):
    """unfold(Tensor input, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    (kh, kw), (dh, dw) = ntuple(kernel_size, 2, "F.unfold kernel_size"), ntuple(dilation, 2, "F.unfold dilation")
    (ph, pw), (sh, sw) = ntuple(padding, 2, "F.unfold padding"), ntuple(stride, 2, "F.unfold stride")
    if rank(input) not in (3, 4):
        raise EmitError(f"F.unfold takes a (C, H, W) or (N, C, H, W) tensor, got rank {rank(input)}")
    x = input if rank(input) == 4 else reshape_to(ctx, input, [1] + list(input.shape))
    if ph or pw:
        x = ctx.call("F.pad", x, [pw, pw, ph, ph])
    n, c, h, w = x.shape
    oh = _window_count(h, kh, sh, dh, "F.unfold")
    ow = _window_count(w, kw, sw, dw, "F.unfold")
    y = windows(ctx, x, 2, oh, kh, sh, dh)  # (N, C, oh, W, kh)
    y = windows(ctx, y, 3, ow, kw, sw, dw)  # (N, C, oh, ow, kh, kw)
    y = permute_axes(ctx, y, [0, 1, 4, 5, 2, 3])
    out = [n, simplify(c * kh * kw), simplify(oh * ow)]
    y = reshape_to(ctx, y, out)
    return y if rank(input) == 4 else reshape_to(ctx, y, out[1:])


@register(F.fold)
def col2im(ctx: EmitContext, input: Value, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """fold(Tensor input, int[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    (h, w), (kh, kw) = _output_size(output_size), ntuple(kernel_size, 2, "F.fold kernel_size")
    (dh, dw), (ph, pw) = ntuple(dilation, 2, "F.fold dilation"), ntuple(padding, 2, "F.fold padding")
    sh, sw = ntuple(stride, 2, "F.fold stride")
    if rank(input) not in (2, 3):
        raise EmitError(f"F.fold takes a (C*kh*kw, L) or (N, C*kh*kw, L) tensor, got rank {rank(input)}")
    x = input if rank(input) == 3 else reshape_to(ctx, input, [1] + list(input.shape))
    n, ck, _ = x.shape
    if not isinstance(ck, int) or ck % (kh * kw):
        raise EmitError(f"F.fold: {ck} channels are not a multiple of the kernel's {kh}*{kw} positions")
    c = ck // (kh * kw)
    hp, wp = h + 2 * ph, w + 2 * pw
    oh = _window_count(hp, kh, sh, dh, "F.fold")
    ow = _window_count(wp, kw, sw, dw, "F.fold")
    x = reshape_to(ctx, x, [n, c, kh, kw, oh, ow])
    static = all(isinstance(d, int) for d in (hp, wp))
    if (dh, dw) == (1, 1) and (sh, sw) == (kh, kw) and static:
        # patches side by side: a transpose and a reshape, then zeros where no patch reaches
        y = permute_axes(ctx, x, [0, 1, 4, 2, 5, 3])
        y = reshape_to(ctx, y, [n, c, oh * kh, ow * kw])
        y = ctx.call("F.pad", y, [0, wp - ow * kw, 0, hp - oh * kh]) if (hp, wp) != (oh * kh, ow * kw) else y
    else:
        y = None
        for i in range(kh):
            for j in range(kw):
                grid = _placed(ctx, x, i, j, _FoldGrid((kh, kw), (dh, dw), (sh, sw), (oh, ow), (hp, wp)))
                y = grid if y is None else ew(ctx, "add", y, grid)
    if ph or pw:
        y = ctx.call("F.pad", y, [-pw, -pw, -ph, -ph])
    return y if rank(input) == 3 else reshape_to(ctx, y, list(y.shape[1:]))


def _output_size(output_size) -> list:
    """F.fold's output size as 2 sizes (ints, or dynamic sizes)."""
    items = [output_size] * 2 if isinstance(output_size, (int, SymDim)) else list(output_size)
    if len(items) == 1:
        items = items * 2
    if len(items) != 2 or not all(isinstance(i, (int, SymDim)) for i in items):
        raise EmitError(f"F.fold output_size must be an int or 2 ints, got {output_size!r}")
    return items


@dataclasses.dataclass
class _FoldGrid:
    """F.fold's windows, each a pair (rows, columns): their kernel, dilation and stride, how many
    there are, and the padded output size they are placed on."""
    kernel: tuple
    dilation: tuple
    stride: tuple
    counts: tuple
    size: tuple


def _placed(ctx: EmitContext, x: Value, i: int, j: int, grid: _FoldGrid) -> Value:
    """Kernel position ``(i, j)`` of ``x`` (N, C, kh, kw, oh, ow) on the padded output grid
    ``grid.size``: item ``(a, b)`` at ``(i, j) * dilation + (a, b) * stride``, zeros elsewhere."""
    piece = slice_axis(ctx, slice_axis(ctx, x, 2, i, i + 1), 3, j, j + 1)
    n, c = x.shape[:2]
    (oh, ow), (sh, sw) = grid.counts, grid.stride
    piece = reshape_to(ctx, piece, [n, c, oh, 1, ow, 1])
    if (sh, sw) != (1, 1):  # zero-stuffing: each item followed by stride - 1 zeros
        piece = ctx.call("F.pad", piece, [0, sw - 1, 0, 0, 0, sh - 1])
    piece = reshape_to(ctx, piece, [n, c, oh * sh, ow * sw])
    (kh, kw), (dh, dw) = grid.kernel, grid.dilation
    (top, left), (hp, wp) = (i * dh, j * dw), grid.size
    if isinstance(hp, int) and isinstance(wp, int):
        return ctx.call("F.pad", piece, [left, wp - left - ow * sw, top, hp - top - oh * sh])
    # a dynamic output size: tract's pad takes static amounts only. The windows end at most
    # ``span - 1`` items before the end (the last one starts within ``stride`` of it), so a static
    # pad of ``span - 1 - offset`` after the pieces reaches the end, and a slice cuts the rest
    after_h, after_w = max(0, (kh - 1) * dh - top), max(0, (kw - 1) * dw - left)
    piece = ctx.call("F.pad", piece, [left, after_w, top, after_h])
    return slice_axis(ctx, slice_axis(ctx, piece, 2, 0, hp), 3, 0, wp)
