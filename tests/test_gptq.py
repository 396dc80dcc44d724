"""Calibrated Q4_0: GPTQ rounding (errors moved onto the inputs not rounded yet) and weights kept
in float16 by their measured impact, from the model run on calibration tokens."""
import json

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.cli import main as cli_main
from fx2nnef.errors import InvalidArgumentError
from fx2nnef.ir.gptq import gptq_q4_0
from fx2nnef.ir.tensor_data import ArrayData
from fx2nnef.ir.weight_data import Q4_0Data, dequantize_q4_0, q4_0_size, quantize_q4_0
from fx2nnef.ir.weight_formats import KEPT_F16
from fx2nnef.llm import calibrate, export_causal_lm
from fx2nnef.llm.calibration import calibration_ids, decoder_layers, keep_f16_budget
from fx2nnef.targets import TractNNEF
from fx2nnef.targets.tract_runner import run_tract_many
from test_llm_export import _folder, _llama


def _correlated_inputs(rng, n: int, k: int) -> np.ndarray:
    """Inputs whose features are mixed (correlated) and of unequal scales, some much larger."""
    mix = np.eye(k) * 0.3 + rng.standard_normal((k, k)) / np.sqrt(k)
    scale = 1 + 4 * (rng.random(k) < 0.05)
    return (rng.standard_normal((n, k)) @ mix * scale).astype(np.float32)


def _output_error(x, w, blocks) -> float:
    q = dequantize_q4_0(blocks, w.shape)
    return float(((x @ (w - q).T) ** 2).sum() / ((x @ w.T) ** 2).sum())


def test_gptq_lowers_the_output_error_of_a_linear_against_minmax_and_search():
    rng = np.random.default_rng(0)
    x = _correlated_inputs(rng, 1024, 256)
    w = (rng.standard_normal((96, 256)) * 0.05).astype(np.float32)
    blocks = gptq_q4_0(w, x.T @ x)
    minmax, search, gptq = (_output_error(x, w, b) for b in (quantize_q4_0(w, "minmax"),
                                                             quantize_q4_0(w, "search"), blocks))
    assert gptq < 0.7 * minmax and gptq < search < minmax
    assert blocks.shape == quantize_q4_0(w, "minmax").shape  # the same size: Q4_0 blocks of 32 along K
    # the blocks are what the engine computes with: codes times float16 scales, read back exactly
    data = Q4_0Data(ArrayData(w), rounding="gptq", blocks=blocks)
    assert np.array_equal(data.numpy(), dequantize_q4_0(blocks, w.shape))
    assert bytes(b"".join(data.block_chunks(max_bytes=4096))) == blocks.tobytes()


def test_gptq_with_inputs_never_seen_and_a_singular_second_moment():
    rng = np.random.default_rng(1)
    x = _correlated_inputs(rng, 16, 64)  # fewer samples than inputs: H is singular, the damping holds
    x[:, 5] = 0  # an input never seen: rounded to its nearest code
    w = rng.standard_normal((8, 64)).astype(np.float32)
    q = dequantize_q4_0(gptq_q4_0(w, x.T @ x), w.shape)
    assert np.isfinite(q).all() and abs(q[:, 5] - w[:, 5]).max() <= np.abs(w).max() / 7
    with pytest.raises(ValueError, match="multiple of 32"):
        gptq_q4_0(w[:, :40], np.eye(40))


def test_calibrate_rounds_layer_by_layer_and_leaves_the_model_unchanged():
    model = _llama()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert len(decoder_layers(model)) == 2
    ids = calibration_ids(model.config.vocab_size, 0, 4, 64)  # 256 tokens: more than any weight's inputs
    calibrated, report = calibrate(model, ids, gptq=True, keep_f16="8KiB")
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert len(report.gptq) == 15 and "lm_head.weight" in calibrated.blocks  # 7 per layer and the head
    assert calibrated.blocks["model.layers.0.mlp.down_proj.weight"].shape == (64 * 128 // 32, 18)
    assert report.extra_bytes <= 8192 and len(calibrated.keep_f16) >= 1 and len(report.impacts) == 16
    # 100 tokens: fewer than down_proj's 128 inputs, which keeps the search (GPTQ would fit 100 directions)
    few, report = calibrate(model, calibration_ids(model.config.vocab_size, 0, 1, 100), gptq=True)
    assert len(report.gptq) == 13 and not any("down_proj" in path for path in few.blocks)
    assert keep_f16_budget("0.5", 1000) == int(0.5 * 1000 * (2 - 18 / 32)) and keep_f16_budget("1MB", 1) == 10**6
    for bad in ("lots", "0", "1.5", "-3MiB"):
        with pytest.raises(InvalidArgumentError, match="keep_f16 must be a fraction in"):
            keep_f16_budget(bad, 1000)


def test_gptq_asset_exports_runs_in_tract_and_reports_its_drift(tmp_path):
    model = _llama()
    r = export_causal_lm(model, tmp_path / "gptq", weights="q4_0", rounding="gptq", dtype="f32", generate=2)
    manifest = json.loads((r.out_dir / "fx2nnef.json").read_text())
    assert manifest["q4_0_rounding"] == "gptq" and manifest["q4_0_calibration"]["gptq_weights"] == 15
    assert "random tokens of the vocabulary" in manifest["q4_0_calibration"]["tokens"]
    assert manifest["checks"]["prompt"]["max_abs_logits"] < 1e-4  # tract against the model holding GPTQ's weights
    assert r.drift["kl_mean"] > 0 and "Q4_0 calibration: GPTQ on 15 Linear weights" in str(r)
    minmax = export_causal_lm(model, tmp_path / "minmax", weights="q4_0", rounding="minmax", dtype="f32",
                              generate=0)
    assert r.drift["kl_mean"] < minmax.drift["kl_mean"]
    assert r.asset.stat().st_size == pytest.approx(minmax.asset.stat().st_size, rel=0.02)
    # unchecked: the asset still loads and runs
    u = export_causal_lm(model, tmp_path / "u", weights="q4_0", rounding="gptq", check=False,
                         calibration=calibration_ids(256, 5, 2, 16).numpy())
    assert u.manifest["q4_0_calibration"]["tokens"] == "2 x 16 given tokens" and u.drift.get("not_measured")
    empty = [np.zeros((1, 2, 0, 16), np.float16)] * 4
    (out,) = run_tract_many(u.asset, [[np.array([[1, 2, 3]])] + empty])
    assert out[0].shape == (1, 3, 256) and np.isfinite(out[0]).all()


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(250)} | {"<unk>": 250}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def test_keep_f16_stores_the_weights_of_most_impact_in_f16(tmp_path, capsys):
    src = _folder(tmp_path, _llama())
    _word_tokenizer().save(str(src / "tokenizer.json"))
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"w{(i * 7) % 250}" for i in range(300)))
    out = tmp_path / "out"
    assert cli_main(["llm", str(src), str(out), "--weights", "q4_0", "--rounding", "gptq", "--keep-f16", "0.1",
                     "--generate", "0", "--calibration", str(text)]) == 0
    printed = capsys.readouterr().out
    assert "weights kept in f16 (+" in printed
    manifest = json.loads((out / "fx2nnef.json").read_text())
    assert manifest["q4_0_calibration"]["tokens"] == "2 x 128 given tokens"  # 300 words: two whole pieces
    kept = manifest["q4_0_calibration"]["keep_f16"]
    assert kept and manifest["dtype"] == "f16"
    with __import__("tarfile").open(out / "model.nnef.tgz") as tar:
        graph = tar.extractfile("graph.nnef").read().decode()
    q4 = graph.split('"fx2nnef_weights_q4_0", "')[1].split('"')[0].split(",")
    assert not {"model." + k for k in kept} & set(q4) and len(q4) == 16 - len(kept)


def test_calibrated_options_spelled_and_refused_in_one_line(tmp_path, capsys):
    src = _folder(tmp_path, _llama())
    capsys.readouterr()
    assert cli_main(["llm", str(src), str(tmp_path / "o"), "--weights", "q4_0", "--keep-f16", "lots"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the line before it: the stage reached
    assert err.startswith("fx2nnef: error: --keep-f16 must be a fraction in (0, 1]") and "'lots'" in err
    assert cli_main(["llm", str(src), str(tmp_path / "o"), "--rounding", "gptq"]) == 1
    assert "--rounding chooses the scales of Q4_0 weights" in capsys.readouterr().err
    assert cli_main(["llm", str(src), str(tmp_path / "o"), "--weights", "f16", "--keep-f16", "0.1"]) == 1
    assert "--keep-f16 0.1 chooses how Q4_0 weights are stored" in capsys.readouterr().err
    assert cli_main(["llm", str(src), str(tmp_path / "o"), "--weights", "q4_0", "--rounding", "gptq",
                     "--calibration", str(tmp_path / "none.txt")]) == 1
    assert "tokenized with the folder's tokenizer.json" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="rounding='gptq' needs calibration"):
        TractNNEF(weights="q4_0", rounding="gptq")
    with pytest.raises(InvalidArgumentError, match="calibrated holds Q4_0 choices"):
        TractNNEF(weights="f16", calibrated=fx2nnef.ir.Calibrated())
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()
    calibrated = fx2nnef.ir.Calibrated(keep_f16=frozenset({"0.weight"}))
    r = fx2nnef.export(net, (torch.randn(2, 64),), tmp_path / "k.nnef.tgz",
                       target=TractNNEF(weights="q4_0", calibrated=calibrated))
    assert [w.reason for w in r.weights if w.path == "0.weight"] == [KEPT_F16] and r.check.ok
    assert q4_0_size((32, 64)) < [w.stored_bytes for w in r.weights if w.path == "0.weight"][0]
