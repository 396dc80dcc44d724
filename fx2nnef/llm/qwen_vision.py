"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision tower over a patch grid given at run time.

transformers lays out the tower's work from ``grid_thw`` in Python (``transformers.vision_utils``:
the rotary positions of each patch, the frames that attend each other, Qwen2.5-VL's attention
windows and the order that groups them), so a traced tower would hold one grid. The tower's
forward takes those tables precomputed (``position_ids``, ``cu_seqlens``, ``window_index``,
``cu_window_seqlens``); here they are computed as graph ops from ``image_grid_thw`` and the
patch count, and the attention reads them through an attention function registered with
transformers:

- no reordering: ``window_index`` is the identity; every patch stays where the processor put it
  (frame-major, then 2x2 merge blocks row by row), which is the order the merger and the
  decoder read;
- each attention keeps a patch to its own segment with a mask built from per-patch segment
  ids (the frame for full attention, the frame and window for windowed attention), passed in
  the tower's ``cu_seqlens`` / ``cu_window_seqlens`` slots. Attention over a set does not
  depend on the order of the set, so this equals the model's reordered packed attention.

Qwen3-VL adds two things: its learned position table resampled to each image's grid, whose
gather indices and weights (``interp_indices``, ``interp_weights`` ``[N, 4]``) are computed on
the host by transformers' own ``get_vision_interpolation_indices_and_weights`` and given as
inputs; and its DeepStack streams, the merged hidden states of some tower layers
(``deepstack_visual_indexes``), output beside the embeddings as ``out_image_deepstack_<k>``.
"""
from __future__ import annotations

import contextlib

import torch

# 'flash' in the name sends transformers' vision attention down its packed path, which hands
# the attention function the segment tables instead of splitting by their values in Python
ATTENTION = "fx2nnef_flash_segments"


def _floor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="floor")


def patch_layout(grid_thw: torch.Tensor, patches: int, merge: int, window: int):
    """Per patch of the processor's order: ``position_ids [N, 2]`` (row, column in its image),
    the segment id of full attention (its frame) and of windowed attention (its frame and
    window of ``window`` merged tokens a side; 0 for a tower without windows), all i64 [N].

    ``grid_thw [K, 3]``: the images' patch grids; ``patches`` N, their total (a traced size)."""
    t, h, w = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    size = t * h * w
    ends = torch.cumsum(size, 0)
    starts = ends - size
    index = torch.arange(patches, dtype=torch.long)
    own = ((index.unsqueeze(1) >= starts.unsqueeze(0)) & (index.unsqueeze(1) < ends.unsqueeze(0))).long()  # [N, K]
    local = index - (own * starts.unsqueeze(0)).sum(1)
    hh, ww = (own * h.unsqueeze(0)).sum(1), (own * w.unsqueeze(0)).sum(1)
    area = torch.clamp(hh * ww, min=1)
    in_frame = local % area
    block, in_block = _floor(in_frame, torch.full_like(in_frame, merge * merge)), in_frame % (merge * merge)
    blocks_w = torch.clamp(_floor(ww, torch.full_like(ww, merge)), min=1)
    bh, bw = _floor(block, blocks_w), block % blocks_w
    row = bh * merge + _floor(in_block, torch.full_like(in_block, merge))
    col = bw * merge + in_block % merge
    frame = index - in_frame  # the frame's first patch: unique per frame
    if window:
        windows = frame + _floor(bh, torch.full_like(bh, window)) * ww + _floor(bw, torch.full_like(bw, window))
    else:
        windows = frame
    return torch.stack([row, col], dim=-1), frame, windows


def _segment_attention(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0,
                       cu_seq_lens_q=None, **kwargs):
    """Attention of ``[1, heads, N, d]`` within segments: ``cu_seq_lens_q`` holds each patch's
    segment id (``patch_layout``), not boundaries."""
    same = cu_seq_lens_q.unsqueeze(0) == cu_seq_lens_q.unsqueeze(1)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=same, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def segment_attention(config):
    """The tower's config reading its attention from ``_segment_attention`` for the block."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _segment_attention)
    before = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def window_tokens(vision_config) -> int:
    """Qwen2.5-VL's attention window side in merged tokens (0: no windows, Qwen2-VL)."""
    size = getattr(vision_config, "window_size", 0) or 0
    return size // vision_config.spatial_merge_size // vision_config.patch_size if size else 0


def deepstack_count(config) -> int:
    """How many DeepStack streams the vision tower feeds the decoder (0 before Qwen3-VL)."""
    vision = getattr(config, "vision_config", config)
    return len(getattr(vision, "deepstack_visual_indexes", None) or ())


def _rows(feats: torch.Tensor) -> torch.Tensor:
    return feats.reshape(-1, feats.shape[-1])


def _outputs(out) -> tuple:
    """The tower's embeddings ``[N, hidden]`` and its DeepStack streams (Qwen3-VL), each ``[N, hidden]``."""
    return (_rows(out.pooler_output), *(_rows(f) for f in (getattr(out, "deepstack_features", None) or [])))


def qwen_image_features(model, pixel_values: torch.Tensor, positions: torch.Tensor, frames: torch.Tensor,
                        windows: torch.Tensor):
    """The model's vision tower and merger on the patches ``[N, C*t*p*p]`` of the processor,
    with the tables of ``patch_layout`` for their grids: ``[N / merge², hidden]``."""
    visual = model.model.visual
    config = visual.config
    merge = config.spatial_merge_size
    tables = {"position_ids": positions, "cu_seqlens": frames, "max_seqlen": 0}
    if window_tokens(config):
        tables.update(window_index=torch.arange(pixel_values.shape[0] // (merge * merge), dtype=torch.long),
                      cu_window_seqlens=windows, max_window_seqlen=0)
    with segment_attention(config):
        out = visual(pixel_values, grid_thw=None, return_dict=True, **tables)
    return _rows(out.pooler_output)


def qwen3_image_features(model, pixel_values: torch.Tensor, positions: torch.Tensor, frames: torch.Tensor,
                         interp_indices: torch.Tensor, interp_weights: torch.Tensor) -> tuple:
    """Qwen3-VL's tower: the embeddings ``[N / merge², hidden]`` then one DeepStack stream of
    that shape per ``deepstack_visual_indexes`` layer."""
    visual = model.model.visual
    tables = {"position_ids": positions, "cu_seqlens": frames, "max_seqlen": 0,
              "interp_indices": interp_indices, "interp_weights": interp_weights}
    with segment_attention(visual.config):
        out = visual(pixel_values, grid_thw=None, return_dict=True, **tables)
    return _outputs(out)


def vision_tables(config, grid_thw) -> tuple:
    """The host-side step of the Qwen-VL encoder: ``(position_ids [N, 2], frames [N],
    windows [N])`` (i64) for the processor's ``image_grid_thw [K, 3]`` (see ``patch_layout``);
    for Qwen3-VL ``(position_ids, frames, interp_indices [N, 4], interp_weights [N, 4])``."""
    vision = getattr(config, "vision_config", config)
    if deepstack_count(vision):
        return host_tables(grid_thw, qwen3_tables_facts(vision))
    grid = torch.as_tensor(grid_thw, dtype=torch.long).reshape(-1, 3)
    patches = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    return patch_layout(grid, patches, vision.spatial_merge_size, window_tokens(vision))


def qwen3_tables_facts(vision) -> dict:
    """What the host needs to compute Qwen3-VL's encoder tables (kept in ``fx2nnef.json``)."""
    # the resampling of the learned position table as Qwen3VLVisionModel sets it
    return {"merge_size": vision.spatial_merge_size, "window_tokens": 0,
            "position_grid_side": int(vision.num_position_embeddings ** 0.5),
            "interpolation": {"mode": "bilinear", "align_corners": True}}


def host_tables(grid_thw, facts: dict) -> tuple:
    """The encoder's table inputs for ``image_grid_thw`` from the manifest's ``tables`` facts."""
    grid = torch.as_tensor(grid_thw, dtype=torch.long).reshape(-1, 3)
    patches = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    positions, frames, windows = patch_layout(grid, patches, facts["merge_size"], facts["window_tokens"])
    if "position_grid_side" not in facts:
        return positions, frames, windows
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    indices, weights = get_vision_interpolation_indices_and_weights(
        grid, num_grid_per_side=facts["position_grid_side"], mode=facts["interpolation"]["mode"],
        align_corners=facts["interpolation"]["align_corners"], spatial_merge_size=facts["merge_size"])
    return positions, frames, indices.long(), weights.float()


def example_grids(config, count: int) -> list:
    """``count`` patch grids of the checks: the first two by three attention windows (the
    decoder checks' image), the others of other sizes, some windows cut at the border."""
    from .mrope import fixed_grid

    merge = config.vision_config.spatial_merge_size
    return [fixed_grid(config)] + [[1, merge * (3 + k), merge * (2 + 2 * k)] for k in range(1, count)]


def qwen_patches(config, count: int, generator: torch.Generator) -> tuple:
    """Random patches of ``count`` images of ``example_grids`` with their tables."""
    vision = config.vision_config
    grid = torch.tensor(example_grids(config, count))
    dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    patches = torch.randn(int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum()), dim, generator=generator)
    return (patches, *vision_tables(config, grid))


def own_tower(model, inputs: tuple, count: int) -> torch.Tensor:
    """transformers' own tower (its Python tables, its attention) on the patches of ``qwen_patches``."""
    grid = torch.tensor(example_grids(model.config, count))
    outputs = _outputs(model.model.visual(inputs[0], grid_thw=grid, return_dict=True))
    return outputs if deepstack_count(model.config) else outputs[0]


def tables_manifest(config) -> dict:
    """What ``fx2nnef.json`` says of the encoder's table inputs and the host-side step."""
    vision = config.vision_config
    if deepstack_count(vision):
        return {"inputs": {"position_ids": {"shape": ["PATCHES", 2], "dtype": "i64"},
                           "frames": {"shape": ["PATCHES"], "dtype": "i64"},
                           "interp_indices": {"shape": ["PATCHES", 4], "dtype": "i64"},
                           "interp_weights": {"shape": ["PATCHES", 4], "dtype": "f32"}},
                "computed_by": "fx2nnef.llm.qwen_vision.vision_tables(config, image_grid_thw)",
                **qwen3_tables_facts(vision),
                "rule": "position_ids and frames as for Qwen2.5-VL (windows absent); interp_indices / interp_weights: "
                        "transformers.vision_utils.get_vision_interpolation_indices_and_weights(image_grid_thw, "
                        "position_grid_side, mode, align_corners, merge_size)"}
    return {
        "inputs": {"position_ids": {"shape": ["PATCHES", 2], "dtype": "i64"},
                   "frames": {"shape": ["PATCHES"], "dtype": "i64"},
                   "windows": {"shape": ["PATCHES"], "dtype": "i64"}},
        "computed_by": "fx2nnef.llm.qwen_vision.vision_tables(config, image_grid_thw)",
        "merge_size": vision.spatial_merge_size, "window_tokens": window_tokens(vision),
        "rule": "patch n of image k (grid t,h,w; patches in the processor's order, frame-major then merge blocks "
                "of merge_size x merge_size row by row): r = its index in its frame, b = r // merge_size^2, "
                "i = r % merge_size^2, bh = b // (w / merge_size), bw = b % (w / merge_size); position_ids = "
                "(bh*merge_size + i // merge_size, bw*merge_size + i % merge_size); frames = n - r (the global index "
                "of its frame's first patch); windows = frames + (bh // window_tokens) * w + bw // window_tokens "
                "(= frames when window_tokens is 0). Patches attend those of equal id.",
    }
