"""Python decisions on dynamic sizes: the export holds on the range it claims, real tract runs.

Each model is exported with check_io=False (the analysis alone must make it right), then the
asset is run in tract at every size of the claimed range from 1 to 3x the example and compared
with eager PyTorch; sizes outside the range must be reported (str(result), tract_assert).
"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many
from harness import FnModule, randn, tract_matches_eager


def _export(fn, shapes, dyn, tmp_path, *, check_io=False, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    ins = tuple(torch.randn(s, generator=gen).to(dtype) for s in shapes)
    model = fn if isinstance(fn, nn.Module) else FnModule(fn)
    names = [f"x{i}" for i in range(len(shapes))]
    # branches="example": the decisions on sizes keep the example's outcome, as these tests look at
    # how the range they leave is found (by default, such a decision is merged: test_size_branches.py)
    r = fx2nnef.export(model, ins, tmp_path / "m.nnef.tgz", input_names=names, branches="example",
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn, check_io=check_io))
    return model, ins, names, r


def _sizes_check(model, ins, names, dyn, r, envs):
    """Run the asset at each env (symbol -> size) and compare with eager; envs the model refuses are skipped."""
    sets, expected = [], []
    for env in envs:
        new = []
        for name, t in zip(names, ins):
            shape = list(t.shape)
            for axis, sym in dyn.get(name, {}).items():
                shape[axis] = env[sym]
            new.append(torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(t.dtype))
        try:
            with torch.no_grad():
                out = model(*new)
        except Exception:  # noqa: BLE001 - outside the model's own domain
            continue
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        sets.append([t.numpy() for t in new])
        expected.append((env, [o.numpy() for o in outs]))
    assert sets, "no size was accepted by the model"
    got = run_tract_many(r.path, sets)
    for (env, exp), g in zip(expected, got):
        for e, o in zip(exp, g):
            assert o.shape == e.shape, (env, o.shape, e.shape)
            np.testing.assert_allclose(o, e, atol=1e-4, rtol=5e-4, err_msg=str(env))
    return len(sets)


def _in_range(r, sym, n):
    rng = r.graph.ranges.get(sym)
    return rng is None or rng.contains(n)


def _one_symbol(fn, shape, axis, tmp_path, top=None):
    dyn = {"x0": {axis: "S"}}
    model, ins, names, r = _export(fn, [shape], dyn, tmp_path)
    v = shape[axis]
    sizes = [n for n in range(1, (top or 3 * v) + 1) if _in_range(r, "S", n)]
    _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in sizes])
    return r


def _asserts(r):
    return [l for l in r.nnef_text.splitlines() if l.startswith("extension tract_assert")]


def test_decision_flipping_below_the_example(tmp_path):
    """S=7 example, `S > 2`: wrong at S=2 before; now the range is S >= 3, asserted and reported."""
    def fn(x):
        if x.shape[1] > 2:
            x = x.flip(1)
        return x * 2
    r = _one_symbol(fn, (2, 7), 1, tmp_path)
    assert str(r.graph.ranges["S"]).startswith("S >= 3")
    assert _asserts(r) == ["extension tract_assert S >= 3;"]
    assert "valid only for S >= 3" in str(r)
    assert "  valid for: S >= 3 (the graph differs from the model at S=2)" in str(r).splitlines()
    assert r.ranges["S"].lo == 3 and r.ranges["S"].hi is None
    assert any(g.status == "bounds" and "test_dynamic_guards.py" in str(g.source) for g in r.guards)


def test_decision_flipping_at_the_example_size(tmp_path):
    """S=6 example, `S > 6`: the exported graph must be the S=6 branch, valid for S <= 6."""
    def fn(x):
        if x.shape[1] > 6:
            return x.flip(1)
        return x.cumsum(1)
    r = _one_symbol(fn, (2, 6), 1, tmp_path)
    assert r.graph.ranges["S"].hi == 6 and r.graph.ranges["S"].lo is None
    assert "extension tract_assert S <= 6;" in _asserts(r)


@pytest.mark.parametrize("kind", ["eq", "ge", "numel", "len", "product"])
def test_decisions_of_every_form(kind, tmp_path):
    """==, >=, numel(), len(), products of dims: each is found wherever it flips."""
    conds = {
        "eq": lambda x: x.shape[0] == 4,
        "ge": lambda x: x.shape[0] >= 3,
        "numel": lambda x: x.numel() <= 12,
        "len": lambda x: len(x) > 5,
        "product": lambda x: x.shape[0] * x.shape[1] > 9,
    }
    cond = conds[kind]

    def fn(x):
        return x.cumsum(0) if cond(x) else x - x.mean(0, keepdim=True)
    model, ins, names, r = _export(fn, [(7, 3)], {"x0": {0: "S"}}, tmp_path)
    sizes = [n for n in range(1, 22) if _in_range(r, "S", n)]
    assert 7 in sizes
    _sizes_check(model, ins, names, {"x0": {0: "S"}}, r, [{"S": n} for n in sizes])
    assert r.graph.ranges, "the decision flips somewhere in 1..21: the range must say so"
    assert r.graph.ranges["S"].asserts() and all(f"tract_assert {a};" in r.nnef_text for a in r.graph.ranges["S"].asserts())


def test_decision_flipping_at_every_size_holds_on_its_step(tmp_path):
    """`S % 2` at S=7: the graph holds at the odd sizes only -> a range with a step (S % 2 == 1),
    right in tract at odd sizes (tests/test_dynamic_steps.py has more of these)."""
    def fn(x):
        return x.cumsum(0) if x.shape[0] % 2 == 1 else x - x.mean(0, keepdim=True)
    dyn = {"x0": {0: "S"}}
    model, ins, names, r = _export(fn, [(7, 3)], dyn, tmp_path)
    rng = r.graph.ranges["S"]
    assert (rng.step, rng.rest) == (2, 1) and not rng.contains(8)
    assert _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in (1, 3, 7, 15)]) == 4


def test_two_symbols(tmp_path):
    def fn(a, b):
        y = a.flip(0) if a.shape[0] > 3 else a
        z = b.cumsum(1) if b.shape[1] < 9 else b
        return y[:1] + z[:, -1:].T
    dyn = {"x0": {0: "A"}, "x1": {1: "B"}}
    model, ins, names, r = _export(fn, [(6, 4), (4, 5)], dyn, tmp_path)
    ra, rb = r.graph.ranges["A"], r.graph.ranges["B"]
    assert ra.lo == 4 and ra.hi is None
    assert rb.hi == 8 and rb.lo is None
    assert set(_asserts(r)) == {"extension tract_assert A >= 4;", "extension tract_assert B <= 8;"}
    envs = [{"A": a, "B": b} for a in (4, 5, 6, 9, 13) for b in (1, 2, 5, 8)]
    _sizes_check(model, ins, names, dyn, r, envs)


def test_model_accepting_only_even_sizes(tmp_path):
    def fn(x):
        if x.shape[1] % 2:
            raise ValueError("even lengths only")
        return x.cumsum(1) * 2
    r = _one_symbol(fn, (2, 8), 1, tmp_path)
    rng = r.graph.ranges["S"]
    assert rng.step == 2 and rng.hi is None and rng.contains(4) and not rng.contains(5)
    assert "S % 2 == 0" in str(r)


class _UNetLike(nn.Module):
    """Two stride-2 downsamplings and skip concatenations: H and W must be multiples of 4."""

    def __init__(self):
        super().__init__()
        self.d1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.d2 = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.u2 = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.u1 = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.out = nn.Conv2d(7, 2, 1)

    def forward(self, x):
        a = F.relu(self.d1(x))
        b = F.relu(self.d2(a))
        c = torch.cat([self.u2(b), a], 1)
        d = torch.cat([self.u1(c), x], 1)
        return self.out(d)


def test_unet_like_divisible_by_four(tmp_path):
    """Probes skip the sizes the model refuses; the result says H, W must be multiples of 4."""
    model = _UNetLike().eval()
    dyn = {"x0": {2: "H", 3: "W"}}
    model, ins, names, r = _export(model, [(1, 3, 16, 12)], dyn, tmp_path)
    assert r.graph.ranges["H"].step == 4 and r.graph.ranges["W"].step == 4
    assert "H % 4 == 0" in str(r) and "W % 4 == 0" in str(r)


def test_unet_like_runs_in_tract(tmp_path):
    model = _UNetLike().eval()
    dyn = {"x0": {2: "H", 3: "W"}}
    model, ins, names, r = _export(model, [(1, 3, 16, 12)], dyn, tmp_path)
    # tract cannot prove 2*((H+3)/4) == (H+1)/2 at the skip concatenation: the graph declares H = 4*H_4
    assert "extension tract_symbol H_4;" in r.nnef_text and "shape = [1, 3, 4*H_4, 4*W_4]" in r.nnef_text
    envs = [{"H": h, "W": w} for h in (4, 8, 16, 28) for w in (4, 12, 20)]
    assert _sizes_check(model, ins, names, dyn, r, envs) == len(envs)


def test_unet_like_check_io(tmp_path):
    """The default export (check_io=True) runs in tract below and above the example."""
    model = _UNetLike().eval()
    _, _, _, r = _export(model, [(1, 3, 16, 12)], {"x0": {2: "H", 3: "W"}}, tmp_path, check_io=True)
    assert r.check.ok and len(r.check.cases) >= 2


def test_model_with_a_maximum_length(tmp_path):
    pos = torch.randn(16, 4)

    def fn(x):
        return x + pos[: x.shape[1]]
    dyn = {"x0": {1: "S"}}
    model, ins, names, r = _export(fn, [(1, 8, 4)], dyn, tmp_path, check_io=True)
    assert r.check.ok
    rng = r.graph.ranges["S"]
    assert rng.hi is not None and 8 <= rng.hi <= 16 and rng.lo is None
    assert f"extension tract_assert S <= {rng.hi};" in _asserts(r)
    _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in range(1, rng.hi + 1)])


def test_constant_index_out_of_range_bounds_the_range(tmp_path):
    """`x[:, 5]` at S=3: torch raises in the eager model too, so S >= 6 is the model's domain."""
    dyn = {"x0": {1: "S"}}
    model, ins, names, r = _export(lambda x: x[:, 5] * 2, [(2, 7)], dyn, tmp_path, check_io=True)
    assert r.check.ok
    assert r.graph.ranges["S"].lo == 6
    assert "extension tract_assert S >= 6;" in _asserts(r)


def test_graph_failing_where_the_model_works_bounds_the_range(tmp_path):
    """The graph indexes column 5 (taken at S=7) but the model picks column 0 below 6: the
    export claims S >= 6, asserts it, and is right there."""
    def fn(x):
        i = 5 if x.shape[1] > 5 else 0
        return x[:, i] * 2
    model, ins, names, r = _export(fn, [(2, 7)], {"x0": {1: "S"}}, tmp_path, check_io=True)
    assert r.ranges["S"].lo == 6 and _asserts(r) == ["extension tract_assert S >= 6;"]
    assert len(r.check.cases) >= 2 and r.check.ok


def test_check_io_runs_below_and_above_the_example(tmp_path):
    _, _, _, r = _export(lambda x: x.relu(), [(2, 7)], {"x0": {1: "S"}}, tmp_path, check_io=True)
    labels = [label for label, _ in r.check.cases]
    sizes = [int(l.split("=")[1]) for l in labels[1:]]
    assert labels[0] == "example" and min(sizes) < 7 < max(sizes)
    assert not _asserts(r) and not r.graph.ranges


def test_shapes_clamped_at_small_sizes_bound_the_range(tmp_path):
    """`x[:, 1:-1]` is empty at S=1 (not of size -1): shapes follow S-2 from S=2 only."""
    def fn(x, y):
        x = x.clone()
        x[:, 1 : x.shape[1] - 1] = y[:, 1 : x.shape[1] - 1]
        return x
    dyn = {"x0": {1: "S"}, "x1": {1: "S"}}
    model, ins, names, r = _export(fn, [(2, 5, 4), (2, 5, 4)], dyn, tmp_path, check_io=True)
    assert r.check.ok and r.ranges["S"].lo == 2 and "shapes change otherwise below S=2" in str(r)
    _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in range(2, 12)])


def test_tiny_llama_decision_at_one_keeps_the_full_range(tmp_path):
    """transformers' `q_length == 1` flips at S=1 only, where the graph still reproduces the model."""
    from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama
    model = tiny_llama("sdpa")
    r = fx2nnef.export(model, (example_input_ids(8),), tmp_path / "llama.nnef.tgz", input_names=["input_ids"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and not r.ranges and "tract_assert" not in r.nnef_text
    assert any("q_length == 1" in str(g) and "still reproduces the model" in g.note for g in r.guards)
    ids = [example_input_ids(n, seed=n) for n in (1, 2, 13)]
    got = run_tract_many(r.path, [[i.numpy()] for i in ids])
    for i, g in zip(ids, got):
        with torch.no_grad():
            np.testing.assert_allclose(g[0], model(i).logits.numpy(), atol=1e-4, rtol=5e-4)


def test_branch_equal_on_the_probe_data_only(tmp_path):
    """At S=8 the probe's input (the example's items repeated) is a palindrome, so `y.flip(0)` equals
    `y.clone()` there: the decision is still checked on shuffled items, and bounds the range."""
    def fn(x, y):
        v = y.flip(0) if x.shape[1] >= 8 else y.clone()
        return x * 2, v

    model = FnModule(fn)
    x, y = torch.randn(2, 7), torch.tensor([False, False, True, True, True, True, False])
    dyn = {"x0": {1: "S"}, "x1": {0: "S"}}
    r = fx2nnef.export(model, (x, y), tmp_path / "m.nnef.tgz", branches="example", input_names=["x0", "x1"],
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn, check_io=False))
    assert r.ranges["S"].hi == 7
    _sizes_check(model, (x, y), ["x0", "x1"], dyn, r, [{"S": n} for n in range(1, 8)])


def test_branch_equal_on_the_example_values_only(tmp_path):
    """The probes below S=5 cut the example's first items, all positive: `floor(z / 2.63)` is all
    zeros there, where `abs` and `roll` agree. The decision is checked on values redrawn within the
    example's range too (fuzz seed 2026224), and bounds the range at S=5."""
    def fn(z):
        v = torch.div(z, 2.63, rounding_mode="floor")
        return v.abs() if v.numel() >= 5 else v.roll(1, 0)

    model = FnModule(fn)
    z = torch.tensor([0.5, 1.0, 1.5, 0.7, -1.5])
    dyn = {"x0": {0: "S"}}
    r = fx2nnef.export(model, (z,), tmp_path / "m.nnef.tgz", branches="example", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn, check_io=False))
    assert r.ranges["S"].lo == 5
    _sizes_check(model, (z,), ["x0"], dyn, r, [{"S": n} for n in range(5, 12)])


def test_sizes_equal_near_a_flip_only(tmp_path):
    """`S // 2 if S // 2 > 1 else 1` (fuzz seed 2026703's `max(1, S // 2)`, which is no decision
    now: see test_size_extrema.py) at S=3 takes 1; the trace at S=5 takes `S // 2`, which gives the
    model's 1 at S=2 and 3 but 0 at S=1: the far end of the sizes past the flip is probed too, and
    the graph traced again is checked as it was traced. Before: 0 items at S=1."""
    def fn(x):
        y = torch.expm1(x)
        return y.narrow(0, 0, y.shape[0] // 2 if y.shape[0] // 2 > 1 else 1)
    r = _one_symbol(fn, (3, 2, 2), 0, tmp_path)
    assert r.ranges["S"].contains(3)


def test_piece_count_flip_is_never_equivalent(tmp_path):
    """`split(3)` of T=3 is one piece of T items, the last; at T=4 the graph re-run in torch splits
    again and matches, but the export keeps one piece of T items (fuzz seed 4040369, then read as
    `[0]`, which is now a slice of 3 items at every size: see test_split_pieces.py): the range ends
    at 3."""
    r = _one_symbol(lambda x: x.split(3, -1)[-1].mT, (1, 1, 6, 3), 3, tmp_path, top=9)
    assert r.ranges["S"].hi == 3


def test_first_piece_of_a_split_holds_past_the_count(tmp_path):
    """fuzz seed 4040369 as it was: `split(3)[0]` reads the first piece only, the first 3 items at
    every size (of T=1 and 2, all T): no bound at the count's flip."""
    r = _one_symbol(lambda x: x.split(3, -1)[0].mT, (1, 1, 6, 3), 3, tmp_path, top=9)
    assert "S" not in r.ranges, r.ranges


def test_branch_equal_on_a_one_item_input_only(tmp_path):
    """A static one-item input, positive in the example: `relu` and the identity agree on it. Its
    value is redrawn on both sides of zero to judge the flip at S=2 (fuzz seed 4040115)."""
    def fn(x, y):
        v = y.expand(3)
        return F.relu(v) if x.shape[0] > 2 else v.flip(0)

    model = FnModule(fn)
    x, y = torch.randn(6, 4), torch.tensor([1.8459])
    dyn = {"x0": {0: "S"}}
    r = fx2nnef.export(model, (x, y), tmp_path / "m.nnef.tgz", branches="example", input_names=["x0", "x1"],
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn, check_io=False))
    assert r.ranges["S"].lo == 3


def _clamped_sum(x):
    v = x * 2 if x.shape[2] > 2 else x.roll(1, 0)
    return v.sum(2).clamp(-0.5, 0.5)


def _int_power(z):
    v = torch.where(z.clamp(-5, 5) == 0, 1, z.clamp(-5, 5)) ** torch.tensor([-1])
    return -v if z.shape[0] == 2 else v.flip(0)


def _positive_static(x, y):
    v = torch.stack([y >= -0.01] * 2, 1)
    return v.flip(1) if len(x) > 8 else v.roll(1, 0)


@pytest.mark.parametrize("fn, example, axis, flip", [
    # the sums of the example's large items saturate the clamp whether doubled or not (fuzz 5050129)
    (_clamped_sum, (torch.tensor([[[1.9, 1.8, -1.7], [-1.6, -1.9, 1.9]]]),), 2, 2),
    # integer ** -1 is 0 but at -1, 0 and 1: both branches give zeros (fuzz 5050453)
    (_int_power, (torch.tensor([15, -12, 18, 9]),), 0, 2),
    # a static input positive in the example: both rows of the stack agree (fuzz 5050026)
    (_positive_static, (torch.randn(6, 3), torch.tensor([0.7, 1.9])), 0, 9),
], ids=["clamped_sum", "int_power", "positive_static"])
def test_branch_equal_on_the_example_range_only(fn, example, axis, flip, tmp_path):
    """A flip judged equivalent is also compared on values drawn within a sixteenth of the example's
    range, on both sides of zero: the export's range ends before the flip."""
    names = [f"x{i}" for i in range(len(example))]
    r = fx2nnef.export(FnModule(fn), example, tmp_path / "m.nnef.tgz", branches="example", input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {axis: "S"}}, check_io=False))
    assert "S" in r.ranges and not r.ranges["S"].contains(flip), r.ranges


def test_every_other_size_bounds_nothing(tmp_path):
    """`reshape(B, -1, 2)` takes even sizes only: odd sizes are refused by the model itself and
    bound nothing; the graph declares S = 2*S_2 and runs at every even size, 2 included."""
    dyn = {"x0": {1: "S"}}
    model, ins, names, r = _export(lambda x: x.reshape(x.shape[0], -1, 2).sum(-1), [(3, 6)], dyn, tmp_path)
    rng = r.ranges["S"]
    assert rng.step == 2 and rng.lo in (None, 1, 2) and rng.hi is None
    assert "extension tract_symbol S_2;" in r.nnef_text
    assert _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in range(2, 21, 2)]) == 10


def test_flip_after_a_reshape(tmp_path):
    """tract cannot pull a reversing downsample through a reshape: flip is a gather."""
    dyn = {"x0": {0: "S"}}
    model, ins, names, r = _export(lambda x: x.view(x.shape[0] // 2, 2).flip(1), [(6,)], dyn, tmp_path, check_io=True)
    assert r.check.ok
    _sizes_check(model, ins, names, dyn, r, [{"S": n} for n in range(2, 13, 2)])


@pytest.mark.parametrize("kind", ["clamp_low", "clamp_high"])
def test_decision_equal_at_its_flip_but_not_beyond(kind, tmp_path):
    """``16 - S if 16 - S > 0 else 0`` flips at S=16, where both branches give 0: the graph
    (16 - S) still matches there, and was exported for every S (x * -4 at S=20 instead of 0). The
    next size on tells the branch apart. (Written ``max(0, 16 - S)``, it is no decision now: see
    test_size_extrema.py.)"""
    def fn(x):
        n = x.shape[1]
        k = (16 - n if 16 - n > 0 else 0) if kind == "clamp_low" else (n if n < 12 else 12) - 12
        return x * k + x
    r = _one_symbol(fn, (2, 10, 3), 1, tmp_path, top=24)
    bound = 16 if kind == "clamp_low" else 12
    assert r.ranges["S"].hi == bound and r.ranges["S"].lo is None, r.ranges
    assert f"extension tract_assert S <= {bound};" in _asserts(r)


def _chunked_cumsum(x):
    s = x.shape[1]
    y = F.pad(x, (0, 0, 0, (64 - s % 64) % 64)).reshape(x.shape[0], -1, 64, x.shape[2])
    return torch.cat([y[:, i].cumsum(1) for i in range(y.shape[1])], 1)[:, :s]


def test_loop_over_chunks_beyond_the_example_is_traced_there_and_rolls(tmp_path):
    """A loop over the chunks of 64 of the sequence runs once at S=10: the graph holds up to
    S=64, where torch's kernels and the loop decide otherwise. The export traces again just past
    that bound (S=65, two chunks), where the loop rolls into a scan: valid for every length,
    checked in tract at lengths of one, two and three chunks."""
    r = _one_symbol(_chunked_cumsum, (2, 10, 3), 1, tmp_path, top=12)
    assert not r.ranges, r.ranges
    assert any("is rolled into a scan" in n for n in r.notes), r.notes
    model = FnModule(_chunked_cumsum)
    tract_matches_eager(r.path, model, [[randn(2, n, 3, seed=n)] for n in (64, 65, 130, 191)])


def test_far_decision_far_above_the_example_is_not_traced_again(tmp_path):
    """A bound where torch's kernels decide otherwise far above the example (T=20481 for an example
    of 400, past 1024 and 4x the example) is kept without a trace there: it would cost a trace
    and two analyses at that size."""
    model = nn.Sequential(nn.Conv1d(1, 4, 10, stride=5), nn.ReLU(), nn.Conv1d(4, 4, 3, stride=2)).eval()
    r = fx2nnef.export(model, (torch.randn(1, 1, 400),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "T"}}, check_io=False))
    assert r.timings["graph_runs"] <= 12, r.timings


@pytest.mark.parametrize("pad", ["reflect", "zeros"])
def test_convolution_algorithm_choice_far_above_is_no_bound(tmp_path, pad):
    """torch's convolution picks another algorithm past a number of items (``4*T <= 20480``): a
    decision of its kernels alone, after which the replay's shapes still hold (fake runs at the
    change, just past it and at twice it). The export holds past it, at every T its convolutions
    accept (before: valid for T <= 20476 only, asserted in graph.nnef); checked in tract at T=30000."""
    model = nn.Sequential(nn.Conv1d(1, 4, 5, padding=2, padding_mode=pad), nn.ReLU(),
                          nn.Conv1d(4, 4, 3, stride=2)).eval()
    r = fx2nnef.export(model, (torch.randn(1, 1, 50),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "T"}}))
    assert r.check.ok and all(rng.hi is None for rng in r.ranges.values()), r.ranges
    x = torch.randn(1, 1, 30000, generator=torch.Generator().manual_seed(3))
    (got,) = run_tract_many(r.path, [[x.numpy()]])
    with torch.no_grad():
        np.testing.assert_allclose(got[0], model(x).numpy(), atol=1e-4, rtol=5e-4)


def test_branch_taken_on_odd_sizes_only_is_traced_there(tmp_path):
    """MobileViT pads to a multiple of its patch only when needed (``if new != S: interpolate``):
    an even example skips it, and the graph differs at every odd size, so its range is S=8 alone.
    The trace at the first size past that bound (S=9, not the S=10 already tried, which takes the
    example's path) holds the resize, which at even sizes gives the input back: valid for every S
    (before: refused as valid at the example size only)."""
    def fn(x):
        n = math.ceil(x.shape[1] / 2) * 2
        if n != x.shape[1]:
            x = F.interpolate(x.unsqueeze(1), size=(n, x.shape[2]), mode="bilinear", align_corners=False).squeeze(1)
        return x.reshape(x.shape[0], -1, 2, x.shape[2]).sum(2)
    r = _one_symbol(fn, (2, 8, 3), 1, tmp_path, top=13)
    assert not r.ranges, r.ranges
    assert any("traced again at" in n for n in r.notes), r.notes


def test_refusal_far_below_the_example_is_bisected_close(tmp_path):
    """A reflect pad of 64 refuses T <= 64; for an example of 4000 the probes bisect between the
    refused sizes and the good ones to within a few sizes of it (before: 4 probes, T >= 1032)."""
    class Frames(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 2, 128, stride=64)

        def forward(self, x):
            return self.conv(F.pad(x.unsqueeze(1), (64, 64), mode="reflect"))

    r = fx2nnef.export(Frames().eval(), (torch.randn(1, 4000),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "T"}}))
    assert r.check.ok and 65 <= r.ranges["T"].lo <= 72 and r.ranges["T"].hi is None, r.ranges


def _clamp_model(read):
    """``clamp(x + read(x), 1, 2)``: the clamp hides a wrong number added to x on most values."""
    return FnModule(lambda x: torch.clamp(x + read(x), 1.0, 2.0))


def _every_value(model, r, sizes):
    """tract against eager at each size, on inputs holding every integer from -20 to 2 (one of them
    tells a number added to x from one 1 apart, before the clamp)."""
    sets = [[torch.arange(-20, 3, dtype=torch.float32)[torch.arange(n) % 23] + k] for n in sizes for k in (0.0, 0.5)]
    tract_matches_eager(r.path, model, sets)


@pytest.mark.parametrize("read", [lambda x: float(x.shape[0]), lambda x: int(x.shape[0]),
                                  lambda x: divmod(x.shape[0], 4)[1] * 3 - divmod(x.shape[0], 4)[0],
                                  lambda x: torch.tensor(x.shape[0]).item(),
                                  lambda x: torch.scalar_tensor(x.shape[0] // 2, dtype=torch.float32).item() * 2],
                         ids=["float", "int", "divmod", "item", "item_float"])
def test_number_read_from_a_size_stays_traced(read, tmp_path):
    """float(), int(), divmod() and .item() of a tensor made of a size, in the model's code, give
    traced numbers: the graph computes them at every size (float() and .item() kept the example's
    6 before, which a clamp hid from the probes on their values: a range claimed wider than it held)."""
    model = _clamp_model(read)
    x = torch.randint(-20, 21, (6,), generator=torch.Generator().manual_seed(0)).float()
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "S"}}))
    assert r.check.ok and not r.ranges and not r.guards, (r.ranges, r.guards)
    _every_value(model, r, range(1, 15))


@pytest.mark.parametrize("seed", [0, 1])
def test_number_read_from_a_size_is_never_taken_as_equivalent(seed, tmp_path):
    """round() of a size is read as a Python number (a guard): where it differs, the graph holds the
    example's number even when the outputs agree on the probes' values; and a graph traced again at
    larger sizes (round(8 / 2) = 4) is not valid at the example (round(6 / 2) = 3). Before, the
    export claimed 6 <= S <= 9 with tract wrong at S=6 itself; now it is refused, naming the line."""
    model = _clamp_model(lambda x: round(x.shape[0] / 2))
    x = torch.randint(-20, 21, (6,), generator=torch.Generator().manual_seed(seed)).float()
    with pytest.raises(fx2nnef.GuardError, match=r"round\(%truediv\) -> 3 at .*test_dynamic_guards.py"):
        fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "S"}}))
