"""Probe runs: re-run the traced graph at other sizes of the dynamic dims.

The recorded graph is executed at the example sizes and at probe sizes (each symbol
+1, +2, +3, and all together). From these runs we learn, for every node:
- its shape (or integer value) as a polynomial of the symbols (``S``, ``2*S``, ``S+P``);
- whether it is a constant (independent of input data and of the symbols);
- whether each guard the trace took still holds: a guard that flips means the trace baked
  a decision on a dynamic dim.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
from typing import Callable, Optional

import torch
import torch.fx as fx

from ...ir import Guard, SymDim, SymRange, fit_polynomial
from ...ir.dims import clamp_bends, fit_clamped, fit_floor_division, fit_remainder
from ..tracing import control_flow, loops, vmap
from ..tracing.data_dep import data_dependence, is_shape_query
from ..tracing.scan import ScanCall
from ..tracing.structures import data_less
from ..tracing.tracer import GuardRecord
from .budget import BUDGET
from .fake_replay import (VARIES, Replay, ReplayUnavailable, _in_place, _memo_key, _meta_args, _to_meta, replay,
                          shapes_at)
from .overlap import Worker, can_overlap



@dataclasses.dataclass
class ProbeFailure:
    env: dict
    node: Optional[fx.Node]
    message: str

    def __str__(self):
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        where = ""
        if self.node is not None:
            src = self.node.meta.get("source")
            where = f" in '{self.node.name}'" + (f" at {src}: {src.code}" if src else "")
        return f"at {sizes}{where}: {self.message}"


AT_EXAMPLE = " at the example sizes"  # ends the message of a failure on the example inputs


@dataclasses.dataclass
class Analysis:
    symbols: list
    base_env: dict
    values: dict  # node -> value at the example sizes
    sym: dict  # node -> fitted int/SymDim (scalars) or tuple of dims (tensors)
    constant: set  # nodes whose value is a constant
    data_dep: set  # nodes depending on input data
    guards: list  # ir.Guard
    failures: list  # ProbeFailure for guard flips and run errors on shape decisions
    envs: list
    ranges: dict = dataclasses.field(default_factory=dict)  # symbol -> SymRange (restricted ones only)
    good_envs: list = dataclasses.field(default_factory=list)  # sizes where the graph reproduces the model
    shapes_from: str = ""  # "fake replay", or "probes (why the replay could not be used)"
    graph_bounded: bool = True  # a range ends where the graph (not the model) stops being right
    io_envs: list = dataclasses.field(default_factory=list)  # check_io sizes chosen with the replay
    # env -> whether the tracer's decisions there are the example's (a trace there gives this
    # graph again); None when the probes, not the replay, gave the shapes
    same_path: Optional[Callable[[dict], bool]] = None
    replay_break: Optional[dict] = None  # sizes above the example where the replay's shapes stopped holding
    # a graph without dynamic sizes analysed within :func:`real_run_later`: its values came from a
    # light run, and its real run at the example (the check that it runs there) is the caller's to do
    rerun: bool = False
    # checks left to the caller, within :func:`real_run_later` (each a run of the graph and the model)
    left_checks: int = 0


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


def resize(t: torch.Tensor, axis: int, n: int, edge: bool = False) -> torch.Tensor:
    """``t`` with axis ``axis`` of length ``n``, reusing its own data where it can: repeated
    whole, or with ``edge`` its last item repeated (ids holding a fixed number of image tokens
    keep that number)."""
    cur = t.shape[axis]
    if edge and cur > 0 and n > cur:
        last = t.narrow(axis, cur - 1, 1)
        return torch.cat([t, last.expand(*[n - cur if a == axis else -1 for a in range(t.dim())])], dim=axis).clone()
    if n == cur:
        return t
    if cur == 0:
        shape = list(t.shape)
        shape[axis] = n
        if t.dtype.is_floating_point:
            return torch.randn(shape, generator=torch.Generator().manual_seed(n)).to(t.dtype)
        return torch.zeros(shape, dtype=t.dtype)
    if n < cur:
        return t.narrow(axis, 0, n).clone()
    reps = -(-n // cur)
    return torch.cat([t] * reps, dim=axis).narrow(axis, 0, n).clone()


def example_sizes(example: list, names: list, dynamic_axes: dict) -> dict:
    """symbol -> its size in the example inputs."""
    return {sym: t.shape[axis] for name, t in zip(names, example) for axis, sym in dynamic_axes.get(name, {}).items()}


def inputs_at(example: list, names: list, dynamic_axes: dict, env: dict, edge: bool = False) -> list:
    out = []
    for name, t in zip(names, example):
        for axis, sym in dynamic_axes.get(name, {}).items():
            t = resize(t, axis, env[sym], edge)
        out.append(t)
    return out


def probe_envs(base: dict) -> list:
    """Sizes near the example, above it: every one must reproduce the model."""
    envs = []
    for s in base:
        for k in (1, 2, 3, 5, 8):  # enough points to tell polynomials and floor divisions apart
            envs.append({**base, s: base[s] + k})
    if len(base) > 1:
        envs.append({s: v + 1 for s, v in base.items()})
        envs.append({s: v + 2 for s, v in base.items()})
    return envs


def below_probe_envs(base: dict) -> list:
    """Sizes below the example (one less, two less, half, 1): a decision such as
    ``S > 2`` taken at S=7 flips only there."""
    envs = []
    for s, v in base.items():
        for n in sorted({v - 1, v - 2, v // 2, 1}, reverse=True):
            if 1 <= n < v:
                envs.append({**base, s: n})
    if len(base) > 1 and all(v > 1 for v in base.values()):
        envs.append({s: v - 1 for s, v in base.items()})
    return envs


def far_probe_envs(base: dict) -> list:
    """Sizes far from the example (x2, x3): they reveal sizes that change only every N steps
    (strided convs: floor((T - c) / 320))."""
    envs = []
    for s, v in base.items():
        for factor in (2, 3):
            far = max(v * factor, 16 * (factor - 1))
            if far > v + 8:
                envs.append({**base, s: far})
    return envs


def _emptied(gm: fx.GraphModule, base: dict) -> Optional[str]:
    """Why a graph traced at other sizes does not hold at the example: a tensor that had items
    where it was traced has none here (``x[:, 17:S]`` of a chunk loop traced at S=18, at S=11:
    torch gives an empty tensor where tract refuses the slice)."""
    for n in gm.graph.nodes:
        traced, here = n.meta.get("value"), base.get(n)
        if isinstance(traced, torch.Tensor) and traced.numel() and here is not None and here[0] == "tensor" \
                and 0 in here[1]:
            return f"'{n.name}' has no item here, where it was traced with {tuple(traced.shape)}"
    return None


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

_REAL_RUN_LATER: list = []  # the open real_run_later contexts, each the list of the checks left to run


class DeferredCheckFailed(BaseException):
    """A check run left to the caller (see :func:`real_run_later`) did not find what the analysis
    took for granted: the capture is to be made again with every check run in its place. Not an
    ``Exception``: the capture's fallbacks (``except Exception``: a retrace that fails is skipped)
    must not take it for the failure of what they tried."""


@contextlib.contextmanager
def real_run_later():
    """Within it, :func:`analyze` leaves the real runs that only check the graph to the caller, who
    runs them in a worker thread while it lowers and writes the asset
    (:meth:`.capture.Capture.start_rerun`):

    - a graph without dynamic sizes takes the values the IR needs from a light run
      (:func:`_run_light`) and leaves its real run at the example, which only checks that it runs
      there (``Analysis.rerun``, :func:`rerun_error`);
    - a graph with dynamic sizes leaves its check (the graph's and the model's runs at sizes where
      every decision is the example's, ``checks`` of :func:`_symbolic_envs`): the analysis goes on
      as if it passed, and the check goes to the list this yields, as ``() -> None``, or why it did
      not pass. The capture is then to be made again outside this context, the check run in its
      place, which gives what it gives there (an error, a narrower range): see
      :class:`DeferredCheckFailed` and :func:`run_left_checks`.

    Only a graph that may run beside other work (:func:`runs_beside`) is left so, and a check only
    where no decision on tensor data could go otherwise at its sizes. A second analysis within the
    context first runs the checks the ones before it left: what it builds on is checked."""
    left: list = []
    _REAL_RUN_LATER.append(left)
    try:
        yield left
    finally:
        _REAL_RUN_LATER.pop()


def run_left_checks(left: list) -> None:
    """Run here the checks left in ``left`` (see :func:`real_run_later`), emptying it; raise
    :class:`DeferredCheckFailed` for the first one that does not pass."""
    while left:
        why = left.pop(0)()
        if why is not None:
            raise DeferredCheckFailed(why)


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


def _output_nodes(gm) -> set:
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    return {a for a in out_node.args[0] if isinstance(a, fx.Node)}


def _read_as_traced(g: GuardRecord, value) -> bool:
    """Whether ``value`` decides ``g`` as the trace did: a bool (``bool(t)``, ``t.any().item()``),
    whose outcome the graph keeps. A number read from data (``int(m.sum())``) may differ while
    the code decides with it as traced (``n > 3``): it counts as read alike."""
    if g.op == "bool":
        return _guard_holds(g, value)
    if g.op != "item" or not isinstance(g.expected, bool):
        return True
    try:
        return bool(value.item() if isinstance(value, torch.Tensor) else value) == g.expected
    except Exception:  # noqa: BLE001 - not a number: no reading to compare
        return True


def _holds_in(g: GuardRecord, values: dict) -> bool:
    """Whether the decision ``g`` holds with ``values`` (node -> value at some sizes): for a bound
    of ``range()``, whether the loop runs as many steps (see ``GuardRecord.counts``)."""
    if g.counts is not None:
        try:
            return _range_steps(g, values.__getitem__) == g.counts[1]
        except (KeyError, TypeError, ValueError):
            pass
    return _guard_holds(g, values[g.node])


def _range_steps(g: GuardRecord, value_of) -> int:
    """How many steps the range that ``g`` bounds runs, ``value_of(node)`` giving each traced
    bound (``GuardRecord.counts``)."""
    return len(range(*[int(value_of(b)) if isinstance(b, fx.Node) else b for b in g.counts[0]]))


def _guard_holds(g: GuardRecord, value) -> bool:
    fn = {"bool": bool, "int": int, "index": int, "float": float, "round": round, "len": int, "count": len}.get(g.op)
    try:
        return fn(value) == g.expected if fn else True
    except Exception:  # noqa: BLE001
        return False


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


def _scrambled(inputs: list, seed: int) -> list:
    """The inputs with their items shuffled (same values, other places)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.numel() > 1:
            t = t.reshape(-1)[torch.randperm(t.numel(), generator=g)].reshape(t.shape).clone()
        out.append(t)
    return out


def _int_bounds(e: torch.Tensor, scale: float) -> tuple:
    """The least and greatest integer :func:`_redrawn` draws for the example ``e``: its range,
    or with ``scale`` below 1 that range shrunk towards zero and reaching it (``y > 0`` on an
    example of 3..9 is all True there, and a flip and a roll of it agree)."""
    lo, hi = int(e.min()), int(e.max())
    if scale != 1 and lo < hi:
        lo, hi = max(lo, math.floor(lo * scale)), min(hi, math.ceil(hi * scale))
        lo, hi = min(lo, hi, 0), max(hi, 0)
        hi = max(hi, lo + 1)
    return lo, hi


def _ramped(inputs: list, example: list) -> list:
    """The inputs with items that change at every place (random draws over few values repeat
    some: a flip and a roll of ``[1, 1, 0]`` agree): integers counting up from the least of the
    small draw of :func:`_redrawn` and wrapping, bools alternating, floats rising evenly across the
    example's range. An input whose example items are all equal keeps them."""
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() > 1 and t.numel() > 0 \
                and not t.is_complex() and bool((e != e.reshape(-1)[0]).any()):
            n = torch.arange(t.numel())
            if t.dtype == torch.bool:
                t = (n % 2 == 1).reshape(t.shape)
            elif t.is_floating_point():
                lo, hi = float(e.min()), float(e.max())
                if math.isfinite(lo) and math.isfinite(hi):
                    t = torch.linspace(lo, hi, t.numel(), dtype=torch.float64).reshape(t.shape).to(t.dtype)
            else:
                lo, hi = _int_bounds(e, 1 / 16)
                t = (lo + n % (hi - lo + 1)).reshape(t.shape).to(t.dtype)
        out.append(t)
    return out


def _redrawn(inputs: list, example: list, seed: int, scale: float = 1.0) -> list:
    """The inputs with fresh values drawn within the range of the example's values (floats
    uniform between its least and greatest item, integers and bools among those between), so
    that the probe's piece of the example (all of one sign, say) does not decide alone. An
    input whose example items are all equal keeps them (a mask of ones stays ones), except a
    float input of one item, drawn on both sides of zero. ``scale`` shrinks the range towards
    zero, where clamps and saturations no longer hide a difference (integers: ``x ** -1`` is 0
    but at -1, 0 and 1; they then reach zero, see :func:`_int_bounds`); floats are then drawn on
    both sides of zero."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() > 0 and not t.is_complex():
            if t.dtype == torch.bool:
                if bool(e.any()) and not bool(e.all()):
                    t = torch.rand(t.shape, generator=g) < 0.5
            elif t.is_floating_point():
                lo, hi = float(e.min()), float(e.max())
                if lo == hi and e.numel() == 1 and math.isfinite(lo):
                    lo, hi = -abs(lo) - 1, abs(lo) + 1  # one number: nothing tells its range, its sign may decide
                if scale != 1:  # both signs: an input positive in the example may not be so always
                    hi = max(abs(lo), abs(hi)) * scale
                    lo = -hi
                if lo < hi and math.isfinite(lo) and math.isfinite(hi):
                    t = (torch.rand(t.shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(t.dtype)
            else:
                lo, hi = _int_bounds(e, scale)
                if lo < hi:
                    t = torch.randint(lo, hi + 1, t.shape, generator=g).to(t.dtype)
        out.append(t)
    return out


def _scrambled_mismatch(gm, reference, env: dict, inputs: list, example: list, guards: tuple = (),
                        flips: tuple = ()) -> Optional[str]:
    """What differs between the graph and the model on other inputs at ``env``, if anything.

    A guard that flips where the graph still gives the model's outputs may only look equivalent
    on the probe's data, a piece of the example's: a flip of a palindrome is the palindrome, and
    ``floor(z / 2.63)`` is all zeros where that piece of ``z`` is positive. The probe's items
    are shuffled once, then redrawn twice within the example's range of values and once within
    a sixteenth of it (``clamp(2 * s, -0.5, 0.5)`` and ``clamp(s, ...)`` agree on large sums),
    given items that differ at every place (:func:`_ramped`), and last the inputs whose items are
    all equal given others (:func:`_unfixed`)."""
    flipped = {id(g) for g in flips}

    def compare(other):
        """None: no evidence; "" : the graph agrees on ``other``; else what differs."""
        if _same_inputs(other, inputs):
            return None  # an input constant in the example keeps its items: the probe's own values
        try:
            expected = reference(env, other)
        except Exception:  # noqa: BLE001 - the model refuses these values: no evidence either way
            return None
        values, err, _ = _run(gm, other, keep=_output_nodes(gm) | {g.node for g in guards})
        if err is not None:
            return ""
        if any(id(g) not in flipped and g.node in values and not _read_as_traced(g, values[g.node]) for g in guards):
            return None  # these values take another decision on data (one the graph keeps as at the example)
        return _outputs_match(gm, values, expected) or ""

    checked = False
    # the variants keep an input whose example items are all equal (zeros, a mask of ones); two
    # more change its items too (a bool input all False in the example: `v = y; if S > 6:
    # v = y.flip(0)` then an in-place write to v changes y on one side only, and only where y
    # holds a True), the others varied or not
    for other in _variants(inputs, example) + _unfixed(inputs):
        found = compare(other)
        if found is None:
            continue
        if found:
            return found + " (on other input values)"
        checked = True
    if not checked:
        # all the values tried were the probe's own or refused by the model: that the graph agrees
        # on them says nothing of other inputs (``z[::3].flip(0)`` and ``z[::3] * 2`` on zeros)
        return "a decision flips here and no other input values the model accepts could tell the branches apart"
    return None


def _deciding_as_traced(gm, inputs: list, example: list, guards: list, keep: set, data_nodes: set) -> Optional[tuple]:
    """``(inputs, graph run)`` of the first variant of ``inputs`` (as in :func:`_scrambled_mismatch`)
    on which every decision on data (``bool`` of a traced tensor) holds as traced; None if none."""
    data_guards = [g for g in guards if g.op == "bool" and g.node in data_nodes]
    for other in _variants(inputs, example) + _unfixed(inputs):
        if _same_inputs(other, inputs):
            continue
        run = _run(gm, other, keep)
        values, err, _ = run
        if err is None and all(g.node not in values or _guard_holds(g, values[g.node]) for g in data_guards):
            return other, run
    return None


def _variants(inputs: list, example: list) -> list:
    """Other values for a probe's ``inputs``: its items shuffled, redrawn twice within the
    example's range of values and once within a sixteenth of it, ramped, of the other sign, and
    spread over twice the example's magnitude on both sides of zero."""
    return [_scrambled(inputs, 1), _redrawn(inputs, example, 2), _redrawn(inputs, example, 3),
            _redrawn(inputs, example, 4, 1 / 16), _ramped(inputs, example), _negated(inputs, example),
            _widened(inputs, example, 5)]


def _widened(inputs: list, example: list, seed: int) -> list:
    """The inputs with items spread evenly over twice the example's greatest magnitude on both
    sides of zero (from 0 up for an integer input that is never negative), shuffled. Every other
    variant stays within the example's range or its mirror: ``y > 0.52`` on an example of
    -1.6..0.24 is all True there, and a roll of it was judged equal to no roll (fuzz 18298; so
    was ``y > 0.52`` on an example of 0.5..2 negated, 18573). An input whose example items are all
    equal or not finite keeps the probe's values, as do bools (:func:`_ramped` alternates them)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and t.numel() > 0 and e.numel() > 1 \
                and t.dtype != torch.bool and not t.is_complex() and bool((e != e.reshape(-1)[0]).any()) \
                and (not e.is_floating_point() or bool(torch.isfinite(e).all())):
            top = 2 * float(e.abs().max())
            bottom = 0.0 if not e.is_floating_point() and bool((e >= 0).all()) else -top
            items = torch.linspace(bottom, top, t.numel(), dtype=torch.float64)
            if not t.is_floating_point():
                items = items.round()
            items = items[torch.randperm(t.numel(), generator=g)]
            t = items.reshape(t.shape).to(t.dtype)
        out.append(t)
    return out


def _negated(inputs: list, example: list) -> list:
    """The inputs whose example values are all of one sign (not all zero), integer or float,
    negated; the others kept. Every other variant stays within the example's sign (an integer
    input of one item keeps its value in all of them): ``y.abs()`` and ``y`` agree there (fuzz
    24603: ``if x.numel() <= 52: v = y.abs()`` with ``y`` one item, 11, was exported as ``y``)."""
    out = []
    for t, e in zip(inputs, example):
        signed = isinstance(t, torch.Tensor) and t.dtype != torch.bool and t.dtype.is_signed and not t.is_complex()
        # finite values only: an additive mask of 0 and -inf is no number of a sign (+inf is no mask)
        if signed and isinstance(e, torch.Tensor) and e.numel() > 0 and bool((t != 0).any()) \
                and bool(torch.isfinite(e).all()) and (bool((e >= 0).all()) or bool((e <= 0).all())):
            t = -t
        out.append(t)
    return out


def _same_inputs(a: list, b: list) -> bool:
    return all(x is y or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                          and x.dtype == y.dtype and bool(torch.equal(x, y))) or (not isinstance(x, torch.Tensor) and x == y)
               for x, y in zip(a, b))


def _unfixed(inputs: list) -> list:
    """Two variants of inputs whose items are all equal (an example of zeros, a mask of ones),
    where the other variants keep them: integers one more on the even items, or one less on the
    odd ones; bools alternating both ways; floats spread by one around the value."""
    ups, downs = [], []
    for t in inputs:
        up = down = t
        if isinstance(t, torch.Tensor) and t.numel() > 1 and not t.is_complex() \
                and not bool((t != t.reshape(-1)[0]).any()):
            n = torch.arange(t.numel()).reshape(t.shape)
            even = n % 2 == 0  # every item changes in one of the two (the first one in the first)
            if t.dtype == torch.bool:
                up, down = even, ~even
            elif t.is_floating_point():
                up = (t + torch.linspace(-1, 1, t.numel(), dtype=torch.float64).reshape(t.shape)).to(t.dtype)
                down = (t - (~even).to(torch.float64)).to(t.dtype)
            else:
                up = (t + even.to(torch.int64)).to(t.dtype)
                down = (t - (~even).to(torch.int64)).to(t.dtype)
        ups.append(up)
        downs.append(down)
    return [ups, downs]


def _env_text(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())


def _moved(env: dict, base: dict) -> list:
    return [k for k in env if env[k] != base[k]]


def _edge(sym: str, v: int, results: dict, up: bool) -> tuple:
    """Where the range around ``v`` ends going up (or down): ``(bound, reason)``, the bound being
    the last good size before a "bad" one or before sizes the model refuses, else ``(None, "")``."""
    beyond = (lambda n, m: n > m) if up else (lambda n, m: n < m)
    last = v
    for n in sorted((n for n in results if beyond(n, v)), reverse=not up):
        if results[n] == "bad":
            return last, f"the graph differs from the model at {sym}={n}"
        if results[n] == "unchecked":  # every size before it decides as the sizes checked
            return n - 1 if up else n + 1, f"a decision on {sym} changes at {sym}={n}, beyond the sizes checked"
        if results[n] == "good":
            last = n
    refused = [n for n in results if beyond(n, last) and results[n] == "refused"]
    if refused:
        return last, f"the model refuses {sym}={min(refused) if up else max(refused)}"
    return None, ""


def _bounds(sym: str, v: int, results: dict) -> tuple:
    """``(lo, hi, reasons)``: the nearest bad size on each side bounds the range, and so does a
    refused size beyond the last good one."""
    (hi, why_hi), (lo, why_lo) = _edge(sym, v, results, up=True), _edge(sym, v, results, up=False)
    return lo, hi, [w for w in (why_hi, why_lo) if w]


def _symbol_range(sym: str, v: int, results: dict) -> SymRange:
    """The range of ``sym`` around the example size ``v`` from ``size -> status`` of the probes
    that moved only ``sym``: "good" (the graph reproduces the model), "bad" (it does not),
    "refused" (the eager model itself refuses that size).

    A model that accepts every k-th size only (k from the good sizes, and refusing every probed
    size in between) gets ``sym % k == v % k``; the sizes off that step then bound nothing. A
    size off the step where the model runs and the graph differs is no step: it bounds."""
    k = 0
    for n, r in results.items():
        if r == "good":
            k = math.gcd(k, n - v)
    off_step = [r for n, r in results.items() if (n - v) % k and r != "unchecked"] if k > 1 else []
    if off_step and all(r == "refused" for r in off_step):
        lo, hi, why = _bounds(sym, v, {n: r for n, r in results.items() if (n - v) % k == 0})
        off = sorted(n for n, r in results.items()
                     if (n - v) % k and r == "refused" and (lo is None or n >= lo) and (hi is None or n <= hi))
        why.append(f"the model refuses {sym}=" + ",".join(str(n) for n in off))
        return SymRange(sym, lo, hi, k, v % k, "; ".join(why))
    lo, hi, why = _bounds(sym, v, results)
    return SymRange(sym, lo, hi, 1, 0, "; ".join(why))


OFF_STEP = "off the step"  # in the reason of a range whose step the decisions on the sizes imply
_STEP_PROBES = 24  # real runs per symbol spent on the sizes of a step (one per path of the model)
_STEP_REACH = 4  # the step's paths are followed up to this many times the largest size scanned


def _decision_step(sym: str, base_env: dict, signature, results: dict, run) -> Optional[SymRange]:
    """The range of ``sym`` on a step, when the decisions on it repeat with a period: a patch
    embedding that pads ``if H % 4 != 0``, a TF "SAME" padding that picks its amount by
    ``H % 2`` before each of several stride-2 convolutions, a window partition padding to a
    multiple of the window. The sizes whose decisions (the tracer's and torch's kernels', see
    :func:`_signature`) are the example's are then those of ``sym % k == v % k``; the graph may
    hold on a finer step (a pad by ``(4 - H % 4) % 4`` holds at the multiples of 4 too, where it
    is 0), never off the path it was traced on.

    Every size from 1 to the scan's top is sorted by its decisions (a path of the model); a path
    is good when its probed sizes reproduce the model (one real run of a size of each path met,
    ``run(n)`` -> "good" / "bad" / "refused", at most ``_STEP_PROBES``). For each divisor ``d``
    of ``k``, the sizes ``v + j*d`` are followed up and down from the example while their paths
    are good; the divisor that keeps the most sizes gives the range (the finer one on a tie).
    Past the scan, the sizes of that step up to ``_STEP_REACH`` times its top must take good
    paths, and ``results``' "unchecked" sizes (a decision changing far above) bound it too.
    None when the decisions set no step (``k`` is 1) or the finest step (1) keeps the most sizes:
    the plain ranges then apply (:func:`_symbol_range`)."""
    v = base_env[sym]
    top = _scan_top(v)

    def path(n):
        return _decide(signature, {**base_env, sym: n})

    paths = {n: path(n) for n in sorted({v, *range(1, top + 1)})}  # the example's too (an empty axis: 0)
    k = 0
    for n, p in paths.items():
        if p == paths[v]:
            k = math.gcd(k, n - v)
    if k <= 1:
        return None
    status: dict = {}  # path -> "good", or what one of its sizes gave ("bad", "refused")
    for n, r in results.items():
        if n in paths and r in ("good", "bad", "refused"):
            if status.get(paths[n], "good") == "good":
                status[paths[n]] = r
    budget = [_STEP_PROBES]

    def path_status(n):
        p = paths[n]
        if p not in status:
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            results[n] = status[p] = run(n)
        return status[p]

    def follow(d, step):
        """The last good size from ``v`` by ``step`` (None: every size to the end), and the first
        that is not with what it gave."""
        last, n = v, v + step
        while 1 <= n <= top:
            st = path_status(n)
            if st != "good":
                return last, (n, st)
            last, n = n, n + step
        return None, None

    best = None
    for d in (x for x in range(1, k + 1) if k % x == 0):
        hi, hi_end = follow(d, d)
        lo, lo_end = follow(d, -d)
        low = (v % d or d) if lo is None else lo
        kept = ((top if hi is None else hi) - low) // d + 1
        if best is None or kept > best[0]:
            best = (kept, d, lo, hi, lo_end, hi_end)
    _, d, lo, hi, lo_end, hi_end = best
    if d == 1:
        return None
    why = []
    if hi is None:
        # past the scan: a size of this step on a path never seen bounds the range (not run: far above)
        good = {p for p, st in status.items() if st == "good"}
        n = top + (v - top) % d
        while n <= _STEP_REACH * top:
            if path(n) not in good:
                hi = n - d
                why.append(f"a decision on {sym} changes at {sym}={n}, beyond the sizes checked")
                break
            n += d
    # sizes run past the scan (a decision changing far above is "unchecked": not run)
    beyond = [(m, r) for m, r in results.items() if m > top and r != "good" and (r == "unchecked" or (m - v) % d == 0)]
    if beyond:
        m, r = min(beyond)
        if hi is None or m <= hi:
            hi = m - 1 - (m - 1 - v) % d
            why.append(f"a decision on {sym} changes at {sym}={m}, beyond the sizes checked" if r == "unchecked"
                       else f"the model refuses {sym}={m}" if r == "refused"
                       else f"the graph differs from the model at {sym}={m}")
    for end in (hi_end, lo_end):
        if end is not None:
            n, st = end
            why.append(f"the model refuses {sym}={n}" if st == "refused" else
                       f"the graph differs from the model at {sym}={n}" if st == "bad" else
                       f"{sym}={n} takes a path of the model not checked")
    off = sorted((n for n, r in results.items() if n in paths and (n - v) % d and r in ("bad", "refused")),
                 key=lambda n: (abs(n - v), n))[:3]
    if off:
        why.append(f"{OFF_STEP} the graph differs from the model or the model refuses the size ({sym}="
                   + ",".join(str(n) for n in sorted(off)) + ")")
    else:
        why.append(f"{OFF_STEP} the model takes other decisions")
    return SymRange(sym, lo, hi, d, v % d, "; ".join(why))


def _meta_inputs(example: list, names: list, dynamic_axes: dict, env: dict) -> list:
    out = []
    for name, t in zip(names, example):
        shape = list(t.shape)
        for axis, sym in dynamic_axes.get(name, {}).items():
            shape[axis] = env[sym]
        out.append(torch.empty(shape, dtype=t.dtype, device="meta"))
    return out


def guard_flip_sizes(gm, example, names, dynamic_axes, guards, base_env, data_dep, max_sizes: int = 4) -> list:
    """Sizes, one symbol moved at a time, where a shape guard's decision changes.

    Only the nodes the guards depend on are run, on meta tensors (shapes, no data), at every
    size from 1 to a few times the example: a decision such as ``S > 2`` or ``S == 4`` is then
    found whichever threshold it has, and the nearest sizes where it flips are probed with
    real data. Nodes that cannot run on meta tensors leave their guards unscanned."""
    shape_guards = [g for g in guards if g.node not in data_dep]
    if not shape_guards or not base_env:
        return []
    need: set = set()
    todo = [g.node for g in shape_guards]
    while todo:
        n = todo.pop()
        if n not in need:
            need.add(n)
            todo.extend(n.all_input_nodes)
    if any(n.op == "get_attr" for n in need):
        return []
    order = [n for n in gm.graph.nodes if n in need]
    interp = fx.Interpreter(gm)

    def decisions(env):
        inputs = iter(_meta_inputs(example, names, dynamic_axes, env))
        interp.env = {}
        try:
            with torch.no_grad():
                for n in order:
                    interp.env[n] = next(inputs) if n.op == "placeholder" else interp.run_node(n)
        except Exception:  # noqa: BLE001 - a node needs data: its guards stay unscanned
            return None
        return tuple(_holds_in(g, interp.env) if g.node in interp.env else None for g in shape_guards)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any(n not in need for n in placeholders):
        order = [n for n in gm.graph.nodes if n in need or n.op == "placeholder"]
    found = []
    for s, v in base_env.items():
        top = min(max(3 * v, v + 16, 32), 1024)
        base = decisions(base_env)
        if base is None:
            continue
        for side in (range(v - 1, 0, -1), range(v + 1, top + 1)):
            hits = 0
            prev = base
            for n in side:
                cur = decisions({**base_env, s: n})
                if cur is None:
                    break
                if cur != prev:
                    found.append({**base_env, s: n})
                    hits += 1
                    if hits >= max_sizes:
                        break
                prev = cur
    return found


_NUMBER_GUARDS = ("int", "len", "index", "float", "round")


def _baked_number(guards: list, values: dict, data_dep: set) -> Optional[str]:
    """Why a Python number read from the sizes that differs here (``round(S / 2)``,
    ``x.shape[0].__index__()``) bounds the range even where the graph
    gave the model's outputs: the graph holds the example's number wherever the code computed
    with it, and outputs can hide that on the values tried (a clamp, a saturating activation).
    None when no such number differs."""
    for g in guards:
        if g.op not in _NUMBER_GUARDS or g.node in data_dep or g.node not in values or g.consumed \
                or g.counts is not None:  # a range's bound: only the loop's length is kept (a decision)
            continue
        here = values[g.node]
        here = here.item() if isinstance(here, torch.Tensor) and here.numel() == 1 else here
        if isinstance(here, (int, float)) and not _guard_holds(g, here):  # anything else: nothing read
            return (f"{g.op}() of a size reads {here!r} here, not the example's {g.expected!r}, and the graph "
                    "keeps the example's number")
    return None


def _signature(rep: Replay, guards: list, data_dep: set, gm: Optional[fx.GraphModule] = None):
    """``env -> tuple``: every decision on sizes at ``env`` (torch's, from the fake replay, and the
    tracer's on shapes); a probe is worth its cost only where this changes. The function's
    ``traced(signature)`` gives the tracer's part: where it equals the example's, the graph takes
    the model's own Python path and only torch's kernels decide otherwise. Whether each rolled
    loop of ``gm`` runs a step is one of the tracer's decisions: a loop of no step leaves its
    carries as they came in (the model's may then be views of other values, which an in-place
    update after the loop changes too), so the sizes where it runs none are probed."""
    tracer_holds = []
    for g in guards:
        if g.node in data_dep or (g.node in rep.dims and g.node not in rep.varies):
            continue  # the same value at every size (float(head_dim)): no decision on a dynamic size
        ev = rep.guard_values.get(g.node)
        if ev is None:
            raise ReplayUnavailable(f"the decision {g.text} has no symbolic form")
        if g.op in _NUMBER_GUARDS and g.consumed:
            continue  # read by torch's argument parser for a call the graph records with the traced number
        if g.counts is not None and all(b in rep.guard_values for b in g.counts[0] if isinstance(b, fx.Node)):
            tracer_holds.append(lambda env, g=g: _range_steps(g, lambda b: rep.guard_values[b](env)) == g.counts[1])
            continue
        if g.op in _NUMBER_GUARDS:
            # a size taken as a Python number (len(x)) differs at every other size, and what the
            # code decides with it is out of sight (``if len(x) > 7`` changes at 8, not at the
            # nearest sizes): only probes spread over many sizes tell where the graph holds
            raise ReplayUnavailable(f"{g.text} reads a dynamic size as a Python number")
        tracer_holds.append(lambda env, g=g, ev=ev: _guard_holds(g, ev(env)))
    tracer_holds += _loop_runs(rep, gm)
    count = len(rep.checks)
    seen: dict = {}  # env key -> signature: the scans come back to the same sizes

    def signature(env):
        key = _env_key(env)
        if key not in seen:
            seen[key] = (tuple(_decide(c.holds, env) for c in rep.checks)
                         + tuple(_decide(holds, env) for holds in tracer_holds))
        return seen[key]
    signature.traced = lambda sig: sig[count:]
    return signature


def _loop_runs(rep: Replay, gm: Optional[fx.GraphModule]) -> list:
    """``env -> bool``: whether a rolled loop with carries runs a step at ``env``, one per loop of
    ``gm`` whose number of steps is a dynamic size."""
    out = []
    for n in gm.graph.nodes if gm is not None else ():
        if n.op != "call_function" or not isinstance(n.target, ScanCall) or not n.args[0] or not n.args[1]:
            continue
        dims = rep.dims.get(n.args[1][0])
        steps = dims[n.target.dim] if isinstance(dims, tuple) and len(dims) > n.target.dim else None
        if isinstance(steps, SymDim):
            out.append(lambda env, steps=steps: steps.evaluate(env) > 0)
    return out


def _decide(fn, env):
    try:
        return fn(env)
    except (ArithmeticError, ValueError, TypeError):  # a division by a size that is 0 here
        return None


def _past_flip(signature, base_env: dict, env: dict, s: str, step: int) -> list:
    """Sizes of ``s`` past a flip at ``env`` (moving away from the example by ``step``) where the
    decisions are those of the flip: the next one, and the last before the next change (sizes
    computed in two ways may agree at the flip and part further on), within the scanned sizes."""
    outcome = _decide(signature, env)
    top = _scan_top(base_env[s])
    n = env[s]
    while 1 <= n + step <= top and _decide(signature, {**base_env, s: n + step}) == outcome:
        n += step
    return [m for m in dict.fromkeys((env[s] + step, n)) if m != env[s] and 1 <= m <= top]


def _env_key(env: dict) -> tuple:
    return tuple(sorted(env.items()))


def _far_flip(signature, base_env: dict, s: str, top: int, scanned: list, limit: int = 1 << 24,
              since: Optional[tuple] = None) -> Optional[int]:
    """The first size of ``s`` above ``top`` (the last size scanned one by one) where a decision
    that held at every scanned size changes (``x[:, 2:100]`` decides ``S < 100``), found by
    doubling then bisection; None when there is none up to ``limit``. Decisions that already
    change within the scan (parities) are left out: the scan probed them. ``since``: the
    signature at ``top`` when those decisions changed since the scan (past an earlier far flip)."""
    fixed = [i for i in range(len(scanned[0])) if all(sig[i] == scanned[0][i] for sig in scanned)]
    if not fixed:
        return None
    ref = since if since is not None else scanned[0]

    def differs(n):
        sig = signature({**base_env, s: n})
        return any(sig[i] != ref[i] for i in fixed)

    lo, hi = top, 2 * top
    while hi <= limit:
        if differs(hi):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if differs(mid) else (mid, hi)
            return hi
        lo, hi = hi, 2 * hi
    return None


_FAR_KERNEL_FLIPS = 8  # far changes of torch's kernel decisions looked past, per symbol


def _kernel_only_far(signature, base_env: dict, s: str, n: int, shapes_past) -> bool:
    """Whether the change at ``s = n`` is torch's kernels' alone (the tracer's decisions are the
    example's there) and the replay's shapes hold at ``n``, just past it and at ``2n`` (fake runs)."""
    if signature is None:
        return False
    base = signature.traced(signature(base_env))

    def holds(m):
        env = {**base_env, s: m}
        return shapes_past(env) if signature.traced(signature(env)) == base else "bad"

    # just past n: n + 2 when the graph cannot run at n + 1 (a model of even sizes only)
    past = holds(n + 1)
    if past == "unknown":
        past = holds(n + 2)
    return past == "good" and holds(n) == "good" and holds(2 * n) == "good"


def _scan_top(v: int) -> int:
    """The largest size of a symbol scanned one by one for flips, from its example size ``v``."""
    return max(v + 16, min(max(3 * v, 32), 1024))


def _symbolic_envs(signature, base_env: dict, max_flips: int = 4) -> tuple:
    """``(single, multi, lazy, kernel_only, io_envs, checks, far)`` probe sizes: where a decision flips and the
    size before, one symbol moved at a time (the nearest ``max_flips`` on each side, up to a few
    times the example), and one check at sizes where no decision differs, every symbol moved (below
    the example where it can, the cheaper side, else just above).

    ``lazy`` maps the size before a flip to the flip: it is probed only if the flip is not good.
    ``kernel_only`` holds the keys of flip sizes where the tracer's decisions are the example's: only
    torch's kernels decide otherwise there, and they run in the graph as in the model, so the graph
    gives the model's values; what needs checking there is the shapes, which a fake run tells.
    ``io_envs``: sizes for check_io, where no decision differs, below and above the example.
    ``checks``: the keys of the check sizes. ``far``: symbol -> a size far above the example
    where a decision changes (:func:`_far_flip`); it is not run, it bounds the range."""
    base = signature(base_env)
    # the tracer's decisions the graph was traced with: every guard holds (the example's, unless
    # the graph was traced again at other sizes and is checked at the example's)
    traced = tuple(True for _ in signature.traced(base))
    single, lazy, kernel_only, check, below, above, checks = [], {}, set(), {}, {}, {}, set()
    near: dict = {-1: {}, 1: {}}  # side -> symbol -> nearest flip, for check_io when no size there is alike
    far: dict = {}  # symbol -> the first size above the scanned ones where a decision changes

    def add_flip(env):
        if env not in single:
            single.append(env)
            if signature.traced(signature(env)) == traced:
                kernel_only.add(_env_key(env))

    for s, v in base_env.items():
        top = _scan_top(v)
        same, scanned = [], [base]
        for step, side in ((1, range(v - 1, 0, -1)), (-1, range(v + 1, top + 1))):
            prev, hits, seen = base, 0, set()
            for n in side:
                cur = signature({**base_env, s: n})
                scanned.append(cur)
                # a flip between the same two outcomes as a nearer one (S odd, then even, then
                # odd again) is not probed again: the flips further away stay within reach
                if cur != prev and hits < max_flips and (prev, cur) not in seen:
                    seen.add((prev, cur))
                    # the flip, and the size before it: the range would end at the last good size
                    add_flip({**base_env, s: n})
                    before = {**base_env, s: n + step}
                    if n + step != v and before not in single:
                        add_flip(before)
                        lazy[_env_key(before)] = n
                    hits += 1
                if cur == base:
                    same.append(n)
                prev = cur
        n = _far_flip(signature, base_env, s, top, scanned)
        if n is not None:
            far[s] = n
        if v > 1 and {**base_env, s: 1} not in single and signature({**base_env, s: 1}) != base:
            add_flip({**base_env, s: 1})  # the smallest size, past the flips counted (often refused)
        low = [n for n in same if n < v]
        if any(n >= 2 for n in low):
            low = [n for n in low if n >= 2]  # a size of 1 broadcasts: a check there says little
        high = [n for n in same if n > v]
        if low:
            # about an eighth of the example (the check's two real runs then cost a fraction of
            # the example's: a conv net's by the area, an LLM's by the tokens until weight reads
            # dominate), an odd distance from it: the sizes run then also tell a model that
            # accepts every k-th size only from one that accepts all (see _symbol_range)
            below[s] = check[s] = min(low, key=lambda n: (abs(n - max(2, v // 8)) + 2 * ((v - n + 1) % 2), n))
        if high:
            above[s] = min(high, key=lambda n: (abs(n - (v + 3)), n))
            check.setdefault(s, min(high, key=lambda n: (abs(n - (v + 1)), n)))
        # no size on one side where every decision is the example's (B=2: only B=1 below):
        # check_io runs at the nearest probed size there (left out if outside the range)
        moved = [e[s] for e in single if _moved(e, base_env) == [s]]
        if not low and any(n < v for n in moved):
            near[-1].setdefault(s, max(n for n in moved if n < v))
        if not high and any(n > v for n in moved):
            near[1].setdefault(s, min(n for n in moved if n > v))
    multi = []
    io_envs = []
    if check:
        env = {**base_env, **check}
        if len(base_env) > 1 and signature(env) != base:
            for s, n in check.items():  # together they change a decision: check them one by one
                one = {**base_env, s: n}
                checks.add(_env_key(one))
                if one in single:
                    kernel_only.discard(_env_key(one))
                else:
                    single.append(one)
                lazy.pop(_env_key(one), None)
        else:
            checks.add(_env_key(env))
            if env in single:
                kernel_only.discard(_env_key(env))
            else:
                (single if len(base_env) == 1 else multi).append(env)
        lazy.pop(_env_key(env), None)
    for side, moved in ((-1, below), (1, above)):
        # check_io runs below and above the example (below, the check's sizes when every symbol
        # has a size below: the model's outputs there are known)
        env = {**base_env, **moved}
        if moved and signature(env) == base:
            # a symbol with no size alike on this side (the example is where a decision flips: a
            # graph traced again at other sizes) is checked at its nearest flip, else never
            io_envs.append({**env, **{s: n for s, n in near[side].items() if s not in moved}})
        elif near[side]:
            s, n = next(iter(near[side].items()))
            io_envs.append({**base_env, s: n})
    return single, multi, lazy, kernel_only, io_envs, checks, far


def _form_at(form, env):
    if isinstance(form, SymDim):
        return form.evaluate(env)
    if isinstance(form, tuple):
        return tuple(_form_at(f, env) for f in form)
    return form


def _agrees(form, record, env) -> bool:
    """Whether a node's :func:`_record` at ``env`` is what its symbolic form gives there."""
    if form is VARIES or form is None:
        return True
    kind = record[0]
    if kind == "tensor":
        return isinstance(form, tuple) and record[1] == _form_at(form, env)
    if kind in ("bool", "int", "float"):
        return not isinstance(form, tuple) and record[1] == _form_at(form, env)
    if kind == "seq":
        # a sequence of pieces may be shorter or longer here (chunk(2) of S=1 has one piece):
        # the pieces the graph reads are checked at their own getitem nodes
        # (split(S // 2) of S=5 has a third piece of 1 the graph never reads)
        pieces = any(r[0] == "tensor" for r in record[1])
        if pieces:
            return isinstance(form, tuple)
        return (isinstance(form, tuple) and len(form) == len(record[1])
                and all(_agrees(f, r, env) for f, r in zip(form, record[1])))
    return True


def _shape_mismatch(rep: Replay, records: dict, env: dict) -> Optional[str]:
    """None when every node's shape (and size value) recorded at ``env`` is what the fake
    replay's expressions give there, else the first node that differs."""
    for n, record in records.items():
        form = rep.dims.get(n)
        if not _agrees(form, record, env):
            return f"'{n.name}' is {_record_text(record)} where the symbolic shapes give {_form_at(form, env)}"
    return None


def _fitted_off_example(sym: dict, records: dict, base_records: dict, base_env: dict) -> list:
    """A failure where the shapes fitted from the probes do not hold at the example sizes, or a
    tensor's rank differs between the sizes probed (``squeeze()`` of an axis that is 1 at some
    sizes only, where torch's kernel drops it): the graph has one rank and follows the other sizes,
    so it would be wrong at some sizes of its range, the example's among them."""
    for n, record in base_records.items():
        form = sym.get(n)
        fitted = isinstance(form, tuple) and all(isinstance(d, (int, SymDim)) for d in form)
        if record[0] == "tensor" and fitted and not _agrees(form, record, base_env):
            return [ProbeFailure(base_env, n, (
                f"'{n.name}' is {_record_text(record)} at the example sizes, but "
                f"{_form_at(form, base_env)} from the shapes every other size gives: torch decides on an "
                "axis of size 1 (or 0) there; export with an example whose dynamic sizes are 2 or more"))]
        ranks = {len(r[1]) for r in records.get(n, ()) if r[0] == "tensor"}
        if form is None and record[0] == "tensor" and len(ranks) > 1:
            return [ProbeFailure(base_env, n, (
                f"'{n.name}' has rank {len(record[1])} at the example sizes and {sorted(ranks - {len(record[1])})} "
                "at other sizes: torch drops or keeps an axis of size 1 (or 0) by its size, an exported tensor "
                "has one rank; export with an example whose dynamic sizes are 2 or more, or name the axes "
                "(squeeze(dim) of an axis that is always 1)"))]
    return []


def _record_text(record):
    if record[0] == "seq":
        return tuple(_record_text(r) for r in record[1])
    return record[1]


def _check_base_shapes(rep: Replay, records: dict, base_env: dict) -> None:
    wrong = _shape_mismatch(rep, records, base_env)
    if wrong is not None:
        raise ReplayUnavailable(f"at the example sizes, {wrong}")


def _unfit_varying(form):
    if form is VARIES:
        return Unfit([])
    if isinstance(form, tuple):
        return tuple(_unfit_varying(f) for f in form)
    return form


def _fit_good(good: list, symbols: list):
    envs = [e for e, _ in good]
    records: dict = {}
    for _, recorded in good:
        for n, r in recorded.items():
            records.setdefault(n, []).append(r)
    sym = _fit_all(records, envs, symbols) if symbols else {n: _static(r[0]) for n, r in records.items()}
    return envs, records, sym


def _has_division(sym: dict) -> bool:
    """Whether a fitted size of ``sym`` holds a floor division (an atom that is no input size)."""
    def has(x):
        if isinstance(x, tuple):
            return any(has(i) for i in x)
        return isinstance(x, SymDim) and bool(x.symbols - x.input_symbols)
    return any(has(v) for v in sym.values())


def _division_check_envs(base: dict, seen: list) -> list:
    """Sizes past the probed ones, one symbol moved at a time, at uneven steps, no farther than
    the far probes (3x: a run of a large model costs), that no probe ran at."""
    keys = {_env_key(e) for e in seen}
    envs = []
    for s, v in base.items():
        for n in (v + 9, v + 21, 2 * v + 7):
            env = {**base, s: n}
            if _env_key(env) not in keys:
                keys.add(_env_key(env))
                envs.append(env)
    return envs


def _bend_check_envs(sym: dict, base: dict, seen: list) -> list:
    """The sizes next to where a fitted ``min(p, c)`` or ``max(p, c)`` bends (:func:`clamp_bends`)
    that no probe ran at, the other symbols at the example's sizes."""
    keys = {_env_key(e) for e in seen}
    envs = []
    for form in sym.values():
        for s, n in clamp_bends(form):
            for m in (n - 1, n, n + 1):
                env = {**base, s: m}
                if s in base and m >= 1 and _env_key(env) not in keys:
                    keys.add(_env_key(env))
                    envs.append(env)
    return envs


def _count_unfit(sym: dict) -> int:
    def count(x):
        if isinstance(x, Unfit):  # sizes only: a decision (bool) may flip where the graph still holds
            return int(all(isinstance(v, int) and not isinstance(v, bool) for _, v in x.samples))
        if isinstance(x, tuple):
            return sum(count(i) for i in x)
        return 0
    return sum(count(v) for v in sym.values())


def _bisect_refused(results: dict, rng: SymRange, v: int) -> list:
    """A size halfway between a bound set by the model's refusals and the nearest refused
    size beyond it (aligned to the step): probing it tightens that bound."""
    out = []
    if rng.lo is not None:
        below = [n for n in results if n < rng.lo]
        if below and results[max(below)] == "refused":
            mid = rng.lo - ((rng.lo - max(below)) // 2 // rng.step) * rng.step
            if mid < rng.lo and mid not in results:
                out.append(mid)
    if rng.hi is not None:
        above = [n for n in results if n > rng.hi]
        if above and results[min(above)] == "refused":
            mid = rng.hi + ((min(above) - rng.hi) // 2 // rng.step) * rng.step
            if mid > rng.hi and mid not in results:
                out.append(mid)
    return out


def analyze(gm: fx.GraphModule, example: list, names: list, dynamic_axes: dict, guards: list,
            reference=None, hint_env: Optional[dict] = None, traced_at_example: bool = True) -> Analysis:
    """Run the graph at the example sizes and at probe sizes below and above; fit shapes;
    check guards; decide the sizes the graph is valid for.

    ``reference(env)``, when given, runs the original model at the sizes ``env`` and returns
    its flat outputs. The graph is compared with it at the example sizes and at every probe
    size: a size the model refuses is outside the model's domain; a size where the graph
    differs bounds the range of that symbol (``Analysis.ranges``); a guard that flips at a
    size where the graph still reproduces the model was an equivalent branch.
    ``traced_at_example``: False for a graph traced at other sizes (capture's retrace), whose
    comparison with the model at the example is never deferred.
    """
    if _REAL_RUN_LATER:  # the checks an analysis before this one left: what follows may build on them
        run_left_checks(_REAL_RUN_LATER[-1])
    base_env = example_sizes(example, names, dynamic_axes)
    symbols = list(base_env)
    # the example's values are kept for the IR (constants, dtypes, Python numbers); a tensor
    # computed from input data is never a constant: its shape and dtype are enough, except for
    # the outputs while they are compared with the model
    light = data_dependence(gm)
    outputs = _output_nodes(gm)
    # Without check_io the model's outputs at the example are not known (``reference.defer_base``):
    # nothing compares the graph's with them unless the probes find something wrong (a failure, a
    # bounded range). The graph was traced at the example: a graph that computes otherwise there
    # (a route torch takes for plain tensors only) computes otherwise at the probed sizes too, and
    # that comparison then says where it went wrong, as it did when it ran first. Until then the
    # graph's run at the example computes the values the IR needs only (see :func:`_run_light`):
    # the probes' real runs check the graph. A graph traced at other sizes (capture's retrace) holds
    # there and may compute otherwise at the example only (a decision baked there, `if S < 5`, whose
    # other outcome the probes above the example never take): compared at once
    deferred = bool(symbols) and traced_at_example and reference is not None \
        and getattr(reference, "defer_base", False) and not reference.knows(base_env)
    light_runs = RUNS.graph_light
    (base_values, err, base_records), replayed, ahead = _run_and_replay(
        gm, example, names, dynamic_axes, guards, base_env, light, hint_env,
        light_run=deferred or (not symbols and bool(_REAL_RUN_LATER) and runs_beside(gm)))
    rerun = not symbols and RUNS.graph_light > light_runs
    check_reran(err)
    # the graph's real outputs at the example while the comparison waits (none after a run without data)
    real_outputs: dict = {}
    if deferred and not any(_holds_meta(base_values[n]) for n in outputs):
        real_outputs = {n: base_values[n] for n in _output_args(gm)}

    def failures_at_example(expected) -> list:
        if expected is not None:
            mismatch = _outputs_match(gm, {**base_values, **real_outputs}, expected)
            if mismatch is not None:
                return [ProbeFailure(base_env, None, mismatch + AT_EXAMPLE)]
        # a graph traced at other sizes (capture's retrace) and checked here: a number it read from
        # the sizes that differs here is kept as read there, whatever the outputs say on these values
        baked = _baked_number(guards, base_values, light)
        if baked is not None:
            return [ProbeFailure(base_env, None, baked + AT_EXAMPLE)]
        empty = _emptied(gm, base_records)
        if empty is not None:
            return [ProbeFailure(base_env, None, empty + AT_EXAMPLE)]
        return []

    base_failures = failures_at_example(reference(base_env) if reference is not None and not deferred else None)
    for n in outputs & light:
        base_values[n] = data_less(base_values[n])

    def analysed(base_failures, rep=None, replay_failed=None) -> Analysis:
        kernel_checks = rep.checks if rep is not None and replay_failed is not None else None
        analysis = _analysis(gm, example, names, dynamic_axes, guards, reference, base_env, base_values,
                             base_records, base_failures, None if replay_failed is not None else rep,
                             kernel_checks=kernel_checks, ahead=ahead if replay_failed is None else None)
        if replay_failed is not None:
            why, above = replay_failed
            analysis.shapes_from = "probes (" + why + ")"
            # the example's sizes made the ShapeEnv fix what holds there only (an axis of 1: one chunk
            # of a chunked scan); a trace at the size where the shapes stopped holding may be general
            analysis.replay_break = above
        return analysis

    at_example: dict = {}  # the model's outputs there, once run

    def settled(analysis: Analysis, rep=None, replay_failed=None) -> Analysis:
        """``analysis``, or, when the comparison at the example was deferred and the probes found
        something wrong, the analysis again with that comparison first (as it ran first before)."""
        if not deferred or (not analysis.failures and not any(r.bounded for r in analysis.ranges.values())
                            and (real_outputs or RUNS.graph > graph_runs or analysis.left_checks)):
            return analysis  # (a graph run only at the example's without data: one real run at least)
        if not real_outputs:
            values, err, _records = _run(gm, example, outputs, light)
            check_reran(err)
            real_outputs.update({n: values[n] for n in _output_args(gm)})
        if "model" not in at_example:
            at_example["model"] = reference(base_env)
        again = failures_at_example(at_example["model"])
        if [str(f) for f in again] == [str(f) for f in base_failures]:
            return analysis
        return analysed(again, rep, replay_failed)

    graph_runs = RUNS.graph
    if not symbols:
        analysis = settled(analysed(base_failures))
        analysis.rerun = rerun
        return analysis
    rep = None
    try:
        rep = replayed()
        return settled(analysed(base_failures, rep), rep)
    except ReplayUnavailable as exc:
        why = str(exc)
        env = getattr(exc, "env", None)
        above = None
        if env is not None and all(env[s] >= base_env[s] for s in base_env) and env != base_env:
            above = env
    return settled(analysed(base_failures, rep, (why, above)), rep, (why, above))


def check_reran(err) -> None:
    """Raise when the graph's run at the example sizes failed (``err`` from :func:`_run`)."""
    if err is not None:
        node, msg = err
        raise RuntimeError(f"the traced graph does not re-run on the example inputs at '{node}': {msg}")


def _output_args(gm) -> list:
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    return [a for a in out_node.args[0] if isinstance(a, fx.Node)]


def _run_and_replay(gm, example, names, dynamic_axes, guards, base_env, light, hint_env, light_run=False) -> tuple:
    """``(base run, replayed, ahead)``: the graph's run at the example sizes (see :func:`_run`), a
    function giving the fake replay (or raising :class:`ReplayUnavailable`), and the :class:`_Ahead`
    work done while the run went on (or None). Where a worker thread may run it
    (:func:`.overlap.can_overlap`), the real run goes there while this thread replays: the replay
    is Python, the run torch's kernels, and the two overlap on two cores. The replay ends first;
    the fake runs the analysis will want next, Python too, take the rest of that time."""
    outputs = _output_nodes(gm)

    def replay_now():
        started = time.perf_counter()
        try:
            return replay(gm, example, names, dynamic_axes, base_env, [g.node for g in guards], hint_env)
        finally:
            RUNS.shapes += time.perf_counter() - started

    if light_run:
        base = _run_light(gm, example, light)
        if base is not None:  # no real run of the graph's heavy part to overlap: the replay follows
            return base, replay_now, None
    if not base_env or not can_overlap():
        return _run(gm, example, outputs, light), replay_now, None
    ahead = None
    with Worker(lambda: _run(gm, example, outputs, light)) as worker:
        try:
            rep = replay_now()
            replayed = lambda: rep  # noqa: E731
        except ReplayUnavailable as exc:
            replayed = lambda exc=exc: _raise(exc)  # noqa: E731
        else:
            ahead = _Ahead.made(gm, example, names, dynamic_axes, guards, base_env, light, rep, worker)
        return worker.result(), replayed, ahead


class _Ahead:
    """What :func:`_analysis` first computes from the replay alone, done while the graph's run at
    the example goes on in the worker: the decisions' signature, the probe sizes, and the fake
    runs at the sizes where only torch's kernels decide otherwise (each costs about a third of the
    replay). Only the fake runs the probes reach whatever the others find are made (not those
    at the size before a flip, probed only if the flip is bad), and only while the worker runs."""

    def __init__(self, signature, envs: tuple, fake: dict):
        self.signature = signature
        self.envs = envs
        self.fake = fake  # env key -> records of the fake run (None: it needs data)

    @classmethod
    def made(cls, gm, example, names, dynamic_axes, guards, base_env, data_dep, rep, worker) -> Optional["_Ahead"]:
        try:
            signature = _signature(rep, guards, data_dep, gm)
            envs = _symbolic_envs(signature, base_env)
        except Exception:  # noqa: BLE001 - the analysis meets it again, in its order
            return None
        single, _multi, lazy, kernel_only = envs[:4]
        fake: dict = {}
        for env in single:
            key = _env_key(env)
            if key not in kernel_only or key in lazy:
                continue
            if not worker.running():
                break  # the rest in the analysis, with the cores free
            try:
                fake[key] = _fake_records(gm, example, names, dynamic_axes, env)
            except Exception:  # noqa: BLE001 - made again by the analysis, which reports it
                break
        return cls(signature, envs, fake)


def _fake_records(gm, example, names, dynamic_axes, env: dict) -> Optional[dict]:
    """Every node's record from a fake run at ``env``, or None when a node needs data or the
    sizes are refused (counted in ``RUNS``)."""
    started = time.perf_counter()
    try:
        records = shapes_at(gm, example, names, dynamic_axes, env, _record)
    except ReplayUnavailable:
        return None
    finally:
        RUNS.shapes += time.perf_counter() - started
    RUNS.fake += 1
    BUDGET.charge("fake")
    return records


def _raise(exc):
    raise exc


def _model_outputs(reference, env: dict):
    """The model's flat outputs at ``env``, or the exception it raises there (it refuses the sizes)."""
    try:
        return reference(env)
    except Exception as exc:  # noqa: BLE001 - a refusal is the answer
        return exc


def runs_beside(gm: fx.GraphModule) -> bool:
    """Whether a real run of ``gm`` may go on in a worker thread beside other work on the same model:
    it calls no submodule, changes no tensor in place (a buffer the model updates would be read
    half-written, or written so) and has no control flow (a model's run meanwhile may stand plain
    Python in for torch's cond / scan / vmap)."""
    return not any(n.op == "call_module" or _in_place(n) or _control_flow(n) for n in gm.graph.nodes)


def _control_flow(n: fx.Node) -> bool:
    """Whether ``n`` calls a loop, a branch or a vmap (recorded ones, or torch's)."""
    if n.op != "call_function":
        return False
    module = getattr(n.target, "__module__", None) or ""
    return isinstance(n.target, ScanCall) or module.startswith((
        "torch._higher_order_ops", "torch._functorch", control_flow.__name__, vmap.__name__, loops.__name__))


def _analysis(gm, example, names, dynamic_axes, guards, reference, base_env, base_values, base_records,
              base_failures, rep: Optional[Replay], kernel_checks: Optional[list] = None,
              ahead: Optional[_Ahead] = None) -> Analysis:
    """The body of :func:`analyze`: probe runs, ranges, shapes and guard statuses. Shapes come from
    the fake replay ``rep`` when given (probes are then only the sizes where a decision flips and
    two checks), else from polynomials fitted to many probe runs."""
    symbols = list(base_env)
    failures = list(base_failures)
    single = []
    multi = []
    lazy: dict = {}  # size before a flip (env key) -> the flip size: probed only if the flip is not good
    kernel_only: set = set()  # env keys where a fake run checks the shapes, no real run
    io_envs: list = []
    checks: set = set()  # env keys of the checks (no decision differs there)
    flip_keys: set = set()
    far: dict = {}
    shape_bound: dict = {}  # symbol -> sizes where the replay's shapes stop holding (bounds)
    data_dep0 = data_dependence(gm)
    signature = None
    if symbols and rep is not None:
        signature = ahead.signature if ahead is not None else _signature(rep, guards, data_dep0, gm)
        _check_base_shapes(rep, base_records, base_env)
        # lists of their own: a second analysis (the comparison at the example deferred) starts afresh
        single, multi, lazy, kernel_only, io_envs, checks, far = (
            [list(e) if isinstance(e, list) else type(e)(e) for e in ahead.envs] if ahead is not None
            else _symbolic_envs(signature, base_env))
        flip_keys = {_env_key(e) for e in single} - checks
    elif symbols:
        for env in below_probe_envs(base_env) + probe_envs(base_env) + far_probe_envs(base_env):
            if env not in single and env not in multi:
                (single if len(_moved(env, base_env)) == 1 else multi).append(env)
        for env in guard_flip_sizes(gm, example, names, dynamic_axes, guards, base_env, data_dep0):
            if env not in single:
                single.append(env)
        if kernel_checks:
            # the replay ran but cannot lead (a size read as a Python number): the shapes fitted
            # from probes hold where torch's kernels decide as at the probed sizes; the first size
            # past them where one of those decisions changes (the number of chunks of a padded
            # sequence) bounds the range, as on the replay's path
            def kernels(env):
                return tuple(_decide(c.holds, env) for c in kernel_checks)
            for s, v in base_env.items():
                top = max([e[s] for e in single + multi] + [v])
                n = _far_flip(kernels, base_env, s, top, [kernels({**base_env, s: k}) for k in range(1, top + 1)])
                if n is not None:
                    far[s] = n
    good: list = [(base_env, base_records)]
    keep = _output_nodes(gm) | {g.node for g in guards}
    guard_flips: dict = {}  # id(guard) -> first env where it flipped and the graph differs
    equivalent: dict = {}
    equivalent_envs: list = []  # single-symbol sizes where a decision flipped and the graph still matched
    kernel_flips: list = []  # single-symbol sizes where only torch's kernels decide otherwise, shapes alike
    results: dict = {s: {} for s in symbols}
    refused: list = []
    errors: list = []

    def _shapes_change(env, wrong):
        """The replay's expressions hold on one side of a decision only. Below the example, at a
        size where a decision flips (``x[:, :4]`` has S items below S=4), that bounds the range;
        anywhere else (tensor_split(4) of S: sizes by S % 4) the fitted probes may find a form
        valid for every size."""
        moved = _moved(env, base_env)
        key = _env_key(env)
        if len(moved) == 1 and env[moved[0]] < base_env[moved[0]] and key not in checks and key in flip_keys:
            shape_bound.setdefault(moved[0], set()).add(env[moved[0]])
            return ("bad", [], wrong)
        exc = ReplayUnavailable(f"at {_env_text(env)}, {wrong}")
        exc.env = env  # where the replay's shapes stop holding: a replay with hints there may hold
        raise exc

    def fake_records(env):
        """:func:`_fake_records` at ``env``, made ahead or now."""
        if ahead is not None and _env_key(env) in ahead.fake:
            return ahead.fake[_env_key(env)]
        return _fake_records(gm, example, names, dynamic_axes, env)

    # the model and the graph run side by side where they may (see runs_beside)
    beside = can_overlap() and runs_beside(gm)
    # the check's sizes, left to the caller (see real_run_later), where no decision can flip there:
    # the decisions on sizes are those the graph was traced with (not so for a graph traced at
    # other sizes and checked at the example's), and none reads tensor data (one could go
    # otherwise on the example's values cut to those sizes)
    left = [] if (rep is not None and _REAL_RUN_LATER and beside and reference is not None
                  and not any(g.node in data_dep0 for g in guards)) else None

    def as_traced(env) -> bool:
        """Whether the tracer's decisions at ``env`` are the ones the graph was traced with."""
        decisions = signature.traced(signature(env))
        return decisions == tuple(True for _ in decisions)

    def probe(env):
        if left is not None and _env_key(env) in checks and as_traced(env):
            if env not in left:
                left.append(env)
            good.append((env, None))
            return "good"
        return probe_now(env)

    def probe_now(env, alone=False):
        """The probe at ``env``: "good", "refused", "error", or ("bad", flips, why). ``alone``: the
        model's and the graph's runs one after the other, not side by side (a check left to run
        beside the write, where a third thread on two cores slowed the write more than it saved)."""
        if _env_key(env) in kernel_only:
            records = fake_records(env)  # None: run for real
            if records is not None:
                wrong = _shape_mismatch(rep, records, env)
                if wrong is not None:
                    return _shapes_change(env, wrong)
                if _env_key(env) in flip_keys:
                    kernel_flips.append(env)
                return "good"
        chosen = reference.inputs_for if hasattr(reference, "inputs_for") else None
        inputs = inputs_at(example, names, dynamic_axes, env)
        if reference is not None and beside and not alone \
                and all(a.numel() <= b.numel() for a, b in zip(inputs, example)):
            # the model's run beside the graph's, on inputs no larger than the example's (the two
            # runs hold about what the example's runs held, one after the other). The model's
            # side picks the inputs (inputs_for, which may run it already); the graph's run is
            # on the inputs grown the usual way, and again on the model's if they differ
            def model_side():
                return (chosen(env) if chosen is not None else inputs), _model_outputs(reference, env)
            with Worker(model_side, split_cores=True) as worker:
                values, err, records = _run(gm, inputs, keep)
            used, expected = worker.result()
            if not _same_inputs(used, inputs):
                inputs = used
                values, err, records = _run(gm, inputs, keep)
        else:
            if chosen is not None:
                inputs = chosen(env)
            values, err, records = _run(gm, inputs, keep)
            expected = _model_outputs(reference, env) if reference is not None else None
        if isinstance(expected, Exception):  # the eager model refuses these sizes
            refused.append(env)
            return "refused"
        if err is not None:
            if reference is None:
                return "refused"
            # a failure outside the range finally claimed only bounds it (chunk(2) of S=1 has
            # one piece): decided once the ranges are known
            errors.append(ProbeFailure(env, err[0], err[1] + " (the eager model accepts these sizes)"))
            return "error"
        flips = [g for g in guards if g.node in values and not _holds_in(g, values)]
        on_data = [g for g in flips if g.op == "bool" and g.node in data_dep0]
        if on_data and expected is not None:
            # the example's values resized to these sizes take another decision on data than
            # the trace (``if mask.all()`` on a padding mask cut to its first columns): that is no
            # decision on the sizes. Values that take the traced ones tell about the sizes
            other = _deciding_as_traced(gm, inputs, example, guards, keep, data_dep0)
            if other is not None:
                try:
                    expected = reference(env, other[0])
                except Exception:  # noqa: BLE001 - the model refuses them: keep the probe's own
                    other = None
            if other is not None:
                inputs, (values, err, records) = other
                flips = [g for g in guards if g.node in values and not _holds_in(g, values)]
        if rep is not None:
            wrong = _shape_mismatch(rep, records, env)
            if wrong is not None:
                return _shapes_change(env, wrong)
        if expected is not None:
            mismatch = _outputs_match(gm, values, expected)
            counts = [g for g in flips if g.op == "count"]
            if mismatch is None and counts:
                # the graph re-run in torch splits again; the export keeps the traced pieces
                mismatch = f"{counts[0].text} no longer: the export keeps the traced pieces"
            if mismatch is None and flips:
                mismatch = _scrambled_mismatch(gm, reference, env, inputs, example, tuple(guards), tuple(flips))
            if mismatch is None:
                mismatch = _baked_number(guards, values, data_dep0)
            if mismatch is not None:
                for g in flips:
                    guard_flips.setdefault(id(g), (env, mismatch))
                return ("bad", flips, mismatch)
            for g in flips:
                equivalent.setdefault(id(g), env)
            if flips:
                equivalent_envs.append(env)
        elif flips:
            for g in flips:
                guard_flips.setdefault(id(g), (env, "a decision differs"))
            return ("bad", flips, "a decision differs")
        good.append((env, records if rep is None else None))  # symbolic shapes: no fitting
        return "good"

    def _shapes_past_flip(env):
        """A fake run at ``env``, past a size where only torch's kernels decide otherwise and the
        shapes were still alike: shapes that differ there bound the range."""
        records = fake_records(env)
        if records is None:
            return "unknown"
        return "good" if _shape_mismatch(rep, records, env) is None else "bad"

    bad_detail: dict = {}
    for env in single:
        (s,) = _moved(env, base_env)
        flip = lazy.get(_env_key(env))
        if flip is not None and results[s].get(flip) in ("good", None):
            continue  # the size before a flip matters only when the flip ends the range
        r = probe(env)
        if isinstance(r, tuple):
            bad_detail[(s, env[s])] = r
            r = "bad"
        results[s][env[s]] = "bad" if r == "error" else r
    if signature is not None:
        # at the size where a decision flips, both branches may give the same outputs
        # (``max(0, 16 - S)`` flips at S=16, where both are 0): the next size on, where the
        # same decisions hold, tells whether the branch taken there is really equivalent; so does
        # the far end of those sizes, where sizes computed in another way may part (the graph's
        # ``S // 2`` items for the model's ``max(1, S // 2)`` agree at S=2 and 3, not at S=1)
        for env in list(equivalent_envs):
            moved = _moved(env, base_env)
            if len(moved) != 1:
                continue
            (s,) = moved
            step = 1 if env[s] > base_env[s] else -1
            for m in _past_flip(signature, base_env, env, s, step):
                if m in results[s]:
                    continue
                r = probe({**base_env, s: m})
                results[s][m] = "bad" if isinstance(r, tuple) or r == "error" else r
        # likewise where only torch's kernels decide otherwise: ``x[:, 8:12]`` of S=10 items
        # decides S < 12, and at S=12 both sides give 4 items; at S=13 the graph's S - 8 items
        # are 5, torch's still 4. A fake run there tells, and a different shape bounds the range
        for env in kernel_flips:
            (s,) = _moved(env, base_env)
            step = 1 if env[s] > base_env[s] else -1
            for m in _past_flip(signature, base_env, env, s, step):
                if m in results[s]:
                    continue
                if _shapes_past_flip({**base_env, s: m}) == "bad":
                    # alike shapes say nothing of the model there (it may refuse that size): only
                    # a difference is kept
                    results[s][m] = "bad"
                    shape_bound.setdefault(s, set()).add(m)
    for s, n in far.items():
        # every decision is the same from the scanned sizes up to n - 1; at n one changes, and
        # what the model does there is not known: the export is valid below it. Unless only
        # torch's kernels decide there (a convolution picking another algorithm past 20480
        # items) and the replay's shapes hold at n, just past it and at twice n (a slice end
        # ``x[:, 2:100]`` decides S < 100 and gives 98 items at S=100 either way, not at 101):
        # the graph runs the same ops at every size, so the next change is looked for instead
        scanned = None
        for _ in range(_FAR_KERNEL_FLIPS):
            if not _kernel_only_far(signature, base_env, s, n, _shapes_past_flip):
                break
            if scanned is None:  # the decisions tracked are those the first search tracked (parities left out)
                scanned = [signature({**base_env, s: k}) for k in range(1, _scan_top(base_env[s]) + 1)]
            n = _far_flip(signature, base_env, s, n, scanned, since=signature({**base_env, s: n}))
            if n is None:
                break
        if n is not None:  # a change not seen to be the kernels' alone, or one too many of them
            results[s].setdefault(n, "unchecked")
    ranges = {s: _symbol_range(s, base_env[s], results[s]) for s in symbols}
    stepped = set()
    if signature is not None:
        for s in symbols:
            def run(n, s=s):
                r = probe({**base_env, s: n})
                return "bad" if isinstance(r, tuple) or r == "error" else r
            r = _decision_step(s, base_env, signature, results[s], run)
            if r is not None:
                ranges[s] = r
                stepped.add(s)
    for s in symbols:
        if s in stepped:
            continue  # the decisions gave its step and bounds
        # a model accepting only every N-th size: look for a finer step and for the smallest
        # accepted size below the lowest probed one (a few more runs only for such models)
        v = base_env[s]
        # up to 12 probes: a bound set by the model's refusals far below the example (a reflect
        # pad refusing T <= 64 for an example of 4000) is bisected to within a few sizes; those
        # probes run below the example, at its cost or less
        for _ in range(12):
            rng = ranges[s]
            finer = [v + d for d in range(rng.step - 1, 0, -1) if rng.step % d == 0 and v + d not in results[s]]
            # the smallest size on the step, when nothing bounds the range below: probed, not assumed
            first = rng.rest or rng.step
            lowest = [first] if rng.step > 1 and rng.lo is None and first < v and first not in results[s] else []
            todo = (finer[:1] + lowest + _bisect_refused(results[s], rng, v))[:1]
            if not todo:
                break
            env = {**base_env, s: todo[0]}
            r = probe(env)
            results[s][todo[0]] = "bad" if isinstance(r, tuple) or r == "error" else r
            ranges[s] = _symbol_range(s, v, results[s])
    for env in multi:
        if all(ranges[s].contains(env[s]) for s in symbols):
            r = probe(env)
            if isinstance(r, tuple):
                node = r[1][0].node if r[1] else None
                failures.append(ProbeFailure(env, node, r[2]))
    failures.extend(e for e in errors if all(ranges[s].contains(e.env[s]) for s in symbols))
    # shapes are fitted only on sizes inside the range: outside, another branch may give other shapes
    good = [(e, v) for e, v in good if all(ranges[s].contains(e[s]) for s in symbols)]
    if rep is not None:
        good_envs = [e for e, _ in good]
        sym = {n: _unfit_varying(d) for n, d in rep.dims.items()}
        varies = set(rep.varies)
    else:
        good_envs, records, sym = _fit_good(good, symbols)
        varies = None
    if rep is None and symbols and _count_unfit(sym):
        # sizes that stop following a polynomial below some size (``x[:, 1:-1]`` is empty,
        # not negative, at S=1): fit from the sizes above and make that the lower bound
        for s in symbols:
            lows = sorted({e[s] for e, _ in good if e[s] < base_env[s]})
            best = (_count_unfit(sym), 0, None)
            for k in range(1, len(lows) + 1):
                trial = [(e, v) for e, v in good if e[s] >= base_env[s] or e[s] > lows[k - 1]]
                fitted = _fit_good(trial, symbols)
                if _count_unfit(fitted[2]) < best[0]:
                    best = (_count_unfit(fitted[2]), k, (trial, fitted))
            if best[2] is not None:
                good, (good_envs, records, sym) = best[2]
                r = ranges[s]
                new_lo = min(e[s] for e, _ in good)
                ranges[s] = SymRange(s, new_lo, r.hi, r.step, r.rest,
                                     "; ".join(x for x in (r.why, f"shapes change otherwise below {s}={new_lo}") if x))
    if rep is None and symbols and _has_division(sym):
        # a floor division fitted to the probed sizes takes the least divisor that agrees with
        # them, which may agree there only: int((S - 10) * 0.3) + 5 at S = 10..33 fits
        # (2*S + 1) // 7 + 2 as well, and differs at S=20. More sizes, farther apart, then refit:
        # a size that follows no form is then refused rather than exported wrong. A size cut to
        # a constant (min(S, 8)) is also run where it bends, and on both sides of it
        for env in _division_check_envs(base_env, good_envs) + _bend_check_envs(sym, base_env, good_envs):
            if all(ranges[k].contains(env[k]) for k in symbols):
                r = probe(env)
                if isinstance(r, tuple):
                    failures.append(ProbeFailure(env, r[1][0].node if r[1] else None, r[2]))
        good = [(e, v) for e, v in good if all(ranges[k].contains(e[k]) for k in symbols)]
        good_envs, records, sym = _fit_good(good, symbols)
    if rep is None and symbols:
        failures.extend(_fitted_off_example(sym, records, base_records, base_env))
    data_dep = data_dep0
    if varies is None:
        varies = {n for n, r in records.items() if any(x != r[0] for x in r[1:])}
    constant = _constants(gm, data_dep, varies)
    ir_guards = []
    for g in guards:
        kind = "data" if g.node in data_dep and g.op != "count" else "shape"  # a count of pieces is a shape fact
        status, note = ("checked", f"holds at {len(good_envs)} sizes") if symbols else ("kept", "")
        if id(g) in equivalent:
            note = ("differs at " + _env_text(equivalent[id(g)]) + ", where the graph still reproduces the model")
        flipped = guard_flips.get(id(g))
        if flipped is not None:
            env, why = flipped
            inside = all(ranges[s].contains(env[s]) for s in symbols)
            if inside:
                status, note = "violated", f"differs at {_env_text(env)}: {why}"
                if kind == "shape":
                    failures.append(ProbeFailure(env, g.node, f"the trace decided {g.text} here; at these sizes it differs"))
            else:
                status = "bounds"
                note = (f"differs at {_env_text(env)}; the export is valid for "
                        + ", ".join(str(SymRange(r.symbol, r.lo, r.hi, r.step, r.rest)) for r in ranges.values() if r.bounded))
        if g.merged:
            status, note = "merged", g.branch_note
            if kind == "shape" and id(g) in equivalent and equivalent[id(g)] not in io_envs:
                # a decision on sizes exported both ways: check_io also runs where it goes the other way
                io_envs.append(equivalent[id(g)])
        elif kind == "data":
            status = "baked"
            note = "decided on tensor data: the export keeps only this branch"
            if g.branch_note:
                note += f"; {g.branch_note}"
        ir_guards.append(Guard(g.text, kind, g.source, g.expected, status, note))
    for s, sizes in shape_bound.items():
        r = ranges[s]
        for n in sizes:
            differs = re.compile(rf"the graph differs from the model at {re.escape(s)}={n}(?!\d)")
            if r.lo is not None and n < r.lo:
                why = differs.sub(f"shapes change otherwise below {s}={r.lo}", r.why)
                r = ranges[s] = SymRange(s, r.lo, r.hi, r.step, r.rest, why)
            elif r.hi is not None and n > r.hi:
                why = differs.sub(f"shapes change otherwise above {s}={r.hi}", r.why)
                r = ranges[s] = SymRange(s, r.lo, r.hi, r.step, r.rest, why)
    kept = {s: r for s, r in ranges.items() if r.bounded}
    graph_bounded = any(r == "bad" and not ranges[s].contains(n)
                        for s in symbols for n, r in results[s].items())
    same_path = None
    if signature is not None:
        traced_base = signature.traced(signature(base_env))
        same_path = lambda env: signature.traced(signature(env)) == traced_base  # noqa: E731
    if left:
        def run_left() -> Optional[str]:
            """The checks left: None when each passes as taken for granted (no decision flipped)."""
            def found():  # what a probe notes besides its answer: a flipped decision, a refusal, an error
                return len(equivalent_envs), len(refused), len(errors), len(guard_flips)

            before = found()
            for env in left:
                try:
                    r = probe_now(env, alone=True)
                except ReplayUnavailable as exc:
                    return str(exc)
                if r != "good":
                    return f"at {_env_text(env)}: " + (r[2] if isinstance(r, tuple) else f"the probe says {r}")
            if found() != before:
                return f"a decision differs at {_env_text(left[0])}"
            return None
        run_left.runs = len(left)
        _REAL_RUN_LATER[-1].append(run_left)
    analysis = Analysis(symbols, base_env, base_values, sym, constant, data_dep, ir_guards, failures,
                        [base_env] + single + multi, kept, good_envs,
                        "fake replay" if rep is not None else "probes" if symbols else "",
                        graph_bounded or (rep is None and any(r.lo is not None or r.hi is not None
                                                              for r in kept.values())),
                        [e for e in io_envs if all(ranges[s].contains(e[s]) for s in symbols)], same_path)
    analysis.left_checks = len(left or ())
    return analysis


def _static(rec):
    kind = rec[0]
    if kind == "tensor":
        return rec[1]
    if kind in ("int", "bool", "float"):
        return rec[1]
    if kind == "seq":
        return tuple(_static(r) for r in rec[1])
    return None


class Unfit:
    """A dynamic value that no polynomial of the symbols explains."""

    def __init__(self, samples):
        self.samples = samples

    def __repr__(self):
        return "Unfit(" + ", ".join(f"{e}->{v}" for e, v in self.samples) + ")"


def _fit_int(samples, symbols):
    if all(v == samples[0][1] for _, v in samples):
        return samples[0][1]
    fitted = fit_polynomial(samples, symbols)
    if fitted is None:
        fitted = fit_floor_division(samples, symbols)
    if fitted is None:
        fitted = fit_clamped(samples, symbols)
    if fitted is None:
        fitted = fit_remainder(samples, symbols)
    return Unfit(samples) if fitted is None else fitted


def _fit_rec(recs, envs, symbols):
    kind = recs[0][0]
    if any(r[0] != kind for r in recs):
        return None
    if kind == "tensor":
        ranks = {len(r[1]) for r in recs}
        if len(ranks) != 1:
            return None
        return tuple(_fit_int([(e, r[1][d]) for e, r in zip(envs, recs)], symbols) for d in range(len(recs[0][1])))
    if kind == "int":
        return _fit_int([(e, r[1]) for e, r in zip(envs, recs)], symbols)
    if kind in ("bool", "float"):
        return recs[0][1] if all(r == recs[0] for r in recs) else Unfit([(e, r[1]) for e, r in zip(envs, recs)])
    if kind == "seq":
        lengths = {len(r[1]) for r in recs}
        if len(lengths) != 1:
            return None
        return tuple(_fit_rec([r[1][i] for r in recs], envs, symbols) for i in range(len(recs[0][1])))
    return None


def _fit_all(records, envs, symbols):
    return {n: _fit_rec(recs, envs[: len(recs)], symbols) for n, recs in records.items()}


def _constants(gm, data_dep, varies) -> set:
    """Nodes whose value is the same for any input: no input data, no dynamic size."""
    const = set()
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in data_dep or n in varies:
            continue
        # new_full(x, (2,), s) reads x's dtype only, but its sizes and fill must be constant too
        rest = n.all_input_nodes[1:] if is_shape_query(n) else n.all_input_nodes
        if all(a in const for a in rest):
            const.add(n)
    return const
