"""Small building blocks shared by converters (ranks, axes, broadcasting, casts, constants)."""
from __future__ import annotations

import itertools

from typing import Optional, Sequence

import numpy as np

from ..errors import EmitError
from ..ir import DType, ReshapedData, SymDim, Value
from .context import TRACT_DATUM, EmitContext


def rank(v: Value) -> int:
    if v.shape is None:
        raise EmitError(f"rank of '{v.name}' is unknown here")
    return len(v.shape)


def axis(dim: int, r: int) -> int:
    """A non-negative axis for ``dim`` on a tensor of rank ``r``."""
    if isinstance(dim, SymDim):
        raise EmitError(f"axis {dim} must not depend on a dynamic size")
    if not -max(r, 1) <= dim < max(r, 1):
        raise EmitError(f"axis {dim} out of range for rank {r}")
    return dim % max(r, 1)


def axes(dims, r: int) -> list:
    if dims is None:
        return list(range(r))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(axis(d, r) for d in dims)


def unsqueeze_to(ctx: EmitContext, v: Value, r: int) -> Value:
    """Add leading unit axes so that ``v`` has rank ``r`` (NNEF pads trailing axes otherwise)."""
    vr = rank(v)
    if vr >= r:
        return v
    shape = (1,) * (r - vr) + tuple(v.shape)
    if v.is_constant and v.source.stored_format is None:
        return reshaped_const(ctx, v, shape)
    return ctx.op("unsqueeze", v, axes=list(range(r - vr)), out_shape=shape, out_dtype=v.dtype)


def reshaped_const(ctx: EmitContext, v: Value, shape, dtype: Optional[DType] = None) -> Value:
    """The constant ``v`` under another ``shape`` (same size), as a new constant of ``dtype``
    (default: its own). Its data is read from ``v``'s when written (a bfloat16 weight made a
    float32 copy here before); a changed dtype converts it now."""
    shape = tuple(int(d) for d in shape)
    if dtype in (None, v.dtype) and v.source.dtype is v.dtype:
        return ctx.const(ReshapedData(v.source, shape), v.dtype, name=v.name)
    return ctx.const(v.data.reshape(shape), dtype or v.dtype, name=v.name)


def scalar_operand(ctx: EmitContext, x, dtype: DType):
    """A Python number as an operand of a ``dtype`` tensor op.

    Float literals adapt to f16/f32 in tract; integer and bool literals would become TDim or
    the wrong type, so those become typed constants.
    """
    if isinstance(x, Value):
        return x
    if isinstance(x, SymDim):  # a dynamic size used as a number: a 1-element tensor [S]
        v = dim_value(ctx, x, dtype)
        out = ctx.node.outputs[0] if ctx.node is not None and ctx.node.outputs else None
        if out is not None and out.shape == ():  # a 0-d result (``t0d < x.size(0)``) stays 0-d
            v = ctx.op("squeeze", v, axes=[0], out_shape=(), out_dtype=dtype)
        return v
    if dtype.is_float and not isinstance(x, bool):
        return float(x)
    if dtype.is_int and isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        # wraps as torch does (``u8_tensor + 300`` adds 44); numpy refuses an out-of-range int
        return ctx.const(np.array(int(x), dtype=np.int64).astype(dtype.numpy_name), dtype)
    return ctx.const(np.array(x, dtype=dtype.numpy_name), dtype)


def dim_value(ctx: EmitContext, d, dtype: DType) -> Value:
    """The 1-element tensor ``[d]`` of a size ``d`` (an int or a :class:`SymDim`): the range
    ``(d, d+1)``; for tract (``sizes_as_range_shapes``), a size holding a floor division and never negative in the export's
    range is the shape of the range ``(0, d)`` instead.

    NOTE: tract 0.23.9 simplifies ``((2*T+2)/3)+1`` minus ``(2*T+2)/3`` to
    ``1+(2*T+1)/3-(2*T+2)/3`` (also ``(3*T+3)/5``, ``(2*T+2)/7``; not ``(2*T+4)/3`` nor
    ``(2*T+2)/4``), so that the range ``(d, d+1)`` is not known to have one item and a squeeze or
    broadcast of it is refused when the asset loads. Computing ``d`` from ``T`` with integer ops
    instead hung tract's load (after a ceil-mode pooling and a resize by 1.5)."""
    if not isinstance(d, SymDim):
        return ctx.const([d], dtype)
    if d.symbols & ctx.data_counts:
        return _counted_value(ctx, d, dtype)
    from ..ir.dims import _DIV_ATOMS

    if ctx.profile.sizes_as_range_shapes and any(s in _DIV_ATOMS for s in d.symbols) and negative_at(ctx, d) is None:
        items = ctx.call("nnef.range", 0, d, 1, DType.I64, (d,))
        shape = ctx.op("tract_core_shape_of", items, out_dtype=DType.I64, out_shape=(1,))
        # the shape is of tract's size type: cast, also to int64
        return ctx.op("tract_core_cast", shape, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=(1,))
    return ctx.call("nnef.range", d, d + 1, 1, dtype, (1,))


def _counted_value(ctx: EmitContext, d: SymDim, dtype: DType) -> Value:
    """``[d]`` for a size reading counts made from data: tract knows such a count's value only from
    the tensor that has it as a size (a range of it is refused at run time, "Undetermined symbol"),
    so each monomial is a product of those sizes (``ctx.count_values``) and of the input sizes."""
    total = None
    for monomial, coef in d.terms.items():
        term = ctx.const([coef], dtype)
        for s in monomial:
            if s in ctx.data_counts:
                if s not in ctx.count_values:
                    raise EmitError(f"the count {s} is read before the op that makes it")
                factor = ctx.count_values[s]
                if factor.dtype != dtype:
                    factor = ctx.op("tract_core_cast", factor, to=TRACT_DATUM[dtype], out_dtype=dtype, out_shape=(1,))
            elif any(c in s for c in "(/"):
                raise EmitError(f"a size combining the count read from data with a division ({d}) is not supported")
            else:
                factor = dim_value(ctx, SymDim.symbol(s), dtype)
            term = ctx.op("mul", term, factor, out_dtype=dtype, out_shape=(1,))
        total = term if total is None else ctx.op("add", total, term, out_dtype=dtype, out_shape=(1,))
    return total


def broadcast_operands(ctx: EmitContext, a, b, dtype: Optional[DType] = None):
    """Make two operands of an elementwise op compatible under NNEF's broadcasting rules."""
    ta, tb = isinstance(a, Value), isinstance(b, Value)
    if dtype is None:
        dtype = a.dtype if ta else b.dtype if tb else DType.F32
    a = scalar_operand(ctx, a, dtype)
    b = scalar_operand(ctx, b, dtype)
    if isinstance(a, Value) and isinstance(b, Value):
        known = [v.rank for v in (a, b) if v.shape is not None]
        node_out = ctx.node.outputs[0] if ctx.node is not None and ctx.node.outputs else None
        if len(known) < 2 and node_out is not None and node_out.shape is not None:
            known.append(node_out.rank)  # an operand of unknown rank is taken at the result's rank
        if known:
            r = max(known)
            a = unsqueeze_to(ctx, a, r) if a.shape is not None else a
            b = unsqueeze_to(ctx, b, r) if b.shape is not None else b
    return a, b


def cast(ctx: EmitContext, v, dtype: DType, shape=None):
    """``v`` converted to ``dtype`` (no op when it already has it)."""
    if not isinstance(v, Value):
        return scalar_operand(ctx, v, dtype)
    if v.dtype is dtype:
        return v
    if v.is_constant:
        return ctx.const(v.data.astype(dtype.numpy_name), dtype, name=v.name)
    return ctx.call("nnef.cast", v, dtype, shape if shape is not None else v.shape)


def dims_list(sizes: Sequence) -> list:
    """Sizes as an NNEF integer array (ints or symbolic expressions)."""
    out = []
    for s in sizes:
        if isinstance(s, Value):
            raise EmitError("a size computed from tensor data cannot be used as a shape")
        if isinstance(s, (int, np.integer)):
            out.append(int(s))
        elif isinstance(s, SymDim):
            out.append(s)
        else:
            raise EmitError(f"size {s!r} cannot be written in NNEF")
    return out


_FLOAT_ORDER = (DType.F16, DType.BF16, DType.F32, DType.F64)
_SIGNED_ORDER = (DType.I8, DType.I16, DType.I32, DType.I64)


def promote_types(a: Optional[DType], b: Optional[DType]) -> Optional[DType]:
    """torch.promote_types on two dtypes (None stands for no operand): bool gives way to any
    type, integers to floats; u8 with i8 needs i16 (neither holds the other's range), u8 with a
    wider signed type is that type; f16 with bf16 is f32."""
    if a is None or a is b:
        return b
    if b is None:
        return a
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if {a, b} == {DType.F16, DType.BF16}:
            return DType.F32
        return max(a, b, key=_FLOAT_ORDER.index)
    if DType.U8 in (a, b):
        other = b if a is DType.U8 else a
        return DType.I16 if other is DType.I8 else other
    return max(a, b, key=_SIGNED_ORDER.index)


def _combine_categories(higher: Optional[DType], lower: Optional[DType]) -> Optional[DType]:
    """torch's ``combine_categories``: the operands of a higher priority class (dimensioned
    tensors over 0-d tensors over Python numbers) decide the dtype unless the lower class is of a
    higher category (bool < integer < float), or the higher class is bool."""
    if higher is None:
        return lower
    if lower is None or higher.is_float:
        return higher
    if higher.is_bool or lower.is_float:
        return promote_types(higher, lower)
    return higher


def result_dtype(*xs) -> DType:
    """torch's type promotion (``torch.result_type``) on Values and Python numbers.

    Three classes, each promoted within itself with ``promote_types``: tensors with dimensions,
    0-d tensors and Python numbers (a bool is bool, an int or a symbolic size i64, a float the
    default f32). A lower class changes the result only when its category is higher
    (``u8_tensor + 300`` stays u8, ``i8_tensor + 1.5`` is f32) or the higher one is bool
    (``bool_tensor + 1`` is i64)."""
    dims = zero = wrapped = None
    for x in xs:
        if isinstance(x, Value):
            if x.dtype is None:
                continue
            if x.rank == 0:
                zero = promote_types(zero, x.dtype)
            else:  # an unknown rank counts as dimensioned
                dims = promote_types(dims, x.dtype)
        elif isinstance(x, (bool, np.bool_)):
            wrapped = promote_types(wrapped, DType.BOOL)
        elif isinstance(x, (int, np.integer, SymDim)):
            wrapped = promote_types(wrapped, DType.I64)
        elif isinstance(x, (float, np.floating)):
            wrapped = promote_types(wrapped, DType.F32)
    out = _combine_categories(dims, _combine_categories(zero, wrapped))
    return DType.I64 if out is None else out


def producer(ctx: EmitContext, v: Value):
    """The statement already emitted that computes ``v`` (matched by NNEF name), or None.

    Lets a converter see which op made an operand, to avoid op pairs that tract mis-evaluates.
    """
    name = ctx.names.get(id(v))
    for st in reversed(ctx.statements):
        if any(o is v or (name is not None and ctx.names.get(id(o)) == name) for o in st.outputs):
            return st
    return None


def runtime_zero(ctx: EmitContext, dtype: DType, r: int) -> Optional[Value]:
    """A zero (``false`` for bool) of shape ``[1] * r`` computed from a graph input, so that tract
    does not know its value at load time; None when the graph has no tensor input."""
    key = ("runtime_zero", dtype, r)
    if key in ctx.memo:
        return ctx.memo[key]
    sources = [v for v in (ctx.zero_sources or ctx.graph_inputs) if v.shape is not None
               and all(not isinstance(d, int) or d > 0 for d in v.shape)]
    # one never empty in the export's range: its first item; else (an axis of size 0 at some sizes
    # of the range: a slice of its first item fails there) a sum of its items, 0 when empty
    source = next((v for v in sources if all(negative_at(ctx, d - 1) is None for d in v.shape)), None)
    empty_at_times = source is None
    source = source or next(iter(sources), None)
    if source is None:
        return None
    k = len(source.shape)
    if empty_at_times:
        item = cast(ctx, source, DType.I64)
        item = ctx.op("add", item, ctx.op("neg", item, out_shape=item.shape, out_dtype=DType.I64),
                      out_shape=item.shape, out_dtype=DType.I64)
        item = ctx.op("sum_reduce", item, axes=list(range(k)), out_shape=(1,) * k, out_dtype=DType.I64)
    else:
        item = source if k == 0 else ctx.op("slice", source, axes=list(range(k)), begin=[0] * k, end=[1] * k,
                                            out_shape=(1,) * k, out_dtype=source.dtype)
    if k != r and r == 0:
        # NOTE: tract 0.23.9 fails to load a reshape to shape [] ("Concat: inputs.len() > 0")
        item = ctx.op("squeeze", item, axes=list(range(k)), out_shape=(), out_dtype=source.dtype)
    elif k != r:
        item = ctx.op("reshape", item, shape=[1] * r, out_shape=(1,) * r, out_dtype=source.dtype)
    whole = cast(ctx, item, DType.I64)  # NOTE: casting first makes a NaN input give 0 too
    # NOTE: x + (-x), not x - x: tract 0.23.9 panics ("unreachable", scan/decluttered.rs) pulling
    # out of a scan body an op that reads one scanned input twice, as x - x of a scanned piece
    negated = ctx.op("neg", whole, out_shape=(1,) * r, out_dtype=DType.I64)
    zero = ctx.op("add", whole, negated, out_shape=(1,) * r, out_dtype=DType.I64)
    if dtype.is_bool:
        zero = ctx.op("lt", zero, zero, out_shape=(1,) * r, out_dtype=DType.BOOL)
    elif dtype is not DType.I64:
        zero = cast(ctx, zero, dtype)
    ctx.memo[key] = zero
    return zero


def opaque(ctx: EmitContext, x: Value) -> Value:
    """``x`` plus a zero that tract cannot see through (``runtime_zero``).

    NOTE: tract 0.23.9 folds a tensor it knows to be uniform (a ``tile`` of a constant to a
    dynamic shape, a mask from a range) through later ops and gets shapes wrong on the way:
    an integer ``mul`` or bool ``and`` loses its broadcast (FoldUniformMask), a ``matmul`` of a
    concatenation with such a piece fails at load ("Trying to substitute a S,3,3,F32 by
    1,1,3,F32 ... EinSum"). The sum has the same values and is no longer uniform to tract.
    """
    if x.shape is None:
        return x
    zero = runtime_zero(ctx, x.dtype, len(x.shape))
    if zero is None:
        return x
    return ctx.op("or" if x.dtype.is_bool else "add", x, zero, out_dtype=x.dtype, out_shape=x.shape)


def tiled_from(ctx: EmitContext, v: Value):
    """``(source, repeats)`` when ``v`` was emitted as a ``tile`` that only broadcasts axes of size 1
    (an ``expand``), else None."""
    st = producer(ctx, v)
    if st is None or st.op != "tile" or not st.args or not isinstance(st.args[0], Value):
        return None
    reps, src = list(st.attrs.get("repeats", [])), st.args[0]
    if src.shape is None or v.shape is None or len(reps) != rank(v) or len(src.shape) != len(reps):
        return None
    if any(not (isinstance(r, int) and r == 1) and src.shape[i] != 1 for i, r in enumerate(reps)):
        return None
    return src, reps


# element-wise builders ---------------------------------------------------------------------
def broadcast_shape(*operands) -> Optional[tuple]:
    """Result shape of an elementwise op whose tensor operands already have the same rank."""
    shapes = [v.shape for v in operands if isinstance(v, Value)]
    if not shapes or any(s is None for s in shapes):
        return None
    out = list(shapes[0])
    for s in shapes[1:]:
        out = [d if o == 1 else o for o, d in zip(out, s)]
    return tuple(out)


def ew(ctx: EmitContext, op: str, a, b, out_dtype: Optional[DType] = None) -> Value:
    """Binary NNEF op ``op(a, b)`` on Values or Python numbers, broadcast as torch does.

    The operands are taken in the dtype of the first tensor (numbers follow it); the result
    has ``out_dtype`` (default: that dtype).
    """
    dtype = next(v.dtype for v in (a, b) if isinstance(v, Value))
    a, b = broadcast_operands(ctx, a, b, dtype)
    if op in ("mul", "div", "pow") and ctx.profile.opaque_sizes_in_products:
        a, b = _sizes_hidden_from_data(ctx, a, b)
    if not ctx.profile.uniform_folding:
        pass  # the folding below is tract's; its runtime zero needs a cast standard NNEF lacks
    elif op in _MASK_FOLDED and isinstance(a, Value) and isinstance(b, Value):
        if not dtype.is_float or _cast_from_exact(ctx, a) or _cast_from_exact(ctx, b):
            a2, b2 = _opaque_carrier(ctx, a, b), _opaque_carrier(ctx, b, a)
            if a2 is a and b2 is b and _both_may_fold(ctx, a, b):
                a2 = opaque(ctx, a)  # both uniform (x * 0 squared): the result keeps a's size
            a, b = a2, b2
    elif op in _MASK_FOLDED:  # a number and a tensor, which alone gives the result its size
        t = a if isinstance(a, Value) else b
        if _cast_from_exact(ctx, t) and t.shape is not None and any(not (isinstance(d, int) and d == 1) for d in t.shape):
            a, b = (opaque(ctx, a), b) if t is a else (a, opaque(ctx, b))
    return ctx.op(op, a, b, out_dtype=out_dtype or dtype, out_shape=broadcast_shape(a, b))


# NOTE: tract 0.23.9's pass FoldUniformMask replaces an operand of an integer `mul`/`div` or a bool
# `and` that it knows to be uniform (`ones_like(x)`, a `tile` of a constant, a mask built from a
# range, even `x & 0`) by a constant of shape [1, ..., 1], then folds the op away: when that operand
# alone gave the result its size on some dim, the load fails ("Trying to substitute a 2,S,I64 by
# 1,1,I64") or, on a dynamic dim, the result silently has size 1 there (`ones(S) * c`). The operand
# that gives the size is made opaque (helpers.opaque). A `tile` of the other operand does not help:
# tract drops a broadcast that feeds a binary op.
_MASK_FOLDED = ("mul", "div", "and")


def _sizes_hidden_from_data(ctx: EmitContext, a, b) -> tuple:
    """``a, b``, the operand that holds a size made opaque when the other does not.

    NOTE: tract 0.23.9 takes a factor of a product (``mul``, ``div``, ``pow``) whose value it knows
    as an expression of the sizes (a size as a tensor, ``W - 1``) for a mask, and marks the other
    factor with it as the region that matters, merging the marks of every consumer of a value
    (``a + b - a*b``) and simplifying them; the literals it shares between ops gather them all:
    RAFT's grid samples (``(W - 1) * 0.5`` at four pyramid levels) kept its load busy for more
    than 15 minutes. Hidden, the size is a number like any other."""
    sized = [isinstance(v, Value) and id(v) in ctx.size_values for v in (a, b)]
    if sized[0] == sized[1]:
        return a, b
    return (opaque(ctx, a), b) if sized[0] else (a, opaque(ctx, b))


def _cast_from_exact(ctx: EmitContext, x: Value) -> bool:
    """Whether ``x`` is an integer or bool tensor cast to float, also through float casts (an
    exact quotient is taken in f64): tract may know it is uniform (``(x & 0).float() * 0.5``
    fails to load as the integer product does)."""
    if not ctx.profile.uniform_folding:
        return False
    st = producer(ctx, x)
    while st is not None and st.op == "tract_core_cast" and st.args and isinstance(st.args[0], Value):
        if not st.args[0].dtype.is_float:
            return True
        st = producer(ctx, st.args[0])
    return False


def _both_may_fold(ctx: EmitContext, a: Value, b: Value) -> bool:
    """Whether ``a`` and ``b`` have one shape with a size other than 1 and are both computed (no
    input, no constant): tract may know both uniform and fold the op to a result of size 1."""
    if a.shape is None or a.shape != b.shape or all(isinstance(d, int) and d == 1 for d in a.shape):
        return False
    return not any(v.is_constant or any(v is i for i in ctx.graph_inputs) for v in (a, b))


def _opaque_carrier(ctx: EmitContext, x: Value, other: Value) -> Value:
    """``x``, made opaque to tract's uniform-value folding when it alone gives the result its
    size on some dim (``other`` has 1 there)."""
    if x.is_constant or x.shape is None or other.shape is None or len(x.shape) != len(other.shape) \
            or any(x is v for v in ctx.graph_inputs):
        return x
    if not any(o == 1 and not (isinstance(d, int) and d == 1) for d, o in zip(x.shape, other.shape)
               if isinstance(o, int)):
        return x
    return opaque(ctx, x)


def compare(ctx: EmitContext, op: str, a, b) -> Value:
    """Comparison ``op`` (gt, lt, eq, ne, ...) giving a bool tensor, through the target's
    ``nnef.compare`` rule (the operands are taken in the dtype of the first tensor)."""
    dtype = next(v.dtype for v in (a, b) if isinstance(v, Value))
    return ctx.call("nnef.compare", op, *broadcast_operands(ctx, a, b, dtype))


def un(ctx: EmitContext, op: str, x: Value, **attrs) -> Value:
    """Unary NNEF op keeping the shape and dtype of ``x``."""
    return ctx.op(op, x, out_dtype=x.dtype, out_shape=x.shape, **attrs)


def select(ctx: EmitContext, cond: Value, a, b) -> Value:
    """``select(cond, a, b)`` with every tensor operand at the same rank."""
    dtype = next((v.dtype for v in (a, b) if isinstance(v, Value)), DType.F32)
    # NOTE: tract's select does not adapt a float literal to f16: numbers become typed constants
    a, b = (cast(ctx, v, dtype) if isinstance(v, Value) else ctx.const(np.array(v, dtype=dtype.numpy_name), dtype)
            for v in (a, b))
    r = max(rank(v) for v in (cond, a, b) if isinstance(v, Value))
    cond, a, b = (unsqueeze_to(ctx, v, r) if isinstance(v, Value) else v for v in (cond, a, b))
    return ctx.op("select", cond, a, b, out_dtype=dtype, out_shape=broadcast_shape(cond, a, b))


def to_float(ctx: EmitContext, x: Value) -> Value:
    """``x`` as a float tensor (integers and bools become f32, as torch promotes them)."""
    return x if x.dtype.is_float else cast(ctx, x, DType.F32)


def _sizes_to_try(ctx, symbol: str) -> list:
    """Sizes of ``symbol`` within the export's range where a dim's sign is worth testing: the
    smallest ones, the largest, and powers of two in between (a polynomial of the sizes keeps
    its sign past a few of them)."""
    r = ctx.ranges.get(symbol)
    lo = max(0, r.lo) if r is not None and r.lo is not None else 1  # 0 where the range says so (an empty example)
    hi = r.hi if r is not None and r.hi is not None else 1 << 30
    sizes = set(range(lo, min(hi, lo + 64) + 1)) | {hi} | {1 << k for k in range(31) if lo <= 1 << k <= hi}
    if r is not None:
        sizes = {n for n in sizes if r.contains(n)}
    return sorted(sizes)


def negative_at(ctx, d) -> Optional[dict]:
    """A size (symbol -> int) within the export's range where the dim ``d`` is negative (the
    first one past the last non-negative size tried, for one symbol), or None."""
    if not isinstance(d, SymDim):
        return {} if d < 0 else None
    symbols = sorted(d.input_symbols)
    tries = [_sizes_to_try(ctx, s) for s in symbols]
    if len(symbols) > 1:  # a grid: the extremes and a few small sizes of each
        tries = [sorted(set(t[:4] + t[-3:])) for t in tries]
    last_good = None
    domain = getattr(ctx, "domain", ())
    for values in itertools.product(*tries):
        env = dict(zip(symbols, values))
        if not all(holds(env) for holds in domain):
            continue  # beyond what the export asserts (S+P < 2048)
        if d.evaluate(env) >= 0:
            last_good = values
            continue
        if len(symbols) == 1 and last_good is not None and last_good[0] < values[0]:
            (s,), lo, hi = symbols, last_good[0], values[0]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if d.evaluate({s: mid}) >= 0 else (lo, mid)
            env = {s: hi}
        return env
    return None


def env_text(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())
