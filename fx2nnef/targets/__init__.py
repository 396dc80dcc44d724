"""Inference targets: where an exported asset is meant to run and how it is checked."""
from ..ir import CheckCase
from .base import CheckReport, InferenceTarget
from .khronos import KhronosNNEF
from .tolerance import Tolerance, resolve_tolerance
from .tract import TractNNEF

TARGET_CLASSES = {cls.name: cls for cls in (TractNNEF, KhronosNNEF)}
"""The built-in targets by the name the CLI and the registry use."""

__all__ = ["CheckCase", "CheckReport", "InferenceTarget", "KhronosNNEF", "Tolerance", "TractNNEF", "TARGET_CLASSES", "resolve_tolerance"]
