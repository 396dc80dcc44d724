"""A model that export_causal_lm loads from a folder is released before tract runs its checks:
every torch reference first, then tract (fx2nnef.llm.released_checks)."""
import pytest
import torch
import transformers as T

from fx2nnef.errors import CheckIOError
from fx2nnef.llm import export_causal_lm
from fx2nnef.llm import released_checks

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1)


def _folder(tmp_path):
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(**SMALL)).eval()
    with torch.no_grad():
        model.model.norm.weight.add_(0.3 * torch.randn(64))
    model.to(torch.bfloat16).save_pretrained(tmp_path / "src")
    return tmp_path / "src"


def test_folder_export_checks_everything_after_release(tmp_path, monkeypatch):
    released = []
    real_release = released_checks.release

    def watch(model):
        real_release(model)
        released.append(all(p.numel() == 0 for p in model.parameters()))

    monkeypatch.setattr("fx2nnef.llm.export.release", watch)
    r = export_causal_lm(_folder(tmp_path), tmp_path / "out", dtype="f16", generate=3)
    assert released == [True]
    assert list(r.checks) == ["export", "prompt", "prompt_with_past", "decode", "generate"]
    assert r.checks["export"]["cases"] >= 3 and r.checks["generate"]["equal"]
    assert r.checks["decode"]["max_abs_logits"] < 5e-2


def test_a_deferred_difference_fails_and_writes_nothing(tmp_path, monkeypatch):
    real_run = released_checks.run_tract_many

    def off_by_one(asset, input_sets, **kwargs):
        outs = real_run(asset, input_sets, **kwargs)
        outs[0][0] = outs[0][0] + 1.0  # the first export case's logits
        return outs

    monkeypatch.setattr(released_checks, "run_tract_many", off_by_one)
    with pytest.raises(CheckIOError, match="differ from PyTorch"):
        export_causal_lm(_folder(tmp_path), tmp_path / "out")
    assert not (tmp_path / "out").exists()
