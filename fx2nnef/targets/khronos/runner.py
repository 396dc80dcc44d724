"""Validate an NNEF asset with the Khronos ``nnef`` parser and run it in nnef_tools.

Facts checked with nnef 1.0.10 and nnef_tools 1.0.11:

- ``nnef.load_graph(path)`` takes a folder (or a bare ``graph.nnef`` file, then it only
  parses); it does not open archives. It reads every ``.dat`` and checks its shape against
  the ``variable`` declaration. ``nnef.infer_shapes(graph)`` checks shapes op by op. Both
  raise ``nnef.Error`` with a one-line message such as "Parse error in 'x/graph.nnef' [6:7]
  undefined operation 'tract_core_foo'" or "while inferring shape of tensor(s) 'y'
  (operation 'matmul'): inner dimensions must agree (3 vs 4)". Extension ops need fragment
  declarations and ``custom_shapes``.
- ``Interpreter(folder)`` (``nnef_tools.interpreter.pytorch``) opens ``folder/graph.nnef``
  itself, so it takes a folder only: an archive fails with "Could not open file:
  x.tgz/graph.nnef". Here archives are extracted to a temporary folder first.
- It defaults to CUDA when available; it is built here with ``device="cpu"``.
- Inputs: a list of numpy arrays in graph input order; each goes through ``torch.tensor``
  without a cast, so the computation runs in the dtype given (f16 inputs give f16 outputs,
  int32 inputs int64 outputs when mixed with i64). Variables are converted on load:
  every float to f32, every integer to i64, bools kept. Feed f32 for ``scalar``, i64 for
  ``integer`` and bool for ``logical`` inputs to follow the NNEF types.
- A wrong input count fails on a bare ``assert`` (an AssertionError with no message); an
  unknown op on "Unsupported operation: <name>"; shape clashes surface as torch
  RuntimeErrors ("The size of tensor a (2) must match ..."). These messages are passed on
  in :class:`~fx2nnef.errors.KhronosError` with the file and line that raised them.
- It returns a dict by output name; :func:`run_khronos` returns a list in the graph's
  declared output order.

The interpreter imports torch (about 1.5 s); it runs in a child process
(``_child.py`` of this folder) like tract, so that a crash or a runaway graph cannot
take the caller down. It is started the same way as the tract child (see ``fx2nnef.targets.tract.runner``).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...errors import KhronosError
from ..child import (as_input_arrays, asset_folder, clean_engine_message, crash_message, existing_asset, load_arrays,
                    run_child, save_arrays)

CHILD_SCRIPT = Path(__file__).resolve().with_name("_child.py")
_CRASH_ADVICE = "The nnef_tools interpreter died without a Python error: rerun it by hand on the folder to see more."


def validate_khronos(
    asset: str | os.PathLike, *, custom_shapes: dict | None = None, load_variables: bool = True
):
    """Parse the asset (folder, .tar or .tgz) strictly and infer every shape; return the graph.

    Raises KhronosError with the parser's message. ``custom_shapes`` maps extension op names
    to shape functions, as ``nnef.infer_shapes`` takes them.
    """
    import nnef

    path = existing_asset(asset)
    with tempfile.TemporaryDirectory(prefix="fx2nnef_khronos_") as temp:
        folder = asset_folder(path, Path(temp))
        try:
            graph = nnef.load_graph(str(folder), load_variables=load_variables)
            nnef.infer_shapes(graph, custom_shapes=custom_shapes or {})
        except (nnef.Error, OSError, ValueError) as error:
            raise KhronosError(
                f"the Khronos NNEF parser rejects {str(asset)!r}: {error}. {_parser_advice(str(error))}"
            ) from error
    return graph


_PARSER_HINTS = {
    "item type (5) and bits per item (8)": "Bool variables must be written 1 bit per item for this "
    "reader: dat_bytes(array, bool_bits=1).",
    "in variable file does not match shape": "The .dat shape must equal the declared shape "
    "exactly; a 0-d array gives a rank-0 file, declared shape = [].",
}


def _parser_advice(message: str) -> str:
    """What to do about a parser message: a specific hint when one is known."""
    for needle, hint in _PARSER_HINTS.items():
        if needle in message:
            return hint
    return "The asset is not standard NNEF: fix the op or shape named here, or export for tract instead."


def run_khronos(
    asset: str | os.PathLike, inputs: Sequence[np.ndarray], *, timeout: float = 600
) -> list[np.ndarray]:
    """Run the asset once in the nnef_tools PyTorch interpreter; outputs in declared order."""
    return run_khronos_many(asset, [inputs], timeout=timeout)[0]


def run_khronos_many(
    asset: str | os.PathLike, input_sets: Sequence[Sequence[np.ndarray]], *, timeout: float = 600
) -> list[list[np.ndarray]]:
    """Build the interpreter once and run it on each input set."""
    path = existing_asset(asset)
    sets = [as_input_arrays(inputs) for inputs in input_sets]
    with tempfile.TemporaryDirectory(prefix="fx2nnef_khronos_") as temp:
        workdir = Path(temp)
        folder = asset_folder(path, workdir / "asset")
        for k, inputs in enumerate(sets):
            save_arrays(workdir / f"inputs_{k}.npz", inputs)
        request = {"folder": str(folder), "input_sets": len(sets)}
        (workdir / "request.json").write_text(json.dumps(request))
        _call_khronos_child(path, workdir, timeout)
        return [load_arrays(workdir / f"outputs_{k}.npz") for k in range(len(sets))]


def _call_khronos_child(asset: Path, workdir: Path, timeout: float) -> dict:
    """Run the interpreter child on ``workdir``; return its result or raise KhronosError."""
    try:
        outcome = run_child(CHILD_SCRIPT, workdir, timeout, preload=("numpy", "nnef", "nnef_tools.interpreter.pytorch"))
    except subprocess.TimeoutExpired as error:
        raise KhronosError(
            f"the nnef_tools interpreter did not finish within {timeout} s on {str(asset)!r}; "
            f"the child process was stopped. Give a larger timeout="
        ) from error
    if outcome.result is None:
        raise KhronosError(crash_message("the nnef_tools interpreter", asset, outcome, _CRASH_ADVICE))
    result = outcome.result
    if not result["ok"]:
        raise KhronosError(_failure_message(asset, result))
    return result


def _failure_message(asset: Path, result: dict) -> str:
    """Message for a failure the child caught and reported."""
    stage = result.get("stage", "?")
    if result["kind"] == "reported":
        return f"nnef_tools interpreter on {str(asset)!r}, step '{stage}': {result['message']}"
    message = clean_engine_message(result["message"]) or "(no message)"
    return (
        f"the nnef_tools interpreter failed at step '{stage}' on {str(asset)!r}: "
        f"{result['type']}: {message}\n(raised at {result['where']})"
    )
