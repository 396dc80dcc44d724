"""tract's overrides of the activation converters (the common rules: ``fx2nnef.nnef_emit.ops.activation``)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import axis, cast, ew, rank, to_float, un
from fx2nnef.nnef_emit.ops.activation import _keep, gelu, log_softmax
from fx2nnef.nnef_emit.registry import register, sources
from ..profile import TRACT


def strided_slice_downstream(ctx: EmitContext) -> bool:
    """Whether a slice with a step > 1 (or a strided conv or pool) reads the current node's result,
    directly or through other ops.

    NOTE: tract 0.23.9 moves such a slice above a softmax (``softmax``, ``tract_core_softmax``,
    ``tract_core_log_softmax``), even through elementwise ops and transposes, and so normalizes
    over the kept items only: ``softmax(x, -1)[..., ::2]`` comes out as ``softmax(x[..., ::2], -1)``.
    A softmax spelt out with reductions is left alone.
    """
    if ctx.node is None:
        return False
    seen, todo = set(), list(ctx.node.outputs)
    while todo:
        for use in getattr(todo.pop(), "uses", []):
            if id(use) in seen:
                continue
            seen.add(id(use))
            if use.kind == "operator.getitem" and any(isinstance(i, slice) and i.step not in (None, 1)
                                                      for i in _index_items(use.args[1:])):
                return True
            if _strided_window(use):
                return True
            todo.extend(use.outputs)
    return False


_CONVS = {"torch.conv1d", "torch.conv2d", "torch.conv3d"}


_POOLS = {f"{ns}.{kind}_pool{n}d" for ns in ("F", "torch") for kind in ("max", "avg") for n in (1, 2, 3)}


def _strided_window(node) -> bool:
    """A conv or pool with a stride > 1: tract lowers a 1x1 one as a Downsample, which it moves
    above a softmax like a strided slice (see strided_slice_downstream)."""
    if node.kind in _CONVS:
        stride = node.kwargs.get("stride", node.args[3] if len(node.args) > 3 else 1)
    elif node.kind in _POOLS:
        stride = node.kwargs.get("stride", node.args[2] if len(node.args) > 2 else None)
        if stride is None or stride == []:
            stride = node.kwargs.get("kernel_size", node.args[1] if len(node.args) > 1 else 1)
    else:
        return False
    items = stride if isinstance(stride, (list, tuple)) else [stride]
    return any(isinstance(k, int) and k > 1 for k in items)


def _index_items(args) -> list:
    out = []
    for a in args:
        out.extend(_index_items(a) if isinstance(a, (tuple, list)) else [a])
    return out


def softmax_decomposed(ctx: EmitContext, x: Value, axes_: list) -> Value:
    """``exp(x - max) / sum(exp(x - max))`` with reductions (see strided_slice_downstream)."""
    e = un(ctx, "exp", ew(ctx, "sub", x, ctx.op("max_reduce", x, axes=axes_, out_shape=_keep(x.shape, axes_))))
    return ew(ctx, "div", e, ctx.op("sum_reduce", e, axes=axes_, out_shape=_keep(x.shape, axes_)))


@register(torch.softmax, "Tensor.softmax", torch.special.softmax, target=TRACT)
def softmax_tract(ctx: EmitContext, input: Value, dim: int, dtype: Optional[DType] = None):
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    x = to_float(ctx, cast(ctx, input, dtype) if dtype else input)
    if strided_slice_downstream(ctx):
        return softmax_decomposed(ctx, x, [axis(dim, rank(x))])
    return un(ctx, "tract_core_softmax", x, axes=[axis(dim, rank(x))])


@register(torch.log_softmax, "Tensor.log_softmax", torch.special.log_softmax, target=TRACT)
def log_softmax_tract(ctx: EmitContext, input: Value, dim: int, dtype: Optional[DType] = None):
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    if strided_slice_downstream(ctx):
        return log_softmax(ctx, input, dim, dtype)
    x = to_float(ctx, cast(ctx, input, dtype) if dtype else input)
    return un(ctx, "tract_core_log_softmax", x, axes=[axis(dim, rank(x))])


@register(*sources("erf"), target=TRACT)
def erf_tract(ctx: EmitContext, input: Value):
    """erf(Tensor self) -> Tensor"""
    return un(ctx, "tract_core_erf", to_float(ctx, input))


@register(F.gelu, target=TRACT)
def gelu_tract(ctx: EmitContext, input: Value, approximate: str = "none"):
    """gelu(Tensor self, *, str approximate='none') -> Tensor"""
    if approximate == "tanh":
        return un(ctx, "tract_core_gelu_approx", input, fast_impl=False)
    return gelu(ctx, input, approximate)


@register(F.silu, target=TRACT)
def silu_tract(ctx: EmitContext, input: Value, inplace: bool = False):
    """silu(Tensor self) -> Tensor"""
    return un(ctx, "tract_core_silu", input)
