"""The values the probes run on. Examples whose items are all equal (ids of zeros, masks of
ones) at a size where a decision flips: the graph and the model agreeing on the probe's values then says nothing (a flip and a
doubling of zeros are both zeros), so other values are tried; when none that the model accepts
differs from the probe's own, the flip bounds the range instead of being taken as equivalent.
And an example's values resized by the probes that take another decision on data than the
trace: values taking the traced one are looked for, since that is no decision on the sizes."""
import torch
import torch.nn as nn

import fx2nnef
from harness import tract_matches_eager


class _StridedPick(nn.Module):
    """Found by the differential fuzzer (seed 7452): a branch on the size of ``z[::3]``."""

    def forward(self, z):
        v = z[::3]
        if v.size(0) > 1:
            return v * 2
        return v.flip(0)


def test_branch_on_a_size_with_an_example_of_zeros(tmp_path):
    model = _StridedPick().eval()
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, (torch.zeros(3, dtype=torch.int64),), out, input_names=["z"], branches="example",
                       target=fx2nnef.TractNNEF(dynamic_axes={"z": {0: "S"}}))
    assert r.check.ok, r.check
    rng = r.ranges["S"]
    assert rng.contains(3) and not rng.contains(4), r.ranges
    tract_matches_eager(out, model, [[torch.arange(s) + 5] for s in (1, 2, 3)])
    # by default the decision is exported both ways: right on both sides of it
    r = fx2nnef.export(model, (torch.zeros(3, dtype=torch.int64),), tmp_path / "both.nnef.tgz", input_names=["z"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"z": {0: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    tract_matches_eager(r.path, model, [[torch.arange(s) + 5] for s in range(1, 9)])


class _MaskedMean(nn.Module):
    """A decision on the length whose branches agree on a mask of ones only."""

    def forward(self, x, mask):
        if x.shape[1] > 4:
            return (x * mask).sum(1) / mask.sum(1)
        return x.mean(1)


def test_branch_with_a_mask_of_ones(tmp_path):
    model = _MaskedMean().eval()
    out = tmp_path / "m.nnef.tgz"
    dyn = {"x": {1: "S"}, "mask": {1: "S"}}
    r = fx2nnef.export(model, (torch.randn(2, 6), torch.ones(2, 6)), out, input_names=["x", "mask"],
                       branches="example", target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok, r.check
    rng = r.ranges["S"]
    assert rng.contains(6) and not rng.contains(4), r.ranges
    mask = torch.ones(2, 9)
    mask[0, 5:] = 0
    tract_matches_eager(out, model, [[torch.randn(2, 9), mask]])
    # by default the decision is exported both ways: right on both sides of it
    r = fx2nnef.export(model, (torch.randn(2, 6), torch.ones(2, 6)), tmp_path / "both.nnef.tgz",
                       input_names=["x", "mask"], target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and not r.ranges, r.ranges
    masks = [torch.ones(2, s) for s in (3, 4, 5, 9)]
    for m in masks:
        m[0, -1] = 0
    tract_matches_eager(r.path, model, [[torch.randn(2, m.shape[1]), m] for m in masks])


class _FastPathOnFullMask(nn.Module):
    """A fast path when no item is padded (``if mask.all()``), as many encoders take: the example
    has padding, and the probes' mask cut to a few columns has none, a decision on data that
    is no decision on the sizes."""

    def forward(self, x, mask):
        if mask.all():
            return x.mean(1)
        return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def test_decision_on_data_flipped_by_the_probes_values(tmp_path):
    model = _FastPathOnFullMask().eval()
    mask = torch.ones(2, 7)
    mask[1, 5:] = 0
    out = tmp_path / "m.nnef.tgz"
    axes = {"x": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    r = fx2nnef.export(model, (torch.randn(2, 7, 4), mask), out, input_names=["x", "mask"],
                       target=fx2nnef.TractNNEF(dynamic_axes=axes))
    assert r.check.ok and not r.ranges, r.ranges
    other = torch.ones(3, 9)
    other[0, 2:] = 0
    tract_matches_eager(out, model, [[torch.randn(3, 9, 4), other], [torch.randn(1, 3, 4), torch.tensor([[1.0, 0, 1]])]])
