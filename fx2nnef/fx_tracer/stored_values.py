"""The model's own parameters with the values an asset stores for them (float16, Q4_0).

An asset that stores a weight in another format computes with other values than the model, and
one of a bfloat16 model computes in float32 (tract has no bfloat16).
The checks compare the engine with the model holding those values: :class:`StoredValues` is a
torch function mode under which every torch call that receives such a parameter gets its
stored values instead. Each parameter's values are decoded when a call uses them and dropped
after it: what is held is the compact form (Q4_0 codes and scales: a quarter of the float32
bytes; float16 values: half), never a second copy of the model. A parameter is found wherever
it is read (a parent module's code, a tied weight, a method call on it), not only in its own
module's ``forward``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from ..errors import InvalidArgumentError
from ..ir.weight_data import F16Data, Q4_0Data

# reading these from a parameter gives the same answer for its stored values: no decoding
_METADATA = frozenset(("shape", "dtype", "device", "ndim", "requires_grad", "layout", "is_leaf", "grad",
                       "grad_fn", "names", "is_cuda", "is_meta", "is_sparse", "is_quantized", "is_nested",
                       "itemsize", "nbytes", "size", "dim", "numel", "nelement", "ndimension", "stride",
                       "data_ptr", "element_size", "is_contiguous", "is_floating_point", "is_complex",
                       "get_device", "storage_offset", "__len__", "__hash__", "__repr__", "__format__"))


def _name(func) -> str:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and owner is not None:
        return getattr(owner, "__name__", "")  # a property of Tensor: its descriptor's name
    return getattr(func, "__name__", "")


def _decoder(value, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """A function giving the stored values of the constant ``value`` as a ``dtype`` tensor, from a
    compact form: ``decode()`` all of them, ``decode(index)`` those of the rows ``index`` (float16
    values decoded for those rows only)."""
    data = value.source
    if isinstance(data, Q4_0Data):
        codes, scales = (torch.from_numpy(a) for a in data.codes())
        stored_shape, transposed = data.stored_shape, data.transposed

        def decode(index=None) -> torch.Tensor:
            # the engine's values in float32 (multiplied in place), then the model's dtype
            if index is None or transposed or len(stored_shape) != 2:
                values = codes.to(torch.float32).mul_(scales).reshape(stored_shape)
                values = (values.mT if transposed else values).to(dtype)
                return values if index is None else values[index]
            rows, cols = stored_shape  # the blocks of row r follow each other: decode those read only
            picked = codes.view(rows, -1, codes.shape[-1])[index]
            values = picked.to(torch.float32).mul_(scales.view(rows, -1, 1)[index])
            return values.reshape(*picked.shape[:-2], cols).to(dtype)
        return decode
    if isinstance(data, F16Data):
        half = torch.from_numpy(np.ascontiguousarray(data.numpy()))
        return lambda index=None: (half if index is None else half[index]).to(dtype)
    values = torch.from_numpy(np.array(value.data)).to(dtype)  # another format: decoded once
    return lambda index=None: values if index is None else values[index]


def upcast(tensor: torch.Tensor) -> Callable[..., torch.Tensor]:
    """The decoder of a bfloat16 tensor read as float32 (all of it, or the rows ``index``)."""
    return lambda index=None: (tensor if index is None else tensor[index]).to(torch.float32)


# a linear layer's decoded weight is made and used this many elements at a time (32 MB of float32)
LINEAR_BLOCK = 8 * 2**20


def _blocked_linear(decode, rows: int, x: torch.Tensor, bias) -> torch.Tensor:
    """``F.linear(x, decode(), bias)`` with the weight decoded a block of rows (output
    features) at a time: a large matrix (a vocabulary's) is never decoded whole."""
    step = max(1, LINEAR_BLOCK // max(1, x.shape[-1]))
    parts = [torch.nn.functional.linear(x, decode(slice(r, r + step)), None if bias is None else bias[r:r + step])
             for r in range(0, rows, step)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


class StoredValues(TorchFunctionMode):
    """Within ``with``, torch calls read other values for some tensors of a model (stored values,
    float32 for bfloat16), given by ``{id(tensor): (tensor, decoder, dtype)}``; reading such a
    tensor's ``dtype`` answers ``dtype``. The tensors themselves are not changed."""

    def __init__(self, table: dict):
        super().__init__()
        self.table = table

    def __bool__(self) -> bool:
        return bool(self.table)

    def _entry(self, x):
        hit = self.table.get(id(x)) if isinstance(x, torch.Tensor) else None
        return hit if hit is not None and hit[0] is x else None

    def _swap(self, x):
        hit = self._entry(x)
        return x if hit is None else hit[1]()

    def _by_rows(self, func, args: tuple, kwargs: dict):
        """An embedding lookup decodes the rows it reads, a linear layer its weight a block of
        rows at a time (:func:`_blocked_linear`); None for any other call."""
        if func is torch.nn.functional.embedding and len(args) == 2 and kwargs.get("max_norm") is None:
            hit = self._entry(args[1])
            if hit is not None and isinstance(args[0], torch.Tensor) and self._entry(args[0]) is None:
                return hit[1](args[0])
        if _name(func) == "linear" and len(args) >= 2 and self._entry(args[1]) is not None:
            x, weight = args[0], args[1]
            bias = self._swap(args[2] if len(args) > 2 else kwargs.get("bias"))
            if isinstance(x, torch.Tensor) and weight.dim() == 2 and self._entry(x) is None:
                return _blocked_linear(self._entry(weight)[1], weight.shape[0], x, bias)
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name == "dtype" and len(args) == 1 and self._entry(args[0]) is not None:
            return self._entry(args[0])[2]
        if name in ("embedding", "linear"):
            done = self._by_rows(func, args, kwargs)
            if done is not None:
                return done
        if name not in _METADATA:
            args, kwargs = tree_map(self._swap, (args, kwargs))
        return func(*args, **kwargs)


def stored_values(model: torch.nn.Module, stored: Sequence = (), upcast_bfloat16: bool = False) -> StoredValues:
    """The :class:`StoredValues` of ``model`` for the constants ``stored`` (IR values whose source
    is a parameter of ``model`` by its path), decoded to the parameter's dtype; with
    ``upcast_bfloat16``, every bfloat16 parameter and buffer reads as float32 (and stored values of
    a bfloat16 parameter are given in float32, not rounded to bfloat16)."""
    table = {}
    if upcast_bfloat16:
        for t in list(model.parameters()) + list(model.buffers()):
            if t.dtype == torch.bfloat16:
                table[id(t)] = (t, upcast(t), torch.float32)
    for v in stored:
        path = getattr(v.source, "parameter_path", None)
        param = model.get_parameter(path)
        if tuple(v.source.shape) != tuple(param.shape):
            raise InvalidArgumentError(f"stored values of {path} have shape {list(v.source.shape)}, the parameter "
                                       f"{list(param.shape)}: the checks cannot use them")
        dtype = torch.float32 if upcast_bfloat16 and param.dtype == torch.bfloat16 else param.dtype
        table[id(param)] = (param, _decoder(v, dtype), dtype)
    return StoredValues(table)
