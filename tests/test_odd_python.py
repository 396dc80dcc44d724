"""Odd but common Python in forwards: loops, iteration, aliasing, masks, shape arithmetic."""
import math

import pytest
import torch
import torch.nn as nn

import fx2nnef
from harness import randn


class Loops(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, f"layer{i}", nn.Linear(8, 8))

    def forward(self, x, *extra, scale=1.0, **options):
        for i in range(3):
            x = getattr(self, f"layer{i}")(x)
        rows = [row * (k + 1) for k, row in enumerate(x)]        # iterate over a tensor
        y = torch.stack(rows) * scale
        if options.get("double"):
            y = y * 2
        return y + sum(extra) if extra else y


class ShapeMath(nn.Module):
    def forward(self, x):
        d = x.size(-1)
        q = x / math.sqrt(d) * x.shape[-1] ** 0.5
        head = x.size()[1:]
        z = x.new_zeros(x.shape) + q
        assert x.shape[1] == head[0]
        return z.reshape(*x.shape[:-1], 2, d // 2).flatten(-2)


class Aliasing(nn.Module):
    def forward(self, x):
        y = x.clone()
        alias = y
        alias += 1                    # in-place through an alias: y sees it
        y[y < 0.5] = 0.0              # masked assignment
        y.masked_fill_(y > 2.0, 2.0)
        z = y.view(-1)
        z.mul_(3)                     # in-place on a view: y sees it
        return y, z


class Pieces(nn.Module):
    def forward(self, x):
        a, b = torch.chunk(x, 2, dim=-1)
        c = (a.T @ b).softmax(-1)
        w = torch.where(x > 0, x, 0.0)
        return {"c": c, "w": w, "none": None, "n": [a.float().mean(), b.sum(-1)]}


class Training(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        if self.training:
            x = x * 100
        return self.drop(x) + 1


class CallableChecks(nn.Module):
    """``callable`` of a traced value answers for the value (transformers' torch_compilable_check
    calls its condition when it is callable: a traced size comparison is a bool, not a function)."""

    def forward(self, x):
        cond = x.shape[1] * 2 == x.shape[1] + x.shape[1]
        if callable(cond):
            cond = cond()
        assert cond
        fn = x.relu if callable(x.relu) else None
        return fn() + (1 if callable(x) else 0)


@pytest.mark.parametrize("model, args, kwargs", [
    (Loops(), (randn(3, 8), randn(3, 8, seed=2)), {"scale": 0.5, "double": True}),
    (CallableChecks(), (randn(2, 5),), {}),
    (ShapeMath(), (randn(2, 3, 8),), {}),
    (Aliasing(), (randn(3, 4),), {}),
    (Pieces(), (randn(4, 6),), {}),
    (Training().train(), (randn(2, 3),), {}),
], ids=["loops", "callable", "shape_math", "aliasing", "pieces", "training_mode"])
def test_odd_python(model, args, kwargs, tmp_path):
    r = fx2nnef.export(model, args, tmp_path / "m.nnef.tgz", kwargs=kwargs)
    assert r.check.ok


def test_shape_math_with_dynamic_dims(tmp_path):
    r = fx2nnef.export(ShapeMath(), (randn(2, 3, 8),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


def test_training_mode_is_restored(tmp_path):
    model = Training().train()
    fx2nnef.export(model, (randn(2, 3),), tmp_path / "m.nnef.tgz")
    assert model.training and model.drop.training


class PositionalEncoder(nn.Module):
    """Classic transformer input block: a sliced positional buffer and positions from arange."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.register_buffer("pe", torch.randn(1, 64, 16, generator=torch.Generator().manual_seed(3)))
        self.pos = nn.Embedding(64, 16)
        self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])

    def forward(self, ids):
        b, s = ids.shape
        pos = torch.arange(s).unsqueeze(0).expand(b, -1)
        h = self.emb(ids) + self.pe[:, : ids.size(1)] + self.pos(pos)
        for i, blk in enumerate(self.blocks):
            h = h + torch.tanh(blk(h)) * (i + 1)
        width = max(h.shape[-1], 4)
        perm = h.permute(*range(h.ndim - 1, -1, -1))
        return h[:, -1] * width, perm.sum(0)


def test_dynamic_batch_and_sequence_blocks(tmp_path):
    ids = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(PositionalEncoder(), (ids,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"ids": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


class StridedTime(nn.Module):
    """Sizes after a strided conv are floor divisions of the input length: they stay symbolic."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, stride=2, padding=1)

    def forward(self, x):
        h = self.conv(x)
        t = h.shape[-1]
        pos = torch.arange(t).float()
        return h[:, :, : t - 1] + pos[: t - 1], x.view(x.shape[0], 2, -1)[:, :, : x.shape[2] // 2]


def test_floor_division_sizes(tmp_path):
    r = fx2nnef.export(StridedTime(), (randn(2, 4, 38),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "T"}}))
    assert r.check.ok and len(r.check.cases) >= 3
    assert "((T+1)/2)" in r.nnef_text


class PlainTensorSizes(nn.Module):
    """Tensors created in forward with constant sizes, then shaped by traced sizes."""

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        bias = torch.arange(4.0).expand(b, s, -1)
        scale = torch.ones(1, 1, 4).repeat(b, 1, 1)
        return x * scale + bias


def test_plain_tensors_given_traced_sizes(tmp_path):
    r = fx2nnef.export(PlainTensorSizes(), (randn(2, 3, 4),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


class CachesOnItself(nn.Module):
    """Forwards that store values on the module: a buffer re-assigned in the input's dtype (as
    CTRL does), a table built on first use, a counter."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.randn(16, 8, generator=torch.Generator().manual_seed(3)))
        self.proj = nn.Linear(8, 8)
        self.table = None
        self.calls = 0

    def forward(self, x):
        self.pos = self.pos.to(dtype=x.dtype)
        if self.table is None:
            self.table = torch.cos(self.pos[: x.shape[1]]) + 1
        self.calls += 1
        return self.proj(x + self.pos[: x.shape[1]]) * self.table


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_forward_that_stores_values_on_its_module(dynamic, tmp_path):
    """The trace's values were left in the module (a traced buffer, a traced table): the
    reference runs then failed or compared with the trace itself, and the model was broken for
    its user after the export. The modules are as before the trace once it ends."""
    model = CachesOnItself().eval()
    pos = model.pos.clone()
    x = randn(2, 6, 8)
    dyn = {"x": {1: "S"}} if dynamic else {}
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok
    assert type(model.pos) is torch.Tensor and torch.equal(model.pos, pos)
    assert "pos" in dict(model.named_buffers())
    with torch.no_grad():
        fresh = CachesOnItself().eval()
        fresh.load_state_dict(model.state_dict())
        assert torch.allclose(model(x), fresh(x))


class ModelSideEffects(nn.Module):
    """Code that catches the failure of a call on the example (``try`` / ``except RuntimeError``),
    numpy on a traced size, a torch.autocast region and a checkpointed call."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        try:
            y = x @ torch.ones(5, 5)  # wrong on purpose: the model's own fallback runs
        except RuntimeError:
            y = x * 2
        import numpy as np
        y = y * float(np.sqrt(x.shape[-1]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.lin(y)
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.lin, z.float(), use_reentrant=False) + y


def test_try_except_numpy_size_autocast_and_checkpoint(tmp_path):
    """The except path is traced as it runs eagerly (the tracer's error is also a RuntimeError);
    numpy reads a traced size as int() does; autocast regions run in float32, with a note, and
    the export matches the model run that way at every checked size; torch.utils.checkpoint
    just runs its function (the trace runs without autograd)."""
    model = ModelSideEffects().eval()
    r = fx2nnef.export(model, (randn(3, 4),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert r.check.ok and len(r.check.cases) >= 3
    assert any("torch.autocast regions (cpu bfloat16)" in n for n in r.notes), r.notes
    with torch.no_grad():
        assert torch.is_autocast_enabled("cpu") is False
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the patch is gone after the export
            assert torch.is_autocast_enabled("cpu")


@torch.jit.script
def _scripted_gate(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x * torch.sigmoid(1.702 * x)
    for _ in range(k):
        y = y + 0.5 * x
    return y


class _ScriptedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 0.5

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale + x.mean(-1, keepdim=True)


class _WithTorchScript(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.jit.script(_ScriptedBlock())

    def forward(self, x):
        return _scripted_gate(self.block(x), 2) * 2


def test_torchscript_functions_and_modules_are_traced_through_their_python(tmp_path):
    """A ``torch.jit.script``-ed function or submodule takes tensors only, not traced values: its
    Python source is traced instead (the function's, the scripted module's class forward on the
    scripted module and its scripted children), with a dynamic size (before: "Expected a value of
    type 'Tensor'" and "Tensor.forward: no lowering")."""
    model = _WithTorchScript().eval()
    r = fx2nnef.export(model, (randn(2, 5, 4),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3 and not r.ranges
    assert _scripted_gate(torch.ones(1), 1).shape == (1,)  # the patch is gone after the export


def test_loaded_torchscript_module_is_refused_clearly(tmp_path):
    """A module loaded with torch.jit.load has no Python class left to trace: the error says so."""
    path = tmp_path / "block.pt"
    torch.jit.save(torch.jit.script(_ScriptedBlock()), str(path))

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.jit.load(str(path))

        def forward(self, x):
            return self.block(x)

    with pytest.raises(fx2nnef.TraceError, match="no Python class to trace"):
        fx2nnef.export(Holder().eval(), (randn(2, 4),), tmp_path / "m.nnef.tgz")


def test_round_of_a_traced_size_is_a_decision(tmp_path):
    """``round(S / 4)`` reads the size as a Python number, like int(): a decision whose range is
    where it gives the example's number (Python rounds halves to even: 6 <= S <= 10 for S=7)
    (before: a TypeError, the proxy had no __round__)."""
    import torch.nn.functional as F

    class Pad(nn.Module):
        def forward(self, x):
            return F.pad(x, (0, 0, 0, round(x.shape[1] / 4) * 4 - x.shape[1] + 2)) * 2

    r = fx2nnef.export(Pad().eval(), (randn(2, 7, 3),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok and (r.ranges["S"].lo, r.ranges["S"].hi) == (6, 10), r.ranges
