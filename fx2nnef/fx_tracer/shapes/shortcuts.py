"""Calls of the symbolic replay computed without torch's kernel, where their output is known
from the operands' shapes alone.

Under the replay's ShapeEnv, a fake kernel costs 2 to 70 ms: besides the output's shape, torch
works out its memory layout, and decides on the sizes to do so (``Ne(S, 1)``: whether an axis of
S items is contiguous; which of two strides is the larger). Those decisions change no shape, yet
each becomes a check the analysis must run at the sizes where it flips. The rules here give the
output of the common calls (element-wise, casts, linear, matmul, views, reductions) where it
takes no decision: each aligned pair of sizes is the same expression or one of them is 1, the
layout is contiguous where the output's depends on it, bounds are constants on constant axes. The
output then has torch's shape, dtype and strides at every size. Anything else is torch's call.

The replay's shapes are still checked against real runs at the example sizes and at the check
sizes (see fitting._check_base_shapes and fitting._shape_mismatch): a rule gone wrong is a refused
replay (the probes take over), not a wrong export.
"""
from __future__ import annotations

import operator
from typing import Optional

import sympy
import torch
from torch.utils._sympy.functions import Max

_PROMOTE, _DIVIDE, _COMPARE, _BITS, _LOGICAL = range(5)
_ELEMENTWISE_FUNCTIONS = {
    **{fn: _PROMOTE for fn in (operator.add, operator.sub, operator.mul, operator.pow, torch.add, torch.sub,
                               torch.mul, torch.pow)},
    **{fn: _DIVIDE for fn in (operator.truediv, torch.div, torch.true_divide)},
    **{fn: _COMPARE for fn in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
                               torch.lt, torch.le, torch.gt, torch.ge, torch.eq, torch.ne)},
    **{fn: _BITS for fn in (operator.and_, operator.or_, operator.xor, torch.bitwise_and, torch.bitwise_or,
                            torch.bitwise_xor)},
    **{fn: _LOGICAL for fn in (torch.logical_and, torch.logical_or, torch.logical_xor)},
}
_ELEMENTWISE_METHODS = {
    **{m: _PROMOTE for m in ("add", "sub", "mul", "pow", "__add__", "__sub__", "__mul__", "__radd__", "__rmul__",
                             "__pow__")},
    **{m: _DIVIDE for m in ("div", "true_divide", "__truediv__")},
    **{m: _COMPARE for m in ("lt", "le", "gt", "ge", "eq", "ne")},
    **{m: _BITS for m in ("bitwise_and", "bitwise_or", "bitwise_xor", "__and__", "__or__", "__xor__")},
    **{m: _LOGICAL for m in ("logical_and", "logical_or", "logical_xor")},
}
_FLOAT_UNARY = {"exp", "cos", "sin", "rsqrt", "sqrt", "tanh", "sigmoid", "log", "reciprocal", "erf"}
_UNARY_FUNCTIONS = {**{getattr(torch, n): n for n in _FLOAT_UNARY | {"neg", "abs", "relu"}},
                    operator.neg: "neg", torch.nn.functional.silu: "silu", torch.nn.functional.relu: "relu",
                    torch.nn.functional.gelu: "gelu"}
_UNARY_METHODS = {n: n for n in _FLOAT_UNARY | {"neg", "abs", "relu", "__neg__"}}
_CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
          "int": torch.int32, "long": torch.int64, "bool": torch.bool}
_REDUCTIONS = {"mean", "sum", "amax", "amin"}


def function_shortcut(target, args: tuple, kwargs: dict):
    """The output of ``target(*args, **kwargs)`` (a call_function node), or None: torch's call."""
    try:
        kind = _ELEMENTWISE_FUNCTIONS.get(target)
        unary = _UNARY_FUNCTIONS.get(target)
    except TypeError:  # an unhashable callable
        return None
    if kind is not None:
        return _binary(kind, args, kwargs)
    if unary is not None:
        return _unary(unary, args, kwargs)
    if target is torch.where:
        return _where(args, kwargs)
    if target is torch.nn.functional.linear and not kwargs:
        return _linear(*args)
    if target in (torch.matmul, operator.matmul) and len(args) == 2 and not kwargs:
        return _matmul(*args)
    if target is operator.getitem and len(args) == 2:
        return _getitem(*args)
    if target in (torch.transpose, torch.unsqueeze, torch.reshape, torch.mean, torch.sum, torch.amax, torch.amin):
        return method_shortcut(target.__name__, args, kwargs)
    return None


def method_shortcut(name: str, args: tuple, kwargs: dict):
    """The output of ``args[0].<name>(*args[1:], **kwargs)``, or None: torch's call."""
    if not args or not _plain(args[0]):
        return None
    x = args[0]
    if name in _ELEMENTWISE_METHODS:
        return _binary(_ELEMENTWISE_METHODS[name], args, kwargs)
    if name in _UNARY_METHODS:
        return _unary(name, args, kwargs)
    if name == "matmul" and len(args) == 2 and not kwargs:
        return _matmul(*args)
    if name == "to" or name in _CASTS:
        return _cast(name, args, kwargs)
    if name == "contiguous" and len(args) == 1 and not kwargs:
        return x if _contiguous(x) else torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    if name == "unsqueeze" and len(args) == 2 and not kwargs and type(args[1]) is int \
            and -x.dim() - 1 <= args[1] <= x.dim():
        return _view(x, *_unsqueezed(list(x.shape), list(x.stride()), args[1] % (x.dim() + 1)))
    if name == "transpose" and len(args) == 3 and not kwargs and type(args[1]) is type(args[2]) is int:
        return _transposed(x, args[1], args[2])
    if name in ("view", "reshape") and not kwargs:
        return _reshaped(x, args[1:])
    if name == "expand" and not kwargs:
        return _expanded(x, args[1:])
    if name in _REDUCTIONS:
        return _reduced(name, x, args[1:], kwargs)
    return None


def _plain(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_quantized


def _size_expr(d):
    return d.node.expr if isinstance(d, torch.SymInt) else d


def _at_least_one(e):
    """``e`` with each ``Max(1, size)`` written as the size."""
    if not isinstance(e, sympy.Basic) or not e.has(Max):
        return e
    return e.replace(lambda x: isinstance(x, Max) and len(x.args) == 2 and 1 in x.args,
                     lambda x: x.args[0] if x.args[1] == 1 else x.args[1])


def _same_size(a, b) -> bool:
    return _size_expr(a) == _size_expr(b)


def _contiguous(t: torch.Tensor) -> bool:
    """Whether every stride of ``t`` is, as an expression, the product of the sizes after it
    (strides of axes of size 1 aside): no decision is taken to tell. torch's kernels write such a
    stride with ``Max(1, size)`` for each size (so that an empty axis leaves the others' strides
    alone), which is the size wherever the tensor has items."""
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        size = _size_expr(size)
        if size == 1:
            continue
        if _at_least_one(_size_expr(stride)) != expected:
            return False
        expected = expected * size
    return True


def _broadcast(shapes: list) -> Optional[list]:
    """The broadcast of ``shapes`` when no aligned pair of sizes needs a decision, else None."""
    out = []
    for i in range(1, max(len(shape) for shape in shapes) + 1):
        sizes = [shape[-i] for shape in shapes if len(shape) >= i]
        wide = [d for d in sizes if _size_expr(d) != 1]
        if any(not _same_size(d, wide[0]) for d in wide[1:]):
            return None
        out.append(wide[0] if wide else 1)
    return out[::-1]


def _elementwise(kind: int, operands: tuple, dtype_of: tuple):
    """A contiguous output of the broadcast shape of ``operands`` (contiguous tensors and plain
    numbers), its dtype by ``kind`` from ``dtype_of``; None when a rule above does not hold."""
    tensors = [a for a in operands if isinstance(a, torch.Tensor)]
    if not tensors or any(not (_plain(a) if isinstance(a, torch.Tensor) else type(a) in (bool, int, float))
                          for a in operands):
        return None
    if len({t.device for t in tensors}) != 1 or not all(_contiguous(t) for t in tensors):
        return None
    shape = _broadcast([tuple(t.shape) for t in tensors])
    if shape is None:
        return None
    if kind in (_COMPARE, _LOGICAL):
        dtype = torch.bool
    else:
        dtype = torch.result_type(*dtype_of) if len(dtype_of) == 2 else dtype_of[0].dtype
        if kind == _BITS and (dtype.is_floating_point or dtype.is_complex):
            return None
        if kind == _DIVIDE and not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.get_default_dtype()
    return torch.empty(shape, dtype=dtype, device=tensors[0].device)


def _binary(kind: int, args: tuple, kwargs: dict):
    if kwargs or len(args) != 2:
        return None
    return _elementwise(kind, args, args)


def _where(args: tuple, kwargs: dict):
    if kwargs or len(args) != 3 or not isinstance(args[0], torch.Tensor) or args[0].dtype != torch.bool:
        return None
    return _elementwise(_PROMOTE, args, args[1:]) if any(isinstance(a, torch.Tensor) for a in args[1:]) else None


def _unary(name: str, args: tuple, kwargs: dict):
    """``neg(x)``, ``x.exp()``, silu, ... of a contiguous tensor: a contiguous tensor of its shape
    and dtype (float functions of float tensors only; no complex tensor: abs of one is real)."""
    if len(args) != 1 or kwargs.get("inplace") or set(kwargs) - {"inplace", "approximate"} \
            or ("approximate" in kwargs and name != "gelu"):
        return None
    x = args[0]
    if not _plain(x) or not _contiguous(x) or x.dtype == torch.bool or x.dtype.is_complex \
            or (name not in ("neg", "__neg__", "abs") and not x.dtype.is_floating_point):
        return None
    return torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)


def _cast(name: str, args: tuple, kwargs: dict):
    """``x.to(dtype)``, ``x.float()``, ... on ``x``'s own device: ``x`` itself when nothing changes
    (as torch), else (``x`` contiguous) a contiguous tensor of its shape."""
    x = args[0]
    if name in _CASTS:
        if len(args) != 1 or kwargs:
            return None
        dtype = _CASTS[name]
    else:
        if set(kwargs) - {"dtype", "device", "non_blocking"} or kwargs.get("non_blocking"):
            return None
        dtype, device = kwargs.get("dtype"), kwargs.get("device")
        for a in args[1:]:
            if isinstance(a, torch.dtype) and dtype is None:
                dtype = a
            elif isinstance(a, (torch.device, str)) and device is None:
                device = a
            else:
                return None
        if device is not None and torch.device(device) != x.device:
            return None
        dtype = dtype or x.dtype
    if dtype == x.dtype:
        return x
    if not _contiguous(x):
        return None
    return torch.empty(tuple(x.shape), dtype=dtype, device=x.device)


def _linear(x, weight, bias=None):
    """``F.linear`` of a contiguous input: contiguous, ``x``'s leading sizes then the weight's rows,
    when the inner sizes are the same expression."""
    if not (_plain(x) and _plain(weight) and x.dim() >= 1 and weight.dim() == 2
            and (bias is None or (_plain(bias) and bias.dim() == 1))):
        return None
    if not _contiguous(x) or not _same_size(x.shape[-1], weight.shape[1]) or x.dtype != weight.dtype \
            or (bias is not None and not _same_size(bias.shape[0], weight.shape[0])):
        return None
    return torch.empty(tuple(x.shape[:-1]) + (weight.shape[0],), dtype=x.dtype, device=x.device)


def _matmul(a, b):
    """``a @ b`` of tensors of 2 dims or more: contiguous, the batch sizes broadcast then ``a``'s
    rows and ``b``'s columns."""
    if not (_plain(a) and _plain(b)) or a.dim() < 2 or b.dim() < 2 or a.dtype != b.dtype \
            or a.device != b.device or not _same_size(a.shape[-1], b.shape[-2]):
        return None
    batch = _broadcast([tuple(a.shape[:-2]), tuple(b.shape[:-2])]) if a.dim() > 2 or b.dim() > 2 else []
    if batch is None:
        return None
    return torch.empty(tuple(batch) + (a.shape[-2], b.shape[-1]), dtype=a.dtype, device=a.device)


# Views: the output is ``x.as_strided`` with torch's sizes and strides, which takes no decision.

def _view(x: torch.Tensor, sizes: list, strides: list, offset=None):
    return x.as_strided(sizes, strides, x.storage_offset() if offset is None else offset)


def _unsqueezed(sizes: list, strides: list, dim: int) -> tuple:
    """torch's unsqueeze: the new axis's stride is the size times the stride of the axis it
    precedes (1 at the end)."""
    stride = sizes[dim] * strides[dim] if dim < len(sizes) else 1
    return sizes[:dim] + [1] + sizes[dim:], strides[:dim] + [stride] + strides[dim:]


def _transposed(x: torch.Tensor, a: int, b: int):
    n = x.dim()
    if n == 0 or not (-n <= a < n and -n <= b < n):
        return None
    a, b = a % n, b % n
    sizes, strides = list(x.shape), list(x.stride())
    sizes[a], sizes[b] = sizes[b], sizes[a]
    strides[a], strides[b] = strides[b], strides[a]
    return _view(x, sizes, strides)


def _getitem(x, index):
    """``x[index]`` of full slices, ``None``, ``...``, and constant slices and integers on axes of
    constant size: torch's slicing, one item after the other."""
    if not _plain(x):
        return None
    items = index if isinstance(index, tuple) else (index,)
    if items and all(isinstance(i, torch.Tensor) for i in items):
        return _gathered(x, items)
    if sum(i is Ellipsis for i in items) > 1 or not all(
            i is None or i is Ellipsis or type(i) is int or (isinstance(i, slice) and all(
                v is None or type(v) is int for v in (i.start, i.stop, i.step))) for i in items):
        return None
    taking = sum(1 for i in items if i is not None and i is not Ellipsis)
    if taking > x.dim():
        return None
    sizes, strides, offset = list(x.shape), list(x.stride()), x.storage_offset()
    dim = 0
    for i in items:
        if i is Ellipsis:
            dim += x.dim() - taking
        elif i is None:
            sizes, strides = _unsqueezed(sizes, strides, dim)
            dim += 1
        elif isinstance(i, slice) and i.start is None and i.stop is None and i.step in (None, 1):
            dim += 1
        else:
            size = sizes[dim]
            if type(size) is not int:
                return None  # a bound on a symbolic axis is a decision (see fake_replay._clamped_index)
            if type(i) is int:
                if not -size <= i < size:
                    return None
                offset = offset + (i % size) * strides[dim]
                del sizes[dim], strides[dim]
                continue
            if i.step is not None and i.step <= 0:
                return None
            start, stop, step = i.indices(size)
            offset = offset + start * strides[dim]
            sizes[dim] = len(range(start, stop, step))
            strides[dim] = strides[dim] * step
            dim += 1
    return _view(x, sizes, strides, offset)


def _gathered(x: torch.Tensor, indices: tuple):
    """``x[i, j, ...]`` with an integer tensor for every axis: contiguous, of the indices'
    broadcast shape, when they are contiguous."""
    if len(indices) != x.dim() or not all(_plain(i) and i.dtype in (torch.int64, torch.int32) and _contiguous(i)
                                          and i.device == x.device for i in indices):
        return None
    shape = _broadcast([tuple(i.shape) for i in indices])
    return None if shape is None else torch.empty(shape, dtype=x.dtype, device=x.device)


def _shape_arg(args: tuple) -> Optional[list]:
    shape = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else list(args)
    if not all(type(d) is int or isinstance(d, torch.SymInt) for d in shape):
        return None
    return shape


def _reshaped(x: torch.Tensor, args: tuple):
    """``x.view(shape)`` / ``x.reshape(shape)`` of a contiguous ``x``: contiguous strides, when the
    sizes' product is the element count as an expression (a ``-1`` is then a constant)."""
    shape = _shape_arg(args)
    if shape is None or not _contiguous(x) or sum(1 for d in shape if type(d) is int and d == -1) > 1 \
            or any(type(d) is int and d < -1 for d in shape):
        return None
    numel = sympy.Integer(1)
    for d in x.shape:
        numel = numel * _size_expr(d)
    known = sympy.Integer(1)
    for d in shape:
        if not (type(d) is int and d == -1):
            known = known * _size_expr(d)
    if -1 in [d for d in shape if type(d) is int]:
        rest = sympy.cancel(numel / known) if known != 0 else None
        if rest is None or not rest.is_Integer or rest < 0:
            return None
        shape = [int(rest) if type(d) is int and d == -1 else d for d in shape]
    elif sympy.expand(numel - known) != 0:
        return None
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step = step * d
    return _view(x, shape, strides[::-1])


def _expanded(x: torch.Tensor, args: tuple):
    """``x.expand(sizes)``: an axis of 1 grows to its new size with stride 0, ``-1`` or the same
    size keeps it, new leading axes have stride 0."""
    shape = _shape_arg(args)
    if shape is None or len(shape) < x.dim():
        return None
    lead = len(shape) - x.dim()
    sizes, strides = [], []
    for i, d in enumerate(shape):
        if i < lead:
            if type(d) is int and d < 0:
                return None
            sizes.append(d)
            strides.append(0)
            continue
        old, stride = x.shape[i - lead], x.stride()[i - lead]
        if (type(d) is int and d == -1) or _same_size(d, old):
            sizes.append(old)
            strides.append(stride)
        elif _size_expr(old) == 1 and not (type(d) is int and d < 0):
            sizes.append(d)
            strides.append(0)
        else:
            return None
    return _view(x, sizes, strides)


def _reduced(name: str, x: torch.Tensor, args: tuple, kwargs: dict):
    """``mean``/``sum``/``amax``/``amin`` of a contiguous float tensor over given axes: contiguous,
    the axes dropped or kept as 1."""
    if not x.dtype.is_floating_point or not _contiguous(x) or len(args) > 2 or set(kwargs) - {"dim", "keepdim"}:
        return None
    dims = kwargs.get("dim", args[0] if args else None)
    keep = kwargs.get("keepdim", args[1] if len(args) > 1 else False)
    if dims is None or type(keep) is not bool:
        return None
    dims = [dims] if type(dims) is int else list(dims) if isinstance(dims, (tuple, list)) else None
    if not dims or any(type(d) is not int or not -x.dim() <= d < x.dim() for d in dims):
        return None
    dims = {d % x.dim() for d in dims}
    shape = [1 if i in dims else d for i, d in enumerate(x.shape) if keep or i not in dims]
    return torch.empty(shape, dtype=x.dtype, device=x.device)


def module_shortcut(module, args: tuple, kwargs: dict):
    """The outputs of a submodule called whole (a leaf of the trace), or None: the module's own
    forward. torch's recurrent layers read their input's item count, which a tensor of symbolic
    sizes has not: their outputs' shapes follow the input's and the layer's sizes."""
    if isinstance(module, torch.nn.RNNBase) and args and _plain(args[0]) and not kwargs:
        return _recurrent(module, *args)
    return None


def _recurrent(rnn: torch.nn.RNNBase, x: torch.Tensor, hx=None):
    """``(output, h_n)``, or ``(output, (h_n, c_n))`` for an LSTM, of ``rnn`` on ``x``
    (``[L, N, H_in]``, batch first ``[N, L, H_in]``, or ``[L, H_in]`` unbatched)."""
    if x.dim() not in (2, 3):
        return None
    dirs = 2 if rnn.bidirectional else 1
    out_size = rnn.proj_size if getattr(rnn, "proj_size", 0) > 0 else rnn.hidden_size
    lead = list(x.shape[:-1])
    states = [dirs * rnn.num_layers] + ([lead[1] if not rnn.batch_first else lead[0]] if x.dim() == 3 else [])
    output = x.new_empty(lead + [dirs * out_size])
    h_n = x.new_empty(states + [out_size])
    if isinstance(rnn, torch.nn.LSTM):
        return output, (h_n, x.new_empty(states + [rnn.hidden_size]))
    return output, h_n
