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
}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_exports(family, attn, tmp_path):
    make_config, cls = FAMILIES[family]
    config = make_config()
    config._attn_implementation = attn
    config.use_cache = False
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    r = fx2nnef.export(model, (ids,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}, check_io_tolerance="close"))
    assert r.check.ok and len(r.check.cases) == 2
