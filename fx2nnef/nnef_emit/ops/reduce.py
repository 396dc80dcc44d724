"""Reductions: sum, mean, max/min (with indices), arg-reductions, prod, var/std, norms, all/any, logsumexp;
running ops along an axis: cumsum, diff.

NNEF reductions keep the reduced axes (as size 1); a ``squeeze`` follows unless ``keepdim``.
``dim=None`` and ``dim=[]`` both mean every axis.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from ...ir import DType, SymDim, Value, product, simplify
from ..context import TRACT_DATUM, EmitContext
from ..helpers import axes, axis, cast, compare, ew, negative_at, rank, result_dtype, select, to_float, un
from ..registry import register
from .shape import concat, full_like_value, reshape_to, slice_axis
from .tiled_operands import weights_product_operands


# building blocks -------------------------------------------------------------------------
def reduce_axes(dim, x: Value) -> list:
    """Sorted non-negative axes of ``x`` for a torch ``dim`` argument (None or empty: all)."""
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return axes(dim, rank(x))


def reduced_shape(shape, axes_: list, keepdim: bool):
    if shape is None:
        return None
    if keepdim:
        return tuple(1 if i in axes_ else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes_)


def squeeze_unless(ctx: EmitContext, y: Value, shape, axes_: list, keepdim: bool) -> Value:
    """``y`` (reduced with kept axes) squeezed to torch's result unless ``keepdim``."""
    if keepdim or not axes_:
        return y
    return ctx.op("squeeze", y, axes=axes_, out_dtype=y.dtype, out_shape=reduced_shape(shape, axes_, False))


def reduce(ctx: EmitContext, op: str, x: Value, axes_: list, keepdim: bool = True,
           out_dtype: Optional[DType] = None) -> Value:
    """NNEF reduction ``op`` of ``x`` over ``axes_``."""
    if not axes_:
        return x
    guarded = ctx.profile.guarded_reductions
    empty = may_be_empty(ctx, x, axes_) if guarded and op in _NEUTRAL else []
    if op == "mean_reduce" and guarded and (_dynamic_count(x, axes_) or empty):
        # NOTE: tract 0.23.9 takes time exponential in the number of chained ``mean_reduce`` (or
        # divisions by a size) over dynamic axes to load a graph: 3 GroupNorms on dynamic H and W
        # do not load within minutes (Poolformer hung). A sum times the recip of the count, which
        # is how tract computes the mean itself, loads at once (and over no element gives
        # 0 * inf = NaN, as torch's mean)
        total = reduce(ctx, "sum_reduce", x, axes_, True, out_dtype)
        return squeeze_unless(ctx, divide_by_count(ctx, total, x, axes_), x.shape, axes_, keepdim)
    source = pad_neutral(ctx, x, empty, _NEUTRAL[op]) if empty else x
    y = ctx.op(op, source, axes=axes_, out_dtype=out_dtype or x.dtype, out_shape=reduced_shape(x.shape, axes_, True))
    return squeeze_unless(ctx, y, x.shape, axes_, keepdim)


# NOTE: tract 0.23.9 panics ("attempt to divide by zero", core/src/ops/nn/reduce.rs) in a sum,
# product, max or min reduction over an axis of size 0 (``x[:, 4:].sum(1)`` at S = 4); its
# ``any_reduce`` / ``all_reduce`` give False / True there, as torch. Where an axis may be empty
# within the export's range, the reduced tensor is padded with one neutral element on that axis:
# the reduction is unchanged elsewhere and torch's value (0, 1) at size 0. amax/amin/max/min are
# left as they are: torch raises on an empty axis too.
_NEUTRAL = {"sum_reduce": 0.0, "mean_reduce": 0.0, "tract_core_product_reduce": 1.0}


def may_be_empty(ctx: EmitContext, x: Value, axes_: list) -> list:
    """Those of ``axes_`` whose size in ``x`` is 0, or can be 0 within the export's range of sizes."""
    if x.shape is None:
        return []
    return [a for a in axes_ if (x.shape[a] == 0 if isinstance(x.shape[a], int)
                                 else x.shape[a].symbols & ctx.data_counts or negative_at(ctx, x.shape[a] - 1) is not None)]


def pad_neutral(ctx: EmitContext, x: Value, axes_: list, value: float) -> Value:
    """``x`` with one element ``value`` appended on each of ``axes_`` (a constant pad, static amounts)."""
    pairs = [(0, 1 if i in axes_ else 0) for i in range(len(x.shape))]
    shape = tuple(simplify(d + 1) if i in axes_ else d for i, d in enumerate(x.shape))
    return ctx.op("pad", x, padding=pairs, border="constant", value=float(value), out_shape=shape, out_dtype=x.dtype)


def _dynamic_count(x: Value, axes_: list) -> bool:
    return x.shape is not None and not isinstance(product(x.shape[a] for a in axes_), int)


def divide_by_count(ctx: EmitContext, total: Value, x: Value, axes_: list, minus: float = 0) -> Value:
    """``total`` divided by the number of elements of ``x`` over ``axes_`` (minus ``minus``).

    NOTE: in a tract_core_scan body (tract 0.23.9), a Mul or Div by a value tract knows to be a
    size (a cast of a symbol, which ``mean_reduce`` also divides by) is taken for a mask: its
    other operand gets a region of interest, which flows back to the loop's carries, and the
    carry leaving the body then has another fact than the one entering it ("inconsistent fact:
    body input 0 is N,F32 🬳 N"); loading fails. ``recip`` of the size hides it, and sum times
    recip is how tract computes ``mean_reduce`` itself. In the body of a scan inside a scan, tract
    cannot evaluate a symbol at all ("Undetermined symbol in expression", also through
    ``tract_core_shape_of``): there the count is a sum of ones shaped like ``x``.
    """
    if not _dynamic_count(x, axes_):
        return ew(ctx, "div", total, element_count(ctx, x, axes_, total.dtype, minus))
    if not ctx.loop_body or ctx.loop_body == 1:  # (a division by a size: see reduce's note)
        count = element_count(ctx, x, axes_, total.dtype)
    else:
        nan = ctx.op("tract_core_is_nan", to_float(ctx, x), out_dtype=DType.BOOL, out_shape=x.shape)
        ones = ctx.op("tract_core_cast", ctx.op("or", nan, ctx.op("not", nan, out_shape=x.shape), out_shape=x.shape),
                      to=TRACT_DATUM[total.dtype], out_dtype=total.dtype, out_shape=x.shape)
        count = reduce(ctx, "sum_reduce", ones, axes_)
    if minus:
        count = ew(ctx, "sub", count, float(minus))
    return ew(ctx, "mul", total, ctx.op("recip", count, out_dtype=total.dtype, out_shape=count.shape))


def element_count(ctx: EmitContext, x: Value, axes_: list, dtype: DType, minus: float = 0):
    """Number of elements over ``axes_`` minus ``minus``: a float, or a tensor when a size is dynamic."""
    n = product(x.shape[a] for a in axes_)
    if isinstance(n, int):
        return float(n - minus)
    if minus != int(minus):
        ctx.fail(f"a non-integer correction ({minus}) over the dynamic size {n} cannot be expressed")
    return ctx.call("nnef.size", n - int(minus), dtype)


@register("nnef.size")
def size_tensor(ctx: EmitContext, size: SymDim, dtype: DType):
    """A size that depends on dynamic input dims, as a scalar tensor of ``dtype``."""
    ctx.fail(f"the size {size} depends on a dynamic input dim, which target '{ctx.target}' cannot express")


def _accumulate_dtype(x: Value, dtype: Optional[DType]) -> DType:
    """torch's result type of sum/prod/cumsum: ``dtype`` if given, else int64 for integers and bools."""
    if dtype is not None:
        return dtype
    return x.dtype if x.dtype.is_float else DType.I64


def _numeric(ctx: EmitContext, x: Value) -> Value:
    """Bools as int64 (tract's max/min/sum reductions reject bools)."""
    return cast(ctx, x, DType.I64) if x.dtype.is_bool else x


# sum, mean, prod ---------------------------------------------------------------------------
@register(torch.sum, "Tensor.sum")
def sum_(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    return reduce(ctx, "sum_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.nansum, "Tensor.nansum")
def nansum(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    if x.dtype.is_float:
        x = select(ctx, compare(ctx, "ne", x, x), 0.0, x)
    return reduce(ctx, "sum_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.mean, "Tensor.mean")
def mean(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, dtype) if dtype is not None else input
    return reduce(ctx, "mean_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.prod, "Tensor.prod")
def prod(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    axes_ = reduce_axes(dim, x)
    for a in axes_:
        x = _product_along(ctx, x, a)
    return squeeze_unless(ctx, x, input.shape, axes_, keepdim)


def _product_along(ctx: EmitContext, x: Value, a: int) -> Value:
    """Product over axis ``a`` (kept, size 1) by halving: standard NNEF has no product reduction."""
    n = x.shape[a]
    if not isinstance(n, int):
        ctx.fail(f"prod over an axis of dynamic size {n} needs tract")
    while n > 1:
        half = n // 2
        y = ew(ctx, "mul", _slice(ctx, x, a, 0, half), _slice(ctx, x, a, half, 2 * half))
        if n % 2:
            y = ctx.op("concat", [y, _slice(ctx, x, a, 2 * half, n)], axis=a, out_dtype=y.dtype,
                       out_shape=y.shape[:a] + (half + 1,) + y.shape[a + 1:])
        x, n = y, y.shape[a]
    return x


def _slice(ctx: EmitContext, x: Value, a: int, begin: int, end: int) -> Value:
    shape = x.shape[:a] + (end - begin,) + x.shape[a + 1:]
    return ctx.op("slice", x, axes=[a], begin=[begin], end=[end], out_shape=shape)


# max, min, arg-reductions ----------------------------------------------------------------------
@register(torch.amax, "Tensor.amax")
def amax(ctx: EmitContext, input: Value, dim=(), keepdim: bool = False):
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    op = "any_reduce" if input.dtype.is_bool else "max_reduce"
    return reduce(ctx, op, input, reduce_axes(dim, input), keepdim)


@register(torch.amin, "Tensor.amin")
def amin(ctx: EmitContext, input: Value, dim=(), keepdim: bool = False):
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    op = "all_reduce" if input.dtype.is_bool else "min_reduce"
    return reduce(ctx, op, input, reduce_axes(dim, input), keepdim)


def _extremum(ctx: EmitContext, which: str, input: Value, dim, keepdim: bool, other):
    """torch.max/min: full reduction, (values, indices) along ``dim``, or elementwise with ``other``."""
    if isinstance(dim, Value):
        other, dim = dim, None
    if other is not None:
        return ctx.call("torch.maximum" if which == "max" else "torch.minimum", input, other)
    full = amax if which == "max" else amin
    if dim is None:
        return full(ctx, input, None, False)
    values = full(ctx, input, dim, keepdim)
    indices = _arg(ctx, f"arg{which}_reduce", input, dim, keepdim)
    return values, indices


@register(torch.max, "Tensor.max")
def max_(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, other: Optional[Value] = None):
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Also ``max(Tensor self) -> Tensor`` and ``max.other(Tensor self, Tensor other) -> Tensor``.
    """
    return _extremum(ctx, "max", input, dim, keepdim, other)


@register(torch.min, "Tensor.min")
def min_(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, other: Optional[Value] = None):
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Also ``min(Tensor self) -> Tensor`` and ``min.other(Tensor self, Tensor other) -> Tensor``.
    """
    return _extremum(ctx, "min", input, dim, keepdim, other)


def _arg(ctx: EmitContext, op: str, input: Value, dim: Optional[int], keepdim: bool) -> Value:
    """Index of the first extreme value along ``dim`` (over the flattened tensor when None), as int64."""
    x = _numeric(ctx, input)
    if dim is not None:
        return reduce(ctx, op, x, reduce_axes(dim, x), keepdim, out_dtype=DType.I64)
    flat = ctx.op("reshape", x, shape=[-1], out_shape=(product(x.shape),))
    y = reduce(ctx, op, flat, [0], keepdim, out_dtype=DType.I64)
    return ctx.op("reshape", y, shape=[1] * rank(x), out_shape=(1,) * rank(x)) if keepdim else y


@register(torch.argmax, "Tensor.argmax")
def argmax(ctx: EmitContext, input: Value, dim: Optional[int] = None, keepdim: bool = False):
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(ctx, "argmax_reduce", input, dim, keepdim)


@register(torch.argmin, "Tensor.argmin")
def argmin(ctx: EmitContext, input: Value, dim: Optional[int] = None, keepdim: bool = False):
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(ctx, "argmin_reduce", input, dim, keepdim)


# variance ----------------------------------------------------------------------------------------
def variance(ctx: EmitContext, x: Value, axes_: list, correction: float = 1) -> tuple:
    """(variance, mean, x - mean) of ``x`` over ``axes_``, the statistics with the reduced axes kept."""
    m = reduce(ctx, "mean_reduce", x, axes_)
    d = ew(ctx, "sub", x, m)
    if correction == 0:
        return reduce(ctx, "mean_reduce", ew(ctx, "mul", d, d), axes_), m, d
    total = reduce(ctx, "sum_reduce", ew(ctx, "mul", d, d), axes_)
    return divide_by_count(ctx, total, x, axes_, correction), m, d


def _var_args(dim, unbiased, correction):
    """Normalize the var/std overloads: ``var(x, unbiased)``, ``var(x, dim, unbiased)``, ``correction=``."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, correction


def _var_std(ctx: EmitContext, input: Value, dim, unbiased, keepdim: bool, correction, std: bool,
             with_mean: bool = False):
    """var or std (and the mean when ``with_mean``) as torch returns them."""
    dim, correction = _var_args(dim, unbiased, correction)
    x = to_float(ctx, input)
    axes_ = reduce_axes(dim, x)
    var, m, _ = variance(ctx, x, axes_, correction)
    out = squeeze_unless(ctx, un(ctx, "sqrt", var) if std else var, x.shape, axes_, keepdim)
    return (out, squeeze_unless(ctx, m, x.shape, axes_, keepdim)) if with_mean else out


@register(torch.var, "Tensor.var")
def var(ctx: EmitContext, input: Value, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
        correction=None):
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _var_std(ctx, input, dim, unbiased, keepdim, correction, std=False)


@register(torch.std, "Tensor.std")
def std(ctx: EmitContext, input: Value, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
        correction=None):
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _var_std(ctx, input, dim, unbiased, keepdim, correction, std=True)


@register(torch.var_mean)
def var_mean(ctx: EmitContext, input: Value, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
             correction=None):
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    return _var_std(ctx, input, dim, unbiased, keepdim, correction, std=False, with_mean=True)


@register(torch.std_mean)
def std_mean(ctx: EmitContext, input: Value, dim=None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
             correction=None):
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    return _var_std(ctx, input, dim, unbiased, keepdim, correction, std=True, with_mean=True)


# norms -----------------------------------------------------------------------------------------
def vector_norm(ctx: EmitContext, x: Value, ord, axes_: list, keepdim: bool) -> Value:
    """The ``ord``-norm of ``x`` over ``axes_`` (ord 2, 1, inf, -inf, 0 or any other p)."""
    x = to_float(ctx, x)
    if ord == 2:
        return un(ctx, "sqrt", reduce(ctx, "sum_reduce", ew(ctx, "mul", x, x), axes_, keepdim))
    if ord == 0:
        nonzero = cast(ctx, compare(ctx, "ne", x, 0.0), x.dtype)
        return reduce(ctx, "sum_reduce", nonzero, axes_, keepdim)
    a = un(ctx, "abs", x)
    if ord == math.inf:
        return reduce(ctx, "max_reduce", a, axes_, keepdim)
    if ord == -math.inf:
        return reduce(ctx, "min_reduce", a, axes_, keepdim)
    if ord == 1:
        return reduce(ctx, "sum_reduce", a, axes_, keepdim)
    powered = reduce(ctx, "sum_reduce", ew(ctx, "pow", a, float(ord)), axes_, keepdim)
    return ew(ctx, "pow", powered, 1.0 / ord)


@register(torch.linalg.vector_norm)
def linalg_vector_norm(ctx: EmitContext, input: Value, ord=2, dim=None, keepdim: bool = False, *,
                       dtype: Optional[DType] = None):
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    v = cast(ctx, input, dtype) if dtype is not None else input
    return vector_norm(ctx, v, ord, reduce_axes(dim, v), keepdim)


@register(torch.norm)
def norm(ctx: EmitContext, input: Value, p="fro", dim=None, keepdim: bool = False, out=None,
         dtype: Optional[DType] = None):
    """norm(Tensor input, Scalar|str p='fro', int[]? dim=None, bool keepdim=False, out=None, dtype=None) -> Tensor"""
    return norm_method(ctx, input, p, dim, keepdim, dtype)


@register("Tensor.norm")
def norm_method(ctx: EmitContext, input: Value, p="fro", dim=None, keepdim: bool = False,
                dtype: Optional[DType] = None):
    """norm(Tensor self, Scalar|str p='fro', int[]? dim=None, bool keepdim=False, dtype=None) -> Tensor"""
    if isinstance(p, str) and p != "fro":
        ctx.fail(f"norm: p={p!r} (a matrix norm) is not supported")
    x = cast(ctx, input, dtype) if dtype is not None else input
    return vector_norm(ctx, x, 2 if p == "fro" else p, reduce_axes(dim, x), keepdim)


@register(torch.linalg.norm)
def linalg_norm(ctx: EmitContext, input: Value, ord=None, dim=None, keepdim: bool = False, *,
                dtype: Optional[DType] = None):
    """linalg_norm(Tensor self, Scalar? ord=None, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    matrix = isinstance(dim, (list, tuple)) and len(dim) == 2 or (dim is None and ord is not None and rank(input) == 2)
    if ord not in (None, "fro") and (matrix or isinstance(ord, str)):  # 'nuc', 1, inf...: linalg.matrix_norm
        return ctx.call("torch.linalg.matrix_norm", input, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    x = cast(ctx, input, dtype) if dtype is not None else input
    return vector_norm(ctx, x, 2 if ord in (None, "fro") else ord, reduce_axes(dim, x), keepdim)


# logic, logsumexp, counting ----------------------------------------------------------------------
@register(torch.all, "Tensor.all")
def all_(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False):
    """all.dims(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor"""
    x = cast(ctx, input, DType.BOOL)
    return reduce(ctx, "all_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.any, "Tensor.any")
def any_(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False):
    """any.dims(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor"""
    x = cast(ctx, input, DType.BOOL)
    return reduce(ctx, "any_reduce", x, reduce_axes(dim, x), keepdim)


@register(torch.logsumexp, "Tensor.logsumexp", torch.special.logsumexp)
def logsumexp(ctx: EmitContext, input: Value, dim, keepdim: bool = False):
    """logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    x = to_float(ctx, input)
    axes_ = reduce_axes(dim, x)
    empty = may_be_empty(ctx, x, axes_) if ctx.profile.guarded_reductions else []
    if empty:  # the max over no element (see _NEUTRAL): the lowest finite value, exp(x - m) sums to 0, log gives -inf
        m = reduce(ctx, "max_reduce", pad_neutral(ctx, x, empty, -float(np.finfo(x.dtype.numpy_name).max)), axes_)
    else:
        m = reduce(ctx, "max_reduce", x, axes_)
    total = reduce(ctx, "sum_reduce", un(ctx, "exp", ew(ctx, "sub", x, m)), axes_)
    return squeeze_unless(ctx, ew(ctx, "add", un(ctx, "log", total), m), x.shape, axes_, keepdim)


@register(torch.count_nonzero, "Tensor.count_nonzero")
def count_nonzero(ctx: EmitContext, input: Value, dim=None):
    """count_nonzero(Tensor self, int? dim=None) -> Tensor"""
    nonzero = compare(ctx, "ne", input, 0) if not input.dtype.is_bool else input
    x = cast(ctx, nonzero, DType.I64)
    return reduce(ctx, "sum_reduce", x, reduce_axes(dim, x), False)


# cumulative sum ----------------------------------------------------------------------------------
@register(torch.cumsum, "Tensor.cumsum")
def cumsum(ctx: EmitContext, input: Value, dim: int, *, dtype: Optional[DType] = None):
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    r = rank(x)
    a = axes(dim, r)[0]
    n = x.shape[a]
    if not isinstance(n, int):
        ctx.fail(f"cumsum over an axis of dynamic size {n} needs tract")
    order = [i for i in range(r) if i != a] + [a]
    moved = x if a == r - 1 else ctx.op("transpose", x, axes=order, out_shape=tuple(x.shape[i] for i in order))
    rows = ctx.op("reshape", moved, shape=[-1, n], out_shape=(product(moved.shape) // n, n))
    upper = ctx.const(np.triu(np.ones((n, n))), x.dtype)
    rows, upper = weights_product_operands(ctx, rows, upper)
    summed = ctx.op("matmul", rows, upper, out_shape=rows.shape)
    back = ctx.op("reshape", summed, shape=list(moved.shape), out_shape=moved.shape)
    if a == r - 1:
        return back
    return ctx.op("transpose", back, axes=[int(i) for i in np.argsort(order)], out_shape=x.shape)


# running products and extremes -------------------------------------------------------------------
# A scan of length n in ceil(log2(n)) steps (Hillis-Steele): at step k every item combines with the
# item k places earlier (an identity item before the start).


def _scan_steps(ctx: EmitContext, n, what: str) -> list:
    if not isinstance(n, int):
        # NOTE: enough steps for any length (31) make tract 0.23.9 run out of memory at load
        ctx.fail(f"{what} along an axis of dynamic size {n} is not supported (the number of steps follows the "
                 "length); make that axis static, or scan along another axis")
    return [1 << i for i in range(max(0, (n - 1).bit_length()))]


def _earlier(ctx: EmitContext, x: Value, a: int, k: int, identity) -> Value:
    """``x`` moved ``k`` places later along axis ``a``, ``identity`` filling the first ``k`` places."""
    n = x.shape[a]
    pad_shape = x.shape[:a] + (k,) + x.shape[a + 1:]
    pad = full_like_value(ctx, identity, x.dtype, pad_shape)
    if isinstance(n, int) and k >= n:
        return slice_axis(ctx, pad, a, 0, n)
    return concat(ctx, [pad, slice_axis(ctx, x, a, 0, n - k)], a)


def _scan_axis(dim, x: Value) -> int:
    return axes(dim, rank(x))[0] if rank(x) else 0


@register(torch.cumprod, "Tensor.cumprod")
def cumprod(ctx: EmitContext, input: Value, dim: int, *, dtype: Optional[DType] = None):
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = cast(ctx, input, _accumulate_dtype(input, dtype))
    if rank(x) == 0:
        return x
    a = _scan_axis(dim, x)
    for k in _scan_steps(ctx, x.shape[a], "cumprod"):
        x = ew(ctx, "mul", _earlier(ctx, x, a, k, 1), x)
    return x


# ---- diff -----------------------------------------------------------------------------------------------------------
@register(torch.diff, "Tensor.diff")
def diff(ctx: EmitContext, input: Value, n: int = 1, dim: int = -1, prepend=None, append=None):
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    ax = axis(dim, rank(input))
    dtype = result_dtype(input, prepend, append) if prepend is not None or append is not None else input.dtype
    x = concat(ctx, [cast(ctx, v, dtype) for v in (prepend, input, append) if v is not None], ax)
    for _ in range(n):
        length = x.shape[ax]
        later = slice_axis(ctx, x, ax, 1, length)
        earlier = slice_axis(ctx, x, ax, 0, length - 1)
        op = "ne" if dtype.is_bool else "sub"
        x = ctx.op(op, later, earlier, out_shape=later.shape, out_dtype=dtype)
    return x


# ---- nanmean, trapezoid ---------------------------------------------------------------------------------------------
@register(torch.nanmean, "Tensor.nanmean")
def nanmean(ctx: EmitContext, input: Value, dim=None, keepdim: bool = False, *, dtype: Optional[DType] = None):
    """nanmean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    The sum of the non-NaN items over their count (NaN where every item is NaN, as in torch)."""
    x = cast(ctx, input, dtype) if dtype is not None else input
    if not x.dtype.is_float:
        ctx.fail("nanmean is defined on float tensors only (torch refuses integers)")
    axes_ = reduce_axes(dim, x)
    valid = compare(ctx, "eq", x, x)
    total = reduce(ctx, "sum_reduce", select(ctx, valid, x, 0.0), axes_)
    count = reduce(ctx, "sum_reduce", cast(ctx, valid, x.dtype), axes_)
    return squeeze_unless(ctx, ew(ctx, "div", total, count), x.shape, axes_, keepdim)


def sample_gaps(ctx: EmitContext, x: Value, y: Value, dim: int, a: int) -> Value:
    """The gaps between the sample points ``x`` of ``y`` along its axis ``a`` (``dim``), as the
    trapezoid rules take them: a 1-D ``x`` runs along that axis."""
    x = to_float(ctx, x)
    if rank(x) == 1 and rank(y) > 1:
        x = reshape_to(ctx, x, [x.shape[0] if i == a else 1 for i in range(rank(y))])
    xa = a if rank(x) == rank(y) else axis(dim, rank(x))
    m = x.shape[xa]
    return ew(ctx, "sub", slice_axis(ctx, x, xa, 1, m), slice_axis(ctx, x, xa, 0, simplify(m - 1)))

@register(torch.trapezoid, torch.trapz)
def trapezoid(ctx: EmitContext, y: Value, x=None, *, dx=None, dim: int = -1):
    """trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor; trapezoid.dx(Tensor y, *, Scalar dx=1, int dim=-1)

    As torch computes it: with a spacing ``dx``, ``(sum(y) - (y[0] + y[-1]) / 2) * dx``; with
    sample points ``x``, ``sum(diff(x) * (y[1:] + y[:-1])) / 2``."""
    y = to_float(ctx, y)
    a = axis(dim, rank(y))
    n = y.shape[a]
    if not isinstance(x, Value):
        step = float(1.0 if x is None and dx is None else x if x is not None else dx)
        ends = ew(ctx, "add", slice_axis(ctx, y, a, 0, 1), slice_axis(ctx, y, a, simplify(n - 1), n))
        total = reduce(ctx, "sum_reduce", y, [a])
        out = ew(ctx, "mul", ew(ctx, "sub", total, ew(ctx, "mul", ends, 0.5)), step)
        return squeeze_unless(ctx, out, y.shape, [a], False)
    gaps = sample_gaps(ctx, x, y, dim, a)
    pairs = ew(ctx, "add", slice_axis(ctx, y, a, 1, n), slice_axis(ctx, y, a, 0, simplify(n - 1)))
    total = reduce(ctx, "sum_reduce", ew(ctx, "mul", gaps, pairs), [a])
    return squeeze_unless(ctx, ew(ctx, "div", total, 2.0), total.shape, [a], False)


# ---- logcumsumexp ---------------------------------------------------------------------------------------------------
@register(torch.logcumsumexp, "Tensor.logcumsumexp")
def logcumsumexp(ctx: EmitContext, input: Value, dim: int):
    """logcumsumexp(Tensor self, int dim) -> Tensor

    Along a static axis: a scan of ``logaddexp`` in ceil(log2(n)) steps (each item with the one
    k places earlier, -inf before the start), stable for any magnitudes; -inf items stay -inf
    until a finite one comes, +inf and NaN carry forward, as in torch."""
    x = to_float(ctx, input)
    if rank(x) == 0:
        return x
    a = _scan_axis(dim, x)
    for k in _scan_steps(ctx, x.shape[a], "logcumsumexp"):
        x = ctx.call("torch.logaddexp", x, _earlier(ctx, x, a, k, -math.inf))
    return x


@register(torch.isin)
def isin(ctx: EmitContext, elements=None, test_elements=None, *, assume_unique: bool = False, invert: bool = False,
         element=None, test_element=None):
    """isin(Tensor elements, Tensor test_elements, *, bool assume_unique=False, bool invert=False) -> Tensor
    (and the overloads with a Scalar ``element`` or ``test_element``): each item of ``elements``
    compared with every test item, then ``any`` over those (a multimodal LM finding its image
    tokens: ``torch.isin(input_ids, image_token_ids)``)."""
    elements = element if elements is None else elements
    test_elements = test_element if test_elements is None else test_elements
    if not isinstance(elements, Value):
        ctx.fail("torch.isin with a Python number as elements is not supported; pass a tensor")
    tests = test_elements if isinstance(test_elements, Value) else \
        ctx.const(np.array(test_elements).reshape(-1), elements.dtype)
    flat = reshape_to(ctx, tests, [-1]) if rank(tests) != 1 else tests
    r = rank(elements)
    x = ctx.op("unsqueeze", elements, axes=[r], out_shape=tuple(elements.shape) + (1,), out_dtype=elements.dtype)
    hits = compare(ctx, "eq", x, flat)
    found = reduce(ctx, "any_reduce", hits, [r], False)
    return ctx.op("not", found, out_dtype=DType.BOOL, out_shape=found.shape) if invert else found
