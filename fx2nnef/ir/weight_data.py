"""Constant data stored in another format than it is computed in: float16, and Q4_0 blocks.

Both wrap the constant's own :class:`TensorData` and convert it piece by piece while the
asset is written: no converted copy of a whole tensor, let alone of the model, is held.

Q4_0 is the block format of GGML that tract reads (``tract-linalg``'s ``block_quant/q4_0.rs``).
A tensor ``[rows, k]`` (``k`` a multiple of 32) is cut, row by row, into blocks of 32 values.
A block is 18 bytes: its scale ``d`` as a little-endian float16, then 16 bytes of 4-bit
codes; byte ``j`` holds element ``j`` in its low nibble and element ``j + 16`` in its high
nibble. A code ``q`` (0 to 15) stands for ``(q - 8) * d``.

Quantization is min-max per block, as GGML's and tract's own reference quantizer: ``m`` is
the block's value of largest magnitude (with its sign), ``d = m / -8``, and each value ``x``
gets ``q = min(15, trunc(x / d + 8.5))``; ``m`` itself is then code 0 (exact but for the
float16 rounding of ``d``) and every other value is within ``|d| / 2`` of its code, except at
the far end of the range (code 15 is ``-7 d``: a value near ``-m`` loses up to ``|d|``).

``rounding="search"`` (see :func:`searched_scales`; TractNNEF's default) picks each block's
scale among a few around min-max's, each refitted by least squares to its codes, to minimize the
block's squared error; the format, its size and the engine's arithmetic are the same, the error
is lower (about 11 % less squared error than min-max on Gaussian weights), never higher, block
by block.
"""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from .dtypes import DType
from .tensor_data import DEFAULT_CHUNK_BYTES, TensorData, array_chunks

Q4_0_BLOCK_LEN = 32
Q4_0_BLOCK_BYTES = 18
# f16 scales stop at 65504, so a block's largest magnitude must stay below 8 * 65504.
Q4_0_MAX_MAGNITUDE = 8 * 65504.0
F16_MAX = 65504.0
Q4_0_ROUNDINGS = ("minmax", "search", "gptq")
# the search: same size and engine speed, lower error in every block; it costs about 20 ms per
# million weights once per export (the scales are kept), against 3 ms for min-max
DEFAULT_Q4_0_ROUNDING = "search"
# what a block's largest magnitude m (with its sign) is divided by to give the scales tried by
# the search (min-max's is -8: m becomes code -8); each is then refitted to its codes
_SEARCH_RATIOS = np.arange(-8.5, -6.49, 0.25, dtype=np.float32)


def quantize_q4_0(values: np.ndarray, rounding: str = "minmax", scales: Optional[np.ndarray] = None) -> np.ndarray:
    """Q4_0 blocks of ``values`` (any shape, size a multiple of 32, read row-major) as a
    ``uint8`` array ``[n_blocks, 18]``; ``rounding``: ``"minmax"`` (GGML's) or ``"search"``.
    ``scales`` (float16-exact, one per block): the blocks' scales, already chosen; each value
    then gets its nearest code."""
    blocks = np.asarray(values, dtype=np.float32).reshape(-1, Q4_0_BLOCK_LEN)
    if scales is not None:
        scale = np.asarray(scales, dtype=np.float32)
        codes = (_nearest_codes(blocks, scale) + 8).astype(np.uint8)
        return _packed(scale, codes)
    picked = np.abs(blocks).argmax(axis=1)
    largest = blocks[np.arange(len(blocks)), picked]
    if rounding == "minmax":
        scale = largest / np.float32(-8.0)
        inverse = np.divide(np.float32(1.0), scale, out=np.zeros_like(scale), where=scale != 0)
        codes = np.minimum(15, (blocks * inverse[:, None] + np.float32(8.5)).astype(np.int8)).astype(np.uint8)
    elif rounding == "search":
        scale = searched_scales(blocks, largest)
        codes = (_nearest_codes(blocks, scale) + 8).astype(np.uint8)
    else:
        raise ValueError(f"Q4_0 rounding here must be 'minmax' or 'search' (gptq's blocks are found beforehand), "
                         f"got {rounding!r}")
    return _packed(scale, codes)


def _packed(scale: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Blocks of float16 ``scale`` and ``codes`` (0..15, ``uint8 [n, 32]``)."""
    out = np.empty((len(codes), Q4_0_BLOCK_BYTES), dtype=np.uint8)
    out[:, :2] = scale.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out


def searched_scales(blocks: np.ndarray, largest: np.ndarray) -> np.ndarray:
    """Per block of ``blocks`` (``float32 [n, 32]``; ``largest``: each block's value of largest
    magnitude), the float16-exact scale of least squared error found among: min-max's, and for
    each ratio r of ``_SEARCH_RATIOS``, the least-squares scale of the codes that ``largest / r``
    gives. Errors are compared in closed form (``|x|^2 - 2 d x.q + d^2 q.q``); min-max's block
    error is the start, so no block ends worse than with min-max."""
    with np.errstate(over="ignore", invalid="ignore"):  # a scale past float16's range: inf, never picked
        return _search(blocks, largest)


def _search(blocks: np.ndarray, largest: np.ndarray) -> np.ndarray:
    squares = np.einsum("ij,ij->i", blocks, blocks)
    start = (largest / np.float32(-8.0)).astype(np.float16).astype(np.float32)
    best_scale, best_error = start, _block_error(blocks, start, squares)
    for ratio in _SEARCH_RATIOS:
        inverse = np.divide(ratio, largest, out=np.zeros_like(largest), where=largest != 0)
        codes = np.clip(np.rint(blocks * inverse[:, None]), -8, 7)
        dot, norm = np.einsum("ij,ij->i", blocks, codes), np.einsum("ij,ij->i", codes, codes)
        scale = np.divide(dot, norm, out=np.zeros_like(dot), where=norm > 0).astype(np.float16).astype(np.float32)
        error = squares - 2 * scale * dot + scale * scale * norm
        better = error < best_error
        best_scale, best_error = np.where(better, scale, best_scale), np.where(better, error, best_error)
    return best_scale


def _nearest_codes(blocks: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Each value's nearest code in -8..7 for its block's ``scale`` (0 where the scale is 0)."""
    inverse = np.divide(np.float32(1.0), scale, out=np.zeros_like(scale), where=scale != 0)
    return np.clip(np.rint(blocks * inverse[:, None]), -8, 7)


def _block_error(blocks: np.ndarray, scale: np.ndarray, squares: np.ndarray) -> np.ndarray:
    codes = _nearest_codes(blocks, scale)
    dot, norm = np.einsum("ij,ij->i", blocks, codes), np.einsum("ij,ij->i", codes, codes)
    return squares - 2 * scale * dot + scale * scale * norm


def q4_0_codes(blocks) -> tuple:
    """``(codes, scales)`` of Q4_0 ``blocks`` (bytes or ``uint8 [n, 18]``): ``int8 [n, 32]`` codes
    minus 8 and ``float32 [n, 1]`` scales, whose product is the values (exactly: a float16 scale
    times an integer below 16 is a float32)."""
    raw = np.frombuffer(blocks, dtype=np.uint8) if isinstance(blocks, (bytes, bytearray, memoryview)) else blocks
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1, Q4_0_BLOCK_BYTES)
    scales = raw[:, :2].copy().view("<f2").astype(np.float32)
    packed = raw[:, 2:]
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=1).view(np.int8) - np.int8(8)
    return codes, scales


def dequantize_q4_0(blocks, shape: tuple) -> np.ndarray:
    """The float32 values of Q4_0 ``blocks`` (bytes or ``uint8 [n, 18]``), shaped ``shape``."""
    codes, scales = q4_0_codes(blocks)
    return (codes.astype(np.float32) * scales).reshape(shape)


def q4_0_size(shape: tuple) -> int:
    """Bytes of the Q4_0 blocks of a tensor of ``shape``."""
    count = 1
    for d in shape:
        count *= int(d)
    return count // Q4_0_BLOCK_LEN * Q4_0_BLOCK_BYTES


def max_abs(data: TensorData) -> float:
    """Largest magnitude of a float constant (NaN when it holds a NaN), read piece by piece."""
    dtype = np.dtype(data.dtype.numpy_name)
    largest = 0.0
    for piece in data.chunks():
        values = np.frombuffer(piece, dtype=dtype.newbyteorder("<"))
        if values.size:
            m = float(np.max(np.abs(values)))
            if m != m:
                return m
            largest = max(largest, m)
    return largest


class F16Data(TensorData):
    """A float constant stored as float16: its values rounded to the nearest float16."""

    stored_format = "f16"

    def __init__(self, base: TensorData):
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = DType.F16
        self.parameter_path = base.parameter_path

    def numpy(self) -> np.ndarray:
        return self.base.numpy().astype(np.float16)

    def chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        source = np.dtype(self.base.dtype.numpy_name).newbyteorder("<")
        for piece in self.base.chunks(max_bytes * 2):
            yield from array_chunks(np.frombuffer(piece, dtype=source).astype("<f2"), max_bytes)


class Q4_0Data(TensorData):
    """A 2-D float constant stored as Q4_0 blocks. ``numpy()`` gives the dequantized values (what
    the engine computes with), in the base's dtype; :meth:`block_chunks` the encoded blocks.

    Blocks run along the last dim of the stored tensor, which must be the contracted one: a
    ``[K, N]`` right operand of ``x @ w`` is stored ``transposed``, as ``[N, K]``
    (:attr:`stored_shape`), and read by a matmul with ``transposeB``.
    """

    stored_format = "q4_0"

    def __init__(self, base: TensorData, transposed: bool = False, rounding: str = "minmax",
                 blocks: Optional[np.ndarray] = None):
        if rounding not in Q4_0_ROUNDINGS:
            raise ValueError(f"Q4_0 rounding must be one of {Q4_0_ROUNDINGS}, got {rounding!r}")
        if (rounding == "gptq") != (blocks is not None):
            raise ValueError("Q4_0 rounding 'gptq' takes the blocks found beforehand (blocks=), and only it does")
        self.rounding = rounding
        # "gptq": the blocks, found from calibration inputs (uint8 [n_blocks, 18], stored order)
        self._blocks = None if blocks is None else np.asarray(blocks, dtype=np.uint8).reshape(-1, Q4_0_BLOCK_BYTES)
        # "search": the chosen scales (float16, one per block), kept once found: the asset and the
        # checks' reference quantize the tensor several times, the search runs once
        self._scales: Optional[np.ndarray] = None
        self.base = base
        self.shape = tuple(base.shape)
        self.dtype = base.dtype
        self.parameter_path = base.parameter_path
        self.transposed = transposed
        self.stored_shape = self.shape[::-1] if transposed else self.shape
        if len(self.shape) != 2 or self.stored_shape[1] % Q4_0_BLOCK_LEN:
            raise ValueError(f"Q4_0 needs a 2-D tensor whose contracted dim is a multiple of {Q4_0_BLOCK_LEN}, "
                             f"got shape {list(base.shape)}" + (" (transposed)" if transposed else ""))
        if self._blocks is not None and len(self._blocks) * Q4_0_BLOCK_BYTES != q4_0_size(self.shape):
            raise ValueError(f"{len(self._blocks)} Q4_0 blocks given for a tensor of shape {list(self.shape)}")

    @property
    def block_bytes(self) -> int:
        """Bytes of the encoded blocks."""
        return q4_0_size(self.shape)

    def _stored_values(self) -> np.ndarray:
        values = self.base.numpy()
        return np.ascontiguousarray(values.T) if self.transposed else values

    def numpy(self) -> np.ndarray:
        values = dequantize_q4_0(self._quantize(self._stored_values(), 0), self.stored_shape)
        return np.ascontiguousarray(values.T if self.transposed else values).astype(self.dtype.numpy_name)

    def codes(self) -> tuple:
        """``(codes, scales)`` of the stored blocks (see :func:`q4_0_codes`), ``[n_blocks, 32]`` and
        ``[n_blocks, 1]`` in the order of :attr:`stored_shape`: a quarter of the float32 bytes."""
        n = q4_0_size(self.shape) // Q4_0_BLOCK_BYTES
        codes, scales = np.empty((n, Q4_0_BLOCK_LEN), np.int8), np.empty((n, 1), np.float32)
        at = 0
        for piece in self.block_chunks():
            c, d = q4_0_codes(piece)
            codes[at:at + len(c)], scales[at:at + len(c)] = c, d
            at += len(c)
        return codes, scales

    def _quantize(self, values: np.ndarray, first: int) -> np.ndarray:
        """The blocks of ``values``, blocks ``first`` on of the stored tensor."""
        if self._blocks is not None:
            return self._blocks[first:first + values.size // Q4_0_BLOCK_LEN]
        if self.rounding != "search":
            return quantize_q4_0(values, self.rounding)
        count = values.size // Q4_0_BLOCK_LEN
        if self._scales is None:
            self._scales = np.full(q4_0_size(self.shape) // Q4_0_BLOCK_BYTES, np.nan, np.float16)
        known = self._scales[first:first + count]
        if not np.isnan(known).any():
            return quantize_q4_0(values, scales=known)
        blocks = quantize_q4_0(values, "search")
        known[:] = blocks[:, :2].copy().view("<f2").reshape(-1)
        return blocks

    def block_chunks(self, max_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[memoryview]:
        """The Q4_0 blocks, row-major, quantized piece by piece (a transposed tensor is read whole
        first: one tensor's copy at a time)."""
        if self.transposed:
            values = self._stored_values()
            rows = max(1, max_bytes // max(1, values.shape[1] * 4))
            per_row = values.shape[1] // Q4_0_BLOCK_LEN
            for start in range(0, values.shape[0], rows):
                yield memoryview(self._quantize(values[start:start + rows], start * per_row)).cast("B")
            return
        source = np.dtype(self.base.dtype.numpy_name).newbyteorder("<")
        pending: Optional[np.ndarray] = None
        first = 0
        for piece in self.base.chunks(max_bytes):
            values = np.frombuffer(piece, dtype=source)
            if pending is not None:
                values = np.concatenate([pending, values])
            whole = len(values) - len(values) % Q4_0_BLOCK_LEN
            pending = values[whole:].copy()
            if whole:
                yield memoryview(self._quantize(values[:whole], first)).cast("B")
                first += whole // Q4_0_BLOCK_LEN
        if pending is not None and len(pending):
            raise ValueError(f"{self.base!r} yielded a number of values that is not a multiple of {Q4_0_BLOCK_LEN}")
