"""Real model code under the monitor gives bit-identical results to eager execution.

transformers' BertModel, DebertaV2Model and AlignModel (small configs, random weights) and
the architectures of the project's model zoo, each run natively and under the monitor.
"""
import pytest
import torch

import magpy.capture.monitor as monitor
from benchmarks.models import MODELS
from tests.models.test_zoo import state, tensors


def assert_bit_identical(name, size="test"):
    model, args, kwargs = MODELS[name](size)
    before = state(model)
    expected = model(*args, **kwargs)
    got = monitor.run(model, *args, **kwargs)
    assert type(got) is type(expected)
    exp_t, got_t = tensors(expected), tensors(got)
    assert len(exp_t) == len(got_t) > 0
    for e, g in zip(exp_t, got_t):
        assert torch.equal(e, g)
        assert e.requires_grad == g.requires_grad
    after = state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    return model, args, kwargs, got


@pytest.mark.parametrize("name", ["bert", "deberta_v2", "align"])
def test_transformers_models_equal_under_monitor(name):
    with torch.no_grad():
        assert_bit_identical(name)


@pytest.mark.parametrize("name", ["resnet50", "resnet101", "densenet121", "monodepth", "quantized",
                                  "tridentnet"])
def test_zoo_models_equal_under_monitor(name):
    with torch.no_grad():
        assert_bit_identical(name)


def test_gradients_through_a_monitored_forward_equal_eager():
    model, args, kwargs = MODELS["resnet50"]("test")
    x = args[0].clone().requires_grad_(True)
    model(x).sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    monitor.run(model, x).sum().backward()
    for e, g in zip(eager_grads, [p.grad for p in model.parameters()] + [x.grad]):
        assert torch.equal(e, g)


@pytest.mark.slow
def test_bert_12_layers_equal_under_monitor():
    with torch.no_grad():
        assert_bit_identical("bert", "bench12")
