"""Tensor attributes read as values (``x.T``, ``x.mT``, ``x.data``): ``getattr(x, name)`` nodes."""
from __future__ import annotations

from ...errors import EmitError
from ...ir import Value
from ..context import EmitContext
from ..helpers import rank
from ..registry import register
from .shape import permute_axes


@register(getattr)
def tensor_attribute(ctx: EmitContext, obj: Value, name: str, default=None):
    """getattr(Tensor self, str name) -> Tensor  (T, mT, H, mH, data, real)"""
    r = rank(obj)
    if name in ("data", "real"):
        return obj
    if name in ("T", "H"):
        return permute_axes(ctx, obj, list(reversed(range(r))))
    if name in ("mT", "mH"):
        if r < 2:
            raise EmitError(f"'.{name}' needs a tensor of at least 2 dimensions")
        return permute_axes(ctx, obj, list(range(r - 2)) + [r - 1, r - 2])
    raise EmitError(f"tensor attribute '.{name}' has no lowering")
