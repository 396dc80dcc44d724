"""Shared helpers for op and model tests: export a callable through fx2nnef and check it for real.

``check_op(fn, inputs)`` wraps ``fn`` in a module, exports it with fx2nnef.export (tract, and
optionally the Khronos target) and lets the target's own check compare the engine's
outputs with PyTorch: a mismatch raises CheckIOError, which fails the test.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

import fx2nnef


class FnModule(torch.nn.Module):
    """A module whose forward calls ``fn(*inputs)``; ``params`` become real parameters/buffers."""

    def __init__(self, fn: Callable, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            if isinstance(v, torch.nn.Module):
                self.add_module(k, v)
            elif isinstance(v, torch.Tensor):
                self.register_buffer(k, v)
            else:
                setattr(self, k, v)

    def forward(self, *xs):
        return self.fn(self, *xs) if _wants_self(self.fn) else self.fn(*xs)


def _wants_self(fn) -> bool:
    code = getattr(fn, "__code__", None)
    return bool(code and code.co_argcount and code.co_varnames[0] == "self")


@dataclasses.dataclass
class OpCase:
    """One op test: a callable, its inputs and what to check."""

    name: str
    fn: Callable
    inputs: Sequence
    khronos: bool = True  # also export for KhronosNNEF and run the nnef_tools interpreter
    tolerance: str = "approximate"
    dynamic_axes: Optional[dict] = None
    module: Optional[torch.nn.Module] = None

    def __str__(self):
        return self.name


def check_op(fn, inputs, tmp_path: Path, *, target: str = "tract", tolerance: str = "approximate",
             dynamic_axes: Optional[dict] = None, module: Optional[torch.nn.Module] = None):
    """Export ``fn`` (or ``module``) on ``inputs`` for ``target`` and return the ExportResult."""
    model = module if module is not None else FnModule(fn)
    names = [f"x{i}" for i in range(len(inputs))]
    if target == "tract":
        tgt = fx2nnef.TractNNEF(check_io=True, check_io_tolerance=tolerance, dynamic_axes=dynamic_axes or {})
        out = tmp_path / "tract.nnef.tgz"
    else:
        tgt = fx2nnef.KhronosNNEF(check_io=True, check_io_tolerance=tolerance)
        out = tmp_path / "khronos_nnef"
    return fx2nnef.export(model, tuple(inputs), out, target=tgt, input_names=names)


def run_case(case: OpCase, tmp_path: Path, target: str = "tract"):
    return check_op(case.fn, case.inputs, tmp_path, target=target, tolerance=case.tolerance,
                    dynamic_axes=case.dynamic_axes if target == "tract" else None, module=case.module)


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def noisy(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode with every parameter moved by 0.1 of a normal draw (seed 0): default
    initialisations (norms at one, zero biases) hide bugs."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    return model.eval()


def randn(*shape, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded(seed)).to(dtype)


def randint(low, high, *shape, dtype=torch.int64, seed: int = 0) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=seeded(seed)).to(dtype)


def randbool(*shape, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=seeded(seed)) > 0.5


def export_and_run_with_kv_cache(model, full: torch.Tensor, tmp_path: Path, steps: Sequence[tuple]) -> "fx2nnef.ExportResult":
    """Export a transformers causal LM taking a ``DynamicCache`` (input ids of length S after a past
    of length P, both dynamic), then run the asset in tract at each ``(S, P)`` of ``steps`` and
    compare every output (logits, then each layer's keys and values) with the model at the
    default tolerance level. ``full``: ``[1, >= max(P + S)]`` token ids the steps are cut from."""
    import numpy as np
    from transformers import DynamicCache

    from fx2nnef.targets.tolerance import compare_outputs, format_diffs
    from fx2nnef.targets.tract_runner import run_tract

    with torch.no_grad():
        layers = model(full, use_cache=True).past_key_values.layers

    def past(p):
        return [(layer.keys[:, :, :p].clone(), layer.values[:, :, :p].clone()) for layer in layers]

    dyn = {"input_ids": {1: "S"}}
    for i in range(len(layers)):
        dyn[f"past_key_values_{i}_key"] = {2: "P"}
        dyn[f"past_key_values_{i}_value"] = {2: "P"}
    out = tmp_path / "kv.nnef.tgz"
    r = fx2nnef.export(model, (full[:, 5:8],), out,
                       kwargs={"past_key_values": DynamicCache(ddp_cache_data=past(5)), "use_cache": True},
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and r.symbols == ["S", "P"] and len(r.output_names) == 1 + 2 * len(layers)
    for s, p in steps:
        cache = past(p)
        ids = full[:, p:p + s]
        with torch.no_grad():
            expected = model(ids, past_key_values=DynamicCache(ddp_cache_data=cache), use_cache=True)
        want = [expected.logits.numpy()] + [t.numpy() for layer in expected.past_key_values.layers
                                            for t in (layer.keys, layer.values)]
        got = run_tract(out, [ids.numpy()] + [t.numpy() for kv in cache for t in kv])
        diffs = compare_outputs(None, want, got, "approximate")
        assert all(d.ok for d in diffs), f"S={s}, P={p}:\n" + format_diffs(diffs)
        assert np.isfinite(got[0]).all()
    return r


def tract_matches_eager(asset, model, input_sets) -> None:
    """Run ``asset`` in tract on more inputs (each a list of tensors) and compare with the eager
    ``model`` at tract's approximate level."""
    from fx2nnef.targets.tolerance import compare_outputs
    from fx2nnef.targets.tract_runner import run_tract_many

    got = run_tract_many(asset, [[t.numpy() for t in ins] for ins in input_sets])
    for ins, outs in zip(input_sets, got):
        with torch.no_grad():
            exp = model(*ins)
        exp = [exp] if isinstance(exp, torch.Tensor) else list(exp)
        diffs = compare_outputs(None, [e.numpy() for e in exp], outs, "approximate")
        assert all(d.ok for d in diffs), diffs


def export_checked(model, inputs, tmp_path: Path, dynamic_axes: dict, names: list) -> Path:
    """Export to ``tmp_path / "m.nnef.tgz"`` with ``dynamic_axes``; the check in tract must pass at
    the example and at two other sizes at least. Returns the asset's path."""
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, tuple(inputs), out, input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=dynamic_axes))
    assert r.check.ok and len(r.check.cases) >= 3, r.check
    return out
