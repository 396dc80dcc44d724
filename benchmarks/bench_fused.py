"""Latency in tract of the fused-op options of ``fx2nnef llm``, each on against all off (not a test).

    python benchmarks/bench_fused.py [--size 160m] [--runs 8] [--rounds 3] [--variants none,rms_norm,rope,sdpa,all] [--check]

A variant is ``none``, ``all``, or fused names joined by ``+`` (``rms_norm+rope``).

The random Llama of ``bench_llm.py`` (160M: hidden 1024, 8 layers, 16 heads, 8 kv heads, vocab
32000) is saved to a temporary folder and exported once per variant (``--fused``; "none" is the
default export). Each asset is timed in tract, in a child process on one thread, for prompt
processing (S=128, P=0) and one decoding step (S=1 after P=128), exactly as ``bench_llm.py``
times it. The variants are timed in turn, ``--rounds`` times over (the machine's load drifts),
``--runs`` runs each time; printed per variant, by the wall clock and by the process' CPU time:
the fastest run and the median of all runs, with their ratios to "none" (on a shared machine
the CPU time and the fastest run are the steadier figures). ``--check``
also runs the export-time checks in tract (slower; the test suite checks the fused ops on small
models).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef and bench_llm
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_llm import PAST, PROMPT, SIZES, save_random_llama  # noqa: E402

VARIANTS = ("none", "rms_norm", "rope", "sdpa", "all")


def export_variant(folder: Path, out: Path, variant: str, check: bool) -> dict:
    from fx2nnef.llm import export_causal_lm

    t0 = time.perf_counter()
    r = export_causal_lm(folder, out, check=check, generate=0, overwrite=True,
                         fused=() if variant == "none" else variant.replace("+", ","))
    return {"export_s": round(time.perf_counter() - t0, 1), "fused": r.manifest.get("fused", {})}


def tract_times(asset: Path, runs: int) -> dict:
    """``{"prompt_ms": [...], "decode_ms": [...], "prompt_cpu_ms": [...], "decode_cpu_ms": [...]}``:
    every run of the asset in tract, in a child process on one thread (as ``bench_llm.tract_latency``,
    which keeps only the median), timed by the wall clock and by the process' CPU time (which
    other programs on the machine disturb far less)."""
    code = textwrap.dedent(f"""
        import json, sys, time, numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'fx2nnef' / 'llm')!r})
        from _generate_child import TractCausalLM
        lm = TractCausalLM.load({str(asset)!r})
        ids = np.random.default_rng(0).integers(0, 200, (1, {PROMPT + 1}))
        def times(fn, clock):
            fn(); ts = []
            for _ in range({runs}):
                t = clock(); fn(); ts.append(round(1000 * (clock() - t), 3))
            return ts
        _, past = lm.step(ids[:, :{PAST}], lm.empty_cache())
        prompt = lambda: lm.step(ids[:, :{PROMPT}], lm.empty_cache())
        decode = lambda: lm.step(ids[:, {PAST}:{PAST + 1}], past)
        print(json.dumps({{"prompt_ms": times(prompt, time.perf_counter), "decode_ms": times(decode, time.perf_counter),
                          "prompt_cpu_ms": times(prompt, time.process_time),
                          "decode_cpu_ms": times(decode, time.process_time)}}))
    """)
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="160m", choices=list(SIZES))
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--check", action="store_true", help="run the export-time checks in tract too")
    ns = p.parse_args(argv)
    variants = [v.strip() for v in ns.variants.split(",") if v.strip()]
    keys = ("prompt_ms", "decode_ms", "prompt_cpu_ms", "decode_cpu_ms")
    facts: dict = {v: {k: [] for k in keys} for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench_fused_") as tmp:
        tmp = Path(tmp)
        save_random_llama(ns.size, tmp / "model")
        for v in variants:
            facts[v].update(export_variant(tmp / "model", tmp / v, v, ns.check))
            print(f"exported {v}: {facts[v]['fused'] or 'no fused ops'} in {facts[v]['export_s']} s", flush=True)
        for r in range(ns.rounds):
            for v in variants:
                t = tract_times(tmp / v / "model.nnef.tgz", ns.runs)
                for k in keys:
                    facts[v][k] += t[k]
                print(f"round {r + 1} {v}: prompt {statistics.median(t['prompt_ms'])} ms, "
                      f"decode {statistics.median(t['decode_ms'])} ms (medians)", flush=True)
    best = {v: {k: min(facts[v][k]) for k in keys} for v in variants}
    median = {v: {k: statistics.median(facts[v][k]) for k in keys} for v in variants}
    base = variants[0]
    print(f"\n{ns.size} Llama in tract, 1 thread, {ns.rounds} rounds x {ns.runs} runs: fastest run / median "
          f"in ms (ratio to {base})")
    for clock, pair in (("wall", ("prompt_ms", "decode_ms")), ("CPU time", ("prompt_cpu_ms", "decode_cpu_ms"))):
        print(f"{clock:10} {'prompt S=128':>36} {'decode S=1, P=128':>36}")
        for v in variants:
            cells = [f"{best[v][k]:8.2f} ({best[v][k] / best[base][k]:.2f}x) / {median[v][k]:8.2f} "
                     f"({median[v][k] / median[base][k]:.2f}x)" for k in pair]
            print(f"{v:10} {cells[0]:>36} {cells[1]:>36}")
    print(json.dumps({"size": ns.size, "runs": ns.runs, "rounds": ns.rounds, "fastest": best, "median": median,
                      "fused": {v: facts[v]["fused"] for v in variants}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
