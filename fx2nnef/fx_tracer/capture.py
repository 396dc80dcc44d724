"""From a model and example inputs to a checked IR graph: validate, trace, clean, probe, build.

This is the tracer's public entry point, :func:`capture`, asked what to do by one
:class:`CaptureOptions`. It validates names and dynamic axes before any tracing, runs the model
for its reference outputs, traces, runs the graph passes (:data:`TRACE_PASSES`, the one place a
pass over the fx graph is added), probes the dynamic sizes (and traces once more at other sizes
when a decision was baked on a dynamic dim), and builds the IR.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import keyword
import re
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.fx as fx

from ..errors import GuardError, InvalidArgumentError, TraceError, spell
from ..ir import CheckCase, Graph, Value
from ..ir.dims import SymRange
from .branches import merge_at_size, trace_branches
from .passes import (cleanup_slices, complex_to_real, fold_constant_selects, masked_reductions, masked_updates,
                     pieces_as_slices, remove_dead_code, remove_inplace)
from .passes.loops import roll_loops
from .random_draws import random_draws_advice, random_draws_text, watch_random_draws
from .shapes.budget import BUDGET, budgeted, parameter_count
from .shapes.far_traces import same_graph, same_graph_hook, within_trace_reach
from .shapes.graph_runs import differs_at
from .shapes.lattice import FEWEST_SIZES
from .shapes.overlap import Worker, can_overlap
from .shapes.probe import (AT_EXAMPLE, OFF_STEP, RUNS, DeferredCheckFailed, _output_args, analyze, check_reran,
                           example_sizes, inputs_at, real_run_later, rerun_error, run_left_checks)
from .shapes.tables import bound_by_tables
from .stored_values import StoredValues, stored_values
from .to_ir.build import build_ir, to_numpy
from .to_ir.torch_data import TorchData
from .tracing.structures import tensor_version
from .tracing import structures
from .tracing.control_flow import loop_options, run_eagerly
from .tracing.data_dep import BoundReadMismatch, check_number_reads, complex_values_note, number_reads
from .tracing.grouped import check_grouped_outputs
from .tracing.padded import check_padded
from .tracing.scalars import scalars_to_inputs
from .tracing.kept_tensors import apart_from
from .tracing.tracer import TraceSettings, _module_state, _restore_module_state, trace_model

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BRANCHES = (None, "select", "example")  # the values of export's branches=


@dataclasses.dataclass
class Capture:
    graph: Graph
    input_names: list
    example_inputs: list  # torch tensors
    cases: "Callable[[], list]"  # () -> (label, inputs, expected outputs) as numpy, for checks; built on demand
    notes: list
    control_flow: list = dataclasses.field(default_factory=list)  # how cond/scan/while_loop were converted
    runner: Optional["ModelRunner"] = None
    runs: dict = dataclasses.field(default_factory=dict)  # graph_runs, eager_runs: real forward passes of the capture
    random_draws: list = dataclasses.field(default_factory=list)  # RandomDraw: the forward's random draws
    dynamic_axes: dict = dataclasses.field(default_factory=dict)  # input name -> {axis: symbol}, validated
    # a decision on the sizes was exported both ways (merged with select, or traced at one size
    # beside the example's): the asset holds on both sides, where the engine may fail on it
    sizes_both_ways: bool = False
    _reference: Optional[list] = None
    # the real runs left to do (capture's ``rerun_beside``): () -> what they found wrong or None
    # (the graph's run at the example: its error ``(node, message)``; the checks left: why one did
    # not pass), and what raises that as the capture would have (DeferredCheckFailed for a check)
    _rerun: Optional[Callable[[], object]] = None
    _rerun_failed: Optional[Callable[[object], None]] = None
    _worker: Optional[Worker] = None

    def start_rerun(self) -> None:
        """Start the graph's real run at the example that the capture left to do, in a worker thread
        where it may run beside this one (:func:`.overlap.can_overlap`); :meth:`wait_rerun` waits for it."""
        if self._rerun is not None and self._worker is None and can_overlap():
            self._worker = Worker(self._rerun, split_cores=True)
            self._worker.__enter__()

    def wait_rerun(self) -> None:
        """Wait for that run (run it here if it was not started) and raise what it found wrong, as the
        capture did when it ran first; then nothing more to do."""
        job, worker, failed = self._rerun, self._worker, self._rerun_failed
        self._rerun = self._worker = self._rerun_failed = None
        if worker is not None:
            try:
                err = worker.result()
            finally:
                worker.__exit__(None, None, None)
        elif job is not None:
            err = job()
        else:
            return
        if err is not None:
            failed(err)

    @contextlib.contextmanager
    def rerun_beside(self):
        """Within it the graph's real run left to do goes on in a worker thread; it is waited for on
        leaving, whatever happened meanwhile, and its error comes first (it ran first before)."""
        self.start_rerun()
        try:
            yield
        except BaseException:
            self.wait_rerun()
            raise
        self.wait_rerun()

    @property
    def reference(self) -> list:
        """``(label, inputs, expected outputs)`` of each check case; the model runs at the check
        sizes it was not probed at only when this is first read (never without check_io)."""
        if self._reference is None:
            self._reference = self.cases()
        return self._reference

    def check_cases(self, stored: Sequence[Value] = ()):
        """The check cases: each case's inputs with the model's outputs for them. With ``stored``
        (constants whose stored form changes their values, e.g. Q4_0 weights), the model is run
        again with those parameters replaced by the stored values, so that an engine running the
        asset is compared with the model it really holds."""
        if not stored:
            return [CheckCase(label, ins, outs) for label, ins, outs in self.reference]
        overrides = self.runner.overrides(stored)
        return [CheckCase(label, ins, self.runner.run(ins, overrides)) for label, ins, _ in self.reference]

    def distinct_case(self, case: CheckCase, stored: Sequence[Value] = ()) -> Optional[CheckCase]:
        """``case`` at the same sizes on inputs without the ties its sizes made, with the model's
        outputs for them (read with the ``stored`` values as in :meth:`check_cases`): the float
        inputs grown past the example by repeating its data get their copies perturbed
        (:func:`distinct_inputs`). None when no float input was grown (nothing was repeated) or
        the model refuses the new values. Run only to check again a case that failed on positions
        picked among equal items (topk's or sort's indices): torch and tract may pick others."""
        if self.runner is None:
            return None
        inputs = distinct_inputs(case.inputs, self.example_inputs, self.input_names, self.dynamic_axes)
        if inputs is None:
            return None
        try:
            expected = self.runner.run(inputs, self.runner.overrides(stored))
        except Exception:  # noqa: BLE001 - the model refuses these values: no re-check
            return None
        return CheckCase(case.label, inputs, expected)

    def owns_parameter(self, value: Value) -> bool:
        """Whether ``value`` holds a parameter of the model that :meth:`check_cases` can replace."""
        return self.runner is not None and self.runner.owns(value.source)


class ModelRunner:
    """Runs the eager model on flat inputs, optionally with the stored values of some parameters.

    A model holding bfloat16 tensors is run in float32: the asset computes in float32 (tract has
    no bfloat16), and a bfloat16 run rounds at every op, far beyond the default check level. Its
    bfloat16 parameters and buffers read as float32 within the run (:mod:`.stored_values`), the
    examples are given in float32: no float32 copy of the model is made."""

    def __init__(self, model: torch.nn.Module, args: tuple, kwargs: dict, examples: list):
        self.model, self.args, self.kwargs, self.examples = model, args, kwargs, examples
        tensors = list(model.parameters()) + list(model.buffers()) + list(examples)
        self.upcasts = any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in tensors)

    def _parameter(self, path: Optional[str]) -> Optional[torch.nn.Parameter]:
        try:
            return self.model.get_parameter(path) if path else None
        except (AttributeError, TypeError):
            return None

    def owns(self, source) -> bool:
        """Whether ``source`` reads a parameter of the model, reachable by its path."""
        param = self._parameter(source.parameter_path)
        tensor = getattr(source, "_tensor", None)
        return (param is not None and isinstance(source, TorchData) and param.shape == tensor.shape
                and param.data_ptr() == tensor.data_ptr())

    def overrides(self, stored: Sequence[Value] = ()) -> StoredValues:
        """The values the model reads in :meth:`run`: the stored values of the ``stored`` constants
        (decoded when read), and float32 for bfloat16 tensors."""
        for v in stored:
            if self._parameter(v.source.parameter_path) is None:
                raise TraceError(f"constant {v.name} is stored as {v.source.stored_format} but is not a parameter "
                                 "of the model, so the reference outputs cannot use its stored values")
        return stored_values(self.model, stored, upcast_bfloat16=self.upcasts)

    def run(self, inputs: list, overrides: Optional[StoredValues] = None) -> list:
        """Flat numpy outputs of the model on the flat numpy ``inputs``, reading the values of
        ``overrides`` (default: :meth:`overrides` without stored values); the model itself is not
        changed."""
        if overrides is None:
            overrides = self.overrides()
        f32 = torch.float32 if self.upcasts else None
        tensors = [torch.from_numpy(np.array(x)).to(f32 if e.dtype == torch.bfloat16 and f32 else e.dtype)
                   for x, e in zip(inputs, self.examples)]
        a, k = _with_flat(self.args, self.kwargs, tensors)
        with torch.no_grad(), (overrides or contextlib.nullcontext()), module_state_kept(self.model) as apart:
            out = apart(run_eagerly(lambda: self.model(*a, **k)))
        return [to_numpy(t) for _, t in structures.flatten(out, "")]


_TIE_SEED = 20261
_TIE_SCALE = 0.05  # of the example's standard deviation: far above float rounding, near the data


def distinct_inputs(inputs: list, example: list, names: list, dynamic_axes: dict) -> Optional[list]:
    """``inputs`` (numpy, at check sizes) with the items of each float input that lie past the
    example's length on a grown dynamic axis moved by a small random amount (a fixed seed, 5% of
    the example's standard deviation): the copies of the example's data that :func:`~.probe.resize`
    repeated there, which tie with the items they copy, become distinct. The example's own items,
    integer and bool inputs stay as they are. None when no float input was grown."""
    out, changed = [], False
    for k, (x, e, name) in enumerate(zip(inputs, example, names)):
        x = np.asarray(x)
        grown = [(a, e.shape[a]) for a in dynamic_axes.get(name, {}) if x.shape[a] > e.shape[a] > 0]
        if not grown or x.dtype.kind != "f" or not x.size:
            out.append(x)
            continue
        mask = np.zeros(x.shape, dtype=bool)
        for a, n in grown:
            shape = [1] * x.ndim
            shape[a] = x.shape[a]
            mask |= (np.arange(x.shape[a]) >= n).reshape(shape)
        values = e.detach().float().numpy() if isinstance(e, torch.Tensor) else np.asarray(e, dtype=np.float32)
        values = values[np.isfinite(values)]
        std = float(values.std()) if values.size else 0.0
        scale = _TIE_SCALE * (std if std > 0 else max(abs(float(values.mean())) if values.size else 0.0, 1.0))
        noise = np.random.default_rng(_TIE_SEED + k).standard_normal(x.shape) * scale
        out.append(np.where(mask, x.astype(np.float64) + noise, x).astype(x.dtype))
        changed = True
    return out if changed else None


def default_input_names(model, args: tuple, kwargs: dict) -> list:
    """Names of the tensors inside the inputs, from the forward's real signature."""
    try:
        sig = inspect.signature(model.forward)
        bound = sig.bind(*args, **kwargs)
        named = dict(bound.arguments)
        for name, p in sig.parameters.items():
            if p.kind is inspect.Parameter.VAR_POSITIONAL and name in named:
                named[name] = tuple(named[name])
            if p.kind is inspect.Parameter.VAR_KEYWORD and name in named:
                extra = named.pop(name)
                named.update(extra)
    except (TypeError, ValueError):
        named = {f"input_{i}": a for i, a in enumerate(args)}
        named.update(kwargs)
    names = [n for n, _ in structures.flatten(named, "")]
    positional = [n for n, _ in structures.flatten((args, kwargs), "")]
    if len(names) != len(positional):
        return [f"input_{i}" for i in range(len(positional))]
    return names


def _check_names(kind: str, names: list, expected: int) -> list:
    names = list(names)
    if len(names) != expected:
        raise InvalidArgumentError(f"{len(names)} {kind} names given ({names}) but the model has {expected} {kind} tensors")
    bad = [n for n in names if not isinstance(n, str) or not _IDENT.match(n) or keyword.iskeyword(n)]
    if bad:
        raise InvalidArgumentError(f"{kind} names must be identifiers (letters, digits, '_'): {bad}")
    dups = {n for n in names if names.count(n) > 1}
    if dups:
        raise InvalidArgumentError(f"{kind} names must be unique; repeated: {sorted(dups)}")
    return names


def validate_dynamic_axes(dynamic_axes: dict, names: list, tensors: list, output_names: list) -> dict:
    """Check ``{name: {axis: symbol}}`` against the inputs; return it with axes made non-negative."""
    if not isinstance(dynamic_axes, dict):
        raise InvalidArgumentError(f"dynamic_axes must be a dict {{input_name: {{axis: 'SYMBOL'}}}}, got {type(dynamic_axes).__name__}")
    by_name = dict(zip(names, tensors))
    out: dict = {}
    sizes: dict = {}
    for name, axes in dynamic_axes.items():
        if name in output_names and name not in by_name:
            continue  # output dims follow from the inputs
        if name not in by_name:
            raise InvalidArgumentError(f"{spell('dynamic_axes')} names unknown input '{name}'; inputs are {names}")
        if isinstance(axes, (list, tuple)):
            axes = {a: f"{name}_dim{a}" for a in axes}
        if not isinstance(axes, dict):
            raise InvalidArgumentError(f"dynamic_axes['{name}'] must map axis -> symbol name, got {axes!r}")
        rank = by_name[name].dim()
        fixed = {}
        for axis, sym in axes.items():
            if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
                raise InvalidArgumentError(f"dynamic_axes['{name}']: axis {axis!r} is not an axis of a rank-{rank} tensor")
            if not isinstance(sym, str) or not _IDENT.match(sym):
                raise InvalidArgumentError(f"dynamic_axes['{name}'][{axis}]: symbol {sym!r} must be an identifier such as 'S'")
            size = by_name[name].shape[axis]
            if sym in sizes and sizes[sym] != size:
                raise InvalidArgumentError(
                    f"symbol '{sym}' is used for dims of different sizes ({sizes[sym]} and {size} on '{name}' axis {axis}); "
                    "give the example inputs equal sizes there or use two symbols")
            sizes[sym] = size
            fixed[axis % rank] = sym
        out[name] = fixed
    return out


@dataclasses.dataclass(frozen=True)
class CaptureOptions:
    """What a capture is asked, in one value (see :func:`capture`).

    ``dynamic_axes`` as the caller gave them (``{input name: {axis: symbol}}``, checked here);
    ``check_io``: the asset will be checked against the model's outputs, so the model runs
    first on the example (they are the check's reference); ``unroll_while``: the target has no
    loop op, a ``while_loop`` is traced step by step; ``leaf_modules`` (classes) and
    ``leaf_names`` (submodule paths) are kept as one call each; ``max_loop_iterations``,
    ``branches`` and ``scalars_as_inputs`` are :func:`fx2nnef.export`'s; ``rerun_beside``: the
    real runs that only check the graph are left to the caller (:meth:`Capture.rerun_beside`)."""

    input_names: Optional[list] = None
    output_names: Optional[list] = None
    dynamic_axes: Optional[dict] = None
    check_io: bool = True
    unroll_while: bool = False
    leaf_modules: tuple = ()
    leaf_names: tuple = ()
    max_loop_iterations: Optional[int] = None
    branches: Optional[str] = None
    scalars_as_inputs: bool = False
    rerun_beside: bool = False


def capture_options(options: Optional[CaptureOptions] = None, *, target=None, **fields) -> CaptureOptions:
    """``options`` (default: all defaults) with ``fields`` replaced. ``target``, for a caller of
    the capture alone: an inference target whose ``check_io``, ``dynamic_axes`` and profile's
    ``unroll_while`` are taken (the export pipeline gives them as options)."""
    options = options if options is not None else CaptureOptions()
    if target is not None:
        options = dataclasses.replace(options, dynamic_axes=target.dynamic_axes,
                                      check_io=bool(getattr(target, "check_io", True)),
                                      unroll_while=target.profile.unroll_while)
    return dataclasses.replace(options, **fields)


@budgeted
def capture(model: torch.nn.Module, args, kwargs: dict, options: Optional[CaptureOptions] = None,
            **fields) -> Capture:
    """Validate, trace, clean, probe and build the IR of ``model(*args, **kwargs)``.

    ``options`` (:class:`CaptureOptions`), with ``fields`` replacing some of them by name (see
    :func:`capture_options`, which also takes ``target=``). ``branches``: None merges both
    outcomes of a Python decision on sizes that bounds the range, ``"select"`` also those of
    decisions on tensor data (see :mod:`.branches`), ``"example"`` none. ``rerun_beside``: the
    real runs that only check the graph are left to the caller, who starts and waits for them
    (:meth:`Capture.rerun_beside`) beside its own work: without dynamic sizes, the graph's run at
    the example; with them, the check's runs at sizes where every decision is the example's,
    which the analysis took for passed (see :func:`.probe.real_run_later`). Where one does not
    pass, waiting for it raises :class:`.probe.DeferredCheckFailed` (so may the capture, when it
    fails or when a forward changed the model's tensors in place, where it runs them at once):
    the caller then captures again without ``rerun_beside``."""
    opts = capture_options(options, **fields)
    session = _Session.start(model, args, kwargs, opts)
    session.run_reference()
    gm, analysis, trace = session.trace()
    rerun, rerun_failed, left_runs = session.runs_left(gm, analysis, trace)
    try:
        graph, cases, out_names = session.build(gm, analysis, trace)
    except Exception:
        if rerun is not None:  # that run came first before: its error first
            err = rerun()
            if err is not None:
                rerun_failed(err)
        raise
    runs = {"graph_runs": RUNS.graph + bool(analysis.rerun) + left_runs, "eager_runs": RUNS.eager + left_runs}
    if RUNS.graph_light:
        runs["light_runs"] = RUNS.graph_light  # the graph at the example, input data on meta tensors
    if RUNS.fake:
        runs["fake_runs"] = RUNS.fake
    if RUNS.shapes:
        runs["shapes"] = RUNS.shapes  # seconds of the trace spent on symbolic shapes
    control_flow = list(trace.control_flow)
    return Capture(graph, session.names, session.tensors, cases, control_flow + session.notes, control_flow,
                   session.runner, runs, random_draws=list(session.draws), dynamic_axes=session.dyn,
                   sizes_both_ways=_sizes_both_ways(graph, trace), _rerun=rerun, _rerun_failed=rerun_failed)


def _sizes_both_ways(graph: Graph, trace) -> bool:
    """Whether a decision on the sizes was exported both ways: merged with select, or the forward
    traced at one size beside the example's (see :func:`.branches.merge_at_size`)."""
    return trace.at_size is not None or any(g.kind == "shape" and g.status == "merged" for g in graph.guards)


@dataclasses.dataclass
class _Session:
    """One capture's state, stage by stage: the checked inputs and names, then the model's
    reference outputs and the dynamic axes, then what the trace left (its random draws, the
    checks left to run)."""

    model: torch.nn.Module  # the model traced (its scalar arguments made inputs)
    named_model: torch.nn.Module  # the caller's, whose forward names the inputs
    args: tuple
    kwargs: dict
    opts: CaptureOptions
    tensors: list
    names: list
    eager_first: bool = False
    out_names: Optional[list] = None
    dyn: dict = dataclasses.field(default_factory=dict)
    ref: Optional[Callable] = None
    example_outputs: Optional[list] = None
    notes: list = dataclasses.field(default_factory=list)
    draws: list = dataclasses.field(default_factory=list)
    left: Optional[list] = None
    runner: Optional["ModelRunner"] = None
    job: Optional["_Tracing"] = None  # what every trace of the capture shares

    @classmethod
    def start(cls, model, args, kwargs, opts: CaptureOptions) -> "_Session":
        """The arguments checked, the scalars made inputs if asked, the inputs named."""
        if opts.branches not in BRANCHES:
            raise InvalidArgumentError(f"branches must be None, 'select' or 'example', got {opts.branches!r}")
        if not isinstance(model, torch.nn.Module):
            raise InvalidArgumentError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
            args = (args,)
        args = tuple(args)
        if not isinstance(kwargs, dict):
            raise InvalidArgumentError("kwargs must be a dict")
        named_model = model
        if opts.scalars_as_inputs:
            model, args, kwargs = scalars_to_inputs(model, args, kwargs)
        flat = structures.flatten((args, kwargs), "")
        if not flat:
            raise InvalidArgumentError("the example inputs contain no tensor")
        tensors = [t for _, t in flat]
        RUNS.reset()
        BUDGET.begin(parameter_count(model))
        names = (_check_names("input", opts.input_names, len(flat)) if opts.input_names
                 else default_input_names(named_model, args, kwargs))
        return cls(model, named_model, args, kwargs, opts, tensors, names)

    def run_reference(self) -> None:
        """The model's outputs at the example and the output names, the dynamic axes checked, and
        the model's outputs at other sizes on demand (``ref``).

        The model's outputs at the example are the reference of check_io. Without check_io they
        are not run first: the trace runs the forward and tells the outputs' names, a static
        export compares nothing with them, and a dynamic one compares the graph with the model at
        the example only when a probe finds them apart (see analyze's ``defer_base``). Output
        names that dynamic_axes may use are known from the model's run only."""
        model, args, kwargs, tensors, opts = self.model, self.args, self.kwargs, self.tensors, self.opts
        checks, output_names = opts.check_io, opts.output_names
        asked_axes = opts.dynamic_axes or {}
        self.eager_first = checks or (not output_names and isinstance(asked_axes, dict)
                                      and any(k not in self.names for k in asked_axes))
        ref_flat = None
        if self.eager_first:
            ref_flat = _eager_outputs(model, args, kwargs, tensors)
            self.out_names = _output_names(output_names, [k for k, _ in ref_flat])
        elif output_names:
            # the count is checked after the trace
            self.out_names = _check_names("output", output_names, len(output_names))
        self.dyn = validate_dynamic_axes(asked_axes, self.names, tensors, self.out_names or [])
        self.job = _Tracing(model, self.names, self.out_names, self.dyn, tuple(opts.leaf_modules), opts.leaf_names,
                            opts.branches)
        base_env = example_sizes(tensors, self.names, self.dyn)
        # the model's outputs at the probed sizes are kept for check_io only
        if self.dyn:
            known = (base_env, [t for _, t in ref_flat]) if self.eager_first else None
            self.ref = _reference(self.job, args, kwargs, tensors, known, keep=checks, defer_base=not self.eager_first)
        self.example_outputs = [t for _, t in ref_flat] if checks else None

    def trace(self) -> tuple:
        """``(gm, analysis, trace)``: the forward traced, cleaned and probed. The checks the
        analysis took for passed are left in ``left`` when asked to run beside the caller."""
        opts = self.opts
        later = real_run_later() if opts.rerun_beside and can_overlap() else contextlib.nullcontext()
        versions = _tensor_versions(self.model)
        failed = None
        with loop_options(opts.max_loop_iterations, unroll_while=opts.unroll_while), \
                watch_random_draws() as draws, later as left:
            self.draws = draws
            try:
                result = _trace_merging_sizes(self.job, self.args, self.kwargs, self.notes, self.ref)
            except Exception as error:  # noqa: BLE001 - re-raised below
                failed = error
        self.left = left
        if left and (failed is not None or versions is None or _tensor_versions(self.model) != versions):
            # the checks the analysis left run now: before an error (which they may change), and before
            # the model's runs may go on beside the write of tensors it changes in place
            run_left_checks(left)
        if failed is not None:
            self.raise_failed(failed)
        return result

    def raise_failed(self, failed: Exception):
        """Raise what made the trace fail: the model's own error on the example first, as when it
        ran before the trace; a model that draws again on each run is named."""
        if not self.eager_first:
            _eager_outputs(self.model, self.args, self.kwargs, self.tensors, self.opts.output_names)
        if not self.draws or type(failed) not in (TraceError, GuardError):
            raise failed
        # the graph fails to reproduce a model that draws again on each run: say so
        raise type(failed)(f"{failed}\n{random_draws_advice(self.draws)}") from failed

    def runs_left(self, gm, analysis, trace) -> tuple:
        """``(rerun, rerun_failed, runs)``: the real runs left to the caller (see
        :class:`Capture`'s ``_rerun``), or Nones, and how many model runs they hold."""
        left, self.left = self.left, None  # held by the runs left only
        if analysis.rerun:  # the IR's values came from a light run: the graph's real run is left to do
            def rerun():
                return rerun_error(gm, trace.example_inputs)

            def rerun_failed(err: tuple):
                try:
                    check_reran(err)
                except RuntimeError as error:
                    self.raise_failed(error)
            return rerun, rerun_failed, 0
        if not left:
            return None, None, 0
        jobs = list(left)  # the analysis took its check for passed: it is left to do

        def rerun_checks():
            # the model's draws are watched as within the capture: a model that draws (its
            # run here may be the capture's only one) is exported again with them noted
            with watch_random_draws() as drawn:
                for job in jobs:
                    why = job()
                    if why is not None:
                        return why
            return f"the model draws random numbers ({random_draws_text(drawn)})" if drawn else None

        def checks_failed(why: str):
            raise DeferredCheckFailed(why)
        return rerun_checks, checks_failed, sum(job.runs for job in jobs)

    def build(self, gm, analysis, trace) -> tuple:
        """``(graph, cases, output names)``: the graph's last passes, its IR, and the check cases
        on demand."""
        model, args, kwargs, tensors, opts = self.model, self.args, self.kwargs, self.tensors, self.opts
        if not self.eager_first:
            traced_outputs = len(_output_args(gm))
            if not traced_outputs or (opts.output_names and len(opts.output_names) != traced_outputs):
                # what is wrong, as the model's run before the trace said it
                ran = _eager_outputs(model, args, kwargs, tensors, opts.output_names)
                raise TraceError(f"the traced graph has {traced_outputs} outputs, the model {len(ran)}")
            if self.out_names is None:
                self.out_names = _output_names(None, trace.output_names)
        if self.draws:
            self.notes.append(f"the forward draws random numbers ({random_draws_text(self.draws)}): a draw that "
                              "reaches the outputs is kept in the graph as the example's values, which the asset "
                              "gives on every run")
        fold_constant_selects(gm, analysis.constant, analysis.values, analysis.sym)
        remove_dead_code(gm)
        if self.dyn:
            bound_by_tables(gm, analysis, self._accepts, self.notes)
        self.runner = ModelRunner(model, args, kwargs, tensors)
        graph = build_ir(gm, analysis, self.names, self.out_names, upcast_bfloat16=self.runner.upcasts)
        if self.runner.upcasts:
            self.notes.append("bfloat16 model: written and checked in float32 (the reference reads its bfloat16 "
                              "tensors as float32)")
        if analysis.shapes_from.startswith("probes ("):
            self.notes.append("dynamic shapes were fitted from probe runs: " + analysis.shapes_from[len("probes ("):-1])
        return graph, functools.partial(self.cases, analysis), self.out_names

    def _accepts(self, env) -> bool:
        """Whether the model runs at the sizes ``env``."""
        try:
            self.ref.outputs_at(env)
        except Exception:  # noqa: BLE001 - a refusal is the answer
            return False
        return True

    def cases(self, analysis) -> list:
        """``(label, inputs, expected outputs)`` at the example and at the check sizes."""
        model, args, kwargs, tensors = self.model, self.args, self.kwargs, self.tensors
        expected = self.example_outputs
        if expected is None:  # not kept: run the model again
            expected = _flat(_run_model(model, args, kwargs, tensors))
        out = [("example", [to_numpy(t) for t in tensors], [to_numpy(t) for t in expected])]
        for env in _check_envs(analysis) if analysis.symbols else []:
            case = _case(self.ref, self.names, tensors, self.dyn, env)
            if case is not None:
                out.append(case)
        if self.runner.upcasts:  # expected outputs of the float32 run
            out = [(label, ins, self.runner.run(ins)) for label, ins, _ in out]
        return out


def _tensor_versions(model: torch.nn.Module) -> Optional[list]:
    """The version counter of each parameter and buffer: it moves when a forward changes one in
    place. None when one has none (a tensor made in inference mode): changes are then unseen."""
    versions = [tensor_version(t) for t in itertools.chain(model.parameters(), model.buffers())]
    return None if None in versions else versions


def _eager_outputs(model, args, kwargs, tensors: list, output_names: Optional[list] = None) -> list:
    """The model's flattened outputs on (copies of) the example inputs; the model's own error, an
    output-less model or ``output_names`` of another count raise here."""
    ref_flat = structures.flatten(_run_model(model, args, kwargs, [t.clone() for t in tensors]), "")
    if not ref_flat:
        raise InvalidArgumentError("the model returned no tensor")
    if output_names:
        _check_names("output", output_names, len(ref_flat))
    return ref_flat


def _output_names(output_names: Optional[list], keys: list) -> list:
    """The outputs' names: ``output_names`` checked against the count of ``keys``, else the keys of
    the flattened outputs (:func:`structures.flatten`) made identifiers."""
    return _check_names("output", output_names, len(keys)) if output_names else [
        _ident(k or "output") for k in keys]


def _ident(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if _IDENT.match(out) else f"output_{out}"


def _with_flat(args, kwargs, flat_inputs: list):
    """``(args, kwargs)`` with their tensors replaced, in order, by ``flat_inputs``."""
    it = iter(flat_inputs)
    return structures.rebuild((args, kwargs), lambda _k, _t: next(it))


@contextlib.contextmanager
def module_state_kept(model: torch.nn.Module):
    """Undo, after an eager run, what the forward assigned to its modules: Swin narrows its window
    (``self.window_size = min(input_resolution)``) on a small input for every later run, so each
    probe of the model would depend on the sizes probed before it, and the user's model would
    leave the export changed."""
    saved = _module_state(model)
    try:
        # a run's outputs that live in a tensor it wrote in place, as the run left them
        yield lambda out: apart_from(out, saved[-1])
    finally:
        _restore_module_state(saved)


def _run_model(model, args, kwargs, flat_inputs: list):
    """The eager model's result on ``(args, kwargs)`` with copies of ``flat_inputs`` as its tensors
    (a model may update its inputs in place; the inputs recorded for checks must stay as given)."""
    a, k = _with_flat(args, kwargs, [t.clone() for t in flat_inputs])
    RUNS.eager += 1
    BUDGET.charge("model")
    # a forward that changes its modules' attributes (Swin narrows its window on a small input,
    # for every later run) would make each probe depend on the sizes probed before it
    with torch.no_grad(), module_state_kept(model) as apart:
        return apart(run_eagerly(lambda: model(*a, **k)))


def _reference(job: "_Tracing", args, kwargs, example, known: Optional[tuple] = None, keep: bool = True,
               defer_base: bool = False):
    """``env -> flat eager outputs`` of the model at the sizes ``env`` (on ``inputs`` when given).

    With ``keep``, the outputs at each ``env`` are kept (a size checked by the probes is reused
    by check_io); ``known`` is ``(env, outputs)`` already computed. ``defer_base``: the analysis
    compares the graph with the model at the example only when a probe finds something wrong
    (see :func:`.probe.analyze`)."""
    model, names, dyn = job.model, job.names, job.dyn
    cache = {} if known is None else {tuple(sorted(known[0].items())): known[1]}
    edge_envs: set = set()  # sizes where the model took the inputs grown by their last item only

    def outputs_at(env):
        """The model's flat outputs at ``env`` (not kept)."""
        key = tuple(sorted(env.items()))
        try:
            return _flat(_run_model(model, args, kwargs, inputs_at(example, names, dyn, env, key in edge_envs)))
        except Exception:
            # inputs grown by repeating them whole may hold what the model takes once (a
            # multimodal LM's image tokens, which must match its image features): grown by
            # their last item instead, they keep it
            if key in edge_envs or not _grows(example, names, dyn, env):
                raise
            out = _flat(_run_model(model, args, kwargs, inputs_at(example, names, dyn, env, True)))
            edge_envs.add(key)
            return out

    pending: dict = {}  # outputs run by inputs_for, for the run(env) that follows it

    def run(env, inputs=None):
        key = tuple(sorted(env.items()))
        if inputs is None and key in cache:
            return cache[key]
        if inputs is None and key in pending:
            flat = pending.pop(key)
            if keep:
                cache[key] = flat
            return flat
        flat = _flat(_run_model(model, args, kwargs, inputs)) if inputs is not None else outputs_at(env)
        if inputs is None and keep:
            cache[key] = flat
        return flat

    def inputs_for(env):
        """The inputs the model is run on at ``env`` (the probes and checks run the graph on them)."""
        key = tuple(sorted(env.items()))
        if key not in cache and key not in pending and key not in edge_envs and _grows(example, names, dyn, env):
            try:
                pending.clear()  # one at a time: an LLM's logits are not held for long
                pending[key] = outputs_at(env)
            except Exception:  # noqa: BLE001 - the model refuses both: the caller finds out
                pass
        return inputs_at(example, names, dyn, env, key in edge_envs)

    def knows(env) -> bool:
        """Whether the model's outputs at ``env`` are at hand (no run needed)."""
        return tuple(sorted(env.items())) in cache

    run.inputs_for = inputs_for
    run.outputs_at = outputs_at  # not kept
    run.knows = knows
    run.defer_base = defer_base
    return run


def _flat(out) -> list:
    return [t for _, t in structures.flatten(out, "")]


def _grows(example, names, dyn, env) -> bool:
    """Whether some dynamic axis is longer at ``env`` than in the example."""
    by_name = dict(zip(names, example))
    return any(env[sym] > by_name[n].shape[axis] for n, axes in dyn.items() for axis, sym in axes.items())


@dataclasses.dataclass(frozen=True)
class _Tracing:
    """What every trace of one capture shares: the model, the names of its flat inputs and outputs,
    the dynamic axes, the leaf modules (kept as one call each) and ``branches=``. The inputs of a
    trace (the example's, or inputs at other sizes) go beside it."""

    model: torch.nn.Module
    names: list
    out_names: Optional[list]
    dyn: dict
    leaf_types: tuple
    leaf_names: tuple
    branches: Optional[str] = None
    # a trace at other sizes, before its analysis: raises when it cannot hold at the example (see
    # _at_example_first); None for the traces at the example
    precheck: Optional[Callable] = None


def _trace_once(job: _Tracing, args, kwargs, ref=None, roll=False, size_sites=frozenset(), unify=True,
                at_size=None):
    """The trace of ``model(*args, **kwargs)`` and its analysis. ``at_size``: ``(symbol, size,
    sites)``, the forward also traced where the symbol is that size and merged (see
    :func:`.branches.merge_at_size`)."""
    model, names, dyn = job.model, job.names, job.dyn
    trace = _traced(job, args, kwargs, roll, size_sites, unify)
    if at_size is not None:
        sym, size, sites = at_size
        base = example_sizes(trace.example_inputs, names, dyn)
        a1, k1 = _with_flat(args, kwargs, inputs_at(trace.example_inputs, names, dyn, {**base, sym: size}))
        point = _traced(job, a1, k1, roll, size_sites, unify)
        trace = merge_at_size(trace, point, dyn, sym, size, sites)
    if ref is None and dyn:
        ref = _reference(job, args, kwargs, trace.example_inputs)
    # values no output needs are not analysed: their shapes at other sizes, and the replay's and
    # probes' time on them, are nothing to the export (an unused pooling whose ceil_mode
    # rounding has no symbolic form refused the whole model); the nodes the tracer's decisions
    # read stay, with what they are computed from
    _pruned(trace)
    if job.precheck is not None:
        job.precheck(trace)

    def same_at(env):  # a decision far above the example the graph may not see (shapes/far_traces.py)
        if at_size is not None:
            return False
        a2, k2 = _with_flat(args, kwargs, inputs_at(trace.example_inputs, names, dyn, env))
        with BUDGET.step(f"the trace at {', '.join(f'{k}={v}' for k, v in env.items())}, where a decision on "
                         "the sizes changes, compared with the example's"):
            other = _pruned(_traced(job, a2, k2, roll, size_sites, unify))
        return same_graph(trace.gm, other.gm)

    with BUDGET.step(f"{BUDGET.doing}, its shapes replayed and probed at other sizes"), same_graph_hook(same_at):
        analysis = analyze(trace.gm, trace.example_inputs, names, dyn, trace.guards, ref)
    return trace, analysis


def _pruned(trace):
    """``trace`` without what no output needs (see :func:`drop_unread_numbers`) and without the
    traced data of its nodes."""
    drop_unread_numbers(trace.gm, trace.guards)
    remove_dead_code(trace.gm, keep=_decision_nodes(trace.guards))
    _drop_traced_data(trace.gm)
    return trace


def drop_unread_numbers(gm: fx.GraphModule, guards: list) -> None:
    """Drop from ``guards`` the numbers read for a call whose result no output needs and no other
    decision reads (an unused ``as_strided`` of sizes computed from S): they decide nothing in the
    graph, and kept they bounded the range to the sizes where each reads the example's number. A
    reader that a pass replaced keeps its guards."""
    if all(g.reader is None for g in guards):
        return
    present = set(gm.graph.nodes)
    live: set = set()
    todo = [n for n in gm.graph.nodes if n.op == "output"]
    todo += list(_decision_nodes([g for g in guards if g.reader is None]))
    while todo:
        n = todo.pop()
        if n not in live:
            live.add(n)
            todo.extend(n.all_input_nodes)
    guards[:] = [g for g in guards if g.reader is None or g.reader not in present or g.reader in live]


def _decision_nodes(guards: list) -> set:
    """The nodes the tracer's decisions read: each guard's value, and a range's bounds."""
    keep = {g.node for g in guards}
    for g in guards:
        if g.counts is not None:
            keep.update(b for b in g.counts[0] if isinstance(b, fx.Node))
    return keep


def _traced(job: _Tracing, args, kwargs, roll, size_sites, unify):
    """The forward traced and cleaned (each path of the decisions forced, merged)."""
    model, names, out_names, leaf_types, leaf_names = job.model, job.names, job.out_names, job.leaf_types, job.leaf_names
    branches = job.branches
    forcing = branches == "select" or bool(size_sites)

    def one_path(forced, bind=True):
        BUDGET.charge("trace")
        settings = TraceSettings(out_names, leaf_types, leaf_names, forced, roll_loops=roll, size_sites=size_sites,
                                 data_decisions=branches == "select", unify_sizes=unify, bind_reads=bind)
        trace = trace_model(model, args, kwargs, names, settings)
        if roll:
            lines = None if roll is True else roll
            trace.control_flow.extend(roll_loops(trace.gm, trace.loops, trace.guards, lines))
        for graph_pass in TRACE_PASSES:
            graph_pass(trace)
        return trace

    try:
        return _checked_reads(one_path, forcing, True)
    except BoundReadMismatch:  # a constant bound equal to a number read: traced without taking bounds so
        return _checked_reads(one_path, forcing, False)


def _checked_reads(one_path, forcing: bool, bind: bool):
    """The trace (each path of the decisions forced, merged when ``forcing``), with the numbers it
    read from data checked by tracing again with them changed."""
    with number_reads() as reads:
        trace = trace_branches(lambda forced: one_path(forced, bind)) if forcing else one_path(None, bind)
    read = _first_reads(reads)
    if read and forcing:  # the example's path alone is the baseline
        base = one_path({}, bind)
        check_number_reads(lambda: one_path({}, bind), base.gm, read, base.bound_reads)
    elif read:
        check_number_reads(lambda: one_path(None, bind), trace.gm, read, trace.bound_reads)
    return trace


def _complex_as_real(trace) -> None:
    """Complex values as pairs of real ones, with a note of what was complex."""
    note = complex_values_note(trace.gm)
    if complex_to_real(trace.gm) and note:
        trace.control_flow.append(note)


# The passes over every traced fx graph (``TraceResult`` in, changed in place), in the order they
# run: the one place a pass is added. A check that refuses what no pass could clean comes last.
TRACE_PASSES = (
    lambda trace: pieces_as_slices(trace.gm, trace.guards),
    lambda trace: remove_inplace(trace.gm),
    lambda trace: masked_updates(trace.gm),
    lambda trace: masked_reductions(trace.gm),
    lambda trace: cleanup_slices(trace.gm),
    _complex_as_real,
    lambda trace: check_padded(trace.gm),
    lambda trace: check_grouped_outputs(trace.gm),
)


def _drop_traced_data(gm: fx.GraphModule) -> None:
    """Replace the tensors the tracer kept in ``meta["value"]`` (every node's value at the
    example) by data-less stand-ins: the passes that read them are done, and the analysis runs
    the graph again. An LLM's logits alone would otherwise be held once more for the rest of
    the export."""
    for n in gm.graph.nodes:
        if "value" in n.meta:
            n.meta["value"] = structures.data_less(n.meta["value"])
    structures.release_free_memory()


def _first_reads(reads) -> list:
    """The numbers read from tensor data by the first trace of a :func:`number_reads` scope."""
    return next(iter(reads.by_tracer.values()), [])


def _wider(a: dict, b: dict) -> bool:
    """True when the ranges ``a`` (symbol -> SymRange) hold every size of ``b`` and more. A range
    on a step is read by the sizes it holds: ``S >= 1, S % 2 == 0`` starts at 2, and ``S >= 2``
    holds all of it and more. Two upper bounds both set where a decision changes far beyond the
    sizes checked are no reason to refuse: neither was run there (a UNet's count of items
    ``> 2**31`` ends B at 438620 in one graph, at 524288 in the other)."""
    better = False
    for s in set(a) | set(b):
        ra, rb = a.get(s), b.get(s)
        if rb is None and ra is not None:
            return False
        if ra is None and rb is not None:
            better = True
            continue
        if ra is None:
            continue
        if ra.step > rb.step or rb.step % ra.step or (rb.rest - ra.rest) % ra.step:
            return False  # a step that does not hold every size of b's
        (lo_a, hi_a), (lo_b, hi_b) = _held(ra), _held(rb)
        far = _FAR in (ra.why or "") and _FAR in (rb.why or "") and hi_a is not None and hi_b is not None
        if lo_a > lo_b or (hi_a is not None and (hi_b is None or hi_a < hi_b) and not far):
            return False
        if ra.step < rb.step or lo_a < lo_b or (hi_b is not None and (hi_a is None or hi_a > hi_b)):
            better = True
    return better


def _held(r) -> tuple:
    """``(first, last)``: the smallest and largest sizes the SymRange ``r`` holds (last None:
    unbounded)."""
    lo = 1 if r.lo is None else max(r.lo, 1)
    first = lo + (r.rest - lo) % r.step
    last = None if r.hi is None else r.hi - (r.hi - r.rest) % r.step
    return first, last


def _trace_rolling(job: _Tracing, args, kwargs, ref=None, size_sites=frozenset(), unify=True, at_size=None):
    """A trace and its analysis; when a Python loop over a dynamic size bounds the range, the trace
    again with such loops rolled into scans, kept if that is valid for more sizes."""
    trace, analysis = _trace_once(job, args, kwargs, ref, size_sites=size_sites, unify=unify, at_size=at_size)
    loop_guards = _loop_guards(analysis)
    if loop_guards:
        # a Python loop over a dynamic size may bound the range: trace again rolling such loops into
        # scans (those that bound it, when some do: a loop over heads around them stays unrolled)
        bounding = [g for g in loop_guards if g.status in ("bounds", "violated")]
        roll = {(g.source.file, g.source.line) for g in bounding} if bounding else True
        try:
            with BUDGET.step("the trace with the Python loops over dynamic sizes rolled into scans"):
                rolled = _trace_once(job, args, kwargs, ref, roll=roll, size_sites=size_sites, unify=unify,
                                     at_size=at_size)
        except Exception:  # noqa: BLE001 - a loop that cannot be rolled: the unrolled trace reports it
            rolled = None
        if rolled is not None and not rolled[1].failures and any(rec.rolled for rec in rolled[0].loops) and (
                analysis.failures or _wider(rolled[1].ranges, analysis.ranges)):
            trace, analysis = rolled
    return trace, analysis


def _trace_merging_sizes(job: _Tracing, args, kwargs, notes, ref):
    """:func:`_trace_and_probe`, and when a Python ``if`` on the dynamic sizes bounds the range
    (``if x.shape[1] < 7:`` traced at S=10 holds for S >= 7 only), the same with both outcomes of
    that decision exported: the forward is traced again at the example's sizes with the decision
    forced the other way, the two traces share what they have in common, and their outputs are
    merged with select on the same comparison made of the sizes (see :mod:`.branches`). That graph
    is kept when its analysis finds it valid for more sizes (the probes compare it with the model
    on both sides of the decision); otherwise the first stands, with its bounds or its error."""
    dyn, branches = job.dyn, job.branches
    first_notes: list = []
    error = None
    try:
        result = _trace_and_probe(job, args, kwargs, first_notes, ref)
        analysis = result[1]
    except GuardError as exc:
        result, error, analysis = None, exc, getattr(exc, "analysis", None)
    sites = _size_branch_sites(analysis) if dyn and analysis is not None and branches != "example" else frozenset()
    best, unify = None, True
    best_sites, best_unify = frozenset(), True
    for _ in range(_SIZE_MERGE_ROUNDS):
        if not sites:
            break
        merged_notes: list = []
        try:
            lines = ", ".join(sorted(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n in sites))
            with BUDGET.step(f"the trace with the decisions on sizes at {lines} exported both ways"):
                merged = _trace_and_probe(_past_bounds_first(job, ref, analysis), args, kwargs, merged_notes, ref,
                                          size_sites=sites, unify=unify)
        except _NotPastBounds:  # as a merged graph that widens nothing (below), found before its analysis
            if unify:
                unify = False
                continue
            break
        except Exception:  # noqa: BLE001 - the best trace so far stands, with its bounds or error
            break
        met, unmerged = _site_outcomes(merged[2], sites)
        if not met:  # no decision met at those lines: nothing to merge
            break
        if unmerged:
            # a decision whose outcomes give other shapes (`max(1, S // 2)` items) stays as it is;
            # the others are tried again without it
            sites = sites - unmerged
            continue
        if merged[1].failures or not ((error is not None and best is None) or _wider(merged[1].ranges, analysis.ranges)):
            if unify:
                # equal comparisons taken as one decision may be two (B > 3 and S > 3 at B = S = 5):
                # once more with each its own decision
                unify = False
                continue
            break
        best, analysis = (merged, merged_notes), merged[1]
        best_sites, best_unify = sites, unify
        # another `if` on sizes met on the way may bound what is left (an elif): merged too
        more = _size_branch_sites(analysis) - sites
        sites = sites | more if more else frozenset()
    at_size = _one_size_path(analysis) if dyn and analysis is not None and branches != "example" else None
    if at_size is not None:
        # the graph differs from the model at S=1 only (a one-token step from a cached state):
        # the forward traced at S=1 too, selected there
        at_notes: list = []
        try:
            merged = _trace_and_probe(job, args, kwargs, at_notes, ref, size_sites=best_sites, unify=best_unify,
                                      at_size=at_size)
        except Exception:  # noqa: BLE001 - the best trace so far stands, with its bounds or error
            merged = None
        if merged is not None and not merged[1].failures and (
                (error is not None and best is None) or _wider(merged[1].ranges, analysis.ranges)):
            best = (merged, at_notes)
    if best is not None:
        notes.extend(best[1])
        return best[0]
    if error is not None:
        raise error
    notes.extend(first_notes)
    return result


def _one_size_path(analysis):
    """``(symbol, 1, sites)`` when the graph differs from the model where that symbol is 1 only,
    the other sizes as in the example (its range starts at 2, or the probes failed there), with
    ``sites`` the lines of the decisions on sizes that differ there; else None."""
    base = analysis.base_env
    for s, v in base.items():
        if v == 1:
            continue
        r = analysis.ranges.get(s)
        bounded = r is not None and r.lo == 2 and r.step == 1 and \
            f"the graph differs from the model at {s}=1" in (r.why or "")
        failing = any(f.env.get(s) == 1 and all(f.env.get(k) == n for k, n in base.items() if k != s)
                      for f in analysis.failures)
        if bounded or failing:
            return s, 1, _size_branch_sites(analysis)
    return None


_SIZE_MERGE_ROUNDS = 3  # traces with decisions on sizes merged, each adding those that still bound the range


def _size_branch_sites(analysis) -> frozenset:
    """The source lines of the Python ``if`` on sizes that bound the range or break the graph
    elsewhere (``bool()`` of a size comparison whose other outcome differs), as ``(file, line)``."""
    return frozenset((g.source.file, g.source.line) for g in analysis.guards
                     if g.kind == "shape" and g.status in ("bounds", "violated") and g.what.startswith("bool(")
                     and g.source is not None and isinstance(g.expected, bool))


def _site_outcomes(trace, sites: frozenset) -> tuple:
    """``(met, unmerged)``: the ``sites`` where ``trace`` numbered a decision, and those where one
    of them could not be exported both ways."""
    at = [g for g in trace.guards if g.decision is not None and g.source is not None
          and (g.source.file, g.source.line) in sites]
    return ({(g.source.file, g.source.line) for g in at},
            frozenset((g.source.file, g.source.line) for g in at if not g.merged))


def _trace_and_probe(job: _Tracing, args, kwargs, notes, ref, size_sites=frozenset(), unify=True, at_size=None):
    """The graph, its analysis and trace, for the sizes the model allows: traced at the example,
    or again at larger sizes when a decision baked there holds at the example only."""
    names, dyn = job.names, job.dyn
    trace, analysis = _trace_rolling(job, args, kwargs, ref, size_sites, unify, at_size)
    # a step the decisions imply (pad only when not a multiple) bounds too: a trace where the other
    # branch is taken may hold on a finer step, or on every size
    bounded = any(r.lo is not None or r.hi is not None or OFF_STEP in (r.why or "") for r in analysis.ranges.values())
    if not analysis.failures and not bounded:
        return trace.gm, analysis, trace
    if not analysis.failures and not analysis.graph_bounded and not _near_far_bounds(analysis):
        # only the model's own refusals bound the range: a trace at other sizes cannot widen it
        _refuse_single_sizes(analysis)
        _note_ranges(analysis, notes)
        return trace.gm, analysis, trace
    # A decision was baked on a dynamic size: trace again at larger sizes and keep that
    # trace if it reproduces the model at the example sizes and is valid for more sizes.
    first_failures = analysis.failures
    retraced, bigger = None, None
    for bigger, by_replay in _retrace_sizes(analysis):
        # where the replay says the trace would take the example's decisions at those sizes, it would
        # give this graph again: nothing to gain (two more analyses of a large model). Past a size
        # where the graph stops reproducing the model with no decision changing, something the
        # replay does not see was baked (a chunk axis of 1): the trace there may differ
        if by_replay and analysis.same_path is not None and analysis.same_path(bigger):
            continue
        try:
            a2, k2 = _with_flat(args, kwargs, inputs_at(trace.example_inputs, names, dyn, bigger))
            with BUDGET.step(f"the trace again at larger sizes ({', '.join(f'{k}={v}' for k, v in bigger.items())}) "
                             "since a decision on the sizes bounds the range"):
                trace2, analysis2 = _trace_rolling(_at_example_first(job, trace, ref, analysis.base_env), a2, k2,
                                                   size_sites=size_sites, unify=unify, at_size=at_size)
            if not analysis2.failures:
                # the graph must also reproduce the example sizes: analyze at the user's inputs
                analysis_back = analyze(trace2.gm, trace.example_inputs, names, dyn, trace2.guards, ref,
                                        hint_env=bigger, traced_at_example=False)
                _join_far_bounds(analysis_back, analysis2)
                if not analysis_back.failures and (first_failures or _wider(analysis_back.ranges, analysis.ranges)):
                    retraced = (trace2, analysis_back)
                    break
        except Exception:  # noqa: BLE001 - fall through to the original report
            continue
    if retraced is None:
        if not first_failures:
            _refuse_single_sizes(analysis)
            _note_ranges(analysis, notes)
            return trace.gm, analysis, trace
        at_example = [f for f in first_failures if f.env == analysis.base_env and f.node is None
                      and f.message.endswith(AT_EXAMPLE)]
        if at_example and len(at_example) == len(first_failures):
            # no size decision: the graph computes otherwise than the model on the very inputs traced
            raise TraceError(
                f"the traced graph does not reproduce the model on the example inputs "
                f"({at_example[0].message[:-len(AT_EXAMPLE)]}): part of the forward computes otherwise when "
                "traced (a route torch takes for plain tensors only, state changed outside the traced "
                "calls). Run fx2nnef.diagnose() on the model and these inputs to find the submodule at fault")
        lines = [f"the trace took decisions on dynamic dims {dict(analysis.base_env)} that do not hold at other sizes:"]
        lines += [f"  - {f}" for f in first_failures[:10]]
        lines.append("Make that code independent of the dynamic size, trace with other example sizes, or drop the dim from dynamic_axes.")
        lines += _loop_hint(analysis)
        raise _guard_error("\n".join(lines), analysis)
    trace2, analysis_back = retraced
    _refuse_single_sizes(analysis_back)
    for g in analysis_back.guards:
        if g.kind == "shape":
            g.note = (g.note + "; " if g.note else "") + "graph traced at larger sizes"
    reason = "; ".join(str(f) for f in first_failures[:3]) or "; ".join(str(r) for r in analysis.ranges.values())
    notes.append("the example sizes made the trace take size-specific branches ("
                 + reason
                 + "); the exported graph was traced again at " + ", ".join(f"{k}={v}" for k, v in bigger.items())
                 + " and checked at the example sizes")
    _note_ranges(analysis_back, notes)
    return trace2.gm, analysis_back, trace2


class _NotAtExample(Exception):
    """A graph traced at other sizes that does not reproduce the model at the example."""


def _at_example_first(job: _Tracing, trace, ref, base_env: dict) -> _Tracing:
    """``job`` whose traces (at larger sizes, to widen a bounded range) are run once at the example
    before their analysis: one that computes otherwise there is of no use (its analysis at the
    example would find that after probing it at many sizes, twice). A trace with a Python loop over
    a size is analysed as it is, since its loop rolled into a scan may hold where it does not."""
    try:
        expected = ref(base_env) if ref is not None else None
    except Exception:  # noqa: BLE001 - no reference there: the analyses decide
        expected = None
    if expected is None:
        return job

    def check(retraced) -> None:
        if _has_loop_decisions(retraced):
            return
        why = differs_at(retraced.gm, trace.example_inputs, expected)
        if why is not None:
            raise _NotAtExample(why)

    return dataclasses.replace(job, precheck=check)


def _has_loop_decisions(trace) -> bool:
    """Whether ``trace`` took a decision on a count of pieces or of a Python loop's steps."""
    return any(g.counts is not None or (g.source is not None and _is_loop_decision(g.text, g.source.code or ""))
               for g in trace.guards)


class _NotPastBounds(Exception):
    """A trace with decisions on sizes exported both ways that still differs from the model at
    every size where the range of the trace before it ended."""


def _past_bounds_first(job: _Tracing, ref, analysis) -> _Tracing:
    """``job`` whose traces (decisions on sizes exported both ways, to widen a bounded range) are
    first run where the range of ``analysis`` ends because the graph differs from the model: one
    that differs at every such size widens nothing (the decision that bounds it was not exported
    both ways: Swin's `if window >= padded` met in every block, deciding otherwise stage by
    stage), and its analysis would find that after probing it at many sizes, tracing the forward
    far above the example."""
    if ref is None or analysis is None:
        return job
    ends = [{**analysis.base_env, s: int(n)} for s, r in analysis.ranges.items()
            for n in re.findall(rf"the graph differs from the model at {re.escape(s)}=(\d+)(?!\d)", r.why or "")]
    if not ends:
        return job

    def check(merged) -> None:
        if _has_loop_decisions(merged):
            return  # its loop rolled into a scan may hold where it does not
        why = None
        for env in ends:
            try:
                expected = ref(env)
            except Exception:  # noqa: BLE001 - no reference there: the analysis decides
                return
            why = differs_at(merged.gm, inputs_at(merged.example_inputs, job.names, job.dyn, env), expected)
            if why is None:
                return
        raise _NotPastBounds(f"at {ends[-1]}: {why}")

    return dataclasses.replace(job, precheck=check)


_FAR = "beyond the sizes checked"


def _far_bounds(analysis) -> dict:
    """symbol -> upper bound of the ranges that end where a decision changes far above the sizes
    checked (the number of chunks of a chunked scan at 65 for an example of 3 tokens): a trace
    past it may hold on both sides."""
    return {s: r.hi for s, r in analysis.ranges.items() if r.hi is not None and _FAR in (r.why or "")}


def _near_far_bounds(analysis) -> dict:
    """The far bounds worth a trace past them (:func:`.far_traces.within_trace_reach`)."""
    base = analysis.base_env
    return {s: hi for s, hi in _far_bounds(analysis).items() if within_trace_reach(hi + 1, base[s])}


def _join_far_bounds(back, there) -> None:
    """``back`` (a graph traced at larger sizes, analyzed at the example) ends where a decision
    changes far above the example; ``there`` (the same graph and replay hints, analyzed at the
    sizes it was traced at) checked the sizes past that point. The graph then holds on both sides:
    the range of ``back`` goes on as far as that of ``there``."""
    for s, r in list(back.ranges.items()):
        if r.hi is None or _FAR not in (r.why or ""):
            continue
        other = there.ranges.get(s)
        if other is not None and not (other.contains(r.hi + 1) and other.step == 1 and r.step == 1):
            continue
        hi = None if other is None else other.hi
        if hi is None and r.lo is None and r.step == 1:
            del back.ranges[s]
        else:
            # the bound is now the other analysis's, and says why (far beyond the sizes checked too)
            why = "; ".join([x for x in (r.why or "").split("; ") if x and _FAR not in x]
                            + ([other.why] if other is not None and other.why else []))
            back.ranges[s] = SymRange(s, r.lo, hi, r.step, r.rest, why)


def _retrace_sizes(analysis) -> list:
    """``(sizes, by_replay)`` to trace again at when the example's trace holds for a bounded range:
    two above the example; just past each far bound up to ``far_traces.FAR_RETRACE`` (or 4x the example:
    a trace there costs its sizes), where a loop over the chunks of a chunked scan runs twice and
    rolls; just past each upper bound where the graph stops reproducing the model, and where the
    replay's shapes stop holding (a sequence within one chunk traces a chunk axis of 1).
    ``by_replay``: skip the sizes where the replay says the trace takes the example's decisions (it
    would give this graph again); only for the first, since at the others the replay may have fixed
    at the example what changes there (the number of chunks)."""
    base = analysis.base_env
    out = [({s: v + 2 for s, v in base.items()}, True)]

    def add(env, by_replay):
        # never far above the example: a trace there costs its sizes (a range that ends where a
        # decision changes at H = 2**23 + 1 and is also stepped would trace a UNet there)
        affordable = all(within_trace_reach(v, base[s]) for s, v in env.items())
        if affordable and all(env != e for e, _ in out):
            out.append((env, by_replay))

    for s, hi in _near_far_bounds(analysis).items():
        add({**base, s: hi + 1}, False)
    for s, r in analysis.ranges.items():
        if r.hi is not None and r.hi + 1 != base[s] + 2 and "differs from the model" in (r.why or ""):
            add({**base, s: r.hi + 1}, False)
    if analysis.replay_break is not None:
        add(dict(analysis.replay_break), False)
    # a step the decisions imply (H % 32 == 0 for pads taken only off the multiples): traces at
    # the sizes of each finer step, the smallest first (at H + 1 every pad is taken: a graph for
    # every size where the pads' amounts are 0 at the multiples; at H + 4 those of a 4-pixel patch
    # are not, the later ones are)
    steps = {s: r.step for s, r in analysis.ranges.items() if OFF_STEP in (r.why or "")}
    for d in sorted({d for k in steps.values() for d in range(1, k) if k % d == 0})[:_STEP_RETRACES]:
        add({**base, **{s: base[s] + d for s, k in steps.items() if k % d == 0}}, True)
    return out


_STEP_RETRACES = 4  # traces tried at the sizes of finer steps than the one the decisions imply


def _refuse_single_sizes(analysis):
    """A symbol valid at fewer than ``FEWEST_SIZES`` sizes (split(2) of S=6 gives 3 pieces at
    S=5 and 6 only) is not dynamic in any useful sense: say which decisions fix it."""
    single = [r for r in analysis.ranges.values()
              if r.lo is not None and r.hi is not None and (r.hi - r.lo) // r.step + 1 < FEWEST_SIZES]
    if not single:
        return
    where = "the example size only" if all(r.lo == r.hi for r in single) else "a few sizes only"
    lines = [f"the trace took decisions on dynamic dims that make the graph valid at {where} ("
             + "; ".join(str(r) for r in single) + "):"]
    named = [g for g in analysis.guards if g.status in ("bounds", "violated")]
    if not named:
        # no decision was seen to flip (the graph may fail to run past the example: constant
        # positions out of range): every decision taken on the sizes is a suspect
        named = [g for g in analysis.guards if g.kind == "shape"]
        if named:
            lines.append("  (no decision was seen to change at the sizes probed; those taken on the sizes are:)")
    lines += [f"  - {g}" for g in named][:10]
    lines.append("Make that code independent of the dynamic size, or drop the dim from dynamic_axes.")
    lines += _loop_hint(analysis)
    raise _guard_error("\n".join(lines), analysis)


def _guard_error(message: str, analysis) -> GuardError:
    """A GuardError that carries the analysis it reports (for :func:`_trace_merging_sizes`)."""
    error = GuardError(message)
    error.analysis = analysis
    return error


def _loop_guards(analysis) -> list:
    """When the graph is not valid at every size, the decisions that are a Python loop over a
    size (``for i in range(S)``): those that bound the range, else all (with shapes fitted from
    probes, a loop's decision may look like it holds where a failure bounds the range)."""
    if not analysis.failures and not any(r.lo is not None or r.hi is not None for r in analysis.ranges.values()):
        return []
    loops = [g for g in analysis.guards if g.source is not None and _is_loop_decision(g.what, g.source.code or "")]
    return [g for g in loops if g.status in ("bounds", "violated")] or loops


def _is_loop_decision(what: str, code: str) -> bool:
    """A loop over a traced size: ``for i in range(S)``, or over the pieces of a tensor (``for t in
    x``, ``for t in x.unbind(1)``, comprehensions too), whose count or length is the decision."""
    if what.startswith(("index(", "len(")) and "range(" in code:
        return True
    return (what.startswith("len(") or (what.startswith("unbind(") and " tensors" in what)) \
        and re.search(r"\bfor\b.+\bin\b", code) is not None


def _loop_hint(analysis) -> list:
    """What to do with a Python loop over a dynamic size, when one of the decisions is one."""
    loops = _loop_guards(analysis)
    if not loops:
        return []
    return [f"A Python loop over a dynamic size (at {loops[0].source}) is unrolled at the example size: write its "
            "step as a function for torch's scan (torch._higher_order_ops.scan.scan(step, init, xs, dim=...)), "
            "which is exported as one tract_core_scan for any length."]


def _note_ranges(analysis, notes):
    for r in analysis.ranges.values():
        notes.append(f"the export is valid only for {r}; graph.nnef asserts the bounds (tract_assert)")
    bounding = [g for g in _loop_guards(analysis) if g.status in ("bounds", "violated")]
    if bounding:  # a loop over chunks (range(S // 4)) that could not be rolled: say how to make it general
        notes.extend(_loop_hint(analysis))


def _check_envs(analysis) -> list:
    """Sizes for check_io besides the example: one below and one above it, inside the range
    and, with fitted shapes, among the sizes where the probes saw the graph reproduce the model
    (with the replay's shapes, the model may run there for the first time); then the edges of
    the range the export declares (:func:`_edge_envs`)."""
    inner = _inner_check_envs(analysis)
    return inner + _edge_envs(analysis, inner)


def _edge_envs(analysis, have: list) -> list:
    """The edges of the range the export declares (asserts), one symbol moved at a time: the
    smallest size a bounded symbol's range claims (its lower bound, on its step) and the largest
    where it has one.
    tract does not enforce the asserted ranges, and a size at an edge (an axis of 1, a pooled
    size of 1) is where a graph checked only inside fails: every size the asset claims must be
    one the check could have run at."""
    base, out = analysis.base_env, []
    for s, v in base.items():
        if s not in analysis.ranges or not analysis.ranges[s].bounded:
            continue  # sizes 1 and up: the sizes below and above the example cover them
        first, last = _held(analysis.ranges[s])
        if last is not None and last > max(8 * v, _FAR_EDGE):
            last = None  # a maximum length far above the example (BERT's 512 positions, an LLM's 128k)
        for n in (first, last):
            env = {**base, s: n}
            if n is not None and n != v and env not in have and env not in out:
                out.append(env)
    return out


_FAR_EDGE = 64  # an upper edge above this and 8 times the example is not run by the check


def _inner_check_envs(analysis) -> list:
    base = analysis.base_env
    if analysis.shapes_from == "fake replay":
        return list(analysis.io_envs)  # chosen where no decision differs, below and above
    envs = []
    for side in (-1, 1):
        env = {}
        for s, v in base.items():
            sizes = [e[s] for e in analysis.good_envs if e[s] != v and (e[s] - v) * side > 0]
            if side < 0 and any(n >= 2 for n in sizes):
                sizes = [n for n in sizes if n >= 2]  # a size of 1 broadcasts: a check there says little
            if sizes:
                target = v // 2 if side < 0 else v + 3
                env[s] = min(sizes, key=lambda n: (abs(n - target), n))
        if env:
            env = {**base, **env}
            if env not in envs:
                envs.append(env)
    return envs


def _case(ref, names, tensors, dyn, env):
    try:
        out = ref(env)
    except Exception:  # noqa: BLE001 - the model refuses this combination of sizes
        return None
    new = ref.inputs_for(env)
    label = ", ".join(f"{k}={v}" for k, v in env.items())
    return (label, [to_numpy(t) for t in new], [to_numpy(t) for t in out])
