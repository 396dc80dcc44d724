"""``fx2nnef.compat``: a torch_to_nnef call runs on fx2nnef once its import is changed.

Real exports checked in tract (static and with dynamic axes, run again at another size), the
mapping of torch_to_nnef's target keywords onto fx2nnef's, a torch_to_nnef target object read
through its attributes (torch_to_nnef is not installed: a stand-in with its names), and one
clear InvalidArgumentError, naming the keyword, for each keyword fx2nnef does not take.
"""
import enum

import numpy as np
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef import InvalidArgumentError
from fx2nnef.compat import KhronosNNEF, TractNNEF, as_target, export_model_to_nnef


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _net():
    torch.manual_seed(0)
    return Net().eval()


def test_static_export_with_torch_to_nnef_keywords(tmp_path):
    model, x = _net(), torch.randn(2, 6)
    path = tmp_path / "model.nnef.tgz"
    result = export_model_to_nnef(model=model, args=x, file_path_export=path,
                                  inference_target=TractNNEF(version="0.21.13", check_io=True),
                                  input_names=["input"], output_names=["output"])
    assert result.path == path and path.is_file()
    assert result.check is not None and result.check.ok
    assert (result.input_names, result.output_names) == (["input"], ["output"])
    assert '("tract_target_version", "0.21.13")' in result.nnef_text
    out = fx2nnef.run(path, {"input": x.numpy()})["output"]
    np.testing.assert_allclose(out, model(x).detach().numpy(), atol=1e-5)


def test_dynamic_axes_on_the_target_and_run_at_another_size(tmp_path):
    model, x = _net(), torch.randn(2, 6)
    path = tmp_path / "model.nnef.tgz"
    result = export_model_to_nnef(model, (x,), path, TractNNEF(version=TractNNEF.latest_version(),
                                                                 dynamic_axes={"input": {0: "batch"}}),
                                  input_names=["input"], output_names=["output"])
    assert result.check.ok and "batch" in result.symbols
    x7 = torch.randn(7, 6)
    out = fx2nnef.run(path, {"input": x7.numpy()})["output"]
    assert out.shape == (7, 3)
    np.testing.assert_allclose(out, model(x7).detach().numpy(), atol=1e-5)


def test_dynamic_axes_and_check_io_given_to_the_function(tmp_path):
    """The issue's spelling: dynamic_axes and check_io as keywords of the call; model.nnef is
    written as model.nnef.tgz, as torch_to_nnef writes it."""
    model, x = _net(), torch.randn(3, 6)
    result = export_model_to_nnef(model, [x], str(tmp_path / "model.nnef"), TractNNEF(),
                                  input_names=["x"], output_names=["y"], dynamic_axes={"x": [0]},
                                  check_io=True)
    assert result.path == tmp_path / "model.nnef.tgz" and result.path.is_file()
    assert result.check.ok and len(result.symbols) == 1
    x5 = torch.randn(5, 6)
    out = fx2nnef.run(result.path, [x5.numpy()])["y"]
    np.testing.assert_allclose(out, model(x5).detach().numpy(), atol=1e-5)


def test_check_io_false_skips_the_check_and_custom_extensions_become_asserts(tmp_path):
    model, x = _net(), torch.randn(2, 6)
    result = export_model_to_nnef(model, x, tmp_path / "m.nnef.tgz",
                                  TractNNEF(dynamic_axes={"x": {0: "B"}}), input_names=["x"],
                                  check_io=False, custom_extensions=["extension tract_assert B <= 64"])
    assert result.check is None
    assert "extension tract_assert B <= 64;" in result.nnef_text


def test_an_fx2nnef_target_is_taken_as_it_is_and_not_changed(tmp_path):
    model, x = _net(), torch.randn(2, 6)
    own = fx2nnef.TractNNEF()
    result = export_model_to_nnef(model, x, tmp_path / "m.nnef.tgz", own, input_names=["x"],
                                  dynamic_axes={"x": {0: "B"}})
    assert result.check.ok and result.symbols == ["B"]
    assert own.dynamic_axes == {}  # the caller's object is left as it was


def test_target_keywords_map_onto_fx2nnef():
    class Tolerance(str, enum.Enum):  # torch_to_nnef's TractCheckTolerance is a str enum
        CLOSE = "close"

    t = TractNNEF(version="0.22.0", check_io=False, dynamic_axes={"x": {0: "S"}},
                  check_io_tolerance=Tolerance.CLOSE, specific_properties={"k": "v"},
                  force_norm_in_f32=True, force_linear_accumulation_in_f32=True, reify_sdpa_operator=True,
                  weights="f16")
    assert isinstance(t, fx2nnef.TractNNEF)
    assert (t.version, t.check_io, t.dynamic_axes) == ("0.22.0", False, {"x": {0: "S"}})
    assert t.check_io_tolerance == fx2nnef.targets.resolve_tolerance("close")
    assert set(t.force_f32) == {"norms", "linear"} and t.fused == ("sdpa",) and t.weights == "f16"
    assert t.properties()["k"] == "v" and t.dump_identity_properties  # torch_to_nnef's default
    k = KhronosNNEF(version="1.0.5", check_io=False)
    assert isinstance(k, fx2nnef.KhronosNNEF) and not k.check_io


def _stand_in(name: str, **attributes):
    """An object of a class named like torch_to_nnef's, from its module, with its attributes."""
    module = {"TractNNEF": "torch_to_nnef.inference_target.tract",
              "KhronosNNEF": "torch_to_nnef.inference_target.khronos"}[name]
    cls = type(name, (), {"__module__": module})
    obj = cls()
    for key, value in attributes.items():
        setattr(obj, key, value)
    return obj


class SemanticVersion:
    def __init__(self, text):
        self.text = text

    def to_str(self):
        return self.text


def test_a_torch_to_nnef_target_object_is_read_through_its_attributes(tmp_path):
    t2n = _stand_in("TractNNEF", version=SemanticVersion("0.21.13"), feature_flags=set(), check_io=True,
                    dynamic_axes={"x": {0: "B"}}, check_io_tolerance="approximate", specific_properties=None,
                    dump_identity_properties=True, force_attention_inner_in_f32=False,
                    force_linear_accumulation_in_f32=False, force_norm_in_f32=True,
                    reify_sdpa_operator=False, upsample_with_debox=False, tract_cli=object())
    target = as_target(t2n)
    assert isinstance(target, fx2nnef.TractNNEF)
    assert (target.version, target.dynamic_axes, target.force_f32) == ("0.21.13", {"x": {0: "B"}}, ("norms",))
    khronos = as_target(_stand_in("KhronosNNEF", version=SemanticVersion("1.0.5"), check_io=False))
    assert isinstance(khronos, fx2nnef.KhronosNNEF) and not khronos.check_io

    model, x = _net(), torch.randn(2, 6)
    result = export_model_to_nnef(model, x, tmp_path / "m.nnef.tgz", t2n, input_names=["x"])
    assert result.check.ok and result.symbols == ["B"]
    refused = _stand_in("TractNNEF", version="0.22.0", feature_flags={"complex"})
    with pytest.raises(InvalidArgumentError, match="feature_flags"):
        as_target(refused)


@pytest.mark.parametrize("call, keyword", [
    (dict(log_level=20), "log_level"),
    (dict(nnef_variable_naming_scheme="numeric"), "nnef_variable_naming_scheme"),
    (dict(custom_extensions=["extension tract_registry tract_core"]), "custom_extensions"),
    (dict(custom_extensions="extension tract_assert B <= 8"), "custom_extensions"),
    (dict(opset_version=17), "opset_version"),
    (dict(check_io_tolerance="close"), "check_io_tolerance"),
    (dict(target=TractNNEF()), "inference_target"),
    (dict(inference_target="tract"), "inference_target"),
    (dict(inference_target=TractNNEF), "TractNNEF.latest()"),
    (dict(inference_target=KhronosNNEF(), dynamic_axes={"x": {0: "B"}}), "dynamic_axes"),
    (dict(inference_target=TractNNEF(dynamic_axes={"x": {0: "B"}}), dynamic_axes={"x": {0: "N"}}),
     "dynamic_axes given twice"),
])
def test_a_keyword_fx2nnef_does_not_take_is_one_clear_error(tmp_path, call, keyword):
    call = {"inference_target": TractNNEF(), **call}
    with pytest.raises(InvalidArgumentError, match=keyword) as info:
        export_model_to_nnef(_net(), torch.randn(2, 6), tmp_path / "m.nnef.tgz", input_names=["x"], **call)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # refused before anything is traced or written


@pytest.mark.parametrize("keywords, keyword", [
    (dict(feature_flags={"complex"}), "feature_flags"),
    (dict(specific_tract_binary_path="/opt/tract"), "specific_tract_binary_path"),
    (dict(upsample_with_debox=True), "upsample_with_debox"),
    (dict(check_io_tolerence="close"), "did you mean check_io_tolerance"),
])
def test_a_target_keyword_fx2nnef_does_not_take_is_one_clear_error(keywords, keyword):
    with pytest.raises(InvalidArgumentError, match=keyword):
        TractNNEF(**keywords)


def test_force_in_f32_flags_skip_a_part_the_graph_does_not_have(tmp_path):
    """torch_to_nnef's force_*_in_f32 flags do nothing where the part is absent; fx2nnef's own
    force_f32 says so as an error. The parts found are recorded in the properties."""
    x = torch.randn(2, 6)
    result = export_model_to_nnef(_net(), x, tmp_path / "a.nnef.tgz",
                                  TractNNEF(force_norm_in_f32=True, force_attention_inner_in_f32=True),
                                  input_names=["x"])
    assert result.check.ok and '("fx2nnef_force_f32", "norms:1")' in result.nnef_text
    linear = nn.Linear(6, 2).eval()
    result = export_model_to_nnef(linear, x, tmp_path / "b.nnef.tgz", TractNNEF(force_norm_in_f32=True),
                                  input_names=["x"])
    assert result.check.ok and "fx2nnef_force_f32" not in result.nnef_text
    with pytest.raises(InvalidArgumentError, match="no norms found"):
        export_model_to_nnef(linear, x, tmp_path / "c.nnef.tgz", TractNNEF(force_f32=["norms"]),
                             input_names=["x"])


def test_khronos_target_exports_and_checks(tmp_path):
    model, x = _net(), torch.randn(2, 6)
    result = export_model_to_nnef(model, x, tmp_path / "k.nnef.tgz", KhronosNNEF(version="1.0.5"),
                                  input_names=["x"], output_names=["y"])
    assert result.target == "KhronosNNEF" and result.check.ok and result.path.is_file()


def test_debug_bundle_path_holds_the_bundle_of_a_failed_check(tmp_path):
    zero = fx2nnef.Tolerance("zero", 0.0, 0.0, 0.0)
    try:
        export_model_to_nnef(_net(), torch.randn(2, 6), tmp_path / "m.nnef.tgz",
                             TractNNEF(check_io_tolerance=zero), input_names=["x"],
                             debug_bundle_path=tmp_path / "bundle")
    except fx2nnef.CheckIOError as error:
        assert error.bundle == str(tmp_path / "bundle") and (tmp_path / "bundle" / "report.txt").is_file()
        assert not (tmp_path / "m.nnef.tgz").exists()
    else:
        pytest.skip("tract matched PyTorch bit for bit: no failed check to bundle")
