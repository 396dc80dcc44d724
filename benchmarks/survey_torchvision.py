"""Try torchvision's classification, segmentation, video and optical-flow models, built without
weights (random, BatchNorm statistics from a calibration pass), exported with a dynamic batch and
dynamic spatial (and temporal) sizes where the model allows, checked in tract at the example and
at other sizes. One child process per model; a table (exported / checked at two sizes / reason /
seconds), the count and the slowest rows at the end.

    python benchmarks/survey_torchvision.py --out tv.jsonl [--only resnet18,swin_t] [--all] [--timeout 180]

By default the smallest model of each family (the builders of one torchvision module that share
a name up to their size suffix); ``--all`` takes every model.

Its venv (torchvision is on the registry only as a CUDA build, which fails to import against
the CPU torch, and transformers then fails too: never install it in the project's venv). torch's
CUDA build of the same version runs on CPU::

    python3 -m venv /work/venvs/vision
    /work/venvs/vision/bin/pip install torch==2.13.0 numpy nnef nnef-tools tract==0.23.9 tqdm isal \\
        transformers==5.23.0 timm diffusers            # pulls torchvision 0.28.0 (for torch 2.13)
    # the CUDA build of torch 2.13.0 in place of the CPU one (the machine's local wheel folder
    # and pip config point at the CPU build: bypass them for this one install)
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null /work/venvs/vision/bin/pip install torch==2.13.0
    /work/venvs/vision/bin/python benchmarks/survey_torchvision.py --out tv.jsonl
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# per model: builder keywords and the example's input shape; ViT-like models fix their image
# size (a learned position table), so only their batch is dynamic
SPATIAL = 64
KWARGS = {
    "vit_b_16": dict(image_size=64), "vit_b_32": dict(image_size=64), "vit_l_16": dict(image_size=64),
    "vit_l_32": dict(image_size=64), "vit_h_14": dict(image_size=56),
    "inception_v3": dict(aux_logits=False, init_weights=True), "googlenet": dict(aux_logits=False, init_weights=True),
}
FIXED_SIZE = {"vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14", "maxvit_t"}
SIZE = {"inception_v3": 96, "maxvit_t": 224, "alexnet": 80, "mvit_v1_b": 224, "mvit_v2_s": 224,
        "raft_small": 128, "raft_large": 128, "vit_h_14": 56,
        "s3d": 224}  # S3D's last pooling is a fixed (2, 7, 7) window: 16 frames of 224 px at least
FRAMES = {"mvit_v1_b": 16, "mvit_v2_s": 16, "s3d": 16}


def _kind(fn) -> str:
    module = fn.__module__.split(".")
    return next((k for k in ("segmentation", "video", "optical_flow", "detection", "quantization")
                 if k in module), "classification")


def _catalogue() -> dict:
    """name -> (kind, builder) of every model torchvision lists, detection and quantized ones left out."""
    import torchvision.models as tvm

    out = {}
    for name in tvm.list_models():
        fn = tvm.get_model_builder(name)
        kind = _kind(fn)
        if kind in ("classification", "segmentation", "video", "optical_flow"):
            out[name] = (kind, fn)
    return out


def _family(name: str, fn) -> tuple:
    stem = re.sub(r"(_(x?\d[\w]*|[tsbmlh]|small|large|tiny|base|bn))+$", "", name)
    stem = re.sub(r"\d+$", "", stem)
    return fn.__module__, stem


def _make(fn, **kwargs):
    """The model ``fn`` builds with no weights (nor a pretrained backbone: nothing is downloaded)."""
    import inspect

    names = inspect.signature(fn).parameters
    kwargs.update({k: None for k in ("weights", "weights_backbone") if k in names})
    return fn(**kwargs)


def _params_on_meta(fn) -> int:
    import torch

    try:
        with torch.device("meta"):
            return sum(p.numel() for p in _make(fn).parameters())
    except Exception:  # noqa: BLE001 - an init that copies data (RegNet's, ViT's): count for real
        return sum(p.numel() for p in _make(fn).parameters())


def models() -> list:
    cat = _catalogue()
    best: dict = {}
    for name, (_, fn) in sorted(cat.items()):
        key = _family(name, fn)
        n = _params_on_meta(fn)
        if key not in best or n < best[key][0]:
            best[key] = (n, name)
    return sorted(name for _, name in best.values())


def build(name: str):
    """The model (a module returning tensors), its example inputs, names and dynamic axes."""
    import torch

    from survey_libraries import calibrate

    kind, fn = _catalogue()[name]
    torch.manual_seed(0)
    model = _make(fn, **KWARGS.get(name, {})).eval()
    size = SIZE.get(name, SPATIAL)
    spatial = {} if name in FIXED_SIZE else {2: "H", 3: "W"}
    if kind == "video":
        size = SIZE.get(name, 56)
        frames = FRAMES.get(name, 8)
        shape, axes = (1, 3, frames, size, size), ({0: "B"} if name.startswith(("mvit", "s3d")) else
                                                    {0: "B", 2: "T", 3: "H", 4: "W"})
    else:
        shape, axes = (1, 3, size, size), {0: "B", **spatial}

    def make(seed):
        g = torch.Generator().manual_seed(100 + seed)
        x = torch.randn((2,) + shape[1:], generator=g)
        return (x, torch.randn(x.shape, generator=g)) if kind == "optical_flow" else x

    model = calibrate(model, make)
    wrapped = _outputs_class()(model, kind).eval()
    g = torch.Generator().manual_seed(0)
    if kind == "optical_flow":
        inputs, names = (torch.randn(shape, generator=g), torch.randn(shape, generator=g)), ["image1", "image2"]
        return wrapped, inputs, names, {"image1": axes, "image2": axes}
    return wrapped, (torch.randn(shape, generator=g),), ["x"], {"x": axes}


def _outputs_class():
    import torch

    class Outputs(torch.nn.Module):
        """The model's tensors: segmentation's "out" map, RAFT's last flow estimate."""

        def __init__(self, model, kind):
            super().__init__()
            self.model, self.kind = model, kind

        def forward(self, *xs):
            out = self.model(*xs)
            if isinstance(out, dict):
                return out["out"]
            if isinstance(out, (list, tuple)) and self.kind == "optical_flow":
                return out[-1]
            return out

    return Outputs


def one(name: str) -> dict:
    from survey_libraries import export_row

    kind = _catalogue()[name][0]
    row = {"family": name, "kind": kind}
    model, inputs, names, axes = build(name)
    row["params"] = sum(p.numel() for p in model.parameters())
    row["input"] = [list(t.shape) for t in inputs]
    return export_row(row, model, inputs, names, axes, f"/tmp/survey_tv_{name}.nnef.tgz")


def main() -> None:
    from survey_libraries import survey

    if "--all" in sys.argv:
        sys.argv.remove("--all")
        sys.argv.append("--only=" + ",".join(models_all()))
    survey(__file__, one, models, timeout=180)


def models_all() -> list:
    return sorted(_catalogue())


if __name__ == "__main__":
    main()
