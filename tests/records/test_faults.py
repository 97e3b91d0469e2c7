"""Every exception attributed, and faults survived (issue 29).

A fault injected into each stage of magpy's machinery (an observer of the recording, the
RefGraph's update, the operator recorder, guard and mock code generation, the backend, the
mock at run time) is magpy's: by default the call gives eager's result and one warning
names the cause; with ``on_capture_error="raise"`` (``on_backend_error`` for a backend) the
caller gets a :class:`CaptureError` (:class:`BackendError`) with the cause chained.  The
program's own exceptions come out unchanged.  After a fault (a backend that raises or
hangs, ``KeyboardInterrupt`` or ``MemoryError`` in a recording or a compile) the callable
still gives eager's results and the process's state is as it was."""
import threading
import traceback
import warnings

import pytest
import torch

import magpy
from magpy.backends import background
from magpy.capture.refgraph import natives
from magpy.errors import BackendError, CaptureError
from magpy.graphs import controlflow, opgraph
from magpy.records import record, report
from tests.capture.test_process_state import process_state
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture

pytestmark = pytest.mark.magpy_rerecords   # (failed recordings leave no record, by design)


def program(x, w):
    y = torch.relu(x @ w) + 1
    try:
        return y * 2
    except Exception:  # noqa: BLE001 - must never catch magpy's own failure
        return "caught"


def args():
    return torch.randn(4, 3), torch.randn(3, 5)


class Injected(RuntimeError):
    """The fault the tests inject into magpy."""


def fault(exc=None):
    """A function raising ``exc`` (an ``Injected`` by default) whatever it is given."""
    def raising(*a, **k):
        raise exc if exc is not None else Injected("injected fault")
    return raising


def failing_compile_source(name):
    real = record.compile_source

    def compile_source(src, namespace, fn_name, *rest):
        if fn_name == name:
            raise Injected("injected fault")
        return real(src, namespace, fn_name, *rest)
    return compile_source


# stage -> how to inject the fault there (a monkeypatch target and value): an observer of the
# recording, the RefGraph's update, the operator recorder, guard / mock / all code generation,
# the cache's bookkeeping after a recording
RECORDING_STAGES = {
    "observer": (controlflow.Branches, "on_instruction", fault()),
    "refgraph_update": (natives.NativeCalls, "returned", fault()),
    "opgraph_recording": (opgraph.OpRecorder, "_record_result", fault()),
    "guard_codegen": (record, "compile_source", failing_compile_source("guard")),
    "mock_codegen": (record, "compile_source", failing_compile_source("mock")),
    "codegen": (record, "generate", fault()),
    "cache_bookkeeping": (report.CacheReport, "count_record", fault()),
}


def causes(e):
    while e is not None:
        yield e
        e = e.__cause__


@pytest.mark.parametrize("stage", RECORDING_STAGES)
def test_a_fault_in_a_recording_stage_falls_back_with_a_warning(stage, monkeypatch):
    monkeypatch.setattr(*RECORDING_STAGES[stage])
    before = process_state()
    c = magpy.compile(program, backend="eager")
    x, w = args()
    with pytest.warns(RuntimeWarning, match="injected fault"):
        got = c(x, w)
    assert torch.equal(got, program(x, w))
    assert torch.equal(c(x, w), program(x, w)) and process_state() == before


@pytest.mark.parametrize("stage", RECORDING_STAGES)
def test_a_fault_in_a_recording_stage_raises_capture_error_when_asked(stage, monkeypatch):
    monkeypatch.setattr(*RECORDING_STAGES[stage])
    monkeypatch.setattr(magpy.config, "on_capture_error", "raise")
    before = process_state()
    c = magpy.compile(program, backend="eager")
    with pytest.raises(CaptureError) as info:
        c(*args())
    assert any(isinstance(e, Injected) for e in causes(info.value))
    assert process_state() == before


def test_a_fault_in_the_mock_falls_back_or_raises(monkeypatch):
    c = magpy.compile(program, backend="eager")
    x, w = args()
    c(x, w)
    (rec,) = c._magpy_cache.records
    rec.mock = fault()
    with pytest.warns(RuntimeWarning, match="injected fault"):
        assert torch.equal(c(x, w), program(x, w))
    c = magpy.compile(program, backend="eager")
    c(x, w)
    c._magpy_cache.records[0].mock = fault()
    monkeypatch.setattr(magpy.config, "on_capture_error", "raise")
    with pytest.raises(CaptureError) as info:
        c(x, w)
    assert any(isinstance(e, Injected) for e in causes(info.value))


def test_a_backend_that_raises_falls_back_or_raises(monkeypatch):
    before = process_state()
    c = magpy.compile(program, backend=fault())
    x, w = args()
    with pytest.warns(RuntimeWarning, match="injected fault"):
        assert torch.equal(c(x, w), program(x, w))
    assert torch.equal(c(x, w), program(x, w)) and process_state() == before
    monkeypatch.setattr(magpy.config, "on_backend_error", "raise")
    c = magpy.compile(program, backend=fault())
    with pytest.raises(BackendError) as info:
        c(x, w)
    assert any(isinstance(e, Injected) for e in causes(info.value))


# ----------------------------------------------------------------------------- the program's own

def raises_when_recorded(x, n):
    y = x * 2
    if n > 2:
        raise ValueError(f"n is {n}")
    return y


def raises_when_reused(x):
    import math
    v = x.sum().item()
    return x * math.log(v)


def raises_after_a_break(x, n):
    print("a graph break", n)
    if n > 2:
        raise ValueError(f"n is {n}")
    return x + n


CALLS = {   # program -> (calls that succeed first, the call that raises)
    raises_when_recorded: ([], (torch.ones(3), 3)),
    raises_when_reused: ([(torch.ones(3),)] * 2, (-torch.ones(3),)),
    raises_after_a_break: ([(torch.ones(3), 1)] * 2, (torch.ones(3), 3)),
}


@pytest.mark.parametrize("prog", CALLS, ids=lambda p: p.__name__)
def test_the_programs_exception_comes_out_unchanged(prog):
    c = magpy.compile(prog, backend="eager")
    first, raising = CALLS[prog]
    for a in first:
        assert torch.equal(c(*a), prog(*a))
    with pytest.raises(ValueError) as want:
        prog(*raising)
    with pytest.raises(ValueError) as got:
        c(*raising)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
    frames = traceback.extract_tb(got.value.__traceback__)
    assert frames[-1].name == prog.__name__ and frames[-1].line == traceback.extract_tb(want.tb)[-1].line
    assert not any("/magpy/monitor/" in f.filename for f in frames)


def test_the_program_cannot_catch_magpys_own_failure(monkeypatch):
    # The program's ``except Exception`` must not see an observer's failure.
    monkeypatch.setattr(controlflow.Branches, "on_instruction", fault())
    c = magpy.compile(program, backend="eager")
    x, w = args()
    with pytest.warns(RuntimeWarning, match="injected fault"):
        got = c(x, w)
    assert not isinstance(got, str) and torch.equal(got, program(x, w))


# ----------------------------------------------------------------------------- faults survived

def once(exc, real):
    """``real``, except that its first call raises ``exc``."""
    calls = []

    def patched(*a, **k):
        if not calls:
            calls.append(1)
            raise exc
        return real(*a, **k)
    return patched


def test_keyboard_interrupt_in_a_recording_reaches_the_caller_then_all_is_well(monkeypatch):
    monkeypatch.setattr(controlflow.Branches, "on_instruction",
                        once(KeyboardInterrupt(), controlflow.Branches.on_instruction))
    before = process_state()
    c = magpy.compile(program, backend="eager")
    x, w = args()
    with torch.no_grad():
        with pytest.raises(KeyboardInterrupt):
            c(x, w)
        assert not torch.is_grad_enabled()
    assert process_state() == before
    for _ in range(2):
        assert torch.equal(c(x, w), program(x, w))
    assert magpy.stats(c).records == 1 and process_state() == before


def test_memory_error_in_a_recording_falls_back(monkeypatch):
    monkeypatch.setattr(controlflow.Branches, "on_instruction", fault(MemoryError("injected fault")))
    before = process_state()
    c = magpy.compile(program, backend="eager")
    x, w = args()
    with pytest.warns(RuntimeWarning, match="MemoryError: injected fault"):
        assert torch.equal(c(x, w), program(x, w))
    assert torch.equal(c(x, w), program(x, w)) and process_state() == before


def test_keyboard_interrupt_in_a_compile_reaches_the_caller_then_all_is_well():
    backend = once(KeyboardInterrupt(), lambda gm, example: gm.forward)
    before = process_state()
    c = magpy.compile(program, backend=backend)
    x, w = args()
    with pytest.raises(KeyboardInterrupt):
        c(x, w)
    assert process_state() == before
    for _ in range(3):
        assert torch.equal(c(x, w), program(x, w))
    assert process_state() == before


def test_memory_error_in_a_compile_runs_the_graph_eagerly():
    c = magpy.compile(program, backend=fault(MemoryError("injected fault")))
    x, w = args()
    with pytest.warns(RuntimeWarning, match="MemoryError: injected fault"):
        assert torch.equal(c(x, w), program(x, w))
    assert torch.equal(c(x, w), program(x, w))


def background_calls(c, x, w, n=3):
    for _ in range(n):
        assert torch.equal(c(x, w), program(x, w))


def test_keyboard_interrupt_in_a_background_compile_is_the_backends_failure(monkeypatch):
    monkeypatch.setattr(magpy.config, "background_compile", True)
    monkeypatch.setattr(magpy.config, "autopilot", False)
    before = process_state()
    c = magpy.compile(program, backend=fault(KeyboardInterrupt()))
    x, w = args()
    background_calls(c, x, w, 2)            # the first reuse starts the compile
    assert magpy.synchronize(60)
    with pytest.warns(RuntimeWarning, match="interrupted by KeyboardInterrupt"):
        background_calls(c, x, w)
    assert process_state() == before


def test_a_background_compile_that_hangs_is_given_up(monkeypatch):
    monkeypatch.setattr(magpy.config, "background_compile", True)
    monkeypatch.setattr(magpy.config, "autopilot", False)
    monkeypatch.setattr(magpy.config, "compile_timeout", 0.2)
    gate, entered = threading.Event(), threading.Event()

    def hangs(gm, example):
        entered.set()
        gate.wait(60)
        return gm.forward

    before = process_state()
    c = magpy.compile(program, backend=hangs)
    x, w = args()
    try:
        background_calls(c, x, w, 2)
        assert entered.wait(60)
        assert magpy.synchronize(30)        # does not wait for the hung compile
        with pytest.warns(RuntimeWarning, match="compile_timeout"):
            background_calls(c, x, w)
        # A compile in the calling thread waits for the stuck worker at most the timeout.
        monkeypatch.setattr(magpy.config, "background_compile", False)
        other = magpy.compile(program, backend=lambda gm, example: gm.forward)
        with pytest.warns(RuntimeWarning, match="compile_timeout"):
            background_calls(other, x, w)
    finally:
        gate.set()
        background.submit(lambda: None).result(60)   # the worker is free again
    assert process_state() == before
    background_calls(c, x, w)


def test_compile_timeout_is_checked():
    with pytest.raises(ValueError, match="compile_timeout"):
        magpy.config.compile_timeout = 0
    with pytest.raises(ValueError, match="compile_timeout"):
        magpy.config.compile_timeout = "1"
    assert magpy.config.compile_timeout > 0


def test_the_worker_waits_for_no_compile_queued_behind_a_hung_one(monkeypatch):
    monkeypatch.setattr(magpy.config, "compile_timeout", 0.2)
    gate = threading.Event()
    hung = background.submit(lambda: gate.wait(60))
    queued = background.submit(lambda: "never run")
    try:
        assert magpy.synchronize(30)
        assert isinstance(hung.exception(), TimeoutError) and isinstance(queued.exception(), TimeoutError)
    finally:
        gate.set()
        background.submit(lambda: None).result(60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert background.submit(lambda: 7).result(60) == 7


def scaled(x, n, scale, name):
    out = x
    for _ in range(n):
        out = out * scale
    if name == "neg":
        out = -out
    return out


def test_issue_29s_scalar_arguments_give_eagers_results_on_every_call():
    # Once raised magpy's own KeyError (torch.fx's node_copy, in a loop's recording) as if the
    # program's ``for`` line had: now eager's result on every call, whatever magpy records.
    c = magpy.compile(scaled, backend="eager")
    x = torch.randn(3)
    calls = [(x, 2, 0.5, "pos"), (x, 3, 0.5, "pos"), (x, 3, 2.0, "pos"), (x, 4, 2.0, "neg"),
             (x, 2, 0.5, "neg"), (x, 3, 2.0, "pos")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (a magpy failure falls back with a warning)
        for a in calls:
            assert torch.equal(c(*a), scaled(*a))
