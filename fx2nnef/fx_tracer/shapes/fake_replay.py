"""Symbolic shapes: one replay of the recorded graph under torch's FakeTensorMode and a ShapeEnv.

The dynamic axes of the inputs become SymInts of a ShapeEnv (one symbol per dynamic-axes
symbol, with the example size as its hint, 2 for a size of 1). Replaying the graph on fake tensors (no data)
gives every node's shape, and every size computed in Python, as a sympy expression of the
symbols, which is converted to the IR's dims (polynomials and floor divisions). The guards
the ShapeEnv records on the way (``S >= 3`` for a convolution, ``Ne(S, 1)`` for a stride
decision, ``Eq(Mod(S, 2), 0)`` for a reshape) are the places where torch's own kernels take a
decision on a dynamic size; together with the tracer's Python decisions they tell the probes
which sizes are worth a real run.

Nothing here runs a real forward pass. :class:`ReplayUnavailable` says why a graph cannot be
replayed (an op without a fake kernel, a value that needs data, a symbol fixed to its example
size, an expression the IR cannot hold); the caller then falls back to probe fitting.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import operator
from fractions import Fraction
from typing import Callable, Optional

import numpy as np
import sympy
import torch
import torch.fx as fx
from torch._guards import GuardSource, Source

from ...errors import TraceError
from ...ir import SymDim
from ...ir.dims import exact_quotient
from ..tracing.data_dep import data_dependence
from ..tracing.padded import padded_nonzero
from ..tracing.scan import ScanCall
from ..tracing.tracer import call_fails, setitem_functional
from .roots import RootOfSize, integer_root, root_refusal
from .shortcuts import function_shortcut, method_shortcut, module_shortcut


class ReplayUnavailable(Exception):
    """The graph cannot be replayed symbolically; the message says where and why."""


VARIES = object()  # a float or bool computed from dynamic sizes: no IR dim holds it


@dataclasses.dataclass
class ShapeCheck:
    """A decision torch's kernels took on the dynamic sizes while replaying ``node``."""

    holds: Callable[[dict], bool]  # env (symbol -> size) -> the guard's truth value there
    text: str
    node: Optional[fx.Node]


@dataclasses.dataclass
class Replay:
    dims: dict  # node -> tuple of dims (tensors), a dim (sizes), a constant, VARIES, or None
    varies: set  # nodes whose value depends on a dynamic size
    checks: list  # ShapeCheck, one per distinct guard of the ShapeEnv on the symbols
    guard_values: dict  # fx.Node -> env -> the node's value (for the nodes the tracer's guards read)


def replay(gm: fx.GraphModule, example: list, names: list, dynamic_axes: dict, base_env: dict,
           guard_nodes: list, hint_env: Optional[dict] = None) -> Replay:
    """Replay ``gm`` once on fake inputs whose dynamic axes are symbols; raise
    :class:`ReplayUnavailable` when that cannot give exact shapes. ``hint_env``: the sizes the
    symbols take as hints (the ShapeEnv decides there), when not the example's: the sizes a graph
    was traced at, so that an axis of 1 at the example (one chunk) is not fixed to 1.

    A size computed from the symbols that is 1 at the hints (``W // 32`` of an image 48 wide, the
    last stage of a vision backbone) makes torch's kernels decide "== 1" and the ShapeEnv fix it
    there (``Eq(W//32, 1)``: the shapes then hold for 32 <= W < 64 only). The replay is then run
    again at hints scaled up until no such size is 1 (:func:`_hints_past_ones`), when the model's
    graph replays there; its shapes are checked at the example sizes like the first ones."""
    hints = {name: max((hint_env or {}).get(name, v), 2) for name, v in base_env.items()}
    rep, ones = _replay_at(gm, example, names, dynamic_axes, hints, guard_nodes)
    for _ in range(3):
        if not ones:
            break
        bigger = _hints_past_ones(ones, hints)
        if bigger is None:
            break
        try:
            again, still = _replay_at(gm, example, names, dynamic_axes, bigger, guard_nodes)
        except ReplayUnavailable:  # the graph does not replay there: the first replay's shapes stand
            break
        if not _agree_at(rep, again, base_env):
            # the "== 1" was no kernel's choice but the graph's structure (split(3) of 3 items is one
            # piece, squeeze() drops the axis): the shapes at the example differ, the first stand
            break
        rep, ones, hints = again, still, bigger
    return rep


def _agree_at(a: Replay, b: Replay, env: dict) -> bool:
    """Whether the replays ``a`` and ``b`` give every node the same shape (or number) at ``env``."""
    def at(d):
        if isinstance(d, SymDim):
            return d.evaluate(env)
        if isinstance(d, tuple):
            return tuple(at(x) for x in d)
        return d

    try:
        # a number one replay holds as a constant and the other as VARIES (``ws >= H // 4`` is True
        # while H // 4 is fixed to 1, a comparison of sizes once it is not): the guards' values say
        # where it holds, not the shapes
        return len(a.dims) == len(b.dims) and all(at(d) == at(b.dims.get(n)) for n, d in a.dims.items()
                                                  if d is not VARIES and b.dims.get(n) is not VARIES)
    except (ArithmeticError, ValueError, TypeError, KeyError):
        return False


def _ones_of(shape_env, guards: list, symbols: dict) -> list:
    """The sizes computed from the symbols (sympy expressions) that a guard fixed to 1."""
    out = []
    for expr, _node in guards:
        expr = shape_env.replace(expr)
        if type(expr).__name__ != "Equality" or not expr.free_symbols <= set(symbols):
            continue
        for a, b in (expr.args, expr.args[::-1]):
            if b == 1 and a.free_symbols and not a.is_Symbol and a not in out:
                out.append(a)
    return out


def _hints_past_ones(ones: list, hints: dict) -> Optional[dict]:
    """The hints times the least factor (up to 64) at which none of ``ones`` (``(expr, symbols)``)
    is 1 or less: a larger image of the same aspect and divisibility (a model taking multiples of
    its patch size takes twice the size too). None when there is no such factor."""
    for k in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64):
        env = {name: v * k for name, v in hints.items()}
        try:
            if all(_compile(e, symbols)(env) > 1 for e, symbols in ones):
                return env
        except (ArithmeticError, ValueError, TypeError, ReplayUnavailable):
            return None
    return None


def _replay_at(gm, example, names, dynamic_axes, hints: dict, guard_nodes: list) -> tuple:
    """:func:`replay` with the symbols' hints ``hints``: ``(Replay, ones)``, ``ones`` the sizes
    fixed to 1 there (see :func:`_ones_of`), as ``(expr, symbols)``."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    shape_env = _shape_env_class()(specialize_zero_one=False, duck_shape=False, allow_scalar_outputs=False,
                                   allow_dynamic_output_shape_ops=False)
    symbols = {}
    sizes = {}
    for name, hint in hints.items():
        # a hint of 1 makes every broadcast decide "== 1" and fix the symbol: replay as at 2 (see
        # replay); the shapes are then checked against the real run at the example sizes
        sym = shape_env.create_symbol(hint, _SymbolSource(name), dynamic_dim=DimDynamic.DYNAMIC,
                                      do_not_specialize_zero_one=True)
        symbols[sym] = name
        sizes[name] = shape_env.create_symintnode(sym, hint=hint)
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    # the dispatch cache rebuilds every symbolic output from its entry: twice slower than no cache
    mode.cache_enabled = False
    runner = _Runner(gm, shape_env, symbols)
    with _quiet(), mode, torch.no_grad():
        _run_fake(runner, names, example, dynamic_axes, sizes, "the fake replay")
    for sym, name in symbols.items():
        fixed = shape_env.replacements.get(sym)
        if fixed is not None and fixed != sym:
            raise ReplayUnavailable(f"the fake replay fixed {name} to {fixed}{_at(runner.fixed_at.get(sym))}")
    conv = _Converter(shape_env, symbols, _equalities(shape_env, runner.guards))
    dims, varies = {}, set()
    for n, value in runner.env.items():
        if n in runner.read_data:
            dims[n] = VARIES
            varies.add(n)
            continue
        traced = n.meta.get("value")
        if isinstance(value, (torch.SymInt, torch.SymFloat, int, float)) and isinstance(traced, torch.Tensor) \
                and traced.dim() == 0:
            dims[n] = ()  # a 0-d tensor of sizes replayed as a number (_scalar_division): its shape
            if conv.depends(value):
                varies.add(n)
            continue
        dims[n] = conv.value(value, n)
        if conv.depends(value):
            varies.add(n)
    checks = []
    seen = set()
    for expr, node in runner.guards + conv.conditions:
        expr = shape_env.replace(expr)
        if expr in seen or not expr.free_symbols:
            continue
        seen.add(expr)
        if not expr.free_symbols <= set(symbols):
            raise ReplayUnavailable(f"a guard of the fake replay, {expr}, reads sizes that are not inputs")
        text = str(expr.xreplace({s: sympy.Symbol(n) for s, n in symbols.items()}))
        checks.append(ShapeCheck(_compile(expr, symbols), text, node))
    guard_values = {n: conv.evaluator(runner.env[n]) for n in guard_nodes if n in runner.env}
    ones = [(e, symbols) for e in _ones_of(shape_env, runner.guards, symbols)]
    return Replay(dims, varies, checks, guard_values), ones


def shapes_at(gm: fx.GraphModule, example: list, names: list, dynamic_axes: dict, env: dict, record) -> dict:
    """``node -> record(value)`` of every node of ``gm`` run on fake inputs of the concrete sizes
    ``env`` (no data, no ShapeEnv): the shapes a real run there would give, at the cost of a
    replay. Raise :class:`ReplayUnavailable` when a node cannot run without data.

    The graph runs on the meta device first (torch's meta kernels, which FakeTensorMode wraps,
    at a third of its cost); a graph that does not run there (a call reading data, which a fake
    tensor holding a constant answers, a submodule called whole) runs under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    runner = _MetaRecorder(gm, record)
    try:
        with _quiet(), torch.device("meta"), torch.no_grad():
            _run_fake(runner, names, example, dynamic_axes, env, "the meta run")
        return runner.records
    except ReplayUnavailable:
        pass
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    runner = _Recorder(gm, record)
    with _quiet(), mode, torch.no_grad():
        _run_fake(runner, names, example, dynamic_axes, env, "the fake run")
    return runner.records


def _run_fake(runner: fx.Interpreter, names: list, example: list, dynamic_axes: dict, sizes: dict, what: str) -> None:
    """Run ``runner`` (inside a FakeTensorMode) on empty inputs shaped like ``example`` with the
    dynamic axes at ``sizes`` (SymInts or ints). Any failure raises :class:`ReplayUnavailable`:
    the caller then uses the probes, or runs the graph on data."""
    inputs = []
    for name, t in zip(names, example):
        shape = list(t.shape)
        for axis, sym_name in dynamic_axes.get(name, {}).items():
            shape[axis] = sizes[sym_name]
        inputs.append(torch.empty(shape, dtype=t.dtype))
    try:
        runner.run(*inputs)
    except Exception as exc:  # noqa: BLE001 - a failure is an answer: this graph needs data or probes
        first = str(exc).strip().split("\n")[0][:200]
        raise ReplayUnavailable(f"{what} failed{_at(runner.current)}: {type(exc).__name__}: {first}") from None


@contextlib.contextmanager
def _quiet():
    """torch logs a traceback for every fake kernel that raises; here a failure is an answer
    (the caller falls back or runs on data), not an error to print."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class _Reusing(fx.Interpreter):
    """An interpreter that runs a call once per distinct input metadata.

    On fake tensors, a call whose inputs have the same metadata (shapes, strides, dtypes) and
    the same other arguments as an earlier call gives the same result: the repeated layers of a
    model then run once (torch's fake kernels cost about a millisecond a node, its symbolic shape
    functions more). A graph with an in-place call reuses nothing: such a call changes a value
    other nodes may share."""

    def __init__(self, gm, garbage_collect_values: bool):
        super().__init__(gm, garbage_collect_values=garbage_collect_values)
        self.current: Optional[fx.Node] = None
        self.memo: Optional[dict] = None if any(_in_place(n) for n in gm.graph.nodes) else {}
        # id -> (tensor, key): the tensor is held so that its id is not reused within the run
        self.tensor_keys: dict = {}
        self.read_data: set = set()  # nodes that read a number from data, replayed with the example's

    def run_node(self, n):
        self.current = n
        key = None
        if self.memo is not None and n.op in ("call_function", "call_method"):
            with self._set_current_node(n):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
            key = _memo_key(n.op, n.target, args, kwargs, self.tensor_keys)
            if key is not None and key in self.memo:
                return self.memo[key]
        out = self.run_fresh(n)
        if key is not None and n not in self.read_data:  # a read of data is no function of metadata
            self.memo[key] = out
        return out

    def run_fresh(self, n):
        return super().run_node(n)


class _Recorder(_Reusing):
    """Runs the graph keeping each node's record only (values are freed once read)."""

    def __init__(self, gm, record):
        super().__init__(gm, garbage_collect_values=True)
        self.record = record
        self.records: dict = {}

    def run_node(self, n):
        out = super().run_node(n)
        self.records[n] = self.record(out)
        return out


class _MetaRecorder(_Recorder):
    """:class:`_Recorder` on meta tensors: the graph's parameters, constants and devices are
    taken to the meta device (no data is read or copied); a call that needs data raises."""

    def get_attr(self, target, args, kwargs):
        return _to_meta(super().get_attr(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        return super().call_function(target, *_meta_args(args, kwargs))

    def call_method(self, target, args, kwargs):
        if target == "cpu":
            return args[0]
        return super().call_method(target, *_meta_args(args, kwargs))

    def call_module(self, target, args, kwargs):
        raise RuntimeError("a submodule called whole holds tensors off the meta device")


_META = torch.device("meta")


def _to_meta(x):
    if isinstance(x, torch.Tensor):
        return x if x.device == _META else x.to(_META)
    if isinstance(x, torch.device) or (isinstance(x, str) and x.split(":")[0] in ("cpu", "cuda")):
        return _META
    return x


def _meta_args(args, kwargs) -> tuple:
    """``(args, kwargs)`` with their tensors and devices (a device given as a string too: only
    where a device is expected, ``.to("cpu")`` or ``device=``) on the meta device."""
    def tensors(x):  # strings left as they are: not every string is a device
        return x if isinstance(x, str) else _to_meta(x)

    args = fx.node.map_aggregate(args, tensors)
    kwargs = fx.node.map_aggregate(kwargs, tensors)
    if "device" in kwargs:
        kwargs = {**kwargs, "device": _to_meta(kwargs["device"])}
    return tuple(_to_meta(a) if isinstance(a, str) else a for a in args), kwargs


def _at(node: Optional[fx.Node]) -> str:
    if node is None:
        return ""
    src = node.meta.get("source")
    return f" at '{node.name}'" + (f" ({src})" if src else "")


_SHAPE_ENV_CLASS: list = []


def _shape_env_class():
    """torch's ShapeEnv without the source locations of its guards and symbols.

    ShapeEnv notes where each guard was taken by walking the stack past "uninteresting" files,
    whose list imports torch.export, AOTAutograd and Inductor on first use: 0.3 s and about
    40 MiB per process, for locations only torch's logs print. The replay knows each guard's
    fx node (:class:`_Runner`), which the reports name instead."""
    if not _SHAPE_ENV_CLASS:
        from torch._guards import SLoc
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        class _ShapeEnv(ShapeEnv):
            def _get_stack_summary(self, is_debug: bool = False, framework_loc=None):
                return SLoc(framework_loc, None), ""

        _SHAPE_ENV_CLASS.append(_ShapeEnv)
    return _SHAPE_ENV_CLASS[0]


@dataclasses.dataclass(frozen=True)
class _SymbolSource(Source):
    """Where a ShapeEnv symbol comes from: a dynamic-axes symbol of the export."""

    symbol: str

    @property
    def _name_template(self) -> str:
        return self.symbol

    @property
    def guard_source(self):
        return GuardSource.LOCAL


class _Runner(_Reusing):
    """Runs the graph and notes which node each new ShapeEnv guard came from (a repeated
    call's guards are those of the first, already recorded)."""

    def __init__(self, gm, shape_env, symbols):
        super().__init__(gm, garbage_collect_values=False)
        self.shape_env, self.symbols = shape_env, symbols
        self.guards: list = []  # (sympy expr, node)
        self.fixed_at: dict = {}  # symbol -> the node where the ShapeEnv replaced it
        self.data_nodes: Optional[set] = None  # nodes whose value follows input data (on first need)

    def run_fresh(self, n):
        before = len(self.shape_env.guards)
        try:
            out = super().run_fresh(n)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is a read of data
            out = self._read_at_example(n, exc)
        self.guards.extend((g.expr, n) for g in self.shape_env.guards[before:])
        if len(self.fixed_at) < len(self.symbols):
            for sym in self.symbols:
                if sym not in self.fixed_at and self.shape_env.replacements.get(sym, sym) != sym:
                    self.fixed_at[sym] = n
        return out

    def _read_at_example(self, n, exc):
        """A Python number read from tensor data (``mask.any().item()``, ``bool(t)``) has no
        value on fake tensors. The graph keeps what the code decided with it at the example, as
        the tracer recorded it (a decision on data is reported by the tracer, not here): the
        replay goes on with the example's number, and marks the node so that its value is
        taken as varying. A size computed from it then differs from the real runs at other
        sizes, and the probes take over, as when the replay stopped here."""
        from torch._subclasses.fake_tensor import DataDependentOutputException
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        value = n.meta.get("value")
        if not isinstance(exc, (DataDependentOutputException, GuardOnDataDependentSymNode)) \
                or not _plain_number(value):
            raise exc
        if self.data_nodes is None:
            self.data_nodes = data_dependence(self.module)
        if n not in self.data_nodes:
            raise exc  # a number computed from sizes alone differs at other sizes: no constant stands for it
        self.read_data.add(n)
        return value

    def call_function(self, target, args, kwargs):
        if target is call_fails and _symbolic_args(args, kwargs):
            raise ReplayUnavailable("whether a call the model catches fails at other sizes has no symbolic form")
        if target is operator.getitem and len(args) == 2 and isinstance(args[0], torch.Tensor):
            args = (args[0], _clamped_index(args[0], args[1]))
        return _replayed_function(target, args, kwargs, super().call_function)

    def call_module(self, target, args, kwargs):
        out = module_shortcut(self.fetch_attr(target), args, kwargs)
        return out if out is not None else super().call_module(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        if target == "is_contiguous" and _symbolic_args(args, kwargs):
            raise ReplayUnavailable("a decision on the memory layout (is_contiguous) has no symbolic form")
        if target in _NUMBER_OF and args and isinstance(args[0], (torch.SymInt, torch.SymFloat, int, float)):
            return _NUMBER_OF[target](args[0])  # a size divided with torch.div (see _scalar_division)
        return _replayed_method(target, args, kwargs, super().call_method)


def _replayed_function(target, args, kwargs, torch_call):
    """A call_function of the replay (the graph's or a loop body's): a shortcut (see
    :mod:`.shortcuts`), else a symbolic equivalent, else ``torch_call``."""
    out = function_shortcut(target, args, kwargs)
    if out is not None:
        return out
    alt = _symbolic_function(target, args)
    return alt(*args, **kwargs) if alt is not None else torch_call(target, args, kwargs)


def _replayed_method(target, args, kwargs, torch_call):
    """A call_method of the replay, as :func:`_replayed_function`."""
    out = method_shortcut(target, args, kwargs)
    if out is not None:
        return out
    alt = _SYMBOLIC_METHODS.get(target) if args and isinstance(args[0], torch.Tensor) else None
    return alt(*args, **kwargs) if alt is not None else torch_call(target, args, kwargs)

def _clamped_index(x: torch.Tensor, index):
    """``index`` of ``x[index]`` with each constant slice bound on a symbolic axis clamped as torch
    clamps it, in symbols: ``x[:, 2:7]`` of S items ends at ``Min(7, S)``, ``x[:, -3:]`` starts at
    ``Max(S - 3, 0)``. torch's slice kernel decides the clamp on the symbol instead (a guard
    ``S >= 7`` that bounds the range); the emitter writes the same bounds (``min(7,S)``). An
    Ellipsis stands for the whole axes the other items leave."""
    items = index if isinstance(index, tuple) else (index,)
    plain = all(i is None or i is Ellipsis or isinstance(i, (slice, int, torch.SymInt)) for i in items)
    if not plain or not any(isinstance(i, slice) for i in items) or sum(i is Ellipsis for i in items) > 1:
        return index  # tensors, masks: the axis of each slice is not plain to see
    if any(i is Ellipsis for i in items):  # as many whole axes as the other items leave (``x[..., :8]``)
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        taken = sum(1 for i in items if i is not None and i is not Ellipsis)
        items = items[:at] + (slice(None),) * max(x.dim() - taken, 0) + items[at + 1:]
        index = items
    out, axis = [], 0
    for item in items:
        if item is None:
            out.append(item)
            continue
        if isinstance(item, slice) and axis < x.dim():
            n = x.shape[axis]
            if isinstance(n, torch.SymInt) and n.node.maybe_as_int() is None:
                start, stop = item.start, item.stop
                if type(start) is int and start < 0:
                    start = torch.sym_max(n + start, 0)
                if type(stop) is int:
                    stop = torch.sym_max(n + stop, 0) if stop < 0 else torch.sym_min(stop, n)
                item = slice(start, stop, item.step)
        out.append(item)
        axis += 1
    return tuple(out) if isinstance(index, tuple) else out[0]


def _symbolic_args(args, kwargs) -> bool:
    """Whether a tensor among ``args``/``kwargs`` has a size or stride that follows a symbol."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and any(isinstance(d, torch.SymInt) and not isinstance(d.node.maybe_as_int(), int)
                                               for d in tuple(a.shape) + tuple(a.stride())):
            return True
    return False


_NUMBER_OF = {"item": lambda v: v, "__index__": lambda v: v, "__int__": int, "__float__": float,
              "int": int, "float": float, "long": int}


def _plain_number(value) -> bool:
    """A bool, int or float, or a list or tuple of them (``t.tolist()``)."""
    if isinstance(value, (list, tuple)):
        return all(_plain_number(v) for v in value)
    return isinstance(value, (bool, int, float))


_OPERATOR_IN_PLACE = {getattr(operator, n) for n in dir(operator)
                      if n.startswith("i") and (n[1:] in dir(operator) or n[1:] + "_" in dir(operator))}


def _in_place(n: fx.Node) -> bool:
    if n.op not in ("call_function", "call_method"):
        return False
    if "out" in n.kwargs or n.target in _OPERATOR_IN_PLACE:
        return True
    if n.op == "call_function" and getattr(n.target, "__module__", None) in ("_operator", "operator"):
        return False  # operator.and_ is no in-place call
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


# Calls whose torch implementation fixes a symbol or needs concrete sizes (C++ kernels reading
# sizes as ints), replayed by an equivalent of the same output shapes and dtypes. Only shapes
# come out of the replay; every real or fake run at concrete sizes uses torch's own call.

def _symbolic_function(target, args):
    if isinstance(target, ScanCall):
        return lambda *a, **k: _scan(target, *a, **k)
    if not _SYMBOLIC_FUNCTIONS:
        _SYMBOLIC_FUNCTIONS.update(_symbolic_functions())
    try:
        alt = _SYMBOLIC_FUNCTIONS.get(target)
    except TypeError:  # an unhashable callable
        return None
    if alt is None:
        return None
    if target in _MATH and not any(isinstance(a, (torch.SymInt, torch.SymFloat)) for a in args):
        return None  # math on plain numbers
    return alt


def _spatial_sizes(input, size, scale_factor):
    dims = input.dim() - 2
    if size is not None:
        return list(size) if isinstance(size, (list, tuple)) else [size] * dims
    scales = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * dims
    out = []
    for n, scale in zip(input.shape[2:], scales):
        if isinstance(n, int):
            out.append(math.floor(float(n) * scale))
            continue
        # torch computes floor(float(n) * scale): equal to (n * p) // q for a scale p/q with a small
        # power-of-two denominator (2.0, 0.5, 1.5), or one that rounds as p/q (0.6); others are not replayed
        frac = _fraction_of(float(scale))
        if frac is None:
            raise ValueError(f"the scale factor {scale} of a dynamic size has no exact integer form")
        out.append((n * frac.numerator) // frac.denominator)
    return out


def _interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    sizes = _spatial_sizes(input, size, scale_factor)
    for n in sizes:
        if isinstance(n, torch.SymInt):
            bool(n > 0)  # torch refuses an empty output: a guard of the ShapeEnv, the range ends there
    return input.new_empty([input.shape[0], input.shape[1], *sizes])


def _one(v):
    return v[0] if isinstance(v, (list, tuple)) else v


def _max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """max_pool1d as max_pool2d of a height-1 input (torch's 1-d kernel reads sizes as ints)."""
    k = _one(kernel_size)
    st = _one(stride) if stride is not None and stride != [] and stride != () else k
    out = torch.nn.functional.max_pool2d(input.unsqueeze(-2), (1, k), (1, st), (0, _one(padding)),
                                         (1, _one(dilation)), ceil_mode=ceil_mode, return_indices=return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def _max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                             return_indices=True):
    return _max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """baddbmm's shape: torch's kernel expands ``input`` with concrete sizes."""
    return torch.bmm(batch1, batch2) + input


def _addcmul(input, tensor1, tensor2, *, value=1):
    """addcmul's shape and dtype: torch's fake kernel (``elementwise_meta``) broadcasts with
    concrete sizes and fails on symbolic ones; so do addcdiv's and lerp's."""
    return input + tensor1 * tensor2 * value


def _addcdiv(input, tensor1, tensor2, *, value=1):
    return input + tensor1 / tensor2 * value


def _lerp(input, end, weight):
    return input + (end - input) * weight


def _tensor_split(input, indices_or_sections, dim=0):
    """tensor_split into n sections of a dynamic size S: section i has (S + n - 1 - i) // n items
    (torch's kernel decides on S % n at the example size)."""
    n = indices_or_sections
    size = input.shape[dim]
    if isinstance(n, torch.Tensor) or not isinstance(n, int) or isinstance(size, int):
        return torch.tensor_split(input, n, dim)
    pieces, start = [], 0
    for i in range(n):
        length = (size + (n - 1 - i)) // n
        pieces.append(input.narrow(dim, start, length))
        start = start + length
    return tuple(pieces)


def _scan(call, init, xs, full, carry_slots=(), scan_slots=(), body_outs=()):
    """A loop of ``xs[0].shape[dim]`` steps (a range over a symbol fixes it): one step gives the
    carries' and each step output's shapes; the stacked outputs have the steps at ``dim``."""
    steps = xs[0].shape[call.dim]
    outs = list(_Body(call.body).run(*init, *[x.select(call.dim, 0) for x in xs], *full))
    if call.check:
        outs = outs[:-1]
    carry, ys = outs[: call.n_carry], outs[call.n_carry:]
    stacked = []
    for y in ys:
        shape = list(y.shape)
        shape.insert(call.dim if call.dim >= 0 else call.dim + y.dim() + 1, steps)
        stacked.append(y.new_empty(shape))
    return tuple(carry) + tuple(stacked)


class _Body(fx.Interpreter):
    """A loop body, its calls replayed as the graph's (a loop in a loop)."""

    def call_function(self, target, args, kwargs):
        return _replayed_function(target, args, kwargs, super().call_function)

    def call_module(self, target, args, kwargs):
        out = module_shortcut(self.fetch_attr(target), args, kwargs)
        return out if out is not None else super().call_module(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        return _replayed_method(target, args, kwargs, super().call_method)


def _pad(input, pad, mode="constant", value=None):
    """F.pad's shape: each padded axis grows by its two amounts (negative ones crop); torch's
    constant_pad_nd reads the amounts as concrete ints, and a pad computed from a dynamic size
    (up to a multiple of a chunk length) is a SymInt. A reflect pad takes fewer items than the
    axis has, a circular one at most as many: torch's kernels refuse other sizes, and the
    decision is kept (the model's range ends there)."""
    shape = list(input.shape)
    for i in range(len(pad) // 2):
        size = shape[-1 - i]
        for amount in (pad[2 * i], pad[2 * i + 1]):
            if mode in ("reflect", "circular") and isinstance(size, torch.SymInt) and not _plain_zero(amount):
                bool(size > amount if mode == "reflect" else size >= amount)  # a guard of the ShapeEnv
        shape[-1 - i] = _padded_size(size, pad[2 * i] + pad[2 * i + 1])
    return input.new_empty(shape)


def _plain_zero(v) -> bool:
    return type(v) is int and v <= 0


_PERIOD_MAX = 256  # the largest period of a pad amount checked residue by residue
_PERIODIC = ("FloorDiv", "CleanDiv", "Mod", "PythonMod")


def _padded_size(size, amount):
    """``size + amount``, as ``k * ((size + k - 1) // k)`` when it is that (a pad up to a multiple
    of ``k``: ``(k - w % k) % k``, Swin's windows). The plain sum nests the amount's modulos in
    every later size, and sympy then takes minutes over the views of a window partition.

    Proved, not sampled: an expression of one symbol built from sums, integer factors, floor
    divisions and modulos by integers is linear on each residue class modulo the product ``L`` of
    its divisors; three values per class (``3 * L`` sizes) equal make the two forms equal at every
    size (one more than a linear function needs)."""
    total = size + amount
    if not isinstance(total, torch.SymInt) or not isinstance(amount, torch.SymInt):
        return total
    from torch.utils._sympy.functions import FloorDiv

    expr = total.node.expr
    syms = expr.free_symbols
    calls = expr.atoms(sympy.Function)
    if any(type(a).__name__ not in _PERIODIC or not (len(a.args) == 2 and a.args[1].is_Integer and int(a.args[1]) > 0)
           for a in calls):
        return total  # a Max, a Min, a division by a size: not linear on residue classes
    divisors = {int(a.args[1]) for a in calls if int(a.args[1]) > 1}
    if len(syms) != 1 or not divisors or total.node.hint is None:
        return total
    (sym,) = syms
    period = math.prod(divisors)
    if period > _PERIOD_MAX:
        return total
    base = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
    for k in sorted(divisors):
        canon = k * FloorDiv(base + k - 1, k)
        if _equal_on_periods(expr, canon, sym, period):
            hint = k * -(-int(size) // k) if not isinstance(size, torch.SymInt) else k * -(-size.node.hint // k)
            return total.node.shape_env.create_symintnode(canon, hint=hint)
    return total


def _equal_on_periods(a, b, sym, period: int) -> bool:
    """Whether ``a`` and ``b`` (see :func:`_padded_size`) take the same value at three periods of
    sizes in a row, from the first size past those where one has no value: torch's ``Mod`` refuses
    a negative operand (``(T//8 - 1) % 8`` below T=8, sizes a convolution refuses anyway)."""
    def at(e, n):
        try:
            return e.xreplace({sym: sympy.Integer(n)})
        except (AssertionError, ArithmeticError):
            return None

    pairs = [(at(a, n), at(b, n)) for n in range(1, 4 * period + 1)]
    start = max((i + 1 for i, (x, y) in enumerate(pairs) if x is None or y is None), default=0)
    return len(pairs) - start >= 3 * period and all(x == y for x, y in pairs[start:])


def _solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """The solution's shape is the product's (torch's kernel reads the batch sizes as ints)."""
    return torch.matmul(A, B) if left else torch.matmul(B, A)


def _setitem_functional(x, index, value):
    """``x[index] = value`` on a copy has x's shape (torch's slice copy fixes the symbols)."""
    return x.clone()


def _padded_nonzero(cond, as_tuple=False):
    """Every coordinate of ``cond``'s shape: ``numel`` rows (no data needed, unlike nonzero)."""
    n = cond.numel()
    if as_tuple:
        return tuple(cond.new_empty((n,), dtype=torch.long) for _ in range(cond.dim()))
    return cond.new_empty((n, cond.dim()), dtype=torch.long)


def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """The shape of grouped_mm (torch's fake kernel accepts bfloat16 and aligned strides only,
    the CPU kernel float32 and any layout too)."""
    if mat_a.dim() == 2:
        shape = [offs.shape[0], mat_a.shape[0], mat_b.shape[1]] if mat_b.dim() == 2 else [mat_a.shape[0], mat_b.shape[-1]]
    else:
        shape = [mat_a.shape[1], mat_b.shape[1]] if mat_b.dim() == 2 else [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    return mat_a.new_empty(shape, dtype=out_dtype or mat_a.dtype)


def _symbolic_functions() -> dict:
    out = {setitem_functional: _setitem_functional, padded_nonzero: _padded_nonzero}
    for fn in (getattr(torch, "_grouped_mm", None), getattr(torch.nn.functional, "grouped_mm", None)):
        if fn is not None:
            out[fn] = _grouped_mm
    return {**_BASE_FUNCTIONS, **out}


def _math(name):
    fn = getattr(torch, f"_sym_{name}")
    return lambda x: fn(torch.sym_float(x) if isinstance(x, torch.SymInt) else x)


def _log_by_log2(factor: float):
    """A logarithm in another base as ``log2(x) * factor``, or ``log2(x) / log2(base)`` for
    ``math.log(x, base)`` (torch has a symbolic log2 only)."""
    log2 = _math("log2")

    def log(x, base=None):
        return log2(x) * factor if base is None else log2(x) / log2(base)
    return log


_MATH = {getattr(math, n): _math(n) for n in ("sqrt", "cos", "sin", "tan", "cosh", "sinh", "tanh", "acos", "asin",
                                              "atan", "log2")}
def _to_float(x):
    return torch.sym_float(x) if isinstance(x, torch.SymInt) else x


_MATH[math.isqrt] = lambda x: torch.sym_int(_MATH[math.sqrt](x)) if isinstance(x, torch.SymInt) else math.isqrt(x)
_MATH[math.exp] = lambda x: 2.0 ** (_to_float(x) * math.log2(math.e))
_MATH[math.pow] = lambda x, y: _to_float(x) ** _to_float(y)
_MATH[math.log] = _log_by_log2(math.log(2.0))
_MATH[math.log10] = _log_by_log2(math.log10(2.0))
def _scalar_division(fn):
    """``torch.div(S, 4, rounding_mode="trunc")`` (and floor_divide, remainder) of sizes: a 0-d
    tensor whose number a view then reads (``.item()``), which a fake tensor does not hold. On
    plain numbers and SymInts it is computed as Python numbers, which the reading call takes as
    they are; with a tensor argument it is torch's own call."""
    def call(a, b, *, rounding_mode=None, **kwargs):
        if kwargs or not all(isinstance(v, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(v, bool)
                             for v in (a, b)):
            return fn(a, b, rounding_mode=rounding_mode, **kwargs) if fn is torch.div else fn(a, b, **kwargs)
        if fn is torch.remainder:
            return a % b
        if fn is torch.floor_divide or rounding_mode == "floor":
            return a // b
        if rounding_mode == "trunc":
            if not (_non_negative(a) and _non_negative(b)):
                return fn(a, b, rounding_mode=rounding_mode)  # toward zero is no floor here: torch's call
            return a // b
        return a / b
    return call


def _non_negative(v) -> bool:
    """Whether ``v`` is a plain non-negative number or a SymInt sympy proves non-negative (a
    size, a sum of sizes; ``S - 10`` is not)."""
    if isinstance(v, (int, float)):
        return v >= 0
    return bool(v.node.expr.is_nonnegative)


def _tensor_of_number(fn):
    """``torch.tensor(S)`` of a size: a 0-d tensor a fake tensor cannot hold the number of (the
    ShapeEnv would fix S to its hint). Replayed as the number, as :func:`_scalar_division`; a
    tensor of anything else is torch's own call."""
    def call(data, *args, **kwargs):
        if isinstance(data, (torch.SymInt, torch.SymFloat)) and not args \
                and set(kwargs) <= {"dtype", "device", "requires_grad"}:
            dtype = kwargs.get("dtype")
            if dtype is None or (dtype.is_floating_point == isinstance(data, torch.SymFloat)):
                return data
            if dtype.is_floating_point:
                return torch.sym_float(data)
        return fn(data, *args, **kwargs)
    return call


def _is_scalar_index(i) -> bool:
    return isinstance(i, torch.Tensor) and i.dim() == 0 and not i.is_floating_point() and not i.is_complex() \
        and i.dtype != torch.bool


def _getitem(x, index):
    """``x[t]`` with a 0-d integer tensor ``t`` reads its number (a loop step's index in a vmapped
    mask function, ``padding_mask[batch_idx, kv_idx]``); the shape is that of ``x[0]``."""
    if isinstance(x, torch.Tensor):
        many = isinstance(index, tuple)
        items = index if many else (index,)
        if any(_is_scalar_index(i) for i in items):
            items = tuple(0 if _is_scalar_index(i) else i for i in items)
            return x[items if many else items[0]]
    return x[index]


def _masked_scatter(input, mask, source):
    """masked_scatter's shape: ``input`` and ``mask`` broadcast (torch's meta kernel expands
    with concrete sizes; a multimodal LM scatters image features into its embeddings so)."""
    return input + torch.zeros_like(mask, dtype=input.dtype)


def _number_like(v) -> bool:
    return isinstance(v, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool))


def _on_numbers(fn, python_op):
    """A comparison or logical op of size tensors (``torch.cond`` on sizes, see
    control_flow._size_comparison), whose 0-d tensors the replay keeps as numbers
    (:func:`_tensor_of_number`): computed as Python numbers; with a tensor argument it is
    torch's own call."""
    def call(a, b, **kwargs):
        if not kwargs and _number_like(a) and _number_like(b):
            return python_op(a, b)
        return fn(a, b, **kwargs)
    return call


def _where(condition, input, other):
    """``torch.where`` on a condition kept as a number (a SymBool of sizes): the shape is that of a
    0-d condition; the value is not read (a decision on it would fix the sizes)."""
    if _number_like(condition):
        condition = torch.empty((), dtype=torch.bool)
    return torch.where(condition, input, other)


_SYMBOLIC_FUNCTIONS: dict = {}  # filled on first use (the tracer's own functions import this module's users)
_BASE_FUNCTIONS = {
    torch.nn.functional.interpolate: _interpolate,
    torch.nn.functional.max_pool1d: _max_pool1d,
    torch.max_pool1d: _max_pool1d,
    torch.nn.functional.max_pool1d_with_indices: _max_pool1d_with_indices,
    torch.max_pool1d_with_indices: _max_pool1d_with_indices,
    torch.baddbmm: _baddbmm,
    torch.addcmul: _addcmul,
    torch.addcdiv: _addcdiv,
    torch.lerp: _lerp,
    torch.tensor_split: _tensor_split,
    torch.nn.functional.pad: _pad,
    torch.linalg.solve_triangular: _solve_triangular,
    operator.getitem: _getitem,
    torch.masked_scatter: _masked_scatter,
    torch.tensor: _tensor_of_number(torch.tensor),
    torch.as_tensor: _tensor_of_number(torch.as_tensor),
    torch.scalar_tensor: _tensor_of_number(torch.scalar_tensor),
    torch.div: _scalar_division(torch.div),
    torch.floor_divide: _scalar_division(torch.floor_divide),
    torch.remainder: _scalar_division(torch.remainder),
    **{fn: _on_numbers(fn, op) for fn, op in ((torch.gt, operator.gt), (torch.lt, operator.lt), (torch.ge, operator.ge),
                                              (torch.le, operator.le), (torch.eq, operator.eq), (torch.ne, operator.ne),
                                              (torch.logical_and, operator.and_), (torch.logical_or, operator.or_))},
    torch.where: _where,
    **_MATH,
}
_SYMBOLIC_METHODS = {"baddbmm": _baddbmm, "tensor_split": _tensor_split, "masked_scatter": _masked_scatter,
                     "addcmul": _addcmul, "addcdiv": _addcdiv, "lerp": _lerp}


class _NoKey(Exception):
    pass


def _memo_key(op: str, target, args, kwargs, tensor_keys: Optional[dict] = None):
    """A hashable description of a call by everything a fake kernel reads (None: not reusable).
    ``tensor_keys`` caches the keys of the tensors seen (a tensor is an argument of many calls;
    no call changes a tensor's metadata where calls are reused: none is in place)."""
    try:
        return op, target, _key_of(args, tensor_keys), _key_of(tuple(sorted(kwargs.items())), tensor_keys)
    except (_NoKey, TypeError):
        return None


def _ints_key(xs) -> tuple:
    """The key of a sequence of sizes (ints, or SymInts of the replay)."""
    return tuple(v if type(v) is int else _key_of(v) for v in xs)


def _key_of(x, tensor_keys: Optional[dict] = None):
    if isinstance(x, torch.Tensor):
        if tensor_keys is None:
            return _tensor_key(x)
        held = tensor_keys.get(id(x))
        if held is None:
            held = tensor_keys[id(x)] = (x, _tensor_key(x))
        return held[1]
    if type(x) is int:
        return ("int", x)
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return (type(x).__name__, x.node.expr)
    if isinstance(x, (tuple, list)):
        return (type(x).__name__,) + tuple(_key_of(v, tensor_keys) for v in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((k, _key_of(v, tensor_keys)) for k, v in x.items())
    if isinstance(x, slice):
        return ("slice", _key_of(x.start), _key_of(x.stop), _key_of(x.step))
    if x is None or x is Ellipsis or isinstance(x, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                                     torch.memory_format)):
        return (type(x).__name__, x)
    raise _NoKey


def _tensor_key(x: torch.Tensor) -> tuple:
    from torch._subclasses.fake_tensor import FakeTensor

    # a real tensor (a parameter) is made fake without its data; a fake one holding a
    # constant (torch.tensor in the graph) may be computed on: its data may matter
    if (isinstance(x, FakeTensor) and x.constant is not None) or x.layout != torch.strided:
        raise _NoKey
    offset = x.storage_offset()
    return ("T", x.dtype, x.device, x.requires_grad, _ints_key(x.shape), _ints_key(x.stride()),
            offset if type(offset) is int else _key_of(offset))


def _equalities(shape_env, guards: list) -> dict:
    """``expression -> simpler equal expression`` from the ShapeEnv's equality guards: a
    reshape to ``(-1, 2)`` leaves a dim ``S//(S//2)`` and the guard that it equals 2."""
    out = {}
    for expr, _node in guards:
        expr = shape_env.replace(expr)
        if type(expr).__name__ != "Equality":
            continue
        a, b = expr.args
        # not by the text: (W//2) == (H//2) at a square example would be "simpler" by its
        # symbols' names (s1 against s36), and every W//2 would become H//2
        key = (sympy.count_ops(a), len(a.free_symbols)), (sympy.count_ops(b), len(b.free_symbols))
        if key[0] != key[1]:
            complex_, simple = (a, b) if key[0] > key[1] else (b, a)
            out.setdefault(complex_, simple)
    return out


class _Converter:
    """Fake values and sympy expressions -> IR dims and Python evaluators."""

    def __init__(self, shape_env, symbols: dict, equal: dict):
        self.shape_env, self.symbols, self.equal = shape_env, symbols, equal
        self.conditions: list = []  # (sympy condition, node): where a dim written as a floor holds
        # the repeated layers of a model give the same expressions over and over
        self._exprs: dict = {}
        self._dims: dict = {}

    def expr(self, x):
        raw = x.node.expr
        e = self._exprs.get(raw)
        if e is None:
            e = self.shape_env.replace(raw)
            e = e.xreplace(self.equal) if self.equal else e
            if any(_is_extremum(a) for a in sympy.preorder_traversal(e)):
                e = _settle_extrema(e, self.symbols)
            self._exprs[raw] = e
        return e

    def depends(self, value) -> bool:
        if isinstance(value, torch.Tensor):
            return any(isinstance(d, torch.SymInt) and self.expr(d).free_symbols for d in value.shape)
        if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return bool(self.expr(value).free_symbols)
        if isinstance(value, (list, tuple)):
            return any(self.depends(v) for v in value)
        return False

    def dim(self, d, node):
        if isinstance(d, int):
            return d
        try:
            e = self.expr(d)
            out = self._dims.get(e)
            if out is None:  # the conditions of an expression seen before are those of its first node
                conditions = []
                out = self._dims[e] = to_dim(e, self.symbols, conditions)
                self.conditions.extend((c, node) for c in conditions)
            return out
        except RootOfSize as exc:
            source = node.meta.get("source") or next((u.meta["source"] for u in node.users if u.meta.get("source")), None)
            raise TraceError(root_refusal(exc, self.symbols, source)) from None
        except ValueError as exc:
            where = f" (in '{node.name}'" + (f" at {node.meta['source']})" if node.meta.get("source") else ")")
            raise ReplayUnavailable(f"the size {exc} has no IR form{where}") from None

    def value(self, value, node):
        if isinstance(value, torch.Tensor):
            return tuple(self.dim(d, node) for d in value.shape)
        if isinstance(value, torch.SymInt):
            return self.dim(value, node)
        if isinstance(value, (torch.SymBool, torch.SymFloat)):
            e = self.expr(value)
            if e.free_symbols:
                return VARIES
            return bool(e) if isinstance(value, torch.SymBool) else float(e)
        if isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, (list, tuple)):
            return tuple(self.value(v, node) for v in value)
        return None

    def evaluator(self, value, piece: bool = False):
        """``env -> value`` at other sizes, for what a tracer guard reads (None: not known).

        A tensor inside a sequence evaluates to None: a guard reads only how many pieces there
        are, and where that number changes the ShapeEnv has a guard of its own."""
        if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return _compile(self.expr(value), self.symbols)
        if isinstance(value, torch.Tensor) and piece:
            return _const(None)
        if isinstance(value, (list, tuple)):
            items = [self.evaluator(v, True) for v in value]
            if any(i is None for i in items):
                return None
            return lambda env: tuple(i(env) for i in items)
        if isinstance(value, (bool, int, float)):
            return _const(value)
        return None


def _const(v):
    return lambda env: v


def _settle_extrema(expr, symbols: dict):
    """``expr`` with each ``Max`` and ``Min`` replaced by the argument that is the largest
    (smallest) at every size of at least 1 (``Max(1, 4*((S + 3)//4))``: torch's flatten and view
    guard against empty axes, which a dynamic axis never is), found from the arguments' bounds
    by torch's value-range analysis; an extremum it cannot settle is kept (an atom of the IR
    dim, see SymDim.extremum)."""
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy
    from torch.utils._sympy.numbers import int_oo

    ranges = {sym: ValueRanges(1, int_oo) for sym in symbols}

    def settle(m):
        pick = max if type(m).__name__ == "Max" else min  # sympy's or torch's own class
        for a in m.args:
            others = [b for b in m.args if b is not a]
            try:
                gaps = [bound_sympy(a - b if pick is max else b - a, ranges) for b in others]
            except Exception:  # noqa: BLE001 - an expression the analysis does not know: keep it
                return m
            if all(g.lower >= 0 for g in gaps):
                return a
        return m

    return expr.replace(_is_extremum, settle)


def _is_extremum(e) -> bool:
    """sympy's Max and Min, or torch's own (``torch.utils._sympy.functions``)."""
    return type(e).__name__ in ("Max", "Min")


def to_dim(expr, symbols: dict, conditions: Optional[list] = None):
    """A sympy integer expression of the ShapeEnv's symbols as an IR dim (int or SymDim);
    ``ValueError`` names the part with no IR form (a symbol that is no input size).

    ``conditions``: where given, a truncation whose argument may be negative (``int((S - 127) /
    64 + 1)``, Moonshine's output lengths) is written as a floor and the sympy condition under
    which the two agree (the argument is not negative) is appended; the caller makes it a
    decision whose flip bounds the range. Without it such a truncation raises."""
    def sub(e):
        return to_dim(e, symbols, conditions)

    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if expr not in symbols:
            raise ValueError(str(expr))
        return SymDim.symbol(symbols[expr])
    kind = type(expr).__name__
    args = expr.args
    if kind == "Add":
        total = 0
        for a in args:
            total = total + sub(a)
        return total
    if kind == "Mul":
        prod = 1
        for a in args:
            prod = prod * sub(a)
        return prod
    if kind in ("Pow", "PowByNatural") and args[1].is_Integer and int(args[1]) >= 0:
        base, prod = sub(args[0]), 1
        for _ in range(int(args[1])):
            prod = prod * base
        return prod
    if kind in ("FloorDiv", "CleanDiv", "CeilDiv", "Mod", "PythonMod") and args[1].is_Integer and int(args[1]) > 0:
        num, d = sub(args[0]), int(args[1])
        if kind == "CeilDiv":
            num = num + (d - 1)
        if isinstance(num, int):
            q = num // d
        else:
            q = SymDim.floordiv(num, d)
        return num - d * q if kind in ("Mod", "PythonMod") else q
    root = integer_root(expr)  # int(N ** 0.5) of N = (H // p) ** 2: H // p (else RootOfSize)
    if root is not None:
        return sub(root)
    if kind in ("CeilToInt", "FloorToInt", "TruncToInt"):
        # math.ceil(S / 4), math.floor(S * 0.25), int(S * 0.3): a true division of an integer size by
        # a positive integer, rounded, is a floor division (``ceil(a / k) = (a + k - 1) // k``);
        # truncating is flooring where ``a`` is never negative (no negative term: S - 10 may be)
        parts = _int_over(args[0])
        if parts is not None:
            num, d = sub(parts[0]) * parts[1] + parts[3], parts[2]
            if kind == "TruncToInt" and not (num >= 0 if isinstance(num, int) else
                                             all(c >= 0 for c in num.terms.values())):
                if conditions is None or isinstance(num, int):
                    raise ValueError(str(expr))
                # int() rounds toward zero, a floor division toward minus infinity: equal while
                # the argument is not negative (and where it is, a conv would refuse the size)
                conditions.append(sympy.Ge(parts[0] * parts[1] + parts[3], 0))
            if kind == "CeilToInt":
                num = num + (d - 1)
            return num // d if isinstance(num, int) else SymDim.floordiv(num, d)
    if kind in ("Max", "Min") and args:
        # max(1, S // 2) items, min(S, window): an extremum of sizes that no side wins at every
        # size (those are settled before, see _settle_extrema) is an atom tract reads as written
        pick = max if kind == "Max" else min
        out = sub(args[0])
        for a in args[1:]:
            out = SymDim.extremum(pick, out, sub(a))
        return out
    if kind in ("FloorDiv", "CleanDiv", "Mod", "PythonMod") and len(args) == 2:
        # a size divided by a size: exact when the numerator is a multiple of the divisor as
        # polynomials (reshape(-1, 64) of a length padded to a multiple of 64: L // (L // 64) is
        # 64; view(-1, L, L) of a (B, 12, L, L) tensor: 12*B*L**2 // (12*L**2) is B)
        num, den = sub(args[0]), sub(args[1])
        q = exact_quotient(num, den) if isinstance(den, SymDim) else None
        if q is not None:
            return q if kind in ("FloorDiv", "CleanDiv") else 0
    raise ValueError(str(expr))


def _int_over(expr) -> Optional[tuple]:
    """``(a, p, k, c)`` when ``expr`` is the float ``(a * p + c) / k`` of an integer expression
    ``a`` and integers ``p, k > 0`` and ``c`` (``IntTrueDiv(a, k)``, or ``ToFloat(a)`` times a float ``c`` as in
    ``floor(S * 0.75)``, ``floor(S * 0.6)``), else None. A float ``c`` stands for the fraction
    ``p / k`` of small terms nearest to it only where rounding ``a * c`` as Python does gives the
    same integer as ``a * p / k`` at every ``a`` up to :data:`_EXACT_UP_TO` (``0.6`` is ``3 / 5``
    there; ``0.7`` is not ``7 / 10``: ``floor(90 * 0.7)`` is 62)."""
    kind = type(expr).__name__
    if kind == "Add":
        # a whole number added in float (``(S - 127) / 64 + 1``): exact for sizes below 2**20
        # or a number of small power-of-two denominator (``+ 0.5``)
        numbers = [a for a in expr.args if a.is_Number]
        rest = [a for a in expr.args if not a.is_Number]
        if len(rest) != 1 or not numbers:
            return None
        c = sum(Fraction(float(a)) for a in numbers)
        inner = _int_over(rest[0])
        if inner is None or c.denominator > 1024 or abs(c) > _EXACT_UP_TO:
            return None
        a, p, k, offset = inner
        m, n = c.denominator, c.numerator
        return a, p * m, k * m, offset * m + n * k
    if kind == "IntTrueDiv" and expr.args[1].is_Integer and int(expr.args[1]) > 0:
        return expr.args[0], 1, int(expr.args[1]), 0
    if kind == "Mul" and len(expr.args) == 2:
        coef, rest = sorted(expr.args, key=lambda a: not a.is_Number)
        if coef.is_Number and type(rest).__name__ == "ToFloat" and float(coef) > 0:
            k = _fraction_of(float(coef))
            if k is not None:
                return rest.args[0], k.numerator, k.denominator, 0
    return None


_EXACT_UP_TO = 1 << 20  # sizes (and products of sizes) a float scale is checked exact up to


@functools.lru_cache(maxsize=None)
def _fraction_of(c: float) -> Optional[Fraction]:
    """The fraction ``c`` stands for in ``floor(a * c)`` and ``ceil(a * c)`` of integers ``a``
    (see :func:`_int_over`): ``c`` itself when its denominator is a small power of two, else the
    nearest fraction of terms up to 1000 where it rounds as that fraction; or None."""
    k = Fraction(c)
    if k.denominator <= 1024 and 0 < k.numerator <= 1 << 20:
        return k  # a power-of-two denominator: a * c is exact, and so is its floor
    if k.denominator > 1000:
        k = k.limit_denominator(1000)
    if k.numerator > 1000 or k <= 0:
        return None
    a = np.arange(1, _EXACT_UP_TO, dtype=np.int64)
    prod = a.astype(np.float64) * c
    if not (np.array_equal(np.floor(prod).astype(np.int64), a * k.numerator // k.denominator)
            and np.array_equal(np.ceil(prod).astype(np.int64), -(-a * k.numerator // k.denominator))):
        return None
    return k


def _compile(expr, symbols: dict) -> Callable[[dict], object]:
    """A fast Python evaluator ``env -> value`` of a sympy expression of the symbols: the
    expression written as one Python lambda (size scans evaluate it at thousands of sizes), or
    nested closures where Python cannot compile that text (an expression nested too deep)."""
    consts: dict = {}
    text = _source(expr, symbols, consts)
    try:
        return eval(f"lambda env: {text}", {**_OP_NAMES, **consts})  # noqa: S307 - text built above
    except (SyntaxError, RecursionError, MemoryError):
        return _closures(expr, symbols)


# operators written inline (each folds left to right as the _OPS function does); _OPS otherwise
_INFIX = {"Add": "+", "Mul": "*", "FloorDiv": "//", "CleanDiv": "//", "Mod": "%", "PythonMod": "%",
          "Equality": "==", "Unequality": "!=", "StrictLessThan": "<", "LessThan": "<=",
          "StrictGreaterThan": ">", "GreaterThan": ">="}
_COMPARISONS = {"Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan"}


def _source(expr, symbols: dict, consts: dict) -> str:
    """Python text of ``expr`` for :func:`_compile`: symbols read from ``env``, numbers bound as
    names in ``consts`` (exactly the values :func:`_closures` uses), operators inline or as calls
    of ``_OPS``' functions (``_op_<name>``), with the same order of evaluation and the same
    errors (And/Or evaluate every argument, as ``all`` over a tuple does)."""
    if expr is sympy.true or expr is sympy.false or expr.is_Number:
        v = bool(expr) if expr is sympy.true or expr is sympy.false else int(expr) if expr.is_Integer \
            else float(expr)
        name = f"_c{len(consts)}"
        consts[name] = v
        return name
    if expr.is_Symbol:
        if expr not in symbols:
            raise ReplayUnavailable(f"the expression reads '{expr}', which is not an input size")
        return f"env[{symbols[expr]!r}]"
    kind = type(expr).__name__
    if kind not in _OPS:
        raise ReplayUnavailable(f"no evaluator for {kind} in {expr}")
    parts = [_source(a, symbols, consts) for a in expr.args]
    if kind in _INFIX and (len(parts) == 2 or kind not in _COMPARISONS):  # no chained comparisons
        acc = parts[0]
        for p in parts[1:]:
            acc = f"({acc} {_INFIX[kind]} {p})"
        return acc
    if kind == "Not":
        return f"(not {parts[0]})"
    if kind in ("And", "Or"):
        return f"_op_{kind}(*({', '.join(parts)},))"
    return f"_op_{kind}({', '.join(parts)})"


def _closures(expr, symbols: dict) -> Callable[[dict], object]:
    """:func:`_compile`'s evaluator as nested closures, one per node of the expression."""
    if expr is sympy.true or expr is sympy.false:
        v = bool(expr)
        return lambda env: v
    if expr.is_Integer:
        v = int(expr)
        return lambda env: v
    if expr.is_Number:
        v = float(expr)
        return lambda env: v
    if expr.is_Symbol:
        if expr not in symbols:
            raise ReplayUnavailable(f"the expression reads '{expr}', which is not an input size")
        name = symbols[expr]
        return lambda env: env[name]
    fn = _OPS.get(type(expr).__name__)
    if fn is None:
        raise ReplayUnavailable(f"no evaluator for {type(expr).__name__} in {expr}")
    parts = [_closures(a, symbols) for a in expr.args]
    return lambda env: fn(*(p(env) for p in parts))


def _fold(op):
    def apply(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = op(acc, x)
        return acc
    return apply


def _int(x):
    return int(x) if float(x).is_integer() else x


_OPS = {
    "Add": _fold(operator.add), "Mul": _fold(operator.mul),
    "Pow": lambda a, b: _int(a ** b), "PowByNatural": operator.pow, "FloatPow": lambda a, b: float(a) ** float(b),
    "FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv, "CeilDiv": lambda a, b: -(-a // b),
    "Mod": operator.mod, "PythonMod": operator.mod,
    "IntTrueDiv": lambda a, b: a / b, "FloatTrueDiv": lambda a, b: a / b, "ToFloat": float,
    "TruncToInt": lambda a: int(math.trunc(a)), "FloorToInt": lambda a: math.floor(a),
    "CeilToInt": lambda a: math.ceil(a), "RoundToInt": lambda a: round(a), "TruncToFloat": lambda a: float(math.trunc(a)),
    "Max": _fold(max), "Min": _fold(min),
    "Equality": operator.eq, "Unequality": operator.ne, "StrictLessThan": operator.lt, "LessThan": operator.le,
    "StrictGreaterThan": operator.gt, "GreaterThan": operator.ge,
    "And": lambda *xs: all(xs), "Or": lambda *xs: any(xs), "Not": operator.not_,
    "OpaqueUnaryFn_sqrt": math.sqrt, "OpaqueUnaryFn_exp": math.exp, "OpaqueUnaryFn_log": math.log,
    "OpaqueUnaryFn_log2": math.log2,
}
_OP_NAMES = {f"_op_{k}": v for k, v in _OPS.items()}
