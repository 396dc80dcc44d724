"""Packed sequences around a recurrent module, traced as a masked recurrence on the padded tensor.

Models written for batches of unequal lengths run their RNNs on packed sequences::

    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = self.lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])

A packed sequence holds ``sum(lengths)`` rows: a size read from data, which no static graph
has. But packing followed by padding never needs the packed rows: the same numbers come from
running the module on the padded tensor with a mask ``t < lengths[b]``, where a sequence past
its end keeps its state and outputs zeros (see ``nnef_emit/ops/rnn.py``). So while tracing:

- ``pack_padded_sequence`` of a traced tensor records nothing and returns a :class:`PaddedPack`
  (the padded tensor, the lengths, the layout); sorting is irrelevant, as nothing is packed;
- a call of nn.LSTM / nn.GRU / nn.RNN on a :class:`PaddedPack` records one node whose target is
  a :class:`PackedRNNCall`: ``(x, lengths, hx)`` with the module's config and weights, and whose
  value is torch's own packed run padded back to the input's length. Its output is again a
  :class:`PaddedPack`, its final states plain tensors (each sequence's state at its own end);
- ``pad_packed_sequence`` of a :class:`PaddedPack` gives the padded output (zeros, or
  ``padding_value``, past each length) and the lengths.

``lengths`` stays a graph value (an input of the export), so the asset runs any lengths.
``pad_packed_sequence`` without ``total_length`` is refused: torch then returns
``max(lengths)`` steps, a size read from data. ``pack_sequence`` and PackedSequence objects
built other ways are refused with a message.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Optional

import torch
import torch.fx as fx
import torch.nn.utils.rnn as rnn_utils

from ...errors import TraceError
from .proxy import CustomProxy
from .source import user_frame_location

_ORIG_PACK = rnn_utils.pack_padded_sequence
_ORIG_PAD = rnn_utils.pad_packed_sequence
_ORIG_PACK_SEQUENCE = rnn_utils.pack_sequence
RECURRENT_TYPES = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)

_HOW = ("what exports is pack_padded_sequence(x, lengths, ...) -> nn.LSTM/GRU/RNN -> "
        "pad_packed_sequence(out, ..., total_length=x.shape[time axis])")


def _where() -> str:
    loc = user_frame_location()
    return f" at {loc}" + (f": {loc.code}" if loc and loc.code else "") if loc else ""


class PaddedPack:
    """What a packed sequence is while tracing: the padded tensor (``padded``, a traced tensor in
    the ``padded_batch_first`` layout, anything past each length), and ``lengths_`` (a traced
    int64 tensor [B], or a constant one)."""

    def __init__(self, padded: CustomProxy, lengths, batch_first: bool):
        # not named like PackedSequence's fields: reading those (packed.data) is refused
        self.__dict__.update(padded=padded, lengths_=lengths, padded_batch_first=bool(batch_first))

    def __repr__(self):
        return f"PaddedPack({self.padded!r}, batch_first={self.padded_batch_first})"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(
            f"a packed sequence is traced as its padded tensor and lengths only; reading its '{name}'"
            f"{_where()} is not supported (the packed rows have a data-dependent count): {_HOW}")

    def __iter__(self):
        raise TraceError(f"a packed sequence cannot be unpacked or iterated{_where()}: {_HOW}")

    def in_layout(self, batch_first: bool):
        """The padded tensor in the ``batch_first`` layout asked for."""
        return self.padded if batch_first == self.padded_batch_first else self.padded.transpose(0, 1)


class PackedRNNCall:
    """fx target of a recurrent module run on a packed sequence: ``(x, lengths, hx, module=info)``
    with ``x`` in the module's own layout; the result is the module's, with the output padded
    back to ``x``'s time length (zeros past each length)."""

    __name__ = "packed_rnn"
    __module__ = "fx2nnef"

    def __init__(self, module: torch.nn.Module, path: str):
        self.module, self.path = module, path
        self.__qualname__ = "packed_rnn"  # op_key: "fx2nnef.packed_rnn"

    def __repr__(self):
        return f"PackedRNNCall({self.path})"

    def __call__(self, x, lengths, hx=None, module=None):
        from torch._subclasses.fake_tensor import is_fake

        if is_fake(x) or is_fake(lengths):
            # shapes only (the fake replay): the padded output has the shapes of a run on the padded input
            return self.module(x, hx)
        batch_first = self.module.batch_first
        total = x.shape[1 if batch_first else 0]
        packed = _ORIG_PACK(x, lengths.to(torch.int64).cpu(), batch_first=batch_first, enforce_sorted=False)
        out, states = self.module(packed, hx)
        out, _ = _ORIG_PAD(out, batch_first=batch_first, total_length=total)
        return out, states


def is_packed_call(args, kwargs) -> bool:
    return any(isinstance(a, PaddedPack) for a in list(args) + list(kwargs.values()))


def refuse_packed_sequences(m: torch.nn.Module, args, kwargs) -> None:
    """A TraceError when a module gets a PackedSequence made another way than by the traced
    pack_padded_sequence (its rows have a data-dependent count)."""
    for a in list(args) + list(kwargs.values()):
        if (type(a) is rnn_utils.PackedSequence and isinstance(a.data, fx.Proxy)) or isinstance(a, PaddedPack):
            raise TraceError(
                f"{type(m).__name__} got a packed sequence{_where()} that fx2nnef cannot export: only "
                f"nn.LSTM, nn.GRU and nn.RNN take one, built by pack_padded_sequence while tracing "
                f"(not pack_sequence, nor PackedSequence(...)); {_HOW}")


def packed_rnn_call(tracer, m: torch.nn.Module, args, kwargs):
    """Record ``m(pack, hx)`` for a :class:`PaddedPack` ``pack``: one :class:`PackedRNNCall` node."""
    if not isinstance(m, RECURRENT_TYPES):
        refuse_packed_sequences(m, args, kwargs)
    names = ("input", "hx")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise TraceError(f"{type(m).__name__} called with unexpected arguments{_where()}")
        bound[k] = v
    pack, hx = bound.get("input"), bound.get("hx")
    if not isinstance(pack, PaddedPack) or isinstance(hx, PaddedPack):
        raise TraceError(f"{type(m).__name__} got a packed sequence in an unexpected place{_where()}")
    try:
        path = tracer.path_of_module(m)
    except NameError:
        raise TraceError(f"{type(m).__name__} is created inside forward{_where()}; make it a submodule "
                         "in __init__ to export it on a packed sequence") from None
    x = pack.in_layout(m.batch_first)
    config = {k: v for k, v in vars(m).items()
              if not k.startswith("_") and (isinstance(v, (bool, int, float, str)) or
                                            (isinstance(v, tuple) and all(isinstance(i, (bool, int, float, str)) for i in v)))}
    params = {name: tracer.create_proxy("get_attr", f"{path}.{name}", (), {})
              for name, _ in list(m.named_parameters()) + list(m.named_buffers())}
    info = {"type": type(m).__name__, "path": path, "config": config, "params": params}
    proxy = tracer.create_proxy("call_function", PackedRNNCall(m, path), (x, pack.lengths_, hx), {"module": info})
    proxy.node.meta["module_path"] = path
    proxy.node.meta["module_type"] = type(m).__qualname__
    out, states = proxy[0], proxy[1]
    return PaddedPack(out, pack.lengths_, m.batch_first), states


# the patched functions -----------------------------------------------------------------
def _lengths_tensor(lengths, where: str):
    """``lengths`` as pack_padded_sequence reads it: an int64 tensor (traced or constant)."""
    if isinstance(lengths, CustomProxy):
        if not isinstance(lengths.value, torch.Tensor) or lengths.value.dim() != 1:
            raise TraceError(f"pack_padded_sequence needs lengths as a 1-D tensor or a list{where}")
        return lengths if lengths.value.dtype == torch.int64 else lengths.to(torch.int64)
    if isinstance(lengths, (list, tuple)) and any(isinstance(v, fx.Proxy) for v in lengths):
        return torch.tensor(lengths, dtype=torch.int64)  # sizes read from tensors: recorded
    return torch.as_tensor(lengths, dtype=torch.int64)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):
    if not isinstance(input, CustomProxy):
        if isinstance(lengths, CustomProxy):
            raise TraceError(f"pack_padded_sequence of an untraced tensor with traced lengths{_where()} "
                             "is not supported")
        return _ORIG_PACK(input, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    where = _where()
    x = input.value
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise TraceError(f"pack_padded_sequence{where}: fx2nnef exports packed sequences of 3-D padded "
                         f"tensors [B, T, *] / [T, B, *] only")
    lengths = _lengths_tensor(lengths, where)
    # torch's own checks on the example (sorted lengths when enforce_sorted, 0 < length <= T)
    example = lengths.value if isinstance(lengths, CustomProxy) else lengths
    try:
        _ORIG_PACK(x, example.cpu(), batch_first=batch_first, enforce_sorted=enforce_sorted)
    except Exception as exc:  # noqa: BLE001 - the model fails eagerly on these inputs
        raise TraceError(f"pack_padded_sequence fails on the example inputs{where}: {type(exc).__name__}: {exc}") from exc
    return PaddedPack(input, lengths, batch_first)


def pad_packed_sequence(sequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: Optional[int] = None):
    if not isinstance(sequence, PaddedPack):
        if type(sequence) is rnn_utils.PackedSequence and isinstance(sequence.data, fx.Proxy):
            refuse_packed_sequences(torch.nn.Module(), (sequence,), {})
        return _ORIG_PAD(sequence, batch_first=batch_first, padding_value=padding_value, total_length=total_length)
    where = _where()
    if total_length is None:
        raise TraceError(
            f"pad_packed_sequence without total_length{where} returns max(lengths) steps, a size read from "
            "the lengths' data that an exported graph cannot have: pass total_length=x.shape[1] "
            "(batch_first) or x.shape[0] (the padded input's time size); the output then has zeros "
            "(padding_value) past each length")
    out = sequence.in_layout(batch_first)
    axis = 1 if batch_first else 0
    steps = out.value.shape[axis]
    wanted = int(total_length.value) if isinstance(total_length, CustomProxy) else int(total_length)
    if wanted > steps:
        raise TraceError(f"pad_packed_sequence{where}: total_length={wanted} is longer than the padded input "
                         f"({steps} steps); padding further is not supported")
    if not (isinstance(total_length, CustomProxy) and wanted == steps):
        out = out.narrow(axis, 0, total_length)
    lengths = sequence.lengths_
    if padding_value != 0:
        if isinstance(padding_value, fx.Proxy):
            raise TraceError(f"pad_packed_sequence{where}: a traced padding_value is not supported")
        length = out.shape[axis]
        steps_idx = torch.arange(length, device=out.value.device)
        valid = steps_idx.unsqueeze(0) < lengths.unsqueeze(1)  # [B, T]
        if not batch_first:
            valid = valid.transpose(0, 1)
        out = out.masked_fill(~valid.unsqueeze(-1), padding_value)
    return out, lengths


def pack_sequence(sequences, enforce_sorted: bool = True):
    if any(isinstance(s, fx.Proxy) for s in sequences):
        raise TraceError(
            f"pack_sequence of traced tensors{_where()} is not supported (a list of sequences of their own "
            f"lengths): pad them into one tensor, pass the lengths as a model input and {_HOW}")
    return _ORIG_PACK_SEQUENCE(sequences, enforce_sorted=enforce_sorted)


_REPLACEMENTS = {_ORIG_PACK: pack_padded_sequence, _ORIG_PAD: pad_packed_sequence,
                 _ORIG_PACK_SEQUENCE: pack_sequence}


@contextlib.contextmanager
def packed_sequence_patches(model: torch.nn.Module):
    """Replace pack_padded_sequence, pad_packed_sequence and pack_sequence while tracing: in
    ``torch.nn.utils.rnn`` and in the modules defining the model's classes (a
    ``from torch.nn.utils.rnn import pack_padded_sequence`` there bound the original)."""
    namespaces = [vars(rnn_utils)]
    seen = {id(namespaces[0])}
    for m in model.modules():
        for cls in type(m).__mro__:
            mod = sys.modules.get(getattr(cls, "__module__", "") or "")
            if mod is None or mod.__name__.startswith("torch") or id(vars(mod)) in seen:
                continue
            seen.add(id(vars(mod)))
            namespaces.append(vars(mod))
    saved = []
    for ns in namespaces:
        for name, value in list(ns.items()):
            try:
                new = _REPLACEMENTS.get(value)
            except Exception:  # noqa: BLE001 - unhashable values
                continue
            if new is not None:
                saved.append((ns, name, value))
                ns[name] = new
    try:
        yield
    finally:
        for ns, name, value in saved:
            ns[name] = value
