"""An export does not depend on what ran before it in the process: a model exported alone in a
fresh process and after another model gives the same graph.nnef (a user exporting two models in
one notebook gets the assets of two fresh processes).

Both runs are children with the same PYTHONHASHSEED: a model that iterates over a Python set of
strings (Gemma's ``set(layer_types)``) traces its independent branches in an order that follows
the process's string hashing, which is not state an export could leave behind."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = textwrap.dedent("""
    import sys, tarfile
    import torch
    import fx2nnef

    class Pooled(torch.nn.Module):  # sizes with floor divisions (strided conv, pooling) on H and W
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
            self.norm = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv(x))), 2)
            return y.flatten(2).softmax(-1)

    class Windows(torch.nn.Module):  # a size-dependent slice, a cumsum and a scan over S
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(6, 6)

        def forward(self, x):
            h = self.proj(x).cumsum(1)
            return h[:, : x.shape[1] // 2 + 1].tanh(), torch.nn.functional.avg_pool1d(h.transpose(1, 2), 3)

    def export(name, out):
        torch.manual_seed(0)
        if name == "pooled":
            model, args, axes = Pooled().eval(), (torch.randn(1, 3, 20, 24),), {"x": {2: "H", 3: "W"}}
            model.train()(torch.randn(4, 3, 20, 24))  # BatchNorm statistics from a calibration pass
            model.eval()
        else:
            model, args, axes = Windows().eval(), (torch.randn(2, 9, 6),), {"x": {1: "S"}}
        fx2nnef.export(model, args, out, input_names=["x"], target=fx2nnef.TractNNEF(dynamic_axes=axes))
        with tarfile.open(out) as tar:
            return tar.extractfile("graph.nnef").read().decode()

    folder = sys.argv[1]
    texts = [export(name, f"{folder}/{i}_{name}.nnef.tgz") for i, name in enumerate(sys.argv[2:])]
    print(SEPARATOR.join(texts))
""")
SEPARATOR = "\n#### next model ####\n"


def _graphs_in_one_process(tmp_path: Path, *names: str) -> dict:
    """The graph.nnef text of each model, exported in this order in one child process."""
    folder = tmp_path / "_".join(names)
    folder.mkdir()
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", f"SEPARATOR = {SEPARATOR!r}\n" + SCRIPT, str(folder), *names], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    texts = [t.strip() for t in proc.stdout.split(SEPARATOR)]
    assert len(texts) == len(names) and all("graph " in t for t in texts), proc.stdout[-2000:]
    return dict(zip(names, texts))


def test_a_model_exports_the_same_alone_and_after_another(tmp_path):
    one_order = _graphs_in_one_process(tmp_path, "pooled", "windows")
    other_order = _graphs_in_one_process(tmp_path, "windows", "pooled")
    assert one_order["windows"] == other_order["windows"]  # after the pooled model / alone
    assert one_order["pooled"] == other_order["pooled"]  # alone / after the windows model
