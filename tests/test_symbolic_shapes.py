"""Symbolic shapes from one fake replay (FakeTensorMode + ShapeEnv): exact shape expressions,
a handful of real runs instead of dozens, and the probe fitting as the fallback. Real tract runs."""
import math

import numpy as np
import sympy
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef.fx_tracer.shapes.fake_replay import to_dim
from fx2nnef.ir import SymDim
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, tract_matches_eager

_FALLBACK = "dynamic shapes were fitted from probe runs"


def _run_sizes(model, r, name, make, sizes):
    """Run the asset at each size and compare with eager; returns the output shapes."""
    ins = [make(n) for n in sizes]
    got = run_tract_many(r.path, [[x.numpy()] for x in ins])
    shapes = []
    for x, g in zip(ins, got):
        with torch.no_grad():
            e = model(x).numpy()
        assert g[0].shape == e.shape, (name, x.shape, g[0].shape, e.shape)
        np.testing.assert_allclose(g[0], e, atol=1e-4, rtol=5e-4)
        shapes.append(g[0].shape)
    return shapes


def test_strided_convs_shapes_from_one_replay(tmp_path):
    """Two strided convs: the length is an exact floor division from the replay, with a few runs."""
    model = nn.Sequential(nn.Conv1d(1, 4, 10, stride=5), nn.ReLU(), nn.Conv1d(4, 4, 3, stride=2)).eval()
    r = fx2nnef.export(model, (torch.randn(1, 1, 400),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "T"}}))
    assert r.check.ok and not any(_FALLBACK in n for n in r.notes)
    assert r.timings["graph_runs"] <= 12 and r.timings["eager_runs"] <= 12
    length = r.graph.outputs[0].shape[2]
    for t in range(20, 2000, 37):
        assert length.evaluate({"T": t}) == ((t - 10) // 5 + 1 - 3) // 2 + 1
    assert r.ranges["T"].lo == 20  # below, the second conv has fewer than 3 inputs: torch refuses
    sizes = [20, 21, 29, 30, 401, 1003]
    _run_sizes(model, r, "T", lambda n: torch.randn(1, 1, n), sizes)


def test_tiny_llama_dynamic_batch_and_length_with_few_runs(tmp_path):
    from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama
    lm = tiny_llama("eager")

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, ids, mask):
            return self.lm(input_ids=ids, attention_mask=mask, use_cache=False).logits

    model = Wrapped().eval()
    ids = torch.cat([example_input_ids(8), example_input_ids(8, seed=1)])
    dyn = {"ids": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    r = fx2nnef.export(model, (ids, torch.ones_like(ids)), tmp_path / "llama.nnef.tgz", input_names=["ids", "mask"],
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and not r.ranges and not any(_FALLBACK in n for n in r.notes)
    assert r.timings["graph_runs"] <= 7 and r.timings["eager_runs"] <= 8, r.timings
    sets = [(b, s) for b, s in ((1, 1), (1, 5), (3, 2), (2, 13))]
    ins = [torch.cat([example_input_ids(s, seed=i) for i in range(b)]) for b, s in sets]
    got = run_tract_many(r.path, [[i.numpy(), np.ones(i.shape, dtype=np.int64)] for i in ins])
    for i, g in zip(ins, got):
        with torch.no_grad():
            np.testing.assert_allclose(g[0], model(i, torch.ones_like(i)).numpy(), atol=1e-4, rtol=5e-4)


def test_fallback_to_probes_is_said(tmp_path):
    """`torch.tensor([S, 2])` makes the ShapeEnv fix S (a tensor's data is not symbolic; a lone
    size is replayed as a number): the export falls back to probe fitting, says so, and is still
    right at other sizes."""
    model = FnModule(lambda x: x * torch.tensor([x.shape[1], 2])[:1] + math.exp(x.shape[1] / 8))
    r = fx2nnef.export(model, (torch.randn(2, 6),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert any(_FALLBACK in n for n in r.notes), r.notes
    assert "fitted from probe runs" in str(r)
    _run_sizes(model, r, "S", lambda n: torch.randn(2, n), [1, 3, 6, 17])


def test_bound_by_a_decision_is_not_traced_again(tmp_path):
    """An ``if`` whose outcomes differ in shape (``x[:, :4]`` or one sum) is valid for S >= 5. A
    trace at larger sizes takes the same decision there and gives the same graph: the replay says
    so, and the export does not trace and analyze twice more (21 real runs before, 10 now, S=1
    included: the far end of the sizes past a flip judged equivalent, which is also run on other
    input values). (``x[:, :min(S, 4)]`` is no decision: see test_size_extrema.py.)"""
    model = FnModule(lambda x: x[:, :4] * 2 if x.shape[1] > 4 else x.sum(1, keepdim=True))
    r = fx2nnef.export(model, (torch.randn(2, 6),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.ranges["S"].lo == 5 and r.ranges["S"].hi is None, r.ranges
    assert r.timings["graph_runs"] <= 10, r.timings
    assert not any("traced again" in n for n in r.notes), r.notes
    _run_sizes(model, r, "S", lambda n: torch.randn(2, n), [5, 6, 17])


def test_python_number_of_a_size_the_graph_cannot_compute(tmp_path):
    """math.lgamma(S) has no graph form: the error names the op that reads it and its line."""
    with pytest.raises(fx2nnef.TraceError, match=r"reads 'lgamma' \(lgamma at .*test_symbolic_shapes.py:\d+\)"):
        fx2nnef.export(FnModule(lambda x: x * math.lgamma(x.shape[1])), (torch.randn(2, 6),),
                       tmp_path / "m.nnef.tgz", input_names=["x"], target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert not (tmp_path / "m.nnef.tgz").exists()


def test_piece_count_change_is_named_with_its_line(tmp_path):
    """split(2) of S=6: shapes change with the number of pieces; the refusal names the line."""
    def fn(x):
        return torch.cat([p * i for i, p in enumerate(x.split(2, dim=1))], 1)
    try:
        fx2nnef.export(FnModule(fn), (torch.randn(2, 6),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    except fx2nnef.GuardError as exc:
        assert "split(...) gives 3 tensors" in str(exc) and "test_symbolic_shapes.py:" in str(exc)
    else:
        raise AssertionError("split(2) of a dynamic S must be refused")


def test_sympy_to_dims():
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, Min, Mod
    s, t = sympy.symbols("s0 s1", integer=True, positive=True)
    names = {s: "S", t: "T"}
    S, T = SymDim.symbol("S"), SymDim.symbol("T")
    assert to_dim(2 * s * t + 3, names) == 2 * S * T + 3
    assert to_dim(sympy.Integer(7), names) == 7
    env = {"S": 0, "T": 0}
    for a in range(1, 30):
        env["S"] = a
        assert to_dim(FloorDiv(s - 3, 4) + 1, names).evaluate(env) == (a - 3) // 4 + 1
        assert to_dim(CeilDiv(s, 3), names).evaluate(env) == -(-a // 3)
        assert to_dim(Mod(s, 4), names).evaluate(env) == a % 4
        assert to_dim(Max(FloorDiv(s, 2), 1), names).evaluate(env) == max(a // 2, 1)
        assert to_dim(Min(s, 4) + t, names).evaluate({**env, "T": 3}) == min(a, 4) + 3
    assert to_dim(Max(s, 4), names) == to_dim(Max(4, s), names)  # one atom whatever the order
    for bad in (FloorDiv(s, t), sympy.Symbol("u0")):
        try:
            to_dim(bad, names)
        except ValueError:
            continue
        raise AssertionError(f"{bad} has no IR form and must be refused")


def test_size_divided_by_a_size_that_divides_it():
    """``L // (L // 64)`` for L = S padded up to a multiple of 64 (reshape(..., -1, 64) of a
    padded sequence): the numerator is 64 times the divisor as polynomials, so the quotient is
    64; the modulo of a negated size is written with non-negative division numerators."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, PythonMod

    from fx2nnef.fx_tracer.shapes.fake_replay import to_dim

    s = sympy.Symbol("s0", integer=True, positive=True)
    padded = s + PythonMod(64 - PythonMod(s, 64), 64)
    assert to_dim(FloorDiv(padded, FloorDiv(padded, 64)), {s: "S"}) == 64
    pad = to_dim(PythonMod(64 - PythonMod(s, 64), 64), {s: "S"})
    assert [pad.evaluate({"S": n}) for n in (1, 63, 64, 65, 130)] == [63, 1, 0, 63, 62]
    assert "-S)" not in str(pad) and "(0-" not in str(pad), str(pad)


def test_compiled_size_expressions_evaluate_as_sympy_does():
    """The replay's decisions are evaluated at thousands of sizes by Python text compiled from
    their sympy form: every operator gives sympy's own value (and the closures' one, kept for
    expressions too deep to compile) at each size, divisions by a size that is 0 included."""
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, PythonMod

    from fx2nnef.fx_tracer.shapes.fake_replay import _closures, _compile

    s, t = sympy.symbols("s0 s1", integer=True, positive=True)
    names = {s: "S", t: "T"}
    exprs = [FloorDiv(s + 3, 2) * t - 7, sympy.Max(s, 2 * t, 5), sympy.Min(s, 7), sympy.Eq(PythonMod(s, 4), 1),
             sympy.And(s < 5, sympy.Ne(t, 3)), sympy.Or(s >= 2, t <= 1), sympy.Not(s < 4), CeilDiv(s, 3),
             sympy.Integer(4), sympy.true, FloorDiv(t, s - 3), s * sympy.Rational(1, 2) + 1]
    for e in exprs:
        fast, slow = _compile(e, names), _closures(e, names)
        for n in range(1, 12):
            for m in range(1, 5):
                env = {"S": n, "T": m}
                try:
                    want = e.subs({s: n, t: m})
                except ZeroDivisionError:
                    want = None
                got = [None, None]
                for i, f in enumerate((fast, slow)):
                    try:
                        got[i] = f(env)
                    except ZeroDivisionError:
                        pass
                assert got[0] == got[1] and type(got[0]) is type(got[1]), (e, env, got)
                if want in (sympy.true, sympy.false):
                    assert got[0] == bool(want), (e, env, got[0], want)
                elif want is not None and want.is_finite:
                    assert got[0] == float(want), (e, env, got[0], want)


def test_nested_floor_divisions_have_one_form_and_polynomials_divide():
    """A stack of strided convs gives nested floor divisions; tract folds them into one with a
    constant in [0, divisor) and finds a reshape's -1 by dividing polynomials, so both sides
    must use the same atoms: every form of one value is written the same way."""
    from fx2nnef.ir.dims import exact_quotient

    t = SymDim.symbol("T")
    nested = SymDim.floordiv(SymDim.floordiv(SymDim.floordiv(t, 80) - 3, 2) + 1, 2)
    assert str(nested) == "((T+240)/320) - 1"
    # ((k - 1) // 2) + 1 and (k + 1) // 2 are one value, hence one expression
    k = SymDim.floordiv(t, 80)
    assert SymDim.floordiv(k - 1, 2) + 1 == SymDim.floordiv(k + 1, 2)
    for n in range(0, 4000, 13):
        assert nested.evaluate({"T": n}) == ((n // 80 - 3) // 2 + 1) // 2
        assert SymDim.floordiv(8 - t, 8).evaluate({"T": n}) == (8 - n) // 8
    b = SymDim.symbol("B")
    side = nested - 1
    # tract's volume of a (B, 12, L, L) tensor, to view as (-1, L, L)
    assert exact_quotient(12 * side * (b * nested - b), side * side) == 12 * b
    assert exact_quotient(6 * b * side, 4 * side) is None  # 3/2 * B: no integer polynomial
    assert exact_quotient(b * b + 1, b) is None


class _ConvAttention(nn.Module):
    """Raw audio through strided convs, then attention with a relative-position bias built from
    the frame count (WavLM, SEW-D): ``float(head_dim)`` in torch's multi-head attention is a
    number of a static size; the bias is viewed as ``(-1, L, L)``; a mask is made of
    ``L // 2`` frames."""

    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv1d(1, 16, 10, stride=5), nn.GELU(), nn.Conv1d(16, 16, 3, stride=2),
                                   nn.GELU(), nn.Conv1d(16, 16, 2, stride=2))
        self.attn = nn.MultiheadAttention(16, 2, batch_first=False)
        self.bias = nn.Embedding(64, 2)
        torch.nn.init.normal_(self.bias.weight)

    def forward(self, x):
        h = self.convs(x.unsqueeze(1)).transpose(1, 2)  # (B, L, 16)
        b, frames, _ = h.shape
        pos = torch.arange(frames)[None, :] - torch.arange(frames)[:, None]
        bias = self.bias(pos.clamp(-31, 32) + 31).permute(2, 0, 1)  # (2, L, L)
        bias = bias[None].expand(b, 2, frames, frames) * torch.sigmoid(h.mean(-1))[:, None, :, None]
        q = h.transpose(0, 1)
        out, _ = torch.nn.functional.multi_head_attention_forward(
            q, q, q, 16, 2, self.attn.in_proj_weight, self.attn.in_proj_bias, None, None, False, 0.0,
            self.attn.out_proj.weight, self.attn.out_proj.bias, training=False,
            attn_mask=bias.reshape(-1, frames, frames), need_weights=False)
        half = torch.ones(b, frames // 2)
        return out.transpose(0, 1).sum(-1)[:, : frames // 2] * half


def test_strided_convs_then_attention_bias_over_the_frames(tmp_path):
    model = _ConvAttention().eval()
    r = fx2nnef.export(model, (torch.randn(2, 900),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "T"}}))
    assert r.check.ok and not any(_FALLBACK in n for n in r.notes), r.notes
    _run_sizes(model, r, "T", lambda n: torch.randn(3, n), [200, 641, 900, 1999])


class _DevicesAndParams(nn.Module):
    """Parameters read by the graph, factories and moves naming the CPU, a size-1 broadcast."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        n = x.shape[1]
        pos = torch.arange(n, device="cpu").to("cpu").float().cpu()
        y = torch.nn.functional.linear(x + pos[:, None], self.lin.weight, self.lin.bias)
        return y.softmax(-1) * x.new_ones(x.shape[0], 1, 1, device=torch.device("cpu")), pos.sum()


class _CallsASubmodule(nn.Module):
    """A submodule called whole holds its parameters off the meta device."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)[:, : x.shape[1] // 2] * 2


@pytest.mark.parametrize("model, meta", [(_DevicesAndParams(), True), (_CallsASubmodule(), False)])
def test_shapes_at_other_sizes_run_on_meta_tensors_or_fake_ones(model, meta, monkeypatch):
    """The shape-only runs at concrete sizes (a decision of torch's kernels flips there) give
    what a real run gives; on meta tensors when the graph runs there, else on fake tensors."""
    from fx2nnef.fx_tracer.shapes import fake_replay
    from fx2nnef.fx_tracer.shapes.probe import _record

    gm = torch.fx.symbolic_trace(model)
    ran = []
    real_run = fake_replay._MetaRecorder.run

    def run(self, *a):
        ran.append("meta")
        out = real_run(self, *a)
        ran.append("done")
        return out
    monkeypatch.setattr(fake_replay._MetaRecorder, "run", run)
    example = [torch.randn(2, 5, 8)]
    for b, s in [(1, 5), (2, 1), (3, 7)]:
        ran.clear()
        records = fake_replay.shapes_at(gm, example, ["x"], {"x": {0: "B", 1: "S"}}, {"B": b, "S": s}, _record)
        x = torch.randn(b, s, 8)
        real = {}
        interp = torch.fx.Interpreter(gm)
        original = interp.run_node
        interp.run_node = lambda n: real.setdefault(n, original(n))
        with torch.no_grad():
            interp.run(x)
        assert records == {n: _record(v) for n, v in real.items()}, (b, s)
        assert ran == (["meta", "done"] if meta else ["meta"]), ran


def test_values_no_output_needs_are_not_analysed(tmp_path):
    """An unused pooling (fuzz 11315: ceil_mode, whose last window's rounding the replay takes at
    the example's side only) sent the whole graph to the fitted probes, where the length of an
    inverse FFT (2 * (S // 2)) has no form: the export was refused for a value nothing reads."""
    import torch.nn.functional as F

    def fn(x):
        F.max_pool2d(x, 2, stride=3, padding=1, ceil_mode=True)  # unused
        return torch.fft.irfft(torch.fft.rfft(x, dim=2), dim=2) * 2

    model = FnModule(fn)
    r = fx2nnef.export(model, (torch.randn(1, 2, 4, 4),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {2: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(1, 2, n, 4, generator=torch.Generator().manual_seed(n))]
                                        for n in (2, 3, 6, 9)])
