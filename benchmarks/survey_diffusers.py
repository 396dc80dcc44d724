"""Try diffusers' models in tiny configurations (random weights, constant parameters given noise):
UNet2D, UNet2DCondition, UNet1D, AutoencoderKL encode and decode, VQModel, AutoencoderTiny encode
and decode, DiT, PixArt, Sana, SD3 and Flux transformers and a scheduler step, exported with a
dynamic batch and dynamic spatial (and text) sizes, checked in tract at the example and at other
sizes. One child process per model; a table, the count and the slowest rows at the end.

    python benchmarks/survey_diffusers.py --out diffusers.jsonl [--only unet2d,dit] [--timeout 180]

Its venv: diffusers needs only torch (and no hub: every model is built from a config); the venv
of ``survey_torchvision.py`` serves (its docstring says how to build it), or any venv with the
CPU torch 2.13.0, the project's requirements and ``diffusers``. Never the project's venv.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rand(*shape, seed=0):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _unet2d():
    import torch
    from diffusers import UNet2DModel

    m = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
                    down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                    norm_num_groups=8, attention_head_dim=8)
    return (lambda x, t: m(x, t).sample), m, (_rand(1, 3, 16, 16), torch.tensor([10])), ["sample", "timestep"], \
        {"sample": {0: "B", 2: "H", 3: "W"}, "timestep": {0: "B"}}


def _unet2d_condition():
    import torch
    from diffusers import UNet2DConditionModel

    m = UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                             block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                             up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                             attention_head_dim=8, norm_num_groups=8)
    inputs = (_rand(1, 4, 16, 16), torch.tensor([10]), _rand(1, 7, 32, seed=1))
    return (lambda x, t, c: m(x, t, c).sample), m, inputs, ["sample", "timestep", "context"], \
        {"sample": {0: "B", 2: "H", 3: "W"}, "timestep": {0: "B"}, "context": {0: "B", 1: "S"}}


def _vae():
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                         norm_num_groups=8, layers_per_block=1)


def _vae_encode():
    m = _vae()
    return (lambda x: m.encode(x).latent_dist.mode()), m, (_rand(1, 3, 32, 32),), ["image"], \
        {"image": {0: "B", 2: "H", 3: "W"}}


def _vae_decode():
    m = _vae()
    return (lambda z: m.decode(z).sample), m, (_rand(1, 4, 16, 16),), ["latent"], {"latent": {0: "B", 2: "H", 3: "W"}}


def _dit():
    import torch
    from diffusers import DiTTransformer2DModel

    m = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                              num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10)
    inputs = (_rand(1, 4, 8, 8), torch.tensor([10]), torch.tensor([3]))
    # square images only: DiT unpatchifies to a grid of side int(tokens ** 0.5)
    return (lambda x, t, y: m(x, t, y).sample), m, inputs, ["sample", "timestep", "label"], \
        {"sample": {0: "B", 2: "H", 3: "H"}, "timestep": {0: "B"}, "label": {0: "B"}}


def _sd3():
    import torch
    from diffusers import SD3Transformer2DModel

    m = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2,
                              attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                              caption_projection_dim=32, pooled_projection_dim=16, pos_embed_max_size=16)
    inputs = (_rand(1, 4, 8, 8), _rand(1, 7, 32, seed=1), _rand(1, 16, seed=2), torch.tensor([10]))
    return (lambda x, c, p, t: m(x, c, p, t).sample), m, inputs, ["sample", "context", "pooled", "timestep"], \
        {"sample": {0: "B", 2: "H", 3: "W"}, "context": {0: "B", 1: "S"}, "pooled": {0: "B"}, "timestep": {0: "B"}}


def _flux():
    import torch
    from diffusers import FluxTransformer2DModel

    m = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
                               num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16,
                               axes_dims_rope=(4, 6, 6))
    ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.0), torch.arange(4.0), indexing="ij"), -1)
    inputs = (_rand(1, 16, 16), _rand(1, 7, 32, seed=1), _rand(1, 16, seed=2), torch.tensor([0.5]),
              ids.reshape(16, 3), torch.zeros(7, 3))
    names = ["latents", "context", "pooled", "timestep", "img_ids", "txt_ids"]
    return (lambda x, c, p, t, i, j: m(x, c, p, t, img_ids=i, txt_ids=j).sample), m, inputs, names, \
        {"latents": {0: "B", 1: "L"}, "context": {0: "B", 1: "S"}, "pooled": {0: "B"}, "timestep": {0: "B"},
         "img_ids": {0: "L"}, "txt_ids": {0: "S"}}


def _unet1d():
    import torch
    from diffusers import UNet1DModel

    m = UNet1DModel(sample_size=32, in_channels=2, out_channels=2, extra_in_channels=64, block_out_channels=(32, 32, 64),
                    down_block_types=("DownBlock1DNoSkip", "DownBlock1D", "AttnDownBlock1D"),
                    up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"), mid_block_type="UNetMidBlock1D",
                    act_fn="mish", use_timestep_embedding=False, time_embedding_type="fourier", flip_sin_to_cos=True,
                    downsample_each_block=False)
    return (lambda x, t: m(x, t).sample), m, (_rand(1, 2, 32), torch.tensor([10])), ["sample", "timestep"], \
        {"sample": {0: "B", 2: "T"}, "timestep": {0: "B"}}


def _vq_model():
    from diffusers import VQModel

    m = VQModel(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                norm_num_groups=8, layers_per_block=1, num_vq_embeddings=32, vq_embed_dim=4)
    return (lambda x: m(x).sample), m, (_rand(1, 3, 16, 16),), ["image"], {"image": {0: "B", 2: "H", 3: "W"}}


def _tiny_vae():
    from diffusers import AutoencoderTiny

    return AutoencoderTiny(in_channels=3, out_channels=3, encoder_block_out_channels=(8, 8, 8, 8),
                           decoder_block_out_channels=(8, 8, 8, 8), num_encoder_blocks=(1, 1, 1, 1),
                           num_decoder_blocks=(1, 1, 1, 1), latent_channels=4)


def _tiny_vae_encode():
    m = _tiny_vae()
    return (lambda x: m.encode(x).latents), m, (_rand(1, 3, 32, 32),), ["image"], {"image": {0: "B", 2: "H", 3: "W"}}


def _tiny_vae_decode():
    m = _tiny_vae()
    return (lambda z: m.decode(z).sample), m, (_rand(1, 4, 4, 4),), ["latent"], {"latent": {0: "B", 2: "H", 3: "W"}}


def _pixart():
    import torch
    from diffusers import PixArtTransformer2DModel

    m = PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                 num_layers=1, cross_attention_dim=16, sample_size=8, patch_size=2, caption_channels=32,
                                 norm_num_groups=8)
    inputs = (_rand(1, 4, 8, 8), _rand(1, 7, 32, seed=1), torch.tensor([10]))
    cond = {"resolution": None, "aspect_ratio": None}
    return (lambda x, c, t: m(x, encoder_hidden_states=c, timestep=t, added_cond_kwargs=cond).sample), m, inputs, \
        ["sample", "context", "timestep"], {"sample": {0: "B", 2: "H", 3: "W"}, "context": {0: "B", 1: "S"},
                                            "timestep": {0: "B"}}


def _sana():
    import torch
    from diffusers import SanaTransformer2DModel

    m = SanaTransformer2DModel(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1,
                               num_cross_attention_heads=2, cross_attention_head_dim=8, cross_attention_dim=16,
                               caption_channels=32, sample_size=8, patch_size=1)
    inputs = (_rand(1, 4, 8, 8), _rand(1, 7, 32, seed=1), torch.tensor([10]))
    return (lambda x, c, t: m(x, encoder_hidden_states=c, timestep=t).sample), m, inputs, \
        ["sample", "context", "timestep"], {"sample": {0: "B", 2: "H", 3: "W"}, "context": {0: "B", 1: "S"},
                                            "timestep": {0: "B"}}


def _scheduler_step():
    import torch
    from diffusers import DDIMScheduler

    s = DDIMScheduler(num_train_timesteps=100)
    s.set_timesteps(10)
    t = int(s.timesteps[3])
    return (lambda eps, x: s.step(eps, t, x).prev_sample), torch.nn.Module(), \
        (_rand(1, 4, 8, 8), _rand(1, 4, 8, 8, seed=1)), ["model_output", "sample"], \
        {"model_output": {0: "B", 2: "H", 3: "W"}, "sample": {0: "B", 2: "H", 3: "W"}}


BUILDERS = {"unet2d": _unet2d, "unet2d_condition": _unet2d_condition, "vae_encode": _vae_encode,
            "vae_decode": _vae_decode, "dit": _dit, "sd3": _sd3, "flux": _flux, "scheduler_step": _scheduler_step,
            "unet1d": _unet1d, "vq_model": _vq_model, "tiny_vae_encode": _tiny_vae_encode,
            "tiny_vae_decode": _tiny_vae_decode, "pixart": _pixart, "sana": _sana}


def one(name: str) -> dict:
    import torch

    from survey_libraries import calibrate, export_row

    torch.manual_seed(0)
    fn, model, inputs, names, axes = BUILDERS[name]()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            return fn(*xs)

    wrapped = calibrate(Wrapped(), lambda seed: inputs)
    row = {"family": name, "params": sum(p.numel() for p in wrapped.parameters()),
           "input": [list(t.shape) for t in inputs]}
    return export_row(row, wrapped, inputs, names, axes, f"/tmp/survey_diffusers_{name}.nnef.tgz")


def main() -> None:
    from survey_libraries import survey

    survey(__file__, one, lambda: list(BUILDERS), timeout=180)


if __name__ == "__main__":
    main()
