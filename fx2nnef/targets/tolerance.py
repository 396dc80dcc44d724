"""Named tolerances and the comparison of engine outputs with reference (PyTorch) outputs.

The presets are tract's own approximation levels, with tract's names and values
(``Approximation::atol_rtol_outliers`` in tract's ``data/src/tensor.rs``, 0.23.x), so that a
level means here what it means in tract and in torch_to_nnef. A value passes when
``|got - expected| <= atol + rtol * |expected|``; a level with an outlier fraction lets that
fraction of the values (of one output) fail the bound.

===========  ==========  ==========  ========  =============================================
name         f32 atol    f32 rtol    outliers  float16 (atol, rtol)
===========  ==========  ==========  ========  =============================================
exact        0           0           0         exact
close        1e-7        1e-7        0         (1e-3, 1e-3)
approximate  1e-4        5e-4        0         (1e-3, 5e-3)   <- the default of every target
very         5e-2        1e-2        0         same as f32
super        0.1         0.05        0.01 %    same as f32
ultra        0.2         0.1         0.05 %    same as f32
===========  ==========  ==========  ========  =============================================

``close`` is tighter than the rounding differences between CPUs (an AVX2 and an AVX-512
machine sum in different orders): use it only for graphs that move data without arithmetic.
tract's longer names are accepted too (``very_approximate``, ``VeryApproximate``, ...).

The float16 row applies when the less precise of the two compared arrays is float16.
Bool and integer outputs are always compared exactly, whatever the level. NaN matches NaN
and an infinity matches the same infinity at the same position; any other non-finite
mismatch fails, outlier fraction or not.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from fx2nnef.errors import InvalidArgumentError, phrase


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative bounds, and the fraction of values allowed outside them.

    ``half``, when given, is the ``(atol, rtol)`` pair used for float16 outputs.
    """

    name: str
    atol: float
    rtol: float
    outliers: float = 0.0
    half: Optional[tuple[float, float]] = None

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0 and 0 <= self.outliers < 1):
            raise InvalidArgumentError(
                f"tolerance {self.name!r} needs atol >= 0, rtol >= 0 and 0 <= outliers < 1, "
                f"got {self.atol}, {self.rtol}, {self.outliers}"
            )

    def for_dtype(self, dtype: np.dtype | type | str) -> Tolerance:
        """This level's bounds for outputs of ``dtype`` (the float16 row for float16)."""
        if np.dtype(dtype) != np.float16 or self.half is None:
            return self
        atol, rtol = self.half
        return replace(self, name=f"{self.name}@float16", atol=atol, rtol=rtol, half=None)

    def is_exact(self) -> bool:
        """True when no difference at all is allowed."""
        return self.atol == 0 and self.rtol == 0 and self.outliers == 0

    def __str__(self) -> str:
        text = f"{self.name} (atol={self.atol:g}, rtol={self.rtol:g}"
        return text + (f", outliers={self.outliers:.4%})" if self.outliers else ")")


PRESETS: dict[str, Tolerance] = {
    t.name: t
    for t in (
        Tolerance("exact", 0.0, 0.0),
        Tolerance("close", 1e-7, 1e-7, half=(1e-3, 1e-3)),
        Tolerance("approximate", 1e-4, 5e-4, half=(1e-3, 5e-3)),
        Tolerance("very", 5e-2, 1e-2),
        Tolerance("super", 0.1, 0.05, outliers=0.0001),
        Tolerance("ultra", 0.2, 0.1, outliers=0.0005),
    )
}
DEFAULT_TOLERANCE = "approximate"
# tract's own spellings of the levels (Rust variant names and their snake_case)
_TRACT_NAMES = {"veryapproximate": "very", "superapproximate": "super", "ultraapproximate": "ultra"}


def resolve_tolerance(tolerance: str | Tolerance) -> Tolerance:
    """A preset by name (case-insensitive, tract's spellings too), or a Tolerance unchanged."""
    if isinstance(tolerance, Tolerance):
        return tolerance
    if isinstance(tolerance, str):
        key = re.sub(r"[\s_-]", "", tolerance.lower())
        key = _TRACT_NAMES.get(key, key)
        if key in PRESETS:
            return PRESETS[key]
    raise InvalidArgumentError(
        f"unknown tolerance {tolerance!r}: use one of {', '.join(PRESETS)} (tract's levels)"
        + phrase("tolerance.object", ", or a Tolerance(name, atol, rtol, outliers)")
    )


@dataclass(frozen=True)
class OutputDiff:
    """How one engine output compares with its reference.

    ``shape`` and ``dtype`` are the reference's. ``max_abs`` is the largest absolute
    difference over positions finite on both sides (inf when NaN/inf positions differ, NaN
    when the shapes differ); ``max_rel`` is the largest ``|got - expected| / |expected|``
    over positions where the reference is non-zero. ``note`` says what failed.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""

    def __str__(self) -> str:
        text = (f"{self.name}: {list(self.shape)} {self.dtype} max_abs={_number(self.max_abs)} "
                f"max_rel={_number(self.max_rel)} {'OK' if self.ok else 'FAIL'}")
        return f"{text} ({self.note})" if self.note else text


def compare_outputs(
    names: Sequence[str] | None,
    expected: Sequence[np.ndarray],
    got: Sequence[np.ndarray],
    tol: str | Tolerance,
    half: Sequence[bool] = (),
) -> list[OutputDiff]:
    """Compare outputs by position; one OutputDiff per position present on either side.
    ``half[i]``: output i was computed through float16 (a float32 cast of a float16 result), so
    the level's float16 bounds apply to it."""
    tolerance = resolve_tolerance(tol)
    count = max(len(expected), len(got))
    labels = list(names or [])
    labels += [f"output_{i}" for i in range(len(labels), count)]
    diffs = []
    for index in range(count):
        if index >= len(got) or index >= len(expected):
            diffs.append(_missing(labels[index], expected, got, index))
        else:
            level = tolerance.for_dtype(np.float16) if index < len(half) and half[index] else tolerance
            diffs.append(compare_one(labels[index], expected[index], got[index], level))
    return diffs


def compare_one(name: str, expected: np.ndarray, got: np.ndarray, tol: str | Tolerance) -> OutputDiff:
    """Compare one output pair: shape, then dtype, then values."""
    tolerance = resolve_tolerance(tol)
    expected, got = np.asarray(expected), np.asarray(got)
    base = OutputDiff(name, tuple(expected.shape), str(expected.dtype), math.nan, math.nan, False)
    if expected.shape != got.shape:
        return replace(base, note=f"shape differs: expected {list(expected.shape)}, got {list(got.shape)}")
    if _is_float(expected) or _is_float(got):
        diff = _compare_floats(base, expected, got, tolerance.for_dtype(_least_precise(expected, got)))
    else:
        diff = _compare_exactly(base, expected, got)
    if expected.dtype != got.dtype:
        note = f"dtype differs: expected {expected.dtype}, got {got.dtype}"
        diff = replace(diff, ok=False, note="; ".join(n for n in (note, diff.note) if n))
    return diff


def format_diffs(diffs: Sequence[OutputDiff]) -> str:
    """An aligned text table of the diffs, one row per output."""
    header = ("output", "shape", "dtype", "max_abs", "max_rel", "ok", "note")
    rows = [header] + [
        (d.name, str(list(d.shape)), d.dtype, _number(d.max_abs), _number(d.max_rel),
         "OK" if d.ok else "FAIL", d.note)
        for d in diffs
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _missing(name: str, expected: Sequence[np.ndarray], got: Sequence[np.ndarray], index: int) -> OutputDiff:
    """The diff for an output present on one side only."""
    present = np.asarray(expected[index] if index < len(expected) else got[index])
    side = "missing from the engine" if index >= len(got) else "extra: absent from the reference"
    note = f"{side} ({len(expected)} expected outputs, {len(got)} from the engine)"
    return OutputDiff(name, tuple(present.shape), str(present.dtype), math.nan, math.nan, False, note)


def _compare_exactly(base: OutputDiff, expected: np.ndarray, got: np.ndarray) -> OutputDiff:
    """Bool and integer outputs: every value must match."""
    wrong = expected != got
    if expected.dtype == np.bool_ or got.dtype == np.bool_:
        max_abs = float(wrong.any())
        max_rel = max_abs
    else:
        delta = np.abs(expected.astype(np.float64) - got.astype(np.float64))
        max_abs, max_rel = _max_or_zero(delta), _max_relative(delta, expected.astype(np.float64))
    count = int(np.count_nonzero(wrong))
    note = "" if count == 0 else f"{count} of {expected.size} values differ (compared exactly){_worst(wrong, expected, got)}"
    return replace(base, max_abs=max_abs, max_rel=max_rel, ok=count == 0, note=note)


_CHUNK = 1 << 20  # items compared at a time: an LLM's logits are not copied whole (float64 temporaries)


def _compare_floats(base: OutputDiff, expected: np.ndarray, got: np.ndarray, tol: Tolerance) -> OutputDiff:
    """Float outputs: within ``tol`` where both are finite, same NaN/inf positions elsewhere.
    Compared piece by piece (in float64), the figures gathered over the pieces."""
    e_flat, g_flat = expected.reshape(-1), got.reshape(-1)
    nonfinite_count, first_nonfinite = 0, None
    count, worst_delta, worst_at = 0, -1.0, None
    max_abs, max_rel = 0.0, 0.0
    for start in range(0, e_flat.size, _CHUNK):
        e = e_flat[start:start + _CHUNK].astype(np.float64)
        g = g_flat[start:start + _CHUNK].astype(np.float64)
        finite = np.isfinite(e) & np.isfinite(g)
        same_nonfinite = (np.isnan(e) & np.isnan(g)) | (np.isinf(e) & (e == g))
        nonfinite_wrong = ~finite & ~same_nonfinite
        n = int(np.count_nonzero(nonfinite_wrong))
        if n and first_nonfinite is None:
            first_nonfinite = start + int(np.flatnonzero(nonfinite_wrong)[0])
        nonfinite_count += n
        e, g = np.where(finite, e, 0.0), np.where(finite, g, 0.0)
        delta = np.abs(e - g)
        max_abs = max(max_abs, _max_or_zero(delta))
        max_rel = max(max_rel, _max_relative(delta, e))
        outside = delta > tol.atol + tol.rtol * np.abs(e)
        n = int(np.count_nonzero(outside))
        if n:
            count += n
            worst = np.where(outside, delta, -1.0)
            top = int(np.argmax(worst))  # the first of the largest
            if worst[top] > worst_delta:
                worst_delta, worst_at = float(worst[top]), start + top
    notes = []
    if nonfinite_count:
        max_abs = math.inf
        notes.append(f"NaN/inf differ at {nonfinite_count} position(s){_at(first_nonfinite, expected, got, 'first')}")
    if count:
        allowed = count <= tol.outliers * expected.size
        notes.append(f"{count} of {expected.size} values outside {tol}"
                     f"{' (allowed outliers)' if allowed else ''}"
                     f"{_at(worst_at, expected, got, 'worst')}")
    ok = not nonfinite_count and count <= tol.outliers * expected.size
    return replace(base, max_abs=max_abs, max_rel=max_rel, ok=ok, note="; ".join(notes))


def _worst(mask: np.ndarray, expected: np.ndarray, got: np.ndarray, label: str = "first") -> str:
    """``"; first at index (0, 2): expected 1.0, got 1.5"`` for the first True of ``mask``."""
    if not mask.any():
        return ""
    return _at(int(np.flatnonzero(mask)[0]), expected, got, label)


def _at(flat: int, expected: np.ndarray, got: np.ndarray, label: str) -> str:
    """``"; worst at index (0, 2): expected 1.0, got 1.5"`` for the item at flat position ``flat``."""
    index = np.unravel_index(flat, expected.shape) if expected.ndim else ()
    where = tuple(int(i) for i in index)
    return f"; {label} at index {where}: expected {expected[where].item()!r}, got {got[where].item()!r}"


def _max_or_zero(values: np.ndarray) -> float:
    """Largest value, 0.0 for an empty array."""
    return float(values.max()) if values.size else 0.0


def _max_relative(delta: np.ndarray, reference: np.ndarray) -> float:
    """Largest ``delta / |reference|`` where the reference is non-zero (0.0 if none)."""
    nonzero = reference != 0
    if not nonzero.any():
        return 0.0
    return float((delta[nonzero] / np.abs(reference[nonzero])).max())


def _is_float(array: np.ndarray) -> bool:
    """True for float arrays."""
    return array.dtype.kind == "f"


def _least_precise(expected: np.ndarray, got: np.ndarray) -> np.dtype:
    """The float dtype with the larger epsilon among the two arrays (float64 if neither)."""
    floats = [a.dtype for a in (expected, got) if _is_float(a)]
    return max(floats, key=lambda d: np.finfo(d).eps, default=np.dtype(np.float64))


def _number(value: float) -> str:
    """Compact number for tables: 3 significant digits, '-' for NaN."""
    return "-" if math.isnan(value) else f"{value:.3g}"
