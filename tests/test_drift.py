"""Honest summaries: the drift of a rounded asset from the ORIGINAL model (beside the correctness
check against the model as exported), Q4_0's searched rounding, and guards collapsed in the
summary, each naming the line that decided."""
import copy
import inspect
import json

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.cli import main as cli_main
from fx2nnef.errors import InvalidArgumentError
from fx2nnef.ir.weight_data import Q4_0_ROUNDINGS, dequantize_q4_0, quantize_q4_0
from fx2nnef.llm import drift as llm_drift
from fx2nnef.llm import export as llm_export
from fx2nnef.llm import export_causal_lm
from fx2nnef.targets import TractNNEF
from fx2nnef.targets.drift import greedy_drift, logit_drift
from test_llm_export import _folder, _llama


def _modes(model):
    return lambda w, l, d: llm_export.mode_cases(w, l, d, 0)


def _logits_of(model):
    layout = llm_export.cache_layout(model)
    cases = llm_export.mode_cases(llm_export.FlatCacheLM(model, layout), layout, torch.float32)
    return {mode: expected[0] for mode, (_, expected, _) in cases.items()}


def test_drift_of_the_original_against_itself_is_zero():
    x = np.random.default_rng(0).standard_normal((6, 50)).astype(np.float32)
    d = logit_drift(x, x, "same")
    assert (d.max_abs, d.max_rel, d.top1, d.kl_mean, d.kl_max, d.positions) == (0, 0, 1.0, 0, 0, 6)
    assert greedy_drift([3, 4, 5], [3, 4, 5]) == {"steps": 3, "equal": True, "first_difference": None,
                                                   "original": [3, 4, 5], "asset": [3, 4, 5]}
    model = _llama()
    reference = llm_drift.original_reference(model, False, _modes(model), None)
    measured = reference.measure(_logits_of(model))
    assert measured.positions == 13 and measured.max_abs == 0 and measured.kl_max == 0 and measured.top1 == 1


def test_a_perturbed_model_shows_drift():
    model = _llama()
    reference = llm_drift.original_reference(model, False, _modes(model),
                                             lambda m: llm_export.greedy_reference(m, torch.tensor([[1, 2, 3]]), 6))
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.model.layers[0].mlp.up_proj.weight.mul_(1.5)
    tokens = llm_export.greedy_reference(other, torch.tensor([[1, 2, 3]]), 6)
    measured = reference.measure(_logits_of(other), tokens)
    assert measured.max_abs > 1e-3 and measured.kl_mean > 0 and 0 < measured.max_rel < 1
    assert measured.greedy["steps"] == 6 and measured.greedy["asset"] == tokens
    assert greedy_drift([1, 2, 3], [1, 5, 3])["first_difference"] == 1
    measured.greedy = greedy_drift([1, 2, 3], [1, 5, 3])
    assert "greedy tokens differ from token 2 of 3 on" in measured.summary()


def test_llm_q4_0_summary_and_manifest_report_drift(tmp_path, capsys):
    src = _folder(tmp_path, _llama())
    out = tmp_path / "out"
    # f32 activations (q4_0 alone implies f16 ones): the check against the rounded model is then tight
    assert cli_main(["llm", str(src), str(out), "--weights", "q4_0", "--dtype", "f32", "--generate", "3"]) == 0
    printed = capsys.readouterr().out
    assert "correctness: tract against the model holding the asset's q4_0 weights" in printed
    assert "drift from the original model (informative, not a check" in printed
    assert "top-1 agrees at" in printed and "KL mean=" in printed and "greedy" in printed
    assert "run: fx2nnef.llm.TractCausalLM.load(" in printed
    manifest = json.loads((out / "fx2nnef.json").read_text())
    drift = manifest["drift"]
    assert drift["positions"] == 13 and drift["kl_mean"] > 0 and drift["max_abs"] > 0
    assert 0 <= drift["top1_agreement"] <= 1 and drift["greedy"]["steps"] == 3
    # the check (tract against the rounded model) is tight; the drift is not
    assert manifest["checks"]["prompt"]["max_abs_logits"] < 1e-4 < drift["max_abs"]
    assert manifest["q4_0_rounding"] == "search" and manifest["guards"]  # search: the default


def test_llm_f16_drift_is_small(tmp_path):
    r = export_causal_lm(_llama(), tmp_path / "out", dtype="f16", generate=0)
    assert r.drift["positions"] == 13 and "greedy" not in r.drift
    assert 0 < r.drift["max_abs"] < 0.05 and r.drift["kl_max"] < 1e-3 and r.drift["top1_agreement"] == 1
    assert "drift from the original model" in str(r) and "the model cast to f16" in str(r)


def test_llm_drift_not_measured_without_a_run(tmp_path, capsys):
    src = _folder(tmp_path, _llama())
    assert cli_main(["llm", str(src), str(tmp_path / "out"), "--weights", "f16", "--no-check"]) == 0
    assert "drift from the original model: not measured" in capsys.readouterr().out


def test_export_with_stored_weights_reports_drift(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    r = fx2nnef.export(model, (torch.randn(2, 64),), tmp_path / "m.nnef.tgz", target=TractNNEF(weights="q4_0"))
    assert r.drift is not None and r.drift.max_abs > 1e-4 and "drift from the original weights" in str(r)
    assert "check in tract: OK (against the model holding the stored weights)" in str(r)
    plain = fx2nnef.export(model, (torch.randn(2, 64),), tmp_path / "n.nnef.tgz")
    assert plain.drift is None and "drift" not in str(plain) and "run: fx2nnef.run(" in str(plain)
    unchecked = fx2nnef.export(model, (torch.randn(2, 64),), tmp_path / "u.nnef.tgz",
                               target=TractNNEF(weights="f16", check_io=False))
    assert unchecked.drift is None and "drift from the original weights: not measured" in str(unchecked)


def _block_errors(values: np.ndarray, rounding: str) -> np.ndarray:
    restored = dequantize_q4_0(quantize_q4_0(values, rounding), values.shape)
    return ((values - restored).reshape(-1, 32).astype(np.float64) ** 2).sum(1)


@pytest.mark.parametrize("dist", ["normal", "t", "spiky"])
def test_searched_rounding_lowers_the_error_of_every_block(dist):
    rng = np.random.default_rng(1)
    w = {"normal": lambda: rng.standard_normal((64, 256)),
         "t": lambda: rng.standard_t(4, (64, 256)),
         "spiky": lambda: rng.standard_normal((64, 256)) * (1 + 20 * (rng.random((64, 256)) < 0.01))}[dist]()
    w = w.astype(np.float32)
    w[0, :32] = 0  # an all-zero block stays zero
    minmax, search = _block_errors(w, "minmax"), _block_errors(w, "search")
    assert np.all(search <= minmax * (1 + 1e-6) + 1e-12) and search[0] == 0
    # one outlier per block (spiky) leaves little to win: it keeps its code, the others are as fine as before
    assert search.sum() < (0.99 if dist == "spiky" else 0.95) * minmax.sum()
    assert len(quantize_q4_0(w, "search")) == len(quantize_q4_0(w, "minmax"))  # same size


def test_searched_rounding_near_the_float16_scale_limit():
    w = np.full((1, 32), 8 * 65000.0, np.float32)
    w[0, 1::2] = -3.0
    restored = dequantize_q4_0(quantize_q4_0(w, "search"), w.shape)
    assert np.isfinite(restored).all() and abs(restored[0, 0] - w[0, 0]) / w[0, 0] < 1e-2


def test_searched_rounding_asset_runs_in_tract_and_matches_the_rounded_model(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(40, 64), torch.nn.Linear(64, 96), torch.nn.GELU(),
                                torch.nn.Linear(96, 64)).eval()
    ids = torch.randint(0, 40, (1, 9))
    results = {rounding: fx2nnef.export(model, (ids,), tmp_path / f"{rounding}.nnef.tgz",
                                        target=TractNNEF(weights="q4_0", rounding=rounding))
               for rounding in ("minmax", "search")}  # gptq: see test_gptq.py
    assert all(r.check.ok for r in results.values())  # tract against the model holding each rounding's values
    assert '"fx2nnef_q4_0_rounding", "search"' in results["search"].nnef_text
    assert results["search"].drift.max_abs < results["minmax"].drift.max_abs


def test_rounding_needs_q4_0(tmp_path, capsys):
    with pytest.raises(InvalidArgumentError, match="rounding='search'.*weights='q4_0'"):
        TractNNEF(rounding="search")
    with pytest.raises(InvalidArgumentError, match="rounding must be one of"):
        TractNNEF(weights="q4_0", rounding="best")
    assert cli_main(["llm", str(tmp_path), str(tmp_path / "o"), "--rounding", "search"]) == 1
    assert "--rounding chooses the scales of Q4_0 weights" in capsys.readouterr().err
    from fx2nnef import cli
    assert cli.Q4_0_ROUNDINGS == Q4_0_ROUNDINGS


class SizeDecisions(torch.nn.Module):
    def forward(self, x):
        y = x * 2 if x.shape[1] % 2 == 0 else x * 2  # the same either way
        if x.shape[1] > 3:  # the bounding line
            return y + 1
        return y - 1


def _line_of(cls, marker: str) -> str:
    lines, start = inspect.getsourcelines(cls)
    return f"test_drift.py:{start + next(i for i, line in enumerate(lines) if marker in line)}"


def test_guards_collapsed_and_naming_the_deciding_line(tmp_path):
    model, x = SizeDecisions(), (torch.randn(1, 6),)
    target = TractNNEF(dynamic_axes={"x": {1: "S"}})
    merged = fx2nnef.export(model, x, tmp_path / "m.nnef.tgz", target=target)
    assert ("  guards: 2 shape decisions, all merged (both outcomes exported) (summary(verbose=True) lists them)"
            in str(merged)) and "[shape]" not in str(merged)
    detailed = merged.summary(verbose=True)
    assert _line_of(SizeDecisions, "the same either way") in detailed
    assert _line_of(SizeDecisions, "the bounding line") in detailed
    # decisions that narrow the export are always listed, with their line
    bounded = fx2nnef.export(model, x, tmp_path / "b.nnef.tgz", target=target, branches="example")
    assert "  guards: 2 shape decisions, all bounding the range\n" in str(bounded)
    assert _line_of(SizeDecisions, "the bounding line") in str(bounded)


def test_guards_of_torch_modules_name_torch_lines(tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    r = fx2nnef.export(model, (torch.randn(1, 5, 16),), tmp_path / "m.nnef.tgz",
                       target=TractNNEF(dynamic_axes={"x": {1: "S"}}), input_names=["x"])
    n = len(r.guards)
    assert n >= 2 and f"guards: {n} shape decisions, all checked at other sizes (summary(verbose=True) lists them)" \
        in str(r)
    assert "[shape]" not in str(r)
    detailed = r.summary(verbose=True)
    assert detailed.count("[shape]") == n and "torch/nn/functional.py:" in detailed
    assert all("called from" in str(g) and "test_drift.py" in str(g.source) for g in r.guards)


def test_the_summary_names_what_the_check_compares_with():
    said = llm_drift.exported_model
    assert said({"weights": "native", "dtype": "f32"}) == "the model"
    assert said({"weights": "native", "dtype": "f32", "drift": {"original_dtype": "bf16"}}) == "the model"
    assert said({"weights": "native", "dtype": "f16", "drift": {"original_dtype": "bf16"}}) == "the model cast to f16"
    assert said({"weights": "q4_0", "dtype": "f16", "drift": {"original_dtype": "f32"}}) == \
        "the model holding the asset's q4_0 weights, cast to f16"
    assert said({"weights": "q4_0", "dtype": "f16", "drift": {"original_dtype": "f16"}}) == \
        "the model holding the asset's q4_0 weights"
