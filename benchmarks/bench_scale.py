"""Export cost of random Llamas at real sizes, printed as figures (not a test).

    python benchmarks/bench_scale.py [--sizes l4h512,20m,160m,1b] [--modes static,dynamic] [--no-slope]
                                     [--attention eager|sdpa] [--dtype f32|bf16] [--check] [--repeat N]

For each size and mode (static shapes, or dynamic batch B and sequence S), a fresh child
process builds a random Llama (eager attention as in issue 7; ``--attention sdpa`` for
transformers' default, whose Python decisions on ``S == 1`` cost real check runs), wrapped to
take ``(input_ids, attention_mask)`` of length 32 and return the logits, and exports it to
``.nnef.tgz`` with ``check_io=False`` (``--check``: with the check in tract, whose reference runs
and child process the figures then include; ``--dtype bf16``: the model in bfloat16, written and
checked in float32, the RSS ratio then relative to the bfloat16 bytes). Printed per run: ``result.timings`` (``graph_runs`` and
``eager_runs`` count the real forward passes of the capture, ``fake_runs`` its shape-only runs
on fake tensors, ``light_runs`` the graph's runs at the example with input data on meta tensors
(dynamic without check_io, and static: its one real run then goes on beside the lowering and the
write, as does a dynamic export's check, and what is left of them to wait for counts in ``trace``), ``shapes`` the seconds of symbolic replay and fake runs), the export wall time
divided by the floor (one eager forward, the fastest of three, plus writing the weight bytes
with a plain file write, both measured in the same child), the peak RSS growth of the export
call divided by the weight bytes (``ru_maxrss`` after the call minus the resident size before
it, the peak being reset just before the call), and the asset size. Each size also runs with
half its layers, and the per-layer growth of export time and peak RSS is printed (issue 7:
both grow linearly with the layers); ``--no-slope`` skips those runs.

The machine's other users change the figures by some percent, and the time to write the same
bytes by up to 3x on these virtual machines; run a size twice to see the spread. ``--repeat N``
exports each size and mode in N fresh child processes (each measuring its own floor, the first
call's costs included in each) and adds a line per mode with the fastest of the N of each figure
(export, forward, plain write), and the ratio of the fastest dynamic export to the fastest static
one: the figures with the least of the machine's noise, measured the same way for the export
and its floor. The slopes use the first child of each. Both the timed plain write and the export
start after an untimed write of the same bytes (see ``_plain_write``), as the forward starts
after a warm-up run.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEQ = 32
BATCH = 2
# hidden, intermediate, layers, heads, kv heads (vocab 32000 for all)
SIZES = {
    "l4h512": (512, 1408, 4, 8, 4),  # the 4-layer, hidden-512 Llama of issue 7's capture profile
    "20m": (256, 704, 4, 4, 2),
    "160m": (1024, 2816, 8, 16, 8),
    "1b": (2048, 8192, 16, 32, 8),
}
MODES = ("static", "dynamic")


def build(size: str, layers: int | None = None, attention: str = "eager"):
    """A random Llama of ``size`` taking ``(input_ids, attention_mask)`` and returning logits."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, inter, n_layers, heads, kv = SIZES[size]
    config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers or n_layers,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=32000,
                         max_position_embeddings=2048)
    config._attn_implementation = attention
    torch.manual_seed(0)
    lm = LlamaForCausalLM(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask):
            return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    return Wrapped().eval()


def _resident_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _reset_peak() -> bool:
    """Make ru_maxrss restart from the current resident size (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _tensors(model) -> list:
    """Every parameter and buffer once (tied weights counted once)."""
    seen, out = set(), []
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append(t)
    return out


def child(size: str, mode: str, layers: int | None, out_dir: Path, attention: str = "eager",
          dtype: str = "f32", check: bool = False) -> dict:
    """One measured export in this (fresh) process; returns the figures."""
    import torch

    import fx2nnef

    fx2nnef.export, fx2nnef.TractNNEF  # noqa: B018 - import fx2nnef is lazy: load the package here, not in the timed call
    model = build(size, layers, attention)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    vocab = model.lm.config.vocab_size
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    tensors = _tensors(model)
    weight_bytes = sum(t.numel() * t.element_size() for t in tensors)
    with torch.no_grad():
        model(ids, mask)  # warm-up: first-call costs are not part of the floor
        forward = float("inf")
        for _ in range(3):  # the fastest of 3: the machine is shared
            t0 = time.perf_counter()
            model(ids, mask)
            forward = min(forward, time.perf_counter() - t0)
    plain = out_dir / "plain.bin"
    _plain_write(tensors, plain)  # warm-up, as for the forward: see _plain_write
    os.sync()  # start from a disk with nothing left to write, as the export below does
    write = _plain_write(tensors, plain)
    dynamic = {"input_ids": {0: "B", 1: "S"}, "attention_mask": {0: "B", 1: "S"}} if mode == "dynamic" else {}
    asset = out_dir / f"llama_{size}_{mode}.nnef.tgz"
    gc.collect()
    _plain_write(tensors, plain)  # the same warm-up right before the export
    os.sync()
    reset = _reset_peak()
    before = _resident_kib() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    result = fx2nnef.export(model, (ids, mask), asset,
                            target=fx2nnef.TractNNEF(check_io=check, dynamic_axes=dynamic),
                            input_names=["input_ids", "attention_mask"], output_names=["logits"])
    total = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "size": size, "mode": mode + (" bf16" if dtype == "bf16" else "") + (" +check" if check else ""),
        "layers": model.lm.config.num_hidden_layers,
        "params": sum(t.numel() for t in tensors), "weight_bytes": weight_bytes,
        "forward": forward, "plain_write": write, "export": total,
        "timings": {k: round(v, 3) for k, v in result.timings.items()},
        "rss_growth_bytes": (peak - before) * 1024, "peak_reset": reset,
        "asset_bytes": _size_then_remove(asset),
    }


def _plain_write(tensors: list, path: Path) -> float:
    """Seconds to write the weight bytes to ``path`` with plain writes; the file is then deleted.

    Untimed, it is also the warm-up before the timed plain write and before the export, so that
    neither pays alone what the first large write after a while costs on these virtual machines:
    on the first of several passes, the last hundreds of MiB are written 5-10 times slower than
    on the next ones (page-cache pages the host has not backed yet, freed and reused once the file
    is deleted), which put up to 1.4 s on whichever of the two came first."""
    import torch

    t0 = time.perf_counter()
    with open(path, "wb") as handle:
        for t in tensors:
            handle.write(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    seconds = time.perf_counter() - t0
    path.unlink()
    return seconds


def _size_then_remove(asset: Path) -> int:
    """The asset's size; the asset is then deleted, so that its pages still waiting to reach the
    disk do not slow down the writes measured after it (the next mode's floor and export)."""
    size = asset.stat().st_size
    asset.unlink()
    return size


def run_child(size: str, mode: str, layers: int | None, out_dir: Path, attention: str = "eager",
              dtype: str = "f32", check: bool = False) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", size, mode, str(layers or 0), str(out_dir),
           "--attention", attention, "--dtype", dtype] + (["--check"] if check else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{size} {mode} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def describe(r: dict) -> str:
    floor = r["forward"] + r["plain_write"]
    stages = ", ".join(f"{k} {v}" if isinstance(v, int) else f"{k} {v:.2f}" for k, v in r["timings"].items())
    return (f"{r['size']:>5} {r['mode']:<7} L={r['layers']:<2} {r['params'] / 1e6:6.1f} M params "
            f"{r['weight_bytes'] / 2**20:7.0f} MiB | export {r['export']:6.2f} s = {r['export'] / floor:5.2f}x floor "
            f"(forward {r['forward']:.2f} + write {r['plain_write']:.2f}) | stages: {stages} | "
            f"peak RSS +{r['rss_growth_bytes'] / 2**20:.0f} MiB = {r['rss_growth_bytes'] / r['weight_bytes']:.2f}x "
            f"weights | asset {r['asset_bytes'] / 2**20:.0f} MiB")


def fastest(runs: list) -> dict:
    """The first run's figures with the fastest export, forward and plain write of ``runs``."""
    return {**runs[0], **{k: min(r[k] for r in runs) for k in ("export", "forward", "plain_write")}}


def describe_fastest(r: dict, n: int) -> str:
    floor = r["forward"] + r["plain_write"]
    return (f"      {r['size']} {r['mode']}: fastest of {n}: export {r['export']:.2f} s = {r['export'] / floor:.2f}x "
            f"floor (fastest forward {r['forward']:.2f} + fastest write {r['plain_write']:.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20m,160m", help="comma-separated among " + ",".join(SIZES))
    ap.add_argument("--modes", default="static,dynamic", help="comma-separated among " + ",".join(MODES))
    ap.add_argument("--no-slope", dest="slope", action="store_false",
                    help="skip the runs with half the layers (the per-layer slopes)")
    ap.add_argument("--attention", default="eager", choices=("eager", "sdpa"),
                    help="the Llama's attention implementation (default eager, as in issue 7)")
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"), help="the model's float type")
    ap.add_argument("--check", action="store_true", help="export with check_io (tract run and reference)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="export each size and mode in N fresh processes; print the fastest of each figure")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        size, mode, layers, out_dir = ns.child
        print(json.dumps(child(size, mode, int(layers) or None, Path(out_dir), ns.attention, ns.dtype, ns.check)))
        return
    sizes = [s.strip() for s in ns.sizes.split(",") if s.strip()]
    modes = [m.strip() for m in ns.modes.split(",") if m.strip()]
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size {s!r}; choose among {', '.join(SIZES)}")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; choose among {', '.join(MODES)}")
    if ns.repeat < 1:
        ap.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for size in sizes:
            results = {}
            for mode in modes:
                runs = []
                for _ in range(ns.repeat):
                    runs.append(run_child(size, mode, None, Path(tmp), ns.attention, ns.dtype, ns.check))
                    print(describe(runs[-1]), flush=True)
                r = runs[0]
                results[mode] = fastest(runs)
                if ns.repeat > 1:
                    print(describe_fastest(results[mode], len(runs)), flush=True)
                if ns.slope:
                    half = max(1, SIZES[size][2] // 2)
                    h = run_child(size, mode, half, Path(tmp), ns.attention, ns.dtype, ns.check)
                    print(describe(h), flush=True)
                    dl = r["layers"] - h["layers"]
                    if dl:
                        print(f"      per-layer slope ({mode}): export {(r['export'] - h['export']) / dl:.3f} s/layer, "
                              f"peak RSS {(r['rss_growth_bytes'] - h['rss_growth_bytes']) / dl / 2**20:.0f} MiB/layer, "
                              f"weights {(r['weight_bytes'] - h['weight_bytes']) / dl / 2**20:.0f} MiB/layer", flush=True)
            if "static" in results and "dynamic" in results:
                ratio = results["dynamic"]["export"] / results["static"]["export"]
                of = f" (fastest of {ns.repeat} each)" if ns.repeat > 1 else ""
                print(f"      {size}: dynamic / static export time = {ratio:.2f}{of}", flush=True)


if __name__ == "__main__":
    main()
