"""Child process that runs a standard NNEF folder in the nnef_tools PyTorch interpreter.

Usage: ``python _child.py WORKDIR`` (run by path, like the tract child). The parent
has written ``WORKDIR/request.json`` (``folder``, ``input_sets``) and
``WORKDIR/inputs_<k>.npz``; the child writes ``outputs_<k>.npz`` (outputs in the graph's
declared order) and ``result.json``. The file protocol and its helpers are those of
the tract child (``../tract/_child.py``), loaded from its file so that nothing of fx2nnef is imported.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def _load_protocol():
    """The tract child module (its file protocol), without importing the fx2nnef package."""
    if __package__:
        from ..tract import _child

        return _child
    spec = importlib.util.spec_from_file_location("_fx2nnef_tract_child", Path(__file__).resolve().parent.parent / "tract" / "_child.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_protocol = _load_protocol()
ReportedProblem = _protocol.ReportedProblem
failure_record = _protocol.failure_record
load_arrays = _protocol.load_arrays
save_arrays = _protocol.save_arrays
stage = _protocol.stage
write_result = _protocol.write_result


def declared_io(folder: Path) -> tuple[list[str], list[str]]:
    """Input and output tensor names of ``folder/graph.nnef``, parsed without variables."""
    import nnef

    stage("parse")
    graph = nnef.parse_file(str(folder / "graph.nnef"))
    return list(graph.inputs), list(graph.outputs)


def check_input_count(names: list[str], inputs: list) -> None:
    """The interpreter asserts the count with an empty message: say it plainly instead."""
    if len(inputs) != len(names):
        raise ReportedProblem(
            f"the graph has {len(names)} input(s) {names} but {len(inputs)} array(s) were given; "
            f"pass one array per graph input, in the graph's order"
        )


def run(request: dict, workdir: Path) -> dict:
    """Build the interpreter once, run every input set, save outputs in declared order."""
    folder = Path(request["folder"])
    input_names, output_names = declared_io(folder)
    input_sets = [load_arrays(workdir / f"inputs_{k}.npz") for k in range(request["input_sets"])]
    stage("check inputs")
    for inputs in input_sets:
        check_input_count(input_names, inputs)
    stage("build interpreter")
    from nnef_tools.interpreter.pytorch import Interpreter

    interpreter = Interpreter(str(folder), device="cpu")
    for k, inputs in enumerate(input_sets):
        stage(f"run input set {k}")
        by_name = interpreter(inputs)
        save_arrays(workdir / f"outputs_{k}.npz", [by_name[name] for name in output_names])
    return {"ok": True, "inputs": input_names, "outputs": output_names}


def main(workdir: Path) -> int:
    """Serve one request; every Python-level failure goes to result.json."""
    request = json.loads((workdir / "request.json").read_text())
    try:
        record = run(request, workdir)
    except Exception as error:
        write_result(workdir, failure_record(error))
        return 1
    write_result(workdir, record)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
