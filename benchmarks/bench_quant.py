"""Quality of Q4_0 roundings: drift of the asset from the original model, as a table (not a test).

    python benchmarks/bench_quant.py [--size 20m|tiny|160m] [--train 300] [--prompts 8] [--length 32]
        [--greedy 16] [--dtype f32|f16] [--calibration corpus|random] [--model-cache DIR]
        [--variants f16,q4_0:minmax,q4_0:search,q4_0:gptq,q4_0:search:keep=0.1,q4_0:gptq:keep=0.1]

A Llama of ``--size`` (vocabulary 32000; norm weights randomized) is built and, with ``--train N``,
trained for N steps (AdamW) on a synthetic corpus so that its next-token distributions are peaked
as a trained model's are, not the near-uniform ones of random weights: the corpus follows a
random sparse bigram table over the first 2000 tokens (each token has 4 successors with Zipf
weights 1, 1/2, 1/3, 1/4), and one token in 8 repeats the token 8 positions back (something only
attention can predict). ``--model-cache DIR`` keeps the trained folder for the next run.

Each variant is then exported once with ``export_causal_lm`` (checks on; ``--dtype``: activations,
f32 by default so that only the weights' rounding differs). A variant is ``f16``, or
``q4_0:ROUNDING`` (minmax, search, gptq) with ``:keep=BUDGET`` for ``keep_f16``. GPTQ and the
ranking for ``keep`` run on ``--calibration``: 8 x 128 tokens of the corpus (another seed than the
prompts), or random tokens of the vocabulary (fx2nnef's default when no text is given).

Each asset runs in tract on ``--prompts`` prompts of ``--length`` tokens (corpus text when
trained, random tokens otherwise; no past) and its logits are compared with the ORIGINAL model's
(float32, before any rounding): KL divergence of the next-token distributions (mean and max over
all positions, nats), top-1 agreement, max abs logit error; and ``--greedy`` greedy tokens after
the first 5 tokens of each prompt, equal or not. Also per variant: the relative squared error of
the stored weights (``sum (w - q)^2 / sum w^2``), asset bytes, export seconds (calibration
included). Set ``OMP_NUM_THREADS=1`` on a shared machine: torch's thread pool on busy cores
makes small runs many times slower.
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

# hidden, intermediate, layers, heads, kv heads, vocab
SIZES = {"tiny": (64, 128, 2, 4, 2, 256), "20m": (256, 768, 4, 8, 4, 32000), "160m": (1024, 2816, 8, 16, 8, 32000)}
CORPUS_TOKENS, SUCCESSORS, REPEAT_EVERY, REPEAT_BACK = 2000, 4, 8, 8


def build_model(size: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, inter, layers, heads, kv, vocab = SIZES[size]
    config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                         max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:  # norm weights, not all ones
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


class Corpus:
    """The synthetic language: a sparse bigram table, and repeats of the token 8 back."""

    def __init__(self, vocab: int):
        rng = np.random.default_rng(7)
        self.tokens = min(CORPUS_TOKENS, vocab)
        self.successors = rng.integers(0, self.tokens, size=(self.tokens, SUCCESSORS))
        weights = 1.0 / np.arange(1, SUCCESSORS + 1)
        self.weights = weights / weights.sum()

    def sample(self, count: int, length: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = np.empty((count, length), np.int64)
        out[:, 0] = rng.integers(0, self.tokens, count)
        for t in range(1, length):
            pick = rng.choice(SUCCESSORS, size=count, p=self.weights)
            out[:, t] = self.successors[out[:, t - 1], pick]
            if t >= REPEAT_BACK:
                repeat = rng.random(count) < 1.0 / REPEAT_EVERY
                out[repeat, t] = out[repeat, t - REPEAT_BACK]
        return out


def train(model, corpus: Corpus, steps: int, batch: int = 16, length: int = 64) -> float:
    """AdamW on the corpus; returns the last steps' mean loss."""
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    losses = []
    for step in range(steps):
        ids = torch.from_numpy(corpus.sample(batch, length, 1000 + step))
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == steps - 1:
            print(f"  train step {step}: loss {losses[-1]:.3f}", flush=True)
    model.eval()
    return float(np.mean(losses[-20:]))


def model_for(ns):
    """The benchmark's model: built, trained when asked (kept in ``--model-cache``)."""
    from transformers import LlamaForCausalLM

    cache = Path(ns.model_cache) / f"{ns.size}_train{ns.train}" if ns.model_cache else None
    if cache is not None and (cache / "config.json").is_file():
        print(f"trained model from {cache}")
        return LlamaForCausalLM.from_pretrained(str(cache), dtype="float32").eval()
    model = build_model(ns.size)
    if ns.train:
        t0 = time.perf_counter()
        loss = train(model, Corpus(model.config.vocab_size), ns.train)
        print(f"trained {ns.train} steps in {time.perf_counter() - t0:.0f} s, final loss {loss:.3f} nats "
              f"(uniform over the corpus tokens: {np.log(CORPUS_TOKENS):.2f})")
        if cache is not None:
            model.save_pretrained(str(cache))
    return model


def original_logits(model, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.stack([model(input_ids=torch.from_numpy(row[None])).logits[0].numpy() for row in ids])


def asset_logits(asset: Path, layout, ids: np.ndarray, dtype) -> np.ndarray:
    from fx2nnef.targets.tract_runner import run_tract_many

    empty = [t.numpy() for t in layout.empty(0, dtype)]
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


def export_options(variant: str, calibration) -> dict:
    """``export_causal_lm``'s options for a variant spelled ``f16`` or ``q4_0:ROUNDING[:keep=BUDGET]``."""
    weights, *rest = variant.split(":")
    options = {"weights": weights}
    for part in rest:
        if part.startswith("keep="):
            options["keep_f16"] = part[len("keep="):]
        else:
            options["rounding"] = part
    if options.get("rounding") == "gptq" or "keep_f16" in options:
        options["calibration"] = calibration
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="20m", choices=list(SIZES))
    parser.add_argument("--train", type=int, default=0, help="training steps on the synthetic corpus (0: random)")
    parser.add_argument("--model-cache", help="folder keeping the trained model between runs")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--greedy", type=int, default=16)
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    parser.add_argument("--calibration", default="corpus", choices=["corpus", "random"])
    parser.add_argument("--variants", default="f16,q4_0:minmax,q4_0:search,q4_0:gptq,q4_0:search:keep=0.1,"
                        "q4_0:gptq:keep=0.1")
    ns = parser.parse_args()

    import torch

    from fx2nnef.llm import export_causal_lm
    from fx2nnef.llm.wrapper import cache_layout
    from fx2nnef.targets.drift import logit_drift

    model = model_for(ns)
    layout = cache_layout(model)
    vocab = model.config.vocab_size
    corpus = Corpus(vocab) if ns.train else None
    rng = np.random.default_rng(1234)
    ids = corpus.sample(ns.prompts, ns.length, 99) if corpus else rng.integers(0, vocab, (ns.prompts, ns.length))
    calibration = corpus.sample(8, 128, 555) if corpus and ns.calibration == "corpus" else None
    reference = original_logits(model, ids)
    n_params = sum(p.numel() for p in model.parameters())
    peak = torch.softmax(torch.from_numpy(reference), -1).max(-1).values.mean()
    print(f"Llama {ns.size} ({n_params / 1e6:.1f} M parameters, {'trained %d steps' % ns.train if ns.train else 'random'}"
          f"), {ns.prompts} prompts x {ns.length} tokens = {ids.size} positions ({'corpus' if corpus else 'random'}), "
          f"mean top probability {float(peak):.3f}; activations {ns.dtype}; calibration "
          f"{'8 x 128 corpus tokens' if calibration is not None else 'random tokens of the vocabulary'}; "
          f"greedy {ns.greedy} tokens after 5 per prompt")
    print(f"{'variant':22} {'asset MiB':>9} {'w rel err':>10} {'KL mean':>9} {'KL max':>9} {'top-1':>7} "
          f"{'max abs':>8} {'greedy eq':>9} {'1st diff':>8} {'export s':>8}")
    work = Path(tempfile.mkdtemp(prefix="bench_quant_"))
    try:
        for variant in ns.variants.split(","):
            out = work / variant.replace(":", "_").replace("=", "")
            t0 = time.perf_counter()
            result = export_causal_lm(model, out, dtype=ns.dtype, generate=0, **export_options(variant, calibration))
            seconds = time.perf_counter() - t0
            dtype = torch.float16 if ns.dtype == "f16" else torch.float32
            drift = logit_drift(reference, asset_logits(result.asset, layout, ids, dtype), variant)
            eq, first = greedy_equal(model, result.asset, ids, ns.greedy) if ns.greedy else (0, 0.0)
            print(f"{variant:22} {result.asset.stat().st_size / 2**20:9.2f} {weight_error(result):10.3e} "
                  f"{drift.kl_mean:9.3e} {drift.kl_max:9.3e} {drift.top1:7.3f} {drift.max_abs:8.3f} "
                  f"{eq:>4}/{len(ids):<4} {first:8.1f} {seconds:8.1f}", flush=True)
            kept = result.manifest.get("q4_0_calibration", {}).get("keep_f16")
            if kept:
                print(f"{'':22} kept in f16: {len(kept)} weights, "
                      f"+{result.manifest['q4_0_calibration']['keep_f16_extra_bytes'] / 2**20:.2f} MiB: "
                      f"{', '.join(k.replace('model.layers.', 'L') for k in kept[:6])}{' ...' if len(kept) > 6 else ''}",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
