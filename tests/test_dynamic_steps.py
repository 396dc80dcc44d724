"""Decisions on dynamic sizes that repeat with a period (pad when not a multiple): the export
holds on the step those decisions imply, said in the ranges and checked in tract.

A patch embedding that pads ``if H % 4 != 0``, TF "SAME" padding picking its amount by
``H % 2`` before each of several stride-2 convolutions, a window partition padding to a multiple
of the window: traced at a multiple, the graph is the model's on the sizes whose decisions are
the example's only. The range then has a step (``H % 16 == 0``), the emitted graph declares the
size as ``16*H_16`` (tract runs it at any size on the step) and a size off the step is reported
outside the range. Each asset is run in tract at the example and at other sizes on the step.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many

from harness import noisy


class PatchEmbed(nn.Module):
    """Swin's patch embedding: pads to a multiple of the patch only when the size is not one."""

    def __init__(self, patch=4):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, 8, patch, patch)

    def forward(self, x):
        return self.proj(pad_to_patch(x, self.patch)).flatten(1)


def pad_to_patch(x, patch):
    """Swin's ``maybe_pad``: each of H and W padded up to a multiple of ``patch``, only where it
    is not one already (a decision on each size, with a pad amount that is not 0 at the multiples)."""
    h, w = x.shape[-2:]
    if w % patch != 0:
        x = F.pad(x, (0, patch - w % patch))
    if h % patch != 0:
        x = F.pad(x, (0, 0, 0, patch - h % patch))
    return x


def _same_pad(x, conv):
    """TF "SAME" padding (MobileNetV1): the amount depends on whether the size is a multiple."""
    h, w = x.shape[-2:]
    s, k = conv.stride[0], conv.kernel_size[0]
    ph = max(k - s, 0) if h % s == 0 else max(k - h % s, 0)
    pw = max(k - s, 0) if w % s == 0 else max(k - w % s, 0)
    return F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))


class SameConvs(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, 2) for i in range(n))

    def forward(self, x):
        for c in self.convs:
            x = torch.relu(c(_same_pad(x, c)))
        return x.mean((2, 3))


class WindowPad(nn.Module):
    """Window partition after a stride-2 merge: pads to a multiple of the window when needed
    (``always``: by ``(ws - w % ws) % ws`` with no decision, as Swin's window layer)."""

    def __init__(self, window=4, always: bool = False):
        super().__init__()
        self.window, self.always = window, always
        self.down = nn.Conv2d(3, 4, 2, 2)
        self.mix = nn.Linear(4, 4)

    def forward(self, x):
        x = self.down(x).permute(0, 2, 3, 1)
        b, h, w, c = x.shape
        ws = self.window
        if self.always or h % ws != 0 or w % ws != 0:
            x = F.pad(x, (0, 0, 0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
        hp, wp = x.shape[1], x.shape[2]
        win = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        win = win + torch.softmax(win @ win.transpose(1, 2), -1) @ self.mix(win)
        x = win.view(b, hp // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        return x[:, :h, :w, :].mean((1, 2))


def _export(model, hw, tmp_path, check_io=True):
    x = torch.randn(1, 3, *hw, generator=torch.Generator().manual_seed(0))
    return fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", input_names=["x"],
                          target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "H", 3: "W"}}, check_io=check_io))


def _tract_at(model, r, sizes):
    """The asset run in tract at each (H, W), compared with eager."""
    sets, expected = [], []
    for h, w in sizes:
        x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h * 1000 + w))
        with torch.no_grad():
            expected.append(model(x).numpy())
        sets.append([x.numpy()])
    for (h, w), got, exp in zip(sizes, run_tract_many(r.path, sets), expected):
        assert got[0].shape == exp.shape, (h, w)
        np.testing.assert_allclose(got[0], exp, atol=1e-4, rtol=5e-4, err_msg=f"H={h}, W={w}")


def _on_step(r, sym, n):
    return r.ranges[sym].contains(n)


def test_patch_embed_pad_step(tmp_path):
    model = noisy(PatchEmbed())
    r = _export(model, (32, 24), tmp_path)
    for s in ("H", "W"):
        rng = r.ranges[s]
        assert rng.step == 4 and rng.rest == 0, rng
        assert "off the step" in rng.why
    assert not _on_step(r, "H", 33) and not _on_step(r, "W", 26) and _on_step(r, "H", 36)
    assert "4*H_4" in r.nnef_text.replace(" ", "")
    _tract_at(model, r, [(32, 24), (36, 20), (8, 44)])
    assert "H % 4 == 0" in str(r)


def test_tf_same_padding_three_stride_two_convs(tmp_path):
    model = noisy(SameConvs(3))
    r = _export(model, (32, 24), tmp_path)
    # every conv's input even at 32 (32, 16, 8): H % 8 == 0; 24 -> 12 -> 6 even too
    assert (r.ranges["H"].step, r.ranges["H"].rest % 8) == (8, 0), r.ranges["H"]
    assert (r.ranges["W"].step, r.ranges["W"].rest % 8) == (8, 0), r.ranges["W"]
    assert not _on_step(r, "H", 36) and not _on_step(r, "H", 33)
    _tract_at(model, r, [(32, 24), (40, 16), (16, 48)])


def test_tf_same_padding_odd_stage(tmp_path):
    # 24 -> 12 -> 6 (even) but 20 -> 10 -> 5: the third conv takes the odd branch, rest 4 of 8
    model = noisy(SameConvs(3))
    r = _export(model, (24, 20), tmp_path)
    assert (r.ranges["W"].step, r.ranges["W"].rest) == (8, 4), r.ranges["W"]
    assert _on_step(r, "W", 28) and not _on_step(r, "W", 24)
    _tract_at(model, r, [(24, 20), (32, 28), (16, 12)])


def test_window_partition_pad(tmp_path):
    # the graph is traced again where the window pads (it holds at every size); tract once refused
    # it at load, unable to match the padded size's parts (H)/2 + (H+1)/2 - H + 4*(H+6)/8 with
    # 4*(H+6)/8 in the concat (see tests/test_vision_dynamic_sizes2.py)
    model = noisy(WindowPad())
    r = _export(model, (16, 24), tmp_path)
    # the pad by (4 - h % 4) % 4 is general, the decision to pad is not: the graph traced where no
    # padding is needed holds where none is (H % 8 == 0), maybe on every size when traced padded
    for s in ("H", "W"):
        rng = r.ranges.get(s)
        assert rng is None or (rng.step in (1, 2, 8) and rng.contains(16 if s == "H" else 24)), rng
    sizes = [(16, 24), (24, 16), (40, 8)]
    _tract_at(model, r, [hw for hw in sizes if _on_step(r, "H", hw[0]) and _on_step(r, "W", hw[1])])


def test_off_step_size_refused_by_tract(tmp_path):
    model = noisy(PatchEmbed())
    r = _export(model, (32, 24), tmp_path, check_io=False)
    assert not r.ranges["H"].contains(30)
    with pytest.raises(Exception):
        run_tract_many(r.path, [[torch.randn(1, 3, 30, 24).numpy()]])


@pytest.mark.slow  # minutes: the fake replay of Swin's window code is slow (sympy); test_patch_embed_pad_step is the light one
def test_tiny_swin_dynamic_hw(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.SwinConfig(embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2, image_size=32,
                                  patch_size=4, mlp_ratio=1.0)
    swin = noisy(transformers.SwinModel(cfg))

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = swin

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    model = Wrap().eval()
    r = _export(model, (32, 24), tmp_path)
    for s in ("H", "W"):
        assert r.ranges[s].step > 1 and r.ranges[s].step % 4 == 0, r.ranges[s]
    assert not r.ranges["H"].contains(33)
    h2 = 32 + r.ranges["H"].step
    _tract_at(model, r, [(32, 24), (h2, 24)])
