"""Pools, padding, interpolation and pixel shuffle exported and run in tract and nnef_tools."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fx2nnef
from harness import OpCase, randbool, randint, randn, run_case

X1 = randn(2, 3, 11)
X2 = randn(2, 3, 7, 9)
X3 = randn(1, 2, 5, 6, 7)
SQ = randn(2, 3, 8, 8)
TRACT_ONLY = {"khronos": False}
DYN_BATCH = {"dynamic_axes": {"x0": {0: "B"}}, "khronos": False}


def case(name, op, inputs, **kw) -> OpCase:
    """An OpCase for a module or a function."""
    if isinstance(op, nn.Module):
        return OpCase(name, None, inputs, module=op, **kw)
    return OpCase(name, op, inputs, **kw)


POOL_CASES = [
    case("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, 1), [X1]),
    case("max_pool1d_ceil_dil", lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2, ceil_mode=True), [X1]),
    case("max_pool1d_unbatched", lambda x: F.max_pool1d(x, 2), [randn(3, 11)]),
    case("max_pool2d", nn.MaxPool2d(2), [X2]),
    case("max_pool2d_pad_negative", lambda x: F.max_pool2d(x - 3.0, 3, 2, 1), [X2]),
    case("max_pool2d_ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), [SQ]),
    case("max_pool2d_ceil_pad", lambda x: F.max_pool2d(x, (3, 2), (2, 2), (1, 1), ceil_mode=True), [X2]),
    case("max_pool2d_dil", lambda x: F.max_pool2d(x, (2, 3), 1, (1, 1), dilation=(2, 1)), [X2]),
    case("max_pool2d_torch_builtin", lambda x: torch.max_pool2d(x, 2, 1), [X2]),
    case("max_pool2d_unbatched", lambda x: F.max_pool2d(x, 3, 2, 1), [randn(3, 7, 9)]),
    case("max_pool2d_f16", lambda x: F.max_pool2d(x, 3, 2, 1), [X2.half()], **TRACT_ONLY),
    case("max_pool2d_dyn_batch", lambda x: F.max_pool2d(x, 3, 2, 1), [X2], **DYN_BATCH),
    case("max_pool3d", lambda x: F.max_pool3d(x, 2, padding=1), [X3]),
    case("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1), [X1]),
    case("avg_pool1d_no_pad_count", lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), [X1]),
    case("avg_pool1d_ceil", lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [randn(2, 3, 10)]),
    case("avg_pool2d", nn.AvgPool2d(2), [X2]),
    case("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1), [X2]),
    case("avg_pool2d_pad_no_count", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [X2]),
    case("avg_pool2d_ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [SQ]),
    case("avg_pool2d_ceil_no_count", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [SQ]),
    case("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 2, padding=1, divisor_override=3), [X2]),
    case("avg_pool2d_dyn_batch", lambda x: F.avg_pool2d(x, 3, 2, 1), [X2], **DYN_BATCH),
    case("avg_pool3d", lambda x: F.avg_pool3d(x, (2, 3, 2), padding=(1, 1, 0)), [X3]),
    case("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 4), [X1]),
    case("adaptive_avg_pool1d_one", lambda x: F.adaptive_avg_pool1d(x, 1), [X1]),
    case("adaptive_avg_pool2d_one", nn.AdaptiveAvgPool2d(1), [X2]),
    case("adaptive_avg_pool2d_div", lambda x: F.adaptive_avg_pool2d(x, (2, 4)), [SQ]),
    case("adaptive_avg_pool2d_nondiv", lambda x: F.adaptive_avg_pool2d(x, (3, 5)), [X2]),
    case("adaptive_avg_pool2d_none", lambda x: F.adaptive_avg_pool2d(x, (None, 4)), [X2]),
    case("adaptive_avg_pool2d_dyn_hw", nn.AdaptiveAvgPool2d((1, 1)), [X2],
         dynamic_axes={"x0": {0: "B", 2: "H", 3: "W"}}, khronos=False),
    case("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), [X3]),
    case("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3), [X1]),
    case("adaptive_max_pool2d_one", lambda x: F.adaptive_max_pool2d(x, 1), [X2]),
    case("adaptive_max_pool2d_div", nn.AdaptiveMaxPool2d(4), [SQ]),
    case("adaptive_max_pool2d_nondiv", lambda x: F.adaptive_max_pool2d(x, (4, 5)), [X2]),
    case("adaptive_max_pool2d_dyn_batch", lambda x: F.adaptive_max_pool2d(x, (4, 5)), [X2], **DYN_BATCH),
]

PAD_CASES = [
    case("pad_constant_value", lambda x: F.pad(x, (2, 1), value=1.5), [X1], tolerance="exact"),
    case("pad_constant_2d_crop", lambda x: F.pad(x, (1, -2, -1, 3)), [X2], tolerance="exact"),
    case("pad_constant_channels", lambda x: F.pad(x, (0, 0, 0, 0, 1, 2), value=-1.0), [X2], tolerance="exact"),
    case("pad_constant_rank2", lambda x: F.pad(x, (3, 1)), [randn(4, 5)], tolerance="exact"),
    case("pad_constant_i64", lambda x: F.pad(x, (1, 2)), [randint(-5, 5, 2, 3, 4)], tolerance="exact", **TRACT_ONLY),
    # tract's pad takes numbers only ("Bool is not a number" at run time): Moonshine-streaming pads its mask
    case("pad_constant_bool", lambda x: F.pad(x, (1, 2)), [randbool(2, 3, 4)], tolerance="exact", **TRACT_ONLY),
    case("pad_constant_bool_true", lambda x: F.pad(x, (0, 0, 2, 1), value=True), [randbool(2, 3, 4, seed=1)],
         tolerance="exact", **TRACT_ONLY),
    case("pad_reflect_1d", lambda x: F.pad(x, (3, 2), mode="reflect"), [X1], tolerance="exact"),
    case("pad_reflect_2d", nn.ReflectionPad2d((1, 2, 2, 1)), [X2], tolerance="exact"),
    case("pad_replicate_1d", lambda x: F.pad(x, (3, 2), mode="replicate"), [X1], tolerance="exact"),
    case("pad_replicate_2d", nn.ReplicationPad2d((1, 2, 0, 3)), [X2], tolerance="exact"),
    case("pad_replicate_3d", lambda x: F.pad(x, (1, 1, 2, 0, 0, 1), mode="replicate"), [X3], tolerance="exact"),
    case("pad_circular_2d", lambda x: F.pad(x, (2, 1, 1, 3), mode="circular"), [X2], tolerance="exact"),
    case("pad_replicate_dyn_time", lambda x: F.pad(x, (2, 3), mode="replicate"), [X1], tolerance="exact",
         dynamic_axes={"x0": {2: "T"}}, khronos=False),
    case("pad_circular_dyn_time", lambda x: F.pad(x, (2, 3), mode="circular"), [X1], tolerance="exact",
         dynamic_axes={"x0": {2: "T"}}, khronos=False),
    case("pad_f16", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), [X2.half()], tolerance="exact", **TRACT_ONLY),
    # pad_sequence: sequences of lengths S, S-1, S-3 (dynamic) or 5, 2, 4 (static), padded to the longest
    case("pad_sequence_dyn", lambda x: nn.utils.rnn.pad_sequence([x, x[1:] * 2, x[3:] - 1], batch_first=True,
                                                                   padding_value=-7.0),
         [randn(6, 3)], tolerance="exact", dynamic_axes={"x0": {0: "S"}}, khronos=False),
    case("pad_sequence_time_major_left", lambda x: nn.utils.rnn.pad_sequence([x[1:], x, x[2:]], padding_side="left"),
         [randn(7, 2, 3)], tolerance="exact", dynamic_axes={"x0": {0: "S"}}, khronos=False),
    case("pad_sequence_static", lambda a, b, c: nn.utils.rnn.pad_sequence([a, b, c], batch_first=True, padding_value=1.0),
         [randn(5, 3), randn(2, 3, seed=1), randn(4, 3, seed=2)], tolerance="exact"),
]

# sampling points from -1.3 to 1.3 (some outside the input), and 2-D affine maps
GRID = torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(4)) * 2.6 - 1.3
THETA = torch.tensor([[[0.9, 0.2, 0.1], [-0.3, 1.1, 0.0]], [[1.2, 0.0, -0.2], [0.1, 0.8, 0.3]]])

RESAMPLE_CASES = [
    case("nearest_scale2", nn.Upsample(scale_factor=2), [X2], tolerance="exact"),
    case("nearest_size_2x3", lambda x: F.interpolate(x, size=(14, 27)), [X2], tolerance="exact"),
    case("nearest_scale_1_5", lambda x: F.interpolate(x, scale_factor=1.5), [X2], tolerance="exact"),
    case("nearest_down", lambda x: F.interpolate(x, size=(4, 5)), [X2], tolerance="exact"),
    case("nearest_exact", lambda x: F.interpolate(x, size=(10, 6), mode="nearest-exact"), [X2], tolerance="exact"),
    case("nearest_1d", lambda x: F.interpolate(x, scale_factor=3), [X1], tolerance="exact"),
    case("nearest_3d", lambda x: F.interpolate(x, scale_factor=(1, 2, 2)), [X3], tolerance="exact"),
    case("nearest_dyn_hw", nn.Upsample(scale_factor=2), [X2], tolerance="exact",
         dynamic_axes={"x0": {0: "B", 2: "H", 3: "W"}}, khronos=False),
    case("nearest_f16", nn.Upsample(scale_factor=2), [X2.half()], tolerance="exact", **TRACT_ONLY),
    case("bilinear_scale2", nn.Upsample(scale_factor=2, mode="bilinear"), [X2]),
    case("bilinear_align", lambda x: F.interpolate(x, size=(11, 4), mode="bilinear", align_corners=True), [X2]),
    case("bilinear_down", lambda x: F.interpolate(x, size=(4, 6), mode="bilinear"), [X2]),
    case("bilinear_scale_frac", lambda x: F.interpolate(x, scale_factor=(1.7, 0.6), mode="bilinear"), [X2]),
    case("bilinear_dyn_batch", nn.Upsample(scale_factor=2, mode="bilinear"), [X2], **DYN_BATCH),
    case("bilinear_f16", nn.Upsample(scale_factor=2, mode="bilinear"), [X2.half()], **TRACT_ONLY),
    case("linear_1d", lambda x: F.interpolate(x, size=17, mode="linear"), [X1]),
    case("bicubic", lambda x: F.interpolate(x, size=(12, 13), mode="bicubic"), [X2]),
    case("bicubic_align", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True), [X2]),
    case("trilinear", lambda x: F.interpolate(x, size=(7, 4, 9), mode="trilinear"), [X3]),
    case("area", lambda x: F.interpolate(x, size=(3, 4), mode="area"), [X2]),
    case("pixel_shuffle", nn.PixelShuffle(2), [randn(2, 12, 3, 5)], tolerance="exact"),
    case("pixel_shuffle_unbatched", lambda x: F.pixel_shuffle(x, 3), [randn(18, 2, 3)], tolerance="exact"),
    case("pixel_shuffle_dyn", nn.PixelShuffle(2), [randn(2, 12, 3, 5)], tolerance="exact",
         dynamic_axes={"x0": {0: "B", 2: "H"}}, khronos=False),
    case("pixel_unshuffle", nn.PixelUnshuffle(2), [randn(2, 3, 6, 4)], tolerance="exact"),
    case("pixel_unshuffle_dyn", nn.PixelUnshuffle(2), [randn(2, 3, 6, 4)], tolerance="exact", **DYN_BATCH),
    # grid_sample: points beyond the edges too (zeros / border), both corner conventions; affine_grid
    case("grid_sample_bilinear", lambda x, g: F.grid_sample(x, g, align_corners=False), [X2, GRID], **TRACT_ONLY),
    case("grid_sample_align_border", lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
         [X2, GRID], **TRACT_ONLY),
    case("grid_sample_nearest", lambda x, g: F.grid_sample(x, g, mode="nearest", align_corners=False), [X2, GRID],
         tolerance="exact", **TRACT_ONLY),
    case("grid_sample_dyn", lambda x, g: F.grid_sample(x, g, align_corners=False), [X2, GRID], khronos=False,
         dynamic_axes={"x0": {0: "B", 2: "H", 3: "W"}, "x1": {0: "B", 1: "P"}}),
    case("affine_grid_sample", lambda x, t: F.grid_sample(x, F.affine_grid(t, (2, 3, 5, 6), align_corners=False),
                                                          align_corners=False), [X2, THETA], **TRACT_ONLY),
    case("affine_grid_align", lambda t: F.affine_grid(t, (2, 3, 4, 7), align_corners=True), [THETA]),
]

CASES = POOL_CASES + PAD_CASES + RESAMPLE_CASES


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")




@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


@pytest.mark.parametrize("fn, reason", [
    (lambda x: F.max_pool2d(x, 2, return_indices=True)[0], "return_indices"),
    (lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True)[0], "return_indices"),
    (lambda x: F.interpolate(x, size=(5, 1), mode="bilinear", antialias=True), "antialias=True and a spatial size of 1"),
], ids=["max_pool_indices", "adaptive_max_indices", "antialias_size_1"])
def test_unsupported(fn, reason, tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match=reason):
        run_case(OpCase("unsupported", fn, [SQ]), tmp_path, "tract")
