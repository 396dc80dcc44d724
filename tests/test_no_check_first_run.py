"""Without check_io, the model is not run on the example before the trace (its outputs would
serve the check only): the same asset, ranges and errors as with the run first. A dynamic export
runs the graph at the example without input data (what the IR needs), and for real, compared with
the model there, only when a probe finds something wrong."""
import re
import tarfile

import pytest
import torch
import torch.nn.functional as F
import transformers as T

import fx2nnef
from fx2nnef.errors import InvalidArgumentError, TraceError
from harness import randn, tract_matches_eager
from test_overlap import SMALL, _Logits

DYN = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
NAMES = ["input_ids", "attention_mask"]


def _llama():
    torch.manual_seed(0)
    config = T.LlamaConfig(**SMALL)
    config._attn_implementation = "eager"
    lm = T.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return _Logits(lm).eval()


def _inputs(batch=2, seq=9, seed=1):
    ids = torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[-1, :3] = 0
    return ids, mask


def _export(model, inputs, path, check, dyn=None, **kw):
    r = fx2nnef.export(model, inputs, path, target=fx2nnef.TractNNEF(check_io=check, dynamic_axes=dyn or {}), **kw)
    with tarfile.open(path) as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    return r, graph


@pytest.mark.parametrize("dyn", [None, DYN], ids=["static", "dynamic"])
def test_same_asset_without_the_first_run(tmp_path, dyn):
    """The graph, ranges and notes of a check_io=False export are those of a checked one; the
    eager model ran once fewer (static: never; dynamic: only at the probe sizes), and the asset,
    run in tract on other inputs, gives the model's outputs."""
    model = _llama()
    ids, mask = _inputs()
    checked, graph_checked = _export(model, (ids, mask), tmp_path / "a.nnef.tgz", True, dyn, input_names=NAMES)
    fast, graph_fast = _export(model, (ids, mask), tmp_path / "b.nnef.tgz", False, dyn, input_names=NAMES)
    assert graph_fast == graph_checked
    assert {s: str(r) for s, r in fast.ranges.items()} == {s: str(r) for s, r in checked.ranges.items()} == {}
    assert fast.notes == checked.notes
    if dyn is None:
        # the IR's values from a run with input data on meta tensors; the graph's one real run, the
        # check that it runs at the example, went on beside the lowering and the write
        assert fast.timings["eager_runs"] == 0 and fast.timings["graph_runs"] == 1, fast.timings
        assert fast.timings["light_runs"] == 1, fast.timings
    else:
        # the checked export ran the model at the example first; here only the probes run it, and
        # the graph's run at the example has no forward pass on data (input data on meta tensors)
        assert fast.timings["eager_runs"] == checked.timings["eager_runs"] - 1 >= 1, (fast.timings, checked.timings)
        assert fast.timings["graph_runs"] == checked.timings["graph_runs"] - 1 >= 1, (fast.timings, checked.timings)
        assert fast.timings["light_runs"] == 1 and "light_runs" not in checked.timings
    others = [_inputs(2, 9, seed=5)] if dyn is None else [_inputs(1, 4, seed=5), _inputs(3, 17, seed=6)]
    tract_matches_eager(tmp_path / "b.nnef.tgz", model, others)


def test_output_names_come_from_the_trace(tmp_path):
    """Outputs named by the model's structure (a dict) get the names the model's run gave them."""
    class Two(torch.nn.Module):
        def forward(self, x):
            return {"sum": x.sum(-1), "scaled.out": x * 2}

    x = randn(2, 3)
    a, _ = _export(Two(), (x,), tmp_path / "a.nnef.tgz", True)
    b, _ = _export(Two(), (x,), tmp_path / "b.nnef.tgz", False)
    assert b.graph.output_names == a.graph.output_names == ["sum", "scaled_out"]


class _Raises(torch.nn.Module):
    def forward(self, x):
        return x.view(7, -1)  # 2 x 3 has no view of 7 rows


class _Nothing(torch.nn.Module):
    def forward(self, x):
        return None


class _Draws(torch.nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.5, training=True)


@pytest.mark.parametrize("model, names, dyn, error, match", [
    (_Raises(), None, None, RuntimeError, "shape '\\[7, -1\\]' is invalid"),
    (_Nothing(), None, None, InvalidArgumentError, "the model returned no tensor"),
    (torch.nn.Identity(), ["a", "b"], None, InvalidArgumentError, "2 output names given"),
    (_Draws(), None, {"x": {0: "B"}}, TraceError, "draws random numbers"),
], ids=["model_error", "no_output", "output_names", "random_draw"])
def test_same_errors_without_the_first_run(tmp_path, model, names, dyn, error, match):
    """A model that fails on the example, returns no tensor, has another number of outputs than
    names given, or draws again at every run: the same error with check_io=False as with the check,
    and nothing left on disk."""
    messages = []
    for check in (True, False):
        with pytest.raises(error, match=match) as info:
            fx2nnef.export(model, (randn(2, 3),), tmp_path / "m.nnef.tgz", input_names=["x"], output_names=names,
                           target=fx2nnef.TractNNEF(check_io=check, dynamic_axes=dyn or {}))
        messages.append(str(info.value))
        assert info.value.__context__ is None or not isinstance(info.value.__context__, TraceError) \
            or error is TraceError  # the model's own error, not raised while handling the trace's
        assert not list(tmp_path.iterdir())
    if isinstance(model, _Draws):
        # how far the graph is from the model is a random draw (runs in threads draw from one
        # generator in no set order): the same message but for that number
        messages = [re.sub(r"differs from the model by [-+.e\d]+", "differs from the model by ...", m)
                    for m in messages]
    assert messages[0] == messages[1]


def test_graph_unlike_the_model_on_the_example_is_found_without_the_check(tmp_path, monkeypatch):
    """A graph that computes otherwise than the model on the example inputs (the encoder's packed
    route for plain tensors left out): without check_io the probes find it apart from the model, the
    comparison at the example then runs and gives the error it gives with the check."""
    import fx2nnef.fx_tracer.tracing.tracer as tracer
    from test_fast_paths import Encoder, _masks

    monkeypatch.setattr(tracer, "reproduce_fast_path", lambda m, args, kwargs, out: out)
    pad = _masks(2, 5, torch.bool)[0]
    with pytest.raises(TraceError, match=r"does not reproduce the model on the example inputs "
                                         r"\(output 0 differs from the model by .*diagnose") as info:
        fx2nnef.export(Encoder().eval(), (torch.randn(2, 5, 8), pad), tmp_path / "m.nnef.tgz",
                       input_names=["x", "pad"],
                       target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {1: "S"}, "pad": {1: "S"}}))
    assert not isinstance(info.value, fx2nnef.GuardError)
    assert not list(tmp_path.iterdir())


class _Unfolds(torch.nn.Module):
    """Refuses S < 4: the probes below the example find the model refusing, a bounded range."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x.unfold(1, 4, 1))


def test_a_bounded_range_compares_at_the_example(tmp_path):
    """A range the probes bound (the model refuses S=3): the graph is then run for real at the
    example and compared with the model there, as with the check; same range and graph."""
    x = randn(2, 6)
    dyn = {"x": {1: "S"}}
    checked, graph_checked = _export(_Unfolds(), (x,), tmp_path / "a.nnef.tgz", True, dyn, input_names=["x"])
    fast, graph_fast = _export(_Unfolds(), (x,), tmp_path / "b.nnef.tgz", False, dyn, input_names=["x"])
    assert graph_fast == graph_checked
    assert str(fast.ranges["S"]) == str(checked.ranges["S"]) == "S >= 4 (the model refuses S=3)"
    # the run without data at first, then the real one and the model's at the example
    assert fast.timings["light_runs"] == 1
    assert fast.timings["graph_runs"] == checked.timings["graph_runs"]
    assert fast.timings["eager_runs"] == checked.timings["eager_runs"]


def test_a_graph_that_needs_data_runs_for_real():
    """A node that cannot run on meta tensors (nonzero: as many items as the data has): no run
    without data, the caller runs the graph for real."""
    from fx2nnef.fx_tracer.shapes import probe

    gm = torch.fx.symbolic_trace(lambda x: torch.nonzero(x > 0).sum() + x.shape[0])
    x = randn(3, 4)
    assert probe._run_light(gm, [x], probe.data_dependence(gm)) is None
    gm = torch.fx.symbolic_trace(lambda x: x.sum(-1) * torch.arange(x.shape[0], device=x.device))
    values, err, records = probe._run_light(gm, [x], probe.data_dependence(gm))
    nodes = {n.name: n for n in gm.graph.nodes}
    assert err is None and values[nodes["arange"]].device.type == "cpu"  # from sizes: on data
    assert torch.equal(values[nodes["arange"]], torch.arange(3))
    assert values[nodes["sum_1"]].device.type == "meta" and records[nodes["mul"]] == ("tensor", (3,), torch.float32)


class _SizeBranch(torch.nn.Module):
    """``if T < 5`` traced at T=3: the first trace holds for T <= 4, the one again at larger sizes
    (T=5) for T >= 5 only. A dead index_copy refuses T < 3, which makes the merged graph's range
    no wider than the retraced one's on the probes above the example (fuzz seed 11897)."""

    def forward(self, x):
        v1 = x * 2.42
        v2 = torch.div(v1, -(x.abs() + 0.5))
        torch.index_copy(v2, 0, torch.tensor([2, 1]), v2.narrow(0, 1, 2).flip(0))
        v6 = v1.cos()
        if x.shape[0] < 5:
            return v6 + 1
        return v6.roll(1, 2)


def test_a_graph_traced_again_at_other_sizes_is_compared_at_the_example(tmp_path):
    """A graph traced again at larger sizes was not traced at the example: its comparison with the
    model there is not deferred (deferred, the retraced graph, the roll branch only, was kept and
    gave the other branch's numbers at the example's sizes). Same asset as with the check, and
    right on both sides of the decision in tract."""
    x = torch.rand(3, 9, 4, generator=torch.Generator().manual_seed(0)) * 4 - 2
    dyn = {"x": {0: "T", 1: "S"}}
    checked, graph_checked = _export(_SizeBranch(), (x,), tmp_path / "a.nnef.tgz", True, dyn, input_names=["x"])
    fast, graph_fast = _export(_SizeBranch(), (x,), tmp_path / "b.nnef.tgz", False, dyn, input_names=["x"])
    assert graph_fast == graph_checked and "select(" in graph_fast
    assert fast.notes == checked.notes
    tract_matches_eager(tmp_path / "b.nnef.tgz", _SizeBranch(),
                        [[randn(t, s, 4, seed=t + s)] for t, s in ((3, 9), (4, 2), (5, 7), (7, 1))])
