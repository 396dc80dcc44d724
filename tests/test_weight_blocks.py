"""A large linear weight is written as blocks of rows (tract packs each on its own, so its load and
optimization hold one block twice, not the whole matrix): same numbers, tied weights kept once
for their other readers, small weights as they were."""
import dataclasses

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.ir import ArrayData, RowsData
from fx2nnef.nnef_emit.profile import TARGETS, declare_target
from fx2nnef.targets.tract.profile import TRACT
from harness import randint, randn, tract_matches_eager

BLOCKS = "tract_small_weight_blocks"


class SmallBlocks(fx2nnef.TractNNEF):
    """tract with blocks of 1 KiB, so that a test-sized weight is split."""

    name = BLOCKS


def setup_module():
    if BLOCKS not in TARGETS:
        declare_target(dataclasses.replace(TRACT, name=BLOCKS, parent=TRACT, weight_block_bytes=1024))


class TiedLM(torch.nn.Module):
    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mid = torch.nn.Linear(dim, dim, bias=True)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mid(self.embed(ids))))


@pytest.mark.parametrize("check_io", [True, False])
def test_a_tied_head_is_multiplied_by_blocks_and_matches_eager(tmp_path, check_io):
    torch.manual_seed(0)
    model = TiedLM().eval()
    ids = randint(0, 50, 1, 7)
    out = tmp_path / "m.nnef.tgz"
    r = fx2nnef.export(model, (ids,), out, input_names=["ids"],
                       target=SmallBlocks(dynamic_axes={"ids": {1: "S"}}, check_io=check_io))
    text = r.nnef_text
    # 50 x 16 f32 = 3200 bytes: blocks of at most 1024 bytes (16 rows), 4 products concatenated
    assert text.count("transposeB = true") == 5 and "concat(" in text, text
    assert "shape = [50, 16]" in text  # the embedding's table, once, as the gather reads it
    assert text.count("variable<") == 1 + 2 + 4  # the table, mid's weight and bias, 4 blocks
    tract_matches_eager(out, model, [[randint(0, 50, 1, s, seed=s)] for s in (1, 5, 12)])


def test_small_weights_and_the_default_profile_are_unchanged(tmp_path):
    torch.manual_seed(0)
    model = TiedLM().eval()
    r = fx2nnef.export(model, (randint(0, 50, 1, 7),), tmp_path / "m.nnef.tgz", target=fx2nnef.TractNNEF())
    assert "concat(" not in r.nnef_text and r.nnef_text.count("transposeB = true") == 2


def test_rows_data_streams_its_rows_bytes():
    base = ArrayData(np.arange(7 * 5, dtype=np.float32).reshape(7, 5))
    rows = RowsData(base, 2, 6)
    assert rows.shape == (4, 5) and np.array_equal(rows.numpy(), base.array[2:6])
    for size in (4, 12, 1 << 20):  # pieces smaller than a row, across rows, the whole
        got = b"".join(bytes(p) for p in rows.chunks(size))
        assert got == base.array[2:6].tobytes()
    with pytest.raises(ValueError, match="not within"):
        RowsData(base, 5, 9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_of_a_model_weight_are_read_alone(dtype):
    from fx2nnef.fx_tracer.to_ir.torch_data import TorchData

    weight = torch.nn.Parameter(torch.randn(9, 6).to(dtype))
    rows = RowsData(TorchData(weight, "w"), 3, 8)
    expected = weight.detach()[3:8].float().numpy().tobytes()
    assert b"".join(bytes(p) for p in rows.chunks(40)) == expected
    assert rows.numpy().tobytes() == expected
