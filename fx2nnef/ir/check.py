"""What a target is checked against: inputs and the outputs PyTorch gave for them, as numpy."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class CheckCase:
    """One set of inputs with the outputs PyTorch gave for them."""

    label: str  # e.g. "example" or "S=5"
    inputs: list  # numpy arrays, in graph input order
    expected: list  # numpy arrays, in graph output order


# Ops whose integer outputs are positions chosen among the items they order or compare: on equal
# items (ties) torch picks any of them (topk and sort in no fixed order), tract the lower position.
_ORDERING_OPS = frozenset({"topk", "sort", "argsort", "kthvalue", "mode", "median", "nanmedian", "max", "min",
                           "argmax", "argmin", "cummax", "cummin"})


def index_outputs(node) -> list:
    """The outputs of ``node`` that are positions picked by an ordering op (the indices of
    ``topk``/``sort``/``max(dim)``/``kthvalue``/``mode``/``median``/``cummax``/max pooling with
    indices, ``argsort``/``argmax``/``argmin``), integers only; [] for any other op."""
    parts = node.kind.split(".")
    name = parts[3] if node.kind.startswith("torch.ops.") and len(parts) > 3 else parts[-1]
    pool = "max_pool" in name or name.endswith("_with_indices") or name.startswith(("MaxPool", "AdaptiveMaxPool"))
    if name not in _ORDERING_OPS and not pool:
        return []
    if len(node.outputs) > 1:
        picked = node.outputs[1:]  # (values, indices)
    else:
        picked = node.outputs if name.startswith("arg") else []
    return [v for v in picked if v.dtype is not None and v.dtype.is_int]


def outputs_from_indices(graph) -> list:
    """For each graph output, whether it is computed from the indices of an ordering op (see
    :func:`index_outputs`): where the op's input holds equal items, such an output may differ
    between engines that both compute the op correctly."""
    tainted: set = set()
    for node in graph.nodes:
        if any(id(v) in tainted for v in node.inputs()):
            tainted.update(id(o) for o in node.outputs)
        else:
            tainted.update(id(o) for o in index_outputs(node))
    return [id(v) in tainted for v in graph.outputs]
