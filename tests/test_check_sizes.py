"""The sizes check_io runs the asset at: every dynamic axis moves away from the example in some case."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import fx2nnef
from harness import randn


class FrameTable(torch.nn.Module):
    """A table of one row per frame, resized when the clip has another number of frames (TimeSformer's
    time embeddings): at the example's frame count the model takes the other branch."""

    def __init__(self, frames: int = 4, dim: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(1, frames, dim))
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):  # x: (B, T, dim)
        table = self.table
        if x.shape[1] != table.shape[1]:
            table = F.interpolate(table.transpose(1, 2), size=x.shape[1], mode="nearest").transpose(1, 2)
        return self.proj(x + table)


def test_a_graph_traced_again_is_checked_at_other_frame_counts(tmp_path):
    result = fx2nnef.export(FrameTable().eval(), (randn(2, 4, 8),), tmp_path / "m.nnef.tgz", input_names=["x"],
                            target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 1: "T"}}))
    assert any("traced again" in n for n in result.notes), result.notes
    labels = [label for label, _ in result.check.cases]
    # before, every case kept T=4 (the sizes alike the example were sought on the example's side of
    # the frame-count decision, where there are none): tract never ran another frame count
    assert any("T=" in label and "T=4" not in label for label in labels), labels
    assert result.check.ok
