"""Checks of an LLM export in bounded memory: every torch reference first, then the model is
released, then tract runs the asset.

Run the other way (tract while the model is loaded) the machine holds the torch weights and
tract's copy of them at once, twice the weights at the peak. Here the export's own check keeps
its cases (inputs and torch's outputs, computed while the model is there) instead of running
tract (:class:`DeferredTractNNEF`); the modes and the greedy reference are computed next; the
model's tensors are then emptied (:func:`release`), and one tract child runs the export cases
and the modes, another the greedy generation. Used when ``export_causal_lm`` loaded the model
from a folder itself (nobody else holds it).
"""
from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import torch

from ..errors import CheckIOError
from ..targets import TractNNEF
from ..targets.base import CheckReport
from ..targets.tolerance import format_diffs
from ..targets.tract_runner import run_tract_many


class DeferredTractNNEF(TractNNEF):
    """A TractNNEF whose post-export check keeps its cases for later instead of running tract."""

    deferred: tuple = ()

    def post_export(self, asset: Path, input_names: list, output_names: list, cases: list, half_outputs=()):
        self.deferred = (list(output_names), list(cases), tuple(half_outputs))
        return None


def release(model: torch.nn.Module) -> None:
    """Free the memory of every parameter and buffer of ``model``: their storages are resized to
    nothing, so that views and copies of the tensor objects held elsewhere (the IR's constants,
    traced modules) do not keep it; freed heap memory is then handed back to the system. A
    memory-mapped storage (a folder's weights cast where they were loaded,
    :func:`.cast.cast_in_place`) cannot be resized: it is unmapped when its last reference goes,
    which the caller makes sure of. The model cannot run afterwards."""
    empty = torch.empty(0)
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            try:
                tensor.untyped_storage().resize_(0)
            except RuntimeError:  # a storage that cannot be resized (memory-mapped): drop the reference
                pass
            tensor.data = empty
    gc.collect()
    _trim_heap()


def _trim_heap() -> None:
    """glibc keeps freed blocks below its mmap threshold in its heap: give them back (elsewhere nothing)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def run_checks(target: DeferredTractNNEF, asset: Path, modes: dict, compare_modes) -> tuple:
    """Run the export's deferred cases and the ``modes`` (``{mode: (inputs, expected, sizes)}``)
    in one tract child; ``(export report, mode facts)``. ``compare_modes(modes, outputs)`` gives
    the mode facts (and raises on a difference); a failing export case raises CheckIOError."""
    names, cases, half = target.deferred
    mode_inputs = [inputs for inputs, _, _ in modes.values()]
    got = run_tract_many(asset, [c.inputs for c in cases] + mode_inputs, timeout=target.timeout)
    report = CheckReport(target.engine, [(c.label, target.compare(names, c.expected, out, half))
                                         for c, out in zip(cases, got)])
    if not report.ok:
        lines = [f"  [{label}]\n{format_diffs(diffs)}" for label, diffs in report.cases]
        raise CheckIOError("the exported asset's outputs differ from PyTorch beyond tolerance in tract:\n"
                           + "\n".join(lines) + "\nNothing was written.", [d for _, ds in report.cases for d in ds], "")
    return report, compare_modes(modes, got[len(cases):])
