"""More odd Python in forwards (battery 9): sizes returned among structured outputs, scatter means,
masked_select with a constant mask, masks whose count follows the data, fractional interpolation
scales, torch.tensor of numbers computed from sizes, grid_sample with reflection padding. Each
is exported with dynamic axes, checked in tract by the export itself, then run again in tract at
other sizes and compared with eager."""
import typing

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import UnsupportedOpError
from harness import FnModule, randn, tract_matches_eager, export_checked


_export = export_checked


class _Enc(typing.NamedTuple):
    tokens: torch.Tensor
    pos: torch.Tensor


def test_sizes_returned_among_structured_outputs_are_left_out(tmp_path):
    """A forward taking a NamedTuple and returning a dict with a list, a tuple holding None and
    ``h.shape[1]`` (a dynamic size): the size is a plain number in the model's outputs, so it is
    no output of the asset either (it was one, and the outputs no longer paired up)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pe = nn.Embedding(20, 8), nn.Embedding(32, 8)

        def forward(self, enc: _Enc):
            h = self.emb(enc.tokens) + self.pe(enc.pos)
            return {"layers": [h, h.tanh()], "pooled": (h.mean(1), None), "n": h.shape[1], "shape": h.shape}

    def inputs(s, seed):
        tokens = torch.randint(0, 20, (2, s), generator=torch.Generator().manual_seed(seed))
        return tokens, torch.arange(s)[None].expand(2, -1) + seed

    model = M().eval()
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, (_Enc(*inputs(5, 1)),), out,
                       target=fx2nnef.TractNNEF(dynamic_axes={"enc_0": {1: "S"}, "enc_1": {1: "S"}}))
    assert r.check.ok and len(r.output_names) == 3, (r.output_names, r.check)
    from fx2nnef.targets.tract_runner import run_tract_many
    for s in (3, 9):
        t, p = inputs(s, s)
        got = run_tract_many(out, [[t.numpy(), p.numpy()]])[0]
        want = model(_Enc(t, p))
        for g, w in zip(got, [*want["layers"], want["pooled"][0]]):
            assert g.shape == tuple(w.shape) and abs(g - w.detach().numpy()).max() < 1e-4


def test_scatter_reduce_mean(tmp_path):
    """scatter_reduce(reduce='mean') with and without the input's own items, along a dynamic axis
    of the sources: a 'sum' scatter over a count scatter; positions written to by nothing keep
    their item."""
    def f(x, idx):
        a = torch.zeros(x.shape[0], 5).scatter_reduce(1, idx, x, reduce="mean", include_self=False)
        b = torch.full((x.shape[0], 5), 2.0).scatter_reduce(1, idx, x, reduce="mean")
        c = (x * 3).scatter_reduce(1, idx[:, :3] % 3, x[:, :3], reduce="mean", include_self=False)
        return a, b, c

    idx = torch.tensor([[0, 1, 1, 3, 0, 1, 3], [2, 2, 0, 1, 3, 0, 2]])
    model = FnModule(f)
    out = _export(model, [randn(2, 7), idx], tmp_path, {"x": {1: "S"}, "idx": {1: "S"}}, ["x", "idx"])
    tract_matches_eager(out, model, [[randn(2, s, seed=s), torch.randint(0, 5, (2, s), generator=torch.Generator().manual_seed(s))]
                                     for s in (4, 12)])


def test_scatter_reduce_mean_of_integers_is_refused(tmp_path):
    def f(x, idx):
        return torch.zeros(2, 5, dtype=torch.long).scatter_reduce(1, idx, x, reduce="mean")

    with pytest.raises(UnsupportedOpError, match="rounds the mean of integers down"):
        fx2nnef.export(FnModule(f), (torch.arange(8).view(2, 4), torch.tensor([[0, 1, 1, 4], [2, 2, 0, 3]])),
                       tmp_path / "m.nnef.tgz")


def test_masked_select_with_a_constant_mask(tmp_path):
    """masked_select with a buffer mask: over the trailing axes with a dynamic batch in front, and
    a mask with a unit axis repeated over a static size; the count of items is known."""
    def f(self, x, y):
        a = x.masked_select(self.keep)                       # [B, 6] by [6]: B * 3 items
        b = torch.masked_select(y, self.grid)                # [B, 4, 3] by [4, 1]: B * 2 * 3 items
        return a * 2, b.sum(), x[:, self.keep].flip(-1)

    model = FnModule(f, keep=torch.tensor([True, False, True, True, False, False]),
                     grid=torch.tensor([[True], [False], [False], [True]]))
    out = _export(model, [randn(3, 6), randn(3, 4, 3, seed=1)], tmp_path, {"x": {0: "B"}, "y": {0: "B"}}, ["x", "y"])
    tract_matches_eager(out, model, [[randn(b, 6, seed=b), randn(b, 4, 3, seed=b + 1)] for b in (1, 5)])


def test_count_following_the_data_under_dynamic_axes(tmp_path):
    """``x[x > 0]`` then ``.numel()`` with a dynamic axis: the count is a symbol of its own, its
    value read from the mask (it was refused; see tests/test_data_sizes.py)."""
    def f(x):
        pos = x[x > 0]
        return pos.sum() / pos.numel()

    model = FnModule(f)
    out = _export(model, [randn(3, 7)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(3, s, seed=s)] for s in (2, 9, 20)])


def test_interpolate_with_scale_factors_that_round_as_fractions(tmp_path):
    """``floor(H * 0.6)`` is ``(3 * H) // 5`` at every size (checked), as ``floor(W * 1.25)`` is
    ``(5 * W) // 4``; the sizes at multiples of 5 are where a wrong rounding would show."""
    def f(x):
        a = F.interpolate(x, scale_factor=0.6, mode="bilinear", align_corners=False)
        b = F.interpolate(x, scale_factor=(0.6, 1.25), mode="bilinear", recompute_scale_factor=True)
        c = F.interpolate(x, scale_factor=0.6, mode="nearest")
        return a, b, c

    model = FnModule(f)
    out = _export(model, [randn(1, 2, 8, 12)], tmp_path, {"x": {2: "H", 3: "W"}}, ["x"])
    tract_matches_eager(out, model, [[randn(1, 2, h, w, seed=h)] for h, w in ((10, 5), (15, 7), (25, 16))])


def test_interpolate_with_a_scale_factor_of_no_exact_fraction_is_refused(tmp_path):
    """``floor(90 * 0.7)`` is 62 in floating point, not 63: no integer formula of H gives torch's size."""
    with pytest.raises(UnsupportedOpError, match="scale factor 0.7"):
        fx2nnef.export(FnModule(lambda x: F.interpolate(x, scale_factor=0.7, mode="bilinear")),
                       (randn(1, 2, 8, 12),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "H", 3: "W"}}))


def test_tensor_of_numbers_computed_from_sizes(tmp_path):
    """``torch.tensor([2.0 / (W - 1), 2.0 / (H - 1)])`` (an optical-flow warp's pixel-to-grid
    scale) and ``new_tensor`` of a size and a float of sizes."""
    def f(img, flow):
        B, _, H, W = img.shape
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, W), indexing="ij")
        scale = torch.tensor([2.0 / (W - 1), 2.0 / (H - 1)])
        grid = torch.stack([xs, ys], -1)[None] + flow.permute(0, 2, 3, 1) * scale
        warped = F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=True)
        return warped, img.new_tensor([H, W / H]) * img.mean()

    model = FnModule(f)
    out = _export(model, [randn(2, 3, 8, 10), randn(2, 2, 8, 10, seed=1) * 2], tmp_path,
                  {"img": {2: "H", 3: "W"}, "flow": {2: "H", 3: "W"}}, ["img", "flow"])
    tract_matches_eager(out, model, [[randn(2, 3, h, w, seed=h), randn(2, 2, h, w, seed=w) * 2]
                                     for h, w in ((11, 7), (5, 16))])


@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_with_reflection_padding(tmp_path, align_corners):
    """Points up to three widths outside the input, mirrored back as torch's reflect_coordinates
    (about the edges, or the pixel centres with align_corners), bilinear and nearest, over a
    dynamic H and W."""
    def f(x, grid):
        return (F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=align_corners),
                F.grid_sample(x, grid * 0.9, mode="nearest", padding_mode="reflection", align_corners=align_corners))

    model = FnModule(f)
    grid = torch.rand(2, 5, 7, 2, generator=torch.Generator().manual_seed(0)) * 8 - 4
    out = _export(model, [randn(2, 3, 6, 9), grid], tmp_path, {"x": {2: "H", 3: "W"}}, ["x", "grid"])
    tract_matches_eager(out, model, [[randn(2, 3, h, w, seed=h), grid.flip(1)] for h, w in ((4, 11), (13, 5))])


def test_sizes_truncated_from_a_fractional_scale(tmp_path):
    """``int(S * 0.3)`` and ``math.floor(S * 0.6)`` slice lengths: exact floor divisions
    (``(3 * S) // 10``); ``int`` of a float size was fitted from probe runs, and the fit was wrong
    at S=20 (a slice of 5 where the model takes 6)."""
    import math

    def f(x):
        S = x.shape[1]
        return x[:, -int(S * 0.3):] * 2, x[:, :math.floor(S * 0.6)].sum(1), x[:, :math.ceil(S * 0.75)]

    model = FnModule(f)
    out = _export(model, [randn(2, 11)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(2, s, seed=s)] for s in (10, 20, 23, 40, 57)])


def test_a_floor_division_fitted_from_probe_runs_is_checked_at_farther_sizes(tmp_path):
    """``int((S - 10) * 0.3) + 5`` has no exact form (a truncation of what may be negative): its
    size is fitted from probe runs, whose sizes (S = 10..33) ``(2*S + 1) // 7 + 2`` fits too;
    exported so, the slice was one short at S = 20, 27, 30, ... More sizes farther apart find
    ``(3*S + 20) // 10``."""
    def f(x):
        return x[:, :int((x.shape[1] - 10) * 0.3) + 5] * 2

    model = FnModule(f)
    out = _export(model, [randn(2, 11)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(2, s, seed=s)] for s in (20, 27, 30, 34, 61)])


class _ViewOrReshape(nn.Module):
    """``try: t.view(...) except RuntimeError:`` around a transpose: the view fails at the example
    and works where the transposed axis has one item (S=1), where the model takes the other path."""

    def forward(self, x):
        t = x.transpose(1, 2)
        try:
            return t.view(t.shape[0], -1)
        except RuntimeError:
            return t.reshape(t.shape[0], -1) + 1


class _OnLayout(nn.Module):
    """A branch on ``is_contiguous()``: a transpose is contiguous when the moved axis has one item."""

    def forward(self, x):
        t = x.transpose(1, 2)
        return t * 2 if t.is_contiguous() else t + 1


class _LayoutNoMatter(nn.Module):
    """``contiguous()`` only when needed: the same values either way."""

    def forward(self, x):
        t = x.transpose(1, 2)
        if not t.is_contiguous():
            t = t.contiguous()
        return t.reshape(t.shape[0], -1) * 3


@pytest.mark.parametrize("model", [_ViewOrReshape, _OnLayout], ids=["caught_failure", "is_contiguous"])
def test_decision_on_the_layout_at_one_size_is_traced_there(model, tmp_path):
    """Whether a view fails, or a tensor is contiguous, follows the sizes: the decision is a shape
    guard that differs at S=1 only, never silently exported with the example's branch there. It
    has no comparison of sizes to force, so the forward is traced at S=1 too and selected there."""
    m = model()
    r = fx2nnef.export(m, (randn(2, 5, 4),), tmp_path / "a.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    assert any("S=1 takes other code" in n for n in r.notes), r.notes
    assert [g.kind for g in r.guards][0] == "shape" and r.guards[0].status in ("merged", "checked"), r.guards
    tract_matches_eager(r.path, m, [[randn(2, s, 4, seed=s)] for s in (1, 2, 3, 9)])


@pytest.mark.parametrize("model", [_ViewOrReshape, _OnLayout], ids=["caught_failure", "is_contiguous"])
def test_decision_on_the_layout_bounds_the_range_with_example_branches(model, tmp_path):
    """With ``branches="example"`` the sizes where the decision differs (S=1) are outside the range."""
    m = model()
    r = fx2nnef.export(m, (randn(2, 5, 4),), tmp_path / "a.nnef.tgz", input_names=["x"], branches="example",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.ranges["S"].lo == 2 and r.ranges["S"].hi is None, r.ranges
    assert [g.kind for g in r.guards] == ["shape"] and r.guards[0].status == "bounds", r.guards
    tract_matches_eager(r.path, m, [[randn(2, s, 4, seed=s)] for s in (2, 3, 9)])


def test_decision_on_the_layout_that_changes_nothing_keeps_every_size(tmp_path):
    m = _LayoutNoMatter()
    r = fx2nnef.export(m, (randn(2, 5, 4),), tmp_path / "a.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert not r.ranges, r.ranges
    assert [g.kind for g in r.guards] == ["shape"], r.guards
    tract_matches_eager(r.path, m, [[randn(2, s, 4, seed=s)] for s in (1, 2, 9)])


def test_numpy_scalar_and_range_checks_while_tracing(tmp_path):
    """CTRL scales its embeddings in place by ``np.sqrt(d_model)`` (a numpy float64): torch.fx
    reads such an argument past its own ``isinstance(a, range)``, which must hold while ``range``
    stands for the tracer's (it raised "isinstance() arg 2 must be a type"); the model's own
    range checks too."""
    import numpy as np

    def f(x):
        y = x * 2
        y *= np.sqrt(16)
        assert isinstance(range(3), range) and not isinstance(3, range)
        return y + 1

    model = FnModule(f)
    out = _export(model, [randn(2, 6)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(2, s, seed=s)] for s in (1, 9)])


def test_numpy_numbers_of_static_sizes_as_call_arguments(tmp_path):
    """Perceiver flattens its image with ``torch.reshape(inputs, [batch_size, np.prod(inputs.shape[1:-1]),
    -1])``: the product of the static sizes is a NumPy integer, which torch's calls take as a number
    (the trace failed: "argument of type: <class 'numpy.int64'>"). A NumPy float as a call's
    argument likewise."""
    import numpy as np

    def f(x):
        flat = torch.reshape(x, [x.shape[0], np.prod(x.shape[1:-1]), -1])
        return torch.clamp(flat, min=np.float32(-0.5), max=np.float64(0.75)) * np.int64(3)

    model = FnModule(f)
    out = _export(model, [randn(2, 3, 4, 5)], tmp_path, {"x": {0: "B"}}, ["x"])
    tract_matches_eager(out, model, [[randn(b, 3, 4, 5, seed=b)] for b in (1, 5)])


def _mask_reductions(x):
    m = x > 0
    rows = x.sum(-1) > 0
    return (x[x > 0.2].sum(), x[m].exp().mean(), (x * 2)[m].amax(), x[rows].abs().min(),
            (x[x < 0] * 0.5 + 1).prod(), torch.sum(x[x > 1] ** 2), (x[x.abs() > 0.5] > 1).any(),
            (x[x < 0] < -1).all())


def test_reductions_of_a_mask_selection(tmp_path):
    """``x[m].sum()``, ``x[m].exp().mean()``, a max, a min of a row selection, a product, any and
    all: a whole boolean-mask selection (its length read from data) reduced to one value is the
    reduction of the whole tensor with the reduction's identity where the mask is false (fuzz
    25191 reduced ``v6[v6 > 0.2]``); the selection itself is exported with its count a symbol
    (tests/test_data_sizes.py), here beside a reduction of it."""
    model = FnModule(_mask_reductions)
    out = _export(model, [randn(3, 6)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(3, s, seed=s)] for s in (3, 9, 20)])
    both = FnModule(lambda x: x[x > 0].sum() + x[x > 0])
    out = _export(both, [randn(3, 6)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, both, [[randn(3, s, seed=s)] for s in (3, 9, 20)])


def _reversed_positions(x):
    # CPM-Ant's left-padding mask: the positions counted down from the end, after a prompt of 2
    s = x.size(1)
    pos = torch.tensor(list(range(s - 2))[::-1])[None, :].repeat(x.size(0), 1)
    return x[:, 2:] * pos


def _comprehension(x):
    return x + torch.tensor([i for i in range(x.shape[1])], dtype=torch.float32)


def _every_other(x):
    return x[:, ::2] - torch.as_tensor(list(range(0, x.shape[1], 2)))


@pytest.mark.parametrize("fn", [_reversed_positions, _comprehension, _every_other],
                         ids=["reversed", "comprehension", "stepped"])
def test_a_tensor_of_the_items_of_a_range_of_sizes(fn, tmp_path):
    """``torch.tensor(list(range(S - 2))[::-1])``, of a comprehension over ``range(S)``, or
    ``torch.as_tensor`` of a stepped range: the tensor is ``arange`` of the range's bounds (flipped),
    so its length follows S; it was the example's constant, the export valid at the example only."""
    r = fx2nnef.export(FnModule(fn), (randn(2, 7),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    assert "S" not in r.ranges or r.ranges["S"].hi is None and (r.ranges["S"].lo or 1) <= 2, r.ranges
    tract_matches_eager(r.path, FnModule(fn), [[randn(2, s)] for s in (3, 8, 12)])


def test_a_list_of_numbers_that_is_no_range_stays_a_constant(tmp_path):
    """A list that holds other numbers than a range of the sizes made while tracing stays the
    example's constant."""
    def fn(x):
        n = len(list(range(x.shape[1])))  # a range made, its items not taken
        return x * torch.tensor([3, 1, 2, 5])[:x.shape[1] - n + 4]

    r = fx2nnef.export(FnModule(fn), (randn(2, 4),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert r.check.ok and "arange" not in r.nnef_text, r.nnef_text
