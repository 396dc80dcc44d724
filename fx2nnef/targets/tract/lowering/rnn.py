"""tract's overrides of the rnn converters (the common rules: ``fx2nnef.nnef_emit.ops.rnn``)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, SymDim, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.ops.rnn import CellKind, CellWeights
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


SCAN_FRAGMENTS = "rnn_scan_bodies"


MASKED_FRAGMENTS = "rnn_masked_bodies"


# time loop and zero states: per-target rules ------------------------------------------------
@register("nnef.rnn_zeros")
def rnn_zeros(ctx: EmitContext, batch, size: int, dtype: DType) -> Value:
    """An all-zero initial state [batch, size]."""
    if isinstance(batch, SymDim):
        raise EmitError(f"a zero initial state needs a static batch size (got {batch}); pass the initial "
                        "state as an input or export for tract")
    return ctx.const(np.zeros((batch, size)), dtype, name="zero_state")


@register("nnef.rnn_zeros", target=TRACT)
def rnn_zeros_tract(ctx: EmitContext, batch, size: int, dtype: DType) -> Value:
    if not isinstance(batch, SymDim):
        return rnn_zeros(ctx, batch, size, dtype)
    zero = ctx.const(np.zeros((1, size)), dtype, name="zero_state")
    return ctx.op("tract_core_broadcast", zero, shape=[batch, size], out_shape=(batch, size))


@register("nnef.rnn_sequence", target=TRACT)
def rnn_sequence_tract(ctx: EmitContext, kind: CellKind, xs: list, states: tuple, w: CellWeights, reverse: bool,
                       mask: Optional[Value] = None):
    """tract_core_scan over the time axis; reset_every_turn so that a reused state never leaks.
    ``mask`` [B, T] (bool), scanned too: the masked body keeps the states where it is false."""
    ctx.use_fragment(SCAN_FRAGMENTS)
    chunk = -1 if reverse else 1
    full = [(f"w_{g}", wh) for g, wh in zip(kind.gates, w.w_h)]
    full += [("b_n", w.b_hn)] if w.b_hn is not None else []
    full += [("w_r", w.w_r)] if w.w_r is not None else []
    body = "rnn_lstm_proj_body" if w.w_r is not None else kind.body
    scan = [(f"x_{g}", x, 1, chunk) for g, x in zip(kind.gates, xs)]
    if mask is not None:
        ctx.use_fragment(MASKED_FRAGMENTS)
        body = body[: -len("_body")] + "_masked_body"
        scan.append(("m", mask, 1, chunk))
    outs = ctx.op("tract_core_scan", body=body, scan=scan, full=full,
                  state=[(s, v, f"{s}_next") for s, v in zip(kind.states, states)],
                  output=[("y", "full", 1, chunk)] + [(f"{s}_next", "last", 0, 1) for s in kind.states],
                  reset_every_turn=1, n_out=1 + len(states), out_dtype=w.dtype)
    # ctx.op gives all outputs one shape: set each one's own
    for out, like in zip(outs[1:], states):
        out.shape = like.shape
    h = states[0].shape
    outs[0].shape = (h[0], xs[0].shape[1], h[1])
    return outs[0], tuple(outs[1:])
