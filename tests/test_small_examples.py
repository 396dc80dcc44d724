"""Dynamic axes whose example size is 0, 1 or 2, exported raw (``check_io=False``) and run in
tract at the example and at other sizes: what the export claims valid must hold, and what it
cannot hold is refused with a sentence (never a silent wrong rank or number)."""
import pytest
import torch

import fx2nnef
from fx2nnef.errors import Fx2NnefError
from harness import FnModule, tract_matches_eager


def _export(fn, example, dynamic_axes, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    result = fx2nnef.export(FnModule(fn), tuple(example), out, input_names=[f"x{i}" for i in range(len(example))],
                            target=fx2nnef.TractNNEF(check_io=False, dynamic_axes=dynamic_axes))
    return out, result


def _within(result, sizes: dict) -> bool:
    return all(r.contains(sizes[s]) for s, r in result.ranges.items() if s in sizes)


@pytest.mark.parametrize("fn", [lambda x: x.squeeze() * 2, lambda x: x.squeeze(0) + 1], ids=["squeeze", "squeeze0"])
def test_squeeze_of_an_axis_one_at_the_example_is_refused(fn, tmp_path):
    """torch drops the axis at 1 only: an exported tensor has one rank, so no graph holds at S=1
    and S=2 both; the raw export says so instead of writing the rank of the other sizes."""
    with pytest.raises(Fx2NnefError, match="rank"):
        _export(fn, [torch.randn(1, 3)], {"x0": {0: "S"}}, tmp_path)


def test_squeeze_of_an_axis_above_one(tmp_path):
    out, result = _export(lambda x: x.squeeze() * 2, [torch.randn(3, 1)], {"x0": {0: "S"}}, tmp_path)
    sizes = [n for n in (2, 3, 7) if _within(result, {"S": n})]
    assert sizes, result.ranges
    tract_matches_eager(out, FnModule(lambda x: x.squeeze() * 2), [[torch.randn(n, 1)] for n in sizes])


@pytest.mark.parametrize("example", [0, 2, 3])
def test_empty_axis_example(example, tmp_path):
    """An example with an empty axis exports (tract runs empty tensors)."""
    fn = lambda x: x @ torch.arange(x.shape[1], dtype=x.dtype)  # noqa: E731
    out, result = _export(fn, [torch.randn(example, 3)], {"x0": {0: "S"}}, tmp_path)
    sizes = [n for n in sorted({0, 1, 2, 5, example}) if _within(result, {"S": n})]
    assert example in sizes
    tract_matches_eager(out, FnModule(fn), [[torch.randn(n, 3)] for n in sizes])


def _empty_writes(x):
    y = x.clone()
    y[..., 0:1] = 0.5
    y[..., -1:-2] = 0.1  # empty at every size
    y[:, 4:] = 7.0  # empty up to 4
    return y


@pytest.mark.parametrize("example", [1, 2, 5])
def test_empty_writes_on_a_dynamic_axis(example, tmp_path):
    """A write to an empty region writes nothing, at every size; tract must not be given a
    region of negative length (it aborts the process at load or fails at run)."""
    out, result = _export(_empty_writes, [torch.randn(2, example)], {"x0": {1: "S"}}, tmp_path)
    sizes = [n for n in sorted({1, 2, 3, 4, 6, example}) if _within(result, {"S": n})]
    assert example in sizes
    tract_matches_eager(out, FnModule(_empty_writes), [[torch.randn(2, n)] for n in sizes])


_G = torch.zeros(2, 3)


def _copy_into_a_view_of_a_global(x):
    y = _G.clone()
    y.narrow(0, 0, 1).copy_(x.sum())  # the view's write reaches y, which is returned as it is
    return y


def _fill_a_row_of_a_made_tensor(x):
    y = torch.zeros(2, 3)
    y[0].fill_(x.sum())
    return y


def _write_at_positions_from_a_size(x):
    y = torch.zeros(2, 4)
    y[:, torch.arange(x.shape[0]) % 4] = x.sum()
    return y


def _separated_indices_from_the_end(x):
    y = x.unsqueeze(0).unsqueeze(0).expand(1, 4, -1).clone()
    y[torch.tensor([0]), 1:3, torch.tensor([-1])] += 0.5  # -1 on the dynamic axis
    return y


@pytest.mark.parametrize("fn", [_copy_into_a_view_of_a_global, _fill_a_row_of_a_made_tensor,
                                _write_at_positions_from_a_size, _separated_indices_from_the_end])
def test_writes_found_by_the_fuzzer(fn, tmp_path):
    """Constant tensors written through views, at positions from a size, from the end of a
    dynamic axis: raw exports right at sizes below and above the example."""
    out, result = _export(fn, [torch.arange(5.0)], {"x0": {0: "S"}}, tmp_path)
    sizes = [n for n in (1, 2, 5, 8) if _within(result, {"S": n})]
    assert 5 in sizes and len(sizes) >= 3, result.ranges
    tract_matches_eager(out, FnModule(fn), [[torch.randn(n)] for n in sizes])
