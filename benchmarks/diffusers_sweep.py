"""Does magpy compile diffusers' models, and a denoising loop as people write it? (issue 42, item 4)

    python -m benchmarks.diffusers_sweep [--models UNet2DModel,VQModel] [--timeout 180] [--json PATH]
                                         [--no-torch-compile] [--loop] [--loop-only] [--list]

The transformers sweep (``benchmarks.transformers_sweep``) covers one library of real model
code; diffusers is the other one people compile most, and its code is different: UNets with
per-block Python lists of residuals, ``FrozenDict`` configs read with ``hasattr``, attention
processors picked through ``inspect.signature``, rotary tables built from numpy, VAEs that
loop over frames with a feature cache, schedulers that do their float arithmetic in Python.

Every model class below is built from a small config with random weights (``torch.manual_seed
(0)``, nothing downloaded; the sizes follow diffusers' own model tests: one or two blocks of
32/64 channels, 2 heads of 8, 8x8 latents, 2-5 frames) and checked by
``benchmarks.library_sweep.run_case``: ``fullgraph=True`` against ``torch.compile(fullgraph=
True)`` with a graph-counting backend, then 3 identical calls and one with batch 2, bit-exact
with eager (backend "eager"), in eval mode under ``torch.no_grad()``.  A class that does not
build from the small config, or whose eager forward fails on the generated inputs, is a
``SKIP`` with the reason; ``LEFT_OUT`` lists the classes not attempted, and why.

``--loop`` adds the denoising loop (:func:`denoise`): a small ``UNet2DConditionModel`` stepped
by DDIM, Euler and DPM-Solver++ schedulers over 20 timesteps, with (a) only the UNet compiled
and (b) the loop body (``scale_model_input``, UNet, ``scheduler.step``) compiled as one function;
records over the 20 steps (the target: at most 2 in steady use; the scheduler's floats,
``step_index`` and sigmas must be lifted, not a record per step), breaks, and the final latents
against eager's (``torch.equal``).  ``torch.compile`` (counting backend, no fullgraph) runs the
same body for comparison: graphs and recompiles over the 20 steps.

``--timing`` times ``TIMED`` with Inductor (``benchmarks.library_sweep.time_case``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/diffusers_sweep.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import torch  # noqa: E402

import magpy  # noqa: E402
from benchmarks import library_sweep as ls  # noqa: E402
from benchmarks.library_sweep import Case  # noqa: E402

try:  # before diffusers: a torchvision on the path that cannot load its C++ ops breaks diffusers' imports
    ls.import_torchvision()
except ImportError:
    pass

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import diffusers  # noqa: E402
    import diffusers.models as D  # noqa: E402


# ---------------------------------------------------------------------------------------------
# inputs


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed))


def ts(b: int, value: float = 10) -> torch.Tensor:
    """``b`` timesteps (the same value: the batch of a pipeline's step)."""
    return torch.full((b,), value)


def case(name, build, inputs, family, **kw) -> Case:
    """A case whose inputs take the batch size: batch 1 for the 3 identical calls, 2 for the new shape."""
    return Case(name, build, lambda: inputs(1), lambda: inputs(2), family, **kw)


def _kw(**kwargs):
    return (), kwargs


# ---------------------------------------------------------------------------------------------
# the models


# Wan's transformer and SkyReels-V2's (built on it) take the same config and inputs.
_WAN = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=256, ffn_dim=32, num_layers=1, rope_max_seq_len=32)


def _wan_inputs(b: int):
    return _kw(hidden_states=rand(b, 4, 2, 8, 8), timestep=torch.tensor([3] * b),
               encoder_hidden_states=rand(b, 12, 16, seed=1))


def unet_cases() -> list[Case]:
    return [
        case(
            "UNet1DModel",
            lambda: D.UNet1DModel(extra_in_channels=64),
            lambda b: ((rand(b, 2, 64), ts(b)), {}),
            "unet",
        ),
        case(
            "UNet2DModel",
            lambda: D.UNet2DModel(
                sample_size=8,
                in_channels=3,
                out_channels=3,
                layers_per_block=1,
                block_out_channels=(32, 64),
                down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 3, 8, 8), ts(b)), {}),
            "unet",
        ),
        case(
            "UNet2DConditionModel",
            small_unet,
            lambda b: ((rand(b, 4, 8, 8), ts(b), rand(b, 5, 32, seed=1)), {}),
            "unet",
        ),
        case(
            "UNet3DConditionModel",
            lambda: D.UNet3DConditionModel(
                sample_size=8,
                block_out_channels=(32, 64),
                layers_per_block=1,
                down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
                cross_attention_dim=32,
                attention_head_dim=8,
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 4, 2, 8, 8), ts(b), rand(b, 5, 32, seed=1)), {}),
            "unet",
        ),
        case(
            "UNetMotionModel",
            lambda: D.UNetMotionModel(
                block_out_channels=(32, 64),
                layers_per_block=1,
                down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion"),
                up_block_types=("UpBlockMotion", "CrossAttnUpBlockMotion"),
                cross_attention_dim=32,
                num_attention_heads=2,
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 4, 2, 8, 8), ts(b), rand(b, 5, 32, seed=1)), {}),
            "unet",
        ),
        case(
            "UNetSpatioTemporalConditionModel",
            lambda: D.UNetSpatioTemporalConditionModel(
                sample_size=8,
                in_channels=8,
                out_channels=4,
                block_out_channels=(32, 64),
                layers_per_block=1,
                down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
                up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
                cross_attention_dim=32,
                num_attention_heads=(2, 4),
                addition_time_embed_dim=32,
                projection_class_embeddings_input_dim=96,
                num_frames=2,
            ),
            lambda b: (
                (rand(b, 2, 8, 8, 8), ts(b), rand(b, 1, 32, seed=1), torch.tensor([[6.0, 127.0, 0.02]] * b)),
                {},
            ),
            "unet",
        ),
        case(
            "I2VGenXLUNet",
            lambda: D.I2VGenXLUNet(
                sample_size=8,
                block_out_channels=(32, 64),
                layers_per_block=1,
                down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
                cross_attention_dim=32,
                attention_head_dim=8,
                num_attention_heads=None,
                norm_num_groups=32,
            ),
            lambda b: (
                (rand(b, 4, 2, 8, 8), ts(b)),
                dict(
                    fps=torch.tensor([8] * b),
                    image_latents=rand(b, 4, 2, 8, 8, seed=2),
                    image_embeddings=rand(b, 32, seed=3),
                    encoder_hidden_states=rand(b, 5, 32, seed=1),
                ),
            ),
            "unet",
        ),
        case(
            "Kandinsky3UNet",
            lambda: D.Kandinsky3UNet(
                in_channels=4,
                time_embedding_dim=4,
                groups=2,
                attention_head_dim=4,
                layers_per_block=3,
                block_out_channels=(32, 64),
                cross_attention_dim=4,
                encoder_hid_dim=32,
            ),
            lambda b: (
                (rand(b, 4, 8, 8), ts(b), rand(b, 5, 32, seed=1)),
                {"encoder_attention_mask": torch.ones(b, 5)},
            ),
            "unet",
        ),
        case(
            "StableCascadeUNet",
            lambda: D.StableCascadeUNet(
                in_channels=4,
                out_channels=4,
                timestep_ratio_embedding_dim=32,
                patch_size=1,
                conditioning_dim=32,
                block_out_channels=(32, 32),
                num_attention_heads=(2, 2),
                down_num_layers_per_block=(1, 1),
                up_num_layers_per_block=(1, 1),
                clip_text_pooled_in_channels=32,
                clip_seq=4,
                dropout=(0.0, 0.0),
                switch_level=(False,),
                timestep_conditioning_type=("sca",),
            ),
            lambda b: ((rand(b, 4, 8, 8), torch.full((b,), 0.5), rand(b, 1, 32, seed=1)), {}),
            "unet",
        ),
        case(
            "UVit2DModel",
            lambda: D.UVit2DModel(
                hidden_size=32,
                cond_embed_dim=32,
                micro_cond_encode_dim=4,
                micro_cond_embed_dim=20,
                encoder_hidden_size=32,
                vocab_size=32,
                codebook_size=16,
                in_channels=32,
                block_out_channels=32,
                num_res_blocks=1,
                block_num_heads=2,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=64,
                sample_size=4,
            ),
            lambda b: (
                (
                    torch.randint(0, 16, (b, 4, 4), generator=_g()),
                    rand(b, 5, 32, seed=1),
                    rand(b, 32, seed=2),
                    torch.tensor([[16.0, 16.0, 0.0, 0.0, 6.0]] * b),
                ),
                {},
            ),
            "unet",
        ),
    ]


def small_unet() -> torch.nn.Module:
    """The UNet2DConditionModel of the sweep and of the denoising loop (8x8 latents, 4 channels)."""
    return D.UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=32,
    )


def controlnet_cases() -> list[Case]:
    down2 = ("CrossAttnDownBlock2D", "DownBlock2D")
    flux_ids = dict(img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(5, 3))
    return [
        case(
            "ControlNetModel",
            lambda: D.ControlNetModel(
                in_channels=4,
                layers_per_block=1,
                block_out_channels=(32, 64),
                down_block_types=down2,
                cross_attention_dim=32,
                norm_num_groups=32,
                conditioning_embedding_out_channels=(16, 32),
            ),
            lambda b: ((rand(b, 4, 8, 8), ts(b), rand(b, 5, 32, seed=1), rand(b, 3, 16, 16, seed=2)), {}),
            "controlnet",
        ),
        case(
            "ControlNetUnionModel",
            lambda: D.ControlNetUnionModel(
                in_channels=4,
                layers_per_block=1,
                block_out_channels=(32, 64),
                down_block_types=down2,
                cross_attention_dim=32,
                norm_num_groups=32,
                conditioning_embedding_out_channels=(16, 32),
                num_trans_channel=32,
                num_trans_head=2,
                num_proj_channel=32,
                addition_time_embed_dim=8,
            ),
            lambda b: (
                (rand(b, 4, 8, 8), ts(b), rand(b, 5, 32, seed=1)),
                dict(
                    controlnet_cond=[rand(b, 3, 16, 16, seed=2)] + [None] * 5,
                    control_type=torch.tensor([[1, 0, 0, 0, 0, 0]] * b),
                    control_type_idx=[0],
                ),
            ),
            "controlnet",
        ),
        case(
            "UNetControlNetXSModel",
            lambda: D.UNetControlNetXSModel(
                sample_size=8,
                down_block_types=down2,
                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                block_out_channels=(32, 64),
                norm_num_groups=4,
                cross_attention_dim=32,
                num_attention_heads=2,
                ctrl_block_out_channels=(4, 8),
                ctrl_num_attention_heads=2,
                ctrl_max_norm_num_groups=2,
                ctrl_conditioning_embedding_out_channels=(16, 32),
            ),
            lambda b: (
                (rand(b, 4, 8, 8), ts(b), rand(b, 5, 32, seed=1)),
                dict(controlnet_cond=rand(b, 3, 16, 16, seed=2)),
            ),
            "controlnet",
        ),
        case(
            "T2IAdapter",
            lambda: D.T2IAdapter(in_channels=3, channels=[32, 64], num_res_blocks=1, downscale_factor=2),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "controlnet",
        ),
        case(
            "SD3ControlNetModel",
            lambda: D.SD3ControlNetModel(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                caption_projection_dim=16,
                pooled_projection_dim=8,
                out_channels=4,
                pos_embed_max_size=16,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                controlnet_cond=rand(b, 4, 8, 8, seed=2),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                pooled_projections=rand(b, 8, seed=3),
                timestep=ts(b, 3),
            ),
            "controlnet",
        ),
        case(
            "FluxControlNetModel",
            lambda: D.FluxControlNetModel(
                patch_size=1,
                in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                pooled_projection_dim=8,
                axes_dims_rope=(2, 2, 4),
            ),
            lambda b: _kw(
                hidden_states=rand(b, 16, 4),
                controlnet_cond=rand(b, 16, 4, seed=2),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                pooled_projections=rand(b, 8, seed=3),
                timestep=ts(b, 3.0),
                **flux_ids,
            ),
            "controlnet",
        ),
        case(
            "SanaControlNetModel",
            lambda: D.SanaControlNetModel(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=8,
                num_layers=1,
                num_cross_attention_heads=2,
                cross_attention_head_dim=8,
                cross_attention_dim=16,
                caption_channels=16,
                sample_size=8,
                patch_size=1,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                timestep=ts(b, 3),
                controlnet_cond=rand(b, 4, 8, 8, seed=2),
            ),
            "controlnet",
        ),
    ]


def autoencoder_cases() -> list[Case]:
    enc2, dec2 = ("DownEncoderBlock2D",) * 2, ("UpDecoderBlock2D",) * 2
    return [
        case(
            "AutoencoderKL",
            lambda: D.AutoencoderKL(
                in_channels=3,
                out_channels=3,
                down_block_types=enc2,
                up_block_types=dec2,
                block_out_channels=(32, 64),
                latent_channels=4,
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AsymmetricAutoencoderKL",
            lambda: D.AsymmetricAutoencoderKL(
                down_block_types=enc2,
                down_block_out_channels=(32, 64),
                up_block_types=dec2,
                up_block_out_channels=(32, 64),
                latent_channels=4,
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderTiny",
            lambda: D.AutoencoderTiny(
                encoder_block_out_channels=(16, 16),
                decoder_block_out_channels=(16, 16),
                num_encoder_blocks=(1, 1),
                num_decoder_blocks=(1, 1),
            ),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "VQModel",
            lambda: D.VQModel(
                block_out_channels=(32, 64),
                down_block_types=enc2,
                up_block_types=dec2,
                latent_channels=3,
                num_vq_embeddings=16,
                norm_num_groups=32,
            ),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLTemporalDecoder",
            lambda: D.AutoencoderKLTemporalDecoder(
                down_block_types=enc2, block_out_channels=(32, 64), latent_channels=4
            ),
            lambda b: ((rand(2 * b, 3, 16, 16),), {"num_frames": 2}),
            "autoencoder",
        ),
        case(
            "AutoencoderDC",
            lambda: D.AutoencoderDC(
                in_channels=3,
                latent_channels=4,
                attention_head_dim=8,
                encoder_block_types=("ResBlock", "EfficientViTBlock"),
                decoder_block_types=("ResBlock", "EfficientViTBlock"),
                encoder_block_out_channels=(32, 64),
                decoder_block_out_channels=(32, 64),
                encoder_layers_per_block=(1, 1),
                decoder_layers_per_block=(1, 1),
                encoder_qkv_multiscales=((), (5,)),
                decoder_qkv_multiscales=((), (5,)),
                upsample_block_type="interpolate",
                downsample_block_type="Conv",
                decoder_norm_types="rms_norm",
                decoder_act_fns="silu",
            ),
            lambda b: ((rand(b, 3, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLCogVideoX",
            lambda: D.AutoencoderKLCogVideoX(
                block_out_channels=(8, 8, 8, 8),
                latent_channels=4,
                layers_per_block=1,
                norm_num_groups=2,
                temporal_compression_ratio=4,
            ),
            lambda b: ((rand(b, 3, 8, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLMochi",
            lambda: D.AutoencoderKLMochi(
                encoder_block_out_channels=(32, 32, 32, 32),
                decoder_block_out_channels=(32, 32, 32, 32),
                latent_channels=12,
                out_channels=3,
                layers_per_block=(1, 1, 1, 1, 1),
                temporal_expansions=(1, 2, 3),
                spatial_expansions=(2, 2, 2),
                add_attention_block=(False, True, True, True, True),
            ),
            lambda b: ((rand(b, 3, 7, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLLTXVideo",
            lambda: D.AutoencoderKLLTXVideo(
                latent_channels=8,
                block_out_channels=(8, 8, 8, 8),
                decoder_block_out_channels=(8, 8, 8, 8),
                layers_per_block=(1, 1, 1, 1, 1),
                decoder_layers_per_block=(1, 1, 1, 1, 1),
                spatio_temporal_scaling=(True, True, False, False),
                decoder_spatio_temporal_scaling=(True, True, False, False),
                decoder_inject_noise=(False,) * 5,
                upsample_residual=(False,) * 4,
                upsample_factor=(1,) * 4,
                patch_size=1,
                patch_size_t=1,
            ),
            lambda b: ((rand(b, 3, 9, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLWan",
            lambda: D.AutoencoderKLWan(
                base_dim=3,
                z_dim=16,
                dim_mult=[1, 1, 1, 1],
                num_res_blocks=1,
                temperal_downsample=[False, True, True],
            ),
            lambda b: ((rand(b, 3, 9, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLHunyuanVideo",
            lambda: D.AutoencoderKLHunyuanVideo(
                latent_channels=4, block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4
            ),
            lambda b: ((rand(b, 3, 9, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLQwenImage",
            lambda: D.AutoencoderKLQwenImage(
                base_dim=8,
                z_dim=4,
                dim_mult=[1, 2, 4],
                num_res_blocks=1,
                temperal_downsample=[False, True],
                latents_mean=[0.0] * 4,
                latents_std=[1.0] * 4,
            ),
            lambda b: ((rand(b, 3, 5, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLAllegro",
            lambda: D.AutoencoderKLAllegro(
                block_out_channels=(8, 8, 8, 8), latent_channels=4, layers_per_block=1, norm_num_groups=2
            ),
            lambda b: ((rand(b, 3, 8, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderKLMagvit",
            lambda: D.AutoencoderKLMagvit(
                block_out_channels=(8, 8, 8, 8), latent_channels=4, layers_per_block=1, norm_num_groups=4
            ),
            lambda b: ((rand(b, 3, 5, 16, 16),), {}),
            "autoencoder",
        ),
        case(
            "AutoencoderOobleck",
            lambda: D.AutoencoderOobleck(
                encoder_hidden_size=12,
                downsampling_ratios=[2, 4],
                channel_multiples=[1, 2],
                decoder_channels=12,
                decoder_input_channels=6,
                audio_channels=2,
                sampling_rate=16000,
            ),
            lambda b: ((rand(b, 2, 64),), {}),
            "autoencoder",
        ),
    ]


def transformer_cases() -> list[Case]:
    def flux_kw(b, channels=4, joint=16, pooled=True):
        kw = dict(
            hidden_states=rand(b, 16, channels),
            encoder_hidden_states=rand(b, 5, joint, seed=1),
            timestep=ts(b, 3.0),
            img_ids=torch.zeros(16, 3),
            txt_ids=torch.zeros(5, 3),
        )
        if pooled:
            kw["pooled_projections"] = rand(b, 8, seed=3)
        return kw

    return [
        case(
            "DiTTransformer2DModel",
            lambda: D.DiTTransformer2DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                num_layers=1,
                sample_size=8,
                patch_size=2,
                num_embeds_ada_norm=10,
            ),
            lambda b: (
                (rand(b, 4, 8, 8),),
                dict(timestep=torch.tensor([3] * b), class_labels=torch.tensor([1] * b)),
            ),
            "transformer",
        ),
        case(
            "Transformer2DModel",
            lambda: D.Transformer2DModel(
                num_attention_heads=2,
                attention_head_dim=16,
                in_channels=32,
                norm_num_groups=32,
                cross_attention_dim=32,
            ),
            lambda b: ((rand(b, 32, 8, 8),), dict(encoder_hidden_states=rand(b, 5, 32, seed=1))),
            "transformer",
        ),
        case(
            "TransformerTemporalModel",
            lambda: D.TransformerTemporalModel(
                num_attention_heads=2, attention_head_dim=16, in_channels=32, norm_num_groups=32
            ),
            lambda b: ((rand(2 * b, 32, 8, 8),), dict(num_frames=2)),
            "transformer",
        ),
        case(
            "PixArtTransformer2DModel",
            lambda: D.PixArtTransformer2DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                out_channels=8,
                num_layers=1,
                sample_size=8,
                patch_size=2,
                cross_attention_dim=16,
                caption_channels=16,
            ),
            lambda b: (
                (rand(b, 4, 8, 8),),
                dict(
                    encoder_hidden_states=rand(b, 5, 16, seed=1),
                    timestep=torch.tensor([3] * b),
                    added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                ),
            ),
            "transformer",
        ),
        case(
            "SanaTransformer2DModel",
            lambda: D.SanaTransformer2DModel(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=8,
                num_layers=1,
                num_cross_attention_heads=2,
                cross_attention_head_dim=8,
                cross_attention_dim=16,
                caption_channels=16,
                sample_size=8,
                patch_size=1,
            ),
            lambda b: ((rand(b, 4, 8, 8), rand(b, 5, 16, seed=1), torch.tensor([3] * b)), {}),
            "transformer",
        ),
        case(
            "SD3Transformer2DModel",
            lambda: D.SD3Transformer2DModel(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                caption_projection_dim=16,
                pooled_projection_dim=8,
                out_channels=4,
                pos_embed_max_size=16,
            ),
            lambda b: (
                (rand(b, 4, 8, 8), rand(b, 5, 16, seed=1), rand(b, 8, seed=3), torch.tensor([3] * b)),
                {},
            ),
            "transformer",
        ),
        case(
            "AuraFlowTransformer2DModel",
            lambda: D.AuraFlowTransformer2DModel(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_mmdit_layers=1,
                num_single_dit_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                caption_projection_dim=16,
                out_channels=4,
                pos_embed_max_size=64,
            ),
            lambda b: ((rand(b, 4, 8, 8), rand(b, 5, 16, seed=1), torch.tensor([3] * b)), {}),
            "transformer",
        ),
        case(
            "FluxTransformer2DModel",
            lambda: D.FluxTransformer2DModel(
                patch_size=1,
                in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                pooled_projection_dim=8,
                axes_dims_rope=(2, 2, 4),
            ),
            lambda b: _kw(**flux_kw(b)),
            "transformer",
        ),
        case(
            "BriaTransformer2DModel",
            lambda: D.BriaTransformer2DModel(
                patch_size=1,
                in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                axes_dims_rope=[2, 2, 4],
            ),
            lambda b: _kw(**flux_kw(b, pooled=False)),
            "transformer",
        ),
        case(
            "ChromaTransformer2DModel",
            lambda: D.ChromaTransformer2DModel(
                patch_size=1,
                in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                axes_dims_rope=(2, 2, 4),
                approximator_num_channels=8,
                approximator_hidden_dim=16,
                approximator_layers=1,
            ),
            lambda b: _kw(**flux_kw(b, pooled=False)),
            "transformer",
        ),
        case(
            "Flux2Transformer2DModel",
            lambda: D.Flux2Transformer2DModel(
                patch_size=1,
                in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=16,
                num_attention_heads=2,
                joint_attention_dim=16,
                timestep_guidance_channels=16,
                axes_dims_rope=(4, 4, 4, 4),
                guidance_embeds=False,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 16, 4),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                timestep=ts(b, 0.5),
                img_ids=torch.zeros(b, 16, 4),
                txt_ids=torch.zeros(b, 5, 4),
            ),
            "transformer",
        ),
        case(
            "HunyuanDiT2DModel",
            lambda: D.HunyuanDiT2DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                patch_size=2,
                hidden_size=16,
                num_layers=1,
                mlp_ratio=2.0,
                cross_attention_dim=16,
                cross_attention_dim_t5=16,
                pooled_projection_dim=8,
                text_len=5,
                text_len_t5=6,
                sample_size=8,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                timestep=torch.tensor([3.0] * b),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                text_embedding_mask=torch.ones(b, 5),
                encoder_hidden_states_t5=rand(b, 6, 16, seed=2),
                text_embedding_mask_t5=torch.ones(b, 6),
                image_meta_size=torch.tensor([[8.0, 8.0, 8.0, 8.0, 0.0, 0.0]] * b),
                style=torch.zeros(b, dtype=torch.long),
                image_rotary_emb=_hunyuan_rope(),
            ),
            "transformer",
        ),
        case(
            "LuminaNextDiT2DModel",
            lambda: D.LuminaNextDiT2DModel(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                hidden_size=16,
                num_layers=1,
                num_attention_heads=2,
                num_kv_heads=2,
                multiple_of=16,
                cross_attention_dim=16,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                timestep=torch.full((b,), 0.5),
                encoder_hidden_states=rand(b, 5, 16, seed=1),
                encoder_mask=torch.ones(b, 5),
                image_rotary_emb=_lumina_rope(),
            ),
            "transformer",
        ),
        case(
            "Lumina2Transformer2DModel",
            lambda: D.Lumina2Transformer2DModel(
                sample_size=16,
                patch_size=2,
                in_channels=4,
                hidden_size=24,
                num_layers=1,
                num_refiner_layers=1,
                num_attention_heads=3,
                num_kv_heads=1,
                multiple_of=2,
                axes_dim_rope=(4, 2, 2),
                axes_lens=(128, 128, 128),
                cap_feat_dim=8,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                timestep=torch.full((b,), 0.5),
                encoder_hidden_states=rand(b, 6, 8, seed=1),
                encoder_attention_mask=torch.ones(b, 6, dtype=torch.bool),
            ),
            "transformer",
        ),
        case(
            "CogView3PlusTransformer2DModel",
            lambda: D.CogView3PlusTransformer2DModel(
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=4,
                num_attention_heads=2,
                out_channels=4,
                text_embed_dim=8,
                time_embed_dim=8,
                condition_dim=2,
                pos_embed_max_size=8,
                sample_size=8,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                encoder_hidden_states=rand(b, 8, 8, seed=1),
                timestep=torch.tensor([3] * b),
                original_size=torch.tensor([[64.0, 64.0]] * b),
                target_size=torch.tensor([[64.0, 64.0]] * b),
                crop_coords=torch.tensor([[0.0, 0.0]] * b),
            ),
            "transformer",
        ),
        case(
            "CogView4Transformer2DModel",
            lambda: D.CogView4Transformer2DModel(
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=4,
                num_attention_heads=2,
                out_channels=4,
                text_embed_dim=8,
                time_embed_dim=8,
                condition_dim=2,
                rope_axes_dim=(2, 2),
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 8, 8),
                encoder_hidden_states=rand(b, 8, 8, seed=1),
                timestep=torch.tensor([3] * b),
                original_size=torch.tensor([[64.0, 64.0]] * b),
                target_size=torch.tensor([[64.0, 64.0]] * b),
                crop_coords=torch.tensor([[0.0, 0.0]] * b),
            ),
            "transformer",
        ),
        case(
            "QwenImageTransformer2DModel",
            lambda: D.QwenImageTransformer2DModel(
                patch_size=2,
                in_channels=16,
                out_channels=4,
                num_layers=1,
                attention_head_dim=16,
                num_attention_heads=2,
                joint_attention_dim=16,
                axes_dims_rope=(8, 4, 4),
            ),
            lambda b: _kw(
                hidden_states=rand(b, 16, 16),
                encoder_hidden_states=rand(b, 7, 16, seed=1),
                encoder_hidden_states_mask=torch.ones(b, 7),
                timestep=torch.full((b,), 0.5),
                img_shapes=[[(1, 4, 4)]] * b,
            ),
            "transformer",
        ),
        case(
            "PriorTransformer",
            lambda: D.PriorTransformer(
                num_attention_heads=2,
                attention_head_dim=4,
                num_layers=2,
                embedding_dim=8,
                num_embeddings=7,
                additional_embeddings=4,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 8),
                timestep=2,
                proj_embedding=rand(b, 8, seed=1),
                encoder_hidden_states=rand(b, 7, 8, seed=2),
            ),
            "transformer",
        ),
        case(
            "StableAudioDiTModel",
            lambda: D.StableAudioDiTModel(
                sample_size=4,
                in_channels=3,
                num_layers=1,
                attention_head_dim=4,
                num_attention_heads=2,
                num_key_value_attention_heads=2,
                out_channels=3,
                cross_attention_dim=4,
                time_proj_dim=8,
                global_states_input_dim=8,
                cross_attention_input_dim=4,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 3, 4),
                timestep=torch.tensor([3] * b),
                encoder_hidden_states=rand(b, 5, 4, seed=1),
                global_hidden_states=rand(b, 1, 8, seed=2),
                rotary_embedding=_stable_audio_rope(),
            ),
            "transformer",
        ),
        case(
            "T5FilmDecoder",
            lambda: D.T5FilmDecoder(
                input_dims=8,
                targets_length=8,
                d_model=16,
                num_layers=1,
                num_heads=2,
                d_kv=8,
                d_ff=32,
                dropout_rate=0.0,
            ),
            lambda b: (
                (
                    ((rand(b, 5, 16), torch.ones(b, 5, dtype=torch.bool)),),
                    rand(b, 8, 8, seed=1),
                    torch.full((b,), 0.5),
                ),
                {},
            ),
            "transformer",
        ),
        # video transformers
        case(
            "CogVideoXTransformer3DModel",
            lambda: D.CogVideoXTransformer3DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                out_channels=4,
                time_embed_dim=2,
                text_embed_dim=8,
                num_layers=1,
                sample_width=8,
                sample_height=8,
                sample_frames=8,
                patch_size=2,
                temporal_compression_ratio=4,
                max_text_seq_length=8,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 2, 4, 8, 8),
                encoder_hidden_states=rand(b, 8, 8, seed=1),
                timestep=torch.tensor([3] * b),
            ),
            "video",
        ),
        case(
            "ConsisIDTransformer3DModel",
            lambda: D.ConsisIDTransformer3DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                out_channels=4,
                time_embed_dim=2,
                text_embed_dim=8,
                num_layers=1,
                sample_width=8,
                sample_height=8,
                sample_frames=8,
                patch_size=2,
                temporal_compression_ratio=4,
                max_text_seq_length=8,
                is_train_face=False,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 2, 4, 8, 8),
                encoder_hidden_states=rand(b, 8, 8, seed=1),
                timestep=torch.tensor([3] * b),
            ),
            "video",
        ),
        case(
            "MochiTransformer3DModel",
            lambda: D.MochiTransformer3DModel(
                patch_size=2,
                num_attention_heads=2,
                attention_head_dim=8,
                num_layers=1,
                pooled_projection_dim=16,
                in_channels=4,
                text_embed_dim=16,
                time_embed_dim=4,
                max_sequence_length=16,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 2, 8, 8),
                encoder_hidden_states=rand(b, 16, 16, seed=1),
                timestep=torch.tensor([3] * b),
                encoder_attention_mask=torch.ones(b, 16, dtype=torch.bool),
            ),
            "video",
        ),
        case(
            "LTXVideoTransformer3DModel",
            lambda: D.LTXVideoTransformer3DModel(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=8,
                cross_attention_dim=16,
                num_layers=1,
                caption_channels=16,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 32, 4),
                encoder_hidden_states=rand(b, 6, 16, seed=1),
                timestep=torch.tensor([3] * b),
                encoder_attention_mask=torch.ones(b, 6),
                num_frames=2,
                height=4,
                width=4,
            ),
            "video",
        ),
        case(
            "LatteTransformer3DModel",
            lambda: D.LatteTransformer3DModel(
                sample_size=8,
                num_layers=1,
                patch_size=2,
                attention_head_dim=4,
                num_attention_heads=2,
                caption_channels=8,
                in_channels=4,
                cross_attention_dim=8,
                out_channels=8,
                attention_bias=True,
                activation_fn="gelu-approximate",
                num_embeds_ada_norm=1000,
                norm_type="ada_norm_single",
                norm_elementwise_affine=False,
                norm_eps=1e-6,
                video_length=2,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 2, 8, 8),
                encoder_hidden_states=rand(b, 6, 8, seed=1),
                timestep=torch.tensor([3] * b),
            ),
            "video",
        ),
        case(
            "AllegroTransformer3DModel",
            lambda: D.AllegroTransformer3DModel(
                num_attention_heads=2,
                attention_head_dim=8,
                in_channels=4,
                out_channels=4,
                num_layers=1,
                cross_attention_dim=16,
                sample_width=8,
                sample_height=8,
                sample_frames=8,
                caption_channels=8,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 2, 8, 8),
                encoder_hidden_states=rand(b, 6, 8, seed=1),
                timestep=torch.tensor([3] * b),
            ),
            "video",
        ),
        *(case(name, lambda name=name: getattr(D, name)(**_WAN), _wan_inputs, "video")
          for name in ("WanTransformer3DModel", "SkyReelsV2Transformer3DModel")),
        case(
            "HunyuanVideoTransformer3DModel",
            lambda: D.HunyuanVideoTransformer3DModel(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=10,
                num_layers=1,
                num_single_layers=1,
                num_refiner_layers=1,
                patch_size=1,
                patch_size_t=1,
                text_embed_dim=16,
                pooled_projection_dim=8,
                rope_axes_dim=(2, 4, 4),
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 1, 8, 8),
                timestep=torch.tensor([3] * b),
                encoder_hidden_states=rand(b, 12, 16, seed=1),
                encoder_attention_mask=torch.ones(b, 12),
                pooled_projections=rand(b, 8, seed=2),
                guidance=torch.tensor([3000.0] * b),
            ),
            "video",
        ),
        case(
            "EasyAnimateTransformer3DModel",
            lambda: D.EasyAnimateTransformer3DModel(
                num_attention_heads=2,
                attention_head_dim=16,
                in_channels=4,
                out_channels=4,
                time_embed_dim=2,
                text_embed_dim=16,
                num_layers=1,
                mmdit_layers=1,
                sample_width=16,
                sample_height=16,
                patch_size=2,
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 2, 16, 16),
                timestep=torch.tensor([3] * b),
                encoder_hidden_states=rand(b, 8, 16, seed=1),
            ),
            "video",
        ),
        case(
            "CosmosTransformer3DModel",
            lambda: D.CosmosTransformer3DModel(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=12,
                num_layers=1,
                mlp_ratio=2,
                text_embed_dim=16,
                adaln_lora_dim=4,
                max_size=(4, 32, 32),
                patch_size=(1, 2, 2),
                rope_scale=(2.0, 1.0, 1.0),
                concat_padding_mask=True,
                extra_pos_embed_type="learnable",
            ),
            lambda b: _kw(
                hidden_states=rand(b, 4, 1, 16, 16),
                timestep=torch.tensor([3] * b),
                encoder_hidden_states=rand(b, 12, 16, seed=1),
                fps=30,
                condition_mask=torch.ones(b, 1, 1, 16, 16),
                padding_mask=torch.zeros(b, 1, 16, 16),
            ),
            "video",
        ),
    ]


def _hunyuan_rope():
    from diffusers.models.embeddings import get_2d_rotary_pos_embed

    return get_2d_rotary_pos_embed(8, ((0, 0), (4, 4)), (4, 4))


def _lumina_rope():
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    return get_2d_rotary_pos_embed_lumina(8, 384, 384)


def _stable_audio_rope():
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    return get_1d_rotary_pos_embed(4 // 2, 4 + 1, use_real=True, repeat_interleave_real=False)


# Classes of diffusers.models not in the sweep, and why (each is a limit of the sweep, not a finding).
LEFT_OUT = {
    "MotionAdapter, MultiAdapter, MultiControlNetModel, FluxMultiControlNetModel, SD3MultiControlNetModel, "
    "HunyuanDiT2DMultiControlNetModel, QwenImageMultiControlNetModel, MultiControlNetUnionModel, "
    "ControlNetXSAdapter": "containers of other models (their forward is another class's, swept on its own)",
    "ConsistencyDecoderVAE": "its forward samples with a scheduler and torch.randn (not repeatable)",
    "OmniGenTransformer2DModel, HiDreamImageTransformer2DModel, ZImageTransformer2DModel, "
    "LTX2VideoTransformer3DModel, WanVACETransformer3DModel, HunyuanDiT2DControlNetModel, "
    "SparseControlNetModel, "
    "and the newer ones (Kandinsky5/6, Cosmos3, MiniMax, LongCat, Helios, JoyImage, ...)": (
        "inputs that their pipelines build (per-image latent lists, token ids and position ids, "
        "audio and video streams, llama hidden-state lists): not attempted in this sweep's time"
    ),
}


def cases() -> list[Case]:
    return unet_cases() + controlnet_cases() + autoencoder_cases() + transformer_cases()


# ---------------------------------------------------------------------------------------------
# the denoising loop


SCHEDULERS = ("DDIMScheduler", "EulerDiscreteScheduler", "DPMSolverMultistepScheduler")
STEPS = 20


@dataclasses.dataclass
class LoopResult:
    scheduler: str
    compiled: str  # "unet" or "body" or "body (torch.compile)"
    steps: int = STEPS
    monitor_runs: int | None = None  # magpy: recordings over the steps
    records: int | None = None
    eager_runs: int | None = None
    graphs_per_call: int | None = None  # magpy: the most graphs a step's mock run ran
    breaks: list = dataclasses.field(default_factory=list)
    recompiles: list = dataclasses.field(default_factory=list)
    recorded_at: list = dataclasses.field(default_factory=list)  # magpy: the steps that recorded (0-based)
    tc_graphs: int | None = None  # torch.compile: graphs its backend was given over the steps
    equal: bool | None = None  # final latents torch.equal eager's
    max_abs_diff: float | None = None
    error: str | None = None
    wall_s: float = 0.0


def _scheduler(name: str):
    return getattr(diffusers, name)(num_train_timesteps=1000)


def _loop(unet, scheduler, body=None):
    """The loop as pipelines write it; ``body`` (compiled or not) replaces the three lines in it."""
    latents = rand(1, 4, 8, 8, seed=7) * scheduler.init_noise_sigma
    enc = rand(1, 5, 32, seed=8)
    scheduler.set_timesteps(STEPS)
    for t in scheduler.timesteps:
        if body is not None:
            latents = body(latents, t, enc)
            continue
        inp = scheduler.scale_model_input(latents, t)
        noise = unet(inp, t, enc).sample
        latents = scheduler.step(noise, t, latents).prev_sample
    return latents


def _stepwise(fn, res: LoopResult):
    """``fn`` (magpy-compiled, called once a step), noting in ``res`` the steps whose call
    recorded and the most graphs a step's mock run ran."""
    step = iter(range(STEPS))

    def call(*args):
        i, before = next(step), magpy.stats(fn).monitor_runs
        out = fn(*args)
        s = magpy.stats(fn)
        if s.monitor_runs > before:
            res.recorded_at.append(i)
        else:
            res.graphs_per_call = max(res.graphs_per_call or 0, s.graphs_per_call)
        return out

    return call


def denoise(scheduler_name: str, compiled: str, unet=None) -> LoopResult:
    """One scheduler's 20-step loop, with ``compiled`` = "unet", "body" or "body (torch.compile)"."""
    import torch._dynamo

    res = LoopResult(scheduler_name, compiled)
    t0 = time.perf_counter()
    if unet is None:
        torch.manual_seed(0)
        unet = small_unet().eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = _loop(unet, _scheduler(scheduler_name))
            scheduler = _scheduler(scheduler_name)

            def body(latents, t, enc):
                inp = scheduler.scale_model_input(latents, t)
                noise = unet(inp, t, enc).sample
                return scheduler.step(noise, t, latents).prev_sample

            counter = fn = None
            if compiled == "unet":
                fn = magpy.compile(unet, backend="eager")
                got = _loop(_stepwise(fn, res), scheduler)
            elif compiled == "body":
                fn = magpy.compile(body, backend="eager")
                got = _loop(unet, scheduler, _stepwise(fn, res))
            else:
                torch._dynamo.reset()
                counter = ls.GraphCounter()
                got = _loop(unet, scheduler, torch.compile(body, backend=counter))
                res.tc_graphs = counter.graphs
            res.equal = torch.equal(got, expected)
            res.max_abs_diff = float((got - expected).abs().max())
            if fn is not None:
                s = magpy.stats(fn)
                res.monitor_runs, res.records, res.eager_runs = s.monitor_runs, s.records, s.eager_runs
                res.breaks = list(dict.fromkeys(ls._first_line(b) for b in s.break_reasons))
                res.recompiles = [ls._first_line(r) for r in s.recompiles][:4]
    except Exception as exc:
        res.error = ls.describe(exc)
    finally:
        magpy.reset()
        torch._dynamo.reset()
    res.wall_s = time.perf_counter() - t0
    return res


def loop_sweep(log=print) -> list[LoopResult]:
    torch.manual_seed(0)
    unet = small_unet().eval()
    out = []
    for name in SCHEDULERS:
        for compiled in ("unet", "body", "body (torch.compile)"):
            r = denoise(name, compiled, unet)
            out.append(r)
            log(f"  {name:30s} {compiled:22s} {loop_line(r)}")
    return out


def loop_line(r: LoopResult) -> str:
    if r.error:
        return f"ERROR {r.error}"
    if r.tc_graphs is not None:
        head = f"torch.compile graphs {r.tc_graphs}"
    else:
        head = (
            f"records {r.monitor_runs} (kept {r.records}, at steps {r.recorded_at}), "
            f"graphs/step {r.graphs_per_call}, "
            f"eager runs {r.eager_runs}, breaks {len(r.breaks)}"
        )
    why = (
        f"; {r.breaks[0][:100]}"
        if r.breaks
        else (f"; re-recorded: {r.recompiles[0][:100]}" if r.recompiles else "")
    )
    return f"{head}, equal {r.equal} (max diff {r.max_abs_diff:.2g}), {r.wall_s:.1f} s{why}"


def loop_table(rows: list[LoopResult]) -> str:
    header = [
        "scheduler",
        "compiled",
        "records / 20 steps",
        "at steps",
        "graphs per step",
        "eager runs",
        "breaks",
        "tc graphs",
        "equal eager",
        "note",
    ]
    body = []
    for r in rows:
        note = r.error or (r.breaks[0][:90] if r.breaks else (r.recompiles[-1][:90] if r.recompiles else ""))
        body.append(
            [
                r.scheduler,
                r.compiled,
                ls._n(r.monitor_runs),
                ", ".join(map(str, r.recorded_at)) if r.tc_graphs is None else "-",
                ls._n(r.graphs_per_call),
                ls._n(r.eager_runs),
                str(len(r.breaks)) if r.tc_graphs is None else "-",
                ls._n(r.tc_graphs),
                ls._n(r.equal),
                note,
            ]
        )
    return ls._grid(header, body)


# ---------------------------------------------------------------------------------------------
# main

# Timed with Inductor (the timing column): a mix of UNets, VAEs and DiTs.
TIMED = (
    "UNet2DConditionModel",
    "AutoencoderKL",
    "FluxTransformer2DModel",
    "SD3Transformer2DModel",
    "DiTTransformer2DModel",
    "AutoencoderTiny",
)


def main(argv=None) -> int:
    parser = ls.arguments(__doc__.splitlines()[0], "class names")
    parser.add_argument("--loop", action="store_true", help="also run the denoising loops")
    parser.add_argument("--loop-only", action="store_true", help="only the denoising loops")
    opts = parser.parse_args(argv)
    all_cases = cases()
    if opts.list:
        print("\n".join(c.name for c in all_cases))
        return 0
    start = ls.begin(opts, diffusers)
    if not opts.loop_only and ls.run(opts, all_cases, TIMED) is not None:
        print("\nleft out:")
        for names, why in LEFT_OUT.items():
            print(f"  {names}: {why}")
    if (opts.loop or opts.loop_only) and not opts.timing:
        print(f"\ndenoising loop: small UNet2DConditionModel, {STEPS} steps, batch 1, 8x8 latents",
              flush=True)
        rows = loop_sweep(lambda s: print(s, flush=True))
        print("\n" + loop_table(rows))
    ls.end(start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
