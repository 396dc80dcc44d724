"""Windows whose bounds are read from data: ``x[:n]``, ``x.narrow(0, s, n)``, ``torch.arange(n)``
with ``n`` a number the graph computes from its inputs (``lengths.max()``, ``int(t)``; see
``fx_tracer/tracing/data_bounds.py``).

The bounds are clamped as torch clamps them (a negative bound counts from the end, an end before
the start gives nothing). The traced shapes say how long the window is:

- a count of its own (``N_getitem``, a symbol of ``Graph.data_counts``): the window's positions
  are listed by ``tract_onnx_non_zero`` under that name, then gathered. tract's
  ``tract_core_dyn_slice`` would name the count too, but refuses an empty window at run time
  (``start >= end``), which torch gives for ``x[:0]``.
- a size of the inputs (``T``): the replay found the count broadcast against that axis
  (``torch.arange(lengths.max()) < lengths[:, None]`` then read beside ``x`` of ``T`` items),
  which torch allows only where the count equals it (torch.export's runtime assert
  ``Eq(u0, T)``). The window is taken with ``tract_core_dyn_slice(len = T)``, which checks that
  at run time: tract fails on an input where the count differs, as the model does.
"""
from __future__ import annotations

from typing import Optional

import torch

from ...errors import EmitError
from ...ir import DType, SymDim, Value
from ..context import EmitContext
from ..helpers import axis, cast, compare, dim_value, ew, rank, select
from ..registry import register
from .shape import reshape_to


@register("Tensor.item")
def item(ctx: EmitContext, input: Value):
    """item(Tensor self) -> Scalar: a number read from data, kept as a 0-d int64 tensor."""
    if input.dtype.is_float or input.dtype.is_bool:
        ctx.fail("a number read from a float or bool tensor cannot be a size; read it from an integer tensor")
    return cast(ctx, reshape_to(ctx, input, []), DType.I64)


def has_data_bound(*bounds) -> bool:
    return any(isinstance(b, Value) for b in bounds)


def window(ctx: EmitContext, x: Value, ax: int, start, end, length) -> Value:
    """``x[start:end]`` along ``ax`` (a bound a 0-d int tensor, an int or a size), whose length the
    traced shapes name ``length``."""
    if not ctx.profile.data_sized_counts:
        ctx.fail("a slice whose bound is read from tensor data gives as many items as the data says, which this "
                 "target cannot carry; keep the shape and mask (torch.where(torch.arange(n) < t, x, 0))")
    n = dim_value(ctx, x.shape[ax], DType.I64)
    begin = _clamped(ctx, 0 if start is None else start, n)
    stop = ew(ctx, "max", _clamped(ctx, n if end is None else end, n), begin)
    if _own_count(ctx, length):
        positions = ctx.call("nnef.range", 0, x.shape[ax], 1, DType.I64, (x.shape[ax],))
        keep = ew(ctx, "and", compare(ctx, "ge", positions, begin), compare(ctx, "lt", positions, stop))
        return _gathered(ctx, x, _listed(ctx, keep, length, ew(ctx, "sub", stop, begin)), ax)
    return _checked(ctx, x, ax, begin, stop, length)


def _clamped(ctx: EmitContext, b, n: Value) -> Value:
    """A slice bound as torch reads it on an axis of ``n`` items: from the end where negative, then
    within ``[0, n]``; a ``[1]`` int64 tensor."""
    if isinstance(b, (int, SymDim)):
        if isinstance(b, int) and b < 0:
            return ew(ctx, "max", ew(ctx, "add", n, b), 0)
        return ew(ctx, "min", dim_value(ctx, b, DType.I64), n)
    b = reshape_to(ctx, cast(ctx, b, DType.I64), [1])
    from_end = select(ctx, compare(ctx, "lt", b, 0), ew(ctx, "add", b, n), b)
    return ew(ctx, "min", ew(ctx, "max", from_end, 0), n)


def _own_count(ctx: EmitContext, length) -> bool:
    """Whether ``length`` is a count read from data with a symbol of its own."""
    if not isinstance(length, SymDim) or len(length.symbols) != 1:
        return False
    name = next(iter(length.symbols))
    return name in ctx.data_counts and length == SymDim.symbol(name)


def _listed(ctx: EmitContext, keep: Value, length: SymDim, count: Value) -> Value:
    """The positions of the true items of the flat ``keep``, their number named ``length``; the
    count's value (``count``, ``[1]``) noted for the sizes that read it."""
    name = next(iter(length.symbols))
    rows = ctx.op("tract_onnx_non_zero", keep, count_symbol=name, out_shape=(1, length), out_dtype=DType.I64)
    ctx.count_values.setdefault(name, count)
    return ctx.op("squeeze", rows, axes=[0], out_shape=(length,), out_dtype=DType.I64)


def _gathered(ctx: EmitContext, x: Value, positions: Value, ax: int) -> Value:
    shape = tuple(positions.shape[0] if a == ax else d for a, d in enumerate(x.shape))
    return ctx.call("nnef.gather", x, positions, ax, shape)


def _checked(ctx: EmitContext, x: Value, ax: int, begin: Value, stop: Value, length) -> Value:
    """``x[begin:stop]`` along ``ax`` assumed ``length`` long (a size of the inputs), as
    ``tract_core_dyn_slice``, which fails at run time where ``stop - begin`` differs."""
    if length is None:
        raise EmitError("the length of a window read from data is not known here")
    shape = tuple(length if a == ax else d for a, d in enumerate(x.shape))
    scalar = [ctx.op("squeeze", b, axes=[0], out_shape=(), out_dtype=DType.I64) for b in (begin, stop)]
    return ctx.op("tract_core_dyn_slice", x, scalar[0], scalar[1], len=length, axis=ax, out_shape=shape,
                  out_dtype=x.dtype)


def output_length(ctx: EmitContext, out_ax: int):
    """The length the traced shapes give the op's output along ``out_ax`` (None when unknown)."""
    node = ctx.node
    shape = node.outputs[0].shape if node is not None and node.outputs else None
    return shape[out_ax] if shape is not None and len(shape) > out_ax else None


def data_arange(ctx: EmitContext, start, end, step, dtype: Optional[DType]):
    """``torch.arange(start, end, step)`` with a bound read from data (an integer step)."""
    if not isinstance(step, int) or step == 0:
        ctx.fail("torch.arange with a bound read from data takes a constant integer step")
    if dtype is not None and dtype.is_float:
        ctx.fail("torch.arange with a bound read from data gives integers here; cast the result")
    if not ctx.profile.data_sized_counts:
        ctx.fail("torch.arange with a bound read from tensor data gives as many items as the data says, which this "
                 "target cannot carry; use sizes (x.shape[i]) or Python numbers")
    first = _number(ctx, start)
    span = ew(ctx, "sub", _number(ctx, end), first)
    if step != 1:  # ceil(span / step) items
        span = ew(ctx, "div", ew(ctx, "add", span, step - 1 if step > 0 else step + 1), step)
    count = ew(ctx, "max", span, 0)
    length = output_length(ctx, 0)
    if _own_count(ctx, length):
        zero, one = (ctx.const(v, DType.I64) for v in (0, 1))  # range's bounds of one type
        positions = ctx.op("tract_core_range", zero, reshape_to(ctx, count, []), one, out_dtype=DType.I64)
        keep = compare(ctx, "ge", positions, 0)
        steps = _listed(ctx, keep, length, count)
    else:
        whole = ctx.call("nnef.range", 0, length, 1, DType.I64, (length,))
        steps = _checked(ctx, whole, 0, dim_value(ctx, 0, DType.I64), count, length)
    out = ew(ctx, "add", ew(ctx, "mul", steps, step) if step != 1 else steps, first)
    return cast(ctx, out, dtype or DType.I64)


def _number(ctx: EmitContext, v) -> Value:
    if isinstance(v, Value):
        return reshape_to(ctx, cast(ctx, v, DType.I64), [1])
    if isinstance(v, float) and not v.is_integer():
        ctx.fail("torch.arange with a bound read from data and a fractional bound is not supported")
    return dim_value(ctx, int(v) if isinstance(v, float) else v, DType.I64)


def narrow_window(ctx: EmitContext, input: Value, dim: int, start, length) -> Value:
    """``x.narrow(dim, start, length)`` with ``start`` or ``length`` read from data: the window
    ``start:start + length``, a negative start counting from the end."""
    ax = axis(dim, rank(input))
    n = dim_value(ctx, input.shape[ax], DType.I64)
    first = _number(ctx, start)
    first = select(ctx, compare(ctx, "lt", first, 0), ew(ctx, "add", first, n), first)
    stop = ew(ctx, "add", first, _number(ctx, length))
    return window(ctx, input, ax, first, stop, output_length(ctx, ax))
