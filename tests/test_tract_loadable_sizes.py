"""Size expressions tract can prove (issue 43, class 3): assets that tract refused to load.

SD3's transformer crops its position table at the centre to the patch grid (``top = (16 - h) // 2``
then ``[top:top + h]``), adds it to the patches and later reshapes by ``h``: tract computed the
crop's length from bounds written apart and could not match it with ``h`` ("16*(B)*(broadcast(...))"
at the reshape). Reproduced with torch alone, checked in tract at the example and other sizes."""
import pytest
import torch
import torch.nn as nn

import fx2nnef
from fx2nnef.ir.dims import SymDim, with_fewer_divisions
from harness import randn, tract_matches_eager


class CentredCrop(nn.Module):
    def __init__(self, table=16, patch=2, channels=8):
        super().__init__()
        self.table, self.patch = table, patch
        self.pos = nn.Parameter(torch.randn(1, table * table, channels))
        self.proj = nn.Conv2d(4, channels, patch, stride=patch)

    def forward(self, x):
        h, w = x.shape[-2] // self.patch, x.shape[-1] // self.patch
        top, left = (self.table - h) // 2, (self.table - w) // 2
        pos = self.pos.reshape(1, self.table, self.table, -1)[:, top:top + h, left:left + w, :]
        y = self.proj(x).flatten(2).transpose(1, 2) + pos.reshape(1, -1, self.pos.shape[-1])
        return y.reshape(x.shape[0], h, w, -1).permute(0, 3, 1, 2)  # unpatchify-like


@pytest.mark.parametrize("check_io", [True, False])
def test_centred_crop_then_reshape_loads(tmp_path, check_io):
    torch.manual_seed(0)
    model = CentredCrop().eval()
    r = fx2nnef.export(model, (randn(1, 4, 8, 8),), tmp_path / "m.nnef.tgz", input_names=["x"],
                       target=fx2nnef.TractNNEF(dynamic_axes={"x": {0: "B", 2: "H", 3: "W"}}, check_io=check_io))
    # odd and even sizes: the crop's begin rounds differently
    tract_matches_eager(r.path, model, [[randn(b, 4, h, w, seed=h * w)] for b, h, w in
                                        [(1, 8, 8), (2, 10, 14), (1, 13, 7), (3, 31, 4), (1, 2, 33)]])


def test_fewer_divisions_is_an_equal_form():
    h = SymDim.symbol("H")
    fd = SymDim.floordiv
    length = fd(3 * h + 1, 4) + fd(h, 2) + fd(h + 2, 4) - h  # end - begin of the crop, as written
    plain = with_fewer_divisions(length)
    assert plain == fd(h, 2)
    assert all(plain.evaluate({"H": n}) == length.evaluate({"H": n}) for n in range(1, 300))
    assert with_fewer_divisions(fd(h + 3, 4) * 2 + 1) == fd(h + 3, 4) * 2 + 1  # nothing simpler: kept
