"""``int()``, ``math.ceil``, ``math.floor`` and ``math.trunc`` of a Python number computed from
traced sizes stay traced.

A model that pads or resizes to a multiple of its patch size computes the target in Python:
``int(math.ceil(h / p) * p)`` (MobileViT), ``int(w * 0.5)``. Read as plain numbers, these fixed
the graph to the example's size (``interpolate(x, size=(16, 12))``), valid at that size only.
Recorded instead, they are graph nodes like the sizes they come from, which the fake replay
turns into floor divisions (``ceil(h / 4) * 4`` is ``(h + 3) // 4 * 4``).

``math.ceil`` and friends call the proxy's ``__ceil__`` (:func:`rounding`). ``int(x)`` cannot
return a proxy (Python checks the type of ``__int__``'s result), so while tracing, the name
``int`` in the modules that define the model's submodules (where their forwards read it) is a
stand-in class (:data:`TracedInt`): ``int(size proxy)`` gives the traced number, any other call is
the builtin's, and ``isinstance(3, int)`` still holds. Modules that test ``type(x) is int`` or
pass ``int`` as a dtype are left alone.
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import math
import re
import sys

_builtin_int = builtins.int
_builtin_isinstance = builtins.isinstance
_builtin_issubclass = builtins.issubclass

# code that needs the real int class: identity and equality tests, int as a dtype
_NEEDS_REAL_INT = re.compile(r"\bis\s+(not\s+)?int\b|[=!]=\s*int\b|\bdtype\s*=\s*int\b|\.(to|type)\(\s*int\s*\)")


def _traced_number(x) -> bool:
    """Whether ``x`` is a proxy of a Python int or float computed from sizes (not from data)."""
    from .proxy import CustomProxy

    if type(x) is not CustomProxy:
        return False
    v = x.value
    return _builtin_isinstance(v, (_builtin_int, float)) and not _builtin_isinstance(v, bool) \
        and not x.tracer._on_data(x)


def traced_int(x):
    """``int(x)`` of a traced number: ``x`` itself for an int, ``math.trunc(x)`` for a float."""
    if _builtin_isinstance(x.value, _builtin_int):
        return x
    return x.tracer.create_proxy("call_function", math.trunc, (x,), {})


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


class _IntType(type):
    """The metaclass of :data:`TracedInt`: instance and subclass checks are the builtin int's."""

    def __instancecheck__(cls, obj):
        return _builtin_isinstance(obj, _builtin_int)

    def __subclasscheck__(cls, sub):
        return _builtin_issubclass(sub, _builtin_int)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and _traced_number(args[0]):
            return traced_int(args[0])
        return _builtin_int(*args, **kwargs)

    def __getattr__(cls, name):  # int.from_bytes, int.bit_length, ...
        return getattr(_builtin_int, name)

    def __repr__(cls):
        return "<class 'int'>"


class TracedInt(metaclass=_IntType):
    """Stands for ``int`` in the model's modules while tracing (see the module's notes)."""


def _code_module_names(model) -> list:
    """The names of the Python modules whose code ``model``'s forwards run: those defining its
    submodules' classes, and the functions its modules hold (``self.fn = f``, called in forward)."""
    names = []
    for m in model.modules():
        names.append(type(m).__module__)
        names.extend(getattr(v, "__module__", None) for v in vars(m).values()
                     if type(v).__name__ == "function")
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]


def _model_modules(model) -> list:
    """The Python modules whose code ``model`` runs (:func:`_code_module_names`), except torch's
    and ours, and those whose code needs the real ``int`` class."""
    out = []
    for name in _code_module_names(model):
        if name.startswith(("torch.", "fx2nnef.")) or name in ("torch", "builtins"):
            continue
        mod = sys.modules.get(name)
        if mod is None or mod in out or "int" in vars(mod):
            continue
        try:
            source = inspect.getsource(mod)
        except (OSError, TypeError):  # no source (built in, made by exec): nothing to look through
            continue
        if _NEEDS_REAL_INT.search(source):
            continue
        out.append(mod)
    return out


@contextlib.contextmanager
def size_casts(model):
    """While tracing ``model``: ``int`` of a traced number in its modules stays traced."""
    mods = _model_modules(model)
    for mod in mods:
        mod.int = TracedInt
    try:
        yield
    finally:
        for mod in mods:
            if vars(mod).get("int") is TracedInt:
                del mod.int
