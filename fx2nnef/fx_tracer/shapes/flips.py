"""Where the decisions on sizes flip, and the probe plan made of those sizes: one symbol moved
at a time, scanned size by size near the example and by doubling far above it."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

import torch
import torch.fx as fx

from .decisions import _decide, _holds_in
from .probe_sizes import Traced, _env_key, _meta_inputs, _moved


def guard_flip_sizes(traced: Traced, base_env: dict, data_dep: set, max_sizes: int = 4) -> list:
    """Sizes, one symbol moved at a time, where a shape guard's decision changes.

    Only the nodes the guards depend on are run, on meta tensors (shapes, no data), at every
    size from 1 to a few times the example: a decision such as ``S > 2`` or ``S == 4`` is then
    found whichever threshold it has, and the nearest sizes where it flips are probed with
    real data. Nodes that cannot run on meta tensors leave their guards unscanned."""
    gm, example, names, dynamic_axes = traced.gm, traced.example, traced.names, traced.dynamic_axes
    shape_guards = [g for g in traced.guards if g.node not in data_dep]
    if not shape_guards or not base_env:
        return []
    need: set = set()
    todo = [g.node for g in shape_guards]
    while todo:
        n = todo.pop()
        if n not in need:
            need.add(n)
            todo.extend(n.all_input_nodes)
    if any(n.op == "get_attr" for n in need):
        return []
    order = [n for n in gm.graph.nodes if n in need]
    interp = fx.Interpreter(gm)

    def decisions(env):
        inputs = iter(_meta_inputs(example, names, dynamic_axes, env))
        interp.env = {}
        try:
            with torch.no_grad():
                for n in order:
                    interp.env[n] = next(inputs) if n.op == "placeholder" else interp.run_node(n)
        except Exception:  # noqa: BLE001 - a node needs data: its guards stay unscanned
            return None
        return tuple(_holds_in(g, interp.env) if g.node in interp.env else None for g in shape_guards)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any(n not in need for n in placeholders):
        order = [n for n in gm.graph.nodes if n in need or n.op == "placeholder"]
    found = []
    for s, v in base_env.items():
        top = min(max(3 * v, v + 16, 32), 1024)
        base = decisions(base_env)
        if base is None:
            continue
        for side in (range(v - 1, 0, -1), range(v + 1, top + 1)):
            hits = 0
            prev = base
            for n in side:
                cur = decisions({**base_env, s: n})
                if cur is None:
                    break
                if cur != prev:
                    found.append({**base_env, s: n})
                    hits += 1
                    if hits >= max_sizes:
                        break
                prev = cur
    return found


def _past_flip(signature, base_env: dict, env: dict, s: str, step: int) -> list:
    """Sizes of ``s`` past a flip at ``env`` (moving away from the example by ``step``) where the
    decisions are those of the flip: the next one, and the last before the next change (sizes
    computed in two ways may agree at the flip and part further on), within the scanned sizes."""
    outcome = _decide(signature, env)
    top = _scan_top(base_env[s])
    n = env[s]
    while 1 <= n + step <= top and _decide(signature, {**base_env, s: n + step}) == outcome:
        n += step
    return [m for m in dict.fromkeys((env[s] + step, n)) if m != env[s] and 1 <= m <= top]


def _far_flip(signature, base_env: dict, s: str, top: int, scanned: list, limit: int = 1 << 24,
              since: Optional[tuple] = None) -> Optional[int]:
    """The first size of ``s`` above ``top`` (the last size scanned one by one) where a decision
    that held at every scanned size changes (``x[:, 2:100]`` decides ``S < 100``), found by
    doubling then bisection; None when there is none up to ``limit``. Decisions that already
    change within the scan (parities) are left out: the scan probed them. ``since``: the
    signature at ``top`` when those decisions changed since the scan (past an earlier far flip)."""
    fixed = [i for i in range(len(scanned[0])) if all(sig[i] == scanned[0][i] for sig in scanned)]
    if not fixed:
        return None
    ref = since if since is not None else scanned[0]

    def differs(n):
        sig = signature({**base_env, s: n})
        return any(sig[i] != ref[i] for i in fixed)

    lo, hi = top, 2 * top
    while hi <= limit:
        if differs(hi):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if differs(mid) else (mid, hi)
            return hi
        lo, hi = hi, 2 * hi
    return None


_FAR_KERNEL_FLIPS = 8  # far changes of torch's kernel decisions looked past, per symbol


def _kernel_only_far(signature, base_env: dict, s: str, n: int, shapes_past) -> bool:
    """Whether the change at ``s = n`` is torch's kernels' alone (the tracer's decisions are the
    example's there) and the replay's shapes hold at ``n``, just past it and at ``2n`` (fake runs)."""
    if signature is None:
        return False
    base = signature.traced(signature(base_env))

    def holds(m):
        env = {**base_env, s: m}
        return shapes_past(env) if signature.traced(signature(env)) == base else "bad"

    # just past n: n + 2 when the graph cannot run at n + 1 (a model of even sizes only)
    past = holds(n + 1)
    if past == "unknown":
        past = holds(n + 2)
    return past == "good" and holds(n) == "good" and holds(2 * n) == "good"


def _scan_top(v: int) -> int:
    """The largest size of a symbol scanned one by one for flips, from its example size ``v``."""
    return max(v + 16, min(max(3 * v, 32), 1024))


@dataclasses.dataclass
class _ProbePlan:
    """The sizes an analysis probes (from :func:`_symbolic_envs`, or the fitted probes' fixed sets)."""
    single: list = dataclasses.field(default_factory=list)  # sizes with one symbol moved, in probe order
    multi: list = dataclasses.field(default_factory=list)  # sizes with several symbols moved
    lazy: dict = dataclasses.field(default_factory=dict)  # size before a flip (env key) -> the flip size
    kernel_only: set = dataclasses.field(default_factory=set)  # env keys a fake run checks, no real run
    io_envs: list = dataclasses.field(default_factory=list)  # sizes for check_io
    checks: set = dataclasses.field(default_factory=set)  # env keys of the checks (no decision differs there)
    far: dict = dataclasses.field(default_factory=dict)  # symbol -> a size far above where a decision changes

    def copy(self) -> "_ProbePlan":
        """A plan with containers of its own (a second analysis starts afresh)."""
        return _ProbePlan(list(self.single), list(self.multi), dict(self.lazy), set(self.kernel_only),
                          list(self.io_envs), set(self.checks), dict(self.far))


def _symbolic_envs(signature, base_env: dict, max_flips: int = 4) -> _ProbePlan:
    """The probe sizes: where a decision flips and the size before, one symbol moved at a time
    (the nearest ``max_flips`` on each side, up to a few times the example), and one check at sizes
    where no decision differs, every symbol moved (below the example where it can, the cheaper
    side, else just above); see :class:`_ProbePlan`.

    ``lazy`` maps the size before a flip to the flip: it is probed only if the flip is not good.
    ``kernel_only`` holds the keys of flip sizes where the tracer's decisions are the example's: only
    torch's kernels decide otherwise there, and they run in the graph as in the model, so the graph
    gives the model's values; what needs checking there is the shapes, which a fake run tells. Not
    from an example size of 0 or 1 of the symbol moved, which is weak evidence: an axis of 1
    broadcasts, and outcomes of a decision merged with select may agree in shape there only
    (fuzz 100370: ``narrow(1, 0, 1)`` or ``-x``, merged at S = 1, broadcast the narrowed one at 2).
    ``multi`` also holds sizes where a decision flips with several symbols moved together only
    (:meth:`_PlanBuilder.add_joint_flips`).
    ``io_envs``: sizes for check_io, where no decision differs, below and above the example.
    ``checks``: the keys of the check sizes. ``far``: symbol -> a size far above the example
    where a decision changes (:func:`_far_flip`); it is not run, it bounds the range."""
    plan = _PlanBuilder(signature, base_env, max_flips)
    for s in base_env:
        plan.add_symbol(s)
    plan.add_joint_flips()
    plan.add_checks()
    plan.add_io_envs()
    return plan.plan


class _PlanBuilder:
    """:func:`_symbolic_envs` one step at a time: each symbol scanned, then the checks and the
    check_io sizes."""

    def __init__(self, signature, base_env: dict, max_flips: int):
        self.signature, self.base_env, self.max_flips = signature, base_env, max_flips
        self.base = signature(base_env)
        # the tracer's decisions the graph was traced with: every guard holds (the example's, unless
        # the graph was traced again at other sizes and is checked at the example's)
        self.traced = tuple(True for _ in signature.traced(self.base))
        self.plan = _ProbePlan()
        self.check: dict = {}  # symbol -> its size in the check
        self.below: dict = {}  # symbol -> a size below the example where no decision differs
        self.above: dict = {}
        self.near: dict = {-1: {}, 1: {}}  # side -> symbol -> nearest flip, for check_io when no size there is alike

    def add_flip(self, env: dict) -> None:
        if env not in self.plan.single:
            self.plan.single.append(env)
            if self.signature.traced(self.signature(env)) == self.traced and \
                    all(self.base_env[s] > 1 for s in _moved(env, self.base_env)):
                self.plan.kernel_only.add(_env_key(env))

    def add_joint_flips(self) -> None:
        """Sizes where a decision flips only with several symbols moved together (``x.numel() > 6``
        of ``2 * S * T`` items at S = T = 1, while each alone keeps it from the example): the small
        sizes of each symbol and the example's, crossed, one for each outcome neither the example
        nor one symbol moved gives, at most ``max_flips`` (fuzz 200152)."""
        if len(self.base_env) < 2:
            return
        seen = {self.signature(e) for e in self.plan.single} | {self.base}
        grid = [sorted({1, 2, v}) for v in self.base_env.values()]
        for values in itertools.product(*grid):
            env = dict(zip(self.base_env, values))
            if len(_moved(env, self.base_env)) < 2 or len(self.plan.multi) >= self.max_flips:
                continue
            outcome = self.signature(env)
            if outcome not in seen:
                seen.add(outcome)
                self.plan.multi.append(env)

    def add_symbol(self, s: str) -> None:
        """The flips of ``s``, its far change, its smallest size, and its sizes for the checks."""
        v = self.base_env[s]
        same, scanned = self._scan(s)
        n = _far_flip(self.signature, self.base_env, s, _scan_top(v), scanned)
        if n is not None:
            self.plan.far[s] = n
        smallest = {**self.base_env, s: 1}
        if v > 1 and smallest not in self.plan.single and self.signature(smallest) != self.base:
            self.add_flip(smallest)  # the smallest size, past the flips counted (often refused)
        self._pick_check_sizes(s, same)

    def _scan(self, s: str) -> tuple:
        """``(same, scanned)``: the sizes of ``s`` where every decision is the example's, and the
        signature at every size scanned; the flips found are added."""
        v = self.base_env[s]
        same, scanned = [], [self.base]
        for step, side in ((1, range(v - 1, 0, -1)), (-1, range(v + 1, _scan_top(v) + 1))):
            prev, hits, seen = self.base, 0, set()
            for n in side:
                cur = self.signature({**self.base_env, s: n})
                scanned.append(cur)
                # a flip between the same two outcomes as a nearer one (S odd, then even, then
                # odd again) is not probed again: the flips further away stay within reach
                if cur != prev and hits < self.max_flips and (prev, cur) not in seen:
                    seen.add((prev, cur))
                    # the flip, and the size before it: the range would end at the last good size
                    self.add_flip({**self.base_env, s: n})
                    before = {**self.base_env, s: n + step}
                    if n + step != v and before not in self.plan.single:
                        self.add_flip(before)
                        self.plan.lazy[_env_key(before)] = n
                    hits += 1
                if cur == self.base:
                    same.append(n)
                prev = cur
        return same, scanned

    def _pick_check_sizes(self, s: str, same: list) -> None:
        v = self.base_env[s]
        low = [n for n in same if n < v]
        if any(n >= 2 for n in low):
            low = [n for n in low if n >= 2]  # a size of 1 broadcasts: a check there says little
        high = [n for n in same if n > v]
        if low:
            # about an eighth of the example (the check's two real runs then cost a fraction of
            # the example's: a conv net's by the area, an LLM's by the tokens until weight reads
            # dominate), an odd distance from it: the sizes run then also tell a model that
            # accepts every k-th size only from one that accepts all (see _symbol_range)
            self.below[s] = self.check[s] = min(low, key=lambda n: (abs(n - max(2, v // 8)) + 2 * ((v - n + 1) % 2), n))
        if high:
            self.above[s] = min(high, key=lambda n: (abs(n - (v + 3)), n))
            self.check.setdefault(s, min(high, key=lambda n: (abs(n - (v + 1)), n)))
        # no size on one side where every decision is the example's (B=2: only B=1 below):
        # check_io runs at the nearest probed size there (left out if outside the range)
        moved = [e[s] for e in self.plan.single if _moved(e, self.base_env) == [s]]
        if not low and any(n < v for n in moved):
            self.near[-1].setdefault(s, max(n for n in moved if n < v))
        if not high and any(n > v for n in moved):
            self.near[1].setdefault(s, min(n for n in moved if n > v))

    def add_checks(self) -> None:
        """The check: every symbol at its check size, or one by one if together they change a decision."""
        plan, base_env = self.plan, self.base_env
        if not self.check:
            return
        env = {**base_env, **self.check}
        if len(base_env) > 1 and self.signature(env) != self.base:
            for s, n in self.check.items():  # together they change a decision: check them one by one
                one = {**base_env, s: n}
                plan.checks.add(_env_key(one))
                if one in plan.single:
                    plan.kernel_only.discard(_env_key(one))
                else:
                    plan.single.append(one)
                plan.lazy.pop(_env_key(one), None)
        else:
            plan.checks.add(_env_key(env))
            if env in plan.single:
                plan.kernel_only.discard(_env_key(env))
            else:
                (plan.single if len(base_env) == 1 else plan.multi).append(env)
        plan.lazy.pop(_env_key(env), None)

    def add_io_envs(self) -> None:
        for side, moved in ((-1, self.below), (1, self.above)):
            # check_io runs below and above the example (below, the check's sizes when every symbol
            # has a size below: the model's outputs there are known)
            env = {**self.base_env, **moved}
            if moved and self.signature(env) == self.base:
                # a symbol with no size alike on this side (the example is where a decision flips: a
                # graph traced again at other sizes) is checked at its nearest flip, else never
                self.plan.io_envs.append({**env, **{s: n for s, n in self.near[side].items() if s not in moved}})
            elif self.near[side]:
                s, n = next(iter(self.near[side].items()))
                self.plan.io_envs.append({**self.base_env, s: n})
