"""Normalizations: batch, layer, group, instance, RMS, L_p (F.normalize) and local response norm.

Statistics are computed as torch does on CPU: mean, then the biased variance of the centred
values, then ``(x - mean) * rsqrt(var + eps)``; weights and biases follow.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, ew, rank, un
from ..registry import register
from .activation import channel_view
from .reduce import reduce, reduce_axes, variance, vector_norm

MACHINE_EPS = {DType.F16: 2.0 ** -10, DType.BF16: 2.0 ** -7, DType.F32: 2.0 ** -23, DType.F64: 2.0 ** -52}


def _standardize(ctx: EmitContext, x: Value, axes_: list, eps: float) -> Value:
    """``(x - mean) * rsqrt(var + eps)`` with biased statistics over ``axes_``."""
    var, _, centered = variance(ctx, x, axes_, correction=0)
    return ew(ctx, "mul", centered, un(ctx, "rsqrt", ew(ctx, "add", var, float(eps))))


def _affine(ctx: EmitContext, y: Value, weight: Optional[Value], bias: Optional[Value], per_channel: bool) -> Value:
    """``y * weight + bias``; per-channel parameters broadcast over axis 1, others over trailing axes."""
    for v, op in ((weight, "mul"), (bias, "add")):
        if v is not None:
            v = channel_view(ctx, v, rank(y), y.dtype) if per_channel else cast(ctx, v, y.dtype)
            y = ew(ctx, op, y, v)
    return y


# batch norm --------------------------------------------------------------------------------
def _batch_norm(ctx: EmitContext, x: Value, running_mean, running_var, weight, bias, training: bool, eps: float):
    """Batch statistics when ``training`` or no running stats, else running stats folded into scale and shift."""
    if training or running_mean is None or running_var is None:
        y = _standardize(ctx, x, [0] + list(range(2, rank(x))), eps)
        return _affine(ctx, y, weight, bias, per_channel=True)
    r = rank(x)
    inv_std = un(ctx, "rsqrt", ew(ctx, "add", channel_view(ctx, running_var, r, x.dtype), float(eps)))
    scale = inv_std if weight is None else ew(ctx, "mul", channel_view(ctx, weight, r, x.dtype), inv_std)
    shift = ew(ctx, "mul", channel_view(ctx, running_mean, r, x.dtype), scale)
    shift = un(ctx, "neg", shift) if bias is None else ew(ctx, "sub", channel_view(ctx, bias, r, x.dtype), shift)
    return ew(ctx, "add", ew(ctx, "mul", x, scale), shift)


@register(F.batch_norm)
def batch_norm(ctx: EmitContext, input: Value, running_mean: Optional[Value], running_var: Optional[Value],
               weight: Optional[Value] = None, bias: Optional[Value] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-05):
    """batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight=None, Tensor? bias=None, bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor"""
    return _batch_norm(ctx, input, running_mean, running_var, weight, bias, training, eps)


@register(torch.batch_norm)
def batch_norm_aten(ctx: EmitContext, input: Value, weight: Optional[Value], bias: Optional[Value],
                    running_mean: Optional[Value], running_var: Optional[Value], training: bool, momentum: float,
                    eps: float, cudnn_enabled: bool):
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    return _batch_norm(ctx, input, running_mean, running_var, weight, bias, training, eps)


@register(F.instance_norm)
def instance_norm(ctx: EmitContext, input: Value, running_mean: Optional[Value] = None,
                  running_var: Optional[Value] = None, weight: Optional[Value] = None, bias: Optional[Value] = None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-05):
    """instance_norm(Tensor input, Tensor? running_mean=None, Tensor? running_var=None, Tensor? weight=None, Tensor? bias=None, bool use_input_stats=True, float momentum=0.1, float eps=1e-05) -> Tensor"""
    if not use_input_stats:
        return _batch_norm(ctx, input, running_mean, running_var, weight, bias, False, eps)
    y = _standardize(ctx, input, list(range(2, rank(input))), eps)
    return _affine(ctx, y, weight, bias, per_channel=True)


@register(torch.instance_norm)
def instance_norm_aten(ctx: EmitContext, input: Value, weight: Optional[Value], bias: Optional[Value],
                       running_mean: Optional[Value], running_var: Optional[Value], use_input_stats: bool,
                       momentum: float, eps: float, cudnn_enabled: bool):
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    return instance_norm(ctx, input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


# layer, group, RMS norm --------------------------------------------------------------------------
def _last_axes(x: Value, normalized_shape) -> list:
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    return list(range(rank(x) - k, rank(x)))


@register(F.layer_norm, torch.layer_norm)
def layer_norm(ctx: EmitContext, input: Value, normalized_shape, weight: Optional[Value] = None,
               bias: Optional[Value] = None, eps: float = 1e-05, cudnn_enable: bool = True):
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor"""
    y = _standardize(ctx, input, _last_axes(input, normalized_shape), eps)
    return _affine(ctx, y, weight, bias, per_channel=False)


@register(F.group_norm, torch.group_norm)
def group_norm(ctx: EmitContext, input: Value, num_groups: int, weight: Optional[Value] = None,
               bias: Optional[Value] = None, eps: float = 1e-05, cudnn_enabled: bool = True):
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor"""
    channels = input.shape[1]
    if not isinstance(channels, int):
        ctx.fail(f"group_norm: the channel count must be static, got {channels}")
    split_shape = (input.shape[0], num_groups, channels // num_groups) + tuple(input.shape[2:])
    grouped = ctx.op("reshape", input, shape=[num_groups, channels // num_groups], axis_start=1, axis_count=1,
                     out_shape=split_shape)
    y = _standardize(ctx, grouped, list(range(2, len(split_shape))), eps)
    y = ctx.op("reshape", y, shape=[channels], axis_start=1, axis_count=2, out_shape=input.shape)
    return _affine(ctx, y, weight, bias, per_channel=True)


def _rms_eps(eps: Optional[float], dtype: DType) -> float:
    """torch's default: the machine epsilon of the input's dtype."""
    return MACHINE_EPS.get(dtype, MACHINE_EPS[DType.F32]) if eps is None else float(eps)


@register(F.rms_norm, torch.rms_norm)
def rms_norm(ctx: EmitContext, input: Value, normalized_shape, weight: Optional[Value] = None,
             eps: Optional[float] = None):
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    axes_ = _last_axes(input, normalized_shape)
    mean_sq = reduce(ctx, "mean_reduce", ew(ctx, "mul", input, input), axes_)
    y = ew(ctx, "mul", input, un(ctx, "rsqrt", ew(ctx, "add", mean_sq, _rms_eps(eps, input.dtype))))
    return _affine(ctx, y, weight, None, per_channel=False)


# L_p normalization, local response norm --------------------------------------------------------------
@register(F.normalize)
def normalize(ctx: EmitContext, input: Value, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """normalize(Tensor input, float p=2.0, int dim=1, float eps=1e-12) -> Tensor"""
    n = vector_norm(ctx, input, p, reduce_axes(dim, input), keepdim=True)
    return ew(ctx, "div", input, ew(ctx, "max", n, float(eps)))


@register(F.local_response_norm)
def local_response_norm(ctx: EmitContext, input: Value, size: int, alpha: float = 0.0001, beta: float = 0.75,
                        k: float = 1.0):
    """local_response_norm(Tensor input, int size, float alpha=1e-4, float beta=0.75, float k=1.0) -> Tensor"""
    r = rank(input)
    if r < 3:
        ctx.fail(f"local_response_norm needs a tensor of rank 3 or more, got rank {r}")
    # NOTE: tract's box ignores windows over axes 0 and 1, so channels move to axis 2 first
    lifted_shape = (input.shape[0], 1) + tuple(input.shape[1:])
    squares = ctx.op("unsqueeze", ew(ctx, "mul", input, input), axes=[1], out_shape=lifted_shape)
    window = [1, 1, size] + [1] * (r - 2)
    padding = [(0, 0), (0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (r - 2)
    sums = ctx.op("box", squares, size=window, border="constant", padding=padding, normalize=False,
                  out_shape=lifted_shape)
    sums = ctx.op("squeeze", sums, axes=[1], out_shape=input.shape)
    denom = ew(ctx, "add", ew(ctx, "mul", ew(ctx, "div", sums, float(size)), float(alpha)), float(k))
    return ew(ctx, "div", input, ew(ctx, "pow", denom, float(beta)))
