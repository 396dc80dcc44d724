"""Python loops over a dynamic size, rolled into one scan.

``for t in range(x.shape[1]): h = cell(x[:, t], h); outs.append(h)`` runs as Python while the
concrete-value tracer records it, so the graph holds the loop unrolled at the example size:
valid at that size only. When such a loop bounds a dynamic size, the model is traced again with
``range`` noting where each iteration starts (:func:`..tracing.loops.loop_range_patch`), and :func:`roll_loops`
checks that every iteration recorded the same calls as the first one, reading only

- values of the iteration before (the carries; values made before the loop in the first one),
- values made before the loop (loop-invariant), and
- the loop index, only to take the index-th slice of a tensor made before the loop (a scanned
  input: ``x[:, t]``, ``x[t]``, ``x.select(1, t)``, ``x.narrow(1, t, 1)``);

and that after the loop the graph reads only the last iteration's carries and, given whole to
``torch.stack`` or ``torch.cat``, lists of one value per iteration (the stacked outputs). The
first iteration then becomes the body of a :class:`~..tracing.scan.ScanCall`, as ``torch``'s scan
gives it, and the other iterations go; the analysis then runs the rolled graph on the example
and at other sizes against the model, as for any graph. Anything else (a ``break``, a decision
on tensor data in the loop, an iteration that differs, the index in other arithmetic, a list
read item by item) leaves the loop unrolled, as before: the export then names the loop's line.
The index, or a number that follows it on a line (``t + 1``, ``t / 4``, the same through every
step), may also be the number operand of an item-wise op on a float tensor (``h - t``, ``x * (t + 1)``):
the scan then also runs over ``arange`` of the loop's indices, and that number is computed from
each step's item.
"""
from __future__ import annotations

import builtins
import dataclasses
import operator
from typing import Optional

import torch
import torch.fx as fx

from ..tracing.control_flow import body_module, carry_slot, scanned_slot, slot_dependents
from ..tracing.data_dep import depends_on_data
from ..tracing.loops import LoopRecord, _target_text
from ..tracing.scan import ScanCall
from ..tracing.structures import storage_keys

_builtin_range = builtins.range
_orig_isinstance = builtins.isinstance


def _stands_for(new: fx.Node, old: fx.Node) -> None:
    """``new``, which replaces ``old`` (the same values), also lives in ``old``'s memory for the
    in-place pass (``meta['storage']``): a view of the loop's stacked outputs, written in place
    after the loop (``v = out.view(-1); v[v > 0] = 0``), then still updates them."""
    value, before = new.meta.get("value"), old.meta.get("value")
    if _orig_isinstance(value, torch.Tensor) and _orig_isinstance(before, torch.Tensor) \
            and value.shape == before.shape and value.dtype == before.dtype:
        new.meta["value"] = before
        if "storage" in old.meta:
            new.meta["storage"] = old.meta["storage"]


class _NoRoll(Exception):
    """This loop stays unrolled; the message says why (for the notes)."""


def roll_loops(gm: fx.GraphModule, loops: list, guards: list, lines: Optional[set] = None) -> list:
    """Roll each loop of ``loops`` (see the module's doc) in ``gm``; edits ``guards`` (drops the
    loop's own guards and the repeats of a guard of the first iteration). Returns notes: one per
    loop, rolled or why not. ``lines``: when given, only the loops made at these ``(file, line)``
    roll (those over a dynamic size that bound the range); a loop elsewhere that holds them
    (``for head in range(n_heads)`` around a scan of the sequence) stays unrolled around them."""
    notes = []
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    spans = []
    for rec in loops:
        if rec.done and rec.starts and all(s in order for s in rec.starts) and rec.end in order:
            spans.append((order[rec.starts[0]], order[rec.end], rec))

    def within(o, s):
        return o is not s and o[0] <= s[0] and s[1] <= o[1] and o[1] - o[0] > s[1] - s[0]

    def roll(group):
        # loops inside another loop's iterations roll with it when its iterations repeat (an inner
        # loop over a dynamic size cannot be inside a rolled one); when the outer one stays
        # unrolled (a loop over heads, each head scanning the sequence), its inner loops are tried
        top = [s for s in group if not any(within(o, s) for o in group)]
        for span in sorted(top, key=lambda s: -s[0]):  # the last one first: earlier markers stay valid
            rec = span[2]
            src = rec.source
            if lines is not None and (getattr(src, "file", None), getattr(src, "line", None)) not in lines:
                roll([s for s in group if within(span, s)])
                continue
            try:
                notes.append(_roll(gm, rec, guards))
            except _NoRoll as exc:
                notes.append(f"the Python loop at {rec.source or 'an unknown line'} stays unrolled: {exc}")
                roll([s for s in group if within(span, s)])

    roll(spans)
    return notes


@dataclasses.dataclass
class _Plan:
    segs: list  # per iteration, its nodes (get_attr excluded)
    carries: dict  # position (or (position, item) of a tuple) -> the value before the loop it starts from
    carry_uses: list  # (position, path, carry position): where the first iteration reads a carry
    index_uses: dict  # position -> path of the loop index in that node's arguments
    extra: list  # per iteration, its reads of the items of a tuple the iteration before made
    # position -> (path, scale, offset): a number ``scale * index + offset`` in that node's arguments
    affine_uses: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Roll:
    """A loop found to roll (:func:`_checked`), before the graph changes: its iterations (``plan``),
    the indices it visits, the uses of the index in the first iteration, and what the graph reads
    after it."""

    plan: _Plan
    where_text: str
    n_iter: int
    low: object
    hi: object  # a traced size or an int
    offset: int
    reverse: bool
    local: set  # the first iteration's values computed from values made before the loop only
    scanned: dict  # (tensor, axis) -> what a use of the index keeps, per scanned input
    uses: dict  # position -> (scan key, the index without the loop's entry or None)
    writes: dict  # position -> (buffer, its index with the loop's entry, where that entry is)
    numbers: dict  # position -> (path, scale, shift): the index as a number in an item-wise op on a tensor
    drop: list  # the guards to drop: the loop's own, and the repeats of the first iteration's
    finals: dict  # carry -> (outside user of the last iteration's value, whether it is the item read)
    ys: list  # positions of the stacked outputs
    post: dict  # user after the loop -> (position, backwards, "stack" or "cat", dim)
    carry_pos: list
    kept: list  # the positions of the first iteration that stay in the graph (the writes go)


def _roll(gm: fx.GraphModule, rec: LoopRecord, guards: list) -> str:
    r = _checked(gm.graph, rec, guards)
    graph = gm.graph
    new = _NewNode(graph, rec.source, r.plan.segs[0][0])
    xs, scan_slots, carry_slots, hi_arg = _slots(graph, rec, r, new)
    results = _scan(gm, r, new, xs, scan_slots, carry_slots)
    _after_loop(graph, r, new, results, hi_arg)
    segs = r.plan.segs
    gone = {n for seg in segs[1:] for n in seg} | {n for group in r.plan.extra for n in group}
    for n in reversed([n for n in graph.nodes if n in gone]):
        graph.erase_node(n)
    for g in r.drop:
        if g in guards:
            guards.remove(g)
    gm.recompile()
    rec.rolled = True
    return (f"the Python loop at {r.where_text} is rolled into a scan: {r.n_iter} iterations at the example, "
            f"{len(r.carry_pos)} carried value(s), {len(r.scanned)} scanned input(s), {len(r.ys)} stacked "
            f"and {len(r.writes)} index-written output(s); it runs for any length (tract_core_scan for tract)")


def _checked(graph: fx.Graph, rec: LoopRecord, guards: list) -> _Roll:
    """What the loop rolls into, checked; raises :class:`_NoRoll` when it stays unrolled."""
    where_text = str(rec.source) if rec.source is not None else "an unknown line"
    n_iter = len(rec.values)
    if n_iter < 2:
        raise _NoRoll(f"it runs {n_iter} time(s) on the example; trace with an example where it runs at least twice")
    memo: dict = {}
    if any(_orig_isinstance(a, fx.Proxy) and depends_on_data(a.node, memo) for a in rec.args):
        raise _NoRoll("its length is read from tensor data")
    low, hi, offset, reverse = _bounds(rec)
    plan = _match(graph, rec)
    segs = plan.segs
    where = {n: (k, p) for k, seg in enumerate(segs) for p, n in enumerate(seg)}
    first = segs[0]
    inside = set(where) | {n for group in plan.extra for n in group}
    scanned: dict = {}
    local = _local(plan)
    uses, writes, numbers = _index_reads(plan, inside, local, scanned)
    written = {n for seg in segs for p, n in enumerate(seg) if p in writes}
    for buf, _, _ in writes.values():
        if any(u in inside and u not in written for u in buf.users):
            raise _NoRoll(f"it reads %{buf.name}, which it also writes one index at a time")
    drop = _repeated_decisions(rec, guards, where, first, uses, memo)
    finals, ys, post = _reads_after(rec, plan, where, inside)
    for p in list(plan.carries) + ys:
        value = _carried(first, p)
        if not _orig_isinstance(value, torch.Tensor):
            raise _NoRoll(f"it carries a {type(value).__name__}, not a tensor")
    carry_pos = sorted(plan.carries, key=lambda c: (c, -1) if type(c) is int else c)
    kept = [p for p in range(len(first)) if p not in writes]
    if not kept:
        raise _NoRoll("it only writes values made before it")
    if not carry_pos and not ys and not writes:
        raise _NoRoll("nothing it computes is read after it")
    hi_value = (hi.value if _orig_isinstance(hi, fx.Proxy) else hi) + offset
    for x, axis in scanned:
        if len(_builtin_range(x.meta["value"].shape[axis])[low:hi_value]) != n_iter:
            raise _NoRoll(f"%{x.name} has {x.meta['value'].shape[axis]} items along dim {axis}, not the loop's "
                          f"{n_iter} from {low}")
    return _Roll(plan=plan, where_text=where_text, n_iter=n_iter, low=low, hi=hi, offset=offset, reverse=reverse,
                 local=local, scanned=scanned, uses=uses, writes=writes, numbers=numbers, drop=drop, finals=finals,
                 ys=ys, post=post, carry_pos=carry_pos, kept=kept)


def _local(plan: _Plan) -> set:
    """The first iteration's values that repeat at every step (computed from values made before the
    loop only): a tensor among them may be scanned."""
    first = plan.segs[0]
    varying: set = set()
    starts_varying = {p for p, _, _ in plan.carry_uses} | set(plan.index_uses) | set(plan.affine_uses)
    for p, n in enumerate(first):
        if p in starts_varying or any(a in varying for a in n.all_input_nodes):
            varying.add(n)
    return set(first) - varying


def _index_reads(plan: _Plan, inside: set, local: set, scanned: dict) -> tuple:
    """``(uses, writes, numbers)``: how the first iteration reads the loop index (see :class:`_Roll`);
    the scanned inputs go to ``scanned``: (tensor, axis) of each use of the index, and what it keeps."""
    first = plan.segs[0]
    uses: dict = {}
    writes: dict = {}
    numbers: dict = {}
    for p, path in plan.index_uses.items():
        if first[p].op == "call_function" and first[p].target is operator.setitem:
            writes[p] = _index_write(first[p], path, inside)
        elif _number_use(first[p], path):
            numbers[p] = (path, 1, 0)
        else:
            uses[p] = _index_use(first[p], path, inside - local, scanned)
    for p, (path, scale, shift) in plan.affine_uses.items():
        if not _number_use(first[p], path):
            raise _NoRoll(f"%{first[p].name} ({_target_text(first[p])}) reads a number computed from the loop "
                          "index, not as the number operand of an item-wise op on a tensor")
        numbers[p] = (path, scale, shift)
    return uses, writes, numbers


def _repeated_decisions(rec: LoopRecord, guards: list, where: dict, first: list, uses: dict, memo: dict) -> list:
    """The guards to drop once the loop rolls: its own, and the repeats of the first iteration's
    decisions. A decision on data in the loop, or one another iteration takes otherwise, refuses it."""
    drop = list(rec.guards)
    for g in guards:
        w = where.get(g.node)
        if w is None:
            continue
        if g.op != "count" and depends_on_data(g.node, memo):  # a count of pieces is a shape fact
            raise _NoRoll(f"it takes a decision on tensor data ({g.text}{' at ' + str(g.source) if g.source else ''})")
        k, p = w
        if p in uses:
            raise _NoRoll(f"a decision reads the slice it takes ({g.text})")
        if k > 0:
            if not any(h.node is first[p] and h.op == g.op and h.expected == g.expected for h in guards):
                raise _NoRoll(f"iteration {k} takes another decision than the first ({g.text})")
            drop.append(g)
    return drop


def _reads_after(rec: LoopRecord, plan: _Plan, where: dict, inside: set) -> tuple:
    """``(finals, ys, post)``: what the graph reads after the loop, the last carries and whole lists
    given to stack / cat (see :class:`_Roll`)."""
    segs = plan.segs
    n_iter = len(rec.values)
    finals: dict = {}
    stacks: list = []
    for k, seg in enumerate(segs):
        for p, n in enumerate(seg):
            for u in n.users:
                if u in inside:
                    continue
                if k == n_iter - 1 and p in plan.carries and not _stacks_iterations(u, where, n_iter):
                    finals.setdefault(p, []).append((u, False))
                    continue
                if k == n_iter - 1 and u.op == "call_function" and u.target is operator.getitem \
                        and len(u.args) == 2 and (p, u.args[1]) in plan.carries:
                    finals.setdefault((p, u.args[1]), []).append((u, True))
                    continue
                stacks.append(u)
    ys: list = []
    post: dict = {}
    for u in dict.fromkeys(stacks):
        p, backwards, fn, dim = _stack_use(u, where, n_iter, rec)
        if p not in ys:
            ys.append(p)
        post[u] = (p, backwards, fn, dim)
    return finals, ys, post


class _NewNode:
    """``new(target, args, value=None)``: a call node of the rolled loop, with its value (computed
    when not given), the loop's source line and the module of the first iteration's first node."""

    def __init__(self, graph: fx.Graph, source, first: fx.Node):
        self.graph, self.source = graph, source
        self.module_meta = {k: first.meta[k] for k in ("module_path", "module_type") if k in first.meta}

    def __call__(self, target, args, value=None):
        n = self.graph.create_node("call_function", target, args, {})
        n.meta["value"] = value if value is not None else _run(target, args)
        n.meta["source"] = self.source
        n.meta.update(self.module_meta)
        return n


def _slots(graph: fx.Graph, rec: LoopRecord, r: _Roll, new: _NewNode) -> tuple:
    """The scan's inputs and slots, made before the loop, and the first iteration rewired to read the
    slots: ``(xs, scan_slots, carry_slots, hi_arg)``, ``hi_arg`` the loop's end in the graph."""
    plan, first, low, hi, offset = r.plan, r.plan.segs[0], r.low, r.hi, r.offset
    start = first[0]
    for n in nodes_between(graph, rec.starts[0], rec.end):
        if n.op == "get_attr":
            start.prepend(n)  # read before the loop: the scanned inputs and the scan read them there
    xs, scan_slots = [], []
    indices = None
    with graph.inserting_before(start):
        hi_arg = hi.node if _orig_isinstance(hi, fx.Proxy) else hi  # in the graph, a node
        if offset:
            hi_arg = new(operator.add, (hi_arg, offset)) if _orig_isinstance(hi_arg, fx.Node) else hi_arg + offset
        if not r.scanned or r.numbers:  # the loop runs over its indices (read as numbers, or nothing scanned)
            indices = new(torch.arange, (low, hi_arg))
            index_slot = new(scanned_slot, (indices, 0))
    for (x, axis) in r.scanned:
        # a tensor made in the first iteration from values made before the loop is sliced where it is made
        with graph.inserting_before(x.next if x in r.local else start):
            moved = x if axis == 0 else new(torch.movedim, (x, axis, 0))
            piece = moved if _whole(x, axis, low, hi, offset) else new(operator.getitem, (moved, slice(low, hi_arg)))
            xs.append(piece)
            scan_slots.append(new(scanned_slot, (piece, 0)))
    if indices is not None:  # last: the scanned tensors' slots keep their places
        xs.append(indices)
        scan_slots.append(index_slot)
    for slot in scan_slots:
        slot.meta["loop_slot"] = True
    with graph.inserting_before(start):
        carry_slots = {}
        for q in r.carry_pos:
            slot = new(carry_slot, (plan.carries[q],))
            slot.meta["loop_slot"] = True
            carry_slots[q] = slot
    for p, path, q in plan.carry_uses:
        _set_at(first[p], path, carry_slots[q])
    for p, (path, scale, shift) in r.numbers.items():
        number = index_slot  # each step's index, a rank-0 int64 tensor
        with graph.inserting_before(first[p]):
            if scale != 1:
                number = new(operator.mul, (number, scale))
            if shift != 0:
                number = new(operator.add, (number, shift))
        _set_at(first[p], path, number)
    return xs, scan_slots, carry_slots, hi_arg


def _scan(gm: fx.GraphModule, r: _Roll, new: _NewNode, xs: list, scan_slots: list, carry_slots: dict) -> list:
    """The first iteration made the body of one scan node; returns the nodes of the scan's results
    (the last carries, then the stacked outputs, then the values written one index per step)."""
    graph, plan, segs = gm.graph, r.plan, r.plan.segs
    first, last, carry_pos = segs[0], segs[-1], r.carry_pos
    write_ys = [first[p].args[2] for p in r.writes]  # the value each step writes
    written_values = [[seg[p].args[2].meta["value"] for seg in segs] for p in r.writes]
    for p in r.writes:
        graph.erase_node(first[p])  # written once, after the loop, from the stacked values
    keys = list(r.scanned)
    for p, (key, rest) in r.uses.items():
        node = first[p]
        slot = scan_slots[keys.index(key)]
        if rest is None:
            repl = slot
        else:
            with graph.inserting_before(node):
                repl = new(operator.getitem, (slot, rest))
        node.replace_all_uses_with(repl)
        graph.erase_node(node)
        first[p] = repl
    end = first[r.kept[-1]]  # the first iteration's last node still in the graph
    item_nodes = {}
    for q in carry_pos:
        if type(q) is not int:  # the item of a tuple the first iteration made, as the next one reads it
            with graph.inserting_after(end):
                end = item_nodes[q] = new(operator.getitem, (first[q[0]], q[1]))
    slots = list(carry_slots.values()) + scan_slots
    body_nodes = slot_dependents(_up_to(graph, end), slots)
    outs = [item_nodes.get(q) or first[q] for q in carry_pos] + [first[p] for p in r.ys] + write_ys
    body, outer = body_module(gm, body_nodes, slots, outs)
    call = ScanCall(body, "scan", r.where_text, 0, r.reverse, len(carry_pos))
    init = [plan.carries[q] for q in carry_pos]
    args = (init, xs, outer, list(carry_slots.values()), scan_slots, outs)
    # the values the unrolled iterations computed, as the scan gives them (a value made before the
    # loop may have been changed in place after it: the scan is not run again on it here; the
    # analysis runs the whole graph on the example and compares with the model)
    order = list(reversed(segs)) if r.reverse else segs  # the stacked values run in index order
    value = tuple(_carried(last, q) for q in carry_pos) + tuple(
        torch.stack([seg[p].meta["value"] for seg in order]) for p in r.ys) + tuple(
        torch.stack(vals[::-1] if r.reverse else vals) for vals in written_values)
    with graph.inserting_after(end):
        scan = new(call, args, value=value)
    scan.meta["control_flow"] = f"Python loop at {r.where_text}"
    results = []
    prev = scan
    for i in range(len(value)):
        with graph.inserting_after(prev):
            prev = new(operator.getitem, (scan, i))
        if i < len(carry_pos):  # the last step's carry itself: the memory its views after the loop share
            prev.meta["storage"] = storage_keys(prev.meta["value"])
        results.append(prev)
    return results


def _after_loop(graph: fx.Graph, r: _Roll, new: _NewNode, results: list, hi_arg) -> None:
    """The graph after the loop reads the scan's results: the last carries, the index-written
    buffers written once, the lists given to stack / cat as the stacked outputs."""
    last, carry_pos, source, module_meta = r.plan.segs[-1], r.carry_pos, new.source, new.module_meta
    for j, q in enumerate(carry_pos):
        for u, item in r.finals.get(q, []):
            if item:
                u.replace_all_uses_with(results[j])
                graph.erase_node(u)
            else:
                u.replace_input_with(last[q], results[j])
    after = results[-1]
    for j, (buf, idx, i) in enumerate(r.writes.values()):
        y = results[len(carry_pos) + len(r.ys) + j]
        whole = slice(r.low, hi_arg)  # the written indices
        entries = (idx,) if i is None else tuple(idx)
        at = 0 if i is None else i
        axis = sum(1 for e in entries[:at] if e is None or _orig_isinstance(e, slice))
        with graph.inserting_after(after):
            if axis != 0:
                y = after = new(torch.movedim, (y, 0, axis))
        with graph.inserting_after(after):
            spot = whole if i is None else entries[:at] + (whole,) + entries[at + 1:]
            after = graph.create_node("call_function", operator.setitem, (buf, spot, y), {})
            after.meta.update(value=None, source=source, **module_meta)
    for u, (p, backwards, fn, dim) in r.post.items():
        y = results[len(carry_pos) + r.ys.index(p)]
        with graph.inserting_before(u):
            if backwards != r.reverse:
                y = new(torch.flip, (y, [0]))
            if dim != 0:
                y = new(torch.movedim, (y, 0, dim))
            if fn == "cat":
                y = new(torch.flatten, (y, dim, dim + 1))
            # laid out as torch.stack / torch.cat give it (the scan's stacked steps, moved to their
            # axis, may not be), for the views read after the loop
            contiguous = graph.create_node("call_method", "contiguous", (y,), {})
            contiguous.meta.update(value=y.meta["value"].contiguous(), source=source, **module_meta)
            y = contiguous
        _stands_for(y, u)
        u.replace_all_uses_with(y)
        graph.erase_node(u)


def _carried(seg: list, key):
    """The value an iteration passes on for the carry ``key``: a position, or (position, item)."""
    if type(key) is int:
        return seg[key].meta.get("value")
    whole = seg[key[0]].meta.get("value")
    return whole[key[1]] if _orig_isinstance(whole, (tuple, list)) and -len(whole) <= key[1] < len(whole) else None


def nodes_between(graph: fx.Graph, after: fx.Node, last: fx.Node) -> list:
    out = []
    n = after.next
    while True:
        out.append(n)
        if n is last:
            return out
        n = n.next


def _bounds(rec: LoopRecord):
    """``(low, hi, offset, reverse)``: the loop visits the indices ``low .. hi + offset - 1``
    (``hi`` a traced size or an int), upwards or downwards."""
    args = list(rec.args)
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if _orig_isinstance(step, fx.Proxy):
        raise _NoRoll("its step is a traced size")
    if step == 1:
        if _orig_isinstance(start, fx.Proxy):
            raise _NoRoll("it starts at a traced size")
        return start, stop, 0, rec.reverse
    if step == -1 and not rec.reverse:
        if _orig_isinstance(stop, fx.Proxy):
            raise _NoRoll("it counts down to a traced size")
        return stop + 1, start, 1, True
    raise _NoRoll(f"its step is {step}")


def _whole(x: fx.Node, axis: int, low, hi, offset: int) -> bool:
    """Whether ``x`` is scanned whole along ``axis``: the loop runs from 0 to its size there."""
    if low != 0 or offset or not _orig_isinstance(hi, fx.Proxy):
        return False
    h = hi.node
    if h.op == "call_method" and h.target == "size" and len(h.args) == 2 and h.args[0] is x:
        rank = x.meta["value"].dim()
        return h.args[1] % rank == axis
    return False


def _match(graph: fx.Graph, rec: LoopRecord) -> _Plan:
    """Check that every iteration records the calls of the first; find carries and index uses."""
    segs, items, extra = _iterations(graph, rec)
    size = len(segs[0])
    if size == 0:
        raise _NoRoll("its iterations record no call")
    if any(len(s) != size for s in segs):
        raise _NoRoll("its iterations record different numbers of calls")
    where = {n: (k, p) for k, seg in enumerate(segs) for p, n in enumerate(seg)}
    carries: dict = {}
    seen: Optional[tuple] = None
    for k in range(1, len(segs)):
        compare = _Compare(rec, segs, where, items, carries, k)
        for p in range(size):
            a, b = segs[k][p], segs[0][p]
            if a.op != b.op or not _same_target(a.target, b.target):
                raise _NoRoll(f"iteration {k} calls {_target_text(a)} where the first calls {_target_text(b)}")
            compare.same(a.args, b.args, p, ("args",))
            compare.same(a.kwargs, b.kwargs, p, ("kwargs",))
        found = compare.found
        if seen is None:
            seen = tuple(found)
        elif tuple(found) != seen:
            raise _NoRoll(f"iteration {k} reads the carries or the index elsewhere than iteration 1")
    carry_uses = [(p, path, q) for p, path, kind, q in seen if kind == "carry"]
    index_uses: dict = {}
    affine_uses: dict = {}
    for p, path, kind, detail in seen:
        if kind in ("index", "affine"):
            if p in index_uses or p in affine_uses:
                raise _NoRoll(f"%{segs[0][p].name} reads the loop index twice")
            if kind == "index":
                index_uses[p] = path
            else:
                affine_uses[p] = (path,) + detail
    return _Plan(segs, carries, carry_uses, index_uses, extra, affine_uses)


def _iterations(graph: fx.Graph, rec: LoopRecord) -> tuple:
    """``(segs, items, extra)``: the nodes of each iteration (get_attr and the reads of an item of
    the iteration before's tuples excluded), those reads (node -> (position of the tuple in the
    iteration before, item)) and, per iteration, the nodes of those reads."""
    bounds = list(rec.starts) + [rec.end]
    segs = []
    for k in range(len(rec.values)):
        if bounds[k] is bounds[k + 1]:
            segs.append([])
            continue
        segs.append([n for n in nodes_between(graph, bounds[k], bounds[k + 1]) if n.op != "get_attr"])
    # an item of a tuple the iteration before made (``state[0]`` of an LSTM cell's ``(h, c)``): the
    # first iteration reads the items of the initial tuple as they are, without such a node
    items: dict = {}  # node -> (position of the tuple in the iteration before, item)
    extra: list = [[] for _ in segs]
    for k in range(1, len(segs)):
        before = {n: p for p, n in enumerate(segs[k - 1])}
        for n in segs[k]:
            if n.op == "call_function" and n.target is operator.getitem and len(n.args) == 2 \
                    and n.args[0] in before and type(n.args[1]) is int \
                    and _orig_isinstance(n.args[0].meta.get("value"), (tuple, list)):
                items[n] = (before[n.args[0]], n.args[1])
                extra[k].append(n)
        segs[k] = [n for n in segs[k] if n not in items]
    return segs, items, extra


class _Compare:
    """The arguments of iteration ``k``'s calls against the first iteration's: :meth:`same` raises
    :class:`_NoRoll` where they differ otherwise than by the carries and the index, and notes in
    ``found`` where those are read, as ``(position, path, kind, detail)``; the values each carry
    starts from go to ``carries``."""

    def __init__(self, rec: LoopRecord, segs: list, where: dict, items: dict, carries: dict, k: int):
        self.rec, self.segs, self.where, self.items, self.carries, self.k = rec, segs, where, items, carries, k
        self.size = len(segs[0])
        self.found: list = []

    def same(self, a, b, p, path):
        k = self.k
        if _orig_isinstance(a, fx.Node) and _orig_isinstance(b, (tuple, list)) \
                and self.where.get(a, (None,))[0] == k - 1 \
                and _orig_isinstance(a.meta.get("value"), (tuple, list)) and len(a.meta["value"]) == len(b):
            self._tuple_carried(a, b, p, path)
        elif _orig_isinstance(a, fx.Node):
            self._same_value(a, b, p, path)
        elif _orig_isinstance(b, fx.Node):
            raise _NoRoll(f"iteration {k} reads a constant where the first reads a value")
        elif _orig_isinstance(a, (tuple, list, dict, slice)):
            self._same_items(a, b, p, path)
        else:
            self._same_number(a, b, p, path)

    def _tuple_carried(self, a, b, p, path):
        """A tuple the iteration before made, where the first iteration is given the initial tuple."""
        k = self.k
        pa = self.where[a][1]
        for i, item in enumerate(b):
            if not _orig_isinstance(item, fx.Node) or self.where.get(item) is not None:
                raise _NoRoll(f"iteration {k} reads a tuple where the first reads other values")
            known = self.carries.setdefault((pa, i), item)
            if not _same_outside(known, item):
                raise _NoRoll(f"the value carried from %{a.name} starts from two values")
            self.found.append((p, path + (i,), "carry", (pa, i)))

    def _same_value(self, a: fx.Node, b, p, path):
        k, items, carries = self.k, self.items, self.carries
        if not _orig_isinstance(b, fx.Node):
            raise _NoRoll(f"iteration {k} reads a value where the first reads a constant")
        wa, wb = self.where.get(a), self.where.get(b)
        if a in items:
            if wb is not None or items[a][0] >= self.size or a.args[0] is not self.segs[k - 1][items[a][0]]:
                raise _NoRoll(f"iteration {k} reads an item of the iteration before where the first reads "
                              "its own values")
            known = carries.setdefault(items[a], b)
            if not _same_outside(known, b):
                raise _NoRoll(f"the value carried from %{a.name} starts from two values")
            self.found.append((p, path, "carry", items[a]))
            return
        if wa is None:
            if wb is not None or not _same_outside(a, b):
                raise _NoRoll(f"iteration {k} reads %{a.name} where the first reads %{b.name}")
            return
        ka, pa = wa
        if ka == k:
            if wb != (0, pa):
                raise _NoRoll(f"iteration {k} differs from the first at %{a.name}")
            return
        if ka == k - 1:
            if wb is not None:
                raise _NoRoll(f"iteration {k} reads the iteration before where the first reads its own values")
            known = carries.setdefault(pa, b)
            if not _same_outside(known, b):
                raise _NoRoll(f"the value carried from %{a.name} starts from two values")
            self.found.append((p, path, "carry", pa))
            return
        raise _NoRoll(f"iteration {k} reads a value of iteration {ka}, not of the one before")

    def _same_items(self, a, b, p, path):
        """Tuples, lists, dicts and slices: the same shape, and their items the same."""
        k = self.k
        if _orig_isinstance(a, (tuple, list)):
            if type(a) is not type(b) or len(a) != len(b):
                raise _NoRoll(f"iteration {k} calls with other arguments")
            for i, (x, y) in enumerate(zip(a, b)):
                self.same(x, y, p, path + (i,))
            return
        if _orig_isinstance(a, dict):
            if not _orig_isinstance(b, dict) or list(a) != list(b):
                raise _NoRoll(f"iteration {k} calls with other arguments")
            for key in a:
                self.same(a[key], b[key], p, path + (key,))
            return
        if not _orig_isinstance(b, slice):
            raise _NoRoll(f"iteration {k} calls with other arguments")
        for i, (x, y) in enumerate(zip((a.start, a.stop, a.step), (b.start, b.stop, b.step))):
            self.same(x, y, p, path + (("slice", i),))

    def _same_number(self, a, b, p, path):
        """Constants: the same, or the loop index, or a number computed from it."""
        k, values = self.k, self.rec.values
        if type(a) is int and type(b) is int and a != b and a == values[k] and b == values[0]:
            self.found.append((p, path, "index", None))
            return
        if type(a) is type(b) and type(a) in (int, float) and a != b and values[k] != values[0]:
            # a number computed from the index (``t + 1``, ``t / 4``): the same line through every step's
            step = values[k] - values[0]
            if type(a) is int and (a - b) % step == 0:
                scale = (a - b) // step
            else:
                scale = (a - b) / step
            self.found.append((p, path, "affine", (scale, b - scale * values[0])))
            return
        if type(a) is int and type(b) is int and a != b:
            raise _NoRoll(f"iteration {k} calls with the constant {a} where the first has {b}")
        if not _same_constant(a, b):
            raise _NoRoll(f"iteration {k} calls with {a!r} where the first has {b!r}")


_ITEMWISE = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
             operator.pow, torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.remainder}
_ITEMWISE_METHODS = {"add", "sub", "mul", "div", "true_divide", "remainder", "pow", "__add__", "__radd__",
                     "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__"}


def _number_use(node: fx.Node, path: tuple) -> bool:
    """Whether ``node`` reads the loop index as the number operand of an item-wise op whose other
    operand is a tensor of rank 1 or more (``h - t``, ``x * t``): each step's index as a rank-0
    int64 tensor then gives the same values and dtype (a tensor of rank >= 1 sets the result's
    type, an integer number or a rank-0 integer tensor alike). On bools, none. (A product with an
    integer tensor made tract 0.23.9 panic, "unreachable" in scan/decluttered.rs, until the zero
    that hides a value from tract's folding stopped reading one scanned input twice: see
    ``runtime_zero``.)"""
    if path not in (("args", 0), ("args", 1)) or len(node.args) != 2:
        return False
    if not (node.op == "call_function" and node.target in _ITEMWISE) and \
            not (node.op == "call_method" and node.target in _ITEMWISE_METHODS):
        return False
    other = node.args[1 - path[1]]
    value = other.meta.get("value") if _orig_isinstance(other, fx.Node) else None
    if not _orig_isinstance(value, torch.Tensor) or value.dim() < 1:
        return False
    if value.is_floating_point():
        return True
    return value.dtype not in (torch.bool, torch.complex64, torch.complex128) and not node.kwargs


def _index_use(node: fx.Node, path: tuple, inside: set, scanned: dict):
    """``(scan key, rest)`` of a node that takes the index-th slice of a tensor made before the
    loop; ``rest`` is the rest of its index (None when it keeps the whole slice)."""
    x = node.args[0] if node.args else None
    if not _orig_isinstance(x, fx.Node) or x in inside or not _orig_isinstance(x.meta.get("value"), torch.Tensor):
        raise _NoRoll(f"the loop index is read by %{node.name}, not as the index of a tensor made before the loop")
    rank = x.meta["value"].dim()
    rest = None
    if node.op == "call_function" and node.target is operator.getitem and path == ("args", 1):
        axis = 0
    elif node.op == "call_function" and node.target is operator.getitem and len(path) == 3 and path[1] == 1:
        idx = node.args[1]
        i = path[2]
        axis = 0
        for e in idx[:i]:
            if e is Ellipsis or _orig_isinstance(e, fx.Node) or (e is not None and not _orig_isinstance(e, (int, slice))):
                raise _NoRoll(f"%{node.name} indexes with more than slices and the loop index")
            if e is not None:
                axis += 1
        for e in idx[i + 1:]:
            if _orig_isinstance(e, fx.Node) or _orig_isinstance(e, slice) and any(
                    _orig_isinstance(v, fx.Node) for v in (e.start, e.stop, e.step)):
                raise _NoRoll(f"%{node.name} indexes with traced values besides the loop index")
        kept = tuple(idx[:i]) + tuple(idx[i + 1:])
        if any(e != slice(None) for e in kept):
            rest = kept
    elif node.op in ("call_method", "call_function") and _target_text(node) == "select" and path == ("args", 2):
        axis = node.args[1]
        if not _orig_isinstance(axis, int):
            raise _NoRoll(f"%{node.name} selects along a traced axis")
    elif node.op in ("call_method", "call_function") and _target_text(node) == "narrow" and path == ("args", 2) \
            and len(node.args) == 4 and node.args[3] == 1 and type(node.args[1]) is int and -rank <= node.args[1] < rank:
        axis = node.args[1] % rank  # x.narrow(axis, t, 1): the slice with its axis kept
        rest = (slice(None),) * axis + (None,)
    else:
        raise _NoRoll(f"the loop index is read by %{node.name} ({_target_text(node)}), not as the index of a tensor")
    if not -rank <= axis < rank or rank == 0:
        raise _NoRoll(f"%{node.name} indexes past the rank of its tensor")
    key = (x, axis % rank)
    scanned.setdefault(key, None)
    return key, rest


def _index_write(node: fx.Node, path: tuple, inside: set):
    """``(buffer, index, position of the loop's entry or None)`` of ``buffer[..., t, ...] = value``
    into a tensor made before the loop."""
    buf = node.args[0]
    if not _orig_isinstance(buf, fx.Node) or buf in inside or not _orig_isinstance(buf.meta.get("value"), torch.Tensor):
        raise _NoRoll(f"%{node.name} writes the loop index into a value made in the loop")
    if len(node.args) != 3 or not _orig_isinstance(node.args[2], fx.Node):
        raise _NoRoll(f"%{node.name} writes a constant at the loop index")
    idx = node.args[1]
    if path == ("args", 1):
        return buf, idx, None
    if len(path) != 3 or path[1] != 1:
        raise _NoRoll(f"%{node.name} reads the loop index inside a slice")
    for e in idx:
        if e is Ellipsis or _orig_isinstance(e, fx.Node) or (_orig_isinstance(e, slice) and any(
                _orig_isinstance(v, fx.Node) for v in (e.start, e.stop, e.step))):
            raise _NoRoll(f"%{node.name} writes through an index with traced values or an Ellipsis")
    return buf, idx, path[2]


def _stacks_iterations(u: fx.Node, where: dict, n_iter: int) -> bool:
    """Whether ``u`` is ``torch.stack`` / ``torch.cat`` of a list of one value per iteration (the
    loop's stacked output). A stack of the last carry with values made elsewhere (the final states
    of a loop run once per head, stacked) is a read of that carry, as any other call's."""
    return _target_text(u) in ("stack", "cat", "concat", "concatenate") and bool(u.args) \
        and _orig_isinstance(u.args[0], (list, tuple)) and len(u.args[0]) == n_iter \
        and all(_orig_isinstance(i, fx.Node) and i in where for i in u.args[0])


def _stack_use(u: fx.Node, where: dict, n_iter: int, rec: LoopRecord):
    """``(position, reversed, "stack" | "cat", dim)`` of ``torch.stack`` / ``torch.cat`` given the
    list of one value per iteration."""
    name = _target_text(u)
    if u.op != "call_function" or name not in ("stack", "cat", "concat", "concatenate") or not u.args \
            or not _orig_isinstance(u.args[0], (list, tuple)):
        raise _NoRoll(f"%{u.name} ({name}) reads a value of one iteration after the loop; only the last carries and "
                      "whole lists given to torch.stack / torch.cat are read")
    items = list(u.args[0])
    spots = [where.get(i) if _orig_isinstance(i, fx.Node) else None for i in items]
    if len(items) != n_iter or any(s is None for s in spots) or len({p for _, p in spots}) != 1:
        raise _NoRoll(f"torch.{name} (%{u.name}) is given other values than one per iteration")
    ks = [k for k, _ in spots]
    if ks == list(_builtin_range(n_iter)):
        backwards = False
    elif ks == list(_builtin_range(n_iter - 1, -1, -1)):
        backwards = True
    else:
        raise _NoRoll(f"torch.{name} (%{u.name}) is given the iterations' values out of order")
    extra = list(u.args[1:]) + list(u.kwargs.values())
    if len(extra) > 1 or set(u.kwargs) - {"dim"} or any(not _orig_isinstance(e, int) for e in extra):
        raise _NoRoll(f"torch.{name} (%{u.name}) has arguments besides the list and an int dim")
    dim = extra[0] if extra else 0
    rank = items[0].meta["value"].dim() + (1 if name == "stack" else 0)
    if rank == 0 or not -rank <= dim < rank:
        raise _NoRoll(f"torch.{name} (%{u.name}) has a dim out of range")
    return spots[0][1], backwards, "stack" if name == "stack" else "cat", dim % rank


def _up_to(graph: fx.Graph, last: fx.Node):
    """The graph's nodes up to ``last``, in order."""
    for n in graph.nodes:
        yield n
        if n is last:
            return


def _run(target, args):
    """``target(*args)`` on the example values of the nodes among ``args``."""
    with torch.no_grad():
        return target(*fx.node.map_arg(args, lambda n: n.meta["value"]))


def _set_at(node: fx.Node, path: tuple, value) -> None:
    """Replace the argument of ``node`` at ``path`` (as :func:`_match` names it) by ``value``."""
    def put(x, rest):
        if not rest:
            return value
        key, rest = rest[0], rest[1:]
        if _orig_isinstance(key, tuple) and key and key[0] == "slice":
            parts = [x.start, x.stop, x.step]
            parts[key[1]] = put(parts[key[1]], rest)
            return slice(*parts)
        if _orig_isinstance(x, dict):
            return {**x, key: put(x[key], rest)}
        items = list(x)
        items[key] = put(items[key], rest)
        return type(x)(items) if type(x) in (tuple, list) else tuple(items)

    if path[0] == "args":
        node.args = put(node.args, path[1:])
    else:
        node.kwargs = put(node.kwargs, path[1:])


def _same_target(a, b) -> bool:
    return a is b or (_orig_isinstance(a, str) and a == b)


def _same_outside(a: fx.Node, b: fx.Node) -> bool:
    if a is b:
        return True
    if a.op == "get_attr" and b.op == "get_attr":
        if a.target == b.target:
            return True
        return _same_constant(a.meta.get("value"), b.meta.get("value"))
    return False


def _same_constant(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if _orig_isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if _orig_isinstance(a, float) and a != a:
        return b != b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - not comparable: not the same
        return False
