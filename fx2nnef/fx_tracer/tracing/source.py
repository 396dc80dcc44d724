"""Locate the user's source line that triggered a recorded call."""
from __future__ import annotations

import linecache
import os
import sys

import torch

from ...ir import SourceLoc

_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # fx2nnef/
_SKIP_PREFIXES = (_TORCH_DIR, _OWN_DIR, os.path.dirname(os.__file__))


def user_frame_location(skip_prefixes: tuple = ()) -> SourceLoc | None:
    """The innermost frame outside torch, fx2nnef and the standard library."""
    frame = sys._getframe(1)
    prefixes = _SKIP_PREFIXES + tuple(skip_prefixes)
    while frame is not None:
        filename = frame.f_code.co_filename
        if ".." in filename:  # imported through a relative path (sys.path entry "..")
            filename = os.path.normpath(filename)
        if not filename.startswith(prefixes) and not filename.startswith("<"):
            line = frame.f_lineno
            code = linecache.getline(filename, line).strip()
            return SourceLoc(filename, line, code)
        frame = frame.f_back
    return None
