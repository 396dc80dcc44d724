"""``fx2nnef llm`` on vision- and audio-language folders (issue 42): an encoder graph per
modality, the decoder with the embeddings spliced at the placeholders, the manifests, and the
checks in tract (encoders at two sizes, the three modes against the model's own forward on raw
input, greedy generation from raw input with the logits compared at every step).

Tiny random-weight folders written by save_pretrained (every constant parameter, norms and
Gemma 3's zero-initialised projection included, perturbed), tokenizers made offline with the
family's special tokens."""
import json

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.errors import InvalidArgumentError

transformers = pytest.importorskip("transformers")
T = transformers

VOCAB = 300


def _non_degenerate(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or (p.numel() > 1 and p.std() == 0) or p.abs().max() == 0:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def _llama_text():
    return T.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)


def _gemma3():
    text = T.Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"])
    vision = T.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  image_size=32, patch_size=8)
    cfg = T.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=299,
                         boi_token_index=297, eoi_token_index=298)
    special = {"<start_of_image>": 297, "<end_of_image>": 298, "<image_soft_token>": 299}
    image = {"image_processor_type": "Gemma3ImageProcessor", "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
             "size": {"height": 32, "width": 32}, "do_pan_and_scan": False}
    return T.Gemma3ForConditionalGeneration(cfg), special, image


def _llava():
    vision = T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                image_size=32, patch_size=8)
    cfg = T.LlavaConfig(vision_config=vision, text_config=_llama_text(), image_token_id=299,
                        vision_feature_layer=-2, vision_feature_select_strategy="default")
    image = {"image_processor_type": "CLIPImageProcessor", "image_mean": [0.48, 0.46, 0.41],
             "image_std": [0.27, 0.26, 0.28], "crop_size": {"height": 32, "width": 32}}
    return T.LlavaForConditionalGeneration(cfg), {"<image>": 299}, image


def _idefics3():
    vision = T.Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    image_size=32, patch_size=8)
    cfg = T.Idefics3Config(vision_config=vision.to_dict(), text_config=_llama_text().to_dict(), image_token_id=299,
                           scale_factor=2)
    special = {"<fake_token_around_image>": 297, "<global-img>": 298, "<image>": 299}
    image = {"image_processor_type": "Idefics3ImageProcessor", "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
             "do_image_splitting": True, "max_image_size": {"longest_edge": 32}}
    return T.Idefics3ForConditionalGeneration(cfg), special, image


def _voxtral():
    audio = T.VoxtralEncoderConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_mel_bins=16, max_source_positions=16)
    cfg = T.VoxtralConfig(audio_config=audio.to_dict(), text_config=_llama_text().to_dict(), audio_token_id=299)
    return T.VoxtralForConditionalGeneration(cfg), {"[AUDIO]": 299, "[BEGIN_AUDIO]": 298}, None


def _qwen2_5_vl():
    cfg = T.Qwen2_5_VLConfig(text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                              rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                             vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                                out_hidden_size=32, patch_size=4, window_size=16,
                                                fullatt_block_indexes=[1]),
                             image_token_id=299, video_token_id=298, vision_start_token_id=297)
    image = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 4, "merge_size": 2,
             "temporal_patch_size": 2, "image_mean": [0.48, 0.46, 0.41], "image_std": [0.27, 0.26, 0.28],
             "min_pixels": 256, "max_pixels": 4096}
    special = {"<|vision_start|>": 297, "<|video_pad|>": 298, "<|image_pad|>": 299}
    return T.Qwen2_5_VLForConditionalGeneration(cfg), special, image


FAMILIES = {"gemma3": _gemma3, "llava": _llava, "idefics3": _idefics3, "voxtral": _voxtral, "qwen2_5_vl": _qwen2_5_vl}


def _folder(tmp_path, make):
    """A save_pretrained folder with a word-level tokenizer holding the family's special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    model, special, image = make()
    folder = tmp_path / "model"
    _non_degenerate(model).save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    for token, i in special.items():
        vocab.pop(f"t{i}")
        vocab[token] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    T.PreTrainedTokenizerFast(tokenizer_object=tok, additional_special_tokens=list(special)).save_pretrained(folder)
    if image is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(image))
    elif make is _voxtral:
        T.WhisperFeatureExtractor(feature_size=16).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_multimodal_folder_exports_and_checks(tmp_path, family, capsys):
    folder = _folder(tmp_path, FAMILIES[family])
    out = tmp_path / "out"
    if family == "gemma3":  # by the command line: it used to exit 0 with a text-only asset, the tower dropped
        from fx2nnef.cli import main

        assert main(["llm", str(folder), str(out), "--generate", "3"]) == 0
        printed = capsys.readouterr().out
        assert "in_image_embeddings" in printed and "check encoder_vision" in printed, printed
        assert "generate_multimodal" in printed, printed
        checks = json.loads((out / "fx2nnef.json").read_text())["checks"]
        _generate_from_the_folder(folder, out)
    elif family == "llava":  # without the checks of the export and the modes: the generation still runs
        checks = fx2nnef.llm.export_causal_lm(folder, out, generate=3, check=False).checks
        assert set(checks) == {"generate"} and checks["generate"]["equal"], checks
        _decoder_reads_the_embeddings(out, False)
        return
    else:
        checks = fx2nnef.llm.export_causal_lm(folder, out, generate=3).checks
    tower = "audio" if family == "voxtral" else "vision"
    modality = "audio" if family == "voxtral" else "image"
    assert {"export", "prompt", "prompt_with_past", "decode", "generate", f"encoder_{tower}"} <= set(checks), checks
    assert checks["prompt"]["N"][0] > 0 and checks["decode"]["N"] == [0] and checks["prompt_with_past"]["P"] > 0
    assert checks["generate"]["equal"] and len(checks["generate"]["tokens"]) == 3
    assert len(set(checks[f"encoder_{tower}"]["tokens"])) == 2 or family == "llava"  # two sizes (Qwen-VL: grids)
    if family == "qwen2_5_vl":  # M-RoPE on a 2-D grid of 4 x 6 image tokens, decoding after a past of 32
        assert checks["prompt"]["N"] == [24] and checks["decode"]["P"] == 37, checks
    # the folder: decoder, encoder, both manifests, tokenizer and processor files
    assert (out / "model.nnef.tgz").is_file() and (out / tower / "model.nnef.tgz").is_file()
    assert (out / "tokenizer.json").is_file() and (out / "preprocessor_config.json").is_file()
    mm = json.loads((out / "multimodal.json").read_text())
    enc = mm["encoders"][0]
    assert mm["decoder"]["path"] == "model.nnef.tgz" and enc["path"] == f"{tower}/model.nnef.tgz"
    assert enc["modality"] == modality and enc["placeholder_token_id"] == 299
    assert enc["outputs"][0]["name"] == f"out_{modality}_embeddings"
    assert enc["outputs"][0]["feeds"] == f"in_{modality}_embeddings" and enc["outputs"][0]["shape"][1] == 32
    assert "preprocessing" in enc["input"], enc
    manifest = json.loads((out / "fx2nnef.json").read_text())
    assert f"in_{modality}_embeddings" in manifest["inputs"]
    _decoder_reads_the_embeddings(out, "in_rope_delta" in manifest["inputs"])


def _generate_from_the_folder(folder, out):
    """fx2nnef.llm.generate_multimodal: an image and a prompt through both graphs in tract, the
    tokens and logits of transformers' greedy decoding; a prompt with a placeholder short is refused."""
    from fx2nnef.errors import AssetInputError
    from fx2nnef.llm.multimodal import load_multimodal

    model = load_multimodal(folder)
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    prompt = torch.tensor([[2, 297, 299, 299, 299, 299, 298, 17, 40]])
    tokens, logits = fx2nnef.llm.generate_multimodal(out, prompt[0].tolist(), {"pixel_values": image.numpy()}, 3)
    expected, ids, past = [], prompt, None
    with torch.no_grad():
        for step in range(3):
            extra = {"pixel_values": image, "token_type_ids": (ids == 299).long()} if step == 0 else {}
            o = model(input_ids=ids, past_key_values=past, use_cache=True, **extra)
            expected.append(o.logits[0, -1])
            past, ids = o.past_key_values, o.logits[:, -1:].argmax(-1)
    assert tokens == [int(e.argmax()) for e in expected]
    assert np.abs(logits - torch.stack(expected).numpy()).max() < 1e-4
    with pytest.raises(AssetInputError, match="decoder of a multimodal export.*generate_multimodal"):
        fx2nnef.llm.TractCausalLM.load(out)
    with pytest.raises(AssetInputError, match="3 placeholder token.*4 rows"):
        fx2nnef.llm.generate_multimodal(out, [2, 299, 299, 299, 5], {"pixel_values": image.numpy()}, 2)


def _decoder_reads_the_embeddings(out, mrope):
    """The decoder's logits change with the spliced rows (not a decoder that ignores them), and a
    call without placeholders takes no rows."""
    ids = np.array([[5, 299, 299, 299, 299, 7]], np.int64)
    caches = [np.zeros((1, 1, 0, 16), np.float32) for _ in range(4)]
    one = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    # Qwen-VL: the grid of the image (2 x 2 tokens after the merge), no shift before
    grid = [np.array([[1, 4, 4]], np.int64), np.zeros(1, np.int64)] if mrope else []
    none = [np.zeros((0, 3), np.int64), np.zeros(1, np.int64)] if mrope else []
    a = fx2nnef.run(out / "model.nnef.tgz", [ids, *caches, one, *grid])
    b = fx2nnef.run(out / "model.nnef.tgz", [ids, *caches, one * 0.5, *grid])
    assert np.abs(a["outputs"] - b["outputs"]).max() > 1e-3
    assert np.allclose(a["outputs"][0, 0], b["outputs"][0, 0])  # before the image: causal
    text = fx2nnef.run(out / "model.nnef.tgz", [ids[:, :1], *caches, np.zeros((0, 32), np.float32), *none])
    assert np.allclose(text["outputs"][0, 0], a["outputs"][0, 0], atol=1e-5)
    if mrope:  # the 2 x 2 image shifts the text after it by max(2, 2) - 4
        assert a["out_rope_delta"].tolist() == [-2] and text["out_rope_delta"].tolist() == [0]


def test_qwen3_vl_moe_refused_by_part(tmp_path):
    """A family needing more than a splice: one clear error naming the part, nothing written (the
    weights are not even read: the folder holds only its config)."""
    folder = tmp_path / "model"
    T.Qwen3VLMoeConfig().save_pretrained(folder)
    with pytest.raises(InvalidArgumentError, match=r"qwen3_vl_moe \(splice\).*DeepStack.*Nothing was written"):
        fx2nnef.llm.export_causal_lm(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_mrope_positions_match_transformers_over_calls():
    """Qwen-VL's positions computed as the decoder graph does, call by call (two images of other
    grids, text between, the second image after a past holding the first), equal transformers'
    get_rope_index over the whole sequence; the shift carried is its rope_deltas."""
    from fx2nnef.llm.mrope import mrope_positions

    model, _, _ = _qwen2_5_vl()
    grids = torch.tensor([[1, 8, 12], [1, 6, 2]])  # 4 x 6 and 3 x 1 tokens after the merge
    ids = torch.cat([torch.arange(3), torch.full((24,), 299), torch.arange(4), torch.full((3,), 299),
                     torch.arange(5)]).unsqueeze(0)
    expected, delta = model.model.get_rope_index(ids, (ids == 299).int(), image_grid_thw=grids)
    cut, shift = 29, torch.zeros(1, dtype=torch.long)
    got = []
    for start, stop, grid in ((0, cut, grids[:1]), (cut, ids.shape[1], grids[1:])):
        positions, shift = mrope_positions(ids[:, start:stop] == 299, start, grid, shift, 2)
        got.append(positions)
    assert torch.equal(torch.cat(got, dim=2), expected) and shift.tolist() == delta[0].tolist()
    step, _ = mrope_positions(torch.zeros(1, 1, dtype=torch.bool), ids.shape[1], grids[:0], shift, 2)
    assert step.flatten().tolist() == [ids.shape[1] + int(delta)] * 3  # decoding after it
