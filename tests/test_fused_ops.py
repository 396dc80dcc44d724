"""Fused tract ops (``TractNNEF(fused=...)``, ``export_causal_lm(fused=...)``): each pattern is
rewritten only where it matches exactly, the fused op appears in graph.nnef, and tract's numbers
equal PyTorch's at tract's levels (a wrong fusion fails the export's own check).
"""
import tarfile

import pytest
import torch
import torch.nn.functional as F
import transformers as T

import fx2nnef
from fx2nnef.errors import InvalidArgumentError
from fx2nnef.llm import export_causal_lm
from harness import FnModule

TRACT_OPS = {"rms_norm": ("tract_core_rms_norm", "tract_core_scaled_rms_norm"),
             "rope": ("tract_transformers_apply_rope",), "sdpa": ("tract_transformers_sdpa",)}


def _export(fn, inputs, tmp_path, fused="all", dynamic_axes=None, **params):
    """Export ``fn`` with the fused ops; the result's NNEF op counts per fusion name."""
    model = FnModule(fn, **params)
    names = [f"x{i}" for i in range(len(inputs))]
    r = fx2nnef.export(model, tuple(inputs), tmp_path / "m.nnef.tgz", input_names=names,
                       target=fx2nnef.TractNNEF(fused=fused, dynamic_axes=dynamic_axes or {}))
    assert r.check.ok
    return {k: sum(r.nnef_op_counts.get(op, 0) for op in ops) for k, ops in TRACT_OPS.items()}


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


# RMS norm ------------------------------------------------------------------------------------------
def _rms(square, eps_first=False, div=False):
    def fn(self, x):
        ms = square(x).mean(-1, keepdim=True)
        ms = (1e-5 + ms) if eps_first else (ms + 1e-5)
        y = x / torch.sqrt(ms) if div else x * torch.rsqrt(ms)
        return self.w * y
    return fn


RMS_SPELLINGS = {
    "pow": _rms(lambda x: x.pow(2)),
    "pow_operator": _rms(lambda x: x ** 2),
    "self_product": _rms(lambda x: x * x),
    "square": _rms(torch.square),
    "eps_first": _rms(lambda x: x.pow(2), eps_first=True),
    "div_sqrt": _rms(lambda x: x.pow(2), div=True),
}


@pytest.mark.parametrize("spelling", list(RMS_SPELLINGS))
def test_rms_norm_spellings_fuse_with_their_weight(spelling, tmp_path):
    x = torch.randn(1, 5, 32, generator=_g())
    w = 1 + 0.3 * torch.randn(32, generator=_g(1))
    counts = _export(RMS_SPELLINGS[spelling], [x], tmp_path, fused="rms_norm", dynamic_axes={"x0": {1: "S"}}, w=w)
    assert counts["rms_norm"] == 1


def test_rms_norm_gemma_one_plus_weight_and_t5_casts(tmp_path):
    w = 0.3 * torch.randn(16, generator=_g(1))

    def fn(self, x):
        gemma = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        gemma = (gemma * (1.0 + self.w.float())).type_as(x)
        h = x.to(torch.float32)
        t5 = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return gemma, (1 + self.w) * t5.to(torch.float32)
    r = fx2nnef.export(FnModule(fn, w=w), (torch.randn(2, 3, 16, generator=_g()),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(fused="rms_norm"))
    # x.float() twice is two casts of x that change nothing: still x squared and normalized. Both
    # outputs are then the same fused op on the same arguments, written once (the second a copy)
    assert r.check.ok and set(r.nnef_op_counts) == {"tract_core_external", "tract_core_scaled_rms_norm", "copy"}, \
        r.nnef_op_counts


NOT_RMS = {
    "cube": lambda x: x * torch.rsqrt(x.pow(3).mean(-1, keepdim=True) + 1e-5),
    "two_axes": lambda x: x * torch.rsqrt(x.pow(2).mean((-2, -1), keepdim=True) + 1e-5),
    "other_tensor": lambda x: (x + 1) * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5),
    "variance_reused": lambda x: (lambda ms: (x * torch.rsqrt(ms + 1e-5), ms))(x.pow(2).mean(-1, keepdim=True)),
    "sqrt_not_rsqrt": lambda x: x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5),
    "mean_minus_eps": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) - 1e-5),
}


@pytest.mark.parametrize("case", list(NOT_RMS))
def test_rms_norm_near_misses_stay_decomposed(case, tmp_path):
    x = torch.randn(2, 4, 16, generator=_g())
    assert _export(NOT_RMS[case], [x], tmp_path, fused="rms_norm")["rms_norm"] == 0


def test_rms_norm_on_a_middle_axis_has_no_scale(tmp_path):
    fn = lambda x: x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-5)  # noqa: E731
    counts = _export(fn, [torch.randn(2, 6, 5, generator=_g())], tmp_path, fused="rms_norm")
    assert counts["rms_norm"] == 1


# rotary embedding ------------------------------------------------------------------------------------
def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def test_rope_with_arbitrary_cos_and_sin_is_exact(tmp_path):
    """cos and sin are plain inputs (not cos/sin of anything): tract must compute the formula itself."""
    x = torch.randn(1, 4, 6, 16, generator=_g())
    cos, sin = torch.randn(1, 1, 6, 16, generator=_g(1)), torch.randn(1, 6, 16, generator=_g(2))
    fn = lambda x, c, s: x * c + _rotate_half(x) * s.unsqueeze(1)  # noqa: E731
    counts = _export(fn, [x, cos, sin], tmp_path, fused="rope",
                     dynamic_axes={"x0": {2: "S"}, "x1": {2: "S"}, "x2": {1: "S"}})
    assert counts["rope"] == 1


def test_rope_operands_in_either_order(tmp_path):
    x, cos, sin = torch.randn(2, 3, 8, generator=_g()), torch.randn(3, 8, generator=_g(1)), torch.randn(3, 8, generator=_g(2))
    fn = lambda x, c, s: s * _rotate_half(x) + c * x  # noqa: E731
    assert _export(fn, [x, cos, sin], tmp_path, fused="rope")["rope"] == 1


NOT_ROPE = {
    "halves_swapped": lambda x, c, s: x * c + torch.cat((x[..., :4], -x[..., 4:]), -1) * s,
    "interleaved": lambda x, c, s: x * c + torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2) * s,
    "uneven_split": lambda x, c, s: x * c + torch.cat((-x[..., 5:], x[..., :5]), -1)[..., :8] * s,
    "sub_not_add": lambda x, c, s: x * c - _rotate_half(x) * s,
    "other_tensor": lambda x, c, s: (x + 1) * c + _rotate_half(x) * s,
    "cos_broadcasts_x": lambda x, c, s: x[..., :1, :] * c + _rotate_half(x[..., :1, :]) * s,
}


@pytest.mark.parametrize("case", list(NOT_ROPE))
def test_rope_near_misses_stay_decomposed(case, tmp_path):
    x, cos, sin = torch.randn(2, 3, 8, generator=_g()), torch.randn(3, 8, generator=_g(1)), torch.randn(3, 8, generator=_g(2))
    assert _export(NOT_ROPE[case], [x, cos, sin], tmp_path, fused="rope")["rope"] == 0


# attention --------------------------------------------------------------------------------------------
def _qkv(hq=4, hkv=4, s=5, t=7, d=16):
    return (torch.randn(1, hq, s, d, generator=_g()), torch.randn(1, hkv, t, d, generator=_g(1)),
            torch.randn(1, hkv, t, d, generator=_g(2)))


def test_sdpa_bool_mask_with_an_empty_row_gives_zeros_as_torch(tmp_path):
    keep = torch.rand(1, 1, 5, 7, generator=_g(3)) > 0.4
    keep[..., 2, :] = False  # a query that sees no key: torch gives 0, tract's sdpa alone NaN or the mean
    fn = lambda self, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep)  # noqa: E731
    assert _export(fn, list(_qkv()), tmp_path, fused="sdpa", keep=keep)["sdpa"] == 1


def test_sdpa_float_mask_and_native_gqa(tmp_path):
    mask = torch.randn(1, 1, 5, 7, generator=_g(3))
    fn = lambda self, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, scale=0.3,  # noqa: E731
                                                               enable_gqa=True)
    assert _export(fn, list(_qkv(hkv=2)), tmp_path, fused="sdpa", mask=mask)["sdpa"] == 1


def test_eager_attention_with_repeated_kv_heads(tmp_path):
    mask = torch.randn(1, 1, 5, 7, generator=_g(3))

    def fn(self, q, k, v):
        k = k[:, :, None, :, :].expand(1, 2, 2, 7, 16).reshape(1, 4, 7, 16)
        v = v[:, :, None, :, :].expand(1, 2, 2, 7, 16).reshape(1, 4, 7, 16)
        w = torch.matmul(q, k.transpose(2, 3)) * 0.25 + self.mask
        w = F.dropout(F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype), p=0.0, training=False)
        return torch.matmul(w, v)
    assert _export(fn, list(_qkv(hkv=2)), tmp_path, fused="sdpa", mask=mask)["sdpa"] == 1


NOT_SDPA = {
    "is_causal": lambda self, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "mask_query_axis_broadcast": lambda self, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=self.row),
    "softcapped": lambda self, q, k, v: torch.matmul(
        F.softmax(torch.tanh(torch.matmul(q, k.transpose(2, 3)) * 0.25 / 5) * 5, dim=-1), v),
    "softmax_other_axis": lambda self, q, k, v: torch.matmul(
        F.softmax(torch.matmul(q, k.transpose(2, 3)) * 0.25, dim=-2), v),
    "scores_reused": lambda self, q, k, v: (lambda s: (torch.matmul(F.softmax(s, dim=-1), v), s))(
        torch.matmul(q, k.transpose(2, 3)) * 0.25),
}


@pytest.mark.parametrize("case", list(NOT_SDPA))
def test_attention_near_misses_stay_decomposed(case, tmp_path):
    row = torch.randn(1, 1, 1, 7, generator=_g(3))
    assert _export(NOT_SDPA[case], list(_qkv()), tmp_path, fused="sdpa", row=row)["sdpa"] == 0


# option ------------------------------------------------------------------------------------------------
def test_fused_option_is_checked_and_off_by_default(tmp_path):
    with pytest.raises(InvalidArgumentError, match="unknown fused op.*'flash'"):
        fx2nnef.TractNNEF(fused=("rms_norm", "flash"))
    assert fx2nnef.TractNNEF().fused == ()
    assert fx2nnef.TractNNEF(fused="all").fused == ("rms_norm", "rope", "sdpa")
    assert fx2nnef.TractNNEF(fused="sdpa,rope").fused == ("rope", "sdpa")
    x = torch.randn(1, 3, 16, generator=_g())
    assert _export(RMS_SPELLINGS["pow"], [x], tmp_path, fused=(), w=torch.ones(16)) == \
        {"rms_norm": 0, "rope": 0, "sdpa": 0}


# LLM families through the KV-cache path --------------------------------------------------------------
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
FAMILIES = {  # name: (config, class, attention, (rms_norm, rope, sdpa) expected)
    "llama_sdpa": (lambda: T.LlamaConfig(**SMALL), T.LlamaForCausalLM, "sdpa", (5, 4, 2)),
    "llama_eager": (lambda: T.LlamaConfig(**SMALL), T.LlamaForCausalLM, "eager", (5, 4, 2)),
    "qwen2": (lambda: T.Qwen2Config(**SMALL), T.Qwen2ForCausalLM, "sdpa", (5, 4, 2)),
    "mistral": (lambda: T.MistralConfig(**SMALL, sliding_window=6), T.MistralForCausalLM, "sdpa", (5, 4, 2)),
    "phi3_partial_rotary": (lambda: T.Phi3Config(**SMALL, pad_token_id=0, partial_rotary_factor=0.5),
                            T.Phi3ForCausalLM, "sdpa", (5, 4, 2)),
    # Gemma scales by (1 + weight)
    "gemma": (lambda: T.GemmaConfig(**SMALL, head_dim=16), T.GemmaForCausalLM, "sdpa", (5, 4, 2)),
    # Gemma2: four norms a layer; its attention is soft-capped (tanh): not tract's sdpa, left decomposed
    "gemma2": (lambda: T.Gemma2Config(**SMALL, head_dim=16), T.Gemma2ForCausalLM, "eager", (9, 4, 0)),
}


def _family(name):
    make, cls, attn, expected = FAMILIES[name]
    config = make()
    config._attn_implementation = attn
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):  # non-trivial norm weights: a dropped weight shows
                p.copy_((0.0 if "gemma" in name else 1.0) + 0.3 * torch.randn_like(p))
    return model, dict(zip(("rms_norm", "rope", "sdpa"), expected))


def _graph_text(asset) -> str:
    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_llm_family_with_fused_ops(name, tmp_path):
    """prompt, prompt with past and decode against transformers' DynamicCache, and 5 greedy tokens, in tract."""
    model, expected = _family(name)
    r = export_causal_lm(model, tmp_path / "out", fused="all", generate=5)
    assert r.manifest["fused"] == expected
    assert set(r.checks) == {"export", "prompt", "prompt_with_past", "decode", "generate"}
    text = _graph_text(r.asset)
    for fusion, ops in TRACT_OPS.items():
        assert sum(text.count(f"= {op}(") for op in ops) == expected[fusion], fusion
    assert f'("fx2nnef_fused", "rms_norm:{expected["rms_norm"]},rope:{expected["rope"]},sdpa:{expected["sdpa"]}")' in text


def test_llm_f16_with_fused_ops(tmp_path):
    model, expected = _family("llama_sdpa")
    r = export_causal_lm(model, tmp_path / "out", dtype="f16", fused="all", generate=3)
    # f16 models normalize in f32 then cast: the norm is fused, its weight product stays apart
    assert r.manifest["fused"] == expected
    text = _graph_text(r.asset)
    assert text.count("= tract_core_rms_norm(") == 5 and "datum_type = 'f16'" in text


def test_llm_f16_with_fused_ops_and_force_f32(tmp_path):
    """force_f32 runs first (its regions computed in f32), then the fusions match inside them."""
    model, expected = _family("llama_sdpa")
    r = export_causal_lm(model, tmp_path / "out", dtype="f16", fused="all", force_f32="all", generate=3)
    assert r.manifest["fused"] == expected and r.manifest["force_f32"] == ["norms", "attention", "linear"]
    assert r.checks["generate"]["equal"]


def test_llm_f16_weights_with_fused_ops(tmp_path):
    """f16-stored norm weights reach tract_core_scaled_rms_norm through a cast; checked against the rounded weights."""
    model, expected = _family("mistral")
    r = export_causal_lm(model, tmp_path / "out", weights="f16", fused="all", generate=3)
    assert r.manifest["fused"] == expected and r.manifest["weights"] == "f16"


def test_llm_batch_symbol_and_last_logits_with_fused_ops(tmp_path):
    model, expected = _family("qwen2")
    r = export_causal_lm(model, tmp_path / "out", fused="all", batch_symbol=True, last_logits_only=True)
    assert r.manifest["fused"] == expected and r.checks["decode"]["S"] == 1


def test_llm_default_export_is_unchanged_by_the_option_plumbing(tmp_path):
    from fx2nnef.examples.tiny_llm import tiny_llama

    model = tiny_llama("sdpa")
    plain = export_causal_lm(model, tmp_path / "a", check=False)
    none = export_causal_lm(model, tmp_path / "b", check=False, fused=())
    strip = lambda t: "\n".join(l for l in t.splitlines() if "properties =" not in l)  # noqa: E731
    assert strip(_graph_text(plain.asset)) == strip(_graph_text(none.asset))
    assert "tract_transformers" not in _graph_text(plain.asset) and "fused" not in plain.manifest


def test_cli_llm_fused_from_a_saved_folder(tmp_path, capsys):
    from fx2nnef.cli import main as cli_main
    from fx2nnef.examples.tiny_llm import tiny_llama

    tiny_llama("sdpa").save_pretrained(tmp_path / "src")
    out = tmp_path / "out"
    assert cli_main(["llm", str(tmp_path / "src"), str(out), "--generate", "2", "--fused", "rope,sdpa"]) == 0
    text = _graph_text(out / "model.nnef.tgz")
    assert text.count("= tract_transformers_apply_rope(") == 4 and text.count("= tract_transformers_sdpa(") == 2
    assert "rms_norm(" not in text
    assert cli_main(["llm", str(tmp_path / "src"), str(tmp_path / "bad"), "--fused", "flash"]) == 1
    assert "unknown fused op(s) 'flash'" in capsys.readouterr().err
