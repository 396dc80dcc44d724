"""A Python ``if`` on the dynamic sizes exported both ways (the default, ``branches=None``).

The forward is traced again with the decision forced the other way at the example's sizes, and
the outputs of both outcomes are merged with select on the same comparison made of the sizes.
Every export here is checked by check_io in tract (which then also runs on the other side of each
merged decision), then run in tract at every size of a range crossing the decisions and compared
with eager PyTorch. Decisions that cannot be merged keep the bounded range, as before.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import FnModule, tract_matches_eager


def _export(fn, shape, dyn, tmp_path, **kw):
    model = FnModule(fn)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": dyn}), **kw)
    return model, r


def _at_sizes(shape, axis, sizes):
    out = []
    for n in sizes:
        s = list(shape)
        s[axis] = n
        out.append([torch.randn(*s, generator=torch.Generator().manual_seed(n))])
    return out


def _lt(x):
    if x.shape[1] < 7:
        return x.flip(1)
    return x * 2


def _gt_on_batch(x):  # the symbol on the first axis: tract picked the first operand of the select
    if x.shape[0] > 2:
        return x * 3
    return x.cumsum(1)


def _len(x):
    if len(x) > 2:
        return x.flip(0)
    return x - x.mean(0, keepdim=True)


def _numel(x):
    if x.numel() >= 30:
        return x.cumsum(1)
    return torch.tanh(x)


def _parity(x):
    if x.shape[1] % 2 == 0:
        return x.roll(1, 1)
    return x - x.mean(1, keepdim=True)


def _one_item(x):  # prefill and decode: a size of 1 takes its own path
    if x.shape[1] == 1:
        return x * 3
    return x.cumsum(1)


def _ternary(x):
    k = 2 if x.shape[1] > 6 else 3
    return x * k


def _and(x):
    if x.shape[1] > 5 and x.shape[1] < 12:
        return x.abs()
    return x + 1


def _size_in_body(x):
    s = x.shape[1]
    if s > 6:
        return x * s
    return x / s


CASES = [
    ("lt", _lt, (2, 10), 1, range(1, 15)),
    ("gt_on_batch", _gt_on_batch, (3, 5), 0, range(1, 7)),
    ("len", _len, (3, 5), 0, range(1, 7)),
    ("numel", _numel, (3, 12), 1, range(1, 15)),
    ("parity", _parity, (3, 10), 1, range(1, 12)),
    ("one_item", _one_item, (3, 10), 1, range(1, 12)),
    ("ternary", _ternary, (2, 10), 1, range(1, 15)),
    ("and", _and, (2, 8), 1, range(1, 16)),
    ("size_in_body", _size_in_body, (2, 10), 1, range(1, 15)),
]


@pytest.mark.parametrize("name,fn,shape,axis,sizes", CASES, ids=[c[0] for c in CASES])
def test_a_decision_on_sizes_is_exported_both_ways(name, fn, shape, axis, sizes, tmp_path):
    model, r = _export(fn, shape, {axis: "S"}, tmp_path)
    asserted = [l for l in r.nnef_text.splitlines() if "tract_assert" in l]
    # no range: at most the lower bound S >= 1 that lets tract reduce its floor divisions
    assert not r.ranges and all(l.strip() == "extension tract_assert S >= 1;" for l in asserted), (r.ranges, asserted)
    merged = [g for g in r.guards if g.status == "merged"]
    assert merged and all(g.kind == "shape" for g in merged), r.guards
    assert any("exported both ways" in n for n in r.notes), r.notes
    # check_io ran on the other side of the decision too
    example = shape[axis]
    assert len(r.check.cases) >= 3 and r.check.ok, r.check
    tract_matches_eager(r.path, model, _at_sizes(shape, axis, sizes))
    assert any(n != example for n in sizes)


def test_an_elif_chain_is_merged_decision_by_decision(tmp_path):
    """The first trace is bounded by the `if` (S > 8), the merged one by the `elif` (S > 4): merged too."""
    def fn(x):
        if x.shape[1] > 8:
            y = x * 2
        elif x.shape[1] > 4:
            y = x.flip(1)
        else:
            y = -x
        return y + 1
    model, r = _export(fn, (3, 10), {1: "S"}, tmp_path)
    assert not r.ranges
    assert sum(g.status == "merged" for g in r.guards) == 2, r.guards
    tract_matches_eager(r.path, model, _at_sizes((3, 10), 1, range(1, 13)))


def test_two_symbols_each_with_its_decision(tmp_path):
    def fn(x):
        y = x.flip(0) if x.shape[0] > 3 else x * 2
        return y.cumsum(1) if x.shape[1] < 5 else y - 1
    model = FnModule(fn)
    x = torch.randn(5, 8)
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "B", 1: "S"}}))
    assert not r.ranges and r.check.ok
    sets = [[torch.randn(b, s)] for b in (1, 2, 3, 4, 6) for s in (1, 3, 4, 5, 9)]
    tract_matches_eager(r.path, model, sets)


def test_outcomes_of_other_shapes_keep_the_bounded_range(tmp_path):
    """select needs equal shapes: `x[:, :6]` on one side only cannot be merged."""
    def fn(x):
        if x.shape[1] > 6:
            return x[:, :6] * 2
        return x
    model, r = _export(fn, (2, 10), {1: "S"}, tmp_path)
    assert r.ranges["S"].lo is not None and r.ranges["S"].lo >= 6
    assert "tract_assert" in r.nnef_text
    tract_matches_eager(r.path, model, _at_sizes((2, 10), 1, range(7, 14)))


def test_an_outcome_that_fails_at_the_example_keeps_the_bounded_range(tmp_path):
    """The other outcome is traced at the example's sizes: a reshape meant for small sizes fails
    there, so only the example's side is exported, its range asserted."""
    def fn(x):
        if x.shape[1] < 7:
            return x.reshape(2, 3, 2).sum(-1)
        return x[:, :3] * 2
    model, r = _export(fn, (2, 10), {1: "S"}, tmp_path)
    assert r.ranges["S"].lo == 7, r.ranges
    assert any(g.status == "bounds" for g in r.guards), r.guards


def test_branches_example_keeps_the_example_outcome(tmp_path):
    model, r = _export(_lt, (2, 10), {1: "S"}, tmp_path, branches="example")
    assert r.ranges["S"].lo == 7 and "extension tract_assert S >= 7;" in r.nnef_text
    assert not any(g.status == "merged" for g in r.guards)


class _Layer(torch.nn.Module):
    def __init__(self, stride: int = 1):
        super().__init__()
        self.stride = stride

    def forward(self, x):
        y = torch.relu(x) if x.shape[1] > 6 else x * 0.5
        return y[:, ::self.stride] + 1


class _Stack(torch.nn.Module):
    def __init__(self, stride: int = 1):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer(stride) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_the_same_decision_in_every_layer_is_merged_once(tmp_path):
    """Four layers each decide `S > 6` the same way: the site is forced as one (two paths, not
    sixteen), and the layers' own guards are checked by the probes on both sides."""
    model = _Stack()
    r = fx2nnef.export(model, (torch.randn(3, 10),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert not r.ranges and r.check.ok
    tract_matches_eager(r.path, model, _at_sizes((3, 10), 1, range(1, 13)))


def test_the_same_decision_on_other_sizes_in_every_layer_keeps_the_range(tmp_path):
    """Each layer halves S, so its `S > 6` flips at another size (S > 6, 12, 24, 48): forced as one,
    the merged graph differs from the model between those sizes, which the probes see. The range
    stays S >= 49, asserted, and right."""
    model = _Stack(stride=2)
    r = fx2nnef.export(model, (torch.randn(2, 64),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert r.ranges["S"].lo == 49, r.ranges
    tract_matches_eager(r.path, model, _at_sizes((2, 64), 1, [49, 50, 63, 64, 77]))


def test_torch_cond_on_the_first_axis_size(tmp_path):
    """torch.cond on a size is merged with select on sizes (as before); with the symbol on the
    first axis, tract took the first operand at every size until the condition was hidden from
    its folding."""
    from torch._higher_order_ops.cond import cond

    def fn(x):
        return cond(x.shape[0] > 2, lambda t: t * 3, lambda t: t.cumsum(1), (x,))
    model, r = _export(fn, (3, 5), {0: "B"}, tmp_path)
    assert not r.ranges
    tract_matches_eager(r.path, model, _at_sizes((3, 5), 0, range(1, 7)))


def test_a_decision_on_a_computed_size_with_a_static_output(tmp_path):
    """Fuzz 21060: `len(x[:max(1, S // 2)]) > 2` merged, the outputs of static shape [1, 2, 2]: select
    broadcast the condition itself, and tract took the first operand at every size."""
    def fn(x):
        v1 = x[:max(1, x.shape[0] // 2)]
        v2 = v1[v1.shape[0] - 1:]
        if len(v1) > 2:
            return v2.clone()
        return torch.relu(v2)
    model, r = _export(fn, (5, 2, 2), {0: "S"}, tmp_path)
    assert r.check.ok and any(g.status == "merged" for g in r.guards), r.guards
    tract_matches_eager(r.path, model, _at_sizes((5, 2, 2), 0, range(1, 12)))


def test_a_merged_decision_with_a_rank_0_output(tmp_path):
    """Fuzz 22030: the condition hidden from tract's folding is rank 0 like the output; tract
    failed to load the reshape to shape [] that made its runtime zero."""
    def fn(x):
        v1 = x.roll(1, 0) if x.shape[0] != 2 else x - x.mean(0, keepdim=True)
        return torch.all(v1 + len(x)), v1.sum()
    model, r = _export(fn, (3,), {0: "S"}, tmp_path)
    assert not r.ranges and r.check.ok
    tract_matches_eager(r.path, model, _at_sizes((3,), 0, range(1, 7)))


def test_a_merged_decision_before_a_python_loop_over_the_size(tmp_path):
    """Fuzz 21284: the loop over S after the decision is rolled into a scan on each path (the merged
    trace kept no record of the loops, so it stayed unrolled and valid at the example only)."""
    def fn(x):
        x = x * 2 if x.shape[0] != 1 else x
        acc = x[0] * 0
        steps = []
        for i in range(x.shape[0]):
            acc = (acc + x[i]).clamp(-3, 3)
            steps.append(acc)
        return torch.stack(steps, 0)
    model, r = _export(fn, (4, 2), {0: "S"}, tmp_path)
    assert not r.ranges and r.check.ok, r.ranges
    assert any("rolled into a scan" in n for n in r.notes), r.notes
    tract_matches_eager(r.path, model, _at_sizes((4, 2), 0, [1, 2, 3, 5, 8]))


def test_decisions_that_merge_are_merged_beside_one_that_cannot(tmp_path):
    """Fuzz 21200: `S // 2 if S > 1 else 1` items (the fuzz's `max(1, S // 2)`, no decision now)
    cannot be merged (the outcomes differ in shape) and keeps its bound (S >= 2); the `if` after
    it is merged all the same."""
    def fn(x):
        v = x.narrow(1, 0, x.shape[1] // 2 if x.shape[1] > 1 else 1)
        return v.flip(1) if v.shape[1] > 3 else v * 2
    model, r = _export(fn, (2, 10), {1: "S"}, tmp_path)
    assert r.ranges["S"].lo == 2 and r.ranges["S"].hi is None, r.ranges
    assert [g.status for g in r.guards if g.status in ("merged", "bounds")] == ["bounds", "merged"], r.guards
    tract_matches_eager(r.path, model, _at_sizes((2, 10), 1, range(2, 16)))


def test_the_same_comparison_on_several_lines_is_one_decision(tmp_path):
    """`S == 1` tested on four lines (a mask helper and each layer's one-token path, as in
    transformers' Mamba): taken as one decision, two paths rather than sixteen (past the 8 traced);
    each line's own guard is still checked by the probes."""
    def fn(x):
        a = x * 3 if x.shape[1] == 1 else x.cumsum(1)
        b = a - 1 if a.shape[1] == 1 else a.flip(1)
        c = torch.tanh(b) if x.size(1) == 1 else b * 0.5
        return c + 2 if len(c.T) == 1 else c.roll(1, 1)
    model, r = _export(fn, (2, 8), {1: "S"}, tmp_path)
    assert not r.ranges and r.check.ok, r.ranges
    tract_matches_eager(r.path, model, _at_sizes((2, 8), 1, range(1, 11)))


def test_equal_comparisons_of_two_symbols_are_two_decisions(tmp_path):
    """`B > 3` and `S > 3` at B = S = 5 compare the same numbers: taken as one decision first, the
    probes find the merged graph wrong where only one flips, and the export is traced again with
    each its own decision, both merged."""
    def fn(x):
        a = x.flip(0) if x.shape[0] > 3 else x * 2
        return a.cumsum(1) if x.shape[1] > 3 else a - 1
    model = FnModule(fn)
    r = fx2nnef.export(model, (torch.randn(5, 5),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "B", 1: "S"}}))
    assert not r.ranges and [g.status for g in r.guards] == ["merged", "merged"], r.guards
    tract_matches_eager(r.path, model, [[torch.randn(b, s)] for b in (1, 2, 4, 6) for s in (1, 3, 4, 7)])


def test_an_input_all_false_in_the_example_is_given_other_values(tmp_path):
    """Fuzz 23124: `v = y; if S*6 >= 37: v = y.flip(0)`, then `v.masked_fill_(v, False)` clears y on
    one side only, and only where y holds a True. With y all False in the example, the probes' other
    values kept it all False and took the flip as equivalent: the export was wrong past S=6 for
    other y. A constant input is now also given other items, so the decision is seen and merged."""
    def fn(x, y):
        v = y
        if x.numel() >= 37:
            v = y.flip(0)
        v.masked_fill_(v, False)
        return x / x.shape[1], v, y

    model = FnModule(fn)
    x, y = torch.randn(3, 6, 2), torch.zeros(2, dtype=torch.bool)
    r = fx2nnef.export(model, (x, y), tmp_path / "m.nnef.tgz", input_names=["x0", "x1"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert any(g.status == "merged" for g in r.guards), r.guards
    sets = [[torch.randn(3, s, 2), torch.tensor(v)] for s in (2, 6, 7, 13) for v in ([True, False], [True, True])]
    tract_matches_eager(r.path, lambda a, b: model(a, b.clone()), sets)


def test_a_merged_graph_tract_typed_once_sizes_are_asserted_positive(tmp_path):
    """Fuzz 24049: a decision on sizes after a loop rolled into a scan, merged. tract 0.23.9 could
    not type a concat of that graph ("Inconsistent concat": it could not prove ``(T+2)/3`` equal to
    the broadcast of two forms of it) and the export fell back to the example's side; with
    ``T >= 1`` asserted tract reduces the divisions, and the merged graph holds at every size."""
    def fn(x):
        v1 = F.pad(x, (0, math.ceil(x.shape[3] / 3) * 3 - x.shape[3]), value=1.5)
        v3 = F.avg_pool2d(v1, 3, stride=3, padding=0, ceil_mode=True)[0]
        v5 = torch.zeros_like(v3)
        v6 = v3[0] * 0
        for i in range(v3.shape[0]):
            v6 = torch.tanh(v6 * 0.5 + v3[i])
            v5[i] = v6
        return v3.roll(1, 1) if v5.numel() >= 12 else v3.abs()
    model = FnModule(fn)
    x = torch.rand((1, 3, 4, 4), generator=torch.Generator().manual_seed(0)) * 2.9 + 0.1
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {2: "S", 3: "T"}}))
    assert r.check.ok and not r.ranges, r.ranges
    assert "S=3, T=4" in [label for label, _ in r.check.cases]  # the other side of the decision
    assert not any("exported with each decision on the example's side" in n for n in r.notes), r.notes
    assert any(g.status == "merged" for g in r.guards)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nnef.tgz"]
    tract_matches_eager(r.path, model, [[torch.rand(1, 3, s, t) + 0.1] for s, t in [(4, 4), (5, 7), (9, 6)]])


def test_merged_decisions_after_a_rolled_loop_run_in_tract(tmp_path):
    """Fuzz 24087: three decisions on sizes after a loop rolled into a scan, all merged. tract
    0.23.9 failed at run time on the selects and conditions each merge rebuilt ("eval() called on a
    Dummy op"); written once, the merged graph runs, and the export holds at every size."""
    def fn(x):
        v2 = x[0] * 0
        steps = []
        for i in range(x.shape[0]):
            v2 = torch.tanh(v2 * 0.5 + x[i])
            steps.append(v2)
        v1 = torch.stack(steps, 0)
        v3 = torch.tanh(v1) if v1.numel() <= 2 else v1 - v1.mean(1, keepdim=True)
        v4 = v3.cumsum(0) if v3.shape[1] % 2 == 0 else v3.clone()
        v5 = v4.any(0, keepdim=True)
        v6 = v3 * 2 if v4.shape[1] == 1 else v3.abs()
        return (v6 * v5.shape[1]) > 0.06, v3, v4, v6
    model = FnModule(fn)
    x = torch.rand((1, 4), generator=torch.Generator().manual_seed(0)) * 4 - 2
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    assert not any("exported with each decision on the example's side" in n for n in r.notes), r.notes
    tract_matches_eager(r.path, model, _at_sizes((1, 4), 1, [1, 2, 3, 5, 8]))


class _OneStep(torch.nn.Module):
    """A step from a state for one item (``x.squeeze(1)``: its shapes hold at S=1 only, so the
    decision cannot be forced at the example's sizes), a scan of the sequence otherwise."""

    def __init__(self, longer: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.longer = longer

    def forward(self, x, state):
        if x.shape[1] == 1:
            h = self.lin(x.squeeze(1) + state[:, -1])
            new = torch.cat([state, h[:, None]] + ([h[:, None]] * 5 if self.longer else []), 1)
            return h[:, None] * 2, new
        h = self.lin(x).cumsum(1)
        return h, torch.cat([state, h], 1)


def _one_step_export(tmp_path, **kw):
    model = _OneStep(**kw).eval()
    x, state = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    r = fx2nnef.export(model, (x, state), tmp_path / "m.nnef.tgz", input_names=["x", "state"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}, "state": {1: "P"}}))
    return model, r


def test_a_path_taken_at_one_size_only_is_traced_there_and_selected(tmp_path):
    """The other outcome of ``if S == 1`` does not trace at the example's sizes: the forward is
    traced at S=1 as well, run on the inputs cut to one item, and its outputs (the state one
    item longer, padded to P + S) are selected where S == 1. check_io runs at S=1 too."""
    model, r = _one_step_export(tmp_path)
    assert r.check.ok and not r.ranges, r.ranges
    assert any("S=1 takes other code" in n and "selected where S == 1" in n for n in r.notes), r.notes
    assert any(g.status == "merged" and "S=1" in g.note for g in r.graph.guards), r.graph.guards
    assert any(label.startswith("S=1,") for label, _ in r.check.cases), r.check.cases
    sizes = [(1, 3), (1, 7), (1, 1), (2, 2), (4, 1), (9, 6)]
    tract_matches_eager(r.path, model, [[torch.randn(2, s, 8), torch.randn(2, p, 8)] for s, p in sizes])


def test_a_path_at_one_size_with_longer_outputs_keeps_the_range(tmp_path):
    """At S=1 the state grows by 6 items, past the example's P + S: the outputs cannot be merged,
    and the export stays valid for S >= 2, as without the trace at S=1."""
    model, r = _one_step_export(tmp_path, longer=True)
    assert r.ranges["S"].lo == 2, r.ranges
    assert not any("S=1 takes other code" in n for n in r.notes), r.notes
    tract_matches_eager(r.path, model, [[torch.randn(2, s, 8), torch.randn(2, p, 8)] for s, p in [(2, 3), (7, 1)]])


class _AbsOnSmallSizes(torch.nn.Module):
    def forward(self, x, y):
        v = y
        if (x + y).numel() <= 52:
            v = y.abs()
        return v


def test_a_one_item_integer_input_is_given_values_of_both_signs(tmp_path):
    """Fuzz 24603: ``if x.numel() <= 52: v = y.abs()`` with ``y`` one positive integer (11) in the
    example: ``abs(y)`` is ``y`` on every value of that sign, so the flip looked equivalent and the
    export kept ``y`` at every size, silently wrong for a negative ``y`` at small sizes. The probes
    also try inputs of one sign negated: the decision is merged and holds on both sides."""
    model = _AbsOnSmallSizes()
    x = torch.randint(-5, 6, (3, 7, 5), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x, torch.tensor([[[11]]])), tmp_path / "m.nnef.tgz", input_names=["x", "y"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "T", 2: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    assert any(g.status == "merged" for g in r.guards), r.guards
    sets = [[torch.randint(-5, 6, (3, t, s)), torch.tensor([[[v]]])] for s, t, v in
            [(1, 7, -16), (2, 7, -3), (5, 7, -8), (1, 1, -6), (3, 3, 4)]]
    tract_matches_eager(r.path, model, sets)


class _RollOfAThreshold(torch.nn.Module):
    """``v = y > c``, rolled past some size of ``x``: at the example's values of ``y`` (all on
    one side of ``c``) the roll changes nothing."""

    def __init__(self, c: float):
        super().__init__()
        self.register_buffer("c", torch.tensor(c))

    def forward(self, x, y):
        v = y > self.c
        if x.numel() > 36:
            v = v.roll(1, 0)
        return v, x.float().sum(0) + y


@pytest.mark.parametrize("y", [[0.24, -1.16, -1.63, 0.239], [0.6, 1.9, 0.75, 1.2]], ids=["mixed-signs", "positive"])
@pytest.mark.parametrize("check_io", [True, False])
def test_a_branch_equal_on_the_examples_values_only_is_merged(tmp_path, y, check_io):
    """Fuzz 18298 and 18573: every item of the example's ``y`` lies below 0.52 (of both signs)
    or above it (all positive; negated, all below), so ``y > 0.52`` is all of one value on every
    variant the probes drew within the example's range or its mirror, the roll past S=9 looked
    equivalent, and the export kept no roll: wrong for a ``y`` on both sides of 0.52. The probes
    also spread values over twice the example's magnitude: the decision is merged."""
    model = _RollOfAThreshold(0.52)
    x = torch.ones(9, 4, dtype=torch.bool)
    r = fx2nnef.export(model, (x, torch.tensor(y)), tmp_path / "m.nnef.tgz", input_names=["x", "y"],
                       target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "S"}}))
    assert not r.ranges, r.ranges
    assert any(g.status == "merged" for g in r.guards), r.guards
    g = torch.Generator().manual_seed(1)
    sets = [[torch.rand(s, 4, generator=g) < 0.5, torch.rand(4, generator=g) * 4 - 2] for s in (1, 9, 10, 12, 19)]
    sets.append([torch.ones(10, 4, dtype=torch.bool), torch.tensor([1.0, 0.0, 0.0, 0.0])])
    tract_matches_eager(r.path, model, sets)


def _parity_past_a_cut(z):
    """fuzz seed 27204: a decision on S % 2 beside a slice that needs S >= 2."""
    v1 = z[2:, ::3]
    v2 = F.relu(v1) if z.shape[0] % 2 == 0 else v1.roll(1, 0)
    return torch.logaddexp2(v2.clamp(-8, 8), v1), v2


def test_a_merged_parity_decision_wins_over_the_even_sizes(tmp_path):
    """The decision on S % 2 alone holds the even sizes (S >= 1, S % 2 == 0: from 2 on); merged, the
    graph holds every S >= 2 (the slice's own bound). That holds every even size and more: the merged
    graph is kept. Before, its S >= 2 was read as starting above the even sizes' S >= 1, and the
    export kept the even sizes only."""
    model, r = _export(_parity_past_a_cut, (6, 2), {0: "S"}, tmp_path)
    assert r.check.ok
    assert [g.status for g in r.guards] == ["merged"], [str(g) for g in r.guards]
    assert str(r.ranges["S"]).startswith("S >= 2 "), r.ranges
    tract_matches_eager(r.path, model, _at_sizes((6, 2), 0, [3, 4, 5, 7, 8, 11]))


def test_wider_reads_a_range_on_a_step_by_the_sizes_it_holds():
    from fx2nnef.fx_tracer.capture import _wider
    from fx2nnef.ir import SymRange

    even = {"S": SymRange("S", lo=1, step=2, rest=0)}
    assert _wider({"S": SymRange("S", lo=2)}, even)
    assert not _wider(even, {"S": SymRange("S", lo=2)})
    assert not _wider({"S": SymRange("S", lo=3)}, even)  # 2 is even and not in S >= 3
    assert _wider({}, even) and not _wider(even, {})
    assert not _wider({"S": SymRange("S", lo=2, hi=9)}, even)  # 10 is even
    assert _wider({"S": SymRange("S", lo=2, hi=10)}, {"S": SymRange("S", lo=1, hi=11, step=2, rest=0)})
    assert not _wider(even, even)
    far = "a decision on S changes at S=%d, beyond the sizes checked"
    assert _wider({"S": SymRange("S", hi=438620, why=far % 438621)},
                  {"S": SymRange("S", hi=524288, step=2, rest=0, why=far % 524289)})
    assert not _wider({"S": SymRange("S", hi=438620)}, {"S": SymRange("S", hi=524288, step=2, rest=0)})


def _argmax_after_a_rolled_loop(x):
    """fuzz seed 27822: a loop rolled into a scan, then a decision on the size it ran over."""
    v1 = torch.zeros_like(x[0])
    for i in range(x.shape[0]):
        v1 = v1 + x[i] * (i + 1)
    v3 = torch.max(v1, -1)[1]
    v4 = v3
    if x.size(0) > 2:
        v4 = v3 + 1
    return v4


def test_a_decision_after_a_rolled_loop_shares_the_loop(tmp_path):
    """Both outcomes' traces roll the loop, their bodies' nodes named apart (``add_3``, ``add_4``):
    the loop is one scan of the merged graph. Before, the two scans shared the body's nodes, the
    second failed to lower ("value 'add' is used before it is computed") and the export was refused."""
    model, r = _export(_argmax_after_a_rolled_loop, (3, 4, 5), {0: "S"}, tmp_path)
    assert r.check.ok and not r.ranges, r.ranges
    assert [g.status for g in r.guards if "size(0) > 2" in str(g)] == ["merged"], [str(g) for g in r.guards]
    assert r.nnef_text.count("tract_core_scan") == 1, r.nnef_text.count("tract_core_scan")
    tract_matches_eager(r.path, model, _at_sizes((3, 4, 5), 0, [1, 2, 4, 7]))
