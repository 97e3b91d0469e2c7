"""ResNet-18 with Python-level fake quantization (Banner et al., NeurIPS 2018 -- the
eladhoffer/quantized.pytorch style).

* ``QConv2d`` / ``QLinear`` quantize their **weights** per output channel: the weight is
  flattened to ``[out, -1]``, ``torch.min``/``torch.max`` reductions give a range per
  channel, and ``round``/``clamp`` map it onto ``2 ** num_bits_weight`` levels.
* Their **inputs** go through a ``QuantMeasure`` module that keeps a running min/max in
  buffers: updated from the batch in training mode, read (as Python floats) in eval mode.
  All level counts are computed with Python arithmetic on the ``num_bits`` attributes.
* ``QLinear`` quantizes its bias with ``num_bits + num_bits_weight`` bits, per tensor.

Gradients use the straight-through estimator (``x + (q - x).detach()``), so the model
also trains.  ``quantized_resnet18`` calibrates the running ranges with a few
training-mode passes of the QuantMeasure modules only (``calibrate``) on random data
with a fixed seed, then returns the model in eval mode; without calibration the ranges
are zero and every activation would quantize to zero.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import init_resnet_style

__all__ = ["quantize", "QuantMeasure", "QConv2d", "QLinear", "QBasicBlock",
           "QResNet", "calibrate", "quantized_resnet18"]


def quantize(x: torch.Tensor, num_bits: int, min_value, max_value) -> torch.Tensor:
    """Uniform asymmetric fake quantization of ``x`` onto ``2 ** num_bits`` levels.

    ``min_value``/``max_value`` are Python floats (per tensor) or tensors broadcastable
    against ``x`` (per channel).
    """
    qmin = 0.0
    qmax = 2.0 ** num_bits - 1.0
    if isinstance(min_value, torch.Tensor):
        scale = (max_value - min_value) / (qmax - qmin)
        scale = torch.clamp(scale, min=1e-8)
    else:
        scale = max((max_value - min_value) / (qmax - qmin), 1e-8)
    q = (x - min_value) / scale + qmin
    q = torch.clamp(q, qmin, qmax).round()
    q = (q - qmin) * scale + min_value
    # straight-through estimator: forward is q, gradient flows to x unchanged
    return x + (q - x).detach()


def quantize_weight_per_channel(w: torch.Tensor, num_bits: int) -> torch.Tensor:
    flat = w.reshape(w.shape[0], -1)
    w_min = torch.min(flat, dim=1)[0]
    w_max = torch.max(flat, dim=1)[0]
    shape = (w.shape[0],) + (1,) * (w.dim() - 1)
    return quantize(w, num_bits, w_min.view(shape), w_max.view(shape))


class QuantMeasure(nn.Module):
    """Quantizes its input using a running (exponentially averaged) range."""

    def __init__(self, num_bits: int = 8, momentum: float = 0.1) -> None:
        super().__init__()
        self.register_buffer("running_min", torch.zeros(1))
        self.register_buffer("running_max", torch.zeros(1))
        self.momentum = momentum
        self.num_bits = num_bits

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.training:
            flat = input.detach().view(input.size(0), -1)
            min_value = flat.min(-1)[0].mean()
            max_value = flat.max(-1)[0].mean()
            self.running_min.mul_(self.momentum).add_(min_value * (1 - self.momentum))
            self.running_max.mul_(self.momentum).add_(max_value * (1 - self.momentum))
        else:
            min_value = self.running_min
            max_value = self.running_max
        return quantize(input, self.num_bits, float(min_value), float(max_value))

    def extra_repr(self) -> str:
        return "num_bits=%d, momentum=%g" % (self.num_bits, self.momentum)


def quantize_bias(bias: Optional[torch.Tensor], num_bits: int) -> Optional[torch.Tensor]:
    """Quantize a layer's bias over its own range (None stays None)."""
    if bias is None:
        return None
    return quantize(bias, num_bits, float(bias.detach().min()), float(bias.detach().max()))


class QConv2d(nn.Conv2d):
    """Conv2d with quantized inputs (running range) and per-channel quantized weights."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 num_bits: int = 8, num_bits_weight: Optional[int] = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias)
        self.num_bits = num_bits
        self.num_bits_weight = num_bits_weight or num_bits
        self.quantize_input = QuantMeasure(self.num_bits)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        qinput = self.quantize_input(input)
        qweight = quantize_weight_per_channel(self.weight, self.num_bits_weight)
        qbias = quantize_bias(self.bias, self.num_bits_weight + self.num_bits)
        return F.conv2d(qinput, qweight, qbias, self.stride, self.padding,
                        self.dilation, self.groups)


class QLinear(nn.Linear):
    """Linear with quantized inputs, per-channel quantized weights, quantized bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 num_bits: int = 8, num_bits_weight: Optional[int] = None) -> None:
        super().__init__(in_features, out_features, bias)
        self.num_bits = num_bits
        self.num_bits_weight = num_bits_weight or num_bits
        self.quantize_input = QuantMeasure(self.num_bits)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        qinput = self.quantize_input(input)
        qweight = quantize_weight_per_channel(self.weight, self.num_bits_weight)
        qbias = quantize_bias(self.bias, self.num_bits_weight + self.num_bits)
        return F.linear(qinput, qweight, qbias)


def qconv3x3(in_planes: int, out_planes: int, stride: int = 1, num_bits: int = 8) -> QConv2d:
    return QConv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1,
                   bias=False, num_bits=num_bits)


class QBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: Optional[nn.Module] = None, num_bits: int = 8) -> None:
        super().__init__()
        self.conv1 = qconv3x3(inplanes, planes, stride, num_bits=num_bits)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = qconv3x3(planes, planes, num_bits=num_bits)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)
        return out


class QResNet(nn.Module):
    def __init__(self, layers: list[int], num_classes: int = 1000, width: int = 64,
                 num_bits: int = 8) -> None:
        super().__init__()
        self.num_bits = num_bits
        self.inplanes = width
        self.conv1 = QConv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False,
                             num_bits=num_bits)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = QLinear(width * 8 * QBasicBlock.expansion, num_classes, num_bits=num_bits)

        init_resnet_style(self)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * QBasicBlock.expansion:
            downsample = nn.Sequential(
                QConv2d(self.inplanes, planes * QBasicBlock.expansion, kernel_size=1,
                        stride=stride, bias=False, num_bits=self.num_bits),
                nn.BatchNorm2d(planes * QBasicBlock.expansion),
            )
        layers = [QBasicBlock(self.inplanes, planes, stride, downsample, num_bits=self.num_bits)]
        self.inplanes = planes * QBasicBlock.expansion
        for _ in range(1, blocks):
            layers.append(QBasicBlock(self.inplanes, planes, num_bits=self.num_bits))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        return x


@torch.no_grad()
def calibrate(model: nn.Module, example: torch.Tensor, steps: int = 4) -> nn.Module:
    """Fill every QuantMeasure's running range: a few passes with only the QuantMeasure
    modules in training mode (BatchNorm stays in eval mode).  Returns the model in eval mode."""
    model.eval()
    measures = [m for m in model.modules() if isinstance(m, QuantMeasure)]
    for m in measures:
        m.train()
    for _ in range(steps):
        model(example)
    model.eval()
    return model


def quantized_resnet18(num_bits: int = 8, width: int = 64, num_classes: int = 1000,
                       calibration_input: Optional[torch.Tensor] = None) -> QResNet:
    """Quantized ResNet-18.  If ``calibration_input`` is given, the activation ranges are
    calibrated on it (see ``calibrate``) and the model is returned in eval mode."""
    model = QResNet([2, 2, 2, 2], num_classes=num_classes, width=width, num_bits=num_bits)
    if calibration_input is not None:
        calibrate(model, calibration_input)
    return model
