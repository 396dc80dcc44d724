"""The drift of an LLM asset from the ORIGINAL model, before its weights were rounded or cast.

``export_causal_lm`` checks tract against the model *as exported* (its stored weights: f16,
Q4_0; its dtype) at a tight tolerance: that is the correctness check. A rounded asset is also
further from the model the user gave: this module measures how far (see
:mod:`fx2nnef.targets.drift` for the numbers), on the tokens of the check modes (prompt, prompt
with past, decode) and, when greedy tokens are generated, on those.

Memory: the original model's logits are computed BEFORE any rounding or cast, on the model as
it is (a bfloat16 model reads its tensors as float32 within the run, no copy), and only those
logits are kept: never a second copy of the model.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

import numpy as np
import torch

from .. import progress
from ..fx_tracer.stored_values import stored_values
from ..targets.drift import Drift, greedy_drift, logit_drift
from .wrapper import FlatCacheLM, cache_layout

_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# cases(wrapper, layout, dtype) -> {mode: (inputs, expected outputs, sizes)}, as export.mode_cases
ModeCases = Callable[[FlatCacheLM, object, torch.dtype], dict]


@dataclasses.dataclass
class OriginalReference:
    """The original model's logits per check mode (float32) and its greedy tokens."""

    logits: dict
    greedy: Optional[list] = None
    sizes: dict = dataclasses.field(default_factory=dict)  # mode -> {"P": p, "S": s}
    failure: str = ""  # why the original model gave no reference (the export's own checks then say more)
    seconds: float = 0.0
    original_dtype: str = ""  # the model's float type as given ("bf16", "f32", "f16")

    def manifest_entry(self, tract_logits: dict, tract_tokens: Optional[list]) -> dict:
        """``fx2nnef.json``'s ``drift``: the numbers, or why they were not measured."""
        measured = None if self.failure else self.measure(tract_logits, tract_tokens)
        if measured is None:
            why = self.failure or "nothing ran in tract (no check, no generation)"
            return {"original_dtype": self.original_dtype, "not_measured": why}
        return {"original_dtype": self.original_dtype, **measured.as_json()}

    def measure(self, tract_logits: dict, tract_tokens: Optional[list] = None) -> Optional[Drift]:
        """The asset's drift: its logits per mode (from tract) against the original's, and its
        greedy tokens against the original's. None when there is nothing to compare."""
        modes = [m for m in self.logits if m in tract_logits]
        if not modes and (self.greedy is None or tract_tokens is None):
            return None
        where = ", ".join(f"{m.replace('_', ' ')} P={self.sizes[m]['P']} S={self.sizes[m]['S']}" for m in modes)
        if modes:
            reference = np.concatenate([_rows(self.logits[m]) for m in modes])
            got = np.concatenate([_rows(tract_logits[m]) for m in modes])
            drift = logit_drift(reference, got, f"tract's logits against the original model's ({where})")
        else:
            drift = Drift("greedy tokens of tract against the original model's")
        if self.greedy is not None and tract_tokens is not None:
            drift.greedy = greedy_drift(self.greedy, tract_tokens)
        return drift


def changes_values(model: torch.nn.Module, export_dtype: torch.dtype, weights: Optional[str]) -> bool:
    """Whether the asset computes with other values than the model: weights stored in another
    format, or a float type other than the model's (bfloat16 written as float32 is exact)."""
    own = next(model.parameters()).dtype
    own = torch.float32 if own == torch.bfloat16 else own
    return (weights or "native") != "native" or own != export_dtype


def reference_before_rounding(model: torch.nn.Module, export_dtype: torch.dtype, weights: Optional[str],
                              last_logits_only: bool, modes: Optional[ModeCases],
                              greedy: Optional[Callable[[torch.nn.Module], list]]) -> Optional[OriginalReference]:
    """:func:`original_reference` when the asset computes with other values than the model
    (:func:`changes_values`), else None. Call it before the model is cast."""
    run = None
    if modes is not None or greedy is not None:
        def run(m, compute):
            return _text_reference(m, compute, last_logits_only, modes, greedy)
    return reference_with(model, export_dtype, weights, run)


# run(model, compute dtype) -> (logits per mode, sizes per mode {"P", "S"}, greedy tokens or None)
ReferenceRun = Callable[[torch.nn.Module, torch.dtype], tuple]


def reference_with(model: torch.nn.Module, export_dtype: torch.dtype, weights: Optional[str],
                   run: Optional[ReferenceRun]) -> Optional[OriginalReference]:
    """The original model's reference as ``run`` computes it (any wrapper: the text LLM's, the
    multimodal decoder's), when the asset computes with other values than the model
    (:func:`changes_values`), else None. Call it before the model is cast or rounded."""
    if not changes_values(model, export_dtype, weights):
        return None
    own = _DTYPE_NAMES.get(next(model.parameters()).dtype, str(next(model.parameters()).dtype))
    if run is None:
        return OriginalReference({}, original_dtype=own)
    progress.stage("reference", "the original model's logits, to report the drift of the rounded asset")
    started = time.perf_counter()
    reference = _guarded(model, run)
    reference.seconds, reference.original_dtype = round(time.perf_counter() - started, 3), own
    return reference


def original_reference(model: torch.nn.Module, last_logits_only: bool, modes: Optional[ModeCases],
                       greedy: Optional[Callable[[torch.nn.Module], list]]) -> OriginalReference:
    """The original model's logits on the check modes (``modes``: how the cases are made) and its
    greedy tokens (``greedy(model)``), computed now, before the weights are rounded: call it
    before any conversion. A bfloat16 model computes in float32 (as its asset does)."""
    return _guarded(model, lambda m, compute: _text_reference(m, compute, last_logits_only, modes, greedy))


def _text_reference(model, compute, last_logits_only: bool, modes: Optional[ModeCases], greedy) -> tuple:
    logits, sizes, tokens = {}, {}, None
    if modes is not None:
        layout = cache_layout(model)
        for mode, (_, expected, size) in modes(FlatCacheLM(model, layout, last_logits_only), layout, compute).items():
            logits[mode] = np.asarray(expected[0], dtype=np.float32)
            sizes[mode] = size
    if greedy is not None:
        tokens = list(greedy(model))
    return logits, sizes, tokens


def _guarded(model: torch.nn.Module, run: ReferenceRun) -> OriginalReference:
    """``run`` on the model as it is (a bfloat16 model computing in float32), only its logits
    kept; a failure gives a reference that says why (the export's own checks then say more)."""
    compute = torch.float32 if next(model.parameters()).dtype == torch.bfloat16 else next(model.parameters()).dtype
    try:
        with torch.no_grad(), stored_values(model, (), upcast_bfloat16=True):
            logits, sizes, tokens = run(model, compute)
    except Exception as exc:  # noqa: BLE001 - no drift; the export's checks run the model again and say why
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return OriginalReference({}, None, failure=f"the original model failed on the check tokens: "
                                                   f"{type(exc).__name__}: {first}")
    return OriginalReference({m: np.asarray(v, dtype=np.float32) for m, v in logits.items()}, tokens, sizes)


def _rows(logits: np.ndarray) -> np.ndarray:
    array = np.asarray(logits, dtype=np.float32)
    return array.reshape(-1, array.shape[-1])


def exported_model(manifest: dict) -> str:
    """What the correctness check compares tract with, in words."""
    parts = []
    if manifest.get("weights", "native") != "native":
        parts.append(f"holding the asset's {manifest['weights']} weights")
    own = manifest.get("drift", {}).get("original_dtype", manifest["dtype"])
    if {"bf16": "f32"}.get(own, own) != manifest["dtype"]:
        parts.append(f"cast to {manifest['dtype']}")
    return "the model " + ", ".join(parts) if parts else "the model"


def summary_lines(manifest: dict) -> list:
    """The summary's lines on the drift from the original model (none when values are the model's)."""
    entry = manifest.get("drift")
    if entry is None:
        return []
    if "not_measured" in entry:
        return [f"  drift from the original model: not measured ({entry['not_measured']})"]
    fields = {k: entry.get(k) for k in ("max_abs", "max_rel", "kl_mean", "kl_max")}
    drift = Drift(entry["what"], entry.get("positions", 0), top1=entry.get("top1_agreement"),
                  greedy=entry.get("greedy"), **{k: v if v is not None else 0.0 for k, v in fields.items()})
    return ["  drift from the original model (informative, not a check; the rounding changes the numbers):",
            f"    {drift.what}:", f"    {drift.summary()}"]
