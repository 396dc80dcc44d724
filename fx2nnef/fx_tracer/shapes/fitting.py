"""Shapes as forms of the symbols: the replay's forms checked against a run's records, or forms
fitted to the records of many probe runs (polynomials, floor divisions, clamps, remainders), and
the nodes whose value is a constant."""
from __future__ import annotations

import random
from typing import Optional

from ...ir import SymDim, fit_polynomial
from ...ir.dims import clamp_bends, fit_clamped, fit_floor_division, fit_remainder
from ..tracing.data_dep import is_shape_query
from .fake_replay import Replay, ReplayUnavailable, VARIES
from .probe_sizes import _env_key


def _form_at(form, env):
    if isinstance(form, SymDim):
        return form.evaluate(env)
    if isinstance(form, tuple):
        return tuple(_form_at(f, env) for f in form)
    return form


def _agrees(form, record, env) -> bool:
    """Whether a node's :func:`_record` at ``env`` is what its symbolic form gives there."""
    if form is VARIES or form is None:
        return True
    kind = record[0]
    if kind == "tensor":
        return isinstance(form, tuple) and record[1] == _form_at(form, env)
    if kind in ("bool", "int", "float"):
        return not isinstance(form, tuple) and record[1] == _form_at(form, env)
    if kind == "seq":
        # a sequence of pieces may be shorter or longer here (chunk(2) of S=1 has one piece):
        # the pieces the graph reads are checked at their own getitem nodes
        # (split(S // 2) of S=5 has a third piece of 1 the graph never reads)
        pieces = any(r[0] == "tensor" for r in record[1])
        if pieces:
            return isinstance(form, tuple)
        return (isinstance(form, tuple) and len(form) == len(record[1])
                and all(_agrees(f, r, env) for f, r in zip(form, record[1])))
    return True


def _shape_mismatch(rep: Replay, records: dict, env: dict) -> Optional[str]:
    """None when every node's shape (and size value) recorded at ``env`` is what the fake
    replay's expressions give there, else the first node that differs."""
    for n, record in records.items():
        form = rep.dims.get(n)
        if not _agrees(form, record, env):
            return f"'{n.name}' is {_record_text(record)} where the symbolic shapes give {_form_at(form, env)}"
    return None


def _record_text(record):
    if record[0] == "seq":
        return tuple(_record_text(r) for r in record[1])
    return record[1]


def _check_base_shapes(rep: Replay, records: dict, base_env: dict) -> None:
    wrong = _shape_mismatch(rep, records, base_env)
    if wrong is not None:
        raise ReplayUnavailable(f"at the example sizes, {wrong}")


def _unfit_varying(form):
    if form is VARIES:
        return Unfit([])
    if isinstance(form, tuple):
        return tuple(_unfit_varying(f) for f in form)
    return form


def _fit_good(good: list, symbols: list):
    envs = [e for e, _ in good]
    records: dict = {}
    for _, recorded in good:
        for n, r in recorded.items():
            records.setdefault(n, []).append(r)
    sym = _fit_all(records, envs, symbols) if symbols else {n: _static(r[0]) for n, r in records.items()}
    return envs, records, sym


def _has_division(sym: dict) -> bool:
    """Whether a fitted size of ``sym`` holds a floor division (an atom that is no input size)."""
    def has(x):
        if isinstance(x, tuple):
            return any(has(i) for i in x)
        return isinstance(x, SymDim) and bool(x.symbols - x.input_symbols)
    return any(has(v) for v in sym.values())


def _division_check_envs(base: dict, seen: list) -> list:
    """Sizes past the probed ones, one symbol moved at a time, at uneven steps, no farther than
    the far probes (3x: a run of a large model costs), that no probe ran at."""
    keys = {_env_key(e) for e in seen}
    envs = []
    for s, v in base.items():
        for n in (v + 9, v + 21, 2 * v + 7):
            env = {**base, s: n}
            if _env_key(env) not in keys:
                keys.add(_env_key(env))
                envs.append(env)
    return envs


def _bend_check_envs(sym: dict, base: dict, seen: list) -> list:
    """The sizes next to where a fitted ``min(p, c)`` or ``max(p, c)`` bends (:func:`clamp_bends`)
    that no probe ran at, the other symbols at the example's sizes."""
    keys = {_env_key(e) for e in seen}
    envs = []
    for form in sym.values():
        for s, n in clamp_bends(form):
            for m in (n - 1, n, n + 1):
                env = {**base, s: m}
                if s in base and m >= 1 and _env_key(env) not in keys:
                    keys.add(_env_key(env))
                    envs.append(env)
    return envs


def _count_unfit(sym: dict) -> int:
    def count(x):
        if isinstance(x, Unfit):  # sizes only: a decision (bool) may flip where the graph still holds
            return int(all(isinstance(v, int) and not isinstance(v, bool) for _, v in x.samples))
        if isinstance(x, tuple):
            return sum(count(i) for i in x)
        return 0
    return sum(count(v) for v in sym.values())


def _static(rec):
    kind = rec[0]
    if kind == "tensor":
        return rec[1]
    if kind in ("int", "bool", "float"):
        return rec[1]
    if kind == "seq":
        return tuple(_static(r) for r in rec[1])
    return None


class Unfit:
    """A dynamic value that no polynomial of the symbols explains."""

    def __init__(self, samples, why: str = ""):
        self.samples = samples
        self.why = why  # set where a fitted form was found wrong at a size it was not fitted to

    def __repr__(self):
        return "Unfit(" + ", ".join(f"{e}->{v}" for e, v in self.samples) + ")"


def _fit_int(samples, symbols):
    if all(v == samples[0][1] for _, v in samples):
        return samples[0][1]
    fitted = fit_polynomial(samples, symbols)
    if fitted is None:
        fitted = fit_floor_division(samples, symbols)
    if fitted is None:
        fitted = fit_clamped(samples, symbols)
    if fitted is None:
        fitted = fit_remainder(samples, symbols)
    return Unfit(samples) if fitted is None else fitted


def _fit_rec(recs, envs, symbols, memo=None):
    """The form of one node's records over ``envs``. ``memo``: the forms already fitted in this
    pass by their values at ``envs`` (a model's nodes share a few sizes: a fit is made once per
    sequence of values, not once per node and axis)."""
    memo = {} if memo is None else memo

    def fit(values):
        key = (len(values), tuple(values))
        if key not in memo:
            memo[key] = _fit_int(list(zip(envs, values)), symbols)
        return memo[key]

    kind = recs[0][0]
    if any(r[0] != kind for r in recs):
        return None
    if kind == "tensor":
        ranks = {len(r[1]) for r in recs}
        if len(ranks) != 1:
            return None
        return tuple(fit([r[1][d] for r in recs]) for d in range(len(recs[0][1])))
    if kind == "int":
        return fit([r[1] for r in recs])
    if kind in ("bool", "float"):
        return recs[0][1] if all(r == recs[0] for r in recs) else Unfit([(e, r[1]) for e, r in zip(envs, recs)])
    if kind == "seq":
        lengths = {len(r[1]) for r in recs}
        if len(lengths) != 1:
            return None
        return tuple(_fit_rec([r[1][i] for r in recs], envs, symbols, memo) for i in range(len(recs[0][1])))
    return None


def _fit_all(records, envs, symbols):
    memo: dict = {}  # one per pass: every node's records are over the same envs
    return {n: _fit_rec(recs, envs[: len(recs)], symbols, memo) for n, recs in records.items()}


def _constants(gm, data_dep, varies) -> set:
    """Nodes whose value is the same for any input: no input data, no dynamic size."""
    const = set()
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in data_dep or n in varies:
            continue
        # new_full(x, (2,), s) reads x's dtype only, but its sizes and fill must be constant too
        rest = n.all_input_nodes[1:] if is_shape_query(n) else n.all_input_nodes
        if all(a in const for a in rest):
            const.add(n)
    return const


def _is_fitted(form) -> bool:
    """Whether ``form`` (a node's fitted value) holds a size that changes with the symbols."""
    if isinstance(form, tuple):
        return any(_is_fitted(f) for f in form)
    return isinstance(form, SymDim) and bool(form.symbols)


def fit_check_envs(base: dict, ranges: dict, seen: list) -> list:
    """Sizes where the forms fitted to probe runs are checked, that the fit did not use: the symbols
    moved together (by the same step: a square image's H=W; by different steps; at the top of the
    span), two picked at random above the example and one below, within the ranges and on their
    steps. Together the symbols grow the example's sizes at most :data:`_FIT_CHECK_GROWTH` times (4x
    for one symbol, 2x each for two). A handful: each is a run of the model and of the graph."""
    keys = {_env_key(e) for e in seen}
    rng = random.Random(sum(7919 * (i + 1) * v for i, v in enumerate(base.values())))  # the same each run
    k = len(base)
    picks = [lambda i: 0.5, lambda i: (i + 1) / (k + 1), lambda i: 1.0 - 0.25 * (i % 2),
             lambda i: rng.random(), lambda i: rng.random(), lambda i: -rng.random()]
    envs = []
    for pick in picks:
        env = {s: _size_at(ranges[s], v, _FIT_CHECK_GROWTH ** (1 / k), pick(i))
               for i, (s, v) in enumerate(base.items())}
        if env != base and all(ranges[s].contains(n) for s, n in env.items()) and _env_key(env) not in keys:
            keys.add(_env_key(env))
            envs.append(env)
    return envs


_FIT_CHECK_GROWTH = 4  # the most the symbols moved together multiply the example's sizes by


def _size_at(r, v: int, growth: float, at: float) -> int:
    """The size on ``r``'s step at fraction ``at`` of the span above ``v`` (up to ``growth`` times
    it), or below it (``at`` negative: down to ``r``'s lower bound, or 1)."""
    if at < 0:
        steps = (v - max(r.lo or 1, 1)) // r.step
        return v - r.step * round(-at * steps)
    top = max(v + r.step, int(v * growth))
    if r.hi is not None:
        top = min(top, r.hi)
    steps = max(0, (top - v) // r.step)
    return v + r.step * max(1 if steps else 0, round(at * steps))


def unfit_where_off(sym: dict, records: dict, env: dict) -> list:
    """Mark :class:`Unfit` (with why) every size fitted to probe runs (a tensor's axis, an integer,
    one in a sequence of them) that is not what the graph's run at ``env`` gives there
    (``records``): the export then refuses it where an op needs it, and needs no guess where none
    does (a flatten's size tract infers). The nodes marked."""
    marked = []
    for n, record in records.items():
        form = sym.get(n)
        if _is_fitted(form):
            fixed = _unfit_off(form, record, env)
            if fixed is not form:
                sym[n] = fixed
                marked.append(n)
    return marked


def _unfit_off(form, record, env):
    """``form`` with its fitted sizes that differ from ``record`` at ``env`` made :class:`Unfit`."""
    kind = record[0]
    if kind == "int" and isinstance(form, SymDim) and form.evaluate(env) != record[1]:
        return _off(form, record[1], env)
    if kind in ("tensor", "seq") and isinstance(form, tuple) and len(form) == len(record[1]):
        reals = record[1] if kind == "tensor" else [r[1] if r[0] == "int" else r for r in record[1]]
        parts = tuple(_part_off(f, real, env) for f, real in zip(form, reals))
        return form if all(a is b for a, b in zip(parts, form)) else parts
    return form


def _part_off(form, real, env):
    """One item of a tensor's shape or a sequence: a fitted size unlike ``real`` made
    :class:`Unfit`, a nested record looked into, anything else as it is."""
    if isinstance(form, SymDim) and isinstance(real, int) and form.evaluate(env) != real:
        return _off(form, real, env)
    if isinstance(real, tuple) and not isinstance(form, Unfit):
        return _unfit_off(form, real, env)
    return form


def _off(form: SymDim, real: int, env: dict) -> "Unfit":
    sizes = ", ".join(f"{k}={v}" for k, v in env.items())
    return Unfit([(env, real)], why=(
        f"a size fitted to probe runs as {form}, which gives {form.evaluate(env)} at {sizes} where the model "
        f"gives {real} (computed in Python with no symbolic form: the fit holds at the sizes probed only); keep "
        "those axes static (drop them from dynamic_axes), or give axes that always move together one symbol "
        "(an image's height and width as one)"))
