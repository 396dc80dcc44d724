"""Size expressions tract can prove (issue 43, class 3): assets that tract refused to load.

SD3's transformer crops its position table at the centre to the patch grid (``top = (16 - h) // 2``
then ``[top:top + h]``), adds it to the patches and later reshapes by ``h``: tract computed the
crop's length from bounds written apart and could not match it with ``h`` ("16*(B)*(broadcast(...))"
at the reshape). Reproduced with torch alone, checked in tract at the example and other sizes."""
import tarfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.ir.dims import SymDim, with_fewer_divisions
from harness import randn, tract_matches_eager


class CentredCrop(nn.Module):
    def __init__(self, table=16, patch=2, channels=8):
        super().__init__()
        self.table, self.patch = table, patch
        self.pos = nn.Parameter(torch.randn(1, table * table, channels))
        self.proj = nn.Conv2d(4, channels, patch, stride=patch)

    def forward(self, x):
        h, w = x.shape[-2] // self.patch, x.shape[-1] // self.patch
        top, left = (self.table - h) // 2, (self.table - w) // 2
        pos = self.pos.reshape(1, self.table, self.table, -1)[:, top:top + h, left:left + w, :]
        y = self.proj(x).flatten(2).transpose(1, 2) + pos.reshape(1, -1, self.pos.shape[-1])
        return y.reshape(x.shape[0], h, w, -1).permute(0, 3, 1, 2)  # unpatchify-like


@pytest.mark.parametrize("check_io", [True, False])
def test_centred_crop_then_reshape_loads(tmp_path, check_io):
    torch.manual_seed(0)
    model = CentredCrop().eval()
    r = fx2nnef.export(model, (randn(1, 4, 8, 8),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}, check_io=check_io))
    # odd and even sizes: the crop's begin rounds differently
    tract_matches_eager(r.path, model, [[randn(b, 4, h, w, seed=h * w)] for b, h, w in
                                        [(1, 8, 8), (2, 10, 14), (1, 13, 7), (3, 31, 4), (1, 2, 33)]])


def test_fewer_divisions_is_an_equal_form():
    h = SymDim.symbol("H")
    fd = SymDim.floordiv
    length = fd(3 * h + 1, 4) + fd(h, 2) + fd(h + 2, 4) - h  # end - begin of the crop, as written
    plain = with_fewer_divisions(length)
    assert plain == fd(h, 2)
    assert all(plain.evaluate({"H": n}) == length.evaluate({"H": n}) for n in range(1, 300))
    assert with_fewer_divisions(fd(h + 3, 4) * 2 + 1) == fd(h + 3, 4) * 2 + 1  # nothing simpler: kept


class PooledPyramid(nn.Module):
    """RAFT's correlation pyramid: an all-pairs volume ``(B*h*w, 1, h, w)`` avg-pooled by 2 three
    times, each level reshaped by its own pooled sizes. The model takes multiples of 8 only, so the
    export writes ``H = 8*H_8``; a level's size is then ``(H_8)/2`` to tract (from the pool) and was
    written ``(8*H_8+7)/16`` ("... should be equal to ..." at the reshape)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU(),
                                 nn.Conv2d(8, 8, 3, 2, 1))

    def forward(self, a, b):
        if a.shape[-1] % 8 or a.shape[-2] % 8:
            raise ValueError("the image sizes must be multiples of 8")
        fa, fb = self.enc(a), self.enc(b)
        n, c, h, w = fa.shape
        corr = (fa.view(n, c, h * w).transpose(1, 2) @ fb.view(n, c, h * w)).reshape(n * h * w, 1, h, w)
        levels = []
        for _ in range(3):
            corr = F.avg_pool2d(corr, 2, 2)
            levels.append(corr.reshape(n * h * w, 1, corr.shape[-2] * corr.shape[-1]).mean(-1).view(n, h, w))
        return torch.stack(levels, 1)


def _grid_sample(img, grid):
    """torchvision's RAFT helper: grid_sample with absolute pixel coordinates."""
    h, w = img.shape[-2:]
    x, y = grid.split([1, 1], dim=-1)
    return F.grid_sample(img, torch.cat([2 * x / (w - 1) - 1, 2 * y / (h - 1) - 1], -1), align_corners=True)


class SampledPyramid(nn.Module):
    """RAFT's correlation lookup: each pyramid level sampled around every pixel's position. Each
    level multiplies data by its sizes (``(W - 1) * 0.5``); tract took those size factors for masks
    and its load did not end (see ``helpers._sizes_hidden_from_data``)."""

    def __init__(self, levels=4):
        super().__init__()
        self.levels = levels
        self.enc = nn.Conv2d(3, 8, 3, 2, 1)

    def forward(self, a, b, flow):
        fa, fb = self.enc(a), self.enc(b)
        n, c, h, w = fa.shape
        corr = (fa.view(n, c, h * w).transpose(1, 2) @ fb.view(n, c, h * w)).reshape(n * h * w, 1, h, w) / c
        pyramid = [corr]
        for _ in range(self.levels - 1):
            pyramid.append(F.avg_pool2d(pyramid[-1], 2, 2))
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        coords = torch.stack([xs, ys], 0).float()[None] + self.enc(flow)[:, :2]
        d = torch.linspace(-1, 1, 3)
        delta = torch.stack(torch.meshgrid(d, d, indexing="ij"), -1).view(1, 3, 3, 2)
        centre = coords.permute(0, 2, 3, 1).reshape(n * h * w, 1, 1, 2)
        out = []
        for level in pyramid:
            out.append(_grid_sample(level, centre + delta).view(n, h, w, -1))
            centre = centre / 2
        return torch.cat(out, -1).permute(0, 3, 1, 2)


def test_pool_of_a_stepped_size_is_written_as_tract_reads_it():
    h = SymDim.symbol("H_8")
    assert SymDim.floordiv(8 * h + 7, 16) == SymDim.floordiv(h, 2)
    assert SymDim.floordiv(8 * h + 7, 32) == SymDim.floordiv(h, 4)
    assert SymDim.floordiv(6 * h + 3, 4) == SymDim.floordiv(3 * h + 1, 2)
    for form, n_from in ((SymDim.floordiv(8 * h + 7, 16), lambda n: (8 * n + 7) // 16),
                         (SymDim.floordiv(6 * h + 3, 4), lambda n: (6 * n + 3) // 4)):
        assert all(form.evaluate({"H_8": n}) == n_from(n) for n in range(0, 100))


@pytest.mark.parametrize("check_io", [True, False])
def test_pooled_pyramid_of_stepped_sizes_loads(tmp_path, check_io):
    torch.manual_seed(0)
    model = PooledPyramid().eval()
    axes = {0: "B", 2: "H", 3: "W"}
    r = fx2nnef.export(model, (randn(1, 3, 64, 64), randn(1, 3, 64, 64, seed=1)), tmp_path / "m.nnef.tgz",
                       input_names=["a", "b"], target=fx2nnef.TractNNEF(dynamic_axes={"a": axes, "b": axes},
                                                                      check_io=check_io))
    assert r.ranges["H"].step == 8, r.ranges
    tract_matches_eager(r.path, model, [[randn(b, 3, h, w, seed=h), randn(b, 3, h, w, seed=w)]
                                        for b, h, w in [(1, 64, 64), (2, 96, 128), (1, 136, 72)]])


def test_sampled_pyramid_loads(tmp_path):
    torch.manual_seed(0)
    model = SampledPyramid().eval()
    axes = {0: "B", 2: "H", 3: "W"}
    r = fx2nnef.export(model, tuple(randn(1, 3, 32, 32, seed=s) for s in range(3)), tmp_path / "m.nnef.tgz",
                       input_names=["a", "b", "flow"],
                       target=fx2nnef.TractNNEF(dynamic_axes={k: axes for k in ("a", "b", "flow")}, check_io=False))
    tract_matches_eager(r.path, model, [[randn(b, 3, h, w, seed=s) for s in range(3)]
                                        for b, h, w in [(1, 32, 32), (2, 48, 40)]])


class PaddedStem(nn.Module):
    """DaViT's stem: the image padded to a multiple of 4, a conv by 4, tokens through a linear and
    back to a grid. tract's conv gives ``(3+4*((H+3)/4))/4``, which it reduces to ``(H+3)/4`` only
    when it can prove ``(H+3)/4 >= 0``; the reshape back to the grid failed at load before the
    graph asserted ``H >= 0``."""

    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 7, stride=4, padding=3)
        self.lin = nn.Linear(channels, channels)

    def forward(self, x):
        h, w = x.shape[-2:]
        x = self.conv(F.pad(x, (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4)))
        b, c, gh, gw = x.shape
        return self.lin(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, c, gh, gw)


class PaddedWindows(nn.Module):
    """A Swin-like window partition after a strided conv: the grid padded to a multiple of the
    window, viewed into windows, a linear over each window's tokens, and back."""

    def __init__(self, channels=8, window=3):
        super().__init__()
        self.window = window
        self.conv = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.lin = nn.Linear(channels, channels)

    def forward(self, x):
        x = self.conv(x).permute(0, 2, 3, 1)
        b, h, w, c = x.shape
        k = self.window
        x = F.pad(x, (0, 0, 0, (k - w % k) % k, 0, (k - h % k) % k))
        hp, wp = x.shape[1:3]
        win = x.view(b, hp // k, k, wp // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, k * k, c)
        win = self.lin(win).view(b, hp // k, wp // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        return win[:, :h, :w, :].permute(0, 3, 1, 2)


class CeilPoolTokens(nn.Module):
    """A ceil-mode max pool (its size is a nested division to tract), then tokens and a grid again."""

    def __init__(self, channels=8):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.lin = nn.Linear(channels, channels)

    def forward(self, x):
        x = F.max_pool2d(self.conv(x), 3, 2, ceil_mode=True)
        b, c, h, w = x.shape
        return self.lin(x.flatten(2).transpose(1, 2)).view(b, h, w, c)


@pytest.mark.parametrize("check_io", [True, False])
@pytest.mark.parametrize("make", [PaddedStem, PaddedWindows, CeilPoolTokens])
def test_nested_divisions_of_tract_shapes_load(tmp_path, make, check_io):
    torch.manual_seed(0)
    model = make().eval()
    r = fx2nnef.export(model, (randn(1, 3, 30, 34),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}, check_io=check_io))
    if make is PaddedStem:  # the sizes read by divisions are bounded as the export holds them, B is not
        with tarfile.open(r.path) as tar:
            text = tar.extractfile("graph.nnef").read().decode()
        asserts = [line for line in text.splitlines() if "tract_assert" in line]
        assert asserts == ["extension tract_assert H >= 1;", "extension tract_assert W >= 1;"], asserts
    # sizes that are and are not multiples of the pads and strides
    tract_matches_eager(r.path, model, [[randn(b, 3, h, w, seed=h * w)] for b, h, w in
                                        [(1, 30, 34), (2, 17, 9), (1, 32, 32), (1, 5, 7), (2, 45, 23)]])
