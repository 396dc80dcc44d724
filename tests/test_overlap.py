"""Real runs beside other work (fx_tracer/shapes/overlap.py): beside the replay, and a static graph's run
beside the lowering and the write; the same asset, ranges and run counts as one after the other; a
model that updates a buffer in place is not run beside its graph; the worker hands over what it
raised and restores the interpreter's and torch's settings."""
import importlib
import sys
import tarfile

import pytest
import torch
import transformers as T

import fx2nnef
from fx2nnef.fx_tracer.shapes import overlap, probe
from fx2nnef.fx_tracer.shapes.overlap import Worker
from fx2nnef.targets.tolerance import compare_outputs

capture_module = importlib.import_module("fx2nnef.fx_tracer.capture")  # the module, not its capture()

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)


class _Logits(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, attention_mask):
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _count_workers(monkeypatch, module) -> list:
    """The workers ``module`` starts, from now on: True for each on half the cores, else False."""
    started: list = []

    class Counted(Worker):
        def __enter__(self):
            started.append(self._threads is not None)
            return super().__enter__()

    monkeypatch.setattr(module, "Worker", Counted)
    return started


def _export(model, inputs, path, dynamic_axes, names):
    r = fx2nnef.export(model, inputs, path, input_names=names, target=fx2nnef.TractNNEF(dynamic_axes=dynamic_axes))
    with tarfile.open(path) as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    return r, graph


def test_overlap_gives_the_sequential_export(tmp_path, monkeypatch):
    """A Llama with dynamic B and S (eager attention, a padding mask): the same graph, ranges,
    notes and runs with the worker thread as without; the check in tract passes."""
    torch.manual_seed(0)
    config = T.LlamaConfig(**SMALL)
    config._attn_implementation = "eager"
    model = _Logits(T.LlamaForCausalLM(config).eval()).eval()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    dyn = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
    names = ["input_ids", "attention_mask"]
    assert overlap.can_overlap() == (overlap._cores() >= 2)
    started = _count_workers(monkeypatch, probe)
    left = _count_workers(monkeypatch, capture_module)
    together, graph_together = _export(model, (ids, mask), tmp_path / "a.nnef.tgz", dyn, names)
    if overlap.can_overlap():
        # the base run beside the replay (and, since the probes cross the small sizes of two
        # symbols, one more run beside them); the check's two runs, one after the other, beside
        # the lowering and the write (see probe.real_run_later)
        assert started[:1] == [False] and len(started) <= 2 and left == [True], (started, left)
    started.clear()
    left.clear()
    monkeypatch.setenv("FX2NNEF_NO_OVERLAP", "1")
    assert not overlap.can_overlap()
    apart, graph_apart = _export(model, (ids, mask), tmp_path / "b.nnef.tgz", dyn, names)
    assert together.check.ok and apart.check.ok, (together.check, apart.check)
    assert graph_together == graph_apart
    assert together.ranges == apart.ranges and together.notes == apart.notes
    runs = ("graph_runs", "eager_runs", "fake_runs")
    assert [together.timings.get(k) for k in runs] == [apart.timings.get(k) for k in runs]
    assert not started and not left


class _Counting(torch.nn.Module):
    """Updates a buffer in place on every run: its graph is never run beside the model."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.seen.add_(1)
        return self.proj(x).softmax(-1) * x.shape[1]


def test_model_updating_a_buffer_exports_as_before(tmp_path, monkeypatch):
    x = torch.randn(2, 12, 8)
    dyn = {"x": {1: "S"}}
    r1, g1 = _export(_Counting().eval(), (x,), tmp_path / "a.nnef.tgz", dyn, ["x"])
    monkeypatch.setenv("FX2NNEF_NO_OVERLAP", "1")
    r2, g2 = _export(_Counting().eval(), (x,), tmp_path / "b.nnef.tgz", dyn, ["x"])
    assert r1.check.ok and r2.check.ok
    assert g1 == g2 and r1.ranges == r2.ranges


def test_worker_hands_over_errors_and_restores_settings():
    interval, threads, grad = sys.getswitchinterval(), torch.get_num_threads(), torch.is_grad_enabled()

    def fails():
        raise ValueError("from the worker")

    with torch.no_grad():
        with Worker(fails, split_cores=True) as worker:
            pass
        with pytest.raises(ValueError, match="from the worker"):
            worker.result()
        with Worker(torch.is_grad_enabled) as worker:
            assert sys.getswitchinterval() <= interval
        assert worker.result() is False  # the worker runs in this thread's grad mode
    assert (sys.getswitchinterval(), torch.get_num_threads(), torch.is_grad_enabled()) == (interval, threads, grad)


def _static_export(model, inputs, path, names, check=False):
    r = fx2nnef.export(model, inputs, path, input_names=names, target=fx2nnef.TractNNEF(check_io=check))
    with tarfile.open(path) as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    return r, graph


def test_static_graph_runs_beside_the_lowering_and_the_write(tmp_path, monkeypatch):
    """A static export takes the IR's values from a run with input data on meta tensors, and its one
    real run of the graph (the check that it runs at the example) goes on in a worker thread while
    the asset is lowered and written: the same asset as with everything one after the other, which
    tract runs as the model computes."""
    torch.manual_seed(0)
    config = T.LlamaConfig(**SMALL)
    config._attn_implementation = "eager"
    lm = T.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for module in lm.modules():  # norm weights that are not all ones
            if isinstance(module, T.models.llama.modeling_llama.LlamaRMSNorm):
                module.weight.uniform_(0.5, 1.5)
    model = _Logits(lm).eval()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    names = ["input_ids", "attention_mask"]
    started = _count_workers(monkeypatch, capture_module)
    together, graph_together = _static_export(model, (ids, mask), tmp_path / "a.nnef.tgz", names, check=True)
    assert together.check.ok, together.check
    if overlap.can_overlap():
        assert started == [True], started  # on half the cores each
        assert together.timings["light_runs"] == 1, together.timings
    assert together.timings["graph_runs"] == 1, together.timings
    fast, graph_fast = _static_export(model, (ids, mask), tmp_path / "b.nnef.tgz", names)
    monkeypatch.setenv("FX2NNEF_NO_OVERLAP", "1")
    apart, graph_apart = _static_export(model, (ids, mask), tmp_path / "c.nnef.tgz", names)
    assert "light_runs" not in apart.timings and apart.timings["graph_runs"] == 1, apart.timings
    assert graph_together == graph_fast == graph_apart
    assert together.notes == fast.notes == apart.notes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nnef.tgz", "b.nnef.tgz", "c.nnef.tgz"]


class _Projected(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.proj(x)) * 2


@pytest.mark.skipif(not overlap.can_overlap(), reason="one core: the graph's real run is part of the capture")
@pytest.mark.parametrize("check", [True, False], ids=["check_io", "no_check_io"])
def test_a_static_graph_that_does_not_run_again_is_refused_after_the_write(check):
    """The run left to do is really made: when the graph no longer runs at the example (here its
    weight gets another shape after the capture), waiting for the run raises what the capture
    raised when the run was part of it: the node that failed, or without check_io (where the model
    did not run first) the model's own error. A second wait has nothing left to do."""
    model = _Projected().eval()
    x = torch.randn(2, 5, 8)
    cap = capture_module.capture(model, (x,), {}, target=fx2nnef.TractNNEF(check_io=check), rerun_beside=True)
    assert cap.runs["light_runs"] == 1 and cap.runs["graph_runs"] == 1, cap.runs
    kept = model.proj.weight.data
    model.proj.weight.data = torch.randn(3, 4)  # the same tensor, which the graph reads, of another shape
    cap.start_rerun()
    said = r"does not re-run on the example inputs at 'linear': RuntimeError: mat1" if check else r"^mat1 and mat2"
    with pytest.raises(RuntimeError, match=said):
        cap.wait_rerun()
    cap.wait_rerun()
    model.proj.weight.data = kept
    cap = capture_module.capture(model, (x,), {}, target=fx2nnef.TractNNEF(check_io=check), rerun_beside=True)
    cap.start_rerun()
    cap.wait_rerun()  # runs


def test_capture_without_rerun_beside_runs_the_graph_itself():
    cap = capture_module.capture(_Projected().eval(), (torch.randn(2, 5, 8),), {},
                                 target=fx2nnef.TractNNEF(check_io=False))
    assert "light_runs" not in cap.runs and cap.runs["graph_runs"] == 1, cap.runs
    cap.wait_rerun()  # nothing to do


class _Scaled(torch.nn.Module):
    """Multiplies by a Python number the trace keeps as a constant."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.scale = 2.0

    def forward(self, x):
        return torch.nn.functional.gelu(self.proj(x)) * self.scale


@pytest.mark.skipif(not overlap.can_overlap(), reason="one core: the check runs within the capture")
def test_a_dynamic_capture_leaves_its_check_and_raises_when_it_fails():
    """With dynamic sizes the check's runs (the graph's and the model's at sizes where every decision
    is the example's) are left to the caller: waiting for them passes while the graph reproduces
    the model there, and raises DeferredCheckFailed once it does not (the model's number changed
    after the capture); without rerun_beside the capture runs them itself."""
    model = _Scaled().eval()
    x = torch.randn(2, 12, 8)
    target = fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {1: "S"}})
    cap = capture_module.capture(model, (x,), {}, target=target, rerun_beside=True)
    assert cap._rerun is not None
    cap.start_rerun()
    cap.wait_rerun()
    cap = capture_module.capture(model, (x,), {}, target=target, rerun_beside=True)
    model.scale = 3.0
    cap.start_rerun()
    with pytest.raises(probe.DeferredCheckFailed, match="differs from the model"):
        cap.wait_rerun()
    assert not isinstance(probe.DeferredCheckFailed("x"), Exception)  # no fallback takes it for its own failure
    plain = capture_module.capture(model, (x,), {}, target=target)
    counts = ("graph_runs", "eager_runs", "light_runs", "fake_runs")
    assert plain._rerun is None and [plain.runs.get(k) for k in counts] == [cap.runs.get(k) for k in counts]


@pytest.mark.skipif(not overlap.can_overlap(), reason="one core: the check runs within the capture")
@pytest.mark.parametrize("check", [True, False], ids=["check_io", "no_check_io"])
def test_an_export_whose_check_fails_beside_the_write_is_made_again(check, tmp_path, monkeypatch):
    """The check left to run beside the write fails (the model's number changes when it starts): the
    staged asset is dropped and the export made again with its checks in place, which traces the
    model as it is now; tract then computes what the model computes, and nothing else is left."""
    model = _Scaled().eval()
    x = torch.randn(2, 12, 8)
    started = _count_workers(monkeypatch, capture_module)
    start = capture_module.Capture.start_rerun

    def changed_then_started(cap):
        model.scale = 3.0
        start(cap)

    monkeypatch.setattr(capture_module.Capture, "start_rerun", changed_then_started)
    target = fx2nnef.TractNNEF(check_io=check, dynamic_axes={"x": {1: "S"}})
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", target=target)
    assert started == [True], started  # the first export's check only: the second runs its own
    assert r.timings["made_again"] > 0, r.timings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nnef.tgz"]
    assert r.check.ok if check else r.check is None, r.check
    x2 = torch.randn(2, 7, 8)
    (got,) = fx2nnef.TractNNEF().run(r.path, [[x2.numpy()]])
    with torch.no_grad():
        expected = model(x2).numpy()
    assert all(d.ok for d in compare_outputs(None, [expected], got, "approximate"))


def test_a_model_changing_its_tensors_in_place_is_checked_within_the_capture(monkeypatch):
    """A forward that updates a buffer in place: its check is not left to run beside the write of
    that buffer, but run within the capture."""
    cap = capture_module.capture(_Counting().eval(), (torch.randn(2, 12, 8),), {},
                                 target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {1: "S"}}),
                                 rerun_beside=True)
    assert cap._rerun is None and cap.runs["graph_runs"] >= 1, cap.runs


def test_module_state_is_restored_in_place():
    """Restoring a module's state after a run keeps each attribute that was there before in place the
    whole time (a thread reading the model meanwhile never misses one), and the order of its
    submodules and parameters."""
    from fx2nnef.fx_tracer.tracing.tracer import _module_state, _restore_module_state, _restore_dict

    model = _Scaled()
    saved = _module_state(model)
    order = [n for n, _ in model.named_parameters()]
    table = model.__dict__
    model.scale = 5.0
    model.cached = torch.ones(2)
    model.proj = torch.nn.Linear(8, 8)
    _restore_module_state(saved)
    assert model.__dict__ is table and model.scale == 2.0 and not hasattr(model, "cached")
    assert [n for n, _ in model.named_parameters()] == order and model.proj is saved[0][2]["_modules"]["proj"]
    current = {"a": 1, "b": 2, "c": 3}
    seen = []

    class Watched(dict):
        def __delitem__(self, key):
            seen.append(("del", key))
            super().__delitem__(key)

        def clear(self):
            seen.append(("clear",))
            super().clear()

    watched = Watched(current)
    _restore_dict(watched, {"a": 1, "b": 4})
    assert dict(watched) == {"a": 1, "b": 4} and seen == [("del", "c")]
    _restore_dict(watched, {"b": 4, "a": 1})  # another order: cleared and filled again
    assert list(watched) == ["b", "a"] and seen[-1] == ("clear",)


class _DrawsOnce(torch.nn.Module):
    """Draws a constant factor at each run: the trace keeps the example's draw."""

    def forward(self, x):
        return x * (1 + 1e-5 * torch.rand(4))


@pytest.mark.skipif(not overlap.can_overlap(), reason="one core: the check runs within the capture")
def test_an_export_made_again_draws_what_one_export_draws(tmp_path, monkeypatch):
    """A model that draws is exported again with its checks in place (its draws are named then); the
    second export starts from the random generator's state the first one started from, so the
    asset keeps the draw an export made with everything one after the other keeps."""
    x = torch.randn(2, 4)
    target = fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {0: "B"}})
    left = _count_workers(monkeypatch, capture_module)
    torch.manual_seed(5)
    again = fx2nnef.export(_DrawsOnce(), (x,), tmp_path / "a.nnef.tgz", target=target)
    assert left == [True], left
    monkeypatch.setenv("FX2NNEF_NO_OVERLAP", "1")
    torch.manual_seed(5)
    once = fx2nnef.export(_DrawsOnce(), (x,), tmp_path / "b.nnef.tgz", target=target)
    assert again.notes == once.notes and any("torch.rand" in n for n in once.notes), once.notes

    def contents(path):
        with tarfile.open(path) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert contents(again.path) == contents(once.path)


def test_a_model_made_in_inference_mode_exports_with_its_check_in_place(tmp_path):
    """Tensors made in inference mode have no version counter: whether a forward changes them is
    unseen, so the check runs within the capture, and the export passes in tract."""
    with torch.inference_mode():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    cap = capture_module.capture(model, (torch.randn(2, 3, 4),), {}, input_names=["x"],
                                 target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {1: "S"}}),
                                 rerun_beside=True)
    assert cap._rerun is None and cap.runs["graph_runs"] >= 1, cap.runs
    r = fx2nnef.export(model, (torch.randn(2, 3, 4),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok, r.check
