"""Graph passes over the traced fx graph. Each returns whether it changed the graph.

Above ``tracing`` (the passes read what the tracer records), below ``shapes`` (see
:mod:`..tracing` for the order).
"""
from .complex import complex_to_real
from .dead_code import fold_constant_selects, remove_dead_code
from .inplace import remove_inplace
from .masked_update import masked_reductions, masked_updates
from .pieces import pieces_as_slices
from .slices import cleanup_slices

__all__ = ["cleanup_slices", "complex_to_real", "fold_constant_selects", "masked_reductions", "masked_updates",
           "pieces_as_slices", "remove_dead_code", "remove_inplace"]
