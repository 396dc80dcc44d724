"""Real runs in a worker thread beside the main thread's work, during the analysis of a dynamic
export: the graph's run at the example sizes beside the symbolic replay, and the model's run at a
probe's sizes beside the graph's.

The symbolic replay (:mod:`.fake_replay`) is Python: torch's fake kernels and sympy hold the
interpreter lock. A real run spends its time in torch's kernels, which release it. On a machine of
two cores or more the two overlap (a dynamic export of a 160 M Llama: the replay takes 0.45 s, the
graph's run 0.5 s alone and 0.75 s beside it). Two real runs at small sizes read the weights more
than they compute: on half the cores each, side by side, they take about the time of one.

torch's modes (fake tensors, no_grad, autocast, ``torch.device`` contexts) are per thread: the
worker runs only where this thread has none of them active, with this thread's grad mode.
``FX2NNEF_NO_OVERLAP=1`` in the environment runs everything one after the other.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Callable, Optional

import torch

_SWITCH_INTERVAL = 2e-5  # seconds: each thread gets the lock back soon after a kernel returns


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_overlap() -> bool:
    """Whether a real run may move to a worker thread here: more than one core, and no torch mode
    active in this thread that the worker would not see."""
    if _cores() < 2 or os.environ.get("FX2NNEF_NO_OVERLAP"):
        return False
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False
    if torch.is_inference_mode_enabled() or torch.is_autocast_enabled("cpu"):
        return False
    return True


class Worker:
    """Runs ``job`` in a thread, with this thread's grad mode; :meth:`result` gives its return
    value (or raises what it raised), after waiting for it. ``split_cores``: torch's kernels
    run on half the cores in each thread meanwhile (two runs at small sizes, which read the weights
    more than they compute: each at about its speed on all the cores).

    Used as a context manager: the thread is joined on exit, whatever happens in this thread;
    the lock's switch interval is short while both threads run, so that the worker's graph
    interpreter, which needs the lock between kernels, does not wait 5 ms for it each time."""

    def __init__(self, job: Callable, split_cores: bool = False):
        self._job = job
        self._result: Optional[tuple] = None
        self._grad = torch.is_grad_enabled()
        self._interval = sys.getswitchinterval()
        self._threads = torch.get_num_threads() if split_cores else None
        self._thread = threading.Thread(target=self._run, name="fx2nnef-real-run", daemon=True)

    def __enter__(self) -> "Worker":
        sys.setswitchinterval(min(self._interval, _SWITCH_INTERVAL))
        if self._threads is not None:
            torch.set_num_threads(max(1, self._threads // 2))
        self._thread.start()
        return self

    def _run(self) -> None:
        if self._threads is not None:
            torch.set_num_threads(max(1, self._threads // 2))
        with torch.set_grad_enabled(self._grad):
            try:
                self._result = (True, self._job())
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self._result = (False, exc)

    def running(self) -> bool:
        """Whether the job is still going on."""
        return self._thread.is_alive()

    def result(self):
        self._thread.join()
        ok, value = self._result
        if not ok:
            raise value
        return value

    def __exit__(self, *exc) -> None:
        self._thread.join()
        sys.setswitchinterval(self._interval)
        if self._threads is not None:
            torch.set_num_threads(self._threads)
