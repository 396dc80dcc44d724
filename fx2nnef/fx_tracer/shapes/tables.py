"""Ranges bounded by a table the graph reads at positions that grow with a size.

GPT-2 reads its position table at ``arange(S)``, RoBERTa at the running count of its mask: past
the table's rows torch raises IndexError and tract aborts the process (an out-of-range gather
index panics). No decision on the sizes marks that limit, and the probes run at sizes near the
example, so nothing else bounds the range there. Here the eager model is run just past each such
table's rows; a refusal there bounds the range at the last size it takes (a few runs: the table's
rows and the sizes just under, then bisection).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.fx as fx
import torch.nn.functional as F

from ...ir.dims import SymDim, SymRange

# a table with more rows is a vocabulary or alike, read at input data: running the model past it
# would cost a forward at that many positions for nothing
TABLE_ROWS_MAX = 16384
_PASS_THROUGH = {"to", "long", "int", "type", "contiguous", "clone", "detach"}


def _table_reads(gm: fx.GraphModule, values: dict) -> list:
    """``(index node, rows)`` of each ``embedding`` of a stored table at indices computed in the
    graph (not an input of the model passed on as it is); ``values``: node -> example value."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is F.embedding and len(n.args) >= 2:
            index, table = n.args[0], n.args[1]
        elif n.target is torch.embedding and len(n.args) >= 2:
            table, index = n.args[0], n.args[1]
        else:
            continue
        if not isinstance(index, fx.Node) or not isinstance(table, fx.Node) or table.op != "get_attr":
            continue
        source = index
        while source.op == "call_method" and source.target in _PASS_THROUGH and source.args:
            source = source.args[0]
        if source.op == "placeholder":
            continue  # token ids: their values are the user's, not a function of the sizes
        stored = values.get(table)
        if isinstance(stored, torch.Tensor) and stored.dim() > 0:
            out.append((index, int(stored.shape[0])))
    return out


def _symbols_of(dims) -> set:
    out = set()
    for d in dims if isinstance(dims, tuple) else ():
        if isinstance(d, SymDim):
            out |= d.input_symbols
    return out


def bound_by_tables(gm: fx.GraphModule, analysis, accepts: Callable[[dict], bool], notes: list) -> None:
    """Bound ``analysis.ranges`` where the model refuses sizes past a table's rows (see the module's
    notes). ``accepts(env)``: whether the eager model runs at the sizes ``env``."""
    if not analysis.symbols:
        return
    limits: dict = {}
    for index, rows in _table_reads(gm, analysis.values):
        for s in _symbols_of(analysis.sym.get(index)):
            rng = analysis.ranges.get(s)
            if rng is not None and rng.hi is not None and rng.hi < rows:
                continue  # already bounded below the table's end
            if rows <= TABLE_ROWS_MAX and rows >= analysis.base_env[s]:
                limits[s] = min(limits.get(s, rows), rows)
    for s, rows in limits.items():
        base = analysis.base_env
        if accepts({**base, s: rows + 1}):
            continue  # the positions do not grow with the size (or wrap): nothing to bound
        last = _last_accepted(s, base, rows, accepts)
        if last is None:
            continue
        rng = analysis.ranges.get(s) or SymRange(s)
        why = f"the model refuses {s}={last + 1} (a table of {rows} rows read at positions that grow with {s})"
        analysis.ranges[s] = SymRange(s, rng.lo, last, rng.step, rng.rest, "; ".join(w for w in (rng.why, why) if w))
        analysis.io_envs = [e for e in analysis.io_envs if e.get(s, 0) <= last]
        notes.append(f"{s} <= {last}: {why}; tract would abort the process past it")


def _last_accepted(s: str, base: dict, rows: int, accepts: Callable[[dict], bool]) -> Optional[int]:
    """The largest size of ``s`` in [example, rows] the model accepts, the sizes past it refused
    (the table's rows and just under it first: positions from 0, or after an offset of 1 or 2)."""
    lo, hi = base[s], rows + 1  # lo accepted (the example), hi refused
    for n in (rows, rows - 1, rows - 2):
        if lo < n < hi:
            if accepts({**base, s: n}):
                lo = n
                break
            hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if accepts({**base, s: mid}):
            lo = mid
        else:
            hi = mid
    return lo
