"""Greedy generation with an fx2nnef LLM asset in tract, from numpy.

``greedy_generate(asset, prompt, n)`` runs the whole loop in one child process (a tract
panic cannot take the caller down); ``TractCausalLM`` is the same driver for use in the
caller's own process. Both check the sizes of every call against the asset's declared ranges
first (``S >= 1``, ``P >= 0``, ``S+P < max_position_embeddings``): tract 0.23.9 does not.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import AssetInputError, TractError
from ..targets.child import clean_engine_message, crash_message, run_child
from ..targets.signature import AssetSignature
from ..targets.tract.target import _uses_transformers
from ._generate_child import TractCausalLM as _Driver

CHILD_SCRIPT = Path(__file__).resolve().with_name("_generate_child.py")

__all__ = ["TractCausalLM", "greedy_generate"]


def greedy_generate(asset, prompt: Sequence[int] | np.ndarray, max_new_tokens: int, *,
                    eos_token_id: Optional[int | list] = None, timeout: float = 600) -> list[int]:
    """Greedy tokens after ``prompt`` from the asset (a ``model.nnef.tgz`` or the folder holding it).

    The prompt runs in one call (P = 0), then each new token in one call (S = 1), the caches
    fed back; stops early at ``eos_token_id`` when given. Raises AssetInputError, before tract
    runs, when the first or the last call does not fit the asset's declared sizes.
    """
    signature = AssetSignature.read(asset)
    refuse_multimodal(signature)
    path = signature.path
    check_generation(signature, np.asarray(prompt).size, max_new_tokens)
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


class TractCausalLM(_Driver):
    """An ``fx2nnef llm`` asset loaded in tract, in this process, that checks every call first.

    ::

        lm = TractCausalLM.load("out")            # the folder fx2nnef llm wrote, or its model.nnef.tgz
        tokens = lm.greedy([[5, 17, 42]], 8)      # prompt in one call, then one token per call
        logits, cache = lm.step([[5, 17, 42]])    # one call; the object keeps the cache
        logits, cache = lm.step([[int(logits[0, -1].argmax())]])
        lm.reset()                                # a new sequence
        logits, cache = lm.step(ids, cache)       # or pass the cache yourself

    ``step`` checks ``input_ids`` and the caches against the asset's declarations (ranks,
    dtypes, sizes, one P over the caches, ``S+P`` under the context) and ``greedy`` checks its
    first and last calls before the first one: an AssetInputError, not a tract panic.
    """

    signature: AssetSignature | None = None

    @classmethod
    def load(cls, path, with_transformers: bool = True) -> "TractCausalLM":
        """Load the asset (``model.nnef.tgz``, or the folder holding it) in tract."""
        signature = AssetSignature.read(path)
        refuse_multimodal(signature)
        lm = super().load(signature.path, with_transformers)
        lm.signature = signature
        return lm

    def step(self, input_ids, cache: list | None = None) -> tuple:
        ids = np.asarray(input_ids, np.int64)
        caches = [np.asarray(c) for c in (self.cache if cache is None else cache)]
        if self.signature is not None:
            checked = self.signature.check([ids, *caches])
            if not checked.complete:
                raise AssetInputError(f"cannot check {'; '.join(checked.unchecked)}: run it with "
                                      "fx2nnef.run(asset, inputs), which runs tract in a child process then")
        return super().step(ids, caches if cache is not None else None)

    step.__doc__ = _Driver.step.__doc__

    def greedy(self, prompt, max_new_tokens: int, eos_token_id=None) -> list:
        if self.signature is not None:
            check_generation(self.signature, np.asarray(prompt).size, max_new_tokens)
        return super().greedy(prompt, max_new_tokens, eos_token_id)

    greedy.__doc__ = _Driver.greedy.__doc__


def refuse_multimodal(signature: AssetSignature) -> None:
    """AssetInputError for the decoder of a multimodal export, whose embedding inputs this
    text driver would take for caches."""
    extra = [d.name for d in signature.inputs[1:] if d.name.endswith("_embeddings") or d.name == "in_rope_delta"]
    if extra:
        raise AssetInputError(f"{str(signature.path)!r} is the decoder of a multimodal export (inputs "
                              f"{', '.join(extra)}): run it with fx2nnef.llm.generate_multimodal(folder, prompt, "
                              "inputs, n), which runs its encoders too")


def call_shapes(signature: AssetSignature, length: int, past: int) -> list[tuple]:
    """``(shape, dtype)`` of each input of one call of ``length`` tokens after ``past`` ones."""
    batch_dim = signature.inputs[0].dims[0]
    specs = [((1, length), np.int64)]
    for decl in signature.inputs[1:]:
        shape = [int(d) if d.isdigit() else 1 if d == batch_dim else past for d in decl.dims]
        specs.append((tuple(shape), decl.dtype))
    return specs


def check_generation(signature: AssetSignature, prompt_length: int, max_new_tokens: int) -> None:
    """Raise AssetInputError unless the first call (the prompt) and the last one (one token after
    ``prompt_length + max_new_tokens - 2``) of a greedy generation fit the asset."""
    if max_new_tokens < 1:
        return
    try:
        signature.check_shapes(call_shapes(signature, prompt_length, 0))
    except AssetInputError as error:
        raise AssetInputError(f"the prompt of {prompt_length} token(s) does not fit the asset: {error}") from None
    if max_new_tokens < 2:
        return
    last = prompt_length + max_new_tokens - 2
    try:
        signature.check_shapes(call_shapes(signature, 1, last))
    except AssetInputError as error:
        fits = _most_new_tokens(signature, prompt_length, max_new_tokens)
        raise AssetInputError(f"{max_new_tokens} new tokens after a prompt of {prompt_length} do not fit the "
                              f"asset (at most {fits}): its last call has {last} tokens of past; {error}") from None


def _most_new_tokens(signature: AssetSignature, prompt_length: int, limit: int) -> int:
    """The largest count of new tokens whose last call fits the asset (bisection)."""
    def fits(n):
        try:
            signature.check_shapes(call_shapes(signature, 1, prompt_length + n - 2))
            return True
        except AssetInputError:
            return False

    low, high = 1, limit  # 1 fits (the prompt was checked); limit does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
