"""What ``fx2nnef llm`` knows of each multimodal family: its modalities (image, audio), how its
own tower and projector turn raw input into embeddings, which placeholder token they replace,
and what else its decoder needs beside the spliced embeddings.

The mechanism is shared (the model's own ``get_image_features`` / ``get_audio_features``, the
splice of ``fx2nnef.llm.multimodal``); a family adds only the facts below, including what its
decoder needs beside the splice (Qwen-VL's M-RoPE positions from the image grid, Qwen3-VL's
DeepStack streams). A family this does not cover is refused by name, with the part and the reason.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from ..errors import InvalidArgumentError

# config keys that make a folder multimodal
TOWER_KEYS = ("vision_config", "audio_config")


@dataclasses.dataclass(frozen=True)
class Modality:
    """One encoder graph and the decoder input it feeds.

    ``name``: the modality of the embeddings (``image``, ``audio``): the encoder's output is
    ``out_<name>_embeddings`` and the decoder's input ``in_<name>_embeddings``. ``tower``: the
    folder of the encoder graph (``vision``, ``audio``). ``input_name``: the encoder's input
    (the processor's tensor). ``token_attrs``: config attributes naming the placeholder token,
    first found wins. ``features``: ``(model, raw) -> [N, hidden]``, the model's own tower and
    projector. ``example``: ``(config, count, generator) -> raw`` for ``count`` images (tiles,
    audio chunks). ``symbol``: the symbol of N in both graphs; ``count_symbol`` the one of the
    encoder input's first axis, or None for a tower that takes one input a call (LLaVA's
    ``get_image_features`` splits its output per image, a Python list as long as the batch).
    """

    name: str
    tower: str
    input_name: str
    token_attrs: tuple
    features: Callable
    example: Callable
    symbol: str
    count_symbol: Optional[str]
    # the model's forward keyword for raw input when it differs from input_name
    forward_name: Optional[str] = None
    # the raw input as the model's forward takes it (Idefics3's [1, tiles, C, H, W])
    to_forward: Callable = staticmethod(lambda raw: raw)
    # more encoder inputs after input_name, on the same first axis (Qwen-VL's per-patch tables):
    # then ``example`` gives a tuple, the raw input first
    extra_inputs: tuple = ()
    # config -> what the manifest says of the extra inputs and the host-side step computing them
    tables: Optional[Callable] = None
    # (model, inputs, count) -> the model's own tower on the inputs of ``example(config, count)``
    # when the encoder graph does not run it as transformers does (Qwen-VL: its tables given)
    own_features: Optional[Callable] = None
    # config -> how many DeepStack streams the encoder outputs after its embeddings (Qwen3-VL), each
    # [N, hidden] and added by the decoder at the placeholders after its layer k
    streams: Callable = staticmethod(lambda config: 0)

    def output_names(self, config) -> list:
        """The encoder's outputs: ``out_<name>_embeddings`` then ``out_<name>_deepstack_<k>``."""
        return [f"out_{self.name}_embeddings"] + [f"out_{self.name}_deepstack_{k}" for k in range(self.streams(config))]

    def placeholder(self, config) -> int:
        for attr in self.token_attrs:
            for conf in (config, getattr(config, "text_config", None)):
                value = getattr(conf, attr, None) if conf is not None else None
                if isinstance(value, int):
                    return value
        raise InvalidArgumentError(
            f"{type(config).__name__} names no placeholder token for its {self.name} embeddings (none of "
            f"{', '.join(self.token_attrs)}): the splice cannot find where the {self.name} goes")


@dataclasses.dataclass(frozen=True)
class Family:
    """A multimodal family: its modalities and the decoder's extra keyword arguments, from the
    placeholder mask of a call and the cache length (Gemma 3's ``token_type_ids``, which make the
    image tokens attend each other both ways)."""

    model_types: tuple
    modalities: tuple
    decoder_kwargs: Callable = staticmethod(lambda mask, past: {})
    # (model, ids) -> what the model's own forward needs beside the raw input (Qwen-VL's grid)
    reference_kwargs: Callable = staticmethod(lambda model, ids: {})
    # Qwen-VL: 3-D positions computed in the decoder from the image grids, a shift carried between calls
    mrope: bool = False


def _pooled(out) -> torch.Tensor:
    """The projected embeddings of a ``get_*_features`` output as ``[N, hidden]``."""
    feats = getattr(out, "pooler_output", out)
    if isinstance(feats, (list, tuple)):
        feats = torch.cat([f.reshape(-1, f.shape[-1]) for f in feats])
    return feats.reshape(-1, feats.shape[-1])


def image_features(model, pixel_values: torch.Tensor) -> torch.Tensor:
    return _pooled(model.get_image_features(pixel_values=pixel_values, return_dict=True))


def tiled_image_features(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """Idefics3 / SmolVLM: the tiles ``[T, C, H, W]`` the processor cut, through the model's
    vision transformer and connector (pixel shuffle, projection). ``get_image_features`` around
    them only drops the all-zero images that pad a batch and splits the rows per sample by
    their count (a split sized by data): the encoder takes real tiles only, whole (a tile's
    pixel mask all ones, as the processor gives for tiles it resized)."""
    inner = model.model
    hidden = inner.vision_model(pixel_values=pixel_values, return_dict=True).last_hidden_state
    return _pooled(inner.connector(hidden))


def audio_features(model, input_features: torch.Tensor) -> torch.Tensor:
    return _pooled(model.get_audio_features(input_features=input_features, return_dict=True))


def _square_images(config, count: int, generator: torch.Generator) -> torch.Tensor:
    vision = config.vision_config
    size = vision.image_size
    size = size if isinstance(size, int) else size[0]
    return torch.randn(count, getattr(vision, "num_channels", 3), size, size, generator=generator)


def _mel_chunks(config, count: int, generator: torch.Generator) -> torch.Tensor:
    audio = config.audio_config
    frames = audio.max_source_positions * 2  # two stride-1/stride-2 convolutions: 2 frames a position
    return torch.randn(count, audio.num_mel_bins, frames, generator=generator)


IMAGE = Modality("image", "vision", "pixel_values", ("image_token_id", "image_token_index"), image_features,
                 _square_images, "IMG", "IMAGES")
TILED_IMAGE = dataclasses.replace(IMAGE, features=tiled_image_features, count_symbol="TILES",
                                  to_forward=lambda raw: raw.unsqueeze(0))
AUDIO = Modality("audio", "audio", "input_features", ("audio_token_id", "audio_token_index"), audio_features,
                 _mel_chunks, "AUD", "CHUNKS")

def _gemma3_token_types(mask: torch.Tensor, past) -> dict:
    """Gemma 3's ``token_type_ids`` (1 on image tokens: they attend each other both ways) over
    the whole sequence, as its mask reads them by absolute position: the past's are text (0), an
    image lying whole in one call. transformers given a chunk's own after a cache reads them
    shifted (it pads them at the end)."""
    return {"token_type_ids": torch.cat([mask.new_zeros(1, past).long(), mask.long()], dim=1)}


def _qwen_reference(model, ids: torch.Tensor) -> dict:
    from .mrope import fixed_grid

    token = IMAGE.placeholder(model.config)
    count = int((ids == token).sum())
    grid = torch.tensor([fixed_grid(model.config)] * (1 if count else 0), dtype=torch.long).reshape(-1, 3)
    return {"image_grid_thw": grid, "mm_token_type_ids": (ids == token).int()}


def _qwen_image():
    from .qwen_vision import own_tower, qwen_image_features, qwen_patches, tables_manifest

    return dataclasses.replace(IMAGE, features=qwen_image_features, example=qwen_patches, count_symbol="PATCHES",
                               extra_inputs=("position_ids", "frames", "windows"), tables=tables_manifest,
                               own_features=own_tower)


def _qwen3_image():
    from .qwen_vision import deepstack_count, qwen3_image_features

    return dataclasses.replace(_qwen_image(), features=qwen3_image_features,
                               extra_inputs=("position_ids", "frames", "interp_indices", "interp_weights"),
                               streams=deepstack_count)


FAMILIES = (
    Family(("gemma3",), (IMAGE,), decoder_kwargs=_gemma3_token_types),
    Family(("llava",), (dataclasses.replace(IMAGE, count_symbol=None),)),
    Family(("idefics3", "smolvlm"), (TILED_IMAGE,)),
    Family(("voxtral",), (AUDIO,)),
    Family(("qwen2_5_vl", "qwen2_vl"), (_qwen_image(),), reference_kwargs=_qwen_reference, mrope=True),
    Family(("qwen3_vl",), (_qwen3_image(),), reference_kwargs=_qwen_reference, mrope=True),
)

# Families that need more than a splice, by the part that is missing and why.
REFUSED = {
    ("qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"): (
        "splice",
        "its decoder (mixture of experts, or Qwen3.5's hybrid layers) with the DeepStack streams of its vision "
        "tower is not wired or checked in this exporter yet (Qwen3-VL's dense decoder is)"),
    ("glm4v",): (
        "positions",
        "its decoder takes 3-D positions from the image grid in its own layout, which this exporter does not "
        "compute yet"),
    ("mistral3", "pixtral", "llava_next", "llava_onevision"): (
        "tower",
        "its vision tower takes images of variable size with their image_sizes, which this exporter does not "
        "give its encoder graph yet"),
    ("gemma4", "gemma3n"): (
        "tower",
        "its towers (variable-resolution vision, audio) are not wired in this exporter yet"),
}


def is_multimodal_config(config) -> bool:
    """Whether a transformers config (or its dict) holds a vision or audio tower."""
    get = config.get if isinstance(config, dict) else lambda k: getattr(config, k, None)
    return any(get(k) for k in TOWER_KEYS)


def family_of(config) -> Family:
    """The family of a multimodal config, or InvalidArgumentError naming the part and why."""
    model_type = getattr(config, "model_type", None)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    for types, (part, why) in REFUSED.items():
        if model_type in types:
            raise InvalidArgumentError(
                f"fx2nnef llm cannot export {model_type} ({part}): {why}. Nothing was written; export its parts "
                "with fx2nnef.export and your own inputs")
    towers = [k for k in TOWER_KEYS if getattr(config, k, None)]
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise InvalidArgumentError(
        f"fx2nnef llm does not know how {model_type!r} feeds its {' and '.join(towers)} into the decoder (tower, "
        f"splice): the multimodal families it exports are {known}. Nothing was written; export its parts with "
        "fx2nnef.export and your own inputs")
