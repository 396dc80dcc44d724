"""The Khronos (standard NNEF) overrides of the rnn converters (the common rules: ``fx2nnef.nnef_emit.ops.rnn``)."""
from __future__ import annotations

import numpy as np

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.registry import register
from ..profile import KHRONOS


@register("nnef.rnn_step_mask", target=KHRONOS)
def rnn_step_mask_khronos(ctx: EmitContext, lengths: Value, steps) -> Value:
    """Constant lengths (a Python list) and a static time axis give a constant mask; else refused."""
    if lengths.is_constant and isinstance(steps, int):
        mask = np.arange(steps)[None, :] < np.asarray(lengths.data)[:, None]
        return ctx.const(mask, DType.BOOL, name="step_mask")
    raise EmitError("packed sequences need the lengths (int64) compared with the time steps; standard NNEF has "
                    "no integer arithmetic, comparison or cast: export for tract (TractNNEF)")
