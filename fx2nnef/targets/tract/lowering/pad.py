"""tract's overrides of the pad converters (the common rules: ``fx2nnef.nnef_emit.ops.pad``)."""
from __future__ import annotations

import numpy as np
import torch.nn.functional as F

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, SymDim, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import cast, dim_value, env_text, ew, negative_at, rank
from fx2nnef.nnef_emit.ops.indexing import gather
from fx2nnef.nnef_emit.ops.pad import _check_pad_mode, crop_negative, pad_by_concat, pad_op, pad_pairs
from fx2nnef.nnef_emit.ops.pool import with_dim
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


def _pad_dynamic(ctx: EmitContext, x: Value, pairs: list, mode: str, value) -> Value:
    """Pads by dynamic sizes (``F.pad(x, (0, 8 - S % 8))``): tract's ``pad`` takes static amounts
    only, so each piece is a tile of its fill (constant) or of the edge slice (replicate) of a
    dynamic length, or the items a reflection repeats, gathered (reflect), concatenated to ``x``."""
    for axis, (before, after) in enumerate(pairs):
        for amount in (before, after):
            if not isinstance(amount, SymDim):
                continue
            if mode not in ("constant", "replicate", "reflect"):
                raise EmitError(f"F.pad mode {mode!r} by a dynamic size ({amount}) is not supported for tract; "
                                "constant, replicate and reflect are")
            bad = negative_at(ctx, amount)
            if bad is not None:
                at = env_text(bad)
                raise EmitError(
                    f"F.pad by {amount} would crop (the amount is negative) at {at}, a size the export claims to "
                    "be valid for; a pad that may crop has no tract form. Clamp the amount in the model "
                    "(max(0, ...) bounds the range) or keep that axis static; if the model never crops there, "
                    "the amount's form was fitted from a few sizes (see the export's notes on dynamic shapes)")
    for axis, (before, after) in enumerate(pairs):
        if not isinstance(before, SymDim) and not isinstance(after, SymDim):
            continue
        parts = [x]
        for amount, at_end in ((before, False), (after, True)):
            if not isinstance(amount, SymDim):
                continue
            n = x.shape[axis]
            if mode == "reflect":
                parts = parts + [_reflected(ctx, x, axis, amount, at_end)] if at_end else \
                    [_reflected(ctx, x, axis, amount, at_end)] + parts
                continue
            begin, end = (n - 1, n) if at_end else (0, 1)
            edge = ctx.op("slice", x, axes=[axis], begin=[begin], end=[end], out_shape=with_dim(x.shape, axis, 1))
            if mode == "constant":
                edge = _filled_like(ctx, edge, 0.0 if value is None else value)
            # the piece's other axes are the edge slice's, as tract computes them: an axis padded
            # before is tract's sum of its size and amount (``H/2 + (H+1)/2 - H + 4*((H+6)/8)``),
            # which tract cannot match with a size written as ``4*((H+6)/8)`` in the concat
            piece = ctx.op("tile", edge, repeats=list(with_dim((1,) * rank(x), axis, amount)),
                           out_shape=with_dim(x.shape, axis, amount))
            parts = parts + [piece] if at_end else [piece] + parts
        size = sum(p.shape[axis] for p in parts)
        x = ctx.op("concat", parts, axis=axis, out_shape=with_dim(x.shape, axis, size))
        # tract's size of the concatenation is the sum of its parts' (``H/2 + (H+1)/2 - H +
        # 4*((H+6)/8)``), which it cannot match with ``4*((H+6)/8)`` in a reshape or another
        # concat; a slice of all of it gives the size as written here
        x = ctx.op("slice", x, axes=[axis], begin=[0], end=[size], out_shape=x.shape)
    return x


def _reflected(ctx: EmitContext, x: Value, axis: int, amount: SymDim, at_end: bool) -> Value:
    """The ``amount`` items a reflect pad puts after (``at_end``) or before ``x`` along ``axis``:
    ``x[n-2], x[n-3], ...`` or ``..., x[2], x[1]`` (the edge item not repeated), gathered by
    indices computed from a range of ``amount`` items (torch requires ``amount < n``)."""
    steps = ctx.call("nnef.range", 0, amount, 1, DType.I64, (amount,))
    top = x.shape[axis] - 2 if at_end else amount
    index = ew(ctx, "sub", dim_value(ctx, top, DType.I64), steps)
    return gather(ctx, x, index, axis)


def _filled_like(ctx: EmitContext, x: Value, value) -> Value:
    """``value`` in the shape of ``x``, computed from ``x`` so that tract gives it ``x``'s own
    sizes: its items cast to an integer and subtracted from themselves (0 for NaN and inf too),
    plus ``value``."""
    whole = cast(ctx, x, DType.I64)
    zero = ctx.op("sub", whole, whole, out_shape=x.shape, out_dtype=DType.I64)
    if x.dtype.is_bool:
        zero = ctx.op("lt", zero, zero, out_shape=x.shape, out_dtype=DType.BOOL)
        return ctx.op("or", zero, ctx.const(np.full([1] * rank(x), bool(value)), DType.BOOL),
                      out_shape=x.shape, out_dtype=DType.BOOL)
    if x.dtype is not DType.I64:
        zero = cast(ctx, zero, x.dtype)
    return ctx.op("add", zero, ctx.const(np.full([1] * rank(x), value), x.dtype), out_shape=x.shape,
                  out_dtype=x.dtype)


@register(F.pad, target=TRACT)
def pad_tract(ctx: EmitContext, input: Value, pad, mode="constant", value=None):
    """pad(Tensor input, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    _check_pad_mode(mode)
    if input.dtype.is_bool:
        # tract's pad takes numbers only ("Bool is not a number" at run time): pad 0/1 integers
        padded = pad_tract(ctx, cast(ctx, input, DType.I64), pad, mode, None if value is None else float(bool(value)))
        return cast(ctx, padded, DType.BOOL)
    pairs = pad_pairs(input, pad)
    # the static amounts first (NNEF pad), then the dynamic ones (concatenated pieces)
    dynamic = [tuple(p if isinstance(p, SymDim) else 0 for p in pair) for pair in pairs]
    has_dynamic = any(p != (0, 0) for p in dynamic)
    x, static = crop_negative(ctx, input, [tuple(0 if isinstance(p, SymDim) else p for p in pair) for pair in pairs])
    if not has_dynamic or any(p != (0, 0) for p in static):
        x = pad_by_concat(ctx, x, static, mode) if mode in ("replicate", "circular") else pad_op(ctx, x, static, mode, value)
    return _pad_dynamic(ctx, x, dynamic, mode, value) if has_dynamic else x
