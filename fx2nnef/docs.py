"""The supported-op page, generated from the op registry (``fx2nnef ops --write docs/ops.md``)."""
from __future__ import annotations

import inspect


# keys that name a source op (others, such as "nnef.cast", are internal kinds converters call)
SOURCE_PREFIXES = ("torch.", "Tensor.", "F.", "operator.", "nn.", "builtins.", "math.", "fx2nnef.")


def _first_doc_line(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.splitlines()[0] if doc else ""


def supported_ops_markdown() -> str:
    from . import targets  # noqa: F401 - each target's package registers its lowering overrides
    from .nnef_emit import REGISTRY
    from .nnef_emit.registry import base_targets

    targets = base_targets()
    rows = {}
    for (key, target), fn in REGISTRY.rules():
        # the built-in page: no internal kinds, no rules a user (or a test) registered
        if not key.startswith(SOURCE_PREFIXES) or not fn.__module__.startswith("fx2nnef."):
            continue
        if target is not None and target not in targets:
            continue  # a variant's overrides are not the built-in page's
        row = rows.setdefault(key, {"common": None, "doc": "", **{t: None for t in targets}})
        row[target or "common"] = fn
        row["doc"] = row["doc"] or _first_doc_line(fn)
    lines = [
        "# Supported ops",
        "",
        "Generated from the op registry by `fx2nnef ops --write docs/ops.md`; do not edit by hand.",
        "",
        f"{len(rows)} source ops (torch functions, Tensor methods, operators and nn modules) have a lowering.",
        " / ".join(f"`{t}`" for t in targets) + ": the rule used for that target (`common` = shared rule, `override` = a",
        "target-specific rule, `-` = no lowering for that target).",
        "",
        "| op | " + " | ".join(targets) + " | converter | schema |",
        "|---" * (len(targets) + 3) + "|",
    ]
    for key in sorted(rows):
        row = rows[key]

        def which(t):
            if row[t] is not None:
                return "override"
            return "common" if row["common"] is not None else "-"

        fn = row["common"] or next(row[t] for t in targets if row[t] is not None)
        doc = row["doc"].replace("|", "\\|")
        where = f"{fn.__module__.split('.')[-1]}.{fn.__name__}"
        lines.append(f"| `{key}` | " + " | ".join(which(t) for t in targets) + f" | `{where}` | {doc} |")
    return "\n".join(lines) + "\n"
