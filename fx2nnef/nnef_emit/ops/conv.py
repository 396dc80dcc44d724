"""Convolutions: conv1d/2d/3d and conv_transpose1d/2d/3d as NNEF ``conv`` / ``deconv``.

NOTE: tract's ``deconv`` reads its filter as [C_out, C_in/g, k...] while the Khronos spec (and
torch's conv_transpose weight) is [C_in, C_out/g, k...]: the tract rule reorders the filter.
tract aborts the process on a ``conv``/``deconv`` border other than 'constant': only that one
is ever written.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch

from ...errors import EmitError
from ...ir import SymDim, Value
from ..context import EmitContext
from ..helpers import producer, rank, tiled_from
from ..registry import register
from .shape import slice_axes
from .tiled_operands import merged_tile_made_opaque


def ntuple(v, n: int, what: str, sizes: bool = False) -> list:
    """An int or a sequence as a list of ``n`` ints (torch's ``_ntuple``); with ``sizes``, items may
    also be sizes computed from the dynamic ones (SymDim)."""
    kinds = (int, SymDim) if sizes else int
    items = [v] * n if isinstance(v, kinds) else list(v)
    if len(items) == 1 and n > 1:
        items = items * n
    if len(items) != n or not all(isinstance(i, kinds) for i in items):
        raise EmitError(f"{what} must be an int or {n} ints, got {v!r}")
    return items


def node_shape(ctx: EmitContext, lead: int = 0) -> Optional[tuple]:
    """The traced result's shape, with ``lead`` unit axes in front (for an added batch axis)."""
    outs = ctx.node.outputs if ctx.node is not None else []
    if not outs or outs[0].shape is None:
        return None
    return (1,) * lead + tuple(outs[0].shape)


def add_batch(ctx: EmitContext, x: Value, n_spatial: int) -> tuple:
    """``(x, unbatched)``: an unbatched input (rank n+1) gets a leading unit axis."""
    if rank(x) == n_spatial + 2:
        return x, False
    if rank(x) != n_spatial + 1:
        raise EmitError(f"expected a tensor of rank {n_spatial + 1} or {n_spatial + 2}, got shape {list(x.shape)}")
    return ctx.op("unsqueeze", x, axes=[0], out_shape=(1,) + tuple(x.shape)), True


def drop_batch(ctx: EmitContext, y: Value, unbatched: bool) -> Value:
    """Undo :func:`add_batch` on a result."""
    if not unbatched:
        return y
    return ctx.op("squeeze", y, axes=[0], out_shape=node_shape(ctx))


def conv_padding(padding, kernel: Sequence[int], dilation: Sequence[int], stride: Sequence[int]) -> list:
    """torch's conv ``padding`` (int, ints, 'same', 'valid') as NNEF (before, after) pairs."""
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise EmitError("padding='same' needs stride 1 (as in torch)")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in totals]
    return [(p, p) for p in ntuple(padding, n, "padding")]


def bias_operand(ctx: EmitContext, bias: Optional[Value]):
    """NNEF conv bias: a [1, C] tensor, or 0.0 when there is none."""
    if bias is None:
        return 0.0
    if bias.is_constant:
        return ctx.const(bias.data.reshape(1, -1), bias.dtype, name=bias.name)
    return ctx.op("unsqueeze", bias, axes=[0], out_shape=(1,) + tuple(bias.shape))


def kernel_of(weight: Value) -> list:
    if weight.shape is None or not all(isinstance(k, int) for k in weight.shape[2:]):
        raise EmitError("the convolution weight must have a static shape")
    return list(weight.shape[2:])


@register(torch.conv1d, torch.conv2d, torch.conv3d)
def conv(ctx: EmitContext, input: Value, weight: Value, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1, SymInt groups=1) -> Tensor

    conv1d and conv3d alike; the number of spatial axes is the weight's rank - 2.
    """
    kernel = kernel_of(weight)
    n = len(kernel)
    x, unbatched = add_batch(ctx, input, n)
    stride, dilation = ntuple(stride, n, "stride"), ntuple(dilation, n, "dilation")
    pads = conv_padding(padding, kernel, dilation, stride)
    out_shape = node_shape(ctx, int(unbatched))
    if ctx.profile.strides_without_downsample and x.shape is not None and _below_reshape_or_broadcast(ctx, x):
        # NOTE: tract 0.23.9 makes the stride of a kernel-1 axis a Downsample, which it fails to pull
        # over a reshape above it ("Pulling Downsample over Reshape: Invalid axis", x.roll(1) then
        # a strided 1x1 conv, also with elementwise ops between: clamp) or over a broadcast on
        # dynamic sizes ("Trying to substitute a T,4,S,2,F32 by T,4,S,3,F32": c.expand(...) * x then
        # the conv; fuzz seed 9175): below either, those items are taken by slice_axes (no Downsample)
        picked = [(2 + i, 0, x.shape[2 + i], s) for i, (k, s, p) in enumerate(zip(kernel, stride, pads))
                  if k == 1 and s > 1 and tuple(p) == (0, 0)]
        if picked:
            x = slice_axes(ctx, x, picked)
            sliced = {r[0] for r in picked}
            stride = [1 if 2 + i in sliced else s for i, s in enumerate(stride)]
    if ctx.profile.opaque_tiles_in_products:  # computed filters too: a 1x1 convolution is an EinSum in tract
        x = merged_tile_made_opaque(ctx, x)
    # NOTE: tract 0.23.9 lowers a 1x1 conv as a matmul and mis-handles a batch made by a `tile`
    # (see linalg._untiled_matmul): the conv of the untiled batch, tiled afterwards, is the same
    found = tiled_from(ctx, x) if not unbatched else None
    if found is not None and [i for i, r in enumerate(found[1]) if not (isinstance(r, int) and r == 1)] == [0]:
        src, reps = found
        one = (1,) + tuple(out_shape[1:]) if out_shape is not None else None
        y = ctx.op("conv", src, weight, bias_operand(ctx, bias), border="constant", padding=pads, stride=stride,
                   dilation=dilation, groups=groups, out_shape=one)
        return ctx.op("tile", y, repeats=[reps[0]] + [1] * (rank(y) - 1), out_shape=out_shape, out_dtype=y.dtype)
    y = ctx.op("conv", x, weight, bias_operand(ctx, bias), border="constant", padding=pads, stride=stride,
               dilation=dilation, groups=groups, out_shape=out_shape)
    return drop_batch(ctx, y, unbatched)


# ops that tract pulls a Downsample over, on the way to a reshape above them: elementwise ops and
# a transpose
_PULLED_THROUGH = {"min", "max", "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "tanh", "sigmoid", "relu",
                "select", "copy", "tract_core_cast", "pow", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "round",
                "transpose"}


def _below_reshape_or_broadcast(ctx: EmitContext, x: Value) -> bool:
    """Whether ``x`` is a reshape's, a broadcast's (``tile``), a matmul's or a 1x1 conv's result,
    directly or through elementwise ops and transposes of its rank (any operand): where tract would
    pull a strided 1x1 conv's Downsample to (a 1x1 conv, then a strided one: fuzz seed 24000)."""
    seen, todo = set(), [x]
    while todo and len(seen) < 32:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        st = producer(ctx, v)
        if st is None:
            continue
        if st.op in ("reshape", "tile", "matmul", "linear"):
            return True  # a matmul is an EinSum in tract, and a reshape of its output (fuzz seed 13360)
        if st.op == "conv" and len(st.args) > 1 and isinstance(st.args[1], Value) and st.args[1].shape is not None \
                and all(isinstance(k, int) and k == 1 for k in st.args[1].shape[2:]):
            return True  # tract makes a 1x1 conv an EinSum over the merged spatial axes, then a reshape
        if st.op in _PULLED_THROUGH:
            todo.extend(a for a in st.args if isinstance(a, Value) and a.shape is not None and len(a.shape) == len(x.shape))
    return False


@dataclasses.dataclass
class Transposed:
    """torch's options of a transposed convolution (conv_transpose2d's arguments after the bias)."""
    stride: object = 1
    padding: object = 0
    output_padding: object = 0
    groups: int = 1
    dilation: object = 1


def _deconv(ctx: EmitContext, input: Value, filter: Value, bias, opts: Transposed, n: int) -> Value:
    """NNEF deconv; ``output_padding`` becomes a smaller (possibly negative) padding after the data.

    NOTE: the nnef_tools interpreter fills the positions that a negative padding adds with 0
    instead of the bias, so in that case the bias is added after the deconv.
    """
    x, unbatched = add_batch(ctx, input, n)
    stride, dilation = ntuple(opts.stride, n, "stride"), ntuple(opts.dilation, n, "dilation")
    extra = ntuple(opts.output_padding, n, "output_padding", sizes=True)
    shape = node_shape(ctx, int(unbatched))
    # an output padding that follows the sizes (ConvTranspose2d(..., output_size=skip.shape[-2:]), a
    # U-Net's decoder: (H + 1) % 2 rows after a stride-2 conv) is the largest torch allows, then the
    # rows past the traced output size are cut: the rows before them do not depend on it
    cut = [i for i, e in enumerate(extra) if not isinstance(e, int)]
    if cut and shape is None:
        ctx.fail("a transposed convolution whose output padding follows a dynamic size needs its output shape")
    extra = [max(s, d) - 1 if i in cut else e for i, (e, s, d) in enumerate(zip(extra, stride, dilation))]
    pads = [(p, p - e) for p, e in zip(ntuple(opts.padding, n, "padding"), extra)]
    late_bias = bias is not None and any(after < 0 for _, after in pads)
    full = shape if not cut else tuple(None if i - 2 in cut else d for i, d in enumerate(shape))
    y = ctx.op("deconv", x, filter, 0.0 if late_bias else bias_operand(ctx, bias), border="constant", padding=pads,
               stride=stride, dilation=dilation, groups=opts.groups, out_shape=full)
    if late_bias:
        y = ctx.op("add", y, channel_bias(ctx, bias, n), out_shape=full)
    if cut:
        y = slice_axes(ctx, y, [(2 + i, 0, shape[2 + i], 1) for i in cut])
    return drop_batch(ctx, y, unbatched)


def channel_bias(ctx: EmitContext, bias: Value, n: int) -> Value:
    """A [C] bias as [1, C, 1, ...] to add to an (N, C, spatial...) tensor."""
    shape = (1, bias.shape[0]) + (1,) * n
    if bias.is_constant:
        return ctx.const(bias.data.reshape(shape), bias.dtype, name=bias.name)
    return ctx.op("unsqueeze", bias, axes=[0] + list(range(2, n + 2)), out_shape=shape)


TRANSPOSED = (torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d)


@register(*TRANSPOSED)
def conv_transpose(ctx: EmitContext, input: Value, weight: Value, bias=None, stride=1, padding=0, output_padding=0,
                   groups=1, dilation=1):
    """conv_transpose2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] output_padding=0, SymInt groups=1, SymInt[2] dilation=1) -> Tensor

    conv_transpose1d and conv_transpose3d alike; the filter keeps torch's (= Khronos') layout.
    """
    opts = Transposed(stride, padding, output_padding, groups, dilation)
    return _deconv(ctx, input, weight, bias, opts, len(kernel_of(weight)))


