"""``export(..., fallback="piece_by_piece")``: one asset, with failing pieces as custom ops.

The model is exported whole first. When that fails, its children are examined (and theirs,
only where they fail too); every failing piece with a working replacement (a registered
module extractor, or its own export with its failing children encapsulated) becomes a
custom op and the parent is traced again. The asset is written only once it has run in
the target and matched PyTorch on the example inputs (and on a second size of each
declared dynamic dim). Otherwise :class:`PieceByPieceError` lists exactly the modules that
have no working replacement, each with its reason.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch

from ..errors import Fx2NnefError, InvalidArgumentError, phrase
from ..fx_tracer.model_mode import eval_mode
from ..nnef_emit import REGISTRY, write_asset
from ..nnef_emit.registry import Registry
from ..targets import CheckReport, InferenceTarget, TractNNEF
from ..targets.result import ExportResult
from .attempt import Exporter
from .diagnose import Diagnoser, prepare
from .report import Report


class PieceByPieceError(Fx2NnefError):
    """Some modules fail and have no working replacement; ``report`` has one row per module."""

    def __init__(self, message: str, report: Report):
        super().__init__(message)
        self.report = report


def export_with_fallback(model: torch.nn.Module, args=(), path=None, *, kwargs: Optional[dict] = None,
                         target: Optional[InferenceTarget] = None, input_names: Optional[list] = None,
                         output_names: Optional[list] = None, strategies: Optional[dict] = None,
                         registry: Optional[Registry] = None, branches: Optional[str] = None,
                         max_loop_iterations: Optional[int] = None):
    """Export ``model(*args, **kwargs)`` to ``path``, encapsulating failing pieces as custom ops.

    Returns an :class:`fx2nnef.ExportResult` whose notes name the custom ops; raises
    :class:`PieceByPieceError` when some failing module has no working replacement.
    """

    t0 = time.perf_counter()
    target = target if target is not None else TractNNEF()
    if path is None:
        raise InvalidArgumentError("export needs an output path, e.g. 'model.nnef.tgz' or a folder name")
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    with eval_mode(model):
        names, recording = prepare(model, [(tuple(args), dict(kwargs or {}))], target, input_names)
        exporter = Exporter(target, registry or REGISTRY, branches, max_loop_iterations)
        diag = Diagnoser(recording, exporter, strategies, eager=False, root_names=names,
                         root_output_names=output_names)
        root = diag.visit(recording.root)
    report = diag.report(time.perf_counter() - t0)
    attempt = root.attempt
    if attempt is None or not attempt.ok:
        raise PieceByPieceError(_failure_message(report), report)
    final = write_asset(attempt.files, Path(path))
    notes = [f"piece_by_piece: {row.label} ({row.class_name}) is a custom op: {row.replacement}"
             for row in report.rows if row.replacement and "CUSTOM" in row.status.names]
    notes += [f"piece_by_piece: fragment {name} defined once, used by {n} module(s)"
              for name, n in sorted(attempt.library.calls.items())]
    graph = attempt.plan.graph
    check = CheckReport(target.name, attempt.cases)
    return ExportResult.of(final, target, graph, names, attempt.source_op_counts, attempt.nnef_op_counts,
                           check, {"piece_by_piece": time.perf_counter() - t0}, attempt.text, notes)


def _failure_message(report: Report) -> str:
    rows = report.blocking_rows()
    lines = [f"piece-by-piece export of {report.model} failed: {len(rows)} module(s) fail with no working "
             "replacement; nothing was written:"]
    for r in rows:
        where = f" {r.where()}" if r.where() else ""
        lines.append(f"  - {r.label} ({r.class_name}): {r.step}: {r.reason.strip().splitlines()[0] if r.reason else ''}{where}")
    if report.first_divergence:
        lines.append(f"first divergence: {report.first_divergence}")
    lines.append("Register a ModuleInfoExtractor for these classes (fx2nnef.nnef_emit.extractors.register_extractor) "
                 "or change their code; the full report is " + phrase("error.report", "on this error's .report") + ".")
    return "\n".join(lines)
