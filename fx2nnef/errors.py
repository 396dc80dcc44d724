"""Error classes of fx2nnef.

Every error raised on purpose derives from :class:`Fx2NnefError`. Each message says what
failed, where (module path, source line, op) and what to do about it.
"""
from __future__ import annotations


class Fx2NnefError(Exception):
    """Root of all fx2nnef errors."""


class InvalidArgumentError(Fx2NnefError, ValueError):
    """A call received bad arguments (names, dynamic axes, paths...); raised before tracing."""


class TraceError(Fx2NnefError):
    """The model could not be captured by the tracer."""


class GuardError(TraceError):
    """The trace took a decision on a value declared dynamic that cannot be kept general."""


class AnalysisBudgetError(TraceError):
    """The analysis of the dynamic sizes spent its budget of time or runs (see ``FX2NNEF_ANALYSIS_SECONDS``)."""


class UnsupportedOpError(Fx2NnefError):
    """Some ops have no lowering for the chosen target; ``problems`` lists each of them."""

    def __init__(self, message: str, problems: list | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class EmitError(Fx2NnefError):
    """An op was recognised but could not be lowered with these arguments."""


class TargetError(Fx2NnefError):
    """The inference engine rejected or crashed on the exported asset."""


class TractError(TargetError):
    """tract failed to load or run the asset (message carries tract's own words)."""


class KhronosError(TargetError):
    """The Khronos nnef parser or the nnef_tools interpreter rejected the asset."""


class CheckIOError(TargetError):
    """The engine ran but its outputs differ from PyTorch beyond the tolerance."""

    def __init__(self, message: str, diffs: list | None = None, bundle: str | None = None, float64=None):
        super().__init__(message)
        self.diffs = list(diffs or [])
        self.bundle = bundle
        # the failure arbitrated by a float64 run of the model (targets.rounding.Float64Arbitration):
        # how far the engine and eager float32 are from it, or why it was not run; None if it was not tried
        self.float64 = float64


class AssetInputError(InvalidArgumentError):
    """Inputs given to run an asset do not fit what it declares (names, ranks, dtypes, sizes, ranges)."""


class MissingDependencyError(Fx2NnefError, ImportError):
    """An optional package fx2nnef needs for this call is not installed (e.g. transformers)."""


# How messages name fx2nnef's options. From Python they are keyword arguments
# (``overwrite=True``); the command line installs its own spellings (``--overwrite``) with
# :func:`spellings` while it runs, so that one message serves both.
_UNSET = object()
_spellings: dict = {}


def spell(keyword: str, value=_UNSET) -> str:
    """The option ``keyword`` (set to ``value``, when given) as the caller spells it:
    ``overwrite=True`` or ``dtype='f16'`` from Python, the command line's flag when it runs."""
    cli = _spellings.get(keyword)
    if cli is not None:
        return cli if value is _UNSET else cli(value) if callable(cli) else _flag(cli, value)
    return keyword if value is _UNSET else f"{keyword}={value!r}"


class Placeholder(str):
    """A value a message leaves for the user to choose (``N``): ``spell("max_loop_iterations",
    Placeholder("N"))`` is ``max_loop_iterations=N`` from Python, ``--max-loop-iterations N`` on the
    command line."""

    def __repr__(self) -> str:
        return str(self)


def phrase(key: str, python_text: str) -> str:
    """A phrase that differs between the Python API and the command line (``"this error's
    .report"``): ``python_text`` unless the command line gave its own for ``key``."""
    return _spellings.get(key, python_text)


class spellings:
    """Within the block, :func:`spell` and :func:`phrase` use ``table`` (keyword -> flag, or
    a function of the value; phrase key -> text)."""

    def __init__(self, table: dict):
        self.table = table

    def __enter__(self):
        global _spellings
        self._old, _spellings = _spellings, {**_spellings, **self.table}
        return self

    def __exit__(self, *exc) -> None:
        global _spellings
        _spellings = self._old


def _flag(flag: str, value) -> str:
    if value is True:
        return flag
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return f"{flag} {value}"
