"""Cost of ``fx2nnef llm`` on a random Llama saved to a folder, printed as a table (not a test).

    python benchmarks/bench_llm.py [--size 20m|160m|1b] [--variants f32,f16,q4_0] [--runs 10] [--profile]

The model is built from a config, saved with ``save_pretrained`` to a temporary folder and
exported from there once per variant as the CLI does (checks on, ``--generate 4``): ``f32``,
``f16`` (``--dtype f16``), ``q4_0`` (f32 compute, ``--weights q4_0``), ``f16_q4_0``,
``f16_f32attn`` / ``f16_f32all`` (f16 with ``force_f32`` attention / all). Per
variant: export wall time, peak RSS growth of the export call, asset size (and its ratio to
the f32 asset), and the latency of prompt processing (S=128, P=0) and decoding (S=1 after
P=128) in tract (one child process, one thread, caches fed back) against torch eager on one
thread, in ``--rounds`` rounds alternating the two engines (f32 for the f32 and q4_0 variants, f16 for the f16 ones). ``--profile`` also prints
the ops that take the most time in tract at both sizes (``Runnable.profile_json``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# hidden, intermediate, layers, heads, kv heads (vocab 32000 for all)
SIZES = {
    "tiny": (64, 128, 2, 4, 2),
    "20m": (256, 704, 4, 4, 2),
    "160m": (1024, 2816, 8, 16, 8),
    "1b": (2048, 8192, 16, 32, 8),
}
PROMPT, PAST = 128, 128


def save_random_llama(size: str, folder: Path) -> int:
    """Save a random Llama of ``size`` to ``folder``; return its weight bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, inter, layers, heads, kv = SIZES[size]
    config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=32000 if size != "tiny" else 256,
                         max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _resident_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def torch_latency(folder: Path, dtype: str, runs: int) -> dict:
    """Eager torch on one thread: prompt and decode with a DynamicCache."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True,
                                                 dtype=torch.float16 if dtype == "f16" else torch.float32).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT + 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        past = model(ids[:, :PAST], past_key_values=DynamicCache(), use_cache=True).past_key_values

        def prompt():
            model(ids[:, :PROMPT], past_key_values=DynamicCache(), use_cache=True)

        def decode():
            cache = DynamicCache(ddp_cache_data=[(l.keys, l.values) for l in past.layers])
            model(ids[:, PAST:PAST + 1], past_key_values=cache, use_cache=True)

        return {"prompt_ms": _times_ms(prompt, runs), "decode_ms": _times_ms(decode, runs)}


def _times_ms(fn, runs: int) -> list:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return [round(1000 * t, 3) for t in times]


def _median(values: list) -> float:
    return sorted(values)[len(values) // 2]


def tract_latency(asset: Path, runs: int) -> dict:
    """The asset in tract, in a child process on one thread: prompt, and one step after P=128."""
    code = textwrap.dedent(f"""
        import json, sys, time, numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'fx2nnef' / 'llm')!r})
        from _generate_child import TractCausalLM
        lm = TractCausalLM.load({str(asset)!r})
        ids = np.random.default_rng(0).integers(0, 200, (1, {PROMPT + 1}))
        def med(fn):
            fn(); ts = []
            for _ in range({runs}):
                t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
            return [round(1000 * t, 3) for t in ts]
        _, past = lm.step(ids[:, :{PAST}], lm.empty_cache())
        out = {{"prompt_ms": med(lambda: lm.step(ids[:, :{PROMPT}], lm.empty_cache())),
               "decode_ms": med(lambda: lm.step(ids[:, {PAST}:{PAST + 1}], past))}}
        print(json.dumps(out))
    """)
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# variant -> (dtype, weights, force_f32)
VARIANTS = {"f32": ("f32", None, ()), "f16": ("f16", None, ()), "q4_0": ("f32", "q4_0", ()),
            "f16_q4_0": ("f16", "q4_0", ()), "f16_f32attn": ("f16", None, ("attention",)),
            "f16_f32all": ("f16", None, ("all",))}


def tract_profile(asset: Path, top: int = 8) -> str:
    """The ops taking the most time in tract (one thread), prompt and decode, as text."""
    code = textwrap.dedent(f"""
        import json, sys, numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'fx2nnef' / 'llm')!r})
        from _generate_child import TractCausalLM
        lm = TractCausalLM.load({str(asset)!r})
        ids = np.random.default_rng(0).integers(0, 200, (1, {PROMPT + 1}))
        _, past = lm.step(ids[:, :{PAST}], lm.empty_cache())
        out = {{}}
        for name, inputs in (("prompt", [ids[:, :{PROMPT}]] + lm.empty_cache()), ("decode", [ids[:, {PAST}:{PAST + 1}]] + past)):
            prof = json.loads(lm.runnable.profile_json([np.asarray(inputs[0], np.int64)] + list(inputs[1:])))
            by_op = {{}}
            for n in prof["nodes"]:
                by_op[n["op_name"]] = by_op.get(n["op_name"], 0.0) + n.get("secs_per_iter", 0.0)
            out[name] = [1000 * prof["profiling_info"]["secs_per_iter"],
                         sorted(((k, 1000 * v) for k, v in by_op.items()), key=lambda kv: -kv[1])[:{top}]]
        print(json.dumps(out))
    """)
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    lines = []
    for name, (total, ops) in facts.items():
        lines.append(f"  {name}: {total:.2f} ms per run: " + ", ".join(f"{op} {ms:.2f}" for op, ms in ops))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="20m", choices=list(SIZES))
    parser.add_argument("--variants", default="f32,f16,q4_0", help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--generate", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10, help="timed runs per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds alternating tract and torch")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--profile", action="store_true", help="print the costliest tract ops of each asset")
    ns = parser.parse_args()
    variants = [v for v in ns.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    from fx2nnef.llm import export_causal_lm

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as temp:
        src = Path(temp) / "src"
        weight_bytes = save_random_llama(ns.size, src)
        print(f"size {ns.size}: {weight_bytes / 2**20:.1f} MiB of f32 weights; {PROMPT=} {PAST=}; 1 thread", flush=True)
        for variant in variants:
            dtype, weights, force_f32 = VARIANTS[variant]
            out = Path(temp) / f"out_{variant}"
            _reset_peak()
            before = _resident_kib()
            t = time.perf_counter()
            result = export_causal_lm(src, out, dtype=dtype, weights=weights, generate=ns.generate, force_f32=force_f32)
            wall = time.perf_counter() - t
            peak = max(_resident_kib("VmHWM") - before, 0)  # VmHWM is reset by _reset_peak
            asset = out / "model.nnef.tgz"
            row = {"variant": variant, "export_s": round(wall, 1), "stages_s": result.manifest["timings_s"],
                   "peak_rss_mib": round(peak / 1024, 1), "asset_mib": round(asset.stat().st_size / 2**20, 1),
                   "checks": {k: v for k, v in result.checks.items() if k != "generate"},
                   "generate_equal": result.checks.get("generate", {}).get("equal")}
            if not ns.no_latency:
                # alternate the engines over rounds: on a shared machine the load drifts
                times = {"tract": {"prompt_ms": [], "decode_ms": []}, "torch": {"prompt_ms": [], "decode_ms": []}}
                for _ in range(ns.rounds):
                    for engine, got in (("tract", tract_latency(asset, ns.runs)),
                                        ("torch", torch_latency(src, dtype, ns.runs))):
                        for key, values in got.items():
                            times[engine][key] += values
                for engine in times:
                    row[engine] = {k: _median(v) for k, v in times[engine].items()}
                    row[engine + "_min"] = {k: min(v) for k, v in times[engine].items()}
            if ns.profile:
                row["profile"] = tract_profile(asset)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
            if ns.profile:
                print(row["profile"], flush=True)
            shutil.rmtree(out, ignore_errors=True)
    f32_size = next((r["asset_mib"] for r in rows if r["variant"] == "f32"), None)
    print()
    print("Latency: median (min) over all runs, tract / torch eager, ms")
    print("| variant | export s | asset MiB | x f32 | prompt S=128 tract / torch | decode S=1 P=128 tract / torch | generate |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['asset_mib'] / f32_size:.2f}" if f32_size else "-"
        lat = ("-", "-") if ns.no_latency else tuple(
            f"{r['tract'][k]:.1f} ({r['tract_min'][k]:.1f}) / {r['torch'][k]:.1f} ({r['torch_min'][k]:.1f})"
            for k in ("prompt_ms", "decode_ms"))
        print(f"| {r['variant']} | {r['export_s']} | {r['asset_mib']} | {ratio} | {lat[0]} | {lat[1]} | {r['generate_equal']} |")


if __name__ == "__main__":
    main()
