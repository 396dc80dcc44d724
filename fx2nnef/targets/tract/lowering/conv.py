"""tract's overrides of the conv converters (the common rules: ``fx2nnef.nnef_emit.ops.conv``)."""
from __future__ import annotations

from fx2nnef.ir import Value
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.ops.conv import TRANSPOSED, Transposed, _deconv, kernel_of
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


def tract_deconv_filter(ctx: EmitContext, weight: Value, groups: int) -> Value:
    """torch's [C_in, C_out/g, k...] weight in tract's deconv layout [C_out, C_in/g, k...]."""
    c_in, c_out_g, *k = [weight.shape[0], weight.shape[1], *kernel_of(weight)]
    grouped = (groups, c_in // groups, c_out_g, *k)
    swap = [0, 2, 1] + list(range(3, len(grouped)))
    final = (groups * c_out_g, c_in // groups, *k)
    if weight.is_constant:
        data = weight.data.reshape(grouped).transpose(swap).reshape(final)
        return ctx.const(data, weight.dtype, name=weight.name)
    w = ctx.op("reshape", weight, shape=list(grouped), out_shape=grouped)
    w = ctx.op("transpose", w, axes=swap, out_shape=tuple(grouped[i] for i in swap))
    return ctx.op("reshape", w, shape=list(final), out_shape=final)


@register(*TRANSPOSED, target=TRACT)
def conv_transpose_tract(ctx: EmitContext, input: Value, weight: Value, bias=None, stride=1, padding=0,
                         output_padding=0, groups=1, dilation=1):
    """conv_transpose2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] output_padding=0, SymInt groups=1, SymInt[2] dilation=1) -> Tensor"""
    filter = tract_deconv_filter(ctx, weight, groups)
    opts = Transposed(stride, padding, output_padding, groups, dilation)
    return _deconv(ctx, input, filter, bias, opts, len(kernel_of(weight)))
