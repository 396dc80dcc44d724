"""Sizes cut to a constant (``x[:, :8]`` has ``min(S, 8)`` items, ``x[:, -8:]`` too) and read as
numbers (an ``arange`` of them, a product by them, a decision on them exported both ways). torch's
symbolic shapes decide such a slice on the example's side of the bend, so these sizes are fitted
from probe runs, as ``min(p, c)`` or ``max(p, c)`` once probes on both sides of the bend and next
to it agree. Each export is checked in tract by the export itself, then run again in tract on
both sides of the bend and compared with eager. Last, a padding to a multiple of 8 fitted the same
way."""
import math

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import FnModule, tract_matches_eager


def _arange_of_cut(x):
    v = x[:, :, :8]
    return v + torch.arange(v.shape[2])


def _product_by_last_items(x):
    v = x[:, :, -8:]
    return v * v.shape[2]


def _decision_on_cut(x):
    v = x[:, :, :8]
    if v.shape[2] >= 7:
        return v.roll(1, 1)
    return v.abs()


def _cut_then_padded(x):
    """Cut to 8, then padded to at least 3: ``max(min(S, 8), 3)`` items."""
    v = x[:, :, :8]
    v = torch.nn.functional.pad(v, (0, max(0, 3 - v.shape[2])))
    return v * v.shape[2]


def _jump(x):
    """Not a clamp: S items below 7, 8 from 7 on (at S=7 a clamp would give 7)."""
    n = x.shape[-1]
    m = n if n < 7 else 8
    return x.sum(-1) * m + torch.arange(m).sum()


def _last_items_written(x):
    """fuzz seed 28844: the last 8 items, one of them written in place (a write into ``x`` too):
    the region ``x[:, :, -8:]`` is ``S - max(0, S-8)`` items where the value written there has
    ``min(8, S)``, equal at every size."""
    x = x.clone()
    v = x[:, :, -8:]
    v[:, 1:, -1] = v[:, 1:, -1] * 2
    return v * v.shape[2], x


def _ellipsis_cut(x):
    """``x[..., :8]``: the Ellipsis stands for the axes before the last; clamped as ``x[:, :, :8]``
    (its range was S <= 8 before, where torch's slice kernel decides)."""
    v = x[..., :8]
    return v * v.shape[-1]


def _ellipsis_last_items(x):
    return x[..., -8:].cumsum(-1)


@pytest.mark.parametrize("fn", [_arange_of_cut, _product_by_last_items, _decision_on_cut, _cut_then_padded, _jump,
                                _last_items_written, _ellipsis_cut, _ellipsis_last_items],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("example", [6, 12])
def test_a_size_cut_to_a_constant_read_as_a_number(tmp_path, fn, example):
    model = FnModule(fn)
    r = fx2nnef.export(model, (torch.randn(1, 2, example),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "S"}}))
    assert r.check.ok
    sizes = [s for s in range(1, 14) if all(rng.contains(s) for rng in r.ranges.values())]
    assert {example, 7, 8, 9} <= set(sizes), r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(1, 2, s)] for s in sizes])


class _LastItemsUnfolded(torch.nn.Module):
    """Fuzz seed 25074: the last 6 items (``min(6,S)``, fitted from probes), flipped or not by a
    decision on another cut exported both ways, then windows of 3 (a reshape to ``min(6,S)``
    items, read from memory). tract measures the slice as ``S - begin`` and could not tell ``S - max(0,S-6)`` was
    ``min(6,S)``: the asset did not load."""

    def forward(self, x):
        v1 = x[:, :max(1, x.shape[1] // 2)]
        v2 = x[:, -6:]
        v3 = v2.flip(1) if v1.shape[1] >= 2 else v2 + 1
        return v3.contiguous().as_strided((2, v3.shape[1] - 2, 3), (v3.shape[1], 1, 1)), v3


@pytest.mark.parametrize("check_io", [True, False])
def test_a_reshape_to_a_fitted_count_of_last_items(tmp_path, check_io):
    model = _LastItemsUnfolded()
    x = torch.randint(1, 7, (2, 4), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {1: "S"}}))
    sizes = [s for s in range(1, 14) if all(rng.contains(s) for rng in r.ranges.values())]
    assert {4, 6, 7, 9, 13} <= set(sizes), r.ranges
    tract_matches_eager(r.path, model, [[torch.randint(1, 7, (2, s))] for s in sizes])


class _PaddedToMultiple(torch.nn.Module):
    """Fuzz seeds 25278 and 25487: padding to a multiple of 8 or 2 (``ceil(S/8)*8 - S`` items,
    read as a number by ``pad``) beside a ceil-mode pooling whose shapes the fake replay cannot
    give: the padding is fitted from probe runs as ``8*floor((S+7)/8) - S`` (``S - 2*floor(S/2)``),
    once no other form fits them all."""

    def __init__(self, m: int):
        super().__init__()
        self.m = m

    def forward(self, x):
        v1 = F.avg_pool1d(x, 3, stride=3, padding=1, ceil_mode=True)
        v1[v1 > 0.5] = 1.9
        v3 = F.pad(x, (0, math.ceil(x.shape[2] / self.m) * self.m - x.shape[2]), value=1.5)
        return v3, v1


@pytest.mark.parametrize("m", [8, 2])
@pytest.mark.parametrize("check_io", [True, False])
def test_a_padding_to_a_multiple_fitted_from_probes(tmp_path, check_io, m):
    model = _PaddedToMultiple(m)
    r = fx2nnef.export(model, (torch.randn(1, 2, 9),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {2: "S"}}))
    sizes = [s for s in range(1, 41) if all(rng.contains(s) for rng in r.ranges.values())]
    assert {9, 16, 17, 23, 40} <= set(sizes), r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(1, 2, s)] for s in sizes])
