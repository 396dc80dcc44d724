"""What a target is checked against: inputs and the outputs PyTorch gave for them, as numpy."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class CheckCase:
    """One set of inputs with the outputs PyTorch gave for them."""

    label: str  # e.g. "example" or "S=5"
    inputs: list  # numpy arrays, in graph input order
    expected: list  # numpy arrays, in graph output order
