"""Greedy generation over a multimodal fx2nnef LLM asset in tract: the encoder graphs, then the decoder.

As a child (``python _multimodal_child.py WORKDIR``, run by ``fx2nnef.llm.multimodal``), it
reads ``request.json`` (``decoder``, ``encoders`` as ``[asset, [input .npy, ...]]`` pairs in the
decoder's order of embedding inputs, ``extras``: the inputs after them as ``[first call .npy,
later calls .npy or null]``, null for a state fed back from the outputs after the caches,
``steps``, ``with_transformers``) and ``prompt.npy``; it
runs each encoder on its input, the prompt with every embedding spliced (P = 0), then one token
per call with no embeddings (N = 0), and writes ``result.json`` (the tokens) and ``logits.npy``
(the last position's logits at every step). It imports numpy and tract only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _load(path: str, with_transformers: bool):
    import tract

    loader = tract.nnef()
    if with_transformers:
        loader = loader.with_tract_transformers()
    return loader.load(path)


def _facts(model) -> list:
    """``(dims, dtype)`` of each input; a symbol is None."""
    facts = []
    for i in range(model.input_count()):
        parts = str(model.input_fact(i)).split(",")
        facts.append(([int(d) if d.isdigit() else None for d in parts[:-1]], _FLOATS.get(parts[-1], np.int64)))
    return facts


def generate(request: dict, prompt: np.ndarray, workdir: Path) -> dict:
    with_transformers = request["with_transformers"]
    embeddings, streams = [], []  # each encoder's first output, then its other outputs (DeepStack streams)
    for asset, raw in request["encoders"]:
        runnable = _load(asset, with_transformers).into_runnable()
        outputs = [o.to_numpy() for o in runnable.run([np.load(workdir / name) for name in raw])]
        embeddings.append(outputs[0])
        streams.extend(outputs[1:])
    for token, rows in zip(request.get("placeholders", []), embeddings):
        count = int((np.asarray(prompt) == token).sum())
        if count != rows.shape[0]:
            raise AssetInputError(f"the prompt holds {count} placeholder token(s) {token}, the encoder gave "
                                  f"{rows.shape[0]} rows: the prompt needs one placeholder a row, in a row per input")
    decoder = _load(request["decoder"], with_transformers)
    facts = _facts(decoder)
    pairs = request.get("extras", [])
    embeddings = embeddings + streams  # the decoder's order: the embeddings of each modality, then the streams
    n_cache = len(facts) - 1 - len(embeddings) - len(pairs)
    caches = [np.zeros([0 if d is None else d for d in dims], dtype) for dims, dtype in facts[1:1 + n_cache]]
    empty = [np.zeros((0, e.shape[1]), e.dtype) for e in embeddings]
    extras = [np.load(workdir / first) for first, _ in pairs]
    later = [None if name is None else np.load(workdir / name) for _, name in pairs]
    runnable = decoder.into_runnable()
    ids, tokens, logits = np.asarray(prompt, np.int64).reshape(1, -1), [], []
    for step in range(request["steps"]):
        outputs = [o.to_numpy() for o in runnable.run([ids, *caches, *(embeddings if step == 0 else empty), *extras])]
        last = outputs[0][0, -1]
        logits.append(last.astype(np.float32))
        tokens.append(int(np.argmax(last)))
        caches, states = outputs[1:1 + n_cache], iter(outputs[1 + n_cache:])
        extras = [next(states) if fixed is None else fixed for fixed in later]  # states fed back, others fixed
        ids = np.array([[tokens[-1]]], np.int64)
    np.save(workdir / "logits.npy", np.stack(logits))
    return {"ok": True, "tokens": tokens, "embeddings": [list(e.shape) for e in embeddings]}


class AssetInputError(ValueError):
    """The inputs do not fit the asset (reported by name to the parent)."""


def main(workdir: Path) -> int:
    request = json.loads((workdir / "request.json").read_text())
    try:
        result = generate(request, np.load(workdir / "prompt.npy"), workdir)
    except Exception as error:  # noqa: BLE001 - reported to the parent
        result = {"ok": False, "type": type(error).__name__, "message": str(error)}
    (workdir / "result.json").write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
