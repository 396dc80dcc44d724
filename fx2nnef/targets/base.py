"""InferenceTarget: what an export is for, and how its asset is checked."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence


from ..ir import Graph
from .tolerance import compare_outputs


@dataclasses.dataclass
class CheckReport:
    engine: str
    cases: list  # (label, list[OutputDiff])

    @property
    def ok(self) -> bool:
        return all(d.ok for _, diffs in self.cases for d in diffs)


class InferenceTarget:
    """Base class: what an export is for, and how its asset is run and checked.

    ``name`` selects the converter overrides in the op registry (a variant declared with
    ``nnef_emit.registry.add_target`` falls back to its parent's). A subclass says what its engine
    can do (the class attributes below) and implements :meth:`run`; :meth:`post_export` then
    checks an asset by running it on the check cases and comparing with PyTorch.
    """

    name = "common"
    engine = "common"  # the engine named in check reports
    dynamic_axes: dict = {}
    check_io = False
    check_io_tolerance = None
    bool_bits = 8  # bits per item of bool .dat files this engine reads
    dynamic_dims = False  # whether the engine takes symbolic sizes (dynamic_axes)
    asset_suffix = ".nnef.tgz"  # what an asset written for this engine is named with ("": a folder)
    weights = "native"  # how float parameters are stored: see fx2nnef.ir.weight_formats

    def pre_trace(self, model, args, kwargs) -> None:
        """Called before tracing (e.g. to refuse options the target cannot honour)."""

    def post_trace(self, graph: Graph) -> None:
        """Called with the IR before lowering."""

    def specific_fragments(self, graph: Graph) -> dict:
        """Extra NNEF fragment texts to include in graph.nnef, by name."""
        return {}

    def validate(self, asset: Path) -> None:
        """Raise if the engine refuses the asset, without running it (default: nothing to check)."""

    def run(self, asset: Path, input_sets: list) -> list:
        """The asset's outputs (numpy arrays, in graph output order) for each set of inputs."""
        raise NotImplementedError(f"{type(self).__name__} cannot run assets")

    def specific_asserts(self, graph: Graph) -> list:
        """Extra assertions on the symbols (``S+P < 128``) written as ``extension tract_assert``."""
        return []

    def post_export(self, asset: Path, input_names: list, output_names: list,
                    cases: list, half_outputs: Sequence[bool] = ()) -> Optional[CheckReport]:
        """Validate the written asset; with ``check_io``, run it on ``cases`` and compare
        (``half_outputs``: the outputs computed through float16, compared at its bounds)."""
        self.validate(asset)
        if not self.check_io:
            return None
        outputs = self.run(asset, [c.inputs for c in cases])
        return CheckReport(self.engine, [(c.label, compare_outputs(output_names, c.expected, got, self.check_io_tolerance,
                                                                   half=half_outputs))
                                         for c, got in zip(cases, outputs)])

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"
