"""Try every image- and audio-classification family of the installed transformers: its default
config with two layers (random weights), one example input, export with a dynamic batch (and a
dynamic length for raw audio), check in tract. One child process per family; one JSON line per
family on stdout or in --out.

    python benchmarks/survey_vision_audio.py [--only vit,wav2vec2] [--out survey.jsonl] [--timeout 300]

Object detection, semantic segmentation and depth estimation families are rows named
``detection/FAMILY``, ``segmentation/FAMILY`` and ``depth/FAMILY`` (``--only detection/detr``); they
run after the classification ones (their default configs keep their default backbones, reduced to two
layers where a field says so; inputs of 224 x 224).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the causal-LM survey's runner

LAYERS = dict(num_hidden_layers=2, num_layers=2, encoder_layers=2, decoder_layers=2)


def _families() -> dict:
    from transformers.models.auto.modeling_auto import (MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES as AUDIO,
                                                        MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES as DEPTH,
                                                        MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES as IMAGE,
                                                        MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES as DETECTION,
                                                        MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES as SEGMENTATION)
    out = {**{k: ("image", v) for k, v in IMAGE.items()}, **{k: ("audio", v) for k, v in AUDIO.items()}}
    for task, names in (("detection", DETECTION), ("segmentation", SEGMENTATION), ("depth", DEPTH)):
        out.update({f"{task}/{k}": ("image", v) for k, v in names.items()})
    return out


def _example(kind: str, config, model):
    """One input of the sizes the family expects, and the axes exported as dynamic."""
    import torch

    gen = torch.Generator().manual_seed(0)
    name = model.main_input_name
    if kind == "image":
        size = getattr(config, "image_size", 224)
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(config, "num_channels", 3)
        return name, torch.randn(1, channels, size, size, generator=gen), {0: "B"}
    if name == "input_values" and hasattr(config, "num_mel_bins") and hasattr(config, "max_length"):  # a spectrogram
        return name, torch.randn(1, config.max_length, config.num_mel_bins, generator=gen), {0: "B"}
    if name == "input_features":
        bins = getattr(config, "num_mel_bins", 80)
        frames = 2 * getattr(config, "max_source_positions", 1500)
        if hasattr(config, "feature_projection_input_dim"):  # wav2vec2-bert: (B, T, features)
            return name, torch.randn(1, 200, config.feature_projection_input_dim, generator=gen), {0: "B", 1: "T"}
        return name, torch.randn(1, bins, frames, generator=gen), {0: "B"}
    return name, torch.randn(1, 16000, generator=gen), {0: "B", 1: "T"}  # raw audio, 1 s at 16 kHz


def one(family: str) -> dict:
    import torch
    from survey_causal_lm import noisy_constants
    import transformers as T

    import fx2nnef

    kind, cls_name = _families()[family]
    if isinstance(cls_name, (tuple, list)):  # several heads (DeiT with and without its teacher): the first
        cls_name = cls_name[0]
    row = {"family": family, "kind": kind, "class": cls_name}
    cfg_cls = T.CONFIG_MAPPING[family.split("/")[-1]]
    default = cfg_cls()
    known = set(default.to_dict())
    # no timm and nothing downloaded: a default timm backbone becomes a small transformers ResNet
    extra = {"use_timm_backbone": False, "use_pretrained_backbone": False}
    backbone = getattr(default, "backbone_config", None)
    if getattr(backbone, "model_type", None) == "timm_backbone":
        extra["backbone_config"] = T.ResNetConfig(hidden_sizes=[32, 64, 128, 256], embedding_size=32,
                                                  depths=[1, 1, 1, 1], layer_type="basic",
                                                  out_features=["stage2", "stage3", "stage4"])
    config = cfg_cls(**{k: v for k, v in {**LAYERS, **extra}.items() if k in known or k == "backbone_config"})
    torch.manual_seed(0)
    model = getattr(T, cls_name)(config).eval()
    noisy_constants(model)  # constant parameters (norm weights, zero biases): bugs then show
    name, x, axes = _example(kind, config, model)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, inputs):
            out = self.model(**{name: inputs})
            found = tuple(getattr(out, k) for k in ("logits", "pred_boxes", "predicted_depth")
                          if isinstance(getattr(out, k, None), torch.Tensor))
            return found if len(found) > 1 else found[0]

    wrapped = Logits().eval()
    with torch.no_grad():
        wrapped(x)
    row["params"] = sum(p.numel() for p in model.parameters())
    t0 = time.time()
    r = fx2nnef.export(wrapped, (x,), f"/tmp/survey_{family.replace('/', '_')}.nnef.tgz", input_names=[name],
                       target=fx2nnef.TractNNEF(dynamic_axes={name: axes}))
    row.update(status="ok" if r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               max_abs=float(r.max_abs_diff), ranges={k: str(v) for k, v in r.ranges.items()})
    return row


def main() -> None:
    from survey_causal_lm import survey_main

    survey_main(__file__, one, lambda: sorted(_families()), timeout=300)


if __name__ == "__main__":
    main()
