"""Reductions: one-op modules exported and run in tract and nnef_tools."""
import math

import pytest
import torch

import fx2nnef
from harness import OpCase, randbool, randint, randn, run_case

F32 = randn(2, 3, 4)
F16 = randn(2, 3, 4, dtype=torch.float16, seed=1)
I64 = randint(-5, 6, 2, 3, 4)
I64_SMALL = randint(1, 4, 2, 3, 4, seed=2) * torch.where(randn(2, 3, 4, seed=3) > 0, 1, -1)
B = randbool(2, 3, 4)
NAN = torch.where(randn(2, 3, 4, seed=4) > 0.5, float("nan"), randn(2, 3, 4, seed=5))
DYN0 = {"x0": {0: "B"}}
DYN1 = {"x0": {1: "S"}}


def pair(result):
    """The two tensors of a (values, indices)-like result as a plain tuple."""
    return result[0], result[1]


CASES = [
    OpCase("sum_all", torch.sum, [F32]),
    OpCase("sum_dim", lambda x: x.sum(1), [F32]),
    OpCase("sum_dims_keep", lambda x: torch.sum(x, (0, 2), keepdim=True), [F32]),
    OpCase("sum_neg_dim", lambda x: x.sum(dim=-1), [F32], khronos=False),
    OpCase("sum_empty_dims", lambda x: x.sum(dim=[]), [F32], khronos=False),
    OpCase("sum_dtype", lambda x: x.sum(1, dtype=torch.float32), [F16], khronos=False),
    OpCase("sum_f16", lambda x: x.sum(-1), [F16], khronos=False),
    OpCase("sum_i64", lambda x: x.sum(2), [I64], khronos=False),
    OpCase("sum_bool", lambda x: x.sum(1), [B], khronos=False),
    OpCase("sum_bool_all", torch.sum, [B], khronos=False),
    OpCase("sum_dyn", lambda x: x.sum(1), [F32], dynamic_axes=DYN1),
    OpCase("nansum", lambda x: torch.nansum(x, 1), [NAN]),
    OpCase("mean_all", torch.mean, [F32]),
    OpCase("mean_dim_keep", lambda x: x.mean(-1, keepdim=True), [F32]),
    OpCase("mean_dims", lambda x: x.mean((0, 1)), [F32], khronos=False),
    OpCase("mean_f16", lambda x: x.mean(-1), [F16], khronos=False),
    OpCase("mean_dyn", lambda x: x.mean(1), [F32], dynamic_axes=DYN1),
    OpCase("prod", lambda x: torch.prod(x, 1), [F32]),
    OpCase("prod_all", torch.prod, [F32]),
    OpCase("prod_keep", lambda x: x.prod(2, keepdim=True), [F32], khronos=False),
    OpCase("prod_i64", lambda x: x.prod(1), [I64_SMALL], khronos=False),
    OpCase("amax", lambda x: torch.amax(x, (1, 2)), [F32]),
    OpCase("amax_all", torch.amax, [F32]),
    OpCase("amin_keep", lambda x: x.amin(0, keepdim=True), [F32], khronos=False),
    OpCase("amax_i64", lambda x: x.amax(1), [I64], khronos=False),
    OpCase("amax_bool", lambda x: x.amax(1), [B], khronos=False),
    OpCase("amin_bool", lambda x: x.amin(2), [B], khronos=False),
    OpCase("max_all", torch.max, [F32]),
    OpCase("min_all_method", lambda x: x.min(), [F32], khronos=False),
    OpCase("max_dim", lambda x: pair(torch.max(x, 1)), [F32]),
    OpCase("max_dim_values", lambda x: torch.max(x, 1)[0], [F32], khronos=False),
    OpCase("min_dim_keep", lambda x: pair(x.min(dim=-1, keepdim=True)), [F32]),
    OpCase("max_dim_i64", lambda x: pair(x.max(2)), [I64], khronos=False),
    OpCase("max_dim_bool", lambda x: pair(x.max(2)), [B], khronos=False),
    OpCase("max_binary", torch.max, [F32, randn(3, 4, seed=6)]),
    OpCase("min_binary_method", lambda x, y: x.min(y), [F32, randn(2, 3, 4, seed=7)], khronos=False),
    OpCase("max_dyn", lambda x: x.max(1)[1], [F32], dynamic_axes=DYN0),
    OpCase("argmax", lambda x: torch.argmax(x, 1), [F32]),
    OpCase("argmax_all", torch.argmax, [F32]),
    OpCase("argmax_all_keep", lambda x: x.argmax(keepdim=True), [F32], khronos=False),
    OpCase("argmin_keep", lambda x: x.argmin(-1, keepdim=True), [F32], khronos=False),
    OpCase("argmax_i64", lambda x: x.argmax(2), [I64], khronos=False),
    OpCase("var", lambda x: torch.var(x, 1), [F32]),
    OpCase("var_all", torch.var, [F32]),
    OpCase("var_biased", lambda x: x.var(-1, unbiased=False, keepdim=True), [F32]),
    OpCase("var_correction", lambda x: torch.var(x, (0, 2), correction=2), [F32]),
    OpCase("var_unbiased_positional", lambda x: x.var(False), [F32], khronos=False),
    OpCase("std", lambda x: torch.std(x, 2), [F32]),
    OpCase("std_keep", lambda x: x.std(dim=(1, 2), keepdim=True), [F32], khronos=False),
    OpCase("std_dyn", lambda x: x.std(1), [F32], dynamic_axes=DYN1),
    OpCase("var_mean", lambda x: pair(torch.var_mean(x, 1)), [F32]),
    OpCase("std_mean", lambda x: pair(torch.std_mean(x, -1, keepdim=True)), [F32]),
    OpCase("norm", torch.norm, [F32]),
    OpCase("norm_dim", lambda x: x.norm(dim=-1), [F32], khronos=False),
    OpCase("norm_p1", lambda x: torch.norm(x, p=1, dim=1), [F32]),
    OpCase("norm_p3", lambda x: torch.norm(x, p=3, dim=1, keepdim=True), [F32]),
    OpCase("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=(1, 2)), [F32]),
    OpCase("vector_norm_inf", lambda x: torch.linalg.vector_norm(x, ord=math.inf, dim=1), [F32]),
    OpCase("vector_norm_neg_inf", lambda x: torch.linalg.vector_norm(x, ord=-math.inf, dim=1), [F32], khronos=False),
    OpCase("vector_norm_0", lambda x: torch.linalg.vector_norm(x, ord=0, dim=2), [F32]),
    OpCase("linalg_norm", lambda x: torch.linalg.norm(x, dim=-1, keepdim=True), [F32], khronos=False),
    OpCase("linalg_norm_fro", lambda x: torch.linalg.norm(x, "fro", dim=(1, 2)), [F32]),
    OpCase("all", torch.all, [B]),
    OpCase("all_dim", lambda x: x.all(1), [B], khronos=False),
    OpCase("any_dim_keep", lambda x: torch.any(x, -1, keepdim=True), [B]),
    OpCase("any_float", lambda x: (x > 0.5).float().any(dim=1), [F32], khronos=False),
    OpCase("all_i64", lambda x: x.all(2), [I64], khronos=False),
    OpCase("logsumexp", lambda x: torch.logsumexp(x, 1), [F32]),
    OpCase("logsumexp_keep", lambda x: x.logsumexp((1, 2), keepdim=True), [F32], khronos=False),
    OpCase("logsumexp_big", lambda x: torch.logsumexp(x * 100, -1), [F32]),
    OpCase("count_nonzero", lambda x: torch.count_nonzero(x, 1), [I64], khronos=False),
    OpCase("count_nonzero_all", lambda x: (x > 0).count_nonzero(), [F32], khronos=False),
    OpCase("cumsum", lambda x: torch.cumsum(x, 1), [F32]),
    OpCase("cumsum_last", lambda x: x.cumsum(-1), [F32]),
    OpCase("cumsum_first", lambda x: x.cumsum(0), [F32]),
    OpCase("cumsum_i64", lambda x: x.cumsum(1), [I64], khronos=False),
    OpCase("cumsum_bool", lambda x: x.cumsum(2), [B], khronos=False),
    OpCase("cumsum_dtype", lambda x: x.cumsum(2, dtype=torch.float32), [I64], khronos=False),
    OpCase("cumsum_dyn", lambda x: x.cumsum(1), [F32], dynamic_axes=DYN1),
    # isin: against a constant list, a tensor input, inverted; ids of a dynamic length
    OpCase("isin_const_dyn", lambda x: torch.isin(x, torch.tensor([3, 5, 8])), [randint(0, 10, 2, 9)],
           dynamic_axes=DYN1, khronos=False),
    OpCase("isin_tensor_invert", lambda x, t: torch.isin(x, t, invert=True), [randint(0, 6, 3, 4), randint(0, 6, 2, 2)],
           khronos=False),
    OpCase("isin_scalar_overloads", lambda x: (torch.isin(x, 3), torch.isin(x, test_element=5, invert=True)),
           [randint(0, 7, 2, 5)], dynamic_axes=DYN1, khronos=False),
    OpCase("isin_float", lambda x: torch.isin(x.round(), torch.tensor([0.0, 1.0])).float() * x, [F32]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_tract(case, tmp_path):
    run_case(case, tmp_path, "tract")


@pytest.mark.parametrize("case", [c for c in CASES if c.khronos], ids=str)
def test_khronos(case, tmp_path):
    run_case(case, tmp_path, "khronos")


@pytest.mark.parametrize("fn", [
    lambda x: torch.linalg.norm(x[0], ord=2),
    lambda x: torch.norm(x, p="nuc", dim=(1, 2)),
], ids=["linalg_matrix_2", "nuclear"])
def test_matrix_norms_are_refused(fn, tmp_path):
    with pytest.raises(fx2nnef.UnsupportedOpError, match="matrix norm"):
        run_case(OpCase("matrix_norm", fn, [F32]), tmp_path, "tract")


def test_cumsum_dynamic_axis_khronos_is_refused(tmp_path):
    """The Khronos lowering needs a static axis; tract's cumsum does not (checked above)."""
    from fx2nnef.nnef_emit import emit_graph
    from fx2nnef.fx_tracer.capture import capture
    from harness import FnModule

    cap = capture(FnModule(lambda x: x.cumsum(1)), (F32,), {}, target=fx2nnef.TractNNEF(dynamic_axes=DYN1),
                  input_names=["x0"])
    with pytest.raises(fx2nnef.UnsupportedOpError, match="dynamic size"):
        emit_graph(cap.graph, "khronos")
