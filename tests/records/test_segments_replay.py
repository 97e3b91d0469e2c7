"""Segments: what the mock does when an eager step behaves differently on a later call.

A step's result that steers the call is checked (a failed check is a miss before anything
observable happened); a step that raises is the program's own exception: before any effect
the call runs again (and raises it itself, or handles it), after one it propagates from the
mock with grad mode as on entry, or where the program may handle it (an ``except``,
``finally`` or ``with`` covers the step) the monitor resumes there with it.  A step that
raises while recording ends the recording (the call runs eagerly).  Dynamic values that would be baked into
the record are refused.
"""
from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch

import magpy
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture


def _stats(c):
    s = magpy.stats(c)
    return s.monitor_runs, s.mock_runs, s.eager_runs


def sqrt_of_sum(x):
    y = x * 2
    r = math.sqrt(float(y.sum()))      # a step, then a derived step that may raise
    return y + 1, r


def test_a_derived_step_that_raises_later_runs_the_call_again():
    c = magpy.compile(sqrt_of_sum, backend="eager")
    for x in (torch.ones(3), torch.full((3,), 2.0)):
        out, r = c(x)
        ref, rr = sqrt_of_sum(x)
        assert torch.equal(out, ref) and r == rr
    assert _stats(c) == (1, 1, 0)
    with pytest.raises(ValueError, match="math domain error"):
        c(-torch.ones(3))                 # math.sqrt of a negative number, as eagerly
    assert _stats(c)[2] == 0              # the mock gave up before any effect; the monitor raised it
    out, r = c(torch.ones(3))
    assert torch.equal(out, sqrt_of_sum(torch.ones(3))[0])


def print_then_sqrt(x):
    y = x * 2
    print("sum", float(y.sum()))          # I/O: an effect that cannot be taken back
    with torch.no_grad():
        r = math.sqrt(float(y.sum()))     # raises for negative sums, inside no_grad
    return y + 1, r


def test_a_step_that_raises_after_an_effect_propagates_once():
    c = magpy.compile(print_then_sqrt, backend="eager")
    for x in (torch.ones(3), torch.full((3,), 2.0)):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            got = c(x)
        ref = print_then_sqrt(x)
        assert torch.equal(got[0], ref[0]) and got[1] == ref[1]
        assert out.getvalue().count("sum") == 1
    assert _stats(c) == (1, 1, 0)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(ValueError, match="math domain error"):
        c(-torch.ones(3))
    assert buf.getvalue() == "sum -6.0\n"          # printed once, not again by a re-run
    assert torch.is_grad_enabled()                 # the no_grad block was left, as eagerly
    # (the step raised inside the with block: the monitor resumed there with the exception,
    # so the block's __exit__ ran as eagerly; that rest of the call runs unrecorded)
    assert _stats(c) == (1, 1, 1)


def safe_float(x):
    y = x * 2
    try:
        v = float(y)                      # raises for more than one element
    except (RuntimeError, ValueError):
        v = -1.0
    return y + v


def test_a_step_that_raises_while_recording_ends_the_recording():
    c = magpy.compile(safe_float, backend="eager")
    x = torch.ones(3)
    assert torch.equal(c(x), safe_float(x)) and torch.equal(c(x), safe_float(x))
    s = magpy.stats(c)
    assert (s.monitor_runs, s.eager_runs) == (1, 1) and "Tensor.__float__" in s.break_reasons[0], s


def clear_then_log(x, log):
    log.clear()                           # the old entries are gone: nothing to guard about them
    h = x * 2
    log.append(float(h.sum()))
    return h


def test_a_cleared_log_is_not_guarded_by_its_old_contents():
    c = magpy.compile(clear_then_log, backend="eager")
    log_c, log_e = [1.5, 2.5], [1.5, 2.5]
    for i in range(4):
        x = torch.full((3,), float(i))
        assert torch.equal(c(x, log_c), clear_then_log(x, log_e)) and log_c == log_e
        log_c.append(0.25 * i)            # other old contents on every call
        log_e.append(0.25 * i)
    assert _stats(c) == (1, 3, 0)


def shift_in(x, log):
    log.insert(0, float(x.sum()))         # the old entries stay, after the new one
    del log[3:]
    return x + 1


def test_entries_a_rewritten_list_keeps_are_guarded():
    c = magpy.compile(shift_in, backend="eager")
    log_c, log_e = [1.0, 2.0], [1.0, 2.0]
    for i in range(4):
        x = torch.full((2,), float(i))
        assert torch.equal(c(x, log_c), shift_in(x, log_e)) and log_c == log_e
    assert magpy.stats(c).eager_runs == 0


def print_float_branch(x):
    y = x * 2
    print("start")
    v = float(y.sum())
    if y.mean() > 0:
        return y + v
    return y - 1


def test_explain_lists_graphs_steps_and_checks_in_order():
    with contextlib.redirect_stdout(io.StringIO()):
        text = str(magpy.explain(print_float_branch, torch.ones(3)))
    seg = text[text.index("segments (what the mock runs, in order):"):text.index("generated code:")]
    lines = [line.strip() for line in seg.splitlines()[1:]]
    kinds = [line.split()[0] + (" " + line.split()[1] if line.startswith("step") else "") for line in lines]
    # The float is computed by graph 1 and made in Python only for the resume point.
    assert kinds == ["graph", "step e0", "graph", "step e2", "step e1", "check", "graph"], lines
    assert "print" in lines[1] and "Tensor.__bool__" in lines[3] and "Tensor.__float__" in lines[4]
    # After the print, a failed check resumes the monitor at the branch's line.
    line = print_float_branch.__code__.co_firstlineno + 4
    assert f"resume the monitor at {__file__}:{line} in print_float_branch" in lines[5], lines[5]


def _floats(x):
    for row in x:
        yield float(row.sum())


def sort_floats(x):
    return x * 2, sorted(_floats(x))          # sorted compares the yielded values natively


def max_float(x):
    return x + 1, max(_floats(x))


def loop_floats(x):
    total = []
    for v in _floats(x):                      # a monitored loop receives them by identity
        total.append(v)
    return x - 1, total


@pytest.mark.parametrize("fn", [sort_floats, max_float])
def test_a_native_consuming_yielded_eager_values_runs_eagerly(fn):
    c = magpy.compile(fn, backend="eager")
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(3, 2)
        got, want = c(x), fn(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], seed
    assert "yields a value computed eagerly to a native" in magpy.stats(c).break_reasons[0]


def test_a_loop_over_yielded_eager_values_replays():
    c = magpy.compile(loop_floats, backend="eager")
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(3, 2)
        got, want = c(x), loop_floats(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], seed
    assert _stats(c) == (1, 3, 0)


HISTORY: list = []


def dict_logging(x):
    y = x * 2
    HISTORY.append({"loss": float(y.sum()), "max": float(y.max())})   # eager values as dict values
    extra = {}
    extra["min"] = float(y.min())
    return y + 1, extra


def test_eager_values_in_dicts_replay():
    c = magpy.compile(dict_logging, backend="eager")
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(3)
        got = c(x)
        logged = HISTORY[-1]
        want = dict_logging(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1] and logged == HISTORY[-1], seed
    assert _stats(c) == (1, 3, 0)
    HISTORY.clear()


def key_from_eager(x, table):
    return x * table[int(x.sum() > 0)]        # a small int used as a key: checked, not baked


def test_a_small_int_from_a_step_used_as_a_key_is_checked():
    c = magpy.compile(key_from_eager, backend="eager")
    table = [0.5, 3.0]
    for v in (1.0, -1.0, 2.0, -2.0, 1.0):
        x = torch.full((2,), v)
        assert torch.equal(c(x, table), key_from_eager(x, table)), v
    assert _stats(c) == (2, 3, 0)


def _fill(lst, v):                 # stands for a native that changes its argument
    lst.append(v * 2)


magpy.annotate(_fill, pure=False)


def fills_a_new_list(x):
    out = []
    _fill(out, float(x.sum()))
    return x + 1, out


def test_an_impure_native_given_a_mutable_object_runs_the_call_eagerly():
    # The step would get a copy, and the list would be rebuilt with this run's values.
    c = magpy.compile(fills_a_new_list, backend="eager")
    for v in (1.0, 2.0, 3.0):
        x = torch.full((2,), v)
        got, want = c(x), fills_a_new_list(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], (v, got[1], want[1])
    assert "given a mutable object it may change" in magpy.stats(c).break_reasons[0]


@magpy.disable
def _report(step, value):
    print(f"step {step}: {value:.2f}")     # runs as it is, on every call
    return value * 10


def uses_a_disabled_helper(x):
    y = x * 2
    scaled = _report(1, float(y.sum()))
    return y + 1, scaled


def test_a_disabled_function_runs_as_an_eager_step():
    c = magpy.compile(uses_a_disabled_helper, backend="eager")
    for v in (1.0, 2.0, 3.0):
        x = torch.full((2,), v)
        out_c, out_e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out_c):
            got = c(x)
        with contextlib.redirect_stdout(out_e):
            want = uses_a_disabled_helper(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1] and out_c.getvalue() == out_e.getvalue()
    assert _stats(c) == (1, 2, 0)
    assert any("_report" in reason for reason in magpy.stats(c).breaks)


def test_an_exception_from_a_step_shows_the_programs_line():
    import traceback
    c = magpy.compile(print_then_sqrt, backend="eager")
    with contextlib.redirect_stdout(io.StringIO()):
        c(torch.ones(3))
        c(torch.ones(3))
        with pytest.raises(ValueError) as ei:
            c(-torch.ones(3))
    entries = traceback.extract_tb(ei.value.__traceback__)
    line = print_then_sqrt.__code__.co_firstlineno + 4       # r = math.sqrt(float(y.sum()))
    assert any(e.filename == __file__ and e.name == "print_then_sqrt" and e.lineno == line for e in entries), \
        [(e.filename, e.name, e.lineno) for e in entries]
    assert not any("<magpy" in e.filename for e in entries)


def with_a_disabled_block(x):
    y = x * 2
    with magpy.disable():
        z = y + 1
    return z


def test_a_disabled_block_runs_the_call_eagerly():
    c = magpy.compile(with_a_disabled_block, backend="eager")
    for v in (1.0, 2.0):
        x = torch.full((2,), v)
        assert torch.equal(c(x), with_a_disabled_block(x))
    st = magpy.stats(c)
    assert (st.monitor_runs, st.eager_runs) == (1, 1) and "magpy.disable() block" in st.break_reasons[0], st


@magpy.disable
def _passthrough(v):
    print("got", v)                       # an effect, then its argument back
    return v


def returns_its_argument(x):
    w = _passthrough(float(x.sum()))
    return x * 2, w


def test_a_step_that_gives_back_an_eager_value():
    c = magpy.compile(returns_its_argument, backend="eager")
    for v in (1.0, 2.0, 3.0):
        x = torch.full((2,), v)
        with contextlib.redirect_stdout(io.StringIO()):
            got, want = c(x), returns_its_argument(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1]
    assert _stats(c) == (1, 2, 0)


def scale_by_own_sum(x):
    s = float(x.sum())
    return x * s - s / 2, (x > 0).long() * s      # float tensor: an input; int tensor: checked


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_an_eager_float_feeding_tensor_arithmetic_is_a_graph_input(backend):
    c = magpy.compile(scale_by_own_sum, backend=backend)
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(5)
        got, want = c(x), scale_by_own_sum(x)
        assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype
        assert torch.allclose(got[0], want[0]) and torch.allclose(got[1], want[1]), seed
    st = magpy.stats(c)
    assert st.eager_runs == 0 and st.monitor_runs == 4, st   # the int-tensor product is checked


def float_only(x):
    s = float(x.sum())
    return (x - s) / (s + 1.0)


def test_a_changing_float_replays_one_record():
    c = magpy.compile(float_only, backend="eager")
    for seed in range(5):
        torch.manual_seed(seed)
        x = torch.rand(4) + 0.1
        assert torch.equal(c(x), float_only(x)), seed
    assert _stats(c) == (1, 4, 0)
    # s and ``s + 1.0`` (Python arithmetic on it) are computed by the graph: no step.
    assert c._magpy_cache.records[0].steps == ()
