"""tract's overrides of the linalg converters (the common rules: ``fx2nnef.nnef_emit.ops.linalg``)."""
from __future__ import annotations

import torch

from fx2nnef.ir import DType, Value
from fx2nnef.nnef_emit.context import EmitContext, TRACT_DATUM
from fx2nnef.nnef_emit.helpers import cast, result_dtype
from fx2nnef.nnef_emit.ops.linalg import _operand_list, _sizes, parse_einsum
from fx2nnef.nnef_emit.ops.tiled_operands import weights_product_operands
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


@register(torch.einsum, target=TRACT)
def einsum_tract(ctx: EmitContext, equation: str, *operands):
    """einsum(str equation, Tensor[] tensors) -> Tensor (one tract_core_einsum)"""
    operands = _operand_list(operands)
    terms, out = parse_einsum(ctx, equation, operands)
    size = _sizes(terms, operands)
    dtype = result_dtype(*operands)
    operands = [cast(ctx, t, dtype) for t in operands]
    if len(operands) > 1:
        # NOTE: tract 0.23.9 gives zeros for a repeated letter next to another operand ('ii,i->i');
        # each diagonal is taken alone first ('ii->i' is right)
        for k, s in enumerate(terms):
            if len(set(s)) != len(s):
                once = "".join(dict.fromkeys(s))
                operands[k] = _tract_einsum(ctx, [operands[k]], s + "->" + once, dtype, tuple(size[c] for c in once))
                terms[k] = once
    if out:
        return _tract_einsum(ctx, operands, ",".join(terms) + "->" + out, dtype, tuple(size[c] for c in out))
    # NOTE: tract 0.23.9 returns its input unchanged for a full reduction ('ij->'): keep one letter, then sum it
    keep = next((c for t in terms for c in t), None)
    if keep is None:
        ctx.fail(f"einsum '{equation}' of scalars only: multiply them instead")
    y = _tract_einsum(ctx, operands, ",".join(terms) + "->" + keep, dtype, (size[keep],))
    y = ctx.op("sum_reduce", y, axes=[0], out_shape=(1,), out_dtype=dtype)
    return ctx.op("squeeze", y, axes=[0], out_shape=(), out_dtype=dtype)


def _tract_einsum(ctx: EmitContext, operands: list, expr: str, dtype: DType, shape: tuple) -> Value:
    operands = weights_product_operands(ctx, *operands)  # (einsum_tract: tract only)
    return ctx.op("tract_core_einsum", operands, expr=expr, acc=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=shape)
