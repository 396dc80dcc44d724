"""The IR graph: typed values and op nodes, with use tracking.

The IR is the contract between the tracer and the emitter. It knows neither torch.fx nor
NNEF syntax: an op's ``kind`` is a string naming the source op (``"torch.add"``,
``"Tensor.view"``, ``"operator.getitem"``, ``"module:torch.nn.LSTM"``) and its arguments
are already bound to parameter names.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Optional

import numpy as np

from .dims import SymDim
from .dtypes import DType
from .tensor_data import ArrayData, TensorData


@dataclasses.dataclass(eq=False)
class Value:
    """A tensor in the graph: an input, a constant (``source`` set) or an op output.

    A constant's contents are a :class:`TensorData` (a numpy array given here is wrapped
    in an :class:`ArrayData`); weights stay in the model's own tensors until written.
    """

    name: str
    dtype: Optional[DType] = None
    shape: Optional[tuple] = None  # tuple of Dim (int or SymDim); None when unknown
    source: Optional[TensorData] = None
    producer: Optional["Node"] = None
    uses: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if self.source is not None and not isinstance(self.source, TensorData):
            self.source = ArrayData(self.source)

    @property
    def data(self) -> Optional[np.ndarray]:
        """A constant's values as a numpy array (read on each access; may share memory with
        the model's parameters: never modify it); None for other values."""
        if self.source is None:
            return None
        data = self.source.numpy()
        if self.dtype is not None and self.source.dtype is not self.dtype and self.dtype is not DType.BF16:
            data = data.astype(self.dtype.numpy_name)  # stored in another dtype (e.g. f16 weights)
        return data

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    @property
    def is_constant(self) -> bool:
        return self.source is not None

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __repr__(self) -> str:
        shape = "?" if self.shape is None else "[" + ", ".join(str(d) for d in self.shape) + "]"
        dt = self.dtype.value if self.dtype else "?"
        return f"%{self.name}:{dt}{shape}"


@dataclasses.dataclass
class SourceLoc:
    """Where an op was called from in the user's code."""

    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclasses.dataclass(eq=False)
class Node:
    """An op: ``kind`` applied to ``args``/``kwargs`` (Values, Python constants, SymDims, nested lists).

    Arguments keep the call's own positional/keyword split; the emitter binds them once to
    the converter's signature, which copies the op's schema.
    """

    kind: str
    args: tuple
    kwargs: dict
    outputs: list
    module_path: str = ""
    module_type: str = ""
    source: Optional[SourceLoc] = None
    name: str = ""
    meta: dict = dataclasses.field(default_factory=dict)

    def inputs(self) -> Iterator[Value]:
        """Every Value referenced by the args, in order, with repeats."""
        yield from _values_in(self.args)
        yield from _values_in(self.kwargs)

    @property
    def where(self) -> str:
        parts = []
        if self.module_path:
            parts.append(f"module '{self.module_path}'" + (f" ({self.module_type})" if self.module_type else ""))
        if self.source:
            parts.append(f"at {self.source}")
        return ", ".join(parts) or "at top level"


def _values_in(obj) -> Iterator[Value]:
    """Every Value in ``obj`` (nested dict/list/tuple), in order."""
    if isinstance(obj, Value):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _values_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _values_in(v)


def flat_values(obj) -> list:
    """The Values in ``obj`` (nested dict/list/tuple), in the tracer's flattening order."""
    return list(_values_in(obj))


def map_values(obj, fn):
    """Rebuild ``obj`` (nested dict/list/tuple) with every Value replaced by ``fn(value)``."""
    if isinstance(obj, Value):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_values(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_values(v, fn) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_values(v, fn) for v in obj)
    return obj


@dataclasses.dataclass
class Guard:
    """A decision the trace took on a concrete value (see fx_tracer)."""

    what: str  # e.g. "bool(size(x, 1) > 4) -> True"
    kind: str  # "shape" or "data"
    source: Optional[SourceLoc]
    expected: Any = None
    status: str = "kept"  # kept | checked | violated | bounds | baked (data) | merged (both outcomes exported)
    note: str = ""
    # the line that took the decision when it is not ``source`` (the user's line): a comparison in
    # torch.nn's or a library's code called from there
    decided: Optional[SourceLoc] = None

    def __str__(self) -> str:
        at = self.decided or self.source
        where = f" at {_short_path(at)}" if at else ""
        code = f" `{at.code}`" if at and at.code else ""
        called = f" (called from {_short_path(self.source)})" if at is not self.source and self.source and \
            (at.file, at.line) != (self.source.file, self.source.line) else ""
        note = f" ({self.note})" if self.note else ""
        return f"[{self.kind}] {self.what}{where}{code}{called}: {self.status}{note}"


def _short_path(loc: SourceLoc) -> str:
    """``file:line``, an installed package's file from its package folder on (``torch/nn/...``)."""
    for marker in ("site-packages", "dist-packages"):
        head, sep, tail = loc.file.rpartition(marker)
        if sep:
            return f"{tail.lstrip('/').lstrip(chr(92))}:{loc.line}"
    return str(loc)


class Graph:
    """A list of nodes in execution order with named inputs and outputs."""

    def __init__(self, name: str = "network"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.output_names: list[str] = []
        self.nodes: list[Node] = []
        self.symbols: list[str] = []
        self.data_counts: list[str] = []  # those of the symbols that are counts read from data (may be 0)
        self.guards: list[Guard] = []
        self.ranges: dict = {}  # symbol -> dims.SymRange, only for symbols whose sizes are restricted
        self._names: set[str] = set()

    # construction ---------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        return unique_name(base, self._names)

    def new_value(self, base: str, dtype=None, shape=None, data=None) -> Value:
        """A new value named after ``base``; ``data`` (TensorData or array) makes it a constant."""
        return Value(self.unique_name(base), dtype, None if shape is None else tuple(shape), data)

    def add_input(self, name: str, dtype: DType, shape) -> Value:
        v = self.new_value(name, dtype, shape)
        self.inputs.append(v)
        return v

    def add_constant(self, name: str, data) -> Value:
        """A constant value holding ``data``: a :class:`TensorData` (kept as is, not read) or an
        array-like (copied into an :class:`ArrayData`)."""
        if not isinstance(data, TensorData):
            data = ArrayData(np.array(data, order="C"))  # np.ascontiguousarray would turn rank 0 into [1]
        return self.new_value(name, data.dtype, data.shape, data)

    def add_node(self, node: Node) -> Node:
        for v in node.inputs():
            v.uses.append(node)
        for out in node.outputs:
            out.producer = node
        if not node.name:
            node.name = node.outputs[0].name if node.outputs else self.unique_name(node.kind)
        self.nodes.append(node)
        return node

    def remove_node(self, node: Node) -> None:
        for v in node.inputs():
            if node in v.uses:
                v.uses.remove(node)
        self.nodes.remove(node)

    # inspection -----------------------------------------------------------------------
    def constants(self) -> list[Value]:
        seen, out = set(), []
        for node in self.nodes:
            for v in node.inputs():
                if v.is_constant and id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        for v in self.outputs:
            if v.is_constant and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        return out

    def op_counts(self) -> dict:
        counts: dict = {}
        for n in self.nodes:
            counts[n.kind] = counts.get(n.kind, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(map(repr, self.inputs))}) -> ({', '.join(v.name for v in self.outputs)})"]
        for n in self.nodes:
            args = ", ".join([_fmt(v) for v in n.args] + [f"{k}={_fmt(v)}" for k, v in n.kwargs.items()])
            lines.append(f"  {', '.join(map(repr, n.outputs))} = {n.kind}({args})")
        return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, Value):
        return "%" + v.name
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_fmt(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner})"
    if isinstance(v, SymDim):
        return f"<{v}>"
    return repr(v)


# NNEF keywords; tract also misreads identifiers that merely start with true/false/inf (a literal)
_RESERVED = {"version", "extension", "fragment", "graph", "tensor", "integer", "scalar", "logical", "string",
             "true", "false", "for", "in", "if", "else", "yield", "length_of", "shape_of", "range_of"}


def unique_name(base: str, taken: set, first: int = 0) -> str:
    """``base`` made NNEF-safe and distinct from every name in ``taken`` (which it joins)."""
    base = sanitize(base)
    name, i = base, first
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def sanitize(name: str) -> str:
    """An NNEF-safe identifier: letters, digits and underscores, not starting with a digit,
    not a keyword, not starting with ``true``/``false``/``inf`` (tract's parser splits those:
    ``inf1`` reads as the literal ``inf`` then ``1``)."""
    out = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in str(name))
    out = "_".join(p for p in out.split("_") if p) or "v"
    if out[0].isdigit() or out in _RESERVED or out.startswith(("true", "false", "inf")):
        out = "v_" + out
    return out
