"""Operators whose special methods are Python code: CPython's dispatch, with the methods entered.

``a + b``, ``a < b``, ``x in c``, ``if obj:``, ``len(obj)``, ``-obj``, ``hash(obj)`` call
special methods from C (``binary_op1``, ``do_richcompare``, ``slot_nb_bool`` ...).  Run
natively, a Python ``__add__`` or ``__contains__`` would execute unmonitored: its reads and
writes unseen, its frames not the program's.  So when an operand's type defines the method
in Python, the monitor carries out CPython's dispatch itself, step by step and in
CPython's order, and *enters* the Python methods (``Monitor.call``); every other step (C
slots, the final error) happens as CPython does it.  When no Python method can be reached,
the operator runs natively, which is also the fast path for tensors and numbers.

Two facts of CPython shape the code:

- A Python class's numeric slot is one generic function (``slot_nb_add``) whichever of
  ``__add__``/``__radd__`` it defines, and it handles *both* operand orders
  (``SLOT1BINFULL``), so two Python classes share a slot and ``binary_op1`` calls only the
  left one's, which then tries the right operand's reflected method itself.
- A C type's slot is a C function; calling its slot wrapper (``int.__add__(v, w)`` for the
  left operand, ``int.__radd__(w, v)`` for the right) runs that function on ``(v, w)``.

C sequence types implement ``+``/``*`` as ``sq_concat``/``sq_repeat`` (their ``__add__`` and
``__mul__`` are wrappers of those), tried only after the numeric protocol gave NotImplemented.
"""
from __future__ import annotations

import array
import collections
import operator
import sys
import types
import warnings

from magpy.capture.monitor.protocols import NULL, tp_name, type_lookup

FunctionType = types.FunctionType
WrapperDescriptorType = types.WrapperDescriptorType
_HEAPTYPE = 1 << 9
_METHOD_DESCRIPTOR = 1 << 17   # Py_TPFLAGS_METHOD_DESCRIPTOR: called unbound, self first
_OBJECT_NE = object.__dict__["__ne__"]
_GENERIC = "generic"

# symbol, method, reflected method, native operator  (index = BINARY_OP's argument)
BINARY = [
    ("+", "__add__", "__radd__", operator.add), ("&", "__and__", "__rand__", operator.and_),
    ("//", "__floordiv__", "__rfloordiv__", operator.floordiv),
    ("<<", "__lshift__", "__rlshift__", operator.lshift), ("@", "__matmul__", "__rmatmul__", operator.matmul),
    ("*", "__mul__", "__rmul__", operator.mul), ("%", "__mod__", "__rmod__", operator.mod),
    ("|", "__or__", "__ror__", operator.or_), ("**", "__pow__", "__rpow__", operator.pow),
    (">>", "__rshift__", "__rrshift__", operator.rshift), ("-", "__sub__", "__rsub__", operator.sub),
    ("/", "__truediv__", "__rtruediv__", operator.truediv), ("^", "__xor__", "__rxor__", operator.xor),
]
DIVMOD = ("divmod()", "__divmod__", "__rdivmod__", divmod)
INPLACE = [operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
           operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub,
           operator.itruediv, operator.ixor]

# symbol, method, swapped method  (index = COMPARE_OP's argument, CPython's Py_LT ... Py_GE)
COMPARE = [("<", "__lt__", "__gt__"), ("<=", "__le__", "__ge__"), ("==", "__eq__", "__eq__"),
           ("!=", "__ne__", "__ne__"), (">", "__gt__", "__lt__"), (">=", "__ge__", "__le__")]
COMPARE_OPS = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)
_SWAPPED = [[c[1] for c in COMPARE].index(c[2]) for c in COMPARE]
EQ = 2

# unary special methods and the native operation to fall back to
UNARY = {"__neg__": operator.neg, "__pos__": operator.pos, "__invert__": operator.invert, "__abs__": abs}

# C types whose __add__/__mul__/__rmul__/__iadd__/__imul__ wrap sequence slots, not numeric ones.
_SEQUENCES = (list, tuple, str, bytes, bytearray, collections.deque, array.array)
_SEQUENCE_SLOTS = frozenset({"__add__", "__mul__", "__rmul__", "__iadd__", "__imul__"})
_C_METHODS = (types.WrapperDescriptorType, types.MethodDescriptorType, types.BuiltinFunctionType,
              types.MethodWrapperType, types.ClassMethodDescriptorType)
_native_types: set = set()   # C types: their attributes cannot change, so they never have Python methods


# --------------------------------------------------------------------------- lookups
def special(mon, tp, name):
    """The Python-level special method the monitor enters for ``tp.name`` (a function, or a
    staticmethod, classmethod, partialmethod, callable object ...), else None (it runs natively)."""
    if tp in _native_types:
        return None
    if not tp.__flags__ & _HEAPTYPE:
        _native_types.add(tp)
        return None
    fn = getattr(tp, name, None)
    if fn is None or type(fn) in _C_METHODS:
        return None
    raw = type_lookup(tp, name)
    if raw is NULL or raw is None or (type(raw) is FunctionType and mon.policy.runs_natively(raw)):
        return None
    return raw


def invoke(mon, raw, obj, *args):
    """Call the special method ``raw`` (found on ``type(obj)``) as CPython's
    ``vectorcall_unbound`` does: a plain function gets ``obj`` prepended, anything else is
    bound through its ``__get__`` first.  Python code is entered, the rest runs natively."""
    if type(raw) is FunctionType:
        if mon.policy.runs_natively(raw):
            return raw(obj, *args)
        return mon.call(raw, (obj,) + args, None)
    if type(raw).__flags__ & _METHOD_DESCRIPTOR:
        return raw(obj, *args)
    get = getattr(type(raw), "__get__", None)
    bound = raw if get is None else get(raw, obj, type(obj))
    return mon.call(bound, args, None)   # a staticmethod, classmethod, partialmethod, callable ...


def _call_maybe(mon, obj, name, *args):
    """``vectorcall_maybe``: ``obj.name(*args)`` looked up on the type; NotImplemented when absent."""
    raw = type_lookup(type(obj), name)
    if raw is NULL:
        return NotImplemented
    return invoke(mon, raw, obj, *args)


# --------------------------------------------------------------------------- binary operators
def _sequence_slot(tp, name):
    """The wrapper of ``tp``'s sequence slot (``sq_concat``, ``sq_repeat`` ...) named ``name``,
    or None (a Python method of that name leaves the sequence slot empty)."""
    raw = type_lookup(tp, name)
    if type(raw) is WrapperDescriptorType and raw.__objclass__ in _SEQUENCES and name in _SEQUENCE_SLOTS:
        return raw
    return None


def _number_lookup(tp, name):
    raw = type_lookup(tp, name)
    return NULL if raw is not NULL and _sequence_slot(tp, name) is raw else raw


def _slot(tp, op, rop):
    """What ``tp``'s numeric slot for ``op`` is: None, the generic Python slot, or a C slot
    identified by its wrapper descriptors."""
    a, b = _number_lookup(tp, op), _number_lookup(tp, rop)
    if a is NULL and b is NULL:
        return None
    if (a is NULL or type(a) is WrapperDescriptorType) and (b is NULL or type(b) is WrapperDescriptorType):
        return (a, b)
    return _GENERIC


def _overloaded(left, right, name):
    """``method_is_overloaded``: does ``right`` define ``name`` differently from ``left``?"""
    b = getattr(right, name, NULL)
    if b is NULL:
        return False
    a = getattr(left, name, NULL)
    return a is NULL or (a is not b and a != b)


def _generic_binary(mon, v, w, op, rop):
    """``SLOT1BINFULL`` called with ``(v, w)``: the generic slot of a Python class."""
    tp_v, tp_w = type(v), type(w)
    do_other = tp_v is not tp_w and _slot(tp_w, op, rop) is _GENERIC
    if _slot(tp_v, op, rop) is _GENERIC:
        if do_other and issubclass(tp_w, tp_v) and _overloaded(tp_v, tp_w, rop):
            r = _call_maybe(mon, w, rop, v)
            if r is not NotImplemented:
                return r
            do_other = False
        r = _call_maybe(mon, v, op, w)
        if r is not NotImplemented or tp_v is tp_w:
            return r
    if do_other:
        return _call_maybe(mon, w, rop, v)
    return NotImplemented


def _call_slot(mon, slot, v, w, left, op, rop):
    if slot is _GENERIC:
        return _generic_binary(mon, v, w, op, rop)
    a, b = slot
    if left:   # the left operand's C slot, through its wrapper: func(v, w)
        return a(v, w) if a is not NULL else b(v, w)
    return b(w, v) if b is not NULL else a(w, v)


def _binary_op1(mon, v, w, op, rop):
    """``binary_op1``: the left slot, the right slot (first if it belongs to a subclass)."""
    tp_v, tp_w = type(v), type(w)
    slotv = _slot(tp_v, op, rop)
    slotw = None
    if tp_w is not tp_v:
        slotw = _slot(tp_w, op, rop)
        if slotw == slotv:
            slotw = None
    if slotv is not None:
        if slotw is not None and issubclass(tp_w, tp_v):
            x = _call_slot(mon, slotw, v, w, False, op, rop)
            if x is not NotImplemented:
                return x
            slotw = None
        x = _call_slot(mon, slotv, v, w, True, op, rop)
        if x is not NotImplemented:
            return x
    if slotw is not None:
        return _call_slot(mon, slotw, v, w, False, op, rop)
    return NotImplemented


def _sequence_fallback(mon, v, w, op, inplace):
    """What ``PyNumber_Add``/``Multiply`` (and their in-place forms) do once the numeric
    protocol gave NotImplemented: concatenate or repeat a sequence operand; else NotImplemented."""
    tp_v, tp_w = type(v), type(w)
    if op == "__add__":
        f = (inplace and _sequence_slot(tp_v, "__iadd__")) or _sequence_slot(tp_v, "__add__")
        return NotImplemented if f is None else f(v, w)
    if op != "__mul__":
        return NotImplemented
    f = (inplace and _sequence_slot(tp_v, "__imul__")) or _sequence_slot(tp_v, "__mul__")
    if f is not None:
        return _repeat(mon, f, v, w)
    if inplace and _has_sequence_methods(v):
        return NotImplemented   # PyNumber_InPlaceMultiply looks no further than v's sequence methods
    f = _sequence_slot(tp_w, "__mul__")
    return NotImplemented if f is None else _repeat(mon, f, w, v)


def _repeat_count_special(mon, tp_v, tp_w, op) -> bool:
    # seq * n converts n with its __index__, which may be Python.
    return op == "__mul__" and (special(mon, tp_v, "__index__") is not None
                                or special(mon, tp_w, "__index__") is not None)


def _has_sequence_methods(v) -> bool:
    # tp_as_sequence: every Python class has one; of C types, the containers.
    return bool(type(v).__flags__ & _HEAPTYPE) or isinstance(v, (*_SEQUENCES, dict, set, frozenset))


def _repeat(mon, f, seq, n):
    """``sequence_repeat``: the count through ``__index__``."""
    if type_lookup(type(n), "__index__") is NULL:
        raise TypeError(f"can't multiply sequence by non-int of type '{tp_name(type(n))}'")
    count = index(mon, n)
    if not -sys.maxsize - 1 <= count <= sys.maxsize:
        raise OverflowError(f"cannot fit '{tp_name(type(n))}' into an index-sized integer")
    return f(seq, count)


def index(mon, v) -> int:
    """``_PyNumber_Index``: ``v`` itself for an int, else its ``__index__`` (which must give an int)."""
    if type(v) is int:
        return v
    fn = special(mon, type(v), "__index__")
    if fn is None:
        return operator.index(v)
    r = invoke(mon, fn, v)
    if type(r) is not int:
        if not isinstance(r, int):
            raise TypeError(f"__index__ returned non-int (type {tp_name(type(r))})")
        warnings.warn(f"__index__ returned non-int (type {tp_name(type(r))}).  The ability to return an "
                      "instance of a strict subclass of int is deprecated, and may be removed in a future "
                      "version of Python.", DeprecationWarning, stacklevel=1)
    return r


def _unsupported(sym, v, w):
    if sym == "**":
        sym = "** or pow()"
    return TypeError(f"unsupported operand type(s) for {sym}: '{tp_name(type(v))}' and '{tp_name(type(w))}'")


def binary(mon, v, w, index):
    """``v <op> w`` for BINARY_OP's non-in-place ``index``."""
    if type(v) in _native_types and type(w) in _native_types:
        return BINARY[index][3](v, w)   # the common case: C types have no Python methods
    return binary_row(mon, v, w, BINARY[index])


def binary_row(mon, v, w, row):
    """A binary operator given by its ``(symbol, method, reflected method, native)`` row."""
    sym, op, rop, native = row
    tp_v, tp_w = type(v), type(w)
    if special(mon, tp_v, op) is None and (tp_w is tp_v or special(mon, tp_w, rop) is None) \
            and not _repeat_count_special(mon, tp_v, tp_w, op):
        return native(v, w)
    x = _binary_op1(mon, v, w, op, rop)
    if x is NotImplemented:
        x = _sequence_fallback(mon, v, w, op, False)
    if x is NotImplemented:
        raise _unsupported(sym, v, w)
    return x


def inplace(mon, v, w, index):
    """``v <op>= w``: ``__i<op>__`` first, then the binary protocol."""
    sym, op, rop, _ = BINARY[index]
    iop = "__i" + op[2:]
    tp_v, tp_w = type(v), type(w)
    if special(mon, tp_v, iop) is None and special(mon, tp_v, op) is None \
            and (tp_w is tp_v or special(mon, tp_w, rop) is None) \
            and not _repeat_count_special(mon, tp_v, tp_w, op):
        return INPLACE[index](v, w)
    raw = _number_lookup(tp_v, iop)
    if raw is not NULL:
        x = invoke(mon, raw, v, w)
        if x is not NotImplemented:
            return x
    x = _binary_op1(mon, v, w, op, rop)
    if x is NotImplemented:
        x = _sequence_fallback(mon, v, w, op, True)
    if x is NotImplemented:
        raise _unsupported(sym + "=", v, w)
    return x


# --------------------------------------------------------------------------- comparisons
def _richcompare_slot(mon, v, w, index):
    """``type(v)->tp_richcompare(v, w, op)``: the method named for ``op``, looked up on the
    type (every type has one, at least ``object``'s)."""
    name = COMPARE[index][1]
    raw = type_lookup(type(v), name)
    if raw is _OBJECT_NE and special(mon, type(v), "__eq__") is not None:
        # object.__ne__ calls the type's __eq__ and inverts it, unless NotImplemented.
        r = _richcompare_slot(mon, v, w, EQ)
        return r if r is NotImplemented else not truth(mon, r)
    if raw is NULL:
        return NotImplemented
    return invoke(mon, raw, v, w)


def _compare_special(mon, tp, index):
    name = COMPARE[index][1]
    return special(mon, tp, name) is not None or (name == "__ne__" and special(mon, tp, "__eq__") is not None)


def compare(mon, v, w, index):
    """``v <op> w`` for COMPARE_OP's ``index`` (``do_richcompare``)."""
    tp_v, tp_w = type(v), type(w)
    if tp_v in _native_types and tp_w in _native_types:
        return COMPARE_OPS[index](v, w)
    swapped_index = _SWAPPED[index]
    if not _compare_special(mon, tp_v, index) and not _compare_special(mon, tp_w, swapped_index):
        return COMPARE_OPS[index](v, w)
    checked_reverse = False
    if tp_v is not tp_w and issubclass(tp_w, tp_v):
        checked_reverse = True
        r = _richcompare_slot(mon, w, v, swapped_index)
        if r is not NotImplemented:
            return r
    r = _richcompare_slot(mon, v, w, index)
    if r is not NotImplemented:
        return r
    if not checked_reverse:
        r = _richcompare_slot(mon, w, v, swapped_index)
        if r is not NotImplemented:
            return r
    if index == EQ:
        return v is w
    if index == EQ + 1:
        return v is not w
    raise TypeError(f"'{COMPARE[index][0]}' not supported between instances of "
                    f"'{tp_name(tp_v)}' and '{tp_name(tp_w)}'")


def equal(mon, v, w) -> bool:
    """``PyObject_RichCompareBool(v, w, Py_EQ)``: identity first, then ``==`` and its truth."""
    return v is w or truth(mon, compare(mon, v, w, EQ))


# --------------------------------------------------------------------------- truth, length
def truth(mon, v) -> bool:
    """``PyObject_IsTrue``: ``__bool__`` (which must return a bool), else ``__len__``, else True."""
    if v is True or v is False or v is None:
        return v is True
    tp = type(v)
    if tp in _native_types:
        return bool(v)
    fn = special(mon, tp, "__bool__")
    if fn is not None:
        r = invoke(mon, fn, v)
        if type(r) is not bool:
            raise TypeError(f"__bool__ should return bool, returned {tp_name(type(r))}")
        return r
    if type_lookup(tp, "__bool__") is NULL and special(mon, tp, "__len__") is not None:
        return length(mon, v) != 0
    return bool(v)


def length(mon, v) -> int:
    """``len(v)``: ``__len__``, its result converted as ``slot_sq_length`` does."""
    fn = special(mon, type(v), "__len__")
    if fn is None:
        return len(v)
    n = index(mon, invoke(mon, fn, v))
    if n < 0:
        raise ValueError("__len__() should return >= 0")
    if n > sys.maxsize:
        raise OverflowError("cannot fit 'int' into an index-sized integer")
    return n


# --------------------------------------------------------------------------- containment
def contains(mon, container, item) -> bool:
    """``item in container`` (``PySequence_Contains``): ``__contains__``, else a search by
    iteration (``__iter__``, or ``__getitem__`` with 0, 1, 2 ...) comparing with ``==``."""
    tp = type(container)
    fn = special(mon, tp, "__contains__")
    if fn is not None:
        return truth(mon, invoke(mon, fn, container, item))
    raw = type_lookup(tp, "__contains__")
    if raw is None:
        raise TypeError(f"'{tp_name(tp)}' object is not a container")
    if raw is _LIST_CONTAINS or raw is _TUPLE_CONTAINS:
        return _search_sequence(mon, container, item)
    if raw is not NULL or (special(mon, tp, "__iter__") is None and special(mon, tp, "__getitem__") is None):
        return item in container
    if type_lookup(tp, "__iter__") is NULL:
        return _search_by_index(mon, container, item)
    failed = False
    try:
        it = mon.get_iter(container)
    except TypeError:
        failed = True
    if failed:
        raise TypeError(f"argument of type '{tp_name(tp)}' is not iterable")
    while True:
        x = mon.iter_next(it)
        if x is NULL:
            return False
        if equal(mon, x, item):
            return True


_LIST_CONTAINS = list.__dict__["__contains__"]
_TUPLE_CONTAINS = tuple.__dict__["__contains__"]


def _search_sequence(mon, seq, item) -> bool:
    """``list_contains``/``tuple_contains``: ``seq[i] == item`` in order, identity first; native
    unless a Python ``__eq__`` would run (the item's, or an element's)."""
    if not _compare_special(mon, type(item), EQ) and not any(
            _compare_special(mon, t, EQ) for t in {type(x) for x in seq}):
        return item in seq
    i = 0
    while i < len(seq):   # the list may change while __eq__ runs: re-read its length
        if equal(mon, seq[i], item):
            return True
        i += 1
    return False


def _search_by_index(mon, container, item) -> bool:
    """The old sequence protocol's iterator: ``container[0]``, ``[1]`` ... until IndexError."""
    getitem = type_lookup(type(container), "__getitem__")
    i = 0
    while True:
        stop = False
        try:
            x = invoke(mon, getitem, container, i)
        except (IndexError, StopIteration):
            stop = True
        if stop:
            mon.propagating = None
            return False
        if equal(mon, x, item):
            return True
        i += 1


# --------------------------------------------------------------------------- unary, hash
def unary(mon, v, name):
    """``-v``, ``+v``, ``~v``, ``abs(v)``."""
    fn = special(mon, type(v), name)
    if fn is None:
        return UNARY[name](v)
    return invoke(mon, fn, v)


def hash_of(mon, v) -> int:
    """``hash(v)`` as ``slot_tp_hash`` computes it from a Python ``__hash__``."""
    fn = special(mon, type(v), "__hash__")
    if fn is None:
        return hash(v)
    r = invoke(mon, fn, v)
    if not isinstance(r, int):
        raise TypeError("__hash__ method should return an integer")
    h = int.__index__(r) if -sys.maxsize - 1 <= r <= sys.maxsize else int.__hash__(r)
    return -2 if h == -1 else h
