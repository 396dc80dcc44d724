"""Functions that libraries hide from symbolic tracing are traced through.

``torch.fx.wrap(fn)`` (torchvision's ``stochastic_depth``, ``shifted_window_attention``, timm's
sincos grids, any user's) asks a value-less tracer to record a call to ``fn`` instead of reading
its code, because that code branches on sizes or data. fx's ``Tracer.trace`` patches every such
name for the duration of the trace, whatever tracer runs. Our proxies carry example values, so the
function's body runs like any other Python code; recorded whole, it would only be an op without a
lowering. The patches of wrapped functions are dropped at the start of the traced forward (the
patches of ``Module.__call__``/``__getattr__`` and of autowrapped ``math`` functions stay); the
user's own leaf modules (``leaf_modules=``) are modules, not functions, and stay leaves.
"""
from __future__ import annotations

from torch.fx import _symbolic_trace as fx_trace


def _is_wrapped_function_patch(patch) -> bool:
    """Whether ``patch`` (one of fx's patcher records) replaces a name given to ``torch.fx.wrap``."""
    frame = getattr(patch, "frame_dict", None)
    if not isinstance(frame, dict):  # a patched method (Module.__call__, Tensor.__getitem__)
        return False
    return (id(frame), patch.fn_name) in fx_trace._wrapped_fns_to_patch


def trace_through_wrapped_functions() -> int:
    """Undo the current fx trace's patches of ``torch.fx.wrap``-ed functions, so that their code
    is traced; they stay undone until the trace ends. Returns how many were undone."""
    patcher = fx_trace.CURRENT_PATCHER
    if patcher is None:
        return 0
    hidden = [p for p in patcher.patches_made if _is_wrapped_function_patch(p)]
    for patch in reversed(hidden):
        patch.revert()
        patcher.patches_made.remove(patch)
    return len(hidden)
