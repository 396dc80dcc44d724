"""Tensor attributes read as values (``x.T``, ``x.mT``, ``x.data``): ``getattr(x, name)`` nodes."""
from __future__ import annotations

from ...errors import EmitError
from ...ir import Value
from ..context import EmitContext
from ..helpers import rank
from ..registry import register


@register(getattr)
def tensor_attribute(ctx: EmitContext, obj: Value, name: str, default=None):
    """getattr(Tensor self, str name) -> Tensor  (T, mT, H, mH, data, real)"""
    r = rank(obj)
    if name in ("data", "real"):
        return obj
    if name in ("T", "H"):
        return ctx.op("transpose", obj, axes=list(reversed(range(r))), out_shape=tuple(reversed(obj.shape)))
    if name in ("mT", "mH"):
        axes = list(range(r - 2)) + [r - 1, r - 2]
        return ctx.op("transpose", obj, axes=axes, out_shape=tuple(obj.shape[a] for a in axes))
    raise EmitError(f"tensor attribute '.{name}' has no lowering")
