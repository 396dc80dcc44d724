"""Load and run an NNEF asset in tract, in a child process.

A tract panic aborts the whole process (``conv`` with border 'reflect' dies with SIGABRT;
fewer inputs than the model has can segfault), so tract never runs in the caller's
process. Each call runs ``_tract_child.py`` in a new Python process, with inputs and outputs
passed as ``.npz`` files in a temporary folder; any failure, crash included, becomes a
:class:`~fx2nnef.errors.TractError` carrying tract's own words, and the caller lives on.

The child file is run by path (``python -c "runpy.run_path(...)"`` from the temporary
folder), not with ``python -m fx2nnef.targets._tract_child``: ``-m`` imports
``fx2nnef/__init__.py``, which imports torch (2.5 s per call instead of 0.15 s), and running
the file as a plain script would put ``fx2nnef/targets/`` on ``sys.path``, where ``tract.py``
shadows the ``tract`` package. So the child modules import nothing from fx2nnef.

The child runs with ``RUST_BACKTRACE=0`` so that tract's messages come without the Rust
backtrace. Inputs are checked against the model's input facts before tract sees them:
count (too few segfaults), rank, dtype, fixed dims and the value of each plain symbol.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fx2nnef.errors import InvalidArgumentError, TractError

CHILD_SCRIPT = Path(__file__).resolve().with_name("_tract_child.py")
STAGE_PREFIX = "fx2nnef-stage: "
# Runs argv[1] as __main__ with argv[2:] as its arguments; sys.path[0] is the cwd (a private temp folder).
_RUN_SCRIPT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
_MAX_MESSAGE_LINES = 30
_BACKTRACE_FRAME = re.compile(r"^\s*(\d+:\s|at\s)")


@dataclass(frozen=True)
class TractModelInfo:
    """What :func:`tract_load_check` learnt: input and output facts such as ``"1,S,64,f32"``."""

    inputs: list[str]
    outputs: list[str]


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended: exit code, captured streams and its ``result.json``."""

    returncode: int
    stdout: str
    stderr: str
    result: dict | None

    @property
    def stage(self) -> str:
        """The last step the child announced before it ended."""
        stages = [line[len(STAGE_PREFIX):] for line in self.stdout.splitlines() if line.startswith(STAGE_PREFIX)]
        return stages[-1] if stages else "start-up"


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
        outcome = run_child(CHILD_SCRIPT, workdir, timeout)
    except subprocess.TimeoutExpired as error:
        raise TractError(
            f"tract did not finish within {timeout} s on {str(asset)!r}; the child process was "
            f"stopped. Give a larger timeout=, or look for a graph far bigger than expected"
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


def run_child(script: Path, workdir: Path, timeout: float) -> ChildOutcome:
    """Run the Python file ``script`` on ``workdir``, from ``workdir``; collect what it left.

    Raises subprocess.TimeoutExpired after killing a child that runs past ``timeout``.
    """
    completed = subprocess.run(
        child_prefix() + [sys.executable, "-c", _RUN_SCRIPT, str(script), str(workdir)],
        cwd=workdir,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
    )
    result_path = workdir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return ChildOutcome(completed.returncode, completed.stdout, completed.stderr, result)


def child_prefix() -> list[str]:
    """Command words put before the child's Python, from ``$FX2NNEF_CHILD_PREFIX``.

    ``FX2NNEF_CHILD_PREFIX="valgrind -q --tool=none"`` runs the engines on a CPU without
    AVX-512 (valgrind does not emulate it, so tract picks its AVX2/FMA kernels): a check of
    the results an AVX2 machine gets, on an AVX-512 machine.
    """
    return shlex.split(os.environ.get("FX2NNEF_CHILD_PREFIX", ""))


def child_env() -> dict[str, str]:
    """Environment of a child: the caller's, without Rust backtraces."""
    return {**os.environ, "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}


def crash_message(engine: str, asset: Path, outcome: ChildOutcome, advice: str) -> str:
    """Message for a child that died without writing result.json (panic, signal, ...)."""
    return (f"{engine} crashed at step '{outcome.stage}' on {str(asset)!r} "
            f"({describe_exit(outcome.returncode)}); the calling process is unaffected.\n"
            f"{crash_summary(outcome.stderr)}\n{advice}")


def describe_exit(returncode: int) -> str:
    """``"killed by signal SIGABRT"`` or ``"exit code 3"``."""
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def crash_summary(stderr: str) -> str:
    """The panic message from a crashed child's stderr, or its last meaningful lines."""
    lines = stderr.splitlines()
    for start, line in enumerate(lines):
        if "panicked at" in line:
            return "\n".join(_panic_lines(lines[start:]))
    meaningful = [line for line in lines if line.strip() and not _BACKTRACE_FRAME.match(line)]
    return "\n".join(meaningful[-10:]) if meaningful else "(nothing on stderr)"


def _panic_lines(lines: list[str]) -> list[str]:
    """The first panic's lines, up to the backtrace note."""
    kept = [lines[0][lines[0].index("panicked at"):].strip()]
    for line in lines[1:]:
        if not line.strip() or line.startswith(("note:", "stack backtrace:", "thread ")):
            break
        kept.append(line.rstrip())
    return kept


def clean_engine_message(message: str) -> str:
    """An engine's error text without the backtrace, blank lines or more than 30 lines."""
    head = message.split("Stack backtrace:")[0]
    lines = [line.rstrip() for line in head.splitlines() if line.strip()]
    if len(lines) > _MAX_MESSAGE_LINES:
        lines = lines[:_MAX_MESSAGE_LINES] + ["..."]
    return "\n".join(lines)


def existing_asset(asset: str | os.PathLike) -> Path:
    """The absolute path of an existing asset, or InvalidArgumentError."""
    path = Path(asset).resolve()
    if not path.exists():
        raise InvalidArgumentError(
            f"NNEF asset {str(asset)!r} does not exist: give the folder, .tar or .tgz written by the export"
        )
    return path


def as_input_arrays(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inputs as numpy arrays of bool, integer or float dtype."""
    if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
        raise InvalidArgumentError(
            f"inputs must be a list of numpy arrays, one per graph input, got {type(inputs).__name__}"
        )
    arrays = [np.asarray(x) for x in inputs]
    for index, array in enumerate(arrays):
        if array.dtype.kind not in "biuf":
            raise InvalidArgumentError(
                f"input {index} has dtype {array.dtype}: engines take bool, integer or float arrays"
            )
    return arrays


def save_arrays(path: Path, arrays: list[np.ndarray]) -> None:
    """Save arrays to ``.npz`` under keys "0", "1", ... keeping their order."""
    np.savez(path, **{str(i): a for i, a in enumerate(arrays)})


def load_arrays(path: Path) -> list[np.ndarray]:
    """Arrays of an ``.npz`` written by :func:`save_arrays`, in order."""
    with np.load(path, allow_pickle=False) as npz:
        return [npz[key] for key in sorted(npz.files, key=int)]
