"""einsum, outer, topk/sort/argsort, bucketize/searchsorted, cdist, repeat_interleave and isnan/isinf/isfinite."""
import pytest
import torch

import fx2nnef
from harness import OpCase, randint, randn, run_case

F32 = randn(2, 3, 4)
F16 = randn(2, 3, 4, dtype=torch.float16)
I64 = randint(-5, 5, 2, 3, 4)
# distinct values, so that sort and topk orders do not depend on how ties are broken
DISTINCT = torch.randperm(24, generator=torch.Generator().manual_seed(0)).reshape(2, 3, 4).float() - 10
TIES = torch.tensor([[1.0, 2.0, 2.0, 1.0, 0.0, 2.0], [0.0] * 6])
SPECIAL = torch.tensor([[0.0, float("nan"), float("inf"), -float("inf")], [1e38, -3.0, 65504.0, 7.0]])
DYN_S = {"x0": {1: "S"}}


def untied(x):
    """``x`` plus a small ramp along axis 1, so that the longer input of a dynamic-axis check (the
    example tiled) has no ties either."""
    return x + torch.arange(x.shape[1])[None, :, None] * 0.01


def einsum(eq):
    return lambda *xs: torch.einsum(eq, *xs)


CASES = [
    # einsum: matmul-like contractions, outer products, reductions, transposes, ellipsis, 3 operands
    OpCase("einsum_mm", einsum("ij,jk->ik"), [randn(3, 4), randn(4, 5, seed=1)]),
    OpCase("einsum_bmm", einsum("bij,bjk->bik"), [randn(2, 3, 4), randn(2, 4, 5, seed=1)]),
    OpCase("einsum_qk", einsum("bhqd,bhkd->bhqk"), [randn(2, 3, 4, 8), randn(2, 3, 5, 8, seed=1)]),
    OpCase("einsum_outer", einsum("i,j->ij"), [randn(3), randn(4, seed=1)]),
    OpCase("einsum_dot", einsum("i,i->"), [randn(5), randn(5, seed=1)]),
    OpCase("einsum_transpose", einsum("ij->ji"), [randn(3, 4)]),
    OpCase("einsum_sum", einsum("ijk->j"), [F32]),
    OpCase("einsum_implicit", einsum("ij,jk"), [randn(3, 4), randn(4, 5, seed=1)]),
    OpCase("einsum_ellipsis", einsum("...ij,...jk->...ik"), [randn(2, 3, 4), randn(2, 4, 5, seed=1)]),
    OpCase("einsum_ellipsis_implicit", einsum("...i,ij"), [randn(2, 3, 4), randn(4, 5, seed=1)]),
    OpCase("einsum_merge_groups", einsum("bsd,dhe->bshe"), [randn(2, 3, 4), randn(4, 2, 5, seed=1)]),
    OpCase("einsum_contract_two", einsum("bij,ijk->bk"), [randn(2, 3, 4), randn(3, 4, 5, seed=1)]),
    OpCase("einsum_lone_index", einsum("ij,k->ik"), [randn(3, 4), randn(5, seed=1)]),
    OpCase("einsum_hadamard", einsum("ij,ij->ij"), [randn(3, 4), randn(3, 4, seed=1)]),
    OpCase("einsum_three", einsum("ij,jk,kl->il"), [randn(2, 3), randn(3, 4, seed=1), randn(4, 5, seed=2)]),
    OpCase("einsum_list_arg", lambda a, b: torch.einsum("ij,jk->ik", [a, b]), [randn(3, 4), randn(4, 5, seed=1)]),
    OpCase("einsum_diagonal", einsum("ii->i"), [randn(4, 4)], khronos=False),
    OpCase("einsum_dyn", einsum("bsd,de->bse"), [randn(2, 3, 4), randn(4, 5, seed=1)], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("einsum_dyn_contract", einsum("bsd,bse->de"), [randn(2, 3, 4), randn(2, 3, 5, seed=1)], khronos=False,
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("einsum_f16", einsum("bij,bjk->bik"), [randn(2, 3, 4, dtype=torch.float16),
                                                  randn(2, 4, 5, dtype=torch.float16, seed=1)],
           khronos=False),
    # linear with a 1-D weight: a dot product with each row (D-FINE's box integral)
    OpCase("linear_1d_weight", lambda x, w: torch.nn.functional.linear(x.softmax(-1), w), [F32, randn(4, seed=2)]),
    OpCase("linear_1d_weight_bias", lambda x, w: torch.nn.functional.linear(x, w, torch.tensor(0.5)), [F32, randn(4, seed=2)],
           khronos=False, dynamic_axes={"x0": {1: "S"}}),
    # outer
    OpCase("outer", torch.outer, [randn(3), randn(4, seed=1)]),
    OpCase("outer_method", lambda a, b: a.outer(b), [randn(3), randn(4, seed=1)]),
    OpCase("outer_i64", torch.outer, [randint(-3, 3, 3), randint(-3, 3, 4, seed=1)], khronos=False),
    OpCase("outer_dyn", torch.outer, [randn(3), randn(4, seed=1)], khronos=False, dynamic_axes={"x0": {0: "S"}}),
    # topk / sort / argsort (tract only)
    OpCase("topk", lambda x: tuple(torch.topk(x, 2)), [DISTINCT], khronos=False),
    OpCase("topk_smallest_dim1", lambda x: tuple(torch.topk(x, 2, dim=1, largest=False)), [DISTINCT], khronos=False),
    OpCase("topk_method", lambda x: x.topk(3)[0], [DISTINCT], khronos=False),
    OpCase("topk_i64", lambda x: tuple(torch.topk(x, 2)), [DISTINCT.long()], khronos=False),
    OpCase("topk_dyn", lambda x: tuple(torch.topk(untied(x), 2, dim=1)), [DISTINCT], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("topk_dyn_k", lambda x: tuple(torch.topk(untied(x), x.shape[1], dim=1)), [DISTINCT], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("sort", lambda x: tuple(torch.sort(x)), [DISTINCT], khronos=False),
    OpCase("sort_descending_dim0", lambda x: tuple(torch.sort(x, dim=0, descending=True)), [DISTINCT], khronos=False),
    OpCase("sort_method_stable", lambda x: tuple(x.sort(stable=True)), [DISTINCT], khronos=False),
    OpCase("sort_dyn", lambda x: tuple(torch.sort(untied(x), dim=1)), [DISTINCT], khronos=False, dynamic_axes=DYN_S),
    # the sorted axis merged with another one by a reshape (gpt-oss's experts: tract must know the sorted length)
    OpCase("sort_dyn_reshaped", lambda x: (torch.sort(untied(x), dim=1)[0] + x).reshape(x.shape[0], x.shape[1], 2, 2),
           [DISTINCT], khronos=False, dynamic_axes=DYN_S),
    OpCase("sort_stable_ties", lambda x: tuple(torch.sort(x, stable=True)), [TIES], khronos=False),
    OpCase("sort_stable_ties_descending", lambda x: tuple(torch.sort(x, descending=True, stable=True)), [TIES],
           khronos=False),
    OpCase("argsort", torch.argsort, [DISTINCT], khronos=False),
    OpCase("argsort_descending", lambda x: x.argsort(dim=1, descending=True), [DISTINCT], khronos=False),
    # repeat_interleave
    OpCase("repeat_interleave_dim", lambda x: torch.repeat_interleave(x, 2, dim=1), [F32]),
    OpCase("repeat_interleave_neg_dim", lambda x: x.repeat_interleave(3, dim=-1), [F32]),
    OpCase("repeat_interleave_flat", lambda x: torch.repeat_interleave(x, 2), [F32]),
    OpCase("repeat_interleave_i64", lambda x: x.repeat_interleave(2, dim=0), [I64], khronos=False),
    OpCase("repeat_interleave_dyn", lambda x: x.repeat_interleave(2, dim=1), [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("repeat_interleave_kv", lambda x: x.repeat_interleave(2, dim=1),
           [randn(1, 2, 5, 4)], khronos=False, dynamic_axes={"x0": {2: "S"}}),
    # bucketize / searchsorted: the count of boundaries below each value (NaN counts as above all)
    OpCase("bucketize", lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5, 1.0])), [F32], khronos=False),
    OpCase("bucketize_right_int32", lambda x: torch.bucketize(x.round(), torch.tensor([-1.0, 0.0, 1.0]), right=True,
                                                             out_int32=True), [F32], khronos=False),
    OpCase("bucketize_special", lambda x: torch.bucketize(x, torch.tensor([-5.0, 0.0, 7.0, 1e30])), [SPECIAL],
           khronos=False),
    OpCase("bucketize_i64", lambda x: torch.bucketize(x, torch.tensor([-2, 0, 3])), [I64], khronos=False),
    OpCase("bucketize_dyn", lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0])), [F32], khronos=False,
           dynamic_axes=DYN_S),
    OpCase("searchsorted_1d", lambda s, x: torch.searchsorted(s, x), [torch.tensor([-1.0, 0.0, 0.5, 2.0]), F32],
           khronos=False),
    OpCase("searchsorted_batched_right", lambda s, x: torch.searchsorted(s.sort(-1)[0], x, side="right"),
           [randn(2, 3, 5, seed=3), F32], khronos=False),
    # cdist: norms of every pairwise difference
    OpCase("cdist", torch.cdist, [randn(2, 5, 4), randn(2, 3, 4, seed=1)]),
    OpCase("cdist_p1", lambda a, b: torch.cdist(a, b, p=1.0), [randn(5, 4), randn(6, 4, seed=1)], khronos=False),
    OpCase("cdist_pinf_dyn", lambda a, b: torch.cdist(a, b, p=float("inf")), [randn(2, 5, 4), randn(2, 3, 4, seed=1)],
           khronos=False, dynamic_axes={"x0": {1: "P"}, "x1": {1: "R"}}),
    # isnan / isinf / isfinite
    OpCase("isnan", torch.isnan, [SPECIAL]),
    OpCase("isinf", torch.isinf, [SPECIAL]),
    OpCase("isfinite", torch.isfinite, [SPECIAL]),
    OpCase("isposinf", torch.isposinf, [SPECIAL]),
    OpCase("isneginf", torch.isneginf, [SPECIAL]),
    OpCase("isnan_method", lambda x: x.isnan(), [SPECIAL]),
    OpCase("isinf_f16", torch.isinf, [SPECIAL.half()], khronos=False),
    OpCase("isfinite_f16", torch.isfinite, [SPECIAL.half()], khronos=False),
    OpCase("isnan_i64", torch.isnan, [I64], khronos=False),
    OpCase("isfinite_i64", torch.isfinite, [I64], khronos=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


@pytest.mark.parametrize("case", [
    OpCase("topk_khronos", lambda x: tuple(torch.topk(x, 2)), [DISTINCT]),
    OpCase("sort_khronos", lambda x: tuple(torch.sort(x)), [DISTINCT]),
    OpCase("einsum_diagonal_khronos", einsum("ii->i"), [randn(4, 4)]),
], ids=str)
def test_khronos_refuses(case, tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError):
        run_case(case, tmp_path, "khronos")


def test_repeat_interleave_per_item_counts_refused(tmp_path):
    case = OpCase("per_item", lambda x, r: torch.repeat_interleave(x, r, dim=0), [randn(3), torch.tensor([1, 2, 3])])
    with pytest.raises((fx2nnef.UnsupportedOpError, fx2nnef.TraceError)):
        run_case(case, tmp_path, "tract")
