"""Opcode handlers shared by the CPython versions the monitor runs, and the decoding machinery.

Each handler ``h(frame, arg)`` carries out one instruction with CPython's own operation
(``operator.add``, ``getattr``, the real call ...) on the frame's real values.  It returns a
true value only when the frame stops (return, yield, generator creation).  Jumps set
``frame.pc``.  Errors are raised as the same exception CPython raises, with the same
message; handlers never call user code while a host ``except`` block is active, so the
monitor alone decides exception chaining (see ``interpreter.Monitor._unwind``).

A handler here is used by every version whose instruction of that name has these stack
semantics once its argument is decoded; the per-version modules (``py311``, ``py312``,
``py313``) add their own instructions, choose the argument decoding (``decoder``: one or more
steps per instruction, each observed under a name of the observers' vocabulary) and say which
opcodes never execute.
"""
import builtins
import dis
import sys
import types
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE, CO_GENERATOR, CO_ITERABLE_COROUTINE

from magpy.capture.monitor import generators, nativeops, operators
from magpy.capture.monitor.observer import Entries, Items
from magpy.capture.monitor.protocols import (
    NULL,
    cell_value,
    function_str,
    lookup_special,
    not_iterable,
    py_method,
    set_context,
    tp_name,
)

FunctionType = types.FunctionType
CellType = types.CellType

CACHE_REASON = "inline-cache entry following another instruction; dis skips it and it is never dispatched"
_INSTRUMENTED = ("sys.monitoring's instrumented form of an instruction; co_code, which the monitor "
                 "decodes, always shows the plain instruction")
_PSEUDO = "compiler pseudo-instruction, replaced by real instructions before the bytecode is emitted"


def never_executed_since_312() -> dict:
    """The opcodes of 3.12 and later that no code object's ``co_code`` dispatches, with why."""
    return {
        "CACHE": CACHE_REASON,
        "INTERPRETER_EXIT": ("ends the C evaluation loop of an entry frame; it is in no code object's "
                             "bytecode"),
        "RESERVED": "an opcode number kept free; the compiler never emits it",
        **{name: _INSTRUMENTED for name in dis.opmap if name.startswith("INSTRUMENTED_")},
        **{name: _PSEUDO for name, code in dis.opmap.items() if code > 255},
    }

UNBOUNDLOCAL = "cannot access local variable '%s' where it is not associated with a value"
UNBOUNDFREE = ("cannot access free variable '%s' where it is not associated with a value"
               " in enclosing scope")
NAME_ERROR = "name '%s' is not defined"
CANNOT_CATCH = "catching classes that do not inherit from BaseException is not allowed"
CANNOT_EXCEPT_STAR_EG = "catching ExceptionGroup with except* is not allowed. Use except instead."


def _name_error(name):
    return NameError(NAME_ERROR % name, name=name)


def _unbound(f, i):
    name = f.info.localsplus[i]
    if i < f.info.nlocals_and_cells:
        return UnboundLocalError(UNBOUNDLOCAL % name, name=name)
    return NameError(UNBOUNDFREE % name, name=name)


# --------------------------------------------------------------------------- stack / locals
def NOP(f, arg):
    pass


RESUME = EXTENDED_ARG = NOP


def POP_TOP(f, arg):
    f.stack.pop()


def PUSH_NULL(f, arg):
    f.stack.append(NULL)


def LOAD_CONST(f, value):
    f.stack.append(value)


def COPY(f, n):
    f.stack.append(f.stack[-n])


def SWAP(f, n):
    s = f.stack
    s[-1], s[-n] = s[-n], s[-1]


def LOAD_FAST(f, i):
    v = f.locals[i]
    if v is NULL:
        raise _unbound(f, i)
    f.stack.append(v)


def STORE_FAST(f, i):
    f.locals[i] = f.stack.pop()


def DELETE_FAST(f, i):
    if f.locals[i] is NULL:
        raise _unbound(f, i)
    f.locals[i] = NULL


def MAKE_CELL(f, i):
    v = f.locals[i]
    f.locals[i] = CellType() if v is NULL else CellType(v)


def COPY_FREE_VARS(f, n):
    closure = f.fn.__closure__
    start = f.info.nlocalsplus - n
    f.locals[start:start + n] = closure


def LOAD_CLOSURE(f, i):
    f.stack.append(f.locals[i])


def deref(f, i):
    """The value in the cell at local slot ``i``; unbound-variable error if it is empty."""
    v = cell_value(f.locals[i])
    if v is NULL:
        raise _unbound(f, i)
    return v


def LOAD_DEREF(f, i):
    f.stack.append(deref(f, i))


def STORE_DEREF(f, i):
    f.locals[i].cell_contents = f.stack.pop()


def DELETE_DEREF(f, i):
    cell = f.locals[i]
    try:
        del cell.cell_contents
        empty = False
    except ValueError:
        empty = True
    if empty:
        raise _unbound(f, i)


# --------------------------------------------------------------------------- names
def mapping_get(mapping, name):
    """``mapping[name]``, or NULL if it has no such key."""
    if type(mapping) is dict:
        return mapping.get(name, NULL)
    try:
        return mapping[name]
    except KeyError:
        return NULL


def LOAD_GLOBAL(f, arg):
    name, push_null = arg
    g = f.globals
    b = f.builtins
    if type(g) is dict and type(b) is dict:
        v = g.get(name, NULL)
        if v is NULL:
            v = b.get(name, NULL)
    else:
        v = mapping_get(g, name)
        if v is NULL:
            v = mapping_get(b, name)
    if v is NULL:
        raise _name_error(name)
    if push_null:
        f.stack.append(NULL)
    f.stack.append(v)


def STORE_GLOBAL(f, name):
    f.globals[name] = f.stack.pop()


def DELETE_GLOBAL(f, name):
    if name not in f.globals:
        raise _name_error(name)
    del f.globals[name]


def namespace(f, message):
    """The frame's namespace mapping (class bodies, exec'd code); SystemError in a function."""
    if f.ns is None:
        raise SystemError(message)
    return f.ns


def lookup_name(f, mapping, name):
    """``name`` in ``mapping``, else the globals, else the builtins; NameError if nowhere."""
    v = mapping_get(mapping, name)
    if v is NULL:
        v = f.globals.get(name, NULL)
        if v is NULL:
            v = mapping_get(f.builtins, name)
            if v is NULL:
                raise _name_error(name)
    return v


def LOAD_NAME(f, name):
    f.stack.append(lookup_name(f, namespace(f, f"no locals when loading {name!r}"), name))


def STORE_NAME(f, name):
    namespace(f, f"no locals found when storing {name!r}")[name] = f.stack.pop()


def DELETE_NAME(f, name):
    ns = namespace(f, f"no locals when deleting {name!r}")
    try:
        del ns[name]
        missing = False
    except KeyError:
        missing = True
    if missing:
        raise _name_error(name)


def SETUP_ANNOTATIONS(f, arg):
    ns = namespace(f, "no locals found when setting up annotations")
    if mapping_get(ns, "__annotations__") is NULL:
        ns["__annotations__"] = {}


# --------------------------------------------------------------------------- attributes, items
def LOAD_ATTR(f, name):
    s = f.stack
    s[-1] = f.monitor.load_attr(s[-1], name)


def LOAD_METHOD(f, name):
    # CPython may push (unbound method, self); pushing (NULL, bound method) is the same call.
    s = f.stack
    attr = f.monitor.load_attr(s[-1], name)
    s[-1] = NULL
    s.append(attr)


def STORE_ATTR(f, name):
    s = f.stack
    obj = s.pop()
    value = s.pop()
    fn = operators.special(f.monitor, type(obj), "__setattr__")
    if fn is None:
        setattr(obj, name, value)
    else:
        operators.invoke(f.monitor, fn, obj, name, value)


def DELETE_ATTR(f, name):
    obj = f.stack.pop()
    fn = operators.special(f.monitor, type(obj), "__delattr__")
    if fn is None:
        delattr(obj, name)
    else:
        operators.invoke(f.monitor, fn, obj, name)


# Subscripting an instance of a Python class runs its Python __getitem__ (__setitem__,
# __delitem__): enter it, so its reads and writes are monitored like any other call.
_NATIVE_SUBSCR = frozenset({list, tuple, dict, str, bytes, range})


def _subscr_method(f, obj, name):
    tp = type(obj)
    if tp in _NATIVE_SUBSCR or isinstance(obj, type):
        return None
    fn = py_method(tp, name)
    return None if fn is None or f.monitor.policy.runs_natively(fn) else fn


def getitem(f, container, key):
    """``container[key]``, entering a Python ``__getitem__``."""
    fn = _subscr_method(f, container, "__getitem__")
    return container[key] if fn is None else f.monitor.call(fn, (container, key), None)


def setitem(f, container, key, value):
    """``container[key] = value``, entering a Python ``__setitem__``."""
    fn = _subscr_method(f, container, "__setitem__")
    if fn is None:
        container[key] = value
    else:
        f.monitor.call(fn, (container, key, value), None)


def BINARY_SUBSCR(f, arg):
    s = f.stack
    key = s.pop()
    s[-1] = getitem(f, s[-1], key)


def STORE_SUBSCR(f, arg):
    s = f.stack
    key = s.pop()
    container = s.pop()
    setitem(f, container, key, s.pop())


def DELETE_SUBSCR(f, arg):
    s = f.stack
    key = s.pop()
    container = s.pop()
    fn = _subscr_method(f, container, "__delitem__")
    if fn is None:
        del container[key]
    else:
        f.monitor.call(fn, (container, key), None)


# --------------------------------------------------------------------------- operators
# Operators run special methods; Python ones are entered (see magpy.capture.monitor.operators).
def UNARY_POSITIVE(f, arg):
    f.stack[-1] = operators.unary(f.monitor, f.stack[-1], "__pos__")


def UNARY_NEGATIVE(f, arg):
    f.stack[-1] = operators.unary(f.monitor, f.stack[-1], "__neg__")


def UNARY_NOT(f, arg):
    f.stack[-1] = not operators.truth(f.monitor, f.stack[-1])


def UNARY_INVERT(f, arg):
    f.stack[-1] = operators.unary(f.monitor, f.stack[-1], "__invert__")


_NB_INPLACE = len(operators.BINARY)
# BINARY_OP's arguments of the in-place operators (``+=`` ...), which change a mutable left
# operand itself (a list, a dict, a tensor) rather than make a new value.
INPLACE_BINARY = frozenset(range(_NB_INPLACE, 2 * _NB_INPLACE))


def BINARY_OP(f, i):
    s = f.stack
    rhs = s.pop()
    if i < _NB_INPLACE:
        s[-1] = operators.binary(f.monitor, s[-1], rhs, i)
    else:
        s[-1] = operators.inplace(f.monitor, s[-1], rhs, i - _NB_INPLACE)


def COMPARE_OP(f, i):
    s = f.stack
    rhs = s.pop()
    s[-1] = operators.compare(f.monitor, s[-1], rhs, i)


def IS_OP(f, invert):
    s = f.stack
    rhs = s.pop()
    s[-1] = (s[-1] is rhs) ^ bool(invert)


def CONTAINS_OP(f, invert):
    s = f.stack
    container = s.pop()
    s[-1] = operators.contains(f.monitor, container, s[-1]) ^ bool(invert)


# --------------------------------------------------------------------------- builders
def BUILD_TUPLE(f, n):
    s = f.stack
    if n:
        t = tuple(s[-n:])
        del s[-n:]
    else:
        t = ()
    s.append(t)


def BUILD_LIST(f, n):
    s = f.stack
    if n:
        lst = s[-n:]
        del s[-n:]
    else:
        lst = []
    s.append(lst)


def BUILD_SET(f, n):
    s = f.stack
    items = s[-n:] if n else ()
    result = set()
    for item in items:
        result.add(item)
    if n:
        del s[-n:]
    s.append(result)


def BUILD_MAP(f, n):
    s = f.stack
    items = s[-2 * n:] if n else ()
    d = {}
    for i in range(0, len(items), 2):
        d[items[i]] = items[i + 1]
    if n:
        del s[-2 * n:]
    s.append(d)


def BUILD_CONST_KEY_MAP(f, n):
    s = f.stack
    keys = s.pop()
    values = s[-n:] if n else ()
    d = {}
    for k, v in zip(keys, values):
        d[k] = v
    if n:
        del s[-n:]
    s.append(d)


def BUILD_SLICE(f, n):
    s = f.stack
    sl = slice(*s[-n:])
    del s[-n:]
    s.append(sl)


def BUILD_STRING(f, n):
    s = f.stack
    text = "".join(s[-n:]) if n else ""
    if n:
        del s[-n:]
    s.append(text)


def LIST_TO_TUPLE(f, arg):
    f.stack[-1] = tuple(f.stack[-1])


def LIST_APPEND(f, i):
    s = f.stack
    v = s.pop()
    s[-i].append(v)


def SET_ADD(f, i):
    s = f.stack
    v = s.pop()
    s[-i].add(v)


def MAP_ADD(f, i):
    s = f.stack
    v = s.pop()
    k = s.pop()
    s[-i][k] = v


def LIST_EXTEND(f, i):
    s = f.stack
    iterable = s.pop()
    failed = False
    try:
        s[-i].extend(iterable)
    except TypeError:
        if not not_iterable(iterable):
            raise
        failed = True
    if failed:
        raise TypeError(f"Value after * must be an iterable, not {tp_name(type(iterable))}")


def SET_UPDATE(f, i):
    s = f.stack
    iterable = s.pop()
    s[-i].update(iterable)


def DICT_UPDATE(f, i):
    s = f.stack
    update = s.pop()
    failed = False
    try:
        update.keys
        s[-i].update(update)
    except AttributeError:
        failed = True
    if failed:
        raise TypeError(f"'{tp_name(type(update))}' object is not a mapping")


def DICT_MERGE(f, i):
    # 3.11, 3.12: [NULL, callable, args, dict, ..., update] (the callable names errors).
    dict_merge(f, i, -2)


def dict_merge(f, i, callee_at):
    """DICT_MERGE with the callable ``callee_at`` below the dict (the positional arguments in between)."""
    s = f.stack
    update = s.pop()
    merge_kwargs(s[-i], update, s[callee_at - i])


def merge_kwargs(target, update, func):
    """``_PyDict_MergeEx(target, update, 2)`` with CPython's call-site error messages."""
    error = None
    try:
        if isinstance(update, dict) and type(update).__iter__ is dict.__iter__:
            items = update.items()
        else:
            items = [(k, update[k]) for k in update.keys()]
        for k, v in items:
            if k in target:
                error = TypeError(f"{function_str(func)} got multiple values for keyword argument '{k}'")
                break
            target[k] = v
    except AttributeError:
        error = TypeError(f"{function_str(func)} argument after ** must be a mapping, "
                          f"not {tp_name(type(update))}")
    if error is not None:
        raise error


def FORMAT_VALUE(f, flags):
    s = f.stack
    spec = s.pop() if flags & 4 else None
    v = s.pop()
    which = flags & 3
    if which == 1:
        v = str(v)
    elif which == 2:
        v = repr(v)
    elif which == 3:
        v = ascii(v)
    if spec is None and type(v) is str:
        s.append(v)
    else:
        s.append(format(v, "" if spec is None else spec))


def UNPACK_SEQUENCE(f, n):
    s = f.stack
    seq = s[-1]
    if (type(seq) is tuple or type(seq) is list) and len(seq) == n:
        s.pop()
        s.extend(reversed(seq))
    else:
        s.extend(nativeops.stack_op("UNPACK_SEQUENCE", n, 1, n)(s.pop()))


def UNPACK_EX(f, arg):
    s = f.stack
    s.extend(nativeops.stack_op("UNPACK_EX", arg, 1, (arg & 0xFF) + 1 + (arg >> 8))(s.pop()))


# --------------------------------------------------------------------------- jumps
def JUMP_FORWARD(f, target):
    f.pc = target


JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD


def truth(f, v):
    """``bool(v)``, entering a Python ``__bool__``/``__len__``."""
    # Comparisons leave a bool: skip the dispatch for it.
    return v if v is True or v is False else operators.truth(f.monitor, v)


def POP_JUMP_FORWARD_IF_TRUE(f, target):
    if truth(f, f.stack.pop()):
        f.pc = target


def POP_JUMP_FORWARD_IF_FALSE(f, target):
    if not truth(f, f.stack.pop()):
        f.pc = target


def POP_JUMP_FORWARD_IF_NONE(f, target):
    if f.stack.pop() is None:
        f.pc = target


def POP_JUMP_FORWARD_IF_NOT_NONE(f, target):
    if f.stack.pop() is not None:
        f.pc = target


# --------------------------------------------------------------------------- iteration
def GET_ITER(f, arg):
    s = f.stack
    s[-1] = f.monitor.get_iter(s[-1])


def FOR_ITER(f, target):
    s = f.stack
    v = f.monitor.iter_next(s[-1])
    if v is NULL:
        s.pop()
        f.pc = target
    else:
        s.append(v)


def GET_YIELD_FROM_ITER(f, arg):
    s = f.stack
    it = s[-1]
    if generators.is_coroutine(it):
        if not f.code.co_flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE):
            raise TypeError("cannot 'yield from' a coroutine object in a non-coroutine generator")
    elif not generators.is_generator(it):
        s[-1] = f.monitor.get_iter(it)


# --------------------------------------------------------------------------- calls
def KW_NAMES(f, names):
    f.kwnames = names


def call_layout(inputs) -> tuple:
    """Where a CALL's callable and first positional argument sit among its inputs, in 3.11
    and 3.12's layout: ``[NULL or method, callable or self, args...]``."""
    return (1, 2) if inputs[0] is NULL else (0, 1)


def CALL(f, argc):
    # 3.11, 3.12: [NULL or method, callable or self, args...].
    s = f.stack
    start = len(s) - argc
    first = s[start - 2]
    if first is NULL:
        call_from(f, s[start - 1], start, start - 2)
    else:
        call_from(f, first, start - 1, start - 2)


def call_from(f, callee, start, bottom):
    """Call ``callee`` with the stack values from ``start`` up as arguments (the last
    ``len(f.kwnames)`` by keyword), then replace the stack from ``bottom`` up by the result."""
    s = f.stack
    kwnames = f.kwnames
    nkw = len(kwnames)
    top = len(s)
    args = tuple(s[start:top - nkw])
    kwargs = None
    if nkw:
        f.kwnames = ()
        kwargs = dict(zip(kwnames, s[top - nkw:top]))
    shadows = None
    if f.shadow_stack is not None:
        sh = f.shadow_stack
        shadows = (tuple(sh[start:top - nkw]), dict(zip(kwnames, sh[top - nkw:top])) if nkw else None)
    del s[bottom:]
    s.append(f.monitor.call(callee, args, kwargs, shadows))


def CALL_FUNCTION_EX(f, flags):
    # 3.11, 3.12: [NULL, callable, args, kwargs?].
    call_spread(f, flags, -1)


def call_spread(f, flags, callee_at):
    """``f(*args, **kwargs)`` with the callable at ``callee_at`` of the two values below
    the arguments (the other is a NULL), all popped."""
    s = f.stack
    shadows = _spread_shadows(f.shadow_stack, flags, s)
    kwargs = s.pop() if flags & 1 else None
    callargs = s.pop()
    func = s[callee_at]
    del s[-2:]
    if kwargs is not None and type(kwargs) is not dict:
        d = {}
        merge_kwargs(d, kwargs, func)
        kwargs = d
    if type(callargs) is not tuple:
        if not_iterable(callargs):
            raise TypeError(f"{function_str(func)} argument after * must be an iterable, "
                            f"not {tp_name(type(callargs))}")
        callargs = tuple(callargs)
    s.append(f.monitor.call(func, callargs, kwargs, shadows))


def _spread_shadows(ss, flags, s):
    """The argument shadows of ``f(*args, **kwargs)``: the sequence's and dict's item shadows."""
    if ss is None:
        return None
    at = -2 if flags & 1 else -1
    seq, args = ss[at], s[at]
    keywords = ss[-1] if flags & 1 and type(ss[-1]) is Entries else None
    if type(args) not in (tuple, list):
        return None
    positional = seq if type(seq) is Items and len(seq) == len(args) else (None,) * len(args)
    return (positional, keywords)


def MAKE_FUNCTION(f, flags):
    s = f.stack
    code = s.pop()
    closure = s.pop() if flags & 8 else None
    annotations = s.pop() if flags & 4 else None
    kwdefaults = s.pop() if flags & 2 else None
    defaults = s.pop() if flags & 1 else None
    fn = FunctionType(code, f.globals, None, defaults, closure)
    if kwdefaults is not None:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2]))
    s.append(fn)


def LOAD_BUILD_CLASS(f, arg):
    bc = mapping_get(f.builtins, "__build_class__")
    if bc is NULL:
        raise NameError("__build_class__ not found")
    f.stack.append(bc)


def LOAD_ASSERTION_ERROR(f, arg):
    f.stack.append(AssertionError)


def RETURN_VALUE(f, arg):
    f.retval = f.stack.pop()
    return True


def IMPORT_NAME(f, name):
    s = f.stack
    fromlist = s.pop()
    level = s.pop()
    imp = mapping_get(f.builtins, "__import__")
    if imp is NULL:
        raise ImportError("__import__ not found")
    locals_ = f.ns
    if imp is builtins.__import__:
        s.append(imp(name, f.globals, locals_, fromlist, level))
    else:
        s.append(f.monitor.call(imp, (name, f.globals, locals_, fromlist, level), None, None))


def IMPORT_FROM(f, name):
    f.stack.append(nativeops.stack_op("IMPORT_FROM", 0, 1, 1, names=(name,))(f.stack[-1])[0])


def PRINT_EXPR(f, arg):
    v = f.stack.pop()
    hook = getattr(sys, "displayhook", None)
    if hook is None:
        raise RuntimeError("lost sys.displayhook")
    f.monitor.call(hook, (v,), None, None)


# --------------------------------------------------------------------------- exceptions
def PUSH_EXC_INFO(f, arg):
    s = f.stack
    exc = s[-1]
    item = f.monitor.exc_stack[-1]
    s[-1] = item[0]
    item[0] = exc
    s.append(exc)


def POP_EXCEPT(f, arg):
    f.monitor.exc_stack[-1][0] = f.stack.pop()


def CHECK_EXC_MATCH(f, arg):
    s = f.stack
    right = s.pop()
    _check_except_type(right)
    s.append(exception_matches(type(s[-1]), right))


def _is_exception_class(x):
    return isinstance(x, type) and BaseException in x.__mro__


def _check_except_type(right):
    items = right if isinstance(right, tuple) else (right,)
    for item in items:
        if not _is_exception_class(item):
            raise TypeError(CANNOT_CATCH)


def exception_matches(err, exc):
    """``PyErr_GivenExceptionMatches`` for an exception class ``err``."""
    if isinstance(exc, tuple):
        return any(exception_matches(err, e) for e in exc)
    if _is_exception_class(err) and _is_exception_class(exc):
        return exc in err.__mro__
    return err is exc


def CHECK_EG_MATCH(f, arg):
    s = f.stack
    match_type = s.pop()
    _check_except_type(match_type)
    items = match_type if isinstance(match_type, tuple) else (match_type,)
    if any(BaseExceptionGroup in t.__mro__ for t in items):
        raise TypeError(CANNOT_EXCEPT_STAR_EG)
    exc_value = s[-1]
    match, rest = _exception_group_match(exc_value, match_type)
    if match is None:
        s.append(None)
    else:
        s[-1] = rest
        s.append(match)
        f.monitor.exc_stack[-1][0] = match


def _exception_group_match(exc_value, match_type):
    if exc_value is None:
        return None, None
    if exception_matches(type(exc_value), match_type):
        if isinstance(exc_value, BaseExceptionGroup):
            return exc_value, None
        wrapped = BaseExceptionGroup("", (exc_value,))
        wrapped.__traceback__ = exc_value.__traceback__
        return wrapped, None
    if isinstance(exc_value, BaseExceptionGroup):
        pair = exc_value.split(match_type)
        if type(pair) is not tuple or len(pair) != 2:
            raise TypeError(f"{tp_name(type(exc_value))}.split must return a 2-tuple, got "
                            f"{tp_name(type(pair))}({len(pair) if isinstance(pair, tuple) else 0})")
        return pair
    return None, None


def RERAISE(f, oparg):
    # The saved lasti below the exception only feeds CPython's traceback line numbers; the
    # handler is looked up at this instruction, so it is left on the stack untouched.
    f.monitor.reraise(f.stack.pop(), same_frame=True)


def RAISE_VARARGS(f, argc):
    s = f.stack
    mon = f.monitor
    if argc == 0:
        exc = mon.handled_exception()
        if exc is None:
            raise RuntimeError("No active exception to reraise")
        mon.reraise(exc, same_frame=True)
    cause = s.pop() if argc == 2 else NULL
    exc = s.pop()
    if _is_exception_class(exc):
        value = mon.call(exc, (), None, None)
        if not isinstance(value, BaseException):
            raise TypeError(f"calling {exc!r} should have returned an instance of "
                            f"BaseException, not {type(value)!r}")
    elif isinstance(exc, BaseException):
        value = exc
    else:
        raise TypeError("exceptions must derive from BaseException")
    if cause is not NULL:
        if _is_exception_class(cause):
            cause = mon.call(cause, (), None, None)
        elif cause is not None and not isinstance(cause, BaseException):
            raise TypeError("exception causes must derive from BaseException")
        value.__cause__ = cause
    set_context(value, mon.handled_exception())
    mon.reraise(value)


def WITH_EXCEPT_START(f, arg):
    s = f.stack
    val = s[-1]
    s.append(f.monitor.call(s[-4], (type(val), val, val.__traceback__), None, None))


def BEFORE_WITH(f, arg):
    _enter_context(f, "__enter__", "__exit__", "context manager protocol")


def BEFORE_ASYNC_WITH(f, arg):
    _enter_context(f, "__aenter__", "__aexit__", "asynchronous context manager protocol")


def _enter_context(f, enter_name, exit_name, protocol):
    s = f.stack
    mgr = s[-1]
    enter = lookup_special(mgr, enter_name)
    if enter is NULL:
        raise TypeError(f"'{tp_name(type(mgr))}' object does not support the {protocol}")
    exit = lookup_special(mgr, exit_name)
    if exit is NULL:
        raise TypeError(f"'{tp_name(type(mgr))}' object does not support the {protocol} "
                        f"(missed {exit_name} method)")
    s[-1] = exit
    s.append(f.monitor.call(enter, (), None, None))


# --------------------------------------------------------------------------- generators, async
def RETURN_GENERATOR(f, arg):
    f.retval = generators.make(f)
    return True


def YIELD_VALUE(f, arg):
    f.retval = f.stack.pop()
    f.yielded = True
    return True


def ASYNC_GEN_WRAP(f, arg):
    f.stack[-1] = generators.AsyncGenWrapped(f.stack[-1])


def GET_AWAITABLE(f, where):
    s = f.stack
    s[-1] = generators.get_awaitable(f.monitor, s[-1], where)


def GET_AITER(f, arg):
    s = f.stack
    s[-1] = generators.get_aiter(f.monitor, s[-1])


def GET_ANEXT(f, arg):
    s = f.stack
    s.append(generators.get_anext(f.monitor, s[-1]))


def END_ASYNC_FOR(f, arg):
    s = f.stack
    exc = s.pop()
    if isinstance(exc, StopAsyncIteration):
        s.pop()
        return
    f.monitor.reraise(exc, same_frame=True)


# --------------------------------------------------------------------------- pattern matching
def GET_LEN(f, arg):
    f.stack.append(operators.length(f.monitor, f.stack[-1]))


_TPFLAGS_SEQUENCE = 1 << 5
_TPFLAGS_MAPPING = 1 << 6


def MATCH_MAPPING(f, arg):
    f.stack.append(bool(type(f.stack[-1]).__flags__ & _TPFLAGS_MAPPING))


def MATCH_SEQUENCE(f, arg):
    f.stack.append(bool(type(f.stack[-1]).__flags__ & _TPFLAGS_SEQUENCE))


def MATCH_KEYS(f, arg):
    s = f.stack
    keys = s[-1]
    subject = s[-2]
    if not keys:
        s.append(())
        return
    get = subject.get
    call = f.monitor.call
    missing = object()
    seen = set()
    values = []
    for key in keys:
        if key in seen:
            raise ValueError(f"mapping pattern checks duplicate key ({key!r})")
        seen.add(key)
        v = call(get, (key, missing), None, None)
        if v is missing:
            s.append(None)
            return
        values.append(v)
    s.append(tuple(values))


def MATCH_CLASS(f, count):
    s = f.stack
    names = s.pop()
    cls = s.pop()
    subject = s.pop()
    s.append(nativeops.stack_op("MATCH_CLASS", count, 3, 1)(subject, cls, names)[0])


# --------------------------------------------------------------------------- since 3.12
LOAD_FAST_CHECK = LOAD_FAST


def LOAD_FAST_AND_CLEAR(f, i):
    # PEP 709: an inlined comprehension saves the enclosing variable its own shadows (maybe
    # unbound: NULL goes on the stack) and restores it with STORE_FAST when it ends.
    f.stack.append(f.locals[i])
    f.locals[i] = NULL


def LOAD_LOCALS(f, arg):
    f.stack.append(namespace(f, "no locals found"))


def LOAD_FROM_DICT_OR_GLOBALS(f, name):
    s = f.stack
    s[-1] = lookup_name(f, s[-1], name)


def LOAD_FROM_DICT_OR_DEREF(f, i):
    s = f.stack
    v = mapping_get(s[-1], f.info.localsplus[i])
    s[-1] = deref(f, i) if v is NULL else v


def LOAD_SUPER_ATTR(f, arg):
    name, with_args = arg
    s = f.stack
    s.append(f.monitor.load_attr(super_of(f, with_args), name))


def super_of(f, with_args):
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
    s[-1] = getitem(f, s[-1], key)


def STORE_SLICE(f, arg):
    s = f.stack
    key = _slice_key(s)
    container = s.pop()
    setitem(f, container, key, s.pop())


def RETURN_CONST(f, value):
    f.retval = value
    return True


def SEND(f, target):
    # 3.12 on: the sub-iterator stays below its return value; END_SEND at the target drops it.
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


POP_JUMP_IF_TRUE = POP_JUMP_FORWARD_IF_TRUE
POP_JUMP_IF_FALSE = POP_JUMP_FORWARD_IF_FALSE
POP_JUMP_IF_NONE = POP_JUMP_FORWARD_IF_NONE
POP_JUMP_IF_NOT_NONE = POP_JUMP_FORWARD_IF_NOT_NONE

# Instructions of 3.12 and later that observers see under the name of the 3.11 instruction
# they behave as (since 3.12 the conditional jumps all jump forward).
OBSERVED_AS_311 = {"LOAD_FAST_CHECK": "LOAD_FAST", **{f"POP_JUMP_IF_{c}": f"POP_JUMP_FORWARD_IF_{c}"
                                                     for c in ("TRUE", "FALSE", "NONE", "NOT_NONE")}}


# --------------------------------------------------------------------------- intrinsics (3.12 on)
def INTRINSIC_PRINT(f, arg):
    PRINT_EXPR(f, arg)
    f.stack.append(None)


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


def INTRINSIC_STOPITERATION_ERROR(f, arg):
    # PEP 479, compiled into every generator's outermost handler.
    s = f.stack
    s[-1] = _stopiteration_error(f.code.co_flags, s[-1])


def CALL_INTRINSIC_1(f, arg):
    raise SystemError(f"invalid intrinsic function {arg}")


CALL_INTRINSIC_2 = CALL_INTRINSIC_1

# Intrinsics that are a 3.11 instruction: observers see them under that name.
_INTRINSIC_AS = {"INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE": "LIST_TO_TUPLE",
                 "INTRINSIC_ASYNC_GEN_WRAP": "ASYNC_GEN_WRAP",
                 "INTRINSIC_PREP_RERAISE_STAR": "PREP_RERAISE_STAR"}


# CPython 3.12's intrinsic numbering (Include/internal/pycore_intrinsics.h); later versions
# append to it.
INTRINSICS_1_312 = ("INTRINSIC_1_INVALID", "INTRINSIC_PRINT", "INTRINSIC_IMPORT_STAR",
                    "INTRINSIC_STOPITERATION_ERROR", "INTRINSIC_ASYNC_GEN_WRAP", "INTRINSIC_UNARY_POSITIVE",
                    "INTRINSIC_LIST_TO_TUPLE", "INTRINSIC_TYPEVAR", "INTRINSIC_PARAMSPEC",
                    "INTRINSIC_TYPEVARTUPLE", "INTRINSIC_SUBSCRIPT_GENERIC", "INTRINSIC_TYPEALIAS")
INTRINSICS_2_312 = ("INTRINSIC_2_INVALID", "INTRINSIC_PREP_RERAISE_STAR", "INTRINSIC_TYPEVAR_WITH_BOUND",
                    "INTRINSIC_TYPEVAR_WITH_CONSTRAINTS", "INTRINSIC_SET_FUNCTION_TYPE_PARAMS")


class Intrinsics:
    """``CALL_INTRINSIC_1/2`` of one version's intrinsic numbering (CPython's
    ``Include/internal/pycore_intrinsics.h``, as ``names_1``/``names_2``): one handler per
    intrinsic, chosen when the instruction is decoded; ``from m import *`` runs natively as
    the version's ``star_ops``.  Intrinsics not handled here run natively."""

    def __init__(self, names_1, names_2):
        self.names = {"CALL_INTRINSIC_1": names_1, "CALL_INTRINSIC_2": names_2}
        self.star_ops = (("CALL_INTRINSIC_1", names_1.index("INTRINSIC_IMPORT_STAR")), ("POP_TOP", 0))
        own = {"INTRINSIC_PRINT": INTRINSIC_PRINT, "INTRINSIC_IMPORT_STAR": self._import_star,
               "INTRINSIC_STOPITERATION_ERROR": INTRINSIC_STOPITERATION_ERROR,
               "INTRINSIC_ASYNC_GEN_WRAP": ASYNC_GEN_WRAP, "INTRINSIC_UNARY_POSITIVE": UNARY_POSITIVE,
               "INTRINSIC_LIST_TO_TUPLE": LIST_TO_TUPLE}
        self.handlers = {}
        for opname, nin in (("CALL_INTRINSIC_1", 1), ("CALL_INTRINSIC_2", 2)):
            for index, name in enumerate(self.names[opname]):
                if index:
                    self.handlers[opname, index] = own.get(name) or _native_intrinsic(opname, index, nin)

    def _import_star(self, f, arg):
        s = f.stack
        module = s.pop()
        ns = namespace(f, "no locals found during 'import *'")
        nativeops.import_star(module, f.globals, ns, self.star_ops)
        s.append(None)

    def observed_name(self, opname, index):
        """The name observers see intrinsic ``index`` of ``opname`` under."""
        names = self.names[opname]
        name = names[index] if index < len(names) else opname
        return _INTRINSIC_AS.get(name, name)

    def select(self, ins, code):
        """The decoded step of a ``CALL_INTRINSIC_1/2``."""
        handler = self.handlers.get((ins.opname, ins.arg), CALL_INTRINSIC_1)
        return [(ins._replace(opname=self.observed_name(ins.opname, ins.arg)), handler, ins.arg)]

    def forms(self):
        """The observed names of the intrinsics (each a form with its own handler)."""
        return tuple(self.observed_name(opname, index) for opname, index in self.handlers)


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


# --------------------------------------------------------------------------- decoding
def jump_target(ins, code):
    """A jump's target as a code-unit index (dis resolves relative jumps to offsets)."""
    return ins.argval // 2


def name_arg(ins, code):
    """The name an instruction's argument indexes."""
    return ins.argval


def const_arg(ins, code):
    """The constant an instruction's argument indexes."""
    # (dis leaves KW_NAMES' constant unresolved: index co_consts directly for every user.)
    return code.co_consts[ins.arg]


def global_arg(ins, code):
    """LOAD_GLOBAL's ``(name, push a NULL first?)``."""
    return code.co_names[ins.arg >> 1], ins.arg & 1


def arg_decoders(**special):
    """opname -> ``decoder(ins, code)`` giving the handler's argument, for this interpreter's
    jumps, names and constants; ``special`` adds or overrides entries."""
    table = {}
    for op in dis.hasjrel + dis.hasjabs:
        table[dis.opname[op]] = jump_target
    for op in dis.hasname:
        table[dis.opname[op]] = name_arg
    table.update(LOAD_CONST=const_arg, LOAD_GLOBAL=global_arg, KW_NAMES=const_arg)
    table.update(special)
    return table


def handler_table(own: dict, never_executed: dict) -> dict:
    """opname -> handler for every opcode of this interpreter that can execute: the version
    module's own handler (``own`` is its namespace) where it has one, else the shared one."""
    shared = globals()
    return {name: own[name] if name in own else shared[name]
            for name in dis.opmap if name not in never_executed}


def _never_dispatched(f, arg):
    raise SystemError(f"magpy: the instruction at offset {f.lasti * 2} of {f.code.co_qualname} "
                      "is never dispatched")


def decoder(handlers: dict, decoders: dict, selectors: dict, observed, join=None):
    """A ``decode(code, instructions, n)`` giving a code object's dispatch table and its
    instructions as observers see them.

    Each instruction decodes to *steps* ``(observed instruction, handler, arg)``.
    ``selectors`` maps an opname to ``select(ins, code) -> steps`` for an instruction whose
    argument picks the operation (one handler per form, chosen once here) or that runs as
    more than one step; any other instruction is one step: its handler with its decoded
    argument (``decoders``), observed as ``observed(ins)``.  A step after the first runs from
    the instruction's next code unit, an inline-cache entry nothing else dispatches.
    ``join(instructions, steps)`` may rewrite the steps of instructions that the compiler
    always emits together.
    """
    def steps_of(ins, code):
        select = selectors.get(ins.opname)
        if select is not None:
            return select(ins, code)
        d = decoders.get(ins.opname)
        handler = handlers.get(ins.opname, _never_dispatched)
        return [(observed(ins), handler, d(ins, code) if d is not None else ins.arg)]

    def decode(code, instructions, n):
        """Per code-unit index: ``(handler, arg, next index)`` and the observed instruction."""
        steps = [steps_of(ins, code) for ins in instructions]
        if join is not None:
            join(instructions, steps)
        ops = [None] * n
        seen = [None] * n
        for k, ins in enumerate(instructions):
            nxt = instructions[k + 1].offset // 2 if k + 1 < len(instructions) else n
            at = ins.offset // 2
            for j, (shown, handler, arg) in enumerate(steps[k], at):
                ops[j] = (handler, arg, j + 1 if j + 1 < at + len(steps[k]) else nxt)
                seen[j] = shown if j == at else shown._replace(offset=2 * j)
        return ops, seen
    return decode


# Values each instruction pops (or reads in place) from the stack, as a function of its
# argument, by the name observers see it under (``bytecode.observed``): an observer's
# ``inputs`` are those stack values, its ``outputs`` what is there afterwards.
POPS = {
    "BINARY_SUBSCR": 2, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "BINARY_OP": 2, "COMPARE_OP": 2,
    "IS_OP": 2, "CONTAINS_OP": 2, "MATCH_KEYS": 2, "CHECK_EXC_MATCH": 2, "CHECK_EG_MATCH": 2,
    "WITH_EXCEPT_START": 4, "END_ASYNC_FOR": 2, "PREP_RERAISE_STAR": 2, "STORE_ATTR": 2,
    "IMPORT_NAME": 2, "SEND": 2, "MATCH_CLASS": 3, "BINARY_SLICE": 3, "STORE_SLICE": 4,
    "END_SEND": 2, "END_FOR": 2, "CLEANUP_THROW": 3, "LOAD_SUPER_ATTR": 3,
    "INTRINSIC_TYPEVAR_WITH_BOUND": 2, "INTRINSIC_TYPEVAR_WITH_CONSTRAINTS": 2,
    "INTRINSIC_SET_FUNCTION_TYPE_PARAMS": 2, "INTRINSIC_SET_TYPEPARAM_DEFAULT": 2,
    "STORE_FAST_STORE_FAST": 2, "SET_FUNCTION_ATTRIBUTE": 2, "CALL_KW": lambda n: n + 3,
    "SWAP": lambda n: n, "COPY": lambda n: n, "BUILD_TUPLE": lambda n: n,
    "BUILD_LIST": lambda n: n, "BUILD_SET": lambda n: n, "BUILD_STRING": lambda n: n,
    "BUILD_MAP": lambda n: 2 * n, "BUILD_CONST_KEY_MAP": lambda n: n + 1,
    "BUILD_SLICE": lambda n: n, "RAISE_VARARGS": lambda n: n, "CALL": lambda n: n + 2,
    "CALL_FUNCTION_EX": lambda fl: 3 + (fl & 1), "FORMAT_VALUE": lambda fl: 1 + bool(fl & 4),
    "MAKE_FUNCTION": lambda fl: 1 + bin(fl & 15).count("1"),
    "LIST_APPEND": lambda i: i + 1, "SET_ADD": lambda i: i + 1, "MAP_ADD": lambda i: i + 2,
    "LIST_EXTEND": lambda i: i + 1, "SET_UPDATE": lambda i: i + 1,
    "DICT_UPDATE": lambda i: i + 1, "DICT_MERGE": lambda i: i + 1,
    "RERAISE": lambda i: i + 1,
}
_POP_NONE = {"NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "PUSH_NULL", "LOAD_CONST", "LOAD_FAST",
             "DELETE_FAST", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_CLOSURE", "LOAD_DEREF",
             "DELETE_DEREF", "LOAD_CLASSDEREF", "LOAD_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME",
             "DELETE_NAME", "SETUP_ANNOTATIONS", "JUMP_FORWARD", "JUMP_BACKWARD",
             "JUMP_BACKWARD_NO_INTERRUPT", "KW_NAMES", "LOAD_BUILD_CLASS",
             "LOAD_ASSERTION_ERROR", "RETURN_GENERATOR", "LOAD_FAST_AND_CLEAR", "RETURN_CONST",
             "LOAD_LOCALS", "LOAD_FAST_LOAD_FAST"}


def pops(opname, arg):
    """How many stack values the instruction reads (its observer ``inputs``)."""
    p = POPS.get(opname)
    if p is None:
        return 0 if opname in _POP_NONE else 1
    return p(arg) if callable(p) else p


def binder_code(code, nparams):
    """A code object with ``code``'s signature whose body returns its parameters as a tuple."""
    ops = [("RESUME", 0)] + [("LOAD_FAST", i) for i in range(nparams)]
    ops += [("BUILD_TUPLE", nparams), ("RETURN_VALUE", 0)]
    flags = code.co_flags & ~(CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR)
    return code.replace(
        co_code=nativeops.assemble(ops), co_consts=(None,), co_names=(),
        co_varnames=code.co_varnames[:nparams], co_nlocals=nparams, co_cellvars=(),
        co_freevars=(), co_flags=flags, co_stacksize=nparams + 1, co_linetable=b"",
        co_exceptiontable=b"")


# Control flow facts shared by the versions (magpy.graphs.controlflow): the jump that ends an ``if``
# arm over its ``else``, the one ending a loop body, a ``for`` loop's iterator maker and
# head, the instruction making a cell and those writing one (an effect unless it is new).
FORWARD_JUMP = "JUMP_FORWARD"
BACKWARD_JUMP = "JUMP_BACKWARD"   # (an if/else ending a loop body: its first arm jumps back)
ITER_MAKE, ITER_NEXT = "GET_ITER", "FOR_ITER"
CELL_MAKE = "MAKE_CELL"
CELL_WRITES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
# Instructions with an effect outside the frame's locals, in both versions (each adds its own).
EFFECT_OPS = frozenset({"STORE_ATTR", "DELETE_ATTR", "STORE_SUBSCR", "DELETE_SUBSCR", "STORE_GLOBAL",
                        "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME", "IMPORT_NAME",
                        "BEFORE_WITH", "BEFORE_ASYNC_WITH", "SETUP_ANNOTATIONS"})

# The fast-local slots an instruction reads and writes (by observed name; 3.13's
# superinstructions pack two slots into their argument), and the instructions that only move
# values between the fast locals and the stack.
_WHOLE, _HIGH, _LOW = (lambda arg: arg), (lambda arg: arg >> 4), (lambda arg: arg & 15)
FAST_READS = {"LOAD_FAST": (_WHOLE,), "DELETE_FAST": (_WHOLE,), "LOAD_FAST_AND_CLEAR": (_WHOLE,),
              "LOAD_FAST_LOAD_FAST": (_HIGH, _LOW), "STORE_FAST_LOAD_FAST": (_LOW,)}
FAST_WRITES = {"STORE_FAST": (_WHOLE,), "DELETE_FAST": (_WHOLE,), "LOAD_FAST_AND_CLEAR": (_WHOLE,),
               "STORE_FAST_LOAD_FAST": (_HIGH,), "STORE_FAST_STORE_FAST": (_HIGH, _LOW)}
FAST_MOVES = frozenset(FAST_READS) | frozenset(FAST_WRITES)
# Those that pop stack values into their slots (a ``for`` loop's body binding its variables).
FAST_STORES = frozenset({"STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"})


def fast_slots(table: dict, ins) -> tuple:
    """The slots instruction ``ins`` reads (``table`` FAST_READS) or writes (FAST_WRITES),
    in the order it does."""
    return tuple(slot(ins.arg) for slot in table.get(ins.opname, ()))
