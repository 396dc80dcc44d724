"""Bugs found by the differential fuzzer (tests/fuzz), each as a small module exported with
dynamic axes, checked by the export and then run in tract at other sizes against PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F

from harness import check_op, randn, tract_matches_eager

W = randn(6, 4, seed=3)


def _check_sizes(fn, shapes, sizes, dynamic_axes, tmp_path, tolerance="approximate"):
    """Export ``fn`` on inputs of ``shapes`` (checked at that size), then run the asset in tract at
    each of ``sizes`` (one shape list per run) and compare with eager PyTorch."""
    xs = [randn(*s, seed=k) for k, s in enumerate(shapes)]
    result = check_op(fn, xs, tmp_path, tolerance=tolerance, dynamic_axes=dynamic_axes)
    from harness import FnModule

    sets = [[randn(*s, seed=10 + k + j) for j, s in enumerate(shape_set)] for k, shape_set in enumerate(sizes)]
    tract_matches_eager(result.path, FnModule(fn), sets)
    return result


# tract 0.23.9 took a matmul operand computed from an expand by item-wise ops as a broadcast and
# got its shape wrong: a load failure with a static count, size 1 (silently) with a dynamic one
ITEMWISE_OF_EXPAND = [
    ("neg", lambda x, z: (-x.expand(z.shape[0], -1, -1)) @ W),
    ("exp", lambda x, z: torch.exp(x.expand(z.shape[0], -1, -1)) @ W),
    ("gelu", lambda x, z: F.gelu(x.expand(z.shape[0], -1, -1)) @ W),
    ("cast", lambda x, z: (x * 3).long().expand(z.shape[0], -1, -1).float() @ W),
    ("linear", lambda x, z: F.linear(-x.expand(z.shape[0], -1, -1), W.t())),
    ("transposed", lambda x, z: W.t() @ (-x.expand(z.shape[0], -1, -1)).mT),
    ("dynamic_right", lambda x, z: torch.tanh(x.expand(z.shape[0], -1, -1)) @ x[0].t()),
    ("static_count", lambda x, z: (-x.expand(3, -1, -1)) @ W),
]


@pytest.mark.parametrize("name,fn", ITEMWISE_OF_EXPAND, ids=[c[0] for c in ITEMWISE_OF_EXPAND])
def test_matmul_of_itemwise_op_on_expand(name, fn, tmp_path):
    _check_sizes(fn, [(1, 7, 6), (5,)], [[(1, 2, 6), (1,)], [(1, 9, 6), (3,)], [(1, 1, 6), (8,)]],
                 {"x0": {1: "T"}, "x1": {0: "B"}}, tmp_path)


def test_matmul_of_itemwise_op_on_row_expand(tmp_path):
    """The row axis of the left operand broadcast to a dynamic count."""
    _check_sizes(lambda x: (-x.expand(-1, x.shape[0], -1)) @ W, [(7, 1, 6)], [[(2, 1, 6)], [(9, 1, 6)], [(1, 1, 6)]],
                 {"x0": {0: "T"}}, tmp_path)


def test_irfft_of_rfft_of_expand(tmp_path):
    """Fuzz seed 101 (default run): the inverse DFT's matmul took the negated imaginary part,
    computed from an expand, as a tile and tract failed to load the asset."""
    def fn(y):
        v = y.roll(1).expand(3, -1, -1)
        return torch.atan(torch.fft.irfft(torch.fft.rfft(v, dim=-1), n=v.shape[2], dim=-1))

    _check_sizes(fn, [(7, 6)], [[(7, 1)], [(1, 2)], [(15, 13)], [(6, 5)]], {"x0": {0: "T", 1: "S"}}, tmp_path)


def test_area_interpolation_to_an_unknown_size_is_refused(tmp_path):
    """Fuzz seed 1103: area interpolation by 1.5 of a ceil_mode pool's dynamic output, whose size
    the trace does not know, was lowered as adaptive pooling to None (keep the size): wrong shape
    at every size where floor(1.5 * n) != n, and right at the example (n = 1) where they agree."""
    from fx2nnef.errors import UnsupportedOpError

    def fn(x):
        return F.interpolate(F.avg_pool2d(x, 2, stride=3, ceil_mode=True), scale_factor=1.5, mode="area")

    with pytest.raises(UnsupportedOpError, match="area interpolation on a dynamic size"):
        check_op(fn, [randn(1, 2, 6, 3)], tmp_path, dynamic_axes={"x0": {3: "S"}})


def test_area_interpolation_over_dynamic_sizes(tmp_path):
    """Area interpolation to fixed sizes over a dynamic axis still exports (adaptive windows)."""
    _check_sizes(lambda x: F.interpolate(x, size=(3, 4), mode="area"), [(1, 2, 6, 9)],
                 [[(1, 2, 6, 4)], [(1, 2, 6, 13)], [(1, 2, 6, 2)]], {"x0": {3: "S"}}, tmp_path)


CROSS = [
    # torch.linalg.cross without dim works on the last axis, even when an earlier axis also has size 3
    ("linalg_default_last_axis", lambda x, y: torch.linalg.cross(x, y)),
    ("linalg_expanded_operand", lambda x, y: torch.linalg.cross(x * y, torch.tensor([0.3, -0.5, 0.8]).expand(x.shape))),
    ("torch_cross_first_axis_of_3", lambda x, y: torch.cross(x, y, dim=0)),
]


@pytest.mark.parametrize("name,fn", CROSS, ids=[c[0] for c in CROSS])
def test_cross_axis(name, fn, tmp_path):
    """Fuzz seed 2279 (focused run): torch.linalg.cross(a, b) of [3, 4, S, 3] operands was taken
    along axis 0 (torch.cross's dim=None rule), silently wrong at every size."""
    _check_sizes(fn, [(3, 4, 5, 3), (3, 4, 5, 3)], [[(3, 4, 1, 3), (3, 4, 1, 3)], [(3, 4, 9, 3), (3, 4, 9, 3)]],
                 {"x0": {2: "S"}, "x1": {2: "S"}}, tmp_path)


def _area_to_the_input_size(x):
    return F.interpolate(F.adaptive_max_pool2d(x, (7, 7)), size=x.shape[-2:], mode="area")


def _area_to_half(x):  # fuzz 31086: a dynamic length to a dynamic number of windows
    return F.interpolate(x.flatten(2), scale_factor=0.5, recompute_scale_factor=True, mode="area") * 2


def _adaptive_to_a_third(x):
    y = x.mean(2)  # (1, 3, T)
    return F.adaptive_avg_pool1d(y, y.shape[-1] // 3 + 1), F.adaptive_max_pool1d(y, y.shape[-1] // 3 + 1)


AREA = [("static_to_input_size", _area_to_the_input_size, [(1, 3, 3, 4)], [(1, 3, 13, 9)], [(1, 3, 1, 1)]),
        ("dynamic_to_half", _area_to_half, [(1, 3, 3, 4)], [(1, 3, 13, 9)], [(1, 3, 1, 2)]),
        ("dynamic_to_a_third", _adaptive_to_a_third, [(1, 3, 3, 4)], [(1, 3, 13, 9)], [(1, 3, 1, 1)])]


@pytest.mark.parametrize("name,fn,a,b,c", AREA, ids=[c[0] for c in AREA])
def test_area_interpolation_to_a_dynamic_size(name, fn, a, b, c, tmp_path):
    """Fuzz seeds 2161 and 31086: adaptive pooling to a number of windows that is dynamic (another
    tensor's size, a scale of the input's own) was refused; its windows are computed at run time
    as for a dynamic input length."""
    _check_sizes(fn, [(1, 3, 6, 7)], [a, b, c], {"x0": {2: "S", 3: "T"}}, tmp_path)


def _in_place_abs_through_views(x):
    top = torch.where(x > 0.2, x, 0.1).amax()
    row = top.unsqueeze(0)
    row.unsqueeze(0).abs_()  # changes row and top through the views
    return row, top


RANK0 = [
    ("in_place_through_views", _in_place_abs_through_views),
    ("reshape_to_scalar", lambda x: x.sum(0, keepdim=True).reshape(())),
    ("view_to_scalar", lambda x: x[:1].view([]) * 2),
]


@pytest.mark.parametrize("name,fn", RANK0, ids=[c[0] for c in RANK0])
def test_reshape_to_rank_0_loads_in_tract(name, fn, tmp_path):
    """Fuzz seed 3226: a one-item tensor reshaped to rank 0 was a reshape with shape [], which
    tract refused at load (its shape concat has no input). It is a squeeze."""
    _check_sizes(fn, [(6,)], [[(1,)], [(9,)]], {"x0": {0: "S"}}, tmp_path)
    for target in ("tract", "khronos"):
        (tmp_path / target).mkdir()
        check_op(fn, [randn(5)], tmp_path / target, target=target)


class _FlipOrRoll(torch.nn.Module):
    """Fuzz seed 1508: ``flip`` for S >= 4, ``roll`` below. At S=3 they agree on every draw of
    ``y > 0`` whose first two items are equal, which the probe's data of the example (all of
    ``y`` positive) always gave: the export claimed S=3 and was wrong there."""

    def forward(self, y):
        pos = y > 0
        return pos.flip(0) if y.shape[0] + 1 >= 5 else pos.roll(1, 0)


def test_a_branch_that_agrees_on_the_probe_data_only_bounds_the_range(tmp_path):
    import fx2nnef

    y = torch.tensor([3, 9, 7, 3])
    result = fx2nnef.export(_FlipOrRoll(), (y,), tmp_path / "m.nnef.tgz", input_names=["y"], branches="example",
                            target=fx2nnef.TractNNEF(dynamic_axes={"y": {0: "S"}}))
    assert result.ranges["S"].lo == 4, result.ranges
    tract_matches_eager(result.path, _FlipOrRoll(), [[torch.tensor([0, 5, 0, 2, 1])], [torch.arange(9) - 3]])


RESAMPLED_EXPANDS = [
    ("linear", lambda x: F.interpolate(x[-1, :2].expand(3, -1, -1), scale_factor=2, mode="linear", align_corners=True),
     (9, 8, 4), {0: "T", 1: "S"}),
    ("bilinear", lambda x: F.interpolate(x[:1].expand(3, -1, -1, -1), scale_factor=2, mode="bilinear"),
     (2, 3, 5, 6), {2: "H", 3: "W"}),
    ("adaptive_pool", lambda x: F.adaptive_avg_pool2d(x[:1].expand(3, -1, -1, -1), (2, 3)), (2, 3, 5, 6), {2: "H"}),
]


@pytest.mark.parametrize("name,fn,shape,axes", RESAMPLED_EXPANDS, ids=[c[0] for c in RESAMPLED_EXPANDS])
def test_resampling_matrix_applied_to_an_expand(name, fn, shape, axes, tmp_path):
    """Fuzz seed 123 (default run): the interpolation matrix multiplied an expanded input as a
    plain matmul, and tract failed to load it ("Trying to substitute a 3,2,8 by 1,2,8"). It goes
    through the matmul lowering, which multiplies the operand untiled."""
    (tmp_path / "static").mkdir()
    check_op(fn, [randn(*shape)], tmp_path / "static")
    check_op(fn, [randn(*shape)], tmp_path, dynamic_axes={"x0": axes})


C3 = torch.tensor([0.3, -0.5, 0.7])
W1X1 = randn(2, 4, 1, 1, seed=4)


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda x: F.conv2d(C3.expand(x.shape + (3,)) * x.unsqueeze(-1), W1X1, stride=2)),
    ("through_relu", lambda x: F.conv2d(torch.relu(x.unsqueeze(-1) - C3.expand(x.shape + (3,))), W1X1, stride=(2, 1))),
], ids=["mul", "through_relu"])
def test_strided_1x1_conv_of_a_broadcast_on_dynamic_sizes(name, fn, tmp_path):
    """Fuzz seed 9175: tract pulled a strided 1x1 conv's Downsample over the broadcast of a constant
    on dynamic sizes without updating its shape and failed to load ("Trying to substitute a
    T,4,S,2,F32 by T,4,S,3,F32")."""
    _check_sizes(fn, [(7, 4, 7)], [[(1, 4, 1)], [(2, 4, 8)], [(5, 4, 2)]], {"x0": {0: "T", 2: "S"}}, tmp_path)


@pytest.mark.parametrize("name,fn,shape,dyn", [
    ("pool1d", lambda x: F.adaptive_avg_pool1d(F.interpolate(x, scale_factor=2, mode="nearest"), 4), (5, 4, 4),
     {"x0": {0: "T", 2: "S"}}),
    ("pool2d_rows", lambda x: F.adaptive_avg_pool2d(F.interpolate(x, scale_factor=2, mode="nearest"), (3, 2)),
     (1, 2, 5, 4), {"x0": {2: "H", 3: "W"}}),
], ids=["pool1d", "pool2d_rows"])
def test_adaptive_pool_of_an_upsampling_on_dynamic_sizes(name, fn, shape, dyn, tmp_path):
    """Fuzz seed 9030: a nearest upsampling then an adaptive pool whose matrix is computed from the
    dynamic size: tract 0.23.9 never finished optimizing the product (a timeout at load)."""
    import fx2nnef
    from harness import FnModule, tract_matches_eager

    x = randn(*shape)
    asset = tmp_path / "m.nnef.tgz"
    fx2nnef.export(FnModule(fn), (x,), asset, input_names=["x0"],
                   target=fx2nnef.TractNNEF(dynamic_axes=dyn, timeout=60))
    sizes = [[randn(*[7 if i in dyn["x0"] else d for i, d in enumerate(shape)], seed=1)],
             [randn(*[2 if i in dyn["x0"] else d for i, d in enumerate(shape)], seed=2)]]
    tract_matches_eager(asset, FnModule(fn), sizes)


def _two_merged_decisions(x, y):
    v1 = y + len(x)
    v2 = torch.gather(v1, 0, x.long().abs() % 1)
    v3 = v2.cumsum(0) if v2.numel() <= 2 else v2.abs()
    v4 = v3.reshape(-1)
    v5 = v2.clone() if v4.shape[0] % 2 == 0 else v2
    v6 = v4 + len(v2)
    v7 = v6.reshape(-1)
    v6.zero_()
    return v7, v3, v5, v6


def test_merged_decisions_repeating_their_selects_run_in_tract(tmp_path):
    """Fuzz 24452: two decisions on sizes merged, each output's select and condition built
    again; tract 0.23.9 failed at run time ("eval() called on a Dummy op") on the repeats. Each
    computation is written once now. Exported without the check (whose failure would export the
    example's side instead), then run in tract at sizes on both sides of both decisions."""
    import fx2nnef
    from harness import FnModule

    model = FnModule(_two_merged_decisions)

    def inputs(n):
        g = torch.Generator().manual_seed(n)
        return [torch.randint(-5, 6, (n,), generator=g).to(torch.int32), torch.rand(1, generator=g) * 4 - 2]
    r = fx2nnef.export(model, tuple(inputs(5)), tmp_path / "m.nnef.tgz", input_names=["x", "y"],
                       target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {0: "S"}}))
    assert not r.ranges and sum(g.status == "merged" for g in r.graph.guards) == 2, r
    tract_matches_eager(r.path, model, [inputs(n) for n in (1, 2, 3, 4, 5, 6, 9)])


# fuzz campaign of issue 39 (seeds 100000..100399, --focus advwrite,size_branch,loop_small,...) ------------------

def _raw_in_tract(model, inputs_at, example: int, sizes, dynamic_axes: dict, names: list, tmp_path, valid=None):
    """Export ``model`` raw (``check_io=False``) on ``inputs_at(example)``; run the asset in tract
    at each of ``sizes`` the export claims valid and compare with eager PyTorch (the model run on
    copies). ``valid``: the sizes that must be claimed (default: all). Returns the result."""
    import fx2nnef
    from harness import tract_matches_eager

    tmp_path.mkdir(parents=True, exist_ok=True)
    r = fx2nnef.export(model, tuple(inputs_at(example)), tmp_path / "m.nnef.tgz", input_names=names,
                       target=fx2nnef.TractNNEF(check_io=False, dynamic_axes=dynamic_axes))
    symbol = next(iter(next(iter(dynamic_axes.values())).values()))
    rng = r.ranges.get(symbol)
    claimed = [n for n in sizes if rng is None or rng.contains(n)]
    assert claimed == list(valid if valid is not None else sizes), (r.ranges, claimed)

    class _OnCopies(torch.nn.Module):  # each run on the module as the export found it
        def forward(self, *xs):
            return copy.deepcopy(model)(*[x.clone() for x in xs])
    tract_matches_eager(r.path, _OnCopies(), [inputs_at(n) for n in claimed])
    return r


def _rand(n, seed, *shape_of_n):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(tuple(n if d is None else d for d in shape_of_n), generator=g) * 4 - 2


class _StepsWithoutIndex(torch.nn.Module):
    """``for _ in range(S - 1)``: the steps read no index and no piece of a tensor."""

    def forward(self, z):
        v = z * 1
        for _ in range(z.shape[1] - 1):
            v = torch.tanh(v) + 0.5
        return v


class _StepsWithoutIndexTwoCarries(torch.nn.Module):
    def forward(self, z):
        a, b = z[:, 0], z.sum(1)
        for _ in range(1, z.shape[1]):
            a, b = a * 0.5 + b, torch.tanh(b) - a
        return a, b


@pytest.mark.parametrize("model", [_StepsWithoutIndex(), _StepsWithoutIndexTwoCarries()], ids=["one_carry", "two"])
def test_rolled_loop_reading_no_index_loads_in_tract(model, tmp_path):
    """Fuzz seeds 198, 270 and 100013, 100087, ...: a Python loop over a dynamic count whose steps
    read neither the index nor a piece of a tensor rolls into a scan over the indices it visits,
    which the body does not read; tract 0.23.9 drops the unread scanned input and fails to load
    the scan ("No scan input"). A counter carry now reads it."""
    r = _raw_in_tract(model, lambda n: [_rand(n, n, 2, None, 3)], 5, [5, 1, 2, 4, 8, 11], {"z": {1: "S"}}, ["z"],
                      tmp_path)
    assert r.nnef_op_counts.get("tract_core_scan") == 1


def test_scan_whose_step_reads_no_scanned_item(tmp_path):
    """The same for torch's scan whose combine function ignores the scanned item."""
    from torch._higher_order_ops.scan import scan

    class M(torch.nn.Module):
        def forward(self, x):
            def step(c, _xt):
                c = torch.tanh(c) + 0.5
                return c, c.clone()
            return scan(step, x[0], x)

    _raw_in_tract(M(), lambda n: [_rand(n, n, None, 3)], 4, [4, 1, 2, 7], {"x": {0: "S"}}, ["x"], tmp_path)


class _WrittenAttribute(torch.nn.Module):
    """An attribute written in place without a clone, at positions from a dynamic size."""

    def __init__(self, origin: str, form: str):
        super().__init__()
        table = torch.linspace(-1.0, 1.0, 16).reshape(4, 4)
        if origin == "buffer":
            self.register_buffer("t", table)
        else:
            self.t = table  # neither parameter nor buffer
        self.form = form

    def forward(self, x):
        y = self.t
        where = torch.arange(x.shape[0]) % 4
        if self.form == "view":
            y.unsqueeze(0)[0, ..., where] = 0.375
        else:
            y[..., where] += 0.375
        return x + 1, y


@pytest.mark.parametrize("origin", ["plain", "buffer"])
@pytest.mark.parametrize("form", ["direct", "view"])
def test_attribute_written_without_clone_at_traced_positions(origin, form, tmp_path):
    """Fuzz seeds 242, 100205, 100214: ``y = self.t; y.unsqueeze(0)[0, ..., arange(S) % 4] = v``.
    The trace's and the probes' runs wrote the module's tensor, and a later trace took the
    written values as its data: wrong at the sizes that write fewer columns. The export now
    puts back what each run writes, and leaves the module as it found it."""
    model = _WrittenAttribute(origin, form)
    before = model.t.clone()
    _raw_in_tract(model, lambda n: [_rand(n, n, None, 3)], 6, [6, 1, 2, 3, 9], {"x": {0: "S"}}, ["x"], tmp_path)
    assert torch.equal(model.t, before)


def _write_empty_and_short_slices(y):
    y1 = y.clone()
    y1[0] = 0.2
    y1[2:1] = 0.1  # empty at every size
    y2 = y1 * 2
    y2[3:5] = -1.0  # past the end at small sizes
    return y1, y2, y1[2:5] + 1


def test_slice_bounds_clamped_alike_at_small_sizes(tmp_path):
    """Fuzz seeds 100159, 100256: an empty slice written (``y[2:1] = v``) and constant bounds past a
    dynamic axis at small sizes: the begin was left unclamped while the end was ``min(2,S)``, and
    tract failed at run time ("Invalid range 0..2") at S = 1."""
    from harness import FnModule

    sizes = [5, 1, 2, 3, 4, 8]
    model = FnModule(_write_empty_and_short_slices)
    _raw_in_tract(model, lambda n: [_rand(n, n, None)], 5, sizes, {"x0": {0: "S"}}, ["x0"], tmp_path,
                  valid=[n for n in sizes if n >= 2])  # y1[2:5] is empty at S = 1: the shapes fitted end there
    # both sides of the clamps at once: an example below them
    _raw_in_tract(model, lambda n: [_rand(n, n, None)], 2, [2, 3, 4, 5, 8], {"x0": {0: "S"}}, ["x0"],
                  tmp_path / "at2")


def _aliased_then_negated(x, y):
    v1 = y.reshape(-1)
    y.neg_()
    return torch.square(v1), v1, y, x.sum(1)


def _written_then_reduced(x, y):
    y[...] = -1.75
    v = x.clone()
    v[0:1] = 3.0
    return v, torch.tanh(y.sum() * 0.1) * x.mean(1), y


@pytest.mark.parametrize("fn", [_aliased_then_negated, _written_then_reduced], ids=["aliased", "reduced"])
def test_empty_example(fn, tmp_path):
    """Fuzz seeds 131, 263, 298, 100207, 100225: an example whose dynamic axis is empty (S = 0).
    The zero that hides values from tract's folding was sliced from an empty input (tract fails
    at run time); the views of an empty tensor had no memory to tell them apart (a write to one
    missed the other at S > 0)."""
    from harness import FnModule

    def inputs(n):
        return [_rand(n, n, 4, None), _rand(n, n + 1, None)]
    _raw_in_tract(FnModule(fn), inputs, 0, [0, 1, 2, 3, 5], {"x0": {1: "S"}, "x1": {0: "S"}}, ["x0", "x1"],
                  tmp_path)


def _narrow_below_threshold(x):
    if not (x.shape[1] > 2):
        return x.narrow(1, 0, 1)
    return -x


def _last_column_below_threshold(x):
    if x.shape[1] >= 3:
        return x.flip(1)
    return x[:, -1:]


@pytest.mark.parametrize("fn", [_narrow_below_threshold, _last_column_below_threshold], ids=["narrow", "last"])
def test_size_branch_at_an_example_of_one(fn, tmp_path):
    """Fuzz seeds 100370, 100385: a decision on a size exported at S = 1, whose outcome there
    narrows the axis to 1: the outcomes merged with select agree in shape at S = 1 only, and the
    sizes next to the example, where only torch's kernels were thought to decide, were not run.
    The merged graph broadcast the narrowed outcome at S = 2 (wrong shape). Such sizes are run
    for real now: the merge is dropped, the range ends before the decision flips."""
    from harness import FnModule

    _raw_in_tract(FnModule(fn), lambda n: [_rand(n, n, 2, None, 4)], 1, [1, 2, 3, 5], {"x0": {1: "S"}}, ["x0"],
                  tmp_path, valid=[1, 2])


def _numel_branch_narrowing(x):
    if x.numel() > 6:
        return x.cumsum(2)
    return x.narrow(2, 0, 1) + 1


def _numel_branch(x):
    if x.numel() > 6:
        return x.cumsum(2)
    return x + 1


def test_decision_flipping_with_two_symbols_moved_together(tmp_path):
    """Fuzz seed 200152: ``x.numel() > 6`` of ``2 * S * T`` items, exported at S=9, T=4, flips only
    where both are small (S = T = 1); each symbol moved alone kept it, the probes never ran there
    and the export claimed every size. The crossed small sizes are probed now: outcomes of one
    shape are merged with select, others are refused with the sizes where the graph is wrong."""
    import fx2nnef
    from fx2nnef.errors import GuardError
    from harness import FnModule, tract_matches_eager

    def inputs(s, t):
        return [_rand(s, s + t, 1, 2, s, t)]
    target = fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x0": {2: "S", 3: "T"}})
    r = fx2nnef.export(FnModule(_numel_branch), tuple(inputs(9, 4)), tmp_path / "m.nnef.tgz", input_names=["x0"],
                       target=target)
    assert not r.ranges and any(g.status == "merged" for g in r.graph.guards), r.graph.guards
    tract_matches_eager(r.path, FnModule(_numel_branch), [inputs(s, t) for s, t in ((1, 1), (1, 3), (2, 1), (9, 4),
                                                                                    (2, 2), (1, 7))])
    with pytest.raises(GuardError, match="S=1, T=1"):
        fx2nnef.export(FnModule(_numel_branch_narrowing), tuple(inputs(9, 4)), tmp_path / "n.nnef.tgz",
                       input_names=["x0"], target=target)
