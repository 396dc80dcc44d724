"""Vision ops over dynamic H and W: adaptive pools, linear interpolation, ceil_mode pools, F.fold
and affine_grid, each exported with ``dynamic_axes`` on H and W, checked by the export, then
run in tract at other sizes (unequal adaptive bins, odd sizes for ceil_mode, sizes below the
output size) and compared with PyTorch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fx2nnef
from fx2nnef.errors import UnsupportedOpError
from harness import FnModule, randn, tract_matches_eager


def export_dynamic(model, shapes, tmp_path):
    """Export ``model`` on inputs of ``shapes`` with axes 2 and 3 of every input dynamic."""
    xs = tuple(randn(*s, seed=i) for i, s in enumerate(shapes))
    names = [f"x{i}" for i in range(len(xs))]
    dyn = {n: {2: f"H{i}" if i else "H", 3: f"W{i}" if i else "W"} for i, n in enumerate(names)}
    path = tmp_path / "dyn.nnef.tgz"
    r = fx2nnef.export(model, xs, path, input_names=names, target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok
    assert "H" in r.symbols and "W" in r.symbols
    return r


def check_sizes(model, shapes, sizes, tmp_path):
    """Export with dynamic H/W on ``shapes``, then run the asset at each of ``sizes`` (a list of
    shape lists, one per input) and compare with the model."""
    r = export_dynamic(model, shapes, tmp_path)
    sets = [[randn(*s, seed=10 + k) for s in shape_set] for k, shape_set in enumerate(sizes)]
    tract_matches_eager(r.path, model, sets)
    return r


def fn(f):
    return FnModule(f)


def one(*hw, n=1, c=3):
    """Shape lists for a single NCHW input at each (H, W)."""
    return [[(n, c, h, w)] for h, w in hw]


# the example is (1, 3, 20, 17); other sizes: unequal bins, divisible sizes, sizes below the output
ADAPTIVE = [
    ("adaptive_avg_7x7", nn.AdaptiveAvgPool2d((7, 7)), one((13, 29), (14, 7), (5, 3))),
    ("adaptive_avg_2x3", nn.AdaptiveAvgPool2d((2, 3)), one((9, 11), (2, 3), (1, 1))),
    ("adaptive_avg_6", nn.AdaptiveAvgPool2d(6), one((31, 6), (12, 18), (4, 9))),
    ("adaptive_avg_none_w", nn.AdaptiveAvgPool2d((3, None)), one((8, 5), (3, 11))),
    ("adaptive_max_3", nn.AdaptiveMaxPool2d(3), one((13, 29), (3, 3), (2, 5))),
    ("adaptive_max_none_h", nn.AdaptiveMaxPool2d((None, 4)), one((9, 11), (1, 4))),
    ("adaptive_max_negative", fn(lambda x: F.adaptive_max_pool2d(x - 10.0, (5, 2))), one((13, 29), (3, 3))),
    ("interpolate_area", fn(lambda x: F.interpolate(x, size=(5, 4), mode="area")), one((21, 18), (7, 3))),
]


@pytest.mark.parametrize("name,model,sizes", ADAPTIVE, ids=[c[0] for c in ADAPTIVE])
def test_adaptive_pool_dynamic(name, model, sizes, tmp_path):
    check_sizes(model, [(1, 3, 20, 17)], sizes, tmp_path)


def test_adaptive_avg_pool1d_dynamic(tmp_path):
    model = fn(lambda x: F.adaptive_avg_pool1d(x.flatten(2), 5) + F.adaptive_max_pool1d(x.flatten(2), 3).mean(-1, True))
    check_sizes(model, [(1, 3, 4, 5)], one((3, 7), (1, 2), (2, 2)), tmp_path)


INTERPOLATE = [
    ("bilinear_ac_size", fn(lambda x: F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True)),
     one((9, 7), (30, 2), (1, 1))),
    ("bilinear_ac_scale2", fn(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)),
     one((9, 7), (1, 3))),
    ("bilinear_scale1_5", fn(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear")), one((9, 7), (4, 3))),
    ("bilinear_scale0_5", fn(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear")), one((9, 7), (31, 4))),
    ("bilinear_recompute", fn(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", recompute_scale_factor=True)),
     one((9, 7), (31, 4))),
    ("bilinear_size", fn(lambda x: F.interpolate(x, size=(6, 25), mode="bilinear")), one((9, 7), (31, 4))),
    ("linear_ac", fn(lambda x: F.interpolate(x.flatten(2), size=7, mode="linear", align_corners=True)),
     one((9, 7), (3, 1))),
]


@pytest.mark.parametrize("name,model,sizes", INTERPOLATE, ids=[c[0] for c in INTERPOLATE])
def test_interpolate_dynamic(name, model, sizes, tmp_path):
    check_sizes(model, [(1, 3, 20, 17)], sizes, tmp_path)


def test_interpolate_to_other_input_size(tmp_path):
    """A segmentation head: logits resized to the image size (another input, of its own sizes)."""
    model = fn(lambda x, img: F.interpolate(x, size=img.shape[-2:], mode="bilinear", align_corners=True))
    sizes = [[(1, 3, 5, 4), (1, 1, 19, 16)], [(1, 3, 3, 9), (1, 1, 1, 2)], [(1, 3, 2, 2), (1, 1, 37, 3)]]
    check_sizes(model, [(1, 3, 9, 7), (1, 1, 20, 17)], sizes, tmp_path)


CEIL = [
    ("max_3_2", nn.MaxPool2d(3, 2, ceil_mode=True), one((22, 19), (3, 4), (40, 41))),
    ("max_3_2_pad", nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), one((22, 19), (2, 1), (40, 41))),
    # torch drops the last window where it would start in the padding (odd sizes here)
    ("max_2_2_pad_drop", nn.MaxPool2d(2, 2, padding=1, ceil_mode=True), one((22, 19), (1, 2), (40, 41))),
    ("max_3_3_dil", nn.MaxPool2d(3, 3, dilation=2, ceil_mode=True), one((22, 19), (6, 5), (40, 41))),
    ("max_3_1_pad_inception", nn.MaxPool2d(3, 1, padding=1, ceil_mode=True), one((22, 19), (1, 2))),
    ("avg_3_2", nn.AvgPool2d(3, 2, ceil_mode=True), one((22, 19), (3, 4), (40, 41))),
    ("avg_3_2_pad", nn.AvgPool2d(3, 2, padding=1, ceil_mode=True), one((22, 19), (2, 1), (40, 41))),
    ("avg_2_2_pad_drop", nn.AvgPool2d(2, 2, padding=1, ceil_mode=True), one((22, 19), (1, 2), (40, 41))),
    ("avg_3_2_pad_no_count", nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
     one((22, 19), (2, 1), (40, 41))),
    ("avg_divisor", fn(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=5)), one((22, 19), (2, 1))),
    ("max_1d", fn(lambda x: F.max_pool1d(x.flatten(2), 3, 2, ceil_mode=True)), one((22, 19), (1, 3))),
    ("avg_1d_pad", fn(lambda x: F.avg_pool1d(x.flatten(2), 4, 3, 1, ceil_mode=True)), one((22, 19), (1, 3))),
]


@pytest.mark.parametrize("name,model,sizes", CEIL, ids=[c[0] for c in CEIL])
def test_ceil_mode_pool_dynamic(name, model, sizes, tmp_path):
    check_sizes(model, [(1, 3, 21, 18)], sizes, tmp_path)


FOLD = [
    ("fold_3x3_pad", fn(lambda x: F.fold(F.unfold(x, 3, padding=1), x.shape[2:], 3, padding=1))),
    ("fold_patches", fn(lambda x: F.fold(F.unfold(x, 2, stride=2), x.shape[2:], 2, stride=2))),
    ("fold_gaps_dilation", fn(lambda x: F.fold(F.unfold(x, 2, stride=3, dilation=2), x.shape[2:], 2, stride=3,
                                               dilation=2))),
    ("fold_rect", fn(lambda x: F.fold(F.unfold(x, (3, 2), stride=(2, 1), padding=(1, 0)) * 2, (x.shape[2], x.shape[3]),
                                      (3, 2), stride=(2, 1), padding=(1, 0)))),
]


@pytest.mark.parametrize("name,model", FOLD, ids=[c[0] for c in FOLD])
def test_fold_dynamic_output_size(name, model, tmp_path):
    check_sizes(model, [(1, 2, 10, 9)], one((11, 12), (7, 5), (16, 3), c=2), tmp_path)


THETA = torch.tensor([[[0.9, 0.1, 0.05], [-0.1, 0.8, 0.1]], [[1.1, -0.2, 0.0], [0.3, 0.7, -0.2]]])


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_dynamic(align_corners, tmp_path):
    def warp(self, x):
        grid = F.affine_grid(self.theta, list(x.shape), align_corners=align_corners)
        return F.grid_sample(x, grid, align_corners=align_corners), grid

    model = FnModule(warp, theta=THETA)
    check_sizes(model, [(2, 2, 10, 9)], one((7, 12), (1, 1), (3, 16), n=2, c=2), tmp_path)


# small networks -----------------------------------------------------------------------------------
class VGGLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(nn.Linear(8 * 7 * 7, 16), nn.ReLU(), nn.Linear(16, 5))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class PyramidPooling(nn.Module):
    """PSPNet's pyramid pooling block: pooled to 1, 2, 3 and 6 bins, projected, resized back, concatenated."""

    def __init__(self, c=8, bins=(1, 2, 3, 6)):
        super().__init__()
        self.stages = nn.ModuleList(nn.Sequential(nn.AdaptiveAvgPool2d(b), nn.Conv2d(c, 2, 1, bias=False), nn.ReLU())
                                    for b in bins)
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.head = nn.Conv2d(c + 2 * len(bins), 4, 3, padding=1)

    def forward(self, x):
        f = self.stem(x)
        h, w = f.shape[-2:]
        pyramid = [F.interpolate(s(f), size=(h, w), mode="bilinear", align_corners=True) for s in self.stages]
        return self.head(torch.cat([f] + pyramid, 1))


class GoogLeNetStem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.conv3 = nn.Conv2d(8, 12, 3, padding=1)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.branch_pool = nn.Sequential(nn.MaxPool2d(3, 1, padding=1, ceil_mode=True), nn.Conv2d(12, 4, 1))
        self.branch_1x1 = nn.Conv2d(12, 4, 1)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        x = self.pool2(self.conv3(F.relu(self.conv2(self.pool1(F.relu(self.conv1(x)))))))
        x = torch.cat([self.branch_1x1(x), self.branch_pool(x)], 1)
        return torch.flatten(self.avgpool(x), 1), x


class DeepLabHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.classifier = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        y = self.classifier(self.backbone(x))
        return (F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=True),
                F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False))


@pytest.mark.parametrize("name,model,example,sizes", [
    ("vgg_like", VGGLike(), (1, 3, 32, 40), one((24, 30), (50, 37), (14, 14), (9, 11))),
    ("pspnet_pyramid", PyramidPooling(), (1, 3, 20, 17), one((12, 30), (6, 6), (25, 9))),
    ("googlenet_stem", GoogLeNetStem(), (1, 3, 64, 57), one((48, 63), (33, 34), (17, 20))),
    ("deeplab_head", DeepLabHead(), (1, 3, 33, 30), one((24, 41), (9, 8), (50, 17))),
], ids=["vgg_like", "pspnet_pyramid", "googlenet_stem", "deeplab_head"])
def test_vision_nets_dynamic_hw(name, model, example, sizes, tmp_path):
    model.eval()
    check_sizes(model, [example], sizes, tmp_path)


class FPNTopDown(nn.Module):
    """An FPN's top-down step (torchvision, RetinaNet): the coarser map resized to the finer one's
    size with nearest, whatever the ratio of the two (not 2 when H is not a multiple of 4)."""

    def __init__(self, mode="nearest"):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.mode = mode

    def forward(self, x):
        a = self.c1(x)
        b = self.c2(a)
        return a + F.interpolate(b, size=a.shape[-2:], mode=self.mode)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_to_another_maps_size(mode, tmp_path):
    """Nearest with a non-integer ratio over dynamic sizes: torch's float32 source index
    ``floor(dst * (in / out))`` is computed in the graph with the quotient rounded as torch's (an
    f64 division cast to f32; tract's f32 division is off by an ulp in about 1 case in 4, which
    moves floors at integer points). Compared exactly at every H and W from 1 to 40 (before:
    refused, 'nearest interpolation with a non-integer factor needs static spatial sizes')."""
    from fx2nnef.targets.tract_runner import run_tract_many

    model = FPNTopDown(mode).eval()
    r = export_dynamic(model, [(1, 3, 21, 18)], tmp_path)
    assert not r.ranges, r.ranges
    sets = [randn(1, 3, h, 41 - h, seed=h) for h in range(1, 41)]
    for x, got in zip(sets, run_tract_many(r.path, [[x.numpy()] for x in sets])):
        with torch.no_grad():
            expected = model(x).numpy()
        assert got[0].shape == expected.shape
        np.testing.assert_allclose(got[0], expected, atol=1e-5, rtol=1e-5, err_msg=str(x.shape))


@pytest.mark.parametrize("scale", [0.75, 1.5, 2.5, 1 / 3])
def test_nearest_scale_factor_on_dynamic_sizes(scale, tmp_path):
    """A non-integer scale factor: torch reads ``floor(dst / scale)`` with the inverse rounded to
    f32; checked at several sizes."""
    model = fn(lambda x: F.interpolate(x, scale_factor=scale, mode="nearest"))
    check_sizes(model, [(1, 3, 20, 17)], one((13, 29), (14, 7), (5, 3), (4, 4), (33, 3)), tmp_path)


# still refused, with a clear error ----------------------------------------------------------------
def test_interpolate_to_a_size_without_a_form_is_refused(tmp_path):
    """A size the graph cannot compute (floor(0.7 * H) is 62 at H=90, not (7 * H) // 10 = 63): the
    traced output size is unknown. (floor(1.7 * H) is (17 * H) // 10 at every size, and exports.)"""
    model = fn(lambda x: F.interpolate(x, scale_factor=0.7, mode="nearest"))
    with pytest.raises((UnsupportedOpError, fx2nnef.TraceError), match="size"):
        export_dynamic(model, [(1, 3, 20, 17)], tmp_path)


class _UNetUp(nn.Module):
    """A U-Net step: a stride-2 conv down, then ConvTranspose2d(..., output_size=skip.shape[-2:]),
    whose output padding is (H + 1) % 2 rows (and W's): it follows the sizes."""

    def __init__(self, kernel=3, stride=2):
        super().__init__()
        self.down = nn.Conv2d(3, 4, kernel, stride=stride, padding=1)
        self.up = nn.ConvTranspose2d(4, 3, kernel, stride=stride, padding=1)

    def forward(self, x):
        return self.up(torch.relu(self.down(x)), output_size=x.shape[-2:]) + x


@pytest.mark.parametrize("kernel,stride", [(3, 2), (4, 3)])
def test_conv_transpose_to_the_size_of_a_skip(kernel, stride, tmp_path):
    """Every size, odd and even (and each residue of a stride of 3): no range but the model's own
    refusals (a 4x4 kernel of stride 3 leaves nothing of H=1)."""
    m = _UNetUp(kernel, stride)
    r = check_sizes(m, [(1, 3, 8, 7)], one((9, 6), (5, 5), (12, 13), (10, 11), n=1), tmp_path)
    assert all("the model refuses" in str(rng) and rng.hi is None and rng.step == 1 for rng in r.ranges.values()), r.ranges


def test_conv_transpose1d_to_the_size_of_a_skip(tmp_path):
    down, up = nn.Conv1d(2, 4, 3, stride=2, padding=1), nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1)
    m = FnModule(lambda x: up(down(x), output_size=x.shape[-1:]) * x)
    r = fx2nnef.export(m, (randn(2, 2, 9),), tmp_path / "a.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "T"}}))
    assert r.check.ok and not r.ranges, r.ranges
    tract_matches_eager(r.path, m, [[randn(2, 2, t, seed=t)] for t in (2, 3, 10, 17)])
