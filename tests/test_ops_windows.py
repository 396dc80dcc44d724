"""Sliding windows: Tensor.unfold, F.unfold (im2col) and F.fold (col2im), run in tract and the
Khronos interpreter, with static and dynamic sizes."""
from __future__ import annotations

import pytest
import torch.nn.functional as F

from harness import OpCase, randn, run_case

CASES = [
    # a step that divides the window: rows of `step` items
    OpCase("tensor_unfold_half_overlap", lambda x: x.unfold(-1, 4, 2), [randn(2, 3, 17)]),
    OpCase("tensor_unfold_patches", lambda x: x.unfold(2, 4, 4) * 2, [randn(2, 3, 18)]),
    # a step that does not: one strided slice per window position, on a middle axis
    OpCase("tensor_unfold_middle_axis", lambda x: x.unfold(1, 5, 3), [randn(2, 20, 3)]),
    OpCase("tensor_unfold_twice", lambda x: x.unfold(1, 3, 1).unfold(2, 2, 2), [randn(2, 7, 6)]),
    OpCase("im2col_patches", lambda x: F.unfold(x, 2, stride=2), [randn(2, 3, 8, 6)]),
    OpCase("im2col_dilated_padded", lambda x: F.unfold(x, (3, 2), dilation=(2, 1), padding=1, stride=(2, 1)),
           [randn(2, 3, 9, 7)]),
    # a dilation with a unit step: one slice per window position, not rows
    OpCase("im2col_dilated_unit_stride", lambda x: F.unfold(x, 3, dilation=2), [randn(1, 2, 7, 8)]),
    OpCase("im2col_unbatched", lambda x: F.unfold(x, 3, padding=1), [randn(3, 5, 5)]),
    OpCase("col2im_patches", lambda x: F.fold(x, (8, 6), 2, stride=2), [randn(2, 12, 12)]),
    # patches side by side that do not cover the output: zeros at the border
    OpCase("col2im_patches_uncovered", lambda x: F.fold(x, (9, 7), 2, stride=2), [randn(2, 12, 12)]),
    # overlapping windows add up
    OpCase("col2im_overlapping", lambda x: F.fold(x, (9, 7), (3, 2), dilation=(2, 1), padding=1, stride=(2, 1)),
           [randn(2, 18, 32)]),
    OpCase("col2im_unbatched", lambda x: F.fold(x, (5, 5), 3, padding=1), [randn(27, 25)]),
    OpCase("unfold_fold_round_trip", lambda x: F.fold(F.unfold(x, 3, padding=1) * 0.5, (6, 5), 3, padding=1),
           [randn(1, 2, 6, 5)]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_windows_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("tensor_unfold_middle_axis", "im2col_dilated_padded",
                                                                 "col2im_overlapping")], ids=str)
def test_windows_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_framing_of_a_dynamic_length(tmp_path):
    """Audio framing ``x.unfold(-1, 400, 160)`` (25 ms frames every 10 ms at 16 kHz) and
    patches of a dynamic batch: the window count is a floor division of the length."""
    from fx2nnef.targets.tract_runner import run_tract_many

    def frames(x):
        return x.unfold(-1, 400, 160).abs().mean(-1)

    r = run_case(OpCase("frames", frames, [randn(2, 1600)], dynamic_axes={"x0": {0: "B", 1: "T"}}), tmp_path)
    assert r.check.ok
    ins = [randn(1, 400), randn(3, 559), randn(2, 560), randn(1, 4001)]
    for x, got in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        want = frames(x).numpy()
        assert got[0].shape == want.shape
        assert abs(got[0] - want).max() < 1e-5
    patches = OpCase("patches", lambda x: F.fold(F.unfold(x, 2, stride=2).sigmoid(), (8, 6), 2, stride=2),
                     [randn(2, 3, 8, 6)], dynamic_axes={"x0": {0: "B"}})
    assert run_case(patches, tmp_path).check.ok

