"""``fx2nnef.export``: trace, lower, write and check a model in one call."""
from __future__ import annotations

import gc
import random
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .errors import CheckIOError, InvalidArgumentError, TractError, UnsupportedOpError, phrase, spell
from .fx_tracer.branches import AT_SIZE
from .fx_tracer.capture import Capture, capture
from .fx_tracer.shapes.probe import DeferredCheckFailed
from .fx_tracer.random_draws import random_draws_advice
from .piece_by_piece.record import eval_mode
from .progress import stage
from .ir import DType, apply_weight_format, sanitize
from .ir.check import outputs_from_indices
from .nnef_emit import emit_graph
from .nnef_emit.archive import StagedAsset, asset_bytes, check_asset_path, check_compression_level, stage_asset
from .nnef_emit.extractors import registered_module_classes
from .targets import CheckReport, InferenceTarget, TractNNEF
from .targets.base import TieRecheck, recheck_ties
from .targets.drift import stored_weights_drift
from .targets.result import ExportResult
from .targets.tolerance import format_diffs

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
# Below this many bytes of weights an export takes seconds: no progress bar.
PROGRESS_MIN_BYTES = 100 * 2**20


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


@contextmanager
def _old_objects_skipped():
    """Keep the objects alive before the export out of the garbage collector's full passes while
    it runs (``gc.freeze``), then give them back (``gc.unfreeze``).

    A process that imported torch, transformers and sympy holds about a million tracked objects;
    the symbolic replay creates enough new ones to set off full collections that walk them all,
    a tenth of a second each, for nothing: what the export leaves behind is among its own objects,
    which are still collected. A caller's own ``gc.freeze()`` is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def export(model: torch.nn.Module, args=(), path=None, *, kwargs: Optional[dict] = None,
           target: Optional[InferenceTarget] = None, input_names: Optional[list] = None,
           output_names: Optional[list] = None, fallback: Optional[str] = None,
           leaf_modules: tuple = (), debug_bundle: Optional[str] = None,
           compression_level: Optional[int] = None, progress: Optional[bool] = None,
           max_loop_iterations: Optional[int] = None, branches: Optional[str] = None,
           scalars_as_inputs: bool = False) -> ExportResult:
    """Export ``model(*args, **kwargs)`` to NNEF at ``path`` and check it in ``target``.

    ``path`` ending in ``.nnef.tgz``/``.tgz``/``.tar.gz`` or ``.tar`` gives an archive (files
    at its root), anything else a folder. The asset is written once, next to ``path``, checked
    there, and renamed to ``path`` only once it has passed the target's checks; on a numerical
    mismatch a debug bundle is kept and its path is given in the error. The weights are read
    from the model's own tensors while they are written (no copy of the model in memory).

    ``compression_level`` (0-9) sets the gzip level of a ``.tgz``; the default, 0, stores
    (float weights shrink by a few percent only, at a tenth of the speed). ``progress``:
    None shows a progress bar (tqdm) over lowering and writing when the weights exceed
    100 MiB and stderr is a terminal; False never, True always.

    ``max_loop_iterations`` bounds every ``torch._higher_order_ops.while_loop``: NNEF has no
    while loop, so the loop becomes that many steps, the extra ones leaving the carries
    unchanged. Without it, a loop is exported only when a size of its carried tensors bounds
    its trip count (``while i < x.size(0)``).

    ``branches``: what becomes of the forward's Python decisions.

    - None (default): a Python ``if`` on the dynamic sizes (``if x.shape[1] < 7:``) whose other
      outcome computes otherwise would make the export valid on the example's side only; it is
      traced both ways instead and, where both outcomes give outputs of the same shapes and
      dtypes, the outputs are merged with select on the same comparison of the sizes, so the
      asset holds on both sides (checked there by the probes and by check_io). Where they cannot
      be merged, the range stays bounded and asserted; where tract fails on the merged graph, the
      export is made again as with ``"example"`` and a note says why. A graph that still differs
      from the model at S=1 only (a one-token step whose shapes hold at S=1) gets the forward
      traced at S=1 beside it, selected where S == 1. A decision on tensor data keeps the
      example's outcome.
    - ``"select"``: in addition, a Python ``if`` on tensor data (``if x.sum() > 0:``,
      ``if t.item() > 0.5:``) is traced both ways and merged with select on the traced condition,
      so the asset is right for either outcome (at most 8 paths through such decisions).
    - ``"example"``: every decision keeps the example's outcome; one on sizes bounds the range.

    ``result.guards`` marks each decision "merged", or says why it could not be merged.

    ``scalars_as_inputs=True``: top-level ``int``/``float`` arguments of ``args``/``kwargs`` become
    rank-0 inputs (int64 / float32, named after the forward's parameters) instead of constants,
    so the asset takes other values of them. A Python decision on such a scalar is a decision on
    input data (see ``result.guards``).
    """
    target = target if target is not None else TractNNEF()
    if path is None:
        raise InvalidArgumentError("export() needs an output path, e.g. 'model.nnef.tgz' or a folder name")
    check_compression_level(compression_level)
    if progress not in (None, True, False):
        raise InvalidArgumentError(f"progress must be None (automatic), True or False, got {progress!r}")
    if fallback not in (None, "piece_by_piece"):
        raise InvalidArgumentError(f"fallback must be None or 'piece_by_piece', got {fallback!r}")
    if fallback == "piece_by_piece":
        if getattr(target, "weights", "native") != "native":
            raise InvalidArgumentError(
                f"{spell('fallback', 'piece_by_piece')} writes weights natively only; got "
                f"{spell('weights', target.weights)}. "
                f"Export without the fallback, or with {spell('weights', 'native')}")
        from .piece_by_piece import export_with_fallback

        return export_with_fallback(model, args, path, kwargs=kwargs, target=target, input_names=input_names,
                                    output_names=output_names, branches=branches,
                                    max_loop_iterations=max_loop_iterations)
    options = dict(kwargs=kwargs, target=target, input_names=input_names, output_names=output_names,
                   leaf_modules=leaf_modules, debug_bundle=debug_bundle, compression_level=compression_level,
                   progress=progress, max_loop_iterations=max_loop_iterations, branches=branches,
                   scalars_as_inputs=scalars_as_inputs)
    generators = _random_states()
    started = time.perf_counter()
    try:
        return _export(model, args, path, beside=True, **options)
    except DeferredCheckFailed:
        # a check the capture took for passed, run beside the write, did not pass: the export again
        # with every check run in its place gives what that check gives there (an error, a
        # narrower range); nothing was written. It starts from the random generators' states the
        # first one started from: a model that draws draws the same numbers
        _restore_random_states(generators)
        first = time.perf_counter() - started
    result = _export(model, args, path, beside=False, **options)
    result.timings["made_again"] = first  # the seconds of the first export, whose check did not pass
    return result


def _random_states() -> tuple:
    """The states of torch's, Python's and NumPy's random generators."""
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()


def _restore_random_states(states: tuple) -> None:
    torch_state, python_state, numpy_state = states
    torch.random.set_rng_state(torch_state)
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def _export(model, args, path, *, kwargs, target, input_names, output_names, leaf_modules, debug_bundle,
            compression_level, progress, max_loop_iterations, branches, scalars_as_inputs,
            beside: bool) -> ExportResult:
    """:func:`export` after its arguments are checked; ``beside``: the capture's check runs go on
    beside the lowering and the write (capture's ``rerun_beside``)."""
    timings: dict = {}
    with _old_objects_skipped(), _compiled_modules_unwrapped(model) as model, eval_mode(model) as autocast:
        with _timed(timings, "trace"):
            cap = capture(model, args, kwargs or {}, target=target, input_names=input_names,
                          output_names=output_names,
                          leaf_modules=tuple(leaf_modules) + tuple(registered_module_classes()),
                          max_loop_iterations=max_loop_iterations, branches=branches,
                          scalars_as_inputs=scalars_as_inputs, rerun_beside=beside)
        if autocast:
            cap.notes.append("torch.autocast regions (" + ", ".join(f"{d} {str(t).replace('torch.', '')}"
                                                                     for d, t in autocast)
                             + ") ran without autocast, in the types of their inputs: the export computes and "
                               "is checked that way")
        timings.update(cap.runs)
        try:
            # the capture's check runs go on meanwhile (capture's rerun_beside)
            with cap.rerun_beside():
                return _lower_write_check(cap, Path(path), target, timings, debug_bundle, compression_level,
                                          progress)
        except (TractError, CheckIOError) as error:
            merged = any(g.kind == "shape" and g.status == "merged" for g in cap.graph.guards) or \
                any(AT_SIZE in n for n in cap.control_flow)
            if branches is not None or not merged:
                raise
            failure = error
    # a decision on sizes exported both ways (the default) gave a graph the engine refused or
    # computed otherwise: the export with each decision on the example's side, its range asserted,
    # rather than an error (branches="example" asks for it directly)
    if isinstance(failure, CheckIOError) and failure.bundle:
        shutil.rmtree(failure.bundle, ignore_errors=True)
    result = export(model, args, path, kwargs=kwargs, target=target, input_names=input_names,
                    output_names=output_names, leaf_modules=leaf_modules, debug_bundle=debug_bundle,
                    compression_level=compression_level, progress=progress,
                    max_loop_iterations=max_loop_iterations, branches="example", scalars_as_inputs=scalars_as_inputs)
    if isinstance(failure, CheckIOError):
        reason = "outputs differ from PyTorch beyond tolerance"
    else:  # tract's last cause, before the advice line
        lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
        reason = lines[-2] if len(lines) > 2 else lines[0] if lines else ""
    result.notes.append(f"the decisions on sizes exported both ways gave a graph {target.name} failed on "
                        f"({type(failure).__name__}: {reason[:200]}); exported with each decision on the "
                        "example's side instead, as branches='example' does")
    return result


def _lower_write_check(cap: Capture, path: Path, target: InferenceTarget, timings: dict,
                       debug_bundle: Optional[str], compression_level: Optional[int] = None,
                       progress: Optional[bool] = None) -> ExportResult:
    check_asset_path(path)
    target.post_trace(cap.graph)
    fmt = getattr(target, "weights", "native")
    with _timed(timings if fmt != "native" else {}, "weights"):
        weights = apply_weight_format(cap.graph, fmt, eligible=cap.owns_parameter,
                                      rounding=getattr(target, "rounding", "minmax"))
    stored = [v for v in cap.graph.constants() if v.source.stored_format is not None]
    weight_bytes = sum(v.source.nbytes for v in cap.graph.constants())
    show = _show_progress(progress, weight_bytes)
    with _timed(timings, "lower"), _bar(show, len(cap.graph.nodes), "lowering", "op") as bar:
        try:
            emitted = emit_graph(cap.graph, target.name, bool_bits=target.bool_bits,
                                 extra_fragments=target.specific_fragments(cap.graph),
                                 extra_asserts=target.specific_asserts(cap.graph),
                                 on_node=(lambda: bar.update(1)) if bar else None)
        except UnsupportedOpError as error:
            if not cap.random_draws:
                raise
            raise UnsupportedOpError(f"{error}\n{random_draws_advice(cap.random_draws)}", error.problems) from error
    with _timed(timings, "write"), _bar(show, asset_bytes(emitted.files), f"writing {path.name}", "B") as bar:
        staged = stage_asset(emitted.files, path, compression_level=compression_level,
                             on_bytes=bar.update if bar else None)
    with staged:  # deleted unless committed or moved into the debug bundle
        with _timed(timings, "trace"):  # what is left of it (see capture's rerun_beside); added to its time
            cap.wait_rerun()
        with _timed(timings, "check"):
            cases = cap.check_cases(stored) if target.check_io else []
            half = _computed_in_half(cap.graph)
            report = target.post_export(staged.path, cap.input_names, cap.graph.output_names, cases, half)
            ties = _tie_recheck(cap, stored) if report is not None and not report.ok else None
            if ties is not None:  # positions picked among the equal items of repeated inputs
                report = recheck_ties(report, cases, ties, lambda sets: target.run(staged.path, sets),
                                      lambda case, got: target.compare(cap.graph.output_names, case.expected,
                                                                       got, half))
        if report is not None and not report.ok:
            bundle = _write_bundle(debug_bundle or str(path) + ".debug", staged, cap, report, cases)
            lines = [f"the exported asset's outputs differ from PyTorch beyond tolerance in {report.engine}:"]
            for label, diffs in report.cases:
                lines.append(f"  [{label}]")
                lines += ["    " + l for l in format_diffs(diffs).splitlines()]
            lines.append(f"Nothing was written at {path}. A debug bundle (asset, inputs, expected and actual "
                         f"outputs) is at {bundle}; try {phrase('diagnose', 'diagnose()')} to find the submodule at "
                         f"fault, or a looser {spell('check_io_tolerance')} if the difference is expected "
                         "(e.g. float16).")
            if cap.random_draws:
                lines.append(random_draws_advice(cap.random_draws))
            raise CheckIOError("\n".join(lines), [d for _, ds in report.cases for d in ds], str(bundle))
        final = staged.commit()
    result = ExportResult.of(final, target, cap.graph, cap.input_names, emitted.source_op_counts,
                             emitted.nnef_op_counts, report, timings, emitted.text, cap.notes, weights)
    result.drift = stored_weights_drift(cap.reference, cases, fmt) if stored and cases else None
    return result


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


@contextmanager
def _compiled_modules_unwrapped(model: torch.nn.Module):
    """``torch.compile``d submodules (and model) replaced by the modules they wrap for the export:
    the reference runs then compile nothing (an inductor compile at every probed size takes
    minutes), and the trace follows the module's own Python."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # pragma: no cover - builds without dynamo
        yield model
        return
    while isinstance(model, OptimizedModule):
        model = model._orig_mod
    swapped = [(parent, name, child) for parent in model.modules()
               for name, child in parent._modules.items() if isinstance(child, OptimizedModule)]
    for parent, name, child in swapped:
        inner = child
        while isinstance(inner, OptimizedModule):
            inner = inner._orig_mod
        parent._modules[name] = inner
    try:
        yield model
    finally:
        for parent, name, child in swapped:
            parent._modules[name] = child


def _computed_in_half(graph) -> list:
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
