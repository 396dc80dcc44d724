"""Which nodes of a trace depend on input data (not only on input shapes)."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import operator

import torch
import torch.fx as fx

from ...errors import TraceError
from .padded import padded_nonzero
from .scan import ScanCall
from .structures import same_value

_SHAPE_QUERIES = {"size", "dim", "numel", "nelement", "ndimension", "is_contiguous"}
# calls whose failure can follow the data (a matrix that is not positive definite), not only the
# shapes: whether they fail on other inputs is a decision on data (see tracer.call_fails)
_FAILING_ON_DATA = ("cholesky", "inv", "solve", "lu", "eig", "svd", "lstsq", "item", "tolist", "nonzero",
                    "multinomial", "bincount", "assert", "check")
# ops whose result depends only on the shape/dtype of their tensor arguments, not on their data
_META_METHODS = {"new_zeros", "new_ones", "new_full", "new_empty"}
_META_FUNCTIONS = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, padded_nonzero}

# calls whose arguments after the tensor are sizes
_SIZED_METHODS = {"narrow", "view", "reshape", "expand", "repeat", "split", "new_zeros", "new_ones", "new_full",
                  "new_empty", "unflatten", "tile", "select", "chunk", "index_select", "roll"}
_SIZED_FUNCTIONS = {torch.narrow, torch.reshape, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange,
                    torch.split, torch.tile, torch.select}

_FAILING_TARGETS: list = []  # the targets of calls that failed while tracing (see tracer.call_fails)


def _failing_name(key) -> str:
    target = _FAILING_TARGETS[key] if isinstance(key, int) and key < len(_FAILING_TARGETS) else None
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', '')}"


def is_shape_query(n: fx.Node) -> bool:
    """True when ``n`` reads only shapes/dtypes of its tensor arguments."""
    if n.op == "call_method":
        return n.target in _SHAPE_QUERIES or n.target in _META_METHODS
    if n.op == "call_function":
        if n.target in _META_FUNCTIONS:
            return True
        if getattr(n.target, "__name__", None) == "call_fails" and len(n.args) > 1:
            # whether a call fails: on the shapes (a view of a transpose), unless it can fail on data
            name = n.args[1] if isinstance(n.args[1], str) else _failing_name(n.args[1])
            return not any(k in name.lower() for k in _FAILING_ON_DATA)
        return n.target is getattr and n.args[1] in ("shape", "dtype", "device", "ndim")
    return False


def data_dependence(gm: fx.GraphModule) -> set:
    """Nodes of ``gm`` whose value depends on input data (a loop slot stands for a different value
    at every step, so it counts as data)."""
    dep = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder" or n.meta.get("loop_slot"):
            dep.add(n)
            continue
        if is_shape_query(n):
            continue
        if any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    return dep


def _is_slot(n: fx.Node) -> bool:
    return bool(n.meta.get("loop_slot"))


def _is_source(n: fx.Node) -> bool:
    return n.op == "placeholder" or _is_slot(n)


def _is_loop(n: fx.Node) -> bool:
    return "control_flow" in n.meta  # the loop node reads its slots but is not inside its body


def in_loop_body(node: fx.Node, memo: dict) -> bool:
    """Whether ``node`` is computed from a loop slot (it is part of a loop body being recorded)."""
    return depends_on_data(node, memo, _is_slot, _is_loop)


def on_slot_data(node: fx.Node, memo: dict) -> bool:
    """Whether ``node``'s value follows the data of a loop slot (a carry or a scanned slice): it
    differs from step to step, while the body is traced once (sizes of a slot do not differ)."""
    return depends_on_data(node, memo, _is_slot, lambda n: is_shape_query(n) or _is_loop(n))


def depends_on_data(node: fx.Node, memo: dict, is_source=_is_source, is_barrier=is_shape_query) -> bool:
    """Whether ``node`` depends on input data, for a graph still being recorded (``memo`` caches;
    ``is_source`` says which nodes are data, ``is_barrier`` which nodes stop the dependence)."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if is_source(n):
            memo[n] = True
            stack.pop()
            continue
        if is_barrier(n):
            memo[n] = False
            stack.pop()
            continue
        todo = [a for a in n.all_input_nodes if a not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[n] = any(memo[a] for a in n.all_input_nodes)
        stack.pop()
    return memo[node]


# numbers read from tensor data ---------------------------------------------------------------------
# ``int(t)``, ``float(t)``, ``operator.index(t)``, ``t.item()`` and ``t.tolist()`` of a traced tensor
# give the example's number, a plain Python value the trace cannot follow (``int()`` makes
# ``__int__``'s result a plain int, so it cannot even be marked like ``item()``). Where that number
# goes is found by tracing again with it changed: a graph that changes only in its constants took the
# number as a size, slice bound, index or constant (refused: the export would hold for the example's
# value only); a graph that changes its ops took a decision or a loop count on it (kept as a baked
# guard, said in its note).

_READS: contextvars.ContextVar = contextvars.ContextVar("fx2nnef_number_reads", default=None)


@dataclasses.dataclass
class NumberRead:
    """A number read from tensor data while tracing: ``op`` of the traced value at ``source``."""

    op: str  # int | index | float | item | tolist
    value: object
    guard: object  # the tracer's GuardRecord of this read

    @property
    def source(self):
        return self.guard.source


class _Reads:
    """The reads of the traces run in its scope; ``perturb`` the indices whose value is changed."""

    def __init__(self, perturb: frozenset = frozenset()):
        self.perturb = perturb
        self.by_tracer: dict = {}  # id(tracer) -> [NumberRead], in the order of the traces
        self._tracers: list = []  # kept alive so that their ids stay unique


@contextlib.contextmanager
def number_reads(perturb: frozenset = frozenset()):
    """Collect the numbers read from tensor data by the traces run in this scope (and change those
    numbered in ``perturb`` in each)."""
    state = _Reads(perturb)
    token = _READS.set(state)
    try:
        yield state
    finally:
        _READS.reset(token)


def read_number(tracer, op: str, value, guard):
    """Called by the tracer for each number read from tensor data (its guard just recorded):
    the value to hand to the model (the example's, or a changed one)."""
    state = _READS.get()
    if state is None:
        return value
    if id(tracer) not in state.by_tracer:
        state.by_tracer[id(tracer)] = []
        state._tracers.append(tracer)
    reads = state.by_tracer[id(tracer)]
    reads.append(NumberRead(op, value, guard))
    if len(reads) - 1 in state.perturb:
        return _changed(value)
    return value


def _changed(value):
    """Another number of the same kind (never equal to ``value``)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5 + abs(value) * 0.25
    if isinstance(value, (list, tuple)):
        return type(value)(_changed(v) for v in value)
    return value


def _loop_bodies(x: fx.Node, y: fx.Node):
    if isinstance(x.target, ScanCall) and isinstance(y.target, ScanCall):
        fields = ("kind", "label", "dim", "reverse", "n_carry", "check")
        if all(getattr(x.target, f) == getattr(y.target, f) for f in fields):
            return x.target.body, y.target.body
    return None


def _literals(obj, out: list) -> None:
    """The non-node leaves of a node's arguments, in order."""
    if isinstance(obj, fx.Node):
        out.append(("node",))
    elif isinstance(obj, (list, tuple)):
        out.append((type(obj).__name__, len(obj)))
        for x in obj:
            _literals(x, out)
    elif isinstance(obj, dict):
        out.append(("dict", tuple(obj)))
        for x in obj.values():
            _literals(x, out)
    elif isinstance(obj, slice):
        out.append(("slice",))
        for x in (obj.start, obj.stop, obj.step):
            _literals(x, out)
    else:
        out.append(obj)


def _node_refs(obj, index: dict) -> list:
    refs: list = []
    fx.node.map_arg(obj, lambda n: refs.append(index[n]) or n)
    return refs


def graph_difference(a: fx.GraphModule, b: fx.GraphModule):
    """``None`` when ``a`` and ``b`` record the same computation, else ``(kind, node of b)``: kind
    "ops" when the ops or their wiring differ, "values" when only constant arguments or constant
    tensors do."""
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    if len(na) != len(nb):
        return "ops", nb[min(len(na), len(nb)) - 1] if nb else None
    ia = {n: i for i, n in enumerate(na)}
    ib = {n: i for i, n in enumerate(nb)}
    values = None
    for x, y in zip(na, nb):
        loops = _loop_bodies(x, y)
        if loops is not None:  # each trace records its own loop: compare the bodies
            inner = graph_difference(*loops)
            if inner is not None and inner[0] == "ops":
                return "ops", y
            if inner is not None and values is None:
                values = y
        elif x.op != y.op or (x.target != y.target and not (x.op == y.op == "get_attr")):
            return "ops", y
        if _node_refs((x.args, x.kwargs), ia) != _node_refs((y.args, y.kwargs), ib):
            return "ops", y
        la: list = []
        lb: list = []
        _literals((x.args, x.kwargs), la)
        _literals((y.args, y.kwargs), lb)
        same = len(la) == len(lb) and all(same_value(p, q) for p, q in zip(la, lb))
        if x.op == "get_attr":
            same = same_value(operator.attrgetter(x.target)(a), operator.attrgetter(y.target)(b))
        if not same and values is None:
            values = y
    return None if values is None else ("values", values)


class BoundReadMismatch(TraceError):
    """A slice bound taken as a number read from data (``tracing/data_bounds.py``) did not follow
    that number when it changed: the equality at the example was a coincidence."""


def check_number_reads(trace_again, baseline: fx.GraphModule, reads: list, bound: list = ()) -> None:
    """Trace again with the numbers read from tensor data changed (``trace_again()`` traces once,
    in a :func:`number_reads` scope set here) and compare with ``baseline``: raise when a number
    became a size, bound, index or constant of the graph; note a decision taken on it. ``bound``:
    the baseline's bounds taken as numbers read (``data_bounds.BoundRead``), which each other
    trace must take alike."""
    if not reads:
        return

    def difference(perturb):
        with number_reads(frozenset(perturb)):
            try:
                other = trace_again()
            except Exception as exc:  # noqa: BLE001 - the model refuses the changed number
                return "fails", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if list(getattr(other, "bound_reads", ())) != list(bound):
            _bounds_differ(list(bound), list(getattr(other, "bound_reads", ())))
        return graph_difference(baseline, other.gm)

    together = difference(range(len(reads)))
    if together is None:
        return
    failing = []
    for i, read in enumerate(reads):
        found = difference([i]) if len(reads) > 1 else together
        if found is None:
            continue
        kind, where = found
        if kind == "values":
            raise TraceError(_number_in_graph(read, where))
        if kind == "fails":
            failing.append(read)
        what = "changes the ops the trace records (a decision or a loop count taken on it)" if kind == "ops" \
            else f"makes the model fail when it changes ({where})"
        note = (f"the number read with {read.op}() {what}: the export holds for the example's value "
                f"({read.value!r}) only")
        read.guard.branch_note = "; ".join(x for x in (read.guard.branch_note, note) if x)
    if together[0] == "values" and failing:
        # numbers that must change together (``arange(int(n))`` beside ``x[:, :int(n)]``): each alone
        # makes the model fail, all changed at once move a size or constant of the graph
        raise TraceError(_number_in_graph(failing[0], together[1]))


def _bounds_differ(bound: list, other: list) -> None:
    odd = next((b for b in bound if b not in other), None) or next(b for b in other if b not in bound)
    at = f" at {odd.source}: `{odd.source.code}`" if odd.source is not None else ""
    raise BoundReadMismatch(
        f"a slice bound{at} equals a number read from tensor data at the example, but does not follow it when "
        "that number changes: the bound cannot be told from the number. Keep the number a tensor "
        "(x[:n] with n a 0-d integer tensor) where the bound reads it, or compute the bound otherwise")


def _number_in_graph(read: "NumberRead", node: fx.Node) -> str:
    src = node.meta.get("source") or next((u.meta.get("source") for u in node.users if u.meta.get("source")), None)
    at = f" at {src}: `{src.code}`" if src is not None else ""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    if node.op == "get_attr":
        what = "a constant tensor"
    elif node.op == "call_function" and node.target is operator.getitem:
        what = "a slice bound or index"
    elif node.target in _SIZED_METHODS or node.target in _SIZED_FUNCTIONS:
        what = f"a {name}() size"
    else:
        what = f"a constant argument of {name}()"
    origin = read.source
    read_at = f" at {origin}: `{origin.code}`" if origin is not None else ""
    bound = (" A slice bound may be the integer tensor itself, computed with torch ops (x[:t - 1], not "
             "x[:int(t) - 1]): the graph then reads it.") if what == "a slice bound or index" else ""
    return (f"{what}{at} comes from tensor content (read with {read.op}(){read_at}, {read.value!r} on the example): "
            "the export would hold for the example's value only, and a shape that follows data has no NNEF "
            "form. Keep the number a tensor instead: compute with it (x * t, not x * float(t)), mask with it "
            "(torch.where(torch.arange(x.size(0)) < n, x, 0) for a bound), pick data-chosen rows with a tensor "
            "index (x[t] or torch.index_select), or make the bound an input size (a dynamic axis)." + bound)


def sizes_from_shape_tensors(tracer, kind: str, target, args: tuple) -> tuple:
    """``args`` with each 0-d integer tensor computed from sizes only (``torch.tensor(x.shape[1]) // 2``)
    that is used as a slice bound, or as a size of a call taking sizes, read as a traced number
    (``item()``): it is a shape expression, which the graph keeps symbolic."""
    def as_number(obj):
        value = getattr(obj, "value", None) if isinstance(obj, fx.Proxy) else None
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_floating_point \
                and not value.dtype.is_complex and value.dtype != torch.bool \
                and not depends_on_data(obj.node, tracer._data_memo):
            return tracer.create_proxy("call_method", "item", (obj,), {})
        return obj

    def in_slices(obj):
        if isinstance(obj, slice):
            return slice(as_number(obj.start), as_number(obj.stop), as_number(obj.step))
        if isinstance(obj, tuple):
            return tuple(in_slices(x) for x in obj)
        return obj

    if kind == "call_function" and target is operator.getitem and len(args) == 2:
        return (args[0], in_slices(args[1]))
    if (kind == "call_method" and target in _SIZED_METHODS and target not in ("index_select", "select")) or \
            (kind == "call_function" and target in _SIZED_FUNCTIONS and target is not torch.select):
        def sizes(obj):
            if isinstance(obj, (list, tuple)) and not isinstance(obj, fx.Proxy):
                return type(obj)(sizes(x) for x in obj)
            return as_number(obj)
        first = 1 if kind == "call_method" or target in (torch.narrow, torch.reshape, torch.split, torch.tile) else 0
        last = len(args) - 1 if target in ("new_full", torch.full) else len(args)  # the fill value is no size
        return tuple(args[:first]) + tuple(sizes(a) for a in args[first:last]) + tuple(args[last:])
    return args


def complex_values_note(gm: fx.GraphModule) -> str:
    """How the complex values of a trace are exported (for the reports), or "" when there is none."""
    ops, where = [], None
    for n in gm.graph.nodes:
        v = n.meta.get("value")
        if isinstance(v, torch.Tensor) and v.is_complex() and n.op in ("call_function", "call_method"):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            if name not in ops:
                ops.append(name)
            where = where or n.meta.get("source")
    if not ops:
        return ""
    shown = ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
    return (f"complex tensors from {where or 'an unknown line'} ({shown}): lowered as pairs of real tensors "
            "(real, imaginary), NNEF having no complex type")
