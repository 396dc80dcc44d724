"""The custom torch.fx tracer (CustomProxy carries example values), its passes, and IR building."""
from .capture import Capture, capture, register_leaf_type
from .proxy import CustomProxy
from .tracer import CustomTracer, trace_model

__all__ = ["Capture", "CustomProxy", "CustomTracer", "capture", "register_leaf_type", "trace_model"]
