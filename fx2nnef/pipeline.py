"""The export pipeline, read top to bottom: options -> capture -> IR passes -> lower -> write -> check.

:func:`export_model` is all of ``fx2nnef.export()`` after its arguments are checked: it runs
:func:`attempt` under the retry policy (below). An attempt runs the stages in order, each a
plain function over typed values, timed under its name in ``ExportResult.timings``:

==  ======================  ==================================================  ===========
 1  :func:`capture_model`   model, args, :class:`ExportOptions` -> ``Capture``  ``trace``
                            (its ``graph`` is the ``ir.Graph``)
 2  :func:`graph_passes`    the target's IR passes (fusions, float32 regions)   ``weights``
                            and weight formats, in place on the graph
 3  :func:`lower`           ``ir.Graph`` -> ``Emitted`` (NNEF text, weights)    ``lower``
 4  :func:`write`           ``Emitted`` -> ``StagedAsset`` beside the path      ``write``
 5  :func:`check`           the staged asset run in the target's engine and     ``check``
                            compared with PyTorch -> ``CheckReport`` (a failure
                            arbitrated by a float64 run: ``targets.rounding``)
 6  :func:`finish`          the asset moved into place -> ``ExportResult``
==  ======================  ==================================================  ===========

The piece-by-piece fallback (``fx2nnef.piece_by_piece``) lowers and runs each module with the
same :func:`lower` and :func:`run_in_engine`; nothing else lowers or checks.

Retry policy: an attempt returns an ExportResult or raises. Two typed outcomes are tried
again, each once per export (at most four attempts):

- :class:`~.fx_tracer.shapes.probe.DeferredCheckFailed`: a check the capture took for passed,
  left to run beside the lowering and the write (``CaptureOptions.rerun_beside``), did not pass.
  Nothing was written. Again with every check run in its place (which gives what that check
  gives there: an error, a narrower range), from the random generators' states the first
  attempt started from, so that a model that draws draws the same numbers.
- :class:`SizesBothWaysRefused`: the engine failed on, or computed otherwise than PyTorch, a graph
  where a decision on the sizes was exported both ways (``Capture.sizes_both_ways``, with
  ``branches=None``). Again as a new export with ``branches="example"`` (each decision on the
  example's side, its range asserted), and a note says why.
"""
from __future__ import annotations

import dataclasses
import random
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from .errors import CheckIOError, TractError, UnsupportedOpError, phrase, spell
from .fx_tracer.capture import Capture, CaptureOptions, capture
from .fx_tracer.float64_run import Float64Unavailable, float64_runner
from .fx_tracer.model_mode import compiled_modules_unwrapped, eval_mode, old_objects_skipped
from .fx_tracer.random_draws import random_draws_advice
from .fx_tracer.shapes.probe import DeferredCheckFailed
from .ir import DType, Graph, apply_weight_format, sanitize
from .ir.check import outputs_from_indices
from .nnef_emit import REGISTRY, emit_graph
from .nnef_emit.archive import StagedAsset, asset_bytes, check_asset_path, stage_asset
from .nnef_emit.emitter import Emitted
from .nnef_emit.registry import Registry
from .progress import stage
from .targets import CheckReport, InferenceTarget
from .targets.base import TieRecheck, recheck_ties
from .targets.drift import stored_weights_drift
from .targets.result import ExportResult
from .targets.rounding import arbitrate
from .targets.tolerance import format_diffs

# Below this many bytes of weights an export takes seconds: no progress bar.
PROGRESS_MIN_BYTES = 100 * 2**20


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """What one export is asked, checked: the target, what the capture is asked (its
    ``dynamic_axes`` already chosen between export()'s and the target's), and how the asset is
    written (``debug_bundle``: where a mismatch's bundle goes; ``compression_level``: gzip level
    of a ``.tgz``; ``progress``: None automatic, True or False)."""

    target: InferenceTarget
    capture: CaptureOptions
    debug_bundle: Optional[str] = None
    compression_level: Optional[int] = None
    progress: Optional[bool] = None


class SizesBothWaysRefused(Exception):
    """The engine failed on a graph whose decisions on sizes were exported both ways
    (``error``: what it raised, a TractError or CheckIOError); the retry policy exports again
    with each decision on the example's side."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


# the retry policy ----------------------------------------------------------------------------

def export_model(model: torch.nn.Module, args: tuple, kwargs: dict, path: Path,
                 options: ExportOptions) -> ExportResult:
    """Export under the retry policy of this module's docstring: :func:`attempt` again with the
    checks in place on ``DeferredCheckFailed``, and with ``branches="example"`` on
    :class:`SizesBothWaysRefused`. ``timings["made_again"]``: the seconds of the attempts whose
    deferred check did not pass."""
    beside, refused, made_again = True, None, 0.0
    states, started = _random_states(), time.perf_counter()
    while True:
        try:
            result = attempt(model, args, kwargs, path, options, checks_beside=beside)
        except DeferredCheckFailed:
            if not beside:
                raise
            _restore_random_states(states)
            made_again += time.perf_counter() - started
            beside = False
            continue
        except SizesBothWaysRefused as failed:
            if isinstance(failed.error, CheckIOError) and failed.error.bundle:
                shutil.rmtree(failed.error.bundle, ignore_errors=True)
            refused = _example_side_note(failed.error, options.target)  # not the error: it holds the graph
            options = dataclasses.replace(options, capture=dataclasses.replace(options.capture, branches="example"))
            beside, states, started = True, _random_states(), time.perf_counter()
            continue
        if made_again:
            result.timings["made_again"] = made_again
        if refused is not None:
            result.notes.append(refused)
        return result


def _example_side_note(failure: Exception, target: InferenceTarget) -> str:
    if isinstance(failure, CheckIOError):
        reason = "outputs differ from PyTorch beyond tolerance"
    else:  # tract's last cause, before the advice line
        lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
        reason = lines[-2] if len(lines) > 2 else lines[0] if lines else ""
    return (f"the decisions on sizes exported both ways gave a graph {target.name} failed on "
            f"({type(failure).__name__}: {reason[:200]}); exported with each decision on the "
            "example's side instead, as branches='example' does")


def _random_states() -> tuple:
    """The states of torch's, Python's and NumPy's random generators."""
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()


def _restore_random_states(states: tuple) -> None:
    torch_state, python_state, numpy_state = states
    torch.random.set_rng_state(torch_state)
    random.setstate(python_state)
    np.random.set_state(numpy_state)


# one attempt: the stages in order --------------------------------------------------------------

def attempt(model: torch.nn.Module, args: tuple, kwargs: dict, path: Path, options: ExportOptions,
            checks_beside: bool) -> ExportResult:
    """Capture, IR passes, lower, write, check, finish. ``checks_beside``: the capture's check
    runs go on beside the lowering and the write (a failure raises ``DeferredCheckFailed``)."""
    timings: dict = {}
    with old_objects_skipped(), compiled_modules_unwrapped(model) as model, eval_mode(model) as autocast:
        with _timed(timings, "trace"):
            cap = capture_model(model, args, kwargs, options, checks_beside)
        if autocast:
            cap.notes.append(_autocast_note(autocast))
        timings.update(cap.runs)
        try:
            # the capture's check runs go on meanwhile (capture's rerun_beside)
            with cap.rerun_beside():
                return _after_capture(cap, path, options, timings)
        except (TractError, CheckIOError) as error:
            if options.capture.branches is not None or not cap.sizes_both_ways:
                raise
            raise SizesBothWaysRefused(error) from error


def _after_capture(cap: Capture, path: Path, options: ExportOptions, timings: dict) -> ExportResult:
    target = options.target
    check_asset_path(path)
    with _timed(timings if target.weights != "native" else {}, "weights"):
        weights = graph_passes(cap.graph, target, eligible=cap.owns_parameter)
    stored = [v for v in cap.graph.constants() if v.source.stored_format is not None]
    show = _show_progress(options.progress, sum(v.source.nbytes for v in cap.graph.constants()))
    with _timed(timings, "lower"), _bar(show, len(cap.graph.nodes), "lowering", "op") as bar:
        emitted = _lower_captured(cap, target, (lambda: bar.update(1)) if bar else None)
    with _timed(timings, "write"), _bar(show, asset_bytes(emitted.files), f"writing {path.name}", "B") as bar:
        staged = write(emitted, path, options.compression_level, bar.update if bar else None)
    with staged:  # deleted unless committed or moved into the debug bundle
        with _timed(timings, "trace"):  # what is left of it (see capture's rerun_beside); added to its time
            cap.wait_rerun()
        with _timed(timings, "check"):
            report, cases = check(cap, staged, target, stored)
        if report is not None and not report.ok:
            raise _mismatch(cap, staged, report, cases, path, options.debug_bundle or str(path) + ".debug")
        result = finish(staged, cap, target, emitted, report, timings, weights)
    # what the stored weights change in the model's outputs
    result.drift = stored_weights_drift(cap.reference, cases, target.weights) if stored and cases else None
    return result


def capture_model(model: torch.nn.Module, args: tuple, kwargs: dict, options: ExportOptions,
                  checks_beside: bool) -> Capture:
    """Stage 1: the target refuses what it cannot honour (``pre_trace``), then the model is
    traced, cleaned, probed and built into an ``ir.Graph`` (:func:`.fx_tracer.capture.capture`)."""
    options.target.pre_trace(model, args, kwargs)
    return capture(model, args, kwargs, options.capture, rerun_beside=checks_beside)


def graph_passes(graph: Graph, target: InferenceTarget, eligible: Optional[Callable] = None) -> list:
    """Stage 2: the target's passes over the IR (``post_trace``: its float32 regions and fusions),
    then its weight format (``eligible``: the constants that may be stored otherwise; Q4_0 scales
    chosen by the target's ``rounding``). Returns
    what each float parameter became (``WeightChoice``)."""
    target.post_trace(graph)
    return apply_weight_format(graph, target.weights, eligible=eligible,
                               rounding=getattr(target, "rounding", "minmax"),
                               calibrated=getattr(target, "calibrated", None))


def lower(graph: Graph, target: InferenceTarget, *, registry: Registry = REGISTRY,
          fragments: Optional[dict] = None, asserts: Optional[list] = None,
          on_node: Optional[Callable[[], None]] = None) -> Emitted:
    """Stage 3: ``graph`` lowered to NNEF for ``target``: its rule set and ``bool_bits``, its
    fragments (then ``fragments``) and its assertions on the symbols (``asserts`` instead when
    given); ``registry``: the converters (a piece-by-piece plan adds its custom ops)."""
    extra = target.specific_fragments(graph)
    extra.update(fragments or {})
    return emit_graph(graph, target.name, registry=registry, bool_bits=target.bool_bits, extra_fragments=extra,
                      extra_asserts=target.specific_asserts(graph) if asserts is None else asserts,
                      on_node=on_node)


def _lower_captured(cap: Capture, target: InferenceTarget, on_node) -> Emitted:
    try:
        return lower(cap.graph, target, on_node=on_node)
    except UnsupportedOpError as error:
        if not cap.random_draws:
            raise
        raise UnsupportedOpError(f"{error}\n{random_draws_advice(cap.random_draws)}", error.problems) from error


def write(emitted: Emitted, path: Path, compression_level: Optional[int] = None,
          on_bytes: Optional[Callable[[int], None]] = None) -> StagedAsset:
    """Stage 4: the asset written once, to a hidden sibling of ``path`` (moved there by
    :func:`finish` once checked)."""
    return stage_asset(emitted.files, path, compression_level=compression_level, on_bytes=on_bytes)


def check(cap: Capture, staged: StagedAsset, target: InferenceTarget, stored: list) -> tuple:
    """Stage 5: ``(report, cases)``: the staged asset validated by the target and, with
    ``check_io``, run on the check cases (the model's outputs with the ``stored`` weights' values)
    and compared; a case that fails on positions picked among equal items is checked again on
    distinct values; a failure is then arbitrated by the model run in float64
    (:func:`.targets.rounding.arbitrate`: float32 rounding alone passes, with its figures).
    ``report`` is None without ``check_io``."""
    cases = cap.check_cases(stored) if target.check_io else []
    half = computed_in_half(cap.graph)
    report = target.post_export(staged.path, cap.input_names, cap.graph.output_names, cases, half)
    ties = _tie_recheck(cap, stored) if report is not None and not report.ok else None
    if ties is not None:  # positions picked among the equal items of repeated inputs
        report = recheck_ties(report, cases, ties, lambda sets: target.run(staged.path, sets),
                              lambda case, got: target.compare(cap.graph.output_names, case.expected, got, half))
    if report is not None and not report.ok:  # float32 rounding alone, or a wrong asset?
        report = arbitrate(report, cases, target.check_io_tolerance, lambda sets: target.run(staged.path, sets),
                           lambda: _float64_model(cap, stored), half)
    return report, cases


def run_in_engine(target: InferenceTarget, asset: Path, input_sets: list) -> list:
    """The asset's outputs for each input set in the target's engine, after the target's own
    validation (the piece-by-piece fallback compares them with its recorded calls)."""
    target.validate(asset)
    return target.run(asset, input_sets)


def finish(staged: StagedAsset, cap: Capture, target: InferenceTarget, emitted: Emitted,
           report: Optional[CheckReport], timings: dict, weights: list) -> ExportResult:
    """Stage 6: the checked asset moved to its path, and what the export produced."""
    final = staged.commit()
    return ExportResult.of(final, target, cap.graph, cap.input_names, emitted.source_op_counts,
                           emitted.nnef_op_counts, report, timings, emitted.text, cap.notes, weights)


# helpers of the stages ---------------------------------------------------------------------------

def _timed(timings: dict, key: str):
    @contextmanager
    def ctx():
        stage(key)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0
    return ctx()


def _autocast_note(autocast: list) -> str:
    return ("torch.autocast regions (" + ", ".join(f"{d} {str(t).replace('torch.', '')}" for d, t in autocast)
            + ") ran without autocast, in the types of their inputs: the export computes and is checked that way")


def _mismatch(cap: Capture, staged: StagedAsset, report: CheckReport, cases: list, path: Path,
              where: str) -> CheckIOError:
    """The error of a check that did not pass, the asset for ``path`` moved into a debug bundle at
    ``where``."""
    bundle = _write_bundle(where, staged, cap, report, cases)
    lines = [f"the exported asset's outputs differ from PyTorch beyond tolerance in {report.engine}:"]
    for label, diffs in report.cases:
        lines.append(f"  [{label}]")
        lines += ["    " + l for l in format_diffs(diffs).splitlines()]
    if report.float64 is not None:
        lines += report.float64.lines()
    lines.append(f"Nothing was written at {path}. A debug bundle (asset, inputs, expected and actual "
                 f"outputs) is at {bundle}; try {phrase('diagnose', 'diagnose()')} to find the submodule at "
                 f"fault, or a looser {spell('check_io_tolerance')} if the difference is expected "
                 "(e.g. float16).")
    if cap.random_draws:
        lines.append(random_draws_advice(cap.random_draws))
    return CheckIOError("\n".join(lines), [d for _, ds in report.cases for d in ds], str(bundle), report.float64)


def _float64_model(cap: Capture, stored: list) -> Callable[[list], list]:
    """The model run in float64 (``fx_tracer.float64_run``), which arbitrates a failed check."""
    if cap.runner is None:
        raise Float64Unavailable("not run: no model to run")
    if cap.random_draws:
        raise Float64Unavailable("not run: the model draws random numbers, which a float64 run draws otherwise")
    return float64_runner(cap.runner, stored)


def _tie_recheck(cap: Capture, stored: list) -> Optional[TieRecheck]:
    """How a check case that fails on the positions an ordering op picked (topk's indices) is
    checked again on distinct values; None when no output is computed from such positions or no
    axis is dynamic (no check input repeats the example's data)."""
    if not cap.dynamic_axes:
        return None
    from_indices = outputs_from_indices(cap.graph)
    if not any(from_indices):
        return None
    return TieRecheck(from_indices, lambda case: cap.distinct_case(case, stored))


def _show_progress(progress: Optional[bool], weight_bytes: int) -> bool:
    if progress is None:
        return weight_bytes > PROGRESS_MIN_BYTES and sys.stderr is not None and sys.stderr.isatty()
    return progress


@contextmanager
def _bar(show: bool, total: int, what: str, unit: str):
    """A tqdm bar on stderr (None when not shown or tqdm is missing)."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if not show or tqdm is None:
        yield None
        return
    with tqdm(total=total, desc=what, unit=unit, unit_scale=unit == "B", unit_divisor=1024 if unit == "B" else 1000,
              leave=False, file=sys.stderr) as bar:
        yield bar


def computed_in_half(graph: Graph) -> list:
    """For each output, whether a float16 value lies on its way from the inputs: a float32 output
    of a float16 model (``logits.float()``) carries float16 rounding and is compared at float16
    bounds."""
    half = {id(v) for v in graph.inputs if v.dtype == DType.F16}  # not the weights a format stores as f16
    for node in graph.nodes:
        if any(o.dtype == DType.F16 for o in node.outputs) or any(id(v) in half for v in node.inputs()):
            half.update(id(o) for o in node.outputs)
    return [id(v) in half or v.dtype == DType.F16 for v in graph.outputs]


def _write_bundle(where: str, staged: StagedAsset, cap: Capture, report: CheckReport, cases: list) -> Path:
    bundle = Path(where)
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    staged.move_to(bundle / staged.final.name)
    for case in cases:
        tag = sanitize(case.label)
        np.savez(bundle / f"inputs_{tag}.npz", **dict(zip(cap.input_names, case.inputs)))
        np.savez(bundle / f"expected_{tag}.npz", **dict(zip(cap.graph.output_names, case.expected)))
    (bundle / "report.txt").write_text("\n".join(
        f"[{label}]\n{format_diffs(diffs)}" for label, diffs in report.cases) + "\n")
    return bundle
