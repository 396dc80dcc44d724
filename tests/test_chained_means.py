"""Means over dynamic axes, chained: tract 0.23.9 takes time exponential in their number to load.

Three GroupNorms on dynamic H and W (each two ``mean_reduce`` over the group, H and W) did not
load in tract within minutes; Poolformer, with eight, hung the export's check. The means over
dynamic axes are written as a sum times the recip of the count, which loads at once."""
from __future__ import annotations

import torch

import fx2nnef
from fx2nnef.targets.tract_runner import tract_load_check
from harness import randn, tract_matches_eager


class NormStack(torch.nn.Module):
    """A strided conv, then GroupNorms, an InstanceNorm, a variance and a global mean over H, W."""

    def __init__(self, norms: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 7, stride=4, padding=2)
        self.norms = torch.nn.ModuleList([torch.nn.GroupNorm(2, 8) for _ in range(norms)])
        self.inorm = torch.nn.InstanceNorm2d(8, affine=True)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.1 * torch.randn(p.shape))

    def forward(self, x):
        x = self.conv(x)
        for norm in self.norms:
            x = x + torch.nn.functional.gelu(norm(x))
        x = self.inorm(x)
        return x.mean((2, 3)) + x.var((2, 3), unbiased=True)


def test_chained_group_norms_on_dynamic_sizes_load_in_tract(tmp_path):
    model = NormStack().eval()
    x = randn(1, 3, 64, 48)
    path = tmp_path / "norms.nnef.tgz"
    fx2nnef.export(model, (x,), path, input_names=["x"],
                   target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {2: "H", 3: "W"}}))
    # before the rewrite this load took minutes (a TractError "did not finish" at step 'load' after 60 s)
    tract_load_check(path, timeout=60)
    tract_matches_eager(path, model, [[randn(1, 3, 64, 48, seed=1)], [randn(1, 3, 37, 90, seed=2)]])


def test_chained_means_on_a_dynamic_sequence_checked_in_tract(tmp_path):
    """Layer norms written by hand over a dynamic length (an audio encoder's time axis)."""
    class TimeNorms(torch.nn.Module):
        def forward(self, x):  # x: (B, C, T)
            for _ in range(4):
                m = x.mean(-1, keepdim=True)
                v = ((x - m) ** 2).mean(-1, keepdim=True)
                x = torch.tanh((x - m) / torch.sqrt(v + 1e-5)) + 0.5 * x
            return x.std(-1)

    model = TimeNorms().eval()
    x = randn(2, 4, 50)
    path = tmp_path / "time.nnef.tgz"
    fx2nnef.export(model, (x,), path, input_names=["x"],
                   target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {0: "B", 2: "T"}}))
    tract_load_check(path, timeout=60)
    tract_matches_eager(path, model, [[randn(2, 4, 7, seed=3)], [randn(3, 4, 101, seed=4)]])
