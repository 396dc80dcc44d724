"""Slices, ``narrow`` and ``arange`` whose bounds are read from data (issue 43, class 5):
``x[:int(t)]``, ``x[:n.item()]``, ``x[:lengths.max()]``, ``torch.arange(lengths.max())``,
``x.narrow(0, 1, int(t))``. The bound is traced as a number the graph computes, the window's
length is a count of its own (``tract_onnx_non_zero`` names it), and one asset runs in tract on
inputs whose counts differ, 0 and bounds past the axis among them."""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from harness import FnModule, randn, tract_matches_eager


def _t(*values):
    return torch.tensor(values[0] if len(values) == 1 else list(values))


def _crop_last(x, shape):
    """onnx-diagnostic's CropLastDimensionWithTensorContent."""
    return x[..., :shape[0]]


def _length_mask(x, lengths):
    """torchaudio's Conformer / Emformer pattern: a padding mask sized by the longest length, the
    input cut to it."""
    mask = torch.arange(int(lengths.max().item())) < lengths[:, None]
    return x[:, :int(lengths.max())] * mask[..., None]


CASES = {
    # name: (fn, example, other inputs (counts that differ), dynamic axes)
    "end_from_tensor": (lambda x, n: x[:n] * 2, (randn(6, 3), _t(4)),
                        [(randn(6, 3, seed=1), _t(2)), (randn(6, 3, seed=2), _t(0)), (randn(6, 3), _t(9))], {}),
    "end_from_tensor_arithmetic": (lambda x, n: x[:n - 1] * 2, (randn(6, 3), _t(4)),
                                   [(randn(6, 3, seed=1), _t(2)), (randn(6, 3), _t(1)), (randn(6, 3), _t(8))], {}),
    "start_from_item": (lambda x, n: x[n.item():] + 1, (randn(6, 3), _t(4)),
                        [(randn(6, 3, seed=1), _t(1)), (randn(6, 3), _t(6)), (randn(6, 3), _t(-2))], {}),
    "end_from_int": (lambda x, n: x[:int(n)].exp(), (randn(6, 3), _t(4)),
                     [(randn(6, 3, seed=1), _t(2)), (randn(6, 3), _t(0)), (randn(6, 3), _t(-1))], {}),
    "end_from_max": (lambda x, lengths: x[:, :lengths.max()] * 3, (randn(3, 6), _t(2, 4, 3)),
                     [(randn(3, 6, seed=1), _t(1, 1, 1)), (randn(3, 6), _t(6, 2, 0))], {}),
    "arange_of_max": (lambda x, lengths: (torch.arange(lengths.max())[None, :] < lengths[:, None]).float(),
                      (randn(6, 3), _t(2, 4, 3)), [(randn(6, 3), _t(1, 1, 1)), (randn(6, 3), _t(0, 0, 0)),
                                                   (randn(6, 3), _t(7, 2, 3))], {}),
    "arange_from_to": (lambda x, n: torch.arange(2, n.item(), 3) * 1, (randn(2), _t(9)),
                       [(randn(2), _t(3)), (randn(2), _t(2)), (randn(2), _t(14))], {}),
    "narrow": (lambda x, n: x.narrow(0, 1, int(n)) * 2, (randn(6, 3), _t(4)),
               [(randn(6, 3, seed=1), _t(2)), (randn(6, 3), _t(0)), (randn(6, 3), _t(5))], {}),
    "crop_last_dimension": (_crop_last, (randn(2, 3, 5), _t([3])),
                            [(randn(2, 3, 5, seed=1), _t([1])), (randn(2, 3, 5), _t([5]))], {}),
    "length_mask": (_length_mask, (randn(3, 7, 2), _t(5, 3, 2)),
                    [(randn(3, 7, 2, seed=1), _t(1, 3, 2)), (randn(3, 7, 2), _t(0, 0, 0)),
                     (randn(2, 9, 2), _t(8, 3))], {"x0": {0: "B", 1: "T"}, "x1": {0: "B"}}),
    "dynamic_axis": (lambda x, n: x[:, :int(n)] * 2, (randn(2, 6), _t(4)),
                     [(randn(3, 9), _t(7)), (randn(1, 4), _t(1))], {"x0": {0: "B", 1: "S"}}),
}


@pytest.mark.parametrize("check_io", [True, False])
@pytest.mark.parametrize("name", list(CASES))
def test_bounds_from_data_run_in_tract_at_other_counts(name, check_io, tmp_path):
    fn, example, others, dynamic_axes = CASES[name]
    model = FnModule(fn)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, example, out, input_names=[f"x{i}" for i in range(len(example))],
                   target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes=dynamic_axes))
    assert "tract_onnx_non_zero" in _graph_text(out)  # the count named at run time, not the example's
    sets = [list(example)] + [list(o) for o in others]
    counts = {tuple(fn(*ins).shape) for ins in sets}
    assert len(counts) >= 3, counts  # the example's and two other counts at least
    tract_matches_eager(out, model, sets)


def _mask_against_axis(x, lengths):
    """A mask sized by ``lengths.max()`` used on ``x`` of ``T`` items: torch runs only where the
    longest length is ``T`` (its export asserts ``Eq(u0, T)`` at run time)."""
    mask = torch.arange(lengths.max())[None, :] < lengths[:, None]
    return x * mask[:, :, None]


def test_a_count_broadcast_against_an_axis_is_checked_at_run_time(tmp_path):
    """Written with the axis's size, checked by ``tract_core_dyn_slice`` (``len = 5``): tract fails
    where the longest length differs from the axis, as the model does, never a number of its own."""
    from fx2nnef.errors import TractError
    from fx2nnef.targets.tract_runner import run_tract_many

    model = FnModule(_mask_against_axis)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, (randn(2, 5, 3), _t(5, 3)), out, target=fx2nnef.TractNNEF(check_io=False))
    tract_matches_eager(out, model, [[randn(2, 5, 3), _t(5, 3)], [randn(2, 5, 3, seed=1), _t(2, 5)]])
    with pytest.raises(RuntimeError):
        model(randn(2, 5, 3), _t(2, 4))
    with pytest.raises(TractError, match=r"start \+ len == end"):
        run_tract_many(out, [[randn(2, 5, 3).numpy(), _t(2, 4).numpy()]])


def _padding_mask(lengths):
    """torchaudio's ``_lengths_to_padding_mask`` (Conformer), as written there."""
    batch_size = lengths.shape[0]
    max_length = int(torch.max(lengths).item())
    return torch.arange(max_length, device=lengths.device, dtype=lengths.dtype).expand(
        batch_size, max_length) >= lengths.unsqueeze(1)


@pytest.mark.parametrize("check_io", [True, False])
def test_a_padding_mask_read_against_the_sequence_exports_for_every_length(check_io, tmp_path):
    """Dynamic ``B`` and ``T``: the mask's count is ``T`` wherever the model runs (the longest length);
    the probes hand the lengths input the new ``T`` (its value at the example), tract checks it."""
    def fn(x, lengths):
        return x.masked_fill(_padding_mask(lengths)[:, :, None], 0.0)

    model = FnModule(fn)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, (randn(2, 5, 3), _t(5, 3)), out, input_names=["x", "lengths"],
                   target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B", 1: "T"}, "lengths": {0: "B"}}))
    assert "tract_core_dyn_slice" in _graph_text(out)
    tract_matches_eager(out, model, [[randn(2, 5, 3), _t(2, 5)], [randn(3, 7, 3), _t(2, 7, 1)], [randn(1, 4, 3), _t([4])]])


class _Attention(torch.nn.Module):
    """torchaudio's Conformer layer in short: attention with a padding mask from the lengths, whose
    shape MultiheadAttention compares with (batch, source length) in Python."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, lengths):
        return self.mha(x, x, x, key_padding_mask=_padding_mask(lengths), need_weights=False)[0]


def test_attention_masked_by_lengths_exports_for_every_length(tmp_path):
    """The shape check of the mask reads the count that torch tied to ``T``: a decision on sizes, not
    on data (``data_counts.sized_decisions``)."""
    model = _Attention().eval()
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, (randn(2, 6, 8), _t(6, 4)), out, input_names=["x", "lengths"],
                   target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {0: "B", 1: "T"}, "lengths": {0: "B"}}))
    tract_matches_eager(out, model, [[randn(2, 6, 8, seed=1), _t(3, 6)], [randn(3, 9, 8), _t(9, 2, 5)],
                                     [randn(1, 3, 8), _t([3])]])


def test_a_constant_bound_equal_to_a_number_read_is_kept(tmp_path):
    """``x[:2]`` beside ``int(n)`` of 2 at the example: the retrace that changes the number shows the
    bound does not follow it; the slice stays ``x[:2]`` (and the decision on the number a note)."""
    def fn(x, n):
        return x[:2] * 2 if int(n) > 0 else x[:3]

    model = FnModule(fn)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(model, (randn(6, 3), _t(2)), out, target=fx2nnef.TractNNEF(check_io=False))
    tract_matches_eager(out, model, [[randn(6, 3, seed=1), _t(5)], [randn(6, 3), _t(1)]])


def test_a_data_bound_for_khronos_is_one_clear_error(tmp_path):
    """Standard NNEF has no op that names a count at run time: one line naming the op."""
    with pytest.raises(fx2nnef.errors.UnsupportedOpError, match=r"getitem at .*test_data_bounds.py:\d+: .*cannot carry"):
        fx2nnef.export(FnModule(lambda x, n: x[:n] * 2), (randn(6, 3), _t(4)), tmp_path / "k",
                       target=fx2nnef.KhronosNNEF(check_io=False))


def _graph_text(asset) -> str:
    import tarfile

    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()
