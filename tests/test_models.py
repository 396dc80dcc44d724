"""Whole models exported and checked in tract (and the Khronos target where the ops are standard)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama
from fx2nnef.targets.tract_runner import run_tract
from harness import export_and_run_with_kv_cache, randn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d((1, 1)))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class AudioNet(nn.Module):
    """1-D conv net over time, as for keyword spotting."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(13, 32, 5, padding=2)
        self.bn1 = nn.BatchNorm1d(32)
        self.conv2 = nn.Conv1d(32, 32, 3, padding=1, groups=4)
        self.conv3 = nn.Conv1d(32, 16, 1)
        self.out = nn.Linear(16, 6)

    def forward(self, feats):
        h = torch.relu(self.bn1(self.conv1(feats)))
        h = torch.relu(self.conv2(h)) + h
        h = self.conv3(h).mean(dim=-1)
        return torch.log_softmax(self.out(h), dim=-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.fc(out[:, -1]), h


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 12, bidirectional=True)
        self.fc = nn.Linear(24, 3)

    def forward(self, x):
        out, h = self.rnn(x)
        return self.fc(out)


def _init_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


MODELS = {
    "mlp": (lambda: MLP(), lambda: (randn(4, 16),), {"x": {0: "B"}}),
    "cnn": (lambda: _init_bn(CNN()), lambda: (randn(2, 3, 16, 16),), {"x": {0: "B"}}),
    "audio": (lambda: _init_bn(AudioNet()), lambda: (randn(2, 13, 40),), {"feats": {2: "T"}}),
    "transformer_encoder": (lambda: Encoder().eval(), lambda: (randn(2, 7, 32),), {"x": {1: "S"}}),
    "lstm": (lambda: LSTMNet(), lambda: (randn(2, 5, 8),), None),
    "gru": (lambda: GRUNet(), lambda: (randn(6, 2, 8),), None),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_tract(name, tmp_path):
    make, inputs, dyn = MODELS[name]
    torch.manual_seed(0)
    model = make()
    r = fx2nnef.export(model, inputs(), tmp_path / f"{name}.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn or {}))
    assert r.check.ok
    assert (len(r.check.cases) >= 3 if dyn else len(r.check.cases) == 1)  # example, one size below, one above


@pytest.mark.parametrize("name", list(MODELS))
def test_model_khronos(name, tmp_path):
    make, inputs, _ = MODELS[name]
    torch.manual_seed(0)
    r = fx2nnef.export(make(), inputs(), tmp_path / name, target=fx2nnef.KhronosNNEF())
    assert r.check.ok
    assert "tract_" not in r.nnef_text


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tiny_llama_dynamic_sequence(attn, tmp_path):
    model = tiny_llama(attn)
    out = tmp_path / f"llama_{attn}.nnef.tgz"
    r = fx2nnef.export(model, (example_input_ids(8),), out,
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}),
                       input_names=["input_ids"], output_names=["logits"])
    assert r.check.ok and r.symbols == ["S"]
    # the same asset at length 5, against PyTorch
    ids = example_input_ids(5, seed=3)
    with torch.no_grad():
        expected = model(ids).logits.numpy()
    got = run_tract(out, [ids.numpy()])[0]
    assert got.shape == expected.shape == (1, 5, 256)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_tiny_llama_khronos(tmp_path):
    r = fx2nnef.export(tiny_llama("eager"), (example_input_ids(6),), tmp_path / "llama_khr",
                       target=fx2nnef.KhronosNNEF())
    assert r.check.ok


def test_tiny_llama_dynamic_batch_from_batch_one(tmp_path):
    """transformers' mask code decides 'batch == 1' on a batch-1 example: never baked silently."""
    r = fx2nnef.export(tiny_llama("sdpa"), (example_input_ids(6, batch=1),), tmp_path / "llama_b.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}))
    assert r.check.ok
    assert r.notes and "traced again" in r.notes[0]
    assert any("masking_utils.py" in str(g.source) for g in r.guards)


def test_tiny_llama_with_kv_cache(tmp_path):
    """A DynamicCache given as input: past keys/values become inputs, the new cache outputs;
    one asset serves prompt (P=0) and decoding (S=1) steps."""
    export_and_run_with_kv_cache(tiny_llama("sdpa", use_cache=True), example_input_ids(12, seed=7), tmp_path,
                                 [(1, 8), (4, 0)])


def test_tiny_llama_float16(tmp_path):
    r = fx2nnef.export(tiny_llama("sdpa").half(), (example_input_ids(8),), tmp_path / "f16.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and r.max_abs_diff < 5e-3
    assert "'f16'" in r.nnef_text or "f16" in r.nnef_text


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tiny_llama_bfloat16(attn, tmp_path):
    """bf16 values run in f32 in tract (no bf16 there): torch rounds every op to bf16, so the check
    is at tract's "very" level."""
    r = fx2nnef.export(tiny_llama(attn).to(torch.bfloat16), (example_input_ids(8),), tmp_path / "bf16.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}, check_io_tolerance="very"))
    assert r.check.ok and len(r.check.cases) >= 3
