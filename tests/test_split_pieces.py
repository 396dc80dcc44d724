"""Pieces of a split read by position (``fx_tracer/passes/pieces.py``).

``x.split(4, 1)[0]`` on a dynamic S: torch gives ceil(S / 4) pieces, and the tracer records that
count as a decision, so the graph held at the sizes of the same count only (9 <= S <= 12 for S=10).
The code reads the first piece only: it is ``x[:, 0:4]`` at every size. Read so, the export holds
for every size where the piece exists (where it does not, the model fails, and the range says so).
Code that reads every piece (unpacking, a loop over them) or the last one still depends on the
count and keeps its guard. Each export is checked in tract by check_io and run at sizes around the
boundaries.
"""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from harness import FnModule, randn, tract_matches_eager


def _export(fn, x, tmp_path):
    return fx2nnef.export(FnModule(fn), (x,), tmp_path / "a.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))


CASES = [
    # fn, the lowest size the export holds for (the model fails below)
    (lambda x: x.split(4, 1)[0] * 2, 1),
    (lambda x: x.split(4, 1)[1] * 2, 5),
    (lambda x: torch.split(x, 3, dim=1)[2].sum(1), 7),
    (lambda x: x.chunk(2, 1)[0] + 1, 1),
    (lambda x: x.chunk(3, 1)[1].exp(), 2),  # ceil(S / 3) < S
    (lambda x: torch.chunk(x, 2, 1)[1] * 3, 2),
    (lambda x: x.unbind(1)[0] * 2, 1),
    (lambda x: x.unbind(1)[2] + x[:, :1].squeeze(1), 3),
]


@pytest.mark.parametrize("fn, lo", CASES, ids=["split_first", "split_second", "split_third", "chunk_first",
                                               "chunk_second_of_three", "chunk_second", "unbind_first",
                                               "unbind_third"])
def test_a_piece_read_by_position_holds_at_every_size(fn, lo, tmp_path):
    r = _export(fn, randn(2, 10, 3), tmp_path)
    assert r.check.ok
    if lo == 1:
        assert r.ranges == {}, r.ranges
    else:
        assert str(r.ranges["S"]).startswith(f"S >= {lo} "), r.ranges
    assert not any("gives" in g.what for g in r.guards), r.guards  # no guard on the count ("split(...) gives 3 tensors")
    sizes = sorted({lo, lo + 1, 4, 7, 8, 9, 13, 16, 25} - set(range(lo)))
    tract_matches_eager(r.path, FnModule(fn), [[randn(2, s, 3, seed=s)] for s in sizes])


def _unpacked(x):
    a, b, c = x.split(4, 1)
    return a * 2, c


def _last(x):
    return x.split(4, 1)[-1] * 2


@pytest.mark.parametrize("fn", [_unpacked, _last], ids=["unpacked", "last"])
def test_code_that_reads_the_count_keeps_its_guard(fn, tmp_path):
    """Unpacking needs exactly three pieces, and ``[-1]`` is the third at S=10 only: the graph
    holds where the split gives three pieces."""
    r = _export(fn, randn(2, 10, 3), tmp_path)
    assert r.check.ok
    assert str(r.ranges["S"]).startswith("9 <= S <= 12 "), r.ranges
    tract_matches_eager(r.path, FnModule(fn), [[randn(2, s, 3, seed=s)] for s in (9, 11, 12)])
