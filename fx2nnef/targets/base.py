"""InferenceTarget: what an export is for, and how its asset is checked."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable, Optional, Sequence


from ..ir import CheckCase, Graph
from ..nnef_emit.profile import TargetProfile, profile_of
from .tolerance import compare_outputs


@dataclasses.dataclass
class CheckReport:
    engine: str
    cases: list  # (label, list[OutputDiff])
    notes: list = dataclasses.field(default_factory=list)  # how a case was checked besides the plain comparison
    # a failed comparison arbitrated by a float64 run of the model (targets.rounding.Float64Arbitration):
    # its figures, whether the failures were float32 rounding only, or why it could not be run
    float64: Optional[object] = None

    @property
    def ok(self) -> bool:
        return all(d.ok for _, diffs in self.cases for d in diffs)


class InferenceTarget:
    """Base class: what an export is for, and how its asset is run and checked.

    ``name`` names the target's :attr:`profile`: what the lowering asks of it, and the rule set
    of its converter overrides in the op registry (a variant declared with
    ``nnef_emit.profile.add_target`` falls back to its parent's). A subclass says what its engine
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

    @property
    def profile(self) -> TargetProfile:
        """The profile declared under :attr:`name` (see ``fx2nnef.nnef_emit.profile``)."""
        return profile_of(self.name)

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
        return CheckReport(self.engine, [(c.label, self.compare(output_names, c.expected, got, half_outputs))
                                         for c, got in zip(cases, outputs)])

    def compare(self, output_names: list, expected: list, got: list, half_outputs: Sequence[bool] = ()) -> list:
        """The OutputDiffs of the engine's outputs ``got`` against ``expected``, at this target's level."""
        return compare_outputs(output_names, expected, got, self.check_io_tolerance, half=half_outputs)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


@dataclasses.dataclass
class TieRecheck:
    """What :func:`recheck_ties` needs: which outputs are computed from positions an ordering op
    picked (topk's or sort's indices, argmax, ...), and how a case is made again on distinct values.

    ``from_indices[i]``: output i is computed from such positions. ``distinct(case)``: the case at
    the same sizes with the float inputs its sizes were grown on made distinct (the copies of the
    example perturbed), with the model's outputs for them; None when nothing was grown (no ties
    were made) or the model refuses them."""

    from_indices: Sequence[bool]
    distinct: Callable[[CheckCase], Optional[CheckCase]]


TIES_NOTE = ("differed only where the inputs, grown by repeating the example's values, hold equal items "
             "(ties: torch orders them in no fixed order, tract picks the lower position)")


def _only_on_indices(diffs: list, from_indices: Sequence[bool]) -> bool:
    """Whether every failing output of a case is computed from picked positions and differs in
    its values only (not in shape, dtype or count)."""
    failing = [(i, d) for i, d in enumerate(diffs) if not d.ok]
    return bool(failing) and all(
        i < len(from_indices) and from_indices[i] and not math.isnan(d.max_abs) and "dtype differs" not in d.note
        for i, d in failing)


def recheck_ties(report: CheckReport, cases: list, ties: TieRecheck, run: Callable[[list], list],
                 compare: Callable[[CheckCase, list], list]) -> CheckReport:
    """``report`` with each failing case whose failures are all on outputs computed from picked
    positions (:func:`_only_on_indices`) checked once more on distinct values: the check sizes
    above the example repeat its data, and on equal items torch and tract may rightly pick other
    positions. When the engine (``run``: input sets -> output lists, one engine run for all)
    then gives the model's outputs (``compare``: case, engine outputs -> OutputDiffs), the case
    passes with the diffs of the distinct values and a note; otherwise its first failure stands,
    noted as checked again. Nothing runs when no case qualifies."""
    rechecks = {}
    for k, ((label, diffs), case) in enumerate(zip(report.cases, cases)):
        if not _only_on_indices(diffs, ties.from_indices):
            continue
        other = ties.distinct(case)
        if other is not None:
            rechecks[k] = other
    if not rechecks:
        return report
    try:
        outputs = run([c.inputs for c in rechecks.values()])
    except Exception:  # noqa: BLE001 - no re-check: the first failure stands
        return report
    new_cases, notes = list(report.cases), list(report.notes)
    for (k, other), got in zip(rechecks.items(), outputs):
        label, diffs = report.cases[k]
        again = compare(other, got)
        if all(d.ok for d in again):
            names = ", ".join(d.name for d in diffs if not d.ok)
            new_cases[k] = (label, [d if old.ok else dataclasses.replace(
                d, note=f"on the repeated inputs {old.note.split('; ')[0]}, only at ties; equal on distinct values")
                for d, old in zip(again, diffs)])
            notes.append(f"[{label}] {names} {TIES_NOTE}; checked again at the same sizes on distinct values "
                         "(the grown copies perturbed), where the engine gives PyTorch's outputs")
        else:
            still = ", ".join(d.name for d in again if not d.ok)
            new_cases[k] = (label, [d if d.ok else dataclasses.replace(
                d, note=f"{d.note}; checked again on distinct values (ties broken): {still} differ there too")
                for d in diffs])
    return CheckReport(report.engine, new_cases, notes)
