"""check_io and ties: the sizes checked above the example repeat its data, so an ordering op over
the dynamic axis (topk, sort, argsort) sees equal items, and torch and tract may rightly pick
different positions among them. Such a case is checked again on distinct values; a difference
that remains there is still reported."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.errors import CheckIOError
from fx2nnef.fx_tracer.capture import Capture, capture, distinct_inputs
from fx2nnef.ir import CheckCase
from fx2nnef.ir.check import outputs_from_indices
from fx2nnef.targets.base import CheckReport, TieRecheck, recheck_ties
from fx2nnef.targets.tolerance import compare_outputs
from fx2nnef.targets.tract_runner import run_tract_many


class TopkDyn(torch.nn.Module):
    def forward(self, x):
        v, i = torch.topk(x, x.shape[1] // 2, dim=1)
        return v, i


class SortDyn(torch.nn.Module):
    def forward(self, x):
        v, i = torch.sort(x, dim=1, descending=True)
        return v, i, torch.argsort(x, dim=1)


class GatherByTopk(torch.nn.Module):
    """A float output computed from topk's positions: it differs too where the positions do."""

    def forward(self, x):
        i = torch.topk(x, x.shape[1] // 2, dim=1).indices
        where = x + torch.arange(x.shape[1], dtype=x.dtype).view(1, -1, 1)  # tied items, other values
        return torch.gather(where, 1, i)


def _export(model, inputs, path, names, outputs, tolerance="approximate"):
    return fx2nnef.export(model, inputs, path, input_names=names, output_names=outputs,
                          target=fx2nnef.TractNNEF(dynamic_axes={n: {1: "S"} for n in names},
                                                   check_io_tolerance=tolerance))


def _rechecked(result, outputs):
    """The labels of the cases checked again on distinct values, after checking that the notes
    name exactly ``outputs`` for them."""
    labels = []
    for label, diffs in result.check.cases:
        noted = [d.name for d in diffs if "only at ties; equal on distinct values" in d.note]
        if noted:
            assert noted == outputs, (label, diffs)
            assert all(d.ok for d in diffs)
            labels.append(label)
    assert len(result.check.notes) == len(labels)
    assert all("checked again at the same sizes on distinct values" in n for n in result.check.notes)
    return labels


def test_topk_over_a_dynamic_axis_passes_and_runs_as_torch_on_distinct_values(tmp_path):
    torch.manual_seed(0)
    result = _export(TopkDyn(), (torch.randn(2, 8, 3),), tmp_path / "a.nnef.tgz", ["x"], ["v", "i"], "exact")
    assert result.check.ok
    # S=11 repeats the example's items: topk's positions differed there (torch picked the later
    # copy) and were checked again on distinct values; the case is reported as such
    assert _rechecked(result, ["i"]) == ["S=11"]
    assert "note: [S=11] i differed only" in str(result)
    # the asset gives torch's values and positions at another size, on distinct values
    for seed, s in ((1, 13), (2, 6)):
        x = torch.randn(2, s, 3, generator=torch.Generator().manual_seed(seed))
        v, i = TopkDyn()(x)
        got = run_tract_many(result.path, [[x.numpy()]], with_transformers=False)[0]
        diffs = compare_outputs(["v", "i"], [v.numpy(), i.numpy()], got, "exact")
        assert all(d.ok for d in diffs), diffs


def test_sort_and_argsort_over_a_dynamic_axis_pass(tmp_path):
    # past 16 items torch's sort is not stable: on the repeated items it picks other positions
    torch.manual_seed(0)
    result = _export(SortDyn(), (torch.randn(2, 24, 3),), tmp_path / "s.nnef.tgz", ["x"], ["v", "i", "a"], "exact")
    assert result.check.ok
    assert len(_rechecked(result, ["i", "a"])) == 1
    x = torch.randn(2, 29, 3, generator=torch.Generator().manual_seed(3))
    got = run_tract_many(result.path, [[x.numpy()]], with_transformers=False)[0]
    want = [t.numpy() for t in SortDyn()(x)]
    assert all(d.ok for d in compare_outputs(["v", "i", "a"], want, got, "exact"))


def test_a_float_output_gathered_at_topk_positions_passes(tmp_path):
    torch.manual_seed(0)
    result = _export(GatherByTopk(), (torch.randn(2, 8, 3),), tmp_path / "g.nnef.tgz", ["x"], ["out"])
    assert result.check.ok
    assert _rechecked(result, ["out"]) == ["S=11"]


def test_outputs_from_indices_follows_the_positions_only():
    class Mixed(torch.nn.Module):
        def forward(self, x):
            v, i = torch.topk(x, 2, dim=1)
            m = x.max(dim=1)
            return v * 2, i + 1, m.values, m.indices, torch.argmax(x, 1), x.sum(1), x.sort(dim=1)[0]

    cap = capture(Mixed(), (torch.randn(2, 5, 3),), {}, target=fx2nnef.TractNNEF(check_io=False))
    assert outputs_from_indices(cap.graph) == [False, True, False, True, True, False, False]


def test_distinct_inputs_perturb_the_grown_copies_of_float_inputs_only():
    ex_x, ex_ids = torch.randn(2, 4), torch.tensor([[1, 2, 3, 4]])
    x = np.concatenate([ex_x.numpy()] * 2 + [ex_x.numpy()[:, :1]], axis=1)  # grown to 9 by repeats
    ids = np.concatenate([ex_ids.numpy()] * 2, axis=1)
    out = distinct_inputs([x, ids], [ex_x, ex_ids], ["x", "ids"], {"x": {1: "S"}, "ids": {1: "T"}})
    assert out is not None and out[0].dtype == x.dtype and out[0].shape == x.shape
    assert np.array_equal(out[0][:, :4], ex_x.numpy())  # the example's own items are kept
    assert len(np.unique(out[0])) == out[0].size  # no two items equal any more
    assert np.allclose(out[0], x, atol=0.5)  # near the repeated data
    assert np.array_equal(out[1], ids)  # integer inputs as they were
    # at the example's sizes or below, nothing was repeated: no distinct case
    assert distinct_inputs([x[:, :4]], [ex_x], ["x"], {"x": {1: "S"}}) is None
    assert distinct_inputs([x[:, :3]], [ex_x], ["x"], {"x": {1: "S"}}) is None
    assert distinct_inputs([ids], [ex_ids], ["ids"], {"ids": {1: "T"}}) is None


# --- a real difference is still reported --------------------------------------------------

def _diffs(expected, got):
    return compare_outputs(["v", "i"], expected, got, "approximate")


def _compare(case, got):
    return _diffs(case.expected, got)


def _failing_report():
    v = np.array([[3.0, 2.0]], dtype=np.float32)
    i = np.array([[4, 1]], dtype=np.int64)
    case = CheckCase("S=6", [np.zeros((1, 6), np.float32)], [v, i])
    report = CheckReport("tract", [("S=6", _diffs(case.expected, [v, np.array([[0, 1]])]))])
    assert not report.ok
    return case, report


def test_a_difference_that_remains_on_distinct_values_is_reported():
    case, report = _failing_report()
    other = CheckCase("S=6", [np.arange(6, dtype=np.float32)[None]], [np.array([[5.0, 4.0]], np.float32),
                                                                          np.array([[5, 4]])])
    runs = []

    def run(sets):
        runs.append(sets)
        return [[np.array([[5.0, 4.0]], np.float32), np.array([[5, 3]])]]  # position 3: no tie there

    ties = TieRecheck([False, True], lambda c: other)
    out = recheck_ties(report, [case], ties, run, _compare)
    assert len(runs) == 1 and not out.ok and not out.notes
    (label, diffs), = out.cases
    assert label == "S=6" and diffs[0].ok and not diffs[1].ok
    assert "expected 4, got 0" in diffs[1].note  # the first failure stands
    assert "checked again on distinct values (ties broken): i differ there too" in diffs[1].note
    # the engine agreeing on distinct values makes the case pass, with a note
    passed = recheck_ties(report, [case], ties, lambda sets: [list(other.expected)], _compare)
    assert passed.ok and passed.notes and "only at ties" in passed.cases[0][1][1].note


def test_no_recheck_for_other_outputs_shapes_or_cases_without_repeats():
    case, report = _failing_report()

    def run(sets):
        raise AssertionError("nothing should run")

    def distinct(c):
        raise AssertionError("no distinct case should be made")

    # the failing output is not computed from picked positions
    assert recheck_ties(report, [case], TieRecheck([True, False], distinct), run, _compare) is report
    # a float output differs too, besides the positions
    both = CheckReport("tract", [("S=6", [report.cases[0][1][1], report.cases[0][1][1]])])
    both.cases[0][1][0] = compare_outputs(["v"], [case.expected[0]], [case.expected[0] + 1], "approximate")[0]
    assert recheck_ties(both, [case], TieRecheck([False, True], distinct), run, _compare) is both
    # a shape difference is no tie
    shape = CheckReport("tract", [("S=6", _diffs(case.expected, [case.expected[0], np.zeros((1, 3), np.int64)]))])
    assert math.isnan(shape.cases[0][1][1].max_abs)
    assert recheck_ties(shape, [case], TieRecheck([False, True], distinct), run, _compare) is shape
    # nothing repeated (the example, or sizes below it): no distinct case, nothing runs
    assert recheck_ties(report, [case], TieRecheck([False, True], lambda c: None), run, _compare) is report


def test_an_export_whose_recheck_still_differs_fails(tmp_path, monkeypatch):
    """The whole path with tract: the model's outputs on the distinct values are made wrong at a
    position that is no tie, and the export must fail with the first difference."""
    real = Capture.distinct_case
    made = []

    def wrong(self, case, stored=()):
        other = real(self, case, stored)
        if other is not None:
            i = other.expected[1].copy()
            i[0, 0, 0] += 1
            other = CheckCase(other.label, other.inputs, [other.expected[0], i])
            made.append(other.label)
        return other

    monkeypatch.setattr(Capture, "distinct_case", wrong)
    torch.manual_seed(0)
    with pytest.raises(CheckIOError) as err:
        _export(TopkDyn(), (torch.randn(2, 8, 3),), tmp_path / "w.nnef.tgz", ["x"], ["v", "i"])
    assert made == ["S=11"]
    text = str(err.value)
    assert "expected 10, got 2" in text  # the first failure, on the repeated inputs
    assert "i differ there too" in text
