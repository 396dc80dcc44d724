"""Functions that libraries hide from symbolic tracing are traced through (issue 43, class 1).

torchvision marks ``stochastic_depth``, ``shifted_window_attention`` and
``_get_relative_position_bias`` with ``torch.fx.wrap``; timm registers functions and modules as
"notrace" for its own fx tracer. Our tracer runs real values and traces their code; the user's own
leaf modules (``leaf_modules=``) stay leaves. Reproduced with torch alone: functions given to
``torch.fx.wrap`` in this module, and a notrace registry written here as timm's is.
"""
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import Fx2NnefError
from harness import randn, tract_matches_eager

def window_bias(x: torch.Tensor, window: int) -> torch.Tensor:
    """Branches on sizes and pads by an amount from them: fx cannot trace it without values."""
    h, w = x.shape[-2:]
    pad_h, pad_w = (window - h % window) % window, (window - w % window) % window
    if pad_h or pad_w:
        x = F.pad(x, (0, pad_w, 0, pad_h))
    return x.mean(dim=(-2, -1), keepdim=True) + torch.arange(window, dtype=x.dtype).sum()


torch.fx.wrap("window_bias")


@torch.fx.wrap  # the decorator form
def grid_scale(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    grid = torch.arange(n, dtype=x.dtype) / n - 0.5
    return x * grid.abs().add(0.5)


def stochastic_depth(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """torchvision's: identity in eval mode."""
    if not training or p == 0.0:
        return x
    keep = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype).bernoulli_(1 - p)
    return x * keep / (1 - p)


torch.fx.wrap("stochastic_depth")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = grid_scale(self.conv(x))
        y = stochastic_depth(y, 0.1, self.training) + x
        return y - window_bias(y, 3)


def _export(model, x, tmp_path, check_io=True):
    return fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}},
                                                   check_io=check_io))


@pytest.mark.parametrize("check_io", [True, False])
def test_wrapped_functions_are_traced_through(tmp_path, check_io):
    torch.manual_seed(0)
    model = Block().eval()
    r = _export(model, randn(1, 4, 7, 8), tmp_path, check_io)
    recorded = " ".join(r.source_op_counts)
    assert not any(f.__name__ in recorded for f in (window_bias, grid_scale, stochastic_depth)), recorded
    # sizes where the window pads both axes, one axis or none, and another batch
    tract_matches_eager(r.path, model, [[randn(b, 4, h, w, seed=h * w)] for b, h, w in
                                        [(1, 7, 8), (2, 9, 6), (1, 6, 11), (3, 5, 5)]])


class Leaf(nn.Module):
    def forward(self, x):
        return window_bias(x, 2)


def test_user_leaf_modules_stay_leaves(tmp_path):
    """A module the user names in ``leaf_modules=`` is still recorded whole: with no extractor for
    it, the export refuses it by name instead of tracing its code."""
    model = nn.Sequential(nn.Conv2d(4, 4, 1), Leaf()).eval()
    with pytest.raises(Fx2NnefError, match="Leaf"):
        fx2nnef.export(model, (randn(1, 4, 6, 6),), tmp_path / "m.nnef.tgz", leaf_modules=(Leaf,),
                       target=fx2nnef.TractNNEF(check_io=False))
