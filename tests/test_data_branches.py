"""Python ``if`` on tensor data with ``branches="select"``, and Python scalars as graph inputs.

Every export is checked in tract by check_io (example and other sizes of the dynamic dim);
the asset is then run in tract on inputs that take each outcome of each decision, at two
sizes, and compared with eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from fx2nnef.errors import InvalidArgumentError, TraceError
from fx2nnef.targets.tolerance import compare_outputs
from fx2nnef.targets.tract_runner import run_tract_many
from harness import randn

DYN = {"x0": {0: "N"}}


def _export(model, inputs, tmp_path, dyn=None, **kw):
    names = [f"x{i}" for i in range(len(inputs))]
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes=DYN if dyn is None else dyn)
    return fx2nnef.export(model, tuple(inputs), tmp_path / "a.nnef.tgz", target=tgt, input_names=names, **kw)


def _run_more(r, model, input_sets, call=None):
    """Run the asset in tract on more inputs and compare with eager (``call`` maps an input set
    to the eager call's arguments when they differ from the asset's inputs)."""
    got = run_tract_many(r.path, [[t.numpy() for t in ins] for ins in input_sets])
    for ins, outs in zip(input_sets, got):
        with torch.no_grad():
            exp = model(*(call(ins) if call else ins))
        exp = [exp] if isinstance(exp, torch.Tensor) else list(exp)
        diffs = compare_outputs(None, [e.numpy() for e in exp], outs, "approximate")
        assert all(d.ok for d in diffs), diffs


def _statuses(r) -> dict:
    return {g.source.line: g.status for g in r.guards if g.kind == "data"}


class TwoIfs(torch.nn.Module):
    """Two decisions in a row: one on a reduction, one on item() compared with a float."""

    def forward(self, x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x.cos() - 1
        if x[0, 0].item() > 0.5:
            y = y + 10
        return y


class Nested(torch.nn.Module):
    """A decision inside one outcome of another, in a submodule, with two outputs."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if (h > 0).any():
            if h.amax() > 1.0:
                out = h.relu() * 3
            else:
                out = h + 1
        else:
            out = h.exp()
        return out, out.sum(-1)


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Nested()

    def forward(self, x):
        a, b = self.inner(x - 0.5)
        return a * 2, b


def _sizes(x, fn):
    """``fn`` applied at two sizes of dim 0: fewer and more rows than the example."""
    return [[fn(x[:2])], [fn(x.repeat(2, 1))]]


def test_two_decisions_both_ways(tmp_path):
    model, x = TwoIfs(), randn(3, 4).abs() + 0.6
    r = _export(model, [x], tmp_path, branches="select")
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    assert set(_statuses(r).values()) == {"merged"} and len(_statuses(r)) == 2, r.guards
    assert any("branches='select'" in n and "x.sum() > 0" in n for n in r.notes), r.notes
    cases = []
    for fn in (lambda t: t, lambda t: -t, lambda t: t * 0.1, lambda t: -t + 1.0):  # each pair of outcomes
        cases += _sizes(x, fn)
    _run_more(r, model, cases)


def test_nested_decisions_in_submodule(tmp_path):
    model, x = Outer(), randn(4, 4) * 3
    torch.manual_seed(0)
    r = _export(model, [x], tmp_path, branches="select")
    assert r.check.ok, r.check
    assert list(_statuses(r).values()) and set(_statuses(r).values()) == {"merged"}, r.guards
    cases = []
    for fn in (lambda t: t * 3, lambda t: t * 0.01, lambda t: t * 0 - 100):  # amax > 1, amax <= 1, all negative
        cases += _sizes(x, fn)
    _run_more(r, model, cases)


class ShapesDiffer(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if y.mean() > 0:
            return y[:, :2] + 1
        return y - 1


def test_outcomes_of_other_shapes_are_not_merged(tmp_path):
    model, x = ShapesDiffer(), randn(3, 4).abs()
    r = _export(model, [x], tmp_path, branches="select")
    (g,) = [g for g in r.guards if g.kind == "data"]
    assert g.status == "baked" and "not merged" in g.note and "select needs equal shapes" in g.note, g
    assert g.source is not None and g.source.code.strip() == "if y.mean() > 0:"
    _run_more(r, model, [[x[:2] + 1], [x.repeat(2, 1) + 1]])  # the example's outcome still exports right


class BranchFails(torch.nn.Module):
    def forward(self, x):
        if x.min() >= 0:
            return x.sqrt()
        raise ValueError("negative input")


def test_outcome_that_does_not_trace_is_reported(tmp_path):
    r = _export(BranchFails(), [randn(3, 4).abs()], tmp_path, branches="select")
    (g,) = [g for g in r.guards if g.kind == "data"]
    assert g.status == "baked" and "does not trace" in g.note and "negative input" in g.note, g


class ManyIfs(torch.nn.Module):
    def forward(self, x):
        y = x
        for i in range(4):
            if x[i].sum() > 0:
                y = y + i
        return y


def test_more_than_eight_paths_is_a_clear_error(tmp_path):
    with pytest.raises(TraceError, match=r"at most 8 paths(.|\n)*if x\[i\]\.sum\(\) > 0(.|\n)*torch.where"):
        _export(ManyIfs(), [randn(4, 3)], tmp_path, dyn={}, branches="select")


def test_default_keeps_the_example_outcome(tmp_path):
    r = _export(TwoIfs(), [randn(3, 4).abs() + 0.6], tmp_path)
    assert set(_statuses(r).values()) == {"baked"}, r.guards
    with pytest.raises(InvalidArgumentError, match="branches"):
        _export(TwoIfs(), [randn(3, 4)], tmp_path, branches="both")


class Checked(torch.nn.Module):
    def forward(self, x):
        torch._assert(x.abs().sum() >= 0, "never negative")  # an assertion on data: not a branch to explore
        if x.mean() > 0:
            return x + 1
        return x - 1


def test_assertions_are_not_flipped(tmp_path):
    model, x = Checked(), randn(3, 4).abs()
    r = _export(model, [x], tmp_path, branches="select")
    assert "merged" in _statuses(r).values()
    _run_more(r, model, _sizes(x, lambda t: -t))


# scalars_as_inputs ------------------------------------------------------------------------------
class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, scale, shift=0, *, power=2.0):
        return self.lin(x) * scale + shift, (x.abs() ** power).sum(-1) + shift


def _scalar_call(ins):
    x, scale, shift, power = ins
    return (x, float(scale), int(shift)), {"power": float(power)}


def test_scalars_become_rank0_inputs(tmp_path):
    model, x = Scaled(), randn(3, 4)
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes={"x": {0: "N"}})
    r = fx2nnef.export(model, (x, 0.5, 3), tmp_path / "a.nnef.tgz", kwargs={"power": 3.0}, target=tgt,
                       scalars_as_inputs=True)
    assert r.check.ok and r.input_names == ["x", "scale", "shift", "power"], r
    assert "scale = tract_core_external(shape = [], datum_type = 'f32')" in r.nnef_text
    assert "shift = tract_core_external(shape = [], datum_type = 'i64')" in r.nnef_text
    others = [[x[:2], torch.tensor(-1.5), torch.tensor(7), torch.tensor(2.0)],
              [x.repeat(2, 1), torch.tensor(4.0), torch.tensor(-2), torch.tensor(1.0)]]
    got = run_tract_many(r.path, [[t.numpy() for t in ins] for ins in others])
    for ins, outs in zip(others, got):
        a, k = _scalar_call(ins)
        with torch.no_grad():
            exp = model(*a, **k)
        diffs = compare_outputs(None, [e.numpy() for e in exp], outs, "approximate")
        assert all(d.ok for d in diffs), diffs


class ScalarBranch(torch.nn.Module):
    def forward(self, ids, offset, temperature):
        logits = (ids + offset).float()
        if temperature > 1.0:  # a decision on an input scalar: data
            return logits / temperature
        return logits * temperature


def test_scalar_decision_merged_with_select(tmp_path):
    ids = torch.arange(6).reshape(2, 3)
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes={"ids": {1: "S"}})
    model = ScalarBranch()
    r = fx2nnef.export(model, (ids, 5, 2.0), tmp_path / "a.nnef.tgz", target=tgt, scalars_as_inputs=True,
                       branches="select")
    assert r.check.ok and [g.status for g in r.guards if g.kind == "data"] == ["merged"], r.guards
    others = [[ids[:, :2], torch.tensor(-3), torch.tensor(0.5)], [ids.repeat(1, 2), torch.tensor(9), torch.tensor(3.0)]]
    got = run_tract_many(r.path, [[t.numpy() for t in ins] for ins in others])
    for (i, o, t), outs in zip(others, got):
        exp = model(i, int(o), float(t))
        assert all(d.ok for d in compare_outputs(None, [exp.numpy()], outs, "approximate"))
    # without select the decision is baked and reported
    r2 = fx2nnef.export(model, (ids, 5, 2.0), tmp_path / "b.nnef.tgz", target=tgt, scalars_as_inputs=True)
    assert [g.status for g in r2.guards if g.kind == "data"] == ["baked"], r2.guards


# piece by piece ---------------------------------------------------------------------------------
class Block(torch.nn.Module):
    def forward(self, h):
        if h.mean() > 0:
            return h * 2
        return h - 1


class TwoBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.block = Block()

    def forward(self, x):
        return self.block(self.lin(x))


def test_report_names_merged_branches():
    """Input sets that take both outcomes: merged, the row is OK and its notes say how."""
    model = TwoBlocks()
    with torch.no_grad():
        shift = model.lin(torch.zeros(1, 4)).mean().item()
    sets = [((randn(3, 4) * 0.01 + 10 - shift,), {}), ((randn(3, 4) * 0.01 - 10 - shift,), {})]
    report = fx2nnef.diagnose(model, inputs=sets, branches="select")
    row = [r for r in report.rows if r.label == "block"][0]
    assert "OK" in row.status.names, row
    assert any("branches='select'" in n and "h.mean() > 0" in n for n in row.notes), row.notes
    assert "merged (both outcomes exported" in report.to_markdown()
    assert "branches='select'" in str(report)
    baked = [r for r in fx2nnef.diagnose(model, inputs=sets).rows if r.label == "block"][0]
    assert "DISC" in baked.status.names, baked


class LoopAfterDecision(torch.nn.Module):
    """A loop (vmap as a scan) after a decision: each outcome records its own loop; a decision
    on data inside a loop body is traced once for every step, so it is not flipped."""

    def forward(self, x):
        if x.mean() > 0:
            x = x * 3
        y = torch.vmap(lambda r: torch.where(r.sum() > 0, r * 2, r - 1))(x)
        if y.amax() > 5:
            y = y / 2
        return y


def test_decisions_around_loops(tmp_path):
    model, x = LoopAfterDecision(), randn(4, 3).abs() + 1
    r = _export(model, [x], tmp_path, branches="select")
    assert r.check.ok and set(_statuses(r).values()) == {"merged"} and len(_statuses(r)) == 2, r.guards
    cases = []
    for fn in (lambda t: t, lambda t: -t, lambda t: t * 0.1, lambda t: -t * 0.1):
        cases += _sizes(x, fn)
    _run_more(r, model, cases)
