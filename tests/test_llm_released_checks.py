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


def _mapped(path) -> bool:
    """Whether this process still maps ``path`` (Linux: /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        return any(line.rstrip().endswith(str(path)) for line in maps)


def test_cast_in_place_converts_over_the_loaded_bytes(tmp_path):
    from fx2nnef.llm.cast import cast_in_place
    from fx2nnef.llm.export import load_causal_lm

    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(**SMALL, tie_word_embeddings=True)).eval()
    model.to(torch.bfloat16).save_pretrained(tmp_path / "src")
    loaded = load_causal_lm(tmp_path / "src")
    assert _mapped(tmp_path / "src" / "model.safetensors")  # read memory-mapped: the case this is for
    params = dict(loaded.named_parameters(remove_duplicate=False))
    expected = {name: p.detach().to(torch.float16) for name, p in params.items()}
    where = {name: p.data_ptr() for name, p in params.items()}
    cast_in_place(loaded, torch.float16)
    for name, p in loaded.named_parameters(remove_duplicate=False):
        assert p.dtype == torch.float16 and torch.equal(p.detach(), expected[name]), name
        assert p.data_ptr() == where[name], f"{name} was copied, not converted where it was"
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="reads /proc/self/maps (Linux)")
def test_release_frees_the_loaded_weights(tmp_path, monkeypatch):
    """After release nothing holds the model's memory: the weights' file, mapped by the load and
    converted there, is no longer mapped when tract runs."""
    src = _folder(tmp_path)
    seen = []
    real_run = released_checks.run_tract_many

    def watch(asset, input_sets, **kwargs):
        seen.append(_mapped(src / "model.safetensors"))
        return real_run(asset, input_sets, **kwargs)

    monkeypatch.setattr(released_checks, "run_tract_many", watch)
    export_causal_lm(src, tmp_path / "out", dtype="f16", generate=0)
    assert seen == [False]
