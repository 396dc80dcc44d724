"""Patterns of diffusers' and torchaudio's models, written with torch alone (issue 43):

- a Python ``if`` on a size far above the example whose branch the graph does not see
  (diffusers' ``Upsample2D`` makes its input contiguous when ``shape[0] >= 64``): the range goes
  past it after one trace there, with no analysis at those sizes;
- ``torch.istft`` with ``n_fft`` computed from the spectrum's size (torchaudio's HDemucs:
  ``2 * int(z.shape[-2]) - 2``);
- a reflect pad by an amount computed from the length (HDemucs pads its signal to a multiple
  of the hop).

Each asset runs in tract at the example and at other sizes.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.fx_tracer.shapes import probe
from harness import randn, tract_matches_eager


class _Upsample(torch.nn.Module):
    """diffusers' Upsample2D: contiguous when the batch is large (a decision the graph has no op
    for), nearest x2, a convolution."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        if x.shape[0] >= 64:
            x = x.contiguous()
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _UNetish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.up = _Upsample(8)
        self.b = torch.nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x):
        h = self.a(x)
        return self.b(self.up(self.down(h)) + h)


def _probed_sizes(monkeypatch) -> list:
    seen = []
    real = probe.Prober.probe_now

    def logged(self, env, alone=False):
        seen.append(dict(env))
        return real(self, env, alone)

    monkeypatch.setattr(probe.Prober, "probe_now", logged)
    return seen


def test_a_far_decision_the_graph_does_not_see_leaves_the_range_open(tmp_path, monkeypatch):
    seen = _probed_sizes(monkeypatch)
    torch.manual_seed(0)
    m = _UNetish().eval()
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        seen.clear()
        r = fx2nnef.export(m, (randn(1, 3, 16, 16),), out, input_names=["x"],
                           target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}))
        assert "B" not in r.ranges or r.ranges["B"].contains(70), r.ranges
        # no analysis at the batch of the decision: the model was run near the example only
        assert all(env["B"] < 60 for env in seen), seen
    tract_matches_eager(out, m, [[randn(2, 3, 8, 12, seed=1)], [randn(65, 3, 4, 6, seed=2)]])


def test_a_far_decision_that_changes_the_graph_still_ends_the_range(tmp_path):
    class Wide(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] >= 64:
                return x * 2
            return x + 1

    r = fx2nnef.export(Wide(), (randn(1, 4),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert not r.ranges.get("B") or not r.ranges["B"].contains(64) or r.check.ok, r.ranges
    if "B" not in r.ranges or r.ranges["B"].contains(64):  # exported both ways: tract agrees on both sides
        tract_matches_eager(tmp_path / "m.nnef.tgz", Wide(), [[randn(3, 4, seed=1)], [randn(70, 4, seed=2)]])


class _SpecRoundTrip(torch.nn.Module):
    """HDemucs' spectrogram and back: the inverse's n_fft from the spectrum's bins."""

    def forward(self, x):
        z = torch.stft(x, 16, 4, window=torch.hann_window(16), return_complex=True, normalized=True)
        z = F.pad(z[..., :-1, :], [0, 0, 0, 1])
        n_fft = 2 * int(z.shape[-2]) - 2
        return torch.istft(z, n_fft, 4, window=torch.hann_window(n_fft), normalized=True, length=x.shape[-1])


def test_istft_with_n_fft_from_the_spectrum_size(tmp_path):
    m = _SpecRoundTrip()
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        r = fx2nnef.export(m, (randn(2, 64),), out, input_names=["x"],
                           target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 1: "T"}}))
    assert r.check is None or r.check.ok
    tract_matches_eager(out, m, [[randn(1, 40, seed=1)], [randn(3, 101, seed=2)]])


class _ReflectToMultiple(torch.nn.Module):
    """HDemucs' signal padding: reflect by a fixed amount before and, after, by the amount that
    makes the length a multiple of the hop (a dynamic amount) plus a fixed one; ``before``: the
    dynamic amount put in front instead."""

    def __init__(self, before: bool):
        super().__init__()
        self.before = before

    def forward(self, x):
        le = math.ceil(x.shape[-1] / 16)
        more = 6 + le * 16 - x.shape[-1]
        return F.pad(x, (more, 6) if self.before else (6, more), mode="reflect") * 2


@pytest.mark.parametrize("before", [False, True])
def test_reflect_pad_by_a_dynamic_amount(before, tmp_path):
    m = _ReflectToMultiple(before)
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        fx2nnef.export(m, (randn(1, 2, 100),), out, input_names=["x"],
                       target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 2: "T"}}))
    tract_matches_eager(out, m, [[randn(1, 2, 23, seed=1)], [randn(3, 2, 64, seed=2)], [randn(2, 2, 161, seed=3)]])


def test_no_trace_far_above_the_example_for_a_stepped_range(tmp_path, monkeypatch):
    """A range stepped by a parity decision and ending where a decision on the item count
    changes far above (diffusers' UNet2DCondition: odd sizes forward the upsampling size, and
    ``numel() > 2**31``): the traces again at other sizes stay near the example (a trace of a
    UNet at H = 2**23 + 1 took minutes)."""
    import importlib

    capture = importlib.import_module("fx2nnef.fx_tracer.capture")
    traced_at = []
    real = capture._traced

    def traced(job, args, kwargs, *rest):
        traced_at.append(tuple(args[0].shape))
        return real(job, args, kwargs, *rest)

    monkeypatch.setattr(capture, "_traced", traced)

    class Stepped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 2, 3, padding=1)

        def forward(self, x):
            if x.shape[2] % 2:
                x = F.pad(x, (0, 0, 0, 1))
            y = self.conv(x)
            if y.numel() > 2 ** 20:
                y = y * 0.5
            return y

    torch.manual_seed(0)
    m = Stepped().eval()
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(m, (randn(1, 2, 16, 16),), out, input_names=["x"],
                   target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H"}}))
    assert max(shape[2] for shape in traced_at) <= 1024, traced_at
    tract_matches_eager(out, m, [[randn(2, 2, 8, 16, seed=1)], [randn(1, 2, 40, 16, seed=2)]])


class _FullLengthsMask(torch.nn.Module):
    """torchaudio's Conformer called with every item at full length: the lengths are made from the
    input's size, and the key padding mask is sized by ``int(lengths.max().item())``, a number that
    is the length T (not data)."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 2)

    def forward(self, x):
        lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64)
        longest = int(torch.max(lengths).item())
        mask = torch.arange(longest, dtype=lengths.dtype).expand(x.shape[0], longest) >= lengths.unsqueeze(1)
        y = x.transpose(0, 1)
        out, _ = self.attn(y, y, y, key_padding_mask=mask, need_weights=False)
        return out.transpose(0, 1)


def test_a_count_read_from_a_tensor_of_sizes_stays_symbolic(tmp_path):
    torch.manual_seed(0)
    m = _FullLengthsMask().eval()
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        r = fx2nnef.export(m, (randn(2, 12, 16),), out, input_names=["x"],
                           target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 1: "T"}}))
        assert not r.ranges.get("T"), r.ranges
    tract_matches_eager(out, m, [[randn(1, 5, 16, seed=1)], [randn(3, 31, 16, seed=2)]])


def _sincos_grid(h, w, dim: int):
    """diffusers' 2-d sin-cos positions of an ``h`` x ``w`` grid (``get_2d_sincos_pos_embed``):
    a meshgrid stacked and reshaped to ``[2, 1, w, h]``."""
    grid = torch.stack(torch.meshgrid(torch.arange(w, dtype=torch.float32) / (w / 4),
                                      torch.arange(h, dtype=torch.float32) / (h / 4), indexing="xy"))
    grid = grid.reshape([2, 1, w, h])
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim / 4))
    out = grid.reshape(2, -1)[..., None] * omega
    return torch.cat([out.sin(), out.cos()], -1).permute(1, 0, 2).reshape(1, -1, dim)


class _PatchTokens(torch.nn.Module):
    """diffusers' PatchEmbed at another size than its table's and PixArt's unpatchify: tokens of
    a 2x2 patch grid with sin-cos positions computed from the grid's sides, back to an image."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(4, 16, 2, stride=2)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        h, w = x.shape[-2] // 2, x.shape[-1] // 2
        tokens = self.proj(x).flatten(2).transpose(1, 2) + _sincos_grid(h, w, 16)
        y = self.out(tokens).reshape(-1, h, w, 2, 2, 4)
        return torch.einsum("nhwpqc->nchpwq", y).reshape(-1, 4, h * 2, w * 2)


def test_grid_positions_at_a_square_example_keep_height_and_width_apart(tmp_path):
    """A square example (8 x 8) made the replay's reshape of the stacked grid a torch kernel call,
    whose layout decision (``W//2 == H//2``) then wrote every ``W//2`` as ``H//2``: the shapes were
    fitted from probes instead, and PixArt failed after minutes."""
    torch.manual_seed(0)
    m = _PatchTokens().eval()
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        r = fx2nnef.export(m, (randn(1, 4, 8, 8),), out, input_names=["x"],
                           target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}))
        assert not any("fitted from probe runs" in n for n in r.notes), r.notes  # the replay gave the shapes
    tract_matches_eager(out, m, [[randn(2, 4, 6, 10, seed=1)], [randn(1, 4, 12, 4, seed=2)]])


_CALLS: list = []


class _ForwardedUpsampleSize(torch.nn.Module):
    """diffusers' UNet2DCondition: when a side is no multiple of the overall down factor, the
    upsampling is given the skip's size, else a factor of 2 (the same outputs on even sides)."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x):
        _CALLS.append(tuple(x.shape))
        forward_size = any(s % 2 != 0 for s in x.shape[-2:])
        h = self.down(x)
        h = F.interpolate(h, size=x.shape[-2:]) if forward_size else F.interpolate(h, scale_factor=2.0)
        return self.up(h) + x


def test_a_decision_equivalent_at_many_sizes_is_checked_on_every_variant_once(tmp_path):
    """A graph traced where the decision goes one way (odd sides) reproduces the model where it
    goes the other way at most probe sizes; every input variant there (a run of the model and of
    the graph each) was tried at each of them: at the first only now, a few variants at the others."""
    torch.manual_seed(0)
    m = _ForwardedUpsampleSize().eval()
    _CALLS.clear()
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(m, (randn(1, 3, 9, 9),), out, input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}))
    assert not r.ranges.get("H") and not r.ranges.get("W"), r.ranges
    assert len(_CALLS) <= 24, len(_CALLS)  # 27 with every variant at each flipped size
    tract_matches_eager(out, m, [[randn(2, 3, 8, 12, seed=1)], [randn(1, 3, 7, 10, seed=2)]])


class _DualPathChunks(torch.nn.Module):
    """torchaudio's SQUIM: a strided convolution encodes the wave (``T // 8 - 1`` frames), the
    frames are padded to a multiple of the chunk by an amount with a modulo of that length, and an
    LSTM runs along them. (SQUIM runs it along each chunk, on a batch of ``B * chunks`` rows, which
    tract 0.23.9 refuses to load: its einsum splits that axis into ``[B, chunks]`` on the
    broadcast weight too.)"""

    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Conv1d(1, 4, 16, stride=8)
        self.rnn = torch.nn.LSTM(4, 4, batch_first=True)

    def forward(self, x):
        h = self.enc(x[:, None])
        rest = 8 - (4 + h.shape[-1] % 8) % 8
        h = F.pad(h, [4, rest + 4])[:, :, :-4]
        out, _ = self.rnn(h.transpose(1, 2))
        return out.reshape(h.shape[0], -1, 8, 4)


def test_chunks_of_encoded_frames_through_an_lstm_replay(tmp_path):
    """The pad's amount has a modulo of ``T // 8 - 1``, which torch's ``Mod`` refuses to evaluate
    below T=8, and the LSTM called whole read its input's item count: the replay failed on each,
    and the shapes fitted from probes gave no form for the pad (refused after 30 s)."""
    torch.manual_seed(0)
    m = _DualPathChunks().eval()
    out = tmp_path / "m.nnef.tgz"
    for check_io in (True, False):
        r = fx2nnef.export(m, (randn(1, 200),), out, input_names=["x"],
                           target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 1: "T"}}))
        assert not any("fitted from probe runs" in n for n in r.notes), r.notes  # the replay gave the shapes
    tract_matches_eager(out, m, [[randn(2, 97, seed=1)], [randn(1, 333, seed=2)]])
