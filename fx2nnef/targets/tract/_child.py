"""Child process that loads and runs an NNEF asset in tract (see ``fx2nnef.targets.tract.runner``).

Usage: ``python _child.py WORKDIR`` (``runner`` runs this file by path; ``python -m
fx2nnef.targets.tract._child WORKDIR`` works too but imports the whole fx2nnef package). The
parent has written ``WORKDIR/request.json`` (``asset``, ``with_transformers``,
``input_sets``: 0 only loads and makes the model runnable) and ``WORKDIR/inputs_<k>.npz``
per input set. The child writes ``outputs_<k>.npz`` and ``result.json``; before each step it
prints ``fx2nnef-stage: <step>`` to stdout so that the parent can tell where a crash (panic,
segfault) happened.

Keep this module light and standalone: it imports numpy and tract, nothing from fx2nnef.
The Khronos child (``fx2nnef/targets/khronos/_child.py``) reuses its file-protocol helpers.
"""
from __future__ import annotations

import json
import re
import sys
import traceback
from pathlib import Path

import numpy as np

STAGE_PREFIX = "fx2nnef-stage: "
_TRACT_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "bool": "bool",
}
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


class ReportedProblem(Exception):
    """A problem found by this module itself; its message is complete as it stands."""


class InputMismatch(ReportedProblem):
    """The inputs do not fit the model's input facts (checked before tract sees them)."""


class OutputUnreadable(ReportedProblem):
    """An output tensor has a datum type that tract's Python API cannot convert."""


_current_stage = "start"


def stage(name: str) -> None:
    """Announce the next step on stdout (read by the parent after a crash) and remember it."""
    global _current_stage
    _current_stage = name
    print(STAGE_PREFIX + name, flush=True)


def load_arrays(path: Path) -> list[np.ndarray]:
    """Arrays of an ``.npz`` written by the parent, in their saved order."""
    with np.load(path, allow_pickle=False) as npz:
        return [npz[key] for key in sorted(npz.files, key=int)]


def save_arrays(path: Path, arrays: list[np.ndarray]) -> None:
    """Save arrays to ``.npz`` under keys "0", "1", ... keeping their order."""
    np.savez(path, **{str(i): a for i, a in enumerate(arrays)})


def write_result(workdir: Path, result: dict) -> None:
    """Write ``result.json`` (the parent reads it once the child has exited)."""
    (workdir / "result.json").write_text(json.dumps(result))


def parse_fact(fact: str) -> tuple[list[str], str]:
    """Split a tract fact such as ``"1,S,64,f32"`` into (dims, datum type)."""
    *dims, datum = fact.split(",")
    return dims, datum


def check_inputs(facts: list[str], inputs: list[np.ndarray]) -> None:
    """Raise InputMismatch when count, rank, dtype or a fixed dim differs from the facts.

    tract segfaults on too few inputs and gives cryptic messages ("Clashing resolution for
    expression") on a wrong shape. A plain symbol (``S``) must take one value everywhere.
    """
    if len(inputs) != len(facts):
        raise InputMismatch(
            f"the model has {len(facts)} input(s) ({'; '.join(facts)}) but {len(inputs)} array(s) "
            f"were given; pass one array per graph input, in the graph's order"
        )
    symbols: dict[str, tuple[int, int]] = {}
    for index, (fact, array) in enumerate(zip(facts, inputs)):
        _check_one_input(index, fact, array, symbols)


def _check_one_input(index: int, fact: str, array: np.ndarray, symbols: dict) -> None:
    """Compare one array with its fact; record the values taken by plain symbols."""
    dims, datum = parse_fact(fact)
    where = f"input {index} (fact {fact}) got shape {list(array.shape)} {array.dtype}"
    expected_dtype = _TRACT_DTYPES.get(datum)
    if expected_dtype is not None and np.dtype(expected_dtype) != array.dtype:
        raise InputMismatch(f"{where}: dtype differs; convert the array to {expected_dtype}")
    if len(dims) != array.ndim:
        raise InputMismatch(f"{where}: rank differs, the model wants rank {len(dims)}")
    for axis, (dim, size) in enumerate(zip(dims, array.shape)):
        if dim.isdigit() and int(dim) != size:
            raise InputMismatch(f"{where}: axis {axis} must be {dim}")
        if _SYMBOL.match(dim):
            seen = symbols.setdefault(dim, (size, index))
            if seen[0] != size:
                raise InputMismatch(
                    f"{where}: symbol {dim} is {size} on axis {axis} but {seen[0]} in input {seen[1]}"
                )


def to_numpy_outputs(outputs: list) -> list[np.ndarray]:
    """Convert tract output tensors, explaining the TDim failure."""
    arrays = []
    for index, tensor in enumerate(outputs):
        try:
            arrays.append(tensor.to_numpy())
        except Exception as error:
            hint = ""
            if "TDim" in str(error):
                hint = (" (a TDim tensor, from an integer literal or tract_core_shape_of: cast it "
                        "with tract_core_cast(..., to = 'i64') before it reaches an output)")
            raise OutputUnreadable(f"output {index} cannot be read from Python{hint}: {error}") from error
    return arrays


def map_large_blocks() -> None:
    """glibc maps allocations of 1 MiB or more on their own, and unmaps them when freed.

    By default glibc raises that threshold to the size of the last large block freed (up to 32
    MiB), and blocks below it come from a heap that keeps freed memory: tract's transient load
    buffers (a weight read while the model loads) stayed beside the weights (260 MiB for a 1B
    model), as did a 1B model's torch run in the exporting process (~250 MiB). Process-wide;
    this child calls it before loading, ``fx2nnef.llm`` before loading a folder's model. Nothing
    happens without glibc."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 2**20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def load_model(request: dict):
    """Load the asset with the registries asked for."""
    import tract

    map_large_blocks()
    stage("load")
    loader = tract.nnef().with_onnx()  # tract_onnx_non_zero: a count read from data
    if request["with_transformers"]:
        loader = loader.with_tract_transformers()
    return loader.load(request["asset"])


def run(request: dict, workdir: Path) -> dict:
    """Load, check inputs, make runnable, run each input set; return the result record."""
    model = load_model(request)
    facts = [str(model.input_fact(i)) for i in range(model.input_count())]
    output_facts = [str(model.output_fact(i)) for i in range(model.output_count())]
    input_sets = [load_arrays(workdir / f"inputs_{k}.npz") for k in range(request["input_sets"])]
    for k, inputs in enumerate(input_sets):
        stage(f"check inputs of set {k}")
        check_inputs(facts, inputs)
    stage("into_runnable")
    runnable = model.into_runnable()
    for k, inputs in enumerate(input_sets):
        stage(f"run input set {k}")
        outputs = runnable.run(inputs)
        stage(f"read outputs of set {k}")
        save_arrays(workdir / f"outputs_{k}.npz", to_numpy_outputs(outputs))
    return {"ok": True, "inputs": facts, "outputs": output_facts}


def main(workdir: Path) -> int:
    """Serve one request; every Python-level failure goes to result.json."""
    request = json.loads((workdir / "request.json").read_text())
    try:
        return_value = run(request, workdir)
    except Exception as error:
        write_result(workdir, failure_record(error))
        return 1
    write_result(workdir, return_value)
    return 0


def failure_record(error: Exception) -> dict:
    """A JSON-able record of an exception: its kind, message and where it was raised."""
    if isinstance(error, ReportedProblem):
        kind = "reported"
    else:
        kind = "tract" if type(error).__name__ == "TractError" else "python"
    frame = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    return {
        "ok": False,
        "kind": kind,
        "type": type(error).__name__,
        "message": str(error),
        "where": f"{frame.filename}:{frame.lineno}: {frame.line}" if frame else "",
        "stage": _current_stage,
    }


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
