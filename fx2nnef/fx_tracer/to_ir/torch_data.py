"""Constant data of the IR read from torch tensors, without a copy of the model's weights.

Parameters are referred to, not copied: their bytes go from the tensor's storage to the
``.dat`` file when the asset is written. bfloat16 (which tract lacks) is converted to float32
piece by piece while writing, so neither a float32 copy nor a copy of the model exists at once.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from ...errors import TraceError
from ...ir import DType, TensorData
from ...ir.tensor_data import DEFAULT_CHUNK_BYTES, array_chunks
from ..tracing.structures import tensor_version

_TORCH_TO_IR = {
    torch.float16: DType.F16, torch.bfloat16: DType.BF16, torch.float32: DType.F32,
    torch.float64: DType.F64, torch.int8: DType.I8, torch.int16: DType.I16, torch.int32: DType.I32,
    torch.int64: DType.I64, torch.uint8: DType.U8, torch.bool: DType.BOOL,
}


def ir_dtype(dtype: torch.dtype) -> DType:
    try:
        return _TORCH_TO_IR[dtype]
    except KeyError:
        raise TraceError(f"dtype {dtype} has no NNEF equivalent") from None


# Tensors that are not parameters and at most this large are copied when the IR is built: a
# forward may update a buffer in place (counters, caches) after the trace has read it.
SNAPSHOT_BYTES = 1 << 24


class TorchData(TensorData):
    """A torch tensor as IR constant data; a bfloat16 tensor reads as float32."""

    def __init__(self, tensor: torch.Tensor, name: str):
        self.parameter_path = name if isinstance(tensor, torch.nn.Parameter) else None
        tensor = tensor.detach()
        self._tensor = tensor
        self.name = name
        self.shape = tuple(tensor.shape)
        self.dtype = DType.F32 if tensor.dtype == torch.bfloat16 else ir_dtype(tensor.dtype)
        self._version = tensor_version(tensor)

    def numpy(self) -> np.ndarray:
        t = self._checked().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.contiguous().numpy()

    def chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        return _tensor_chunks(self._checked(), max_bytes)

    def row_chunks(self, start: int, stop: int, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        t = self._checked()
        return _tensor_chunks(t[start:stop], max_bytes) if t.dim() else super().row_chunks(start, stop, max_bytes)

    def _checked(self) -> torch.Tensor:
        if self._version is not None and tensor_version(self._tensor) != self._version:
            raise TraceError(
                f"tensor '{self.name}' {list(self.shape)} was modified in place after the model was traced "
                "(by a later run of the model during the export?); its traced value is lost. Keep the model's "
                "parameters unchanged while exporting, or make the forward not update them in place")
        return self._tensor


def _tensor_chunks(t: torch.Tensor, max_bytes: int) -> Iterator[memoryview]:
    """Row-major bytes of ``t`` (a bfloat16 tensor as float32) in pieces of at most about ``max_bytes``."""
    if t.device.type == "cpu" and t.dtype != torch.bfloat16 and t.is_contiguous():
        yield from array_chunks(t.numpy(), max_bytes)
        return
    rows = t.reshape(-1) if t.dim() <= 1 else t  # pieces are slices along dim 0: row-major order
    out_dtype = torch.float32 if t.dtype == torch.bfloat16 else t.dtype
    row_numel = max(1, rows[0].numel()) if len(rows) else 1
    step = max(1, max_bytes // (row_numel * torch.empty((), dtype=out_dtype).element_size()))
    # one buffer reused for every piece: allocating a piece each time fragments the heap
    buffer = torch.empty(min(step, rows.shape[0]) * row_numel, dtype=out_dtype)
    for start in range(0, rows.shape[0], step):
        piece = rows[start:start + step]
        out = buffer[:piece.numel()].view(piece.shape)
        out.copy_(piece)
        yield from array_chunks(out.numpy(), max_bytes)


def torch_data(tensor: torch.Tensor, name: str) -> TensorData:
    """IR data for ``tensor``: parameters and large tensors are referred to (checked unchanged when
    read), small other tensors are copied now."""
    if not isinstance(tensor, torch.nn.Parameter) and tensor.numel() * tensor.element_size() <= SNAPSHOT_BYTES:
        tensor = tensor.detach().clone()
    return TorchData(tensor, name)
