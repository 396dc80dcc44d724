"""Models valid on a lattice of sizes only (H a multiple of 8, 32, ...): branches added or
concatenated after stride-2 convolutions and upsampling (a UNet, an HRNet fuse, a DLA-like
concat). A stride-2 stem rounds a size just below a multiple up, so the model also accepts a few
sizes off the lattice (15 and 16 both give 8): no step shows in the sizes near the example, and
the plain range is short or holds refused sizes. The export then takes the finest power-of-two
step the graph holds on below and above the example, declares the size as ``8*H_8``, checks in
tract at sizes on it, and tract refuses a size off it (see fx2nnef/fx_tracer/shapes/lattice.py).
"""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import GuardError
from fx2nnef.targets.tract_runner import run_tract_many

from harness import noisy


class StemUNet(nn.Module):
    """A stride-2 stem, then two stride-2 convs down and two nearest x2 upsamplings up, each
    added to the skip of its level: valid at H = 8k (and 8k - 1, rounded up by the stem)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, 2, 1)
        self.d1 = nn.Conv2d(4, 4, 3, 2, 1)
        self.d2 = nn.Conv2d(4, 4, 3, 2, 1)
        self.u1 = nn.Conv2d(4, 4, 3, padding=1)
        self.u2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        a = torch.relu(self.stem(x))
        b = torch.relu(self.d1(a))
        c = torch.relu(self.d2(b))
        b = b + self.u1(F.interpolate(c, scale_factor=2.0, mode="nearest"))
        return a + self.u2(F.interpolate(b, scale_factor=2.0, mode="nearest"))


class HRFuse(nn.Module):
    """HRNet's fuse of two branches: the stride-2 one upsampled x2 and added to the full one."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, 2, 1)
        self.low = nn.Conv2d(4, 8, 3, 2, 1)
        self.up = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = torch.relu(self.stem(x))
        b = torch.relu(self.low(a))
        return a + F.interpolate(self.up(b), scale_factor=2, mode="nearest")


class CatUp(nn.Module):
    """DLA-like aggregation: a branch two stride-2 convs down, brought up x4 by a transposed
    conv and concatenated with the skip."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, 2, 1)
        self.d1 = nn.Conv2d(4, 4, 3, 2, 1)
        self.d2 = nn.Conv2d(4, 4, 3, 2, 1)
        self.up = nn.ConvTranspose2d(4, 4, 4, 4)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = torch.relu(self.stem(x))
        c = self.d2(torch.relu(self.d1(a)))
        return self.out(torch.cat([a, self.up(c)], 1))


def _export(model, hw, tmp_path, check_io=True):
    x = torch.randn(1, 3, *hw, generator=torch.Generator().manual_seed(0))
    return fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}, check_io=check_io))


def _tract_at(model, path, sizes):
    """The asset run in tract at each (B, H, W), compared with eager."""
    sets, expected = [], []
    for b, h, w in sizes:
        x = torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(h * 1000 + w))
        with torch.no_grad():
            expected.append(model(x).numpy())
        sets.append([x.numpy()])
    for size, got, exp in zip(sizes, run_tract_many(path, sets), expected):
        assert got[0].shape == exp.shape, size
        np.testing.assert_allclose(got[0], exp, atol=1e-4, rtol=5e-4, err_msg=str(size))


def _on_lattice(r, step):
    for s in ("H", "W"):
        rng = r.ranges[s]
        assert (rng.step, rng.rest, rng.lo, rng.hi) == (step, 0, None, None), rng
        assert "refuses" in rng.why, rng
    assert f"{step}*H_{step}" in r.nnef_text.replace(" ", "")


@pytest.mark.parametrize("check_io", [True, False])
def test_unet_with_stem_exports_on_a_lattice(tmp_path, check_io):
    model = noisy(StemUNet())
    r = _export(model, (32, 32), tmp_path, check_io)
    _on_lattice(r, 8)
    assert not r.ranges["H"].contains(31) and not r.ranges["H"].contains(36)
    if check_io:  # the check ran in tract on the lattice, batch and sizes moved together too
        assert r.check.ok and len(r.check.cases) >= 3, r.check
        assert any("H=40" in name and "B=2" in name for name, _ in r.check.cases), r.check.cases
    _tract_at(model, r.path, [(1, 32, 32), (2, 40, 24), (1, 16, 48)])


def test_off_lattice_size_refused_by_tract(tmp_path):
    model = noisy(StemUNet())
    r = _export(model, (32, 32), tmp_path, check_io=False)
    with pytest.raises(Exception):
        run_tract_many(r.path, [[torch.randn(1, 3, 36, 32).numpy()]])


def test_hrnet_like_fuse(tmp_path):
    model = noisy(HRFuse())
    r = _export(model, (32, 32), tmp_path)
    _on_lattice(r, 4)
    _tract_at(model, r.path, [(1, 28, 36), (2, 12, 64)])


@pytest.mark.parametrize("check_io", [True, False])
def test_dla_like_concat(tmp_path, check_io):
    # without the lattice, tract refused the asset at load: concat of (H+1)/2 and 4*((H+7)/8)
    model = noisy(CatUp())
    r = _export(model, (32, 32), tmp_path, check_io)
    _on_lattice(r, 8)
    _tract_at(model, r.path, [(1, 24, 40), (2, 48, 16)])


class StemThenFixedGrid(nn.Module):
    """A stride-2 stem, then a learned 8 x 8 map added: valid at H = 15 and 16 only, on no
    lattice."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, 2, 1)
        self.pos = nn.Parameter(torch.randn(1, 4, 8, 8))

    def forward(self, x):
        return self.stem(x) + self.pos


def test_no_lattice_is_one_clear_refusal(tmp_path):
    with pytest.raises(GuardError) as e:
        _export(StemThenFixedGrid().eval(), (16, 16), tmp_path)
    text = str(e.value)
    assert "valid at a few sizes only" in text and "no power-of-two step has sizes both below and above" in text, text
    assert "H=8,12,14 do not" in text, text


def _stem_and_five_levels(n: int) -> str:
    """HRNet's sizes: two stride-2 stem convs (ceil(H/4)), then three more levels down and up."""
    return "good" if -(-n // 4) % 8 == 0 else "refused"


@pytest.mark.parametrize("v, step, rest, runs", [(64, 32, 0, 10), (63, 32, 31, 11), (128, 32, 0, 11)])
def test_lattice_range_finds_the_finest_step(v, step, rest, runs):
    from fx2nnef.fx_tracer.shapes.lattice import lattice_range, wants_lattice
    from fx2nnef.ir import SymRange

    results = {n: _stem_and_five_levels(n) for n in (v - 1, v - 2, v // 2, v + 1, v + 2, v + 3)}
    plain = SymRange("H", v - 1, v, 1, 0)  # the few sizes probed near the example
    assert wants_lattice(plain, v, results)
    ran = []
    rng, tried = lattice_range("H", v, results, lambda n: ran.append(n) or _stem_and_five_levels(n))
    assert (rng.step, rng.rest, rng.lo, rng.hi) == (step, rest, None, None), rng
    assert len(ran) <= runs and all(_stem_and_five_levels(n) != "good" for n in tried), (ran, tried)
    assert "refuses H=" in rng.why


def test_no_lattice_wanted_where_nothing_is_refused():
    from fx2nnef.fx_tracer.shapes.lattice import wants_lattice
    from fx2nnef.ir import SymRange

    assert not wants_lattice(SymRange("H", None, None, 1, 0), 16, {15: "good", 17: "good", 32: "good"})
    assert not wants_lattice(SymRange("H", 8, None, 1, 0), 16, {4: "refused", 17: "good"})  # a bound below only


def test_no_lattice_for_refusals_far_from_the_example():
    # a reflect pad refusing T=17..20 for an example of 100 (tests/test_library_patterns.py): the
    # model runs at 99 and 101, so no lattice is tried, and no run is spent
    from fx2nnef.fx_tracer.shapes.lattice import lattice_range

    results = {n: "refused" for n in range(17, 21)} | {n: "good" for n in (16, 50, 98, 99, 101, 102, 103)}
    rng, tried = lattice_range("T", 100, results, lambda n: pytest.fail(f"ran T={n}"))
    assert rng is None and tried == []
