"""Vision patterns over dynamic H and W that fixed the export to the example's size or failed it.

- a deep stage whose spatial size is 1 at the example (64x48 through five stride-2 stages has
  W // 32 == 1): torch's kernels decide "== 1" there and the fake replay fixed that size to 1;
  the replay now runs again at larger hints (ConvNeXt, MobileNetV2, SegFormer at 64x48);
- a target size computed in Python from the sizes, ``int(math.ceil(h / p) * p)`` (MobileViT's
  unfolding), ``int(w * 0.5)``, ``math.floor``: recorded as graph nodes instead of numbers;
- an index table built with item assignment of numbers computed from the sizes
  (``idx[0, 0:] = n - 3``, BEiT's relative position index with interpolate_pos_encoding).

Each model is exported with dynamic H and W (the export checks tract at the example and at
sizes below and above), then run in tract at other sizes and compared with PyTorch.
"""
import builtins
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fx2nnef
from harness import randn, tract_matches_eager


def export_hw(model, shape, tmp_path):
    x = randn(*shape, seed=0)
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "H", 3: "W"}}))
    assert r.check.ok
    return r


def check_at(r, model, sizes, c=3):
    tract_matches_eager(r.path, model, [[randn(1, c, h, w, seed=10 + k)] for k, (h, w) in enumerate(sizes)])


def noisy(model: nn.Module, seed: int = 0) -> nn.Module:
    """``model`` in eval mode with every parameter and norm buffer moved off its initial value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(1 + torch.rand(b.shape, generator=g))
            elif name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
    return model.eval()


# a deep stage of spatial size 1 at the example ------------------------------------------------
class DeepStages(nn.Module):
    """A patchify stem and stride-2 stages (64x48 ends at 2x1), channels-last Linear layers (as
    ConvNeXt) and a padded head conv (as MobileNetV2's last layers)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.down = nn.ModuleList([nn.Conv2d(8, 8, 2, 2) for _ in range(3)])
        self.norm = nn.LayerNorm(8)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)
        self.head = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        x = self.stem(x)
        for d in self.down:
            x = d(x)
        y = self.norm(x.permute(0, 2, 3, 1))
        y = self.fc2(F.gelu(self.fc1(y))).permute(0, 3, 1, 2)
        x = x + y
        return self.head(F.pad(x, (1, 1, 1, 1)))


def test_deep_stage_of_size_one(tmp_path):
    model = noisy(DeepStages())
    r = export_hw(model, (1, 3, 64, 48), tmp_path)
    assert set(r.ranges) <= {"H", "W"} and all(v.hi is None for v in r.ranges.values())
    check_at(r, model, [(96, 80), (64, 64), (40, 33), (131, 50)])


class SequenceReduction(nn.Module):
    """SegFormer's efficient self-attention: keys and values from a strided conv of the feature map
    (16x12 reduced by 8 is 2x1 at the example), the query viewed as ``(*x.shape[:-1], -1, d)``."""

    def __init__(self, c=8, heads=2, ratio=8):
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, c, 4, 4)
        self.q, self.kv = nn.Linear(c, c), nn.Linear(c, 2 * c)
        self.sr = nn.Conv2d(c, c, ratio, ratio)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        x = self.embed(x)
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        q = self.q(t).view((*t.shape[:-1], -1, c // self.heads)).transpose(1, 2)
        r = self.norm(self.sr(x).reshape(b, c, -1).permute(0, 2, 1))
        k, v = self.kv(r).view(b, -1, 2, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c // self.heads), dim=-1) @ v
        return a.transpose(1, 2).reshape(b, h, w, c)


def test_sequence_reduction_of_size_one(tmp_path):
    model = noisy(SequenceReduction())
    r = export_hw(model, (1, 3, 64, 48), tmp_path)
    assert all(v.hi is None for v in r.ranges.values())
    check_at(r, model, [(96, 80), (128, 64), (33, 70)])


# sizes computed in Python ---------------------------------------------------------------------
class PatchMultiple(nn.Module):
    """MobileViT's unfolding: resize to the next multiple of the patch size (computed with
    ``int(math.ceil(h / p) * p)``) when the size is not one, average each patch, resize back."""

    def __init__(self, p=4):
        super().__init__()
        self.p = p
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        b, c, h, w = x.shape
        nh = int(math.ceil(h / self.p) * self.p)
        nw = int(math.ceil(w / self.p) * self.p)
        y = x
        if nh != h or nw != w:
            y = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
        y = y.reshape(b, c, nh // self.p, self.p, nw // self.p, self.p).mean(dim=(3, 5))
        y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        return x + y


def test_size_to_patch_multiple(tmp_path):
    model = noisy(PatchMultiple())
    r = export_hw(model, (1, 3, 14, 10), tmp_path)
    assert r.ranges == {} or all(v.hi is None for v in r.ranges.values())
    check_at(r, model, [(16, 12), (21, 9), (8, 8), (33, 40)])


def test_int_and_floor_of_float_sizes(tmp_path):
    """``int(w * 0.5)`` (a float truncated), ``math.floor(h / 3)`` and ``math.ceil(w / 3)`` of the
    sizes follow H and W, as the sizes they come from."""
    def f(x):
        h, w = x.shape[-2:]
        y = F.interpolate(x, size=(math.floor(h / 3) + 1, int(w * 0.5)), mode="nearest")
        return F.adaptive_avg_pool2d(y, (2, 2)) + x[:, :, :2, :math.ceil(w / 3)].mean()
    from harness import FnModule
    model = FnModule(f)
    r = export_hw(model, (1, 3, 12, 10), tmp_path)
    check_at(r, model, [(7, 6), (20, 15), (13, 17)])


# an index table of the sizes, built with item assignment --------------------------------------
class RelativePositionIndex(nn.Module):
    """BEiT's relative position index at the patch grid's size (``interpolate_pos_encoding``):
    coordinates shifted by ``h - 1``, the first row and column set to ``n - 3`` and ``n - 2`` of
    ``n = (2h - 1)(2w - 1) + 3``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 4, 4)

    def forward(self, x):
        x = self.conv(x)
        h, w = x.shape[2], x.shape[3]
        n = (2 * h - 1) * (2 * w - 1) + 3
        coords = torch.flatten(torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")), 1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += h - 1
        rel[:, :, 1] += w - 1
        rel[:, :, 0] *= 2 * w - 1
        idx = torch.zeros(size=(h * w + 1,) * 2, dtype=rel.dtype)
        idx[1:, 1:] = rel.sum(-1)
        idx[0, 0:] = n - 3
        idx[0:, 0] = n - 2
        idx[0, 0] = n - 1
        t = x.flatten(2).transpose(1, 2)
        t = torch.cat([t.mean(1, keepdim=True), t], 1)
        return t @ t.transpose(1, 2) + idx.float() * 0.01


def test_index_table_set_from_sizes(tmp_path):
    model = noisy(RelativePositionIndex())
    r = export_hw(model, (1, 3, 16, 12), tmp_path)
    check_at(r, model, [(20, 8), (8, 24), (32, 32)])


# tiny transformers models ---------------------------------------------------------------------
def _hf(config_name, model_name, **kw):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**kw))
    return noisy(model)


class _Pixels(nn.Module):
    def __init__(self, model, **call):
        super().__init__()
        self.m, self.call = model, call

    def forward(self, x):
        return self.m(pixel_values=x, **self.call)[0]


@pytest.mark.slow  # test_deep_stage_of_size_one covers the same path
def test_convnext_deep_stage_of_size_one(tmp_path):
    model = _Pixels(_hf("ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[16, 32, 32, 64],
                        depths=[1, 1, 1, 1])).eval()
    r = export_hw(model, (1, 3, 64, 48), tmp_path)
    assert all(v.hi is None for v in r.ranges.values())
    check_at(r, model, [(96, 80), (40, 70)])


@pytest.mark.slow  # test_index_table_set_from_sizes covers the same path
def test_beit_relative_position_bias_interpolated(tmp_path):
    model = _Pixels(_hf("BeitConfig", "BeitModel", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, image_size=32, patch_size=8, use_relative_position_bias=True),
                    interpolate_pos_encoding=True).eval()
    r = export_hw(model, (1, 3, 64, 48), tmp_path)
    check_at(r, model, [(32, 32), (40, 72)])


def test_int_stand_in_is_the_builtin_elsewhere():
    """The stand-in for ``int`` in the model's modules while tracing answers as the builtin does
    for anything but a traced size."""
    from fx2nnef.fx_tracer.tracing.size_casts import TracedInt

    assert isinstance(3, TracedInt) and isinstance(True, TracedInt) and not isinstance(3.0, TracedInt)
    assert isinstance(3, (TracedInt, float)) and issubclass(bool, TracedInt)
    assert TracedInt("12") == 12 and TracedInt(3.7) == 3 and TracedInt("ff", 16) == 255 and TracedInt() == 0
    # (written with builtins: a module testing `type(x) is` the bare int name keeps the builtin
    # while tracing, which would leave this module's own int() calls above untraced)
    assert type(TracedInt(2.5)) is builtins.int


# a segmentation head resized back to odd input sizes ------------------------------------------
class LRASPPHead(nn.Module):
    """LR-ASPP's head on a strided backbone: stride-2 convs (odd sizes round up at each), a
    squeeze gate (``AdaptiveAvgPool2d(1)``, conv, sigmoid) scaling the deep features, a bilinear
    resize to the shallow features' size and one to the input's (``align_corners=False``), and a
    fused-MBConv-like block whose residual is scaled (EfficientNetV2's stochastic depth in eval)."""

    def __init__(self):
        super().__init__()
        self.low = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.Hardswish())
        self.high = nn.Sequential(nn.Conv2d(8, 12, 3, 2, 1), nn.BatchNorm2d(12), nn.ReLU(),
                                  nn.Conv2d(12, 12, 5, 2, 2, groups=12))
        self.fused = nn.Sequential(nn.Conv2d(12, 24, 3, 1, 1), nn.SiLU(), nn.Conv2d(24, 12, 1))
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(12, 12, 1), nn.Sigmoid())
        self.cbr = nn.Conv2d(12, 6, 1)
        self.low_cls, self.high_cls = nn.Conv2d(8, 5, 1), nn.Conv2d(6, 5, 1)

    def forward(self, x):
        low = self.low(x)
        high = self.high(low)
        high = high + 0.8 * self.fused(high)
        y = self.cbr(high) * self.gate(high)[:, :6]
        y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_cls(low) + self.high_cls(y)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def test_segmentation_head_at_odd_sizes(tmp_path):
    """Exported at 32x32 without the check (``check_io=False``: nothing but this test looks), then
    run in tract at batch 2 and odd sizes, where every stride-2 stage rounds up and the resizes'
    borders fall between pixels (torchvision's lraspp_mobilenet_v3_large and efficientnet_v2_s
    were off there by float32 rounding only: tract as far from float64 as eager float32)."""
    model = noisy(LRASPPHead())
    x = randn(1, 3, 32, 32, seed=0)
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}, check_io=False))
    assert r.check is None or not r.check.cases
    tract_matches_eager(r.path, model, [[randn(b, 3, h, w, seed=20 + b + h)]
                                        for b, h, w in [(2, 67, 67), (1, 33, 17), (2, 9, 13), (1, 5, 5)]])
