"""Every registered spelling of an op (torch.X, Tensor.X, F.X, operator.X) exported once.

The family test files exercise each lowering in depth; this table makes sure the other
spellings that share those lowerings are wired to them and give the same numbers.
"""
import operator

import pytest
import torch
import torch.nn.functional as F

from harness import OpCase, randbool, randint, randn, run_case

X = randn(2, 3, 4)
Y = randn(2, 3, 4, seed=1)
U = randn(2, 3, 4).clamp(-0.9, 0.9)               # inside (-1, 1)
POS = randn(2, 3, 4).abs() + 1.1                    # > 1
M = randn(3, 4)
N = randn(4, 5, seed=2)
B3 = randn(2, 3, 4)
C3 = randn(2, 4, 5, seed=3)
I = randint(-5, 5, 2, 3, 4)
J = randint(1, 5, 2, 3, 4, seed=1)
BOOL = randbool(2, 3, 4)
BOOL2 = randbool(2, 3, 4, seed=5)
V = randn(4)
W = randn(5, seed=4)
IMG1 = randn(1, 2, 8)
IMG3 = randn(1, 2, 4, 6, 6)

UNARY_METHODS = ["abs", "acos", "asin", "atanh", "ceil", "floor", "log", "log10", "log1p", "log2", "neg",
                 "reciprocal", "relu", "round", "rsqrt", "sgn", "sigmoid", "sign", "sinh", "cosh", "sqrt",
                 "square", "tan", "tanh", "trunc", "exp2", "expm1", "frac", "atan", "asinh"]
DOMAIN = {"acos": U, "asin": U, "atanh": U, "log": POS, "log10": POS, "log1p": POS, "log2": POS, "rsqrt": POS,
          "sqrt": POS, "reciprocal": POS, "acosh": POS}

CASES = [OpCase(f"Tensor.{m}", (lambda m: lambda x: getattr(x, m)())(m), [DOMAIN.get(m, X)], khronos=False)
         for m in UNARY_METHODS]
CASES += [OpCase("Tensor.acosh", lambda x: x.acosh(), [POS], khronos=False)]
CASES += [OpCase(f"torch.{m}", getattr(torch, m), [DOMAIN.get(m, X)], khronos=False)
          for m in ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "log2", "round", "sign", "sinh", "tan",
                    "fix"]]
CASES += [OpCase(f"torch.special.{m}", getattr(torch.special, m), [DOMAIN.get(m, X)], khronos=False)
          for m in ["erf", "exp2", "expm1", "log1p", "round"]]
CASES += [OpCase(f"F.{m}", getattr(F, m), [X], khronos=False) for m in ["selu", "sigmoid", "tanh"]]

BINARY_METHODS = ["div", "eq", "ge", "greater", "greater_equal", "gt", "le", "less", "less_equal", "lt", "maximum",
                  "minimum", "multiply", "ne", "not_equal", "sub", "subtract", "true_divide", "fmod", "floor_divide"]
CASES += [OpCase(f"Tensor.{m}", (lambda m: lambda x, y: getattr(x, m)(y))(m), [X, POS], khronos=False)
          for m in BINARY_METHODS]
CASES += [OpCase(f"torch.{m}", getattr(torch, m), [X, Y], khronos=False)
          for m in ["eq", "ge", "greater", "greater_equal", "le", "less", "less_equal", "lt", "minimum", "mul",
                    "multiply", "ne", "not_equal", "sub", "subtract", "true_divide"]]
CASES += [
    OpCase("operator.ge", operator.ge, [X, Y], khronos=False),
    OpCase("operator.abs", abs, [X], khronos=False),
    OpCase("operator.invert", operator.invert, [BOOL], khronos=False),
    OpCase("operator.or_", operator.or_, [BOOL, BOOL2], khronos=False),
    OpCase("Tensor.logical_and", lambda a, b: a.logical_and(b), [BOOL, BOOL2], khronos=False),
    OpCase("Tensor.logical_or", lambda a, b: a.logical_or(b), [BOOL, BOOL2], khronos=False),
    OpCase("Tensor.logical_not", lambda a: a.logical_not(), [BOOL], khronos=False),
    OpCase("torch.logical_or", torch.logical_or, [BOOL, BOOL2], khronos=False),
    OpCase("Tensor.bitwise_and", lambda a, b: a.bitwise_and(b), [BOOL, BOOL2], khronos=False),
    OpCase("Tensor.bitwise_or", lambda a, b: a.bitwise_or(b), [BOOL, BOOL2], khronos=False),
    OpCase("torch.bitwise_and", torch.bitwise_and, [BOOL, BOOL2], khronos=False),
    OpCase("torch.bitwise_or", torch.bitwise_or, [BOOL, BOOL2], khronos=False),
    # linear algebra
    OpCase("Tensor.matmul", lambda a, b: a.matmul(b), [M, N], khronos=False),
    OpCase("Tensor.mm", lambda a, b: a.mm(b), [M, N], khronos=False),
    OpCase("torch.mm", torch.mm, [M, N], khronos=False),
    OpCase("Tensor.bmm", lambda a, b: a.bmm(b), [B3, C3], khronos=False),
    OpCase("torch.bmm", torch.bmm, [B3, C3], khronos=False),
    OpCase("Tensor.addmm", lambda c, a, b: c.addmm(a, b, beta=0.5, alpha=2.0), [randn(3, 5), M, N], khronos=False),
    OpCase("torch.baddbmm", torch.baddbmm, [randn(2, 3, 5), B3, C3], khronos=False),
    OpCase("Tensor.baddbmm", lambda c, a, b: c.baddbmm(a, b), [randn(2, 3, 5), B3, C3], khronos=False),
    OpCase("torch.ger", torch.ger, [V, W], khronos=False),
    OpCase("Tensor.ger", lambda a, b: a.ger(b), [V, W], khronos=False),
    # shape
    OpCase("Tensor.broadcast_to", lambda x: x[:, :1].broadcast_to(2, 3, 4), [X], khronos=False),
    OpCase("Tensor.tile", lambda x: x.tile(2, 1), [M], khronos=False),
    OpCase("torch.tile", lambda x: torch.tile(x, (2,)), [M], khronos=False),
    OpCase("torch.broadcast_to", lambda x: torch.broadcast_to(x[:, :1], (2, 3, 4)), [X], khronos=False),
    OpCase("Tensor.moveaxis", lambda x: x.moveaxis(0, -1), [X], khronos=False),
    OpCase("torch.moveaxis", lambda x: torch.moveaxis(x, 0, -1), [X], khronos=False),
    OpCase("Tensor.swapdims", lambda x: x.swapdims(0, 2), [X], khronos=False),
    OpCase("torch.swapaxes", lambda x: torch.swapaxes(x, 0, 2), [X], khronos=False),
    OpCase("Tensor.cpu", lambda x: x.cpu() + 1, [X], khronos=False),
    OpCase("torch.detach", lambda x: torch.detach(x) * 2, [X], khronos=False),
    OpCase("Tensor.diff", lambda x: x.diff(dim=1), [X], khronos=False),
    # tract has no bfloat16: the cast keeps f32 precision, torch rounds to 8 bits of mantissa
    OpCase("Tensor.bfloat16", lambda x: x.bfloat16().float(), [X], khronos=False, tolerance="very"),
    OpCase("Tensor.byte", lambda x: x.abs().byte().long(), [I], khronos=False),
    OpCase("Tensor.char", lambda x: x.char().long(), [I], khronos=False),
    OpCase("Tensor.short", lambda x: x.short().long(), [I], khronos=False),
    OpCase("torch.as_tensor", lambda x: x + torch.as_tensor([1.0, 2.0, 3.0, 4.0]), [X], khronos=False),
    # reductions and activations
    OpCase("torch.amin", lambda x: torch.amin(x, dim=1), [X], khronos=False),
    OpCase("torch.argmin", lambda x: torch.argmin(x, dim=-1), [X], khronos=False),
    OpCase("torch.min", lambda x: torch.min(x, dim=1)[0], [X], khronos=False),
    OpCase("Tensor.nansum", lambda x: x.nansum(-1), [X], khronos=False),
    OpCase("Tensor.clamp_min", lambda x: x.clamp_min(0.1), [X], khronos=False),
    OpCase("torch.clamp_max", lambda x: torch.clamp_max(x, 0.1), [X], khronos=False),
    OpCase("Tensor.clip", lambda x: x.clip(-0.5, 0.5), [X], khronos=False),
    OpCase("Tensor.hardshrink", lambda x: x.hardshrink(0.3), [X], khronos=False),
    OpCase("Tensor.prelu", lambda x: x.prelu(torch.tensor([0.25])), [X], khronos=False),
    OpCase("torch.celu", lambda x: torch.celu(x, 0.5), [X], khronos=False),
    OpCase("torch.threshold", lambda x: torch.threshold(x, 0.1, -1.0), [X], khronos=False),
    OpCase("Tensor.nan_to_num", lambda x: (x / (x > 0)).nan_to_num(0.0, 9.0, -9.0), [X], khronos=False),
    OpCase("Tensor.addcmul", lambda x, a, b: x.addcmul(a, b, value=0.5), [X, Y, X], khronos=False),
    OpCase("torch.addcdiv", lambda x, a, b: torch.addcdiv(x, a, b, value=0.5), [X, Y, POS], khronos=False),
    OpCase("torch.special.softmax", lambda x: torch.special.softmax(x, -1), [X], khronos=False),
    OpCase("torch.special.log_softmax", lambda x: torch.special.log_softmax(x, -1), [X], khronos=False),
    OpCase("torch.special.logsumexp", lambda x: torch.special.logsumexp(x, -1), [X], khronos=False),
    OpCase("Tensor.isfinite", lambda x: (x / (x > 0)).isfinite(), [X], khronos=False),
    OpCase("Tensor.isinf", lambda x: (x / (x > 0)).isinf(), [X], khronos=False),
    OpCase("Tensor.isposinf", lambda x: (x / (x > 0)).isposinf(), [X], khronos=False),
    OpCase("Tensor.isneginf", lambda x: (-x / (x > 0)).isneginf(), [X], khronos=False),
    # dropout spellings are the identity in eval mode
    OpCase("F.dropout1d", lambda x: F.dropout1d(x, 0.5, training=False), [X], khronos=False),
    OpCase("F.dropout3d", lambda x: F.dropout3d(x, 0.5, training=False), [IMG3], khronos=False),
    OpCase("F.feature_alpha_dropout", lambda x: F.feature_alpha_dropout(x, 0.5, training=False), [X], khronos=False),
    OpCase("torch.dropout", lambda x: torch.dropout(x, 0.5, False), [X], khronos=False),
    OpCase("torch.alpha_dropout", lambda x: torch.alpha_dropout(x, 0.5, False), [X], khronos=False),
    OpCase("torch.feature_dropout", lambda x: torch.feature_dropout(x, 0.5, False), [X], khronos=False),
    OpCase("torch.feature_alpha_dropout", lambda x: torch.feature_alpha_dropout(x, 0.5, False), [X], khronos=False),
    # norms and pools
    OpCase("torch.group_norm", lambda x: torch.group_norm(x, 1), [X], khronos=False),
    OpCase("torch.instance_norm", lambda x: torch.instance_norm(x, None, None, None, None, True, 0.1, 1e-5, False),
           [X], khronos=False),
    OpCase("torch.rms_norm", lambda x: torch.rms_norm(x, [4]), [X], khronos=False),
    OpCase("torch.max_pool1d", lambda x: torch.max_pool1d(x, 2), [IMG1], khronos=False),
    OpCase("torch.max_pool3d", lambda x: torch.max_pool3d(x, 2), [IMG3], khronos=False),
    OpCase("F.adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 3)), [IMG3], khronos=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_alias(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool1d(x[0], 2, return_indices=True)[1],
    lambda x: F.max_pool3d(x.unsqueeze(0), 2, return_indices=True)[1],
    lambda x: F.adaptive_max_pool1d(x[0], 2, return_indices=True)[1],
    lambda x: F.adaptive_max_pool3d(x.unsqueeze(0), 1, return_indices=True)[1],
], ids=["max_pool1d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
        "adaptive_max_pool3d_with_indices"])
def test_pool_indices_are_refused_clearly(fn, tmp_path):
    import fx2nnef
    from harness import check_op

    with pytest.raises(fx2nnef.UnsupportedOpError, match="indices"):
        check_op(fn, [randn(1, 2, 4, 4, 4)[0]], tmp_path)
