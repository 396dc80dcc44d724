"""Bicubic F.interpolate over dynamic sizes (the position-embedding resize of vision transformers):
a static grid resized to a size computed from the dynamic H and W, a dynamic input resized by a
factor or to a fixed size, a scale factor computed from sizes (DINOv2 style), then transformers'
ViT and DINOv2 with ``interpolate_pos_encoding``; each exported with dynamic H and W, checked by
the export, then run in tract at other sizes (on integer source positions, downscaling, 1x1)
and compared with PyTorch."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.errors import CheckIOError, UnsupportedOpError
from harness import FnModule, randn, tract_matches_eager

# the matrix is continuous in the source position: tract's f32 division (an ulp off now and then)
# moves the result by a few ulps, never by a pixel's difference
TIGHT = 1e-5


def tract_max_diff(asset, model, input_sets) -> float:
    """Run ``asset`` in tract on each input set, compare with the model at tract's approximate
    level, and return the largest absolute difference relative to max(1, |expected|)."""
    import numpy as np

    from fx2nnef.targets.tract_runner import run_tract_many

    tract_matches_eager(asset, model, input_sets)
    worst = 0.0
    for ins, outs in zip(input_sets, run_tract_many(asset, [[t.numpy() for t in s] for s in input_sets])):
        with torch.no_grad():
            exp = model(*ins).numpy()
        assert outs[0].shape == exp.shape
        worst = max(worst, float(np.abs(outs[0] - exp).max(initial=0.0)) / max(1.0, float(np.abs(exp).max(initial=0.0))))
    return worst

GRID = randn(1, 4, 5, 5, seed=7) * 3  # a position-embedding grid, N = 25


def export_dynamic(model, shape, tmp_path, name="x0"):
    r = fx2nnef.export(model, (randn(*shape),), tmp_path / "bicubic.nnef.tgz", input_names=[name],
                       target=fx2nnef.TractNNEF(dynamic_axes={name: {2: "H", 3: "W"}}))
    assert r.check.ok and r.symbols == ["H", "W"]
    return r


def assert_smallest(r, lo):
    """No range (``lo`` None: valid for every size, nothing baked), or H and W from ``lo`` up,
    where the model refuses ``lo - 1`` (an output of no pixel: torch refuses it)."""
    if lo is None:
        assert not r.ranges, r.ranges
        return
    assert set(r.ranges) == {"H", "W"}, r.ranges
    for rng in r.ranges.values():
        assert rng.lo == lo and rng.hi is None and f"the model refuses {rng.symbol}={lo - 1}" in rng.why, rng


def check_sizes(model, shape, sizes, tmp_path, lo=None):
    """Export with dynamic H and W on an input of ``shape``, then run the asset at each (H, W) of
    ``sizes`` (other dims as in ``shape``) and compare with the model. ``lo``: the smallest size
    the model takes (see :func:`assert_smallest`)."""
    r = export_dynamic(model, shape, tmp_path)
    assert_smallest(r, lo)
    sets = [[randn(*shape[:2], h, w, seed=10 + k)] for k, (h, w) in enumerate(sizes)]
    assert tract_max_diff(r.path, model, sets) < TIGHT
    return r


# grid of 5x5 resized to (H // 4, W // 4): equal sizes (20), 2x (40) and 0.5x (8, 12) land source
# positions on integers and half-integers, others between; 1x1 and 2x3 are below the grid
GRID_SIZES = [(20, 20), (40, 8), (4, 4), (80, 44), (9, 13), (12, 100), (7, 5)]


@pytest.mark.parametrize("align_corners", [False, True])
def test_static_grid_to_dynamic_size(align_corners, tmp_path):
    def resize(self, x):
        return F.interpolate(self.grid, size=(x.shape[2] // 4, x.shape[3] // 4), mode="bicubic",
                             align_corners=align_corners)

    # H // 4 is no pixel below H = 4: torch refuses it. With align_corners, torch's meta kernel
    # accepts the empty output: the fake run at H = 3 shows the replay's shapes and no real run
    # is made there, so the refusal is not seen and the range stays open (an empty output in tract)
    check_sizes(FnModule(resize, grid=GRID), (1, 3, 24, 36), GRID_SIZES, tmp_path, lo=None if align_corners else 4)


def test_static_grid_scale_factor_from_sizes(tmp_path):
    """DINOv2's older form: ``scale_factor=(h / sqrt(N), w / sqrt(N))``, the factor a float
    computed at run time from the sizes, used by torch for the source positions."""

    def resize(self, x):
        h, w = x.shape[2] // 4, x.shape[3] // 4
        n = math.sqrt(self.grid.shape[-1] * self.grid.shape[-2])
        return F.interpolate(self.grid, scale_factor=(h / n, w / n), mode="bicubic", align_corners=False)

    r = export_dynamic(FnModule(resize, grid=GRID), (1, 3, 24, 36), tmp_path)
    sets = [[randn(1, 3, h, w, seed=10 + k)] for k, (h, w) in enumerate(GRID_SIZES)]
    assert tract_max_diff(r.path, FnModule(resize, grid=GRID), sets) < TIGHT


def test_scale_factor_through_float_follows_the_size(tmp_path):
    """``float(h) / N`` (DINOv2's own code): float() of a traced size stays traced, so the scale
    factor follows the input's size (before: the size was read as a Python number, baked, and the
    export bounded to the sizes where that held)."""

    def resize(self, x):
        h, w = x.shape[2] // 4, x.shape[3] // 4
        return F.interpolate(self.grid, scale_factor=(float(h) / 5, float(w) / 5), mode="bicubic")

    model = FnModule(resize, grid=GRID)
    r = fx2nnef.export(model, (randn(1, 3, 24, 36),), tmp_path / "f.nnef.tgz",
                       input_names=["x0"], target=fx2nnef.TractNNEF(dynamic_axes={"x0": {2: "H", 3: "W"}}))
    assert r.check.ok and not r.guards, r.guards
    assert r.ranges["H"].lo == 4 and r.ranges["H"].hi is None and r.ranges["W"].lo == 4 and r.ranges["W"].hi is None
    tract_matches_eager(r.path, model, [[randn(1, 3, h, w)] for h, w in ((20, 40), (44, 28), (23, 37), (8, 8))])


INPUT_RESIZES = [
    ("scale2", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), [(1, 1), (2, 3), (9, 4), (16, 31)]),
    ("scale2_ac", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
     [(1, 1), (2, 3), (9, 4)]),
    ("scale0_5", lambda x: F.interpolate(x, scale_factor=0.5, mode="bicubic"), [(2, 2), (4, 9), (19, 4), (3, 40)]),
    ("scale1_5", lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"), [(1, 2), (6, 13), (11, 3)]),
    ("scale0_25_recompute", lambda x: F.interpolate(x, scale_factor=0.25, mode="bicubic", recompute_scale_factor=True),
     [(4, 7), (23, 11), (13, 30)]),
    ("size_fixed", lambda x: F.interpolate(x, size=(5, 4), mode="bicubic"), [(1, 1), (5, 4), (19, 2), (3, 30)]),
    ("size_fixed_ac", lambda x: F.interpolate(x, size=(5, 4), mode="bicubic", align_corners=True),
     [(1, 1), (5, 4), (19, 2), (9, 7)]),
    ("size_1x1", lambda x: F.interpolate(x, size=(1, 1), mode="bicubic"), [(1, 1), (2, 2), (7, 3)]),
    ("size_1x1_ac", lambda x: F.interpolate(x, size=1, mode="bicubic", align_corners=True), [(1, 1), (7, 3)]),
    ("size_from_input", lambda x: F.interpolate(x, size=(x.shape[2] * 2 + 1, x.shape[3] // 2 + 1), mode="bicubic"),
     [(1, 1), (7, 3), (4, 16)]),
]


@pytest.mark.parametrize("name,fn,sizes", INPUT_RESIZES, ids=[c[0] for c in INPUT_RESIZES])
def test_dynamic_input(name, fn, sizes, tmp_path):
    check_sizes(FnModule(fn), (2, 3, 10, 7), sizes, tmp_path, lo=4 if name == "scale0_25_recompute" else None)


def test_size_without_closed_form_refused(tmp_path):
    """floor(0.7 * H) has no size expression (62 at H=90, not (7 * H) // 10 = 63): refused clearly
    rather than guessed. (floor(1.7 * H) is (17 * H) // 10 at every size, and exports.)"""
    model = FnModule(lambda x: F.interpolate(x, scale_factor=0.7, mode="bicubic"))
    with pytest.raises(UnsupportedOpError, match="bicubic interpolation on a dynamic size needs the traced output size"):
        export_dynamic(model, (1, 3, 10, 7), tmp_path)


# check_io now also runs the edges of the declared range: at an output width of 1 (W=2 halved, W=4
# quartered) tract's antialiased resize differs from torch along the width (not along the height),
# so the export fails its check instead of claiming that size. An open bug, kept visible: strict.
_ONE_COLUMN = pytest.mark.xfail(strict=True, raises=CheckIOError,
                                reason="antialiased resize to a width of 1 differs in tract (edge of the range)")


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("how", [pytest.param("grid_to_size", marks=_ONE_COLUMN), pytest.param("half", marks=_ONE_COLUMN),
                                 "to_fixed"])
def test_antialias_on_dynamic_sizes(tmp_path, mode, how):
    """Antialiased resizing over dynamic sizes: torch's filter over every input pixel, normalised
    per row, computed in the graph (continuous in the scale, no floor); run at other sizes,
    down- and upsampling."""
    from fx2nnef.targets.tract_runner import run_tract_many

    fns = {
        "grid_to_size": lambda self, x: F.interpolate(self.grid, size=(x.shape[2] // 4, x.shape[3] // 4), mode=mode,
                                                      antialias=True),
        "half": lambda self, x: F.interpolate(x, scale_factor=0.5, mode=mode, antialias=True),
        "to_fixed": lambda self, x: F.interpolate(x, size=(7, 5), mode=mode, antialias=True),
    }
    model = FnModule(fns[how], grid=GRID)
    r = export_dynamic(model, (1, 3, 40, 56), tmp_path)
    assert_smallest(r, {"grid_to_size": 4, "half": 2}.get(how))
    ins = [randn(1, 3, h, w, seed=h) for h, w in ((32, 32), (64, 24), (16, 72), (88, 60))]
    for x, got in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        with torch.no_grad():
            expected = model(x).numpy()
        np.testing.assert_allclose(got[0], expected, atol=1e-4, rtol=5e-4, err_msg=str(x.shape))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("how", [dict(size=(5, 7)), dict(size=(20, 33)), dict(scale_factor=0.37),
                                 dict(scale_factor=(0.5, 1.7)), dict(size=(4, 3), align_corners=True)],
                         ids=["down", "up", "scale", "scales", "align_corners"])
def test_antialias_static(tmp_path, mode, how):
    """Antialiased resizing with static sizes (DINOv2 with registers' and TIPS' position
    embeddings): one matrix per axis, whose weights are read from torch's own resize of unit
    vectors (before: refused)."""
    from harness import check_op, randn

    r = check_op(lambda x: F.interpolate(x, mode=mode, antialias=True, **how), [randn(2, 3, 17, 12)], tmp_path)
    assert r.check.ok


def test_antialias_with_an_axis_of_one_refused(tmp_path):
    """torch's antialiased weights differ on a tensor with a spatial size of 1 (its kernel then
    mixes every output the same way): refused rather than guessed."""
    from harness import check_op, randn

    with pytest.raises(UnsupportedOpError, match="spatial size of 1"):
        check_op(lambda x: F.interpolate(x, size=(5, 1), mode="bilinear", antialias=True), [randn(1, 1, 17, 1)],
                 tmp_path)


# transformers' vision transformers with interpolate_pos_encoding ------------------------------------
def _randomize_norms(model):
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return model.eval()


class Wrapped(torch.nn.Module):
    def __init__(self, model, **kwargs):
        super().__init__()
        self.model, self.kwargs = model, kwargs

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values, **self.kwargs)
        return out.last_hidden_state, out.pooler_output


TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
            patch_size=8)


def _check_vit_like(model, tmp_path):
    torch.manual_seed(0)
    r = fx2nnef.export(model, (randn(1, 3, 40, 56),), tmp_path / "vit.nnef.tgz", input_names=["pixel_values"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"pixel_values": {2: "H", 3: "W"}}))
    assert r.check.ok and r.symbols == ["H", "W"]
    # only the patch size bounds the sizes (the patch embedding refuses an image below one patch)
    assert {k: str(v).split(" (")[0] for k, v in r.ranges.items()} == {"H": "H >= 8", "W": "W >= 8"}, r.ranges
    sets = [[randn(1, 3, h, w, seed=20 + k)] for k, (h, w) in enumerate([(32, 32), (64, 24), (16, 72)])]
    tract_matches_eager(r.path, model, sets)


def test_vit_interpolate_pos_encoding(tmp_path):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    vit = _randomize_norms(ViTModel(ViTConfig(**TINY)))
    _check_vit_like(Wrapped(vit, interpolate_pos_encoding=True), tmp_path)


def test_dinov2(tmp_path):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    dino = _randomize_norms(Dinov2Model(Dinov2Config(**TINY)))
    _check_vit_like(Wrapped(dino), tmp_path)


def test_dinov2_with_registers_static(tmp_path):
    """DINOv2 with registers resizes its position embeddings with antialiased bicubic to
    ``size=(torch_int(height), torch_int(width))``: exported with static sizes, and with dynamic H
    and W run at other sizes (transformers' torch_int keeps a traced size traced; before: int()
    fixed it, valid for 40 <= H <= 45 only)."""
    import transformers as T

    cfg = T.Dinov2WithRegistersConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                      image_size=32, patch_size=8, num_register_tokens=2)
    torch.manual_seed(0)
    model = _randomize_norms(T.Dinov2WithRegistersModel(cfg).eval())
    r = fx2nnef.export(model, (torch.randn(1, 3, 40, 56),), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF())
    assert r.check.ok
    r = fx2nnef.export(model, (torch.randn(1, 3, 40, 56),), tmp_path / "d.nnef.tgz", input_names=["pixel_values"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"pixel_values": {2: "H", 3: "W"}}))
    assert r.check.ok
    ins = [torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h)) for h, w in ((32, 32), (64, 24))]
    from fx2nnef.targets.tract_runner import run_tract_many
    for x, got in zip(ins, run_tract_many(r.path, [[x.numpy()] for x in ins])):
        with torch.no_grad():
            expected = model(x).last_hidden_state.numpy()
        np.testing.assert_allclose(got[0], expected, atol=1e-4, rtol=5e-4)
    assert not r.ranges["H"].hi and not r.ranges["W"].hi, r.ranges
    import transformers.models.dinov2_with_registers.modeling_dinov2_with_registers as module
    from transformers.utils.generic import torch_int
    assert module.torch_int is torch_int  # the patch is gone after the export
