"""Control flow and data-dependent code, the leftovers of issue 9: numbers read from tensor data,
shape expressions through tensors, a mean over a dynamic axis in a scan body, while loops for
standard NNEF, Python decisions inside loop bodies, max_loop_iterations through diagnose and the
CLI, the report's notes on each construct, and a few odd models mixing them.

Every export is checked in tract (check_io at the example and at other sizes of each dynamic dim,
and ``_run_more`` on more inputs: other sizes, other outcomes of each decision).
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import fx2nnef
from fx2nnef.errors import InvalidArgumentError, TraceError
from fx2nnef.targets.khronos_runner import run_khronos_many
from fx2nnef.targets.tolerance import compare_outputs
from fx2nnef.fx_tracer.tracing.control_flow import run_eagerly
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, randn

from test_control_flow import HopWhile

DYN0 = {"x0": {0: "N"}}


def _export(model, inputs, tmp_path, dyn=None, **kw):
    names = [f"x{i}" for i in range(len(inputs))]
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes=dyn or {})
    model = model if isinstance(model, torch.nn.Module) else FnModule(model)
    return fx2nnef.export(model, tuple(inputs), tmp_path / "a.nnef.tgz", target=tgt, input_names=names, **kw)


def _khronos(model, inputs, tmp_path, **kw):
    tgt = fx2nnef.KhronosNNEF(check_io=True)
    names = [f"x{i}" for i in range(len(inputs))]
    return fx2nnef.export(model, tuple(inputs), tmp_path / "k", target=tgt, input_names=names, **kw)


def _compare(model, input_sets, got):
    for ins, outs in zip(input_sets, got):
        with torch.no_grad():  # torch refuses a Python decision in a loop body: run the loops as Python
            exp = run_eagerly(lambda: model(*ins))
        exp = [exp] if isinstance(exp, torch.Tensor) else list(exp)
        diffs = compare_outputs(None, [e.numpy() for e in exp], outs, "approximate")
        assert all(d.ok for d in diffs), diffs


def _run_more(r, model, input_sets):
    """Run a tract asset on more inputs (other sizes, other outcomes) and compare with eager."""
    _compare(model, input_sets, run_tract_many(r.path, [[t.numpy() for t in ins] for ins in input_sets]))


def _khronos_more(r, model, input_sets):
    """Run a Khronos asset in the nnef_tools interpreter on more inputs and compare with eager."""
    _compare(model, input_sets, run_khronos_many(r.path, [[t.numpy() for t in ins] for ins in input_sets]))


# numbers read from tensor data ---------------------------------------------------------------------
@pytest.mark.parametrize("fn,n,what", [
    (lambda x, n: x[: int(n) + 1:1], torch.tensor(1), r"slice bound or index (.|\n)*read with int\(\)"),
    (lambda x, n: x * float(n), torch.tensor(2.5), r"constant argument of mul\(\) (.|\n)*read with float\(\)"),
    (lambda x, n: x - n.item(), torch.tensor(0.5), r"constant argument of sub\(\) (.|\n)*read with item\(\)"),
    (lambda x, n: x.reshape(int(n), -1), torch.tensor(2), r"reshape\(\) size (.|\n)*read with int\(\)"),
    (lambda x, n: torch.zeros(int(n), 3) + x[:1], torch.tensor(2), r"a constant tensor at (.|\n)*read with int\(\)"),
    (lambda x, n: x + torch.tensor(n.tolist()), torch.tensor([1.0, 2.0, 3.0]),
     r"a constant tensor at (.|\n)*read with tolist\(\)"),
], ids=["int_arith", "float_mul", "item_float", "int_reshape", "int_factory", "tolist"])
def test_number_from_data_in_the_graph_is_refused(fn, n, what, tmp_path):
    """The number would be baked: refused with the line it lands on and the line it was read at."""
    with pytest.raises(TraceError, match=what + r".*test_control_flow_more.py:\d+(.|\n)*Keep the number a tensor"):
        _export(fn, [randn(4, 3), n], tmp_path)


@pytest.mark.parametrize("fn", [lambda x, n: x[: int(n)], lambda x, n: x[: n.__index__()]], ids=["int", "index"])
def test_number_read_as_a_slice_bound_is_traced(fn, tmp_path):
    """``x[:int(n)]``: the bound is the number the graph reads (see test_data_bounds.py)."""
    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)
    _run_more(r, FnModule(fn), [[randn(4, 3, seed=1), torch.tensor(3)], [randn(4, 3), torch.tensor(0)]])


def test_number_read_in_another_function_is_found(tmp_path):
    """int() on one line, the slice on another (in a helper): the bound is still the number read."""
    def head(x, k):
        return x[:k] * 2

    def fn(x, n):
        k = int(n)
        return head(x, k)

    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)
    _run_more(r, FnModule(fn), [[randn(4, 3, seed=1), torch.tensor(4)], [randn(4, 3), torch.tensor(1)]])


def test_number_that_decides_is_a_noted_guard(tmp_path):
    """range(int(n)) unrolls a data count, `if int(n) == 2` decides: baked guards whose note says so."""
    def fn(x, n):
        y = x * 2
        for i in range(int(n)):
            y = y + x[i]
        return y

    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)
    baked = [g for g in r.guards if g.kind == "data"]
    assert len(baked) == 1 and baked[0].status == "baked" and "changes the ops" in baked[0].note, r.guards


def test_number_that_does_not_reach_the_graph_is_left_alone(tmp_path):
    def fn(x, n):
        if int(n) < 100:  # the same outcome for the example and the changed number
            return x * 2
        return x

    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)
    assert r.check.ok and all("changes" not in g.note for g in r.guards), r.guards


# shape expressions through tensors -----------------------------------------------------------------
@pytest.mark.parametrize("fn,dyn,other", [
    (lambda x: x[:, : torch.tensor(x.shape[1]) // 2] * 2, {"x0": {1: "M"}}, [randn(4, 9), randn(4, 2)]),
    (lambda x: x.reshape(torch.tensor(x.shape[0]) * 2, -1), {"x0": {0: "N"}}, [randn(2, 6), randn(7, 6)]),
    (lambda x: x.narrow(1, 0, torch.tensor(x.size(1)) - 1), {"x0": {1: "M"}}, [randn(4, 9), randn(4, 3)]),
], ids=["slice_floordiv", "reshape_mul", "narrow_minus"])
def test_bound_from_a_shape_tensor_exports(fn, dyn, other, tmp_path):
    """``torch.tensor(x.shape[1]) // 2`` is a shape expression: the bound stays symbolic."""
    r = _export(fn, [randn(4, 6)], tmp_path, dyn)
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    _run_more(r, FnModule(fn), [[t] for t in other])


def test_int_of_a_shape_tensor_says_what_to_do(tmp_path):
    """int() of such a tensor is a plain number (Python makes it one): the guard says how to keep it symbolic."""
    from fx2nnef.errors import GuardError

    with pytest.raises(GuardError, match=r"int\(\) of a tensor computed from sizes is a plain number; compute with "
                                         r"the sizes themselves .* at .*test_control_flow_more.py:\d+"):
        _export(lambda x: x[:, : int(torch.tensor(x.shape[1]) // 2)], [randn(4, 6)], tmp_path, {"x0": {1: "M"}})


# a mean over a dynamic axis in a scan body ------------------------------------------------------------
def _mean_of_carry(x):
    def step(c, xt):
        n = c * 0.5 + xt
        return n - n.mean(0, keepdim=True), n.mean()
    return scan(step, x[0], x.transpose(0, 1).contiguous(), dim=1)


def _var_of_carry(x):
    def step(c, xt):
        n = c * 0.5 + xt
        return (n - n.mean()) / (n.var() + 1).sqrt(), n.std(0)
    return scan(step, x[0], x.transpose(0, 1).contiguous(), dim=1)


def _layer_norm_carry(x):
    def step(c, xt):
        n = torch.nn.functional.layer_norm(c + xt, c.shape[-1:])
        return n * 2.0, n.amax(-1)
    return scan(step, x[0], x)


@pytest.mark.parametrize("fn", [_mean_of_carry, _var_of_carry, _layer_norm_carry], ids=["mean", "var", "layer_norm"])
def test_scan_mean_over_a_dynamic_axis_of_a_carry(fn, tmp_path):
    """tract 0.23.9 refused these assets ("inconsistent fact ... 🬳 N"): the body now divides by recip(N)."""
    x = randn(5, 4)
    r = _export(fn, [x], tmp_path, {"x0": {1: "N"}})
    assert r.check.ok and len(r.check.cases) >= 3 and r.nnef_op_counts.get("tract_core_scan") == 1, r.check
    _run_more(r, FnModule(fn), [[randn(5, 9, seed=1)], [randn(5, 2, seed=2)]])


# while loops for standard NNEF ----------------------------------------------------------------------
class CountedWhile(torch.nn.Module):
    """An int64 counter bounded by a size, read as a float in the body."""

    def forward(self, x):
        def body(i, acc, x):
            return i + 1, acc * 0.9 + x.sum(0) * (i + 1).float(), x.clone()

        i, acc, _ = while_loop(lambda i, acc, x: i < x.size(0), body,
                               (torch.zeros((), dtype=torch.int64), torch.zeros(x.shape[1]), x))
        return acc, i


class ConstantWhile(torch.nn.Module):
    """A constant trip count (``i < 3``): no size bounds it and no max_loop_iterations is needed."""

    def forward(self, x):
        def body(i, acc):
            return i + 1, acc * 0.5 + (i + 1).float()

        return while_loop(lambda i, acc: i < 3, body, (torch.zeros((), dtype=torch.int64), x))[1]


class FloatCounterWhile(torch.nn.Module):
    """Halve until below 1, counting in a float: the trip count follows the data."""

    def forward(self, x):
        return while_loop(lambda x, n: x.abs().amax() >= 1.0, lambda x, n: (x / 2, n + 1), (x, torch.zeros(())))


class IntCounterWhile(torch.nn.Module):
    def forward(self, x):
        n = torch.zeros((), dtype=torch.int64)
        return while_loop(lambda x, n: x.abs().amax() >= 1.0, lambda x, n: (x / 2, n + 1), (x, n))


@pytest.mark.parametrize("model,x", [(CountedWhile(), randn(5, 3)), (ConstantWhile(), randn(5, 3)),
                                     (HopWhile(), randn(5, 3))], ids=["counted_by_size", "constant_count", "hop"])
def test_while_with_an_int_counter_khronos(model, x, tmp_path):
    """Unrolled while tracing: the counter's values are constants, no integer op is left."""
    r = _khronos(model, [x], tmp_path)
    assert r.check.ok and any("while_loop at" in n and "unrolled" in n for n in r.notes), r.notes
    _khronos_more(r, model, [[x * -3]])


def test_while_on_data_khronos(tmp_path):
    model, x = FloatCounterWhile(), randn(3, 4) * 20
    r = _khronos(model, [x], tmp_path, max_loop_iterations=12)
    assert r.check.ok and "select" in r.nnef_op_counts
    _khronos_more(r, model, [[x / 100], [x * 50]])  # 0 and more steps than the example
    with pytest.raises(TraceError, match=r"while_loop at .*test_control_flow_more.py:\d+ ends on a condition "
                                         r"computed from tensor data(.|\n)*max_loop_iterations"):
        _khronos(model, [x], tmp_path / "again")


def test_while_int_counter_on_data_khronos_is_refused(tmp_path):
    with pytest.raises(TraceError, match=r"while_loop at .*test_control_flow_more.py:\d+ carries an integer tensor "
                                         r"(.|\n)*no integer arithmetic(.|\n)*float"):
        _khronos(IntCounterWhile(), [randn(3, 4) * 20], tmp_path, max_loop_iterations=12)


def test_while_constant_count_tract(tmp_path):
    model = ConstantWhile()
    r = _export(model, [randn(5, 3)], tmp_path, DYN0)
    assert r.check.ok and len(r.check.cases) >= 3 and r.nnef_op_counts.get("tract_core_scan") == 1, r.check
    assert any("constant trip count (3)" in n for n in r.notes), r.notes
    _run_more(r, model, [[randn(2, 3, seed=3)], [randn(8, 3, seed=4)]])


# Python decisions inside loop bodies --------------------------------------------------------------
def _if_in_scan(x):
    def step(c, xt):
        if xt.sum() > 0:
            n = c + xt
        else:
            n = c * 0.5 - xt
        return n, n.sum()
    return scan(step, torch.zeros(x.shape[1]), x)


def _two_ifs_in_scan(x):
    def step(c, xt):
        if xt.sum() > 0:
            n = c + xt
        else:
            n = c * 0.5 - xt
        if n.amax() > 1.0:
            n = n / 2
        return n, n.sum()
    return scan(step, torch.zeros(x.shape[1]), x)


def _if_in_vmap(x):
    def per_row(r):
        if r.sum() > 0:
            return r * 2
        return r - 1
    return torch.vmap(per_row)(x)


def _if_in_while(x):
    def body(i, acc):
        if acc.sum() > 0:
            acc = acc - 1.5
        else:
            acc = acc * 0.5 + 0.25
        return i + 1, acc
    return while_loop(lambda i, acc: i < acc.size(0), body, (torch.zeros((), dtype=torch.int64), x))[1]


BODY_IFS = [_if_in_scan, _two_ifs_in_scan, _if_in_vmap, _if_in_while]
BODY_IDS = ["scan", "scan_two_ifs", "vmap", "while"]


@pytest.mark.parametrize("fn", BODY_IFS, ids=BODY_IDS)
def test_decision_in_a_loop_body_is_refused_by_default(fn, tmp_path):
    """torch itself cannot run these (torch.compile / functorch); the export names the line."""
    with pytest.raises(TraceError, match=r"Python decision .* at .*test_control_flow_more.py:\d+: `if .*` inside a "
                                         r"loop body(.|\n)*branches='select'"):
        _export(fn, [randn(6, 3)], tmp_path, DYN0)


@pytest.mark.parametrize("fn", BODY_IFS, ids=BODY_IDS)
def test_decision_in_a_loop_body_merged_with_select(fn, tmp_path):
    """branches='select': both outcomes in the body, merged with select; steps take either one."""
    x = randn(6, 3)
    r = _export(fn, [x], tmp_path, DYN0, branches="select")
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    assert any("traced both ways" in n for n in r.notes), r.notes
    _run_more(r, FnModule(fn), [[randn(3, 3, seed=5)], [randn(9, 3, seed=6) * 3], [-x.abs()], [x.abs()]])


def test_number_in_a_loop_body_is_refused(tmp_path):
    def fn(x):
        def step(c, xt):
            return c + float(xt.sum()), c.sum()
        return scan(step, torch.zeros(x.shape[1]), x)

    with pytest.raises(TraceError, match=r"float\(\) .* at .*test_control_flow_more.py:\d+: `return c \+ float"
                                         r"(.|\n)*inside a loop body"):
        _export(fn, [randn(6, 3)], tmp_path, DYN0, branches="select")


# max_loop_iterations through diagnose and the CLI -------------------------------------------------
class Halver(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.loop = FloatCounterWhile()

    def forward(self, x):
        y, n = self.loop(self.lin(x) * 20)
        return y + 1, n


def test_diagnose_takes_max_loop_iterations():
    model, x = Halver(), randn(3, 4)
    report = fx2nnef.diagnose(model, (x,), max_loop_iterations=16)
    assert report.ok, report.to_text()
    assert any("while_loop at" in n and "max_loop_iterations=16" in n for n in report.row("loop").notes)
    without = fx2nnef.diagnose(model, (x,))
    assert not without.row("loop").status.names == ["OK"] or not without.ok, without.to_text()
    with pytest.raises(InvalidArgumentError, match="max_loop_iterations"):
        fx2nnef.diagnose(model, (x,), max_loop_iterations=0)


def test_cli_takes_max_loop_iterations_and_branches(tmp_path, capsys, monkeypatch):
    from fx2nnef.cli import main

    (tmp_path / "loopmodels.py").write_text(textwrap.dedent("""
        import torch
        from torch._higher_order_ops.while_loop import while_loop

        class M(torch.nn.Module):
            def forward(self, x):
                x, n = while_loop(lambda x, n: x.abs().amax() >= 1.0, lambda x, n: (x / 2, n + 1),
                                  (x, torch.zeros(())))
                if n > 2:
                    return x * 2, n
                return x, n

        def make():
            torch.manual_seed(0)
            return M(), (torch.randn(3, 4) * 20,)
    """))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m.nnef.tgz"
    assert main(["export", "loopmodels:make", str(out)]) == 1
    assert "--max-loop-iterations N" in capsys.readouterr().err  # the command line's spelling
    assert main(["export", "loopmodels:make", str(out), "--max-loop-iterations", "12", "--branches", "select"]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and "check in tract: OK" in printed
    assert main(["diagnose", "loopmodels:make", "--max-loop-iterations", "12"]) == 0
    assert "while_loop at" in capsys.readouterr().out


# the report names each construct ------------------------------------------------------------------
class _Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


class _Scan(torch.nn.Module):
    def forward(self, x):
        return scan(lambda c, xt: (c + xt, (c + xt).clone()), torch.zeros(x.shape[1]), x)[1]


class _Vmap(torch.nn.Module):
    def forward(self, x):
        return torch.vmap(lambda r: r.softmax(0) * r.sum())(x)


class _Branch(torch.nn.Module):
    def forward(self, x):
        if x.mean() > 0:
            return x * 3
        return x.cos()


class _Strided(torch.nn.Module):
    def forward(self, x):
        return x.as_strided((x.shape[1], x.shape[0]), (1, x.shape[1])) + 1


class _Complex(torch.nn.Module):
    def forward(self, x):
        z = torch.view_as_complex(x.reshape(x.shape[0], -1, 2))
        angles = x[:, ::2] * 0.3
        return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape)


class AllConstructs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cond, self.scan, self.loop, self.vmap = _Cond(), _Scan(), FloatCounterWhile(), _Vmap()
        self.branch, self.strided, self.complex = _Branch(), _Strided(), _Complex()

    def forward(self, x):
        y = self.scan(self.cond(x))
        y, _ = self.loop(y * 20)
        return self.complex(self.strided(self.branch(self.vmap(y))).t().contiguous())


def test_report_names_each_construct():
    report = fx2nnef.diagnose(AllConstructs(), (randn(4, 4),), branches="select", max_loop_iterations=16)
    assert report.ok, report.to_text()
    expected = {"cond": "torch.cond at", "scan": "scan at", "loop": "while_loop at", "vmap": "torch.vmap at",
                "branch": "branches='select'", "strided": "as_strided at", "complex": "complex tensors from"}
    for label, text in expected.items():
        notes = report.row(label).notes
        assert any(text in n for n in notes), (label, notes)
    assert any("lowered as pairs of real tensors" in n for n in report.row("complex").notes)
    assert "merged with select" in report.to_markdown()


# odd models mixing the constructs -----------------------------------------------------------------
class ScanOfCondsThenEarlyExit(torch.nn.Module):
    """A scan whose body holds a torch.cond and a mean over the dynamic axis of its carry, then an
    early-exit while loop on the result's data (max_loop_iterations)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        def step(c, xt):
            h = self.lin(xt)
            n = torch.cond(h.sum() > 0, lambda a, b: a + b, lambda a, b: a * 0.5 - b, (c, h))
            return n - n.mean(0, keepdim=True), n.amax()

        c, peaks = scan(step, torch.zeros(x.shape[1], 3), x)
        c, steps = while_loop(lambda c, k: c.abs().amax() > 0.5, lambda c, k: (c * 0.7, k + 1), (c, torch.zeros(())))
        return c, peaks, steps


class VmapOverAModuleWithCond(torch.nn.Module):
    """vmap over a module whose forward holds a torch.cond and a Python if on data (branches='select')."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(4, 4)

    def row(self, r):
        g = self.gate(r)
        if g.mean() > 0:
            g = g.relu() * 2
        return torch.cond(r.amax() > 1.0, lambda t: t.tanh(), lambda t: t.sigmoid(), (g,))

    def forward(self, x):
        return torch.vmap(self.row)(x) + x.shape[0]


class ShapeBoundsInNestedScans(torch.nn.Module):
    """Nested scans, the inner one over a slice whose bound is a shape expression through tensors."""

    def forward(self, x):
        half = torch.tensor(x.shape[2]) // 2

        def outer(c, xt):
            def inner(d, v):
                e = d * 0.5 + v[:half]
                return e, e.var()

            d, ys = scan(inner, c, xt)
            return d, ys.mean(0)

        return scan(outer, torch.zeros(x.shape[2] // 2), x)


def test_odd_scan_of_conds_then_early_exit(tmp_path):
    model, x = ScanOfCondsThenEarlyExit(), randn(5, 4, 3) * 2
    r = _export(model, [x], tmp_path, {"x0": {0: "T", 1: "N"}}, max_loop_iterations=32)
    assert r.check.ok and len(r.check.cases) >= 3 and r.nnef_op_counts.get("tract_core_scan") == 2, r.check
    _run_more(r, model, [[randn(2, 6, 3, seed=7) * 5], [randn(8, 2, 3, seed=8) * 0.1], [-x]])


def test_odd_vmap_over_a_module_with_cond(tmp_path):
    model, x = VmapOverAModuleWithCond(), randn(6, 4) * 2
    r = _export(model, [x], tmp_path, DYN0, branches="select")
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    _run_more(r, model, [[randn(3, 4, seed=9) * 2], [randn(9, 4, seed=10) * 0.3], [-x]])


def test_odd_shape_bounds_in_nested_scans(tmp_path):
    model, x = ShapeBoundsInNestedScans(), randn(3, 4, 6)
    r = _export(model, [x], tmp_path, {"x0": {0: "A", 1: "B", 2: "C"}})
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    _run_more(r, model, [[randn(2, 5, 8, seed=11)], [randn(4, 2, 4, seed=12)]])
