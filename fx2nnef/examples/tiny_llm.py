"""A tiny random-weight transformers LlamaForCausalLM, built from a config (no model hub)."""
from __future__ import annotations

import torch


def tiny_llama(attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """LlamaForCausalLM with hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 256, random weights.

    RMSNorm weights are randomised too, so a dropped norm weight would show in the numbers.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, use_cache=False)
    settings.update(overrides)
    config = LlamaConfig(attn_implementation=attn_implementation, **settings)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


def example_input_ids(seq_len: int = 8, batch: int = 1, vocab: int = 256, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq_len), generator=g)


def factory(attn_implementation: str = "sdpa", seq_len: int = 8):
    """``fx2nnef export fx2nnef.examples.tiny_llm:factory out.nnef.tgz`` entry point."""
    return tiny_llama(attn_implementation), (example_input_ids(seq_len),)
