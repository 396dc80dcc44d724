"""The tracer's tables of tensor attributes and methods name only what torch.Tensor has."""
import pytest
import torch

from fx2nnef.fx_tracer.tracing import proxy


@pytest.mark.parametrize("table", ["_STATIC_TENSOR_ATTRS", "_STATIC_TENSOR_METHODS", "_DATA_TENSOR_METHODS"])
def test_every_listed_name_exists_on_a_tensor(table):
    t = torch.zeros(2)
    assert sorted(n for n in getattr(proxy, table) if not hasattr(t, n)) == []
