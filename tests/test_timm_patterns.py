"""Patterns of timm's models over a dynamic batch and dynamic H and W, with torch alone (the
survey, ``benchmarks/survey_timm.py``, runs timm itself).

- ``addcmul``, ``addcdiv`` and ``lerp`` broadcast over symbolic sizes (ConvNeXt-v2's global
  response norm): torch's fake kernels for them expand with concrete sizes and fail, so the
  symbolic replay failed and the shapes were fitted from some 150 probe runs (minutes on a real
  model); they are now replayed by an equivalent.

Each model is exported with dynamic axes, checked by the export in tract at the example and at
other sizes, then (raw, with ``check_io=False``) run in tract at more sizes and compared with
PyTorch.
"""
import pytest
import torch
from torch import nn

import fx2nnef
from harness import randn, tract_matches_eager

_FALLBACK = "dynamic shapes were fitted from probe runs"
_AXES = {"x": {0: "B", 2: "H", 3: "W"}}


def export_bhw(model, shape, tmp_path, check_io=True, name="m"):
    r = fx2nnef.export(model, (randn(*shape, seed=0),), tmp_path / f"{name}.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes=_AXES, check_io=check_io))
    assert not check_io or (r.check.ok and len(r.check.cases) >= 3), r.check
    return r


def check_at(r, model, shapes):
    tract_matches_eager(r.path, model, [[randn(*s, seed=10 + k)] for k, s in enumerate(shapes)])


class ResponseNorm(nn.Module):
    """ConvNeXt-v2's block tail, channels last: a norm over H and W, then ``addcmul`` with
    per-channel weights; ``addcdiv`` and ``lerp`` of the same broadcast."""

    def __init__(self, c=6):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.conv = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.w = nn.Parameter(torch.randn(c, generator=g))
        self.b = nn.Parameter(torch.randn(c, generator=g))

    def forward(self, x):
        x = self.conv(x).permute(0, 2, 3, 1)
        g = x.norm(p=2, dim=(1, 2), keepdim=True)
        n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
        w, b = self.w.view(1, 1, 1, -1), self.b.view(1, 1, 1, -1)
        y = x + torch.addcmul(b, w, x * n)
        y = y.addcdiv(w, n + 2.0, value=0.5) + torch.addcmul(x, y, w, value=-0.25)
        return torch.lerp(y, x, 0.3) + y.lerp(b, w.sigmoid())


@pytest.mark.parametrize("check_io", [True, False])
def test_addcmul_addcdiv_lerp_replay_symbolically(tmp_path, check_io):
    model = ResponseNorm().eval()
    r = export_bhw(model, (1, 3, 20, 16), tmp_path, check_io=check_io)
    assert not any(_FALLBACK in n for n in r.notes), r.notes
    assert r.timings["graph_runs"] <= 12, r.timings
    check_at(r, model, [(2, 3, 9, 31), (1, 3, 20, 16), (3, 3, 2, 5)])
