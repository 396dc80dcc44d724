"""Patterns of encoder-decoder models (benchmarks/survey_seq2seq.py), exported with a dynamic batch B,
source length S and target length T and checked in tract at the example and at other sizes."""
from __future__ import annotations

import torch

import fx2nnef
from harness import FnModule, randn, tract_matches_eager
from test_encoders import _chunk  # Longformer's and LED's overlapping chunks


def _export(module, inputs, tmp_path, names, axes):
    r = fx2nnef.export(module, tuple(inputs), tmp_path / "m.nnef.tgz", input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=dict(zip(names, axes))))
    sizes = {label for label, _ in r.check.cases}
    assert r.check.ok and len(sizes) >= 3, sizes  # the example and one size below and one above it
    return r


def test_overlapping_chunks_of_a_single_head_mask(tmp_path):
    """LED's encoder reads its padding mask [B, S] through the chunking of its queries as a tensor of
    one head of width 1 ([B, S, 1, 1] -> [B * 1, S, 1]); before: axes of size 1 sent as_strided to
    constant positions, valid at the example B and S only (the LED row refused "2 <= B <= 2"), now
    windows along the length, for every B and S."""
    def f(m):  # m: [B, S], S a multiple of 4
        x = (m != 0)[:, :, None, None].to(m.dtype) * 3.0 + m[:, :, None, None]
        x = x.transpose(1, 2).reshape(m.size(0), m.size(1), 1)
        return _chunk(x, 2) * 2.0

    m = randn(2, 12)
    m[1, 9:] = 0.0
    r = _export(FnModule(f), [m], tmp_path, ["m"], [{0: "B", 1: "S"}])
    assert str(r.ranges["S"]).startswith("S >= 1, S % 4 == 0"), r.ranges  # torch's view refuses the others


def test_nested_vmap_scanning_a_constant(tmp_path):
    """transformers' vmapped masks (T5Gemma2's bidirectional sliding window with a padding mask) nest
    four vmaps, one of them over ``torch.arange(1)``, a constant made before the loops; before: the
    inner scan read that constant as None when the outer one ran on the example ("'NoneType' object
    has no attribute 'shape'", the T5Gemma2 row), now the constant is read from the traced module."""
    def f(x, m):  # x: [B, S], m: [B, S] with zeros at the end of row 2
        pad = m.bool()

        def inner(b, h, kv):
            return pad[b, kv] & (h >= 0)

        mapped = torch.vmap(torch.vmap(torch.vmap(inner, in_dims=(None, None, 0)), in_dims=(None, 0, None)),
                            in_dims=(0, None, None))
        keep = mapped(torch.arange(x.shape[0]), torch.arange(1), torch.arange(x.shape[1]))
        return torch.where(keep, x[:, None], -x[:, None])

    m = torch.ones(2, 11, dtype=torch.long)
    m[1, 8:] = 0
    _export(FnModule(f), [randn(2, 11), m], tmp_path, ["x", "m"], [{0: "B", 1: "S"}] * 2)


def test_masked_rows_take_one_vector(tmp_path):
    """T5Gemma2's embedding: ``emb[ids == eoi] = eoi_embedding`` writes one vector into every masked
    row; before: refused ("x[mask] = tensor needs a value with one element"), now a select, right at
    every B and S and for any count of masked items."""
    row = randn(8, seed=3)

    def f(ids, emb):  # ids: [B, S] integers, emb: [B, S, 8]
        out = emb * 2.0
        out[ids == 3] = row
        return out

    ids = torch.tensor([[3, 1, 2, 3, 0, 3, 1], [1, 3, 0, 2, 2, 1, 3]])
    _export(FnModule(f), [ids, randn(2, 7, 8)], tmp_path, ["ids", "emb"], [{0: "B", 1: "S"}] * 2)


class _WindowedUnpad(torch.nn.Module):
    """Longformer's and LED's windows: pad the sequence to a multiple of the window, work per
    window, cut the padding off again under ``if pad > 0`` (``[:, :-0]`` would keep nothing)."""

    def __init__(self, window: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.window = window
        self.mix = torch.nn.Linear(8, 8)

    def forward(self, x):
        pad = (self.window - x.shape[1] % self.window) % self.window
        y = torch.nn.functional.pad(x, (0, 0, 0, pad))
        b, n, d = y.shape
        y = self.mix(y.view(b, n // self.window, self.window, d)).softmax(2).view(b, n, d)
        if pad > 0:
            y = y[:, :-pad]
        return y


def test_padding_cut_off_from_the_end_holds_at_every_size(tmp_path):
    """The bound ``-pad`` is written ``S - pad`` with the decision ``-pad < 0`` recorded: at the
    multiples of the window both decisions flip and the graph still gives the model's outputs.
    Before, the graph kept ``-pad`` and held at 9 <= S <= 11 only."""
    model = _WindowedUnpad().eval()
    path = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, (randn(2, 10, 8),), path, input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "S"}}))
    rng = r.ranges.get("S")
    assert r.check.ok and (rng is None or all(rng.contains(n) for n in (1, 4, 8, 12, 13, 40))), r.ranges
    tract_matches_eager(path, model, [[randn(1, n, 8, seed=n)] for n in (8, 12, 13)])
