"""Recurrent modules: nn.LSTM, nn.GRU, nn.RNN and nn.LSTMCell, nn.GRUCell, nn.RNNCell.

Each is lowered as one unit by a module extractor (see ``..extractors``). Weights are split
per gate at export time (torch's gate order: LSTM i, f, g, o; GRU r, z, n), and the input
projections of a whole sequence, ``x @ W_x^T + b``, are computed before the time loop; the
hidden bias is folded into them except for the GRU n gate, whose hidden bias sits inside the
reset product: ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.

The time loop is the internal op ``nnef.rnn_sequence``:
- common rule (standard NNEF, Khronos): a static unroll, one slice per time step;
- tract: ``tract_core_scan`` over a body fragment of ``fragments/rnn_scan_bodies.nnef``, so
  the sequence length may be a dynamic dim.

Packed sequences (``fx2nnef.packed_rnn``, see ``fx_tracer/packed.py``): the module runs on the
padded tensor with a mask ``t < lengths[b]`` [B, T]; at a masked step a sequence keeps its
states, so the final states are each sequence's state at its own end, and the reverse direction
starts at each sequence's own last step (from the initial state, kept over the padded steps).
The output is zeroed at the masked steps, as pad_packed_sequence gives it. The masked bodies
are in ``fragments/rnn_masked_bodies.nnef``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np
import torch

from ...errors import EmitError
from ...ir import DType, Value
from ..context import EmitContext
from ..extractors import ModuleInfoExtractor, register_extractor
from ..helpers import rank
from ..registry import register


@dataclasses.dataclass
class CellWeights:
    """Weights of one layer and direction, split per gate."""

    w_x: list  # per gate, numpy [H, I]
    b_x: list  # per gate, numpy [H] or None: input bias plus the foldable hidden bias
    w_h: list  # per gate, Value [H, H_out]
    b_hn: Optional[Value]  # GRU only: hidden bias of the n gate, [1, H]
    w_r: Optional[Value]  # LSTM with proj_size only: projection [P, H]
    dtype: DType
    suffix: str  # torch's parameter suffix, e.g. "_l1_reverse"


@dataclasses.dataclass(frozen=True)
class CellKind:
    """What differs between LSTM, GRU and Elman cells."""

    gates: tuple  # gate names, also the suffixes of the scan body's parameters
    states: tuple  # state names: ("h", "c") or ("h",)
    step: Callable  # (ctx, gate inputs [B, H], states, CellWeights) -> new states
    body: str  # scan body fragment


# operations --------------------------------------------------------------------------------
def _binary(ctx: EmitContext, op: str, a: Value, b: Value) -> Value:
    return ctx.op(op, a, b, out_shape=a.shape)


def _unary(ctx: EmitContext, op: str, a: Value) -> Value:
    return ctx.op(op, a, out_shape=a.shape)


def _matmul_t(ctx: EmitContext, a: Value, w: Value) -> Value:
    """``a @ w^T`` for a matrix ``w`` of the same rank as ``a``."""
    return ctx.op("matmul", a, w, transposeA=False, transposeB=True, out_shape=a.shape[:-1] + (w.shape[0],))


def _gate(ctx: EmitContext, x_t: Value, h: Value, w_h: Value) -> Value:
    return _binary(ctx, "add", x_t, _matmul_t(ctx, h, w_h))


def _squeeze(ctx: EmitContext, v: Value, ax: int) -> Value:
    return ctx.op("squeeze", v, axes=[ax], out_shape=v.shape[:ax] + v.shape[ax + 1:])


def _unsqueeze(ctx: EmitContext, v: Value, ax: int) -> Value:
    return ctx.op("unsqueeze", v, axes=[ax], out_shape=v.shape[:ax] + (1,) + v.shape[ax:])


def _index(ctx: EmitContext, v: Value, ax: int, i: int) -> Value:
    """``v`` at index ``i`` of axis ``ax`` (the axis removed)."""
    s = ctx.op("slice", v, axes=[ax], begin=[i], end=[i + 1], out_shape=v.shape[:ax] + (1,) + v.shape[ax + 1:])
    return _squeeze(ctx, s, ax)


# cells -------------------------------------------------------------------------------------
def _lstm_step(ctx: EmitContext, xs: list, states: tuple, w: CellWeights) -> tuple:
    h, c = states
    i, f, g, o = (_unary(ctx, act, _gate(ctx, x, h, wh))
                  for act, x, wh in zip(("sigmoid", "sigmoid", "tanh", "sigmoid"), xs, w.w_h))
    c_next = _binary(ctx, "add", _binary(ctx, "mul", f, c), _binary(ctx, "mul", i, g))
    h_next = _binary(ctx, "mul", o, _unary(ctx, "tanh", c_next))
    if w.w_r is not None:
        h_next = _matmul_t(ctx, h_next, w.w_r)
    return h_next, c_next


def _gru_step(ctx: EmitContext, xs: list, states: tuple, w: CellWeights) -> tuple:
    (h,) = states
    r, z = (_unary(ctx, "sigmoid", _gate(ctx, x, h, wh)) for x, wh in zip(xs[:2], w.w_h[:2]))
    hn = ctx.op("add", _matmul_t(ctx, h, w.w_h[2]), w.b_hn, out_shape=h.shape)
    n = _unary(ctx, "tanh", _binary(ctx, "add", xs[2], _binary(ctx, "mul", r, hn)))
    return (_binary(ctx, "add", n, _binary(ctx, "mul", z, _binary(ctx, "sub", h, n))),)


def _elman_step(act: str) -> Callable:
    def step(ctx: EmitContext, xs: list, states: tuple, w: CellWeights) -> tuple:
        return (_unary(ctx, act, _gate(ctx, xs[0], states[0], w.w_h[0])),)

    return step


KINDS = {
    "LSTM": CellKind(("i", "f", "g", "o"), ("h", "c"), _lstm_step, "rnn_lstm_body"),
    "GRU": CellKind(("r", "z", "n"), ("h",), _gru_step, "rnn_gru_body"),
    "RNN_TANH": CellKind(("a",), ("h",), _elman_step("tanh"), "rnn_tanh_body"),
    "RNN_RELU": CellKind(("a",), ("h",), _elman_step("relu"), "rnn_relu_body"),
}


def _load_weights(ctx: EmitContext, params: dict, suffix: str, mode: str) -> CellWeights:
    """Split ``weight_ih{suffix}``, ``weight_hh{suffix}``, biases and projection per gate."""
    gates = KINDS[mode].gates
    n = len(gates)
    w_ih = params[f"weight_ih{suffix}"]
    dtype = w_ih.dtype
    b_ih, b_hh = params.get(f"bias_ih{suffix}"), params.get(f"bias_hh{suffix}")
    w_x = np.split(w_ih.data, n)
    w_h = [ctx.const(w, dtype, name=_label(ctx, f"weight_hh{suffix}_{g}"))
           for g, w in zip(gates, np.split(params[f"weight_hh{suffix}"].data, n))]
    b_i = np.split(b_ih.data, n) if b_ih is not None else [None] * n
    b_h = np.split(b_hh.data, n) if b_hh is not None else [None] * n
    b_hn = None
    if mode == "GRU":
        hidden = w_x[2].shape[0]
        b_hn = ctx.const((b_h[2] if b_h[2] is not None else np.zeros(hidden)).reshape(1, hidden), dtype,
                         name=_label(ctx, f"bias_hh{suffix}_n"))
        b_h[2] = None
    b_x = [_add_optional(bi, bh) for bi, bh in zip(b_i, b_h)]
    w_hr = params.get(f"weight_hr{suffix}")
    w_r = ctx.const(w_hr.data, dtype, name=_label(ctx, f"weight_hr{suffix}")) if w_hr is not None else None
    return CellWeights(w_x, b_x, w_h, b_hn, w_r, dtype, suffix)


def _label(ctx: EmitContext, name: str) -> str:
    """A constant's name (and .dat label) prefixed with the module's node name."""
    return f"{ctx.node.name}_{name}" if ctx.node is not None else name


def _add_optional(a: Optional[np.ndarray], b: Optional[np.ndarray]) -> Optional[np.ndarray]:
    if a is None or b is None:
        return a if b is None else b
    return a + b


def _project(ctx: EmitContext, x: Value, w: np.ndarray, b: Optional[np.ndarray], dtype: DType, name: str) -> Value:
    """``x @ w^T + b`` over the leading axes of ``x``."""
    lead = (1,) * (rank(x) - 2)
    y = _matmul_t(ctx, x, ctx.const(w.reshape(lead + w.shape), dtype, name=_label(ctx, f"weight_ih{name}")))
    if b is None:
        return y
    bias = ctx.const(b.reshape(lead + (1,) + b.shape), dtype, name=_label(ctx, f"bias{name}"))
    return ctx.op("add", y, bias, out_shape=y.shape)


def _gate_inputs(ctx: EmitContext, x: Value, kind: CellKind, w: CellWeights) -> list:
    """Per-gate input projections of ``x`` (biases folded in)."""
    return [_project(ctx, x, wx, bx, w.dtype, f"{w.suffix}_{g}") for g, wx, bx in zip(kind.gates, w.w_x, w.b_x)]


@register("nnef.rnn_sequence")
def rnn_sequence(ctx: EmitContext, kind: CellKind, xs: list, states: tuple, w: CellWeights, reverse: bool,
                 mask: Optional[Value] = None):
    """Run a cell over axis 1 of the gate inputs ``xs`` ([B, T, H] each): (y [B, T, H_out], final states).
    ``mask`` [B, T] (bool): where false, the states are kept (packed sequences)."""
    steps = xs[0].shape[1]
    if not isinstance(steps, int):
        raise EmitError(f"standard NNEF cannot loop over a dynamic sequence length ({steps}): give the time "
                        "axis a static size, or export for tract (tract_core_scan)")
    ys = [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        new = kind.step(ctx, [_index(ctx, x, 1, t) for x in xs], states, w)
        if mask is not None:
            keep = ctx.op("slice", mask, axes=[1], begin=[t], end=[t + 1], out_shape=(mask.shape[0], 1))
            new = tuple(ctx.op("select", keep, n, s, out_dtype=s.dtype, out_shape=s.shape) for n, s in zip(new, states))
        states = new
        ys[t] = states[0]
    h = ys[0].shape
    return ctx.op("stack", ys, axis=1, out_shape=(h[0], steps, h[1])), states


# extractors --------------------------------------------------------------------------------
def _as_states(hx) -> tuple:
    """The module's ``hx`` argument as a tuple of tensors, or () for None."""
    if hx is None:
        return ()
    return tuple(hx) if isinstance(hx, (tuple, list)) else (hx,)


def _zero_states(ctx: EmitContext, kind: CellKind, batch, config: dict, dtype: DType) -> tuple:
    """Zero initial states; an LSTM with projections has h of size proj_size and c of hidden_size."""
    hidden = config["hidden_size"]
    sizes = (config.get("proj_size") or hidden, hidden)
    return tuple(ctx.call("nnef.rnn_zeros", batch, size, dtype) for size in sizes[:len(kind.states)])


def _run_direction(ctx: EmitContext, mode: str, seq: Value, module: dict, suffix: str, init: tuple,
                   mask: Optional[Value] = None) -> tuple:
    """One layer in one direction over ``seq`` [B, T, I]: (y [B, T, H_out], final states)."""
    kind = KINDS[mode]
    w = _load_weights(ctx, module["params"], suffix, mode)
    init = init or _zero_states(ctx, kind, seq.shape[0], module["config"], w.dtype)
    args = (kind, _gate_inputs(ctx, seq, kind, w), init, w, suffix.endswith("_reverse"))
    return ctx.call("nnef.rnn_sequence", *args) if mask is None else ctx.call("nnef.rnn_sequence", *args, mask=mask)


def _recurrent(ctx: EmitContext, x: Value, hx, module: dict, lengths: Optional[Value] = None) -> tuple:
    """nn.LSTM / nn.GRU / nn.RNN on ``x`` (module layout); ``lengths`` [B]: packed sequences."""
    config, batched = module["config"], rank(x) == 3
    seq = _batch_major(ctx, x, config["batch_first"], batched)
    mask = None if lengths is None else ctx.call("nnef.rnn_step_mask", lengths, seq.shape[1])
    given = [s if batched else _unsqueeze(ctx, s, 1) for s in _as_states(hx)]
    dirs = 2 if config["bidirectional"] else 1
    finals = []  # final states per layer and direction, torch's order
    for layer in range(config["num_layers"]):
        runs = [_run_direction(ctx, config["mode"], seq, module, f"_l{layer}" + ("_reverse" if d else ""),
                               tuple(_index(ctx, s, 0, layer * dirs + d) for s in given), mask) for d in range(dirs)]
        seq = _concat_features(ctx, [y for y, _ in runs])
        finals += [last for _, last in runs]
    if mask is not None:
        seq = _zero_masked(ctx, seq, mask)
    out = _torch_layout(ctx, seq, config["batch_first"], batched)
    return (out,) + tuple(_stack_states(ctx, list(states), batched) for states in zip(*finals))


@register("nnef.rnn_step_mask")
def rnn_step_mask(ctx: EmitContext, lengths: Value, steps) -> Value:
    """``t < lengths[b]`` as a bool [B, T] (compared as ``lengths[b] - t > 0``)."""
    if lengths.dtype is not DType.I64 or rank(lengths) != 1:
        raise EmitError(f"packed sequence lengths must be an int64 vector, got {lengths.dtype} {lengths.shape}")
    batch = lengths.shape[0]
    if isinstance(steps, int):
        t = ctx.const(np.arange(steps, dtype=np.int64).reshape(1, steps), DType.I64, name="steps")
    else:
        t = _unsqueeze(ctx, ctx.call("nnef.range", 0, steps, 1, DType.I64, (steps,)), 0)
    left = ctx.op("sub", _unsqueeze(ctx, lengths, 1), t, out_shape=(batch, steps))
    zero = ctx.const(np.zeros((1, 1), dtype=np.int64), DType.I64, name="zero_step")
    return ctx.op("gt", left, zero, out_dtype=DType.BOOL, out_shape=(batch, steps))


def _zero_masked(ctx: EmitContext, seq: Value, mask: Value) -> Value:
    """``seq`` [B, T, H] with zeros where ``mask`` [B, T] is false."""
    zero = ctx.const(np.zeros((1, 1, 1)), seq.dtype, name="zero_output")
    return ctx.op("select", _unsqueeze(ctx, mask, 2), seq, zero, out_dtype=seq.dtype, out_shape=seq.shape)


class RecurrentExtractor(ModuleInfoExtractor):
    """nn.LSTM / nn.GRU / nn.RNN: layers, directions, batch_first, unbatched input, optional hx."""

    def convert_to_nnef(self, ctx: EmitContext, inputs: list, module: dict):
        x, hx = inputs[0], inputs[1] if len(inputs) > 1 else None
        return _recurrent(ctx, x, hx, module)


@register("fx2nnef.packed_rnn")
def packed_rnn(ctx: EmitContext, x: Value, lengths: Value, hx=None, *, module: dict):
    """nn.LSTM / nn.GRU / nn.RNN run on pack_padded_sequence(x, lengths) and padded back to x's
    length (``fx_tracer/packed.py``): x [B, T, I] or [T, B, I] in the module's layout."""
    if rank(x) != 3:
        raise EmitError(f"a packed sequence needs a batched 3-D input, got shape {x.shape}")
    return _recurrent(ctx, x, hx, module, lengths)


def _concat_features(ctx: EmitContext, ys: list) -> Value:
    """Both directions' outputs side by side on the feature axis."""
    if len(ys) == 1:
        return ys[0]
    return ctx.op("concat", ys, axis=2, out_shape=ys[0].shape[:2] + (2 * ys[0].shape[2],))


def _batch_major(ctx: EmitContext, x: Value, batch_first: bool, batched: bool) -> Value:
    """The input sequence as [B, T, I]."""
    if not batched:
        return _unsqueeze(ctx, x, 0)
    if batch_first:
        return x
    return ctx.op("transpose", x, axes=[1, 0, 2], out_shape=(x.shape[1], x.shape[0], x.shape[2]))


def _torch_layout(ctx: EmitContext, y: Value, batch_first: bool, batched: bool) -> Value:
    """[B, T, H] back to the module's output layout."""
    if not batched:
        return _squeeze(ctx, y, 0)
    if batch_first:
        return y
    return ctx.op("transpose", y, axes=[1, 0, 2], out_shape=(y.shape[1], y.shape[0], y.shape[2]))


def _stack_states(ctx: EmitContext, states: list, batched: bool) -> Value:
    """Final states of every layer and direction as torch's [L*D, B, H] (or [L*D, H] unbatched)."""
    b, h = states[0].shape
    y = ctx.op("stack", states, axis=0, out_shape=(len(states), b, h))
    return y if batched else _squeeze(ctx, y, 1)


@register_extractor
class LSTMExtractor(RecurrentExtractor):
    MODULE_CLASS = torch.nn.LSTM


@register_extractor
class GRUExtractor(RecurrentExtractor):
    MODULE_CLASS = torch.nn.GRU


@register_extractor
class RNNExtractor(RecurrentExtractor):
    MODULE_CLASS = torch.nn.RNN


class CellExtractor(ModuleInfoExtractor):
    """nn.LSTMCell / nn.GRUCell / nn.RNNCell: one step, batched [B, I] or unbatched [I], optional hx."""

    MODE = ""

    def mode(self, config: dict) -> str:
        return self.MODE

    def convert_to_nnef(self, ctx: EmitContext, inputs: list, module: dict):
        x, hx = inputs[0], inputs[1] if len(inputs) > 1 else None
        mode, batched = self.mode(module["config"]), rank(x) == 2
        kind = KINDS[mode]
        x = x if batched else _unsqueeze(ctx, x, 0)
        w = _load_weights(ctx, module["params"], "", mode)
        states = tuple(s if batched else _unsqueeze(ctx, s, 0) for s in _as_states(hx))
        states = states or _zero_states(ctx, kind, x.shape[0], module["config"], w.dtype)
        new = kind.step(ctx, _gate_inputs(ctx, x, kind, w), states, w)
        new = tuple(s if batched else _squeeze(ctx, s, 0) for s in new)
        return new if len(new) > 1 else new[0]


@register_extractor
class LSTMCellExtractor(CellExtractor):
    MODULE_CLASS = torch.nn.LSTMCell
    MODE = "LSTM"


@register_extractor
class GRUCellExtractor(CellExtractor):
    MODULE_CLASS = torch.nn.GRUCell
    MODE = "GRU"


@register_extractor
class RNNCellExtractor(CellExtractor):
    MODULE_CLASS = torch.nn.RNNCell

    def mode(self, config: dict) -> str:
        return {"tanh": "RNN_TANH", "relu": "RNN_RELU"}[config["nonlinearity"]]
