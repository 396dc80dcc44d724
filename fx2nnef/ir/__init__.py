"""Torch-free typed IR shared by the tracer and the emitter."""
from .check import CheckCase
from .dims import Dim, SymDim, SymRange, as_sym, fit_polynomial, is_static, product, simplify
from .dtypes import DType
from .graph import Graph, Guard, Node, SourceLoc, Value, flat_values, map_values, sanitize, unique_name
from .opkey import method_key, op_key
from .tensor_data import ArrayData, ReshapedData, RowsData, TensorData
from .weight_data import F16Data, Q4_0Data, dequantize_q4_0, quantize_q4_0
from .weight_formats import WEIGHT_FORMATS, Calibrated, WeightChoice, apply_weight_format

__all__ = [
    "ArrayData", "ReshapedData", "RowsData", "CheckCase", "Dim", "DType", "F16Data", "Graph", "Guard", "Node",
    "Q4_0Data", "SourceLoc", "SymDim",
    "SymRange", "TensorData", "Value", "WEIGHT_FORMATS", "WeightChoice",
    "Calibrated", "apply_weight_format", "as_sym", "dequantize_q4_0", "fit_polynomial", "flat_values", "is_static", "map_values",
    "method_key", "op_key", "product", "quantize_q4_0", "sanitize", "simplify", "unique_name",
]
