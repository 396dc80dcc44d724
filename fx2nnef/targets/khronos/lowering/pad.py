"""The Khronos (standard NNEF) overrides of the pad converters (the common rules: ``fx2nnef.nnef_emit.ops.pad``)."""
from __future__ import annotations

import math

import torch.nn.functional as F

from fx2nnef.errors import EmitError
from fx2nnef.ir import Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import rank
from fx2nnef.nnef_emit.ops.pad import _check_pad_mode, crop_negative, pad_by_concat, pad_op, pad_pairs
from fx2nnef.nnef_emit.ops.pool import static_dims, transpose
from fx2nnef.nnef_emit.registry import register
from ..profile import KHRONOS


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


@register(F.pad, target=KHRONOS)
def pad_khronos(ctx: EmitContext, input: Value, pad, mode="constant", value=None):
    """pad(Tensor input, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    _check_pad_mode(mode)
    x, pairs = crop_negative(ctx, input, pad_pairs(input, pad))
    if mode == "circular":
        return pad_by_concat(ctx, x, pairs, mode)
    return khronos_pad(ctx, x, pairs, mode, value)
