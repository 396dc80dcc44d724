"""The trace's decisions (guards) at other sizes or on other values: whether each holds, the
numbers read from sizes that the graph keeps, and the signature of every decision on sizes at
some sizes, from the fake replay (what a probe is worth its cost for)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.fx as fx

from ...ir import SymDim
from ..tracing.scan import ScanCall
from ..tracing.tracer import GuardRecord
from .fake_replay import Replay, ReplayUnavailable
from .probe_sizes import _env_key


def _read_as_traced(g: GuardRecord, value) -> bool:
    """Whether ``value`` decides ``g`` as the trace did: a bool (``bool(t)``, ``t.any().item()``),
    whose outcome the graph keeps. A number read from data (``int(m.sum())``) may differ while
    the code decides with it as traced (``n > 3``): it counts as read alike."""
    if g.op == "bool":
        return _guard_holds(g, value)
    if g.op != "item" or not isinstance(g.expected, bool):
        return True
    try:
        return bool(value.item() if isinstance(value, torch.Tensor) else value) == g.expected
    except Exception:  # noqa: BLE001 - not a number: no reading to compare
        return True


def _holds_in(g: GuardRecord, values: dict) -> bool:
    """Whether the decision ``g`` holds with ``values`` (node -> value at some sizes): for a bound
    of ``range()``, whether the loop runs as many steps (see ``GuardRecord.counts``)."""
    if g.counts is not None:
        try:
            return _range_steps(g, values.__getitem__) == g.counts[1]
        except (KeyError, TypeError, ValueError):
            pass
    return _guard_holds(g, values[g.node])


def _range_steps(g: GuardRecord, value_of) -> int:
    """How many steps the range that ``g`` bounds runs, ``value_of(node)`` giving each traced
    bound (``GuardRecord.counts``)."""
    return len(range(*[int(value_of(b)) if isinstance(b, fx.Node) else b for b in g.counts[0]]))


def _guard_holds(g: GuardRecord, value) -> bool:
    fn = {"bool": bool, "int": int, "index": int, "float": float, "round": round, "len": int, "count": len}.get(g.op)
    try:
        return fn(value) == g.expected if fn else True
    except Exception:  # noqa: BLE001
        return False


_NUMBER_GUARDS = ("int", "len", "index", "float", "round")


def _baked_number(guards: list, values: dict, data_dep: set) -> Optional[str]:
    """Why a Python number read from the sizes that differs here (``round(S / 2)``,
    ``x.shape[0].__index__()``) bounds the range even where the graph
    gave the model's outputs: the graph holds the example's number wherever the code computed
    with it, and outputs can hide that on the values tried (a clamp, a saturating activation).
    None when no such number differs."""
    for g in guards:
        if g.op not in _NUMBER_GUARDS or g.node in data_dep or g.node not in values or g.consumed \
                or g.counts is not None:  # a range's bound: only the loop's length is kept (a decision)
            continue
        here = values[g.node]
        here = here.item() if isinstance(here, torch.Tensor) and here.numel() == 1 else here
        if isinstance(here, (int, float)) and not _guard_holds(g, here):  # anything else: nothing read
            return (f"{g.op}() of a size reads {here!r} here, not the example's {g.expected!r}, and the graph "
                    "keeps the example's number")
    return None


def _signature(rep: Replay, guards: list, data_dep: set, gm: Optional[fx.GraphModule] = None):
    """``env -> tuple``: every decision on sizes at ``env`` (torch's, from the fake replay, and the
    tracer's on shapes); a probe is worth its cost only where this changes. The function's
    ``traced(signature)`` gives the tracer's part: where it equals the example's, the graph takes
    the model's own Python path and only torch's kernels decide otherwise. Whether each rolled
    loop of ``gm`` runs a step is one of the tracer's decisions: a loop of no step leaves its
    carries as they came in (the model's may then be views of other values, which an in-place
    update after the loop changes too), so the sizes where it runs none are probed."""
    tracer_holds = []
    for g in guards:
        if g.node in data_dep or (g.node in rep.dims and g.node not in rep.varies):
            continue  # the same value at every size (float(head_dim)): no decision on a dynamic size
        ev = rep.guard_values.get(g.node)
        if ev is None:
            raise ReplayUnavailable(f"the decision {g.text} has no symbolic form")
        if g.op in _NUMBER_GUARDS and g.consumed:
            continue  # read by torch's argument parser for a call the graph records with the traced number
        if g.counts is not None and all(b in rep.guard_values for b in g.counts[0] if isinstance(b, fx.Node)):
            tracer_holds.append(lambda env, g=g: _range_steps(g, lambda b: rep.guard_values[b](env)) == g.counts[1])
            continue
        if g.op in _NUMBER_GUARDS:
            # a size taken as a Python number (len(x)) differs at every other size, and what the
            # code decides with it is out of sight (``if len(x) > 7`` changes at 8, not at the
            # nearest sizes): only probes spread over many sizes tell where the graph holds
            raise ReplayUnavailable(f"{g.text} reads a dynamic size as a Python number")
        tracer_holds.append(lambda env, g=g, ev=ev: _guard_holds(g, ev(env)))
    tracer_holds += _loop_runs(rep, gm)
    count = len(rep.checks)
    seen: dict = {}  # env key -> signature: the scans come back to the same sizes

    def signature(env):
        key = _env_key(env)
        if key not in seen:
            seen[key] = (tuple(_decide(c.holds, env) for c in rep.checks)
                         + tuple(_decide(holds, env) for holds in tracer_holds))
        return seen[key]
    signature.traced = lambda sig: sig[count:]
    return signature


def _loop_runs(rep: Replay, gm: Optional[fx.GraphModule]) -> list:
    """``env -> bool``: whether a rolled loop with carries runs a step at ``env``, one per loop of
    ``gm`` whose number of steps is a dynamic size."""
    out = []
    for n in gm.graph.nodes if gm is not None else ():
        if n.op != "call_function" or not isinstance(n.target, ScanCall) or not n.args[0] or not n.args[1]:
            continue
        dims = rep.dims.get(n.args[1][0])
        steps = dims[n.target.dim] if isinstance(dims, tuple) and len(dims) > n.target.dim else None
        if isinstance(steps, SymDim):
            out.append(lambda env, steps=steps: steps.evaluate(env) > 0)
    return out


def _decide(fn, env):
    try:
        return fn(env)
    except (ArithmeticError, ValueError, TypeError):  # a division by a size that is 0 here
        return None
