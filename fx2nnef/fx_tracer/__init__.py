"""The custom torch.fx tracer (CustomProxy carries example values), its passes, and IR building."""
from .capture import Capture, capture
from .proxy import CustomProxy
from .tracer import CustomTracer, trace_model

__all__ = ["Capture", "CustomProxy", "CustomTracer", "capture", "trace_model"]
