"""Batch 5 of op lowerings, found missing by an op survey: special functions (erfinv, lgamma,
digamma, ndtr, entr, xlog1py), signbit, angle of real tensors, rrelu in eval mode, dist; take,
index_fill, embedding_bag. Each op is exported, run in tract against PyTorch at a named tolerance
level, with edge values (NaN, infinities, signed zeros, poles, large magnitudes) and dynamic axes
where the op allows them."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import OpCase, randint, randn, run_case

INF, NAN = float("inf"), float("nan")
F32 = randn(3, 7)
F16 = randn(3, 7, dtype=torch.float16, seed=1)
I64 = randint(-5, 6, 3, 7, seed=2)
DYN1 = {"x0": {1: "S"}}
DYN0 = {"x0": {0: "S"}}
SIGNED = torch.tensor([[-0.0, 0.0, NAN, INF, -INF, -1e-30, 1e-30, -3.0, 2.0, -1e30]])
# erfinv: the open interval in both tails, the poles and outside
ERFINV_X = torch.cat([torch.tensor([[1.0, -1.0, 1.5, -2.0, NAN, 0.0, -0.0, 0.9999999, -0.9999999, 1e-30, 0.5, -0.97]]),
                      torch.linspace(-0.999, 0.999, 12)[None]])
# gamma functions: poles (0, -0, negative integers), +-inf, NaN, tiny, large, near the roots of lgamma
GAMMA_X = torch.cat([torch.tensor([[0.0, -0.0, -1.0, -2.0, -2.5, INF, -INF, NAN, 1e-30, -1e-30, 1.0, 2.0, 1e30, 1e8]]),
                     torch.tensor([[-0.5, -7.3, -30.25, 0.5, 1.4616, 3.0, 7.9, 8.1, 0.01, 50.0, 171.5, 1234.5, -1e-3, 20.0]])])
ENTR_X = torch.tensor([[0.0, -1.0, INF, NAN, 0.5, 1e-30, 3.0, -0.0, 1.0, 1e30]])
XLOG1PY = (torch.tensor([[0.0, 0.0, 1.0, NAN, 2.0, -1.5, 0.0, 3.0, 1.0, -0.0]]),
           torch.tensor([[NAN, -1.0, -1.0, 0.0, INF, 0.5, 5.0, -0.5, 1e-20, 2.0]]))
W = randn(10, 4, seed=3)
BAG_IDX = torch.tensor([3, 1, 1, 9, 0, 4, 4, 2])


CASES = [
    # signbit
    OpCase("signbit_edges", torch.signbit, [SIGNED], dynamic_axes=DYN1),
    OpCase("signbit_int_method", lambda x: x.signbit(), [I64], dynamic_axes=DYN1, khronos=False),
    OpCase("signbit_f16", torch.signbit, [F16], khronos=False),
    # angle of real tensors
    OpCase("angle_real", torch.angle, [SIGNED], dynamic_axes=DYN1),
    OpCase("angle_int", torch.angle, [I64], khronos=False),
    # erfinv
    OpCase("erfinv_edges", torch.erfinv, [ERFINV_X], dynamic_axes=DYN1),
    OpCase("erfinv_special_method", lambda x: torch.special.erfinv(x) + x.erfinv(), [torch.rand(3, 7) * 2 - 1]),
    OpCase("erfinv_f16", torch.erfinv, [(torch.rand(3, 7, generator=torch.Generator().manual_seed(4)) * 1.9 - 0.95)
                                        .half()], khronos=False),
    OpCase("erfinv_int", torch.erfinv, [randint(-1, 2, 3, 7, seed=5)], khronos=False),
    # lgamma, digamma
    OpCase("lgamma_edges", torch.lgamma, [GAMMA_X], dynamic_axes=DYN1),
    OpCase("lgamma_gammaln_method", lambda x: torch.special.gammaln(x) - x.lgamma(), [F32 * 4]),
    OpCase("lgamma_f16", torch.lgamma, [F16.abs() * 4 + 0.1], khronos=False),
    OpCase("lgamma_int", torch.lgamma, [I64], khronos=False),
    # log1p at +inf (its rounding correction was inf / inf): also through xlog1py and logaddexp
    OpCase("log1p_inf", torch.log1p, [torch.tensor([[INF, -1.0, -INF, NAN, 1e-8, 3e38, 0.0, -0.5]])], dynamic_axes=DYN1),
    OpCase("digamma_edges", torch.digamma, [GAMMA_X], dynamic_axes=DYN1),
    OpCase("digamma_psi_method", lambda x: torch.special.psi(x) + x.digamma() + torch.special.digamma(x), [F32 * 4]),
    OpCase("digamma_large_negative", torch.digamma, [torch.tensor([[-1e6 - 0.5, -123.75, -0.999, -1e-6, 1e-6]])]),
    # ndtr, entr, xlog1py
    OpCase("ndtr", torch.special.ndtr, [torch.tensor([[-INF, INF, NAN, 0.0, -8.0, 8.0, 1.5, -1.5, -40.0, 0.3]])],
           dynamic_axes=DYN1),
    OpCase("entr", torch.special.entr, [ENTR_X], dynamic_axes=DYN1),
    OpCase("xlog1py_edges", torch.special.xlog1py, list(XLOG1PY), dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("xlog1py_scalar_other", lambda x: torch.special.xlog1py(x, 2.0), [F32]),
    # rrelu in eval mode, dist
    OpCase("rrelu_eval", lambda x: F.rrelu(x, 0.1, 0.3), [F32], dynamic_axes=DYN1),
    OpCase("rrelu_default", F.rrelu, [F32]),
    OpCase("dist_p2", torch.dist, [F32, randn(3, 7, seed=6)], dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("dist_p1_broadcast_method", lambda a, b: a.dist(b, 1), [F32, randn(7, seed=7)]),
    OpCase("dist_pinf", lambda a, b: torch.dist(a, b, INF), [F32, randn(3, 7, seed=8)]),
    # take
    OpCase("take_const", lambda x: torch.take(x, torch.tensor([[0, 20], [-1, 5]])), [F32], khronos=False),
    OpCase("take_input_index", lambda x, i: x.take(i), [F32, torch.tensor([3, -2, 0, 20, -21, 7])], khronos=False),
    OpCase("take_dyn", lambda x, i: torch.take(x, i), [F32, torch.tensor([[1, -1], [5, 0]])], khronos=False,
           dynamic_axes={"x0": {1: "S"}}),
    OpCase("take_dyn_index", lambda x, i: torch.take(x, i), [F32, torch.tensor([1, -1, 5, 0, 20])], khronos=False,
           dynamic_axes={"x1": {0: "N"}}),
    # index_fill
    OpCase("index_fill_const", lambda x: x.index_fill(1, torch.tensor([0, 2, -1]), -1.5), [F32], dynamic_axes=DYN1,
           khronos=False),
    OpCase("index_fill_input_index", lambda x, i: x.index_fill(1, i, 2.0), [F32, torch.tensor([4, 1, 4])],
           dynamic_axes=DYN1, khronos=False),
    OpCase("index_fill_tensor_value", lambda x, v: torch.index_fill(x, 0, torch.tensor([1]), v), [F32, randn(())],
           dynamic_axes=DYN1, khronos=False),
    OpCase("index_fill_int_inf", lambda x: x.index_fill(0, torch.tensor([2, 0]), 7), [I64], khronos=False),
    OpCase("index_fill_float_inf", lambda x: x.index_fill(-1, torch.tensor(3), -INF), [F32], khronos=False),
    OpCase("index_fill_inplace", lambda x: x.clone().index_fill_(1, torch.tensor([5]), 0.0), [F32], khronos=False),
    # embedding_bag
    OpCase("embedding_bag_2d_mean", lambda i, w: F.embedding_bag(i, w), [randint(0, 10, 3, 4, seed=9), W],
           dynamic_axes={"x0": {0: "B"}}, khronos=False),
    OpCase("embedding_bag_2d_sum_dyn_items", lambda i, w: F.embedding_bag(i, w, mode="sum"),
           [randint(0, 10, 3, 4, seed=10), W], dynamic_axes={"x0": {1: "N"}}, khronos=False),
    OpCase("embedding_bag_2d_max", lambda i, w: F.embedding_bag(i, w, mode="max"), [randint(0, 10, 3, 4, seed=11), W],
           khronos=False),
    OpCase("embedding_bag_2d_padding_mean", lambda i, w: F.embedding_bag(i, w, mode="mean", padding_idx=1),
           [torch.tensor([[1, 1, 1], [1, 2, 3], [4, 1, 4]]), W], khronos=False),
    OpCase("embedding_bag_2d_padding_max", lambda i, w: F.embedding_bag(i, w, mode="max", padding_idx=1),
           [torch.tensor([[1, 1, 1], [1, 2, 3], [4, 1, 4]]), W], khronos=False),
    OpCase("embedding_bag_2d_weights", lambda i, w, p: F.embedding_bag(i, w, mode="sum", per_sample_weights=p),
           [randint(0, 10, 3, 4, seed=12), W, randn(3, 4, seed=13)], khronos=False),
    OpCase("embedding_bag_offsets_sum", lambda i, o, w: F.embedding_bag(i, w, o, mode="sum"),
           [BAG_IDX, torch.tensor([0, 3, 3, 6]), W], khronos=False),
    OpCase("embedding_bag_offsets_mean_dyn", lambda i, o, w: F.embedding_bag(i, w, o),
           [BAG_IDX, torch.tensor([0, 2, 2, 5]), W], dynamic_axes={"x0": {0: "L"}, "x1": {0: "B"}}, khronos=False),
    OpCase("embedding_bag_offsets_max", lambda i, o, w: F.embedding_bag(i, w, o, mode="max"),
           [BAG_IDX, torch.tensor([0, 1, 1, 7]), W], khronos=False),
    OpCase("embedding_bag_offsets_last", lambda i, o, w: F.embedding_bag(i, w, o, mode="mean", include_last_offset=True),
           [BAG_IDX, torch.tensor([0, 3, 3, 8]), W], khronos=False),  # (the last offset is the input's length)
    OpCase("embedding_bag_offsets_padding_weights",
           lambda i, o, w, p: F.embedding_bag(i, w, o, mode="sum", padding_idx=4, per_sample_weights=p),
           [BAG_IDX, torch.tensor([0, 4]), W, randn(8, seed=14)], khronos=False),
    OpCase("embedding_bag_module", None, [BAG_IDX, torch.tensor([0, 5])], khronos=False,
           module=torch.nn.EmbeddingBag.from_pretrained(W, mode="max")),
    OpCase("embedding_bag_max_norm", lambda i, w: F.embedding_bag(i, w, max_norm=1.0), [randint(0, 10, 3, 4, seed=15), W],
           khronos=False),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


# ---- losses computed in forward ----------------------------------------------------------------------------------
LOGITS = randn(6, 5, seed=20) * 3
LOGITS_EDGE = torch.cat([torch.tensor([[80.0, -80.0, 0.0, 1e-3, -30.0]]), LOGITS[1:]])
TARGET = torch.tensor([0, 4, -100, 2, 2, 1])
TARGET_ALL_KEPT = torch.tensor([3, 4, 0, 2, 2, 1])
CLASS_W = torch.tensor([0.5, 1.0, 2.0, 0.25, 3.0])
PROBS = torch.softmax(randn(6, 5, seed=21), 1)
SPATIAL = randn(2, 5, 3, 4, seed=22)
SPATIAL_T = randint(0, 5, 2, 3, 4, seed=23)
SPATIAL_T[0, 0, :2] = -100
P01 = torch.cat([torch.tensor([[0.0, 1.0, 1e-7, 1 - 1e-7, 0.5]]), torch.rand(5, 5, generator=torch.Generator().manual_seed(24))])
BIN_T = torch.cat([torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.3]]), (torch.rand(5, 5, generator=torch.Generator().manual_seed(25)) > 0.5).float()])
SIGN_T = torch.where(randn(6, 5, seed=26) > 0, 1.0, -1.0)
DYN_N = {"x0": {0: "N"}, "x1": {0: "N"}}

LOSS_CASES = [
    OpCase("cross_entropy_ignore_mean", F.cross_entropy, [LOGITS_EDGE, TARGET], dynamic_axes=DYN_N),
    OpCase("cross_entropy_sum_none", lambda x, t: (F.cross_entropy(x, t, reduction="sum"),
                                                   F.cross_entropy(x, t, reduction="none")), [LOGITS, TARGET]),
    OpCase("cross_entropy_weight", lambda x, t: F.cross_entropy(x, t, weight=CLASS_W), [LOGITS, TARGET],
           dynamic_axes=DYN_N),
    OpCase("cross_entropy_smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2), [LOGITS, TARGET],
           dynamic_axes=DYN_N),
    OpCase("cross_entropy_smoothing_weight_all", lambda x, t: tuple(
        F.cross_entropy(x, t, weight=CLASS_W, label_smoothing=0.1, reduction=r) for r in ("mean", "sum", "none")),
        [LOGITS, TARGET]),
    OpCase("cross_entropy_ignore_index_other", lambda x, t: (F.cross_entropy(x, t, ignore_index=2),
                                                             F.cross_entropy(x, t, ignore_index=2, label_smoothing=0.1)),
           [LOGITS, TARGET_ALL_KEPT]),
    OpCase("cross_entropy_spatial", F.cross_entropy, [SPATIAL, SPATIAL_T],
           dynamic_axes={"x0": {2: "H"}, "x1": {1: "H"}}),
    OpCase("cross_entropy_probs", F.cross_entropy, [LOGITS, PROBS], dynamic_axes=DYN_N),
    OpCase("cross_entropy_probs_smoothing_weight", lambda x, p: F.cross_entropy(x, p, weight=CLASS_W, label_smoothing=0.3,
                                                                                  reduction="sum"), [LOGITS, PROBS]),
    OpCase("cross_entropy_1d", lambda x, t: F.cross_entropy(x, t), [LOGITS[0], torch.tensor(3)]),
    OpCase("cross_entropy_all_ignored_nan", F.cross_entropy, [LOGITS[:2], torch.tensor([-100, -100])]),
    OpCase("cross_entropy_module_lm_shift", None, [randn(2, 7, 5, seed=27), randint(0, 5, 2, 7, seed=28)],
           module=None),
    OpCase("nll_loss", lambda x, t: F.nll_loss(x.log_softmax(1), t), [LOGITS, TARGET], dynamic_axes=DYN_N),
    OpCase("nll_loss_weight_none", lambda x, t: F.nll_loss(x, t, weight=CLASS_W, reduction="none"), [LOGITS, TARGET]),
    OpCase("bce", F.binary_cross_entropy, [P01, BIN_T], dynamic_axes=DYN_N),
    OpCase("bce_weight_none", lambda x, t: F.binary_cross_entropy(x, t, weight=CLASS_W, reduction="none"), [P01, BIN_T]),
    OpCase("bce_logits", F.binary_cross_entropy_with_logits, [LOGITS_EDGE * 2, BIN_T], dynamic_axes=DYN_N),
    OpCase("bce_logits_pos_weight", lambda x, t: F.binary_cross_entropy_with_logits(
        x, t, weight=CLASS_W, pos_weight=torch.tensor([1.0, 2.0, 0.5, 3.0, 1.0]), reduction="sum"), [LOGITS_EDGE, BIN_T]),
    OpCase("bce_logits_module", None, [LOGITS_EDGE, BIN_T], module=torch.nn.BCEWithLogitsLoss(reduction="none")),
    OpCase("kl_div_batchmean", lambda x, t: F.kl_div(x.log_softmax(1), t, reduction="batchmean"),
           [LOGITS, torch.cat([torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.0]]), PROBS[1:]])], dynamic_axes=DYN_N),
    OpCase("kl_div_log_target", lambda x, t: F.kl_div(x.log_softmax(1), t.log(), reduction="sum", log_target=True),
           [LOGITS, PROBS]),
    OpCase("kl_div_none_mean", lambda x, t: (F.kl_div(x, t, reduction="none"), F.kl_div(x, t)), [LOGITS, PROBS]),
    OpCase("soft_margin", F.soft_margin_loss, [LOGITS, SIGN_T], dynamic_axes=DYN_N),
    OpCase("margin_ranking", lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3), [LOGITS, LOGITS.flip(0), SIGN_T],
           dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}, "x2": {0: "N"}}),
    OpCase("hinge_embedding", lambda x, y: F.hinge_embedding_loss(x, y, margin=2.0, reduction="none"), [LOGITS, SIGN_T]),
    OpCase("hinge_embedding_mean", F.hinge_embedding_loss, [LOGITS, SIGN_T], dynamic_axes=DYN_N),
    OpCase("cosine_embedding", lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.2),
           [LOGITS, PROBS, torch.tensor([1, -1, 1, -1, -1, 1])],
           dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}, "x2": {0: "N"}}),
    OpCase("cosine_embedding_1d_none", lambda a, b: F.cosine_embedding_loss(a, b, torch.tensor(-1), reduction="none"),
           [LOGITS[0], PROBS[0]]),
    OpCase("poisson_nll", F.poisson_nll_loss, [LOGITS, PROBS * 4], dynamic_axes=DYN_N),
    OpCase("poisson_nll_full_linear", lambda x, t: F.poisson_nll_loss(x, t, log_input=False, full=True, reduction="none"),
           [LOGITS.abs(), torch.cat([torch.tensor([[0.0, 1.0, 2.0, 7.0, 0.5]]), PROBS[1:] * 9])]),
    OpCase("gaussian_nll", F.gaussian_nll_loss, [LOGITS, PROBS, PROBS.flip(1)],
           dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}, "x2": {0: "N"}}),
    OpCase("gaussian_nll_var_one_axis_fewer_full", lambda x, t, v: F.gaussian_nll_loss(x, t, v, full=True, reduction="sum"),
           [LOGITS, PROBS, torch.tensor([1e-9, 0.5, 2.0, 1.0, 3.0, 0.1])]),
    OpCase("multilabel_soft_margin", F.multilabel_soft_margin_loss, [LOGITS_EDGE, BIN_T], dynamic_axes=DYN_N),
    OpCase("multilabel_soft_margin_weight", lambda x, t: F.multilabel_soft_margin_loss(x, t, weight=CLASS_W,
                                                                                         reduction="none"), [LOGITS, BIN_T]),
    OpCase("triplet_margin", F.triplet_margin_loss, [LOGITS, PROBS, LOGITS.flip(0)],
           dynamic_axes={"x0": {0: "N"}, "x1": {0: "N"}, "x2": {0: "N"}}),
    OpCase("triplet_margin_swap_p1", lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True,
                                                                            reduction="none"), [LOGITS, PROBS, -LOGITS]),
]


class _LMLoss(torch.nn.Module):
    """A causal LM's loss as transformers computes it: shift, flatten, cross entropy with -100 labels."""

    def forward(self, logits, labels):
        shift = logits[:, :-1].reshape(-1, logits.shape[-1])
        return F.cross_entropy(shift, labels[:, 1:].reshape(-1), ignore_index=-100)


LOSS_CASES[[c.name for c in LOSS_CASES].index("cross_entropy_module_lm_shift")] = OpCase(
    "cross_entropy_module_lm_shift", None, [randn(2, 7, 5, seed=27), torch.where(randint(0, 4, 2, 7, seed=29) == 0, -100,
                                                                                 randint(0, 5, 2, 7, seed=28))],
    module=_LMLoss(), dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}})


@pytest.mark.parametrize("case", LOSS_CASES, ids=str)
def test_losses_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in LOSS_CASES if c.name.startswith(("bce", "soft", "kl", "gauss", "triplet"))
                                  and c.dynamic_axes is None and c.module is None], ids=str)
def test_losses_khronos(case, tmp_path):
    """Losses of float operands only (standard NNEF compares no integer targets)."""
    run_case(case, tmp_path, "khronos")


@pytest.mark.parametrize("fn, inputs, match", [
    (lambda x: F.rrelu(x, training=True), [F32], "eval mode"),
    (lambda x, t: F.cross_entropy(x, t, reduce=False), [LOGITS, TARGET], "deprecated"),
    (lambda i, o, w: F.embedding_bag(i, w, o, include_last_offset=True), [BAG_IDX, torch.tensor([0, 3, 8]), W],
     "static number of offsets"),
], ids=["rrelu_training", "cross_entropy_reduce_arg", "embedding_bag_last_offset_dynamic_count"])
def test_refused(fn, inputs, match, tmp_path):
    dyn = {"x1": {0: "B"}} if len(inputs) == 3 else None
    with pytest.raises((fx2nnef.UnsupportedOpError, fx2nnef.TraceError), match=match):
        run_case(OpCase("refused", fn, inputs, dynamic_axes=dyn), tmp_path, "tract")
