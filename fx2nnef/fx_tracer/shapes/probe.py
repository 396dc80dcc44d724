"""Probe runs: re-run the traced graph at other sizes of the dynamic dims.

The recorded graph is executed at the example sizes and at probe sizes (each symbol
+1, +2, +3, and all together). From these runs we learn, for every node:
- its shape (or integer value) as a polynomial of the symbols (``S``, ``2*S``, ``S+P``);
- whether it is a constant (independent of input data and of the symbols);
- whether each guard the trace took still holds: a guard that flips means the trace baked
  a decision on a dynamic dim.

This module holds the analysis (:func:`analyze`, :class:`Prober`) and the deferral of its checks
(:func:`real_run_later`); its parts live beside it: the probe sizes and inputs (``probe_sizes``),
the graph's runs (``graph_runs``), the trace's decisions (``decisions``), where they flip and the
probe plan (``flips``), other input values (``other_values``), the ranges (``ranges``) and the
shapes' forms (``fitting``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Callable, Optional

import torch
import torch.fx as fx

from ...ir import Guard, SymDim, SymRange
from ..tracing import control_flow, loops, vmap
from ..tracing.data_dep import data_dependence
from ..tracing.scan import ScanCall
from ..tracing.structures import data_less
from ..tracing.tracer import GuardRecord
from .budget import BUDGET
from .data_counts import decided_on_counts, sized_decisions
from .decisions import _baked_number, _decide, _holds_in, _signature
from .fake_replay import Replay, ReplayUnavailable, _in_place, replay, shapes_at
from .far_traces import same_graph_at, within_trace_reach
from .fitting import (_agrees, _bend_check_envs, _check_base_shapes, _constants, _count_unfit,
                      _division_check_envs, _fit_good, _form_at, _has_division, _is_fitted, _record_text,
                      _shape_mismatch, _unfit_varying, fit_check_envs, unfit_where_off)
from .flips import (_FAR_KERNEL_FLIPS, _ProbePlan, _far_flip, _kernel_only_far, _past_flip, _scan_top, _symbolic_envs,
                    guard_flip_sizes)
from .graph_runs import (RUNS, _holds_meta, _model_outputs, _output_args, _output_nodes, _outputs_match, _record,
                         _run, _run_light, check_reran)
from .other_values import _deciding_as_traced, _same_inputs, _scrambled_mismatch
from .overlap import Worker, can_overlap
from .probe_sizes import (Traced, _env_key, _env_text, _moved, below_probe_envs, example_sizes, far_probe_envs,
                          probe_envs)
from .lattice import lattice_range, no_lattice_reason, wants_lattice
from .ranges import _bisect_refused, _decision_step, _symbol_range

# what the capture, the IR builder and the piece-by-piece diagnosis take from here
from .fitting import Unfit  # noqa: F401
from .graph_runs import rerun_error  # noqa: F401
from .probe_sizes import inputs_at  # noqa: F401
from .ranges import OFF_STEP  # noqa: F401


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
    # (decision's node, data-sized node): the tracer's decisions on a count from data (data_counts.py)
    decided: list = dataclasses.field(default_factory=list)


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


@dataclasses.dataclass
class ExampleRun:
    """The graph's run at the example sizes ``env``: every node's value and shape record, and the
    failures found there (see :meth:`_Analyzer.failures_at_example`)."""
    env: dict
    values: dict
    records: dict
    failures: list


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
    return _Analyzer(Traced(gm, example, names, dynamic_axes, guards), reference, hint_env, traced_at_example).run()


class _Analyzer:
    """:func:`analyze` in steps: the graph's run at the example sizes and its comparison with the
    model there (or that comparison deferred), the probes (:class:`Prober`), and, when the deferred
    comparison turns out to be wanted, the probes again with it first."""

    def __init__(self, traced: Traced, reference, hint_env: Optional[dict], traced_at_example: bool):
        self.traced, self.reference, self.hint_env = traced, reference, hint_env
        self.base_env = example_sizes(traced.example, traced.names, traced.dynamic_axes)
        self.symbols = list(self.base_env)
        # the example's values are kept for the IR (constants, dtypes, Python numbers); a tensor
        # computed from input data is never a constant: its shape and dtype are enough, except for
        # the outputs while they are compared with the model
        self.light = data_dependence(traced.gm)
        self.outputs = _output_nodes(traced.gm)
        # Without check_io the model's outputs at the example are not known (``reference.defer_base``):
        # nothing compares the graph's with them unless the probes find something wrong (a failure, a
        # bounded range). The graph was traced at the example: a graph that computes otherwise there
        # (a route torch takes for plain tensors only) computes otherwise at the probed sizes too, and
        # that comparison then says where it went wrong, as it did when it ran first. Until then the
        # graph's run at the example computes the values the IR needs only (see :func:`_run_light`):
        # the probes' real runs check the graph. A graph traced at other sizes (capture's retrace) holds
        # there and may compute otherwise at the example only (a decision baked there, `if S < 5`, whose
        # other outcome the probes above the example never take): compared at once
        self.deferred = bool(self.symbols) and traced_at_example and reference is not None \
            and getattr(reference, "defer_base", False) and not reference.knows(self.base_env)
        # the graph's real outputs at the example while the comparison waits (none after a run without data)
        self.real_outputs: dict = {}
        self.at_example: dict = {}  # the model's outputs there, once run
        self.ahead: Optional[_Ahead] = None
        self.base: Optional[ExampleRun] = None
        self.graph_runs = 0

    def run(self) -> Analysis:
        gm = self.traced.gm
        light_runs = RUNS.graph_light
        (values, err, records), replayed, self.ahead = _run_and_replay(
            self.traced, self.base_env, self.light, self.hint_env,
            light_run=self.deferred or (not self.symbols and bool(_REAL_RUN_LATER) and runs_beside(gm)))
        rerun = not self.symbols and RUNS.graph_light > light_runs
        check_reran(err)
        if self.deferred and not any(_holds_meta(values[n]) for n in self.outputs):
            self.real_outputs = {n: values[n] for n in _output_args(gm)}
        self.base = ExampleRun(self.base_env, values, records, [])
        expected = self.reference(self.base_env) if self.reference is not None and not self.deferred else None
        self.base.failures = self.failures_at_example(expected)
        for n in self.outputs & self.light:
            values[n] = data_less(values[n])
        self.graph_runs = RUNS.graph
        if not self.symbols:
            analysis = self.settled(self.analysed(self.base.failures))
            analysis.rerun = rerun
            return analysis
        rep = None
        try:
            rep = replayed()
            return self.settled(self.analysed(self.base.failures, rep), rep)
        except ReplayUnavailable as exc:
            why = str(exc)
            env = getattr(exc, "env", None)
            above = None
            if env is not None and all(env[s] >= self.base_env[s] for s in self.base_env) and env != self.base_env:
                above = env
        return self.settled(self.analysed(self.base.failures, rep, (why, above)), rep, (why, above))

    def failures_at_example(self, expected) -> list:
        """What is wrong at the example sizes given the model's outputs there (None: not known)."""
        gm, base = self.traced.gm, self.base
        if expected is not None:
            mismatch = _outputs_match(gm, {**base.values, **self.real_outputs}, expected)
            if mismatch is not None:
                return [ProbeFailure(base.env, None, mismatch + AT_EXAMPLE)]
        # a graph traced at other sizes (capture's retrace) and checked here: a number it read from
        # the sizes that differs here is kept as read there, whatever the outputs say on these values
        baked = _baked_number(self.traced.guards, base.values, self.light)
        if baked is not None:
            return [ProbeFailure(base.env, None, baked + AT_EXAMPLE)]
        empty = _emptied(gm, base.records)
        if empty is not None:
            return [ProbeFailure(base.env, None, empty + AT_EXAMPLE)]
        return []

    def analysed(self, base_failures: list, rep=None, replay_failed=None) -> Analysis:
        """The probes' analysis from the example's run with ``base_failures``; ``replay_failed``:
        ``(why, sizes above the example where its shapes stopped holding)`` when the replay
        ``rep`` cannot lead (the probes' fitted shapes then do)."""
        kernel_checks = rep.checks if rep is not None and replay_failed is not None else None
        base = dataclasses.replace(self.base, failures=base_failures)
        analysis = Prober(self.traced, self.reference, base, None if replay_failed is not None else rep,
                          kernel_checks=kernel_checks, ahead=self.ahead if replay_failed is None else None).run()
        if replay_failed is not None:
            why, above = replay_failed
            analysis.shapes_from = "probes (" + why + ")"
            # the example's sizes made the ShapeEnv fix what holds there only (an axis of 1: one chunk
            # of a chunked scan); a trace at the size where the shapes stopped holding may be general
            analysis.replay_break = above
        return analysis

    def settled(self, analysis: Analysis, rep=None, replay_failed=None) -> Analysis:
        """``analysis``, or, when the comparison at the example was deferred and the probes found
        something wrong, the analysis again with that comparison first (as it ran first before)."""
        if not self.deferred or (not analysis.failures and not any(r.bounded for r in analysis.ranges.values())
                                 and (self.real_outputs or RUNS.graph > self.graph_runs or analysis.left_checks)):
            return analysis  # (a graph run only at the example's without data: one real run at least)
        gm = self.traced.gm
        if not self.real_outputs:
            values, err, _records = _run(gm, self.traced.example, self.outputs, self.light)
            check_reran(err)
            self.real_outputs.update({n: values[n] for n in _output_args(gm)})
        if "model" not in self.at_example:
            self.at_example["model"] = self.reference(self.base_env)
        again = self.failures_at_example(self.at_example["model"])
        if [str(f) for f in again] == [str(f) for f in self.base.failures]:
            return analysis
        return self.analysed(again, rep, replay_failed)


def _run_and_replay(traced: Traced, base_env: dict, light: set, hint_env: Optional[dict], light_run=False) -> tuple:
    """``(base run, replayed, ahead)``: the graph's run at the example sizes (see :func:`_run`), a
    function giving the fake replay (or raising :class:`ReplayUnavailable`), and the :class:`_Ahead`
    work done while the run went on (or None). Where a worker thread may run it
    (:func:`.overlap.can_overlap`), the real run goes there while this thread replays: the replay
    is Python, the run torch's kernels, and the two overlap on two cores. The replay ends first;
    the fake runs the analysis will want next, Python too, take the rest of that time."""
    gm, example = traced.gm, traced.example
    outputs = _output_nodes(gm)

    def replay_now():
        started = time.perf_counter()
        try:
            return replay(gm, example, traced.names, traced.dynamic_axes, base_env, [g.node for g in traced.guards],
                          hint_env)
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
            ahead = _Ahead.made(traced, base_env, light, rep, worker)
        return worker.result(), replayed, ahead


class _Ahead:
    """What :class:`Prober` first computes from the replay alone, done while the graph's run at
    the example goes on in the worker: the decisions' signature, the probe sizes, and the fake
    runs at the sizes where only torch's kernels decide otherwise (each costs about a third of the
    replay). Only the fake runs the probes reach whatever the others find are made (not those
    at the size before a flip, probed only if the flip is bad), and only while the worker runs."""

    def __init__(self, signature, plan: _ProbePlan, fake: dict):
        self.signature = signature
        self.plan = plan
        self.fake = fake  # env key -> records of the fake run (None: it needs data)

    @classmethod
    def made(cls, traced: Traced, base_env: dict, data_dep: set, rep, worker) -> Optional["_Ahead"]:
        try:
            signature = _signature(rep, traced.guards, data_dep, traced.gm)
            plan = _symbolic_envs(signature, base_env)
        except Exception:  # noqa: BLE001 - the analysis meets it again, in its order
            return None
        fake: dict = {}
        for env in plan.single:
            key = _env_key(env)
            if key not in plan.kernel_only or key in plan.lazy:
                continue
            if not worker.running():
                break  # the rest in the analysis, with the cores free
            try:
                fake[key] = _fake_records(traced, env)
            except Exception:  # noqa: BLE001 - made again by the analysis, which reports it
                break
        return cls(signature, plan, fake)


def _fake_records(traced: Traced, env: dict) -> Optional[dict]:
    """Every node's record from a fake run at ``env``, or None when a node needs data or the
    sizes are refused (counted in ``RUNS``)."""
    started = time.perf_counter()
    try:
        records = shapes_at(traced.gm, traced.example, traced.names, traced.dynamic_axes, env, _record)
    except ReplayUnavailable:
        return None
    finally:
        RUNS.shapes += time.perf_counter() - started
    RUNS.fake += 1
    BUDGET.charge("fake")
    return records


def _raise(exc):
    raise exc


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


@dataclasses.dataclass
class _ProbeRun:
    """A probe's runs at some sizes: the graph's inputs, its values, first error and shape records,
    and what the model gave (its flat outputs, the exception it raised, or None without a model)."""
    inputs: list
    values: dict
    err: Optional[tuple]
    records: dict
    expected: object


def _status(answer) -> str:
    """A probe's answer as a range's result: "good", "refused" or "bad" (a difference, an error)."""
    return "bad" if isinstance(answer, tuple) or answer == "error" else answer


class Prober:
    """The body of :func:`analyze`: probe runs, ranges, shapes and guard statuses. Shapes come from
    the fake replay ``rep`` when given (probes are then only the sizes where a decision flips and
    two checks), else from polynomials fitted to many probe runs. One instance per analysis: its
    fields hold the plan (:class:`_ProbePlan`) and what the probes found so far; :meth:`run` takes
    the steps in order."""

    def __init__(self, traced: Traced, reference, base: ExampleRun, rep: Optional[Replay],
                 kernel_checks: Optional[list] = None, ahead: Optional[_Ahead] = None):
        self.traced, self.gm, self.guards = traced, traced.gm, traced.guards
        self.reference, self.base, self.rep = reference, base, rep
        self.kernel_checks, self.ahead = kernel_checks, ahead
        self.base_env = base.env
        self.symbols = list(base.env)
        self.failures = list(base.failures)
        self.data_dep = data_dependence(traced.gm)
        self.plan = _ProbePlan()
        self.flip_keys: set = set()  # env keys of the flips (single sizes that are no check)
        self.signature = None  # the decisions at some sizes (see _signature), with the replay
        self.shape_bound: dict = {}  # symbol -> sizes where the replay's shapes stop holding (bounds)
        self.good: list = [(base.env, base.records)]  # (sizes, records) where the graph reproduces the model
        self.keep = _output_nodes(traced.gm) | {g.node for g in traced.guards}
        self.guard_flips: dict = {}  # id(guard) -> first env where it flipped and the graph differs
        self.equivalent: dict = {}  # id(guard) -> first env where it flipped and the graph still matched
        self.equivalent_envs: list = []  # single-symbol sizes where a decision flipped and the graph still matched
        self.kernel_flips: list = []  # single-symbol sizes where only torch's kernels decide otherwise, shapes alike
        self.results: dict = {s: {} for s in self.symbols}  # symbol -> size -> status
        self.refused: list = []
        self.errors: list = []
        self.ranges: dict = {}
        # the model and the graph run side by side where they may (see runs_beside)
        self.beside = can_overlap() and runs_beside(traced.gm)
        # the check's sizes, left to the caller (see real_run_later), where no decision can flip there:
        # the decisions on sizes are those the graph was traced with (not so for a graph traced at
        # other sizes and checked at the example's), and none reads tensor data (one could go
        # otherwise on the example's values cut to those sizes)
        self.left = [] if (rep is not None and _REAL_RUN_LATER and self.beside and reference is not None
                           and not any(g.node in self.data_dep for g in traced.guards)) else None

    def run(self) -> Analysis:
        if self.symbols and self.rep is not None:
            self._plan_from_replay()
        elif self.symbols:
            self._plan_from_probes()
        self._probe_singles()
        if self.signature is not None:
            self._probe_past_equivalent_flips()
            self._check_past_kernel_flips()
        self._bound_far_changes()
        self._set_ranges()
        self._probe_multi()
        good_envs, sym, varies = self._shapes()
        constant = _constants(self.gm, self.data_dep, varies)
        ir_guards = [self._ir_guard(g, len(good_envs)) for g in self.guards]
        self._name_shape_bounds()
        return self._result(sym, constant, ir_guards, good_envs)

    # -- the plan ------------------------------------------------------------------------------

    def _plan_from_replay(self) -> None:
        """The decisions' signature and the sizes where they flip (made ahead, or now)."""
        ahead = self.ahead
        self.signature = (ahead.signature if ahead is not None
                          else _signature(self.rep, self.guards, self.data_dep, self.gm))
        _check_base_shapes(self.rep, self.base.records, self.base_env)
        # lists of their own: a second analysis (the comparison at the example deferred) starts afresh
        self.plan = ahead.plan.copy() if ahead is not None else _symbolic_envs(self.signature, self.base_env)
        self.flip_keys = {_env_key(e) for e in self.plan.single} - self.plan.checks

    def _plan_from_probes(self) -> None:
        """Fixed sizes below, near and far from the example, and where a guard's decision flips."""
        plan, base_env = self.plan, self.base_env
        for env in below_probe_envs(base_env) + probe_envs(base_env) + far_probe_envs(base_env):
            if env not in plan.single and env not in plan.multi:
                (plan.single if len(_moved(env, base_env)) == 1 else plan.multi).append(env)
        for env in guard_flip_sizes(self.traced, base_env, self.data_dep):
            if env not in plan.single:
                plan.single.append(env)
        if self.kernel_checks:
            self._bound_by_kernel_changes()

    def _bound_by_kernel_changes(self) -> None:
        """The replay ran but cannot lead (a size read as a Python number): the shapes fitted from
        probes hold where torch's kernels decide as at the probed sizes; the first size past them
        where one of those decisions changes (the number of chunks of a padded sequence) bounds the
        range, as on the replay's path."""
        plan, base_env, checks = self.plan, self.base_env, self.kernel_checks

        def kernels(env):
            return tuple(_decide(c.holds, env) for c in checks)

        for s, v in base_env.items():
            top = max([e[s] for e in plan.single + plan.multi] + [v])
            n = _far_flip(kernels, base_env, s, top, [kernels({**base_env, s: k}) for k in range(1, top + 1)])
            if n is not None:
                plan.far[s] = n

    # -- one probe -----------------------------------------------------------------------------

    def probe(self, env: dict):
        """:meth:`probe_now`, or, for a check left to the caller (see real_run_later), "good" now."""
        if self.left is not None and _env_key(env) in self.plan.checks and self._as_traced(env):
            if env not in self.left:
                self.left.append(env)
            self.good.append((env, None))
            return "good"
        return self.probe_now(env)

    def probe_status(self, env: dict) -> str:
        return _status(self.probe(env))

    def _as_traced(self, env: dict) -> bool:
        """Whether the tracer's decisions at ``env`` are the ones the graph was traced with."""
        decisions = self.signature.traced(self.signature(env))
        return decisions == tuple(True for _ in decisions)

    def probe_now(self, env: dict, alone: bool = False):
        """The probe at ``env``: "good", "refused", "error", or ("bad", flips, why). ``alone``: the
        model's and the graph's runs one after the other, not side by side (a check left to run
        beside the write, where a third thread on two cores slowed the write more than it saved)."""
        if _env_key(env) in self.plan.kernel_only:
            answer = self._fake_probe(env)
            if answer is not None:
                return answer
        run = self._runs_at(env, alone)
        if isinstance(run.expected, Exception):  # the eager model refuses these sizes
            self.refused.append(env)
            return "refused"
        if run.err is not None:
            if self.reference is None:
                return "refused"
            # a failure outside the range finally claimed only bounds it (chunk(2) of S=1 has
            # one piece): decided once the ranges are known
            self.errors.append(ProbeFailure(env, run.err[0], run.err[1] + " (the eager model accepts these sizes)"))
            return "error"
        flips = self._flips(run.values)
        if run.expected is not None and any(g.op == "bool" and g.node in self.data_dep for g in flips):
            run = self._deciding_on_data_as_traced(env, run)
            flips = self._flips(run.values)
        if self.rep is not None:
            wrong = _shape_mismatch(self.rep, run.records, env)
            if wrong is not None:
                return self._shapes_change(env, wrong)
        if run.expected is not None:
            bad = self._compared(env, run, flips)
            if bad is not None:
                return bad
        elif flips:
            for g in flips:
                self.guard_flips.setdefault(id(g), (env, "a decision differs"))
            return ("bad", flips, "a decision differs")
        self.good.append((env, run.records if self.rep is None else None))  # symbolic shapes: no fitting
        return "good"

    def _flips(self, values: dict) -> list:
        return [g for g in self.guards if g.node in values and not _holds_in(g, values)]

    def _fake_probe(self, env: dict):
        """Where only torch's kernels decide otherwise: a fake run's shapes tell ("good", or what
        :meth:`_shapes_change` says); None when the fake run needs data (run for real)."""
        records = self._fake_records(env)
        if records is None:
            return None
        wrong = _shape_mismatch(self.rep, records, env)
        if wrong is not None:
            return self._shapes_change(env, wrong)
        if _env_key(env) in self.flip_keys:
            self.kernel_flips.append(env)
        return "good"

    def _fake_records(self, env: dict) -> Optional[dict]:
        """:func:`_fake_records` at ``env``, made ahead or now."""
        if self.ahead is not None and _env_key(env) in self.ahead.fake:
            return self.ahead.fake[_env_key(env)]
        return _fake_records(self.traced, env)

    def _runs_at(self, env: dict, alone: bool) -> _ProbeRun:
        """The graph's run and the model's at ``env``."""
        reference, example = self.reference, self.traced.example
        chosen = reference.inputs_for if hasattr(reference, "inputs_for") else None
        inputs = self.traced.inputs_at(env)
        if reference is not None and self.beside and not alone \
                and all(a.numel() <= b.numel() for a, b in zip(inputs, example)):
            # the model's run beside the graph's, on inputs no larger than the example's (the two
            # runs hold about what the example's runs held, one after the other). The model's
            # side picks the inputs (inputs_for, which may run it already); the graph's run is
            # on the inputs grown the usual way, and again on the model's if they differ
            def model_side():
                return (chosen(env) if chosen is not None else inputs), _model_outputs(reference, env)
            with Worker(model_side, split_cores=True) as worker:
                values, err, records = _run(self.gm, inputs, self.keep)
            used, expected = worker.result()
            if not _same_inputs(used, inputs):
                inputs = used
                values, err, records = _run(self.gm, inputs, self.keep)
        else:
            if chosen is not None:
                inputs = chosen(env)
            values, err, records = _run(self.gm, inputs, self.keep)
            expected = _model_outputs(reference, env) if reference is not None else None
        return _ProbeRun(inputs, values, err, records, expected)

    def _deciding_on_data_as_traced(self, env: dict, run: _ProbeRun) -> _ProbeRun:
        """The example's values resized to these sizes take another decision on data than the
        trace (``if mask.all()`` on a padding mask cut to its first columns): that is no decision
        on the sizes. Values that take the traced ones tell about the sizes: the runs on them, if
        the model accepts them, else ``run``."""
        other = _deciding_as_traced(self.gm, run.inputs, self.traced.example, self.guards, self.keep, self.data_dep)
        if other is None:
            return run
        try:
            expected = self.reference(env, other[0])
        except Exception:  # noqa: BLE001 - the model refuses them: keep the probe's own
            return run
        inputs, (values, err, records) = other
        return _ProbeRun(inputs, values, err, records, expected)

    def _compared(self, env: dict, run: _ProbeRun, flips: list):
        """("bad", flips, why) where the graph differs from the model at ``env`` (also on other
        input values where a decision flipped), else None, the flipped decisions then noted as
        equivalent there."""
        mismatch = _outputs_match(self.gm, run.values, run.expected)
        counts = [g for g in flips if g.op == "count"]
        if mismatch is None and counts:
            # the graph re-run in torch splits again; the export keeps the traced pieces
            mismatch = f"{counts[0].text} no longer: the export keeps the traced pieces"
        if mismatch is None and any(not g.merged for g in flips):
            # (a decision exported both ways flips with the graph: it takes the other branch there,
            # and the probe's values are evidence as anywhere else)
            # decisions already found equivalent on every variant at other sizes: a few variants here
            seen = all(id(g) in self.equivalent for g in flips)
            mismatch = _scrambled_mismatch(self.gm, self.reference, env, run.inputs, self.traced.example,
                                           tuple(self.guards), tuple(flips), few=seen)
        if mismatch is None:
            mismatch = _baked_number(self.guards, run.values, self.data_dep)
        if mismatch is not None:
            for g in flips:
                self.guard_flips.setdefault(id(g), (env, mismatch))
            return ("bad", flips, mismatch)
        for g in flips:
            self.equivalent.setdefault(id(g), env)
        if flips:
            self.equivalent_envs.append(env)
        return None

    def _shapes_change(self, env: dict, wrong: str):
        """The replay's expressions hold on one side of a decision only. Below the example, at a
        size where a decision flips (``x[:, :4]`` has S items below S=4), that bounds the range;
        anywhere else (tensor_split(4) of S: sizes by S % 4) the fitted probes may find a form
        valid for every size."""
        moved = _moved(env, self.base_env)
        key = _env_key(env)
        if len(moved) == 1 and env[moved[0]] < self.base_env[moved[0]] and key not in self.plan.checks \
                and key in self.flip_keys:
            self.shape_bound.setdefault(moved[0], set()).add(env[moved[0]])
            return ("bad", [], wrong)
        exc = ReplayUnavailable(f"at {_env_text(env)}, {wrong}")
        exc.env = env  # where the replay's shapes stop holding: a replay with hints there may hold
        raise exc

    def _shapes_past_flip(self, env: dict) -> str:
        """A fake run at ``env``, past a size where only torch's kernels decide otherwise and the
        shapes were still alike: shapes that differ there bound the range."""
        records = self._fake_records(env)
        if records is None:
            return "unknown"
        return "good" if _shape_mismatch(self.rep, records, env) is None else "bad"

    # -- the probes, in order ------------------------------------------------------------------

    def _probe_singles(self) -> None:
        for env in self.plan.single:
            (s,) = _moved(env, self.base_env)
            flip = self.plan.lazy.get(_env_key(env))
            if flip is not None and self.results[s].get(flip) in ("good", None):
                continue  # the size before a flip matters only when the flip ends the range
            self.results[s][env[s]] = self.probe_status(env)

    def _probe_past_equivalent_flips(self) -> None:
        """At the size where a decision flips, both branches may give the same outputs
        (``max(0, 16 - S)`` flips at S=16, where both are 0): the next size on, where the same
        decisions hold, tells whether the branch taken there is really equivalent; so does the far
        end of those sizes, where sizes computed in another way may part (the graph's ``S // 2``
        items for the model's ``max(1, S // 2)`` agree at S=2 and 3, not at S=1)."""
        base_env = self.base_env
        for env in list(self.equivalent_envs):
            moved = _moved(env, base_env)
            if len(moved) != 1:
                continue
            (s,) = moved
            step = 1 if env[s] > base_env[s] else -1
            for m in _past_flip(self.signature, base_env, env, s, step):
                if m in self.results[s]:
                    continue
                self.results[s][m] = self.probe_status({**base_env, s: m})

    def _check_past_kernel_flips(self) -> None:
        """Likewise where only torch's kernels decide otherwise: ``x[:, 8:12]`` of S=10 items
        decides S < 12, and at S=12 both sides give 4 items; at S=13 the graph's S - 8 items are 5,
        torch's still 4. A fake run there tells, and a different shape bounds the range."""
        base_env = self.base_env
        for env in self.kernel_flips:
            (s,) = _moved(env, base_env)
            step = 1 if env[s] > base_env[s] else -1
            for m in _past_flip(self.signature, base_env, env, s, step):
                if m in self.results[s]:
                    continue
                if self._shapes_past_flip({**base_env, s: m}) == "bad":
                    # alike shapes say nothing of the model there (it may refuse that size): only
                    # a difference is kept
                    self.results[s][m] = "bad"
                    self.shape_bound.setdefault(s, set()).add(m)

    def _bound_far_changes(self) -> None:
        """Every decision is the same from the scanned sizes up to a far size n - 1; at n one
        changes, and what the model does there is not known: the export is valid below it. Unless
        only torch's kernels decide there (a convolution picking another algorithm past 20480
        items) and the replay's shapes hold at n, just past it and at twice n (a slice end
        ``x[:, 2:100]`` decides S < 100 and gives 98 items at S=100 either way, not at 101): the
        graph runs the same ops at every size, so the next change is looked for instead."""
        signature, base_env = self.signature, self.base_env
        for s, n in self.plan.far.items():
            scanned = None
            for _ in range(_FAR_KERNEL_FLIPS):
                if not (_kernel_only_far(signature, base_env, s, n, self._shapes_past_flip)
                        or self._same_graph_far({**base_env, s: n})):
                    break
                if scanned is None:  # the decisions tracked are those the first search tracked (parities left out)
                    scanned = [signature({**base_env, s: k}) for k in range(1, _scan_top(base_env[s]) + 1)]
                n = _far_flip(signature, base_env, s, n, scanned, since=signature({**base_env, s: n}))
                if n is None:
                    break
            if n is not None:  # a change not seen to be the kernels' alone, or one too many of them
                self.results[s].setdefault(n, "unchecked")

    def _same_graph_far(self, env: dict) -> bool:
        """Whether a far change at ``env`` (one symbol moved) is of decisions the graph does not
        see: not far beyond the example (a trace there costs its sizes), the replay's shapes hold
        there, and the forward traced there gives this very graph (see :mod:`.far_traces`)."""
        (s,) = _moved(env, self.base_env)
        if self.rep is None:  # shapes fitted from probes (a far change of torch's kernels): no replay tells
            return False
        if not within_trace_reach(env[s], self.base_env[s]) or self._shapes_past_flip(env) != "good":
            return False
        return same_graph_at(env)

    def _set_ranges(self) -> None:
        """Each symbol's range from its probes: on a step the decisions set, else from its results,
        refined by a few more probes (:meth:`_refine_range`)."""
        base_env = self.base_env
        self.ranges = {s: _symbol_range(s, base_env[s], self.results[s]) for s in self.symbols}
        stepped = set()
        if self.signature is not None:
            for s in self.symbols:
                r = _decision_step(s, base_env, self.signature, self.results[s],
                                   lambda n, s=s: self.probe_status({**base_env, s: n}))
                if r is not None:
                    self.ranges[s] = r
                    stepped.add(s)
        for s in self.symbols:
            if s not in stepped:  # (a stepped one: the decisions gave its step and bounds)
                self._refine_range(s)
                self._lattice_range(s)

    def _lattice_range(self, s: str) -> None:
        """A model that refuses sizes between those it accepts near the example (a UNet at
        H = 32k): the range on the lattice the graph holds on, when there is one (see
        :mod:`.lattice`); else a too-short range says which sizes were tried."""
        v, rng = self.base_env[s], self.ranges[s]
        if not wants_lattice(rng, v, self.results[s]):
            return
        found, tried = lattice_range(s, v, self.results[s], lambda n: self.probe_status({**self.base_env, s: n}))
        if found is not None:
            self.ranges[s] = found
            # check_io's sizes below and above the example, moved onto the lattice (run there)
            d = found.step
            self.plan.io_envs = [e if found.contains(e[s]) else {**e, s: v + d if e[s] > v else v - d}
                                 for e in self.plan.io_envs]
        elif tried and rng.lo is not None and rng.hi is not None:
            why = "; ".join(x for x in (rng.why, no_lattice_reason(s, tried)) if x)
            self.ranges[s] = SymRange(s, rng.lo, rng.hi, rng.step, rng.rest, why)

    def _refine_range(self, s: str) -> None:
        """A model accepting only every N-th size: look for a finer step and for the smallest
        accepted size below the lowest probed one (a few more runs only for such models). Up to 12
        probes: a bound set by the model's refusals far below the example (a reflect pad refusing
        T <= 64 for an example of 4000) is bisected to within a few sizes; those probes run below
        the example, at its cost or less."""
        v, results = self.base_env[s], self.results[s]
        for _ in range(12):
            rng = self.ranges[s]
            finer = [v + d for d in range(rng.step - 1, 0, -1) if rng.step % d == 0 and v + d not in results]
            # the smallest size on the step, when nothing bounds the range below: probed, not assumed
            first = rng.rest or rng.step
            lowest = [first] if rng.step > 1 and rng.lo is None and first < v and first not in results else []
            todo = (finer[:1] + lowest + _bisect_refused(results, rng, v))[:1]
            if not todo:
                break
            results[todo[0]] = self.probe_status({**self.base_env, s: todo[0]})
            self.ranges[s] = _symbol_range(s, v, results)

    def _in_ranges(self, env: dict) -> bool:
        return all(self.ranges[s].contains(env[s]) for s in self.symbols)

    def _probe_failed(self, env: dict) -> None:
        """A probe at ``env`` that must hold: a difference there is a failure."""
        r = self.probe(env)
        if isinstance(r, tuple):
            self.failures.append(ProbeFailure(env, r[1][0].node if r[1] else None, r[2]))

    def _probe_multi(self) -> None:
        """The sizes with several symbols moved, inside the ranges; and the errors inside them."""
        for env in self.plan.multi:
            if self._in_ranges(env):
                self._probe_failed(env)
        self.failures.extend(e for e in self.errors if self._in_ranges(e.env))

    # -- the shapes ----------------------------------------------------------------------------

    def _shapes(self) -> tuple:
        """``(good_envs, sym, varies)``: the sizes inside the ranges where the graph reproduced the
        model, every node's symbolic shape or value, and the nodes that vary with the sizes. Shapes
        are fitted only on sizes inside the range: outside, another branch may give other shapes."""
        self.good = [(e, v) for e, v in self.good if self._in_ranges(e)]
        if self.rep is not None:
            sym = {n: _unfit_varying(d) for n, d in self.rep.dims.items()}
            return [e for e, _ in self.good], sym, set(self.rep.varies)
        fitted = _fit_good(self.good, self.symbols)
        if self.symbols and _count_unfit(fitted[2]):
            fitted = self._refit_from_above(fitted)
        if self.symbols and _has_division(fitted[2]):
            fitted = self._refit_past_divisions(fitted)
        good_envs, records, sym = fitted
        if self.symbols:
            self.failures.extend(_fitted_off_example(sym, records, self.base.records, self.base_env))
            self._check_fits(sym, good_envs)
        varies = {n for n, r in records.items() if any(x != r[0] for x in r[1:])}
        return good_envs, sym, varies

    def _refit_from_above(self, fitted: tuple) -> tuple:
        """Sizes that stop following a polynomial below some size (``x[:, 1:-1]`` is empty, not
        negative, at S=1): fit from the sizes above and make that the lower bound."""
        for s in self.symbols:
            lows = sorted({e[s] for e, _ in self.good if e[s] < self.base_env[s]})
            best = (_count_unfit(fitted[2]), 0, None)
            for k in range(1, len(lows) + 1):
                trial = [(e, v) for e, v in self.good if e[s] >= self.base_env[s] or e[s] > lows[k - 1]]
                trial_fit = _fit_good(trial, self.symbols)
                if _count_unfit(trial_fit[2]) < best[0]:
                    best = (_count_unfit(trial_fit[2]), k, (trial, trial_fit))
            if best[2] is not None:
                self.good, fitted = best[2]
                r = self.ranges[s]
                new_lo = min(e[s] for e, _ in self.good)
                why = "; ".join(x for x in (r.why, f"shapes change otherwise below {s}={new_lo}") if x)
                self.ranges[s] = SymRange(s, new_lo, r.hi, r.step, r.rest, why)
        return fitted

    def _refit_past_divisions(self, fitted: tuple) -> tuple:
        """A floor division fitted to the probed sizes takes the least divisor that agrees with
        them, which may agree there only: int((S - 10) * 0.3) + 5 at S = 10..33 fits
        (2*S + 1) // 7 + 2 as well, and differs at S=20. More sizes, farther apart, then refit: a
        size that follows no form is then refused rather than exported wrong. A size cut to a
        constant (min(S, 8)) is also run where it bends, and on both sides of it."""
        good_envs, _records, sym = fitted
        for env in _division_check_envs(self.base_env, good_envs) + _bend_check_envs(sym, self.base_env, good_envs):
            if self._in_ranges(env):
                self._probe_failed(env)
        self.good = [(e, v) for e, v in self.good if self._in_ranges(e)]
        return _fit_good(self.good, self.symbols)

    def _check_fits(self, sym: dict, good_envs: list) -> None:
        """The forms fitted to the probe runs hold at the sizes they were fitted to only: run the model
        and the graph at a handful of other sizes in the ranges (:func:`fit_check_envs`: symbols moved
        together, far, at random) and compare; a fitted size the graph does not give there becomes
        :class:`Unfit` (refused where an op needs it, not a silent wrong shape), a difference from the
        model is a failure."""
        if not any(_is_fitted(f) for f in sym.values()):
            return
        for env in fit_check_envs(self.base_env, self.ranges, good_envs):
            answer = self.probe_now(env)
            if isinstance(answer, tuple):
                self.failures.append(ProbeFailure(env, answer[1][0].node if answer[1] else None, answer[2]))
            elif answer == "error":  # the graph fails where the model runs, inside the ranges
                self.failures.append(self.errors[-1])
            if answer != "good":
                continue
            unfit_where_off(sym, self.good[-1][1], env)

    # -- the result ----------------------------------------------------------------------------

    def _ir_guard(self, g: GuardRecord, checked: int) -> Guard:
        """The IR's record of the decision ``g``: checked at ``checked`` sizes, equivalent, violated,
        bounding the range, merged or baked."""
        kind = "data" if g.node in self.data_dep and g.op != "count" else "shape"  # a count of pieces is a shape fact
        status, note = ("checked", f"holds at {checked} sizes") if self.symbols else ("kept", "")
        if id(g) in self.equivalent:
            note = ("differs at " + _env_text(self.equivalent[id(g)]) + ", where the graph still reproduces the model")
        flipped = self.guard_flips.get(id(g))
        if flipped is not None:
            status, note = self._flipped(g, kind, *flipped)
        if g.merged:
            status, note = "merged", g.branch_note
            if kind == "shape" and id(g) in self.equivalent and self.equivalent[id(g)] not in self.plan.io_envs:
                # a decision on sizes exported both ways: check_io also runs where it goes the other way
                self.plan.io_envs.append(self.equivalent[id(g)])
        elif kind == "data":
            status = "baked"
            note = "decided on tensor data: the export keeps only this branch"
            if g.branch_note:
                note += f"; {g.branch_note}"
        return Guard(g.text, kind, g.source, g.expected, status, note, g.decided)

    def _flipped(self, g: GuardRecord, kind: str, env: dict, why: str) -> tuple:
        """``(status, note)`` of a decision that flipped at ``env`` where the graph differs: violated
        inside the ranges (a failure for a decision on sizes), else it bounds them."""
        if self._in_ranges(env):
            if kind == "shape":
                self.failures.append(ProbeFailure(
                    env, g.node, f"the trace decided {g.text} here; at these sizes it differs"))
            return "violated", f"differs at {_env_text(env)}: {why}"
        return "bounds", (f"differs at {_env_text(env)}; the export is valid for "
                          + ", ".join(str(SymRange(r.symbol, r.lo, r.hi, r.step, r.rest))
                                      for r in self.ranges.values() if r.bounded))

    def _name_shape_bounds(self) -> None:
        """A bound set where the replay's shapes stop holding says so, not that the graph differs."""
        for s, sizes in self.shape_bound.items():
            r = self.ranges[s]
            for n in sizes:
                differs = re.compile(rf"the graph differs from the model at {re.escape(s)}={n}(?!\d)")
                if r.lo is not None and n < r.lo:
                    why = differs.sub(f"shapes change otherwise below {s}={r.lo}", r.why)
                    r = self.ranges[s] = SymRange(s, r.lo, r.hi, r.step, r.rest, why)
                elif r.hi is not None and n > r.hi:
                    why = differs.sub(f"shapes change otherwise above {s}={r.hi}", r.why)
                    r = self.ranges[s] = SymRange(s, r.lo, r.hi, r.step, r.rest, why)

    def _result(self, sym: dict, constant: set, ir_guards: list, good_envs: list) -> Analysis:
        ranges, symbols, rep = self.ranges, self.symbols, self.rep
        kept = {s: r for s, r in ranges.items() if r.bounded}
        graph_bounded = any(r == "bad" and not ranges[s].contains(n)
                            for s in symbols for n, r in self.results[s].items())
        same_path = None
        if self.signature is not None:
            signature = self.signature
            traced_base = signature.traced(signature(self.base_env))
            same_path = lambda env: signature.traced(signature(env)) == traced_base  # noqa: E731
        if self.left:
            _REAL_RUN_LATER[-1].append(_LeftChecks(self))
        analysis = Analysis(symbols, self.base_env, self.base.values, sym, constant, self.data_dep, ir_guards,
                            self.failures, [self.base_env] + self.plan.single + self.plan.multi, kept, good_envs,
                            "fake replay" if rep is not None else "probes" if symbols else "",
                            graph_bounded or (rep is None and any(r.lo is not None or r.hi is not None
                                                                  for r in kept.values())),
                            [e for e in self.plan.io_envs if self._in_ranges(e)], same_path)
        analysis.left_checks = len(self.left or ())
        analysis.decided = decided_on_counts(self.gm, [g.node for g in self.guards], self.data_dep)
        analysis.decided = sized_decisions(self.gm, analysis)  # while the graph holds the decisions' nodes
        return analysis

    def check_left(self) -> Optional[str]:
        """The checks left to the caller: None when each passes as taken for granted (no decision
        flipped), else why not."""
        def found():  # what a probe notes besides its answer: a flipped decision, a refusal, an error
            return len(self.equivalent_envs), len(self.refused), len(self.errors), len(self.guard_flips)

        before = found()
        for env in self.left:
            try:
                r = self.probe_now(env, alone=True)
            except ReplayUnavailable as exc:
                return str(exc)
            if r != "good":
                return f"at {_env_text(env)}: " + (r[2] if isinstance(r, tuple) else f"the probe says {r}")
        if found() != before:
            return f"a decision differs at {_env_text(self.left[0])}"
        return None


class _LeftChecks:
    """The checks a :class:`Prober` left to the caller (see :func:`real_run_later`): called, None
    when they pass, else why not; ``runs``: how many there are."""

    def __init__(self, prober: Prober):
        self.prober = prober
        self.runs = len(prober.left)

    def __call__(self) -> Optional[str]:
        return self.prober.check_left()
