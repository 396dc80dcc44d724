"""Reshapes to floor divisions of dynamic sizes, linspace with a dynamic number of steps, and
arange with a step computed from a size.

tract 0.23.9 proves at load that a reshape keeps the volume and cannot when a size is a floor
division (``4*B*S`` against ``8*((B*S)/2)``); a -1 there does not help either (it computes
``4*B*S / 8`` as ``B*S``). Such reshapes are written as a gather from the flattened items."""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from fx2nnef.errors import UnsupportedOpError
from harness import randn, tract_matches_eager


class PairRows(torch.nn.Module):
    """``x[B, S, D].reshape(B*S // k, k*D)``, a linear, then back to ``[B, S, D]``."""

    def __init__(self, k: int, d: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.k = k
        self.lin = torch.nn.Linear(k * d, k * d)

    def forward(self, x):
        B, S, D = x.shape
        return self.lin(x.reshape(B * S // self.k, self.k * D)).view(B, S, D)


class TwoHalves(torch.nn.Module):
    """Two floor divisions in one shape: ``[B, S, D] -> [B // 2, S // 2, 4*D]`` and back."""

    def __init__(self, d: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4 * d, 4 * d)

    def forward(self, x):
        B, S, D = x.shape
        return self.lin(x.reshape(B // 2, S // 2, 4 * D)).reshape(B, S, D) * 2.0


def _export(model, x, tmp_path, axes=None):
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, (x,), out, input_names=["x"], output_names=["y"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": axes or {0: "B", 1: "S"}}))
    assert r.check.ok, r.check
    return out, r


@pytest.mark.parametrize("k, sizes", [
    (2, [(2, 6), (3, 4), (1, 2), (5, 2), (4, 7)]),
    (4, [(2, 6), (2, 2), (4, 8), (6, 10)]),  # the export is valid for even B and S (B = 2*B_2)
])
def test_reshape_to_floor_division_loads_and_matches(tmp_path, k, sizes):
    model = PairRows(k)
    out, r = _export(model, randn(2, 6, 4), tmp_path)
    # k = 2 keeps B and S free and needs the gather; k = 4 steps both (B = 2*B_2), exact again
    assert ("tract_core_gather" in r.nnef_text) == (k == 2), r.nnef_text
    tract_matches_eager(out, model, [[randn(b, s, 4, seed=b * 10 + s)] for b, s in sizes])


def test_reshape_with_two_floor_divisions(tmp_path):
    """B // 2 and S // 2: the model refuses odd sizes, so the export takes B = 2*B_2, S = 2*S_2,
    and the reshape to ``[B_2, S_2, 16]`` is exact for tract: it stays a reshape (no -1 needed;
    a -1 could stand for one of the two only)."""
    model = TwoHalves()
    out, r = _export(model, randn(2, 6, 4), tmp_path)
    assert "B_2" in r.nnef_text and "S_2" in r.nnef_text and "tract_core_gather" not in r.nnef_text
    tract_matches_eager(out, model, [[randn(b, s, 4, seed=b + s)] for b, s in [(2, 6), (4, 2), (6, 4), (2, 10)]])


def test_exact_reshape_stays_a_reshape(tmp_path):
    class Merge(torch.nn.Module):
        def forward(self, x):
            B, S, D = x.shape
            return x.reshape(B * S, D).relu().view(B, S, D)

    out, r = _export(Merge(), randn(2, 6, 4), tmp_path)
    assert "tract_core_gather" not in r.nnef_text and "reshape(" in r.nnef_text
    tract_matches_eager(out, Merge(), [[randn(b, s, 4)] for b, s in [(1, 1), (3, 5)]])


class LinspaceSteps(torch.nn.Module):
    def __init__(self, start, end):
        super().__init__()
        self.start, self.end = start, end

    def forward(self, x):
        return x + torch.linspace(self.start, self.end, x.shape[1])


class LinspaceToSize(torch.nn.Module):
    """The battery's case: the end and the number of steps are sizes."""

    def forward(self, x):
        S = x.shape[1]
        return x + torch.linspace(0, S, S + 1)[:S]


@pytest.mark.parametrize("start, end", [(0, 1), (-2.5, 3.0), (10.0, -7.25)])
def test_linspace_dynamic_steps(tmp_path, start, end):
    model = LinspaceSteps(start, end)
    out, _ = _export(model, randn(2, 7), tmp_path, {1: "S"})
    tract_matches_eager(out, model, [[randn(2, s, seed=s)] for s in (1, 2, 3, 7, 8, 50, 101)])


def test_linspace_end_and_steps_from_a_size(tmp_path):
    model = LinspaceToSize()
    out, _ = _export(model, randn(2, 7), tmp_path, {1: "S"})
    tract_matches_eager(out, model, [[randn(2, s, seed=s)] for s in (1, 2, 5, 33)])


def test_linspace_one_step_is_the_start(tmp_path):
    class One(torch.nn.Module):
        def forward(self, x):
            return x + torch.linspace(2.0, 7.0, 1)

    out, _ = _export(One(), randn(3, 1), tmp_path, {0: "B"})
    tract_matches_eager(out, One(), [[randn(5, 1)]])


def test_arange_step_from_a_size_is_refused_accurately(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.arange(0, 1, 1.0 / x.shape[1])

    with pytest.raises(UnsupportedOpError) as err:
        _export(M(), randn(2, 10), tmp_path, {1: "S"})
    text = str(err.value)
    assert "computed from sizes" in text and "ceil((end - start) / step)" in text
    assert "tensor data" not in text
