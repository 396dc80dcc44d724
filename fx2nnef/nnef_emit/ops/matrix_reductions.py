"""A matrix reduced to numbers: trace, matrix_norm, det (static n <= 4)."""
from __future__ import annotations

import itertools
import math
from typing import Optional

import torch

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import axis, cast, ew, rank, un
from ..registry import register
from .reduce import reduce, squeeze_unless, vector_norm
from .shape import full_like_value, slice_axis


# ---- trace, norms, determinant --------------------------------------------------------------------------------------
@register(torch.trace, "Tensor.trace")
def trace(ctx: EmitContext, input: Value):
    """trace(Tensor self) -> Tensor (integers sum to int64, as torch's)"""
    if rank(input) != 2:
        ctx.fail(f"trace takes a matrix, got rank {rank(input)}")
    return ctx.call("torch.sum", ctx.call("torch.diagonal", input))


@register(torch.linalg.matrix_norm)
def matrix_norm(ctx: EmitContext, input: Value, ord="fro", dim=(-2, -1), keepdim: bool = False, *,
                dtype: Optional[DType] = None):
    """linalg_matrix_norm(Tensor self, Scalar|str ord='fro', int[] dim=[-2,-1], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    'fro', and the induced norms 1, -1 (max/min column sum of ``|A|``), inf, -inf (row sums).
    'nuc', 2 and -2 are sums or extremes of singular values, which need an SVD: refused."""
    x = cast(ctx, input, dtype) if dtype is not None else input
    if not x.dtype.is_float:
        ctx.fail("linalg.matrix_norm is defined on float tensors (torch refuses integers): convert with .float()")
    if len(dim) != 2:
        ctx.fail(f"linalg.matrix_norm takes two dims, got {list(dim)}")
    d0, d1 = axis(dim[0], rank(x)), axis(dim[1], rank(x))
    if d0 == d1:
        ctx.fail("linalg.matrix_norm: the two dims must differ")
    if ord == "fro":
        return vector_norm(ctx, x, 2, sorted([d0, d1]), keepdim)
    if ord in ("nuc", 2, -2):
        ctx.fail(f"linalg.matrix_norm: the matrix norm ord={ord!r} needs the singular values (an SVD), which NNEF cannot express; "
                 "use ord='fro', 1 or inf, or compute this norm outside the exported model")
    if ord not in (1, -1, math.inf, -math.inf):
        ctx.fail(f"linalg.matrix_norm: ord={ord!r} is not a matrix norm (use 'fro', 'nuc', 1, -1, 2, -2, inf, -inf)")
    # ord 1: the largest column sum (summed over d0, extreme over d1); inf: the largest row sum
    summed, over = (d0, d1) if abs(ord) == 1 else (d1, d0)
    sums = reduce(ctx, "sum_reduce", un(ctx, "abs", x), [summed], True)
    y = reduce(ctx, "max_reduce" if ord > 0 else "min_reduce", sums, [over], True)
    return squeeze_unless(ctx, y, x.shape, sorted([d0, d1]), keepdim)


_DET_MAX = 4  # n! terms: 24 products of 4 items at n = 4


@register(torch.linalg.det)
def linalg_det(ctx: EmitContext, A: Value):
    """linalg_det(Tensor A) -> Tensor

    For a static n <= 4: the sum over permutations (Leibniz), products of the items, batches
    included. It is exact on integers stored as floats and rounds like torch's LU elsewhere,
    except on nearly singular matrices, where both are dominated by cancellation."""
    if rank(A) < 2:
        ctx.fail(f"linalg.det takes (batches of) square matrices, got rank {rank(A)}")
    n, m = A.shape[-2:]
    if not isinstance(n, int) or not isinstance(m, int):
        ctx.fail(f"linalg.det of a matrix of dynamic size {n}x{m}: the lowering expands the determinant for a "
                 "static size; make the matrix size static")
    if n != m:
        ctx.fail(f"linalg.det takes square matrices, got {n}x{m}")
    if n > _DET_MAX:
        ctx.fail(f"linalg.det of a {n}x{n} matrix: NNEF has no LU factorisation, and the expansion over "
                 f"permutations is only emitted up to {_DET_MAX}x{_DET_MAX}; compute it outside the exported model")
    if not A.dtype.is_float:
        ctx.fail("linalg.det is defined on float tensors (torch refuses integers): convert with .float()")
    r = rank(A)
    lead = tuple(A.shape[:-2])
    if n == 0:
        return full_like_value(ctx, 1.0, A.dtype, lead)
    item = {}
    for i in range(n):
        row = slice_axis(ctx, A, r - 2, i, i + 1)
        for j in range(n):
            item[i, j] = slice_axis(ctx, row, r - 1, j, j + 1)
    total = None
    for perm in itertools.permutations(range(n)):
        term = item[0, perm[0]]
        for i in range(1, n):
            term = ew(ctx, "mul", term, item[i, perm[i]])
        odd = sum(1 for i in range(n) for j in range(i + 1, n) if perm[i] > perm[j]) % 2
        total = term if total is None else ew(ctx, "sub" if odd else "add", total, term)
    return ctx.op("squeeze", total, axes=[r - 2, r - 1], out_shape=lead, out_dtype=A.dtype)


@register(torch.det, "Tensor.det")
def det(ctx: EmitContext, input: Value):
    """det(Tensor self) -> Tensor (linalg.det)"""
    return linalg_det(ctx, input)
