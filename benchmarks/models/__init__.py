"""The magpy model zoo: real-world-style eager PyTorch models with random weights.

``MODELS`` maps a name to a builder ``builder(size) -> (model, args, kwargs)``; the model
is in eval mode and is called as ``model(*args, **kwargs)``.  ``size`` is ``"test"`` (tiny:
every forward takes a few milliseconds, for unit and differential tests) or ``"bench"``
(sized so that one eager forward at batch size 1 takes roughly 5-100 ms on the 2-core CPU
of the project's machines; ``benchmarks/zoo_timing.py`` measures them).  ``"bert"`` and
``"bert_log"`` also accept ``"bench12"`` (12 layers).  Builders are deterministic: weights
come from ``torch.manual_seed(0)`` and inputs from seeded generators, so two builds are equal.

Nothing is wrapped in ``torch.no_grad()``: callers choose the grad mode.

Bench-size choices (batch size 1; input shapes follow the MagPy paper's Table 1; where the
full-width model was over ~100 ms here, the *width* was reduced, never the depth or the
input shape).  "ms" is the eager ``torch.no_grad()`` forward median measured with
``python -m benchmarks.zoo_timing`` (2 threads, torch 2.13 CPU; the machine is shared, so
expect +-15%):

============  ==================  =====  ===========================================================
name          bench input         ms     model at bench size
============  ==================  =====  ===========================================================
resnet50      [1, 3, 224, 224]    72     ResNet-50, width 64 (the real network)
resnet101     [1, 3, 224, 224]    66     ResNet-101 depth, width 40 (width 64: ~130 ms)
densenet121   [1, 3, 224, 224]    71     DenseNet-121: growth 32, blocks (6, 12, 24, 16), 64 init
monodepth     [1, 3, 256, 256]    57     MonoDepth2 layout, ResNet-18 encoder, width 48 (64: ~90 ms)
quantized     [1, 3, 224, 224]    40     8-bit fake-quantized ResNet-18, width 40 (64: ~105 ms)
tridentnet    [1, 3, 224, 224]    62     ResNet-50 layout, trident stage 3, width 32 (64: ~175 ms)
bert          text 256            54     BertModel: 6 layers, hidden 384, 6 heads, eager attention
bert_log      text 256            55     bert + a hook per layer: float(out.norm()) appended to a list
deberta_v2    text 256            59     DebertaV2Model (v3 layout): 4 layers, hidden 384, 6 heads
align         text 64, image 289  73     AlignModel: 6-layer/384 BERT + EfficientNet-B0 layout
============  ==================  =====  ===========================================================

``bert`` (and ``bert_log``) at ``"bench12"``: 12 layers, hidden 384, 6 heads, text 128 (55 ms).

Test size: CNNs at width 8 (DenseNet growth 8, blocks (2, 3, 4, 3)) on 64x64 images
(MonoDepth 64x64 too; it needs multiples of 32), transformers with 2 layers, hidden 32,
text 16 (ALIGN image 64x64 with an EfficientNet at width/depth 0.25).  ResNet-101 keeps its
full depth at test size.

BatchNorm running statistics (CNNs and ALIGN's EfficientNet) are calibrated with one pass
over the example input with only the BatchNorms in training mode
(``_utils.calibrate_batchnorm``), so eval-mode activations stay O(1) as in a trained
network; the quantized model's activation ranges are calibrated in that pass too and then
refined (``quantized.calibrate``).

Outputs:

* resnet50, resnet101, densenet121, quantized, tridentnet: a ``[1, 1000]`` logits tensor.
* monodepth: a tuple of 4 disparity maps in (0, 1), finest first,
  ``[1, 1, H / 2**s, W / 2**s]`` for s = 0..3.
* bert, bert_log: ``BaseModelOutputWithPoolingAndCrossAttentions`` (``last_hidden_state``,
  ``pooler_output``); deberta_v2: ``BaseModelOutput`` (``last_hidden_state``);
  align: ``AlignOutput`` (``logits_per_image``, ``logits_per_text``, ``text_embeds``,
  ``image_embeds``, ``text_model_output``, ``vision_model_output``).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from . import densenet, hf, logging_hooks, monodepth, quantized, resnet, tridentnet
from ._utils import calibrate_batchnorm, example_image

__all__ = ["MODELS", "SIZES", "build"]

Built = tuple[nn.Module, tuple, dict]


def _check_size(size: str, allowed=("test", "bench")) -> None:
    if size not in allowed:
        raise ValueError("size must be one of %s, got %r" % (allowed, size))


def _image_model(factory: Callable[..., nn.Module], test_kwargs: dict, bench_kwargs: dict,
                 test_shape=(1, 3, 64, 64), bench_shape=(1, 3, 224, 224)):
    def build(size: str = "test") -> Built:
        _check_size(size)
        kwargs = test_kwargs if size == "test" else bench_kwargs
        shape = test_shape if size == "test" else bench_shape
        torch.manual_seed(0)
        model = factory(**kwargs)
        x = example_image(shape)
        calibrate_batchnorm(model, x)
        return model.eval(), (x,), {}
    build.__name__ = "build_" + factory.__name__
    return build


def _build_quantized(size: str = "test") -> Built:
    _check_size(size)
    width, shape = (8, (1, 3, 64, 64)) if size == "test" else (40, (1, 3, 224, 224))
    torch.manual_seed(0)
    model = quantized.quantized_resnet18(num_bits=8, width=width)
    x = example_image(shape)
    # BatchNorm statistics and activation ranges depend on each other: measure both in
    # one pass, then refine the ranges under the calibrated (eval-mode) BatchNorms.
    calibrate_batchnorm(model, x, also=(quantized.QuantMeasure,))
    quantized.calibrate(model, x)
    return model.eval(), (x,), {}


def _hf(builder: Callable[[str], tuple[nn.Module, dict]], sizes=("test", "bench")):
    def build(size: str = "test") -> Built:
        _check_size(size, sizes)
        model, inputs = builder(size)
        return model.eval(), (), inputs
    build.__name__ = "build_" + builder.__name__
    return build


MODELS: dict[str, Callable[[str], Built]] = {
    "resnet50": _image_model(resnet.resnet50, {"width": 8}, {"width": 64}),
    "resnet101": _image_model(resnet.resnet101, {"width": 8}, {"width": 40}),
    "densenet121": _image_model(
        densenet.densenet121,
        {"growth_rate": 8, "block_config": (2, 3, 4, 3), "num_init_features": 16},
        {}),
    "monodepth": _image_model(monodepth.monodepth, {"width": 8}, {"width": 48},
                              bench_shape=(1, 3, 256, 256)),
    "quantized": _build_quantized,
    "tridentnet": _image_model(tridentnet.tridentnet, {"width": 8}, {"width": 32}),
    "bert": _hf(hf.bert, ("test", "bench", "bench12")),
    "bert_log": _hf(logging_hooks.bert_log, ("test", "bench", "bench12")),
    "deberta_v2": _hf(hf.deberta_v2),
    "align": _hf(hf.align),
}

# Sizes each builder accepts.
SIZES: dict[str, tuple[str, ...]] = {name: ("test", "bench") for name in MODELS}
SIZES["bert"] = ("test", "bench", "bench12")
SIZES["bert_log"] = ("test", "bench", "bench12")


def build(name: str, size: str = "test") -> Built:
    """``MODELS[name](size)``."""
    return MODELS[name](size)
