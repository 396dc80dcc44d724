"""CPU seconds of the dynamic-size analysis on the size patterns of issue 43 (not a test).

    python benchmarks/bench_size_patterns.py [--only NAME,NAME] [--check]

Each tiny torch-only model is exported once with dynamic axes (``check_io=False`` unless
``--check``) in this process, and a line prints its outcome (the ranges, or the error's class and
first words), the process CPU seconds of the export (the machine's other users do not count),
the wall seconds, and the analysis' run counts from ``result.timings``. The patterns:

- ``same_tf3``: TF "SAME" padding picked by ``H % s`` before each of three stride-2 convs
  (MobileNet-v1 style; the amount differs on and off the multiples);
- ``same_ceil3``: the same with ``max((ceil(H / s) - 1) * s + (k - 1) * d + 1 - H, 0)``
  (transformers' MobileNet-v2), no decision on the sizes;
- ``grid_square`` / ``grid_hw``: tokens of a patch embedding made a square grid again with
  ``int(N ** 0.5)``, the image's H and W one symbol or two (refused, the root is whole at
  some sizes only);
- ``chunk_loop``: a Python loop over ``S // 4`` chunks.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fx2nnef  # noqa: E402


def _same_mod(x, conv):
    h, w = x.shape[-2:]
    s, k = conv.stride[0], conv.kernel_size[0]
    ph = max(k - s, 0) if h % s == 0 else max(k - h % s, 0)
    pw = max(k - s, 0) if w % s == 0 else max(k - w % s, 0)
    return F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))


def _same_ceil(x, conv):
    h, w = x.shape[-2:]
    s, k, d = conv.stride[0], conv.kernel_size[0], conv.dilation[0]
    ph = max((math.ceil(h / s) - 1) * s + (k - 1) * d + 1 - h, 0)
    pw = max((math.ceil(w / s) - 1) * s + (k - 1) * d + 1 - w, 0)
    return F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))


class SameConvs(nn.Module):
    def __init__(self, pad):
        super().__init__()
        self.pad = pad
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, 2) for i in range(3))

    def forward(self, x):
        for c in self.convs:
            x = torch.relu(c(self.pad(x, c)))
        return x.mean((2, 3))


class Grid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 2, 2)

    def forward(self, img):
        t = self.conv(img).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        h = int(n ** 0.5)
        return t.reshape(b, h, n // h, c).permute(0, 3, 1, 2)


class ChunkLoop(nn.Module):
    def forward(self, x):
        outs = []
        for i in range(x.shape[1] // 4):
            outs.append(x[:, i * 4:(i + 1) * 4].cumsum(1))
        return torch.cat(outs, 1)


CASES = {
    "same_tf3": (lambda: SameConvs(_same_mod), (1, 3, 32, 24), {2: "H", 3: "W"}),
    "same_ceil3": (lambda: SameConvs(_same_ceil), (1, 3, 32, 24), {2: "H", 3: "W"}),
    "grid_square": (Grid, (2, 3, 8, 8), {0: "B", 2: "H", 3: "H"}),
    "grid_hw": (Grid, (2, 3, 8, 8), {0: "B", 2: "H", 3: "W"}),
    "chunk_loop": (ChunkLoop, (2, 12, 3), {0: "B", 1: "S"}),
}


def _one(name: str, check: bool, folder: Path) -> str:
    make, shape, axes = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        r = fx2nnef.export(model, (x,), folder / f"{name}.nnef.tgz", input_names=["x"], dynamic_axes={"x": axes},
                           target=fx2nnef.TractNNEF(check_io=check))
        outcome = "ranges " + (", ".join(f"{k}: {v.lo}..{v.hi} step {v.step}" for k, v in r.ranges.items()) or "all")
        runs = {k: r.timings[k] for k in ("graph_runs", "eager_runs", "fake_runs") if k in r.timings}
    except Exception as exc:  # noqa: BLE001 - a refusal is a figure too
        outcome, runs = f"{type(exc).__name__}: {str(exc)[:70]}", {}
    return (f"{name:12s} cpu {time.process_time() - cpu:6.1f} s  wall {time.perf_counter() - wall:6.1f} s  "
            f"{outcome}  {runs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--check", action="store_true", help="export with check_io (tract runs the asset)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only.split(","):
            print(_one(name, args.check, Path(folder)), flush=True)


if __name__ == "__main__":
    main()
