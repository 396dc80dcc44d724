"""Contents of constant tensors, read only when needed.

A constant :class:`fx2nnef.ir.Value` holds a :class:`TensorData`: its shape, its IR dtype,
and ways to read it: :meth:`TensorData.numpy` for converters that compute on it, and
:meth:`TensorData.chunks` for writers that stream its bytes to a file. The tracer provides
implementations that refer to the model's own parameters (no copy); :class:`ArrayData`
wraps a numpy array (constants made by converters and by tests).
"""
from __future__ import annotations

import abc
import math
from typing import Iterator

import numpy as np

from .dtypes import DType

DEFAULT_CHUNK_BYTES = 1 << 22


class TensorData(abc.ABC):
    """A constant tensor: ``shape``, ``dtype`` (the IR dtype of the values it yields) and its data."""

    shape: tuple
    dtype: DType
    # the model attribute holding it (e.g. "layers.0.mlp.up.weight") when it is a parameter
    parameter_path: "str | None" = None
    # how it is written when not as plain ``dtype`` items ("f16", "q4_0"; see weight_data)
    stored_format: "str | None" = None
    # the parameters it was computed from, for a constant folded from them (``w.T``)
    derived_from: frozenset = frozenset()

    @property
    def size(self) -> int:
        """Number of items."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the data in ``dtype`` (one byte per bool)."""
        return self.size * np.dtype(self.dtype.numpy_name).itemsize

    @abc.abstractmethod
    def numpy(self) -> np.ndarray:
        """The values as a C-contiguous array of ``dtype`` and ``shape``. It may share memory with
        the source (e.g. a model parameter): never modify it."""

    def chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        """The data's bytes, row-major, little-endian, in pieces of at most about ``max_bytes``.

        A piece may be overwritten once the next one is requested: write or copy it first.
        The default reads :meth:`numpy`; sources that must convert or gather their data
        override it so that only one piece at a time is held in memory.
        """
        yield from array_chunks(self.numpy(), max_bytes)

    def row_chunks(self, start: int, stop: int, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        """The bytes of rows ``start:stop`` (along the first axis), as :meth:`chunks` gives them.
        The default cuts them out of :meth:`chunks`; sources that convert their data override it
        so that only those rows are read."""
        row = self.nbytes // self.shape[0]
        begin, end, at = start * row, stop * row, 0
        for piece in self.chunks(max_bytes):
            size = len(piece)
            if at + size > begin and at < end:
                yield piece[max(begin - at, 0):min(end - at, size)]
            at += size
            if at >= end:
                return

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype.value}{list(self.shape)})"


class ArrayData(TensorData):
    """A numpy array as constant data (kept as given when already C-contiguous)."""

    def __init__(self, array: np.ndarray):
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = np.array(array, order="C")  # np.ascontiguousarray would turn rank 0 into [1]
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = DType.from_numpy(array.dtype)

    def numpy(self) -> np.ndarray:
        return self.array


class ReshapedData(TensorData):
    """``base``'s data under another shape of the same size (a weight given leading unit axes for
    a matmul): its bytes are ``base``'s, read from it when written; nothing is copied."""

    def __init__(self, base: TensorData, shape: tuple):
        if math.prod(shape) != base.size:
            raise ValueError(f"cannot view {list(base.shape)} as {list(shape)}")
        self.base = base
        self.shape = tuple(int(d) for d in shape)
        self.dtype = base.dtype

    def numpy(self) -> np.ndarray:
        return self.base.numpy().reshape(self.shape)

    def chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        return self.base.chunks(max_bytes)


class RowsData(TensorData):
    """Rows ``start:stop`` of ``base`` (its first axis): a block of a weight matrix. Its bytes are
    a contiguous range of ``base``'s, read from it when written; nothing is copied."""

    def __init__(self, base: TensorData, start: int, stop: int):
        if not 0 <= start < stop <= base.shape[0]:
            raise ValueError(f"rows {start}:{stop} are not within {list(base.shape)}")
        self.base = base
        self.start, self.stop = int(start), int(stop)
        self.shape = (self.stop - self.start,) + tuple(base.shape[1:])
        self.dtype = base.dtype
        self.parameter_path = base.parameter_path

    def numpy(self) -> np.ndarray:
        return self.base.numpy()[self.start:self.stop]

    def chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        return self.base.row_chunks(self.start, self.stop, max_bytes)


def array_chunks(array: np.ndarray, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
    """Row-major little-endian bytes of ``array`` in pieces of at most ``max_bytes`` (views when the
    array is C-contiguous and little-endian, else converted piece by piece)."""
    flat = array.reshape(-1)  # a view for C-contiguous arrays
    itemsize = max(flat.dtype.itemsize, 1)
    step = max(1, max_bytes // itemsize)
    little = flat.dtype.newbyteorder("<")
    for start in range(0, flat.size, step):
        piece = flat[start:start + step]
        if piece.dtype != little:
            piece = piece.astype(little)
        yield memoryview(np.ascontiguousarray(piece).view(np.uint8))
