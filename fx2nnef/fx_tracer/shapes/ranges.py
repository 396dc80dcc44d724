"""The range of each symbol from what its probes gave ("good", "bad", "refused", "unchecked"):
its bounds, and its step when the model accepts every k-th size only or its decisions repeat
with a period."""
from __future__ import annotations

import math
from typing import Optional

from ...ir import SymRange
from .decisions import _decide
from .flips import _scan_top


def _edge(sym: str, v: int, results: dict, up: bool) -> tuple:
    """Where the range around ``v`` ends going up (or down): ``(bound, reason)``, the bound being
    the last good size before a "bad" one or before sizes the model refuses, else ``(None, "")``."""
    beyond = (lambda n, m: n > m) if up else (lambda n, m: n < m)
    last = v
    for n in sorted((n for n in results if beyond(n, v)), reverse=not up):
        if results[n] == "bad":
            return last, f"the graph differs from the model at {sym}={n}"
        if results[n] == "unchecked":  # every size before it decides as the sizes checked
            return n - 1 if up else n + 1, f"a decision on {sym} changes at {sym}={n}, beyond the sizes checked"
        if results[n] == "good":
            last = n
    refused = [n for n in results if beyond(n, last) and results[n] == "refused"]
    if refused:
        return last, f"the model refuses {sym}={min(refused) if up else max(refused)}"
    return None, ""


def _bounds(sym: str, v: int, results: dict) -> tuple:
    """``(lo, hi, reasons)``: the nearest bad size on each side bounds the range, and so does a
    refused size beyond the last good one."""
    (hi, why_hi), (lo, why_lo) = _edge(sym, v, results, up=True), _edge(sym, v, results, up=False)
    return lo, hi, [w for w in (why_hi, why_lo) if w]


def _symbol_range(sym: str, v: int, results: dict) -> SymRange:
    """The range of ``sym`` around the example size ``v`` from ``size -> status`` of the probes
    that moved only ``sym``: "good" (the graph reproduces the model), "bad" (it does not),
    "refused" (the eager model itself refuses that size).

    A model that accepts every k-th size only (k from the good sizes, and refusing every probed
    size in between) gets ``sym % k == v % k``; the sizes off that step then bound nothing. A
    size off the step where the model runs and the graph differs is no step: it bounds."""
    k = 0
    for n, r in results.items():
        if r == "good":
            k = math.gcd(k, n - v)
    off_step = [r for n, r in results.items() if (n - v) % k and r != "unchecked"] if k > 1 else []
    if off_step and all(r == "refused" for r in off_step):
        lo, hi, why = _bounds(sym, v, {n: r for n, r in results.items() if (n - v) % k == 0})
        off = sorted(n for n, r in results.items()
                     if (n - v) % k and r == "refused" and (lo is None or n >= lo) and (hi is None or n <= hi))
        why.append(f"the model refuses {sym}=" + ",".join(str(n) for n in off))
        return SymRange(sym, lo, hi, k, v % k, "; ".join(why))
    lo, hi, why = _bounds(sym, v, results)
    return SymRange(sym, lo, hi, 1, 0, "; ".join(why))


OFF_STEP = "off the step"  # in the reason of a range whose step the decisions on the sizes imply


_STEP_PROBES = 24  # real runs per symbol spent on the sizes of a step (one per path of the model)


_STEP_REACH = 4  # the step's paths are followed up to this many times the largest size scanned


def _decision_step(sym: str, base_env: dict, signature, results: dict, run) -> Optional[SymRange]:
    """The range of ``sym`` on a step, when the decisions on it repeat with a period: a patch
    embedding that pads ``if H % 4 != 0``, a TF "SAME" padding that picks its amount by
    ``H % 2`` before each of several stride-2 convolutions, a window partition padding to a
    multiple of the window. The sizes whose decisions (the tracer's and torch's kernels', see
    :func:`_signature`) are the example's are then those of ``sym % k == v % k``; the graph may
    hold on a finer step (a pad by ``(4 - H % 4) % 4`` holds at the multiples of 4 too, where it
    is 0), never off the path it was traced on.

    Every size from 1 to the scan's top is sorted by its decisions (a path of the model); a path
    is good when its probed sizes reproduce the model (one real run of a size of each path met,
    ``run(n)`` -> "good" / "bad" / "refused", at most ``_STEP_PROBES``). For each divisor ``d``
    of ``k``, the sizes ``v + j*d`` are followed up and down from the example while their paths
    are good; the divisor that keeps the most sizes gives the range (the finer one on a tie).
    Past the scan, the sizes of that step up to ``_STEP_REACH`` times its top must take good
    paths, and ``results``' "unchecked" sizes (a decision changing far above) bound it too.
    None when the decisions set no step (``k`` is 1) or the finest step (1) keeps the most sizes:
    the plain ranges then apply (:func:`_symbol_range`)."""
    paths = _StepPaths(sym, base_env, signature, results, run)
    k = paths.period()
    if k <= 1:
        return None
    d, lo, hi, lo_end, hi_end = paths.best_step(k)
    if d == 1:
        return None
    v = base_env[sym]
    why: list = []
    if hi is None:
        hi = paths.unseen_path_bound(d, why)
    hi = _far_result_bound(sym, v, d, paths.top, results, hi, why)
    for end in (hi_end, lo_end):
        if end is not None:
            n, st = end
            why.append(f"the model refuses {sym}={n}" if st == "refused" else
                       f"the graph differs from the model at {sym}={n}" if st == "bad" else
                       f"{sym}={n} takes a path of the model not checked")
    why.append(_off_step_reason(sym, v, d, results, paths.paths))
    return SymRange(sym, lo, hi, d, v % d, "; ".join(why))


class _StepPaths:
    """The paths of the model (its decisions, see :func:`_signature`) at every size of ``sym`` from
    1 to the scan's top, and which are good: what :func:`_decision_step` follows. A path not yet
    known is probed at one of its sizes (``run(n)``), at most ``_STEP_PROBES`` times."""

    def __init__(self, sym: str, base_env: dict, signature, results: dict, run):
        self.sym, self.base_env, self.signature, self.results, self.run = sym, base_env, signature, results, run
        self.v = base_env[sym]
        self.top = _scan_top(self.v)
        # every size scanned, and the example's (an empty axis: 0)
        self.paths = {n: self.path(n) for n in sorted({self.v, *range(1, self.top + 1)})}
        self.status: dict = {}  # path -> "good", or what one of its sizes gave ("bad", "refused")
        for n, r in results.items():
            if n in self.paths and r in ("good", "bad", "refused"):
                if self.status.get(self.paths[n], "good") == "good":
                    self.status[self.paths[n]] = r
        self.budget = _STEP_PROBES

    def path(self, n: int):
        return _decide(self.signature, {**self.base_env, self.sym: n})

    def period(self) -> int:
        """The gcd of the distances from the example to the sizes on its path."""
        k = 0
        for n, p in self.paths.items():
            if p == self.paths[self.v]:
                k = math.gcd(k, n - self.v)
        return k

    def status_of(self, n: int):
        """Whether the path of size ``n`` is good (probed if not known yet); None past the budget."""
        p = self.paths[n]
        if p not in self.status:
            if self.budget <= 0:
                return None
            self.budget -= 1
            self.results[n] = self.status[p] = self.run(n)
        return self.status[p]

    def follow(self, step: int) -> tuple:
        """The last good size from the example by ``step`` (None: every size to the end), and the
        first that is not with what it gave."""
        last, n = self.v, self.v + step
        while 1 <= n <= self.top:
            st = self.status_of(n)
            if st != "good":
                return last, (n, st)
            last, n = n, n + step
        return None, None

    def best_step(self, k: int) -> tuple:
        """``(d, lo, hi, lo_end, hi_end)`` for the divisor ``d`` of ``k`` that keeps the most sizes
        (the finer one on a tie), as :meth:`follow` ends each way."""
        best = None
        for d in (x for x in range(1, k + 1) if k % x == 0):
            hi, hi_end = self.follow(d)
            lo, lo_end = self.follow(-d)
            low = (self.v % d or d) if lo is None else lo
            kept = ((self.top if hi is None else hi) - low) // d + 1
            if best is None or kept > best[0]:
                best = (kept, d, lo, hi, lo_end, hi_end)
        return best[1:]

    def unseen_path_bound(self, d: int, why: list) -> Optional[int]:
        """Past the scan: the last size of the step ``d`` before one on a path never seen good (not
        run: far above), up to ``_STEP_REACH`` times the top; None when there is none."""
        good = {p for p, st in self.status.items() if st == "good"}
        n = self.top + (self.v - self.top) % d
        while n <= _STEP_REACH * self.top:
            if self.path(n) not in good:
                why.append(f"a decision on {self.sym} changes at {self.sym}={n}, beyond the sizes checked")
                return n - d
            n += d
        return None


def _far_result_bound(sym: str, v: int, d: int, top: int, results: dict, hi: Optional[int], why: list):
    """``hi`` lowered to below the first size run past the scan that is not good on the step ``d``
    (a decision changing far above is "unchecked": not run), its reason added to ``why``."""
    beyond = [(m, r) for m, r in results.items() if m > top and r != "good" and (r == "unchecked" or (m - v) % d == 0)]
    if beyond:
        m, r = min(beyond)
        if hi is None or m <= hi:
            hi = m - 1 - (m - 1 - v) % d
            why.append(f"a decision on {sym} changes at {sym}={m}, beyond the sizes checked" if r == "unchecked"
                       else f"the model refuses {sym}={m}" if r == "refused"
                       else f"the graph differs from the model at {sym}={m}")
    return hi


def _off_step_reason(sym: str, v: int, d: int, results: dict, paths: dict) -> str:
    """Why the sizes off the step ``d`` are left out: the nearest ones probed that were not good,
    else the decisions there."""
    off = sorted((n for n, r in results.items() if n in paths and (n - v) % d and r in ("bad", "refused")),
                 key=lambda n: (abs(n - v), n))[:3]
    if off:
        return (f"{OFF_STEP} the graph differs from the model or the model refuses the size ({sym}="
                + ",".join(str(n) for n in sorted(off)) + ")")
    return f"{OFF_STEP} the model takes other decisions"


def _bisect_refused(results: dict, rng: SymRange, v: int) -> list:
    """A size halfway between a bound set by the model's refusals and the nearest refused
    size beyond it (aligned to the step): probing it tightens that bound."""
    out = []
    if rng.lo is not None:
        below = [n for n in results if n < rng.lo]
        if below and results[max(below)] == "refused":
            mid = rng.lo - ((rng.lo - max(below)) // 2 // rng.step) * rng.step
            if mid < rng.lo and mid not in results:
                out.append(mid)
    if rng.hi is not None:
        above = [n for n in results if n > rng.hi]
        if above and results[min(above)] == "refused":
            mid = rng.hi + ((min(above) - rng.hi) // 2 // rng.step) * rng.step
            if mid > rng.hi and mid not in results:
                out.append(mid)
    return out
