"""Quality of Q4_0 roundings: drift of the asset from the original model, as a table (not a test).

    python benchmarks/bench_quant.py [--size 20m|tiny|160m] [--prompts 8] [--length 32] [--greedy 16]
                                     [--dist normal|t4] [--variants f16,q4_0:minmax,q4_0:search]

A random Llama (``bench_llm.SIZES``, vocabulary 32000; norm weights randomized) is exported once
per variant with ``export_causal_lm`` (checks on). Each asset then runs in tract on a fixed set
of ``--prompts`` random prompts of ``--length`` tokens (no past) and its logits are compared
with the ORIGINAL model's (float32, before any rounding): KL divergence of the next-token
distributions (mean and max over all positions, nats), top-1 agreement, max abs logit error;
and ``--greedy`` greedy tokens after the first 5 tokens of each prompt, equal or not. Also per
variant: the relative squared error of the rounded Linear/Embedding weights
(``sum (w - q)^2 / sum w^2`` over all of them), asset bytes, export seconds.

Random weights are a weak proxy for a trained model: ``--dist t4`` redraws the 2-D weights from
a Student t with 4 degrees of freedom (heavy tails, outliers as trained weights have) at the
same scale, ``normal`` keeps transformers' Gaussian initialization.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

from bench_llm import SIZES


def build_model(size: str, dist: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, inter, layers, heads, kv = SIZES[size]
    config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv,
                         vocab_size=32000 if size != "tiny" else 256, max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norm weights, not all ones
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif dist == "t4":  # heavy tails, std as the Gaussian's
                t = torch.distributions.StudentT(4.0).sample(p.shape)
                p.copy_(t / t.std() * p.std())
    return model


def prompts(vocab: int, count: int, length: int) -> np.ndarray:
    return np.random.default_rng(1234).integers(0, vocab, size=(count, length), dtype=np.int64)


def original_logits(model, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.stack([model(input_ids=torch.from_numpy(row[None])).logits[0].numpy() for row in ids])


def asset_logits(asset: Path, layout, ids: np.ndarray) -> np.ndarray:
    import torch

    from fx2nnef.targets.tract_runner import run_tract_many

    empty = [t.numpy() for t in layout.empty(0, torch.float32)]
    outs = run_tract_many(asset, [[row[None]] + empty for row in ids])
    return np.stack([o[0][0].astype(np.float32) for o in outs])


def weight_error(result) -> float:
    """sum (w - stored)^2 / sum w^2 over the parameters stored in another format."""
    num = den = 0.0
    for v in result.export.graph.constants():
        if getattr(v.source, "stored_format", None) is None:
            continue
        w = v.source.base.numpy().astype(np.float64)
        num += float(((w - v.source.numpy().astype(np.float64)) ** 2).sum())
        den += float((w ** 2).sum())
    return num / den if den else 0.0


def greedy_equal(model, asset: Path, ids: np.ndarray, steps: int) -> tuple:
    """(prompts whose greedy tokens all equal the original's, mean first differing step)."""
    import torch

    from fx2nnef.llm import greedy_generate
    from fx2nnef.llm.export import greedy_reference

    equal, firsts = 0, []
    for row in ids:
        want = greedy_reference(model, torch.from_numpy(row[None, :5]), steps)
        got = greedy_generate(asset, row[None, :5], steps)
        first = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), steps)
        equal += first == steps
        firsts.append(first)
    return equal, float(np.mean(firsts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="20m", choices=list(SIZES))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--greedy", type=int, default=16)
    parser.add_argument("--dist", default="normal", choices=["normal", "t4"])
    parser.add_argument("--variants", default="f16,q4_0:minmax,q4_0:search")
    ns = parser.parse_args()

    from fx2nnef.llm import export_causal_lm
    from fx2nnef.llm.wrapper import cache_layout
    from fx2nnef.targets.drift import logit_drift

    model = build_model(ns.size, ns.dist)
    layout = cache_layout(model)
    n_params = sum(p.numel() for p in model.parameters())
    ids = prompts(model.config.vocab_size, ns.prompts, ns.length)
    reference = original_logits(model, ids)
    print(f"random Llama {ns.size} ({n_params / 1e6:.1f} M parameters, weights {ns.dist}), {ns.prompts} prompts x "
          f"{ns.length} tokens = {ids.size} positions; greedy {ns.greedy} tokens after 5 per prompt")
    print(f"{'variant':16} {'asset MiB':>9} {'w rel err':>10} {'KL mean':>9} {'KL max':>9} {'top-1':>7} "
          f"{'max abs':>8} {'greedy eq':>9} {'1st diff':>8} {'export s':>8}")
    work = Path(tempfile.mkdtemp(prefix="bench_quant_"))
    try:
        for variant in ns.variants.split(","):
            weights, _, rounding = variant.partition(":")
            out = work / variant.replace(":", "_")
            t0 = time.perf_counter()
            result = export_causal_lm(model, out, weights=weights, rounding=rounding or None, generate=0)
            seconds = time.perf_counter() - t0
            drift = logit_drift(reference, asset_logits(result.asset, layout, ids), variant)
            eq, first = greedy_equal(model, result.asset, ids, ns.greedy) if ns.greedy else (0, 0.0)
            print(f"{variant:16} {result.asset.stat().st_size / 2**20:9.2f} {weight_error(result):10.3e} "
                  f"{drift.kl_mean:9.3e} {drift.kl_max:9.3e} {drift.top1:7.3f} {drift.max_abs:8.3f} "
                  f"{eq:>4}/{len(ids):<4} {first:8.1f} {seconds:8.1f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
