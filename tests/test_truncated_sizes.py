"""Sizes computed with a true division and int() (``int((S - 127) / 64 + 1)``, how Moonshine and
other audio encoders compute their output lengths): the fake replay writes them as floor
divisions, exact while the truncated number is not negative, and that condition bounds the
range where it would not hold. Each export is checked in tract by the export itself, then run
again in tract at other sizes of its range and compared with eager."""
import torch
import torch.nn as nn

import fx2nnef
from harness import randn, tract_matches_eager


def _export(model, inputs, tmp_path, axes, names):
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, tuple(inputs), out, input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=axes))
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    return out, r


class _ConvLengths(nn.Module):
    """Three strided convs, and the mask cut to their output length computed as Moonshine does."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv1d(1, 4, 9, stride=4), nn.Conv1d(4, 4, 7, stride=3), nn.Conv1d(4, 4, 3, stride=2)

    def forward(self, x, mask):
        h = self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x[:, None])))))
        n = int((mask.shape[-1] - 9) / 4 + 1)
        n = int((n - 7) / 3 + 1)
        n = int((n - 3) / 2 + 1)
        m = mask[..., ::24][..., :n]
        return h * m[:, None, :]


def test_conv_output_lengths_from_int_of_true_division(tmp_path):
    torch.manual_seed(0)
    model = _ConvLengths().eval()
    axes = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    out, r = _export(model, [randn(2, 300), torch.ones(2, 300)], tmp_path, axes, ["x", "mask"])
    # the smallest length the convs accept: 9 + 4 * (6 + 3 * 2) = 57
    assert r.ranges["S"].lo == 57 and r.ranges["S"].hi is None, r.ranges
    sizes = (57, 58, 81, 100, 157, 421)
    tract_matches_eager(out, model, [[randn(1, s, seed=s), (randn(1, s, seed=s + 1) > 0).float()] for s in sizes])


class _Truncated(nn.Module):
    """int() of a number that is negative for short inputs: below S = 9 it rounds toward zero,
    where a floor division would not; the model accepts those sizes."""

    def forward(self, x):
        n = int((x.shape[1] - 9) / 4) + 3
        m = int(x.shape[1] / 2 + 0.5)
        return x[:, :n] * 2, x[:, :m].sum(1)


def test_truncation_of_a_negative_number_bounds_the_range(tmp_path):
    model = _Truncated().eval()
    out, r = _export(model, [randn(2, 30)], tmp_path, {"x": {0: "B", 1: "S"}}, ["x"])
    assert r.ranges["S"].lo == 9 and r.ranges["S"].hi is None, r.ranges
    tract_matches_eager(out, model, [[randn(3, s, seed=s)] for s in (9, 10, 12, 13, 31, 64)])
