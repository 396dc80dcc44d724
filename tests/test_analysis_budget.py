"""The analysis of dynamic sizes is bounded (issue 43, class 2): past its budget of CPU seconds or
runs, the export stops with AnalysisBudgetError naming what it was doing, instead of taking
minutes to decide. The budget is set by FX2NNEF_ANALYSIS_SECONDS and FX2NNEF_ANALYSIS_RUNS."""
import time

import pytest
import torch
import torch.nn as nn

import fx2nnef
from harness import randn


class Chunks(nn.Module):
    """A Python loop over ``S // 4`` chunks (xLSTM's chunked scan): each chunk count is another
    graph, so the analysis probes, traces again and rolls loops."""

    def forward(self, x):
        return torch.cat([x[:, 4 * i:4 * i + 4].cumsum(1) for i in range(x.shape[1] // 4)], 1)


def _export(tmp_path, check_io=True):
    return fx2nnef.export(Chunks(), (randn(1, 12, 4),), tmp_path / "m.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "S"}}, check_io=check_io))


@pytest.mark.parametrize("check_io", [True, False])
def test_runs_budget_stops_the_analysis(tmp_path, monkeypatch, check_io):
    monkeypatch.setenv("FX2NNEF_ANALYSIS_RUNS", "20")
    t0 = time.process_time()
    with pytest.raises(fx2nnef.AnalysisBudgetError, match=r"stopped after .* and 21 runs .* working on .*budget is .* 20 runs"):
        _export(tmp_path, check_io)
    assert time.process_time() - t0 < 20
    assert not (tmp_path / "m.nnef.tgz").exists()


def test_seconds_budget_names_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("FX2NNEF_ANALYSIS_SECONDS", "0")
    with pytest.raises(fx2nnef.AnalysisBudgetError, match="FX2NNEF_ANALYSIS_SECONDS") as info:
        _export(tmp_path)
    assert "the first trace" in str(info.value)


def test_default_budget_lets_the_export_through(tmp_path):
    r = _export(tmp_path)
    assert r.check.ok and r.ranges["S"].contains(12)


class LongStep(nn.Module):
    """One step that goes on (a forward busy for ``seconds`` of CPU in Python): no run is
    counted meanwhile, as in a symbolic replay whose size expressions sympy simplifies for
    minutes; the budget's seconds stop it all the same."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        t0 = time.process_time()
        while time.process_time() - t0 < self.seconds:
            pass
        return x * 2


def test_seconds_budget_stops_one_long_step(tmp_path, monkeypatch):
    monkeypatch.setenv("FX2NNEF_ANALYSIS_SECONDS", "0.5")
    t0 = time.process_time()
    with pytest.raises(fx2nnef.AnalysisBudgetError, match=r"budget is 0 s .*FX2NNEF_ANALYSIS_SECONDS"):
        fx2nnef.export(LongStep(8.0), (randn(2, 3),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert time.process_time() - t0 < 6
    assert not (tmp_path / "m.nnef.tgz").exists()
    import signal
    assert signal.getsignal(signal.SIGPROF) == signal.SIG_DFL and signal.getitimer(signal.ITIMER_PROF)[0] == 0
    r = fx2nnef.export(LongStep(0.0), (randn(2, 3),), tmp_path / "n.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert r.check.ok
