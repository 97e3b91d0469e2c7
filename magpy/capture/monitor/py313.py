"""CPython 3.13 bytecode: what 3.13 does differently from 3.12, its argument decoding, the
names observers see its instructions under, and the version facts the rest of magpy reads
through ``magpy.capture.monitor.bytecode``.

Handlers whose semantics 3.13 shares with 3.12 (or 3.11) live in
:mod:`magpy.capture.monitor.opcodes`.  Semantics follow CPython 3.13's ``Python/bytecodes.c``.

What changes for the monitor:

- Calls: the callable goes first, then ``self`` or a NULL (``[callable, self_or_null,
  args...]``); ``LOAD_GLOBAL``, ``LOAD_ATTR``'s method form and ``LOAD_SUPER_ATTR``'s push their
  NULL *after* the value.  Keyword names are a constant pushed before ``CALL_KW``.
- Truth: ``TO_BOOL`` converts before a conditional jump or ``not``, and ``COMPARE_OP``'s
  argument may ask for the comparison's truth (bit 16).
- Superinstructions: two local loads or stores in one instruction.
- ``MAKE_FUNCTION`` takes no flags; ``SET_FUNCTION_ATTRIBUTE`` instructions follow it, one per
  attribute.  ``FORMAT_VALUE`` became ``CONVERT_VALUE``, ``FORMAT_SIMPLE``,
  ``FORMAT_WITH_SPEC``.
- Beyond bytecode: PEP 667's ``frame.f_locals`` and ``locals()`` (``LOCALS_PROXY``),
  ``gen.close()`` returning the generator's value, and attribute stores into inline values
  that skip a ``__dict__``'s version tag (``own_dicts``).

Observers keep one vocabulary (3.11's names): an instruction that does two things of that
vocabulary runs as two *steps* where it has an inline cache to hold the second
(``LOAD_GLOBAL`` + ``PUSH_NULL``, ``COMPARE_OP`` + ``TO_BOOL``), and instructions the
compiler always emits together are joined back into the 3.12 instruction they replaced
(``LOAD_CONST`` + ``CALL_KW`` run as ``KW_NAMES`` + ``CALL``; ``MAKE_FUNCTION`` and its
``SET_FUNCTION_ATTRIBUTE``s as one ``MAKE_FUNCTION`` with flags; a ``TO_BOOL`` right before
an instruction that takes the truth itself is a ``NOP``).  Each step does exactly what
CPython does to the stack; only the intermediate state inside a joined group, which no
program code can see, differs.
"""
import dis
import types

from magpy.capture.monitor import opcodes as op
from magpy.capture.monitor.protocols import NULL

NEVER_EXECUTED = {
    **op.never_executed_since_312(),
    "END_FOR": ("FOR_ITER jumps past it and the POP_TOP after it when its iterator is exhausted (as "
                "CPython's FOR_ITER does); only a specialized FOR_ITER_GEN's returning generator lands "
                "on it, and the monitor never specializes"),
    "ENTER_EXECUTOR": ("stands in the live bytecode for a JUMP_BACKWARD that a tier-2 executor took over; "
                       "co_code, which the monitor decodes, shows the original instruction"),
    "EXIT_INIT_CHECK": ("only the specialized CALL_ALLOC_AND_ENTER_INIT runs it, in a shim frame; the "
                        "monitor never specializes"),
}

# CPython 3.13's intrinsic numbering (Include/internal/pycore_intrinsics.h): 3.12's, and
# PEP 696's type-parameter defaults.
INTRINSICS = op.Intrinsics(op.INTRINSICS_1_312, (*op.INTRINSICS_2_312, "INTRINSIC_SET_TYPEPARAM_DEFAULT"))


# --------------------------------------------------------------------------- locals
def LOAD_FAST_LOAD_FAST(f, arg):
    # The compiler pairs only locals it knows are bound: no unbound check (as in CPython).
    s = f.stack
    s.append(f.locals[arg >> 4])
    s.append(f.locals[arg & 15])


def STORE_FAST_LOAD_FAST(f, arg):
    s = f.stack
    f.locals[arg >> 4] = s[-1]
    s[-1] = f.locals[arg & 15]


def STORE_FAST_STORE_FAST(f, arg):
    s = f.stack
    f.locals[arg >> 4] = s.pop()
    f.locals[arg & 15] = s.pop()


# --------------------------------------------------------------------------- truth
def TO_BOOL(f, arg):
    s = f.stack
    s[-1] = op.truth(f, s[-1])


# --------------------------------------------------------------------------- calls
def CALL(f, argc):
    # [callable, self or NULL, args...]
    s = f.stack
    start = len(s) - argc
    op.call_from(f, s[start - 2], start if s[start - 1] is NULL else start - 1, start - 2)


def CALL_KW(f, argc):
    # [callable, self or NULL, args..., keyword names]: the names as KW_NAMES would set them.
    f.kwnames = f.stack.pop()
    CALL(f, argc)


def CALL_FUNCTION_EX(f, flags):
    # [callable, NULL, args, kwargs?]
    op.call_spread(f, flags, -2)


def DICT_MERGE(f, i):
    # [callable, NULL, args, dict, ..., update]
    op.dict_merge(f, i, -3)


def call_layout(inputs) -> tuple:
    """Where a CALL's callable and first positional argument sit among its inputs:
    ``[callable, self or NULL, args...]``."""
    return (0, 2) if inputs[1] is NULL else (0, 1)


# --------------------------------------------------------------------------- functions
def MAKE_FUNCTION(f, arg):
    # 3.13 makes the function from the code object alone; a closure, if any, comes with a
    # SET_FUNCTION_ATTRIBUTE.  (Where those follow, as the compiler emits them, decode joins
    # them into one 3.12 MAKE_FUNCTION.)  Python cannot make a function of free variables
    # without a closure: empty cells stand in until it comes.
    s = f.stack
    code = s.pop()
    s.append(types.FunctionType(code, f.globals, None, None,
                                tuple(types.CellType() for _ in code.co_freevars) or None))


def _with_closure(fn, closure):
    # A function's closure is read-only from Python: make the function again with it (only
    # the stack holds the function yet).
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = fn.__annotations__
    return new


def _set(name):
    def setter(fn, value):
        setattr(fn, name, value)
        return fn
    return setter


def _annotations(fn, pairs):
    fn.__annotations__ = dict(zip(pairs[::2], pairs[1::2]))
    return fn


_FUNCTION_ATTRIBUTES = {1: _set("__defaults__"), 2: _set("__kwdefaults__"), 4: _annotations,
                        8: _with_closure}


def SET_FUNCTION_ATTRIBUTE(f, flag):
    s = f.stack
    fn = s.pop()
    s[-1] = _FUNCTION_ATTRIBUTES[flag](fn, s[-1])


# Formatting: each is FORMAT_VALUE with the flags below (a conversion gives a str, which
# FORMAT_VALUE's formatting then leaves alone).
CONVERT_VALUE = FORMAT_SIMPLE = FORMAT_WITH_SPEC = op.FORMAT_VALUE
_FORMAT_FLAGS = {"CONVERT_VALUE": lambda ins, code: ins.arg, "FORMAT_SIMPLE": lambda ins, code: 0,
                 "FORMAT_WITH_SPEC": lambda ins, code: 4}


# --------------------------------------------------------------------------- decoding
def _null_step(ins):
    return (ins._replace(opname="PUSH_NULL", arg=None, argval=None, argrepr=""), op.PUSH_NULL, None)


def _nop_step(ins):
    return (ins._replace(opname="NOP", arg=None, argval=None, argrepr=""), op.NOP, None)


def _load_global(ins, code):
    first = (ins, op.LOAD_GLOBAL, (code.co_names[ins.arg >> 1], 0))
    return [first, _null_step(ins)] if ins.arg & 1 else [first]


def _load_attr(ins, code):
    name = code.co_names[ins.arg >> 1]
    if not ins.arg & 1:
        return [(ins._replace(arg=ins.arg >> 1), op.LOAD_ATTR, name)]
    # The method form: observed as LOAD_METHOD, whose bound attribute then the NULL is the
    # same call as CPython's (unbound method, self).
    return [(ins._replace(opname="LOAD_METHOD", arg=ins.arg >> 1), op.LOAD_ATTR, name), _null_step(ins)]


def _load_super_attr(ins, code):
    first = (ins, op.LOAD_SUPER_ATTR, (code.co_names[ins.arg >> 2], ins.arg & 2))
    return [first, _null_step(ins)] if ins.arg & 1 else [first]


def _compare_op(ins, code):
    first = (ins._replace(arg=ins.arg >> 5), op.COMPARE_OP, ins.arg >> 5)
    if not ins.arg & 16:
        return [first]
    return [first, (ins._replace(opname="TO_BOOL", arg=None, argval=None, argrepr=""), TO_BOOL, None)]


def _for_iter_exit(ins, code):
    # The target is the loop's END_FOR, then a POP_TOP; an exhausted iterator continues after both.
    return ins.argval // 2 + 2


def observed(ins: dis.Instruction) -> dis.Instruction:
    """The instruction as observers see it: under the name (and argument) of the 3.11
    instruction with the same stack behaviour where there is one.  ``opcode`` stays the real one."""
    flags = _FORMAT_FLAGS.get(ins.opname)
    if flags is not None:
        return ins._replace(opname="FORMAT_VALUE", arg=flags(ins, None))
    renamed = op.OBSERVED_AS_311.get(ins.opname)
    return ins if renamed is None else ins._replace(opname=renamed)


# Instructions that take the truth of the value on top themselves (so a TO_BOOL before them
# changes nothing).
_TAKE_TRUTH = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT", "TO_BOOL"})


def _join(instructions, steps):
    """Join what the compiler emits together into the 3.12 form (see the module docstring)."""
    for k in range(len(instructions) - 1):
        ins, nxt = instructions[k], instructions[k + 1]
        if steps[k][-1][1] is TO_BOOL and nxt.opname in _TAKE_TRUTH:
            steps[k] = steps[k][:-1] or [_nop_step(ins)]
        elif ins.opname == "LOAD_CONST" and nxt.opname == "CALL_KW" and not nxt.is_jump_target:
            steps[k] = [(ins._replace(opname="KW_NAMES"), op.KW_NAMES, ins.argval)]
            steps[k + 1] = [(nxt._replace(opname="CALL"), CALL, nxt.arg)]
        elif ins.opname == "MAKE_FUNCTION" and nxt.opname == "SET_FUNCTION_ATTRIBUTE":
            _join_function(instructions, steps, k)


def _join_function(instructions, steps, k):
    # MAKE_FUNCTION then its SET_FUNCTION_ATTRIBUTEs: the attributes lie below the code object
    # in 3.12 MAKE_FUNCTION's order, so one MAKE_FUNCTION with their flags makes the function.
    flags = 0
    end = k + 1
    while end < len(instructions) and instructions[end].opname == "SET_FUNCTION_ATTRIBUTE":
        flags |= instructions[end].arg
        steps[end] = [_nop_step(instructions[end])]
        end += 1
    steps[k] = [(instructions[k]._replace(arg=flags), op.MAKE_FUNCTION, flags)]


HANDLERS = op.handler_table(globals(), NEVER_EXECUTED)
decode = op.decoder(
    HANDLERS,
    op.arg_decoders(RETURN_CONST=op.const_arg, FOR_ITER=_for_iter_exit, **_FORMAT_FLAGS),
    {"LOAD_GLOBAL": _load_global, "LOAD_ATTR": _load_attr, "LOAD_SUPER_ATTR": _load_super_attr,
     "COMPARE_OP": _compare_op, "CALL_INTRINSIC_1": INTRINSICS.select, "CALL_INTRINSIC_2": INTRINSICS.select},
    observed, _join)

# The observed names of the forms an argument selects (each has its own handler).
FORMS = ("LOAD_METHOD", *INTRINSICS.forms())

# Control flow (magpy.graphs.controlflow): as 3.12 (observed names).
BRANCH_JUMPS = {"POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_FORWARD_IF_TRUE": True}
LOOP_JUMPS = {}
EFFECT_OPS = op.EFFECT_OPS | {"STORE_SLICE", "INTRINSIC_IMPORT_STAR", "INTRINSIC_PRINT"}
# The instructions of a call after its arguments (KW_NAMES, joined from CALL_KW's constant,
# may come first).
CALL_SEQUENCE = ("CALL",)
# gen.throw() into ``yield from``: as 3.12, CLEANUP_THROW ends the SEND loop.
THROW_LEAVES_YIELD_FROM = False
# PEP 667: frame.f_locals of a function is a write-through proxy, locals() a new dict at
# every call.
LOCALS_PROXY = True
# gen.close() gives back what the generator returned on GeneratorExit (None if it raised it).
CLOSE_RETURNS_VALUE = True
# ma_version_tag: as in 3.12 the global counter bumped on every change of a dict (removed in
# 3.14) -- but an attribute store into an object's inline values skips a materialized
# __dict__'s tag (obj.a = 1 leaves it as it was): see own_dicts.
TRUSTS_DICT_VERSION = True


def own_dicts(objects) -> bool:
    """Make attribute stores into each object go through its ``__dict__``, so that dict's
    version tag moves with them (3.13 stores into the object's inline values without
    touching the tag).  Setting ``__dict__`` to itself through the type's descriptor (not
    ``__setattr__``) detaches it from the inline values for good; the program sees the same
    dict with the same items.  False if an object's ``__dict__`` cannot be set that way."""
    for obj in objects:
        setter = _dict_setter(type(obj))
        if setter is None:
            return False
        try:
            setter(obj, obj.__dict__)
        except (AttributeError, TypeError):   # a read-only one (io's objects: "not writable")
            return False
    return True


def _dict_setter(tp):
    for klass in tp.__mro__:
        descriptor = klass.__dict__.get("__dict__")
        if descriptor is not None:
            return descriptor.__set__ if type(descriptor) is types.GetSetDescriptorType else None
    return None
