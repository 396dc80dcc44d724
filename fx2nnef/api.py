"""``fx2nnef.export``: trace, lower, write and check a model in one call."""
from __future__ import annotations

import dataclasses
import inspect
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .errors import CheckIOError, Fx2NnefError, GuardError, InvalidArgumentError
from .fx_tracer import structures
from .fx_tracer.capture import Capture, capture
from .piece_by_piece.record import eval_mode
from .ir import Graph, sanitize
from .nnef_emit import emit_graph, write_asset
from .nnef_emit.extractors import registered_module_classes
from .targets import CheckCase, CheckReport, InferenceTarget, TractNNEF
from .targets.base import as_numpy
from .targets.tolerance import format_diffs

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")


@dataclasses.dataclass
class ExportResult:
    """What an export produced: where, which ops, how close to PyTorch, how long each stage took."""

    path: Path
    target: str
    input_names: list
    output_names: list
    symbols: list
    source_op_counts: dict
    nnef_op_counts: dict
    check: Optional[CheckReport]
    guards: list
    timings: dict
    graph: Optional[Graph] = dataclasses.field(default=None, repr=False)
    nnef_text: str = dataclasses.field(default="", repr=False)
    notes: list = dataclasses.field(default_factory=list)

    @property
    def max_abs_diff(self) -> float:
        if not self.check:
            return float("nan")
        values = [d.max_abs for _, diffs in self.check.cases for d in diffs]
        return float(np.nanmax(values)) if values and not all(np.isnan(values)) else float("nan")

    def __str__(self) -> str:
        lines = [f"fx2nnef export -> {self.path} (target {self.target})"]
        lines.append(f"  inputs:  {', '.join(self.input_names)}" + (f"   symbols: {', '.join(self.symbols)}" if self.symbols else ""))
        lines.append(f"  outputs: {', '.join(self.output_names)}")
        n_src = sum(self.source_op_counts.values())
        lines.append(f"  ops: {n_src} source ops of {len(self.source_op_counts)} kinds -> "
                     f"{sum(self.nnef_op_counts.values())} NNEF ops of {len(self.nnef_op_counts)} kinds")
        lines.append("    " + ", ".join(f"{k} x{v}" for k, v in list(self.source_op_counts.items())[:12])
                     + (" ..." if len(self.source_op_counts) > 12 else ""))
        if self.check:
            lines.append(f"  check in {self.check.engine}: {'OK' if self.check.ok else 'FAILED'}")
            for label, diffs in self.check.cases:
                lines.append(f"    [{label}]")
                lines += ["      " + l for l in format_diffs(diffs).splitlines()]
        else:
            lines.append("  check: not run (check_io=False)")
        if self.guards:
            lines.append(f"  guards ({len(self.guards)}):")
            lines += [f"    {g}" for g in self.guards[:10]]
            if len(self.guards) > 10:
                lines.append(f"    ... {len(self.guards) - 10} more")
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


def _timed(timings: dict, key: str):
    @contextmanager
    def ctx():
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0
    return ctx()


def export(model: torch.nn.Module, args=(), path=None, *, kwargs: Optional[dict] = None,
           target: Optional[InferenceTarget] = None, input_names: Optional[list] = None,
           output_names: Optional[list] = None, fallback: Optional[str] = None,
           leaf_modules: tuple = (), debug_bundle: Optional[str] = None) -> ExportResult:
    """Export ``model(*args, **kwargs)`` to NNEF at ``path`` and check it in ``target``.

    ``path`` ending in ``.nnef.tgz``/``.tgz``/``.tar.gz`` or ``.tar`` gives an archive (files
    at its root), anything else a folder. The asset is only written once it has passed the
    target's checks; on a numerical mismatch a debug bundle is kept and its path is given
    in the error.
    """
    target = target if target is not None else TractNNEF()
    if path is None:
        raise InvalidArgumentError("export() needs an output path, e.g. 'model.nnef.tgz' or a folder name")
    if fallback not in (None, "piece_by_piece"):
        raise InvalidArgumentError(f"fallback must be None or 'piece_by_piece', got {fallback!r}")
    if fallback == "piece_by_piece":
        from .piece_by_piece import export_with_fallback

        return export_with_fallback(model, args, path, kwargs=kwargs, target=target, input_names=input_names,
                                    output_names=output_names)
    timings: dict = {}
    with eval_mode(model):
        with _timed(timings, "trace"):
            cap = capture(model, args, kwargs or {}, target=target, input_names=input_names,
                          output_names=output_names,
                          leaf_modules=tuple(leaf_modules) + tuple(registered_module_classes()))
        return _lower_write_check(cap, Path(path), target, timings, debug_bundle)


def _lower_write_check(cap: Capture, path: Path, target: InferenceTarget, timings: dict,
                       debug_bundle: Optional[str]) -> ExportResult:
    _check_out_path(path)
    target.post_trace(cap.graph)
    with _timed(timings, "lower"):
        emitted = emit_graph(cap.graph, target.name, bool_bits=target.bool_bits,
                             extra_fragments=target.specific_fragments(cap.graph))
    with tempfile.TemporaryDirectory(prefix="fx2nnef_") as tmp:
        staged = write_asset(emitted.files, Path(tmp) / path.name)
        with _timed(timings, "check"):
            report = target.post_export(staged, cap.input_names, cap.graph.output_names, cap.check_cases())
        if report is not None and not report.ok:
            bundle = _write_bundle(debug_bundle or str(path) + ".debug", staged, cap, report)
            lines = [f"the exported asset's outputs differ from PyTorch beyond tolerance in {report.engine}:"]
            for label, diffs in report.cases:
                lines.append(f"  [{label}]")
                lines += ["    " + l for l in format_diffs(diffs).splitlines()]
            lines.append(f"Nothing was written at {path}. A debug bundle (asset, inputs, expected and actual "
                         f"outputs) is at {bundle}; try diagnose() to find the submodule at fault, or a looser "
                         "check_io_tolerance if the difference is expected (e.g. float16).")
            raise CheckIOError("\n".join(lines), [d for _, ds in report.cases for d in ds], str(bundle))
        with _timed(timings, "write"):
            final = write_asset(emitted.files, path)
    return ExportResult(final, type(target).__name__, cap.input_names, cap.graph.output_names, cap.graph.symbols,
                        emitted.source_op_counts, emitted.nnef_op_counts, report, cap.graph.guards, timings,
                        cap.graph, emitted.text, cap.notes)


def _check_out_path(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise InvalidArgumentError(f"cannot write {path}: {parent} is a file, not a folder")
    if not parent.exists():
        raise InvalidArgumentError(f"cannot write {path}: folder {parent} does not exist; create it first")


def _write_bundle(where: str, staged: Path, cap: Capture, report: CheckReport) -> Path:
    bundle = Path(where)
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    target = bundle / staged.name
    if staged.is_dir():
        shutil.copytree(staged, target)
    else:
        shutil.copy2(staged, target)
    for case in cap.check_cases():
        tag = sanitize(case.label)
        np.savez(bundle / f"inputs_{tag}.npz", **dict(zip(cap.input_names, case.inputs)))
        np.savez(bundle / f"expected_{tag}.npz", **dict(zip(cap.graph.output_names, case.expected)))
    (bundle / "report.txt").write_text("\n".join(
        f"[{label}]\n{format_diffs(diffs)}" for label, diffs in report.cases) + "\n")
    return bundle
