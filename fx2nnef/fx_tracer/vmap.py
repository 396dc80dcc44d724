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
import sys

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ..errors import TraceError
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


def vmap_as_scan(recorder, func, in_dims, out_dims, args: tuple, kwargs: dict):
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
