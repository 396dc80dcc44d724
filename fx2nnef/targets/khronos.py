"""KhronosNNEF: standard NNEF only, validated by the Khronos parser, run by nnef_tools."""
from __future__ import annotations

import tempfile
import tarfile
from pathlib import Path
from typing import Optional

from ..errors import InvalidArgumentError
from .base import CheckReport, InferenceTarget
from .khronos_runner import run_khronos, validate_khronos
from .tolerance import compare_outputs, resolve_tolerance


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
    bool_bits = 1  # the Khronos reader only takes 1-bit MSB-first bools

    def __init__(self, version: str = "1.0", check_io: bool = True, check_io_tolerance="approximate",
                 weights: str = "native"):
        if weights != "native":
            raise InvalidArgumentError(
                f"KhronosNNEF writes weights in their own dtype only (weights='native'), got weights={weights!r}: "
                "f16 and Q4_0 storage are tract formats; use target=TractNNEF(weights=...)")
        self.version = str(version)
        self.check_io = bool(check_io)
        self.check_io_tolerance = resolve_tolerance(check_io_tolerance)
        self.dynamic_axes = {}

    def post_export(self, asset: Path, input_names, output_names, cases) -> Optional[CheckReport]:
        with tempfile.TemporaryDirectory(prefix="fx2nnef_khr_") as tmp:
            folder = Path(asset)
            if not folder.is_dir():
                with tarfile.open(folder) as tar:
                    tar.extractall(tmp, filter="data")
                folder = Path(tmp)
            validate_khronos(folder)
            if not self.check_io:
                return None
            report = []
            for case in cases:
                got = run_khronos(folder, case.inputs)
                report.append((case.label, compare_outputs(output_names, case.expected, got, self.check_io_tolerance)))
        return CheckReport("nnef_tools", report)
