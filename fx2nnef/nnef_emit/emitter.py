"""Lower an IR graph to NNEF: graph.nnef text, .dat files and fragments.

Unsupported ops are collected over the whole graph and reported together, each with its
module path and source line; nothing is written then.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
import re
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from ..errors import EmitError, UnsupportedOpError, phrase, spell
from ..ir import Graph, SymDim, Value, flat_values, op_key, sanitize
from ..ir.dims import substitute
from . import dat
from .context import EmitContext, Statement, format_value, nnef_type
from .profile import TargetProfile, profile_of
from .registry import REGISTRY, Registry

FRAGMENT_DIR = Path(__file__).parent / "fragments"
# keyword aliases torch accepts besides the schema name
_ALIASES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "self": "input"}


@dataclasses.dataclass
class Emitted:
    """An NNEF asset ready to write: the text in memory, each tensor as a :class:`dat.DatFile`
    that reads its data (e.g. a model parameter) only while it is written."""

    files: dict  # file name -> bytes or dat.DatFile
    text: str
    nnef_op_counts: dict
    source_op_counts: dict


@dataclasses.dataclass
class Problem:
    kind: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.where}: {self.reason}"


def _bind(fn, ctx, node):
    sig = inspect.signature(fn)
    params = sig.parameters
    kwargs = {}
    for k, v in node.kwargs.items():
        if k not in params and _ALIASES.get(k) in params:
            k = _ALIASES[k]
        if k == "inplace" and k not in params:
            continue  # the in-place pass made every call functional
        kwargs[k] = v
    args = list(node.args)
    var_pos = next((p.name for p in params.values() if p.kind is p.VAR_POSITIONAL), None)
    if var_pos in kwargs:
        # torch takes `x.view(size=(2, 3))` for the varargs `x.view(2, 3)`: pass it as the one
        # positional value, after the parameters before it (given by position or by keyword)
        before = [p.name for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD][1 + len(args):]
        if all(n in kwargs for n in before):
            args += [kwargs.pop(n) for n in before] + [kwargs.pop(var_pos)]
    try:
        return sig.bind(ctx, *args, **kwargs)
    except TypeError as exc:
        raise EmitError(f"arguments do not match the converter signature {sig}: {exc}") from None


def _complete_shape(value: Value, computed: Value) -> None:
    """Fill the dims the probes could not fit (e.g. the last piece of ``chunk(3)`` of a dynamic
    length) from the shape the converter computed."""
    if value.shape is None or computed.shape is None or len(value.shape) != len(computed.shape):
        if value.shape is None and computed.shape is not None and None not in computed.shape:
            value.shape = tuple(computed.shape)
        return
    if None in value.shape:
        value.shape = tuple(c if v is None else v for v, c in zip(value.shape, computed.shape))




def properties_fragment(properties: dict) -> str:
    """The ``tract_core_properties`` fragment holding ``properties`` (strings), as tract writes it."""
    def quoted(v) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"')

    items = ", ".join(f'("{k}", "{quoted(v)}")' for k, v in sorted(properties.items()))
    return ("fragment tract_core_properties(\n) -> (properties: (string, tensor<scalar>)[])\n{\n"
            f"  properties = [{items}];\n}}")


def emit_graph(graph: Graph, target: TargetProfile | str, *, registry: Registry = REGISTRY, bool_bits: int = 8,
               extra_fragments: dict | None = None, on_node: Optional[Callable[[], None]] = None,
               extra_asserts: Sequence[str] = ()) -> Emitted:
    """Lower ``graph`` for ``target`` (a profile, or a declared target's name); ``on_node`` is called after each node
    (progress). Constant data is not read here, except small tensors a converter computes on.
    ``extra_asserts`` are written as ``extension tract_assert`` lines after the graph's own."""
    ctx = _context_for(graph, target, registry)
    ctx.domain = [c for c in (size_condition(a) for a in extra_asserts) if c is not None]
    for v in graph.inputs:
        ctx.call("nnef.external", v)
    lower_nodes(ctx, graph, on_node=on_node)
    _write_repeats_once(ctx)
    out_names = _bind_outputs(ctx, graph)
    text = _render(ctx, graph, out_names, extra_fragments or {}, list(extra_asserts))
    files: dict = {"graph.nnef": text.encode()}
    for label, (value, source) in sorted(ctx.variables.items()):
        files[f"{label}.dat"] = dat.DatFile(source, bool_bits=bool_bits)
    return Emitted(files, text, dict(sorted(ctx.used_ops.items())), graph.op_counts())


_CONDITION = re.compile(r"^\s*([A-Za-z0-9_+\-* ]+?)\s*(<=|>=|==|<|>)\s*([A-Za-z0-9_+\-* ]+?)\s*$")
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


def size_condition(text: str) -> Optional[Callable[[dict], bool]]:
    """``env -> bool`` for an assertion on the sizes (``S+P < 2048``) written with the export, or
    None for a scenario's (``tg: S==1``, holding in one use only) or one of another form. The
    lowering then knows sizes beyond it are not the export's (a slice start ``2048 - P - S``
    stays non-negative)."""
    m = _CONDITION.match(text)
    if m is None or ":" in text:
        return None
    left, op, right = m.groups()
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", left + " " + right))

    def value(expr: str, env: dict) -> int:  # a sum of products of sizes and integers
        total = 0
        for sign, term in re.findall(r"([+-]?)\s*([^+-]+)", expr.replace(" ", "")):
            prod = 1
            for f in term.split("*"):
                prod *= int(f) if f.isdigit() else env[f]
            total += -prod if sign == "-" else prod
        return total

    def holds(env: dict) -> bool:
        if not names <= set(env):
            return True  # not about these sizes
        return _COMPARE[op](value(left, env), value(right, env))
    return holds


def _context_for(graph: Graph, target: TargetProfile | str, registry: Registry) -> EmitContext:
    """A context for lowering ``graph``: every op has a rule, the input and output names are
    reserved, and the inputs are named."""
    profile = profile_of(target)
    _check_lowerings(graph, profile, registry)
    ctx = EmitContext(profile, registry, graph.symbols)
    ctx.ranges = dict(getattr(graph, "ranges", {}))
    ctx.data_counts = set(getattr(graph, "data_counts", ()))
    ctx.graph_outputs = {id(v) for v in graph.outputs}
    ctx.graph_inputs = list(graph.inputs)
    for name in list(graph.output_names) + [v.name for v in graph.inputs]:
        ctx._taken.add(sanitize(name))
    for v in graph.inputs:
        ctx.names[id(v)] = sanitize(v.name)
    return ctx


_QUANTIZED = ("torch.ops.quantized.", "torch.ops._quantized.", "torch.quantize_per_tensor", "torch.quantize_per_channel",
              "Tensor.dequantize", "torch.dequantize", "torch.ops.quantized_decomposed.")


def _why_missing(kind: str) -> str:
    """What to do about an op of a known family that has no lowering."""
    if kind.startswith(_QUANTIZED):
        formats = phrase("weights.f16_or_q4_0", "TractNNEF(weights='f16' or 'q4_0')")
        return (": a torch.ao quantized module or tensor (quantize_dynamic, a converted or prepared quantized model); "
                "its integer kernels and run-time activation quantization have no NNEF form here. Export the float "
                "model, and for smaller weights write them as float16 or Q4_0 "
                f"({formats})")
    return ""


def _check_lowerings(graph: Graph, profile: TargetProfile, registry: Registry) -> None:
    target = profile.name
    missing = [Problem(n.kind, n.where, f"no lowering for target '{target}'" + _why_missing(n.kind))
               for n in graph.nodes if registry.lookup(n.kind, profile) is None]
    if missing:
        raise UnsupportedOpError(_problem_message(missing, target), missing)


def lower_nodes(ctx: EmitContext, graph: Graph, on_node: Optional[Callable[[], None]] = None) -> None:
    """Run the converter of every node of ``graph`` into ``ctx`` (graph inputs already named),
    calling ``on_node`` (if given) after each.

    Raises UnsupportedOpError listing every node whose converter failed.
    """
    profile, registry = ctx.profile, ctx.registry
    problems = []
    failed: set = set()  # ids of values a failed node should have produced
    for node in graph.nodes:
        ctx.node = node
        if any(id(v) in failed for v in node.inputs()):
            failed.update(id(o) for o in node.outputs)  # downstream of a reported failure
            continue
        fn = registry.lookup(node.kind, profile)
        try:
            bound = _bind(fn, ctx, node)
            result = fn(*bound.args, **bound.kwargs)
            produced = flat_values(result)
            if len(produced) != len(node.outputs):
                raise EmitError(f"converter returned {len(produced)} tensors for {len(node.outputs)} outputs")
            for ir_out, res in zip(node.outputs, produced):
                if ir_out is not res:
                    ctx.names[id(ir_out)] = ctx.name_of(res)
                    _complete_shape(ir_out, res)
        except EmitError as exc:
            problems.append(Problem(node.kind, node.where, str(exc)))
            failed.update(id(o) for o in node.outputs)
        except Exception as exc:  # noqa: BLE001 - a converter bug must still name the op
            unknown = _unknown_size(node)
            problems.append(Problem(node.kind, node.where, unknown or f"{type(exc).__name__}: {exc}"))
            failed.update(id(o) for o in node.outputs)
        if on_node is not None:
            on_node()
    ctx.node = None
    if problems:
        raise UnsupportedOpError(_problem_message(problems, ctx.target), problems)


def _unknown_size(node) -> Optional[str]:
    """Why ``node`` cannot be lowered when one of its tensors has a size no form was found for
    (shapes fitted from probe runs that follow no polynomial or floor division), else None."""
    for v in list(node.inputs()) + list(node.outputs):
        shape = getattr(v, "shape", None)
        if shape is not None and any(d is None for d in shape):
            axes = [i for i, d in enumerate(shape) if d is None]
            return (f"the size of '{v.name}' on axis {axes[0]} follows no form found for the dynamic sizes (the "
                    "shapes were fitted from probe runs; see the notes for why the fake replay could not give "
                    "them): export with other example sizes (a size of 1 deep in the model fixes it in the "
                    "replay), or make those axes static")
    return None


@dataclasses.dataclass
class FragmentBody:
    """An IR graph lowered as the body of an NNEF fragment (see :func:`emit_fragment`)."""

    text: str  # the whole ``fragment name(...) -> (...) { ... }`` definition
    weights: list  # (parameter name, constant Value) in parameter order, after the graph inputs
    used_ops: dict  # NNEF op -> count inside the body
    fragments: set  # fragments the body calls
    inputs: list = dataclasses.field(default_factory=list)  # parameter names of the graph inputs
    results: list = dataclasses.field(default_factory=list)  # result names, in output order
    texts: dict = dataclasses.field(default_factory=dict)  # generated fragments the body calls: name -> text


_SQUEEZE = op_key(torch.squeeze)  # how the IR builder takes a scanned piece's step out of it


def emit_fragment(graph: Graph, target: TargetProfile | str, name: str, *, registry: Registry = REGISTRY,
                  loop_body: int = 0, n_state: int = 0) -> FragmentBody:
    """Lower ``graph`` as NNEF fragment ``name``: its inputs are the first parameters, its
    constants (weights) the following ones, its outputs the results. The first ``n_state`` inputs
    of a loop body are its state.

    NOTE: tract 0.23.9 infers facts of a scan's state from the body and refuses the scan when the
    next state lacks them ("inconsistent fact: body input 0 is 2,3,I64 🬳 2 and body output 0 is
    2,3,I64"). The body's runtime zero (the exact integer ``//`` and ``%``) read from the state
    does that, so it is read from the step's slice first (a slice of the scanned piece itself, its
    scanned axis kept, makes tract panic). An exact ``//`` or ``%`` of the state itself still
    fails to load (a clear error).
    """
    ctx = _context_for(graph, target, registry)
    ctx.loop_body = loop_body
    if n_state:
        # the step's slices (a piece without its scanned axis), then loop-invariant values, then the state
        later = list(graph.inputs[n_state:])
        slices = [n.outputs[0] for n in graph.nodes if n.outputs and n.args and any(n.args[0] is v for v in later)
                  and n.kind == _SQUEEZE]
        ctx.zero_sources = slices + later + list(graph.inputs[:n_state])
    lower_nodes(ctx, graph)
    results = _bind_outputs(ctx, graph)
    weights = [(label, value) for label, (value, _) in ctx.variables.items()]
    body = [_statement(ctx, st) for st in ctx.statements if st.op != "variable"]
    params = [f"{ctx.names[id(v)]}: tensor<{nnef_type(v.dtype)}>" for v in graph.inputs]
    params += [f"{label}: tensor<{nnef_type(v.dtype)}>" for label, v in weights]
    out_types = [f"{n}: tensor<{nnef_type(v.dtype)}>" for n, v in zip(results, graph.outputs)]
    text = (f"fragment {name}(\n    " + ",\n    ".join(params) + f"\n) -> ( {', '.join(out_types)} )\n{{\n"
            + "".join(f"    {line}\n" for line in body) + "}")
    used = dict(ctx.used_ops)
    used.pop("variable", None)
    return FragmentBody(text, weights, used, set(ctx.fragments), [ctx.names[id(v)] for v in graph.inputs],
                        list(results), dict(ctx.fragment_texts))


_NOT_MERGED = ("variable", "external", "tract_core_external")


def _write_repeats_once(ctx: EmitContext) -> None:
    """A statement that computes what an earlier one computes (the same op on the same arguments)
    is dropped, its outputs named as the earlier one's. Merged decisions each rebuild their
    condition from the sizes, and the paths of a merge repeat what their outcomes share. Besides
    a smaller graph: tract 0.23.9 fails at run time on some graphs holding such repeats ("eval()
    called on a Dummy op. This is a bug.", two selects alike on alike conditions: fuzz 24452)."""
    seen: dict = {}
    kept = []
    holders: dict = {}  # name -> ids of the Values written with it (a lowering may name several alike)
    for value_id, name in ctx.names.items():
        holders.setdefault(name, []).append(value_id)
    for st in ctx.statements:
        if st.op in _NOT_MERGED or not st.outputs:
            kept.append(st)
            continue
        text = _statement(ctx, st)
        key = text[text.index(" = ") + 3:]
        first = seen.get(key)
        if first is None or len(first.outputs) != len(st.outputs):
            seen.setdefault(key, st)
            kept.append(st)
            continue
        for out, earlier in zip(st.outputs, first.outputs):
            old, new = ctx.names[id(out)], ctx.names[id(earlier)]
            if old == new:
                continue
            for value_id in holders.get(old, ()):
                ctx.names[value_id] = new
            holders.setdefault(new, []).extend(holders.pop(old, ()))
        ctx._alive.append(st)  # its outputs' ids stay taken
        ctx.used_ops[st.op] -= 1
        if not ctx.used_ops[st.op]:
            del ctx.used_ops[st.op]
    ctx.statements[:] = kept


def _bind_outputs(ctx: EmitContext, graph: Graph) -> list:
    """Give each graph output its requested name, copying where a value cannot be renamed."""
    names, seen = [], set()
    input_names = {ctx.names[id(v)] for v in graph.inputs}
    produced = {}
    for st in ctx.statements:
        if st.op != "variable":
            for o in st.outputs:
                produced[ctx.names[id(o)]] = o
    for value, wanted in zip(graph.outputs, graph.output_names):
        wanted = sanitize(wanted)
        current = ctx.name_of(value)
        owner = produced.get(current)
        if owner is None or current in input_names or current in seen:
            out = Value(wanted, value.dtype, value.shape)
            ctx.names[id(out)] = wanted
            ctx.statements.append(Statement([out], "copy", [value], {}))
            ctx.used_ops["copy"] = ctx.used_ops.get("copy", 0) + 1
        elif current != wanted:
            for key, name in list(ctx.names.items()):
                if name == current:
                    ctx.names[key] = wanted
            produced[wanted] = produced.pop(current)
        names.append(wanted)
        seen.add(wanted)
    return names


def _stepped_symbols(graph: Graph) -> dict:
    """``{S: (Q, step, rest)}`` for each symbol valid only at ``S % step == rest``: the graph declares
    ``Q`` and writes ``S`` as ``step*Q + rest``.

    NOTE: tract 0.23.9 cannot prove ``2*((H+3)/4) == (H+1)/2`` (it does not know that H is a
    multiple of 4), so a UNet's skip concatenation fails at load; with ``H = 4*H_4`` its shape
    arithmetic agrees (tract resolves ``H_4`` from the input's size)."""
    out = {}
    taken = set(graph.symbols)
    for r in getattr(graph, "ranges", {}).values():
        if r.step > 1:
            q = f"{r.symbol}_{r.step}"
            while q in taken:
                q += "_"
            taken.add(q)
            out[r.symbol] = (q, r.step, r.rest % r.step)
    return out


def _range_asserts(r, stepped: dict) -> list:
    """tract assertion texts of a range, on the declared symbol."""
    if r.symbol not in stepped:
        return r.asserts()
    q, step, rest = stepped[r.symbol]
    lo = max(r.lo if r.lo is not None else 1, 1)
    out = []
    q_lo = -(-(lo - rest) // step)
    if q_lo > 0:
        out.append(f"{q} >= {q_lo}")
    if r.hi is not None:
        out.append(f"{q} <= {(r.hi - rest) // step}")
    return out


def _written_dims(x):
    """The :class:`SymDim` values in an argument (nested lists and tuples)."""
    if isinstance(x, SymDim):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _written_dims(v)


def _lower_bound_asserts(statements, graph: Graph, stepped: dict, mapping: dict, asserted: list) -> list:
    """``S >= 1`` (``S >= 0`` where the range admits 0) for each declared symbol read by a floor
    division the graph writes, unless an assertion already bounds it from below.

    NOTE: tract 0.23.9 reduces ``(4*X + 3)/4`` to ``X`` only when it can prove ``X >= 0``, and
    with no assertion on ``H`` it cannot for ``X = (H+3)/4``: a pad to a multiple of 4 then a
    conv by 4 (DaViT's stem) keeps ``(3+4*((H+3)/4))/4`` in its shapes, and a reshape written
    ``(H+3)/4`` fails at load ("... should be equal to ..."). The bound is the one the export
    holds anyway (sizes are >= 1), so it admits no size that was not admitted before."""
    read = set()
    for st in statements:
        for d in _written_dims(list(st.args) + list(st.attrs.values())):
            d = _with_dims(d, mapping) if mapping else d
            if isinstance(d, SymDim) and d.symbols - d.input_symbols:
                read |= d.input_symbols
    lower = {a.split(">=")[0].strip() for a in asserted if ">=" in a}
    ranges = getattr(graph, "ranges", {})
    out = []
    for s in graph.symbols:
        name = stepped[s][0] if s in stepped else s
        if name not in read or name in lower:
            continue
        r = ranges.get(s)
        # a stepped symbol is asserted >= 1 when it cannot be 0 (``_range_asserts``): here it can
        zero = s in stepped or (r is not None and r.lo is not None and r.lo < 1)
        out.append(f"{name} >= {0 if zero else 1}")
    return out


def _with_dims(x, mapping: dict):
    """``x`` (an argument) with its symbolic sizes rewritten by ``mapping``."""
    if isinstance(x, SymDim):
        return substitute(x, mapping)
    if isinstance(x, list):
        return [_with_dims(v, mapping) for v in x]
    if isinstance(x, tuple):
        return tuple(_with_dims(v, mapping) for v in x)
    return x


def _render(ctx: EmitContext, graph: Graph, out_names: list, extra_fragments: dict,
            extra_asserts: Sequence[str] = ()) -> str:
    stepped = _stepped_symbols(graph)
    mapping = {s: step * SymDim.symbol(q) + rest for s, (q, step, rest) in stepped.items()}
    body = [_statement(ctx, st, mapping) for st in ctx.statements]
    ops = set(ctx.used_ops)
    lines = ["version 1.0;", ""]
    ext = []
    if any(op.startswith("tract_core_") for op in ops):
        ext.append("extension tract_registry tract_core;")
    if any(op.startswith("tract_transformers_") for op in ops):
        ext.append("extension tract_registry tract_transformers;")
    if any(op.startswith("tract_onnx_") for op in ops):
        ext.append("extension tract_registry tract_onnx;")
    for s in graph.symbols:
        ext.append(f"extension tract_symbol {stepped[s][0] if s in stepped else s};")
    bounded = []
    for r in getattr(graph, "ranges", {}).values():
        bounded += _range_asserts(r, stepped)
    bounded += _lower_bound_asserts(ctx.statements, graph, stepped, mapping, bounded + list(extra_asserts))
    ext += [f"extension tract_assert {a};" for a in bounded]
    ext += [f"extension tract_assert {a};" for a in extra_asserts]
    fragments = sorted(set(ctx.fragments) | set(extra_fragments))
    fragment_ext = ctx.profile.fragment_extensions
    if fragments and fragment_ext:
        ext.append(f"extension {', '.join(fragment_ext)};")
    lines += ext + ([""] if ext else [])
    for name in fragments:
        text = extra_fragments.get(name) or ctx.fragment_texts.get(name)
        if text is None:
            text = (FRAGMENT_DIR / f"{name}.nnef").read_text()
        lines += [text.strip(), ""]
    ins = ", ".join(ctx.names[id(v)] for v in graph.inputs)
    lines.append(f"graph {sanitize(graph.name)}( {ins} ) -> ( {', '.join(out_names)} )")
    lines.append("{")
    lines += ["    " + b for b in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _statement(ctx: EmitContext, st: Statement, mapping: Optional[dict] = None) -> str:
    attrs = dict(st.attrs)
    args = list(st.args)
    if mapping:
        attrs = {k: _with_dims(v, mapping) for k, v in attrs.items()}
        args = [_with_dims(a, mapping) for a in args]
    type_param = attrs.pop("__type__", None)
    as_array = attrs.pop("__array__", False)
    outs = [ctx.names[id(o)] for o in st.outputs]
    lhs = outs[0] if len(outs) == 1 and not as_array else ("[" if as_array else "(") + ", ".join(outs) + ("]" if as_array else ")")
    parts = [format_value(a, ctx.names) for a in args]
    parts += [f"{k} = {format_value(v, ctx.names)}" for k, v in attrs.items()]
    op = st.op + (f"<{type_param}>" if type_param else "")
    return f"{lhs} = {op}({', '.join(parts)});"


def _problem_message(problems: list, target: str) -> str:
    lines = [f"{len(problems)} op(s) cannot be exported for target '{target}'; nothing was written:"]
    lines += [f"  - {p}" for p in problems]
    lines.append("Register a converter (fx2nnef.nnef_emit.register) or a module extractor for these ops, "
                 f"or use {spell('fallback', 'piece_by_piece')} to isolate them.")
    return "\n".join(lines)
