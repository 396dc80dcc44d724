"""More matrix and vector products and small linear-algebra ops, built from the products in
``linalg`` and the reductions: mv, dot, vdot, inner, addmv, addr, addbmm, tensordot, kron,
multi_dot / chain_matmul, vecdot, trace, matrix_norm, det (static n <= 4), cumulative_trapezoid,
cov, corrcoef, cartesian_prod, block_diag, vander, renorm; bincount is refused with a fixed-size
form to write instead.

Most lower through other converters (``ctx.call``), so each target gets its own form of the
pieces (``tract_core_einsum`` in tract, ``matmul`` in standard NNEF) and torch's type promotion.
"""
from __future__ import annotations

import itertools
import math
import string
from typing import Optional

import torch

from ...ir import DType, SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import axis, cast, compare, ew, rank, result_dtype, select, to_float, un
from ..registry import register
from .linalg import _matmul
from .reduce import divide_by_count, reduce, sample_gaps, squeeze_unless, vector_norm
from .shape import concat, expand_to, full_like_value, reshape_to, slice_axis


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


# ---- integrals, statistics ------------------------------------------------------------------------------------------
@register(torch.cumulative_trapezoid)
def cumulative_trapezoid(ctx: EmitContext, y: Value, x=None, *, dx=None, dim: int = -1):
    """cumulative_trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor; cumulative_trapezoid.dx(Tensor y, *, Scalar dx=1, int dim=-1)

    The running sum of the trapezoids: ``cumsum((y[1:] + y[:-1]) / 2 * dx)``, or with sample
    points ``x``, ``cumsum(diff(x) * (y[1:] + y[:-1]) / 2)``; one item fewer along ``dim``."""
    y = to_float(ctx, y)
    a = axis(dim, rank(y))
    n = y.shape[a]
    pairs = ew(ctx, "add", slice_axis(ctx, y, a, 1, n), slice_axis(ctx, y, a, 0, simplify(n - 1)))
    if isinstance(x, Value):
        gaps = sample_gaps(ctx, x, y, dim, a)
        areas = ew(ctx, "div", ew(ctx, "mul", gaps, pairs), 2.0)
    else:
        step = float(1.0 if x is None and dx is None else x if x is not None else dx)
        areas = ew(ctx, "mul", pairs, step / 2)
    return ctx.call("torch.cumsum", areas, a)


@register(torch.bincount, "Tensor.bincount")
def bincount(ctx: EmitContext, input: Value, weights: Optional[Value] = None, minlength: int = 0):
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor: refused

    Its length is ``max(input) + 1`` (at least ``minlength``): it follows the data, and an asset
    of the traced length would drop the counts of larger values at other inputs."""
    ctx.fail("bincount: the output length is max(input) + 1, which depends on the values; a fixed-length export "
             "would silently drop larger values. Write the count with a fixed length n instead: "
             "torch.zeros(n, dtype=...).scatter_add(0, x, torch.ones_like(x)) (or the weights), or "
             "F.one_hot(x, n).sum(0)")


def _cov_matrix(ctx: EmitContext, input: Value, correction, fweights, aweights) -> Value:
    """torch.cov: ``[V, N]`` observations (a vector: one variable), optional integer frequency and
    float observation weights; ``(x - avg) * w @ (x - avg)^T / norm``, norm clamped at 0."""
    if rank(input) > 2:
        ctx.fail(f"cov takes a vector or a matrix (variables x observations), got rank {rank(input)}")
    x = to_float(ctx, input)
    if rank(x) < 2:
        x = reshape_to(ctx, x, [1] + list(x.shape))
    n = x.shape[1]
    w = None
    for given in (fweights, aweights):
        if given is not None:
            g = cast(ctx, given, x.dtype)
            w = g if w is None else ew(ctx, "mul", w, g)
    if w is None:
        avg = ctx.call("torch.mean", x, 1, True)
    else:
        w = reshape_to(ctx, w, [1, n])
        w_sum = reduce(ctx, "sum_reduce", w, [1], True)
        avg = ew(ctx, "div", reduce(ctx, "sum_reduce", ew(ctx, "mul", x, w), [1], True), w_sum)
    xm = ew(ctx, "sub", x, avg)
    right = xm if w is None else ew(ctx, "mul", xm, w)
    c = _matmul(ctx, xm, right, transpose_b=True)
    if w is None:
        if isinstance(n, int):
            c = ew(ctx, "div", c, float(max(n - correction, 0)))
        else:
            c = divide_by_count(ctx, c, x, [1], minus=correction)  # NOTE: a dynamic count below 0 is not clamped
    else:
        if aweights is not None and correction != 0:
            aw = reshape_to(ctx, cast(ctx, aweights, x.dtype), [1, n])
            norm = ew(ctx, "sub", w_sum, ew(ctx, "mul", ew(ctx, "div", reduce(ctx, "sum_reduce", ew(ctx, "mul", w, aw),
                                                                             [1], True), w_sum), float(correction)))
        else:
            norm = ew(ctx, "sub", w_sum, float(correction))
        norm = ctx.call("torch.clamp_min", norm, 0.0)
        c = ew(ctx, "div", c, norm)
    return c


def _squeezed(ctx: EmitContext, c: Value) -> Value:
    """torch's ``.squeeze()`` of a ``[V, V]`` result: a 0-d tensor for one variable."""
    if c.shape == (1, 1):
        return ctx.op("squeeze", c, axes=[0, 1], out_shape=(), out_dtype=c.dtype)
    return c


@register(torch.cov, "Tensor.cov")
def cov(ctx: EmitContext, input: Value, *, correction: int = 1, fweights: Optional[Value] = None,
        aweights: Optional[Value] = None):
    """cov(Tensor self, *, int correction=1, Tensor? fweights=None, Tensor? aweights=None) -> Tensor"""
    if isinstance(input.shape[0] if rank(input) == 2 else 1, SymDim):
        ctx.fail("cov with a dynamic number of variables: the result's shape would be [V, V] with V dynamic "
                 "(squeezed when V is 1); make the variable axis (dim 0) static")
    return _squeezed(ctx, _cov_matrix(ctx, input, correction, fweights, aweights))


@register(torch.corrcoef, "Tensor.corrcoef")
def corrcoef(ctx: EmitContext, input: Value):
    """corrcoef(Tensor self) -> Tensor: ``cov / (std_i * std_j)``, clamped to [-1, 1] as torch's"""
    if isinstance(input.shape[0] if rank(input) == 2 else 1, SymDim):
        ctx.fail("corrcoef with a dynamic number of variables: make the variable axis (dim 0) static")
    c = _cov_matrix(ctx, input, 1, None, None)
    if c.shape == (1, 1):
        return _squeezed(ctx, ew(ctx, "div", c, c))
    std = un(ctx, "sqrt", ctx.call("torch.diagonal", c))
    v = std.shape[0]
    c = ew(ctx, "div", c, reshape_to(ctx, std, [v, 1]))
    c = ew(ctx, "div", c, reshape_to(ctx, std, [1, v]))
    return ctx.call("torch.clamp", c, -1.0, 1.0)


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
