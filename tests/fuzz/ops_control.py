"""Statements that decide on sizes: Python branches and loops on dynamic dims, sizes used as numbers."""
from __future__ import annotations

from .builder import Builder, Val, is_float
from .program import Stmt, d_eval
from .ops_shapes import _prod


_BRANCH_BODIES = [
    ("{v}.flip({a})", "any"), ("-{v}", "signed"), ("{v} * 2", "num"), ("{v} + 1", "num"),
    ("{v}.roll(1, {a})", "any"), ("{v}.cumsum({a})", "float"), ("F.relu({v})", "float"), ("{v}.abs()", "signed"),
    ("{v}.clone()", "any"), ("{v} - {v}.mean({a}, keepdim=True)", "float"), ("torch.tanh({v})", "float"),
]


def g_branch(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and v.group != "masked")
    if v is None:
        return False
    src = b.pick(lambda u: u.dyn_axes() and u.group != "masked") or v
    if not src.dyn_axes():
        return False
    ax = rng.choice(src.dyn_axes())
    d = src.shape[ax]
    ex = d_eval(d, b.example)
    k = rng.choice([1, 2, 3, ex - 1, ex, ex, ex + 1, ex + 2])
    kind = rng.choice(["gt", "ge", "eq", "ne", "len", "numel", "mod", "lt", "size"])
    if kind == "len" and ax == 0:
        cond = f"len({src.name}) > {k}"
    elif kind == "numel":
        n = d_eval(_prod(src.shape), b.example)
        cond = f"{src.name}.numel() {rng.choice(['>', '<=', '>='])} {rng.choice([n, n - 1, n + 1, max(1, n // 2)])}"
    elif kind == "mod":
        cond = f"{src.name}.shape[{ax}] % 2 == {rng.choice([0, 1])}"
    else:
        op = {"gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "lt": "<", "size": ">", "len": ">"}[kind]
        lhs = f"{src.name}.size({ax})" if kind == "size" else f"{src.name}.shape[{ax}]"
        cond = f"{lhs} {op} {k}"

    def body():
        for _ in range(10):
            tmpl, need = rng.choice(_BRANCH_BODIES)
            ok = (need == "any" or need == "float" and is_float(v.dtype)
                  or need == "num" and v.dtype not in ("bool", "uint8")
                  or need == "signed" and v.dtype not in ("bool", "uint8"))
            if ok:
                return tmpl.format(v=v.name, a=rng.randrange(v.rank))
        return f"{v.name}.clone()"

    name = b.fresh()
    lines = [f"if {cond}:", f"    {name} = {body()}"]
    if rng.random() < 0.8:
        lines += ["else:", f"    {name} = {body()}"]
    else:
        lines = [f"{name} = {v.name}"] + lines
    lo, hi = v.lo, v.hi
    if v.dtype not in ("bool",):
        B = v.bound
        lo, hi = -2 * B - 1, 2 * B + 1
        if is_float(v.dtype):
            lo, hi = lo * 20, hi * 20
    if v.dtype == "uint8":
        lo, hi = 0, 255
    b.stmts.append(Stmt(lines, "branch", (name,)))
    b.families.add("branch")
    b.vals.append(Val(name, v.shape, v.dtype, lo, hi, 0.0, name))
    b.want_outputs.append(name)
    return True


def g_loop(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 2 and v.dtype in ("float32", "int64") and v.group != "masked")
    if v is None:
        return False
    v = b.tame(v, 4 if is_float(v.dtype) else 20)
    kind = rng.choice(["acc", "acc_min", "cat_list", "static", "acc_minus", "rnn", "rnn_write", "rnn_rev"])
    name = b.fresh()
    ax0 = v.shape[0]
    if kind == "acc":
        lines = [f"{name} = torch.zeros_like({v.name}[0])", f"for i in range({v.name}.shape[0]):",
                 f"    {name} = {name} + {v.name}[i] * (i + 1)"]
        n = d_eval(ax0, {k: 20 for k in b.example})
        val = Val(name, v.shape[1:], v.dtype, -v.bound * n * n, v.bound * n * n, 0.0, name)
    elif kind == "acc_minus":
        lines = [f"{name} = {v.name}[0].clone()", f"for i in range(1, len({v.name})):",
                 f"    {name} = torch.maximum({name}, {v.name}[i]) - i"]
        val = Val(name, v.shape[1:], v.dtype, v.lo - 400, v.hi, 0.0, name)
    elif kind == "acc_min":
        c = rng.randint(2, 4)
        lines = [f"{name} = {v.name}[0]", f"for i in range(1, min({v.name}.shape[0], {c})):",
                 f"    {name} = {name} * 0.5 + {v.name}[i]" if is_float(v.dtype) else f"    {name} = {name} + {v.name}[i]"]
        val = Val(name, v.shape[1:], v.dtype, -v.bound * 4, v.bound * 4, 0.0, name)
    elif kind in ("rnn", "rnn_write", "rnn_rev"):
        # a loop whose steps repeat: rolled into a scan over a dynamic first axis
        h = b.fresh()
        f = is_float(v.dtype)
        # (an integer // or % of the state itself is a known tract limitation: the step's slice is divided)
        step = f"torch.tanh({h} * 0.5 + {v.name}[i])" if f else f"({h} + {v.name}[i] // 2).clamp(-20, 20) + {v.name}[i] % 3"
        if kind == "rnn_write":
            lines = [f"{name} = torch.zeros_like({v.name})", f"{h} = {v.name}[0] * 0", f"for i in range({v.name}.shape[0]):",
                     f"    {h} = {step}", f"    {name}[i] = {h}"]
        else:
            order = f"reversed(range(len({v.name})))" if kind == "rnn_rev" else f"range({v.name}.shape[0])"
            lines = [f"{h} = {v.name}[0] * 0", f"{name}_steps = []", f"for i in {order}:", f"    {h} = {step}",
                     f"    {name}_steps.append({h})"]
            if kind == "rnn_rev":
                lines.append(f"{name}_steps.reverse()")
            lines.append(f"{name} = torch.stack({name}_steps, 0)")
        lo, hi = (-1.0, 1.0) if f else (-20, 22)
        val = Val(name, v.shape, v.dtype, lo, hi, 0.0, name)
    elif kind == "cat_list":
        a = rng.randrange(v.rank)
        lines = [f"{name} = torch.cat([{v.name}.narrow({a}, i, 1) * i for i in range({v.name}.shape[{a}])], {a})"]
        n = d_eval(v.shape[a], {k: 20 for k in b.example})
        val = Val(name, v.shape, v.dtype, -v.bound * n, v.bound * n, 0.0, name)
    else:
        st = v.static_axes()
        if not st:
            return False
        a = rng.choice(st)
        if v.shape[a] > 5:
            return False
        lines = [f"{name} = sum({v.name}.select({a}, i) for i in range({v.shape[a]}))"]
        shape = v.shape[:a] + v.shape[a + 1:]
        val = Val(name, shape, v.dtype, -v.bound * 5, v.bound * 5, 0.0, name)
    b.stmts.append(Stmt(lines, "loop", (name,)))
    b.families.add("loop")
    b.vals.append(val)
    return True


def g_size_scalar(b: Builder) -> bool:
    rng = b.rng
    src = b.pick(lambda u: u.dyn_axes() and u.group != "masked")
    v = b.pick(lambda v: v.rank >= 1 and v.group != "masked" and v.dtype != "bool")
    if src is None or v is None:
        return False
    ax = rng.choice(src.dyn_axes())
    n = f"{src.name}.shape[{ax}]"
    kind = rng.choice(["div", "mul", "arange", "full", "new_zeros", "half_slice", "tail_slice", "len", "ones_like"])
    big = d_eval(src.shape[ax], {k: 20 for k in b.example})
    if kind == "div":
        b.emit(f"{v.name} / {n}", v.shape, "float32", -v.bound, v.bound, "size_scalar")
    elif kind == "mul":
        if v.dtype == "uint8":
            return False
        b.emit(f"{v.name} * {n}", v.shape, v.dtype, -v.bound * big, v.bound * big, "size_scalar")
    elif kind == "len":
        if v.dtype == "uint8":
            return False
        b.emit(f"{v.name} + len({src.name})", v.shape, v.dtype, v.lo, v.hi + 20, "size_scalar")
    elif kind == "arange":
        if rng.random() < 0.5:
            b.emit(f"torch.arange({n})", (src.shape[ax],), "int64", 0, big, "size_scalar")
        else:
            b.emit(f"torch.arange({n}, dtype=torch.float32) * 0.5", (src.shape[ax],), "float32", 0, big, "size_scalar")
    elif kind == "full":
        b.emit(f"torch.full(({n}, 2), 1.5)", (src.shape[ax], 2), "float32", 1.5, 1.5, "size_scalar")
    elif kind == "new_zeros":
        b.emit(f"{v.name}.new_zeros({v.name}.shape) + 1", v.shape, v.dtype, 1, 1, "size_scalar")
    elif kind == "ones_like":
        b.emit(f"torch.ones_like({v.name}) * {n}", v.shape, v.dtype, 1, big, "size_scalar")
    elif kind == "half_slice":
        d = src.shape[ax]
        b.emit(f"{src.name}.narrow({ax}, 0, max(1, {n} // 2))" if rng.random() < 0.5 else
               f"{src.name}[{', '.join([':'] * ax + [f':max(1, {n} // 2)'])}]",
               src.shape[:ax] + (f"max(1, {d} // 2)",) + src.shape[ax + 1:], src.dtype, src.lo, src.hi, "size_scalar",
               group=src.group, contiguous=False)
    else:
        d = src.shape[ax]
        idx = ", ".join([":"] * ax + [f"{n} - 1:"])
        b.emit(f"{src.name}[{idx}]", src.shape[:ax] + (1,) + src.shape[ax + 1:], src.dtype, src.lo, src.hi,
               "size_scalar", group=src.group, contiguous=False)
    return True
