"""Mixture-of-experts causal LMs (random weights, tiny configs) export with dynamic batch and sequence.

transformers 5.23 routes tokens to experts by sorting them, counting them per expert with
``torch.histc`` and multiplying each run with ``torch._grouped_mm`` (its default,
"grouped_mm"), or by gathering each token's expert weights ("batched_mm"); both export, as
shape-static graphs. The op cases check those lowerings and the scatters on their own.
"""
import tarfile

import pytest
import torch
import transformers as T

import fx2nnef
from harness import OpCase, check_op, export_and_run_with_kv_cache, randint, randn, run_case

MOE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=128, max_position_embeddings=128, num_experts_per_tok=2)
MLA = dict(num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=32, first_k_dense_replace=1,
           n_group=1, topk_group=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
           qk_head_dim=16, v_head_dim=8, head_dim=8)
FAMILIES = {
    "mixtral": (lambda: T.MixtralConfig(**MOE, num_local_experts=4), T.MixtralForCausalLM),
    "qwen2_moe": (lambda: T.Qwen2MoeConfig(**MOE, num_experts=4, moe_intermediate_size=32,
                                           shared_expert_intermediate_size=32), T.Qwen2MoeForCausalLM),
    "qwen3_moe": (lambda: T.Qwen3MoeConfig(**MOE, num_experts=4, moe_intermediate_size=32, head_dim=8),
                  T.Qwen3MoeForCausalLM),
    "olmoe": (lambda: T.OlmoeConfig(**MOE, num_experts=4), T.OlmoeForCausalLM),
    "gpt_oss": (lambda: T.GptOssConfig(**MOE, num_local_experts=4, head_dim=8), T.GptOssForCausalLM),
    "phimoe": (lambda: T.PhimoeConfig(**MOE, num_local_experts=4), T.PhimoeForCausalLM),
    # latent attention, a dense first layer, shared experts; V2 rotates with complex numbers
    "deepseek_v2": (lambda: T.DeepseekV2Config(**{**MOE, **MLA}), T.DeepseekV2ForCausalLM),
    "deepseek_v3": (lambda: T.DeepseekV3Config(**{**MOE, **MLA}), T.DeepseekV3ForCausalLM),
    # complex rotary embedding, shared expert, sigmoid routing
    "llama4_text": (lambda: T.Llama4TextConfig(**MOE, num_local_experts=4, intermediate_size_mlp=64, head_dim=8),
                    T.Llama4ForCausalLM),
}


def tiny(family: str, experts: str = "grouped_mm", use_cache: bool = False):
    """A tiny model of ``family`` whose constant parameters (norm weights, zero-initialised
    routers, under which every expert ties) are made random."""
    make_config, cls = FAMILIES[family]
    config = make_config()
    config.use_cache = use_cache
    torch.manual_seed(0)
    model = cls(config).eval()
    if model._can_set_experts_implementation():  # Llama4 has its own (dense) experts
        model.set_experts_implementation(experts)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape))
    return model


def ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


QUICK = {"mixtral", "qwen2_moe"}  # the others are slow: each adds one path, also covered by an op case below


@pytest.mark.parametrize("family", [f if f in QUICK else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES])
def test_moe_family_dynamic_batch_and_sequence(family, tmp_path):
    model = tiny(family)
    r = fx2nnef.export(model, (ids(2, 7),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3
    assert "tract_core_topk" in r.nnef_text  # routed, not a dense model by accident


def test_moe_float16(tmp_path):
    """Expert outputs are kept with a select on a zero of their own dtype (an f32 zero next to f16
    products did not load in tract)."""
    r = fx2nnef.export(tiny("mixtral").half(), (ids(2, 7),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}, check_io_tolerance="very"))
    assert r.check.ok and len(r.check.cases) >= 3


@pytest.mark.slow
def test_moe_batched_mm_experts(tmp_path):
    """The gather-based experts of transformers ("batched_mm") export as they are."""
    r = fx2nnef.export(tiny("mixtral", "batched_mm"), (ids(2, 7),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


@pytest.mark.slow
def test_moe_eager_experts(tmp_path):
    """transformers' "eager" experts loop over the experts hit (nonzero) and gather their tokens
    (where(mask)): traced over every coordinate, the rows not routed are dropped at index_add."""
    r = fx2nnef.export(tiny("mixtral", "eager"), (ids(2, 7),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


def test_dbrx_dynamic_batch_and_sequence(tmp_path):
    """DBRX has only the eager loop, and it reaches the sentinel expert one past the last."""
    config = T.DbrxConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=128,
                          attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
                          ffn_config={"moe_num_experts": 4, "moe_top_k": 2, "ffn_hidden_size": 32})
    config.use_cache = False
    torch.manual_seed(0)
    model = T.DbrxForCausalLM(config).eval()
    r = fx2nnef.export(model, (ids(2, 7),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {0: "B", 1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3


def test_moe_with_kv_cache(tmp_path):
    """One asset serves the prompt (P=0), a prompt after a past, and decoding (S=1)."""
    export_and_run_with_kv_cache(tiny("qwen2_moe", use_cache=True), ids(1, 12, seed=7), tmp_path,
                                 [(1, 8), (4, 0), (1, 11)])


# ---- the ops on their own ---------------------------------------------------------------------------------------
EXPERTS = randn(4, 8, 12, seed=5)


def routed(self, x, expert_ids):
    """transformers' grouped routing: sort rows by expert, count them, one product per run, unsort."""
    sorted_ids, perm = torch.sort(expert_ids)
    counts = torch.histc(sorted_ids.float(), bins=4, min=0, max=3)
    offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
    y = torch._grouped_mm(x[perm], self.w, offs=offs)
    return y[torch.argsort(perm)]


class Routed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(EXPERTS.clone())

    def forward(self, x, expert_ids):
        return routed(self, x, expert_ids)


EDGES = torch.tensor([-1.0, 0.0, 0.75, 0.7499999, 1.5, 2.25, 2.2500002, 3.0, 3.0000002, 1.1, 2.9, 0.0, 3.0])
OFFS = torch.tensor([3, 3, 6, 8], dtype=torch.int32)
CASES = [
    OpCase("histc_edges", lambda x: torch.histc(x, bins=4, min=0, max=3), [EDGES], tolerance="exact"),
    OpCase("histc_random_range", lambda x: x.histc(bins=7, min=-1.3, max=2.9), [randn(5, 9)], tolerance="exact",
           dynamic_axes={"x0": {0: "N"}}),
    OpCase("grouped_mm_routed_rows", None, [randn(10, 8), randint(0, 4, 10, seed=2) * (randint(0, 4, 10, seed=2) != 1)],
           khronos=False, dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}}, module=Routed()),
    OpCase("grouped_mm_2d_3d_empty_groups", lambda self, x: torch._grouped_mm(x, self.w, offs=self.offs), [randn(8, 8)]),
    OpCase("grouped_mm_3d_3d", lambda self, x: torch._grouped_mm(x, self.w), [randn(4, 5, 8)]),
    OpCase("grouped_mm_3d_2d", lambda self, x: torch._grouped_mm(self.a, x, offs=self.offs), [randn(8, 8)]),
    OpCase("grouped_mm_2d_2d", lambda self, x: F_grouped_mm(self.b, x, offs=self.offs), [randn(8, 12)]),
    OpCase("linear_rank4_dynamic", lambda self, x: torch.nn.functional.linear(x, self.b.T, self.b[0]),
           [randn(2, 3, 6, 5)], dynamic_axes={"x0": {0: "B", 2: "S"}}),
    OpCase("scatter_src", lambda x, s: torch.scatter(x, 1, torch.tensor([[0, 5, 2], [4, 1, 3]]), s),
           [randn(2, 6), randn(2, 5, seed=1)], khronos=False),
    OpCase("scatter_value", lambda x, i: x.scatter(-1, i, float("-inf")), [randn(3, 6), randint(0, 6, 3, 1, seed=2)],
           khronos=False),
    OpCase("scatter_add_duplicates", lambda x, i, s: x.scatter_add(1, i, s),
           [randn(3, 6), randint(0, 6, 3, 4, seed=2), randn(3, 5, seed=3)], khronos=False),
    OpCase("scatter_reduce_amax_without_self", lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
           [randn(3, 6), randint(0, 6, 3, 4, seed=2), randn(3, 5, seed=3)], khronos=False),
    OpCase("index_add_dynamic", lambda x, i, s: x.index_add(0, i, s, alpha=2.0),
           [randn(5, 4), randint(0, 5, 7, seed=4), randn(7, 4, seed=5)], khronos=False,
           dynamic_axes={"x1": {0: "N"}, "x2": {0: "N"}}),
    OpCase("index_add_inplace", lambda x, i, s: x.clone().index_add_(1, i, s),
           [randn(2, 5, 3), randint(0, 5, 6, seed=4), randn(2, 6, 3, seed=5)], khronos=False),
]


def F_grouped_mm(a, b, offs):
    return torch.nn.functional.grouped_mm(a, b, offs=offs)


def _with_weights(case: OpCase) -> OpCase:
    """Cases written with ``self`` get their operands as buffers of an FnModule."""
    from harness import FnModule

    if case.module is None and case.fn.__code__.co_varnames[:1] == ("self",):
        case.module = FnModule(case.fn, w=EXPERTS.clone(), offs=OFFS, a=randn(4, 5, 8, seed=6),
                               b=randn(5, 8, seed=7))
    return case


@pytest.mark.parametrize("case", [_with_weights(c) for c in CASES], ids=str)
def test_routing_ops_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [_with_weights(c) for c in CASES if c.khronos], ids=str)
def test_routing_ops_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def routed_loop(x, expert_ids, weights):
    """The eager experts loop: one pass per expert hit, its tokens gathered, added back."""
    out = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(expert_ids, num_classes=4).permute(1, 0)  # [experts, tokens]
    for e in (mask.sum(-1) > 0).nonzero():
        tokens = torch.where(mask[e[0]])[0]
        out.index_add_(0, tokens, torch.tanh(x[tokens] * weights[e[0]]))
    return out


def test_data_sized_indices_masked_at_index_add(tmp_path):
    r = check_op(routed_loop, [randn(6, 3), randint(0, 3, 6, seed=2), randn(4, 3, seed=3)], tmp_path,
                 dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}})
    assert r.check.ok and len(r.check.cases) >= 3


def test_data_sized_indices_elsewhere_are_the_true_coordinates(tmp_path):
    """Coordinates that reach an output another way are exported as the true ones, their count a
    symbol (tests/test_data_sizes.py); this one also repeats rows (a row per true item)."""
    r = check_op(lambda x: x[(x > 0).nonzero()[:, 0]].sum(0), [randn(6, 3)], tmp_path)
    assert r.check.ok
    assert "tract_onnx_non_zero" in tarfile.open(r.path).extractfile("graph.nnef").read().decode()


def test_histc_range_from_data_is_refused(tmp_path):
    with pytest.raises(fx2nnef.errors.Fx2NnefError, match="range from the data"):
        check_op(lambda x: torch.histc(x, bins=4), [randn(6)], tmp_path)
