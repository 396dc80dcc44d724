"""``int()``, ``float()``, ``math.ceil``, ``math.floor``, ``math.trunc``, ``max`` and ``min`` of
Python numbers computed from traced sizes stay traced.

A model that pads or resizes to a multiple of its patch size computes the target in Python:
``int(math.ceil(h / p) * p)`` (MobileViT), ``int(w * 0.5)``. Read as plain numbers, these fixed
the graph to the example's size (``interpolate(x, size=(16, 12))``), valid at that size only.
Recorded instead, they are graph nodes like the sizes they come from, which the fake replay
turns into floor divisions (``ceil(h / 4) * 4`` is ``(h + 3) // 4 * 4``).

``math.ceil`` and friends call the proxy's ``__ceil__`` (:func:`.proxy.rounding`). ``int(x)`` cannot
return a proxy (Python checks the type of ``__int__``'s result), so while tracing, the name
``int`` in the global namespaces of the model's code (the modules or notebook cells defining its
submodules' methods, where their forwards read it) is a stand-in class (:data:`TracedInt`):
``int(size proxy)`` gives the traced number, any other call is the builtin's, and
``isinstance(3, int)`` still holds. ``float`` likewise (:data:`TracedFloat`): ``x + float(x.shape[0])``
read as a plain number kept the example's size in the graph, which probes tell from the model
only on values where it matters (a clamp hides it elsewhere). Code that tests ``type(x) is int``
or passes ``int`` as a dtype keeps the builtin (each name on its own), and so does code with no
source to look through (made by ``exec``).

``max`` and ``min`` of sizes (``max(1, S // 2)``, ``min(x.shape[1], window)``) are stand-ins in the
same modules: read as the builtins, they compare, and the comparison is a decision on the size
whose flip bounds the range. Recorded as ``torch.sym_max``/``sym_min``, they are extrema of
symbols in the fake replay, which tract reads in sizes (:meth:`..ir.dims.SymDim.extremum`).
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import math
import operator
import re
import sys

import torch

from .proxy import SizeTuple, _traced_number

_builtin_int = builtins.int
_builtin_isinstance = builtins.isinstance
_builtin_issubclass = builtins.issubclass

_builtin_float = builtins.float


def _needs_real(name: str):
    """Code that needs the real class ``name``: identity and equality tests, the class as a dtype."""
    return re.compile(rf"\bis\s+(not\s+)?{name}\b|[=!]=\s*{name}\b|\bdtype\s*=\s*{name}\b|"
                      rf"\.(to|type|astype)\(\s*{name}\s*\)|issubdtype\(")


_NEEDS_REAL = {"int": _needs_real("int"), "float": _needs_real("float")}


def traced_int(x):
    """``int(x)`` of a traced number: ``x`` itself for an int, ``math.trunc(x)`` for a float."""
    if _builtin_isinstance(x.value, _builtin_int):
        return x
    return x.tracer.create_proxy("call_function", math.trunc, (x,), {})


def traced_float(x):
    """``float(x)`` of a traced number: ``x`` itself for a float, ``x * 1.0`` for an int."""
    if _builtin_isinstance(x.value, _builtin_int):
        return x.tracer.create_proxy("call_function", operator.mul, (x, 1.0), {})
    return x


def _size_int(x) -> bool:
    """A plain int, or a traced int computed from sizes (not from data)."""
    return type(x) is _builtin_int or (_traced_number(x) and type(x.value) is _builtin_int)


def _extremum(builtin, traced):
    """A stand-in for ``max`` or ``min`` (``builtin``): of ints and at least one traced size
    (``max(1, S // 2)``, ``min(x.shape[1], 4)``, ``min((h, w))``) it records ``traced``
    (``torch.sym_max``/``sym_min``, which are the builtin on ints and an extremum of symbols in
    the fake replay), any other call is the builtin's. Read as the builtin, the comparison
    inside is a decision on the size, whose flip bounds the range."""
    def stand_in(*args, **kwargs):
        items = args[0] if len(args) == 1 and type(args[0]) in (tuple, list, SizeTuple) else args
        if kwargs or len(items) < 2 or all(type(x) is _builtin_int for x in items) \
                or not all(_size_int(x) for x in items):
            return builtin(*args, **kwargs)
        if _in_for_loop(sys._getframe(1)):
            # in a loop's body (CANINE's chunks: min(S, start + width) at each step), a decision per
            # step, as the builtin: a loop over a size rolls into a scan only when its steps' numbers
            # are plain, and where its count changes, the steps' decisions flip too
            return builtin(*args, **kwargs)
        tracer = next(x.tracer for x in items if type(x) is not _builtin_int)
        out = items[0]
        for x in items[1:]:
            out = tracer.create_proxy("call_function", traced, (out, x), {})
        return out

    stand_in.__name__ = builtin.__name__
    stand_in.__doc__ = builtin.__doc__
    return stand_in


_LOOP_SPANS: dict = {}  # code object -> [(start, end)] bytecode offsets of its for loops' bodies


def _in_for_loop(frame) -> bool:
    """Whether ``frame`` runs the body of one of its ``for`` loops (the iterator's expression, run
    before the loop, is not in it)."""
    import dis

    code = frame.f_code
    spans = _LOOP_SPANS.get(code)
    if spans is None:
        spans = [(i.offset, i.argval) for i in dis.get_instructions(code)
                 if i.opname == "FOR_ITER" and _builtin_isinstance(i.argval, _builtin_int)]
        _LOOP_SPANS[code] = spans
    return any(start < frame.f_lasti < end for start, end in spans)


class _StandInType(type):
    """The metaclass of :data:`TracedInt` and :data:`TracedFloat`: instance and subclass checks
    are the builtin's; a call on a traced number records it, any other call is the builtin's."""

    def __instancecheck__(cls, obj):
        return _builtin_isinstance(obj, cls._builtin)

    def __subclasscheck__(cls, sub):
        return _builtin_issubclass(sub, cls._builtin)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and _traced_number(args[0]):
            return cls._traced(args[0])
        return cls._builtin(*args, **kwargs)

    def __getattr__(cls, name):  # int.from_bytes, float.fromhex, ...
        return getattr(cls._builtin, name)

    def __repr__(cls):
        return f"<class '{cls._builtin.__name__}'>"


class TracedInt(metaclass=_StandInType):
    """Stands for ``int`` in the model's modules while tracing (see the module's notes)."""

    _builtin = _builtin_int
    _traced = staticmethod(traced_int)


class TracedFloat(metaclass=_StandInType):
    """Stands for ``float`` in the model's modules while tracing (see the module's notes)."""

    _builtin = _builtin_float
    _traced = staticmethod(traced_float)


_STAND_INS = {"int": TracedInt, "float": TracedFloat,
              "max": _extremum(builtins.max, torch.sym_max), "min": _extremum(builtins.min, torch.sym_min)}


def _library(module_name) -> bool:
    """Whether code of the module ``module_name`` is torch's or ours (no stand-in goes there)."""
    return isinstance(module_name, str) and module_name.split(".")[0] in ("torch", "fx2nnef")


def _code_functions(model) -> list:
    """The Python functions whose globals ``model``'s forwards read: those its submodules' classes
    define (forward and its helpers), those of the class each one's forward comes from (inherited
    from a class of another module), and the functions its modules hold (``self.fn = f``, called
    in forward). Mixins along the hierarchy (transformers' PreTrainedModel) are not looked through."""
    found: dict = {}
    for m in model.modules():
        cls = type(m)
        owner = next((c for c in cls.__mro__ if "forward" in vars(c)), cls)
        for cls in dict.fromkeys((cls, owner)):
            if _library(cls.__module__):
                continue
            for v in vars(cls).values():
                v = getattr(v, "__func__", v)  # static and class methods
                if inspect.isfunction(v):
                    found.setdefault(id(v), v)
        for v in vars(m).values():
            if inspect.isfunction(v):
                found.setdefault(id(v), v)
    return list(found.values())


def _model_namespaces(model) -> dict:
    """name -> the global namespaces (a module's dict, or the dict a class was exec'd in: a
    notebook's cell, generated code) whose code ``model`` runs (:func:`_code_functions`), except
    torch's and ours, and those whose code needs the real class of that name (or defines it).
    The code looked through is the module's source, else the functions' own (a notebook's cells,
    through linecache); with none, only ``max`` and ``min`` are stood in (no test needs the real
    one)."""
    spaces: dict = {}  # id -> (namespace, [functions])
    for fn in _code_functions(model):
        ns = fn.__globals__
        if _library(ns.get("__name__")):
            continue
        spaces.setdefault(id(ns), (ns, []))[1].append(fn)
    out: dict = {name: [] for name in _STAND_INS}
    for ns, fns in spaces.values():
        source = _source_of(sys.modules.get(ns.get("__name__")), ns, fns)
        for name, found in out.items():
            if name in ns:
                continue  # the code defines or imports that name itself
            if name in _NEEDS_REAL and (source is None or _NEEDS_REAL[name].search(source)):
                continue
            found.append(ns)
    return out


def _source_of(mod, ns: dict, fns: list):
    """The code of a namespace: its module's source when that is the namespace, else the source
    of its functions ``fns`` that have one; None when none has."""
    if mod is not None and vars(mod) is ns:
        try:
            return inspect.getsource(mod)
        except (OSError, TypeError):  # no file (a notebook's __main__): its functions' own source
            pass
    parts = []
    for fn in fns:
        try:
            parts.append(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
    return "\n".join(parts) if parts else None


@contextlib.contextmanager
def size_casts(model):
    """While tracing ``model``: ``int``, ``float``, ``max`` and ``min`` of traced numbers in its
    code's namespaces stay traced."""
    spaces = _model_namespaces(model)
    for name, stand_in in _STAND_INS.items():
        for ns in spaces[name]:
            ns[name] = stand_in
    try:
        yield
    finally:
        for name, stand_in in _STAND_INS.items():
            for ns in spaces[name]:
                if ns.get(name) is stand_in:
                    del ns[name]
