"""Every opcode of the running CPython has a handler, and every handler really runs.

The static test walks ``dis.opmap``.  The dynamic test runs a set of programs, natively
and under the monitor (results compared), with an observer recording which opcodes
executed; together they must execute every opcode that has a handler.
"""
import copy
import dis
import sys

import pytest

import magpy.monitor as monitor
from magpy.monitor import bytecode
from tests.differential import check
from tests.opcode_programs import PROGRAMS

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
