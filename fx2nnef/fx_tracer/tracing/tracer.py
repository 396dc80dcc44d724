"""CustomTracer: a torch.fx Tracer that runs the model on example values while it records.

Each recorded call is also executed on concrete values, with torch.fx's patches of
``nn.Module.__call__``/``__getattr__`` reverted, so that :class:`CustomProxy` can answer
Python questions about shapes and values. Decisions taken on concrete values are guards.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import math
import operator
import sys
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode
import torch.fx as fx
from torch.fx._symbolic_trace import _maybe_revert_all_patches, is_fx_symbolic_tracing

from ...errors import TraceError, phrase, spell
from ...ir import SourceLoc
from . import structures
from .proxy import _DATA_TENSOR_METHODS, _STATIC_TENSOR_METHODS, CustomAttribute, CustomProxy, SizeTuple
from .control_flow import _COMPARISONS, control_flow_patches, decide_in_body
from .data_dep import _FAILING_TARGETS, depends_on_data, in_loop_body, on_slot_data, read_number, sizes_from_shape_tensors
from .data_bounds import bind_data_bounds, note_data_read, reads_a_bound
from .data_sizes import DataInt, check_no_data_sizes, mark_data_number
from .fast_paths import reproduce_fast_path
from .loops import iterate_pieces, loop_range_patch, note_sized_range
from .packed import RECURRENT_TYPES as PACKED_RNN_TYPES
from .packed import is_packed_call, packed_rnn_call, packed_sequence_patches, refuse_packed_sequences
from .hidden_functions import trace_through_wrapped_functions
from .grouped import check_grouped, grouped_cat, grouped_split
from .kept_tensors import put_back, tensor_contents
from .padded import mark_padded, masked_index_add, padded_call, padded_failure, padded_nonzero, wrapped_indices
from .size_casts import size_casts
from .slice_bounds import from_the_start
from .source import _SKIP_PREFIXES, deciding_frame_location, user_frame_location
from .strided import is_as_strided, record_as_strided
from .threads import in_tracing_thread, tracing_in_this_thread
from .written_constants import WrittenMemory, flat_memory, grid_of, same_view, tensor_versions, view_steps, whole_memory

# torch factories that take sizes: recorded when a size argument is a proxy
_FACTORIES = (
    "zeros", "ones", "full", "empty", "arange", "range", "rand", "randn", "randint", "eye",
    "linspace", "tensor", "as_tensor", "scalar_tensor", "zeros_like", "ones_like", "full_like",
    "empty_like", "rand_like", "randn_like", "logspace", "tril_indices", "triu_indices",
)


@dataclasses.dataclass
class GuardRecord:
    """A Python decision on a concrete value: ``op(node value) == expected``."""

    node: fx.Node
    op: str  # bool | int | index | float | len | item
    expected: Any
    source: Optional[SourceLoc]
    text: str
    decision: Optional[int] = None  # index among the numbered decisions (on data with branches="select", on sizes merged)
    merged: bool = False  # both outcomes exported and merged with select
    branch_note: str = ""  # how the decision was merged, or why it could not be
    # the number read went into the graph as the traced value itself: torch's argument parser read
    # it (``torch.roll(x, shifts=S // 3)``) before the call was recorded with the traced number
    consumed: bool = False
    # a bound of ``range()`` (``for i in range(1, S, 8)``): ``(args, count)``, the range's arguments
    # (nodes of the traced numbers, or ints) and its length at the example. What the code decided
    # is how many steps the loop ran: the decision holds wherever the length is the same
    counts: Optional[tuple] = None
    # the node of the call that took the number (as_strided's sizes, strides and offset): once that
    # call's result is used by nothing, the number decides nothing (see drop_unread_numbers)
    reader: Optional[fx.Node] = None
    # the line that took the decision (torch.nn's code counts; see source.deciding_frame_location):
    # shown to the user. ``source`` (the user's line) is what branches and loops key decisions on
    decided: Optional[SourceLoc] = None


_EAGER_FAILURES: dict = {}


def _eager_failure(exc: Exception, message: str) -> TraceError:
    """A TraceError that is also of the failed call's exception class, when the two can be
    combined: the model's own ``try: ... except RuntimeError:`` around a call that fails on the
    example takes its other path while tracing, as it does eagerly."""
    cls = type(exc)
    if cls not in _EAGER_FAILURES:
        try:
            _EAGER_FAILURES[cls] = type(f"TraceError_{cls.__name__}", (TraceError, cls), {"__module__": __name__})
        except TypeError:  # exception classes with other instance layouts (OSError) do not combine
            _EAGER_FAILURES[cls] = TraceError
    try:
        return _EAGER_FAILURES[cls](message)
    except Exception:  # noqa: BLE001 - a class whose constructor wants other arguments
        return TraceError(message)


def _failing_key(target) -> object:
    """``target`` as an argument fx can hold: a method name as it is, a function by its index in
    ``_FAILING_TARGETS``."""
    if isinstance(target, str):
        return target
    for i, t in enumerate(_FAILING_TARGETS):
        if t is target:
            return i
    _FAILING_TARGETS.append(target)
    return len(_FAILING_TARGETS) - 1


def call_fails(kind: str, key, *args, **kwargs) -> bool:
    """Whether the call (a method name, or a function of ``_FAILING_TARGETS``) raises on these
    arguments: a graph node for a decision the model took on a failure."""
    try:
        if kind == "call_method":
            getattr(args[0], key)(*args[1:], **kwargs)
        else:
            _FAILING_TARGETS[key](*args, **kwargs)
    except Exception:  # noqa: BLE001 - any failure is the answer
        return True
    return False


_MISSING = object()
_PLAIN_ARGUMENTS = frozenset((int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format,
                              torch.layout))


def _stored_attribute(root: torch.nn.Module, target: str):
    """The parameter, buffer or plain attribute at the dotted path ``target`` of ``root``, read from
    the modules' own tables (no ``__getattr__``, which torch.fx patches while tracing: reading
    through it needs the patches reverted, two class attribute writes per weight); ``_MISSING``
    when some part is anything else (a property), read the usual way."""
    obj = root
    for part in target.split("."):
        if not isinstance(obj, torch.nn.Module) or hasattr(type(obj), part):
            return _MISSING  # a class attribute (a property) comes before the tables
        tables = obj.__dict__
        if part in tables:
            obj = tables[part]
            continue
        for table in ("_parameters", "_buffers", "_modules"):
            held = tables.get(table)
            if held is not None and part in held:
                obj = held[part]
                break
        else:
            return _MISSING
    return obj


def _may_call_modules(kind, target) -> bool:
    """Whether running ``target`` on concrete values may call an ``nn.Module`` (or read one's
    attributes), so that torch.fx's patches of ``Module.__call__``/``__getattr__`` must be
    reverted around it. Tensor methods and torch's, operator's and math's functions do not;
    reverting costs a class attribute write each way (torch invalidates its type caches),
    once per traced op."""
    if kind == "call_method":
        return False
    if kind != "call_function":
        return True
    module = getattr(target, "__module__", None) or ""
    return not (module.split(".")[0] in ("torch", "_operator", "operator", "math", "builtins")
                and not module.startswith("torch.nn.modules"))


def is_tracing() -> bool:
    """True while a torch.fx tracer (ours included) is running a forward."""
    return is_fx_symbolic_tracing()


def _unwrap(obj):
    """Replace every proxy in a nested structure by its example value."""
    if isinstance(obj, CustomProxy):
        return obj.value
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        items = [_unwrap(i) for i in obj]
        if type(obj) is list:
            return items
        if type(obj) in (tuple, SizeTuple):
            return tuple(items)
        try:
            return type(obj)(items)
        except TypeError:
            return tuple(items)
    if isinstance(obj, dict):
        return {k: _unwrap(v) for k, v in obj.items()}
    if isinstance(obj, slice):
        return slice(_unwrap(obj.start), _unwrap(obj.stop), _unwrap(obj.step))
    return obj


_TENSOR_GETITEM = torch.Tensor.__getitem__


def _contains_proxy(obj) -> bool:
    """Whether a proxy sits anywhere in a nested list/tuple/dict/slice."""
    if isinstance(obj, fx.Proxy):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_contains_proxy(i) for i in obj)
    if isinstance(obj, dict):
        return any(_contains_proxy(v) for v in obj.values())
    if isinstance(obj, slice):
        return any(_contains_proxy(v) for v in (obj.start, obj.stop, obj.step))
    return False


def setitem_functional(x: torch.Tensor, index, value) -> torch.Tensor:
    """``x[index] = value`` without mutation: the in-place pass rewrites setitem to this."""
    out = x.clone()
    out[index] = value
    return out


def _comparison_key(node: fx.Node):
    """``(op, operand values)`` of a comparison of plain numbers (sizes at the example), or None:
    decisions with the same key are taken as the same condition, which the probes then check."""
    if node.op != "call_function" or node.target not in _COMPARISONS or len(node.args) != 2 or node.kwargs:
        return None
    values = tuple(a.meta.get("value") if isinstance(a, fx.Node) else a for a in node.args)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return ("comparison", node.target, values)


class CustomTracer(fx.Tracer):
    """Records a model into an fx Graph while running it on example values."""

    def __init__(self, leaf_types: tuple = (), leaf_names: tuple = (), forced: Optional[dict] = None,
                 size_sites: frozenset = frozenset(), data_decisions: bool = True, unify_sizes: bool = True):
        """``forced``, when given, maps the index of a numbered decision to the outcome to take
        instead of the example's. Numbered are the decisions on tensor data (``bool()`` of a
        traced tensor; ``branches="select"``) unless ``data_decisions`` is False, and the Python
        bools computed from sizes at the source lines ``size_sites`` (``(file, line)``: an ``if``
        on sizes that bounds the range, see capture's ``_trace_merging_sizes``). Each is numbered
        in order met (``GuardRecord.decision``); with data decisions numbered, ``item()`` of a
        traced tensor stays a traced rank-0 tensor, so that comparing it is such a decision.
        ``unify_sizes``: a size decision comparing the same numbers the same way as an earlier
        one (the same test in every layer) follows it instead of being numbered."""
        super().__init__(autowrap_functions=())
        # the data decisions' forcing (None: none numbered) and the size decisions' (one dict)
        self.forced = forced if data_decisions else None
        self.size_forced = forced if size_sites else None
        self.size_sites = frozenset(size_sites)
        self.unify_sizes = unify_sizes  # a size decision follows an earlier one of the same comparison
        # comparison (_comparison_key) or size site -> (index, example outcome) of its first decision
        self._site_first: dict = {}
        self.decisions: list[GuardRecord] = []
        self._data_memo: dict = {}
        self._slot_memo: dict = {}
        self._slot_data_memo: dict = {}
        self.body_frames: list = []  # decisions on data met in the loop bodies being recorded (control_flow)
        self._checking = False
        self.proxy_buffer_attributes = True  # buffers are traced values: self.pos_ids[:, :s].expand(b, -1)
        self.leaf_types = tuple(leaf_types)
        self.leaf_names = set(leaf_names)
        self.guards: list[GuardRecord] = []
        self._guards_seen = 0  # guards recorded before the last node (see _mark_consumed)
        self.placeholder_values: dict = {}
        self._in_guard = False
        self._root_params: Optional[set] = None
        self._foreign: dict = {}
        self.control_flow_notes: list = []
        self.roll_loops = False  # range() of traced sizes records its loops (see .loops)
        self.loops: list = []
        # the last ranges of traced sizes made: (example values, arguments as given), for a tensor
        # made of one's items (see _range_tensor)
        self.sized_ranges: list = []
        self.written = WrittenMemory(self._traced_reading)  # plain tensors that traced calls wrote
        self._snapshot_versions: dict = {}  # stored copy's name -> version of what it copies
        self._memory: dict = {}  # memory block of plain tensors -> name of its stored copy
        # numbers read from data, in order ((value, proxy read)), and the bounds taken as one (.data_bounds)
        self.data_reads: list = []
        self.bound_reads: list = []
        self.bind_reads = True

    # proxies and values ---------------------------------------------------------------
    def proxy(self, node):
        return CustomProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        versions: list = []
        if kind in ("call_function", "call_method"):
            if is_as_strided(kind, target):
                before = len(self.guards)
                proxy, how = record_as_strided(self, args, kwargs, _unwrap)
                for g in self.guards[before:]:
                    g.reader = proxy.node
                loc = user_frame_location()
                self.control_flow_notes.append(f"as_strided at {loc or 'an unknown line'}: {how}")
                return proxy
            args = sizes_from_shape_tensors(self, kind, target, args)
            args = from_the_start(self, kind, target, args)  # x[:, :-pad] of a traced pad
            args, kwargs = bind_data_bounds(self, kind, target, args, kwargs)  # x[:n.item()]: the number traced
            joined = grouped_split(self, kind, target, args, kwargs) or grouped_cat(self, kind, target, args, kwargs)
            if joined is not None:  # rows cut into groups sized by data: see .grouped
                return joined
            check_no_data_sizes(kind, target, args, kwargs)
            padded = padded_call(kind, target, args, kwargs)
            if padded is not None:  # a data-sized index list becomes every coordinate
                kind, target, (args, kwargs) = "call_function", padded_nonzero, padded
            else:
                args, kwargs = masked_index_add(self, kind, target, args, kwargs) or (args, kwargs)
                args = wrapped_indices(self, kind, target, args)
        if kind == "placeholder":
            value = self.placeholder_values[target]
        else:
            _each_tensor((args, kwargs), self._snapshot_constant)  # before the call can mutate them
            versions = _input_versions((args, kwargs))
            plain = tensor_versions((args, kwargs))
            value = self._concrete(kind, target, args, kwargs)
            if self.written.note_writes(plain):  # a plain tensor it wrote is no longer a constant
                args, kwargs = self.written.read_as_traced((args, kwargs))
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if not isinstance(proxy, CustomProxy):
            proxy = CustomProxy(proxy.node, self)
        if len(self.guards) > self._guards_seen and target not in _NO_ARGUMENT_PARSER:
            _mark_consumed(self.guards[self._guards_seen:], proxy.node)
        self._guards_seen = len(self.guards)
        proxy.__dict__["value"] = value
        node = proxy.node
        node.meta["value"] = value
        node.meta["source"] = user_frame_location()
        stack = node.meta.get("nn_module_stack") or {}
        if stack:
            path, mtype = list(stack.values())[-1]
            node.meta["module_path"] = path
            node.meta["module_type"] = getattr(mtype, "__qualname__", str(mtype))
        _record_view(node, value, versions)
        mark_padded(node)
        check_grouped(self, node)
        if kind in ("call_function", "call_method") and _target_name(target) in _SPLITTING and isinstance(value, (tuple, list)):
            # how many pieces torch returns can depend on a dynamic size (chunk(3) of 4 gives 2)
            self._record_guard(proxy, "count", len(value), f"{_target_name(target)}(...) gives {len(value)} tensors")
        return proxy

    def _concrete(self, kind, target, args, kwargs):
        if kind == "get_attr":
            found = _stored_attribute(self.root, target)
            if found is not _MISSING:
                return found
        a, k = _unwrap(args), _unwrap(kwargs)
        try:
            with (_maybe_revert_all_patches() if _may_call_modules(kind, target) else contextlib.nullcontext()), \
                    torch.no_grad():
                if kind == "call_function":
                    return target(*a, **k)
                if kind == "call_method":
                    return getattr(a[0], target)(*a[1:], **k)
                if kind == "call_module":
                    return self.root.get_submodule(target)(*a, **k)
                if kind == "get_attr":
                    return operator.attrgetter(target)(self.root)
        except TraceError:
            raise
        except Exception as exc:
            loc = user_frame_location()
            what = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
            padded = padded_failure(args, kwargs, what, f" at {loc}: {loc.code}" if loc and loc.code else "")
            if padded is not None:  # the example runs; the listed coordinates are not the model's
                raise padded from exc
            if kind in ("call_function", "call_method"):
                self._record_failure(kind, target, args, kwargs, exc, what)
            raise _eager_failure(
                exc, f"running '{what}' on the example inputs failed{' at ' + str(loc) if loc else ''}"
                f"{': ' + loc.code if loc and loc.code else ''}: {type(exc).__name__}: {exc}. "
                "Check that the model runs eagerly on these example inputs."
            ) from exc
        raise TraceError(f"unknown node kind {kind!r}")

    def _record_failure(self, kind, target, args, kwargs, exc, what) -> None:
        """A call that fails on the example may be caught by the model (``try: t.view(...) except
        RuntimeError: ...``), whose other path then depends on the failure: a decision, on the
        sizes when the inputs are (a view fails on a transpose, except with an axis of 1). It is
        recorded as a node telling whether the call fails, with a guard, so that the probes see
        where it stops failing. A failure nothing catches ends the trace: the node goes with it."""
        try:
            node = self.create_node("call_function", call_fails, self.create_arg((kind, _failing_key(target)) + tuple(args)),
                                    self.create_arg(kwargs))
        except Exception:  # noqa: BLE001 - arguments fx cannot hold: the failure is only an error
            return
        node.meta["value"] = True
        node.meta["source"] = user_frame_location()
        proxy = CustomProxy(node, self)
        proxy.__dict__["value"] = True
        self._record_guard(proxy, "bool", True, f"'{what}' fails on the example ({type(exc).__name__}), a failure "
                           "the model may catch")
        self._guards_seen = len(self.guards)

    def call_method(self, root: CustomProxy, name: str, args, kwargs):
        v = root.value
        if isinstance(v, torch.Tensor):
            if name == "size" and not args and not kwargs:
                return self.size_tuple(root)
            if name in _STATIC_TENSOR_METHODS:
                return getattr(v, name)(*_unwrap(args), **_unwrap(kwargs))
            if name == "is_contiguous":
                # the layout follows the sizes (a transpose with an axis of 1 is contiguous): a
                # decision on the shapes, recorded and probed as any other
                return self.guard(self.create_proxy("call_method", name, (root,) + tuple(args), kwargs), bool, "bool")
            if name == "item" and self.forced is not None and self._on_data(root):
                return self.create_proxy("call_method", "reshape", (root, ()), {})
            if name == "item" and not args and not kwargs:
                number = _number_in_tensor(self, root)
                if number is not None:  # torch.tensor(S).item() is S, traced
                    return number
                if _size_count(v) and not self._on_data(root):  # lengths.max().item(), lengths from sizes
                    return self.create_proxy("call_method", "item", (root,), {})
            if name in _DATA_TENSOR_METHODS:
                if on_slot_data(root.node, self._slot_data_memo):
                    decide_in_body(self, root, name, None)  # refused: a number that differs at every step
                result = getattr(v, name)(*_unwrap(args), **_unwrap(kwargs))
                self._record_guard(root, name, result, f"{name}() of a traced tensor")
                if not self._on_data(root):
                    return result
                result = read_number(self, name, result, self.guards[-1])
                marked = mark_data_number(result, self.guards[-1].source,
                                          root if name == "tolist" and v.dim() == 1 else None)
                if name == "item":
                    note_data_read(self, root, result)
                    if isinstance(marked, DataInt):
                        marked.read = "item"  # a bound equal to it may stand for it (.data_bounds)
                return marked
        return self.create_proxy("call_method", name, (root,) + tuple(args), kwargs)

    def iterate_pieces(self, proxy: CustomProxy):
        """An iterator over the pieces of ``proxy`` that notes a loop to roll (:mod:`.loops`), or None."""
        return iterate_pieces(proxy)

    def size_tuple(self, proxy: CustomProxy) -> SizeTuple:
        rank = proxy.value.dim()
        return SizeTuple(self.create_proxy("call_method", "size", (proxy, i), {}) for i in range(rank))

    # guards ---------------------------------------------------------------------------
    def guard(self, proxy: CustomProxy, fn: Callable, op: str):
        result = fn(proxy.value)
        if op != "len" and not self._checking and on_slot_data(proxy.node, self._slot_data_memo):
            return decide_in_body(self, proxy, op, result)  # a loop body is traced once, for every step
        if op == "bool" and self.forced is not None and not self._checking and self._on_data(proxy) \
                and not in_loop_body(proxy.node, self._slot_memo):  # a loop body is traced once, for every step
            return self._numbered(proxy, op, result, self.forced)
        if op == "bool" and self.size_forced is not None and not self._checking and isinstance(result, bool) \
                and isinstance(proxy.value, bool) and not self._on_data(proxy) \
                and not in_loop_body(proxy.node, self._slot_memo):
            src = user_frame_location()
            site = (src.file, src.line) if src is not None else None
            if site in self.size_sites:
                # the same comparison of the same numbers, else (no plain comparison) the same line
                cond = (_comparison_key(proxy.node) or site) if self.unify_sizes else len(self.decisions)
                first = self._site_first.get(cond)
                if first is not None and first[1] == result:
                    # the same `if` met again (in every layer), or the same comparison elsewhere
                    # (`q_length == 1` in the mask code and `seq_len == 1` in each layer), deciding
                    # as the first time: it takes the first's outcome, so that it adds no paths. Its
                    # guard stays as read, and the probes check the merged graph wherever it flips
                    self._record_guard(proxy, op, result, None)
                    return self.size_forced.get(first[0], result)
                self._site_first.setdefault(cond, (len(self.decisions), result))
                return self._numbered(proxy, op, result, self.size_forced)
        text = None
        if op in _NUMBER_READS and isinstance(proxy.value, torch.Tensor) and not self._on_data(proxy):
            text = (f"{op}(%{proxy.node.name}) -> {result!r}: {op}() of a tensor computed from sizes is a plain "
                    "number; compute with the sizes themselves (x.shape[1] // 2) or keep the tensor to stay symbolic")
        self._record_guard(proxy, op, result, text)
        if op in _NUMBER_READS and not self._checking and self._on_data(proxy):
            result = read_number(self, op, result, self.guards[-1])
            note_data_read(self, proxy, result)
        return result

    def _numbered(self, proxy, op: str, result, forced: dict):
        """A decision numbered for ``forced``: it takes the forced outcome, when there is one."""
        index = len(self.decisions)
        result = forced.get(index, result)
        self._record_guard(proxy, op, result, None)
        self.guards[-1].decision = index
        self.decisions.append(self.guards[-1])
        return result

    def _on_data(self, proxy: CustomProxy) -> bool:
        return depends_on_data(proxy.node, self._data_memo)

    def _record_guard(self, proxy, op, result, text):
        src = user_frame_location()
        text = text or f"{op}(%{proxy.node.name}) -> {result!r}"
        self.guards.append(GuardRecord(proxy.node, op, result, src, text, decided=deciding_frame_location()))

    # modules --------------------------------------------------------------------------
    def is_leaf_module(self, m, module_qualified_name):
        return isinstance(m, self.leaf_types) or module_qualified_name in self.leaf_names

    def call_module(self, m, forward, args, kwargs):
        if isinstance(m, _compiled_module_types()):
            return m._orig_mod(*args, **kwargs)  # torch.compile(module): trace the module it wraps
        if is_packed_call(args, kwargs) and (isinstance(m, PACKED_RNN_TYPES) or self.is_leaf_module(m, "")):
            return packed_rnn_call(self, m, args, kwargs)  # pack_padded_sequence -> RNN: see .packed
        if any(type(a) is torch.nn.utils.rnn.PackedSequence for a in list(args) + list(kwargs.values())):
            refuse_packed_sequences(m, args, kwargs)
        forward = _script_module_forward(m, forward)
        try:
            self.path_of_module(m)
        except NameError:
            # a module made inside forward (``nn.GELU()(x)``, ``ACT2FN[name](x)``) has no path:
            # trace through its forward like any other code
            if self.is_leaf_module(m, ""):
                loc = user_frame_location()
                raise TraceError(
                    f"{type(m).__name__} is created inside forward{' at ' + str(loc) if loc else ''}, so its "
                    "weights are not part of the model and it cannot be kept as one call; make it a "
                    "submodule in __init__ (self.name = ...)") from None
            return forward(*args, **kwargs)
        out = super().call_module(m, forward, args, kwargs)
        return reproduce_fast_path(m, args, kwargs, out)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def create_arg(self, a):
        kind = type(a)
        # the arguments of nearly every call, answered as torch.fx answers them without its chain
        # of isinstance checks (each through the traced isinstance): exact types only, so that
        # subclasses (DataInt, SizeTuple, torch.Size, named tuples) take the full path below
        if kind is CustomProxy:
            return a.node
        if kind in _PLAIN_ARGUMENTS:
            return a
        if kind is tuple or kind is list:
            return kind([self.create_arg(x) for x in a])
        if isinstance(a, DataInt):
            return int(a)  # the guard records where it was read; the graph holds a plain int
        if isinstance(a, SizeTuple):
            return tuple(self.create_arg(x) for x in a)
        if isinstance(a, torch.nn.Parameter):
            a = self._foreign_parameter(a)
        if isinstance(a, type) and a in (bool, int, float):  # `dtype=int`, as torch reads it (fx cannot record a type)
            return {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype()}[a]
        if isinstance(a, torch.Tensor) and not isinstance(a, fx.Proxy):
            if self.written.holds(a):  # an output, a module argument: the memory as last written
                return self._traced_reading(a).node
            self._snapshot_constant(a)
        if type(a).__module__ == "numpy" and hasattr(a, "item") and getattr(a, "ndim", None) == 0:
            # a NumPy number (``np.prod(x.shape[1:-1])`` of static sizes in Perceiver's reshape), which
            # torch's calls take as the Python number it holds
            return a.item()
        return super().create_arg(a)

    def _foreign_parameter(self, p: torch.nn.Parameter) -> torch.Tensor:
        """A parameter of a module made inside forward (not the model's) is a constant tensor."""
        if self._root_params is None:
            self._root_params = {id(q) for q in self.root.parameters()}
        if id(p) in self._root_params:
            return p
        if id(p) not in self._foreign:
            self._foreign[id(p)] = (p, p.detach())  # p is kept alive so that its id stays unique
        return self._foreign[id(p)][1]

    def _snapshot_constant(self, t: torch.Tensor) -> None:
        """Store a copy of a tensor created outside the trace (e.g. ``torch.zeros(2, 3)`` with
        constant sizes), so that a later in-place update of ``t`` does not change the constant.
        An update that ran eagerly (on constants only) since the copy gives a new copy; one that a
        traced call made keeps it (the in-place pass reads the copy as last written)."""
        if isinstance(t, torch.nn.Parameter):
            return
        known = self.tensor_attrs.get(t)
        if known is not None and (known not in self._snapshot_versions or self.written.holds(t)
                                  or structures.tensor_version(t) == self._snapshot_versions[known]):
            return
        if known is None:
            for name, buf in self.root.named_buffers():
                if buf is t:
                    return
        qualname = self.get_fresh_qualname("_tensor_constant")
        self.tensor_attrs[t] = qualname
        self._snapshot_versions[qualname] = structures.tensor_version(t)
        setattr(self.root, qualname, t.detach().clone())
        self._keep_memory(t, qualname)

    def _keep_memory(self, t: torch.Tensor, qualname: str) -> None:
        """Remember the memory ``t`` lives in as it is before any traced call writes it: the copy
        ``qualname`` where ``t`` is all of it, else a copy of the whole block. A view of it read
        after a write is then rebuilt from that memory (see :meth:`_traced_reading`)."""
        keys = structures.storage_keys(t)
        if not keys or self.written.holds(t):
            return
        version = structures.tensor_version(t)
        if whole_memory(t):
            self._memory[keys[0]] = qualname
        elif keys[0] not in self._memory or self._snapshot_versions[self._memory[keys[0]]] != version:
            name = self.get_fresh_qualname("_tensor_memory")
            setattr(self.root, name, flat_memory(t).clone())
            self._memory[keys[0]] = name
            self._snapshot_versions[name] = version

    def _traced_reading(self, t: torch.Tensor) -> CustomProxy:
        """A plain tensor that traced calls wrote, as a traced value: the stored copy of its memory,
        read as last written, viewed as ``t`` views that memory (see :mod:`.written_constants`)."""
        key = structures.storage_keys(t)[0]
        name = self._memory[key]
        stored = getattr(self.root, name)
        live = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, stored.shape)  # the memory, shaped as its copy
        node = self.create_node("get_attr", name, (), {})
        node.meta["value"], node.meta["storage"] = live, (key,)
        base = CustomProxy(node, self)
        base.__dict__["value"] = live
        if same_view(live, t):
            return base
        grid = grid_of(live.numel(), t) if live.dim() == 1 else None
        if grid is not None and len(grid) > 1:  # the memory's copy is flat: as a grid t's strides walk
            live = live.view(grid)
            base = self.create_proxy("call_method", "view", (base, grid), {})
        steps = view_steps(live, t)
        if steps is not None:
            index, order, units = steps
            view = self.create_proxy("call_function", operator.getitem, (base, index), {})
            if order != tuple(range(len(order))):
                view = self.create_proxy("call_method", "permute", (view, order), {})
            for axis in units:
                view = self.create_proxy("call_method", "unsqueeze", (view, axis), {})
        else:
            view = self.create_proxy("call_method", "as_strided",
                                     (base, tuple(t.shape), tuple(t.stride()), t.storage_offset()), {})
        if structures.storage_keys(view.value) != (key,):
            loc = user_frame_location()
            raise TraceError(f"a view of a tensor that the model writes in place{' at ' + str(loc) if loc else ''} "
                             "cannot be followed as a view of its memory; make it a copy with .clone()")
        return view


def _compiled_functions_run_plain():
    """A ``torch.compile``d function called while tracing runs its original Python (dynamo's
    own answer under fx tracing, instead of refusing), so the tracer records what it does."""
    try:
        import torch._dynamo.config as dynamo_config
    except Exception:  # pragma: no cover - builds without dynamo
        return contextlib.nullcontext()
    return dynamo_config.patch(error_on_nested_fx_trace=False)


def _compiled_module_types() -> tuple:
    """The wrapper class of ``torch.compile(module)`` (empty when dynamo cannot be imported)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # pragma: no cover - builds without dynamo
        return ()
    return (OptimizedModule,)


# Python conversions of a traced value that hand the model a number (checked by data_dep.check_number_reads)
_NUMBER_READS = {"int", "index", "float", "round"}

# ops returning a number of tensors that a size decides
_SPLITTING = {"split", "chunk", "unbind", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit",
              "unsafe_split", "unsafe_chunk"}


def _target_name(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _each_tensor(obj, fn) -> None:
    if isinstance(obj, torch.Tensor) and not isinstance(obj, fx.Proxy):
        fn(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _each_tensor(x, fn)
    elif isinstance(obj, dict):
        for x in obj.values():
            _each_tensor(x, fn)


def _input_versions(args) -> list:
    """(input node, its tensor, version counter) for every traced tensor among ``args``."""
    def traced(obj):
        return obj.value if type(obj) is CustomProxy and isinstance(obj.value, torch.Tensor) else None
    return [(proxy.node, t, v) for proxy, t, v in tensor_versions(args, traced)]


def _record_view(node: fx.Node, value, versions: list) -> None:
    """Record, for the in-place pass, which memory ``value`` lives in (``meta['storage']``:
    a view shares it with its base) and which inputs the call updated in place
    (``meta['mutated_inputs']``, from torch's version counters)."""
    node.meta["storage"] = structures.storage_keys(value)
    node.meta["mutated_inputs"] = [n for n, t, v in versions if t._version != v]


# scoped patches -----------------------------------------------------------------------
# Tensor methods that take sizes: recorded when a plain tensor gets traced sizes
_SIZED_METHODS = ("expand", "view", "reshape", "repeat", "narrow", "new_zeros", "new_ones", "new_full",
                  "new_empty", "unflatten", "tile", "roll", "split", "chunk", "select")
_orig_isinstance = builtins.isinstance
_INTERNAL_MODULES = ("torch.fx", "fx2nnef", "torch._", "torch.utils._pytree")


_TRACED_TYPES = frozenset((CustomProxy, CustomAttribute))


def _traced_isinstance(obj, cls):
    # every isinstance of the process goes through here while tracing (about 150 per node); only the
    # tracing thread answers for a proxy from its value (see .threads)
    if type(obj) in _TRACED_TYPES and not _orig_isinstance(obj, cls) and in_tracing_thread():
        import sys

        caller = sys._getframe(1).f_globals.get("__name__", "")
        # torch's control-flow functions validate their operands before the recorder takes over
        if not caller.startswith(_INTERNAL_MODULES) or caller.startswith("torch._higher_order_ops"):
            return _orig_isinstance(obj.value, cls)
    return _orig_isinstance(obj, cls)


_orig_callable = builtins.callable


def _traced_callable(obj):
    # a proxy records calls (it has __call__) whatever its value; the model's code asks about the value
    # (transformers' torch_compilable_check calls a condition when it is callable)
    if type(obj) in _TRACED_TYPES and in_tracing_thread():
        return _orig_callable(obj.value)
    return _orig_callable(obj)


_orig_len = builtins.len
_orig_range = builtins.range


class _RangeStandIn(type):
    """The metaclass of :class:`_TracedRangeType`: instance and subclass checks are the builtin
    range's (``isinstance(a, range)`` in torch.fx's own code runs while tracing)."""

    def __instancecheck__(cls, obj):
        return _orig_isinstance(obj, _orig_range)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _orig_range)

    def __call__(cls, *args):
        return _traced_range(*args)

    def __getattr__(cls, name):
        return getattr(_orig_range, name)

    def __repr__(cls):
        return "<class 'range'>"


class _TracedRangeType(metaclass=_RangeStandIn):
    """Stands for ``range`` while tracing (see :func:`_traced_range`)."""


def _traced_range(*args):
    # range() of traced sizes is a range of their example values, each read a guard as for any
    # index(); those guards note the range they bound, so that the decision is the loop's length
    # (``range(1, S, 128)`` runs once for every S up to 129), not the number read
    if not any(type(a) is CustomProxy for a in args) or not in_tracing_thread():
        return _orig_range(*args)
    tracer = next(a.tracer for a in args if type(a) is CustomProxy)
    before = _orig_len(tracer.guards)
    values = [operator.index(a) for a in args]
    out = _orig_range(*values)
    bounds = tuple(a.node if type(a) is CustomProxy else v for a, v in zip(args, values))
    for g in tracer.guards[before:]:
        if g.op == "index" and g.node in bounds:
            g.counts = (bounds, _orig_len(out))
    note_sized_range(tracer, out, args)
    return out


_RANGE_TENSOR_FACTORIES = ("tensor", "as_tensor")


def _range_tensor(tracer, fn, args: tuple, kwargs: dict):
    """``torch.tensor(list(range(S - 1))[::-1])``: a tensor made of the items of a range of traced
    sizes, in order or reversed, recorded as ``torch.arange`` of the range's arguments (flipped), so
    that its length follows the sizes; None for any other data (kept as the example's constant).
    The range's guards stay: at other sizes the probes compare the graph with the model."""
    if not args or fn.__name__ not in _RANGE_TENSOR_FACTORIES or set(kwargs) - {"dtype", "device"}:
        return None
    data = args[0]
    if type(data) not in (list, tuple) or _orig_len(data) < 2 or len(args) > 1 \
            or not all(type(v) is int for v in data):
        return None
    items = tuple(data)
    for values, range_args in reversed(tracer.sized_ranges):
        if _orig_len(values) != _orig_len(items):
            continue
        for flipped in (False, True):
            if tuple(values[::-1] if flipped else values) == items:
                start, stop, step = (0, range_args[0], 1) if _orig_len(range_args) == 1 else \
                    (range_args[0], range_args[1], range_args[2] if _orig_len(range_args) == 3 else 1)
                if type(step) is int:  # empty, as the range, where it ends before it starts
                    stop = torch.sym_max(stop, start) if step > 0 else torch.sym_min(stop, start)
                made = torch.arange(start, stop, step, dtype=kwargs.get("dtype") or torch.int64,
                                    device=kwargs.get("device"))
                return made.flip(0) if flipped else made
    return None


def _traced_len(obj):
    # len(x) of a traced tensor in the model's code is its traced first size, as x.shape[0]: it
    # stays symbolic where it is computed with (x + len(x)), and a Python use of it (range(len(x)),
    # a comparison) is a guard on the size, as for x.shape[0] (Python's own len() returns an int,
    # which the graph would keep as the example's)
    if type(obj) is CustomProxy and _orig_isinstance(obj.value, torch.Tensor) and obj.value.dim() > 0 \
            and in_tracing_thread():
        import sys

        caller = sys._getframe(1).f_globals.get("__name__", "")
        if not caller.startswith(_INTERNAL_MODULES):
            return obj.tracer.create_proxy("call_method", "size", (obj, 0), {})
    return _orig_len(obj)


def _traced_torch_int(x):
    """transformers' ``torch_int`` on a traced size stays traced (an int as it is, a non-negative
    float floored, as ``int()`` truncates): ``size=(torch_int(height), torch_int(width))`` of a
    position-embedding resize then follows the image size instead of fixing it."""
    if type(x) is CustomProxy and isinstance(x.value, (int, float)) and not isinstance(x.value, bool):
        if isinstance(x.value, int):
            return x
        if x.value >= 0:
            return math.floor(x)
    return int(x)


@contextlib.contextmanager
def _transformers_number_casts():
    """Route the ``torch_int`` of every loaded transformers module to :func:`_traced_torch_int`
    (each module holds its own reference to it)."""
    generic = sys.modules.get("transformers.utils.generic")
    original = getattr(generic, "torch_int", None)
    if original is None:
        yield
        return
    users = [m for name, m in list(sys.modules.items())
             if name.startswith("transformers") and getattr(m, "torch_int", None) is original]
    for m in users:
        m.torch_int = _traced_torch_int
    try:
        yield
    finally:
        for m in users:
            m.torch_int = original


def _script_function_call(original):
    """``ScriptFunction.__call__`` that runs a ``@torch.jit.script`` function's Python source when
    given traced values (TorchScript takes tensors only); its source is what it computes."""
    def call(self, *args, **kwargs):
        python = getattr(self, "_torchdynamo_inline", None)
        if python is not None and (_contains_proxy(args) or _contains_proxy(kwargs)):
            return python(*args, **kwargs)
        return original(self, *args, **kwargs)
    return call


def _script_module_forward(m, forward):
    """The forward to trace through for ``m``: for a ``torch.jit.script``-ed module, its Python
    class's forward run on the scripted module (its submodules, parameters and constants are
    there), since TorchScript takes tensors only."""
    if not isinstance(m, torch.jit.RecursiveScriptModule):
        return forward
    py_class = getattr(getattr(m, "_concrete_type", None), "py_class", None)
    py_forward = getattr(py_class, "forward", None)
    if py_forward is None:
        loc = user_frame_location()
        raise TraceError(f"the TorchScript module {m.original_name}{' at ' + str(loc) if loc else ''} has no "
                         "Python class to trace (loaded with torch.jit.load?): export the module it was "
                         "scripted from")
    return functools.partial(py_forward, m)


_TENSOR_OF_NUMBER = (torch.tensor, torch.as_tensor, torch.scalar_tensor)


def _size_count(v: torch.Tensor) -> bool:
    """Whether ``v`` holds one integer, as a tensor computed from sizes does (a count, a length)."""
    return v.numel() == 1 and not v.dtype.is_floating_point and not v.dtype.is_complex and v.dtype != torch.bool


def _number_in_tensor(tracer, root):
    """The traced number a 0-d tensor was made of (``torch.tensor(S)``, ``torch.scalar_tensor(S / 2)``),
    as the number ``.item()`` reads back, or None. A dtype that changes the number's kind (an int
    made float, or a float made int) keeps the usual read."""
    node = root.node
    if node.op != "call_function" or node.target not in _TENSOR_OF_NUMBER or len(node.args) != 1 \
            or not isinstance(node.args[0], fx.Node) or set(node.kwargs) - {"dtype", "device"}:
        return None
    value = node.args[0].meta.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or tracer._on_data(root):
        return None
    dtype = node.kwargs.get("dtype")
    number = CustomProxy(node.args[0], tracer, value)
    if dtype is None or dtype.is_floating_point == isinstance(value, float):
        return number
    if dtype.is_floating_point and isinstance(value, int):
        return tracer.create_proxy("call_function", operator.mul, (number, 1.0), {})
    return None


# size arithmetic the tracer records itself (max/min of sizes): no argument parser of torch read a
# number for them, so a read just before (``range(1, S, 8)`` then ``min(S, t + 8)``) stays a decision
_NO_ARGUMENT_PARSER = (torch.sym_max, torch.sym_min)


def _mark_consumed(guards: list, node: fx.Node) -> None:
    """Number reads recorded just before ``node`` on values that ``node`` takes as arguments:
    torch's argument parser read them for the call the node records with the traced values."""
    inputs = set(node.all_input_nodes)
    for g in guards:
        if g.op in _NUMBER_READS and g.node in inputs and g.counts is None:  # range() is no torch call
            g.consumed = True


@contextlib.contextmanager
def _eager_torch_function_answer(mode_type: type):
    """Within the block, ``torch.overrides.has_torch_function`` answers as the eager run does,
    without a ``mode_type`` mode on top of the stack: torch's own routes ask it
    (TransformerEncoder's nested fast path), and the tracer's own mode would turn them off.
    Mode stacks are per thread, so other threads get the plain answer."""
    plain = torch.overrides.has_torch_function

    def has_torch_function(args) -> bool:
        stack = torch.overrides._get_current_function_mode_stack()
        if stack and isinstance(stack[-1], mode_type):
            with torch.overrides._pop_mode_temporarily():
                return plain(args)
        return plain(args)

    torch.overrides.has_torch_function = has_torch_function
    try:
        yield
    finally:
        torch.overrides.has_torch_function = plain


@contextlib.contextmanager
def tracing_patches(tracer: CustomTracer):
    """Answer ``isinstance`` from example values, record factories called with size proxies and
    record torch.cond / scan / while_loop (see :mod:`.control_flow`)."""
    saved = {name: getattr(torch, name) for name in _FACTORIES if hasattr(torch, name)}

    def wrap(fn):
        def wrapper(*args, **kwargs):
            if _contains_proxy(args) or _contains_proxy(kwargs) or reads_a_bound(tracer, fn, args, kwargs):
                return tracer.create_proxy("call_function", fn, args, kwargs)
            if tracer.sized_ranges:
                made = _range_tensor(tracer, fn, args, kwargs)
                if made is not None:
                    return made
            return fn(*args, **kwargs)

        wrapper.__wrapped_factory__ = fn
        return wrapper

    class PlainIndexing(TorchFunctionMode):
        """A plain tensor (e.g. created in forward) indexed with a traced size: x[:, :s]. A mode,
        not a ``torch.Tensor.__getitem__`` of its own, which would make every tensor a Python
        sequence for good (``torch.tensor([a 0-d tensor])`` then fails in the process)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is _TENSOR_GETITEM and type(args[0]) is not CustomProxy and _contains_proxy(args[1]):
                return tracer.create_proxy("call_function", operator.getitem, tuple(args), {})
            if tracer.written.keys:  # plain tensors traced calls wrote: read as traced (.written_constants)
                return tracer.written.torch_function(func, args, kwargs or {}, sys._getframe(1))
            return func(*args, **(kwargs or {}))

    def wrap_method(name, fn):
        def method(self, *args, **kwargs):
            # a plain tensor given traced sizes: torch.ones(4).expand(b, -1)
            if _contains_proxy(args) or _contains_proxy(kwargs):
                return tracer.create_proxy("call_method", name, (self,) + args, kwargs)
            return fn(self, *args, **kwargs)
        return method

    methods = {name: getattr(torch.Tensor, name) for name in _SIZED_METHODS}
    own_methods = {name for name in methods if name in vars(torch.Tensor)}
    checks = {name: getattr(torch, name) for name in _CHECK_FUNCTIONS if hasattr(torch, name)}
    builtins.isinstance = _traced_isinstance
    builtins.callable = _traced_callable
    builtins.len = _traced_len
    builtins.range = _TracedRangeType
    script_call = torch.jit.ScriptFunction.__call__
    torch.jit.ScriptFunction.__call__ = _script_function_call(script_call)
    try:
        for name, fn in methods.items():
            setattr(torch.Tensor, name, wrap_method(name, fn))
        for name, fn in saved.items():
            setattr(torch, name, wrap(fn))
        for name, fn in checks.items():
            setattr(torch, name, _concrete_check(fn, _CHECK_FUNCTIONS[name]))
        # the builtins replaced above act in this thread only (see .threads)
        with PlainIndexing(), _eager_torch_function_answer(PlainIndexing), tracing_in_this_thread(), \
                control_flow_patches(tracer), _transformers_number_casts(), \
                _compiled_functions_run_plain(), \
                (loop_range_patch(tracer) if tracer.roll_loops else contextlib.nullcontext()):
            tracer.written.dispatched = True  # PlainIndexing hands it the calls (see WrittenMemory)
            try:
                yield
            finally:
                tracer.written.dispatched = False
    finally:
        builtins.isinstance = _orig_isinstance
        builtins.callable = _orig_callable
        builtins.len = _orig_len
        builtins.range = _orig_range
        torch.jit.ScriptFunction.__call__ = script_call
        for name, fn in methods.items():  # what torch.Tensor inherits is deleted again, not set on it
            if name in own_methods:
                setattr(torch.Tensor, name, fn)
            else:
                delattr(torch.Tensor, name)
        for name, fn in saved.items():
            setattr(torch, name, fn)
        for name, fn in checks.items():
            setattr(torch, name, fn)


# torch's runtime checks -> (position, keyword) of their condition argument
_CHECK_FUNCTIONS = {
    "_check": (0, "cond"), "_check_with": (1, "cond"), "_check_index": (0, "cond"),
    "_check_value": (0, "cond"), "_check_type": (0, "cond"), "_check_not_implemented": (0, "cond"),
    "_assert": (0, "condition"),
}


def _concrete_check(fn, where):
    """``fn`` with a traced condition replaced by its example value, recorded as a guard
    (``torch._check(x.shape[0] == n)`` must hold at every size the export claims)."""
    pos, key = where

    def check(*args, **kwargs):
        cond = args[pos] if len(args) > pos else kwargs.get(key)
        if _orig_isinstance(cond, CustomProxy):
            tracer, cond.tracer._checking = cond.tracer, True  # an assertion, not a branch to flip
            try:
                decided = bool(cond)
            finally:
                tracer._checking = False
            if len(args) > pos:
                args = args[:pos] + (decided,) + args[pos + 1:]
            else:
                kwargs = {**kwargs, key: decided}
        return fn(*args, **kwargs)

    check.__wrapped__ = fn
    return check


# entry point --------------------------------------------------------------------------
@dataclasses.dataclass
class TraceResult:
    """What the tracer hands on: the fx graph module, its named inputs/outputs and guards."""

    gm: fx.GraphModule
    input_names: list
    output_names: list
    guards: list
    example_inputs: list  # flat tensors in placeholder order
    control_flow: list = dataclasses.field(default_factory=list)  # how cond/scan/while_loop were converted
    decisions: list = dataclasses.field(default_factory=list)  # numbered data decisions (branches="select")
    loops: list = dataclasses.field(default_factory=list)  # Python loops over traced sizes (roll_loops)
    at_size: Optional[tuple] = None  # (symbol, size): the forward traced there too, selected there (merge_at_size)
    bound_reads: list = dataclasses.field(default_factory=list)  # bounds taken as numbers read (.data_bounds)


class _TraceRoot(torch.nn.Module):
    """Shares the model's parameters and children so that fx paths equal the model's own."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.__dict__["_modules"] = model._modules
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers


class _LeafRoot(torch.nn.Module):
    """Holds a root model that is itself a leaf module, so that its call is recorded whole."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class TraceSettings:
    """How :func:`trace_model` traces. ``output_names`` name the outputs (else the forward's own
    structure names them); ``leaf_types``/``leaf_names``: modules kept as one call; ``forced``,
    ``size_sites``, ``data_decisions``, ``unify_sizes``: see :class:`CustomTracer`;
    ``roll_loops``: note the Python loops over ranges of traced sizes (:mod:`.loops`)."""
    output_names: Optional[list] = None
    leaf_types: tuple = ()
    leaf_names: tuple = ()
    forced: Optional[dict] = None
    roll_loops: object = False  # True, or the (file, line) of the loops to roll
    size_sites: frozenset = frozenset()
    data_decisions: bool = True
    unify_sizes: bool = True
    bind_reads: bool = True  # a bound equal to a number read from data stands for it (.data_bounds)


def trace_model(model: torch.nn.Module, args: tuple, kwargs: dict, flat_names: list,
                settings: Optional[TraceSettings] = None, **fields) -> TraceResult:
    """Trace ``model(*args, **kwargs)``; tensors inside the inputs become placeholders
    named ``flat_names`` (in :func:`structures.flatten` order). ``settings``
    (:class:`TraceSettings`), with ``fields`` replacing some of them by name."""
    opts = dataclasses.replace(settings or TraceSettings(), **fields)
    leaf_types = opts.leaf_types
    while isinstance(model, _compiled_module_types()):
        model = model._orig_mod  # torch.compile(model): the model it wraps
    if isinstance(model, tuple(leaf_types)):
        model = _LeafRoot(model)  # a root that an extractor lowers whole: one call_module node
    flat = structures.flatten((args, kwargs), "")
    if len(flat) != len(flat_names):
        raise TraceError(f"expected {len(flat_names)} input names for {len(flat)} input tensors")
    tracer = CustomTracer(leaf_types, opts.leaf_names, opts.forced, opts.size_sites, opts.data_decisions,
                          opts.unify_sizes)
    tracer.roll_loops = opts.roll_loops
    tracer.bind_reads = opts.bind_reads
    # the tracer runs the forward on ``values``, which in-place updates of the inputs change; the
    # example inputs handed back are the inputs as given
    originals = {name: t.detach().clone() for name, (_, t) in zip(flat_names, flat)}
    values = {name: t.clone() for name, t in originals.items()}
    tracer.placeholder_values = values
    keys = [k for k, _ in flat]
    holder: dict = {}

    def call(proxies):
        trace_through_wrapped_functions()  # torch.fx.wrap-ed functions: their code is traced
        by_key = dict(zip(keys, proxies))
        a, k = structures.rebuild((args, kwargs), lambda key, _t: by_key[key])
        # no autograd, as in the reference runs: a forward that checkpoints its blocks
        # (torch.utils.checkpoint) then just runs them
        with torch.no_grad():
            # the model's own forward hooks (pre and post) run as in model(...): _call_impl
            # runs them around forward without the tracer's patched Module.__call__
            hooked = model._forward_pre_hooks or model._forward_hooks
            out = model._call_impl(*a, **k) if hooked else model.forward(*a, **k)
        flat_out = structures.flatten(out, "")
        holder["out_names"] = [n or "output" for n, _ in flat_out]
        return [p for _, p in flat_out]

    params = ", ".join(flat_names)
    namespace: dict = {}
    exec(f"def forward(self, {params}):\n    return self._fx2nnef_call([{params}{',' if len(flat_names) == 1 else ''}])\n", namespace)
    root_cls = type("TracedModel", (_TraceRoot,), {"forward": namespace["forward"]})
    root = root_cls(model)
    root.__dict__["_fx2nnef_call"] = call
    saved = _module_state(model)
    try:
        with tracing_patches(tracer), packed_sequence_patches(model), size_casts(model):
            graph = tracer.trace(root)
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(_untraceable_message(exc)) from exc
    finally:
        tracer.written.close()
        _restore_module_state(saved)
    outs = holder["out_names"]
    not_traced = [n for n, node in zip(outs, _output_nodes(graph)) if not isinstance(node, fx.Node)]
    if not_traced:
        raise TraceError(f"outputs {not_traced} do not depend on any traced value")
    gm = _graph_module_class()(root, graph, class_name=type(model).__name__)
    names = list(opts.output_names) if opts.output_names else outs
    return TraceResult(gm, list(flat_names), names, tracer.guards, [originals[n] for n in flat_names],
                       list(tracer.control_flow_notes), list(tracer.decisions), list(tracer.loops),
                       bound_reads=list(tracer.bound_reads))


def _module_state(model: torch.nn.Module) -> list:
    """Each module's attributes, parameters, buffers, submodules and hooks (shallow copies), for
    :func:`_restore_module_state`. Hooks too: transformers installs its output-capturing forward
    hooks on the first call and marks the model (``_output_capturing_hooks_installed``); restoring
    the mark alone left the hooks in place, and the next run installed them again, each stage's
    output then collected twice (SegFormer's decode head paired its projections with the wrong
    stages). And the contents of the tensors they hold other than parameters (see
    :mod:`.kept_tensors`): a forward that writes a buffer or a plain tensor attribute in place
    must not change the next run's model."""
    return [(m, dict(m.__dict__), {k: dict(v) for k, v in m.__dict__.items()
                                   if (k in ("_parameters", "_buffers", "_modules") or "_hooks" in k)
                                   and isinstance(v, dict)})
            for m in model.modules()] + [tensor_contents(model)]


def _restore_module_state(saved: list) -> None:
    """Undo what the traced forward assigned to the modules: a forward that caches a value on
    itself (``self.pos_encoding = self.pos_encoding.to(x.dtype)``, a rotary table built on first
    use) stored a traced value there, which broke every later run of the model (the reference
    runs, the user's own) and the graph's reads of the original."""
    *modules, contents = saved
    put_back(contents)
    for m, attrs, tables in modules:
        for name, table in tables.items():
            _restore_dict(attrs[name], table)
        _restore_dict(m.__dict__, attrs)


def _restore_dict(current: dict, saved: dict) -> None:
    """Make ``current`` hold ``saved``'s items in its order. A key both hold stays in place the
    whole time (each step is one dict operation): another thread reading the model meanwhile (the
    export's lowering, while a check runs the model in a worker) never finds a module's attribute
    gone. Only keys that moved are put back by clearing the dict first."""
    for key in [k for k in current if k not in saved]:
        del current[key]
    if list(current) != list(saved):
        current.clear()
        current.update(saved)
        return
    for key, value in saved.items():
        if current[key] is not value:
            current[key] = value


def _graph_module_class() -> type:
    """torch's lazily compiled GraphModule when this torch has it: the analysis runs the graph
    with an interpreter and the passes edit it, so the Python code of ``forward`` is generated
    only if something calls or prints the module (each generation of a 1,000-node graph costs
    about 30 ms, and the passes asked for two)."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:  # a torch without it: compiled at once, as before
        return fx.GraphModule
    return _LazyGraphModule


def _untraceable_message(exc: Exception) -> str:
    """Where in the user's code tracing broke, and what to do about it."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_SKIP_PREFIXES) and not f.filename.startswith("<")]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames else ""
    return (f"tracing failed{where}: {type(exc).__name__}: {exc}. The code there cannot run on traced "
            "values (e.g. numpy or Python arithmetic on tensors); keep that module as a leaf with "
            f"{phrase('leaf_modules', 'leaf_modules=(ItsClass,)')} and register a ModuleInfoExtractor for it, or use "
            f"{spell('fallback', 'piece_by_piece')}.")


def _output_nodes(graph: fx.Graph) -> list:
    out = [n for n in graph.nodes if n.op == "output"][0]
    return list(out.args[0])
