"""Other input values at a probe's sizes: a decision that flips where the graph still gives the
model's outputs may only look equivalent on the probe's data, so the graph and the model are
compared again on the probe's items shuffled, redrawn, ramped, negated and widened."""
from __future__ import annotations

import math
from typing import Optional

import torch

from .decisions import _guard_holds, _read_as_traced
from .graph_runs import _output_nodes, _outputs_match, _run


def _scrambled(inputs: list, seed: int) -> list:
    """The inputs with their items shuffled (same values, other places)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.numel() > 1:
            t = t.reshape(-1)[torch.randperm(t.numel(), generator=g)].reshape(t.shape).clone()
        out.append(t)
    return out


def _int_bounds(e: torch.Tensor, scale: float) -> tuple:
    """The least and greatest integer :func:`_redrawn` draws for the example ``e``: its range,
    or with ``scale`` below 1 that range shrunk towards zero and reaching it (``y > 0`` on an
    example of 3..9 is all True there, and a flip and a roll of it agree)."""
    lo, hi = int(e.min()), int(e.max())
    if scale != 1 and lo < hi:
        lo, hi = max(lo, math.floor(lo * scale)), min(hi, math.ceil(hi * scale))
        lo, hi = min(lo, hi, 0), max(hi, 0)
        hi = max(hi, lo + 1)
    return lo, hi


def _ramped(inputs: list, example: list) -> list:
    """The inputs with items that change at every place (random draws over few values repeat
    some: a flip and a roll of ``[1, 1, 0]`` agree): integers counting up from the least of the
    small draw of :func:`_redrawn` and wrapping, bools alternating, floats rising evenly across the
    example's range. An input whose example items are all equal keeps them."""
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() > 1 and t.numel() > 0 \
                and not t.is_complex() and bool((e != e.reshape(-1)[0]).any()):
            n = torch.arange(t.numel())
            if t.dtype == torch.bool:
                t = (n % 2 == 1).reshape(t.shape)
            elif t.is_floating_point():
                lo, hi = float(e.min()), float(e.max())
                if math.isfinite(lo) and math.isfinite(hi):
                    t = torch.linspace(lo, hi, t.numel(), dtype=torch.float64).reshape(t.shape).to(t.dtype)
            else:
                lo, hi = _int_bounds(e, 1 / 16)
                t = (lo + n % (hi - lo + 1)).reshape(t.shape).to(t.dtype)
        out.append(t)
    return out


def _redrawn(inputs: list, example: list, seed: int, scale: float = 1.0) -> list:
    """The inputs with fresh values drawn within the range of the example's values (floats
    uniform between its least and greatest item, integers and bools among those between), so
    that the probe's piece of the example (all of one sign, say) does not decide alone. An
    input whose example items are all equal keeps them (a mask of ones stays ones), except a
    float input of one item, drawn on both sides of zero. ``scale`` shrinks the range towards
    zero, where clamps and saturations no longer hide a difference (integers: ``x ** -1`` is 0
    but at -1, 0 and 1; they then reach zero, see :func:`_int_bounds`); floats are then drawn on
    both sides of zero."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() > 0 and not t.is_complex():
            if t.dtype == torch.bool:
                if bool(e.any()) and not bool(e.all()):
                    t = torch.rand(t.shape, generator=g) < 0.5
            elif t.is_floating_point():
                lo, hi = float(e.min()), float(e.max())
                if lo == hi and e.numel() == 1 and math.isfinite(lo):
                    lo, hi = -abs(lo) - 1, abs(lo) + 1  # one number: nothing tells its range, its sign may decide
                if scale != 1:  # both signs: an input positive in the example may not be so always
                    hi = max(abs(lo), abs(hi)) * scale
                    lo = -hi
                if lo < hi and math.isfinite(lo) and math.isfinite(hi):
                    t = (torch.rand(t.shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(t.dtype)
            else:
                lo, hi = _int_bounds(e, scale)
                if lo < hi:
                    t = torch.randint(lo, hi + 1, t.shape, generator=g).to(t.dtype)
        out.append(t)
    return out


def _scrambled_mismatch(gm, reference, env: dict, inputs: list, example: list, guards: tuple = (),
                        flips: tuple = (), few: bool = False) -> Optional[str]:
    """What differs between the graph and the model on other inputs at ``env``, if anything.

    A guard that flips where the graph still gives the model's outputs may only look equivalent
    on the probe's data, a piece of the example's: a flip of a palindrome is the palindrome, and
    ``floor(z / 2.63)`` is all zeros where that piece of ``z`` is positive. The probe's items
    are shuffled once, then redrawn twice within the example's range of values and once within
    a sixteenth of it (``clamp(2 * s, -0.5, 0.5)`` and ``clamp(s, ...)`` agree on large sums),
    given items that differ at every place (:func:`_ramped`), and last the inputs whose items are
    all equal given others (:func:`_unfixed`). ``few``: the flipped decisions were found
    equivalent on all of those at other sizes already; here the items redrawn once and ramped
    tell whether this size alone parts the branches, the others tried only where those two told
    nothing (each variant is a run of the model and one of the graph, and a UNet's decisions on
    its sizes flip at most of its probe sizes)."""
    flipped = {id(g) for g in flips}

    def compare(other):
        """None: no evidence; "" : the graph agrees on ``other``; else what differs."""
        if _same_inputs(other, inputs):
            return None  # an input constant in the example keeps its items: the probe's own values
        try:
            expected = reference(env, other)
        except Exception:  # noqa: BLE001 - the model refuses these values: no evidence either way
            return None
        values, err, _ = _run(gm, other, keep=_output_nodes(gm) | {g.node for g in guards})
        if err is not None:
            return ""
        if any(id(g) not in flipped and g.node in values and not _read_as_traced(g, values[g.node]) for g in guards):
            return None  # these values take another decision on data (one the graph keeps as at the example)
        return _outputs_match(gm, values, expected) or ""

    checked = False
    # the variants keep an input whose example items are all equal (zeros, a mask of ones); two
    # more change its items too (a bool input all False in the example: `v = y; if S > 6:
    # v = y.flip(0)` then an in-place write to v changes y on one side only, and only where y
    # holds a True), the others varied or not
    variants = _variants(inputs, example) + _unfixed(inputs)
    if few:  # the redrawn and ramped ones first; the others only where those told nothing
        variants = [variants[1], variants[4]] + variants[:1] + variants[2:4] + variants[5:]
    for i, other in enumerate(variants):
        if few and checked and i >= 2:
            break
        found = compare(other)
        if found is None:
            continue
        if found:
            return found + " (on other input values)"
        checked = True
    if not checked:
        # all the values tried were the probe's own or refused by the model: that the graph agrees
        # on them says nothing of other inputs (``z[::3].flip(0)`` and ``z[::3] * 2`` on zeros)
        return "a decision flips here and no other input values the model accepts could tell the branches apart"
    return None


def _deciding_as_traced(gm, inputs: list, example: list, guards: list, keep: set, data_nodes: set) -> Optional[tuple]:
    """``(inputs, graph run)`` of the first variant of ``inputs`` (as in :func:`_scrambled_mismatch`)
    on which every decision on data (``bool`` of a traced tensor) holds as traced; None if none."""
    data_guards = [g for g in guards if g.op == "bool" and g.node in data_nodes]
    for other in _variants(inputs, example) + _unfixed(inputs):
        if _same_inputs(other, inputs):
            continue
        run = _run(gm, other, keep)
        values, err, _ = run
        if err is None and all(g.node not in values or _guard_holds(g, values[g.node]) for g in data_guards):
            return other, run
    return None


def _variants(inputs: list, example: list) -> list:
    """Other values for a probe's ``inputs``: its items shuffled, redrawn twice within the
    example's range of values and once within a sixteenth of it, ramped, of the other sign, and
    spread over twice the example's magnitude on both sides of zero."""
    return [_scrambled(inputs, 1), _redrawn(inputs, example, 2), _redrawn(inputs, example, 3),
            _redrawn(inputs, example, 4, 1 / 16), _ramped(inputs, example), _negated(inputs, example),
            _widened(inputs, example, 5)]


def _widened(inputs: list, example: list, seed: int) -> list:
    """The inputs with items spread evenly over twice the example's greatest magnitude on both
    sides of zero (from 0 up for an integer input that is never negative), shuffled. Every other
    variant stays within the example's range or its mirror: ``y > 0.52`` on an example of
    -1.6..0.24 is all True there, and a roll of it was judged equal to no roll (fuzz 18298; so
    was ``y > 0.52`` on an example of 0.5..2 negated, 18573). An input whose example items are all
    equal or not finite keeps the probe's values, as do bools (:func:`_ramped` alternates them)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for t, e in zip(inputs, example):
        if isinstance(t, torch.Tensor) and isinstance(e, torch.Tensor) and t.numel() > 0 and e.numel() > 1 \
                and t.dtype != torch.bool and not t.is_complex() and bool((e != e.reshape(-1)[0]).any()) \
                and (not e.is_floating_point() or bool(torch.isfinite(e).all())):
            top = 2 * float(e.abs().max())
            bottom = 0.0 if not e.is_floating_point() and bool((e >= 0).all()) else -top
            items = torch.linspace(bottom, top, t.numel(), dtype=torch.float64)
            if not t.is_floating_point():
                items = items.round()
            items = items[torch.randperm(t.numel(), generator=g)]
            t = items.reshape(t.shape).to(t.dtype)
        out.append(t)
    return out


def _negated(inputs: list, example: list) -> list:
    """The inputs whose example values are all of one sign (not all zero), integer or float,
    negated; the others kept. Every other variant stays within the example's sign (an integer
    input of one item keeps its value in all of them): ``y.abs()`` and ``y`` agree there (fuzz
    24603: ``if x.numel() <= 52: v = y.abs()`` with ``y`` one item, 11, was exported as ``y``)."""
    out = []
    for t, e in zip(inputs, example):
        signed = isinstance(t, torch.Tensor) and t.dtype != torch.bool and t.dtype.is_signed and not t.is_complex()
        # finite values only: an additive mask of 0 and -inf is no number of a sign (+inf is no mask)
        if signed and isinstance(e, torch.Tensor) and e.numel() > 0 and bool((t != 0).any()) \
                and bool(torch.isfinite(e).all()) and (bool((e >= 0).all()) or bool((e <= 0).all())):
            t = -t
        out.append(t)
    return out


def _same_inputs(a: list, b: list) -> bool:
    return all(x is y or (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                          and x.dtype == y.dtype and bool(torch.equal(x, y))) or (not isinstance(x, torch.Tensor) and x == y)
               for x, y in zip(a, b))


def _unfixed(inputs: list) -> list:
    """Two variants of inputs whose items are all equal (an example of zeros, a mask of ones),
    where the other variants keep them: integers one more on the even items, or one less on the
    odd ones; bools alternating both ways; floats spread by one around the value."""
    ups, downs = [], []
    for t in inputs:
        up = down = t
        if isinstance(t, torch.Tensor) and t.numel() > 1 and not t.is_complex() \
                and not bool((t != t.reshape(-1)[0]).any()):
            n = torch.arange(t.numel()).reshape(t.shape)
            even = n % 2 == 0  # every item changes in one of the two (the first one in the first)
            if t.dtype == torch.bool:
                up, down = even, ~even
            elif t.is_floating_point():
                up = (t + torch.linspace(-1, 1, t.numel(), dtype=torch.float64).reshape(t.shape)).to(t.dtype)
                down = (t - (~even).to(torch.float64)).to(t.dtype)
            else:
                up = (t + even.to(torch.int64)).to(t.dtype)
                down = (t - (~even).to(torch.int64)).to(t.dtype)
        ups.append(up)
        downs.append(down)
    return [ups, downs]
