"""The graph forms of LLM attention that tract runs fastest, each checked in tract against PyTorch.

- a bool attention mask is added as a small additive mask (one ``select`` at the mask's shape,
  shared by every layer), never selected over the ``[B, H, S, P+S]`` scores;
- the "rows that see no key give 0" rule is left out where the graph proves every row sees a key
  (causal masks with a past, sliding windows: ``fx2nnef.ir.masks``), and kept where a row can be
  empty (a mask read from an input).
"""
import tarfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as T

import fx2nnef
from fx2nnef.llm import export_causal_lm
from fx2nnef.llm.wrapper import FlatCacheLM, cache_layout
from fx2nnef.targets.tolerance import compare_outputs, format_diffs
from fx2nnef.targets.tract_runner import run_tract_many
from harness import randn

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1)
# (P, S): a prompt, the first token alone, a token after one, a chunk after a past, decode
SIZES = [(0, 6), (0, 1), (1, 1), (6, 3), (9, 1)]


def _graph_text(asset):
    with tarfile.open(asset) as tar:
        return tar.extractfile("graph.nnef").read().decode()


def _norms(model):
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def _check_sizes(asset, model, sizes=SIZES, dtype=torch.float32, tolerance="approximate"):
    """The asset against the model (flat cache contract) at each (P, S), in one tract child."""
    layout = cache_layout(model)
    wrapper = FlatCacheLM(model, layout)
    full = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        past = wrapper(full, *layout.empty(0, dtype))[1:]
    cases = []
    for p, s in sizes:
        cache = [t[:, :, :p].contiguous() for t in past]
        with torch.no_grad():
            expected = wrapper(full[:, p:p + s], *cache)
        cases.append(([full[:, p:p + s].numpy()] + [t.numpy() for t in cache], [t.numpy() for t in expected]))
    got = run_tract_many(asset, [inputs for inputs, _ in cases])
    for (p, s), (_, want), outs in zip(sizes, cases, got):
        diffs = compare_outputs(None, want, outs, tolerance)
        assert all(d.ok for d in diffs), f"P={p}, S={s}:\n" + format_diffs(diffs)
        assert np.isfinite(outs[0]).all()


@pytest.mark.parametrize("family", ["llama", "mistral_sliding_window"])
def test_causal_mask_is_additive_and_has_no_empty_row_rule(family, tmp_path):
    torch.manual_seed(0)
    if family == "llama":
        model = _norms(T.LlamaForCausalLM(T.LlamaConfig(**SMALL)))
    else:
        model = _norms(T.MistralForCausalLM(T.MistralConfig(**SMALL, sliding_window=4)))
    r = export_causal_lm(model, tmp_path / "out", check=False)
    text = _graph_text(r.asset)
    assert "any_reduce" not in text  # no "no key" rule: every causal row sees its own key
    assert text.count("select(") == 1  # the additive mask, built once for both layers
    assert text.count("additive_mask)") == 2  # added to each layer's scores
    _check_sizes(r.asset, model)


def test_float16_causal_mask(tmp_path):
    torch.manual_seed(0)
    model = _norms(T.LlamaForCausalLM(T.LlamaConfig(**SMALL))).half()
    r = export_causal_lm(model, tmp_path / "out", check=False)
    assert "any_reduce" not in _graph_text(r.asset)
    _check_sizes(r.asset, model, dtype=torch.float16, tolerance="very")


def test_fused_sdpa_drops_the_rule_too(tmp_path):
    torch.manual_seed(0)
    model = _norms(T.LlamaForCausalLM(T.LlamaConfig(**SMALL)))
    r = export_causal_lm(model, tmp_path / "out", check=False, fused="sdpa")
    text = _graph_text(r.asset)
    assert "tract_transformers_sdpa" in text and "any_reduce" not in text
    _check_sizes(r.asset, model)


class MaskFromInput(torch.nn.Module):
    """Attention whose bool mask is an input: a row may see no key, and must then give 0."""

    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


class CausalWithPast(torch.nn.Module):
    """An LLM step: keys = past + new, a causal mask from positions (query i sits at P + i)."""

    shift = 0

    def forward(self, q, k_new, v_new, k_past, v_past):
        k, v = torch.cat([k_past, k_new], dim=2), torch.cat([v_past, v_new], dim=2)
        past, total = k_past.shape[2], k.shape[2]
        keep = torch.arange(total)[None, :] <= torch.arange(past, total)[:, None] - self.shift
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


class KeyBeforeQuery(CausalWithPast):
    """``key <= query - 1``: the first token of a prompt sees no key (not provably non-empty)."""

    shift = 1


def test_a_mask_from_an_input_keeps_the_rule(tmp_path):
    q, k, v = randn(1, 2, 4, 8, seed=1), randn(1, 2, 6, 8, seed=2), randn(1, 2, 6, 8, seed=3)
    keep = torch.rand(1, 1, 4, 6, generator=torch.Generator().manual_seed(4)) > 0.5
    keep[:, :, 2] = False
    r = fx2nnef.export(MaskFromInput(), (q, k, v, keep), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF())
    assert r.check.ok and "any_reduce" in _graph_text(r.path)


@pytest.mark.parametrize("module, rule", [(CausalWithPast(), False), (KeyBeforeQuery(), True)])
def test_rule_follows_the_proof(module, rule, tmp_path):
    def inputs(s, p, seed):
        return [randn(1, 4, s, 8, seed=seed)] + [randn(1, 2, n, 8, seed=seed + i + 1) for i, n in enumerate((s, s, p, p))]

    dyn = {"q": {2: "S"}, "k_new": {2: "S"}, "v_new": {2: "S"}, "k_past": {2: "P"}, "v_past": {2: "P"}}
    gqa = GQA(module)
    r = fx2nnef.export(gqa, tuple(inputs(3, 5, 0)), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(dynamic_axes=dyn))
    assert r.check.ok and ("any_reduce" in _graph_text(r.path)) is rule
    cases = [inputs(s, p, 10 * s + p) for s, p in [(1, 0), (1, 6), (4, 0), (2, 7)]]
    got = run_tract_many(r.path, [[x.numpy() for x in c] for c in cases])
    for c, outs in zip(cases, got):
        with torch.no_grad():
            want = gqa(*c).numpy()
        assert np.isfinite(outs[0]).all()
        np.testing.assert_allclose(outs[0], want, atol=1e-5, rtol=1e-4)


class GQA(torch.nn.Module):
    """Two kv heads for four query heads, repeated as transformers' ``repeat_kv`` does."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, q, k_new, v_new, k_past, v_past):
        rep = [t.repeat_interleave(2, dim=1) for t in (k_new, v_new, k_past, v_past)]
        return self.inner(q, *rep)


class ConstantMask(torch.nn.Module):
    def __init__(self, keep):
        super().__init__()
        self.register_buffer("keep", keep)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep)


@pytest.mark.parametrize("empty_row", [False, True])
def test_a_constant_mask_is_read(empty_row, tmp_path):
    keep = torch.tril(torch.ones(4, 6, dtype=torch.bool), diagonal=2)
    if empty_row:
        keep[1] = False
    q, k, v = randn(1, 2, 4, 8, seed=1), randn(1, 2, 6, 8, seed=2), randn(1, 2, 6, 8, seed=3)
    r = fx2nnef.export(ConstantMask(keep), (q, k, v), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF())
    assert r.check.ok and ("any_reduce" in _graph_text(r.path)) is empty_row
