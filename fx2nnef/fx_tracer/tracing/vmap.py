"""``torch.vmap`` under the tracer: a scan over the mapped dim with stacked outputs.

functorch's batching cannot run on traced values. While tracing, ``vmap_impl`` (what every
``torch.vmap`` / ``torch.func.vmap`` wrapper calls) is replaced: the mapped inputs are moved to
dim 0 and the function becomes the body of a loop with no carry that stacks its outputs
(``Recorder.loop``, ``tract_core_scan`` for tract), so a dynamic batch size stays dynamic.
Outputs are then moved to ``out_dims``. Arguments with ``in_dims=None`` and keyword
arguments are passed unchanged, as vmap does.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ...errors import TraceError
from .proxy import CustomProxy
from .source import user_frame_location


def _per_leaf(in_dims, args: tuple) -> list:
    """``in_dims`` spread over the leaves of ``args`` (an int or None for every leaf)."""
    if isinstance(in_dims, int) or in_dims is None:
        return [in_dims] * len(pytree.tree_leaves(args))
    if not isinstance(in_dims, (tuple, list)) or len(in_dims) != len(args):
        raise TraceError(f"vmap: in_dims {in_dims!r} does not match the {len(args)} positional argument(s)")
    out: list = []
    for d, a in zip(in_dims, args):
        n = len(pytree.tree_leaves(a))
        if isinstance(d, int) or d is None:
            out += [d] * n
        else:
            out += [x for x, _ in zip(pytree.tree_leaves(d), range(n))]
    return out


_SCANS_ONLY = contextvars.ContextVar("fx2nnef_vmap_scans_only", default=False)


def vmap_as_scan(recorder, func, in_dims, out_dims, args: tuple, kwargs: dict):
    """``torch.vmap(func, in_dims, out_dims)(*args, **kwargs)`` recorded as broadcasting ops
    (:func:`_vmap_broadcast`) where that gives the loop's values at the example, else as a loop."""
    if not _SCANS_ONLY.get():
        levels, inner = _vmap_chain(func, in_dims, out_dims)
        axes = _broadcast_axes(levels, args, kwargs)
        if axes is not None:
            return _broadcast_or_scan(recorder, inner, levels, axes, args,
                                      lambda: _vmap_scan(recorder, func, in_dims, out_dims, args, kwargs))
    return _vmap_scan(recorder, func, in_dims, out_dims, args, kwargs)


def _vmap_chain(func, in_dims, out_dims) -> tuple:
    """``([(in_dims, out_dims), ...], innermost function)`` of ``torch.vmap(torch.vmap(f, ...), ...)``:
    the levels from the outermost, read from the closures of torch.vmap's wrappers."""
    levels = [(in_dims, out_dims)]
    code = _vmap_wrapper_code()
    while code is not None and getattr(func, "__code__", None) is code and func.__closure__:
        cells = dict(zip(func.__code__.co_freevars, (c.cell_contents for c in func.__closure__)))
        if not {"func", "in_dims", "out_dims"} <= set(cells) or cells.get("chunk_size") is not None:
            break
        levels.append((cells["in_dims"], cells["out_dims"]))
        func = cells["func"]
    return levels, func


_WRAPPER_CODE: list = []


def _vmap_wrapper_code():
    """The code object of the function torch.vmap returns (shared by every such wrapper)."""
    if not _WRAPPER_CODE:
        try:
            from torch._functorch.apis import vmap as functorch_vmap

            _WRAPPER_CODE.append(functorch_vmap(lambda x: x).__code__)
        except Exception:  # noqa: BLE001 - another torch: every vmap is a loop
            _WRAPPER_CODE.append(None)
    return _WRAPPER_CODE[0]


def _broadcast_axes(levels: list, args: tuple, kwargs: dict):
    """For each positional argument, the level that maps it (None: no level does), when the
    nest of vmaps is one over 1-d tensors whose items are numbers (an index-based mask function:
    ``mask[b, k] & (k <= q)`` over arange(B), arange(Q), arange(K)); else None."""
    if kwargs or any(o != 0 for _, o in levels) or any(isinstance(a, (list, tuple, dict)) for a in args):
        return None
    axes: list = [None] * len(args)
    for k, (in_dims, _) in enumerate(levels):
        dims = in_dims if isinstance(in_dims, (list, tuple)) else [in_dims] * len(args)
        if len(dims) != len(args) or not any(d is not None for d in dims):
            return None
        for i, d in enumerate(dims):
            if d is None:
                continue
            value = _value(args[i])
            if axes[i] is not None or not isinstance(value, torch.Tensor) or value.dim() != 1 or d not in (0, -1):
                return None
            axes[i] = k
    for a, k in zip(args, axes):
        value = _value(a)
        if k is None and isinstance(value, torch.Tensor) and value.dim() > 0:
            return None  # the same tensor for every item: its own axes would meet the levels'
    return axes


def _broadcast_or_scan(recorder, inner, levels: list, axes: list, args: tuple, scan):
    """The nest of vmaps as broadcasting: the argument mapped by level k viewed with its items
    on axis k of ``len(levels)`` axes, ``inner`` called once on those views and its results
    expanded to every level's size. The loop (``scan``) is recorded too and its values at the
    example compared with the broadcast's: equal, the broadcast stands and the loop is dropped
    (its nodes are dead, the tracer's records from it removed); otherwise, or when ``inner``
    cannot take the views, the loop stands."""
    depth = len(levels)
    state = _TraceState(recorder)
    try:
        views = []
        for a, k in zip(args, axes):
            views.append(a if k is None else a[(slice(None),) + (None,) * (depth - 1 - k)])
        sizes = [next(args[i] for i, k in enumerate(axes) if k == level).shape[0] for level in range(depth)]
        out = inner(*views)
        flat, spec = pytree.tree_flatten(out)
        if not flat or not all(isinstance(_value(o), torch.Tensor) and _value(o).dim() <= depth for o in flat):
            raise _NotBroadcast
        flat = [o.expand(*sizes) if isinstance(o, fx.Proxy) else o.expand(*[_value(n) for n in sizes]) for o in flat]
    except Exception:  # noqa: BLE001 - the function needs its items one by one: a loop
        state.drop_since_start()
        return scan()
    state.mark()
    token = _SCANS_ONLY.set(True)
    try:
        looped = scan()
    finally:
        _SCANS_ONLY.reset(token)
    loop_flat = pytree.tree_leaves(looped)
    same = len(loop_flat) == len(flat) and all(
        _value(a).shape == _value(b).shape and _value(a).dtype == _value(b).dtype and torch.equal(_value(a), _value(b))
        for a, b in zip(flat, loop_flat))
    if not same:
        state.drop_first_part()
        return looped
    state.drop_since_mark()
    where = user_frame_location()
    recorder.notes.append(f"torch.vmap at {where or 'an unknown line'}: {depth} nested level(s) over 1-d index "
                          "tensors written as broadcasting ops (equal to the loop at the example)")
    return pytree.tree_unflatten(flat, spec)


class _NotBroadcast(Exception):
    pass


def _value(x):
    """A traced value's concrete value (the value itself when it is not traced)."""
    return x.value if isinstance(x, CustomProxy) else x


class _TraceState:
    """The lengths of the tracer's and recorder's lists of records, to drop what an attempt added."""

    def __init__(self, recorder):
        t = recorder.tracer
        self.lists = [t.guards, t.decisions, t.control_flow_notes, t.loops, recorder.notes]
        self.start = [len(x) for x in self.lists]
        self.middle = None

    def mark(self):
        self.middle = [len(x) for x in self.lists]

    def drop_since_start(self):
        for x, n in zip(self.lists, self.start):
            del x[n:]

    def drop_since_mark(self):
        for x, n in zip(self.lists, self.middle):
            del x[n:]

    def drop_first_part(self):
        for x, a, b in zip(self.lists, self.start, self.middle):
            del x[a:b]


def _vmap_scan(recorder, func, in_dims, out_dims, args: tuple, kwargs: dict):
    """``torch.vmap(func, in_dims, out_dims)(*args, **kwargs)`` recorded as a loop."""
    tracer = recorder.tracer
    loc = user_frame_location()
    where = str(loc) if loc else "an unknown line"
    leaves, spec = pytree.tree_flatten(args)
    dims = _per_leaf(in_dims, args)
    mapped = [i for i, d in enumerate(dims) if d is not None]
    if not mapped:
        raise TraceError(f"vmap at {where}: no argument is mapped (every in_dim is None)")
    xs = []
    for i in mapped:
        value = leaves[i].value if isinstance(leaves[i], fx.Proxy) else leaves[i]
        if not isinstance(value, torch.Tensor):
            raise TraceError(f"vmap at {where}: argument leaf {i} is a {type(value).__name__} mapped with in_dim "
                             f"{dims[i]}; only tensors can be mapped (give None for it)")
        d = dims[i] % value.dim()
        xs.append(leaves[i] if d == 0 else tracer.create_proxy("call_function", torch.movedim, (leaves[i], d, 0), {}))
    out_spec: dict = {}

    def body(*slices):
        new = list(leaves)
        for i, s in zip(mapped, slices):
            new[i] = s
        out = func(*pytree.tree_unflatten(new, spec), **kwargs)
        flat, out_spec["out"] = pytree.tree_flatten(out)
        return flat

    ys = recorder.loop(body, [], xs, (), 0, False, "scan", where)
    recorder.notes[-1] = recorder.notes[-1].replace(f"scan at {where}", f"torch.vmap at {where} (as a scan)", 1)
    outs = pytree.tree_leaves(out_dims) if not isinstance(out_dims, int) else [out_dims] * len(ys)
    ys = [y if d in (0, None) else tracer.create_proxy("call_function", torch.movedim, (y, 0, d), {})
          for y, d in zip(ys, outs)]
    return pytree.tree_unflatten(ys, out_spec["out"])


def vmap_patch(recorder):
    """Route every ``torch.vmap`` call made while tracing to :func:`vmap_as_scan`."""
    return _vmap_routed_to(lambda func, in_dims, out_dims, args, kwargs:
                           vmap_as_scan(recorder, func, in_dims, out_dims, args, kwargs))


@contextlib.contextmanager
def _vmap_routed_to(impl):
    """Every ``torch.vmap(func, in_dims, out_dims)(*args, **kwargs)`` made inside the block calls
    ``impl(func, in_dims, out_dims, args, kwargs)`` instead of functorch."""
    apis = sys.modules.get("torch._functorch.apis")
    if apis is None or not hasattr(apis, "vmap_impl"):
        yield
        return
    orig = apis.vmap_impl

    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        return impl(func, in_dims, out_dims, args, kwargs)

    apis.vmap_impl = vmap_impl
    try:
        yield
    finally:
        apis.vmap_impl = orig


def vmap_as_loop(func, in_dims, out_dims, args: tuple, kwargs: dict):
    """``torch.vmap(func, in_dims, out_dims)(*args, **kwargs)`` run as a Python loop over the mapped
    dim (functorch refuses a Python decision on the data of a mapped value; a loop does not)."""
    leaves, spec = pytree.tree_flatten(args)
    dims = _per_leaf(in_dims, args)
    mapped = [(i, d % leaves[i].dim()) for i, d in enumerate(dims) if d is not None]
    if not mapped:
        raise TraceError("vmap: no argument is mapped (every in_dim is None)")
    steps = leaves[mapped[0][0]].shape[mapped[0][1]]
    results, out_spec = [], None
    for k in range(steps):
        new = list(leaves)
        for i, d in mapped:
            new[i] = leaves[i].select(d, k)
        flat, out_spec = pytree.tree_flatten(func(*pytree.tree_unflatten(new, spec), **kwargs))
        results.append(flat)
    outs = pytree.tree_leaves(out_dims) if not isinstance(out_dims, int) else [out_dims] * len(results[0])
    stacked = [torch.stack([r[j] for r in results], 0 if d is None else d) for j, d in enumerate(outs)]
    return pytree.tree_unflatten(stacked, out_spec)


def eager_vmap():
    """Run every ``torch.vmap`` call as a Python loop (:func:`vmap_as_loop`)."""
    return _vmap_routed_to(vmap_as_loop)
