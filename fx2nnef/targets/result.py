"""ExportResult: what an export produced, and how close the engine came to PyTorch.

It lives with the targets (below the api and piece_by_piece layers) so that both the plain
export and the piece-by-piece fallback return it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import spell
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
            lines += [f"    note: {n}" for n in self.check.notes]
        else:
            lines.append(f"  check: not run ({spell('check_io', False)})")
        if self.ranges:
            lines.append("  valid for: " + "; ".join(str(r) for r in self.ranges.values()))
        if self.guards:
            lines.append(f"  guards ({len(self.guards)}):")
            lines += [f"    {g}" for g in self.guards[:10]]
            if len(self.guards) > 10:
                lines.append(f"    ... {len(self.guards) - 10} more")
        lines += _weight_lines(self.weights)
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in self.timings.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


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
