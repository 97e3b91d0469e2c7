"""CPython 3.11 bytecode: the instructions only 3.11 has, the argument decoding, and the
version facts the rest of magpy reads through ``magpy.capture.monitor.bytecode``.

Handlers shared with later versions live in :mod:`magpy.capture.monitor.opcodes`.  Opcodes that
cannot execute inside a function body are listed in ``NEVER_EXECUTED`` with the reason.
"""
from magpy.capture.monitor import generators, nativeops
from magpy.capture.monitor import opcodes as op
from magpy.capture.monitor.protocols import NULL

NEVER_EXECUTED = {"CACHE": op.CACHE_REASON}

PRECALL = op.NOP


def LOAD_CLASSDEREF(f, i):
    name = f.info.localsplus[i]
    v = op.mapping_get(f.ns, name)
    f.stack.append(op.deref(f, i) if v is NULL else v)


POP_JUMP_BACKWARD_IF_TRUE = op.POP_JUMP_FORWARD_IF_TRUE
POP_JUMP_BACKWARD_IF_FALSE = op.POP_JUMP_FORWARD_IF_FALSE
POP_JUMP_BACKWARD_IF_NONE = op.POP_JUMP_FORWARD_IF_NONE
POP_JUMP_BACKWARD_IF_NOT_NONE = op.POP_JUMP_FORWARD_IF_NOT_NONE


def JUMP_IF_TRUE_OR_POP(f, target):
    if op.truth(f, f.stack[-1]):
        f.pc = target
    else:
        f.stack.pop()


def JUMP_IF_FALSE_OR_POP(f, target):
    if not op.truth(f, f.stack[-1]):
        f.pc = target
    else:
        f.stack.pop()


def IMPORT_STAR(f, arg):
    module = f.stack.pop()
    nativeops.import_star(module, f.globals, op.namespace(f, "no locals found during 'import *'"),
                          [("IMPORT_STAR", 0)])


def PREP_RERAISE_STAR(f, arg):
    s = f.stack
    excs = s.pop()
    s[-1] = nativeops.stack_op("PREP_RERAISE_STAR", 0, 2, 1)(s[-1], excs)[0]


def SEND(f, target):
    # 3.11: a finished sub-iterator is replaced by its return value before the jump.
    s = f.stack
    v = s.pop()
    receiver = s[-1]
    done, value = generators.send(f.monitor, receiver, v)
    if done:
        s[-1] = value
        f.pc = target
    else:
        s.append(value)


HANDLERS = op.handler_table(globals(), NEVER_EXECUTED)
# 3.11's names are the observers' vocabulary: every instruction is observed as itself.
decode = op.decoder(HANDLERS, op.arg_decoders(), {}, lambda ins: ins)


# The observed names of the forms an argument selects: none in 3.11.
FORMS = ()

# Control flow operators (magpy.graphs.controlflow): the conditional jumps an ``if`` compiles to,
# with the truth that makes them jump; those that end a ``while`` loop's body (back to its
# start while the condition holds); the instructions with an effect outside the locals.
BRANCH_JUMPS = {"POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_FORWARD_IF_TRUE": True}
LOOP_JUMPS = {"POP_JUMP_BACKWARD_IF_FALSE": False, "POP_JUMP_BACKWARD_IF_TRUE": True}
EFFECT_OPS = op.EFFECT_OPS | {"IMPORT_STAR", "PRINT_EXPR"}
# The instructions of a call after its arguments (a KW_NAMES may come first), and where the
# callable sits among its inputs.
CALL_SEQUENCE = ("PRECALL", "CALL")
call_layout = op.call_layout
# gen.throw() into a generator suspended in ``yield from``, when the sub-iterator raises:
# 3.11's gen_throw itself pops the sub-iterator and jumps past the SEND loop.
THROW_LEAVES_YIELD_FROM = True
# PEP 667 (3.13): frame.f_locals is a write-through proxy, locals() a new dict at every call.
LOCALS_PROXY = False
# gen.close() gives back what the generator returned on GeneratorExit (3.13), or None.
CLOSE_RETURNS_VALUE = False
# ma_version_tag (PEP 509): a global counter stamped on a dict at each change.
TRUSTS_DICT_VERSION = True
# Attribute stores into an object always go through its __dict__ (and move its tag): nothing
# to do before trusting an object's dict version.
own_dicts = None
