"""A model's floating tensors cast to another float type without a second copy of the model.

``model.to(dtype)`` makes each converted tensor anew and frees the old one; with weights read
memory-mapped from a folder (transformers' ``from_pretrained``), the old pages stay mapped
until the last tensor of the file is gone, so the peak holds the stored weights and the
converted ones at once (twice the weights for bfloat16 to float16). Between two 2-byte types
:func:`cast_in_place` writes each converted value over its own bytes instead: a tensor that
owns its whole storage is converted there (its memory-mapped pages become the process's
own as they are written, one for one), and the tensor then reads the same storage as the new
type. Any other tensor (a view sharing a storage, another element size) is converted the
ordinary way, one tensor at a time.
"""
from __future__ import annotations

import torch

_TWO_BYTES = (torch.float16, torch.bfloat16)


def cast_in_place(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``model.to(dtype)`` for its floating parameters and buffers, over their own memory where
    the two types have the same size (see the module's docstring); returns ``model``."""
    converted: set = set()  # data pointers of the storages converted in place
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if not tensor.is_floating_point() or tensor.dtype == dtype:
                continue  # done already (a tied weight met again), or not a float
            same_size = tensor.dtype in _TWO_BYTES and dtype in _TWO_BYTES
            storage = tensor.untyped_storage().data_ptr()
            if same_size and storage in converted:  # another tensor over these bytes converted them
                tensor.data = tensor.data.view(dtype)
            elif same_size and _owns_storage(tensor):
                target = tensor.data.view(dtype)
                target.copy_(tensor.data)  # element k read, then written over its own two bytes
                tensor.data = target
                converted.add(storage)
            else:
                tensor.data = tensor.data.to(dtype)
    return model.to(dtype)  # what is left (nothing above), and the model's own bookkeeping


def _owns_storage(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is contiguous and covers its whole storage (no other view reads part of it)."""
    storage = tensor.untyped_storage()
    return (tensor.is_contiguous() and tensor.storage_offset() == 0
            and storage.nbytes() == tensor.numel() * tensor.element_size())
