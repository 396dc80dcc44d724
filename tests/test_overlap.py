"""Real runs beside the replay (fx_tracer/overlap.py): the same asset, ranges and run counts as
one after the other; a model that updates a buffer in place is not run beside its graph; the
worker hands over what it raised and restores the interpreter's and torch's settings."""
import sys
import tarfile

import pytest
import torch
import transformers as T

import fx2nnef
from fx2nnef.fx_tracer import overlap, probe
from fx2nnef.fx_tracer.overlap import Worker

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)


class _Logits(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, attention_mask):
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


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
    started = []

    class Counted(Worker):
        def __enter__(self):
            started.append(self._threads is not None)
            return super().__enter__()

    monkeypatch.setattr(probe, "Worker", Counted)
    together, graph_together = _export(model, (ids, mask), tmp_path / "a.nnef.tgz", dyn, names)
    if overlap.can_overlap():  # the base run beside the replay, the check's two runs side by side
        assert started.count(False) == 1 and started.count(True) >= 1, started
    started.clear()
    monkeypatch.setenv("FX2NNEF_NO_OVERLAP", "1")
    assert not overlap.can_overlap()
    apart, graph_apart = _export(model, (ids, mask), tmp_path / "b.nnef.tgz", dyn, names)
    assert together.check.ok and apart.check.ok, (together.check, apart.check)
    assert graph_together == graph_apart
    assert together.ranges == apart.ranges and together.notes == apart.notes
    runs = ("graph_runs", "eager_runs", "fake_runs")
    assert [together.timings.get(k) for k in runs] == [apart.timings.get(k) for k in runs]
    assert not started


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
