"""Inference targets: where an exported asset is meant to run and how it is checked."""
from .base import CheckCase, CheckReport, InferenceTarget
from .khronos import KhronosNNEF
from .tolerance import Tolerance, resolve_tolerance
from .tract import TractNNEF

__all__ = ["CheckCase", "CheckReport", "InferenceTarget", "KhronosNNEF", "Tolerance", "TractNNEF", "resolve_tolerance"]
