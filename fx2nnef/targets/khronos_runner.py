"""Former path of :mod:`fx2nnef.targets.khronos.runner`, kept for the imports that name it."""
from .khronos.runner import CHILD_SCRIPT, run_khronos, run_khronos_many, validate_khronos  # noqa: F401
