"""In-place updates seen through every view, as torch does it (its aliasing rule).

A mutation of a base is visible through every view of it made before; a mutation through a
view is visible in the base and in every other view of the same base (views of views too).
Table: view op x mutation op x where the update is made and read (x output is a view), each
exported to tract with check_io=True; a few with a dynamic axis; a few run by hand with
check_io=False so that nothing hides behind the checked export.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import TraceError
from fx2nnef.targets.tolerance import compare_outputs
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, check_op, randn

# view name -> (example shape, the view); every view here shares memory with its input
VIEWS = {
    "reshape": ((3, 4), lambda x: x.reshape(-1)),
    "view": ((3, 4), lambda x: x.view(4, 3)),
    "flatten": ((2, 3, 4), lambda x: x.flatten(1)),
    "unflatten": ((3, 4), lambda x: x.unflatten(1, (2, 2))),
    "slice": ((3, 4), lambda x: x[:, 1:3]),
    "slice_rows": ((4, 4), lambda x: x[1:3]),
    "strided": ((3, 6), lambda x: x[:, ::2]),
    "int_index": ((3, 4), lambda x: x[1]),
    "ellipsis_int": ((2, 3, 4), lambda x: x[..., 1]),
    "none_index": ((3, 4), lambda x: x[..., None]),
    "transpose": ((3, 4), lambda x: x.transpose(0, 1)),
    "t": ((3, 4), lambda x: x.t()),
    "T": ((3, 4), lambda x: x.T),
    "mT": ((2, 3, 4), lambda x: x.mT),
    "permute": ((2, 3, 4), lambda x: x.permute(2, 0, 1)),
    "movedim": ((2, 3, 4), lambda x: x.movedim(0, 2)),
    "unsqueeze": ((3, 4), lambda x: x.unsqueeze(1)),
    "squeeze": ((3, 1, 4), lambda x: x.squeeze(1)),
    "narrow": ((3, 5), lambda x: x.narrow(1, 1, 3)),
    "select": ((3, 4), lambda x: x.select(1, 2)),
    "split": ((3, 4), lambda x: x.split(2, 1)[1]),
    "chunk": ((3, 4), lambda x: torch.chunk(x, 2, 1)[0]),
    "unbind": ((3, 4), lambda x: x.unbind(1)[2]),
    "contiguous": ((3, 4), lambda x: x.contiguous()),
    "detach": ((3, 4), lambda x: x.detach()),
    "dropout_eval": ((3, 4), lambda x: F.dropout(x, 0.5, training=False)),
    "chain": ((3, 4), lambda x: x.view(4, 3).t()[1:].unsqueeze(0)),
    "chain_slices": ((4, 6), lambda x: x[1:][:, 2:][1]),
}
# views that torch refuses most in-place updates through (several elements share memory)
READ_ONLY_VIEWS = {
    "expand": ((1, 4), lambda x: x.expand(3, 4)),
    "expand_as": ((3, 1), lambda x: x.expand_as(torch.ones(3, 4))),
    "broadcast_to": ((4,), lambda x: torch.broadcast_to(x, (2, 4))),
}


def _setitem_slice(t):
    t[..., :1] = -2.0


def _setitem_mask(t):
    t[t > 0] = 0.25


def _setitem_all(t):
    t[...] = 3.0


def _iadd(t):
    t += 1.0


# mutation name -> an in-place update of t (its result is not used)
MUTATIONS = {
    "relu_": lambda t: t.relu_(),
    "add_": lambda t: t.add_(1.5),
    "mul_tensor": lambda t: t.mul_(torch.tanh(t) + 2),
    "fill_": lambda t: t.fill_(0.5),
    "zero_": lambda t: t.zero_(),
    "copy_": lambda t: t.copy_(torch.sin(t) * 3),
    "setitem_slice": _setitem_slice,
    "setitem_mask": _setitem_mask,
    "setitem_all": _setitem_all,
    "masked_fill_": lambda t: t.masked_fill_(t < 0, 1.0),
    "clamp_": lambda t: t.clamp_(-0.5, 0.5),
    "relu_inplace_kw": lambda t: F.relu(t, inplace=True),
    "torch_sigmoid_": lambda t: torch.sigmoid_(t),
    "iadd": _iadd,
}


# patterns: how the view, the update and the reads are ordered -------------------------
def base_then_view(view, mutate):
    """The base is updated; a view made before sees it (the output is a view of an input)."""
    def fn(x):
        v = view(x)
        mutate(x)
        return v
    return fn


def view_then_base(view, mutate):
    """The view is updated; the base sees it (an input updated in place is returned)."""
    def fn(x):
        v = view(x)
        mutate(v)
        return x
    return fn


def view_then_sibling(view, mutate):
    """The view is updated; another view of the same base, made before, sees it."""
    def fn(x):
        other = x.reshape(-1)
        v = view(x)
        mutate(v)
        return other * 1.0
    return fn


def use_before(view, mutate):
    """Reads before the update keep the old value; reads after see the new one."""
    def fn(x):
        y = x * 2.0  # an intermediate tensor as the base
        v = view(y)
        before = v * 1.0
        mutate(y)
        return before, v, y
    return fn


PATTERNS = {f.__name__: f for f in (base_then_view, view_then_base, view_then_sibling, use_before)}


def _cases():
    muts = list(MUTATIONS)
    cases = []
    for i, (vname, (shape, view)) in enumerate(VIEWS.items()):
        for j, (pname, pattern) in enumerate(PATTERNS.items()):
            mname = muts[(i + j) % len(muts)]
            cases.append(pytest.param(pattern, view, MUTATIONS[mname], shape, id=f"{vname}-{mname}-{pname}"))
    for mname, mutate in MUTATIONS.items():  # every mutation written back through the longest chains
        for vname in ("chain", "strided", "permute"):
            shape, view = VIEWS[vname]
            if any(c.id == f"{vname}-{mname}-view_then_base" for c in cases):
                continue
            cases.append(pytest.param(view_then_base, view, mutate, shape, id=f"{vname}-{mname}-view_then_base"))
    for vname, (shape, view) in READ_ONLY_VIEWS.items():
        for pname in ("base_then_view", "use_before"):
            cases.append(pytest.param(PATTERNS[pname], view, MUTATIONS["mul_tensor"], shape, id=f"{vname}-mul_tensor-{pname}"))
        cases.append(pytest.param(view_then_base, view, MUTATIONS["fill_"], shape, id=f"{vname}-fill_-view_then_base"))
    return cases


@pytest.mark.parametrize("pattern, view, mutate, shape", _cases())
def test_update_seen_through_views(pattern, view, mutate, shape, tmp_path):
    fn = pattern(view, mutate)
    r = check_op(fn, [randn(*shape)], tmp_path)
    assert r.check.ok
    assert not any(k.endswith("_") and not k.endswith("__") for k in r.source_op_counts), r.source_op_counts


# a dynamic axis: the write-back and the rebuilt views follow the size -----------------
DYNAMIC = [
    ("reshape", lambda x: x.reshape(-1)),
    ("slice", lambda x: x[:, 1:3]),
    ("rows", lambda x: x[1:]),
    ("strided", lambda x: x[:, ::2]),
    ("transpose", lambda x: x.transpose(0, 1)),
    ("unsqueeze", lambda x: x.unsqueeze(0)),
    ("narrow", lambda x: x.narrow(1, 1, 2)),
    ("select", lambda x: x.select(1, 2)),
    ("int_index", lambda x: x[1]),
    ("unbind", lambda x: x.unbind(1)[0]),
    ("chunk", lambda x: x.chunk(2, 1)[1]),
    ("chain", lambda x: x.t()[1:].unsqueeze(0)[..., 1:]),
]


@pytest.mark.parametrize("pattern", [base_then_view, view_then_base, use_before], ids=lambda p: p.__name__)
@pytest.mark.parametrize("name, view", DYNAMIC, ids=[n for n, _ in DYNAMIC])
def test_dynamic_axis(name, view, pattern, tmp_path):
    mname = list(MUTATIONS)[len(name) % len(MUTATIONS)]
    fn = pattern(view, MUTATIONS[mname])
    r = check_op(fn, [randn(5, 4)], tmp_path, dynamic_axes={"x0": {0: "S"}})
    assert r.check.ok and len(r.check.cases) >= 3  # the example, a size below, a size above


# the numbers, run by hand: an unchecked export gives eager's values at other sizes -------
def _many_views(x):
    y = x * 1.0
    flat = y.reshape(-1)
    cols = y[:, 1:3]
    tr = y.t()
    row = y[1]
    row.mul_(3)                # through a view: y, flat, cols and tr see it
    tr[0] = -1.0               # through another view: y's first column
    y.relu_()                  # the base: every view sees it
    y[y > 1.0] = 1.0           # mask assignment on the base
    return flat, cols, tr.unsqueeze(0), row


def _input_updated(x, z):
    v = x.view(-1)
    x[:, :2] = z[:, :2]
    z.mul_(2)
    zz = z.t()
    return v, z, zz


@pytest.mark.parametrize("fn, shapes, dyn", [
    (_many_views, [(4, 5)], {}),
    (_many_views, [(6, 5)], {"x0": {0: "S"}}),
    (_input_updated, [(5, 3), (5, 3)], {"x0": {0: "S"}, "x1": {0: "S"}}),
], ids=["many_views", "many_views_dynamic", "inputs_updated_dynamic"])
def test_numbers_unchecked(fn, shapes, dyn, tmp_path):
    inputs = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    names = [f"x{i}" for i in range(len(inputs))]
    asset = tmp_path / "m.nnef.tgz"
    fx2nnef.export(FnModule(fn), tuple(t.clone() for t in inputs), asset,
                   target=fx2nnef.TractNNEF(check_io=False, dynamic_axes=dyn), input_names=names)
    sizes = [shapes[0][0]] + ([2, 9] if dyn else [])
    sets = [[randn(n, *s[1:], seed=10 + n + i) for i, s in enumerate(shapes)] for n in sizes]
    got = run_tract_many(asset, [[t.numpy() for t in ins] for ins in sets])
    for ins, outs in zip(sets, got):
        with torch.no_grad():
            want = fn(*[t.clone() for t in ins])
        want = [w.numpy() for w in want]
        diffs = compare_outputs(None, want, outs, "approximate")
        assert all(d.ok for d in diffs), "\n".join(map(str, diffs))
        assert not all(np.array_equal(w, i.numpy().reshape(w.shape)) for w, i in zip(want, ins) if w.size == i.numel())


# updates that cannot be rebuilt give a named error, never a wrong number --------------
def _bitcast_view(x):
    v = x.view(torch.int32)
    v.add_(1)
    return x


def _shape_in_place(x):
    x.t_()
    return x


def _opaque_then_read(x):
    y = x * 1.0
    y.exponential_()
    return y + 1


@pytest.mark.parametrize("fn, words", [
    (_bitcast_view, "reinterprets"),
    (_shape_in_place, "changes the shape"),
    (_opaque_then_read, "exponential_"),
], ids=["bitcast_view", "shape_in_place", "opaque_update_read_later"])
def test_clear_errors(fn, words, tmp_path):
    with pytest.raises(TraceError, match=words):
        check_op(fn, [randn(3, 4)], tmp_path)


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_write_through_a_diagonal_view(tmp_path, offset):
    """``x.diagonal().fill_(0)`` writes into x; diagonal now has a lowering, so the update is
    exported like other views' (before: refused, diagonal had none). The check compares x."""
    def diag(x):
        d = x.diagonal(offset)
        d.fill_(0.0)
        return x * 1.0

    r = check_op(diag, [randn(4, 5)], tmp_path)
    assert r.check.ok


@pytest.mark.parametrize("name, update", [
    ("index_put_", lambda v: v.index_put_((torch.tensor([0, 2]),), torch.tensor(9.0))),
    ("index_fill_", lambda v: v.index_fill_(0, torch.tensor([1]), -1.0)),
    ("index_copy_", lambda v: v.index_copy_(0, torch.tensor([2, 0]), torch.ones(2, 3))),
], ids=lambda x: x if isinstance(x, str) else "")
def test_index_updates_through_view(name, update, tmp_path):
    def fn(x):
        v = x.t()
        update(v)
        return x, v

    assert check_op(fn, [randn(3, 4)], tmp_path).check.ok


def test_alias_returned_by_update(tmp_path):
    def fn(x):
        y = x.add_(1)        # y is x
        z = y[0]
        x.mul_(2)
        return z, y

    assert check_op(fn, [randn(3, 4)], tmp_path).check.ok


def test_constant_buffer_updated_through_view(tmp_path):
    class Buf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.arange(12.0).reshape(3, 4))

        def forward(self, x):
            t = self.table.clone()
            t.t()[1:3].add_(x[:3, :2].t())
            return t

    assert check_op(None, [randn(3, 4)], tmp_path, module=Buf()).check.ok


def test_every_case_is_a_distinct_program():
    """The table above covers each view and mutation at least once in each pattern family."""
    ids = [p.id for p in _cases()]
    assert len(ids) == len(set(ids))
    for vname, mname in itertools.product(VIEWS, ["view_then_base"]):
        assert any(i.startswith(vname + "-") and i.endswith(mname) for i in ids)
    assert {i.split("-")[1] for i in ids} >= set(MUTATIONS)
