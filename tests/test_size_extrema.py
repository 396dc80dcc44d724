"""``max`` and ``min`` of sizes, and slices that torch clamps to the axis, at every size.

``max(1, S // 2)`` items, ``min(S, window)``, ``x[:, :7]`` of an axis shorter than 7 at some sizes:
read as Python numbers, each was a decision on the size whose flip bounded the range (or a
refusal, for clamped slices). They are now written as tract reads them (``max(S/2,1)`` in a
slice's bounds, a reshape's shape, a range's end). Every export here is checked by check_io, then
run in tract at every size from 1 and compared with eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from fx2nnef.ir.dims import SymDim, SymRange, settle_extrema
from harness import FnModule, tract_matches_eager


def _half(x):
    return x[:, :max(1, x.shape[1] // 2)] * 2


def _last_four(x):  # counted from the end: x[:, -min(S, 4):]
    n = min(x.shape[1], 4)
    return x[:, -n:].sum(1, keepdim=True) + x


def _narrow_third(x):
    return x.narrow(1, 0, max(1, x.shape[1] // 3)).cumsum(1)


def _zeros_beside(x):  # a factory's size
    return torch.cat([x, torch.zeros(x.shape[0], min(x.shape[1], 5))], 1)


def _from_three(x):  # the begin min(S, 3): nothing left of x at S <= 3, the first item still there
    n = x.shape[1]
    return torch.cat([x[:, min(n, 3):], x[:, :1]], 1) + 1


def _arange(x):  # the extremum as a tensor's length and as the number of a range
    k = min(x.shape[1], 4)
    return x[:, :k] * torch.arange(k)


def _three_args(x):  # max of three, one a size: max(2, S // 4) items of at least 2
    return x[:, :max(2, x.shape[1] // 4, 1)].exp()


def _clamped_end(x):  # no min() in the code: torch clamps the end 7 to the axis (fuzz 10806)
    return x[:, 2:7].softmax(1) if x.shape[1] > 2 else x


def _clamped_begin(x):  # x[:, -3:] of an axis shorter than 3 starts at 0
    return x[:, -3:] * 3


def _settled(x):  # the range is S >= 10 (the outcomes differ in shape): min(8, S) is 8 there
    return x[:, 1:8] * 2 if x.shape[1] > 9 else x[:, :2]


def _in_place_on_clamped(x):  # fuzz 25078: the region written is min(2, S) items, as the view read
    v = x[:, :2]
    v.neg_()
    return v, x


def _assigned_clamped(x):  # fuzz 25068
    x = x.clone()
    x[:, :3] = x[:, :3] * 2
    return x


def _reshaped(x):  # max() in a reshape's shape
    return x[:, :max(1, x.shape[1] // 2)].reshape(-1, max(1, x.shape[1] // 2), 1).tanh()


def _diagonals(x):  # diagonals of an S x 4 matrix: min(S, 4), min(S, 3) and min(S-1, 4) items (fuzz 11325)
    m = x.unsqueeze(-1) * torch.arange(1.0, 5.0) + x[:, :1, None]
    return torch.diagonal(m, 0, 1, 2).exp(), m.diagonal(1, 1, 2) * 2, m.diagonal(-1, 1, 2) - 1


CASES = [
    ("half", _half, 1),
    ("last_four", _last_four, 1),
    ("narrow_third", _narrow_third, 1),
    ("zeros_beside", _zeros_beside, 1),
    ("from_three", _from_three, 1),
    ("arange", _arange, 1),
    ("three_args", _three_args, 2),  # x[:, :2] at S=1 has 1 item, which max(2, 0) is not
    ("clamped_end", _clamped_end, 3),  # min(7, S) items; the `if` flips at S=2 to another shape
    ("clamped_begin", _clamped_begin, 1),  # x[:, max(S-3,0):]
    ("reshaped", _reshaped, 1),
    ("settled", _settled, 10),
    ("in_place_on_clamped", _in_place_on_clamped, 1),
    ("assigned_clamped", _assigned_clamped, 1),
    ("diagonals", _diagonals, 1),  # at S=1 the third is empty, in tract as in torch
]


@pytest.mark.parametrize("name,fn,lo", CASES, ids=[c[0] for c in CASES])
def test_extremum_of_sizes_holds_at_every_size(name, fn, lo, tmp_path):
    model = FnModule(fn)
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert r.check.ok
    got = r.ranges.get("S")
    assert (got.lo if got is not None else None) == (lo if lo > 1 else None), r.ranges
    assert got is None or got.hi is None, r.ranges
    sizes = range(lo, 15)
    tract_matches_eager(r.path, model, [[torch.randn(2, n, generator=torch.Generator().manual_seed(n))]
                                        for n in sizes])


def test_extremum_of_two_symbols(tmp_path):
    """A square crop of an image of H x W: min over a tuple of sizes, ``min(x.shape[1:])``."""
    def fn(x):
        s = min(x.shape[1:])
        return x[:, :s, :s] + x[:, :1, :1]
    model = FnModule(fn)
    x = torch.randn(2, 6, 9, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "H", 2: "W"}}))
    assert not r.ranges and r.check.ok
    sets = [[torch.randn(2, h, w, generator=torch.Generator().manual_seed(h * 31 + w))]
            for h, w in [(1, 1), (1, 5), (5, 1), (3, 7), (7, 3), (4, 4), (9, 2)]]
    tract_matches_eager(r.path, model, sets)


def test_python_loop_over_an_extremum_rolls(tmp_path):
    """``range(max(1, S // 2))``: the loop's count is the extremum, rolled into a scan."""
    def fn(x):
        return torch.stack([x[i] * (i + 1) for i in range(max(1, x.shape[0] // 2))])
    model = FnModule(fn)
    r = fx2nnef.export(model, (torch.randn(6, 3),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "S"}}))
    assert not r.ranges and any("rolled into a scan" in n for n in r.notes), (r.ranges, r.notes)
    tract_matches_eager(r.path, model, [[torch.randn(n, 3, generator=torch.Generator().manual_seed(n))]
                                        for n in range(1, 11)])


def test_max_of_data_stays_a_decision(tmp_path):
    """``max`` of a number read from data is no size: it stays the builtin's (a read of data),
    and ``max`` of plain numbers or of tensors is untouched."""
    def fn(x):
        k = max(int((x > 0).sum()), 1)
        return x * k * max(2, 3) + max(x.sum(), x.mean())
    with pytest.raises(fx2nnef.TraceError, match="comes from tensor content"):
        fx2nnef.export(FnModule(fn), (torch.randn(2, 6),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))


def test_extremum_dims_evaluate_and_compare():
    S, T = SymDim.symbol("S"), SymDim.symbol("T")
    a = SymDim.extremum(max, SymDim.floordiv(S, 2), 1)
    assert a == SymDim.extremum(max, 1, SymDim.floordiv(S, 2))
    assert [a.evaluate({"S": n}) for n in range(1, 6)] == [1, 1, 1, 2, 2]
    assert SymDim.extremum(min, S + 2, S) == S and SymDim.extremum(max, 3, 5) == 5
    b = 2 * SymDim.extremum(min, S, T) + 1
    assert b.evaluate({"S": 4, "T": 2}) == 5 and b.input_symbols == {"S", "T"}
    assert str(a).replace(" ", "") in ("max(((S)/2),1)", "max(1,((S)/2))")
    at_least = {"S": SymRange("S", lo=7), "T": SymRange("T", hi=3)}
    assert settle_extrema(SymDim.extremum(min, 7, S), at_least) == 7
    assert settle_extrema(SymDim.extremum(max, S - 3, 0), at_least) == S - 3
    assert settle_extrema((2, SymDim.extremum(min, S, T) + 1), at_least) == (2, T + 1)
    assert settle_extrema(SymDim.extremum(min, 9, S), at_least) == SymDim.extremum(min, 9, S)


def _chunks(width):
    def fn(x):  # CANINE's local attention: chunks of `width` from position 1, the last one cut at S
        n = x.shape[1]
        out = [x[:, :1]]
        for start in range(1, n, width):
            out.append(x[:, start:min(n, start + width)].softmax(1))
        return torch.cat(out, 1)
    return fn


@pytest.mark.parametrize("width,lo,hi,sizes", [(32, None, 33, [1, 2, 5, 20, 33]), (8, 9, 17, [9, 10, 13, 17])])
def test_a_loop_over_chunks_holds_where_it_runs_as_many_steps(width, lo, hi, sizes, tmp_path):
    """``for start in range(1, S, width)``: the decision is how many steps the loop runs (one for
    S <= 33 at width 32, two for 10 <= S <= 17 at width 8), not the number S read; where the last
    step's chunk is empty (S=1, S=9) the graph still gives the model's outputs, in tract too.
    ``min()`` in the loop's body stays a decision per step. Before: the bound of the range was read
    as consumed by the min() after it, and the export refused the clamped slice."""
    model = FnModule(_chunks(width))
    r = fx2nnef.export(model, (torch.randn(2, 11, 3),), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert (r.ranges["S"].lo, r.ranges["S"].hi) == (lo, hi), r.ranges
    tract_matches_eager(r.path, model, [[torch.randn(2, n, 3, generator=torch.Generator().manual_seed(n))]
                                        for n in sizes])


def test_extremum_in_code_made_by_exec(tmp_path):
    """A model class made by ``exec`` (generated code, a template) has no module in sys.modules:
    its methods' globals are where ``max`` is read. Without any source to look through, ``max``
    and ``min`` are still stood in (no code needs the real ones), ``int`` is not."""
    source = ("import torch\n"
              "class Gen(torch.nn.Module):\n"
              "    def forward(self, x):\n"
              "        return x[:, :max(1, x.shape[1] // 2)].cumsum(1)\n")
    namespace = {"__name__": "generated_model"}
    exec(compile(source, "<generated>", "exec"), namespace)  # noqa: S102 - the test's own code
    model = namespace["Gen"]()
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {1: "S"}}))
    assert not r.ranges and r.check.ok, r.ranges  # S >= 2 when max() was read as a decision
    assert "max" not in namespace  # the stand-in is gone after the export
    tract_matches_eager(r.path, model, [[torch.randn(2, n, generator=torch.Generator().manual_seed(n))]
                                        for n in range(1, 9)])
