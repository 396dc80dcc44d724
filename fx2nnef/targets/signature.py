"""The inputs an NNEF asset declares, read from its ``graph.nnef``, and a check of arrays against them.

tract 0.23.9 does not enforce ``extension tract_assert`` at run time, and some of its kernels
abort the whole process on a size outside the range the export declared (a 2x2 max pool at
H = 1 panics in ``maxpool.rs``). :meth:`AssetSignature.check` checks, before tract sees
them, the count, names, ranks, dtypes and fixed sizes of the inputs, one value per symbol
across inputs, the sizes written as expressions (``4*H_4``: multiples of 4) and every
asserted relation (``S >= 3``, ``S+P < 128``). A violation is an :class:`AssetInputError`
naming the input, the axis, the size given and the sizes allowed. What it cannot decide (an
assertion it cannot evaluate, a size 0 that no assertion allows) is listed in
:attr:`InputCheck.unchecked`: the caller then runs tract in a child process.

Named "scenario" assertions (``tg: S==1``) select tract's optimisations; they are no
constraint and are not checked. This module imports numpy only.
"""
from __future__ import annotations

import ast
import operator
import os
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import AssetInputError, InvalidArgumentError

TRACT_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bool": "bool",
}
NNEF_TYPES = {"scalar": "float32", "integer": "int64", "logical": "bool"}
LLM_ASSET = "model.nnef.tgz"  # what fx2nnef llm writes in its OUT_DIR

_GRAPH = re.compile(r"^\s*graph\s+\w+\s*\(([^)]*)\)\s*->\s*\(([^)]*)\)", re.M)
_EXTERNAL = re.compile(r"^\s*(\w+)\s*=\s*(tract_core_external|external)\s*(?:<\s*(\w+)\s*>)?\s*\((.*)\);\s*$", re.M)
_EXTENSION = re.compile(r"^\s*extension\s+(tract_symbol|tract_assert)\s+(.+?);\s*$", re.M)
_SCENARIO = re.compile(r"^\s*\w+\s*:")
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.floordiv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


@dataclass(frozen=True)
class InputDecl:
    """One graph input: its name, its dims as written (``"1"``, ``"S"``, ``"4*H_4"``), its numpy dtype."""

    name: str
    dims: tuple[str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name} [{', '.join(self.dims)}] {self.dtype}"


@dataclass
class InputCheck:
    """What :meth:`AssetSignature.check` found: the symbols' values and what it could not check."""

    symbols: dict[str, int] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every declared size and assertion was checked."""
        return not self.unchecked


@dataclass(frozen=True)
class AssetSignature:
    """The declared inputs, outputs, symbols and assertions of an asset.

    ``path`` is the file or folder tract loads (for an ``fx2nnef llm`` folder, its
    ``model.nnef.tgz``).
    """

    path: Path
    inputs: tuple[InputDecl, ...]
    outputs: tuple[str, ...]
    symbols: tuple[str, ...]
    asserts: tuple[str, ...]

    @classmethod
    def read(cls, asset: str | os.PathLike) -> "AssetSignature":
        """Read ``graph.nnef`` of a folder, ``.nnef.tgz`` / ``.nnef.tar``, or an ``fx2nnef llm`` folder."""
        path = _asset_path(asset)
        return cls.from_text(path, _graph_text(path))

    @classmethod
    def from_text(cls, path: Path, text: str) -> "AssetSignature":
        """The signature written in ``text`` (a graph.nnef)."""
        head = _GRAPH.search(text)
        if head is None:
            raise InvalidArgumentError(f"{str(path)!r}: graph.nnef has no 'graph NAME( inputs ) -> ( outputs )' line")
        in_names, out_names = (tuple(n.strip() for n in part.split(",") if n.strip()) for part in head.groups())
        decls = {m.group(1): _declaration(m) for m in _EXTERNAL.finditer(text)}
        missing = [n for n in in_names if n not in decls]
        if missing:
            raise InvalidArgumentError(f"{str(path)!r}: graph.nnef declares no external for input(s) {missing}")
        symbols, asserts = [], []
        for kind, body in _EXTENSION.findall(text):
            (symbols if kind == "tract_symbol" else asserts).append(body.strip())
        constraints = tuple(a for a in asserts if not _SCENARIO.match(a))
        return cls(path, tuple(decls[n] for n in in_names), out_names, tuple(symbols), constraints)

    def arrange(self, inputs) -> list[np.ndarray]:
        """The inputs as numpy arrays in the graph's order, from a dict by name or a list."""
        if isinstance(inputs, Mapping):
            names = [d.name for d in self.inputs]
            unknown = [k for k in inputs if k not in names]
            absent = [n for n in names if n not in inputs]
            if unknown or absent:
                said = (f"unknown name(s) {unknown}" if unknown else "") + \
                       ("; " if unknown and absent else "") + (f"missing {absent}" if absent else "")
                raise AssetInputError(f"inputs by name: {said}; the asset's inputs are {names}")
            values = [inputs[n] for n in names]
        elif isinstance(inputs, (list, tuple)):
            values = list(inputs)
            if len(values) != len(self.inputs):
                raise AssetInputError(
                    f"{len(values)} input(s) given, the asset takes {len(self.inputs)}: "
                    f"{', '.join(str(d) for d in self.inputs)}")
        else:
            raise AssetInputError(f"inputs must be a dict name -> array or a list of arrays, got "
                                  f"{type(inputs).__name__}")
        return [_as_array(v, d.name) for v, d in zip(values, self.inputs)]

    def check(self, arrays: Sequence[np.ndarray]) -> InputCheck:
        """Check arrays (in the graph's order) against the declarations; raise AssetInputError."""
        return self.check_shapes([(a.shape, a.dtype) for a in arrays])

    def check_shapes(self, specs: Sequence[tuple]) -> InputCheck:
        """:meth:`check` on ``(shape, dtype)`` pairs, so that a future call can be checked too."""
        if len(specs) != len(self.inputs):
            raise AssetInputError(f"{len(specs)} input(s) given, the asset takes {len(self.inputs)}: "
                                  f"{', '.join(str(d) for d in self.inputs)}")
        for (shape, dtype), decl in zip(specs, self.inputs):
            if np.dtype(dtype) != np.dtype(decl.dtype):
                raise AssetInputError(f"input '{decl.name}' is {np.dtype(dtype)}, the asset takes {decl.dtype} "
                                      f"(convert it with .astype(np.{decl.dtype}))")
            if len(shape) != len(decl.dims):
                raise AssetInputError(f"input '{decl.name}' has rank {len(shape)} (shape {list(shape)}), the "
                                      f"asset takes rank {len(decl.dims)}: [{', '.join(decl.dims)}]")
        return _Solver(self, [tuple(int(n) for n in shape) for shape, _ in specs]).run()

    def allowed(self) -> str:
        """The declared inputs and assertions, one line (for messages and the CLI)."""
        text = "; ".join(str(d) for d in self.inputs)
        return text + (f"; asserts {', '.join(self.asserts)}" if self.asserts else "")


class _Solver:
    """Binds each symbol from the sizes given, then checks every size and assertion."""

    def __init__(self, signature: AssetSignature, shapes: list[tuple[int, ...]]):
        self.sig = signature
        self.values: dict[str, int] = {}
        self.where: dict[str, tuple] = {}  # symbol -> (declaration, axis, dim, size) it was read from
        self.pending = [(decl, axis, dim, shape[axis]) for decl, shape in zip(signature.inputs, shapes)
                        for axis, dim in enumerate(decl.dims)]
        self.unchecked: list[str] = []

    def run(self) -> InputCheck:
        progress = True
        while self.pending and progress:
            progress = False
            for item in list(self.pending):
                if self._settle(*item):
                    self.pending.remove(item)
                    progress = True
        self.unchecked += [f"input '{d.name}' axis {a}: size {n} against {dim}" for d, a, dim, n in self.pending]
        for text in self.sig.asserts:
            self._check_assert(text)
        for sym, value in self.values.items():
            if value == 0 and not self._allows_zero(sym):
                self.unchecked.append(f"{self._given(sym)}: no assertion says the asset takes 0")
        return InputCheck(dict(self.values), self.unchecked)

    def _settle(self, decl: InputDecl, axis: int, dim: str, size: int) -> bool:
        """Check or solve one axis; False while it has two unknown symbols or cannot be solved yet."""
        place = f"input '{decl.name}' axis {axis}"
        try:
            expr = _parse(dim)
        except ValueError:
            self.unchecked.append(f"{place}: size {size} against {dim} (cannot read the size expression)")
            return True
        unknown = sorted(_names(expr) - set(self.values))
        if not unknown:
            want = _evaluate(expr, self.values)
            if want != size:
                takes = f"{dim} = {want}" if _names(expr) else dim
                raise AssetInputError(f"{place} has size {size}, the asset takes {takes} there"
                                      + self._because(expr) + f" (input '{decl.name}': [{', '.join(decl.dims)}])")
            return True
        if len(unknown) > 1:
            return False
        sym = unknown[0]
        value = _solve(expr, sym, self.values, size)
        if value is None:
            if not _is_affine(expr):
                return False
            raise AssetInputError(f"{place} has size {size}, the asset takes {dim}: {self._sizes(expr, sym)}")
        self.values[sym], self.where[sym] = value, (decl, axis, dim, size)
        for text in self._asserts_on(sym):
            self._check_assert(text)
        return True

    def _asserts_on(self, sym: str) -> list[str]:
        """The assertions that can be evaluated now that ``sym`` is known and that name it."""
        out = []
        for text in self.sig.asserts:
            try:
                names = _names(_parse_assert(text))
            except ValueError:
                continue
            if sym in names and names <= set(self.values):
                out.append(text)
        return out

    def _check_assert(self, text: str) -> None:
        try:
            tree = _parse_assert(text)
        except ValueError:
            self._note_unchecked(f"assertion {text!r} (a form this check cannot evaluate)")
            return
        missing = _names(tree) - set(self.values)
        if missing:
            self._note_unchecked(f"assertion {text!r} ({', '.join(sorted(missing))} bound by no input)")
            return
        if not _evaluate(tree, self.values):
            raise AssetInputError(self._assert_message(text, tree))

    def _note_unchecked(self, what: str) -> None:
        if what not in self.unchecked:
            self.unchecked.append(what)

    def _assert_message(self, text: str, tree) -> str:
        names = sorted(_names(tree))
        given = " and ".join(self._given(s) for s in names)
        left = tree.left
        value = ""
        if not isinstance(left, (ast.Name, ast.Constant)):
            value = f" give {ast.unparse(left)} = {_evaluate(left, self.values)}"
        allowed = text
        if len(names) == 1 and self.where[names[0]][2] != names[0]:
            decl, axis, dim, _ = self.where[names[0]]
            allowed += f", i.e. {self._sizes(_parse(dim), names[0])}"
        return (f"{given}{value}, but the asset is valid only for {allowed} (asserted in its graph.nnef; "
                "tract does not check it and can abort the process outside it)")

    def _given(self, sym: str) -> str:
        """``input 'x' axis 2 has size 1 (H = 1)``: where a symbol got its value."""
        decl, axis, dim, size = self.where[sym]
        what = f"{sym} = {self.values[sym]}" if dim.replace(" ", "") == sym else \
            f"{dim} with {sym} = {self.values[sym]}"
        return f"input '{decl.name}' axis {axis} has size {size} ({what})"

    def _because(self, expr) -> str:
        known = sorted(_names(expr))
        return " (" + "; ".join(self._given(s) for s in known) + ")" if known else ""

    def _sizes(self, expr, sym: str) -> str:
        """The first sizes ``expr`` takes where the single-symbol assertions on ``sym`` hold."""
        singles = []
        for text in self.sig.asserts:
            try:
                tree = _parse_assert(text)
            except ValueError:
                continue
            if _names(tree) == {sym}:
                singles.append(tree)
        ok = [v for v in range(0, 4096) if all(_evaluate(t, {**self.values, sym: v}) for t in singles)]
        sizes = sorted({_evaluate(expr, {**self.values, sym: v}) for v in ok[:4]})
        more = ", ..." if len(ok) > 4 else ""
        rule = f" with {', '.join(ast.unparse(t) for t in singles)}" if singles else ""
        return f"sizes {', '.join(map(str, sizes))}{more} ({ast.unparse(expr)}{rule})"

    def _allows_zero(self, sym: str) -> bool:
        """True when an assertion on ``sym`` alone admits 0 explicitly (``P >= 0``)."""
        for text in self.sig.asserts:
            try:
                tree = _parse_assert(text)
            except ValueError:
                continue
            if _names(tree) == {sym} and isinstance(tree, ast.Compare) and _evaluate(tree, {sym: 0}) and \
                    not _evaluate(tree, {sym: -1}):
                return True
        return False


def _declaration(match: re.Match) -> InputDecl:
    name, op, type_param, args = match.groups()
    shape = re.search(r"shape\s*=\s*\[(.*)\]", args)
    dims = tuple(_split_top(shape.group(1))) if shape else ()
    if op == "tract_core_external":
        datum = re.search(r"datum_type\s*=\s*'(\w+)'", args)
        dtype = TRACT_DTYPES.get(datum.group(1), datum.group(1)) if datum else "float32"
    else:
        dtype = NNEF_TYPES.get(type_param or "scalar", "float32")
    return InputDecl(name, dims, dtype)


def _split_top(text: str) -> list[str]:
    """``"1, min(7, S), 4*H_4"`` -> its items, splitting at commas outside parentheses."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return items + [last] if last else items


@lru_cache(maxsize=None)
def _parse(text: str):
    """A size expression (``S+P``, ``(S+1)/2``, ``min(7,S)``) as a Python ast; ValueError if not one."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(text) from error
    _validate(tree, text)
    return tree


@lru_cache(maxsize=None)
def _parse_assert(text: str):
    """An assertion (``S >= 3``, ``S+P < 128``, ``H % 8 == 0``) as a Python ast comparison."""
    tree = _parse(text)
    if not isinstance(tree, ast.Compare):
        raise ValueError(text)
    return tree


def _validate(node, text: str) -> None:
    allowed = (ast.Compare, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Call, ast.Load,
               ast.USub, ast.UAdd, *(_COMPARE), *(_ARITH))
    for sub in ast.walk(node):
        if not isinstance(sub, allowed):
            raise ValueError(text)
        if isinstance(sub, ast.Constant) and not isinstance(sub.value, int):
            raise ValueError(text)
        if isinstance(sub, ast.Call) and not (isinstance(sub.func, ast.Name) and sub.func.id in ("min", "max")
                                               and not sub.keywords):
            raise ValueError(text)


def _names(tree) -> set[str]:
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}


def _evaluate(node, values: dict):
    """Integer value of a validated ast (``/`` is floor division, as in tract's sizes)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, values)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError(ast.unparse(node))
        return _ARITH[type(node.op)](left, right)
    if isinstance(node, ast.Call):
        pick = min if node.func.id == "min" else max
        return pick(_evaluate(a, values) for a in node.args)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError(ast.unparse(node))


def _is_affine(tree) -> bool:
    """True for sums and products by constants only (``4*H_4 + 1``): solved exactly."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) or (isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub,
                                                                                                   ast.Mult))):
            return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and _names(node.left) and _names(node.right):
            return False
    return True


def _solve(tree, sym: str, values: dict, size: int):
    """The value of ``sym`` that gives ``size``, or None (none exists, or not found)."""
    if isinstance(tree, ast.Name):
        return size
    if _is_affine(tree):
        base = _evaluate(tree, {**values, sym: 0})
        slope = _evaluate(tree, {**values, sym: 1}) - base
        if slope == 0 or (size - base) % slope:
            return None
        value = (size - base) // slope
        return value if value >= 0 else None
    for value in range(0, size + 2):  # floor divisions, min, max: sizes grow with their symbol
        try:
            if _evaluate(tree, {**values, sym: value}) == size:
                return value
        except ZeroDivisionError:
            continue
    return None


def _as_array(value, name: str) -> np.ndarray:
    """A numpy array from numpy, a torch tensor (no torch import) or a nested list."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        try:
            value = value.detach().cpu().numpy()
        except (TypeError, RuntimeError) as error:
            raise AssetInputError(f"input '{name}': a torch tensor of dtype {value.dtype} has no numpy form "
                                  f"({error}); convert it first (e.g. .float())") from None
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise AssetInputError(f"input '{name}' has dtype {array.dtype}: tract takes bool, integer or float arrays")
    return np.ascontiguousarray(array)


def _asset_path(asset: str | os.PathLike) -> Path:
    """The file or folder tract loads: the asset, or ``model.nnef.tgz`` of an ``fx2nnef llm`` folder."""
    path = Path(asset).resolve()
    if not path.exists():
        raise InvalidArgumentError(f"NNEF asset {str(asset)!r} does not exist: give the folder, .nnef.tgz or "
                                   ".nnef.tar written by the export (or the folder fx2nnef llm wrote)")
    if path.is_dir() and not (path / "graph.nnef").exists():
        if (path / LLM_ASSET).exists():
            return path / LLM_ASSET
        raise InvalidArgumentError(f"{str(asset)!r} holds neither graph.nnef nor {LLM_ASSET}")
    return path


def _graph_text(path: Path) -> str:
    if path.is_dir():
        return (path / "graph.nnef").read_text()
    if not tarfile.is_tarfile(path):
        raise InvalidArgumentError(f"NNEF asset {str(path)!r} is neither a folder nor a .tar / .tgz archive")
    with tarfile.open(path, "r:*") as archive:
        for member in archive:
            if member.name.lstrip("./") == "graph.nnef":
                return archive.extractfile(member).read().decode()
    raise InvalidArgumentError(f"{str(path)!r} has no graph.nnef at its root")

