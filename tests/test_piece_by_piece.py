"""Piece-by-piece diagnosis, custom-op encapsulation and fallback export, on real tract runs."""
import dataclasses
import inspect
import json
import math
import tarfile

import numpy as np
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef.cli import main as cli_main
from fx2nnef.nnef_emit import REGISTRY
from fx2nnef.nnef_emit.extractors import EXTRACTOR_CLASSES, ModuleInfoExtractor, register_extractor
from fx2nnef.piece_by_piece import PieceByPieceError, Status, Strategy, diagnose, export_with_fallback
from fx2nnef.piece_by_piece.record import SymbolTable, record
from fx2nnef.piece_by_piece.strategies import resolve_strategy
from fx2nnef.targets.tract_runner import run_tract


class Bessel(nn.Module):
    """Calls an op that has no lowering."""

    def forward(self, x):
        return torch.special.bessel_j0(torch.tanh(x) * 2.0) + 1.0  # LINE_BESSEL


class ExtractedBessel(Bessel):
    """Same forward; a ModuleInfoExtractor is registered for this class."""


class Branchy(nn.Module):
    """Takes a branch decided on tensor data."""

    def forward(self, x):
        if x.sum() > 0:  # LINE_BRANCH
            return x * 2.0
        return x - 1.0


class Healthy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)).exp() * 0.1


class Net(nn.Module):
    def __init__(self, branch: bool = True, bessel_cls=Bessel):
        super().__init__()
        self.branch = Branchy() if branch else None
        self.pre = Healthy()
        self.bessel = bessel_cls()
        self.post = nn.Linear(8, 4)
        self.unused = nn.Linear(8, 8)

    def forward(self, x):
        if self.branch is not None:
            x = self.branch(x)
        return self.post(self.bessel(self.pre(x)))


class BesselExtractor(ModuleInfoExtractor):
    """J0(2 tanh(x)) + 1 as a power series: exact to f32 for |2 tanh(x)| <= 2."""

    MODULE_CLASS = ExtractedBessel

    def convert_to_nnef(self, ctx, inputs, module):
        (x,) = inputs
        shape = x.shape
        t = ctx.op("mul", ctx.op("tanh", x, out_shape=shape), 2.0, out_shape=shape)
        q = ctx.op("mul", ctx.op("mul", t, t, out_shape=shape), -0.25, out_shape=shape)  # J0(t) = sum q^k / k!^2
        acc = ctx.op("mul", q, 1.0 / math.factorial(11) ** 2, out_shape=shape)
        for k in reversed(range(1, 11)):
            acc = ctx.op("mul", ctx.op("add", acc, 1.0 / math.factorial(k) ** 2, out_shape=shape), q, out_shape=shape)
        return ctx.op("add", acc, 2.0, out_shape=shape)


if ExtractedBessel not in EXTRACTOR_CLASSES:
    register_extractor(BesselExtractor)


def _line(cls, marker: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def _inputs():
    """Two input sets: batch 3 then 5 (a dynamic dim), positive then negative data."""
    g = torch.Generator().manual_seed(0)
    return [((torch.rand(3, 8, generator=g) + 0.1,), {}), ((-torch.rand(5, 8, generator=g) - 0.1,), {})]


def _graph_text(asset) -> str:
    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()


# recording and strategies (no engine) ------------------------------------------------------
@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


class Recorded(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.heads = nn.ModuleDict({"left": nn.Identity()})

    def forward(self, x, extra=None):
        for layer in self.layers:
            x = layer(x)
        x.add_(1.0)  # the recorded output of layers.1 must not see this
        return {"pair": Pair(x, self.heads["left"](x)), "none": None, "list": [x, x]}


def test_recording_keeps_copies_counts_and_dynamic_dims():
    model = Recorded()
    sets = [((torch.ones(2, 3, 4),), {"extra": None}), ((torch.ones(2, 6, 4),), {"extra": None})]
    rec = record(model, sets, SymbolTable(2))
    assert [r.path for r in rec.modules()] == ["", "layers.0", "layers.1", "heads.left"]
    layer1 = rec.find("layers.1")
    assert layer1.parent is rec.root and layer1.call_count(0) == 1 and len(layer1.calls) == 2
    expected = model.layers[1](model.layers[0](torch.ones(2, 3, 4)))
    torch.testing.assert_close(layer1.calls[0].output, expected)
    out = rec.root.calls[1].output
    assert isinstance(out["pair"], Pair) and out["none"] is None and out["pair"].a.shape == (2, 6, 4)
    assert rec.root.calls[0].kwargs == {"extra": None}
    names = ["x"]
    assert rec.symbols.dynamic_axes(rec.root.calls, names) == {"x": {1: "S"}}
    assert rec.symbols.dynamic_axes(layer1.calls, ["input"]) == {"input": {1: "S"}}
    assert [r.path for r in rec.execution_order()] == ["layers.0", "layers.1", "heads.left", ""]


def test_strategies_by_path_class_and_name():
    net = Net()
    strategies = {"pre": Strategy.ALWAYS, nn.Linear: "LOCAL", "Bessel": Strategy.NONE}
    assert resolve_strategy(strategies, "pre", net.pre) is Strategy.ALWAYS
    assert resolve_strategy(strategies, "post", net.post) is Strategy.LOCAL
    assert resolve_strategy(strategies, "bessel", net.bessel) is Strategy.NONE
    assert resolve_strategy(strategies, "branch", net.branch) is Strategy.ONLY_IF_FAILING
    with pytest.raises(fx2nnef.InvalidArgumentError, match="unknown strategy"):
        diagnose(net, _inputs(), strategies={"pre": "SOMETIMES"})


# diagnosis ---------------------------------------------------------------------------------
def test_report_pins_the_unlowered_op_and_the_data_branch():
    torch.manual_seed(0)
    report = diagnose(Net(), _inputs(), strategies={"pre": Strategy.LOCAL})
    status = {r.path: r.status for r in report.rows}
    assert status == {"": Status.FAIL, "branch": Status.DISC, "pre": Status.OK, "pre.lin": Status(0),
                      "bessel": Status.FAIL, "post": Status.OK, "unused": Status.NOINPUT}
    bessel = report.row("bessel")
    assert bessel.step == "lower" and "torch.special.bessel_j0" in bessel.reason
    assert bessel.location.file == __file__ and bessel.location.line == _line(Bessel, "LINE_BESSEL")
    branch = report.row("branch")
    assert branch.step == "compare" and "another branch on input set 1" in branch.reason
    assert branch.location.line == _line(Branchy, "LINE_BRANCH")
    assert [g.kind for g in branch.guards] == ["data"] and branch.max_abs > 0.1
    assert report.row("pre").max_abs < 1e-5 and report.row("pre").calls == 2
    assert report.no_replacement == ["branch", "bessel"]
    assert report.first_divergence.path == "branch" and not report.ok

    text = str(report)
    assert f"test_piece_by_piece.py:{_line(Bessel, 'LINE_BESSEL')}" in text
    assert "\n  branch" in text and "\n    pre.lin" in text
    assert "| `(model)` | Net | FAIL |" in report.to_markdown()
    html = report._repr_html_()
    assert html.count("<details") == len(report.rows) and "bessel_j0" in html
    data = json.loads(report.to_json())
    assert (data["schema"], data["version"]) == ("fx2nnef.piece_by_piece.report", 1)
    row = next(m for m in data["modules"] if m["path"] == "bessel")
    assert row["status"] == ["FAIL"] and row["step"] == "lower" and row["location"]["line"] == bessel.location.line
    assert set(row) == {"path", "class", "depth", "parent", "status", "strategy", "step", "reason", "location",
                        "guards", "max_abs", "max_rel", "time_s", "calls", "replacement", "encapsulated", "notes"}


def test_registered_extractor_makes_the_fallback_export_pass(tmp_path):
    torch.manual_seed(0)
    model = Net(branch=False, bessel_cls=ExtractedBessel).eval()
    report = diagnose(model, _inputs(), target=fx2nnef.TractNNEF())
    assert report.ok and report.row("").status == Status.OK | Status.CHILDC
    assert report.row("bessel").status == Status.FAIL | Status.CUSTOM
    assert report.row("bessel").replacement == "extractor:BesselExtractor"

    x = torch.rand(3, 8) + 0.1
    target = fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}})
    result = fx2nnef.export(model, (x,), tmp_path / "net.nnef.tgz", target=target, fallback="piece_by_piece")
    assert result.check.ok and any("bessel (ExtractedBessel) is a custom op" in n for n in result.notes)
    for batch in (3, 7):
        xb = torch.rand(batch, 8) - 0.5
        got = run_tract(result.path, [xb.numpy()])[0]
        np.testing.assert_allclose(got, model(xb).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_fallback_error_lists_exactly_the_modules_without_replacement(tmp_path):
    model = Net(branch=False)
    with pytest.raises(PieceByPieceError) as err:
        export_with_fallback(model, (torch.rand(3, 8),), tmp_path / "net.nnef.tgz", strategies={"pre": "NONE"})
    assert err.value.report.no_replacement == ["bessel"]
    assert err.value.report.row("pre").status == Status(0) and err.value.report.row("post").status == Status.OK
    assert "  - bessel (Bessel): lower: UnsupportedOpError: torch.special.bessel_j0" in str(err.value)
    assert not (tmp_path / "net.nnef.tgz").exists()


class SinBlock(nn.Module):
    def forward(self, x):
        return torch.sin(x * 3.0)


def test_first_divergence_names_the_submodule_with_a_wrong_lowering(tmp_path):
    def wrong_sin(ctx, input):
        """sin(Tensor self) -> Tensor, lowered as cos on purpose"""
        return ctx.op("cos", input, out_shape=input.shape)

    registry = REGISTRY.child()
    registry.add(torch.sin, wrong_sin)
    model = nn.Sequential(nn.Linear(8, 8), SinBlock(), nn.Linear(8, 8), nn.ReLU())
    report = diagnose(model, _inputs(), registry=registry)
    assert report.first_divergence.path == "1" and report.first_divergence.max_abs > 0.1
    assert [str(r.status) for r in report.rows] == ["DISC", "OK", "DISC", "OK", "OK"]
    assert report.no_replacement == ["1"]
    with pytest.raises(PieceByPieceError, match=r"first divergence: 1 \(SinBlock\)"):
        export_with_fallback(model, (torch.rand(3, 8),), tmp_path / "m.nnef.tgz", registry=registry)


# custom ops as shared fragments ---------------------------------------------------------------
class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Healthy(), Healthy()])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x), x


def test_always_makes_identical_children_share_one_fragment(tmp_path):
    torch.manual_seed(0)
    model = Stack()
    target = fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}})
    result = export_with_fallback(model, (torch.rand(4, 8),), tmp_path / "s.nnef.tgz", target=target,
                                  strategies={Healthy: Strategy.ALWAYS})
    text = _graph_text(result.path)
    assert text.count("fragment custom_Healthy(") == 1 and text.count("= custom_Healthy(") == 2
    assert "layers_1_lin_weight" in text and result.check.ok
    x = torch.rand(6, 8)
    got = run_tract(result.path, [x.numpy()])
    for g, e in zip(got, model(x)):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_tiny_llama_all_ok_with_one_shared_decoder_fragment(tmp_path):
    pytest.importorskip("transformers")
    from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama

    model = tiny_llama()
    target = fx2nnef.TractNNEF()
    strategies = {"LlamaDecoderLayer": Strategy.ALWAYS}
    report = diagnose(model, [(example_input_ids(8),), (example_input_ids(5, seed=1),)], target=target,
                      strategies=strategies)
    assert all(r.ok for r in report.rows), str(report)
    assert report.row("model.layers.0").status == Status.OK | Status.CUSTOM
    assert report.row("model").status == Status.OK | Status.CHILDC

    target = fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}})
    result = export_with_fallback(model, (example_input_ids(8),), tmp_path / "llama.nnef.tgz", target=target,
                                  strategies=strategies, output_names=["logits"])
    text = _graph_text(result.path)
    assert text.count("fragment custom_LlamaDecoderLayer(") == 1
    assert text.count("= custom_LlamaDecoderLayer(") == 2
    ids = example_input_ids(6, seed=2)
    got = run_tract(result.path, [ids.numpy()])[0]
    np.testing.assert_allclose(got, model(ids).logits.detach().numpy(), rtol=1e-4, atol=1e-4)


# command line -------------------------------------------------------------------------------
def cli_factory():
    torch.manual_seed(0)
    return Net(branch=False), (torch.rand(3, 8) + 0.1,)


def test_cli_diagnose_prints_and_writes_html_and_json(tmp_path, capsys):
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    code = cli_main(["diagnose", "test_piece_by_piece:cli_factory", "--html", str(html), "--json", str(js),
                     "--dynamic-axes", '{"x": {"0": "B"}}'])
    captured = capsys.readouterr()
    out = captured.out
    # bessel fails with no working replacement: the report is printed and written, and the exit code says so
    assert code == 1 and "piece-by-piece report: Net" in out and "bessel_j0" in out
    assert captured.err.count("fx2nnef: error:") == 1 and "bessel" in captured.err
    data = json.loads(js.read_text())
    assert data["input_sets"] == 2 and data["no_replacement"] == ["bessel"]
    assert "<details" in html.read_text()
