"""The public API of ``magpy.compile``: forms, modules, errors, graph breaks, explain, config.

Spec under test: ``magpy.compile(fn=None, *, backend="inductor", fullgraph=False)`` as a
decorator or a call, on functions, bound methods, functions defined in a class body and
``nn.Module`` instances (``magpy.CompiledModule``); ``magpy.stats``, ``magpy.explain``,
``magpy.GraphBreakError``, ``magpy.config`` (``cache_size_limit``, ``on_capture_error``),
``magpy.reset``, ``magpy.annotate``; gradients through compiled code.
"""
import copy
import functools
import inspect
import os
import re
import warnings
import zlib

import pytest
import torch
import torch.fx
import torch.nn as nn

import magpy
from benchmarks.models import MODELS
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    again,
    check_compiled,
    close,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    isolated,
    standard,
)
from tests.harness.differential import same

HERE = os.path.abspath(__file__)


@pytest.fixture
def magpy_config():
    """Restore ``magpy.config`` after the test."""
    saved = {k: getattr(magpy.config, k) for k in ("cache_size_limit", "on_capture_error")}
    yield magpy.config
    for k, v in saved.items():
        setattr(magpy.config, k, v)


def affine(x):
    return x * 2 + 1


def relu_affine(x, y):
    return torch.relu(x) * 2 + y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


def x34(state=None):
    return (torch.randn(3, 4),)


def line_of(fn, marker="# BREAK"):
    """The absolute line number of the line of ``fn`` holding ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"{fn.__name__} must have exactly one {marker!r} line"
    return hits[0]


# ----------------------------------------------------------------------------- decorator forms

def test_bare_decorator_default_backend_inductor():
    # the default backend compiles with inductor, which functionalizes in-place updates: the
    # argument updated in place must still be updated, on the mock's calls too
    @magpy.compile
    def f(x, buf):
        buf.mul_(0.5).add_(x)
        return torch.sin(x) * 2 + buf

    torch.manual_seed(0)
    x, buf = torch.randn(8), torch.randn(8)
    buf_c = buf.clone()
    for _ in range(3):
        buf.mul_(0.5).add_(x)
        expected = torch.sin(x) * 2 + buf
        assert close(f(x, buf_c), expected)
        assert close(buf_c, buf)
    st = magpy.stats(f)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.graph_count) == (1, 2, 0, 1)


def test_decorator_with_arguments():
    @magpy.compile(backend="eager", fullgraph=True)
    def f(x):
        return torch.relu(x) + 1

    x = torch.randn(5)
    assert same(f(x), torch.relu(x) + 1)
    assert same(f(x), torch.relu(x) + 1)
    st = magpy.stats(f)
    assert (st.monitor_runs, st.mock_runs, st.records) == (1, 1, 1)


def test_compile_called_on_function():
    check_compiled(lambda: (relu_affine, None), standard(lambda s: (torch.randn(3, 4), torch.randn(4))),
                   expect_graphs=1, expect_records=1)


def test_compiled_function_keeps_the_original_callable_untouched():
    code = affine.__code__
    f = magpy.compile(affine, backend="eager")
    x = torch.randn(3)
    f(x)
    assert affine.__code__ is code
    assert same(affine(x), x * 2 + 1)
    assert magpy.stats(f).monitor_runs == 1   # calling the original does not go through magpy


class Scaler:
    def __init__(self, k):
        self.k = k
        self.bias = torch.randn(3)

    def apply(self, x):
        return x * self.k + self.bias


def test_compile_bound_method():
    def build():
        s = Scaler(2)
        return s.apply, s

    def set_k(s):
        s.k = 5

    check_compiled(build, standard(lambda s: (torch.randn(3),)) + [
        after(set_k, expect=MONITOR),
        again(),
    ])


class CallableScaler:
    """A callable object that is not an nn.Module."""

    def __init__(self):
        self.w = torch.randn(3)

    def __call__(self, x):
        return x * self.w


def test_compile_callable_instance():
    def build():
        obj = CallableScaler()
        return obj, obj

    def new_w(obj):
        obj.w = torch.randn(3)

    check_compiled(build, standard(lambda s: (torch.randn(3),)) + [after(new_w, expect=None), again()])


def scale_shift(x, scale=2.0, *, shift):
    return x * scale + shift


def test_keyword_and_positional_calls():
    shift = lambda s: {"shift": torch.ones(3)}   # noqa: E731
    check_compiled(lambda: (scale_shift, None), [
        first(lambda s: (torch.randn(3),), shift),
        again(),
        Step("scale passed positionally", lambda s: (torch.randn(3), 2.0), shift, expect=None),
        Step("scale passed by keyword", lambda s: (torch.randn(3),),
             lambda s: {"scale": 3.0, "shift": torch.ones(3)}, expect=None),
        Step("defaults again", lambda s: (torch.randn(3),), shift, seed=4, expect=MOCK),
    ])


def test_decorator_on_method_in_class_body():
    class Affine:
        def __init__(self, k):
            self.k = k
            self.bias = torch.randn(3)

        @magpy.compile(backend="eager", fullgraph=True)
        def forward(self, x):
            return x * self.k + self.bias

    a, b = Affine(2.0), Affine(3.0)
    x = torch.randn(3)
    for _ in range(2):
        assert same(a.forward(x), x * 2.0 + a.bias)
        assert same(b.forward(x), x * 3.0 + b.bias)
    a.k = 4.0
    assert same(a.forward(x), x * 4.0 + a.bias)
    st = magpy.stats(Affine.__dict__["forward"])
    assert st.mock_runs >= 2 and st.eager_runs == 0


def test_decorator_on_module_forward_in_class_body():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        @magpy.compile(backend="eager", fullgraph=True)
        def forward(self, x):
            return torch.tanh(self.lin(x)) + x

    torch.manual_seed(0)
    m1, m2 = Block(), Block()
    x = torch.randn(2, 4)
    for _ in range(2):
        for m in (m1, m2):
            assert same(m(x), torch.tanh(m.lin(x)) + x)
    assert magpy.stats(Block.__dict__["forward"]).mock_runs >= 2


# ----------------------------------------------------------------------------- modules

def test_compiled_module_is_a_module_wrapping_the_original():
    torch.manual_seed(0)
    model = Net()
    cm = magpy.compile(model, backend="eager")
    assert isinstance(cm, magpy.CompiledModule) and isinstance(cm, nn.Module)
    assert cm._orig_mod is model
    assert [id(p) for p in cm.parameters()] == [id(p) for p in model.parameters()]
    assert list(cm.state_dict().keys()) == list(model.state_dict().keys())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in cm.state_dict().items())
    assert cm.lin is model.lin
    model.custom = 7
    assert cm.custom == 7


def test_compiled_module_training_flag_reaches_the_original():
    model = Net()
    cm = magpy.compile(model, backend="eager")
    assert cm.training is True
    model.eval()
    assert cm.training is False
    cm.train()
    assert model.training is True and model.lin.training is True
    cm.eval()
    assert model.training is False and model.lin.training is False


def test_compiled_module_calls_match_eager():
    def build():
        net = Net()
        return net, net

    check_compiled(build, standard(x34), expect_graphs=1, expect_records=1)


def test_compiled_module_sees_load_state_dict():
    torch.manual_seed(0)
    model, other = Net(), Net()
    cm = magpy.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(3, 4)
    assert same(cm(x), model(x))
    assert same(cm(x), model(x))
    cm.load_state_dict(other.state_dict())          # copies into the original's parameters
    assert torch.equal(model.lin.weight, other.lin.weight)
    assert same(cm(x), other(x))


def test_zoo_model_resnet50_matches_eager():
    def build():
        model, args, kwargs = MODELS["resnet50"]("test")
        return model, {"model": model, "args": args}

    check_compiled(build, [
        first(lambda s: s["args"], ctx=torch.no_grad),
        again(ctx=torch.no_grad),
        fresh(lambda s: (torch.randn(1, 3, 64, 64),), ctx=torch.no_grad),
    ], observe=lambda s: s["model"], expect_graphs=1)


# ----------------------------------------------------------------------------- bad input

def test_compile_rejects_a_non_callable():
    with pytest.raises(TypeError, match="callable"):
        magpy.compile(42)


def test_compile_rejects_an_unknown_backend_at_compile_time():
    with pytest.raises(ValueError) as ei:
        magpy.compile(affine, backend="nope")
    msg = str(ei.value)
    assert "nope" in msg and "eager" in msg and "inductor" in msg


# ----------------------------------------------------------------------------- graph breaks

def brk_item(x):
    y = x * 2
    v = y.sum().item()  # BREAK
    return y + round(v)  # (Python rounds it: y + v or y + 2 * v would stay one graph)


def brk_branch(x):
    y = x * 2
    if y.sum() > 0:  # BREAK
        return y + 1
    return y - 1


def brk_tolist(x):
    y = x * 2
    vals = y.tolist()  # BREAK
    return y + vals[0]


def brk_print(x):
    y = x * 2
    print(y)  # BREAK
    return y + 1


def brk_print_text(x):
    y = x * 2
    print("scaling", x.shape[0])  # BREAK
    return y + 1


BREAKS = {
    "item": (brk_item, ("item",)),
    "tensor_bool_branch": (brk_branch, ("bool", "branch", "control flow", "jump")),
    "tolist": (brk_tolist, ("tolist",)),
    "print_tensor": (brk_print, ("print", "repr")),    # print(t) reads t's data through repr
    "print_text": (brk_print_text, ("print",)),         # I/O
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_fullgraph_raises_graph_break_error(name):
    fn, words = BREAKS[name]
    line = line_of(fn)
    compiled = magpy.compile(fn, backend="eager", fullgraph=True)
    with pytest.raises(magpy.GraphBreakError) as ei:
        compiled(torch.ones(4))
    err = ei.value
    assert isinstance(err, magpy.MagpyError)
    assert any(w in err.reason.lower() for w in words), f"reason {err.reason!r} does not name {words}"
    assert err.lineno == line
    assert os.path.abspath(err.filename) == HERE
    msg = str(err)
    assert f"{os.path.basename(HERE)}:{line}" in msg, msg
    assert any(w in msg.lower() for w in words), msg


@pytest.mark.parametrize("name", list(BREAKS))
def test_graph_break_runs_in_pieces_and_stays_correct(name):
    # The break is an eager step between two graphs.  Where its value feeds tensor arithmetic
    # or a branch (item, tolist, the bool), the record checks it: other data records anew.
    fn, words = BREAKS[name]
    steps = [
        first(lambda s: (torch.ones(4),), expect=None),
        again(expect=MOCK),
        Step("negative input", lambda s: (-torch.ones(4),), expect=None),
        Step("positive input", lambda s: (torch.full((4,), 3.0),), expect=None),
        fresh(lambda s: (torch.randn(4),), expect=None),
        again(expect=MOCK),
    ]
    trace = check_compiled(lambda: (fn, None), steps, fullgraph=False)
    st = trace.stats
    assert st["eager_runs"] == 0, f"a graph break is an eager step, not an eager call: {st}"
    breaks = trace.compiled._magpy_cache.stats.breaks
    assert any(w in r.lower() for r in breaks for w in words), breaks
    if name.startswith("print"):   # nothing is checked: one record replays every call
        assert st["monitor_runs"] == 1, st


def checksum_scale(x, key):
    return x * (zlib.crc32(key) % 7 + 1)


def test_annotate_marks_a_native_function_pure():
    assert zlib.crc32(b"abc") % 7 != zlib.crc32(b"xyz") % 7
    with pytest.raises(magpy.GraphBreakError) as ei:      # unannotated native callee: dynamic
        magpy.compile(checksum_scale, backend="eager", fullgraph=True)(torch.randn(3), b"abc")
    assert "crc32" in ei.value.reason
    magpy.annotate(zlib.crc32, pure=True)
    args = lambda s: (torch.randn(3), b"abc")   # noqa: E731
    check_compiled(lambda: (checksum_scale, None), standard(args) + [
        Step("other key", lambda s: (torch.randn(3), b"xyz"), expect=MONITOR),
        Step("first key again", args, seed=7, expect=MOCK),
    ])
    assert magpy.explain(checksum_scale, torch.randn(3), b"abc").graph_count == 1


# ----------------------------------------------------------------------------- explain

def test_explain_reports_graph_guard_and_mock():
    x, y = torch.randn(3, 4), torch.randn(4)
    exp = magpy.explain(relu_affine, x, y)
    assert exp.graph_count == 1
    assert len(exp.graphs) == 1 and isinstance(exp.graphs[0], torch.fx.GraphModule)
    ops = [n for n in exp.graphs[0].graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    assert exp.op_count == len(ops) == 3
    assert exp.break_reasons == []
    for src in (exp.guard_source, exp.mock_source, exp.fast_guard_source):
        assert isinstance(src, str) and src.strip()
        compile(src, "<generated>", "exec")          # generated Python must parse
    text = exp.full()
    assert exp.guard_source.strip() in text and exp.mock_source.strip() in text
    assert exp.fast_guard_source.strip() in text
    assert re.search(r"graph(s|[ _]?count)\W*1\b|\b1 graphs?\b", text, re.IGNORECASE), text
    summary = str(exp)
    assert exp.guard_source.strip() not in summary and "print(explanation.full())" in summary
    assert "x: Tensor float32 [3, 4], contiguous, requires_grad=False" in summary, summary
    assert repr(exp) == "Explanation(graphs=1, ops=3, breaks=0)"


def test_explain_on_a_module():
    exp = magpy.explain(Net(), torch.randn(3, 4))
    assert exp.graph_count == 1 and exp.break_reasons == []
    assert exp.op_count == 2   # linear, relu


LOG = []


def logs_and_doubles(x):
    LOG.append(x.sum())
    return x * 2


def test_explain_runs_the_program_once():
    fn, ns = isolated(logs_and_doubles, LOG=[])
    magpy.explain(fn, torch.randn(3))
    assert len(ns["LOG"]) == 1


def test_explain_reports_a_graph_break_with_its_source_line():
    exp = magpy.explain(brk_item, torch.ones(4))
    # x * 2, sum, v computed in the graph (detach, to float64, reshape) | float(v), v * 2 |
    # y + ...: two graphs around the eager steps where Python needs v.
    assert exp.graph_count == 2 and exp.op_count == 6, str(exp)
    assert not exp.eager
    assert len(exp.break_reasons) == 1
    gb = exp.break_reasons[0]
    assert isinstance(gb, magpy.GraphBreak)
    assert "item" in gb.reason
    assert gb.lineno == line_of(brk_item)
    assert os.path.abspath(gb.filename) == HERE
    assert ".item()" in gb.source
    text = str(exp)
    assert "item" in text and str(gb.lineno) in text and "eager step" in text
    assert "return MISS" in exp.mock_source   # the check of v


# ----------------------------------------------------------------------------- config, reset

def test_config_defaults():
    assert magpy.config.cache_size_limit == 8
    assert magpy.config.on_capture_error == "fallback"


# The re-record check wraps RecordCache.miss from tests/: these tests look at warning locations.
@pytest.mark.magpy_rerecords
def test_cache_size_limit_warns_once_and_runs_eagerly(magpy_config):
    magpy_config.cache_size_limit = 2
    f = magpy.compile(affine, backend="eager")
    # dtype is never lifted into a graph: each dtype needs its own record
    inputs = [torch.arange(6, dtype=dt).reshape(2, 3)
              for dt in (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16)]
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        for x in inputs[:2]:
            assert same(f(x), affine(x))
    assert [w for w in quiet if issubclass(w.category, UserWarning)] == []
    assert magpy.stats(f).records == 2
    eager_before = magpy.stats(f).eager_runs
    with pytest.warns(UserWarning) as rec:
        for x in inputs[2:]:
            assert same(f(x), affine(x))
    [warning] = [w for w in rec if issubclass(w.category, UserWarning)]
    assert warning.filename == __file__   # the user's call, not magpy's wrapper
    st = magpy.stats(f)
    assert st.records == 2
    assert st.eager_runs - eager_before == 3


@pytest.mark.magpy_rerecords
def test_cache_size_limit_warning_names_a_module_briefly(magpy_config):
    magpy_config.cache_size_limit = 1
    model = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(20)])
    f = magpy.compile(model, backend="eager")
    f(torch.randn(2, 3))
    with pytest.warns(UserWarning) as rec:
        f(torch.randn(4, 3))
    [warning] = [w for w in rec if issubclass(w.category, UserWarning)]
    message = str(warning.message)
    assert message.startswith("magpy: Sequential: 1 records") and "\n" not in message
    assert warning.filename == __file__


def test_reset_drops_all_records():
    f = magpy.compile(affine, backend="eager")
    x = torch.randn(3)
    f(x)
    f(x)
    st = magpy.stats(f)
    assert (st.records, st.monitor_runs, st.mock_runs) == (1, 1, 1)
    magpy.reset()
    assert magpy.stats(f).records == 0
    monitor_before = magpy.stats(f).monitor_runs
    assert same(f(x), affine(x))
    assert magpy.stats(f).monitor_runs == monitor_before + 1
    assert magpy.stats(f).records == 1


def test_on_capture_error_round_trip(magpy_config):
    assert magpy_config.on_capture_error == "fallback"
    magpy_config.on_capture_error = "raise"
    assert magpy.config.on_capture_error == "raise"
    # "raise" is about magpy's own capture failures: programs it captures still compile, and a
    # graph break (a dynamic operation, not a capture failure) still falls back when fullgraph=False
    x = torch.randn(4)
    f = magpy.compile(affine, backend="eager")
    assert same(f(x), affine(x)) and same(f(x), affine(x))
    assert magpy.stats(f).mock_runs == 1
    g = magpy.compile(brk_item, backend="eager")
    assert same(g(x), brk_item(x))
    magpy_config.on_capture_error = "fallback"
    assert magpy.config.on_capture_error == "fallback"
    with pytest.raises(ValueError):
        magpy_config.on_capture_error = "ignore"
    assert magpy.config.on_capture_error == "fallback"


def test_fullgraph_raises_where_capture_fails(monkeypatch):
    # One graph or an exception: a capture failure under fullgraph=True raises whatever
    # on_capture_error says (three diffusers models ran eagerly there with a warning).
    from magpy.records import record

    def failing(*args, **kwargs):
        raise RuntimeError("boom: code generation failed")

    monkeypatch.setattr(record, "generate", failing)
    x = torch.randn(4)
    with pytest.raises(magpy.CaptureError, match="boom"):
        magpy.compile(affine, backend="eager", fullgraph=True)(x)
    with pytest.warns(magpy.CaptureFailedWarning, match="boom"):
        assert same(magpy.compile(affine, backend="eager")(x), affine(x))


def test_failing_backend_still_gives_the_eager_result():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("boom: the backend failed")

    x = torch.randn(3)
    f = magpy.compile(affine, backend=broken_backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert same(f(x), affine(x))
        assert same(f(x), affine(x))


# ----------------------------------------------------------------------------- callable backend

def test_callable_backend_is_invoked_once_per_graph():
    seen = []

    def counting_backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    f = magpy.compile(relu_affine, backend=counting_backend, fullgraph=True)
    x, y = torch.randn(3, 4), torch.randn(4)
    for _ in range(3):
        assert same(f(x, y), relu_affine(x, y))
    assert len(seen) == 1
    gm, example = seen[0]
    assert isinstance(gm, torch.fx.GraphModule)
    assert {tuple(t.shape) for t in example if isinstance(t, torch.Tensor)} >= {(3, 4), (4,)}
    x64, y64 = x.double(), y.double()
    assert same(f(x64, y64), relu_affine(x64, y64))
    assert len(seen) == 2
    assert magpy.stats(f).graph_count == 2


# ----------------------------------------------------------------------------- autograd

def mlp(x, w, b):
    return torch.tanh(x @ w + b).sum(-1)


def _grad_case(kind):
    """(program, leaves that get gradients, make input) for a function or a module."""
    torch.manual_seed(0)
    if kind == "function":
        w, b = torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)
        return (lambda x: mlp(x, w, b)), mlp, [w, b]
    model = Net()
    return model, model, list(model.parameters())


@pytest.mark.parametrize("backend,kind", [("eager", "function"), ("eager", "module"), ("inductor", "module")])
def test_gradients_match_eager(backend, kind):
    call_e, _, leaves_e = _grad_case(kind)
    call_c, target_c, leaves_c = _grad_case(kind)
    if kind == "function":
        w_c, b_c = leaves_c
        compiled_mlp = magpy.compile(mlp, backend=backend, fullgraph=True)
        stats_of = compiled_mlp

        def compiled(x):
            return compiled_mlp(x, w_c, b_c)
    else:
        compiled = stats_of = magpy.compile(target_c, backend=backend, fullgraph=True)
    equal = same if backend == "eager" else (lambda a, b: close(a, b, rtol=1e-5, atol=1e-5))
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        x_e = torch.randn(3, 4, requires_grad=True)
        x_c = x_e.detach().clone().requires_grad_(True)
        out_e, out_c = call_e(x_e), compiled(x_c)
        assert equal(out_e, out_c)
        assert out_c.requires_grad and out_c.grad_fn is not None
        (out_e * out_e).sum().backward()
        (out_c * out_c).sum().backward()
        assert equal(x_e.grad, x_c.grad), "input gradients differ"
        for le, lc in zip(leaves_e, leaves_c):
            assert equal(le.grad, lc.grad), "parameter gradients differ"
            le.grad, lc.grad = None, None
    st = magpy.stats(stats_of)
    assert (st.monitor_runs, st.mock_runs) == (1, 2), "backward must have gone through the mock's graph"


def test_gradients_accumulate_across_mock_calls():
    torch.manual_seed(0)
    model_e = Net()
    model_c = copy.deepcopy(model_e)
    cm = magpy.compile(model_c, backend="eager", fullgraph=True)
    x = torch.randn(3, 4)
    for _ in range(3):
        model_e(x).sum().backward()
        cm(x).sum().backward()
    for pe, pc in zip(model_e.parameters(), model_c.parameters()):
        assert same(pe.grad, pc.grad)
    assert magpy.stats(cm).mock_runs == 2


def _reads_data(x):
    return x * x.sum().tolist()      # a dynamic operation: an eager step


def test_graph_break_warns_once_per_reason_at_the_program_line():
    f = magpy.compile(_reads_data, backend="eager")
    with pytest.warns(magpy.GraphBreakWarning) as rec:
        for n in (2, 2, 3, 3):
            assert same(f(torch.ones(n)), _reads_data(torch.ones(n)))
    breaks = [w for w in rec if issubclass(w.category, magpy.GraphBreakWarning)]
    assert len(breaks) == 1
    assert breaks[0].filename == __file__
    assert breaks[0].lineno == _reads_data.__code__.co_firstlineno + 1
    assert "Tensor.tolist reads tensor data" in str(breaks[0].message)


def test_explain_summary_of_a_resnet_fits_a_screen():
    from benchmarks.models import MODELS
    model, args, kwargs = MODELS["resnet50"]("test")[:3]
    with torch.no_grad():
        exp = magpy.explain(model, *args, **kwargs)
    lines = str(exp).splitlines()
    assert len(lines) < 40, "\n".join(lines)
    assert f"  x: Tensor float32 {list(args[0].shape)}, contiguous, requires_grad=False" in lines, lines
    assert any(line.startswith("graph 0: ") and "conv2d" in line for line in lines), lines
    assert "training is False" in str(exp)
    assert len(exp.full().splitlines()) > 1000   # the guard of every module is there on request


# ---------------------------------------------------------------------------- functools.partial

class _Shifted(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *, shift=0.5):
        return self.lin(x) + shift


def _shift_more(p):
    p.keywords["shift"] = 2.5


def _new_layer(p):
    p.func.lin = nn.Linear(4, 4)


def test_partial_of_a_module_is_one_graph():
    # compiled as its function, the partial's arguments given on each call: the module's state
    # is guarded, and a changed keyword is a changed argument.
    def build():
        p = functools.partial(_Shifted(), shift=1.5)
        return p, p

    check_compiled(build, standard(lambda p: (torch.randn(3, 4),)) + [
        after(_shift_more, expect=ANY), after(_new_layer), again()],
        observe=lambda p: (list(p.func.parameters()), p.keywords))


def test_compiling_a_compiled_partial_keeps_its_arguments():
    p = functools.partial(torch.add, other=torch.ones(2))
    twice = magpy.compile(magpy.compile(p, backend="eager"), backend="eager")
    assert torch.equal(twice(torch.zeros(2)), torch.ones(2))
