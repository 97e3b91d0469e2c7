"""Differential corpus: Python special methods that CPython's operators and protocol builtins call.

PYTEST_DONT_REWRITE -- programs below use ``assert``; keep their real bytecode.

``a + b``, ``a == b``, ``x in c``, ``if obj:``, ``len(obj)``, ``-obj``, ``abs(obj)``, ``hash(obj)`` and
the ``operator`` module run the operand type's Python special method.  CPython's dispatch rules
decide *which* methods run, in which order and how often (reflected operands, subclass
priority, ``NotImplemented`` fallbacks, truth via ``__bool__``/``__len__``, ...).

Every special method below records its call in ``LOG``: ``(method, operands, caller)`` where
*caller* is ``sys._getframe(1).f_code.co_name`` seen from inside the method (followed up to our
own code when the caller is a stdlib-generated method, e.g. ``_gt_from_lt<case``).  Natively the
caller is the function that contains the operator; under the monitor it is the same only if the
monitor entered the method as a monitored frame.  So the log proves dispatch, order, call count
and that the method ran monitored.

Cases run through ``_run(fn, *operands)``: it clears the log, calls the case, turns an exception
into ``("raised", type, message)`` and returns ``(result, log)``.  A few cases let the exception
escape so the harness compares it itself.

Sections (case id prefixes):
  binop, binmix, inplace  generated: operators x class configurations x operand orders
  cmp                     generated: rich comparisons x configurations
  truth, len, unary, hash generated: contexts x configurations
  contains                ``in`` / ``not in``: __contains__, __iter__, old __getitem__ protocol
  opmod                   the operator module called from monitored code
  subtle                  hand-written dispatch rules and error messages
  builtin_sub             subclasses of int/float/str/list/dict/tuple with Python dunders
  defined_via             inheritance, mixins, super(), metaclasses, staticmethod, late binding
  effects, errors         side effects inside dunders; dunders raising
  callers                 the operator inside generators, lambdas, comprehensions, class bodies ...
  stdlib                  functools.total_ordering, dataclasses, enum, namedtuple
  registry                a transformers-like registry queried with ``name in REGISTRY``
  torch                   tensors mixed with user objects; torch's own Python dunders
  c_callers               native code calling back into dunders (sorted/min/max/list.sort, list and
                          tuple comparisons and searches, dict/set hashing, round/int/float/math.floor,
                          list()/tuple() length hints, str.join, operator.methodcaller, sum, any ...):
                          beyond the operators themselves

Checking the corpus against itself:
``MAGPY_DIFF_RUNNER=native python -m pytest tests/corpus/test_dunders.py``.
"""
import collections
import dataclasses
import enum
import functools
import operator
import sys

import pytest
import torch
import torch.nn as nn

from tests.harness.differential import check

pytestmark = pytest.mark.filterwarnings("ignore:NotImplemented should not be used:DeprecationWarning")

CASES = []
OBSERVERS = {}

# ==========================================================================================
# The log
# ==========================================================================================

LOG = []
_HERE = (lambda: None).__code__.co_filename
_SCALARS = (int, float, bool, str, type(None), complex, bytes)
_EXACT = ((int, int.__int__), (float, float.__float__), (str, str.__str__), (list, list.copy),
          (tuple, lambda x: tuple.__getitem__(x, slice(None))), (dict, dict.copy))


class _Obj:
    """Base of the corpus' classes: one value ``v``; no special methods of its own."""

    def __init__(self, v=0):
        self.v = v

    def __repr__(self):  # only for pytest's failure messages; no case calls repr()
        return f"{type(self).__name__}({self.v!r})"


def _short(x, depth=0):
    """A short, address-free description of an operand that runs none of its special methods."""
    t = type(x)
    if isinstance(x, _Obj):
        return f"{t.__name__}({_short(x.v, depth + 1)})"
    if t in _SCALARS or x is NotImplemented:
        return repr(x)
    if isinstance(x, torch.Tensor):
        return "tensor" + repr(x.tolist())
    if isinstance(x, type):
        return x.__name__
    if isinstance(x, enum.Enum):
        return f"{t.__name__}.{x._name_}"
    if depth > 2:
        return t.__name__
    if t is list or t is tuple:
        inner = ", ".join([_short(i, depth + 1) for i in x])
        return f"[{inner}]" if t is list else f"({inner})"
    if t is dict:
        items = [f"{_short(k, depth + 1)}: {_short(v, depth + 1)}" for k, v in x.items()]
        return "{" + ", ".join(items) + "}"
    for base, exact in _EXACT:
        if isinstance(x, base):
            return f"{t.__name__}({_short(exact(x), depth + 1)})"
    try:
        d = object.__getattribute__(x, "__dict__")
    except AttributeError:
        return t.__name__
    return f"{t.__name__}({', '.join([_short(v, depth + 1) for v in d.values()])})"


def _note(method, *operands):
    """Log a special method call: (method, operands, the function that called the method)."""
    f = sys._getframe(2)
    caller = f.f_code.co_name
    hops = 0
    while f.f_code.co_filename != _HERE and hops < 3:  # a stdlib caller: name it up to our code
        f = f.f_back
        if f is None:
            break
        caller += "<" + f.f_code.co_name
        hops += 1
    LOG.append((method, " ".join([_short(o) for o in operands]), caller))


def _run(fn, *args):
    del LOG[:]
    try:
        result = fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception is part of the result, with the log
        result = ("raised", type(e).__name__, str(e))
    return result, LOG[:]


_LAMBDA = type(lambda: None)


def _val(x):
    return x.v if isinstance(x, _Obj) else x


def _fresh(x):
    """An operand: a lambda is a factory called for fresh objects; anything else is used as is."""
    return x() if type(x) is _LAMBDA and x.__name__ == "<lambda>" else x


def add(name, fn, *operands):
    """Register case ``name``: ``_run(fn, *fresh operands)``."""
    CASES.append((name, lambda: (_run, (fn, *[_fresh(o) for o in operands]), {})))


def add_raw(name, fn, *operands):
    """Register a case whose exception escapes to the harness (compared by type and message)."""
    CASES.append((name, lambda: (fn, tuple(_fresh(o) for o in operands), {})))


_tensor = lambda: torch.tensor([1.0, 2.0])  # noqa: E731


# ==========================================================================================
# binop / binmix / inplace: generated binary operator grid
# ==========================================================================================

BINOPS = [("add", "+"), ("sub", "-"), ("mul", "*"), ("matmul", "@"), ("truediv", "/"),
          ("floordiv", "//"), ("mod", "%"), ("pow", "**"), ("lshift", "<<"), ("rshift", ">>"),
          ("and", "&"), ("or", "|"), ("xor", "^")]


# The operator must be in the case function's own bytecode: one function per operator.
def do_add(a, b): return a + b  # noqa: E704
def do_sub(a, b): return a - b  # noqa: E704
def do_mul(a, b): return a * b  # noqa: E704
def do_matmul(a, b): return a @ b  # noqa: E704
def do_truediv(a, b): return a / b  # noqa: E704
def do_floordiv(a, b): return a // b  # noqa: E704
def do_mod(a, b): return a % b  # noqa: E704
def do_pow(a, b): return a ** b  # noqa: E704
def do_lshift(a, b): return a << b  # noqa: E704
def do_rshift(a, b): return a >> b  # noqa: E704
def do_and(a, b): return a & b  # noqa: E704
def do_or(a, b): return a | b  # noqa: E704
def do_xor(a, b): return a ^ b  # noqa: E704


def do_iadd(a, b):
    a += b
    return a


def do_isub(a, b):
    a -= b
    return a


def do_imul(a, b):
    a *= b
    return a


def do_imatmul(a, b):
    a @= b
    return a


def do_itruediv(a, b):
    a /= b
    return a


def do_ifloordiv(a, b):
    a //= b
    return a


def do_imod(a, b):
    a %= b
    return a


def do_ipow(a, b):
    a **= b
    return a


def do_ilshift(a, b):
    a <<= b
    return a


def do_irshift(a, b):
    a >>= b
    return a


def do_iand(a, b):
    a &= b
    return a


def do_ior(a, b):
    a |= b
    return a


def do_ixor(a, b):
    a ^= b
    return a


DO_BIN = {op: globals()[f"do_{op}"] for op, _ in BINOPS}
DO_INPLACE = {op: globals()[f"do_i{op}"] for op, _ in BINOPS}


def _forward(op):
    def forward(self, other):
        _note(f"{type(self).__name__}.__{op}__", self, other)
        return (f"__{op}__", self.v, _short(other))
    return forward


def _reflected(op):
    def reflected(self, other):
        _note(f"{type(self).__name__}.__r{op}__", self, other)
        return (f"__r{op}__", self.v, _short(other))
    return reflected


def _picky(name):
    def picky(self, other):
        _note(f"{type(self).__name__}.{name}", self, other)
        if type(other) is not int:
            return NotImplemented
        return (name, self.v, other)
    return picky


def _never(name):
    def never(self, other):
        _note(f"{type(self).__name__}.{name}", self, other)
        return NotImplemented
    return never


def _inplace_new(op):
    def inplace(self, other):
        _note(f"{type(self).__name__}.__i{op}__", self, other)
        return (f"__i{op}__", self.v, _short(other))
    return inplace


def _inplace_self(op):
    def inplace(self, other):
        _note(f"{type(self).__name__}.__i{op}__", self, other)
        self.v = self.v * 10 + 1
        return self
    return inplace


class Fwd(_Obj):
    """Forward methods only (``__add__`` ...)."""


class Refl(_Obj):
    """Reflected methods only (``__radd__`` ...)."""


class Both(_Obj):
    """Forward and reflected methods."""


class Picky(_Obj):
    """Forward and reflected methods that return NotImplemented unless the other operand is an int."""


class Never(_Obj):
    """Forward and reflected methods that always return NotImplemented."""


class SubOver(Both):
    """A subclass of Both that overrides the reflected methods: tried first on the right."""


class SubPlain(Both):
    """A subclass of Both that overrides nothing: Both's forward method keeps priority."""


class SubOverNI(Both):
    """A subclass of Both whose reflected overrides return NotImplemented."""


class SubNever(Never):
    """A subclass of Never that overrides nothing."""


class Inpl(Both):
    """In-place methods returning a new value."""


class InplSelf(Both):
    """In-place methods mutating self and returning it."""


class InplNI(Both):
    """In-place methods returning NotImplemented: the binary protocol follows."""


class InplNever(Never):
    """In-place methods returning NotImplemented on top of Never."""


class Plain(_Obj):
    """No special methods at all."""


for _op, _ in BINOPS:
    setattr(Fwd, f"__{_op}__", _forward(_op))
    setattr(Refl, f"__r{_op}__", _reflected(_op))
    setattr(Both, f"__{_op}__", _forward(_op))
    setattr(Both, f"__r{_op}__", _reflected(_op))
    setattr(Picky, f"__{_op}__", _picky(f"__{_op}__"))
    setattr(Picky, f"__r{_op}__", _picky(f"__r{_op}__"))
    setattr(Never, f"__{_op}__", _never(f"__{_op}__"))
    setattr(Never, f"__r{_op}__", _never(f"__r{_op}__"))
    setattr(SubOver, f"__r{_op}__", _reflected(_op))
    setattr(SubOverNI, f"__r{_op}__", _never(f"__r{_op}__"))
    setattr(Inpl, f"__i{_op}__", _inplace_new(_op))
    setattr(InplSelf, f"__i{_op}__", _inplace_self(_op))
    setattr(InplNI, f"__i{_op}__", _never(f"__i{_op}__"))
    setattr(InplNever, f"__i{_op}__", _never(f"__i{_op}__"))


def _mk(cls, v):
    return lambda: cls(v)


CORE_PAIRS = [
    ("fwd-int", _mk(Fwd, 5), 2),
    ("int-fwd", 2, _mk(Fwd, 5)),
    ("refl-int", _mk(Refl, 5), 2),
    ("int-refl", 2, _mk(Refl, 5)),
    ("refl-refl", _mk(Refl, 5), _mk(Refl, 2)),
    ("both-both", _mk(Both, 5), _mk(Both, 2)),
    ("fwd-refl", _mk(Fwd, 5), _mk(Refl, 2)),
    ("refl-fwd", _mk(Refl, 5), _mk(Fwd, 2)),
    ("never-refl", _mk(Never, 5), _mk(Refl, 2)),
    ("never-both", _mk(Never, 5), _mk(Both, 2)),
    ("never-never", _mk(Never, 5), _mk(Never, 2)),
    ("never-subnever", _mk(Never, 5), _mk(SubNever, 2)),
    ("picky-int", _mk(Picky, 5), 2),
    ("picky-picky", _mk(Picky, 5), _mk(Picky, 2)),
    ("both-subover", _mk(Both, 5), _mk(SubOver, 2)),
    ("both-subplain", _mk(Both, 5), _mk(SubPlain, 2)),
    ("both-subni", _mk(Both, 5), _mk(SubOverNI, 2)),
    ("subover-both", _mk(SubOver, 5), _mk(Both, 2)),
    ("plain-plain", _mk(Plain, 5), _mk(Plain, 2)),
    ("plain-both", _mk(Plain, 5), _mk(Both, 2)),
]

# Every configuration for six operators (the dispatch is shared, the error messages differ);
# the main rules for the other seven.
FULL_BINOPS = ("add", "sub", "matmul", "truediv", "pow", "or")
SHORT_PAIRS = ("fwd-int", "int-refl", "never-never", "both-subover", "both-subplain", "plain-plain")
for _op, _ in BINOPS:
    for _label, _a, _b in CORE_PAIRS:
        if _op in FULL_BINOPS or _label in SHORT_PAIRS:
            add(f"binop[{_op}-{_label}]", DO_BIN[_op], _a, _b)

BUILTIN_OPERANDS = [("float", 2.5), ("str", "s"), ("list", lambda: [1]), ("tuple", (1,)),
                    ("tensor", _tensor), ("none", None), ("bool", True)]

for _op, _ in BINOPS:
    for _bname, _bval in BUILTIN_OPERANDS:
        if _bname in ("str", "list", "tensor") or _op in ("add", "mul", "pow"):
            add(f"binmix[{_op}-fwd-{_bname}]", DO_BIN[_op], _mk(Fwd, 5), _bval)
            add(f"binmix[{_op}-{_bname}-refl]", DO_BIN[_op], _bval, _mk(Refl, 5))
for _op in ("add", "mul", "mod"):
    for _bname, _bval in BUILTIN_OPERANDS:
        add(f"binmix[{_op}-{_bname}-fwd]", DO_BIN[_op], _bval, _mk(Fwd, 5))
        add(f"binmix[{_op}-never-{_bname}]", DO_BIN[_op], _mk(Never, 5), _bval)

INPLACE_PAIRS = [
    ("inpl-int", _mk(Inpl, 5), 2),
    ("inplself-int", _mk(InplSelf, 5), 2),
    ("inplni-int", _mk(InplNI, 5), 2),
    ("both-int", _mk(Both, 5), 2),
    ("fwd-refl", _mk(Fwd, 5), _mk(Refl, 2)),
    ("int-refl", 2, _mk(Refl, 5)),
    ("inplnever-refl", _mk(InplNever, 5), _mk(Refl, 2)),
    ("inplnever-int", _mk(InplNever, 5), 2),
    ("inpl-subover", _mk(Inpl, 5), _mk(SubOver, 2)),
    ("plain-plain", _mk(Plain, 5), _mk(Plain, 2)),
    ("list-refl", lambda: [1], _mk(Refl, 5)),
    ("tensor-refl", _tensor, _mk(Refl, 5)),
]

SHORT_INPLACE = ("inpl-int", "inplni-int", "both-int", "inplnever-int", "list-refl")
for _op, _ in BINOPS:
    for _label, _a, _b in INPLACE_PAIRS:
        if _op in FULL_BINOPS or _label in SHORT_INPLACE:
            add(f"inplace[{_op}-{_label}]", DO_INPLACE[_op], _a, _b)


# ==========================================================================================
# cmp: generated rich comparison grid
# ==========================================================================================

CMPOPS = [("lt", "<"), ("le", "<="), ("eq", "=="), ("ne", "!="), ("gt", ">"), ("ge", ">=")]
SWAPPED = {"lt": "gt", "le": "ge", "eq": "eq", "ne": "ne", "gt": "lt", "ge": "le"}


def cmp_lt(a, b): return a < b  # noqa: E704
def cmp_le(a, b): return a <= b  # noqa: E704
def cmp_eq(a, b): return a == b  # noqa: E704
def cmp_ne(a, b): return a != b  # noqa: E704
def cmp_gt(a, b): return a > b  # noqa: E704
def cmp_ge(a, b): return a >= b  # noqa: E704
def cmp_lt_same(a): return a < a  # noqa: E704
def cmp_le_same(a): return a <= a  # noqa: E704
def cmp_eq_same(a): return a == a  # noqa: E704
def cmp_ne_same(a): return a != a  # noqa: E704
def cmp_gt_same(a): return a > a  # noqa: E704
def cmp_ge_same(a): return a >= a  # noqa: E704


DO_CMP = {op: globals()[f"cmp_{op}"] for op, _ in CMPOPS}
DO_CMP_SAME = {op: globals()[f"cmp_{op}_same"] for op, _ in CMPOPS}


def _comparing(op):
    py = getattr(operator, op)

    def compare(self, other):
        _note(f"{type(self).__name__}.__{op}__", self, other)
        return py(self.v, _val(other))
    return compare


def _comparing_picky(op):
    py = getattr(operator, op)

    def compare(self, other):
        _note(f"{type(self).__name__}.__{op}__", self, other)
        if type(other) is not int:
            return NotImplemented
        return py(self.v, other)
    return compare


class CAll(_Obj):
    """All six comparisons, comparing values."""


class CNever(_Obj):
    """All six comparisons returning NotImplemented."""


class CPicky(_Obj):
    """All six comparisons, NotImplemented unless the other operand is an int."""


class CSub(CAll):
    """Subclass overriding nothing: for comparisons its reflected method is still tried first."""


class CSubNI(CAll):
    """Subclass whose comparisons return NotImplemented."""


class CEqOnly(_Obj):
    def __eq__(self, other):
        _note("CEqOnly.__eq__", self, other)
        return self.v == _val(other)

    __hash__ = None


class CLtOnly(_Obj):
    def __lt__(self, other):
        _note("CLtOnly.__lt__", self, other)
        return self.v < _val(other)


for _op, _ in CMPOPS:
    setattr(CAll, f"__{_op}__", _comparing(_op))
    setattr(CNever, f"__{_op}__", _never(f"__{_op}__"))
    setattr(CPicky, f"__{_op}__", _comparing_picky(_op))
    setattr(CSubNI, f"__{_op}__", _never(f"__{_op}__"))
for _cls in (CAll, CNever, CPicky, CSubNI):
    _cls.__hash__ = None

CMP_PAIRS = [
    ("all-int", _mk(CAll, 5), 2),
    ("int-all", 2, _mk(CAll, 5)),
    ("all-all", _mk(CAll, 5), _mk(CAll, 2)),
    ("never-never", _mk(CNever, 5), _mk(CNever, 2)),
    ("never-all", _mk(CNever, 5), _mk(CAll, 2)),
    ("all-never", _mk(CAll, 5), _mk(CNever, 2)),
    ("all-sub", _mk(CAll, 5), _mk(CSub, 2)),
    ("sub-all", _mk(CSub, 5), _mk(CAll, 2)),
    ("all-subni", _mk(CAll, 5), _mk(CSubNI, 2)),
    ("eqonly-eqonly", _mk(CEqOnly, 5), _mk(CEqOnly, 5)),
    ("eqonly-int", _mk(CEqOnly, 5), 4),
    ("int-eqonly", 5, _mk(CEqOnly, 5)),
    ("ltonly-ltonly", _mk(CLtOnly, 1), _mk(CLtOnly, 2)),
    ("plain-ltonly", _mk(Plain, 1), _mk(CLtOnly, 2)),
    ("plain-plain", _mk(Plain, 1), _mk(Plain, 1)),
    ("picky-int", _mk(CPicky, 5), 7),
    ("picky-float", _mk(CPicky, 5), 2.5),
    ("str-all", "s", _mk(CAll, 5)),
    ("tensor-all", _tensor, _mk(CAll, 2)),
    ("all-tensor", _mk(CAll, 2), _tensor),
    ("float-never", 2.5, _mk(CNever, 5)),
]
CMP_SAME = [("all-self", _mk(CAll, 5)), ("never-self", _mk(CNever, 5)), ("plain-self", _mk(Plain, 5))]

for _op, _ in CMPOPS:
    for _label, _a, _b in CMP_PAIRS:
        add(f"cmp[{_op}-{_label}]", DO_CMP[_op], _a, _b)
    for _label, _a in CMP_SAME:
        add(f"cmp[{_op}-{_label}]", DO_CMP_SAME[_op], _a)


# ==========================================================================================
# truth / len / unary / hash: generated contexts x configurations
# ==========================================================================================

def truth_if(x):
    if x:
        return "yes"
    return "no"


def truth_elif(x):
    if x is None:
        return "none"
    elif x:
        return "yes"
    return "no"


def truth_while(x):
    n = 0
    while x:
        n += 1
        if n == 2:
            break
    return n


def truth_not(x): return not x  # noqa: E704
def truth_and(x): return x and "rhs"  # noqa: E704
def truth_or(x): return x or "rhs"  # noqa: E704
def truth_bool(x): return bool(x)  # noqa: E704
def truth_ternary(x): return "yes" if x else "no"  # noqa: E704
def truth_listcomp(x): return [i is x for i in (x, x) if i]  # noqa: E704
def truth_operator_truth(x): return operator.truth(x)  # noqa: E704
def truth_operator_not(x): return operator.not_(x)  # noqa: E704


def truth_assert(x):
    try:
        assert x, "falsy"
    except AssertionError as e:
        return ("assert", str(e))
    return "ok"


TRUTH_CONTEXTS = [truth_if, truth_elif, truth_while, truth_not, truth_and, truth_or, truth_bool,
                  truth_ternary, truth_listcomp, truth_operator_truth, truth_operator_not, truth_assert]


def _bool_returning(value):
    def __bool__(self):
        _note(f"{type(self).__name__}.__bool__", self)
        return value
    return __bool__


def _len_returning(value):
    def __len__(self):
        _note(f"{type(self).__name__}.__len__", self)
        return value() if callable(value) else value
    return __len__


class BoolTrue(_Obj):
    __bool__ = _bool_returning(True)


class BoolFalse(_Obj):
    __bool__ = _bool_returning(False)


class LenZero(_Obj):
    __len__ = _len_returning(0)


class LenThree(_Obj):
    __len__ = _len_returning(3)


class BoolAndLen(_Obj):
    __bool__ = _bool_returning(False)
    __len__ = _len_returning(3)


class InheritsBool(BoolFalse):
    pass


class InheritsLen(LenZero):
    pass


class Index(_Obj):
    def __index__(self):
        _note("Index.__index__", self)
        return self.v


class LenIndex(_Obj):
    __len__ = _len_returning(lambda: Index(2))


class LenIndexZero(_Obj):
    __len__ = _len_returning(lambda: Index(0))


class IntSubBool(int):
    def __bool__(self):
        _note("IntSubBool.__bool__", self)
        return int(self) > 10


class ListSubLen(list):
    def __len__(self):
        _note("ListSubLen.__len__", self)
        return list.__len__(self) - 1


class DictSubLen(dict):
    def __len__(self):
        _note("DictSubLen.__len__", self)
        return 7


class StrSubLen(str):
    def __len__(self):
        _note("StrSubLen.__len__", self)
        return 0


class BoolInt(_Obj):
    __bool__ = _bool_returning(1)


class BoolNone(_Obj):
    __bool__ = _bool_returning(None)


class LenNeg(_Obj):
    __len__ = _len_returning(-1)


class LenStr(_Obj):
    __len__ = _len_returning("3")


class LenFloat(_Obj):
    __len__ = _len_returning(2.0)


class LenHuge(_Obj):
    __len__ = _len_returning(2 ** 70)


class LenBool(_Obj):
    __len__ = _len_returning(True)


class LenNone(_Obj):
    __len__ = _len_returning(None)


class IntSubPlain(int):
    pass


class LenIntSub(_Obj):
    __len__ = _len_returning(lambda: IntSubPlain(4))


class BoolRaises(_Obj):
    def __bool__(self):
        _note("BoolRaises.__bool__", self)
        raise ValueError(f"no truth for {self.v}")


class LenRaises(_Obj):
    def __len__(self):
        _note("LenRaises.__len__", self)
        raise LookupError("len exploded")


class BoolIsNone(_Obj):
    __bool__ = None


class LenIsNone(_Obj):
    __len__ = None


TRUTH_CONFIGS = [
    ("booltrue", _mk(BoolTrue, 1)), ("boolfalse", _mk(BoolFalse, 0)), ("lenzero", _mk(LenZero, 0)),
    ("lenthree", _mk(LenThree, 3)), ("bool_and_len", _mk(BoolAndLen, 0)), ("plain", _mk(Plain, 0)),
    ("intsub_bool", lambda: IntSubBool(5)), ("intsub_bool_big", lambda: IntSubBool(50)),
    ("listsub_len", lambda: ListSubLen([1])), ("listsub_len2", lambda: ListSubLen([1, 2])),
    ("inherits_bool", _mk(InheritsBool, 0)), ("inherits_len", _mk(InheritsLen, 0)),
    ("len_index", _mk(LenIndex, 0)), ("len_bool", _mk(LenBool, 0)),
]
TRUTH_ERROR_CONFIGS = [
    ("bool_int", _mk(BoolInt, 0)), ("bool_none", _mk(BoolNone, 0)), ("len_neg", _mk(LenNeg, 0)),
    ("len_str", _mk(LenStr, 0)), ("len_float", _mk(LenFloat, 0)), ("len_huge", _mk(LenHuge, 0)),
    ("len_none", _mk(LenNone, 0)), ("bool_raises", _mk(BoolRaises, 0)),
    ("len_raises", _mk(LenRaises, 0)), ("bool_is_none", _mk(BoolIsNone, 0)),
    ("len_is_none", _mk(LenIsNone, 0)), ("len_index_zero", _mk(LenIndexZero, 0)),
]

# Every context for the basic configurations; five contexts for the others, three for errors.
FULL_TRUTH = ("booltrue", "boolfalse", "lenzero", "lenthree", "bool_and_len", "plain", "len_index")
for _cfg, _make in TRUTH_CONFIGS:
    _contexts = (TRUTH_CONTEXTS if _cfg in FULL_TRUTH
                 else (truth_if, truth_while, truth_not, truth_and, truth_bool))
    for _ctx in _contexts:
        add(f"truth[{_ctx.__name__[6:]}-{_cfg}]", _ctx, _make)
for _cfg, _make in TRUTH_ERROR_CONFIGS:
    for _ctx in (truth_if, truth_not, truth_bool):
        add(f"truth[{_ctx.__name__[6:]}-{_cfg}]", _ctx, _make)


def len_of(x):
    return len(x)


LEN_CONFIGS = [
    ("three", _mk(LenThree, 0)), ("zero", _mk(LenZero, 0)), ("neg", _mk(LenNeg, 0)),
    ("str", _mk(LenStr, 0)), ("float", _mk(LenFloat, 0)), ("huge", _mk(LenHuge, 0)),
    ("bool", _mk(LenBool, 0)), ("none", _mk(LenNone, 0)), ("intsub", _mk(LenIntSub, 0)),
    ("index", _mk(LenIndex, 0)), ("raises", _mk(LenRaises, 0)), ("is_none", _mk(LenIsNone, 0)),
    ("plain", _mk(Plain, 0)), ("bool_only", _mk(BoolTrue, 0)), ("inherited", _mk(InheritsLen, 0)),
    ("listsub", lambda: ListSubLen([1, 2, 3])), ("dictsub", lambda: DictSubLen(a=1)),
    ("strsub", lambda: StrSubLen("abc")),
]
for _cfg, _make in LEN_CONFIGS:
    add(f"len[{_cfg}]", len_of, _make)


def un_neg(x): return -x  # noqa: E704
def un_pos(x): return +x  # noqa: E704
def un_invert(x): return ~x  # noqa: E704
def un_abs(x): return abs(x)  # noqa: E704
def un_operator_neg(x): return operator.neg(x)  # noqa: E704
def un_operator_pos(x): return operator.pos(x)  # noqa: E704
def un_operator_invert(x): return operator.invert(x)  # noqa: E704
def un_operator_abs(x): return operator.abs(x)  # noqa: E704


UNARY_CONTEXTS = [un_neg, un_pos, un_invert, un_abs, un_operator_neg, un_operator_pos,
                  un_operator_invert, un_operator_abs]


def _unary(name, result):
    def method(self):
        _note(f"{type(self).__name__}.{name}", self)
        return result(self)
    return method


class UAll(_Obj):
    __neg__ = _unary("__neg__", lambda s: -s.v)
    __pos__ = _unary("__pos__", lambda s: ("pos", s.v))
    __invert__ = _unary("__invert__", lambda s: UAll(~s.v))
    __abs__ = _unary("__abs__", lambda s: abs(s.v))


class UInherit(UAll):
    pass


class UNotImpl(_Obj):
    __neg__ = __pos__ = __invert__ = __abs__ = _unary("unary", lambda s: NotImplemented)


class URaises(_Obj):
    def _boom(self):
        _note("URaises.unary", self)
        raise ArithmeticError("unary boom")

    __neg__ = __pos__ = __invert__ = __abs__ = _boom


class UIntSub(int):
    def __neg__(self):
        _note("UIntSub.__neg__", self)
        return UIntSub(int.__neg__(self) * 10)

    def __abs__(self):
        _note("UIntSub.__abs__", self)
        return "abs!"


class UNested(_Obj):
    def __neg__(self):
        _note("UNested.__neg__", self)
        return -self.v  # self.v is a UAll: a nested monitored dunder


UNARY_CONFIGS = [("all", _mk(UAll, 3)), ("inherited", _mk(UInherit, 3)), ("notimpl", _mk(UNotImpl, 3)),
                 ("raises", _mk(URaises, 3)), ("intsub", lambda: UIntSub(-4)), ("plain", _mk(Plain, 3)),
                 ("nested", lambda: UNested(UAll(2)))]
for _cfg, _make in UNARY_CONFIGS:
    for _ctx in (UNARY_CONTEXTS if _cfg in ("all", "plain", "intsub") else UNARY_CONTEXTS[:4]):
        add(f"unary[{_ctx.__name__[3:]}-{_cfg}]", _ctx, _make)


def hash_of(x):
    return hash(x)


def _hash_returning(value):
    def __hash__(self):
        _note(f"{type(self).__name__}.__hash__", self)
        return value() if callable(value) else value
    return __hash__


class HashInt(_Obj):
    __hash__ = _hash_returning(1234)


class HashBig(_Obj):
    __hash__ = _hash_returning(2 ** 70 + 5)


class HashMinusOne(_Obj):
    __hash__ = _hash_returning(-1)


class HashBool(_Obj):
    __hash__ = _hash_returning(True)


class HashIntSub(_Obj):
    __hash__ = _hash_returning(lambda: IntSubPlain(77))


class HashStr(_Obj):
    __hash__ = _hash_returning("x")


class HashFloat(_Obj):
    __hash__ = _hash_returning(1.5)


class HashIsNone(_Obj):
    __hash__ = None


class EqNoHash(_Obj):
    def __eq__(self, other):
        _note("EqNoHash.__eq__", self, other)
        return True


class HashThenEq(HashInt):
    """Defining __eq__ in a subclass sets its __hash__ to None."""

    def __eq__(self, other):
        _note("HashThenEq.__eq__", self, other)
        return True


class HashRaises(_Obj):
    def __hash__(self):
        _note("HashRaises.__hash__", self)
        raise TypeError(f"{type(self).__name__} refuses hashing")


class HashInherited(HashInt):
    pass


class HashFromValue(_Obj):
    def __hash__(self):
        _note("HashFromValue.__hash__", self)
        return hash(self.v)  # nested: the value's own __hash__


HASH_CONFIGS = [("int", _mk(HashInt, 0)), ("big", _mk(HashBig, 0)), ("minus_one", _mk(HashMinusOne, 0)),
                ("bool", _mk(HashBool, 0)), ("intsub", _mk(HashIntSub, 0)), ("str", _mk(HashStr, 0)),
                ("float", _mk(HashFloat, 0)), ("is_none", _mk(HashIsNone, 0)),
                ("eq_no_hash", _mk(EqNoHash, 0)),
                ("hash_then_eq", _mk(HashThenEq, 0)), ("raises", _mk(HashRaises, 0)),
                ("inherited", _mk(HashInherited, 0)), ("nested", lambda: HashFromValue(HashInt(0))),
                ("value_str", lambda: HashFromValue("abc"))]
for _cfg, _make in HASH_CONFIGS:
    add(f"hash[{_cfg}]", hash_of, _make)


# ==========================================================================================
# contains: `in` / `not in`
# ==========================================================================================

def contains_in(x, c): return x in c  # noqa: E704
def contains_not_in(x, c): return x not in c  # noqa: E704


def contains_if(x, c):
    if x in c:
        return "found"
    return "missing"


class EqItem(_Obj):
    """An item that compares equal by value (logged)."""

    def __eq__(self, other):
        _note("EqItem.__eq__", self, other)
        return self.v == _val(other)

    __hash__ = None


class EqItemSub(EqItem):
    def __eq__(self, other):
        _note("EqItemSub.__eq__", self, other)
        return self.v == _val(other)


class Truthy(_Obj):
    """Returned by __contains__ / __eq__: its truth is asked for by the protocol."""

    def __bool__(self):
        _note("Truthy.__bool__", self)
        return bool(self.v)


class HasContains(_Obj):
    def __init__(self, items, result=None):
        super().__init__(list(items))
        self.result = result

    def __contains__(self, x):
        _note("HasContains.__contains__", self, x)
        if self.result is not None:
            return self.result() if callable(self.result) else self.result
        return x in self.v


class ContainsIsNone(_Obj):
    __contains__ = None

    def __iter__(self):  # not consulted: __contains__ = None blocks the fallback
        _note("ContainsIsNone.__iter__", self)
        return iter([1])


class IterList(_Obj):
    def __iter__(self):
        _note("IterList.__iter__", self)
        return iter(self.v)


class IterGen(_Obj):
    def __iter__(self):
        _note("IterGen.__iter__", self)
        for item in self.v:
            _note("IterGen.yield", item)
            yield item


class IterSelf(_Obj):
    def __init__(self, items):
        super().__init__(list(items))
        self.pos = 0

    def __iter__(self):
        _note("IterSelf.__iter__", self)
        return self

    def __next__(self):
        _note("IterSelf.__next__", self)
        if self.pos >= len(self.v):
            raise StopIteration
        self.pos += 1
        return self.v[self.pos - 1]


class OldSeq(_Obj):
    """Only __getitem__: the old sequence protocol asks 0, 1, 2 ... until IndexError."""

    def __getitem__(self, i):
        _note("OldSeq.__getitem__", self, i)
        if i >= len(self.v):
            raise IndexError(i)
        return self.v[i]


class OldSeqStop(_Obj):
    """The old protocol's iterator also stops at StopIteration."""

    def __getitem__(self, i):
        _note("OldSeqStop.__getitem__", self, i)
        if i >= len(self.v):
            raise StopIteration
        return self.v[i]


class OldSeqKeyError(_Obj):
    def __getitem__(self, i):
        _note("OldSeqKeyError.__getitem__", self, i)
        raise KeyError(i)


class IterAndGetitem(_Obj):
    """__iter__ wins over __getitem__."""

    def __iter__(self):
        _note("IterAndGetitem.__iter__", self)
        return iter(self.v)

    def __getitem__(self, i):
        _note("IterAndGetitem.__getitem__", self, i)
        return self.v[i]


class IterIsNone(_Obj):
    __iter__ = None

    def __getitem__(self, i):
        _note("IterIsNone.__getitem__", self, i)
        return self.v[i]


class EqRaises(_Obj):
    def __eq__(self, other):
        _note("EqRaises.__eq__", self, other)
        raise RuntimeError("cannot compare")

    __hash__ = None


class EqTruthy(_Obj):
    def __eq__(self, other):
        _note("EqTruthy.__eq__", self, other)
        return Truthy(self.v == _val(other))

    __hash__ = None


CONTAINS_CASES = [
    ("contains_true", 2, lambda: HasContains([1, 2, 3])),
    ("contains_false", 9, lambda: HasContains([1, 2, 3])),
    ("contains_returns_int", 9, lambda: HasContains([], result=1)),
    ("contains_returns_empty_str", 9, lambda: HasContains([], result="")),
    ("contains_returns_list", 9, lambda: HasContains([], result=lambda: [0])),
    ("contains_returns_truthy_obj", 9, lambda: HasContains([], result=lambda: Truthy(0))),
    ("contains_returns_notimplemented", 9, lambda: HasContains([], result=lambda: NotImplemented)),
    ("contains_is_none", 1, _mk(ContainsIsNone, 0)),
    ("iter_list_found", 2, lambda: IterList([1, 2, 3])),
    ("iter_list_missing", 5, lambda: IterList([1, 2, 3])),
    ("iter_gen_found_early", 1, lambda: IterGen([1, 2, 3])),
    ("iter_gen_missing", 5, lambda: IterGen([1, 2])),
    ("iter_self_found", 2, lambda: IterSelf([1, 2, 3])),
    ("iter_self_missing", 7, lambda: IterSelf([1, 2])),
    ("oldseq_found", 20, lambda: OldSeq([10, 20, 30])),
    ("oldseq_missing", 99, lambda: OldSeq([10, 20])),
    ("oldseq_stopiteration", 9, lambda: OldSeqStop([1, 2])),
    ("oldseq_keyerror", 1, _mk(OldSeqKeyError, 0)),
    ("iter_beats_getitem", 2, lambda: IterAndGetitem([1, 2])),
    ("iter_is_none", 1, lambda: IterIsNone([1])),
    ("plain_not_iterable", 1, _mk(Plain, 0)),
    ("items_eq_found", 2, lambda: IterList([EqItem(1), EqItem(2), EqItem(3)])),
    ("items_eq_needle_obj", lambda: EqItem(2), lambda: IterList([1, 2, 3])),
    ("items_eq_both_objs", lambda: EqItem(3), lambda: IterList([EqItem(1), EqItem(3)])),
    ("items_eq_needle_sub", lambda: EqItemSub(3), lambda: IterList([EqItem(1), EqItem(3)])),
    ("items_eq_raises", 1, lambda: IterList([EqRaises(0)])),
    ("items_eq_truthy", 1, lambda: IterList([EqTruthy(0), EqTruthy(1)])),
    ("oldseq_items_eq", 2, lambda: OldSeq([EqItem(1), EqItem(2)])),
    ("gen_items_eq", 3, lambda: IterGen([EqItem(3)])),
]
for _label, _x, _c in CONTAINS_CASES:
    add(f"contains[in-{_label}]", contains_in, _x, _c)
for _label, _x, _c in CONTAINS_CASES:
    if _label not in ("contains_true", "contains_returns_int", "contains_returns_list", "contains_is_none",
                      "iter_list_missing", "iter_gen_missing", "iter_self_missing", "oldseq_missing",
                      "oldseq_stopiteration", "items_eq_found", "items_eq_truthy"):
        continue
    add(f"contains[not_in-{_label}]", contains_not_in, _x, _c)
    add(f"contains[if-{_label}]", contains_if, _x, _c)


def contains_identity_first():
    item = EqItem(1)
    return item in IterList([item]), item in OldSeq([EqItem(5), item]), item in IterGen([EqItem(1)])


def contains_identity_beats_raising_eq():
    bad = EqRaises(0)
    return bad in IterList([bad]), bad in IterGen([bad])


def contains_iter_consumes_iterator():
    it = IterSelf([1, 2, 3, 4])
    first = 2 in it
    second = 2 in it  # the iterator is already past 2
    return first, second, it.pos


def contains_iter_raises():
    class Broken(_Obj):
        def __iter__(self):
            _note("Broken.__iter__", self)
            raise OSError("no iteration today")
    return 1 in Broken()


def contains_iter_returns_non_iterator():
    class Bad(_Obj):
        def __iter__(self):
            _note("Bad.__iter__", self)
            return 5
    return 1 in Bad()


def contains_in_loop_condition():
    c = HasContains([1, 2])
    n = 0
    while n in c:
        n += 1
    return n


def contains_on_class_instance_attr_ignored():
    c = Plain(0)
    c.__contains__ = lambda x: True  # instance attributes do not define the protocol
    try:
        return 1 in c
    except TypeError as e:
        return str(e)


add("contains[identity_first]", contains_identity_first)
add("contains[identity_beats_raising_eq]", contains_identity_beats_raising_eq)
add("contains[iter_consumes_iterator]", contains_iter_consumes_iterator)
add("contains[iter_raises]", contains_iter_raises)
add("contains[iter_returns_non_iterator]", contains_iter_returns_non_iterator)
add("contains[in_loop_condition]", contains_in_loop_condition)
add("contains[instance_attr_ignored]", contains_on_class_instance_attr_ignored)


# ==========================================================================================
# opmod: the operator module called from monitored code
# ==========================================================================================

def opmod_binary(fn, a, b):
    return fn(a, b)


def opmod_unary(fn, a):
    return fn(a)


_OPMOD_BIN = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "matmul": operator.matmul,
              "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
              "pow": operator.pow, "lshift": operator.lshift, "rshift": operator.rshift,
              "and": operator.and_, "or": operator.or_, "xor": operator.xor}
_OPMOD_INPLACE = {"add": operator.iadd, "sub": operator.isub, "mul": operator.imul,
                  "matmul": operator.imatmul, "truediv": operator.itruediv,
                  "floordiv": operator.ifloordiv, "mod": operator.imod, "pow": operator.ipow,
                  "lshift": operator.ilshift, "rshift": operator.irshift, "and": operator.iand,
                  "or": operator.ior, "xor": operator.ixor}

for _op, _ in BINOPS:
    add(f"opmod[{_op}-fwd-int]", opmod_binary, _OPMOD_BIN[_op], _mk(Fwd, 5), 2)
    add(f"opmod[{_op}-int-refl]", opmod_binary, _OPMOD_BIN[_op], 2, _mk(Refl, 5))
    if _op in FULL_BINOPS:
        add(f"opmod[i{_op}-inpl-int]", opmod_binary, _OPMOD_INPLACE[_op], _mk(Inpl, 5), 2)
        add(f"opmod[i{_op}-inplni-refl]", opmod_binary, _OPMOD_INPLACE[_op], _mk(InplNever, 5), _mk(Refl, 2))
for _op, _ in CMPOPS:
    add(f"opmod[{_op}-all-int]", opmod_binary, getattr(operator, _op), _mk(CAll, 5), 2)
    add(f"opmod[{_op}-all-sub]", opmod_binary, getattr(operator, _op), _mk(CAll, 5), _mk(CSub, 2))
    add(f"opmod[{_op}-never-never]", opmod_binary, getattr(operator, _op), _mk(CNever, 5), _mk(CNever, 2))

for _name, _fn, _arg in [
    ("not_-boolfalse", operator.not_, _mk(BoolFalse, 0)), ("not_-lenthree", operator.not_, _mk(LenThree, 0)),
    ("truth-booltrue", operator.truth, _mk(BoolTrue, 0)), ("truth-lenzero", operator.truth, _mk(LenZero, 0)),
    ("truth-bool_int", operator.truth, _mk(BoolInt, 0)), ("truth-len_neg", operator.truth, _mk(LenNeg, 0)),
    ("neg-all", operator.neg, _mk(UAll, 2)), ("pos-all", operator.pos, _mk(UAll, 2)),
    ("inv-all", operator.inv, _mk(UAll, 2)), ("abs-all", operator.abs, _mk(UAll, -2)),
    ("neg-plain", operator.neg, _mk(Plain, 2)), ("index-index", operator.index, _mk(Index, 6)),
]:
    add(f"opmod[{_name}]", opmod_unary, _fn, _arg)

for _name, _c, _x in [("contains-has", lambda: HasContains([1, 2]), 2),
                      ("contains-iter", lambda: IterList([EqItem(1), EqItem(2)]), 2),
                      ("contains-oldseq", lambda: OldSeq([1, 2]), 5),
                      ("contains-none", _mk(ContainsIsNone, 0), 1),
                      ("contains-plain", _mk(Plain, 0), 1)]:
    add(f"opmod[{_name}]", opmod_binary, operator.contains, _c, _x)


def opmod_is_not_dunder():
    a, b = CAll(1), CAll(1)
    return operator.is_(a, b), operator.is_not(a, b), operator.eq(a, b)


def opmod_via_map():
    return list(map(operator.add, [Fwd(1), Fwd(2)], [10, 20]))


def opmod_via_reduce():
    return functools.reduce(operator.add, [Both(1), Both(2), Both(3)])


def opmod_length_hint():
    return operator.length_hint(LenThree(0)), operator.length_hint(Plain(0), 9)


def opmod_methodcaller_and_attrgetter():
    return operator.methodcaller("__add__", 5)(Fwd(1)), operator.attrgetter("v")(Fwd(2))


add("opmod[is_not_dunder]", opmod_is_not_dunder)
add("c_callers[opmod_via_map]", opmod_via_map)
add("c_callers[opmod_via_reduce]", opmod_via_reduce)
add("c_callers[opmod_length_hint]", opmod_length_hint)
add("c_callers[opmod_methodcaller]", opmod_methodcaller_and_attrgetter)


# ==========================================================================================
# subtle: hand-written dispatch rules and error messages
# ==========================================================================================

class AddNI(_Obj):
    """__add__ returns NotImplemented; __radd__ exists but same-type operands never reach it."""

    def __add__(self, other):
        _note("AddNI.__add__", self, other)
        return NotImplemented

    def __radd__(self, other):
        _note("AddNI.__radd__", self, other)
        return "radd"


class SubAddNI(AddNI):
    pass


class SubFwdOnly(Both):
    """Overrides the forward method only: the base's forward method keeps priority on the left."""

    def __add__(self, other):
        _note("SubFwdOnly.__add__", self, other)
        return "subfwd"


class EqTruthyResult(_Obj):
    def __eq__(self, other):
        _note("EqTruthyResult.__eq__", self, other)
        return Truthy(self.v == _val(other))

    def __lt__(self, other):
        _note("EqTruthyResult.__lt__", self, other)
        return Truthy(self.v < _val(other))

    __hash__ = None


class NeOnly(_Obj):
    def __ne__(self, other):
        _note("NeOnly.__ne__", self, other)
        return "ne!"


class EqReturnsStr(_Obj):
    def __eq__(self, other):
        _note("EqReturnsStr.__eq__", self, other)
        return "" if self.v != _val(other) else "same"

    __hash__ = None


class EqA(_Obj):
    def __eq__(self, other):
        _note("EqA.__eq__", self, other)
        return NotImplemented if isinstance(other, EqB) else self.v == _val(other)

    __hash__ = None


class EqB(_Obj):
    def __eq__(self, other):
        _note("EqB.__eq__", self, other)
        return ("EqB decides", self.v, _val(other))

    __hash__ = None


class Countdown(_Obj):
    def __bool__(self):
        _note("Countdown.__bool__", self)
        self.v -= 1
        return self.v >= 0


class FwdRaisesTypeError(_Obj):
    def __add__(self, other):
        _note("FwdRaisesTypeError.__add__", self, other)
        raise TypeError("my own TypeError")

    def __radd__(self, other):
        _note("FwdRaisesTypeError.__radd__", self, other)
        return "unreachable"


class FwdReturnsNone(_Obj):
    def __add__(self, other):
        _note("FwdReturnsNone.__add__", self, other)
        return None


class GetattrEverything(_Obj):
    def __getattr__(self, name):
        _note("GetattrEverything.__getattr__", self, name)
        return lambda *a: ("via getattr", name, len(a))


class IntCmp(int):
    def __gt__(self, other):
        _note("IntCmp.__gt__", self, other)
        return "IntCmp.__gt__"


class IntRadd(int):
    def __radd__(self, other):
        _note("IntRadd.__radd__", self, other)
        return ("IntRadd.__radd__", int(self), other)


def subtle_same_type_never_reflected(a, b):
    return a + b


def subtle_subclass_not_overriding_reflected(a, b):
    return a + b


def subtle_ne_inverts_truthy_eq(a, b):
    return a != b, a == b


def subtle_ne_only_defined(a, b):
    return a == b, a != b, b != a


def subtle_eq_returns_str(a, b):
    r = a == b
    if a == b:
        return "truthy", r
    return "falsy", r


def subtle_eq_result_truth_in_if(a, b):
    if a == b:
        return "equal"
    return "different"


def subtle_not_of_eq_result(a, b):
    return not (a == b)


def subtle_chained_comparison(a, b, c):
    return a < b < c


def subtle_chained_comparison_short_circuits(a, b, c):
    return a < b < c, "after"


def subtle_eq_other_class_decides(a, b):
    return a == b, b == a, a != b


def subtle_while_countdown(c):
    n = 0
    while c:
        n += 1
    return n, c.v


def subtle_and_or_chains(a, b, c):
    return (a and b and c), (a or b or c), (not a or not b)


def subtle_and_returns_operand(a):
    r = a and "rhs"
    return r is a


def subtle_forward_raises_typeerror(a):
    return a + 1


def subtle_forward_raises_typeerror_reflected_side(a):
    return 1 + a


def subtle_forward_returns_none(a):
    return a + 1


def subtle_instance_dunders_ignored():
    a = Fwd(1)
    a.__add__ = lambda other: "instance!"
    a.__len__ = lambda: 5
    a.__bool__ = lambda: False
    out = [a + 1, bool(a)]
    try:
        len(a)
    except TypeError as e:
        out.append(str(e))
    return out


def subtle_getattr_does_not_supply_dunders():
    g = GetattrEverything(1)
    out = []
    for f in (lambda: g + 1, lambda: len(g), lambda: -g, lambda: 1 in g, lambda: g < g):
        try:
            out.append(f())
        except TypeError as e:
            out.append(str(e))
    out.append(bool(g))
    out.append(g == g)
    out.append(g.__add__(1))  # explicit attribute access does go through __getattr__
    return out


def subtle_int_subclass_reflected_first():
    return 3 + IntRadd(4), IntRadd(4) + 3, True + IntRadd(1)


def subtle_int_subclass_reflected_cmp():
    return 1 < IntCmp(2), IntCmp(2) > 1, 1.5 < IntCmp(2)


def subtle_ordering_messages():
    class Local(_Obj):
        pass
    out = []
    for f in (lambda: Local(1) < 1, lambda: 1 >= Local(1), lambda: "a" <= Plain(1),
              lambda: Local(1) > Plain(2), lambda: [1] < Local(1), lambda: None < None,
              lambda: Local(1) + 1, lambda: 1.5 - Local(1), lambda: Local(1) @ Local(1),
              lambda: divmod(Local(1), 2), lambda: -Local(1), lambda: abs(Local(1)),
              lambda: ~Local(1), lambda: len(Local(1))):
        try:
            out.append(f())
        except TypeError as e:
            out.append(str(e))
    return out


def subtle_inplace_rebinding(a, b):
    before = a
    a += b
    return a is before, _short(a), _short(before)


def subtle_inplace_targets():
    items = [InplSelf(1), Inpl(2)]
    holder = Plain(InplSelf(3))
    d = {"k": InplSelf(4)}
    items[0] += 1
    items[1] += 2
    holder.v += 3
    d["k"] += 4
    return [_short(x) for x in items], _short(holder.v), _short(d["k"])


def subtle_inplace_falls_back_to_reflected():
    x = 10
    x -= Refl(3)
    y = InplNI(1)
    y *= Both(2)
    return x, y


def subtle_list_repeat_via_index():
    return [1, 2] * Index(2), Index(3) * "ab", (0,) * Index(1)


def subtle_list_repeat_reflected_first():
    class MulAndIndex(Index):
        def __rmul__(self, other):
            _note("MulAndIndex.__rmul__", self, other)
            return NotImplemented
    return [7] * MulAndIndex(3)


def subtle_str_mod_ignores_rmod():
    try:
        return "s" % Refl(1)  # noqa: F507 - str formatting never reaches __rmod__
    except TypeError as e:
        return str(e)


def subtle_bool_on_compare_result_in_assert(a, b):
    try:
        assert a == b, "not equal"
        return "passed"
    except AssertionError as e:
        return str(e)


def subtle_sub_reflected_priority_only_if_overridden():
    return Both(1) + SubFwdOnly(2), SubFwdOnly(2) + Both(1), AddNI(1) + SubAddNI(2)


def subtle_reflected_ni_for_same_class_eq():
    a, b = CNever(1), CNever(1)
    return a == b, a != b, a == a, a != a


def subtle_eq_with_none_and_ellipsis():
    a = CAll(None)
    return a == None, None == a, a != ..., ... != a  # noqa: E711


add("subtle[same_type_never_reflected]", subtle_same_type_never_reflected, _mk(AddNI, 1), _mk(AddNI, 2))
add("subtle[subclass_not_overriding_reflected]", subtle_subclass_not_overriding_reflected,
    _mk(AddNI, 1), _mk(SubAddNI, 2))
add("subtle[ne_inverts_truthy_eq]", subtle_ne_inverts_truthy_eq,
    _mk(EqTruthyResult, 1), _mk(EqTruthyResult, 1))
add("subtle[ne_inverts_truthy_eq_false]", subtle_ne_inverts_truthy_eq, _mk(EqTruthyResult, 1), 2)
add("subtle[ne_only_defined]", subtle_ne_only_defined, _mk(NeOnly, 1), _mk(NeOnly, 1))
add("subtle[eq_returns_str_equal]", subtle_eq_returns_str, _mk(EqReturnsStr, 1), 1)
add("subtle[eq_returns_str_different]", subtle_eq_returns_str, _mk(EqReturnsStr, 1), 2)
add("subtle[eq_result_truth_in_if]", subtle_eq_result_truth_in_if, _mk(EqTruthyResult, 3), 3)
add("subtle[eq_result_truth_in_if_false]", subtle_eq_result_truth_in_if, _mk(EqTruthyResult, 3), 4)
add("subtle[not_of_eq_result]", subtle_not_of_eq_result, _mk(EqTruthyResult, 3), 3)
add("subtle[chained_comparison]", subtle_chained_comparison,
    _mk(EqTruthyResult, 1), _mk(EqTruthyResult, 2), 3)
add("subtle[chained_comparison_short_circuits]", subtle_chained_comparison_short_circuits,
    _mk(EqTruthyResult, 5), _mk(EqTruthyResult, 2), 3)
add("subtle[chained_comparison_ints]", subtle_chained_comparison, 1, _mk(CAll, 2), 3)
add("subtle[eq_other_class_decides]", subtle_eq_other_class_decides, _mk(EqA, 1), _mk(EqB, 1))
add("subtle[while_countdown]", subtle_while_countdown, _mk(Countdown, 3))
add("subtle[and_or_chains_true]", subtle_and_or_chains, _mk(BoolTrue, 1), _mk(LenThree, 3), _mk(BoolTrue, 2))
add("subtle[and_or_chains_false]", subtle_and_or_chains,
    _mk(BoolFalse, 0), _mk(LenZero, 0), _mk(BoolFalse, 1))
add("subtle[and_returns_operand]", subtle_and_returns_operand, _mk(LenZero, 0))
add("subtle[forward_raises_typeerror]", subtle_forward_raises_typeerror, _mk(FwdRaisesTypeError, 1))
add("subtle[reflected_raises_typeerror]", subtle_forward_raises_typeerror_reflected_side,
    _mk(FwdRaisesTypeError, 1))
add("subtle[forward_returns_none]", subtle_forward_returns_none, _mk(FwdReturnsNone, 1))
add("subtle[instance_dunders_ignored]", subtle_instance_dunders_ignored)
add("subtle[getattr_does_not_supply_dunders]", subtle_getattr_does_not_supply_dunders)
add("subtle[int_subclass_reflected_first]", subtle_int_subclass_reflected_first)
add("subtle[int_subclass_reflected_cmp]", subtle_int_subclass_reflected_cmp)
add("subtle[ordering_and_operand_messages]", subtle_ordering_messages)
add("subtle[inplace_rebinding_new]", subtle_inplace_rebinding, _mk(Inpl, 1), 2)
add("subtle[inplace_rebinding_self]", subtle_inplace_rebinding, _mk(InplSelf, 1), 2)
add("subtle[inplace_rebinding_fallback]", subtle_inplace_rebinding, _mk(InplNI, 1), 2)
add("subtle[inplace_targets]", subtle_inplace_targets)
add("subtle[inplace_falls_back_to_reflected]", subtle_inplace_falls_back_to_reflected)
add("subtle[sequence_repeat_via_index]", subtle_list_repeat_via_index)
add("subtle[sequence_repeat_reflected_first]", subtle_list_repeat_reflected_first)
add("subtle[str_mod_ignores_rmod]", subtle_str_mod_ignores_rmod)
add("subtle[assert_on_compare_result]", subtle_bool_on_compare_result_in_assert, _mk(EqTruthyResult, 1), 2)
add("subtle[sub_priority_only_if_reflected_overridden]", subtle_sub_reflected_priority_only_if_overridden)
add("subtle[eq_identity_fallback]", subtle_reflected_ni_for_same_class_eq)
add("subtle[eq_with_none_and_ellipsis]", subtle_eq_with_none_and_ellipsis)
add_raw("subtle[raw_unsupported_operands]", do_add, _mk(Plain, 1), "x")
add_raw("subtle[raw_unsupported_inplace]", do_ixor, _mk(InplNever, 1), 2.5)
add_raw("subtle[raw_ordering_not_supported]", cmp_ge, _mk(CNever, 1), _mk(Plain, 1))
add_raw("subtle[raw_bool_should_return_bool]", truth_if, _mk(BoolInt, 1))
add_raw("subtle[raw_len_negative]", len_of, _mk(LenNeg, 1))
add_raw("subtle[raw_unhashable]", hash_of, _mk(EqNoHash, 1))
add_raw("subtle[raw_hash_not_int]", hash_of, _mk(HashStr, 1))
add_raw("subtle[raw_not_a_container]", contains_in, 1, _mk(ContainsIsNone, 1))


# ==========================================================================================
# builtin_sub: subclasses of builtins with Python dunders, mixed with plain builtins
# ==========================================================================================

class MyInt(int):
    def __add__(self, other):
        _note("MyInt.__add__", self, other)
        r = super().__add__(other)
        return r if r is NotImplemented else MyInt(r)

    def __radd__(self, other):
        _note("MyInt.__radd__", self, other)
        r = super().__radd__(other)
        return r if r is NotImplemented else MyInt(r)

    def __eq__(self, other):
        _note("MyInt.__eq__", self, other)
        return int(self) == other

    __hash__ = int.__hash__


class IntSubOnly(int):
    def __sub__(self, other):
        _note("IntSubOnly.__sub__", self, other)
        return "IntSubOnly.__sub__"


class MyFloat(float):
    def __mul__(self, other):
        _note("MyFloat.__mul__", self, other)
        return MyFloat(float(self) * other)

    def __rmul__(self, other):
        _note("MyFloat.__rmul__", self, other)
        return MyFloat(other * float(self))

    def __eq__(self, other):
        _note("MyFloat.__eq__", self, other)
        return abs(float(self) - other) < 1e-9

    __hash__ = float.__hash__


class MyStr(str):
    def __add__(self, other):
        _note("MyStr.__add__", self, other)
        return MyStr(str(self) + "+" + other)

    def __radd__(self, other):
        _note("MyStr.__radd__", self, other)
        return MyStr(other + "+" + str(self))

    def __mod__(self, other):
        _note("MyStr.__mod__", self, other)
        return "formatted:" + str.__mod__(self, other)

    def __contains__(self, item):
        _note("MyStr.__contains__", self, item)
        return str.__contains__(self.lower(), item.lower())

    def __len__(self):
        _note("MyStr.__len__", self)
        return str.__len__(self) * 100

    def __eq__(self, other):
        _note("MyStr.__eq__", self, other)
        return str.lower(self) == str.lower(other)

    __hash__ = str.__hash__


class MyList(list):
    def __add__(self, other):
        _note("MyList.__add__", self, other)
        return MyList(list.copy(self) + list(other))

    def __iadd__(self, other):
        _note("MyList.__iadd__", self, other)
        self.extend(other)
        self.append("iadd")
        return self

    def __contains__(self, item):
        _note("MyList.__contains__", self, item)
        return list.__contains__(self, item) or item == "always"

    def __len__(self):
        _note("MyList.__len__", self)
        return list.__len__(self)

    def __eq__(self, other):
        _note("MyList.__eq__", self, other)
        return list.__eq__(self, other)

    def __mul__(self, n):
        _note("MyList.__mul__", self, n)
        return MyList(list.copy(self) * n)

    __hash__ = None


class MyDict(dict):
    def __or__(self, other):
        _note("MyDict.__or__", self, other)
        return MyDict(dict.__or__(self, other))

    def __ror__(self, other):
        _note("MyDict.__ror__", self, other)
        return MyDict(dict.__ror__(self, other))

    def __ior__(self, other):
        _note("MyDict.__ior__", self, other)
        self.update(other)
        self["ior"] = True
        return self

    def __contains__(self, key):
        _note("MyDict.__contains__", self, key)
        return dict.__contains__(self, key) or key == "always"

    def __len__(self):
        _note("MyDict.__len__", self)
        return dict.__len__(self) + 1000

    def __eq__(self, other):
        _note("MyDict.__eq__", self, other)
        return dict.__eq__(self, other)

    __hash__ = None


class MyTuple(tuple):
    def __add__(self, other):
        _note("MyTuple.__add__", self, other)
        return MyTuple(tuple(self) + tuple(other))

    def __radd__(self, other):
        _note("MyTuple.__radd__", self, other)
        return MyTuple(tuple(other) + tuple(self))

    def __lt__(self, other):
        _note("MyTuple.__lt__", self, other)
        return len(tuple(self)) < len(tuple(other))

    def __mul__(self, n):
        _note("MyTuple.__mul__", self, n)
        return MyTuple(tuple(self) * n)


class MySet(set):
    def __ror__(self, other):
        _note("MySet.__ror__", self, other)
        return MySet(set.__ror__(self, other))

    def __ge__(self, other):
        _note("MySet.__ge__", self, other)
        return "MySet.__ge__"


def bsub_int_mix():
    return [MyInt(3) + 4, 4 + MyInt(3), MyInt(3) + MyInt(4), MyInt(3) + True, True + MyInt(3),
            3.5 + MyInt(3), MyInt(3) + 3.5, type(MyInt(3) + 4).__name__]


def bsub_int_inplace():
    x = MyInt(3)
    x += 4
    y = 10
    y += MyInt(1)
    return x, type(x).__name__, y, type(y).__name__


def bsub_int_eq():
    return MyInt(3) == 3, 3 == MyInt(3), MyInt(3) != 4, 4 != MyInt(3), MyInt(3) == 3.0


def bsub_int_sub_only():
    return 5 - IntSubOnly(2), IntSubOnly(2) - 5, IntSubOnly(2) + 1, -IntSubOnly(2)


def bsub_float():
    return [2 * MyFloat(1.5), MyFloat(1.5) * 2, MyFloat(1.5) == 1.5, 1.5 == MyFloat(1.5),
            MyFloat(0.1) * MyFloat(3.0), 1.5 != MyFloat(1.5)]


def bsub_str():
    s = MyStr("Abc")
    return ["x" + s, s + "x", "b" in s, "z" in s, len(s), s == "ABC", "abc" == s,
            s != "abd", MyStr("v=%d") % 5, "%s" % "plain", bool(MyStr(""))]


def bsub_list():
    ml = MyList([1])
    out = [ml + [2], [2] + ml, 1 in ml, "always" in ml, 5 in ml, len(ml), bool(ml),
           ml == [1], [1] == ml, ml != [1], ml * 2, 2 * ml]
    ml += [3]
    out.append(list.copy(ml))  # list(ml) would ask __len__ for a length hint: see c_callers
    return out


def bsub_list_empty_truth():
    ml = MyList()
    if ml:
        return "truthy"
    return "falsy", not ml


def bsub_dict():
    md = MyDict(a=1)
    out = [{"z": 0} | md, md | {"b": 2}, "a" in md, "always" in md, "q" in md, len(md),
           bool(md), md == {"a": 1}, {"a": 1} == md, md != {"a": 1}]
    md |= {"c": 3}
    out.append(dict(md))
    return out


def bsub_tuple():
    mt = MyTuple((1, 2))
    return [(0,) + mt, mt + (3,), mt < (9, 9, 9), (9, 9, 9) > mt, mt * 2, (5,) < mt,
            len(mt), 2 in mt, mt == (1, 2)]


def bsub_set():
    return [{1} | MySet({2}), MySet({2}) | {1}, {1} <= MySet({1, 2}), MySet({1}) >= {1}]


def bsub_list_contains_in_loop():
    ml = MyList([0, 1, 2])
    found = []
    for i in range(4):
        if i in ml:
            found.append(i)
    return found


for _name, _fn in [("int_mix", bsub_int_mix), ("int_inplace", bsub_int_inplace), ("int_eq", bsub_int_eq),
                   ("int_sub_only", bsub_int_sub_only), ("float", bsub_float), ("str", bsub_str),
                   ("list", bsub_list), ("list_empty_truth", bsub_list_empty_truth), ("dict", bsub_dict),
                   ("tuple", bsub_tuple), ("set", bsub_set),
                   ("list_contains_in_loop", bsub_list_contains_in_loop)]:
    add(f"builtin_sub[{_name}]", _fn)


# ==========================================================================================
# defined_via: inheritance, mixins, super(), aliases, metaclasses, descriptors, late binding
# ==========================================================================================

class VBase(_Obj):
    def __add__(self, other):
        _note(f"{type(self).__name__}->VBase.__add__", self, other)
        return VBase(self.v + _val(other))

    __radd__ = __add__

    def __len__(self):
        _note(f"{type(self).__name__}->VBase.__len__", self)
        return self.v

    def __eq__(self, other):
        _note(f"{type(self).__name__}->VBase.__eq__", self, other)
        return type(other) is type(self) and self.v == other.v

    __hash__ = None


class VChild(VBase):
    pass


class VGrandChild(VChild):
    def __add__(self, other):
        _note("VGrandChild.__add__", self, other)
        r = super().__add__(other)  # an explicit call: VBase.__add__'s caller is __add__
        return VGrandChild(r.v * 10)


class LoggingMixin:
    def __add__(self, other):
        _note(f"{type(self).__name__}->LoggingMixin.__add__", self, other)
        return ("mixin", super().__add__(other))

    def __contains__(self, x):
        _note(f"{type(self).__name__}->LoggingMixin.__contains__", self, x)
        return x == self.v


class Mixed(LoggingMixin, VBase):
    pass


class SubViaNested(_Obj):
    def __sub__(self, other):
        _note("SubViaNested.__sub__", self, other)
        return self.v + (-other)  # nested operators: __neg__ of other, __radd__ ...


class EqLambda(_Obj):
    __eq__ = lambda self, other: _note("EqLambda.__eq__", self, other) or self.v == _val(other)  # noqa: E731
    __hash__ = None


class StaticAdd(_Obj):
    @staticmethod
    def __add__(other):
        _note("StaticAdd.__add__(static)", other)
        return ("static", _short(other))


class ClassAdd(_Obj):
    @classmethod
    def __add__(cls, other):
        _note("ClassAdd.__add__(classmethod)", cls, other)
        return ("classmethod", cls.__name__, _short(other))


class Adder:
    def __call__(self, *args):
        _note("Adder.__call__", *args)
        return ("callable instance", len(args))


class CallableAttrAdd(_Obj):
    __add__ = Adder()  # not a descriptor: called with the other operand only


def _add_impl(self, other, scale):
    _note(f"{type(self).__name__}._add_impl", self, other, scale)
    return self.v * scale + _val(other)


class PartialMethodAdd(_Obj):
    __add__ = functools.partialmethod(_add_impl, scale=10)


def _logged_wrapper(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        _note(f"wrapper({fn.__name__})", *args)
        return fn(*args)
    return wrapper


class WrappedDunders(_Obj):
    @_logged_wrapper
    def __mul__(self, other):
        _note("WrappedDunders.__mul__", self, other)
        return self.v * _val(other)

    @_logged_wrapper
    def __bool__(self):
        _note("WrappedDunders.__bool__", self)
        return self.v > 0


class Meta(type):
    def __add__(cls, other):
        _note("Meta.__add__", cls, other)
        return (cls.__name__, "+", other)

    def __len__(cls):
        _note("Meta.__len__", cls)
        return len(cls.__name__)

    def __contains__(cls, x):
        _note("Meta.__contains__", cls, x)
        return x in cls.members

    def __bool__(cls):
        _note("Meta.__bool__", cls)
        return bool(cls.members)

    def __eq__(cls, other):
        _note("Meta.__eq__", cls, other)
        return isinstance(other, str) and cls.__name__ == other

    __hash__ = type.__hash__

    def __invert__(cls):
        _note("Meta.__invert__", cls)
        return "inverted " + cls.__name__

    def __lt__(cls, other):
        _note("Meta.__lt__", cls, other)
        return len(cls.members) < other


class WithMeta(metaclass=Meta):
    members = [1, 2]


class EmptyMeta(metaclass=Meta):
    members = []


class Slotted:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        _note("Slotted.__add__", other)
        return self.v + other

    def __len__(self):
        _note("Slotted.__len__")
        return self.v


def via_inheritance():
    c, g = VChild(1), VGrandChild(2)
    return [_short(c + 1), _short(1 + c), _short(g + 1), len(c), len(g), c == VChild(1), c == VBase(1),
            bool(VChild(0))]


def via_mixin():
    m = Mixed(3)
    return [(m + 1)[0], _short((m + 1)[1]), 3 in m, 4 in m, len(m)]


def via_nested_operators():
    return SubViaNested(10) - UAll(3), SubViaNested(Both(1)) - UAll(2)


def via_lambda_eq():
    return EqLambda(1) == 1, 2 == EqLambda(2), EqLambda(1) != 1


def via_staticmethod_classmethod():
    return StaticAdd(1) + 5, ClassAdd(1) + 5


def via_callable_instance():
    return CallableAttrAdd(1) + 7


def via_partialmethod():
    return PartialMethodAdd(2) + 3


def via_wrapped():
    w = WrappedDunders(3)
    return w * 2, bool(w), not WrappedDunders(0)


def via_metaclass():
    out = [WithMeta + 1, len(WithMeta), 2 in WithMeta, 5 in WithMeta, bool(WithMeta), bool(EmptyMeta),
           WithMeta == "WithMeta", "WithMeta" == WithMeta, WithMeta != "x", ~WithMeta, WithMeta < 5,
           1 > EmptyMeta]
    if EmptyMeta:
        out.append("empty is truthy?")
    return out


def via_slots():
    s = Slotted(3)
    return s + 4, len(s), bool(s)


def via_late_binding():
    class Late(_Obj):
        pass
    out = []
    try:
        out.append(Late(1) + 1)
    except TypeError as e:
        out.append(str(e))

    def late_add(self, other):
        _note("late_add", self, other)
        return self.v + other
    Late.__add__ = late_add
    Late.__len__ = lambda self: _note("late_len", self) or 4
    out.append(Late(1) + 1)
    out.append(len(Late(1)))
    out.append(bool(Late(1)))
    del Late.__add__
    del Late.__len__
    try:
        out.append(Late(1) + 1)
    except TypeError as e:
        out.append(str(e))
    out.append(bool(Late(1)))
    return out


def via_type_call():
    def dyn_add(self, other):
        _note("Dyn.__add__", self, other)
        return ("dyn", self.v, other)

    def dyn_bool(self):
        _note("Dyn.__bool__", self)
        return False
    Dyn = type("Dyn", (_Obj,), {"__add__": dyn_add, "__bool__": dyn_bool})
    d = Dyn(4)
    return d + 1, bool(d), "yes" if d else "no"


def via_class_reassigned():
    obj = Fwd(1)
    first = obj + 1
    obj.__class__ = Refl
    try:
        second = obj + 1
    except TypeError as e:
        second = str(e)
    return first, second, 1 + obj


def via_closure_state():
    calls = []

    class Local(_Obj):
        def __add__(self, other):
            calls.append(other)
            _note("Local.__add__", self, other)
            return len(calls)
    a = Local(0)
    return a + 1, a + 2, calls


def via_abc():
    import collections.abc as cabc

    class Bag(cabc.Sized, cabc.Container):
        def __init__(self, items):
            self.items = items

        def __len__(self):
            _note("Bag.__len__", self)
            return len(self.items)

        def __contains__(self, x):
            _note("Bag.__contains__", self, x)
            return x in self.items
    b = Bag([1, 2])
    return len(b), 2 in b, bool(b), isinstance(b, cabc.Sized)


for _name, _fn in [("inheritance", via_inheritance), ("mixin_super", via_mixin),
                   ("nested_operators", via_nested_operators), ("lambda_eq", via_lambda_eq),
                   ("staticmethod_classmethod", via_staticmethod_classmethod),
                   ("callable_instance", via_callable_instance), ("partialmethod", via_partialmethod),
                   ("wrapped_decorator", via_wrapped), ("metaclass", via_metaclass), ("slots", via_slots),
                   ("late_binding", via_late_binding), ("type_call", via_type_call),
                   ("class_reassigned", via_class_reassigned), ("closure_state", via_closure_state),
                   ("abc", via_abc)]:
    add(f"defined_via[{_name}]", _fn)


# ==========================================================================================
# effects: side effects inside dunders (self, other, globals, class attributes, stdout)
# ==========================================================================================

EFFECTS = {"count": 0, "trail": []}


def _reset_effects():
    EFFECTS.clear()
    EFFECTS.update(count=0, trail=[])


def _observe_effects():
    return EFFECTS["count"], list(EFFECTS["trail"]), Counted.calls


class Counted(_Obj):
    calls = 0

    def __add__(self, other):
        _note("Counted.__add__", self, other)
        self.v += 1                      # self
        if isinstance(other, list):
            other.append("touched")      # the other operand
        EFFECTS["count"] += 1            # module global
        EFFECTS["trail"].append(("add", self.v))
        type(self).calls += 1            # class attribute
        return self.v

    def __bool__(self):
        _note("Counted.__bool__", self)
        EFFECTS["trail"].append(("bool", self.v))
        return self.v < 3

    def __eq__(self, other):
        _note("Counted.__eq__", self, other)
        if isinstance(other, Counted):
            other.v += 100               # mutating the other object during a comparison
        return False

    __hash__ = None


def _reset_counted():
    _reset_effects()
    Counted.calls = 0


class Printer(_Obj):
    def __add__(self, other):
        print("Printer.__add__", self.v, _short(other))
        _note("Printer.__add__", self, other)
        return self.v + _val(other)

    def __radd__(self, other):
        print("Printer.__radd__", self.v, _short(other))
        _note("Printer.__radd__", self, other)
        return _val(other) + self.v

    def __bool__(self):
        print("Printer.__bool__", self.v)
        _note("Printer.__bool__", self)
        return bool(self.v)

    def __len__(self):
        print("Printer.__len__ (never used for truth)")
        return 0

    def __contains__(self, x):
        print("Printer.__contains__", x, end="|")
        _note("Printer.__contains__", self, x)
        return False

    def __lt__(self, other):
        print(f"Printer.__lt__ {self.v} < {_val(other)}")
        _note("Printer.__lt__", self, other)
        return self.v < _val(other)


class Accumulator(_Obj):
    def __init__(self, v=0):
        super().__init__(v)
        self.items = []

    def __iadd__(self, other):
        _note("Accumulator.__iadd__", self, other)
        self.items.extend(other if isinstance(other, list) else [other])
        return self

    def __len__(self):
        _note("Accumulator.__len__", self)
        return len(self.items)


class CachingContains(_Obj):
    def __init__(self, items):
        super().__init__(0)
        self.items = set(items)
        self.cache = {}

    def __contains__(self, x):
        _note("CachingContains.__contains__", self, x)
        if x not in self.cache:
            self.cache[x] = x in self.items
        return self.cache[x]


def effects_self_other_globals(a, other):
    r1 = a + other
    r2 = a + other
    return r1, r2, EFFECTS["count"]


def effects_bool_in_loop(a):
    n = 0
    while a:
        a + None
        n += 1
    return n


def effects_eq_mutates_other(a, b):
    return a == b, b.v, a != b, b.v


def effects_printing(p, q):
    print("before")
    total = p + q
    total2 = 10 + p
    if p:
        print("p is truthy")
    found = 3 in p
    less = p < q
    print("after", total, total2, found, less)
    return total


def effects_printing_sorted_loop():
    ps = [Printer(3), Printer(1), Printer(2)]
    best = ps[0]
    for p in ps[1:]:
        if p < best:
            best = p
    return best.v


def effects_inplace_accumulates(acc):
    acc += 1
    acc += [2, 3]
    before = acc
    acc += 4
    return acc is before, len(acc)


def effects_caching_contains(c):
    return [x in c for x in (1, 2, 1, 3, 2)], sorted(c.cache.items())


def effects_global_rebinding():
    global GLOBAL_ACC
    GLOBAL_ACC += 5
    GLOBAL_ACC += Both(1)
    return _short(GLOBAL_ACC)


GLOBAL_ACC = None


def _reset_global_acc():
    global GLOBAL_ACC
    GLOBAL_ACC = InplSelf(1)


def _observe_global_acc():
    return _short(GLOBAL_ACC)


STATEFUL = [
    ("effects[self_other_globals_class]", effects_self_other_globals, (_mk(Counted, 0), lambda: [1]),
     _observe_effects, _reset_counted),
    ("effects[bool_in_loop]", effects_bool_in_loop, (_mk(Counted, 0),), _observe_effects, _reset_counted),
    ("effects[eq_mutates_other]", effects_eq_mutates_other, (_mk(Counted, 0), _mk(Counted, 1)),
     _observe_effects, _reset_counted),
    ("effects[global_rebinding]", effects_global_rebinding, (), _observe_global_acc, _reset_global_acc),
]
for _name, _fn, _operands, _observe, _reset in STATEFUL:
    add(_name, _fn, *_operands)
    OBSERVERS[_name] = (_observe, _reset)

add("effects[printing]", effects_printing, _mk(Printer, 1), _mk(Printer, 2))
add("effects[printing_falsy]", effects_printing, _mk(Printer, 0), 5)
add("effects[printing_compare_loop]", effects_printing_sorted_loop)
add("effects[inplace_accumulates]", effects_inplace_accumulates, lambda: Accumulator())
add("effects[caching_contains]", effects_caching_contains, lambda: CachingContains([1, 2]))


# ==========================================================================================
# errors: dunders that raise
# ==========================================================================================

class MyError(Exception):
    def __init__(self, msg, code):
        super().__init__(msg)
        self.code = code


class Raiser(_Obj):
    def __add__(self, other):
        _note("Raiser.__add__", self, other)
        raise ValueError(f"cannot add {_short(other)} to {self.v}")

    def __radd__(self, other):
        _note("Raiser.__radd__", self, other)
        raise MyError("radd failed", code=self.v)

    def __eq__(self, other):
        _note("Raiser.__eq__", self, other)
        raise LookupError("eq failed")

    def __contains__(self, x):
        _note("Raiser.__contains__", self, x)
        raise KeyError(x)

    def __len__(self):
        _note("Raiser.__len__", self)
        raise ZeroDivisionError("len failed")

    def __neg__(self):
        _note("Raiser.__neg__", self)
        return 1 // 0

    def __iadd__(self, other):
        _note("Raiser.__iadd__", self, other)
        raise AttributeError("iadd failed")

    __hash__ = None


class RaiseFromNone(_Obj):
    def __sub__(self, other):
        _note("RaiseFromNone.__sub__", self, other)
        try:
            {}["missing"]
        except KeyError:
            raise ValueError("clean") from None


class CatchesOwn(_Obj):
    def __mul__(self, other):
        _note("CatchesOwn.__mul__", self, other)
        try:
            return self.v / other
        except ZeroDivisionError as e:
            return ("caught inside", str(e))


class ExcInfoReader(_Obj):
    def __add__(self, other):
        _note("ExcInfoReader.__add__", self, other)
        t, e, _ = sys.exc_info()
        return (t.__name__ if t else None, str(e) if e else None)

    def __bool__(self):
        _note("ExcInfoReader.__bool__", self)
        return sys.exc_info()[0] is not None


class StopIt(_Obj):
    def __add__(self, other):
        _note("StopIt.__add__", self, other)
        raise StopIteration("from a dunder")


class AssertingDunder(_Obj):
    def __lt__(self, other):
        _note("AssertingDunder.__lt__", self, other)
        assert isinstance(other, AssertingDunder), "only with my kind"
        return self.v < other.v


class Outer(_Obj):
    def __add__(self, other):
        _note("Outer.__add__", self, other)
        return self.v + other  # self.v is a Raiser: the inner dunder raises


def err_caught_by_caller(a, b):
    try:
        return a + b
    except ValueError as e:
        return "caught", str(e)


def err_reflected_raises(a):
    try:
        return 1 + a
    except MyError as e:
        return "caught", str(e), e.code


def err_eq_in_if(a):
    try:
        if a == 1:
            return "equal"
        return "not equal"
    except LookupError as e:
        return type(e).__name__, str(e)


def err_contains_keyerror(a):
    try:
        return 5 in a
    except LookupError as e:
        return type(e).__name__, str(e), e.args


def err_len_else_finally(a):
    out = []
    try:
        n = len(a)
    except ZeroDivisionError as e:
        out.append(("except", str(e)))
    else:
        out.append(("else", n))
    finally:
        out.append("finally")
    return out


def err_bool_while_finally(a):
    n = 0
    try:
        while a:
            n += 1
    finally:
        print("finally ran after", n)


def err_neg_zero_division(a):
    try:
        return -a
    except ArithmeticError as e:
        return type(e).__name__, str(e)


def err_iadd_does_not_rebind(a):
    original = a
    try:
        a += 1
    except AttributeError as e:
        return str(e), a is original
    return "no error"


def err_context_from_caller_handler(a):
    try:
        raise KeyError("outer")
    except KeyError:
        try:
            a + 1
        except ValueError as e:
            return str(e), type(e.__context__).__name__, str(e.__context__)


def err_from_none(a):
    try:
        a - 1
    except ValueError as e:
        return str(e), e.__suppress_context__, e.__context__ is not None, e.__cause__


def err_catches_own(a):
    return a * 0, a * 2


def err_exc_info_in_dunder(a):
    calm = a + 1
    try:
        raise IndexError("handled now")
    except IndexError:
        during = a + 1
        truth = bool(a)
    return calm, during, truth, bool(a)


def err_stopiteration_in_generator_caller(a):
    def gen():
        yield 1
        yield a + 1
    out = []
    try:
        for x in gen():
            out.append(x)
    except RuntimeError as e:
        out.append((type(e).__name__, str(e), type(e.__cause__).__name__))
    return out


def err_stopiteration_plain_caller(a):
    try:
        return a + 1
    except StopIteration as e:
        return "StopIteration", e.args


def err_assert_inside_dunder(a, b):
    try:
        return a < b
    except AssertionError as e:
        return "assert", str(e)


def err_nested_dunder(a):
    try:
        return a + 1
    except MyError as e:
        return "inner radd", str(e), e.code
    except ValueError as e:
        return "inner add", str(e)


def err_comprehension(xs):
    try:
        return [x + 1 for x in xs]
    except ValueError as e:
        return "comprehension", str(e)


def err_escapes(a):
    return a + 2


add("errors[caught_by_caller]", err_caught_by_caller, _mk(Raiser, 1), 2)
add("errors[reflected_raises]", err_reflected_raises, _mk(Raiser, 7))
add("errors[eq_in_if]", err_eq_in_if, _mk(Raiser, 1))
add("errors[contains_keyerror]", err_contains_keyerror, _mk(Raiser, 1))
add("errors[len_else_finally]", err_len_else_finally, _mk(Raiser, 1))
add("errors[len_else_finally_ok]", err_len_else_finally, _mk(LenThree, 1))
add("errors[bool_while_finally]", err_bool_while_finally, _mk(BoolRaises, 1))
add("errors[neg_zero_division]", err_neg_zero_division, _mk(Raiser, 1))
add("errors[iadd_does_not_rebind]", err_iadd_does_not_rebind, _mk(Raiser, 1))
add("errors[context_from_caller_handler]", err_context_from_caller_handler, _mk(Raiser, 1))
add("errors[raise_from_none]", err_from_none, _mk(RaiseFromNone, 1))
add("errors[dunder_catches_own]", err_catches_own, _mk(CatchesOwn, 1))
add("errors[exc_info_in_dunder]", err_exc_info_in_dunder, _mk(ExcInfoReader, 1))
add("errors[stopiteration_in_generator_caller]", err_stopiteration_in_generator_caller, _mk(StopIt, 1))
add("errors[stopiteration_plain_caller]", err_stopiteration_plain_caller, _mk(StopIt, 1))
add("errors[assert_inside_dunder]", err_assert_inside_dunder, _mk(AssertingDunder, 1), 2)
add("errors[nested_dunder_raises]", err_nested_dunder, lambda: Outer(Raiser(3)))
add("errors[comprehension]", err_comprehension, lambda: [Both(1), Raiser(2), Both(3)])
add_raw("errors[raw_escapes_add]", err_escapes, _mk(Raiser, 1))
add_raw("errors[raw_escapes_radd_custom]", do_add, 1, _mk(Raiser, 4))
add_raw("errors[raw_escapes_bool]", truth_not, _mk(BoolRaises, 2))
add_raw("errors[raw_escapes_hash]", hash_of, _mk(HashRaises, 2))
add_raw("errors[raw_escapes_contains]", contains_in, 1, _mk(Raiser, 2))


# ==========================================================================================
# callers: the operator inside generators, lambdas, comprehensions, methods, class bodies ...
# ==========================================================================================

class UBoth(UAll, Both):
    """Unary and binary methods and a truth value."""

    def __bool__(self):
        _note("UBoth.__bool__", self)
        return bool(self.v)

    def __len__(self):
        _note("UBoth.__len__", self)
        return abs(self.v)


def call_generator(a, b):
    def produce(x, y):
        yield x + y
        yield x == y
        yield not x
    return [r for r in produce(a, b)]


def call_generator_expression(xs):
    out = []
    for r in (x + 1 for x in xs):
        out.append(r)
    return out


def call_lambda(a, b):
    return (lambda x, y: x + y)(a, b), (lambda x: -x)(a)


def call_comprehensions(xs):
    return ([x * 2 for x in xs], {i: x + i for i, x in enumerate(xs)}, [x for x in xs if x])


def call_nested_closure(a, b):
    def inner():
        def innermost():
            return a + b
        return innermost(), a == b
    return inner()


def call_method_classmethod_staticmethod(a, b):
    class Calc:
        def run(self, x, y):
            return x + y

        @classmethod
        def crun(cls, x, y):
            return x - y

        @staticmethod
        def srun(x, y):
            return x * y
    return Calc().run(a, b), Calc.crun(a, b), Calc.srun(a, b)


def call_class_body(a, b):
    class Body:
        total = a + b
        same = a == b
        n = len(a)
    return Body.total, Body.same, Body.n


def call_property_and_init(a, b):
    class Pair:
        def __init__(self, x, y):
            self.sum = x + y

        @property
        def diff(self):
            return self.x - self.y
    p = Pair(a, b)
    p.x, p.y = a, b
    return p.sum, p.diff


def call_default_and_decorator(a, b):
    def deco(tag):
        return lambda fn: (fn, tag)

    @deco(a * b)
    def f(x=a + b):
        return x
    fn, tag = f
    return fn(), tag


def call_fstring(a, b):
    return f"{a + b}|{a == b}|{-a}"


def call_coroutine(a, b):
    async def co(x, y):
        return x + y, x < y
    c = co(a, b)
    try:
        c.send(None)
    except StopIteration as e:
        return e.value


def call_eval_exec(a, b):
    ns = {"a": a, "b": b}
    r = eval("a + b", ns)
    exec("r2 = a * b\nt = bool(a)", ns)
    return r, ns["r2"], ns["t"]


def call_recursive(a, n):
    if n == 0:
        return a + 0
    return call_recursive(a, n - 1)


def call_with_and_finally(a, b):
    import contextlib
    with contextlib.nullcontext():
        r1 = a + b
    try:
        pass
    finally:
        r2 = a - b
    try:
        raise KeyError
    except KeyError:
        r3 = a * b
    return r1, r2, r3


def call_match_value_patterns(x):
    match x:
        case 1:
            return "one"
        case 2 | 3:
            return "two or three"
        case _:
            return "other"


def call_match_sequence_len(x):
    match x:
        case [a]:
            return "one", a
        case [a, b]:
            return "two", a, b
        case _:
            return "other"


def call_walrus(a, b):
    if (s := a + b):
        return s
    return "falsy"


def call_sorted_key_lambda(xs):
    return [_short(x) for x in sorted(xs, key=lambda x: -x)]


add("callers[generator]", call_generator, lambda: UBoth(1), _mk(CAll, 2))
add("callers[generator_binop]", call_generator, _mk(Both, 1), _mk(Both, 2))
add("callers[generator_expression]", call_generator_expression, lambda: [Fwd(1), Fwd(2)])
add("callers[lambda]", call_lambda, lambda: UBoth(1), 2)
add("callers[comprehensions]", call_comprehensions, lambda: [Both(1), UBoth(0)])
add("callers[nested_closure]", call_nested_closure, _mk(Both, 1), _mk(CAll, 2))
add("callers[methods]", call_method_classmethod_staticmethod, _mk(Both, 1), 2)
add("callers[class_body]", call_class_body, lambda: UBoth(3), 3)
add("callers[property_and_init]", call_property_and_init, _mk(Both, 5), 2)
add("callers[default_and_decorator]", call_default_and_decorator, _mk(Both, 5), 2)
add("callers[fstring]", call_fstring, lambda: UBoth(4), 1)
add("callers[coroutine]", call_coroutine, _mk(Both, 1), _mk(CAll, 2))
add("callers[eval_exec]", call_eval_exec, lambda: UBoth(2), 3)
add("callers[recursive]", call_recursive, _mk(Both, 1), 3)
add("callers[with_and_finally]", call_with_and_finally, _mk(Both, 1), 2)
add("callers[match_value_one]", call_match_value_patterns, _mk(CEqOnly, 1))
add("callers[match_value_three]", call_match_value_patterns, _mk(CEqOnly, 3))
add("callers[match_value_other]", call_match_value_patterns, _mk(CEqOnly, 9))
add("callers[match_sequence_len]", call_match_sequence_len, lambda: ListSubLen([1, 2, 3]))
add("callers[match_sequence_len_two]", call_match_sequence_len, lambda: ListSubLen([1, 2]))
add("callers[match_sequence_mylist]", call_match_sequence_len, lambda: MyList([1, 2]))
add("callers[walrus]", call_walrus, _mk(Both, 1), 2)
add("callers[sorted_key_lambda]", call_sorted_key_lambda, lambda: [UAll(2), UAll(3), UAll(1)])


# ==========================================================================================
# stdlib: functools.total_ordering, dataclasses, enum, namedtuple, Counter, Fraction, pathlib
# ==========================================================================================

@functools.total_ordering
class Version(_Obj):
    def __eq__(self, other):
        _note("Version.__eq__", self, other)
        if not isinstance(other, Version):
            return NotImplemented
        return self.v == other.v

    def __lt__(self, other):
        _note("Version.__lt__", self, other)
        if not isinstance(other, Version):
            return NotImplemented
        return self.v < other.v

    __hash__ = None


@functools.total_ordering
class Priority(_Obj):
    def __eq__(self, other):
        _note("Priority.__eq__", self, other)
        return self.v == _val(other)

    def __gt__(self, other):
        _note("Priority.__gt__", self, other)
        return self.v > _val(other)

    __hash__ = None


def std_total_ordering(a, b):
    return [a < b, a > b, a <= b, a >= b, a == b, a != b]


def std_total_ordering_mixed():
    out = []
    for f in (lambda: Version(1) > 5, lambda: Version(1) <= 5, lambda: 5 >= Version(1),
              lambda: Version(1) == 5, lambda: Priority(3) <= 4, lambda: 4 < Priority(3)):
        try:
            out.append(f())
        except TypeError as e:
            out.append(str(e))
    return out


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass(order=True, frozen=True)
class FrozenPoint:
    x: int
    y: int


@dataclasses.dataclass(order=True)
class Point3:
    x: int
    y: int
    z: int = 0


@dataclasses.dataclass
class CustomEqPoint:
    x: int

    def __eq__(self, other):  # a user __eq__ in the body wins over the generated one
        _note("CustomEqPoint.__eq__", self, other)
        return isinstance(other, CustomEqPoint) and abs(self.x - other.x) <= 1


@dataclasses.dataclass
class DataBox:
    item: object


@dataclasses.dataclass(eq=False)
class NoEqPoint:
    x: int

    def __add__(self, other):
        _note("NoEqPoint.__add__", self, other)
        return NoEqPoint(self.x + other.x)


def std_dataclass_eq():
    p, q = Point(1, 2), Point(1, 2)
    return [p == q, p != q, p == Point(2, 1), p == (1, 2), (1, 2) == p, p != (1, 2)]


def std_dataclass_order_and_hash():
    a, b = FrozenPoint(1, 2), FrozenPoint(1, 3)
    out = [a < b, a <= b, b > a, a >= b, hash(a) == hash((1, 2)), a in {a: 1}]
    for f in (lambda: a < Point3(1, 2), lambda: Point3(1, 2) < Point3(1, 2, 1), lambda: hash(Point(1, 2))):
        try:
            out.append(f())
        except TypeError as e:
            out.append(str(e))
    return out


def std_dataclass_custom_eq():
    a = CustomEqPoint(1)
    return [a == CustomEqPoint(2), a != CustomEqPoint(5), CustomEqPoint(3) == a, a == 1]


def std_dataclass_no_eq_with_add():
    a, b = NoEqPoint(1), NoEqPoint(2)
    return [(a + b).x, a == NoEqPoint(1), a == a]


class Level(enum.Enum):
    LOW = 1
    MID = 2
    HIGH = 3

    def __lt__(self, other):
        _note("Level.__lt__", self, other)
        if type(other) is not Level:
            return NotImplemented
        return self.value < other.value


class Switch(enum.Enum):
    OFF = 0
    ON = 1

    def __bool__(self):
        _note("Switch.__bool__", self)
        return self is Switch.ON


class Weekday(enum.Enum):
    MON = 0
    TUE = 1
    WED = 2

    def __add__(self, days):
        _note("Weekday.__add__", self, days)
        return Weekday((self.value + days) % 3)


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class Num(enum.IntEnum):
    ONE = 1
    TWO = 2


def std_enum_user_dunders():
    out = [Level.LOW < Level.HIGH, Level.HIGH > Level.MID, Weekday.TUE + 2, bool(Switch.OFF),
           "on" if Switch.ON else "off", not Switch.OFF]
    try:
        out.append(Level.LOW < 3)
    except TypeError as e:
        out.append(str(e))
    return out


def std_enum_stdlib_dunders():
    rw = Perm.R | Perm.W
    return [Level.LOW in Level, len(Level), bool(Level), Level.LOW == Level.LOW, Level.LOW != Level.MID,
            hash(Level.LOW) == hash("LOW"), rw, Perm.R in rw, Perm.X in rw, bool(Perm(0)), ~Perm.R,
            len(rw), Num.ONE + 1, Num.TWO > Num.ONE, Num.ONE == 1, -Num.TWO, rw & Perm.W]


_VecBase = collections.namedtuple("_VecBase", "x y")
Pair = collections.namedtuple("Pair", "a b")


class Vec(_VecBase):
    __slots__ = ()

    def __add__(self, other):
        _note("Vec.__add__", self, other)
        return Vec(self.x + other[0], self.y + other[1])

    def __radd__(self, other):
        _note("Vec.__radd__", self, other)
        return Vec(self.x + other[0], self.y + other[1])

    def __neg__(self):
        _note("Vec.__neg__", self)
        return Vec(-self.x, -self.y)

    def __abs__(self):
        _note("Vec.__abs__", self)
        return (self.x ** 2 + self.y ** 2) ** 0.5

    def __bool__(self):
        _note("Vec.__bool__", self)
        return bool(self.x or self.y)

    def __mul__(self, k):
        _note("Vec.__mul__", self, k)
        return Vec(self.x * k, self.y * k)

    __rmul__ = __mul__


def std_namedtuple_subclass():
    v = Vec(3, 4)
    return [v + Vec(1, 1), (1, 1) + v, v + (1, 1), -v, abs(v), bool(Vec(0, 0)), "yes" if v else "no",
            2 * v, v * 2, v == (3, 4), (3, 4) == v, len(v), 4 in v]


def std_namedtuple_plain():
    p = Pair(1, 2)
    return [p + Pair(3, 4), p == (1, 2), p < Pair(1, 3), len(p), 2 in p, hash(p) == hash((1, 2)), p * 2]


def std_counter_userlist_fraction_path():
    import fractions
    import pathlib
    from collections import Counter, UserDict, UserList
    c = Counter("aab") + Counter("bc")
    u = UserList([1, 2]) + [3]
    ud = UserDict(a=1)
    f = fractions.Fraction(1, 3)
    return [sorted(c.items()), Counter("ab") == Counter("ba"), sorted((-Counter(a=-2, b=1)).items()),
            Counter(a=1) <= Counter(a=2), list(u), 3 in u, len(u), [1] + UserList([2]) == [1, 2],
            "a" in ud, len(ud), bool(UserDict()), f + 1, 1 - f, f * f, 1 < fractions.Fraction(3, 2),
            abs(-f), -f, f == fractions.Fraction(2, 6), hash(fractions.Fraction(1, 2)) == hash(0.5),
            str(pathlib.PurePosixPath("a") / "b"), str("x" / pathlib.PurePosixPath("y"))]


add("stdlib[total_ordering_lt]", std_total_ordering, _mk(Version, 1), _mk(Version, 2))
add("stdlib[total_ordering_equal]", std_total_ordering, _mk(Version, 2), _mk(Version, 2))
add("stdlib[total_ordering_gt_root]", std_total_ordering, _mk(Priority, 2), _mk(Priority, 1))
add("stdlib[total_ordering_mixed_types]", std_total_ordering_mixed)
add("stdlib[dataclass_eq]", std_dataclass_eq)
add("stdlib[dataclass_order_and_hash]", std_dataclass_order_and_hash)
add("stdlib[dataclass_custom_eq]", std_dataclass_custom_eq)
add("stdlib[dataclass_no_eq_with_add]", std_dataclass_no_eq_with_add)
add("stdlib[enum_user_dunders]", std_enum_user_dunders)
add("stdlib[enum_stdlib_dunders]", std_enum_stdlib_dunders)
add("stdlib[namedtuple_subclass]", std_namedtuple_subclass)
add("stdlib[namedtuple_plain]", std_namedtuple_plain)
add("stdlib[counter_userlist_fraction_path]", std_counter_userlist_fraction_path)


# ==========================================================================================
# registry: a transformers-like registry (a dict behind Python __contains__/__getitem__/...)
# ==========================================================================================

class _LazyRegistry:
    """Like transformers' ``_LazyAutoMapping``/``CONFIG_MAPPING``: queried with ``name in REGISTRY``."""

    def __init__(self, mapping):
        self._mapping = dict(mapping)
        self._extra_content = {}

    def __contains__(self, name):
        _note("Registry.__contains__", name)
        return name in self._mapping or name in self._extra_content

    def __getitem__(self, name):
        _note("Registry.__getitem__", name)
        if name in self._extra_content:
            return self._extra_content[name]
        if name not in self._mapping:
            raise KeyError(name)
        return self._mapping[name]

    def __len__(self):
        _note("Registry.__len__")
        return len(self._mapping) + len(self._extra_content)

    def __iter__(self):
        _note("Registry.__iter__")
        return iter(list(self._mapping) + list(self._extra_content))

    def keys(self):
        return list(self._mapping) + list(self._extra_content)

    def register(self, key, value, exist_ok=False):
        if key in self._mapping and not exist_ok:
            raise ValueError(f"'{key}' is already used by a Transformers model.")
        self._extra_content[key] = value


class _LazyConfigMapping(collections.OrderedDict):
    """Like transformers' ``_LazyConfigMapping``: an OrderedDict whose lookups are Python methods."""

    def __init__(self, mapping):
        super().__init__()
        self._mapping = mapping
        self._extra = {}

    def __getitem__(self, key):
        _note("ConfigMapping.__getitem__", key)
        if key in self._extra:
            return self._extra[key]
        if key not in self._mapping:
            raise KeyError(key)
        return self._mapping[key]

    def __contains__(self, item):
        _note("ConfigMapping.__contains__", item)
        return item in self._mapping or item in self._extra

    def __iter__(self):
        _note("ConfigMapping.__iter__")
        return iter(list(self._mapping) + list(self._extra))

    def keys(self):
        return list(self._mapping) + list(self._extra)


REGISTRY = _LazyRegistry({"bert": "BertConfig", "gpt2": "GPT2Config", "t5": "T5Config"})
CONFIG_MAPPING = _LazyConfigMapping({"bert": "BertConfig", "deberta-v2": "DebertaV2Config"})
EMPTY_REGISTRY = _LazyRegistry({})


def config_class_for(model_type, registry=REGISTRY):
    if model_type in registry:
        return registry[model_type]
    raise ValueError(f"Unrecognized model identifier: {model_type}. Should contain one of "
                     f"{', '.join(registry.keys())}")


def reg_contains():
    return "bert" in REGISTRY, "llama" in REGISTRY, "llama" not in REGISTRY, "t5" not in REGISTRY


def reg_lookup():
    return config_class_for("gpt2"), config_class_for("bert")


def reg_lookup_unknown():
    return config_class_for("llama")


def reg_len_and_truth():
    out = [len(REGISTRY), bool(REGISTRY), bool(EMPTY_REGISTRY)]
    if REGISTRY:
        out.append("registry is truthy")
    if not EMPTY_REGISTRY:
        out.append("empty registry is falsy")
    return out


def reg_iterate():
    names = []
    for name in REGISTRY:
        names.append(name)
    return names, [n for n in REGISTRY if n in ("t5", "bert")]


def reg_missing_key():
    try:
        return REGISTRY["nope"]
    except KeyError as e:
        return "KeyError", e.args


def reg_register(registry):
    registry.register("llama", "LlamaConfig")
    try:
        registry.register("bert", "Other")
    except ValueError as e:
        err = str(e)
    return "llama" in registry, registry["llama"], len(registry), err


def reg_ordered_dict_mapping():
    out = ["bert" in CONFIG_MAPPING, "gpt2" in CONFIG_MAPPING, CONFIG_MAPPING["deberta-v2"],
           config_class_for("bert", CONFIG_MAPPING), len(CONFIG_MAPPING), bool(CONFIG_MAPPING)]
    try:
        config_class_for("gpt2", CONFIG_MAPPING)
    except ValueError as e:
        out.append(str(e))
    return out


def reg_auto_pattern(model_types):
    """The AutoConfig-style loop: first known type wins."""
    for t in model_types:
        if t in REGISTRY and t not in ("gpt2",):
            return t, REGISTRY[t]
    return None


add("registry[contains]", reg_contains)
add("registry[lookup]", reg_lookup)
add("registry[lookup_unknown]", reg_lookup_unknown)
add_raw("registry[raw_lookup_unknown]", config_class_for, "llama")
add("registry[len_and_truth]", reg_len_and_truth)
add("registry[iterate]", reg_iterate)
add("registry[missing_key]", reg_missing_key)
add("registry[register]", reg_register, lambda: _LazyRegistry({"bert": "BertConfig"}))
add("registry[ordered_dict_mapping]", reg_ordered_dict_mapping)
add("registry[auto_pattern]", reg_auto_pattern, ("llama", "gpt2", "t5", "bert"))


# ==========================================================================================
# torch: tensors mixed with user objects; torch's own Python dunders
# ==========================================================================================

class Scale(_Obj):
    def __rmul__(self, other):
        _note("Scale.__rmul__", self, other)
        return other * self.v

    def __mul__(self, other):
        _note("Scale.__mul__", self, other)
        return other * self.v

    def __radd__(self, other):
        _note("Scale.__radd__", self, other)
        return other + self.v

    def __rsub__(self, other):
        _note("Scale.__rsub__", self, other)
        return other - self.v


class TensorEq(_Obj):
    def __eq__(self, other):
        _note("TensorEq.__eq__", self, other)
        return ("TensorEq.__eq__", _short(other))

    def __gt__(self, other):
        _note("TensorEq.__gt__", self, other)
        return other < self.v

    __hash__ = None


class Bank(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.Identity() for _ in range(n)])

    def __len__(self):
        _note("Bank.__len__", self.layers.__class__)
        return len(self.layers)

    def __contains__(self, name):
        _note("Bank.__contains__", name)
        return name in dict(self.named_children())


def torch_scale_ops(t):
    return [t * Scale(2), Scale(3) * t, t + Scale(1), t - Scale(1), 1.5 * Scale(2)]


def torch_reflected_comparisons(t):
    return [t == TensorEq(1), TensorEq(1) == t, t != TensorEq(1), t < TensorEq(1.5)]


def torch_inplace_fallback(t):
    original = t
    t += Scale(1)
    return t, t is original


def torch_python_dunders(t):
    out = [len(t), 2.0 in t, 5.0 in t, 1 - t, 1 / t, 5 // t, t // 2, 3 % t, 2 ** t, t ** 2, -t, abs(-t),
           hash(t) == id(t), t.shape == (2,), bool(t.sum() > 0)]
    for f in (lambda: len(torch.tensor(1.0)), lambda: bool(t), lambda: Plain(1) in t, lambda: t @ Scale(1)):
        try:
            out.append(f())
        except (TypeError, RuntimeError) as e:
            out.append((type(e).__name__, str(e)))
    return out


def torch_modules(x):
    seq = nn.Sequential(nn.Identity(), nn.ReLU())
    md = nn.ModuleDict({"fc": nn.Identity()})
    ml = nn.ModuleList([nn.Identity()]) + nn.ModuleList([nn.ReLU()])
    bank = Bank(3)
    out = [len(seq), bool(seq), bool(nn.Sequential()), "fc" in md, "x" in md, len(ml), len(bank), bool(bank),
           "layers" in bank, "other" in bank]
    for m in seq:
        x = m(x)
    out.append(x)
    return out


def torch_parameter_with_user_object():
    p = nn.Parameter(torch.ones(2))
    with torch.no_grad():
        return p * Scale(3), Scale(2) * p


def torch_loss_scaler(t):
    """A user scaler object multiplying a loss, like AMP's GradScaler but in Python dunders."""
    loss = (t * t).sum()
    scaled = loss * Scale(4)
    if scaled > 0:
        return scaled
    return -scaled


add("torch[scale_ops]", torch_scale_ops, _tensor)
add("torch[reflected_comparisons]", torch_reflected_comparisons, _tensor)
add("torch[inplace_fallback]", torch_inplace_fallback, _tensor)
add("torch[python_dunders]", torch_python_dunders, _tensor)
add("torch[modules]", torch_modules, _tensor)
add("torch[parameter_with_user_object]", torch_parameter_with_user_object)
add("torch[loss_scaler]", torch_loss_scaler, _tensor)


# ==========================================================================================
# c_callers: native builtins and containers calling back into dunders
# ==========================================================================================

class Num2(_Obj):
    def __divmod__(self, other):
        _note("Num2.__divmod__", self, other)
        return ("divmod", self.v, other)

    def __rdivmod__(self, other):
        _note("Num2.__rdivmod__", self, other)
        return ("rdivmod", self.v, other)

    def __round__(self, ndigits=None):
        _note("Num2.__round__", self, ndigits)
        return ("round", ndigits)

    def __int__(self):
        _note("Num2.__int__", self)
        return 42

    def __float__(self):
        _note("Num2.__float__", self)
        return 4.5

    def __index__(self):
        _note("Num2.__index__", self)
        return 3

    def __floor__(self):
        _note("Num2.__floor__", self)
        return "floor"


class HashEq(_Obj):
    def __hash__(self):
        _note("HashEq.__hash__", self)
        return self.v % 2

    def __eq__(self, other):
        _note("HashEq.__eq__", self, other)
        return isinstance(other, HashEq) and self.v == other.v


def cc_sum():
    return sum([Both(1), Both(2)]), sum([Refl(1)], 10)


def cc_sorted_min_max():
    xs = [CAll(3), CAll(1), CAll(2)]
    return [_short(x) for x in sorted(xs)], _short(min(xs)), _short(max(xs))


def cc_list_sort():
    xs = [CLtOnly(2), CLtOnly(1)]
    xs.sort()
    return [_short(x) for x in xs]


def cc_list_contains_index_count_remove():
    xs = [EqItem(1), EqItem(2), EqItem(2)]
    out = [2 in xs, 5 in xs, xs.index(2), xs.count(2)]
    xs.remove(2)
    out.append(len(xs))
    return out


def cc_list_and_tuple_compare():
    return [EqItem(1)] == [EqItem(1)], (CAll(1), 2) < (CAll(1), 3), [CAll(1)] < [CAll(2)]


def cc_dict_and_set():
    d = {HashEq(1): "one", HashEq(2): "two"}
    s = {HashEq(1), HashEq(3)}
    return d[HashEq(1)], HashEq(2) in d, HashEq(3) in s, len(s | {HashEq(1)}), d.get(HashEq(5))


def cc_any_all_filter():
    xs = [BoolFalse(0), LenThree(0), BoolTrue(1)]
    return any(xs), all(xs), len(list(filter(None, xs)))


def cc_numeric_builtins():
    import math
    n = Num2(1)
    return (divmod(n, 2), divmod(2, n), round(n), round(n, 2), int(n), float(n), math.floor(n),
            [0, 1, 2, 3][n:])


def cc_pow_builtin():
    return pow(Both(2), 3), pow(3, Refl(2))


def cc_iteration_by_builtins():
    return list(IterList([1, 2])), tuple(IterGen([3])), "-".join(IterList(["a", "b"])), sorted(REGISTRY)


def cc_dataclass_compares_field_tuples():
    return DataBox(EqItem(1)) == DataBox(EqItem(1)), DataBox(EqItem(1)) != DataBox(EqItem(2))


def cc_constructors_length_hint():
    ml = MyList([1, 2])  # list()/tuple()/[*x] ask a non-exact list for a length hint: __len__
    return list(ml), tuple(ml), [*ml]


def cc_any_over_genexpr():
    return any(name in REGISTRY for name in ("x", "t5", "y"))


for _name, _fn in [("sum", cc_sum), ("sorted_min_max", cc_sorted_min_max), ("list_sort", cc_list_sort),
                   ("list_contains_index_count_remove", cc_list_contains_index_count_remove),
                   ("list_and_tuple_compare", cc_list_and_tuple_compare), ("dict_and_set", cc_dict_and_set),
                   ("any_all_filter", cc_any_all_filter), ("numeric_builtins", cc_numeric_builtins),
                   ("pow_builtin", cc_pow_builtin), ("iteration_by_builtins", cc_iteration_by_builtins),
                   ("dataclass_compares_field_tuples", cc_dataclass_compares_field_tuples),
                   ("constructors_length_hint", cc_constructors_length_hint),
                   ("any_over_genexpr", cc_any_over_genexpr)]:
    add(f"c_callers[{_name}]", _fn)


# ==========================================================================================
# The tests
# ==========================================================================================

@pytest.mark.parametrize("name,setup", CASES, ids=[n for n, _ in CASES])
def test_dunders(name, setup):
    observe, reset = OBSERVERS.get(name, (None, None))
    check(setup, observe=observe, reset=reset)


def test_corpus_dunders_size():
    names = [n for n, _ in CASES]
    assert len(names) == len(set(names))
    assert len(CASES) >= 500
    assert set(OBSERVERS) <= set(names)
