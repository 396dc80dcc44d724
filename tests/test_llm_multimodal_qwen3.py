"""``fx2nnef llm`` on a Qwen3-VL folder (issue 42): the encoder outputs the embeddings and the
DeepStack streams, the decoder adds the streams at the image positions after its first layers,
with interleaved M-RoPE positions from the image grid; checked in tract at export (encoder at two
grids, the three modes, greedy generation with the logits at every step)."""
import json

import numpy as np
import pytest

from test_llm_multimodal import VOCAB, _folder

transformers = pytest.importorskip("transformers")
T = transformers


def _qwen3_vl():
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                 "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=4,
                  num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
    cfg = T.Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=299, video_token_id=298,
                          vision_start_token_id=297)
    image = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 4, "merge_size": 2,
             "temporal_patch_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    special = {"<|vision_start|>": 297, "<|video_pad|>": 298, "<|image_pad|>": 299}
    return T.Qwen3VLForConditionalGeneration(cfg), special, image


def test_qwen3_vl_deepstack_exports_and_checks(tmp_path):
    import fx2nnef

    folder = _folder(tmp_path, _qwen3_vl)
    out = tmp_path / "out"
    fx2nnef.llm.export_causal_lm(folder, out, generate=3)
    manifest = json.loads((out / "fx2nnef.json").read_text())
    checks = manifest["checks"]
    assert {"encoder_vision", "prompt", "prompt_with_past", "decode", "generate"} <= set(checks), checks
    assert checks["generate"]["equal"], checks["generate"]
    (encoder,) = manifest["multimodal"]["encoders"]
    assert [s["name"] for s in encoder["streams"]] == ["out_image_deepstack_0", "out_image_deepstack_1"]
    assert encoder["tables"]["position_grid_side"] == 4
    for k in range(2):
        assert manifest["inputs"][f"in_image_deepstack_{k}"]["added_after_layer"] == k
    assert "drift" not in manifest  # the asset keeps the model's values
    t2n = json.loads((out / "multimodal.json").read_text())
    assert [o["feeds"] for o in t2n["encoders"][0]["outputs"]] == [
        "in_image_embeddings", "in_image_deepstack_0", "in_image_deepstack_1"]


@pytest.mark.parametrize("options", [{"dtype": "f16"}, {"weights": "q4_0"}], ids=["f16", "q4_0"])
def test_qwen3_vl_drift_from_the_original_model(tmp_path, options):
    """A rounded multimodal asset reports its drift from the ORIGINAL model (its logits computed
    before the cast or the rounding), with the text LLM's fields, over the check modes and the
    greedy tokens; the correctness checks still compare with the model as exported."""
    import fx2nnef

    folder = _folder(tmp_path, _qwen3_vl)
    result = fx2nnef.llm.export_causal_lm(folder, tmp_path / "out", generate=2, **options)
    manifest = json.loads((tmp_path / "out" / "fx2nnef.json").read_text())
    drift = manifest["drift"]
    assert drift["original_dtype"] == "f32", drift
    assert {"max_abs", "max_rel", "top1_agreement", "kl_mean", "kl_max", "greedy", "positions"} <= set(drift), drift
    assert "original model" in drift["what"] and "prompt with past" in drift["what"], drift["what"]
    assert 0 < drift["max_abs"] < 1 and drift["positions"] == sum(
        manifest["checks"][m]["S"] for m in ("prompt", "prompt_with_past", "decode")), drift
    assert "drift_logits" not in manifest["checks"]["generate"]
    assert "drift from the original model" in str(result)


def test_qwen3_vl_other_grids_and_two_images(tmp_path):
    """Exported once (without the export's checks), the Qwen3-VL encoder takes grids it was not
    traced on (its position table resampled by the host tables), its DeepStack streams equal to
    transformers' tower; two images of two grids in one prompt, text between, through encoder and
    decoder in tract by generate_multimodal: tokens and logits at every step as transformers'."""
    import torch

    import fx2nnef
    from fx2nnef.llm.multimodal import load_multimodal
    from fx2nnef.llm.qwen_vision import vision_tables
    from test_llm_multimodal_more import two_images_generation

    folder = _folder(tmp_path, _qwen3_vl)
    out = tmp_path / "out"
    fx2nnef.llm.export_causal_lm(folder, out, check=False)
    model = load_multimodal(folder)
    dim = 3 * 2 * 4 * 4
    g = torch.Generator().manual_seed(3)
    names = ["out_image_embeddings", "out_image_deepstack_0", "out_image_deepstack_1"]
    for grid in ([[1, 10, 6]], [[2, 4, 8], [1, 12, 14]]):
        grid = torch.tensor(grid)
        patches = torch.randn(int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum()), dim, generator=g)
        got = fx2nnef.run(out / "vision" / "model.nnef.tgz",
                          [patches.numpy(), *[t.numpy() for t in vision_tables(model.config, grid)]])
        with torch.no_grad():
            own = model.model.visual(patches, grid_thw=grid, return_dict=True)
        for name, expected in zip(names, [own.pooler_output, *own.deepstack_features]):
            assert np.abs(got[name] - expected.numpy()).max() < 1e-4, (grid.tolist(), name)
    two_images_generation(out, model, dim, g)
