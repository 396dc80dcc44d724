"""Sizes computed in ways the dynamic analysis used to give up on (issue 43, classes 2 and 5), each
as a small torch-only module: the asset runs in tract at the example and at other sizes, with and
without the export's own check; where no export is right at every size, one clear refusal fast.

- square grids from a count of tokens (``h = w = int(N ** 0.5)``, ``math.isqrt``, ``math.sqrt``):
  the grid side is a size where the tokens are the square of one (a square image whose height and
  width share a symbol); refused, naming the line, where the root is whole at some sizes only;
- loops over ``S // chunk`` chunks: a Python loop holds at the example's count of chunks, said in the
  range with the loop's line and the scan that makes it general; written as torch's scan over the
  reshaped axis it exports for every multiple of the chunk;
- numbers read from data that must change together (``arange(int(n))`` beside ``x[:, :int(n)]``):
  refused, never baked at the example's value.
"""
from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import randn, tract_matches_eager


class _Patches(torch.nn.Module):
    """A patch embedding (DiT, ViT): (B, 3, H, W) -> (B, N, C) tokens, N = (H // 2) * (W // 2)."""

    def __init__(self, side):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 2, 2)
        self.pos = torch.nn.Parameter(torch.randn(1, 6, 4, 4))
        self.side = side

    def forward(self, img):
        t = self.conv(img).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        h = self.side(n)
        grid = t.reshape(b, h, n // h, c).permute(0, 3, 1, 2)  # unpatchify
        # a ViT's position table resized to the grid
        pos = F.interpolate(self.pos, size=(h, n // h), mode="bilinear", align_corners=False)
        return grid + pos


SIDES = {
    "pow": lambda n: int(n ** 0.5),
    "math_sqrt": lambda n: int(math.sqrt(n)),
    "isqrt": lambda n: math.isqrt(n),
    "floor_sqrt": lambda n: math.floor(math.sqrt(n)),
}


def _export(model, example, out, axes, check_io):
    names = list(axes)
    return fx2nnef.export(model, example, out, input_names=names, dynamic_axes=axes,
                          target=fx2nnef.TractNNEF(check_io=check_io))


@pytest.mark.parametrize("check_io", [True, False])
@pytest.mark.parametrize("side", list(SIDES))
def test_square_grid_of_a_square_image_exports_for_every_side(side, check_io, tmp_path):
    model = _Patches(SIDES[side]).eval()
    out = tmp_path / "m.nnef.tgz"
    r = _export(model, (randn(2, 3, 8, 8),), out, {"img": {0: "B", 2: "H", 3: "H"}}, check_io)
    assert not any("fitted" in n for n in r.notes), r.notes  # the side is H // 2, not a fit
    sets = [[randn(b, 3, s, s, seed=s)] for b, s in ((2, 8), (1, 12), (3, 6), (1, 20), (2, 14))]
    tract_matches_eager(out, model, sets)


class _Tokens(torch.nn.Module):
    """Tokens in, grid out: the count itself is the dynamic axis."""

    def forward(self, x):
        b, n, c = x.shape
        h = w = int(n ** 0.5)
        return x.reshape(b, h, w, c).permute(0, 3, 1, 2) * 2


@pytest.mark.parametrize("check_io", [True, False])
@pytest.mark.parametrize("case", ["count_axis", "height_and_width"])
def test_a_root_that_is_whole_at_some_sizes_only_is_refused_naming_its_line(case, check_io, tmp_path):
    if case == "count_axis":
        model, example, axes = _Tokens(), (randn(2, 16, 5),), {"x": {0: "B", 1: "N"}}
        radicand = r"square root of N\b"
    else:
        model, example, axes = _Patches(SIDES["pow"]), (randn(2, 3, 8, 8),), {"img": {0: "B", 2: "H", 3: "W"}}
        radicand = r"square root of .*H//2.*W//2"
    started = time.process_time()
    with pytest.raises(fx2nnef.errors.TraceError, match=radicand + r".*same symbol for an image's height and width") \
            as info:
        _export(model, example, tmp_path / "m.nnef.tgz", axes, check_io)
    assert "test_size_patterns.py:" in str(info.value) and "\n" not in str(info.value)
    assert time.process_time() - started < 20
    assert not (tmp_path / "m.nnef.tgz").exists()


@pytest.mark.parametrize("check_io", [True, False])
def test_square_grid_with_a_static_count_still_exports(check_io, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    _export(_Tokens(), (randn(2, 16, 5),), out, {"x": {0: "B"}}, check_io)
    tract_matches_eager(out, _Tokens(), [[randn(b, 16, 5, seed=b)] for b in (1, 2, 5)])


class _LengthMask(torch.nn.Module):
    """torchaudio's Conformer / Emformer: a padding mask sized by the longest length."""

    def forward(self, x, lengths):
        mask = torch.arange(int(lengths.max().item())) < lengths[:, None]
        return x[:, :int(lengths.max())] * mask[..., None]


@pytest.mark.parametrize("check_io", [True, False])
def test_numbers_from_data_that_change_together_are_traced_not_baked(check_io, tmp_path):
    """Both reads of ``lengths.max()`` are the numbers the graph computes (see test_data_bounds.py): the
    mask and the slice get one count, right at other lengths and sizes, not the example's 5."""
    out = tmp_path / "m.nnef.tgz"
    _export(_LengthMask(), (randn(3, 7, 2), torch.tensor([5, 3, 2])), out,
            {"x": {0: "B", 1: "T"}, "lengths": {0: "B"}}, check_io)
    tract_matches_eager(out, _LengthMask(), [[randn(3, 7, 2, seed=1), torch.tensor([1, 3, 2])],
                                             [randn(2, 9, 2), torch.tensor([8, 3])]])


class _ChunkLoop(torch.nn.Module):
    """xLSTM / chunked scans: a Python loop over ``S // chunk`` chunks."""

    def forward(self, x):
        outs, carry = [], x.new_zeros(x.shape[0], x.shape[2])
        for i in range(x.shape[1] // 4):
            y = x[:, i * 4:(i + 1) * 4].cumsum(1) + carry[:, None]
            carry = y[:, -1]
            outs.append(y)
        return torch.cat(outs, 1), carry


class _ChunkScan(torch.nn.Module):
    """The same chunks as torch's scan over a reshaped axis: one tract_core_scan for any length."""

    def forward(self, x):
        from torch._higher_order_ops.scan import scan

        b, s, c = x.shape

        def step(carry, chunk):
            y = chunk.cumsum(1) + carry[:, None]
            return y[:, -1], y

        last, ys = scan(step, x.new_zeros(b, c), x.reshape(b, s // 4, 4, c), dim=1)
        return ys.reshape(b, s, c), last


@pytest.mark.parametrize("check_io", [True, False])
def test_chunk_loop_is_bounded_fast_and_names_its_line(check_io, tmp_path):
    """A Python loop over chunks holds at the example's chunk count only: the range says so (asserted
    in graph.nnef), the note names the loop's line and the scan that makes it general, in seconds."""
    out = tmp_path / "m.nnef.tgz"
    started = time.process_time()
    r = _export(_ChunkLoop(), (randn(2, 12, 3),), out, {"x": {0: "B", 1: "S"}}, check_io)
    assert time.process_time() - started < 20
    rng = r.ranges["S"]
    assert rng.contains(12) and not rng.contains(16) and not rng.contains(8), rng
    assert any("test_size_patterns.py" in n and "tract_core_scan" in n for n in r.notes), r.notes
    tract_matches_eager(out, _ChunkLoop(), [[randn(b, s, 3, seed=s)] for b, s in ((1, 12), (3, 13), (2, 15))])


@pytest.mark.parametrize("check_io", [True, False])
def test_chunks_as_a_scan_export_for_every_multiple(check_io, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    r = _export(_ChunkScan(), (randn(2, 12, 3),), out, {"x": {0: "B", 1: "S"}}, check_io)
    assert (r.ranges["S"].step, r.ranges["S"].rest % 4, r.ranges["S"].hi) == (4, 0, None), r.ranges
    assert "tract_core_scan" in r.nnef_text
    # the Python loop computes the same (torch's scan runs eagerly only under torch.compile's capture)
    tract_matches_eager(out, _ChunkLoop(), [[randn(b, s, 3, seed=s)] for b, s in ((1, 4), (2, 12), (3, 32))])
