"""Every converter accepts the argument names of the torch ops it is registered for.

A user may call any argument by keyword (``x.baddbmm(batch1=a, batch2=b, beta=0.5)``); the
emitter binds the call to the converter's signature, so a converter whose parameters are
named differently from torch's Python binding refuses a valid call. The names come from
torch itself: ``native_functions.yaml`` (what torch's Python bindings are generated from;
``self`` is ``input`` for functions and the receiver for methods), ``inspect.signature`` for
ops written in Python, and a short table for the few bindings torch writes by hand.
"""
from __future__ import annotations

import functools
import inspect
import os

import pytest
import torch
import torch.nn.functional as F
import yaml

import fx2nnef.nnef_emit.ops  # noqa: F401 - registers every converter
from fx2nnef.nnef_emit import REGISTRY
from fx2nnef.nnef_emit.emitter import _ALIASES
from harness import check_op, randn

# hand-written bindings (torch/csrc/autograd/python_variable_methods.cpp, python_torch_functions_manual.cpp):
# key -> overloads, each a list of (name, keyword_only)
_MANUAL = {
    "Tensor.to": [[("device", False), ("dtype", False), ("non_blocking", False), ("copy", False),
                   ("memory_format", True)],
                  [("dtype", False), ("non_blocking", False), ("copy", False), ("memory_format", True)],
                  [("tensor", False), ("non_blocking", False), ("copy", False), ("memory_format", True)]],
    "Tensor.type": [[("dtype", False), ("non_blocking", False)]],
    "Tensor.cpu": [[("memory_format", True)]],
    "Tensor.view": [[("dtype", False)], [("size", False)]],
    "Tensor.new_tensor": [[("data", False), ("dtype", True), ("device", True), ("requires_grad", True)]],
    "torch.tensor": [[("data", False), ("dtype", True), ("device", True), ("requires_grad", True),
                      ("pin_memory", True)]],
    "torch.as_tensor": [[("data", False), ("dtype", True), ("device", True)]],
    **{f"Tensor.{m}": [[("memory_format", True)]]
       for m in ("float", "half", "double", "bfloat16", "long", "int", "short", "char", "byte", "bool")},
}
# keyword names the emitter accepts without a parameter: `inplace` (every call is made functional)
_IGNORED = {"inplace"}
# overloads torch's binding generator leaves out of Python (tools/autograd/gen_python_functions.py)
_VARARGS = "*"  # stands for the *args of an op written in Python (einsum(*args)): anything goes there
_NOT_IN_PYTHON = {"add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar"}
_MODULES = (("torch.special.", torch.special, "special", "special_"), ("torch.linalg.", torch.linalg, "linalg", "linalg_"),
            ("torch.fft.", torch.fft, "fft", "fft_"), ("F.", F, "nn", ""), ("torch.", torch, None, ""))


@functools.lru_cache(maxsize=None)
def _native() -> dict:
    """Base op name -> [(variants, python_module, arguments)] for every overload torch binds in Python."""
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    with open(path) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    out: dict = {}
    for e in entries:
        schema = torch._C.parse_schema("aten::" + e["func"])
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue  # out= and in-place variants: torch folds them into `out=` or a `_` method
        if f"{schema.name.split('::')[1]}.{schema.overload_name}" in _NOT_IN_PYTHON:
            continue
        variants = {v.strip() for v in e.get("variants", "function").split(",")}
        name = schema.name.split("::")[1]
        out.setdefault(name, []).append((variants, e.get("python_module"), schema.arguments))
    return out


def _callable(key: str):
    """The torch object a registry key names, and whether it is a Tensor method."""
    if key.startswith("Tensor."):
        return getattr(torch.Tensor, key[len("Tensor."):], None), True
    for prefix, module, _, strip in _MODULES:
        if key.startswith(prefix):
            name = key[len(prefix):]
            obj = getattr(module, strip + name, None) or getattr(module, name, None)
            if obj is None and prefix == "F.":
                obj = getattr(torch._C._nn, name, None)
            return obj, False
    return None, False


def _python_overloads(obj, method: bool):
    """Overloads of an op written in Python (its own signature; both branches of a boolean dispatch)."""
    from torch._jit_internal import _try_get_dispatched_fn

    dispatched = _try_get_dispatched_fn(obj)
    fns = [dispatched["if_false"], dispatched["if_true"]] if dispatched else [obj]
    overloads = []
    for fn in fns:
        params = list(inspect.signature(fn).parameters.values())
        if method and params and params[0].name == "self":
            params = params[1:]
        overloads.append([(_VARARGS if p.kind is p.VAR_POSITIONAL else p.name, p.kind is p.KEYWORD_ONLY)
                          for p in params if p.kind is not p.VAR_KEYWORD])
    return overloads


def binding_overloads(key: str):
    """torch's Python signatures of the op ``key``: a list of overloads, each [(name, keyword_only)].

    None when ``key`` is not a torch function or Tensor method.
    """
    if key in _MANUAL:
        return _MANUAL[key]
    obj, method = _callable(key)
    if obj is None:
        return None
    if inspect.isfunction(obj):
        return _python_overloads(obj, method)
    name = key.split(".")[-1]
    module = None if method else next(m for p, _, m, _ in _MODULES if key.startswith(p))
    base = (next(s for p, _, _, s in _MODULES if key.startswith(p)) if not method else "") + name
    overloads = []
    for variants, python_module, arguments in _native().get(base, []):
        if ("method" if method else "function") not in variants or (not method and python_module != module):
            continue
        names = []
        for a in arguments:
            if a.name == "self" and method:
                continue
            if a.name == "self" and a.type.isSubtypeOf(torch._C.TensorType.get()):
                names.append(("input", False))
            else:
                names.append((a.name, a.kwarg_only))
        overloads.append(names)
    return overloads


def _source_rules():
    """(key, target, converter) for every rule whose key is a torch function or Tensor method."""
    return [(key, target, fn) for (key, target), fn in REGISTRY.rules()
            if key.startswith(("torch.", "Tensor.", "F.")) and fn.__module__.startswith("fx2nnef.")]


def signature_problems(key: str, fn) -> list:
    """How the converter ``fn`` disagrees with torch's Python signatures of ``key`` (empty: it agrees)."""
    overloads = binding_overloads(key)
    if overloads is None:
        return [f"'{key}' names no torch function or Tensor method"]
    if not overloads:
        return [f"no Python signature found for '{key}'"]
    params = list(inspect.signature(fn).parameters.values())[1:]  # after ctx
    by_name = {p.name: p for p in params}
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    method = key.startswith("Tensor.")
    problems = []
    for overload in overloads:
        if any(n == _VARARGS for n, _ in overload):
            continue
        for name, _ in overload:
            target = name if name in by_name else _ALIASES.get(name)
            if name == "out" or name in _IGNORED or var_kw:
                continue
            if target not in by_name or by_name[target].kind is inspect.Parameter.POSITIONAL_ONLY:
                problems.append(f"keyword '{name}' is not a parameter")
        # a call by keyword must not miss a parameter the converter requires
        names = {_ALIASES.get(n, n) for n, _ in overload} | {n for n, _ in overload}
        for p in params[1 if method else 0:]:
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names:
                problems.append(f"'{p.name}' is required here but torch's overload ({', '.join(n for n, _ in overload)}) "
                                "does not have it")
        # a call giving every positional argument of this overload must bind them in order
        pos = [n for n, kw_only in overload if not kw_only and n not in _IGNORED]
        # where torch's own overloads put different arguments at one position, the converter
        # tells them apart by type (``var(x, True)`` / ``var(x, 1)``)
        slots = positional[1:] if method else positional  # a method's receiver is not in torch's list
        for i, name in enumerate(pos):
            if i >= len(slots):
                if not var_pos:
                    problems.append(f"torch takes {len(pos)} positional arguments, this converter {len(slots)}")
                break
            ambiguous = any(len(o) > i and [n for n, k in o if not k][i:i + 1] == [slots[i]] for o in overloads)
            if name in by_name and slots[i] != name and by_name[name].kind is not inspect.Parameter.KEYWORD_ONLY \
                    and not ambiguous:
                problems.append(f"positional argument {i} is '{name}' in torch, '{slots[i]}' here")
    return sorted(set(problems))


@pytest.mark.parametrize("key,target,fn", _source_rules(), ids=lambda x: x if isinstance(x, str) else "")
def test_converter_matches_torch_signature(key, target, fn):
    problems = signature_problems(key, fn)
    where = f"{fn.__module__}.{fn.__qualname__} (target {target or 'common'})"
    assert not problems, f"{key}: {where}:\n  " + "\n  ".join(problems)


def test_checker_finds_a_wrong_name():
    def baddbmm(ctx, input, mat1, mat2, *, beta=1, alpha=1):
        return input

    assert "keyword 'batch1' is not a parameter" in signature_problems("Tensor.baddbmm", baddbmm)
    assert signature_problems("Tensor.baddbmm", REGISTRY.lookup("Tensor.baddbmm", "tract")) == []
