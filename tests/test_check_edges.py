"""check_io runs the asset at the edges of the range the export declares (tract does not enforce
the asserted ranges): the smallest size each symbol's range claims, and the largest where the
range has one, one symbol moved at a time."""
import torch
import torch.nn.functional as F

import fx2nnef
from fx2nnef.ir.dims import SymRange


class Pooled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(self.conv(x), 2).mean((2, 3))


class Windowed(torch.nn.Module):
    def forward(self, x):
        return x[:, 2:40] * 2  # decides S < 40 far above the example


def _labels(result) -> list:
    return [c[0] if isinstance(c, tuple) else getattr(c, "label", str(c)) for c in result.check.cases]


def _first_last(r: SymRange):
    lo = 1 if r.lo is None else max(r.lo, 1)
    first = lo + (r.rest - lo) % r.step
    return first, (None if r.hi is None else r.hi - (r.hi - r.rest) % r.step)


def test_lower_edges_of_a_pooled_image(tmp_path):
    result = fx2nnef.export(Pooled().eval(), (torch.randn(1, 3, 8, 8),), tmp_path / "m.nnef.tgz", input_names=["x"],
                            target=fx2nnef.TractNNEF(dynamic_axes={"x": {2: "H", 3: "W"}}))
    labels = _labels(result)
    for s, other in (("H", "W"), ("W", "H")):
        first, _ = _first_last(result.ranges[s])
        wanted = f"{s}={first}, {other}=8" if s == "H" else f"H=8, W={first}"
        assert wanted in labels, (wanted, labels)


def test_both_edges_of_a_bounded_range(tmp_path):
    result = fx2nnef.export(Windowed(), (torch.randn(2, 6),), tmp_path / "m.nnef.tgz", input_names=["x"],
                            target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
    first, last = _first_last(result.ranges.get("S") or SymRange("S"))
    labels = _labels(result)
    assert f"S={first}" in labels, labels
    if last is not None:
        assert f"S={last}" in labels, labels
