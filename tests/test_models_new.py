"""Failures found by exporting models never tried before (issue 6, section 3), each exported to
tract with check_io=True, on dynamic axes where the model has them."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fx2nnef
from harness import FnModule, check_op, randn

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")


def export(model, inputs, tmp_path, dynamic_axes=None, tolerance="approximate"):
    names = [f"x{i}" for i in range(len(inputs))]
    target = fx2nnef.TractNNEF(check_io=True, check_io_tolerance=tolerance, dynamic_axes=dynamic_axes or {})
    return fx2nnef.export(model.eval(), tuple(inputs), tmp_path / "m.nnef.tgz", target=target, input_names=names)


# 1. an extractor module as the root model -----------------------------------------------
ROOT_RNNS = {
    "gru_batch_first": (lambda: nn.GRU(4, 5, batch_first=True), (2, 6, 4), {"x0": {1: "T"}}),
    "lstm_two_layers": (lambda: nn.LSTM(4, 5, num_layers=2), (6, 2, 4), {"x0": {0: "T"}}),
    "rnn_tanh": (lambda: nn.RNN(4, 5), (6, 2, 4), {"x0": {0: "T", 1: "B"}}),
    "lstm_cell": (lambda: nn.LSTMCell(4, 5), (2, 4), {"x0": {0: "B"}}),
    "gru_cell": (lambda: nn.GRUCell(4, 5), (2, 4), {}),
    "rnn_cell": (lambda: nn.RNNCell(4, 5), (2, 4), {}),
}


@pytest.mark.parametrize("name", list(ROOT_RNNS))
def test_extractor_module_as_root(name, tmp_path):
    make, shape, dyn = ROOT_RNNS[name]
    torch.manual_seed(0)
    res = export(make(), [randn(*shape)], tmp_path, dyn)
    assert res.check.ok


def test_extractor_root_with_initial_state_and_dynamic_time(tmp_path):
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 5, batch_first=True)
    h = (randn(1, 2, 5, seed=1), randn(1, 2, 5, seed=2))
    target = fx2nnef.TractNNEF(check_io=True, dynamic_axes={"x0": {1: "T"}})
    res = fx2nnef.export(lstm.eval(), (randn(2, 6, 4), h), tmp_path / "m.nnef.tgz", target=target,
                         input_names=["x0", "h0", "c0"])
    assert res.check.ok and len(res.check.cases) >= 3  # the example, a size below, one above
    assert len(res.graph.outputs) == 3


def test_module_made_in_forward_that_needs_an_extractor_is_refused_clearly(tmp_path):
    with pytest.raises(fx2nnef.TraceError, match="created inside forward"):
        export(FnModule(lambda x: nn.GRU(4, 5)(x)[0]), [randn(3, 2, 4)], tmp_path)


# 2. a CNN on dynamic batch, H and W ------------------------------------------------------
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 1.5)
        self.up = nn.Upsample(scale_factor=2)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = F.max_pool2d(self.bn(self.c1(x)), 2)
        x = F.avg_pool2d(x, 2)
        x = self.c2(self.up(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def test_cnn_dynamic_batch_and_spatial(tmp_path):
    res = export(SmallCNN(), [randn(2, 3, 16, 16)], tmp_path, {"x0": {0: "B", 2: "H", 3: "W"}})
    assert res.check.ok


UPSAMPLES = {
    "nearest_sf2": lambda x: F.interpolate(F.max_pool2d(x, 2), scale_factor=2),
    "nearest_sf3_module": lambda x: nn.Upsample(scale_factor=(3, 2))(x),
    "nearest_size_from_input": lambda x: F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] * 2)),
    "bilinear_sf2": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "bilinear_sf3x2_after_pool": lambda x: nn.Upsample(scale_factor=(3, 2), mode="bilinear")(F.max_pool2d(x, 2)),
    "bilinear_size_from_input": lambda x: F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] * 4), mode="bilinear",
                                                        align_corners=False),
}


@pytest.mark.parametrize("name", list(UPSAMPLES))
def test_nearest_upsample_dynamic_spatial(name, tmp_path):
    res = check_op(UPSAMPLES[name], [randn(2, 3, 8, 6)], tmp_path, dynamic_axes={"x0": {0: "B", 2: "H", 3: "W"}})
    assert res.check.ok


def test_linear_upsample_dynamic_1d_and_3d(tmp_path):
    res = check_op(lambda x: F.interpolate(x, scale_factor=2, mode="linear"), [randn(2, 3, 5)], tmp_path,
                   dynamic_axes={"x0": {2: "T"}})
    assert res.check.ok
    res = check_op(lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), [randn(1, 2, 4, 4, 3)], tmp_path,
                   dynamic_axes={"x0": {2: "D", 4: "W"}})
    assert res.check.ok


def test_bilinear_align_corners_on_dynamic_size(tmp_path):
    """Exported since the interpolation matrix is built at run time (tests/test_ops_dynamic_spatial.py)."""
    res = check_op(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True), [randn(1, 2, 4, 4)],
                   tmp_path, dynamic_axes={"x0": {2: "H"}})
    assert res.check.ok


def test_bilinear_align_corners_static_sizes(tmp_path):
    res = check_op(lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True), [randn(2, 3, 4, 4)],
                   tmp_path, dynamic_axes={"x0": {0: "B"}})
    assert res.check.ok


# 3. a module instance made inside forward ------------------------------------------------
ACT2FN = {"gelu": nn.GELU, "silu": nn.SiLU}


class MadeInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.__dict__["plain"] = nn.Tanh()  # an attribute that is not a registered submodule

    def forward(self, x):
        x = ACT2FN["gelu"]()(self.lin(x))
        # LayerNorm's own (constant) parameters become constants; Sequential's children are made here too
        return self.plain(nn.SiLU()(x) + nn.LayerNorm(4)(x)) + nn.Sequential(nn.ReLU(), nn.Tanh())(x)


def test_module_made_inside_forward_is_traced_through(tmp_path):
    torch.manual_seed(0)
    res = export(MadeInForward(), [randn(2, 5, 4)], tmp_path, {"x0": {1: "S"}})
    assert res.check.ok


# 4. nn.MultiheadAttention with a key padding mask ------------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_key_padding_mask(batch_first, mask_kind, need_weights, tmp_path):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, 3:] = True
    if mask_kind == "float":
        mask = torch.zeros(2, 5).masked_fill(mask, -1e4)
    x = randn(2, 5, 8) if batch_first else randn(5, 2, 8)
    seq = 1 if batch_first else 0

    def fn(self, x, kpm):
        out, w = self.mha(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        return (out, w) if need_weights else out

    model = FnModule(fn, mha=mha)
    res = export(model, [x, mask], tmp_path, {"x0": {seq: "S"}, "x1": {1: "S"}})
    assert res.check.ok


def test_torch_check_on_traced_value_is_a_guard(tmp_path):
    def fn(x):
        torch._check(x.shape[1] > 1, lambda: "need two columns")
        torch._check_with(ValueError, x.shape[0] == 2, lambda: "batch of 2")
        torch._assert(x.shape[1] < 100, "too long")
        return x * 2

    res = check_op(fn, [randn(2, 5)], tmp_path, dynamic_axes={"x0": {1: "S"}})
    assert res.check.ok
    checked = [g for g in res.guards if g.what.startswith("bool") and g.status == "checked"]
    assert len(checked) == 3


# 5. a dynamic size used as a scalar -------------------------------------------------------
SIZE_SCALARS = {
    "div_by_size": lambda x: x / x.shape[1],
    "pow_of_size": lambda x: x * (x.shape[1] ** -0.5),
    "math_sqrt": lambda x: x / math.sqrt(x.shape[-1]),
    "scaled_sum": lambda x: x * (1.0 / (x.shape[1] + 1) - 0.25 * x.shape[1]),
    "torch_tensor": lambda x: x * torch.tensor(x.shape[1]),
    "new_full_fill": lambda x: x[:, :2] + x.new_full((2,), x.shape[1]),
}


@pytest.mark.parametrize("name", list(SIZE_SCALARS))
def test_dynamic_size_as_scalar(name, tmp_path):
    res = check_op(SIZE_SCALARS[name], [randn(2, 5)], tmp_path, dynamic_axes={"x0": {1: "S"}})
    assert res.check.ok


# 6. models built from transformers configs (random weights, tiny) -------------------------
def _perturbed(model):
    """Random weights with norm weights and biases away from their 1 / 0 defaults."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or "ln" in name.lower() or name.endswith("bias"):
                p.add_(torch.rand(p.shape, generator=g) * 0.4 - 0.2)
    return model.eval()


def _causal_lm(config_cls, model_cls, **kw):
    def make():
        config = config_cls(**kw)
        config.use_cache = False
        return model_cls(config)
    return make


def _hf_models():
    import transformers as T

    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    image = randn(1, 3, 32, 32)
    seq = {"input_ids": {1: "S"}}
    return {
        "falcon": (_causal_lm(T.FalconConfig, T.FalconForCausalLM, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4, vocab_size=256), ids, seq),
        "opt": (_causal_lm(T.OPTConfig, T.OPTForCausalLM, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           ffn_dim=128, vocab_size=256, max_position_embeddings=128, word_embed_proj_dim=64), ids, seq),
        # ACT2FN[...] modules made inside forward (issue item 3); static S: the chunk padding is S mod 8
        "mamba2": (_causal_lm(T.Mamba2Config, T.Mamba2ForCausalLM, hidden_size=64, num_hidden_layers=2, num_heads=8,
                              head_dim=16, state_size=16, vocab_size=256, n_groups=1, expand=2, chunk_size=8), ids, {}),
        "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                                              image_size=32)), image, {"pixel_values": {0: "B"}}),
        "resnet_dynamic_hw": (lambda: T.ResNetModel(T.ResNetConfig(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16)),
                              image, {"pixel_values": {0: "B", 2: "H", 3: "W"}}),
        "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                  num_heads=[2, 2], window_size=4)), image, {"pixel_values": {0: "B"}}),
        "mobilevit": (lambda: T.MobileViTModel(T.MobileViTConfig(
            image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2, patch_size=2)), image, {"pixel_values": {0: "B"}}),
        "whisper_encoder": (lambda: T.WhisperModel(T.WhisperConfig(
            d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, vocab_size=256,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)).encoder,
            randn(1, 16, 64), {"input_features": {0: "B"}}),
    }


HF_MODELS = ["falcon", "opt", "mamba2", "convnext", "resnet_dynamic_hw", "swin", "mobilevit", "whisper_encoder"]


@pytest.mark.parametrize("name", HF_MODELS)
def test_transformers_model(name, tmp_path):
    make, x, dyn = _hf_models()[name]
    torch.manual_seed(0)
    model = _perturbed(make())
    res = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(check_io=True, dynamic_axes=dyn))
    assert res.check.ok and (len(res.check.cases) >= 2 if dyn else len(res.check.cases) == 1)


def test_deformable_detr_multi_scale_sampling(tmp_path):
    """Deformable DETR's attention samples its value maps at learned points (F.grid_sample on
    every level, then a weighted sum) and checks its sizes with torch_compilable_check; the
    detector exports and matches in tract (boxes and class logits)."""
    import transformers as T

    torch.manual_seed(0)
    backbone = T.ResNetConfig(hidden_sizes=[16, 32, 64, 128], embedding_size=16, depths=[1, 1, 1, 1],
                              layer_type="basic", out_features=["stage2", "stage3", "stage4"])
    cfg = T.DeformableDetrConfig(backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
                                 d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=20, decoder_layers=2,
                                 encoder_layers=1, num_labels=5, decoder_attention_heads=4, encoder_attention_heads=4)
    detr = T.DeformableDetrForObjectDetection(cfg).eval()

    class Boxes(nn.Module):
        def __init__(self):
            super().__init__()
            self.detr = detr

        def forward(self, pixel_values):
            out = self.detr(pixel_values=pixel_values)
            return out.logits, out.pred_boxes

    r = fx2nnef.export(Boxes().eval(), (randn(1, 3, 160, 160),), tmp_path / "detr.nnef.tgz", target=fx2nnef.TractNNEF())
    assert r.check.ok
