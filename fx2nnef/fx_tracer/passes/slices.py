"""Slice cleanup: indexing that selects everything (``x[:, 0:INT64_MAX]``, ``x[...]``) is the input itself."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

_BIG = 2**62


def _is_full(item, size) -> bool:
    """``item`` selects the whole axis at every length (``size``: its length at the example)."""
    if item is Ellipsis:
        return True
    if not isinstance(item, slice):
        return False
    start, stop, step = item.start, item.stop, item.step
    if any(isinstance(v, fx.Node) for v in (start, stop, step)):
        return False
    if start not in (None, 0) or step not in (None, 1):
        return False
    # a constant end at or past the example's size (``x[:9]`` of S=5) is no full slice when the
    # axis is dynamic: past that end the slice holds 9 items, not S; it stays a slice, whose
    # lowering knows the axis (an end past a static size is dropped there)
    return stop is None or stop >= _BIG


def cleanup_slices(gm: fx.GraphModule) -> bool:
    """Replace identity getitem nodes by their input. Returns True if changed."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not operator.getitem:
            continue
        base, index = node.args
        if not isinstance(base, fx.Node) or not isinstance(base.meta.get("value"), torch.Tensor):
            continue
        items = index if isinstance(index, tuple) else (index,)
        shape = base.meta["value"].shape
        has_ellipsis = any(i is Ellipsis for i in items)
        if len(items) > len(shape) + has_ellipsis:
            continue
        sizes = [None if has_ellipsis else shape[d] for d in range(len(items))]
        if all(_is_full(it, size) for it, size in zip(items, sizes)):
            node.replace_all_uses_with(base)
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()
    return changed
