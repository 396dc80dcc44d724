"""Decisions far above the example that the graph does not see: a Python ``if`` on a size whose
other outcome traces the very same graph (diffusers' ``Upsample2D`` makes its input contiguous
when ``shape[0] >= 64``; the graph has no such op either way).

The analysis finds where such a decision changes (B = 64) and, without more, must end the range
there, or have the model traced again there and analysed at those sizes (64 times the batch of
the example, every probe of it). Instead, the caller that traces (``capture``) lends a hook:
``same_graph_at(env)`` traces the forward at ``env`` and says whether the graph is this one. When
it is, the decisions there make no difference to what is exported, and the range goes on to the
next change (see ``probe._Analyzer._bound_far_changes``): one trace, no analysis.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch
import torch.fx as fx

_HOOKS: list = []  # the innermost caller's hook: env -> whether the graph traced there is the same
# the largest size a forward is traced at beyond the example, unless 4x the example is larger (a
# trace there costs its sizes)
FAR_RETRACE = 1024


def within_trace_reach(size: int, example: int) -> bool:
    """Whether a trace where a symbol is ``size`` (its example ``example``) is affordable."""
    return size <= max(4 * example, FAR_RETRACE)


@contextlib.contextmanager
def same_graph_hook(fn: Optional[Callable[[dict], bool]]):
    """Within the block, :func:`same_graph_at` asks ``fn`` (None: no hook, always False)."""
    _HOOKS.append(fn)
    try:
        yield
    finally:
        _HOOKS.pop()


def same_graph_at(env: dict) -> bool:
    """Whether the forward traced at the sizes ``env`` gives the graph being analysed (False
    without a hook, or when the trace there fails)."""
    fn = _HOOKS[-1] if _HOOKS else None
    if fn is None:
        return False
    try:
        return bool(fn(env))
    except Exception:  # noqa: BLE001 - a trace that fails there: the range ends there as before
        return False


def same_graph(a: fx.GraphModule, b: fx.GraphModule) -> bool:
    """Whether ``a`` and ``b`` compute the same thing: the same nodes in the same order, with the
    same targets and arguments (nodes by position, numbers by value), and equal constants; ops
    that give their input's values (``contiguous``, ``clone``, ``detach``) left out."""
    na, nb = _kept(a), _kept(b)
    if len(na) != len(nb):
        return False
    index_a = {n: i for i, n in enumerate(na)}
    index_b = {n: i for i, n in enumerate(nb)}
    for x, y in zip(na, nb):
        if x.op != y.op or x.target != y.target and x.op != "get_attr":
            return False
        if x.op == "get_attr" and not _same_value(_attr(a, x.target), _attr(b, y.target)):
            return False
        if _key(x.args, index_a) != _key(y.args, index_b) or _key(x.kwargs, index_a) != _key(y.kwargs, index_b):
            return False
    return True


_SAME_VALUES = {"contiguous", "clone", "detach", torch.clone, torch.detach}


def _kept(gm: fx.GraphModule) -> list:
    """The nodes of ``gm`` but those giving their input's values, which stand for their input
    (see :func:`_origin`)."""
    return [n for n in gm.graph.nodes if not _gives_its_input(n)]


def _gives_its_input(n: fx.Node) -> bool:
    """Whether ``n`` gives its first argument's values (``x.contiguous()``, ``x.clone()``, ...)."""
    return n.op in ("call_method", "call_function") and n.target in _SAME_VALUES and bool(n.args) \
        and isinstance(n.args[0], fx.Node) and set(n.kwargs) <= {"memory_format"}


def _origin(n: fx.Node) -> fx.Node:
    while _gives_its_input(n):
        n = n.args[0]
    return n


def _attr(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _same_value(x, y) -> bool:
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape \
            and x.dtype == y.dtype and (x is y or bool(torch.equal(x, y)))
    return x is y or type(x) is type(y) and x == y


def _key(a, index: dict):
    """A comparable form of a node's arguments: nodes as their position."""
    if isinstance(a, fx.Node):
        return ("node", index.get(_origin(a)))
    if isinstance(a, (tuple, list)):
        return (type(a).__name__,) + tuple(_key(x, index) for x in a)
    if isinstance(a, dict):
        return ("dict",) + tuple((k, _key(v, index)) for k, v in a.items())
    if isinstance(a, slice):
        return ("slice", _key(a.start, index), _key(a.stop, index), _key(a.step, index))
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), str(a.dtype), tuple(a.flatten().tolist()) if a.numel() <= 64 else id(a))
    return (type(a).__name__, repr(a))
