"""tract's overrides of the control_flow converters (the common rules: ``fx2nnef.nnef_emit.ops.control_flow``)."""
from __future__ import annotations

import hashlib
import operator

import numpy as np
import torch

from fx2nnef.errors import EmitError
from fx2nnef.ir import DType, Graph, Node, SymDim, Value
from fx2nnef.ir.opkey import op_key
from fx2nnef.nnef_emit.context import EmitContext
from fx2nnef.nnef_emit.helpers import dim_value, negative_at
from fx2nnef.nnef_emit.registry import register
from ..profile import TRACT


def _body_fragment(ctx: EmitContext, body: Graph, kind: str, n_state: int = 0):
    from fx2nnef.nnef_emit.emitter import emit_fragment  # the emitter imports the op families

    placeholder = "__fx2nnef_loop_body__"
    frag = emit_fragment(body, ctx.profile, placeholder, registry=ctx.registry, loop_body=ctx.loop_body + 1,
                         n_state=n_state)
    # named after its text: unique across the graphs of one asset (custom ops), shared when equal
    name = f"{kind}_body_" + hashlib.sha1(frag.text.encode()).hexdigest()[:10]
    ctx.define_fragment(name, frag.text.replace(placeholder, name, 1), frag.fragments, frag.texts)
    return name, frag


def _set_outputs(ctx: EmitContext, outs) -> list:
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    for out, like in zip(outs, ctx.node.outputs):
        out.dtype, out.shape = like.dtype, like.shape
    return outs


def _runtime_true(ctx: EmitContext, anchors: list) -> Value:
    """A rank-0 ``true`` that tract cannot fold: computed from the first element of a runtime value."""
    anchor = next((v for v in anchors if not v.is_constant and v.shape is not None
                   and all(d != 0 for d in v.shape)), None)
    if anchor is None:
        raise EmitError("tract cannot scan over a constant here (it feeds the whole constant to the loop body) and "
                        "no runtime tensor is at hand to avoid it; scan over an input instead")
    r = len(anchor.shape)
    v = ctx.op("slice", anchor, axes=list(range(r)), begin=[0] * r, end=[1] * r, out_shape=(1,) * r) if r else anchor
    if anchor.dtype is DType.BOOL:
        t = ctx.op("or", v, ctx.op("not", v))
    elif anchor.dtype.is_float:
        nan = ctx.op("tract_core_is_nan", v, out_dtype=DType.BOOL)
        t = ctx.op("or", nan, ctx.op("not", nan))
    else:
        t = ctx.op("eq", v, v, out_dtype=DType.BOOL)
    return ctx.op("squeeze", t, axes=list(range(r)), out_shape=()) if r else t


def _live(ctx: EmitContext, xs: list, anchors: list) -> list:
    """The scanned inputs, each constant one passed through a select on a runtime ``true``.

    NOTE: tract 0.23.9 gives a *constant* scanned input of tract_core_scan whole to the body
    ("inconsistent fact", or "Remove a non-1 axis" in the declutter); a value that depends
    on a graph input is cut into pieces as it should be.
    """
    if not any(x.is_constant for x in xs):
        return xs
    t = _runtime_true(ctx, anchors)
    return [ctx.op("select", t, x, x, out_shape=x.shape, out_dtype=x.dtype) if x.is_constant else x for x in xs]


@register("fx2nnef.loop", target=TRACT)
def loop_tract(ctx: EmitContext, init: list, xs: list, full: list, body: Graph, dim: int, reverse: bool,
               n_carry: int, kind: str):
    """A scan or bounded while loop as ``tract_core_scan``."""
    steps = xs[0].shape[dim] if xs and xs[0].shape is not None else None
    may_not_run = bool(n_carry) and isinstance(steps, SymDim) and negative_at(ctx, steps - 1) is not None
    # carries other than float32 of a loop that may run no step: also stacked over the steps (see below)
    stacked = [i for i in range(n_carry) if body.outputs[i].dtype is not DType.F32] if may_not_run else []
    if stacked:
        body = _stacking(body, stacked)
    n_x = len(xs)
    counted = not any(_read(x, body) for x in body.inputs[n_carry:n_carry + n_x])
    if counted:  # nothing scanned is read: a counter carry reads the first scanned piece
        body = _counting(body, n_carry)
        init = list(init) + [ctx.const(np.zeros(body.inputs[n_carry].shape, np.float32), DType.F32)]
    n_state = n_carry + counted
    name, frag = _body_fragment(ctx, body, kind, n_state)
    params, results = frag.inputs, frag.results
    chunk = -1 if reverse else 1
    xs = _live(ctx, xs, list(init) + list(full) + list(ctx.graph_inputs))
    scan = [(params[n_state + j], x, dim, chunk) for j, x in enumerate(xs)]
    full_args = [(params[n_state + n_x + k], v) for k, v in enumerate(full)]
    full_args += [(label, w) for label, w in frag.weights]
    state = [(params[i], init[i], results[i]) for i in range(n_state)]
    output = [(results[i], "last", 0, 1) for i in range(n_carry)]  # the counter's is not an output
    extra_from = len(results) - len(stacked)  # the stacked carries: the last results
    output += [(r, "full", dim if j < extra_from else 0, chunk) for j, r in enumerate(results[n_state:], n_state)]
    outs = ctx.op("tract_core_scan", body=name, scan=scan, full=full_args, state=state, output=output,
                  reset_every_turn=1, n_out=len(output))
    outs = _set_outputs(ctx, outs)
    # the node's outputs, then the stacked carries' values after each step (outputs of the scan only)
    outs, every = outs[:len(outs) - len(stacked)], outs[len(outs) - len(stacked):]
    if may_not_run:
        # a loop of no step within the range (``range(1, T)`` at T=1): tract 0.23.9 gives its last
        # carries the shape [] (fuzz 87000) and the type float32 (fuzz 15169, where a select on an
        # int64 carry then fails at run time); a float32 carry is then its initial value
        ran = ctx.op("gt", dim_value(ctx, steps, DType.I64), ctx.const([0], DType.I64), out_dtype=DType.BOOL,
                     out_shape=(1,))
        ran = ctx.op("squeeze", ran, axes=[0], out_shape=(), out_dtype=DType.BOOL)
        outs[:n_carry] = [ctx.op("select", ran, o, i, out_shape=o.shape, out_dtype=o.dtype) if k not in stacked
                          else o for k, (o, i) in enumerate(zip(outs[:n_carry], init))]
        # another carry is the last of its initial value and its values after each step, stacked
        # (no select: even the branch not taken must have the carry's type)
        for k, every_k in zip(stacked, every):
            o, i = outs[k], init[k]
            every_k.dtype, every_k.shape = o.dtype, (steps,) + tuple(o.shape)
            first = ctx.op("unsqueeze", i, axes=[0], out_shape=(1,) + tuple(o.shape), out_dtype=o.dtype)
            # a reverse scan stacks its steps from the end: its last carry comes first
            parts, at = ([every_k, first], 0) if reverse else ([first, every_k], steps)
            both = ctx.op("concat", parts, axis=0, out_shape=(steps + 1,) + tuple(o.shape), out_dtype=o.dtype)
            last = ctx.op("slice", both, axes=[0], begin=[at], end=[at + 1], out_shape=(1,) + tuple(o.shape),
                          out_dtype=o.dtype)
            outs[k] = ctx.op("squeeze", last, axes=[0], out_shape=o.shape, out_dtype=o.dtype)
    return outs


def _read(value: Value, body: Graph) -> bool:
    """Whether ``body``'s outputs depend on ``value`` (a use in dead code is no read for tract)."""
    live = {id(o) for o in body.outputs}
    for node in reversed(body.nodes):
        if any(id(o) in live for o in node.outputs):
            live.update(id(v) for v in node.inputs())
    return id(value) in live


def _counting(body: Graph, n_carry: int) -> Graph:
    """``body`` with one more carry after its own (input and output ``n_carry``): a float32 sum of
    the first scanned piece's items, added up over the steps and read by no one.

    NOTE: tract 0.23.9 drops a scan input its body does not read, and fails to load a scan left
    with no scanned input ("No scan input": it counts the steps from the scanned inputs only). A
    loop whose steps read no piece (``for _ in range(x.shape[1] - 1): v = f(v)``, rolled over the
    indices it visits) keeps one read this way; the sum of all axes keeps empty pieces valid.
    """
    piece = body.inputs[n_carry]
    rank = len(piece.shape)
    total = Value("scan_count_step", DType.F32, (1,) * rank)
    count = Value("scan_count", DType.F32, (1,) * rank)
    nxt = Value("scan_count_next", DType.F32, (1,) * rank)
    nodes = [Node(op_key(torch.sum), (piece, list(range(rank)), True), {"dtype": DType.F32}, [total], name=total.name),
             Node(op_key(operator.add), (count, total), {}, [nxt], name=nxt.name)]
    for node in nodes:
        node.outputs[0].producer = node
        for v in node.inputs():
            v.uses.append(node)
    out = Graph(body.name)
    out.inputs = body.inputs[:n_carry] + [count] + body.inputs[n_carry:]
    out.symbols, out.nodes = list(body.symbols), list(body.nodes) + nodes
    out.outputs = body.outputs[:n_carry] + [nxt] + body.outputs[n_carry:]
    out.output_names = body.output_names[:n_carry] + [nxt.name] + body.output_names[n_carry:] if body.output_names \
        else []
    return out


def _stacking(body: Graph, carries: list) -> Graph:
    """``body`` with one more output for each carry of ``carries``: its next value with a leading
    unit axis, along which the scan stacks it over the steps."""
    out = Graph(body.name)
    out.inputs, out.symbols, out.nodes = list(body.inputs), list(body.symbols), list(body.nodes)
    out.outputs, out.output_names = list(body.outputs), list(body.output_names)
    for k in carries:
        nxt = body.outputs[k]
        shape = None if nxt.shape is None else (1,) + tuple(nxt.shape)
        v = Value(f"{nxt.name}_stacked", nxt.dtype, shape)
        node = Node("Tensor.unsqueeze", (nxt, 0), {}, [v], name=v.name)
        v.producer = node
        out.nodes.append(node)
        out.outputs.append(v)
        if out.output_names:
            out.output_names.append(v.name)
    return out
