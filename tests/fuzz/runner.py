"""Run one generated program through fx2nnef and tract, and classify what happened.

- OK: exported, and tract's outputs equal eager PyTorch at every size tried (default
  "approximate" tolerance for floats, exact for integers and bools);
- REFUSED: export raised an fx2nnef error (a clear refusal), or the export restricted its
  valid sizes and the sizes outside were skipped;
- MISMATCH: numbers differ, or tract failed, at a size the export claims valid;
- CRASH: any other exception out of export (TypeError, AssertionError, ...).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import traceback
from pathlib import Path
from typing import Optional

import numpy as np

import fx2nnef
from fx2nnef.errors import Fx2NnefError, TractError
from fx2nnef.targets.tolerance import DEFAULT_TOLERANCE, compare_outputs, format_diffs
from fx2nnef.targets.tract_runner import run_tract_many

from .generator import eager_outputs, env_seed, load
from .program import Program

OK, REFUSED, MISMATCH, CRASH = "OK", "REFUSED", "MISMATCH", "CRASH"
FAILING = (MISMATCH, CRASH)


@dataclasses.dataclass
class Outcome:
    """What one program did: the verdict, a one-line reason and the details."""

    kind: str
    reason: str = ""
    details: str = ""
    sizes: list = dataclasses.field(default_factory=list)  # sizes run in tract
    failing: list = dataclasses.field(default_factory=list)  # sizes whose outputs differ
    skipped: list = dataclasses.field(default_factory=list)  # sizes outside the export's valid range

    def report(self, program: Program) -> str:
        """A reproducer: verdict, seed, sizes, what differs, and the program's source."""
        lines = [f"{self.kind}: {self.reason}", program.describe()]
        if self.failing:
            lines.append(f"wrong at sizes {self.failing} (ran {self.sizes})")
        if self.details:
            lines.append(self.details)
        lines += ["--- source ---", program.source()]
        return "\n".join(lines)


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int):
    """Raise _Timeout in the main thread after ``seconds`` (no-op where SIGALRM is missing)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(_signum, _frame):
        raise _Timeout(f"export took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def claimed_valid(result, env: dict) -> bool:
    """Whether the export says it is valid at the sizes ``env`` (``result.ranges``: symbol -> SymRange)."""
    return all(r.contains(env[sym]) for sym, r in result.ranges.items() if sym in env)


def run_program(program: Program, folder: Path, *, timeout: int = 120, check_io: bool = False) -> Outcome:
    """Export ``program`` at its example size, run it in tract at all its sizes, compare with eager.

    The export is raw (``check_io=False``) unless ``check_io``: then a wrong result the check
    catches is a refusal (``CheckIOError``), and a MISMATCH is one it missed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    namespace = load(program, folder / f"fuzz_{program.seed}.py")
    example = program.envs[0]
    inputs, _ = eager_outputs(namespace, example, env_seed(example))
    asset = folder / f"fuzz_{program.seed}.nnef.tgz"
    target = fx2nnef.TractNNEF(check_io=check_io, dynamic_axes=program.dynamic_axes)
    try:
        with _deadline(timeout):
            result = fx2nnef.export(namespace["Program"](), tuple(inputs), asset, target=target,
                                    input_names=program.input_names)
    except Fx2NnefError as error:
        return Outcome(REFUSED, _refusal(error), str(error))
    except Exception as error:  # noqa: BLE001 - any other exception is the finding
        return Outcome(CRASH, f"{type(error).__name__}: {_first_line(error)}", traceback.format_exc(limit=-12))
    envs = [env for env in program.envs if claimed_valid(result, env)]
    skipped = [env for env in program.envs if env not in envs]
    cases = []
    for env in envs:
        ins, outs = eager_outputs(namespace, env, env_seed(env))
        cases.append((env, [t.numpy() for t in ins], [_numpy(o) for o in outs]))
    if not cases:
        return Outcome(REFUSED, "export valid at none of the sizes tried", skipped=skipped)
    try:
        got = run_tract_many(result.path, [c[1] for c in cases], timeout=timeout)
    except TractError:
        got = [_run_alone(result.path, c[1], timeout) for c in cases]
    failing, notes, bad = [], [], []
    for (env, _, expected), outs in zip(cases, got):
        if isinstance(outs, str):
            failing.append(env)
            notes.append(f"at {env}: tract failed: {outs}")
            continue
        diffs = compare_outputs(None, expected, outs, DEFAULT_TOLERANCE)
        if not all(d.ok for d in diffs):
            failing.append(env)
            notes.append(f"at {env}:\n{format_diffs(diffs)}")
            bad.append(next(d for d in diffs if not d.ok))
    sizes = [c[0] for c in cases]
    if failing:
        first = notes[0].splitlines()
        reason = first[0][first[0].index("tract failed"):] if "tract failed" in first[0] else _diff_reason(bad[0])
        return Outcome(MISMATCH, reason, "\n".join(notes[:3]), sizes, failing, skipped)
    kind = OK if not skipped else REFUSED
    reason = "" if not skipped else f"sizes {skipped} outside the export's valid range"
    return Outcome(kind, reason, "", sizes, [], skipped)


def _run_alone(asset, inputs, timeout) -> list | str:
    try:
        return run_tract_many(asset, [inputs], timeout=timeout)[0]
    except TractError as error:
        lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        return " | ".join(lines[-3:])[:400] or _first_line(error, 300)


_PATH = re.compile(r"(/[^\s:'\"]+/)?fuzz_\d+\.py:\d+")
_SIZES = re.compile(r"\{'[ST]': \d+(, '[ST]': \d+)?\}")


def _refusal(error: Exception) -> str:
    """``Type: message`` with the ops an UnsupportedOpError names; paths and sizes left out."""
    text = str(error)
    lines = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]
    head = _first_line(error) if not lines or not isinstance(error, fx2nnef.UnsupportedOpError) else "; ".join(lines[:3])
    head = _SIZES.sub("{sizes}", _PATH.sub("<line>", head))
    return f"{type(error).__name__}: {head}"[:300]


def _diff_reason(diff) -> str:
    what = "shape" if diff.note.startswith("shape") else "dtype" if diff.note.startswith("dtype") else "values"
    return f"outputs differ ({what}): {diff.name} {diff.dtype} {list(diff.shape)}"


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().resolve_neg().resolve_conj().numpy().copy()  # x.imag of a conj view has the neg bit


def _first_line(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    return line[:limit]


def minimise(program: Program, outcome: Outcome, folder: Path, *, budget: int = 40) -> tuple:
    """A smaller program with the same verdict and reason class: drop outputs, then statements."""
    from .generator import sane

    def same(candidate: Program) -> Optional[Outcome]:
        checked = sane(candidate)
        if checked is None:
            return None
        got = run_program(checked, folder)
        if got.kind == outcome.kind and _reason_class(got.reason) == _reason_class(outcome.reason):
            return got
        return None

    best, best_outcome, tries = program, outcome, 0
    if len(best.outputs) > 1:
        for name in list(best.outputs):
            tries += 1
            got = same(best.without(outputs=[name]))
            if got is not None:
                best, best_outcome = sane(best.without(outputs=[name])), got
                break
    changed = True
    while changed and tries < budget:
        changed = False
        for index in reversed(range(len(best.stmts))):
            if tries >= budget:
                break
            tries += 1
            candidate = best.without(stmt_index=index)
            got = same(candidate)
            if got is not None:
                best, best_outcome, changed = sane(candidate), got, True
    unused = best.unused_inputs()
    if unused and tries < budget + 1:
        candidate = best.without_inputs(unused)
        if candidate.dynamic_axes:
            got = same(candidate)
            if got is not None:
                best, best_outcome = sane(candidate), got
    return best, best_outcome


def _reason_class(reason: str) -> str:
    """The kind of failure without the numbers: exception type, 'outputs differ (values)', 'tract failed'."""
    return reason.split(":")[0]
