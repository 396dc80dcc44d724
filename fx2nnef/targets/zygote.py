"""Warm starts for engine children: a process that has imported an engine forks one child per run.

An engine runs in a child process so that a crash cannot end the caller (see ``child``). Starting
that child is most of the cost of a small check: the nnef_tools interpreter imports torch (about
2.5 s), tract with numpy about 0.2 s. A *zygote* is a Python process started once per set of
modules; it imports them, then forks a fresh child for each run. The child is still a separate
process (a panic, an abort or a runaway run kills only it), it starts with the engine already
imported, and nothing of one run is seen by the next.

Protocol, one JSON object per line: the caller writes ``{"script", "workdir", "env", "stdout",
"stderr"}`` on the zygote's stdin; the zygote forks, answers ``{"pid": N}`` at once and
``{"status": code}`` when the child has ended (a negative code is the signal that killed it, as
in ``subprocess``). The child runs ``script`` as ``__main__`` from ``workdir`` with
``sys.argv = [script, workdir]``, the given environment, and its stdout / stderr in the files
of ``workdir`` the request names (``STDOUT_FILE``, ``STDERR_FILE``).

Only one run at a time goes through a zygote; a caller that finds it busy (another thread)
or broken starts a plain child instead, so a zygote never changes what a run computes, only
when the imports happen. The zygote leaves when its caller does (end of file on its stdin).
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

STDOUT_FILE = "child_stdout.txt"
STDERR_FILE = "child_stderr.txt"

ZYGOTE_SCRIPT = Path(__file__).resolve().with_name("_zygote_main.py")


class Zygote:
    """One warm process for a set of preloaded modules; :meth:`run` forks a child per call."""

    def __init__(self, preload: tuple[str, ...], env: dict[str, str]):
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE_SCRIPT), *preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", env=env,
        )
        self.buffer = b""
        self.broken = False
        self.owner = os.getpid()  # a forked copy of the caller must not talk to this zygote

    def close(self) -> None:
        """End the zygote (it leaves at the end of its stdin) and reap it."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()

    def run(self, script: Path, workdir: Path, env: dict[str, str], timeout: float) -> tuple[int, bool]:
        """Run ``script`` on ``workdir`` in a forked child: (exit status, whether it timed out).

        Raises OSError or EOFError if the zygote is gone (then it is marked broken).
        """
        try:
            request = json.dumps({"script": str(script), "workdir": str(workdir), "env": env,
                                  "stdout": STDOUT_FILE, "stderr": STDERR_FILE})
            self.process.stdin.write(request.encode() + b"\n")
            self.process.stdin.flush()
            pid = json.loads(self._read_line(None))["pid"]
            line = self._read_line(time.monotonic() + timeout)
            if line is not None:
                return json.loads(line)["status"], False
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return json.loads(self._read_line(None))["status"], True
        except (OSError, EOFError, ValueError):
            self.broken = True
            raise

    def _read_line(self, deadline: float | None) -> bytes | None:
        """The zygote's next reply line; None at the deadline; EOFError if the zygote is gone."""
        fd = self.process.stdout.fileno()
        poller = select.poll()  # not select.select: it fails on descriptors past 1023
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not poller.poll(None if wait is None else int(wait * 1000) + 1):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the zygote ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


_ZYGOTES: dict[tuple[str, ...], Zygote] = {}
_REGISTRY_LOCK = threading.Lock()


def usable() -> bool:
    """Whether this platform and setting allow warm starts (fork, poll on pipes; FX2NNEF_WARM_START not 0)."""
    return (hasattr(os, "fork") and hasattr(select, "poll") and os.name == "posix"
            and os.environ.get("FX2NNEF_WARM_START", "1") != "0")


def acquire(preload: tuple[str, ...], env: dict[str, str]) -> Zygote | None:
    """The zygote for ``preload``, locked for the caller; None when it is busy (use a plain child)."""
    with _REGISTRY_LOCK:
        if any(z.owner != os.getpid() for z in _ZYGOTES.values()):
            _ZYGOTES.clear()  # inherited through a fork: the parent's zygotes, left to it
        zygote = _ZYGOTES.get(preload)
        if zygote is not None and (zygote.broken or zygote.process.poll() is not None):
            if not zygote.lock.locked():
                zygote.close()
            zygote = None
        if zygote is None:
            zygote = _ZYGOTES[preload] = Zygote(preload, env)
        return zygote if zygote.lock.acquire(blocking=False) else None


@atexit.register
def _close_all() -> None:
    for zygote in list(_ZYGOTES.values()):
        if zygote.owner == os.getpid():
            zygote.close()
    _ZYGOTES.clear()
