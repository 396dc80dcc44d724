"""Vector and matrix products built from those of ``linalg``: mv, dot, vdot, inner, vecdot,
linalg.matmul, addmv, addr, addbmm, tensordot, kron, multi_dot / chain_matmul.

Most lower through other converters (``ctx.call``), so each target gets its own form of the
pieces (``tract_core_einsum`` in tract, ``matmul`` in standard NNEF) and torch's type promotion.
"""
from __future__ import annotations

import string

import torch

from ...ir import Value, simplify
from ..context import EmitContext
from ..helpers import axis, cast, ew, rank, result_dtype
from ..registry import register
from .linalg import _matmul
from .shape import expand_to, reshape_to


def _scaled_sum(ctx: EmitContext, product: Value, input: Value, beta, alpha) -> Value:
    """``beta * input + alpha * product`` as torch's addmm family computes it: ``input`` is not
    read when ``beta`` is 0 (NaN there does not propagate); integer results stay integers."""
    dtype = result_dtype(product, input)
    y = cast(ctx, product, dtype)
    if alpha != 1:
        y = ew(ctx, "mul", y, alpha)
    if beta == 0:
        return y if input is None or rank(input) <= rank(y) else expand_to(ctx, y, input.shape)
    c = cast(ctx, input, dtype)
    if beta != 1:
        c = ew(ctx, "mul", c, beta)
    return ew(ctx, "add", c, y)


# ---- vector products ------------------------------------------------------------------------------------------------
@register(torch.mv, "Tensor.mv")
def mv(ctx: EmitContext, input: Value, vec: Value):
    """mv(Tensor self, Tensor vec) -> Tensor"""
    if rank(input) != 2 or rank(vec) != 1:
        ctx.fail(f"mv takes a matrix and a vector, got ranks {rank(input)} and {rank(vec)}")
    return _matmul(ctx, input, vec)


@register(torch.dot, "Tensor.dot")
def dot(ctx: EmitContext, input: Value, tensor: Value):
    """dot(Tensor self, Tensor tensor) -> Tensor (a 0-d tensor of the operands' dtype)"""
    if rank(input) != 1 or rank(tensor) != 1:
        ctx.fail(f"dot takes two vectors, got ranks {rank(input)} and {rank(tensor)}")
    return _matmul(ctx, input, tensor)


@register(torch.vdot, "Tensor.vdot")
def vdot(ctx: EmitContext, input: Value, other: Value):
    """vdot(Tensor self, Tensor other) -> Tensor (real tensors: the conjugate is the tensor itself)"""
    return dot(ctx, input, other)


@register(torch.inner, "Tensor.inner")
def inner(ctx: EmitContext, input: Value, other: Value):
    """inner(Tensor self, Tensor other) -> Tensor: the sum over the last axes, ``[*a[:-1], *b[:-1]]``"""
    if rank(input) == 0 or rank(other) == 0:
        return ctx.call("torch.mul", input, other)
    return tensordot(ctx, input, other, ([rank(input) - 1], [rank(other) - 1]))


@register(torch.linalg.vecdot)
def vecdot(ctx: EmitContext, x: Value, y: Value, *, dim: int = -1):
    """linalg_vecdot(Tensor x, Tensor y, *, int dim=-1) -> Tensor (the operands broadcast)"""
    prod = ctx.call("torch.mul", x, y)
    return ctx.call("torch.sum", prod, dim)


@register(torch.linalg.matmul)
def linalg_matmul(ctx: EmitContext, input: Value, other: Value):
    """linalg_matmul(Tensor self, Tensor other) -> Tensor"""
    return _matmul(ctx, input, other)


@register(torch.addmv, "Tensor.addmv")
def addmv(ctx: EmitContext, input: Value, mat: Value, vec: Value, *, beta=1, alpha=1):
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(ctx, mv(ctx, mat, vec), input, beta, alpha)


@register(torch.addr, "Tensor.addr")
def addr(ctx: EmitContext, input: Value, vec1: Value, vec2: Value, *, beta=1, alpha=1):
    """addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(ctx, ctx.call("torch.outer", vec1, vec2), input, beta, alpha)


@register(torch.addbmm, "Tensor.addbmm")
def addbmm(ctx: EmitContext, input: Value, batch1: Value, batch2: Value, *, beta=1, alpha=1):
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    The products of the batch summed: one ``[n, b*m] @ [b*m, p]`` matmul."""
    if rank(batch1) != 3 or rank(batch2) != 3:
        ctx.fail(f"addbmm takes two batches of matrices (rank 3), got ranks {rank(batch1)} and {rank(batch2)}")
    b, n, m = batch1.shape
    p = batch2.shape[2]
    left = reshape_to(ctx, ctx.call("torch.permute", batch1, [1, 0, 2]), [n, simplify(b * m)])
    right = reshape_to(ctx, batch2, [simplify(b * m), p])
    return _scaled_sum(ctx, _matmul(ctx, left, right), input, beta, alpha)


# ---- tensordot, kron, chains ----------------------------------------------------------------------------------------
def _tensordot_dims(ctx: EmitContext, a: Value, b: Value, dims) -> tuple:
    if isinstance(dims, Value):
        ctx.fail("tensordot with dims given as a tensor: give them as ints or lists of ints")
    if isinstance(dims, int):
        if dims < 0 or dims > min(rank(a), rank(b)):
            ctx.fail(f"tensordot: dims={dims} must be between 0 and the smaller rank")
        return list(range(rank(a) - dims, rank(a))), list(range(dims))
    da, db = dims
    da, db = ([da], [db]) if isinstance(da, int) else (list(da), list(db))
    if len(da) != len(db):
        ctx.fail(f"tensordot: {len(da)} dims of the first operand against {len(db)} of the second")
    return [axis(d, rank(a)) for d in da], [axis(d, rank(b)) for d in db]


@register(torch.tensordot)
def tensordot(ctx: EmitContext, a: Value, b: Value, dims=2, out=None):
    """tensordot(Tensor a, Tensor b, int|int[][] dims=2) -> Tensor (one einsum)"""
    da, db = _tensordot_dims(ctx, a, b, dims)
    letters = iter(string.ascii_letters)
    sa = [next(letters) for _ in range(rank(a))]
    sb = [next(letters) for _ in range(rank(b))]
    for i, j in zip(da, db):
        sb[j] = sa[i]
    out_subs = [c for i, c in enumerate(sa) if i not in da] + [c for j, c in enumerate(sb) if j not in db]
    if not out_subs and not da:
        return ctx.call("torch.mul", a, b)
    dtype = result_dtype(a, b)
    return ctx.call("torch.einsum", f"{''.join(sa)},{''.join(sb)}->{''.join(out_subs)}",
                    cast(ctx, a, dtype), cast(ctx, b, dtype))


@register(torch.kron, "Tensor.kron")
def kron(ctx: EmitContext, input: Value, other: Value):
    """kron(Tensor self, Tensor other) -> Tensor: ``[a0*b0, a1*b1, ...]`` (ranks padded with leading 1s)"""
    r = max(rank(input), rank(other))
    dtype = result_dtype(input, other)
    a = reshape_to(ctx, cast(ctx, input, dtype), [1] * (r - rank(input)) + list(input.shape))
    b = reshape_to(ctx, cast(ctx, other, dtype), [1] * (r - rank(other)) + list(other.shape))
    # a as [a0, 1, a1, 1, ...] times b as [1, b0, 1, b1, ...], then pairs of axes merged
    wide_a = reshape_to(ctx, a, [d for s in a.shape for d in (s, 1)])
    wide_b = reshape_to(ctx, b, [d for s in b.shape for d in (1, s)])
    prod = ew(ctx, "mul", wide_a, wide_b)
    return reshape_to(ctx, prod, [simplify(x * y) for x, y in zip(a.shape, b.shape)])


@register(torch.linalg.multi_dot)
def multi_dot(ctx: EmitContext, tensors: list):
    """linalg_multi_dot(Tensor[] tensors) -> Tensor (the first and last may be vectors); left to right"""
    if len(tensors) < 2:
        ctx.fail("linalg.multi_dot needs at least two tensors")
    if any(rank(t) != 2 for t in tensors[1:-1]) or rank(tensors[0]) not in (1, 2) or rank(tensors[-1]) not in (1, 2):
        ctx.fail("linalg.multi_dot takes matrices (the first and last may be vectors)")
    y = tensors[0]
    for t in tensors[1:]:
        y = _matmul(ctx, y, t)
    return y


@register(torch.chain_matmul)
def chain_matmul(ctx: EmitContext, *matrices, out=None):
    """chain_matmul(*matrices) -> Tensor (deprecated alias of linalg.multi_dot for matrices)"""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    if len(matrices) == 1:
        return matrices[0]
    return multi_dot(ctx, list(matrices))


def _squeezed(ctx: EmitContext, c: Value) -> Value:
    """torch's ``.squeeze()`` of a ``[V, V]`` result: a 0-d tensor for one variable."""
    if c.shape == (1, 1):
        return ctx.op("squeeze", c, axes=[0, 1], out_shape=(), out_dtype=c.dtype)
    return c
