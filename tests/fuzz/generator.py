"""Seeded generator of random small PyTorch programs with one or two dynamic axes.

``generate(seed)`` returns a :class:`~fuzz.program.Program` whose source is a reproducer.
The builder keeps, for every live value, its shape (ints and size expressions), dtype, a
range of values and the storage it aliases, and only emits statements valid at every size
>= the smallest one tried. Values are kept in sane ranges (denominators away from 0,
exp/pow/prod on bounded values) so that eager PyTorch is a meaningful reference. The
program is run eagerly at all sizes before it is returned; a program that fails there,
or gives non-finite or huge numbers, is replaced by another draw of the same seed.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Callable, Optional

from .program import (Dim, InputSpec, Program, Stmt, d_add, d_ceildiv, d_eval, d_floordiv, d_mul)

FLOATS = ("float32",)
INTS = ("int64", "int32", "uint8")
_ORDER = {"bool": 0, "uint8": 1, "int32": 2, "int64": 3, "float32": 4}


def is_float(dt: str) -> bool:
    return dt in FLOATS


def is_int(dt: str) -> bool:
    return dt in INTS


def category(dt: str) -> int:
    return 0 if dt == "bool" else 1 if is_int(dt) else 2


def promote(a: tuple, b: tuple) -> str:
    """torch's result dtype for two tensor operands given as (dtype, rank)."""
    top = max(category(a[0]), category(b[0]))
    same = [x for x in (a, b) if category(x[0]) == top]
    dimmed = [x for x in same if x[1] > 0] or same
    if top == 1 and len({x[0] for x in dimmed}) > 1 and "uint8" in {x[0] for x in dimmed}:
        pass
    return max((x[0] for x in dimmed), key=_ORDER.get)


def promote_scalar(dt: str, scalar) -> str:
    if isinstance(scalar, bool):
        return dt
    if isinstance(scalar, float):
        return dt if is_float(dt) else "float32"
    return "int64" if dt == "bool" else dt


@dataclasses.dataclass
class Val:
    name: str
    shape: tuple
    dtype: str
    lo: float
    hi: float
    minabs: float = 0.0
    group: str = ""  # name of the tensor whose storage this one shares
    contiguous: bool = True
    expanded: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def bound(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def dyn_axes(self) -> list:
        return [i for i, d in enumerate(self.shape) if not isinstance(d, int)]

    def static_axes(self) -> list:
        return [i for i, d in enumerate(self.shape) if isinstance(d, int)]


def broadcast(a: tuple, b: tuple) -> Optional[tuple]:
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def _fmt(x: float) -> str:
    return repr(round(x, 2))


class Builder:
    """Accumulates statements and the facts about each value."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.vals: list = []
        self.stmts: list = []
        self.init_lines: list = []
        self.inputs: list = []
        self.count = 0
        self.params = 0
        self.families: set = set()
        self.example: dict = {}
        self.dynamic_axes: dict = {}
        self.ambiguous: set = set()

    # ---- bookkeeping
    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, expr: str, shape, dtype: str, lo: float, hi: float, family: str, **kw) -> Val:
        if "contiguous" not in kw:
            # torch keeps the layout of a strided input: the result of an op on a transposed
            # tensor is not contiguous either (and reshaping it copies, except at size 1)
            names = set(re.findall(r"\b[a-z]\w*\b", expr))
            kw["contiguous"] = all(u.contiguous for u in self.vals if u.name in names)
        val = Val(self.fresh(), tuple(shape), dtype, float(lo), float(hi), **kw)
        if not val.group:
            val.group = val.name
        self.stmts.append(Stmt([f"{val.name} = {expr}"], family, (val.name,)))
        self.families.add(family)
        self.vals.append(val)
        return val

    def pick(self, pred: Callable = lambda v: True) -> Optional[Val]:
        cands = [(k, v) for k, v in enumerate(self.vals) if pred(v)]
        if not cands:
            return None
        weights = [1 + k * k for k, _ in cands]
        return self.rng.choices([v for _, v in cands], weights)[0]

    def param(self, shape, dtype: str = "float32", lo: float = -1.0, hi: float = 1.0, kind: str = "uniform") -> str:
        self.params += 1
        name = f"c{self.params}"
        spec = InputSpec(name, tuple(shape), dtype, kind, lo, hi)
        code = spec.code().replace("generator=g", f"generator=torch.Generator().manual_seed({self.params})")
        self.init_lines.append(f"self.register_buffer('{name}', {code})")
        return f"self.{name}"

    def numel_at_example(self, shape) -> int:
        n = 1
        for d in shape:
            n *= d_eval(d, self.example)
        return n

    def dim_code(self, v: Val, axis: int) -> str:
        d = v.shape[axis]
        return str(d) if isinstance(d, int) else f"{v.name}.shape[{axis}]"

    def rdim(self, rank: int) -> tuple:
        """A random axis of a rank-``rank`` tensor, written positive or negative."""
        axis = self.rng.randrange(rank)
        return axis, (axis - rank if self.rng.random() < 0.3 else axis)

    def tame(self, v: Val, limit: float = 4.0) -> Val:
        """``v`` if its values are within ``limit``, else a bounded copy."""
        if v.bound <= limit:
            return v
        if is_float(v.dtype):
            expr = self.rng.choice([f"torch.tanh({v.name}) * {limit / 2:g}", f"{v.name}.clamp(-{limit:g}, {limit:g})",
                                    f"{v.name} / {v.bound:.3g} * {limit:g}"])
            return self.emit(expr, v.shape, v.dtype, -limit, limit, "unary")
        if is_int(v.dtype):
            lim = int(limit)
            lo = 0 if v.dtype == "uint8" else -lim
            return self.emit(f"{v.name}.clamp({lo}, {lim})", v.shape, v.dtype, lo, lim, "elementwise")
        return v

    def is_ambiguous(self, v: Val) -> bool:
        """Whether ``v`` may or may not share storage with another value depending on the size."""
        return v.group in self.ambiguous or v.group.startswith("amb:")

    # ---- inputs
    def make_inputs(self) -> None:
        rng = self.rng
        theme = rng.choices(["general", "seq", "conv1d", "conv2d"], [6, 2, 1.5, 1.5])[0]
        self.theme = theme
        two = rng.random() < 0.2 or theme == "conv2d" and rng.random() < 0.5
        self.example["S"] = rng.randint(3, 9)
        if two:
            self.example["T"] = rng.randint(3, 9)
        if theme == "conv1d":
            shapes = [[rng.choice([1, 2]), rng.choice([2, 3, 4]), "S"]]
            if two:
                shapes[0][0] = "T"
            kinds = ["float32"]
        elif theme == "conv2d":
            shapes = [[1, rng.choice([1, 2, 3]), "S", "T" if two else rng.randint(4, 6)]]
            if not two and rng.random() < 0.5:
                shapes[0][2], shapes[0][3] = shapes[0][3], "S"
            kinds = ["float32"]
        elif theme == "seq":
            shapes = [[rng.choice([1, 2]), "S", rng.choice([4, 6, 8])]]
            if two:
                shapes[0][0] = "T"
            kinds = ["float32"]
            if rng.random() < 0.5:
                shapes.append(rng.choice([[1, "S", shapes[0][2]], ["S"], [shapes[0][0], "S"]]))
                kinds.append(rng.choice(["float32", "bool", "int64"]))
        else:
            rank = rng.choice([1, 2, 2, 3, 3, 4])
            shape = [rng.randint(1, 5) for _ in range(rank)]
            shape[rng.randrange(rank)] = "S"
            if two:
                free = [i for i, d in enumerate(shape) if d != "S"]
                if free:
                    shape[rng.choice(free)] = "T"
                else:
                    del self.example["T"]
            shapes = [shape]
            kinds = [rng.choices(["float32", "int64", "bool", "int32", "uint8"], [10, 4, 1, 1, 1])[0]]
            for _ in range(rng.choice([0, 1, 1, 2])):
                base = shapes[0]
                drop = rng.randint(0, len(base) - 1)
                other = [d if rng.random() < 0.7 else 1 for d in base[drop:]]
                if rng.random() < 0.15:
                    other = [rng.randint(2, 4), "S"]
                shapes.append(other)
                kinds.append(rng.choices(["float32", "int64", "bool", "int32", "uint8"], [8, 4, 2, 1, 1])[0])
        names = ["x", "y", "z"]
        for k, (shape, dtype) in enumerate(zip(shapes, kinds)):
            spec = self._input_spec(names[k], tuple(shape), dtype)
            self.inputs.append(spec)
            axes = {i: d for i, d in enumerate(shape) if isinstance(d, str)}
            if axes:
                self.dynamic_axes[spec.name] = axes
            minabs = spec.lo if spec.kind == "away0" else (1.0 if spec.kind == "int" and spec.lo > 0 else 0.0)
            lo, hi = (-spec.hi, spec.hi) if spec.kind == "away0" else (spec.lo, spec.hi)
            if dtype == "bool":
                lo, hi = 0, 1
            self.vals.append(Val(spec.name, tuple(shape), dtype, lo, hi, minabs, spec.name))

    def _input_spec(self, name, shape, dtype) -> InputSpec:
        rng = self.rng
        if dtype == "bool":
            return InputSpec(name, shape, dtype, "bool", 0, 1)
        if dtype == "float32":
            kind = rng.choices(["uniform", "away0", "positive"], [6, 2, 2])[0]
            if kind == "away0":
                return InputSpec(name, shape, dtype, "away0", 0.5, 2.0)
            if kind == "positive":
                return InputSpec(name, shape, dtype, "uniform", 0.1, 3.0)
            return InputSpec(name, shape, dtype, "uniform", -2.0, 2.0)
        if dtype == "uint8":
            return InputSpec(name, shape, dtype, "int", 0, 20)
        lo, hi = rng.choice([(-5, 5), (0, 9), (1, 6), (-20, 20)])
        return InputSpec(name, shape, dtype, "int", lo, hi)


# ---------------------------------------------------------------- statement generators
# Each takes the builder and returns True when it emitted something.

def _scalar(b: Builder, dtype: str, nonzero: bool = False):
    rng = b.rng
    if is_float(dtype) or rng.random() < 0.2 and dtype != "bool":
        x = round(rng.uniform(0.5, 3.0), 2) * rng.choice([1, -1])
        return x
    x = rng.randint(1, 4) * rng.choice([1, -1] if dtype != "uint8" else [1])
    return x


def _partner(b: Builder, v: Val, dtypes=("float32", "int64", "int32", "uint8", "bool")) -> Optional[Val]:
    """Another tensor that broadcasts with ``v`` (a live value or a new buffer)."""
    rng = b.rng
    if rng.random() < 0.6:
        u = b.pick(lambda u: u is not v and u.dtype in dtypes and broadcast(v.shape, u.shape) == v.shape)
        if u is not None:
            return u
    if rng.random() < 0.3:
        u = b.pick(lambda u: u is not v and u.dtype in dtypes and broadcast(v.shape, u.shape) is not None
                   and b.numel_at_example(broadcast(v.shape, u.shape)) <= 600)
        if u is not None:
            return u
    keep = rng.randint(0, v.rank)
    shape = [1 if not isinstance(d, int) or rng.random() < 0.3 else d for d in v.shape[v.rank - keep:]]
    dtype = v.dtype if v.dtype in dtypes else dtypes[0]
    if dtype == "bool":
        expr = b.param(shape, "float32") + " > 0"
        return Val(expr, tuple(shape), "bool", 0, 1)
    if is_int(dtype):
        lo, hi = (0, 9) if dtype == "uint8" else (-6, 6)
        return Val(b.param(shape, dtype, lo, hi, "int"), tuple(shape), dtype, lo, hi)
    return Val(b.param(shape), tuple(shape), "float32", -1, 1)


def g_arith(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    rng = b.rng
    op = rng.choice(["+", "-", "*", "+", "*"])
    if rng.random() < 0.35:
        s = _scalar(b, v.dtype)
        dt = promote_scalar(v.dtype, s)
        if dt == "uint8" and (op == "-" or s < 0):
            s = abs(s)
            op = "+"
        lo, hi = _range(op, (v.lo, v.hi), (s, s))
        expr = f"{v.name} {op} {s}" if rng.random() < 0.6 else f"{s} {op} {v.name}"
        if expr.startswith(str(s)):
            lo, hi = _range(op, (s, s), (v.lo, v.hi))
        if max(abs(lo), abs(hi)) > 1e4:
            return False
        b.emit(expr, v.shape, dt, lo, hi, "arith")
        return True
    u = _partner(b, v, ("float32", "int64", "int32", "uint8"))
    dt = promote((v.dtype, v.rank), (u.dtype, u.rank))
    if dt == "uint8" and op == "-":
        op = "+"
    lo, hi = _range(op, (v.lo, v.hi), (u.lo, u.hi))
    if max(abs(lo), abs(hi)) > 1e4:
        v = b.tame(v)
        u = b.tame(u) if u.name.isidentifier() else u
        lo, hi = _range(op, (v.lo, v.hi), (u.lo, u.hi))
    if dt == "uint8" and (lo < 0 or hi > 255):
        return False
    form = rng.random()
    if form < 0.7:
        expr = f"{v.name} {op} {u.name}"
    else:
        fn = {"+": "torch.add", "-": "torch.sub", "*": "torch.mul"}[op]
        expr = f"{fn}({v.name}, {u.name})"
    b.emit(expr, broadcast(v.shape, u.shape), dt, lo, hi, "arith")
    return True


def _range(op, a, c):
    if op == "+":
        return a[0] + c[0], a[1] + c[1]
    if op == "-":
        return a[0] - c[1], a[1] - c[0]
    corners = [x * y for x in a for y in c]
    return min(corners), max(corners)


def _denominator(b: Builder, v: Val, shape) -> tuple:
    """An expression that broadcasts to ``shape`` and stays away from 0, with its bounds."""
    rng = b.rng
    floaty = is_float(v.dtype)
    cand = b.pick(lambda u: u.minabs >= (0.5 if is_float(u.dtype) else 1) and u.dtype == v.dtype
                  and broadcast(shape, u.shape) == tuple(shape))
    if cand is not None and rng.random() < 0.5:
        return cand.name, cand.minabs, cand.bound, cand.rank
    if rng.random() < 0.4:
        s = _scalar(b, v.dtype)
        if not floaty:
            s = rng.choice([2, 3, -2, -3, 5]) if v.dtype != "uint8" else rng.choice([2, 3, 5])
        return repr(s), abs(s), abs(s), 0
    u = b.pick(lambda u: u.dtype == v.dtype and broadcast(shape, u.shape) == tuple(shape))
    if u is None:
        return None
    if floaty:
        u = b.tame(u)
        sign = rng.choice(["", "-"])
        return f"{sign}({u.name}.abs() + 0.5)", 0.5, u.bound + 0.5, u.rank
    u = b.tame(u, 20)
    return f"({u.name}.abs() + 1)", 1, u.bound + 1, u.rank


def g_div(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    v = b.tame(v, 20 if not is_float(v.dtype) else 8)
    den = _denominator(b, v, v.shape)
    if v.minabs >= (0.5 if is_float(v.dtype) else 1) and b.rng.random() < 0.25:
        den = (v.name, v.minabs, v.bound, v.rank)  # x // x, x % x: exact in torch
    if den is None:
        return False
    d, minabs, dbound, drank = den
    rng = b.rng
    floaty = is_float(v.dtype)
    kind = rng.choice(["/", "//", "%", "floor", "trunc", "fmod", "remainder", "true_div"])
    bound = v.bound
    if kind in ("/", "true_div"):
        expr = f"{v.name} / {d}" if kind == "/" else f"torch.div({v.name}, {d})"
        q = bound / minabs
        b.emit(expr, v.shape, "float32", -q, q, "div")
        return True
    if kind in ("//", "floor", "trunc"):
        expr = {"//": f"{v.name} // {d}", "floor": f"torch.div({v.name}, {d}, rounding_mode='floor')",
                "trunc": f"torch.div({v.name}, {d}, rounding_mode='trunc')"}[kind]
        q = bound / minabs + 1
        b.emit(expr, v.shape, v.dtype, -q if v.dtype != "uint8" else 0, q, "div")
        return True
    expr = {"%": f"{v.name} % {d}", "fmod": f"torch.fmod({v.name}, {d})",
            "remainder": f"torch.remainder({v.name}, {d})"}[kind]
    b.emit(expr, v.shape, v.dtype, -dbound if v.dtype != "uint8" else 0, dbound, "div")
    return True


def g_pow(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype in ("float32", "int64", "int32"))
    if v is None:
        return False
    rng = b.rng
    if is_float(v.dtype):
        v = b.tame(v, 3)
        if rng.random() < 0.5:
            e = rng.choice([2, 3, 2.0, 0.5, -1, 1.5, -0.5])
            base = f"({v.name}.abs() + 0.1)" if (isinstance(e, float) or e < 0) else v.name
            expr = rng.choice([f"{base} ** {e}", f"torch.pow({base}, {e})"])
            hi = 3.1 ** abs(e) if e > 0 else 10 ** abs(e)
            b.emit(expr, v.shape, "float32", -hi if base == v.name else 0, hi, "pow")
            return True
        u = _partner(b, v, ("float32",))
        u = b.tame(u, 2) if u.name.isidentifier() else u
        b.emit(f"({v.name}.abs() + 0.5) ** {u.name}", broadcast(v.shape, u.shape), "float32", 0, 40, "pow")
        return True
    v = b.tame(v, 5)
    if rng.random() < 0.5:
        e = rng.choice([0, 1, 2, 3])
        b.emit(f"{v.name} ** {e}", v.shape, v.dtype, -(5 ** e), 5 ** e, "pow")
        return True
    e = b.param(v.shape[-1:] if isinstance(v.shape[-1:][0] if v.shape else 1, int) else (1,), v.dtype, -2, 3, "int") \
        if v.rank else None
    if e is None:
        return False
    b.emit(f"torch.where({v.name} == 0, 1, {v.name}) ** {e}", v.shape, v.dtype, -125, 125, "pow")
    return True


def g_compare(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    rng = b.rng
    op = rng.choice(["<", "<=", ">", ">=", "==", "!="] if not is_float(v.dtype) else ["<", "<=", ">", ">="])
    if rng.random() < 0.4:
        s = rng.randint(-2, 4) if not is_float(v.dtype) else round(rng.uniform(-1, 1), 2)
        expr = f"{v.name} {op} {s}"
        shape = v.shape
    else:
        u = _partner(b, v, (v.dtype,) if not is_float(v.dtype) else ("float32", "int64"))
        expr = f"{v.name} {op} {u.name}"
        if rng.random() < 0.3:
            fn = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[op]
            expr = f"torch.{fn}({v.name}, {u.name})"
        shape = broadcast(v.shape, u.shape)
    b.emit(expr, shape, "bool", 0, 1, "compare")
    return True


def g_logical(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.dtype == "bool") or b.pick()
    if v.dtype != "bool":
        v = b.emit(rng.choice([f"{v.name} > 0", f"{v.name}.bool()", f"{v.name} != 0"]), v.shape, "bool", 0, 1, "compare")
    kind = rng.choice(["&", "|", "^", "~", "and", "or", "xor", "not"])
    if kind == "~":
        b.emit(f"~{v.name}", v.shape, "bool", 0, 1, "logical")
        return True
    if kind == "not":
        b.emit(f"torch.logical_not({v.name})", v.shape, "bool", 0, 1, "logical")
        return True
    u = _partner(b, v, ("bool",) if kind in "&|^" else ("bool", "float32", "int64"))
    expr = f"{v.name} {kind} {u.name}" if kind in "&|^" else f"torch.logical_{kind}({v.name}, {u.name})"
    b.emit(expr, broadcast(v.shape, u.shape), "bool", 0, 1, "logical")
    return True


def g_bitwise(b: Builder) -> bool:
    v = b.pick(lambda v: is_int(v.dtype))
    if v is None:
        u = b.pick(lambda v: is_float(v.dtype))
        if u is None:
            return False
        u = b.tame(u, 8)
        v = b.emit(f"({u.name} * 3).long()", u.shape, "int64", -24, 24, "cast")
    rng = b.rng
    kind = rng.choice(["&", "|", "^", "~", "<<", ">>", "bitwise_and", "bitwise_not"])
    if kind in ("~", "bitwise_not"):
        expr = f"~{v.name}" if kind == "~" else f"torch.bitwise_not({v.name})"
        lo, hi = (0, 255) if v.dtype == "uint8" else (-v.hi - 1, -v.lo - 1)
        b.emit(expr, v.shape, v.dtype, lo, hi, "bitwise")
        return True
    if kind in ("<<", ">>"):
        v = b.tame(v, 100)
        s = rng.randint(0, 3)
        lo, hi = (v.lo * 8, v.hi * 8) if kind == "<<" else (v.lo, v.hi)
        if v.dtype == "uint8" and kind == "<<":
            return False
        b.emit(f"{v.name} {kind} {s}", v.shape, v.dtype, lo, hi, "bitwise")
        return True
    if rng.random() < 0.4:
        s = rng.choice([1, 3, 6, 7, 12])
        op = kind if len(kind) == 1 else "&"
        b.emit(f"{v.name} {op} {s}", v.shape, v.dtype, min(v.lo, -16), max(v.hi, 16), "bitwise")
        return True
    u = _partner(b, v, (v.dtype,))
    expr = f"torch.bitwise_and({v.name}, {u.name})" if kind == "bitwise_and" else f"{v.name} {kind} {u.name}"
    lo = min(v.lo, u.lo, 0) * 2 - 1
    hi = max(v.hi, u.hi, 0) * 2 + 1
    b.emit(expr, broadcast(v.shape, u.shape), promote((v.dtype, v.rank), (u.dtype, u.rank)), lo, hi, "bitwise")
    return True


def g_where_clamp(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    kind = rng.choice(["where", "where_scalar", "clamp", "clamp_t", "maximum", "minimum", "max2", "clamp_min"])
    if kind.startswith("where"):
        c = b.pick(lambda c: c.dtype == "bool" and broadcast(v.shape, c.shape) is not None
                   and b.numel_at_example(broadcast(v.shape, c.shape)) <= 600)
        if c is None:
            c = b.emit(f"{v.name} > {rng.choice([0, 1]) if not is_float(v.dtype) else 0.3}", v.shape, "bool", 0, 1, "compare")
        shape = broadcast(v.shape, c.shape)
        if kind == "where_scalar":
            s = _scalar(b, v.dtype)
            if v.dtype == "uint8":
                s = abs(int(s))
            dt = promote_scalar(v.dtype, s)
            b.emit(f"torch.where({c.name}, {v.name}, {s})", shape, dt, min(v.lo, s), max(v.hi, s), "where")
            return True
        u = _partner(b, v, (v.dtype,))
        shape = broadcast(shape, u.shape)
        if shape is None:
            return False
        b.emit(f"torch.where({c.name}, {u.name}, {v.name})", shape, promote((v.dtype, v.rank), (u.dtype, u.rank)),
               min(v.lo, u.lo), max(v.hi, u.hi), "where")
        return True
    if kind == "clamp":
        lo = rng.choice([-1, 0, 1]) if not is_float(v.dtype) else round(rng.uniform(-1.5, 0), 2)
        hi = lo + (rng.randint(1, 4) if not is_float(v.dtype) else round(rng.uniform(0.2, 2), 2))
        if v.dtype == "uint8":
            lo, hi = abs(lo), abs(lo) + 3
        expr = rng.choice([f"{v.name}.clamp({lo}, {hi})", f"torch.clamp({v.name}, min={lo}, max={hi})",
                           f"{v.name}.clip({lo}, {hi})"])
        b.emit(expr, v.shape, v.dtype, lo, hi, "clamp")
        return True
    if kind == "clamp_min":
        s = 0 if v.dtype != "float32" else 0.1
        b.emit(rng.choice([f"{v.name}.clamp_min({s})", f"{v.name}.clamp(max={s})"]), v.shape, v.dtype,
               min(v.lo, s), max(v.hi, s), "clamp")
        return True
    u = _partner(b, v, (v.dtype,))
    shape = broadcast(v.shape, u.shape)
    dt = promote((v.dtype, v.rank), (u.dtype, u.rank))
    if kind == "clamp_t":
        b.emit(f"torch.clamp({v.name}, min={u.name})", shape, dt, min(v.lo, u.lo), max(v.hi, u.hi), "clamp")
        return True
    fn = {"maximum": "torch.maximum", "minimum": "torch.minimum", "max2": "torch.max"}[kind]
    b.emit(f"{fn}({v.name}, {u.name})", shape, dt, min(v.lo, u.lo), max(v.hi, u.hi), "minmax")
    return True


_UNARY_ANY = [("abs", "{x}.abs()", "abs"), ("neg", "-{x}", "neg"), ("neg2", "torch.neg({x})", "neg"),
              ("sign", "torch.sign({x})", "sign"), ("square", "torch.square({x})", "sq")]
_UNARY_FLOAT = [("exp", "torch.exp({x})", "exp"), ("sin", "torch.sin({x})", "unit"), ("cos", "{x}.cos()", "unit"),
                ("tanh", "torch.tanh({x})", "unit"), ("sigmoid", "torch.sigmoid({x})", "unit01"),
                ("relu", "F.relu({x})", "relu"), ("relu2", "{x}.relu()", "relu"), ("gelu", "F.gelu({x})", "relu"),
                ("erf", "torch.erf({x})", "unit"), ("silu", "F.silu({x})", "relu"), ("softplus", "F.softplus({x})", "relu"),
                ("leaky", "F.leaky_relu({x}, 0.1)", "same"), ("elu", "F.elu({x})", "same"),
                ("hardtanh", "F.hardtanh({x})", "unit"), ("floor", "{x}.floor()", "same"), ("ceil", "torch.ceil({x})", "same"),
                ("round", "{x}.round()", "same"), ("trunc", "torch.trunc({x})", "same"),
                ("log", "torch.log({x}.abs() + 0.1)", "log"), ("sqrt", "torch.sqrt({x}.abs())", "sqrt"),
                ("rsqrt", "({x}.abs() + 0.2).rsqrt()", "rsqrt"), ("recip", "torch.reciprocal({x}.abs() + 0.5)", "recip"),
                ("log1p", "torch.log1p({x}.abs())", "log"), ("expm1", "torch.expm1({x})", "exp"),
                ("atan", "torch.atan({x})", "unit2"), ("frac", "torch.frac({x})", "unit")]
_CASTS = [("float", "{x}.float()", "float32"), ("long", "{x}.long()", "int64"), ("int", "{x}.int()", "int32"),
          ("bool", "{x}.bool()", "bool"), ("to_f", "{x}.to(torch.float32)", "float32"),
          ("u8", "{x}.to(torch.uint8)", "uint8")]


def g_unary(b: Builder) -> bool:
    rng = b.rng
    v = b.pick()
    if rng.random() < 0.2:
        name, tmpl, out = rng.choice(_CASTS)
        if out == "uint8" and (v.lo < 0 or v.hi > 255 or is_float(v.dtype)):
            return False
        if out in INTS and is_float(v.dtype):
            v = b.tame(v, 20)
            tmpl = tmpl.replace("{x}", "({x} * 2)")
            lo, hi = v.lo * 2, v.hi * 2
        else:
            lo, hi = (v.lo, v.hi) if out != "bool" else (0, 1)
        if out == "float32" and v.dtype == "bool":
            lo, hi = 0, 1
        b.emit(tmpl.format(x=v.name), v.shape, out, lo, hi, "cast")
        return True
    if is_float(v.dtype) and rng.random() < 0.75:
        name, tmpl, kind = rng.choice(_UNARY_FLOAT)
        if kind == "exp":
            v = b.tame(v, 3)
        lo, hi = {"unit": (-1, 1), "unit01": (0, 1), "unit2": (-1.6, 1.6), "relu": (-0.3, max(v.hi, 0) + 1),
                  "same": (v.lo - 1, v.hi + 1), "exp": (-1, 21), "log": (-2.4, 6), "sqrt": (0, v.bound ** 0.5 + 0.1),
                  "rsqrt": (0, 2.3), "recip": (0, 2)}[kind]
        b.emit(tmpl.format(x=v.name), v.shape, "float32", lo, hi, "unary")
        return True
    if v.dtype == "bool":
        b.emit(f"~{v.name}", v.shape, "bool", 0, 1, "logical")
        return True
    name, tmpl, kind = rng.choice(_UNARY_ANY)
    if kind == "sq":
        v = b.tame(v, 50)
    B = v.bound
    lo, hi = {"abs": (0, B), "neg": (-v.hi, -v.lo), "sign": (-1, 1), "sq": (0, B * B)}[kind]
    if v.dtype == "uint8" and kind in ("neg", "sign", "sq"):
        lo, hi = 0, 255
        if kind == "sq":
            return False
    if v.dtype == "uint8" and kind == "abs":
        return False  # torch refuses abs on uint8? it works; keep ranges simple
    b.emit(tmpl.format(x=v.name), v.shape, v.dtype, lo, hi, "unary")
    return True


def g_reduce(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    kind = rng.choice(["sum", "mean", "amax", "amin", "max_dim", "min_dim", "argmax", "argmin", "prod", "any",
                       "all", "cumsum", "norm", "sum_all", "max_all", "logsumexp", "var", "count"])
    axis, spelled = b.rdim(v.rank)
    keep = rng.random() < 0.4
    kd = ", keepdim=True" if keep else ""
    shape = list(v.shape)
    if keep:
        shape[axis] = 1
    else:
        del shape[axis]
    n = d_eval(v.shape[axis], {k: 20 for k in b.example})
    fl = is_float(v.dtype)
    B = v.bound
    if kind == "sum" or kind == "count":
        if kind == "count":
            expr = f"({v.name} > 0).sum({spelled}{kd})" if v.dtype != "bool" else f"{v.name}.sum({spelled}{kd})"
            b.emit(expr, shape, "int64", 0, n, "reduce")
            return True
        if rng.random() < 0.3 and v.rank >= 2:
            other = (axis + 1) % v.rank
            shape2 = list(v.shape)
            for a in sorted((axis, other), reverse=True):
                if keep:
                    shape2[a] = 1
                else:
                    del shape2[a]
            dt = "int64" if not fl else "float32"
            b.emit(f"{v.name}.sum(({spelled}, {other}){kd})", shape2, dt, -B * n * 5, B * n * 5, "reduce")
            return True
        dt = "int64" if not fl else "float32"
        b.emit(rng.choice([f"{v.name}.sum({spelled}{kd})", f"torch.sum({v.name}, dim={spelled}{kd})"]),
               shape, dt, -B * n, B * n, "reduce")
        return True
    if kind == "mean":
        if not fl:
            return False
        b.emit(f"{v.name}.mean({spelled}{kd})", shape, "float32", v.lo, v.hi, "reduce")
        return True
    if kind in ("amax", "amin"):
        if v.dtype == "bool":
            return False
        b.emit(f"{v.name}.{kind}({spelled}{kd})", shape, v.dtype, v.lo, v.hi, "reduce")
        return True
    if kind in ("max_dim", "min_dim"):
        if v.dtype == "bool":
            return False
        fn = kind[:3]
        if rng.random() < 0.5:
            b.emit(f"{v.name}.{fn}({spelled}{kd}).values", shape, v.dtype, v.lo, v.hi, "reduce")
        else:
            b.emit(f"torch.{fn}({v.name}, {spelled}{kd})[1]", shape, "int64", 0, n, "reduce")
        return True
    if kind in ("argmax", "argmin"):
        if v.dtype == "bool":
            return False
        if rng.random() < 0.2:
            b.emit(f"{v.name}.{kind}()", (), "int64", 0, 10 ** 4, "reduce")
        else:
            b.emit(f"{v.name}.{kind}({spelled}{kd})", shape, "int64", 0, n, "reduce")
        return True
    if kind == "prod":
        if v.dtype in ("bool", "uint8"):
            return False
        v = b.tame(v, 1.5 if fl else 2)
        lim = (1.5 if fl else 2) ** n
        b.emit(f"{v.name}.prod({spelled}{kd})", shape, "int64" if not fl else "float32", -lim, lim, "reduce")
        return True
    if kind in ("any", "all"):
        b.emit(f"{v.name}.{kind}({spelled}{kd})" if rng.random() < 0.7 else f"torch.{kind}({v.name})",
               shape if True else (), "bool", 0, 1, "reduce")
        if b.stmts[-1].lines[0].endswith(f"torch.{kind}({v.name})"):
            b.vals[-1].shape = ()
        return True
    if kind == "cumsum":
        dt = "int64" if not fl else "float32"
        b.emit(f"{v.name}.cumsum({spelled})" if rng.random() < 0.6 else f"torch.cumsum({v.name}, dim={spelled})",
               v.shape, dt, -B * n, B * n, "reduce")
        return True
    if kind == "norm":
        if not fl:
            return False
        b.emit(rng.choice([f"{v.name}.norm(dim={spelled}{kd})", f"torch.linalg.vector_norm({v.name}, dim={spelled}{kd})",
                           f"{v.name}.norm(p=1, dim={spelled}{kd})"]), shape, "float32", 0, B * n, "reduce")
        return True
    if kind == "sum_all":
        dt = "int64" if not fl else "float32"
        b.emit(f"{v.name}.sum()", (), dt, -B * 10 ** 4, B * 10 ** 4, "reduce")
        return True
    if kind == "max_all":
        if v.dtype == "bool":
            return False
        b.emit(f"{v.name}.max()" if rng.random() < 0.5 else f"{v.name}.min()", (), v.dtype, v.lo, v.hi, "reduce")
        return True
    if kind == "logsumexp":
        if not fl:
            return False
        v = b.tame(v, 8)
        b.emit(f"torch.logsumexp({v.name}, {spelled}{kd})", shape, "float32", -8, 12, "reduce")
        return True
    if kind == "var":
        if not fl:
            return False
        b.emit(f"{v.name}.var({spelled}, unbiased=False{kd})" if rng.random() < 0.5
               else f"{v.name}.std({spelled}, correction=0{kd})", shape, "float32", 0, B * B, "reduce")
        return True
    return False


# ---- shape ops

def g_reshape(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    shape = list(v.shape)
    kind = rng.choice(["flatten_all", "merge", "split", "flatten", "unsqueeze_view"])
    meth = "view" if v.contiguous and rng.random() < 0.4 else "reshape"
    if kind == "flatten_all":
        if len(v.dyn_axes()) > 1:
            return False
        new = (_prod(shape),)
        expr = f"{v.name}.{meth}(-1)" if rng.random() < 0.6 else f"{v.name}.flatten()"
    elif kind in ("merge", "flatten"):
        if v.rank < 2:
            return False
        a = rng.randrange(v.rank - 1)
        if not isinstance(shape[a], int) and not isinstance(shape[a + 1], int):
            return False
        merged = _prod(shape[a:a + 2])
        new = tuple(shape[:a]) + (merged,) + tuple(shape[a + 2:])
        if kind == "flatten":
            expr = f"{v.name}.flatten({a}, {a + 1})"
        else:
            parts = [b.dim_code(v, i) for i in range(a)] + ["-1"] + [b.dim_code(v, i) for i in range(a + 2, v.rank)]
            if sum(1 for i, d in enumerate(new) if not isinstance(d, int)) > 1:
                pass
            expr = f"{v.name}.{meth}({', '.join(parts)})"
    elif kind == "split":
        cands = [i for i in v.static_axes() if shape[i] in (4, 6, 8, 9)]
        if not cands:
            return False
        a = rng.choice(cands)
        f = 2 if shape[a] % 2 == 0 else 3
        new = tuple(shape[:a]) + (f, shape[a] // f) + tuple(shape[a + 1:])
        parts = [str(d) if isinstance(d, int) else None for d in new]
        dyn = [i for i, p in enumerate(parts) if p is None]
        if len(dyn) > 1:
            return False
        for i in dyn:
            parts[i] = "-1"
        expr = f"{v.name}.{meth}({', '.join(parts)})"
    else:
        a = rng.randint(0, v.rank)
        new = tuple(shape[:a]) + (1,) + tuple(shape[a:])
        parts = [b.dim_code(v, i) for i in range(v.rank)]
        parts.insert(a, "1")
        expr = f"{v.name}.{meth}({', '.join(parts)})"
    if v.contiguous:
        group = v.group
    else:
        # a reshape of a strided tensor copies, but aliases at the sizes where it happens to
        # be contiguous: no in-place update may touch either side afterwards
        b.ambiguous.add(v.group)
        group = "amb:" + v.group
    b.emit(expr, new, v.dtype, v.lo, v.hi, "reshape", minabs=v.minabs, group=group, contiguous=True)
    return True


def _prod(dims) -> Dim:
    out: Dim = 1
    dyn = None
    for d in dims:
        if isinstance(d, int):
            out *= d
        else:
            dyn = d if dyn is None else f"({dyn} * {d})"
    return out if dyn is None else d_mul(dyn, out)


def g_permute(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 2)
    if v is None:
        return False
    kind = rng.choice(["permute", "transpose", "t", "movedim", "mT"])
    if kind == "permute":
        perm = list(range(v.rank))
        rng.shuffle(perm)
        expr = f"{v.name}.permute({', '.join(map(str, perm))})"
    elif kind == "t" and v.rank == 2:
        perm = [1, 0]
        expr = f"{v.name}.t()"
    elif kind == "movedim":
        a, c = rng.randrange(v.rank), rng.randrange(v.rank)
        perm = list(range(v.rank))
        perm.insert(c, perm.pop(a))
        expr = f"{v.name}.movedim({a}, {c})"
    else:
        a, c = rng.sample(range(v.rank), 2) if kind != "mT" else (v.rank - 2, v.rank - 1)
        perm = list(range(v.rank))
        perm[a], perm[c] = perm[c], perm[a]
        expr = f"{v.name}.transpose({a}, {c})" if kind != "mT" else f"{v.name}.mT"
    b.emit(expr, tuple(v.shape[p] for p in perm), v.dtype, v.lo, v.hi, "permute", minabs=v.minabs, group=v.group,
           contiguous=perm == sorted(perm), expanded=v.expanded)
    return True


def g_unsqueeze(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank <= 4)
    if v is None:
        return False
    ones = [i for i, d in enumerate(v.shape) if d == 1]
    if ones and rng.random() < 0.5:
        a = rng.choice(ones)
        shape = v.shape[:a] + v.shape[a + 1:]
        expr = f"{v.name}.squeeze({a})" if rng.random() < 0.7 else f"torch.squeeze({v.name}, {a - v.rank})"
    elif rng.random() < 0.2:
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (1,) + v.shape[a:]
        idx = ", ".join([":"] * a + ["None"])
        expr = f"{v.name}[{idx}]"
    else:
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (1,) + v.shape[a:]
        expr = f"{v.name}.unsqueeze({a})" if rng.random() < 0.7 else f"{v.name}.unsqueeze({a - v.rank - 1})"
    b.emit(expr, shape, v.dtype, v.lo, v.hi, "unsqueeze", minabs=v.minabs, group=v.group, contiguous=v.contiguous,
           expanded=v.expanded)
    return True


def g_expand_repeat(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and b.numel_at_example(v.shape) <= 200)
    if v is None:
        return False
    kind = rng.choice(["expand", "repeat", "expand_dyn", "tile", "repeat_interleave"])
    if kind in ("expand", "expand_dyn"):
        ones = [i for i, d in enumerate(v.shape) if d == 1]
        if not ones:
            shape = (rng.randint(2, 3),) + v.shape
            expr = f"{v.name}.expand({shape[0]}, {', '.join(['-1'] * v.rank)})"
        else:
            a = rng.choice(ones)
            src = b.pick(lambda u: u.rank > 0 and any(not isinstance(d, int) for d in u.shape)) if kind == "expand_dyn" else None
            shape = list(v.shape)
            parts = ["-1"] * v.rank
            if src is not None:
                j = rng.choice(src.dyn_axes())
                shape[a] = src.shape[j]
                parts[a] = f"{src.name}.shape[{j}]"
            else:
                shape[a] = rng.randint(2, 4)
                parts[a] = str(shape[a])
            expr = f"{v.name}.expand({', '.join(parts)})"
        b.emit(expr, shape, v.dtype, v.lo, v.hi, "expand", group=v.group, contiguous=False, expanded=True)
        return True
    if kind == "repeat_interleave":
        a, spelled = b.rdim(v.rank)
        r = rng.randint(2, 3)
        shape = list(v.shape)
        shape[a] = d_mul(shape[a], r)
        b.emit(f"{v.name}.repeat_interleave({r}, dim={spelled})", shape, v.dtype, v.lo, v.hi, "repeat")
        return True
    reps = [rng.choice([1, 1, 2, 3]) for _ in range(v.rank)]
    extra = rng.random() < 0.3
    shape = [d_mul(d, r) for d, r in zip(v.shape, reps)]
    if extra:
        reps = [2] + reps
        shape = [2] + shape
    fn = f"{v.name}.repeat({', '.join(map(str, reps))})" if kind == "repeat" else \
        f"torch.tile({v.name}, ({', '.join(map(str, reps))},))"
    b.emit(fn, shape, v.dtype, v.lo, v.hi, "repeat")
    return True


def g_cat_stack(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and b.numel_at_example(v.shape) <= 300)
    if v is None:
        return False
    kind = rng.choice(["cat", "cat", "stack", "cat_slice"])
    a, spelled = b.rdim(v.rank)
    others = [u for u in b.vals if u is not v and u.dtype == v.dtype and u.rank == v.rank
              and all(x == y for i, (x, y) in enumerate(zip(u.shape, v.shape)) if i != a or kind == "stack")]
    parts = [v]
    if others and rng.random() < 0.6:
        parts.append(rng.choice(others))
    else:
        parts.append(v)
    if rng.random() < 0.3:
        parts.append(rng.choice(parts))
    if kind == "cat_slice":
        n = v.shape[a]
        if isinstance(n, int) and n < 2:
            return False
        expr = f"torch.cat([{v.name}, {v.name}.narrow({spelled}, 0, 1)], dim={spelled})"
        shape = list(v.shape)
        shape[a] = d_add(n, 1)
        b.emit(expr, shape, v.dtype, v.lo, v.hi, "cat")
        return True
    names = ", ".join(p.name for p in parts)
    lo, hi = min(p.lo for p in parts), max(p.hi for p in parts)
    if kind == "stack":
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (len(parts),) + v.shape[a:]
        b.emit(f"torch.stack([{names}], {a})" if rng.random() < 0.5 else f"torch.stack(({names}), dim={a})",
               shape, v.dtype, lo, hi, "stack")
        return True
    shape = list(v.shape)
    total: Dim = 0
    for p in parts:
        total = d_add(total, p.shape[a])
    shape[a] = total
    b.emit(f"torch.cat([{names}], {spelled})" if rng.random() < 0.6 else f"torch.cat(({names}), dim={spelled})",
           shape, v.dtype, lo, hi, "cat")
    return True


def g_split(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    a, spelled = b.rdim(v.rank)
    n = v.shape[a]
    kind = rng.choice(["split", "chunk", "unbind", "split_sizes", "split_dyn"])
    shape = list(v.shape)
    if kind == "unbind":
        if not isinstance(n, int) or n > 4:
            return False
        k = rng.randrange(n)
        del shape[a]
        b.emit(f"{v.name}.unbind({spelled})[{k}]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    if kind == "chunk":
        c = rng.choice([2, 3])
        if not isinstance(n, int):
            shape[a] = d_ceildiv(n, c)
            b.emit(f"{v.name}.chunk({c}, {spelled})[0]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
                   contiguous=False, expanded=v.expanded)
            return True
        if n < c or n % c:
            return False
        shape[a] = n // c
        k = rng.randrange(c)
        b.emit(f"torch.chunk({v.name}, {c}, dim={spelled})[{k}]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    if kind == "split_sizes" or kind == "split_dyn":
        if isinstance(n, int):
            if n < 2:
                return False
            first = rng.randint(1, n - 1)
            sizes = f"[{first}, {n - first}]"
            rest = n - first
        else:
            first = rng.randint(1, 2)
            sizes = f"[{first}, {v.name}.shape[{a}] - {first}]"
            rest = d_add(n, -first)
        k = rng.randrange(2)
        shape[a] = first if k == 0 else rest
        name = b.fresh("p")
        lines = [f"{name}_a, {name}_b = {v.name}.split({sizes}, dim={spelled})"]
        val = Val(f"{name}_{'ab'[k]}", tuple(shape), v.dtype, v.lo, v.hi, v.minabs, v.group, False, v.expanded)
        b.stmts.append(Stmt(lines, "split", (val.name,)))
        b.families.add("split")
        b.vals.append(val)
        return True
    c = rng.choice([1, 2, 3])
    shape[a] = c if isinstance(n, int) and n >= c or not isinstance(n, int) else n
    if isinstance(n, int) and n < c:
        return False
    b.emit(f"{v.name}.split({c}, {spelled})[0]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
           contiguous=False, expanded=v.expanded)
    if not isinstance(n, int):
        b.min_dims.append((n, c))
    return True


def g_flip_roll(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    a, spelled = b.rdim(v.rank)
    kind = rng.choice(["flip", "flip2", "roll", "roll_flat", "narrow", "fliplr"])
    if kind == "flip":
        b.emit(f"{v.name}.flip({spelled})" if rng.random() < 0.5 else f"torch.flip({v.name}, [{spelled}])",
               v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    elif kind == "flip2" and v.rank >= 2:
        b.emit(f"{v.name}.flip(0, {v.rank - 1})", v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    elif kind == "roll":
        s = rng.choice([1, 2, -1, 3])
        b.emit(f"torch.roll({v.name}, {s}, {spelled})" if rng.random() < 0.5 else f"{v.name}.roll({s}, dims={spelled})",
               v.shape, v.dtype, v.lo, v.hi, "roll", minabs=v.minabs)
    elif kind == "roll_flat":
        b.emit(f"{v.name}.roll(1)", v.shape, v.dtype, v.lo, v.hi, "roll", minabs=v.minabs)
    elif kind == "narrow":
        n = v.shape[a]
        start = rng.randint(0, 2)
        length = 1 if isinstance(n, int) and n <= start + 1 else rng.randint(1, 2)
        if isinstance(n, int) and n < start + length:
            return False
        shape = list(v.shape)
        shape[a] = length
        b.emit(f"{v.name}.narrow({spelled}, {start}, {length})", shape, v.dtype, v.lo, v.hi, "narrow",
               minabs=v.minabs, group=v.group, contiguous=False, expanded=v.expanded)
        if not isinstance(n, int):
            b.min_dims.append((n, start + length))
    else:
        if v.rank < 2:
            return False
        b.emit(f"torch.fliplr({v.name})" if rng.random() < 0.5 else f"torch.flipud({v.name})",
               v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    return True


# ---- indexing

def _index(b: Builder, v: Val) -> Optional[tuple]:
    """A random basic index of ``v``: (text, result shape, needed minimum sizes)."""
    rng = b.rng
    parts, shape, needs = [], [], []
    used_ellipsis = False
    axes = list(range(v.rank))
    k = 0
    while k < len(axes):
        d = v.shape[k]
        r = rng.random()
        if not used_ellipsis and r < 0.08 and k < v.rank - 1:
            rest = rng.randint(1, v.rank - k - 1)
            parts.append("...")
            shape += list(v.shape[k:k + rest])
            k += rest
            used_ellipsis = True
            continue
        if r < 0.35:
            parts.append(":")
            shape.append(d)
        elif r < 0.5:
            i = rng.choice([0, 1, -1])
            parts.append(str(i))
            needs.append((d, 2 if i == 1 else 1))
            if isinstance(d, int) and d < 2 and i == 1:
                return None
        elif r < 0.65:
            s = rng.randint(1, 2)
            parts.append(f"{s}:")
            if isinstance(d, int) and d <= s:
                return None
            needs.append((d, s + 1))
            shape.append(d_add(d, -s))
        elif r < 0.75:
            e = rng.randint(1, 3)
            if isinstance(d, int):
                parts.append(f":{e}")
                shape.append(min(d, e))
            else:
                parts.append(f":{e}")
                needs.append((d, e))
                shape.append(e)
        elif r < 0.85:
            st = rng.randint(2, 3)
            parts.append(f"::{st}")
            shape.append(d_ceildiv(d, st))
        elif r < 0.92:
            s = rng.randint(1, 2)
            parts.append(f":-{s}")
            if isinstance(d, int) and d <= s:
                return None
            needs.append((d, s + 1))
            shape.append(d_add(d, -s))
        else:
            s = rng.randint(1, 2)
            parts.append(f"-{s}:")
            if isinstance(d, int) and d < s:
                return None
            needs.append((d, s))
            shape.append(s)
        if rng.random() < 0.08:
            parts.append("None")
            shape.append(1)
        k += 1
    while parts and parts[-1] == ":" and rng.random() < 0.7:
        parts.pop()
    if not parts:
        parts = ["..."]
    return ", ".join(parts), tuple(shape), needs


def g_getitem(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    kind = rng.choices(["basic", "tensor_idx", "index_select", "gather", "mask", "list_idx"], [6, 2, 1, 1, 1, 1])[0]
    if kind == "basic":
        got = _index(b, v)
        if got is None:
            return False
        idx, shape, needs = got
        b.min_dims += needs
        b.emit(f"{v.name}[{idx}]", shape, v.dtype, v.lo, v.hi, "getitem", minabs=v.minabs, group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    a, spelled = b.rdim(v.rank)
    n = v.shape[a]
    if kind == "list_idx":
        if not isinstance(n, int):
            idx = [0, rng.choice([0, 1])]
            b.min_dims.append((n, 2))
        else:
            idx = [rng.randrange(n) for _ in range(rng.randint(1, 3))]
        shape = list(v.shape)
        shape[a] = len(idx)
        pre = ", ".join([":"] * a + [repr(idx)])
        b.emit(f"{v.name}[{pre}]", shape, v.dtype, v.lo, v.hi, "index")
        return True
    if kind == "mask":
        m = b.pick(lambda m: m.dtype == "bool" and m.shape == v.shape)
        if m is None:
            m = b.emit(f"{v.name} > {0 if v.dtype != 'float32' else 0.2}", v.shape, "bool", 0, 1, "compare")
        if v.dtype == "bool":
            return False
        red = rng.choice(["sum", "amax", "none"])
        if red == "none":
            b.emit(f"{v.name}[{m.name}]", (1,), v.dtype, v.lo, v.hi, "mask_index")
            b.want_outputs.append(b.vals.pop().name)  # data-dependent length: only as an output
            return True
        if red == "amax":
            b.emit(f"torch.where({m.name}, {v.name}, {v.lo}).amax()", (), v.dtype, v.lo, v.hi, "mask_index")
            return True
        b.emit(f"{v.name}[{m.name}].sum()", (), "float32" if is_float(v.dtype) else "int64", -1e4, 1e4, "mask_index")
        return True
    # index tensors from data, made valid at every size with % n
    src = b.pick(lambda u: is_int(u.dtype) and u.rank == 1 and b.numel_at_example(u.shape) <= 12)
    if src is None:
        length = rng.randint(1, 4)
        idx_expr, ishape = b.param((length,), "int64", 0, 20, "int"), (length,)
    else:
        idx_expr, ishape = src.name, src.shape
    nd = b.dim_code(v, a)
    idx = f"({idx_expr}.long().abs() % {nd})"
    if kind == "index_select":
        shape = list(v.shape)
        shape[a] = ishape[0]
        b.emit(f"{v.name}.index_select({spelled}, {idx})", shape, v.dtype, v.lo, v.hi, "index")
        return True
    if kind == "gather":
        if v.rank != 1:
            return False
        b.emit(f"torch.gather({v.name}, 0, {idx})", ishape, v.dtype, v.lo, v.hi, "index")
        return True
    shape = list(v.shape)
    shape[a:a + 1] = list(ishape)
    pre = ", ".join([":"] * a + [idx])
    b.emit(f"{v.name}[{pre}]", shape, v.dtype, v.lo, v.hi, "index")
    return True


def g_setitem(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and not v.expanded and v.group != "masked" and not b.is_ambiguous(v))
    if v is None:
        return False
    kind = rng.choices(["basic", "mask", "tensor_idx", "value_tensor", "clone_first"], [4, 2, 1, 2, 1])[0]
    if kind == "clone_first":
        v = b.emit(f"{v.name}.clone()", v.shape, v.dtype, v.lo, v.hi, "clone", minabs=v.minabs)
        kind = "basic"
    if kind == "mask":
        m = b.pick(lambda m: m.dtype == "bool" and broadcast(v.shape, m.shape) == v.shape and m.rank == v.rank)
        mexpr = m.name if m is not None else f"{v.name} > {0 if v.dtype != 'float32' else 0.5}"
        s = _scalar(b, v.dtype)
        if v.dtype == "bool":
            s = rng.choice([True, False])
        elif not is_float(v.dtype):
            s = abs(int(s))
        line = f"{v.name}[{mexpr}] = {s}"
        if rng.random() < 0.3:
            line = f"{v.name}.masked_fill_({mexpr}, {s})"
        _mutate(b, v, line, (0, 1) if v.dtype == "bool" else (min(v.lo, s), max(v.hi, s)), "setitem")
        return True
    if kind == "tensor_idx":
        a = 0
        n = v.shape[0]
        idx = f"torch.tensor([0, {rng.choice([0, -1])}])"
        s = _scalar(b, v.dtype) if v.dtype != "bool" else True
        if not is_float(v.dtype) and v.dtype != "bool":
            s = abs(int(s))
        _mutate(b, v, f"{v.name}[{idx}] = {s}", (min(v.lo, s), max(v.hi, s)), "setitem")
        return True
    got = _index(b, v)
    if got is None:
        return False
    idx, shape, needs = got
    if "None" in idx:
        return False
    b.min_dims += needs
    if kind == "value_tensor" and v.dtype != "bool":
        u = b.pick(lambda u: u.dtype == v.dtype and broadcast(shape, u.shape) == shape and u.group != v.group)
        if u is not None:
            _mutate(b, v, f"{v.name}[{idx}] = {u.name}", (min(v.lo, u.lo), max(v.hi, u.hi)), "setitem")
            return True
        val = f"{v.name}[{idx}] * 2" if v.dtype != "uint8" else f"{v.name}[{idx}] + 1"
        _mutate(b, v, f"{v.name}[{idx}] = {val}", (min(v.lo * 2, v.lo), max(v.hi * 2 + 1, v.hi)), "setitem")
        return True
    s = _scalar(b, v.dtype) if v.dtype != "bool" else rng.choice([True, False])
    if not is_float(v.dtype) and v.dtype != "bool":
        s = abs(int(s))
    _mutate(b, v, f"{v.name}[{idx}] = {s}", (min(v.lo, s), max(v.hi, s)), "setitem")
    return True


def _mutate(b: Builder, v: Val, line: str, rng_new: tuple, family: str) -> None:
    b.stmts.append(Stmt([line], family))
    b.families.add(family)
    b.mutated.add(v.group)
    for u in b.vals:
        if u.group == v.group:
            u.lo, u.hi = min(u.lo, rng_new[0]), max(u.hi, rng_new[1])
            u.minabs = 0.0


def g_inplace_view(b: Builder) -> bool:
    rng = b.rng
    base = b.pick(lambda v: v.rank >= 1 and not v.expanded and v.dtype in ("float32", "int64") and v.group != "masked"
                  and not b.is_ambiguous(v))
    if base is None:
        return False
    view_kind = rng.choice(["view", "reshape", "slice", "t", "unsqueeze", "narrow", "select", "none", "flatten"])
    vexpr, vshape, contig = None, base.shape, True
    if view_kind == "view" and base.contiguous:
        vexpr, vshape = f"{base.name}.view(-1)", (_prod(base.shape),)
        if len(base.dyn_axes()) > 1:
            vexpr = None
    elif view_kind == "reshape" and base.contiguous and len(base.dyn_axes()) <= 1:
        vexpr, vshape = f"{base.name}.reshape(-1)", (_prod(base.shape),)
    elif view_kind == "flatten" and base.contiguous and len(base.dyn_axes()) <= 1:
        vexpr, vshape = f"{base.name}.flatten()", (_prod(base.shape),)
    elif view_kind == "slice":
        got = _index(b, base)
        if got is not None and "None" not in got[0] and got[1]:
            vexpr, vshape = f"{base.name}[{got[0]}]", got[1]
            b.min_dims += got[2]
            contig = False
    elif view_kind == "t" and base.rank >= 2:
        vexpr, vshape = f"{base.name}.transpose(0, 1)", (base.shape[1], base.shape[0]) + base.shape[2:]
        contig = False
    elif view_kind == "unsqueeze":
        vexpr, vshape = f"{base.name}.unsqueeze(0)", (1,) + base.shape
    elif view_kind == "narrow":
        n = base.shape[-1]
        if not isinstance(n, int) or n >= 2:
            vexpr = f"{base.name}.narrow(-1, 0, 1)"
            vshape = base.shape[:-1] + (1,)
            if not isinstance(n, int):
                b.min_dims.append((n, 1))
            contig = False
    elif view_kind == "select":
        vexpr, vshape = f"{base.name}[0]", base.shape[1:]
        contig = False
        if not vshape:
            vexpr = None
    if vexpr is None:
        view = base
    else:
        view = b.emit(vexpr, vshape, base.dtype, base.lo, base.hi, "view", group=base.group, contiguous=contig)
    target = rng.choice([view, view, base])
    fl = is_float(target.dtype)
    op = rng.choice(["add_", "mul_", "relu_", "clamp_", "zero_", "fill_", "sub_", "copy_", "neg_", "abs_",
                     "div_", "exp_", "sigmoid_"] if fl else ["add_", "mul_", "clamp_", "zero_", "fill_", "sub_", "neg_"])
    s = _scalar(b, target.dtype)
    if not fl:
        s = int(s)
    lo, hi = target.lo, target.hi
    if op in ("add_", "sub_"):
        u = b.pick(lambda u: u.dtype == target.dtype and broadcast(target.shape, u.shape) == target.shape
                   and u.group != target.group) if rng.random() < 0.4 else None
        arg = u.name if u is not None else repr(s)
        w = u.bound if u is not None else abs(s)
        line, lo, hi = f"{target.name}.{op}({arg})", lo - w, hi + w
    elif op == "mul_":
        line, lo, hi = f"{target.name}.mul_({s})", -target.bound * abs(s), target.bound * abs(s)
    elif op == "div_":
        line, lo, hi = f"{target.name}.div_({s})", -target.bound, target.bound
    elif op == "relu_":
        line, lo = rng.choice([f"{target.name}.relu_()", f"torch.relu_({target.name})", f"F.relu({target.name}, inplace=True)"]), 0
    elif op == "clamp_":
        c = 0 if not fl else 0.5
        line, lo, hi = f"{target.name}.clamp_(-{c or 1}, {c or 1})", -1, 1
    elif op in ("zero_", "fill_"):
        line = f"{target.name}.zero_()" if op == "zero_" else f"{target.name}.fill_({s})"
        lo, hi = min(lo, 0, s), max(hi, 0, s)
    elif op == "copy_":
        u = b.pick(lambda u: u.dtype == target.dtype and broadcast(target.shape, u.shape) == target.shape
                   and u.group != target.group)
        if u is None:
            return True
        line, lo, hi = f"{target.name}.copy_({u.name})", min(lo, u.lo), max(hi, u.hi)
    elif op == "neg_":
        line, lo, hi = f"{target.name}.neg_()", -hi, -lo
    elif op == "abs_":
        line, lo = f"{target.name}.abs_()", 0
    elif op == "exp_":
        if target.bound > 3:
            return True
        line, lo, hi = f"{target.name}.exp_()", 0, 21
    else:
        line, lo, hi = f"{target.name}.sigmoid_()", 0, 1
    _mutate(b, target, line, (lo, hi), "inplace")
    b.want_outputs += [base.name, view.name]
    return True


def g_linear(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 1 and isinstance(v.shape[-1], int) and v.shape[-1] <= 12)
    kind = rng.choice(["linear", "matmul_w", "self_matmul", "module", "einsum", "bmm", "mv"])
    if kind == "self_matmul":
        v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 2)
        if v is None:
            return False
        v = b.tame(v)
        shape = v.shape[:-1] + (v.shape[-2],)
        b.emit(f"{v.name} @ {v.name}.transpose(-1, -2)" if rng.random() < 0.5 else f"torch.matmul({v.name}.mT, {v.name})",
               shape, "float32", -400, 400, "matmul")
        if "mT, " in b.stmts[-1].lines[0]:
            b.vals[-1].shape = v.shape[:-2] + (v.shape[-1], v.shape[-1])
        return True
    if kind == "einsum":
        v = b.pick(lambda v: is_float(v.dtype) and v.rank == 2)
        if v is None:
            return False
        eq, shape = rng.choice([("ij->", ()), ("ij->j", (v.shape[1],)), ("ij->ji", (v.shape[1], v.shape[0])),
                                ("ij,ij->i", (v.shape[0],)), ("ii->i", None)])
        if shape is None:
            return False
        ops = v.name if "," not in eq else f"{v.name}, {v.name}"
        b.emit(f"torch.einsum('{eq}', {ops})", shape, "float32", -400, 400, "einsum")
        return True
    if v is None:
        return False
    v = b.tame(v)
    k = v.shape[-1]
    n = rng.randint(1, 6)
    if kind == "module":
        b.params += 1
        name = f"lin{b.params}"
        bias = rng.choice([True, False])
        b.init_lines.append(f"self.{name} = torch.nn.Linear({k}, {n}, bias={bias})")
        b.emit(f"self.{name}({v.name})", v.shape[:-1] + (n,), "float32", -12, 12, "linear")
        return True
    if kind == "linear":
        w = b.param((n, k))
        bias = b.param((n,)) if rng.random() < 0.5 else None
        b.emit(f"F.linear({v.name}, {w}{', ' + bias if bias else ''})", v.shape[:-1] + (n,), "float32", -12, 12, "linear")
        return True
    if kind == "bmm" and v.rank == 3:
        w = b.param((v.shape[0] if isinstance(v.shape[0], int) else 1, k, n))
        if not isinstance(v.shape[0], int):
            w = f"{w}.expand({v.name}.shape[0], -1, -1)"
        b.emit(f"torch.bmm({v.name}, {w})", v.shape[:-1] + (n,), "float32", -12, 12, "matmul")
        return True
    if kind == "mv" and v.rank == 2:
        w = b.param((k,))
        b.emit(f"torch.mv({v.name}, {w})", v.shape[:-1], "float32", -12, 12, "matmul")
        return True
    w = b.param((k, n))
    b.emit(f"{v.name} @ {w}" if rng.random() < 0.5 else f"torch.matmul({v.name}, {w})", v.shape[:-1] + (n,),
           "float32", -12, 12, "matmul")
    return True


def _conv_len(L: Dim, k: int, s: int, p: int, dil: int = 1) -> Dim:
    span = dil * (k - 1) + 1
    if isinstance(L, int):
        return (L + 2 * p - span) // s + 1
    inner = d_add(L, 2 * p - span)
    return d_add(d_floordiv(inner, s), 1)


def g_conv_pool(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank in (3, 4) and isinstance(v.shape[1], int) and v.shape[1] <= 8)
    if v is None:
        return False
    v = b.tame(v)
    two = v.rank == 4
    kind = rng.choice(["conv", "conv", "maxpool", "avgpool", "adaptive", "upsample", "batchnorm", "groupnorm"])
    C = v.shape[1]
    sp = list(v.shape[2:])
    if kind == "conv":
        k = rng.choice([1, 2, 3])
        s = rng.choice([1, 1, 2])
        p = rng.choice([0, 1]) if k > 1 else 0
        dil = rng.choice([1, 1, 2])
        groups = C if C > 1 and rng.random() < 0.2 else 1
        cout = groups * rng.randint(1, 3)
        b.params += 1
        name = f"conv{b.params}"
        cls = "Conv2d" if two else "Conv1d"
        b.init_lines.append(f"self.{name} = torch.nn.{cls}({C}, {cout}, {k}, stride={s}, padding={p}, "
                            f"dilation={dil}, groups={groups})")
        out = [_conv_len(d, k, s, p, dil) for d in sp]
        b.emit(f"self.{name}({v.name})", (v.shape[0], cout, *out), "float32", -12, 12, "conv")
        return True
    if kind in ("maxpool", "avgpool"):
        k = rng.choice([2, 3])
        s = rng.choice([1, 2, k])
        p = rng.choice([0, 1]) if k == 3 else 0
        fn = f"F.{'max' if kind == 'maxpool' else 'avg'}_pool{'2' if two else '1'}d"
        out = [_conv_len(d, k, s, p) for d in sp]
        b.emit(f"{fn}({v.name}, {k}, stride={s}, padding={p})", (v.shape[0], C, *out), "float32", v.lo, v.hi, "pool")
        return True
    if kind == "adaptive":
        n = rng.choice([1, 1, 2])
        fn = f"F.adaptive_{rng.choice(['avg', 'max'])}_pool{'2' if two else '1'}d"
        b.emit(f"{fn}({v.name}, {n})", (v.shape[0], C) + (n,) * len(sp), "float32", v.lo, v.hi, "pool")
        return True
    if kind == "upsample":
        mode = rng.choice(["nearest", "nearest"] + (["bilinear"] if two else ["linear"]))
        extra = ", align_corners=False" if mode != "nearest" else ""
        b.emit(f"F.interpolate({v.name}, scale_factor=2, mode='{mode}'{extra})",
               (v.shape[0], C) + tuple(d_mul(d, 2) for d in sp), "float32", v.lo, v.hi, "upsample")
        return True
    b.params += 1
    name = f"norm{b.params}"
    if kind == "batchnorm":
        b.init_lines.append(f"self.{name} = torch.nn.BatchNorm{'2' if two else '1'}d({C})")
        b.init_lines.append(f"self.{name}.running_var.fill_(1.5)")
    else:
        gr = 1 if C % 2 else 2
        b.init_lines.append(f"self.{name} = torch.nn.GroupNorm({gr}, {C})")
    b.emit(f"self.{name}({v.name})", v.shape, "float32", -12, 12, "norm")
    return True


def g_softmax_norm(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 1)
    if v is None:
        return False
    v = b.tame(v, 8)
    kind = rng.choice(["softmax", "log_softmax", "layer_norm", "normalize", "softmax_m", "rms"])
    a, spelled = b.rdim(v.rank)
    if kind in ("softmax", "softmax_m"):
        expr = f"F.softmax({v.name}, dim={spelled})" if kind == "softmax" else f"{v.name}.softmax({spelled})"
        b.emit(expr, v.shape, "float32", 0, 1, "softmax")
        return True
    if kind == "log_softmax":
        b.emit(f"F.log_softmax({v.name}, {spelled})", v.shape, "float32", -20, 0, "softmax")
        return True
    if kind == "normalize":
        b.emit(f"F.normalize({v.name}, dim={spelled})", v.shape, "float32", -1, 1, "norm")
        return True
    last = v.shape[-1]
    if not isinstance(last, int) or last < 2:
        return False
    if kind == "rms":
        b.emit(f"{v.name} * torch.rsqrt({v.name}.pow(2).mean(-1, keepdim=True) + 1e-5)", v.shape, "float32", -8, 8, "norm")
        return True
    if rng.random() < 0.5:
        b.params += 1
        name = f"ln{b.params}"
        b.init_lines.append(f"self.{name} = torch.nn.LayerNorm({last})")
        b.emit(f"self.{name}({v.name})", v.shape, "float32", -12, 12, "norm")
    else:
        b.emit(f"F.layer_norm({v.name}, ({last},))", v.shape, "float32", -8, 8, "norm")
    return True


_BRANCH_BODIES = [
    ("{v}.flip({a})", "any"), ("-{v}", "signed"), ("{v} * 2", "num"), ("{v} + 1", "num"),
    ("{v}.roll(1, {a})", "any"), ("{v}.cumsum({a})", "float"), ("F.relu({v})", "float"), ("{v}.abs()", "signed"),
    ("{v}.clone()", "any"), ("{v} - {v}.mean({a}, keepdim=True)", "float"), ("torch.tanh({v})", "float"),
]


def g_branch(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and v.group != "masked")
    if v is None:
        return False
    src = b.pick(lambda u: u.dyn_axes() and u.group != "masked") or v
    if not src.dyn_axes():
        return False
    ax = rng.choice(src.dyn_axes())
    d = src.shape[ax]
    ex = d_eval(d, b.example)
    k = rng.choice([1, 2, 3, ex - 1, ex, ex, ex + 1, ex + 2])
    kind = rng.choice(["gt", "ge", "eq", "ne", "len", "numel", "mod", "lt", "size"])
    if kind == "len" and ax == 0:
        cond = f"len({src.name}) > {k}"
    elif kind == "numel":
        n = d_eval(_prod(src.shape), b.example)
        cond = f"{src.name}.numel() {rng.choice(['>', '<=', '>='])} {rng.choice([n, n - 1, n + 1, max(1, n // 2)])}"
    elif kind == "mod":
        cond = f"{src.name}.shape[{ax}] % 2 == {rng.choice([0, 1])}"
    else:
        op = {"gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "lt": "<", "size": ">", "len": ">"}[kind]
        lhs = f"{src.name}.size({ax})" if kind == "size" else f"{src.name}.shape[{ax}]"
        cond = f"{lhs} {op} {k}"

    def body():
        for _ in range(10):
            tmpl, need = rng.choice(_BRANCH_BODIES)
            ok = (need == "any" or need == "float" and is_float(v.dtype)
                  or need == "num" and v.dtype not in ("bool", "uint8")
                  or need == "signed" and v.dtype not in ("bool", "uint8"))
            if ok:
                return tmpl.format(v=v.name, a=rng.randrange(v.rank))
        return f"{v.name}.clone()"

    name = b.fresh()
    lines = [f"if {cond}:", f"    {name} = {body()}"]
    if rng.random() < 0.8:
        lines += ["else:", f"    {name} = {body()}"]
    else:
        lines = [f"{name} = {v.name}"] + lines
    lo, hi = v.lo, v.hi
    if v.dtype not in ("bool",):
        B = v.bound
        lo, hi = -2 * B - 1, 2 * B + 1
        if is_float(v.dtype):
            lo, hi = lo * 20, hi * 20
    if v.dtype == "uint8":
        lo, hi = 0, 255
    b.stmts.append(Stmt(lines, "branch", (name,)))
    b.families.add("branch")
    b.vals.append(Val(name, v.shape, v.dtype if v.dtype != "bool" or True else v.dtype, lo, hi, 0.0, name))
    b.want_outputs.append(name)
    return True


def g_loop(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 2 and v.dtype in ("float32", "int64") and v.group != "masked")
    if v is None:
        return False
    v = b.tame(v, 4 if is_float(v.dtype) else 20)
    kind = rng.choice(["acc", "acc_min", "cat_list", "static", "acc_minus"])
    name = b.fresh()
    ax0 = v.shape[0]
    if kind == "acc":
        lines = [f"{name} = torch.zeros_like({v.name}[0])", f"for i in range({v.name}.shape[0]):",
                 f"    {name} = {name} + {v.name}[i] * (i + 1)"]
        n = d_eval(ax0, {k: 20 for k in b.example})
        val = Val(name, v.shape[1:], v.dtype, -v.bound * n * n, v.bound * n * n, 0.0, name)
    elif kind == "acc_minus":
        lines = [f"{name} = {v.name}[0].clone()", f"for i in range(1, len({v.name})):",
                 f"    {name} = torch.maximum({name}, {v.name}[i]) - i"]
        val = Val(name, v.shape[1:], v.dtype, v.lo - 400, v.hi, 0.0, name)
    elif kind == "acc_min":
        c = rng.randint(2, 4)
        lines = [f"{name} = {v.name}[0]", f"for i in range(1, min({v.name}.shape[0], {c})):",
                 f"    {name} = {name} * 0.5 + {v.name}[i]" if is_float(v.dtype) else f"    {name} = {name} + {v.name}[i]"]
        val = Val(name, v.shape[1:], v.dtype, -v.bound * 4, v.bound * 4, 0.0, name)
    elif kind == "cat_list":
        a = rng.randrange(v.rank)
        lines = [f"{name} = torch.cat([{v.name}.narrow({a}, i, 1) * i for i in range({v.name}.shape[{a}])], {a})"]
        n = d_eval(v.shape[a], {k: 20 for k in b.example})
        val = Val(name, v.shape, v.dtype, -v.bound * n, v.bound * n, 0.0, name)
    else:
        st = v.static_axes()
        if not st:
            return False
        a = rng.choice(st)
        if v.shape[a] > 5:
            return False
        lines = [f"{name} = sum({v.name}.select({a}, i) for i in range({v.shape[a]}))"]
        shape = v.shape[:a] + v.shape[a + 1:]
        val = Val(name, shape, v.dtype, -v.bound * 5, v.bound * 5, 0.0, name)
    b.stmts.append(Stmt(lines, "loop", (name,)))
    b.families.add("loop")
    b.vals.append(val)
    return True


def g_size_scalar(b: Builder) -> bool:
    rng = b.rng
    src = b.pick(lambda u: u.dyn_axes() and u.group != "masked")
    v = b.pick(lambda v: v.rank >= 1 and v.group != "masked" and v.dtype != "bool")
    if src is None or v is None:
        return False
    ax = rng.choice(src.dyn_axes())
    n = f"{src.name}.shape[{ax}]"
    kind = rng.choice(["div", "mul", "arange", "full", "new_zeros", "half_slice", "tail_slice", "len", "ones_like"])
    big = d_eval(src.shape[ax], {k: 20 for k in b.example})
    if kind == "div":
        b.emit(f"{v.name} / {n}", v.shape, "float32", -v.bound, v.bound, "size_scalar")
    elif kind == "mul":
        if v.dtype == "uint8":
            return False
        b.emit(f"{v.name} * {n}", v.shape, v.dtype, -v.bound * big, v.bound * big, "size_scalar")
    elif kind == "len":
        if v.dtype == "uint8":
            return False
        b.emit(f"{v.name} + len({src.name})", v.shape, v.dtype, v.lo, v.hi + 20, "size_scalar")
    elif kind == "arange":
        if rng.random() < 0.5:
            b.emit(f"torch.arange({n})", (src.shape[ax],), "int64", 0, big, "size_scalar")
        else:
            b.emit(f"torch.arange({n}, dtype=torch.float32) * 0.5", (src.shape[ax],), "float32", 0, big, "size_scalar")
    elif kind == "full":
        b.emit(f"torch.full(({n}, 2), 1.5)", (src.shape[ax], 2), "float32", 1.5, 1.5, "size_scalar")
    elif kind == "new_zeros":
        b.emit(f"{v.name}.new_zeros({v.name}.shape) + 1", v.shape, v.dtype, 1, 1, "size_scalar")
    elif kind == "ones_like":
        b.emit(f"torch.ones_like({v.name}) * {n}", v.shape, v.dtype, 1, big, "size_scalar")
    elif kind == "half_slice":
        d = src.shape[ax]
        b.emit(f"{src.name}.narrow({ax}, 0, max(1, {n} // 2))" if rng.random() < 0.5 else
               f"{src.name}[{', '.join([':'] * ax + [f':max(1, {n} // 2)'])}]",
               src.shape[:ax] + (f"max(1, {d} // 2)",) + src.shape[ax + 1:], src.dtype, src.lo, src.hi, "size_scalar",
               group=src.group, contiguous=False)
    else:
        d = src.shape[ax]
        idx = ", ".join([":"] * ax + [f"{n} - 1:"])
        b.emit(f"{src.name}[{idx}]", src.shape[:ax] + (1,) + src.shape[ax + 1:], src.dtype, src.lo, src.hi,
               "size_scalar", group=src.group, contiguous=False)
    return True


GENERATORS = [
    (g_arith, 8), (g_div, 4), (g_pow, 2), (g_compare, 3), (g_logical, 2), (g_bitwise, 2), (g_where_clamp, 4),
    (g_unary, 6), (g_reduce, 6), (g_reshape, 4), (g_permute, 3), (g_unsqueeze, 2), (g_expand_repeat, 2),
    (g_cat_stack, 3), (g_split, 2), (g_flip_roll, 3), (g_getitem, 6), (g_setitem, 4), (g_inplace_view, 5),
    (g_linear, 4), (g_conv_pool, 2), (g_softmax_norm, 3), (g_branch, 4), (g_loop, 2), (g_size_scalar, 3),
]
_CONV_BOOST = {g_conv_pool: 12, g_softmax_norm: 4}


def build(seed: int) -> Builder:
    """One random draw of statements for ``seed`` (not validated)."""
    b = Builder(seed)
    b.min_dims = []
    b.masked = []
    b.mutated = set()
    b.want_outputs = []
    b.make_inputs()
    rng = b.rng
    target = rng.randint(2, 7)
    weights = [(_CONV_BOOST.get(g, w) if b.theme.startswith("conv") else w) for g, w in GENERATORS]
    for _ in range(40):
        if len(b.stmts) >= target:
            break
        gen = rng.choices([g for g, _ in GENERATORS], weights)[0]
        gen(b)
    return b


def _outputs(b: Builder) -> list:
    rng = b.rng
    computed = [v for v in b.vals if v.name not in {i.name for i in b.inputs}]
    if not computed:
        return [b.vals[0].name]
    outs = [computed[-1].name]
    for name in b.want_outputs:
        if rng.random() < 0.7 and name not in outs:
            outs.append(name)
    for v in b.vals:
        if v.group in b.mutated and v.name not in outs and rng.random() < 0.4:
            outs.append(v.name)
    if rng.random() < 0.3:
        extra = rng.choice(computed).name
        if extra not in outs:
            outs.append(extra)
    return outs[:4]


def _envs(b: Builder, vals: list) -> list:
    """Sizes to try: the smallest valid, some below and above the example, and a large one."""
    syms = list(b.example)

    def valid(env):
        try:
            return all(d_eval(d, env) >= 1 for v in vals for d in v.shape if v.group != "masked") and \
                all(d_eval(d, env) >= k for d, k in b.min_dims)
        except Exception:
            return False

    mins = {}
    for s in syms:
        for n in range(1, 40):
            env = dict(b.example)
            env[s] = n
            if valid(env):
                mins[s] = n
                break
        else:
            return []
    out = [dict(b.example)]
    for s in syms:
        ex, lo = b.example[s], mins[s]
        for n in sorted({lo, lo + 1, ex - 1, ex + 1, ex + 3, 2 * ex + 1}):
            if n >= lo and n != ex:
                env = dict(b.example)
                env[s] = n
                out.append(env)
    if len(syms) > 1:
        out.append({s: mins[s] for s in syms})
        out.append({s: 2 * b.example[s] + 1 for s in syms})
    seen, uniq = set(), []
    for env in out:
        key = tuple(sorted(env.items()))
        if key not in seen and valid(env):
            seen.add(key)
            uniq.append(env)
    return uniq


def draft(seed: int) -> Optional[Program]:
    """The program of one draw, or None when the draw is unusable (no sizes, too big)."""
    b = build(seed)
    outs = _outputs(b)
    envs = _envs(b, b.vals)
    if len(envs) < 2:
        return None
    for v in b.vals:
        if v.group != "masked" and b.numel_at_example(v.shape) > 4000:
            return None
    return Program(seed, b.init_lines, b.stmts, outs, b.inputs, dict(b.example), envs, b.dynamic_axes,
                   sorted(b.families))


def load(program: Program, path=None) -> dict:
    """Exec the program's source (from ``path`` when given, so that tracebacks show its lines)."""
    source = program.source()
    filename = "<fuzz>"
    if path is not None:
        path.write_text(source)
        filename = str(path)
    namespace: dict = {"__name__": f"fuzz_program_{program.seed}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace


def env_seed(env: dict) -> int:
    """The input seed used at the sizes ``env`` (the same in every run of a program)."""
    return sum(size * 31 ** k for k, (_, size) in enumerate(sorted(env.items())))


def eager_outputs(namespace: dict, env: dict, seed: int) -> tuple:
    """Inputs at ``env`` and the eager outputs on copies of them."""
    import torch

    inputs = namespace["make_inputs"](**env, seed=seed)
    model = namespace["Program"]()
    model.eval()
    with torch.no_grad():
        out = model(*[t.clone() for t in inputs])
    return inputs, [o for o in out]


def sane(program: Program) -> Optional[Program]:
    """The program with only the sizes where eager runs and gives moderate finite numbers."""
    import torch

    ns = load(program)
    good = []
    for k, env in enumerate(program.envs):
        try:
            _, outs = eager_outputs(ns, env, env_seed(env))
        except Exception:
            if k == 0:
                return None
            continue
        ok = all(isinstance(o, torch.Tensor) and o.numel() > 0 and
                 (not o.is_floating_point() or (torch.isfinite(o).all() and o.abs().max() < 1e5))
                 and (o.is_floating_point() or o.dtype == torch.bool or o.abs().max() < 2 ** 31)
                 for o in outs)
        if not ok and k == 0:
            return None
        if ok:
            good.append(env)
    if len(good) < 2:
        return None
    return dataclasses.replace(program, envs=good)


def generate(seed: int) -> Program:
    """A valid random program for ``seed`` (deterministic)."""
    for attempt in range(50):
        program = draft(seed * 1000 + attempt)
        if program is None:
            continue
        try:
            checked = sane(program)
        except Exception:
            checked = None
        if checked is not None:
            return dataclasses.replace(checked, seed=seed * 1000 + attempt)
    raise RuntimeError(f"no valid program for seed {seed} after 50 draws")
