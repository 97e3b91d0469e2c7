"""An identical call never records again (issue 42): the invariant, and the plan when a
record breaks it.

A record whose own checks fail on a call like the one it was recorded from would make every
such call a recording (a monitor run costs ~100x the eager call).  ``RecordCache.settle``
finds it where it happens:

- the recording of a call repeats a record the call missed (same guard, mock, graphs and
  constants): a check of that record's mock fails on such calls.  The record becomes
  unstable: a call that it and the other records miss runs eagerly instead of recording;
- a record's guard fails on the very call it was recorded from (which changed nothing the
  guard reads): the callable records no more; its records still serve the calls they cover.

Either way one ``UnstableRecordWarning`` says which check, and ``magpy.stats`` counts the
eager runs.  The idioms that broke it (``torch._assert`` on metadata, the recorder's own mode
seen by the program) are fixed at their causes (tests/records/test_checks_as_guards.py); these tests
break a record on purpose to check the plan.
"""
import pytest
import torch

import magpy
from magpy.records import cache, record
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture: magpy.reset() before each test

# (records broken on purpose: the suite's own check of the invariant would report them)
pytestmark = pytest.mark.magpy_rerecords


def _program(x):
    return torch.relu(x) * 2


def _calls(compiled, n, x):
    return [compiled(x) for _ in range(n)]


def _stats(compiled):
    st = magpy.stats(compiled)
    return st.monitor_runs, st.mock_runs, st.eager_runs, st.records


def _missing(original):
    """``compile_source`` whose mocks miss every call: a check of their own that always fails."""
    def compile_source(src, ns, name, tag):
        if name == "mock":
            src = src.replace("def mock(env):\n", "def mock(env):\n    if env is not None: return MISS\n", 1)
        return original(src, ns, name, tag)
    return compile_source


@pytest.fixture
def failing_mocks(monkeypatch):
    """Every mock made from now on misses every call."""
    monkeypatch.setattr(record, "compile_source", _missing(record.compile_source))


def test_a_mock_that_misses_its_own_call_settles_on_eager(failing_mocks):
    compiled = magpy.compile(_program, backend="eager")
    x = torch.randn(4)
    compiled(x)
    (record_,) = compiled._magpy_cache.records
    with pytest.warns(magpy.UnstableRecordWarning, match="a check of the mock failed"):
        outs = _calls(compiled, 2, x)
    # the second call recorded the same record again: not kept; the third ran eagerly
    assert _stats(compiled) == (2, 0, 1, 1)
    outs += _calls(compiled, 3, x)
    assert all(torch.equal(o, _program(x)) for o in outs)
    assert _stats(compiled) == (2, 0, 4, 1)
    assert record_.unstable is not None


def test_other_records_stay_compiled(monkeypatch):
    # Another input's record keeps running compiled.
    compiled = magpy.compile(_program, backend="eager")
    x, y = torch.randn(4), torch.randn(2, 3)
    compiled(y)
    monkeypatch.setattr(record, "compile_source", _missing(record.compile_source))
    compiled(x)
    with pytest.warns(magpy.UnstableRecordWarning):
        _calls(compiled, 2, x)
    outs = _calls(compiled, 3, y)
    assert all(torch.equal(o, _program(y)) for o in outs)
    st = magpy.stats(compiled)
    assert (st.records, st.mock_runs, st.eager_runs) == (2, 3, 1), st


def test_a_guard_that_fails_on_its_own_call_stops_recording(monkeypatch):
    def capture_failing_guard(*args, **kwargs):
        result, rec = capture(*args, **kwargs)
        rec.guard = lambda a, k: None
        return result, rec

    capture = cache.capture
    monkeypatch.setattr(cache, "capture", capture_failing_guard)
    compiled = magpy.compile(_program, backend="eager")
    x = torch.randn(4)
    with pytest.warns(magpy.UnstableRecordWarning, match="its guard fails on the call it was recorded from"):
        outs = _calls(compiled, 4, x)
    assert all(torch.equal(o, _program(x)) for o in outs)
    assert _stats(compiled) == (1, 0, 3, 0)
    assert "its guard fails on the call it was recorded from" in magpy.stats(compiled).break_reasons[0]


def test_records_that_differ_in_a_constant_are_not_repeats():
    # A value the eager step gives steers the call: each value is a record of its own, not
    # a broken check of the first (the invariant must not take it for one).
    import random

    def program(x):
        return x * (2 if random.random() < 0.5 else 3)

    compiled = magpy.compile(program, backend="eager")
    random.seed(0)
    for _ in range(12):
        compiled(torch.ones(2))
    st = magpy.stats(compiled)
    assert st.eager_runs == 0 and st.monitor_runs <= 3, st
