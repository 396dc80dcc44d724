"""Vision backbones with padding decisions on dynamic H and W (Swin, FocalNet, MobileNet families),
reproduced by small modules and checked in tract through export.

A window partition pads both spatial axes by amounts computed from the sizes
(``(ws - w % ws) % ws``): tract's ``pad`` takes static amounts only, so each axis is padded by
a concatenated piece, and tract writes the padded size as the sum of its parts
(``H/2 + (H+1)/2 - H + 4*((H+6)/8)``), which it cannot match with ``4*((H+6)/8)`` in the next
concatenation or in the reshape into windows.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many
from harness import noisy, randn, tract_matches_eager
from test_dynamic_steps import WindowPad, _export, pad_to_patch


def _in_range(r, hw) -> bool:
    return all(s not in r.ranges or r.ranges[s].contains(n) for s, n in zip("HW", hw))


def _tract_at(model, r, sizes):
    """The asset run in tract at each (H, W) (all inside the export's ranges), compared with eager."""
    assert all(_in_range(r, hw) for hw in sizes), (r.ranges, sizes)
    tract_matches_eager(r.path, model, [[randn(1, 3, h, w, seed=h * 1000 + w)] for h, w in sizes])


def test_window_pad_both_axes_loads_in_tract(tmp_path):
    # before: tract refused the asset at load ("Inconsistent concat": the H-padded size as tract's
    # sum of parts against the size written for the W piece)
    model = noisy(WindowPad(always=True))  # Swin's window layer
    r = _export(model, (18, 26), tmp_path)  # 9 x 13 windows grid: both axes padded at the example
    # traced where both axes pad, the graph holds for the sizes with no padding too
    _tract_at(model, r, [(18, 26), (16, 24), (22, 10), (40, 34)])


class PadNaN(nn.Module):
    """A constant pad by amounts from the sizes next to items that are inf: the pad holds the fill
    value, not ``inf * 0``."""

    def forward(self, x):
        h, w = x.shape[-2:]
        y = torch.where(x > 1.0, torch.full_like(x, float("inf")), x)
        y = F.pad(y, (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4), value=0.5)
        return torch.nan_to_num(y, posinf=7.0)


def test_dynamic_pad_fill_beside_inf(tmp_path):
    model = PadNaN().eval()
    r = _export(model, (5, 7), tmp_path)
    _tract_at(model, r, [(5, 7), (6, 9), (8, 4)])


class PatchThenWindows(nn.Module):
    """Swin's first stage: the patch embedding pads ``if W % 4 != 0`` (a decision), the window
    layer pads to a multiple of the window (always, by a computed amount) and crops back only
    ``if`` it padded (a decision with another step)."""

    def __init__(self, patch=4, window=4):
        super().__init__()
        self.patch, self.window = patch, window
        self.proj = nn.Conv2d(3, 4, patch, patch)
        self.mix = nn.Linear(4, 4)

    def forward(self, x):
        x = self.proj(pad_to_patch(x, self.patch)).permute(0, 2, 3, 1)
        b, h, w, c = x.shape
        ws = self.window
        pr, pb = (ws - w % ws) % ws, (ws - h % ws) % ws
        x = F.pad(x, (0, 0, 0, pr, 0, pb))
        hp, wp = x.shape[1], x.shape[2]
        win = x.view(b, hp // ws, ws, wp // ws, ws, c).transpose(2, 3).reshape(-1, ws * ws, c)
        win = win + torch.softmax(win @ win.transpose(1, 2), -1) @ self.mix(win)
        x = win.view(b, hp // ws, wp // ws, ws, ws, c).transpose(2, 3).reshape(b, hp, wp, c)
        if pr > 0 or pb > 0:
            x = x[:, :h, :w, :]
        return x.mean((1, 2))


def test_patch_pad_then_window_pad_steps(tmp_path):
    model = noisy(PatchThenWindows())
    # 32 x 24 -> 8 x 6 patches: no patch padding, the window pads W (6 -> 8), not H
    r = _export(model, (32, 24), tmp_path)
    for s in ("H", "W"):
        assert r.ranges[s].step % 4 == 0 and r.ranges[s].rest % 4 == 0, r.ranges[s]
    _tract_at(model, r, [(32, 24), (16, 40), (48, 8)])
    # a size off the step: the export refuses it, tract too (the size is declared as 4*H_4)
    assert not _in_range(r, (30, 24))
    with pytest.raises(Exception):
        run_tract_many(r.path, [[randn(1, 3, 30, 24).numpy()]])
