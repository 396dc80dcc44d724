"""Try every encoder-decoder family of the installed transformers: the text ones of
``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`` (T5, BART, Marian, Pegasus, ProphetNet, LED, M2M100,
NLLB-MoE, ...) and the speech ones of ``MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES`` (rows
``speech/FAMILY``: Whisper, Speech2Text, SpeechT5, ...). Each: its default config reduced to two
layers and small sizes (d_model 64, vocab 128; random weights, constant parameters with noise),
wrapped to take ``(input_ids, attention_mask, decoder_input_ids)`` — or the audio input (and its
mask) for speech — and return the logits, exported with a dynamic batch B, source length S and
target length T on a batch of two whose second row is padded (mask zeros at its end), checked in
tract (check_io: the example and other sizes). One child process per family; one JSON line per
family on stdout or in --out.

    python benchmarks/survey_seq2seq.py [--only t5,speech/whisper] [--out survey.jsonl] [--timeout 300]

Families in these mappings that are not encoder-decoders (audio-language models: a decoder-only LM
fed audio embeddings at placeholder tokens) are rows "skipped" with the reason. Whisper's encoder
takes a fixed number of frames (2 * max_source_positions, checked by the model): its S is static.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the causal-LM survey's runner

B, S, T, PAD = 2, 11, 7, 3  # the example batch: source length S, target length T; row 2 ends with PAD pads

SIZES = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
    max_position_embeddings=128, head_dim=16, num_key_value_heads=4,
    # other spellings of the same sizes
    d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, encoder_layers=2,
    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
    decoder_ffn_dim=128, max_source_positions=128, max_target_positions=128, ngram=2,
    encoder_num_hidden_layers=2, decoder_num_hidden_layers=2, encoder_num_attention_heads=4,
    decoder_num_attention_heads=4, encoder_num_key_value_heads=4, decoder_num_key_value_heads=4,
    cross_hidden_size=64, cross_num_attention_heads=4, cross_head_dim=16, cross_num_key_value_heads=4,
    src_vocab_size=128, tgt_vocab_size=128, decoder_vocab_size=128, encoder_hidden_size=64,
    # mixture of experts
    num_experts=4, num_local_experts=4, num_experts_per_tok=2, encoder_sparse_step=1, decoder_sparse_step=1,
    # speech front ends
    num_mel_bins=16, input_feat_per_channel=16, conv_channels=32, feature_projection_input_dim=16,
    speech_encoder_layers=2, speech_encoder_attention_heads=4, speech_encoder_intermediate_size=128,
    conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_feat_extract_layers=2,
    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, max_speech_positions=512,
    max_text_positions=128, speech_decoder_prenet_units=64, speaker_embedding_dim=32,
    # unused parts of multi-task families (SeamlessM4T's speech unit decoder and vocoder)
    t2u_encoder_layers=1, t2u_decoder_layers=1, t2u_encoder_ffn_dim=64, t2u_decoder_ffn_dim=64,
    t2u_encoder_attention_heads=2, t2u_decoder_attention_heads=2, t2u_vocab_size=64, unit_embed_dim=32,
    upsample_initial_channel=32, unit_hifi_gan_vocab_size=64, spkr_embed_dim=16, lang_embed_dim=16,
)

# per family: settings the sizes above leave invalid, or defaults too large for a tiny model
FAMILY_CONFIG = {
    "bigbird_pegasus": dict(block_size=4, num_random_blocks=2, attention_type="original_full"),
    "led": dict(attention_window=[4, 4], max_encoder_position_embeddings=128, max_decoder_position_embeddings=128),
    "longt5": dict(local_radius=4, global_block_size=4),
    "pegasus_x": dict(block_size=4, num_global_tokens=4, stagger_local_blocks=True),
    "fsmt": dict(langs=["en", "de"]),
    "nllb-moe": dict(expert_capacity=64, router_dtype="float32"),
    "switch_transformers": dict(expert_capacity=64, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1),
    "speech/speecht5": dict(encoder_max_relative_position=16),
    "speech/moonshine_streaming": dict(num_key_value_heads=4),  # read by its attention, absent from its config
}


def _families() -> dict:
    from transformers.models.auto.modeling_auto import (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES as TEXT,
                                                        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES as SPEECH)
    return {**{k: ("text", v) for k, v in TEXT.items()}, **{f"speech/{k}": ("speech", v) for k, v in SPEECH.items()}}


def _sized(cfg, family: dict) -> dict:
    """Keyword arguments of ``type(cfg)``: SIZES where ``cfg`` has the field, sub-configs sized the same way."""
    from transformers import PretrainedConfig

    d = cfg.to_dict()
    known = set(d) | set(getattr(cfg, "attribute_map", {}))
    kwargs = {k: v for k, v in SIZES.items() if k in known}
    for k in known:
        sub = getattr(cfg, k, None)
        if isinstance(sub, PretrainedConfig):
            kwargs[k] = {**sub.to_dict(), **_sized(sub, {})}
    n = kwargs.get("num_hidden_layers")
    if isinstance(d.get("layer_types"), list) and n:  # a hybrid's layer kinds, cut to the tiny depth
        kwargs["layer_types"] = d["layer_types"][:n]
    if "pad_token_id" in known and d.get("pad_token_id") is not None and "pad_token_id" not in family:
        kwargs["pad_token_id"] = 1
    kwargs.update(family)
    return kwargs


def _config(family_name: str, model_type: str, T_):
    cfg_cls = T_.CONFIG_MAPPING[model_type]
    family = FAMILY_CONFIG.get(family_name, {})
    if model_type in ("encoder-decoder", "speech-encoder-decoder"):  # two configs of the user's choice
        tiny = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128)
        decoder = T_.BertConfig(**tiny, is_decoder=True, add_cross_attention=True, pad_token_id=1)
        encoder = (T_.BertConfig(**tiny, pad_token_id=1) if model_type == "encoder-decoder" else
                   T_.Wav2Vec2Config(**{k: v for k, v in tiny.items() if k != "vocab_size"},
                                     conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3],
                                     num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4))
        config = cfg_cls.from_encoder_decoder_configs(encoder, decoder)
        config.decoder_start_token_id, config.pad_token_id = 2, 1
        return config
    default = cfg_cls(**family) if family else cfg_cls()
    return cfg_cls(**_sized(default, family))


def _speech_inputs(model_type: str, config, model):
    """The audio input(s) of a speech family, their names and dynamic axes."""
    import torch

    gen = torch.Generator().manual_seed(0)
    name = model.main_input_name
    if name == "inputs":  # SpeechEncoderDecoderModel: its encoder's input
        name = model.encoder.main_input_name
    if model_type == "dia":  # text in, audio codes out: decoder ids (B, T, channels)
        ids = torch.randint(5, 128, (B, S), generator=gen)
        mask = torch.ones(B, S, dtype=torch.long)
        mask[1, S - PAD:] = 0
        return [name, "attention_mask"], [ids, mask], [{0: "B", 1: "S"}] * 2
    if model_type == "pop2piano":  # T5 on audio features of width d_model
        name = "input_features"
        x = torch.randn(B, S, config.d_model, generator=gen)
        mask = torch.ones(B, S, dtype=torch.long)
        mask[1, S - PAD:] = 0
        return [name, "attention_mask"], [x, mask], [{0: "B", 1: "S"}] * 2
    if model_type == "whisper":  # a fixed number of frames
        frames = 2 * config.max_source_positions
        return [name], [torch.randn(B, config.num_mel_bins, frames, generator=gen)], [{0: "B"}]
    if name == "input_values":  # raw audio
        x = torch.randn(B, 1600, generator=gen)
    else:  # (B, frames, features)
        bins = next((getattr(config, k) for k in ("input_feat_per_channel", "feature_projection_input_dim",
                                                  "num_mel_bins") if getattr(config, k, None)), 16)
        x = torch.randn(B, 40, bins, generator=gen)
    mask = torch.ones(x.shape[:2], dtype=torch.long)
    mask[1, -x.shape[1] // 4:] = 0
    return [name, "attention_mask"], [x, mask], [{0: "B", 1: "S"}, {0: "B", 1: "S"}]


def one(family_name: str) -> dict:
    import inspect

    import torch
    from survey_causal_lm import export_row, logits_of, noisy_constants
    import transformers as T_


    kind, cls_name = _families()[family_name]
    model_type = family_name.split("/")[-1]
    row = {"family": family_name, "class": cls_name}
    default = T_.CONFIG_MAPPING[model_type]()
    if not getattr(default, "is_encoder_decoder", False):
        row.update(status="skipped", note="not an encoder-decoder: an audio-language model (a decoder-only LM fed "
                                          "audio embeddings at placeholder tokens)")
        return row
    config = _config(family_name, model_type, T_)
    config.use_cache = False
    torch.manual_seed(0)
    model = getattr(T_, cls_name)(config).eval()
    noisy_constants(model)  # constant parameters (norm weights, zero biases): bugs then show
    g = torch.Generator().manual_seed(1)
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "decoder", None), "vocab_size", 128)
    pad = getattr(config, "pad_token_id", None)
    if kind == "text":
        ids = torch.randint(5, min(vocab, 128), (B, S), generator=g)
        mask = torch.ones(B, S, dtype=torch.long)
        mask[1, S - PAD:] = 0
        if pad is not None:
            ids[1, S - PAD:] = pad
        names, inputs, axes = ["input_ids", "attention_mask"], [ids, mask], [{0: "B", 1: "S"}] * 2
    else:
        names, inputs, axes = _speech_inputs(model_type, config, model)
        if "attention_mask" not in inspect.signature(model.forward).parameters:
            names, inputs, axes = names[:1], inputs[:1], axes[:1]
    dec_vocab = next((getattr(getattr(config, k, None), "vocab_size", None) for k in ("decoder", "decoder_config")
                      if getattr(getattr(config, k, None), "vocab_size", None)), vocab)
    channels = getattr(getattr(config, "decoder_config", None), "num_channels", None)  # Dia's audio codebooks
    dec = torch.randint(5, min(dec_vocab, 128), (B, T, channels) if channels else (B, T), generator=g)
    names.append("decoder_input_ids")
    inputs.append(dec)
    axes.append({0: "B", 1: "T"})

    wrapped = logits_of(model, names)
    with torch.no_grad():
        wrapped(*inputs)
    row["params"] = sum(p.numel() for p in model.parameters())
    row["inputs"] = {n: list(x.shape) for n, x in zip(names, inputs)}
    return export_row(row, wrapped, inputs, f"/tmp/survey_s2s_{family_name.replace('/', '_')}.nnef.tgz", names,
                      dict(zip(names, axes)))


def main() -> None:
    from survey_causal_lm import survey_main

    survey_main(__file__, one, lambda: list(_families()), timeout=300)


if __name__ == "__main__":
    main()
