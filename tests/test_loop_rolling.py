"""Python loops over a dynamic size rolled into one scan (``fx_tracer/passes/loops.py``).

``for t in range(S)`` runs as Python while tracing, so the graph first holds the loop unrolled
at the example size. When that bounds a dynamic size, the export traces again and rolls each
loop whose iterations repeat into a scan (tract_core_scan). Every export here is checked in
tract by check_io at the example and at a smaller and a larger size, and run once more at a
length far from the example; a loop that cannot be rolled still gets the error naming it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, randn, tract_matches_eager


def _export(model, inputs, tmp_path, dyn):
    names = [f"x{i}" for i in range(len(inputs))]
    return fx2nnef.export(model, tuple(inputs), tmp_path / "a.nnef.tgz", input_names=names,
                          target=fx2nnef.TractNNEF(dynamic_axes=dyn))


def _rolled(r, count: int = 1) -> None:
    assert r.check.ok and len(r.check.cases) >= 3, r
    assert all("refuses" in str(rng) for rng in r.ranges.values()), r.ranges  # only the model's own limits
    notes = [n for n in r.notes if "is rolled into a scan" in n]
    assert len(notes) == count, r.notes


def _same_in_tract(r, model, inputs) -> None:
    """The asset run in tract on other inputs gives the model's outputs (tract's approximate level)."""
    tract_matches_eager(r.path, model, [inputs])


class GRULoop(torch.nn.Module):
    """A cell stepped in Python: the last state and the stacked states are returned."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 8)
        self.cell = torch.nn.GRUCell(8, 5)

    def forward(self, x):
        x = self.proj(x)
        h = x.new_zeros(x.shape[0], 5)
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(h)
        return torch.stack(outs, 1), h


class LSTMLoop(torch.nn.Module):
    """Two carries (a tuple state), outputs concatenated along time after an unsqueeze."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.LSTMCell(4, 6)

    def forward(self, x):
        state = (x.new_zeros(x.shape[0], 6), x.new_ones(x.shape[0], 6) * 0.5)
        outs = []
        for t in range(x.size(1)):
            state = self.cell(x[:, t, :], state)
            outs.append(state[0].unsqueeze(1))
        return torch.cat(outs, dim=1), state[1]


class SelectiveScan(torch.nn.Module):
    """Mamba's reference loop: slices along different axes of tensors made before the loop, the
    state multiplied by a slice with matmul, outputs stacked on the last axis."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.A = torch.nn.Parameter(-torch.rand(6, 4, generator=g) - 0.1)
        self.dt = torch.nn.Linear(6, 6)
        self.bc = torch.nn.Linear(6, 8)

    def forward(self, x):
        b, length, d = x.shape
        dt = torch.nn.functional.softplus(self.dt(x)).transpose(1, 2)
        B, C = self.bc(x).split(4, dim=-1)
        dA = torch.exp(self.A[None, :, None, :] * dt[:, :, :, None])
        dBu = dt[:, :, :, None] * B[:, None, :, :] * x.transpose(1, 2)[:, :, :, None]
        state = torch.zeros(b, d, 4)
        outs = []
        for i in range(length):
            state = dA[:, :, i] * state + dBu[:, :, i]
            y = torch.matmul(state, C[:, i, :].unsqueeze(-1))
            outs.append(y[:, :, 0])
        return torch.stack(outs, dim=-1), state


@pytest.mark.parametrize("model, dyn", [
    (GRULoop(), {"x0": {0: "B", 1: "S"}}),
    (LSTMLoop(), {"x0": {1: "S"}}),
    (SelectiveScan(), {"x0": {0: "B", 1: "S"}}),
], ids=["gru_cell", "lstm_cell_cat", "selective_scan"])
def test_python_loop_rolls_into_scan(model, dyn, tmp_path):
    torch.manual_seed(0)
    model.eval()
    x = randn(2, 7, 6 if not isinstance(model, LSTMLoop) else 4)
    r = _export(model, [x], tmp_path, dyn)
    _rolled(r)
    _same_in_tract(r, model, [randn(2, 23, x.shape[2], seed=5)])


def _backwards(x):
    """``reversed(range(S))``; the list reversed in place before the stack."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in reversed(range(x.shape[1])):
        h = torch.tanh(h * 0.7 + x[:, t])
        outs.append(h)
    outs.reverse()
    return torch.stack(outs, 1)


def _count_down(x):
    """``range(S - 1, -1, -1)``, the outputs stacked in the order run."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in range(x.shape[1] - 1, -1, -1):
        h = torch.tanh(h * 0.7 + x[:, t])
        outs.append(h)
    return torch.stack(outs, 0), h


def _from_one(x):
    """``range(1, S)``: the first item is the initial state."""
    h = x[:, 0]
    outs = []
    for t in range(1, x.shape[1]):
        h = h * 0.5 + torch.sin(x[:, t])
        outs.append(h)
    return torch.stack(outs, 1)


def _no_carry(x):
    """A list comprehension over the steps: nothing carried."""
    w = torch.linspace(-1.0, 1.0, x.shape[2] * 3).reshape(x.shape[2], 3)
    return torch.stack([torch.tanh(x[:, t] @ w) for t in range(x.shape[1])], dim=2)


def _written(x):
    """The outputs written into a tensor made before the loop, one index at a time (RWKV's
    reference path), part of it only."""
    out = torch.full((x.shape[0], x.shape[1], x.shape[2] + 2), -1.0)
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(x.shape[1]):
        h = torch.maximum(h * 0.8, x[:, t])
        out[:, t, 1:-1] = h * 2
    return out


def _made_in_loop(x):
    """The scanned tensor is made again at every step from values made before the loop."""
    h = torch.zeros(x.shape[0], x.shape[1])
    outs = []
    for t in range(x.shape[2]):
        y = (x * 2).transpose(1, 2)
        h = torch.sigmoid(h + y[:, t])
        outs.append(h.sum(-1))
    return torch.stack(outs, -1)


def _chunked(x):
    """The step splits its slice in two (a count of pieces, decided again at every step)."""
    h = torch.zeros(x.shape[0], 2)
    outs = []
    for t in range(x.shape[1]):
        a, b = x[:, t].chunk(2, -1)
        h = torch.tanh(h * a + b)
        outs.append(h)
    return torch.stack(outs, 1)


def _over_len(x):
    """``range(len(x))`` over the dynamic axis 1 of x.transpose(0, 1)."""
    xt = x.transpose(0, 1)
    h = xt[0] * 0
    outs = []
    for t in range(len(xt)):
        h = torch.tanh(h * 0.5 + xt[t])
        outs.append(h)
    return torch.stack(outs, 1)


def _index_as_number(x):
    """The index read as a number by item-wise ops: ``/ (t + 1)``, ``- t``, ``+ t / 4``."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in range(x.shape[1]):
        h = torch.tanh(h * 0.5 + x[:, t] / (t + 1)) - t + t / 4
        outs.append(h * (2 * t - 1))
    return torch.stack(outs, 1), h


def _index_as_number_from_one(x):
    """fuzz 10570: a running maximum from the second step, less the index."""
    v = x[:, 0].clone()
    for i in range(1, x.shape[1]):
        v = torch.maximum(v, x[:, i]) - i
    return v


def _narrow_times_index(x):
    """fuzz 10726: ``torch.cat([x.narrow(1, i, 1) * i for i in range(S)], 1)``."""
    return torch.cat([x.narrow(1, i, 1) * i for i in range(x.shape[1])], 1)


@pytest.mark.parametrize("fn", [_backwards, _count_down, _from_one, _no_carry, _written, _made_in_loop, _chunked,
                                _over_len, _index_as_number, _narrow_times_index],
                         ids=["reversed", "count_down", "from_one", "no_carry", "written", "made_in_loop", "chunked",
                              "over_len", "index_as_number", "narrow_times_index"])
def test_loop_forms_roll(fn, tmp_path):
    axis = 2 if fn is _made_in_loop else 1
    x = randn(3, 6, 4) if axis == 1 else randn(3, 4, 6)
    r = _export(FnModule(fn), [x], tmp_path, {"x0": {axis: "S"}})
    _rolled(r)
    _same_in_tract(r, FnModule(fn), [randn(3, 17, 4, seed=2) if axis == 1 else randn(3, 4, 17, seed=2)])


def _over_unbind(x):
    """``for t in x.unbind(1)``: the pieces of a tensor along the dynamic axis."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in x.unbind(1):
        h = torch.tanh(h * 0.7 + t)
        outs.append(h)
    return torch.stack(outs, 1), h


def _over_tensor(x):
    """``for t in x``: iterating a tensor along its first axis (the dynamic one)."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in x.transpose(0, 1):
        h = torch.maximum(h * 0.5, t)
        outs.append(h)
    return torch.stack(outs, 1) * 2


def _comprehension_of_pieces(x):
    """A comprehension over the pieces, stacked back: no carry."""
    return torch.stack([torch.sigmoid(t) * t.sum(-1, keepdim=True) for t in torch.unbind(x, dim=1)], dim=1)


@pytest.mark.parametrize("fn", [_over_unbind, _over_tensor, _comprehension_of_pieces],
                         ids=["unbind", "tensor", "comprehension"])
def test_loop_over_pieces_rolls(fn, tmp_path):
    """A loop over the pieces of a tensor along a dynamic axis (``for t in x.unbind(1)``, ``for t
    in x``) is a loop over ``range(x.size(d))`` taking the d-th slice: it rolls the same way."""
    r = _export(FnModule(fn), [randn(3, 6, 4)], tmp_path, {"x0": {1: "S"}})
    _rolled(r)
    _same_in_tract(r, FnModule(fn), [randn(3, 15, 4, seed=2)])


def _zip_of_pieces(x):
    """Two tensors' pieces walked together (zip of two unbinds): alike steps, two loops at once."""
    y = x * 2 + 1
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for a, b in zip(x.unbind(1), y.unbind(1)):
        h = torch.tanh(h + a * b)
        outs.append(h)
    return torch.stack(outs, 1)


def test_zip_of_pieces_is_right_rolled_or_refused(tmp_path):
    """Loops whose iterations interleave (zip) must never give a wrong graph: the export either
    rolls and matches the model at other lengths, or names the loop."""
    try:
        r = _export(FnModule(_zip_of_pieces), [randn(3, 6, 4)], tmp_path, {"x0": {1: "S"}})
    except fx2nnef.GuardError as exc:
        assert "for a, b in zip(" in str(exc)
        return
    assert r.check.ok
    _same_in_tract(r, FnModule(_zip_of_pieces), [randn(3, 11, 4, seed=3)])


def _cat_written_after(x):
    """fuzz 27510: the concatenated steps are written in place through a view after the loop."""
    out = torch.cat([x.narrow(1, i, 1) * i for i in range(x.shape[1])], 1)
    flat = out.view(-1)
    flat[flat > 0.5] = -2.0
    return out, flat


def _stack_written_after(x):
    """The stacked states (along dim 1), a slice of them zeroed in place through a view after the
    loop, then read."""
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in range(x.shape[1]):
        h = torch.tanh(h * 0.6 + x[:, t])
        outs.append(h)
    out = torch.stack(outs, 1)
    out.transpose(1, 2)[:, :2] = 0
    return out * 3, h


def _stack_dim0_written_after(x):
    """Stacked along dim 0 (no reordering after the scan), written in place after the loop."""
    out = torch.stack([torch.sigmoid(x[:, t]) for t in range(x.shape[1])])
    out.view(-1)[::3] = 1.5
    return out


def _carry_written_after(x):
    """The last state, written in place through a view after the loop, then read."""
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(x.shape[1]):
        h = torch.tanh(h * 0.6 + x[:, t])
    h.view(-1)[:5] = 0
    return h * 2


@pytest.mark.parametrize("fn", [_cat_written_after, _stack_written_after, _stack_dim0_written_after,
                                _carry_written_after], ids=["cat", "stack", "stack_dim0", "carry"])
def test_values_of_the_loop_written_in_place_after_it(fn, tmp_path):
    """The scan's outputs stand for the values they replace in the memory the in-place writes after
    the loop update through a view: the last step's carry, and the ``torch.cat``/``torch.stack`` of
    the steps (as contiguous as torch gives it). Before, the rolled graph returned the values before
    the write and differed from the model at the example, and the export was refused."""
    r = _export(FnModule(fn), [randn(3, 6, 4)], tmp_path, {"x0": {1: "S"}})
    _rolled(r)
    assert not any("fitted from probe runs" in n for n in r.notes), r.notes  # the replay gave the shapes
    _same_in_tract(r, FnModule(fn), [randn(3, 13, 4, seed=2)])


def _int_minus_index(x):
    """fuzz 28438 (on an integer input there): a running maximum minus the index, on int32."""
    n = (x * 4).to(torch.int32)
    h = n[:, 0].clone()
    for t in range(1, x.shape[1]):
        h = torch.maximum(h, n[:, t]) - t
    return h


def _int_plus_index_stacked(x):
    n = (x * 4).long()
    return torch.stack([n[:, t] + t for t in range(x.shape[1])], 1)


def _index_minus_int_stacked(x):
    n = (x * 4).to(torch.int32)
    return torch.stack([(t + 1) - n[:, t] + 3 for t in range(x.shape[1])], 1)


def _index_on_integers(x):
    n = (x * 4).to(torch.int32)
    outs = [n[:, t] * t + (t - 2) for t in range(x.shape[1])]
    return torch.stack(outs, 1)


def _long_times_index(x):
    n = (x * 4).long()
    return torch.stack([n[:, t] * t for t in range(x.shape[1])], 1)


def _narrowed_times_index(x):
    # fuzz 31050: each step's row of an integer tensor times the index, concatenated
    v = (x * 4).long().transpose(0, 1) >> 1
    return torch.cat([v.narrow(0, i, 1) * i for i in range(v.shape[0])], 0)


@pytest.mark.parametrize("fn", [_int_minus_index, _int_plus_index_stacked, _index_minus_int_stacked,
                                _index_on_integers, _long_times_index, _narrowed_times_index],
                         ids=["carry_minus_index", "stacked_plus_index", "index_minus_stacked",
                              "index_times_int32", "index_times_int64", "narrowed_times_index"])
def test_index_added_to_an_integer_tensor_rolls(fn, tmp_path):
    """The index as the number in a sum, a difference or a product with an integer tensor rolls
    as with a float one, and tract loads that scan body (a product panicked it, while the zero
    that hides values from tract's folding read one scanned input twice)."""
    r = _export(FnModule(fn), [randn(3, 6, 4)], tmp_path, {"x0": {1: "S"}})
    _rolled(r)
    _same_in_tract(r, FnModule(fn), [randn(3, 13, 4, seed=2)])


def _two_loops(x):
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(x.shape[1]):
        h = h * 0.9 + x[:, t]
    g = torch.zeros_like(h)
    outs = []
    for t in range(x.shape[1]):
        g = torch.relu(g - x[:, t] + h)
        outs.append(g)
    return torch.stack(outs, 1)


def _int_step(x):
    """An integer state; the step's slice is floor-divided and taken modulo (exact integer ops)."""
    h = x[0] * 0
    outs = []
    for t in range(x.shape[0]):
        h = torch.maximum(h, x[t] // 3) + x[t] % 4
        outs.append(h)
    return torch.stack(outs, 0)


def test_integer_loop_rolls(tmp_path):
    x = torch.randint(-20, 20, (6, 2, 3), generator=torch.Generator().manual_seed(0))
    r = _export(FnModule(_int_step), [x], tmp_path, {"x0": {0: "T"}})
    _rolled(r)
    more = torch.randint(-50, 50, (19, 2, 3), generator=torch.Generator().manual_seed(1))
    got = run_tract_many(r.path, [[more.numpy()]])[0][0]
    assert (got == _int_step(more).numpy()).all()


def _changed_after(x):
    """The scanned tensor is changed in place after the loop: the scan reads it as it was."""
    out = torch.zeros_like(x)
    h = x[0] * 0
    for t in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[t])
        out[t] = h
    x[::2, 1:] = -1.0
    return out, x * 2


def test_loop_input_changed_after_the_loop(tmp_path):
    r = _export(FnModule(_changed_after), [randn(5, 3, 2)], tmp_path, {"x0": {0: "T"}})
    _rolled(r)
    _same_in_tract(r, FnModule(_changed_after), [randn(12, 3, 2, seed=4)])


def test_two_loops_roll(tmp_path):
    x = randn(2, 5, 3)
    r = _export(FnModule(_two_loops), [x], tmp_path, {"x0": {1: "S"}})
    _rolled(r, 2)
    _same_in_tract(r, FnModule(_two_loops), [randn(2, 12, 3, seed=1)])


def _scan_per_head(a, b):
    """A loop run once per head, each keeping its last state; the last states of the heads are
    stacked with each other (Zamba's Mamba mixer with a cache)."""
    ys, last = [], []
    for head in range(a.shape[0]):
        h = torch.zeros(a.shape[1], a.shape[2])
        outs = []
        for t in range(a.shape[3]):
            h = a[head, :, :, t] * h + b[head, :, :, t]
            outs.append(h * 2)
        ys.append(torch.stack(outs, dim=-1))
        last.append(h)
    return torch.cat(ys, 1), torch.stack(last, dim=1)


def test_last_states_stacked_with_other_values_roll(tmp_path):
    """The last carry given to torch.stack with values made elsewhere is a read of that carry,
    not the loop's stacked output: both loops roll."""
    a, b = torch.rand(2, 2, 3, 6), randn(2, 2, 3, 6)
    r = _export(FnModule(_scan_per_head), [a, b], tmp_path, {"x0": {3: "S"}, "x1": {3: "S"}})
    _rolled(r, 2)
    _same_in_tract(r, FnModule(_scan_per_head), [torch.rand(2, 2, 3, 13), randn(2, 2, 3, 13, seed=3)])


def test_index_as_number_from_one_rolls_for_every_length(tmp_path):
    """fuzz 10570 rolls. At S=1 the loop runs no step: tract's scan then gives its last carry the
    shape [] (fuzz 87000), so the carries are selected as their initial values there."""
    r = _export(FnModule(_index_as_number_from_one), [randn(3, 6, 4)], tmp_path, {"x0": {1: "S"}})
    assert r.check.ok and not r.ranges, r.ranges
    assert any("is rolled into a scan" in n for n in r.notes), r.notes
    tract_matches_eager(r.path, FnModule(_index_as_number_from_one),
                        [[randn(3, n, 4, seed=n)] for n in (1, 2, 3, 17)])


def _steps_up_to_four(x):
    """fuzz 25140: ``range(1, min(T, 4))``, no step at T=1."""
    v = x[0]
    for i in range(1, min(x.shape[0], 4)):
        v = v * 0.5 + x[i]
    return v


def _two_carries_from_one(x):
    h, c = x[0] * 2, x[0].tanh()
    for t in range(1, x.shape[0]):
        h, c = torch.tanh(h + x[t] * c), c * 0.5 + h
    return h + c


def _stacked_from_one(x):  # stacked steps: none at T=1, where the model takes another path
    h, outs = x[0] * 2, []
    for t in range(1, x.shape[0]):
        h = torch.tanh(h + x[t])
        outs.append(h)
    return h, torch.stack(outs) if outs else h[None]


@pytest.mark.parametrize("fn,lo", [(_steps_up_to_four, None), (_two_carries_from_one, None), (_stacked_from_one, 2)],
                         ids=["steps_up_to_four", "two_carries", "stacked"])
def test_loop_of_no_step_gives_its_initial_carries(fn, lo, tmp_path):
    """A rolled loop that runs no step at some size of the range (T=1) gives its carries' initial
    values in tract as in torch; a loop that stacks its steps' outputs keeps such sizes out."""
    r = _export(FnModule(fn), [randn(6, 3, 5)], tmp_path, {"x0": {0: "T"}})
    assert r.check.ok and any("is rolled into a scan" in n for n in r.notes), r.notes
    assert (r.ranges["T"].lo if "T" in r.ranges else None) == lo, r.ranges
    tract_matches_eager(r.path, FnModule(fn), [[randn(n, 3, 5, seed=n)] for n in range(lo or 1, 9)])


def _index_off_a_line(x):
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(x.shape[1]):
        h = h * 0.5 + x[:, t] / math.sqrt(t + 1)  # no line through the steps' numbers
    return h


def _index_in_a_factory(x):
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(x.shape[1]):
        h = h * 0.5 + x[:, t] * torch.full((x.shape[2],), t)  # the index read by a factory, not an item-wise op
    return h


def _reads_one_step(x):
    outs = []
    for t in range(x.shape[1]):
        outs.append(x[:, t] * 2)
    return outs[0] + outs[-1]


@pytest.mark.parametrize("fn", [_index_off_a_line, _index_in_a_factory, _reads_one_step],
                         ids=["index_off_a_line", "index_in_a_factory", "one_step_read"])
def test_loop_that_does_not_repeat_stays_unrolled(fn, tmp_path):
    """A loop whose iterations are not alike (a number of the index that follows no line, the index
    given to a factory), or whose steps are read one by one after it, keeps the unrolled graph: the
    export reports the loop's line, as before."""
    with pytest.raises(fx2nnef.GuardError, match=r"(?s)for t in range\(x\.shape\[1\]\).*Python loop over a dynamic"):
        _export(FnModule(fn), [randn(2, 6, 3)], tmp_path, {"x0": {1: "S"}})


def test_static_export_keeps_python_loop(tmp_path):
    """Without a dynamic size, nothing is traced again: the loop stays unrolled (no scan)."""
    r = fx2nnef.export(GRULoop().eval(), (randn(2, 5, 6),), tmp_path / "s.nnef.tgz", target=fx2nnef.TractNNEF())
    assert r.check.ok
    assert not any("rolled" in n for n in r.notes)


@pytest.mark.parametrize("family", ["mamba", "falcon_mamba", "rwkv"])
def test_mamba_reference_path_exports_dynamic(family, tmp_path):
    """transformers' Mamba and RWKV without their CUDA kernels step ``for index in range(seq_len)``
    (RWKV writing each step's output into a tensor): both layers' loops roll, and the model
    exports with dynamic batch and length."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "mamba":
        cfg = transformers.MambaConfig(vocab_size=96, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                                       conv_kernel=4, use_cache=False)
        model = transformers.MambaForCausalLM(cfg)
    elif family == "rwkv":
        cfg = transformers.RwkvConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                      intermediate_size=64, context_length=64, use_cache=False)
        model = transformers.RwkvForCausalLM(cfg)
    else:
        cfg = transformers.FalconMambaConfig(vocab_size=96, hidden_size=32, state_size=8, num_hidden_layers=2,
                                             expand=2, conv_kernel=4, use_cache=False)
        model = transformers.FalconMambaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():  # norm weights away from ones, every weight off its init
            p.add_(torch.randn_like(p) * 0.05)
    model.eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, 96, (1, 9), generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(Logits(), (ids,), tmp_path / "m.nnef.tgz", input_names=["ids"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"ids": {0: "B", 1: "S"}}))
    _rolled(r, 2)
    _same_in_tract(r, Logits(), [torch.randint(0, 96, (2, 21), generator=torch.Generator().manual_seed(1))])


def _int_from_one(x):
    """An int64 carry over ``range(1, min(S, 3))``: no step at S=1 (fuzz 15169)."""
    v = (x * 3 + 0.25).long()
    h = v[:, 0]
    for t in range(1, min(v.shape[1], 3)):
        h = h + v[:, t]
    return h


def _int_count_down(x):
    """An int64 carry over ``range(S - 1, 0, -1)``: no step at S=1."""
    v = (x * 3 + 0.25).long()
    h = v[:, 0]
    for t in range(v.shape[1] - 1, 0, -1):
        h = (h ^ v[:, t]) + 1
    return h


def _bool_from_one(x):
    """A bool carry over ``range(1, S)`` beside a float one: no step at S=1."""
    b = x[:, 0] > 1.0
    h = x[:, 0]
    for t in range(1, x.shape[1]):
        b = b ^ (x[:, t] > 1.5)
        h = h * 0.5 + x[:, t]
    return b, h


def _count_from_one(x):
    """A 0-d int64 count over ``range(1, S)``, the steps along axis 1."""
    n = x.new_zeros((), dtype=torch.long)
    for t in range(1, x.shape[1]):
        n = n + (x[:, t] > 1.5).sum()
    return n, x.sum(1)


@pytest.mark.parametrize("fn", [_int_from_one, _int_count_down, _bool_from_one, _count_from_one],
                         ids=["int_from_one", "int_count_down", "bool_from_one", "count_from_one"])
def test_a_carry_not_float32_of_a_loop_of_no_step(fn, tmp_path):
    """A rolled loop that runs no step at S=1: tract 0.23.9 gives its last carries the type float32
    there, and the select that keeps the initial value failed at run time on an int64 or bool
    carry ("F32 vs I64"); such a carry is now the last of its initial value and its values after
    each step. Right in tract at S=1, 2 and more."""
    x = torch.rand(3, 4, 6, generator=torch.Generator().manual_seed(0)) * 2.9 + 0.1
    r = _export(FnModule(fn), [x], tmp_path, {"x0": {1: "S"}})
    _rolled(r)
    inputs = [[torch.rand(3, s, 6, generator=torch.Generator().manual_seed(s)) * 2.9 + 0.1] for s in (1, 2, 3, 7)]
    got = run_tract_many(r.path, [[t.numpy() for t in ins] for ins in inputs])
    for ins, outs in zip(inputs, got):
        exp = FnModule(fn)(*ins)
        exp = [exp] if isinstance(exp, torch.Tensor) else list(exp)
        for e, o in zip(exp, outs):
            assert o.dtype == e.numpy().dtype and o.shape == tuple(e.shape), (ins[0].shape, o.dtype, o.shape)
            if e.dtype.is_floating_point:
                assert abs(o - e.numpy()).max() < 1e-4, ins[0].shape
            else:
                assert (o == e.numpy()).all(), ins[0].shape


class _UpdatedAfterNoStep(torch.nn.Module):
    """fuzz 17243: the carry starts as a view of ``v`` (``v[0]``); updated in place after the loop,
    it changes ``v`` too where the loop runs no step (S=1), and not elsewhere. With ``branch``, an
    ``if`` on T as well, exported both ways."""

    def __init__(self, branch: bool):
        super().__init__()
        self.branch = branch

    def forward(self, x, y):
        out = []
        if self.branch:
            out.append(y.clone() if x.shape[1] == 8 else y.flip(0))
        v = x.flip(0, 1)
        h = v[0]
        for i in range(1, min(v.shape[0], 3)):
            h = h * 0.5 + v[i]
        h2 = h.unsqueeze(0)
        h2.sub_(1.0)
        return tuple(out) + (h2, v)


@pytest.mark.parametrize("branch", [False, True], ids=["loop", "loop_and_branch"])
@pytest.mark.parametrize("check", [True, False], ids=["check", "no_check"])
def test_sizes_where_a_loop_runs_no_step_are_probed(tmp_path, branch, check):
    """Whether a rolled loop runs a step is a decision the probes look at: at S=1 the graph (its
    carry a copy) differs from the model (a view updated in place), and the forward traced at S=1
    is exported alongside; with an ``if`` on T, that trace is made both ways too. Right in tract
    at S=1 for T on both sides of the decision, and elsewhere."""
    model = _UpdatedAfterNoStep(branch)
    x, y = torch.rand(9, 8, generator=torch.Generator().manual_seed(0)), torch.arange(8) % 3 == 0
    r = fx2nnef.export(model, (x, y), tmp_path / "a.nnef.tgz", input_names=["x", "y"],
                       target=fx2nnef.TractNNEF(check_io=check, dynamic_axes={"x": {0: "S", 1: "T"}, "y": {0: "T"}}))
    assert any("S=1 takes other code" in n for n in r.notes), r.notes
    sizes = [(1, 8), (1, 2), (1, 5), (2, 2), (4, 3), (9, 8), (7, 11)]
    inputs = [[torch.rand(s, t, generator=torch.Generator().manual_seed(10 * s + t)), torch.arange(t) % 3 == 0]
              for s, t in sizes]
    got = run_tract_many(r.path, [[a.numpy() for a in ins] for ins in inputs])
    for (s, t), ins, outs in zip(sizes, inputs, got):
        exp = model(ins[0].clone(), ins[1])
        for e, o in zip(exp, outs):
            assert o.shape == tuple(e.shape) and np.allclose(o, e.numpy(), atol=1e-5), (s, t)
