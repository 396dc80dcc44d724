"""Patterns of the survey's detection, segmentation and depth rows, each as a small module exported
and checked in tract (export's own check against PyTorch, dynamic batch).

- D-FINE / DEIMv2 box integral: a softmax over bins, then ``F.linear`` with a 1-D weight that the
  forward computes from parameters (the weighting function), the last axis dropped;
- RT-DETR-style query selection: top-k of each proposal's best class score, boxes and features
  gathered with the indices repeated over the last axis;
- UperNet's pyramid pooling and FPN: adaptive average pools to 1, 2, 3, 6, 1x1 convs, bilinear
  upsampling back, concatenation, a 3x3 conv over the concatenated channels.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import fx2nnef
from harness import randn


def _export(model, x, tmp_path, name="m"):
    model = model.eval()
    with torch.no_grad():
        for p in model.parameters():  # no constant parameters: they hide wrong broadcasts
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
    r = fx2nnef.export(model, (x,), tmp_path / f"{name}.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    assert r.check.ok
    return r


class BoxIntegral(torch.nn.Module):
    """D-FINE's distribution-to-distance integral with its non-uniform weighting function."""

    def __init__(self, bins: int = 8, dim: int = 16):
        super().__init__()
        self.bins = bins
        self.head = torch.nn.Linear(dim, 4 * (bins + 1))
        self.up = torch.nn.Parameter(torch.tensor([0.5]))
        self.reg_scale = torch.nn.Parameter(torch.tensor([4.0]))

    def weighting(self):
        n = self.bins
        up, scale = abs(self.up[0]) * abs(self.reg_scale[0]), abs(self.reg_scale[0])
        step = (up + 1) ** (2 / (n - 2))
        left = [-(step ** i) + 1 for i in range(n // 2 - 1, 0, -1)]
        right = [step ** i - 1 for i in range(1, n // 2)]
        values = [-up * 2, *left, torch.zeros(()), *right, up * 2]  # n + 1 values
        return torch.cat([v.reshape(1) for v in values]) / scale

    def forward(self, x):
        b, q, _ = x.shape
        corners = self.head(x)
        probs = F.softmax(corners.reshape(-1, self.bins + 1), dim=1)
        return F.linear(probs, self.weighting()).reshape(b, q, 4)


def test_box_integral_linear_with_computed_1d_weight(tmp_path):
    m = BoxIntegral()
    r = _export(m, randn(2, 5, 16), tmp_path)
    assert r.max_abs_diff < 1e-4


class QuerySelection(torch.nn.Module):
    """Top-k of the proposals' best class scores; boxes and features gathered by those indices."""

    def __init__(self, dim: int = 16, classes: int = 3, k: int = 6):
        super().__init__()
        self.k = k
        self.score = torch.nn.Linear(dim, classes)
        self.box = torch.nn.Linear(dim, 4)

    def forward(self, memory):
        logits = self.score(memory)
        boxes = self.box(memory)
        _, index = torch.topk(logits.max(-1).values, self.k, dim=1)
        picked_boxes = boxes.gather(dim=1, index=index.unsqueeze(-1).repeat(1, 1, boxes.shape[-1])).sigmoid()
        picked_logits = logits.gather(dim=1, index=index.unsqueeze(-1).repeat(1, 1, logits.shape[-1]))
        target = memory.gather(dim=1, index=index.unsqueeze(-1).repeat(1, 1, memory.shape[-1]))
        return picked_logits, picked_boxes, target


def test_query_selection_topk_gather(tmp_path):
    # scores of the proposals far apart (no near-ties: the order is then the same in any engine)
    x = randn(2, 20, 16) * 3
    _export(QuerySelection(), x, tmp_path)


class PyramidPooling(torch.nn.Module):
    """UperNet's head on one feature map: pooled to 1, 2, 3 and 6, each through a 1x1 conv,
    upsampled bilinearly (align_corners=False) back to the map, concatenated with it, then a
    3x3 conv; a bilinear upsampling by 4 at the end (the FPN's way to the image size)."""

    def __init__(self, c: int = 32, mid: int = 8, scales=(1, 2, 3, 6)):
        super().__init__()
        self.scales = scales
        self.pools = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(s), torch.nn.Conv2d(c, mid, 1),
                                                             torch.nn.BatchNorm2d(mid), torch.nn.ReLU())
                                         for s in scales)
        self.bottleneck = torch.nn.Conv2d(c + mid * len(scales), mid, 3, padding=1)

    def forward(self, x):
        outs = [x] + [F.interpolate(p(x), size=x.shape[2:], mode="bilinear", align_corners=False) for p in self.pools]
        y = self.bottleneck(torch.cat(outs, dim=1))
        return F.interpolate(y, scale_factor=4, mode="bilinear", align_corners=False)


def test_pyramid_pooling_upsampling(tmp_path):
    _export(PyramidPooling(), randn(2, 32, 7, 7), tmp_path)
