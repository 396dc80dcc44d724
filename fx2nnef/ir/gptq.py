"""GPTQ rounding of a Linear weight into Q4_0 blocks, given its inputs' second moment.

A Linear ``y = x W^T`` (``W`` ``[N, K]``) run on calibration inputs ``X`` (``[n, K]``) has the
output error ``|X (W - Q)^T|^2 = tr((W - Q) H (W - Q)^T)`` with ``H = X^T X``: rounding each
weight to its nearest code ignores that the inputs are correlated. GPTQ (Frantar et al., 2022)
rounds the input columns one by one, in order, and moves each column's rounding error onto the
columns not rounded yet, weighted so that the output error stays least: with ``U`` the upper
Cholesky factor of ``H^-1`` (``H^-1 = U^T U``), rounding column ``j`` to ``q`` changes the columns
``j+1..`` by ``-(w_j - q) / U[j, j] * U[j, j+1:]``. The updates are applied lazily: within a
batch of columns on the batch only, then once to the rest by one matrix product.

Q4_0 fixes the grid per block of 32 input columns of a row: a block's scale is chosen when its
first column is reached, from the block's values as the earlier errors left them, by the scale
search of :func:`.weight_data.searched_scales` (float16-exact). Every value is then its code
times that scale, so the blocks this gives are exactly what the engine computes with.

``H`` is damped (``damping`` times its mean diagonal added to the diagonal): calibration sets
have fewer distinct directions than large ``K``, and the damping keeps the inverse finite.
Inputs never seen nonzero (a zero diagonal) get a unit diagonal: their columns are rounded to
the nearest code and pass no error on.
"""
from __future__ import annotations

import numpy as np

from .weight_data import Q4_0_BLOCK_LEN, _packed, searched_scales

DEFAULT_DAMPING = 0.01
# columns rounded before the rest of the matrix is updated at once
_LAZY_BATCH = 128


def gptq_q4_0(weight: np.ndarray, hessian: np.ndarray, damping: float = DEFAULT_DAMPING) -> np.ndarray:
    """The Q4_0 blocks (``uint8 [N * K / 32, 18]``, rows in order) of ``weight`` (``[N, K]``, ``K``
    a multiple of 32) rounded by GPTQ for inputs whose second moment is ``hessian`` (``[K, K]``,
    ``X^T X`` up to a positive factor)."""
    w = np.array(weight, dtype=np.float32)
    rows, k = w.shape
    if k % Q4_0_BLOCK_LEN or hessian.shape != (k, k):
        raise ValueError(f"GPTQ Q4_0 needs a weight [N, K] with K a multiple of {Q4_0_BLOCK_LEN} and a "
                         f"hessian [K, K]; got {list(w.shape)} and {list(hessian.shape)}")
    upper = inverse_cholesky(hessian, damping)
    codes = np.empty((rows, k), np.int8)
    scales = np.empty((rows, k // Q4_0_BLOCK_LEN), np.float32)
    for start in range(0, k, _LAZY_BATCH):
        stop = min(start + _LAZY_BATCH, k)
        errors = _round_batch(w[:, start:stop], upper[start:stop, start:stop], codes[:, start:stop],
                              scales[:, start // Q4_0_BLOCK_LEN:stop // Q4_0_BLOCK_LEN])
        if stop < k:
            w[:, stop:] -= errors @ upper[start:stop, stop:]
    blocks = (codes.reshape(-1, Q4_0_BLOCK_LEN) + 8).astype(np.uint8)
    return _packed(scales.reshape(-1), blocks)


def inverse_cholesky(hessian: np.ndarray, damping: float = DEFAULT_DAMPING) -> np.ndarray:
    """``U`` upper triangular with ``U^T U = (H + damping)^-1`` (float32); the damping grows tenfold
    until the damped ``H`` is positive definite."""
    h = np.array(hessian, dtype=np.float64)
    diagonal = np.diag(h).copy()
    dead = ~(diagonal > 0)
    h[dead, :] = 0.0
    h[:, dead] = 0.0
    diagonal[dead] = 1.0
    mean = float(diagonal.mean()) if diagonal.size else 1.0
    eye = np.eye(len(h))
    for factor in (damping, damping * 10, damping * 100, 1.0):
        damped = h + eye * (factor * mean)
        damped[dead, dead] = 1.0
        try:
            lower = np.linalg.cholesky(damped)
            inverse_lower = np.linalg.solve(lower, eye)  # L^-1: H^-1 = L^-T L^-1
            inverse = inverse_lower.T @ inverse_lower
            return np.linalg.cholesky(inverse).T.astype(np.float32)
        except np.linalg.LinAlgError:
            continue
    raise ValueError("GPTQ: the calibration inputs' second moment is not positive definite even when damped")


def _round_batch(w: np.ndarray, upper: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Round the columns of ``w`` (a view, ``[N, B]``, updated in place as errors move on) into
    ``codes`` and ``scales`` (views); returns the scaled errors ``[N, B]`` for the later columns."""
    rows, count = w.shape
    errors = np.empty_like(w)
    scale = inverse = None
    for j in range(count):
        if j % Q4_0_BLOCK_LEN == 0:
            block = w[:, j:j + Q4_0_BLOCK_LEN]
            largest = block[np.arange(rows), np.abs(block).argmax(axis=1)]
            scale = searched_scales(np.ascontiguousarray(block), largest)
            scales[:, j // Q4_0_BLOCK_LEN] = scale
            inverse = np.divide(np.float32(1.0), scale, out=np.zeros_like(scale), where=scale != 0)
        column = w[:, j]
        code = np.clip(np.rint(column * inverse), -8, 7)
        codes[:, j] = code
        error = (column - code * scale) / upper[j, j]
        if j + 1 < count:
            w[:, j + 1:] -= np.outer(error, upper[j, j + 1:])
        errors[:, j] = error
    return errors
