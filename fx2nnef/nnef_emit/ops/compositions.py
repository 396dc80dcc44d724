"""Small compositions of supported ops, lowered through them (``ctx.call``): similarities and
distances (cosine_similarity, pairwise_distance, bilinear), broadcast_tensors, softmin,
fmax/fmin, deg2rad/rad2deg, aminmax, channel_shuffle, diagflat, matrix_power, lp_pool1d/2d.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import broadcast_shape, cast, ew, rank, result_dtype, to_float, unsqueeze_to
from ..registry import register
from .linalg import _matmul
from .reduce import reduce_axes, vector_norm
from .shape import expand_to, reshape_to


# ---- similarities and distances -------------------------------------------------------------------------------------
@register(torch.cosine_similarity)
def cosine_similarity(ctx: EmitContext, x1: Value, x2: Value, dim: int = 1, eps: float = 1e-8):
    """cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor

    As torch computes it: each operand divided by its norm along ``dim`` (clamped at ``eps``),
    then the sum of the products (the result stays within [-1, 1])."""
    dtype = result_dtype(x1, x2)
    if not dtype.is_float:
        dtype = DType.F32
    a, b = cast(ctx, x1, dtype), cast(ctx, x2, dtype)
    r = max(rank(a), rank(b))
    a, b = unsqueeze_to(ctx, a, r), unsqueeze_to(ctx, b, r)
    shape = broadcast_shape(a, b)
    a, b = expand_to(ctx, a, shape), expand_to(ctx, b, shape)
    axes_ = reduce_axes(dim, a)
    na = ctx.call("torch.clamp_min", vector_norm(ctx, a, 2, axes_, True), eps)
    nb = ctx.call("torch.clamp_min", vector_norm(ctx, b, 2, axes_, True), eps)
    return ctx.call("torch.sum", ew(ctx, "mul", ew(ctx, "div", a, na), ew(ctx, "div", b, nb)), dim)


@register(torch.pairwise_distance)
def pairwise_distance(ctx: EmitContext, x1: Value, x2: Value, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """pairwise_distance(Tensor x1, Tensor x2, float p=2, float eps=1e-06, bool keepdim=False) -> Tensor

    ``norm(x1 - x2 + eps, p)`` over the last axis, as torch (operands of rank 0 or 1 alike)."""
    diff = ew(ctx, "add", ctx.call("torch.sub", x1, x2), eps)
    if rank(diff) == 0:
        return ctx.call("torch.abs", diff)
    return vector_norm(ctx, diff, float(p), [rank(diff) - 1], keepdim)


@register(torch.bilinear)
def bilinear(ctx: EmitContext, input1: Value, input2: Value, weight: Value, bias: Optional[Value] = None):
    """bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor:
    ``y[..., k] = x1[..., :] @ W[k] @ x2[..., :] + b[k]`` (one einsum)"""
    y = ctx.call("torch.einsum", "...i,kij,...j->...k", input1, weight, input2)
    return y if bias is None else ctx.call("torch.add", y, bias)


# ---- small compositions ---------------------------------------------------------------------------------------------
@register(torch.broadcast_tensors)
def broadcast_tensors(ctx: EmitContext, *tensors):
    """broadcast_tensors(*tensors) -> List[Tensor]: each tensor expanded to the common shape"""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    r = max(rank(t) for t in tensors)
    wide = [unsqueeze_to(ctx, t, r) for t in tensors]
    shape = broadcast_shape(*wide)
    return tuple(expand_to(ctx, t, shape) for t in wide)


@register(F.softmin)
def softmin(ctx: EmitContext, input: Value, dim: Optional[int] = None, _stacklevel: int = 3,
            dtype: Optional[DType] = None):
    """softmin(Tensor input, int? dim=None, int _stacklevel=3, ScalarType? dtype=None) -> Tensor: ``softmax(-input)``"""
    x = cast(ctx, input, dtype) if dtype is not None else input
    return ctx.call("F.softmax", ctx.call("torch.neg", x), dim)


def _nan_ignoring(ctx: EmitContext, input: Value, other: Value, op: str) -> Value:
    y = ctx.call(op, input, other)
    if not y.dtype.is_float:
        return y
    a, b = cast(ctx, input, y.dtype), cast(ctx, other, y.dtype)
    y = ctx.call("torch.where", ctx.call("torch.isnan", a), b, y)
    return ctx.call("torch.where", ctx.call("torch.isnan", b), a, y)


@register(torch.fmax, "Tensor.fmax")
def fmax(ctx: EmitContext, input: Value, other: Value):
    """fmax(Tensor self, Tensor other) -> Tensor: maximum, a NaN losing to a number"""
    return _nan_ignoring(ctx, input, other, "torch.maximum")


@register(torch.fmin, "Tensor.fmin")
def fmin(ctx: EmitContext, input: Value, other: Value):
    """fmin(Tensor self, Tensor other) -> Tensor: minimum, a NaN losing to a number"""
    return _nan_ignoring(ctx, input, other, "torch.minimum")


@register(torch.deg2rad, "Tensor.deg2rad")
def deg2rad(ctx: EmitContext, input: Value):
    """deg2rad(Tensor self) -> Tensor"""
    return ew(ctx, "mul", to_float(ctx, input), math.pi / 180)


@register(torch.rad2deg, "Tensor.rad2deg")
def rad2deg(ctx: EmitContext, input: Value):
    """rad2deg(Tensor self) -> Tensor"""
    return ew(ctx, "mul", to_float(ctx, input), 180 / math.pi)


@register(torch.aminmax, "Tensor.aminmax")
def aminmax(ctx: EmitContext, input: Value, *, dim: Optional[int] = None, keepdim: bool = False):
    """aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)"""
    dims = () if dim is None else dim
    return ctx.call("torch.amin", input, dims, keepdim), ctx.call("torch.amax", input, dims, keepdim)


@register(torch.channel_shuffle, torch.native_channel_shuffle)
def channel_shuffle(ctx: EmitContext, input: Value, groups: int):
    """channel_shuffle(Tensor self, SymInt groups) -> Tensor: ``[N, g, C/g, ...]`` with its axes 1 and 2 swapped"""
    if rank(input) < 3:
        ctx.fail("channel_shuffle takes a tensor of rank 3 at least ([N, C, ...])")
    n, c, rest = input.shape[0], input.shape[1], list(input.shape[2:])
    if not isinstance(c, int) or not isinstance(groups, int) or groups <= 0 or c % groups:
        ctx.fail(f"channel_shuffle: {c} channels must be static and divisible by groups={groups}")
    grouped = reshape_to(ctx, input, [n, groups, c // groups] + rest)
    swapped = ctx.call("torch.transpose", grouped, 1, 2)
    return reshape_to(ctx, swapped, [n, c] + rest)


@register(torch.diagflat, "Tensor.diagflat")
def diagflat(ctx: EmitContext, input: Value, offset: int = 0):
    """diagflat(Tensor self, int offset=0) -> Tensor: the flattened input on a diagonal"""
    return ctx.call("torch.diag", ctx.call("torch.flatten", input), offset)


@register(torch.linalg.matrix_power, torch.matrix_power, "Tensor.matrix_power")
def matrix_power(ctx: EmitContext, input: Value, n: int):
    """matrix_power(Tensor self, int n) -> Tensor: by repeated squaring for n >= 0 (n = 0: identities)

    A negative ``n`` needs the inverse, which NNEF has no op for: refused."""
    if rank(input) < 2 or input.shape[-1] != input.shape[-2]:
        ctx.fail("matrix_power takes (batches of) square matrices")
    if not isinstance(n, int):
        ctx.fail("matrix_power: the exponent must be an int")
    if n < 0:
        ctx.fail(f"matrix_power with n={n} needs the matrix inverse, which NNEF cannot express; "
                 "compute the inverse outside the exported model")
    if n == 0:
        k = input.shape[-1]
        if not isinstance(k, int):
            ctx.fail("matrix_power(A, 0) of a matrix of dynamic size: use torch.eye with a static size")
        eye = ctx.const(torch.eye(k).numpy(), input.dtype)
        return expand_to(ctx, eye, input.shape)
    result, base = None, input
    while n:
        if n & 1:
            result = base if result is None else _matmul(ctx, result, base)
        n >>= 1
        if n:
            base = _matmul(ctx, base, base)
    return result


def _lp_pool(ctx: EmitContext, input: Value, norm_type, kernel_size, stride, ceil_mode, dims: int) -> Value:
    """torch's lp_pool: ``(sign(s) * relu(|s|) * k) ** (1/p)`` with ``s`` the average of ``x ** p``."""
    ks = [kernel_size] * dims if isinstance(kernel_size, int) else list(kernel_size)
    pool = "torch.avg_pool1d" if dims == 1 else "F.avg_pool2d"
    powered = ctx.call("torch.pow", input, norm_type)
    out = ctx.call(pool, powered, kernel_size, stride if stride is not None else kernel_size, 0, ceil_mode)
    kept = ctx.call("torch.mul", ctx.call("torch.sign", out), ctx.call("torch.relu", ctx.call("torch.abs", out)))
    return ctx.call("torch.pow", ew(ctx, "mul", kept, float(math.prod(ks))), 1.0 / norm_type)


@register(F.lp_pool1d)
def lp_pool1d(ctx: EmitContext, input: Value, norm_type, kernel_size, stride=None, ceil_mode: bool = False):
    """lp_pool1d(Tensor input, float norm_type, int kernel_size, int? stride=None, bool ceil_mode=False) -> Tensor"""
    return _lp_pool(ctx, input, norm_type, kernel_size, stride, ceil_mode, 1)


@register(F.lp_pool2d)
def lp_pool2d(ctx: EmitContext, input: Value, norm_type, kernel_size, stride=None, ceil_mode: bool = False):
    """lp_pool2d(Tensor input, float norm_type, int[2] kernel_size, int[2]? stride=None, bool ceil_mode=False) -> Tensor"""
    return _lp_pool(ctx, input, norm_type, kernel_size, stride, ceil_mode, 2)
