"""Runs of the traced graph at some inputs: every node's value (or only its shape record), on
data or, for the nodes computed from input data, on meta tensors; the comparison of its outputs
with the model's; the count of runs for the timings."""
from __future__ import annotations

from typing import Optional

import torch
import torch.fx as fx

from ..tracing.data_dep import data_dependence
from ..tracing.structures import data_less
from .fake_replay import _in_place, _memo_key, _meta_args, _to_meta
from .budget import BUDGET


class _Recorder(fx.Interpreter):
    """Runs the graph keeping every node's value, or (``keep`` given) only the records of shapes
    and the values of the ``keep`` nodes: a probe at a large size then holds one forward's
    live tensors at a time, not all of them. ``light``: nodes (outside ``keep``) whose tensors
    are kept as data-less stand-ins (shapes and dtypes only)."""

    def __init__(self, gm, keep: Optional[set] = None, light: Optional[set] = None):
        super().__init__(gm, garbage_collect_values=keep is not None or light is not None)
        self.current: Optional[fx.Node] = None
        self.keep = keep
        self.light = light
        self.kept: dict = {}
        self.records: dict = {}

    def run_node(self, n):
        self.current = n
        with torch.no_grad():
            out = super().run_node(n)
        if self.light is not None:
            self.records[n] = _record(out)
            self.kept[n] = data_less(out) if n in self.light and n not in self.keep else out
        elif self.keep is not None:
            self.records[n] = _record(out)
            if n in self.keep:
                self.kept[n] = out
        return out


class _LightRecorder(_Recorder):
    """:class:`_Recorder` of a run where the nodes computed from input data run on meta tensors
    (shapes, strides and dtypes, no data): the others, computed from sizes and weights (position
    tables, constants), run on data. A node computed without input data that gets a meta tensor
    all the same (from data it does not depend on) stops the run: :func:`_run_light` says None."""

    def __init__(self, gm, light: set, device):
        super().__init__(gm, set(), light)
        self.device = device
        # calls on meta tensors give the same for the same metadata: the repeated layers run once
        # (none when a call is in place: it changes a tensor other calls may share)
        self.memo: Optional[dict] = None if any(_in_place(n) for n in gm.graph.nodes) else {}
        self.tensor_keys: dict = {}

    def run_node(self, n):
        self.current = n
        if n in self.light and n.op in ("call_function", "call_method"):
            with self._set_current_node(n):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
            args, kwargs = _meta_args(args, kwargs)
            key = _memo_key(n.op, n.target, args, kwargs, self.tensor_keys) if self.memo is not None else None
            if key is not None and key in self.memo:
                out = self.memo[key]
            elif n.op == "call_method" and n.target == "cpu":
                out = args[0]
            else:
                with torch.no_grad():
                    out = getattr(self, n.op)(n.target, args, kwargs)
                if key is not None:
                    self.memo[key] = out
        else:
            with torch.no_grad():
                out = fx.Interpreter.run_node(self, n)
            if n.op == "placeholder":
                out = _to_meta(out)
            elif n not in self.light:
                if isinstance(out, torch.device) and out.type == "meta":
                    out = self.device  # a meta stand-in's device: the example's
                elif _holds_meta(out):
                    raise _NeedsData(n)
        self.records[n] = _record(out)
        self.kept[n] = out
        return out


class _NeedsData(Exception):
    pass


def _holds_meta(value) -> bool:
    """Whether ``value`` is or holds (in tuples and lists) a meta tensor."""
    if isinstance(value, torch.Tensor):
        return value.device.type == "meta"
    if isinstance(value, (tuple, list)):
        return any(_holds_meta(v) for v in value)
    return False


def _run_light(gm, inputs, light: set) -> Optional[tuple]:
    """``(values, None, records)`` of the graph's run at ``inputs`` where only the nodes computed
    without input data (``light`` are the others) run on data, the rest on meta tensors: what the
    IR needs (constants, Python numbers, shapes and dtypes) at the cost of a fake run instead of a
    forward pass. None when some node cannot run so (no meta kernel, a number read from data, a
    submodule called whole): the caller runs the graph for real."""
    devices = {t.device for t in inputs if isinstance(t, torch.Tensor)}
    if len(devices) != 1:
        return None
    rec = _LightRecorder(gm, light, devices.pop())
    try:
        rec.run(*inputs)
    except Exception:  # noqa: BLE001 - run for real instead
        return None
    RUNS.graph_light += 1
    return rec.kept, None, rec.records


def _record(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return ("seq", tuple(_record(v) for v in value))
    if isinstance(value, torch.Size):
        return ("seq", tuple(("int", v) for v in value))
    return ("other", type(value).__name__)


class RunCount:
    """How many times the traced graph and the eager model ran on real data (for the timings)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.graph = 0
        self.eager = 0
        self.fake = 0  # fake runs at concrete sizes (shapes only, no data)
        self.graph_light = 0  # runs of the graph with input data on meta tensors (see _run_light)
        self.shapes = 0.0  # seconds in the symbolic replay and the fake runs


RUNS = RunCount()


def rerun_error(gm, inputs) -> Optional[tuple]:
    """The graph's real run at ``inputs`` keeping no value: its first error as ``(node, message)``
    (see :func:`check_reran`), or None."""
    return _run(gm, inputs, set(), data_dependence(gm))[1]


def _run(gm, inputs, keep: Optional[set] = None, light: Optional[set] = None) -> tuple:
    """``(values, error, records)``: node values (all, or those of ``keep`` only; with ``light``,
    all, those of ``light`` outside ``keep`` as data-less stand-ins), the first error as
    ``(node, message)`` or None, and each node's shape record."""
    RUNS.graph += 1
    BUDGET.charge("graph")
    rec = _Recorder(gm, keep if light is None else (keep or set()), light)
    err = None
    try:
        rec.run(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported as a probe failure
        first_line = str(exc).strip().split("\n")[0]
        err = (rec.current, f"{type(exc).__name__}: {first_line}")
    if keep is None and light is None:
        return rec.env, err, {n: _record(v) for n, v in rec.env.items()}
    return rec.kept, err, rec.records


def differs_at(gm, inputs, expected: list) -> Optional[str]:
    """Why the graph's run on ``inputs`` is not ``expected`` (the model's flat outputs there), or None."""
    values, err, _records = _run(gm, inputs, _output_nodes(gm))
    if err is not None:
        return f"it fails at '{err[0]}': {err[1]}"
    return _outputs_match(gm, values, expected)


def _output_nodes(gm) -> set:
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    return {a for a in out_node.args[0] if isinstance(a, fx.Node)}


def _outputs_match(gm, values: dict, expected: list) -> Optional[str]:
    """None when the graph's outputs equal ``expected``, else what differs."""
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    got = [values[n] for n in out_node.args[0]]
    if len(got) != len(expected):
        return f"the model returns {len(expected)} tensors here, the graph {len(got)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return f"output {i} has shape {tuple(g.shape)}, the model gives {tuple(e.shape)}"
        if g.dtype.is_floating_point:
            diff = _float_difference(g, e)
            if diff is not None:
                return f"output {i} differs from the model by {diff:.3g}"
        elif not torch.equal(g, e):
            return f"output {i} differs from the model"
    return None


_COMPARE_CHUNK = 1 << 16  # items compared at a time: the temporaries of a comparison stay small


def _float_difference(got: torch.Tensor, expected: torch.Tensor) -> Optional[float]:
    """None when ``got`` is close to ``expected`` item by item (NaN equal to NaN), else the
    largest absolute difference. Compared a chunk at a time: a comparison of whole logits makes
    several temporaries of their size, which stay in the process's peak memory."""
    a, b = got.reshape(-1), expected.reshape(-1)
    close = True
    for start in range(0, a.numel(), _COMPARE_CHUNK):
        x, y = a[start:start + _COMPARE_CHUNK].float(), b[start:start + _COMPARE_CHUNK].float()
        if not torch.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True):
            close = False
            break
    if close:
        return None
    worst = 0.0
    for start in range(0, a.numel(), _COMPARE_CHUNK):
        x, y = a[start:start + _COMPARE_CHUNK].float(), b[start:start + _COMPARE_CHUNK].float()
        worst = max(worst, (x - y).abs().max().item())
    return worst


def check_reran(err) -> None:
    """Raise when the graph's run at the example sizes failed (``err`` from :func:`_run`)."""
    if err is not None:
        node, msg = err
        raise RuntimeError(f"the traced graph does not re-run on the example inputs at '{node}': {msg}")


def _output_args(gm) -> list:
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    return [a for a in out_node.args[0] if isinstance(a, fx.Node)]


def _model_outputs(reference, env: dict):
    """The model's flat outputs at ``env``, or the exception it raises there (it refuses the sizes)."""
    try:
        return reference(env)
    except Exception as exc:  # noqa: BLE001 - a refusal is the answer
        return exc
