"""A causal LM seen through the flat KV-cache I/O contract of tract LLM assets.

``input_ids [B, S]`` and, per layer, ``in_cache_key_i`` / ``in_cache_value_i``
``[B, kv_heads, P, head_dim]`` in; ``outputs`` (logits) and ``out_cache_key_i`` /
``out_cache_value_i`` ``[B, kv_heads, P+S, head_dim]`` out. Positions and the causal mask are
left to the model itself, which derives them from the cache length P, so they are computed in
the graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class CacheLayout:
    """Shape facts of a model's KV cache: per layer, the ``(heads, head size)`` of its keys and of
    its values. Layers may differ (Gemma 4: a larger head size in its global layers)."""

    keys: tuple
    values: tuple

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    @property
    def kv_heads(self):
        """The number of key/value heads, or the list of them per layer when layers differ."""
        heads = [h for h, _ in self.keys]
        return heads[0] if len(set(heads)) == 1 else heads

    def input_names(self) -> list[str]:
        """``input_ids`` then ``in_cache_key_i``, ``in_cache_value_i`` layer by layer."""
        names = ["input_ids"]
        for i in range(self.num_layers):
            names += [f"in_cache_key_{i}", f"in_cache_value_{i}"]
        return names

    def output_names(self) -> list[str]:
        """``outputs`` then ``out_cache_key_i``, ``out_cache_value_i`` layer by layer."""
        names = ["outputs"]
        for i in range(self.num_layers):
            names += [f"out_cache_key_{i}", f"out_cache_value_{i}"]
        return names

    def shapes(self, batch, length) -> list[list]:
        """The cache shapes in the contract's order, with ``batch`` and ``length`` (ints or names)."""
        out = []
        for (kh, kd), (vh, vd) in zip(self.keys, self.values):
            out += [[batch, kh, length, kd], [batch, vh, length, vd]]
        return out

    def empty(self, past: int, dtype: torch.dtype, batch: int = 1) -> list[torch.Tensor]:
        """Zero caches of length ``past``, flat in the contract's order."""
        return [torch.zeros(*shape, dtype=dtype) for shape in self.shapes(batch, past)]


# transformers' cache layers holding one key and one value tensor, grown along the length axis
# (a sliding window is rebuilt full-length: the model's own mask applies the window)
_KV_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")


def cache_layout(model: torch.nn.Module) -> CacheLayout:
    """The cache layout of a transformers causal LM, read by running it on one token.

    Running the model (rather than reading config fields, whose names differ between
    families) gives the layout its own attention code produces.
    """
    param = next(model.parameters())
    ids = torch.zeros(1, 1, dtype=torch.long, device=param.device)
    name = type(model).__name__
    try:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
    except Exception as exc:  # noqa: BLE001 - the model's own error, named in ours
        first = str(exc).strip().split("\n")[0][:300]
        raise InvalidArgumentError(
            f"{name} fails on one token with use_cache=True, the run that tells its cache layout: "
            f"{type(exc).__name__}: {first}. Fix the model or its config, or export it with fx2nnef.export "
            "and your own inputs (use_cache=False)") from exc
    cache = getattr(out, "past_key_values", None) or getattr(out, "cache_params", None)  # Mamba: cache_params
    layers = getattr(cache, "layers", None)
    other = {}  # layer class -> indices of layers keeping more than keys and values
    for i, layer in enumerate(layers or []):
        if type(layer).__name__ not in _KV_LAYERS:
            other.setdefault(type(layer).__name__, []).append(i)
    if other:
        kinds = "; ".join(f"{cls} at layer{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix[:8]))}"
                          + (" ..." if len(ix) > 8 else "") for cls, ix in other.items())
        raise InvalidArgumentError(
            f"{name}'s cache holds more than keys and values ({kinds}: recurrent or convolution states, an "
            "indexer cache, compressed keys, or a layer that shares another's cache), which the LLM I/O "
            "contract (one key and one value tensor per layer, grown by S) does not carry; export it with "
            "fx2nnef.export and your own inputs (use_cache=False and a dynamic sequence axis)")
    shapes = [(getattr(l, "keys", None), getattr(l, "values", None)) for l in layers or []]
    if not shapes or any(k is None or v is None or k.ndim != 4 or v.ndim != 4 for k, v in shapes):
        raise InvalidArgumentError(
            f"{name} does not keep a key/value cache of [batch, kv_heads, length, head_dim] "
            "tensors per layer (a transformers DynamicCache), which the LLM I/O contract needs; export it "
            "with fx2nnef.export and your own inputs instead")
    return CacheLayout(tuple((int(k.shape[1]), int(k.shape[-1])) for k, _ in shapes),
                       tuple((int(v.shape[1]), int(v.shape[-1])) for _, v in shapes))


class FlatCacheLM(torch.nn.Module):
    """``forward(input_ids, *flat_cache) -> (logits, *flat_new_cache)`` over a transformers causal LM.

    The cache is rebuilt as a full-length ``DynamicCache`` at each call: sliding-window
    layers keep all P+S positions and the window is applied by the model's own mask, so the
    asset's outputs always have length P+S whatever the family.
    """

    def __init__(self, model: torch.nn.Module, layout: CacheLayout, last_logits_only: bool = False):
        super().__init__()
        self.model = model
        self.layout = layout
        self.last_logits_only = last_logits_only

    def forward(self, input_ids: torch.Tensor, *flat_cache: torch.Tensor):
        from transformers import DynamicCache

        pairs = [(flat_cache[2 * i], flat_cache[2 * i + 1]) for i in range(self.layout.num_layers)]
        cache = DynamicCache(ddp_cache_data=pairs)
        kwargs = {"logits_to_keep": 1} if self.last_logits_only else {}
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, **kwargs)
        flat = []
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)
