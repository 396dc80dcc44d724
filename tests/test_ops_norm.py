"""Normalizations: functional calls and nn modules exported and run in tract and nnef_tools."""
import pytest
import torch
import torch.nn.functional as F

from harness import OpCase, randn, run_case

IMG = randn(2, 4, 5, 6) * 2 + 0.5
SEQ = randn(2, 5, 8) * 3 + 1
VEC = randn(3, 4)
F16 = randn(2, 5, 8, dtype=torch.float16, seed=1)
DYN_B = {"x0": {0: "B"}}
DYN_S = {"x0": {1: "S"}}
DYN_HW = {"x0": {2: "H"}}


def stats(c: int, seed: int = 0) -> dict:
    """Running mean/var, weight and bias of ``c`` channels as module buffers."""
    return dict(mean=randn(c, seed=seed), var=randn(c, seed=seed + 1).abs() + 0.5,
                weight=randn(c, seed=seed + 2), bias=randn(c, seed=seed + 3))


class Fn(torch.nn.Module):
    """``fn(self, x)`` with tensors registered as buffers."""

    def __init__(self, fn, **tensors):
        super().__init__()
        self.fn = fn
        for k, v in tensors.items():
            self.register_buffer(k, v)

    def forward(self, x):
        return self.fn(self, x)


def module(cls, *args, randomize: bool = True, **kwargs) -> torch.nn.Module:
    """An nn module in eval mode whose parameters and buffers are random (not ones and zeros)."""
    m = cls(*args, **kwargs).eval()
    with torch.no_grad():
        for i, (name, t) in enumerate(list(m.named_parameters()) + list(m.named_buffers())):
            if randomize and t.is_floating_point():
                t.copy_(randn(*t.shape, seed=10 + i).abs() + 0.5 if "var" in name else randn(*t.shape, seed=10 + i))
    return m


class LlamaRMSNorm(torch.nn.Module):
    """The pattern transformers' LlamaRMSNorm traces to (pow, mean, rsqrt, mul)."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(randn(hidden, seed=5))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


BN = stats(4)
CASES = [
    OpCase("batch_norm", None, [IMG], module=Fn(lambda s, x: F.batch_norm(x, s.mean, s.var, s.weight, s.bias), **BN)),
    OpCase("batch_norm_no_affine", None, [IMG], module=Fn(lambda s, x: F.batch_norm(x, s.mean, s.var, eps=1e-3), **BN)),
    OpCase("batch_norm_aten", None, [IMG], khronos=False, module=Fn(
        lambda s, x: torch.batch_norm(x, s.weight, s.bias, s.mean, s.var, False, 0.1, 1e-5, False), **BN)),
    OpCase("batch_norm_batch_stats", None, [IMG], module=Fn(lambda s, x: F.batch_norm(x, None, None, training=True))),
    OpCase("batchnorm1d_2d_input", None, [VEC], module=module(torch.nn.BatchNorm1d, 4)),
    OpCase("batchnorm1d_3d_input", None, [randn(2, 4, 7)], module=module(torch.nn.BatchNorm1d, 4), khronos=False),
    OpCase("batchnorm2d", None, [IMG], module=module(torch.nn.BatchNorm2d, 4)),
    OpCase("batchnorm2d_dyn", None, [IMG], module=module(torch.nn.BatchNorm2d, 4), dynamic_axes=DYN_B),
    OpCase("batchnorm2d_untracked", None, [IMG], module=module(torch.nn.BatchNorm2d, 4, track_running_stats=False)),
    OpCase("layer_norm", lambda x: F.layer_norm(x, (8,)), [SEQ]),
    OpCase("layer_norm_two_axes", None, [SEQ], module=module(torch.nn.LayerNorm, (5, 8))),
    OpCase("layer_norm_affine", None, [SEQ], module=module(torch.nn.LayerNorm, 8)),
    OpCase("layer_norm_no_bias", None, [SEQ], module=module(torch.nn.LayerNorm, 8, bias=False), khronos=False),
    OpCase("layer_norm_aten", None, [SEQ], khronos=False, module=Fn(
        lambda s, x: torch.layer_norm(x, [8], s.weight, s.bias, 1e-5, False), weight=randn(8), bias=randn(8, seed=1))),
    OpCase("layer_norm_dyn", None, [SEQ], module=module(torch.nn.LayerNorm, 8), dynamic_axes=DYN_B),
    OpCase("layer_norm_dyn_seq", None, [SEQ], module=module(torch.nn.LayerNorm, 8), dynamic_axes=DYN_S),
    OpCase("layer_norm_f16", None, [F16], module=module(torch.nn.LayerNorm, 8).half(), khronos=False),
    OpCase("group_norm", lambda x: F.group_norm(x, 2), [IMG]),
    OpCase("group_norm_affine", None, [IMG], module=module(torch.nn.GroupNorm, 2, 4)),
    OpCase("group_norm_per_channel", None, [IMG], module=module(torch.nn.GroupNorm, 4, 4), khronos=False),
    OpCase("group_norm_dyn", None, [IMG], module=module(torch.nn.GroupNorm, 2, 4), dynamic_axes=DYN_HW),
    OpCase("instance_norm", lambda x: F.instance_norm(x), [IMG]),
    OpCase("instance_norm2d_affine", None, [IMG], module=module(torch.nn.InstanceNorm2d, 4, affine=True)),
    OpCase("instance_norm1d_running", None, [randn(2, 4, 7)],
           module=module(torch.nn.InstanceNorm1d, 4, affine=True, track_running_stats=True)),
    OpCase("instance_norm_dyn", lambda x: F.instance_norm(x), [IMG], dynamic_axes=DYN_HW),
    OpCase("rms_norm", lambda x: F.rms_norm(x, (8,)), [SEQ]),
    OpCase("rms_norm_eps", lambda x: F.rms_norm(x, [8], eps=1e-5), [SEQ], khronos=False),
    OpCase("rms_norm_module", None, [SEQ], module=module(torch.nn.RMSNorm, 8)),
    OpCase("rms_norm_two_axes", None, [SEQ], module=module(torch.nn.RMSNorm, (5, 8), eps=1e-6)),
    OpCase("rms_norm_dyn", None, [SEQ], module=module(torch.nn.RMSNorm, 8, eps=1e-6), dynamic_axes=DYN_S),
    OpCase("rms_norm_f16", None, [F16], module=module(torch.nn.RMSNorm, 8).half(), khronos=False),
    OpCase("llama_rms_norm", None, [SEQ], module=LlamaRMSNorm(8)),
    OpCase("llama_rms_norm_dyn", None, [SEQ], module=LlamaRMSNorm(8), dynamic_axes=DYN_S),
    OpCase("normalize", F.normalize, [VEC]),
    OpCase("normalize_last_p1", lambda x: F.normalize(x, p=1.0, dim=-1), [SEQ]),
    OpCase("normalize_zero_row", lambda x: F.normalize(x * (x > 0), dim=0), [VEC], khronos=False),
    OpCase("local_response_norm", lambda x: F.local_response_norm(x, 3), [IMG]),
    OpCase("local_response_norm_even", None, [randn(2, 6, 7)], module=torch.nn.LocalResponseNorm(4, alpha=0.1, k=2.0)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")
