"""Tensor creation: arange, zeros/ones/full/empty and their *_like / new_* forms, tensor, eye.

The tracer folds creations whose result depends neither on input data nor on dynamic sizes
into constants, so these converters see sizes that are symbolic (``S``, ``S+1``) or a template
tensor (``zeros_like(x)``). A filled tensor is one ``tile`` of a ``[1, ..., 1]`` constant: tile
repeats may be symbolic expressions, which tract resolves at run time; such a tile is made opaque
to tract's folding of uniform tensors (``helpers.opaque``).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import cast, compare, dim_value, dims_list, ew, opaque, producer, select, un, unsqueeze_to
from ..registry import register
from .data_windows import data_arange


def size_arg(size: Sequence) -> list:
    """``zeros(2, S)``, ``zeros((2, S))`` and ``zeros([2, S])`` as one list of dims."""
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = size[0]
    return dims_list(size)


def scalar_dtype(x) -> DType:
    """torch's dtype for a tensor created from the Python (or 0-d tensor) value ``x``."""
    if isinstance(x, Value):
        return DType.BOOL if x.dtype.is_bool else DType.I64 if x.dtype.is_int else DType.F32
    if isinstance(x, bool):
        return DType.BOOL
    return DType.I64 if isinstance(x, (int, SymDim)) else DType.F32


def filled(ctx: EmitContext, sizes: list, fill_value, dtype: DType) -> Value:
    """A tensor of shape ``sizes`` holding ``fill_value`` (a Python number, a dynamic size or a 0-d Value)."""
    r = len(sizes)
    if isinstance(fill_value, SymDim):
        fill_value = tensor_from_data(ctx, fill_value, dtype)
    if isinstance(fill_value, Value):
        base = unsqueeze_to(ctx, cast(ctx, fill_value, dtype), r)
    else:
        base = ctx.const(np.full([1] * r, fill_value), dtype, name="fill")
    if r == 0:
        return base
    y = ctx.op("tile", base, repeats=sizes, out_dtype=dtype, out_shape=tuple(sizes))
    return opaque(ctx, y) if base.is_constant and any(isinstance(d, SymDim) for d in sizes) else y


def range_length(start, end, step):
    """Number of items of ``arange(start, end, step)``: int, SymDim, or None when not polynomial."""
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        return max(0, math.ceil((end - start) / step))
    return (end - start) if step == 1 else (start - end) if step == -1 else None


def _text(v) -> str:
    return "<computed>" if isinstance(v, Value) else str(v)


def _reads_tensor_data(ctx: EmitContext, v: Value) -> bool:
    """Whether ``v`` is computed from the items of a graph input (not only from its sizes)."""
    todo, seen = [v], set()
    while todo:
        w = todo.pop()
        if id(w) in seen or w.is_constant:
            continue
        seen.add(id(w))
        st = producer(ctx, w)
        if st is None or st.op in ("external", "tract_core_external"):
            return True
        if st.op == "tract_core_shape_of":
            continue
        todo += [a for a in st.args if isinstance(a, Value)]
    return False


@register(torch.arange)
def arange(ctx: EmitContext, start=0, end=None, step=1, *, out=None, dtype: Optional[DType] = None,
           layout=None, device=None, pin_memory=False, requires_grad=False):
    """arange(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, ...) -> Tensor"""
    if end is None:
        start, end = 0, start
    bounds = (start, end, step)
    computed = [v for v in bounds if isinstance(v, Value)]
    if computed and not any(_reads_tensor_data(ctx, v) for v in computed):
        ctx.fail(f"torch.arange with a bound or step computed from sizes ({_text(start)}, {_text(end)}, "
                 f"{_text(step)}): its number of items, ceil((end - start) / step), is a float computation "
                 "the exporter cannot carry exactly at every size (1.0 / S rounds, and the count is not "
                 "always S); use integer steps (torch.arange(S) / S)")
    if computed and (isinstance(step, Value) or any(v.shape != () or v.dtype is not DType.I64 for v in computed)):
        ctx.fail("torch.arange with bounds read from tensor data takes integer bounds read as numbers "
                 "(torch.arange(lengths.max())) and a constant step")
    if computed:
        return data_arange(ctx, start, end, step, dtype)
    if any(isinstance(v, float) and not v.is_integer() for v in bounds):
        ctx.fail(f"torch.arange({start}, {end}, {step}): fractional bounds with a dynamic size are not supported")
    start, end, step = (int(v) if isinstance(v, float) else v for v in bounds)
    dtype = dtype or (DType.F32 if any(isinstance(v, float) for v in bounds) else DType.I64)
    return ctx.call("nnef.range", start, end, step, dtype, (range_length(start, end, step),))


@register(torch.zeros, torch.empty)
def zeros(ctx: EmitContext, *size, out=None, dtype: Optional[DType] = None, layout=None, device=None,
          pin_memory=False, requires_grad=False, names=None, memory_format=None):
    """zeros(SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor (empty gives zeros too)"""
    return filled(ctx, size_arg(size), 0, dtype or DType.F32)


@register(torch.ones)
def ones(ctx: EmitContext, *size, out=None, dtype: Optional[DType] = None, layout=None, device=None,
         pin_memory=False, requires_grad=False, names=None):
    """ones(SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"""
    return filled(ctx, size_arg(size), 1, dtype or DType.F32)


@register(torch.full)
def full(ctx: EmitContext, size, fill_value, *, out=None, dtype: Optional[DType] = None, layout=None,
         device=None, pin_memory=False, requires_grad=False, names=None):
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return filled(ctx, size_arg([size]), fill_value, dtype or scalar_dtype(fill_value))


def _like(fill):
    def convert(ctx: EmitContext, input: Value, *, dtype: Optional[DType] = None, layout=None, device=None,
                pin_memory=False, requires_grad=False, memory_format=None):
        return filled(ctx, dims_list(input.shape), fill, dtype or input.dtype)

    convert.__name__ = f"like_{fill}"
    convert.__doc__ = "zeros_like/ones_like/empty_like(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor"
    return convert


register(torch.zeros_like, torch.empty_like)(_like(0))
register(torch.ones_like)(_like(1))


@register(torch.full_like)
def full_like(ctx: EmitContext, input: Value, fill_value, *, dtype: Optional[DType] = None, layout=None,
              device=None, pin_memory=False, requires_grad=False, memory_format=None):
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return filled(ctx, dims_list(input.shape), fill_value, dtype or input.dtype)


def _new(fill):
    def convert(ctx: EmitContext, input: Value, *size, dtype: Optional[DType] = None, layout=None, device=None,
                pin_memory=False, requires_grad=False):
        return filled(ctx, size_arg(size), fill, dtype or input.dtype)

    convert.__name__ = f"new_{fill}"
    convert.__doc__ = "new_zeros/new_ones/new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, ...) -> Tensor"
    return convert


register("Tensor.new_zeros", "Tensor.new_empty")(_new(0))
register("Tensor.new_ones")(_new(1))


@register("Tensor.new_full")
def new_full(ctx: EmitContext, input: Value, size, fill_value, *, dtype: Optional[DType] = None, layout=None,
             device=None, pin_memory=False, requires_grad=False):
    """new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor"""
    return filled(ctx, size_arg([size]), fill_value, dtype or input.dtype)


def tensor_from_data(ctx: EmitContext, data, dtype: DType) -> Value:
    """A tensor from Python numbers; dynamic sizes are allowed in a 0-d or flat 1-d ``data``."""
    if isinstance(data, SymDim):
        return ctx.op("squeeze", dim_value(ctx, data, dtype), axes=[0], out_dtype=dtype, out_shape=())
    if isinstance(data, Value) and _one_item(data):  # a lone number computed from sizes: a 0-d tensor
        from .shape import reshape_to
        return reshape_to(ctx, cast(ctx, data, dtype), [])
    items = list(data) if isinstance(data, (list, tuple)) else [data]
    if not _dynamic_items(items):
        return ctx.const(data, dtype)
    if not all(isinstance(d, (int, float, SymDim)) or _one_item(d) for d in items):
        ctx.fail("torch.tensor of tensors, or of nested lists holding dynamic sizes, is not supported")
    from .shape import reshape_to
    parts = [reshape_to(ctx, cast(ctx, d, dtype), [1]) if isinstance(d, Value) else dim_value(ctx, d, dtype)
             for d in items]
    return ctx.op("concat", parts, axis=0, out_dtype=dtype, out_shape=(len(parts),))


def _one_item(v) -> bool:
    """Whether ``v`` is a tensor of one item (a Python number computed from the dynamic sizes,
    ``2.0 / (W - 1)``, reaches here as a 0-d tensor): torch.tensor takes its value."""
    return isinstance(v, Value) and v.shape is not None and all(d == 1 for d in v.shape)


def _dynamic_items(items) -> bool:
    return any(_dynamic_items(d) if isinstance(d, (list, tuple)) else isinstance(d, (SymDim, Value)) for d in items)


@register(torch.tensor, torch.as_tensor)
def tensor(ctx: EmitContext, data, *, dtype: Optional[DType] = None, device=None, requires_grad=False,
           pin_memory=False):
    """tensor(Any data, *, ScalarType? dtype=None, ...) -> Tensor"""
    first = data
    while isinstance(first, (list, tuple)) and first:
        first = first[0]
    return tensor_from_data(ctx, data, dtype or scalar_dtype(first))


@register("Tensor.new_tensor")
def new_tensor(ctx: EmitContext, input: Value, data, *, dtype: Optional[DType] = None, device=None,
               requires_grad=False):
    """new_tensor(Tensor self, Any data, *, ScalarType? dtype=None, ...) -> Tensor"""
    return tensor_from_data(ctx, data, dtype or input.dtype)


@register(torch.scalar_tensor)
def scalar_tensor(ctx: EmitContext, s, *, dtype: Optional[DType] = None, layout=None, device=None,
                  pin_memory=False, requires_grad=False):
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, ...) -> Tensor"""
    return tensor_from_data(ctx, s, dtype or DType.F32)


@register(torch.eye)
def eye(ctx: EmitContext, n, m=None, *, out=None, dtype: Optional[DType] = None, layout=None, device=None,
        pin_memory=False, requires_grad=False):
    """eye(SymInt n, SymInt m, *, ScalarType? dtype=None, ...) -> Tensor"""
    m = n if m is None else m
    rows = ctx.op("unsqueeze", ctx.call("nnef.range", 0, n, 1, DType.I64, (n,)), axes=[1], out_shape=(n, 1))
    cols = ctx.op("unsqueeze", ctx.call("nnef.range", 0, m, 1, DType.I64, (m,)), axes=[0], out_shape=(1, m))
    return cast(ctx, ctx.op("eq", rows, cols, out_dtype=DType.BOOL, out_shape=(n, m)), dtype or DType.F32)


@register(torch.meshgrid)
def meshgrid(ctx: EmitContext, *tensors, indexing: Optional[str] = None):
    """meshgrid(Tensor[] tensors, *, str? indexing=None) -> Tensor[]: each 1-D input laid along
    its own axis and broadcast to the grid of all their sizes (``"xy"``: the first two swapped)."""
    from .shape import expand_to, reshape_to

    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if any(not isinstance(t, Value) or len(t.shape) > 1 for t in tensors):
        ctx.fail("torch.meshgrid takes 0-d or 1-D tensors")
    flat = [reshape_to(ctx, t, [1]) if len(t.shape) == 0 else t for t in tensors]
    order = list(range(len(flat)))
    if indexing == "xy" and len(flat) >= 2:
        order[0], order[1] = 1, 0
    sizes = [flat[k].shape[0] for k in order]  # the grid's axis a holds input order[a]
    out = []
    for k, t in enumerate(flat):
        a = order.index(k)
        laid = reshape_to(ctx, t, [sizes[a] if i == a else 1 for i in range(len(flat))])
        out.append(expand_to(ctx, laid, sizes))
    return tuple(out)


@register(torch.linspace)
def linspace(ctx: EmitContext, start, end, steps, *, out=None, dtype: Optional[DType] = None, layout=None,
             device=None, pin_memory=False, requires_grad=False):
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, ...) -> Tensor

    ``steps`` evenly spaced values from ``start`` to ``end``, both included, computed as torch
    does in float32: ``start + i * step`` for the first half, ``end - (steps - 1 - i) * step`` for
    the second, ``step = (end - start) / (steps - 1)``; one step gives ``[start]``. ``steps``,
    ``start`` and ``end`` may be dynamic sizes (``linspace(0, S, S + 1)``)."""
    if any(isinstance(v, Value) for v in (start, end)):
        ctx.fail("torch.linspace with bounds read from tensor data is not supported; use Python numbers or sizes")
    if isinstance(steps, Value):
        ctx.fail("torch.linspace with a number of steps read from tensor data gives a data-dependent shape; "
                 "use a size (x.shape[i]) or a Python int")
    dtype = dtype or DType.F32
    n = steps
    idx = ctx.call("nnef.range", 0, n, 1, DType.F32, (n,))
    count = cast(ctx, dim_value(ctx, n, DType.I64), DType.F32)

    def bound(v):
        return cast(ctx, dim_value(ctx, v, DType.I64), DType.F32) if isinstance(v, SymDim) else float(v)

    lo, hi = bound(start), bound(end)
    # the step (end - start) / (n - 1), as a 1-item tensor when n is a dynamic size (n = 1: 0)
    gaps = ew(ctx, "max", ew(ctx, "sub", count, 1.0), 1.0)
    span = ew(ctx, "sub", hi, lo) if isinstance(hi, Value) or isinstance(lo, Value) else hi - lo
    step = ew(ctx, "div", span, gaps)
    first = ew(ctx, "add", ew(ctx, "mul", idx, step), lo)
    last = ew(ctx, "sub", hi, ew(ctx, "mul", ew(ctx, "sub", ew(ctx, "sub", count, 1.0), idx), step))
    half = cast(ctx, dim_value(ctx, n // 2 if isinstance(n, int) else SymDim.floordiv(n, 2), DType.I64), DType.F32)
    y = select(ctx, compare(ctx, "lt", idx, half), first, last)
    if not (isinstance(n, int) and n != 1):
        # torch fills [start] for one step (the halves above would give [end])
        y = select(ctx, compare(ctx, "eq", count, 1.0), lo, y)
    return cast(ctx, y, dtype) if dtype is not DType.F32 else y


def _window(ctx: EmitContext, n, periodic: bool, dtype: Optional[DType], items) -> Value:
    """A signal window of ``n`` items as torch computes it: ``items(ctx, idx, span)`` on the
    positions ``idx`` (0 .. n-1) and the span ``M`` (``n`` if ``periodic`` else ``n - 1``, at least
    1); a window of one item is ``[1]``."""
    idx = ctx.call("nnef.range", 0, n, 1, DType.F32, (n,))
    count = cast(ctx, dim_value(ctx, n, DType.I64), DType.F32)
    span = ew(ctx, "max", count if periodic else ew(ctx, "sub", count, 1.0), 1.0)
    y = select(ctx, compare(ctx, "eq", count, 1.0), 1.0, items(ctx, idx, span))
    dtype = dtype or DType.F32
    return cast(ctx, y, dtype) if dtype is not DType.F32 else y


def _cosine_window(ctx: EmitContext, n, periodic: bool, terms: list, dtype: Optional[DType]) -> Value:
    """``sum_k terms[k] * cos(2 pi k i / M)`` (torch's hann, hamming and blackman windows, see :func:`_window`)."""
    def items(ctx, idx, span):
        phase = ew(ctx, "div", ew(ctx, "mul", idx, 2.0 * math.pi), span)
        y = ctx.const(np.array([terms[0]], dtype=np.float32), DType.F32)
        for k, a in enumerate(terms[1:], start=1):
            y = ew(ctx, "add", y, ew(ctx, "mul", un(ctx, "cos", ew(ctx, "mul", phase, float(k)) if k > 1 else phase),
                                     float(a)))
        return y
    return _window(ctx, n, periodic, dtype, items)


@register(torch.hann_window)
def hann_window(ctx: EmitContext, window_length, periodic: bool = True, *, dtype: Optional[DType] = None,
                layout=None, device=None, pin_memory=False, requires_grad=False):
    """hann_window(int window_length, bool periodic=True, ...) -> Tensor"""
    return _cosine_window(ctx, window_length, periodic, [0.5, -0.5], dtype)


@register(torch.hamming_window)
def hamming_window(ctx: EmitContext, window_length, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46,
                   *, dtype: Optional[DType] = None, layout=None, device=None, pin_memory=False,
                   requires_grad=False):
    """hamming_window(int window_length, bool periodic=True, float alpha=0.54, float beta=0.46, ...) -> Tensor"""
    return _cosine_window(ctx, window_length, periodic, [alpha, -beta], dtype)


@register(torch.blackman_window)
def blackman_window(ctx: EmitContext, window_length, periodic: bool = True, *, dtype: Optional[DType] = None,
                    layout=None, device=None, pin_memory=False, requires_grad=False):
    """blackman_window(int window_length, bool periodic=True, ...) -> Tensor"""
    return _cosine_window(ctx, window_length, periodic, [0.42, -0.5, 0.08], dtype)


@register(torch.bartlett_window)
def bartlett_window(ctx: EmitContext, window_length, periodic: bool = True, *, dtype: Optional[DType] = None,
                    layout=None, device=None, pin_memory=False, requires_grad=False):
    """bartlett_window(int window_length, bool periodic=True, ...): ``1 - |2 i / M - 1|`` (see :func:`_window`)."""
    def items(ctx, idx, span):
        return ew(ctx, "sub", 1.0, un(ctx, "abs", ew(ctx, "sub", ew(ctx, "div", ew(ctx, "mul", idx, 2.0), span), 1.0)))
    return _window(ctx, window_length, periodic, dtype, items)
