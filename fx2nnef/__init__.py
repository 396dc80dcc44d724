"""fx2nnef: export PyTorch models to NNEF with a custom torch.fx tracer, checked in tract.

The public names load torch on first use, not on ``import fx2nnef``: the command line's
``--help`` and ``--version`` answer without it.
"""
import importlib

from ._version import __version__

# public name -> the submodule that defines it
_EXPORTS = {
    "export": "api", "ExportResult": "api",
    "CheckIOError": "errors", "EmitError": "errors", "Fx2NnefError": "errors", "GuardError": "errors",
    "InvalidArgumentError": "errors", "TargetError": "errors", "TraceError": "errors", "TractError": "errors",
    "UnsupportedOpError": "errors", "AssetInputError": "errors", "AnalysisBudgetError": "errors",
    "InferenceTarget": "targets", "KhronosNNEF": "targets", "Tolerance": "targets", "TractNNEF": "targets",
    "Strategy": "piece_by_piece", "diagnose": "piece_by_piece",
    "run": "runtime",
}
# what ``import fx2nnef`` loaded before the names were lazy: the first public name loads all of it
_EAGER = ("api", "errors", "targets", "piece_by_piece")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        for module in _EAGER:
            importlib.import_module(f".{module}", __name__)
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):  # fx2nnef.api and the like, without importing them first
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
