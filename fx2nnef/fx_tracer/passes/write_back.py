"""Write-back through a view: the base that results when a view of it takes a new value.

``v = x[1:3]`` then ``v`` gets ``v2``: ``x`` becomes ``setitem_functional(x, (slice(1, 3),), v2)``.
Each rule inverts one view op with cheap ops (reshape back, inverse permutation, item
assignment, the first row of an expanded axis). A view op without a rule is inverted by
replaying it on an index tensor: ``arange(x.numel())`` viewed like ``x`` and put through the
same view op tells, for every element of the view, its position in ``x``; the new values are
scattered there. This is what torch's functionalization does with ``as_strided_scatter``.
"""
from __future__ import annotations

import operator
from typing import Callable, Optional

import torch
import torch.fx as fx

from ...errors import TraceError
from ..tracing.tracer import setitem_functional
from ..tracing.written_constants import same_view

_RESHAPES = {"view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "squeeze", "unsqueeze",
             "ravel", "atleast_1d", "atleast_2d", "atleast_3d"}
_SWAPS = {"transpose", "swapaxes", "swapdims"}
_EXPANDS = {"expand", "expand_as", "broadcast_to", "broadcast_tensors"}
_MISSING = object()


class Emitter:
    """Where write-back nodes go: before ``cursor``, with the meta of the view they invert."""

    def __init__(self, graph: fx.Graph, current: Callable[[fx.Node], fx.Node], resolve: Callable[[fx.Node], fx.Node]):
        self.graph = graph
        self.current = current  # original node -> the node holding its value at the cursor
        self.resolve = resolve  # a removed mutation node -> the node it updated
        self.cursor: Optional[fx.Node] = None

    def node(self, op: str, target, args, like: fx.Node, value=_MISSING) -> fx.Node:
        with self.graph.inserting_before(self.cursor):
            new = self.graph.create_node(op, target, tuple(args), {})
        for key in ("source", "module_path", "module_type", "nn_module_stack"):
            if key in like.meta:
                new.meta[key] = like.meta[key]
        new.meta["value"] = like.meta.get("value") if value is _MISSING else value
        return new

    def method(self, name: str, args, like: fx.Node, value=_MISSING) -> fx.Node:
        return self.node("call_method", name, args, like, value)

    def function(self, fn, args, like: fx.Node, value=_MISSING) -> fx.Node:
        return self.node("call_function", fn, args, like, value)


def view_name(node: fx.Node) -> Optional[str]:
    """The torch name of the op of ``node`` (``transpose`` for the method and the function)."""
    if node.op == "call_method":
        return node.target
    if node.op == "call_function":
        if node.target is operator.getitem:
            return "getitem"
        if node.target is getattr:
            return node.args[1]
        return getattr(node.target, "__name__", None)
    return None


def _param(node: fx.Node, pos: int, name: str, default=_MISSING):
    """Argument ``pos`` (counted after the viewed tensor) or keyword ``name`` of a view op."""
    rest = node.args[1:]
    if pos < len(rest):
        return rest[pos]
    if name in node.kwargs:
        return node.kwargs[name]
    if default is _MISSING:
        raise KeyError(name)
    return default


def _dims(node: fx.Node, name: str) -> list:
    """The int-list argument of ``permute``-like ops, given as varargs or as one list."""
    rest = node.args[1:]
    if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
        return list(rest[0])
    return list(rest) if rest else list(node.kwargs[name])


def _value(node: fx.Node) -> torch.Tensor:
    return node.meta["value"]


def _rank(node: fx.Node) -> int:
    return _value(node).dim()


def write_back(em: Emitter, steps: list, parent: fx.Node, parent_cur: fx.Node, new_child: fx.Node) -> fx.Node:
    """The node holding ``parent`` once the view ``steps[-1]`` of it holds ``new_child``.

    ``steps`` are the original nodes from ``parent`` to the view: one view op, or an op
    returning several views followed by the ``getitem`` that picks one. ``parent_cur`` is the
    current version of ``parent``.
    """
    child = steps[-1]
    pv, cv = parent.meta.get("value"), child.meta.get("value")
    if isinstance(pv, torch.Tensor) and isinstance(cv, torch.Tensor) and pv.dtype != cv.dtype:
        raise TraceError(f"in-place update of a view that reinterprets {pv.dtype} memory as {cv.dtype} "
                         f"('{view_name(steps[0])}'{_at(steps[0])}) is not supported; "
                         "make that view a copy with .clone() or update the original tensor")
    rule = _rule(steps)
    if rule is None and same_geometry(pv, cv):
        rule = _identity  # contiguous(), to(), float(), dropout in eval mode, nn.Identity: the base itself
    new = rule(em, steps, parent, parent_cur, new_child) if rule is not None else None
    if new is None:
        new = _by_index_replay(em, steps, parent, parent_cur, new_child)
    return new


def same_geometry(a, b) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_view(a, b)


def _rule(steps: list):
    first = view_name(steps[0])
    if len(steps) == 2:
        return _MULTI_RULES.get(first)
    if first in _RESHAPES:
        return _reshape_back
    if first in _SWAPS:
        return _swap_back
    if first in _EXPANDS:
        return _first_of_expanded
    return _SINGLE_RULES.get(first)


# rules ----------------------------------------------------------------------------------
def _reshape_back(em, steps, parent, parent_cur, new_child):
    if not isinstance(_value(steps[-1]), torch.Tensor) or _value(steps[-1]).numel() != _value(parent).numel():
        return None
    return em.method("reshape_as", (new_child, parent_cur), parent)


def _swap_back(em, steps, parent, parent_cur, new_child):
    view = steps[0]
    return em.method("transpose", (new_child, _param(view, 0, "dim0"), _param(view, 1, "dim1")), parent)


def _permute_back(em, steps, parent, parent_cur, new_child):
    perm = [p % _rank(parent) for p in _dims(steps[0], "dims")]
    inverse = [perm.index(i) for i in range(len(perm))]
    return em.method("permute", (new_child, inverse), parent)


def _movedim_back(em, steps, parent, parent_cur, new_child):
    view = steps[0]
    return em.method("movedim", (new_child, _param(view, 1, "destination"), _param(view, 0, "source")), parent)


def _reverse_back(em, steps, parent, parent_cur, new_child):
    """``t()`` and ``.T`` reverse the axes: reversing them again undoes it."""
    r = _rank(parent)
    return new_child if r < 2 else em.method("permute", (new_child, list(reversed(range(r)))), parent)


def _last_two_back(em, steps, parent, parent_cur, new_child):
    """``.mT`` and ``adjoint()`` swap the last two axes."""
    return em.method("transpose", (new_child, -2, -1), parent)


def _identity(em, steps, parent, parent_cur, new_child):
    return new_child


def _set_index(em, parent, parent_cur, index: tuple, new_child):
    return em.function(setitem_functional, (parent_cur, index, new_child), parent)


def _leading(parent: fx.Node, dim) -> tuple:
    return (slice(None),) * (dim % _rank(parent))


def _select_back(em, steps, parent, parent_cur, new_child):
    view = steps[0]
    dim, index = _param(view, 0, "dim"), _param(view, 1, "index")
    return _set_index(em, parent, parent_cur, _leading(parent, dim) + (index,), new_child)


def _narrow_back(em, steps, parent, parent_cur, new_child):
    view = steps[0]
    dim, start, length = _param(view, 0, "dim"), _param(view, 1, "start"), _param(view, 2, "length")
    if isinstance(start, int) and start < 0:
        if not isinstance(length, int):
            return None
        stop = start + length
        item = slice(start, stop if stop < 0 else None)
    elif isinstance(start, int) and isinstance(length, int):
        item = slice(start, start + length)
    else:
        stop = em.function(operator.add, (start, length), view, value=_size_value(start) + _size_value(length))
        item = slice(start, stop)
    return _set_index(em, parent, parent_cur, _leading(parent, dim) + (item,), new_child)


def _size_value(x) -> int:
    return x.meta["value"] if isinstance(x, fx.Node) else x


def _getitem_back(em, steps, parent, parent_cur, new_child):
    index = steps[0].args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if any(not (i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i)) for i in items):
        return None
    if any(isinstance(i, slice) and i.step not in (None, 1) for i in items):
        return None  # the emitter writes slices with step 1 only: the index replay covers the others
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    at = next((k for k, i in enumerate(items) if i is Ellipsis), len(items))
    items = items[:at] + [slice(None)] * (_rank(parent) - consumed) + items[at + 1:]
    new_axes, pos = [], 0
    for item in items:
        if item is None:
            new_axes.append(pos)
        if item is None or isinstance(item, slice):
            pos += 1
    value = new_child
    if new_axes:
        value = em.method("squeeze", (new_child, tuple(new_axes)), parent, value=_squeezed(new_child, new_axes))
    kept = tuple(i for i in items if i is not None)
    if all(isinstance(i, slice) and i == slice(None) for i in kept):
        return value
    return _set_index(em, parent, parent_cur, kept, value)


def _is_int(item) -> bool:
    if isinstance(item, fx.Node):
        item = item.meta.get("value")
    return isinstance(item, int) and not isinstance(item, bool)


def _squeezed(node: fx.Node, axes: list):
    v = node.meta.get("value")
    return v.squeeze(tuple(axes)) if isinstance(v, torch.Tensor) else None


def _first_of_expanded(em, steps, parent, parent_cur, new_child):
    """An expanded view holds copies of its base: the base takes the first of each."""
    pshape, cshape = _value(parent).shape, _value(steps[-1]).shape
    lead = len(cshape) - len(pshape)
    index = (0,) * lead + tuple(slice(0, 1) if p == 1 and c != 1 else slice(None)
                                for p, c in zip(pshape, cshape[lead:]))
    if all(isinstance(i, slice) and i == slice(None) for i in index):
        return new_child
    return em.function(operator.getitem, (new_child, index), parent)


def _unbind_back(em, steps, parent, parent_cur, new_child):
    multi, pick = steps
    return _set_index(em, parent, parent_cur, _leading(parent, _param(multi, 0, "dim", 0)) + (pick.args[1],), new_child)


def _split_back(em, steps, parent, parent_cur, new_child):
    multi, pick = steps
    size, dim, i = _param(multi, 0, "split_size_or_sections", None), _param(multi, 1, "dim", 0), pick.args[1]
    if size is None:
        size = multi.kwargs.get("split_size")
    if isinstance(size, (list, tuple)) and all(isinstance(s, int) for s in size):
        item = slice(sum(size[:i]), sum(size[:i + 1]))
    elif isinstance(size, int) and isinstance(i, int) and i >= 0:
        item = slice(i * size, (i + 1) * size)
    else:
        return None
    return _set_index(em, parent, parent_cur, _leading(parent, dim) + (item,), new_child)


def _by_index_replay(em, steps, parent, parent_cur, new_child):
    """Scatter ``new_child`` into ``parent`` at the positions the view ops pick out of it."""
    if _is_overlapping(steps[-1]):
        raise TraceError(f"in-place update of '{steps[-1].name}' writes several elements through one memory "
                         f"location (a view made by '{view_name(steps[0])}'{_at(steps[0])}); clone the view first")
    pv = _value(parent)
    replayed = {parent: _positions(em, parent, parent_cur)}
    try:
        for step in steps:
            value = _replay_value(step, replayed, em.resolve)
            with em.graph.inserting_before(em.cursor):
                new = em.graph.node_copy(step, lambda n: replayed.get(em.resolve(n)) or em.current(n))
            new.meta["value"] = value
            replayed[step] = new
    except Exception as exc:  # noqa: BLE001 - any op that cannot run on positions
        raise TraceError(f"in-place update of a view made by '{view_name(steps[0])}'{_at(steps[0])} cannot be "
                         f"written back to the tensor it views ({type(exc).__name__}: {exc}); update the original "
                         "tensor instead, or make the view a copy with .clone()") from exc
    where = replayed[steps[-1]]
    flat_where = em.method("reshape", (where, -1), steps[-1], value=where.meta["value"].reshape(-1))
    flat_base = em.method("reshape", (parent_cur, -1), parent, value=pv.reshape(-1))
    new_value = new_child.meta.get("value")
    flat_new = em.method("reshape", (new_child, -1), steps[-1],
                         value=new_value.reshape(-1) if isinstance(new_value, torch.Tensor) else None)
    written = em.function(setitem_functional, (flat_base, (flat_where,), flat_new), parent, value=pv.reshape(-1))
    return em.method("reshape_as", (written, parent_cur), parent)


def _positions(em: Emitter, parent: fx.Node, parent_cur: fx.Node) -> fx.Node:
    """``arange(numel).reshape(shape)`` of ``parent``, built as a broadcast sum of one arange
    per axis times its row-major stride (a reshape of an arange on a symbolic size followed
    by a strided slice makes tract's declutter fail at load: "Invalid axis")."""
    shape = tuple(_value(parent).shape)
    r = len(shape)
    if r == 0:
        return em.function(torch.zeros_like, (parent_cur,), parent, value=torch.zeros((), dtype=torch.int64))
    total, stride, stride_value = None, 1, 1
    for d in reversed(range(r)):
        size = em.method("size", (parent_cur, d), parent, value=shape[d])
        axis = em.function(torch.arange, (size,), parent, value=torch.arange(shape[d]))
        index = (None,) * d + (slice(None),) + (None,) * (r - 1 - d)
        axis_value = torch.arange(shape[d])[index]
        axis = em.function(operator.getitem, (axis, index), parent, value=axis_value)
        if stride_value != 1:
            axis_value = axis_value * stride_value
            axis = em.function(operator.mul, (axis, stride), parent, value=axis_value)
        if total is None:
            total, total_value = axis, axis_value
        else:
            total_value = total_value + axis_value
            total = em.function(operator.add, (total, axis), parent, value=total_value)
        stride_value *= shape[d]
        stride = size if stride == 1 else em.function(operator.mul, (stride, size), parent, value=stride_value)
    if total_value.shape != shape:
        total = em.method("expand_as", (total, parent_cur), parent, value=total_value.expand(shape))
    return total


def _replay_value(step: fx.Node, replayed: dict, resolve):
    """Run ``step`` on the example positions (to check it works on them and keep meta values)."""
    def value_of(n):
        n = resolve(n)
        return replayed[n].meta["value"] if n in replayed else n.meta.get("value")

    args = fx.node.map_arg(step.args, value_of)
    kwargs = fx.node.map_arg(step.kwargs, value_of)
    with torch.no_grad():
        if step.op == "call_method":
            return getattr(args[0], step.target)(*args[1:], **kwargs)
        if step.op == "call_function":
            return step.target(*args, **kwargs)
    raise TypeError(f"a {step.op} node cannot be replayed")


def _is_overlapping(view: fx.Node) -> bool:
    v = view.meta.get("value")
    if not isinstance(v, torch.Tensor):
        return False
    return any(s == 0 and n > 1 for s, n in zip(v.stride(), v.shape))


def _at(node: fx.Node) -> str:
    src = node.meta.get("source")
    return f" at {src}" if src else ""


_SINGLE_RULES = {
    "permute": _permute_back, "movedim": _movedim_back, "moveaxis": _movedim_back,
    "t": _reverse_back, "T": _reverse_back, "mT": _last_two_back, "adjoint": _last_two_back,
    "select": _select_back, "narrow": _narrow_back, "getitem": _getitem_back,
}
_MULTI_RULES = {"unbind": _unbind_back, "split": _split_back, "broadcast_tensors": _first_of_expanded}
