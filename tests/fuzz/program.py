"""A generated program: its statements, inputs and sizes, rendered as runnable Python source.

Dims are ints (static) or Python expressions of the size symbols (``"S"``, ``"(S - 2)"``,
``"((S + 1) // 2)"``) evaluated with ``eval`` at concrete sizes.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Union

Dim = Union[int, str]


def d_eval(dim: Dim, env: dict) -> int:
    """The value of ``dim`` at the sizes ``env``."""
    return dim if isinstance(dim, int) else int(eval(dim, {}, dict(env)))  # noqa: S307 - our own expressions


def d_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if isinstance(b, int) and b < 0:
        return f"({a} - {-b})"
    return f"({a} + {b})"


def d_mul(a: Dim, k: int) -> Dim:
    if isinstance(a, int):
        return a * k
    return a if k == 1 else f"({k} * {a})"


def d_ceildiv(a: Dim, k: int) -> Dim:
    if isinstance(a, int):
        return -(-a // k)
    return a if k == 1 else f"(({a} + {k - 1}) // {k})"


def d_floordiv(a: Dim, k: int) -> Dim:
    if isinstance(a, int):
        return a // k
    return a if k == 1 else f"({a} // {k})"


def shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclasses.dataclass
class InputSpec:
    """One graph input: name, shape (dims), dtype and how its values are drawn."""

    name: str
    shape: tuple
    dtype: str
    kind: str  # "uniform", "away0", "int", "bool", "perm" (a permutation of range(shape[0]))
    lo: float = -2.0
    hi: float = 2.0

    def code(self) -> str:
        shape = "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"
        if self.kind == "bool":
            return f"torch.rand({shape}, generator=g) > 0.5"
        if self.kind == "perm":
            return f"torch.randperm({self.shape[0]}, generator=g)"
        if self.kind == "int":
            cast = "" if self.dtype == "int64" else f".to(torch.{self.dtype})"
            return f"torch.randint({int(self.lo)}, {int(self.hi) + 1}, {shape}, generator=g){cast}"
        if self.kind == "away0":
            return (f"(torch.rand({shape}, generator=g) * {self.hi - self.lo:g} + {self.lo:g})"
                    f" * (torch.randint(0, 2, {shape}, generator=g) * 2 - 1)")
        return f"torch.rand({shape}, generator=g) * {self.hi - self.lo:g} + {self.lo:g}"


@dataclasses.dataclass
class Stmt:
    """One statement of ``forward`` (possibly several lines: a branch or a loop)."""

    lines: list
    family: str
    defines: tuple = ()


@dataclasses.dataclass
class Program:
    """A random program with everything needed to run it and to print it as a reproducer."""

    seed: int
    init_lines: list
    stmts: list
    outputs: list
    inputs: list  # InputSpec
    example: dict  # symbol -> example size
    envs: list  # sizes to try, dicts symbol -> size
    dynamic_axes: dict
    families: list
    globals_lines: list = dataclasses.field(default_factory=list)  # module-level statements (global tensors)

    @property
    def input_names(self) -> list:
        return [i.name for i in self.inputs]

    @property
    def symbols(self) -> list:
        return list(self.example)

    def source(self) -> str:
        """The whole program as Python source: imports, Program, make_inputs, sizes."""
        lines = ["import math", "import torch", "import torch.nn.functional as F", ""]
        lines += self.globals_lines
        lines += ["", "class Program(torch.nn.Module):",
                 "    def __init__(self):", "        super().__init__()"]
        lines += ["        " + line for line in self.init_lines]
        if self.init_lines:
            lines += [f"        g = torch.Generator().manual_seed({self.seed % 1000})",
                      "        for p in self.parameters():",
                      "            p.data = torch.randn(p.shape, generator=g) * 0.3"]
        lines += ["", f"    def forward(self, {', '.join(self.input_names)}):"]
        for stmt in self.stmts:
            lines += ["        " + line for line in stmt.lines]
        outs = ", ".join(self.outputs)
        lines.append(f"        return {outs}" + ("," if len(self.outputs) == 1 else ""))
        syms = ", ".join(self.symbols)
        lines += ["", "", f"def make_inputs({syms}, seed=0):", "    g = torch.Generator().manual_seed(seed)"]
        for spec in self.inputs:
            lines.append(f"    {spec.name} = {spec.code()}")
        lines.append(f"    return ({', '.join(self.input_names)},)")
        lines += ["", "", f"DYNAMIC_AXES = {self.dynamic_axes!r}", f"EXAMPLE = {self.example!r}",
                  f"SIZES = {self.envs!r}", ""]
        return "\n".join(lines)

    def describe(self) -> str:
        return f"seed {self.seed}, example {self.example}, sizes {self.envs}, families {sorted(self.families)}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Program":
        """The program saved by :meth:`to_dict` (shapes come back as tuples)."""
        fields = dict(data)
        fields["stmts"] = [Stmt(list(s["lines"]), s["family"], tuple(s["defines"])) for s in data["stmts"]]
        fields["inputs"] = [InputSpec(i["name"], tuple(i["shape"]), i["dtype"], i["kind"], i["lo"], i["hi"])
                            for i in data["inputs"]]
        fields["dynamic_axes"] = {k: {int(a): sym for a, sym in v.items()} for k, v in data["dynamic_axes"].items()}
        return cls(**fields)

    def unused_inputs(self) -> list:
        """Inputs that no statement and no output mentions."""
        text = "\n".join(line for s in self.stmts for line in s.lines) + "\n" + " ".join(self.outputs)
        return [i.name for i in self.inputs if not re.search(rf"\b{i.name}\b", text)]

    def without_inputs(self, names: list) -> "Program":
        """A copy without the inputs ``names`` (at least one input stays)."""
        keep = [i for i in self.inputs if i.name not in names] or self.inputs[:1]
        kept = {i.name for i in keep}
        axes = {k: v for k, v in self.dynamic_axes.items() if k in kept}
        return dataclasses.replace(self, inputs=keep, dynamic_axes=axes)

    def without(self, stmt_index: int | None = None, outputs: list | None = None) -> "Program":
        """A copy without one statement, or with other outputs."""
        stmts = [s for k, s in enumerate(self.stmts) if k != stmt_index]
        return dataclasses.replace(self, stmts=stmts, outputs=list(outputs if outputs is not None else self.outputs))
