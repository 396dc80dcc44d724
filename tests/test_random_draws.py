"""A forward that draws random numbers: the error names the draw and its line, a draw kept in
the graph is noted, and dropout switched off for inference adds nothing."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import TraceError, UnsupportedOpError
from harness import randn

DYN = fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}})


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("name, fn, error, called", [
    ("dropout", lambda x: F.dropout(x, 0.5, training=True), TraceError, "F.dropout"),
    ("randn_like", lambda x: x + torch.randn_like(x), TraceError, "torch.randn_like"),
    ("randperm", lambda x: x[:, torch.randperm(4)], TraceError, "torch.randperm"),
    ("normal_", lambda x: x + torch.empty(4).normal_(), TraceError, "Tensor.normal_"),
    ("rand_by_size", lambda x: x + 1e-9 * torch.rand(x.shape[0], 4), UnsupportedOpError, "torch.rand"),
])
def test_a_random_draw_is_named_with_its_line(tmp_path, name, fn, error, called):
    with pytest.raises(error) as info:
        fx2nnef.export(Fn(fn), (randn(2, 4),), tmp_path / "m.nnef.tgz", input_names=["x"], target=DYN)
    message = str(info.value)
    assert "draws random numbers" in message and called in message, message
    assert "test_random_draws.py" in message  # the line of the draw
    assert not list(tmp_path.iterdir())  # nothing left on disk
    # the watched functions are torch's own again
    assert torch.rand.__module__ != "fx2nnef.fx_tracer.random_draws"
    assert "normal_" not in torch.Tensor.__dict__ and F.dropout.__module__ == "torch.nn.functional"


def test_a_draw_kept_in_the_graph_is_noted(tmp_path):
    model = Fn(lambda x: x * (1 + 1e-9 * torch.rand(4)))
    result = fx2nnef.export(model, (randn(2, 4),), tmp_path / "m.nnef.tgz", input_names=["x"], target=DYN)
    notes = [n for n in result.notes if "random" in n]
    assert len(notes) == 1 and "torch.rand at" in notes[0] and "example's values" in notes[0], result.notes


def test_dropout_off_for_inference_adds_no_note(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = torch.nn.Dropout(0.2)
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = F.dropout(self.drop(self.lin(x)), 0.1, training=self.training)
            return F.dropout(y, p=0.0) + F.dropout(y, p=0.3, training=False)

    model = M().train()  # export runs the model in eval mode
    result = fx2nnef.export(model, (randn(2, 4),), tmp_path / "m.nnef.tgz", input_names=["x"], target=DYN)
    assert result.check.ok and not [n for n in result.notes if "random" in n], result.notes
    assert model.training  # given back as it came
