"""Latency in tract of the fused-op options of ``fx2nnef llm``, each on against all off (not a test).

    python benchmarks/bench_fused.py [--size 160m] [--runs 10] [--rounds 2] [--variants none,rms_norm,rope,sdpa,all] [--check]

The random Llama of ``bench_llm.py`` (160M: hidden 1024, 8 layers, 16 heads, 8 kv heads, vocab
32000) is saved to a temporary folder and exported once per variant (``--fused``; "none" is the
default export). Each asset is timed in tract, in a child process on one thread, for prompt
processing (S=128, P=0) and one decoding step (S=1 after P=128), exactly as ``bench_llm.py``
times it. The variants are timed in turn, ``--rounds`` times over (the machine's load drifts);
each figure is the lowest of the per-round medians, with the ratio to "none". ``--check`` also
runs the export-time checks in tract (slower; the test suite checks the fused ops on small models).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef and bench_llm
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_llm import SIZES, save_random_llama, tract_latency  # noqa: E402

VARIANTS = ("none", "rms_norm", "rope", "sdpa", "all")


def export_variant(folder: Path, out: Path, variant: str, check: bool) -> dict:
    from fx2nnef.llm import export_causal_lm

    t0 = time.perf_counter()
    r = export_causal_lm(folder, out, check=check, generate=0, overwrite=True,
                         fused=() if variant == "none" else variant)
    return {"export_s": round(time.perf_counter() - t0, 1), "fused": r.manifest.get("fused", {})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="160m", choices=list(SIZES))
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--check", action="store_true", help="run the export-time checks in tract too")
    ns = p.parse_args(argv)
    variants = [v.strip() for v in ns.variants.split(",") if v.strip()]
    facts: dict = {v: {"prompt_ms": [], "decode_ms": []} for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench_fused_") as tmp:
        tmp = Path(tmp)
        save_random_llama(ns.size, tmp / "model")
        for v in variants:
            facts[v].update(export_variant(tmp / "model", tmp / v, v, ns.check))
            print(f"exported {v}: {facts[v]['fused'] or 'no fused ops'} in {facts[v]['export_s']} s", flush=True)
        for r in range(ns.rounds):
            for v in variants:
                t = tract_latency(tmp / v / "model.nnef.tgz", ns.runs)
                facts[v]["prompt_ms"].append(t["prompt_ms"])
                facts[v]["decode_ms"].append(t["decode_ms"])
                print(f"round {r + 1} {v}: prompt {t['prompt_ms']} ms, decode {t['decode_ms']} ms", flush=True)
    base = {k: min(facts[variants[0]][k]) for k in ("prompt_ms", "decode_ms")}
    print(f"\n{ns.size} Llama in tract, 1 thread, lowest of {ns.rounds} medians of {ns.runs} runs "
          f"(ratio to {variants[0]}):")
    print(f"{'variant':10} {'prompt S=128':>22} {'decode S=1, P=128':>22}")
    for v in variants:
        cells = [f"{min(facts[v][k]):9.2f} ms ({min(facts[v][k]) / base[k]:.3f}x)" for k in ("prompt_ms", "decode_ms")]
        print(f"{v:10} {cells[0]:>22} {cells[1]:>22}")
    print(json.dumps({"size": ns.size, "runs": ns.runs, "rounds": ns.rounds, "variants": facts}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
