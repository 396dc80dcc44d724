"""Load and run an NNEF asset in tract, in a child process.

A tract panic aborts the whole process (``conv`` with border 'reflect' dies with SIGABRT;
fewer inputs than the model has can segfault), so tract never runs in the caller's
process. Each call runs ``_child.py`` (of this folder) in a new Python process, with inputs and outputs
passed as ``.npz`` files in a temporary folder; any failure, crash included, becomes a
:class:`~fx2nnef.errors.TractError` carrying tract's own words, and the caller lives on.

The child file is run by path (``python -c "runpy.run_path(...)"`` from the temporary
folder), not with ``python -m fx2nnef.targets.tract._child``: ``-m`` imports
``fx2nnef/__init__.py``, which imports torch (2.5 s per call instead of 0.15 s), and running
the file as a plain script would put its folder on ``sys.path``, where a module named like an
imported package (``tract``) would shadow it. So the child modules import nothing from fx2nnef.

The child runs with ``RUST_BACKTRACE=0`` so that tract's messages come without the Rust
backtrace. Inputs are checked against the model's input facts before tract sees them:
count (too few segfaults), rank, dtype, fixed dims and the value of each plain symbol.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import TractError
from ..child import (ChildOutcome, as_input_arrays, clean_engine_message, crash_message, existing_asset, load_arrays,
                    run_child, save_arrays)

CHILD_SCRIPT = Path(__file__).resolve().with_name("_child.py")
# Runs argv[1] as __main__ with argv[2:] as its arguments; sys.path[0] is the cwd (a private temp folder).


@dataclass(frozen=True)
class TractModelInfo:
    """What :func:`tract_load_check` learnt: input and output facts such as ``"1,S,64,f32"``."""

    inputs: list[str]
    outputs: list[str]


def run_tract(
    asset: str | os.PathLike,
    inputs: Sequence[np.ndarray],
    *,
    with_transformers: bool = True,
    timeout: float = 600,
) -> list[np.ndarray]:
    """Run the asset (folder, .tar or .tgz) once in tract; return its outputs by position."""
    return run_tract_many(asset, [inputs], with_transformers=with_transformers, timeout=timeout)[0]


def run_tract_many(
    asset: str | os.PathLike,
    input_sets: Sequence[Sequence[np.ndarray]],
    *,
    with_transformers: bool = True,
    timeout: float = 600,
) -> list[list[np.ndarray]]:
    """Load the asset once in tract and run it on each input set (e.g. two sizes of S)."""
    path = existing_asset(asset)
    sets = [as_input_arrays(inputs) for inputs in input_sets]
    with tempfile.TemporaryDirectory(prefix="fx2nnef_tract_") as temp:
        workdir = Path(temp)
        for k, inputs in enumerate(sets):
            save_arrays(workdir / f"inputs_{k}.npz", inputs)
        _call_tract_child(path, workdir, len(sets), with_transformers, timeout)
        return [load_arrays(workdir / f"outputs_{k}.npz") for k in range(len(sets))]


def tract_load_check(
    asset: str | os.PathLike, with_transformers: bool = True, *, timeout: float = 600
) -> TractModelInfo:
    """Load the asset in tract and make it runnable (decluttered, optimized), running nothing."""
    path = existing_asset(asset)
    with tempfile.TemporaryDirectory(prefix="fx2nnef_tract_") as temp:
        result = _call_tract_child(path, Path(temp), 0, with_transformers, timeout)
    return TractModelInfo(inputs=result["inputs"], outputs=result["outputs"])


def _call_tract_child(
    asset: Path, workdir: Path, input_sets: int, with_transformers: bool, timeout: float
) -> dict:
    """Run the tract child on ``workdir``; return its result record or raise TractError."""
    request = {"asset": str(asset), "with_transformers": with_transformers, "input_sets": input_sets}
    (workdir / "request.json").write_text(json.dumps(request))
    try:
        outcome = run_child(CHILD_SCRIPT, workdir, timeout, preload=("numpy", "tract"))
    except subprocess.TimeoutExpired as error:
        partial = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else error.stdout or ""
        stage = ChildOutcome(-1, partial, "", None).stage
        raise TractError(
            f"tract did not finish within {timeout} s on {str(asset)!r} (stopped at step '{stage}'); the child "
            f"process was stopped. Give a larger timeout=, or look for a graph far bigger than expected"
        ) from error
    if outcome.result is None:
        raise TractError(crash_message("tract", asset, outcome, _CRASH_ADVICE))
    if not outcome.result["ok"]:
        raise TractError(_failure_message(asset, outcome.result))
    return outcome.result


_CRASH_ADVICE = (
    "A tract panic means the graph uses a construct tract cannot handle; known ones are conv or "
    "pool borders other than 'constant' and fewer inputs than declared. Change the op the panic "
    "names, or run piece_by_piece to find the submodule that produces it."
)
_STAGE_ADVICE = {
    "load": "tract rejected the asset while loading it: fix the op or syntax named above "
    "(the ops tract accepts are listed in reference/tract_ops.md).",
    "into_runnable": "tract loaded the graph but could not optimize it: look at the op named above.",
}
_RUN_ADVICE = "The graph loaded but failed at run time: check the shape and dtype of each input."


def _failure_message(asset: Path, result: dict) -> str:
    """Message for a failure the child caught and reported in result.json."""
    stage = result.get("stage", "?")
    if result["kind"] == "reported":
        return f"tract model {str(asset)!r}, step '{stage}': {result['message']}"
    if result["kind"] == "tract":
        advice = _STAGE_ADVICE.get(stage, _RUN_ADVICE)
        return (f"tract failed at step '{stage}' on {str(asset)!r}:\n"
                f"{clean_engine_message(result['message'])}\n{advice}")
    return (f"tract child failed at step '{stage}' on {str(asset)!r}: {result['type']}: "
            f"{result['message']} (raised at {result['where']})")
