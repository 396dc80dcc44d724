"""``export_causal_lm``: a transformers causal LM to a checked tract asset with a KV cache."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..api import export
from ..fx_tracer.stored_values import stored_values
from ..errors import CheckIOError, InvalidArgumentError, MissingDependencyError, spell
from .. import progress
from ..ir.fusions import fused_counts, resolve_fusions
from ..ir.weight_data import DEFAULT_Q4_0_ROUNDING
from ..targets import TractNNEF
from ..targets.drift import first_difference
from ..targets.result import ExportResult, guard_lines
from ..targets.tolerance import compare_outputs, format_diffs, resolve_tolerance
from ..targets.tract._child import map_large_blocks
from ..targets.tract_runner import run_tract_many
from . import calibration as calibration_module
from . import drift
from .cast import cast_in_place
from .generate import greedy_generate
from .released_checks import DeferredTractNNEF, release, run_checks
from .wrapper import CacheLayout, FlatCacheLM, cache_argument, cache_layout, returned_cache

ASSET_NAME = "model.nnef.tgz"
MANIFEST_NAME = "fx2nnef.json"
# Files of a transformers folder that travel with the asset when present.
COMPANION_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "tokenizer.model", "special_tokens_map.json", "added_tokens.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "chat_template.json")
DTYPES = {"f32": torch.float32, "f16": torch.float16}
# (claims(model_or_dir) -> bool, export(model_or_dir, out_dir, options) -> LLMExportResult): sources
# export_causal_lm hands over, with its keyword arguments as ``options`` (multimodal.py adds its own)
SOURCE_EXPORTERS: list = []
# Sizes of the three check modes: the prompt, then a chunk after a past, then one token.
MODE_PROMPT, MODE_CHUNK = 8, 4


@dataclasses.dataclass
class LLMExportResult:
    """What ``export_causal_lm`` wrote and what it checked.

    ``checks`` maps a check name (``export``, ``prompt``, ``prompt_with_past``, ``decode``,
    ``generate``) to its facts (sizes, per-output max abs difference, tokens).
    """

    out_dir: Path
    asset: Path
    manifest: dict
    export: ExportResult = dataclasses.field(repr=False)

    @property
    def checks(self) -> dict:
        return self.manifest["checks"]

    def __str__(self) -> str:
        lines = [f"fx2nnef llm -> {self.out_dir} ({self.manifest['dtype']}, weights {self.manifest['weights']})",
                 f"  inputs:  {', '.join(self.manifest['inputs'])}",
                 f"  outputs: {', '.join(self.manifest['outputs'])}"]
        if self.checks:
            lines.append(f"  correctness: tract against {drift.exported_model(self.manifest)}, "
                         f"tolerance {self.manifest['check_tolerance']} (an export that differs fails)")
        for name, facts in self.checks.items():
            lines.append(f"  check {name}: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
        skipped = [name for name in ("export", "prompt", "prompt_with_past", "decode", "generate")
                   if name not in self.checks]
        if not self.checks:
            lines.append(f"  NOT CHECKED: the asset was not run in tract ({spell('check', False)}); nothing says "
                         "it computes what the model does")
        elif skipped and any(n != "generate" for n in skipped):
            why = "" if "export" in self.manifest["checks_requested"] else f" ({spell('check', False)})"
            lines.append(f"  not checked: {', '.join(skipped)}{why}")
        lines += guard_lines(self.export.guards, listed=MANIFEST_NAME) if self.export is not None else []
        if "q4_0_calibration" in self.manifest:
            lines.append(calibration_module.summary_line(self.manifest["q4_0_calibration"]))
        lines += drift.summary_lines(self.manifest)
        if "multimodal" in self.manifest:  # encoders beside the decoder
            lines.append(f"  run: fx2nnef.llm.generate_multimodal({str(self.out_dir)!r}, prompt_ids, "
                         "{encoder input: array}, n)")
        else:
            lines.append(f"  run: fx2nnef.llm.TractCausalLM.load({str(self.out_dir)!r}).greedy(prompt_ids, n) "
                         f"(or fx2nnef run {self.asset} INPUTS.npz)")
        return "\n".join(lines)

    @property
    def drift(self) -> Optional[dict]:
        """The drift of the asset from the original model (see :mod:`fx2nnef.llm.drift`); None
        when the asset computes with the model's own values, or when nothing ran."""
        return self.manifest.get("drift")


def load_causal_lm(source: Union[str, os.PathLike], dtype: Optional[torch.dtype] = None) -> torch.nn.Module:
    """A local transformers folder as a causal LM in eval mode, without any download.

    Weights are read memory-mapped in their stored dtype (no f32 upcast) unless ``dtype``
    is given.
    """
    path = Path(source)
    if not path.is_dir():
        hint = (" It looks like a hub id: fx2nnef never downloads; fetch the model first "
                "(e.g. `hf download ID --local-dir DIR`) and give DIR."
                if isinstance(source, str) and source.count("/") == 1 and not path.exists() else
                " Give the folder save_pretrained wrote (config.json and the weights).")
        raise InvalidArgumentError(f"{str(source)!r} is not a local model folder.{hint}")
    if not (path / "config.json").is_file():
        raise InvalidArgumentError(f"{str(path)!r} has no config.json: give a folder written by save_pretrained")
    config = _read_config(path / "config.json")
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise MissingDependencyError(f"loading the model folder {str(path)!r} needs transformers, which is not "
                                     f"installed ({exc}); install it (pip install transformers)") from exc
    progress.stage("load", str(path))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                     dtype=dtype if dtype is not None else "auto")
    except Exception as exc:  # noqa: BLE001 - transformers' own error, named in ours
        wrote = config.get("transformers_version")
        wrote = f" (the folder was written by transformers {wrote})" if wrote and wrote != transformers.__version__ \
            else ""
        raise InvalidArgumentError(
            f"transformers {transformers.__version__} cannot load the model in {str(path)!r}{wrote}: "
            f"{_first_paragraph(exc)}. Fix the folder (config.json, the weights) or write it again with "
            "save_pretrained") from exc
    return model.eval()


def _read_config(path: Path) -> dict:
    """config.json as a dict; InvalidArgumentError when it is not a JSON object (a truncated file)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidArgumentError(f"{str(path)!r} is not valid JSON{where}: the file is damaged or truncated; "
                                   "write the folder again with save_pretrained") from exc
    if not isinstance(config, dict):
        raise InvalidArgumentError(f"{str(path)!r} holds a JSON {type(config).__name__}, not the object "
                                   "save_pretrained writes; write the folder again with save_pretrained")
    return config


def _first_paragraph(exc: BaseException) -> str:
    """``Type: message`` of an exception, its first paragraph on one line."""
    text = " ".join(line.strip() for line in str(exc).strip().split("\n\n")[0].splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:400]}".rstrip(". ")


def export_causal_lm(model_or_dir, out_dir, *, dtype: Optional[str] = None, weights: Optional[str] = None,
                     last_logits_only: bool = False, batch_symbol: bool = False, generate: int = 0,
                     check: bool = True, overwrite: bool = False, seed: int = 0,
                     timeout: float = 600.0, fused=(), force_f32=(), rounding: Optional[str] = None,
                     keep_f16=None, calibration=None) -> LLMExportResult:
    """Export a causal LM to ``out_dir/model.nnef.tgz`` with the KV-cache I/O contract of tract LLM assets.

    ``model_or_dir``: a transformers causal LM (``nn.Module``) or a local folder written by
    ``save_pretrained`` (never a hub id). ``dtype``: "f32" or "f16" (None: the model's own,
    bfloat16 written as f32; "f16" when ``weights`` is "q4_0": see :func:`activation_dtype`).
    ``weights``: passed to ``TractNNEF(weights=...)`` when given.
    ``last_logits_only``: logits of the last position only (``[1, 1, V]``). ``batch_symbol``:
    a symbol ``B`` for the batch axis instead of 1. ``generate``: the number of greedy tokens
    the asset must produce exactly as transformers' greedy decoding (:func:`greedy_reference`). ``check``: run the
    export's own size checks and the three modes (prompt, prompt with past, decode) in tract
    against transformers with a ``DynamicCache``. ``fused``: tract fused ops to use where the
    model's pattern matches exactly, as ``TractNNEF(fused=...)`` ("rms_norm", "rope", "sdpa" or "all").
    ``force_f32``: in an f16 export, the parts computed in f32 (``"norms"``, ``"attention"``,
    ``"linear"`` or ``"all"``; see ``TractNNEF(force_f32=...)``). ``rounding``: how Q4_0 weights
    are rounded (``"minmax"``, ``"search"``, see ``TractNNEF(rounding=...)``, or ``"gptq"``: GPTQ
    on the model run on calibration tokens, see :mod:`fx2nnef.llm.calibration`). ``keep_f16``:
    with Q4_0 weights, a budget (a fraction of the Q4_0 weights, e.g. 0.1, or bytes, e.g.
    "16MiB") of weights kept in float16, those whose rounding alone moves the model's next-token
    distributions most per byte. ``calibration``: token ids ``[n, length]`` the calibration runs
    on (default: random tokens of the vocabulary, seeded by ``seed``; see :mod:`.calibration`).

    With weights stored in another format or another dtype than the model's, the result's
    ``drift`` (and ``fx2nnef.json``'s) says how far tract's logits and greedy tokens are from the
    original model's (see :mod:`fx2nnef.llm.drift`): reported, not checked.

    A module given in another float type than ``dtype`` is copied, not converted in place.
    ``out_dir`` is written atomically (a temporary sibling renamed at the end); an existing
    one is replaced only with ``overwrite=True``.
    """
    out_dir = Path(out_dir)
    fused = resolve_fusions(fused)
    for claims, export_source in SOURCE_EXPORTERS:  # a source with more than a text LM (multimodal.py)
        if claims(model_or_dir):
            return export_source(model_or_dir, out_dir, dict(
                dtype=dtype, weights=weights, last_logits_only=last_logits_only, batch_symbol=batch_symbol,
                generate=generate, check=check, overwrite=overwrite, seed=seed, timeout=timeout, fused=fused,
                force_f32=force_f32, rounding=rounding, keep_f16=keep_f16, calibration=calibration))
    if out_dir.exists() and not overwrite:
        raise InvalidArgumentError(f"{str(out_dir)!r} exists: remove it or pass {spell('overwrite', True)}")
    check_calibration_options(weights, rounding, keep_f16, calibration)
    source_dir = None
    if isinstance(model_or_dir, torch.nn.Module):
        model = model_or_dir.eval()
    else:
        source_dir = Path(model_or_dir)
        map_large_blocks()  # the process is about to hold the whole model: no heap kept beside it
        # loaded as stored: the drift needs the original's logits before any cast (the cast below
        # converts tensor by tensor in place, never a second full copy)
        model = load_causal_lm(model_or_dir)
    torch_dtype = _resolve_dtype(activation_dtype(dtype, weights), model)
    # the original model's logits, before its weights are rounded or cast (None: it keeps its values)
    original = drift.reference_before_rounding(
        model, torch_dtype, weights, last_logits_only, (lambda w, l, d: mode_cases(w, l, d, seed)) if check else None,
        (lambda m: greedy_reference(m, generation_prompt(m, seed), generate)) if generate else None)
    calibrated, calibration_report = calibrate_q4_0(model, rounding, keep_f16, calibration, seed)
    if next(model.parameters()).dtype != torch_dtype:
        # the caller's module is left as it was; a model loaded here is cast over its own memory
        model = copy.deepcopy(model).to(torch_dtype) if source_dir is None else cast_in_place(model, torch_dtype)
    force_f32 = _force_f32_option(force_f32, torch_dtype)
    target_kwargs = _target_options(weights, rounding, calibrated, force_f32, fused)
    timings = {"reference": original.seconds} if original is not None else {}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    stage.chmod(0o755)
    try:
        layout = cache_layout(model)
        _refuse_full_sequence_models(model)
        wrapper = FlatCacheLM(model, layout, last_logits_only)
        dtype_name = {torch.float32: "f32", torch.float16: "f16"}[torch_dtype]
        manifest = _manifest(model, layout, dtype_name, weights, last_logits_only, batch_symbol, generate, check)
        manifest["force_f32"] = list(force_f32)
        t0 = time.perf_counter()
        # a model loaded here is released before tract runs: its references are computed first
        defer = check and source_dir is not None
        result, target = _export_asset(wrapper, layout, stage / ASSET_NAME, torch_dtype, batch_symbol, check,
                                       _properties(manifest), target_kwargs, timeout, seed,
                                       out_dir.with_name(out_dir.name + ".debug"), defer_check=defer)
        timings["export"] = time.perf_counter() - t0
        _refuse_prompt_only(model, result)
        _record_export(manifest, result, fused, rounding)
        if calibration_report is not None:
            manifest["q4_0_calibration"] = calibration_report.manifest_entry()
            timings["calibration"] = calibration_report.seconds
        checks = manifest["checks"]
        if result.check is not None:
            checks["export"] = {"cases": len(result.check.cases), "max_abs": _fmt(result.max_abs_diff)}
        plan = CheckPlan(stage / ASSET_NAME, torch_dtype, generate, seed, timeout, checks, timings)
        if defer:
            _checks_after_release(wrapper, layout, result, target, plan)
        else:
            _checks_with_model(wrapper, layout, result, plan, check)
        if original is not None:
            manifest["drift"] = original.manifest_entry(plan.tract_logits, checks.get("generate", {}).get("tokens"))
        manifest["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
        progress.stage("save", str(out_dir))
        _copy_companions(model, source_dir, stage)
        (stage / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        _replace_dir(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    result.path = out_dir / ASSET_NAME
    return LLMExportResult(out_dir, out_dir / ASSET_NAME, manifest, result)


def calibrate_q4_0(model: torch.nn.Module, rounding: Optional[str], keep_f16, calibration, seed: int) -> tuple:
    """``(Calibrated, CalibrationReport)`` for GPTQ rounding or weights kept in f16
    (:mod:`.calibration`; the options checked beforehand by :func:`check_calibration_options`),
    else ``(None, None)``; run on the model's own values: call it before the cast."""
    if rounding != "gptq" and keep_f16 is None:
        return None, None
    if calibration is None:
        ids = calibration_module.calibration_ids(vocab_size(model), seed, calibration_module.default_sequences(model))
        tokens = f"{len(ids)} x {ids.shape[1]} random tokens of the vocabulary (seed {seed}; no text given)"
    else:
        ids = torch.as_tensor(np.asarray(calibration), dtype=torch.long)
        if ids.ndim != 2 or not ids.numel() or int(ids.min()) < 0 or int(ids.max()) >= vocab_size(model):
            raise InvalidArgumentError(f"calibration must be token ids [sequences, length] within the vocabulary "
                                       f"(0..{vocab_size(model) - 1}), got shape {list(ids.shape)}")
        tokens = f"{len(ids)} x {ids.shape[1]} given tokens"
    return calibration_module.calibrate(model, ids, gptq=rounding == "gptq", keep_f16=keep_f16, tokens=tokens)


def check_calibration_options(weights: Optional[str], rounding: Optional[str], keep_f16, calibration) -> bool:
    """Whether the options ask for a calibration (GPTQ, weights kept in f16); a one-line error when
    they do not fit (before anything runs)."""
    if rounding != "gptq" and keep_f16 is None:
        if calibration is not None:
            raise InvalidArgumentError(f"{spell('calibration')} is for {spell('rounding', 'gptq')} or "
                                       f"{spell('keep_f16', 0.1)}; drop it or ask for one of them")
        return False
    if weights != "q4_0":
        what = spell("rounding", "gptq") if rounding == "gptq" else spell("keep_f16", keep_f16)
        raise InvalidArgumentError(f"{what} chooses how Q4_0 weights are stored: pass it with "
                                   f"{spell('weights', 'q4_0')}")
    calibration_module.keep_f16_budget(keep_f16, 1)  # its spelling, checked now
    return True


@dataclasses.dataclass
class CheckPlan:
    """What the checks after the export need, and where their facts and times go."""

    asset: Path
    dtype: torch.dtype
    generate: int
    seed: int
    timeout: float
    facts: dict  # the manifest's checks
    timings: dict
    tract_logits: dict = dataclasses.field(default_factory=dict)  # tract's logits per mode (for the drift)


def _checks_with_model(wrapper: FlatCacheLM, layout: CacheLayout, result: ExportResult, plan: CheckPlan,
                       check: bool) -> None:
    """The modes and the generation, each run in torch then in tract (the model stays loaded)."""
    with stored_weights(wrapper, result):
        if check:
            progress.stage("check modes", "prompt, prompt with past, decode in tract against transformers")
            t0 = time.perf_counter()
            plan.facts.update(check_modes(wrapper, layout, plan.asset, plan.dtype, plan.seed, plan.timeout,
                                          plan.tract_logits))
            plan.timings["modes"] = time.perf_counter() - t0
        if plan.generate:
            progress.stage("generate", f"{plan.generate} greedy tokens in tract against transformers")
            t0 = time.perf_counter()
            plan.facts["generate"] = check_generation(wrapper.model, plan.asset, plan.generate, plan.seed,
                                                      plan.timeout, tolerance_for(plan.dtype))
            plan.timings["generate"] = time.perf_counter() - t0


def _checks_after_release(wrapper: FlatCacheLM, layout: CacheLayout, result: ExportResult,
                          target: DeferredTractNNEF, plan: CheckPlan) -> None:
    """Every torch reference first (the export's cases, kept by ``target``; the modes; the greedy
    tokens), then the model is released (:func:`released_checks.release`: the IR graph, whose
    constants are the model's tensors, goes too), then tract runs the asset."""
    progress.stage("check modes", "torch references, then the model released, then tract")
    t0 = time.perf_counter()
    with stored_weights(wrapper, result):
        modes = mode_cases(wrapper, layout, plan.dtype, plan.seed)
        prompt = generation_prompt(wrapper.model, plan.seed) if plan.generate else None
        tokens, logits = greedy_steps(wrapper.model, prompt, plan.generate) if plan.generate else (None, None)
    result.graph = None  # first: its constants are the model's tensors, freed by release's collection
    release(wrapper.model)
    report, facts = run_checks(target, plan.asset, modes,
                               lambda cases, got: compare_modes(layout, plan.dtype, cases, got, plan.tract_logits))
    plan.facts["export"] = {"cases": len(report.cases),
                            "max_abs": _fmt(max((d.max_abs for _, ds in report.cases for d in ds), default=0.0))}
    plan.facts.update(facts)
    plan.timings["modes"] = time.perf_counter() - t0
    if plan.generate:
        progress.stage("generate", f"{plan.generate} greedy tokens in tract against transformers'")
        t0 = time.perf_counter()
        plan.facts["generate"] = compare_generation(plan.asset, prompt, tokens, plan.timeout, logits,
                                                    tolerance_for(plan.dtype))
        plan.timings["generate"] = time.perf_counter() - t0


@contextlib.contextmanager
def stored_weights(wrapper: torch.nn.Module, result: ExportResult):
    """Within the block, torch calls that read a parameter written in another format (f16, Q4_0)
    get the values the asset stores, so that the checks compare tract with the model the asset
    really holds (decoded when read: no second copy of the weights is held; the parameters are
    not changed)."""
    graph = result.graph
    stored = [v for v in (graph.constants() if graph is not None else [])
              if getattr(v.source, "stored_format", None) is not None and getattr(v.source, "parameter_path", None)]
    with stored_values(wrapper, stored):
        yield


def vocab_size(model: torch.nn.Module) -> int:
    """The vocabulary size of the model's language model (a multimodal config keeps it in its text config)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", None) or config.vocab_size)


def activation_dtype(dtype: Optional[str], weights: Optional[str]) -> Optional[str]:
    """``dtype``, or "f16" when it is not given and the weights are Q4_0: tract multiplies Q4_0
    weights by f16 activations several times faster than by f32 ones from 8 rows up (its own LLM
    tests run "q40ef16"); ``dtype="f32"`` keeps f32 activations."""
    return "f16" if dtype is None and weights == "q4_0" else dtype


def _resolve_dtype(dtype: Optional[str], model: torch.nn.Module) -> torch.dtype:
    if dtype is None:
        own = next(model.parameters()).dtype
        return own if own in (torch.float32, torch.float16) else torch.float32
    if dtype not in DTYPES:
        raise InvalidArgumentError(f"dtype must be one of {', '.join(DTYPES)} (or None for the model's own), got {dtype!r}")
    return DTYPES[dtype]


def _target_options(weights: Optional[str], rounding: Optional[str], calibrated, force_f32: tuple, fused: tuple) -> dict:
    """TractNNEF's keyword arguments for these options (those left at their default left out)."""
    options = {**_weights_option(weights), **({"rounding": rounding} if rounding else {})}
    if calibrated is not None:  # the wrapper holds the model as ``model``
        options["calibrated"] = calibrated.renamed(lambda path: "model." + path)
    options.update({k: v for k, v in (("force_f32", force_f32), ("fused", fused)) if v})
    return options


def _weights_option(weights: Optional[str]) -> dict:
    """``{"weights": ...}`` for TractNNEF, or {} for the default format."""
    if weights is None:
        return {}
    if "weights" not in inspect.signature(TractNNEF).parameters:
        if weights in ("native", "f32"):
            return {}
        raise InvalidArgumentError(f"{spell('weights', weights)} needs a TractNNEF with weight formats, which this "
                                   "fx2nnef build lacks; export with the default weights")
    return {"weights": weights}


def _force_f32_option(force_f32, torch_dtype: torch.dtype) -> tuple:
    """``force_f32`` checked: known parts, and only for an f16 export (an f32 one has nothing to widen)."""
    from ..ir.precision import resolve_regions

    try:
        parts = resolve_regions(force_f32 or ())
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if parts and torch_dtype is not torch.float16:
        raise InvalidArgumentError(f"{spell('force_f32', list(parts))} applies to f16 exports only; pass "
                                   f"{spell('dtype', 'f16')} "
                                   "(this export computes in f32 everywhere already)")
    return parts


def _manifest(model, layout: CacheLayout, dtype: str, weights, last_logits_only: bool, batch_symbol: bool,
              generate: int, check: bool) -> dict:
    batch = "B" if batch_symbol else 1
    inputs = {"input_ids": {"shape": [batch, "S"], "dtype": "i64"}}
    outputs = {"outputs": {"shape": [batch, 1 if last_logits_only else "S", vocab_size(model)],
                           "dtype": dtype}}
    names = zip(layout.input_names()[1:], layout.output_names()[1:], layout.shapes(batch, "P"),
                layout.shapes(batch, "P+S"))
    for in_name, out_name, in_shape, out_shape in names:
        inputs[in_name] = {"shape": in_shape, "dtype": dtype}
        outputs[out_name] = {"shape": out_shape, "dtype": dtype}
    return {
        "format": "fx2nnef-llm/1",
        "architecture": type(model).__name__,
        "inputs": inputs, "outputs": outputs,
        "symbols": (["B"] if batch_symbol else []) + ["S"] + (["P"] if layout.has_length else []),
        "dtype": dtype, "weights": weights or "native", "check_tolerance": "very" if dtype == "f16" else "approximate",
        "last_logits_only": last_logits_only,
        "num_layers": layout.num_layers, "kv_heads": layout.kv_heads,
        "checks_requested": (["export", "prompt", "prompt_with_past", "decode"] if check else [])
        + ([f"generate:{generate}"] if generate else []),
        "checks": {},
    }


def _record_export(manifest: dict, result: ExportResult, fused: tuple, rounding: Optional[str]) -> None:
    """The export's facts in the manifest: fused ops, guards, weight bytes, Q4_0 rounding."""
    if fused:
        manifest["fused"] = fused_counts(result.graph, fused)
    manifest["guards"] = [str(g) for g in result.guards]
    weights_written = getattr(result, "weights", [])
    manifest["weight_bytes"] = {"native": sum(w.native_bytes for w in weights_written),
                                "stored": sum(w.stored_bytes for w in weights_written)}
    if manifest["weights"] == "q4_0":
        manifest["q4_0_rounding"] = rounding or DEFAULT_Q4_0_ROUNDING


def _properties(manifest: dict) -> dict:
    """The manifest's facts as tract properties (strings)."""
    return {
        "llm_format": manifest["format"], "llm_architecture": manifest["architecture"],
        "llm_inputs": ",".join(manifest["inputs"]), "llm_outputs": ",".join(manifest["outputs"]),
        "llm_symbols": ",".join(manifest["symbols"]), "llm_dtype": manifest["dtype"],
        "llm_weights": manifest["weights"], "llm_last_logits_only": str(manifest["last_logits_only"]).lower(),
        "llm_checks": ",".join(manifest["checks_requested"]),
    }


def _export_asset(wrapper: FlatCacheLM, layout: CacheLayout, path: Path, dtype: torch.dtype, batch_symbol: bool,
                  check: bool, properties: dict, target_kwargs: dict, timeout: float, seed: int,
                  debug_bundle: Path, defer_check: bool = False) -> tuple:
    """Trace at S=3, P=5 (distinct sizes above 1, batch 2 with a batch symbol) and write the asset;
    ``(result, target)``. ``defer_check``: the check cases are kept in the target, tract is not run
    (:mod:`.released_checks`)."""
    batch = 2 if batch_symbol else 1
    vocab = vocab_size(wrapper.model)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, 3), generator=g)
    cache = layout.random(5, dtype, batch, g)
    names = layout.input_names()
    dyn = {"input_ids": {1: "S", **({0: "B"} if batch_symbol else {})}}
    for name, slot in zip(names[1:], layout.slots):
        dyn[name] = {**({2: "P"} if slot.grows else {}), **({0: "B"} if batch_symbol else {})}
    dyn = {k: v for k, v in dyn.items() if v}
    target = (DeferredTractNNEF if defer_check else TractNNEF)(check_io=check, specific_properties=properties, asserts=contract_asserts(wrapper.model, layout.has_length),
                       dump_identity_properties=True, timeout=timeout, check_io_tolerance=tolerance_for(dtype),
                       **target_kwargs)
    with torch.no_grad():
        return export(wrapper, (ids, *cache), path, target=target, input_names=names, dynamic_axes=dyn,
                      output_names=layout.output_names(), debug_bundle=str(debug_bundle)), target


def contract_asserts(model: torch.nn.Module, has_length: bool = True) -> list[str]:
    """The symbol assertions of the contract: sizes, the context bound, the two scenarios
    (``tg``: text generation, one token; ``pp``: prompt processing, no past). A cache of
    states only (Mamba) has no length P."""
    asserts = ["P >= 0", "S >= 1"] if has_length else ["S >= 1"]
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is None:  # MPT names its context (the length of its ALiBi table) max_seq_len
        max_pos = getattr(model.config, "max_seq_len", None)
    if isinstance(max_pos, int) and max_pos > 0:
        asserts.append(f"S+P < {max_pos}" if has_length else f"S < {max_pos}")
    return asserts + (["tg: S==1", "pp: P==0"] if has_length else [])


def tolerance_for(dtype: torch.dtype) -> str:
    """The check level: tract's "approximate" in f32; "very" in f16, where tract and torch
    round differently at every op (both stay as far from an f32 run as from each other)."""
    return "very" if dtype == torch.float16 else "approximate"


def mode_cases(wrapper: FlatCacheLM, layout: CacheLayout, dtype: torch.dtype, seed: int = 0) -> dict:
    """``{mode: (inputs, expected, sizes)}`` for prompt (P=0), prompt with past and decode (S=1).

    The past is the model's own cache over a random prompt, cut to P; the expected outputs
    are transformers' with a ``DynamicCache`` holding that past.
    """
    total = MODE_PROMPT + MODE_CHUNK
    g = torch.Generator().manual_seed(seed + 1)
    full = torch.randint(0, vocab_size(wrapper.model), (1, total), generator=g)
    with torch.no_grad():
        past = wrapper(full, *layout.empty(0, dtype))[1:]
    if layout.has_states:
        _check_zero_states(wrapper, layout, full[:, :MODE_PROMPT], dtype)
    cases = {}
    for mode, p, s in (("prompt", 0, MODE_PROMPT), ("prompt_with_past", MODE_PROMPT, MODE_CHUNK),
                       ("decode", total - 1, 1)):
        ids = full[:, p:p + s]
        if layout.has_states:  # the states after the first p tokens: the prefix is run
            with torch.no_grad():
                cache = [t.contiguous() for t in wrapper(full[:, :p], *layout.empty(0, dtype))[1:]] if p else \
                    layout.empty(0, dtype)
        else:
            cache = [t[:, :, :p].contiguous() for t in past]
        with torch.no_grad():
            expected = wrapper(ids, *cache)
        cases[mode] = ([ids.numpy()] + [t.numpy() for t in cache], [t.numpy() for t in expected], {"P": p, "S": s})
    return cases


def _refuse_full_sequence_models(model: torch.nn.Module, seed: int = 0) -> None:
    """The contract feeds the new tokens only, with the cache of the ones before. A model that
    needs the whole sequence again at each step (its forward slices the cached prefix off itself,
    as CPM-Ant's does) fails or gives other logits that way: refused, before any tracing.

    Checked in torch on a decoding step (7 tokens, then the 8th with their cache) against one
    run over the 8; the bound is loose (a mixture of experts may route a token otherwise on
    rounding), the failures it is for are not small."""
    name = type(model).__name__
    g = torch.Generator().manual_seed(seed + 3)
    ids = torch.randint(0, vocab_size(model), (1, 8), generator=g,
                        device=next(model.parameters()).device)
    try:
        with torch.no_grad():
            full = model(input_ids=ids, use_cache=True).logits[:, -1].float()
            past = model(input_ids=ids[:, :-1], use_cache=True)
            step = model(input_ids=ids[:, -1:], use_cache=True,
                         **{cache_argument(model): returned_cache(past)}).logits[:, -1].float()
    except Exception as exc:  # noqa: BLE001 - the model's own error, named in ours
        first = str(exc).strip().split("\n")[0][:300]
        raise InvalidArgumentError(
            f"{name} fails on one new token given with the cache of the tokens before it "
            f"({type(exc).__name__}: {first}): the LLM contract feeds only the new tokens at each step, and this "
            "model seems to need the whole sequence again (its generate passes it all). Nothing was written; "
            "export it with fx2nnef.export and your own inputs (use_cache=False)") from exc
    diff = (full - step).abs().max().item() if full.shape == step.shape else float("inf")
    if not diff <= 1e-2 * max(1.0, full.abs().max().item()):
        raise InvalidArgumentError(
            f"{name} gives other logits for a token fed after the cache of the tokens before it than in one run "
            f"over the whole sequence (max difference {diff:.3g}): the LLM contract feeds only the new tokens at "
            "each step, and this model seems to need the whole sequence again. Nothing was written; export it "
            "with fx2nnef.export and your own inputs (use_cache=False)")


def _refuse_prompt_only(model: torch.nn.Module, result: ExportResult) -> None:
    """One graph serves prompts and decoding only if it is valid at S=1. A state-space layer
    that scans from zero for a prompt and steps from its state for one token (transformers'
    Mamba: "initial hidden state is not supported" on the prompt path) makes the graph traced
    on a prompt valid for S >= 2 only."""
    rng = (getattr(result, "ranges", None) or {}).get("S")
    if rng is None or rng.contains(1):
        return
    raise InvalidArgumentError(
        f"{type(model).__name__}'s graph traced on a prompt is valid for {rng} only: the model takes other "
        "code for one token (a step from its cached state) than for a prompt, so one asset cannot serve "
        "prompts and decoding under the LLM contract. Nothing was written; export the two paths with "
        "fx2nnef.export and your own inputs (S fixed to 1 for decoding)")


def _check_zero_states(wrapper: FlatCacheLM, layout: CacheLayout, ids: torch.Tensor, dtype: torch.dtype) -> None:
    """The contract starts a sequence from zero states, run as states already there: the
    model's logits that way must be those of its own first call (no state yet), which takes
    other code in transformers (padding instead of a previous state, a scan from zero)."""
    with torch.no_grad():
        fresh = wrapper.model(input_ids=ids, use_cache=True).logits
        zero = wrapper(ids, *layout.empty(0, dtype))[0]
    if wrapper.last_logits_only:
        fresh = fresh[:, -1:]
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    if fresh.shape != zero.shape or not torch.allclose(fresh.float(), zero.float(), rtol=tol, atol=tol):
        raise InvalidArgumentError(
            f"{type(wrapper.model).__name__} gives other logits from zero states than on its first call "
            "(max difference "
            f"{(fresh.float() - zero.float()).abs().max().item() if fresh.shape == zero.shape else 'in shape'}): "
            "the LLM contract's state inputs cannot start a sequence for it; export it with fx2nnef.export")


def check_modes(wrapper: FlatCacheLM, layout: CacheLayout, asset: Path, dtype: torch.dtype, seed: int = 0,
                timeout: float = 600.0, tract_logits: Optional[dict] = None) -> dict:
    """Run the three modes in tract (one child) and compare; CheckIOError when one differs.
    ``tract_logits``, when given, receives tract's logits per mode."""
    cases = mode_cases(wrapper, layout, dtype, seed)
    got = run_tract_many(asset, [inputs for inputs, _, _ in cases.values()], timeout=timeout)
    return compare_modes(layout, dtype, cases, got, tract_logits)


def compare_modes(layout: CacheLayout, dtype: torch.dtype, cases: dict, got: list,
                  tract_logits: Optional[dict] = None) -> dict:
    """The facts of each mode (tract's outputs ``got`` against ``cases``); CheckIOError when one differs.
    ``tract_logits``, when given, receives tract's logits per mode."""
    facts, failed = {}, []
    for (mode, (_, expected, sizes)), outputs in zip(cases.items(), got):
        diffs = compare_outputs(layout.output_names(), expected, outputs, tolerance_for(dtype))
        if tract_logits is not None:
            tract_logits[mode] = outputs[0]
        facts[mode] = {**sizes, "max_abs_logits": _fmt(diffs[0].max_abs),
                       "max_abs_cache": _fmt(max((d.max_abs for d in diffs[1:]), default=0.0))}
        if not all(d.ok for d in diffs):
            failed.append(f"  [{mode}, P={sizes['P']}, S={sizes['S']}]\n" + format_diffs(diffs))
    if failed:
        raise CheckIOError("the LLM asset differs from transformers (DynamicCache) in tract:\n" + "\n".join(failed)
                           + "\nNothing was written.", [], "")
    return facts


def check_generation(model: torch.nn.Module, asset: Path, steps: int, seed: int = 0, timeout: float = 600.0,
                     tolerance: str = "approximate") -> dict:
    """Greedy tokens from the asset in tract must equal transformers' greedy decoding
    (:func:`greedy_steps`), or part from it only at a near tie (:func:`compare_generation`).
    End-of-sequence is ignored on both sides so that all ``steps`` tokens are compared."""
    prompt = generation_prompt(model, seed)
    tokens, logits = greedy_steps(model, prompt, steps)
    return compare_generation(asset, prompt, tokens, timeout, logits, tolerance)


def compare_generation(asset: Path, prompt: torch.Tensor, expected: list, timeout: float = 600.0,
                       logits: Optional[np.ndarray] = None, tolerance: str = "approximate") -> dict:
    """The asset's greedy tokens in tract after ``prompt`` must be ``expected``. Where they first
    part, ``logits`` (the reference's last logits at each step) may show a near tie: the
    reference's two tokens closer than two values each within ``tolerance`` of it can be (the
    bound the mode checks hold tract's logits to). Greedy decoding then follows the other token in
    tract, so the steps after it are not compared; the facts say where and by how much.
    Otherwise the check fails, with the gap."""
    steps = len(expected)
    got = greedy_generate(asset, prompt.numpy(), steps, timeout=timeout)
    facts = {"steps": steps, "prompt": prompt[0].tolist(), "tokens": got, "equal": got == expected}
    part = parting(got, expected, logits, tolerance)
    if part is None:
        return facts
    if part.near_tie:
        return {**facts, "expected": expected, "near_tie": part.facts()}
    how = "" if part.gap is None else (f"; at step {part.step} the reference's logits put token {expected[part.step]} "
                                       f"{_fmt(part.gap)} above token {got[part.step]}, more than a near tie at "
                                       f"tolerance {tolerance} ({_fmt(part.bound)})")
    raise CheckIOError(f"greedy generation differs: tract gave {got}, transformers' greedy decoding gave {expected} "
                       f"after the prompt {prompt[0].tolist()}{how}. Nothing was written.", [], "")


@dataclasses.dataclass
class Parting:
    """Where greedy tokens first part from the reference's, and the reference's gap there between
    its token and the other (None without its logits)."""

    step: int
    gap: Optional[float] = None
    bound: Optional[float] = None  # the largest gap two logits each within the tolerance could swap

    @property
    def near_tie(self) -> bool:
        return self.gap is not None and self.gap <= self.bound

    def facts(self) -> dict:
        return {"step": self.step, "gap": _fmt(self.gap), "bound": _fmt(self.bound)}


def parting(got: list, expected: list, logits: Optional[np.ndarray], tolerance: str) -> Optional[Parting]:
    """Where ``got`` first parts from ``expected`` (None when equal), with the gap of the reference's
    ``logits`` (``[steps, vocab]``) at that step between the two tokens, and its bound at ``tolerance``."""
    step = first_difference(got, expected)
    if step is None or logits is None or step >= min(len(got), len(expected)):
        return None if step is None else Parting(step)
    tol = resolve_tolerance(tolerance)
    row = logits[step].astype(np.float64)
    a, b = row[expected[step]], row[got[step]]
    return Parting(step, float(a - b), 2 * tol.atol + tol.rtol * (abs(a) + abs(b)))


def generation_prompt(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    """The 5 random tokens the generation check starts from."""
    g = torch.Generator().manual_seed(seed + 2)
    return torch.randint(0, vocab_size(model), (1, 5), generator=g)


def greedy_reference(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> list[int]:
    """The argmax of the model's last logits, ``steps`` times, each token fed back with the
    model's own cache: ``model.generate(do_sample=False)`` without its logits processors.

    ``generate`` applies what the model's generation config asks for (BART's forced
    end-of-sequence at the last step, repetition penalties, suppressed tokens), and a config value
    left unset is filled from the model's, so those cannot be turned off there. They act on the
    logits after the asset, in the application's decoding loop, not in the exported graph."""
    return greedy_steps(model, prompt, steps)[0]


def greedy_steps(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> tuple[list[int], np.ndarray]:
    """:func:`greedy_reference`'s tokens and the last logits of each step (float32, steps x vocab)."""
    tokens: list[int] = []
    rows = []
    ids, past = prompt, None
    with torch.no_grad():
        for _ in range(steps):
            out = model(input_ids=ids, use_cache=True, **({} if past is None else {cache_argument(model): past}))
            last = out.logits[0, -1]
            tokens.append(int(last.argmax()))
            rows.append(last.float().numpy())
            past = returned_cache(out)
            ids = torch.tensor([[tokens[-1]]], dtype=prompt.dtype)
    return tokens, np.stack(rows) if rows else np.zeros((0, 0), np.float32)


def _copy_companions(model, source_dir: Optional[Path], stage: Path) -> None:
    """config.json, tokenizer and generation config files next to the asset."""
    if source_dir is not None:
        for name in COMPANION_FILES:
            if (source_dir / name).is_file():
                shutil.copy2(source_dir / name, stage / name)
    if not (stage / "config.json").exists():
        model.config.to_json_file(str(stage / "config.json"))
    gen = getattr(model, "generation_config", None)
    if gen is not None and not (stage / "generation_config.json").exists() and source_dir is None:
        gen.to_json_file(str(stage / "generation_config.json"))


def _replace_dir(stage: Path, out_dir: Path) -> None:
    """Move ``stage`` to ``out_dir``, replacing an existing one only once the new one is complete."""
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
    stage.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _fmt(value: float) -> float:
    return float(f"{float(value):.3g}") if np.isfinite(value) else float(value)
