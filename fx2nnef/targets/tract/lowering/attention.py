"""tract's overrides of the attention converters (the common rules: ``fx2nnef.nnef_emit.ops.attention``)."""
from __future__ import annotations

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.ops.creation import filled
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register("nnef.causal_keep", target=TRACT)
def causal_keep_tract(ctx: EmitContext, n_queries, n_keys) -> Value:
    """The lower triangle of a tiled True.

    NOTE: tract 0.23.9 mis-optimizes ``select(range(0, S)[:, None] >= range(0, T)[None, :], ...)``
    before softmax and matmul (run-time error "Undetermined symbol in expression"); trilu is fine.
    """
    everything = filled(ctx, [n_queries, n_keys], True, DType.BOOL)
    return ctx.op("tract_core_trilu", everything, k=ctx.const(0, DType.I64), upper=False,
                  out_dtype=DType.BOOL, out_shape=(n_queries, n_keys))
