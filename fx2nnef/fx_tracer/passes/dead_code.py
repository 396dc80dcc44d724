"""Remove nodes whose results are never used."""
from __future__ import annotations

import torch.fx as fx


def remove_dead_code(gm: fx.GraphModule, keep: set = frozenset()) -> bool:
    """Drop unused pure nodes (placeholders and ``keep`` stay). Returns True if changed."""
    changed = False
    for node in reversed(list(gm.graph.nodes)):
        if node.op in ("placeholder", "output") or node.users or node in keep:
            continue
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return changed


def fold_constant_selects(gm: fx.GraphModule, constant: set, values: dict, shapes: dict) -> bool:
    """``torch.where(c, a, b)`` whose condition ``c`` is a constant holding one answer (``torch.cond``
    on static sizes records both branches) becomes ``a`` or ``b`` when that has the select's
    shape (at the example and, in a dynamic export, as a shape expression) and dtype; the other
    branch is then dead code. Returns True if changed."""
    import torch

    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not torch.where or len(n.args) != 3 or n.kwargs:
            continue
        cond = n.args[0]
        cv = values.get(cond) if isinstance(cond, fx.Node) and cond in constant else None
        if not isinstance(cv, torch.Tensor) or cv.dtype != torch.bool or cv.numel() == 0 or cv.device.type == "meta":
            continue
        pick = n.args[1] if bool(cv.all()) else n.args[2] if not bool(cv.any()) else None
        if not isinstance(pick, fx.Node):
            continue
        pv, out = values.get(pick), values.get(n)
        if not (isinstance(pv, torch.Tensor) and isinstance(out, torch.Tensor) and pv.shape == out.shape
                and pv.dtype == out.dtype and shapes.get(pick) == shapes.get(n)):
            continue
        n.replace_all_uses_with(pick)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()
    return changed
