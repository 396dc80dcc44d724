"""Try timm's models: one small model of each of 50 families (``SAMPLE``) and the smallest model
of each of its 98 model modules (``PER_MODULE``, from ``timm.list_modules()`` with parameters
counted on the meta device; ``--pick`` counts them again); ``pretrained=False``, 10 classes,
BatchNorm statistics from a calibration pass; exported with a dynamic batch and dynamic H and W where the model takes
any size (a fixed-size model: 64 x 64 where it accepts ``img_size``, else its default, batch only),
checked in tract at the example and at other sizes. One child process per model; a table, the
count and the slowest rows at the end.

    python benchmarks/survey_timm.py --out timm.jsonl [--pick] [--only resnet18,eva02_tiny_patch14_224] [--timeout 180]

Its venv: timm needs only torch, but pulls torchvision, whose registry builds fail against the
CPU torch, and transformers then fails too: never install it in the project's venv. The venv of
``survey_torchvision.py`` (its docstring says how to build it) serves both.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SPATIAL = 64
CACHE = Path("/tmp/survey_timm_smallest.json")
# one small model of each of 50 families, chosen by hand
SAMPLE = """resnet18 efficientnet_b0 mobilenetv3_small_050 convnext_atto convnextv2_atto vit_tiny_patch16_224
deit_tiny_patch16_224 swin_tiny_patch4_window7_224 swinv2_cr_tiny_ns_224 eva02_tiny_patch14_224 mobilevitv2_050
mobilevit_xxs regnetx_002 levit_128s edgenext_xx_small poolformer_s12 ghostnet_050 repvgg_a0 fastvit_t8
tiny_vit_5m_224 rexnet_100 dla34 hrnet_w18_small densenet121 cspresnet50 resnest14d xcit_nano_12_p16_224 pit_ti_224
cait_xxs24_224 mobileone_s0 inception_next_atto hgnetv2_b0 mambaout_femto starnet_s050 maxvit_nano_rw_256
coatnet_nano_rw_224 efficientformer_l1 efficientvit_b0 lcnet_050 mixnet_s tf_efficientnet_b0 nfnet_l0 dpn48b
convmixer_768_32 gernet_s vovnet39a crossvit_tiny_240 twins_svt_small beit_base_patch16_224 flexivit_small""".split()

# the smallest model (parameters counted on the meta device) of each of timm 1.0.31's 98 model
# modules, as ``--pick`` finds them (it takes about 6 minutes on a shared machine)
PER_MODULE = """beit_base_patch16_224 cait_xxs24_224 coat_tiny convit_tiny convmixer_768_32 cpubone_nano
crossvit_tiny_240 cs3darknet_focus_s csatv2 cspnext_tiny davit_tiny deepseek_vit_412m
deit_tiny_patch16_224 densenet121 dla46x_c dpn48b edgenext_xx_small efficientformer_l1
efficientformerv2_s0 efficientvim_m1 efficientvit_b0 efficientvit_m0 ese_vovnet19b_slim_dw
fasternet_t0 fastvit_t8 focalnet_tiny_srf gcvit_xxtiny gemma4_vit_167m_enc ghostnet_050
gmlp_ti16_224 halonet_h1 hardcorenas_b hgnetv2_b0 hiera_tiny_224 hrnet_w18_small iformer_t
inception_next_atto inception_resnet_v2 inception_v3 inception_v4 lcnet_035 lcnetv2_small
legacy_seresnet18 legacy_xception levit_128s lowformer_b0 mobilenetv5_base mobilevit_xxs
mvitv2_tiny naflexvit_base_patch16_parfac_gap nasnetalarge nest_tiny nextvit_small pit_ti_224
pnasnet5large poolformerv2_s12 pvt_v2_b0 qwen3_vit_88m rdnet_tiny regnetx_002 repghostnet_050
repvit_m1 res2next50 resnest14d resnetv2_18 rexnet_100 sam2_hiera_tiny samvit_base_patch16_224
selecsls42 sequencer2d_s shvit_s1 skresnet18 starnet_s050 swiftformer_xs
swin_tiny_patch4_window7_224 swinv2_cr_tiny_224 swinv2_tiny_window16_256 test_byobnet test_coatnet
test_convnext test_efficientnet test_mambaout test_nfnet test_resnet test_vit test_vit_relpos
tiny_vit_5m_224 tnt_s_legacy_patch16_224 tresnet_m twins_svt_small vgg11 visformer_tiny
vit_tiny_patch16_dinov3_qkvb vit_tiny_r_s16_p8_224 vitamin_small_224 volo_d1_224 xception41p
xcit_nano_12_p8_224""".split()


def models() -> list:
    """:data:`SAMPLE` and :data:`PER_MODULE` (a family's smallest model is often a test model, so
    both), or with ``--pick`` the smallest model of each module of the timm installed, counted
    again (cached in ``CACHE``)."""
    if "--pick" not in sys.argv:
        return list(dict.fromkeys(SAMPLE + PER_MODULE))
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
    cpu = time.process_time()
    row = export_row(row, model, (x,), ["x"], {"x": axes}, f"/tmp/survey_timm_{name}.nnef.tgz")
    # this process's CPU seconds (the engine's runs in other processes aside): the machine's load
    # from other processes makes the wall-clock seconds vary
    row["cpu_seconds"] = round(time.process_time() - cpu, 1)
    return row


def main() -> None:
    from survey_libraries import survey

    if "--pick" in sys.argv:
        sys.argv.append("--only=" + ",".join(models()))
        sys.argv.remove("--pick")
    survey(__file__, one, models, timeout=180)


if __name__ == "__main__":
    main()
