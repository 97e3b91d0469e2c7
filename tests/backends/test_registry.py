"""Backends by name and by callable: each compiles real models that then match eager; bad
names, missing optional packages and failing backends give clear errors or a warned fallback."""
from __future__ import annotations

import functools
import importlib.util
import math
import warnings

import pytest
import torch
import torch.nn as nn

import magpy
from benchmarks.models import MODELS
from magpy.backends import registry
from tests.models.test_compile_models import _close, _fresh


def recording_backend(gm, example_inputs):
    recording_backend.graphs.append(gm)
    return gm.forward


recording_backend.graphs = []
NAMED = ["eager", "inductor", "torchscript", "onnxrt", "aot_eager"]


class SmallCNN(nn.Module):
    """Conv, batch norm, a residual add, pooling and a classifier: the ops every backend needs."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def check_backend(model, args, kwargs, backend, close=_close):
    """First call, repeated call, fresh inputs: all match eager (``close``), one graph, no
    fallback."""
    compiled = magpy.compile(model, backend=backend, fullgraph=True)
    fresh_args, fresh_kwargs = _fresh(args, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a backend fallback warns: fail on it
        with torch.no_grad():
            for a, k in [(args, kwargs), (args, kwargs), (fresh_args, fresh_kwargs)]:
                assert close(compiled(*a, **k), model(*a, **k))
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.eager_runs, stats.graph_count) == (1, 2, 0, 1)


@pytest.mark.parametrize("backend", NAMED + [recording_backend], ids=str)
def test_backend_matches_eager_on_a_cnn(backend):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    check_backend(model, (torch.randn(1, 3, 16, 16),), {}, backend)


@pytest.mark.parametrize("backend", NAMED)
def test_backend_matches_eager_on_bert(backend):
    torch.manual_seed(0)
    model, args, kwargs = MODELS["bert"]("test")
    check_backend(model, args, kwargs, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torchscript", "onnxrt", "aot_eager"])
@pytest.mark.parametrize("name", ["resnet50", "deberta_v2"])
def test_backend_matches_eager_on_more_models(name, backend):
    torch.manual_seed(0)
    model, args, kwargs = MODELS[name]("test")
    # (ONNX Runtime's own convolutions: ResNet-50's logits up to 6e-4 from eager's, 1.8e-3
    # relative, whatever graph magpy hands it; onnxruntime 1.32 on this CPU)
    loose = functools.partial(_close, atol=2e-3, rtol=2e-3)
    check_backend(model, args, kwargs, backend, close=loose if backend == "onnxrt" else _close)


def test_callable_backend_receives_the_graph():
    recording_backend.graphs.clear()
    torch.manual_seed(0)
    check_backend(SmallCNN().eval(), (torch.randn(1, 3, 16, 16),), {}, recording_backend)
    assert len(recording_backend.graphs) == 1
    assert isinstance(recording_backend.graphs[0], torch.fx.GraphModule)


@pytest.mark.parametrize("backend", ["torchscript", "aot_eager"])
def test_backend_gradients_match_eager(backend):
    torch.manual_seed(0)
    model = SmallCNN().train()
    x = torch.randn(2, 3, 8, 8)
    compiled = magpy.compile(model, backend=backend, fullgraph=True)
    for _ in range(2):   # recording run, then the compiled graph
        model.zero_grad()
        model(x).sum().backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        compiled(x).sum().backward()
        for got, want in zip([p.grad for p in model.parameters()], expected):
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    assert magpy.stats(compiled).mock_runs == 1


def test_onnxrt_with_autograd_falls_back_with_a_warning():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(2, 4)
    compiled = magpy.compile(model, backend="onnxrt")
    with pytest.warns(RuntimeWarning, match="backend 'onnxrt' failed.*inference only"):
        out = compiled(x)
    assert torch.equal(out, model(x))
    compiled(x).sum().backward()
    assert model.weight.grad is not None


def test_unknown_backend_lists_what_is_available():
    with pytest.raises(magpy.BackendError) as info:
        magpy.compile(SmallCNN(), backend="no-such-backend")
    msg = str(info.value)
    assert "unknown backend 'no-such-backend'" in msg
    for name in ["eager", "inductor", "torchscript", "onnxrt", "aot_eager", "any callable"]:
        assert name in msg
    assert "TESTING_ONLY" not in msg


def test_missing_optional_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(magpy.BackendError, match=r"needs onnxruntime.*pip install 'magpy\[onnxrt\]'"):
        magpy.compile(SmallCNN(), backend="onnxrt")
    assert "onnxrt" not in registry.available()


@pytest.mark.parametrize("typo, meant", [("inductr", "inductor"), ("Eager", "eager"), ("aot_eagr", "aot_eager")])
def test_unknown_backend_suggests_the_closest_name(typo, meant):
    with pytest.raises(magpy.BackendError, match=f"Did you mean '{meant}'"):
        magpy.compile(SmallCNN(), backend=typo)


def test_torch_backends_that_cannot_run_here_fail_at_compile_not_at_the_first_call(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tvm", "torch_xla") else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name, why in [("tvm", "needs tvm"), ("openxla", "needs torch_xla"), ("cudagraphs", "CUDA device")]:
        with pytest.raises(magpy.BackendError, match=f"'{name}' cannot run here: .*{why}"):
            magpy.compile(SmallCNN(), backend=name)
        assert name not in registry.available()


def test_torch_compile_backend_names_are_accepted():
    name, fn = registry.resolve("aot_eager")
    assert name == "aot_eager" and callable(fn)


def test_failing_named_backend_falls_back_or_raises():
    # torch registers a backend that always fails to compile: magpy warns and runs the graph
    # eagerly, or raises when configured to.
    torch.manual_seed(0)
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        compiled = magpy.compile(model, backend="relu_compile_error_TESTING_ONLY")
        with pytest.warns(RuntimeWarning, match="relu_compile_error_TESTING_ONLY.*running the graph eagerly"):
            assert torch.equal(compiled(x), model(x))
        assert torch.equal(compiled(x), model(x))
        magpy.config.on_backend_error = "raise"
        try:
            magpy.reset()
            with pytest.raises(magpy.BackendError, match="relu_compile_error_TESTING_ONLY"):
                compiled(x)
        finally:
            magpy.config.on_backend_error = "fallback"


class _FakeQuantConvBN(torch.nn.Module):
    """conv -> BatchNorm -> round to a 1/16 grid, twice: a last-bit difference before a
    rounding becomes a whole step after it."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(16)

    def forward(self, x):
        h = torch.round(self.bn1(self.conv1(x)) * 16) / 16
        return torch.round(self.bn2(self.conv2(h)) * 16) / 16


def test_inductor_keeps_eager_arithmetic_before_a_rounding():
    # Inductor's channels-last convolutions and decomposed BatchNorm differ from eager in the
    # last bits; magpy compiles graphs that round with eager's layout and BatchNorm kernel.
    torch.manual_seed(0)
    model = _FakeQuantConvBN().eval()
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_()
            bn.bias.normal_()
    compiled = magpy.compile(model, backend="inductor")
    with torch.no_grad():
        for seed in range(3):
            torch.manual_seed(seed)
            x = torch.randn(2, 8, 32, 32)
            assert torch.equal(compiled(x), model(x)), seed
    assert magpy.stats(compiled).mock_runs == 2


def _cat_onto_empty_cache(x, w, cache):
    k = (x @ w).view(2, 5, 4, 8).transpose(1, 2)
    return torch.cat([cache, k], dim=-2)


def test_inductor_outputs_keep_eager_layout():
    # Inductor returns torch.cat of an empty cache and a transposed view in the view's
    # strides; eager's result is contiguous, and a program may view() it.
    x, w, cache = torch.randn(2, 5, 32), torch.randn(32, 32), torch.randn(2, 4, 0, 8)
    want = _cat_onto_empty_cache(x, w, cache)
    compiled = magpy.compile(_cat_onto_empty_cache, backend="inductor")
    for _ in range(3):
        got = compiled(x, w, cache)
        assert got.stride() == want.stride()
        assert torch.allclose(got.view(-1), want.view(-1), atol=1e-5)
    assert magpy.stats(compiled).mock_runs == 2


def _inductor_keeping_graphs(graphs):
    def inductor(gm, example_inputs):
        compiled = registry.BACKENDS["inductor"](gm, example_inputs)
        graphs.append(gm)   # as inductor got it (magpy folds constants into it first)
        return compiled
    return inductor


def _log_buckets(x):
    # DeBERTa's relative positions: log-bucketed, made from arange alone (no graph input).
    r = torch.arange(8)[:, None] - torch.arange(8)[None, :]
    buckets = torch.ceil(torch.log(r.abs().clamp(min=1).float()) * 3) * torch.sign(r)
    return torch.gather(x, -1, (buckets.long() + 8).expand(x.shape[0], 8, 8))


def test_inductor_folds_tensors_made_from_no_input():
    graphs = []
    compiled = magpy.compile(_log_buckets, backend=_inductor_keeping_graphs(graphs))
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(2, 8, 16)
        assert torch.equal(compiled(x), _log_buckets(x))
    (gm,) = graphs
    ops = [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert torch.log not in ops and torch.gather in ops
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == ["_folded0"]


def _written_and_returned(x):
    c = torch.arange(4.).exp()
    y = x * c
    c[0] = 5.0                        # a later use sees the write
    z = x * c
    d = torch.arange(3.).exp()        # returned: the caller may write it
    return y, z, d


def test_inductor_does_not_fold_what_a_call_could_change():
    # Tensors made from no input stay computed where the program writes them or returns them:
    # a constant would give a stale or shared result.
    compiled = magpy.compile(_written_and_returned, backend="inductor")
    x = torch.randn(4)
    for _ in range(4):
        got = compiled(x)
        assert _close(got, _written_and_returned(x))
        got[2].add_(100.0)        # the caller's tensor: the next call must not see this
    assert magpy.stats(compiled).mock_runs == 3


def test_inductor_does_not_fold_random_tensors():
    # Inductor draws its own random numbers (not eager's stream), but new ones in every call.
    compiled = magpy.compile(lambda x: x + torch.rand(4).exp(), backend="inductor")
    x = torch.zeros(4)
    draws = [compiled(x) for _ in range(4)]
    for a, b in zip(draws, draws[1:]):
        assert not torch.equal(a, b)
    assert all(((d >= 1) & (d < math.e)).all() for d in draws)
    assert magpy.stats(compiled).mock_runs == 3


@pytest.mark.parametrize("pool, shape", [
    (nn.AvgPool2d(2560, ceil_mode=True), (1, 4, 9, 9)),          # ALIGN's image pooler
    (nn.AvgPool2d((9, 12), ceil_mode=True, count_include_pad=False), (2, 3, 9, 9)),
    (nn.AvgPool1d(7), (2, 3, 7)),
    (nn.AvgPool3d(3), (1, 2, 3, 3, 3)),
], ids=["align", "kernel-tuple", "1d", "3d"])
def test_inductor_gets_pools_of_the_whole_input_as_means(pool, shape):
    # Inductor loops over the whole window of such a pool, far beyond the input.
    graphs = []
    compiled = magpy.compile(pool, backend=_inductor_keeping_graphs(graphs))
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(shape)
        assert torch.allclose(compiled(x), pool(x), atol=1e-6)
    (gm,) = graphs
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.mean]


@pytest.mark.parametrize("pool", [nn.AvgPool2d(4, padding=2, ceil_mode=True), nn.AvgPool2d(4, divisor_override=3),
                                  nn.AvgPool2d(3, stride=1)], ids=["padded", "divisor", "window-smaller"])
def test_inductor_keeps_other_pools(pool):
    graphs = []
    compiled = magpy.compile(pool, backend=_inductor_keeping_graphs(graphs))
    x = torch.randn(1, 2, 4, 4)
    for _ in range(3):
        assert torch.allclose(compiled(x), pool(x), atol=1e-6)
    (gm,) = graphs
    assert torch.mean not in [n.target for n in gm.graph.nodes]


def _conv_relu(x, w):
    return torch.nn.functional.conv2d(x, w).relu() * 2


def test_inductor_compiles_a_record_of_fixed_sizes_for_those_sizes():
    # A record whose guard fixes the sizes gets kernels for those sizes; only a record with
    # symbolic sizes (magpy.graphs.dynamic, the second size seen) gets kernels for any size.
    from torch._inductor.utils import run_and_get_code
    compiled = magpy.compile(_conv_relu, backend="inductor")
    w = torch.randn(4, 3, 3, 3)
    x = torch.randn(2, 3, 8, 8)
    out, (static_code,) = run_and_get_code(compiled, x, w)
    assert torch.allclose(out, _conv_relu(x, w), atol=1e-5)
    assert ".size()" not in static_code and "assert_size_stride(arg0_1, (2, 3, 8, 8)" in static_code
    x = torch.randn(2, 3, 10, 10)
    out, (dynamic_code,) = run_and_get_code(compiled, x, w)
    assert torch.allclose(out, _conv_relu(x, w), atol=1e-5)
    assert ".size()" in dynamic_code
    assert magpy.stats(compiled).graph_count == 2
