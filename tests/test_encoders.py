"""Patterns of text encoders (benchmarks/survey_encoders.py), exported with a dynamic batch B and
length S and checked in tract at the example and at other sizes of both."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import FnModule, randn

DYN = {0: "B", 1: "S"}


def _export(fn, inputs, tmp_path, names, **params):
    r = fx2nnef.export(FnModule(fn, **params), tuple(inputs), tmp_path / "m.nnef.tgz", input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes={n: DYN for n in names}))
    sizes = {label for label, _ in r.check.cases}
    assert r.check.ok and len(sizes) >= 3, sizes  # the example and one size below and one above it
    return r


def _chunk(x, w):
    """Longformer's overlapping chunks: ``x`` [BH, S, d] viewed as [BH, S / 2w, 2w, d], read with the
    chunk stride halved: chunks of 2w items every w items."""
    x = x.view(x.size(0), torch.div(x.size(1), 2 * w, rounding_mode="trunc"), 2 * w, x.size(2))
    size = list(x.size())
    size[1] = size[1] * 2 - 1
    stride = list(x.stride())
    stride[1] = stride[1] // 2
    return x.as_strided(size=size, stride=stride)


def test_overlapping_chunks_of_a_transposed_view(tmp_path):
    """as_strided on a view whose memory order is not its logical order (heads merged into the batch
    after a transpose, as Longformer does); before: its sizes and strides read as numbers (valid at the
    example sizes only; Longformer itself refused: "reads the memory of a tensor whose layout is not its
    logical order"), now windows along the length in memory order, for every B and S."""
    w, heads = 2, 2

    def f(q):  # q: [B, S, heads * d], S a multiple of 2w (Longformer pads it so)
        b, s, _ = q.shape
        q = q.transpose(0, 1).reshape(s, b, heads, -1)  # Longformer's [S, B, H, d] projections
        q = q.transpose(0, 1).transpose(1, 2).reshape(b * heads, s, -1)  # a view, not contiguous
        return _chunk(q, w) * 2.0

    r = _export(f, [randn(2, 12, 8)], tmp_path, ["q"])
    assert str(r.ranges["S"]).startswith("S >= 1, S % 4 == 0"), r.ranges  # torch's view refuses the others


def test_overlapping_value_chunks_along_the_middle_axis(tmp_path):
    """as_strided of a contiguous tensor reading windows along a middle axis (Longformer's value
    chunks: 3w items every w); before: constant positions, valid at the example length only."""
    w = 2

    def f(v):  # v: [B, S, d] with S a multiple of w
        b, s, d = v.shape
        v = F.pad(v, (0, 0, (w - s % w) % w + w, w), value=-1.0)
        n = torch.div(v.size(1) - 2 * w, w, rounding_mode="trunc")
        stride = v.stride()
        return v.as_strided(size=(b, n, 3 * w, d), stride=(stride[0], w * stride[1], stride[1], stride[2])) + 1.0

    r = _export(f, [randn(2, 10, 4)], tmp_path, ["v"])
    assert not r.ranges, r.ranges


def test_transposed_view_read_in_memory_order(tmp_path):
    """as_strided of a transposed view that reads its memory in order (the tensor before the
    transpose, its last axis split in two): a permute and reshapes of the axes in memory order, at
    every B and S (before: refused, "not its logical order")."""
    def f(x):  # x: [B, S, 4]
        t = x.transpose(1, 2)  # [B, 4, S], strides (4S, 1, 4)
        s = t.size(2)
        return t.as_strided((t.size(0), s, 2, 2), (4 * s, 4, 2, 1)) * 3.0

    _export(f, [randn(2, 6, 4)], tmp_path, ["x"])


def test_nonzero_coordinates_meeting_a_tensor_sized_by_the_true_items_is_refused_clearly(tmp_path):
    """Longformer's global attention: ``out[local] = x[cond.nonzero(as_tuple=True)]`` with ``out`` sized by
    the count of true items. fx2nnef lists every coordinate of a nonzero; where that list meets a tensor
    sized by the true items the example fails: the error names both lines and what to do (before: a
    tuple-valued index crashed the tracer, "'tuple' object has no attribute 'dtype'", or the example
    was said not to run eagerly)."""
    def f(x):  # x: [B, S]
        found = (x > 0).nonzero(as_tuple=True)
        out = torch.zeros(int((x > 0).sum()), 2)
        out[:, 0] = x[found]
        return out.sum() + x

    with pytest.raises(fx2nnef.TraceError, match=r"'_*setitem_*' at .*test_encoders.py:\d+(.|\n)*reads the coordinates "
                                                 r"given by nonzero/where\(cond\) at .*test_encoders.py:\d+"):
        _export(f, [randn(2, 6)], tmp_path, ["x"])
