"""Operands of products (matmul, einsum, convolution) made opaque where tract would fold a
broadcast (a ``tile``) into the product and get its shape or its sum wrong: each function below
says which pattern (the runtime zero of ``helpers.opaque`` hides it)."""
from __future__ import annotations

from ...ir import Value
from ..context import EmitContext
from ..helpers import opaque, producer, tiled_from


def contraction_tile_made_opaque(ctx: EmitContext, v: Value, ax: int) -> Value:
    """NOTE: tract 0.23.9 folds a ``tile`` that broadcasts the contracted axis of a matmul (directly
    or under a transpose) into the EinSum and then sums over one item, not all of them:
    ``y.expand(3, -1).mT @ y.expand(3, -1)`` came out a third of torch's, silently. A runtime
    zero added to the operand hides the broadcast."""
    st = producer(ctx, v)
    perm = None
    if st is not None and st.op == "transpose" and st.args and isinstance(st.args[0], Value):
        perm = list(st.attrs.get("axes", []))
        inner = st.args[0]
    else:
        inner = v
    found = tiled_from(ctx, inner)
    if found is None:
        return v
    _, reps = found
    src_ax = perm[ax] if perm is not None and ax < len(perm) else ax
    if src_ax < len(reps) and not (isinstance(reps[src_ax], int) and reps[src_ax] == 1):
        return opaque(ctx, v)
    return v


# NNEF ops computed item by item, and moves of axes: a broadcast (a ``tile`` of size-1 axes) stays one through them
_ITEMWISE = frozenset({
    "neg", "exp", "log", "sin", "cos", "tan", "abs", "sign", "tanh", "sigmoid", "sqrt", "rsqrt", "floor", "ceil",
    "round", "not", "recip", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "tract_core_erf",
    "tract_core_cast", "add", "sub", "mul", "div", "pow", "min", "max", "select", "and", "or", "lt", "gt", "le",
    "ge", "eq", "ne", "relu", "elu", "leaky_relu", "softplus", "clamp", "copy", "exp2", "log2", "square",
    "transpose", "unsqueeze", "squeeze",
})


def itemwise_of_tile_made_opaque(ctx: EmitContext, v: Value, depth: int = 6) -> Value:
    """NOTE: tract 0.23.9 also sees a broadcast through item-wise ops: a matmul operand computed
    from an ``expand`` by unary ops (``(-x.expand(B, -1, -1)) @ w``, an exp, a cast, a GELU) is
    taken as a tile and mis-handled as in ``linalg._untiled_matmul``: a load failure ("Trying to
    substitute a 3,T,4,F32 by 1,T,4,F32") with a static count, and silently size 1 on that axis
    with a dynamic one. A runtime zero added to the operand hides the broadcast."""
    frontier, seen = [v], set()
    for _ in range(depth):
        nxt = []
        for u in frontier:
            st = producer(ctx, u)
            if st is None or id(st) in seen:
                continue
            seen.add(id(st))
            if u is not v and st.op == "tile" and tiled_from(ctx, u) is not None:
                return opaque(ctx, v)
            if st.op in _ITEMWISE:
                nxt += [a for a in st.args if isinstance(a, Value) and not a.is_constant]
        frontier = nxt
    return v


_AXIS_MOVES = frozenset({"reshape", "transpose", "unsqueeze", "squeeze"})


def weights_product_operands(ctx: EmitContext, *operands: Value) -> list:
    """The operands of a product (a matmul, an einsum, a convolution), each made opaque by
    :func:`merged_tile_made_opaque` when the target asks for it (``opaque_tiles_in_products``)
    and one operand is a constant (the weights); as given otherwise."""
    if not ctx.profile.opaque_tiles_in_products or not any(v.is_constant for v in operands):
        return list(operands)
    return [merged_tile_made_opaque(ctx, v) for v in operands]


def merged_tile_made_opaque(ctx: EmitContext, v: Value) -> Value:
    """NOTE: tract 0.23.9 fails to load an EinSum with weights (a linear layer, a 1x1 convolution)
    whose operand is a ``tile`` broadcasting a size-1 axis that a reshape then merges with its
    neighbour ("Trying to substitute a 1,2,2,5,2,F32 by 1,2,1,5,1,F32" while decluttering): a
    nearest upsampling (or ``x[:, :, :, None].expand(...).reshape(...)``) followed by a 1x1
    convolution, as in a UNet decoder or an FPN. A runtime zero added to the operand hides the
    broadcast. (A product of two computed operands, GQA's repeated keys, loads: it is left alone,
    since the add would cost a pass over the repeated cache at every step.)"""
    if v.is_constant or v.shape is None:
        return v
    st = producer(ctx, v)
    merged = False
    for _ in range(4):  # through reshapes and moves of axes, as tract's declutter sees through them
        if st is None or st.op not in _AXIS_MOVES or not st.args or not isinstance(st.args[0], Value):
            break
        merged = merged or st.op == "reshape"
        if tiled_from(ctx, st.args[0]) is not None:
            return opaque(ctx, v) if merged else v
        st = producer(ctx, st.args[0])
    return v


def concat_of_tile_made_opaque(ctx: EmitContext, v: Value) -> Value:
    """NOTE: tract 0.23.9 splits a matmul of a concatenation along the contracted axis into one
    product per piece, and one whose piece is a ``tile`` broadcasting a size-1 axis (DPT's readout,
    ``cat([x, cls.expand_as(x)], -1)`` then a linear) gets its shape wrong at load ("Trying to
    substitute a B,6,4,F32 by B,1,4,F32 ... concat-einsum"). It sees the concatenation through
    moves of axes too (PatchTSMixer's scale injection: a rank-4 concatenation flattened to a matrix
    for the linear). A runtime zero added to the operand hides the pieces."""
    st = producer(ctx, v)
    for _ in range(4):  # through reshapes and moves of axes, as tract's declutter sees through them
        if st is None or st.op not in _AXIS_MOVES or not st.args or not isinstance(st.args[0], Value):
            break
        st = producer(ctx, st.args[0])
    if st is None or st.op != "concat" or not st.args or not isinstance(st.args[0], (list, tuple)):
        return v
    if any(isinstance(p, Value) and tiled_from(ctx, p) is not None for p in st.args[0]):
        return opaque(ctx, v)
    return v
