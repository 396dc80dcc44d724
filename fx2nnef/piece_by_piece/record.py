"""Recording: run the model once per input set and keep a copy of every submodule call.

Forward pre-hooks and hooks (``with_kwargs=True``) on every submodule copy the call's
arguments (when it starts: a forward may change them in place) and its result: tensors,
tuples, lists, dicts, dataclasses and ModelOutputs, None and Python values. Containers that
are never called (ModuleList, ModuleDict) are no tree nodes: their children hang under the
container's parent with paths such as ``layers.0``.

Dynamic dims are guessed from the calls: a dim of a module's input whose size differs
between calls gets a symbol. The symbol is shared across modules when the sizes follow the
same pattern over the input sets (the sequence length ``S`` of the model's input is also
the ``S`` of every hidden state), so that a submodule's export uses its parent's symbols.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Optional

import torch

from ..errors import InvalidArgumentError
from ..fx_tracer.tracing import structures
from ..fx_tracer.model_mode import eval_mode
from ..fx_tracer.tracing.control_flow import eager_control_flow
from ..ir import sanitize

CONTAINERS = (torch.nn.ModuleList, torch.nn.ModuleDict)


@dataclasses.dataclass
class Call:
    """One recorded forward call."""

    input_set: int
    args: tuple
    kwargs: dict
    output: Any = None
    start: int = 0  # order in which calls started over the whole recording
    end: int = 0  # order in which they returned

    def flat_inputs(self) -> list:
        return [t for _, t in structures.flatten((self.args, self.kwargs), "")]

    def flat_outputs(self) -> list:
        return [t for _, t in structures.flatten(self.output, "")]

    def signature(self) -> tuple:
        """What must be equal for one export to serve two calls: structure, ranks and dtypes."""
        return (_skeleton((self.args, self.kwargs)),
                tuple((t.dim(), t.dtype) for t in self.flat_inputs()))


@dataclasses.dataclass(eq=False)
class ModuleRecord:
    """A submodule of the model and its recorded calls."""

    path: str  # "" for the model itself
    module: torch.nn.Module
    parent: Optional["ModuleRecord"]
    children: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)

    @property
    def class_name(self) -> str:
        return type(self.module).__name__

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def relative_path(self, ancestor: "ModuleRecord") -> str:
        return self.path if not ancestor.path else self.path[len(ancestor.path) + 1:]

    def call_count(self, input_set: int) -> int:
        return sum(1 for c in self.calls if c.input_set == input_set)

    def compatible_calls(self) -> list:
        """Calls with the first call's signature (one export serves them all)."""
        if not self.calls:
            return []
        sig = self.calls[0].signature()
        return [c for c in self.calls if c.signature() == sig]

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclasses.dataclass
class Recording:
    """Every module of the model with its calls, and the dynamic-dim symbols."""

    root: ModuleRecord
    n_input_sets: int
    symbols: "SymbolTable"

    def modules(self) -> list:
        return list(self.root.walk())

    def find(self, path: str) -> Optional[ModuleRecord]:
        return next((r for r in self.root.walk() if r.path == path), None)

    def execution_order(self) -> list:
        """Called modules by the order in which their first call returned (innermost first)."""
        called = [r for r in self.root.walk() if r.calls]
        return sorted(called, key=lambda r: r.calls[0].end)


def copy_value(obj):
    """A deep copy of the tensors inside ``obj`` (other objects are kept as they are)."""
    return structures.rebuild(obj, lambda _k, t: t.detach().clone())


def record(model: torch.nn.Module, input_sets: list, symbols: "SymbolTable") -> Recording:
    """Run ``model(*args, **kwargs)`` for each ``(args, kwargs)`` with every module observed."""
    root = _build_tree(model)
    by_module = {id(r.module): r for r in root.walk()}
    counter = {"start": 0, "end": 0}
    open_calls: dict = {}

    def pre_hook(module, args, kwargs):
        counter["start"] += 1
        call = Call(counter["set"], copy_value(tuple(args)), copy_value(dict(kwargs)), start=counter["start"])
        open_calls.setdefault(id(module), []).append(call)

    def post_hook(module, args, kwargs, output):
        call = open_calls[id(module)].pop()
        counter["end"] += 1
        call.output, call.end = copy_value(output), counter["end"]
        by_module[id(module)].calls.append(call)

    handles = []
    for rec in root.walk():
        handles.append(rec.module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(rec.module.register_forward_hook(post_hook, with_kwargs=True))
    try:
        with eval_mode(model), torch.no_grad(), eager_control_flow():
            for k, (args, kwargs) in enumerate(input_sets):
                counter["set"] = k
                try:
                    model(*args, **kwargs)
                except Exception as exc:
                    raise InvalidArgumentError(f"the model fails on input set {k}: {type(exc).__name__}: {exc}. "
                                               "Check that it runs eagerly on these inputs.") from exc
    finally:
        for h in handles:
            h.remove()
    for rec in root.walk():
        rec.children.sort(key=lambda c: c.calls[0].start if c.calls else float("inf"))
    return Recording(root, len(input_sets), symbols)


def _build_tree(model: torch.nn.Module) -> ModuleRecord:
    root = ModuleRecord("", model, None)
    records = {"": root}
    for path, module in model.named_modules():
        if not path or isinstance(module, CONTAINERS):
            continue
        parent_path = path.rsplit(".", 1)[0] if "." in path else ""
        while parent_path not in records:
            parent_path = parent_path.rsplit(".", 1)[0] if "." in parent_path else ""
        rec = ModuleRecord(path, module, records[parent_path])
        records[parent_path].children.append(rec)
        records[path] = rec
    return root


def _skeleton(obj):
    """The structure of nested arguments with tensors replaced by a marker."""
    if isinstance(obj, torch.Tensor):
        return "T"
    if isinstance(obj, dict):
        return tuple((k, _skeleton(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__,) + tuple(_skeleton(v) for v in obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return type(obj).__name__


def flat_input_names(module: torch.nn.Module, args: tuple, kwargs: dict) -> list:
    """Identifier names for the tensors of a call, in the tracer's flattening order.

    Positional arguments are named after the forward's parameters; nested tensors get
    their path (``position_embeddings_0``).
    """
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    named: dict = {}
    for i, a in enumerate(args):
        named[params[i] if i < len(params) else f"arg{i}"] = a
    for k, v in kwargs.items():
        named[k if k not in named else f"{k}_kw"] = v
    names, seen = [], set()
    for name, _ in structures.flatten(named, ""):
        name = sanitize(name or "input")
        unique, i = name, 0
        while unique in seen:
            i += 1
            unique = f"{name}_{i}"
        seen.add(unique)
        names.append(unique)
    return names


class SymbolTable:
    """Symbols of dynamic dims, keyed by the sizes they take in each input set."""

    def __init__(self, n_input_sets: int):
        self.n_input_sets = n_input_sets
        self.by_sizes: dict = {}  # sizes per call pattern -> symbol
        self.per_set: dict = {}  # symbol -> size in each input set (when one size per set)

    def declare(self, symbol: str, sizes_per_set: tuple) -> None:
        """A symbol the user named (``dynamic_axes``), with its size in each input set."""
        self.per_set[symbol] = tuple(sizes_per_set)
        self.by_sizes.setdefault(("sets",) + tuple(sizes_per_set), symbol)

    def symbol_for(self, sizes: list) -> str:
        """The symbol of a dim that takes ``sizes``: ``[(input_set, size)]``, one per call."""
        for sym, per_set in self.per_set.items():
            if all(per_set[k] == n for k, n in sizes):
                return sym
        by_set: dict = {}
        for k, n in sizes:
            by_set.setdefault(k, set()).add(n)
        if len(by_set) == self.n_input_sets and all(len(v) == 1 for v in by_set.values()):
            per_set = tuple(next(iter(by_set[k])) for k in range(self.n_input_sets))
            key = ("sets",) + per_set
            if key not in self.by_sizes:
                self.declare(self._fresh(), per_set)
            return self.by_sizes[key]
        key = ("calls",) + tuple(sizes)
        if key not in self.by_sizes:
            self.by_sizes[key] = self._fresh()
        return self.by_sizes[key]

    def _fresh(self) -> str:
        taken = set(self.by_sizes.values())
        for name in ["S", "T", "U", "V", "W"] + [f"S{i}" for i in range(1, 100)]:
            if name not in taken:
                return name
        raise RuntimeError("too many dynamic dims")

    def dynamic_axes(self, calls: list, names: list) -> dict:
        """``{input_name: {axis: symbol}}`` for the dims that differ between ``calls``."""
        flats = [c.flat_inputs() for c in calls]
        axes: dict = {}
        for i, name in enumerate(names):
            for axis in range(flats[0][i].dim()):
                sizes = [(c.input_set, f[i].shape[axis]) for c, f in zip(calls, flats)]
                if len({n for _, n in sizes}) > 1:
                    axes.setdefault(name, {})[axis] = self.symbol_for(sizes)
        return axes
