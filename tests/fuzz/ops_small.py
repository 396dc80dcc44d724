"""Statements whose meaning turns on small sizes (issue 39): a dynamic axis whose example is 0, 1 or 2.

At such an example an axis broadcasts, a loop runs 0 or 1 times and a threshold sits next to
the example: Python branches whose branches have different shapes (``narrow`` on one side),
loops over ``range(1, S)`` / ``range(v.shape[-1])``, ``squeeze`` of an axis whose example is
1, floor division by infinities, an in-place write through a ``narrow`` view of an input
followed by ``mul_`` of the input, and programs on an empty axis.
"""
from __future__ import annotations

from .builder import Builder, Val, is_float
from .ops_shapes import _prod
from .program import Stmt, d_eval

# generator name -> weight factor in programs with a small example (1 or 2)
SMALL_BOOST = {"g_branch": 2, "g_loop": 2, "g_size_branch": 4, "g_loop_small": 4, "g_squeeze_dyn": 8,
               "g_size_scalar": 2, "g_advwrite": 1.5}
# generator name -> weight factor in programs with an empty example (0): only what makes sense empty
EMPTY_GENERATORS = {"g_arith": 1, "g_unary": 1, "g_compare": 1, "g_where_clamp": 1, "g_reshape": 1, "g_permute": 1,
                    "g_unsqueeze": 1, "g_cat_stack": 1, "g_linear": 1, "g_getitem": 0.5, "g_setitem": 1,
                    "g_inplace_view": 1, "g_size_scalar": 1, "g_advwrite": 1, "g_empty_write": 2, "g_reduce": 0.5,
                    "g_loop_small": 2, "g_size_branch": 2, "g_empty_axis": 8}


def _tag(b: Builder, *tags: str) -> None:
    b.families.update(tags)


def g_size_branch(b: Builder) -> bool:
    """``if <size condition>: <same shape> else: v.narrow(a, 0, 1)``: the shape depends on the branch."""
    rng = b.rng
    v = b.pick(lambda v: v.dyn_axes() and v.group != "masked" and v.dtype != "bool")
    if v is None:
        return False
    a = rng.choice(v.dyn_axes())
    d = v.shape[a]
    ex = d_eval(d, b.example)
    dim = f"{v.name}.shape[{a}]"
    kind = rng.choice(["gt", "ge", "range", "numel", "len", "lt"])
    k = max(0, rng.choice([ex - 1, ex, ex, ex + 1, ex + 2, 1, 2]))
    if kind == "len" and a == 0:
        cond, model = f"len({v.name}) > {k}", f"{d} > {k}"
    elif kind == "numel":
        n = d_eval(_prod(v.shape), b.example)
        t = max(0, rng.choice([n - 1, n, n + 1, 6]))
        cond, model = f"{v.name}.numel() > {t}", f"{_prod(v.shape)} > {t}"
    elif kind == "range":
        hi = rng.choice([ex + 1, ex + 2, 6])
        cond, model = f"1 < {dim} < {hi}", f"1 < {d} < {hi}"
    else:
        op = {"gt": ">", "ge": ">=", "lt": "<", "len": ">"}[kind]
        cond, model = f"{dim} {op} {k}", f"{d} {op} {k}"
    same = rng.choice([f"-{v.name}", f"{v.name}.roll(1, {a})", f"{v.name}.flip({a})", f"{v.name} * 2",
                       f"{v.name}.cumsum({a})" if is_float(v.dtype) else f"{v.name} + 1"])
    other = rng.choice([f"{v.name}.narrow({a}, 0, 1)", f"{v.name}.narrow({a}, 0, 1) + 1",
                        f"{v.name}[{', '.join([':'] * a + ['-1:'])}]"])
    name = b.fresh()
    swap = rng.random() < 0.3
    if swap:  # the narrowing branch first
        lines = [f"if not ({cond}):", f"    {name} = {other}", "else:", f"    {name} = {same}"]
    else:
        lines = [f"if {cond}:", f"    {name} = {same}", "else:", f"    {name} = {other}"]
    shape = list(v.shape)
    shape[a] = f"({d} if {model} else 1)"
    b.min_dims.append((d, 1))
    B = v.bound * d_eval(d, {s: 20 for s in b.example}) + 2
    b.stmts.append(Stmt(lines, "size_branch", (name,)))
    _tag(b, "size_branch", f"size_branch:{kind}")
    b.vals.append(Val(name, tuple(shape), v.dtype, -B if v.dtype != "uint8" else 0, B, 0.0, name))
    b.want_outputs.append(name)
    return True


def g_loop_small(b: Builder) -> bool:
    """Loops that run 0 or 1 times at a small example: ``range(1, S)``, ``range(v.shape[-1])``."""
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and v.dtype == "float32" and v.group != "masked" and v.dyn_axes())
    if v is None:
        return False
    v = b.tame(v, 3)
    a = rng.choice(v.dyn_axes())
    n = f"{v.name}.shape[{a}]"
    name = b.fresh()
    big = d_eval(v.shape[a], {s: 12 for s in b.example}) + 1
    kind = rng.choices(["last_axis", "from_one", "write_prefix", "count"], [3, 3, 2, 1])[0]
    shape = v.shape[:a] + v.shape[a + 1:]
    if kind == "last_axis":
        lines = [f"{name} = {v.name}.sum({a}) * 0", f"for i in range({n}):",
                 f"    {name} = {name} + {v.name}.select({a}, i) * (i + 1)"]
        lo, hi = -3 * big * big, 3 * big * big
    elif kind == "from_one":
        b.min_dims.append((v.shape[a], 1))
        lines = [f"{name} = {v.name}.select({a}, 0).clone()", f"for i in range(1, {n}):",
                 f"    {name} = {name} * 0.5 + {v.name}.select({a}, i)"]
        lo, hi = -6, 6
    elif kind == "write_prefix":
        b.min_dims.append((v.shape[a], 1))
        shape = v.shape
        lines = [f"{name} = {v.name}.clone()", f"for i in range(1, {n}):",
                 f"    {name}.select({a}, i).add_({name}.select({a}, i - 1) * 0.5)"]
        lo, hi = -6, 6
    else:
        shape = v.shape
        lines = [f"{name} = {v.name} * 1", f"for _ in range({n} - 1):", f"    {name} = torch.tanh({name}) + 0.5"]
        lo, hi = -3, 3
    b.stmts.append(Stmt(lines, "loop_small", (name,)))
    _tag(b, "loop_small", f"loop_small:{kind}")
    b.vals.append(Val(name, tuple(shape), "float32", lo, hi, 0.0, name))
    b.want_outputs.append(name)
    return True


def g_squeeze_dyn(b: Builder) -> bool:
    """``squeeze()`` / ``squeeze(a)`` of a dynamic axis whose example is 1 (the rank depends on the size)."""
    rng = b.rng
    v = b.pick(lambda v: any(d_eval(d, b.example) == 1 for d in v.shape if not isinstance(d, int))
               and v.group != "masked")
    if v is None:
        return False
    a = rng.choice([i for i in v.dyn_axes() if d_eval(v.shape[i], b.example) == 1])
    expr = rng.choice([f"{v.name}.squeeze()", f"{v.name}.squeeze({a})", f"torch.squeeze({v.name}, {a - v.rank})",
                       f"{v.name}.squeeze({a}) * 2" if v.dtype not in ("bool", "uint8") else f"{v.name}.squeeze({a})"])
    shape = tuple(d for i, d in enumerate(v.shape) if i != a)
    b.emit(expr, shape, v.dtype, v.lo, v.hi, "squeeze_dyn")
    b.want_outputs.append(b.vals.pop().name)  # its rank depends on the size: only as an output
    return True


def g_floordiv_inf(b: Builder) -> bool:
    """``a // b`` where ``b`` holds infinities of both signs: Python's floor semantics (5 // -inf == -1)."""
    rng = b.rng
    v = b.pick(lambda v: v.dtype == "float32" and v.group != "masked")
    if v is None:
        return False
    kind = rng.choice(["where", "buffer", "scalar", "mixed"])
    if kind == "where":
        u = b.pick(lambda u: u.shape == v.shape and u.dtype != "bool" and u.group != "masked") or v
        den = f"torch.where({u.name} > 0, float('inf'), float('-inf'))"
    elif kind == "scalar":
        den = rng.choice(["float('inf')", "float('-inf')", "-math.inf"])
    else:
        last = v.shape[-1] if v.rank else 1
        n = last if isinstance(last, int) else 1
        vals = [rng.choice(["float('inf')", "float('-inf')"] + (["2.0", "-0.5"] if kind == "mixed" else []))
                for _ in range(n)]
        name = f"inf{b.params + 1}"
        b.params += 1
        b.init_lines.append(f"self.register_buffer('{name}', torch.tensor([{', '.join(vals)}]))")
        den = f"self.{name}"
    expr = rng.choice([f"{v.name} // {den}", f"torch.floor_divide({v.name}, {den})",
                       f"torch.div({v.name}, {den}, rounding_mode='floor')"])
    q = v.bound / 0.5 + 1
    b.emit(expr, v.shape, "float32", -q, q, "floordiv_inf")
    b.want_outputs.append(b.vals[-1].name)
    return True


def g_narrow_mul(b: Builder) -> bool:
    """An in-place write through a ``narrow`` view of an input, then ``mul_`` of the input by it."""
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and v.dtype == "float32" and not v.expanded and v.group != "masked"
               and not b.is_ambiguous(v))
    if v is None:
        return False
    v = b.tame(v, 3)
    a = rng.randrange(v.rank)
    d = v.shape[a]
    if not isinstance(d, int):
        b.min_dims.append((d, 1))
    w = b.fresh()
    op = rng.choice(["mul_(2.0)", "add_(1.0)", "clamp_(-0.5, 0.5)", "fill_(0.25)"])
    arg = rng.choice([f"{w} + 0", f"{w}.clone()", f"{w} * 1"])
    lines = [f"{w} = {v.name}.narrow({a}, 0, 1)", f"{w}.{op}", f"{v.name}.mul_({arg})"]
    b.stmts.append(Stmt(lines, "narrow_mul", (w,)))
    _tag(b, "narrow_mul")
    b.mutated.add(v.group)
    for u in b.vals:
        if u.group == v.group:
            u.lo, u.hi, u.minabs = -9.0, 9.0, 0.0
    shape = v.shape[:a] + (1,) + v.shape[a + 1:]
    b.vals.append(Val(w, shape, "float32", -9, 9, 0.0, v.group, contiguous=False))
    b.want_outputs += [v.name, w]
    return True


def g_empty_axis(b: Builder) -> bool:
    """Ops that keep an empty axis empty: ``x @ arange(x.shape[1])``, sums over the other axes, ``cat``."""
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 2 and v.dtype in ("float32", "int64") and v.group != "masked")
    if v is None:
        return False
    last = f"{v.name}.shape[-1]"
    kind = rng.choice(["matmul_arange", "sum_other", "cat_self", "new_zeros"])
    if kind == "matmul_arange":
        dt = "" if v.dtype == "int64" else ", dtype=torch.float32"
        expr = f"{v.name} @ torch.arange({last}{dt})"
        n = d_eval(v.shape[-1], {s: 12 for s in b.example})
        b.emit(expr, v.shape[:-1], v.dtype, -v.bound * n * n, v.bound * n * n, "empty_axis")
    elif kind == "sum_other":
        expr = f"{v.name}.sum(-1)"
        n = d_eval(v.shape[-1], {s: 12 for s in b.example})
        b.emit(expr, v.shape[:-1], v.dtype, -v.bound * n, v.bound * n, "empty_axis")
    elif kind == "cat_self":
        shape = (v.shape[0] if isinstance(v.shape[0], int) else f"(2 * {v.shape[0]})",) + v.shape[1:]
        if isinstance(v.shape[0], int):
            shape = (2 * v.shape[0],) + v.shape[1:]
        b.emit(f"torch.cat([{v.name}, {v.name} * 2], 0)", shape, v.dtype, -2 * v.bound, 2 * v.bound, "empty_axis")
    else:
        b.emit(f"{v.name}.new_zeros({v.name}.shape) + {v.name}", v.shape, v.dtype, v.lo, v.hi, "empty_axis")
    b.want_outputs.append(b.vals[-1].name)
    return True
