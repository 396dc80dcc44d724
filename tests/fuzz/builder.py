"""The generator's model of a program being built: values with shapes, dtypes, ranges, aliasing.

Dims are ints or size expressions (see :mod:`fuzz.program`). A value's range (lo, hi) and
``minabs`` keep later statements well conditioned; ``group`` names the storage a value
shares, so that in-place updates are generated only where torch's aliasing does not depend
on the size.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Callable, Optional

from .program import InputSpec, Stmt, d_eval

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
        self.globals_lines: list = []
        # a dynamic axis whose example is 0, 1 or 2: "small" (1 or 2) or "empty" (0)
        self.small = False
        self.empty = False

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
        # a fifth of the programs take a small example on S (broadcasting, empty loops, thresholds
        # next to the example), a few an empty one (size 0: only programs that make sense empty)
        r = rng.random()
        if theme in ("general", "seq") and r < 0.2:
            self.small = True
            self.example["S"] = rng.choice([1, 1, 2, 2])
        elif theme == "general" and r < 0.26:
            self.empty = True
            self.example["S"] = 0
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
