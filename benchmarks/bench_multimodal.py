"""Cost of ``fx2nnef llm`` on a random vision-language model saved to a folder (not a test).

    python benchmarks/bench_multimodal.py [--family gemma3|llava|qwen2_5_vl|qwen3_vl] [--image-size 224] [--runs 10] [--rounds 2]

The model (SigLIP or CLIP tower, patch 16, 4 vision layers of width 256; a 4-layer text model of
width 256 and a 32000 vocabulary) is built from a config, its constant parameters perturbed,
saved with ``save_pretrained`` and exported from the folder as the CLI does (checks on,
``--generate 4``). Printed: export wall time and its stages, peak RSS growth of the export call
against the weight bytes, the sizes of the two graphs, and the latency of encoding one image
(the encoder graph in tract, in a child process on one thread, against the model's own tower
and projector in torch eager on one thread), in ``--rounds`` rounds alternating the engines.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: use this checkout's fx2nnef
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_llm import _median  # noqa: E402


def _resident_kib(field: str = "VmRSS") -> int:
    """This process's resident size (``VmRSS``) or its peak (``VmHWM``), KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Make the peak (VmHWM) restart from the current resident size (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


def _times_ms(call, runs: int) -> list:
    """``runs`` timings of ``call()`` in ms, after one warm-up call."""
    call()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        times.append(round(1000 * (time.perf_counter() - t), 3))
    return times


def save_random_vlm(family: str, image_size: int, folder: Path) -> int:
    """Save a random vision-language model to ``folder``; return its weight bytes."""
    import torch
    import transformers as T

    vision = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                  image_size=image_size, patch_size=16)
    text = dict(vocab_size=32000, hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=2048)
    if family == "gemma3":
        side = image_size // 16
        config = T.Gemma3Config(text_config=T.Gemma3TextConfig(head_dim=64, sliding_window=64, **text),
                                vision_config=T.SiglipVisionConfig(**vision), mm_tokens_per_image=(side // 2) ** 2,
                                image_token_index=31999, boi_token_index=31997, eoi_token_index=31998)
        model = T.Gemma3ForConditionalGeneration(config)
    elif family == "qwen2_5_vl":  # patch 14, merge 2, windows of 112 px, the last of 4 blocks full attention
        qtext = {**text, "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]}}
        config = T.Qwen2_5_VLConfig(text_config=qtext, image_token_id=31999, video_token_id=31998,
                                    vision_start_token_id=31997,
                                    vision_config=dict(depth=4, hidden_size=256, intermediate_size=1024, num_heads=4,
                                                       out_hidden_size=256, patch_size=14, window_size=112,
                                                       fullatt_block_indexes=[3]))
        model = T.Qwen2_5_VLForConditionalGeneration(config)
    elif family == "qwen3_vl":  # patch 16, merge 2, DeepStack streams from blocks 1 and 2, interleaved M-RoPE
        qtext = {**text, "head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                             "mrope_section": [8, 12, 12], "mrope_interleaved": True}}
        config = T.Qwen3VLConfig(text_config=qtext, image_token_id=31999, video_token_id=31998,
                                 vision_start_token_id=31997,
                                 vision_config=dict(depth=4, hidden_size=256, intermediate_size=1024, num_heads=4,
                                                    out_hidden_size=256, patch_size=16, num_position_embeddings=1024,
                                                    deepstack_visual_indexes=[1, 2]))
        model = T.Qwen3VLForConditionalGeneration(config)
    else:
        config = T.LlavaConfig(vision_config=T.CLIPVisionConfig(**vision), text_config=T.LlamaConfig(**text),
                               image_token_id=31999)
        model = T.LlavaForConditionalGeneration(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or (p.numel() > 1 and p.std() == 0):
                p.add_(torch.randn_like(p) * 0.1)
    model.eval().save_pretrained(folder)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def image_inputs(config, image_size: int) -> list:
    """One image's encoder inputs as numpy arrays: pixels, or Qwen-VL's patches and tables."""
    import numpy as np

    rng = np.random.default_rng(0)
    vision = config.vision_config
    if getattr(vision, "temporal_patch_size", None):
        from fx2nnef.llm.qwen_vision import vision_tables

        side = image_size // vision.patch_size
        dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
        tables = vision_tables(config, [[1, side, side]])
        return [rng.standard_normal((side * side, dim)).astype(np.float32), *[t.numpy() for t in tables]]
    return [rng.standard_normal((1, 3, image_size, image_size)).astype(np.float32)]


def torch_encoding(folder: Path, image_size: int, runs: int) -> list:
    """The model's own tower and projector on one image, torch eager on one thread."""
    import torch
    import transformers as T

    from fx2nnef.llm.multimodal import EncoderGraph
    from fx2nnef.llm.multimodal_families import family_of

    torch.set_num_threads(1)
    config = T.AutoConfig.from_pretrained(folder)
    model = getattr(T, config.architectures[0]).from_pretrained(folder, local_files_only=True).eval()
    encoder = EncoderGraph(model, family_of(model.config).modalities[0])
    inputs = [torch.from_numpy(a) for a in image_inputs(model.config, image_size)]
    if len(inputs) > 1:  # Qwen-VL: the model's own tower with its own tables, as transformers runs it
        side = image_size // model.config.vision_config.patch_size
        grid = torch.tensor([[1, side, side]])
        with torch.no_grad():
            return _times_ms(lambda: model.model.visual(inputs[0], grid_thw=grid), runs)
    with torch.no_grad():
        return _times_ms(lambda: encoder(*inputs), runs)


def tract_encoding(asset: Path, inputs: list, runs: int) -> list:
    """The encoder graph on one image's inputs in tract, in a child process on one thread."""
    import numpy as np

    np.savez(asset.with_suffix(".inputs.npz"), *inputs)
    code = textwrap.dedent(f"""
        import json, time, numpy as np, tract
        model = tract.nnef().with_tract_transformers().load({str(asset)!r}).into_runnable()
        saved = np.load({str(asset.with_suffix(".inputs.npz"))!r})
        image = [saved[f"arr_{{k}}"] for k in range(len(saved.files))]
        model.run(image)
        ts = []
        for _ in range({runs}):
            t = time.perf_counter(); model.run(image); ts.append(time.perf_counter() - t)
        print(json.dumps([round(1000 * t, 3) for t in ts]))
    """)
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=["gemma3", "llava", "qwen2_5_vl", "qwen3_vl"], default="gemma3")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    ns = parser.parse_args()
    import transformers

    from fx2nnef.llm import export_causal_lm

    with tempfile.TemporaryDirectory(prefix="bench_multimodal_") as temp:
        src, out = Path(temp) / "src", Path(temp) / "out"
        weight_bytes = save_random_vlm(ns.family, ns.image_size, src)
        print(f"{ns.family}, image {ns.image_size} px: {weight_bytes / 2**20:.1f} MiB of f32 weights; 1 thread",
              flush=True)
        _reset_peak()
        before = _resident_kib()
        t = time.perf_counter()
        result = export_causal_lm(src, out, generate=4)
        wall = time.perf_counter() - t
        peak = max(_resident_kib("VmHWM") - before, 0)
        encoder = out / "vision" / "model.nnef.tgz"
        row = {"export_s": round(wall, 1), "stages_s": result.manifest["timings_s"],
               "peak_rss_mib": round(peak / 1024, 1), "weights_mib": round(weight_bytes / 2**20, 1),
               "peak_rss_over_weights": round(peak * 1024 / weight_bytes, 2),
               "decoder_mib": round((out / "model.nnef.tgz").stat().st_size / 2**20, 1),
               "encoder_mib": round(encoder.stat().st_size / 2**20, 1),
               "image_tokens": result.manifest["multimodal"]["encoders"][0]["tokens_per_input"],
               "generate_equal": result.checks["generate"]["equal"]}
        times = {"tract": [], "torch": []}
        config = transformers.AutoConfig.from_pretrained(src)
        for _ in range(ns.rounds):
            times["tract"] += tract_encoding(encoder, image_inputs(config, ns.image_size), ns.runs)
            times["torch"] += torch_encoding(src, ns.image_size, ns.runs)
        for engine, values in times.items():
            row[f"encode_{engine}_ms"] = {"median": _median(values), "min": min(values)}
        row["encode_tract_over_torch"] = round(_median(times["tract"]) / _median(times["torch"]), 2)
        print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
