"""Sizes that come from data: ``x.masked_select(m)``, ``x[mask]``, ``cond.nonzero()`` (when the tracer
keeps its true coordinates, see ``tracing/padded.py``), and windows whose bounds are numbers read
from data (``x[:lengths.max()]``, ``torch.arange(n.item())``, see ``tracing/data_bounds.py``): a
count known only at run time.

Such an op gives as many items as its data selects. tract carries that count as a symbol of its
own (``tract_onnx_non_zero(mask, count_symbol = 'K')`` makes one at run time), and every op after
it sees that symbol in its shapes. Here the graph is replayed once more on fake tensors with
torch's unbacked sizes allowed: the data-sized op gives a fresh size ``u0``, torch's kernels carry
it through the ops after it (a product, a reshape, a sum over it), and each becomes an IR symbol
named after the op that made it (``N_masked_select``). The nodes whose shapes hold such a symbol
take those shapes in place of the ones fitted at the example; the symbol is declared in the graph.

A bound read from data is a fresh unbacked number in the replay (each ``item()`` its own), and a
window's length a fresh size. Where torch must decide on a count against a size (a mask sized by
``lengths.max()`` broadcast against ``x`` of ``T`` items) it ties them, as torch.export does with a
runtime assert (``Eq(u0, T)``, the count replaced by ``T``): those shapes are written with ``T``,
and the lowering checks the tie at run time. Two counts torch asserts equal share one symbol.

Only the shapes after a data-sized op change; the analysis of the dynamic sizes before it stands.
Where torch's kernels must decide on such a count otherwise (``if n > 3``) the replay fails and the
export is refused, naming the op.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
import torch.fx as fx

from ...errors import TraceError
from ...ir import SymDim
from ..tracing.padded import data_nonzero
from .fake_replay import _Converter, _Runner, _SymbolSource

_SELECTING_METHODS = ("masked_select",)


def data_masks(n: fx.Node) -> list:
    """The boolean masks ``n`` selects items with (their true items make its size), else []."""
    if n.op == "call_method" and n.target in _SELECTING_METHODS or \
            n.op == "call_function" and n.target is torch.masked_select:
        mask = n.args[1] if len(n.args) > 1 else n.kwargs.get("mask")
        return [mask] if isinstance(mask, fx.Node) else []
    if n.op == "call_function" and n.target is data_nonzero:
        return [n.args[0]]
    if n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], fx.Node):
        index = n.args[1]
        items = index if isinstance(index, (tuple, list)) else (index,)
        return [i for i in items if _is_mask(i)]
    return []


def data_bounds(n: fx.Node) -> list:
    """The numbers ``n`` takes as slice bounds, ``narrow``'s start or length or ``arange``'s bounds
    (``x[:lengths.max()]``, ``x[:int(t)]``: ``item()`` nodes, see ``tracing/data_bounds.py``)."""
    found: list = []
    if n.op == "call_function" and n.target is operator.getitem and len(n.args) == 2:
        items = n.args[1] if isinstance(n.args[1], tuple) else (n.args[1],)
        found = [b for i in items if isinstance(i, slice) for b in (i.start, i.stop)]
    elif n.target in ("narrow", torch.narrow) and n.op in ("call_method", "call_function"):
        found = list(n.args[2:]) + [n.kwargs.get(k) for k in ("start", "length")]
    elif n.op == "call_function" and n.target is torch.arange:
        found = list(n.args[:2]) + [n.kwargs.get(k) for k in ("start", "end")]
    return [b for b in found if isinstance(b, fx.Node)]


def data_sized(n: fx.Node, data_dep: set, constant=()) -> bool:
    """Whether ``n`` gives as many items as its data says: a mask or bound computed from the data."""
    return any(m in data_dep and m not in constant for m in data_masks(n) + data_bounds(n))


def _is_mask(item) -> bool:
    if not isinstance(item, fx.Node):
        return False
    value = item.meta.get("value")
    return isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8) and value.dim() > 0


def sized_decisions(gm: fx.GraphModule, analysis) -> list:
    """Of ``analysis.decided``, the decisions that still read a count after the replay with counts
    from data. The others compare what torch found equal to the inputs' sizes (MultiheadAttention's
    ``key_padding_mask.shape == (bsz, src_len)`` of a mask sized by ``lengths.max()``: torch ties
    the count to ``src_len``, and so does the export, which tract checks at run time): decisions on
    sizes, which the probes covered."""
    if not analysis.decided:
        return []
    runner, shape_env, inputs = _replayer(gm, analysis)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    mode.cache_enabled = False
    with mode, torch.no_grad():
        try:
            runner.run(*[torch.empty(shape, dtype=dtype) for shape, dtype in inputs])
        except Exception:  # noqa: BLE001 - the replay's refusal comes with the export
            return analysis.decided
    base = set(runner.symbols)
    return [(n, start) for n, start in analysis.decided if not _of_sizes(runner.env.get(n, n), base, shape_env)]


def _of_sizes(value, base: set, shape_env) -> bool:
    """Whether ``value`` (of the replay) is a number or decision written with the inputs' sizes alone."""
    if isinstance(value, (torch.SymInt, torch.SymBool)):
        return shape_env.replace(value.node.expr).free_symbols <= base
    if isinstance(value, (list, tuple)):
        return all(_of_sizes(v, base, shape_env) for v in value)
    return isinstance(value, (bool, int)) and not isinstance(value, torch.Tensor)


def settle_data_sizes(gm: fx.GraphModule, analysis) -> list:
    """Give the nodes after a data-sized op the shapes of a replay where its count is a symbol;
    return the new symbols (empty when the graph has no data-sized op with a mask from the data)."""
    starts = [n for n in gm.graph.nodes if data_sized(n, analysis.data_dep, analysis.constant)]
    if not starts:
        return []
    for node, start in analysis.decided:
        raise _refusal(node, ValueError("the trace decided on the count there (a loop, a branch, a number "
                                        "kept), which holds for the example's data only"), [start])
    runner, shape_env, inputs = _replayer(gm, analysis)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    mode.cache_enabled = False
    with mode, torch.no_grad():
        fakes = [torch.empty(shape, dtype=dtype) for shape, dtype in inputs]
        try:
            runner.run(*fakes)
        except Exception as exc:  # noqa: BLE001 - any failure past a data-sized op is the answer
            raise _refusal(runner.current, exc, starts) from None
    return _name_counts(gm, analysis, runner, shape_env)


def decided_on_counts(gm: fx.GraphModule, decided: list, data_dep: set) -> list:
    """``(node, data-sized node)`` for each of the nodes ``decided`` (those the tracer's decisions
    read: ``for i in range(len(p))``, ``if p.shape[0] > 3``) computed from a data-sized op with a
    mask from the data: such a decision holds for the example's data only. Taken while the
    analysis still holds those nodes (the graph drops them later)."""
    if not decided:
        return []
    origin: dict = {}
    for n in gm.graph.nodes:
        if data_sized(n, data_dep):
            origin[n] = n
        elif not _kind_only(n):  # a dtype or rank read of a data-sized tensor decides nothing on its count
            found = next((origin[a] for a in n.all_input_nodes if a in origin), None)
            if found is not None:
                origin[n] = found
    return [(n, origin[n]) for n in decided if n in origin]


_KIND_METHODS = ("is_floating_point", "is_complex", "is_signed", "dim", "ndimension")


def _kind_only(n: fx.Node) -> bool:
    """Whether ``n`` reads only the dtype, device or rank of its input (never its sizes or data)."""
    if n.op == "call_method":
        return n.target in _KIND_METHODS
    if n.op == "call_function":
        return n.target in (torch.is_floating_point, torch.is_complex) or \
            n.target is getattr and len(n.args) > 1 and n.args[1] in ("dtype", "device", "ndim", "is_cuda")
    return False


def _replayer(gm, analysis):
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    shape_env = ShapeEnv(specialize_zero_one=False, duck_shape=False, allow_scalar_outputs=False,
                         allow_dynamic_output_shape_ops=True)
    symbols, sizes = {}, {}
    for name, hint in analysis.base_env.items():
        sym = shape_env.create_symbol(max(hint, 2), _SymbolSource(name), dynamic_dim=DimDynamic.DYNAMIC,
                                      do_not_specialize_zero_one=True)
        symbols[sym] = name
        sizes[name] = shape_env.create_symintnode(sym, hint=max(hint, 2))
    inputs = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        value = analysis.values[n]
        dims = analysis.sym.get(n) or tuple(value.shape)
        inputs.append(([sizes[str(d)] if isinstance(d, SymDim) else int(d) for d in dims], value.dtype))
    return _CountRunner(gm, shape_env, symbols, analysis.data_dep), shape_env, inputs


class _CountRunner(_Runner):
    """The replay's runner, where a number read from a count (``int(n)``, ``if n > 3``) is not
    taken at the example: that would hold for the example's data only. A bound read from data
    (``item()`` of an integer tensor) is a fresh number of its own; a call that reads one, or a
    mask from data, is run for itself (its count is no function of its inputs' metadata)."""

    def __init__(self, gm, shape_env, symbols, data_dep: set):
        super().__init__(gm, shape_env, symbols)
        self.bounds = {b for n in gm.graph.nodes if data_sized(n, data_dep) for b in data_bounds(n)
                       if b in data_dep and b.op == "call_method" and b.target == "item"}
        self.fresh = {n for n in gm.graph.nodes if data_sized(n, data_dep)} | self.bounds
        self.numbers: set = set()  # the unbacked sizes standing for the bounds

    def run_node(self, n):
        if n not in self.fresh:
            return super().run_node(n)
        self.current = n
        if n in self.bounds:
            number = self.shape_env.create_unbacked_symint()
            self.numbers.add(number.node.expr)
            return number
        out = self.run_fresh(n)
        if isinstance(out, torch.Tensor) and any(_reads(d, self.numbers, self.shape_env) for d in out.shape):
            # a length computed from the number (``arange(2, n, 3)``: ``(n + 1) // 3``, negative for a
            # small n): a count of its own, as torch's slices give, which the lowering computes
            shape = [self.shape_env.create_unbacked_symint() if _reads(d, self.numbers, self.shape_env) else d
                     for d in out.shape]
            out = out.new_empty(shape)
        return out

    def _read_at_example(self, n, exc):
        raise exc


def _name_counts(gm, analysis, runner, shape_env) -> list:
    """Name each unbacked size after the node that made it and set the shapes that read one. A
    size the replay found equal to an expression of the inputs' sizes (a count broadcast against
    an axis of ``T`` items: torch replaced it by ``T``) is written so too."""

    base = {sym: name for sym, name in runner.symbols.items()}
    counts: dict = {}
    made: set = set()  # every size the replay made from data, replaced or not
    for n in gm.graph.nodes:
        value = runner.env.get(n)
        if not isinstance(value, torch.Tensor):
            continue
        for d in value.shape:
            if isinstance(d, torch.SymInt):
                made |= {s for s in d.node.expr.free_symbols if s not in base}
                for s in shape_env.replace(d.node.expr).free_symbols:
                    if s not in base and s not in counts:
                        counts[s] = _fresh_name(n, set(base.values()) | set(counts.values()))
    if not made:
        return []
    for a, b in _equal_counts(shape_env, set(counts)):  # one name for counts torch found equal
        counts = {s: (counts[a] if name == counts[b] else name) for s, name in counts.items()}
    conv = _Converter(shape_env, {**base, **counts}, {})
    settled = set()
    for n in gm.graph.nodes:
        value = runner.env.get(n)
        if not _reads(value, made, shape_env, raw=True) or not _named(value, {**base, **counts}, shape_env):
            continue
        if _holds(value, (torch.SymFloat, torch.SymBool)):
            raise _refusal(n, ValueError("a float or a decision computed from the count"), [])
        try:
            analysis.sym[n] = conv.value(value, n)
        except Exception as exc:  # noqa: BLE001 - a size of the count with no IR form
            raise _refusal(n, exc, []) from None
        settled.add(n)
    analysis.constant = set(analysis.constant) - settled
    return list(dict.fromkeys(counts.values()))


def _equal_counts(shape_env, counts: set) -> list:
    """Pairs of counts the replay found equal (``x[:n] + y[:n]``, a mask sized by ``lengths.max()``
    beside a slice to it): torch asserts that at run time (``Eq(u2, u3)``) and so does tract, whose
    broadcast of the two fails where they differ; both are written with one symbol."""
    import sympy

    pairs = []
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            e = ra.expr
            if isinstance(e, sympy.Eq) and e.lhs in counts and e.rhs in counts:
                pairs.append((e.lhs, e.rhs))
    return pairs


def _named(value, names: dict, shape_env) -> bool:
    """Whether every size of ``value`` is written with the symbols of ``names`` (a number read from
    data, ``item()``'s unbacked size, is not: the graph computes it)."""
    if isinstance(value, torch.Tensor):
        return _named(tuple(value.shape), names, shape_env)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return shape_env.replace(value.node.expr).free_symbols <= set(names)
    if isinstance(value, (list, tuple)):
        return all(_named(v, names, shape_env) for v in value)
    return True


def _reads(value, counts, shape_env, raw: bool = False) -> bool:
    """Whether ``value`` (a tensor, a size, a sequence of them) holds one of the ``counts`` (as the
    replay made it, before its replacements, when ``raw``)."""
    if isinstance(value, torch.Tensor):
        return _reads(tuple(value.shape), counts, shape_env, raw)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = value.node.expr if raw else shape_env.replace(value.node.expr)
        return bool(expr.free_symbols & set(counts))
    if isinstance(value, (list, tuple)):
        return any(_reads(v, counts, shape_env, raw) for v in value)
    return False


def _holds(value, kinds) -> bool:
    if isinstance(value, kinds):
        return True
    return isinstance(value, (list, tuple)) and any(_holds(v, kinds) for v in value)


def _fresh_name(n: fx.Node, taken: set) -> str:
    stem = "N_" + "".join(c if c.isalnum() else "_" for c in n.name)
    name, k = stem, 1
    while name in taken:
        k += 1
        name = f"{stem}_{k}"
    return name


def _refusal(n: Optional[fx.Node], exc: Exception, starts: list) -> TraceError:
    """The error for ``n``, which the replay with counts from data could not run or write."""
    where = f"'{n.name}'" + (f" at {n.meta['source']}" if n is not None and n.meta.get("source") else "") \
        if n is not None else "an op"
    first = str(exc).strip().split("\n")[0][:200]
    origin = ", ".join(f"'{s.name}'" + (f" at {s.meta['source']}" if s.meta.get("source") else "") for s in starts)
    after = f" after the data-sized {origin}" if origin else ""
    return TraceError(
        f"{where}{after} needs a size that follows the data in a way the exported graph cannot carry "
        f"({type(exc).__name__}: {first}). Keep the shape (torch.where(mask, x, 0), masked_fill) or reduce "
        "over the mask ((x * mask).sum() / mask.sum())")

