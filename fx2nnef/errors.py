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

    def __init__(self, message: str, diffs: list | None = None, bundle: str | None = None):
        super().__init__(message)
        self.diffs = list(diffs or [])
        self.bundle = bundle


class AssetInputError(InvalidArgumentError):
    """Inputs given to run an asset do not fit what it declares (names, ranks, dtypes, sizes, ranges)."""
