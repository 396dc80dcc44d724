"""Routes torch takes on plain tensors only (a traced value never does), reproduced in the export."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many


class Encoder(nn.Module):
    def __init__(self, batch_first=True, mask_check=True, layers=2):
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=True, mask_check=mask_check)
        self.batch_first = batch_first
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


def _masks(batch, seq, dtype):
    """Padding at the end (torch packs: zeros there), none, and one at the start (torch does not)."""
    end = torch.zeros(batch, seq, dtype=torch.bool)
    end[1, seq - 2:] = True
    start = torch.zeros(batch, seq, dtype=torch.bool)
    start[0, 0] = True
    out = []
    for m in (end, torch.zeros(batch, seq, dtype=torch.bool), start):
        out.append(m if dtype == torch.bool else torch.zeros(batch, seq).masked_fill(m, float("-inf")))
    return out


@pytest.mark.parametrize("batch_first, mask_check, dtype", [
    (True, True, torch.bool), (False, True, torch.bool), (True, True, torch.float32)])
def test_encoder_padded_positions_are_zero_as_in_torchs_nested_route(tmp_path, batch_first, mask_check, dtype):
    """nn.TransformerEncoder with a padding mask, in inference: torch packs the sequences into a
    nested tensor and gives 0 at every padded position (when each row is padded at its end, with
    ``mask_check``); the traced route computes them. The export selects like torch, from the mask
    given at run time (before: the check failed with 2.16 at the padded positions, reported with a
    dynamic size as "a decision on dynamic dims")."""
    model = Encoder(batch_first, mask_check).eval()
    seq, batch = 5, 2
    masks = _masks(batch, seq, dtype)
    x = torch.randn((batch, seq, 8) if batch_first else (seq, batch, 8))
    r = fx2nnef.export(model, (x, masks[0]), tmp_path / "m.nnef.tgz", input_names=["x", "pad"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1 if batch_first else 0: "S"}, "pad": {1: "S"}}))
    assert r.check.ok and not r.ranges
    cases = []
    for n in (3, 7):
        xn = torch.randn((batch, n, 8) if batch_first else (n, batch, 8))
        cases += [(xn, m) for m in _masks(batch, n, dtype)]
    got = run_tract_many(r.path, [[c[0].numpy(), c[1].numpy()] for c in cases])
    zeroed = 0
    for (xn, m), g in zip(cases, got):
        with torch.no_grad():
            e = model(xn, m).numpy()
        np.testing.assert_allclose(g[0], e, atol=1e-4, rtol=5e-4)
        zeroed += int((e == 0).all(-1).sum())
    # torch's packed route was taken at some of these masks (batch-first sequences only)
    assert (zeroed > 0) == batch_first


def test_graph_unlike_the_model_on_the_example_is_not_called_a_size_decision(tmp_path, monkeypatch):
    """A traced graph that differs from the model on the very example inputs (here: the encoder's
    packed route left out) is no decision on a dynamic size: the error says what it is and where
    to look (before: "the trace took decisions on dynamic dims {'S': 5} that do not hold")."""
    import fx2nnef.fx_tracer.tracing.tracer as tracer

    monkeypatch.setattr(tracer, "reproduce_fast_path", lambda m, args, kwargs, out: out)
    pad = _masks(2, 5, torch.bool)[0]
    with pytest.raises(fx2nnef.TraceError, match=r"does not reproduce the model on the example inputs "
                                                 r"\(output 0 differs from the model by .*diagnose") as info:
        fx2nnef.export(Encoder().eval(), (torch.randn(2, 5, 8), pad), tmp_path / "m.nnef.tgz",
                       input_names=["x", "pad"], target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}, "pad": {1: "S"}}))
    assert not isinstance(info.value, fx2nnef.GuardError)
    assert not list(tmp_path.iterdir())
