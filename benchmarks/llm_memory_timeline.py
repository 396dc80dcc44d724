"""Where the peak memory of ``fx2nnef llm`` comes from: a timeline of the process tree's memory
with the export's stage names (a benchmark tool, not a test).

    python benchmarks/llm_memory_timeline.py --size 1b [--src DIR] [--out DIR] [--every 0.25]
                                             [-- extra fx2nnef llm options]

The folder ``--src`` is made with ``bench_llm.save_random_llama`` (bf16) unless it holds one
already. ``fx2nnef llm SRC OUT --dtype f16 --generate 4`` then runs in a child whose every stage
notice (the CLI's, and the pipeline's trace/weights/lower/write/check) is printed with its time;
this process samples the proportional memory (PSS) of the child and of each of its descendants
(the tract children) and reads their high-water marks (VmHWM) at the end.

Printed: per stage, the peak PSS of the tree, of the exporting process and of its children,
as MiB and as a multiple of the weight bytes (the bf16 folder's tensor bytes); then the overall
peak and the stage it fell in. ``--json FILE`` keeps the samples.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_llm  # noqa: E402

DRIVER = textwrap.dedent("""
    import contextlib, sys, time
    import fx2nnef.cli as cli
    from fx2nnef.progress import listening

    @contextlib.contextmanager
    def every_stage(what, quiet=()):
        def show(name, detail):
            print(f"STAGE\t{time.time():.3f}\t{name}\t{detail[:80]}", file=sys.stderr, flush=True)
        with listening(show):
            yield

    cli._stage_lines = every_stage
    sys.exit(cli.main(sys.argv[1:]))
""")


def weight_bytes(src: Path) -> int:
    """The tensor bytes of the folder's safetensors files (their headers' data offsets)."""
    total = 0
    for path in sorted(src.glob("*.safetensors")):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    return total


def _field(path: str, name: str) -> int:
    """A ``kB`` field of a /proc file as bytes (0 when the process is gone)."""
    try:
        with open(path) as f:
            return next(int(line.split()[1]) for line in f if line.startswith(name)) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


def sample(root: int) -> dict:
    """PSS of the exporting process and of its descendants, bytes."""
    pids = bench_llm.process_tree(root)
    own = _field(f"/proc/{root}/smaps_rollup", "Pss:")
    rest = sum(_field(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids[1:])
    return {"t": time.time(), "main": own, "children": rest, "n": len(pids)}


def run(cmd: list, env: dict, log: Path, every: float) -> tuple:
    """Run ``cmd`` sampling its tree every ``every`` s; (samples, high-water marks by pid, exit code)."""
    samples, hwm = [], {}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

        def loop():
            while proc.poll() is None:
                samples.append(sample(proc.pid))
                for p in bench_llm.process_tree(proc.pid):
                    hwm[p] = max(hwm.get(p, 0), _field(f"/proc/{p}/status", "VmHWM:"))
                time.sleep(every)

        sampler = threading.Thread(target=loop, daemon=True)
        sampler.start()
        code = proc.wait()
        sampler.join()
    return samples, hwm, code


def stages_of(log: Path) -> list:
    """``[(time, name)]`` of the STAGE lines the driver printed."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("STAGE\t"):
            _, t, name = line.split("\t")[:3]
            found.append((float(t), name))
    return found


def report(samples: list, stages: list, weights: int, start: float) -> None:
    mib = 2**20
    print(f"weights {weights / mib:.0f} MiB; samples {len(samples)}")
    print("| from s | stage | peak tree MiB (x weights) | main at that peak | children at that peak |")
    print("|---|---|---|---|---|")
    bounds = stages + [(float("inf"), "end")]
    for (t0, name), (t1, _) in zip(bounds, bounds[1:]):
        inside = [s for s in samples if t0 <= s["t"] < t1]
        if not inside:
            continue
        top = max(inside, key=lambda s: s["main"] + s["children"])
        tree = top["main"] + top["children"]
        print(f"| {t0 - start:7.1f} | {name} | {tree / mib:.0f} ({tree / weights:.2f}x) | {top['main'] / mib:.0f} | "
              f"{top['children'] / mib:.0f} |")
    top = max(samples, key=lambda s: s["main"] + s["children"])
    where = [name for t, name in stages if t <= top["t"]]
    tree = top["main"] + top["children"]
    print(f"peak tree PSS {tree / mib:.0f} MiB = {tree / weights:.2f}x the weights, at {top['t'] - start:.1f} s "
          f"in stage {where[-1] if where else '?'} (main {top['main'] / mib:.0f}, children {top['children'] / mib:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1b", choices=list(bench_llm.SIZES))
    parser.add_argument("--src", type=Path, default=None, help="the bf16 folder (made here when it has no weights)")
    parser.add_argument("--out", type=Path, default=None, help="where the asset goes (default: a temp dir)")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--json", type=Path, default=None, help="write the samples and stages here")
    parser.add_argument("extra", nargs="*", help="more fx2nnef llm options (after --)")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llm_mem_") as temp:
        src = ns.src or Path(temp) / "src"
        if not (src / "model.safetensors").exists():
            t = time.perf_counter()
            bench_llm.save_random_llama(ns.size, src, "bf16")
            print(f"wrote {src} in {time.perf_counter() - t:.0f} s", flush=True)
        weights = weight_bytes(src)
        out = ns.out or Path(temp) / "out"
        cmd = [sys.executable, "-c", DRIVER, "llm", str(src), str(out), "--overwrite", "--dtype", "f16",
               "--generate", "4", *ns.extra]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = out.with_name(out.name + ".log")
        start = time.time()
        samples, hwm, code = run(cmd, env, log, ns.every)
        print(f"exit {code} after {time.time() - start:.1f} s; log {log}")
        print(log.read_text(errors="replace")[-1500:] if code else "")
        stages = stages_of(log)
        report(samples, stages, weights, start)
        print("high-water marks (RSS) by process, MiB: "
              + ", ".join(f"{p}: {v / 2**20:.0f}" for p, v in sorted(hwm.items())))
        if ns.json:
            ns.json.write_text(json.dumps({"samples": samples, "stages": stages, "weights": weights,
                                           "start": start, "hwm": hwm}))


if __name__ == "__main__":
    main()
