"""Issue 16, "crashes and re-records": magpy's own machinery never crashes the user's call,
values reach generated code intact, escaping generators are native ones, and guards can pass.

Each program is checked differentially against eager (``tests.harness.compile_harness``): first call
(monitor run), the identical call again (must hit the record), fresh inputs, and mutations
that must record anew.  The fault-injection tests make each stage of magpy's machinery raise
and check the call still returns eager's result, with one warning naming the stage, the
fallback in ``magpy.stats``, and :class:`magpy.CaptureError` under ``on_capture_error="raise"``.
"""
import asyncio
import enum
import inspect
import math
import types
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

import magpy
from magpy.capture.refgraph import rules
from magpy.graphs import opgraph
from magpy.records import codegen, record
from tests.harness.compile_harness import (
    MOCK,
    RehitCheck,
    after,
    again,
    check_compiled,
    first,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    standard,
)
from tests.harness.differential import same


@pytest.fixture
def magpy_config():
    """Restore ``magpy.config`` after the test."""
    saved = {k: getattr(magpy.config, k) for k in ("on_capture_error", "on_backend_error")}
    yield magpy.config
    for k, v in saved.items():
        setattr(magpy.config, k, v)


def x34(state=None):
    return (torch.randn(3, 4),)


def cache_of(compiled):
    return compiled._magpy_cache


def _own(module):
    """A module as both the program and the state the steps mutate and compare."""
    return module, module


# ============================================================================ 1. TorchScript
# tests/capture/test_torchscript.py: ScriptModules are one graph now.


# ============================================================================ 2. __module__ None

def _exec_namespace():
    ns = {"torch": torch}   # no __name__: functions and classes made here have __module__ None / 'builtins'
    exec("def affine(x):\n"
         "    return torch.relu(x) * 2 + 1\n"
         "class Net(torch.nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.lin = torch.nn.Linear(4, 2)\n"
         "    def forward(self, x):\n"
         "        return helper(self.lin(x))\n"
         "def helper(y):\n"
         "    return y.sin()\n", ns)
    return ns


def test_exec_defined_function_compiles():
    ns = _exec_namespace()
    assert ns["affine"].__module__ is None
    check_compiled(lambda: (_exec_namespace()["affine"], None), standard(x34), expect_graphs=1)


def test_exec_defined_module_and_helper_compile():
    check_compiled(lambda: (_exec_namespace()["Net"](), None), standard(x34), expect_graphs=1)


# ============================================================================ 3. values in generated code

class Holder(nn.Module):
    """Keeps a constant as an attribute; ``use`` says how forward feeds it to tensor code."""

    def __init__(self, value, use):
        super().__init__()
        self.value = value
        self.use = use

    def forward(self, x):
        return self.use(x, self.value)


def _mul(x, c):
    return x * c


def _full(x, c):
    return torch.full((3, 4), c) + x.to(torch.full((1,), c).dtype)


def _div_sqrt_dim(x, c):
    score = x @ x.transpose(-1, -2)
    return score / c


class Dim(enum.IntEnum):
    ROWS = 0
    COLS = 1


class Mode(enum.Enum):
    SUM = "sum"
    MEAN = "mean"


NUMPY_SCALARS = [np.float64(4.0), np.sqrt(16), np.float32(0.1), np.float16(1.5), np.int64(3), np.int32(-2),
                 np.int8(5), np.uint8(7), np.bool_(True), np.longdouble(2.5)]


@pytest.mark.parametrize("value", NUMPY_SCALARS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("use", [_mul, _full, _div_sqrt_dim], ids=lambda f: f.__name__)
def test_numpy_scalar_constant_in_graph(value, use):
    # np.float64(4.0) reached the fx code as "np.float64(4.0)" with no np in its namespace:
    # the repeated call crashed with NameError.  np scalars also differ from Python scalars
    # in type promotion (np.bool_ * int tensor is float), so they stay numpy scalars.
    if use is _full and isinstance(value, np.longdouble):
        pytest.skip("torch.full does not take a longdouble")
    check_compiled(lambda: (Holder(value, use), None), standard(x34), expect_graphs=1)


def test_numpy_scalar_attribute_changed_records_again():
    def to_float32(m):
        m.value = np.float32(4.0)   # equal value, another type: another promotion

    def to_five(m):
        m.value = np.float64(5.0)

    check_compiled(lambda: _own(Holder(np.float64(4.0), _mul)),
                   standard(x34) + [after(to_float32), again(), after(to_five), again()],
                   observe=lambda m: m.value)


def _sum_dim(x, dim):
    return x.sum(dim) + dim


def _reduce_mode(x, mode):
    return x.sum() if mode is Mode.SUM else x.mean()


def _signed_zero(x, c):
    return 1 / (x * 0 + c)   # -inf for c = -0.0, inf for c = 0.0


def _big_int(x, c):
    return torch.full((2,), c, dtype=torch.int64) + x.sum().to(torch.int64)


def _nan_fill(x, c):
    return torch.nan_to_num(x + c, nan=7.0)


def _inf_clamp(x, c):
    return x.clamp(-c, c) * 2


def _meta(x, c):
    dtype, device, size = c
    return torch.zeros(size, dtype=dtype, device=device) + x.to(dtype).view(size)


CONSTANTS = [
    (Dim.COLS, _sum_dim), (Mode.SUM, _reduce_mode), (-0.0, _signed_zero), (0.0, _signed_zero),
    (2 ** 62 + 1, _big_int), (float("nan"), _nan_fill), (np.float64("nan"), _nan_fill),
    (np.float32("nan"), _nan_fill), (float("inf"), _inf_clamp), (np.float32(np.inf), _inf_clamp),
    ((torch.float64, torch.device("cpu"), torch.Size([4, 3])), _meta),
]


@pytest.mark.parametrize("value,use", CONSTANTS, ids=lambda v: repr(v) if not callable(v) else v.__name__)
def test_constants_in_graph_and_guard(value, use):
    # Each value is guarded (type and value) and reaches the graph: the repeated call must hit
    # (a NaN guard once compared NaN == NaN and missed forever) and compute eager's result.
    check_compiled(lambda: (Holder(value, use), None), standard(x34), expect_graphs=1)


def test_negative_zero_is_not_zero():
    # 0.0 == -0.0, yet 1 / x tells them apart: a guard comparing with == returned -inf for 0.0.
    def to_zero(m):
        m.value = 0.0

    def to_negative_zero(m):
        m.value = -0.0

    steps = [first(x34), again(), after(to_zero), again(), after(to_negative_zero, expect=MOCK)]
    check_compiled(lambda: _own(Holder(-0.0, _signed_zero)), steps, observe=lambda m: m.value)


def test_nan_in_a_tuple_hits():
    def use(x, c):
        return torch.nan_to_num(x * c[0] + c[1], nan=1.0)

    check_compiled(lambda: (Holder((2.0, float("nan")), use), None), standard(x34), expect_graphs=1)


class Tagged(nn.Module):
    """Python values read by the guard only: bytes, odd strings, big ints, a numpy scalar."""

    def __init__(self):
        super().__init__()
        self.tag = b"\x00\xff'\""
        self.name = "a'b\"c\n\\ \u00e9 \ud800 \x00"
        self.big = -(2 ** 100)
        self.huge = 10 ** 5000   # repr() refuses it: no literal
        self.count = np.int64(3)
        self.__dict__["odd name"] = 2.0   # setattr() takes any string
        self.__dict__["class"] = 1.0

    def forward(self, x):
        y = x + (1 if self.tag == b"\x00\xff'\"" else 2) + (1 if self.name.endswith("\x00") else 2)
        y = y * getattr(self, "odd name") + getattr(self, "class")
        return y + (3 if self.big < 0 else 4) + int(self.count) + (self.huge % 7)


def test_odd_values_in_guards():
    def retag(m):
        m.tag = b"other"

    def rename(m):
        m.name = "plain"

    def recount(m):
        m.count = np.int64(4)

    def grow(m):
        m.huge += 1

    def odd(m):
        m.__dict__["odd name"] = 3.0

    def observe(m):
        return (m.tag, m.name, m.count, m.__dict__["odd name"], m.huge % 1000)

    steps = standard(x34) + [after(retag), again(), after(rename), again(), after(recount), again(),
                             after(odd), again(), after(grow), again()]
    check_compiled(lambda: _own(Tagged()), steps, observe=observe)


class Returns(nn.Module):
    """Returns constants of many kinds through the mock (and a graph output)."""

    def __init__(self):
        super().__init__()
        self.values = (np.float32(0.5), Mode.MEAN, float("nan"), -0.0, 2 ** 70, b"\x01", "\u2028",
                       torch.float16, torch.device("cpu"), torch.Size([2, 2]), complex(math.inf, 1))

    def forward(self, x):
        return x + 1, self.values, list(self.values)


def test_constants_returned_by_the_mock():
    trace = check_compiled(lambda: (Returns(), None), standard(x34), expect_graphs=1)
    values = trace.results[1][1][1]
    assert [type(v) for v in values] == [type(v) for v in Returns().values]
    assert math.copysign(1.0, values[3]) == -1.0


def test_numpy_constant_with_inductor():
    check_compiled(lambda: (Holder(np.float32(4.0), _div_sqrt_dim), None), standard(x34),
                   backend="inductor", expect_graphs=1)


# ============================================================================ 4. escaping generators

class Params(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.parameters()


def scaled(xs, k):
    return (x * k for x in xs)


async def _double(x):
    return x * 2


class Coro(nn.Module):
    def forward(self, x):
        return _double(x + 1)


class Keeps(nn.Module):
    """Stores the generator it returns: both references must stay one object."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.it = None

    def forward(self, x):
        self.it = self.parameters()
        return self.it


def started(xs):
    g = (x + 1 for x in xs)
    next(g)
    return g


def _drain(obj):
    if inspect.iscoroutine(obj):
        return asyncio.run(obj)
    return list(obj)


GENERATOR_CASES = [
    (Params, lambda: (torch.randn(2),), types.GeneratorType),
    (lambda: scaled, lambda: ([torch.randn(3), torch.randn(3)], 2.0), types.GeneratorType),
    (Coro, lambda: (torch.randn(3),), types.CoroutineType),
]


@pytest.mark.parametrize("make,args,kind", GENERATOR_CASES, ids=["parameters", "genexpr", "coroutine"])
def test_escaping_generator_is_native(make, args, kind):
    # The call returns a generator (coroutine) it made and never ran: the caller gets a native
    # one on every call -- the monitor's own class on the first call failed type checks -- and
    # the record rebuilds it natively, so repeated calls hit.
    torch.manual_seed(0)
    program = make()
    fast = magpy.compile(program, backend="eager")
    for i in range(3):
        torch.manual_seed(i // 2)   # calls 0 and 1 identical, call 2 fresh inputs
        a = args()
        eager, compiled = program(*a), fast(*a)
        assert type(compiled) is kind and isinstance(compiled, kind)
        assert inspect.isgenerator(compiled) == inspect.isgenerator(eager)
        assert inspect.iscoroutine(compiled) == inspect.iscoroutine(eager)
        assert same(_drain(eager), _drain(compiled))
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.records) == (1, 2, 0, 1), st


def test_generator_also_stored_stays_one_object():
    # Kept in self.it and returned: the monitor's generator is handed back on the first call
    # (replacing only the result would split one generator in two); the mock makes one
    # native generator and stores and returns that same object.
    eager, prog = Keeps(), Keeps()
    prog.load_state_dict(eager.state_dict())
    fast = magpy.compile(prog, backend="eager")
    x = torch.randn(2)
    for _ in range(2):
        g_e, g_c = eager(x), fast(x)
        assert g_c is prog.it and isinstance(g_c, types.GeneratorType) and inspect.isgenerator(g_c)
        assert same(list(g_e), list(g_c))
    assert type(prog.it) is types.GeneratorType   # the mock's
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs) == (1, 1), st


def test_started_generator_escapes_intact():
    # A generator that already ran cannot be remade natively: the call is exact (the
    # monitor's generator, unrecorded from now on), and magpy runs it eagerly with a warning.
    fast = magpy.compile(started, backend="eager")
    xs = [torch.randn(2) for _ in range(3)]
    with pytest.warns(RuntimeWarning, match="already started"):
        g = fast(xs)
    assert isinstance(g, types.GeneratorType) and inspect.isgenerator(g)
    assert inspect.getgeneratorstate(g) == inspect.GEN_SUSPENDED
    assert same(list(g), list(started(xs)))
    g2 = fast(xs)
    assert type(g2) is types.GeneratorType and same(list(g2), list(started(xs)))
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.eager_runs, st.records) == (1, 1, 0)


def test_returned_closure_is_rebuilt():
    # Functions the call creates (closures over its locals, lambdas) are made anew by the mock.
    def make(x, k):
        y = x * 2

        def inner(z):
            return z + y * k
        return inner

    fast = magpy.compile(make, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        f_e, f_c = make(x, 3), fast(x, 3)
        assert same(f_e(x), f_c(x)) and f_c.__qualname__ == f_e.__qualname__
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs) == (1, 1), st


# ============================================================================ 5. fault injection

class Counter(nn.Module):
    """Changes Python state besides its tensor work: the mock must do it exactly once too."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.log = []
        self.last = None

    def forward(self, x):
        y = self.lin(x).relu() * 2
        self.log.append("call")
        self.last = y
        return y

    @property
    def calls(self):
        return len(self.log)


def boom(*args, **kwargs):
    raise RuntimeError("injected fault")


def _record_failing_backend(gm, example_inputs):
    raise RuntimeError("injected fault")


def _runtime_failing_backend(gm, example_inputs):
    return boom


# stage -> (how to inject it, text the warning names).  Capture stages fail on the first call.
CAPTURE_FAULTS = {
    "refgraph rule": (lambda mp: mp.setitem(rules._RULES, "LOAD_ATTR", boom), "magpy.capture.refgraph.rules"),
    "opgraph _record": (lambda mp: mp.setattr(opgraph.OpRecorder, "_record", boom), "magpy.graphs.opgraph"),
    "codegen": (lambda mp: mp.setattr(record, "generate", boom), "codegen"),
    "compile_source": (lambda mp: mp.setattr(record, "compile_source", boom), "compile_source"),
    "graph finish": (lambda mp: mp.setattr(opgraph.OpRecorder, "finish", boom), "opgraph"),
    "setup": (lambda mp: mp.setattr(record, "_used_parameters", boom), "setting up"),
}


def _eager_twin(model):
    twin = Counter()
    twin.load_state_dict(model.state_dict())
    return twin


def _calls(fast, eager, x, n):
    for _ in range(n):
        assert same(fast(x), eager(x))
    assert fast.calls == eager.calls and same(fast.last, eager.last)


@pytest.mark.parametrize("stage", list(CAPTURE_FAULTS))
def test_capture_stage_fault_falls_back_once(stage, monkeypatch, magpy_config):
    inject, named = CAPTURE_FAULTS[stage]
    model = Counter()
    eager = _eager_twin(model)
    fast = magpy.compile(model, backend="eager")
    x = torch.randn(3, 4)
    inject(monkeypatch)
    with pytest.warns(RuntimeWarning) as caught:
        _calls(fast, eager, x, 1)
    msgs = [str(w.message) for w in caught if "magpy" in str(w.message)]
    assert len(msgs) == 1 and named in msgs[0] and "injected fault" in msgs[0], msgs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _calls(fast, eager, x, 2)   # eager from now on, without more warnings
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.records) == (1, 0, 2, 0)
    assert len(st.break_reasons) == 1 and named in st.break_reasons[0]


@pytest.mark.parametrize("stage", list(CAPTURE_FAULTS))
def test_capture_stage_fault_raises_when_asked(stage, monkeypatch, magpy_config):
    inject, named = CAPTURE_FAULTS[stage]
    magpy_config.on_capture_error = "raise"
    fast = magpy.compile(Counter(), backend="eager")
    inject(monkeypatch)
    with pytest.raises(magpy.CaptureError, match=named):
        fast(torch.randn(3, 4))


def test_backend_compile_fault_runs_the_graph_eagerly(magpy_config):
    # The backend has its own knob: the graph's own code runs instead, still as a mock.
    model = Counter()
    eager = _eager_twin(model)
    fast = magpy.compile(model, backend=_record_failing_backend)
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="_record_failing_backend.*injected fault"):
        _calls(fast, eager, x, 1)
    _calls(fast, eager, x, 2)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 2, 0)
    magpy_config.on_backend_error = "raise"
    with pytest.raises(magpy.BackendError, match="injected fault"):
        magpy.compile(Counter(), backend=_record_failing_backend)(x)


def _fail_guard(rec):
    rec.guard = rec.fast = boom


def _fail_mock(rec):
    rec.mock = boom


CALL_FAULTS = {
    "guard": (_fail_guard, "guard"),
    "mock": (_fail_mock, "mock"),
}


@pytest.mark.parametrize("stage", list(CALL_FAULTS) + ["compiled graph"])
def test_call_stage_fault_runs_eagerly_once(stage, magpy_config):
    # A record's guard or mock failing at call time: nothing had changed yet, so the call
    # runs eagerly -- exactly once (self.calls counts it) -- and so do later calls.
    model = Counter()
    eager = _eager_twin(model)
    backend = _runtime_failing_backend if stage == "compiled graph" else "eager"
    fast = magpy.compile(model, backend=backend)
    x = torch.randn(3, 4)
    _calls(fast, eager, x, 1)
    if stage in CALL_FAULTS:
        CALL_FAULTS[stage][0](cache_of(fast).records[0])
    named = CALL_FAULTS.get(stage, (None, "mock"))[1]
    with pytest.warns(RuntimeWarning) as caught:
        _calls(fast, eager, x, 1)
    msgs = [str(w.message) for w in caught if "magpy" in str(w.message)]
    assert len(msgs) == 1 and named in msgs[0] and "injected fault" in msgs[0], msgs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _calls(fast, eager, x, 2)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.records) == (1, 0, 3, 0), st
    assert named in st.break_reasons[-1]


@pytest.mark.parametrize("stage", list(CALL_FAULTS))
def test_call_stage_fault_raises_when_asked(stage, magpy_config):
    fast = magpy.compile(Counter(), backend="eager")
    x = torch.randn(3, 4)
    fast(x)
    CALL_FAULTS[stage][0](cache_of(fast).records[0])
    magpy_config.on_capture_error = "raise"
    with pytest.raises(magpy.CaptureError, match=CALL_FAULTS[stage][1]):
        fast(x)
    assert fast.calls == 1


def _bump(x, buf):
    buf.add_(1)
    return x * buf


def _graph_failing_after(n_ok, mutate_first):
    """A backend whose graph fails from its call number ``n_ok``, after or before it ran."""
    calls = []

    def backend(gm, example_inputs):
        def run(*inputs):
            calls.append(1)
            if len(calls) <= n_ok:
                return gm.forward(*inputs)
            if mutate_first:
                gm.forward(*inputs)
            raise RuntimeError("injected fault")
        return run
    return backend


def test_graph_failing_before_its_in_place_update_runs_eagerly_once():
    # buf is updated in place by the graph: its version counter shows the failed graph did
    # not touch it, so the eager rerun updates it exactly once.
    fast = magpy.compile(_bump, backend=_graph_failing_after(0, mutate_first=False))
    x, buf, buf_e = torch.randn(3), torch.zeros(3), torch.zeros(3)
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert same(fast(x, buf), _bump(x, buf_e))
        assert same(buf, buf_e)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 0, 1), st


def test_graph_failing_after_its_in_place_update_raises():
    # The hard case: the graph updated buf, then failed.  Running the call eagerly would add 1
    # twice; magpy says so rather than returning a result over a wrong state.
    fast = magpy.compile(_bump, backend=_graph_failing_after(0, mutate_first=True))
    x, buf = torch.randn(3), torch.zeros(3)
    fast(x, buf)
    with pytest.raises(magpy.CaptureError, match="partly updated"):
        fast(x, buf)
    assert same(buf, torch.full((3,), 2.0))   # updated by the failed graph, and only by it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same(fast(x, buf), x * 3)   # eager from now on
    assert magpy.stats(fast).records == 0


def test_mock_failing_in_its_in_place_updates_raises():
    fast = magpy.compile(Counter(), backend="eager")
    x = torch.randn(3, 4)
    fast(x)

    def half(env):
        raise codegen.MockCommitError() from RuntimeError("injected fault")
    cache_of(fast).records[0].mock = half
    with pytest.raises(magpy.CaptureError, match="partly updated"):
        fast(x)


def test_guard_with_a_name_error_is_a_failure_not_a_miss(monkeypatch):
    # A guard naming something its namespace lacks (the flaw of a value written by repr) must
    # not read as "no match" forever -- recording anew on every call -- but fall back once.
    checks = codegen.guard.GuardWriter.read_checks
    monkeypatch.setattr(codegen.guard.GuardWriter, "read_checks",
                        lambda self, node: checks(self, node) + ["np.float64(1.0) == 1.0"])
    model = Counter()
    eager = _eager_twin(model)
    fast = magpy.compile(model, backend="eager")
    x = torch.randn(3, 4)
    _calls(fast, eager, x, 1)
    with pytest.warns(RuntimeWarning, match="guard: NameError: name 'np' is not defined"):
        _calls(fast, eager, x, 2)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 0, 2), st


def test_mock_updates_come_after_everything_that_can_fail():
    ex = magpy.explain(Counter(), torch.randn(3, 4))
    lines = ex.mock_source.splitlines()
    graph = next(i for i, line in enumerate(lines) if "GRAPH0(" in line)
    store = next(i for i, line in enumerate(lines) if "['last'] = " in line)
    assert graph < lines.index("    try:") < store < lines.index("        raise COMMIT_FAILED from e")


# ============================================================================ 6. guards that can pass

class Named(nn.Module):
    def forward(self, x):
        return x + len(type(self).__name__) + len(self.__class__.__qualname__)


FORWARD_SCALE = 2.0


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * FORWARD_SCALE     # a global read by the forward: guarded

    @staticmethod
    def backward(ctx, g):
        return g * 5                 # deliberately not the forward's derivative


class UsesFunction(nn.Module):
    def forward(self, x):
        return Double.apply(x) + 1


class Helpers:
    scale = 3.0

    @staticmethod
    def twice(x):
        return x * 2

    @classmethod
    def scaled(cls, x):
        return x * cls.scale


class Sub(Helpers):
    pass


class UsesHelpers(nn.Module):
    def forward(self, x):
        return Sub.twice(x) + Helpers.scaled(x) + Sub.scaled(x) + len(Sub.__mro__)


@pytest.mark.parametrize("program", [Named, UsesHelpers])
def test_class_attribute_guards_pass_again(program):
    # cls.__name__ is not in cls.__dict__, a staticmethod is not the function it gives, a
    # classmethod is inherited: guards reading cls.__dict__[name] never passed, so every
    # identical call recorded anew.
    check_compiled(lambda: (program(), None), standard(x34), expect_graphs=1, expect_records=1)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_custom_autograd_function_hits_its_record(backend):
    # Double.apply is inherited: its guard read Double.__dict__['apply'] and every call
    # recorded anew.  Now Double.apply is one graph operation and the record is hit; what the
    # forward reads (a global) is guarded.
    def rescale(_):
        globals()["FORWARD_SCALE"] = 4.0

    try:
        # inductor traces the forward into its graph: without the guard the old scale would stay
        check_compiled(lambda: (UsesFunction(), None), standard(x34) + [after(rescale), again()],
                       backend=backend, expect_records=2, expect_graphs=2)
    finally:
        globals()["FORWARD_SCALE"] = 2.0


def test_class_attribute_changes_still_record_again():
    def rename(m):
        type(m).__name__ = "LongerName"

    def shadow_scale(m):
        Sub.scale = 5.0

    def cleanup(m):
        type(m).__name__ = "Named"

    class_named = type("Named", (Named,), {})
    try:
        check_compiled(lambda: _own(class_named()), standard(x34) + [after(rename), again()],
                       expect_records=2)
        check_compiled(lambda: _own(UsesHelpers()), standard(x34) + [after(shadow_scale), again()],
                       expect_records=2)
    finally:
        class_named.__name__ = "Named"
        del Sub.scale


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_autograd_function_gradients_after_hits(backend):
    # The graph calls Double.apply itself: its own backward gives the gradients.
    fast = magpy.compile(UsesFunction(), backend=backend, fullgraph=True)
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        fast(x).sum().backward()
        assert same(x.grad, torch.full((3,), 5.0))
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.records) == (1, 2, 0, 1)


@pytest.mark.magpy_rerecords
def test_rehit_check_finds_guards_that_cannot_pass(monkeypatch):
    # The suite-wide check (tests/conftest.py): a recording run that changed nothing must
    # leave a record the same call hits.  A call that changed what it read is exempt.
    checks = codegen.guard.GuardWriter.read_checks
    monkeypatch.setattr(codegen.guard.GuardWriter, "read_checks",
                        lambda self, node: checks(self, node) + ["False"])
    x = torch.randn(3, 4)
    with RehitCheck() as check:
        magpy.compile(Named(), backend="eager")(x)
        magpy.compile(Counter(), backend="eager")(x)   # appends to self.log: not identical again
    # (magpy finds it itself now, magpy.records.cache's settle: the record is not kept)
    assert len(check.problems) == 1 and check.problems[0].startswith("Named: a record fails its own checks")
