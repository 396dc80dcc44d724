"""Qwen-VL's 3-D rotary positions (M-RoPE), computed in the decoder graph.

transformers computes them in Python over the whole sequence (``get_rope_index``): text tokens
count up on the three axes alike; the tokens of an image of LLM grid ``(t, h, w)`` (the patch
grid divided by the spatial merge) starting at position ``st`` take ``(st + t_i, st + h_i,
st + w_i)``, and the text after it resumes at ``st + max(h, w)``. The image thus shifts every
later position by ``d = max(h, w) - t*h*w``; the shift of the images already in the cache is
the ``rope_delta`` transformers keeps on the model between calls.

Here the decoder takes that shift as a state: ``in_rope_delta [1]`` (0 for a new sequence) in,
``out_rope_delta [1]`` out, fed back as the caches are; and ``in_image_grid_thw [K, 3]``, the
processor's ``image_grid_thw`` of the images whose placeholders are in the call (``[0, 3]``
for a call without any). An image lies whole in one call.
"""
from __future__ import annotations

import torch


def mrope_positions(mask: torch.Tensor, past: torch.Tensor, grid_thw: torch.Tensor, delta: torch.Tensor,
                    merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``position_ids [3, 1, S]`` of a call and the shift after it (``[1]``).

    ``mask [1, S]``: the image placeholders; ``past``: the cache length P (a 0-d tensor);
    ``grid_thw [K, 3]`` the images' patch grids; ``delta [1]`` the shift before the call."""
    t, h, w = grid_thw[:, 0], grid_thw[:, 1] // merge, grid_thw[:, 2] // merge  # [K]
    count = t * h * w
    ends = torch.cumsum(count, 0)  # image k holds the placeholders ends[k]-count[k]+1 .. ends[k]
    shift = torch.maximum(h, w) - count
    seen = torch.cumsum(mask.long(), dim=1)[0]  # [S]: placeholders up to and with this token
    is_image = mask[0]
    # an image token's own image is the first not finished before it; a text token's images are all finished
    limit = seen + (~is_image).long()
    before = (ends.unsqueeze(0) < limit.unsqueeze(1)).long()  # [S, K]: image k lies wholly before the token
    own = ((ends.unsqueeze(0) >= seen.unsqueeze(1)) & (ends.unsqueeze(0) - count.unsqueeze(0) < seen.unsqueeze(1))
           & is_image.unsqueeze(1)).long()  # [S, K]: the image the token belongs to
    index = torch.arange(mask.shape[1], dtype=torch.long) + past
    base = index + delta + (before * shift.unsqueeze(0)).sum(1)  # text: its position; image: st + rank
    rank = seen - 1 - (own * (ends - count).unsqueeze(0)).sum(1)  # the token's rank in its image
    own_h, own_w = (own * h.unsqueeze(0)).sum(1), (own * w.unsqueeze(0)).sum(1)
    area = torch.clamp(own_h * own_w, min=1)
    start = base - rank  # the image's first position
    row = torch.div(rank % area, torch.clamp(own_w, min=1), rounding_mode="floor")
    col = rank % torch.clamp(own_w, min=1)
    frame = torch.div(rank, area, rounding_mode="floor")
    axes = [torch.where(is_image, start + part, base) for part in (frame, row, col)]
    return torch.stack(axes).unsqueeze(1), delta + shift.sum().reshape(1)


def fixed_grid(config) -> list:
    """The patch grid ``[t, h, w]`` of the image of the decoder checks: two by three attention
    windows (a 2-D, non-square grid with window and full attention both at work)."""
    vision = config.vision_config
    window = max(getattr(vision, "window_size", 0) // vision.patch_size, vision.spatial_merge_size)
    return [1, 2 * window, 3 * window]
