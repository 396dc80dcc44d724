"""Matrix products: linear, matmul, mm, bmm, addmm, baddbmm, einsum, outer; triangular solves."""
from __future__ import annotations

import math
import string
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import ReshapedData, RowsData, Value, product
from ..context import EmitContext, stored_transposed
from ..helpers import broadcast_operands, cast, dims_list, ew, rank, result_dtype, tiled_from, un, unsqueeze_to
from ..registry import register
from .reduce import vector_norm
from .tiled_operands import (concat_of_tile_made_opaque, contraction_tile_made_opaque, itemwise_of_tile_made_opaque,
                             weights_product_operands)


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
        a, b = (contraction_tile_made_opaque(ctx, v, ax) for v, ax in ((a, r - 1), (b, r - 1 if transpose_b else r - 2)))
        a, b = (v if v.is_constant else concat_of_tile_made_opaque(ctx, v) for v in (a, b))
        a, b = (v if v.is_constant else itemwise_of_tile_made_opaque(ctx, v) for v in (a, b))
        a, b = weights_product_operands(ctx, a, b)
    if ra == 1:
        a = ctx.op("unsqueeze", a, axes=[0], out_shape=(1,) + tuple(a.shape))
    if rb == 1:
        b = ctx.op("unsqueeze", b, axes=[1], out_shape=tuple(b.shape) + (1,))
    r = max(rank(a), rank(b))
    a, b = unsqueeze_to(ctx, a, r), unsqueeze_to(ctx, b, r)
    out_shape = tuple(a.shape[:-1]) + (b.shape[-2] if transpose_b else b.shape[-1],)
    if ctx.loop_body and ctx.profile.loop_products_summed and not a.is_constant and not b.is_constant \
            and _static_product(tuple(a.shape) + (out_shape[-1],)) <= _PRODUCT_LIMIT:
        y = _product_summed(ctx, a, b, transpose_b, out_shape)
    else:
        y = ctx.op("matmul", a, b, transposeA=False, transposeB=transpose_b, out_shape=out_shape)
    if ra == 1 and rb == 1:
        return ctx.op("squeeze", y, axes=[r - 2, r - 1], out_shape=tuple(out_shape[:-2]))
    if ra == 1:
        return ctx.op("squeeze", y, axes=[r - 2], out_shape=tuple(out_shape[:-2]) + (out_shape[-1],))
    if rb == 1:
        return ctx.op("squeeze", y, axes=[r - 1], out_shape=tuple(out_shape[:-1]))
    return y


_PRODUCT_LIMIT = 1 << 24  # items of the broadcast product (its static dims): 64 MiB in f32


def _static_product(shape) -> int:
    out = 1
    for d in shape:
        out *= d if isinstance(d, int) else 1
    return out


def _product_summed(ctx: EmitContext, a: Value, b: Value, transpose_b: bool, out_shape: tuple) -> Value:
    """``a @ b`` (equal ranks ``r``) as ``sum(a[..., :, :, None] * b[..., None, :, :], axis=r-1)``.

    NOTE: tract 0.23.9 never finishes loading a tract_core_scan whose body multiplies two values
    of the step (a state and a slice, two slices) with ``matmul`` when a scanned input comes from
    another product (Mamba's ``state @ C[:, t]``, fed by the linear that made ``C``); the same
    product as a broadcast multiply and a sum loads and runs. A product with a weight keeps
    ``matmul``, so does one whose broadcast product would hold more than ``_PRODUCT_LIMIT`` items."""
    r = rank(a)
    if transpose_b:
        perm = list(range(r - 2)) + [r - 1, r - 2]
        b = ctx.op("transpose", b, axes=perm, out_shape=tuple(b.shape[:-2]) + (b.shape[-1], b.shape[-2]))
    wide_a = ctx.op("unsqueeze", a, axes=[r], out_shape=tuple(a.shape) + (1,))
    wide_b = ctx.op("unsqueeze", b, axes=[r - 2], out_shape=tuple(b.shape[:-2]) + (1,) + tuple(b.shape[-2:]))
    prod = ctx.op("mul", *broadcast_operands(ctx, wide_a, wide_b))
    summed = ctx.op("sum_reduce", prod, axes=[r - 1],
                    out_shape=tuple(out_shape[:-1]) + (1,) + (out_shape[-1],))
    return ctx.op("squeeze", summed, axes=[r - 1], out_shape=out_shape)


@register(F.linear)
def linear(ctx: EmitContext, input: Value, weight: Value, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor

    NOTE: an input of rank 4 or more is flattened to a matrix first: tract 0.23.9 fails to load a
    rank-4 product with a broadcast weight whose result is reshaped, sliced and concatenated into
    the contracted axis of another matmul (DeepSeek's latent attention: "concat-einsum ... Condition
    failed"). The products are the same."""
    if rank(weight) == 1:  # a dot product with each row: the last axis goes (D-FINE's box integral)
        y = ctx.call("torch.matmul", input, weight)
        return y if bias is None else ew(ctx, "add", y, bias)
    if rank(weight) != 2:
        ctx.fail("linear weight must be 1-D or 2-D")
    lead = tuple(input.shape[:-1])
    if len(lead) > 2:
        rows = 1
        for d in lead:
            rows = rows * d
        flat = ctx.op("reshape", input, shape=dims_list([rows, input.shape[-1]]), out_shape=(rows, input.shape[-1]))
        y = _linear_product(ctx, flat, weight)
        y = ctx.op("reshape", y, shape=dims_list(lead + (weight.shape[0],)), out_shape=lead + (weight.shape[0],))
    else:
        y = _linear_product(ctx, input, weight)
    if bias is not None:
        y = ctx.op("add", *broadcast_operands(ctx, y, bias))
    return y


def _linear_product(ctx: EmitContext, x: Value, weight: Value) -> Value:
    """``x @ weight.T``; a plain constant weight of more than twice the profile's
    ``weight_block_bytes`` is multiplied by blocks of its rows, the products concatenated.

    NOTE: tract 0.23.9 holds two copies of a weight while it loads it (its leading unit axis is
    dropped into a new tensor) and while it packs it for its kernels: a vocabulary matrix
    (Llama-3.2-1B's 501 MiB) added that much to the peak, twice. Each block is packed on its own,
    so the extra copy is one block; the products are the same numbers."""
    block = ctx.profile.weight_block_bytes
    data = weight.source if weight.is_constant else None
    if not block or data is None or data.stored_format is not None or data.dtype is not weight.dtype \
            or tuple(data.shape) != tuple(weight.shape) or data.nbytes <= 2 * block:
        return _matmul(ctx, x, weight, transpose_b=True)
    rows, lead = weight.shape[0], (1,) * (rank(x) - 2)  # each block declared at the product's rank, once
    step = -(-rows // -(-data.nbytes // block))
    blocks = [RowsData(data, start, min(start + step, rows)) for start in range(0, rows, step)]
    parts = [_matmul(ctx, x, ctx.const(ReshapedData(b, lead + b.shape), weight.dtype, name=weight.name),
                     transpose_b=True) for b in blocks]
    return ctx.op("concat", parts, axis=rank(parts[0]) - 1, out_shape=tuple(parts[0].shape[:-1]) + (rows,))


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


# ---- einsum -------------------------------------------------------------------------------------------------------
def parse_einsum(ctx: EmitContext, equation: str, operands: list) -> tuple:
    """Operand and output subscripts with ``...`` spelt out and the implicit output made explicit."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        ctx.fail(f"einsum '{equation}' names {len(terms)} operands, got {len(operands)}")
    free = [c for c in string.ascii_letters if c not in equation]
    n_ell = max((rank(t) - len(s.replace("...", "")) for s, t in zip(terms, operands) if "..." in s), default=0)
    ell = "".join(free[:n_ell])
    terms = [s.replace("...", ell[n_ell - (rank(t) - len(s.replace("...", ""))):]) for s, t in zip(terms, operands)]
    if not arrow:
        letters = "".join(terms)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    return terms, out.replace("...", ell)


def _operand_list(operands: tuple) -> list:
    """``einsum(eq, a, b)`` and ``einsum(eq, [a, b])`` alike."""
    return list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)


def _sizes(terms: list, operands: list) -> dict:
    return {c: d for s, t in zip(terms, operands) for c, d in zip(s, t.shape)}


def _sum_out(ctx: EmitContext, x: Value, subs: str, keep: str) -> tuple:
    """Sum ``x`` over the letters of ``subs`` not in ``keep``."""
    gone = [i for i, c in enumerate(subs) if c not in keep]
    if not gone:
        return x, subs
    kept = tuple(d for i, d in enumerate(x.shape) if i not in gone)
    summed = ctx.op("sum_reduce", x, axes=gone, out_shape=tuple(1 if i in gone else d for i, d in enumerate(x.shape)))
    return ctx.op("squeeze", summed, axes=gone, out_shape=kept), "".join(c for c in subs if c in keep)


def _permute(ctx: EmitContext, x: Value, subs: str, order: str) -> Value:
    if subs == order:
        return x
    perm = [subs.index(c) for c in order]
    return ctx.op("transpose", x, axes=perm, out_shape=tuple(x.shape[i] for i in perm))


def _regroup(ctx: EmitContext, x: Value, lead: int, dims: tuple) -> Value:
    """``x`` with its axes after the first ``lead`` ones reshaped to ``dims``."""
    shape = tuple(x.shape[:lead]) + tuple(dims)
    if tuple(x.shape[lead:]) == tuple(dims):
        return x
    if rank(x) == lead:
        return ctx.op("unsqueeze", x, axes=list(range(lead, len(shape))), out_shape=shape)
    if not dims:
        return ctx.op("squeeze", x, axes=list(range(lead, rank(x))), out_shape=shape)
    return ctx.op("reshape", x, shape=list(dims), axis_start=lead, axis_count=rank(x) - lead, out_shape=shape)


def _contract(ctx: EmitContext, a: Value, sa: str, b: Value, sb: str, keep: str, size: dict) -> tuple:
    """Contract two operands with one batched matmul; returns the result and its subscripts."""
    a, sa = _sum_out(ctx, a, sa, keep + sb)
    b, sb = _sum_out(ctx, b, sb, keep + sa)
    batch = "".join(c for c in sa if c in sb and c in keep)
    inner = "".join(c for c in sa if c in sb and c not in keep)
    left, right = "".join(c for c in sa if c not in sb), "".join(c for c in sb if c not in sa)
    merged = {g: product(size[c] for c in g) for g in (left, inner, right)}
    a = _regroup(ctx, _permute(ctx, a, sa, batch + left + inner), len(batch), (merged[left], merged[inner]))
    b = _regroup(ctx, _permute(ctx, b, sb, batch + inner + right), len(batch), (merged[inner], merged[right]))
    lead = tuple(size[c] for c in batch)
    a, b = weights_product_operands(ctx, a, b)
    y = ctx.op("matmul", a, b, transposeA=False, transposeB=False, out_shape=lead + (merged[left], merged[right]))
    return _regroup(ctx, y, len(batch), tuple(size[c] for c in left + right)), batch + left + right


@register(torch.einsum)
def einsum(ctx: EmitContext, equation: str, *operands):
    """einsum(str equation, Tensor[] tensors) -> Tensor (standard ops: transpose, reshape, sum_reduce, matmul)"""
    operands = _operand_list(operands)
    terms, out = parse_einsum(ctx, equation, operands)
    if any(len(set(s)) != len(s) for s in terms):
        ctx.fail(f"einsum '{equation}' takes a diagonal (a letter repeated in one operand); only tract supports it")
    size = _sizes(terms, operands)
    y, subs = _sum_out(ctx, operands[0], terms[0], out + "".join(terms[1:]))
    for i in range(1, len(operands)):
        y, subs = _contract(ctx, y, subs, operands[i], terms[i], out + "".join(terms[i + 1:]), size)
    return _permute(ctx, y, subs, out)


@register(torch.outer, "Tensor.outer", torch.ger, "Tensor.ger")
def outer(ctx: EmitContext, input: Value, vec2: Value):
    """outer(Tensor self, Tensor vec2) -> Tensor"""
    dtype = result_dtype(input, vec2)
    a = ctx.op("unsqueeze", cast(ctx, input, dtype), axes=[1], out_shape=(input.shape[0], 1))
    b = ctx.op("unsqueeze", cast(ctx, vec2, dtype), axes=[0], out_shape=(1, vec2.shape[0]))
    return ctx.op("mul", a, b, out_dtype=dtype, out_shape=(input.shape[0], vec2.shape[0]))


def _swap_last(ctx: EmitContext, x: Value) -> Value:
    r = rank(x)
    perm = list(range(r - 2)) + [r - 1, r - 2]
    return ctx.op("transpose", x, axes=perm, out_shape=tuple(x.shape[p] for p in perm), out_dtype=x.dtype)


@register(torch.linalg.solve_triangular)
def solve_triangular(ctx: EmitContext, input: Value, B: Value, *, upper: bool, left: bool = True,
                     unitriangular: bool = False, out=None):
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor

    NOTE: NNEF has no triangular solve. With ``A = D (I + M)`` (D its diagonal, M strictly
    triangular, so M**n = 0), ``(I + M)^-1 = (I - M)(I + M**2)(I + M**4)...``: ceil(log2(n))
    steps of two matmuls each, on a static n (the chunks of a gated delta net: n = 64). Only
    the triangle torch reads is used (and not the diagonal for ``unitriangular``). The powers
    of M round differently from substitution: a badly conditioned system shows in the check."""
    n = input.shape[-1]
    if not isinstance(n, int) or rank(input) < 2 or rank(B) < 2:
        ctx.fail("linalg.solve_triangular needs matrices of a static size")
    if not left:  # X A = B  <=>  A^T X^T = B^T
        x = solve_triangular(ctx, _swap_last(ctx, input), _swap_last(ctx, B), upper=not upper,
                             unitriangular=unitriangular)
        return _swap_last(ctx, x)
    dtype = result_dtype(input, B)
    a, x = cast(ctx, input, dtype), cast(ctx, B, dtype)
    strict = np.triu(np.ones((n, n)), 1) if upper else np.tril(np.ones((n, n)), -1)
    m = ew(ctx, "mul", a, ctx.const(strict, dtype, name="strict_triangle"))
    if not unitriangular:
        diag = ew(ctx, "mul", a, ctx.const(np.eye(n), dtype, name="eye"))
        d = ctx.op("sum_reduce", diag, axes=[rank(a) - 1], out_dtype=dtype, out_shape=tuple(a.shape[:-1]) + (1,))
        m, x = ew(ctx, "div", m, d), ew(ctx, "div", x, d)
    p = un(ctx, "neg", m)
    steps = math.ceil(math.log2(n)) if n > 1 else 0
    for j in range(steps):
        x = ew(ctx, "add", x, _matmul(ctx, p, x))
        if j + 1 < steps:
            p = _matmul(ctx, p, p)
    return x


@register(torch.cdist)
def cdist(ctx: EmitContext, x1: Value, x2: Value, p: float = 2.0, compute_mode=None):
    """cdist(Tensor x1, Tensor x2, float p=2, str? compute_mode=None) -> Tensor

    The p-norm of every difference ``x1[..., i, :] - x2[..., j, :]`` (a broadcast difference,
    then a reduction over the features): exact where torch's matrix-product form for p=2
    (``compute_mode``) rounds, so tract matches torch at the check's tolerance."""
    if not isinstance(p, (int, float)) or p < 0:
        raise EmitError(f"cdist with p={p!r} is not supported (a number >= 0)")
    a = ctx.call("Tensor.unsqueeze", x1, rank(x1) - 1)  # [..., P, 1, M]
    b = ctx.call("Tensor.unsqueeze", x2, rank(x2) - 2)  # [..., 1, R, M]
    diff = ew(ctx, "sub", a, b)
    return vector_norm(ctx, diff, float(p), [rank(diff) - 1], False)


@register(torch.cross, "Tensor.cross", torch.linalg.cross)
def cross(ctx: EmitContext, input: Value, other: Value, dim=None):
    """cross(Tensor self, Tensor other, int? dim=None) -> Tensor (linalg.cross: dim=-1)

    The vector product along ``dim`` (size 3), the operands broadcast on the other axes;
    ``dim=None`` (torch.cross) takes the first axis of size 3, as torch does."""
    r = max(rank(input), rank(other))
    a, b = unsqueeze_to(ctx, input, r), unsqueeze_to(ctx, other, r)
    if dim is None and ctx.node is not None and "linalg" in str(ctx.node.kind):
        dim = -1  # torch.linalg.cross's default: the last axis, not the first one of size 3
    if dim is None:
        dim = next((i for i in range(r) if a.shape[i] == 3 and b.shape[i] == 3), None)
        if dim is None:
            ctx.fail("cross: no dimension of size 3 in the inputs")
    ax = dim % r if isinstance(dim, int) and -r <= dim < r else None
    if ax is None:
        ctx.fail(f"cross: dim {dim} is out of range for rank {r}")
    if a.shape[ax] != 3 or b.shape[ax] != 3:
        ctx.fail(f"cross: dimension {dim} must have size 3, got {a.shape[ax]} and {b.shape[ax]}")

    def part(v: Value, i: int) -> Value:
        shape = v.shape[:ax] + (1,) + v.shape[ax + 1:]
        return ctx.op("slice", v, axes=[ax], begin=[i], end=[i + 1], out_shape=shape, out_dtype=v.dtype)

    pa, pb = [part(a, i) for i in range(3)], [part(b, i) for i in range(3)]
    terms = []
    for i, j in ((1, 2), (2, 0), (0, 1)):
        terms.append(ctx.call("torch.sub", ctx.call("torch.mul", pa[i], pb[j]), ctx.call("torch.mul", pa[j], pb[i])))
    shape = list(terms[0].shape)
    shape[ax] = 3
    return ctx.op("concat", terms, axis=ax, out_shape=tuple(shape), out_dtype=terms[0].dtype)
