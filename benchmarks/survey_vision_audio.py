"""Try every image- and audio-classification family of the installed transformers: its default
config with two layers (random weights), one example input, export with a dynamic batch (and a
dynamic length for raw audio), check in tract. One child process per family; one JSON line per
family on stdout or in --out.

    python benchmarks/survey_vision_audio.py [--only vit,wav2vec2] [--out survey.jsonl] [--timeout 300]

Object detection, semantic segmentation and depth estimation families are rows named
``detection/FAMILY``, ``segmentation/FAMILY`` and ``depth/FAMILY`` (``--only detection/detr``); they
run after the classification ones (their default configs keep their default backbones, reduced to two
layers where a field says so, with the fields of ``_fixes`` where the default does not run; inputs of
224 x 224 unless ``SIZES`` says otherwise). A row whose check failed the plain comparison gives
``float64``: how far tract and eager float32 are from the model's float64 outputs (the export's own
arbitration, ``fx2nnef.targets.rounding``: float32 rounding alone passes), or why float64 was not run.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the causal-LM survey's runner

LAYERS = dict(num_hidden_layers=2, num_layers=2, encoder_layers=2, decoder_layers=2)


def _fixes(family: str, default) -> dict:
    """Config fields a family's default leaves to its hub files (None there, so the eager model
    fails) or sets for more layers than LAYERS keeps: the smallest change with which the eager
    model runs, so that the row tests the exporter and not the config."""
    import transformers as T

    four = dict(num_hidden_layers=4)  # heads that read four hidden states
    intraclass = {"reduce_channel": [1, 1, 0], "return_channel": [1, 1, 0]}  # (kernel, stride, padding) of a conv
    for ratio, n in (("long", 7), ("mid", 5), ("short", 3)):
        intraclass[f"vertical_long_to_small_conv_{ratio}ratio"] = [[n, 1], 1, [n // 2, 0]]
        intraclass[f"horizontal_small_to_long_conv_{ratio}ratio"] = [[1, n], 1, [0, n // 2]]
        intraclass[f"symmetric_conv_long_{ratio}ratio"] = [n, 1, n // 2]
    ocr = dict(intraclass_block_config=intraclass, scale_factor_list=[1, 2, 4, 8], kernel_list=[3, 2, 2])
    if family == "detection/pp_ocrv6_medium_det":
        # the backbone its sub-config spec names (the default instance gets PP-LCNetV4, one stage out);
        # built for this family only: other configs declare no backbone (a KeyError for every row)
        return dict(ocr, backbone_config=_spec_backbone(type(default)))
    return {
        "detection/pp_doclayout_v2": dict(class_thresholds=[0.5] * default.num_labels, class_order=list(range(default.num_labels))),
        "detection/pp_ocrv5_server_det": ocr,
        # the default backbone (PP-LCNetV4, one stage out) does not give the neck's four inputs
        "detection/pp_ocrv6_small_det": dict(
            backbone_config=T.CONFIG_MAPPING["pp_lcnet_v3"](scale=0.75, divisor=16,
                                                             out_features=["stage2", "stage3", "stage4", "stage5"]),
            layer_list_out_channels=[48, 96, 192, 384]),
        # the default projects no feature level; 256 proposals at 256 x 256, fewer than the default 300 queries
        "detection/lw_detr": dict(projector_scale_factors=[1.0], num_queries=100),
        "detection/rf_detr": dict(num_queries=100),  # 256 proposals at 224 x 224, fewer than the default 300
        "segmentation/beit": dict(four, out_indices=[1, 2, 3, 4]),
        "segmentation/data2vec-vision": dict(four, out_indices=[1, 2, 3, 4]),
        "segmentation/dpt": dict(four, backbone_out_indices=[0, 1, 2, 3]),
        "depth/dpt": dict(four, backbone_out_indices=[0, 1, 2, 3]),
        "segmentation/sapiens2": dict(head_config=dict(upsample_out_channels=[32, 32], conv_out_channels=[32])),
    }.get(family, {})


def _spec_backbone(cfg_cls):
    """The backbone config that ``cfg_cls.sub_configs_defaults`` declares."""
    import transformers as T

    spec = cfg_cls.sub_configs_defaults["backbone_config"]
    return T.CONFIG_MAPPING[spec.model_type](**spec.init_kwargs)


# image sizes for families that refuse 224 x 224 (LW-DETR's 4 x 4 attention windows: a multiple of 64)
SIZES = {"detection/lw_detr": 256}


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


def _example(kind: str, config, model, size=None):
    """One input of the sizes the family expects (``size``, else the config's image size), and the
    axes exported as dynamic."""
    import torch

    gen = torch.Generator().manual_seed(0)
    name = model.main_input_name
    if kind == "image":
        size = size or getattr(config, "image_size", 224)
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


def build(family: str):
    """The family's wrapped model (its logits, boxes or depth as outputs), one example input, the
    input's name and dynamic axes, and the row's first fields."""
    import torch
    from survey_causal_lm import noisy_constants
    import transformers as T

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
    fields = {k: v for k, v in {**LAYERS, **extra}.items() if k in known or k == "backbone_config"}
    config = cfg_cls(**{**fields, **_fixes(family, default)})
    torch.manual_seed(0)
    model = getattr(T, cls_name)(config).eval()
    noisy_constants(model)  # constant parameters (norm weights, zero biases): bugs then show
    name, x, axes = _example(kind, config, model, SIZES.get(family))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, inputs):
            out = self.model(**{name: inputs})
            found = tuple(getattr(out, k) for k in ("logits", "pred_boxes", "predicted_depth")
                          if isinstance(getattr(out, k, None), torch.Tensor)) or (out.last_hidden_state,)  # OCR maps
            return found if len(found) > 1 else found[0]

    wrapped = Logits().eval()
    row["params"] = sum(p.numel() for p in model.parameters())
    return wrapped, x, name, axes, row


def one(family: str) -> dict:
    import torch

    import fx2nnef

    wrapped, x, name, axes, row = build(family)
    with torch.no_grad():
        wrapped(x)
    t0 = time.time()
    try:
        r = fx2nnef.export(wrapped, (x,), f"/tmp/survey_{family.replace('/', '_')}.nnef.tgz", input_names=[name],
                           target=fx2nnef.TractNNEF(dynamic_axes={name: axes}))
    except fx2nnef.CheckIOError as e:
        row.update(status="error", error=f"{type(e).__name__}: {str(e)[:600]}", seconds=round(time.time() - t0, 1))
        if e.float64 is not None:
            row["float64"] = e.float64.as_dict()
        return row
    row.update(status="ok" if r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               max_abs=float(r.max_abs_diff), ranges={k: str(v) for k, v in r.ranges.items()})
    if r.check.float64 is not None:
        row.update(float64=r.check.float64.as_dict(), rounding=r.check.float64.passed)
    return row


def main() -> None:
    from survey_causal_lm import survey_main

    survey_main(__file__, one, lambda: sorted(_families()), timeout=300)


if __name__ == "__main__":
    main()
