"""Try the time-series, video-classification and dual-encoder families of the installed transformers:
tiny configs (two layers, hidden sizes 32-64, random weights, constant parameters with noise), one
example, export with dynamic axes, check in tract (check_io: the example and other sizes). One child
process per family; one JSON line per family on stdout or in --out.

    python benchmarks/survey_more_models.py [--only timeseries/patchtst-prediction,dual/clip] [--out s.jsonl]
                                            [--timeout 300]

Rows:
- ``timeseries/FAMILY-HEAD``: every family of the time-series classification and regression mappings, the
  prediction heads of those families and of the prediction mapping, and the encoder-decoder forecasters
  (TimeSeriesTransformer, Informer, Autoformer, teacher-forced: past values, time features and observed
  mask, future values and time features in, the distribution's parameters out). Dynamic batch B; the
  length L too where the family takes any length (``LENGTH_DYNAMIC``).
- ``video/FAMILY``: the video-classification mapping, ``pixel_values`` (B, T, C, H, W), dynamic batch B (and
  frames T where the family takes any number, ``FRAMES_DYNAMIC``).
- ``dual/FAMILY``: the zero-shot image-classification mapping and the other contrastive pairs (CLAP, OWL-ViT,
  OWLv2, X-CLIP): ``logits_per_image`` (or per audio / video) of a batch of images and a batch of texts whose
  second row is padded, dynamic image batch BI, text batch BT and text length S.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the causal-LM survey's runner

# the sizes of every tiny config, under each family's spelling; a family takes the ones its config knows
SIZES = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=99,
    max_position_embeddings=64, head_dim=16, num_key_value_heads=2, d_model=32, ffn_dim=64, num_layers=2,
    encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_attention_heads=2,
    decoder_attention_heads=2, projection_dim=32, projection_size=32, image_text_hidden_size=32,
    mit_hidden_size=32, mit_intermediate_size=64, mit_num_attention_heads=2, prompt_num_attention_heads=2,
    pooler_output_size=32, encoder_hidden_size=32, num_spatial_layers=2, num_temporal_layers=2,
    num_auxiliary_layers=1, num_pooler_layers=1, pred_hidden_size=32, pred_num_attention_heads=2,
    pred_num_hidden_layers=1, patch_embeds_hidden_size=32,
)
IMAGE = dict(image_size=32, patch_size=8, crop_size=32, num_patches=16)
VIDEO = dict(IMAGE, num_frames=4, frames_per_clip=4, tubelet_size=2)
SERIES = dict(context_length=32, prediction_length=8, patch_length=8, patch_stride=8, num_input_channels=3,
              horizon_length=8, input_size=1, lags_sequence=[1, 2, 3], num_time_features=2, num_targets=3,
              moving_average=5, label_length=4, expansion_factor=2, num_parallel_samples=4)

# per family: settings the sizes above leave invalid, or defaults too large for a tiny model
FAMILY_CONFIG = {
    "vivit": dict(tubelet_size=[2, 8, 8]),
    "videoprism_vision_model": dict(tubelet_size=[1, 8, 8]),
    "videoprism": dict(vision_config=dict(tubelet_size=[1, 8, 8])),
    "align": dict(projection_dim=80, vision_config=dict(width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=64,
                                     num_hidden_layers=4)),
    "clap": dict(audio_config=dict(depths=[1, 1], num_attention_heads=[2, 2], hidden_size=64, spec_size=64,
                                   num_mel_bins=16, window_size=4, patch_embeds_hidden_size=32)),
    "owlvit": dict(vision_config=dict(image_size=32), text_config=dict(max_position_embeddings=16)),
    "owlv2": dict(vision_config=dict(image_size=32), text_config=dict(max_position_embeddings=16)),
    "blip-2": dict(num_query_tokens=4, qformer_config=dict(encoder_hidden_size=32, use_qformer_text_input=True)),
    "tipsv2": dict(vision_config=dict(stage_names=["stem", "stage1", "stage2"], out_features=["stage2"],
                                      out_indices=[2])),
}
# the encoder-decoder forecasters, run teacher-forced
FORECASTERS = ("time_series_transformer", "informer", "autoformer")
# the families that take any number of frames (their position tables are interpolated or per frame)
FRAMES_DYNAMIC = {"timesformer"}
# the series families that take any length: none. PatchTST and PatchTSMixer have position tables and heads of
# num_patches rows; the forecasters refuse a past other than context_length + max(lags_sequence) ("input length
# ... and time feature lengths ... does not match")
LENGTH_DYNAMIC: set = set()
# the families exported with a static (image) batch, and why
STATIC_BATCH = {
    k: "static batch: its forward takes a list of series and pads each in a Python loop "
       f"(transformers/models/{k}/modeling_{k}.py: `inputs = [ts[-...:] for ts in past_values]`); a dynamic "
       "batch is refused there (GuardError)" for k in ("timesfm", "timesfm2_5")}
STATIC_BATCH["siglip2"] = (
    "static image batch: its vision embeddings resize the position table image by image in a Python loop "
    "(transformers/models/siglip2/modeling_siglip2.py: `for i in range(batch_size)`); a dynamic one is refused "
    "there (GuardError)")

def _families() -> dict:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES as TS_CLASS,
        MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES as TS_PRED,
        MODEL_FOR_TIME_SERIES_REGRESSION_MAPPING_NAMES as TS_REG,
        MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES as VIDEO_CLASS,
        MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES as ZERO_SHOT)
    import transformers as T

    out = {}
    for head, names in (("classification", TS_CLASS), ("regression", TS_REG), ("prediction", TS_PRED)):
        out.update({f"timeseries/{k}-{head}": ("timeseries", k, v) for k, v in names.items()})
    for k in TS_CLASS:  # the prediction heads of the classification families
        cls = next((c for c in dir(T) if c.lower() == k.replace("_", "") + "forprediction"), None)
        if cls:
            out[f"timeseries/{k}-prediction"] = ("timeseries", k, cls)
    for k, cls in (("time_series_transformer", "TimeSeriesTransformerForPrediction"),
                   ("informer", "InformerForPrediction"), ("autoformer", "AutoformerForPrediction")):
        out[f"timeseries/{k}-prediction"] = ("timeseries", k, cls)
    out.update({f"video/{k}": ("video", k, v) for k, v in VIDEO_CLASS.items()})
    dual = {**ZERO_SHOT, "clap": "ClapModel", "owlvit": "OwlViTModel", "owlv2": "Owlv2Model", "xclip": "XCLIPModel"}
    out.update({f"dual/{k}": ("dual", k, v) for k, v in dual.items()})
    return out


def _shrunk(cfg, extra: dict) -> dict:
    """The keyword arguments of a tiny ``type(cfg)``: the sizes it knows, its sub-configs shrunk too."""
    from transformers import PretrainedConfig

    known = set(cfg.to_dict()) | set(getattr(cfg, "attribute_map", {}))
    kwargs = {k: v for k, v in {**SIZES, **extra}.items() if k in known and not isinstance(v, dict)}
    for key in known:
        sub = getattr(cfg, key, None)
        if isinstance(sub, PretrainedConfig):
            kwargs[key] = {**_shrunk(sub, {k: v for k, v in extra.items() if not isinstance(v, dict)}),
                           **extra.get(key, {})}
    return kwargs


def _config(kind: str, model_type: str):
    import transformers as T

    cfg_cls = T.CONFIG_MAPPING[model_type]
    extra = {**(VIDEO if kind == "video" else SERIES if kind == "timeseries" else IMAGE),
             **FAMILY_CONFIG.get(model_type, {})}
    default = cfg_cls()
    kwargs = _shrunk(default, extra)
    if model_type in ("xclip", "videoprism"):  # a video tower: clips of a few frames
        kwargs["vision_config"].update(num_frames=VIDEO["num_frames"])
    if "num_labels" in inspect.signature(cfg_cls.__init__).parameters or kind != "dual":
        kwargs["num_labels"] = 3
    return cfg_cls(**kwargs)


def _series_inputs(model_type: str, config, model, gen):
    """The series inputs (names, tensors, dynamic axes) and how to read the output."""
    import torch

    B = 2
    if model_type in FORECASTERS:
        past = config.context_length + max(config.lags_sequence)
        fut = config.prediction_length
        feats = config.num_time_features
        values = torch.randn(B, past, generator=gen).abs() + 0.5
        observed = torch.ones(B, past)
        observed[1, :3] = 0
        names = ["past_values", "past_time_features", "past_observed_mask", "future_values", "future_time_features"]
        xs = [values, torch.randn(B, past, feats, generator=gen), observed,
              torch.randn(B, fut, generator=gen).abs() + 0.5, torch.randn(B, fut, feats, generator=gen)]
        dyn = {0: "B", 1: "P"} if model_type in LENGTH_DYNAMIC else {0: "B"}
        return names, xs, {n: dyn if n.startswith("past") else {0: "B"} for n in names}, "params"
    if model_type.startswith("timesfm"):  # a static batch: its forward takes a list of series (STATIC_BATCH)
        values = 3.0 + 2.0 * torch.randn(B, config.context_length, generator=gen)
        return ["past_values"], [values], {}, ("mean_predictions", "full_predictions")
    channels = getattr(config, "num_input_channels", 1)
    values = 3.0 + 2.0 * torch.randn(B, config.context_length, channels, generator=gen)
    axes = {0: "B", 1: "L"} if model_type in LENGTH_DYNAMIC else {0: "B"}
    name = "past_values"
    out = ("prediction_outputs", "regression_outputs", "prediction_logits", "logits", "loc", "scale")
    return [name], [values], {name: axes}, out


def _video_inputs(model_type: str, config, model, gen):
    """Two clips (B, T, C, H, W) of the config's frames and size."""
    import torch

    frames = getattr(config, "num_frames", None) or getattr(config, "frames_per_clip", 4)
    size = getattr(config, "image_size", None) or getattr(config, "crop_size", 32)
    channels = getattr(config, "num_channels", None) or getattr(config, "in_chans", 3)
    x = torch.randn(2, frames, channels, size, size, generator=gen)
    axes = {0: "B", 1: "T"} if model_type in FRAMES_DYNAMIC else {0: "B"}
    name = model.main_input_name
    return [name], [x], {name: axes}, ("logits",)


def _dual_inputs(model_type: str, config, model, gen):
    """A batch of 3 images (or clips, or spectrograms) and a batch of 2 texts, the second padded; the
    eos token ends each text (CLIP's text tower pools at the eos position)."""
    import torch

    text = config.text_config
    vocab = text.vocab_size
    eos = getattr(text, "eos_token_id", None)
    eos = eos if isinstance(eos, int) and 0 <= eos < vocab else vocab - 1
    pad = getattr(text, "pad_token_id", None)
    pad = pad if isinstance(pad, int) and 0 <= pad < vocab else 0
    S, PAD = 7, 2
    ids = torch.randint(5, vocab - 2, (2, S), generator=gen)
    ids[0, -1] = eos
    ids[1, S - PAD - 1] = eos
    ids[1, S - PAD:] = pad
    mask = torch.ones(2, S, dtype=torch.long)
    mask[1, S - PAD:] = 0
    params = inspect.signature(model.forward).parameters
    names, xs = ["input_ids", "attention_mask"], [ids, mask]
    axes = {"input_ids": {0: "BT", 1: "S"}, "attention_mask": {0: "BT", 1: "S"}}
    if "input_features" in params:  # CLAP: (B, 1, time, mel bins) spectrograms
        audio = config.audio_config
        x = torch.randn(3, 1, 64, audio.num_mel_bins, generator=gen)
        names.append("input_features")
        xs.append(x)
        axes["input_features"] = {0: "BI"}
        return names, xs, axes, ("logits_per_audio",)
    vision = config.vision_config
    size = getattr(vision, "image_size", 32)
    size = size[0] if isinstance(size, (list, tuple)) else size
    frames = getattr(vision, "num_frames", None)
    if model_type in ("xclip", "videoprism"):
        x = torch.randn(3, frames, 3, size, size, generator=gen)
        out = ("logits_per_video",)
    elif model_type == "siglip2":  # patches of a 32 x 32 image: (B, patches, C * p * p), a mask and their grid
        p = vision.patch_size
        n = (32 // p) ** 2
        x = torch.randn(3, n, 3 * p * p, generator=gen)
        names += ["pixel_values", "pixel_attention_mask"]
        xs += [x, torch.ones(3, n, dtype=torch.long)]  # a static image batch (STATIC_BATCH)
        # the patch grid is a constant of the export: its values are sizes (read with tolist() to resize the
        # position table), which a static graph cannot take as input data
        grid = torch.tensor([[32 // p, 32 // p]])
        return names, xs, axes, ("logits_per_image",), {"spatial_shapes": lambda kw: grid.expand(
            kw["pixel_values"].shape[0], 2)}
    else:
        x = torch.randn(3, getattr(vision, "num_channels", 3), size, size, generator=gen)
        out = ("logits_per_image",)
    name = "pixel_values_videos" if "pixel_values_videos" in params else "pixel_values"
    names.append(name)
    xs.append(x)
    axes[name] = {0: "BI"}
    return names, xs, axes, out


def one(family: str) -> dict:
    import torch
    from survey_causal_lm import export_row, noisy_constants
    import transformers as T


    kind, model_type, cls_name = _families()[family]
    row = {"family": family, "class": cls_name}
    config = _config(kind, model_type)
    torch.manual_seed(0)
    model = getattr(T, cls_name)(config).eval()
    noisy_constants(model)  # constant parameters (norm weights, zero biases): bugs then show
    gen = torch.Generator().manual_seed(1)
    make = {"timeseries": _series_inputs, "video": _video_inputs, "dual": _dual_inputs}[kind]
    names, xs, axes, fields, *fixed = make(model_type, config, model, gen)
    fixed = fixed[0] if fixed else {}  # inputs that are constants of the export, made from the others
    if model_type in STATIC_BATCH:
        row["note"] = STATIC_BATCH[model_type]
    fields = (fields,) if isinstance(fields, str) else fields

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            kw = dict(zip(names, inputs))
            kw.update({k: make_it(kw) for k, make_it in fixed.items()})
            if model_type in FORECASTERS:  # teacher-forced; the head's forward also builds the loss (a
                # torch.distributions object, which validates its arguments in Python): the parameters
                out = self.model.model(**kw)
                return (*self.model.output_params(out.last_hidden_state), out.loc, out.scale)
            out = self.model(**kw)
            found = []
            for k in fields:
                v = getattr(out, k, None)
                found += [v] if isinstance(v, torch.Tensor) else list(v) if isinstance(v, tuple) else []
            return tuple(found) if len(found) > 1 else found[0]

    wrapped = Outputs().eval()
    with torch.no_grad():
        wrapped(*xs)
    row["params"] = sum(p.numel() for p in model.parameters())
    row["inputs"] = names
    return export_row(row, wrapped, xs, f"/tmp/survey_more_{family.replace('/', '_')}.nnef.tgz", names, axes)


def main() -> None:
    from survey_causal_lm import survey_main

    survey_main(__file__, one, lambda: sorted(_families()), timeout=300)


if __name__ == "__main__":
    main()
