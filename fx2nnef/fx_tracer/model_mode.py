"""The model as an export runs it: in eval mode with autocast off, its ``torch.compile``d modules
unwrapped, and the objects alive before it kept out of the garbage collector's full passes."""
from __future__ import annotations

import contextlib
import gc

import torch


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """``model.eval()`` for the duration, then each module's own mode back; ``torch.autocast``
    regions run in the types of their inputs (no engine here runs bfloat16, and the export is
    checked against what it computes). Yields the list of (device, dtype) the autocast regions
    that ran asked for."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    autocast = torch.amp.autocast_mode.autocast
    init = autocast.__init__
    asked: list = []

    def no_autocast(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if enabled and (device_type, dtype) not in asked:
            asked.append((device_type, dtype))
        init(self, device_type, dtype=dtype, enabled=False, cache_enabled=cache_enabled)

    autocast.__init__ = no_autocast
    try:
        yield asked
    finally:
        autocast.__init__ = init
        for m, training in modes.items():
            m.training = training


@contextlib.contextmanager
def compiled_modules_unwrapped(model: torch.nn.Module):
    """``torch.compile``d submodules (and model) replaced by the modules they wrap for the export:
    the reference runs then compile nothing (an inductor compile at every probed size takes
    minutes), and the trace follows the module's own Python."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # pragma: no cover - builds without dynamo
        yield model
        return
    while isinstance(model, OptimizedModule):
        model = model._orig_mod
    swapped = [(parent, name, child) for parent in model.modules()
               for name, child in parent._modules.items() if isinstance(child, OptimizedModule)]
    for parent, name, child in swapped:
        inner = child
        while isinstance(inner, OptimizedModule):
            inner = inner._orig_mod
        parent._modules[name] = inner
    try:
        yield model
    finally:
        for parent, name, child in swapped:
            parent._modules[name] = child


@contextlib.contextmanager
def old_objects_skipped():
    """Keep the objects alive before the export out of the garbage collector's full passes while
    it runs (``gc.freeze``), then give them back (``gc.unfreeze``).

    A process that imported torch, transformers and sympy holds about a million tracked objects;
    the symbolic replay creates enough new ones to set off full collections that walk them all,
    a tenth of a second each, for nothing: what the export leaves behind is among its own objects,
    which are still collected. A caller's own ``gc.freeze()`` is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
