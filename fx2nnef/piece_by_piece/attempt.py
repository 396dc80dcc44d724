"""Export one module on its own and check it against its recorded calls.

An attempt goes through the steps trace, lower, emit, load, run and compare, and stops at
the first that fails, keeping the reason and the place in the user's code. Descendants
named in ``spec`` are encapsulated: the tracer keeps them as single calls, and each is
exported on its own (from the arguments the traced parent passes it, with the parent's
symbols as its dynamic dims) and called as an NNEF fragment, or lowered by its module
extractor.
"""
from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import Fx2NnefError, TractError, UnsupportedOpError
from ..fx_tracer.capture import CaptureOptions, capture
from ..fx_tracer.to_ir.build import to_numpy
from ..fx_tracer.tracing.tracer import is_tracing, trace_model
from ..ir import SourceLoc, SymDim, flat_values
from ..nnef_emit import write_asset
from ..nnef_emit.extractors import registered_module_classes
from ..nnef_emit.custom_op import FragmentLibrary, ModulePlan
from ..nnef_emit.registry import Registry
from ..pipeline import graph_passes, lower, run_in_engine
from ..targets.tolerance import compare_outputs
from .record import Call, copy_value, flat_input_names
from .report import Outcome, Status

_SKIP_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
              os.path.dirname(os.__file__))
_LOAD_STAGES = ("load", "into_runnable", "start-up", "start")
_CASCADE = "is used before it is computed"  # an op after one that failed to lower


@dataclasses.dataclass(frozen=True)
class Replacement:
    """How a module is called from its parent's export: ``extractor`` or ``fragment``.

    A fragment is the module's own export, with its own ``spec`` of encapsulated descendants.
    """

    kind: str
    name: str = ""
    spec: tuple = ()  # sorted (relative path, Replacement) pairs

    @property
    def spec_dict(self) -> dict:
        return dict(self.spec)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


class StepFailure(Exception):
    """A step of an export failed; ``reason`` says why, ``location`` where in the user's code."""

    def __init__(self, step: str, reason: str, location: Optional[SourceLoc] = None):
        super().__init__(f"{step}: {reason}")
        self.step, self.reason, self.location = step, reason, location


@dataclasses.dataclass
class Attempt(Outcome):
    """The outcome of exporting one module on its own."""

    plan: Optional[ModulePlan] = None
    library: Optional[FragmentLibrary] = None
    files: Optional[dict] = None
    text: str = ""
    cases: list = dataclasses.field(default_factory=list)  # (label, [OutputDiff])
    source_op_counts: dict = dataclasses.field(default_factory=dict)
    nnef_op_counts: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclasses.dataclass(frozen=True)
class Piece:
    """A module to export on its own: its class name, the names of its flat inputs, their dynamic
    axes, the descendants kept whole (``spec``: relative path -> :class:`Replacement`) and,
    for the model itself, the names of its outputs."""

    module: torch.nn.Module
    class_name: str
    names: list
    dyn: dict
    spec: dict
    output_names: Optional[list] = None


@dataclasses.dataclass
class Exporter:
    """What every attempt of one diagnosis shares: target, registry, tolerance."""

    target: object
    registry: Registry
    branches: Optional[str] = None  # export option: None, "select" (decisions on data merged too) or "example"
    max_loop_iterations: Optional[int] = None  # export option: the steps of a while_loop no size bounds

    def attempt(self, piece: Piece, calls: list) -> Attempt:
        """Export ``piece`` from ``calls[0]``, run the asset on every call and compare."""
        t0 = time.perf_counter()
        result = Attempt(status=Status.FAIL)
        try:
            self._run_steps(result, piece, calls)
        except StepFailure as exc:
            result.status, result.step, result.reason, result.location = Status.FAIL, exc.step, exc.reason, exc.location
        result.time = time.perf_counter() - t0
        return result

    def _run_steps(self, result: Attempt, piece: Piece, calls: list) -> None:
        plan, cap = self.build_plan(piece, calls[0])
        result.guards, result.plan = list(cap.graph.guards), plan
        result.notes += cap.control_flow
        library = FragmentLibrary(self.target.name, self.registry)
        try:
            graph_passes(plan.graph, self.target, eligible=cap.owns_parameter)
            registry = library.registry_for(plan)
            emitted = lower(plan.graph, self.target, registry=registry, fragments=library.texts,
                            asserts=_asserts_on(self.target.specific_asserts(plan.graph), plan.graph))
        except Fx2NnefError as exc:
            raise StepFailure("lower", _reason(exc), _emit_location(exc, plan)) from exc
        result.library, result.files, result.text = library, emitted.files, emitted.text
        result.source_op_counts, result.nnef_op_counts = emitted.source_op_counts, emitted.nnef_op_counts
        inputs = [[to_numpy(t) for t in c.flat_inputs()] for c in calls]
        got = self._run_engine(emitted.files, inputs)
        self._compare(result, calls, plan.graph.output_names, _expected(cap, plan.graph, calls, inputs), got)
        self._check_data_guards(result, piece, calls)

    # trace -----------------------------------------------------------------------------
    def build_plan(self, piece: Piece, call: Call, where: str = ""):
        """Trace ``piece`` on ``call`` with the descendants of its ``spec`` kept whole; recurse into fragments."""
        module, spec = piece.module, piece.spec
        fragments = {rel: rep for rel, rep in spec.items() if rep.kind == "fragment"}
        seen: dict = {}
        handles = [_record_traced_call(module.get_submodule(rel), rel, seen) for rel in fragments]
        options = CaptureOptions(input_names=piece.names, output_names=piece.output_names, dynamic_axes=piece.dyn,
                                 check_io=bool(self.target.check_io), unroll_while=self.target.profile.unroll_while,
                                 leaf_modules=registered_module_classes(builtin_only=True), leaf_names=tuple(spec),
                                 max_loop_iterations=self.max_loop_iterations, branches=self.branches)
        try:
            self.target.pre_trace(module, call.args, call.kwargs)
            cap = capture(module, call.args, call.kwargs, options)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's code or the tracer
            prefix = f"custom op '{where}': " if where else ""
            raise StepFailure("trace", prefix + _reason(exc), user_location(exc)) from exc
        finally:
            for h in handles:
                h.remove()
        plan = ModulePlan(piece.class_name, cap.graph)
        for node in cap.graph.nodes:
            info = node.kwargs.get("module")
            rel = info.get("path") if isinstance(info, dict) else None
            if rel not in fragments or rel in plan.children:
                continue
            if rel not in seen:
                raise StepFailure("trace", f"custom op '{rel}' was not called while tracing", node.source)
            sub = module.get_submodule(rel)
            args, kwargs = seen[rel]
            sub_names = flat_input_names(sub, args, kwargs)
            values = flat_values((node.args, {k: v for k, v in node.kwargs.items() if k != "module"}))
            sub_dyn = _axes_from_values(values, sub_names, rel, node)
            child, _ = self.build_plan(Piece(sub, type(sub).__name__, sub_names, sub_dyn, fragments[rel].spec_dict),
                                       Call(0, args, kwargs), where=f"{where}.{rel}" if where else rel)
            plan.children[rel] = child
        return plan, cap

    # run and compare -------------------------------------------------------------------
    def _run_engine(self, files: dict, input_sets: list) -> list:
        with tempfile.TemporaryDirectory(prefix="fx2nnef_pbp_") as tmp:
            name = "asset" + self.target.asset_suffix
            try:
                asset = write_asset(files, Path(tmp) / name)
            except Fx2NnefError as exc:
                raise StepFailure("emit", _reason(exc)) from exc
            try:
                return run_in_engine(self.target, asset, input_sets)
            except Fx2NnefError as exc:
                text = str(exc).replace(f" on '{asset}'", "").replace(str(asset), "<asset>")
                raise StepFailure(_engine_step(exc), f"{type(exc).__name__}: {text}") from exc

    def _compare(self, result: Attempt, calls: list, output_names: list, expected_sets: list, got: list) -> None:
        tolerance = getattr(self.target, "check_io_tolerance", "approximate")
        worst_abs, worst_rel, bad = 0.0, 0.0, []
        per_set: dict = {}
        for call, expected, outputs in zip(calls, expected_sets, got):
            diffs = compare_outputs(output_names, expected, outputs, tolerance)
            per_set[call.input_set] = per_set.get(call.input_set, 0) + 1
            label = f"input set {call.input_set}" + (f", call {per_set[call.input_set]}" if per_set[call.input_set] > 1 else "")
            result.cases.append((label, diffs))
            worst_abs = max([worst_abs] + [d.max_abs for d in diffs if not np.isnan(d.max_abs)])
            worst_rel = max([worst_rel] + [d.max_rel for d in diffs if not np.isnan(d.max_rel)])
            bad += [(label, d) for d in diffs if not d.ok]
        result.max_abs, result.max_rel = worst_abs, worst_rel
        if bad:
            result.status, result.step = Status.DISC, "compare"
            result.reason = "outputs differ from PyTorch: " + "; ".join(
                f"{label}: {d.name} max_abs={d.max_abs:.3g} max_rel={d.max_rel:.3g}" for label, d in bad[:4]) + (
                " ..." if len(bad) > 4 else "")
            result.notes += [f"{label}: {d}" for label, d in bad]
        else:
            result.status = Status.OK

    def _check_data_guards(self, result: Attempt, piece: Piece, calls: list) -> None:
        """A guard on tensor data that takes another branch on another call is a DISC."""
        data_guards = [g for g in result.guards if g.kind == "data" and g.source is not None and g.status != "merged"]
        if not data_guards or len(calls) < 2:
            return
        for call in calls[1:]:
            try:
                trace = trace_model(piece.module, call.args, call.kwargs, piece.names,
                                    leaf_types=registered_module_classes(builtin_only=True),
                                    leaf_names=tuple(piece.spec))
            except Exception:  # noqa: BLE001 - this call cannot even be traced: the compare step says more
                continue
            for guard in data_guards:
                taken = [g.expected for g in trace.guards if g.source is not None and str(g.source) == str(guard.source)]
                if taken and guard.expected not in taken:
                    result.status, result.step, result.location = Status.DISC, "compare", guard.source
                    diff = f" ({result.reason})" if result.reason else ""
                    result.reason = (f"a guard on tensor data takes another branch on input set {call.input_set}: "
                                     f"{guard.what} on input set {calls[0].input_set}, {taken[0]!r} there; the "
                                     f"export keeps only the first branch{diff}")
                    return


def _expected(cap, graph, calls: list, inputs: list) -> list:
    """What the asset's outputs are compared with: each call's recorded outputs or, where the
    target's weight format stores parameters otherwise (Q4_0, float16), the module's outputs on
    the call's inputs with the stored values (as the export's check does)."""
    stored = [v for v in graph.constants() if v.source.stored_format is not None]
    if not stored:
        return [[to_numpy(t) for t in c.flat_outputs()] for c in calls]
    overrides = cap.runner.overrides(stored)
    return [cap.runner.run(ins, overrides) for ins in inputs]


def _asserts_on(asserts: list, graph) -> list:
    """The target's assertions on the symbols that name only symbols of ``graph``: those of the
    model say nothing of a module without some of its symbols (``S+P < 128`` of one that has no
    ``P``)."""
    symbols = set(graph.symbols)
    return [a for a in asserts if set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", a.split(":")[-1])) <= symbols]


def _record_traced_call(module: torch.nn.Module, rel: str, seen: dict):
    """Keep the first call the tracer makes of ``module`` (a leaf: it runs on concrete values)."""
    def hook(_module, args, kwargs):
        if rel not in seen and is_tracing():
            seen[rel] = (copy_value(tuple(args)), copy_value(dict(kwargs)))
    return module.register_forward_pre_hook(hook, with_kwargs=True)


def _axes_from_values(values: list, names: list, rel: str, node) -> dict:
    """Dynamic axes of an encapsulated module's inputs: the plain symbols of the call's shapes."""
    if len(values) != len(names):
        raise StepFailure("trace", f"custom op '{rel}': the traced call passes {len(values)} tensors, "
                                   f"its recorded arguments hold {len(names)}", node.source)
    axes: dict = {}
    for v, name in zip(values, names):
        for axis, d in enumerate(v.shape or ()):
            if not isinstance(d, SymDim):
                continue
            symbol = _plain_symbol(d)
            if symbol is None:
                raise StepFailure("trace", f"custom op '{rel}': input '{name}' has size {d} on axis {axis}; a "
                                           "fragment input can only take a plain symbol as a dynamic size",
                                  node.source)
            axes.setdefault(name, {})[axis] = symbol
    return axes


def _plain_symbol(d: SymDim) -> Optional[str]:
    """``"S"`` for the dim ``S``; None for an expression such as ``S+1`` or ``2*S``."""
    if len(d.terms) == 1:
        (monomial, coef), = d.terms.items()
        if coef == 1 and len(monomial) == 1:
            return monomial[0]
    return None


def _engine_step(exc: Exception) -> str:
    if isinstance(exc, TractError):
        m = re.search(r"step '([^']*)'", str(exc))
        stage = m.group(1) if m else "run"
        return "load" if stage in _LOAD_STAGES else "run"
    return "load"


def _reason(exc: BaseException) -> str:
    """``Type: message``; for unsupported ops, one short line per op."""
    if isinstance(exc, UnsupportedOpError) and exc.problems:
        primary = [p for p in exc.problems if _CASCADE not in p.reason] or exc.problems
        unique = list(dict.fromkeys(f"{p.kind}: {p.reason}" for p in primary))
        more = f" (+{len(unique) - 3} more)" if len(unique) > 3 else ""
        return f"{type(exc).__name__}: " + "; ".join(unique[:3]) + more
    if isinstance(exc, StepFailure):
        return exc.reason
    return f"{type(exc).__name__}: {exc}"


def _emit_location(exc: Exception, plan: ModulePlan) -> Optional[SourceLoc]:
    """Source line of the first op that failed to lower, searched in the plan and its fragments."""
    problems = [p for p in getattr(exc, "problems", None) or [] if _CASCADE not in p.reason]
    plans = [plan]
    nodes = []
    while plans:
        p = plans.pop(0)
        nodes += p.graph.nodes
        plans += list(p.children.values())
    for problem in problems:
        for node in nodes:
            if node.kind == problem.kind and node.source is not None and str(node.source) in problem.where:
                return node.source
    return None


def user_location(exc: BaseException) -> Optional[SourceLoc]:
    """The innermost frame outside torch, fx2nnef and the standard library, deepest cause first."""
    chain, seen = [], set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in reversed(chain):
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not f.filename.startswith(_SKIP_DIRS) and not f.filename.startswith("<")]
        if frames:
            f = frames[-1]
            return SourceLoc(f.filename, f.lineno, (f.line or "").strip())
    return None

