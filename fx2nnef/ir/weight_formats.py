"""Pass: choose how each float parameter is stored (``native``, ``f16`` or ``q4_0``).

The choice only changes a constant's :attr:`Value.source` (wrapped in a
:class:`~fx2nnef.ir.weight_data.F16Data` or :class:`~fx2nnef.ir.weight_data.Q4_0Data`); the
value keeps its dtype, so the graph computes as before and the emitter converts where the
stored type differs (matmuls read f16 weights as stored; other readers get a cast).

- ``f16``: every float32 parameter (bfloat16 ones included: they are read as float32) whose
  values fit in float16. Buffers and constants made in ``forward`` (rotary frequencies,
  masks) keep their dtype: rounding them would change the model, not just its size.
- ``q4_0``: 2-D parameters used only as the ``weight`` of ``F.linear`` or ``F.embedding``
  (blocks along their last dim), or only as the right operand of ``mm``/``addmm``/``matmul``
  (GPT-2's ``Conv1D``: blocks along their first dim, stored transposed), with that dim a
  multiple of 32, finite and within the range of float16 scales.

A :class:`Calibrated` (found beforehand by running the model on calibration inputs, see
:mod:`fx2nnef.llm.calibration`) gives Q4_0 blocks rounded by GPTQ for some parameters (the others
are rounded by the scale search) and parameters kept in float16 rather than Q4_0.

Every other parameter stays native, and the returned :class:`WeightChoice` list says why.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

from .dtypes import DType
from .graph import Graph, Node, Value
from .weight_data import (F16_MAX, Q4_0_BLOCK_LEN, Q4_0_MAX_MAGNITUDE, Q4_0_ROUNDINGS, F16Data, Q4_0Data, max_abs,
                          q4_0_size)

WEIGHT_FORMATS = ("native", "f16", "q4_0")
NOT_A_WEIGHT = "not a Linear or Embedding weight"
# op kind -> (parameter name, position) of an operand Q4_0 may replace, and whether the weight is
# contracted on its first dim (``x @ w`` with w [K, N]: stored transposed) rather than its last
_QUANTIZABLE_USES = {
    "F.linear": ("weight", 1, False), "F.embedding": ("weight", 1, False),
    "torch.mm": ("mat2", 1, True), "Tensor.mm": ("mat2", 1, True),
    "torch.addmm": ("mat2", 2, True), "Tensor.addmm": ("mat2", 2, True),
    "torch.matmul": ("other", 1, True), "Tensor.matmul": ("other", 1, True), "operator.matmul": ("other", 1, True),
}


@dataclasses.dataclass
class Calibrated:
    """Per-parameter choices made beforehand from calibration inputs, by parameter path."""

    blocks: dict = dataclasses.field(default_factory=dict)  # path -> Q4_0 blocks found by GPTQ
    keep_f16: frozenset = frozenset()  # paths stored as float16 rather than Q4_0 (their error costs most)

    def renamed(self, rename: Callable[[str], Optional[str]]) -> "Calibrated":
        """The same choices under other paths (``rename(path)``; None drops it)."""
        blocks = {rename(p): b for p, b in self.blocks.items() if rename(p) is not None}
        return Calibrated(blocks, frozenset(rename(p) for p in self.keep_f16 if rename(p) is not None))


KEPT_F16 = "kept in float16: its measured error impact ranks among the worst (keep_f16)"


@dataclasses.dataclass
class WeightChoice:
    """How one float parameter is written."""

    name: str  # the IR value's name
    path: str  # the model attribute (e.g. "layers.0.mlp.up_proj.weight")
    shape: tuple
    stored: str  # "q4_0", "f16", or the native dtype ("f32", "f16", ...)
    reason: str = ""  # why it was not converted, when it was not
    native_bytes: int = 0
    stored_bytes: int = 0
    transposed: bool = False  # stored as its transpose (Q4_0 of a [K, N] matmul operand)

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.path} {list(self.shape)}: {self.stored}{why}"


def apply_weight_format(graph: Graph, fmt: str, eligible: Optional[Callable[[Value], bool]] = None,
                        rounding: str = "minmax", calibrated: Optional[Calibrated] = None) -> list[WeightChoice]:
    """Store the float parameters of ``graph`` in ``fmt`` where possible (see the module doc).

    ``eligible(value)`` may refuse a constant (e.g. one the caller cannot reproduce in its
    reference run). ``rounding``: how Q4_0 scales are chosen (``"minmax"``, ``"search"``, see
    :mod:`.weight_data`, or ``"gptq"``: ``calibrated``'s blocks, the search for parameters it has
    none for). ``calibrated``: also the parameters kept in float16. Returns one
    :class:`WeightChoice` per float parameter, in graph order.
    """
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"weight format must be one of {WEIGHT_FORMATS}, got {fmt!r}")
    if rounding not in Q4_0_ROUNDINGS:
        raise ValueError(f"Q4_0 rounding must be one of {Q4_0_ROUNDINGS}, got {rounding!r}")
    outputs = {id(v) for v in graph.outputs}
    # a parameter also read through a constant computed from it (``w.T`` folded) keeps its values:
    # that constant is written as computed, from the original values, and the checks' reference
    # reads the parameter's stored values everywhere
    derived = {}
    for value in graph.constants():
        for path in value.source.derived_from:
            derived.setdefault(path, value.name)
    choices = []
    for value in graph.constants():
        source = value.source
        if source.parameter_path is None or not value.dtype.is_float or source.stored_format is not None:
            continue
        choice = WeightChoice(value.name, source.parameter_path, tuple(source.shape), value.dtype.value,
                              native_bytes=source.nbytes, stored_bytes=source.nbytes)
        choices.append(choice)
        if fmt == "native" or (fmt == "f16" and value.dtype is DType.F16):
            continue
        reason = _refusal(value, fmt, id(value) in outputs)
        if reason is None and source.parameter_path in derived:
            reason = f"also read through {derived[source.parameter_path]}, a constant computed from it"
        if reason is None and eligible is not None and not eligible(value):
            reason = "not found among the model's parameters for the reference run"
        if reason is not None:
            choice.reason = reason
            continue
        if fmt == "q4_0" and calibrated is not None and source.parameter_path in calibrated.keep_f16:
            _keep_f16(value, choice)
            continue
        value.source = F16Data(source) if fmt == "f16" else _q4_0(value, rounding, calibrated)
        choice.stored = fmt
        choice.transposed = bool(getattr(value.source, "transposed", False))
        choice.stored_bytes = value.source.nbytes if fmt == "f16" else q4_0_size(source.shape)
    return choices


def _q4_0(value: Value, rounding: str, calibrated: Optional[Calibrated]) -> Q4_0Data:
    """The Q4_0 form of ``value``: GPTQ's blocks when ``calibrated`` has them, else by ``rounding``
    ("gptq" without blocks: the search)."""
    blocks = calibrated.blocks.get(value.source.parameter_path) if calibrated is not None else None
    transposed = _contracted_first(value)
    if rounding == "gptq" and blocks is not None and not transposed:
        return Q4_0Data(value.source, False, "gptq", blocks)
    return Q4_0Data(value.source, transposed, "search" if rounding == "gptq" else rounding)


def _keep_f16(value: Value, choice: WeightChoice) -> None:
    """Store ``value`` as float16 (a float32 one converted; a float16 one as it is)."""
    choice.reason = KEPT_F16
    if value.dtype is DType.F32 and max_abs(value.source) <= F16_MAX:
        value.source = F16Data(value.source)
        choice.stored, choice.stored_bytes = "f16", value.source.nbytes


def _refusal(value: Value, fmt: str, is_output: bool) -> Optional[str]:
    """Why ``value`` cannot be stored in ``fmt`` (None when it can)."""
    if fmt == "f16":
        if value.dtype is not DType.F32:
            return f"{value.dtype.value} parameters are kept"
        largest = max_abs(value.source)
        if not largest <= F16_MAX:
            return f"values up to {largest:g} do not fit in float16"
        return None
    if value.dtype not in (DType.F32, DType.F16):
        return f"{value.dtype.value} parameters are kept"
    if is_output:
        return "it is a graph output"
    uses = [_quantizable_use(node, value) for node in value.uses]
    if not any(u is not None for u in uses):
        kinds = sorted({node.kind for node in value.uses})
        return f"{NOT_A_WEIGHT} (read by {', '.join(kinds)})" if len(value.shape) == 2 else NOT_A_WEIGHT
    for node, use in zip(value.uses, uses):
        if use is None:
            return f"also used by {node.kind} ({node.where}), not only as a matmul or Embedding weight"
    if len(set(uses)) > 1:
        return "used both as a Linear weight [N, K] and as the right operand [K, N] of a matmul"
    if len(value.shape) != 2:
        return f"rank {len(value.shape)}, Q4_0 takes 2-D weights"
    inner = value.shape[0] if uses[0] else value.shape[1]
    if inner % Q4_0_BLOCK_LEN:
        return f"inner dim {inner} is not a multiple of {Q4_0_BLOCK_LEN}"
    largest = max_abs(value.source)
    if not (math.isfinite(largest) and largest < Q4_0_MAX_MAGNITUDE):
        return f"values up to {largest:g} do not fit Q4_0's float16 scales"
    return None


def _quantizable_use(node: Node, value: Value) -> Optional[bool]:
    """None when ``node`` reads ``value`` otherwise than as the one weight operand Q4_0 may
    replace; else whether that weight is contracted on its first dim."""
    spec = _QUANTIZABLE_USES.get(node.kind)
    if spec is None:
        return None
    name, position, first = spec
    weight = node.kwargs.get(name, node.args[position] if len(node.args) > position else None)
    if weight is not value or sum(v is value for v in node.inputs()) != 1:
        return None
    return first


def _contracted_first(value: Value) -> bool:
    """Whether the (checked) uses of ``value`` contract its first dim."""
    return bool(_quantizable_use(value.uses[0], value))
