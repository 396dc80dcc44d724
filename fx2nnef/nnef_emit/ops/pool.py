"""Pooling and resampling: max/avg/adaptive pools, F.pad, F.interpolate, pixel_shuffle.

NOTE: max pools use border 'ignore' (torch pads with -inf): tract reads 'constant' as
'ignore' anyway, but the Khronos interpreter pads 'constant' with 0. tract aborts the
process on a pool border other than 'constant'/'ignore', and rejects ``pad`` with border
'replicate': that one is built from slices and concat for tract.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import rank
from ..registry import register
from .conv import add_batch, drop_batch, node_shape, ntuple

def with_dim(shape: tuple, axis: int, size) -> tuple:
    """``shape`` with ``shape[axis]`` replaced by ``size``."""
    return tuple(size if i == axis else d for i, d in enumerate(shape))


def static_dims(dims, what: str) -> list:
    if not all(isinstance(d, int) for d in dims):
        raise EmitError(f"{what} needs static spatial sizes, got {[str(d) for d in dims]}")
    return list(dims)


def transpose(ctx: EmitContext, x: Value, perm: list) -> Value:
    """``x`` with its axes permuted (nothing emitted for the identity)."""
    if perm == sorted(perm):
        return x
    return ctx.op("transpose", x, axes=perm, out_shape=tuple(x.shape[p] for p in perm))


def apply_along(ctx: EmitContext, x: Value, axis: int, m: np.ndarray) -> Value:
    """``m`` (a constant [n_out, n_in] matrix) applied to ``x`` along ``axis``, by matmul
    (from the left for the second-to-last axis, from the right after moving the axis last otherwise)."""
    r = rank(x)
    c = ctx.const(m.reshape((1,) * (r - 2) + m.shape), x.dtype, name="resample")
    if axis == r - 2:
        return ctx.op("matmul", c, x, transposeA=False, transposeB=False, out_shape=with_dim(x.shape, axis, m.shape[0]))
    perm = list(range(r))
    perm[axis], perm[r - 1] = r - 1, axis
    y = transpose(ctx, x, perm)
    y = ctx.op("matmul", y, c, transposeA=False, transposeB=True, out_shape=with_dim(y.shape, r - 1, m.shape[0]))
    return transpose(ctx, y, perm)


# pooling windows ------------------------------------------------------------------------
@dataclasses.dataclass
class Window:
    """A pooling window over the spatial axes; ``extra`` is the padding ceil_mode adds at the end."""

    kernel: list
    stride: list
    padding: list
    dilation: list
    extra: list

    def attrs(self) -> dict:
        """NNEF pool attributes, unit on the batch and channel axes."""
        pads = [(p, p + e) for p, e in zip(self.padding, self.extra)]
        return dict(size=[1, 1] + self.kernel, padding=[(0, 0), (0, 0)] + pads, stride=[1, 1] + self.stride,
                    dilation=[1, 1] + self.dilation)


def ceil_extra(length, k: int, s: int, p: int, d: int) -> int:
    """Padding that torch's ceil_mode adds after an axis (a last window must start inside the input)."""
    length = static_dims([length], "ceil_mode=True")[0]
    span = d * (k - 1) + 1
    out = -(-(length + 2 * p - span) // s) + 1
    if (out - 1) * s >= length + p:
        out -= 1
    return max(0, (out - 1) * s + span - (length + 2 * p))


def window(x: Value, n: int, kernel_size, stride, padding, dilation, ceil_mode: bool) -> Window:
    """torch's pool arguments (stride defaults to the kernel) as a Window over ``x``'s spatial axes."""
    kernel = ntuple(kernel_size, n, "kernel_size")
    stride = ntuple(stride, n, "stride") if stride not in (None, [], ()) else kernel
    padding, dilation = ntuple(padding, n, "padding"), ntuple(dilation, n, "dilation")
    extra = [0] * n
    if ceil_mode:
        extra = [ceil_extra(*args) for args in zip(x.shape[2:], kernel, stride, padding, dilation)]
    return Window(kernel, stride, padding, dilation, extra)


NO_INDICES = ("max pooling with return_indices=True is not supported (tract has no argmax pooling); "
              "use return_indices=False")


def _max_pool(ctx: EmitContext, input: Value, kernel_size, stride, padding, dilation, ceil_mode: bool,
              return_indices: bool, n: int) -> Value:
    if return_indices:
        raise EmitError(NO_INDICES)
    x, unbatched = add_batch(ctx, input, n)
    win = window(x, n, kernel_size, stride, padding, dilation, ceil_mode)
    y = ctx.op("max_pool", x, border="ignore", **win.attrs(), out_shape=node_shape(ctx, int(unbatched)))
    return drop_batch(ctx, y, unbatched)


@register(F.max_pool1d, torch.max_pool1d)
def max_pool1d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool1d(Tensor input, int[1] kernel_size, int[1]? stride=None, int[1] padding=0, int[1] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


@register(F.max_pool2d, torch.max_pool2d)
def max_pool2d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool2d(Tensor input, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


@register(F.max_pool3d, torch.max_pool3d)
def max_pool3d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool3d(Tensor input, int[3] kernel_size, int[3]? stride=None, int[3] padding=0, int[3] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3)


@register(F.max_pool1d_with_indices, F.max_pool2d_with_indices, F.max_pool3d_with_indices)
def max_pool_with_indices(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1,
                          ceil_mode=False, return_indices=False):
    """max_pool2d_with_indices(Tensor input, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, bool return_indices=False) -> (Tensor, Tensor)"""
    raise EmitError(NO_INDICES)


def window_counts(win: Window, sizes: list) -> np.ndarray:
    """torch's avg divisor with count_include_pad: the window clipped to input + padding (not ceil's extra)."""
    counts = np.ones([1, 1], dtype=np.float64)
    for size, k, s, p, e in zip(sizes, win.kernel, win.stride, win.padding, win.extra):
        starts = np.arange((size + 2 * p + e - k) // s + 1) * s - p
        axis = np.minimum(starts + k, size + p) - starts
        counts = counts[..., None] * axis
    return counts


def _avg_pool(ctx: EmitContext, input: Value, kernel_size, stride, padding, ceil_mode: bool, count_include_pad: bool,
              divisor_override, n: int) -> Value:
    """avg_pool, or a sum (box) divided by torch's divisor where NNEF's borders cannot express it."""
    x, unbatched = add_batch(ctx, input, n)
    win = window(x, n, kernel_size, stride, padding, 1, ceil_mode)
    shape = node_shape(ctx, int(unbatched))
    if divisor_override is None and not (count_include_pad and any(win.extra)):
        border = "constant" if count_include_pad else "ignore"
        y = ctx.op("avg_pool", x, border=border, **win.attrs(), out_shape=shape)
    else:
        total = ctx.op("box", x, border="constant", normalize=False, **win.attrs(), out_shape=shape)
        divisor = float(divisor_override) if divisor_override else ctx.const(
            window_counts(win, static_dims(x.shape[2:], "avg pooling with ceil_mode")), x.dtype)
        y = ctx.op("div", total, divisor, out_shape=shape)
    return drop_batch(ctx, y, unbatched)


@register(torch.avg_pool1d)
def avg_pool1d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """avg_pool1d(Tensor input, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool ceil_mode=False, bool count_include_pad=True) -> Tensor"""
    return _avg_pool(ctx, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


@register(F.avg_pool2d)
def avg_pool2d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """avg_pool2d(Tensor input, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(ctx, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


@register(F.avg_pool3d)
def avg_pool3d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """avg_pool3d(Tensor input, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(ctx, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


# adaptive pools -------------------------------------------------------------------------
ADAPTIVE_POOL = {"max": ("max_pool", "ignore"), "avg": ("avg_pool", "constant")}  # op and border
ADAPTIVE_REDUCE = {"max": "max_reduce", "avg": "mean_reduce"}


def adaptive_windows(size: int, out: int) -> list:
    """torch's adaptive windows [floor(i*size/out), ceil((i+1)*size/out)) along one axis."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_axis(ctx: EmitContext, x: Value, axis: int, out: int, kind: str) -> Value:
    """Adaptive pooling along one axis whose size ``out`` does not divide: a matrix of window
    means for avg, one slice and max_reduce per output for max."""
    windows = adaptive_windows(x.shape[axis], out)
    if kind == "avg":
        m = np.zeros((out, x.shape[axis]))
        for i, (begin, end) in enumerate(windows):
            m[i, begin:end] = 1.0 / (end - begin)
        return apply_along(ctx, x, axis, m)
    parts = []
    for begin, end in windows:
        part = ctx.op("slice", x, axes=[axis], begin=[begin], end=[end], out_shape=with_dim(x.shape, axis, end - begin))
        parts.append(ctx.op("max_reduce", part, axes=[axis], out_shape=with_dim(x.shape, axis, 1)))
    return ctx.op("concat", parts, axis=axis, out_shape=with_dim(x.shape, axis, out))


def adaptive_pool(ctx: EmitContext, input: Value, output_size, n: int, kind: str) -> Value:
    """Adaptive pooling: a reduce for output 1, a pool when the sizes divide, else axis by axis."""
    x, unbatched = add_batch(ctx, input, n)
    sizes = [output_size] * n if isinstance(output_size, int) else list(output_size)
    outs = [d if o is None else o for o, d in zip(sizes, x.shape[2:])]
    shape = node_shape(ctx, int(unbatched))
    if all(o == 1 for o in outs):
        y = ctx.op(ADAPTIVE_REDUCE[kind], x, axes=list(range(2, n + 2)), out_shape=shape)
        return drop_batch(ctx, y, unbatched)
    ins = static_dims(x.shape[2:], f"adaptive pooling to {outs}")
    if all(i % o == 0 for i, o in zip(ins, outs)):
        pool, border = ADAPTIVE_POOL[kind]
        k = [i // o for i, o in zip(ins, outs)]
        y = ctx.op(pool, x, size=[1, 1] + k, border=border, padding=[(0, 0)] * (n + 2), stride=[1, 1] + k,
                   dilation=[1] * (n + 2), out_shape=shape)
        return drop_batch(ctx, y, unbatched)
    for axis, (i, o) in enumerate(zip(ins, outs), start=2):
        if i != o:
            x = _adaptive_axis(ctx, x, axis, o, kind)
    return drop_batch(ctx, x, unbatched)


def _no_indices(return_indices: bool) -> None:
    if return_indices:
        raise EmitError(NO_INDICES)


@register(F.adaptive_max_pool1d_with_indices, F.adaptive_max_pool2d_with_indices, F.adaptive_max_pool3d_with_indices)
def adaptive_max_pool_with_indices(ctx: EmitContext, input: Value, output_size, return_indices=False):
    """adaptive_max_pool2d_with_indices(Tensor input, int[2] output_size, bool return_indices=False) -> (Tensor, Tensor)"""
    raise EmitError(NO_INDICES)


@register(torch.adaptive_avg_pool1d)
def adaptive_avg_pool1d(ctx: EmitContext, input: Value, output_size):
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return adaptive_pool(ctx, input, output_size, 1, "avg")


@register(F.adaptive_avg_pool2d)
def adaptive_avg_pool2d(ctx: EmitContext, input: Value, output_size):
    """adaptive_avg_pool2d(Tensor input, SymInt[2] output_size) -> Tensor"""
    return adaptive_pool(ctx, input, output_size, 2, "avg")


@register(F.adaptive_avg_pool3d)
def adaptive_avg_pool3d(ctx: EmitContext, input: Value, output_size):
    """adaptive_avg_pool3d(Tensor input, SymInt[3] output_size) -> Tensor"""
    return adaptive_pool(ctx, input, output_size, 3, "avg")


@register(F.adaptive_max_pool1d)
def adaptive_max_pool1d(ctx: EmitContext, input: Value, output_size, return_indices=False):
    """adaptive_max_pool1d(Tensor input, int[1] output_size, bool return_indices=False) -> Tensor"""
    _no_indices(return_indices)
    return adaptive_pool(ctx, input, output_size, 1, "max")


@register(F.adaptive_max_pool2d)
def adaptive_max_pool2d(ctx: EmitContext, input: Value, output_size, return_indices=False):
    """adaptive_max_pool2d(Tensor input, int[2] output_size, bool return_indices=False) -> Tensor"""
    _no_indices(return_indices)
    return adaptive_pool(ctx, input, output_size, 2, "max")


@register(F.adaptive_max_pool3d)
def adaptive_max_pool3d(ctx: EmitContext, input: Value, output_size, return_indices=False):
    """adaptive_max_pool3d(Tensor input, int[3] output_size, bool return_indices=False) -> Tensor"""
    _no_indices(return_indices)
    return adaptive_pool(ctx, input, output_size, 3, "max")


# padding --------------------------------------------------------------------------------
def pad_pairs(x: Value, pad) -> list:
    """torch's flat ``pad`` (last axis first) as (before, after) for every axis."""
    if len(pad) % 2 or len(pad) // 2 > rank(x) or not all(isinstance(p, int) for p in pad):
        raise EmitError(f"pad must hold an even number (at most 2 * rank) of static ints, got {pad!r}")
    pairs = [(0, 0)] * rank(x)
    for i in range(len(pad) // 2):
        pairs[rank(x) - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return pairs


def crop_negative(ctx: EmitContext, x: Value, pairs: list) -> tuple:
    """Negative pads crop: slice them off and return ``(x, pairs without negatives)``."""
    axes = [a for a, (b, e) in enumerate(pairs) if b < 0 or e < 0]
    if not axes:
        return x, pairs
    begin = [max(0, -pairs[a][0]) for a in axes]
    end = [x.shape[a] + min(0, pairs[a][1]) for a in axes]
    shape = tuple(x.shape)
    for a, b, e in zip(axes, begin, end):
        shape = with_dim(shape, a, e - b)
    y = ctx.op("slice", x, axes=axes, begin=begin, end=end, out_shape=shape)
    return y, [(max(0, b), max(0, e)) for b, e in pairs]


def pad_op(ctx: EmitContext, x: Value, pairs: list, mode: str, value) -> Value:
    """NNEF pad; torch's modes constant, reflect and replicate are NNEF border names too."""
    shape = tuple(d + b + e for d, (b, e) in zip(x.shape, pairs))
    return ctx.op("pad", x, padding=pairs, border=mode, value=float(value or 0.0), out_shape=shape)


def _edges(ctx: EmitContext, x: Value, axis: int, before: int, after: int, mode: str) -> tuple:
    """The pieces that replicate / circular padding puts before and after ``x`` along ``axis``."""
    size = x.shape[axis]

    def piece(begin, end, times: int) -> Value:
        part = ctx.op("slice", x, axes=[axis], begin=[begin], end=[end], out_shape=with_dim(x.shape, axis, end - begin))
        if times == 1:
            return part
        repeats = list(with_dim((1,) * rank(x), axis, times))
        return ctx.op("tile", part, repeats=repeats, out_shape=with_dim(x.shape, axis, times))

    if mode == "circular":
        return piece(size - before, size, 1), piece(0, after, 1)
    return piece(0, 1, before), piece(size - 1, size, after)


def pad_by_concat(ctx: EmitContext, x: Value, pairs: list, mode: str) -> Value:
    """Replicate or circular padding as slices (tiled for replicate) concatenated around ``x``."""
    for axis, (before, after) in enumerate(pairs):
        if before == after == 0:
            continue
        head, tail = _edges(ctx, x, axis, before, after, mode)
        parts = ([head] if before else []) + [x] + ([tail] if after else [])
        x = ctx.op("concat", parts, axis=axis, out_shape=with_dim(x.shape, axis, x.shape[axis] + before + after))
    return x


def khronos_pad(ctx: EmitContext, x: Value, pairs: list, mode: str, value) -> Value:
    """NOTE: the nnef_tools interpreter pads only rank 3-5 tensors whose first two axes are not
    padded: other cases move the padded axes last and fold the others into one axis."""
    r = rank(x)
    padded = [a for a in range(r) if pairs[a] != (0, 0)]
    if not padded or (3 <= r <= 5 and not {0, 1} & set(padded)):
        return pad_op(ctx, x, pairs, mode, value) if padded else x
    if len(padded) > 3:
        raise EmitError(f"padding {len(padded)} axes at once is not supported for Khronos NNEF (3 at most)")
    kept = [a for a in range(r) if a not in padded]
    perm = kept + padded
    kept_dims = static_dims([x.shape[a] for a in kept], "padding leading axes for Khronos NNEF")
    y = transpose(ctx, x, perm)
    folded = (1, math.prod(kept_dims)) + tuple(x.shape[a] for a in padded)
    y = ctx.op("reshape", y, shape=list(folded), out_shape=folded)
    y = pad_op(ctx, y, [(0, 0), (0, 0)] + [pairs[a] for a in padded], mode, value)
    unfolded = tuple(kept_dims) + tuple(y.shape[2:])
    y = ctx.op("reshape", y, shape=list(unfolded), out_shape=unfolded)
    return transpose(ctx, y, [perm.index(a) for a in range(r)])


def _check_pad_mode(mode: str) -> None:
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise EmitError(f"F.pad mode {mode!r} is not supported")


@register(F.pad, target="tract")
def pad_tract(ctx: EmitContext, input: Value, pad, mode="constant", value=None):
    """pad(Tensor input, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    _check_pad_mode(mode)
    x, pairs = crop_negative(ctx, input, pad_pairs(input, pad))
    if mode in ("replicate", "circular"):
        return pad_by_concat(ctx, x, pairs, mode)
    return pad_op(ctx, x, pairs, mode, value)


@register(F.pad, target="khronos")
def pad_khronos(ctx: EmitContext, input: Value, pad, mode="constant", value=None):
    """pad(Tensor input, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    _check_pad_mode(mode)
    x, pairs = crop_negative(ctx, input, pad_pairs(input, pad))
    if mode == "circular":
        return pad_by_concat(ctx, x, pairs, mode)
    return khronos_pad(ctx, x, pairs, mode, value)


# interpolation --------------------------------------------------------------------------
CUBIC_A = -0.75  # torch's bicubic coefficient


def source_scale(n_in: int, n_out: int, scale_factor: Optional[float], align_corners: bool = False) -> np.float32:
    """torch's input/output step along an axis (``area_pixel_compute_scale``), in float32 as torch computes it."""
    if align_corners:
        return np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0.0)
    if scale_factor:
        return np.float32(1.0 / scale_factor)
    return np.float32(n_in) / np.float32(n_out)


def nearest_indices(n_in: int, n_out: int, scale_factor: Optional[float], exact: bool) -> np.ndarray:
    """Source index of each output position for mode 'nearest' / 'nearest-exact'."""
    dst = np.arange(n_out, dtype=np.float32) + np.float32(0.5 if exact else 0.0)
    src = np.floor(dst * source_scale(n_in, n_out, scale_factor))
    return np.minimum(src.astype(np.int64), n_in - 1)


def _cubic_weights(t: np.ndarray) -> list:
    """Weights of the 4 taps (offsets -1, 0, 1, 2) of torch's cubic convolution at fraction ``t``."""
    a = CUBIC_A

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def resample_matrix(n_in: int, n_out: int, scale_factor: Optional[float], align_corners: bool,
                    cubic: bool) -> np.ndarray:
    """The [n_out, n_in] matrix of torch's linear or cubic interpolation along one axis."""
    scale = source_scale(n_in, n_out, scale_factor, align_corners)
    dst = np.arange(n_out, dtype=np.float32)
    src = dst * scale if align_corners else (dst + np.float32(0.5)) * scale - np.float32(0.5)
    if not cubic:
        src = np.maximum(src, np.float32(0.0))
    base = np.floor(src).astype(np.int64)
    t = (src - base).astype(np.float64)
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    taps = zip(range(-1, 3), _cubic_weights(t)) if cubic else [(0, 1 - t), (1, t)]
    for offset, weight in taps:
        np.add.at(m, (rows, np.clip(base + offset, 0, n_in - 1)), weight)
    return m


def _integer_factors(ins: list, outs: list, scales: list) -> Optional[list]:
    """Per-axis integer upscale factors when nearest resampling is a plain repeat, else None."""
    factors = []
    for n_in, n_out, sf in zip(ins, outs, scales):
        if sf is not None:
            f = int(sf) if float(sf).is_integer() and sf >= 1 else None
        elif isinstance(n_in, int) and isinstance(n_out, int) and n_out % n_in == 0:
            f = n_out // n_in
        else:
            f = _symbolic_factor(n_in, n_out)
        if f is None:
            return None
        factors.append(f)
    return factors


def _symbolic_factor(n_in, n_out) -> Optional[int]:
    """k when the dynamic size ``n_out`` is exactly ``k * n_in`` (size=(2 * H, ...)), else None."""
    if not isinstance(n_in, SymDim) or not isinstance(n_out, SymDim) or not n_in.terms:
        return None
    mono, coef = next(iter(n_in.terms.items()))
    k, rem = divmod(n_out.terms.get(mono, 0), coef)
    if rem or k < 1 or simplify(n_out - n_in * k) != 0:
        return None
    return k


def repeat_nearest(ctx: EmitContext, x: Value, factors: list, outs: list) -> Value:
    """Integer nearest upsampling: a unit axis after each spatial axis, tiled, then merged (dynamic-friendly)."""
    n = len(factors)
    inner = [3 + 2 * i for i in range(n)]
    shape = list(x.shape[:2])
    for d in x.shape[2:]:
        shape += [d, 1]
    y = ctx.op("unsqueeze", x, axes=inner, out_shape=tuple(shape))
    repeats = [1] * (2 + 2 * n)
    for axis, f in zip(inner, factors):
        repeats[axis], shape[axis] = f, f
    y = ctx.op("tile", y, repeats=repeats, out_shape=tuple(shape))
    # one merge per axis pair with -1: the traced output sizes may be unknown (None) on dynamic axes
    for i, (d, f) in enumerate(zip(x.shape[2:], factors)):
        merged = outs[i] if outs[i] is not None else (None if d is None else d * f)
        shape = shape[:2 + i] + [merged] + shape[4 + i:]
        y = ctx.op("reshape", y, shape=[-1], axis_start=2 + i, axis_count=2, out_shape=tuple(shape))
    return y


def gather_nearest(ctx: EmitContext, x: Value, outs: list, scales: list, exact: bool) -> Value:
    """Nearest resampling with any static sizes: one gather of constant indices per axis."""
    ins = static_dims(x.shape[2:], "nearest interpolation with a non-integer factor")
    for axis, (n_in, n_out, sf) in enumerate(zip(ins, outs, scales), start=2):
        idx = nearest_indices(n_in, n_out, sf, exact)
        if not np.array_equal(idx, np.arange(n_in)):
            x = ctx.call("nnef.gather", x, ctx.const(idx), axis, with_dim(x.shape, axis, n_out))
    return x


def linear_upsample_axis(ctx: EmitContext, x: Value, axis: int, k: int) -> Value:
    """Linear upsampling by an integer factor ``k`` along ``axis`` of any (dynamic) length, with
    align_corners=False: output ``k*i + j`` blends ``x[i]`` with its neighbour at the fixed offset
    ``(j + 0.5) / k - 0.5``; edge-replicated neighbours give torch's clamping at both ends."""
    from .shape import concat, slice_axis

    if k == 1:
        return x
    n = x.shape[axis]
    prev = concat(ctx, [slice_axis(ctx, x, axis, 0, 1), slice_axis(ctx, x, axis, 0, n - 1)], axis)
    nxt = concat(ctx, [slice_axis(ctx, x, axis, 1, n), slice_axis(ctx, x, axis, n - 1, n)], axis)
    expanded = tuple(x.shape[:axis + 1]) + (1,) + tuple(x.shape[axis + 1:])
    phases = []
    for j in range(k):
        t = (j + 0.5) / k - 0.5
        other = prev if t < 0 else nxt
        w = abs(t)
        y = ctx.op("add", ctx.op("mul", x, float(1 - w), out_shape=x.shape),
                   ctx.op("mul", other, float(w), out_shape=x.shape), out_shape=x.shape)
        phases.append(ctx.op("unsqueeze", y, axes=[axis + 1], out_shape=expanded))
    stacked = concat(ctx, phases, axis + 1)
    return ctx.op("reshape", stacked, shape=[-1], axis_start=axis, axis_count=2,
                  out_shape=with_dim(x.shape, axis, simplify(n * k)))


def _axis_scales(scale_factor, recompute_scale_factor, n: int) -> list:
    """The scale factor torch uses for source indices along each axis (None: taken from the sizes)."""
    if scale_factor is None or recompute_scale_factor:
        return [None] * n
    return [float(s) for s in (scale_factor if isinstance(scale_factor, (list, tuple)) else [scale_factor] * n)]


@register(F.interpolate)
def interpolate(ctx: EmitContext, input: Value, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """interpolate(Tensor input, int[]? size=None, float[]? scale_factor=None, str mode='nearest', bool? align_corners=None, bool? recompute_scale_factor=None, bool antialias=False) -> Tensor"""
    n = rank(input) - 2
    outs = list(node_shape(ctx)[2:])
    scales = _axis_scales(scale_factor, recompute_scale_factor, n)
    if antialias:
        raise EmitError("F.interpolate with antialias=True is not supported")
    if mode in ("nearest", "nearest-exact"):
        factors = _integer_factors(list(input.shape[2:]), outs, scales)
        if factors is not None:
            return repeat_nearest(ctx, input, factors, outs)
        return gather_nearest(ctx, input, outs, scales, mode == "nearest-exact")
    if mode == "area":
        return adaptive_pool(ctx, input, outs, n, "avg")
    if mode not in ("linear", "bilinear", "bicubic", "trilinear"):
        raise EmitError(f"F.interpolate mode {mode!r} is not supported")
    if mode != "bicubic" and not align_corners and not all(isinstance(d, int) for d in input.shape[2:]):
        factors = _integer_factors(list(input.shape[2:]), outs, scales)
        if factors is not None and all(d is not None for d in input.shape[2:]):
            x = input
            for axis, k in enumerate(factors, start=2):
                x = linear_upsample_axis(ctx, x, axis, k)
            return x
    x = input
    ins = static_dims(input.shape[2:], f"{mode} interpolation with align_corners=True or a non-integer factor")
    for axis, (n_in, n_out, sf) in enumerate(zip(ins, outs, scales), start=2):
        m = resample_matrix(n_in, n_out, sf, bool(align_corners), mode == "bicubic")
        if m.shape[0] != m.shape[1] or not np.array_equal(m, np.eye(n_in)):
            x = apply_along(ctx, x, axis, m)
    return x


# pixel shuffle --------------------------------------------------------------------------
@register(torch.pixel_shuffle)
def pixel_shuffle(ctx: EmitContext, input: Value, upscale_factor: int):
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor"""
    r, c = upscale_factor, rank(input) - 3
    out = node_shape(ctx)
    split = tuple(input.shape[:c]) + (out[c], r, r) + tuple(input.shape[c + 1:])
    y = ctx.op("reshape", input, shape=[out[c], r, r], axis_start=c, axis_count=1, out_shape=split)
    perm = list(range(c)) + [c, c + 3, c + 1, c + 4, c + 2]
    y = transpose(ctx, y, perm)
    return ctx.op("reshape", y, shape=[out[c + 1], out[c + 2]], axis_start=c + 1, axis_count=4, out_shape=out)


@register(torch.pixel_unshuffle)
def pixel_unshuffle(ctx: EmitContext, input: Value, downscale_factor: int):
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor"""
    r, c = downscale_factor, rank(input) - 3
    out = node_shape(ctx)
    h, w = out[c + 1], out[c + 2]
    split = tuple(input.shape[:c + 1]) + (h, r, w, r)
    y = ctx.op("reshape", input, shape=[h, r, w, r], axis_start=c + 1, axis_count=2, out_shape=split)
    perm = list(range(c)) + [c, c + 2, c + 4, c + 1, c + 3]
    y = transpose(ctx, y, perm)
    return ctx.op("reshape", y, shape=[out[c]], axis_start=c, axis_count=3, out_shape=out)
