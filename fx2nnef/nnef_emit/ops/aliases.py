"""Aliases of supported ops, lowered through them (``ctx.call``): divide, arccos..., absolute,
ravel, msort, special.expit, embedding, constant_pad_nd, linalg.diagonal, adjoint, conj of real
tensors."""
from __future__ import annotations

from typing import Optional

import torch

from ...ir import Value
from ..context import EmitContext
from ..helpers import rank
from ..registry import register


def _alias(target: str):
    def convert(ctx: EmitContext, input: Value):
        return ctx.call(target, input)

    convert.__name__ = f"alias_{target.split('.')[-1]}"
    convert.__doc__ = f"the same op as {target}"
    return convert


for _name, _target in (("arccos", "acos"), ("arcsin", "asin"), ("arctan", "atan"), ("arccosh", "acosh"),
                       ("arcsinh", "asinh"), ("arctanh", "atanh"), ("absolute", "abs")):
    register(getattr(torch, _name), f"Tensor.{_name}")(_alias(f"torch.{_target}"))
register(torch.special.expit)(_alias("torch.sigmoid"))


@register(torch.divide, "Tensor.divide")
def divide(ctx: EmitContext, input, other, *, rounding_mode: Optional[str] = None):
    """divide(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor (torch.div)"""
    return ctx.call("torch.div", input, other, rounding_mode=rounding_mode)


@register(torch.rsub)
def rsub(ctx: EmitContext, input, other, alpha=1):
    """rsub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor: ``other - alpha * input``"""
    return ctx.call("torch.sub", other, input, alpha=alpha)


@register(torch.ravel, "Tensor.ravel")
def ravel(ctx: EmitContext, input: Value):
    """ravel(Tensor self) -> Tensor"""
    return ctx.call("torch.flatten", input)


@register(torch.msort, "Tensor.msort")
def msort(ctx: EmitContext, input: Value):
    """msort(Tensor self) -> Tensor: the values of ``sort`` along dim 0"""
    return ctx.call("torch.sort", input, 0)[0]


@register(torch.embedding)
def embedding(ctx: EmitContext, weight: Value, indices: Value, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False):
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""
    return ctx.call("F.embedding", indices, weight)


@register(torch.constant_pad_nd)
def constant_pad_nd(ctx: EmitContext, input: Value, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor (F.pad, constant mode)"""
    return ctx.call("F.pad", input, list(pad), "constant", value)


@register(torch.linalg.diagonal)
def linalg_diagonal(ctx: EmitContext, A: Value, *, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """linalg_diagonal(Tensor(a) A, *, int offset=0, int dim1=-2, int dim2=-1) -> Tensor(a)"""
    return ctx.call("torch.diagonal", A, offset, dim1, dim2)


def _real(ctx: EmitContext, input: Value, what: str) -> Value:
    """Real tensors only reach converters (the complex pass rewrites complex values into pairs)."""
    return input


@register(torch.adjoint, "Tensor.adjoint")
def adjoint(ctx: EmitContext, input: Value):
    """adjoint(Tensor(a) self) -> Tensor(a): the last two axes swapped (real tensors: no conjugate)"""
    if rank(input) < 2:
        ctx.fail("adjoint takes a tensor of rank 2 at least")
    return ctx.call("torch.transpose", _real(ctx, input, "adjoint"), -2, -1)


@register(torch.conj, "Tensor.conj", torch.resolve_conj, "Tensor.resolve_conj", torch.resolve_neg,
          "Tensor.resolve_neg", torch.conj_physical, "Tensor.conj_physical")
def conj(ctx: EmitContext, input: Value):
    """conj(Tensor(a) self) -> Tensor(a) (also resolve_conj, resolve_neg, conj_physical): a real tensor as it is"""
    return _real(ctx, input, "conj")
