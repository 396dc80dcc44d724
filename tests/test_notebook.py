"""docs/piece_by_piece.ipynb executes from top to bottom (its own cells assert the numbers)."""
import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "docs" / "piece_by_piece.ipynb"
KERNEL = "fx2nnef-test-python"


def _kernel_for_this_python(root: Path) -> None:
    """A kernelspec running this interpreter (the project's venv), found through JUPYTER_PATH."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fx2nnef test", "language": "python"}))


def test_piece_by_piece_notebook_executes(tmp_path, monkeypatch):
    _kernel_for_this_python(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the notebook's mkdtemp stays in tmp_path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "piece-by-piece report: LlamaForCausalLM" in outputs
    assert "definitions: 1 calls: 2" in outputs
