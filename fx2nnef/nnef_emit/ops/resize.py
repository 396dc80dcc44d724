"""Resampling: F.interpolate (nearest, linear, cubic, area) and pixel_shuffle / pixel_unshuffle."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import dim_value, rank
from ..registry import register
from .conv import node_shape
from .pool import adaptive_pool, apply_along, static_dims, transpose, with_dim


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


def _unknown_size(mode: str, scales: list) -> str:
    """Why an interpolation's output size on a dynamic axis is unknown, and what to do."""
    floats = [s for s in scales if isinstance(s, float) and not float(s).is_integer()]
    why = (f": torch rounds the size times the scale factor {floats[0]} down in floating point, which "
           "follows no integer formula the graph can compute at every size (a factor p/q such as 0.75 or 0.6 does); "
           "give size=, another scale factor, or drop that dim from dynamic_axes") if floats else ", unknown here"
    return f"{mode} interpolation on a dynamic size needs the traced output size{why}"


def gather_nearest(ctx: EmitContext, x: Value, outs: list, scales: list, exact: bool) -> Value:
    """Nearest resampling with any sizes: one gather per axis, of constant indices where the sizes
    are static, else of indices computed in the graph (:func:`nearest_indices_at_runtime`)."""
    for axis, (n_in, n_out, sf) in enumerate(zip(list(x.shape[2:]), outs, scales), start=2):
        if n_out is None or n_in is None:
            raise EmitError(_unknown_size("nearest", scales))
        if isinstance(n_in, int) and isinstance(n_out, int):
            idx = nearest_indices(n_in, n_out, sf, exact)
            if not np.array_equal(idx, np.arange(n_in)):
                x = ctx.call("nnef.gather", x, ctx.const(idx), axis, with_dim(x.shape, axis, n_out))
        elif sf is not None or simplify(n_out - n_in) != 0:
            idx = nearest_indices_at_runtime(ctx, n_in, n_out, sf, exact)
            x = ctx.call("nnef.gather", x, idx, axis, with_dim(x.shape, axis, n_out))
    return x


def nearest_indices_at_runtime(ctx: EmitContext, n_in, n_out, scale_factor: Optional[float], exact: bool) -> Value:
    """The [n_out] i64 source indices of nearest resampling over dynamic sizes, computed in the
    graph as torch computes them in float32: ``min(floor(dst * scale), n_in - 1)`` (``dst + 0.5``
    for nearest-exact), ``scale`` being ``1 / scale_factor`` rounded to f32, else ``n_in / n_out``
    rounded once to f32. That quotient is taken in f64 and cast: tract's f32 division is off by
    an ulp in about 1 case in 4, which moves a floor at an integer point, while its f64 division
    is correctly rounded (checked on 20000 pairs of sizes), and an f64 quotient of integers below
    2**24 rounds to f32 as the f32 division does."""
    from ...ir import DType
    from ..helpers import cast, ew, un

    if scale_factor:
        scale = float(np.float32(1.0 / scale_factor))
    else:
        q = ew(ctx, "div", cast(ctx, dim_value(ctx, n_in, DType.I64), DType.F64),
               cast(ctx, dim_value(ctx, n_out, DType.I64), DType.F64))
        scale = cast(ctx, q, DType.F32)  # [1]
    dst = ctx.call("nnef.range", 0, n_out, 1, DType.F32, (n_out,))
    if exact:
        dst = ew(ctx, "add", dst, 0.5)
    src = cast(ctx, un(ctx, "floor", ew(ctx, "mul", dst, scale)), DType.I64)
    last = n_in - 1 if isinstance(n_in, int) else ew(ctx, "sub", dim_value(ctx, n_in, DType.I64), 1)
    return ew(ctx, "min", src, last)


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


def _runtime_f32(ctx: EmitContext, d):
    """A size as an f32 operand: a number for a static size, a [1] tensor for a dynamic one."""
    from ...ir import DType

    if isinstance(d, int):
        return float(d)
    return ctx.call("nnef.cast", dim_value(ctx, d, DType.I64), DType.F32, (1,))


def _positions(ctx: EmitContext, n, as_column: bool) -> Value:
    """0, 1, ..., n - 1 in f32, shaped [n, 1] (``as_column``) or [1, n]; n static or dynamic."""
    from ...ir import DType

    shape = (n, 1) if as_column else (1, n)
    if isinstance(n, int):
        return ctx.const(np.arange(n, dtype=np.float32).reshape(shape), DType.F32)
    r = ctx.call("nnef.range", 0, n, 1, DType.F32, (n,))
    return ctx.op("unsqueeze", r, axes=[1 if as_column else 0], out_shape=shape, out_dtype=DType.F32)


def _source_positions(ctx: EmitContext, n_in, n_out, scale_factor: Optional[float], align_corners: bool) -> Value:
    """torch's ``area_pixel_compute_source_index`` for every output position, computed at run
    time, unclamped: an [n_out, 1] f32 tensor. The step is ``(n_in - 1) / (n_out - 1)`` (0 for
    one output) with ``align_corners``, else ``1 / scale_factor`` when given (a number, or a
    Value computed at run time), else ``n_in / n_out``."""
    from ...ir import DType
    from ..helpers import cast, ew

    dst = _positions(ctx, n_out, as_column=True)
    scale = _source_step(ctx, n_in, n_out, scale_factor, align_corners)
    if align_corners:
        return ew(ctx, "mul", dst, scale)
    return ew(ctx, "sub", ew(ctx, "mul", ew(ctx, "add", dst, 0.5), scale), 0.5)


def _source_step(ctx: EmitContext, n_in, n_out, scale_factor, align_corners: bool):
    """torch's ``area_pixel_compute_scale``: ``(n_in - 1) / (n_out - 1)`` (0 for one output) with
    ``align_corners``, else ``1 / scale_factor`` when given (a number, or a Value computed at run
    time), else ``n_in / n_out``; a number, or a [1] f32 tensor when a size is dynamic."""
    from ...ir import DType
    from ..helpers import cast, ew

    def num(a, op, b):  # a op b on numbers or tensors
        if not isinstance(a, Value) and not isinstance(b, Value):
            return float(np.float32({"sub": a - b, "div": np.float32(a) / np.float32(b) if b else 0.0,
                                     "max": max(a, b)}[op]))
        if not isinstance(a, Value):
            a = ctx.const(np.full([1], a, dtype=np.float32), DType.F32)
        return ew(ctx, op, a, b)

    if align_corners:  # (n_in - 1) / (n_out - 1), and 0 for one output (every output reads pixel 0)
        last = _runtime_f32(ctx, n_in - 1) if isinstance(n_in, SymDim) else float(n_in - 1)
        steps = _runtime_f32(ctx, n_out - 1) if isinstance(n_out, SymDim) else float(n_out - 1)
        return num(last, "div", num(steps, "max", 1.0))
    if isinstance(scale_factor, Value):  # computed from sizes at run time (h / N): 1 / scale_factor
        return ew(ctx, "div", ctx.const(np.ones([1], dtype=np.float32), DType.F32),
                  cast(ctx, scale_factor, DType.F32))
    if scale_factor:
        return float(np.float32(1.0 / scale_factor))
    return num(_runtime_f32(ctx, n_in), "div", _runtime_f32(ctx, n_out))


def linear_matrix_at_runtime(ctx: EmitContext, n_in, n_out, scale_factor: Optional[float],
                             align_corners: bool) -> Value:
    """The [n_out, n_in] matrix of torch's linear interpolation along an axis of dynamic size,
    computed at run time: output j reads the source position ``src_j`` (torch's
    ``area_pixel_compute_source_index``, clamped to [0, n_in - 1] as torch's clamped neighbour
    index amounts to), with weight ``max(0, 1 - |src_j - h|)`` on pixel h, which are torch's two
    weights ``1 - t`` and ``t`` on the pixels around ``src_j``."""
    from ...ir import DType
    from ..helpers import ew

    src = _source_positions(ctx, n_in, n_out, scale_factor, align_corners)
    last = _runtime_f32(ctx, n_in - 1) if isinstance(n_in, SymDim) else float(n_in - 1)
    src = ew(ctx, "min", ew(ctx, "max", src, 0.0), last)  # [n_out, 1]
    h = _positions(ctx, n_in, as_column=False)
    dist = ctx.op("abs", ew(ctx, "sub", src, h), out_dtype=DType.F32, out_shape=(n_out, n_in))
    return ew(ctx, "max", ew(ctx, "sub", 1.0, dist), 0.0)


def antialias_matrix_at_runtime(ctx: EmitContext, n_in, n_out, scale_factor, mode: str, align_corners: bool) -> Value:
    """The [n_out, n_in] matrix of torch's antialiased resampling along an axis of dynamic size,
    computed at run time. torch weighs pixel h of output j by ``f((h - c_j + 0.5) * inv)``, with
    the centre ``c_j = scale * (j + 0.5)``, ``inv = 1 / max(scale, 1)`` and the filter f (a triangle
    for bilinear, the cubic kernel with a = -0.5 for bicubic), over a window that holds every
    pixel of the input where f is not 0 and no other (no edge clamping), then divides each row by
    its sum. So f over every pixel, normalised per row, is torch's matrix; it has no floor and is
    continuous in the scale, so an ulp of difference in tract's scale moves the result by about
    an ulp."""
    from ...ir import DType
    from ..helpers import ew
    from .reduce import reduce

    scale = _source_step(ctx, n_in, n_out, scale_factor, align_corners)
    centre = ew(ctx, "mul", ew(ctx, "add", _positions(ctx, n_out, as_column=True), 0.5), scale)  # [n_out, 1]
    if isinstance(scale, Value):
        inv = ew(ctx, "div", ctx.const(np.ones([1], dtype=np.float32), DType.F32), ew(ctx, "max", scale, 1.0))
    else:
        inv = float(np.float32(1.0) / np.float32(max(scale, 1.0)))
    offsets = ew(ctx, "mul", ew(ctx, "add", ew(ctx, "sub", _positions(ctx, n_in, as_column=False), centre), 0.5), inv)
    if mode == "bilinear":
        d = ctx.op("abs", offsets, out_dtype=DType.F32, out_shape=offsets.shape)
        w = ew(ctx, "max", ew(ctx, "sub", 1.0, d), 0.0)
    else:
        w = _cubic_kernel(ctx, offsets, a=-0.5)
    total = reduce(ctx, "sum_reduce", w, [1], True)
    return ew(ctx, "div", w, total)


def _cubic_kernel(ctx: EmitContext, x: Value, a: float = CUBIC_A) -> Value:
    """torch's cubic convolution kernel K at the offsets ``x`` (any shape, f32): the inner piece
    on |x| <= 1, the outer piece on 1 <= |x| <= 2, 0 beyond. Written without comparisons as
    ``inner(min(d, 1)) + outer(clamp(d, 1, 2))`` with d = |x|: inner(1) = outer(1) = outer(2) = 0
    exactly in f32, so each piece vanishes where the other one holds, and K stays continuous."""
    from ..helpers import ew

    d = ctx.op("abs", x, out_dtype=x.dtype, out_shape=x.shape)
    u = ew(ctx, "min", d, 1.0)
    v = ew(ctx, "min", ew(ctx, "max", d, 1.0), 2.0)
    inner = ew(ctx, "add", ew(ctx, "mul", ew(ctx, "mul", ew(ctx, "sub", ew(ctx, "mul", u, a + 2), a + 3), u), u), 1.0)
    outer = ew(ctx, "sub", ew(ctx, "mul", ew(ctx, "add", ew(ctx, "mul", ew(ctx, "sub", ew(ctx, "mul", v, a), 5 * a),
                                                              v), 8 * a), v), 4 * a)
    return ew(ctx, "add", inner, outer)


def cubic_along_at_runtime(ctx: EmitContext, x: Value, axis: int, n_out, scale_factor: Optional[float],
                           align_corners: bool) -> Value:
    """torch's bicubic interpolation of ``x`` along ``axis`` to ``n_out``, one of the sizes dynamic,
    with the interpolation matrix computed at run time.

    torch reads the 4 pixels ``floor(src) - 1 .. floor(src) + 2`` around the (unclamped) source
    position ``src``, weighted by the cubic kernel K of their offsets, each index clamped to
    [0, n_in - 1]. As K vanishes at offsets of 2 and more, that is: every integer position p
    weighs ``K(src - p)`` and reads pixel ``clamp(p, 0, n_in - 1)``; src lies in
    [-0.5, n_in - 0.5], so only positions -2 .. n_in + 1 count. So ``x`` is first padded with two
    copies of its edge pixels on each side, then multiplied by the [n_out, n_in + 4] matrix
    ``K(src_j - p)``. No floor is taken: the matrix is continuous in src, and an ulp of
    difference in tract's ``src`` moves the result by about an ulp."""
    from ..helpers import ew
    from .shape import concat, slice_axis

    n_in = x.shape[axis]
    src = _source_positions(ctx, n_in, n_out, scale_factor, align_corners)  # [n_out, 1]
    head = slice_axis(ctx, x, axis, 0, 1)
    tail = slice_axis(ctx, x, axis, n_in - 1, n_in)
    padded = concat(ctx, [head, head, x, tail, tail], axis)
    p = ew(ctx, "sub", _positions(ctx, simplify(n_in + 4), as_column=False), 2.0)  # [1, n_in + 4]
    return apply_along(ctx, padded, axis, _cubic_kernel(ctx, ew(ctx, "sub", src, p)))


def antialias_matrix(n_in: int, n_out: int, scale_factor: Optional[float], mode: str, align_corners: bool) -> np.ndarray:
    """The [n_out, n_in] matrix of torch's antialiased resampling along one axis, read from torch
    itself: its resize of the ``n_in`` unit vectors (one per batch item, the other axis of size 1,
    which its separable filter leaves as it is) gives each input pixel's weight in every output,
    as torch computes and normalises them."""
    # NOTE: the other axis is 2 (kept at 2): with an axis of 1, torch's antialiased kernel gives
    # other weights (each output the same mix), as it does on a user's tensor of that shape, which
    # the caller refuses
    eye = torch.eye(n_in, dtype=torch.float32).reshape(n_in, 1, n_in, 1).expand(n_in, 1, n_in, 2).contiguous()
    how = {"scale_factor": (scale_factor, 1.0)} if scale_factor is not None else {"size": (n_out, 2)}
    with torch.no_grad():
        out = F.interpolate(eye, mode=mode, align_corners=align_corners, antialias=True, **how)[..., 0]
    if out.shape[2] != n_out:
        raise EmitError(f"antialiased {mode} resampling of {n_in} items gives {out.shape[2]}, the trace {n_out}")
    return out.reshape(n_in, n_out).T.numpy().astype(np.float64)


def _axis_scales(scale_factor, recompute_scale_factor, n: int) -> list:
    """The scale factor torch uses for source indices along each axis (None: taken from the sizes;
    a Value: computed at run time, from dynamic sizes as in ``scale_factor=(h / N, w / N)``)."""
    if scale_factor is None or recompute_scale_factor:
        return [None] * n

    def one(s):
        if isinstance(s, Value):
            if not s.is_constant:
                return s
            s = np.asarray(s.data).reshape(-1)[0]
        return float(s)

    return [one(s) for s in (scale_factor if isinstance(scale_factor, (list, tuple)) else [scale_factor] * n)]


@register(F.interpolate)
def interpolate(ctx: EmitContext, input: Value, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """interpolate(Tensor input, int[]? size=None, float[]? scale_factor=None, str mode='nearest', bool? align_corners=None, bool? recompute_scale_factor=None, bool antialias=False) -> Tensor"""
    n = rank(input) - 2
    outs = list(node_shape(ctx)[2:])
    scales = _axis_scales(scale_factor, recompute_scale_factor, n)
    runtime_scales = any(isinstance(s, Value) for s in scales)
    if antialias:
        if mode not in ("bilinear", "bicubic"):
            raise EmitError(f"F.interpolate(mode={mode!r}) with antialias=True is not supported (torch: "
                            "bilinear and bicubic only)")
        if 1 in list(input.shape[2:]) + outs:
            raise EmitError(f"F.interpolate(mode={mode!r}) with antialias=True and a spatial size of 1 "
                            f"({list(input.shape[2:])} -> {outs}): torch's weights then depend on the memory layout")
        if any(d is None for d in outs):
            raise EmitError(_unknown_size(f"antialiased {mode}", scales))
        x = input
        for axis, (n_in, n_out, sf) in enumerate(zip(input.shape[2:], outs, scales), start=2):
            if isinstance(n_in, int) and isinstance(n_out, int) and not isinstance(sf, Value):
                m = antialias_matrix(n_in, n_out, sf, mode, bool(align_corners))
                if m.shape[0] != m.shape[1] or not np.array_equal(m, np.eye(n_in)):
                    x = apply_along(ctx, x, axis, m)
            else:
                x = apply_along(ctx, x, axis, antialias_matrix_at_runtime(ctx, n_in, n_out, sf, mode,
                                                                          bool(align_corners)))
        return x
    if runtime_scales and mode not in ("linear", "bilinear", "bicubic", "trilinear"):
        raise EmitError(f"F.interpolate mode {mode!r} with a scale_factor computed at run time is not supported")
    if mode in ("nearest", "nearest-exact"):
        factors = _integer_factors(list(input.shape[2:]), outs, scales)
        if factors is not None:
            return repeat_nearest(ctx, input, factors, outs)
        return gather_nearest(ctx, input, outs, scales, mode == "nearest-exact")
    if mode == "area":
        # an unknown size (None) would mean "keep the input size" to adaptive_pool
        if any(d is None for d in outs):
            raise EmitError(_unknown_size("area", scales))
        return adaptive_pool(ctx, input, outs, n, "avg")
    if mode not in ("linear", "bilinear", "bicubic", "trilinear"):
        raise EmitError(f"F.interpolate mode {mode!r} is not supported")
    if mode != "bicubic" and not align_corners and not runtime_scales and \
            not all(isinstance(d, int) for d in input.shape[2:]):
        factors = _integer_factors(list(input.shape[2:]), outs, scales)
        if factors is not None and all(d is not None for d in input.shape[2:]):
            x = input
            for axis, k in enumerate(factors, start=2):
                x = linear_upsample_axis(ctx, x, axis, k)
            return x
    if runtime_scales or not all(isinstance(d, int) for d in list(input.shape[2:]) + outs):
        cubic = mode == "bicubic"
        x = input
        for axis, (n_in, n_out, sf) in enumerate(zip(input.shape[2:], outs, scales), start=2):
            if n_out is None:
                raise EmitError(_unknown_size(mode, scales))
            if not isinstance(sf, Value) and simplify(n_out - n_in) == 0 and (sf is None or sf == 1.0):
                continue  # the same size: torch's source positions are the pixels themselves
            if isinstance(n_in, int) and isinstance(n_out, int) and not isinstance(sf, Value):
                m = resample_matrix(n_in, n_out, sf, bool(align_corners), cubic)
                if m.shape[0] != m.shape[1] or not np.array_equal(m, np.eye(n_in)):
                    x = apply_along(ctx, x, axis, m)
            elif cubic:
                x = cubic_along_at_runtime(ctx, x, axis, n_out, sf, bool(align_corners))
            else:
                x = apply_along(ctx, x, axis, linear_matrix_at_runtime(ctx, n_in, n_out, sf, bool(align_corners)))
        return x
    x = input
    ins = static_dims(input.shape[2:], f"{mode} interpolation")
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


# grid_sample / affine_grid ---------------------------------------------------------------------
def _size_f32(ctx: EmitContext, n):
    """A spatial size as an f32 operand: a number, or a 1-item tensor for a dynamic size."""
    from ...ir import DType
    from ..helpers import cast

    return float(n) if isinstance(n, int) else cast(ctx, dim_value(ctx, n, DType.I64), DType.F32)


@register(F.affine_grid)
def affine_grid(ctx: EmitContext, theta: Value, size, align_corners: Optional[bool] = None):
    """affine_grid(Tensor theta, int[] size, bool? align_corners=None) -> Tensor

    2-D (size N, C, H, W, static H and W): the points of a base grid (x, y, 1), from -1 to 1
    (pixel centres unless ``align_corners``), mapped by each ``theta`` [N, 2, 3]: [N, H, W, 2]."""
    from ...ir import DType
    from ..helpers import cast

    if len(size) != 4 or rank(theta) != 3:
        raise EmitError("affine_grid is supported for 2-D grids (size N, C, H, W) only")
    n, _, h, w = size
    if not (isinstance(h, int) and isinstance(w, int)):
        return _affine_grid_dynamic(ctx, theta, n, h, w, bool(align_corners))

    def axis_points(k):
        if align_corners:
            return np.linspace(-1.0, 1.0, k, dtype=np.float32) if k > 1 else np.zeros(1, np.float32)
        return ((np.arange(k, dtype=np.float32) * 2 + 1) / k - 1).astype(np.float32)

    ys, xs = np.meshgrid(axis_points(h), axis_points(w), indexing="ij")
    base = np.stack([xs, ys, np.ones_like(xs)], -1).reshape(1, h * w, 3).astype(np.float32)
    t = cast(ctx, theta, DType.F32) if theta.dtype is not DType.F32 else theta
    points = ctx.call("torch.matmul", ctx.const(base, DType.F32), ctx.call("Tensor.transpose", t, 1, 2))
    out = ctx.call("Tensor.reshape", points, (n, h, w, 2))
    return cast(ctx, out, theta.dtype) if theta.dtype is not DType.F32 else out


def _affine_grid_dynamic(ctx: EmitContext, theta: Value, n, h, w, align_corners: bool) -> Value:
    """affine_grid over a dynamic H or W: the base coordinates along each axis computed at run
    time, ``(2*j - (size - 1)) / size`` (pixel centres) or ``... / max(size - 1, 1)``
    (``align_corners``, 0 for a single pixel as torch), then each output point is
    ``x_w * theta[:, :, 0] + y_h * theta[:, :, 1] + theta[:, :, 2]`` by broadcasting: [N, H, W, 2]."""
    from ...ir import DType
    from ..helpers import cast, ew
    from .shape import reshape_to

    def coordinates(size, at: int) -> Value:
        """The base coordinates along one axis, shaped [1, H, 1, 1] (``at`` 1) or [1, 1, W, 1]."""
        if isinstance(size, int):
            j = ctx.const(np.arange(size, dtype=np.float32), DType.F32)
        else:
            j = ctx.call("nnef.range", 0, size, 1, DType.F32, (size,))
        last = float(size - 1) if isinstance(size, int) else _size_f32(ctx, size - 1)
        numerator = ew(ctx, "sub", ew(ctx, "mul", j, 2.0), last)
        if align_corners:
            denominator = float(max(size - 1, 1)) if isinstance(size, int) else ew(ctx, "max", last, 1.0)
        else:
            denominator = _size_f32(ctx, size)
        c = ew(ctx, "div", numerator, denominator)
        shape = [1, 1, 1, 1]
        shape[at] = size
        return reshape_to(ctx, c, shape)

    t = cast(ctx, theta, DType.F32) if theta.dtype is not DType.F32 else theta
    xs, ys = coordinates(w, 2), coordinates(h, 1)
    cols = [reshape_to(ctx, ctx.call("Tensor.select", t, 2, k), [n, 1, 1, 2]) for k in range(3)]
    out = ew(ctx, "add", ew(ctx, "add", ew(ctx, "mul", xs, cols[0]), ew(ctx, "mul", ys, cols[1])), cols[2])
    return cast(ctx, out, theta.dtype) if theta.dtype is not DType.F32 else out
