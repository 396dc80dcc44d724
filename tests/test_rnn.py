"""Recurrent modules lowered by module extractors, exported to tract (scan) and Khronos (unrolled)."""
import numpy as np
import pytest
import torch
from torch import nn

import fx2nnef
from fx2nnef.nnef_emit import emit_graph
from fx2nnef.nnef_emit.extractors import ModuleInfoExtractor, register_extractor, registered_module_classes
from fx2nnef.nnef_emit.helpers import broadcast_operands
from fx2nnef.nnef_emit.registry import RegistryError
from harness import OpCase, randn, run_case

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")


class Flat(nn.Module):
    """Calls a recurrent module and returns its result as a flat tuple of tensors."""

    def __init__(self, rnn: nn.Module, hx_keyword: bool = False):
        super().__init__()
        self.rnn = rnn
        self.hx_keyword = hx_keyword

    def forward(self, x, *states):
        hx = None if not states else states if len(states) == 2 else states[0]
        out = self.rnn(x, hx=hx) if self.hx_keyword else self.rnn(x, hx) if states else self.rnn(x)
        if isinstance(self.rnn, nn.LSTM):
            y, (h, c) = out
            return y, h, c
        if isinstance(self.rnn, (nn.GRU, nn.RNN, nn.LSTMCell)):
            a, b = out
            return a, b
        return out


def rnn(module_cls, *args, hx_keyword=False, **kwargs) -> Flat:
    torch.manual_seed(0)
    return Flat(module_cls(*args, **kwargs), hx_keyword).eval()


def case(name, module, inputs, **kw) -> OpCase:
    return OpCase(name, None, inputs, module=module, **kw)


X_TB = randn(5, 2, 3)  # [T, B, I]
X_BT = randn(2, 5, 3, seed=1)  # [B, T, I]
H1 = randn(1, 2, 4, seed=2)
H4 = randn(4, 2, 4, seed=3)  # 2 layers x 2 directions
C4 = randn(4, 2, 4, seed=4)

# Khronos runs a subset (its interpreter check takes seconds): every module type, the static
# unroll with zero and given states, layers, directions, batch_first, projection, no bias.
CASES = [
    case("lstm", rnn(nn.LSTM, 3, 4), [X_TB]),
    case("lstm_hx", rnn(nn.LSTM, 3, 4), [X_TB, H1, randn(1, 2, 4, seed=5)], khronos=False),
    case("lstm_2l_bidir_bf_hx", rnn(nn.LSTM, 3, 4, num_layers=2, bidirectional=True, batch_first=True),
         [X_BT, H4, C4]),
    case("lstm_2l_bidir", rnn(nn.LSTM, 3, 4, num_layers=2, bidirectional=True), [X_TB], khronos=False),
    case("lstm_nobias_bf", rnn(nn.LSTM, 3, 4, bias=False, batch_first=True), [X_BT], khronos=False),
    case("lstm_proj_2l_bidir_hx", rnn(nn.LSTM, 3, 4, num_layers=2, bidirectional=True, proj_size=2),
         [X_TB, randn(4, 2, 2, seed=6), C4]),
    case("lstm_unbatched_hx", rnn(nn.LSTM, 3, 4, num_layers=2), [randn(5, 3), randn(2, 4), randn(2, 4, seed=1)],
         khronos=False),
    case("lstm_t1", rnn(nn.LSTM, 3, 4, bidirectional=True), [randn(1, 2, 3)], khronos=False),
    case("lstm_hx_keyword", rnn(nn.LSTM, 3, 4, hx_keyword=True), [X_TB, H1, H1], khronos=False),
    case("gru", rnn(nn.GRU, 3, 4), [X_TB], khronos=False),
    case("gru_2l_bidir_hx", rnn(nn.GRU, 3, 4, num_layers=2, bidirectional=True), [X_TB, H4]),
    case("gru_bf_2l", rnn(nn.GRU, 3, 4, num_layers=2, batch_first=True), [X_BT], khronos=False),
    case("gru_nobias_bidir_bf_hx", rnn(nn.GRU, 3, 4, bias=False, bidirectional=True, batch_first=True),
         [X_BT, randn(2, 2, 4)]),
    case("gru_unbatched", rnn(nn.GRU, 3, 4), [randn(5, 3)], khronos=False),
    case("rnn_tanh_2l_bf", rnn(nn.RNN, 3, 4, num_layers=2, batch_first=True), [X_BT]),
    case("rnn_relu_2l_bidir_hx", rnn(nn.RNN, 3, 4, num_layers=2, bidirectional=True, nonlinearity="relu"),
         [X_TB, H4]),
    case("rnn_tanh_nobias_unbatched_hx", rnn(nn.RNN, 3, 4, bias=False), [randn(5, 3), randn(1, 4)],
         khronos=False),
    case("lstm_cell", rnn(nn.LSTMCell, 3, 4), [randn(2, 3)]),
    case("lstm_cell_hx", rnn(nn.LSTMCell, 3, 4), [randn(2, 3), randn(2, 4, seed=1), randn(2, 4, seed=2)],
         khronos=False),
    case("lstm_cell_nobias_unbatched", rnn(nn.LSTMCell, 3, 4, bias=False), [randn(3)], khronos=False),
    case("gru_cell", rnn(nn.GRUCell, 3, 4), [randn(2, 3)], khronos=False),
    case("gru_cell_hx", rnn(nn.GRUCell, 3, 4), [randn(2, 3), randn(2, 4, seed=1)]),
    case("gru_cell_nobias_unbatched_hx", rnn(nn.GRUCell, 3, 4, bias=False), [randn(3), randn(4, seed=1)]),
    case("rnn_cell_tanh_hx", rnn(nn.RNNCell, 3, 4), [randn(2, 3), randn(2, 4, seed=1)], khronos=False),
    case("rnn_cell_relu", rnn(nn.RNNCell, 3, 4, nonlinearity="relu"), [randn(2, 3)]),
]

# tract only: tract_core_scan over a dynamic time axis (and dynamic batch with zero states); float16
DYNAMIC_CASES = [
    case("lstm_dyn_t_2l_bidir_bf_hx", rnn(nn.LSTM, 3, 4, num_layers=2, bidirectional=True, batch_first=True),
         [X_BT, H4, C4], dynamic_axes={"x0": {1: "T"}}),
    case("lstm_dyn_tb", rnn(nn.LSTM, 3, 4, bidirectional=True), [randn(5, 3, 3)],
         dynamic_axes={"x0": {0: "T", 1: "B"}}),
    case("lstm_proj_dyn_t", rnn(nn.LSTM, 3, 4, proj_size=2, bidirectional=True), [X_TB],
         dynamic_axes={"x0": {0: "T"}}),
    case("gru_dyn_tb_2l", rnn(nn.GRU, 3, 4, num_layers=2, batch_first=True), [randn(3, 5, 3)],
         dynamic_axes={"x0": {0: "B", 1: "T"}}),
    case("rnn_relu_dyn_t_bidir", rnn(nn.RNN, 3, 4, bidirectional=True, nonlinearity="relu"), [X_TB],
         dynamic_axes={"x0": {0: "T"}}),
    case("gru_unbatched_dyn_t", rnn(nn.GRU, 3, 4), [randn(5, 3)], dynamic_axes={"x0": {0: "T"}}),
    case("lstm_cell_dyn_b", rnn(nn.LSTMCell, 3, 4), [randn(3, 3)], dynamic_axes={"x0": {0: "B"}}),
    case("lstm_f16_dyn_t", rnn(nn.LSTM, 3, 4, bidirectional=True).half(), [randn(5, 2, 3, dtype=torch.float16)],
         dynamic_axes={"x0": {0: "T"}}),
    case("gru_f16_dyn_b", rnn(nn.GRU, 3, 4, batch_first=True).half(), [randn(3, 5, 3, dtype=torch.float16)],
         dynamic_axes={"x0": {0: "B"}}),
    case("gru_cell_f16_hx", rnn(nn.GRUCell, 3, 4).half(),
         [randn(2, 3, dtype=torch.float16), randn(2, 4, seed=1, dtype=torch.float16)]),
]


@pytest.mark.parametrize("case", CASES + DYNAMIC_CASES, ids=str)
def test_tract(case, tmp_path):
    result = run_case(case, tmp_path, "tract")
    sequence = isinstance(case.module.rnn, (nn.LSTM, nn.GRU, nn.RNN))
    assert ("tract_core_scan" in result.nnef_text) == sequence


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    result = run_case(case, tmp_path, "khronos")
    assert "tract_" not in result.nnef_text


def test_khronos_rejects_dynamic_time_axis():
    from fx2nnef.fx_tracer.capture import capture

    target = fx2nnef.TractNNEF(dynamic_axes={"x0": {0: "T"}})
    cap = capture(rnn(nn.GRU, 3, 4), (X_TB,), {}, target=target, input_names=["x0"],
                  leaf_modules=registered_module_classes())
    with pytest.raises(fx2nnef.UnsupportedOpError, match="dynamic sequence length"):
        emit_graph(cap.graph, "khronos")


def test_rnn_classes_are_registered():
    for cls in (nn.LSTM, nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell, nn.RNNCell):
        assert cls in registered_module_classes()


# a user module the tracer cannot follow (its forward leaves torch), lowered by its own extractor
class NumpyTanhScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        return torch.from_numpy(np.tanh(x.detach().numpy()) * self.scale.detach().numpy())


class NumpyTanhScaleExtractor(ModuleInfoExtractor):
    MODULE_CLASS = NumpyTanhScale

    def convert_to_nnef(self, ctx, inputs, module):
        (x,) = inputs
        y = ctx.op("tanh", x, out_shape=x.shape)
        return ctx.op("mul", *broadcast_operands(ctx, y, module["params"]["scale"]), out_shape=x.shape)


register_extractor(NumpyTanhScaleExtractor)


class UsesCustom(nn.Module):
    def __init__(self):
        super().__init__()
        self.custom = NumpyTanhScale()

    def forward(self, x):
        return self.custom(x * 2.0) + 1.0


@pytest.mark.parametrize("target", ["tract", "khronos"])
def test_user_extractor_with_leaf_modules(target, tmp_path):
    tgt = fx2nnef.TractNNEF() if target == "tract" else fx2nnef.KhronosNNEF()
    result = fx2nnef.export(UsesCustom(), (randn(2, 3, 4),), tmp_path / "out", target=tgt,
                            leaf_modules=(NumpyTanhScale,))
    assert result.check.ok
    assert "tanh" in result.nnef_text
    assert NumpyTanhScale in registered_module_classes()


def test_registered_extractor_class_is_a_leaf_without_asking(tmp_path):
    """export() keeps every class with a registered extractor as one call: no leaf_modules needed."""
    r = fx2nnef.export(UsesCustom(), (randn(2, 3, 4),), tmp_path / "out.nnef.tgz")
    assert r.check.ok


def test_register_extractor_twice_fails():
    with pytest.raises(RegistryError, match="already registered"):
        register_extractor(NumpyTanhScaleExtractor)


def test_extractor_needs_module_class():
    class NoClass(ModuleInfoExtractor):
        pass

    with pytest.raises(TypeError, match="MODULE_CLASS"):
        register_extractor(NoClass)
