"""fx2nnef's LLM assets against torch_to_nnef's, side by side in one run (a benchmark, not a test).

    python benchmarks/bench_llm.py [--size 160m] [--variants f32,f16,f16_q4_0] [--rounds 7]
                                   [--t2n-venv /work/venvs/t2n] [--logits last|all] [--profile]
                                   [--keep DIR [--reuse]]
    python benchmarks/bench_llm.py --size 1b [--t2n-venv ...]      # real size: export cost only

A random Llama is built from a config (norm weights not all ones) and saved with a tokenizer made
offline, then exported by ``fx2nnef llm`` and by torch_to_nnef's ``t2n_export_llm_to_tract``
(each in its own process, checks on), once per variant: ``f32``; ``f16``; ``f16_q4_0`` (f16
activations, Q4_0 weights: t2n ``-dt f16 -c min_max_q4_0``). Both assets follow the same
KV-cache contract and the same logits contract (``--logits last``: t2n's default, fx2nnef's
``--last-logits-only``; ``all``: logits of every position on both sides).

Printed per variant: export wall time and peak memory of the exporting process tree (PSS, sampled), then
latency in tract (child processes, one thread, CPU time of the process: the machine is shared,
wall time is not the asset's cost) for a prompt (S=128, P=0), a prompt after a past (S=32,
P=128) and decoding (S=1) at P=128 and P=1024, the assets run in alternation over ``--rounds``;
medians and the ratio fx2nnef / torch_to_nnef. Each variant's two assets are run twice, loaded in
one order then in the other, and the samples pooled: the asset loaded first runs 1-3 % slower.
``--profile`` adds tract's per-op profile (``Runnable.profile_json``) of both assets for the prompt.

``--size 1b|3b|8b`` builds a bf16 folder of the Llama-3.2-1B / 3.2-3B / 3.1-8B shape (vocab
128256; tied embeddings for 1b and 3b) tensor by tensor (the model is made on the meta device and
each tensor is drawn, written and dropped: the folder is never held in memory), exports it to f16
with all checks and prints time and peak RSS against the weight bytes (no latency).
``benchmarks/llm_memory_timeline.py --size 1b`` breaks the peak down by export stage.

torch_to_nnef goes in its own venv (never in fx2nnef's), with the stand-in tract CLI beside it
(``tract_cli_standin.py``: torch_to_nnef runs its checks through a tract binary it would download):

    python3 -m venv /work/venvs/t2n
    /work/venvs/t2n/bin/pip install torch==2.13.0
    /work/venvs/t2n/bin/pip install torch-to-nnef==0.24.12 torch-to-nnef-llm==0.24.12 \\
        transformers==5.23.0 tract==0.23.9

Without ``--t2n-venv`` (or when it is missing) the torch_to_nnef column is left out.
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
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings
SIZES = {
    "tiny": (64, 128, 2, 4, 2, 256, False),
    "160m": (1024, 2816, 8, 16, 8, 32000, False),
    "1b": (2048, 8192, 16, 32, 8, 128256, True),
    "3b": (3072, 8192, 28, 24, 8, 128256, True),
    "8b": (4096, 14336, 32, 32, 8, 128256, False),
}
REAL = ("1b", "3b", "8b")
# variant -> (fx2nnef llm options, t2n options)
# (t2n checks f16 at its default "approximate" level, which tract's f16 outputs miss by design:
# both sides check f16 at "very", as fx2nnef does)
VARIANTS = {
    "f32": (["--dtype", "f32"], ["-dt", "f32"]),
    "f16": (["--dtype", "f16"], ["-dt", "f16", "-tt", "very"]),
    "f16_q4_0": (["--dtype", "f16", "--weights", "q4_0"], ["-dt", "f16", "-c", "min_max_q4_0", "-tt", "very"]),
}
# (label, S, P)
MODES = [("prompt S=128", 128, 0), ("prompt S=32 P=128", 32, 128), ("decode P=128", 1, 128),
         ("decode P=1024", 1, 1024)]


def llama_config(size: str):
    from transformers import LlamaConfig

    hidden, inter, layers, heads, kv, vocab, tied = SIZES[size]
    return LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                       tie_word_embeddings=tied, max_position_embeddings=4096, rope_theta=500000.0)


def save_tokenizer(folder: Path) -> None:
    """A small word-level tokenizer made offline (torch_to_nnef's exporter wants one in the folder)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(997)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(folder)


def save_random_llama(size: str, folder: Path, dtype_name: str) -> int:
    """A random Llama of ``size`` saved to ``folder`` tensor by tensor; returns its weight bytes.

    The model is made on the meta device (no memory); each tensor is drawn (std 0.02, norm weights
    1 + 0.3 N(0,1)), written to model.safetensors and dropped, so the folder is never held whole."""
    import torch
    from transformers import LlamaForCausalLM

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    config = llama_config(size)
    config.dtype = dtype  # what from_pretrained(dtype="auto") reads
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    names = {n: p for n, p in model.state_dict().items()}
    if config.tie_word_embeddings:
        names.pop("lm_head.weight", None)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_tokenizer(folder)
    g = torch.Generator().manual_seed(0)

    def draw(name, meta):
        if name.endswith("norm.weight"):
            return (1 + 0.3 * torch.randn(meta.shape, generator=g)).to(dtype)
        return (0.02 * torch.randn(meta.shape, generator=g)).to(dtype)

    return write_safetensors(folder / "model.safetensors", names, draw, dtype)


def write_safetensors(path: Path, metas: dict, draw, dtype) -> int:
    """Write ``{name: meta tensor}`` as ``dtype`` to a safetensors file, drawing each tensor with
    ``draw(name, meta)`` when its bytes are due (one tensor in memory at a time); returns the data bytes."""
    import torch

    code, itemsize = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2), torch.float16: ("F16", 2)}[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, meta in metas.items():
        size = meta.numel() * itemsize
        header[name] = {"dtype": code, "shape": list(meta.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(len(text).to_bytes(8, "little") + text)
        for name, meta in metas.items():
            tensor = draw(name, meta).to(dtype).contiguous()
            out.write(tensor.view(torch.uint8).numpy().tobytes())
            del tensor
    return offset


def run_measured(cmd: list, env: dict, log: Path) -> dict:
    """Run ``cmd``; its wall time, exit code and the peak PSS of its process tree (sampled 10x a second)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = [0]

        def sample():
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_rss(proc.pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        sampler.join()
    return {"export_s": round(time.perf_counter() - start, 1), "peak_rss_mib": round(peak[0] / 2**20),
            "ok": code == 0, "log": str(log)}


def process_tree(pid: int) -> list:
    """``pid`` and its descendants (read from /proc)."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def tree_rss(pid: int) -> int:
    """Proportional resident bytes (PSS: a page shared by k processes counts 1/k in each, so forked
    children and the shared libraries are not counted twice) of ``pid`` and all its descendants."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
        except (OSError, StopIteration, ValueError):
            pass
    return total


def export_fx2nnef(src: Path, out: Path, options: list, last_logits: bool) -> dict:
    cmd = [sys.executable, "-m", "fx2nnef", "llm", str(src), str(out), "--overwrite", "--generate", "4", *options]
    cmd += ["--last-logits-only"] if last_logits else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    facts = run_measured(cmd, env, out.with_suffix(".log"))
    facts["asset"] = str(out / "model.nnef.tgz")
    return facts


def export_t2n(venv: Path, src: Path, out: Path, options: list, last_logits: bool) -> dict:
    """torch_to_nnef's LLM CLI, checks on, through the stand-in tract CLI installed in its venv."""
    shutil.rmtree(out, ignore_errors=True)  # its exporter refuses an existing folder
    cli = venv / "tract-cli"
    if not cli.exists():
        cli.write_text(f"#!{venv / 'bin' / 'python'}\n" + (HERE / "tract_cli_standin.py").read_text())
        cli.chmod(0o755)
    cmd = [str(venv / "bin" / "t2n_export_llm_to_tract"), "-d", str(src), "-e", str(out), *options,
           "--tract-specific-path", str(cli), "--no-trust-remote-code", "--num-logits-to-keep", "1" if last_logits else "0"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    facts = run_measured(cmd, env, out.with_suffix(".log"))
    facts["asset"] = str(out / "model" / "model.nnef.tgz")
    return facts


LATENCY_CHILD = textwrap.dedent("""
    import json, sys, time, numpy as np, tract
    assets, modes, rounds, profile = json.loads(sys.argv[1])
    loaded = []
    for path in assets:
        m = tract.nnef().with_tract_transformers().load(path)
        facts = [m.input_fact(i) for i in range(1, m.input_count())]
        dt = np.float16 if str(facts[0]).endswith("f16") else np.float32
        shapes = [[int(str(d)) for i, d in enumerate(f.dims()) if i != 2] for f in facts]
        loaded.append((m.into_runnable(), shapes, dt))
    rng = np.random.default_rng(0)
    def inputs(shapes, dt, s, p):
        ids = rng.integers(0, 256, (1, s)).astype(np.int64)
        return [ids] + [rng.standard_normal((b, h, p, d)).astype(dt) for b, h, d in shapes]
    out = {"ms": [[[] for _ in modes] for _ in assets], "profile": []}
    feeds = [[inputs(shapes, dt, s, p) for _, s, p in modes] for _, shapes, dt in loaded]
    for (run, _, _), feed in zip(loaded, feeds):
        run.run(feed[0])
    for k in range(len(modes)):  # one mode at a time: sizes change between modes only
        for _ in range(rounds):
            for a, ((run, _, _), feed) in enumerate(zip(loaded, feeds)):
                t = time.process_time(); run.run(feed[k]); out["ms"][a][k].append(1000 * (time.process_time() - t))
    if profile:
        for (run, _, _), feed in zip(loaded, feeds):
            prof = json.loads(run.profile_json(feed[0]))
            by = {}
            for n in prof["nodes"]:
                by[n["op_name"]] = by.get(n["op_name"], 0.0) + 1000 * n.get("secs_per_iter", 0.0)
            out["profile"].append(sorted(by.items(), key=lambda kv: -kv[1])[:8])
    print(json.dumps(out))
""")


def latency(assets: list, rounds: int, profile: bool) -> dict:
    """CPU ms per asset and mode (``{"ms": [asset][mode] -> samples, "profile": ...}``), the assets
    run in alternation on one thread, in two children: one loads them in the given order, the other
    in the reverse order, and each asset's samples are pooled.

    The asset loaded first runs 1-3 % slower in every mode, whichever exporter wrote it (measured:
    the same two 160m f32 assets swapped places and the ratio flipped); one order would hand that to
    one side. The caller passes one variant's assets at a time: with the six assets of three
    variants loaded together, one f32 asset's decode at P=1024 took 37.5 ms against 25.7 ms with
    its pair alone."""
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    runs = []
    for order in (list(range(len(assets))), list(reversed(range(len(assets))))):
        arg = json.dumps([[assets[a] for a in order], MODES, rounds, profile and not runs])
        done = subprocess.run([sys.executable, "-c", LATENCY_CHILD, arg], capture_output=True, text=True, env=env)
        if done.returncode:
            raise RuntimeError(f"the latency child failed:\n{done.stderr[-3000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({a: (ms, prof) for a, ms, prof in zip(order, got["ms"], got["profile"] or [None] * len(order))})
    return {"ms": [[x + y for x, y in zip(runs[0][a][0], runs[1][a][0])] for a in range(len(assets))],
            "profile": [runs[0][a][1] for a in range(len(assets))] if profile else []}


def _median(values: list) -> float:
    return sorted(values)[len(values) // 2]


def print_table(variants: list, facts: dict, times: dict) -> None:
    print("\nExport (checks on): wall s, peak memory MiB of the process tree (PSS)")
    print("| variant | fx2nnef s | t2n s | fx2nnef MiB | t2n MiB |")
    print("|---|---|---|---|---|")
    for v in variants:
        fx, t2 = facts[v].get("fx2nnef", {}), facts[v].get("t2n", {})
        print(f"| {v} | {fx.get('export_s', '-')} | {t2.get('export_s', '-')} | {fx.get('peak_rss_mib', '-')} | "
              f"{t2.get('peak_rss_mib', '-')} |")
    if not times:
        return
    print("\nLatency in tract 0.23.9, one thread, median CPU ms: fx2nnef / torch_to_nnef (ratio)")
    print("| variant | " + " | ".join(label for label, _, _ in MODES) + " |")
    print("|---|" + "---|" * len(MODES))
    for v in variants:
        cells = []
        for k in range(len(MODES)):
            fx = times.get((v, "fx2nnef"))
            t2 = times.get((v, "t2n"))
            a = _median(fx[k]) if fx else None
            b = _median(t2[k]) if t2 else None
            cells.append(f"{a:.1f} / {b:.1f} ({a / b:.2f}x)" if a and b else f"{a or '-'} / {b or '-'}")
        print(f"| {v} | " + " | ".join(cells) + " |")


def kept(ns, asset: Path) -> dict:
    """With ``--reuse``, the facts of an asset a previous run left in ``--keep`` (not exported again)."""
    return {"asset": str(asset), "ok": True, "export_s": "kept"} if ns.reuse and asset.exists() else {}


def bench_speed(ns, work: Path) -> None:
    src = work / "src"
    weight_bytes = save_random_llama(ns.size, src, "f32")
    print(f"size {ns.size}: {weight_bytes / 2**20:.0f} MiB of f32 weights; logits {ns.logits}; "
          f"t2n {'at ' + str(ns.t2n_venv) if ns.t2n_venv else 'not run'}", flush=True)
    variants = [v for v in ns.variants.split(",") if v]
    facts, assets, owners = {}, [], []
    for v in variants:
        fx_opts, t2n_opts = VARIANTS[v]
        last = ns.logits == "last"
        facts[v] = {"fx2nnef": kept(ns, work / f"fx_{v}" / "model.nnef.tgz")
                    or export_fx2nnef(src, work / f"fx_{v}", fx_opts, last)}
        if ns.t2n_venv:
            facts[v]["t2n"] = kept(ns, work / f"t2n_{v}" / "model" / "model.nnef.tgz") \
                or export_t2n(ns.t2n_venv, src, work / f"t2n_{v}", t2n_opts, last)
        for side, f in facts[v].items():
            print(json.dumps({"variant": v, "exporter": side, **f}), flush=True)
            if f["ok"]:
                assets.append(f["asset"])
                owners.append((v, side))
    times = {}
    for v in variants if not ns.no_latency else []:  # one variant's assets at a time (see latency)
        mine = [k for k, owner in enumerate(owners) if owner[0] == v]
        if not mine:
            continue
        got = latency([assets[k] for k in mine], ns.rounds, ns.profile)
        times.update(zip([owners[k] for k in mine], got["ms"]))
        for k, ops in zip(mine, got["profile"]):
            print(f"profile {owners[k][0]} {owners[k][1]} prompt: " + ", ".join(f"{op} {ms:.1f}" for op, ms in ops))
    print_table(variants, facts, times)


def bench_real_size(ns, work: Path) -> None:
    src = work / "src"
    t = time.perf_counter()
    weight_bytes = save_random_llama(ns.size, src, "bf16")
    print(f"size {ns.size}: {weight_bytes / 2**30:.2f} GiB of bf16 weights written in "
          f"{time.perf_counter() - t:.0f} s", flush=True)
    facts = {"f16": {"fx2nnef": export_fx2nnef(src, work / "fx_f16", ["--dtype", "f16"], False)}}
    if ns.t2n_venv:
        facts["f16"]["t2n"] = export_t2n(ns.t2n_venv, src, work / "t2n_f16", VARIANTS["f16"][1], False)
    for side, f in facts["f16"].items():
        print(json.dumps({"exporter": side, **f, "rss_over_weights": round(f["peak_rss_mib"] * 2**20 / weight_bytes, 2)}),
              flush=True)
    print_table(["f16"], facts, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="160m", choices=list(SIZES))
    parser.add_argument("--variants", default="f32,f16,f16_q4_0", help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=7, help="timed runs of each asset and mode, alternated")
    parser.add_argument("--t2n-venv", type=Path, default=None, help="the venv holding torch_to_nnef (see above)")
    parser.add_argument("--logits", choices=["last", "all"], default="last")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--profile", action="store_true", help="tract's costliest ops of each asset (prompt)")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp dir)")
    parser.add_argument("--reuse", action="store_true", help="with --keep: time the assets a previous run left "
                        "there instead of exporting them again (the same random weights: the folder is rebuilt)")
    ns = parser.parse_args()
    unknown = [v for v in ns.variants.split(",") if v and v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if ns.t2n_venv and not (ns.t2n_venv / "bin" / "t2n_export_llm_to_tract").exists():
        print(f"no t2n_export_llm_to_tract in {ns.t2n_venv}: the torch_to_nnef column is left out", flush=True)
        ns.t2n_venv = None
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as temp:
        work = ns.keep or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        (bench_real_size if ns.size in REAL else bench_speed)(ns, work)


if __name__ == "__main__":
    main()
