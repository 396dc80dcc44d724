"""The piece-by-piece report: one row per submodule, as text, Markdown, HTML and JSON.

JSON schema (``Report.to_json()``), version 1. Keys are always present; missing numbers
are ``null``::

    {
      "schema": "fx2nnef.piece_by_piece.report",
      "version": 1,
      "model": "LlamaForCausalLM",            # class of the diagnosed model
      "target": "tract",                      # target name
      "input_sets": 2,                        # number of recorded input sets
      "ok": false,                            # every piece exports, or has a working replacement
      "time_s": 12.3,
      "first_divergence": null | {"path": "model.layers.1.mlp", "class": "LlamaMLP",
                                  "max_abs": 0.2, "max_rel": 0.01},
      "no_replacement": ["bessel", ...],       # paths of the modules that block an export
      "modules": [                            # depth-first, children in execution order
        {"path": "",                          # "" is the model itself
         "class": "Net",
         "depth": 0,
         "parent": null,                      # parent path, null for the model
         "status": ["OK", "CHILDC"],          # flags: OK FAIL CHILDC CUSTOM DISC NOINPUT; [] = not tried
         "strategy": "ONLY_IF_FAILING",       # NONE | ONLY_IF_FAILING | ALWAYS | LOCAL
         "step": null | "trace" | "lower" | "emit" | "load" | "run" | "compare",
         "reason": "",                        # exception type and message of the failure
         "location": null | {"file": "...", "line": 12, "code": "return torch.fft.rfft(x)"},
         "guards": [{"what": "...", "kind": "shape" | "data", "status": "...", "note": "...",
                     "location": null | {"file": ..., "line": ..., "code": ...},
                     "decided": null | {...}}],      # the line that decided, when not "location"
         "max_abs": 0.0, "max_rel": 0.0,      # worst output difference over all checked calls
         "time_s": 0.4,
         "calls": 2,                          # recorded calls over all input sets
         "replacement": null | "extractor:BesselExtractor" | "fragment:custom_Block",
         "encapsulated": ["block"],           # descendants called as custom ops in this export
         "notes": ["..."]}
      ]
    }

Status flags: OK (exported on its own and matched PyTorch on every recorded call), FAIL
(could not be exported: see step and reason), CHILDC (exported with children encapsulated
as custom ops), CUSTOM (a custom op in its parent's export: an NNEF fragment or a module
extractor), DISC (exported and ran but the numbers differ, or a guard on tensor data took
another branch on another input set), NOINPUT (never called by the recorded runs).
"""
from __future__ import annotations

import dataclasses
import enum
import html
import json
import math
from typing import Optional

from ..ir import Guard, SourceLoc
from .strategies import Strategy

SCHEMA = "fx2nnef.piece_by_piece.report"
SCHEMA_VERSION = 1
STEPS = ("trace", "lower", "emit", "load", "run", "compare")


class Status(enum.Flag):
    """Flags of a row; they combine (``Status.OK | Status.CHILDC``)."""

    OK = enum.auto()
    FAIL = enum.auto()
    CHILDC = enum.auto()
    CUSTOM = enum.auto()
    DISC = enum.auto()
    NOINPUT = enum.auto()

    @property
    def names(self) -> list:
        return [s.name for s in Status if s in self]

    def __str__(self) -> str:
        return " ".join(self.names) or "-"


@dataclasses.dataclass(kw_only=True)
class Outcome:
    """What one try of a module gives: flags, failing step, reason and where, guards, numbers."""

    status: Status = Status(0)
    step: Optional[str] = None
    reason: str = ""
    location: Optional[SourceLoc] = None
    guards: list = dataclasses.field(default_factory=list)
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    time: float = 0.0


@dataclasses.dataclass
class Row(Outcome):
    """What the diagnoser found about one module."""

    path: str
    class_name: str
    depth: int
    parent: Optional[str]
    strategy: Strategy
    calls: int = 0
    replacement: Optional[str] = None
    encapsulated: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path or "(model)"

    @property
    def ok(self) -> bool:
        return Status.OK in self.status

    def where(self) -> str:
        if self.location is None:
            return ""
        code = f" `{self.location.code}`" if self.location.code else ""
        return f"at {self.location}{code}"

    def to_dict(self) -> dict:
        return {
            "path": self.path, "class": self.class_name, "depth": self.depth, "parent": self.parent,
            "status": self.status.names, "strategy": self.strategy.value, "step": self.step,
            "reason": self.reason, "location": _loc_dict(self.location),
            "guards": [_guard_dict(g) for g in self.guards],
            "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel), "time_s": round(self.time, 3),
            "calls": self.calls, "replacement": self.replacement, "encapsulated": list(self.encapsulated),
            "notes": list(self.notes),
        }


@dataclasses.dataclass
class Divergence:
    """The first module, in execution order, whose own output differs from PyTorch."""

    path: str
    class_name: str
    max_abs: Optional[float]
    max_rel: Optional[float]

    def __str__(self) -> str:
        return (f"{self.path or '(model)'} ({self.class_name}) max_abs={_fmt(self.max_abs)} "
                f"max_rel={_fmt(self.max_rel)}")


@dataclasses.dataclass
class Report:
    """One row per submodule (depth-first), plus what blocks an export."""

    model: str
    target: str
    input_sets: int
    rows: list
    first_divergence: Optional[Divergence] = None
    no_replacement: list = dataclasses.field(default_factory=list)
    time: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.rows) and self.rows[0].ok

    def row(self, path: str) -> Row:
        for r in self.rows:
            if r.path == path:
                return r
        raise KeyError(f"no module '{path}' in the report; modules: {[r.path for r in self.rows]}")

    def blocking_rows(self) -> list:
        return [self.row(p) for p in self.no_replacement]

    # renderings ----------------------------------------------------------------------
    def summary(self) -> str:
        counts: dict = {}
        for r in self.rows:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        return (f"fx2nnef piece-by-piece report: {self.model} for {self.target}, {self.input_sets} input set(s), "
                f"{len(self.rows)} modules ({parts}) in {self.time:.1f}s")

    def to_text(self) -> str:
        lines = [self.summary()]
        if self.first_divergence:
            lines.append(f"first divergence: {self.first_divergence}")
        if self.no_replacement:
            lines.append("no working replacement: " + ", ".join(r.label for r in self.blocking_rows()))
        width = max(len("  " * r.depth + r.label) for r in self.rows) + 2
        cls_w = max(len(r.class_name) for r in self.rows) + 2
        st_w = max([len('status')] + [len(str(r.status)) for r in self.rows]) + 2
        lines.append(f"{'module':<{width}}{'class':<{cls_w}}{'status':<{st_w}}{'strategy':<17}{'step':<9}"
                     f"{'max_abs':<10}{'time':>7}  calls")
        for r in self.rows:
            lines.append(f"{'  ' * r.depth + r.label:<{width}}{r.class_name:<{cls_w}}{str(r.status):<{st_w}}"
                         f"{r.strategy.value:<17}{r.step or '-':<9}{_fmt(r.max_abs):<10}{r.time:>6.2f}s  {r.calls}")
            pad = "  " * r.depth + "    "
            if r.reason:
                lines.append(f"{pad}{_first_line(r.reason)}" + (f"  {r.where()}" if r.where() else ""))
            for g in r.guards:
                if g.kind == "data" or g.status == "violated":
                    lines.append(f"{pad}guard {g}")
            if r.replacement:
                lines.append(f"{pad}custom op: {r.replacement}")
            if r.encapsulated:
                lines.append(f"{pad}custom ops: {', '.join(r.encapsulated)}")
            lines += [f"{pad}note: {n}" for n in r.notes]
        return "\n".join(lines)

    __str__ = to_text

    def to_markdown(self) -> str:
        lines = [f"**{_md(self.summary())}**", ""]
        if self.first_divergence:
            lines += [f"First divergence: `{self.first_divergence.path or '(model)'}` "
                      f"({self.first_divergence.class_name}), max abs {_fmt(self.first_divergence.max_abs)}, "
                      f"max rel {_fmt(self.first_divergence.max_rel)}", ""]
        if self.no_replacement:
            lines += ["No working replacement: " + ", ".join(f"`{r.label}`" for r in self.blocking_rows()), ""]
        lines.append("| module | class | status | strategy | step | reason | guards | max abs | max rel | time |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in self.rows:
            module = "&nbsp;&nbsp;" * r.depth + f"`{r.label}`"
            reason = _md(_first_line(r.reason)) + (f" ({_md(r.where())})" if r.where() else "")
            if r.replacement:
                reason += ("; " if reason else "") + f"custom op: {_md(r.replacement)}"
            guards = "<br>".join(_md(str(g)) for g in r.guards)
            lines.append(f"| {module} | {r.class_name} | {r.status} | {r.strategy.value} | {r.step or ''} | "
                         f"{reason} | {guards} | {_fmt(r.max_abs)} | {_fmt(r.max_rel)} | {r.time:.2f}s |")
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        """Nested ``<details>``, one per module: rows fold by depth."""
        children: dict = {}
        for r in self.rows[1:]:
            children.setdefault(r.parent, []).append(r)
        parts = [f"<div class='fx2nnef-report'><p><b>{html.escape(self.summary())}</b></p>"]
        if self.first_divergence:
            parts.append(f"<p>First divergence: <code>{html.escape(str(self.first_divergence))}</code></p>")
        if self.no_replacement:
            parts.append("<p>No working replacement: " + ", ".join(
                f"<code>{html.escape(r.label)}</code>" for r in self.blocking_rows()) + "</p>")
        if self.rows:
            parts.append(_html_row(self.rows[0], children, _troubled(self.rows)))
        parts.append("</div>")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "version": SCHEMA_VERSION, "model": self.model, "target": self.target,
            "input_sets": self.input_sets, "ok": self.ok, "time_s": round(self.time, 3),
            "first_divergence": None if self.first_divergence is None else {
                "path": self.first_divergence.path, "class": self.first_divergence.class_name,
                "max_abs": _num(self.first_divergence.max_abs), "max_rel": _num(self.first_divergence.max_rel)},
            "no_replacement": list(self.no_replacement),
            "modules": [r.to_dict() for r in self.rows],
        }

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


_COLORS = {"OK": "#2e7d32", "FAIL": "#c62828", "DISC": "#ef6c00", "CHILDC": "#1565c0", "CUSTOM": "#6a1b9a",
           "NOINPUT": "#757575"}


def _troubled(rows: list) -> set:
    """Paths of the rows that are not OK, and of their ancestors (their rows open in HTML)."""
    by_path = {r.path: r for r in rows}
    out: set = set()
    for r in rows:
        if r.status and not r.ok:
            node = r
            while node is not None and node.path not in out:
                out.add(node.path)
                node = by_path.get(node.parent) if node.parent is not None else None
    return out


def _html_row(r: Row, children: dict, troubled: set) -> str:
    badges = " ".join(f"<span style='color:{_COLORS[n]};font-weight:bold'>{n}</span>" for n in r.status.names) or "-"
    summary = (f"{badges} <code>{html.escape(r.label)}</code> {html.escape(r.class_name)}"
               + (f" &mdash; {html.escape(r.step)}: {html.escape(_first_line(r.reason))}" if r.step else ""))
    details = [("strategy", r.strategy.value), ("where", r.where()), ("reason", r.reason),
               ("max abs / rel", f"{_fmt(r.max_abs)} / {_fmt(r.max_rel)}"), ("time", f"{r.time:.2f}s"),
               ("calls", str(r.calls)), ("replacement", r.replacement or ""),
               ("custom ops", ", ".join(r.encapsulated)), ("guards", "\n".join(str(g) for g in r.guards)),
               ("notes", "\n".join(r.notes))]
    table = "".join(f"<tr><td>{k}</td><td><pre style='margin:0'>{html.escape(v)}</pre></td></tr>"
                    for k, v in details if v)
    kids = "".join(_html_row(c, children, troubled) for c in children.get(r.path, []))
    opened = " open" if r.depth < 1 or r.path in troubled else ""
    return (f"<details{opened} style='margin-left:{16 if r.depth else 0}px'><summary>{summary}</summary>"
            f"<table>{table}</table>{kids}</details>")


def _loc_dict(loc: Optional[SourceLoc]):
    return None if loc is None else {"file": loc.file, "line": loc.line, "code": loc.code}


def _guard_dict(g: Guard) -> dict:
    return {"what": g.what, "kind": g.kind, "status": g.status, "note": g.note, "location": _loc_dict(g.source),
            "decided": _loc_dict(g.decided)}


def _num(x: Optional[float]):
    return None if x is None or not math.isfinite(x) else float(x)


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g}"


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0] if text else ""


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
