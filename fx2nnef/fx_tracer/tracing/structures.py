"""Flatten nested inputs and outputs (tuples, lists, dicts, dataclasses, ModelOutput, KV caches)
into named tensors, and rebuild them.

Names join the path with underscores: ``x``, ``pair_0``, ``d_key``, ``past_key_values_0_key``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor


def is_proxy(x) -> bool:
    return isinstance(x, fx.Proxy)


def _is_tensor_like(x) -> bool:
    return isinstance(x, torch.Tensor) or is_proxy(x)


def _stands_for_number(x) -> bool:
    """Whether ``x`` is a proxy of a Python number or size (``h.shape[1]``, ``x.size()`` on a
    dynamic dim): the model returns a plain number there, which no engine output holds and which
    the model's own outputs, flattened, leave out too; the outputs must pair up one to one."""
    return is_proxy(x) and isinstance(getattr(x, "value", None), (bool, int, float, torch.Size))


def has_tensor(obj) -> bool:
    """Whether a value, or any item of the tuples, lists and dicts it nests, is a torch tensor."""
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return any(has_tensor(x) for x in obj)
    if isinstance(obj, dict):
        return any(has_tensor(x) for x in obj.values())
    return False


def same_value(a, b) -> bool:
    """Whether two traced constants are equal: tensors of the same shape, dtype and items, or
    Python values of the same type that compare equal."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and a.dtype == b.dtype and bool(torch.equal(a, b))
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare are different
        return False


def data_less(value):
    """``value`` with its tensors (inside plain tuples and lists too) replaced by data-less
    stand-ins of the same shape, strides and dtype (meta tensors); anything else as it is."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta" or isinstance(value, torch.nn.Parameter):
            return value
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if type(value) in (tuple, list):
        return type(value)(data_less(v) for v in value)
    return value


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system. glibc keeps them otherwise, so the
    allocations of a later step add to the process's peak instead of reusing them: called once
    the trace's values are dropped."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def _cache_layers(obj):
    """(keys, values) pairs of a transformers cache object, or None if obj is not one."""
    layers = getattr(obj, "layers", None)
    if layers is not None and all(hasattr(l, "keys") and hasattr(l, "values") for l in layers):
        return [(l.keys, l.values) for l in layers if getattr(l, "keys", None) is not None]
    if hasattr(obj, "key_cache") and hasattr(obj, "value_cache"):
        return list(zip(obj.key_cache, obj.value_cache))
    return None


def flatten(obj, prefix: str) -> list:
    """All tensors (or proxies) inside ``obj`` as ``[(name, tensor)]`` in a stable order."""
    out: list = []
    _walk(obj, prefix, out.append)
    return out


def _join(prefix, key) -> str:
    return f"{prefix}_{key}" if prefix else str(key)


def _proxy_structure(obj):
    """A proxy standing for a tuple/list/dict (e.g. a leaf module's result): its items as proxies."""
    if not is_proxy(obj):
        return None
    value = obj.value
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [obj[i] for i in range(len(value))]
    if isinstance(value, dict):
        return {k: obj[k] for k in value}
    return None


def _walk(obj, prefix: str, emit: Callable) -> None:
    items = _proxy_structure(obj)
    if items is not None:
        _walk(items, prefix, emit)
    elif _is_tensor_like(obj):
        if not _stands_for_number(obj):
            emit((prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, _join(prefix, k), emit)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _walk(v, _join(prefix, i), emit)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _walk(getattr(obj, f.name), _join(prefix, f.name), emit)
    else:
        layers = _cache_layers(obj)
        if layers is not None:
            for i, (k, v) in enumerate(layers):
                _walk(k, _join(prefix, f"{i}_key"), emit)
                _walk(v, _join(prefix, f"{i}_value"), emit)


def rebuild(obj, replace: Callable[[str, Any], Any], prefix: str = "") -> Any:
    """A copy of ``obj`` with every tensor replaced by ``replace(name, tensor)``."""
    if _is_tensor_like(obj):
        return replace(prefix, obj)
    if isinstance(obj, dict):
        items = {k: rebuild(v, replace, _join(prefix, k)) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        try:
            return type(obj)(**items)
        except TypeError:
            new = type(obj)()
            new.update(items)
            return new
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[rebuild(v, replace, _join(prefix, i)) for i, v in enumerate(obj)])
    if isinstance(obj, (list, tuple)):
        return type(obj)(rebuild(v, replace, _join(prefix, i)) for i, v in enumerate(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: rebuild(getattr(obj, f.name), replace, _join(prefix, f.name))
                   for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    layers = _cache_layers(obj)
    if layers is not None:
        return _rebuild_cache(obj, [
            (rebuild(k, replace, _join(prefix, f"{i}_key")), rebuild(v, replace, _join(prefix, f"{i}_value")))
            for i, (k, v) in enumerate(layers)])
    return obj


def _rebuild_cache(obj, pairs):
    cls = type(obj)
    try:
        return cls(ddp_cache_data=pairs)
    except TypeError:
        new = cls()
        for i, (k, v) in enumerate(pairs):
            new.update(k, v, i)
        return new


def tensor_version(t: torch.Tensor) -> "int | None":
    """``t``'s version counter (it moves on every in-place change), None where it has none."""
    try:
        return t._version
    except RuntimeError:  # inference-mode tensors keep no version counter
        return None


def storage_keys(value) -> tuple:
    """Identities of the memory blocks that the tensors in ``value`` live in (torch's aliasing)."""
    if isinstance(value, torch.Tensor):
        try:
            storage = value.untyped_storage()
            ptr = storage.data_ptr()
        except Exception:  # noqa: BLE001 - storage-less tensors
            return ()
        if not ptr and value.numel() == 0 and value.device.type != "meta" and not isinstance(value, FakeTensor):
            # memory of no bytes (an empty example: x of shape (0, 3)) has no address; the storage
            # object tells its views (x.reshape(-1), x[None]) from other empty tensors, so that a
            # write to one reaches the others at the sizes where they are not empty
            return (("empty", storage._cdata),)
        return (ptr,) if ptr and value.numel() > 0 else ()
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return tuple(dict.fromkeys(k for v in value for k in storage_keys(v)))
    return ()
