"""Bad input and engine failures give clear errors; nothing is left half-written."""
import os

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.nnef_emit import REGISTRY
from fx2nnef.ir import op_key
from harness import randn


class Times3(torch.nn.Module):
    """Lowered on purpose with a WRONG converter (x * 2) to provoke a mismatch."""

    def forward(self, x):
        return x * 3


class Crashy(torch.nn.Module):
    """Lowered on purpose as a conv with border 'reflect', which makes tract abort."""

    def forward(self, x):
        return x + 1


def _wrong_times3(ctx, x, *, module):
    return ctx.op("mul", x, 2.0)


def _crashing(ctx, x, *, module):
    w = ctx.const(np.ones((1, 1, 1, 1), np.float32))
    return ctx.op("conv", x, w, 0.0, border="reflect", padding=[(0, 0), (0, 0)], stride=[1, 1], dilation=[1, 1], groups=1)


if REGISTRY.lookup(op_key(Times3), "tract") is None:
    REGISTRY.add(Times3, _wrong_times3)
    REGISTRY.add(Crashy, _crashing)


class TwoUnsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = torch.special.bessel_j0(self.inner(x))
        return torch.special.bessel_j1(y)


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def test_unsupported_ops_are_listed_together(tmp_path):
    out = tmp_path / "m.nnef.tgz"
    with pytest.raises(fx2nnef.UnsupportedOpError) as info:
        fx2nnef.export(TwoUnsupported(), (randn(2, 4),), out)
    msg = str(info.value)
    assert "bessel_j0" in msg and "bessel_j1" in msg
    assert "test_errors.py:" in msg
    assert len(info.value.problems) == 2
    assert not out.exists() and os.listdir(tmp_path) == []


def test_quantized_module_is_named_with_what_to_do(tmp_path):
    """A model quantized with torch.ao (quantize_dynamic) has int8 kernels with no NNEF form: the
    error names the op as torch does and says to export the float model with smaller weights."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    out = tmp_path / "q.nnef.tgz"
    with pytest.raises(fx2nnef.UnsupportedOpError) as info:
        fx2nnef.export(quantized, (randn(3, 8),), out)
    msg = str(info.value)
    assert "torch.ops.quantized.linear_dynamic module '0'" in msg and "quantize_dynamic" in msg, msg
    assert "Export the float model" in msg and "weights='f16' or 'q4_0'" in msg, msg
    assert not out.exists() and os.listdir(tmp_path) == []


@pytest.mark.parametrize("dyn, fragment", [
    ({"nope": {0: "B"}}, "unknown input 'nope'"),
    ({"x": {5: "B"}}, "axis 5"),
    ({"x": {0: "1B"}}, "must be an identifier"),
    ({"x": "B"}, "must map axis"),
])
def test_bad_dynamic_axes(dyn, fragment, tmp_path):
    with pytest.raises(fx2nnef.InvalidArgumentError, match=fragment):
        fx2nnef.export(Lin(), (randn(2, 4),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes=dyn))


def test_symbol_with_two_sizes(tmp_path):
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a.sum() + b.sum()

    with pytest.raises(fx2nnef.InvalidArgumentError, match="different sizes"):
        fx2nnef.export(Add(), (randn(2, 4), randn(3, 4)), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"a": {0: "B"}, "b": {0: "B"}}))


@pytest.mark.parametrize("kw, fragment", [
    ({"input_names": ["a", "b"]}, "2 input names"),
    ({"input_names": ["1x"]}, "identifiers"),
    ({"output_names": ["y", "z"]}, "2 output names"),
])
def test_bad_names(kw, fragment, tmp_path):
    with pytest.raises(fx2nnef.InvalidArgumentError, match=fragment):
        fx2nnef.export(Lin(), (randn(2, 4),), tmp_path / "m.nnef.tgz", **kw)


def test_bad_path(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(fx2nnef.InvalidArgumentError):
        fx2nnef.export(Lin(), (randn(2, 4),), tmp_path / "afile" / "m.nnef.tgz")


def test_mismatch_raises_with_diffs_and_bundle(tmp_path):
    out = tmp_path / "m.nnef.tgz"
    with pytest.raises(fx2nnef.CheckIOError) as info:
        fx2nnef.export(torch.nn.Sequential(Times3()), (randn(2, 4),), out, leaf_modules=(Times3,))
    err = info.value
    assert "max_abs" in str(err) and err.diffs and not err.diffs[0].ok
    assert not out.exists()
    bundle = err.bundle
    assert bundle and os.path.isdir(bundle) and bundle in str(err)
    files = os.listdir(bundle)
    assert "m.nnef.tgz" in files and any(f.startswith("inputs_") for f in files) and any(f.startswith("expected_") for f in files)


def test_tract_crash_is_an_exception(tmp_path):
    with pytest.raises(fx2nnef.TractError) as info:
        fx2nnef.export(torch.nn.Sequential(Crashy()), (randn(1, 1, 4, 4),), tmp_path / "m.nnef.tgz", leaf_modules=(Crashy,))
    assert "reflect" in str(info.value) or "crash" in str(info.value).lower()
    assert not (tmp_path / "m.nnef.tgz").exists()


def test_deterministic_bytes(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    a = fx2nnef.export(model, (randn(2, 4),), tmp_path / "a.nnef.tgz").path.read_bytes()
    b = fx2nnef.export(model, (randn(2, 4),), tmp_path / "b.nnef.tgz").path.read_bytes()
    assert a == b


def test_khronos_names_tract_only_ops(tmp_path):
    class Arange(torch.nn.Module):
        def forward(self, x):
            return x + torch.arange(x.shape[1])

    # static shapes fold the arange to a constant: exports fine for Khronos
    r = fx2nnef.export(Arange(), (randn(2, 5),), tmp_path / "k", target=fx2nnef.KhronosNNEF())
    assert r.check.ok


def test_a_size_without_form_is_named_not_a_converter_crash():
    """A tensor whose size on some axis follows no form found for the dynamic sizes (fitted from
    probes, None in the IR) makes its op fail with a message that says so and what to do (before:
    the converter's own TypeError, "unsupported operand type(s) for *: 'int' and 'NoneType'")."""
    from fx2nnef.ir import DType, Graph
    from fx2nnef.nnef_emit.emitter import _unknown_size

    g = Graph()
    known, unknown = g.new_value("a", DType.F32, (1, 8)), g.new_value("b", DType.F32, (1, None, 8))

    class Node:
        outputs = [known]

        def __init__(self, inputs):
            self._inputs = inputs

        def inputs(self):
            return self._inputs

    assert _unknown_size(Node([known])) is None
    message = _unknown_size(Node([unknown]))
    assert "'b' on axis 1 follows no form" in message and "other example sizes" in message
