"""KhronosNNEF: standard NNEF only, validated by the Khronos parser, run by nnef_tools."""
from __future__ import annotations

from pathlib import Path

from ...errors import InvalidArgumentError, phrase, spell
from ..base import InferenceTarget
from .runner import run_khronos_many, validate_khronos
from ..tolerance import resolve_tolerance


class KhronosNNEF(InferenceTarget):
    """Export standard NNEF (no tract extensions). Static shapes only.

    Args:
        version: NNEF version written in the header ("1.0").
        check_io: validate with ``nnef.load_graph`` + ``infer_shapes`` and compare the
            nnef_tools interpreter's outputs with PyTorch.
        check_io_tolerance: a preset name or a Tolerance.
        weights: only ``"native"`` (each parameter in its own dtype, bfloat16 as float32).
    """

    name = "khronos"
    engine = "nnef_tools"
    asset_suffix = ""  # the Khronos reader takes a folder
    bool_bits = 1  # the Khronos reader only takes 1-bit MSB-first bools

    def __init__(self, version: str = "1.0", check_io: bool = True, check_io_tolerance="approximate",
                 weights: str = "native"):
        if weights != "native":
            raise InvalidArgumentError(
                f"KhronosNNEF writes weights in their own dtype only ({spell('weights', 'native')}), got "
                f"{spell('weights', weights)}: f16 and Q4_0 storage are tract formats; use "
                f"{phrase('tract_weights', 'target=TractNNEF(weights=...)')}")
        self.version = str(version)
        self.check_io = bool(check_io)
        self.check_io_tolerance = resolve_tolerance(check_io_tolerance)
        self.dynamic_axes = {}

    def validate(self, asset: Path) -> None:
        """The Khronos parser and shape inference accept the asset (folder or archive)."""
        validate_khronos(asset)

    def run(self, asset: Path, input_sets: list) -> list:
        return run_khronos_many(asset, input_sets)
