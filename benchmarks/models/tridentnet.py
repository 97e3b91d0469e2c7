"""TridentNet-style network (Li et al., "Scale-Aware Trident Networks", ICCV 2019).

A ResNet-50-style backbone (``benchmarks.models.resnet.Bottleneck`` for stages 1-2 and 4)
whose third stage is made of *trident blocks*: bottlenecks whose 3x3 convolution
(``TridentConv``) applies one shared weight with dilations (1, 2, 3) to three parallel
branches, in a Python loop over the branches (``F.conv2d(x, self.weight, dilation=d,
padding=d)``).  The 1x1 convolutions and BatchNorms of a trident block are shared too and
applied branch by branch.  The first trident block fans its single input out into a list
of ``num_branch`` tensors; afterwards every block maps a list to a list.

Stage 4 and the classifier head are shared across branches and run once per branch (as
TridentNet's shared R-CNN head does); ``forward`` returns the branch logits averaged,
a ``[N, num_classes]`` tensor, and ``forward_branches`` the per-branch list.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from ._utils import init_resnet_style
from .resnet import Bottleneck, conv1x1

__all__ = ["TridentConv", "TridentBottleneck", "TridentNet", "tridentnet"]


class TridentConv(nn.Module):
    """A 3x3 conv whose weight is shared by ``len(dilations)`` branches."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: int = 1, dilations: tuple[int, ...] = (1, 2, 3),
                 bias: bool = False) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = stride
        self.dilations = dilations
        self.num_branch = len(dilations)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_channels))
        else:
            self.register_parameter("bias", None)
        nn.init.kaiming_uniform_(self.weight, nonlinearity="relu")

    def forward(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        assert len(inputs) == self.num_branch
        outputs = []
        for x, dilation in zip(inputs, self.dilations):
            padding = dilation * (self.kernel_size[0] - 1) // 2
            outputs.append(F.conv2d(x, self.weight, self.bias, self.stride,
                                    padding, dilation))
        return outputs

    def extra_repr(self) -> str:
        return "%d, %d, kernel_size=%s, stride=%d, dilations=%s" % (
            self.in_channels, self.out_channels, self.kernel_size, self.stride,
            self.dilations)


class TridentBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: Optional[nn.Module] = None,
                 dilations: tuple[int, ...] = (1, 2, 3), concat_output: bool = False) -> None:
        super().__init__()
        self.num_branch = len(dilations)
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = TridentConv(planes, planes, 3, stride=stride, dilations=dilations)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor | list[torch.Tensor]) -> list[torch.Tensor]:
        if not isinstance(x, list):
            x = [x] * self.num_branch

        out = [self.relu(self.bn1(self.conv1(b))) for b in x]
        out = self.conv2(out)
        out = [self.relu(self.bn2(b)) for b in out]
        out = [self.bn3(self.conv3(b)) for b in out]

        if self.downsample is not None:
            identity = [self.downsample(b) for b in x]
        else:
            identity = x

        out = [o + i for o, i in zip(out, identity)]
        out = [self.relu(b) for b in out]
        return out


class TridentNet(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000,
                 width: int = 64, dilations: tuple[int, ...] = (1, 2, 3)) -> None:
        super().__init__()
        self.inplanes = width
        self.dilations = dilations
        self.num_branch = len(dilations)
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(Bottleneck, width, layers[0])
        self.layer2 = self._make_layer(Bottleneck, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(TridentBottleneck, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(Bottleneck, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * Bottleneck.expansion, num_classes)

        init_resnet_style(self)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        kwargs = {"dilations": self.dilations} if block is TridentBottleneck else {}
        layers = [block(self.inplanes, planes, stride, downsample, **kwargs)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, **kwargs))
        return nn.Sequential(*layers)

    def forward_branches(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        branches = self.layer3(x)  # list of num_branch feature maps

        outputs = []
        for b in branches:
            b = self.layer4(b)
            b = self.avgpool(b)
            b = torch.flatten(b, 1)
            outputs.append(self.fc(b))
        return outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = self.forward_branches(x)
        return torch.stack(outputs, dim=0).mean(dim=0)


def tridentnet(width: int = 64, num_classes: int = 1000,
               layers: tuple[int, ...] = (3, 4, 6, 3)) -> TridentNet:
    """TridentNet on a ResNet-50 layout with trident blocks in stage 3."""
    return TridentNet(layers=layers, num_classes=num_classes, width=width)
