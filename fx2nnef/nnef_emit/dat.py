"""The NNEF ``.dat`` tensor file: a 128-byte header, then the raw row-major data.

Header layout, all integers little-endian:

======  =================================================================
offset  field
======  =================================================================
0       magic bytes ``4E EF``
2       version major 1, minor 0 (one byte each)
4       u32 data length in bytes
8       u32 rank (0 to 8)
12      u32 dims[8] (unused dims are 0)
44      u32 bits per item
48      u32 item type: 0 float, 1 uint, 2 quantized uint, 3 quantized int,
        4 int, 5 bool
52      zero padding up to byte 128
======  =================================================================

Facts checked by loading a ``variable`` with tract 0.23.9 and nnef 1.0.10 / nnef_tools 1.0.11:

- float16/32/64, int8/16/32/64 and uint8/16/32/64 load in both engines. tract keeps the
  dtype; the nnef_tools PyTorch interpreter computes floats in f32 and every integer type
  in i64 (its ``NNEFModule.normalize_dtype``).
- Bools: tract reads 8 bits per item (what tract itself writes) and 1-bit packing; the
  Khronos reader (``nnef.read_tensor``) only takes 1 bit per item, packed MSB first, and
  rejects 8 bits with "unsupported combination of item type (5) and bits per item (8)".
  Use ``bool_bits=1`` for an asset both must read.
- Rank 0: a rank-0 header (no dims, one item of data) loads in both as a scalar when the
  ``variable`` is declared ``shape = []``. Both check the file's shape against the
  declaration exactly: a rank-0 file declared ``[1]``, or a ``[1]`` file declared ``[]``,
  fails ("tensor file says [], graph files says [1]" in tract, "shape [] in variable file
  does not match shape [1] defined in network structure" in nnef). :func:`dat_bytes` keeps
  the rank of the array, so declare the variable with the array's own shape. (Beware:
  ``np.ascontiguousarray`` turns a 0-d array into shape ``(1,)``.)
- A tensor with a zero dim (shape ``[0, 3]``, no data) loads in both.

tract's own item types (its ``nnef/src/tensors.rs``) split the u32 at offset 48 into a u16
item type and, at offset 50, a u16 vendor code ``0x5452`` ("TR"). Q4_0 weights
(see :mod:`fx2nnef.ir.weight_data`) are item type ``0x3040`` (GGML block layout), bits per
item ``0xFFFFFFFF``, data length ``rows * k / 32 * 18``; the dims are the tensor's own (2-D,
tract reads ``dims[0]`` rows of ``product(dims[1:])`` values). tract loads such a variable as
an f32 tensor that ``matmul``, ``linear`` and ``unsqueeze`` take, and ``tract_core_gather``
takes when given ``datum_type``; a ``tract_core_cast`` or ``slice`` of it aborts the process
(tract 0.23.9). Only tract reads it.
"""
from __future__ import annotations

import struct
from typing import Iterator

import numpy as np

from fx2nnef.errors import EmitError, InvalidArgumentError
from fx2nnef.ir import ArrayData, TensorData
from fx2nnef.ir.weight_data import Q4_0_BLOCK_LEN, dequantize_q4_0, q4_0_size

HEADER_SIZE = 128
MAX_RANK = 8
MAGIC = b"\x4e\xef"
VERSION = (1, 0)

ITEM_FLOAT = 0
ITEM_UINT = 1
ITEM_QUINT = 2
ITEM_QINT = 3
ITEM_INT = 4
ITEM_BOOL = 5
TRACT_VENDOR = (ord("T") << 8) | ord("R")
TRACT_ITEM_Q4_0 = 0x3040
_BLOCK_QUANT_BITS = 0xFFFFFFFF

# magic(2s) major(B) minor(B) data_length(I) rank(I) dims(8I) bits(I) item_type(I)
_HEADER = struct.Struct("<2sBBII8III")

_ITEM_TYPE_OF_KIND = {"f": ITEM_FLOAT, "u": ITEM_UINT, "i": ITEM_INT}
_KIND_OF_ITEM_TYPE = {ITEM_FLOAT: "f", ITEM_UINT: "u", ITEM_QUINT: "u", ITEM_QINT: "i", ITEM_INT: "i"}
SUPPORTED_DTYPES = tuple(
    np.dtype(name)
    for name in (
        "float16", "float32", "float64",
        "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "bool",
    )
)


def dat_bytes(array: np.ndarray, *, bool_bits: int = 8) -> bytes:
    """Encode ``array`` as the bytes of an NNEF ``.dat`` file.

    ``bool_bits`` applies to bool arrays only: 8 (one byte per item, what tract writes) or
    1 (bits packed MSB first, the only form the Khronos reader takes). A rank-0 array gives
    a rank-0 header, for a variable declared ``shape = []``.
    """
    array = np.asarray(array)
    _check_encodable(array, bool_bits)
    bits, item_type = _bits_and_item_type(array.dtype, bool_bits)
    payload = _payload(array, bits)
    header = _header(array.shape, bits, item_type, len(payload))
    return header + payload


class DatFile:
    """A ``.dat`` file to be written: its size is known now, its bytes are read from ``data``
    (e.g. a model parameter) only while it is written, one piece at a time.

    The encoding is checked when the object is made, so that a bad tensor fails before
    anything is written.
    """

    def __init__(self, data: TensorData | np.ndarray, *, bool_bits: int = 8):
        self.data = data if isinstance(data, TensorData) else ArrayData(data)
        self.bool_bits = bool_bits
        if self.data.stored_format == "q4_0":
            self._payload_size = self.data.block_bytes
            self.header = _header(self.data.stored_shape, _BLOCK_QUANT_BITS, TRACT_ITEM_Q4_0 | TRACT_VENDOR << 16,
                                  self._payload_size)
            return
        dtype = np.dtype(self.data.dtype.numpy_name)
        _check_encodable_as(dtype, self.data.shape, bool_bits)
        bits, item_type = _bits_and_item_type(dtype, bool_bits)
        count = self.data.size
        self._payload_size = (count + 7) // 8 if bits == 1 else count * max(bits // 8, 1)
        self.header = _header(self.data.shape, bits, item_type, self._payload_size)

    @property
    def size(self) -> int:
        """Bytes of the whole file, header included."""
        return HEADER_SIZE + self._payload_size

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The file's bytes: the header, then the data in pieces."""
        yield self.header
        written = 0
        if self.data.stored_format == "q4_0":
            pieces = self.data.block_chunks()
        elif self.bool_bits == 1 and self.data.dtype.is_bool:
            pieces = iter([memoryview(np.packbits(self.data.numpy().reshape(-1)))])
        else:
            pieces = self.data.chunks()
        for piece in pieces:
            written += len(piece)
            yield piece
        if written != self._payload_size:
            raise EmitError(f"constant {self.data!r} gave {written} data bytes instead of {self._payload_size}")

    def tobytes(self) -> bytes:
        """The whole file in memory (for small files and tests)."""
        return b"".join(bytes(piece) for piece in self.chunks())


def read_dat(data: bytes) -> np.ndarray:
    """Decode the bytes of an NNEF ``.dat`` file (the inverse of :func:`dat_bytes`).

    Takes bools packed 1 bit (MSB first) or 8 bits per item; quantized item types come back
    as plain integer arrays, tract's Q4_0 blocks as their float32 values. Returns a writable
    array in native byte order.
    """
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise InvalidArgumentError(
            f"not an NNEF .dat file: {len(view)} bytes, shorter than the {HEADER_SIZE}-byte header"
        )
    shape, bits, item_type, data_length = _parse_header(bytes(view[:HEADER_SIZE]))
    body = view[HEADER_SIZE:]
    if len(body) != data_length:
        raise InvalidArgumentError(
            f"NNEF .dat file truncated or padded: header says {data_length} data bytes, "
            f"file holds {len(body)}"
        )
    count = _element_count(shape)
    if item_type == TRACT_ITEM_Q4_0 | TRACT_VENDOR << 16:
        if len(shape) < 2 or data_length != q4_0_size(shape) or count % Q4_0_BLOCK_LEN:
            raise InvalidArgumentError(f"NNEF .dat Q4_0 tensor of shape {list(shape)} cannot hold {data_length} bytes")
        return dequantize_q4_0(bytes(body), shape)
    if item_type == ITEM_BOOL:
        return _decode_bool(body, bits, count, data_length).reshape(shape)
    dtype = _dtype_of(item_type, bits)
    if data_length != count * dtype.itemsize:
        raise InvalidArgumentError(
            f"NNEF .dat header inconsistent: shape {list(shape)} of {dtype} needs "
            f"{count * dtype.itemsize} bytes, header says {data_length}"
        )
    values = np.frombuffer(body, dtype=dtype.newbyteorder("<"), count=count)
    return values.astype(dtype, copy=True).reshape(shape)


def _check_encodable(array: np.ndarray, bool_bits: int) -> None:
    """Raise InvalidArgumentError when ``array`` has no ``.dat`` form."""
    _check_encodable_as(array.dtype, array.shape, bool_bits)


def _check_encodable_as(dtype: np.dtype, shape: tuple, bool_bits: int) -> None:
    """Raise InvalidArgumentError when a tensor of ``dtype`` and ``shape`` has no ``.dat`` form."""
    if dtype.newbyteorder("=") not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise InvalidArgumentError(
            f"cannot write a {dtype} tensor to an NNEF .dat file: supported dtypes are {names}"
        )
    if len(shape) > MAX_RANK:
        raise InvalidArgumentError(
            f"cannot write a rank-{len(shape)} tensor to an NNEF .dat file: the format stops at "
            f"rank {MAX_RANK}; reshape it first"
        )
    if any(dim >= 2**32 for dim in shape):
        raise InvalidArgumentError(f"tensor dim too large for an NNEF .dat file: shape {tuple(shape)}")
    if bool_bits not in (1, 8):
        raise InvalidArgumentError(f"bool_bits must be 1 or 8, got {bool_bits!r}")


def _bits_and_item_type(dtype: np.dtype, bool_bits: int) -> tuple[int, int]:
    """The (bits per item, item type) header fields for ``dtype``."""
    if dtype == np.bool_:
        return bool_bits, ITEM_BOOL
    return dtype.itemsize * 8, _ITEM_TYPE_OF_KIND[dtype.kind]


def _payload(array: np.ndarray, bits: int) -> bytes:
    """Row-major little-endian data bytes; bools as 0/1 bytes or packed bits."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if array.dtype == np.bool_:
        return np.packbits(flat).tobytes() if bits == 1 else flat.view(np.uint8).tobytes()
    return flat.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def _header(shape: tuple[int, ...], bits: int, item_type: int, data_length: int) -> bytes:
    """The 128-byte header for a tensor of ``shape`` with ``data_length`` payload bytes."""
    if data_length >= 2**32:
        raise InvalidArgumentError(
            f"tensor of shape {list(shape)} holds {data_length} bytes: an NNEF .dat file stops "
            f"below 4 GiB (u32 data length); split the tensor"
        )
    dims = list(shape) + [0] * (MAX_RANK - len(shape))
    packed = _HEADER.pack(MAGIC, *VERSION, data_length, len(shape), *dims, bits, item_type)
    return packed + bytes(HEADER_SIZE - len(packed))


def _parse_header(header: bytes) -> tuple[tuple[int, ...], int, int, int]:
    """Return (shape, bits per item, item type, data length) from a 128-byte header."""
    magic, major, minor, data_length, rank, *rest = _HEADER.unpack_from(header)
    dims, bits, item_type = rest[:MAX_RANK], rest[MAX_RANK], rest[MAX_RANK + 1]
    if magic != MAGIC:
        raise InvalidArgumentError(f"not an NNEF .dat file: magic bytes {magic.hex()} instead of 4eef")
    if major != VERSION[0]:
        raise InvalidArgumentError(f"unsupported NNEF .dat version {major}.{minor}: only 1.x is read")
    if rank > MAX_RANK:
        raise InvalidArgumentError(f"NNEF .dat header has rank {rank}, more than {MAX_RANK}")
    return tuple(dims[:rank]), bits, item_type, data_length


def _element_count(shape: tuple[int, ...]) -> int:
    """Number of items of ``shape`` (1 for rank 0)."""
    count = 1
    for dim in shape:
        count *= dim
    return count


def _dtype_of(item_type: int, bits: int) -> np.dtype:
    """The numpy dtype for a non-bool (item type, bits per item) pair."""
    kind = _KIND_OF_ITEM_TYPE.get(item_type)
    if kind is None or bits not in ((16, 32, 64) if kind == "f" else (8, 16, 32, 64)):
        raise InvalidArgumentError(
            f"unsupported NNEF .dat item type {item_type} with {bits} bits per item"
        )
    return np.dtype(f"{kind}{bits // 8}")


def _decode_bool(body: memoryview, bits: int, count: int, data_length: int) -> np.ndarray:
    """Decode a flat bool array packed 1 bit (MSB first) or 8 bits per item."""
    expected = (count + 7) // 8 if bits == 1 else count
    if bits not in (1, 8) or data_length != expected:
        raise InvalidArgumentError(
            f"NNEF .dat bool tensor of {count} items with {bits} bits per item cannot hold "
            f"{data_length} bytes"
        )
    raw = np.frombuffer(body, dtype=np.uint8)
    if bits == 1:
        return np.unpackbits(raw, count=count).astype(np.bool_)
    return raw != 0
