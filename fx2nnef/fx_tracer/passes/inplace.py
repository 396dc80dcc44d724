"""In-place removal: every mutation becomes a functional op, seen through every alias.

torch's aliasing rule: tensors that share memory (a base and its views, views of views,
``y = x.add_(1)``, ``contiguous()`` of a contiguous tensor, ...) see each other's in-place
updates. The tracer records in ``node.meta['storage']`` which memory each value lives in, so
aliases are known whatever op made them. The pass walks the graph in order:

- a mutation ``m.op_(...)`` becomes ``m2 = op(m, ...)``; the new value of ``m`` is written
  back through the view ops that made ``m`` from its base (see ``write_back``), up to the
  tensor that owns the memory;
- a later use of any alias made before the mutation reads a version rebuilt from the new
  base by replaying the view ops that made it (uses before the mutation keep the old value).

This is torch's functionalization, on the torch-level graph.
"""
from __future__ import annotations

import inspect
import operator
from typing import Optional

import torch
import torch.fx as fx
import torch.nn.functional as F

from ...errors import TraceError
from ..tracing.structures import storage_keys
from ..tracing.tracer import setitem_functional
from .write_back import Emitter, same_geometry, view_name, write_back


def copy_functional(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """What ``dst.copy_(src)`` leaves in ``dst``."""
    return src.to(dst.dtype).expand_as(dst).clone()


def fill_functional(dst: torch.Tensor, value) -> torch.Tensor:
    """What ``dst.fill_(value)`` leaves in ``dst``."""
    return torch.full_like(dst, value) if not isinstance(value, torch.Tensor) else value.to(dst.dtype).expand_as(dst).clone()


def zero_functional(dst: torch.Tensor) -> torch.Tensor:
    """What ``dst.zero_()`` leaves in ``dst``."""
    return torch.zeros_like(dst)


_SPECIAL = {"copy_": copy_functional, "fill_": fill_functional, "zero_": zero_functional}
# methods ending in "_" that leave the data alone and return ``self``
_NO_DATA_CHANGE = {"requires_grad_", "share_memory_", "retain_grad_", "detach_", "rename_"}
# in-place changes of a tensor's shape or memory, not of its data
_RESHAPING = {"t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "resize_", "resize_as_",
              "swapaxes_", "swapdims_", "set_"}
_NAMESPACES = (torch, F, torch.Tensor)


class _Form:
    """A mutating node as a functional call: ``node(args, kwargs)`` whose result is ``mutated``'s new value."""

    def __init__(self, op: Optional[str], target, args: tuple, kwargs: dict, mutated, copy_into: bool = False):
        self.op, self.target, self.args, self.kwargs, self.mutated = op, target, args, kwargs, mutated
        self.copy_into = copy_into  # ``out=`` calls: the result is copied into ``mutated``

    @property
    def opaque(self) -> bool:
        """No out-of-place form is known: the node stays, what it updated must not be read again."""
        return self.op is None


def _where(node: fx.Node) -> str:
    src = node.meta.get("source")
    return f" at {src}" if src else ""


def _what(node: fx.Node) -> str:
    return view_name(node) or str(node.target)


def _functional_of(fn) -> Optional[object]:
    """``torch.relu`` for ``torch.relu_``, ``F.elu`` for ``F.elu_``."""
    name = getattr(fn, "__name__", "")
    for ns in _NAMESPACES:
        if getattr(ns, name, None) is fn:
            return getattr(ns, name[:-1], None)
    return None


def _mutation(node: fx.Node) -> Optional[_Form]:
    """The functional form of a mutating node, None if it does not mutate."""
    args, kwargs = node.args, node.kwargs
    if (node.op == "call_function" and node.target is operator.setitem) or (
            node.op == "call_method" and node.target == "__setitem__"):
        return _Form("call_function", setitem_functional, args, kwargs, args[0])
    if node.op == "call_method" and node.target.endswith("_") and not node.target.endswith("__"):
        name = node.target
        if name in _NO_DATA_CHANGE:
            return None
        if name in _RESHAPING:
            raise TraceError(f"'{name}'{_where(node)} changes the shape of a tensor in place, which is not supported; "
                             f"use the out-of-place form (x = x.{name[:-1]}(...))")
        if name in _SPECIAL:
            return _Form("call_function", _SPECIAL[name], args, kwargs, args[0])
        if name in _AS_SETITEM:
            form = _AS_SETITEM[name](node)
            if form is not None:
                return form
        if hasattr(torch.Tensor, name[:-1]):
            return _Form("call_method", name[:-1], args, kwargs, args[0])
        return _unknown(node)
    if node.op == "call_function":
        if "out" in kwargs and isinstance(kwargs["out"], fx.Node):
            rest = {k: v for k, v in kwargs.items() if k != "out"}
            return _Form("call_function", node.target, args, rest, kwargs["out"], copy_into=True)
        inplace_kw = _inplace_form(node)
        if inplace_kw is not None:
            return inplace_kw
        name = getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and args and isinstance(args[0], fx.Node):
            if name in _RESHAPING:
                raise TraceError(f"'{name}'{_where(node)} changes the shape of a tensor in place, which is not supported")
            if name in _SPECIAL:
                return _Form("call_function", _SPECIAL[name], args, kwargs, args[0])
            functional = _functional_of(node.target)
            if functional is not None:
                return _Form("call_function", functional, args, kwargs, args[0])
    if node.meta.get("mutated_inputs"):
        return _unknown(node)
    return None


def _arg(node: fx.Node, pos: int, name: str, default=None):
    """Argument ``pos`` (after ``self``) or keyword ``name`` of a method call."""
    rest = node.args[1:]
    return rest[pos] if pos < len(rest) else node.kwargs.get(name, default)


def _along(node: fx.Node, dim: int, index) -> tuple:
    rank = node.args[0].meta["value"].dim()
    return (slice(None),) * (dim % rank) + (index,)


def _index_put_form(node: fx.Node) -> Optional[_Form]:
    """``x.index_put_(indices, values)`` is ``x[indices] = values`` (not with ``accumulate=True``)."""
    if _arg(node, 2, "accumulate", False) is not False:
        return None
    index = tuple(_arg(node, 0, "indices"))
    return _Form("call_function", setitem_functional, (node.args[0], index, _arg(node, 1, "values")), {}, node.args[0])


def _index_fill_form(node: fx.Node) -> Optional[_Form]:
    """``x.index_fill_(dim, index, value)`` / ``x.index_copy_(dim, index, source)``: item assignment."""
    dim, index, value = _arg(node, 0, "dim"), _arg(node, 1, "index"), _arg(node, 2, "value", _arg(node, 2, "source"))
    if not isinstance(dim, int):
        return None
    return _Form("call_function", setitem_functional, (node.args[0], _along(node, dim, index), value), {}, node.args[0])


_AS_SETITEM = {"index_put_": _index_put_form, "index_fill_": _index_fill_form, "index_copy_": _index_fill_form}


def _inplace_form(node: fx.Node) -> Optional[_Form]:
    """``F.relu(x, inplace=True)`` (by keyword or position) as ``F.relu(x, inplace=False)``."""
    if node.kwargs.get("inplace") is True:
        first = node.args[0] if node.args else next(iter(node.kwargs.values()))
        return _Form("call_function", node.target, node.args, {**node.kwargs, "inplace": False}, first)
    if not node.meta.get("mutated_inputs"):
        return None
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return None
    if bound.arguments.get("inplace") is not True:
        return None
    first = next(iter(bound.arguments.values()))
    bound.arguments["inplace"] = False
    return _Form("call_function", node.target, tuple(bound.args), dict(bound.kwargs), first)


def _unknown(node: fx.Node) -> _Form:
    """A mutation without a known out-of-place form (``batch_norm`` updating running stats in
    training mode, ``uniform_``): harmless unless what it updated is read afterwards."""
    mutated = list(node.meta.get("mutated_inputs") or [])
    if not mutated and node.args and isinstance(node.args[0], fx.Node):
        mutated = [node.args[0]]
    return _Form(None, node.target, node.args, node.kwargs, mutated)


class _Functionalizer:
    def __init__(self, gm: fx.GraphModule):
        self.gm, self.graph = gm, gm.graph
        self.root: dict = {}  # storage key -> the tensor node that owns that memory
        self.replaced: dict = {}  # original node -> node holding its current value
        self.made: dict = {}  # original node -> stamp of its current value
        self.last: dict = {}  # storage key -> stamp of its last mutation
        self.mutated_at: dict = {}  # storage key -> the last mutating node (for messages)
        self.stamp = 0
        self.alias_of: dict = {}  # removed mutation node -> the node it returned
        self.opaque: dict = {}  # storage key -> a mutation without out-of-place form that changed it
        self.removed: list = []
        self.em = Emitter(self.graph, self.current, self.resolve)

    # aliasing ----------------------------------------------------------------------------
    def keys(self, node: fx.Node) -> tuple:
        if "storage" in node.meta:
            return node.meta["storage"]
        if node.op == "get_attr":  # constants the tracer made without a recorded value
            value = _fetch(self.gm, node.target)
            node.meta.setdefault("value", value)
            node.meta["storage"] = storage_keys(value)
            return node.meta["storage"]
        return ()

    def resolve(self, node):
        while node in self.alias_of:
            node = self.alias_of[node]
        return node

    def parent_of(self, node: fx.Node, key):
        """(the tensor ``node`` is a view of, the ops from it to ``node``), or (None, None)."""
        for inp in node.all_input_nodes:
            inp = self.resolve(inp)
            if key not in self.keys(inp):
                continue
            if isinstance(inp.meta.get("value"), torch.Tensor):
                return inp, [node]
            parent, steps = self.parent_of(inp, key)
            if parent is not None:
                return parent, steps + [node]
        return None, None

    def is_stale(self, node: fx.Node) -> bool:
        made = self.made.get(node, 0)
        return any(self.last.get(k, 0) > made for k in self.keys(node))

    def current(self, node):
        """The node holding ``node``'s value at the cursor (rebuilt if its memory changed since)."""
        if not isinstance(node, fx.Node):
            return node
        node = self.resolve(node)
        for key in self.keys(node):
            if key in self.opaque:
                at = self.opaque[key]
                raise TraceError(
                    f"'{node.name}'{_where(self.em.cursor)} reads memory that '{_what(at)}'{_where(at)} updated in place; "
                    "fx2nnef knows no out-of-place form for that update; write it out of place (y = f(x)) instead")
        if self.is_stale(node):
            return self.rebuild(node)
        return self.replaced.get(node, node)

    def rebuild(self, node: fx.Node) -> fx.Node:
        value = node.meta.get("value")
        if isinstance(value, torch.Tensor):
            (key,) = self.keys(node)
            parent, _ = self.parent_of(node, key)
            if parent is None:
                root = self.root[key]
                if not same_geometry(value, root.meta.get("value")):
                    raise self.lost_alias(node, key)
                new = self.current(root)
            else:
                new = self.copy(node)
        elif all(self._via_input(node, k) for k in self.keys(node)):
            new = self.copy(node)
        else:
            raise self.lost_alias(node, self.keys(node)[0])
        self.replaced[node] = new
        self.made[node] = self.stamp
        return new

    def _via_input(self, node: fx.Node, key) -> bool:
        return any(key in self.keys(self.resolve(i)) for i in node.all_input_nodes)

    def copy(self, node: fx.Node) -> fx.Node:
        with self.graph.inserting_before(self.em.cursor):
            return self.graph.node_copy(node, self.current)

    def lost_alias(self, node: fx.Node, key) -> TraceError:
        at = self.mutated_at.get(key)
        return TraceError(
            f"'{node.name}'{_where(node)} shares memory with a tensor updated in place"
            f"{_where(at) if at is not None else ''}, but fx2nnef cannot tell how it was made from that tensor, "
            "so it cannot rebuild its new value; make it a copy with .clone() where it is created")

    # the walk ----------------------------------------------------------------------------
    def run(self) -> bool:
        changed = False
        # original nodes keep their original inputs during the walk (parents and replays
        # are found through them); their inputs at the time they run are set at the end
        rewired: dict = {}
        for node in list(self.graph.nodes):
            self.em.cursor = node
            if node.op == "placeholder":
                self.register(node)
                continue
            if node.op == "output":
                rewired[node] = (fx.node.map_arg(node.args, self.current), node.kwargs)
                continue
            if node.op == "call_method" and node.target in _NO_DATA_CHANGE and node.args:
                self.alias_of[node] = node.args[0]
                self.removed.append(node)
                changed = True
                continue
            form = _mutation(node)
            if form is None or form.opaque:
                rewired[node] = (fx.node.map_arg(node.args, self.current), fx.node.map_arg(node.kwargs, self.current))
                self.register(node)
                if form is not None:
                    for mutated in form.mutated:
                        for key in self.keys(self.resolve(mutated)):
                            self.opaque[key] = node
                continue
            self.functionalize(node, form)
            changed = True
        for node, (args, kwargs) in rewired.items():
            node.args, node.kwargs = args, kwargs
        for node in reversed(self.removed):
            self.graph.erase_node(node)
        if changed:
            self.gm.recompile()
        return changed

    def register(self, node: fx.Node) -> None:
        # a read of a stored tensor (an attribute, a constant the tracer kept) reads its memory as
        # it is now: where the memory was written since an earlier read, that is the written value
        self.made[node] = 0 if node.op == "get_attr" else self.stamp
        if not isinstance(node.meta.get("value"), torch.Tensor) and node.op != "get_attr":
            return
        for key in self.keys(node):
            if key not in self.root and self.parent_of(node, key)[0] is None:
                self.root[key] = node

    def functionalize(self, node: fx.Node, form: _Form) -> None:
        mutated = self.resolve(form.mutated)
        args = fx.node.map_arg(form.args, self.current)
        kwargs = fx.node.map_arg(form.kwargs, self.current)
        mutated_cur = self.current(mutated)
        new = self.em.node(form.op, form.target, args, node)
        new.kwargs = kwargs
        new.meta["value"] = mutated.meta.get("value")
        if form.copy_into:
            new = self.em.function(copy_functional, (mutated_cur, new), node, value=mutated.meta.get("value"))
        else:
            new = self._keep_dtype(new, form, args, kwargs, mutated, node)
        self.alias_of[node] = mutated
        self.removed.append(node)
        keys = self.keys(mutated)
        if not keys:  # no recorded memory: later uses of this very node read the update
            self.replaced[mutated] = new
            return
        (key,) = keys
        updates = {mutated: new}
        child, new_child = mutated, new
        while child is not self.root.get(key):
            parent, steps = self.parent_of(child, key)
            if parent is None:
                root = self.root.get(key)
                if root is None or not same_geometry(child.meta.get("value"), root.meta.get("value")):
                    raise self.lost_alias(child, key)
                parent, new_parent = root, new_child
            else:
                new_parent = write_back(self.em, steps, parent, self.current(parent), new_child)
            updates[parent] = new_parent
            child, new_child = parent, new_parent
        self.stamp += 1
        self.last[key] = self.stamp
        self.mutated_at[key] = node
        for original, version in updates.items():
            self.replaced[original] = version
            self.made[original] = self.stamp

    def _keep_dtype(self, new: fx.Node, form: _Form, args, kwargs, mutated: fx.Node, node: fx.Node) -> fx.Node:
        """An in-place op keeps the dtype of what it updates; its out-of-place form may promote."""
        value = mutated.meta.get("value")
        if not isinstance(value, torch.Tensor) or form.target in (setitem_functional, copy_functional,
                                                                   fill_functional, zero_functional):
            return new
        result = _dry_run(form.op, form.target, args, kwargs)
        if isinstance(result, torch.Tensor) and result.dtype != value.dtype:
            return self.em.method("to", (new, value.dtype), node, value=value)
        return new


def _dry_run(op: str, target, args, kwargs):
    """The op on meta tensors shaped like the example values (for its result dtype)."""
    def meta(n):
        v = n.meta.get("value")
        return v.to("meta") if isinstance(v, torch.Tensor) else v

    a, k = fx.node.map_arg(args, meta), fx.node.map_arg(kwargs, meta)
    try:
        with torch.no_grad():
            return getattr(a[0], target)(*a[1:], **k) if op == "call_method" else target(*a, **k)
    except Exception:  # noqa: BLE001 - ops without a meta kernel: keep the result as it is
        return None


def _fetch(gm: fx.GraphModule, target: str):
    obj = gm
    for atom in target.split("."):
        obj = getattr(obj, atom)
    return obj


def remove_inplace(gm: fx.GraphModule) -> bool:
    """Rewrite every mutating node as a functional one, seen through every alias. Returns True if changed."""
    return _Functionalizer(gm).run()
