"""The custom tracer captures what plain symbolic_trace cannot, and the numbers stay right in tract."""
import functools
import operator

import pytest
import torch
import torch.fx

import fx2nnef
from fx2nnef.fx_tracer import capture
from harness import randn, tract_matches_eager


def _export(model, args, tmp_path, **target_kw):
    return fx2nnef.export(model, args, tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(**target_kw))


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Decorated(torch.nn.Module):
    @_decorated
    def forward(self, x, scale=2.0):
        return x * scale


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.ndim == 2:
            x = x.unsqueeze(0)
        n = len(x)
        assert isinstance(x, torch.Tensor)
        b, s, h = x.shape
        y = x.reshape(b, s, h // 4, 4)
        return y.sum(-1) * n


class CatAxis(torch.nn.Module):
    def forward(self, a, b):
        return torch.cat([a, b], axis=1)


class SliceAssign(torch.nn.Module):
    def forward(self, x, y):
        x = x.clone()
        x[:, :2] = y
        return x


class TensorIndexAssign(torch.nn.Module):
    def forward(self, x, v):
        idx = torch.tensor([0, 2])
        x = x.clone()
        x[..., idx] = v
        return x


class InplaceAdd(torch.nn.Module):
    def forward(self, x):
        y = x * 1.0
        y.add_(1)
        return torch.relu(y)


class KAssign(torch.nn.Module):
    def forward(self, k, v):
        k = k.clone()
        k[2:-2, 2:-2, :-1] = v
        return k


class ShapeReshape(torch.nn.Module):
    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        return x.reshape(b, s, 4, -1).transpose(1, 2)


class Structured(torch.nn.Module):
    def forward(self, pair, d):
        a, b = pair
        return {"sum": a + d["x"], "parts": [b * 2, d["y"] - 1]}


def test_plain_fx_fails_where_we_succeed():
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(Branchy())
    cap = capture(Branchy(), (randn(2, 3, 8),), {})
    assert cap.graph.nodes


def test_decorated_forward(tmp_path):
    r = _export(Decorated(), (randn(2, 3),), tmp_path)
    assert r.input_names == ["x"] and r.check.ok


def test_shape_questions_and_guards(tmp_path):
    r = _export(Branchy(), (randn(2, 3, 8),), tmp_path)
    assert r.check.ok
    # x.ndim == 2 is answered from the example; len(x) is the traced size, as x.shape[0]: no guard
    assert not r.guards


def test_len_of_a_tensor_follows_its_size(tmp_path):
    """len(x) computed with (fuzzer seed 7710: x + len(x), then a clamp that hides the example's
    baked length at most sizes and values) is the traced size; used by Python (range) it is a
    guard like x.shape[0], and the loop is rolled or bounded as for a size."""
    class LenArith(torch.nn.Module):
        def forward(self, x):
            return torch.clamp(x + len(x), min=1, max=2), x * len(x) - len(x[0])

    model = LenArith()
    r = fx2nnef.export(model, (torch.randint(-20, 21, (6, 3)),), tmp_path / "l.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "S"}}))
    assert r.check.ok and not r.ranges and not r.guards, (r.ranges, r.guards)
    # x = -5 at S = 7 tells x + 6 (clamped to 1) from x + 7 (2)
    tract_matches_eager(r.path, model, [[torch.full((7, 3), -5)], [torch.arange(-12, 0).reshape(4, 3)]])


def test_cat_axis_kwarg(tmp_path):
    assert _export(CatAxis(), (randn(2, 3), randn(2, 5, seed=1)), tmp_path).check.ok


def test_slice_assign(tmp_path):
    assert _export(SliceAssign(), (randn(3, 4), randn(3, 2, seed=1)), tmp_path).check.ok


def test_tensor_index_assign(tmp_path):
    assert _export(TensorIndexAssign(), (randn(2, 3, 4), randn(2, 3, 2, seed=1)), tmp_path).check.ok


def test_inplace_add_then_use(tmp_path):
    r = _export(InplaceAdd(), (randn(3, 4),), tmp_path)
    assert r.check.ok and "Tensor.add_" not in r.source_op_counts


def test_k_slice_assign(tmp_path):
    assert _export(KAssign(), (randn(8, 8, 5), randn(4, 4, 4, seed=1)), tmp_path).check.ok


def test_reshape_from_shape_stays_symbolic(tmp_path):
    r = _export(ShapeReshape(), (randn(2, 6, 8),), tmp_path, dynamic_axes={"x": {0: "B", 1: "S"}})
    assert r.check.ok and len(r.check.cases) >= 3  # example sizes, one size below and one above
    assert "B" in r.nnef_text and "S" in r.nnef_text


def test_tuple_list_dict_io(tmp_path):
    args = ((randn(2, 3), randn(2, 3, seed=1)), {"x": randn(2, 3, seed=2), "y": randn(2, 3, seed=3)})
    r = _export(Structured(), args, tmp_path)
    assert r.input_names == ["pair_0", "pair_1", "d_x", "d_y"]
    assert r.output_names == ["sum", "parts_0", "parts_1"]
    assert r.check.ok


def test_data_guard_is_reported(tmp_path):
    class DataBranch(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    r = _export(DataBranch(), (randn(3, 4).abs(),), tmp_path)
    data = [g for g in r.guards if g.kind == "data"]
    assert data and data[0].status == "baked" and "x.sum() > 0" in data[0].source.code


class _AsksInTwoThreads(torch.nn.Module):
    """Asks isinstance, callable, len and range about a traced input, in the tracing thread and in
    another thread meanwhile."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def _ask(self, x) -> tuple:
        return (isinstance(x, torch.Tensor), callable(x), type(len(x)).__name__,
                type(range(x.shape[0])).__name__)

    def forward(self, x):
        import threading

        self.seen["tracing"] = self._ask(x)
        other = threading.Thread(target=lambda: self.seen.__setitem__("other", self._ask(x)))
        other.start()
        other.join()
        return x + 1


def test_the_builtins_replaced_while_tracing_act_in_the_tracing_thread_only():
    """The tracer replaces builtins (isinstance, callable, len, range) process-wide while it traces;
    another thread (the export checks an asset in tract from a worker thread beside the lowering)
    gets the builtins' own answers meanwhile, not answers read from the traced value."""
    from fx2nnef.fx_tracer.tracing.tracer import trace_model

    model = _AsksInTwoThreads()
    trace_model(model, (randn(3, 4),), {}, ["x"], roll_loops=True)
    assert model.seen["tracing"] == (True, False, "CustomProxy", "_TracedRange")
    assert model.seen["other"] == (False, True, "int", "range")


class _IndexesAPlainTensor(torch.nn.Module):
    def forward(self, x):
        return x + torch.arange(100.0)[:x.shape[0]]  # a plain tensor sliced by a traced size


def test_tracing_leaves_tensors_what_they_were():
    """Slicing a plain tensor by a traced size is recorded without giving torch.Tensor a
    __getitem__ of its own: once set on the class, even deleted, it leaves every tensor a Python
    sequence, and torch.tensor([a 0-d tensor]) (transformers' Qwen-VL positions) fails in the
    process from then on."""
    from fx2nnef.fx_tracer.tracing.tracer import trace_model

    trace = trace_model(_IndexesAPlainTensor(), (randn(7),), {}, ["x"], roll_loops=True)
    assert any(n.target is operator.getitem for n in trace.gm.graph.nodes), trace.gm.graph
    assert not {"__getitem__", "view", "reshape", "expand"} & set(vars(torch.Tensor))
    assert torch.tensor([torch.tensor(3), torch.tensor(4)]).tolist() == [3, 4]
