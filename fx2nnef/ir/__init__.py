"""Torch-free typed IR shared by the tracer and the emitter."""
from .check import CheckCase
from .dims import Dim, SymDim, SymRange, as_sym, fit_polynomial, is_static, simplify
from .dtypes import DType
from .graph import Graph, Guard, Node, SourceLoc, Value, map_values, sanitize, unique_name
from .opkey import method_key, op_key
from .tensor_data import ArrayData, TensorData

__all__ = [
    "ArrayData", "CheckCase", "TensorData", "Dim", "DType", "Graph", "Guard", "Node", "SourceLoc", "SymDim", "SymRange", "Value",
    "as_sym", "fit_polynomial", "is_static", "map_values", "method_key", "op_key", "sanitize",
    "simplify", "unique_name",
]
