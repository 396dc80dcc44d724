"""Sizes that come from data (issue 43, class 5): ``masked_select``, ``x[mask]`` and ``nonzero``
with a mask computed from the inputs give as many items as the mask has true ones. The export names that
count with a symbol of its own (``tract_onnx_non_zero(mask, count_symbol = ...)``), the ops after
it carry the symbol, and one asset runs in tract on inputs whose counts differ, 0 among them."""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from harness import FnModule, randn, tract_matches_eager


def _signs(*shape, seed: int, negative: bool = False) -> torch.Tensor:
    x = randn(*shape, seed=seed)
    return -x.abs() - 0.1 if negative else x


CASES = {
    # name: (fn, example shapes, dynamic axes, whether a count of 0 is part of the check)
    "masked_select": (lambda x: x.masked_select(x > 0) * 2, [(3, 4)], {}, True),
    "mask_rows": (lambda x: x[x[:, 0] > 0] * 3 + 1, [(5, 4)], {}, True),
    "mask_columns": (lambda x: x[:, x[0] > 0].exp(), [(4, 6)], {}, True),
    "sum_of_selected": (lambda x: x.masked_select(x > 0).sum(), [(3, 4)], {}, True),
    "regrouped": (lambda x: x[x[:, 0] > 0].reshape(-1, 2, 2).sum(1), [(5, 4)], {}, True),
    "two_counts": (lambda x, y: torch.cat([x[x > 0], 2 * y[y > 0]]), [(5,), (3,)], {}, True),
    # the count read as a number: its value, computed from the mask (never the example's)
    "mean_by_numel": (lambda x: (lambda p: p.sum() / p.numel())(x[x > 0]), [(3, 4)], {}, False),
    "times_its_count": (lambda x: (lambda p: p * p.shape[0])(x[x > 0]), [(3, 4)], {}, True),
    "viewed_by_count": (lambda x: (lambda p: p.view(p.shape[0], 1) * x[0])(x[x[:, 0] > 0][:, 0]), [(4, 3)], {},
                        True),
    # nonzero and its spellings (onnx-diagnostic's AtenNonZero): the coordinates themselves
    "nonzero": (lambda x: torch.nonzero(x > 0), [(3, 4)], {}, True),
    "nonzero_of_numbers": (lambda x: torch.nonzero(torch.relu(x - 0.5) * 3), [(3, 4)], {}, True),
    "where_one_argument": (lambda x: torch.where(x > 0)[1] + 1, [(3, 4)], {}, True),
    "index_by_coordinates": (lambda x: x[(x > 0).nonzero(as_tuple=True)] * 3, [(3, 4)], {}, True),
    "rows_by_coordinates": (lambda x: x[(x[:, 0] > 0).nonzero()[:, 0]].exp(), [(4, 3)], {}, True),
    "mean_of_coordinates": (lambda x: torch.argwhere(x < 0).float().mean(0), [(3, 4)], {}, False),
    "dynamic_nonzero": (lambda x: torch.nonzero(x > 0) * 2, [(3, 4)], {"x0": {0: "B"}}, True),
    "dynamic_rows": (lambda x: x[x[:, 0] > 0] * 3 + 1, [(5, 4)], {"x0": {0: "B"}}, True),
    "dynamic_select": (lambda x: torch.masked_select(x, x > 0).exp(), [(5, 4)], {"x0": {0: "B", 1: "S"}}, True),
}


def _inputs(shapes, seed: int, negative: bool = False, scale: int = 1):
    return [_signs(*(d * scale if k == 0 else d for k, d in enumerate(s)), seed=seed + i, negative=negative)
            for i, s in enumerate(shapes)]


@pytest.mark.parametrize("check_io", [True, False])
@pytest.mark.parametrize("name", list(CASES))
def test_counts_from_data_run_in_tract_at_other_counts(name, check_io, tmp_path):
    fn, shapes, dynamic_axes, zero = CASES[name]
    model = FnModule(fn)
    names = [f"x{i}" for i in range(len(shapes))]
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, tuple(_inputs(shapes, 0)), out, input_names=names,
                   target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes=dynamic_axes))
    graph = _graph_text(out)
    assert "tract_onnx_non_zero" in graph and "extension tract_registry tract_onnx;" in graph
    sets = [_inputs(shapes, seed) for seed in (1, 2, 3)]
    if zero:
        sets.append(_inputs(shapes, 4, negative=True))
    if dynamic_axes:
        sets.append(_inputs(shapes, 5, scale=2))
    counts = {tuple(fn(*ins).shape) for ins in sets}
    assert len(counts) > 1 or name.startswith(("sum_", "mean_"))  # the counts differ (but under a reduction)
    tract_matches_eager(out, model, sets)


def test_a_count_tract_would_read_as_a_number_is_one_clear_error(tmp_path):
    """``torch.arange(n)`` of a count from data: tract's range cannot read it (it knows it as a size
    only); refused naming the line, whether the check runs or not."""
    for check_io in (True, False):
        with pytest.raises(fx2nnef.errors.UnsupportedOpError, match=r"torch.arange at .*test_data_sizes.py:\d+: .*count"):
            fx2nnef.export(FnModule(lambda x: (lambda p: torch.arange(p.shape[0]) + p)(x[x > 0])), (randn(3, 4),),
                           tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(check_io=check_io))


def _branch_on_count(x):
    p = x[x > 0]
    return p * 2 if p.shape[0] > 3 else p


def _loop_over_count(x):
    p = x[x > 0]
    return torch.stack([p[i] for i in range(p.shape[0])])


@pytest.mark.parametrize("fn", [_branch_on_count, _loop_over_count], ids=["branch", "loop"])
def test_a_decision_on_a_count_is_refused_naming_both_lines(fn, tmp_path):
    """A branch or a loop taken in Python on the count holds for the example's data only (the
    asset would silently give the example's branch, or as many items as the example had)."""
    for check_io in (True, False):
        with pytest.raises(fx2nnef.TraceError, match=r"at .*test_data_sizes.py:\d+ after the data-sized 'getitem' "
                                                     r"at .*test_data_sizes.py:\d+ .*decided on the count"):
            fx2nnef.export(FnModule(fn), (randn(3, 4),), tmp_path / "m.nnef.tgz",
                           target=fx2nnef.TractNNEF(check_io=check_io))


def test_nonzero_whose_count_is_read_stays_refused(tmp_path):
    """The tracer lists every coordinate of a nonzero while it records; a size of them read on the
    way was that list's, so the true coordinates are not exported there: one clear error."""
    def f(x):
        idx = torch.nonzero(x > 0)
        return idx.float() * idx.shape[0]

    with pytest.raises(fx2nnef.TraceError, match=r"nonzero/where\(cond\) at .*test_data_sizes.py:\d+ .*reads how many"):
        fx2nnef.export(FnModule(f), (randn(3, 4),), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(check_io=False))


def test_a_data_mask_for_khronos_is_one_clear_error(tmp_path):
    """Standard NNEF has no op that names a count at run time: one line naming the op."""
    with pytest.raises(fx2nnef.errors.UnsupportedOpError, match="masked_select .*cannot carry"):
        fx2nnef.export(FnModule(lambda x: x.masked_select(x > 0)), (randn(3, 4),), tmp_path / "k",
                       target=fx2nnef.KhronosNNEF(check_io=False))


def _graph_text(asset) -> str:
    import tarfile

    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()
