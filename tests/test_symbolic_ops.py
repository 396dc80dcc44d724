"""Ops on a dynamic dim that torch's own symbolic shapes cannot replay as they are (a C++ kernel
reading sizes as ints, a Python float of a size, a decision on S % n): each stays on the one
fake replay (no "fitted from probe runs" note, a few real runs), and the asset is right in tract
at sizes of the dynamic dim other than the example's. Real tract runs."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, tract_matches_eager

_FALLBACK = "dynamic shapes were fitted from probe runs"


def _export(fn, shape, axis, tmp_path, sizes, lo=None):
    """Export ``fn`` of one input with ``axis`` dynamic, check it used the replay, and run the asset
    in tract at ``sizes`` of that axis against eager PyTorch."""
    model = FnModule(fn)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {axis: "S"}}))
    assert r.check.ok
    assert not any(_FALLBACK in n for n in r.notes), r.notes
    assert r.timings["graph_runs"] <= 6 and r.timings["eager_runs"] <= 6, r.timings
    if lo is None:
        assert not r.ranges, r.ranges
    else:
        assert r.ranges["S"].lo == lo and r.ranges["S"].hi is None, r.ranges
    ins = []
    for n in sizes:
        s = list(shape)
        s[axis] = n
        ins.append(torch.randn(s, generator=torch.Generator().manual_seed(n)))
    got = run_tract_many(r.path, [[i.numpy()] for i in ins])
    for i, g in zip(ins, got):
        with torch.no_grad():
            e = model(i).numpy()
        assert g[0].shape == e.shape, (i.shape, g[0].shape, e.shape)
        np.testing.assert_allclose(g[0], e, atol=1e-4, rtol=5e-4, err_msg=str(i.shape))
    return r


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2, mode="nearest"),
                                    dict(scale_factor=2, mode="linear", align_corners=False)],
                         ids=["nearest", "linear"])
def test_interpolate_scale_on_dynamic_axis(kwargs, tmp_path):
    """torch's upsample kernel computes floor(S * scale) with concrete ints and fixes S."""
    _export(lambda x: F.interpolate(x, **kwargs), (1, 3, 8), 2, tmp_path, [5, 13])


def test_interpolate_size_from_dynamic_axis(tmp_path):
    """A size computed from S: torch's C++ interpolate refuses symbolic sizes."""
    _export(lambda x: F.interpolate(x, size=(x.shape[2] * 2,), mode="nearest"), (1, 3, 8), 2, tmp_path, [3, 11])


def test_max_pool1d_on_dynamic_axis(tmp_path):
    """torch's 1-d max pool reads sizes as ints; replayed as a 2-d pool. Odd sizes: floor division."""
    _export(lambda x: F.max_pool1d(x, 3, stride=2), (1, 3, 9), 2, tmp_path, [4, 12, 17], lo=3)


def test_sqrt_of_a_dynamic_size(tmp_path):
    """math.sqrt(S) turns S into a Python float (torch fixes it); replayed as a symbolic sqrt."""
    _export(lambda x: x * math.sqrt(x.shape[1]), (2, 6), 1, tmp_path, [1, 3, 17])


@pytest.mark.parametrize("fn", [
    lambda x: x * math.log(x.shape[1] + 1),  # log-n attention scaling (Qwen)
    lambda x: x / math.log10(x.shape[1] + 2),
    lambda x: x * math.log(x.shape[1], 3),
    lambda x: x * math.exp(x.shape[1] / 8),
    lambda x: x * math.pow(x.shape[1], 0.5) + math.pow(2, x.shape[1] / 4),
], ids=["log", "log10", "log_base", "exp", "pow"])
def test_math_of_a_dynamic_size(tmp_path, fn):
    """torch has a symbolic log2 and powers only: logarithms, exp and math.pow of a size are
    replayed through them (they fixed S and sent the export to probe fitting; math.pow and
    math.log with a base were refused when lowered)."""
    _export(fn, (2, 6), 1, tmp_path, [1, 3, 17])


def test_unbind_on_static_axis_of_dynamic_input(tmp_path):
    _export(lambda x: sum(t * (i + 1) for i, t in enumerate(x.unbind(0))), (3, 5), 1, tmp_path, [2, 9])


def test_baddbmm_with_broadcast_input(tmp_path):
    """torch's baddbmm expands its first input with concrete sizes."""
    bias = torch.randn(1, 1, 1, generator=torch.Generator().manual_seed(3))
    _export(lambda x: torch.baddbmm(bias, x, x.transpose(1, 2), beta=0.5), (2, 5, 4), 1, tmp_path, [2, 9])


def test_split_by_half_of_the_size(tmp_path):
    """split(S // 2) of an odd S has a third piece the graph never reads: not a reason to leave
    the replay. S=1 splits by 0, which torch refuses: the range starts at 2."""
    _export(lambda x: x.split(x.shape[1] // 2, 1)[0] * 2, (2, 6), 1, tmp_path, [5, 7, 10], lo=2)


def test_tensor_split_in_sections(tmp_path):
    """tensor_split(2) of an odd S: the first piece has one more item, (S + 1) // 2."""
    r = _export(lambda x: torch.cat([p * (i + 1) for i, p in enumerate(torch.tensor_split(x, 2, dim=1))], 1),
                (2, 6), 1, tmp_path, [1, 5, 7, 10])
    assert r.timings["graph_runs"] <= 3


def test_tensor_split_at_indices_bounds_where_shapes_change(tmp_path):
    """tensor_split at [1, 3]: the last piece is S - 3 from S=3 only (clamped below): the range
    says so, from the replay and a few runs."""
    r = _export(lambda x: torch.tensor_split(x, [1, 3], dim=1)[2] * 2, (2, 6), 1, tmp_path, [3, 4, 11], lo=3)
    assert "shapes change otherwise below S=3" in str(r.ranges["S"])


def test_clamped_slice_end_holds_on_both_sides(tmp_path):
    """``x[:, :4]`` of S items holds min(4, S) of them (before: bounded at S >= 4)."""
    r = _export(lambda x: x[:, :4] * 2, (2, 6), 1, tmp_path, [1, 3, 4, 5, 12])
    assert "min(4,S)" in r.nnef_text


def _assign_inner(x):
    y = x.clone()
    y[:, 1: x.shape[1] - 1] = x[:, 1: x.shape[1] - 1] * 3
    return y


def test_item_assignment_on_dynamic_slice(tmp_path):
    """``y[:, 1:S-1] = v``: torch's slice copy fixes S; replayed as the shape of y. At S=1 the
    slice is empty, not of size -1: the range starts at 2."""
    _export(_assign_inner, (2, 6), 1, tmp_path, [2, 3, 11], lo=2)


def test_scan_over_dynamic_axis(tmp_path):
    """scan over S steps (a range over a symbol fixes it): replayed as one step, stacked S times."""
    from torch._higher_order_ops.scan import scan

    def fn(x):
        def step(c, xt):
            n = c + xt
            return n, n * 2
        c, ys = scan(step, torch.zeros(x.shape[1]), x)
        return ys + c
    r = _export(fn, (6, 4), 0, tmp_path, [2, 9])
    assert r.nnef_op_counts.get("tract_core_scan") == 1


def _far_export(fn, tmp_path):
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    return fx2nnef.export(FnModule(fn), (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))


def test_slice_end_past_a_dynamic_size(tmp_path):
    """``x[:, 2:100]`` of S items: torch clamps the end (S - 2 items up to S=100, then 98), tract
    refuses an end past the size: the end is written min(100,S), which holds on both sides (before:
    the decision S < 100 bounded the range)."""
    r = _far_export(lambda x: x[:, 2:100] * 2, tmp_path)
    assert r.ranges["S"].lo == 2 and r.ranges["S"].hi is None, r.ranges
    assert "min(100,S)" in r.nnef_text
    got = run_tract_many(r.path, [[np.ones((2, n), np.float32)] for n in (3, 60, 99, 150)])
    assert [g[0].shape for g in got] == [(2, 1), (2, 58), (2, 97), (2, 98)]


def test_python_decision_far_above_the_example_bounds_the_range(tmp_path):
    """A branch on a size far above the example (never probed) is not kept for every size."""
    def fn(x):
        return x * 2 if x.shape[1] > 500 else x + 1
    r = _far_export(fn, tmp_path)
    assert r.ranges["S"].hi == 500, r.ranges
    assert "tract_assert S <= 500" in r.nnef_text


def _chunk_sums(x):
    """Pad S up to a multiple of 8 (Mamba-style chunked scans), then sum each chunk."""
    pad = (8 - x.shape[1] % 8) % 8
    y = F.pad(x, (0, 0, 0, pad), value=0.5)
    return y.reshape(x.shape[0], -1, 8, x.shape[2]).sum(2)


@pytest.mark.parametrize("fn", [
    _chunk_sums,
    lambda x: F.pad(x, (1, 2, x.shape[1] // 2, 3)),
    lambda x: F.pad(x.transpose(1, 2), (x.shape[1] // 3, 2 * (x.shape[1] % 4)), mode="replicate"),
    lambda x: F.pad((x * 10).long(), (0, 0, 0, (4 - x.shape[1] % 4) % 4), value=7),
], ids=["chunk_multiple", "both_sides", "replicate", "int64"])
def test_pad_by_a_dynamic_amount(fn, tmp_path):
    """F.pad by amounts computed from S (tract's pad takes static amounts: a tiled fill or edge
    is concatenated); the modulo of a negated size has an IR form whose divisions read
    non-negative numbers."""
    _export(fn, (2, 10, 4), 1, tmp_path, [1, 2, 3, 7, 8, 9, 16, 17, 23])


def test_pad_that_may_crop_is_refused_with_the_size(tmp_path):
    """``F.pad(x, (0, 16 - S))`` pads up to S=16 and crops beyond: no tract form; the error
    names the amount and the first size where it is negative."""
    model = FnModule(lambda x: F.pad(x, (0, 0, 0, 16 - x.shape[1])))
    with pytest.raises(fx2nnef.UnsupportedOpError, match=r"F\.pad by 16 - S would crop .* at S=17,"):
        fx2nnef.export(model, (torch.randn(2, 10, 4),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert not list(tmp_path.iterdir())


def test_slice_from_the_end_by_a_dynamic_size(tmp_path):
    """``y[..., -S:]`` after a causal conv's left pad (Qwen3-Next / Olmo-hybrid conv1d): the start
    -S counts from the end at every size; tract read it as a position before 0 (a slice of
    2S + 3 items in its shape inference, an invalid range at run time)."""
    def fn(x):
        return F.pad(x, (3, 0)).cumsum(-1)[..., -x.shape[-1]:]
    _export(fn, (2, 4, 9), 2, tmp_path, [1, 5, 20])


def _both_sides_export(fn, shape, tmp_path, sizes, lo=None):
    """Export ``fn`` with axis 1 dynamic; the range must start at ``lo`` and have no end, and the
    asset match eager PyTorch in tract at ``sizes``, on both sides of where torch clamps a bound."""
    model = FnModule(fn)
    r = fx2nnef.export(model, (torch.randn(shape),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    got = r.ranges.get("S")
    assert (got.lo if got else None) == lo and (got is None or got.hi is None), r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(shape[0], n, *shape[2:], generator=torch.Generator().manual_seed(n))]
                                        for n in sizes])
    return r


def test_slice_clamped_at_the_example_holds_on_both_sides(tmp_path):
    """``x[:, -12:]`` of S=7 items: torch clamps the start to 0 up to S=12 (min(S, 12) items,
    XLNet's memory slice), and takes the last 12 past it: the start is written max(S-12,0), which
    holds at every size (before: bounded at S <= 12; before that refused, and before that a start
    of S - 12, which tract refused at run time for S < 12, the example included)."""
    r = _both_sides_export(lambda x: x[:, -12:] * 2, (2, 7, 3), tmp_path, [1, 5, 12, 13, 30])
    assert "max(0,S-12)" in r.nnef_text or "max(S-12,0)" in r.nnef_text


def test_slice_end_past_the_example_holds_past_the_end(tmp_path):
    """``x[:, 8:12]`` of S=10 items holds S - 8 of them up to S=12 and 4 past it: the export holds
    for S >= 8 (before: 8 <= S <= 12), with the end at min(12,S)."""
    _both_sides_export(lambda x: x[:, 8:12] * 2, (2, 10, 3), tmp_path, [9, 12, 13, 40], lo=8)


def test_a_loop_over_chunks_holds_where_it_runs_as_many_steps(tmp_path):
    """A Python loop over chunks of 4 of S=10 items: range() reads S as a Python number; the
    decision is how many steps the loop runs (3 for 9 <= S <= 12; at S=8 the third chunk, min(12,S) - 8
    items, is empty and the outputs are still the model's). Before, the graph traced again at S=13
    was refused, and before that its chunk had no tract slice."""
    def chunks(x):
        return torch.cat([x[:, i:i + 4].softmax(1) for i in range(0, x.shape[1], 4)], 1)
    model = FnModule(chunks)
    r = fx2nnef.export(model, (torch.randn(2, 10, 3),), tmp_path / "m.nnef.tgz",
                       input_names=["x"], target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert (r.ranges["S"].lo, r.ranges["S"].hi) == (8, 12), r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(2, n, 3)] for n in (8, 9, 10, 12)])


@pytest.mark.parametrize("size", [
    pytest.param(lambda s: math.ceil(s / 4) * 4, id="ceil_of_true_division"),
    pytest.param(lambda s: math.floor(s / 4) * 4 + 4, id="floor_of_true_division"),
    pytest.param(lambda s: math.ceil(s * 0.25) * 4, id="ceil_of_product_by_a_quarter"),
])
def test_rounded_division_of_a_size_is_a_floor_division(tmp_path, size):
    """``math.ceil(S / 4)`` (padding to a multiple of 4) is the exact ``(S + 3) // 4`` for every S
    (before: refused, the fake replay had no form for ``CeilToInt(IntTrueDiv(S, 4))``)."""
    def fn(x):
        return F.pad(x, (0, 0, 0, size(x.shape[1]) - x.shape[1])) * 2
    _export(fn, (2, 7, 3), 1, tmp_path, [1, 4, 5, 8, 13])


def test_slice_from_the_start_past_the_example_holds_on_both_sides(tmp_path):
    """``x[:, :9]`` of S=5 items holds S of them up to S=9 and 9 past it: not a full slice (the
    slice cleanup dropped it, claiming every size: 11 items at S=11); min(9,S) items at every size
    (before: bounded at S <= 9)."""
    _both_sides_export(lambda x: x[:, :9] * 2, (2, 5, 3), tmp_path, [1, 5, 9, 11])




def _pooled(x):
    return F.avg_pool1d(torch.cat([x, x], -1), 3, 3, ceil_mode=True)  # (2*S + 2) // 3 items


@pytest.mark.parametrize("fn", [
    # the size as a 0-d tensor, compared: a squeeze of the one-item range tract did not prove one item
    lambda x: torch.where(torch.tensor(_pooled(x).shape[-1]) > 4, x.cumsum(-1), x),
    # the size as a number broadcast over the input, and a max of two sizes
    lambda x: x * _pooled(x).shape[-1] + max(_pooled(x).shape[-1], x.shape[-1] // 2),
], ids=["0d_tensor", "number"])
def test_a_size_with_a_floor_division_used_as_a_value(tmp_path, fn):
    """A size holding a floor division, (2*S + 2) // 3, used as a value: tract 0.23.9 simplified
    its one-item range ``(E, E+1)`` to another length and refused the asset at load; the value is
    now the shape of the range ``(0, E)``. Right at sizes on both sides of each multiple of 3."""
    _export(fn, (1, 2, 8), 2, tmp_path, [2, 3, 4, 5, 7, 13])


def test_a_resize_of_a_ceil_mode_pooling_loads_in_tract(tmp_path):
    """The output size of a resize by 1.5 of a ceil-mode pooling, ``(3*(S/2) + 1)/2``, read as a
    value by the resize: tract's load hung when that value was computed from S with integer ops
    (fuzz 15301); it loads and is right on both sides of each multiple of 2."""
    model = FnModule(lambda x: F.interpolate(F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
                                             scale_factor=1.5, mode="bilinear", align_corners=True))
    x = torch.randn(1, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "S", 3: "T"}}, timeout=120))
    assert r.check.ok
    tract_matches_eager(r.path, model, [[torch.randn(1, 3, s, t, generator=torch.Generator().manual_seed(s))]
                                        for s, t in ((3, 7), (6, 2), (9, 10))])


class _OverlappingWindows(torch.nn.Module):
    """DeepSeek V4's compressor: S // 4 windows of 4 items, each window also given the one
    before it. The slice ``1:`` of the windows has ``max(S/4 - 1, 0)`` items, the value written
    there (``[:-1]``) ``S/4 - 1``: equal wherever S >= 4, which the emitter has to see to write one
    into the other."""

    def forward(self, x):
        n = x.shape[1] // 4
        w = x[:, :n * 4].view(x.shape[0], n, 4, -1)
        out = w.new_zeros(x.shape[0], n, 8, w.shape[-1])
        out[:, :, 4:] = w
        if n > 1:
            out[:, 1:, :4] = w[:, :-1]
        return out.softmax(2).sum(2)


def test_an_extremum_of_a_floor_division_settled_by_the_range(tmp_path):
    model = _OverlappingWindows()
    r = fx2nnef.export(model, (torch.randn(2, 14, 3),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.ranges["S"].lo == 4 and r.ranges["S"].hi is None, r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(2, s, 3)] for s in (4, 7, 8, 9, 14, 31)])


def test_bounds_of_floor_division_and_extremum_atoms():
    from fx2nnef.ir.dims import SymDim, SymRange, settle_extrema
    s = SymDim.symbol("S")
    quarter = SymDim.floordiv(s, 4)
    clamped = SymDim.extremum(max, quarter - 1, 0)
    assert settle_extrema(clamped, {"S": SymRange("S", 4, None)}) == quarter - 1
    assert settle_extrema(clamped, {"S": SymRange("S", 3, None)}) == clamped  # S=3: max(-1, 0) is 0
    assert settle_extrema(clamped, {"S": SymRange("S", 1, 7)}) == 0  # (S/4) - 1 <= 0 there
    capped = SymDim.extremum(min, SymDim.floordiv(s + 1, 2), 10)
    assert settle_extrema(capped, {"S": SymRange("S", None, 19)}) == SymDim.floordiv(s + 1, 2)
    assert settle_extrema(capped, {"S": SymRange("S", 19, None)}) == 10
    assert settle_extrema(capped, {}) == capped


def test_a_remainder_form_is_fitted_only_when_no_other_fits_the_samples():
    from fx2nnef.ir.dims import fit_remainder
    pad = [({"S": n}, math.ceil(n / 8) * 8 - n) for n in (3, 5, 6, 7, 9, 12, 13, 27)]
    assert fit_remainder(pad, ["S"]) is None  # 8*floor((S+5)/7) - S fits these too
    more = pad + [({"S": n}, math.ceil(n / 8) * 8 - n) for n in (16, 30, 33)]
    form = fit_remainder(more, ["S"])
    assert all(form.evaluate({"S": n}) == math.ceil(n / 8) * 8 - n for n in range(1, 200)), form
