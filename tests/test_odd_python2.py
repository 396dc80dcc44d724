"""More odd Python in forwards (battery 8): hooks, torch.compile, sizes made of subtracted floor
divisions, rolls by a size, running extremes and accumulating index_put along dynamic axes,
float16 models with float32 outputs. Each is exported with a dynamic axis, checked in tract
by the export itself, then run again in tract at another size."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from harness import FnModule, randn, tract_matches_eager, export_checked


_export = export_checked


def test_sizes_with_subtracted_floor_divisions(tmp_path):
    """``T - T//4 - T//2`` and ``T - T//2``: tract 0.23.9 evaluates ``S-((S)/2)`` as floor(S/2)
    (one short at odd S); the sizes are written with added divisions only."""
    def f(x):
        T = x.shape[1]
        a, b, c = x.split([T // 4, T // 2, T - T // 4 - T // 2], dim=1)
        half = x[:, T // 2:]
        return torch.cat([c.flip(1), a, b * 2], 1), half.flip(1) + torch.arange(half.shape[1])[None, :, None]

    model = FnModule(f)
    out = _export(model, [randn(2, 11, 3)], tmp_path, {"x": {1: "T"}}, ["x"])
    tract_matches_eager(out, model, [[randn(2, t, 3, seed=t)] for t in (5, 7, 13, 14)])


def test_dim_text_of_subtracted_divisions_evaluates_right_in_tract(tmp_path):
    """The written size expressions, each in a tract_core_range, at S = 2..24."""
    import tract

    from fx2nnef.ir import SymDim
    from fx2nnef.nnef_emit.context import dim_text

    S, fd = SymDim.symbol("S"), SymDim.floordiv
    exprs = [(S - fd(S, 2), lambda s: s - s // 2),
             (S - fd(S, 2) - fd(S, 4), lambda s: s - s // 2 - s // 4),
             (S - 2 * fd(S, 2) + 3, lambda s: s - 2 * (s // 2) + 3),
             (fd(S, 2) + fd(S, 3) - fd(S, 4), lambda s: s // 2 + s // 3 - s // 4),
             (S - fd(S - 1, 2) - fd(S + 1, 3), lambda s: s - (s - 1) // 2 - (s + 1) // 3)]
    for k, (d, want) in enumerate(exprs):
        folder = tmp_path / f"g{k}"
        folder.mkdir()
        (folder / "graph.nnef").write_text(
            "version 1.0;\nextension tract_registry tract_core;\nextension tract_symbol S;\n"
            "graph G( x ) -> ( y )\n{\n  x = tract_core_external(shape = [S], datum_type = 'f32');\n"
            f"  r = tract_core_range(0, {dim_text(d)}, 1);\n  y = tract_core_cast(r, to = 'i64');\n}}\n")
        model = tract.nnef().load(str(folder)).into_runnable()
        got = [model.run([np.zeros(s, np.float32)])[0].to_numpy().shape[0] for s in range(2, 25)]
        assert got == [want(s) for s in range(2, 25)], (str(d), dim_text(d))


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.lin.register_forward_pre_hook(lambda mod, args: (args[0] * 2 + 1,))
        self.lin.register_forward_hook(lambda mod, args, out: out.relu() - args[0].mean(-1, keepdim=True))
        self.register_forward_pre_hook(lambda mod, args: (args[0].flip(1),))
        self.register_forward_hook(lambda mod, args, out: out * 3)

    def forward(self, x):
        return self.lin(x).sum(-1) + torch.arange(x.shape[1])


def test_forward_hooks_of_the_model_and_its_submodules(tmp_path):
    model = Hooked().eval()
    out = _export(model, [randn(2, 5, 8)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(2, 9, 8, seed=2)]])


@torch.compile(backend="eager")  # dynamo without inductor: the reference runs stay quick
def _compiled_helper(x):
    return x.softmax(-1) * x.shape[-1]


class WithCompiled(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)))

    def forward(self, x):
        return _compiled_helper(x + self.inner(x))


def test_torch_compiled_submodule_function_and_model(tmp_path):
    """torch.compile'd pieces are traced through the Python they wrap (dynamo refused fx tracing);
    the export's own runs of the model compile no module."""
    model = WithCompiled().eval()
    for k, m in enumerate([model, torch.compile(model)]):
        (tmp_path / str(k)).mkdir()
        out = _export(m, [randn(2, 5, 8)], tmp_path / str(k), {"x": {1: "S"}}, ["x"])
        with torch.compiler.set_stance("force_eager"):  # the reference here compiles nothing either
            tract_matches_eager(out, model, [[randn(2, 11, 8, seed=2)]])


def test_roll_by_shifts_read_from_sizes(tmp_path):
    """Shifts of both signs computed from a dynamic size, on that axis and on another one."""
    def f(x):
        return (torch.roll(x, shifts=x.shape[1] // 3, dims=1) - torch.roll(x, -(x.size(1) // 2), 1)
                + x.roll((1, -2), (0, 1)) + x.roll(x.shape[1] - 7, 0))

    model = FnModule(f)
    out = _export(model, [randn(3, 10)], tmp_path, {"x": {1: "S"}}, ["x"])
    tract_matches_eager(out, model, [[randn(3, s, seed=s)] for s in (1, 2, 17)])


def test_running_extremes_along_a_dynamic_axis(tmp_path):
    """cummax / cummin along a dynamic axis: ties give the later index, a NaN stays once met."""
    def f(x, i):
        a, ai = x.cummax(1)
        b, bi = x.cummin(-1)
        c, ci = i.cummax(1)
        return a, ai, b, bi, c, ci

    nan = float("nan")
    x = torch.tensor([[1., 3., 3., nan, 2., 5., 5., -1.], [0., 0., -2., 4., 4., 1., 7., 7.]])
    i = torch.tensor([[1, 3, 3, 2, 2, 5, 5, -1], [0, 0, -2, 4, 4, 1, 7, 7]])
    model = FnModule(f)
    out = _export(model, [x, i], tmp_path, {"x": {1: "S"}, "i": {1: "S"}}, ["x", "i"])
    g = torch.Generator().manual_seed(1)
    x2 = torch.randint(0, 4, (2, 13), generator=g).float()
    x2[0, 5] = x2[1, 2] = x2[1, 9] = nan
    tract_matches_eager(out, model, [[x2, torch.randint(-3, 3, (2, 13), generator=g)]])


def test_index_put_with_accumulate(tmp_path):
    """Repeated positions add up; negative indices count from the end; rows of a trailing axis."""
    def f(x, idx, v):
        y = torch.zeros(x.shape[0], 6)
        y.index_put_((torch.arange(x.shape[0])[:, None], idx), v, accumulate=True)
        hist = torch.zeros(6).index_put((idx.flatten(),), v.flatten(), accumulate=True)
        rows = torch.zeros(5, x.shape[1]).index_put((idx[:, 0] % 5 - 5,), x, accumulate=True)
        return y + x.sum(-1, keepdim=True), hist, rows, x.index_put((idx[:, 0] % x.shape[0],), v)

    idx = torch.tensor([[0, 0, 5, 2], [1, 1, -1, 3], [4, 0, 4, -6]])
    model = FnModule(f)
    out = _export(model, [randn(3, 4), idx, randn(3, 4, seed=3)], tmp_path,
                  {"x": {0: "B"}, "idx": {0: "B"}, "v": {0: "B"}}, ["x", "idx", "v"])
    idx2 = torch.tensor([[5, 5, 5, -2], [0, 1, 2, 3], [4, 4, 4, 4], [-1, 0, -1, 0], [2, 2, 3, 3]])
    tract_matches_eager(out, model, [[randn(5, 4, seed=2), idx2, randn(5, 4, seed=4)]])


class HalfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, am):
        sc = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(x.shape[-1])
        mask = (1.0 - am[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        causal = torch.full((x.shape[1], x.shape[1]), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
        return (sc + mask + causal).softmax(-1).float()


def test_float32_output_of_a_float16_model_is_checked_at_float16_bounds(tmp_path):
    """``.float()`` at the end of a float16 model: the check compares at the level's float16
    bounds (the values carry float16 rounding), not at float32 ones."""
    from fx2nnef.targets.tolerance import compare_outputs
    from fx2nnef.targets.tract_runner import run_tract_many

    torch.manual_seed(0)
    model = HalfAttention().half().eval()
    am = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1)).half()
    out = _export(model, [x, am], tmp_path, {"x": {1: "S"}, "am": {1: "S"}}, ["x", "am"])
    x2, am2 = randn(2, 9, 8, seed=2).half(), torch.tensor([[1] * 9, [0, 0] + [1] * 7])
    got = run_tract_many(out, [[x2.numpy(), am2.numpy()]])[0]
    with torch.no_grad():
        want = model(x2, am2).numpy()
    assert all(d.ok for d in compare_outputs(None, [want], got, "approximate", half=[True]))
    assert not all(d.ok for d in compare_outputs(None, [want], [got[0] + 3e-3], "approximate", half=[True]))


def test_repeat_interleave_with_per_item_counts_known_when_exporting(tmp_path):
    """Counts from a constant (a length regulator's durations) or built from sizes (segment ids
    of two concatenated sequences): one tiled slice per item; a count may be 0 at some size."""
    def f(x, y):
        reps = torch.tensor([x.shape[1], y.shape[1]])
        seg = torch.repeat_interleave(torch.arange(2), reps)
        stretched = x.repeat_interleave(torch.tensor([2, 0, 3, 1]), dim=2)
        ramp = torch.repeat_interleave(torch.arange(3), torch.tensor([x.shape[1], 1, y.shape[1] - 1]))
        return torch.cat([x, y], 1) + seg[None, :, None], stretched, ramp

    model = FnModule(f)
    out = _export(model, [randn(1, 3, 4), randn(1, 5, 4, seed=2)], tmp_path, {"x": {1: "A"}, "y": {1: "B"}},
                  ["x", "y"])
    tract_matches_eager(out, model, [[randn(1, 6, 4, seed=3), randn(1, 1, 4, seed=4)],
                                     [randn(1, 1, 4, seed=5), randn(1, 7, 4, seed=6)]])
