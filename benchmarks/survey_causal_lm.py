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
    # partial rotary (GPT-J, CodeGen): the rotated part of each 16-wide head; their default 64 exceeds it
    rotary_dim=8,
)


# per family: settings the sizes above leave invalid (transformers' validation, a default the
# family's own config lacks), so that its row tests the exporter
FAMILY_CONFIG = {
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]]),
    "mamba2": dict(num_heads=8),  # hidden_size * expand == num_heads * head_dim
    "zaya": dict(num_experts_per_tok=1),
    "dbrx": dict(attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
                 ffn_config={"moe_num_experts": 4, "moe_top_k": 2, "ffn_hidden_size": 32}),
    "reformer": dict(is_decoder=True, attn_layers=["local", "local"], axial_pos_embds_dim=[32, 32],
                     axial_pos_shape=[16, 16]),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),  # no default layer_types
    # its shared attention block is tied across hybrid layers: transformers needs two of them
    "zamba": dict(layers_block_type=["hybrid", "linear_attention", "hybrid"], num_hidden_layers=3),
    "zamba2": dict(layers_block_type=["linear_attention", "hybrid"]),
    "xmod": dict(default_language="en_XX"),
    # its default has no rope_parameters per layer type
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # the last num_kv_shared_layers layers read the cache of the last earlier layer of their type
    "gemma3n_text": dict(num_hidden_layers=4, num_kv_shared_layers=2, vocab_size_per_layer_input=128,
                         hidden_size_per_layer_input=16, laurel_rank=8, sliding_window=4, intermediate_size=[128] * 4,
                         activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0],
                         layer_types=["sliding_attention", "full_attention"] * 2),
    # hybrids whose first layers are all state layers by default: one of each kind
    "bamba": dict(attn_layer_indices=[1]),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"]),
    # byte latent transformer: its four sub-models keep their full default sizes (and a 500002-row hash
    # embedding) unless sized here; the bytes vocabulary stays 260
    "blt": dict(vocab_size=260, encoder_hash_byte_group_vocab=64,
                patcher_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                    intermediate_size=64, head_dim=16),
                encoder_config=dict(hidden_size=32, hidden_size_global=64, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=2, intermediate_size=64),
                decoder_config=dict(hidden_size=32, hidden_size_global=64, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=2, intermediate_size=64, head_dim=16),
                global_config=dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                                   intermediate_size=128, head_dim=16)),
    "musicgen": dict(num_codebooks=1),  # input_ids [batch * codebooks, S]
    "musicgen_melody": dict(num_codebooks=1),
}
# families that are not a standalone causal LM: the reason is the row
NOT_STANDALONE = {
    "gemma4_assistant": "a drafter for speculative decoding: every layer reads the keys and values of its target "
                        "model (num_kv_shared_layers = num_hidden_layers), so it has no cache of its own",
    "gemma4_unified_assistant": "a drafter for speculative decoding: its layers read the keys and values of its "
                                "target model, so it has no cache of its own",
}

LLM_MODE = "--llm" in sys.argv


def _layer_types(default, config):
    """A ``layer_types`` of the tiny config with every kind of the default's (a hybrid cut to its
    first layers may keep its state layers only), or None when it has them all already."""
    kinds = list(dict.fromkeys(getattr(default, "layer_types", None) or []))
    have = getattr(config, "layer_types", None)
    n = len(have or []) or getattr(config, "num_hidden_layers", 0)
    if not kinds or not n or (have is not None and set(kinds) <= set(have)):
        return None
    return [kinds[i % len(kinds)] for i in range(max(n, len(kinds)))]


def one(model_type: str) -> dict:
    import torch
    import transformers as T
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as NAMES

    import fx2nnef

    row = {"family": model_type, "class": NAMES[model_type]}
    if model_type in NOT_STANDALONE:
        row.update(status="skipped", note=NOT_STANDALONE[model_type])
        return row
    cls = getattr(T, NAMES[model_type])
    # the class's own config (MusicGen's decoder, Emu3's text model) rather than the family's
    cfg_cls = getattr(cls, "config_class", None) or T.CONFIG_MAPPING[model_type]
    family = FAMILY_CONFIG.get(model_type, {})
    try:
        default = cfg_cls()
    except Exception:  # noqa: BLE001 - a default the family's own validation refuses
        default = cfg_cls(**family)
    if hasattr(default, "text_config") and f"{model_type}_text" in NAMES:
        row.update(status="skipped", note=f"multimodal: its language model is the family {model_type}_text")
        return row
    text = getattr(default, "text_config", None)
    if text is not None and not isinstance(text, dict):  # a multimodal model run on text: size its language model
        tk = set(text.to_dict()) | set(getattr(text, "attribute_map", {}))
        family = {**family, "text_config": {**{k: v for k, v in SIZES.items() if k in tk},
                                            **({"pad_token_id": 0} if "pad_token_id" in tk else {})}}
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
    kwargs.update(family)
    if "num_hidden_layers" in kwargs and model_type not in FAMILY_CONFIG:
        try:
            layer_types = _layer_types(default, cfg_cls(**kwargs))
        except Exception:  # noqa: BLE001 - the sizes are invalid: the attempts below report it
            layer_types = None
        if layer_types:
            kwargs.update(layer_types=layer_types, num_hidden_layers=len(layer_types))
            row["layer_types"] = layer_types
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
    noisy_constants(model)  # zero-initialised routers would make all experts tie
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
    except InvalidArgumentError as e:  # the exporter's own refusal, with its reason
        msg = str(e)
        no_cache = any(k in msg for k in ("does not keep a key/value cache", "cache holds more than",
                                          "fails on one token with use_cache=True"))
        row.update(status="no kv cache" if no_cache else "refused", note=msg[:400])
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


def logits_of(model, names: list):
    """A module taking the inputs ``names`` by position, calling ``model`` with them by name and
    returning its logits."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            return self.model(**dict(zip(names, xs))).logits

    return Logits().eval()


def export_row(row: dict, model, inputs, path: str, names: list, dynamic_axes: dict) -> dict:
    """``row`` updated with the export of ``model`` on ``inputs`` with ``dynamic_axes``, checked in
    tract: status, seconds, the largest difference, the ranges and the sizes checked."""
    import fx2nnef

    t0 = time.time()
    r = fx2nnef.export(model, tuple(inputs), path, input_names=names,
                       target=fx2nnef.TractNNEF(dynamic_axes=dynamic_axes))
    row.update(status="ok" if r.check.ok else "mismatch", seconds=round(time.time() - t0, 1),
               max_abs=float(r.max_abs_diff), ranges={k: str(v) for k, v in r.ranges.items()},
               checked=[label for label, _ in r.check.cases])
    return row


def noisy_constants(model) -> None:
    """Noise on every parameter whose items are all equal (norm weights, zero biases), so that
    bugs that such values hide show."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape))


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
    crash or a timeout is a row too) to ``out_path`` (appended) or stdout. ``timeout`` counts the
    CPU seconds of the child and its own children (on a machine other processes load, wall-clock
    seconds say more about them than about the export), with a wall-clock cap of
    ``WALL_PER_CPU`` times it."""
    out = open(out_path, "a") if out_path else sys.stdout
    for fam in families:
        stdout, stderr, returncode, cpu = _run_child([sys.executable, script, "--child", fam, *extra], timeout)
        line = next((l for l in stdout.splitlines() if l.startswith("SURVEY ")), None)
        if returncode is None:
            row = {"family": fam, "status": "timeout", "cpu_seconds": round(cpu, 1)}
        elif line:
            row = json.loads(line[7:])
        else:
            signal = f"killed by signal {-returncode}" + (" (out of memory?)" if returncode == -9 else "") \
                if returncode < 0 else f"exit code {returncode}"
            row = {"family": fam, "status": "crash", "returncode": returncode,
                   "error": f"{signal}: {(stderr or '')[-400:]}"}
        out.write(json.dumps(row) + "\n")
        out.flush()


WALL_PER_CPU = 6.0


def _run_child(cmd: list, cpu_limit: float) -> tuple:
    """``(stdout, stderr, returncode, cpu seconds)`` of ``cmd``; returncode None when it was
    stopped past ``cpu_limit`` CPU seconds of its process tree (or ``WALL_PER_CPU`` times that
    in wall-clock seconds)."""
    import os
    import signal

    start = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    cpu = 0.0
    while True:
        try:
            stdout, stderr = p.communicate(timeout=2.0)
            return stdout, stderr, p.returncode, cpu
        except subprocess.TimeoutExpired:
            cpu = max(cpu, _tree_cpu_seconds(p.pid))
            if cpu > cpu_limit or time.time() - start > WALL_PER_CPU * cpu_limit:
                break
    os.killpg(p.pid, signal.SIGKILL)  # the child's session: it and the engine runs it started
    stdout, stderr = p.communicate()
    return stdout, stderr, None, cpu


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system, with those of its children already waited for) of ``pid``
    and every process below it, from /proc (0 where /proc cannot be read)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(v) for v in fields[11:15]) / tick
    total, stack = 0.0, [pid]
    while stack:
        q = stack.pop()
        total += cpu.get(q, 0.0)
        stack.extend(c for c, parent in parents.items() if parent == q)
    return total


if __name__ == "__main__":
    main()
