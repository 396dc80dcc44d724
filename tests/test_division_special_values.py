"""Rounding divisions on every pair of special values (infinities, signed zeros, nan, huge and
fractional numbers) agree with torch in tract, item by item: ``5 // -inf`` is -1 as in Python and
torch, not the -0 of ``floor(5 / -inf)``; ``fmod(5, inf)`` is 5."""
import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.targets.tract_runner import run_tract_many

INF, NAN = float("inf"), float("nan")
VALUES = torch.tensor([5.0, -5.0, 0.0, -0.0, INF, -INF, 7.0, -7.0, 1e30, 2.5, -2.5, NAN, 3e-9])


class Divisions(torch.nn.Module):
    def forward(self, a, b):
        return a // b, torch.fmod(a, b), torch.remainder(a, b), torch.div(a, b, rounding_mode="floor"), \
            torch.div(a, b, rounding_mode="trunc")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_pair_of_special_values(dtype, tmp_path):
    a = VALUES.repeat_interleave(len(VALUES)).to(dtype)
    b = VALUES.repeat(len(VALUES)).to(dtype)
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(Divisions(), (a, b), out, target=fx2nnef.TractNNEF(check_io=False))
    (got,) = run_tract_many(out, [[a.numpy(), b.numpy()]])
    for name, want, have in zip(["floordiv", "fmod", "remainder", "floor", "trunc"], Divisions()(a, b), got):
        want, have = want.float().numpy(), have.astype(np.float32)
        wrong = ~((want == have) | (np.isnan(want) & np.isnan(have)))
        pairs = [(float(x), float(y), float(w), float(h)) for x, y, w, h in zip(a[wrong], b[wrong], want[wrong], have[wrong])]
        assert not pairs, f"{name} differs (a, b, torch, tract): {pairs[:6]}"


class NamedLikeLiterals(torch.nn.Module):
    """Buffers whose names start like NNEF literals (tract's parser read ``inf1`` as ``inf`` then ``1``
    and refused the asset at load)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inf1", torch.tensor([INF]))
        self.register_buffer("true_scale", torch.tensor([2.0]))

    def forward(self, z):
        return torch.div((z.abs() + 0.1) ** 2.0, self.inf1, rounding_mode="floor"), z // -self.inf1, z * self.true_scale


def test_buffers_named_like_literals(tmp_path):
    z = torch.tensor([0.7, -0.3, 5.0])
    out = tmp_path / "m.nnef.tgz"
    fx2nnef.export(NamedLikeLiterals(), (z,), out, target=fx2nnef.TractNNEF(check_io=False))
    (got,) = run_tract_many(out, [[z.numpy()]])
    for want, have in zip(NamedLikeLiterals()(z), got):
        assert np.array_equal(want.numpy(), have), (want, have)
