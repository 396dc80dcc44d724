"""F.pad: constant, reflect, replicate and circular padding.

NOTE: tract rejects ``pad`` with border 'replicate': that one is built from slices and concat
for tract.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import cast, env_text, negative_at, rank
from ..registry import register
from .pool import static_dims, transpose, with_dim


def pad_pairs(x: Value, pad) -> list:
    """torch's flat ``pad`` (last axis first) as (before, after) for every axis."""
    if len(pad) % 2 or len(pad) // 2 > rank(x) or not all(isinstance(p, (int, SymDim)) for p in pad):
        raise EmitError(f"pad must hold an even number (at most 2 * rank) of ints or sizes, got {pad!r}")
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


def _pad_dynamic(ctx: EmitContext, x: Value, pairs: list, mode: str, value) -> Value:
    """Pads by dynamic sizes (``F.pad(x, (0, 8 - S % 8))``): tract's ``pad`` takes static amounts
    only, so each piece is a tile of its fill (constant) or of the edge slice (replicate) of a
    dynamic length, concatenated to ``x``."""
    for axis, (before, after) in enumerate(pairs):
        for amount in (before, after):
            if not isinstance(amount, SymDim):
                continue
            if mode not in ("constant", "replicate"):
                raise EmitError(f"F.pad mode {mode!r} by a dynamic size ({amount}) is not supported for tract; "
                                "constant and replicate are")
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


@register(F.pad, target="tract")
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


@register(F.pad, target="khronos")
def pad_khronos(ctx: EmitContext, input: Value, pad, mode="constant", value=None):
    """pad(Tensor input, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    _check_pad_mode(mode)
    x, pairs = crop_negative(ctx, input, pad_pairs(input, pad))
    if mode == "circular":
        return pad_by_concat(ctx, x, pairs, mode)
    return khronos_pad(ctx, x, pairs, mode, value)


@register(torch._C._nn.pad_sequence)
def pad_sequence(ctx: EmitContext, sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right"):
    """pad_sequence(Tensor[] sequences, bool batch_first=False, float padding_value=0.0, str padding_side="right")

    Each sequence padded on its first axis to the longest one's length (read from the output's
    shape, which holds for every size the export claims), then stacked on axis 0 or 1."""
    from ...ir import simplify
    from .shape import stack

    seqs = list(sequences)
    if not seqs or not all(isinstance(s, Value) for s in seqs):
        raise EmitError("pad_sequence takes a non-empty list of tensors")
    out_shape = ctx.node.outputs[0].shape
    longest = out_shape[1 if batch_first else 0]
    pad = pad_tract if ctx.target == "tract" else pad_khronos
    parts = []
    for s in seqs:
        amount = simplify(longest - s.shape[0])
        if amount != 0:
            flat = [0, 0] * (rank(s) - 1) + ([0, amount] if padding_side == "right" else [amount, 0])
            s = pad(ctx, s, flat, "constant", float(padding_value))
        parts.append(s)
    return stack(ctx, parts, 0 if batch_first else 1)
