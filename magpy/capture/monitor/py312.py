"""CPython 3.12 bytecode: what 3.12 does differently from the versions around it, its argument
decoding, the names observers see its instructions under, and the version facts the rest of
magpy reads through ``magpy.capture.monitor.bytecode``.

Handlers whose semantics 3.12 shares with other versions live in :mod:`magpy.capture.monitor.opcodes`
(3.12's new instructions too: 3.13 keeps them).  An instruction whose argument selects the
operation (``LOAD_ATTR``'s method bit, ``LOAD_SUPER_ATTR``, ``CALL_INTRINSIC_1/2``) is decoded
once to the handler of its form.  Semantics follow CPython 3.12's ``Python/bytecodes.c``.
"""
import dis

from magpy.capture.monitor import opcodes as op
from magpy.capture.monitor.protocols import NULL

NEVER_EXECUTED = {
    **op.never_executed_since_312(),
    "END_FOR": ("FOR_ITER jumps past it when its iterator is exhausted (as CPython's FOR_ITER does); only "
                "a specialized FOR_ITER_GEN's returning generator lands on it, and the monitor never "
                "specializes"),
}

INTRINSICS = op.Intrinsics(op.INTRINSICS_1_312, op.INTRINSICS_2_312)   # CPython 3.12's numbering


def _load_super_method(f, arg):
    # LOAD_SUPER_ATTR with the method bit: NULL then the bound attribute is the same call
    # as CPython's (unbound method, self).
    name, with_args = arg
    s = f.stack
    attr = f.monitor.load_attr(op.super_of(f, with_args), name)
    s.append(NULL)
    s.append(attr)


# --------------------------------------------------------------------------- decoding
def _load_attr(ins, code):
    method = ins.arg & 1
    shown = ins._replace(opname="LOAD_METHOD" if method else ins.opname, arg=ins.arg >> 1)
    return [(shown, op.LOAD_METHOD if method else op.LOAD_ATTR, code.co_names[ins.arg >> 1])]


def _load_super_attr(ins, code):
    arg = (code.co_names[ins.arg >> 2], ins.arg & 2)
    return [(ins, _load_super_method if ins.arg & 1 else op.LOAD_SUPER_ATTR, arg)]


def _for_iter_exit(ins, code):
    # The target is the loop's END_FOR; an exhausted iterator continues after it.
    return ins.argval // 2 + 1


def observed(ins: dis.Instruction) -> dis.Instruction:
    """The instruction as observers see it: under the name (and argument) of the 3.11
    instruction with the same stack behaviour where there is one, so the rules above the
    monitor speak one vocabulary.  ``opcode`` stays the real one."""
    if ins.opname == "COMPARE_OP":
        return ins._replace(arg=ins.arg >> 4)
    renamed = op.OBSERVED_AS_311.get(ins.opname)
    return ins if renamed is None else ins._replace(opname=renamed)


HANDLERS = op.handler_table(globals(), NEVER_EXECUTED)
decode = op.decoder(
    HANDLERS,
    op.arg_decoders(RETURN_CONST=op.const_arg, FOR_ITER=_for_iter_exit,
                    COMPARE_OP=lambda ins, code: ins.arg >> 4),
    {"LOAD_ATTR": _load_attr, "LOAD_SUPER_ATTR": _load_super_attr,
     "CALL_INTRINSIC_1": INTRINSICS.select, "CALL_INTRINSIC_2": INTRINSICS.select},
    observed)

# The observed names of the forms an argument selects (each has its own handler).
FORMS = ("LOAD_METHOD", *INTRINSICS.forms())

# Control flow (magpy.graphs.controlflow): the conditional jumps an ``if`` compiles to, with the
# truth that makes them jump (observed names); 3.12 ends a ``while`` body with a forward
# conditional jump out and a JUMP_BACKWARD, so no conditional jump closes a loop.
BRANCH_JUMPS = {"POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_FORWARD_IF_TRUE": True}
LOOP_JUMPS = {}
EFFECT_OPS = op.EFFECT_OPS | {"STORE_SLICE", "INTRINSIC_IMPORT_STAR", "INTRINSIC_PRINT"}
# The instructions of a call after its arguments (a KW_NAMES may come first), and where the
# callable sits among its inputs.
CALL_SEQUENCE = ("CALL",)
call_layout = op.call_layout
# gen.throw() into a generator suspended in ``yield from``, when the sub-iterator raises:
# 3.12 throws that into the frame, where CLEANUP_THROW ends the SEND loop.
THROW_LEAVES_YIELD_FROM = False
# PEP 667 (3.13): frame.f_locals is a write-through proxy, locals() a new dict at every call.
LOCALS_PROXY = False
# gen.close() gives back what the generator returned on GeneratorExit (3.13), or None.
CLOSE_RETURNS_VALUE = False
# ma_version_tag: deprecated by 3.12 but still the global counter (pycore_dict_state.h) bumped
# on every change of every dict, its low bits kept for dict watchers.
TRUSTS_DICT_VERSION = True
# Attribute stores into an object always go through its __dict__ (and move its tag): nothing
# to do before trusting an object's dict version.
own_dicts = None
