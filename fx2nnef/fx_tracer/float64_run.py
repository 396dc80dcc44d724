"""The model run in float64, the reference that tells float32 rounding from a wrong export.

When tract and eager float32 PyTorch disagree beyond the check's tolerance, both may be right to
float32's precision: a model with random weights or a deep stack amplifies the rounding of
either, summed in other orders. A float64 run of the same model on the same inputs is far closer
to the exact answer than either; ``fx2nnef.targets.rounding`` compares both with it.

The run uses a copy of the model (``copy.deepcopy`` then ``.double()``): the user's model is not
changed. The copy holds the values the asset stores (float16, Q4_0), decoded to float64, so that
it computes what the asset computes, without float32 rounding. It costs twice the model's
parameter bytes on top of the copy itself; above :data:`MAX_PARAMETER_BYTES` it is not made.
"""
from __future__ import annotations

import copy
from typing import Callable, Sequence

import numpy as np
import torch

from .capture import ModelRunner, _with_flat, module_state_kept
from .stored_values import _decoder
from .tracing import structures
from .tracing.control_flow import run_eagerly

# a float64 copy of a model whose parameters and buffers take more than this is not made (it would
# hold three times these bytes more while it exists, beside the model)
MAX_PARAMETER_BYTES = 2**30


class Float64Unavailable(Exception):
    """The model cannot be run in float64 here; the message says why, in one line."""


def float64_runner(runner: ModelRunner, stored: Sequence = ()) -> Callable[[list], list]:
    """A function giving the flat outputs (numpy) of ``runner``'s model run in float64 on flat
    numpy inputs (float inputs given in float64, the others as the example's), the values of the
    ``stored`` constants in place of their parameters. Raises :class:`Float64Unavailable` when the
    model's bytes exceed :data:`MAX_PARAMETER_BYTES` or it cannot be copied."""
    model = runner.model
    held = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    size = sum(t.numel() * t.element_size() for t in held.values())
    if size > MAX_PARAMETER_BYTES:
        raise Float64Unavailable(f"not run: the model's parameters and buffers take {size / 2**20:.1f} MiB, "
                                 f"above the {MAX_PARAMETER_BYTES / 2**20:.1f} MiB bound of a float64 copy")
    try:
        double = copy.deepcopy(model)
    except Exception as error:  # noqa: BLE001 - any failure of deepcopy: the model is not copied
        raise Float64Unavailable(f"the model could not be copied ({type(error).__name__}: {error})") from error
    with torch.no_grad():
        for v in stored:
            param = double.get_parameter(v.source.parameter_path)
            param.data = _decoder(v, torch.float64)()
    double = double.double()

    def run(inputs: list) -> list:
        tensors = [_as_float64(x, e) for x, e in zip(inputs, runner.examples)]
        a, k = _with_flat(runner.args, runner.kwargs, tensors)
        with torch.no_grad(), module_state_kept(double) as apart:
            out = apart(run_eagerly(lambda: double(*a, **k)))
        return [t.detach().cpu().numpy() for _, t in structures.flatten(out, "")]
    return run


def _as_float64(x, example: torch.Tensor) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(x))
    return tensor.to(torch.float64) if example.is_floating_point() else tensor.to(example.dtype)
