"""Statements on shapes and storage: reshape, permute, cat, split, indexing, setitem, in-place updates of views, matmul/conv/pool/norm."""
from __future__ import annotations

from typing import Optional

from .builder import Builder, Val, broadcast, is_float, is_int
from .ops_values import _scalar
from .program import Dim, Stmt, d_add, d_ceildiv, d_eval, d_floordiv, d_mul



def g_reshape(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    shape = list(v.shape)
    kind = rng.choice(["flatten_all", "merge", "split", "flatten", "unsqueeze_view"])
    meth = "view" if v.contiguous and rng.random() < 0.4 else "reshape"
    if kind == "flatten_all":
        if len(v.dyn_axes()) > 1:
            return False
        new = (_prod(shape),)
        expr = f"{v.name}.{meth}(-1)" if rng.random() < 0.6 else f"{v.name}.flatten()"
    elif kind in ("merge", "flatten"):
        if v.rank < 2:
            return False
        a = rng.randrange(v.rank - 1)
        if not isinstance(shape[a], int) and not isinstance(shape[a + 1], int):
            return False
        merged = _prod(shape[a:a + 2])
        new = tuple(shape[:a]) + (merged,) + tuple(shape[a + 2:])
        if kind == "flatten":
            expr = f"{v.name}.flatten({a}, {a + 1})"
        else:
            parts = [b.dim_code(v, i) for i in range(a)] + ["-1"] + [b.dim_code(v, i) for i in range(a + 2, v.rank)]
            if sum(1 for i, d in enumerate(new) if not isinstance(d, int)) > 1:
                pass
            expr = f"{v.name}.{meth}({', '.join(parts)})"
    elif kind == "split":
        cands = [i for i in v.static_axes() if shape[i] in (4, 6, 8, 9)]
        if not cands:
            return False
        a = rng.choice(cands)
        f = 2 if shape[a] % 2 == 0 else 3
        new = tuple(shape[:a]) + (f, shape[a] // f) + tuple(shape[a + 1:])
        parts = [str(d) if isinstance(d, int) else None for d in new]
        dyn = [i for i, p in enumerate(parts) if p is None]
        if len(dyn) > 1:
            return False
        for i in dyn:
            parts[i] = "-1"
        expr = f"{v.name}.{meth}({', '.join(parts)})"
    else:
        a = rng.randint(0, v.rank)
        new = tuple(shape[:a]) + (1,) + tuple(shape[a:])
        parts = [b.dim_code(v, i) for i in range(v.rank)]
        parts.insert(a, "1")
        expr = f"{v.name}.{meth}({', '.join(parts)})"
    if v.contiguous:
        group = v.group
    else:
        # a reshape of a strided tensor copies, but aliases at the sizes where it happens to
        # be contiguous: no in-place update may touch either side afterwards
        b.ambiguous.add(v.group)
        group = "amb:" + v.group
    b.emit(expr, new, v.dtype, v.lo, v.hi, "reshape", minabs=v.minabs, group=group, contiguous=True)
    return True


def _prod(dims) -> Dim:
    out: Dim = 1
    dyn = None
    for d in dims:
        if isinstance(d, int):
            out *= d
        else:
            dyn = d if dyn is None else f"({dyn} * {d})"
    return out if dyn is None else d_mul(dyn, out)


def g_permute(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 2)
    if v is None:
        return False
    kind = rng.choice(["permute", "transpose", "t", "movedim", "mT"])
    if kind == "permute":
        perm = list(range(v.rank))
        rng.shuffle(perm)
        expr = f"{v.name}.permute({', '.join(map(str, perm))})"
    elif kind == "t" and v.rank == 2:
        perm = [1, 0]
        expr = f"{v.name}.t()"
    elif kind == "movedim":
        a, c = rng.randrange(v.rank), rng.randrange(v.rank)
        perm = list(range(v.rank))
        perm.insert(c, perm.pop(a))
        expr = f"{v.name}.movedim({a}, {c})"
    else:
        a, c = rng.sample(range(v.rank), 2) if kind != "mT" else (v.rank - 2, v.rank - 1)
        perm = list(range(v.rank))
        perm[a], perm[c] = perm[c], perm[a]
        expr = f"{v.name}.transpose({a}, {c})" if kind != "mT" else f"{v.name}.mT"
    b.emit(expr, tuple(v.shape[p] for p in perm), v.dtype, v.lo, v.hi, "permute", minabs=v.minabs, group=v.group,
           contiguous=perm == sorted(perm), expanded=v.expanded)
    return True


def g_unsqueeze(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank <= 4)
    if v is None:
        return False
    ones = [i for i, d in enumerate(v.shape) if d == 1]
    if ones and rng.random() < 0.5:
        a = rng.choice(ones)
        shape = v.shape[:a] + v.shape[a + 1:]
        expr = f"{v.name}.squeeze({a})" if rng.random() < 0.7 else f"torch.squeeze({v.name}, {a - v.rank})"
    elif rng.random() < 0.2:
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (1,) + v.shape[a:]
        idx = ", ".join([":"] * a + ["None"])
        expr = f"{v.name}[{idx}]"
    else:
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (1,) + v.shape[a:]
        expr = f"{v.name}.unsqueeze({a})" if rng.random() < 0.7 else f"{v.name}.unsqueeze({a - v.rank - 1})"
    b.emit(expr, shape, v.dtype, v.lo, v.hi, "unsqueeze", minabs=v.minabs, group=v.group, contiguous=v.contiguous,
           expanded=v.expanded)
    return True


def g_expand_repeat(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and b.numel_at_example(v.shape) <= 200)
    if v is None:
        return False
    kind = rng.choice(["expand", "repeat", "expand_dyn", "tile", "repeat_interleave"])
    if kind in ("expand", "expand_dyn"):
        ones = [i for i, d in enumerate(v.shape) if d == 1]
        if not ones:
            shape = (rng.randint(2, 3),) + v.shape
            expr = f"{v.name}.expand({shape[0]}, {', '.join(['-1'] * v.rank)})"
        else:
            a = rng.choice(ones)
            src = b.pick(lambda u: u.rank > 0 and any(not isinstance(d, int) for d in u.shape)) if kind == "expand_dyn" else None
            shape = list(v.shape)
            parts = ["-1"] * v.rank
            if src is not None:
                j = rng.choice(src.dyn_axes())
                shape[a] = src.shape[j]
                parts[a] = f"{src.name}.shape[{j}]"
            else:
                shape[a] = rng.randint(2, 4)
                parts[a] = str(shape[a])
            expr = f"{v.name}.expand({', '.join(parts)})"
        b.emit(expr, shape, v.dtype, v.lo, v.hi, "expand", group=v.group, contiguous=False, expanded=True)
        return True
    if kind == "repeat_interleave":
        a, spelled = b.rdim(v.rank)
        r = rng.randint(2, 3)
        shape = list(v.shape)
        shape[a] = d_mul(shape[a], r)
        b.emit(f"{v.name}.repeat_interleave({r}, dim={spelled})", shape, v.dtype, v.lo, v.hi, "repeat")
        return True
    reps = [rng.choice([1, 1, 2, 3]) for _ in range(v.rank)]
    extra = rng.random() < 0.3
    shape = [d_mul(d, r) for d, r in zip(v.shape, reps)]
    if extra:
        reps = [2] + reps
        shape = [2] + shape
    fn = f"{v.name}.repeat({', '.join(map(str, reps))})" if kind == "repeat" else \
        f"torch.tile({v.name}, ({', '.join(map(str, reps))},))"
    b.emit(fn, shape, v.dtype, v.lo, v.hi, "repeat")
    return True


def g_cat_stack(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and b.numel_at_example(v.shape) <= 300)
    if v is None:
        return False
    kind = rng.choice(["cat", "cat", "stack", "cat_slice"])
    a, spelled = b.rdim(v.rank)
    others = [u for u in b.vals if u is not v and u.dtype == v.dtype and u.rank == v.rank
              and all(x == y for i, (x, y) in enumerate(zip(u.shape, v.shape)) if i != a or kind == "stack")]
    parts = [v]
    if others and rng.random() < 0.6:
        parts.append(rng.choice(others))
    else:
        parts.append(v)
    if rng.random() < 0.3:
        parts.append(rng.choice(parts))
    if kind == "cat_slice":
        n = v.shape[a]
        if isinstance(n, int) and n < 2:
            return False
        expr = f"torch.cat([{v.name}, {v.name}.narrow({spelled}, 0, 1)], dim={spelled})"
        shape = list(v.shape)
        shape[a] = d_add(n, 1)
        b.emit(expr, shape, v.dtype, v.lo, v.hi, "cat")
        return True
    names = ", ".join(p.name for p in parts)
    lo, hi = min(p.lo for p in parts), max(p.hi for p in parts)
    if kind == "stack":
        a = rng.randint(0, v.rank)
        shape = v.shape[:a] + (len(parts),) + v.shape[a:]
        b.emit(f"torch.stack([{names}], {a})" if rng.random() < 0.5 else f"torch.stack(({names}), dim={a})",
               shape, v.dtype, lo, hi, "stack")
        return True
    shape = list(v.shape)
    total: Dim = 0
    for p in parts:
        total = d_add(total, p.shape[a])
    shape[a] = total
    b.emit(f"torch.cat([{names}], {spelled})" if rng.random() < 0.6 else f"torch.cat(({names}), dim={spelled})",
           shape, v.dtype, lo, hi, "cat")
    return True


def g_split(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    a, spelled = b.rdim(v.rank)
    n = v.shape[a]
    kind = rng.choice(["split", "chunk", "unbind", "split_sizes", "split_dyn"])
    shape = list(v.shape)
    if kind == "unbind":
        if not isinstance(n, int) or n > 4:
            return False
        k = rng.randrange(n)
        del shape[a]
        b.emit(f"{v.name}.unbind({spelled})[{k}]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    if kind == "chunk":
        c = rng.choice([2, 3])
        if not isinstance(n, int):
            shape[a] = d_ceildiv(n, c)
            b.emit(f"{v.name}.chunk({c}, {spelled})[0]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
                   contiguous=False, expanded=v.expanded)
            return True
        if n < c or n % c:
            return False
        shape[a] = n // c
        k = rng.randrange(c)
        b.emit(f"torch.chunk({v.name}, {c}, dim={spelled})[{k}]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    if kind == "split_sizes" or kind == "split_dyn":
        if isinstance(n, int):
            if n < 2:
                return False
            first = rng.randint(1, n - 1)
            sizes = f"[{first}, {n - first}]"
            rest = n - first
        else:
            first = rng.randint(1, 2)
            sizes = f"[{first}, {v.name}.shape[{a}] - {first}]"
            rest = d_add(n, -first)
        k = rng.randrange(2)
        shape[a] = first if k == 0 else rest
        name = b.fresh("p")
        lines = [f"{name}_a, {name}_b = {v.name}.split({sizes}, dim={spelled})"]
        val = Val(f"{name}_{'ab'[k]}", tuple(shape), v.dtype, v.lo, v.hi, v.minabs, v.group, False, v.expanded)
        b.stmts.append(Stmt(lines, "split", (val.name,)))
        b.families.add("split")
        b.vals.append(val)
        return True
    c = rng.choice([1, 2, 3])
    shape[a] = c if isinstance(n, int) and n >= c or not isinstance(n, int) else n
    if isinstance(n, int) and n < c:
        return False
    b.emit(f"{v.name}.split({c}, {spelled})[0]", shape, v.dtype, v.lo, v.hi, "split", group=v.group,
           contiguous=False, expanded=v.expanded)
    if not isinstance(n, int):
        b.min_dims.append((n, c))
    return True


def g_flip_roll(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    a, spelled = b.rdim(v.rank)
    kind = rng.choice(["flip", "flip2", "roll", "roll_flat", "narrow", "fliplr"])
    if kind == "flip":
        b.emit(f"{v.name}.flip({spelled})" if rng.random() < 0.5 else f"torch.flip({v.name}, [{spelled}])",
               v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    elif kind == "flip2" and v.rank >= 2:
        b.emit(f"{v.name}.flip(0, {v.rank - 1})", v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    elif kind == "roll":
        s = rng.choice([1, 2, -1, 3])
        b.emit(f"torch.roll({v.name}, {s}, {spelled})" if rng.random() < 0.5 else f"{v.name}.roll({s}, dims={spelled})",
               v.shape, v.dtype, v.lo, v.hi, "roll", minabs=v.minabs)
    elif kind == "roll_flat":
        b.emit(f"{v.name}.roll(1)", v.shape, v.dtype, v.lo, v.hi, "roll", minabs=v.minabs)
    elif kind == "narrow":
        n = v.shape[a]
        start = rng.randint(0, 2)
        length = 1 if isinstance(n, int) and n <= start + 1 else rng.randint(1, 2)
        if isinstance(n, int) and n < start + length:
            return False
        shape = list(v.shape)
        shape[a] = length
        b.emit(f"{v.name}.narrow({spelled}, {start}, {length})", shape, v.dtype, v.lo, v.hi, "narrow",
               minabs=v.minabs, group=v.group, contiguous=False, expanded=v.expanded)
        if not isinstance(n, int):
            b.min_dims.append((n, start + length))
    else:
        if v.rank < 2:
            return False
        b.emit(f"torch.fliplr({v.name})" if rng.random() < 0.5 else f"torch.flipud({v.name})",
               v.shape, v.dtype, v.lo, v.hi, "flip", minabs=v.minabs)
    return True


# ---- indexing

def _index(b: Builder, v: Val) -> Optional[tuple]:
    """A random basic index of ``v``: (text, result shape, needed minimum sizes)."""
    rng = b.rng
    parts, shape, needs = [], [], []
    used_ellipsis = False
    axes = list(range(v.rank))
    k = 0
    while k < len(axes):
        d = v.shape[k]
        r = rng.random()
        if not used_ellipsis and r < 0.08 and k < v.rank - 1:
            rest = rng.randint(1, v.rank - k - 1)
            parts.append("...")
            shape += list(v.shape[k:k + rest])
            k += rest
            used_ellipsis = True
            continue
        if r < 0.35:
            parts.append(":")
            shape.append(d)
        elif r < 0.5:
            i = rng.choice([0, 1, -1])
            parts.append(str(i))
            needs.append((d, 2 if i == 1 else 1))
            if isinstance(d, int) and d < 2 and i == 1:
                return None
        elif r < 0.65:
            s = rng.randint(1, 2)
            parts.append(f"{s}:")
            if isinstance(d, int) and d <= s:
                return None
            needs.append((d, s + 1))
            shape.append(d_add(d, -s))
        elif r < 0.75:
            e = rng.randint(1, 3)
            if isinstance(d, int):
                parts.append(f":{e}")
                shape.append(min(d, e))
            else:
                parts.append(f":{e}")
                needs.append((d, e))
                shape.append(e)
        elif r < 0.85:
            st = rng.randint(2, 3)
            parts.append(f"::{st}")
            shape.append(d_ceildiv(d, st))
        elif r < 0.92:
            s = rng.randint(1, 2)
            parts.append(f":-{s}")
            if isinstance(d, int) and d <= s:
                return None
            needs.append((d, s + 1))
            shape.append(d_add(d, -s))
        else:
            s = rng.randint(1, 2)
            parts.append(f"-{s}:")
            if isinstance(d, int) and d < s:
                return None
            needs.append((d, s))
            shape.append(s)
        if rng.random() < 0.08:
            parts.append("None")
            shape.append(1)
        k += 1
    # (after an ellipsis the trailing ":" must stay: without them the ellipsis would cover other axes)
    while parts and parts[-1] == ":" and not used_ellipsis and rng.random() < 0.7:
        parts.pop()
    if not parts:
        parts = ["..."]
    return ", ".join(parts), tuple(shape), needs


def g_getitem(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    kind = rng.choices(["basic", "tensor_idx", "index_select", "gather", "mask", "list_idx"], [6, 2, 1, 1, 1, 1])[0]
    if kind == "basic":
        got = _index(b, v)
        if got is None:
            return False
        idx, shape, needs = got
        b.min_dims += needs
        b.emit(f"{v.name}[{idx}]", shape, v.dtype, v.lo, v.hi, "getitem", minabs=v.minabs, group=v.group,
               contiguous=False, expanded=v.expanded)
        return True
    a, spelled = b.rdim(v.rank)
    n = v.shape[a]
    if kind == "list_idx":
        if not isinstance(n, int):
            idx = [0, rng.choice([0, 1])]
            b.min_dims.append((n, 2))
        else:
            idx = [rng.randrange(n) for _ in range(rng.randint(1, 3))]
        shape = list(v.shape)
        shape[a] = len(idx)
        pre = ", ".join([":"] * a + [repr(idx)])
        b.emit(f"{v.name}[{pre}]", shape, v.dtype, v.lo, v.hi, "index")
        return True
    if kind == "mask":
        m = b.pick(lambda m: m.dtype == "bool" and m.shape == v.shape)
        if m is None:
            m = b.emit(f"{v.name} > {0 if v.dtype != 'float32' else 0.2}", v.shape, "bool", 0, 1, "compare")
        if v.dtype == "bool":
            return False
        red = rng.choice(["sum", "amax", "none"])
        if red == "none":
            b.emit(f"{v.name}[{m.name}]", (1,), v.dtype, v.lo, v.hi, "mask_index")
            b.want_outputs.append(b.vals.pop().name)  # data-dependent length: only as an output
            return True
        if red == "amax":
            b.emit(f"torch.where({m.name}, {v.name}, {v.lo}).amax()", (), v.dtype, v.lo, v.hi, "mask_index")
            return True
        b.emit(f"{v.name}[{m.name}].sum()", (), "float32" if is_float(v.dtype) else "int64", -1e4, 1e4, "mask_index")
        return True
    # index tensors from data, made valid at every size with % n
    src = b.pick(lambda u: is_int(u.dtype) and u.rank == 1 and b.numel_at_example(u.shape) <= 12)
    if src is None:
        length = rng.randint(1, 4)
        idx_expr, ishape = b.param((length,), "int64", 0, 20, "int"), (length,)
    else:
        idx_expr, ishape = src.name, src.shape
    nd = b.dim_code(v, a)
    idx = f"({idx_expr}.long().abs() % {nd})"
    if kind == "index_select":
        shape = list(v.shape)
        shape[a] = ishape[0]
        b.emit(f"{v.name}.index_select({spelled}, {idx})", shape, v.dtype, v.lo, v.hi, "index")
        return True
    if kind == "gather":
        if v.rank != 1:
            return False
        b.emit(f"torch.gather({v.name}, 0, {idx})", ishape, v.dtype, v.lo, v.hi, "index")
        return True
    shape = list(v.shape)
    shape[a:a + 1] = list(ishape)
    pre = ", ".join([":"] * a + [idx])
    b.emit(f"{v.name}[{pre}]", shape, v.dtype, v.lo, v.hi, "index")
    return True


def g_setitem(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: v.rank >= 1 and not v.expanded and v.group != "masked" and not b.is_ambiguous(v))
    if v is None:
        return False
    kind = rng.choices(["basic", "mask", "tensor_idx", "value_tensor", "clone_first"], [4, 2, 1, 2, 1])[0]
    if kind == "clone_first":
        v = b.emit(f"{v.name}.clone()", v.shape, v.dtype, v.lo, v.hi, "clone", minabs=v.minabs)
        kind = "basic"
    if kind == "mask":
        m = b.pick(lambda m: m.dtype == "bool" and broadcast(v.shape, m.shape) == v.shape and m.rank == v.rank)
        mexpr = m.name if m is not None else f"{v.name} > {0 if v.dtype != 'float32' else 0.5}"
        s = _scalar(b, v.dtype)
        if v.dtype == "bool":
            s = rng.choice([True, False])
        elif not is_float(v.dtype):
            s = abs(int(s))
        line = f"{v.name}[{mexpr}] = {s}"
        if rng.random() < 0.3:
            line = f"{v.name}.masked_fill_({mexpr}, {s})"
        _mutate(b, v, line, (0, 1) if v.dtype == "bool" else (min(v.lo, s), max(v.hi, s)), "setitem")
        return True
    if kind == "tensor_idx":
        a = 0
        n = v.shape[0]
        idx = f"torch.tensor([0, {rng.choice([0, -1])}])"
        s = _scalar(b, v.dtype) if v.dtype != "bool" else True
        if not is_float(v.dtype) and v.dtype != "bool":
            s = abs(int(s))
        _mutate(b, v, f"{v.name}[{idx}] = {s}", (min(v.lo, s), max(v.hi, s)), "setitem")
        return True
    got = _index(b, v)
    if got is None:
        return False
    idx, shape, needs = got
    if "None" in idx:
        return False
    b.min_dims += needs
    if kind == "value_tensor" and v.dtype != "bool":
        u = b.pick(lambda u: u.dtype == v.dtype and broadcast(shape, u.shape) == shape and u.group != v.group)
        if u is not None:
            _mutate(b, v, f"{v.name}[{idx}] = {u.name}", (min(v.lo, u.lo), max(v.hi, u.hi)), "setitem")
            return True
        val = f"{v.name}[{idx}] * 2" if v.dtype != "uint8" else f"{v.name}[{idx}] + 1"
        _mutate(b, v, f"{v.name}[{idx}] = {val}", (min(v.lo * 2, v.lo), max(v.hi * 2 + 1, v.hi)), "setitem")
        return True
    s = _scalar(b, v.dtype) if v.dtype != "bool" else rng.choice([True, False])
    if not is_float(v.dtype) and v.dtype != "bool":
        s = abs(int(s))
    _mutate(b, v, f"{v.name}[{idx}] = {s}", (min(v.lo, s), max(v.hi, s)), "setitem")
    return True


def _mutate(b: Builder, v: Val, line: str, rng_new: tuple, family: str) -> None:
    b.stmts.append(Stmt([line], family))
    b.families.add(family)
    b.mutated.add(v.group)
    for u in b.vals:
        if u.group == v.group:
            u.lo, u.hi = min(u.lo, rng_new[0]), max(u.hi, rng_new[1])
            u.minabs = 0.0


def g_inplace_view(b: Builder) -> bool:
    rng = b.rng
    base = b.pick(lambda v: v.rank >= 1 and not v.expanded and v.dtype in ("float32", "int64") and v.group != "masked"
                  and not b.is_ambiguous(v))
    if base is None:
        return False
    view_kind = rng.choice(["view", "reshape", "slice", "t", "unsqueeze", "narrow", "select", "none", "flatten"])
    vexpr, vshape, contig = None, base.shape, True
    if view_kind == "view" and base.contiguous:
        vexpr, vshape = f"{base.name}.view(-1)", (_prod(base.shape),)
        if len(base.dyn_axes()) > 1:
            vexpr = None
    elif view_kind == "reshape" and base.contiguous and len(base.dyn_axes()) <= 1:
        vexpr, vshape = f"{base.name}.reshape(-1)", (_prod(base.shape),)
    elif view_kind == "flatten" and base.contiguous and len(base.dyn_axes()) <= 1:
        vexpr, vshape = f"{base.name}.flatten()", (_prod(base.shape),)
    elif view_kind == "slice":
        got = _index(b, base)
        if got is not None and "None" not in got[0] and got[1]:
            vexpr, vshape = f"{base.name}[{got[0]}]", got[1]
            b.min_dims += got[2]
            contig = False
    elif view_kind == "t" and base.rank >= 2:
        vexpr, vshape = f"{base.name}.transpose(0, 1)", (base.shape[1], base.shape[0]) + base.shape[2:]
        contig = False
    elif view_kind == "unsqueeze":
        vexpr, vshape = f"{base.name}.unsqueeze(0)", (1,) + base.shape
    elif view_kind == "narrow":
        n = base.shape[-1]
        if not isinstance(n, int) or n >= 2:
            vexpr = f"{base.name}.narrow(-1, 0, 1)"
            vshape = base.shape[:-1] + (1,)
            if not isinstance(n, int):
                b.min_dims.append((n, 1))
            contig = False
    elif view_kind == "select":
        vexpr, vshape = f"{base.name}[0]", base.shape[1:]
        contig = False
        if not vshape:
            vexpr = None
    if vexpr is None:
        view = base
    else:
        view = b.emit(vexpr, vshape, base.dtype, base.lo, base.hi, "view", group=base.group, contiguous=contig)
    target = rng.choice([view, view, base])
    fl = is_float(target.dtype)
    op = rng.choice(["add_", "mul_", "relu_", "clamp_", "zero_", "fill_", "sub_", "copy_", "neg_", "abs_",
                     "div_", "exp_", "sigmoid_"] if fl else ["add_", "mul_", "clamp_", "zero_", "fill_", "sub_", "neg_"])
    s = _scalar(b, target.dtype)
    if not fl:
        s = int(s)
    lo, hi = target.lo, target.hi
    if op in ("add_", "sub_"):
        u = b.pick(lambda u: u.dtype == target.dtype and broadcast(target.shape, u.shape) == target.shape
                   and u.group != target.group) if rng.random() < 0.4 else None
        arg = u.name if u is not None else repr(s)
        w = u.bound if u is not None else abs(s)
        line, lo, hi = f"{target.name}.{op}({arg})", lo - w, hi + w
    elif op == "mul_":
        line, lo, hi = f"{target.name}.mul_({s})", -target.bound * abs(s), target.bound * abs(s)
    elif op == "div_":
        line, lo, hi = f"{target.name}.div_({s})", -target.bound, target.bound
    elif op == "relu_":
        line, lo = rng.choice([f"{target.name}.relu_()", f"torch.relu_({target.name})", f"F.relu({target.name}, inplace=True)"]), 0
    elif op == "clamp_":
        c = 0 if not fl else 0.5
        line, lo, hi = f"{target.name}.clamp_(-{c or 1}, {c or 1})", -1, 1
    elif op in ("zero_", "fill_"):
        line = f"{target.name}.zero_()" if op == "zero_" else f"{target.name}.fill_({s})"
        lo, hi = min(lo, 0, s), max(hi, 0, s)
    elif op == "copy_":
        u = b.pick(lambda u: u.dtype == target.dtype and broadcast(target.shape, u.shape) == target.shape
                   and u.group != target.group)
        if u is None:
            return True
        line, lo, hi = f"{target.name}.copy_({u.name})", min(lo, u.lo), max(hi, u.hi)
    elif op == "neg_":
        line, lo, hi = f"{target.name}.neg_()", -hi, -lo
    elif op == "abs_":
        line, lo = f"{target.name}.abs_()", 0
    elif op == "exp_":
        if target.bound > 3:
            return True
        line, lo, hi = f"{target.name}.exp_()", 0, 21
    else:
        line, lo, hi = f"{target.name}.sigmoid_()", 0, 1
    _mutate(b, target, line, (lo, hi), "inplace")
    b.want_outputs += [base.name, view.name]
    return True


def g_linear(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 1 and isinstance(v.shape[-1], int) and v.shape[-1] <= 12)
    kind = rng.choice(["linear", "matmul_w", "self_matmul", "module", "einsum", "bmm", "mv"])
    if kind == "self_matmul":
        v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 2)
        if v is None:
            return False
        v = b.tame(v)
        shape = v.shape[:-1] + (v.shape[-2],)
        b.emit(f"{v.name} @ {v.name}.transpose(-1, -2)" if rng.random() < 0.5 else f"torch.matmul({v.name}.mT, {v.name})",
               shape, "float32", -400, 400, "matmul")
        if "mT, " in b.stmts[-1].lines[0]:
            b.vals[-1].shape = v.shape[:-2] + (v.shape[-1], v.shape[-1])
        return True
    if kind == "einsum":
        v = b.pick(lambda v: is_float(v.dtype) and v.rank == 2)
        if v is None:
            return False
        eq, shape = rng.choice([("ij->", ()), ("ij->j", (v.shape[1],)), ("ij->ji", (v.shape[1], v.shape[0])),
                                ("ij,ij->i", (v.shape[0],)), ("ii->i", None)])
        if shape is None:
            return False
        ops = v.name if "," not in eq else f"{v.name}, {v.name}"
        b.emit(f"torch.einsum('{eq}', {ops})", shape, "float32", -400, 400, "einsum")
        return True
    if v is None:
        return False
    v = b.tame(v)
    k = v.shape[-1]
    n = rng.randint(1, 6)
    if kind == "module":
        b.params += 1
        name = f"lin{b.params}"
        bias = rng.choice([True, False])
        b.init_lines.append(f"self.{name} = torch.nn.Linear({k}, {n}, bias={bias})")
        b.emit(f"self.{name}({v.name})", v.shape[:-1] + (n,), "float32", -12, 12, "linear")
        return True
    if kind == "linear":
        w = b.param((n, k))
        bias = b.param((n,)) if rng.random() < 0.5 else None
        b.emit(f"F.linear({v.name}, {w}{', ' + bias if bias else ''})", v.shape[:-1] + (n,), "float32", -12, 12, "linear")
        return True
    if kind == "bmm" and v.rank == 3:
        w = b.param((v.shape[0] if isinstance(v.shape[0], int) else 1, k, n))
        if not isinstance(v.shape[0], int):
            w = f"{w}.expand({v.name}.shape[0], -1, -1)"
        b.emit(f"torch.bmm({v.name}, {w})", v.shape[:-1] + (n,), "float32", -12, 12, "matmul")
        return True
    if kind == "mv" and v.rank == 2:
        w = b.param((k,))
        b.emit(f"torch.mv({v.name}, {w})", v.shape[:-1], "float32", -12, 12, "matmul")
        return True
    w = b.param((k, n))
    b.emit(f"{v.name} @ {w}" if rng.random() < 0.5 else f"torch.matmul({v.name}, {w})", v.shape[:-1] + (n,),
           "float32", -12, 12, "matmul")
    return True


def _conv_len(L: Dim, k: int, s: int, p: int, dil: int = 1) -> Dim:
    span = dil * (k - 1) + 1
    if isinstance(L, int):
        return (L + 2 * p - span) // s + 1
    inner = d_add(L, 2 * p - span)
    return d_add(d_floordiv(inner, s), 1)


def feature_map(b: Builder):
    """A float [N, C, L] or [N, C, H, W] value with at most 8 (static) channels, tamed, or None."""
    v = b.pick(lambda v: is_float(v.dtype) and v.rank in (3, 4) and isinstance(v.shape[1], int) and v.shape[1] <= 8)
    return None if v is None else b.tame(v)


def g_conv_pool(b: Builder) -> bool:
    rng = b.rng
    v = feature_map(b)
    if v is None:
        return False
    two = v.rank == 4
    kind = rng.choice(["conv", "conv", "maxpool", "avgpool", "adaptive", "upsample", "batchnorm", "groupnorm"])
    C = v.shape[1]
    sp = list(v.shape[2:])
    if kind == "conv":
        k = rng.choice([1, 2, 3])
        s = rng.choice([1, 1, 2])
        p = rng.choice([0, 1]) if k > 1 else 0
        dil = rng.choice([1, 1, 2])
        groups = C if C > 1 and rng.random() < 0.2 else 1
        cout = groups * rng.randint(1, 3)
        b.params += 1
        name = f"conv{b.params}"
        cls = "Conv2d" if two else "Conv1d"
        b.init_lines.append(f"self.{name} = torch.nn.{cls}({C}, {cout}, {k}, stride={s}, padding={p}, "
                            f"dilation={dil}, groups={groups})")
        out = [_conv_len(d, k, s, p, dil) for d in sp]
        b.emit(f"self.{name}({v.name})", (v.shape[0], cout, *out), "float32", -12, 12, "conv")
        return True
    if kind in ("maxpool", "avgpool"):
        k = rng.choice([2, 3])
        s = rng.choice([1, 2, k])
        p = rng.choice([0, 1]) if k == 3 else 0
        fn = f"F.{'max' if kind == 'maxpool' else 'avg'}_pool{'2' if two else '1'}d"
        out = [_conv_len(d, k, s, p) for d in sp]
        b.emit(f"{fn}({v.name}, {k}, stride={s}, padding={p})", (v.shape[0], C, *out), "float32", v.lo, v.hi, "pool")
        return True
    if kind == "adaptive":
        n = rng.choice([1, 1, 2])
        fn = f"F.adaptive_{rng.choice(['avg', 'max'])}_pool{'2' if two else '1'}d"
        b.emit(f"{fn}({v.name}, {n})", (v.shape[0], C) + (n,) * len(sp), "float32", v.lo, v.hi, "pool")
        return True
    if kind == "upsample":
        mode = rng.choice(["nearest", "nearest"] + (["bilinear"] if two else ["linear"]))
        extra = ", align_corners=False" if mode != "nearest" else ""
        b.emit(f"F.interpolate({v.name}, scale_factor=2, mode='{mode}'{extra})",
               (v.shape[0], C) + tuple(d_mul(d, 2) for d in sp), "float32", v.lo, v.hi, "upsample")
        return True
    b.params += 1
    name = f"norm{b.params}"
    if kind == "batchnorm":
        b.init_lines.append(f"self.{name} = torch.nn.BatchNorm{'2' if two else '1'}d({C})")
        b.init_lines.append(f"self.{name}.running_var.fill_(1.5)")
    else:
        gr = 1 if C % 2 else 2
        b.init_lines.append(f"self.{name} = torch.nn.GroupNorm({gr}, {C}, eps={_NORM_EPS})")
    b.emit(f"self.{name}({v.name})", v.shape, "float32", -12, 12, "norm")
    return True


# Normalizations use a large eps. Not a bug: normalizing nearly equal values (a tanh saturated at
# 4.0, a cumsum) divides rounding errors by sqrt(var + eps); at eps=1e-5 one ulp of 4.0 becomes
# about 1e-4 and torch and tract, which round differently, differ by more than "approximate".
_NORM_EPS = 0.1


def g_softmax_norm(b: Builder) -> bool:
    rng = b.rng
    v = b.pick(lambda v: is_float(v.dtype) and v.rank >= 1)
    if v is None:
        return False
    v = b.tame(v, 8)
    kind = rng.choice(["softmax", "log_softmax", "layer_norm", "normalize", "softmax_m", "rms"])
    a, spelled = b.rdim(v.rank)
    if kind in ("softmax", "softmax_m"):
        expr = f"F.softmax({v.name}, dim={spelled})" if kind == "softmax" else f"{v.name}.softmax({spelled})"
        b.emit(expr, v.shape, "float32", 0, 1, "softmax")
        return True
    if kind == "log_softmax":
        b.emit(f"F.log_softmax({v.name}, {spelled})", v.shape, "float32", -20, 0, "softmax")
        return True
    if kind == "normalize":
        b.emit(f"F.normalize({v.name}, dim={spelled})", v.shape, "float32", -1, 1, "norm")
        return True
    last = v.shape[-1]
    if not isinstance(last, int) or last < 2:
        return False
    if kind == "rms":
        b.emit(f"{v.name} * torch.rsqrt({v.name}.pow(2).mean(-1, keepdim=True) + {_NORM_EPS})", v.shape, "float32", -8, 8, "norm")
        return True
    if rng.random() < 0.5:
        b.params += 1
        name = f"ln{b.params}"
        b.init_lines.append(f"self.{name} = torch.nn.LayerNorm({last}, eps={_NORM_EPS})")
        b.emit(f"self.{name}({v.name})", v.shape, "float32", -12, 12, "norm")
    else:
        b.emit(f"F.layer_norm({v.name}, ({last},), eps={_NORM_EPS})", v.shape, "float32", -8, 8, "norm")
    return True


def _square(b: Builder) -> Optional[Val]:
    """A value whose last two axes are equal (preferably dynamic): a live one, or an outer product."""
    sq = b.pick(lambda u: u.rank >= 2 and u.shape[-1] == u.shape[-2] and u.dtype != "bool" and u.group != "masked")
    if sq is not None and b.rng.random() < 0.7:
        return sq
    v = b.pick(lambda u: u.rank in (1, 2) and u.dtype in ("float32", "int64") and not isinstance(u.shape[-1], int)
               and b.numel_at_example(u.shape) <= 40)
    if v is None:
        return sq
    v = b.tame(v, 4 if is_float(v.dtype) else 5)
    return b.emit(f"{v.name}[..., :, None] * {v.name}[..., None, :]", v.shape + (v.shape[-1],), v.dtype,
                  -v.bound ** 2, v.bound ** 2, "arith")


def g_diag(b: Builder) -> bool:
    """diagonal / diag / diag_embed on square (dynamic) sizes."""
    rng = b.rng
    kind = rng.choice(["diagonal", "diagonal", "diag_embed", "diag"])
    if kind == "diag_embed":
        v = b.pick(lambda u: u.rank in (1, 2) and u.dtype != "bool" and b.numel_at_example(u.shape) <= 40)
        if v is None:
            return False
        o = rng.choice([0, 0, 1, -1, 2])
        n = d_add(v.shape[-1], abs(o))
        expr = f"torch.diag_embed({v.name}{f', offset={o}' if o else ''})"
        if v.rank == 1 and rng.random() < 0.5:
            expr = f"torch.diag({v.name}{f', {o}' if o else ''})"
        b.emit(expr, v.shape[:-1] + (n, n), v.dtype, min(v.lo, 0), max(v.hi, 0), "diag")
        return True
    rect = b.pick(lambda u: u.rank == 2 and u.dtype != "bool" and len(u.dyn_axes()) == 1 and u.group != "masked")
    if rect is not None and rng.random() < 0.2:
        # min(S, c) items: the export is bounded on one side of c, or refused
        n = f"min({rect.shape[0]}, {rect.shape[1]})"
        b.emit(f"{rect.name}.diagonal()", (n,), rect.dtype, rect.lo, rect.hi, "diag", group=rect.group, contiguous=False)
        return True
    sq = _square(b)
    if sq is None:
        return False
    n = sq.shape[-1]
    o = rng.choice([0, 0, 1, -1])
    if isinstance(n, int) and n <= abs(o):
        return False
    if not isinstance(n, int) and o:
        b.min_dims.append((n, abs(o) + 1))
    if kind == "diag" and sq.rank == 2:
        expr = f"torch.diag({sq.name}{f', {o}' if o else ''})"
        b.emit(expr, (d_add(n, -abs(o)),), sq.dtype, sq.lo, sq.hi, "diag")
        return True
    shape = sq.shape[:-2] + (d_add(n, -abs(o)),)
    if sq.rank == 2 and rng.random() < 0.4:
        expr = f"{sq.name}.diagonal({o})" if o else f"{sq.name}.diagonal()"
    else:
        expr = f"torch.diagonal({sq.name}, offset={o}, dim1=-2, dim2=-1)"
    b.emit(expr, shape, sq.dtype, sq.lo, sq.hi, "diag", group=sq.group, contiguous=False, expanded=sq.expanded)
    return True


def g_scatter2(b: Builder) -> bool:
    """masked_scatter, index_copy (distinct indices) and cross products."""
    rng = b.rng
    kind = rng.choice(["masked_scatter", "index_copy", "index_copy_perm", "cross"])
    if kind == "cross":
        v = b.pick(lambda u: is_float(u.dtype) and u.rank >= 1 and b.numel_at_example(u.shape) <= 200)
        if v is None:
            return False
        threes = [i for i, d in enumerate(v.shape) if d == 3]
        if threes and rng.random() < 0.7:
            a = rng.choice(threes)
            other = b.pick(lambda u: u is not v and u.dtype == v.dtype and u.shape == v.shape)
            w = other.name if other is not None and rng.random() < 0.6 else \
                b.param(tuple(3 if i == a else 1 for i in range(v.rank)))
            wb = other.bound if other is not None and w == other.name else 1.0
            fn = rng.choice([f"torch.cross({v.name}, {w}, dim={a})", f"torch.linalg.cross({v.name}, {w}, dim={a})"])
            b.emit(fn, v.shape, "float32", -2 * v.bound * wb, 2 * v.bound * wb, "cross")
            return True
        p, q = b.param((3,)), b.param((3,))
        b.emit(f"torch.linalg.cross({v.name}.unsqueeze(-1) * {p}, {q}.expand({v.name}.shape + (3,)))",
               v.shape + (3,), "float32", -2 * v.bound, 2 * v.bound, "cross")
        return True
    v = b.pick(lambda u: u.rank >= 1 and u.dtype != "bool" and u.group != "masked")
    if v is None:
        return False
    if kind == "masked_scatter":
        m = b.pick(lambda m: m.dtype == "bool" and broadcast(v.shape, m.shape) == v.shape)
        mexpr = m.name if m is not None else f"({v.name} > {0 if not is_float(v.dtype) else 0.3})"
        src = b.pick(lambda u: u is not v and u.dtype == v.dtype and u.shape == v.shape)
        a = rng.randrange(v.rank)
        sexpr = src.name if src is not None else f"{v.name}.flip({a})"
        lo, hi = (min(v.lo, src.lo), max(v.hi, src.hi)) if src is not None else (v.lo, v.hi)
        b.emit(f"{v.name}.masked_scatter({mexpr}, {sexpr})", v.shape, v.dtype, lo, hi, "scatter2")
        return True
    a, spelled = b.rdim(v.rank)
    n = v.shape[a]
    if kind == "index_copy_perm":
        # every index once, in reverse: the source lands mirrored
        src = b.pick(lambda u: u is not v and u.dtype == v.dtype and u.shape == v.shape)
        sexpr = src.name if src is not None else f"{v.name}.roll(1, {spelled})"
        lo, hi = (min(v.lo, src.lo), max(v.hi, src.hi)) if src is not None else (v.lo, v.hi)
        b.emit(f"{v.name}.index_copy({spelled}, torch.arange({b.dim_code(v, a)}).flip(0), {sexpr})", v.shape,
               v.dtype, lo, hi, "scatter2")
        return True
    idx = rng.choice([[0], [1, 0], [0, 2], [2, 1]])
    need = max(idx) + 1
    if isinstance(n, int) and n < need:
        return False
    if not isinstance(n, int):
        b.min_dims.append((n, need))
    src_shape = list(v.shape)
    src_shape[a] = len(idx)
    if rng.random() < 0.5 and all(isinstance(d, int) for d in src_shape) and v.dtype == "float32":
        sexpr, lo, hi = b.param(src_shape), -1, 1
    else:
        sexpr, lo, hi = f"{v.name}.narrow({spelled}, {need - len(idx)}, {len(idx)}).flip({spelled})", v.lo, v.hi
    fn = rng.choice([f"{v.name}.index_copy({spelled}, torch.tensor({idx}), {sexpr})",
                     f"torch.index_copy({v.name}, {spelled}, torch.tensor({idx}), {sexpr})"])
    b.emit(fn, v.shape, v.dtype, min(v.lo, lo), max(v.hi, hi), "scatter2")
    return True


def g_window(b: Builder) -> bool:
    """Sizes computed from sizes: as_strided sliding windows, slices with constant bounds past the
    example size, F.pad to a multiple of k with math.ceil(S / k)."""
    rng = b.rng
    kind = rng.choice(["as_strided", "as_strided", "slice_past", "slice_past", "ceil_pad"])
    v = b.pick(lambda u: u.rank >= 1 and u.dyn_axes() and u.group != "masked" and b.numel_at_example(u.shape) <= 300)
    if v is None:
        return False
    if kind == "as_strided":
        if v.rank > 3:
            return False
        L = v.shape[-1]
        k = rng.choice([2, 3, 4])
        step = rng.choice([1, 2, k])
        if isinstance(L, int) and L < k:
            return False
        last = b.dim_code(v, v.rank - 1)
        n_code = f"({last} - {k}) // {step} + 1"
        n = d_add(d_floordiv(d_add(L, -k), step), 1) if not isinstance(L, int) else (L - k) // step + 1
        sizes = [b.dim_code(v, i) for i in range(v.rank - 1)] + [n_code, str(k)]
        strides = []
        by_stride = rng.random() < 0.3
        for i in range(v.rank - 1):
            strides.append(f"{v.name}_c.stride({i})" if by_stride else
                           " * ".join(b.dim_code(v, j) for j in range(i + 1, v.rank)))
        strides += [str(step), "1"]
        if not isinstance(L, int):
            b.min_dims.append((L, k))
        b.ambiguous.add(v.group)  # a view of v when v is contiguous, else of a copy
        call = f"as_strided(({', '.join(sizes)}), ({', '.join(strides)}))"
        if by_stride:
            name = b.fresh()
            val = Val(name, v.shape[:-1] + (n, k), v.dtype, v.lo, v.hi, 0.0, "amb:" + v.group, False)
            b.stmts.append(Stmt([f"{v.name}_c = {v.name}.contiguous()", f"{name} = {v.name}_c.{call}"], "window", (name,)))
            b.families.add("window")
            b.vals.append(val)
            return True
        b.emit(f"{v.name}.contiguous().{call}", v.shape[:-1] + (n, k), v.dtype, v.lo, v.hi, "window",
               group="amb:" + v.group, contiguous=False)
        return True
    a = rng.choice(v.dyn_axes())
    d = v.shape[a]
    ex = d_eval(d, b.example)
    if kind == "slice_past":
        end = ex + rng.randint(1, 6)
        if rng.random() < 0.3:
            idx, size = f"-{end}:", f"min({d}, {end})"
        else:
            # start 0 (x[:, :b] past the example size) included: the slice cleanup no longer
            # takes it for a full slice
            start = rng.randint(0, max(0, min(2, ex - 1)))
            idx, size = f"{start}:{end}", f"(min({d}, {end}) - {start})"
            b.min_dims.append((d, start + 1))
        parts = ", ".join([":"] * a + [idx])
        shape = list(v.shape)
        shape[a] = size
        b.emit(f"{v.name}[{parts}]", shape, v.dtype, v.lo, v.hi, "window", group=v.group, contiguous=False,
               expanded=v.expanded)
        return True
    if v.dtype == "bool":
        return False
    k = rng.choice([2, 3, 4, 8])
    last = v.rank - 1
    L = v.shape[last]
    dim = b.dim_code(v, last)
    grow = f"math.ceil({dim} / {k}) * {k} - {dim}"
    value = ""
    if rng.random() < 0.4:
        value = f", value={1.5 if is_float(v.dtype) else 1}"
    front = rng.choice([0, 0, 1])
    shape = list(v.shape)
    shape[last] = d_add(d_mul(d_ceildiv(L, k), k), front)
    b.emit(f"F.pad({v.name}, ({front}, {grow}){value})", shape, v.dtype, min(v.lo, 0, 1), max(v.hi, 0, 1.5), "window")
    return True
