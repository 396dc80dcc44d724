"""Statements on values: elementwise arithmetic, comparisons, bitwise and logical ops, unary math, reductions."""
from __future__ import annotations

from typing import Optional

from .builder import INTS, Builder, Val, broadcast, is_float, is_int, promote, promote_scalar
from .program import d_eval


# Each takes the builder and returns True when it emitted something.

def _scalar(b: Builder, dtype: str, nonzero: bool = False):
    rng = b.rng
    if is_float(dtype) or rng.random() < 0.2 and dtype != "bool":
        x = round(rng.uniform(0.5, 3.0), 2) * rng.choice([1, -1])
        return x
    x = rng.randint(1, 4) * rng.choice([1, -1] if dtype != "uint8" else [1])
    return x


def _partner(b: Builder, v: Val, dtypes=("float32", "int64", "int32", "uint8", "bool")) -> Optional[Val]:
    """Another tensor that broadcasts with ``v`` (a live value or a new buffer)."""
    rng = b.rng
    if rng.random() < 0.6:
        u = b.pick(lambda u: u is not v and u.dtype in dtypes and broadcast(v.shape, u.shape) == v.shape)
        if u is not None:
            return u
    if rng.random() < 0.3:
        u = b.pick(lambda u: u is not v and u.dtype in dtypes and broadcast(v.shape, u.shape) is not None
                   and b.numel_at_example(broadcast(v.shape, u.shape)) <= 600)
        if u is not None:
            return u
    keep = rng.randint(0, v.rank)
    shape = [1 if not isinstance(d, int) or rng.random() < 0.3 else d for d in v.shape[v.rank - keep:]]
    dtype = v.dtype if v.dtype in dtypes else dtypes[0]
    if dtype == "bool":
        expr = b.param(shape, "float32") + " > 0"
        return Val(expr, tuple(shape), "bool", 0, 1)
    if is_int(dtype):
        lo, hi = (0, 9) if dtype == "uint8" else (-6, 6)
        return Val(b.param(shape, dtype, lo, hi, "int"), tuple(shape), dtype, lo, hi)
    return Val(b.param(shape), tuple(shape), "float32", -1, 1)


def g_arith(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    rng = b.rng
    op = rng.choice(["+", "-", "*", "+", "*"])
    if rng.random() < 0.35:
        s = _scalar(b, v.dtype)
        dt = promote_scalar(v.dtype, s)
        if dt == "uint8" and (op == "-" or s < 0):
            s = abs(s)
            op = "+"
        lo, hi = _range(op, (v.lo, v.hi), (s, s))
        expr = f"{v.name} {op} {s}" if rng.random() < 0.6 else f"{s} {op} {v.name}"
        if expr.startswith(str(s)):
            lo, hi = _range(op, (s, s), (v.lo, v.hi))
        if max(abs(lo), abs(hi)) > 1e4:
            return False
        b.emit(expr, v.shape, dt, lo, hi, "arith")
        return True
    u = _partner(b, v, ("float32", "int64", "int32", "uint8"))
    dt = promote((v.dtype, v.rank), (u.dtype, u.rank))
    if dt == "uint8" and op == "-":
        op = "+"
    lo, hi = _range(op, (v.lo, v.hi), (u.lo, u.hi))
    if max(abs(lo), abs(hi)) > 1e4:
        v = b.tame(v)
        u = b.tame(u) if u.name.isidentifier() else u
        lo, hi = _range(op, (v.lo, v.hi), (u.lo, u.hi))
    if dt == "uint8" and (lo < 0 or hi > 255):
        return False
    form = rng.random()
    if form < 0.7:
        expr = f"{v.name} {op} {u.name}"
    else:
        fn = {"+": "torch.add", "-": "torch.sub", "*": "torch.mul"}[op]
        expr = f"{fn}({v.name}, {u.name})"
    b.emit(expr, broadcast(v.shape, u.shape), dt, lo, hi, "arith")
    return True


def _range(op, a, c):
    if op == "+":
        return a[0] + c[0], a[1] + c[1]
    if op == "-":
        return a[0] - c[1], a[1] - c[0]
    corners = [x * y for x in a for y in c]
    return min(corners), max(corners)


def _denominator(b: Builder, v: Val, shape) -> tuple:
    """An expression that broadcasts to ``shape`` and stays away from 0, with its bounds."""
    rng = b.rng
    floaty = is_float(v.dtype)
    cand = b.pick(lambda u: u.minabs >= (0.5 if is_float(u.dtype) else 1) and u.dtype == v.dtype
                  and broadcast(shape, u.shape) == tuple(shape))
    if cand is not None and rng.random() < 0.5:
        return cand.name, cand.minabs, cand.bound, cand.rank
    if rng.random() < 0.4:
        s = _scalar(b, v.dtype)
        if not floaty:
            s = rng.choice([2, 3, -2, -3, 5]) if v.dtype != "uint8" else rng.choice([2, 3, 5])
        return repr(s), abs(s), abs(s), 0
    u = b.pick(lambda u: u.dtype == v.dtype and broadcast(shape, u.shape) == tuple(shape))
    if u is None:
        return None
    if floaty:
        u = b.tame(u)
        sign = rng.choice(["", "-"])
        return f"{sign}({u.name}.abs() + 0.5)", 0.5, u.bound + 0.5, u.rank
    u = b.tame(u, 20)
    return f"({u.name}.abs() + 1)", 1, u.bound + 1, u.rank


def g_div(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    v = b.tame(v, 20 if not is_float(v.dtype) else 8)
    den = _denominator(b, v, v.shape)
    if v.minabs >= (0.5 if is_float(v.dtype) else 1) and b.rng.random() < 0.25:
        den = (v.name, v.minabs, v.bound, v.rank)  # x // x, x % x: exact in torch
    if den is None:
        return False
    d, minabs, dbound, drank = den
    rng = b.rng
    floaty = is_float(v.dtype)
    kind = rng.choice(["/", "//", "%", "floor", "trunc", "fmod", "remainder", "true_div"])
    bound = v.bound
    if kind in ("/", "true_div"):
        expr = f"{v.name} / {d}" if kind == "/" else f"torch.div({v.name}, {d})"
        q = bound / minabs
        b.emit(expr, v.shape, "float32", -q, q, "div")
        return True
    if kind in ("//", "floor", "trunc"):
        expr = {"//": f"{v.name} // {d}", "floor": f"torch.div({v.name}, {d}, rounding_mode='floor')",
                "trunc": f"torch.div({v.name}, {d}, rounding_mode='trunc')"}[kind]
        q = bound / minabs + 1
        b.emit(expr, v.shape, v.dtype, -q if v.dtype != "uint8" else 0, q, "div")
        return True
    expr = {"%": f"{v.name} % {d}", "fmod": f"torch.fmod({v.name}, {d})",
            "remainder": f"torch.remainder({v.name}, {d})"}[kind]
    b.emit(expr, v.shape, v.dtype, -dbound if v.dtype != "uint8" else 0, dbound, "div")
    return True


def g_pow(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype in ("float32", "int64", "int32"))
    if v is None:
        return False
    rng = b.rng
    if is_float(v.dtype):
        v = b.tame(v, 3)
        if rng.random() < 0.5:
            e = rng.choice([2, 3, 2.0, 0.5, -1, 1.5, -0.5])
            base = f"({v.name}.abs() + 0.1)" if (isinstance(e, float) or e < 0) else v.name
            expr = rng.choice([f"{base} ** {e}", f"torch.pow({base}, {e})"])
            hi = 3.1 ** abs(e) if e > 0 else 10 ** abs(e)
            b.emit(expr, v.shape, "float32", -hi if base == v.name else 0, hi, "pow")
            return True
        u = _partner(b, v, ("float32",))
        u = b.tame(u, 2) if u.name.isidentifier() else u
        b.emit(f"({v.name}.abs() + 0.5) ** {u.name}", broadcast(v.shape, u.shape), "float32", 0, 40, "pow")
        return True
    v = b.tame(v, 5)
    if rng.random() < 0.5:
        e = rng.choice([0, 1, 2, 3])
        b.emit(f"{v.name} ** {e}", v.shape, v.dtype, -(5 ** e), 5 ** e, "pow")
        return True
    e = b.param(v.shape[-1:] if isinstance(v.shape[-1:][0] if v.shape else 1, int) else (1,), v.dtype, -2, 3, "int") \
        if v.rank else None
    if e is None:
        return False
    b.emit(f"torch.where({v.name} == 0, 1, {v.name}) ** {e}", v.shape, v.dtype, -125, 125, "pow")
    return True


def g_compare(b: Builder) -> bool:
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    rng = b.rng
    op = rng.choice(["<", "<=", ">", ">=", "==", "!="] if not is_float(v.dtype) else ["<", "<=", ">", ">="])
    if rng.random() < 0.4:
        s = rng.randint(-2, 4) if not is_float(v.dtype) else round(rng.uniform(-1, 1), 2)
        expr = f"{v.name} {op} {s}"
        shape = v.shape
    else:
        u = _partner(b, v, (v.dtype,) if not is_float(v.dtype) else ("float32", "int64"))
        expr = f"{v.name} {op} {u.name}"
        if rng.random() < 0.3:
            fn = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[op]
            expr = f"torch.{fn}({v.name}, {u.name})"
        shape = broadcast(v.shape, u.shape)
    b.emit(expr, shape, "bool", 0, 1, "compare")
    return True


def g_logical(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.dtype == "bool") or b.pick()
    if v.dtype != "bool":
        v = b.emit(rng.choice([f"{v.name} > 0", f"{v.name}.bool()", f"{v.name} != 0"]), v.shape, "bool", 0, 1, "compare")
    kind = rng.choice(["&", "|", "^", "~", "and", "or", "xor", "not"])
    if kind == "~":
        b.emit(f"~{v.name}", v.shape, "bool", 0, 1, "logical")
        return True
    if kind == "not":
        b.emit(f"torch.logical_not({v.name})", v.shape, "bool", 0, 1, "logical")
        return True
    u = _partner(b, v, ("bool",) if kind in "&|^" else ("bool", "float32", "int64"))
    expr = f"{v.name} {kind} {u.name}" if kind in "&|^" else f"torch.logical_{kind}({v.name}, {u.name})"
    b.emit(expr, broadcast(v.shape, u.shape), "bool", 0, 1, "logical")
    return True


def g_bitwise(b: Builder) -> bool:
    v = b.pick(lambda v: is_int(v.dtype))
    if v is None:
        u = b.pick(lambda v: is_float(v.dtype))
        if u is None:
            return False
        u = b.tame(u, 8)
        v = b.emit(f"({u.name} * 3 + 0.25).long()", u.shape, "int64", -24, 25, "cast")  # + 0.25: see g_unary
    rng = b.rng
    kind = rng.choice(["&", "|", "^", "~", "<<", ">>", "bitwise_and", "bitwise_not"])
    if kind in ("~", "bitwise_not"):
        expr = f"~{v.name}" if kind == "~" else f"torch.bitwise_not({v.name})"
        lo, hi = (0, 255) if v.dtype == "uint8" else (-v.hi - 1, -v.lo - 1)
        b.emit(expr, v.shape, v.dtype, lo, hi, "bitwise")
        return True
    if kind in ("<<", ">>"):
        v = b.tame(v, 100)
        s = rng.randint(0, 3)
        lo, hi = (v.lo * 8, v.hi * 8) if kind == "<<" else (v.lo, v.hi)
        if v.dtype == "uint8" and kind == "<<":
            return False
        b.emit(f"{v.name} {kind} {s}", v.shape, v.dtype, lo, hi, "bitwise")
        return True
    if rng.random() < 0.4:
        s = rng.choice([1, 3, 6, 7, 12])
        op = kind if len(kind) == 1 else "&"
        b.emit(f"{v.name} {op} {s}", v.shape, v.dtype, min(v.lo, -16), max(v.hi, 16), "bitwise")
        return True
    u = _partner(b, v, (v.dtype,))
    expr = f"torch.bitwise_and({v.name}, {u.name})" if kind == "bitwise_and" else f"{v.name} {kind} {u.name}"
    lo = min(v.lo, u.lo, 0) * 2 - 1
    hi = max(v.hi, u.hi, 0) * 2 + 1
    b.emit(expr, broadcast(v.shape, u.shape), promote((v.dtype, v.rank), (u.dtype, u.rank)), lo, hi, "bitwise")
    return True


def g_where_clamp(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.dtype != "bool")
    if v is None:
        return False
    kind = rng.choice(["where", "where_scalar", "clamp", "clamp_t", "maximum", "minimum", "max2", "clamp_min"])
    if kind.startswith("where"):
        c = b.pick(lambda c: c.dtype == "bool" and broadcast(v.shape, c.shape) is not None
                   and b.numel_at_example(broadcast(v.shape, c.shape)) <= 600)
        if c is None:
            c = b.emit(f"{v.name} > {rng.choice([0, 1]) if not is_float(v.dtype) else 0.3}", v.shape, "bool", 0, 1, "compare")
        shape = broadcast(v.shape, c.shape)
        if kind == "where_scalar":
            s = _scalar(b, v.dtype)
            if v.dtype == "uint8":
                s = abs(int(s))
            dt = promote_scalar(v.dtype, s)
            b.emit(f"torch.where({c.name}, {v.name}, {s})", shape, dt, min(v.lo, s), max(v.hi, s), "where")
            return True
        u = _partner(b, v, (v.dtype,))
        shape = broadcast(shape, u.shape)
        if shape is None:
            return False
        b.emit(f"torch.where({c.name}, {u.name}, {v.name})", shape, promote((v.dtype, v.rank), (u.dtype, u.rank)),
               min(v.lo, u.lo), max(v.hi, u.hi), "where")
        return True
    if kind == "clamp":
        lo = rng.choice([-1, 0, 1]) if not is_float(v.dtype) else round(rng.uniform(-1.5, 0), 2)
        hi = lo + (rng.randint(1, 4) if not is_float(v.dtype) else round(rng.uniform(0.2, 2), 2))
        if v.dtype == "uint8":
            lo, hi = abs(lo), abs(lo) + 3
        expr = rng.choice([f"{v.name}.clamp({lo}, {hi})", f"torch.clamp({v.name}, min={lo}, max={hi})",
                           f"{v.name}.clip({lo}, {hi})"])
        b.emit(expr, v.shape, v.dtype, lo, hi, "clamp")
        return True
    if kind == "clamp_min":
        s = 0 if v.dtype != "float32" else 0.1
        b.emit(rng.choice([f"{v.name}.clamp_min({s})", f"{v.name}.clamp(max={s})"]), v.shape, v.dtype,
               min(v.lo, s), max(v.hi, s), "clamp")
        return True
    u = _partner(b, v, (v.dtype,))
    shape = broadcast(v.shape, u.shape)
    dt = promote((v.dtype, v.rank), (u.dtype, u.rank))
    if kind == "clamp_t":
        b.emit(f"torch.clamp({v.name}, min={u.name})", shape, dt, min(v.lo, u.lo), max(v.hi, u.hi), "clamp")
        return True
    fn = {"maximum": "torch.maximum", "minimum": "torch.minimum", "max2": "torch.max"}[kind]
    b.emit(f"{fn}({v.name}, {u.name})", shape, dt, min(v.lo, u.lo), max(v.hi, u.hi), "minmax")
    return True


_UNARY_ANY = [("abs", "{x}.abs()", "abs"), ("neg", "-{x}", "neg"), ("neg2", "torch.neg({x})", "neg"),
              ("sign", "torch.sign({x})", "sign"), ("square", "torch.square({x})", "sq")]
_UNARY_FLOAT = [("exp", "torch.exp({x})", "exp"), ("sin", "torch.sin({x})", "unit"), ("cos", "{x}.cos()", "unit"),
                ("tanh", "torch.tanh({x})", "unit"), ("sigmoid", "torch.sigmoid({x})", "unit01"),
                ("relu", "F.relu({x})", "relu"), ("relu2", "{x}.relu()", "relu"), ("gelu", "F.gelu({x})", "relu"),
                ("erf", "torch.erf({x})", "unit"), ("silu", "F.silu({x})", "relu"), ("softplus", "F.softplus({x})", "relu"),
                ("leaky", "F.leaky_relu({x}, 0.1)", "same"), ("elu", "F.elu({x})", "same"),
                ("hardtanh", "F.hardtanh({x})", "unit"), ("floor", "{x}.floor()", "same"), ("ceil", "torch.ceil({x})", "same"),
                ("round", "{x}.round()", "same"), ("trunc", "torch.trunc({x})", "same"),
                ("log", "torch.log({x}.abs() + 0.1)", "log"), ("sqrt", "torch.sqrt({x}.abs())", "sqrt"),
                ("rsqrt", "({x}.abs() + 0.2).rsqrt()", "rsqrt"), ("recip", "torch.reciprocal({x}.abs() + 0.5)", "recip"),
                ("log1p", "torch.log1p({x}.abs())", "log"), ("expm1", "torch.expm1({x})", "exp"),
                ("atan", "torch.atan({x})", "unit2"), ("frac", "torch.frac({x})", "unit")]
_CASTS = [("float", "{x}.float()", "float32"), ("long", "{x}.long()", "int64"), ("int", "{x}.int()", "int32"),
          ("bool", "{x}.bool()", "bool"), ("to_f", "{x}.to(torch.float32)", "float32"),
          ("u8", "{x}.to(torch.uint8)", "uint8")]


def g_unary(b: Builder) -> bool:
    rng = b.rng
    v = b.pick()
    if rng.random() < 0.2:
        name, tmpl, out = rng.choice(_CASTS)
        if out == "uint8" and (v.lo < 0 or v.hi > 255 or is_float(v.dtype)):
            return False
        if out in INTS and is_float(v.dtype):
            v = b.tame(v, 20)
            # + 0.25 keeps the values a float saturates to (tanh's 1.0: 0.99999994 in tract) off the
            # integer boundaries where a cast truncates: a difference of one ulp would flip the integer
            tmpl = tmpl.replace("{x}", "({x} * 2 + 0.25)")
            lo, hi = v.lo * 2, v.hi * 2 + 1
        else:
            lo, hi = (v.lo, v.hi) if out != "bool" else (0, 1)
        if out == "float32" and v.dtype == "bool":
            lo, hi = 0, 1
        b.emit(tmpl.format(x=v.name), v.shape, out, lo, hi, "cast")
        return True
    if is_float(v.dtype) and rng.random() < 0.75:
        name, tmpl, kind = rng.choice(_UNARY_FLOAT)
        if kind == "exp":
            v = b.tame(v, 3)
        lo, hi = {"unit": (-1, 1), "unit01": (0, 1), "unit2": (-1.6, 1.6), "relu": (-0.3, max(v.hi, 0) + 1),
                  "same": (v.lo - 1, v.hi + 1), "exp": (-1, 21), "log": (-2.4, 6), "sqrt": (0, v.bound ** 0.5 + 0.1),
                  "rsqrt": (0, 2.3), "recip": (0, 2)}[kind]
        b.emit(tmpl.format(x=v.name), v.shape, "float32", lo, hi, "unary")
        return True
    if v.dtype == "bool":
        b.emit(f"~{v.name}", v.shape, "bool", 0, 1, "logical")
        return True
    name, tmpl, kind = rng.choice(_UNARY_ANY)
    if kind == "sq":
        v = b.tame(v, 50)
    B = v.bound
    lo, hi = {"abs": (0, B), "neg": (-v.hi, -v.lo), "sign": (-1, 1), "sq": (0, B * B)}[kind]
    if v.dtype == "uint8" and kind in ("neg", "sign", "sq"):
        lo, hi = 0, 255
        if kind == "sq":
            return False
    if v.dtype == "uint8" and kind == "abs":
        return False  # torch refuses abs on uint8? it works; keep ranges simple
    b.emit(tmpl.format(x=v.name), v.shape, v.dtype, lo, hi, "unary")
    return True


def _reduction(b: Builder, v) -> tuple:
    """``(axis, spelled, keep, keepdim text, result shape)`` of a reduction of ``v`` over a random axis."""
    axis, spelled = b.rdim(v.rank)
    keep = b.rng.random() < 0.4
    shape = list(v.shape)
    if keep:
        shape[axis] = 1
    else:
        del shape[axis]
    return axis, spelled, keep, (", keepdim=True" if keep else ""), shape


def g_reduce(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    kind = rng.choice(["sum", "mean", "amax", "amin", "max_dim", "min_dim", "argmax", "argmin", "prod", "any",
                       "all", "cumsum", "norm", "sum_all", "max_all", "logsumexp", "var", "count"])
    axis, spelled, keep, kd, shape = _reduction(b, v)
    n = d_eval(v.shape[axis], {k: 20 for k in b.example})
    fl = is_float(v.dtype)
    B = v.bound
    if kind == "sum" or kind == "count":
        if kind == "count":
            expr = f"({v.name} > 0).sum({spelled}{kd})" if v.dtype != "bool" else f"{v.name}.sum({spelled}{kd})"
            b.emit(expr, shape, "int64", 0, n, "reduce")
            return True
        if rng.random() < 0.3 and v.rank >= 2:
            other = (axis + 1) % v.rank
            shape2 = list(v.shape)
            for a in sorted((axis, other), reverse=True):
                if keep:
                    shape2[a] = 1
                else:
                    del shape2[a]
            dt = "int64" if not fl else "float32"
            b.emit(f"{v.name}.sum(({spelled}, {other}){kd})", shape2, dt, -B * n * 5, B * n * 5, "reduce")
            return True
        dt = "int64" if not fl else "float32"
        b.emit(rng.choice([f"{v.name}.sum({spelled}{kd})", f"torch.sum({v.name}, dim={spelled}{kd})"]),
               shape, dt, -B * n, B * n, "reduce")
        return True
    if kind == "mean":
        if not fl:
            return False
        b.emit(f"{v.name}.mean({spelled}{kd})", shape, "float32", v.lo, v.hi, "reduce")
        return True
    if kind in ("amax", "amin"):
        if v.dtype == "bool":
            return False
        b.emit(f"{v.name}.{kind}({spelled}{kd})", shape, v.dtype, v.lo, v.hi, "reduce")
        return True
    if kind in ("max_dim", "min_dim"):
        if v.dtype == "bool":
            return False
        fn = kind[:3]
        if rng.random() < 0.5:
            b.emit(f"{v.name}.{fn}({spelled}{kd}).values", shape, v.dtype, v.lo, v.hi, "reduce")
        else:
            b.emit(f"torch.{fn}({v.name}, {spelled}{kd})[1]", shape, "int64", 0, n, "reduce")
        return True
    if kind in ("argmax", "argmin"):
        if v.dtype == "bool":
            return False
        if rng.random() < 0.2:
            b.emit(f"{v.name}.{kind}()", (), "int64", 0, 10 ** 4, "reduce")
        else:
            b.emit(f"{v.name}.{kind}({spelled}{kd})", shape, "int64", 0, n, "reduce")
        return True
    if kind == "prod":
        if v.dtype in ("bool", "uint8"):
            return False
        v = b.tame(v, 1.5 if fl else 2)
        lim = (1.5 if fl else 2) ** n
        b.emit(f"{v.name}.prod({spelled}{kd})", shape, "int64" if not fl else "float32", -lim, lim, "reduce")
        return True
    if kind in ("any", "all"):
        if rng.random() < 0.7:
            b.emit(f"{v.name}.{kind}({spelled}{kd})", shape, "bool", 0, 1, "reduce")
        else:
            b.emit(f"torch.{kind}({v.name})", (), "bool", 0, 1, "reduce")
        return True
    if kind == "cumsum":
        dt = "int64" if not fl else "float32"
        b.emit(f"{v.name}.cumsum({spelled})" if rng.random() < 0.6 else f"torch.cumsum({v.name}, dim={spelled})",
               v.shape, dt, -B * n, B * n, "reduce")
        return True
    if kind == "norm":
        if not fl:
            return False
        b.emit(rng.choice([f"{v.name}.norm(dim={spelled}{kd})", f"torch.linalg.vector_norm({v.name}, dim={spelled}{kd})",
                           f"{v.name}.norm(p=1, dim={spelled}{kd})"]), shape, "float32", 0, B * n, "reduce")
        return True
    if kind == "sum_all":
        dt = "int64" if not fl else "float32"
        b.emit(f"{v.name}.sum()", (), dt, -B * 10 ** 4, B * 10 ** 4, "reduce")
        return True
    if kind == "max_all":
        if v.dtype == "bool":
            return False
        b.emit(f"{v.name}.max()" if rng.random() < 0.5 else f"{v.name}.min()", (), v.dtype, v.lo, v.hi, "reduce")
        return True
    if kind == "logsumexp":
        if not fl:
            return False
        v = b.tame(v, 8)
        b.emit(f"torch.logsumexp({v.name}, {spelled}{kd})", shape, "float32", -8, 12, "reduce")
        return True
    if kind == "var":
        if not fl:
            return False
        b.emit(f"{v.name}.var({spelled}, unbiased=False{kd})" if rng.random() < 0.5
               else f"{v.name}.std({spelled}, correction=0{kd})", shape, "float32", 0, B * B, "reduce")
        return True
    return False


def g_special(b: Builder) -> bool:
    """The special elementwise ops: logaddexp(2), xlogy, copysign, heaviside, sinc, logit, ldexp."""
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype))
    if v is None:
        return False
    kind = rng.choice(["logaddexp", "logaddexp2", "xlogy", "copysign", "heaviside", "sinc", "logit_eps", "logit",
                       "ldexp"])
    if kind == "sinc":
        v = b.tame(v, 8)
        b.emit(rng.choice([f"torch.sinc({v.name})", f"{v.name}.sinc()"]), v.shape, "float32", -0.25, 1, "special")
        return True
    if kind == "logit_eps":
        eps = rng.choice([0.05, 0.1, 0.25])
        hi = float(abs(__import__("math").log(eps / (1 - eps))))
        b.emit(f"torch.logit({v.name}, eps={eps})", v.shape, "float32", -hi, hi, "special")
        return True
    if kind == "logit":
        v = b.tame(v, 4)
        b.emit(f"torch.logit(torch.sigmoid({v.name}) * 0.9 + 0.05)", v.shape, "float32", -3, 3, "special")
        return True
    u = _partner(b, v, ("float32",))
    shape = broadcast(v.shape, u.shape)
    if shape is None:
        return False
    if kind in ("logaddexp", "logaddexp2"):
        v = b.tame(v, 8)
        u = b.tame(u, 8) if u.name.isidentifier() else u
        b.emit(f"torch.{kind}({v.name}, {u.name})", shape, "float32", min(v.lo, u.lo), max(v.hi, u.hi) + 1, "special")
        return True
    if kind == "xlogy":
        v = b.tame(v, 8)
        u = b.tame(u, 8) if u.name.isidentifier() else u
        b.emit(f"torch.xlogy({v.name}, {u.name}.abs() + 0.1)", shape, "float32", -8 * 2.5, 8 * 2.5, "special")
        return True
    if kind == "copysign":
        # -relu(u) is -0.0 where u <= 0: the sign of a negative zero is taken too
        sign = u.name if rng.random() < 0.7 else f"-F.relu({u.name})"
        b.emit(rng.choice([f"torch.copysign({v.name}, {sign})", f"{v.name}.copysign({sign})"]), shape, "float32",
               -v.bound, v.bound, "special")
        return True
    if kind == "heaviside":
        # x is often exactly 0 after relu or a clamp: then the values are taken
        x = v if rng.random() < 0.5 else b.emit(f"F.relu({v.name})", v.shape, "float32", 0, max(v.hi, 0), "unary")
        b.emit(f"torch.heaviside({x.name}, {u.name})", shape, "float32", min(0, u.lo), max(1, u.hi), "special")
        return True
    eshape = v.shape[-1:] if v.rank and isinstance(v.shape[-1], int) else (1,)
    e = b.param(eshape, "int64", -2, 2, "int")
    v = b.tame(v, 8)
    b.emit(f"torch.ldexp({v.name}, {e})", broadcast(v.shape, eshape), "float32", -v.bound * 4, v.bound * 4, "special")
    return True


def g_reduce2(b: Builder) -> bool:
    """Scans and reductions added later: logcumsumexp, nanmean, median and nanmedian over a dim, trapezoid."""
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and v.dtype != "bool")
    if v is None:
        return False
    kind = rng.choice(["logcumsumexp", "nanmean", "median", "median", "nanmedian", "trapezoid"])
    axis, spelled, keep, kd, shape = _reduction(b, v)
    fl = is_float(v.dtype)
    n = d_eval(v.shape[axis], {k: 20 for k in b.example})
    if kind == "median":
        expr = rng.choice([f"{v.name}.median({spelled}{kd}).values", f"torch.median({v.name}, dim={spelled}{kd})[0]"])
        b.emit(expr, shape, v.dtype, v.lo, v.hi, "reduce2")
        return True
    if not fl:
        return False
    if kind == "logcumsumexp":
        v = b.tame(v, 8)
        b.emit(rng.choice([f"torch.logcumsumexp({v.name}, {spelled})", f"{v.name}.logcumsumexp(dim={spelled})"]),
               v.shape, "float32", -8, 12, "reduce2")
        return True
    if kind == "trapezoid":
        b.emit(f"torch.trapezoid({v.name}, dim={spelled})", v.shape[:axis] + v.shape[axis + 1:], "float32",
               -v.bound * n, v.bound * n, "reduce2")
        return True
    # NaN where the value is in its top part, except at each line's minimum: no line is all NaN
    # (a NaN result would flow into ops whose NaN handling differs, relu(NaN) is NaN in torch only)
    cut = round(v.lo + 0.8 * (v.hi - v.lo), 2)
    masked = (f"{v.name}.masked_fill(({v.name} > {cut}) & ({v.name} != {v.name}.amin({spelled}, keepdim=True)), "
              f"float('nan'))")
    if kind == "nanmean":
        b.emit(f"{masked}.nanmean({spelled}{kd})", shape, "float32", v.lo, v.hi, "reduce2")
    else:
        b.emit(f"{masked}.nanmedian({spelled}{kd}).values", shape, "float32", v.lo, v.hi, "reduce2")
    return True
