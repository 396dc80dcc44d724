"""Classification and ranking losses that models compute in their forward when given labels
(transformers' ``labels=``): cross_entropy and nll_loss (class indices with ignore_index, weight and
label smoothing, or class probabilities), binary cross entropy (with logits and pos_weight),
kl_div, and the margin / embedding losses. The regression losses live in regression_losses.

A class index is matched against every class (``arange(C) == target``) instead of gathered: an
ignored or out-of-range target then matches nothing. Integer targets need tract (standard NNEF
compares no integers).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, compare, ew, rank, select, un
from ..registry import register
from .reduce import reduce as reduce_op
from .shape import reshape_to


def _check_reduction(ctx: EmitContext, name: str, size_average, reduce_, reduction: str, allowed=("none", "mean", "sum")):
    if size_average is not None or reduce_ is not None:
        ctx.fail(f"{name}: the deprecated size_average/reduce arguments are not supported; pass reduction= instead")
    if reduction not in allowed:
        ctx.fail(f"{name}: reduction={reduction!r} is not one of {', '.join(map(repr, allowed))}")


def _reduced(ctx: EmitContext, loss: Value, reduction: str) -> Value:
    if reduction == "none":
        return loss
    return ctx.call("torch.mean" if reduction == "mean" else "torch.sum", loss)


def _sum_all(ctx: EmitContext, x: Value) -> Value:
    return ctx.call("torch.sum", x)


def _class_axis_shape(r: int, c) -> list:
    """A shape that puts ``c`` items on axis 1 of a rank-``r`` tensor."""
    return [1, c] + [1] * (r - 2)


def _nll(ctx: EmitContext, name: str, logp: Value, target: Value, weight: Optional[Value], ignore_index: int,
         reduction: str, label_smoothing: float = 0.0) -> Value:
    """Negative log likelihood of class-index targets, ``logp`` [N, C, ...] (or [C] with a 0-d target)."""
    squeeze = rank(logp) == 1
    if squeeze:
        logp = reshape_to(ctx, logp, [1, logp.shape[0]])
        target = reshape_to(ctx, target, [1])
    r, c = rank(logp), logp.shape[1]
    if not isinstance(c, int):
        ctx.fail(f"{name}: the number of classes ({c}) must be static")
    classes = ctx.const(np.arange(c, dtype=np.int64).reshape(_class_axis_shape(r, c)), DType.I64)
    t = ctx.op("unsqueeze", cast(ctx, target, DType.I64), axes=[1],
               out_shape=tuple(target.shape[:1]) + (1,) + tuple(target.shape[1:]), out_dtype=DType.I64)
    hit = compare(ctx, "eq", classes, t)  # [N, C, ...]: false everywhere on an ignored target
    if 0 <= ignore_index < c:  # an ignored index that names a class
        hit = ew(ctx, "and", hit, compare(ctx, "ne", t, ctx.const(np.array(ignore_index, dtype=np.int64), DType.I64)))
    dtype = logp.dtype
    w = None
    if weight is not None:
        w = reshape_to(ctx, cast(ctx, weight, dtype), _class_axis_shape(r, c))
    picked_logp = logp if w is None else ew(ctx, "mul", logp, w)
    nll = un(ctx, "neg", reduce_op(ctx, "sum_reduce", select(ctx, hit, picked_logp, 0.0), [1], False))  # [N, ...]
    kept_w = reduce_op(ctx, "sum_reduce", select(ctx, hit, w if w is not None else 1.0, 0.0)
                    if w is not None else cast(ctx, hit, dtype), [1], False)  # w[target], 0 if ignored
    if label_smoothing:
        ignored = compare(ctx, "eq", cast(ctx, target, DType.I64),
                          ctx.const(np.array(ignore_index, dtype=np.int64), DType.I64))
        smooth = un(ctx, "neg", reduce_op(ctx, "sum_reduce", picked_logp, [1], False))
        smooth = select(ctx, ignored, 0.0, smooth)
    if reduction == "none":
        out = nll
        if label_smoothing:
            out = ew(ctx, "add", ew(ctx, "mul", nll, 1.0 - label_smoothing), ew(ctx, "mul", smooth, label_smoothing / c))
        return reshape_to(ctx, out, []) if squeeze else out
    total = _sum_all(ctx, nll)
    if reduction == "mean":
        total = ew(ctx, "div", total, _sum_all(ctx, kept_w))  # all ignored: 0 / 0 is NaN, as in torch
    if not label_smoothing:
        return total
    smooth_total = _sum_all(ctx, smooth)
    if reduction == "mean":
        # torch divides the smoothing term by the weights of the kept targets too (by their count without weights)
        smooth_total = ew(ctx, "div", smooth_total, _sum_all(ctx, kept_w))
    return ew(ctx, "add", ew(ctx, "mul", total, 1.0 - label_smoothing), ew(ctx, "mul", smooth_total, label_smoothing / c))


@register(F.nll_loss)
def nll_loss(ctx: EmitContext, input: Value, target: Value, weight: Optional[Value] = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean"):
    """nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction='mean'):
    ``-input[n, target[n]]`` (times ``weight[target]``), 0 where the target is ``ignore_index``; the mean
    divides by the weights of the targets kept."""
    _check_reduction(ctx, "nll_loss", size_average, reduce, reduction)
    return _nll(ctx, "nll_loss", input, target, weight, ignore_index, reduction)


@register(F.cross_entropy)
def cross_entropy(ctx: EmitContext, input: Value, target: Value, weight: Optional[Value] = None, size_average=None,
                  ignore_index: int = -100, reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
    reduction='mean', label_smoothing=0.0): log_softmax over axis 1 (axis 0 for a 1-D input) then
    nll_loss for class indices (with label smoothing as torch mixes it in), or ``-sum(target * logp)``
    for class probabilities (an input-shaped float target)."""
    _check_reduction(ctx, "cross_entropy", size_average, reduce, reduction)
    class_axis = 0 if rank(input) == 1 else 1
    logp = ctx.call("torch.log_softmax", input, class_axis)
    if not target.dtype.is_float:
        return _nll(ctx, "cross_entropy", logp, target, weight, ignore_index, reduction, float(label_smoothing))
    c = input.shape[class_axis]
    if not isinstance(c, int):
        ctx.fail(f"cross_entropy: the number of classes ({c}) must be static")
    probs = cast(ctx, target, logp.dtype)
    if label_smoothing:
        probs = ew(ctx, "add", ew(ctx, "mul", probs, 1.0 - label_smoothing), label_smoothing / c)
    terms = ew(ctx, "mul", logp, probs)
    if weight is not None:
        shape = [c] if rank(input) == 1 else _class_axis_shape(rank(input), c)
        terms = ew(ctx, "mul", terms, reshape_to(ctx, cast(ctx, weight, logp.dtype), shape))
    loss = un(ctx, "neg", reduce_op(ctx, "sum_reduce", terms, [class_axis], False))
    if reduction == "mean":  # over the items of the batch (and spatial dims), not the weights
        return ctx.call("torch.mean", loss) if rank(loss) else loss
    return _reduced(ctx, loss, reduction)


def _weighted(ctx: EmitContext, loss: Value, weight: Optional[Value]) -> Value:
    return loss if weight is None else ew(ctx, "mul", *_same_rank(ctx, loss, cast(ctx, weight, loss.dtype)))


def _same_rank(ctx: EmitContext, a: Value, b: Value):
    from ..helpers import unsqueeze_to

    r = max(rank(a), rank(b))
    return unsqueeze_to(ctx, a, r), unsqueeze_to(ctx, b, r)


@register(F.binary_cross_entropy)
def binary_cross_entropy(ctx: EmitContext, input: Value, target: Value, weight: Optional[Value] = None,
                         size_average=None, reduce=None, reduction: str = "mean"):
    """binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction='mean'):
    ``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as torch does."""
    _check_reduction(ctx, "binary_cross_entropy", size_average, reduce, reduction)
    t = cast(ctx, target, input.dtype)
    log_x = ew(ctx, "max", un(ctx, "log", input), -100.0)
    log_1mx = ew(ctx, "max", un(ctx, "log", ew(ctx, "sub", 1.0, input)), -100.0)
    loss = ew(ctx, "add", ew(ctx, "mul", t, log_x), ew(ctx, "mul", ew(ctx, "sub", 1.0, t), log_1mx))
    return _reduced(ctx, _weighted(ctx, un(ctx, "neg", loss), weight), reduction)


@register(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(ctx: EmitContext, input: Value, target: Value, weight: Optional[Value] = None,
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Optional[Value] = None):
    """binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
    reduction='mean', pos_weight=None): ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)``, softplus
    written as ``log1p(exp(-|x|)) + max(-x, 0)`` (no overflow)."""
    _check_reduction(ctx, "binary_cross_entropy_with_logits", size_average, reduce, reduction)
    x = input
    t = cast(ctx, target, x.dtype)
    neg_x = un(ctx, "neg", x)
    softplus_neg = ew(ctx, "add", ctx.call("torch.log1p", un(ctx, "exp", un(ctx, "neg", un(ctx, "abs", x)))),
                      ew(ctx, "max", neg_x, 0.0))
    if pos_weight is not None:
        pw = cast(ctx, pos_weight, x.dtype)
        scale = ew(ctx, "add", ew(ctx, "mul", *_same_rank(ctx, ew(ctx, "sub", pw, 1.0), t)), 1.0) \
            if rank(pw) <= rank(t) else None
        if scale is None:
            ctx.fail("binary_cross_entropy_with_logits: pos_weight of higher rank than the target is not supported")
        softplus_neg = ew(ctx, "mul", softplus_neg, scale)
    loss = ew(ctx, "add", ew(ctx, "mul", ew(ctx, "sub", 1.0, t), x), softplus_neg)
    return _reduced(ctx, _weighted(ctx, loss, weight), reduction)


@register(F.kl_div)
def kl_div(ctx: EmitContext, input: Value, target: Value, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """kl_div(input, target, size_average=None, reduce=None, reduction='mean', log_target=False):
    ``target * (log target - input)`` (0 where target == 0), or ``exp(t) * (t - input)`` for log targets;
    'batchmean' divides the sum by the first size."""
    _check_reduction(ctx, "kl_div", size_average, reduce, reduction, ("none", "mean", "sum", "batchmean"))
    t = cast(ctx, target, input.dtype)
    if log_target:
        loss = ew(ctx, "mul", un(ctx, "exp", t), ew(ctx, "sub", t, input))
    else:
        loss = ew(ctx, "sub", ctx.call("torch.xlogy", t, t), ew(ctx, "mul", t, input))
    if reduction != "batchmean":
        return _reduced(ctx, loss, reduction)
    total = ctx.call("torch.sum", loss)
    if rank(input) == 0:
        return total
    n = input.shape[0]
    count = float(n) if isinstance(n, int) else ctx.call("nnef.size", n, total.dtype)
    return ew(ctx, "div", total, count)


@register(F.soft_margin_loss)
def soft_margin_loss(ctx: EmitContext, input: Value, target: Value, size_average=None, reduce=None,
                     reduction: str = "mean"):
    """soft_margin_loss(input, target, size_average=None, reduce=None, reduction='mean'): ``log(1 + exp(-y x))``
    (as torch writes it: inf where ``-y x`` overflows the exponential)."""
    _check_reduction(ctx, "soft_margin_loss", size_average, reduce, reduction)
    z = un(ctx, "neg", ew(ctx, "mul", *_same_rank(ctx, input, cast(ctx, target, input.dtype))))
    return _reduced(ctx, ctx.call("torch.log1p", un(ctx, "exp", z)), reduction)


@register(F.margin_ranking_loss)
def margin_ranking_loss(ctx: EmitContext, input1: Value, input2: Value, target: Value, margin: float = 0,
                        size_average=None, reduce=None, reduction: str = "mean"):
    """margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction='mean'):
    ``max(0, -y (x1 - x2) + margin)``."""
    _check_reduction(ctx, "margin_ranking_loss", size_average, reduce, reduction)
    d = ctx.call("torch.sub", input1, input2)
    y = cast(ctx, target, d.dtype)
    loss = ew(ctx, "max", ew(ctx, "add", un(ctx, "neg", ew(ctx, "mul", *_same_rank(ctx, y, d))), float(margin)), 0.0)
    return _reduced(ctx, loss, reduction)


@register(F.hinge_embedding_loss)
def hinge_embedding_loss(ctx: EmitContext, input: Value, target: Value, margin: float = 1.0, size_average=None,
                         reduce=None, reduction: str = "mean"):
    """hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction='mean'):
    ``x`` where y != -1 plus ``max(0, margin - x)`` where y != 1 (torch's sum of the two)."""
    _check_reduction(ctx, "hinge_embedding_loss", size_average, reduce, reduction)
    x, y = _same_rank(ctx, input, cast(ctx, target, input.dtype))
    hinge = ew(ctx, "max", ew(ctx, "sub", float(margin), x), 0.0)
    loss = ew(ctx, "add", select(ctx, compare(ctx, "ne", y, 1.0), hinge, 0.0),
              select(ctx, compare(ctx, "ne", y, -1.0), x, 0.0))
    return _reduced(ctx, loss, reduction)


@register(F.cosine_embedding_loss)
def cosine_embedding_loss(ctx: EmitContext, input1: Value, input2: Value, target: Value, margin: float = 0,
                          size_average=None, reduce=None, reduction: str = "mean"):
    """cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction='mean'):
    ``1 - cos`` where y == 1, ``max(0, cos - margin)`` where y == -1, with torch's cosine
    ``sum(a b) / sqrt((sum(a^2) + 1e-12) (sum(b^2) + 1e-12))`` along the last axis."""
    _check_reduction(ctx, "cosine_embedding_loss", size_average, reduce, reduction)
    ax = rank(input1) - 1
    dot = reduce_op(ctx, "sum_reduce", ctx.call("torch.mul", input1, input2), [ax], False)
    m1 = ew(ctx, "add", reduce_op(ctx, "sum_reduce", ctx.call("torch.mul", input1, input1), [ax], False), 1e-12)
    m2 = ew(ctx, "add", reduce_op(ctx, "sum_reduce", ctx.call("torch.mul", input2, input2), [ax], False), 1e-12)
    cos = ew(ctx, "div", dot, un(ctx, "sqrt", ew(ctx, "mul", m1, m2)))
    y = cast(ctx, target, cos.dtype)
    y, cos = _same_rank(ctx, y, cos)
    pos = select(ctx, compare(ctx, "eq", y, 1.0), ew(ctx, "sub", 1.0, cos), 0.0)
    neg = select(ctx, compare(ctx, "eq", y, -1.0), ew(ctx, "max", ew(ctx, "sub", cos, float(margin)), 0.0), 0.0)
    return _reduced(ctx, ew(ctx, "add", pos, neg), reduction)


@register(F.poisson_nll_loss)
def poisson_nll_loss(ctx: EmitContext, input: Value, target: Value, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    """poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
    reduction='mean'): ``exp(x) - t x`` (log input) or ``x - t log(x + eps)``; ``full`` adds Stirling's
    term ``t log t - t + log(2 pi t) / 2`` where t > 1."""
    _check_reduction(ctx, "poisson_nll_loss", size_average, reduce, reduction)
    x, t = _same_rank(ctx, input, cast(ctx, target, input.dtype))
    if log_input:
        loss = ew(ctx, "sub", un(ctx, "exp", x), ew(ctx, "mul", t, x))
    else:
        loss = ew(ctx, "sub", x, ew(ctx, "mul", t, un(ctx, "log", ew(ctx, "add", x, float(eps)))))
    if full:
        safe = ew(ctx, "max", t, 1.0)
        stirling = ew(ctx, "add", ew(ctx, "sub", ew(ctx, "mul", safe, un(ctx, "log", safe)), safe),
                      ew(ctx, "mul", un(ctx, "log", ew(ctx, "mul", safe, 2 * math.pi)), 0.5))
        loss = ew(ctx, "add", loss, select(ctx, compare(ctx, "gt", t, 1.0), stirling, 0.0))
    return _reduced(ctx, loss, reduction)


@register(F.gaussian_nll_loss)
def gaussian_nll_loss(ctx: EmitContext, input: Value, target: Value, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    """gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction='mean'):
    ``(log(max(var, eps)) + (x - t)^2 / max(var, eps)) / 2`` (+ log(2 pi) / 2 if ``full``); a ``var``
    with one axis fewer than the input gets it back at the end, as torch does."""
    _check_reduction(ctx, "gaussian_nll_loss", None, None, reduction)
    if not isinstance(var, Value):
        var = ctx.const(np.array(var, dtype=input.dtype.numpy_name), input.dtype)
    v = cast(ctx, var, input.dtype)
    if rank(v) == rank(input) - 1 and rank(input) > 0 and tuple(v.shape) == tuple(input.shape[:-1]):
        v = ctx.op("unsqueeze", v, axes=[rank(v)], out_shape=tuple(v.shape) + (1,), out_dtype=v.dtype)
    v = ew(ctx, "max", v, float(eps))
    d = ctx.call("torch.sub", input, target)
    sq = ew(ctx, "mul", d, d)
    loss = ew(ctx, "mul", ew(ctx, "add", *_same_rank(ctx, un(ctx, "log", v), ew(ctx, "div", *_same_rank(ctx, sq, v)))),
              0.5)
    if full:
        loss = ew(ctx, "add", loss, 0.5 * math.log(2 * math.pi))
    return _reduced(ctx, loss, reduction)


@register(F.multilabel_soft_margin_loss)
def multilabel_soft_margin_loss(ctx: EmitContext, input: Value, target: Value, weight: Optional[Value] = None,
                                size_average=None, reduce=None, reduction: str = "mean"):
    """multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction='mean'):
    ``-(t logsigmoid(x) + (1 - t) logsigmoid(-x))``, weighted, averaged over the classes (last axis)."""
    _check_reduction(ctx, "multilabel_soft_margin_loss", size_average, reduce, reduction)
    t = cast(ctx, target, input.dtype)
    pos = ctx.call("F.log_sigmoid", input)
    neg = ctx.call("F.log_sigmoid", un(ctx, "neg", input))
    loss = un(ctx, "neg", ew(ctx, "add", ew(ctx, "mul", t, pos), ew(ctx, "mul", ew(ctx, "sub", 1.0, t), neg)))
    loss = _weighted(ctx, loss, weight)
    per_item = reduce_op(ctx, "mean_reduce", loss, [rank(input) - 1], False)
    return _reduced(ctx, per_item, reduction)


@register(F.triplet_margin_loss)
def triplet_margin_loss(ctx: EmitContext, anchor: Value, positive: Value, negative: Value, margin: float = 1.0,
                        p: float = 2, eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, ..., reduction='mean'):
    ``max(d(a, p) - d(a, n) + margin, 0)`` with pairwise distances (``swap``: the smaller of d(a, n), d(p, n))."""
    _check_reduction(ctx, "triplet_margin_loss", size_average, reduce, reduction)
    d_pos = ctx.call("torch.pairwise_distance", anchor, positive, float(p), float(eps))
    d_neg = ctx.call("torch.pairwise_distance", anchor, negative, float(p), float(eps))
    if swap:
        d_neg = ew(ctx, "min", d_neg, ctx.call("torch.pairwise_distance", positive, negative, float(p), float(eps)))
    loss = ew(ctx, "max", ew(ctx, "add", ew(ctx, "sub", d_pos, d_neg), float(margin)), 0.0)
    return _reduced(ctx, loss, reduction)
