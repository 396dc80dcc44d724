"""Pass: compute chosen regions of a float16 graph in float32 (``force_f32``).

A region is a set of nodes. Its float16 inputs are cast to float32 on the way in, every
float16 value it computes becomes float32 (an explicit cast to float16 inside it becomes a
cast to float32), and its results are cast back to float16 where the rest of the graph reads
them. The graph's outside keeps its types, so the asset's inputs, outputs and caches do not change.

Region kinds:

- ``norms``: each call of a module whose class name ends in ``Norm`` (``LlamaRMSNorm``,
  ``LayerNorm``, ...) and each ``layer_norm`` / ``rms_norm`` / ``group_norm`` call.
- ``attention``: each ``scaled_dot_product_attention``, and in eager attention the nodes from the
  scores product (Q K^T) through the softmax to the product with V, in one module (and its
  submodules, such as a dropout).
- ``linear``: each product with a weight (``F.linear``; ``mm``/``addmm``/``matmul`` with a
  parameter as right operand): the activation is cast to float32 and the weight is read as
  stored (float16 or Q4_0), so the product accumulates and is written in float32, then rounded
  once to float16.
"""
from __future__ import annotations

import re
from typing import Iterable

from .dtypes import DType
from .graph import Graph, Node, Value, map_values

F32_REGIONS = ("norms", "attention", "linear")
NORM_KINDS = {"F.layer_norm", "torch.layer_norm", "F.rms_norm", "torch.rms_norm", "F.group_norm", "torch.group_norm"}
NORM_MODULE = re.compile(r"norm(\dd)?$", re.IGNORECASE)
SDPA_KINDS = {"F.scaled_dot_product_attention"}
SOFTMAX_KINDS = {"F.softmax", "torch.softmax", "Tensor.softmax", "torch.special.softmax"}
PRODUCT_KINDS = {"torch.matmul", "Tensor.matmul", "operator.matmul", "torch.bmm", "Tensor.bmm",
                 "torch.baddbmm", "Tensor.baddbmm"}
# op kind -> (parameter name, position) of the weight operand, read as stored
WEIGHT_OPERANDS = {
    "F.linear": ("weight", 1), "torch.mm": ("mat2", 1), "Tensor.mm": ("mat2", 1),
    "torch.addmm": ("mat2", 2), "Tensor.addmm": ("mat2", 2),
    "torch.matmul": ("other", 1), "Tensor.matmul": ("other", 1), "operator.matmul": ("other", 1),
}
CAST_KINDS = {"Tensor.to", "Tensor.type", "Tensor.type_as", "Tensor.half", "Tensor.float", "Tensor.bfloat16"}
# How far back from a softmax the scores product is looked for (scale, soft-capping, mask, casts)
_MAX_SCORE_STEPS = 12


def resolve_regions(regions: Iterable[str]) -> tuple:
    """``regions`` checked and in canonical order; ``"all"`` means every kind."""
    if isinstance(regions, str):
        regions = [r for r in regions.split(",") if r]
    wanted = set()
    for r in regions:
        r = str(r).strip()
        if r == "all":
            wanted.update(F32_REGIONS)
        elif r in F32_REGIONS:
            wanted.add(r)
        else:
            raise ValueError(f"force_f32 takes {', '.join(map(repr, F32_REGIONS))} or 'all', got {r!r}")
    return tuple(r for r in F32_REGIONS if r in wanted)


def apply_f32_regions(graph: Graph, regions: Iterable[str]) -> dict:
    """Compute the ``regions`` kinds of ``graph`` in float32 (see the module doc).

    Returns ``{kind: number of regions found}``; a region without float16 values is counted
    but left as it is (an f32 graph is unchanged).
    """
    found = {}
    for kind in resolve_regions(regions):
        groups = {"norms": _norm_regions, "attention": _attention_regions, "linear": _linear_regions}[kind](graph)
        found[kind] = len(groups)
        for nodes in groups:
            _to_f32(graph, nodes, keep=_weights_read_as_stored(nodes) if kind == "linear" else set())
    return found


# region finders ------------------------------------------------------------------------


def _norm_regions(graph: Graph) -> list:
    by_module: dict = {}
    alone = []
    for node in graph.nodes:
        if node.module_type and NORM_MODULE.search(node.module_type):
            by_module.setdefault(node.module_path, []).append(node)
        elif node.kind in NORM_KINDS:
            alone.append([node])
    return list(by_module.values()) + alone


def _attention_regions(graph: Graph) -> list:
    regions = [[n] for n in graph.nodes if n.kind in SDPA_KINDS]
    for softmax in (n for n in graph.nodes if n.kind in SOFTMAX_KINDS):
        scores = _product_before(softmax)
        mixed = _product_after(softmax)
        if scores is None or mixed is None:
            continue
        after = _descendants(scores, softmax.module_path)
        before = _ancestors(mixed, softmax.module_path)
        regions.append([n for n in graph.nodes if id(n) in after and id(n) in before])
    return regions


def _linear_regions(graph: Graph) -> list:
    return [[n] for n in graph.nodes if _weight_of(n) is not None]


def _weight_of(node: Node):
    """The constant weight operand of a weight product, else None."""
    spec = WEIGHT_OPERANDS.get(node.kind)
    if spec is None:
        return None
    name, position = spec
    weight = node.kwargs.get(name, node.args[position] if len(node.args) > position else None)
    return weight if isinstance(weight, Value) and weight.is_constant and weight.rank == 2 else None


def _weights_read_as_stored(nodes: list) -> set:
    return {id(w) for w in (_weight_of(n) for n in nodes) if w is not None}


def _activations(node: Node) -> list:
    return [v for v in node.inputs() if v.producer is not None]


def _product_before(softmax: Node):
    """The product of two computed tensors that the softmax's input comes from, walking back
    through single-activation ops (scale, soft-capping, mask add, casts) in the same module."""
    node = softmax
    for _ in range(_MAX_SCORE_STEPS):
        ins = _activations(node)
        if not ins:
            return None
        producers = [v.producer for v in ins if _within(v.producer, softmax.module_path)]
        # the scores are the operand whose history holds a product; a mask comes from elsewhere
        chain = [p for p in producers if p.kind in PRODUCT_KINDS or _activations(p)]
        if not chain:
            return None
        node = next((p for p in chain if p.kind in PRODUCT_KINDS), chain[0])
        if node.kind in PRODUCT_KINDS:
            return node if len(_activations(node)) >= 2 else None
    return None


def _product_after(softmax: Node):
    """The product (with V) that reads the softmax's probabilities, through casts and dropout."""
    value = softmax.outputs[0]
    for _ in range(_MAX_SCORE_STEPS):
        users = [u for u in value.uses if _within(u, softmax.module_path)]
        if len(users) != 1:
            return None
        user = users[0]
        if user.kind in PRODUCT_KINDS:
            return user
        if len(user.outputs) != 1:
            return None
        value = user.outputs[0]
    return None


def _within(node: Node, module_path: str) -> bool:
    """Whether ``node`` runs in the module ``module_path`` or one of its submodules (a dropout)."""
    return node.module_path == module_path or node.module_path.startswith(module_path + ".")


def _descendants(start: Node, module_path: str) -> set:
    seen, todo = {id(start)}, [start]
    while todo:
        for out in todo.pop().outputs:
            for user in out.uses:
                if _within(user, module_path) and id(user) not in seen:
                    seen.add(id(user))
                    todo.append(user)
    return seen


def _ancestors(end: Node, module_path: str) -> set:
    seen, todo = {id(end)}, [end]
    while todo:
        for v in todo.pop().inputs():
            p = v.producer
            if p is not None and _within(p, module_path) and id(p) not in seen:
                seen.add(id(p))
                todo.append(p)
    return seen


# the rewrite ---------------------------------------------------------------------------


def _to_f32(graph: Graph, nodes: list, keep: set) -> None:
    """Rewrite ``nodes`` (in graph order) to compute in float32; ``keep``: ids of constants
    read as they are (weights of products, read as stored)."""
    inside = {id(n) for n in nodes}
    produced = {id(o) for n in nodes for o in n.outputs}
    casts_in: dict = {}
    for node in nodes:
        _retarget_casts(node)

        def widen(v: Value) -> Value:
            if id(v) in produced or v.dtype is not DType.F16 or id(v) in keep:
                return v
            if id(v) not in casts_in:
                casts_in[id(v)] = _insert_cast(graph, v, DType.F32, before=node)
            return casts_in[id(v)]
        _replace_inputs(node, widen)
    for node in nodes:
        for out in node.outputs:
            if out.dtype is not DType.F16:
                continue
            out.dtype = DType.F32
            outside = [u for u in out.uses if id(u) not in inside]
            is_output = any(o is out for o in graph.outputs)
            if not outside and not is_output:
                continue
            narrow = _insert_cast(graph, out, DType.F16, after=node)
            for user in outside:
                _replace_inputs(user, lambda v: narrow if v is out else v)
            graph.outputs = [narrow if o is out else o for o in graph.outputs]


def _retarget_casts(node: Node) -> None:
    """Inside a float32 region, a cast to float16 casts to float32 instead, and so does any
    float16 dtype argument (``softmax(x, dtype=torch.float16)``, ``full(..., dtype=...)``)."""
    before = list(node.inputs())
    if node.kind in CAST_KINDS and node.outputs[0].dtype is DType.F16:
        source = node.args[0] if node.args else node.kwargs.get("input")
        node.kind, node.args, node.kwargs = "Tensor.to", (source,), {"dtype": DType.F32}
    else:
        node.args, node.kwargs = _f16_args_to_f32(node.args), _f16_args_to_f32(node.kwargs)
    for v in before:
        v.uses.remove(node)
    for v in node.inputs():
        v.uses.append(node)


def _f16_args_to_f32(obj):
    if obj is DType.F16:
        return DType.F32
    if isinstance(obj, dict):
        return {k: _f16_args_to_f32(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_f16_args_to_f32(v) for v in obj)
    return obj


def _replace_inputs(node: Node, fn) -> None:
    before = list(node.inputs())
    node.args = map_values(node.args, fn)
    node.kwargs = map_values(node.kwargs, fn)
    after = list(node.inputs())
    for old, new in zip(before, after):
        if old is not new:
            if node in old.uses:
                old.uses.remove(node)
            new.uses.append(node)


def _insert_cast(graph: Graph, value: Value, dtype: DType, before: Node = None, after: Node = None) -> Value:
    """A ``Tensor.to(value, dtype)`` node placed before ``before`` or after ``after``."""
    out = graph.new_value(f"{value.name}_{dtype.value}", dtype, value.shape)
    anchor = before if before is not None else after
    node = Node("Tensor.to", (value,), {"dtype": dtype}, [out], module_path=anchor.module_path,
                module_type=anchor.module_type, source=anchor.source, name=out.name,
                meta={"force_f32": "in" if before is not None else "out"})
    graph.add_node(node)
    graph.nodes.pop()
    index = next(i for i, n in enumerate(graph.nodes) if n is anchor)
    graph.nodes.insert(index if before is not None else index + 1, node)
    return out
