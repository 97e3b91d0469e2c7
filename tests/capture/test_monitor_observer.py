"""The observer interface, shadow slots, resuming from a frame state, and clear errors."""
import dis
import types

import pytest

import magpy.capture.monitor as monitor
from magpy.capture.monitor import bytecode


class Recorder(monitor.Observer):
    def __init__(self):
        self.instructions = []
        self.calls = []
        self.entered = []
        self.exceptions = []

    def on_instruction(self, frame, instruction, inputs, outputs):
        self.instructions.append((frame.code.co_name, instruction.opname, inputs, outputs))

    def on_call(self, frame, callee, args, kwargs, result, entered):
        self.calls.append((frame and frame.code.co_name, callee, args, kwargs, result, entered))

    def on_enter(self, frame):
        self.entered.append(frame.code.co_name)

    def on_exception(self, frame, exc):
        self.exceptions.append((frame.code.co_name, type(exc)))


def add(a, b):
    return a + b


def uses_calls(xs):
    total = add(xs[0], xs[1])
    return len(xs) + total


def test_instruction_events_report_inputs_and_outputs():
    rec = Recorder()
    assert monitor.Monitor([rec]).run(add, 2, 3) == 5
    ops = [(name, op) for name, op, _, _ in rec.instructions]
    # Two LOAD_FASTs, or 3.13's LOAD_FAST_LOAD_FAST: observed as dis shows them.
    loads = [("add", ins.opname) for ins in dis.get_instructions(add) if ins.opname.startswith("LOAD_FAST")]
    assert ops == [("add", "RESUME"), *loads, ("add", "BINARY_OP"), ("add", "RETURN_VALUE")]
    assert [out for _, op, _, out in rec.instructions if op.startswith("LOAD_FAST")] in (
        [(2,), (3,)], [(2, 3)])
    _, _, inputs, outputs = rec.instructions[ops.index(("add", "BINARY_OP"))]
    assert inputs == (2, 3) and outputs == (5,)
    assert rec.instructions[-1][2:] == ((5,), (5,))


def test_call_events_distinguish_entered_and_native():
    rec = Recorder()
    assert monitor.Monitor([rec]).run(uses_calls, [4, 5, 6]) == 12
    by_callee = {c[1]: c for c in rec.calls}
    assert by_callee[add][0] == "uses_calls" and by_callee[add][2] == (4, 5)
    assert by_callee[add][4] == 9 and by_callee[add][5] is True
    assert by_callee[len][5] is False and by_callee[len][4] == 3
    assert rec.entered == ["uses_calls", "add"]


def test_exception_events():
    def boom():
        return {}["missing"]

    def catches():
        try:
            boom()
        except KeyError:
            return "caught"

    rec = Recorder()
    assert monitor.Monitor([rec]).run(catches) == "caught"
    assert ("boom", KeyError) in rec.exceptions and ("catches", KeyError) in rec.exceptions


class Tagger(monitor.Observer):
    """Tags each LOAD_CONST result with its instruction offset; records shadows seen later."""

    def __init__(self):
        self.seen = {}

    def on_instruction(self, frame, instruction, inputs, outputs):
        if instruction.opname == "LOAD_CONST":
            frame.shadow_stack[-1] = ("const", frame.code.co_name, instruction.offset)
        elif instruction.opname == "RETURN_VALUE":
            self.seen[frame.code.co_name] = frame.ret_shadow


def passthrough(v):
    w = v
    return w


def two_equal_ints():
    x = 1
    y = 1
    a = passthrough(x)
    b = passthrough(y)
    return a, b


def test_shadows_follow_values_not_identity():
    tagger = Tagger()

    class Check(monitor.Observer):
        def __init__(self):
            self.stores = {}

        def on_instruction(self, frame, instruction, inputs, outputs):
            if frame.code.co_name == "two_equal_ints" and instruction.opname == "STORE_FAST":
                self.stores[instruction.argval] = frame.shadow_locals[instruction.arg]

    check = Check()
    assert monitor.Monitor([tagger, check]).run(two_equal_ints) == (1, 1)
    x_tag, y_tag = check.stores["x"], check.stores["y"]
    assert x_tag != y_tag  # the same small-int object, two different provenances
    # Through a callee's parameter, a local and its return, back to the call site:
    assert check.stores["a"] == x_tag and check.stores["b"] == y_tag


def inner(x):
    y = x * 2
    return y + 1


def outer(a):
    try:
        b = inner(a)
    except ZeroDivisionError:
        return "handled"
    return b * 10


def test_resume_a_call_chain_from_a_snapshot():
    snaps = []

    class Snapshot(monitor.Observer):
        def on_instruction(self, frame, instruction, inputs, outputs):
            if frame.code is inner.__code__ and instruction.opname == "BINARY_OP" and not snaps:
                snaps.append(frame.copy(back=frame.back.copy()))

    assert monitor.Monitor([Snapshot()]).run(outer, 4) == 90
    inner_state = snaps[0]
    outer_state = inner_state.back
    assert outer_state.code is outer.__code__ and inner_state.stack == [8]
    # A state edited before resuming behaves like the program would from there.
    edited = inner_state.copy(back=outer_state.copy())
    edited.stack[-1] = 100
    assert monitor.Monitor().resume([inner_state, outer_state]) == 90
    assert monitor.Monitor().resume([edited, edited.back]) == 1010


def test_resume_unwinds_exceptions_through_the_chain():
    snaps = []

    class Snapshot(monitor.Observer):
        def on_instruction(self, frame, instruction, inputs, outputs):
            if frame.code is inner.__code__ and not snaps:
                snaps.append(frame.back.copy())

    monitor.Monitor([Snapshot()]).run(outer, 1)
    waiting_outer = snaps[0]
    # A different callee state that raises: outer's handler around the call must catch it.
    ns = {}
    exec("def failing(x):\n    return 1 / (x - x)\n", ns)
    failing = monitor.Frame(ns["failing"].__code__, ns, locals=[3])
    assert monitor.Monitor().resume([failing, waiting_outer]) == "handled"


def test_frame_introspection_answers_like_cpython():
    import sys

    def where():
        f = sys._getframe()
        return f.f_code.co_name, f.f_lineno - f.f_code.co_firstlineno, isinstance(f, types.FrameType), \
            f.f_back.f_code.co_name, sorted(f.f_locals)

    def caller():
        return where()

    assert monitor.run(caller) == caller()


def test_keyword_arguments_named_like_runs_parameters():
    def f(fn, self):
        return fn + self
    assert monitor.run(f, fn=1, self=2) == 3
    assert monitor.Monitor().run(f, fn=1, self=2) == 3


def test_resume_with_an_observing_monitor():
    snaps = []

    class Snapshot(monitor.Observer):
        def on_instruction(self, frame, instruction, inputs, outputs):
            if frame.code is inner.__code__ and instruction.opname == "BINARY_OP" and not snaps:
                snaps.append(frame.copy(back=frame.back.copy()))

    monitor.Monitor([Snapshot()]).run(outer, 4)
    plain = snaps[0].copy(back=snaps[0].back.copy())
    plain.shadow_stack = plain.shadow_locals = None
    plain.back.shadow_stack = plain.back.shadow_locals = None
    rec = Recorder()
    assert monitor.Monitor([rec]).resume([plain, plain.back]) == 90
    assert rec.instructions[-1][1] == "RETURN_VALUE"


def test_errors_are_clear():
    with pytest.raises(TypeError, match="'int' object is not callable"):
        monitor.run(5)


def test_unsupported_python_version_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(bytecode, "SUPPORTED", False)
    with pytest.raises(monitor.UnsupportedPythonError, match="CPython 3.11"):
        monitor.run(add, 1, 2)


def test_call_policy_can_run_python_functions_natively():
    policy = monitor.shared_default_policy().copy()
    policy.run_natively(add)
    rec = Recorder()
    assert monitor.Monitor([rec], policy=policy).run(uses_calls, [1, 2]) == 5
    assert [c[5] for c in rec.calls if c[1] is add] == [False]
    assert "add" not in rec.entered
