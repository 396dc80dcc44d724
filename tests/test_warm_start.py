"""Engine children forked from a warm process (fx2nnef/targets/zygote.py): still one fresh
process per run, the caller's environment, crashes and timeouts contained, the same numbers as
a plain child, and a plain child whenever the warm process is busy or gone."""
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.targets import zygote
from fx2nnef.targets.child import run_child
from fx2nnef.targets.khronos_runner import run_khronos
from fx2nnef.targets.tract_runner import run_tract

# A child that records its process, its parent, a module-level mark left by an earlier run (if
# any survived) and one environment variable, then ends as told by ``request.txt``.
SCRIPT = '''
import json, os, sys, time
from pathlib import Path
import json as shared_module
workdir = Path(sys.argv[1])
seen = getattr(shared_module, "_fx2nnef_mark", None)
shared_module._fx2nnef_mark = "set by an earlier run"
print("fx2nnef-stage: started", flush=True)
(workdir / "result.json").write_text(json.dumps({
    "pid": os.getpid(), "ppid": os.getppid(), "seen": seen, "cwd": os.getcwd(),
    "var": os.environ.get("FX2NNEF_TEST_VAR"), "rust_backtrace": os.environ.get("RUST_BACKTRACE")}))
action = (workdir / "request.txt").read_text()
if action == "abort":
    os.abort()
if action == "sleep":
    time.sleep(60)
if action == "raise":
    raise ValueError("raised in the child")
sys.exit(3 if action == "exit3" else 0)
'''
PRELOAD = ("json",)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "child_script.py"
    path.write_text(SCRIPT)
    return path


def run(script: Path, folder: Path, action: str = "", timeout: float = 60):
    folder.mkdir()
    (folder / "request.txt").write_text(action)
    return run_child(script, folder, timeout, preload=PRELOAD)


def test_each_run_is_a_fresh_child_of_one_warm_process(script, tmp_path, monkeypatch):
    monkeypatch.setenv("FX2NNEF_TEST_VAR", "first")
    one = run(script, tmp_path / "one").result
    monkeypatch.setenv("FX2NNEF_TEST_VAR", "second")  # changed after the warm process started
    two = run(script, tmp_path / "two").result
    assert one["pid"] != two["pid"] and one["pid"] != os.getpid()
    assert one["ppid"] == two["ppid"] != os.getpid()  # forked by the same warm process
    assert one["seen"] is None and two["seen"] is None  # nothing of one run is seen by the next
    assert (one["var"], two["var"]) == ("first", "second")
    assert one["rust_backtrace"] == "0"
    assert Path(one["cwd"]).resolve() == (tmp_path / "one").resolve()


def test_exit_codes_crashes_and_streams(script, tmp_path):
    assert run(script, tmp_path / "exit3", "exit3").returncode == 3
    raised = run(script, tmp_path / "raise", "raise")
    assert raised.returncode == 1 and "ValueError: raised in the child" in raised.stderr
    aborted = run(script, tmp_path / "abort", "abort")
    assert aborted.returncode == -signal.SIGABRT and aborted.stage == "started"
    assert run(script, tmp_path / "after", "").returncode == 0  # the warm process lives on


def test_timeout_kills_the_child_only(script, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run(script, tmp_path / "sleep", "sleep", timeout=1)
    assert "fx2nnef-stage: started" in info.value.stdout
    pid = __import__("json").loads((tmp_path / "sleep" / "result.json").read_text())["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert run(script, tmp_path / "after", "").returncode == 0


def test_busy_or_dead_warm_process_gives_a_plain_child(script, tmp_path):
    first = run(script, tmp_path / "first").result
    warm = zygote.acquire(PRELOAD, dict(os.environ))  # held, as by another thread
    assert warm is not None
    try:
        busy = run(script, tmp_path / "busy").result
        assert busy["ppid"] == os.getpid()  # started plainly by this process
    finally:
        warm.lock.release()
    os.kill(first["ppid"], signal.SIGKILL)  # the warm process dies
    os.waitpid(first["ppid"], 0)
    after = run(script, tmp_path / "after")
    assert after.returncode == 0 and after.result["ppid"] != first["ppid"]


def test_warm_and_plain_children_compute_the_same_numbers(tmp_path, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    tract_asset = tmp_path / "m.nnef.tgz"
    khronos_asset = tmp_path / "khronos"
    fx2nnef.export(model, (x,), tract_asset, target=fx2nnef.TractNNEF(check_io=False))
    fx2nnef.export(model, (x,), khronos_asset, target=fx2nnef.KhronosNNEF(check_io=False))
    warm = run_tract(tract_asset, [x.numpy()])[0], run_khronos(khronos_asset, [x.numpy()])[0]
    monkeypatch.setenv("FX2NNEF_WARM_START", "0")
    plain = run_tract(tract_asset, [x.numpy()])[0], run_khronos(khronos_asset, [x.numpy()])[0]
    for a, b in zip(warm, plain):
        np.testing.assert_array_equal(a, b)


def test_a_caller_killed_mid_run_leaves_no_process(script, tmp_path):
    """The calling process killed while its child runs (a notebook kernel restarted during a check
    that never ends): the warm process sees its requests' pipe close, kills the child and leaves;
    neither goes on alone."""
    folder = tmp_path / "sleep"
    folder.mkdir()
    (folder / "request.txt").write_text("sleep")
    caller = subprocess.Popen([
        __import__("sys").executable, "-c",
        "import sys; from pathlib import Path; from fx2nnef.targets.child import run_child; "
        f"run_child(Path({str(script)!r}), Path({str(folder)!r}), 120, preload={PRELOAD!r})"],
        cwd=str(Path(fx2nnef.__file__).parents[1]))
    result = folder / "result.json"
    for _ in range(600):  # the child has started once it wrote its record
        if result.exists() and result.read_text():
            break
        time.sleep(0.05)
    record = __import__("json").loads(result.read_text())
    assert record["ppid"] != caller.pid  # forked from the warm process
    caller.kill()
    caller.wait()
    for pid in (record["pid"], record["ppid"]):
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if _zombie(pid):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"process {pid} still runs 5 s after its caller was killed")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False
