"""CustomProxy: an fx Proxy that carries the example value of what it stands for.

Every recorded call is also executed on concrete values (see ``tracer.CustomTracer``), so
the proxy can answer ``shape``, ``dtype``, ``ndim``, ``len()``, ``isinstance``, iteration
and ``bool()``. Sizes read from tensors stay graph nodes; a Python decision taken on a
concrete value (``bool``, ``int``, ``len``, ``range``) is recorded as a guard.
"""
from __future__ import annotations

import builtins
import contextlib
import math
import operator

import numpy as np
import torch
import torch.fx as fx

_builtin_int = builtins.int
_builtin_isinstance = builtins.isinstance

# attributes answered from the example value without recording anything
_STATIC_TENSOR_ATTRS = {
    "dtype", "device", "layout", "requires_grad", "is_cuda", "is_sparse", "is_quantized",
    "is_meta", "is_leaf", "grad_fn", "is_nested", "is_mps", "is_cpu", "ndim",
    "itemsize", "grad",
}
# methods answered from the example value (no symbolic meaning, or a guard)
_STATIC_TENSOR_METHODS = {
    "dim", "is_floating_point", "is_complex", "get_device", "element_size",
    "data_ptr", "is_signed", "ndimension", "storage_offset",
    "is_inference", "untyped_storage", "stride",
}
# methods whose result is a Python value computed from tensor data: a data guard
_DATA_TENSOR_METHODS = {"item", "tolist"}


def _traced_number(x) -> bool:
    """Whether ``x`` is a proxy of a Python int or float computed from sizes (not from data)."""
    if type(x) is not CustomProxy:
        return False
    v = x.value
    return _builtin_isinstance(v, (_builtin_int, float)) and not _builtin_isinstance(v, bool) \
        and not x.tracer._on_data(x)


def rounding(fn):
    """``__ceil__``/``__floor__``/``__trunc__`` of a proxy: recorded for a traced number; any
    other value is read as ``float()`` (a guard), as Python does for objects without them."""
    def impl(self):
        if _traced_number(self):
            if _builtin_isinstance(self.value, _builtin_int):
                return self
            return self.tracer.create_proxy("call_function", fn, (self,), {})
        return fn(float(self))

    impl.__name__ = f"__{fn.__name__}__"
    return impl


class SizeTuple(tuple):
    """What ``proxy.shape`` / ``proxy.size()`` returns: a tuple of size proxies (a slice of it
    is one too, as a slice of ``torch.Size`` is a ``torch.Size``)."""

    def __getitem__(self, index):
        item = tuple.__getitem__(self, index)
        return SizeTuple(item) if isinstance(index, slice) else item

    def numel(self):
        out = 1
        for d in self:
            out = out * d
        return out


class CustomProxy(fx.Proxy):
    """fx Proxy with the example ``value`` of the node attached."""

    def __init__(self, node, tracer=None, value=None):
        super().__init__(node, tracer)
        self.__dict__["value"] = value

    def __repr__(self):
        return f"CustomProxy({self.node.name})"

    # attribute access ---------------------------------------------------------------
    def __getattr__(self, k):
        if k in ("value", "node", "tracer", "root", "attr", "_node") or k.startswith("__"):
            raise AttributeError(k)
        v = self.value
        if isinstance(v, torch.Tensor):
            if k == "shape":
                return self.tracer.size_tuple(self)
            if k in _STATIC_TENSOR_ATTRS:
                return getattr(v, k)
            attr = getattr(v, k)
            if callable(attr):
                return CustomAttribute(self, k)
            return self.tracer.create_proxy("call_function", getattr, (self, k), {})
        attr = getattr(v, k)
        if callable(attr):
            return CustomAttribute(self, k)
        return self.tracer.create_proxy("call_function", getattr, (self, k), {})

    # Python protocol: answered from the value, recorded as guards ----------------------
    def __bool__(self):
        return self.tracer.guard(self, bool, "bool")

    def __int__(self):
        return self.tracer.guard(self, int, "int")

    def __index__(self):
        return self.tracer.guard(self, operator.index, "index")

    def __float__(self):
        return self.tracer.guard(self, float, "float")

    def __round__(self, ndigits=None):
        if ndigits is not None:  # a float: its value read as float() does, then rounded
            return round(float(self), ndigits)
        return self.tracer.guard(self, round, "round")

    # math.ceil/floor/trunc of a number computed from sizes stay traced (see .size_casts)
    __ceil__ = rounding(math.ceil)
    __floor__ = rounding(math.floor)
    __trunc__ = rounding(math.trunc)

    def __array__(self, dtype=None, copy=None):
        """numpy on a traced Python number (``np.sqrt(x.shape[-1])``): its value, read as
        ``int()``/``float()`` would be (a decision, recorded as a guard). numpy on a traced tensor
        would read its data: refused."""
        v = self.value
        if isinstance(v, (bool, int, float)):
            op, fn = ("bool", bool) if isinstance(v, bool) else ("int", int) if isinstance(v, int) else ("float", float)
            return np.asarray(self.tracer.guard(self, fn, op), dtype=dtype)
        raise TypeError(f"numpy cannot read the traced tensor %{self.node.name}: its data is not known while "
                        "tracing; compute it with torch ops")

    def __divmod__(self, other):  # divmod(S, 4) of a size: both parts traced, as // and % are
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __len__(self):
        v = self.value
        if isinstance(v, torch.Tensor):
            return self.tracer.guard(self.tracer.create_proxy("call_method", "size", (self, 0), {}), int, "len")
        return len(v)

    def __iter__(self):
        v = self.value
        if isinstance(v, dict):
            return iter(list(v.keys()))
        if self.tracer.roll_loops:  # a loop over the pieces may roll into a scan
            pieces = self.tracer.iterate_pieces(self)
            if pieces is not None:
                return pieces
        n = len(self)
        return iter([self[i] for i in range(n)])

    def __contains__(self, item):
        return item in self.value

    def keys(self):
        return list(self.value.keys())

    def __setitem__(self, idx, value):
        self.tracer.create_proxy("call_function", operator.setitem, (self, idx, value), {})

    def __hash__(self):
        return id(self)

    def __format__(self, spec):
        return format(self.value, spec)

    def __reduce_ex__(self, protocol):
        raise TypeError("a traced value cannot be pickled")



def _inplace_op(method: str, fallback):
    def impl(self, other):
        if isinstance(self.value, torch.Tensor):
            return self.tracer.create_proxy("call_method", method, (self, other), {})
        return self.tracer.create_proxy("call_function", fallback, (self, other), {})

    impl.__name__ = f"__i{method.strip('_')}__"
    return impl


for _name, _method, _fallback in [
    ("__iadd__", "add_", operator.add), ("__isub__", "sub_", operator.sub),
    ("__imul__", "mul_", operator.mul), ("__itruediv__", "div_", operator.truediv),
    ("__iand__", "bitwise_and_", operator.and_), ("__ior__", "bitwise_or_", operator.or_),
    ("__ixor__", "bitwise_xor_", operator.xor), ("__ifloordiv__", "floor_divide_", operator.floordiv),
    ("__ipow__", "pow_", operator.pow),
]:
    setattr(CustomProxy, _name, _inplace_op(_method, _fallback))


# torch Python functions that would be recorded as one opaque call (they re-dispatch through
# __torch_function__ at their top); the tracer follows their bodies instead.
DECOMPOSED_FUNCTIONS: set = set()


DECOMPOSED_FUNCTIONS.add(torch.nn.functional.multi_head_attention_forward)


@contextlib.contextmanager
def _without_torch_function_check(fn):
    """Run ``fn``'s body on proxies: its own ``has_torch_function`` check answers False."""
    scope = fn.__globals__
    saved = scope.get("has_torch_function")
    scope["has_torch_function"] = lambda *a, **k: False
    try:
        yield
    finally:
        scope["has_torch_function"] = saved


def _torch_function(cls, orig_method, types, args=(), kwargs=None):
    if orig_method in DECOMPOSED_FUNCTIONS:
        with _without_torch_function_check(orig_method):
            return orig_method(*args, **(kwargs or {}))
    return fx.Proxy.__torch_function__.__func__(cls, orig_method, types, args, kwargs)


CustomProxy.__torch_function__ = classmethod(_torch_function)


class CustomAttribute(CustomProxy):
    """``proxy.attr`` before we know whether it is a method call or a plain attribute."""

    def __init__(self, root: CustomProxy, attr: str):
        self.__dict__.update(root=root, attr=attr, tracer=root.tracer, _node=None)

    @property
    def value(self):
        return getattr(self.root.value, self.attr)

    @property
    def node(self):
        if self._node is None:
            self.__dict__["_node"] = self.tracer.create_proxy("call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.call_method(self.root, self.attr, args, kwargs)
