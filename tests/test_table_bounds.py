"""A stored table read at positions that grow with a size bounds that size: past the table's
rows torch raises IndexError and tract aborts the process, and no decision on the sizes marks
the limit (fx_tracer/shapes/tables.py)."""
from __future__ import annotations

import torch
import transformers

import fx2nnef
from harness import tract_matches_eager


class Positions(torch.nn.Module):
    """Token and learned position embeddings, positions from arange (GPT-2) or from the running
    count of the mask plus an offset (RoBERTa)."""

    def __init__(self, rows: int, from_mask: bool):
        super().__init__()
        torch.manual_seed(0)
        self.tokens = torch.nn.Embedding(50, 8)
        self.positions = torch.nn.Embedding(rows, 8)
        self.from_mask = from_mask

    def forward(self, ids, mask):
        if self.from_mask:
            pos = torch.cumsum(mask, 1) * mask + 1
        else:
            pos = torch.arange(ids.shape[1])[None]
        return (self.tokens(ids) + self.positions(pos)) * mask[..., None]


def _export(model, tmp_path, S=7):
    ids = torch.randint(0, 50, (2, S), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    dyn = {"ids": {0: "B", 1: "S"}, "mask": {0: "B", 1: "S"}}
    return fx2nnef.export(model, (ids, mask), tmp_path / "m.nnef.tgz", input_names=["ids", "mask"],
                          target=fx2nnef.TractNNEF(dynamic_axes=dyn))


def _inputs(B, S):
    ids = torch.randint(0, 50, (B, S), generator=torch.Generator().manual_seed(S))
    return [ids, torch.ones_like(ids)]


def test_arange_positions_bound_the_length_at_the_table_rows(tmp_path):
    model = Positions(30, from_mask=False)
    r = _export(model, tmp_path)
    assert r.ranges["S"].hi == 30 and r.ranges["S"].lo is None, r.ranges
    assert "B" not in r.ranges, r.ranges
    assert any("table of 30 rows" in n for n in r.notes), r.notes
    assert "tract_assert S <= 30" in _graph_text(r.path)
    tract_matches_eager(r.path, model, [_inputs(1, 30), _inputs(3, 2)])


def test_positions_from_the_mask_count_bound_the_length_past_the_offset(tmp_path):
    model = Positions(30, from_mask=True)
    r = _export(model, tmp_path)
    assert r.ranges["S"].hi == 28, r.ranges  # positions 2 .. S+1
    tract_matches_eager(r.path, model, [_inputs(2, 28)])


def test_token_ids_read_as_given_add_no_bound_nor_run(tmp_path):
    class Tokens(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(50, 4)

        def forward(self, ids, mask):
            return self.tokens(ids) * mask[..., None]

    r = _export(Tokens(), tmp_path)
    assert r.ranges == {}, r.ranges


def test_roberta_length_bound(tmp_path):
    cfg = transformers.RobertaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, vocab_size=50, max_position_embeddings=24)
    torch.manual_seed(0)
    roberta = transformers.RobertaModel(cfg).eval()
    with torch.no_grad():
        for p in roberta.parameters():
            p.add_(0.05 * torch.randn(p.shape))

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = roberta

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

    r = _export(Wrapped(), tmp_path)
    assert r.ranges["S"].hi == 22, r.ranges  # padding_idx 1: positions 2 .. S+1 of 24 rows
    tract_matches_eager(r.path, Wrapped(), [_inputs(1, 22)])


def _graph_text(path) -> str:
    import tarfile

    with tarfile.open(path) as tar:
        return tar.extractfile("graph.nnef").read().decode()
