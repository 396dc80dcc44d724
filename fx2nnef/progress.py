"""Stage notices: a long export says which stage it starts (load, trace, lower, write, check,
generate) to whoever listens, e.g. the command line's progress lines. Nothing is printed here."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional

_listener: Optional[Callable[[str, str], None]] = None


def stage(name: str, detail: str = "") -> None:
    """Tell the listener, if any, that stage ``name`` starts (``detail``: what it works on)."""
    if _listener is not None:
        _listener(name, detail)


@contextmanager
def listening(callback: Callable[[str, str], None]):
    """Within the block, :func:`stage` calls ``callback(name, detail)``."""
    global _listener
    old, _listener = _listener, callback
    try:
        yield
    finally:
        _listener = old
