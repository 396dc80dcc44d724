"""``branches="select"``: a Python ``if`` on tensor data exported for both outcomes.

The tracer numbers every decision taken on tensor data (``bool()`` of a traced tensor,
``if x.sum() > 0``, ``if t.item() > 0.5``). Here the forward is traced again with each decision
flipped (the decisions before it kept), recursively for the decisions met on the new path, up
to :data:`MAX_PATHS` traces. The traces are copied into one graph, sharing the nodes they have
in common before they part, and their outputs are merged along the tree of decisions with
``torch.where(condition, outputs if true, outputs if false)``, where ``condition`` is the
traced value the decision was taken on. A decision whose two outcomes give outputs of other
shapes or dtypes, or whose other outcome cannot be traced, keeps the example's outcome; the
guards say which decisions were merged and which were not, and why.
"""
from __future__ import annotations

import dataclasses
import operator
import os
from typing import Callable, Optional

import torch
import torch.fx as fx

from ..errors import TraceError, spell
from .tracing.control_flow import _SCALAR_TENSOR, size_comparison
from .tracing.scan import ScanCall
from .tracing.structures import has_tensor, same_value
from .tracing.tracer import GuardRecord, TraceResult

MAX_PATHS = 8


@dataclasses.dataclass
class _Path:
    trace: TraceResult
    forced: dict
    outcomes: tuple  # the outcome of each numbered decision, in order


def _path(trace: TraceResult, forced: dict) -> _Path:
    return _Path(trace, forced, tuple(bool(g.expected) for g in trace.decisions))


def trace_branches(trace_fn: Callable[[dict], TraceResult], max_paths: int = MAX_PATHS) -> TraceResult:
    """Trace every outcome of the data decisions (``trace_fn(forced)`` traces one path) and merge."""
    paths = [_path(trace_fn({}), {})]
    if not paths[0].outcomes:
        return paths[0].trace
    failed: dict = {}  # outcomes prefix -> why that path could not be traced
    i = 0
    while i < len(paths):
        p = paths[i]
        i += 1
        for k in range(len(p.forced), len(p.outcomes)):
            prefix = p.outcomes[:k] + (not p.outcomes[k],)
            if len(paths) >= max_paths:
                raise TraceError(_too_many(paths, max_paths))
            forced = dict(enumerate(prefix))
            try:
                paths.append(_path(trace_fn(forced), forced))
            except Exception as exc:  # noqa: BLE001 - that outcome stays unexported, and is reported
                failed[prefix] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return _Merger(paths, failed).result()


def _too_many(paths: list, limit: int) -> str:
    seen: dict = {}
    for p in paths:
        for g in p.trace.decisions:
            seen.setdefault(str(g.source) if g.source else g.text, g)
    select = spell("branches", "select")
    lines = [f"{select} exports at most {limit} paths through the decisions on tensor data, and this "
             f"forward has more ({len(seen)} decisions met):"]
    lines += [f"  - {g.text} at {g.source}: {g.source.code if g.source else ''}" for g in list(seen.values())[:10]]
    lines.append(f"Write the inner ones as torch.where(...) or torch.cond(...), or export without {select} "
                 "(each decision then keeps the example's outcome).")
    return "\n".join(lines)


class _Merger:
    """One graph holding every path, outputs merged along the tree of decisions."""

    def __init__(self, paths: list, failed: dict):
        self.paths, self.failed = paths, failed
        self.main = paths[0].trace
        self.graph = fx.Graph()
        self.maps: list = []
        self.notes: list = []

    def result(self) -> TraceResult:
        for k, p in enumerate(self.paths):
            self.maps.append(self._copy(k, p.trace.gm))
        outs = self._merge(())
        self.graph.output(list(outs))
        gm = fx.GraphModule(self.main.gm, self.graph, class_name=type(self.main.gm).__name__)
        guards, seen = [], set()
        for k, p in enumerate(self.paths):
            for g in p.trace.guards:
                node = self.maps[k][g.node]
                # one line per decision site and verdict: the same `if` met on several paths
                key = (str(g.source), g.op, g.merged, g.branch_note) if g.decision is not None else \
                    (node, g.op, repr(g.expected))
                if key not in seen:
                    seen.add(key)
                    guards.append(dataclasses.replace(g, node=node))
        # the Python loops each path recorded (rolled into scans by capture's retrace, when asked)
        loops = [rec for p in self.paths for rec in p.trace.loops]
        return TraceResult(gm, self.main.input_names, self.main.output_names, guards, self.main.example_inputs,
                           list(self.main.control_flow) + self.notes, [g for g in guards if g.decision is not None],
                           loops)

    # one graph --------------------------------------------------------------------------------
    def _copy(self, k: int, gm: fx.GraphModule) -> dict:
        """Copy path ``k`` into the graph; nodes equal to the first path's, up to where they part, are shared."""
        env: dict = {}
        self._env = env
        main_nodes = [n for n in self.main.gm.graph.nodes if n.op != "output"]
        sharing = k > 0
        for i, n in enumerate(x for x in gm.graph.nodes if x.op != "output"):
            if k > 0 and n.op == "placeholder":
                env[n] = self.maps[0][main_nodes[i]]
                continue
            if sharing and i < len(main_nodes) and self._same(n, gm, main_nodes[i]):
                env[n] = self.maps[0][main_nodes[i]]
                continue
            sharing = False
            new = self.graph.node_copy(n, lambda a: env[a])
            if n.op == "get_attr" and k > 0:
                new.target = self._attr(k, gm, n.target)
            env[n] = new
        return env

    def _same(self, n: fx.Node, gm, m: fx.Node) -> bool:
        if n.op != m.op or not (n.target == m.target or _same_loop(n.target, m.target)):
            return False
        if n.op == "get_attr" and not same_value(operator.attrgetter(n.target)(gm),
                                                  operator.attrgetter(m.target)(self.main.gm)):
            return False
        mine = fx.node.map_arg((n.args, n.kwargs), lambda a: self._env[a])
        theirs = fx.node.map_arg((m.args, m.kwargs), lambda a: self.maps[0][a])
        return not has_tensor((mine, theirs)) and same_value(mine, theirs)

    def _attr(self, k: int, gm, target: str) -> str:
        return _shared_attr(self.main.gm, gm, target, f"path{k}")

    # the tree of decisions --------------------------------------------------------------------
    def _members(self, prefix: tuple) -> list:
        return [k for k, p in enumerate(self.paths) if p.outcomes[:len(prefix)] == prefix]

    def _merge(self, prefix: tuple) -> list:
        members = self._members(prefix)
        rep = members[0]
        depth = len(prefix)
        trace = self.paths[rep].trace
        if depth == len(self.paths[rep].outcomes):
            out = [n for n in trace.gm.graph.nodes if n.op == "output"][0]
            return [self.maps[rep][a] if isinstance(a, fx.Node) else a for a in out.args[0]]
        decision = trace.decisions[depth]
        records = [self.paths[k].trace.decisions[depth] for k in members]
        taken = self.paths[rep].outcomes[depth]
        sides = {b: self._merge(prefix + (b,)) for b in (True, False) if self._members(prefix + (b,))}
        if len(sides) == 1:
            why = self.failed.get(prefix + (not taken,), "that outcome was not traced")
            return self._keep(records, sides[taken], f"not merged: the other outcome does not trace ({why})")
        yes, no = sides[True], sides[False]
        mismatch = _mismatch(yes, no)
        if mismatch:
            return self._keep(records, sides[taken], f"not merged: {mismatch}")
        cond = self._condition(self.maps[rep][decision.node], decision)
        if cond is None:
            why = "the condition is no comparison of sizes the graph computes" if _on_sizes(decision) else \
                f"the condition is a Python {type(decision.node.meta.get('value')).__name__}, not a tensor"
            return self._keep(records, sides[taken], f"not merged: {why}")
        merged = [t if t is f else self._add("call_function", torch.where, (cond, t, f), decision)
                  for t, f in zip(yes, no)]
        for r in records:
            r.merged, r.branch_note = True, f"both outcomes exported, {len(merged)} output(s) merged with select"
        self._note(decision, "exported both ways, outputs merged with select on "
                   + ("the same comparison of the sizes" if _on_sizes(decision) else "its traced condition"))
        return merged

    def _note(self, decision: GuardRecord, what: str) -> None:
        src = decision.source
        code = f" `{src.code}`" if src is not None and src.code else ""
        if _on_sizes(decision):
            note = f"the decision on dynamic sizes at {src or decision.text}{code}: {what}"
        else:
            note = f"{spell('branches', 'select')}: the decision on tensor data at {src or decision.text}{code}: {what}"
        if note not in self.notes:
            self.notes.append(note)

    def _keep(self, records: list, outs: list, why: str) -> list:
        for r in records:
            r.branch_note = why
        self._note(records[0], f"keeps the example's outcome, {why}")
        return outs

    def _condition(self, node: fx.Node, decision: GuardRecord):
        value = node.meta.get("value")
        if isinstance(value, bool):  # a decision on sizes: the same comparison made of size tensors
            return size_comparison(node, lambda a, dtype: self._add("call_function", _SCALAR_TENSOR, (a,), decision,
                                                                    {"dtype": dtype}),
                                   lambda target, args: self._add("call_function", target, args, decision))
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        if value.dim() != 0:
            node = self._add("call_method", "reshape", (node, ()), decision)
        if value.dtype != torch.bool:
            node = self._add("call_method", "bool", (node,), decision)
        return node

    def _add(self, op: str, target, args: tuple, decision: GuardRecord, kwargs: Optional[dict] = None) -> fx.Node:
        node = _valued_node(self.graph, op, target, args, kwargs)
        node.meta["source"] = decision.source
        for key in ("module_path", "module_type"):
            if key in decision.node.meta:
                node.meta[key] = decision.node.meta[key]
        return node


def _valued_node(graph: fx.Graph, op: str, target, args: tuple, kwargs: Optional[dict] = None) -> fx.Node:
    """A new ``call_function`` or ``call_method`` node of ``graph``, its value at the example
    computed from its arguments' values."""
    node = graph.create_node(op, target, args, kwargs or {})
    values, kw = fx.node.map_arg((args, kwargs or {}), lambda a: a.meta["value"])
    with torch.no_grad():
        node.meta["value"] = target(*values, **kw) if op == "call_function" else \
            getattr(values[0], target)(*values[1:], **kw)
    return node


def _on_sizes(decision: GuardRecord) -> bool:
    """A decision on sizes (a Python bool of the sizes), not on tensor data (a traced tensor)."""
    return isinstance(decision.node.meta.get("value"), bool)


def _same_loop(a, b) -> bool:
    """Two traces record a loop with their own :class:`ScanCall`: the same loop when its bodies compute
    alike (:func:`_same_body`)."""
    if not isinstance(a, ScanCall) or not isinstance(b, ScanCall):
        return False
    fields = ("kind", "label", "dim", "reverse", "n_carry", "check")
    return all(getattr(a, f) == getattr(b, f) for f in fields) and _same_body(a.body, b.body)


def _same_body(a: fx.GraphModule, b: fx.GraphModule) -> bool:
    """Whether two loop bodies make the same calls on the same operands in the same order. Their
    nodes' names may differ (``add_3`` and ``add_4``: each trace names its nodes by what it made
    before); a body read as equal by its code only was copied twice, one scan of each sharing the
    other's body nodes, and the second failed to lower ("used before it is computed")."""
    nodes_a, nodes_b = list(a.graph.nodes), list(b.graph.nodes)
    if len(nodes_a) != len(nodes_b):
        return False
    at_a: dict = {}
    at_b: dict = {}
    for i, (x, y) in enumerate(zip(nodes_a, nodes_b)):
        at_a[x], at_b[y] = i, i
        if x.op != y.op:
            return False
        if x.op == "get_attr":
            if not same_value(operator.attrgetter(x.target)(a), operator.attrgetter(y.target)(b)):
                return False
        elif x.op != "placeholder" and x.target != y.target:
            return False
        mine = fx.node.map_arg((x.args, x.kwargs), lambda n: ("node", at_a[n]))
        theirs = fx.node.map_arg((y.args, y.kwargs), lambda n: ("node", at_b[n]))
        if has_tensor((mine, theirs)) or not same_value(mine, theirs):
            return False
    return True


def _mismatch(yes: list, no: list) -> str:
    if len(yes) != len(no):
        return f"the outcomes give {len(yes)} and {len(no)} outputs"
    for i, (t, f) in enumerate(zip(yes, no)):
        tv = t.meta.get("value") if isinstance(t, fx.Node) else t
        fv = f.meta.get("value") if isinstance(f, fx.Node) else f
        if not isinstance(tv, torch.Tensor) or not isinstance(fv, torch.Tensor):
            return f"output {i} is not a tensor in both outcomes"
        if tv.shape != fv.shape or tv.dtype != fv.dtype:
            return (f"output {i} is {tuple(tv.shape)} {tv.dtype} when true but {tuple(fv.shape)} {fv.dtype} when "
                    "false (select needs equal shapes and dtypes)")
    return ""


# a branch traced at one size ---------------------------------------------------------------------

def merge_at_size(main: TraceResult, point: TraceResult, dynamic_axes: dict, sym: str, size: int,
                  sites: frozenset) -> TraceResult:
    """One graph holding ``main`` and ``point``, the forward traced where ``sym`` is ``size``
    (``S == 1``: the one-token step of a model decoding from its cached state, whose code the
    example's trace does not take and cannot take at the example's sizes: its shapes hold at
    ``S = 1`` only). ``point`` runs on the inputs cut to their first ``size`` items along ``sym``'s
    axes, so it sees the sizes it was traced at whatever ``sym`` is; each output is ``point``'s
    where ``sym == size``, else ``main``'s. An output of ``point`` shorter on an axis (``P + 1``
    cached positions for ``P + S``) is padded to ``main``'s length, an axis of 1 is broadcast:
    what ``point`` gives elsewhere is computed and dropped. ``main``'s decisions at ``sites``
    (the source lines that took the other code) are marked merged. Raise :class:`TraceError`
    when the outputs cannot be merged (other counts, dtypes, ranks, or a longer axis)."""
    graph = fx.Graph()
    root = main.gm
    env_m: dict = {}
    outs_m = outs_p = None
    for n in main.gm.graph.nodes:
        if n.op == "output":
            outs_m = [env_m[a] if isinstance(a, fx.Node) else a for a in n.args[0]]
            continue
        env_m[n] = graph.node_copy(n, lambda a: env_m[a])
    placeholders = [n for n in main.gm.graph.nodes if n.op == "placeholder"]
    point_placeholders = [n for n in point.gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(point_placeholders):
        raise TraceError(f"the trace at {sym}={size} has {len(point_placeholders)} inputs, the example's "
                         f"{len(placeholders)}")

    def add(op, target, args, kwargs=None):
        return _valued_node(graph, op, target, args, kwargs)

    env_p: dict = {}
    size_of = None  # (input node, axis) giving sym
    for name, pm, pp in zip(main.input_names, placeholders, point_placeholders):
        node = env_m[pm]
        for axis, s in sorted(dynamic_axes.get(name, {}).items()):
            if s == sym:
                size_of = size_of or (env_m[pm], axis)
                node = add("call_method", "narrow", (node, axis, 0, size))
        env_p[pp] = node
    if size_of is None:
        raise TraceError(f"no input has an axis {sym}")
    for n in point.gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            outs_p = [env_p[a] if isinstance(a, fx.Node) else a for a in n.args[0]]
            continue
        new = graph.node_copy(n, lambda a: env_p[a])
        if n.op == "get_attr":
            new.target = _shared_attr(root, point.gm, n.target, "at_size")
        env_p[n] = new
    if len(outs_m) != len(outs_p):
        raise TraceError(f"the forward gives {len(outs_m)} outputs at the example and {len(outs_p)} at {sym}={size}")
    scalar = add("call_function", _SCALAR_TENSOR, (add("call_method", "size", size_of),), {"dtype": torch.int64})
    cond = add("call_function", torch.eq, (scalar, size))
    merged = _merged_outputs(add, outs_m, outs_p, cond, sym, size)
    graph.output(merged)
    gm = fx.GraphModule(root, graph, class_name=type(root).__name__)
    where = ", ".join(sorted(f"{os.path.basename(file)}:{line}" for file, line in sites))
    note = (f"{sym}={size} takes other code" + (f" ({where})" if where else "") + f": the forward traced at "
            f"{sym}={size} is exported alongside and selected where {sym} == {size}")
    guards = []
    for g in main.guards:
        g = dataclasses.replace(g, node=env_m[g.node])
        if g.source is not None and (g.source.file, g.source.line) in sites and isinstance(g.expected, bool):
            g.merged, g.branch_note = True, f"the other outcome exported by the trace at {sym}={size}"
        guards.append(g)
    guards += [dataclasses.replace(g, node=env_p[g.node]) for g in point.guards]
    control_flow = list(main.control_flow) + [c for c in point.control_flow if c not in main.control_flow] + [note]
    return TraceResult(gm, main.input_names, main.output_names, guards, main.example_inputs, control_flow,
                       [g for g in guards if g.decision is not None], list(main.loops) + list(point.loops),
                       at_size=(sym, size))


def _merged_outputs(add, outs_m, outs_p, cond, sym: str, size: int) -> list:
    """Each output ``point``'s (``outs_p``) where ``cond`` (``sym == size``), else ``main``'s
    (``outs_m``), made with ``add(op, target, args)`` (see :func:`merge_at_size`)."""
    merged = []
    for i, (m, p) in enumerate(zip(outs_m, outs_p)):
        mv = m.meta.get("value") if isinstance(m, fx.Node) else m
        pv = p.meta.get("value") if isinstance(p, fx.Node) else p
        if not isinstance(mv, torch.Tensor) or not isinstance(pv, torch.Tensor):
            if not has_tensor((mv, pv)) and same_value(mv, pv):
                merged.append(m)
                continue
            raise TraceError(f"output {i} is no tensor, and differs at {sym}={size}")
        if mv.dtype != pv.dtype or mv.dim() != pv.dim():
            raise TraceError(f"output {i} is {tuple(mv.shape)} {mv.dtype} at the example but {tuple(pv.shape)} "
                             f"{pv.dtype} at {sym}={size}")
        for axis in range(mv.dim()):
            if pv.shape[axis] in (1, mv.shape[axis]):
                continue  # broadcast, or alike
            if pv.shape[axis] > mv.shape[axis]:
                raise TraceError(f"output {i} has {pv.shape[axis]} items on axis {axis} at {sym}={size}, more than "
                                 f"the example's {mv.shape[axis]}")
            amount = add("call_function", operator.sub, (add("call_method", "size", (m, axis)),
                                                         add("call_method", "size", (p, axis))))
            p = add("call_function", torch.nn.functional.pad, (p, [0, 0] * (mv.dim() - 1 - axis) + [0, amount]))
            pv = p.meta["value"]
        merged.append(add("call_function", torch.where, (cond, p, m)))
    return merged


def _shared_attr(root: fx.GraphModule, gm: fx.GraphModule, target: str, tag: str) -> str:
    """``target`` of ``gm`` as an attribute of ``root``: the same name when it is the same object there."""
    obj = operator.attrgetter(target)(gm)
    try:
        if operator.attrgetter(target)(root) is obj:
            return target
    except AttributeError:
        pass
    name = f"_fx2nnef_{tag}_{target.replace('.', '_')}"
    setattr(root, name, obj)
    return name
