"""Structured control flow under the concrete-value tracer: ``torch.cond``, ``scan``, ``while_loop``.

torch runs these higher-order ops through ``torch.compile``, which cannot run on traced
values. While tracing, the user-facing functions and the ops themselves are replaced by the
recorders below:

- ``cond``: both branches are traced on the same operands (no guard on the predicate) and
  each output pair is merged with ``torch.where(pred, true_out, false_out)``. A predicate
  that is a Python bool computed from sizes is decided like any shape decision (a guard).
- ``scan``: the combine function is traced once on *slot* nodes (a carry or one slice of a
  scanned input); the ops that depend on a slot form the loop body. One :class:`ScanCall`
  node takes the initial carries, the scanned inputs, the loop-invariant values the body
  reads and, for the IR, the slots and the body's results. It computes the real scan on
  concrete values by running a copy of the body as a small GraphModule.
- ``while_loop``: a scan over a budget of ``n`` steps whose body is
  ``carry = where(cond(carry) & step, body(carry), carry)``; ``n`` is the user's
  ``max_loop_iterations`` or, without it, a size the loop reads that bounds the trip count
  on the example (checked at the other sizes by the probes), or its trip count when the condition
  reads no model input at all (``i < 3``). For a target with no loop op (standard NNEF) a while
  loop is traced step by step instead: like Python when its condition does not follow the data
  (a counter then becomes constants), else ``max_loop_iterations`` steps that keep the carries
  once the condition is false.
- a Python decision on a value that differs at every step of a loop (``if xt.sum() > 0:`` in a
  scan, while or vmap body) cannot be taken once for every step: it is refused with its line,
  or with ``branches="select"`` the body is traced both ways and its results merged with select.
  torch itself refuses such a body (torch.compile, functorch); :func:`run_eagerly` runs the
  model's loops as Python for the references then.

The piece-by-piece recorder observes modules with hooks, which ``torch.compile`` cannot run
through; there :class:`EagerRunner` runs the same calls as plain Python.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import operator
import sys
from typing import Optional

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ...errors import InvalidArgumentError, Placeholder, TraceError, spell
from .data_dep import depends_on_data
from .proxy import CustomProxy
from .scan import ScanCall
from .source import user_frame_location
from .vmap import _TraceState, _value, eager_vmap, vmap_patch

_MAX_LOOP = contextvars.ContextVar("fx2nnef_max_loop_iterations", default=None)
# trip counts beyond this on the example inputs are taken as a loop that never ends
_RUNAWAY = 100_000


_UNROLL_WHILE = contextvars.ContextVar("fx2nnef_unroll_while", default=False)


def check_max_loop_iterations(max_loop_iterations) -> None:
    if max_loop_iterations is not None and (isinstance(max_loop_iterations, bool)
                                            or not isinstance(max_loop_iterations, int) or max_loop_iterations < 1):
        raise InvalidArgumentError(f"max_loop_iterations must be a positive int, got {max_loop_iterations!r}")


@contextlib.contextmanager
def loop_options(max_loop_iterations: Optional[int], unroll_while: bool = False):
    """Scope the ``max_loop_iterations`` export option over a trace; ``unroll_while`` for a target
    with no loop op (standard NNEF): a while_loop is traced step by step (see ``Recorder.while_loop``)."""
    check_max_loop_iterations(max_loop_iterations)
    token = _MAX_LOOP.set(max_loop_iterations)
    token2 = _UNROLL_WHILE.set(unroll_while)
    try:
        yield
    finally:
        _MAX_LOOP.reset(token)
        _UNROLL_WHILE.reset(token2)


def carry_slot(init: torch.Tensor) -> torch.Tensor:
    """A loop-carried value inside a loop body (its example value is the initial carry)."""
    return init.clone()


def scanned_slot(xs: torch.Tensor, dim: int) -> torch.Tensor:
    """One slice of a scanned input inside a loop body (its example value is the first; zeros
    when the loop runs no step, where the body never reads it: ``for t in range(1, T)`` at T=1
    gives its carries' initial values, which the tract loop selects then, see
    :func:`..nnef_emit.ops.control_flow.loop_tract`)."""
    if xs.shape[dim] == 0:
        shape = list(xs.shape)
        del shape[dim]
        return xs.new_zeros(shape)
    return xs.select(dim, 0).clone()


def step_slot() -> torch.Tensor:
    """The per-step budget flag of a bounded while loop (true on every step)."""
    return torch.ones((), dtype=torch.bool)


SLOT_FUNCTIONS = (carry_slot, scanned_slot, step_slot)


_COMPARISONS = {operator.gt: torch.gt, operator.lt: torch.lt, operator.ge: torch.ge, operator.le: torch.le,
                operator.eq: torch.eq, operator.ne: torch.ne}
_LOGICAL = {operator.and_: torch.logical_and, operator.or_: torch.logical_or, operator.xor: torch.logical_xor}
_SCALAR_TENSOR = torch.scalar_tensor  # torch's own: tracing wraps the name to record sizes it reads


def _size_comparison(tracer, node):
    """The traced Python bool ``node`` (a comparison of numbers computed from sizes, or an
    and / or / xor of such comparisons) as a rank-0 bool tensor of the graph made of size
    tensors, or None when it is something else."""
    def scalar(a, dtype):
        return tracer.create_proxy("call_function", _SCALAR_TENSOR, (CustomProxy(a, tracer, a.meta["value"]),),
                                   {"dtype": dtype})

    return size_comparison(node, scalar, lambda target, args: tracer.create_proxy("call_function", target, args, {}))


def size_comparison(node, scalar, call):
    """:func:`_size_comparison` for any graph: ``scalar(a, dtype)`` makes the rank-0 tensor of the
    number node ``a``, ``call(target, args)`` a call; both return the caller's handles (proxies of
    a tracer, nodes of a graph being built). None when ``node`` is no comparison of sizes."""
    def operand(a):
        if isinstance(a, fx.Node):
            value = a.meta.get("value")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            return scalar(a, torch.int64 if isinstance(value, int) else torch.float32)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return a
        return None

    if node.op != "call_function" or node.kwargs or len(node.args) != 2:
        return None
    if node.target in _LOGICAL:
        parts = [size_comparison(a, scalar, call) if isinstance(a, fx.Node) else None for a in node.args]
        return None if any(p is None for p in parts) else call(_LOGICAL[node.target], tuple(parts))
    if node.target not in _COMPARISONS:
        return None
    plain = (int, float)
    a, b = (operand(x) for x in node.args)
    if a is None or b is None or all(isinstance(x, plain) for x in (a, b)):
        return None
    if isinstance(a, plain):  # a number on the left: the comparison mirrored
        a, b = b, a
        mirrored = {torch.gt: torch.lt, torch.lt: torch.gt, torch.ge: torch.le, torch.le: torch.ge}
        return call(mirrored.get(_COMPARISONS[node.target], _COMPARISONS[node.target]), (a, b))
    return call(_COMPARISONS[node.target], (a, b))


def _fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _where_text() -> str:
    loc = user_frame_location()
    return str(loc) if loc else "an unknown line"


class Recorder:
    """Records cond/scan/while_loop calls into a :class:`CustomTracer`'s graph."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.notes: list = []  # how each construct was converted, for the reports
        self._constant_trips = None  # set by _budget for a while loop of a constant trip count

    # cond -------------------------------------------------------------------------------
    def cond(self, pred, true_fn, false_fn, operands=()):
        where = _where_text()
        operands = tuple(operands) if isinstance(operands, (list, tuple)) else (operands,)
        if not isinstance(pred, CustomProxy):
            return (true_fn if bool(pred) else false_fn)(*operands)
        if not isinstance(pred.value, torch.Tensor):
            # a decision on sizes (x.shape[0] > 4): kept in the graph as a comparison of size
            # tensors, both branches merged with select, so the export holds at every size
            merged = self._on_sizes(pred, true_fn, false_fn, operands, where)
            if merged is not None:
                return merged
            taken = bool(pred)  # a guard, like a Python `if`
            self.notes.append(f"torch.cond at {where}: the predicate is a Python bool computed from sizes in a way "
                              f"the graph cannot compute, kept as a guard; only "
                              f"{_fn_name(true_fn if taken else false_fn)} is exported")
            return (true_fn if taken else false_fn)(*operands)
        if pred.value.numel() != 1:
            raise TraceError(f"torch.cond at {where}: the predicate must hold one element, it has shape "
                             f"{tuple(pred.value.shape)}")
        return self._both_branches(self._predicate(pred), true_fn, false_fn, operands, where)

    def _both_branches(self, pred, true_fn, false_fn, operands: tuple, where: str):
        """Both branches traced on ``operands``, each output pair merged with select on ``pred``
        (a rank-0 bool tensor)."""
        t_out = true_fn(*operands)
        f_out = false_fn(*operands)
        t_flat, t_spec = pytree.tree_flatten(t_out)
        f_flat, f_spec = pytree.tree_flatten(f_out)
        if t_spec != f_spec:
            raise TraceError(f"torch.cond at {where}: {_fn_name(true_fn)} and {_fn_name(false_fn)} return "
                             f"different structures ({t_spec} and {f_spec}); both branches must return the same")
        merged = []
        for i, (t, f) in enumerate(zip(t_flat, f_flat)):
            tv, fv = _value(t), _value(f)
            if not isinstance(tv, torch.Tensor) or not isinstance(fv, torch.Tensor):
                raise TraceError(f"torch.cond at {where}: output {i} is not a tensor in both branches")
            if tv.shape != fv.shape or tv.dtype != fv.dtype:
                raise TraceError(
                    f"torch.cond at {where}: output {i} is {tuple(tv.shape)} {tv.dtype} in {_fn_name(true_fn)} but "
                    f"{tuple(fv.shape)} {fv.dtype} in {_fn_name(false_fn)}; both branches are computed and merged "
                    "with select, so their outputs must agree in shape and dtype")
            merged.append(t if t is f else self.tracer.create_proxy("call_function", torch.where, (pred, t, f), {}))
        self.notes.append(f"torch.cond at {where}: both branches exported, {len(merged)} output(s) merged with "
                          "select on the predicate")
        return pytree.tree_unflatten(merged, t_spec)

    def _on_sizes(self, pred, true_fn, false_fn, operands: tuple, where: str):
        """``torch.cond`` on a Python bool computed from sizes, both branches merged with select on
        the same comparison made of size tensors; None when the predicate is not a comparison of
        sizes the graph can compute, or a branch cannot be traced at the example's sizes (it is
        then the other branch only, under a guard: the attempt's guards and notes are dropped, its
        nodes left dead for remove_dead_code)."""
        tensor_pred = _size_comparison(self.tracer, pred.node)
        if tensor_pred is None:
            return None
        state = _TraceState(self)
        try:
            return self._both_branches(tensor_pred, true_fn, false_fn, operands, where)
        except Exception:  # noqa: BLE001 - a branch meant for other sizes; the guard path then
            state.drop_since_start()
            return None

    # scan -------------------------------------------------------------------------------
    def scan(self, combine_fn, init, xs, *, dim: int = 0, reverse: bool = False):
        """The user-facing ``scan``: pytrees of carries and scanned inputs."""
        where = _where_text()
        init_flat, init_spec = pytree.tree_flatten(init)
        xs_flat, xs_spec = pytree.tree_flatten(xs)
        if not xs_flat:
            raise TraceError(f"scan at {where}: xs holds no tensor")
        rank = _value(xs_flat[0]).dim()
        dim = dim % rank if rank else 0
        out_spec: dict = {}

        def flat_fn(*args):
            carry = pytree.tree_unflatten(list(args[: len(init_flat)]), init_spec)
            x = pytree.tree_unflatten(list(args[len(init_flat):]), xs_spec)
            new_carry, y = combine_fn(carry, x)
            c_flat, _ = pytree.tree_flatten(new_carry)
            y_flat, out_spec["y"] = pytree.tree_flatten(y)
            return list(c_flat) + list(y_flat)

        outs = self.loop(flat_fn, init_flat, xs_flat, (), dim, reverse, "scan", where)
        carry = pytree.tree_unflatten(list(outs[: len(init_flat)]), init_spec)
        return carry, pytree.tree_unflatten(list(outs[len(init_flat):]), out_spec["y"])

    def scan_op(self, combine_fn, init, xs, additional_inputs=()):
        """The higher-order op ``torch.ops.higher_order.scan`` (flat lists, scan along dim 0)."""
        spec: dict = {}

        def flat_fn(*args):
            flat, spec["out"] = pytree.tree_flatten(combine_fn(*args))
            return flat

        outs = self.loop(flat_fn, list(init), list(xs), tuple(additional_inputs), 0, False, "scan", _where_text())
        return pytree.tree_unflatten(list(outs), spec["out"])  # the structure the combine function returned

    def loop(self, flat_fn, init: list, xs: list, additional: tuple, dim: int, reverse: bool, kind: str, where: str):
        """Trace ``flat_fn(*carries, *slices, *additional)`` -> ``[*carries, *ys]`` as one loop node."""
        tracer = self.tracer
        for i, c in enumerate(init):
            if not isinstance(_value(c), torch.Tensor):
                raise TraceError(f"{kind} at {where}: carry {i} is a {type(_value(c)).__name__}; only tensors "
                                 "can be carried")
        start = len(tracer.graph.nodes)
        carry_slots = [tracer.create_proxy("call_function", carry_slot, (c,), {}) for c in init]
        if kind == "while":
            scan_slots = [tracer.create_proxy("call_function", step_slot, (), {})]
        else:
            scan_slots = [tracer.create_proxy("call_function", scanned_slot, (x, dim), {}) for x in xs]
        for s in carry_slots + scan_slots:
            s.node.meta["loop_slot"] = True
        outs = self._trace_body(flat_fn, carry_slots + scan_slots + list(additional), kind, where)
        check_out = None
        if kind == "while":
            outs, check_out = outs[:-1], outs[-1]
        if len(outs) < len(init):
            raise TraceError(f"{kind} at {where}: the body returns {len(outs)} values for {len(init)} carries")
        outs = [self._as_node(o) for o in outs]
        for i, (c, o) in enumerate(zip(init, outs)):
            cv, ov = _value(c), _value(o)
            if cv.shape != ov.shape or cv.dtype != ov.dtype:
                raise TraceError(
                    f"{kind} at {where}: carry {i} enters as {tuple(cv.shape)} {cv.dtype} and leaves the body as "
                    f"{tuple(ov.shape)} {ov.dtype}; a loop must keep each carry's shape and dtype")
        body_nodes = self._body_nodes(start, carry_slots + scan_slots)
        sub_outs = outs + ([self._as_node(check_out)] if check_out is not None else [])
        body, outer = self._body_module(body_nodes, carry_slots + scan_slots, sub_outs)
        call = ScanCall(body, kind, where, dim, reverse, len(init), check=check_out is not None)
        if kind == "while":
            sizes = [n for i, n in enumerate(tracer.graph.nodes) if i >= start and n.op == "call_method"
                     and n.target == "size" and type(n.meta.get("value")) is int]
            xs = [self._budget(call, init, outer, where, sizes)]
        args = (list(init), list(xs), outer, carry_slots, scan_slots, outs)
        result = tracer.create_proxy("call_function", call, args, {})
        result.node.meta["control_flow"] = f"{kind} at {where}"
        if kind == "scan":
            self.notes.append(f"scan at {where}: a loop over dim {dim}{' (reversed)' if reverse else ''} with "
                              f"{len(init)} carry(ies), {len(xs)} scanned input(s) and {len(outs) - len(init)} stacked "
                              "output(s): tract_core_scan for tract, unrolled for Khronos")
        else:
            steps = xs[0].value.shape[0] if isinstance(xs[0], fx.Proxy) else xs[0].shape[0]
            bound = (spell("max_loop_iterations", _MAX_LOOP.get()) if _MAX_LOOP.get() is not None
                     else f"its constant trip count ({steps})" if self._constant_trips is not None
                     else f"a size the loop reads ({steps} at the example)")
            self._constant_trips = None
            self.notes.append(f"while_loop at {where}: a scan of {bound} steps whose extra steps keep the carries "
                              "(select on the condition)")
        n = len(result.value)
        return [tracer.create_proxy("call_function", operator.getitem, (result, i), {}) for i in range(n)]

    def _trace_body(self, flat_fn, args: list, kind: str, where: str) -> list:
        """The body's results; with ``branches="select"``, a Python decision on data in the body is
        traced both ways (up to :data:`MAX_BODY_PATHS` paths) and the results merged with select."""
        tracer = self.tracer
        if tracer.forced is None:
            return list(flat_fn(*args))  # a decision on data in the body is refused (decide_in_body)
        paths: list = []  # (forced outcomes, decisions met as (condition, outcome), results)
        failed: dict = {}
        todo = [()]
        while todo:
            forced = todo.pop(0)
            frame = _BodyFrame(forced)
            tracer.body_frames.append(frame)
            try:
                outs = list(flat_fn(*args))
            except TraceError as exc:
                if not forced:
                    raise
                failed[forced] = str(exc).splitlines()[0]
                continue
            finally:
                tracer.body_frames.pop()
            outcomes = tuple(o for _, o, _ in frame.met)
            paths.append((outcomes, frame.met, outs))
            for k in range(len(forced), len(outcomes)):
                todo.append(outcomes[:k] + (not outcomes[k],))
            if len(paths) + len(todo) > MAX_BODY_PATHS:
                raise TraceError(f"{kind} at {where}: its body takes more than {MAX_BODY_PATHS} paths through Python "
                                 "decisions on tensor data; write the inner ones as torch.where(...) or torch.cond(...)")
        if len(paths) == 1:
            return paths[0][2]
        merged = self._merge_body(paths, failed, (), kind, where)
        self.notes.append(f"{kind} at {where}: {sum(len(m) for _, m, _ in paths[:1])} Python decision(s) on tensor "
                          f"data in its body traced both ways ({len(paths)} paths), results merged with select "
                          f"({spell('branches', 'select')})")
        return merged

    def _merge_body(self, paths: list, failed: dict, prefix: tuple, kind: str, where: str) -> list:
        members = [p for p in paths if p[0][:len(prefix)] == prefix]
        outcomes, met, outs = members[0]
        depth = len(prefix)
        if depth == len(outcomes):
            return outs
        cond, _, source = met[depth]
        sides = {}
        for b in (True, False):
            if any(p[0][:depth + 1] == prefix + (b,) for p in paths):
                sides[b] = self._merge_body(paths, failed, prefix + (b,), kind, where)
        at = f" at {source}: `{source.code}`" if source is not None else ""
        if len(sides) == 1:
            why = failed.get(prefix + (not outcomes[depth],), "it was not traced")
            raise TraceError(f"{kind} at {where}: the Python decision on tensor data{at} in its body cannot be "
                             f"exported both ways, the other outcome fails ({why}); write it with torch.where(...)")
        yes, no = sides[True], sides[False]
        if len(yes) != len(no):
            raise TraceError(f"{kind} at {where}: the two outcomes of the decision{at} in its body give {len(yes)} "
                             f"and {len(no)} results")
        cond = self._predicate(cond)
        merged = []
        for i, (t, f) in enumerate(zip(yes, no)):
            if t is f:
                merged.append(t)
                continue
            tv, fv = _value(t), _value(f)
            if not isinstance(tv, torch.Tensor) or not isinstance(fv, torch.Tensor) or tv.shape != fv.shape \
                    or tv.dtype != fv.dtype:
                raise TraceError(
                    f"{kind} at {where}: result {i} of its body differs between the two outcomes of the decision{at} "
                    f"({_describe(tv)} and {_describe(fv)}); select needs equal shapes and dtypes")
            merged.append(self.tracer.create_proxy("call_function", torch.where,
                                                   (cond, self._as_node(t), self._as_node(f)), {}))
        return merged

    def _predicate(self, cond):
        """A traced condition as a rank-0 bool."""
        v = _value(cond)
        if v.dim() != 0:
            cond = self.tracer.create_proxy("call_method", "reshape", (cond, ()), {})
        if v.dtype != torch.bool:
            cond = self.tracer.create_proxy("call_method", "bool", (cond,), {})
        return cond

    def _as_node(self, o):
        """A body result as a traced value (a constant becomes a node of its own)."""
        if isinstance(o, CustomProxy):
            return o
        if isinstance(o, torch.Tensor):
            return self.tracer.create_proxy("call_function", torch.clone, (o,), {})
        raise TraceError(f"a loop body returned a {type(o).__name__}; only tensors can be returned")

    def _body_nodes(self, start: int, slots: list) -> list:
        """Nodes recorded since ``start`` that depend on a slot: the loop body."""
        return slot_dependents(itertools.islice(self.tracer.graph.nodes, start, None), [s.node for s in slots])

    def _body_module(self, body_nodes: list, slots: list, outs: list):
        """A GraphModule computing one step from ``(*slots, *outer)``, and the outer proxies it reads."""
        gm, outer_nodes = body_module(self.tracer.root, body_nodes, [s.node for s in slots], [o.node for o in outs])
        proxies = [CustomProxy(n, self.tracer) for n in outer_nodes]
        for p, n in zip(proxies, outer_nodes):
            value = n.meta.get("value")
            if value is None and n.op == "get_attr":  # a constant made before the loop (torch.arange(1)
                value = _attr(self.tracer.root, n.target)  # scanned by a nested vmap): the root holds it
            p.__dict__["value"] = value
        return gm, proxies

    def _budget(self, call: ScanCall, init: list, outer: list, where: str, sizes: list):
        """The scanned budget of a while loop: ``max_loop_iterations`` steps, or a size that the loop
        reads and that bounds the trip count on the example (the probes check it at other sizes)."""
        carry = [_value(c).clone() for c in init]
        full = [p.value for p in outer]
        trips = 0
        with torch.no_grad():
            while True:
                outs = call.body(*carry, torch.ones((), dtype=torch.bool), *full)
                if not bool(outs[-1]) or trips > _RUNAWAY:
                    break
                carry = list(outs[:-1])
                trips += 1
        limit = _MAX_LOOP.get()
        if limit is not None:
            if trips > limit:
                raise TraceError(f"the while_loop at {where} runs {trips} iterations on the example inputs, more "
                                 f"than {spell('max_loop_iterations', limit)}; raise it")
            return torch.ones(limit, dtype=torch.bool)
        if trips > _RUNAWAY:
            raise TraceError(f"the while_loop at {where} did not end within {_RUNAWAY} iterations on the example inputs")
        size = self._bounding_size(sizes, trips)
        if size is None and self._constant_condition(call, init, outer):
            # the condition follows neither data nor sizes (``i < 3``): the trip count is a constant
            self._constant_trips = trips
            return torch.ones(max(trips, 1), dtype=torch.bool)
        if size is None:
            raise TraceError(
                f"the while_loop at {where} runs {trips} iterations on the example inputs, a number no size that the "
                "loop reads bounds; NNEF has no while loop, so give "
                f"{spell('max_loop_iterations', Placeholder('N'))}: the "
                "loop then runs N steps whose extra steps leave the carries unchanged (N must bound the trip count)")
        ones = getattr(torch.ones, "__wrapped_factory__", torch.ones)  # torch.ones is patched while tracing
        return self.tracer.create_proxy("call_function", ones, (size,), {"dtype": torch.bool})

    def _constant_condition(self, call: ScanCall, init: list, outer: list) -> bool:
        """Whether a while loop's condition reads only carries and outer values that depend on no
        model input (neither data nor sizes), through the carries' updates: its trip count is fixed."""
        g = call.body.graph
        slots = [n for n in g.nodes if n.op == "placeholder"]
        outs = list([n for n in g.nodes if n.op == "output"][0].args[0])
        memo: dict = {}

        def reads(node) -> set:
            if node in memo:
                return memo[node]
            found, stack, seen = set(), [node], set()
            while stack:
                n = stack.pop()
                if n in seen:
                    continue
                seen.add(n)
                if n.op == "placeholder":
                    found.add(slots.index(n))
                stack.extend(n.all_input_nodes)
            memo[node] = found
            return found

        n_carry = call.n_carry
        needed, todo = set(), [outs[-1]]
        while todo:
            for i in reads(todo.pop()):
                if i not in needed:
                    needed.add(i)
                    if i < n_carry:
                        todo.append(outs[i])
        input_memo: dict = {}
        for i in needed:
            if i < n_carry:
                value = init[i]
            elif i == n_carry:
                continue  # the step flag
            else:
                value = outer[i - n_carry - 1]
            if isinstance(value, fx.Proxy) and depends_on_data(value.node, input_memo, lambda n: n.op == "placeholder",
                                                               lambda n: False):
                return False
        return True

    def _bounding_size(self, sizes: list, trips: int):
        """Among the sizes the loop reads (``i < x.size(0)``), the one equal to ``trips``, else the
        smallest above it."""
        fits = [n for n in sizes if n.meta["value"] >= trips]
        if not fits:
            return None
        best = min(fits, key=lambda n: (n.meta["value"] != trips, n.meta["value"]))
        proxy = CustomProxy(best, self.tracer)
        proxy.__dict__["value"] = best.meta["value"]
        return proxy

    # while ------------------------------------------------------------------------------
    def while_loop(self, cond_fn, body_fn, carried_inputs, additional_inputs=()):
        where = _where_text()
        flat, spec = pytree.tree_flatten(tuple(carried_inputs))
        n = len(flat)
        if _UNROLL_WHILE.get():
            return _while_unrolled(self, cond_fn, body_fn, carried_inputs, tuple(additional_inputs), where)

        def step(*args):
            carry = pytree.tree_unflatten(list(args[:n]), spec)
            go_step = args[n]
            extra = args[n + 1:]
            pred = cond_fn(*carry, *extra)
            if not isinstance(_value(pred), torch.Tensor):
                raise TraceError(f"while_loop at {where}: cond_fn must return a bool tensor, got "
                                 f"{type(_value(pred)).__name__}")
            if _value(pred).dim() != 0:
                pred = self.tracer.create_proxy("call_method", "reshape", (pred, ()), {})
            go = self.tracer.create_proxy("call_function", torch.logical_and, (pred, go_step), {})
            new_flat, _ = pytree.tree_flatten(body_fn(*carry, *extra))
            if len(new_flat) != n:
                raise TraceError(f"while_loop at {where}: body_fn returns {len(new_flat)} values for {n} carries")
            kept = [self.tracer.create_proxy("call_function", torch.where, (go, self._as_node(b), a), {})
                    for b, a in zip(new_flat, args[:n])]
            return kept + [pred]

        outs = self.loop(step, flat, [], tuple(additional_inputs), 0, False, "while", where)
        return pytree.tree_unflatten(list(outs), spec)


MAX_BODY_PATHS = 8


class _BodyFrame:
    """The Python decisions on tensor data met while tracing one path of a loop body."""

    def __init__(self, forced: tuple):
        self.forced = forced
        self.met: list = []  # (condition proxy, outcome, source)


def _describe(v) -> str:
    return f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__


def decide_in_body(tracer, proxy, op: str, result):
    """A Python decision (``bool``) or number (``int``, ``float``, ``item()``...) taken on a value that
    differs at every step of a loop being recorded. The body is traced once, for every step, so the
    example's first step would decide for all: with ``branches="select"`` a ``bool`` is traced both
    ways (see ``Recorder._trace_body``); anything else is refused with the line."""
    loc = user_frame_location()
    at = f" at {loc}: `{loc.code}`" if loc else ""
    frames = tracer.body_frames
    if op == "bool" and frames:
        frame = frames[-1]
        k = len(frame.met)
        outcome = frame.forced[k] if k < len(frame.forced) else bool(result)
        frame.met.append((proxy, outcome, loc))
        return outcome
    what = "a Python decision (`if`, `and`, `while`)" if op == "bool" else f"{op}() (a Python number)"
    fix = ("write it as torch.where(cond, a, b) or torch.cond(cond, f, g, operands), or export with "
           f"{spell('branches', 'select')} (both outcomes traced and merged with select in the body)") \
        if op == "bool" else \
        "keep the value a tensor (compute with it, or mask with torch.where) instead of a Python number"
    raise TraceError(
        f"{what} on tensor data{at} inside a loop body (scan, while_loop or vmap): the body is traced once "
        "for every step, so the example's first step would decide for all steps; " + fix)


def _carry_list(carry) -> list:
    return list(carry) if isinstance(carry, (list, tuple)) else [carry]


def _on_data(tracer, x) -> bool:
    return isinstance(x, CustomProxy) and depends_on_data(x.node, tracer._data_memo)


def _while_unrolled(self, cond_fn, body_fn, carried_inputs, extra: tuple, where: str):
    """A while_loop traced step by step, for a target with no loop op (standard NNEF, whose
    graph is static). A condition that does not follow the data (``i < 3``, ``i < x.size(0)``) is
    decided like Python (a counter then becomes constants); one that does runs
    ``max_loop_iterations`` steps whose extra steps keep the carries (select on the condition)."""
    tracer = self.tracer
    carry = list(carried_inputs)
    pred = cond_fn(*carry, *extra)
    if not _on_data(tracer, pred):
        steps = 0
        while bool(pred):
            carry = _carry_list(body_fn(*carry, *extra))
            steps += 1
            if steps > _RUNAWAY:
                raise TraceError(f"the while_loop at {where} did not end within {_RUNAWAY} iterations")
            pred = cond_fn(*carry, *extra)
        self.notes.append(f"while_loop at {where}: unrolled, {steps} step(s) (its condition does not follow the "
                          "data; standard NNEF has no loop)")
        return tuple(carry)
    limit = _MAX_LOOP.get()
    if limit is None:
        raise TraceError(
            f"the while_loop at {where} ends on a condition computed from tensor data; standard NNEF has no loop, "
            f"so it is unrolled: give {spell('max_loop_iterations', Placeholder('N'))} (N steps, the extra ones "
            "leave the carries "
            "unchanged; N must bound the trip count), or export for tract")
    for _ in range(limit):
        go = self._predicate(pred)
        new = _carry_list(body_fn(*carry, *extra))
        if len(new) != len(carry):
            raise TraceError(f"while_loop at {where}: body_fn returns {len(new)} values for {len(carry)} carries")
        carry = [self.tracer.create_proxy("call_function", torch.where, (go, self._as_node(b), a), {})
                 for b, a in zip(new, carry)]
        pred = cond_fn(*carry, *extra)
    if bool(_value(pred)):
        raise TraceError(f"the while_loop at {where} needs more than {spell('max_loop_iterations', limit)} "
                         "iterations on "
                         "these inputs; raise it")
    for i, c in enumerate(carry):
        v = _value(c)
        if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point and v.dtype != torch.bool \
                and _on_data(tracer, c):
            raise TraceError(
                f"the while_loop at {where} carries an integer tensor (carry {i}, {v.dtype}) that follows the data: "
                "standard NNEF has no integer arithmetic. Carry it as a float tensor (e.g. a counter made with "
                "torch.zeros(()) and compared as a float), or export for tract (tract_core_scan)")
    self.notes.append(f"while_loop at {where}: unrolled, {spell('max_loop_iterations', limit)} steps whose extra "
                      "steps keep "
                      "the carries (select on the condition; standard NNEF has no loop)")
    return tuple(carry)



def slot_dependents(nodes, slots: list) -> list:
    """Of ``nodes`` (in graph order), those computed from one of the ``slots``: a loop's body."""
    reach = set(slots)
    body = []
    for n in nodes:
        if n not in reach and any(a in reach for a in n.all_input_nodes):
            reach.add(n)
            body.append(n)
    return body


def _attr(root: torch.nn.Module, target: str):
    """The attribute ``target`` (a dotted path) of ``root``, or None."""
    value = root
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def body_module(root: torch.nn.Module, body_nodes: list, slots: list, outs: list):
    """A GraphModule computing one step of a loop from ``(*slots, *outer)``, and the outer nodes it
    reads (values made before the loop, in the order of its last placeholders). ``body_nodes``,
    ``slots`` and ``outs`` are nodes of the recorded graph."""
    g = fx.Graph()
    env: dict = {}
    for s in slots:
        env[s] = g.placeholder(s.name)
    outer_nodes: list = []
    inside = set(body_nodes) | set(slots)

    def outer(n):
        if n not in env:
            outer_nodes.append(n)
            env[n] = g.placeholder(f"outer_{n.name}")
        return env[n]

    for n in body_nodes:
        for a in n.all_input_nodes:
            if a not in inside:
                outer(a)
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[o] if o in env else outer(o) for o in outs))
    _hoist_placeholders(g)  # outer placeholders were made after body nodes
    return fx.GraphModule(root, g), outer_nodes


def _hoist_placeholders(g: fx.Graph) -> None:
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    others = [n for n in g.nodes if n.op != "placeholder"]
    if not others:
        return
    anchor = others[0]
    for p in placeholders:
        anchor.prepend(p)


class EagerRunner:
    """cond / scan / while_loop run as plain Python on tensors, without ``torch.compile`` (which
    cannot run the branches when forward hooks observe the modules called in them)."""

    @staticmethod
    def active(_args) -> bool:
        return True

    @staticmethod
    def cond(pred, true_fn, false_fn, operands=()):
        operands = tuple(operands) if isinstance(operands, (list, tuple)) else (operands,)
        return (true_fn if bool(pred) else false_fn)(*operands)

    @staticmethod
    def _run(flat_fn, init: list, xs: list, additional: tuple, dim: int, reverse: bool):
        carry, ys = list(init), []
        steps = xs[0].shape[dim]
        for i in (range(steps - 1, -1, -1) if reverse else range(steps)):
            out = flat_fn(*carry, *[x.select(dim, i) for x in xs], *additional)
            carry, y = list(out[: len(init)]), list(out[len(init):])
            ys.append(y)
        if reverse:
            ys.reverse()
        stacked = [torch.stack([y[j] for y in ys], dim) for j in range(len(ys[0]))] if ys else []
        return carry + stacked

    def scan(self, combine_fn, init, xs, *, dim: int = 0, reverse: bool = False):
        init_flat, init_spec = pytree.tree_flatten(init)
        xs_flat, xs_spec = pytree.tree_flatten(xs)
        spec: dict = {}

        def flat_fn(*args):
            carry = pytree.tree_unflatten(list(args[: len(init_flat)]), init_spec)
            new_carry, y = combine_fn(carry, pytree.tree_unflatten(list(args[len(init_flat):]), xs_spec))
            y_flat, spec["y"] = pytree.tree_flatten(y)
            return pytree.tree_leaves(new_carry) + y_flat

        outs = self._run(flat_fn, init_flat, xs_flat, (), dim % xs_flat[0].dim(), reverse)
        return (pytree.tree_unflatten(outs[: len(init_flat)], init_spec),
                pytree.tree_unflatten(outs[len(init_flat):], spec["y"]))

    def scan_op(self, combine_fn, init, xs, additional_inputs=()):
        spec: dict = {}

        def flat_fn(*args):
            flat, spec["out"] = pytree.tree_flatten(combine_fn(*args))
            return flat

        outs = self._run(flat_fn, list(init), list(xs), tuple(additional_inputs), 0, False)
        return pytree.tree_unflatten(outs, spec["out"])

    @staticmethod
    def while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=()):
        carry = tuple(carried_inputs)
        while bool(cond_fn(*carry, *additional_inputs)):
            carry = tuple(body_fn(*carry, *additional_inputs))
        return carry


@contextlib.contextmanager
def eager_control_flow():
    """Run cond / scan / while_loop as plain Python while the model is observed with hooks."""
    with _installed(EagerRunner()):
        yield


def refused_control_flow(exc: BaseException) -> bool:
    """Whether torch refused to run a scan / while_loop / cond / vmap eagerly because its function
    takes a Python decision on tensor data (torch.compile and functorch cannot run one)."""
    text = str(exc)
    return type(exc).__name__ == "UncapturedHigherOrderOpError" or (
        isinstance(exc, RuntimeError) and "vmap" in text and "data-dependent control flow" in text)


def run_eagerly(call):
    """``call()`` (a run of the user's model); when torch refuses a control-flow construct of it
    (:func:`refused_control_flow`), run again with cond / scan / while_loop / vmap as plain Python,
    which is what they mean (the export then takes the decisions inside the loop bodies with
    ``branches="select"``, or refuses them with the line)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - re-raised unless torch refused its own control flow
        if not refused_control_flow(exc):
            raise
    with eager_control_flow(), eager_vmap():
        return call()


@contextlib.contextmanager
def control_flow_patches(tracer):
    """Route torch.cond / scan / while_loop (functions and higher-order ops) to a :class:`Recorder`."""
    rec = Recorder(tracer)
    # while tracing, torch's own route (torch.compile) cannot work even when no operand is traced
    # (the branches may read traced values they close over): the recorder takes every call
    rec.active = lambda _args: True
    tracer.control_flow_notes = rec.notes
    with _installed(rec), vmap_patch(rec):
        yield rec


# torch's wrappers that call cond / scan / while_loop through torch.compile
_HOP_WRAPPERS = {"_cond_op_wrapper", "run_flattened_scan", "_while_loop_op_wrapper"}


@contextlib.contextmanager
def _installed(handler):
    """Patch torch's control-flow functions and higher-order ops to call ``handler`` when
    ``handler.active(arguments)``."""
    import torch._higher_order_ops as hops

    # the package re-exports functions named like their modules: take the modules themselves
    cond_mod = sys.modules["torch._higher_order_ops.cond"]
    scan_mod = sys.modules["torch._higher_order_ops.scan"]
    while_mod = sys.modules["torch._higher_order_ops.while_loop"]
    hop_utils = sys.modules["torch._higher_order_ops.utils"]
    orig_cond, orig_scan, orig_while = cond_mod.cond, scan_mod.scan, while_mod.while_loop
    orig_compile = hop_utils._hop_compile_and_call
    active = handler.active

    def cond(pred, true_fn, false_fn, operands=()):
        if active((pred, operands)):
            return handler.cond(pred, true_fn, false_fn, operands)
        return orig_cond(pred, true_fn, false_fn, operands)

    def scan(combine_fn, init, xs, *, dim=0, reverse=False):
        if active((init, xs)):
            return handler.scan(combine_fn, init, xs, dim=dim, reverse=reverse)
        return orig_scan(combine_fn, init, xs, dim=dim, reverse=reverse)

    def while_loop(cond_fn, body_fn, carried_inputs):
        if active(carried_inputs):
            return handler.while_loop(cond_fn, body_fn, carried_inputs)
        return orig_while(cond_fn, body_fn, carried_inputs)

    def compile_and_call(fn, args, kwargs=None):
        # the functions imported before the patch (``from ... import scan``) end here: run their
        # wrapper directly so that it reaches the higher-order op, which the handler takes
        if getattr(fn, "__name__", "") in _HOP_WRAPPERS and active((args, kwargs)):
            return fn(*args, **(kwargs or {}))
        return orig_compile(fn, args, kwargs)

    ops = {type(cond_mod.cond_op): handler.cond, type(scan_mod.scan_op): handler.scan_op,
           type(while_mod.while_loop_op): handler.while_loop}
    saved_calls = {cls: cls.__call__ for cls in ops}

    def op_call(cls, fn):
        orig = saved_calls[cls]

        def call(self, *args, **kwargs):
            if active((args, kwargs)):
                return fn(*args, **kwargs)
            return orig(self, *args, **kwargs)
        return call

    names = [(hop_utils, "_hop_compile_and_call", compile_and_call), (torch, "cond", cond), (cond_mod, "cond", cond),
             (hops, "cond", cond), (scan_mod, "scan", scan), (hops, "scan", scan),
             (while_mod, "while_loop", while_loop), (hops, "while_loop", while_loop)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in names if hasattr(obj, name)]
    try:
        for obj, name, fn in names:
            if hasattr(obj, name):
                setattr(obj, name, fn)
        for cls, fn in ops.items():
            cls.__call__ = op_call(cls, fn)
        yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
        for cls, fn in saved_calls.items():
            cls.__call__ = fn
