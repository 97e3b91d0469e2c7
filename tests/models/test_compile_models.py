"""Real models compile to exactly one graph with fullgraph=True and match eager on the first
call (monitor run), a repeated call (guard hit -> mock) and fresh inputs of the same shape."""
import pytest
import torch

import magpy
from benchmarks.models import MODELS

FAST = ["resnet50", "densenet121", "bert", "deberta_v2", "align", "resnet101", "monodepth", "tridentnet"]


def _close(a, b, atol=1e-5, rtol=1e-4):
    if isinstance(a, torch.Tensor):
        return type(a) is type(b) and a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=rtol)
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_close(x, y, atol, rtol) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_close(a[k], b[k], atol, rtol) for k in a)
    return a == b


def _fresh(args, kwargs):
    """New inputs of the same shapes and dtypes (token ids stay in range, masks stay masks)."""
    def new(t):
        if not isinstance(t, torch.Tensor):
            return t
        if t.dtype.is_floating_point:
            return torch.randn_like(t)
        return t[..., torch.randperm(t.shape[-1])] if t.dim() and t.max() > 1 else t.clone()
    return tuple(new(a) for a in args), {k: new(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("name", FAST)
def test_model_is_one_graph_and_matches_eager(name):
    torch.manual_seed(0)
    model, args, kwargs = MODELS[name]("test")
    compiled = magpy.compile(model, backend="eager", fullgraph=True)
    fresh_args, fresh_kwargs = _fresh(args, kwargs)
    with torch.no_grad():
        for a, k in [(args, kwargs), (args, kwargs), (fresh_args, fresh_kwargs)]:
            expected = model(*a, **k)
            assert _close(compiled(*a, **k), expected)
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.eager_runs, stats.graph_count) == (1, 2, 0, 1)
    assert magpy.explain(model, *args, **kwargs).graph_count == 1


def test_resnet_gradients_match_eager():
    torch.manual_seed(0)
    model, args, kwargs = MODELS["resnet50"]("test")
    x = args[0].clone().requires_grad_(True)
    compiled = magpy.compile(model, backend="eager", fullgraph=True)
    for _ in range(2):  # monitor run, then mock
        model.zero_grad()
        model(x).sum().backward()
        expected = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        x.grad = None
        model.zero_grad()
        compiled(x).sum().backward()
        got = [p.grad for p in model.parameters()] + [x.grad]
        x.grad = None
        assert all(torch.allclose(g, e, atol=1e-5, rtol=1e-4) for g, e in zip(got, expected))
    assert magpy.stats(compiled).mock_runs == 1


def test_quantized_resnet_is_one_graph():
    # QuantMeasure.forward calls float() on its running-range buffers: floats the graph
    # computes itself, and quantize's Python arithmetic on them (max(scale, 1e-8) included)
    # too: one graph, and new ranges replay the same record.
    torch.manual_seed(0)
    model, args, kwargs = MODELS["quantized"]("test")
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for _ in range(3):
            assert _close(compiled(*args, **kwargs), model(*args, **kwargs))
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.eager_runs) == (1, 2, 0), stats
    assert stats.graph_count == stats.graphs_per_call == 1 and stats.breaks == {}, stats
    # The running ranges move: the same record replays them, correctly.
    measure = next(m for m in model.modules() if type(m).__name__ == "QuantMeasure")
    measure.running_max.mul_(1.5)
    with torch.no_grad():
        assert _close(compiled(*args, **kwargs), model(*args, **kwargs))
        assert _close(compiled(*args, **kwargs), model(*args, **kwargs))
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.eager_runs) == (1, 4, 0), stats
