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


CELLS = [
    """import torch, fx2nnef
class Half(torch.nn.Module):
    def forward(self, x):  # int() and max() of sizes, in a notebook cell
        n = max(1, x.shape[1] // 2)
        return x[:, :n] * 2 + float(x.shape[1]) / int(x.shape[1] * 0.5 + 1)""",
    """import tempfile, os
out = os.path.join(tempfile.mkdtemp(), "half.nnef.tgz")
r = fx2nnef.export(Half(), (torch.randn(2, 10),), out, input_names=["x"],
                   target=fx2nnef.TractNNEF(dynamic_axes={"x": {1: "S"}}))
print("ranges:", dict(r.ranges), "ok:", r.check.ok)""",
    """from fx2nnef.targets.tract_runner import run_tract_many
import numpy as np
for n in range(1, 13):
    x = torch.randn(2, n)
    got = run_tract_many(out, [[x.numpy()]])[0][0]
    want = Half()(x).numpy()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6), (n, got, want)
print("tract matches at 1..12")""",
]


def test_sizes_read_in_a_notebook_cell_stay_traced(tmp_path, monkeypatch):
    """A model defined in a notebook's cell (its class in ``__main__``, which has no source file):
    ``max``, ``int`` and ``float`` of sizes there are traced as in a module's code, found through
    the cell's own source, so the export holds at every size instead of at S >= 2 (``max(1, S // 2)``
    read as a decision) or at S=10 only (``int(S * 0.5 + 1)`` baked)."""
    _kernel_for_this_python(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in nb.cells for o in cell.outputs)
    assert "ranges: {} ok: True" in outputs, outputs
    assert "tract matches at 1..12" in outputs, outputs
