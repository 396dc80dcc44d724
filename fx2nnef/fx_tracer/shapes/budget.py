"""A bound on what one capture spends finding the shapes and the range of a dynamic export.

The analysis runs the graph and the model at many sizes, traces again with decisions forced, and
replays on fake tensors; on some models (sizes computed in ways it cannot read, loops over chunks)
each step finds one more thing to try, and an export would take minutes to decide that it cannot
be made. The capture starts a budget (``begin``); every real, fake or traced run charges it
(``charge``), and once it is spent the capture stops with :class:`~fx2nnef.errors.AnalysisBudgetError`
saying what it was doing and how much it ran.

Seconds are the process's CPU time (the machine's load from other processes does not count):
``FX2NNEF_ANALYSIS_SECONDS`` (default 180) plus one per million parameters of the model, so that
a large model's slower runs have room; runs: ``FX2NNEF_ANALYSIS_RUNS`` (default 5000).

The seconds are also kept by a CPU-time alarm (``SIGPROF``, in the main thread where no other
handler is set): one step alone may go on for minutes (sympy simplifying the size expressions of
a symbolic replay through rounded-up sizes, MobileViT-v2), and a count of runs would never see
the budget spent.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Optional

from ...errors import AnalysisBudgetError

BASE_SECONDS = 180.0
SECONDS_PER_MILLION_PARAMETERS = 1.0
MAX_RUNS = 5000


class BudgetSpent(BaseException):
    """Raised inside the analysis once the budget is spent. Not an ``Exception``: the fallbacks of
    the analysis (``except Exception``: another way is tried) must not take it for a failure of
    what they tried; :func:`budgeted` turns it into :class:`AnalysisBudgetError` at the capture's
    boundary."""


class Budget:
    """What one capture may spend; ``doing`` names the trace being made or probed (for the error)."""

    def __init__(self):
        self.seconds = float("inf")
        self.runs = 0
        self.max_runs = MAX_RUNS
        self.started = time.process_time()
        self.doing = "the first trace"
        self.counts: dict = {}

    def begin(self, parameters: int = 0) -> None:
        """Start counting for a capture of a model with ``parameters`` parameters."""
        base = float(os.environ.get("FX2NNEF_ANALYSIS_SECONDS", BASE_SECONDS))
        self.seconds = base + SECONDS_PER_MILLION_PARAMETERS * parameters / 1e6
        self.max_runs = int(os.environ.get("FX2NNEF_ANALYSIS_RUNS", MAX_RUNS))
        self.started = time.process_time()
        self.runs = 0
        self.counts = {}
        self.doing = "the first trace"
        _alarm.arm(self.seconds, self)

    def spent(self) -> float:
        return time.process_time() - self.started

    def charge(self, kind: str) -> None:
        """Count one run of ``kind`` (graph, model, fake, trace); raise :class:`BudgetSpent` past
        the budget."""
        self.runs += 1
        self.counts[kind] = self.counts.get(kind, 0) + 1
        over = self.spent() > self.seconds or self.runs > self.max_runs
        if over:
            raise BudgetSpent(self.message())

    def message(self) -> str:
        runs = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        return (f"the analysis of the dynamic sizes stopped after {self.spent():.1f} s of CPU and {self.runs} runs "
                f"({runs}), working on {self.doing}: its budget is {self.seconds:.0f} s and {self.max_runs} runs. "
                "Export with fewer dynamic axes or other example sizes (a size of 1, or sizes equal to each other, "
                "hide what the model does), or raise FX2NNEF_ANALYSIS_SECONDS / FX2NNEF_ANALYSIS_RUNS")

    @contextlib.contextmanager
    def step(self, doing: str):
        """Name the step under way for the error, restoring the outer one after it."""
        outer, self.doing = self.doing, doing
        try:
            yield
        finally:
            self.doing = outer


class _CpuAlarm:
    """A one-shot ``SIGPROF`` timer of CPU seconds that raises :class:`BudgetSpent` where the main
    thread is; armed only in the main thread and where ``SIGPROF`` has no handler of its own (a
    sampling profiler's), and put back as it was by :meth:`disarm`."""

    def __init__(self):
        self.budget: Optional[Budget] = None
        self.previous = None

    def arm(self, seconds: float, budget: "Budget") -> None:
        self.disarm()
        if not (0 < seconds < float("inf")) or threading.current_thread() is not threading.main_thread():
            return
        if not hasattr(signal, "setitimer") or signal.getsignal(signal.SIGPROF) not in (signal.SIG_DFL, None):
            return
        self.budget = budget
        self.previous = signal.signal(signal.SIGPROF, self._fire)
        signal.setitimer(signal.ITIMER_PROF, seconds)

    def _fire(self, signum, frame) -> None:
        budget, self.budget = self.budget, None
        if budget is not None:
            raise BudgetSpent(budget.message())

    def disarm(self) -> None:
        if self.previous is None:
            return
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, self.previous)
        self.previous, self.budget = None, None


_alarm = _CpuAlarm()
BUDGET = Budget()


def budgeted(fn):
    """``fn`` (a capture) with :class:`BudgetSpent` raised as :class:`AnalysisBudgetError`."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BudgetSpent as spent:
            raise AnalysisBudgetError(str(spent)) from None
        finally:
            _alarm.disarm()

    return run


def parameter_count(model) -> Optional[int]:
    try:
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - a model without parameters() (a plain callable)
        return 0
