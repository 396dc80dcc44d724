"""Greedy generation with an fx2nnef LLM asset in tract, from numpy.

``greedy_generate(asset, prompt, n)`` runs the whole loop in one child process (a tract
panic cannot take the caller down); ``TractCausalLM`` is the same driver for use in the
caller's own process.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import TractError
from ..targets.tract.target import _uses_transformers
from ..targets.child import clean_engine_message, crash_message, existing_asset, run_child
from ._generate_child import TractCausalLM

CHILD_SCRIPT = Path(__file__).resolve().with_name("_generate_child.py")

__all__ = ["TractCausalLM", "greedy_generate"]


def greedy_generate(asset, prompt: Sequence[int] | np.ndarray, max_new_tokens: int, *,
                    eos_token_id: Optional[int | list] = None, timeout: float = 600) -> list[int]:
    """Greedy tokens after ``prompt`` from the asset (a ``model.nnef.tgz`` or the folder holding it).

    The prompt runs in one call (P = 0), then each new token in one call (S = 1), the caches
    fed back; stops early at ``eos_token_id`` when given.
    """
    path = existing_asset(asset)
    if path.is_dir():
        path = existing_asset(path / "model.nnef.tgz")
    with tempfile.TemporaryDirectory(prefix="fx2nnef_generate_") as temp:
        workdir = Path(temp)
        np.save(workdir / "prompt.npy", np.asarray(prompt, np.int64).reshape(1, -1))
        eos = eos_token_id if eos_token_id is None or isinstance(eos_token_id, int) else list(eos_token_id)
        (workdir / "request.json").write_text(json.dumps({
            "asset": str(path), "with_transformers": _uses_transformers(path),
            "max_new_tokens": int(max_new_tokens), "eos_token_id": eos}))
        try:
            outcome = run_child(CHILD_SCRIPT, workdir, timeout, preload=("numpy", "tract"))
        except subprocess.TimeoutExpired as error:
            raise TractError(f"greedy generation in tract did not finish within {timeout} s on {str(path)!r}; "
                             "give a larger timeout=") from error
    if outcome.result is None:
        raise TractError(crash_message("tract", path, outcome, "The asset crashed tract while generating."))
    if not outcome.result["ok"]:
        raise TractError(f"greedy generation in tract failed on {str(path)!r}: "
                         f"{clean_engine_message(outcome.result['message'])}")
    return outcome.result["tokens"]
