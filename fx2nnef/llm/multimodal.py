"""``fx2nnef llm`` on a vision- or audio-language model: one encoder graph per modality, the
decoder graph with the KV-cache contract plus the embeddings spliced at the placeholder tokens,
``fx2nnef.json`` and a ``multimodal.json`` in torch_to_nnef's form, all checked in tract.

- encoder ``<tower>/model.nnef.tgz``: the model's own tower and projector
  (``get_image_features`` / ``get_audio_features``), the processor's tensor in (``pixel_values``
  ``[IMAGES, C, H, W]``, Idefics3's tiles ``[TILES, C, H, W]``, Voxtral's mel chunks
  ``[CHUNKS, mels, frames]``), ``out_<modality>_embeddings [N, hidden]`` out;
- decoder ``model.nnef.tgz``: ``input_ids`` and the caches as for a text LLM, then
  ``in_<modality>_embeddings [N, hidden]``: the rows of the placeholder tokens of this call, in
  order (``[0, hidden]`` for a call without any). The text embeddings of the placeholders are
  replaced by those rows in the graph; the model's own mask and positions do the rest.
  Qwen2-VL / Qwen2.5-VL also take the images' grids and a position shift carried between calls
  (``mrope.py``), and their encoder per-patch tables computed from the grids on the host
  (``qwen_vision.py``). Qwen3-VL's encoder also outputs its DeepStack streams
  ``out_image_deepstack_<k> [N, hidden]``, which the decoder takes as ``in_image_deepstack_<k>``
  (after the embeddings) and adds at the placeholders to the output of its layer k, as
  transformers does.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import progress
from ..api import export
from ..errors import CheckIOError, InvalidArgumentError
from ..targets import TractNNEF
from ..targets.tolerance import compare_outputs, format_diffs
from ..targets.tract_runner import run_tract_many
from .export import (MANIFEST_NAME, SOURCE_EXPORTERS, LLMExportResult, _copy_companions, _fmt, _force_f32_option,
                     _manifest, _properties, _replace_dir, _resolve_dtype, _weights_option, activation_dtype,
                     contract_asserts, parting, stored_weights, tolerance_for, vocab_size)
from . import drift
from .mrope import mrope_positions
from .multimodal_families import Family, Modality, family_of, is_multimodal_config
from .multimodal_run import tract_generate
from .wrapper import CacheLayout, build_layers, cache_layout, flat_cache_of, returned_cache

MULTIMODAL_MANIFEST = "multimodal.json"
# processor files that travel with the asset beside the tokenizer
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
# text tokens around the placeholders in the checks: before, after, and the past of the chunk mode
TEXT_BEFORE, TEXT_AFTER, PAST = 2, 3, 8


def multimodal_source(model_or_dir) -> bool:
    """Whether ``export_causal_lm`` was given a model (or a folder) with a vision or audio tower."""
    if isinstance(model_or_dir, torch.nn.Module):
        config = getattr(model_or_dir, "config", None)
        return config is not None and is_multimodal_config(config)
    config_path = Path(model_or_dir) / "config.json"
    if not config_path.is_file():
        return False
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False  # the text path names the damage
    return isinstance(config, dict) and is_multimodal_config(config)


def load_multimodal(path: Path) -> torch.nn.Module:
    """The folder's model with its towers, by the class config.json names (no download)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    family_of(config)  # refuse before loading weights
    names = list(getattr(config, "architectures", None) or [])
    cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), None)
    if cls is None or not hasattr(cls, "from_pretrained"):
        cls = transformers.AutoModelForImageTextToText
    progress.stage("load", str(path))
    try:
        model = cls.from_pretrained(str(path), local_files_only=True, dtype="auto")
    except Exception as exc:  # noqa: BLE001 - transformers' own error, named in ours
        raise InvalidArgumentError(f"transformers {transformers.__version__} cannot load the model in {str(path)!r} "
                                   f"as {cls.__name__}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}. Fix "
                                   "the folder or write it again with save_pretrained") from exc
    return model.eval()


class EncoderGraph(torch.nn.Module):
    """The model's own tower and projector for one modality: raw input to ``[N, hidden]``."""

    def __init__(self, model: torch.nn.Module, modality: Modality):
        super().__init__()
        self.model = model
        self.modality = modality

    def forward(self, *raw: torch.Tensor):
        return self.modality.features(self.model, *raw)


def as_outputs(features) -> tuple:
    """An encoder's outputs as a tuple: the embeddings, then its DeepStack streams if any."""
    return tuple(features) if isinstance(features, (tuple, list)) else (features,)


def example_inputs(m: Modality, config, count: int, generator: torch.Generator, dtype) -> tuple:
    """The encoder's inputs for ``count`` examples: the raw input in ``dtype``, then its tables."""
    raw = m.example(config, count, generator)
    raw = raw if isinstance(raw, tuple) else (raw,)
    return (raw[0].to(dtype), *raw[1:])


def splice(embeds: torch.Tensor, mask: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``embeds [1, S, H]`` with the rows of ``features [N, H]`` at the ``mask`` positions, in
    order (what transformers' ``masked_scatter`` does), for any N: row 0 of the table is a zero
    row the text positions read and drop."""
    table = torch.cat([embeds.new_zeros(1, embeds.shape[-1]), features.to(embeds.dtype)])
    index = torch.where(mask, torch.cumsum(mask.long(), dim=1), 0)
    return torch.where(mask.unsqueeze(-1), table[index], embeds)


@contextlib.contextmanager
def deepstack_added(model: torch.nn.Module, mask: torch.Tensor, streams: tuple):
    """Within the block, decoder layer k's output gets stream k's rows added at the ``mask``
    positions (what transformers' ``_deepstack_process`` does with the tower's DeepStack
    features): forward hooks on the model's first ``len(streams)`` text layers."""
    if not streams:
        yield
        return
    layers = model.model.language_model.layers

    def adder(rows):
        def hook(module, args, output):
            zero = torch.zeros_like(output)
            return output + splice(zero, mask, rows)
        return hook

    handles = [layers[k].register_forward_hook(adder(rows)) for k, rows in enumerate(streams)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class SplicedDecoder(torch.nn.Module):
    """``forward(input_ids, *flat_cache, *embeddings) -> (logits, *flat_new_cache)``: the text
    embeddings of the call with each modality's rows spliced at its placeholders, run through the
    model with a full-length cache (as ``FlatCacheLM``)."""

    def __init__(self, model: torch.nn.Module, layout: CacheLayout, family: Family, last_logits_only: bool = False):
        super().__init__()
        self.model = model
        self.layout = layout
        self.family = family
        self.placeholders = [m.placeholder(model.config) for m in family.modalities]
        self.streams = [m.streams(model.config) for m in family.modalities]
        self.last_logits_only = last_logits_only

    def forward(self, input_ids: torch.Tensor, *rest: torch.Tensor):
        from transformers import DynamicCache

        n = len(self.placeholders) + sum(self.streams)
        state = rest[len(rest) - 2:] if self.family.mrope else ()  # the image grids, the position shift
        rest = rest[:len(rest) - len(state)]
        flat, features = rest[:len(rest) - n], rest[len(rest) - n:]
        features, streams = features[:len(self.placeholders)], features[len(self.placeholders):]
        masks = [input_ids == token for token in self.placeholders]
        text_ids = input_ids
        for mask in masks:  # a placeholder id may lie outside the text vocabulary (Gemma 3)
            text_ids = torch.where(mask, 0, text_ids)
        embeds = self.model.get_input_embeddings()(text_ids)
        for mask, rows in zip(masks, features):
            embeds = splice(embeds, mask, rows)
        cache = DynamicCache(ddp_cache_data=None, config=None)
        cache.layers = build_layers(self.layout, flat)
        cache.layer_class_to_replicate = None
        kwargs = {"logits_to_keep": 1} if self.last_logits_only else {}
        past = next(t.shape[2] for slot, t in zip(self.layout.slots, flat) if slot.grows)
        shifted = ()
        if state:
            merge = self.model.config.vision_config.spatial_merge_size
            kwargs["position_ids"], shift = mrope_positions(masks[0], past, state[0], state[1], merge)
            shifted = (shift,)
        with deepstack_added(self.model, masks[0], streams):  # DeepStack: of the first modality (the image)
            out = self.model(inputs_embeds=embeds, past_key_values=cache, use_cache=True,
                             **self.family.decoder_kwargs(masks[0], past), **kwargs)
        return (out.logits, *flat_cache_of(self.layout, returned_cache(out).layers), *shifted)

    def input_names(self) -> list[str]:
        return self.layout.input_names() + [f"in_{m.name}_embeddings" for m in self.family.modalities] \
            + [f"in_{m.name}_deepstack_{k}" for m, n in zip(self.family.modalities, self.streams) for k in range(n)] \
            + (["in_image_grid_thw", "in_rope_delta"] if self.family.mrope else [])

    def output_names(self) -> list[str]:
        return self.layout.output_names() + (["out_rope_delta"] if self.family.mrope else [])


@dataclasses.dataclass
class Scenario:
    """A prompt holding one input of each modality: the raw inputs, their embeddings from the
    model's own towers, and the token ids with the placeholders between text."""

    raws: list
    features: list
    ids: torch.Tensor
    streams: list = dataclasses.field(default_factory=list)  # the DeepStack streams of all modalities, flat

    def counts(self) -> list[int]:
        return [int(f.shape[0]) for f in self.features]


def scenario(model, family: Family, seed: int, count: int = 1) -> Scenario:
    """Random text around ``count`` inputs of each modality (their placeholders in a row)."""
    g = torch.Generator().manual_seed(seed)
    raws, feats, streams = [], [], []
    with torch.no_grad():
        for m in family.modalities:
            raws.append(example_inputs(m, model.config, count, g, next(model.parameters()).dtype))
            outputs = as_outputs(EncoderGraph(model, m)(*raws[-1]))
            feats.append(outputs[0])
            streams.extend(outputs[1:])
    text = _text_tokens(model, TEXT_BEFORE + TEXT_AFTER + PAST, g)
    parts = [text[:PAST + TEXT_BEFORE]]
    for m, f in zip(family.modalities, feats):
        parts.append(torch.full((f.shape[0],), m.placeholder(model.config), dtype=torch.long))
    parts.append(text[PAST + TEXT_BEFORE:])
    return Scenario(raws, feats, torch.cat(parts).unsqueeze(0), streams)


def _text_tokens(model, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` random ids of the text vocabulary, none a special token the config names."""
    config = model.config
    special = {v for conf in (config, getattr(config, "text_config", None)) if conf is not None
               for k, v in vars(conf).items() if isinstance(v, int) and ("token_id" in k or "token_index" in k)}
    vocab = vocab_size(model)
    ids = torch.randint(0, vocab, (count * 4,), generator=g)
    ids = ids[~torch.isin(ids, torch.tensor(sorted(special) or [-1]))]
    return ids[:count]


def export_multimodal_lm(model_or_dir, out_dir, options: dict) -> LLMExportResult:
    """What ``export_causal_lm`` does for a model with vision or audio towers (see the module's
    doc), ``options`` being its keyword arguments. Returns an ``LLMExportResult`` whose
    ``asset`` is the decoder."""
    from ..errors import spell

    out_dir = Path(out_dir)
    if out_dir.exists() and not options["overwrite"]:
        raise InvalidArgumentError(f"{str(out_dir)!r} exists: remove it or pass {spell('overwrite', True)}")
    if options["batch_symbol"]:
        raise InvalidArgumentError(f"{spell('batch_symbol', True)} is for text LLMs only: the multimodal decoder "
                                   "splices the embeddings of one sequence; export with batch 1")
    calibrated = [spell("rounding", "gptq")] if options.get("rounding") == "gptq" else []
    calibrated += [spell("keep_f16", options["keep_f16"])] if options.get("keep_f16") is not None else []
    calibrated += [spell("calibration")] if options.get("calibration") is not None else []
    if calibrated:
        raise InvalidArgumentError(f"{', '.join(calibrated)}: calibrated Q4_0 is for text LLMs only (multimodal "
                                   "decoders take rounding 'search' or 'minmax')")
    source_dir = None if isinstance(model_or_dir, torch.nn.Module) else Path(model_or_dir)
    model = model_or_dir.eval() if source_dir is None else load_multimodal(source_dir)
    family = family_of(model.config)
    torch_dtype = _resolve_dtype(activation_dtype(options["dtype"], options["weights"]), model)
    # the original model's logits, before its weights are rounded or cast (None: it keeps its values)
    original = original_reference(model, family, options, torch_dtype)
    if next(model.parameters()).dtype != torch_dtype:
        import copy
        model = (copy.deepcopy(model) if source_dir is None else model).to(torch_dtype)
    target_options = {**_weights_option(options["weights"]),
                      **{k: v for k, v in (("fused", options["fused"]), ("rounding", options.get("rounding")),
                                           ("force_f32", _force_f32_option(options["force_f32"], torch_dtype))) if v}}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    stage.chmod(0o755)
    try:
        job = _Job(model, family, stage, {**options, "dtype": torch_dtype})
        manifest, result = job.run(target_options, original)
        progress.stage("save", str(out_dir))
        _copy_companions(model, source_dir, stage)
        if source_dir is not None:
            for name in PROCESSOR_FILES:
                if (source_dir / name).is_file():
                    shutil.copy2(source_dir / name, stage / name)
        add_preprocessing(manifest, source_dir)
        (stage / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        (stage / MULTIMODAL_MANIFEST).write_text(json.dumps(t2n_manifest(manifest), indent=2) + "\n")
        _replace_dir(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    result.path = out_dir / "model.nnef.tgz"
    return LLMExportResult(out_dir, out_dir / "model.nnef.tgz", manifest, result)


def original_reference(model, family: Family, options: dict, export_dtype: torch.dtype):
    """:func:`fx2nnef.llm.drift.reference_with` for the multimodal decoder: the original model's
    logits on the check modes (its own forward on the raw input) and its greedy tokens, on the
    same scenario as the checks; None when the asset keeps the model's values."""
    check, steps = options["check"], options["generate"]

    def run(m, compute):
        job = _Job(m, family, None, {**options, "dtype": compute})
        logits, sizes = {}, {}
        if check:
            for mode, (inputs, expected, past) in job.mode_cases().items():
                logits[mode] = expected[0].float().numpy()
                sizes[mode] = {"P": past, "S": int(inputs[0].shape[1])}
        return logits, sizes, job.greedy_reference(steps)[0] if steps else None

    return drift.reference_with(model, export_dtype, options["weights"], run if check or steps else None)


class _Job:
    """One multimodal export into ``stage``: the encoders, the decoder, their checks."""

    def __init__(self, model, family: Family, stage: Path, options: dict):
        self.model, self.family, self.stage = model, family, stage
        self.dtype, self.check, self.generate = options["dtype"], options["check"], options["generate"]
        self.seed, self.timeout, self.weights = options["seed"], options["timeout"], options["weights"]
        self.tolerance = tolerance_for(self.dtype)
        self.layout = cache_layout(model)
        self.decoder = SplicedDecoder(model, self.layout, family, options["last_logits_only"])
        self.scenario = scenario(model, family, self.seed)

    def run(self, options: dict, original: Optional[drift.OriginalReference] = None):
        """The encoders and the decoder exported and checked; ``original``: the original model's
        reference, for the ``drift`` of a rounded or cast asset."""
        generate = self.generate
        dtype_name = {torch.float32: "f32", torch.float16: "f16"}[self.dtype]
        manifest = _manifest(self.model, self.layout, dtype_name, self.weights, self.decoder.last_logits_only, False,
                             generate, self.check)
        manifest["format"] = "fx2nnef-llm-multimodal/1"
        manifest["multimodal"] = {"encoders": []}
        if self.check:
            manifest["checks_requested"] += [f"encoder_{m.tower}" for m in self.family.modalities]
        timings = {}
        for m, count in zip(self.family.modalities, self.scenario.counts()):
            t0 = time.perf_counter()
            manifest["multimodal"]["encoders"].append(self.export_encoder(m, count, dtype_name, manifest["checks"]))
            timings[f"encoder_{m.tower}"] = time.perf_counter() - t0
        for m in self.family.modalities:
            manifest["inputs"][f"in_{m.name}_embeddings"] = {"shape": [m.symbol, self.hidden], "dtype": dtype_name}
            manifest["symbols"].append(m.symbol)
        for m in self.family.modalities:
            for k in range(m.streams(self.model.config)):
                manifest["inputs"][f"in_{m.name}_deepstack_{k}"] = {
                    "shape": [m.symbol, self.hidden], "dtype": dtype_name, "added_after_layer": k}
        if self.family.mrope:
            manifest["inputs"]["in_image_grid_thw"] = {"shape": ["K", 3], "dtype": "i64"}
            manifest["inputs"]["in_rope_delta"] = {"shape": [1], "dtype": "i64", "initial": [0]}
            manifest["outputs"]["out_rope_delta"] = {"shape": [1], "dtype": "i64", "feeds": "in_rope_delta"}
            manifest["symbols"].append("K")
        t0 = time.perf_counter()
        result = self.export_decoder(_properties(manifest), options)
        timings["export"] = time.perf_counter() - t0
        manifest["weight_bytes"] = {"native": sum(w.native_bytes for w in getattr(result, "weights", [])),
                                    "stored": sum(w.stored_bytes for w in getattr(result, "weights", []))}
        if result.check is not None:
            manifest["checks"]["export"] = {"cases": len(result.check.cases), "max_abs": _fmt(result.max_abs_diff)}
        tract_logits = {}
        with stored_weights(self.decoder, result):
            if self.check:
                progress.stage("check modes", "prompt with the embeddings spliced, after a past, decode")
                t0 = time.perf_counter()
                manifest["checks"].update(self.check_modes(tract_logits))
                timings["modes"] = time.perf_counter() - t0
            if generate:
                progress.stage("generate", f"{generate} greedy tokens from the raw input in tract against transformers")
                t0 = time.perf_counter()
                manifest["checks"]["generate"] = self.check_generation(generate)
                timings["generate"] = time.perf_counter() - t0
        if original is not None:
            timings["reference"] = original.seconds
            manifest["drift"] = original.manifest_entry(tract_logits, manifest["checks"].get("generate", {}).get("tokens"))
        manifest["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
        return manifest, result

    @property
    def hidden(self) -> int:
        return int(self.scenario.features[0].shape[-1])

    def export_encoder(self, m: Modality, count: int, dtype_name: str, checks: dict) -> dict:
        """``<tower>/model.nnef.tgz``, traced on two inputs, checked at one and three."""
        progress.stage(f"encoder {m.tower}", f"{m.input_name} -> out_{m.name}_embeddings")
        path = self.stage / m.tower / "model.nnef.tgz"
        path.parent.mkdir()
        encoder = EncoderGraph(self.model, m)
        g = torch.Generator().manual_seed(self.seed + 11)
        raw = example_inputs(m, self.model.config, 2 if m.count_symbol else 1, g, self.dtype)
        names = [m.input_name, *m.extra_inputs]
        target = TractNNEF(check_io=self.check, dynamic_axes={n: {0: m.count_symbol} for n in names} if m.count_symbol else {},
                           specific_properties={"llm_format": "fx2nnef-llm-encoder/1", "llm_modality": m.name},
                           timeout=self.timeout, check_io_tolerance=self.tolerance)
        with torch.no_grad():
            export(encoder, raw, path, target=target, input_names=names,
                   output_names=m.output_names(self.model.config))
        if self.check:
            checks[f"encoder_{m.tower}"] = self.check_encoder(encoder, m, path)
        shape = [m.count_symbol or 1, *raw[0].shape[1:]]
        return {"modality": m.name, "path": f"{m.tower}/model.nnef.tgz", "placeholder_token_id":
                m.placeholder(self.model.config), "input": {"name": m.input_name, "shape": shape, "dtype": dtype_name},
                "output": {"name": f"out_{m.name}_embeddings", "feeds": f"in_{m.name}_embeddings",
                           "shape": [m.symbol, self.hidden], "dtype": dtype_name},
                **({"streams": [{"name": name, "feeds": name.replace("out_", "in_", 1), "shape": [m.symbol, self.hidden],
                                 "dtype": dtype_name} for name in m.output_names(self.model.config)[1:]]}
                   if m.streams(self.model.config) else {}),
                "tokens_per_input": count,
                **({"tables": m.tables(self.model.config)} if m.extra_inputs else {})}

    def check_encoder(self, encoder: EncoderGraph, m: Modality, path: Path) -> dict:
        """The encoder in tract against the model's own tower on 1 and 3 inputs (two inputs of
        one for a tower taking one a call)."""
        g = torch.Generator().manual_seed(self.seed + 12)
        raws = [example_inputs(m, self.model.config, n if m.count_symbol else 1, g, self.dtype) for n in (1, 3)]
        with torch.no_grad():  # the model's own tower as transformers runs it (its own tables, when it has some)
            expected = [[t.numpy() for t in as_outputs(m.own_features(self.model, r, n) if m.own_features
                                                       else encoder(*r))] for r, n in zip(raws, (1, 3))]
        got = run_tract_many(path, [[t.numpy() for t in r] for r in raws], timeout=self.timeout)
        diffs = [d for e, outs in zip(expected, got)
                 for d in compare_outputs(m.output_names(self.model.config), e, outs, self.tolerance)]
        if not all(d.ok for d in diffs):
            raise CheckIOError(f"the {m.tower} encoder (tower, projector) differs from the model's own in tract:\n"
                               + format_diffs(diffs) + "\nNothing was written.", [], "")
        return {"inputs": [int(r[0].shape[0]) if m.count_symbol else 1 for r in raws], "tokens": [int(e[0].shape[0]) for e in expected],
                "max_abs": _fmt(max(d.max_abs for d in diffs))}

    def export_decoder(self, properties: dict, options: dict):
        """``model.nnef.tgz``, traced after a past of 5 on the scenario's prompt."""
        progress.stage("decoder", "input_ids, caches and the embeddings spliced")
        sc = self.scenario
        cache = self.layout.random(5, self.dtype, 1, torch.Generator().manual_seed(self.seed + 13))
        names = self.decoder.input_names()
        dyn = {"input_ids": {1: "S"}}
        for name, slot in zip(names[1:], self.layout.slots):
            if slot.grows:
                dyn[name] = {2: "P"}
        for m in self.family.modalities:
            dyn[f"in_{m.name}_embeddings"] = {0: m.symbol}
            for k in range(m.streams(self.model.config)):
                dyn[f"in_{m.name}_deepstack_{k}"] = {0: m.symbol}
        if self.family.mrope:
            dyn["in_image_grid_thw"] = {0: "K"}
        target = TractNNEF(check_io=self.check, dynamic_axes=dyn, specific_properties=properties,
                           asserts=contract_asserts(self.model, self.layout.has_length), dump_identity_properties=True,
                           timeout=self.timeout, check_io_tolerance=self.tolerance, **options)
        with torch.no_grad():
            return export(self.decoder, (sc.ids[:, PAST:], *cache, *sc.features, *sc.streams,
                                         *self.state(sc.ids[:, PAST:], 3)),
                          self.stage / "model.nnef.tgz", target=target, input_names=names,
                          output_names=self.decoder.output_names())

    def state(self, ids: torch.Tensor, delta: int) -> tuple:
        """Qwen-VL's position inputs of a call: the grids of its images, the shift before it."""
        if not self.family.mrope:
            return ()
        return (self.family.reference_kwargs(self.model, ids)["image_grid_thw"], torch.tensor([delta]))

    def reference(self, ids: torch.Tensor, past: list, with_raw: bool) -> list:
        """The model's own forward (its towers, its splice, its mask) after ``past``: logits and
        the full cache, flat. ``with_raw``: the scenario's raw inputs and the family's keywords
        given, as ``generate`` does on its first call only."""
        from transformers import DynamicCache

        kwargs = {}
        if with_raw:
            for m, raw in zip(self.family.modalities, self.scenario.raws):
                kwargs[m.forward_name or m.input_name] = m.to_forward(raw[0])
            kwargs.update(self.family.decoder_kwargs(ids == self.decoder.placeholders[0], 0))
            kwargs.update(self.family.reference_kwargs(self.model, ids))
            if self.family.mrope:
                self.model.model.rope_deltas = None  # transformers' shift of a former sequence
        cache = DynamicCache(ddp_cache_data=None, config=None)
        cache.layers = build_layers(self.layout, past)
        cache.layer_class_to_replicate = None
        if self.decoder.last_logits_only:
            kwargs["logits_to_keep"] = 1
        with torch.no_grad():
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, **kwargs)
        deltas = getattr(self.model.model, "rope_deltas", None) if self.family.mrope else None  # None: no image yet
        shift = [torch.zeros(1, dtype=torch.long) if deltas is None else deltas.reshape(1).long()] \
            if self.family.mrope else []
        return [out.logits, *flat_cache_of(self.layout, returned_cache(out).layers), *shift]

    def no_features(self) -> list:
        return [torch.zeros(0, self.hidden, dtype=self.dtype) for _ in (*self.family.modalities, *self.scenario.streams)]

    def mode_cases(self) -> dict:
        """``{mode: (decoder inputs, the model's own outputs, P)}``: prompt (P = 0, the
        placeholders inside), prompt_with_past (the same after a text past), decode (one text
        token after the whole prompt, N = 0), the model's own forward on the raw input. After a
        past, the expected values are those of the model's one run over the whole prompt
        (transformers restarts Qwen-VL's positions at 0 for a chunk given with a cache)."""
        sc, empty, n_cache = self.scenario, self.layout.empty(0, self.dtype), len(self.layout.slots)
        chunk, head, token = sc.ids[:, PAST:], sc.ids[:, :PAST], sc.ids[:, -1:]
        past = [t.contiguous() for t in self.reference(head, empty, False)[1:1 + n_cache]]
        prompt = self.reference(chunk, empty, True)
        whole = self.reference(sc.ids, empty, True)  # its shift stays on the model for the decode step
        delta = int(whole[-1]) if self.family.mrope else 0
        decode = self.reference(token, [t.contiguous() for t in whole[1:1 + n_cache]], False)
        whole[0] = whole[0][:, -1:] if self.decoder.last_logits_only else whole[0][:, PAST:]
        cases = {"prompt": ([chunk, *empty, *sc.features, *sc.streams, *self.state(chunk, 0)], prompt, 0),
                 "prompt_with_past": ([chunk, *past, *sc.features, *sc.streams, *self.state(chunk, 0)], whole, PAST),
                 "decode": ([token, *whole[1:1 + n_cache], *self.no_features(), *self.state(token, delta)], decode,
                            int(sc.ids.shape[1]))}
        return cases

    def check_modes(self, tract_logits: dict) -> dict:
        """The decoder in tract on :meth:`mode_cases` with the towers' embeddings against the
        model's own forward on the raw input; ``tract_logits`` receives tract's logits per mode."""
        sc, n_cache = self.scenario, len(self.layout.slots)
        cases = self.mode_cases()
        got = run_tract_many(self.stage / "model.nnef.tgz", [[t.numpy() for t in inputs] for inputs, _, _ in
                                                             cases.values()], timeout=self.timeout)
        facts, failed = {}, []
        for (mode, (inputs, expected, p)), outs in zip(cases.items(), got):
            tract_logits[mode] = outs[0]
            diffs = compare_outputs(self.decoder.output_names(), [t.numpy() for t in expected], outs, self.tolerance)
            facts[mode] = {"P": p, "S": int(inputs[0].shape[1]),
                           "N": [int(inputs[1 + n_cache + k].shape[0]) for k in range(len(sc.features))],
                           "max_abs_logits": _fmt(diffs[0].max_abs),
                           "max_abs_cache": _fmt(max((d.max_abs for d in diffs[1:]), default=0.0))}
            if not all(d.ok for d in diffs):
                failed.append(f"  [{mode}]\n" + format_diffs(diffs))
        if failed:
            raise CheckIOError("the decoder with the embeddings spliced (splice, positions, mask) differs from the "
                               "model's own forward on the raw input in tract:\n" + "\n".join(failed)
                               + "\nNothing was written.", [], "")
        return facts

    def greedy_reference(self, steps: int) -> tuple[list, np.ndarray]:
        """transformers' greedy decoding from the raw inputs and the prompt: tokens and the last
        logits at every step."""
        ids, past, tokens, logits = self.scenario.ids, self.layout.empty(0, self.dtype), [], []
        for step in range(steps):
            out = self.reference(ids, past, step == 0)
            logits.append(out[0][0, -1].float().numpy())
            tokens.append(int(out[0][0, -1].argmax()))
            past = out[1:1 + len(self.layout.slots)]
            ids = torch.tensor([[tokens[-1]]])
        return tokens, np.stack(logits)

    def check_generation(self, steps: int) -> dict:
        """Raw input through the encoder graphs, the prompt and ``steps`` tokens through the
        decoder, in tract: tokens equal to transformers' greedy decoding (with the weights the
        asset stores) and logits at every step within the tolerance."""
        expected_tokens, expected_logits = self.greedy_reference(steps)
        extras = []
        if self.family.mrope:  # the grid on the prompt, none after; the shift fed back from the outputs
            first = self.state(self.scenario.ids, 0)
            extras = [(first[0].numpy(), np.zeros((0, 3), np.int64)), (first[1].numpy(), None)]
        encoders = [(self.stage / m.tower / "model.nnef.tgz", [t.numpy() for t in raw])
                    for m, raw in zip(self.family.modalities, self.scenario.raws)]
        tokens, logits = tract_generate(self.stage / "model.nnef.tgz", encoders, self.scenario.ids.numpy(), steps,
                                        self.timeout, extras, self.decoder.placeholders)
        # where the tokens part (at a near tie only, as for text LLMs), the later steps read other inputs
        part = parting(tokens, expected_tokens, expected_logits, self.tolerance)
        upto = len(expected_tokens) if part is None else part.step + 1
        diff = compare_outputs(["logits"], [expected_logits[:upto]], [logits[:upto]], self.tolerance)[0]
        if (part is not None and not part.near_tie) or not diff.ok:
            raise CheckIOError(f"greedy generation from the raw input differs in tract: tokens {tokens}, transformers "
                               f"gave {expected_tokens}; logits up to step {upto - 1}:\n{format_diffs([diff])}\n"
                               "Nothing was written.", [], "")
        facts = {"steps": steps, "prompt_length": int(self.scenario.ids.shape[1]), "tokens": tokens,
                 "equal": part is None, "max_abs_logits": _fmt(diff.max_abs)}
        if part is not None:
            facts.update(expected=expected_tokens, near_tie=part.facts())
        return facts


# what the encoders expect of the processor, when its config says it
PREPROCESSING_KEYS = ("image_processor_type", "feature_extractor_type", "image_mean", "image_std", "rescale_factor",
                      "do_rescale", "do_normalize", "size", "patch_size", "do_image_splitting", "max_image_size",
                      "do_pan_and_scan", "resample", "sampling_rate", "feature_size", "hop_length", "n_fft",
                      "chunk_length", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels")


def add_preprocessing(manifest: dict, source_dir: Optional[Path]) -> None:
    """Each encoder's ``input.preprocessing``: the facts of the folder's processor config that
    say what the encoder expects (mean/std, sizes, tiling, sampling rate), when there is one."""
    path = source_dir / "preprocessor_config.json" if source_dir is not None else None
    if path is None or not path.is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return
    facts = {k: config[k] for k in PREPROCESSING_KEYS if isinstance(config, dict) and k in config}
    for enc in manifest["multimodal"]["encoders"]:
        kind = "feature_extractor_type" if enc["modality"] == "audio" else "image_processor_type"
        if facts and (kind in facts or not ({"feature_extractor_type", "image_processor_type"} & set(facts))):
            enc["input"]["preprocessing"] = facts


def t2n_manifest(manifest: dict) -> dict:
    """``multimodal.json`` as torch_to_nnef 0.24.12 writes it: the decoder's path, and per
    encoder its modality, path, placeholder token id, input and the output feeding the decoder."""
    encoders = []
    for enc in manifest["multimodal"]["encoders"]:
        encoders.append({"modality": enc["modality"], "path": enc["path"],
                         "placeholder_token_id": enc["placeholder_token_id"], "input": enc["input"],
                         "outputs": [enc["output"], *enc.get("streams", [])]})
    return {"decoder": {"path": "model.nnef.tgz"}, "encoders": encoders}


SOURCE_EXPORTERS.append((multimodal_source, export_multimodal_lm))
