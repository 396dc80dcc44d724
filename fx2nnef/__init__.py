"""fx2nnef: export PyTorch models to NNEF with a custom torch.fx tracer, checked in tract."""
from ._version import __version__

from .api import ExportResult, export
from .errors import (AssetInputError, CheckIOError, EmitError, Fx2NnefError, GuardError, InvalidArgumentError, TargetError,
                     TraceError, TractError, UnsupportedOpError)
from .targets import InferenceTarget, KhronosNNEF, Tolerance, TractNNEF
from .piece_by_piece import Strategy, diagnose
from .runtime import run

__all__ = [
    "AssetInputError", "CheckIOError", "EmitError", "ExportResult", "Fx2NnefError", "GuardError", "InferenceTarget",
    "InvalidArgumentError", "KhronosNNEF", "TargetError", "Tolerance", "TraceError", "TractError", "TractNNEF",
    "UnsupportedOpError", "export", "diagnose", "run", "Strategy",
]
