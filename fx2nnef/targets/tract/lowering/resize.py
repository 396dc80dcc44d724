"""tract's overrides of the resize converters (the common rules: ``fx2nnef.nnef_emit.ops.resize``)."""
from __future__ import annotations

from typing import Optional

import torch.nn.functional as F

from fx2nnef.errors import EmitError
from fx2nnef.ir import Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import rank
from fx2nnef.nnef_emit.ops.resize import _size_f32
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register(F.grid_sample, target=TRACT)
def grid_sample(ctx: EmitContext, input: Value, grid: Value, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: Optional[bool] = None):
    """grid_sample(Tensor input, Tensor grid, str mode='bilinear', str padding_mode='zeros', bool? align_corners=None) -> Tensor

    4-D only: each output point reads ``input`` at the grid's (x, y), from -1 to 1 across the
    width and the height, as torch maps them (``align_corners``). Bilinear: the four pixels
    around the point, weighted; nearest: the nearest pixel (ties to even, as torch). A pixel
    outside the input reads 0 (``zeros``), or the point is first clamped to the edge (``border``) or
    mirrored into the input (``reflection``).
    The pixels are read with ``tract_core_gather_elements`` from the flattened input."""
    from fx2nnef.ir import DType
    from fx2nnef.nnef_emit.helpers import cast, compare, ew, select
    from fx2nnef.nnef_emit.ops.shape import expand_to, reshape_to

    if rank(input) != 4 or rank(grid) != 4:
        raise EmitError("grid_sample is supported on 4-D inputs (N, C, H, W) only")
    if mode not in ("bilinear", "nearest"):
        raise EmitError(f"grid_sample mode {mode!r} is not supported (bilinear, nearest)")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise EmitError(f"grid_sample padding_mode {padding_mode!r} is not supported (zeros, border, reflection)")
    n, c, h, w = input.shape
    _, ho, wo, _ = grid.shape
    g = cast(ctx, grid, DType.F32) if grid.dtype is not DType.F32 else grid
    wf, hf = _size_f32(ctx, w), _size_f32(ctx, h)

    def last(size):  # the last position along an axis, size - 1
        return size - 1.0 if isinstance(size, float) else ew(ctx, "sub", size, 1.0)

    def coordinate(k, size):
        v = ctx.call("Tensor.select", g, 3, k)  # [N, Ho, Wo]
        one = ew(ctx, "add", v, 1.0)
        if align_corners:
            pos = ew(ctx, "mul", one, (size - 1.0) * 0.5 if isinstance(size, float) else ew(ctx, "mul", last(size), 0.5))
        else:
            pos = ew(ctx, "mul", ew(ctx, "sub", ew(ctx, "mul", one, size), 1.0), 0.5)
        if padding_mode == "reflection":
            pos = reflected(pos, size)
        if padding_mode in ("border", "reflection"):
            pos = ew(ctx, "min", ew(ctx, "max", pos, 0.0), last(size))
        return pos

    def reflected(pos, size):
        """``pos`` mirrored into the input as torch's reflect_coordinates: about the pixel centres
        0 and size - 1 with ``align_corners``, else about the edges -0.5 and size - 0.5."""
        low = 0.0 if align_corners else -0.5
        span = last(size) if align_corners else size
        # at least 1: a single pixel with align_corners gives a span of 0, and every point reads that pixel
        span = max(span, 1.0) if isinstance(span, float) else ew(ctx, "max", span, 1.0)
        d = ctx.op("abs", ew(ctx, "sub", pos, low), out_dtype=DType.F32, out_shape=pos.shape)
        flips = ctx.op("floor", ew(ctx, "div", d, span), out_dtype=DType.F32, out_shape=pos.shape)
        extra = ew(ctx, "sub", d, ew(ctx, "mul", flips, span))
        half = ctx.op("floor", ew(ctx, "mul", flips, 0.5), out_dtype=DType.F32, out_shape=pos.shape)
        odd = compare(ctx, "gt", ew(ctx, "sub", flips, ew(ctx, "mul", half, 2.0)), 0.5)
        back = ew(ctx, "add", ew(ctx, "sub", span, extra), low)
        return select(ctx, odd, back, ew(ctx, "add", extra, low))

    ix, iy = coordinate(0, wf), coordinate(1, hf)
    w_last, h_last = last(wf), last(hf)
    flat = reshape_to(ctx, input, [n, c, -1 if isinstance(h, int) and isinstance(w, int) else h * w])
    count = ho * wo

    def read(px, py):
        """``input`` at the integer-valued float positions (px, py), 0 where outside; [N, C, Ho*Wo]."""
        inside = ew(ctx, "and", ew(ctx, "and", compare(ctx, "ge", px, 0.0), compare(ctx, "le", px, w_last)),
                    ew(ctx, "and", compare(ctx, "ge", py, 0.0), compare(ctx, "le", py, h_last)))
        cx = ew(ctx, "min", ew(ctx, "max", px, 0.0), w_last)
        cy = ew(ctx, "min", ew(ctx, "max", py, 0.0), h_last)
        idx = cast(ctx, ew(ctx, "add", ew(ctx, "mul", cy, wf), cx), DType.I64)  # [N, Ho, Wo]
        idx = expand_to(ctx, reshape_to(ctx, idx, [n, 1, count]), (n, c, count))
        got = ctx.op("tract_core_gather_elements", flat, idx, axis=2, out_shape=(n, c, count), out_dtype=input.dtype)
        return got, reshape_to(ctx, cast(ctx, inside, DType.F32), [n, 1, count])

    if mode == "nearest":
        got, inside = read(ctx.call("nnef.round_even", ix), ctx.call("nnef.round_even", iy))
        out = ew(ctx, "mul", got, cast(ctx, inside, input.dtype))
    else:
        x0, y0 = ctx.op("floor", ix, out_dtype=DType.F32, out_shape=ix.shape), \
            ctx.op("floor", iy, out_dtype=DType.F32, out_shape=iy.shape)
        x1, y1 = ew(ctx, "add", x0, 1.0), ew(ctx, "add", y0, 1.0)
        fx1, fy1 = ew(ctx, "sub", ix, x0), ew(ctx, "sub", iy, y0)
        fx0, fy0 = ew(ctx, "sub", 1.0, fx1), ew(ctx, "sub", 1.0, fy1)
        out = None
        for px, py, wx, wy in ((x0, y0, fx0, fy0), (x1, y0, fx1, fy0), (x0, y1, fx0, fy1), (x1, y1, fx1, fy1)):
            got, inside = read(px, py)
            weight = ew(ctx, "mul", reshape_to(ctx, ew(ctx, "mul", wx, wy), [n, 1, count]), inside)
            term = ew(ctx, "mul", got, cast(ctx, weight, input.dtype))
            out = term if out is None else ew(ctx, "add", out, term)
    return reshape_to(ctx, out, [n, c, ho, wo])
