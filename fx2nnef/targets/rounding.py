"""Float32 rounding or a wrong export? A failed check arbitrated by a float64 run of the model.

The check compares the engine's float32 outputs with eager float32 PyTorch's. Both round, in
other orders (tract's kernels sum a convolution otherwise than torch's), and a model with random
weights or a deep stack amplifies that rounding: the two may then differ beyond the tolerance
while each is as right as float32 allows. PyTorch's own float32 answer is then no better a
reference than tract's.

When a check fails, :func:`arbitrate` runs the model in float64 on the failing cases' inputs
(``fx_tracer.float64_run``) and measures, for each failing output, how far tract and eager
float32 each are from it, in units of the check's tolerance (``|x - exact| / (atol + rtol
|exact|)``, the largest over the output; with an outlier fraction, the largest once the allowed
outliers are set aside): 1 is the bound. If at every failing output tract is at most
:data:`ROUNDING_FACTOR` times further from float64 than eager float32 is, and float64 is a
reference there (eager float32 at most that many times further from it than from tract), the
failure is float32 rounding: the case passes and the report says so with both figures.
Otherwise the failure stands, and the figures go into its message.

Only float outputs that fail by their values are arbitrated (not by a shape, count or dtype; a
NaN or infinity where float64 has a number is never rounding), at a level with a bound (not
``exact``); a model that cannot run in float64, that draws random numbers, or that is too large
to copy keeps its failure, with a line saying why.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np

from ..fx_tracer.float64_run import Float64Unavailable
from .base import CheckReport
from .tolerance import Tolerance, resolve_tolerance

# How much further than eager float32 tract may be from the float64 answer for a failure to be
# float32 rounding. Both engines round the same arithmetic in other orders, but not equally well:
# torch's matrix kernels sum long reductions in blocks, tract's mostly in one running sum, whose
# error grows with the reduction's length. Measured (largest error over an output, tract / eager):
# on the five torchvision models of issue 43 whose check failed (random weights), 0.7 to 2.1, and
# 3.7 once (inception_v3 at 75 x 75); with benchmarks/bench_rounding_factor.py
# (five seeds each), 0.5 to 2.4 on a deep conv + BatchNorm stack, and on two nearly equal linear
# layers subtracted (pure cancellation) 1.0 at 64 inputs, 0.9 to 2.3 at 256, 2.8 to 3.2 at 1024,
# 5.4 to 7.7 at 4096. 4 covers vision models and dense layers up to about 2k inputs.
# An export that computes something else (a wrong padding, border, folded size, eps or scale) is
# off by an amount unrelated to float32's rounding (200x more in tests/test_check_rounding.py).
# Since the check failed, tract and eager are more than one unit apart, so eager itself is at
# least 1/(k+1) of the bound from float64 (a fifth with 4): only a model that float32 cannot
# compute to the tolerance is arbitrated at all.
ROUNDING_FACTOR = 4.0


@dataclasses.dataclass(frozen=True)
class Float64Figures:
    """How far tract (``engine``) and eager float32 (``eager``) are from the model's float64
    outputs at one failing output of one check case, and from each other (``apart``), in tolerance
    units (1 is the bound)."""

    label: str
    output: str
    engine: float
    eager: float
    apart: float = math.inf
    engine_name: str = "the engine"

    @property
    def rounding(self) -> bool:
        """Whether this is float32 rounding: the engine within :data:`ROUNDING_FACTOR` of eager
        float32's own distance from float64, and float64 a reference (:attr:`is_reference`)."""
        return math.isfinite(self.engine) and self.engine <= ROUNDING_FACTOR * self.eager and self.is_reference

    @property
    def is_reference(self) -> bool:
        """Whether the float64 run computes what float32 approximates: eager float32 is then no
        more than :data:`ROUNDING_FACTOR` times further from it than from the engine. Two float32
        computations in other orders are as far from each other as from the exact answer (eager's
        distance 0.26x to 1.3x theirs, measured as for :data:`ROUNDING_FACTOR`); a float64 run far from both while they are close computes something else
        (a forward that branches on the dtype, constants taken from ``finfo``), and would put any
        engine, right or wrong, at eager's distance."""
        return self.eager <= ROUNDING_FACTOR * self.apart

    def text(self) -> str:
        """``tract 1.05, eager 1.01 tolerance units from float64``."""
        return f"{self.engine_name} {self.engine:.3g}, eager {self.eager:.3g} tolerance units from float64"

    def __str__(self) -> str:
        return f"[{self.label}] {self.output}: {'float32 rounding: ' if self.rounding else ''}{self.text()}"

    def verdict(self) -> str:
        """Why this output is not float32 rounding ("" when it is)."""
        if not self.is_reference:
            return (f"  <- float64 is no reference here: eager float32 is {self.apart:.3g} units from "
                    f"{self.engine_name} but further from float64 (the model computes otherwise in float64)")
        return "" if self.rounding else "  <- not rounding"


@dataclasses.dataclass(frozen=True)
class Float64Arbitration:
    """What the float64 run said about a failed check: the figures of each failing output
    (``figures``), or why there are none (``unavailable``); ``passed``: every failure was float32
    rounding."""

    figures: tuple = ()
    unavailable: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.figures) and not self.unavailable and all(f.rounding for f in self.figures)

    def lines(self) -> list:
        """The lines a failed check's message adds: the figures, or why float64 was not run."""
        if self.unavailable:
            return [f"Float64 arbitration: {self.unavailable}."]
        engine = self.figures[0].engine_name if self.figures else "the engine"
        head = (f"Float64 arbitration: not float32 rounding ({engine} more than {ROUNDING_FACTOR:g}x further from "
                "the model's float64 outputs than eager float32 is, or float64 no reference):")
        return [head] + [f"  {f}{f.verdict()}" for f in self.figures]

    def as_dict(self) -> dict:
        """``{"LABEL OUTPUT": {"tract": x, "eager": y}}`` (JSON-ready; the engine's name as the key of
        its figure), or ``{"unavailable": why}``."""
        if self.unavailable:
            return {"unavailable": self.unavailable}
        return {f"{f.label} {f.output}": {f.engine_name: f.engine, "eager": f.eager, "apart": f.apart}
                for f in self.figures}

    def note(self) -> str:
        """The note of a check passed this way."""
        engine = self.figures[0].engine_name if self.figures else "the engine"
        return (f"values outside the tolerance passed as float32 rounding: the model amplifies it, and {engine} is "
                f"within {ROUNDING_FACTOR:g}x of eager float32's own distance from the model's float64 outputs "
                "(each such output's note gives both)")


def tolerance_units(got: np.ndarray, exact: np.ndarray, tol: Tolerance, scale: Optional[np.ndarray] = None) -> float:
    """How far ``got`` is from ``exact``, in units of ``tol``: the largest ``|got - exact| / (atol +
    rtol |scale|)`` (``scale``: ``exact`` unless given), the ``outliers`` fraction of the largest
    set aside; inf where one is finite and the other not (or NaN against a number), 0 where both
    hold the same non-finite value."""
    g, e = np.asarray(got, dtype=np.float64).ravel(), np.asarray(exact, dtype=np.float64).ravel()
    if not g.size:
        return 0.0
    s = e if scale is None else np.asarray(scale, dtype=np.float64).ravel()
    finite = np.isfinite(g) & np.isfinite(e)
    same = (np.isnan(g) & np.isnan(e)) | (np.isinf(e) & (g == e))
    bound = tol.atol + tol.rtol * np.abs(np.where(np.isfinite(s), s, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        units = np.where(finite, np.abs(np.where(finite, g - e, 0.0)) / bound, np.where(same, 0.0, np.inf))
    units = np.where(np.isnan(units), np.inf, units)  # 0/0: a zero bound (exact level) and a difference
    allowed = int(tol.outliers * units.size)
    return float(np.partition(units, units.size - 1 - allowed)[units.size - 1 - allowed])


def _values_only(report: CheckReport, cases: list, failing: list) -> None:
    """Raise :class:`_NotArbitrable` unless every failing output of the ``failing`` cases is a
    float output that fails by its values only (not its shape, count or dtype)."""
    for k, case in zip(failing, cases):
        label, diffs = report.cases[k]
        for i, d in enumerate(diffs):
            if d.ok:
                continue
            dtype = np.asarray(case.expected[i]).dtype if i < len(case.expected) else None
            if dtype is not None and dtype.kind != "f":
                why = f"{dtype} values are compared exactly"
            elif dtype is None or math.isnan(d.max_abs) or "dtype differs" in d.note:
                why = "its shape, count or dtype differs"
            else:
                continue
            raise _NotArbitrable(f"not run: output {d.name} at [{label}] fails otherwise than by its values ({why})")


def arbitrate(report: CheckReport, cases: Sequence, tolerance, engine_run: Callable[[list], list],
              float64_run: Callable[[], Callable[[list], list]], half: Sequence[bool] = ()) -> CheckReport:
    """``report`` (a failed check of ``cases``) arbitrated by float64 (see the module docstring):
    its failing cases passed, with their figures, when every failure is float32 rounding; else the
    same failures, the figures or why there are none in ``report.float64``. ``engine_run``: input
    sets -> the engine's outputs (run again on the failing cases); ``float64_run()``: the float64
    model's runner (it may raise: the failure stands, saying why); ``half[i]``: output i is
    compared at the level's float16 bounds."""
    tol = resolve_tolerance(tolerance)
    if tol.atol == 0 and tol.rtol == 0:
        return dataclasses.replace(report, float64=Float64Arbitration(
            unavailable=f"not run: the level {tol.name!r} allows no rounding"))
    failing = [k for k, (_, diffs) in enumerate(report.cases) if not all(d.ok for d in diffs)]
    try:
        figures = _figures(report, [cases[k] for k in failing], failing, tol, engine_run, float64_run, half)
    except _NotArbitrable as why:
        return dataclasses.replace(report, float64=Float64Arbitration(unavailable=str(why)))
    verdict = Float64Arbitration(tuple(figures))
    if not verdict.passed:
        return dataclasses.replace(report, float64=verdict)
    by_place = {(f.label, f.output): f for f in figures}
    new_cases = [(label, [d if d.ok else dataclasses.replace(
        d, ok=True, note=f"{d.note}; float32 rounding: {by_place[(label, d.name)].text()}")
        for d in diffs]) for label, diffs in report.cases]
    return CheckReport(report.engine, new_cases, list(report.notes) + [verdict.note()], float64=verdict)


class _NotArbitrable(Exception):
    pass


def _figures(report: CheckReport, cases: list, failing: list, tol: Tolerance, engine_run, float64_run,
             half: Sequence[bool]) -> list:
    """The :class:`Float64Figures` of every failing output of the ``failing`` cases; raises
    :class:`_NotArbitrable` (one line) when one cannot be measured."""
    _values_only(report, cases, failing)
    try:
        run = float64_run()
        exact = [run(list(c.inputs)) for c in cases]
        del run  # the float64 copy of the model: not held while the engine runs
    except Exception as error:  # noqa: BLE001 - any failure of the float64 run: the check's failure stands
        reason = str(error) if isinstance(error, Float64Unavailable) else \
            f"the model could not be run in float64 ({type(error).__name__}: {str(error)[:200]})"
        raise _NotArbitrable(reason) from error
    try:
        engine = engine_run([list(c.inputs) for c in cases])
    except Exception as error:  # noqa: BLE001 - the engine's second run failed: the check's failure stands
        raise _NotArbitrable(f"not run: the engine failed when run again ({type(error).__name__})") from error
    figures = []
    for k, case, outs64, got in zip(failing, cases, exact, engine):
        label, diffs = report.cases[k]
        for i, d in enumerate(diffs):
            if d.ok:
                continue
            if i >= len(outs64) or np.shape(outs64[i]) != np.shape(case.expected[i]):
                raise _NotArbitrable(f"not usable: the float64 run's output {d.name} at [{label}] is not the "
                                     "float32 run's (another count or shape)")
            level = tol.for_dtype(np.float16) if i < len(half) and half[i] else tol.for_dtype(case.expected[i].dtype)
            units = [tolerance_units(a, b, level, scale=outs64[i])  # all three in the float64 values' units
                     for a, b in ((got[i], outs64[i]), (case.expected[i], outs64[i]), (got[i], case.expected[i]))]
            figures.append(Float64Figures(label, d.name, *units, report.engine))
    return figures
