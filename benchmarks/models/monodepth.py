"""MonoDepth-style depth estimation network (Godard et al., CVPR 2017 / ICCV 2019).

Encoder: a ResNet-18 (``benchmarks.models.resnet``) whose five intermediate feature maps
(after the stem, and after each of the four stages) are kept in a Python list.
Decoder: for each scale, from coarse to fine, an "upconvolution" (3x3 reflect-padded
conv + ELU, nearest x2 upsampling, concatenation with the encoder skip feature,
another 3x3 conv + ELU); at scales 3, 2, 1, 0 a 3x3 conv + sigmoid head predicts a
one-channel disparity map.

``forward`` returns a tuple ``(disp0, disp1, disp2, disp3)``, finest first: ``disp_s``
has shape ``[N, 1, H / 2**s, W / 2**s]`` with values in (0, 1).  H and W must be
multiples of 32.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .resnet import BasicBlock, ResNet

__all__ = ["ResnetEncoder", "DepthDecoder", "MonoDepth", "monodepth"]


class Conv3x3(nn.Module):
    """Reflection-padded 3x3 convolution."""

    def __init__(self, in_channels: int, out_channels: int, use_refl: bool = True) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(1) if use_refl else nn.ZeroPad2d(1)
        self.conv = nn.Conv2d(int(in_channels), int(out_channels), 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.pad(x))


class ConvBlock(nn.Module):
    """3x3 conv followed by ELU."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = Conv3x3(in_channels, out_channels)
        self.nonlin = nn.ELU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlin(self.conv(x))


def upsample(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2, mode="nearest")


class ResnetEncoder(nn.Module):
    def __init__(self, width: int = 64, layers: tuple[int, ...] = (2, 2, 2, 2)) -> None:
        super().__init__()
        self.num_ch_enc = [width, width, width * 2, width * 4, width * 8]
        self.encoder = ResNet(BasicBlock, list(layers), num_classes=1, width=width)
        del self.encoder.fc  # not used: the decoder consumes the feature pyramid

    def forward(self, input_image: torch.Tensor) -> list[torch.Tensor]:
        features = []
        x = (input_image - 0.45) / 0.225
        x = self.encoder.conv1(x)
        x = self.encoder.bn1(x)
        features.append(self.encoder.relu(x))
        features.append(self.encoder.layer1(self.encoder.maxpool(features[-1])))
        features.append(self.encoder.layer2(features[-1]))
        features.append(self.encoder.layer3(features[-1]))
        features.append(self.encoder.layer4(features[-1]))
        return features


class DepthDecoder(nn.Module):
    def __init__(self, num_ch_enc: list[int], scales: tuple[int, ...] = (0, 1, 2, 3),
                 num_output_channels: int = 1, use_skips: bool = True,
                 num_ch_dec: list[int] | None = None) -> None:
        super().__init__()
        self.num_output_channels = num_output_channels
        self.use_skips = use_skips
        self.scales = scales
        self.num_ch_enc = num_ch_enc
        self.num_ch_dec = num_ch_dec if num_ch_dec is not None else [16, 32, 64, 128, 256]

        self.convs = nn.ModuleDict()
        for i in range(4, -1, -1):
            # upconv_0
            num_ch_in = self.num_ch_enc[-1] if i == 4 else self.num_ch_dec[i + 1]
            num_ch_out = self.num_ch_dec[i]
            self.convs["upconv_%d_0" % i] = ConvBlock(num_ch_in, num_ch_out)

            # upconv_1
            num_ch_in = self.num_ch_dec[i]
            if self.use_skips and i > 0:
                num_ch_in += self.num_ch_enc[i - 1]
            num_ch_out = self.num_ch_dec[i]
            self.convs["upconv_%d_1" % i] = ConvBlock(num_ch_in, num_ch_out)

        for s in self.scales:
            self.convs["dispconv_%d" % s] = Conv3x3(self.num_ch_dec[s], self.num_output_channels)

        self.sigmoid = nn.Sigmoid()

    def forward(self, input_features: list[torch.Tensor]) -> dict[int, torch.Tensor]:
        outputs = {}
        x = input_features[-1]
        for i in range(4, -1, -1):
            x = self.convs["upconv_%d_0" % i](x)
            x = [upsample(x)]
            if self.use_skips and i > 0:
                x += [input_features[i - 1]]
            x = torch.cat(x, 1)
            x = self.convs["upconv_%d_1" % i](x)
            if i in self.scales:
                outputs[i] = self.sigmoid(self.convs["dispconv_%d" % i](x))
        return outputs


class MonoDepth(nn.Module):
    def __init__(self, width: int = 64, scales: tuple[int, ...] = (0, 1, 2, 3)) -> None:
        super().__init__()
        self.encoder = ResnetEncoder(width=width)
        dec = [max(4, c * width // 64) for c in (16, 32, 64, 128, 256)]
        self.decoder = DepthDecoder(self.encoder.num_ch_enc, scales=scales, num_ch_dec=dec)
        self.scales = scales

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = self.encoder(x)
        outputs = self.decoder(features)
        return tuple(outputs[s] for s in sorted(self.scales))


def monodepth(width: int = 64) -> MonoDepth:
    """MonoDepth2-style ResNet-18 encoder/decoder; ``width`` scales every channel count."""
    return MonoDepth(width=width)
