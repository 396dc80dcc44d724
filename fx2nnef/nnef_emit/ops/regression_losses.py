"""The regression losses (models that compute their loss in forward): mse, l1, smooth_l1, huber."""
from __future__ import annotations

import torch.nn.functional as F

from ...ir import Value
from ..context import EmitContext
from ..helpers import ew
from ..registry import register
from .losses import _check_reduction, _reduced


# ---- regression losses (models that compute their loss in forward) ------------------------------------------------
def _check_loss_args(ctx: EmitContext, name: str, size_average, reduce, reduction: str, weight) -> None:
    """One clear error for the arguments these losses do not take, or an unknown ``reduction``."""
    if size_average is not None or reduce is not None:
        ctx.fail(f"{name}: the deprecated size_average/reduce arguments are not supported; pass reduction= instead")
    if weight is not None:
        ctx.fail(f"{name} with weight= is not supported; multiply the unreduced loss (reduction='none') by the weight")
    _check_reduction(ctx, name, None, None, reduction)


def _pointwise_loss(ctx: EmitContext, input: Value, target: Value, reduction: str, each) -> Value:
    """``each(input - target)`` reduced as ``reduction`` says ('none', 'mean', 'sum')."""
    return _reduced(ctx, each(ctx.call("torch.sub", input, target)), reduction)


@register(F.mse_loss)
def mse_loss(ctx: EmitContext, input: Value, target: Value, size_average=None, reduce=None, reduction: str = "mean",
             weight=None):
    """mse_loss(Tensor input, Tensor target, ..., str reduction='mean', Tensor? weight=None) -> Tensor"""
    _check_loss_args(ctx, "mse_loss", size_average, reduce, reduction, weight)
    return _pointwise_loss(ctx, input, target, reduction, lambda d: ctx.call("torch.mul", d, d))


@register(F.l1_loss)
def l1_loss(ctx: EmitContext, input: Value, target: Value, size_average=None, reduce=None, reduction: str = "mean",
            weight=None):
    """l1_loss(Tensor input, Tensor target, ..., str reduction='mean', Tensor? weight=None) -> Tensor"""
    _check_loss_args(ctx, "l1_loss", size_average, reduce, reduction, weight)
    return _pointwise_loss(ctx, input, target, reduction, lambda d: ctx.call("torch.abs", d))


def _quadratic_then_linear(ctx: EmitContext, d: Value, limit: float, quad_scale: float, lin_scale: float) -> Value:
    """``quad_scale * d**2`` where ``|d| < limit``, else ``lin_scale * (|d| - limit / 2)``."""
    a = ctx.call("torch.abs", d)
    quad = ew(ctx, "mul", ctx.call("torch.mul", d, d), quad_scale)
    lin = ew(ctx, "mul", ew(ctx, "sub", a, 0.5 * limit), lin_scale)
    return ctx.call("torch.where", ctx.call("torch.lt", a, limit), quad, lin)


@register(F.smooth_l1_loss)
def smooth_l1_loss(ctx: EmitContext, input: Value, target: Value, size_average=None, reduce=None,
                   reduction: str = "mean", beta: float = 1.0):
    """smooth_l1_loss(Tensor input, Tensor target, ..., str reduction='mean', float beta=1.0) -> Tensor"""
    if beta == 0:
        return l1_loss(ctx, input, target, size_average, reduce, reduction)
    _check_loss_args(ctx, "smooth_l1_loss", size_average, reduce, reduction, None)
    return _pointwise_loss(ctx, input, target, reduction,
                           lambda d: _quadratic_then_linear(ctx, d, float(beta), 0.5 / beta, 1.0))


@register(F.huber_loss)
def huber_loss(ctx: EmitContext, input: Value, target: Value, reduction: str = "mean", delta: float = 1.0, weight=None):
    """huber_loss(Tensor input, Tensor target, str reduction='mean', float delta=1.0, Tensor? weight=None) -> Tensor"""
    _check_loss_args(ctx, "huber_loss", None, None, reduction, weight)
    return _pointwise_loss(ctx, input, target, reduction,
                           lambda d: _quadratic_then_linear(ctx, d, float(delta), 0.5, float(delta)))
