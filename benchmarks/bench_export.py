"""Export cost and inference speed of the tiny Llama, printed as figures (not a test).

    python benchmarks/bench_export.py [--seq 32] [--runs 50]

Prints the time per export stage, the peak RSS growth of the export, and the latency of the
exported asset in tract against eager PyTorch on the same inputs (ratio, both single-threaded,
in separate processes for tract as fx2nnef runs it).
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

import fx2nnef
from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama


def torch_latency(model, ids, runs):
    torch.set_num_threads(1)
    with torch.no_grad():
        model(ids)
        t = time.perf_counter()
        for _ in range(runs):
            model(ids)
    return (time.perf_counter() - t) / runs


def tract_latency(asset: Path, ids, runs):
    code = textwrap.dedent(f"""
        import time, numpy as np, tract
        m = tract.nnef().with_tract_transformers().load({str(asset)!r}).into_runnable()
        x = np.load({str(asset) + '.ids.npy'!r})
        m.run([x])
        t = time.perf_counter()
        for _ in range({runs}):
            m.run([x])
        print((time.perf_counter() - t) / {runs})
    """)
    import numpy as np

    np.save(str(asset) + ".ids.npy", ids.numpy())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--runs", type=int, default=50)
    ns = ap.parse_args()
    model = tiny_llama("sdpa")
    ids = example_input_ids(ns.seq)
    with tempfile.TemporaryDirectory() as tmp:
        asset = Path(tmp) / "llama.nnef.tgz"
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        result = fx2nnef.export(model, (ids,), asset, target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
        total = time.perf_counter() - t
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"export total {total:.2f}s  stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items()))
        print(f"peak RSS growth during export: {(rss1 - rss0) / 1024:.1f} MiB")
        print(f"asset size: {asset.stat().st_size / 1024:.1f} KiB, NNEF ops: {sum(result.nnef_op_counts.values())}")
        tt = torch_latency(model, ids, ns.runs)
        tr = tract_latency(asset, ids, ns.runs)
        print(f"latency S={ns.seq}: torch eager {tt * 1e3:.3f} ms, tract {tr * 1e3:.3f} ms, tract/torch = {tr / tt:.2f}")


if __name__ == "__main__":
    main()
