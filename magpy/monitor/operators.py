"""Operators whose special methods are Python code: CPython's dispatch, with the methods entered.

``a + b``, ``a < b``, ``x in c``, ``if obj:``, ``len(obj)``, ``-obj``, ``hash(obj)`` call
special methods from C (``binary_op1``, ``do_richcompare``, ``slot_nb_bool`` ...).  Run
natively, a Python ``__add__`` or ``__contains__`` would execute unmonitored: its reads and
writes unseen, its frames not the program's.  So when an operand's type defines the method
in Python, the monitor carries out CPython 3.11's dispatch itself, step by step and in
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

Sequence types implement ``+``/``*`` as ``sq_concat``/``sq_repeat``, tried after the numeric
protocol; they are left to CPython (native) whenever they take part in such an operator.
"""
from __future__ import annotations

import array
import collections
import operator
import sys
import types

from magpy.monitor.protocols import NULL, tp_name, type_lookup

FunctionType = types.FunctionType
WrapperDescriptorType = types.WrapperDescriptorType
_HEAPTYPE = 1 << 9
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
INPLACE = [operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
           operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub,
           operator.itruediv, operator.ixor]

# symbol, method, swapped method  (index = COMPARE_OP's argument, CPython's Py_LT ... Py_GE)
COMPARE = [("<", "__lt__", "__gt__"), ("<=", "__le__", "__ge__"), ("==", "__eq__", "__eq__"),
           ("!=", "__ne__", "__ne__"), (">", "__gt__", "__lt__"), (">=", "__ge__", "__le__")]
COMPARE_OPS = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)
EQ = 2

# unary special methods and the native operation to fall back to
UNARY = {"__neg__": operator.neg, "__pos__": operator.pos, "__invert__": operator.invert, "__abs__": abs}

_SEQUENCES = (list, tuple, str, bytes, bytearray, collections.deque, array.array, memoryview, range)
_SEQUENCE_OPS = frozenset({"__add__", "__mul__"})
_native_types: set = set()   # C types: their attributes cannot change, so they never have Python methods


# --------------------------------------------------------------------------- lookups
def _entered(mon, tp, name):
    """The Python function the monitor would enter for ``tp.name``, else None."""
    if tp in _native_types:
        return None
    if not tp.__flags__ & _HEAPTYPE:
        _native_types.add(tp)
        return None
    fn = getattr(tp, name, None)
    if type(fn) is not FunctionType or mon.policy.runs_natively(fn):
        return None
    raw = type_lookup(tp, name)
    return raw if raw is fn else None


def invoke(mon, raw, obj, *args):
    """Call the special method ``raw`` (found on ``type(obj)``) as CPython's
    ``vectorcall_unbound`` does: a plain function gets ``obj`` prepended, anything else is
    bound through its ``__get__`` first.  Python code is entered, the rest runs natively."""
    if type(raw) is FunctionType:
        if mon.policy.runs_natively(raw):
            return raw(obj, *args)
        return mon.call(raw, (obj,) + args, None)
    get = getattr(type(raw), "__get__", None)
    bound = raw if get is None else get(raw, obj, type(obj))
    if type(bound) is types.MethodType and type(bound.__func__) is FunctionType:
        return mon.call(bound, args, None)
    return bound(*args)


def _call_maybe(mon, obj, name, *args):
    """``vectorcall_maybe``: ``obj.name(*args)`` looked up on the type; NotImplemented when absent."""
    raw = type_lookup(type(obj), name)
    if raw is NULL:
        return NotImplemented
    return invoke(mon, raw, obj, *args)


# --------------------------------------------------------------------------- binary operators
def _slot(tp, op, rop):
    """What ``tp``'s numeric slot for ``op`` is: None, the generic Python slot, or a C slot
    identified by its wrapper descriptors."""
    a, b = type_lookup(tp, op), type_lookup(tp, rop)
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


def _sequence_involved(v, w, op):
    return op in _SEQUENCE_OPS and (isinstance(v, _SEQUENCES) or isinstance(w, _SEQUENCES))


def _unsupported(sym, v, w):
    if sym in ("**", "**="):
        sym = "** or pow()"
    return TypeError(f"unsupported operand type(s) for {sym}: '{tp_name(type(v))}' and '{tp_name(type(w))}'")


def binary(mon, v, w, index):
    """``v <op> w`` for BINARY_OP's non-in-place ``index``."""
    sym, op, rop, native = BINARY[index]
    tp_v, tp_w = type(v), type(w)
    if (_entered(mon, tp_v, op) is None and (tp_w is tp_v or _entered(mon, tp_w, rop) is None)) \
            or _sequence_involved(v, w, op):
        return native(v, w)
    x = _binary_op1(mon, v, w, op, rop)
    if x is NotImplemented:
        raise _unsupported(sym, v, w)
    return x


def inplace(mon, v, w, index):
    """``v <op>= w``: ``__i<op>__`` first, then the binary protocol."""
    sym, op, rop, _ = BINARY[index]
    iop = "__i" + op[2:]
    tp_v, tp_w = type(v), type(w)
    if (_entered(mon, tp_v, iop) is None and _entered(mon, tp_v, op) is None
            and (tp_w is tp_v or _entered(mon, tp_w, rop) is None)) or _sequence_involved(v, w, op):
        return INPLACE[index](v, w)
    raw = type_lookup(tp_v, iop)
    if raw is not NULL:
        x = invoke(mon, raw, v, w)
        if x is not NotImplemented:
            return x
    x = _binary_op1(mon, v, w, op, rop)
    if x is NotImplemented:
        raise _unsupported(sym + "=", v, w)
    return x


# --------------------------------------------------------------------------- comparisons
def _richcompare_slot(mon, v, w, index):
    """``type(v)->tp_richcompare(v, w, op)``: the method named for ``op``, looked up on the
    type (every type has one, at least ``object``'s)."""
    name = COMPARE[index][1]
    raw = type_lookup(type(v), name)
    if raw is _OBJECT_NE and _entered(mon, type(v), "__eq__") is not None:
        # object.__ne__ calls the type's __eq__ and inverts it, unless NotImplemented.
        r = _richcompare_slot(mon, v, w, EQ)
        return r if r is NotImplemented else not truth(mon, r)
    if raw is NULL:
        return NotImplemented
    return invoke(mon, raw, v, w)


def _compare_entered(mon, tp, index):
    name = COMPARE[index][1]
    return _entered(mon, tp, name) is not None or (name == "__ne__" and _entered(mon, tp, "__eq__") is not None)


def compare(mon, v, w, index):
    """``v <op> w`` for COMPARE_OP's ``index`` (``do_richcompare``)."""
    tp_v, tp_w = type(v), type(w)
    swapped = COMPARE[index][2]
    swapped_index = [c[1] for c in COMPARE].index(swapped)
    if not _compare_entered(mon, tp_v, index) and (tp_w is tp_v or not _compare_entered(mon, tp_w, swapped_index)):
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
    fn = _entered(mon, tp, "__bool__")
    if fn is not None:
        r = mon.call(fn, (v,), None)
        if type(r) is not bool:
            raise TypeError(f"__bool__ should return bool, returned {tp_name(type(r))}")
        return r
    if type_lookup(tp, "__bool__") is NULL and _entered(mon, tp, "__len__") is not None:
        return length(mon, v) != 0
    return bool(v)


def length(mon, v) -> int:
    """``len(v)``: ``__len__``, its result converted as ``slot_sq_length`` does."""
    fn = _entered(mon, type(v), "__len__")
    if fn is None:
        return len(v)
    r = mon.call(fn, (v,), None)
    n = r if type(r) is int else operator.index(r)
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
    fn = _entered(mon, tp, "__contains__")
    if fn is not None:
        return truth(mon, mon.call(fn, (container, item), None))
    raw = type_lookup(tp, "__contains__")
    if raw is None:
        raise TypeError(f"'{tp_name(tp)}' object is not a container")
    if raw is not NULL or (_entered(mon, tp, "__iter__") is None and _entered(mon, tp, "__getitem__") is None):
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
    fn = _entered(mon, type(v), name)
    if fn is None:
        return UNARY[name](v)
    return mon.call(fn, (v,), None)


def hash_of(mon, v) -> int:
    """``hash(v)`` as ``slot_tp_hash`` computes it from a Python ``__hash__``."""
    fn = _entered(mon, type(v), "__hash__")
    if fn is None:
        return hash(v)
    r = mon.call(fn, (v,), None)
    if not isinstance(r, int):
        raise TypeError("__hash__ method should return an integer")
    h = r if -sys.maxsize - 1 <= r <= sys.maxsize else int.__hash__(r)
    return -2 if h == -1 else h
