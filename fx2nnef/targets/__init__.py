"""Inference targets: where an exported asset is meant to run and how it is checked.

Each target is a sub-package (``tract``, ``khronos``) holding its profile, its lowering
overrides, its class, runner and child script."""
from ..ir import CheckCase
from .base import CheckReport, InferenceTarget
from .tract import TractNNEF  # declared first: the supported-op page lists the targets in this order
from .khronos import KhronosNNEF
from .tolerance import Tolerance, resolve_tolerance

TARGET_CLASSES = {cls.name: cls for cls in (TractNNEF, KhronosNNEF)}
"""The built-in targets by the name the CLI and the registry use."""

__all__ = ["CheckCase", "CheckReport", "InferenceTarget", "KhronosNNEF", "Tolerance", "TractNNEF", "TARGET_CLASSES", "resolve_tolerance"]
