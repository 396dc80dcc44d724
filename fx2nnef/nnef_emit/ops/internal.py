"""Internal op kinds (``nnef.*``) that converters call through ``ctx.call``; targets override them."""
from __future__ import annotations

from ...errors import EmitError
from ...ir import DType, Value
from ..context import TRACT_DATUM, EmitContext, nnef_type
from ..helpers import dims_list
from ..registry import register


@register("nnef.external", target="tract")
def external_tract(ctx: EmitContext, value: Value):
    """A graph input; tract needs tract_core_external for types other than f32."""
    ctx.op("tract_core_external", out=value, shape=dims_list(value.shape), datum_type=TRACT_DATUM[value.dtype])
    return value


@register("nnef.external", target="khronos")
def external_khronos(ctx: EmitContext, value: Value):
    ctx.op("external", out=value, shape=dims_list(value.shape), __type__=nnef_type(value.dtype))
    return value


@register("nnef.cast", target="tract")
def cast_tract(ctx: EmitContext, x: Value, dtype: DType, shape=None):
    return ctx.op("tract_core_cast", x, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)


@register("nnef.cast", target="khronos")
def cast_khronos(ctx: EmitContext, x: Value, dtype: DType, shape=None):
    if dtype.is_bool:
        return ctx.op("ne", x, 0.0, out_dtype=dtype, out_shape=shape)
    if x.dtype.is_bool:
        return ctx.op("select", x, 1.0, 0.0, out_dtype=dtype, out_shape=shape)
    if x.dtype.is_float == dtype.is_float:
        return ctx.op("copy", x, out_dtype=dtype, out_shape=shape)
    raise EmitError(f"Khronos NNEF has no standard cast from {x.dtype.value} to {dtype.value}")


@register("nnef.gather", target="tract")
def gather_tract(ctx: EmitContext, x: Value, indices: Value, axis: int, shape=None):
    """NOTE: tract 0.23.9 refuses to gather from a block-quantized (Q4_0) tensor without ``datum_type``."""
    stored = ctx.stored(x)
    if stored is not x:  # an f16-stored table: gather the rows, then cast only them
        rows = ctx.op("tract_core_gather", stored, indices, axis=axis, out_dtype=stored.dtype, out_shape=shape)
        return ctx.call("nnef.cast", rows, x.dtype, shape)
    if x.is_constant and x.source.stored_format == "q4_0":
        return ctx.op("tract_core_gather", x, indices, axis=axis, datum_type=TRACT_DATUM[x.dtype], out_dtype=x.dtype,
                      out_shape=shape)
    return ctx.op("tract_core_gather", x, indices, axis=axis, out_dtype=x.dtype, out_shape=shape)


@register("nnef.gather", target="khronos")
def gather_khronos(ctx: EmitContext, x: Value, indices: Value, axis: int, shape=None):
    return ctx.op("gather", x, indices, axis=axis, out_dtype=x.dtype, out_shape=shape)


@register("nnef.range", target="tract")
def range_tract(ctx: EmitContext, start, end, step, dtype: DType, shape=None):
    """``tract_core_range``; literal bounds give TDim, so the result is cast to ``dtype``."""
    r = ctx.op("tract_core_range", start, end, step, out_dtype=DType.I64, out_shape=shape)
    return ctx.op("tract_core_cast", r, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)
