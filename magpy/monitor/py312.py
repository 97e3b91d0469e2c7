"""CPython 3.12 bytecode: the instructions 3.12 adds or changes, its argument decoding, the
names observers see its instructions under, and the version facts the rest of magpy reads
through ``magpy.monitor.bytecode``.

Handlers whose semantics 3.12 shares with 3.11 live in :mod:`magpy.monitor.opcodes`.  An
instruction whose argument selects the operation (``LOAD_ATTR``'s method bit,
``LOAD_SUPER_ATTR``, ``CALL_INTRINSIC_1/2``) is decoded once to the handler of its form.
Semantics follow CPython 3.12's ``Python/bytecodes.c``.
"""
import dis
import types
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE

from magpy.monitor import generators, nativeops
from magpy.monitor import opcodes as op
from magpy.monitor.protocols import NULL

_INSTRUMENTED = ("sys.monitoring's instrumented form of an instruction; co_code, which the monitor "
                 "decodes, always shows the plain instruction")
_PSEUDO = "compiler pseudo-instruction, replaced by real instructions before the bytecode is emitted"

NEVER_EXECUTED = {
    "CACHE": op.CACHE_REASON,
    "END_FOR": ("FOR_ITER jumps past it when its iterator is exhausted (as CPython's FOR_ITER does); only "
                "a specialized FOR_ITER_GEN's returning generator lands on it, and the monitor never "
                "specializes"),
    "INTERPRETER_EXIT": "ends the C evaluation loop of an entry frame; it is in no code object's bytecode",
    "RESERVED": "an opcode number kept free; the compiler never emits it",
    **{name: _INSTRUMENTED for name in dis.opmap if name.startswith("INSTRUMENTED_")},
    **{name: _PSEUDO for name, code in dis.opmap.items() if code > 255},
}


# --------------------------------------------------------------------------- locals, names
LOAD_FAST_CHECK = op.LOAD_FAST


def LOAD_FAST_AND_CLEAR(f, i):
    # PEP 709: an inlined comprehension saves the enclosing variable its own shadows (maybe
    # unbound: NULL goes on the stack) and restores it with STORE_FAST when it ends.
    f.stack.append(f.locals[i])
    f.locals[i] = NULL


def LOAD_LOCALS(f, arg):
    f.stack.append(op.namespace(f, "no locals found"))


def LOAD_FROM_DICT_OR_GLOBALS(f, name):
    s = f.stack
    s[-1] = op.lookup_name(f, s[-1], name)


def LOAD_FROM_DICT_OR_DEREF(f, i):
    s = f.stack
    v = op.mapping_get(s[-1], f.info.localsplus[i])
    s[-1] = op.deref(f, i) if v is NULL else v


# --------------------------------------------------------------------------- attributes, items
def LOAD_SUPER_ATTR(f, arg):
    name, with_args = arg
    s = f.stack
    s.append(f.monitor.load_attr(_super(f, with_args), name))


def _load_super_method(f, arg):
    # LOAD_SUPER_ATTR with the method bit: NULL then the bound attribute is the same call
    # as CPython's (unbound method, self).
    name, with_args = arg
    s = f.stack
    attr = f.monitor.load_attr(_super(f, with_args), name)
    s.append(NULL)
    s.append(attr)


def _super(f, with_args):
    """Pop (the global ``super``, ``__class__``, first argument) and call it: with both as
    arguments for ``super(C, self)``, with none for ``super()``, which reads them from the
    calling frame -- the monitored one -- exactly as CPython's zero-argument form does."""
    s = f.stack
    first = s.pop()
    cls = s.pop()
    global_super = s.pop()
    return f.monitor.call(global_super, (cls, first) if with_args else (), None)


def _slice_key(s):
    stop = s.pop()
    return slice(s.pop(), stop)


def BINARY_SLICE(f, arg):
    s = f.stack
    key = _slice_key(s)
    s[-1] = op.getitem(f, s[-1], key)


def STORE_SLICE(f, arg):
    s = f.stack
    key = _slice_key(s)
    container = s.pop()
    op.setitem(f, container, key, s.pop())


# --------------------------------------------------------------------------- returns, generators
def RETURN_CONST(f, value):
    f.retval = value
    return True


def SEND(f, target):
    # 3.12: the sub-iterator stays below its return value; END_SEND at the target drops it.
    s = f.stack
    v = s.pop()
    done, value = generators.send(f.monitor, s[-1], v)
    s.append(value)
    if done:
        f.pc = target


def END_SEND(f, arg):
    s = f.stack
    value = s.pop()
    s[-1] = value


def CLEANUP_THROW(f, arg):
    # The handler of a throw() into ``yield from``/``await``: a StopIteration from the
    # sub-iterator is its return value, anything else propagates.
    s = f.stack
    exc = s.pop()
    if not isinstance(exc, StopIteration):
        f.monitor.reraise(exc, same_frame=True)
    s.pop()
    s[-1] = None
    s.append(exc.value)


# --------------------------------------------------------------------------- intrinsics
# CPython 3.12's intrinsic numbering (Include/internal/pycore_intrinsics.h).
_INTRINSIC_1 = ("INTRINSIC_1_INVALID", "INTRINSIC_PRINT", "INTRINSIC_IMPORT_STAR",
                "INTRINSIC_STOPITERATION_ERROR", "INTRINSIC_ASYNC_GEN_WRAP", "INTRINSIC_UNARY_POSITIVE",
                "INTRINSIC_LIST_TO_TUPLE", "INTRINSIC_TYPEVAR", "INTRINSIC_PARAMSPEC",
                "INTRINSIC_TYPEVARTUPLE", "INTRINSIC_SUBSCRIPT_GENERIC", "INTRINSIC_TYPEALIAS")
_INTRINSIC_2 = ("INTRINSIC_2_INVALID", "INTRINSIC_PREP_RERAISE_STAR", "INTRINSIC_TYPEVAR_WITH_BOUND",
                "INTRINSIC_TYPEVAR_WITH_CONSTRAINTS", "INTRINSIC_SET_FUNCTION_TYPE_PARAMS")
# ``from m import *`` natively: the intrinsic, then dropping its None.
_IMPORT_STAR = (("CALL_INTRINSIC_1", _INTRINSIC_1.index("INTRINSIC_IMPORT_STAR")), ("POP_TOP", 0))


def INTRINSIC_PRINT(f, arg):
    op.PRINT_EXPR(f, arg)
    f.stack.append(None)


def INTRINSIC_IMPORT_STAR(f, arg):
    s = f.stack
    module = s.pop()
    ns = op.namespace(f, "no locals found during 'import *'")
    nativeops.import_star(module, f.globals, ns, _IMPORT_STAR)
    s.append(None)


def INTRINSIC_STOPITERATION_ERROR(f, arg):
    # PEP 479, compiled into every generator's outermost handler in 3.12.
    s = f.stack
    s[-1] = _stopiteration_error(f.code.co_flags, s[-1])


def _stopiteration_error(flags, exc):
    message = None
    if isinstance(exc, StopIteration):
        message = ("async generator" if flags & CO_ASYNC_GENERATOR
                   else "coroutine" if flags & CO_COROUTINE else "generator") + " raised StopIteration"
    elif flags & CO_ASYNC_GENERATOR and isinstance(exc, StopAsyncIteration):
        message = "async generator raised StopAsyncIteration"
    if message is None:
        return exc
    error = RuntimeError(message)
    error.__cause__ = exc
    error.__context__ = exc
    return error


def _native_intrinsic(opname, index, nin):
    """A handler running intrinsic ``index`` natively on the top ``nin`` values.  Its thunk gets
    the frame's globals: the type-parameter intrinsics take ``__module__`` from the caller."""
    def handler(f, arg):
        s = f.stack
        thunk = nativeops.stack_op(opname, index, nin, 1)
        args = s[-nin:]
        del s[-nin:]
        s.append(types.FunctionType(thunk.__code__, f.globals)(*args)[0])
    return handler


# Intrinsics that are a 3.11 instruction: observers see them under that name.
_INTRINSIC_AS = {"INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE": "LIST_TO_TUPLE",
                 "INTRINSIC_ASYNC_GEN_WRAP": "ASYNC_GEN_WRAP",
                 "INTRINSIC_PREP_RERAISE_STAR": "PREP_RERAISE_STAR"}


def _observed_intrinsic(opname, index):
    names = _INTRINSIC_1 if opname == "CALL_INTRINSIC_1" else _INTRINSIC_2
    name = names[index] if index < len(names) else opname
    return _INTRINSIC_AS.get(name, name)


def _intrinsic_handlers():
    own = {"INTRINSIC_PRINT": INTRINSIC_PRINT, "INTRINSIC_IMPORT_STAR": INTRINSIC_IMPORT_STAR,
           "INTRINSIC_STOPITERATION_ERROR": INTRINSIC_STOPITERATION_ERROR,
           "INTRINSIC_ASYNC_GEN_WRAP": op.ASYNC_GEN_WRAP, "INTRINSIC_UNARY_POSITIVE": op.UNARY_POSITIVE,
           "INTRINSIC_LIST_TO_TUPLE": op.LIST_TO_TUPLE}
    table = {}
    for opname, names, nin in (("CALL_INTRINSIC_1", _INTRINSIC_1, 1), ("CALL_INTRINSIC_2", _INTRINSIC_2, 2)):
        for index, name in enumerate(names):
            if index:
                table[opname, index] = own.get(name) or _native_intrinsic(opname, index, nin)
    return table


_INTRINSICS = _intrinsic_handlers()


def CALL_INTRINSIC_1(f, arg):
    raise SystemError(f"invalid intrinsic function {arg}")


CALL_INTRINSIC_2 = CALL_INTRINSIC_1


# --------------------------------------------------------------------------- decoding
def _load_attr(ins, code):
    return (op.LOAD_METHOD if ins.arg & 1 else op.LOAD_ATTR), code.co_names[ins.arg >> 1]


def _load_super_attr(ins, code):
    arg = (code.co_names[ins.arg >> 2], ins.arg & 2)
    return (_load_super_method if ins.arg & 1 else LOAD_SUPER_ATTR), arg


def _intrinsic(ins, code):
    return _INTRINSICS.get((ins.opname, ins.arg), HANDLERS[ins.opname]), ins.arg


def _for_iter_exit(ins, code):
    # The target is the loop's END_FOR; an exhausted iterator continues after it.
    return ins.argval // 2 + 1


POP_JUMP_IF_TRUE = op.POP_JUMP_FORWARD_IF_TRUE
POP_JUMP_IF_FALSE = op.POP_JUMP_FORWARD_IF_FALSE
POP_JUMP_IF_NONE = op.POP_JUMP_FORWARD_IF_NONE
POP_JUMP_IF_NOT_NONE = op.POP_JUMP_FORWARD_IF_NOT_NONE

HANDLERS = op.handler_table(globals(), NEVER_EXECUTED)
decode = op.decoder(
    HANDLERS,
    op.arg_decoders(RETURN_CONST=op.const_arg, FOR_ITER=_for_iter_exit,
                    COMPARE_OP=lambda ins, code: ins.arg >> 4),
    {"LOAD_ATTR": _load_attr, "LOAD_SUPER_ATTR": _load_super_attr,
     "CALL_INTRINSIC_1": _intrinsic, "CALL_INTRINSIC_2": _intrinsic})

# 3.12 instructions observers see under the name of the 3.11 instruction they behave as
# (3.12's conditional jumps all jump forward).
_OBSERVED_AS = {"LOAD_FAST_CHECK": "LOAD_FAST", **{f"POP_JUMP_IF_{c}": f"POP_JUMP_FORWARD_IF_{c}"
                                                  for c in ("TRUE", "FALSE", "NONE", "NOT_NONE")}}


def observed(ins: dis.Instruction) -> dis.Instruction:
    """The instruction as observers see it: under the name (and argument) of the 3.11
    instruction with the same stack behaviour where there is one, so the rules above the
    monitor speak one vocabulary; an intrinsic under its own name (``INTRINSIC_PRINT``).
    ``opcode`` stays the real one."""
    name = ins.opname
    if name == "LOAD_ATTR":
        return ins._replace(opname="LOAD_METHOD" if ins.arg & 1 else name, arg=ins.arg >> 1)
    if name == "COMPARE_OP":
        return ins._replace(arg=ins.arg >> 4)
    if name in ("CALL_INTRINSIC_1", "CALL_INTRINSIC_2"):
        return ins._replace(opname=_observed_intrinsic(name, ins.arg))
    renamed = _OBSERVED_AS.get(name)
    return ins if renamed is None else ins._replace(opname=renamed)


# The observed names of the forms an argument selects (each has its own handler).
FORMS = ("LOAD_METHOD", *(_observed_intrinsic(opname, index) for opname, index in _INTRINSICS))

# Control flow (magpy.controlflow): the conditional jumps an ``if`` compiles to, with the
# truth that makes them jump (observed names); 3.12 ends a ``while`` body with a forward
# conditional jump out and a JUMP_BACKWARD, so no conditional jump closes a loop.
BRANCH_JUMPS = {"POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_FORWARD_IF_TRUE": True}
LOOP_JUMPS = {}
EFFECT_OPS = op.EFFECT_OPS | {"STORE_SLICE", "INTRINSIC_IMPORT_STAR", "INTRINSIC_PRINT"}
# The instructions of a call after its arguments (a KW_NAMES may come first).
CALL_SEQUENCE = ("CALL",)
# gen.throw() into a generator suspended in ``yield from``, when the sub-iterator raises:
# 3.12 throws that into the frame, where CLEANUP_THROW ends the SEND loop.
THROW_LEAVES_YIELD_FROM = False
# ma_version_tag: deprecated by 3.12 but still the global counter (pycore_dict_state.h) bumped
# on every change of every dict, its low bits kept for dict watchers.
TRUSTS_DICT_VERSION = True
