"""Results that hold on any x86-64 CPU, not only on the one running the suite.

tract picks its kernels from the CPU's features: an AVX-512 machine and an AVX2 machine
sum in different orders and get different roundings (the tiny Llama's logits differ from
torch by 1.5e-7 on one and 1.8e-7 on the other). valgrind does not emulate AVX-512, so
running the tract child under it (``FX2NNEF_CHILD_PREFIX``) makes tract take its AVX2/FMA
kernels here too: the demo export must pass its check at the default level that way.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import fx2nnef
from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama

VALGRIND = "valgrind -q --tool=none"
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


@needs_valgrind
def test_valgrind_hides_avx512():
    probe = "import numpy._core._multiarray_umath as m; print(m.__cpu_features__['AVX512F'], m.__cpu_features__['AVX2'])"
    out = subprocess.run(VALGRIND.split() + [sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@needs_valgrind
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_demo_llama_checks_with_avx2_kernels(tmp_path, monkeypatch, attn):
    monkeypatch.setenv("FX2NNEF_CHILD_PREFIX", VALGRIND)
    result = fx2nnef.export(tiny_llama(attn), (example_input_ids(8),), tmp_path / "llama.nnef.tgz",
                            target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}),
                            input_names=["input_ids"], output_names=["logits"])
    assert result.check.ok
    assert all(d.max_abs > 0 for _, diffs in result.check.cases for d in diffs)  # a real float comparison
