"""Models valid on a lattice of sizes only: an encoder-decoder or a multi-branch net whose
branches are added or concatenated after stride-2 convolutions and upsampling (UNets, FPNs,
HRNet, DLA, YOLO necks) runs at H = 32k and refuses most sizes in between (a shape mismatch in
an add or a cat). A few sizes just below a multiple may run too (a stride-2 stem rounds 63 up to
the 32 of 64), so the sizes near the example that the model accepts form no step of their own:
the plain range is then a short one ("63 <= H <= 64"), or a wide one with refused sizes inside.

:func:`lattice_range` looks for the step: the finest power of two ``d`` at which the graph
reproduces the model both below and above the example (at ``v - d``, ``v + d``, ``v - 2d``,
``v + 2d``), a few probe runs per step tried. The range is then ``H % d == v % d``: the emitted
graph declares the size as ``d*H_d`` (+ the rest), and tract refuses a size off it."""
from __future__ import annotations

from typing import Callable, Optional

from ...ir import SymRange
from .ranges import _edge

FEWEST_SIZES = 3  # a range holding fewer sizes is not dynamic in any useful sense
LARGEST_STEP = 128  # an FPN's P7 level: the largest lattice tried (at most 7 steps, 4 runs each)


def wants_lattice(rng: SymRange, v: int, results: dict) -> bool:
    """Whether the model refuses sizes in a way a lattice may explain: a refused size inside the
    range found from the probes (accepted sizes on both sides of it), or a range of fewer than
    :data:`FEWEST_SIZES` sizes that a refusal bounds (on a step the few good sizes probed
    suggest: 61 and 64 give ``H % 3 == 1``, where 62 and 63 were not run)."""
    refused = [n for n, r in results.items() if r == "refused"]
    if any(rng.contains(n) for n in refused):
        return True
    short = rng.lo is not None and rng.hi is not None and (rng.hi - rng.lo) // rng.step + 1 < FEWEST_SIZES
    return short and bool(refused)


def lattice_range(sym: str, v: int, results: dict, run: Callable[[int], str]) -> tuple:
    """``(range, tried)``: the range of ``sym`` on the finest lattice of a power-of-two step (below
    ``v``, up to :data:`LARGEST_STEP`) that explains refusals near the example ``v``
    (:func:`_refused_within`) and where the graph holds both ways, None when no step does; and the
    sizes tried that were not good (for the refusal's message). ``results`` (size -> "good",
    "bad", "refused", "unchecked") gains the sizes run; ``run(n)`` runs one size."""
    tried: list = []
    d = 2
    while d < v and d <= LARGEST_STEP:
        if not _refused_within(v, d, results):  # nothing for a lattice of this step to explain
            d *= 2
            continue
        sizes = [n for n in (v - d, v + d, v - 2 * d, v + 2 * d) if n >= 1]
        failed = _first_not_good(sizes, results, run)
        if failed is None:
            return _on_lattice(sym, v, d, results, run), tried
        tried.append(failed)
        d *= 2
    return None, tried


def _refused_within(v: int, d: int, results: dict) -> bool:
    """Whether the model refuses a size above the example and closer to it than ``d``: a lattice
    is taken for refusals near the example only (a reflect pad refusing T=17..20 for an example of
    100 runs at 99 and 101, and on every lattice too), and only where a refused size lies between
    the example and the next size of the lattice, which the model accepts. Refusals below the
    example alone are a lower bound, not a lattice: an index read from data that is out of range
    below the example's size refuses the smaller sizes, and accepts some of them with other data
    (a stride-2 stem rounding sizes up refuses just above a multiple, as a lattice does)."""
    return any(v < n < v + d for n, r in results.items() if r == "refused")


def _first_not_good(sizes: list, results: dict, run) -> Optional[int]:
    for n in sizes:
        if n not in results:
            results[n] = run(n)
        if results[n] != "good":
            return n
    return None


def _on_lattice(sym: str, v: int, d: int, results: dict, run) -> SymRange:
    """The range on the lattice of step ``d`` through ``v``: bounded by the sizes on it that are
    not good, and by any size where the graph differs from the model (or a decision changes far
    above) off it; its lowest size probed when below the sizes run."""
    rest = v % d
    lowest = rest or d
    if lowest < v and lowest not in results:
        results[lowest] = run(lowest)
    kept = {n: r for n, r in results.items() if (n - v) % d == 0 or r in ("bad", "unchecked")}
    (hi, why_hi), (lo, why_lo) = _edge(sym, v, kept, up=True), _edge(sym, v, kept, up=False)
    if lo is not None and lo <= lowest:  # the lowest size on the lattice holds: no bound below
        lo, why_lo = None, ""
    # a bound where a decision changes far off the lattice: its last size on it
    lo = None if lo is None else lo + (v - lo) % d
    hi = None if hi is None else hi - (hi - v) % d
    why = [w for w in (why_hi, why_lo) if w]
    off = sorted((n for n, r in results.items() if (n - v) % d and r == "refused"),
                 key=lambda n: (abs(n - v), n))[:4]
    why.append(f"the model runs at {sym}={v - d},{v + d} but refuses " + f"{sym}=" + ",".join(map(str, sorted(off)))
               if off else f"the graph holds at {sym}={v - d},{v + d}")
    return SymRange(sym, lo, hi, d, rest, "; ".join(why))


def no_lattice_reason(sym: str, tried: list) -> str:
    """Why no lattice was taken, for a range that stays too short."""
    return (f"no power-of-two step has sizes both below and above the example where the model runs and "
            f"the graph holds ({sym}=" + ",".join(map(str, sorted(tried))) + " do not)")
