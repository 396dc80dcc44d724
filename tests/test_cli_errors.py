"""The fx2nnef command on bad input: one 'fx2nnef: error:' line, the exit code, no traceback
(unless --debug), nothing left on disk. Each case runs the command as a user does, in a child."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fx2nnef
from fx2nnef import cli
from fx2nnef.errors import InvalidArgumentError

ROOT = Path(fx2nnef.__file__).resolve().parents[1]
MODELS = textwrap.dedent("""
    import torch

    class Bad(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            return y.view(3, 5)

    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x)

    def bad():
        return Bad(), (torch.randn(2, 4),)

    def good():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 3), (torch.randn(2, 4),)

    def broken_factory():
        raise RuntimeError("factory broke")

    def bessel():
        return torch.nn.Sequential(torch.nn.Linear(4, 4), Bessel()), (torch.rand(2, 4),)

    class DataIf(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    class DataWhile(torch.nn.Module):
        def forward(self, x):
            from torch._higher_order_ops.while_loop import while_loop

            n = torch.zeros((), dtype=torch.int64)
            return while_loop(lambda x, n: x.abs().amax() >= 1.0, lambda x, n: (x / 2, n + 1), (x, n))

    class ThroughNumpy(torch.nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2)

    def data_if():
        return DataIf(), (torch.rand(2, 4),)

    def data_while():
        return DataWhile(), (torch.randn(3, 4) * 20,)

    def through_numpy():
        return ThroughNumpy(), (torch.rand(2, 4),)

    def quantized():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8), (torch.rand(3, 8),)
""")


def run(*args, cwd, extra_path=()):
    """``fx2nnef ARGS`` in a child (this checkout's fx2nnef first on the path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, extra_path), str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "fx2nnef", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_error(proc, code, *words):
    """Exit ``code``, one 'fx2nnef: error:' line holding ``words``, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fx2nnef: error:")]
    assert len(errors) == 1 and proc.stderr.count("fx2nnef: error:") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def listing(folder: Path) -> set:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with the factories and a tiny Llama written by save_pretrained."""
    from transformers import LlamaConfig, LlamaForCausalLM
    import torch

    folder = tmp_path_factory.mktemp("cli_errors")
    (folder / "clifactories.py").write_text(MODELS)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(folder / "llama")
    return folder


def llama_copy(work: Path, name: str, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(work / "llama", tmp_path / name))


def test_llm_truncated_config(work, tmp_path):
    src = llama_copy(work, "src", tmp_path)
    (src / "config.json").write_text((src / "config.json").read_text()[:200])
    before = listing(tmp_path)
    line = assert_one_error(run("llm", src, tmp_path / "out", cwd=tmp_path), 1, "config.json", "not valid JSON",
                            "save_pretrained")
    assert "truncated" in line
    assert listing(tmp_path) == before


def test_llm_inconsistent_config(work, tmp_path):
    src = llama_copy(work, "src", tmp_path)
    config = json.loads((src / "config.json").read_text())
    config["num_attention_heads"] = 3
    (src / "config.json").write_text(json.dumps(config))
    before = listing(tmp_path)
    assert_one_error(run("llm", src, tmp_path / "a" / "out", cwd=tmp_path), 1, "cannot load the model",
                     "not a multiple of the number of attention heads")
    assert listing(tmp_path) == before  # the parent folder it made is gone


def test_llm_unknown_model_type(work, tmp_path):
    src = llama_copy(work, "src", tmp_path)
    config = json.loads((src / "config.json").read_text())
    config["model_type"] = "no_such_model"
    (src / "config.json").write_text(json.dumps(config))
    before = listing(tmp_path)
    assert_one_error(run("llm", src, tmp_path / "out", cwd=tmp_path), 1, "no_such_model", "does not recognize")
    assert listing(tmp_path) == before


def test_llm_no_weights_file(work, tmp_path):
    src = llama_copy(work, "src", tmp_path)
    (src / "model.safetensors").unlink()
    before = listing(tmp_path)
    assert_one_error(run("llm", src, tmp_path / "out", cwd=tmp_path), 1, "model.safetensors", "Fix the folder")
    assert listing(tmp_path) == before


def test_llm_output_under_a_file(work, tmp_path):
    (tmp_path / "afile").write_text("x")
    before = listing(tmp_path)
    assert_one_error(run("llm", work / "llama", tmp_path / "afile" / "out", cwd=tmp_path), 1,
                     "is a file, not a folder")
    assert listing(tmp_path) == before


def test_llm_unwritable_output_folder(work, tmp_path):
    if os.geteuid() == 0:  # root writes anywhere chmod allows nothing; /sys refuses new folders
        parent = Path("/sys/fx2nnef_cli_test")
        try:
            parent.mkdir()
        except PermissionError:
            pass
        else:
            parent.rmdir()
            pytest.skip("no folder refuses writes to root here")
        words = ("not permitted", "/sys/fx2nnef_cli_test")
    else:
        parent = tmp_path / "readonly"
        parent.mkdir()
        parent.chmod(0o555)
        words = ("permission denied", "readonly")
    assert_one_error(run("llm", work / "llama", parent / "out", cwd=tmp_path), 1, *words)
    assert not (parent / "out").exists()


def test_llm_without_transformers(work, tmp_path):
    fake = tmp_path / "fake" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'transformers'\", "
                                      "name='transformers')\n")
    proc = run("llm", work / "llama", tmp_path / "out", cwd=tmp_path, extra_path=[tmp_path / "fake"])
    assert_one_error(proc, 1, "needs transformers", "pip install transformers")
    assert not (tmp_path / "out").exists()


def test_llm_existing_output_and_f32_parts_use_cli_spellings(work, tmp_path):
    (tmp_path / "out").mkdir()
    line = assert_one_error(run("llm", work / "llama", tmp_path / "out", cwd=tmp_path), 1, "exists", "--overwrite")
    assert "overwrite=True" not in line
    line = assert_one_error(run("llm", work / "llama", tmp_path / "out2", "--force-f32", "norms", cwd=tmp_path), 1,
                            "--force-f32 norms", "--dtype f16")
    assert "dtype='f16'" not in line and not (tmp_path / "out2").exists()


def test_python_api_keeps_python_spellings(tmp_path):
    from fx2nnef.llm import export_causal_lm

    with pytest.raises(InvalidArgumentError, match=r"overwrite=True"):
        export_causal_lm(str(tmp_path), tmp_path)


def test_llm_bad_numbers_are_usage_errors(work, tmp_path):
    assert_one_error(run("llm", work / "llama", tmp_path / "out", "--generate", "-1", cwd=tmp_path), 2,
                     "--generate", ">= 0")
    assert_one_error(run("llm", work / "llama", tmp_path / "out.nnef.tgz", cwd=tmp_path), 1, "folder")
    assert listing(tmp_path) == set()


def test_llm_no_check_says_nothing_was_checked(work, tmp_path):
    """Missing parents are created; a line per stage on stderr; the summary says nothing was checked."""
    out = tmp_path / "a" / "b" / "out"
    proc = run("llm", work / "llama", out, "--no-check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.nnef.tgz").is_file()
    assert "NOT CHECKED" in proc.stdout and "--no-check" in proc.stdout and "check prompt" not in proc.stdout
    stages = [line.split("] ")[1].split(":")[0] for line in proc.stderr.splitlines() if line.startswith("fx2nnef llm [")]
    assert stages == ["load", "trace", "lower", "write", "save"], proc.stderr


def test_export_forward_raises(work, tmp_path):
    out = tmp_path / "m.nnef.tgz"
    proc = run("export", "clifactories:bad", out, cwd=work)
    line = assert_one_error(proc, 1, "forward", "RuntimeError", "invalid for input of size 8")
    assert "clifactories.py:7, in forward: return y.view(3, 5)" in proc.stderr, proc.stderr
    assert "fix the model" in line and not out.exists()
    # --debug: the same line, after the traceback
    proc = run("export", "clifactories:bad", out, "--debug", cwd=work)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and proc.stderr.count("fx2nnef: error:") == 1
    assert not out.exists()


def test_export_factory_raises(work, tmp_path):
    proc = run("export", "clifactories:broken_factory", tmp_path / "m.nnef.tgz", cwd=work)
    assert_one_error(proc, 1, "clifactories:broken_factory", "factory broke")
    assert "in broken_factory: raise RuntimeError" in proc.stderr
    assert listing(tmp_path) == set()


@pytest.mark.parametrize("axes, words", [
    ('{"x": {1: "S"}', ["not valid JSON"]),
    ('{"x": {"one": "S"}}', ["not a whole number"]),
    ('["x"]', ["JSON object"]),
])
def test_export_bad_dynamic_axes(work, tmp_path, axes, words):
    proc = run("export", "clifactories:good", tmp_path / "m.nnef.tgz", "--dynamic-axes", axes, cwd=work)
    assert_one_error(proc, 2, "--dynamic-axes", *words)
    assert listing(tmp_path) == set()


def test_export_paths(work, tmp_path):
    """An unknown suffix is refused (it became a folder); missing parents are made; an existing
    output is kept unless --overwrite."""
    assert_one_error(run("export", "clifactories:good", tmp_path / "m.onnx", cwd=work), 1, "'.onnx'", "*.tar",
                     "folder")
    assert listing(tmp_path) == set()
    out = tmp_path / "a" / "b" / "m.nnef.tgz"
    proc = run("export", "clifactories:good", out, "--no-check", cwd=work)
    assert proc.returncode == 0 and out.is_file(), proc.stderr
    assert "check: not run (--no-check)" in proc.stdout
    before = out.stat().st_mtime_ns
    assert_one_error(run("export", "clifactories:good", out, cwd=work), 1, "exists", "--overwrite")
    assert out.stat().st_mtime_ns == before
    proc = run("export", "clifactories:good", out, "--overwrite", cwd=work)
    assert proc.returncode == 0 and out.stat().st_mtime_ns != before, proc.stderr
    assert listing(tmp_path) == {"a", "a/b", "a/b/m.nnef.tgz"}


def test_diagnose_exit_code(work, tmp_path):
    proc = run("diagnose", "clifactories:bessel", "--json", tmp_path / "r" / "report.json", cwd=work)
    assert_one_error(proc, 1, "does not export", "Bessel")
    assert "piece-by-piece report" in proc.stdout and (tmp_path / "r" / "report.json").is_file()
    assert run("diagnose", "clifactories:good", cwd=work).returncode == 0


def test_help_and_version_do_not_import_torch(tmp_path):
    probe = ("import runpy, sys\n"
             "sys.argv = ['fx2nnef'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('fx2nnef', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print('TORCH' if 'torch' in sys.modules else 'NO TORCH', code, file=sys.stderr)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args in (["--help"], ["export", "--help"], ["llm", "--help"], ["diagnose", "--help"], ["--version"]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=60)
        assert proc.stderr.strip().endswith("NO TORCH 0"), (args, proc.stderr)
        if args == ["--version"]:
            assert proc.stdout.startswith(f"fx2nnef {fx2nnef.__version__} (torch ")
        else:
            assert "usage: fx2nnef" in proc.stdout


def test_every_argument_has_help_and_choices_match_the_library():
    from fx2nnef.ir import WEIGHT_FORMATS
    from fx2nnef.targets import TARGET_CLASSES

    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            assert action.help, f"fx2nnef {name}: {action.dest} has no help"
    assert cli.TARGETS == tuple(TARGET_CLASSES) and cli.WEIGHT_FORMATS == tuple(WEIGHT_FORMATS)


def test_llm_generate_with_no_check_still_generates(work, tmp_path, capsys):
    """--generate N is an explicit request: --no-check skips the other checks, not this one."""
    assert cli.main(["llm", str(work / "llama"), str(tmp_path / "out"), "--no-check", "--generate", "2"]) == 0
    printed = capsys.readouterr().out
    assert "check generate: steps=2" in printed and "equal=True" in printed
    assert "not checked: export, prompt, prompt_with_past, decode (--no-check)" in printed


@pytest.mark.parametrize("factory, cli_words, python_words", [
    ("data_while", ["--max-loop-iterations N"], ["max_loop_iterations=N", "export(..., max_loop_iterations"]),
    ("through_numpy", ["fx2nnef.export(..., leaf_modules=(ItsClass,)) from Python", "--fallback"],
     ["leaf_modules=(ItsClass,) and", "fallback='piece_by_piece'"]),
    ("quantized", ["--weights f16 or --weights q4_0"], ["weights='f16'", "TractNNEF("]),
])
def test_trace_and_lowering_hints_use_cli_spellings(work, tmp_path, factory, cli_words, python_words):
    """The tracer's and the emitter's hints name the command line's flags when it runs them."""
    proc = run("export", f"clifactories:{factory}", tmp_path / "m.nnef.tgz", cwd=work)
    assert proc.returncode == 1, proc.stderr
    for word in cli_words:
        assert word in proc.stderr, (word, proc.stderr)
    for word in python_words:
        assert word not in proc.stderr, (word, proc.stderr)
    assert "Traceback" not in proc.stderr and listing(tmp_path) == set()


def test_select_branches_note_uses_the_cli_flag(work, tmp_path):
    proc = run("export", "clifactories:data_if", tmp_path / "m.nnef.tgz", "--branches", "select", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "note: --branches select: the decision on tensor data" in proc.stdout, proc.stdout
    assert "branches='select'" not in proc.stdout


def test_trace_hints_keep_python_spellings_from_python(tmp_path):
    """The same hints from fx2nnef.export() keep the keyword arguments."""
    import torch

    class ThroughNumpy(torch.nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2)

    with pytest.raises(fx2nnef.errors.TraceError) as err:
        fx2nnef.export(ThroughNumpy(), (torch.rand(2, 4),), tmp_path / "m.nnef.tgz")
    assert "leaf_modules=(ItsClass,) and" in str(err.value) and "fallback='piece_by_piece'" in str(err.value)
    assert "--fallback" not in str(err.value)
