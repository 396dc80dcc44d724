"""Sizes the shape analysis fits to probe runs (a size computed in Python with no symbolic form)
are checked at sizes the fit did not use: the symbols moved together, far from the probes, at
random within the range. A fit that holds at the probed sizes only is refused in one line naming
the value and its line, never exported wrong; a fit that is right still exports."""
from __future__ import annotations

import math

import pytest
import torch

import fx2nnef
from harness import randn, tract_matches_eager


def _export(model, example, out, axes, check_io):
    return fx2nnef.export(model, example, out, input_names=list(axes), dynamic_axes=axes,
                          target=fx2nnef.TractNNEF(check_io=check_io))


class _Product(torch.nn.Module):
    """A size H * W // 8 computed through floats (no symbolic form): at the probes (each symbol
    moved alone from 8, and H = W = 9, 10) it is H + W - 8, which a fit takes; at H = W = 12 it is
    18, not 16."""

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        f = int(math.exp(math.log(h) + math.log(w)) + 0.5) // 8
        return x.flatten(1).sum(1, keepdim=True) + torch.arange(f, dtype=x.dtype)


class _Grid(torch.nn.Module):
    """The reproduction of the report: tokens back to a square grid by a rounded root."""

    def forward(self, x):
        t = x.flatten(2).transpose(1, 2)
        n = t.shape[1]
        h = int(n ** 0.5 + 0.5)
        return t.reshape(t.shape[0], h, h, -1)


@pytest.mark.parametrize("check_io", [True, False])
def test_a_fit_wrong_where_symbols_move_together_is_refused_naming_its_line(check_io, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    with pytest.raises(fx2nnef.errors.TraceError,
                       match=r"test_fitted_sizes.py:\d+.*a size fitted to probe runs as H \+ W - 8, which gives \d+ at "
                             r"H=\d+, W=\d+ where the model gives \d+.*keep those axes static.*one symbol") as info:
        _export(_Product(), (randn(2, 3, 8, 8),), out, {"x": {2: "H", 3: "W"}}, check_io)
    assert "\n" not in str(info.value)
    assert not out.exists()


@pytest.mark.parametrize("check_io", [True, False])
def test_the_reported_square_grid_is_refused_or_right(check_io, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    try:
        _export(_Grid(), (randn(2, 3, 8, 8),), out, {"x": {0: "B", 2: "H", 3: "W"}}, check_io)
    except fx2nnef.errors.Fx2NnefError:
        assert not out.exists()
        return
    tract_matches_eager(out, _Grid(), [[randn(b, 3, h, w, seed=h)] for b, h, w in ((1, 12, 12), (2, 16, 16), (1, 32, 8))])


class _Affine(torch.nn.Module):
    """A size 2 * H + W computed through floats: no symbolic form, but the fit is right everywhere."""

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        f = int(math.exp(math.log(h) + math.log(2)) + 0.5) + w
        return x.flatten(1).sum(1, keepdim=True) + torch.arange(f, dtype=x.dtype)


@pytest.mark.parametrize("check_io", [True, False])
def test_a_right_fit_still_exports_and_checks(check_io, tmp_path):
    """With B dynamic too, the flatten's 3*H*W items are fitted wrong at the joint sizes: no op reads
    that size (tract infers it), so the export stands; the arange's 2*H + W is fitted right."""
    out = tmp_path / "m.nnef.tgz"
    r = _export(_Affine(), (randn(2, 3, 8, 8),), out, {"x": {0: "B", 2: "H", 3: "W"}}, check_io)
    assert any("fitted" in n for n in r.notes), r.notes  # the fitted path, checked at the joint sizes
    assert "2*H+W" in r.nnef_text.replace(" ", "")
    tract_matches_eager(out, _Affine(), [[randn(b, 3, h, w, seed=h)]
                                         for b, h, w in ((2, 12, 12), (1, 20, 13), (3, 5, 31), (4, 8, 8))])
