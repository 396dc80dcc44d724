"""Ops and types met in vision and audio libraries (issue 43, class 4), reproduced with torch
alone and checked in tract at the example and at other sizes: ConvNeXt-v2's global response norm
(``Tensor.norm`` over dims), and the metadata of a complex spectrum (``size``, ``shape``, ``dim``,
``numel`` and ``dtype`` of ``torch.stft(..., return_complex=True)``) read before ``.abs()``.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from harness import randn, tract_matches_eager


class GlobalResponseNorm(nn.Module):
    """ConvNeXt-v2's GRN (channels last): the L2 norm over H and W, divided by its channel mean."""

    def __init__(self, dim=8):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.randn(1, 1, 1, dim))

    def forward(self, x):
        gx = x.norm(p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x + torch.norm(x, dim=1, keepdim=True)


class SpectrumSizes(nn.Module):
    """An STFT front-end that reads its spectrum's sizes and dtype before taking magnitudes."""

    def forward(self, x):
        z = torch.stft(x, 32, 8, window=torch.hann_window(32), return_complex=True)
        b, bins, frames = z.shape
        mag = z.abs().to(x.dtype if z.dtype == torch.complex64 else torch.float64)
        mean = mag.sum(dim=(1, 2), keepdim=True) / (z.numel() / b)
        return mag / mean + z.size(-1) / frames + z.dim() + z.size()[1] / bins


class PaddedSpectrum(nn.Module):
    """HDemucs pads its complex spectrum with zeros (one more bin, two frames each side)."""

    def forward(self, x):
        z = torch.stft(x, 32, 8, window=torch.hann_window(32), return_complex=True)
        z = F.pad(F.pad(z, [0, 0, 0, 1]), [2, 2])
        return z.abs() + (z * 2).real


@pytest.mark.parametrize("check_io", [True, False])
def test_global_response_norm(tmp_path, check_io):
    model = GlobalResponseNorm().eval()
    r = fx2nnef.export(model, (randn(1, 5, 6, 8),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "H", 2: "W"}}, check_io=check_io))
    tract_matches_eager(r.path, model, [[randn(b, h, w, 8, seed=h)] for b, h, w in [(1, 5, 6), (2, 3, 9), (1, 7, 4)]])


@pytest.mark.parametrize("check_io", [True, False])
def test_complex_spectrum_metadata(tmp_path, check_io):
    model = SpectrumSizes().eval()
    r = fx2nnef.export(model, (randn(1, 256),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "T"}}, check_io=check_io))
    tract_matches_eager(r.path, model, [[randn(b, t, seed=t)] for b, t in [(1, 256), (2, 200), (3, 97)]])


@pytest.mark.parametrize("check_io", [True, False])
def test_complex_zero_pad(tmp_path, check_io):
    model = PaddedSpectrum().eval()
    r = fx2nnef.export(model, (randn(1, 256),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "T"}}, check_io=check_io))
    tract_matches_eager(r.path, model, [[randn(b, t, seed=t)] for b, t in [(1, 256), (2, 200), (3, 97)]])
