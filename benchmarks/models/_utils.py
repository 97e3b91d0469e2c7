"""Helpers shared by the model builders."""
from __future__ import annotations

import torch
import torch.nn as nn


def init_resnet_style(model: nn.Module) -> None:
    """torchvision's ResNet initialisation: He-normal convs (fan_out), BatchNorm = identity."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)


def example_image(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """A deterministic N(0, 1) image batch."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, *args, also: tuple[type, ...] = (), **kwargs) -> nn.Module:
    """Set every BatchNorm's running statistics to the batch statistics of one pass of
    ``model(*args, **kwargs)``, then return the model in eval mode.

    Only the BatchNorm modules (and modules of the types in ``also``) are put in training
    mode for that pass; dropout and everything else stay in eval mode.

    With random weights and the default running statistics (mean 0, var 1), eval-mode
    BatchNorm normalizes nothing: a random ResNet-101 produces logits around 1e5 and
    transformers' EfficientNet init (std 0.02) shrinks ALIGN's image features to ~1e-28,
    whose L2 normalization is then 0/0.  After this pass eval-mode activations are O(1),
    as in a trained network.  Momentum ``None`` makes the update a cumulative average, so
    a module applied several times per forward (TridentNet's shared branches) averages
    its calls.
    """
    model.eval()
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    for m in model.modules():
        if also and isinstance(m, also):
            m.train()
    model(*args, **kwargs)
    for m, momentum in zip(bns, saved):
        m.momentum = momentum
    return model.eval()
