"""EmitContext: the builder through which converters write NNEF.

Converters never format NNEF text: they call ``ctx.op("slice", x, axes=[1], begin=[0],
end=[n])`` and get back a :class:`fx2nnef.ir.Value` standing for the result.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from ..errors import EmitError
from ..ir import DType, Node, SymDim, TensorData, Value, unique_name
from .profile import TargetProfile, profile_of

TRACT_DATUM = {
    DType.F16: "f16", DType.F32: "f32", DType.F64: "f64", DType.I8: "i8", DType.I16: "i16",
    DType.I32: "i32", DType.I64: "i64", DType.U8: "u8", DType.BOOL: "bool", DType.BF16: "f32",
}
NNEF_TYPE = {True: "scalar", False: "integer"}


def nnef_type(dtype: DType) -> str:
    """NNEF's own type name: scalar, integer or logical."""
    if dtype is DType.BOOL:
        return "logical"
    return "scalar" if dtype.is_float else "integer"


@dataclasses.dataclass
class Statement:
    outputs: list
    op: str
    args: list
    attrs: dict


class Literal:
    """A value written verbatim (e.g. an identifier inside an array)."""

    def __init__(self, text: str):
        self.text = text


def format_value(x, names: dict) -> str:
    """NNEF text of an argument: Value name, literal, array or tuple."""
    if isinstance(x, Value):
        return names[id(x)]
    if isinstance(x, Literal):
        return x.text
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return format_float(float(x))
    if isinstance(x, SymDim):
        return dim_text(x)
    if isinstance(x, str):
        return "'" + x.replace("'", "\\'") + "'"
    if isinstance(x, list):
        return "[" + ", ".join(format_value(v, names) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(format_value(v, names) for v in x) + ")"
    if isinstance(x, DType):
        return "'" + TRACT_DATUM[x] + "'"
    raise EmitError(f"cannot write {x!r} ({type(x).__name__}) as an NNEF argument")


def dim_text(d: SymDim) -> str:
    """A symbolic size as tract reads it.

    NOTE: tract 0.23.9 evaluates ``S-((S)/2)`` as floor(S/2) (it is ceil(S/2)), and
    ``S-((S)/2)-((S)/2)`` as 0; a sum with one floor division of coefficient +-1 is written as
    that one division (``P - N/d = (d*P - N + d - 1)/d``), which tract evaluates right. Before
    that, every subtracted division is written as an added one (:func:`_positive_divisions`), so
    that several divisions (``S - S//2 - S//4``) come out right too.
    """
    from ..ir.dims import _DIV_ATOMS

    d = _positive_divisions(d)
    if not isinstance(d, SymDim):
        return str(d)
    divs = [(m, c) for m, c in d.terms.items() if any(s in _DIV_ATOMS for s in m)]
    if len(divs) == 1 and len(divs[0][0]) == 1 and divs[0][1] in (1, -1) and len(d.terms) > 1:
        (mono, coef), = divs
        numerator, divisor = _DIV_ATOMS[mono[0]]
        rest = d - SymDim({mono: coef})
        if coef == 1:
            d = SymDim.floordiv(rest * divisor + numerator, divisor)
        else:
            d = SymDim.floordiv(rest * divisor - numerator + (divisor - 1), divisor)
        if not isinstance(d, SymDim):
            return str(d)
    return str(d).replace(" ", "")


def _positive_divisions(d: SymDim):
    """``d`` with every floor division of negative coefficient written with a positive one:
    ``-(N/k) = ((k-1)*(N+1))/k - N`` for ``N >= 0`` (a size's numerator). tract 0.23.9 merges a
    subtracted division into the terms around it as if it were a fraction (``S-((S)/2)-((S)/4)``
    comes out one short at odd S), which it does not do with added ones."""
    from ..ir.dims import _DIV_ATOMS

    def symbols(mono) -> set:
        return SymDim({mono: 1}).input_symbols

    # only where tract has something to merge the division into: another term of degree one in
    # the same symbols. Elsewhere the rewrite is not needed, and tract could no longer match the
    # sizes of a reshape (``-(H/8)`` in ``4*(H/8)*(W/8) - 2*(H/8)``) with its own
    linear = [(m, symbols(m)) for m in d.terms if len(m) == 1]
    out: object = d
    for mono, coef in d.terms.items():
        if coef < 0 and len(mono) == 1 and mono[0] in _DIV_ATOMS \
                and any(m != mono and syms & symbols(mono) for m, syms in linear):
            numerator, divisor = _DIV_ATOMS[mono[0]]
            ceiling = SymDim.floordiv((numerator + 1) * (divisor - 1), divisor)
            out = out - SymDim({mono: coef}) + (-coef) * (ceiling - numerator)
    return out


def format_float(f: float) -> str:
    if math.isnan(f):
        raise EmitError("NaN cannot be written as an NNEF literal")
    if math.isinf(f):
        f = math.copysign(3.4028234663852886e38, f)
    text = repr(f)
    if "e" in text and "." not in text.split("e")[0]:
        mant, exp = text.split("e")
        text = f"{mant}.0e{exp}"
    elif "." not in text and "e" not in text:
        text += ".0"
    return text


class EmitContext:
    """Accumulates NNEF statements, variables and fragments for one graph."""

    def __init__(self, target: TargetProfile | str, registry, symbols: list):
        self.profile = profile_of(target)  # what the lowering asks of the target
        self.target = self.profile.name
        self.registry = registry
        self.symbols = list(symbols)
        self.statements: list[Statement] = []
        self.variables: dict = {}  # label -> (Value, TensorData)
        self.names: dict = {}  # id(Value) -> NNEF identifier
        self._alive: list = []  # every named Value, so that no id in `names` is ever reused
        self.fragments: set = set()
        self.fragment_texts: dict = {}  # fragments generated during lowering (loop bodies): name -> text
        self.used_ops: dict = {}
        self._taken: set = set()
        self.node: Optional[Node] = None
        self._var_cache: dict = {}
        self.graph_outputs: set = set()  # ids of the graph's output Values
        self.graph_inputs: list = []  # the graph's input Values
        # where runtime_zero reads its zero first (a loop body: its scanned pieces before its state)
        self.zero_sources: Optional[list] = None
        self.memo: dict = {}  # values built once per graph by helpers (key -> Value)
        self.ranges: dict = {}  # symbol -> SymRange: the sizes the export is valid for (Graph.ranges)
        self.data_counts: set = set()  # symbols of counts read from data (Graph.data_counts): may be 0
        self.count_values: dict = {}  # such a symbol -> the [1] i64 tensor of its value, once made
        self.domain: list = []  # env -> bool: assertions across symbols (S+P < 2048) the sizes also meet
        self.loop_body = 0  # how many tract_core_scan bodies deep this lowering is (see ops.reduce.divide_by_count)
        self.size_values: set = set()  # ids of one-item Values holding a size (see _track_size_values)

    def is_used(self, value: Value) -> bool:
        """Whether a later op or the graph's outputs read ``value``."""
        return bool(value.uses) or id(value) in self.graph_outputs

    # naming ---------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        return unique_name(base, self._taken)

    def bind(self, value: Value, name: Optional[str] = None) -> str:
        if id(value) not in self.names:
            self._alive.append(value)
            self.names[id(value)] = self.fresh(name or value.name)
        return self.names[id(value)]

    def name_of(self, value: Value) -> str:
        if id(value) not in self.names:
            if value.is_constant:
                self.variable(value)
            else:
                raise EmitError(f"value '{value.name}' is used before it is computed")
        return self.names[id(value)]

    # emission -------------------------------------------------------------------------
    def op(self, op: str, *args, out_dtype: Optional[DType] = None, out_shape=None, n_out: int = 1,
           out_name: Optional[str] = None, out: Optional[Value] = None, **attrs):
        """Emit ``result = op(args..., attrs...)`` and return the result Value(s).

        ``out_dtype``/``out_shape`` describe the result (default: dtype of the first tensor
        input, shape unknown); ``out`` writes into an existing, already named Value. Every
        other keyword is an NNEF attribute of the op.
        """
        dtype, shape, name = out_dtype, out_shape, out_name
        if op == "gt" and self.profile.integer_gt_as_lt and len(args) == 2 and not attrs \
                and any(isinstance(a, Value) and not a.dtype.is_float for a in args):
            # tract 0.23.9 reads an integer ``gt`` whose operands it knows to be uniform (a
            # product by a zero constant, a tiled constant) as true when a select or an ``and``
            # consumes it, whatever the values (0 > 0 too); ``lt`` with the operands swapped is right
            op, args = "lt", (args[1], args[0])
        for a in _values(args) + _values(list(attrs.values())):
            self.name_of(a)
        if self.data_counts:
            self._no_count_as_number(op, args, attrs)
        first = next(iter(_values(args)), None)
        dtype = dtype or (first.dtype if first is not None else DType.F32)
        base = name or (self.node.name if self.node is not None else op)
        if out is not None:
            outs = [out]
        else:
            outs = [Value(f"{base}", dtype, None if shape is None else tuple(shape)) for _ in range(n_out)]
        for o in outs:
            self.bind(o)
        self.statements.append(Statement(outs, op, list(args), attrs))
        self.used_ops[op] = self.used_ops.get(op, 0) + 1
        self._track_size_values(op, args, outs)
        return outs[0] if n_out == 1 else tuple(outs)

    def _track_size_values(self, op: str, args: tuple, outs: list) -> None:
        """Note a one-item result whose value tract knows at load as an expression of the sizes (the
        shape of a range, a range of one item, and what casts, reshapes and arithmetic with
        constants keep of them): ``helpers.ew`` hides those from products with data."""
        if len(outs) != 1 or outs[0].shape is None or not all(isinstance(d, int) and d == 1 for d in outs[0].shape):
            return
        if op in ("tract_core_shape_of", "tract_core_range"):
            self.size_values.add(id(outs[0]))
        elif op in _SIZE_KEEPING:
            values = _values(args)
            if any(id(v) in self.size_values for v in values) \
                    and all(id(v) in self.size_values or v.is_constant for v in values):
                self.size_values.add(id(outs[0]))

    def _no_count_as_number(self, op: str, args: tuple, attrs: dict) -> None:
        """tract knows a count made from data (``tract_onnx_non_zero``) as the size of the tensors that
        have it, never as a number: an argument reading it fails at run time ("Undetermined symbol"
        in a range). A reshape's shape is matched with its input's, where the count is known."""
        todo = list(args) + ([] if op == "reshape" else list(attrs.values()))
        while todo:
            a = todo.pop()
            if isinstance(a, (list, tuple)):
                todo.extend(a)
            elif isinstance(a, SymDim) and a.symbols & self.data_counts:
                raise EmitError(f"{op} would take the count of items selected from data ({a}) as a number, which "
                                "tract cannot: compute with the selected tensor itself (a reduction over it, "
                                "torch.ones_like(t).cumsum(0) - 1 for its positions) or keep the shape with a mask "
                                "(torch.where(mask, x, 0))")

    def call(self, kind: str, *args, **kwargs):
        """Run the registered converter for ``kind`` (with this target's override)."""
        fn = self.registry.lookup(kind, self.profile)
        if fn is None:
            raise EmitError(f"no converter registered for '{kind}' (target {self.target})")
        return fn(self, *args, **kwargs)

    def variable(self, value: Value) -> str:
        """Declare a constant Value as an NNEF variable (a .dat file, read only when written)."""
        if id(value) in self.names:
            return self.names[id(value)]
        source = value.source
        if _transposed(source) and value.shape != source.stored_shape:
            raise EmitError(f"the Q4_0 weight '{value.name}' is stored transposed and can only be read by a matmul "
                            "(fx2nnef bug: the weight-format pass let another reader through)")
        if source.stored_format is not None and source.dtype is not value.dtype:
            return self._converted_variable(value)
        key = None
        if source.size <= 64:
            data = source.numpy()
            key = (source.stored_format, data.dtype.str, data.shape, data.tobytes())
        if key is not None and key in self._var_cache:
            self._alive.append(value)
            self.names[id(value)] = self._var_cache[key]
            return self._var_cache[key]
        name = self.bind(value)
        self.variables[name] = (value, source)
        self.statements.append(Statement([value], "variable", [], {
            "shape": list(source.stored_shape if _transposed(source) else source.shape), "label": name, "__type__": nnef_type(value.dtype)}))
        if key is not None:
            self._var_cache[key] = name
        return name

    def stored(self, value: Value) -> Value:
        """``value`` as stored, for ops that take operands of mixed float types (tract's matmul):
        a constant stored in another dtype than it computes in (f16 weights) gives its variable,
        uncast, and a Q4_0 weight stored transposed gives its variable, of the transposed shape
        (see :func:`stored_transposed`); any other value is returned as is.

        NOTE: tract 0.23.9 does not fold a cast of a large constant (its PropConst refuses folds
        that grow memory past a budget): a cast f16 weight is converted again on every run (20x
        slower than f32 for a 2048x2048 matmul), while ``matmul(f32, f16 variable)`` runs at f32 speed.
        """
        if not (value.is_constant and value.source.stored_format is not None
                and (value.source.dtype is not value.dtype or _transposed(value.source))):
            return value
        key = ("stored", id(value))
        if key not in self.memo:
            shape = value.source.stored_shape if _transposed(value.source) else value.shape
            raw = Value(value.name, value.source.dtype, shape, value.source)
            self.variable(raw)
            self._alive.append(value)
            self.memo[key] = raw
        return self.memo[key]

    def _converted_variable(self, value: Value) -> str:
        """A constant stored in another dtype than it computes in: the variable, then a cast to
        the compute dtype (converters that can read the stored form use :meth:`stored`)."""
        stored = self.stored(value)
        converted = self.call("nnef.cast", stored, value.dtype, value.shape)
        self._alive.append(value)
        self.names[id(value)] = self.names[id(converted)]
        return self.names[id(value)]

    def const(self, data, dtype: Optional[DType] = None, name: str = "const") -> Value:
        """A new constant tensor from array-like ``data`` (an array already of that dtype and
        C-contiguous is kept, not copied: a weight reshaped by a converter stays a view), or from a
        :class:`TensorData` of ``dtype``, kept as it is."""
        if isinstance(data, TensorData) and dtype in (None, data.dtype):
            v = Value(name, data.dtype, tuple(data.shape), data)
            self.variable(v)
            return v
        arr = np.asarray(data, dtype=None if dtype is None else dtype.numpy_name, order="C")  # keeps rank 0
        if arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(np.float32)
        v = Value(name, DType.from_numpy(arr.dtype), tuple(arr.shape), arr)
        self.variable(v)
        return v

    def use_fragment(self, name: str) -> None:
        self.fragments.add(name)

    def define_fragment(self, name: str, text: str, uses: set = frozenset(), texts: Optional[dict] = None) -> None:
        """Add a generated fragment ``name`` (with the fragments its body calls) to the asset."""
        self.fragments.add(name)
        self.fragments.update(uses)
        self.fragment_texts.update(texts or {})
        self.fragment_texts[name] = text

    def fail(self, message: str):
        raise EmitError(message)


def _transposed(source) -> bool:
    return bool(getattr(source, "transposed", False))


def stored_transposed(value: Value) -> bool:
    """Whether ``value`` is a constant stored as its transpose (a Q4_0 ``[K, N]`` matmul operand)."""
    return value.is_constant and _transposed(value.source)


def _values(items) -> list:
    out = []
    for x in items:
        if isinstance(x, Value):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(_values(list(x)))
    return out


# ops through which tract keeps a one-item tensor's value as an expression of the sizes (its
# ``uniform_tdim``) when every other operand is a constant or such a value too
_SIZE_KEEPING = ("tract_core_cast", "unsqueeze", "squeeze", "reshape", "copy", "tile", "neg", "add", "sub", "mul",
                 "div", "min", "max")
