"""Internal op kinds (``nnef.*``) that converters call through ``ctx.call``, in standard NNEF
(each target lowers them its own way; there is no common rule)."""
from __future__ import annotations

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext, nnef_type
from fx2nnef.nnef_emit.helpers import dims_list
from fx2nnef.nnef_emit.registry import register
from ..profile import KHRONOS


@register("nnef.external", target=KHRONOS)
def external_khronos(ctx: EmitContext, value: Value):
    ctx.op("external", out=value, shape=dims_list(value.shape), __type__=nnef_type(value.dtype))
    return value


@register("nnef.cast", target=KHRONOS)
def cast_khronos(ctx: EmitContext, x: Value, dtype: DType, shape=None):
    if dtype.is_bool:
        return ctx.op("ne", x, 0.0, out_dtype=dtype, out_shape=shape)
    if x.dtype.is_bool:
        return ctx.op("select", x, 1.0, 0.0, out_dtype=dtype, out_shape=shape)
    if x.dtype.is_float == dtype.is_float:
        return ctx.op("copy", x, out_dtype=dtype, out_shape=shape)
    raise EmitError(f"Khronos NNEF has no standard cast from {x.dtype.value} to {dtype.value}")


@register("nnef.gather", target=KHRONOS)
def gather_khronos(ctx: EmitContext, x: Value, indices: Value, axis: int, shape=None):
    return ctx.op("gather", x, indices, axis=axis, out_dtype=x.dtype, out_shape=shape)
