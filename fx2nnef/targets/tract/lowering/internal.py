"""Internal op kinds (``nnef.*``) that converters call through ``ctx.call``, in tract's ops
(each target lowers them its own way; there is no common rule)."""
from __future__ import annotations

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext, TRACT_DATUM
from fx2nnef.nnef_emit.helpers import dims_list
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("nnef.external", target=TRACT)
def external_tract(ctx: EmitContext, value: Value):
    """A graph input; tract needs tract_core_external for types other than f32."""
    ctx.op("tract_core_external", out=value, shape=dims_list(value.shape), datum_type=TRACT_DATUM[value.dtype])
    return value


@register("nnef.cast", target=TRACT)
def cast_tract(ctx: EmitContext, x: Value, dtype: DType, shape=None):
    return ctx.op("tract_core_cast", x, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)


@register("nnef.gather", target=TRACT)
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


@register("nnef.range", target=TRACT)
def range_tract(ctx: EmitContext, start, end, step, dtype: DType, shape=None):
    """``tract_core_range``; literal bounds give TDim, so the result is cast to ``dtype``."""
    r = ctx.op("tract_core_range", start, end, step, out_dtype=DType.I64, out_shape=shape)
    return ctx.op("tract_core_cast", r, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)
