"""F.pad: constant, reflect, replicate and circular padding.

NOTE: tract rejects ``pad`` with border 'replicate': that one is built from slices and concat
for tract.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import SymDim, Value, op_key
from ..context import EmitContext
from ..helpers import rank
from ..registry import register
from .pool import with_dim


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


def _check_pad_mode(mode: str) -> None:
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise EmitError(f"F.pad mode {mode!r} is not supported")


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
    parts = []
    for s in seqs:
        amount = simplify(longest - s.shape[0])
        if amount != 0:
            flat = [0, 0] * (rank(s) - 1) + ([0, amount] if padding_side == "right" else [amount, 0])
            s = ctx.call(op_key(F.pad), s, flat, "constant", float(padding_value))  # the target's own pad
        parts.append(s)
    return stack(ctx, parts, 0 if batch_first else 1)
