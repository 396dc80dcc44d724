"""Build the torch-free IR from a traced, cleaned and probed fx graph.

Only tensor ops become IR nodes. Python scalars (sizes, their arithmetic) are folded to
ints or symbolic dims; tensors that depend neither on input data nor on dynamic sizes are
folded to constants.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import re
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from torch.utils._pytree import tree_leaves, tree_map

from ...errors import TraceError
from ...ir import DType, Graph, Node, SymDim, Value, flat_values, method_key, op_key
from ...ir.dims import SymRange, settle_extrema
from ..shapes.data_counts import settle_data_sizes
from ..shapes.probe import Analysis, Unfit
from ..tracing.control_flow import SLOT_FUNCTIONS
from ..tracing.scan import ScanCall
from ..tracing.structures import has_tensor
from .torch_data import ir_dtype, torch_data

_MODULE_CONFIG_TYPES = (int, float, bool, str, type(None))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy().copy()


class Unrepresentable:
    """A Python value that changes with the dynamic sizes in a way the IR cannot express."""

    def __init__(self, node: fx.Node, detail: str):
        self.node, self.detail = node, detail

    def __repr__(self):
        return f"<unrepresentable {self.node.name}: {self.detail}>"


class _Builder:
    def __init__(self, gm: fx.GraphModule, analysis: Analysis, input_names, output_names,
                 upcast_bfloat16: bool = False):
        self.gm, self.a = gm, analysis
        self.upcast = upcast_bfloat16
        self.f32_values: dict = {}
        self.graph = Graph(type(gm).__name__)
        self.graph.symbols = list(analysis.symbols)
        self.env: dict = {}
        self.input_names, self.output_names = input_names, output_names
        self.consts: dict = {}

    # values ---------------------------------------------------------------------------
    def _shape(self, n: fx.Node, path=()):
        sym = self.a.sym.get(n)
        for i in path:
            sym = sym[i] if isinstance(sym, tuple) else None
        if not isinstance(sym, tuple):
            return None
        return tuple(None if isinstance(d, Unfit) else d for d in sym)

    def _constant(self, n: fx.Node, value):
        if n in self.consts:
            return self.consts[n]
        if isinstance(value, torch.Tensor):
            name = n.target if n.op == "get_attr" else n.name
            data = torch_data(value, str(name))
            if n.op != "get_attr":
                data.derived_from = _read_attributes(n, self.a.values)
            v = self.graph.add_constant(str(name), data)
        elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            v = type(value)(self._constant_item(n, x, i) for i, x in enumerate(value)) if type(value) in (list, tuple) else tuple(self._constant_item(n, x, i) for i, x in enumerate(value))
        else:
            v = _plain(value)
        self.consts[n] = v
        return v

    def _f32_value(self, n: fx.Node):
        """A bfloat16 model is exported as computing in float32 (tract has no bfloat16; the checks
        run the model in float32): a constant the trace computed in bfloat16 (``cos.to(x.dtype)``,
        ``w * 0.1``) is computed again from float32 inputs, with bfloat16 casts made float32. It
        keeps its traced value when it cannot be (a module call, an in-place op, an error), and
        when the new values are not within bfloat16 rounding of the traced ones (random draws)."""
        value = self.a.values[n]
        if not _holds_bfloat16(value):
            return value
        if n.op == "get_attr":
            return tree_map(_as_f32, value)  # not kept: a parameter's copy is made only when read
        if n in self.f32_values:
            return self.f32_values[n]
        out = value
        name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
        if n.op in ("call_function", "call_method") and not name.endswith("_") and name != "setitem":
            def arg(x):
                if isinstance(x, fx.Node):
                    return self._f32_value(x)
                return torch.float32 if x is torch.bfloat16 else x
            args, kwargs = fx.node.map_aggregate((n.args, n.kwargs), arg)
            try:
                with torch.no_grad():
                    out = (n.target(*args, **kwargs) if n.op == "call_function"
                           else getattr(args[0], n.target)(*args[1:], **kwargs))
            except Exception:  # noqa: BLE001 - kept as traced (bfloat16 values, read as float32)
                out = value
            if not _within_bfloat16_rounding(out, value):
                out = value
        self.f32_values[n] = out
        return out

    def _constant_item(self, n, x, i):
        if isinstance(x, torch.Tensor):
            return self.graph.add_constant(f"{n.name}_{i}", torch_data(x, f"{n.name}_{i}"))
        return _plain(x)

    def _scalar(self, n: fx.Node):
        sym = self.a.sym.get(n)
        if isinstance(sym, Unfit) or sym is None:
            lowered = self._float_scalar(n)
            if lowered is not None:
                return lowered
            return Unrepresentable(n, f"value changes with the dynamic sizes as {sym!r}")
        if isinstance(sym, tuple):
            return tuple(Unrepresentable(n, "") if isinstance(d, Unfit) else d for d in sym)
        return sym

    def _float_scalar(self, n: fx.Node):
        """A Python float computed from dynamic sizes (``s ** -0.5``, ``math.sqrt(s)``) as a 0-d
        f32 tensor node, or None when ``n`` is not such arithmetic."""
        if n.op != "call_function" or not isinstance(self.a.values[n], float) or n.kwargs:
            return None
        target = _FLOAT_SCALAR_OPS.get(n.target)
        if target is None:
            return None
        args = tuple(self._f32_operand(n, a) for a in self.lookup(n.args))
        if not any(isinstance(a, Value) for a in args) or any(isinstance(a, Unrepresentable) for a in args):
            return None
        if n.target is math.log and len(args) == 2:  # math.log(x, base) = log(x) / log(base)
            x, base = (self._add_scalar_node(n, op_key(torch.log), (a,)) if isinstance(a, Value) else math.log(a)
                       for a in args)
            return self._add_scalar_node(n, op_key(operator.truediv), (x, base))
        if len(args) != 1 and target not in _BINARY_SCALAR_OPS:
            return None
        return self._add_scalar_node(n, op_key(target), args)

    def _f32_operand(self, n: fx.Node, a):
        if isinstance(a, SymDim):
            return self._add_scalar_node(n, "nnef.size", (a, DType.F32))
        if isinstance(a, Value) and a.dtype != DType.F32:
            return self._add_scalar_node(n, op_key(torch.Tensor.float), (a,))
        return a

    def _add_scalar_node(self, n: fx.Node, kind: str, args: tuple) -> Value:
        out = self.graph.new_value(n.name, DType.F32, ())
        self.graph.add_node(Node(kind, args, {}, [out], module_path=n.meta.get("module_path", ""),
                                 module_type=n.meta.get("module_type", ""), source=n.meta.get("source"),
                                 name=n.name))
        return out

    def _data_number(self, n: fx.Node, value) -> bool:
        """Whether ``n`` is a number read from data that the graph computes (a slice bound, see
        ``tracing/data_bounds.py``): an ``item()`` the IR keeps as a 0-d integer tensor."""
        return n.op == "call_method" and n.target == "item" and type(value) is int and n in self.a.data_dep \
            and n not in self.a.constant

    def _tensor_outputs(self, n: fx.Node, value, path=()):
        """Create IR Values for every tensor in ``value``; returns the same structure."""
        if not path and self._data_number(n, value):
            return self.graph.new_value(n.name, DType.I64, ())
        if isinstance(value, torch.Tensor):
            name = n.name if not path else n.name + "_" + "_".join(map(str, path))
            return self.graph.new_value(name, ir_dtype(value.dtype), self._shape(n, path))
        if isinstance(value, (list, tuple)):
            return tuple(self._tensor_outputs(n, x, path + (i,)) for i, x in enumerate(value))
        if value is None or isinstance(value, (int, float, bool)):
            return value
        raise TraceError(f"op '{n.name}' returns a {type(value).__name__}, which cannot be exported"
                         f"{_where(n)}")

    def lookup(self, arg):
        if isinstance(arg, fx.Node):
            return self.env[arg]
        if isinstance(arg, (list, tuple)):
            items = [self.lookup(a) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        if isinstance(arg, dict):
            return {k: self.lookup(v) for k, v in arg.items()}
        if isinstance(arg, slice):
            return slice(self.lookup(arg.start), self.lookup(arg.stop), self.lookup(arg.step))
        return _plain(arg)

    # nodes ----------------------------------------------------------------------------
    def build(self) -> Graph:
        names = iter(self.input_names)
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                value = self.a.values[n]
                shape = self._shape(n)
                if shape is None or any(d is None for d in shape):
                    raise TraceError(f"could not determine the shape of input '{n.name}'")
                v = self.graph.add_input(next(names), ir_dtype(value.dtype), shape)
                self.env[n] = v
            elif n.op == "output":
                self._outputs(n)
            elif n in self.a.constant:
                value = self.a.values[n]
                if self.upcast and n.op != "get_attr" and _holds_bfloat16(value):
                    value = self._f32_value(n)
                self.env[n] = self._constant(n, value)
            else:
                self.env[n] = self._op(n)
        return self.graph

    def _op(self, n: fx.Node):
        value = self.a.values[n]
        if n.op == "call_function" and n.target in SLOT_FUNCTIONS:
            return self.graph.new_value(n.name, ir_dtype(value.dtype), self._shape(n))
        if n.op == "call_function" and isinstance(n.target, ScanCall):
            return self._loop(n, value)
        if not has_tensor(value) and not self._data_number(n, value):
            return self._scalar(n)
        if n.op == "call_function" and n.target is operator.getitem and isinstance(self.env.get(n.args[0]), tuple):
            return self.env[n.args[0]][n.args[1]]
        if n.op == "call_function" and n.target is getattr and isinstance(self.env.get(n.args[0]), tuple):
            # a named field of a multi-output result: torch.max(x, 1).indices
            base = self.a.values[n.args[0]]
            field = getattr(base, n.args[1])
            return self.env[n.args[0]][next(i for i, t in enumerate(base) if t is field)]
        args = self.lookup(n.args)
        kwargs = self.lookup(n.kwargs)
        _refuse_unrepresentable(n, (args, kwargs), self.a)
        if n.op == "call_function":
            kind = op_key(n.target)
        elif n.op == "call_method":
            kind = method_key(n.target)
        elif n.op == "call_module":
            module = self.gm.get_submodule(n.target)
            kind = op_key(type(module))
            kwargs = dict(kwargs)
            kwargs["module"] = self._module_info(n, module)
        else:
            raise TraceError(f"unexpected node {n.op} {n.target}{_where(n)}")
        outputs = self._tensor_outputs(n, value)
        flat = flat_values(outputs)
        src = n.meta.get("source")
        node = Node(kind, tuple(args), dict(kwargs), flat, module_path=n.meta.get("module_path", ""),
                    module_type=n.meta.get("module_type", ""), source=src, name=n.name)
        node.meta["structure"] = outputs
        self.graph.add_node(node)
        return outputs

    def _loop(self, n: fx.Node, value):
        """A scan or while loop: the IR nodes that depend on its slots move into a body Graph.

        The body takes ``(*carries, *slices, *full)`` and returns ``(*carries, *ys)``; a slice
        and a y keep the scanned axis with size 1 (the step's piece), so the body squeezes
        and unsqueezes it. ``full`` are the loop-invariant values the body reads.
        """
        call: ScanCall = n.target
        init, xs, _outer, carry_slots, scan_slots, outs = self.lookup(n.args)
        slots = list(carry_slots) + list(scan_slots)
        reach = {id(v) for v in slots}
        body_nodes = []
        for node in self.graph.nodes:
            if any(id(v) in reach for v in node.inputs()):
                body_nodes.append(node)
                reach.update(id(o) for o in node.outputs)
        for node in body_nodes:
            self.graph.remove_node(node)
        body = Graph(f"{call.kind}_body")
        body.symbols = list(self.graph.symbols)
        pieces = []
        for s in scan_slots:
            shape = None if s.shape is None else s.shape[:call.dim] + (1,) + s.shape[call.dim:]
            piece = body.new_value(f"{s.name}_piece", s.dtype, shape)
            pieces.append(piece)
            body.add_node(Node(op_key(torch.squeeze), (piece, call.dim), {}, [s], name=s.name))
        for node in body_nodes:
            body.add_node(node)
        produced = {id(v) for v in slots} | {id(o) for node in body_nodes for o in node.outputs}
        full: list = []
        for v in [v for node in body_nodes for v in node.inputs()] + list(outs):
            if id(v) not in produced and not v.is_constant and all(v is not f for f in full):
                full.append(v)
        body.inputs = list(carry_slots) + pieces + full
        body.outputs = list(outs[: call.n_carry])
        body.output_names = [f"{s.name}_next" for s in carry_slots]
        for j, y in enumerate(outs[call.n_carry:]):
            shape = None if y.shape is None else y.shape[:call.dim] + (1,) + y.shape[call.dim:]
            yp = body.new_value(f"y{j}_piece", y.dtype, shape)
            body.add_node(Node(op_key(torch.unsqueeze), (y, call.dim), {}, [yp], name=yp.name))
            body.outputs.append(yp)
            body.output_names.append(f"y{j}")
        outputs = self._tensor_outputs(n, value)
        node = Node("fx2nnef.loop", (list(init), list(xs), full), {
            "body": body, "dim": call.dim, "reverse": call.reverse, "n_carry": call.n_carry, "kind": call.kind},
            flat_values(outputs), module_path=n.meta.get("module_path", ""),
            module_type=n.meta.get("module_type", ""), source=n.meta.get("source"), name=n.name)
        node.meta["structure"] = outputs
        node.meta["control_flow"] = n.meta.get("control_flow", call.kind)
        self.graph.add_node(node)
        return outputs

    def _module_info(self, n: fx.Node, module: torch.nn.Module) -> dict:
        config = {k: v for k, v in vars(module).items()
                  if not k.startswith("_") and (isinstance(v, _MODULE_CONFIG_TYPES) or
                                                (isinstance(v, tuple) and all(isinstance(x, _MODULE_CONFIG_TYPES) for x in v)))}
        params = {}
        for pname, p in list(module.named_parameters()) + list(module.named_buffers()):
            params[pname] = self.graph.add_constant(f"{n.target}.{pname}", torch_data(p, f"{n.target}.{pname}"))
        return {"type": type(module).__name__, "path": str(n.target), "config": config, "params": params}

    def _outputs(self, n: fx.Node):
        results = n.args[0]
        for name, r in zip(self.output_names, results):
            v = self.env[r]
            if not isinstance(v, Value):
                raise TraceError(f"output '{name}' is not a tensor ({v!r})")
            self.graph.outputs.append(v)
            self.graph.output_names.append(name)


# Python arithmetic on sizes that yields a float, and the tensor op that computes it on a 0-d tensor
_BINARY_SCALAR_OPS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, math.pow}
_FLOAT_SCALAR_OPS = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.truediv: operator.truediv, operator.pow: operator.pow, operator.neg: operator.neg,
    math.pow: operator.pow, math.sqrt: torch.sqrt, math.exp: torch.exp, math.log: torch.log, math.log2: torch.log2,
    math.log10: torch.log10, math.sin: torch.sin, math.cos: torch.cos, math.tanh: torch.tanh,
}


# torch's fake tensors raise these on an op whose output shape follows the data (nonzero, a mask index)
_DATA_SHAPED = ("DynamicOutputShapeException", "DataDependentOutputException")


def _plain(x) -> Any:
    """Python/torch constants as IR constants (dtypes become DType)."""
    if isinstance(x, torch.dtype):
        return ir_dtype(x)
    if isinstance(x, torch.device):
        return str(x)
    if isinstance(x, torch.Size):
        return tuple(x)
    return x


def _refuse_unrepresentable(n: fx.Node, args, analysis: Analysis) -> None:
    """A TraceError when an op reads a Python number of the dynamic sizes that the graph cannot
    compute (``math.lgamma(S)``): no converter could give it a meaning. An integer with no form
    when the shapes were fitted from probes (the fake replay could not give them) is a size no
    polynomial or floor division fitted: the message says so and which example sizes to try."""
    symbols = analysis.symbols
    found: list = []
    fx.node.map_aggregate(args, lambda x: found.append(x) if isinstance(x, Unrepresentable) else None)
    if found:
        bad = found[0].node
        what = getattr(bad.target, "__name__", str(bad.target))
        value = analysis.values.get(bad)
        form = analysis.sym.get(bad)
        if isinstance(form, Unfit) and form.why:
            raise TraceError(f"'{n.name}'{_where(n)} reads '{bad.name}' ({what}{_where(bad)}), {form.why}")
        if analysis.shapes_from.startswith("probes") and isinstance(value, int) and not isinstance(value, bool):
            why = analysis.shapes_from[len("probes ("):-1] if analysis.shapes_from.endswith(")") else ""
            if any(k in why for k in _DATA_SHAPED) and _reads_node_named(bad, why):
                # the size follows the data (x[x > 0], masked_select, nonzero): other sizes cannot help
                raise TraceError(
                    f"'{n.name}'{_where(n)} reads '{bad.name}' ({what}{_where(bad)}), a size that follows the data: "
                    f"{why.replace('the fake replay failed at', 'the op at')} gives as many items as its data "
                    "selects, which no graph of fixed shapes holds. Keep the shape (torch.where(mask, x, 0), "
                    "masked_fill) or reduce over the mask ((x * mask).sum() / mask.sum())")
            larger = ", ".join(f"{s}={2 * v}" for s, v in analysis.base_env.items())
            raise TraceError(
                f"'{n.name}'{_where(n)} reads '{bad.name}' ({what}{_where(bad)}), a size that follows no form found "
                f"for the dynamic sizes ({', '.join(symbols)}): the shapes were fitted from probe runs, the fake "
                f"replay could not give them{' (' + why + ')' if why else ''}. Export with other example sizes "
                f"(e.g. {larger}: a size of 1 deep in the model at the example is a common cause), or drop those "
                "dims from dynamic_axes")
        raise TraceError(
            f"'{n.name}'{_where(n)} reads '{bad.name}' ({what}{_where(bad)}), a Python number computed from the "
            f"dynamic sizes ({', '.join(symbols)}) in a way the graph cannot compute. Compute it with torch ops "
            "on a tensor holding the size (e.g. x.new_tensor(x.shape[1], dtype=torch.float32)), or drop that "
            "dim from dynamic_axes")


def _reads_node_named(node: fx.Node, why: str) -> bool:
    """Whether ``node`` reads, through its inputs, the node that ``why`` names (``failed at 'name'``)."""
    m = re.search(r"failed at '([^']+)'", why)
    if m is None:
        return False
    seen, todo = set(), [node]
    while todo:
        x = todo.pop()
        if x.name == m.group(1):
            return True
        if x not in seen:
            seen.add(x)
            todo.extend(x.all_input_nodes)
    return False


def _where(n: fx.Node) -> str:
    src = n.meta.get("source")
    return f" at {src}" if src else ""


def build_ir(gm: fx.GraphModule, analysis: Analysis, input_names: list, output_names: list,
             upcast_bfloat16: bool = False) -> Graph:
    """The IR of ``gm``; ``upcast_bfloat16``: the model is a bfloat16 one exported as computing in
    float32 (constants computed in bfloat16 by the trace are computed again in float32)."""
    if any(r.bounded for r in analysis.ranges.values()):
        # min(7, S) is 7 where the export holds for S >= 7 only: written as the emitter's bounds are
        analysis = dataclasses.replace(analysis, sym={n: settle_extrema(d, analysis.ranges)
                                                      for n, d in analysis.sym.items()})
    analysis = dataclasses.replace(analysis, sym=dict(analysis.sym))
    counts = settle_data_sizes(gm, analysis)
    graph = _Builder(gm, analysis, input_names, output_names, upcast_bfloat16).build()
    graph.symbols += counts
    graph.data_counts = list(counts)
    graph.guards = list(analysis.guards)
    graph.ranges = dict(analysis.ranges)
    for s, v in analysis.base_env.items():
        if v == 0:  # an empty example: the range holds 0, which the lowering must then keep valid
            r = graph.ranges.get(s) or SymRange(s)
            graph.ranges[s] = SymRange(s, 0, r.hi, r.step, r.rest, r.why)
    return graph


def _read_attributes(n: fx.Node, values: dict) -> frozenset:
    """The model attributes (``get_attr`` targets) whose values a constant-folded node was computed
    from: through tensor-valued nodes only (a dtype, device or size read from a weight is not its
    values)."""
    seen, todo, found = {n}, list(n.all_input_nodes), set()
    while todo:
        m = todo.pop()
        if m in seen or not isinstance(values.get(m), torch.Tensor):
            continue
        seen.add(m)
        if m.op == "get_attr":
            found.add(str(m.target))
        todo.extend(m.all_input_nodes)
    return frozenset(found)


def _holds_bfloat16(value) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in tree_leaves(value))


def _as_f32(x):
    return x.to(torch.float32) if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x


def _within_bfloat16_rounding(a, b) -> bool:
    """Whether ``a`` (recomputed in float32) has ``b``'s structure, shapes and, where ``b`` is
    bfloat16, values within a few bfloat16 roundings of it (float32 for bfloat16)."""
    la, lb = tree_leaves(a), tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            continue
        if x.shape != y.shape or not (x.dtype == y.dtype or (y.dtype == torch.bfloat16 and x.dtype == torch.float32)):
            return False
        if y.dtype == torch.bfloat16 and y.numel():
            y32 = y.to(torch.float32)
            finite = torch.isfinite(y32)
            scale = float(y32[finite].abs().max()) if bool(finite.any()) else 0.0
            if not torch.allclose(x, y32, rtol=1 / 16, atol=scale / 64, equal_nan=True):
                return False
    return True
