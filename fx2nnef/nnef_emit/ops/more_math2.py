"""More special functions and linear algebra found missing by an op survey: the modified Bessel
functions I0, I1 (and their exponentially scaled forms) and the Kaiser window built on them.

Special functions are built from elementary NNEF ops: a power series with exact coefficients
where it converges fast, and polynomials fitted here (Chebyshev least squares on float64
references, converted to the power basis and evaluated by Horner's rule in float32) elsewhere.
The accuracy quoted on each function was measured in float32 against float64 references over
the whole float32 range. Half precision inputs are computed in float32 and cast back.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from ...ir import DType, Value
from ..context import EmitContext
from ..helpers import cast, dim_value, ew, un
from ..registry import register
from .more_math import _add, _and, _cmp, _const, _div, _horner, _mul, _or, _sub, _where, _work


# ---- modified Bessel functions I0, I1 ---------------------------------------------------------------------------------
# |x| <= 8: the power series in t = x^2, I0 = sum t^k / (4^k k!^2), I1 = x sum t^k / (2 4^k k! (k+1)!), 14 terms
# (all positive: no cancellation; relative error below 3e-7 in float32).
# |x| > 8: sqrt(|x|) exp(-|x|) I(|x|) is a polynomial of u = 8 / |x| in [0, 1) (degree 9, fitted here on
# Chebyshev nodes against float64 references; relative error below 8e-8 in float32, 1 / sqrt(2 pi) at u = 0).
_BESSEL_SWITCH = 8.0
_I0_SERIES = tuple(1.0 / (4 ** k * math.factorial(k) ** 2) for k in range(14))
_I1_SERIES = tuple(1.0 / (2 * 4 ** k * math.factorial(k) * math.factorial(k + 1)) for k in range(14))
_I0_LARGE = (0.3989422804124762, 0.006233471017664278, 0.00043835708708324036, 5.6281541499873016e-05,
             1.5596439750864013e-05, -1.2682167926107005e-05, 3.054469788578414e-05, -3.2346547745985536e-05,
             1.896854620693679e-05, -4.128658363858609e-06)
_I1_LARGE = (0.3989422803897053, -0.018700417151727676, -0.0007305550686380526, -7.906347213722734e-05,
             -1.8980805556785954e-05, 1.2907033490526857e-05, -3.2240338135387586e-05, 3.3879164878307376e-05,
             -1.9806409727101073e-05, 4.26325293917207e-06)


def _bessel(ctx: EmitContext, x: Value, order: int, scaled: bool) -> Value:
    """I0 / I1 of ``x`` (float), times exp(-|x|) when ``scaled``.

    As torch computes in float32: unscaled, exp(|x|) overflows past |x| = 88.72 (inf there, also
    where the true value is still finite) and +-inf gives NaN (inf / inf); scaled, +-inf gives 0."""
    mag = un(ctx, "abs", x)
    small = ew(ctx, "min", mag, _BESSEL_SWITCH)  # the series on a clamped argument: no inf * 0 where it is not used
    t = _mul(ctx, small, small)
    series = _horner(ctx, t, _I0_SERIES if order == 0 else _I1_SERIES)
    if order == 1:
        series = _mul(ctx, series, small)
    if scaled:
        series = _mul(ctx, series, un(ctx, "exp", un(ctx, "neg", small)))
    big = ew(ctx, "max", mag, _BESSEL_SWITCH)
    u = _div(ctx, _BESSEL_SWITCH, big)
    large = _div(ctx, _horner(ctx, u, _I0_LARGE if order == 0 else _I1_LARGE), un(ctx, "sqrt", big))
    if not scaled:
        large = _mul(ctx, un(ctx, "exp", big), large)
    y = _where(ctx, _cmp(ctx, "le", mag, _BESSEL_SWITCH), series, large)
    if order == 1:  # odd: the sign of x (I1(-0.0) = -0.0 as in torch)
        y = _where(ctx, _cmp(ctx, "lt", x, 0.0), un(ctx, "neg", y), y)
        y = _where(ctx, _cmp(ctx, "eq", x, 0.0), x, y)
    return _where(ctx, _cmp(ctx, "ne", x, x), x, y)


def _bessel_op(ctx: EmitContext, input: Value, order: int, scaled: bool) -> Value:
    x, out = _work(ctx, input)
    return cast(ctx, _bessel(ctx, x, order, scaled), out)


@register(torch.i0, torch.special.i0, "Tensor.i0", torch.special.modified_bessel_i0)
def i0(ctx: EmitContext, input: Value):
    """i0(Tensor self) -> Tensor: the modified Bessel function of the first kind of order 0
    (relative error below 3e-7 in float32; inf past |x| = 88.72 and NaN at +-inf, as torch's float32)."""
    return _bessel_op(ctx, input, 0, scaled=False)


@register(torch.special.i0e)
def i0e(ctx: EmitContext, input: Value):
    """special_i0e(Tensor self) -> Tensor: exp(-|x|) I0(x) (relative error below 3e-7 in float32)."""
    return _bessel_op(ctx, input, 0, scaled=True)


@register(torch.special.i1, torch.special.modified_bessel_i1)
def i1(ctx: EmitContext, input: Value):
    """special_i1(Tensor self) -> Tensor: the modified Bessel function of the first kind of order 1
    (odd; relative error below 4e-7 in float32; +-inf past |x| = 88.72, NaN at +-inf, as torch's float32)."""
    return _bessel_op(ctx, input, 1, scaled=False)


@register(torch.special.i1e)
def i1e(ctx: EmitContext, input: Value):
    """special_i1e(Tensor self) -> Tensor: exp(-|x|) I1(x) (relative error below 4e-7 in float32)."""
    return _bessel_op(ctx, input, 1, scaled=True)


# ---- Kaiser window ----------------------------------------------------------------------------------------------------
@register(torch.kaiser_window)
def kaiser_window(ctx: EmitContext, window_length, periodic: bool = True, beta: float = 12.0, *,
                  dtype: Optional[DType] = None, layout=None, device=None, pin_memory=False, requires_grad=False):
    """kaiser_window(int window_length, bool periodic=True, float beta=12.0, *, ScalarType? dtype=None, ...) -> Tensor

    ``I0(beta sqrt(1 - ((i - a) / a)^2)) / I0(beta)`` with ``a = M / 2`` (``M`` the window's span,
    see the other windows); the ratio is taken of exponentially scaled I0s, so that it does not
    overflow. A window of one item is ``[1]``; the length may be a dynamic size."""
    from .creation import _window

    if isinstance(beta, Value):
        ctx.fail("kaiser_window with beta read from tensor data is not supported; use a Python number")
    beta = float(beta)
    if dtype is not None and not dtype.is_float:
        ctx.fail("kaiser_window needs a floating point dtype (torch refuses others too)")
    if abs(beta) > 85.0:
        # NOTE: torch computes I0(beta) in float32 and it overflows past 88.7 (inf / inf: NaN items)
        ctx.fail(f"kaiser_window with |beta| = {abs(beta)} > 85: torch's float32 I0(beta) is near overflow there; "
                 "use a smaller beta")
    scale_beta = float(np.float32(np.i0(beta) * math.exp(-abs(beta))))

    def items(ctx, idx, span):
        alpha = _mul(ctx, span, 0.5)
        r = _div(ctx, _sub(ctx, idx, alpha), alpha)
        # (clamped at 0: tract's division may put r one ulp past +-1)
        arg = _mul(ctx, un(ctx, "sqrt", ew(ctx, "max", _sub(ctx, 1.0, _mul(ctx, r, r)), 0.0)), beta)
        # I0(arg) / I0(beta) = i0e(arg) / i0e(beta) * exp(|arg| - |beta|)
        ratio = _div(ctx, _bessel(ctx, arg, 0, scaled=True), scale_beta)
        return _mul(ctx, ratio, un(ctx, "exp", _sub(ctx, un(ctx, "abs", arg), abs(beta))))

    return _window(ctx, window_length, periodic, dtype, items)


# ---- quantile, nanquantile --------------------------------------------------------------------------------------------
_QUANTILE_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_q(ctx: EmitContext, q, dtype: DType):
    """(q as a float tensor [Q], whether the result keeps a q axis). ``q`` is a Python number, or a
    0-d or 1-D tensor; a constant one is checked to lie in [0, 1] as torch does."""
    if isinstance(q, Value):
        if q.shape is None or len(q.shape) > 1:
            ctx.fail("quantile: q must be a scalar or a 1-D tensor (torch refuses others too)")
        if q.is_constant:
            data = np.asarray(q.data, dtype=np.float64)
            if np.isnan(data).any() or (data < 0).any() or (data > 1).any():
                ctx.fail("quantile: q values must be in the range [0, 1] (torch refuses others too)")
        vector = len(q.shape) == 1
        qv = cast(ctx, q, dtype)
        return (qv if vector else ctx.op("unsqueeze", qv, axes=[0], out_shape=(1,), out_dtype=dtype)), vector
    values = np.asarray(q, dtype=np.float64)
    if values.ndim > 1 or np.isnan(values).any() or (values < 0).any() or (values > 1).any():
        ctx.fail("quantile: q must be a number or a list of numbers in [0, 1] (torch refuses others too)")
    # NOTE: torch rounds q to the input's dtype before it computes the ranks
    rounded = values.astype(dtype.numpy_name).astype(np.float32).reshape(-1)
    return ctx.const(rounded, DType.F32), values.ndim == 1


def _quantile(ctx: EmitContext, input: Value, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool):
    from ..helpers import axis, compare, rank, select
    from .reduce import reduce
    from .shape import expand_to, permute_axes, reshape_to
    from .sort import _topk

    name = "nanquantile" if ignore_nan else "quantile"
    if interpolation not in _QUANTILE_MODES:
        ctx.fail(f"{name}: interpolation must be one of {_QUANTILE_MODES}, got {interpolation!r}")
    if not input.dtype.is_float:
        ctx.fail(f"{name} takes a float tensor (torch refuses {input.dtype.value} too): convert with .float()")
    if isinstance(dim, (list, tuple)):
        ctx.fail(f"{name}: dim must be one int or None")
    out_dtype = input.dtype
    x = cast(ctx, input, DType.F32) if out_dtype in (DType.F16, DType.BF16) else input
    qv, vector = _quantile_q(ctx, q, out_dtype)
    qv = cast(ctx, qv, x.dtype)
    r_in = rank(input)
    if dim is None:
        x, a = reshape_to(ctx, x, [-1]), 0
    else:
        x = x if r_in else reshape_to(ctx, x, [1])
        a = axis(dim, max(r_in, 1))
    r = rank(x)
    n = x.shape[a]
    if isinstance(n, int) and n == 0:
        ctx.fail(f"{name} of an empty axis (torch refuses it too)")
    perm = [i for i in range(r) if i != a] + [a]
    x = permute_axes(ctx, x, perm)  # [..., n]
    lead = tuple(x.shape[:-1])
    is_nan = compare(ctx, "ne", x, x)
    keyed = select(ctx, is_nan, _const_inf(ctx, x.dtype), x)  # NaN sorted last (as +inf)
    ordered, _ = _topk(ctx, keyed, n, r - 1, largest=False)
    qrow = reshape_to(ctx, qv, [1] * (r - 1) + [-1])  # [1, ..., 1, Q]
    if ignore_nan:
        valid = reduce(ctx, "sum_reduce", cast(ctx, ctx.op("not", is_nan, out_shape=x.shape, out_dtype=DType.BOOL),
                                                x.dtype), [r - 1], True)  # [..., 1]
        ranks = ew(ctx, "max", _mul(ctx, qrow, _sub(ctx, valid, 1.0)), 0.0)  # every item NaN: rank 0 (a NaN)
    else:
        last = _sub(ctx, cast(ctx, dim_value(ctx, n, DType.I64), x.dtype), 1.0)
        ranks = _mul(ctx, qrow, reshape_to(ctx, last, [1] * r))
    if interpolation == "lower":
        ranks = un(ctx, "floor", ranks)
    elif interpolation == "higher":
        ranks = un(ctx, "ceil", ranks)
    elif interpolation == "nearest":
        ranks = ctx.call("nnef.round_even", ranks)  # torch's round: half to even
    full = lead + (qv.shape[0],)
    ranks = expand_to(ctx, ranks, full) if tuple(ranks.shape) != full else ranks
    below_at = un(ctx, "floor", ranks)
    below = ctx.op("tract_core_gather_elements", ordered, cast(ctx, below_at, DType.I64), axis=r - 1, out_shape=full,
                   out_dtype=x.dtype)
    y = below
    if interpolation in ("linear", "midpoint"):
        above = ctx.op("tract_core_gather_elements", ordered, cast(ctx, un(ctx, "ceil", ranks), DType.I64), axis=r - 1,
                       out_shape=full, out_dtype=x.dtype)
        weight = _sub(ctx, ranks, below_at) if interpolation == "linear" else None
        diff = _sub(ctx, above, below)
        if weight is None:  # torch's lerp at weight 0.5: end - (end - start) * 0.5
            y = _sub(ctx, above, _mul(ctx, diff, 0.5))
        else:  # torch's lerp: start + w (end - start) below w = 0.5, end - (end - start)(1 - w) from it
            y = _where(ctx, _cmp(ctx, "lt", weight, 0.5), _add(ctx, below, _mul(ctx, weight, diff)),
                       _sub(ctx, above, _mul(ctx, diff, _sub(ctx, 1.0, weight))))
    if not ignore_nan:  # any NaN along the axis: NaN
        has_nan = reduce(ctx, "any_reduce", is_nan, [r - 1], True)
        y = _where(ctx, has_nan, _const(ctx, math.nan, x.dtype), y)
    else:  # nothing but NaN: NaN (the +inf standing for a NaN was read)
        y = _where(ctx, _cmp(ctx, "eq", valid, 0.0), _const(ctx, math.nan, x.dtype), y)
    # [..., Q] -> [Q, ...] with the reduced axis dropped or kept as 1
    y = permute_axes(ctx, y, [r - 1] + list(range(r - 1)))  # [Q, lead...]
    nq = qv.shape[0]
    if dim is None:
        shape = [nq] + ([1] * r_in if keepdim else [])
    else:
        kept = list(lead)
        if keepdim:
            kept.insert(a, 1)
        shape = [nq] + (kept if r_in else [])
    if not vector:
        shape = shape[1:]
    y = reshape_to(ctx, y, shape)
    return cast(ctx, y, out_dtype)


def _const_inf(ctx: EmitContext, dtype: DType) -> Value:
    return _const(ctx, math.inf, dtype)


@register(torch.quantile, "Tensor.quantile", target="tract")
def quantile(ctx: EmitContext, input: Value, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear",
             out=None):
    """quantile(Tensor self, Tensor q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor
    (and q a float): a full sort along ``dim`` (the flattened tensor when None), read at the ranks
    ``q * (n - 1)`` as torch computes them, interpolated as torch's lerp; NaN where the axis holds a
    NaN. ``q`` known at export time or read at run time; ``dim`` may be dynamic."""
    return _quantile(ctx, input, q, dim, keepdim, interpolation, ignore_nan=False)


@register(torch.nanquantile, "Tensor.nanquantile", target="tract")
def nanquantile(ctx: EmitContext, input: Value, q, dim=None, keepdim: bool = False, *,
                interpolation: str = "linear", out=None):
    """nanquantile(Tensor self, Tensor q, int? dim=None, bool keepdim=False, *, str interpolation='linear') -> Tensor:
    as quantile over the items that are not NaN (ranks ``q * (count - 1)`` per row); NaN where
    every item is NaN."""
    return _quantile(ctx, input, q, dim, keepdim, interpolation, ignore_nan=True)


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


# ---- erfcx, log_ndtr, ndtri -------------------------------------------------------------------------------------------
# erfcx(x) for x >= 0: P(t) / (1 + 2x) with t = (x - 2) / (x + 2) in [-1, 1), P of degree 12 fitted here (Chebyshev
# least squares against float64 erfcx, converted to the power basis): relative error below 2.2e-7 in float32 over
# [0, 1e30]; for x < 0, 2 exp(x^2) - erfcx(-x) (inf past x = -9.4, as torch).
_ERFCX_K = 2.0
_ERFCX = (1.27697838142703, -0.09276376277486961, -0.16603038352631508, 0.1640494541394307, -0.054220266615177405,
          -0.008018963078665658, 0.008724607639973436, 0.001217410592140529, -0.0014640709109985705,
          -0.0003579204478283551, 0.0002215715505050751, 6.336945836770154e-05, -2.0255989595605796e-05)


def _erfcx_nonneg(ctx: EmitContext, x: Value) -> Value:
    """erfcx of ``x >= 0`` (+inf gives 0)."""
    xc = ew(ctx, "min", x, 1e30)  # t = 1 from there on (inf / inf is NaN)
    t = _div(ctx, _sub(ctx, xc, _ERFCX_K), _add(ctx, xc, _ERFCX_K))
    return _div(ctx, _horner(ctx, t, _ERFCX), _add(ctx, _mul(ctx, x, 2.0), 1.0))


def _erfcx(ctx: EmitContext, x: Value) -> Value:
    pos = _erfcx_nonneg(ctx, un(ctx, "abs", x))
    neg = _sub(ctx, _mul(ctx, un(ctx, "exp", _mul(ctx, x, x)), 2.0), pos)
    y = _where(ctx, _cmp(ctx, "lt", x, 0.0), neg, pos)
    return _where(ctx, _cmp(ctx, "ne", x, x), x, y)


@register(torch.special.erfcx)
def erfcx(ctx: EmitContext, input: Value):
    """special_erfcx(Tensor self) -> Tensor: exp(x^2) erfc(x) (relative error below 3e-7 in float32
    for x >= 0; for x < 0 that of exp(x^2), about x^2 ulps; inf below -9.4, 0 at +inf)."""
    x, out = _work(ctx, input)
    return cast(ctx, _erfcx(ctx, x), out)


@register(torch.special.log_ndtr)
def log_ndtr(ctx: EmitContext, input: Value):
    """special_log_ndtr(Tensor self) -> Tensor: log of the standard normal CDF, from erfcx:
    ``log(erfcx(-x / sqrt 2) / 2) - x^2 / 2`` below 1 (no underflow in the left tail) and
    ``log1p(-erfcx(x / sqrt 2) exp(-x^2 / 2) / 2)`` from 1 on (no rounding of the CDF to 1)."""
    x, out = _work(ctx, input)
    h = _mul(ctx, x, 1 / math.sqrt(2.0))
    left = _sub(ctx, un(ctx, "log", _mul(ctx, _erfcx_nonneg(ctx, ew(ctx, "max", un(ctx, "neg", h), 0.0)), 0.5)),
                _mul(ctx, _mul(ctx, x, x), 0.5))
    # below 1, -x / sqrt 2 can be negative (down to -0.71): erfcx there from its reflection
    left_small = _sub(ctx, un(ctx, "log", _mul(ctx, _erfcx(ctx, un(ctx, "neg", h)), 0.5)),
                      _mul(ctx, _mul(ctx, x, x), 0.5))
    left = _where(ctx, _cmp(ctx, "le", x, 0.0), left, left_small)
    tail = _mul(ctx, _mul(ctx, _erfcx_nonneg(ctx, ew(ctx, "max", h, 0.0)), un(ctx, "exp", _mul(ctx, _mul(ctx, x, x), -0.5))),
                -0.5)
    right = ctx.call("torch.log1p", tail)
    y = _where(ctx, _cmp(ctx, "lt", x, 1.0), left, right)
    return cast(ctx, _where(ctx, _cmp(ctx, "ne", x, x), x, y), out)


# ndtri: sqrt(2) erfinv(2p - 1) where min(p, 1 - p) >= 0.02; below, -ndtri(q) is a polynomial of s = sqrt(-2 log q)
# (mapped from [a, b] to [-1, 1]; q from 0.02 down to 1e-45), degree 12 fitted here against float64 ndtri: relative
# error below 7e-7 in float32.
_NDTRI_Q = 0.02
_NDTRI_A, _NDTRI_B = 2.797149622536537, 14.395577736564244
_NDTRI_TAIL = (8.234946170170328, 5.96814121880495, -0.09002171499982185, 0.05068984603049042, -0.02941842533720314,
               0.01605281755701147, -0.008970544217092303, 0.009696303484480919, -0.0070425991240187094,
               -0.002854871560664404, 0.0027956396928677666, 0.0039904138705112975, -0.0028231231491460014)


@register(torch.special.ndtri)
def ndtri(ctx: EmitContext, input: Value):
    """special_ndtri(Tensor self) -> Tensor: the inverse of the standard normal CDF; -inf at 0, +inf
    at 1, NaN outside [0, 1] (relative error below 1e-6 in float32, tails included)."""
    p, out = _work(ctx, input)
    q = ew(ctx, "min", p, _sub(ctx, 1.0, p))  # 1 - p is exact from p = 0.5 on
    central = _mul(ctx, ctx.call("torch.erfinv", _sub(ctx, _mul(ctx, p, 2.0), 1.0)), math.sqrt(2.0))
    qc = ew(ctx, "max", q, 1e-45)
    s = ew(ctx, "min", un(ctx, "sqrt", _mul(ctx, un(ctx, "log", qc), -2.0)), _NDTRI_B)
    z = _sub(ctx, _mul(ctx, s, 2.0 / (_NDTRI_B - _NDTRI_A)), (_NDTRI_A + _NDTRI_B) / (_NDTRI_B - _NDTRI_A))
    tail = _horner(ctx, z, _NDTRI_TAIL)
    tail = _where(ctx, _cmp(ctx, "lt", p, 0.5), un(ctx, "neg", tail), tail)
    y = _where(ctx, _cmp(ctx, "lt", q, _NDTRI_Q), tail, central)
    inf = _const(ctx, math.inf, p.dtype)
    y = _where(ctx, _cmp(ctx, "eq", p, 0.0), un(ctx, "neg", inf), y)
    y = _where(ctx, _cmp(ctx, "eq", p, 1.0), inf, y)
    outside = _or(ctx, _cmp(ctx, "lt", p, 0.0), _cmp(ctx, "gt", p, 1.0))
    y = _where(ctx, _or(ctx, outside, _cmp(ctx, "ne", p, p)), _const(ctx, math.nan, p.dtype), y)
    return cast(ctx, y, out)


# ---- polygamma, mvlgamma ----------------------------------------------------------------------------------------------
def _trigamma(ctx: EmitContext, x: Value) -> Value:
    """torch's float trigamma: below 0.5, the reflection ``pi^2 / sin^2(pi x)`` (sin of the float32
    product, as torch: large finite values at the negative integers, +inf at 0), then six terms of
    the recurrence and the asymptotic series."""
    reflect = _cmp(ctx, "lt", x, 0.5)
    sin = un(ctx, "sin", _mul(ctx, x, float(np.float32(math.pi))))
    mirror = un(ctx, "neg", _div(ctx, math.pi ** 2, _mul(ctx, sin, sin)))
    z = _where(ctx, reflect, _sub(ctx, 1.0, x), x)
    acc = None
    for _ in range(6):
        term = _div(ctx, 1.0, _mul(ctx, z, z))
        acc = term if acc is None else _add(ctx, acc, term)
        z = _add(ctx, z, 1.0)
    ixx = _div(ctx, 1.0, _mul(ctx, z, z))
    inner = _sub(ctx, 1.0 / 30, _mul(ctx, ixx, 1.0 / 42))
    inner = _sub(ctx, 1.0 / 6, _mul(ctx, ixx, inner))
    series = _div(ctx, _add(ctx, _add(ctx, _div(ctx, 1.0, _mul(ctx, z, 2.0)), 1.0), _mul(ctx, ixx, inner)), z)
    acc = _add(ctx, acc, series)
    return _where(ctx, reflect, un(ctx, "neg", _add(ctx, mirror, acc)), acc)


# Hurwitz zeta(s, a) for a >= 0: nine terms of the sum, then Euler-Maclaurin at a + 9 with six Bernoulli terms
# (as cephes' zeta, which torch's polygamma uses for n >= 2)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730)


def _hurwitz_zeta(ctx: EmitContext, s: int, a: Value) -> Value:
    acc = None
    for k in range(9):
        term = ew(ctx, "pow", _add(ctx, a, float(k)), float(-s))
        acc = term if acc is None else _add(ctx, acc, term)
    z = _add(ctx, a, 9.0)
    inv = _div(ctx, 1.0, z)
    zs = ew(ctx, "pow", z, float(-s))  # z^-s
    acc = _add(ctx, acc, _add(ctx, _div(ctx, _mul(ctx, zs, z), float(s - 1)), _mul(ctx, zs, 0.5)))
    # sum_j B_2j / (2j)! * s (s + 1) ... (s + 2j - 2) * z^(-s - 2j + 1)
    factor, power = 1.0, _mul(ctx, zs, inv)  # z^(-s-1)
    inv2 = _mul(ctx, inv, inv)
    for j, b in enumerate(_BERNOULLI, start=1):
        factor = float(s) if j == 1 else factor * (s + 2 * j - 3) * (s + 2 * j - 2)
        coef = b / math.factorial(2 * j) * factor
        acc = _add(ctx, acc, _mul(ctx, power, coef))
        power = _mul(ctx, power, inv2)
    return acc


def _cot_derivative_poly(n: int) -> np.ndarray:
    """Coefficients (lowest first) of P_n with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))."""
    from numpy.polynomial import polynomial as P

    poly = np.array([0.0, 1.0])
    for _ in range(n):
        poly = -P.polymul([1.0, 0.0, 1.0], P.polyder(poly))
    return poly


def _polygamma_n(ctx: EmitContext, n: int, x: Value) -> Value:
    """polygamma(n, x) for n >= 2: (-1)^(n+1) n! zeta(n + 1, x) for x >= 0, and below 0 the
    reflection psi_n(x) = -pi d^n/dx^n cot(pi x) + (-1)^n psi_n(1 - x); +-inf at 0 and the
    negative integers (and -inf), NaN at +inf, as torch."""
    sign = -1.0 if n % 2 == 0 else 1.0
    scale = sign * math.factorial(n)
    negative = _cmp(ctx, "lt", x, 0.0)
    y = _where(ctx, negative, _sub(ctx, 1.0, x), x)
    pos = _mul(ctx, _hurwitz_zeta(ctx, n + 1, y), scale)
    frac = _sub(ctx, x, un(ctx, "round", x))
    c = _div(ctx, 1.0, un(ctx, "tan", _mul(ctx, frac, math.pi)))
    coeffs = _cot_derivative_poly(n) * math.pi ** (n + 1)
    cot_term = _horner(ctx, c, tuple(float(v) for v in coeffs))
    reflected = _sub(ctx, _mul(ctx, pos, -sign), cot_term)  # (-1)^n psi_n(1 - x) - pi^(n+1) P_n(c)
    r = _where(ctx, negative, reflected, pos)
    pole = _and(ctx, _cmp(ctx, "le", x, 0.0), _cmp(ctx, "eq", frac, 0.0))
    r = _where(ctx, pole, _const(ctx, sign * math.inf, x.dtype), r)
    neg_inf = _cmp(ctx, "eq", x, _const(ctx, -math.inf, x.dtype))
    r = _where(ctx, neg_inf, _const(ctx, sign * math.inf, x.dtype), r)
    pos_inf = _cmp(ctx, "eq", x, _const(ctx, math.inf, x.dtype))
    return _where(ctx, pos_inf, _const(ctx, math.nan, x.dtype), r)


@register(torch.polygamma, torch.special.polygamma)
def polygamma(ctx: EmitContext, n: int, input: Value):
    """polygamma(int n, Tensor self) -> Tensor: digamma for n = 0, torch's trigamma for n = 1, and
    for n >= 2 the Hurwitz zeta series as torch (with the reflection for negative x)."""
    if isinstance(n, Value) or int(n) != n or n < 0:
        ctx.fail(f"polygamma: n must be a non-negative Python int, got {n!r}")
    n = int(n)
    if n == 0:
        return ctx.call("torch.digamma", input)
    x, out = _work(ctx, input)
    if n == 1:
        return cast(ctx, _trigamma(ctx, x), out)
    if n > 12:
        ctx.fail(f"polygamma of order {n} > 12 is not lowered (its values overflow float32 almost everywhere)")
    return cast(ctx, _polygamma_n(ctx, n, x), out)


@register("Tensor.polygamma")
def polygamma_method(ctx: EmitContext, input: Value, n: int):
    """Tensor.polygamma(int n) -> Tensor (see polygamma)"""
    return polygamma(ctx, n, input)


@register(torch.mvlgamma, torch.special.multigammaln, "Tensor.mvlgamma")
def mvlgamma(ctx: EmitContext, input: Value, p: int):
    """mvlgamma(Tensor self, int p) -> Tensor: ``sum_i lgamma(x - i / 2) + p (p - 1) / 4 log pi``
    (torch refuses, while tracing, inputs at or below (p - 1) / 2)."""
    if isinstance(p, Value) or int(p) != p or p < 1:
        ctx.fail(f"mvlgamma: p must be a Python int >= 1, got {p!r}")
    x, out = _work(ctx, input)
    acc = None
    for i in range(int(p)):
        term = ctx.call("torch.lgamma", _sub(ctx, x, i * 0.5) if i else x)
        acc = term if acc is None else _add(ctx, acc, term)
    acc = _add(ctx, acc, p * (p - 1) / 4 * math.log(math.pi))
    return cast(ctx, acc, out)
