"""Try every text-encoder family of the installed transformers' sequence classification: its default
config reduced to two layers and small sizes (random weights, norm weights with noise), wrapped to
take ``(input_ids, attention_mask[, token_type_ids])`` and return the logits, exported with a dynamic
batch B and length S on a batch of two whose second row is padded (mask zeros at its end), checked in
tract (check_io: the example and other sizes). One child process per family; one JSON line per
family on stdout or in --out.

    python benchmarks/survey_encoders.py [--only bert,deberta-v2] [--out survey.jsonl] [--timeout 240]

Decoder-only families (causal LMs with no ``is_decoder`` switch, or whose position 0 does not see the
later tokens), encoder-decoders and families whose
classifier needs more than text (images, boxes, entities, tables) are rows "skipped" with the reason.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the causal-LM survey's runner

B, S, PAD = 2, 11, 3  # the example batch; its second row ends with PAD padding tokens

SIZES = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
    max_position_embeddings=128, type_vocab_size=2, head_dim=16, num_key_value_heads=4,
    # other spellings of the same sizes
    dim=64, hidden_dim=128, n_layers=2, n_heads=4, d_model=64, n_head=4, d_head=16, d_inner=128, num_layers=2,
    num_heads=4, d_kv=16, d_ff=128, emb_dim=64, embedding_size=64, n_positions=128, ffn_dim=128,
    encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
)

# per family: settings the sizes above leave invalid, or defaults too large for a tiny model
FAMILY_CONFIG = {
    "albert": dict(embedding_size=32, num_hidden_groups=1),
    "funnel": dict(block_sizes=[1, 1], block_repeats=None, num_decoder_layers=1),
    "mobilebert": dict(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2),
    "rembert": dict(input_embedding_size=32, output_embedding_size=32),
    "longformer": dict(attention_window=[4, 4]),
    "big_bird": dict(block_size=4, num_random_blocks=2),
    "canine": dict(num_hash_buckets=64, downsampling_rate=4, local_transformer_stride=8),
    "reformer": dict(attn_layers=["local", "local"], axial_pos_embds_dim=[32, 32], axial_pos_shape=[8, 16],
                     local_attn_chunk_length=8),
    "esm": dict(vocab_size=33, pad_token_id=1, mask_token_id=32),
    "squeezebert": dict(q_groups=4, k_groups=4, v_groups=4, post_attention_groups=1, intermediate_groups=4,
                        output_groups=4, embedding_size=64),
    "xmod": dict(default_language="en_XX"),
    "mra": dict(block_per_row=2, approx_mode="full"),
    "lilt": dict(hidden_size=96),  # its layout stream is hidden_size / channel_shrink_ratio, six box embeddings
}
# in the causal-LM mapping, yet their sequence classifier reads every token (no ``is_decoder`` in their config)
BIDIRECTIONAL_LM = {"xlm", "xlnet"}
# families whose sequence classifier needs more than token ids and a mask: the reason is the row
NOT_TEXT_ONLY = {
    "layoutlmv2": "document model: needs an image (detectron2 visual backbone) and bounding boxes",
    "layoutlmv3": "document model: needs bounding boxes (and pixel values for its visual tokens)",
    "luke": "entity-aware: its classifier reads entity ids, positions and masks",
    "tapas": "table model: seven token-type ids per token (row, column, rank...) from its tokenizer",
    "perceiver": "its text classifier takes bytes through a latent array of fixed size (inputs, not input_ids)",
    "modernvbert": "vision-language model (pixel values)",
    "ultravbert": "vision-language model (pixel values)",
}


def _families() -> dict:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as NAMES

    return dict(NAMES)


def _default(model_type: str, T):
    cfg_cls = T.CONFIG_MAPPING[model_type]
    try:
        return cfg_cls()
    except Exception:  # noqa: BLE001 - a default the family's own validation refuses
        return cfg_cls(**FAMILY_CONFIG.get(model_type, {}))


def _config(model_type: str, T):
    cfg_cls = T.CONFIG_MAPPING[model_type]
    family = FAMILY_CONFIG.get(model_type, {})
    default = _default(model_type, T)
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    kwargs = {k: v for k, v in SIZES.items() if k in known}
    if "pad_token_id" in known and "pad_token_id" not in family:
        kwargs["pad_token_id"] = 0
    kwargs.update(num_labels=3, **family)
    config = cfg_cls(**kwargs)
    return default, config


def _causal_names() -> dict:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

    return CAUSAL


def _is_decoder_only(model_type: str, default) -> bool:
    """A causal LM's classifier: the family has a causal LM that cannot be an encoder (no ``is_decoder``)."""
    import transformers as T

    causal = model_type in _causal_names() or hasattr(
        T, _families()[model_type].replace("ForSequenceClassification", "ForCausalLM"))
    return (causal and "is_decoder" not in default.to_dict() and model_type not in BIDIRECTIONAL_LM)


def _sees_later_tokens(model, ids) -> bool:
    """Whether the first position's hidden state depends on the later tokens."""
    import torch

    base = model.base_model
    other = ids.clone()
    other[:, 1:] = 5 + (other[:, 1:] - 4) % (int(ids.max()) - 4)
    with torch.no_grad():
        a = base(input_ids=ids)[0]
        b = base(input_ids=other)[0]
    return not bool(torch.allclose(a[:, 0], b[:, 0], atol=1e-6))


def one(model_type: str) -> dict:
    import torch
    from survey_causal_lm import export_row, logits_of, noisy_constants
    import transformers as T


    cls_name = _families()[model_type]
    row = {"family": model_type, "class": cls_name}
    if model_type in NOT_TEXT_ONLY:
        row.update(status="skipped", note=NOT_TEXT_ONLY[model_type])
        return row
    default = _default(model_type, T)
    if getattr(default, "is_encoder_decoder", False):
        row.update(status="skipped", note="encoder-decoder")
        return row
    if _is_decoder_only(model_type, default):
        row.update(status="skipped", note="decoder-only: benchmarks/survey_causal_lm.py")
        return row
    default, config = _config(model_type, T)
    torch.manual_seed(0)
    model = getattr(T, cls_name)(config).eval()
    noisy_constants(model)  # constant parameters (norm weights, zero biases): bugs then show
    vocab = getattr(config, "vocab_size", 128) or 128
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, min(vocab, 128), (B, S), generator=g)
    if not _sees_later_tokens(model, ids):
        if model_type in _causal_names():
            row.update(status="skipped", note="decoder-only (position 0 does not see the later tokens): "
                                              "benchmarks/survey_causal_lm.py")
            return row
        row["note"] = "position 0 does not see the later tokens"
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, S - PAD:] = 0
    pad = getattr(config, "pad_token_id", None)
    if pad is not None:
        ids[1, S - PAD:] = pad
    names, inputs = ["input_ids", "attention_mask"], [ids, mask]
    params = inspect.signature(model.forward).parameters
    if "token_type_ids" in params:
        types = max(1, min(int(getattr(config, "type_vocab_size", 2) or 1), 2))
        tt = torch.zeros(B, S, dtype=torch.long)
        tt[:, S // 2:] = types - 1
        names.append("token_type_ids")
        inputs.append(tt)

    wrapped = logits_of(model, names)
    with torch.no_grad():
        wrapped(*inputs)
    row["params"] = sum(p.numel() for p in model.parameters())
    row["inputs"] = names
    return export_row(row, wrapped, inputs, f"/tmp/survey_enc_{model_type}.nnef.tgz", names,
                      {n: {0: "B", 1: "S"} for n in names})


def main() -> None:
    from survey_causal_lm import survey_main

    survey_main(__file__, one, lambda: sorted(_families()), timeout=240)


if __name__ == "__main__":
    main()
