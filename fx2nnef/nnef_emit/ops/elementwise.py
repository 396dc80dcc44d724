"""Elementwise math, comparisons and logic: tables of trivial ops and one generic converter each."""
from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import broadcast_operands, cast, result_dtype, scalar_operand
from ..registry import REGISTRY

# op -> NNEF unary op
UNARY = {
    "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan", "sinh": "sinh",
    "cosh": "cosh", "tanh": "tanh", "asin": "asin", "acos": "acos", "atan": "atan", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "abs": "abs", "neg": "neg", "sign": "sign", "floor": "floor",
    "ceil": "ceil", "round": "round", "sqrt": "sqrt", "rsqrt": "rsqrt", "sigmoid": "sigmoid",
    "relu": "relu", "logical_not": "not", "square": "sqr", "log2": "log2",
}
# op -> NNEF binary op (float or int result)
BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "true_divide": "div", "pow": "pow",
    "maximum": "max", "minimum": "min", "multiply": "mul", "subtract": "sub",
}
COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
           "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le", "not_equal": "ne"}
LOGIC = {"logical_and": "and", "logical_or": "or", "bitwise_and": "and", "bitwise_or": "or"}
OPERATORS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
             operator.pow: "pow", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
             operator.le: "le", operator.gt: "gt", operator.ge: "ge"}


def _unary(nnef_op: str):
    def convert(ctx: EmitContext, input: Value):
        x = input if input.dtype.is_float or nnef_op in ("abs", "neg", "sign", "not") else cast(ctx, input, DType.F32)
        return ctx.op(nnef_op, x, out_shape=input.shape)

    convert.__name__ = f"unary_{nnef_op}"
    return convert


def _binary(nnef_op: str, promote_div: bool = False):
    def convert(ctx: EmitContext, input, other, alpha=1, *, rounding_mode=None, out=None):
        dtype = result_dtype(input, other)
        if promote_div and not dtype.is_float:
            dtype = DType.F32
        a, b = cast(ctx, input, dtype), cast(ctx, other, dtype)
        if alpha != 1:
            b = ctx.op("mul", *broadcast_operands(ctx, b, alpha, dtype), out_dtype=dtype)
        a, b = broadcast_operands(ctx, a, b, dtype)
        y = ctx.op(nnef_op, a, b, out_dtype=dtype)
        if rounding_mode == "floor":
            y = ctx.op("floor", y, out_dtype=dtype)
        elif rounding_mode == "trunc":
            y = ctx.op("mul", ctx.op("sign", y), ctx.op("floor", ctx.op("abs", y)), out_dtype=dtype)
        return y

    convert.__name__ = f"binary_{nnef_op}"
    return convert


def _compare(nnef_op: str):
    def convert(ctx: EmitContext, input, other):
        dtype = result_dtype(input, other)
        a, b = broadcast_operands(ctx, cast(ctx, input, dtype), cast(ctx, other, dtype), dtype)
        return ctx.call("nnef.compare", nnef_op, a, b)

    convert.__name__ = f"compare_{nnef_op}"
    return convert


@REGISTRY.register("nnef.compare")
def compare(ctx: EmitContext, nnef_op: str, a, b):
    return ctx.op(nnef_op, a, b, out_dtype=DType.BOOL)


@REGISTRY.register("nnef.compare", target="tract")
def compare_tract(ctx: EmitContext, nnef_op: str, a, b):
    """NOTE: tract 0.23.9 mis-optimizes ``select`` on a comparison of two tensors whose shapes
    are symbolic (e.g. ``ge(range[:, None], range[None, :])``: "Undetermined symbol" at run
    time). Comparing their difference with 0 gives the same mask and runs."""
    symbolic = all(isinstance(v, Value) and not v.is_constant and v.shape is not None and not v.is_static
                   for v in (a, b))
    if not symbolic or a.dtype.is_bool or a.dtype is DType.U8:
        return ctx.op(nnef_op, a, b, out_dtype=DType.BOOL)
    diff = ctx.op("sub", a, b, out_dtype=a.dtype)
    return ctx.op(nnef_op, diff, scalar_operand(ctx, 0, a.dtype), out_dtype=DType.BOOL)


def _logic(nnef_op: str):
    def convert(ctx: EmitContext, input, other):
        a, b = broadcast_operands(ctx, cast(ctx, input, DType.BOOL), cast(ctx, other, DType.BOOL), DType.BOOL)
        return ctx.op(nnef_op, a, b, out_dtype=DType.BOOL)

    convert.__name__ = f"logic_{nnef_op}"
    return convert


def _sources(name: str) -> list:
    """torch.<name>, Tensor.<name> and F.<name> where they exist."""
    out = [f"Tensor.{name}"]
    for ns in (torch, F, torch.special):
        fn = getattr(ns, name, None)
        if callable(fn) and not isinstance(fn, type):
            out.append(fn)
    return out


def _register_family(table: dict, factory) -> None:
    seen = set()
    for name, nnef_op in table.items():
        conv = factory(nnef_op) if factory is not _binary else _binary(nnef_op, promote_div=name in ("div", "true_divide"))
        for src in _sources(name):
            key = src if isinstance(src, str) else id(src)
            if key in seen:
                continue
            seen.add(key)
            REGISTRY.add(src, conv)


_OWN_SIGNATURE = ("pow", "round")  # torch names their arguments differently from the family
_register_family({k: v for k, v in UNARY.items() if k not in _OWN_SIGNATURE}, _unary)
_register_family({k: v for k, v in BINARY.items() if k not in _OWN_SIGNATURE}, _binary)
_register_family(COMPARE, _compare)
_register_family(LOGIC, _logic)
REGISTRY.add(operator.neg, _unary("neg"))
REGISTRY.add(operator.abs, _unary("abs"))
REGISTRY.add(operator.and_, _logic("and"))
REGISTRY.add(operator.or_, _logic("or"))
REGISTRY.add(operator.invert, _unary("not"))
for _op, _nnef in OPERATORS.items():
    REGISTRY.add(_op, _binary(_nnef, promote_div=_op is operator.truediv) if _nnef in BINARY.values() else _compare(_nnef))


@REGISTRY.register(torch.pow, "Tensor.pow")
def pow_(ctx: EmitContext, input, exponent):
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor  (self or exponent may be a number)"""
    return _binary("pow")(ctx, input, exponent)


@REGISTRY.register(torch.round, "Tensor.round", torch.special.round)
def round_(ctx: EmitContext, input: Value, *, decimals: int = 0):
    """round(Tensor self) -> Tensor  (round.decimals(Tensor self, *, int decimals))"""
    if decimals:
        ctx.fail(f"round(decimals={decimals}) is not supported")
    return _unary("round")(ctx, input)
