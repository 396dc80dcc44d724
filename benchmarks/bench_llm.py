"""Cost of ``fx2nnef llm`` on a random Llama saved to a folder, printed as figures (not a test).

    python benchmarks/bench_llm.py [--size 20m|160m|1b] [--dtype f32|f16] [--weights q4_0] [--runs 10]

The model is built from a config, saved with ``save_pretrained`` to a temporary folder and
exported from there as the CLI does (checks on, ``--generate 4``). Printed: export wall time
and its stages, the peak RSS growth of the export call against the weight bytes, the asset
size, and the latency of prompt processing (S=128, P=0) and decoding (S=1 after P=128) in
tract (one child process, caches fed back) against torch eager, both on one thread.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
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


def _resident_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
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

        return {"prompt_ms": _median_ms(prompt, runs), "decode_ms": _median_ms(decode, runs)}


def _median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1000 * sorted(times)[len(times) // 2], 3)


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
            return round(1000 * sorted(ts)[len(ts) // 2], 3)
        _, past = lm.step(ids[:, :{PAST}], lm.empty_cache())
        out = {{"prompt_ms": med(lambda: lm.step(ids[:, :{PROMPT}], lm.empty_cache())),
               "decode_ms": med(lambda: lm.step(ids[:, {PAST}:{PAST + 1}], past))}}
        print(json.dumps(out))
    """)
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="20m", choices=list(SIZES))
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    parser.add_argument("--weights", default=None)
    parser.add_argument("--generate", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-latency", action="store_true")
    ns = parser.parse_args()
    from fx2nnef.llm import export_causal_lm

    with tempfile.TemporaryDirectory(prefix="bench_llm_") as temp:
        src, out = Path(temp) / "src", Path(temp) / "out"
        weight_bytes = save_random_llama(ns.size, src)
        _reset_peak()
        before = _resident_kib()
        t = time.perf_counter()
        result = export_causal_lm(src, out, dtype=ns.dtype, weights=ns.weights, generate=ns.generate)
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        asset = out / "model.nnef.tgz"
        print(f"size {ns.size}, dtype {ns.dtype}, weights {ns.weights or 'native'}")
        print(f"export wall {wall:.1f} s; stages {result.manifest['timings_s']}")
        print(f"weights {weight_bytes / 2**20:.1f} MiB; peak RSS growth {peak / 1024:.1f} MiB "
              f"({peak * 1024 / weight_bytes:.2f}x weights); asset {asset.stat().st_size / 2**20:.1f} MiB")
        for name, facts in result.checks.items():
            print(f"check {name}: {facts}")
        if not ns.no_latency:
            tr, to = tract_latency(asset, ns.runs), torch_latency(src, ns.dtype, ns.runs)
            print(f"prompt S={PROMPT}: tract {tr['prompt_ms']} ms, torch eager {to['prompt_ms']} ms (1 thread)")
            print(f"decode S=1 after P={PAST}: tract {tr['decode_ms']} ms, torch eager {to['decode_ms']} ms (1 thread)")


if __name__ == "__main__":
    main()
