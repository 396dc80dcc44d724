"""A multimodal LM (Gemma 3: SigLIP image features scattered into the token embeddings, a
blockwise mask letting image tokens attend to each other, built by transformers with vmapped
mask functions): exported with a dynamic sequence length. The probes and checks grow the ids by
their last token where repeating them whole would add image tokens the model refuses."""
import pytest
import torch

import fx2nnef
from harness import tract_matches_eager

transformers = pytest.importorskip("transformers")


def _model():
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    torch.manual_seed(0)
    text = Gemma3TextConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                            layer_types=["sliding_attention", "full_attention"])
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=32, patch_size=8)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=299,
                       boi_token_index=297, eoi_token_index=298)
    cfg._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, pixel_values, token_type_ids):
            return self.m(input_ids=input_ids, pixel_values=pixel_values, token_type_ids=token_type_ids).logits

    return Logits().eval()


def _inputs(s, seed, start=2):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 290, (1, s), generator=g)
    ids[0, start:start + 4] = 299
    return [ids, torch.randn(1, 3, 32, 32, generator=g), (ids == 299).long()]


def test_gemma3_image_and_text_dynamic_length(tmp_path):
    model = _model()
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, tuple(_inputs(12, 0)), out, input_names=["input_ids", "pixel_values", "token_type_ids"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}, "token_type_ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 2, r.check  # the example and a longer prompt
    # unbounded, or S >= 6 where the probes ran the model at S=5 (its 4 image tokens cut: it refuses)
    assert "S" not in r.ranges or (r.ranges["S"].contains(6) and r.ranges["S"].contains(40)), r.ranges
    assert any("broadcasting ops" in n for n in r.notes), r.notes
    tract_matches_eager(out, model, [_inputs(7, 1, start=0), _inputs(23, 2, start=11)])
