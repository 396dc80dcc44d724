"""The Khronos target (standard NNEF): its profile, its lowering overrides, its class, runner and child script."""
from . import lowering  # noqa: F401 - registers the Khronos overrides
from .profile import KHRONOS
from .target import KhronosNNEF

__all__ = ["KHRONOS", "KhronosNNEF"]
