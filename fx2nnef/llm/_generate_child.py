"""Greedy decoding over a tract LLM asset: a numpy driver, and a child process that runs it.

The driver feeds the asset's ``out_cache_*`` outputs back as the next ``in_cache_*`` inputs
(the I/O contract of ``fx2nnef.llm``). As a child (``python _generate_child.py WORKDIR``, run
by ``fx2nnef.llm.generate``), it reads ``request.json`` (``asset``, ``with_transformers``,
``max_new_tokens``, ``eos_token_id``) and ``prompt.npy``, runs the whole loop in one process
and writes ``result.json`` with the tokens. It imports numpy and tract only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

STAGE_PREFIX = "fx2nnef-stage: "
_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


class TractCausalLM:
    """An fx2nnef LLM asset loaded in tract (in this process): ``step``, ``greedy``, ``reset``.

    ``load(path)`` with ``with_transformers=True`` also accepts assets that use
    ``tract_transformers_*`` ops. This is the bare driver (no input checks), run in the child
    of ``greedy_generate``; ``fx2nnef.llm.TractCausalLM`` adds the checks of the inputs.
    """

    def __init__(self, model):
        facts = [str(model.input_fact(i)).split(",") for i in range(model.input_count())]
        self.num_caches = len(facts) - 1
        self.cache_shapes = [[int(d) if d.isdigit() else None for d in f[:-1]] for f in facts[1:]]
        self.cache_dtype = _FLOATS[facts[1][-1]] if len(facts) > 1 else np.float32
        self.runnable = model.into_runnable()
        self.cache = self.empty_cache()

    @classmethod
    def load(cls, path, with_transformers: bool = True) -> "TractCausalLM":
        """Load ``model.nnef.tgz`` (or a folder holding it) with tract's Python binding."""
        import tract

        path = Path(path)
        if path.is_dir():
            path = path / "model.nnef.tgz"
        loader = tract.nnef()
        if with_transformers:
            loader = loader.with_tract_transformers()
        return cls(loader.load(str(path)))

    def empty_cache(self, batch: int = 1) -> list:
        """Caches of length 0 (P = 0), in the asset's float type."""
        return [np.zeros([batch if d is None and axis == 0 else (0 if d is None else d)
                          for axis, d in enumerate(shape)], self.cache_dtype) for shape in self.cache_shapes]

    def reset(self) -> None:
        """Forget the kept cache: the next ``step`` without a cache starts a new sequence."""
        self.cache = self.empty_cache()

    def step(self, input_ids: np.ndarray, cache: list | None = None) -> tuple:
        """One call: ``(logits, new_cache)`` for ``input_ids [B, S]`` after ``cache`` (length P).

        Without ``cache``, the call continues from the cache kept on the object (empty after
        ``load`` and ``reset``) and keeps the new one.
        """
        kept = cache is None
        outputs = self.runnable.run([np.asarray(input_ids, np.int64)] + list(self.cache if kept else cache))
        arrays = [o.to_numpy() for o in outputs]
        if kept:
            self.cache = arrays[1:]
        return arrays[0], arrays[1:]

    def greedy(self, prompt: np.ndarray, max_new_tokens: int, eos_token_id=None) -> list:
        """Greedy tokens after ``prompt [1, S]``: the prompt in one call, then one token per call.

        Starts from an empty cache and leaves the kept one (``step`` without a cache) as it was.
        """
        ids = np.asarray(prompt, np.int64).reshape(1, -1)
        cache = self.empty_cache()
        tokens = []
        for _ in range(max_new_tokens):
            logits, cache = self.step(ids, cache)
            token = int(np.argmax(logits[0, -1]))
            tokens.append(token)
            if eos_token_id is not None and token in np.atleast_1d(eos_token_id):
                break
            ids = np.array([[token]], np.int64)
        return tokens


def _map_large_blocks() -> None:
    """glibc maps allocations of 1 MiB or more on their own (as ``targets/tract/_child.py``
    does: tract's transient load buffers go back to the system when freed)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 2**20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def main(workdir: Path) -> int:
    """Serve one request; failures go to result.json."""
    request = json.loads((workdir / "request.json").read_text())
    try:
        _map_large_blocks()
        print(STAGE_PREFIX + "load", flush=True)
        lm = TractCausalLM.load(request["asset"], request["with_transformers"])
        print(STAGE_PREFIX + "generate", flush=True)
        tokens = lm.greedy(np.load(workdir / "prompt.npy"), request["max_new_tokens"], request["eos_token_id"])
        result = {"ok": True, "tokens": tokens}
    except Exception as error:
        result = {"ok": False, "kind": "tract" if type(error).__name__ == "TractError" else "python",
                  "type": type(error).__name__, "message": str(error), "stage": "generate"}
    (workdir / "result.json").write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
