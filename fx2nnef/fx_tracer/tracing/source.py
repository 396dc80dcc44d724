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
# torch's library code: its lines decide as a user's would (``if query.dim() == 3:`` in
# torch.nn.functional); the rest of torch (fx, overrides, Tensor's methods, Module's __call__) is
# machinery between the user's line and the decision
_TORCH_LIBRARY = (os.path.join(_TORCH_DIR, "nn", ""), os.path.join(_TORCH_DIR, "functional.py"))
_TORCH_MACHINERY = (os.path.join(_TORCH_DIR, "nn", "modules", "module.py"),
                    os.path.join(_TORCH_DIR, "nn", "parameter.py"))


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


def deciding_frame_location() -> SourceLoc | None:
    """The line that took a decision being recorded: the innermost frame outside fx2nnef, the
    standard library and torch's machinery, torch's library code (``torch.nn``, its
    ``functional``) counting as code that decides. :func:`user_frame_location` when there is none."""
    frame = sys._getframe(1)
    skipped = (_OWN_DIR, os.path.dirname(os.__file__))
    while frame is not None:
        filename = os.path.normpath(frame.f_code.co_filename) if ".." in frame.f_code.co_filename \
            else frame.f_code.co_filename
        in_torch = filename.startswith(_TORCH_DIR)
        library = in_torch and filename.startswith(_TORCH_LIBRARY) and not filename.startswith(_TORCH_MACHINERY)
        if not filename.startswith("<") and not filename.startswith(skipped) and (library or not in_torch):
            line = frame.f_lineno
            return SourceLoc(filename, line, linecache.getline(filename, line).strip())
        frame = frame.f_back
    return user_frame_location()
