"""Structured control flow: torch.cond (select), scan (tract_core_scan), while_loop (bounded scan).

Every export is checked in tract by check_io at the example and at other sizes of each
dynamic dim; a cond is also run on inputs that take the other branch, at two sizes.
"""
from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import fx2nnef
from fx2nnef.errors import TraceError
from harness import FnModule, check_op, randn, tract_matches_eager

DYN0 = {"x0": {0: "N"}}


def _export(model, inputs, tmp_path, dyn=None, **kw):
    names = [f"x{i}" for i in range(len(inputs))]
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes=dyn or {})
    return fx2nnef.export(model, tuple(inputs), tmp_path / "a.nnef.tgz", target=tgt, input_names=names, **kw)


def _sizes_checked(r) -> int:
    return len(r.check.cases)


def _run_more(r, model, input_sets):
    """Run the asset in tract on more inputs (e.g. the other branch) and compare with eager."""
    tract_matches_eager(r.path, model, input_sets)


# cond ------------------------------------------------------------------------------------------
class CondOne(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() + 1, (x,))


class CondMany(torch.nn.Module):
    """Several operands and outputs; the predicate compares two tensors' data."""

    def forward(self, x, y):
        def yes(a, b):
            return a + b, (a * b).sum(0)

        def no(a, b):
            return a - b, b.abs().amax(0)

        s, m = torch.cond(x.mean() > y.mean(), yes, no, (x, y))
        return s * 2, m


class CondNested(torch.nn.Module):
    def forward(self, x):
        def outer_true(t):
            return torch.cond(t.amax() > 1.0, lambda u: u * 3, lambda u: u - 1, (t,))

        return torch.cond(x.sum() > 0, outer_true, lambda t: t.exp(), (x,))


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def big(self, h):
        return torch.relu(self.lin(h))

    def small(self, h):
        return self.lin(h).tanh()

    def forward(self, h):
        return torch.cond(h.norm() > 3.0, self.big, self.small, (h,))


class CondInSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return self.gate(x + 1) * 2


class CondConstantBranch(torch.nn.Module):
    """One branch returns its input unchanged, the other a constant (static shapes)."""

    def forward(self, x):
        m = x.mean(0)
        same = torch.cond(m.sum() > 0, lambda t: t, lambda t: t * -1, (m,))
        const = torch.cond(m.sum() > 0, lambda t: torch.tensor([1.0, 2.0, 3.0, 4.0]), lambda t: t + 1, (m,))
        return same, const


class CondHop(torch.nn.Module):
    """The higher-order op called directly."""

    def forward(self, x):
        return torch.ops.higher_order.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))


@pytest.mark.parametrize("model,inputs,flip", [
    (CondOne(), [randn(5, 4).abs()], lambda xs: [-xs[0]]),
    (CondMany(), [randn(5, 4).abs() + 1, randn(5, 4, seed=1)], lambda xs: [xs[0] - 3, xs[1]]),
    (CondNested(), [randn(5, 4).abs() + 1], lambda xs: [xs[0] / 100]),
    (CondInSubmodule(), [randn(5, 4) + 2], lambda xs: [xs[0] * 0 - 1]),
    (CondHop(), [randn(5, 4).abs()], lambda xs: [-xs[0]]),
], ids=["one", "many", "nested", "submodule", "hop"])
def test_cond_select(model, inputs, flip, tmp_path):
    r = _export(model, inputs, tmp_path, {f"x{i}": {0: "N"} for i in range(len(inputs))})
    assert r.check.ok and _sizes_checked(r) >= 3, r.check
    assert "select" in r.nnef_op_counts
    # the other branch, at two sizes
    other = [flip([t[:3] for t in inputs]), flip([t.repeat(2, 1) for t in inputs])]
    if isinstance(model, CondNested):
        other.append([-inputs[0][:2]])
    _run_more(r, model, other)


@pytest.mark.parametrize("model", [CondOne(), CondInSubmodule()], ids=["one", "submodule"])
def test_cond_khronos(model, tmp_path):
    for sign, sub in ((1, "pos"), (-1, "neg")):
        (tmp_path / sub).mkdir()
        r = check_op(None, [randn(3, 4).abs() * sign + sign], tmp_path / sub, target="khronos", module=model)
        assert r.check.ok and "select" in r.nnef_op_counts


def test_cond_constant_and_identity_branches(tmp_path):
    model = CondConstantBranch()
    x = randn(5, 4).abs()
    r = _export(model, [x], tmp_path, DYN0)
    assert r.check.ok and _sizes_checked(r) >= 3
    _run_more(r, model, [[-x[:3]], [-x.repeat(2, 1)]])


def test_cond_on_sizes_keeps_both_branches(tmp_path):
    """A predicate on sizes (torch.cond's own example, ``x.shape[0] > 4``) is kept in the graph as a
    comparison of size tensors: the export holds at every size, on both sides of the predicate.
    Arithmetic of sizes, a float division and and/or of comparisons are kept too."""
    class OnSizes(torch.nn.Module):
        def forward(self, x):
            y = torch.cond(x.shape[0] > 4, lambda t: t.sin() * 2, lambda t: t.cos() - 1, (x,))
            return torch.cond((x.shape[0] * 2 >= x.shape[1] + 3) | (x.shape[1] / 3 > 2.5),
                              lambda t: t + 1, lambda t: t * 3, (y,))

    model = OnSizes()
    dyn = {"x0": {0: "N", 1: "M"}}
    r = _export(model, [randn(3, 7)], tmp_path, dyn)
    assert r.check.ok and not r.ranges and r.nnef_op_counts.get("select") == 2, (r.ranges, r.nnef_op_counts)
    assert any("both branches exported" in n for n in r.notes)
    # (N, M): each predicate true and false
    _run_more(r, model, [[randn(n, m)] for n, m in ((2, 3), (2, 9), (5, 3), (6, 8), (4, 5), (1, 1))])


def test_cond_on_static_sizes_keeps_one_branch(tmp_path):
    """Without dynamic axes the predicate is a constant: only the branch taken is in the asset."""
    def fn(x):
        return torch.cond(x.shape[0] > 3, lambda t: t.sin(), lambda t: t.cos(), (x,))

    r = check_op(fn, [randn(6, 4)], tmp_path)
    assert r.check.ok and "select" not in r.nnef_op_counts and "cos" not in r.nnef_op_counts, r.nnef_op_counts


def test_cond_on_sizes_with_a_branch_for_other_sizes_is_a_guard(tmp_path):
    """A branch that cannot run at the example's sizes (it reads row 4 of 3) leaves the other
    branch under a guard, decided like a Python ``if`` on sizes: the export holds where it holds."""
    def fn(x):
        return torch.cond(x.shape[0] > 4, lambda t: t[4:5].expand(t.shape), lambda t: t - 1, (x,))

    r = check_op(fn, [randn(3, 4)], tmp_path, dynamic_axes=DYN0)
    assert r.check.ok and "select" not in r.nnef_op_counts
    rng = r.ranges["N"]
    assert rng.lo is None and rng.hi == 4, rng
    assert any("kept as a guard" in n for n in r.notes), r.notes


def test_cond_branches_must_agree():
    """torch itself refuses this eagerly; the tracer (which export runs after eager) says where."""
    from fx2nnef.fx_tracer.tracing.tracer import trace_model

    def fn(x):
        return torch.cond(x.sum() > 0, lambda t: t.sum(0), lambda t: t, (x,))

    with pytest.raises(TraceError, match=r"torch.cond at .*test_control_flow.py:\d+.*shape and dtype"):
        trace_model(FnModule(fn), (randn(3, 4),), {}, ["x0"])


# scan ------------------------------------------------------------------------------------------
class CumScan(torch.nn.Module):
    """One carry, one scanned input, two stacked outputs; the user-facing ``scan`` imported at load."""

    def forward(self, x):
        def step(c, xt):
            n = c + xt
            return n, (n * 2, xt.sum())

        c, (ys, sums) = scan(step, torch.zeros(x.shape[1]), x)
        return c, ys, sums


class ScanMany(torch.nn.Module):
    """Two carries, two scanned inputs along dim 1, reversed, a closure over a parameter."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3, generator=torch.Generator().manual_seed(3)))

    def forward(self, a, b):
        def step(carry, xs):
            h, m = carry
            xa, xb = xs
            h = torch.tanh(xa @ self.w + h * 0.5 + xb)
            m = torch.maximum(m, h)
            return (h, m), h * 2

        init = (torch.zeros(a.shape[0], 3), torch.full((a.shape[0], 3), -10.0))
        (h, m), ys = scan(step, init, (a, b), dim=1, reverse=True)
        return h, m, ys


class ScanHop(torch.nn.Module):
    """``torch.ops.higher_order.scan`` with additional inputs, flat lists, scan along dim 0."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, h0):
        def step(h, xt, bias):
            h2 = torch.relu(self.lin(xt) + h + bias)
            return [h2, h2.sum(-1)]

        h, ys = torch.ops.higher_order.scan(step, [h0], [x], (h0 * 0.1,))
        return h, ys


class CondInScan(torch.nn.Module):
    def forward(self, x):
        def step(c, xt):
            n = torch.cond(xt.sum() > 0, lambda a, b: a + b, lambda a, b: a * 0.5 - b, (c, xt))
            return n, n.clone()

        return scan(step, torch.zeros(x.shape[1]), x)


class ScanOverParameter(torch.nn.Module):
    """The scanned input is a constant (tract needs it made a runtime value)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 3, generator=torch.Generator().manual_seed(5)))

    def forward(self, x):
        def step(c, row):
            n = torch.tanh(c * row + x)
            return n, n.sum()

        return scan(step, x, self.table)


class NestedScan(torch.nn.Module):
    def forward(self, x):
        def outer(c, xt):
            def inner(d, v):
                e = d + v
                return e, e * 2

            d, ys = scan(inner, c, xt)
            return d, ys.sum(0)

        return scan(outer, torch.zeros(x.shape[2]), x)


@pytest.mark.parametrize("model,inputs,dyn", [
    (CondInScan(), [randn(6, 3)], DYN0),
    (ScanOverParameter(), [randn(2, 3)], DYN0),
    (NestedScan(), [randn(4, 5, 3)], {"x0": {0: "A", 1: "B"}}),
    (CumScan(), [randn(6, 4)], DYN0),
    (ScanMany(), [randn(2, 5, 3), randn(2, 5, 3, seed=1)], {"x0": {0: "B", 1: "T"}, "x1": {0: "B", 1: "T"}}),
    (ScanHop(), [randn(6, 4), randn(4, seed=2)], DYN0),
], ids=["cond_in_body", "over_parameter", "nested", "cumsum", "many_reverse_dim1", "hop_additional"])
def test_scan_tract(model, inputs, dyn, tmp_path):
    r = _export(model, inputs, tmp_path, dyn)
    assert r.check.ok and _sizes_checked(r) >= 3, r.check
    assert r.nnef_op_counts.get("tract_core_scan") == 1


@pytest.mark.parametrize("model,inputs", [(CumScan(), [randn(4, 3)]), (NestedScan(), [randn(3, 2, 3)])],
                         ids=["cumsum", "nested"])
def test_scan_khronos_unrolled(model, inputs, tmp_path):
    r = check_op(None, inputs, tmp_path, target="khronos", module=model)
    assert r.check.ok and "concat" in r.nnef_op_counts


def test_scan_khronos_dynamic_refused(tmp_path):
    from fx2nnef.errors import UnsupportedOpError

    tgt = fx2nnef.KhronosNNEF(check_io=False)
    tgt.dynamic_axes = DYN0
    with pytest.raises(UnsupportedOpError, match="dynamic length"):
        fx2nnef.export(CumScan(), (randn(4, 3),), tmp_path / "k", target=tgt, input_names=["x0"])


# while_loop ------------------------------------------------------------------------------------
class CountedWhile(torch.nn.Module):
    """The trip count is a size: ``i < x.size(0)``."""

    def forward(self, x):
        i = torch.zeros((), dtype=torch.int64)
        acc = torch.zeros(x.shape[1])

        def body(i, acc, x):
            return i + 1, acc * 0.9 + x.sum(0) * (i + 1).float(), x.clone()

        i, acc, _ = while_loop(lambda i, acc, x: i < x.size(0), body, (i, acc, x))
        return acc, i


class DataWhile(torch.nn.Module):
    """The trip count depends on the data: halve until below 1."""

    def forward(self, x):
        n = torch.zeros((), dtype=torch.int64)
        x, n = while_loop(lambda x, n: x.abs().amax() >= 1.0, lambda x, n: (x / 2, n + 1), (x, n))
        return x, n


class HopWhile(torch.nn.Module):
    """``torch.ops.higher_order.while_loop`` with an additional (loop-invariant) input."""

    def forward(self, x):
        def cond_fn(i, acc, w):
            return i < acc.size(0)

        def body_fn(i, acc, w):
            return i + 1, torch.tanh(acc * w + 0.1)

        _, acc = torch.ops.higher_order.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x),
                                                   (x.abs() + 0.5,))
        return acc


@pytest.mark.parametrize("model", [CountedWhile(), HopWhile()], ids=["function", "hop_additional"])
def test_while_bounded_by_a_size(model, tmp_path):
    r = _export(model, [randn(5, 3)], tmp_path, DYN0)
    assert r.check.ok and _sizes_checked(r) >= 3, r.check
    assert r.nnef_op_counts.get("tract_core_scan") == 1


def test_while_with_max_iterations(tmp_path):
    model = DataWhile()
    x = randn(3, 4) * 20
    r = _export(model, [x], tmp_path, DYN0, max_loop_iterations=16)
    assert r.check.ok and _sizes_checked(r) >= 3, r.check
    _run_more(r, model, [[x[:2] / 100], [x.repeat(2, 1) * 50]])


def test_while_unbounded_is_refused():
    with pytest.raises(TraceError, match=r"while_loop at .*test_control_flow.py:\d+.*max_loop_iterations"):
        fx2nnef.export(DataWhile(), (randn(3, 4) * 20,), "unused.nnef.tgz", target=fx2nnef.TractNNEF(check_io=False))


def test_while_more_steps_than_allowed():
    with pytest.raises(TraceError, match="more than max_loop_iterations=2"):
        fx2nnef.export(DataWhile(), (randn(3, 4) * 20,), "unused.nnef.tgz", target=fx2nnef.TractNNEF(check_io=False),
                       max_loop_iterations=2)


# reports ---------------------------------------------------------------------------------------
def test_piece_by_piece_names_the_constructs():
    from fx2nnef.piece_by_piece import diagnose

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sub = CondInSubmodule()
            self.cum = CumScan()

        def forward(self, x):
            return self.cum(self.sub(x))[1]

    report = diagnose(Both(), (randn(5, 4),))
    assert report.ok, report.to_text()
    gate = report.row("sub.gate").notes
    assert any("torch.cond at" in n and "select" in n for n in gate), gate
    assert any(n.startswith("scan at") and "tract_core_scan" in n for n in report.row("cum").notes)
    assert any("torch.cond at" in n for n in report.row("sub").notes)


def test_python_loop_that_cannot_roll_points_at_scan(tmp_path):
    """A ``for i in range(S)`` loop that reads a number of its index off any line (``* (i + 1) ** 2``)
    cannot be rolled into a scan (see test_loop_rolling): it is unrolled at the example size, valid there
    only, and the error names the loop and says how to write it; the scan it suggests exports for
    any length."""
    from harness import FnModule

    def loop(x):
        h = torch.zeros(x.shape[0], x.shape[2])
        outs = []
        for i in range(x.shape[1]):
            h = 0.9 * h + x[:, i] * (i + 1) ** 2
            outs.append(h)
        return torch.stack(outs, 1)

    def scanned(x):
        def step(h, xt):
            h = 0.9 * h + xt[:, 1:] * xt[:, :1]
            return h, h.clone()
        steps = (torch.arange(1, x.shape[1] + 1, dtype=x.dtype) ** 2)[None, :, None].expand(x.shape[0], -1, 1)
        return scan(step, torch.zeros(x.shape[0], x.shape[2]), torch.cat([steps, x], 2), dim=1)[1]

    x = torch.randn(2, 7, 4, generator=torch.Generator().manual_seed(0))
    target = fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}})
    with pytest.raises(fx2nnef.GuardError, match=r"(?s)for i in range\(x\.shape\[1\]\).*Python loop over a dynamic size "
                                                 r"\(at .*test_control_flow\.py:\d+\).*torch's scan"):
        fx2nnef.export(FnModule(loop), (x,), tmp_path / "loop.nnef.tgz", input_names=["x"], target=target)
    r = fx2nnef.export(FnModule(scanned), (x,), tmp_path / "scan.nnef.tgz", input_names=["x"], target=target)
    assert r.check.ok and not r.ranges
    longer = torch.randn(2, 30, 4, generator=torch.Generator().manual_seed(1))
    tract_matches_eager(r.path, FnModule(loop), [[longer]])
