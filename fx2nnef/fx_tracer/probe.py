"""Probe runs: re-run the traced graph at other sizes of the dynamic dims.

The recorded graph is executed at the example sizes and at probe sizes (each symbol
+1, +2, +3, and all together). From these runs we learn, for every node:
- its shape (or integer value) as a polynomial of the symbols (``S``, ``2*S``, ``S+P``);
- whether it is a constant (independent of input data and of the symbols);
- whether each guard the trace took still holds: a guard that flips means the trace baked
  a decision on a dynamic dim.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

from ..ir import Guard, SymDim, fit_polynomial
from ..ir.dims import fit_floor_division
from .tracer import GuardRecord

_SHAPE_QUERIES = {"size", "dim", "numel", "nelement", "ndimension"}


@dataclasses.dataclass
class ProbeFailure:
    env: dict
    node: Optional[fx.Node]
    message: str

    def __str__(self):
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        where = ""
        if self.node is not None:
            src = self.node.meta.get("source")
            where = f" in '{self.node.name}'" + (f" at {src}: {src.code}" if src else "")
        return f"at {sizes}{where}: {self.message}"


@dataclasses.dataclass
class Analysis:
    symbols: list
    base_env: dict
    values: dict  # node -> value at the example sizes
    sym: dict  # node -> fitted int/SymDim (scalars) or tuple of dims (tensors)
    constant: set  # nodes whose value is a constant
    data_dep: set  # nodes depending on input data
    guards: list  # ir.Guard
    failures: list  # ProbeFailure for guard flips and run errors on shape decisions
    envs: list


class _Recorder(fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=False)
        self.current: Optional[fx.Node] = None

    def run_node(self, n):
        self.current = n
        with torch.no_grad():
            return super().run_node(n)


def resize(t: torch.Tensor, axis: int, n: int) -> torch.Tensor:
    """``t`` with axis ``axis`` of length ``n``, reusing its own data where it can."""
    cur = t.shape[axis]
    if n == cur:
        return t
    if cur == 0:
        shape = list(t.shape)
        shape[axis] = n
        if t.dtype.is_floating_point:
            return torch.randn(shape, generator=torch.Generator().manual_seed(n)).to(t.dtype)
        return torch.zeros(shape, dtype=t.dtype)
    if n < cur:
        return t.narrow(axis, 0, n).clone()
    reps = -(-n // cur)
    return torch.cat([t] * reps, dim=axis).narrow(axis, 0, n).clone()


def inputs_at(example: list, names: list, dynamic_axes: dict, env: dict) -> list:
    out = []
    for name, t in zip(names, example):
        for axis, sym in dynamic_axes.get(name, {}).items():
            t = resize(t, axis, env[sym])
        out.append(t)
    return out


def probe_envs(base: dict) -> list:
    """Sizes near the example: every one must reproduce the model."""
    envs = []
    for s in base:
        for k in (1, 2, 3, 5, 8):  # enough points to tell polynomials and floor divisions apart
            envs.append({**base, s: base[s] + k})
    if len(base) > 1:
        envs.append({s: v + 1 for s, v in base.items()})
        envs.append({s: v + 2 for s, v in base.items()})
    return envs


def far_probe_envs(base: dict) -> list:
    """Sizes far from the example (x2, x3): they reveal sizes that change only every N steps
    (strided convs: floor((T - c) / 320)). A model may refuse them (e.g. beyond its maximum
    length), so a far size that fails is dropped rather than reported."""
    envs = []
    for s, v in base.items():
        for factor in (2, 3):
            far = max(v * factor, 16 * (factor - 1))
            if far > v + 8:
                envs.append({**base, s: far})
    return envs


def _record(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return ("seq", tuple(_record(v) for v in value))
    if isinstance(value, torch.Size):
        return ("seq", tuple(("int", v) for v in value))
    return ("other", type(value).__name__)


def _run(gm, inputs) -> tuple:
    rec = _Recorder(gm)
    try:
        rec.run(*inputs)
        return rec.env, None
    except Exception as exc:  # noqa: BLE001 - reported as a probe failure
        first_line = str(exc).strip().split("\n")[0]
        return rec.env, (rec.current, f"{type(exc).__name__}: {first_line}")


def _guard_holds(g: GuardRecord, value) -> bool:
    fn = {"bool": bool, "int": int, "index": int, "float": float, "len": int, "count": len}.get(g.op)
    try:
        return fn(value) == g.expected if fn else True
    except Exception:  # noqa: BLE001
        return False


def _outputs_match(gm, values: dict, expected: list) -> Optional[str]:
    """None when the graph's outputs equal ``expected``, else what differs."""
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    got = [values[n] for n in out_node.args[0]]
    if len(got) != len(expected):
        return f"the model gives {len(expected)} outputs here, the graph {len(got)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return f"output {i} has shape {tuple(g.shape)}, the model gives {tuple(e.shape)}"
        if g.dtype.is_floating_point:
            if not torch.allclose(g.float(), e.float(), rtol=1e-4, atol=1e-5, equal_nan=True):
                return f"output {i} differs from the model by {(g.float() - e.float()).abs().max().item():.3g}"
        elif not torch.equal(g, e):
            return f"output {i} differs from the model"
    return None


def analyze(gm: fx.GraphModule, example: list, names: list, dynamic_axes: dict, guards: list,
            reference=None) -> Analysis:
    """Run the graph at the example sizes and the probe sizes; fit shapes; check guards.

    ``reference(env)``, when given, runs the original model at the sizes ``env`` and
    returns its flat outputs: a guard that flips at a probe size is then accepted when the
    graph still reproduces the model there (the branch taken was equivalent).
    """
    base_env = {}
    for name, t in zip(names, example):
        for axis, sym in dynamic_axes.get(name, {}).items():
            base_env[sym] = t.shape[axis]
    symbols = list(base_env)
    base_values, err = _run(gm, example)
    if err is not None:
        node, msg = err
        raise RuntimeError(f"the traced graph does not re-run on the example inputs at '{node}': {msg}")
    near = probe_envs(base_env) if symbols else []
    far = far_probe_envs(base_env) if symbols else []
    envs = [base_env] + near + far
    records = {n: [_record(v)] for n, v in base_values.items()}
    failures: list = []
    guard_flips: dict = {}
    good_envs = [base_env]
    equivalent: dict = {}
    for env in envs[1:]:
        optional = env in far
        values, err = _run(gm, inputs_at(example, names, dynamic_axes, env))
        if err is not None:
            if not optional:
                failures.append(ProbeFailure(env, err[0], err[1]))
            continue
        flips = [g for g in guards if g.node in values and not _guard_holds(g, values[g.node])]
        if optional and flips and reference is None:
            continue
        if reference is not None:
            try:
                mismatch = _outputs_match(gm, values, reference(env))
            except Exception:  # noqa: BLE001 - the model itself refuses a far size
                if not optional:
                    raise
                continue
            if mismatch is not None:
                if not optional:
                    node = flips[0].node if flips else None
                    failures.append(ProbeFailure(env, node, mismatch))
                continue
            for g in flips:
                equivalent.setdefault(id(g), env)
            flips = []
        good_envs.append(env)
        for n, v in values.items():
            records.setdefault(n, []).append(_record(v))
        for g in flips:
            guard_flips.setdefault(id(g), env)
    data_dep = _data_dependence(gm)
    sym = _fit_all(records, good_envs, symbols) if symbols else {n: _static(r[0]) for n, r in records.items()}
    varies = {n for n, r in records.items() if any(x != r[0] for x in r[1:])}
    constant = _constants(gm, data_dep, varies)
    ir_guards = []
    for g in guards:
        kind = "data" if g.node in data_dep and g.op != "count" else "shape"  # a count of pieces is a shape fact
        flipped = guard_flips.get(id(g))
        status, note = ("checked", f"holds at {len(good_envs)} sizes") if symbols else ("kept", "")
        if id(g) in equivalent:
            status = "checked"
            note = ("differs at " + ", ".join(f"{k}={v}" for k, v in equivalent[id(g)].items())
                    + ", where the graph still reproduces the model")
        if flipped is not None:
            status = "violated"
            note = "differs at " + ", ".join(f"{k}={v}" for k, v in flipped.items())
            if kind == "shape":
                failures.append(ProbeFailure(flipped, g.node, f"the trace decided {g.text} here; at these sizes it differs"))
        if kind == "data":
            status = "baked"
            note = "decided on tensor data: the export keeps only this branch"
        ir_guards.append(Guard(g.text, kind, g.source, g.expected, status, note))
    return Analysis(symbols, base_env, base_values, sym, constant, data_dep, ir_guards, failures, envs)


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

    def __init__(self, samples):
        self.samples = samples

    def __repr__(self):
        return "Unfit(" + ", ".join(f"{e}->{v}" for e, v in self.samples) + ")"


def _fit_int(samples, symbols):
    if all(v == samples[0][1] for _, v in samples):
        return samples[0][1]
    fitted = fit_polynomial(samples, symbols)
    if fitted is None:
        fitted = fit_floor_division(samples, symbols)
    return Unfit(samples) if fitted is None else fitted


def _fit_rec(recs, envs, symbols):
    kind = recs[0][0]
    if any(r[0] != kind for r in recs):
        return None
    if kind == "tensor":
        ranks = {len(r[1]) for r in recs}
        if len(ranks) != 1:
            return None
        return tuple(_fit_int([(e, r[1][d]) for e, r in zip(envs, recs)], symbols) for d in range(len(recs[0][1])))
    if kind == "int":
        return _fit_int([(e, r[1]) for e, r in zip(envs, recs)], symbols)
    if kind in ("bool", "float"):
        return recs[0][1] if all(r == recs[0] for r in recs) else Unfit([(e, r[1]) for e, r in zip(envs, recs)])
    if kind == "seq":
        lengths = {len(r[1]) for r in recs}
        if len(lengths) != 1:
            return None
        return tuple(_fit_rec([r[1][i] for r in recs], envs, symbols) for i in range(len(recs[0][1])))
    return None


def _fit_all(records, envs, symbols):
    return {n: _fit_rec(recs, envs[: len(recs)], symbols) for n, recs in records.items()}


def _data_dependence(gm) -> set:
    dep = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            dep.add(n)
            continue
        if _is_shape_query(n):
            continue
        if any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    return dep


# ops whose result depends only on the shape/dtype of their tensor arguments, not on their data
_META_METHODS = {"new_zeros", "new_ones", "new_full", "new_empty"}
_META_FUNCTIONS = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like}


def _is_shape_query(n) -> bool:
    if n.op == "call_method":
        return n.target in _SHAPE_QUERIES or n.target in _META_METHODS
    if n.op == "call_function":
        if n.target in _META_FUNCTIONS:
            return True
        return n.target is getattr and n.args[1] in ("shape", "dtype", "device", "ndim")
    return False


def _constants(gm, data_dep, varies) -> set:
    """Nodes whose value is the same for any input: no input data, no dynamic size."""
    const = set()
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in data_dep or n in varies:
            continue
        # new_full(x, (2,), s) reads x's dtype only, but its sizes and fill must be constant too
        rest = n.all_input_nodes[1:] if _is_shape_query(n) else n.all_input_nodes
        if all(a in const for a in rest):
            const.add(n)
    return const


def is_symbolic(x) -> bool:
    return isinstance(x, SymDim)
