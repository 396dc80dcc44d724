"""InferenceTarget: what an export is for, and how its asset is checked."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np

from ..ir import CheckCase, Graph


@dataclasses.dataclass
class CheckReport:
    engine: str
    cases: list  # (label, list[OutputDiff])

    @property
    def ok(self) -> bool:
        return all(d.ok for _, diffs in self.cases for d in diffs)


class InferenceTarget:
    """Base class. ``name`` selects the converter overrides in the op registry."""

    name = "common"
    dynamic_axes: dict = {}
    check_io = False
    bool_bits = 8  # bits per item of bool .dat files this engine reads

    def pre_trace(self, model, args, kwargs) -> None:
        """Called before tracing (e.g. to refuse options the target cannot honour)."""

    def post_trace(self, graph: Graph) -> None:
        """Called with the IR before lowering."""

    def specific_fragments(self, graph: Graph) -> dict:
        """Extra NNEF fragment texts to include in graph.nnef, by name."""
        return {}

    def post_export(self, asset: Path, input_names: list, output_names: list,
                    cases: list) -> Optional[CheckReport]:
        """Validate the written asset; return a CheckReport when outputs were compared."""
        return None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def as_numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
