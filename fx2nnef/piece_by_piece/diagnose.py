"""The diagnoser: export every submodule on its own, encapsulate failing ones, report.

``diagnose(model, inputs=[(args, kwargs), ...], target=...)`` records one run per input
set, then visits the module tree. Each module is exported on its own from its first
recorded call and checked against every recorded call. A module whose export works is
inlined in its parent's export; a module that fails but has a working replacement (a
registered module extractor, or its own export with failing children encapsulated), or
whose strategy is ALWAYS, becomes a custom op in its parent: the parent is traced again
with it kept whole. See :mod:`.strategies` for the strategies and :mod:`.report` for the
report and its JSON schema.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

import torch

from ..errors import InvalidArgumentError
from ..fx_tracer.tracing import structures
from ..fx_tracer.capture import default_input_names
from ..fx_tracer.model_mode import eval_mode
from ..fx_tracer.tracing.control_flow import check_max_loop_iterations
from ..fx_tracer.shapes.probe import inputs_at
from ..ir import op_key
from ..nnef_emit import REGISTRY
from ..nnef_emit.registry import Registry
from ..targets import InferenceTarget, TractNNEF
from .attempt import Attempt, Exporter, Piece, Replacement
from .record import ModuleRecord, Recording, SymbolTable, flat_input_names, record
from .report import Divergence, Report, Row, Status
from .strategies import Strategy, check_strategies, resolve_strategy


class _Holder(torch.nn.Module):
    """Calls ``inner``: exporting the holder with ``inner`` kept whole tests inner's extractor."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


@dataclasses.dataclass(eq=False)
class _State:
    """What the diagnoser knows about one module."""

    rec: ModuleRecord
    strategy: Strategy
    row: Row
    visited: bool = False
    attempt: Optional[Attempt] = None
    spec: dict = dataclasses.field(default_factory=dict)  # descendants encapsulated in the working export
    replacement: Optional[Replacement] = None

    @property
    def exports(self) -> bool:
        return self.attempt is not None and self.attempt.ok


class Diagnoser:
    """Visits the module tree of a recording.

    ``eager``: visit every module (a report); otherwise children are visited only when their
    parent fails or when they must be encapsulated (a fallback export).
    """

    def __init__(self, recording: Recording, exporter: Exporter, strategies: Optional[dict] = None,
                 eager: bool = True, root_names: Optional[list] = None, root_output_names: Optional[list] = None):
        self.recording = recording
        self.exporter = exporter
        self.target, self.registry = exporter.target, exporter.registry
        self.eager = eager
        self.root_names, self.root_output_names = root_names, root_output_names
        strategies = check_strategies(strategies)
        self.states = {}
        for rec in recording.root.walk():
            row = Row(rec.path, rec.class_name, rec.depth, None if rec.parent is None else rec.parent.path,
                      resolve_strategy(strategies, rec.path, rec.module), calls=len(rec.calls))
            self.states[rec.path] = _State(rec, row.strategy, row)

    # visiting ---------------------------------------------------------------------------
    def visit(self, rec: ModuleRecord) -> _State:
        st = self.states[rec.path]
        if st.visited:
            return st
        st.visited = True
        if st.strategy is Strategy.NONE:
            self._not_examined(rec, "strategy NONE: not examined; exported inline in its parent")
            return st
        if not rec.calls:
            st.row.status = Status.NOINPUT
            if self.eager:
                self._visit_children(rec)
            return st
        if self.eager:
            self._visit_children(rec)
        spec = self.spec_for(rec)
        attempt = self._attempt(rec, spec)
        if not attempt.ok and not self.eager and st.strategy is not Strategy.LOCAL:
            self._visit_children(rec)
            spec2 = self.spec_for(rec)
            if spec2 != spec:
                retry = self._attempt(rec, spec2)
                retry.time += attempt.time
                if retry.ok:
                    retry.notes.append(f"inline export failed at {attempt.step}: {attempt.reason}")
                attempt, spec = retry, spec2
        st.attempt, st.spec = attempt, spec if attempt.ok else {}
        self._fill_row(st, attempt, spec)
        self._find_replacement(st)
        return st

    def _visit_children(self, rec: ModuleRecord) -> None:
        if self.states[rec.path].strategy is Strategy.LOCAL:
            for child in rec.children:
                self._not_examined(child, f"not examined: '{rec.path}' has strategy LOCAL")
            return
        for child in rec.children:
            self.visit(child)

    def _not_examined(self, rec: ModuleRecord, note: str) -> None:
        for inner in rec.walk():
            self.states[inner.path].visited = True
            self.states[inner.path].row.notes.append(note)

    def spec_for(self, rec: ModuleRecord) -> dict:
        """Descendants to keep whole in ``rec``'s export, with their replacement."""
        if self.states[rec.path].strategy is Strategy.LOCAL:
            return {}
        spec: dict = {}
        for child in rec.children:
            cst = self.states[child.path]
            rel = child.relative_path(rec)
            if cst.strategy is Strategy.NONE or not child.calls:
                continue
            if cst.strategy is Strategy.ALWAYS:
                self.visit(child)
            if cst.visited and cst.replacement is not None and (cst.strategy is Strategy.ALWAYS or not cst.exports):
                spec[rel] = cst.replacement
                continue
            inner = cst.spec if cst.exports else self.spec_for(child)
            spec.update({f"{rel}.{k}": v for k, v in inner.items()})
        return spec

    def _inputs(self, rec: ModuleRecord) -> tuple:
        """The calls one export of ``rec`` is checked on, its input names and dynamic axes."""
        calls = rec.compatible_calls()
        if rec.parent is None and self.root_names is not None:
            names = list(self.root_names)
        else:
            names = flat_input_names(rec.module, calls[0].args, calls[0].kwargs)
        dyn = self.recording.symbols.dynamic_axes(calls, names) if self.target.dynamic_dims else {}
        return calls, names, dyn

    def _attempt(self, rec: ModuleRecord, spec: dict) -> Attempt:
        calls, names, dyn = self._inputs(rec)
        out_names = self.root_output_names if rec.parent is None else None
        attempt = self.exporter.attempt(Piece(rec.module, rec.class_name, names, dyn, spec, out_names), calls)
        if len(calls) < len(rec.calls):
            attempt.notes.append(f"{len(rec.calls) - len(calls)} call(s) with other argument types were not checked")
        return attempt

    def _find_replacement(self, st: _State) -> None:
        """An extractor when the module fails (or is ALWAYS) and has one; else its own export."""
        rec = st.rec
        rule = self.registry.lookup(op_key(type(rec.module)), self.target.name)
        if rule is not None and (not st.exports or st.strategy is Strategy.ALWAYS):
            calls, names, dyn = self._inputs(rec)
            holder = Piece(_Holder(rec.module), rec.class_name, names, dyn, {"inner": Replacement("extractor")})
            check = self.exporter.attempt(holder, calls)
            st.row.time += check.time
            name = rule.__qualname__.split(".")[0]
            if check.ok:
                st.replacement = Replacement("extractor", name)
                st.row.replacement = f"extractor:{name}"
                st.row.notes.append(f"its extractor {name} matches PyTorch (max abs {check.max_abs:.3g})")
            else:
                st.row.notes.append(f"its extractor {name} fails at {check.step}: {check.reason}")
        elif st.exports:
            st.replacement = Replacement("fragment", rec.class_name, tuple(sorted(st.spec.items(), key=lambda kv: kv[0])))

    def _fill_row(self, st: _State, attempt: Attempt, spec: dict) -> None:
        row = st.row
        row.status = attempt.status | (Status.CHILDC if attempt.ok and spec else Status(0))
        for name in ("step", "reason", "location", "guards", "max_abs", "max_rel"):
            setattr(row, name, getattr(attempt, name))
        row.time += attempt.time
        row.notes += attempt.notes
        if attempt.ok:
            row.encapsulated = sorted(spec)

    # results ----------------------------------------------------------------------------
    def report(self, total_time: float) -> Report:
        for st in reversed(list(self.states.values())):  # outer exports name the fragments last
            if st.exports:
                self._mark_custom(st.rec.path, st.spec, st.attempt.plan, st.attempt.library)
        rows = [self.states[r.path].row for r in self.recording.root.walk()]
        return Report(type(self.recording.root.module).__name__, self.target.name, self.recording.n_input_sets,
                      rows, self.first_divergence(), self.blockers(self.recording.root), total_time)

    def _mark_custom(self, path: str, spec: dict, plan, library) -> None:
        """Flag CUSTOM the modules ``spec`` encapsulates under ``path``, naming their fragment."""
        for rel, rep in spec.items():
            inner_path = f"{path}.{rel}" if path else rel
            inner = self.states.get(inner_path)
            if inner is None:
                continue
            inner.row.status |= Status.CUSTOM
            child = plan.children.get(rel)
            if child is not None:
                inner.row.replacement = f"fragment:{library.name_of(child)}"
                self._mark_custom(inner_path, rep.spec_dict, child, library)
            else:
                inner.row.replacement = str(rep)

    def first_divergence(self) -> Optional[Divergence]:
        for rec in self.recording.execution_order():
            row = self.states[rec.path].row
            if Status.DISC in row.status:
                return Divergence(rec.path, rec.class_name, row.max_abs, row.max_rel)
        return None

    def blockers(self, rec: ModuleRecord) -> list:
        """The innermost modules that fail with no working replacement, under ``rec``."""
        st = self.states[rec.path]
        if st.attempt is None or st.exports or st.replacement is not None:
            return []
        inner = [p for child in rec.children for p in self.blockers(child)]
        return inner or [rec.path]


def normalize_inputs(inputs) -> list:
    """``[(args, kwargs), ...]`` from a list whose items are (args, kwargs), a tuple of args or a tensor."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise InvalidArgumentError("inputs must be a non-empty list of input sets, e.g. [((x1,), {}), ((x2,), {})]")
    out = []
    for item in inputs:
        if isinstance(item, torch.Tensor):
            out.append(((item,), {}))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict) and isinstance(item[0], (tuple, list)):
            out.append((tuple(item[0]), dict(item[1])))
        elif isinstance(item, (tuple, list)):
            out.append((tuple(item), {}))
        else:
            raise InvalidArgumentError(f"an input set must be (args, kwargs), a tuple of args or a tensor; got {type(item).__name__}")
    return out


def prepare(model: torch.nn.Module, input_sets: list, target: InferenceTarget,
            input_names: Optional[list] = None) -> tuple:
    """The model's input names, and the recording of one run per input set.

    The target's ``dynamic_axes`` name symbols of the model's inputs; when none of those
    dims differs between the given input sets, one more input set is made by resizing the
    first along them (as the export's own second check does), so that submodules see
    the dims move too.
    """
    args0, kwargs0 = input_sets[0]
    names = list(input_names) if input_names else default_input_names(model, args0, kwargs0)
    flats = [[t for _, t in structures.flatten(s, "")] for s in input_sets]
    if len(names) != len(flats[0]):
        raise InvalidArgumentError(f"{len(names)} input names given for {len(flats[0])} input tensors")
    declared = {(names.index(name), axis % flats[0][names.index(name)].dim()): sym
                for name, axes in (getattr(target, "dynamic_axes", None) or {}).items() if name in names
                for axis, sym in axes.items()}
    if declared and all(len({f[i].shape[a] for f in flats}) == 1 for i, a in declared):
        env = {sym: _other_size(flats[0][i].shape[a]) for (i, a), sym in declared.items()}
        axes_by_name: dict = {}
        for (i, a), sym in declared.items():
            axes_by_name.setdefault(names[i], {})[a] = sym
        resized = iter(inputs_at(flats[0], names, axes_by_name, env))
        input_sets = list(input_sets) + [structures.rebuild((args0, kwargs0), lambda _k, _t: next(resized))]
        flats.append([t for _, t in structures.flatten(input_sets[-1], "")])
    table = SymbolTable(len(input_sets))
    for (i, a), sym in declared.items():
        table.declare(sym, tuple(f[i].shape[a] for f in flats))
    return names, record(model, input_sets, table)


def _other_size(n: int) -> int:
    """A second size for a dynamic dim, as the export's second check picks it."""
    return n // 2 if n // 2 >= 2 else n + 2


def diagnose(model: torch.nn.Module, inputs, target: Optional[InferenceTarget] = None, *,
             strategies: Optional[dict] = None, registry: Optional[Registry] = None,
             input_names: Optional[list] = None, output_names: Optional[list] = None,
             branches: Optional[str] = None, max_loop_iterations: Optional[int] = None) -> Report:
    """Export every submodule of ``model`` on its own and report, one row per submodule.

    Args:
        inputs: input sets, each ``(args, kwargs)`` (or a tuple of args, or one tensor); two
            or more show which dims are dynamic.
        target: TractNNEF (default) or KhronosNNEF; its ``check_io_tolerance`` is used and
            its ``dynamic_axes`` name the model's dynamic input dims.
        strategies: ``{module path | class | class name: Strategy}`` (see :class:`Strategy`).
        registry: op registry to lower with (e.g. ``REGISTRY.child()`` with extra rules).
        branches: None, ``"select"`` or ``"example"``: what becomes of Python decisions on
            sizes and on tensor data, as :func:`fx2nnef.export` takes it; a module's notes say
            which decisions were merged.
        max_loop_iterations: the steps of every while_loop whose trip count no size bounds,
            as :func:`fx2nnef.export` takes it.
    """
    t0 = time.perf_counter()
    check_max_loop_iterations(max_loop_iterations)
    target = target if target is not None else TractNNEF()
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    with eval_mode(model):
        names, recording = prepare(model, normalize_inputs(inputs), target, input_names)
        exporter = Exporter(target, registry or REGISTRY, branches, max_loop_iterations)
        diag = Diagnoser(recording, exporter, strategies, eager=True, root_names=names,
                         root_output_names=output_names)
        diag.visit(recording.root)
    return diag.report(time.perf_counter() - t0)
