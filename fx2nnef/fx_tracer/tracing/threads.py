"""The thread that traces.

While a model is traced, :func:`.tracer.tracing_patches` (and :func:`.loops.loop_range_patch`)
replace ``isinstance``, ``callable``, ``len`` and ``range`` in :mod:`builtins`, which every thread
of the process reads. Other threads run meanwhile: the export checks an asset in tract from a
worker thread beside the lowering, and a probe runs the model beside the symbolic replay. The
replacements act only in the thread that entered the patches (:func:`tracing_in_this_thread`);
in any other thread each falls through to the builtin's own answer.
"""
from __future__ import annotations

import contextlib
from _thread import get_ident

_owner = None  # the id of the thread that traces, None when no trace runs


def in_tracing_thread() -> bool:
    """Whether the calling thread is the one that traces."""
    return get_ident() == _owner


@contextlib.contextmanager
def tracing_in_this_thread():
    """The calling thread is the one that traces until the block ends (nested blocks restore it)."""
    global _owner
    saved, _owner = _owner, get_ident()
    try:
        yield
    finally:
        _owner = saved
