"""What the engine runners share: a child process per run, its outcome and messages, the
asset and array files passed to it.

Engines run in child processes because a crash inside them (a tract panic, a segfault) would
otherwise end the caller. A child leaves ``result.json`` and ``outputs_K.npz`` in its work folder
and announces each step on stdout (``STAGE_PREFIX``) so that a crash can name the step.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidArgumentError
from . import zygote

STAGE_PREFIX = "fx2nnef-stage: "
# NOTE: the child file is run by path (runpy), never with -m: see fx2nnef.targets.tract.runner's module note
_RUN_SCRIPT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
_MAX_MESSAGE_LINES = 30
_BACKTRACE_FRAME = re.compile(r"^\s*(\d+:\s|at\s)")


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


def run_child(script: Path, workdir: Path, timeout: float, preload: tuple[str, ...] = ()) -> ChildOutcome:
    """Run the Python file ``script`` on ``workdir``, from ``workdir``; collect what it left.

    With ``preload`` (the modules the script imports, e.g. ``("numpy", "tract")``), the child is
    forked from a warm process that has imported them (``zygote``): the same separate process,
    without the import time. Raises subprocess.TimeoutExpired after killing a child that runs
    past ``timeout``.
    """
    if preload and zygote.usable() and not child_prefix():
        outcome = _run_forked(script, workdir, timeout, preload)
        if outcome is not None:
            return outcome
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
    return ChildOutcome(completed.returncode, completed.stdout, completed.stderr, _result(workdir))


def _run_forked(script: Path, workdir: Path, timeout: float, preload: tuple[str, ...]) -> ChildOutcome | None:
    """Run the child through the zygote of ``preload``; None when none is free (then run it plainly)."""
    env = child_env()
    warm = zygote.acquire(preload, env)
    if warm is None:
        return None
    try:
        status, timed_out = warm.run(script, workdir, env, timeout)
    except (OSError, EOFError, ValueError):
        (workdir / "result.json").unlink(missing_ok=True)
        return None
    finally:
        warm.lock.release()
    stdout, stderr = (_read_text(workdir / name) for name in (zygote.STDOUT_FILE, zygote.STDERR_FILE))
    if timed_out:
        raise subprocess.TimeoutExpired([str(script), str(workdir)], timeout, output=stdout, stderr=stderr)
    return ChildOutcome(status, stdout, stderr, _result(workdir))


def _read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _result(workdir: Path) -> dict | None:
    result_path = workdir / "result.json"
    return json.loads(result_path.read_text()) if result_path.exists() else None


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


def asset_folder(path: Path, extract_to: Path) -> Path:
    """The folder holding ``graph.nnef``: the asset itself, or an archive extracted."""
    if path.is_dir():
        return path
    if path.name.endswith(".nnef"):
        return path.parent
    if not tarfile.is_tarfile(path):
        raise InvalidArgumentError(
            f"NNEF asset {str(path)!r} is neither a folder, a graph.nnef file nor a .tar/.tgz archive"
        )
    extract_to.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "r:*") as archive:
        archive.extractall(extract_to, filter="data")
    return extract_to
