"""Run an exported asset in tract: ``fx2nnef.run(asset, inputs)``.

The inputs are checked first against what the asset declares (:mod:`fx2nnef.targets.signature`):
names, count, ranks, dtypes, fixed sizes, one value per symbol and every ``tract_assert``. A
violation raises :class:`~fx2nnef.errors.AssetInputError` before tract sees anything. When
everything was checked, tract runs in this process; when something could not be checked (an
assertion of a form the check cannot evaluate, a size 0 no assertion allows), it runs in a
child process, where a tract panic becomes a :class:`~fx2nnef.errors.TractError` instead of
ending the caller.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Optional, Union

import numpy as np

from .errors import TractError
from .targets.signature import AssetSignature
from .targets.tract_runner import run_tract

Inputs = Union[Mapping[str, object], Sequence[object]]


def run(asset: str | os.PathLike, inputs: Inputs, *, isolate: Optional[bool] = None,
        timeout: float = 600) -> dict[str, np.ndarray]:
    """Run ``asset`` once in tract; return its outputs as numpy arrays, by output name.

    ``asset``: a folder holding ``graph.nnef``, a ``.nnef.tgz`` / ``.nnef.tar``, or the folder
    written by ``fx2nnef llm``. ``inputs``: a dict name -> array (numpy, torch tensor or nested
    list), or a list in the graph's order. ``isolate``: True runs tract in a child process, False
    in this one (at your risk when the check is incomplete); None (default) picks the child only
    when the check of the inputs is incomplete. ``timeout`` bounds a child's run, in seconds.

    Raises AssetInputError when the inputs do not fit the asset (the message names the input,
    the axis, the size given and the sizes allowed), TractError when tract fails.
    """
    signature = AssetSignature.read(asset)
    arrays = signature.arrange(inputs)
    checked = signature.check(arrays)
    if isolate or (isolate is None and not checked.complete):
        try:
            outputs = run_tract(signature.path, arrays, timeout=timeout)
        except TractError as error:
            if checked.complete:
                raise
            raise TractError(f"{error}\nNot checked before the run: {'; '.join(checked.unchecked)}") from None
    else:
        outputs = _run_here(signature, arrays)
    return dict(zip(signature.outputs, outputs))


def _run_here(signature: AssetSignature, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Load, optimize and run in this process (tract's errors become TractError)."""
    import tract

    from .targets.tract._child import OutputUnreadable, to_numpy_outputs
    from .targets.child import clean_engine_message

    try:
        model = tract.nnef().with_tract_transformers().with_onnx().load(str(signature.path))
        return to_numpy_outputs(model.into_runnable().run(arrays))
    except OutputUnreadable as error:
        raise TractError(f"{str(signature.path)!r}: {error}") from None
    except tract.TractError as error:
        raise TractError(f"tract failed on {str(signature.path)!r}:\n{clean_engine_message(str(error))}") from None
