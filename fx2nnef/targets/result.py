"""ExportResult: what an export produced, and how close the engine came to PyTorch.

It lives with the targets (below the api and piece_by_piece layers) so that both the plain
export and the piece-by-piece fallback return it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import phrase, spell
from ..ir import Graph
from .base import CheckReport
from .tolerance import format_diffs


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
    timings: dict  # seconds per stage; also graph_runs and eager_runs (ints) for a dynamic capture
    graph: Optional[Graph] = dataclasses.field(default=None, repr=False)
    nnef_text: str = dataclasses.field(default="", repr=False)
    notes: list = dataclasses.field(default_factory=list)
    weights: list = dataclasses.field(default_factory=list)  # WeightChoice per float parameter
    # the drift of the stored weights (f16, Q4_0) from the model's own (fx2nnef.targets.drift.Drift)
    drift: Optional[object] = None

    @property
    def weight_formats(self) -> dict:
        """``parameter path -> how it is stored`` ("q4_0", "f16" or its dtype)."""
        return {w.path: w.stored for w in self.weights}

    @classmethod
    def of(cls, path: Path, target, graph: Graph, input_names: list, source_op_counts: dict,
           nnef_op_counts: dict, check: Optional[CheckReport], timings: dict, nnef_text: str,
           notes: list, weights: Optional[list] = None) -> "ExportResult":
        """The result of exporting ``graph`` for ``target`` (names, symbols, guards from the graph)."""
        return cls(path, type(target).__name__, list(input_names), graph.output_names, graph.symbols,
                   source_op_counts, nnef_op_counts, check, graph.guards, timings, graph, nnef_text, notes,
                   list(weights or []))

    @property
    def ranges(self) -> dict:
        """``symbol -> SymRange`` for the symbols whose sizes the export is restricted to
        (bounds, or every N-th size); a symbol absent here is valid for every size >= 1."""
        return dict(self.graph.ranges) if self.graph is not None else {}

    @property
    def max_abs_diff(self) -> float:
        if not self.check:
            return float("nan")
        values = [d.max_abs for _, diffs in self.check.cases for d in diffs]
        return float(np.nanmax(values)) if values and not all(np.isnan(values)) else float("nan")

    def __str__(self) -> str:
        return self.summary()

    def summary(self, verbose: bool = False) -> str:
        """What was written, checked and skipped, and how to run it; ``verbose`` lists every guard."""
        lines = [f"fx2nnef export -> {self.path} (target {self.target})"]
        lines.append(f"  inputs:  {', '.join(self.input_names)}" + (f"   symbols: {', '.join(self.symbols)}" if self.symbols else ""))
        lines.append(f"  outputs: {', '.join(self.output_names)}")
        n_src = sum(self.source_op_counts.values())
        lines.append(f"  ops: {n_src} source ops of {len(self.source_op_counts)} kinds -> "
                     f"{sum(self.nnef_op_counts.values())} NNEF ops of {len(self.nnef_op_counts)} kinds")
        lines.append("    " + ", ".join(f"{k} x{v}" for k, v in list(self.source_op_counts.items())[:12])
                     + (" ..." if len(self.source_op_counts) > 12 else ""))
        if self.check:
            against = " (against the model holding the stored weights)" if self.drift is not None else ""
            lines.append(f"  check in {self.check.engine}: {'OK' if self.check.ok else 'FAILED'}{against}")
            for label, diffs in self.check.cases:
                lines.append(f"    [{label}]")
                lines += ["      " + l for l in format_diffs(diffs).splitlines()]
            lines += [f"    note: {n}" for n in self.check.notes]
        else:
            lines.append(f"  check: not run ({spell('check_io', False)})")
        if self.ranges:
            lines.append("  valid for: " + "; ".join(str(r) for r in self.ranges.values()))
        lines += guard_lines(self.guards, verbose)
        lines += _weight_lines(self.weights)
        if self.drift is not None:
            lines.append("  drift from the original weights (informative, not a check): " + self.drift.summary())
            lines.append(f"    {self.drift.what}")
        elif not self.check and any(w.stored_bytes != w.native_bytes for w in self.weights):
            lines.append("  drift from the original weights: not measured (the check did not run)")
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in self.timings.items()))
        if self.target == "TractNNEF":
            lines.append(f"  run: fx2nnef.run({str(self.path)!r}, inputs) (or fx2nnef run {self.path} INPUTS.npz)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


# statuses a summary always lists one by one: the export is narrower than the model there
_NOTABLE = ("violated", "bounds", "baked")
_STATUS_WORDS = {"checked": "checked at other sizes", "kept": "kept (the sizes are fixed)",
                 "merged": "merged (both outcomes exported)", "bounds": "bounding the range",
                 "baked": "on data (one branch exported)", "violated": "violated"}


def guard_lines(guards: list, verbose: bool = False, listed: str = "") -> list:
    """The summary's guard lines: one count line, then the guards that narrow the export (a
    bound, a violation, a decision on data); every guard with ``verbose``. ``listed``: where
    the guards not shown are listed (default: the verbose summary)."""
    if not guards:
        return []
    counts: dict = {}
    for g in guards:
        counts[g.status] = counts.get(g.status, 0) + 1
    shape = sum(1 for g in guards if g.kind == "shape")
    kinds = f"{shape} shape decision{'s' if shape != 1 else ''}" + \
        (f" and {len(guards) - shape} on data" if len(guards) > shape else "")
    if len(counts) == 1:
        status = next(iter(counts))
        head = f"  guards: {kinds}, all {_STATUS_WORDS.get(status, status)}"
    else:
        head = f"  guards: {kinds}: " + ", ".join(f"{n} {_STATUS_WORDS.get(s, s)}" for s, n in counts.items())
    shown = guards if verbose else [g for g in guards if g.status in _NOTABLE]
    hidden = len(guards) - len(shown)
    listed = listed or phrase("verbose", "summary(verbose=True)")
    lines = [head + (f" ({listed} lists them)" if hidden else "")]
    lines += [f"    {g}" for g in shown[:40 if verbose else 10]]
    if len(shown) > (40 if verbose else 10):
        lines.append(f"    ... {len(shown) - (40 if verbose else 10)} more")
    return lines


def _weight_lines(weights: list) -> list:
    """A summary of the stored weight formats, when any parameter was converted or refused."""
    if not any(w.stored_bytes != w.native_bytes or w.reason for w in weights):
        return []
    counts: dict = {}
    for w in weights:
        counts[w.stored] = counts.get(w.stored, 0) + 1
    before = _size(sum(w.native_bytes for w in weights))
    after = _size(sum(w.stored_bytes for w in weights))
    lines = ["  weights: " + ", ".join(f"{n} {fmt}" for fmt, n in counts.items()) + f" ({before} -> {after})"]
    kept = [w for w in weights if w.reason and len(w.shape) >= 2]
    lines += [f"    kept {w}" for w in kept[:8]]
    if len(kept) > 8:
        lines.append(f"    ... {len(kept) - 8} more kept native")
    return lines


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 * 10:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
