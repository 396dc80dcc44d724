"""Pooling: max, avg and adaptive pools (F.pad is in pad.py, F.interpolate and pixel_shuffle in resize.py).

NOTE: max pools use border 'ignore' (torch pads with -inf): tract reads 'constant' as
'ignore' anyway, but the Khronos interpreter pads 'constant' with 0. tract aborts the
process on a pool border other than 'constant'/'ignore'.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import dim_value, rank, tiled_from
from ..registry import register
from .conv import add_batch, drop_batch, node_shape, ntuple
from .tiled_operands import merged_tile_made_opaque

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


def apply_along(ctx: EmitContext, x: Value, axis: int, m) -> Value:
    """``m`` (an [n_out, n_in] matrix: a numpy constant, or a Value computed at run time) applied
    to ``x`` along ``axis``, by matmul (from the left for the second-to-last axis, from the right
    after moving the axis last otherwise)."""
    r = rank(x)
    if isinstance(m, Value):
        from ..helpers import cast

        m = cast(ctx, m, x.dtype) if m.dtype is not x.dtype else m
        c = m if r == 2 else ctx.op("unsqueeze", m, axes=list(range(r - 2)), out_shape=(1,) * (r - 2) + tuple(m.shape),
                                    out_dtype=m.dtype)
    else:
        c = ctx.const(m.reshape((1,) * (r - 2) + m.shape), x.dtype, name="resample")
    if ctx.profile.opaque_tiles_in_products:
        # an upsampling then an adaptive pool (see there); with a matrix computed from dynamic
        # sizes too: tract 0.23.9 never finished optimizing that product (fuzz seed 9030)
        x = merged_tile_made_opaque(ctx, x)
    if axis == r - 2 and tiled_from(ctx, x) is None:
        return ctx.op("matmul", c, x, transposeA=False, transposeB=False, out_shape=with_dim(x.shape, axis, m.shape[0]))
    perm = list(range(r))
    perm[axis], perm[r - 1] = r - 1, axis
    y = transpose(ctx, x, perm)
    # as any matmul: an operand broadcast by a tile (an expand) is multiplied untiled, see linalg._matmul
    from .linalg import _matmul

    y = _matmul(ctx, y, c, transpose_b=True)
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
    """Padding that torch's ceil_mode adds after an axis (a last window must start inside the input).

    On a dynamic axis it is the most ceil_mode can add, ``s - 1``: the pool then computes every
    window torch keeps and perhaps one more, which :func:`cut_windows` drops."""
    if not isinstance(length, int):
        return s - 1
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


@dataclasses.dataclass
class Pooling:
    """torch's options of a max or avg pool's window (its arguments after the input)."""
    kernel_size: object
    stride: object = None
    padding: object = 0
    dilation: object = 1
    ceil_mode: bool = False

    def window(self, x: Value, n: int) -> Window:
        return window(x, n, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


def pooled_shape(x: Value, win: Window) -> tuple:
    """The shape a pool with ``win`` gives on ``x`` (floor division of the padded spans)."""
    from ...ir import SymDim, simplify

    out = list(x.shape[:2])
    for size, k, s, p, d, e in zip(x.shape[2:], win.kernel, win.stride, win.padding, win.dilation, win.extra):
        total = size + 2 * p + e - (d * (k - 1) + 1)
        out.append(simplify(SymDim.floordiv(total, s) + 1) if not isinstance(total, int) else total // s + 1)
    return tuple(out)


def cut_windows(ctx: EmitContext, y: Value, shape) -> Value:
    """``y`` cut to the traced result ``shape`` on the spatial axes where a dynamic ceil_mode
    computed one window more than torch keeps (torch drops a window that would start in the
    padding); an error when the traced sizes are unknown."""
    from ...ir import simplify
    from .shape import slice_axes

    if shape is None or any(d is None for d in shape):
        raise EmitError("ceil_mode=True on a dynamic size needs the traced output size, which is unknown here")
    cuts = [(ax, 0, want, 1) for ax, (have, want) in enumerate(zip(y.shape, shape))
            if ax >= 2 and simplify(have - want) != 0]
    return slice_axes(ctx, y, cuts) if cuts else y


NO_INDICES = ("max pooling with return_indices=True is not supported (tract has no argmax pooling); "
              "use return_indices=False")


def _max_pool(ctx: EmitContext, input: Value, opts: Pooling, return_indices: bool, n: int) -> Value:
    if return_indices:
        raise EmitError(NO_INDICES)
    x, unbatched = add_batch(ctx, input, n)
    win = opts.window(x, n)
    shape = node_shape(ctx, int(unbatched))
    if opts.ceil_mode and not all(isinstance(d, int) for d in x.shape[2:]):
        y = ctx.op("max_pool", x, border="ignore", **win.attrs(), out_shape=pooled_shape(x, win))
        y = cut_windows(ctx, y, shape)
    else:
        y = ctx.op("max_pool", x, border="ignore", **win.attrs(), out_shape=shape)
    return drop_batch(ctx, y, unbatched)


@register(F.max_pool1d, torch.max_pool1d)
def max_pool1d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool1d(Tensor input, int[1] kernel_size, int[1]? stride=None, int[1] padding=0, int[1] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, Pooling(kernel_size, stride, padding, dilation, ceil_mode), return_indices, 1)


@register(F.max_pool2d, torch.max_pool2d)
def max_pool2d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool2d(Tensor input, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, Pooling(kernel_size, stride, padding, dilation, ceil_mode), return_indices, 2)


@register(F.max_pool3d, torch.max_pool3d)
def max_pool3d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """max_pool3d(Tensor input, int[3] kernel_size, int[3]? stride=None, int[3] padding=0, int[3] dilation=1, bool ceil_mode=False, bool return_indices=False) -> Tensor"""
    return _max_pool(ctx, input, Pooling(kernel_size, stride, padding, dilation, ceil_mode), return_indices, 3)


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


def _avg_pool(ctx: EmitContext, input: Value, opts: Pooling, count_include_pad: bool, divisor_override,
              n: int) -> Value:
    """avg_pool, or a sum (box) divided by torch's divisor where NNEF's borders cannot express it."""
    x, unbatched = add_batch(ctx, input, n)
    win = opts.window(x, n)
    shape = node_shape(ctx, int(unbatched))
    if opts.ceil_mode and not all(isinstance(d, int) for d in x.shape[2:]):
        # dynamic ceil_mode: torch's divisor (count_include_pad) counts the window within the input
        # and its padding, not ceil's extra: pad with zeros first, then pool ignoring the extra
        if divisor_override is None and count_include_pad and any(win.padding):
            pads = [p for q in reversed(win.padding) for p in (q, q)]
            x = ctx.call("F.pad", x, pads)
            win = dataclasses.replace(win, padding=[0] * n)
        if divisor_override is None:
            y = ctx.op("avg_pool", x, border="ignore", **win.attrs(), out_shape=pooled_shape(x, win))
        else:
            total = ctx.op("box", x, border="constant", normalize=False, **win.attrs(), out_shape=pooled_shape(x, win))
            y = ctx.op("div", total, float(divisor_override), out_shape=total.shape)
        y = cut_windows(ctx, y, shape)
    elif divisor_override is None and not (count_include_pad and any(win.extra)):
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
    return _avg_pool(ctx, input, Pooling(kernel_size, stride, padding, 1, ceil_mode), count_include_pad, None, 1)


@register(F.avg_pool2d)
def avg_pool2d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """avg_pool2d(Tensor input, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    opts = Pooling(kernel_size, stride, padding, 1, ceil_mode)
    return _avg_pool(ctx, input, opts, count_include_pad, divisor_override, 2)


@register(F.avg_pool3d)
def avg_pool3d(ctx: EmitContext, input: Value, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """avg_pool3d(Tensor input, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    opts = Pooling(kernel_size, stride, padding, 1, ceil_mode)
    return _avg_pool(ctx, input, opts, count_include_pad, divisor_override, 3)


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


def bin_mask(ctx: EmitContext, size, out) -> tuple:
    """``(mask, begin, end)``: the [out, size] bool matrix of torch's adaptive windows, computed at
    run time where ``size`` or ``out`` is dynamic (row i is true on ``begin[i] <= h < end[i]``, for
    ``begin[i] = floor(i*size/out)``, ``end[i] = ceil((i+1)*size/out)``, both [out, 1] i64)."""
    from ...ir import DType
    from ..helpers import compare, ew

    n = dim_value(ctx, size, DType.I64)  # [1]
    if isinstance(out, int):
        i = ctx.const(np.arange(out, dtype=np.int64).reshape(out, 1), DType.I64)
        i_next = ctx.const(np.arange(1, out + 1, dtype=np.int64).reshape(out, 1), DType.I64)
        o, o_less = out, out - 1
    else:  # a dynamic number of windows (area interpolation to another tensor's size)
        i = ctx.op("unsqueeze", ctx.call("nnef.range", 0, out, 1, DType.I64, (out,)), axes=[1], out_shape=(out, 1),
                   out_dtype=DType.I64)
        i_next = ew(ctx, "add", i, 1)
        o, o_less = dim_value(ctx, out, DType.I64), dim_value(ctx, out - 1, DType.I64)
    # integer division of non-negative numbers: exact floors (a float division is not, in tract)
    begin = ew(ctx, "div", ew(ctx, "mul", i, n), o)  # [out, 1]
    end = ew(ctx, "div", ew(ctx, "add", ew(ctx, "mul", i_next, n), o_less), o)
    h = ctx.call("nnef.range", 0, size, 1, DType.I64, (size,))
    h = ctx.op("unsqueeze", h, axes=[0], out_shape=(1, size), out_dtype=DType.I64)  # [1, size]
    # NOTE: compare differences with 0: tract fails to run a comparison of two symbolic-shape tensors
    after = compare(ctx, "ge", ew(ctx, "sub", h, begin), 0)
    before = compare(ctx, "lt", ew(ctx, "sub", h, end), 0)
    return ew(ctx, "and", after, before), begin, end


def _adaptive_axis_dynamic(ctx: EmitContext, x: Value, axis: int, out, kind: str) -> Value:
    """Adaptive pooling along an axis whose size or number of windows ``out`` is dynamic, with the
    windows computed at run time: a matmul
    with the matrix of window means for avg; for max, the input spread over the ``out`` windows
    (-inf outside each) and reduced with max_reduce."""
    from ...ir import DType
    from ..helpers import cast, ew, select

    size = x.shape[axis]
    mask, begin, end = bin_mask(ctx, size, out)
    if kind == "avg":
        count = cast(ctx, ew(ctx, "sub", end, begin), DType.F32)  # [out, 1], at least 1
        weights = ew(ctx, "div", cast(ctx, mask, DType.F32), count)
        return apply_along(ctx, x, axis, weights)
    r = rank(x)
    spread = tuple(x.shape[:axis]) + (1,) + tuple(x.shape[axis:])
    xs = ctx.op("unsqueeze", x, axes=[axis], out_shape=spread, out_dtype=x.dtype)
    mshape = (1,) * axis + (out, size) + (1,) * (r - axis - 1)
    m = ctx.op("reshape", mask, shape=list(mshape), out_shape=mshape, out_dtype=DType.BOOL)
    picked = select(ctx, m, xs, float("-inf"))  # [..., out, size, ...]
    reduced = ctx.op("max_reduce", picked, axes=[axis + 1], out_shape=with_dim(picked.shape, axis + 1, 1),
                     out_dtype=x.dtype)
    return ctx.op("squeeze", reduced, axes=[axis + 1], out_shape=with_dim(x.shape, axis, out), out_dtype=x.dtype)


def adaptive_pool(ctx: EmitContext, input: Value, output_size, n: int, kind: str) -> Value:
    """Adaptive pooling: a reduce for output 1, a pool when the sizes divide, else axis by axis."""
    x, unbatched = add_batch(ctx, input, n)
    sizes = [output_size] * n if isinstance(output_size, (int, SymDim)) else list(output_size)
    outs = [d if o is None else o for o, d in zip(sizes, x.shape[2:])]
    shape = node_shape(ctx, int(unbatched))
    if all(o == 1 for o in outs):
        y = ctx.op(ADAPTIVE_REDUCE[kind], x, axes=list(range(2, n + 2)), out_shape=shape)
        return drop_batch(ctx, y, unbatched)
    if not all(isinstance(d, int) for d in list(x.shape[2:]) + outs):
        # a dynamic axis or number of windows (area interpolation to another tensor's size, to
        # a size computed from S): its windows are computed at run time; static axes as below
        for axis, (i, o) in enumerate(zip(x.shape[2:], outs), start=2):
            if isinstance(o, int) and isinstance(i, int):
                if i != o:
                    x = _adaptive_axis(ctx, x, axis, o, kind)
            elif simplify(o - i) != 0:
                x = _adaptive_axis_dynamic(ctx, x, axis, o, kind)
        return drop_batch(ctx, x, unbatched)
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
