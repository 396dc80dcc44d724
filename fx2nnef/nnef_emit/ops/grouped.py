"""Grouped matrix products and histograms: the ops of mixture-of-experts routing.

transformers routes tokens to experts by sorting them by expert, counting them with
``torch.histc`` and multiplying each run of rows by its expert with ``torch._grouped_mm``.
The run lengths are data, and a data-dependent size cannot be a shape, so the grouped product
is lowered in a dense, shape-static form: every row is multiplied by every group's matrix and
the product of its own group is selected (a select, not a product with a 0/1 mask, so that an
inf in another group's product cannot leak in). Counting compares with constant thresholds.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import EmitError
from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, rank, select
from ..registry import register
from .linalg import _matmul

_NUMPY_FLOATS = {DType.F16: np.float16, DType.F32: np.float32, DType.F64: np.float64}


# ---- histc -------------------------------------------------------------------------------------------------------
def _ordered(x: float, ftype) -> int:
    """An integer key that orders the floats of ``ftype`` as their values (-0.0 just below +0.0)."""
    bits = np.array(x, dtype=ftype).view(f"i{np.dtype(ftype).itemsize}").item()
    return bits if bits >= 0 else -(bits & ~(-1 << (8 * np.dtype(ftype).itemsize - 1))) - 1


def _unordered(key: int, ftype) -> float:
    size = np.dtype(ftype).itemsize
    bits = key if key >= 0 else (-(key + 1)) | (-1 << (8 * size - 1))
    return np.array(bits, dtype=f"i{size}").view(ftype).item()


def _histc_thresholds(bins: int, lo: float, hi: float, ftype) -> np.ndarray:
    """``t`` with ``bins + 1`` items: torch.histc counts ``x`` in bin ``b`` exactly when
    ``t[b] <= x < t[b + 1]``.

    torch computes the bin of ``x`` with float arithmetic (not by comparing with the bin edges),
    so the first value of each bin is found by bisection over the floats of ``ftype``, asking
    torch itself for the bin of one value; the last threshold is the float after ``hi``.
    """
    tdtype = torch.from_numpy(np.zeros(1, ftype)).dtype

    def bin_of(key: int) -> int:
        counts = torch.histc(torch.tensor([_unordered(key, ftype)], dtype=tdtype), bins=bins, min=lo, max=hi)
        return int(counts.argmax())

    first, last = _ordered(lo, ftype), _ordered(hi, ftype)
    out = [np.array(lo, ftype)]
    for b in range(1, bins):
        left, right = first, last  # bin_of(right) >= b holds: hi is in the last bin
        while left < right:
            mid = (left + right) // 2
            left, right = (left, mid) if bin_of(mid) >= b else (mid + 1, right)
        out.append(np.array(_unordered(left, ftype), ftype))
    out.append(np.nextafter(np.array(hi, ftype), np.array(np.inf, ftype)))
    return np.array(out, dtype=ftype)


@register(torch.histc, "Tensor.histc")
def histc(ctx: EmitContext, input: Value, bins: int = 100, min=0, max=0):
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    if input.dtype not in _NUMPY_FLOATS:
        ctx.fail(f"torch.histc on {input.dtype.value}: only f16, f32 and f64 inputs can be lowered")
    if min >= max:
        ctx.fail(f"torch.histc(min={min}, max={max}) takes its range from the data, which cannot be exported; "
                 "pass min < max")
    n = 1
    for d in input.shape:
        n = n * d
    x = ctx.op("reshape", input, shape=[-1, 1], out_shape=(n, 1))
    limits = ctx.const(_histc_thresholds(bins, float(min), float(max), _NUMPY_FLOATS[input.dtype])[None, :])
    above = ctx.op("ge", x, limits, out_dtype=DType.BOOL, out_shape=(n, bins + 1))
    ones = ctx.op("select", above, 1.0, 0.0, out_dtype=DType.F32, out_shape=(n, bins + 1))
    at_least = ctx.op("sum_reduce", ones, axes=[0], out_shape=(1, bins + 1), out_dtype=DType.F32)
    lower = ctx.op("slice", at_least, axes=[1], begin=[0], end=[bins], out_shape=(1, bins), out_dtype=DType.F32)
    upper = ctx.op("slice", at_least, axes=[1], begin=[1], end=[bins + 1], out_shape=(1, bins), out_dtype=DType.F32)
    counts = ctx.op("sub", lower, upper, out_shape=(1, bins), out_dtype=DType.F32)
    return cast(ctx, ctx.op("squeeze", counts, axes=[0], out_shape=(bins,), out_dtype=DType.F32), input.dtype)


# ---- grouped_mm --------------------------------------------------------------------------------------------------
def _group_mask(ctx: EmitContext, offs: Value, length) -> Value:
    """bool ``[G, length]``: position ``i`` belongs to group ``g`` (``offs[g-1] <= i < offs[g]``)."""
    groups = offs.shape[0]
    if offs.is_constant and isinstance(length, int):
        end = np.asarray(offs.data, dtype=np.int64)[:, None]
        start = np.concatenate([[[0]], end[:-1]])
        pos = np.arange(length)[None, :]
        return ctx.const((pos >= start) & (pos < end), DType.BOOL)
    end = cast(ctx, offs, DType.I64)
    if groups > 1:
        zero = ctx.const(np.zeros(1, np.int64), DType.I64)
        head = ctx.op("slice", end, axes=[0], begin=[0], end=[groups - 1], out_shape=(groups - 1,))
        start = ctx.op("concat", [zero, head], axis=0, out_shape=(groups,))
    else:
        start = ctx.const(np.zeros(1, np.int64), DType.I64)
    start = ctx.op("unsqueeze", start, axes=[1], out_shape=(groups, 1))
    end = ctx.op("unsqueeze", end, axes=[1], out_shape=(groups, 1))
    pos = ctx.call("nnef.range", 0, length, 1, DType.I64, (length,))
    pos = ctx.op("unsqueeze", pos, axes=[0], out_shape=(1, length))
    after_start = ctx.op("ge", pos, start, out_dtype=DType.BOOL, out_shape=(groups, length))
    before_end = ctx.op("lt", pos, end, out_dtype=DType.BOOL, out_shape=(groups, length))
    return ctx.op("and", after_start, before_end, out_dtype=DType.BOOL, out_shape=(groups, length))


def _own_group(ctx: EmitContext, products: Value, mask: Value) -> Value:
    """Sum over groups (axis 0) of ``products`` where ``mask`` holds, zero elsewhere."""
    kept = select(ctx, mask, products, 0.0)  # a zero of the products' dtype (f16 too)
    summed = ctx.op("sum_reduce", kept, axes=[0], out_shape=(1,) + tuple(products.shape[1:]), out_dtype=products.dtype)
    return ctx.op("squeeze", summed, axes=[0], out_shape=tuple(products.shape[1:]), out_dtype=products.dtype)


def _unsqueeze(ctx: EmitContext, v: Value, at: int) -> Value:
    shape = list(v.shape)
    shape.insert(at, 1)
    return ctx.op("unsqueeze", v, axes=[at], out_shape=tuple(shape), out_dtype=v.dtype)


@register(torch._grouped_mm)
def _grouped_mm(ctx: EmitContext, input: Value, mat2: Value, offs: Optional[Value] = None, bias=None,
                out_dtype: Optional[DType] = None):
    """_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"""
    if bias is not None:
        ctx.fail("torch._grouped_mm with a bias cannot be lowered (torch's CPU kernel refuses it too)")
    ra, rb = rank(input), rank(mat2)
    if (offs is None) != (ra == 3 and rb == 3):
        ctx.fail(f"torch._grouped_mm of a {ra}-D and a {rb}-D operand "
                 f"{'needs' if offs is None else 'takes no'} offs")
    if ra == 3 and rb == 3:
        y = _matmul(ctx, input, mat2)
    elif ra == 2 and rb == 3:  # rows of `input` in groups, one matrix per group
        products = _matmul(ctx, _unsqueeze(ctx, input, 0), mat2)
        y = _own_group(ctx, products, _unsqueeze(ctx, _group_mask(ctx, offs, input.shape[0]), 2))
    elif ra == 3 and rb == 2:  # columns of `mat2` in groups, one left matrix per group
        products = _matmul(ctx, input, _unsqueeze(ctx, mat2, 0))
        y = _own_group(ctx, products, _unsqueeze(ctx, _group_mask(ctx, offs, mat2.shape[1]), 1))
    elif ra == 2 and rb == 2:  # the inner axis in groups: one product per group
        mask = _unsqueeze(ctx, _group_mask(ctx, offs, input.shape[1]), 1)
        a = _unsqueeze(ctx, input, 0)
        kept = select(ctx, mask, a, 0.0)
        y = _matmul(ctx, kept, _unsqueeze(ctx, mat2, 0))
    else:
        raise EmitError(f"torch._grouped_mm takes 2-D or 3-D operands, got {ra}-D and {rb}-D")
    return y if out_dtype is None else cast(ctx, y, out_dtype)


@register(F.grouped_mm)
def grouped_mm(ctx: EmitContext, mat_a: Value, mat_b: Value, *, offs: Optional[Value] = None, bias=None,
               out_dtype: Optional[DType] = None):
    """grouped_mm(Tensor mat_a, Tensor mat_b, *, Tensor? offs=None, Tensor? bias=None, dtype? out_dtype=None) -> Tensor"""
    return _grouped_mm(ctx, mat_a, mat_b, offs, bias, out_dtype)
