"""How far tract and eager float32 PyTorch each are from the float64 answer, on models that
amplify float32 rounding: the measure behind ``fx2nnef.targets.rounding.ROUNDING_FACTOR`` (not a
test). Each row: the largest distance over the output, in approximate-tolerance units, of tract
(``tract``) and eager float32 (``eager``) from the model run in float64, their ratio, and the
distance between tract and eager (``apart``, which ``is_reference`` compares with ``eager``).

    python benchmarks/bench_rounding_factor.py [--seeds 5] [--only cancel256,conv]

Models: ``cancelN``, two N-input linear layers with nearly equal large weights, subtracted (pure
cancellation: the ratio grows with N, since tract sums a long reduction in one running sum and
torch in blocks); ``conv``, eight conv + BatchNorm (small variances) + ReLU layers; ``mlp``, twelve
linear layers with tanh/GELU (rounding well below the tolerance).
"""
from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef

import numpy as np
import torch

import fx2nnef
from fx2nnef.targets.rounding import tolerance_units
from fx2nnef.targets.tolerance import resolve_tolerance


class Cancel(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.a, self.b = torch.nn.Linear(n, n), torch.nn.Linear(n, n)
        with torch.no_grad():
            self.a.weight.mul_(100.0)
            self.b.weight.copy_(self.a.weight + 1e-3 * torch.randn_like(self.a.weight))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x):
        return self.a(x) - self.b(x)


def conv_stack(depth: int = 8, c: int = 32) -> torch.nn.Module:
    layers = []
    for i in range(depth):
        layers += [torch.nn.Conv2d(3 if i == 0 else c, c, 3, padding=1), torch.nn.BatchNorm2d(c), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    for bn in model.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            bn.running_mean.normal_(0, 1)
            bn.running_var.uniform_(1e-3, 1e-2)
            bn.weight.data.normal_(1, 0.2)
    return model


def mlp(depth: int = 12, n: int = 128) -> torch.nn.Module:
    layers = []
    for i in range(depth):
        layers += [torch.nn.Linear(n, n), torch.nn.Tanh() if i % 2 else torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            layer.weight.data.mul_(3)
    return model


def build(kind: str):
    if kind.startswith("cancel"):
        n = int(kind[len("cancel"):])
        return Cancel(n), torch.randn(4, n) * 10
    if kind == "conv":
        return conv_stack(), torch.randn(2, 3, 24, 24)
    return mlp(), torch.randn(8, 128)


def distances(model: torch.nn.Module, x: torch.Tensor, folder: Path) -> tuple:
    """(tract, eager, apart) in approximate-tolerance units, the float64 run's values as the scale."""
    model.eval()
    path = folder / "m.nnef.tgz"
    path.unlink(missing_ok=True)
    fx2nnef.export(model, (x,), path, input_names=["x"], target=fx2nnef.TractNNEF(check_io=False))
    got = np.asarray(next(iter(fx2nnef.run(path, {"x": x.numpy()}).values())))
    with torch.no_grad():
        single = model(x).numpy()
        double = copy.deepcopy(model).double()(x.double()).numpy()
    tol = resolve_tolerance("approximate")
    return tuple(tolerance_units(a, b, tol, scale=double) for a, b in ((got, double), (single, double), (got, single)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--only", default="cancel64,cancel256,cancel1024,cancel4096,conv,mlp")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.only.split(","):
            for seed in range(args.seeds):
                torch.manual_seed(seed)
                model, x = build(kind)
                t, e, d = distances(model, x, Path(tmp))
                print(f"{kind:12s} seed {seed}: tract {t:8.3g}  eager {e:8.3g}  tract/eager {t / e:5.2f}  "
                      f"apart {d:8.3g}  eager/apart {e / d:5.2f}", flush=True)


if __name__ == "__main__":
    main()
