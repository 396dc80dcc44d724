"""The contents of a model's own tensors, put back after each run of its forward.

A forward that writes in place into a tensor the model keeps (a buffer, or a plain attribute that
is neither parameter nor buffer: ``y = self.table; y[..., idx] = 0``) changes it for every later
run. The export runs the forward many times (the trace, traces at other sizes, the reference
runs of the probes): each must start from the model as the user gave it, or a later trace reads
the earlier run's writes as the tensor's data (and bakes them into the graph), and the user's
model would leave the export changed. Parameters are left out (a copy of every weight would
double an LLM's memory); a forward that writes its weights is not undone.

The copies are taken before each run: buffers and such attributes are small beside the weights
that the run itself reads.
"""
from __future__ import annotations

import torch

from .structures import storage_keys, tensor_version


def _kept_tensors(module: torch.nn.Module):
    """The tensors ``module`` itself holds, other than parameters: buffers, and plain tensor
    attributes (also the items of a list, tuple or dict attribute)."""
    for t in module._buffers.values():
        if isinstance(t, torch.Tensor):
            yield t
    for name, value in module.__dict__.items():
        if name in ("_parameters", "_buffers", "_modules"):
            continue
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        for t in items:
            if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
                yield t


def tensor_contents(module: torch.nn.Module) -> list:
    """``(tensor, version, copy)`` for each tensor the modules of ``module`` hold (see the module's
    doc), for :func:`put_back`."""
    seen: set = set()
    out = []
    for m in module.modules():
        for t in _kept_tensors(m):
            version = tensor_version(t)
            if id(t) in seen or version is None or t.is_sparse or t.device.type == "meta":
                continue
            seen.add(id(t))
            with torch.no_grad():
                out.append((t, version, t.detach().clone()))
    return out


def put_back(contents: list) -> None:
    """Write back the contents of each tensor of ``contents`` that a run changed in place."""
    for t, version, copy in contents:
        if tensor_version(t) == version:
            continue
        with torch.no_grad():
            t.copy_(copy)


def apart_from(out, contents: list):
    """``out`` (nested lists, tuples, dicts of a run's outputs) with each tensor that lives in the
    memory of a tensor of ``contents`` the run changed replaced by a copy: a forward that returns
    the attribute it wrote (``return y`` of ``y = self.table``) keeps its result when the
    attribute is put back."""
    changed = {k for t, version, _ in contents if tensor_version(t) != version for k in storage_keys(t)}
    if not changed:
        return out

    def visit(obj):
        if isinstance(obj, torch.Tensor):
            return obj.detach().clone() if changed.intersection(storage_keys(obj)) else obj
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*(visit(x) for x in obj))
        if isinstance(obj, (list, tuple)):
            return type(obj)(visit(x) for x in obj)
        if isinstance(obj, dict):
            items = {k: visit(v) for k, v in obj.items()}
            try:
                return type(obj)(**items) if type(obj) is not dict else items
            except TypeError:
                return items
        return obj

    return visit(out)
