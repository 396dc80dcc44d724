"""Integrals and statistics of tensors: cumulative_trapezoid, cov, corrcoef; bincount is refused
with a fixed-size form to write instead."""
from __future__ import annotations

from typing import Optional

import torch

from ...ir import SymDim, Value, simplify
from ..context import EmitContext
from ..helpers import axis, cast, ew, rank, to_float, un
from ..registry import register
from .linalg import _matmul
from .products import _squeezed
from .reduce import divide_by_count, reduce, sample_gaps
from .shape import reshape_to, slice_axis


# ---- integrals, statistics ------------------------------------------------------------------------------------------
@register(torch.cumulative_trapezoid)
def cumulative_trapezoid(ctx: EmitContext, y: Value, x=None, *, dx=None, dim: int = -1):
    """cumulative_trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor; cumulative_trapezoid.dx(Tensor y, *, Scalar dx=1, int dim=-1)

    The running sum of the trapezoids: ``cumsum((y[1:] + y[:-1]) / 2 * dx)``, or with sample
    points ``x``, ``cumsum(diff(x) * (y[1:] + y[:-1]) / 2)``; one item fewer along ``dim``."""
    y = to_float(ctx, y)
    a = axis(dim, rank(y))
    n = y.shape[a]
    pairs = ew(ctx, "add", slice_axis(ctx, y, a, 1, n), slice_axis(ctx, y, a, 0, simplify(n - 1)))
    if isinstance(x, Value):
        gaps = sample_gaps(ctx, x, y, dim, a)
        areas = ew(ctx, "div", ew(ctx, "mul", gaps, pairs), 2.0)
    else:
        step = float(1.0 if x is None and dx is None else x if x is not None else dx)
        areas = ew(ctx, "mul", pairs, step / 2)
    return ctx.call("torch.cumsum", areas, a)


@register(torch.bincount, "Tensor.bincount")
def bincount(ctx: EmitContext, input: Value, weights: Optional[Value] = None, minlength: int = 0):
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor: refused

    Its length is ``max(input) + 1`` (at least ``minlength``): it follows the data, and an asset
    of the traced length would drop the counts of larger values at other inputs."""
    ctx.fail("bincount: the output length is max(input) + 1, which depends on the values; a fixed-length export "
             "would silently drop larger values. Write the count with a fixed length n instead: "
             "torch.zeros(n, dtype=...).scatter_add(0, x, torch.ones_like(x)) (or the weights), or "
             "F.one_hot(x, n).sum(0)")


def _cov_matrix(ctx: EmitContext, input: Value, correction, fweights, aweights) -> Value:
    """torch.cov: ``[V, N]`` observations (a vector: one variable), optional integer frequency and
    float observation weights; ``(x - avg) * w @ (x - avg)^T / norm``, norm clamped at 0."""
    if rank(input) > 2:
        ctx.fail(f"cov takes a vector or a matrix (variables x observations), got rank {rank(input)}")
    x = to_float(ctx, input)
    if rank(x) < 2:
        x = reshape_to(ctx, x, [1] + list(x.shape))
    n = x.shape[1]
    w = None
    for given in (fweights, aweights):
        if given is not None:
            g = cast(ctx, given, x.dtype)
            w = g if w is None else ew(ctx, "mul", w, g)
    if w is None:
        avg = ctx.call("torch.mean", x, 1, True)
    else:
        w = reshape_to(ctx, w, [1, n])
        w_sum = reduce(ctx, "sum_reduce", w, [1], True)
        avg = ew(ctx, "div", reduce(ctx, "sum_reduce", ew(ctx, "mul", x, w), [1], True), w_sum)
    xm = ew(ctx, "sub", x, avg)
    right = xm if w is None else ew(ctx, "mul", xm, w)
    c = _matmul(ctx, xm, right, transpose_b=True)
    if w is None:
        if isinstance(n, int):
            c = ew(ctx, "div", c, float(max(n - correction, 0)))
        else:
            c = divide_by_count(ctx, c, x, [1], minus=correction)  # NOTE: a dynamic count below 0 is not clamped
    else:
        if aweights is not None and correction != 0:
            aw = reshape_to(ctx, cast(ctx, aweights, x.dtype), [1, n])
            norm = ew(ctx, "sub", w_sum, ew(ctx, "mul", ew(ctx, "div", reduce(ctx, "sum_reduce", ew(ctx, "mul", w, aw),
                                                                             [1], True), w_sum), float(correction)))
        else:
            norm = ew(ctx, "sub", w_sum, float(correction))
        norm = ctx.call("torch.clamp_min", norm, 0.0)
        c = ew(ctx, "div", c, norm)
    return c


@register(torch.cov, "Tensor.cov")
def cov(ctx: EmitContext, input: Value, *, correction: int = 1, fweights: Optional[Value] = None,
        aweights: Optional[Value] = None):
    """cov(Tensor self, *, int correction=1, Tensor? fweights=None, Tensor? aweights=None) -> Tensor"""
    if isinstance(input.shape[0] if rank(input) == 2 else 1, SymDim):
        ctx.fail("cov with a dynamic number of variables: the result's shape would be [V, V] with V dynamic "
                 "(squeezed when V is 1); make the variable axis (dim 0) static")
    return _squeezed(ctx, _cov_matrix(ctx, input, correction, fweights, aweights))


@register(torch.corrcoef, "Tensor.corrcoef")
def corrcoef(ctx: EmitContext, input: Value):
    """corrcoef(Tensor self) -> Tensor: ``cov / (std_i * std_j)``, clamped to [-1, 1] as torch's"""
    if isinstance(input.shape[0] if rank(input) == 2 else 1, SymDim):
        ctx.fail("corrcoef with a dynamic number of variables: make the variable axis (dim 0) static")
    c = _cov_matrix(ctx, input, 1, None, None)
    if c.shape == (1, 1):
        return _squeezed(ctx, ew(ctx, "div", c, c))
    std = un(ctx, "sqrt", ctx.call("torch.diagonal", c))
    v = std.shape[0]
    c = ew(ctx, "div", c, reshape_to(ctx, std, [v, 1]))
    c = ew(ctx, "div", c, reshape_to(ctx, std, [1, v]))
    return ctx.call("torch.clamp", c, -1.0, 1.0)
