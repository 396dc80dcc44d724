"""fx2nnef.llm: causal LMs to tract assets with a KV cache, checked in three modes and by greedy generation."""
import inspect
import json
import tarfile

import numpy as np
import pytest
import torch
import transformers as T

import fx2nnef
from fx2nnef.cli import main as cli_main
from fx2nnef.errors import CheckIOError, InvalidArgumentError
from fx2nnef.llm import TractCausalLM, export_causal_lm, greedy_generate
from fx2nnef.llm import export as llm_export
from fx2nnef.llm.wrapper import FlatCacheLM, cache_layout
from fx2nnef.targets import TractNNEF
from fx2nnef.targets.tract_runner import run_tract

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1)
CONTRACT_INPUTS = ["input_ids", "in_cache_key_0", "in_cache_value_0", "in_cache_key_1", "in_cache_value_1"]
CONTRACT_OUTPUTS = ["outputs", "out_cache_key_0", "out_cache_value_0", "out_cache_key_1", "out_cache_value_1"]


def _randomize_norms(model):
    """Non-trivial norm weights (all-ones weights hide bugs in norms)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.ndim == 1:
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))
    return model


def _llama(**extra):
    torch.manual_seed(0)
    return _randomize_norms(T.LlamaForCausalLM(T.LlamaConfig(**SMALL, **extra)).eval())


def _folder(tmp_path, model, dtype=None, name="src"):
    path = tmp_path / name
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path)
    return path


def _graph_text(asset):
    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()


def test_llama_folder_three_modes_and_generation(tmp_path):
    src = _folder(tmp_path, _llama())
    (src / "tokenizer.json").write_text("{}")
    r = export_causal_lm(src, tmp_path / "out", generate=4)
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["config.json", "fx2nnef.json", "generation_config.json", "model.nnef.tgz", "tokenizer.json"]
    manifest = json.loads((tmp_path / "out" / "fx2nnef.json").read_text())
    assert list(manifest["inputs"]) == CONTRACT_INPUTS and list(manifest["outputs"]) == CONTRACT_OUTPUTS
    assert manifest["inputs"]["in_cache_key_0"] == {"shape": [1, 2, "P", 16], "dtype": "f32"}
    assert manifest["symbols"] == ["S", "P"] and manifest["dtype"] == "f32" and manifest["weights"] == "native"
    checks = manifest["checks"]
    assert (checks["prompt"]["P"], checks["prompt_with_past"]["P"], checks["decode"]["S"]) == (0, 8, 1)
    assert all(checks[m]["max_abs_logits"] < 1e-4 for m in ("prompt", "prompt_with_past", "decode"))
    assert checks["generate"]["equal"] and len(checks["generate"]["tokens"]) == 4
    text = _graph_text(r.asset)
    assert "( input_ids, in_cache_key_0, in_cache_value_0, in_cache_key_1, in_cache_value_1 ) -> " \
           "( outputs, out_cache_key_0, out_cache_value_0, out_cache_key_1, out_cache_value_1 )" in text
    assert "extension tract_symbol S;" in text and "extension tract_symbol P;" in text
    for line in ("P >= 0", "S >= 1", "S+P < 128", "tg: S==1", "pp: P==0"):
        assert f"extension tract_assert {line};" in text
    assert '("llm_outputs", "' + ",".join(CONTRACT_OUTPUTS) + '")' in text
    assert "in_cache_value_1 = tract_core_external(shape = [1, 2, P, 16], datum_type = 'f32');" in text
    assert "input_ids = tract_core_external(shape = [1, S], datum_type = 'i64');" in text


def test_generation_driver_matches_transformers_longer(tmp_path):
    """The numpy driver (child process and in-process) against model.generate for 8 steps."""
    model = _llama()
    r = export_causal_lm(model, tmp_path / "out", check=False)
    prompt = torch.tensor([[3, 141, 59, 26, 53, 58]])
    cfg = T.GenerationConfig(max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(prompt, generation_config=cfg, attention_mask=torch.ones_like(prompt))[0, 6:].tolist()
    assert greedy_generate(tmp_path / "out", prompt.numpy(), 8) == expected
    lm = TractCausalLM.load(r.asset)
    assert lm.greedy(prompt.numpy(), 8) == expected
    assert lm.greedy(prompt.numpy(), 8, eos_token_id=expected[2]) == expected[:3]


def test_checks_fail_on_a_different_model(tmp_path):
    """The mode and generation checks do catch an asset that does not match its model."""
    model = _llama()
    r = export_causal_lm(model, tmp_path / "out", check=False)
    other = _llama()
    with torch.no_grad():
        other.model.layers[1].mlp.down_proj.weight.mul_(1.5)
    layout = cache_layout(other)
    with pytest.raises(CheckIOError, match="prompt_with_past"):
        llm_export.check_modes(FlatCacheLM(other, layout), layout, r.asset, torch.float32)
    with torch.no_grad():
        other.lm_head.weight.copy_(torch.randn_like(other.lm_head.weight))
    with pytest.raises(CheckIOError, match="greedy generation differs"):
        llm_export.check_generation(other, r.asset, 4)


def test_generation_parts_only_at_a_near_tie(tmp_path):
    """Greedy tokens that part where the reference's two candidates are closer than the tolerance
    lets two logits move pass the check (and say where); a larger gap fails it, with the gap."""
    model = _llama()
    r = export_causal_lm(model, tmp_path / "out", check=False)
    prompt = llm_export.generation_prompt(model)
    tokens, logits = llm_export.greedy_steps(model, prompt, 4)
    assert tokens == llm_export.greedy_reference(model, prompt, 4) and logits.shape == (4, SMALL["vocab_size"])
    assert llm_export.compare_generation(r.asset, prompt, tokens, logits=logits)["equal"]
    other = (tokens[1] + 1) % SMALL["vocab_size"]  # the reference as if it had picked another token at step 1
    near = logits.copy()
    near[1, other] = near[1, tokens[1]] + 1e-5
    facts = llm_export.compare_generation(r.asset, prompt, tokens[:1] + [other] + tokens[2:], logits=near)
    assert not facts["equal"] and facts["near_tie"]["step"] == 1 and facts["tokens"] == tokens
    far = logits.copy()
    far[1, other] = far[1, tokens[1]] + 1.0
    with pytest.raises(CheckIOError, match="at step 1 the reference's logits put token .* above token"):
        llm_export.compare_generation(r.asset, prompt, tokens[:1] + [other] + tokens[2:], logits=far)


def test_last_logits_only(tmp_path):
    model = _llama()
    r = export_causal_lm(model, tmp_path / "out", last_logits_only=True, check=False)
    layout = cache_layout(model)
    ids = torch.tensor([[5, 17, 42, 99]])
    got = run_tract(r.asset, [ids.numpy()] + [t.numpy() for t in layout.empty(0, torch.float32)])
    with torch.no_grad():
        expected = model(ids).logits[:, -1:]
    assert got[0].shape == (1, 1, 256)
    np.testing.assert_allclose(got[0], expected.numpy(), atol=1e-4, rtol=5e-4)
    assert r.manifest["outputs"]["outputs"]["shape"] == [1, 1, 256]


SW = dict(sliding_window=4)  # smaller than P+S of the checks (12)
FAMILIES = {
    "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**SMALL)),
    "mistral_sliding_window": lambda: T.MistralForCausalLM(T.MistralConfig(**SMALL, **SW)),
    "gemma2_softcap_sliding": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(
        **SMALL, head_dim=16, **SW, attn_implementation="eager", final_logit_softcapping=3.0,
        attn_logit_softcapping=5.0)),
    "phi3_partial_rotary": lambda: T.Phi3ForCausalLM(T.Phi3Config(**SMALL, pad_token_id=0, eos_token_id=1,
                                                                  bos_token_id=1, partial_rotary_factor=0.5)),
    "bloom_alibi_baddbmm": lambda: T.BloomForCausalLM(T.BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=256,
                                                                     initializer_range=0.1)),
    "mixtral_moe": lambda: T.MixtralForCausalLM(T.MixtralConfig(**{**SMALL, "intermediate_size": 64},
                                                                num_local_experts=4, num_experts_per_tok=2)),
    # its ALiBi table has max_seq_len positions, sliced from 2048 - P - S: non-negative within the
    # asserted context S+P < max_seq_len (before: refused, P and S each ranged up to the bound)
    "mpt_alibi_table": lambda: T.MptForCausalLM(T.MptConfig(d_model=64, n_heads=4, n_layers=2, expansion_ratio=2,
                                                            vocab_size=256, max_seq_len=256)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_families(family, tmp_path):
    torch.manual_seed(0)
    model = _randomize_norms(FAMILIES[family]().eval())
    r = export_causal_lm(model, tmp_path / "out", generate=4)
    assert {"prompt", "prompt_with_past", "decode", "generate"} <= set(r.checks)
    assert r.checks["generate"]["equal"]


def test_sliding_window_is_applied_in_decode(tmp_path):
    """Past the window, the asset must not see old keys: differs from the same model without a window."""
    torch.manual_seed(0)
    model = _randomize_norms(T.MistralForCausalLM(T.MistralConfig(**SMALL, **SW)).eval())
    r = export_causal_lm(model, tmp_path / "out", check=False)
    layout = cache_layout(model)
    full = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        past = FlatCacheLM(model, layout)(full[:, :11], *layout.empty(0, torch.float32))[1:]
        expected = model(full, past_key_values=T.DynamicCache(config=model.config), use_cache=True).logits[:, -1]
        model.config.sliding_window = None
        unwindowed = model(full).logits[:, -1]
    got = run_tract(r.asset, [full[:, 11:].numpy()] + [t.numpy() for t in past])[0][:, -1]
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=5e-4)
    assert np.abs(got - unwindowed.numpy()).max() > 1e-2


def test_batch_symbol(tmp_path):
    """With a batch symbol B the asset runs two sequences at once (caches of equal length)."""
    model = _llama()
    r = export_causal_lm(model, tmp_path / "out", batch_symbol=True, check=False)
    assert r.manifest["symbols"] == ["B", "S", "P"]
    assert "in_cache_key_0 = tract_core_external(shape = [B, 2, P, 16]" in _graph_text(r.asset)
    layout = cache_layout(model)
    full = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        past = FlatCacheLM(model, layout)(full[:, :6], *layout.empty(0, torch.float32, batch=2))[1:]
        expected = model(full).logits[:, 6:]
    got = run_tract(r.asset, [full[:, 6:].numpy()] + [t.numpy() for t in past])
    np.testing.assert_allclose(got[0], expected.numpy(), atol=1e-4, rtol=5e-4)


def test_cli_llm(tmp_path, capsys):
    src = _folder(tmp_path, _llama())
    assert cli_main(["llm", str(src), str(tmp_path / "out"), "--generate", "2"]) == 0
    assert "check generate" in capsys.readouterr().out
    assert (tmp_path / "out" / "model.nnef.tgz").is_file()
    assert cli_main(["llm", str(src), str(tmp_path / "out"), "--no-check"]) == 1
    assert "exists" in capsys.readouterr().err
    assert cli_main(["llm", "meta-llama/Llama-3.2-1B", str(tmp_path / "hub")]) == 1
    assert "fx2nnef never downloads" in capsys.readouterr().err
    assert not (tmp_path / "hub").exists()


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise CheckIOError("simulated failure of the last check")

    monkeypatch.setattr(llm_export, "check_generation", fail)
    with pytest.raises(CheckIOError, match="simulated"):
        export_causal_lm(_llama(), tmp_path / "out", check=False, generate=2)
    assert list(tmp_path.iterdir()) == []


def test_float16(tmp_path):
    src = _folder(tmp_path, _llama())
    r = export_causal_lm(src, tmp_path / "out", dtype="f16", generate=4)
    assert r.manifest["dtype"] == "f16" and r.manifest["inputs"]["in_cache_value_1"]["dtype"] == "f16"
    assert "datum_type = 'f16'" in _graph_text(r.asset)
    assert r.checks["generate"]["equal"]


@pytest.mark.parametrize("dtype", [None, "f16"])
def test_bfloat16_source(dtype, tmp_path):
    src = _folder(tmp_path, _llama(), dtype=torch.bfloat16)
    r = export_causal_lm(src, tmp_path / "out", dtype=dtype, generate=2 if dtype else 0)
    assert r.manifest["dtype"] == (dtype or "f32")
    assert r.checks["decode"]["max_abs_logits"] < (5e-2 if dtype else 1e-4)


def test_q4_0_weights(tmp_path):
    if "weights" not in inspect.signature(TractNNEF).parameters:
        pytest.skip("TractNNEF has no weights= option in this build (branch q4)")
    model = _llama()
    before = model.model.layers[0].mlp.up_proj.weight.clone()
    r = export_causal_lm(model, tmp_path / "out", weights="q4_0", generate=4)
    assert r.manifest["weights"] == "q4_0" and r.checks["generate"]["equal"]
    assert r.manifest["dtype"] == "f16"  # Q4_0 implies f16 activations (tract's fast Q4_0 kernels)
    assert r.manifest["weight_bytes"]["stored"] < 0.3 * r.manifest["weight_bytes"]["native"]
    assert "q4_0" in _graph_text(r.asset)
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, before)  # checks ran on the stored values, then restored


def test_q4_0_with_f32_activations_when_asked(tmp_path):
    if "weights" not in inspect.signature(TractNNEF).parameters:
        pytest.skip("TractNNEF has no weights= option in this build (branch q4)")
    r = export_causal_lm(_llama(), tmp_path / "out", weights="q4_0", dtype="f32")
    assert r.manifest["dtype"] == "f32" and r.manifest["weights"] == "q4_0"
    assert llm_export.activation_dtype(None, "f16") is None and llm_export.activation_dtype(None, "q4_0") == "f16"


def test_refusals(tmp_path):
    with pytest.raises(InvalidArgumentError, match="never downloads"):
        export_causal_lm("Qwen/Qwen2-0.5B", tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="no config.json"):
        export_causal_lm(tmp_path, tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="dtype"):
        export_causal_lm(_llama(), tmp_path / "out", dtype="bf16")
    with pytest.raises(InvalidArgumentError, match="asserts"):
        TractNNEF(asserts=["S; extension tract_registry x"])

    class NoCacheLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(16, 8)

        def forward(self, input_ids, use_cache=False):
            return T.modeling_outputs.CausalLMOutput(logits=self.embed(input_ids))

    with pytest.raises(InvalidArgumentError, match="key/value cache"):
        export_causal_lm(NoCacheLM(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


OTHER_FAMILIES = {
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                                                   initializer_range=0.1)),
    "gemma": lambda: T.GemmaForCausalLM(T.GemmaConfig(**SMALL, head_dim=16)),
    "qwen3": lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**SMALL, head_dim=16)),
    "gpt_neox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                             num_attention_heads=4, vocab_size=256,
                                                             max_position_embeddings=128, initializer_range=0.1)),
}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(OTHER_FAMILIES))
def test_other_families(family, tmp_path):
    """The remaining families of test_llm_families.py (test_families covers the same path)."""
    torch.manual_seed(0)
    model = _randomize_norms(OTHER_FAMILIES[family]().eval())
    r = export_causal_lm(model, tmp_path / "out", generate=4)
    assert r.checks["generate"]["equal"]


def test_float16_module_is_not_converted_in_place(tmp_path):
    model = _llama()
    export_causal_lm(model, tmp_path / "out", dtype="f16", check=False)
    assert next(model.parameters()).dtype == torch.float32


def test_generation_check_ignores_the_models_logits_processors(tmp_path):
    """BART's generation config forces end-of-sequence at the last step (forced_eos_token_id),
    which ``model.generate`` applies whatever config it is given; the asset's greedy tokens are
    compared with the argmax decoding, which that processor is not part of."""
    torch.manual_seed(0)
    model = _randomize_norms(T.BartForCausalLM(T.BartConfig(
        d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128, encoder_layers=2,
        encoder_attention_heads=4, encoder_ffn_dim=128, vocab_size=128, max_position_embeddings=128,
        forced_eos_token_id=2, eos_token_id=2)).eval())
    prompt = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(5))
    cfg = T.GenerationConfig(max_new_tokens=3, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        forced = model.generate(prompt, generation_config=cfg, attention_mask=torch.ones_like(prompt))[0, 5:]
    assert forced[-1] == 2  # generate forces the token: not what the logits give
    assert llm_export.greedy_reference(model, prompt, 3)[-1] != 2
    r = export_causal_lm(model, tmp_path / "out", generate=3)
    assert r.checks["generate"]["equal"]


def _qwen3_next():
    return T.Qwen3NextForCausalLM(T.Qwen3NextConfig(
        **SMALL, head_dim=16, layer_types=["linear_attention", "full_attention"], num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16))


def _lfm2():
    return T.Lfm2ForCausalLM(T.Lfm2Config(**{**SMALL, "num_hidden_layers": 3}, layer_types=["conv", "full_attention", "conv"]))


def _granite_hybrid():
    """Granite 4's Mamba-2 mixer scans the sequence in chunks of 16 here: the export's example (3
    tokens) is within one chunk, and the graph must hold for prompts of several chunks."""
    return T.GraniteMoeHybridForCausalLM(T.GraniteMoeHybridConfig(
        **SMALL, layer_types=["mamba", "attention"], mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16,
        mamba_chunk_size=16, num_local_experts=2, num_experts_per_tok=1))


@pytest.mark.parametrize("make, states", [
    (_qwen3_next, ["in_conv_state_0", "in_recurrent_state_0"]),  # gated delta net, then attention
    (_lfm2, ["in_conv_state_0", "in_conv_state_2"]),  # short convolutions around attention
    (_granite_hybrid, ["in_conv_state_0", "in_recurrent_state_0"]),  # chunked Mamba-2, then attention
], ids=["qwen3_next", "lfm2", "granite_hybrid"])
def test_hybrid_models_carry_their_states(make, states, tmp_path):
    """Linear-attention and convolution layers keep fixed-size states, which the contract carries
    as inputs and outputs beside the attention layers' caches (zeros start a sequence); the three
    modes and greedy generation match transformers with its own cache."""
    torch.manual_seed(0)
    model = _randomize_norms(make().eval())
    r = export_causal_lm(model, tmp_path / "out", generate=4)
    assert r.checks["generate"]["equal"] and r.checks["prompt_with_past"]["P"] > 0
    manifest = json.loads((tmp_path / "out" / "fx2nnef.json").read_text())
    assert all(name in manifest["inputs"] and "out" + name[2:] in manifest["outputs"] for name in states)
    assert all("P" not in manifest["inputs"][name]["shape"] for name in states)  # fixed sizes
    assert "in_cache_key_1" in manifest["inputs"]
    assert not r.export.ranges, r.export.ranges  # every prompt length


def test_state_space_model_serves_prompts_and_decoding_from_one_asset(tmp_path):
    """transformers' Mamba scans a prompt from a zero state and steps one token from its cached
    state (`if ... seq_len == 1:`): both paths are exported, merged with select on S == 1, so one
    asset serves prompts, prompts with past and decoding, and greedy generation matches."""
    torch.manual_seed(0)
    model = T.MambaForCausalLM(T.MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=2, vocab_size=64)).eval()
    r = export_causal_lm(model, tmp_path / "out", generate=5)
    assert r.checks["decode"]["S"] == 1 and r.checks["generate"]["equal"], r.checks
    assert not r.export.ranges, r.export.ranges
    assert any(g.status == "merged" and "seq_len == 1" in (g.source.code if g.source else "") for g in r.export.guards)


def test_hybrid_whose_one_token_step_differs_serves_prompts_and_decoding(tmp_path):
    """Jamba's Mamba layers step one token from their cached state with code whose shapes hold at
    S=1 only (``hidden_states.squeeze(2)`` in ``if ... seq_len == 1``): that outcome cannot be
    traced at a prompt's sizes, so the forward is also traced at S=1 and selected there. One asset
    serves prompts, prompts with past and decoding, and greedy generation matches."""
    torch.manual_seed(0)
    config = T.JambaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=64, attn_layer_period=2, attn_layer_offset=1,
                           expert_layer_period=2, expert_layer_offset=1, num_experts=2, mamba_d_state=8,
                           mamba_dt_rank=4, use_mamba_kernels=False)
    model = _randomize_norms(T.JambaForCausalLM(config).eval())
    r = export_causal_lm(model, tmp_path / "out", generate=4)
    assert r.checks["decode"]["S"] == 1 and r.checks["generate"]["equal"], r.checks
    assert not r.export.ranges, r.export.ranges
    assert any("S=1 takes other code" in n for n in r.export.notes), r.export.notes


def test_a_graph_valid_for_prompts_only_is_refused(tmp_path):
    """A graph traced on a prompt that holds for S >= 2 only (a decision on S kept on the example's
    side) cannot serve decoding: the LLM export says so."""
    from fx2nnef.llm.export import _refuse_prompt_only

    class PromptOnly(torch.nn.Module):
        def forward(self, ids):
            return ids * 2 if ids.shape[1] > 1 else ids.flip(1) + 1

    result = fx2nnef.export(PromptOnly(), (torch.arange(8).reshape(1, 8),), tmp_path / "m.nnef.tgz",
                            input_names=["ids"], branches="example",
                            target=fx2nnef.TractNNEF(dynamic_axes={"ids": {1: "S"}}))
    with pytest.raises(InvalidArgumentError, match="valid for S >= 2") as err:
        _refuse_prompt_only(PromptOnly(), result)
    assert "prompts and decoding" in str(err.value)


def test_layers_with_other_head_sizes(tmp_path):
    """Gemma 4's global layers have a larger head size than its sliding ones: each layer's
    cache gets its own shape (the contract's tensors differ per layer), and all modes check."""
    torch.manual_seed(0)
    config = T.Gemma4TextConfig(**{**SMALL, "vocab_size": 128}, head_dim=16, global_head_dim=32,
                                layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                                hidden_size_per_layer_input=0)
    model = _randomize_norms(T.Gemma4ForCausalLM(config).eval())
    layout = cache_layout(model)
    assert [d for _, d in layout.keys] == [16, 32]
    r = export_causal_lm(model, tmp_path / "out", generate=3)
    assert r.checks["generate"]["equal"] and r.checks["decode"]["P"] > 4  # past the sliding window
    manifest = json.loads((tmp_path / "out" / "fx2nnef.json").read_text())
    assert manifest["inputs"]["in_cache_key_0"]["shape"][-1] == 16
    assert manifest["inputs"]["in_cache_key_1"]["shape"][-1] == 32
