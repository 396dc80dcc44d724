"""More of ``fx2nnef llm`` on vision-language folders (issue 42): Qwen-VL's encoder over patch
grids of any size (its per-patch tables computed on the host from ``image_grid_thw``), and two
images in one prompt, through both graphs in tract against transformers' greedy decoding with
the logits compared at every step."""
import json

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.targets.tolerance import compare_outputs, format_diffs

from test_llm_multimodal import _folder, _qwen2_5_vl

T = pytest.importorskip("transformers")


def _greedy(model, ids, pixel_values, grid, steps):
    """transformers' greedy decoding from the raw input: tokens and the last logits at every step."""
    model.model.rope_deltas = None
    expected, past = [], None
    with torch.no_grad():
        for step in range(steps):
            extra = {"pixel_values": pixel_values, "image_grid_thw": grid, "mm_token_type_ids": (ids == 299).int()} if step == 0 else {}
            out = model(input_ids=ids, past_key_values=past, use_cache=True, **extra)
            expected.append(out.logits[0, -1])
            past, ids = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return [int(e.argmax()) for e in expected], torch.stack(expected).numpy()


def two_images_generation(out, model, dim: int, g: torch.Generator) -> tuple:
    """Two images of two grids (5 x 3 and 2 x 4 image tokens) in one prompt, text between, through
    the Qwen-VL encoder and decoder in tract by generate_multimodal: tokens and logits at every
    step as transformers'. Returns ``(ids, pixel_values, grid)``."""
    grid = torch.tensor([[1, 10, 6], [1, 4, 8]])
    pixel_values = torch.randn(60 + 32, dim, generator=g)
    ids = torch.cat([torch.tensor([5, 297]), torch.full((15,), 299), torch.tensor([7, 9, 297]), torch.full((8,), 299),
                     torch.tensor([11, 13])]).unsqueeze(0)
    tokens, logits = fx2nnef.llm.generate_multimodal(out, ids[0].tolist(), {"pixel_values": pixel_values.numpy(),
                                                                            "image_grid_thw": grid.numpy()}, 4)
    expected_tokens, expected_logits = _greedy(model, ids, pixel_values, grid, 4)
    diff = compare_outputs(["logits"], [expected_logits], [logits], "approximate")[0]
    assert tokens == expected_tokens and diff.ok, (np.abs(logits - expected_logits).max(axis=1), format_diffs([diff]))
    return ids, pixel_values, grid


def test_qwen_vl_encoder_and_generation_over_other_grids(tmp_path):
    """Exported once (without the export's checks), the Qwen2.5-VL encoder takes grids it was not
    traced on: alone against transformers' tower (windows cut at the border, two frames), and two
    images of two grids in one prompt, text between, through encoder and decoder in tract."""
    from fx2nnef.llm.multimodal import load_multimodal
    from fx2nnef.llm.qwen_vision import vision_tables

    folder = _folder(tmp_path, _qwen2_5_vl)
    out = tmp_path / "out"
    fx2nnef.llm.export_causal_lm(folder, out, check=False)
    model = load_multimodal(folder)
    tables = json.loads((out / "fx2nnef.json").read_text())["multimodal"]["encoders"][0]["tables"]
    assert tables["window_tokens"] == 2 and set(tables["inputs"]) == {"position_ids", "frames", "windows"}
    dim = 3 * 2 * 4 * 4
    g = torch.Generator().manual_seed(3)
    for grid in ([[1, 10, 6]], [[2, 4, 8], [1, 12, 14]]):
        grid = torch.tensor(grid)
        patches = torch.randn(int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum()), dim, generator=g)
        got = fx2nnef.run(out / "vision" / "model.nnef.tgz",
                          [patches.numpy(), *[t.numpy() for t in vision_tables(model.config, grid)]])
        with torch.no_grad():
            expected = model.model.visual(patches, grid_thw=grid, return_dict=True).pooler_output.numpy()
        assert got["out_image_embeddings"].shape == expected.shape
        assert np.abs(got["out_image_embeddings"] - expected).max() < 1e-4, grid.tolist()
    ids, pixel_values, grid = two_images_generation(out, model, dim, g)
    from fx2nnef.errors import AssetInputError
    with pytest.raises(AssetInputError, match="image_grid_thw"):
        fx2nnef.llm.generate_multimodal(out, ids[0].tolist(), {"pixel_values": pixel_values.numpy()}, 1)
    with pytest.raises(AssetInputError, match="holds 60 patches, pixel_values 92"):
        fx2nnef.llm.generate_multimodal(out, ids[0].tolist(), {"pixel_values": pixel_values.numpy(),
                                                               "image_grid_thw": grid[:1].numpy()}, 1)


def test_gemma3_two_images_in_one_prompt(tmp_path):
    """Two images (two blocks of placeholders, text between) in one prompt: the encoder on both,
    the decoder splicing their rows in order, each image's tokens attending each other both ways
    and not the other image's; tokens and logits at every step as transformers'."""
    from fx2nnef.llm.multimodal import load_multimodal
    from test_llm_multimodal import _gemma3

    folder = _folder(tmp_path, _gemma3)
    out = tmp_path / "out"
    fx2nnef.llm.export_causal_lm(folder, out, check=False)
    model = load_multimodal(folder)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    prompt = torch.tensor([[2, 297, 299, 299, 299, 299, 298, 17, 40, 297, 299, 299, 299, 299, 298, 23]])
    tokens, logits = fx2nnef.llm.generate_multimodal(out, prompt[0].tolist(), {"pixel_values": images.numpy()}, 3)
    expected, ids, past = [], prompt, None
    with torch.no_grad():
        for step in range(3):
            extra = {"pixel_values": images, "token_type_ids": (ids == 299).long()} if step == 0 else {}
            o = model(input_ids=ids, past_key_values=past, use_cache=True, **extra)
            expected.append(o.logits[0, -1])
            past, ids = o.past_key_values, o.logits[:, -1:].argmax(-1)
    diff = compare_outputs(["logits"], [torch.stack(expected).numpy()], [logits], "approximate")[0]
    assert tokens == [int(e.argmax()) for e in expected] and diff.ok, format_diffs([diff])


def _qwen2_vl():
    cfg = T.Qwen2VLConfig(text_config=dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, num_key_value_heads=1,
                                           rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                          vision_config=dict(depth=2, embed_dim=32, hidden_size=32, mlp_ratio=2, num_heads=2,
                                             patch_size=4),
                          image_token_id=299, video_token_id=298, vision_start_token_id=297)
    image = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 4, "merge_size": 2,
             "temporal_patch_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    special = {"<|vision_start|>": 297, "<|video_pad|>": 298, "<|image_pad|>": 299}
    return T.Qwen2VLForConditionalGeneration(cfg), special, image


def test_qwen2_vl_without_windows(tmp_path):
    """Qwen2-VL's tower (full attention per frame, no windows): the encoder checked against
    transformers' tower on one and three images of other grids, the decoder's modes and greedy
    generation from the raw input, all in tract."""
    folder = _folder(tmp_path, _qwen2_vl)
    result = fx2nnef.llm.export_causal_lm(folder, tmp_path / "out", generate=2)
    checks = result.checks
    assert len(set(checks["encoder_vision"]["tokens"])) == 2 and checks["generate"]["equal"], checks
    assert result.manifest["multimodal"]["encoders"][0]["tables"]["window_tokens"] == 0
