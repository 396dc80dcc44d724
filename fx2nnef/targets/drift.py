"""Drift: how far an asset's outputs are from the ORIGINAL model's, once its weights were rounded
(float16, Q4_0) or its computation cast to float16.

This is not the correctness check. The check compares the engine with the model *as exported*
(holding the values the asset stores) at a tight tolerance and fails the export when they
differ; the drift compares with the model as it was given, before any rounding, and only
reports: rounding 4-bit weights is meant to change the numbers, by how much is for the user to
judge.

Measures (numpy, float64):

- ``max_abs``: the largest ``|got - original|``; ``max_rel``: ``max_abs`` over the largest
  ``|original|`` of that output (a scale, not an element-wise ratio, which blows up near 0).
- For logits (the last axis a vocabulary): ``top1``, the fraction of positions whose argmax is
  the original's; ``kl_mean`` / ``kl_max``, the KL divergence ``KL(original || got)`` of the
  next-token distributions (softmax over the last axis), in nats, over positions.
- For greedy tokens: equal, or the first step that differs.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass
class Drift:
    """Drift of some outputs from the original model's; fields left None were not measured."""

    what: str  # what was compared, in words
    positions: int = 0  # rows of logits compared (0: not logits)
    max_abs: float = 0.0
    max_rel: float = 0.0
    top1: Optional[float] = None
    kl_mean: Optional[float] = None
    kl_max: Optional[float] = None
    greedy: Optional[dict] = None  # {"steps", "equal", "first_difference", "original", "asset"}

    def as_json(self) -> dict:
        out = {"what": self.what, "max_abs": _fmt(self.max_abs), "max_rel": _fmt(self.max_rel)}
        if self.positions:
            out.update(positions=self.positions, top1_agreement=_fmt(self.top1),
                       kl_mean=_fmt(self.kl_mean), kl_max=_fmt(self.kl_max))
        if self.greedy is not None:
            out["greedy"] = dict(self.greedy)
        return out

    def summary(self) -> str:
        """One line: the numbers, named."""
        parts = [f"max_abs={self.max_abs:.3g}", f"max_rel={self.max_rel:.3g}"]
        if self.positions:
            agree = round(self.top1 * self.positions)
            parts += [f"top-1 agrees at {agree}/{self.positions} positions",
                      f"KL mean={self.kl_mean:.3g} max={self.kl_max:.3g} nats"]
        if self.greedy is not None:
            g = self.greedy
            parts.append(f"greedy {g['steps']} tokens equal" if g["equal"] else
                         f"greedy tokens differ from token {g['first_difference'] + 1} of {g['steps']} on")
        return ", ".join(parts)


def output_drift(reference: Sequence[np.ndarray], got: Sequence[np.ndarray], what: str) -> Drift:
    """max abs / max rel over float outputs (pairs of arrays of equal shapes; others are skipped)."""
    worst, scale = 0.0, 0.0
    for ref, out in zip(reference, got):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape or not ref.dtype.kind == "f" or ref.size == 0:
            continue
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        worst = max(worst, float(np.nanmax(diff)))
        scale = max(scale, float(np.nanmax(np.abs(ref.astype(np.float64)))))
    return Drift(what, max_abs=worst, max_rel=worst / scale if scale else 0.0)


def logit_drift(reference: np.ndarray, got: np.ndarray, what: str) -> Drift:
    """Drift of logits ``got`` from ``reference``, both ``[..., V]`` of one shape: every row of
    the last axis is one position's next-token scores."""
    ref = np.asarray(reference, dtype=np.float64).reshape(-1, np.shape(reference)[-1])
    out = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    drift = output_drift([ref], [out], what)
    drift.positions = len(ref)
    drift.top1 = float(np.mean(ref.argmax(-1) == out.argmax(-1))) if len(ref) else 1.0
    log_p, log_q = _log_softmax(ref), _log_softmax(out)
    kl = np.sum(np.exp(log_p) * (log_p - log_q), axis=-1).clip(min=0.0)
    drift.kl_mean = float(kl.mean()) if len(kl) else 0.0
    drift.kl_max = float(kl.max()) if len(kl) else 0.0
    return drift


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """The first step where two token lists part (the shorter one's length when one extends the
    other), None when they are equal."""
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return min(len(a), len(b)) if first is None and len(a) != len(b) else first


def greedy_drift(original: Sequence[int], asset: Sequence[int]) -> dict:
    """Greedy tokens of the asset against the original model's after the same prompt."""
    original, asset = list(map(int, original)), list(map(int, asset))
    first = first_difference(original, asset)
    return {"steps": len(original), "equal": first is None, "first_difference": first,
            "original": original, "asset": asset}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _fmt(value) -> Optional[float]:
    if value is None:
        return None
    return float(f"{float(value):.4g}") if np.isfinite(value) else float(value)


def stored_weights_drift(reference: Sequence, cases: Sequence, fmt: str) -> Optional[Drift]:
    """The drift an export's stored weights (``fmt``) make: the model holding them (each check
    case's expected outputs, which the check tied to the engine) against the model with its own
    weights (``reference``: ``(label, inputs, outputs)`` of the same cases). None without cases."""
    originals = [out for _, _, outs in reference for out in outs]
    rounded = [out for case in cases for out in case.expected]
    if not rounded or len(originals) != len(rounded):
        return None
    return output_drift(originals, rounded, f"PyTorch with the {fmt} weights the asset stores against PyTorch "
                                            f"with the model's own ({len(cases)} check cases)")
