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
