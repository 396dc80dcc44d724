"""The symbolic replay goes past numbers read from data: a Python decision on data
(``mask.any().item()``, a warning or a fast path in many models) no longer sends the export to
probe fitting, whose ranges are narrower; a 0-d index tensor (a step of a vmapped mask function
reading ``padding_mask[b, k]``) has the shape of an integer index. Each export is checked in
tract by the export itself, then run again in tract at other sizes and compared with eager."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from harness import randn, tract_matches_eager


def _export(model, inputs, tmp_path, axes, names):
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, tuple(inputs), out, input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=axes))
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    assert not any("fitted from probe runs" in n for n in r.notes), r.notes
    return out, r


class _WindowsWithGlobalFlag(nn.Module):
    """LED's encoder in small: pad to a multiple of the window, ask the data whether any token
    attends globally (``.item()``), mix per window, cut the padding off under ``if pad > 0``."""

    def __init__(self, window: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.window = window
        self.mix = nn.Linear(3, 3)

    def forward(self, x, mask):
        pad = (self.window - x.shape[1] % self.window) % self.window
        if pad > 0:
            x = F.pad(x, (0, 0, 0, pad))
            mask = F.pad(mask, (0, pad))
        is_global = (mask > 1).flatten().any().item()
        b, n, d = x.shape
        h = self.mix(x.view(b, n // self.window, self.window, d)).softmax(2).view(b, n, d) * mask[..., None]
        if is_global:
            h = h * 2
        if pad > 0:
            h = h[:, :-pad]
        return h


def test_decision_on_data_keeps_the_replay(tmp_path):
    model = _WindowsWithGlobalFlag().eval()
    axes = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(2, 11, 3), torch.ones(2, 11)], tmp_path, axes, ["x", "mask"])
    assert "S" not in r.ranges or not r.ranges["S"].bounded, r.ranges
    sizes = (1, 4, 7, 8, 12, 13, 30)
    tract_matches_eager(out, model, [[randn(2, s, 3, seed=s), (randn(2, s, seed=s) > -1).float()] for s in sizes])


class _VmappedPaddingMask(nn.Module):
    """A mask built as transformers' masking utilities build it: a function of (batch, query,
    key) indices reading ``padding_mask[b, k]``, vmapped over the three index ranges."""

    def forward(self, x, padding_mask):
        b_size, s = padding_mask.shape

        def allowed(b, q, k):
            return padding_mask[b, k] & (k <= q)

        over_k = torch.vmap(allowed, in_dims=(None, None, 0))
        over_q = torch.vmap(over_k, in_dims=(None, 0, None))
        over_b = torch.vmap(over_q, in_dims=(0, None, None))
        m = over_b(torch.arange(b_size), torch.arange(s), torch.arange(s))
        scores = (x @ x.transpose(1, 2)).masked_fill(~m, -1e4)
        return scores.softmax(-1) @ x


def test_vmapped_mask_reading_a_padding_mask(tmp_path):
    model = _VmappedPaddingMask().eval()
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    axes = {"x": {0: "B", 1: "S"}, "padding_mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(2, 6, 4), mask], tmp_path, axes, ["x", "padding_mask"])
    sets = []
    for s in (1, 3, 9):
        m = torch.ones(3, s, dtype=torch.bool)
        m[0, s // 2 + 1:] = False
        sets.append([randn(3, s, 4, seed=s), m])
    tract_matches_eager(out, model, sets)


class _PaddedOverlappingChunks(nn.Module):
    """LED's encoder windows: the sequence padded to a multiple of 2w, then read as overlapping
    chunks with ``as_strided`` and strides read from the padded tensor. torch writes a contiguous
    stride as ``Max(1, size)``; over sizes of at least 1 that is the size, which the replay now
    settles (it had no IR form, and LED's range came from probe fitting)."""

    def forward(self, x):
        from test_encoders import _chunk

        w = 2
        pad = (2 * w - x.shape[1] % (2 * w)) % (2 * w)
        y = F.pad(x, (0, 0, 0, pad)).transpose(1, 2).reshape(x.shape[0] * 2, x.shape[1] + pad, -1)
        return _chunk(y * 1.5, w).sum(2)


def test_strides_of_a_padded_tensor(tmp_path):
    model = _PaddedOverlappingChunks().eval()
    out, r = _export(model, [randn(2, 7, 6)], tmp_path, {"x": {0: "B", 1: "S"}}, ["x"])
    assert "S" not in r.ranges or not r.ranges["S"].bounded, r.ranges
    tract_matches_eager(out, model, [[randn(3, s, 6, seed=s)] for s in (1, 4, 8, 13)])


class _SlidingWindowMaskAfterConv(nn.Module):
    """Moonshine-streaming's encoder in small: a strided conv, the padding mask cut to the conv's
    length, and a sliding-window mask function vmapped over (batch, query, key) as transformers'
    masking utilities do for custom mask functions. As a loop, tract could not run it (the inner
    loop's length is written from S, which the loop body cannot resolve); as broadcasting ops
    (equal to the loop at the example) it runs, with no loop at all."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(4, 4, 5, stride=2)

    def forward(self, x, padding_mask):
        h = self.conv(x.transpose(1, 2)).transpose(1, 2)
        length = h.shape[1]
        pm = padding_mask[:, 4::2][:, :length]

        def allowed(b, q, k):
            d = q - k
            return pm[b, k] & (((d >= 0) & (d < 3)) | ((d < 0) & (-d < 2)))

        over_k = torch.vmap(allowed, in_dims=(None, None, 0))
        over_q = torch.vmap(over_k, in_dims=(None, 0, None))
        over_b = torch.vmap(over_q, in_dims=(0, None, None))
        m = over_b(torch.arange(pm.shape[0]), torch.arange(length), torch.arange(length))
        scores = (h @ h.transpose(1, 2)).masked_fill(~m, -1e4)
        return scores.softmax(-1) @ h


def _masks(b, s):
    m = torch.ones(b, s, dtype=torch.bool)
    m[0, s // 2 + 1:] = False
    return m


def test_vmapped_mask_function_as_broadcasting(tmp_path):
    model = _SlidingWindowMaskAfterConv().eval()
    axes = {"x": {0: "B", 1: "S"}, "padding_mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(2, 20, 4), _masks(2, 20)], tmp_path, axes, ["x", "padding_mask"])
    assert any("broadcasting ops" in n for n in r.notes), r.notes
    assert r.ranges["S"].lo == 5 and r.ranges["S"].hi is None, r.ranges
    tract_matches_eager(out, model, [[randn(3, s, 4, seed=s), _masks(3, s)] for s in (5, 6, 9, 31)])


class _VmapNeedingItsItems(nn.Module):
    """vmapped functions that broadcasting would get wrong or cannot run: a reduction over the
    row an item picks (``mask[b].any()`` reduces everything on broadcast views) and a Python
    decision on an item. Both stay loops, with the loop's values."""

    def forward(self, x, mask):
        rows = torch.vmap(lambda b: mask[b].any() & (b >= 0))(torch.arange(mask.shape[0]))
        return x * rows[:, None].float() + torch.vmap(lambda v: v * 2 if True else v)(x[:, 0])[:, None]


def test_vmap_that_needs_its_items_stays_a_loop(tmp_path):
    model = _VmapNeedingItsItems().eval()
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[1, 2] = True
    axes = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(3, 5), mask], tmp_path, axes, ["x", "mask"])
    vmaps = [n for n in r.notes if n.startswith("torch.vmap")]
    assert len(vmaps) == 2 and "as a scan" in vmaps[0] and "broadcasting ops" in vmaps[1], r.notes
    m2 = torch.zeros(4, 7, dtype=torch.bool)
    m2[2, 6] = True
    m2[0, 0] = True
    tract_matches_eager(out, model, [[randn(4, 7, seed=3), m2]])


class _SizesAsTensors(nn.Module):
    """Sizes divided with torch.div and made tensors with torch.tensor: on fake tensors the
    number is lost (and torch.tensor fixed S to the example's), so the replay keeps them numbers."""

    def forward(self, x):
        n = torch.div(x.size(1), 3, rounding_mode="floor")
        y = x[:, : n * 3].reshape(x.size(0), n, 3 * x.size(2))
        return y.sum(1), torch.remainder(torch.tensor(x.size(1)), 3) + torch.zeros(1)


def test_sizes_made_tensors(tmp_path):
    model = _SizesAsTensors().eval()
    out, r = _export(model, [randn(2, 11, 2)], tmp_path, {"x": {0: "B", 1: "S"}}, ["x"])
    assert r.ranges.get("S") is None or r.ranges["S"].lo <= 3, r.ranges
    tract_matches_eager(out, model, [[randn(3, s, 2, seed=s)] for s in (3, 5, 12, 17)])


class _EqualityFastPath(nn.Module):
    """``torch.equal`` (and ``allclose``) give a Python bool read from data: the replay goes on
    with the example's answer, which the graph keeps, instead of stopping there."""

    def forward(self, x, mask):
        if torch.equal(mask, torch.ones_like(mask)):
            x = x * 2
        return x[:, : x.shape[1] // 2] + 1


def test_equal_of_data_keeps_the_replay(tmp_path):
    model = _EqualityFastPath().eval()
    axes = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(2, 6), torch.ones(2, 6)], tmp_path, axes, ["x", "mask"])
    tract_matches_eager(out, model, [[randn(3, s, seed=s), torch.ones(3, s)] for s in (2, 5, 9)])
