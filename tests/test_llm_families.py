"""Other causal-LM families (random weights, built from configs) export with a dynamic sequence axis."""
import pytest
import torch
import transformers as T

import fx2nnef

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
FAMILIES = {
    "gpt2": (lambda: T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128), T.GPT2LMHeadModel),
    "qwen2": (lambda: T.Qwen2Config(**SMALL), T.Qwen2ForCausalLM),
    "mistral": (lambda: T.MistralConfig(**SMALL), T.MistralForCausalLM),
    "phi3": (lambda: T.Phi3Config(**SMALL, pad_token_id=0), T.Phi3ForCausalLM),
    "gemma": (lambda: T.GemmaConfig(**SMALL, head_dim=16), T.GemmaForCausalLM),
    "gemma2": (lambda: T.Gemma2Config(**SMALL, head_dim=16), T.Gemma2ForCausalLM),
    "qwen3": (lambda: T.Qwen3Config(**SMALL, head_dim=16), T.Qwen3ForCausalLM),
    "gpt_neox": (lambda: T.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, vocab_size=256, max_position_embeddings=128),
                 T.GPTNeoXForCausalLM),
}


NO_SDPA = {("gemma2", "sdpa")}  # transformers refuses sdpa there (softcapping)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_exports(family, attn, tmp_path):
    if (family, attn) in NO_SDPA:
        pytest.skip(f"transformers has no {attn} attention for {family}")
    make_config, cls = FAMILIES[family]
    config = make_config()
    config._attn_implementation = attn
    config.use_cache = False
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    r = fx2nnef.export(model, (ids,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


def _others():
    torch.manual_seed(0)
    bert = T.BertModel(T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    vocab_size=100, max_position_embeddings=64))
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    vit = T.ViTModel(T.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 image_size=32, patch_size=8))
    w2v = T.Wav2Vec2Model(T.Wav2Vec2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=(32, 32),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_feat_extract_layers=2, num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4))
    t5 = T.T5ForConditionalGeneration(T.T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab_size=100, d_kv=16))
    g = torch.Generator().manual_seed(1)
    return {
        "bert_with_padding_mask": (bert, (ids,), {"attention_mask": mask},
                                   {"input_ids": {1: "S"}, "attention_mask": {1: "S"}}),
        "vit": (vit, (torch.randn(1, 3, 32, 32, generator=g),), {}, {}),
        "wav2vec2_strided_time": (w2v, (torch.randn(1, 4000, generator=g),), {}, {"input_values": {1: "T"}}),
        "t5_encoder_decoder": (t5, (torch.randint(0, 100, (1, 6), generator=g),),
                               {"decoder_input_ids": torch.randint(0, 100, (1, 4), generator=g), "use_cache": False},
                               {"input_ids": {1: "S"}, "decoder_input_ids": {1: "D"}}),
    }


@pytest.mark.parametrize("name", ["bert_with_padding_mask", "vit", "wav2vec2_strided_time", "t5_encoder_decoder"])
def test_other_architectures(name, tmp_path):
    model, args, kwargs, dyn = _others()[name]
    r = fx2nnef.export(model.eval(), args, tmp_path / "m.nnef.tgz", kwargs=kwargs,
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and (len(r.check.cases) >= 3 if dyn else len(r.check.cases) == 1)


def test_llama_with_padding_mask_dynamic_batch_and_sequence(tmp_path):
    from fx2nnef.examples.tiny_llm import tiny_llama

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding
    dyn = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}}
    r = fx2nnef.export(tiny_llama("sdpa"), (ids,), tmp_path / "m.nnef.tgz", kwargs={"attention_mask": mask},
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and r.input_names == ["input_ids", "attention_mask"]


def _hybrid(config_cls, model_cls, **extra):
    """A two-layer hybrid: one linear-attention / state-space layer and one attention layer."""
    def make():
        config = config_cls(**{**SMALL, "head_dim": 16, **extra})
        config.use_cache = False
        torch.manual_seed(0)
        model = model_cls(config).eval()
        with torch.no_grad():  # norm weights all ones or zeros would hide bugs
            for p in model.parameters():
                if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                    p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
        return model
    return make


HYBRIDS = {
    # gated delta net: the sequence padded to a multiple of 64 (F.pad by a size), a unit
    # lower-triangular solve per chunk, a causal conv sliced from the end (x[..., -S:])
    "qwen3_next": _hybrid(T.Qwen3NextConfig, T.Qwen3NextForCausalLM, layer_types=["linear_attention", "full_attention"],
                          num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                          shared_expert_intermediate_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
                          linear_key_head_dim=16, linear_value_head_dim=16),
    # Mamba-2 mixer: the sequence padded to a multiple of its chunk (256 - S below 256)
    "bamba": _hybrid(T.BambaConfig, T.BambaForCausalLM, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32,
                     mamba_d_state=16, mamba_chunk_size=16),
}


@pytest.mark.parametrize("family", list(HYBRIDS))
def test_hybrid_family_exports(family, tmp_path):
    """Hybrid LLMs whose linear-attention or state-space layers pad and chunk the sequence export
    with a dynamic S; where torch's kernels decide on the number of chunks the range says so."""
    model = HYBRIDS[family]()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    r = fx2nnef.export(model, (ids,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 2
    for rng in r.ranges.values():
        assert rng.contains(7) and (rng.hi is None or rng.hi >= 16), r.ranges
    if family == "bamba":  # one chunk at the example: traced again past it, valid for every length
        assert not r.ranges, r.ranges
