"""The replay's shortcuts (fx_tracer/shapes/shortcuts.py) give torch's output metadata (shape, strides,
storage offset, dtype) without torch's kernel: on real tensors at several sizes, and under a
ShapeEnv, where they must also take no decision on the sizes. Calls outside their rules are
left to torch (None)."""
import operator

import pytest
import sympy
import torch
import torch.nn.functional as F

from fx2nnef.fx_tracer.shapes.shortcuts import function_shortcut, method_shortcut


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def _transposed(b, s):
    return torch.randn(b, s, 4, 8).transpose(1, 2)


# (label, call kind, target, args builder of (B, S)); every one must be taken by a shortcut
TAKEN = [
    ("add broadcast", "f", operator.add, lambda b, s: (_t(b, 1, s, 8), _t(1, 4, s, 8))),
    ("mul number", "f", operator.mul, lambda b, s: (_t(b, s), 3)),
    ("rsub number", "f", operator.sub, lambda b, s: (1.5, _t(b, s))),
    ("int true division", "f", operator.truediv, lambda b, s: (torch.arange(b * s).view(b, s), 2)),
    ("pow", "m", "pow", lambda b, s: (_t(b, s, 8), 2)),
    ("le of aranges", "f", operator.le, lambda b, s: (torch.arange(s)[:, None], torch.arange(s)[None, :])),
    ("and of masks", "f", operator.and_, lambda b, s: (torch.ones(b, 1, s, s, dtype=torch.bool),
                                                       torch.ones(1, 1, s, 1, dtype=torch.bool))),
    ("int and bool promote", "f", torch.add, lambda b, s: (torch.ones(b, s, dtype=torch.int32),
                                                          torch.ones(s, dtype=torch.bool))),
    ("half and float", "f", torch.mul, lambda b, s: (_t(b, s, dtype=torch.float16), _t(s))),
    ("0-d float with int", "f", operator.add, lambda b, s: (torch.ones(b, s, dtype=torch.int64), torch.tensor(0.5))),
    ("where", "f", torch.where, lambda b, s: (torch.rand(b, 1, s) > 0.5, _t(b, 4, s), 0.0)),
    ("neg", "f", operator.neg, lambda b, s: (_t(b, s),)),
    ("silu", "f", F.silu, lambda b, s: (_t(b, s, 8),)),
    ("exp method", "m", "exp", lambda b, s: (_t(b, s),)),
    ("to dtype", "m", "to", lambda b, s: (_t(b, s), torch.float16)),
    ("to same dtype", "m", "to", lambda b, s: (_transposed(b, s), torch.float32)),
    ("float of int", "m", "float", lambda b, s: (torch.arange(b * s).view(b, s),)),
    ("linear", "f", F.linear, lambda b, s: (_t(b, s, 8), _t(16, 8), _t(16))),
    ("matmul batched", "f", torch.matmul, lambda b, s: (_transposed(b, s), _t(1, 1, 8, s))),
    ("matmul 2d", "m", "matmul", lambda b, s: (_t(s, 8), _t(8, 3))),
    ("unsqueeze", "m", "unsqueeze", lambda b, s: (_t(b, s), 1)),
    ("unsqueeze last of a transpose", "m", "unsqueeze", lambda b, s: (_transposed(b, s), -1)),
    ("transpose", "m", "transpose", lambda b, s: (_t(b, s, 8), 1, 2)),
    ("getitem none and full", "f", operator.getitem, lambda b, s: (_t(b, s), (slice(None), None, None, slice(None)))),
    ("getitem constant slice", "f", operator.getitem, lambda b, s: (_transposed(b, s), (Ellipsis, slice(None, 4)))),
    ("getitem stepped and int", "f", operator.getitem, lambda b, s: (_t(b, s, 8), (Ellipsis, slice(1, None, 2)))),
    ("getitem int", "f", operator.getitem, lambda b, s: (_t(3, b, s), (-1,))),
    ("gather all axes", "f", operator.getitem, lambda b, s: (_t(b, s), (torch.arange(b)[:, None, None, None],
                                                                        torch.arange(s)[None, None, None, :]))),
    ("view -1", "m", "view", lambda b, s: (_t(b, s, 32), b, s, -1, 8)),
    ("reshape merge", "m", "reshape", lambda b, s: (_t(b, s, 4, 8), (b, s, 32))),
    ("expand", "m", "expand", lambda b, s: (_t(b, 4, 1, s, 8), b, 4, 2, s, 8)),
    ("expand new axes", "m", "expand", lambda b, s: (_t(1, s), 3, b, -1)),
    ("contiguous of a transpose", "m", "contiguous", lambda b, s: (_transposed(b, s),)),
    ("mean keepdim", "m", "mean", lambda b, s: (_t(b, s, 8), -1, True)),
    ("sum of two axes", "f", torch.sum, lambda b, s: (_t(b, s, 8), (0, 2))),
]

# calls whose output needs a decision, another layout rule, or data: torch's own
LEFT = [
    ("sizes to be equal", "f", operator.add, lambda b, s: (_t(b, s), _t(b, 4))),
    ("non-contiguous operand", "f", operator.mul, lambda b, s: (_transposed(b, s), _t(1, 1, s, 8))),
    ("float and", "f", operator.and_, lambda b, s: (_t(b, s), _t(b, s))),
    ("boolean mask", "f", operator.getitem, lambda b, s: (_t(b, s), (torch.rand(b, s) > 0.5,))),
    ("view of a transpose", "m", "reshape", lambda b, s: (_transposed(b, s), b, -1)),
    ("keyword alpha", "f", torch.add, lambda b, s: (_t(b, s), _t(b, s))),
    ("sum of ints", "m", "sum", lambda b, s: (torch.ones(b, s, dtype=torch.int64), 1)),
    ("abs of complex", "m", "abs", lambda b, s: (torch.randn(b, s, dtype=torch.complex64),)),
]


def _call(kind, target, args, kwargs=None):
    kwargs = kwargs or {}
    if kind == "f":
        return function_shortcut(target, args, kwargs), target(*args, **kwargs)
    return method_shortcut(target, args, kwargs), getattr(args[0], target)(*args[1:], **kwargs)


def _meta(t):
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def _layout(t):
    """:func:`_meta` with the strides of axes of size 1 left out: they address no other item
    (torch's element-wise kernels carry an operand's over; a view reads none of them)."""
    return tuple(t.shape), tuple(st for d, st in zip(t.shape, t.stride()) if d != 1), t.storage_offset(), t.dtype


@pytest.mark.parametrize("label,kind,target,build", TAKEN, ids=[c[0] for c in TAKEN])
@pytest.mark.parametrize("b,s", [(2, 5), (1, 1), (3, 1), (1, 7)])
def test_shortcut_is_torch_on_real_tensors(label, kind, target, build, b, s):
    args = build(b, s)
    got, want = _call(kind, target, args)
    assert got is not None, f"{label}: no shortcut"
    assert _meta(got) == _meta(want), label
    if want is args[0]:  # torch returns its input (to the same dtype, contiguous of a contiguous)
        assert got is args[0]


@pytest.mark.parametrize("label,kind,target,build", LEFT, ids=[c[0] for c in LEFT])
def test_calls_outside_the_rules_are_torchs(label, kind, target, build):
    args = build(2, 5)
    kwargs = {"alpha": 2} if label == "keyword alpha" else {}
    got = function_shortcut(target, args, kwargs) if kind == "f" else method_shortcut(target, args, kwargs)
    assert got is None, label


def test_shortcuts_take_no_decision_on_symbols():
    """Under a ShapeEnv, each shortcut's shape and strides are torch's fake kernel's, as
    expressions, and it adds no guard (torch's kernels add ``Ne(S, 1)`` and the like)."""
    from torch._dynamo.source import LocalSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
    syms = [env.create_symintnode(env.create_symbol(h, LocalSource(n), dynamic_dim=DimDynamic.DYNAMIC,
                                                    do_not_specialize_zero_one=True), hint=h)
            for n, h in (("B", 2), ("S", 5))]
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)

    def expr(v):
        return sympy.sympify(v.node.expr if isinstance(v, torch.SymInt) else v)

    checked = 0
    with mode:
        for label, kind, target, build in TAKEN:
            if label in ("int true division", "float of int", "gather all axes"):
                continue  # aranges of symbols: data the fake tensors hold as constants
            args = build(*syms)
            before = len(env.guards)
            got = (function_shortcut(target, args, {}) if kind == "f" else method_shortcut(target, args, {}))
            assert got is not None, label
            assert len(env.guards) == before, (label, env.guards[before:])
            want = target(*args) if kind == "f" else getattr(args[0], target)(*args[1:])
            for a, w in zip(tuple(got.shape) + got.stride(), tuple(want.shape) + want.stride()):
                assert sympy.expand(expr(a) - expr(w)) == 0, (label, got.shape, got.stride(), want.shape,
                                                               want.stride())
            assert got.dtype == want.dtype, label
            checked += 1
        # a constant bound on a symbolic axis, sizes that must be equal: decisions, left to torch
        x = torch.randn(syms[0], syms[1])
        assert function_shortcut(operator.getitem, (x, (slice(None), slice(None, 4))), {}) is None
        assert function_shortcut(operator.add, (x, torch.randn(syms[1], syms[0])), {}) is None
    assert checked >= 25


def _random_tensor(g, shape, dtype):
    """A tensor of ``shape``, contiguous or not (transposed, sliced, expanded), by ``g``."""
    how = int(torch.randint(0, 4, (), generator=g))
    if how == 1 and len(shape) >= 2:  # a transpose of the two last axes
        return torch.randn(*shape[:-2], shape[-1], shape[-2], generator=g).to(dtype).transpose(-1, -2)
    if how == 2:  # every other item of the last axis
        return torch.randn(*shape[:-1], 2 * shape[-1], generator=g).to(dtype)[..., ::2]
    if how == 3 and shape and shape[0] > 1:  # an expanded first axis
        return torch.randn(1, *shape[1:], generator=g).to(dtype).expand(*shape)
    return torch.randn(*shape, generator=g).to(dtype)


def test_random_calls_match_torch_where_taken():
    """Random shapes, layouts and dtypes: wherever a shortcut answers, its output's layout is
    torch's (strides of axes of size 1 aside); the contiguous cases are answered."""
    g = torch.Generator().manual_seed(0)
    dtypes = [torch.float32, torch.float16, torch.int64, torch.bool]
    calls = [("f", operator.add), ("f", operator.mul), ("f", operator.truediv), ("f", operator.lt),
             ("f", operator.and_), ("m", "exp"), ("f", operator.neg), ("m", "float"), ("m", "unsqueeze"),
             ("m", "transpose"), ("m", "contiguous"), ("m", "reshape"), ("m", "mean"), ("f", torch.matmul),
             ("f", operator.getitem), ("m", "expand")]
    taken = 0
    for case in range(600):
        kind, target = calls[case % len(calls)]
        rank = int(torch.randint(1, 5, (), generator=g))
        shape = [int(v) if int(v) > 0 else 1 for v in torch.randint(0, 5, (rank,), generator=g)]
        dtype = dtypes[int(torch.randint(0, len(dtypes), (), generator=g))]
        if target in (operator.and_,):
            dtype = torch.bool
        if target in ("exp", "mean", torch.matmul, operator.neg) and dtype in (torch.bool, torch.int64):
            dtype = torch.float32
        x = _random_tensor(g, shape, dtype)
        if kind == "f" and target in (operator.add, operator.mul, operator.truediv, operator.lt, operator.and_):
            other = [d if torch.rand((), generator=g) < 0.7 else 1 for d in shape[int(torch.randint(0, rank, (), generator=g)):]]
            args = (x, _random_tensor(g, other, dtype))
        elif target == torch.matmul:
            if rank < 2:
                continue
            args = (x, _random_tensor(g, [*shape[:-2], shape[-1], 3], dtype))
        elif target == "unsqueeze":
            args = (x, int(torch.randint(-rank - 1, rank + 1, (), generator=g)))
        elif target == "transpose":
            args = (x, int(torch.randint(-rank, rank, (), generator=g)), int(torch.randint(-rank, rank, (), generator=g)))
        elif target == "reshape":
            args = (x, -1, shape[-1]) if rank >= 2 else (x, 1, -1)
        elif target == "mean":
            args = (x, int(torch.randint(-rank, rank, (), generator=g)), bool(torch.rand((), generator=g) < 0.5))
        elif target == operator.getitem:
            args = (x, (Ellipsis, None, slice(None, 2), ) if shape[-1] >= 2 else (None, Ellipsis))
        elif target == "expand":
            args = (x, 2, *[d if d != 1 else 3 for d in shape])
        else:
            args = (x,)
        try:
            want = target(*args) if kind == "f" else getattr(args[0], target)(*args[1:])
        except RuntimeError:
            continue  # torch refuses the combination: the graph would not have traced
        got = function_shortcut(target, args, {}) if kind == "f" else method_shortcut(target, args, {})
        if got is None:
            assert not all(a.is_contiguous() for a in args if isinstance(a, torch.Tensor)) or target in (
                operator.truediv,) and dtype == torch.bool or target == "expand", (case, target, shape, dtype)
            continue
        taken += 1
        assert _layout(got) == _layout(want), (case, target, [getattr(a, "shape", a) for a in args],
                                               [a.stride() for a in args if isinstance(a, torch.Tensor)])
    assert taken > 250
