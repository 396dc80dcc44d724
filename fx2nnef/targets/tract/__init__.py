"""The tract target: its profile, its lowering overrides, its class, runner and child script."""
from . import lowering  # noqa: F401 - registers tract's overrides
from .profile import TRACT
from .target import DEFAULT_TRACT_VERSION, TractNNEF

__all__ = ["DEFAULT_TRACT_VERSION", "TRACT", "TractNNEF"]
