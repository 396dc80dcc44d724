"""The custom torch.fx tracer (CustomProxy carries example values), its passes, and IR building.

Sub-packages, bottom first: ``tracing`` (tracer, proxy, guards, scoped patches), ``passes`` (graph
rewrites after the trace), ``shapes`` (symbolic replay, probes, ranges of the dynamic sizes),
``to_ir`` (the IR and its constant data); above them ``capture`` runs the whole, with ``branches``
(merged decisions), ``random_draws`` and ``stored_values``.
"""
from .capture import Capture, capture
from .tracing.proxy import CustomProxy
from .tracing.tracer import CustomTracer, trace_model

__all__ = ["Capture", "CustomProxy", "CustomTracer", "capture", "trace_model"]
