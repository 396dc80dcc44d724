"""The export pipeline (fx2nnef/pipeline.py): export()'s dynamic_axes keyword, the typed fact its
retry policy reads from the capture, and the piece-by-piece attempts lowered by its stages."""
import types

import pytest
import torch

import fx2nnef
from fx2nnef.fx_tracer.capture import CaptureOptions, capture
from fx2nnef.piece_by_piece.attempt import _asserts_on
from harness import FnModule


def _scaled(x):
    return torch.tanh(x) * x.shape[1]


def test_dynamic_axes_keyword_gives_the_asset_the_target_gives(tmp_path):
    """``export(dynamic_axes=...)`` as in torch.onnx.export gives the asset the target's
    ``dynamic_axes`` give; given both ways they must be equal; a static target refuses them."""
    model, x, axes = FnModule(_scaled), torch.randn(2, 5), {"x": {1: "S"}}
    kw = fx2nnef.export(model, (x,), tmp_path / "a.nnef.tgz", input_names=["x"], dynamic_axes=axes)
    own = fx2nnef.export(model, (x,), tmp_path / "b.nnef.tgz", input_names=["x"],
                         target=fx2nnef.TractNNEF(dynamic_axes=axes))
    both = fx2nnef.export(model, (x,), tmp_path / "c.nnef.tgz", input_names=["x"], dynamic_axes=axes,
                          target=fx2nnef.TractNNEF(dynamic_axes=axes))
    assert kw.symbols == ["S"] and kw.check.ok and kw.nnef_text == own.nnef_text == both.nnef_text
    with pytest.raises(fx2nnef.InvalidArgumentError, match="dynamic_axes given twice"):
        fx2nnef.export(model, (x,), tmp_path / "d.nnef.tgz", input_names=["x"], dynamic_axes=axes,
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B"}}))
    with pytest.raises(fx2nnef.InvalidArgumentError, match="static shapes only"):
        fx2nnef.export(model, (x,), tmp_path / "e", input_names=["x"], dynamic_axes=axes,
                       target=fx2nnef.KhronosNNEF())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nnef.tgz", "b.nnef.tgz", "c.nnef.tgz"]


def _size_branch(x):
    return x * 2 if x.shape[1] < 7 else x - 1


@pytest.mark.parametrize("branches, fn, both", [(None, _size_branch, True), ("example", _size_branch, False),
                                                (None, _scaled, False)], ids=["merged", "example", "no_branch"])
def test_capture_says_whether_a_decision_on_sizes_was_exported_both_ways(branches, fn, both):
    """The fact the retry policy reads (no note is parsed): a Python ``if`` on a dynamic size
    merged with select, not when branches="example" or when there is no such decision."""
    options = CaptureOptions(input_names=["x"], dynamic_axes={"x": {1: "S"}}, check_io=False, branches=branches)
    cap = capture(FnModule(fn), (torch.randn(2, 5),), {}, options)
    assert cap.sizes_both_ways is both, cap.graph.guards


def test_capture_takes_options_or_fields_or_a_target():
    """``capture(model, args, kwargs, options)``; fields by name replace some options; ``target=``
    gives its check_io, dynamic_axes and profile."""
    model, x = FnModule(_scaled), torch.randn(2, 5)
    by_target = capture(model, (x,), {}, target=fx2nnef.TractNNEF(check_io=False, dynamic_axes={"x": {1: "S"}}),
                        input_names=["x"])
    by_options = capture(model, (x,), {}, CaptureOptions(check_io=False, dynamic_axes={"x": {1: "S"}}),
                         input_names=["x"])
    assert by_target.dynamic_axes == by_options.dynamic_axes == {"x": {1: "S"}}
    with pytest.raises(TypeError):
        capture(model, (x,), {}, no_such_option=1)


def test_a_module_attempt_keeps_the_assertions_on_its_own_symbols():
    """The target's assertions name the model's symbols: a module's asset (piece by piece) keeps
    those whose symbols it has."""
    graph = types.SimpleNamespace(symbols=["S"])
    asserts = ["S+P < 128", "tg: S==1", "pp: P==0", "S >= 1"]
    assert _asserts_on(asserts, graph) == ["tg: S==1", "S >= 1"]
    assert _asserts_on(asserts, types.SimpleNamespace(symbols=["S", "P"])) == asserts
