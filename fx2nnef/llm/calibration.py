"""Calibrated Q4_0 for a causal LM: GPTQ rounding and the weights kept in float16, found by
running the model on calibration tokens.

**GPTQ** (``rounding="gptq"``): the Linear weights are rounded decoder layer by decoder layer, in
order, as GPTQ does: for layer ``i``, the model runs on the calibration tokens with the layers
before it already holding their rounded values (read through a :class:`StoredValues` table: the
model's tensors are never changed) and stops once layer ``i`` has run; hooks on its Linears add
up ``H = X^T X`` of their inputs; Linears that read the same input (q/k/v, gate/up) share one
``H`` and are rounded together (:func:`fx2nnef.ir.gptq.gptq_q4_0`). The Linears outside the
decoder layers (the LM head) come last. Memory: one layer's ``H`` matrices and the Q4_0 blocks
found (0.56 byte per weight) are held, never a copy of the model.

**Kept in float16** (``keep_f16``): each Q4_0 candidate (Linear and Embedding weights whose rows
are whole Q4_0 blocks) is rounded alone (GPTQ's blocks when there are, else the scale search),
the model runs on the first two calibration sequences, and the KL divergence of its next-token
distributions from the original's is that weight's measured impact. Weights are kept by
impact per extra byte (float16 against Q4_0) until the budget is spent: a fraction of the
candidates' weights (``0.1``) or extra bytes (``"16MiB"``, ``"2000000B"``).

GPTQ needs more calibration tokens than a weight has inputs: with fewer, it fits the few
directions they span and moves errors into the others (measured: a held-out output error above
the search's). A weight with fewer tokens than inputs keeps the search, and the damping grows as
tokens per input fall (:func:`damping_for`).

**Calibration tokens**: given token ids (``calibration=``, e.g. a tokenized text), or random
token sequences drawn from the vocabulary (seeded) when none are given, 1.5 per input of the
widest Linear (8 to 32 sequences of 128; :func:`default_sequences`); the manifest says which.
Random tokens are a weak stand-in for text: a trained model's activations on them are not those
of real use.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Callable, Optional, Union

import numpy as np
import torch

from .. import progress
from ..errors import InvalidArgumentError, spell
from ..fx_tracer.stored_values import StoredValues, upcast
from ..ir.gptq import DEFAULT_DAMPING, gptq_q4_0
from ..ir.weight_data import F16_MAX, Q4_0_BLOCK_LEN, dequantize_q4_0, q4_0_size, quantize_q4_0
from ..ir.weight_formats import Calibrated

# random calibration tokens: sequences x tokens
DEFAULT_SEQUENCES, DEFAULT_LENGTH = 8, 128
# the sequences of the calibration tokens the impacts are measured on (one model run per weight)
_IMPACT_SEQUENCES = 2
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


@dataclasses.dataclass
class CalibrationReport:
    """What the calibration did, for the manifest and the summary."""

    tokens: str  # what it ran on
    gptq: list = dataclasses.field(default_factory=list)  # weights rounded by GPTQ
    keep_f16: list = dataclasses.field(default_factory=list)  # weights kept in float16
    extra_bytes: int = 0  # of the kept weights, float16 against Q4_0
    impacts: dict = dataclasses.field(default_factory=dict)  # weight -> KL mean when rounded alone
    seconds: float = 0.0

    def manifest_entry(self) -> dict:
        entry = {"tokens": self.tokens, "gptq_weights": len(self.gptq), "seconds": round(self.seconds, 3)}
        if self.impacts:
            entry.update(keep_f16=self.keep_f16, keep_f16_extra_bytes=self.extra_bytes,
                         impact_kl={k: float(f"{v:.4g}") for k, v in self.impacts.items()})
        return entry


def summary_line(entry: dict) -> str:
    """The summary's line on the calibration, from its manifest entry."""
    parts = [f"GPTQ on {entry['gptq_weights']} Linear weights"] if entry.get("gptq_weights") else []
    if "keep_f16" in entry:
        parts.append(f"{len(entry['keep_f16'])} of {len(entry['impact_kl'])} weights kept in f16 "
                     f"(+{entry['keep_f16_extra_bytes'] / 2**20:.2f} MiB)")
    return f"  Q4_0 calibration: {'; '.join(parts)}; on {entry['tokens']}"


def damping_for(damping: float, inputs: int, rows: int) -> float:
    """GPTQ's damping for ``inputs`` columns calibrated on ``rows`` inputs: ``damping`` when rows
    are many (10x the inputs and more), growing to 10x ``damping`` as they are as few as the
    inputs. With few rows ``H`` holds few directions, and GPTQ, fitting those, moves errors into
    the others: on a held-out set its output error then exceeds the search's."""
    return damping * max(1.0, 10.0 * inputs / max(1, rows))


def default_sequences(model: torch.nn.Module) -> int:
    """Random calibration sequences (of ``DEFAULT_LENGTH``) for ``model``: 1.5 tokens per input of
    its widest Linear, from 8 to 32 sequences (a weight with more inputs than tokens keeps the
    search)."""
    widest = max((m.in_features for _, m in _gptq_linears(model)), default=0)
    return int(min(4 * DEFAULT_SEQUENCES, max(DEFAULT_SEQUENCES, -(-3 * widest // (2 * DEFAULT_LENGTH)))))


def calibration_ids(vocab: int, seed: int = 0, sequences: int = DEFAULT_SEQUENCES,
                    length: int = DEFAULT_LENGTH) -> torch.Tensor:
    """``[sequences, length]`` random token ids from ``range(vocab)``, seeded."""
    g = torch.Generator().manual_seed(seed + 3)
    return torch.randint(0, vocab, (sequences, length), generator=g)


def keep_f16_budget(spec: Union[str, float, None], candidate_elements: int) -> Optional[int]:
    """Extra bytes the float16 weights may cost: a fraction in (0, 1] of the candidates' weights
    (each kept weight costs ``2 - 18/32`` bytes more than Q4_0), or bytes with a unit ("16MiB",
    "2000000B"). None when ``spec`` is None; a one-line error when it reads as neither."""
    if spec is None:
        return None
    text = str(spec).strip().lower().replace(" ", "")
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)([a-z]*)", text)
    if match and match.group(2) in _UNITS:
        return int(float(match.group(1)) * _UNITS[match.group(2)])
    if match and not match.group(2) and 0 < float(match.group(1)) <= 1:
        return int(float(match.group(1)) * candidate_elements * (2 - 18 / 32))
    raise InvalidArgumentError(f"{spell('keep_f16')} must be a fraction in (0, 1] of the Q4_0 weights (e.g. 0.1) or a byte "
                               f"budget with a unit (e.g. 16MiB, 2000000B), got {spec!r}")


def calibrate(model: torch.nn.Module, ids: torch.Tensor, *, gptq: bool, keep_f16=None, tokens: str = "",
              damping: float = DEFAULT_DAMPING) -> tuple:
    """``(Calibrated, CalibrationReport)`` for ``model`` run on ``ids`` (``[n, length]``): GPTQ
    blocks of its Linear weights when ``gptq``, and the weights kept in float16 within the
    ``keep_f16`` budget (:func:`keep_f16_budget`). Paths are the model's parameter names (every
    name of a tied weight). The model is left as it was."""
    started = time.perf_counter()
    names = _all_names(model)
    report = CalibrationReport(tokens or f"{len(ids)} x {ids.shape[1]} given tokens")
    blocks = {}  # id(param) -> blocks
    if gptq:
        blocks = _gptq_blocks(model, ids, damping)
        report.gptq = sorted(names[i][0] for i in blocks)
    kept = set()
    if keep_f16 is not None:
        candidates = _candidates(model)
        budget = keep_f16_budget(keep_f16, sum(p.numel() for p in candidates))
        impacts = _impacts(model, ids, candidates, blocks)
        kept, report.extra_bytes = _within_budget(candidates, impacts, budget)
        report.impacts = {names[id(p)][0]: impacts[id(p)] for p in candidates}
        report.keep_f16 = sorted(names[i][0] for i in kept)
    report.seconds = time.perf_counter() - started
    by_path = {n: b for i, b in blocks.items() for n in names[i]}
    return Calibrated(by_path, frozenset(n for i in kept for n in names[i])), report


def _all_names(model: torch.nn.Module) -> dict:
    names: dict = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return names


def _gptq_linears(module: torch.nn.Module) -> list:
    """``(name, Linear)`` of ``module`` whose weight GPTQ can round (input size a multiple of 32)."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)
            and m.weight.ndim == 2 and m.in_features % Q4_0_BLOCK_LEN == 0 and m.weight.dtype.is_floating_point]


def decoder_layers(model: torch.nn.Module) -> list:
    """The decoder layers: the ``ModuleList`` nearest the root whose items all hold Linears, the
    longest of those (a MoE layer's experts lie deeper); none: []."""
    lists = [(name.count("."), -len(m), name, m) for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and len(m) and all(_gptq_linears(item) for item in m)]
    return list(min(lists, key=lambda t: t[:3])[3]) if lists else []


class _Stop(Exception):
    """Raised by a hook once the layer being calibrated has run: the rest of the model is not needed."""


def _stop_hook(_module, _inputs, _output):
    raise _Stop()


def _gptq_blocks(model: torch.nn.Module, ids: torch.Tensor, damping: float) -> dict:
    """``{id(weight): blocks}``: the Linears of each decoder layer in order, then the others,
    each group on the inputs the rounded groups before it give."""
    layers = decoder_layers(model)
    inside = {id(m) for layer in layers for _, m in _gptq_linears(layer)}
    groups = [(layer, [m for _, m in _gptq_linears(layer)]) for layer in layers]
    groups.append((None, [m for _, m in _gptq_linears(model) if id(m) not in inside]))
    blocks: dict = {}
    for index, (stop, linears) in enumerate(groups):
        if not linears:
            continue
        progress.stage("gptq", f"group {index + 1} of {len(groups)}: {len(linears)} Linear weights")
        for shared in _hessians(model, ids, linears, stop, blocks):
            inputs = shared.h.shape[0]
            if shared.rows < inputs:  # GPTQ would fit the calibration's few directions: the search
                continue
            weights = [m.weight.detach().to(torch.float32).numpy() for m in shared.modules]
            found = gptq_q4_0(np.concatenate(weights), shared.h.numpy(), damping_for(damping, inputs, shared.rows))
            at = 0
            for m, w in zip(shared.modules, weights):
                count = w.size // Q4_0_BLOCK_LEN
                blocks[id(m.weight)] = found[at:at + count].copy()
                at += count
    return blocks


@dataclasses.dataclass
class _Shared:
    """The Linears that read one input, and that input's ``X^T X``."""

    modules: list
    h: torch.Tensor
    rows: int = 0  # inputs added up


def _hessians(model, ids, linears: list, stop, blocks: dict) -> list:
    """``X^T X`` per input of ``linears``, the model run with the weights in ``blocks`` rounded
    and stopped after ``stop`` (a module, or None: to the end)."""
    slots: dict = {}  # id(Linear) -> _Shared
    seen: dict = {}  # id(input) -> (input, _Shared), for this run: Linears on one input share

    def hook(module, inputs, _output):
        x = inputs[0].detach()
        slot = slots.get(id(module))
        if slot is None:
            hit = seen.get(id(x))
            slot = hit[1] if hit is not None and hit[0] is x else None
            if slot is None:
                slot = _Shared([], torch.zeros(x.shape[-1], x.shape[-1], dtype=torch.float32))
            slot.modules.append(module)
            slots[id(module)] = slot
        if id(x) not in seen:
            seen[id(x)] = (x, slot)
            flat = x.reshape(-1, x.shape[-1]).to(torch.float32)
            slot.h.add_(flat.T @ flat)
            slot.rows += len(flat)

    handles = [m.register_forward_hook(hook) for m in linears]
    if stop is not None:
        handles.append(stop.register_forward_hook(_stop_hook))
    try:
        _run(model, ids, blocks)
    finally:
        for h in handles:
            h.remove()
    unique = {id(s): s for s in slots.values()}
    return list(unique.values())


def _run(model: torch.nn.Module, ids: torch.Tensor, blocks: dict) -> Optional[torch.Tensor]:
    """The model's logits (float32) on ``ids`` with the weights in ``blocks`` read as rounded
    (bfloat16 tensors read as float32); None when a hook stopped it."""
    table = _read_as(model, blocks)
    try:
        with torch.no_grad(), (StoredValues(table) if table else contextlib.nullcontext()):
            return model(input_ids=ids, use_cache=False).logits.to(torch.float32)
    except _Stop:
        return None


def _read_as(model: torch.nn.Module, blocks: dict) -> dict:
    """A :class:`StoredValues` table: the weights of ``blocks`` decoded from them, every other
    bfloat16 tensor as float32."""
    table = {}
    for t in list(model.parameters()) + list(model.buffers()):
        dtype = torch.float32 if t.dtype == torch.bfloat16 else t.dtype
        if id(t) in blocks:
            table[id(t)] = (t, _decoded(blocks[id(t)], tuple(t.shape), dtype), dtype)
        elif t.dtype == torch.bfloat16:
            table[id(t)] = (t, upcast(t), torch.float32)
    return table


def _decoded(found: np.ndarray, shape: tuple, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """The decoder of Q4_0 blocks found for a weight (rows in order), as the stored values call it:
    all rows, or the rows ``index`` only (a linear layer's block of rows, an embedding's lookups)."""
    rows, cols = shape
    per_row = found.reshape(rows, cols // Q4_0_BLOCK_LEN, -1)

    def decode(index=None):
        picked = per_row if index is None else per_row[index if isinstance(index, slice) else np.asarray(index)]
        lead = picked.shape[:-2]
        values = dequantize_q4_0(picked.reshape(-1, picked.shape[-1]), (-1, cols))
        return torch.from_numpy(values).reshape(*lead, cols).to(dtype)
    return decode


def _candidates(model: torch.nn.Module) -> list:
    """The weights Q4_0 may store: those of Linears and Embeddings with rows of whole blocks, finite
    and within float16 (each once, tied ones too)."""
    found = {}
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)) and isinstance(w, torch.Tensor) and w.ndim == 2 \
                and w.shape[1] % Q4_0_BLOCK_LEN == 0 and w.dtype.is_floating_point:
            largest = float(w.detach().abs().max()) if w.numel() else 0.0
            if np.isfinite(largest) and largest <= F16_MAX:
                found[id(w)] = w
    return list(found.values())


def _impacts(model, ids: torch.Tensor, candidates: list, blocks: dict) -> dict:
    """``{id(weight): KL mean}`` of the model with that weight alone rounded (GPTQ's blocks, or the
    search), against the original, on the first sequences of ``ids`` (one run per weight)."""
    ids = ids[:_IMPACT_SEQUENCES]
    reference = torch.log_softmax(_run(model, ids, {}), dim=-1)
    impacts = {}
    for index, w in enumerate(candidates):
        progress.stage("keep f16", f"weight {index + 1} of {len(candidates)}: its error impact")
        found = blocks.get(id(w))
        if found is None:
            found = quantize_q4_0(w.detach().to(torch.float32).numpy(), "search")
        got = torch.log_softmax(_run(model, ids, {id(w): found}), dim=-1)
        impacts[id(w)] = float((reference.exp() * (reference - got)).sum(-1).mean())
    return impacts


def _within_budget(candidates: list, impacts: dict, budget: int) -> tuple:
    """``(ids kept in float16, their extra bytes)``: by impact per extra byte, while within ``budget``."""
    cost = {id(w): w.numel() * 2 - q4_0_size(tuple(w.shape)) for w in candidates}
    kept, spent = set(), 0
    for w in sorted(candidates, key=lambda w: impacts[id(w)] / max(1, cost[id(w)]), reverse=True):
        if impacts[id(w)] > 0 and spent + cost[id(w)] <= budget:
            kept.add(id(w))
            spent += cost[id(w)]
    return kept, spent
