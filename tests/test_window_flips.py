"""Sizes where a decision on sizes flips above the example, with torch alone (the surveys,
``benchmarks/survey_torchvision.py`` and ``survey_timm.py``, run the libraries themselves).

- Swin's windows: the map is padded to a multiple of the window, and not shifted when it fits in
  one window (``if window >= padded_h: shift = 0``). At an example whose map fits one window, the
  window count ``padded_h // window`` is 1: torch's kernels decide "== 1" there and the replay's
  ShapeEnv fixes it, so the replay's shapes hold up to the size where the tracer's decision flips
  only. The replay made again at larger hints holds everywhere, but that decision is a constant
  in the first and a comparison of sizes in the second, which was taken for a disagreement: the
  replay was dropped, and the shapes were fitted from hundreds of real runs (minutes on Swin, then
  the analysis budget). Now the range ends where the decision flips, from the replay, in a few
  dozen runs.

Each model is exported with dynamic axes, checked by the export in tract at the example and at
other sizes, then (raw, with ``check_io=False``) run in tract at more sizes and compared with
PyTorch.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fx2nnef
from harness import randn, tract_matches_eager

_FALLBACK = "dynamic shapes were fitted from probe runs"
_AXES = {"x": {0: "B", 2: "H", 3: "W"}}


class WindowBlock(nn.Module):
    """Swin's window attention's size logic (torchvision's ``shifted_window_attention``), channels
    last: pad to the window, shift only when the map spans more than one window, attend within
    each window, undo."""

    def __init__(self, c=6, window=4, shift=2):
        super().__init__()
        self.qk = nn.Linear(c, c)
        self.window, self.shift = window, shift

    def forward(self, x):
        B, H, W, C = x.shape
        ws = self.window
        x = F.pad(x, (0, 0, 0, (ws - W % ws) % ws, 0, (ws - H % ws) % ws))
        _, ph, pw, _ = x.shape
        shift = [self.shift, self.shift]
        if ws >= ph:
            shift[0] = 0
        if ws >= pw:
            shift[1] = 0
        if sum(shift) > 0:
            x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        y = x.view(B, ph // ws, ws, pw // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        a = torch.softmax(self.qk(y) @ y.transpose(1, 2), -1)
        if sum(shift) > 0:
            a = a * 0.5
        y = (a @ y).view(B, ph // ws, pw // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, ph, pw, C)
        if sum(shift) > 0:
            y = torch.roll(y, shifts=(shift[0], shift[1]), dims=(1, 2))
        return y[:, :H, :W, :]


class Windows(nn.Module):
    """A patch embedding, then one window block."""

    def __init__(self, c=6):
        super().__init__()
        self.embed = nn.Conv2d(3, c, 2, stride=2)
        self.block = WindowBlock(c)

    def forward(self, x):
        return self.block(self.embed(x).permute(0, 2, 3, 1))


class TwoStages(nn.Module):
    """Swin's stages: the same window block at two map sizes, the first spanning two windows at
    the example (shifted), the second fitting one (not shifted)."""

    def __init__(self, c=6):
        super().__init__()
        self.embed = nn.Conv2d(3, c, 2, stride=2)
        self.down = nn.Conv2d(c, c, 2, stride=2)
        self.first, self.second = WindowBlock(c), WindowBlock(c)

    def forward(self, x):
        x = self.first(self.embed(x).permute(0, 2, 3, 1))
        return self.second(self.down(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))


@pytest.mark.parametrize("check_io", [True, False])
def test_window_that_fits_the_example_bounds_the_range_from_the_replay(tmp_path, check_io):
    model = Windows().eval()
    r = _export(model, tmp_path, check_io, branches="example")
    assert not any(_FALLBACK in n for n in r.notes), r.notes
    # the shift starts where the map spans two windows (a padded map of 8 at H = 10): the range ends
    # there, where the graph (no shift) differs from the model
    assert r.ranges["H"].hi == 9 and r.ranges["W"].hi == 9, r.ranges
    # over 100 real runs before (the shapes fitted from probes), a dozen now
    assert r.timings["graph_runs"] + r.timings["eager_runs"] <= 30, r.timings
    _check_at(r, model, [(2, 3, 9, 6), (1, 3, 8, 8), (3, 3, 4, 9)])


@pytest.mark.parametrize("check_io", [True, False])
def test_window_decision_exported_both_ways_is_not_rechecked_on_other_values(tmp_path, check_io):
    model = Windows().eval()
    r = _export(model, tmp_path, check_io)
    # the decision on H is exported both ways (the range goes on past H = 10); on W the range ends
    # where the graph differs
    assert all(r.hi in (None, 9) for r in r.ranges.values()), r.ranges
    # the traces exporting the decisions both ways and their analyses: 580 real runs before, 400 now
    assert r.timings["graph_runs"] + r.timings["eager_runs"] <= 450, r.timings
    sizes = [(2, 3, 9, 6), (1, 3, 8, 8), (3, 3, 4, 9)]
    _check_at(r, model, sizes + [(1, 3, 17, 5)] * (r.ranges["H"].hi is None))


def _export(model, tmp_path, check_io, **options):
    r = fx2nnef.export(model, (randn(1, 3, 8, 8, seed=0),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes=_AXES, check_io=check_io), **options)
    assert not check_io or (r.check.ok and len(r.check.cases) >= 3), r.check
    return r


def _check_at(r, model, shapes):
    tract_matches_eager(r.path, model, [[randn(*s, seed=10 + k)] for k, s in enumerate(shapes)])


@pytest.mark.parametrize("check_io", [True, False])
def test_window_decision_met_at_two_stages_ends_the_range_where_the_graph_differs(tmp_path, check_io):
    # the same `if` decides "shift" in the first stage and "no shift" in the second: the range ends
    # where the second stage's map spans two windows (H = 20), from the replay
    model = TwoStages().eval()
    r = fx2nnef.export(model, (randn(1, 3, 16, 16, seed=0),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes=_AXES, check_io=check_io))
    assert not check_io or (r.check.ok and len(r.check.cases) >= 3), r.check
    assert not any(_FALLBACK in n for n in r.notes), r.notes
    assert r.ranges["H"].hi == 19 and r.ranges["W"].hi == 19, r.ranges
    # with the traces that export the decisions both ways and their analyses: about 270 real runs
    assert r.timings["graph_runs"] + r.timings["eager_runs"] <= 320, r.timings
    _check_at(r, model, [(2, 3, 17, 13), (1, 3, 16, 16), (3, 3, 9, 19)])
