"""tract's overrides of the norm converters (the common rules: ``fx2nnef.nnef_emit.ops.norm``)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from fx2nnef.ir import Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import un
from fx2nnef.nnef_emit.ops.norm import _affine, _last_axes, _rms_eps, rms_norm
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register(F.rms_norm, torch.rms_norm, target=TRACT)
def rms_norm_tract(ctx: EmitContext, input: Value, normalized_shape, weight: Optional[Value] = None,
                   eps: Optional[float] = None):
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    axes_ = _last_axes(input, normalized_shape)
    if len(axes_) != 1:
        return rms_norm(ctx, input, normalized_shape, weight, eps)
    y = un(ctx, "tract_core_rms_norm", input, axis=axes_[0], eps=_rms_eps(eps, input.dtype))
    return _affine(ctx, y, weight, None, per_channel=False)
