"""Try every causal-LM family of the installed transformers: tiny random config, export with a
dynamic sequence axis, check in tract. One child process per family (a crash or a hang costs
one row); one JSON line per family on stdout or in --out.

    python benchmarks/survey_causal_lm.py [--only mixtral,qwen2_moe] [--out survey.jsonl] [--timeout 240] [--llm]

``--llm``: the deployment path instead, ``export_causal_lm`` (the KV-cache I/O contract: prompt,
prompt after a past and decoding checked in tract against transformers' ``DynamicCache``, then 3
greedy tokens equal to ``model.generate``); a family without a per-layer key/value cache is a
row "no kv cache".
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fx2nnef

SIZES = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=128, max_position_embeddings=256, head_dim=16,
    # other spellings of the same sizes
    n_embd=64, n_layer=2, n_head=4, d_model=64, n_heads=4, n_layers=2, num_layers=2, ffn_dim=128, d_ff=128,
    n_positions=256, n_inner=128, embed_dim=64, num_heads=4, decoder_layers=2, decoder_attention_heads=4,
    decoder_ffn_dim=128, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
    # mixture of experts: 4 experts, top-2, small experts, layers sparse from the first (or second) one
    num_local_experts=4, num_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
    moe_topk=2, decoder_sparse_step=1, moe_num_experts=4, moe_k=2, moe_layer_freq=1, top_k=2,
    # multi-head latent attention (DeepSeek) and friends
    q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
)


LLM_MODE = "--llm" in sys.argv


def one(model_type: str) -> dict:
    import torch
    import transformers as T
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as NAMES

    import fx2nnef

    row = {"family": model_type, "class": NAMES[model_type]}
    cfg_cls = T.CONFIG_MAPPING[model_type]
    default = cfg_cls()
    if hasattr(default, "text_config") and f"{model_type}_text" in NAMES:
        row.update(status="skipped", note=f"multimodal: its language model is the family {model_type}_text")
        return row
    known = set(default.to_dict())
    kwargs = {k: v for k, v in SIZES.items() if k in known or k in getattr(default, "attribute_map", {})}
    if "qk_rope_head_dim" in known:  # multi-head latent attention: head_dim is the rotary part
        kwargs.update(head_dim=SIZES["qk_rope_head_dim"], qk_head_dim=SIZES["qk_rope_head_dim"] + SIZES["qk_nope_head_dim"],
                      num_key_value_heads=SIZES["num_attention_heads"])
        kwargs = {k: v for k, v in kwargs.items() if k in known or k in getattr(default, "attribute_map", {})}
    if "pad_token_id" in known:
        kwargs["pad_token_id"] = 0
    if "mlp_only_layers" in known:
        kwargs["mlp_only_layers"] = []
    cls = getattr(T, NAMES[model_type])
    ids = torch.randint(0, 128, (1, 7), generator=torch.Generator().manual_seed(1))
    for attempt in (kwargs, {**kwargs, "num_key_value_heads": 4}):  # some families need as many kv heads as heads
        config = cfg_cls(**attempt)
        config.use_cache = False
        torch.manual_seed(0)
        model = cls(config).eval()
        try:
            with torch.no_grad():
                model(ids)
            if row.pop("eager_error", None):
                row["note"] = "num_key_value_heads = num_attention_heads"
            break
        except Exception as e:  # the second attempt's error is the one reported
            row["eager_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    else:
        raise RuntimeError(row["eager_error"])
    row["params"] = sum(p.numel() for p in model.parameters())
    row["experts"] = getattr(config, "_experts_implementation", None)
    with torch.no_grad():  # constant parameters (norm weights, zero-initialised routers: all experts tie) get noise
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape))
    t0 = time.time()
    if LLM_MODE:
        return _llm_row(row, model, model_type, t0)
    r = fx2nnef.export(model, (ids,), f"/tmp/survey_{model_type}.nnef.tgz",
                       target=fx2nnef.TractNNEF(dynamic_axes={"input_ids": {1: "S"}}))
    row.update(status="ok" if r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               max_abs=float(r.max_abs_diff))
    return row


def _llm_row(row: dict, model, model_type: str, t0: float) -> dict:
    """The row of ``export_causal_lm`` on ``model`` (its cache turned on)."""
    import shutil
    import tempfile

    from fx2nnef.errors import InvalidArgumentError
    from fx2nnef.llm import export_causal_lm

    model.config.use_cache = True
    out = Path(tempfile.mkdtemp(prefix=f"survey_llm_{model_type}_")) / "out"
    try:
        r = export_causal_lm(model, out, generate=3)
    except InvalidArgumentError as e:
        if "cache" not in str(e):
            raise
        row.update(status="no kv cache", note=str(e)[:160])
        return row
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    checks = r.manifest["checks"]
    row.update(status="ok", seconds=round(time.time() - t0, 1),
               modes={k: v.get("max_abs_logits", v.get("max_abs")) for k, v in checks.items()
                      if isinstance(v, dict) and k != "generate"},
               generate=checks.get("generate"))
    return row


def main() -> None:
    def families():
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as NAMES
        return sorted(NAMES)

    survey_main(__file__, one, families, timeout=240)


def survey_main(script: str, one, families, timeout: float) -> None:
    """The command line of a survey: ``--child FAMILY`` runs ``one(FAMILY)`` in this process,
    else every family (or ``--only`` ones) runs in a child of its own."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--child", default="")
    ap.add_argument("--llm", action="store_true", help="export_causal_lm (KV-cache contract) instead of export")
    a = ap.parse_args()
    if a.child:
        print_row(one, a.child)
        return
    run_children(script, a.only.split(",") if a.only else families(), a.out, a.timeout,
                 ["--llm"] if getattr(a, "llm", False) else [])


def print_row(one, family: str) -> None:
    """The child's side: ``one(family)``'s row, or the failure as a row, on stdout."""
    try:
        row = one(family)
    except Exception as e:  # the survey reports every failure as a row
        row = {"family": family, "status": "error", "error": f"{type(e).__name__}: {str(e)[:600]}"}
    print("SURVEY " + json.dumps(row))


def run_children(script: str, families: list, out_path: str, timeout: float, extra: tuple = ()) -> None:
    """Run ``script --child FAMILY`` for each family in a fresh process; write its JSON row (a
    crash or a timeout is a row too) to ``out_path`` (appended) or stdout."""
    out = open(out_path, "a") if out_path else sys.stdout
    for fam in families:
        try:
            p = subprocess.run([sys.executable, script, "--child", fam, *extra], capture_output=True, text=True,
                               timeout=timeout)
            line = next((l for l in p.stdout.splitlines() if l.startswith("SURVEY ")), None)
            row = json.loads(line[7:]) if line else {"family": fam, "status": "crash",
                                                     "error": (p.stderr or "")[-400:]}
        except subprocess.TimeoutExpired:
            row = {"family": fam, "status": "timeout"}
        out.write(json.dumps(row) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
