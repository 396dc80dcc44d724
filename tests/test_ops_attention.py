"""F.scaled_dot_product_attention, decomposed, compared with torch (masks, causal, GQA, dynamic lengths, f16)."""
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import OpCase, randbool, randn, run_case

sdpa = F.scaled_dot_product_attention
B, H, S, T, D = 2, 4, 5, 7, 8
Q, K, V = randn(B, H, S, D, seed=1), randn(B, H, T, D, seed=2), randn(B, H, T, D, seed=3)
KS, VS = randn(B, H, S, D, seed=4), randn(B, H, S, D, seed=5)
K2, V2 = randn(B, 2, T, D, seed=6), randn(B, 2, T, D, seed=7)  # 2 kv heads for 4 query heads
FLOAT_MASK = randn(S, T, seed=8)
BOOL_MASK = randbool(B, 1, S, T, seed=9) | torch.eye(S, T, dtype=torch.bool)
EMPTY_ROW = BOOL_MASK.clone()
EMPTY_ROW[:, :, 1] = False  # query 1 sees no key: torch gives 0 there
NEG_INF_ROW = torch.zeros(S, T)
NEG_INF_ROW[2] = float("-inf")
NEG_INF_ROW[3, :4] = float("-inf")
MIN_ROW = torch.zeros(S, T)
MIN_ROW[2] = torch.finfo(torch.float32).min
DYN_S = {"x0": {2: "S"}, "x1": {2: "S"}, "x2": {2: "S"}}
DYN_ST = {"x0": {2: "S"}, "x1": {2: "T"}, "x2": {2: "T"}}
DYN_B = {"x0": {0: "B"}, "x1": {0: "B"}, "x2": {0: "B"}}


def decode_with_past(q, k_new, v_new, k_past, v_past):
    """An LLM step: keys = past + new, bool mask from positions (query i sits at P + i), GQA."""
    k, v = torch.cat([k_past, k_new], dim=2), torch.cat([v_past, v_new], dim=2)
    past, total = k_past.shape[2], k.shape[2]
    mask = torch.arange(total).unsqueeze(0) <= torch.arange(past, total).unsqueeze(1)
    return sdpa(q, k, v, attn_mask=mask, enable_gqa=True)


def half(*ts):
    return [t.half() for t in ts]


CASES = [
    OpCase("plain", sdpa, [Q, K, V]),
    OpCase("scale", lambda q, k, v: sdpa(q, k, v, scale=0.3), [Q, K, V]),
    OpCase("float_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, FLOAT_MASK]),
    OpCase("bool_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, BOOL_MASK]),
    OpCase("bool_mask_empty_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, EMPTY_ROW]),
    OpCase("float_mask_neg_inf_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, NEG_INF_ROW]),
    OpCase("float_mask_finfo_min_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, MIN_ROW]),
    OpCase("causal_square", lambda q, k, v: sdpa(q, k, v, is_causal=True), [Q, KS, VS]),
    OpCase("causal_short_query", lambda q, k, v: sdpa(q, k, v, is_causal=True), [Q, K, V]),
    OpCase("causal_long_query", lambda q, k, v: sdpa(q, k, v, is_causal=True), [K, Q, KS]),
    OpCase("gqa", lambda q, k, v: sdpa(q, k, v, enable_gqa=True), [Q, K2, V2]),
    OpCase("gqa_causal", lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=True), [Q, K2, V2]),
    OpCase("rank3", sdpa, [Q[0], K[0], V[0]]),
    OpCase("rank3_bool_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q[0], K[0], V[0], BOOL_MASK[0]]),
    OpCase("value_dim", sdpa, [Q, K, randn(B, H, T, 3, seed=10)]),
    OpCase("dyn_seq", sdpa, [Q, KS, VS], khronos=False, dynamic_axes=DYN_S),
    OpCase("dyn_seq_causal", lambda q, k, v: sdpa(q, k, v, is_causal=True), [Q, KS, VS], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("dyn_seq_causal_short_query", lambda q, k, v: sdpa(q, k, v, is_causal=True), [Q, K, V], khronos=False,
           dynamic_axes=DYN_ST),
    OpCase("dyn_seq_gqa_causal", lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=True), [Q, K2, V2],
           khronos=False, dynamic_axes=DYN_ST),
    OpCase("dyn_batch_bool_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, BOOL_MASK],
           khronos=False, dynamic_axes={**DYN_B, "x3": {0: "B"}}),
    OpCase("dyn_seq_float_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), [Q, K, V, FLOAT_MASK],
           khronos=False, dynamic_axes={**DYN_ST, "x3": {0: "S", 1: "T"}}),
    OpCase("kv_cache_step", decode_with_past, [Q[:1], K2[:1, :, :S], V2[:1, :, :S], K2[:1, :, :3], V2[:1, :, :3]],
           khronos=False, dynamic_axes={**DYN_S, "x3": {2: "P"}, "x4": {2: "P"}}),
    OpCase("f16", sdpa, half(Q, K, V), khronos=False),
    OpCase("f16_causal_gqa", lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=True), half(Q, K2, V2),
           khronos=False),
    OpCase("f16_bool_mask_empty_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), half(Q, K, V) + [EMPTY_ROW],
           khronos=False),
    OpCase("f16_f32_mask_finfo_min_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), half(Q, K, V) + [MIN_ROW],
           khronos=False),
    OpCase("f16_float_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), half(Q, K, V, FLOAT_MASK),
           khronos=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_dropout_is_refused(tmp_path):
    case = OpCase("dropout", lambda q, k, v: sdpa(q, k, v, dropout_p=0.5), [Q, K, V])
    with pytest.raises(fx2nnef.UnsupportedOpError, match="dropout_p"):
        run_case(case, tmp_path, "tract")
