"""The notebooks in docs/ execute from top to bottom and tell a true story.

Each notebook's own cells assert their numbers; these tests also check what the notebook says
happens (the failing submodule, the refusal, the fallback asset, the generated tokens), from
the executed outputs and from one extra cell that reads the notebook's variables. The
committed notebooks hold no outputs, so no local path or stale result is saved in them.
"""
import json
import os
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
NOTEBOOK = DOCS / "piece_by_piece.ipynb"
LLM_NOTEBOOK = DOCS / "llm_export.ipynb"
NOTEBOOKS = [NOTEBOOK, LLM_NOTEBOOK]
KERNEL = "fx2nnef-test-python"
FACTS = "NOTEBOOK-FACTS:"


def _kernel_for_this_python(root: Path) -> None:
    """A kernelspec running this interpreter (the project's venv), found through JUPYTER_PATH."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fx2nnef test", "language": "python"}))


def _execute(nb, tmp_path, monkeypatch):
    """Run ``nb`` in a kernel of this interpreter, its temp files under ``tmp_path``."""
    _kernel_for_this_python(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the notebook's mkdtemp stays in tmp_path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb


def _outputs(nb) -> str:
    return "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)


def _facts(nb) -> dict:
    """The JSON the appended facts cell printed."""
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert FACTS in text, text
    return json.loads(text.split(FACTS, 1)[1])


def _with_facts(path: Path, code: str):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(code + f"\nprint({FACTS!r} + json.dumps(facts))"))
    return nb


PIECE_BY_PIECE_FACTS = """
import json
refused, result = globals().get("refused"), globals().get("result")  # None if the story went otherwise
facts = {
    "blockers": list(report.no_replacement),
    "act_step": report.row("model.layers.0.mlp.act_fn").step,
    "act_reason": report.row("model.layers.0.mlp.act_fn").reason,
    "refusal": str(refused),
    "refused_asset_written": refused is None,
    "asset": str(result.path) if result is not None else None,
    "asset_exists": result is not None and Path(result.path).exists(),
    "S3_matches": False,
}
if result is not None:
    ids_3 = example_input_ids(3, seed=7)
    with torch.no_grad():
        want = model(ids_3).logits.numpy()
    got = fx2nnef.run(result.path, {"input_ids": ids_3.numpy()})["logits"]
    facts["S3_matches"] = bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))
"""


def test_piece_by_piece_notebook_tells_its_story(tmp_path, monkeypatch):
    """The activation calls a ``torch.library.custom_op`` that no converter lowers: the diagnosis
    names exactly the two activations (step ``lower``), the fallback export refuses and names them,
    and with an extractor registered the fallback asset is written and runs in tract."""
    nb = _execute(_with_facts(NOTEBOOK, PIECE_BY_PIECE_FACTS), tmp_path, monkeypatch)
    out = _outputs(nb)
    facts = _facts(nb)
    blockers = ["model.layers.0.mlp.act_fn", "model.layers.1.mlp.act_fn"]
    assert facts["blockers"] == blockers, facts
    assert facts["act_step"] == "lower", facts
    assert "notebook::normal_cdf" in facts["act_reason"] and "no lowering" in facts["act_reason"], facts
    refusal = facts["refusal"]
    assert "2 module(s) fail with no working replacement; nothing was written" in refusal, refusal
    assert [line.split(" (")[0].strip(" -") for line in refusal.splitlines() if line.startswith("  - ")] == blockers
    assert refusal.count("CdfGELU") == 2 and "notebook::normal_cdf" in refusal, refusal
    assert not facts["refused_asset_written"]
    assert facts["asset_exists"] and facts["asset"].startswith(str(tmp_path)), facts
    assert facts["S3_matches"], facts
    # what the cells print: the report's tree, the refusal, the shared fragment, tract at S=11
    assert "piece-by-piece report: LlamaForCausalLM" in out
    assert "nothing was written" in out
    assert "definitions: 1 calls: 2" in out
    assert "max abs diff at S=11:" in out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs_or_local_paths(path):
    """Outputs are cleared before committing: nothing stale, nothing from the author's machine."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]
    text = path.read_text()
    assert not re.search(r"/(tmp|home|Users|work|private|var/folders)/", text), \
        re.search(r".{0,40}/(tmp|home|Users|work|private|var/folders)/.{0,40}", text).group(0)


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
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb = _execute(nb, tmp_path, monkeypatch)
    outputs = "".join(o.get("text", "") for cell in nb.cells for o in cell.outputs)
    assert "ranges: {} ok: True" in outputs, outputs
    assert "tract matches at 1..12" in outputs, outputs


LLM_FACTS = """
import json
from fx2nnef.llm.export import greedy_reference
facts = {"asset_exists": (out_dir / "model.nnef.tgz").is_file(),
         "generate_checked": json.loads((out_dir / "fx2nnef.json").read_text())["checks"].get("generate"),
         "tract_tokens": globals().get("tract_tokens"), "torch_tokens": globals().get("torch_tokens"),
         "refusal": globals().get("refusal")}
other = example_input_ids(4, seed=11)
fresh = TractCausalLM.load(out_dir / "model.nnef.tgz")
facts["other_tract"] = fresh.greedy(other.numpy(), 6, eos_token_id=None)
facts["other_torch"] = greedy_reference(model, other, 6)
"""


def test_llm_notebook_generates_the_torch_tokens(tmp_path, monkeypatch):
    """docs/llm_export.ipynb exports the tiny Llama offline, runs it in tract, and the greedy
    tokens from tract equal transformers' on the notebook's prompt (and on another one, from a
    fresh load of the asset); a generation past the context is refused before tract runs."""
    nb = _execute(_with_facts(LLM_NOTEBOOK, LLM_FACTS), tmp_path, monkeypatch)
    out = _outputs(nb)
    facts = _facts(nb)
    assert facts["asset_exists"], facts
    assert facts["generate_checked"], facts
    assert facts["tract_tokens"] and len(facts["tract_tokens"]) == 12, facts
    assert facts["tract_tokens"] == facts["torch_tokens"], facts
    assert len(facts["other_tract"]) == 6 and facts["other_tract"] == facts["other_torch"], facts
    assert facts["refusal"] and "fit the asset" in facts["refusal"] and "S+P < 128" in facts["refusal"], facts
    assert "equal transformers' greedy generation" in out
    assert out.count("max abs diff of the last logits") == 5
