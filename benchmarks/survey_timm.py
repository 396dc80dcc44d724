"""Try timm's models: the smallest model of each of its model modules (``timm.list_modules()``,
parameters counted on the meta device), ``pretrained=False``, 10 classes, BatchNorm statistics
from a calibration pass; exported with a dynamic batch and dynamic H and W where the model takes
any size (a fixed-size model: 64 x 64 where it accepts ``img_size``, else its default, batch only),
checked in tract at the example and at other sizes. One child process per model; a table, the
count and the slowest rows at the end.

    python benchmarks/survey_timm.py --out timm.jsonl [--only resnet18,eva02_tiny_patch14_224] [--timeout 180]

Its venv: timm needs only torch, but pulls torchvision, whose registry builds fail against the
CPU torch, and transformers then fails too: never install it in the project's venv. The venv of
``survey_torchvision.py`` (its docstring says how to build it) serves both.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SPATIAL = 64
CACHE = Path("/tmp/survey_timm_smallest.json")


def models() -> list:
    """The smallest model of each timm module (cached in ``CACHE``: counting takes a minute)."""
    if CACHE.exists():
        return json.loads(CACHE.read_text())
    import torch
    import timm

    picked = []
    for module in sorted(timm.list_modules()):
        sizes = []
        for name in timm.list_models(module=module):
            try:
                with torch.device("meta"):
                    sizes.append((sum(p.numel() for p in timm.create_model(name, num_classes=10).parameters()), name))
            except Exception:  # noqa: BLE001 - a model that does not build on meta is not picked
                continue
        if sizes:
            picked.append(min(sizes)[1])
    CACHE.write_text(json.dumps(sorted(picked)))
    return sorted(picked)


def _create(name: str):
    """The model at 64 x 64 where it accepts ``img_size`` (and then at that size only), else at
    its default, and whether its spatial sizes are free."""
    import timm

    cfg = timm.get_pretrained_cfg(name)
    fixed = bool(getattr(cfg, "fixed_input_size", False)) if cfg else False
    default = (getattr(cfg, "input_size", None) or (3, 224, 224))[1:] if cfg else (224, 224)
    if fixed:
        try:
            return timm.create_model(name, pretrained=False, num_classes=10, img_size=SPATIAL), (SPATIAL, SPATIAL), True
        except TypeError:
            return timm.create_model(name, pretrained=False, num_classes=10), tuple(default), True
    return timm.create_model(name, pretrained=False, num_classes=10), (SPATIAL, SPATIAL), False


def one(name: str) -> dict:
    import torch

    from survey_libraries import calibrate, export_row

    row = {"family": name}
    torch.manual_seed(0)
    model, hw, fixed = _create(name)
    model.eval()
    channels = getattr(model, "in_chans", 3)

    def make(seed):
        return torch.randn(2, channels, *hw, generator=torch.Generator().manual_seed(100 + seed))

    model = calibrate(model, make)
    x = torch.randn(1, channels, *hw, generator=torch.Generator().manual_seed(0))
    axes = {0: "B"} if fixed else {0: "B", 2: "H", 3: "W"}
    row.update(params=sum(p.numel() for p in model.parameters()), input=list(x.shape), fixed_size=fixed)
    return export_row(row, model, (x,), ["x"], {"x": axes}, f"/tmp/survey_timm_{name}.nnef.tgz")


def main() -> None:
    from survey_libraries import survey

    survey(__file__, one, models, timeout=180)


if __name__ == "__main__":
    main()
