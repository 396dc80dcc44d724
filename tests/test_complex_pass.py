"""Complex tensors inside a model become real pairs ([..., 2], as view_as_real lays them out):
the rotary embeddings of DeepSeek-V2 and Llama 4 (polar, view_as_complex, a complex product,
view_as_real) export; other complex ops are refused with their source line."""
import pytest
import torch

import fx2nnef
from harness import check_op, randn


def rotary(x, angles):
    """Rotate consecutive pairs of ``x`` [B, H, S, D] by ``angles`` [S, D/2], through complex numbers."""
    freqs = torch.polar(torch.ones_like(angles), angles) * 0.5
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(z * freqs[None, None, :, :]).flatten(3).type_as(x)


def parts(x, y):
    """Products with real tensors and numbers, sums, unsqueeze, indexing, real and imaginary parts."""
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    w = torch.view_as_complex(y.reshape(*y.shape[:-1], -1, 2))
    u = (z * w + z).unsqueeze(-1) * x[..., :1, None]
    u = u[..., 0] - 2.0 * w
    return torch.stack([u.real, u.imag, torch.real(z) * torch.imag(w)], dim=-1)


@pytest.mark.parametrize("fn,inputs,dyn", [
    (rotary, [randn(1, 2, 5, 8), randn(5, 4, seed=1)], {"x0": {2: "S"}, "x1": {0: "S"}}),
    (parts, [randn(3, 6), randn(3, 6, seed=1)], {"x0": {0: "N"}, "x1": {0: "N"}}),
], ids=["rotary", "parts"])
def test_complex_as_real_pairs(fn, inputs, dyn, tmp_path):
    r = check_op(fn, inputs, tmp_path, dynamic_axes=dyn)
    assert r.check.ok and len(r.check.cases) >= 3


def test_unsupported_complex_op_is_refused(tmp_path):
    def fn(x):
        return torch.view_as_real(torch.view_as_complex(x.reshape(3, 2, 2)).log())

    with pytest.raises(fx2nnef.errors.TraceError, match=r"complex tensors: .*log.*test_complex_pass.py"):
        check_op(fn, [randn(3, 4)], tmp_path)


def test_python_type_as_dtype(tmp_path):
    """``torch.zeros(n, dtype=int)`` (transformers' masking code) records torch.int64."""
    r = check_op(lambda x: x + torch.zeros(x.shape[0], dtype=int)[:, None] + torch.ones(1, dtype=float),
                 [randn(4, 3)], tmp_path, dynamic_axes={"x0": {0: "N"}})
    assert r.check.ok
