"""NNEF emitter: op registry, converters, fragments, .dat files and asset writing."""
from . import ops  # noqa: F401 - registers every converter
from .archive import write_asset
from .context import EmitContext
from .emitter import Emitted, emit_graph
from .registry import REGISTRY, register

__all__ = ["REGISTRY", "EmitContext", "Emitted", "emit_graph", "register", "write_asset"]
