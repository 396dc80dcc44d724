"""In-place writes on tensors of every origin (issue 39), with advanced indices in every form torch takes.

Origins: a value (an input or a result) written itself or cloned, a buffer, a plain tensor
attribute (cloned, or written itself), a tensor made in the forward with constant sizes or
with traced sizes, a module-level global (cloned). Index forms: one tensor index, two
adjacent, two separated by a slice (``y[i, :, j]``, ``y[i, 1:3, j]``), an index after
``None`` (``y[:, None, i]``), an int among tensor indices, masks. Write forms: ``y[idx] = v``,
``y[idx] += v``, ``index_put_``, ``masked_fill_``, ``_`` methods through basic views,
``index_fill_`` / ``index_add_`` / ``index_copy_``, ``out=``, ``copy_``, writes through views
(``view(-1)``, ``transpose``, ``unsqueeze``). Index tensors are valid at every size tried:
made from sizes (``torch.arange(x.shape[0]) % 3``), literals within a static axis, or a
permutation input along a static axis. Tensor values are written only where no position is
written twice (or accumulated); a value read from the written region itself is the same for
repeated positions.
"""
from __future__ import annotations

from typing import Optional

from .builder import Builder, Val, broadcast, is_float
from .ops_shapes import _prod
from .program import InputSpec, Stmt, d_eval

ORIGINS = {"input_clone": 3, "value": 1.5, "buffer": 2, "plain": 2, "plain_noclone": 1, "made_const": 2,
           "made_traced": 2, "global": 1.5}


def _tag(b: Builder, *tags: str) -> None:
    b.families.update(tags)


def _origin(b: Builder) -> Optional[tuple]:
    """(kind, lines defining the target, Val of the target) for a random origin."""
    rng = b.rng
    kind = rng.choices(list(ORIGINS), list(ORIGINS.values()))[0]
    if kind in ("input_clone", "value", "made_traced"):
        v = b.pick(lambda v: 1 <= v.rank <= 4 and v.dtype in ("float32", "int64") and not v.expanded
                   and v.group != "masked" and not b.is_ambiguous(v) and b.numel_at_example(v.shape) <= 600
                   and (kind != "made_traced" or v.dyn_axes()))
        if v is None:
            return None
        if kind == "value":
            if v.name in {i.name for i in b.inputs}:
                kind = "input"
            return kind, [], v
        name = b.fresh("y")
        if kind == "input_clone":
            t = Val(name, v.shape, v.dtype, v.lo, v.hi, 0.0, name)
            return kind, [f"{name} = {v.name}.clone()"], t
        a = rng.choice(v.dyn_axes())
        c = rng.randint(2, 5)
        form = rng.randrange(3)
        if form == 0:
            line, shape = f"{name} = {v.name}.new_zeros(({v.name}.shape[{a}], {c}))", (v.shape[a], c)
        elif form == 1:
            line, shape = f"{name} = torch.full(({v.name}.shape[{a}], {c}), 0.5)", (v.shape[a], c)
        else:
            line, shape = f"{name} = torch.zeros_like({v.name}, dtype=torch.float32) + 0.5", v.shape
        if form == 0 and v.dtype != "float32":
            line = line.replace(".new_zeros(", ".float().new_zeros(")
        return kind, [line], Val(name, shape, "float32", 0, 0.5, 0.0, name)
    rank = rng.choice([1, 2, 2, 3, 3])
    shape = tuple(rng.randint(2, 5) for _ in range(rank))
    n = 1
    for d in shape:
        n *= d
    dims = ", ".join(map(str, shape))
    name = b.fresh("y")
    values = f"torch.linspace(-1.0, 1.0, {n}).reshape({dims})"
    if kind == "buffer":
        b.params += 1
        attr = f"buf{b.params}"
        b.init_lines.append(f"self.register_buffer('{attr}', {values})")
        lines = [f"{name} = self.{attr}.clone()"]
    elif kind in ("plain", "plain_noclone"):
        b.params += 1
        attr = f"t{b.params}"
        b.init_lines.append(f"self.{attr} = {values}  # neither parameter nor buffer")
        lines = [f"{name} = self.{attr}" + (".clone()" if kind == "plain" else "")]
    elif kind == "global":
        b.params += 1
        g = f"G{b.params}"
        b.globals_lines.append(f"{g} = {values}")
        lines = [f"{name} = {g}.clone()"]
    else:
        lines = [f"{name} = " + rng.choice([f"torch.zeros({dims})", f"torch.ones({dims}) * 0.5",
                                            f"torch.arange({n}, dtype=torch.float32).reshape({dims}) / {n}"])]
    return kind, lines, Val(name, shape, "float32", -1, 1, 0.0, name)


def _length(b: Builder) -> tuple:
    """The length of the index tensors: ("dyn", code, Dim) from a dynamic axis, or ("static", n)."""
    rng = b.rng
    src = b.pick(lambda u: u.dyn_axes() and u.group != "masked") if rng.random() < 0.5 else None
    if src is not None:
        a = rng.choice(src.dyn_axes())
        return ("dyn", f"{src.name}.shape[{a}]", src.shape[a])
    return ("static", rng.choice([1, 2, 2, 3]))


def _index_tensor(b: Builder, y: Val, axis: int, length: tuple) -> tuple:
    """(code, unique) of an index tensor for ``y``'s ``axis``, valid at every size."""
    rng = b.rng
    d = y.shape[axis]
    dcode = str(d) if isinstance(d, int) else f"{y.name}.shape[{axis}]"
    if length[0] == "dyn":
        _, c, D = length
        if D == d:
            return rng.choice([f"torch.arange({c})", f"torch.arange({c}).flip(0)", f"({c} - 1 - torch.arange({c}))"]), True
        k = rng.choice([dcode, dcode, "2"]) if isinstance(d, int) and d >= 2 else dcode
        return f"(torch.arange({c}) % {k})", False
    n = length[1]
    if isinstance(d, int):
        r = rng.random()
        if n == d and r < 0.35:
            name = f"p{d}"
            if name not in {i.name for i in b.inputs}:
                b.inputs.append(InputSpec(name, (d,), "int64", "perm", 0, d - 1))
            _tag(b, "index:perm_input")
            return name, True
        if r < 0.7 and n <= d:
            pos = rng.sample(range(d), n)
            vals = [p - d if rng.random() < 0.3 else p for p in pos]
            return f"torch.tensor({vals})", True
        b.params += 1
        attr = f"ix{b.params}"
        vals = [rng.randrange(d) for _ in range(n)]
        b.init_lines.append(f"self.register_buffer('{attr}', torch.tensor({vals}))")
        return f"self.{attr}", len(set(vals)) == n
    if n == 1:
        return rng.choice(["torch.tensor([0])", "torch.tensor([-1])"]), True
    return f"(torch.arange({n}) % {dcode})", False


def _region(shape: tuple, parts: list) -> Optional[tuple]:
    """The shape torch gives ``y[parts]``; parts: ("full",), ("range", Dim), ("none",), ("int",), ("tensor", L)."""
    tensors = [p for p in parts if p[0] == "tensor"]
    lens = [p[1] for p in tensors]
    ls = [x for x in lens if x != 1]
    if any(x != ls[0] for x in ls):
        return None
    idx_shape = (ls[0] if ls else 1,) if tensors else ()
    adv = [k for k, p in enumerate(parts) if p[0] == "tensor" or p[0] == "int" and tensors]
    out, axis, placed = [], 0, False
    front = bool(adv) and adv != list(range(adv[0], adv[-1] + 1))
    for k, p in enumerate(parts):
        if k in adv:
            if not front and not placed:
                out += list(idx_shape)
                placed = True
            axis += 1
        elif p[0] == "none":
            out.append(1)
        elif p[0] == "int":
            axis += 1
        else:
            out.append(shape[axis] if p[0] == "full" else p[1])
            axis += 1
    out += list(shape[axis:])
    return tuple(idx_shape) + tuple(out) if front else tuple(out)


def _advanced_index(b: Builder, y: Val) -> Optional[tuple]:
    """(index text, parts, unique, form, leading tensors or None) of an advanced index of ``y``."""
    rng = b.rng
    r = y.rank
    forms = ["one", "one"] + (["adjacent", "int_among"] if r >= 2 else []) + (["separated", "separated"] if r >= 3 else [])
    forms += ["none_first"]
    form = rng.choice(forms)
    length = _length(b)
    L = length[2] if length[0] == "dyn" else length[1]

    def tensor(axis):
        code, unique = _index_tensor(b, y, axis, length)
        return code, ("tensor", L), unique

    texts, parts, uniq = [], [], []
    if form in ("one", "none_first"):
        a = rng.randrange(r)
        if form == "none_first":
            texts, parts = [":"] * a + ["None"], [("full",)] * a + [("none",)]
        else:
            texts, parts = [":"] * a, [("full",)] * a
        code, part, u = tensor(a)
        texts.append(code)
        parts.append(part)
        uniq.append(u)
        if form == "one" and a == r - 1 and a > 0 and rng.random() < 0.5:
            texts = ["..."] + texts[a:]
            parts = [("full",)] * a + parts[a:]
    elif form == "adjacent":
        a = rng.randrange(r - 1)
        texts, parts = [":"] * a, [("full",)] * a
        for axis in (a, a + 1):
            if axis == a + 1 and rng.random() < 0.3:
                code, part, u = rng.choice(["torch.tensor([0])", "torch.tensor([-1])"]), ("tensor", 1), False
            else:
                code, part, u = tensor(axis)
            texts.append(code)
            parts.append(part)
            uniq.append(u)
        uniq = [uniq[0] or uniq[1] and parts[-1][1] == L or L == 1]
    elif form == "int_among":
        a = rng.randrange(r - 1)
        texts, parts = [":"] * a, [("full",)] * a
        first_int = rng.random() < 0.5
        for axis in (a, a + 1):
            if (axis == a) == first_int:
                texts.append(rng.choice(["0", "-1"]))
                parts.append(("int",))
            else:
                code, part, u = tensor(axis)
                texts.append(code)
                parts.append(part)
                uniq.append(u)
        if a + 3 < r and rng.random() < 0.4:  # y[i, :, 0]: the int after a slice separates them
            texts += [":", "0"]
            parts += [("full",), ("int",)]
    else:  # separated by a slice
        a = rng.randrange(r - 2)
        mid = y.shape[a + 1]
        texts, parts = [":"] * a, [("full",)] * a
        code, part, u1 = tensor(a)
        texts.append(code)
        parts.append(part)
        if isinstance(mid, int) and mid >= 3 and rng.random() < 0.5:
            texts.append("1:3")
            parts.append(("range", 2))
        else:
            texts.append(":")
            parts.append(("full",))
        code, part, u2 = tensor(a + 2)
        texts.append(code)
        parts.append(part)
        uniq = [u1 or u2]
    lead = None
    if form in ("one", "adjacent") and all(p[0] == "tensor" for p in parts):
        lead = [t for t in texts if t != "..."]
    _tag(b, f"index:{form}")
    return ", ".join(texts), parts, all(uniq) and bool(uniq), form, lead


def _scalar_value(b: Builder, y: Val) -> tuple:
    rng = b.rng
    if is_float(y.dtype):
        if rng.random() < 0.5:
            s = round(rng.uniform(-2, 2), 2)
            return repr(s), s, s
        src = b.pick(lambda u: u.group != "masked" and u.group != y.group and u.dtype != "bool") or b.vals[0]
        return f"torch.tanh({src.name}.float().sum() * 0.1)", -1, 1
    s = rng.randint(-3, 3)
    return str(s), s, s


def g_advwrite(b: Builder) -> bool:
    rng = b.rng
    got = _origin(b)
    if got is None:
        return False
    origin, lines, y = got
    fl = is_float(y.dtype)
    kind = rng.choices(["assign", "augassign", "index_put", "mask", "method_view", "index_method", "out", "copy_",
                        "view_write"], [6, 3, 2, 2, 2, 2, 1, 1, 2])[0]
    # a plain attribute written itself changes the module: only writes that give the same tensor
    # however often forward runs (a literal written at any positions), so that a fresh model is the reference
    literal = origin == "plain_noclone"
    if literal:
        kind = rng.choice(["assign", "mask", "view_write"])
    lo, hi = y.lo, y.hi
    idx_text = None
    if kind in ("assign", "augassign", "index_put"):
        got = _advanced_index(b, y)
        if got is None:
            return False
        idx_text, parts, unique, form, lead = got
        region = _region(y.shape, parts)
        if region is None:
            return False
        if kind == "index_put" and lead is None:
            kind = "assign"
        vk = rng.choice(["scalar", "scalar", "self", "tensor"]) if not literal else "literal"
        if vk == "tensor":
            u = b.pick(lambda u: u.dtype == y.dtype and u.group != y.group and u.group != "masked"
                       and broadcast(region, u.shape) == region) if region else None
            accumulate = kind == "index_put" and rng.random() < 0.5
            if u is None or not (unique or accumulate):
                vk = "self"
            else:
                val, vlo, vhi = u.name, u.lo, u.hi
        if vk == "self":
            val = f"{y.name}[{idx_text}] * 2 + 1" if fl else f"{y.name}[{idx_text}] + 1"
            vlo, vhi = 2 * y.lo - 1, 2 * y.hi + 1
        elif vk == "scalar":
            val, vlo, vhi = _scalar_value(b, y)
        elif vk == "literal":
            val, vlo, vhi = "0.375", 0.375, 0.375
        if kind == "assign":
            line = f"{y.name}[{idx_text}] = {val}"
            lo, hi = min(lo, vlo), max(hi, vhi)
        elif kind == "augassign":
            op = rng.choice(["+=", "-="] + (["*="] if vk == "scalar" else []))
            line = f"{y.name}[{idx_text}] {op} {val}"
            w = max(abs(vlo), abs(vhi))
            lo, hi = (lo - w, hi + w) if op != "*=" else (-y.bound * w - 1, y.bound * w + 1)
            if vk == "tensor" and not unique:
                return False
        else:
            accumulate = vk == "tensor" and not unique or rng.random() < 0.3
            if vk != "scalar" and not val.startswith("torch.tanh"):
                pass
            if vk == "scalar" and not val.startswith("torch"):
                val = f"torch.tensor({val})" if fl else f"torch.tensor({val})"
            line = f"{y.name}.index_put_(({', '.join(lead)},), {val}" + (", accumulate=True)" if accumulate else ")")
            w = max(abs(vlo), abs(vhi)) * (21 if accumulate else 1)
            lo, hi = lo - w, hi + w
        _tag(b, f"write:{kind}")
    elif kind == "mask":
        t = round(rng.uniform(-0.5, 0.5), 2) if fl else 0
        m = f"{y.name} > {t}"
        val, vlo, vhi = _scalar_value(b, y) if not literal else ("0.375", 0.375, 0.375)
        line = rng.choice([f"{y.name}[{m}] = {val}", f"{y.name}.masked_fill_({m}, {val})",
                           f"{y.name}.masked_fill_({y.name}[..., :1] > {t}, {val})"])
        if y.rank >= 2 and rng.random() < 0.3:
            m = f"{y.name}[{', '.join([':'] * (y.rank - 1))}, 0] > {t}"  # a mask over the leading axes
            line = f"{y.name}[{m}] = {val}"
        lo, hi = min(lo, vlo), max(hi, vhi)
        _tag(b, "index:mask", "write:mask")
    elif kind in ("method_view", "index_method", "copy_", "out"):
        a = rng.randrange(y.rank)
        d = y.shape[a]
        if not isinstance(d, int):
            b.min_dims.append((d, 1))
        view, src = rng.choice([(f"{y.name}.narrow({a}, 0, 1)", f"{y.name}.narrow({a}, 0, 1) * 2"),
                                (f"{y.name}.select({a}, -1)", f"{y.name}.select({a}, 0) * 2"),
                                (f"{y.name}[{', '.join([':'] * a + [':1'])}]", f"{y.name}.narrow({a}, -1, 1) * 2")])
        if kind == "method_view":
            op = rng.choice(["mul_(-1.5)", "add_(0.5)", "fill_(0.25)", "zero_()", "clamp_(-0.5, 0.5)"] if fl else
                            ["add_(2)", "fill_(1)", "zero_()", "neg_()"])
            line = f"{view}.{op}"
            lo, hi = min(lo * 1.5, -abs(hi) * 1.5, -0.5), max(hi * 1.5, abs(lo) * 1.5, 0.5)
            if not fl:
                lo, hi = -abs(y.bound) - 2, abs(y.bound) + 2
        elif kind == "index_method":
            length = _length(b)
            code, unique = _index_tensor(b, y, a, length)
            meth = rng.choice(["index_fill_", "index_add_", "index_copy_"])
            if meth == "index_copy_" and not unique:
                meth = "index_add_"
            if meth == "index_fill_":
                s = 0.75 if fl else 2
                line = f"{y.name}.index_fill_({a}, {code}, {s})"
                lo, hi = min(lo, s), max(hi, s)
            else:
                scale = "* 0.5" if fl else "+ 1"
                line = f"{y.name}.{meth}({a}, {code}, {y.name}.index_select({a}, {code}) {scale})"
                lo, hi = -y.bound * 21 - 21, y.bound * 21 + 21
            _tag(b, f"index:{meth}")
        elif kind == "copy_":
            if fl:  # (a float value copied into an integer tensor truncates: 0.99999994 or 1.0 is a coin toss)
                src = rng.choice([src, f"torch.tanh({b.vals[0].name}.float().sum() * 0.1)"])
            else:
                src = src.replace(" * 2", " + 1")
            line = f"{view}.copy_({src})"
            lo, hi = min(lo * 2, -1), max(hi * 2, 1)
        else:
            if not fl:
                return False
            line = rng.choice([f"torch.mul({y.name}.narrow({a}, 0, 1), 2.0, out={y.name}.select({a}, -1).unsqueeze({a}))",
                               f"torch.tanh({y.name}, out={y.name})",
                               f"torch.add({y.name}, 0.5, out={y.name})"])
            if "out=" in line and ".unsqueeze" in line:
                line = f"torch.mul({y.name}.narrow({a}, 0, 1), 2.0, out={y.name}.narrow({a}, 0, 1))"
            lo, hi = min(lo * 2, lo - 0.5, -1), max(hi * 2, hi + 0.5, 1)
        _tag(b, f"write:{kind}")
    else:  # through a view: y.view(-1)[i], y.transpose(0, 1)[i], y.unsqueeze(0)[0, ..., i]
        if not y.contiguous:
            return False
        val, vlo, vhi = _scalar_value(b, y) if not literal else ("0.375", 0.375, 0.375)
        vkind = rng.choice(["flat", "transpose", "unsqueeze"] if y.rank >= 2 else ["flat", "unsqueeze"])
        if vkind == "flat":
            flat = Val(f"{y.name}.view(-1)", (_prod(y.shape),), y.dtype, y.lo, y.hi)
            flat.name = f"{y.name}.view(-1)"
            code, _ = _index_tensor(b, flat, 0, ("static", rng.choice([1, 2])))
            if "shape[0]" in code:
                code = code.replace(f"{y.name}.view(-1).shape[0]", f"{y.name}.numel()")
            line = f"{y.name}.view(-1)[{code}] = {val}"
        elif vkind == "transpose":
            tv = Val(y.name, (y.shape[1], y.shape[0]) + y.shape[2:], y.dtype, y.lo, y.hi)
            code, _ = _index_tensor(b, tv, 0, _length(b))
            code = code.replace(f"{y.name}.shape[0]", f"{y.name}.shape[1]")
            line = f"{y.name}.transpose(0, 1)[{code}] = {val}"
        else:
            code, _ = _index_tensor(b, y, y.rank - 1, _length(b))
            line = f"{y.name}.unsqueeze(0)[0, ..., {code}] = {val}"
        lo, hi = min(lo, vlo), max(hi, vhi)
        _tag(b, f"write:view_{vkind}")
    b.stmts.append(Stmt(lines + [line], "advwrite", (y.name,) if lines else ()))
    _tag(b, "advwrite", f"origin:{origin}")
    if lines:
        y.lo, y.hi = lo, hi
        b.vals.append(y)
    else:
        for u in b.vals:
            if u.group == y.group:
                u.lo, u.hi, u.minabs = min(u.lo, lo), max(u.hi, hi), 0.0
    b.mutated.add(y.group)
    b.want_outputs.append(y.name)
    return True


def g_empty_write(b: Builder) -> bool:
    """A write to an empty slice (``y[..., -1:-2] = 0.1``), often after another write: nothing changes."""
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and not v.expanded and v.group != "masked" and not b.is_ambiguous(v)
               and v.dtype in ("float32", "int64"))
    if v is None:
        return False
    name = b.fresh("y")
    a = rng.randrange(v.rank)
    empty = rng.choice(["-1:-2", "2:1", "3:3", "1:1", "-1:0"])
    region = ", ".join([":"] * a + [empty]) if rng.random() < 0.5 or a == 0 else "..., " + empty if a == v.rank - 1 else \
        ", ".join([":"] * a + [empty])
    s = 0.1 if is_float(v.dtype) else 1
    lines = [f"{name} = {v.name}.clone()"]
    if rng.random() < 0.6:
        lines.append(f"{name}[{', '.join([':'] * a + ['0'])}] = {s * 2}")
    w = rng.choice([f"{name}[{region}] = {s}", f"{name}[{region}].fill_({s})", f"{name}[{region}] += {s}",
                    f"{name}[{region}] = {name}[{region}] * 2"])
    lines.append(w)
    b.stmts.append(Stmt(lines, "empty_write", (name,)))
    _tag(b, "empty_write")
    b.vals.append(Val(name, v.shape, v.dtype, min(v.lo, 0), max(v.hi, 2 * s), 0.0, name))
    b.mutated.add(name)
    b.want_outputs.append(name)
    return True
