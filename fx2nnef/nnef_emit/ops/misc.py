"""einsum, outer, topk/sort/argsort, repeat_interleave and the isnan/isinf family (one_hot is in indexing.py)."""
from __future__ import annotations

import string

import numpy as np
import torch

from ...ir import DType, SymDim, Value, product
from ..context import TRACT_DATUM, EmitContext
from ..helpers import axis, broadcast_operands, cast, rank, result_dtype
from .activation import ew
from ..registry import register
from .creation import dim_tensor


# ---- repeat_interleave ---------------------------------------------------------------------------------------------
def repeat_axis(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """Each item along ``ax`` repeated ``repeats`` times in a row: unsqueeze, tile, merge the two axes."""
    shape = tuple(x.shape)
    tiled_shape = shape[:ax + 1] + (repeats,) + shape[ax + 1:]
    y = ctx.op("unsqueeze", x, axes=[ax + 1], out_shape=shape[:ax + 1] + (1,) + shape[ax + 1:])
    reps = [1] * len(tiled_shape)
    reps[ax + 1] = repeats
    y = ctx.op("tile", y, repeats=reps, out_shape=tiled_shape)
    return ctx.op("reshape", y, shape=[-1], axis_start=ax, axis_count=2,
                  out_shape=shape[:ax] + (shape[ax] * repeats,) + shape[ax + 1:])



def _count(ctx: EmitContext, repeats) -> int:
    """An integer repeat count, from a Python int or a constant tensor whose items are all equal."""
    if isinstance(repeats, Value) and repeats.is_constant and np.unique(repeats.data).size == 1:
        return int(repeats.data.reshape(-1)[0])
    if not isinstance(repeats, (int, SymDim)):
        ctx.fail("repeat_interleave supports one repeat count for every item, not per-item counts")
    return repeats


@register(torch.repeat_interleave, "Tensor.repeat_interleave")
def repeat_interleave(ctx: EmitContext, input: Value = None, repeats=None, dim=None, *, output_size=None):
    """repeat_interleave(Tensor self, Tensor|SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""
    if input is None or repeats is None:
        ctx.fail("repeat_interleave(repeats) alone gives indices whose count depends on the data; pass the input tensor")
    n = _count(ctx, repeats)
    if dim is None:
        input = ctx.op("reshape", input, shape=[-1], out_shape=(product(input.shape),))
        dim = 0
    return ctx.call("nnef.repeat_axis", input, axis(dim, rank(input)), n)


@register("nnef.repeat_axis")
def repeat_axis_rule(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """Each item along ``ax`` repeated ``repeats`` times in a row."""
    return repeat_axis(ctx, x, ax, repeats)


@register("nnef.repeat_axis", target="tract")
def repeat_axis_tract(ctx: EmitContext, x: Value, ax: int, repeats) -> Value:
    """NOTE: tract 0.23.9 cannot load a matmul with a constant whose other operand is the reshaped
    tile of ``repeat_axis`` ("Incompatible reshape for shape [1, 1, 2, 2] and Reshape(0, [15],
    [5, 3])", or "Trying to substitute a 5,3,3,S,2 by 5,1,3,S,2 ... EinSum"): a gather at
    ``i // repeats`` gives the same tensor."""
    n = x.shape[ax]
    total = n * repeats
    if isinstance(total, int):
        index = ctx.const(np.repeat(np.arange(n, dtype=np.int64), repeats), DType.I64)
    else:
        index = ew(ctx, "div", ctx.call("nnef.range", 0, total, 1, DType.I64, (total,)), repeats)
    shape = tuple(x.shape[:ax]) + (total,) + tuple(x.shape[ax + 1:])
    return ctx.call("nnef.gather", x, index, ax, shape)


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


@register(torch.einsum, target="tract")
def einsum_tract(ctx: EmitContext, equation: str, *operands):
    """einsum(str equation, Tensor[] tensors) -> Tensor (one tract_core_einsum)"""
    operands = _operand_list(operands)
    terms, out = parse_einsum(ctx, equation, operands)
    size = _sizes(terms, operands)
    dtype = result_dtype(*operands)
    operands = [cast(ctx, t, dtype) for t in operands]
    if len(operands) > 1:
        # NOTE: tract 0.23.9 gives zeros for a repeated letter next to another operand ('ii,i->i');
        # each diagonal is taken alone first ('ii->i' is right)
        for k, s in enumerate(terms):
            if len(set(s)) != len(s):
                once = "".join(dict.fromkeys(s))
                operands[k] = _tract_einsum(ctx, [operands[k]], s + "->" + once, dtype, tuple(size[c] for c in once))
                terms[k] = once
    if out:
        return _tract_einsum(ctx, operands, ",".join(terms) + "->" + out, dtype, tuple(size[c] for c in out))
    # NOTE: tract 0.23.9 returns its input unchanged for a full reduction ('ij->'): keep one letter, then sum it
    keep = next((c for t in terms for c in t), None)
    if keep is None:
        ctx.fail(f"einsum '{equation}' of scalars only: multiply them instead")
    y = _tract_einsum(ctx, operands, ",".join(terms) + "->" + keep, dtype, (size[keep],))
    y = ctx.op("sum_reduce", y, axes=[0], out_shape=(1,), out_dtype=dtype)
    return ctx.op("squeeze", y, axes=[0], out_shape=(), out_dtype=dtype)


def _tract_einsum(ctx: EmitContext, operands: list, expr: str, dtype: DType, shape: tuple) -> Value:
    return ctx.op("tract_core_einsum", operands, expr=expr, acc=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)


@register(torch.outer, "Tensor.outer", torch.ger, "Tensor.ger")
def outer(ctx: EmitContext, input: Value, vec2: Value):
    """outer(Tensor self, Tensor vec2) -> Tensor"""
    dtype = result_dtype(input, vec2)
    a = ctx.op("unsqueeze", cast(ctx, input, dtype), axes=[1], out_shape=(input.shape[0], 1))
    b = ctx.op("unsqueeze", cast(ctx, vec2, dtype), axes=[0], out_shape=(1, vec2.shape[0]))
    return ctx.op("mul", a, b, out_dtype=dtype, out_shape=(input.shape[0], vec2.shape[0]))


# ---- topk / sort (tract only: standard NNEF has no sort) -----------------------------------------------------------
def _topk(ctx: EmitContext, x: Value, k, dim: int, largest: bool) -> tuple:
    ax = axis(dim, rank(x))
    count = ctx.op("squeeze", dim_tensor(ctx, k, DType.I64), axes=[0], out_shape=()) if isinstance(k, SymDim) else k
    shape = tuple(x.shape[:ax]) + (k,) + tuple(x.shape[ax + 1:])
    values, indices = ctx.op("tract_core_topk", x, k=count, axis=ax, largest=largest, n_out=2, out_shape=shape)
    indices.dtype = DType.I64
    return values, indices


@register(torch.topk, "Tensor.topk", target="tract")
def topk(ctx: EmitContext, input: Value, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _topk(ctx, input, k, dim, largest)


@register(torch.sort, "Tensor.sort", target="tract")
def sort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """sort(Tensor self, int dim=-1, bool descending=False, *, bool? stable) -> (Tensor values, Tensor indices)

    NOTE: tract's topk keeps equal items in index order (tested both ways), so ``stable=True`` holds.
    """
    return _topk(ctx, input, input.shape[axis(dim, rank(input))], dim, descending)


@register(torch.argsort, "Tensor.argsort", target="tract")
def argsort(ctx: EmitContext, input: Value, dim=-1, descending=False, *, stable=False):
    """argsort(Tensor self, int dim=-1, bool descending=False, *, bool stable=False) -> Tensor"""
    return sort(ctx, input, dim, descending)[1]


# ---- isnan / isinf / isfinite --------------------------------------------------------------------------------------
def _largest(dtype: DType) -> float:
    """The largest finite value of a float dtype (f32's for the wider ones, as literals are read as f32)."""
    return float(np.finfo(np.float16 if dtype is DType.F16 else np.float32).max)


@register(torch.isnan, "Tensor.isnan")
def isnan(ctx: EmitContext, input: Value):
    """isnan(Tensor self) -> Tensor"""
    return ctx.call("nnef.compare", "ne", input, input)


# name -> (NNEF comparison, compare |x| rather than x, sign of the bound, result for integers)
CLASSIFIERS = {
    "isinf": ("gt", True, 1, False), "isfinite": ("le", True, 1, True),
    "isposinf": ("gt", False, 1, False), "isneginf": ("lt", False, -1, False),
}


def _classifier(name: str, op: str, magnitude: bool, sign: int, int_result: bool):
    """Compare x (or |x|) with the largest finite value: NaN compares False, inf beyond it."""
    def convert(ctx: EmitContext, input: Value):
        if not input.dtype.is_float:
            return ctx.call("nnef.compare", "eq" if int_result else "ne", input, input)
        x = ctx.op("abs", input, out_shape=input.shape) if magnitude else input
        return ctx.op(op, x, sign * _largest(input.dtype), out_dtype=DType.BOOL, out_shape=input.shape)

    convert.__name__, convert.__doc__ = name, f"{name}(Tensor self) -> Tensor"
    return convert


for _name, _rule in CLASSIFIERS.items():
    register(getattr(torch, _name), f"Tensor.{_name}")(_classifier(_name, *_rule))


# ---- hypot / isclose -------------------------------------------------------------------------------------------
@register(torch.hypot, "Tensor.hypot")
def hypot(ctx: EmitContext, input, other):
    """hypot(Tensor self, Tensor other) -> Tensor (sqrt(a^2 + b^2) in f64: no overflow, rounded once)"""
    dtype = result_dtype(input, other)
    if not dtype.is_float:
        ctx.fail("hypot is defined on float tensors only (torch refuses integers)")
    a, b = (cast(ctx, v, DType.F64) if isinstance(v, Value) else float(v) for v in (input, other))
    total = ew(ctx, "add", ew(ctx, "mul", a, a), ew(ctx, "mul", b, b)) if isinstance(a, Value) else \
        ew(ctx, "add", ew(ctx, "mul", b, b), a * a)
    return cast(ctx, ctx.op("sqrt", total, out_shape=total.shape), dtype)


@register(torch.isclose, "Tensor.isclose")
def isclose(ctx: EmitContext, input: Value, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """isclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> Tensor

    torch's steps: ``a == b``, or (``|a - b|`` finite and ``<= atol + |rtol * b|``), the latter
    in f32 for integer and bool tensors.
    """
    dtype = result_dtype(input, other)
    a, b = cast(ctx, input, dtype), cast(ctx, other, dtype)
    if not isinstance(b, Value):
        b = ctx.const(np.array(b, dtype=dtype.numpy_name), dtype)
    close = ctx.call("nnef.compare", "eq", *broadcast_operands(ctx, a, b, dtype))
    if equal_nan and dtype.is_float:
        both_nan = ew(ctx, "and", ctx.call("nnef.compare", "ne", a, a), ctx.call("nnef.compare", "ne", b, b))
        close = ew(ctx, "or", close, both_nan)
    if rtol == 0 and atol == 0:
        return close
    if not dtype.is_float:
        a, b, dtype = cast(ctx, a, DType.F32), cast(ctx, b, DType.F32), DType.F32
    scaled = ew(ctx, "mul", b, float(rtol))
    allowed = ew(ctx, "add", ctx.op("abs", scaled, out_shape=scaled.shape), float(atol))
    diff = ew(ctx, "sub", a, b)
    actual = ctx.op("abs", diff, out_shape=diff.shape)
    within = ctx.call("nnef.compare", "le", *broadcast_operands(ctx, actual, allowed, dtype))
    finite = ctx.call("nnef.compare", "le", actual, _largest(dtype))
    return ew(ctx, "or", close, ew(ctx, "and", within, finite))
