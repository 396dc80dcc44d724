"""More causal-LM families on the deployment path (``export_causal_lm``): the patterns the survey
of transformers' families found (benchmarks/survey_causal_lm.py --llm), each on a tiny config."""
import pytest
import torch
import torch.nn.functional as F
import transformers as T

import fx2nnef
from fx2nnef.errors import InvalidArgumentError, TraceError
from fx2nnef.llm import export_causal_lm
from tests.harness import tract_matches_eager

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
             max_position_embeddings=128, initializer_range=0.1)


def _noisy(model):
    """Weights that are all one value (norms, zero-initialised biases) get noise: such weights hide bugs."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def _jetmoe():
    torch.manual_seed(0)
    return _noisy(T.JetMoeForCausalLM(T.JetMoeConfig(
        **{**SMALL, "num_hidden_layers": 1}, intermediate_size=32, num_key_value_heads=2, kv_channels=16,
        num_local_experts=3, num_experts_per_tok=2)))


def test_jetmoe_experts_split_by_counts_read_from_data(tmp_path):
    """JetMoE cuts the expert-sorted rows with x.split(counts.tolist()) and joins the experts'
    outputs with torch.cat: each expert runs on all rows and each row keeps its own expert's.
    (Before: refused, a split() size read with tolist().)"""
    r = export_causal_lm(_jetmoe(), tmp_path / "out", generate=3)
    assert r.checks["generate"]["equal"]
    assert all(r.checks[m]["max_abs_logits"] < 1e-4 for m in ("prompt", "prompt_with_past", "decode"))


class GroupedExperts(torch.nn.Module):
    """Rows sorted by a data-chosen group, cut by the group sizes, one weight per group."""

    def __init__(self, groups=3, dim=8, out=6, row_op=None):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.router = torch.nn.Parameter(torch.randn(dim, groups, generator=g))
        self.weight = torch.nn.Parameter(torch.randn(groups, out, dim, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(groups, out, generator=g))
        self.groups = groups
        self.row_op = row_op

    def forward(self, x):  # x [N, dim]
        expert = (x @ self.router).argmax(-1)
        order = expert.sort(stable=True).indices
        counts = F.one_hot(expert, self.groups).sum(0)
        pieces = x[order].split(counts.tolist(), dim=0)
        outs = [F.silu(F.linear(p, self.weight[i], self.bias[i])) * 2.0 for i, p in enumerate(pieces)]
        if self.row_op is not None:
            outs = [self.row_op(o) for o in outs]
        y = torch.cat(outs, dim=0)
        return torch.zeros_like(y).index_copy(0, order, y)


def test_split_by_data_counts_other_sizes_and_data(tmp_path):
    """The grouped rows in tract against eager torch on other row counts and other routings
    (an empty group included: all rows to one group)."""
    model = GroupedExperts().eval()
    x = torch.randn(7, 8, generator=torch.Generator().manual_seed(1))
    r = fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "N"}}), input_names=["x"])
    assert r.check.ok
    g = torch.Generator().manual_seed(2)
    one_group = model.router[:, 0].detach().unsqueeze(0).repeat(5, 1) * 10  # every row routed to group 0
    tract_matches_eager(r.path, model, [[torch.randn(n, 8, generator=g)] for n in (1, 4, 13)] + [[one_group]])


def test_split_by_data_counts_refuses_ops_across_rows(tmp_path):
    """A piece reduced over its rows (its size follows the data) is refused with its line."""
    model = GroupedExperts(row_op=lambda o: o - o.mean(0, keepdim=True)).eval()
    x = torch.randn(7, 8, generator=torch.Generator().manual_seed(1))
    with pytest.raises(TraceError, match=r"split\(counts.tolist\(\)\).*mean"):
        fx2nnef.export(model, (x,), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "N"}}),
                       input_names=["x"])


def test_model_needing_the_whole_sequence_again_is_refused(tmp_path):
    """CPM-Ant slices the cached prefix off the whole sequence itself (its generate feeds it all):
    given only the new tokens, as the contract does, it fails. Refused before tracing, with the
    reason (before: a GuardError on a loop over S, deep in its mask code)."""
    torch.manual_seed(0)
    model = T.CpmAntForCausalLM(T.CpmAntConfig(hidden_size=64, dim_ff=128, num_hidden_layers=2, num_attention_heads=4,
                                               dim_head=16, vocab_size=128, prompt_length=4)).eval()
    with pytest.raises(InvalidArgumentError, match="whole sequence again"):
        export_causal_lm(model, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_generation_reference_of_a_model_whose_cache_is_cache_params():
    """Mamba-2 names its cache ``cache_params`` (in and out): the generation check's reference
    feeds it back under that name and gives model.generate's tokens. (Before: AttributeError on
    ``past_key_values`` after the three modes had passed.)"""
    from fx2nnef.llm.export import greedy_reference

    torch.manual_seed(0)
    model = _noisy(T.Mamba2ForCausalLM(T.Mamba2Config(hidden_size=32, num_heads=4, head_dim=16, expand=2, state_size=8,
                                                      n_groups=1, num_hidden_layers=1, vocab_size=64, chunk_size=16)))
    prompt = torch.tensor([[3, 41, 59, 26, 53]])
    cfg = T.GenerationConfig(max_new_tokens=5, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(prompt, generation_config=cfg)[0, 5:].tolist()
    assert greedy_reference(model, prompt, 5) == expected


def test_multimodal_model_run_on_text(tmp_path):
    """A vision-language model whose family ``fx2nnef llm`` does not wire (GOT-OCR2: its vocabulary
    size in its text config only) is refused naming the part, with nothing written: a text-only
    asset would drop the vision tower without a word. (Before: AttributeError on config.vocab_size;
    then a text-only asset.)"""
    vision = T.GotOcr2VisionConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=64,
                                   patch_size=16, output_channels=32, mlp_dim=64, global_attn_indexes=[0], window_size=2)
    text = dict(SMALL, intermediate_size=128, num_key_value_heads=2, pad_token_id=0)
    torch.manual_seed(0)
    model = _noisy(T.GotOcr2ForConditionalGeneration(T.GotOcr2Config(vision_config=vision, text_config=text)))
    assert not hasattr(model.config, "vocab_size")
    with pytest.raises(InvalidArgumentError, match="got_ocr2.*tower"):
        export_causal_lm(model, tmp_path / "out", generate=3)
    assert not (tmp_path / "out").exists()


def test_hybrid_config_with_state_layers_only_says_why(tmp_path):
    """A hybrid family configured with state layers only (LFM2 all short convolutions, as the
    first layers of Bamba or Granite 4 are): transformers cannot run it with a cache, and the
    refusal says that this is transformers' limitation."""
    torch.manual_seed(0)
    model = T.Lfm2ForCausalLM(T.Lfm2Config(**SMALL, intermediate_size=128, num_key_value_heads=2,
                                           layer_types=["conv", "conv"])).eval()
    with pytest.raises(InvalidArgumentError, match="state layers only: a limitation of transformers"):
        export_causal_lm(model, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
