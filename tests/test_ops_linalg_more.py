"""Batch 5 of op lowerings (ops/linalg_more.py): mv, dot, vdot, inner, addmv, addr, addbmm, tensordot,
kron, multi_dot / chain_matmul, vecdot, linalg.matmul, trace, matrix_norm, det, cumulative_trapezoid,
cov, corrcoef, cartesian_prod, block_diag, vander, renorm; bincount is refused. Each op is exported,
run in tract (and in nnef_tools where its lowering is common) and compared with PyTorch."""
import pytest
import torch
import torch.nn.functional as F

import fx2nnef
from harness import FnModule, OpCase, check_op, randint, randn, run_case, tract_matches_eager

INF = float("inf")
M = randn(4, 3)
V3 = randn(3, seed=1)
V4 = randn(4, seed=2)
I32 = randint(-5, 6, 4, 3, dtype=torch.int32, seed=3)
IV3 = randint(-5, 6, 3, dtype=torch.int32, seed=4)
SQ = randn(2, 4, 4, seed=5)
NAN4 = torch.tensor([float("nan"), 1.0, 2.0, 3.0])
DYN0 = {"x0": {0: "S"}}


def det_input(n, seed):
    """Well-conditioned matrices (a random matrix plus n on the diagonal) in batches of 3."""
    return randn(3, n, n, seed=seed) + n * torch.eye(n)


CASES = [
    # matrix-vector and vector products
    OpCase("mv", torch.mv, [M, V3]),
    OpCase("mv_method", lambda a, v: a.mv(v), [M, V3]),
    OpCase("mv_int", torch.mv, [I32, IV3], khronos=False),
    OpCase("mv_dyn", torch.mv, [M, V3], dynamic_axes=DYN0),
    OpCase("dot", torch.dot, [V4, randn(4, seed=6)]),
    OpCase("dot_method_int", lambda a, b: a.dot(b), [IV3, IV3.flip(0)], khronos=False),
    OpCase("dot_dyn", torch.dot, [V4, randn(4, seed=6)], dynamic_axes={"x0": {0: "S"}, "x1": {0: "S"}}),
    OpCase("vdot", lambda a, b: torch.vdot(a, b) + a.vdot(b), [V4, randn(4, seed=7)]),
    OpCase("inner", torch.inner, [randn(2, 5), randn(3, 2, 5, seed=8)]),
    OpCase("inner_vectors", lambda a, b: a.inner(b), [V4, randn(4, seed=9)]),
    OpCase("inner_scalar", torch.inner, [randn(2, 5), torch.tensor(1.5)]),
    OpCase("linalg_vecdot", torch.linalg.vecdot, [randn(2, 5), randn(3, 1, 5, seed=10)]),
    OpCase("linalg_vecdot_dim0", lambda a, b: torch.linalg.vecdot(a, b, dim=0), [randn(5, 3), randn(5, 3, seed=11)]),
    OpCase("linalg_matmul", torch.linalg.matmul, [randn(2, 4, 5), randn(5, 3, seed=12)]),
    # products added to a tensor
    OpCase("addmv", lambda c, a, v: torch.addmv(c, a, v, beta=0.5, alpha=2), [V4, M, V3]),
    OpCase("addmv_beta0_nan", lambda c, a, v: c.addmv(a, v, beta=0), [NAN4, M, V3]),
    OpCase("addmv_broadcast", torch.addmv, [torch.tensor([0.25]), M, V3]),
    OpCase("addmv_int", lambda c, a, v: torch.addmv(c, a, v, alpha=3), [randint(-3, 3, 4, dtype=torch.int32), I32, IV3],
           khronos=False),
    OpCase("addr", torch.addr, [M, V4, V3]),
    OpCase("addr_scaled", lambda c, a, b: c.addr(a, b, beta=-1, alpha=0.5), [M, V4, V3]),
    OpCase("addr_int", lambda c, a, b: torch.addr(c, a, b, alpha=2), [I32, randint(-3, 3, 4, dtype=torch.int32), IV3],
           khronos=False),
    OpCase("addbmm", torch.addbmm, [randn(3, 4), randn(2, 3, 5, seed=13), randn(2, 5, 4, seed=14)]),
    OpCase("addbmm_scaled", lambda c, a, b: c.addbmm(a, b, beta=2, alpha=-0.5),
           [randn(1, 4), randn(2, 3, 5, seed=13), randn(2, 5, 4, seed=14)]),
    OpCase("addbmm_dyn_batch", torch.addbmm, [randn(3, 4), randn(2, 3, 5, seed=13), randn(2, 5, 4, seed=14)],
           dynamic_axes={"x1": {0: "B"}, "x2": {0: "B"}}),
    # tensordot, kron, chains
    OpCase("tensordot_lists", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), [randn(2, 3, 4), randn(3, 4, 5, seed=15)]),
    OpCase("tensordot_int_dims", lambda a, b: torch.tensordot(a, b, dims=1), [randn(2, 3, 4), randn(4, 5, seed=16)]),
    OpCase("tensordot_default", torch.tensordot, [randn(2, 3, 4), randn(3, 4, 5, seed=17)]),
    OpCase("tensordot_unordered", lambda a, b: torch.tensordot(a, b, dims=([2, 0], [0, 2])), [randn(2, 3, 4), randn(4, 5, 2, seed=18)]),
    OpCase("tensordot_outer", lambda a, b: torch.tensordot(a, b, dims=0), [randn(2, 3), randn(4, seed=19)]),
    OpCase("tensordot_int", lambda a, b: torch.tensordot(a, b, dims=1), [I32, I32.t().contiguous()], khronos=False),
    OpCase("tensordot_dyn", lambda a, b: torch.tensordot(a, b, dims=([2], [0])), [randn(2, 3, 4), randn(4, 5, seed=20)],
           dynamic_axes={"x0": {1: "S"}}),
    OpCase("kron", torch.kron, [randn(2, 3), randn(3, 2, seed=21)]),
    OpCase("kron_ranks", lambda a, b: a.kron(b), [randn(2, 1, 3), randn(3, 2, seed=22)]),
    OpCase("kron_int", torch.kron, [I32, randint(-2, 3, 2, 2, dtype=torch.int32, seed=23)], khronos=False),
    OpCase("kron_dyn", torch.kron, [randn(2, 3), randn(3, 2, seed=21)], dynamic_axes=DYN0),
    OpCase("multi_dot", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), [randn(2, 3), randn(3, 4, seed=24), randn(4, 2, seed=25)]),
    OpCase("multi_dot_vectors", lambda a, b, c, d: torch.linalg.multi_dot([a, b, c, d]),
           [V3, randn(3, 4, seed=26), randn(4, 5, seed=27), randn(5, seed=28)]),
    OpCase("chain_matmul", lambda a, b, c: torch.chain_matmul(a, b, c), [randn(2, 3), randn(3, 4, seed=24), randn(4, 2, seed=25)]),
    # trace, norms, determinant
    OpCase("trace", torch.trace, [randn(4, 4)]),
    OpCase("trace_rect_method", lambda a: a.trace(), [randn(3, 5)]),
    OpCase("trace_int", torch.trace, [I32], khronos=False),
    OpCase("trace_dyn", torch.trace, [randn(4, 4)], dynamic_axes={"x0": {0: "S", 1: "S"}}),
    OpCase("matrix_norm_fro", torch.linalg.matrix_norm, [SQ]),
    OpCase("matrix_norm_1", lambda a: torch.linalg.matrix_norm(a, 1), [randn(2, 3, 5)]),
    OpCase("matrix_norm_neg1", lambda a: torch.linalg.matrix_norm(a, -1), [randn(2, 3, 5)]),
    OpCase("matrix_norm_inf", lambda a: torch.linalg.matrix_norm(a, INF), [randn(2, 3, 5)]),
    OpCase("matrix_norm_neginf_keepdim", lambda a: torch.linalg.matrix_norm(a, -INF, keepdim=True), [randn(2, 3, 5)]),
    OpCase("matrix_norm_dims", lambda a: torch.linalg.matrix_norm(a, 1, dim=(2, 0)), [randn(2, 3, 5)]),
    OpCase("matrix_norm_dyn", lambda a: torch.linalg.matrix_norm(a, INF), [randn(2, 3, 5)],
           dynamic_axes={"x0": {0: "B", 2: "S"}}),
    OpCase("linalg_norm_matrix_ord", lambda a: torch.linalg.norm(a, 1, dim=(1, 2)), [randn(2, 3, 5)]),
    OpCase("det_1", torch.linalg.det, [det_input(1, 29)]),
    OpCase("det_2", torch.linalg.det, [det_input(2, 30)]),
    OpCase("det_3", torch.det, [det_input(3, 31)]),
    OpCase("det_4_method", lambda a: a.det(), [det_input(4, 32)]),
    OpCase("det_singular", torch.linalg.det, [torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])]),
    OpCase("det_dyn_batch", torch.linalg.det, [det_input(3, 33)], dynamic_axes=DYN0),
    # integrals, statistics
    OpCase("cumulative_trapezoid", torch.cumulative_trapezoid, [randn(3, 6)]),
    OpCase("cumulative_trapezoid_dx_dim", lambda y: torch.cumulative_trapezoid(y, dx=0.25, dim=0), [randn(5, 3)]),
    OpCase("cumulative_trapezoid_x", lambda y, x: torch.cumulative_trapezoid(y, x), [randn(3, 6), randn(6, seed=34).cumsum(0)]),
    OpCase("cumulative_trapezoid_int", torch.cumulative_trapezoid, [randint(-5, 6, 2, 5)], khronos=False),
    OpCase("cumulative_trapezoid_dyn", torch.cumulative_trapezoid, [randn(3, 6)], dynamic_axes={"x0": {1: "S"}},
           khronos=False),
    OpCase("cov", torch.cov, [randn(3, 8)]),
    OpCase("cov_vector", lambda a: a.cov(), [randn(8)]),
    OpCase("cov_correction0", lambda a: torch.cov(a, correction=0), [randn(3, 8)]),
    OpCase("cov_weights", lambda a: torch.cov(a, fweights=torch.tensor([1, 2, 1, 3, 1, 1, 2, 1]),
                                              aweights=torch.linspace(0.1, 1.0, 8)), [randn(3, 8)]),
    OpCase("cov_fweights_correction2", lambda a: torch.cov(a, correction=2, fweights=torch.tensor([1, 2, 1, 3, 1, 1, 2, 1])),
           [randn(3, 8)]),
    OpCase("cov_int", torch.cov, [randint(-5, 6, 2, 7)], khronos=False),
    OpCase("cov_dyn", torch.cov, [randn(3, 8)], dynamic_axes={"x0": {1: "N"}}),
    OpCase("corrcoef", torch.corrcoef, [randn(3, 8)]),
    OpCase("corrcoef_method_vector", lambda a: a.corrcoef(), [randn(8)]),
    OpCase("corrcoef_dyn", torch.corrcoef, [randn(3, 8)], dynamic_axes={"x0": {1: "N"}}),
    # building matrices
    OpCase("cartesian_prod", torch.cartesian_prod, [randn(3), randn(2, seed=35)]),
    OpCase("cartesian_prod_three", torch.cartesian_prod, [randn(3), randn(2, seed=35), randn(4, seed=36)]),
    OpCase("cartesian_prod_int_dyn", torch.cartesian_prod, [randint(0, 9, 3), randint(0, 9, 2, seed=37)], khronos=False,
           dynamic_axes={"x0": {0: "S"}}),
    OpCase("block_diag", torch.block_diag, [randn(2, 2), randn(1, 3, seed=38)]),
    OpCase("block_diag_mixed", lambda a, b, c: torch.block_diag(a, b, c), [torch.tensor(2.5), randn(3, seed=39), randn(2, 2, seed=40)]),
    OpCase("block_diag_int", torch.block_diag, [I32, randint(0, 5, 2, 2, seed=41)], khronos=False),
    OpCase("block_diag_dyn", torch.block_diag, [randn(2, 2), randn(3, 4, seed=42)], dynamic_axes={"x1": {0: "S"}}),
    OpCase("vander", torch.vander, [randn(4)]),
    OpCase("vander_n_increasing", lambda x: torch.vander(x, N=5, increasing=True), [randn(4)]),
    OpCase("vander_int", lambda x: torch.vander(x, 3), [randint(-4, 5, 4, dtype=torch.int32)], khronos=False),
    OpCase("vander_dyn", lambda x: torch.vander(x, N=3), [randn(4)], dynamic_axes=DYN0),
    OpCase("linalg_vander", lambda x: torch.linalg.vander(x, N=4), [randn(2, 3)]),
    OpCase("renorm", lambda a: torch.renorm(a, 2, 0, 1.0), [randn(3, 4) * 2]),
    OpCase("renorm_p1_dim1", lambda a: a.renorm(1, 1, 2.5), [randn(2, 3, 4)]),
    OpCase("renorm_dyn", lambda a: torch.renorm(a, 3, -1, 1.5), [randn(2, 3, 4)], dynamic_axes={"x0": {1: "S"}}),
]


@pytest.mark.parametrize("fn, inputs, dyn, sizes", [
    (torch.mv, [M, V3], DYN0, [[(1, 3), (3,)], [(9, 3), (3,)]]),
    (lambda a, b: torch.tensordot(a, b, dims=([2], [0])), [randn(2, 3, 4), randn(4, 5)], {"x0": {1: "S"}},
     [[(2, 1, 4), (4, 5)], [(2, 7, 4), (4, 5)]]),
    (torch.addbmm, [randn(3, 4), randn(2, 3, 5), randn(2, 5, 4)], {"x1": {0: "B"}, "x2": {0: "B"}},
     [[(3, 4), (1, 3, 5), (1, 5, 4)], [(3, 4), (6, 3, 5), (6, 5, 4)]]),
    (torch.kron, [randn(2, 3), randn(3, 2)], DYN0, [[(1, 3), (3, 2)], [(5, 3), (3, 2)]]),
    (torch.trace, [randn(4, 4)], {"x0": {0: "S", 1: "S"}}, [[(1, 1)], [(7, 7)]]),
    (lambda a: torch.linalg.matrix_norm(a, INF), [randn(2, 3, 5)], {"x0": {0: "B", 2: "S"}},
     [[(1, 3, 1)], [(4, 3, 9)]]),
    (torch.linalg.det, [det_input(3, 1)], DYN0, [[(1, 3, 3)], [(6, 3, 3)]]),
    (torch.cumulative_trapezoid, [randn(3, 6)], {"x0": {1: "S"}}, [[(3, 2)], [(3, 11)]]),
    (torch.cov, [randn(3, 8)], {"x0": {1: "N"}}, [[(3, 3)], [(3, 20)]]),
    (torch.corrcoef, [randn(3, 8)], {"x0": {1: "N"}}, [[(3, 4)], [(3, 20)]]),
    (torch.cartesian_prod, [randn(3), randn(2)], DYN0, [[(1,), (2,)], [(6,), (2,)]]),
    (torch.block_diag, [randn(2, 2), randn(3, 4)], {"x1": {0: "S"}}, [[(2, 2), (1, 4)], [(2, 2), (6, 4)]]),
    (lambda x: torch.vander(x, N=3), [randn(4)], DYN0, [[(1,)], [(9,)]]),
    (lambda a: torch.renorm(a, 3, -1, 1.5), [randn(2, 3, 4)], {"x0": {1: "S"}}, [[(2, 1, 4)], [(2, 8, 4)]]),
], ids=["mv", "tensordot", "addbmm", "kron", "trace", "matrix_norm", "det", "cumulative_trapezoid", "cov", "corrcoef",
        "cartesian_prod", "block_diag", "vander", "renorm"])
def test_dynamic_sizes(fn, inputs, dyn, sizes, tmp_path):
    """Exported with dynamic sizes, then run in tract at other sizes and compared with PyTorch."""
    result = check_op(fn, inputs, tmp_path, dynamic_axes=dyn)
    sets = [[randn(*s, seed=10 + k + j) + (3 * torch.eye(s[-1]) if fn is torch.linalg.det else 0)
             for j, s in enumerate(shape_set)] for k, shape_set in enumerate(sizes)]
    tract_matches_eager(result.path, FnModule(fn), sets)


@pytest.mark.parametrize("fn, inputs, dyn, match", [
    (lambda a: torch.linalg.matrix_norm(a, "nuc"), [SQ], None, "SVD"),
    (lambda a: torch.linalg.matrix_norm(a, 2), [SQ], None, "SVD"),
    (lambda a: torch.linalg.norm(a, -2, dim=(1, 2)), [SQ], None, "SVD"),
    (torch.linalg.det, [det_input(5, 43)], None, "5x5"),
    (torch.linalg.det, [det_input(3, 44)], {"x0": {1: "N", 2: "N"}}, "static"),
    (lambda x: torch.bincount(x, minlength=6), [randint(0, 5, 9)], None, "depends on the values"),
    (lambda x, w: torch.bincount(x, w), [randint(0, 5, 9), randn(9)], None, "scatter_add"),
    (lambda x: torch.vander(x), [randn(4)], DYN0, "N as an int"),
], ids=["matrix_norm_nuc", "matrix_norm_2", "linalg_norm_-2", "det_5x5", "det_dynamic_n", "bincount",
        "bincount_weights", "vander_dynamic_columns"])
def test_refused(fn, inputs, dyn, match, tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match=match):
        run_case(OpCase("refused", fn, inputs, dynamic_axes=dyn), tmp_path, "tract")


@pytest.mark.parametrize("fn", [
    lambda x: torch.zeros(6, dtype=torch.int64).scatter_add(0, x, torch.ones_like(x)),
    lambda x: F.one_hot(x, 6).sum(0),
], ids=["scatter_add", "one_hot"])
def test_bincount_fixed_length_forms_export(fn, tmp_path):
    """The fixed-length counts the bincount refusal suggests export and match torch.bincount."""
    x = randint(0, 6, 9)
    assert torch.equal(fn(x), torch.bincount(x, minlength=6))
    check_op(fn, [x], tmp_path)


# ---- more ops models use (ops/common_more.py) ----------------------------------------------------------------------
A = randn(2, 3, 4)
B = randn(2, 3, 4, seed=50)
ZERO_ROW = torch.cat([torch.zeros(1, 4), randn(2, 4, seed=51)])
WITH_NAN = torch.tensor([[float("nan"), 1.0, -2.0, float("nan")], [0.5, float("nan"), 3.0, -1.0]])
OTHER_NAN = torch.tensor([[2.0, float("nan"), -3.0, float("nan")], [0.25, 4.0, float("nan"), -1.0]])
IMG = randn(1, 6, 4, 5, seed=52)

MORE_CASES = [
    OpCase("cosine_similarity", F.cosine_similarity, [A, B]),
    OpCase("cosine_similarity_last_broadcast", lambda a, b: torch.cosine_similarity(a, b, dim=-1), [A, randn(4, seed=53)]),
    OpCase("cosine_similarity_zero_vector", lambda a, b: F.cosine_similarity(a, b, dim=1, eps=1e-6), [ZERO_ROW, ZERO_ROW.flip(0)]),
    OpCase("cosine_similarity_dyn", lambda a, b: F.cosine_similarity(a, b, dim=-1), [A, B],
           dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
    OpCase("pairwise_distance", F.pairwise_distance, [randn(5, 4), randn(5, 4, seed=54)]),
    OpCase("pairwise_distance_p1_keepdim", lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True), [randn(5, 4), randn(4, seed=55)]),
    OpCase("pairwise_distance_module", None, [randn(5, 4), randn(5, 4, seed=56)], module=torch.nn.PairwiseDistance(p=3)),
    OpCase("bilinear", None, [randn(2, 5, 3), randn(2, 5, 4, seed=57)], module=torch.nn.Bilinear(3, 4, 6)),
    OpCase("bilinear_no_bias", lambda a, b: F.bilinear(a, b, randn(2, 3, 4, seed=58)), [randn(5, 3), randn(5, 4, seed=59)]),
    OpCase("divide", lambda a, b: torch.divide(a, b) + a.divide(b, rounding_mode="floor"), [A, B.abs() + 0.5]),
    OpCase("divide_int_trunc", lambda a, b: torch.divide(a, b, rounding_mode="trunc"),
           [randint(-9, 10, 2, 5), randint(1, 4, 2, 5, seed=60)], khronos=False),
    OpCase("rsub", lambda a, b: torch.rsub(a, b, alpha=2) + torch.rsub(a, 1.5), [A, B]),
    OpCase("arc_aliases", lambda a: torch.arccos(a) + a.arcsin() + torch.arctan(a) + a.arctanh() + torch.absolute(a),
           [A.clamp(-0.9, 0.9)]),
    OpCase("arc_aliases_hyperbolic", lambda a: torch.arccosh(a) + a.arcsinh() + a.absolute(), [A.abs() + 1.1]),
    OpCase("expit", torch.special.expit, [A]),
    OpCase("broadcast_tensors", lambda a, b: torch.broadcast_tensors(a, b), [randn(2, 1, 4), randn(3, 1, seed=61)]),
    OpCase("broadcast_tensors_dyn", lambda a, b: torch.broadcast_tensors(a, b)[1], [randn(2, 3, 4), randn(4, seed=62)],
           dynamic_axes={"x0": {1: "S"}}),
    OpCase("ravel", lambda a: a.ravel() * 2 + torch.ravel(a.transpose(1, 2)), [A]),
    OpCase("softmin", lambda a: F.softmin(a, dim=1), [A]),
    OpCase("softmin_module", None, [A], module=torch.nn.Softmin(dim=-1)),
    OpCase("fmax_fmin_nan", lambda a, b: torch.stack([torch.fmax(a, b), a.fmin(b)]), [WITH_NAN, OTHER_NAN], khronos=False),
    OpCase("fmax_int", torch.fmax, [randint(-5, 5, 2, 4), randint(-5, 5, 2, 4, seed=63)], khronos=False),
    OpCase("deg2rad_rad2deg", lambda a: torch.deg2rad(a) + a.rad2deg(), [A]),
    OpCase("deg2rad_int", torch.deg2rad, [randint(-180, 180, 2, 4)], khronos=False),
    OpCase("aminmax", lambda a: torch.aminmax(a), [A]),
    OpCase("aminmax_dim", lambda a: a.aminmax(dim=1, keepdim=True), [A]),
    OpCase("channel_shuffle", None, [IMG], module=torch.nn.ChannelShuffle(3)),
    OpCase("channel_shuffle_dyn", lambda x: F.channel_shuffle(x, 2), [IMG], dynamic_axes={"x0": {2: "H", 3: "W"}}),
    OpCase("lp_pool1d", lambda x: F.lp_pool1d(x, 2, 2), [randn(1, 3, 8)]),
    OpCase("lp_pool2d_module", None, [IMG], module=torch.nn.LPPool2d(3, (2, 2), stride=1)),
    OpCase("msort", torch.msort, [A], khronos=False),
    OpCase("diagflat", lambda a: torch.diagflat(a[0, :2], 1), [A]),
    OpCase("adjoint", lambda a: a.adjoint() + torch.adjoint(a)[0], [A]),
    OpCase("conj_real", lambda a: a.conj() + a.resolve_conj() + torch.resolve_neg(a) + a.conj_physical(), [A]),
    OpCase("matrix_power", lambda a: torch.linalg.matrix_power(a, 5), [randn(2, 3, 3) * 0.5]),
    OpCase("matrix_power_0_1", lambda a: torch.matrix_power(a, 0) + a.matrix_power(1), [randn(2, 3, 3)]),
    OpCase("constant_pad_nd", lambda a: torch.constant_pad_nd(a, [1, 2, 0, 1], 0.5), [A]),
    OpCase("embedding_builtin", lambda i: torch.embedding(randn(6, 3, seed=64), i), [randint(0, 6, 2, 4)]),
    OpCase("linalg_diagonal", lambda a: torch.linalg.diagonal(a, offset=1), [A]),
    OpCase("mse_loss", F.mse_loss, [A, B]),
    OpCase("mse_loss_sum_broadcast", lambda a, b: F.mse_loss(a, b, reduction="sum"), [A, randn(4, seed=65)]),
    OpCase("l1_loss_none", lambda a, b: F.l1_loss(a, b, reduction="none"), [A, B]),
    OpCase("smooth_l1_loss", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), [A * 2, B]),
    OpCase("smooth_l1_loss_beta0", lambda a, b: F.smooth_l1_loss(a, b, beta=0.0, reduction="sum"), [A, B]),
    OpCase("huber_loss_module", None, [A * 2, B], module=torch.nn.HuberLoss(delta=0.7)),
    OpCase("mse_loss_dyn", F.mse_loss, [A, B], dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}}),
]


@pytest.mark.parametrize("case", CASES + MORE_CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES + MORE_CASES if c.khronos and not c.dynamic_axes], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


def test_more_dynamic_sizes(tmp_path):
    """cosine_similarity and channel_shuffle exported with dynamic sizes, run in tract at others."""
    fn = lambda a, b: F.cosine_similarity(a, b, dim=-1)  # noqa: E731
    (tmp_path / "cos").mkdir()
    (tmp_path / "shuffle").mkdir()
    result = check_op(fn, [A, B], tmp_path / "cos", dynamic_axes={"x0": {1: "S"}, "x1": {1: "S"}})
    tract_matches_eager(result.path, FnModule(fn), [[randn(2, 1, 4), randn(2, 1, 4, seed=1)],
                                                     [randn(2, 9, 4, seed=2), randn(2, 9, 4, seed=3)]])
    shuffle = lambda x: F.channel_shuffle(x, 2)  # noqa: E731
    result = check_op(shuffle, [IMG], tmp_path / "shuffle", dynamic_axes={"x0": {2: "H", 3: "W"}})
    tract_matches_eager(result.path, FnModule(shuffle), [[randn(1, 6, 1, 7)], [randn(1, 6, 9, 3, seed=4)]])


def test_matrix_power_negative_is_refused(tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match="inverse"):
        run_case(OpCase("refused", lambda a: torch.linalg.matrix_power(a, -2), [randn(3, 3)]), tmp_path, "tract")
