"""Every opcode of the running CPython has a handler, and every handler really runs.

The static test walks ``dis.opmap``.  The dynamic test runs a set of programs, natively
and under the monitor (results compared), with an observer recording which opcodes
executed; together they must execute every opcode that has a handler.
"""
import copy
import dis
import types

import pytest

import magpy.capture.monitor as monitor
from magpy.capture.monitor import bytecode
from tests.capture.opcode_programs import PROGRAMS
from tests.harness.differential import check

pytestmark = pytest.mark.skipif(not bytecode.SUPPORTED, reason="an interpreter the monitor runs")


def test_every_opcode_has_a_handler_or_a_reason():
    missing = [name for name in dis.opmap
               if name not in bytecode.HANDLERS and name not in bytecode.NEVER_EXECUTED]
    assert missing == []
    for name, reason in bytecode.NEVER_EXECUTED.items():
        assert name in dis.opmap and len(reason) > 20


class OpcodeRecorder(monitor.Observer):
    def __init__(self):
        self.seen = set()
        self.forms = set()   # observed names: the forms an argument selects (bytecode.FORMS)

    def on_instruction(self, frame, instruction, inputs, outputs):
        # Observers see some instructions under another name (bytecode.observed); the opcode
        # is the real one.
        self.seen.add(dis.opname[instruction.opcode])
        self.forms.add(instruction.opname)

    def on_exception(self, frame, exc):
        # The instruction that raised never completes, but it did execute.
        ins = frame.info.instructions[frame.lasti]
        self.seen.add(dis.opname[ins.opcode])


@pytest.mark.parametrize("fn,args", PROGRAMS, ids=[f"{f.__name__}{i}" for i, (f, _) in enumerate(PROGRAMS)])
def test_program_matches_native(fn, args):
    check(lambda: (fn, copy.deepcopy(args), {}))


def test_every_handled_opcode_executes():
    recorder = OpcodeRecorder()
    m = monitor.Monitor([recorder])
    for fn, args in PROGRAMS:
        try:
            m.run(fn, *copy.deepcopy(args))
        except Exception:  # noqa: BLE001 - programs that raise on purpose
            pass
    # PRINT_EXPR's output goes to sys.displayhook; it ran inside exec_module_code.
    never_ran = sorted(set(bytecode.HANDLERS) - recorder.seen - {"EXTENDED_ARG"})
    assert never_ran == []
    assert sorted(set(bytecode.FORMS) - recorder.forms) == []


def _assembled(ops, consts=(None,), names=(), nargs=0):
    """A function whose body is ``ops``, as CPython would run it natively."""
    from magpy.capture.monitor import nativeops

    def template(a=None):  # only its code object is used
        return a
    code = template.__code__.replace(
        co_code=nativeops.assemble(ops), co_consts=consts, co_names=names, co_argcount=nargs,
        co_nlocals=1, co_varnames=("a",), co_stacksize=8, co_linetable=b"", co_exceptiontable=b"")
    return types.FunctionType(code, {"__builtins__": __builtins__})


def _identity(a):
    return a


def _closure_code():
    x = 7
    return (lambda: x).__code__


# 3.13's instructions that decode joins with their neighbours (bytecode.decode), each on its
# own: a NOP keeps the compiler's neighbour apart, so the instruction's own handler runs.
APART = {
    "to_bool": (lambda: _assembled([("RESUME", 0), ("LOAD_FAST", 0), ("TO_BOOL", 0), ("RETURN_VALUE", 0)],
                                   nargs=1), ([0, 1],)),
    "call_kw": (lambda: _assembled([("RESUME", 0), ("LOAD_GLOBAL", 1), ("LOAD_CONST", 0), ("LOAD_CONST", 1),
                                    ("NOP", 0), ("CALL_KW", 1), ("RETURN_VALUE", 0)],
                                   consts=(2, ("k",)), names=("dict",)), ()),
    "set_function_attribute": (lambda: _assembled(
        [("RESUME", 0), ("LOAD_CONST", 0), ("LOAD_CONST", 1), ("MAKE_FUNCTION", 0), ("NOP", 0),
         ("SET_FUNCTION_ATTRIBUTE", 1), ("PUSH_NULL", 0), ("CALL", 0), ("RETURN_VALUE", 0)],
        consts=((5,), _identity.__code__)), ()),
    "set_function_closure": (lambda: _assembled(
        [("RESUME", 0), ("LOAD_CONST", 0), ("LOAD_CONST", 1), ("MAKE_FUNCTION", 0), ("NOP", 0),
         ("SET_FUNCTION_ATTRIBUTE", 8), ("PUSH_NULL", 0), ("CALL", 0), ("RETURN_VALUE", 0)],
        consts=((types.CellType(7),), _closure_code())), ()),
}

if "SET_FUNCTION_ATTRIBUTE" in dis.opmap:   # (3.13)
    @pytest.mark.parametrize("name", APART)
    def test_joined_instructions_alone_match_native(name):
        make, args = APART[name]
        check(lambda: (make(), list(args), {}))
