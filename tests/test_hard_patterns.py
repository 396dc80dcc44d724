"""The remaining hard patterns of issue 9: as_strided, torch.vmap, mask assignment, slice bounds
read from tensor content. Each exports and is checked in tract (check_io at the example and,
with a dynamic dim, at other sizes), or fails with an error naming the construct and its line.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many
from fx2nnef.errors import TraceError
from harness import FnModule, check_op, randn

from test_data_branches import _run_more


def _export(fn, inputs, tmp_path, dyn=None, module=None):
    names = [f"x{i}" for i in range(len(inputs))]
    tgt = fx2nnef.TractNNEF(check_io=True, dynamic_axes=dyn or {})
    return fx2nnef.export(module if module is not None else FnModule(fn), tuple(inputs), tmp_path / "a.nnef.tgz",
                          target=tgt, input_names=names)


# as_strided --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,args,how", [
    ((4, 6), ((6, 4), (1, 6)), "permuted"),  # a transpose
    ((2, 3, 4), ((3, 2, 4), (4, 12, 1)), "permuted"),  # a permute of a 3-d tensor
    ((4, 6), ((2, 3), (6, 2), 1), "permuted"),  # a strided slice with an offset
    ((4, 6), ((3, 8), (8, 1)), "a slice of the flat tensor"),  # a reshape
    ((4, 6), ((5,), (1,), 7), "a slice of the flat tensor"),  # a contiguous run
    ((10,), ((4, 4), (2, 1)), "unfold"),  # every overlapping window that fits: the framing idiom
    ((10,), ((3, 4), (2, 1)), "gather"),  # overlapping windows, not all of them
    ((4, 6), ((3, 6), (0, 1)), "gather"),  # a broadcast row
], ids=["transpose", "permute3d", "strided_slice", "reshape", "run", "windows", "some_windows", "broadcast"])
def test_as_strided(shape, args, how, tmp_path):
    x = randn(*shape)
    r = check_op(lambda t: t.as_strided(*args) * 2, [x], tmp_path)
    assert r.check.ok and any("as_strided" in n and how in n for n in r.notes), r.notes


def test_as_strided_frames_of_a_dynamic_length(tmp_path):
    """Framing code (``librosa.util.frame``-style): windows of 4 every 2 over a dynamic T, the
    number of frames computed from T. That is unfold, valid for every T that holds a window
    (before: the positions were constants, and the check failed at another length)."""
    def frames(x):
        b, t = x.shape
        return x.contiguous().as_strided((b, (t - 4) // 2 + 1, 4), (t, 2, 1)).sum(-1)
    r = _export(frames, [randn(2, 12)], tmp_path, {"x0": {1: "T"}})
    assert r.check.ok and r.ranges["T"].lo == 4 and r.ranges["T"].hi is None, r.ranges
    ins = [randn(2, n, seed=n) for n in (4, 5, 31)]
    for x, g in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        np.testing.assert_allclose(g[0], frames(x).numpy(), atol=1e-4, rtol=5e-4)


@pytest.mark.parametrize("check_io", [True, False])
def test_as_strided_windows_whose_count_and_length_read_alike(tmp_path, check_io):
    """Windows of 3 every item, ``T - 2`` of them, both axes of stride 1, read from a tensor with
    an axis of 1 (the rows of ``(1, 2, T)``): at T=4 there are 2 windows of 3 or, read the other
    way, 3 windows of 2 (the same items there), and the other reading was taken, an unfold of 2
    items that gave 2 windows of T - 1 at every other T, silently without check_io. The length is
    the size the model did not compute from T; a length the model computed from T is a decision
    (below)."""
    def windows(x):
        t = x.shape[-1]
        return x.contiguous().as_strided((2, t - 2, 3), (t, 1, 1)) * 2
    r = fx2nnef.export(FnModule(windows), (randn(1, 2, 4),), tmp_path / "a.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x0": {2: "T"}}))
    assert r.ranges["T"].lo == 3 and r.ranges["T"].hi is None, r.ranges
    assert any("windows of 3 every 1" in n for n in r.notes), r.notes
    ins = [randn(1, 2, n, seed=n) for n in (3, 4, 6, 11)]
    for x, g in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        np.testing.assert_allclose(g[0], windows(x).numpy(), atol=1e-4, rtol=5e-4)


def test_an_unused_as_strided_of_sizes_decides_nothing(tmp_path):
    """An ``as_strided`` of sizes computed from S whose result nothing uses (fuzz 30250, 31184):
    the numbers it read decided nothing in the graph, and the export holds for every S (it was
    valid at the example only). Used, the same call still bounds the range (the test below)."""
    def unused(x):
        v1 = x.transpose(0, 1)
        x.exp_()
        v1.contiguous().as_strided((2, 1, (v1.shape[2] - 2) // 2 + 1, 2), (v1.shape[2], v1.shape[2], 2, 1))
        return torch.fliplr(x >= 0.43), x, v1
    r = fx2nnef.export(FnModule(unused), (randn(1, 2, 7),), tmp_path / "a.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {2: "S"}}))
    assert r.check.ok and not r.ranges, r.ranges
    assert not any("as_strided" in g.what for g in r.guards), r.guards
    ins = [randn(1, 2, n, seed=n) for n in (2, 6, 11)]
    for x, g in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        for got, want in zip(g, unused(x.clone())):
            np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=5e-4)


def test_as_strided_windows_of_a_length_computed_from_a_size_are_a_decision(tmp_path):
    def windows(x):
        t = x.shape[-1]
        return x.contiguous().as_strided((2, 3, t - 2), (t, 1, 1)) * 2
    with pytest.raises(fx2nnef.GuardError, match=r"as_strided reads .* as a window length"):
        _export(windows, [randn(2, 4)], tmp_path, {"x0": {1: "T"}})


def test_as_strided_with_positions_from_a_dynamic_size_is_bounded_to_them(tmp_path):
    """A view other than windows (every other item, ``T // 2`` of them) keeps the example's
    positions: the sizes it reads are decisions, and the export says it holds at the example's
    length only, with the line (before: claimed for every T, the check failed at T=15)."""
    def every_other(x):
        b, t = x.shape
        return x.contiguous().as_strided((b, t // 2), (t, 2)) * 2
    with pytest.raises(fx2nnef.GuardError, match=r"as_strided reads .* as a number"):
        _export(every_other, [randn(2, 12)], tmp_path, {"x0": {1: "T"}})


def test_as_strided_function_form(tmp_path):
    r = check_op(lambda t: torch.as_strided(t + 1, (3, 2), (1, 3)), [randn(2, 3)], tmp_path)
    assert r.check.ok


def test_as_strided_of_a_transposed_view_is_refused(tmp_path):
    with pytest.raises(TraceError, match=r"as_strided at .*test_hard_patterns.py:\d+(.|\n)*not its logical order"):
        _export(lambda t: t.t().as_strided((2, 2), (1, 2)), [randn(3, 4)], tmp_path)


def test_as_strided_outside_the_tensor_is_refused(tmp_path):
    with pytest.raises(TraceError, match=r"as_strided at .*test_hard_patterns.py:\d+(.|\n)*outside the tensor"):
        _export(lambda t: t[1:].as_strided((3,), (1,), 0), [randn(4)], tmp_path)


# torch.vmap ---------------------------------------------------------------------------------------
class VmapLinear(torch.nn.Module):
    """vmap over the batch of a function that reads a submodule, a non-mapped input and a kwarg."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, bias):
        def per_row(row, b, scale=1.0):
            h = self.lin(row) + b
            return h * h.sum() * scale, row.amax()

        return torch.vmap(per_row, in_dims=(0, None))(x, bias, scale=0.5)


def test_vmap_as_scan_dynamic_batch(tmp_path):
    model = VmapLinear()
    x, b = randn(5, 4), randn(3, seed=1)
    r = _export(None, [x, b], tmp_path, {"x0": {0: "N"}}, module=model)
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    assert any("torch.vmap" in n and "scan" in n for n in r.notes), r.notes
    _run_more(r, model, [[x[:2], b], [x.repeat(2, 1), b]])


def test_vmap_in_and_out_dims(tmp_path):
    from torch.func import vmap

    def fn(x):
        return vmap(lambda col: col.softmax(0) * col.sum(), in_dims=1, out_dims=1)(x)

    r = _export(fn, [randn(3, 5)], tmp_path, {"x0": {1: "N"}})
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    model = FnModule(fn)
    _run_more(r, model, [[randn(3, 2)], [randn(3, 9)]])


# mask assignment ----------------------------------------------------------------------------------
def _mask_fill(x):
    y = x.clone()
    y[y.to(bool)] = 5.0
    return y


def _mask_from_other(x, v):
    y = x * 2
    y[x > 0] = v  # a rank-0 tensor input
    y[(x < -1).to(torch.bool)] = 1.0
    return y


def _mask_add(x, z):
    y = x * 2
    y[x > 0] += 1.0
    return y


def _mask_expression(x, z):
    y = x * 2
    y[y < -1] = y[y < -1] * z[y < -1] + 0.5  # three equal masks, two selections and a number
    return y


def _mask_rows(x, z):
    y = x * 2
    y[x[:, 0] > 0] *= torch.tensor([1.0, 2.0, 3.0])  # a row mask and a trailing-dims operand
    return y


def _mask_copy(x, z):
    y = x.clone()
    m = x > 0
    y[m] = z[m]
    return y


@pytest.mark.parametrize("fn", [_mask_add, _mask_expression, _mask_rows, _mask_copy],
                         ids=["iadd", "expression", "rows", "copy"])
def test_mask_read_modify_write(fn, tmp_path):
    """``y[m] op= v`` and ``y[m] = f(y[m], z[m])``: computed on whole tensors and selected."""
    inputs = [randn(4, 3), randn(4, 3, seed=1)]
    r = _export(fn, inputs, tmp_path, {"x0": {0: "N"}, "x1": {0: "N"}})
    assert r.check.ok and len(r.check.cases) >= 3 and "select" in r.nnef_op_counts, r
    _run_more(r, FnModule(fn), [[randn(2, 3, seed=5), randn(2, 3, seed=6)], [randn(7, 3, seed=7), randn(7, 3, seed=8)]])


def test_masked_updates_pass_structure():
    """The pass leaves no data-sized selection and computes what the model computes."""
    import operator

    from fx2nnef.fx_tracer.passes import masked_updates, remove_inplace
    from fx2nnef.fx_tracer.tracing.tracer import trace_model

    x, z = randn(4, 3), randn(4, 3, seed=1)
    trace = trace_model(FnModule(_mask_expression), (x, z), {}, ["x", "z"])
    remove_inplace(trace.gm)
    assert masked_updates(trace.gm)
    targets = [n.target for n in trace.gm.graph.nodes]
    assert operator.getitem not in targets and torch.where in targets, trace.gm.graph
    torch.testing.assert_close(trace.gm(x, z)[0], _mask_expression(x, z))
    assert not masked_updates(trace.gm)


def test_mask_write_of_a_reduction_is_a_clear_error(tmp_path):
    """``y[m] = y[m].softmax(0)`` mixes the selected items: the read is exported (its count a symbol,
    tests/test_data_sizes.py), the write of as many values is refused with the line."""
    def fn(x):
        y = x * 2
        y[x > 0] = y[x > 0].softmax(0)
        return y

    with pytest.raises(fx2nnef.UnsupportedOpError, match=r"test_hard_patterns.py:\d+: x\[mask\] = tensor needs a "
                                                         r"value with one element"):
        _export(fn, [randn(4, 3)], tmp_path)


# slice bounds read from tensor content ------------------------------------------------------------
@pytest.mark.parametrize("fn,what", [
    (lambda x, n: x[: n.item() + 1], r"slice bound or index .*x\[: n\.item\(\) \+ 1\]"),
    (lambda x, n: x.view(n.item(), -1), r"view\(\) size .*x\.view\(n\.item\(\), -1\)"),
], ids=["item_arithmetic", "view"])
def test_bound_from_tensor_content_is_refused(fn, what, tmp_path):
    with pytest.raises(TraceError, match=what + r"(.|\n)*torch\.where\(torch\.arange"):
        _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)


@pytest.mark.parametrize("fn", [lambda x, n: x[: n.item()], lambda x, n: x[: n], lambda x, n: x.narrow(0, 0, n)],
                         ids=["item", "tensor", "narrow"])
def test_bound_from_tensor_content_exports_with_its_count(fn, tmp_path):
    """The bound itself read by the graph (see test_data_bounds.py): right at other bounds."""
    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path)
    assert r.check.ok
    _run_more(r, FnModule(fn), [[randn(4, 3, seed=1), torch.tensor(3)], [randn(4, 3), torch.tensor(1)]])


def test_bound_as_a_mask_exports(tmp_path):
    """What the error suggests: keep the size, mask the rows past the bound."""
    def fn(x, n):
        keep = torch.arange(x.size(0)).unsqueeze(1) < n
        return torch.where(keep, x, torch.zeros_like(x))

    r = _export(fn, [randn(4, 3), torch.tensor(2)], tmp_path, {"x0": {0: "N"}})
    assert r.check.ok
    _run_more(r, FnModule(fn), [[randn(6, 3), torch.tensor(5)], [randn(2, 3), torch.tensor(0)]])
