"""What tract 0.23.9 needs to hold a tied embedding (one table read by a ``gather`` and by the
logits' matmul), measured on hand-written NNEF (a benchmark tool, not a test).

    python benchmarks/tract_tied_table.py [--vocab 128256] [--dim 2048] [--rounds 7]

One f16 table ``[V, D]``, one graph per form, each run in its own process (one thread): load,
``into_runnable``, then ``logits = gather(table, ids) @ table.T`` at S=1 (a decode step) ``--rounds``
times. Printed per form: RSS after load and after ``into_runnable``, the peak (VmHWM), and the
median CPU ms of a step.

- ``two copies``: the gather's table and a second variable ``[1, V, D]`` for the matmul (what an
  export writes for a tied weight): tract packs the second once, at ``into_runnable``.
- ``two copies, blocks``: the same, the matmul's copy as row blocks of 64 MiB (``weight_block_bytes``).
- ``shared``: one variable read by both (the matmul through an ``unsqueeze``).
- ``shared, same label``: two variables naming the same data file (tract loads it once).

With one constant, tract's constant folding will not pack a weight of more than 4 MiB that has
another reader (``PropConst``: it refuses to duplicate a large input), so the matmul packs the
table at every call: less memory, and each step several times slower.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fx2nnef.nnef_emit.dat import dat_bytes  # noqa: E402

CHILD = textwrap.dedent("""
    import ctypes, json, sys, time, numpy as np, tract
    ctypes.CDLL("libc.so.6").mallopt(-3, 2**20)  # as fx2nnef's tract child (M_MMAP_THRESHOLD)
    def rss(name):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) // 1024 for l in f if l.startswith(name))
    path, rounds = sys.argv[1], int(sys.argv[2])
    model = tract.nnef().load(path)
    loaded = rss("VmRSS:")
    run = model.into_runnable()
    runnable = rss("VmRSS:")
    ids = np.array([[7]], dtype=np.int64)
    times = []
    for _ in range(rounds + 1):
        t = time.process_time(); run.run([ids]); times.append(1000 * (time.process_time() - t))
    print(json.dumps({"loaded": loaded, "runnable": runnable, "peak": rss("VmHWM:"),
                      "ms": sorted(times[1:])[rounds // 2]}))
""")

HEADER = ("version 1.0;\n\nextension tract_registry tract_core;\n\n"
          "graph G( ids ) -> ( logits )\n{\n    ids = external<integer>(shape = [1, 1]);\n")


def forms(vocab: int, dim: int, block_rows: int) -> dict:
    """``{form: (graph text, {file: array})}``; ``table`` is the [V, D] array."""
    gather = "    x = tract_core_gather(table, ids, axis = 0);\n"
    table = f"    table = variable<scalar>(shape = [{vocab}, {dim}], label = 'table');\n"
    head = f"    head = variable<scalar>(shape = [1, {vocab}, {dim}], label = 'head');\n"
    product = "    logits = matmul(x, {w}, transposeA = false, transposeB = true);\n"
    blocks, names = [], []
    for k, start in enumerate(range(0, vocab, block_rows)):
        rows = min(block_rows, vocab - start)
        blocks.append(f"    head_{k} = variable<scalar>(shape = [1, {rows}, {dim}], label = 'head_{k}');\n"
                      + f"    part_{k} = matmul(x, head_{k}, transposeA = false, transposeB = true);\n")
        names.append(f"part_{k}")
    concat = f"    logits = concat([{', '.join(names)}], axis = 2);\n"
    again = f"    again = variable<scalar>(shape = [{vocab}, {dim}], label = 'table');\n"
    return {
        "two copies": table + gather + head + product.format(w="head"),
        "two copies, blocks": table + gather + "".join(blocks) + concat,
        "shared": table + gather + "    w = unsqueeze(table, axes = [0]);\n" + product.format(w="w"),
        "shared, same label": table + gather + again + "    w = unsqueeze(again, axes = [0]);\n"
        + product.format(w="w"),
    }


def write(folder: Path, body: str, data: np.ndarray, block_rows: int) -> None:
    folder.mkdir(parents=True)
    (folder / "graph.nnef").write_text(HEADER + body + "}\n")
    (folder / "table.dat").write_bytes(dat_bytes(data))
    if "'head'" in body:
        (folder / "head.dat").write_bytes(dat_bytes(data[None]))
    for k, start in enumerate(range(0, data.shape[0], block_rows)):
        if f"'head_{k}'" in body:
            (folder / f"head_{k}.dat").write_bytes(dat_bytes(data[None, start:start + block_rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=7)
    ns = parser.parse_args()
    data = (0.02 * np.random.default_rng(0).standard_normal((ns.vocab, ns.dim), dtype=np.float32)).astype(np.float16)
    block_rows = max(1, (64 << 20) // (2 * ns.dim))
    print(f"table [{ns.vocab}, {ns.dim}] f16: {data.nbytes / 2**20:.0f} MiB")
    print("| form | RSS loaded MiB | RSS runnable MiB | peak MiB | step CPU ms |")
    print("|---|---|---|---|---|")
    env = {"RAYON_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory(prefix="tied_table_") as temp:
        for k, (form, body) in enumerate(forms(ns.vocab, ns.dim, block_rows).items()):
            folder = Path(temp) / f"form{k}"
            write(folder, body, data, block_rows)
            done = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(ns.rounds)],
                                  capture_output=True, text=True, env=env)
            if done.returncode:
                print(f"| {form} | failed: {done.stderr.strip().splitlines()[-1:]} |")
            else:
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"| {form} | {r['loaded']} | {r['runnable']} | {r['peak']} | {r['ms']:.1f} |", flush=True)
            subprocess.run(["rm", "-rf", str(folder)])


if __name__ == "__main__":
    main()
