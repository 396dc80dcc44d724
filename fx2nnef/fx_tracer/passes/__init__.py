"""Graph passes over the traced fx graph. Each returns whether it changed the graph."""
from .dead_code import remove_dead_code
from .inplace import remove_inplace
from .slices import cleanup_slices

__all__ = ["cleanup_slices", "remove_dead_code", "remove_inplace"]
