"""Loops (``scan``, ``while_loop``): the IR node ``fx2nnef.loop`` with its body as an IR Graph.

- tract: ``tract_core_scan`` over the body written as a generated fragment. The body's
  parameters are the carries (``state``), the scanned pieces (``scan``, chunk -1 for a
  reverse scan) and the loop-invariant values and weights (``full``); ``reset_every_turn``
  so that a reused tract state never carries a previous call's final state.
- Khronos: the body lowered inline once per step (the scanned length must be static).
"""
from __future__ import annotations


from ...errors import EmitError, UnsupportedOpError
from ...ir import Graph, Node, Value, map_values
from ..context import EmitContext
from ..registry import register


def _step_copy(body: Graph, actuals: list):
    """The body's nodes with fresh output Values and its inputs replaced by ``actuals`` (one step)."""
    mapping = {id(p): a for p, a in zip(body.inputs, actuals)}
    step = Graph(body.name)
    step.symbols = list(body.symbols)

    fresh: set = set()

    def fn(v):
        return mapping.get(id(v), v)

    for n in body.nodes:
        outs = [Value(o.name, o.dtype, o.shape) for o in n.outputs]
        mapping.update({id(o): c for o, c in zip(n.outputs, outs)})
        fresh.update(id(c) for c in outs)
        copy = Node(n.kind, map_values(n.args, fn), map_values(n.kwargs, fn), outs, module_path=n.module_path,
                    module_type=n.module_type, source=n.source, name=n.name, meta=dict(n.meta))
        for o in outs:
            o.producer = copy
        for v in copy.inputs():
            if id(v) in fresh:
                v.uses.append(copy)
        step.nodes.append(copy)
    return step, [fn(o) for o in body.outputs]


@register("fx2nnef.loop")
def loop_unrolled(ctx: EmitContext, init: list, xs: list, full: list, body: Graph, dim: int, reverse: bool,
                  n_carry: int, kind: str):
    """Unrolled: the body lowered inline once per step (static lengths only).

    Standard NNEF has no loop, and the Khronos tools run no user fragment unless told to
    decompose it, so the body is not a fragment here."""
    from ..emitter import lower_nodes  # the emitter imports the op families

    steps = xs[0].shape[dim] if xs[0].shape is not None else None
    if not isinstance(steps, int):
        raise EmitError(f"standard NNEF has no loop: this {kind} runs over a dynamic length ({steps}); give it a "
                        "static length, or export for tract (tract_core_scan)")
    node = ctx.node
    carry = list(init)
    n_y = len(body.outputs) - n_carry
    ys: list = [[None] * steps for _ in range(n_y)]
    try:
        for i in (range(steps - 1, -1, -1) if reverse else range(steps)):
            ctx.node = node
            pieces = [ctx.op("slice", x, axes=[dim], begin=[i], end=[i + 1], out_dtype=x.dtype,
                             out_shape=x.shape[:dim] + (1,) + x.shape[dim + 1:]) for x in xs]
            step, outs = _step_copy(body, carry + pieces + list(full))
            lower_nodes(ctx, step)
            carry = outs[:n_carry]
            for j in range(n_y):
                ys[j][i] = outs[n_carry + j]
    except UnsupportedOpError as exc:
        raise EmitError(f"in the body of this {kind}: {exc}") from None
    finally:
        ctx.node = node
    stacked = [ctx.op("concat", y, axis=dim) if steps > 1 else ctx.op("copy", y[0]) for y in ys]
    result = [ctx.op("copy", c) if any(c is v for v in init) else c for c in carry] + stacked
    for out, like in zip(result, node.outputs):
        out.dtype, out.shape = like.dtype, like.shape
    return result
