"""Greedy generation with a multimodal ``fx2nnef llm`` folder in tract: the encoder graphs on
the raw inputs, then the decoder, in one child process (a tract panic cannot take the caller
down)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import AssetInputError, TractError
from ..targets.child import clean_engine_message, crash_message, run_child

CHILD_SCRIPT = Path(__file__).resolve().with_name("_multimodal_child.py")


def generate_multimodal(out_dir, prompt: Sequence[int] | np.ndarray, inputs: dict, max_new_tokens: int, *,
                        timeout: float = 600.0) -> tuple[list, np.ndarray]:
    """Greedy tokens (and the last logits at every step) from the folder ``fx2nnef llm`` wrote for
    a multimodal model: ``inputs`` maps each encoder's input name (``pixel_values``,
    ``input_features``) to the processor's array for the prompt, whose placeholder tokens take
    the encoder's rows in order."""
    out_dir = Path(out_dir)
    manifest_path = out_dir / "fx2nnef.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    encoders = manifest.get("multimodal", {}).get("encoders")
    if not encoders:
        raise AssetInputError(f"{str(out_dir)!r} holds no multimodal export (no encoders in its fx2nnef.json); give "
                              "the folder fx2nnef llm wrote for a vision or audio model")
    missing = [e["input"]["name"] for e in encoders if e["input"]["name"] not in inputs]
    if missing:
        raise AssetInputError(f"the encoders need {', '.join(missing)}; got {', '.join(inputs) or 'nothing'}")
    pairs = []
    for enc in encoders:
        raw = np.asarray(inputs[enc["input"]["name"]], np.float16 if enc["input"]["dtype"] == "f16" else np.float32)
        fixed = [d for d in enc["input"]["shape"] if isinstance(d, int)]
        if raw.ndim != len(enc["input"]["shape"]) or any(isinstance(d, int) and d != n
                                                         for d, n in zip(enc["input"]["shape"], raw.shape)):
            raise AssetInputError(f"{enc['input']['name']} has shape {list(raw.shape)}, the encoder takes "
                                  f"{enc['input']['shape']} (sizes {fixed} fixed)")
        pairs.append((out_dir / enc["path"], [raw, *_tables(enc, inputs)]))
    extras = []
    if "in_rope_delta" in manifest.get("inputs", {}):
        grid = np.asarray(inputs["image_grid_thw"], np.int64).reshape(-1, 3)
        extras = [(grid, np.zeros((0, 3), np.int64)), (np.zeros(1, np.int64), None)]
    ids = np.asarray(prompt, np.int64).reshape(1, -1)
    return tract_generate(out_dir / "model.nnef.tgz", pairs, ids, max_new_tokens, timeout, extras,
                          [e["placeholder_token_id"] for e in encoders])


def _tables(encoder: dict, inputs: dict) -> list:
    """The host-side tables of an encoder that takes some (Qwen-VL: from ``image_grid_thw``)."""
    tables = encoder.get("tables")
    if not tables:
        return []
    if "image_grid_thw" not in inputs:
        raise AssetInputError(f"the {encoder['modality']} encoder takes its patch grids: give image_grid_thw [K, 3] "
                              "with pixel_values (the processor's tensors)")
    import torch

    from .qwen_vision import host_tables

    grid = torch.as_tensor(np.asarray(inputs["image_grid_thw"], np.int64)).reshape(-1, 3)
    patches = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    given = int(np.asarray(inputs[encoder["input"]["name"]]).shape[0])
    if patches != given:
        raise AssetInputError(f"image_grid_thw {grid.tolist()} holds {patches} patches, {encoder['input']['name']} "
                              f"{given}: give the processor's two tensors of the same images")
    return [t.numpy() for t in host_tables(grid, tables)]


def tract_generate(decoder: Path, encoders: list, prompt: np.ndarray, steps: int, timeout: float,
                   extras: list = (), placeholders: Optional[list] = None) -> tuple[list, np.ndarray]:
    """Greedy generation in a tract child: each encoder graph on its raw input (``encoders`` as
    ``(asset, array or list of arrays)`` in the decoder's order of embedding inputs), then the decoder. ``extras``:
    the decoder's inputs after the embeddings, as ``(first call, later calls)`` arrays, later None
    for a state fed back from the outputs after the caches."""
    from ..targets.tract.target import _uses_transformers

    with tempfile.TemporaryDirectory(prefix="fx2nnef_multimodal_") as temp:
        workdir = Path(temp)
        np.save(workdir / "prompt.npy", prompt)
        listed = []
        for k, (asset, raw) in enumerate(encoders):
            names = []
            for j, array in enumerate(raw if isinstance(raw, (list, tuple)) else [raw]):
                np.save(workdir / f"raw_{k}_{j}.npy", array)
                names.append(f"raw_{k}_{j}.npy")
            listed.append([str(asset), names])
        pairs = []
        for k, (first, later) in enumerate(extras):
            np.save(workdir / f"extra_{k}.npy", first)
            if later is not None:
                np.save(workdir / f"extra_{k}_later.npy", later)
            pairs.append([f"extra_{k}.npy", None if later is None else f"extra_{k}_later.npy"])
        (workdir / "request.json").write_text(json.dumps({
            "decoder": str(decoder), "encoders": listed, "steps": int(steps), "extras": pairs,
            "placeholders": list(placeholders or []), "with_transformers": _uses_transformers(decoder)}))
        try:
            outcome = run_child(CHILD_SCRIPT, workdir, timeout, preload=("numpy", "tract"))
        except Exception as error:  # noqa: BLE001 - a timeout, named
            raise TractError(f"multimodal generation in tract did not finish within {timeout} s: {error}") from error
        if outcome.result is None:
            raise TractError(crash_message("tract", decoder, outcome, "The asset crashed tract while generating."))
        if not outcome.result["ok"]:
            error = AssetInputError if outcome.result.get("type") == "AssetInputError" else TractError
            raise error(f"multimodal generation in tract failed: {clean_engine_message(outcome.result['message'])}")
        return outcome.result["tokens"], np.load(workdir / "logits.npy")
