"""Matrix products: linear, matmul, mm, bmm, addmm, baddbmm."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ...ir import Value
from ..context import EmitContext, stored_transposed
from ..helpers import broadcast_operands, cast, dims_list, rank, tiled_from, unsqueeze_to
from ..registry import register


def _tiled_axes(reps: list) -> list:
    return [i for i, r in enumerate(reps) if not (isinstance(r, int) and r == 1)]


def _untiled_matmul(ctx: EmitContext, a: Value, b: Value, transpose_b: bool) -> Optional[Value]:
    """NOTE: tract 0.23.9 mis-handles a matmul (an EinSum) whose operand is a ``tile`` broadcasting
    a size-1 axis that the product keeps (the row axis of the left operand, the column axis of
    the right one, or a batch axis where the other operand has size 1): its declutter moves the
    tile after the product and gets the shape wrong, failing at load ("Trying to substitute a
    4,6,F32 by 1,6,F32") or, on a dynamic axis, silently giving size 1 there. The product of the
    untiled operand, tiled afterwards, is the same tensor."""
    r = rank(a)
    for operand, other, own in ((a, b, r - 2), (b, a, r - 2 if transpose_b else r - 1)):
        found = tiled_from(ctx, operand)
        if found is None:
            continue
        src, reps = found
        axes = _tiled_axes(reps)
        if not all(ax == own or (ax < r - 2 and other.shape[ax] == 1) for ax in axes):
            continue
        y = _matmul(ctx, src if operand is a else a, src if operand is b else b, transpose_b)
        repeats = [1] * rank(y)
        for ax in axes:
            out_ax = ax if ax < r - 2 else (r - 2 if operand is a else r - 1)
            repeats[out_ax] = reps[ax]
        shape = tuple(d * k if not (isinstance(k, int) and k == 1) else d for d, k in zip(y.shape, repeats))
        return ctx.op("tile", y, repeats=repeats, out_shape=shape, out_dtype=y.dtype)
    return None


def _matmul(ctx: EmitContext, a: Value, b: Value, transpose_b: bool = False) -> Value:
    """NNEF matmul needs equal ranks: vectors become matrices and lower ranks get unit batch axes.
    A right operand stored as f16 (f16 weights) is read as stored: the product stays in ``a``'s dtype;
    one stored transposed (Q4_0 blocks run along the contracted dim) is read with ``transposeB`` flipped."""
    if not a.is_constant:
        if stored_transposed(b):
            transpose_b = not transpose_b
        b = ctx.stored(b)
    ra, rb = rank(a), rank(b)
    if ra >= 2 and rb >= 2:
        r = max(ra, rb)
        a, b = unsqueeze_to(ctx, a, r), unsqueeze_to(ctx, b, r)
        untiled = _untiled_matmul(ctx, a, b, transpose_b)
        if untiled is not None:
            return untiled
    if ra == 1:
        a = ctx.op("unsqueeze", a, axes=[0], out_shape=(1,) + tuple(a.shape))
    if rb == 1:
        b = ctx.op("unsqueeze", b, axes=[1], out_shape=tuple(b.shape) + (1,))
    r = max(rank(a), rank(b))
    a, b = unsqueeze_to(ctx, a, r), unsqueeze_to(ctx, b, r)
    out_shape = tuple(a.shape[:-1]) + (b.shape[-2] if transpose_b else b.shape[-1],)
    y = ctx.op("matmul", a, b, transposeA=False, transposeB=transpose_b, out_shape=out_shape)
    if ra == 1 and rb == 1:
        return ctx.op("squeeze", y, axes=[r - 2, r - 1])
    if ra == 1:
        return ctx.op("squeeze", y, axes=[r - 2])
    if rb == 1:
        return ctx.op("squeeze", y, axes=[r - 1])
    return y


@register(F.linear)
def linear(ctx: EmitContext, input: Value, weight: Value, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor

    NOTE: an input of rank 4 or more is flattened to a matrix first: tract 0.23.9 fails to load a
    rank-4 product with a broadcast weight whose result is reshaped, sliced and concatenated into
    the contracted axis of another matmul (DeepSeek's latent attention: "concat-einsum ... Condition
    failed"). The products are the same."""
    if rank(weight) != 2:
        ctx.fail("linear weight must be 2-D")
    lead = tuple(input.shape[:-1])
    if len(lead) > 2:
        rows = 1
        for d in lead:
            rows = rows * d
        flat = ctx.op("reshape", input, shape=dims_list([rows, input.shape[-1]]), out_shape=(rows, input.shape[-1]))
        y = _matmul(ctx, flat, weight, transpose_b=True)
        y = ctx.op("reshape", y, shape=dims_list(lead + (weight.shape[0],)), out_shape=lead + (weight.shape[0],))
    else:
        y = _matmul(ctx, input, weight, transpose_b=True)
    if bias is not None:
        y = ctx.op("add", *broadcast_operands(ctx, y, bias))
    return y


@register(torch.matmul, "Tensor.matmul", "operator.matmul")
def matmul(ctx: EmitContext, input: Value, other: Value):
    """matmul(Tensor self, Tensor other) -> Tensor"""
    return _matmul(ctx, input, other)


@register(torch.mm, "Tensor.mm", torch.bmm, "Tensor.bmm")
def mm(ctx: EmitContext, input: Value, mat2: Value, out_dtype=None):
    """mm(Tensor self, Tensor mat2) -> Tensor  (bmm alike; ``out_dtype`` computes in that dtype)"""
    if out_dtype is not None:
        input, mat2 = cast(ctx, input, out_dtype), cast(ctx, mat2, out_dtype)
    return _matmul(ctx, input, mat2)


@register(torch.baddbmm, "Tensor.baddbmm")
def baddbmm(ctx: EmitContext, input, batch1: Value, batch2: Value, out_dtype=None, *, beta=1, alpha=1):
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return addmm(ctx, input, batch1, batch2, out_dtype, beta=beta, alpha=alpha)


@register(torch.addmm, "Tensor.addmm")
def addmm(ctx: EmitContext, input, mat1: Value, mat2: Value, out_dtype=None, *, beta=1, alpha=1):
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if out_dtype is not None:
        input, mat1, mat2 = (cast(ctx, v, out_dtype) for v in (input, mat1, mat2))
    y = _matmul(ctx, mat1, mat2)
    if alpha != 1:
        y = ctx.op("mul", y, float(alpha))
    if beta != 0:
        c = input if beta == 1 else ctx.op("mul", input, float(beta), out_shape=input.shape)
        y = ctx.op("add", *broadcast_operands(ctx, y, c))
    return y
