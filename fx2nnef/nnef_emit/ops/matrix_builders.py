"""Matrices built from vectors or blocks: cartesian_prod, block_diag, vander; renorm."""
from __future__ import annotations

from typing import Optional

import torch

from ...ir import DType, Value, simplify
from ..context import EmitContext
from ..helpers import axis, cast, compare, ew, rank, result_dtype, select
from ..registry import register
from .reduce import vector_norm
from .shape import concat, expand_to, full_like_value, reshape_to


# ---- building matrices ----------------------------------------------------------------------------------------------
def _tensor_list(tensors: tuple) -> list:
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)


@register(torch.cartesian_prod)
def cartesian_prod(ctx: EmitContext, *tensors):
    """cartesian_prod(*tensors) -> Tensor: ``[n0*n1*..., k]``, the last tensor varying fastest"""
    tensors = _tensor_list(tensors)
    if any(rank(t) != 1 for t in tensors):
        ctx.fail("cartesian_prod takes vectors")
    if len(tensors) == 1:
        return tensors[0]
    dtype = result_dtype(*tensors)
    sizes = [t.shape[0] for t in tensors]
    k = len(tensors)
    columns = []
    for i, t in enumerate(tensors):
        grid = expand_to(ctx, reshape_to(ctx, cast(ctx, t, dtype), [sizes[i] if j == i else 1 for j in range(k)]), sizes)
        columns.append(reshape_to(ctx, grid, [_product(sizes)]))
    return ctx.call("torch.stack", columns, 1)


def _product(sizes: list):
    out = 1
    for s in sizes:
        out = out * s
    return simplify(out)


@register(torch.block_diag)
def block_diag(ctx: EmitContext, *tensors):
    """block_diag(*tensors) -> Tensor: the blocks (scalars and vectors taken as 1-row matrices) on the diagonal"""
    tensors = _tensor_list(tensors)
    if any(rank(t) > 2 for t in tensors):
        ctx.fail("block_diag takes tensors of rank 2 at most")
    dtype = result_dtype(*tensors)
    blocks = [reshape_to(ctx, cast(ctx, t, dtype), [1] * (2 - rank(t)) + list(t.shape)) for t in tensors]
    if not blocks:
        ctx.fail("block_diag of no tensors")
    width = simplify(sum((b.shape[1] for b in blocks), 0))
    rows, before = [], 0
    for b in blocks:
        h, w = b.shape
        after = simplify(width - before - w)
        left = full_like_value(ctx, 0, dtype, (h, before)) if not (isinstance(before, int) and before == 0) else None
        right = full_like_value(ctx, 0, dtype, (h, after)) if not (isinstance(after, int) and after == 0) else None
        rows.append(concat(ctx, [left, b, right], 1))
        before = simplify(before + w)
    return concat(ctx, rows, 0)


def _powers(ctx: EmitContext, x: Value, count: int, increasing: bool) -> Value:
    """``[..., n, count]``: the powers 0..count-1 of ``x`` by repeated products (as torch's cumprod)."""
    col = ctx.call("Tensor.unsqueeze", x, rank(x))
    cols = [full_like_value(ctx, 1, x.dtype, col.shape)]
    for _ in range(1, count):
        cols.append(col if len(cols) == 1 else ew(ctx, "mul", cols[-1], col))
    if not increasing:
        cols = cols[::-1]
    return concat(ctx, cols, rank(x))


def _vander_input(ctx: EmitContext, x: Value, N, what: str) -> tuple:
    dtype = x.dtype if x.dtype.is_float else DType.I64
    count = x.shape[-1] if N is None else N
    if not isinstance(count, int):
        ctx.fail(f"{what} with a dynamic number of columns ({count}): give N as an int")
    return cast(ctx, x, dtype), count


@register(torch.vander)
def vander(ctx: EmitContext, x: Value, N: Optional[int] = None, increasing: bool = False):
    """vander(Tensor x, SymInt? N=None, bool increasing=False) -> Tensor (integers and bools as int64)"""
    if rank(x) != 1:
        ctx.fail("vander takes a vector")
    x, count = _vander_input(ctx, x, N, "vander")
    if count == 0:
        ctx.fail("vander with N=0 gives an empty tensor")
    return _powers(ctx, x, count, increasing)


@register(torch.linalg.vander)
def linalg_vander(ctx: EmitContext, x: Value, *, N: Optional[int] = None):
    """linalg_vander(Tensor x, *, SymInt? N=None) -> Tensor (increasing powers, batches allowed)"""
    if rank(x) < 1:
        ctx.fail("linalg.vander takes a tensor of rank 1 at least")
    x, count = _vander_input(ctx, x, N, "linalg.vander")
    if count <= 1:
        ctx.fail("linalg.vander needs N > 1")
    return _powers(ctx, x, count, True)


@register(torch.renorm, "Tensor.renorm")
def renorm(ctx: EmitContext, input: Value, p, dim: int, maxnorm):
    """renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor

    Each slice along ``dim`` whose ``p``-norm is above ``maxnorm`` is scaled by
    ``maxnorm / (norm + 1e-7)``, as torch does; the others are kept."""
    if not input.dtype.is_float:
        ctx.fail("renorm is defined on float tensors: convert with .float()")
    if not isinstance(p, (int, float)) or p <= 0:
        ctx.fail(f"renorm: p={p!r} must be a positive number")
    d = axis(dim, rank(input))
    others = [i for i in range(rank(input)) if i != d]
    norm = vector_norm(ctx, input, float(p), others, True)
    over = compare(ctx, "gt", norm, float(maxnorm))
    factor = select(ctx, over, ew(ctx, "div", float(maxnorm), ew(ctx, "add", norm, 1e-7)), 1.0)
    return ew(ctx, "mul", input, factor)
