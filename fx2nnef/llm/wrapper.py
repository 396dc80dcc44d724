"""A causal LM seen through the flat cache I/O contract of tract LLM assets.

``input_ids [B, S]`` and, per layer, ``in_cache_key_i`` / ``in_cache_value_i``
``[B, kv_heads, P, head_dim]`` in; ``outputs`` (logits) and ``out_cache_key_i`` /
``out_cache_value_i`` ``[B, kv_heads, P+S, head_dim]`` out. Positions and the causal mask are
left to the model itself, which derives them from the cache length P, so they are computed in
the graph.

Layers of state-space or linear attention (Mamba mixers, gated delta nets, short convolutions:
transformers' ``LinearAttentionLayer``) carry fixed-size states instead, ``in_conv_state_i`` /
``in_recurrent_state_i`` in and ``out_conv_state_i`` / ``out_recurrent_state_i`` out (``_i_j``
when a layer keeps several), zeros before the first token; a hybrid layer has both kinds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class Slot:
    """One tensor of the flat cache: ``kind`` ("key", "value", "conv", "recurrent") of layer
    ``layer`` (state ``state`` of it), shaped ``[B, *shape]`` with the length P inserted at axis 2
    for keys and values (``shape`` is then ``(heads, head size)``)."""

    layer: int
    kind: str
    state: int
    shape: tuple

    @property
    def grows(self) -> bool:
        return self.kind in ("key", "value")

    def name(self, several: bool) -> str:
        if self.grows:
            return f"cache_{self.kind}_{self.layer}"
        return f"{self.kind}_state_{self.layer}" + (f"_{self.state}" if several else "")

    def full_shape(self, batch, length) -> list:
        return [batch, self.shape[0], length, self.shape[1]] if self.grows else [batch, *self.shape]


@dataclass(frozen=True)
class CacheLayout:
    """Shape facts of a model's cache: per layer, the tensors it keeps (:class:`Slot`), in the
    contract's order. Layers may differ (Gemma 4: a larger head size in its global layers;
    hybrids: attention layers and state layers)."""

    slots: tuple
    num_layers: int
    kinds: tuple  # per layer: "attention", "states", "both" or "none"

    def _several(self, slot: Slot) -> bool:
        return any(o.layer == slot.layer and o.kind == slot.kind and o.state != slot.state for o in self.slots)

    @property
    def keys(self) -> tuple:
        """``(heads, head size)`` of each layer's keys (layers with keys only)."""
        return tuple(s.shape for s in self.slots if s.kind == "key")

    @property
    def kv_heads(self):
        """The number of key/value heads, or the list of them per layer when layers differ."""
        heads = [h for h, _ in self.keys]
        return heads[0] if len(set(heads)) == 1 else heads

    @property
    def has_states(self) -> bool:
        return any(not s.grows for s in self.slots)

    @property
    def has_length(self) -> bool:
        """Whether the cache has a length P (some layer keeps keys and values)."""
        return any(s.grows for s in self.slots)

    def input_names(self) -> list[str]:
        """``input_ids`` then ``in_`` + each slot's name, layer by layer."""
        return ["input_ids"] + ["in_" + s.name(self._several(s)) for s in self.slots]

    def output_names(self) -> list[str]:
        """``outputs`` then ``out_`` + each slot's name, layer by layer."""
        return ["outputs"] + ["out_" + s.name(self._several(s)) for s in self.slots]

    def shapes(self, batch, length) -> list[list]:
        """The cache shapes in the contract's order, with ``batch`` and ``length`` (ints or names)."""
        return [s.full_shape(batch, length) for s in self.slots]

    def empty(self, past: int, dtype: torch.dtype, batch: int = 1) -> list[torch.Tensor]:
        """Zero caches of length ``past`` (zero states), flat in the contract's order."""
        return [torch.zeros(*shape, dtype=dtype) for shape in self.shapes(batch, past)]

    def random(self, past: int, dtype: torch.dtype, batch: int, generator: torch.Generator) -> list[torch.Tensor]:
        """Random caches of length ``past`` (random states), for tracing."""
        return [torch.randn(*shape, generator=generator).to(dtype) for shape in self.shapes(batch, past)]


# transformers' cache layers by what they keep; a sliding window is rebuilt full-length (the
# model's own mask applies the window), so every key/value output has length P+S
_ATTENTION_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")
_STATE_LAYERS = ("LinearAttentionLayer",)
_BOTH_LAYERS = ("LinearAttentionAndFullAttentionLayer", "LinearAttentionAndSlidingWindowAttentionLayer")
_EMPTY_LAYERS = ("DummyLayer",)


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
        why = (" (transformers runs a cache only when some layer is an attention layer, and this config has "
               "state layers only: a limitation of transformers, not of the export)"
               if "get_seq_length" in first and "LinearAttention" in first else "")
        raise InvalidArgumentError(
            f"{name} fails on one token with use_cache=True, the run that tells its cache layout: "
            f"{type(exc).__name__}: {first}{why}. Fix the model or its config, or export it with fx2nnef.export "
            "and your own inputs (use_cache=False)") from exc
    cache = returned_cache(out)
    layers = list(getattr(cache, "layers", None) or [])
    other = {}  # layer class -> indices of layers keeping what the contract does not carry
    for i, layer in enumerate(layers):
        if type(layer).__name__ not in _ATTENTION_LAYERS + _STATE_LAYERS + _BOTH_LAYERS + _EMPTY_LAYERS:
            other.setdefault(type(layer).__name__, []).append(i)
    if other:
        kinds = "; ".join(f"{cls} at layer{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix[:8]))}"
                          + (" ..." if len(ix) > 8 else "") for cls, ix in other.items())
        raise InvalidArgumentError(
            f"{name}'s cache holds more than keys, values and fixed-size states ({kinds}: an indexer cache, "
            "compressed keys), which the LLM I/O contract does not carry; export it with fx2nnef.export and "
            "your own inputs (use_cache=False and a dynamic sequence axis)")
    slots, kinds = [], []
    for i, layer in enumerate(layers):
        cls = type(layer).__name__
        kv = cls in _ATTENTION_LAYERS + _BOTH_LAYERS
        states = cls in _STATE_LAYERS + _BOTH_LAYERS
        if kv:
            k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
            if k is None or v is None or k.ndim != 4 or v.ndim != 4:
                kv = False
            else:
                slots += [Slot(i, "key", 0, (int(k.shape[1]), int(k.shape[-1]))),
                          Slot(i, "value", 0, (int(v.shape[1]), int(v.shape[-1])))]
        found = False
        if states:
            for kind, held in (("conv", layer.conv_states), ("recurrent", layer.recurrent_states)):
                for j in sorted(held):
                    if held[j] is not None:
                        slots.append(Slot(i, kind, j, tuple(int(d) for d in held[j].shape[1:])))
                        found = True
        kinds.append("both" if kv and found else "attention" if kv else "states" if found else "none")
    if not slots:
        raise InvalidArgumentError(
            f"{name} does not keep a key/value cache of [batch, kv_heads, length, head_dim] tensors per layer, "
            "nor recurrent states (a transformers DynamicCache), which the LLM I/O contract needs; export it "
            "with fx2nnef.export and your own inputs instead")
    return CacheLayout(tuple(slots), len(layers), tuple(kinds))


class FlatCacheLM(torch.nn.Module):
    """``forward(input_ids, *flat_cache) -> (logits, *flat_new_cache)`` over a transformers causal LM.

    The cache is rebuilt as a full-length ``DynamicCache`` at each call: sliding-window
    layers keep all P+S positions and the window is applied by the model's own mask, so the
    asset's outputs always have length P+S whatever the family. State layers are given their
    states as already run (``has_previous_state``): zero states stand for the start of a sequence,
    so one graph serves prompts and decoding.
    """

    def __init__(self, model: torch.nn.Module, layout: CacheLayout, last_logits_only: bool = False):
        super().__init__()
        self.model = model
        self.layout = layout
        self.last_logits_only = last_logits_only

    def forward(self, input_ids: torch.Tensor, *flat_cache: torch.Tensor):
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=None, config=None)
        cache.layers = build_layers(self.layout, flat_cache)
        cache.layer_class_to_replicate = None
        kwargs = {"logits_to_keep": 1} if self.last_logits_only else {}
        kwargs[cache_argument(self.model)] = cache
        out = self.model(input_ids=input_ids, use_cache=True, **kwargs)
        return (out.logits, *flat_cache_of(self.layout, returned_cache(out).layers))


def cache_argument(model: torch.nn.Module) -> str:
    """The name of the model's cache argument: ``past_key_values``, or ``cache_params`` (Mamba's)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache_params" if "past_key_values" not in params and "cache_params" in params else "past_key_values"


def returned_cache(out):
    """The cache a model's output holds (``past_key_values``, or Mamba's ``cache_params``), or None."""
    return getattr(out, "past_key_values", None) or getattr(out, "cache_params", None)


def build_layers(layout: CacheLayout, flat: tuple) -> list:
    """transformers cache layers holding ``flat`` (the contract's order)."""
    from transformers import cache_utils as cu

    by_layer: dict = {}
    for slot, tensor in zip(layout.slots, flat):
        by_layer.setdefault(slot.layer, []).append((slot, tensor))
    layers = []
    for i, kind in enumerate(layout.kinds):
        held = by_layer.get(i, [])
        n_states = 1 + max([s.state for s, _ in held if not s.grows], default=0)
        if kind == "attention":
            layer = cu.DynamicLayer()
        elif kind == "states":
            layer = cu.LinearAttentionLayer(number_of_states=n_states)
        elif kind == "both":
            layer = cu.LinearAttentionAndFullAttentionLayer(number_of_states=n_states)
        else:
            layer = cu.DummyLayer()
        kv = {s.kind: t for s, t in held if s.grows}
        if kv:
            layer.update(kv["key"], kv["value"])
        for slot, t in held:
            if slot.grows:
                continue
            j = slot.state
            layer.dtype, layer.device = t.dtype, t.device
            # copies: transformers updates the states in place (copy_), the caller's inputs stay
            t = t.clone()
            if slot.kind == "conv":
                layer.conv_states[j] = t
                layer.conv_kernel_size[j] = t.shape[-1]
                layer.is_conv_states_initialized[j] = True
            else:
                layer.recurrent_states[j] = t
                layer.is_recurrent_states_initialized[j] = True
            layer.has_previous_state[j] = True
        layers.append(layer)
    return layers


def flat_cache_of(layout: CacheLayout, layers) -> list:
    """The tensors of cache ``layers`` in the contract's order."""
    flat = []
    for slot in layout.slots:
        layer = layers[slot.layer]
        if slot.grows:
            flat.append(layer.keys if slot.kind == "key" else layer.values)
        else:
            flat.append((layer.conv_states if slot.kind == "conv" else layer.recurrent_states)[slot.state])
    return flat
