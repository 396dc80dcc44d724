"""Values laid on a grid: tril_indices / triu_indices (of a dynamic size too) and logspace."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, dim_value, ew, un
from ..registry import register
from .arith import _add, _cmp, _const, _mul, _sub, _where


# ---- tril_indices / triu_indices of a dynamic size, logspace ----------------------------------------------------------
def _i64(ctx: EmitContext, v: int) -> Value:
    return ctx.const(np.array(v, dtype=np.int64), DType.I64)


def _size_tensor(ctx: EmitContext, d) -> Value:
    """A dynamic size (or int) as a one-item i64 tensor."""
    return dim_value(ctx, d, DType.I64)


def _tril_square(ctx: EmitContext, n, offset: int, what: str, user_offset: int):
    """(rows, cols, count) of ``tril_indices(n, n, offset)`` for a dynamic size ``n`` and ``offset <= 0``:
    the rows holding items, from row ``-offset`` on, hold 1, 2, 3, ... items, so item ``k`` is in row
    ``-offset + j`` with ``j = floor((sqrt(8k + 1) - 1) / 2)`` (computed in float32, then corrected by
    one either way with exact integer tests), at column ``k - j (j + 1) / 2``.

    NOTE: an offset above the diagonal adds full rows after the triangle; the select between the two
    parts made tract 0.23.9 hang at load (minutes, in its optimisation of the graph), so those
    offsets are refused."""
    from ...ir import SymDim, simplify
    from ..helpers import negative_at

    if offset > 0:
        ctx.fail(f"{what} with offset {user_offset} of a dynamic size {n} is not lowered (only offsets on or "
                 f"{'below' if what == 'tril_indices' else 'above'} the diagonal: the extra full rows hang tract "
                 "0.23.9 at load); make the size static or build the indices from a mask")
    nt = simplify(n + offset)  # rows holding items
    bad = negative_at(ctx, nt)
    if bad is not None:
        ctx.fail(f"{what} with offset {user_offset} of a dynamic size {n}: the count of indices is a different "
                 f"formula below {n} = {-offset} (at {bad}); give the dims a range that excludes those sizes")
    count = SymDim.floordiv(nt * (nt + 1), 2) if isinstance(nt, SymDim) else nt * (nt + 1) // 2
    k = ctx.call("nnef.range", 0, count, 1, DType.I64, (count,))
    kf = cast(ctx, k, DType.F32)
    jf = un(ctx, "floor", _mul(ctx, _sub(ctx, un(ctx, "sqrt", _add(ctx, _mul(ctx, kf, 8.0), 1.0)), 1.0), 0.5))
    j = cast(ctx, jf, DType.I64)
    one = _i64(ctx, 1)

    def start(jj):  # first item of row jj: jj (jj + 1) / 2
        return ctx.op("div", _mul(ctx, jj, _add(ctx, jj, one)), _i64(ctx, 2), out_dtype=DType.I64, out_shape=jj.shape)

    j = _where(ctx, _cmp(ctx, "gt", start(j), k), _sub(ctx, j, one), j)
    j = _where(ctx, _cmp(ctx, "le", start(_add(ctx, j, one)), k), _add(ctx, j, one), j)
    rows = _add(ctx, j, _i64(ctx, -offset)) if offset else j
    cols = _sub(ctx, k, start(j))
    return rows, cols, count


def _tri_indices(ctx: EmitContext, row, col, offset, dtype, upper: bool):
    from ...ir import SymDim
    from .shape import reshape_to

    what = "triu_indices" if upper else "tril_indices"
    if isinstance(offset, (Value, SymDim)):
        ctx.fail(f"{what} with an offset that is not a Python int is not supported")
    if dtype is not None and dtype not in (DType.I64, DType.I32):
        ctx.fail(f"{what}: dtype must be int32 or int64 (torch refuses others too)")
    if not (isinstance(row, SymDim) and isinstance(col, SymDim) and row == col):
        ctx.fail(f"{what}({row}, {col}) of a dynamic size is only lowered for a square shape (the same size for "
                 "rows and columns); the count of indices of a rectangle of dynamic sizes is not a polynomial")
    n, offset = row, int(offset)
    if upper:
        # triu(n, n, o) read backwards is tril(n, n, -o) turned by 180 degrees: item k is n - 1 minus
        # the item count - 1 - k of the lower one
        rows, cols, count = _tril_square(ctx, n, -offset, what, offset)
        last = _size_tensor(ctx, n - 1)
        pair = [_sub(ctx, last, v) for v in (rows, cols)]
        pair = [ctx.call("torch.flip", v, [0]) for v in pair]
    else:
        rows, cols, count = _tril_square(ctx, n, offset, what, offset)
        pair = [rows, cols]
    pair = [reshape_to(ctx, v, [1, count]) for v in pair]
    out = ctx.op("concat", pair, axis=0, out_shape=(2, count), out_dtype=DType.I64)
    return cast(ctx, out, dtype) if dtype is DType.I32 else out


@register(torch.tril_indices)
def tril_indices(ctx: EmitContext, row, col, offset=0, *, dtype: Optional[DType] = None, layout=None, device=None,
                 pin_memory=False):
    """tril_indices(int row, int col, int offset=0, *, ScalarType? dtype=long, ...) -> Tensor

    Of a dynamic square size (static sizes are folded by the tracer): the ``[2, count]`` row and
    column indices computed from the item's position (a closed form, see ``_tril_square``)."""
    return _tri_indices(ctx, row, col, offset, dtype, upper=False)


@register(torch.triu_indices)
def triu_indices(ctx: EmitContext, row, col, offset=0, *, dtype: Optional[DType] = None, layout=None, device=None,
                 pin_memory=False):
    """triu_indices(int row, int col, int offset=0, *, ScalarType? dtype=long, ...) -> Tensor

    Of a dynamic square size: the lower triangle's indices of offset ``-offset``, read backwards
    and turned by 180 degrees."""
    return _tri_indices(ctx, row, col, offset, dtype, upper=True)


@register(torch.logspace)
def logspace(ctx: EmitContext, start, end, steps, base: float = 10.0, *, out=None, dtype: Optional[DType] = None,
             layout=None, device=None, pin_memory=False, requires_grad=False):
    """logspace(Scalar start, Scalar end, int steps, float base=10.0, *, ScalarType? dtype=None, ...) -> Tensor

    ``base ** linspace(start, end, steps)`` (the exponents computed as torch does, from the start for
    the first half and from the end for the second); ``steps`` may be a dynamic size."""
    if any(isinstance(v, Value) for v in (start, end, base)):
        ctx.fail("torch.logspace with bounds or base read from tensor data is not supported; use Python numbers")
    dtype = dtype or DType.F32
    if not dtype.is_float:
        ctx.fail("torch.logspace with an integer dtype is not supported; compute it in float and convert")

    exps = ctx.call("torch.linspace", start, end, steps)
    y = ew(ctx, "pow", _const(ctx, float(base), DType.F32), exps)
    # NOTE: linspace's converter gives ``end`` for one step where torch gives ``start``; logspace of
    # one step is base ** start, as in torch
    one = _cmp(ctx, "eq", cast(ctx, dim_value(ctx, steps, DType.I64), DType.F32), 1.0)
    y = _where(ctx, one, float(np.float32(float(base) ** float(start))), y)
    return cast(ctx, y, dtype) if dtype is not DType.F32 else y
