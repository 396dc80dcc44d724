"""tract's overrides of the elementwise converters (the common rules: ``fx2nnef.nnef_emit.ops.elementwise``)."""
from __future__ import annotations

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import broadcast_operands, broadcast_shape, cast, ew, opaque, producer, select
from fx2nnef.nnef_emit.ops.elementwise import _BITS
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("nnef.bitnot", target=TRACT)
def bitnot_tract(ctx: EmitContext, x: Value):
    return ctx.op("tract_core_bitnot", x, out_shape=x.shape)


@register("nnef.round_even", target=TRACT)
def round_even_tract(ctx: EmitContext, x: Value):
    """NOTE: tract's ``round`` rounds half away from zero; torch rounds half to even."""
    return ctx.op("tract_core_round_even", x, out_shape=x.shape)


@register("nnef.compare", target=TRACT)
def compare_tract(ctx: EmitContext, nnef_op: str, a, b):
    """NOTE: tract 0.23.9 mis-optimizes ``select`` on a comparison of two tensors whose shapes
    are symbolic (e.g. ``ge(range[:, None], range[None, :])``: "Undetermined symbol" at run
    time). Adding an opaque zero to one side (helpers.opaque) keeps every value, inf and NaN
    included (comparing the difference with 0 did not: ``inf - inf`` is NaN, integers wrap),
    and the mask runs. tract refuses comparisons of bools: they are compared as u8."""
    bools = any(isinstance(v, Value) and v.dtype.is_bool for v in (a, b))
    if bools:
        a, b = cast(ctx, a, DType.U8), cast(ctx, b, DType.U8)
    symbolic = all(isinstance(v, Value) and not v.is_constant and v.shape is not None and not v.is_static
                   for v in (a, b))
    if symbolic and a.dtype is not DType.U8:
        a = opaque(ctx, a)
    elif not symbolic and not bools:
        # NOTE: tract 0.23.9 knows ``range(0, S) > 1`` to be false up to item 2 and splits the mask's
        # readers there, slicing ``2..S`` whatever S: at S=1 the run fails ("Invalid range 2..1
        # for slicing"). A range of a dynamic length compared with a constant is made opaque first
        a, b = (opaque(ctx, v) if _dynamic_range(ctx, v) else v for v in (a, b))
    return ctx.op(nnef_op, a, b, out_dtype=DType.BOOL, out_shape=broadcast_shape(a, b))


# ops through which tract still knows a tensor to be a range (its items, moved or repeated)
_KEEPS_RANGE = ("tract_core_cast", "unsqueeze", "squeeze", "reshape", "tile", "transpose", "slice", "add", "sub",
                "mul")


def _dynamic_range(ctx: EmitContext, v) -> bool:
    """Whether ``v`` is a ``tract_core_range`` of a dynamic length, or computed from one by ops that
    keep it a range to tract (casts, unit axes, repeats, arithmetic with constants)."""
    seen = 0
    while isinstance(v, Value) and not v.is_constant and v.shape is not None and not v.is_static and seen < 8:
        st = producer(ctx, v)
        if st is None:
            return False
        if st.op == "tract_core_range":
            return True
        if st.op not in _KEEPS_RANGE:
            return False
        moving = [x for x in st.args if isinstance(x, Value) and not x.is_constant]
        if len(moving) != 1:
            return False
        v, seen = moving[0], seen + 1
    return False


@register("nnef.bitwise", target=TRACT)
def bitwise_tract(ctx: EmitContext, kind: str, a: Value, b: Value):
    """tract_core_bitand/bitor/bitxor: bitwise on integers, logical on bools."""
    return ew(ctx, f"tract_core_bit{kind}", a, b)


@register("nnef.shift", target=TRACT)
def shift_tract(ctx: EmitContext, direction: str, a: Value, b: Value):
    """NOTE: tract shifts by the amount modulo the bit width; torch gives 0 (or -1 for a negative
    value shifted right) when the amount is negative or at least the width."""
    dtype = a.dtype
    y = ctx.op("tract_shl" if direction == "left" else "tract_shr", a, b, out_dtype=dtype, out_shape=broadcast_shape(a, b))
    cmp = lambda op, x, v: ctx.call("nnef.compare", op, *broadcast_operands(ctx, x, v, dtype))  # noqa: E731
    outside = cmp("ge", b, _BITS[dtype])
    if dtype is not DType.U8:
        outside = ew(ctx, "or", outside, cmp("lt", b, 0))
    zero = ew(ctx, "sub", a, a)
    fill = zero if direction == "left" or dtype is DType.U8 else select(ctx, cmp("lt", a, 0), ew(ctx, "sub", zero, 1), zero)
    return select(ctx, outside, fill, y)
