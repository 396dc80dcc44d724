"""check_io and float32 rounding: a check that fails because the model amplifies float32 rounding
(tract and eager PyTorch both round, in other orders) is arbitrated by a float64 run of the model.

The amplifier here is honest cancellation: two linear layers with nearly equal large weights,
subtracted. Their sums are about 600 and their difference about 0.2, so the rounding of either
sum, about 1e-4, is several times the tolerance on the difference, in tract as in eager float32
(both about 5 to 10 tolerance units from the float64 answer). The plain comparison then fails on
every case; float64 shows that tract is as close to the exact answer as PyTorch's own float32 is.

A genuinely wrong asset is made the way a user makes one: an extractor (a hand-written lowering
of a module) with a wrong constant, a slip of the kind a wrong eps or scale is. Eager float32 and
float64 agree on that module's values and tract does not: the failure stands, with the figures.

A float64 run is a reference only if it computes what float32 approximates. A module whose
forward adds an offset when it runs in float64 (a branch on the dtype) stands for a model that
computes otherwise in float64; it is no honest way to make a check pass, but it shows that such a
float64 run, far from eager and tract alike, does not let a wrong asset through.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.errors import CheckIOError
from fx2nnef.nnef_emit.extractors import EXTRACTOR_CLASSES, ModuleInfoExtractor, register_extractor
from fx2nnef.targets.rounding import ROUNDING_FACTOR, Float64Figures, tolerance_units
from fx2nnef.targets.tolerance import resolve_tolerance

N = 256


class Cancelling(torch.nn.Module):
    """``a(x) - b(x)`` with ``b``'s weights within 1e-3 of ``a``'s (about 6): float32 computes
    the difference to about 1e-4 only, a few times the approximate tolerance."""

    def __init__(self, n: int = N, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a, self.b = torch.nn.Linear(n, n), torch.nn.Linear(n, n)
        with torch.no_grad():
            self.a.weight.copy_(torch.randn(n, n, generator=g) * 6.0)
            self.a.bias.copy_(torch.randn(n, generator=g))
            self.b.weight.copy_(self.a.weight + 1e-3 * torch.randn(n, n, generator=g))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x):
        return self.a(x) - self.b(x)


class Offset(torch.nn.Module):
    """Adds a per-feature offset; lowered by :class:`SlippedOffset`, which gets it wrong."""

    def __init__(self, n: int = N):
        super().__init__()
        self.register_buffer("offset", torch.linspace(0.05, 0.15, n).view(1, n))

    def forward(self, x):
        return x + self.offset


class SlippedOffset(ModuleInfoExtractor):
    """A user's lowering of :class:`Offset` with a slip: it adds the offset twice."""

    MODULE_CLASS = Offset

    def convert_to_nnef(self, ctx, inputs, module):
        (x,) = inputs
        offset = module["params"]["offset"]
        twice = ctx.op("add", offset, offset, out_shape=offset.shape)
        return ctx.op("add", x, twice, out_shape=x.shape)


if Offset not in EXTRACTOR_CLASSES:
    register_extractor(SlippedOffset)


class ElsewhereInFloat64(torch.nn.Module):
    """Adds 2 when run in float64: a float64 run that computes something else."""

    def forward(self, x):
        return x + 2.0 if x.dtype == torch.float64 else x


class MixedInForward(Cancelling):
    """Mixes the features with a matrix made in forward, in torch's default dtype (float32): the
    model runs in float32 only (float64 inputs meet a float32 matrix in ``linear``)."""

    def forward(self, x):
        mix = torch.full((x.shape[-1], x.shape[-1]), 1.0 / x.shape[-1]) + torch.eye(x.shape[-1])
        return torch.nn.functional.linear(super().forward(x), mix)


def _inputs(seed: int = 1):
    return (torch.randn(2, N, generator=torch.Generator().manual_seed(seed)) * 10.0,)


def _export(model, path, check_io: bool = True):
    target = fx2nnef.TractNNEF(check_io=check_io, dynamic_axes={"x": {0: "B"}})
    return fx2nnef.export(model.eval(), _inputs(), path, input_names=["x"], target=target)


def test_rounding_amplified_by_the_model_passes_with_its_figures(tmp_path):
    result = _export(Cancelling(), tmp_path / "cancel.nnef.tgz")
    check = result.check
    assert check.ok and check.float64 is not None and check.float64.passed
    labels = [label for label, _ in check.cases]
    assert len(labels) >= 2  # the example and other batch sizes, each failing the plain comparison
    assert sorted(f.label for f in check.float64.figures) == sorted(labels)
    for f in check.float64.figures:
        assert f.eager > 1.0  # PyTorch's own float32 is off by more than the tolerance
        assert f.engine <= ROUNDING_FACTOR * f.eager
    summary = result.summary()
    assert "note: values outside the tolerance passed as float32 rounding" in summary
    for label, diffs in check.cases:
        assert all(d.ok and "outside approximate" in d.note for d in diffs)
        assert all(f"float32 rounding: tract {f.engine:.3g}, eager {f.eager:.3g} tolerance units from float64"
                   in summary for f in check.float64.figures)


def test_check_io_false_writes_the_same_asset(tmp_path):
    checked = _export(Cancelling(), tmp_path / "checked.nnef.tgz")
    unchecked = _export(Cancelling(), tmp_path / "unchecked.nnef.tgz", check_io=False)
    assert unchecked.check is None
    assert checked.path.read_bytes() == unchecked.path.read_bytes()


def test_a_wrong_asset_still_fails_with_the_float64_figures(tmp_path):
    model = torch.nn.Sequential(Cancelling(), Offset())
    with pytest.raises(CheckIOError) as caught:
        fx2nnef.export(model.eval(), _inputs(), tmp_path / "wrong.nnef.tgz", input_names=["x"],
                       leaf_modules=(Offset,), target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    text = str(caught.value)
    assert "Float64 arbitration: not float32 rounding (tract more than 4x further" in text
    assert "[example] output: tract " in text and "tolerance units from float64  <- not rounding" in text
    assert "float32 rounding: tract" not in text
    assert not (tmp_path / "wrong.nnef.tgz").exists()


def test_a_float64_run_that_computes_otherwise_lets_no_wrong_asset_through(tmp_path):
    model = torch.nn.Sequential(Cancelling(), Offset(), ElsewhereInFloat64())
    with pytest.raises(CheckIOError) as caught:
        fx2nnef.export(model.eval(), _inputs(), tmp_path / "wrong.nnef.tgz", input_names=["x"],
                       leaf_modules=(Offset,), target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    figures = caught.value.float64.figures
    assert figures and all(f.engine <= ROUNDING_FACTOR * f.eager and not f.is_reference for f in figures)
    assert "<- float64 is no reference here: eager float32 is" in str(caught.value)


def test_a_model_that_cannot_run_in_float64_keeps_its_error(tmp_path):
    with pytest.raises(CheckIOError) as caught:
        _export(MixedInForward(), tmp_path / "mixed.nnef.tgz")
    text = str(caught.value)
    assert "Float64 arbitration: the model could not be run in float64 (RuntimeError:" in text
    assert "outside approximate" in text


def test_a_model_too_large_to_copy_is_not_run_in_float64(tmp_path, monkeypatch):
    import fx2nnef.fx_tracer.float64_run as float64_run

    # the bound of a float64 copy (1 GiB) set below this model's 0.5 MiB
    monkeypatch.setattr(float64_run, "MAX_PARAMETER_BYTES", 2**16)
    with pytest.raises(CheckIOError) as caught:
        _export(Cancelling(), tmp_path / "large.nnef.tgz")
    assert ("Float64 arbitration: not run: the model's parameters and buffers take 0.5 MiB, above the 0.1 MiB "
            "bound of a float64 copy.") in str(caught.value)


def test_tolerance_units():
    tol = resolve_tolerance("approximate")  # atol 1e-4, rtol 5e-4
    exact = np.array([0.0, 1.0, 100.0])
    assert tolerance_units(exact, exact, tol) == 0.0
    assert tolerance_units(exact + np.array([1e-4, 0, 0]), exact, tol) == pytest.approx(1.0)
    assert tolerance_units(exact + np.array([0, 0, 0.1002]), exact, tol) == pytest.approx(2.0)
    assert tolerance_units(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), tol) == 0.0
    assert tolerance_units(np.array([np.inf, 1.0]), np.array([5.0, 1.0]), tol) == np.inf
    assert Float64Figures("B=3", "y", 4.0, 1.0, 1.0).rounding and not Float64Figures("B=3", "y", 4.1, 1.0, 1.0).rounding
    assert not Float64Figures("B=3", "y", 1.0, 4.1, 1.0).rounding  # eager far from float64, near the engine


def test_float64_run_holds_the_stored_weights(tmp_path):
    """Weights stored as float16: the float64 copy computes with the stored values decoded. With
    the model's own float32 weights it would be thousands of units from both engines (float16
    moves each weight by about 1e-3, as much as the two layers differ)."""
    target = fx2nnef.TractNNEF(weights="f16", dynamic_axes={"x": {0: "B"}})
    result = fx2nnef.export(Cancelling().eval(), _inputs(), tmp_path / "f16.nnef.tgz", input_names=["x"], target=target)
    assert result.check.ok and result.check.float64.passed
    assert all(f.eager < 30 for f in result.check.float64.figures)


def test_only_float_outputs_that_differ_by_value_are_arbitrated():
    """The decision alone, on arrays: a failing integer output, or one of another shape, keeps
    its failure without a float64 run; float values off by rounding pass."""
    from fx2nnef.ir import CheckCase
    from fx2nnef.targets.base import CheckReport
    from fx2nnef.targets.rounding import arbitrate
    from fx2nnef.targets.tolerance import compare_outputs

    exact = np.linspace(-1.0, 1.0, 50)
    eager = (exact + 3e-4).astype(np.float32)
    engine = (exact - 3e-4).astype(np.float32)
    index = np.arange(4)
    case = CheckCase("example", [np.zeros(1, np.float32)], [eager, index])

    def report(got):
        return CheckReport("tract", [("example", compare_outputs(["y", "i"], case.expected, got, "approximate"))])

    ran = []
    float64 = lambda: (lambda inputs: ran.append(1) or [exact, index])  # noqa: E731
    passed = arbitrate(report([engine, index]), [case], "approximate", lambda sets: [[engine, index]], float64)
    assert passed.ok and passed.float64.passed and ran
    ran.clear()
    kept = arbitrate(report([engine, index + 1]), [case], "approximate", lambda sets: [[engine, index + 1]], float64)
    assert not kept.ok and not ran
    assert kept.float64.unavailable == ("not run: output i at [example] fails otherwise than by its values "
                                        "(int64 values are compared exactly)")
    shaped = arbitrate(report([engine[:10], index]), [case], "approximate", lambda sets: [[engine, index]], float64)
    assert not shaped.ok and "its shape, count or dtype differs" in shaped.float64.unavailable and not ran


def test_no_arbitration_at_a_level_without_rounding(tmp_path):
    exact = fx2nnef.Tolerance("zero", 0.0, 0.0)
    with pytest.raises(CheckIOError) as caught:
        fx2nnef.export(Cancelling().eval(), _inputs(), tmp_path / "zero.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(check_io_tolerance=exact))
    assert "Float64 arbitration: not run: the level 'zero' allows no rounding." in str(caught.value)
    assert not Float64Figures("B=3", "y", np.inf, np.inf, np.inf).rounding
