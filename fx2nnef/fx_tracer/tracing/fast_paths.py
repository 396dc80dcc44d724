"""Fast paths torch takes on plain tensors only, reproduced in the trace.

Some torch modules check ``torch.overrides.has_torch_function`` on their inputs and take a fused
route only for plain tensors. A traced value never qualifies, so the trace records the reference
route; where the two routes give different values, the difference is added to the trace here.

``nn.TransformerEncoder`` with a ``src_key_padding_mask`` in inference (no autograd, eval mode,
the layer kinds torch fuses): eagerly, torch packs the sequences into a nested tensor and unpacks
them with zeros, so every padded position of the output is 0, where the reference route computes
it like any other position. torch does so only when every row of the mask is padded at its end
(``mask_check``, on by default), which depends on the mask's data: the trace computes that
condition from the mask and selects between the two outputs, so the export gives torch's values
for every mask (with ``mask_check=False``, for masks padded at the end of each row).
"""
from __future__ import annotations

import inspect

import torch
from torch.fx._symbolic_trace import _maybe_revert_all_patches


def reproduce_fast_path(module: torch.nn.Module, args: tuple, kwargs: dict, out):
    """``out`` (the traced output of ``module(*args, **kwargs)``) with what torch's plain-tensor
    route changes (see the module docstring), or ``out`` itself."""
    if isinstance(module, torch.nn.TransformerEncoder):
        return _encoder_padding_zeroed(module, args, kwargs, out)
    return out


def _value(x):
    return x.value if hasattr(x, "value") and hasattr(x, "node") else x


def _encoder_padding_zeroed(module, args, kwargs, out):
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError:
        return out
    src = bound.arguments.get("src")
    pad = bound.arguments.get("src_key_padding_mask")
    if pad is None or not hasattr(out, "node") or not isinstance(_value(out), torch.Tensor):
        return out
    if not _zeroes_padding(module, bound):
        return out
    src_v = _value(src)
    if not isinstance(src_v, torch.Tensor) or src_v.dim() != 3:
        return out
    padded = pad.bool() if pad.dtype != torch.bool else pad  # a float mask pads where it is not 0
    zeroed = out.masked_fill(padded.unsqueeze(-1), 0.0)  # batch first: torch packs no other layout
    # torch packs only masks whose every row is padded at its end (False ... False True ... True);
    # with mask_check=False it packs any mask as if it were so, attending to the first tokens of
    # each row whatever the mask says: that is not reproduced, such masks get the masked values
    ends_padded = (padded[:, 1:].int() >= padded[:, :-1].int()).all()
    return torch.where(ends_padded, zeroed, out)


def _zeroes_padding(module, bound) -> bool:
    """Whether torch's plain-tensor route zeroes the padded positions of this encoder, as it would
    run on the example: a run with a mask padding one position at the end of the first sequence,
    with torch's fast path on and off."""
    values = {k: _value(v) for k, v in bound.arguments.items()}
    src = values.get("src")
    pad = values.get("src_key_padding_mask")
    if not isinstance(src, torch.Tensor) or not isinstance(pad, torch.Tensor) or pad.dim() != 2 or pad.shape[1] < 2:
        return False
    probe = torch.zeros(pad.shape, dtype=torch.bool)
    probe[0, -1] = True
    probe_mask = probe if pad.dtype == torch.bool else torch.zeros(pad.shape, dtype=pad.dtype).masked_fill(
        probe, float("-inf"))
    values["src_key_padding_mask"] = probe_mask
    if not module.layers[0].self_attn.batch_first:
        return False  # torch packs batch-first sequences only
    at = (0, -1)
    enabled = torch.backends.mha.get_fastpath_enabled()
    try:
        with _maybe_revert_all_patches(), torch.no_grad():
            fast = module(**values)
            torch.backends.mha.set_fastpath_enabled(False)
            slow = module(**values)
    except Exception:  # noqa: BLE001 - the traced route stands as it is
        return False
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)
    return bool((fast[at] == 0).all()) and not bool((slow[at] == 0).all())
