"""Passes: rewrite exact patterns of the IR into fused ops that tract computes in one kernel.

``fuse(graph, names)`` runs the passes named in ``names`` (see :data:`FUSIONS`); each rewrites
a pattern only where it matches exactly (same tensors, dtypes, shapes, no other reader of the
values in between) and leaves the graph unchanged otherwise. The new nodes (``fused.*`` kinds)
are lowered by ``nnef_emit/ops/fused.py`` for tract.
"""
from __future__ import annotations

from collections.abc import Iterable

from ...errors import InvalidArgumentError
from ..graph import Graph
from . import rms_norm, rope, sdpa
from .rms_norm import fuse_rms_norm
from .rope import fuse_rope
from .sdpa import fuse_sdpa

FUSIONS = {
    "rms_norm": fuse_rms_norm,  # -> tract_core_rms_norm / tract_core_scaled_rms_norm
    "rope": fuse_rope,  # -> tract_transformers_apply_rope
    "sdpa": fuse_sdpa,  # -> tract_transformers_sdpa
}

KINDS = {"rms_norm": rms_norm.KIND, "rope": rope.KIND, "sdpa": sdpa.KIND}


def resolve_fusions(fused) -> tuple:
    """``fused`` (None, "all", a name, or names) as a tuple of names in :data:`FUSIONS` order."""
    if fused is None or fused == () or fused == []:
        return ()
    if isinstance(fused, str):
        fused = tuple(FUSIONS) if fused == "all" else tuple(n.strip() for n in fused.split(",") if n.strip())
    if not isinstance(fused, Iterable):
        raise InvalidArgumentError(f"fused must be names among {', '.join(FUSIONS)} (or 'all'), got {fused!r}")
    names = list(fused)
    unknown = [n for n in names if n not in FUSIONS]
    if unknown:
        raise InvalidArgumentError(f"unknown fused op(s) {', '.join(map(repr, unknown))}: choose among "
                                   f"{', '.join(FUSIONS)} (or 'all')")
    return tuple(n for n in FUSIONS if n in names)


def fuse(graph: Graph, names: Iterable[str]) -> dict:
    """Run the fusion passes ``names`` over ``graph`` in place; ``{name: patterns rewritten}``."""
    return {name: FUSIONS[name](graph) for name in resolve_fusions(tuple(names))}


def fused_counts(graph: Graph, names: Iterable[str] = tuple(FUSIONS)) -> dict:
    """``{name: fused nodes of that kind in graph}`` for each of ``names``."""
    counts = graph.op_counts()
    return {name: counts.get(KINDS[name], 0) for name in names}
