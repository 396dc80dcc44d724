"""The fx2nnef command: export from a factory, errors without a traceback."""
import subprocess
import sys
import textwrap

import pytest

from fx2nnef.cli import main


def test_export_from_factory(tmp_path, capsys, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent("""
        import torch
        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), (torch.randn(2, 4),)
    """))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m.nnef.tgz"
    assert main(["export", "mymodels:make", str(out), "--dynamic-axes", '{"input": {"0": "B"}}']) == 0
    printed = capsys.readouterr().out
    assert out.exists() and "check in tract: OK" in printed and "B=" in printed


def test_export_branches_on_sizes(tmp_path, capsys, monkeypatch):
    """By default an `if` on a dynamic size is exported both ways; --branches example keeps the
    example's side and asserts the range."""
    (tmp_path / "sizemodels.py").write_text(textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                if x.shape[1] < 7:
                    return x.flip(1)
                return x * 2
        def make():
            return M(), (torch.randn(2, 10),)
    """))
    monkeypatch.chdir(tmp_path)
    dyn = '{"x": {"1": "S"}}'
    assert main(["export", "sizemodels:make", str(tmp_path / "a.nnef.tgz"), "--dynamic-axes", dyn]) == 0
    printed = capsys.readouterr().out
    assert "exported both ways" in printed and "valid only for" not in printed, printed
    assert main(["export", "sizemodels:make", str(tmp_path / "b.nnef.tgz"), "--dynamic-axes", dyn,
                 "--branches", "example"]) == 0
    printed = capsys.readouterr().out
    assert "valid only for S >= 7" in printed and "exported both ways" not in printed, printed


def test_export_with_q4_0_weights(tmp_path, capsys, monkeypatch):
    (tmp_path / "q4models.py").write_text(textwrap.dedent("""
        import torch
        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU()), (torch.randn(2, 64),)
    """))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m.nnef.tgz"
    assert main(["export", "q4models:make", str(out), "--weights", "q4_0"]) == 0
    printed = capsys.readouterr().out
    assert "check in tract: OK" in printed and "weights: 1 q4_0, 1 f32" in printed
    assert main(["export", "q4models:make", str(out), "--target", "khronos", "--weights", "q4_0"]) == 1
    assert "KhronosNNEF writes weights in their own dtype" in capsys.readouterr().err


def test_bad_factory_is_a_clean_error(capsys):
    assert main(["export", "no_such_module_xyz:make", "out.nnef.tgz"]) == 1
    assert "cannot import module" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_runs(tmp_path):
    """The README's demo command (covered in the default run by test_models' Llama export)."""
    out = subprocess.run([sys.executable, "-m", "fx2nnef", "demo", "--out", str(tmp_path / "d.nnef.tgz")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "check in tract: OK" in out.stdout
