"""pack_padded_sequence -> nn.LSTM / nn.GRU / nn.RNN -> pad_packed_sequence, with the lengths a model input.

Each export is checked by fx2nnef (tract, at the example and at other sizes), then the asset is run
again in tract at other time lengths (and batch sizes) and other lengths values, compared with
PyTorch each time: outputs past each length are zero (or padding_value), the final states are
each sequence's state at its own end, the reverse direction starts at each sequence's own end.
"""
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence as imported_pack

import fx2nnef
from fx2nnef.targets.tolerance import compare_outputs, format_diffs
from fx2nnef.targets.tract_runner import run_tract_many
from harness import randn

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")


class Packed(nn.Module):
    """x [B, T, I] (``batch_first``) or [T, B, I], lengths [B]; optional initial states."""

    def __init__(self, rnn: nn.Module, batch_first: bool = True, enforce_sorted: bool = False,
                 out_batch_first=None, padding_value: float = 0.0, direct_import: bool = False):
        super().__init__()
        self.rnn = rnn
        self.batch_first, self.enforce_sorted = batch_first, enforce_sorted
        self.out_batch_first = batch_first if out_batch_first is None else out_batch_first
        self.padding_value, self.direct_import = padding_value, direct_import

    def forward(self, x, lengths, *states):
        pack = imported_pack if self.direct_import else nn.utils.rnn.pack_padded_sequence
        packed = pack(x, lengths, batch_first=self.batch_first, enforce_sorted=self.enforce_sorted)
        hx = None if not states else states if len(states) == 2 else states[0]
        out, last = self.rnn(packed, hx)
        out, lens = nn.utils.rnn.pad_packed_sequence(out, batch_first=self.out_batch_first,
                                                     padding_value=self.padding_value,
                                                     total_length=x.shape[1 if self.batch_first else 0])
        if isinstance(last, tuple):
            return out, last[0], last[1]
        return out, last


def model(rnn_cls, *args, **kwargs) -> nn.Module:
    pack_kw = {k: kwargs.pop(k) for k in ("pack_bf", "enforce_sorted", "out_batch_first", "padding_value",
                                          "direct_import") if k in kwargs}
    pack_bf = pack_kw.pop("pack_bf", kwargs.get("batch_first", False))
    torch.manual_seed(0)
    return Packed(rnn_cls(*args, **kwargs), pack_bf, **pack_kw).eval()


def lengths_for(b: int, t: int, sorted_: bool, seed: int) -> torch.Tensor:
    """Lengths in [1, t] with at least one shorter than t when possible, sorted descending if asked."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, t + 1, (b,), generator=g)
    if b > 1 and t > 1:
        lens[int(torch.randint(0, b, (1,), generator=g))] = max(1, t // 2)
    return lens.sort(descending=True).values if sorted_ else lens


def inputs(m: Packed, b: int, t: int, lengths: torch.Tensor, seed: int = 0) -> list:
    rnn = m.rnn
    x = randn(b, t, rnn.input_size, seed=seed) if m.batch_first else randn(t, b, rnn.input_size, seed=seed)
    return [x, lengths]


def states_for(m: Packed, b: int, seed: int) -> list:
    rnn = m.rnn
    d = 2 if rnn.bidirectional else 1
    h = randn(rnn.num_layers * d, b, rnn.proj_size or rnn.hidden_size if isinstance(rnn, nn.LSTM) else rnn.hidden_size,
              seed=seed + 10)
    if isinstance(rnn, nn.LSTM):
        return [h, randn(rnn.num_layers * d, b, rnn.hidden_size, seed=seed + 11)]
    return [h]


def export_and_compare(m: Packed, example: list, runs: list, tmp_path, dynamic_axes: dict):
    """Export on ``example`` (fx2nnef's own check runs), then run the asset in tract on each input
    set of ``runs`` and compare with the eager model at the approximate level."""
    names = ["x", "lengths"] + [f"s{i}" for i in range(len(example) - 2)]
    out = tmp_path / "packed.nnef.tgz"
    r = fx2nnef.export(m, tuple(example), out, input_names=names,
                       target=fx2nnef.TractNNEF(check_io=True, dynamic_axes=dynamic_axes))
    assert r.check.ok
    assert "tract_core_scan" in r.nnef_text and "_masked_body" in r.nnef_text
    got = run_tract_many(out, [[t.numpy() for t in ins] for ins in runs])
    worst = 0.0
    for ins, outs in zip(runs, got):
        with torch.no_grad():
            want = [t.numpy() for t in m(*ins)]
        diffs = compare_outputs(None, want, outs, "approximate")
        assert all(d.ok for d in diffs), f"T={ins[0].shape}, lengths={ins[1].tolist()}:\n" + format_diffs(diffs)
        worst = max([worst] + [d.max_abs for d in diffs])
        # the padded steps are exactly zero (or padding_value) in the asset too
        axis = 1 if m.out_batch_first else 0
        y = outs[0] if m.out_batch_first else np.swapaxes(outs[0], 0, 1)
        for b, n in enumerate(ins[1].tolist()):
            assert (y[b, n:] == m.padding_value).all(), axis
    return r, worst


# (name, model, batch, T, sorted lengths, with initial states, dynamic batch)
CASES = [
    ("lstm_bf_unsorted", model(nn.LSTM, 3, 4, batch_first=True), 3, 6, False, False, True),
    ("lstm_tb_sorted", model(nn.LSTM, 3, 4, enforce_sorted=True), 3, 6, True, False, False),
    ("lstm_2l_bidir_bf_unsorted", model(nn.LSTM, 3, 4, num_layers=2, bidirectional=True, batch_first=True),
     4, 7, False, False, True),
    ("lstm_2l_bidir_tb_sorted_hx", model(nn.LSTM, 3, 4, num_layers=2, bidirectional=True, enforce_sorted=True),
     3, 5, True, True, False),
    ("lstm_proj_bidir_bf", model(nn.LSTM, 3, 5, proj_size=2, bidirectional=True, batch_first=True), 3, 6, False,
     False, False),
    ("lstm_pack_bf_module_tb", model(nn.LSTM, 3, 4, bidirectional=True, pack_bf=True, out_batch_first=False),
     3, 6, False, False, False),
    ("lstm_padding_value", model(nn.LSTM, 3, 4, batch_first=True, padding_value=-1.5), 3, 6, False, False, False),
    ("lstm_direct_import", model(nn.LSTM, 3, 4, batch_first=True, direct_import=True), 2, 5, False, False, False),
    ("gru_bf_unsorted", model(nn.GRU, 3, 4, batch_first=True), 3, 6, False, False, True),
    ("gru_2l_bidir_tb_sorted", model(nn.GRU, 3, 4, num_layers=2, bidirectional=True, enforce_sorted=True),
     3, 6, True, False, False),
    ("gru_bidir_bf_hx", model(nn.GRU, 3, 4, bidirectional=True, batch_first=True), 3, 5, False, True, True),
    ("rnn_tanh_2l_bidir_bf", model(nn.RNN, 3, 4, num_layers=2, bidirectional=True, batch_first=True),
     3, 6, False, False, True),
    ("rnn_tanh_tb_sorted_hx", model(nn.RNN, 3, 4, enforce_sorted=True), 3, 5, True, True, False),
    ("rnn_relu_bidir_bf", model(nn.RNN, 3, 4, bidirectional=True, nonlinearity="relu", batch_first=True),
     3, 6, False, False, False),
]


@pytest.mark.parametrize("name,m,b,t,sorted_,with_states,dyn_b", CASES, ids=[c[0] for c in CASES])
def test_packed_tract(name, m, b, t, sorted_, with_states, dyn_b, tmp_path):
    t_axis, b_axis = (1, 0) if m.batch_first else (0, 1)
    dyn = {"x": {t_axis: "T"}}
    if dyn_b:
        dyn["x"][b_axis] = "B"
        dyn["lengths"] = {0: "B"}
    extra = states_for(m, b, 0) if with_states else []
    if with_states:
        for i in range(len(extra)):
            dyn[f"s{i}"] = {1: "B"} if dyn_b else {}
    example = inputs(m, b, t, lengths_for(b, t, sorted_, seed=1)) + extra
    runs = [example]
    for seed, (bb, tt) in enumerate([(b, t), (b, 9), (b, 3), (b, 1)] + ([(5, 8), (1, 4)] if dyn_b else []), start=2):
        lens = lengths_for(bb, tt, sorted_, seed=seed)
        runs.append(inputs(m, bb, tt, lens, seed=seed) + (states_for(m, bb, seed) if with_states else []))
    # every sequence at full length, and (sorted or not) all shorter than T
    full = torch.full((b,), t, dtype=torch.int64)
    runs.append(inputs(m, b, t, full, seed=20) + (states_for(m, b, 20) if with_states else []))
    short = lengths_for(b, t - 2, sorted_, seed=21)
    runs.append(inputs(m, b, t, short, seed=21) + (states_for(m, b, 21) if with_states else []))
    _, worst = export_and_compare(m, example, runs, tmp_path, dyn)
    print(f"{name}: worst |tract - torch| over {len(runs)} runs = {worst:.3g}")
    assert worst < 1e-5


def test_float16(tmp_path):
    m = model(nn.LSTM, 3, 4, bidirectional=True, batch_first=True).half()
    x = randn(3, 5, 3, dtype=torch.float16)
    r = fx2nnef.export(m, (x, torch.tensor([2, 5, 3])), tmp_path / "h.nnef.tgz", input_names=["x", "lengths"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "T"}}))
    assert r.check.ok


def test_lengths_all_full_at_export(tmp_path):
    """The example has every length equal to T (nothing padded): the export still honours lengths."""
    m = model(nn.LSTM, 3, 4, bidirectional=True, batch_first=True, enforce_sorted=True)
    example = inputs(m, 3, 5, torch.full((3,), 5, dtype=torch.int64))
    runs = [example, inputs(m, 3, 5, torch.tensor([5, 3, 1]), seed=3), inputs(m, 3, 8, torch.tensor([7, 7, 2]), seed=4)]
    export_and_compare(m, example, runs, tmp_path, {"x": {1: "T"}})


def test_int32_lengths_and_list_of_outputs(tmp_path):
    """int32 lengths are read as int64, as torch does; pad_packed_sequence's lengths come back out."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(3, 4, batch_first=True, bidirectional=True)

        def forward(self, x, lengths):
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, h = self.gru(packed)
            out, lens = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
            return out.sum(-1) * 2.0, h.transpose(0, 1).reshape(x.shape[0], -1), lens

    torch.manual_seed(0)
    m = M().eval()
    x, lengths = randn(3, 6, 3), torch.tensor([2, 6, 4], dtype=torch.int32)
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(m, (x, lengths), out, input_names=["x", "lengths"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "T"}}))
    assert r.check.ok
    ins = [randn(3, 9, 3, seed=5), torch.tensor([9, 1, 5], dtype=torch.int32)]
    (got,) = run_tract_many(out, [[t.numpy() for t in ins]])
    with torch.no_grad():
        want = m(*ins)
    diffs = compare_outputs(None, [t.numpy() for t in want], got, "approximate")
    assert all(d.ok for d in diffs), format_diffs(diffs)


def test_wrapper_module_receives_packed(tmp_path):
    """A packed sequence handed to a user module that calls the RNN inside is traced through it."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 4, batch_first=True)

        def forward(self, packed):
            return self.lstm(packed)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = Encoder()

        def forward(self, x, lengths):
            out, (h, _) = self.enc(nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                                     enforce_sorted=False))
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
            return out, h

    torch.manual_seed(0)
    r = fx2nnef.export(M().eval(), (randn(2, 5, 3), torch.tensor([3, 5])), tmp_path / "w.nnef.tgz",
                       input_names=["x", "lengths"], target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "T"}}))
    assert r.check.ok


# refusals --------------------------------------------------------------------------------
class NoTotalLength(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)

    def forward(self, x, lengths):
        out, _ = self.lstm(nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return out


class PackSequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4)

    def forward(self, a, b):
        out, h = self.gru(nn.utils.rnn.pack_sequence([a, b], enforce_sorted=False))
        return h


class HandBuilt(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4)

    def forward(self, data, batch_sizes):
        out, h = self.gru(nn.utils.rnn.PackedSequence(data, batch_sizes))
        return h


class ReadsPackedData(nn.Module):
    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return packed.data * 2


REFUSALS = [
    ("no_total_length", NoTotalLength(), (randn(2, 5, 3), torch.tensor([3, 5])), r"total_length=x\.shape\[1\]"),
    ("pack_sequence", PackSequence(), (randn(4, 3), randn(2, 3, seed=1)), "pack_sequence of traced tensors"),
    ("hand_built", HandBuilt(), (randn(5, 3), torch.tensor([2, 2, 1])), "packed sequence"),
    ("reads_data", ReadsPackedData(), (randn(2, 5, 3), torch.tensor([3, 5])), "reading its 'data'"),
]


@pytest.mark.parametrize("name,m,args,match", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refused_clearly(name, m, args, match, tmp_path):
    with pytest.raises(fx2nnef.errors.Fx2NnefError, match=match):
        fx2nnef.export(m.eval(), args, tmp_path / "x.nnef.tgz", target=fx2nnef.TractNNEF())


def test_unsorted_example_with_enforce_sorted_fails_as_torch_does(tmp_path):
    m = model(nn.LSTM, 3, 4, batch_first=True, enforce_sorted=True)
    with pytest.raises((RuntimeError, fx2nnef.errors.TraceError), match="sorted"):
        fx2nnef.export(m, (randn(3, 5, 3), torch.tensor([2, 5, 4])), tmp_path / "x.nnef.tgz",
                       target=fx2nnef.TractNNEF())


def test_patches_are_undone():
    import torch.nn.utils.rnn as rnn_utils

    from fx2nnef.fx_tracer.tracing import packed

    assert rnn_utils.pack_padded_sequence is packed._ORIG_PACK
    assert rnn_utils.pad_packed_sequence is packed._ORIG_PAD
    assert imported_pack is packed._ORIG_PACK


class ConstantLengths(nn.Module):
    """Lengths as a Python list (constants of the graph) and an int total_length."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, [4, 2, 5], batch_first=True, enforce_sorted=False)
        out, last = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=5)
        return (out,) + (tuple(last) if isinstance(last, tuple) else (last,))


@pytest.mark.parametrize("target", ["tract", "khronos"])
@pytest.mark.parametrize("rnn_cls", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_constant_lengths(rnn_cls, target, tmp_path):
    """Constant lengths give a constant mask: standard NNEF runs it too (the masked static unroll)."""
    torch.manual_seed(0)
    m = ConstantLengths(rnn_cls(3, 4, batch_first=True, bidirectional=True, num_layers=2)).eval()
    tgt = fx2nnef.TractNNEF() if target == "tract" else fx2nnef.KhronosNNEF()
    r = fx2nnef.export(m, (randn(3, 5, 3),), tmp_path / ("c.nnef.tgz" if target == "tract" else "c"), target=tgt)
    assert r.check.ok
    assert ("tract_" in r.nnef_text) == (target == "tract")


def test_khronos_refuses_lengths_input(tmp_path):
    m = model(nn.GRU, 3, 4, batch_first=True)
    with pytest.raises(fx2nnef.UnsupportedOpError, match="export for tract"):
        fx2nnef.export(m, (randn(2, 5, 3), torch.tensor([3, 5])), tmp_path / "k", target=fx2nnef.KhronosNNEF())
