"""Patterns of time-series, video and dual-encoder models (benchmarks/survey_more_models.py), exported
with dynamic axes and checked in tract at the example and at other sizes."""
from __future__ import annotations

import pytest
import torch

import fx2nnef
from harness import FnModule, randn, tract_matches_eager


def _export(fn, inputs, tmp_path, names, axes, **params):
    r = fx2nnef.export(FnModule(fn, **params), tuple(inputs), tmp_path / "m.nnef.tgz", input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=axes))
    sizes = {label for label, _ in r.check.cases}
    assert r.check.ok and len(sizes) >= 3, sizes  # the example and one size below and one above it
    return r


def test_linear_of_a_concatenation_of_broadcast_statistics_of_rank_4(tmp_path):
    """PatchTSMixer's scale injection: the series' mean and std per channel, repeated over the patches,
    concatenated and mapped by a linear, on a rank-4 [B, C, patches, 2] input (flattened to a matrix
    before the product); before: tract failed to load it ("Trying to substitute a B,3,4,4,F32 by
    B,3,1,4,F32 ... concat-einsum"), the concatenation hidden behind the flattening reshape."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 4)

    def f(self, x):  # x: [B, L, C]
        loc = x.mean(1, keepdim=True).transpose(1, 2)  # [B, C, 1]
        scale = x.std(1, keepdim=True).transpose(1, 2)
        loc = loc.unsqueeze(-2).repeat(1, 1, 4, 1)  # [B, C, 4, 1]
        scale = scale.unsqueeze(-2).repeat(1, 1, 4, 1)
        return self.lin(torch.cat([loc, scale], dim=-1))

    _export(f, [randn(2, 16, 3)], tmp_path, ["x"], {"x": {0: "B"}}, lin=lin)


def test_rows_written_back_at_batched_top_k_positions(tmp_path):
    """Informer's ProbSparse attention: the top-u queries per row (topk, unsorted), their outputs
    written back into a context at ``[arange(b)[:, None], top]``; before: refused ("item assignment with
    a tensor index is supported along one axis"), now a scatter at the broadcast indices, for every B."""

    def f(q):  # q: [B, L, D]
        n = q.size(0)
        top = (q * q).sum(-1).topk(3, sorted=False)[1]  # [B, 3]
        rows = torch.arange(n).unsqueeze(-1)
        context = q.mean(1, keepdim=True).expand(n, q.size(1), q.size(2)).clone()
        context[rows, top, :] = q[rows, top] * 2.0 + 1.0
        return context

    _export(f, [randn(2, 8, 4)], tmp_path, ["q"], {"q": {0: "B"}})


def test_item_assignment_with_index_tensors_on_middle_axes(tmp_path):
    """``x[:, i, j] = v`` with broadcast index tensors on two adjacent axes after a full slice (one
    negative index): the indexed axes moved in front for the scatter, moved back after it."""
    i = torch.tensor([[0], [2]])
    j = torch.tensor([[1, -1]])

    def f(self, x, v):  # x: [B, 3, 5, 4], v: [B, 2, 2, 4]
        y = x.clone()
        y[:, self.i, self.j] = v
        return y

    _export(f, [randn(2, 3, 5, 4), randn(2, 2, 2, 4, seed=1)], tmp_path, ["x", "v"],
            {"x": {0: "B"}, "v": {0: "B"}}, i=i, j=j)


def test_text_tower_pools_at_the_first_eos_position(tmp_path):
    """CLIP's text pooling: the hidden state at ``(ids == eos).int().argmax(-1)``, the first eos of each
    row; rows with several eos tokens and rows with none (argmax of all zeros: position 0) must pick
    what torch picks (its first maximum), at every B and S."""
    ids = torch.tensor([[5, 7, 2, 9, 2, 2], [2, 5, 5, 2, 6, 6], [5, 6, 7, 8, 9, 5]])
    h = randn(3, 6, 4)

    def f(ids, h):
        pos = (ids == 2).int().argmax(dim=-1)
        return h[torch.arange(h.shape[0]), pos] * 2.0 + pos.unsqueeze(-1)

    r = _export(f, [ids, h], tmp_path, ["ids", "h"], {"ids": {0: "B", 1: "S"}, "h": {0: "B", 1: "S"}})
    ties = torch.tensor([[2, 2, 2, 2], [9, 9, 9, 9]])
    tract_matches_eager(r.path, FnModule(f), [[ties, randn(2, 4, 4, seed=2)]])


def _noisy(model):
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape))
    return model.eval()


@pytest.mark.slow  # about 10 s; test_linear_of_a_concatenation_of_broadcast_statistics_of_rank_4 is the light one
def test_patchtsmixer_regression_with_a_dynamic_batch(tmp_path):
    """PatchTSMixer's regression head on a std-scaled series cut into patches, its scale injected
    into every patch (the concatenation of repeated statistics under a rank-4 linear); before: tract
    refused the asset at load."""
    import transformers as T

    torch.manual_seed(0)
    config = T.PatchTSMixerConfig(context_length=32, patch_length=8, patch_stride=8, num_input_channels=3,
                                  d_model=16, num_layers=2, num_targets=3, scaling="std", dropout=0.0,
                                  head_dropout=0.0)
    model = _noisy(T.PatchTSMixerForRegression(config))

    def f(self, x):
        return self.model(past_values=x).regression_outputs

    _export(f, [3.0 + 2.0 * randn(2, 32, 3)], tmp_path, ["past_values"], {"past_values": {0: "B"}}, model=model)


@pytest.mark.slow  # about 8 s; test_rows_written_back_at_batched_top_k_positions is the light one
def test_informer_forecast_parameters_with_a_dynamic_batch(tmp_path):
    """Informer (teacher-forced): mean scaling with an observed mask, lagged subsequences, ProbSparse
    attention writing its top-u rows back into the context, the distribution's parameters out;
    before: refused at the item assignment with two index tensors."""
    import transformers as T

    torch.manual_seed(0)
    config = T.InformerConfig(prediction_length=4, context_length=16, lags_sequence=[1, 2, 3], num_time_features=2,
                              d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                              decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0)
    model = _noisy(T.InformerForPrediction(config))
    past, fut = 16 + 3, 4
    g = torch.Generator().manual_seed(1)
    observed = torch.ones(2, past)
    observed[1, :3] = 0
    inputs = [torch.rand(2, past, generator=g) + 0.5, torch.randn(2, past, 2, generator=g), observed,
              torch.rand(2, fut, generator=g) + 0.5, torch.randn(2, fut, 2, generator=g)]
    names = ["past_values", "past_time_features", "past_observed_mask", "future_values", "future_time_features"]

    def f(self, *xs):
        out = self.model.model(**dict(zip(names, xs)))
        return (*self.model.output_params(out.last_hidden_state), out.loc, out.scale)

    _export(f, inputs, tmp_path, names, {n: {0: "B"} for n in names}, model=model)


def test_item_assignment_with_a_2d_index_tensor(tmp_path):
    """``x[:, idx] = v`` with a 2-D index: its shape replaces the indexed axis in the value (before:
    refused, "needs a 1-D index")."""
    idx = torch.tensor([[4, 0], [2, 3]])

    def f(self, x, v):  # x: [B, 6, 3], v: [B, 2, 2, 3]
        y = x * 1.0
        y[:, self.idx] = v
        return y

    _export(f, [randn(2, 6, 3), randn(2, 2, 2, 3, seed=1)], tmp_path, ["x", "v"], {"x": {0: "B"}, "v": {0: "B"}},
            idx=idx)
