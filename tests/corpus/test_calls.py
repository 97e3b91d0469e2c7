"""Differential corpus: calls and everything around them.

PYTEST_DONT_REWRITE -- programs below use ``assert``; keep their real bytecode.

Each case is a module-level user function run natively and under ``magpy.capture.monitor.run``;
``tests.harness.differential.check`` compares results / exceptions, stdout, argument state after the
call and (where given) an ``observe()`` snapshot of module globals or class attributes.

Sections:
  1. argument binding (and binding errors)
  2. call-policy paths (methods, partials, constructors, dataclasses, enums, descriptors, ...)
  3. higher-order builtins calling back into Python code
  4. frame-sensitive builtins (super, locals, vars, dir, globals, eval/exec, frames,
     exc_info, warnings, logging)
  5. builtins and operators on many types
  6. torch
"""
import abc
import collections
import contextlib
import dataclasses
import enum
import functools
import inspect
import itertools
import logging
import math
import operator
import sys
import typing
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.harness.differential import case, check

CASES = []


def _first(fn):
    return fn.__code__.co_firstlineno


# ==========================================================================================
# 1. Argument binding
# ==========================================================================================

def _pos(a, b, c):
    return (a, b, c)


def _defaults(a, b=10, c="x"):
    return (a, b, c)


def _mutable_default(x, acc=[]):  # noqa: B006 - the shared default is the point
    acc.append(x)
    return list(acc)


def _mutable_default_dict(key, value, cache={}):  # noqa: B006
    cache[key] = value
    return sorted(cache.items())


def _kwonly(a, *, b, c=5):
    return (a, b, c)


def _posonly(a, b, /, c, d=4):
    return (a, b, c, d)


def _posonly_kwargs(a, /, **kw):
    return (a, kw)


def _star(*args):
    return args


def _star_kw(**kw):
    return kw


def _all_kinds(a, b=2, /, c=3, *args, d, e=5, **kw):
    return (a, b, c, args, d, e, kw)


def _noargs():
    return "none"


def bind_positional():
    return _pos(1, 2, 3)


def bind_keyword():
    return _pos(c=3, a=1, b=2)


def bind_mixed_pos_kw():
    return _pos(1, c=3, b=2)


def bind_defaults():
    return [_defaults(1), _defaults(1, 2), _defaults(1, c="y"), _defaults(a=0, b=None)]


def bind_mutable_default():
    r1 = _mutable_default(1)
    r2 = _mutable_default(2)
    r3 = _mutable_default(3, [])
    r4 = _mutable_default(4)
    return r1, r2, r3, r4


def bind_mutable_default_dict():
    _mutable_default_dict("a", 1)
    _mutable_default_dict("b", 2)
    return _mutable_default_dict("a", 3)


def bind_kwonly():
    return _kwonly(1, b=2), _kwonly(1, c=3, b=4), _kwonly(a=0, b=0)


def bind_kwonly_missing():
    return _kwonly(1)


def bind_kwonly_given_positionally():
    return _kwonly(1, 2)


def bind_posonly():
    return _posonly(1, 2, 3), _posonly(1, 2, c=3, d=5), _posonly(*"ab", "c")


def bind_posonly_as_keyword():
    return _posonly(1, b=2, c=3)


def bind_posonly_name_in_kwargs():
    return _posonly_kwargs(1, a=2, b=3)


def bind_varargs():
    return _star(), _star(1), _star(1, 2, 3), _star(None)


def bind_varkw():
    return _star_kw(), _star_kw(x=1, y=2), _star_kw(**{"if": 1, "class": 2})


def bind_all_kinds():
    return [_all_kinds(1, d=4),
            _all_kinds(1, 2, 3, 4, 5, d=6, z=7),
            _all_kinds(1, c=9, d=0, e=1, f=2),
            _all_kinds(*range(6), **{"d": "D", "g": "G"})]


def bind_missing_positional():
    return _pos(1)


def bind_missing_one_positional():
    return _pos(1, c=2)


def bind_too_many_positional():
    return _pos(1, 2, 3, 4)


def bind_too_many_for_noargs():
    return _noargs(1)


def bind_unexpected_keyword():
    return _pos(1, 2, 3, d=4)


def bind_multiple_values():
    return _pos(1, 2, 3, a=5)


def bind_dstar_non_string_keys():
    return _star_kw(**{1: 2})


def bind_star_non_iterable():
    return _star(*5)


def bind_dstar_non_mapping():
    return _star_kw(**[("a", 1)])


def bind_dstar_duplicate_keys():
    return _star_kw(**{"a": 1}, **{"a": 2})


def bind_keyword_and_dstar_duplicate():
    return _pos(1, 2, c=3, **{"c": 4})


def call_star_list():
    args = [1, 2, 3]
    return _pos(*args)


def call_star_mixed():
    return _pos(1, *(2,), 3), _star(*[1, 2], *(3,), *"ab", *range(2))


def _squares_printing(n):
    for i in range(n):
        print("yield", i)
        yield i * i


def call_star_generator():
    return _star(*_squares_printing(4)), _pos(*(x for x in "xyz"))


def call_star_generator_raising():
    def gen():
        yield 1
        raise RuntimeError("generator failed while unpacking")
    return _star(*gen())


def call_star_dict_and_set():
    return _star(*{"a": 1, "b": 2}), _star(*sorted({3, 1, 2}))


def call_dstar_dict():
    return _pos(**{"a": 1, "b": 2, "c": 3}), _star_kw(**{"a": 1}, b=2, **{"c": 3})


class _PrintingMapping:
    """Not a dict: ** uses keys() and __getitem__."""

    def __init__(self, d):
        self._d = dict(d)

    def keys(self):
        print("keys()")
        return list(self._d)

    def __getitem__(self, k):
        print("getitem", k)
        return self._d[k]


def call_dstar_custom_mapping():
    return _pos(**_PrintingMapping({"a": 1, "b": 2, "c": 3}))


def call_dstar_userdict_and_ordered():
    ud = collections.UserDict(a=1, b=2)
    od = collections.OrderedDict([("c", 3)])
    return _pos(**ud, **od), _star_kw(**collections.ChainMap({"x": 1}, {"y": 2}))


def call_builtin_wrong_arity():
    return len([1], [2])


def call_builtin_with_star_non_iterable():
    return max(*5)


def call_not_callable():
    x = 5
    return x()


def call_none_not_callable():
    handlers = {"a": None}
    return handlers["a"]("arg")


def call_lambda_defaults_and_kwargs():
    f = lambda a, b=2, *rest, k=1, **kw: (a, b, rest, k, kw)  # noqa: E731
    return f(1), f(1, 3, 4, 5, k=6, z=7)


def call_keyword_argument_evaluation_order():
    log = []

    def note(v):
        log.append(v)
        return v
    res = _pos(note(1), c=note(3), b=note(2))
    return res, log


CASES += [
    ("bind_positional", case(bind_positional)),
    ("bind_keyword", case(bind_keyword)),
    ("bind_mixed_pos_kw", case(bind_mixed_pos_kw)),
    ("bind_defaults", case(bind_defaults)),
    ("bind_kwonly", case(bind_kwonly)),
    ("bind_kwonly_missing", case(bind_kwonly_missing)),
    ("bind_kwonly_given_positionally", case(bind_kwonly_given_positionally)),
    ("bind_posonly", case(bind_posonly)),
    ("bind_posonly_as_keyword", case(bind_posonly_as_keyword)),
    ("bind_posonly_name_in_kwargs", case(bind_posonly_name_in_kwargs)),
    ("bind_varargs", case(bind_varargs)),
    ("bind_varkw", case(bind_varkw)),
    ("bind_all_kinds", case(bind_all_kinds)),
    ("bind_missing_positional", case(bind_missing_positional)),
    ("bind_missing_one_positional", case(bind_missing_one_positional)),
    ("bind_too_many_positional", case(bind_too_many_positional)),
    ("bind_too_many_for_noargs", case(bind_too_many_for_noargs)),
    ("bind_unexpected_keyword", case(bind_unexpected_keyword)),
    ("bind_multiple_values", case(bind_multiple_values)),
    ("bind_dstar_non_string_keys", case(bind_dstar_non_string_keys)),
    ("bind_star_non_iterable", case(bind_star_non_iterable)),
    ("bind_dstar_non_mapping", case(bind_dstar_non_mapping)),
    ("bind_dstar_duplicate_keys", case(bind_dstar_duplicate_keys)),
    ("bind_keyword_and_dstar_duplicate", case(bind_keyword_and_dstar_duplicate)),
    ("bind_toplevel_missing", case(_pos, 1, 2)),
    ("bind_toplevel_kwargs", case(_all_kinds, 1, 2, 3, 4, d=5, z=6)),
    ("call_star_list", case(call_star_list)),
    ("call_star_mixed", case(call_star_mixed)),
    ("call_star_generator", case(call_star_generator)),
    ("call_star_generator_raising", case(call_star_generator_raising)),
    ("call_star_dict_and_set", case(call_star_dict_and_set)),
    ("call_dstar_dict", case(call_dstar_dict)),
    ("call_dstar_custom_mapping", case(call_dstar_custom_mapping)),
    ("call_dstar_userdict_and_ordered", case(call_dstar_userdict_and_ordered)),
    ("call_builtin_wrong_arity", case(call_builtin_wrong_arity)),
    ("call_builtin_with_star_non_iterable", case(call_builtin_with_star_non_iterable)),
    ("call_not_callable", case(call_not_callable)),
    ("call_none_not_callable", case(call_none_not_callable)),
    ("call_lambda_defaults_and_kwargs", case(call_lambda_defaults_and_kwargs)),
    ("call_keyword_argument_evaluation_order", case(call_keyword_argument_evaluation_order)),
]


def _reset_mutable_defaults():
    _mutable_default.__defaults__[0].clear()
    _mutable_default_dict.__defaults__[0].clear()


def _observe_mutable_defaults():
    return list(_mutable_default.__defaults__[0]), dict(_mutable_default_dict.__defaults__[0])


STATEFUL_CASES = [
    ("bind_mutable_default", bind_mutable_default, _observe_mutable_defaults, _reset_mutable_defaults),
    ("bind_mutable_default_dict", bind_mutable_default_dict, _observe_mutable_defaults,
     _reset_mutable_defaults),
]


# ==========================================================================================
# 2. Call-policy paths
# ==========================================================================================

class Account:
    opened = 0
    rate = 0.5

    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        Account.opened += 1

    def deposit(self, amount):
        Account.validate(amount)
        self.balance += amount
        return self.balance

    def interest(self):
        return self.balance * self.rate

    @classmethod
    def with_bonus(cls, owner):
        return cls(owner, 100)

    @staticmethod
    def validate(amount):
        if amount < 0:
            raise ValueError(f"negative amount: {amount}")
        return True


class SavingsAccount(Account):
    rate = 0.25

    def deposit(self, amount):
        return super().deposit(amount) + 1


def _reset_account():
    Account.opened = 0


def _observe_account():
    return Account.opened, Account.rate


def policy_bound_method(acc):
    acc.deposit(5)
    m = acc.deposit
    m(1)
    return m(2), acc.interest()


def policy_unbound_via_class(acc):
    Account.deposit(acc, 3)
    return Account.interest(acc), SavingsAccount.deposit(acc, 1)


def policy_classmethod():
    a = Account.with_bonus("ann")
    b = SavingsAccount.with_bonus("bob")
    c = a.with_bonus("cy")
    return type(a).__name__, type(b).__name__, type(c).__name__, b.balance, Account.opened


def policy_staticmethod():
    return Account.validate(3), Account("x").validate(4), Account.validate(-1)


def policy_subclass_override(acc):
    return acc.deposit(10), acc.interest()


def _three(a, b, c=0, *, d=1):
    return a * 1000 + b * 100 + c * 10 + d


def policy_partial():
    p = functools.partial(_three, 1)
    return p(2), p(2, 3), p(b=5, d=7)


def policy_nested_partial():
    p1 = functools.partial(_three, 1, d=9)
    p2 = functools.partial(p1, 2)
    p3 = functools.partial(p2, c=4)
    return p3(), p3(d=0), p2(3), p3.args, sorted(p3.keywords.items())


def policy_partial_of_method(acc):
    dep = functools.partial(acc.deposit, 7)
    dep()
    unbound = functools.partial(Account.deposit, acc)
    return unbound(3), acc.balance


def policy_partial_of_class():
    make = functools.partial(Account, balance=50)
    a = make("zed")
    return a.owner, a.balance


def policy_partial_error():
    p = functools.partial(_three, 1, 2)
    return p(a=3)


class Multiplier:
    def __init__(self, k):
        self.k = k
        self.calls = 0

    def __call__(self, x, *, offset=0):
        self.calls += 1
        return x * self.k + offset


def policy_callable_instance(mul):
    r = [mul(2), mul(3, offset=1), list(map(mul, [1, 2]))]
    return r, mul.calls


def policy_callable_instance_wrong_args(mul):
    return mul(1, 2)


class _Tracked:
    def __new__(cls, *args, **kwargs):
        print("new", cls.__name__, args, kwargs)
        return super().__new__(cls)

    def __init__(self, x, y=0):
        print("init", x, y)
        self.total = x + y


def policy_new_and_init():
    t = _Tracked(1, y=2)
    return t.total


class _OnlyNew:
    def __new__(cls, value):
        obj = super().__new__(cls)
        obj.value = value * 2
        return obj


def policy_only_new():
    return _OnlyNew(21).value


class _BadInit:
    def __init__(self):
        self.x = 1
        return 5


def policy_init_returns_non_none():
    return _BadInit()


class _Other:
    def __init__(self):
        print("_Other.__init__ must not run")


class _NewReturnsOther:
    def __new__(cls, tag):
        o = object.__new__(_Other)
        o.tag = tag
        return o

    def __init__(self, tag):
        print("never printed", tag)


def policy_new_returns_other_type():
    o = _NewReturnsOther("t")
    return type(o).__name__, o.tag


class _Point3(tuple):
    def __new__(cls, x, y, z):
        return super().__new__(cls, (x, y, z))

    @property
    def norm1(self):
        return sum(abs(v) for v in self)


def policy_tuple_subclass_new():
    p = _Point3(1, -2, 3)
    return tuple(p), p.norm1, len(p)


class _Meta(type):
    def __call__(cls, *args, **kwargs):
        print("meta call", cls.__name__, args)
        inst = super().__call__(*args, **kwargs)
        inst.created_by_meta = True
        return inst


class _WithMeta(metaclass=_Meta):
    def __init__(self, a):
        self.a = a


def policy_metaclass_call():
    w = _WithMeta(5)
    return w.a, w.created_by_meta


class _Plugin:
    registry = []

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        _Plugin.registry.append(name or cls.__name__)


def policy_init_subclass():
    class A(_Plugin, name="alpha"):
        pass

    class B(_Plugin):
        pass
    return list(_Plugin.registry)


def _reset_plugin():
    _Plugin.registry.clear()


def _observe_plugin():
    return list(_Plugin.registry)


@dataclasses.dataclass
class Item:
    name: str
    price: float
    tags: list = dataclasses.field(default_factory=list)
    qty: int = 1

    def __post_init__(self):
        print("post_init", self.name)
        if self.price < 0:
            raise ValueError(f"price must be >= 0, got {self.price}")
        self.total = self.price * self.qty


def policy_dataclass():
    a = Item("pen", 1.5, qty=4)
    b = Item("ink", 2.0)
    a.tags.append("office")
    return a.total, b.tags, a.tags, a == Item("pen", 1.5, ["office"], 4), dataclasses.asdict(b)


def policy_dataclass_post_init_raises():
    return Item("bad", -1.0)


@dataclasses.dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int = 0


def policy_dataclass_frozen_order():
    vs = sorted([Version(1, 2), Version(0, 9), Version(1)])
    r = dataclasses.replace(vs[0], minor=1)
    return [(v.major, v.minor) for v in vs], (r.major, r.minor), Version(1) < Version(1, 1)


def policy_dataclass_frozen_assign():
    v = Version(1)
    v.major = 2


def policy_dataclass_missing_field():
    return Item("x")


class Coord(typing.NamedTuple):
    x: int
    y: int = 0

    def scaled(self, k):
        return Coord(self.x * k, self.y * k)


Pair = collections.namedtuple("Pair", ["left", "right"], defaults=[None])


def policy_namedtuple():
    c = Coord(2, 3)
    d = c._replace(y=9)
    p = Pair(1)
    q = Pair._make([5, 6])
    return c.scaled(2), d, c._asdict(), p, q.right, c.x + c[1], Coord._fields


def policy_namedtuple_missing():
    return Pair()


def policy_namedtuple_unpack():
    left, right = Pair("l", "r")
    x, y = Coord(y=1, x=4)
    return left + right, x - y


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3

    def describe(self):
        return f"{self.name.lower()}={self.value}"

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str):
            return cls[value.upper()]
        return None


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 10


def policy_enum_lookup():
    return Color(2), Color["BLUE"], Color("red"), Color.RED.describe(), Color.GREEN.value


def policy_enum_bad_value():
    return Color(7)


def policy_enum_iteration():
    return [c.name for c in Color], list(Color.__members__), len(Color), Color.RED in Color


def policy_enum_flag_intenum():
    rw = Perm.R | Perm.W
    return bool(rw & Perm.W), bool(rw & Perm.X), rw.value, Level.HIGH + 1, Level.LOW < Level.HIGH, sorted(Level)


class Temperature:
    def __init__(self, c):
        self._c = c
        self.log = []

    @property
    def celsius(self):
        self.log.append("get")
        return self._c

    @celsius.setter
    def celsius(self, v):
        self.log.append(f"set {v}")
        if v < -273.15:
            raise ValueError("below absolute zero")
        self._c = v

    @celsius.deleter
    def celsius(self):
        self.log.append("del")
        del self._c

    @property
    def fahrenheit(self):
        return self.celsius * 9 / 5 + 32


def policy_property(t):
    t.celsius = 100
    f = t.fahrenheit
    del t.celsius
    return f, hasattr(t, "_c"), t.log


def policy_property_setter_raises(t):
    t.celsius = -300


def policy_property_no_setter(t):
    t.fahrenheit = 5


class _Lazy:
    def __init__(self):
        self.misses = []

    @property
    def config(self):
        raise AttributeError("config not loaded")

    def __getattr__(self, name):
        self.misses.append(name)
        if name.startswith("opt_"):
            return name[4:].upper()
        raise AttributeError(f"{type(self).__name__!r} has no option {name!r}")


def policy_property_attributeerror_fallback():
    lz = _Lazy()
    return lz.config, lz.opt_debug, lz.misses


def policy_getattr_missing():
    lz = _Lazy()
    return lz.nothing


def policy_getattr_hasattr_getattr_default():
    lz = _Lazy()
    return hasattr(lz, "opt_x"), hasattr(lz, "zzz"), getattr(lz, "zzz", "dflt"), lz.misses


class _Recorder:
    def __init__(self):
        object.__setattr__(self, "events", [])

    def __getattribute__(self, name):
        if name != "events":
            object.__getattribute__(self, "events").append(("get", name))
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        self.events.append(("set", name, value))
        object.__setattr__(self, name, value * 10 if isinstance(value, int) else value)

    def __delattr__(self, name):
        self.events.append(("del", name))
        if name == "locked":
            raise AttributeError("cannot delete 'locked'")
        object.__delattr__(self, name)

    def method(self):
        return "m"


def policy_getattribute_setattr_delattr():
    r = _Recorder()
    r.a = 1
    r.b = "s"
    v = r.a
    r.method()
    del r.b
    return v, r.events


def policy_delattr_raises():
    r = _Recorder()
    r.locked = 1
    del r.locked


class Positive:
    """Data descriptor using __set_name__."""

    def __set_name__(self, owner, name):
        self.name = name
        self.private = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.private, 0)

    def __set__(self, obj, value):
        if value <= 0:
            raise ValueError(f"{self.name} must be positive, got {value}")
        setattr(obj, self.private, value)


class _Doubler:
    """Non-data descriptor: instance dict wins."""

    def __get__(self, obj, objtype=None):
        return "class-level" if obj is None else obj.base * 2


class Box:
    width = Positive()
    height = Positive()
    double = _Doubler()

    def __init__(self, w, h):
        self.width = w
        self.height = h
        self.base = w

    def area(self):
        return self.width * self.height


def policy_descriptors():
    b = Box(3, 4)
    before = b.double
    b.__dict__["double"] = "shadowed"
    return b.area(), before, b.double, Box.double, Box.width.name, sorted(vars(b))


def policy_descriptor_validation():
    b = Box(1, 1)
    b.height = -5


class Deck:
    def __init__(self, cards):
        self._cards = list(cards)

    def __len__(self):
        return len(self._cards)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Deck(self._cards[i])
        return self._cards[i]

    def __setitem__(self, i, v):
        print("set", i, v)
        self._cards[i] = v

    def __delitem__(self, i):
        del self._cards[i]

    def __iter__(self):
        print("iter")
        return iter(self._cards)

    def __contains__(self, x):
        print("contains", x)
        return x in self._cards

    def __bool__(self):
        return bool(self._cards) and self._cards[0] != "joker"

    def __reversed__(self):
        return reversed(self._cards)


def policy_user_container(deck):
    deck[0] = "A"
    del deck[-1]
    sub = deck[1:3]
    return (len(deck), deck[1], sub._cards, "A" in deck, "Z" in deck, list(deck),
            bool(deck), bool(Deck(["joker"])), bool(Deck([])), list(reversed(deck)))


def policy_user_container_index_error(deck):
    return deck[99]


class _OldSeq:
    """Iteration via the legacy __getitem__ protocol."""

    def __getitem__(self, i):
        if i >= 4:
            raise IndexError(i)
        return i * 10


class _LenOnly:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def policy_legacy_iteration_and_len_truth():
    return list(_OldSeq()), 20 in _OldSeq(), bool(_LenOnly(0)), bool(_LenOnly(2)), sum(_OldSeq())


def policy_negative_len():
    return len(_LenOnly(-1))


class Vec:
    def __init__(self, *xs):
        self.xs = list(xs)

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(*[a + b for a, b in zip(self.xs, other.xs)])
        if isinstance(other, (int, float)):
            return Vec(*[a + other for a in self.xs])
        return NotImplemented

    def __radd__(self, other):
        print("radd", other)
        return self + other

    def __iadd__(self, other):
        print("iadd")
        if isinstance(other, Vec):
            for i, b in enumerate(other.xs):
                self.xs[i] += b
            return self
        return NotImplemented

    def __mul__(self, k):
        return Vec(*[a * k for a in self.xs])

    __rmul__ = __mul__

    def __neg__(self):
        return Vec(*[-a for a in self.xs])

    def __abs__(self):
        return math.sqrt(sum(a * a for a in self.xs))

    def __matmul__(self, other):
        return sum(a * b for a, b in zip(self.xs, other.xs))

    def __eq__(self, other):
        return isinstance(other, Vec) and self.xs == other.xs

    def __hash__(self):
        return hash(tuple(self.xs))

    def __lt__(self, other):
        return abs(self) < abs(other)

    def __repr__(self):
        return f"Vec{tuple(self.xs)}"


def policy_operator_overloading():
    a, b = Vec(1, 2), Vec(3, 4)
    c = a + b
    d = 1 + a
    e = 2 * a
    f = -b
    return c.xs, d.xs, e.xs, f.xs, abs(b), a @ b, repr(a)


def policy_iadd_mutates_arg(v):
    alias = v
    v += Vec(10, 10)
    return v is alias, v.xs


def policy_sum_uses_radd():
    return sum([Vec(1, 1), Vec(2, 2), Vec(3, 3)]).xs


def policy_unsupported_operand():
    return Vec(1) + "s"


def policy_iadd_fallback_to_add():
    v = Vec(1, 2)
    v += 5
    return v.xs


def policy_eq_hash_dict_keys():
    d = {Vec(1, 2): "a", Vec(3): "b"}
    d[Vec(1, 2)] = "c"
    s = {Vec(0), Vec(0), Vec(1)}
    return len(d), d[Vec(1, 2)], Vec(3) in d, len(s), Vec(1) == Vec(1), Vec(1) != Vec(2)


def policy_comparisons_sorted():
    vs = [Vec(3, 4), Vec(1), Vec(0, 2)]
    return [v.xs for v in sorted(vs)], max(vs).xs, Vec(1) > Vec(0), Vec(1) <= Vec(5)


def policy_comparison_unsupported():
    return Vec(1) < 3


class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self):
        ...

    @abc.abstractmethod
    def perimeter(self):
        ...

    def describe(self):
        return f"{type(self).__name__}: area={self.area()} perimeter={self.perimeter()}"


class Square(Shape):
    def __init__(self, s):
        self.s = s

    def area(self):
        return self.s ** 2

    def perimeter(self):
        return 4 * self.s


class HalfShape(Shape):
    def area(self):
        return 1


def policy_abstract_instantiate():
    return Shape()


def policy_abstract_partial_impl():
    return HalfShape()


def policy_abstract_concrete():
    sq = Square(3)
    return sq.describe(), isinstance(sq, Shape), issubclass(Square, Shape)


class Base:
    def __init__(self, name):
        print("Base.__init__", name)
        self.name = name
        self.trail = ["Base"]


class Middle(Base):
    def __init__(self, name, level):
        print("Middle.__init__", level)
        super().__init__(name)
        self.level = level
        self.trail.append("Middle")


class Leaf(Middle):
    def __init__(self, name):
        print("Leaf.__init__")
        super().__init__(name.upper(), level=2)
        self.trail.append("Leaf")


def policy_super_init_chain():
    leaf = Leaf("x")
    return leaf.name, leaf.level, leaf.trail, [c.__name__ for c in Leaf.__mro__]


class Calculator:
    def __init__(self):
        self.ops = {"+": self.add, "-": self.sub, "neg": Calculator.neg}
        self.history = []

    def add(self, a, b):
        self.history.append("add")
        return a + b

    def sub(self, a, b):
        self.history.append("sub")
        return a - b

    @staticmethod
    def neg(a):
        return -a


def policy_methods_in_dict():
    c = Calculator()
    program = [("+", 1, 2), ("-", 10, 4), ("neg", 5)]
    results = [c.ops[op](*args) for op, *args in program]
    callbacks = [c.add, len, str.upper, Calculator.neg]
    return results, [callbacks[0](1, 1), callbacks[1]("abc"), callbacks[2]("q"), callbacks[3](3)], c.history


def policy_method_dispatch_missing():
    c = Calculator()
    return c.ops["*"](1, 2)


class Node:
    def __init__(self, value, *children):
        self.value = value
        self.children = list(children)

    def depth(self):
        return 1 + max((ch.depth() for ch in self.children), default=0)

    def total(self):
        return self.value + sum(ch.total() for ch in self.children)

    def walk(self):
        yield self.value
        for ch in self.children:
            yield from ch.walk()

    def is_even_level(self, n=0):
        return n % 2 == 0 if not self.children else self.children[0].is_odd_level(n + 1)

    def is_odd_level(self, n):
        return n % 2 == 1 if not self.children else self.children[0].is_even_level(n + 1)


def _tree():
    return Node(1, Node(2, Node(4), Node(5, Node(7))), Node(3))


def policy_recursion_through_methods():
    t = _tree()
    return t.depth(), t.total(), list(t.walk()), t.is_even_level()


def _fact(n):
    if n < 0:
        raise ValueError("negative")
    return 1 if n <= 1 else n * _fact(n - 1)


def policy_recursion_error_propagates():
    return _fact(5), _fact(-1)


class Accumulator:
    def __init__(self):
        self.seen = []

    def running(self):
        total = 0
        while True:
            x = yield total
            if x is None:
                return total
            self.seen.append(x)
            total += x

    def evens(self, n):
        for i in range(n):
            if i % 2 == 0:
                yield i


def policy_generator_methods():
    acc = Accumulator()
    g = acc.running()
    first = next(g)
    vals = [g.send(3), g.send(4)]
    try:
        g.send(None)
    except StopIteration as e:
        final = e.value
    return first, vals, final, acc.seen, list(acc.evens(7))


def _make_counter(start=0):
    count = start

    def inc(step=1):
        nonlocal count
        count += step
        return count
    return inc


def _make_adders():
    return [lambda x, i=i: x + i for i in range(3)]


def policy_functions_returned():
    c = _make_counter(10)
    c()
    c(5)
    adders = _make_adders()
    return c(), [f(100) for f in adders], c.__name__, c.__qualname__


def _logged(prefix):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            print(prefix, fn.__name__, args, kwargs)
            return fn(*args, **kwargs)
        return wrapper
    return deco


@_logged("call")
def _decorated(a, b=1):
    """Doc."""
    return a - b


def policy_decorators():
    return _decorated(5), _decorated(5, b=3), _decorated.__name__, _decorated.__doc__, _decorated.__wrapped__(1)


def policy_late_bound_closure():
    fns = []
    for i in range(3):
        fns.append(lambda: i)
    return [f() for f in fns]


CASES += [
    ("policy_bound_method", lambda: (policy_bound_method, (Account("a", 10),), {})),
    ("policy_unbound_via_class", lambda: (policy_unbound_via_class, (Account("b", 1),), {})),
    ("policy_staticmethod", case(policy_staticmethod)),
    ("policy_subclass_override", lambda: (policy_subclass_override, (SavingsAccount("s", 4),), {})),
    ("policy_partial", case(policy_partial)),
    ("policy_nested_partial", case(policy_nested_partial)),
    ("policy_partial_of_method", lambda: (policy_partial_of_method, (Account("p", 0),), {})),
    ("policy_partial_error", case(policy_partial_error)),
    ("policy_callable_instance", lambda: (policy_callable_instance, (Multiplier(3),), {})),
    ("policy_callable_instance_wrong_args", lambda: (policy_callable_instance_wrong_args, (Multiplier(3),), {})),
    ("policy_new_and_init", case(policy_new_and_init)),
    ("policy_only_new", case(policy_only_new)),
    ("policy_init_returns_non_none", case(policy_init_returns_non_none)),
    ("policy_new_returns_other_type", case(policy_new_returns_other_type)),
    ("policy_tuple_subclass_new", case(policy_tuple_subclass_new)),
    ("policy_metaclass_call", case(policy_metaclass_call)),
    ("policy_dataclass", case(policy_dataclass)),
    ("policy_dataclass_post_init_raises", case(policy_dataclass_post_init_raises)),
    ("policy_dataclass_frozen_order", case(policy_dataclass_frozen_order)),
    ("policy_dataclass_frozen_assign", case(policy_dataclass_frozen_assign)),
    ("policy_dataclass_missing_field", case(policy_dataclass_missing_field)),
    ("policy_namedtuple", case(policy_namedtuple)),
    ("policy_namedtuple_missing", case(policy_namedtuple_missing)),
    ("policy_namedtuple_unpack", case(policy_namedtuple_unpack)),
    ("policy_enum_lookup", case(policy_enum_lookup)),
    ("policy_enum_bad_value", case(policy_enum_bad_value)),
    ("policy_enum_iteration", case(policy_enum_iteration)),
    ("policy_enum_flag_intenum", case(policy_enum_flag_intenum)),
    ("policy_property", lambda: (policy_property, (Temperature(20),), {})),
    ("policy_property_setter_raises", lambda: (policy_property_setter_raises, (Temperature(20),), {})),
    ("policy_property_no_setter", lambda: (policy_property_no_setter, (Temperature(20),), {})),
    ("policy_property_attributeerror_fallback", case(policy_property_attributeerror_fallback)),
    ("policy_getattr_missing", case(policy_getattr_missing)),
    ("policy_getattr_hasattr_getattr_default", case(policy_getattr_hasattr_getattr_default)),
    ("policy_getattribute_setattr_delattr", case(policy_getattribute_setattr_delattr)),
    ("policy_delattr_raises", case(policy_delattr_raises)),
    ("policy_descriptors", case(policy_descriptors)),
    ("policy_descriptor_validation", case(policy_descriptor_validation)),
    ("policy_user_container", lambda: (policy_user_container, (Deck("23456"),), {})),
    ("policy_user_container_index_error", lambda: (policy_user_container_index_error, (Deck("23"),), {})),
    ("policy_legacy_iteration_and_len_truth", case(policy_legacy_iteration_and_len_truth)),
    ("policy_negative_len", case(policy_negative_len)),
    ("policy_operator_overloading", case(policy_operator_overloading)),
    ("policy_iadd_mutates_arg", lambda: (policy_iadd_mutates_arg, (Vec(1, 2),), {})),
    ("policy_sum_uses_radd", case(policy_sum_uses_radd)),
    ("policy_unsupported_operand", case(policy_unsupported_operand)),
    ("policy_iadd_fallback_to_add", case(policy_iadd_fallback_to_add)),
    ("policy_eq_hash_dict_keys", case(policy_eq_hash_dict_keys)),
    ("policy_comparisons_sorted", case(policy_comparisons_sorted)),
    ("policy_comparison_unsupported", case(policy_comparison_unsupported)),
    ("policy_abstract_instantiate", case(policy_abstract_instantiate)),
    ("policy_abstract_partial_impl", case(policy_abstract_partial_impl)),
    ("policy_abstract_concrete", case(policy_abstract_concrete)),
    ("policy_super_init_chain", case(policy_super_init_chain)),
    ("policy_methods_in_dict", case(policy_methods_in_dict)),
    ("policy_method_dispatch_missing", case(policy_method_dispatch_missing)),
    ("policy_recursion_through_methods", case(policy_recursion_through_methods)),
    ("policy_recursion_error_propagates", case(policy_recursion_error_propagates)),
    ("policy_generator_methods", case(policy_generator_methods)),
    ("policy_functions_returned", case(policy_functions_returned)),
    ("policy_decorators", case(policy_decorators)),
    ("policy_late_bound_closure", case(policy_late_bound_closure)),
]

STATEFUL_CASES += [
    ("policy_classmethod", policy_classmethod, _observe_account, _reset_account),
    ("policy_partial_of_class", policy_partial_of_class, _observe_account, _reset_account),
    ("policy_init_subclass", policy_init_subclass, _observe_plugin, _reset_plugin),
]


# ==========================================================================================
# 3. Higher-order builtins with Python callbacks (side effects make the order observable)
# ==========================================================================================

def _noisy_square(x):
    print("square", x)
    return x * x


def _noisy_is_odd(x):
    print("odd?", x)
    return x % 2 == 1


def hof_map_side_effects():
    it = map(_noisy_square, [1, 2, 3])
    print("created")
    first = next(it)
    print("first", first)
    return first, list(it)


def hof_map_multiple_iterables():
    seen = []

    def combine(a, b, c):
        seen.append((a, b, c))
        return a + b * c
    return list(map(combine, [1, 2, 3, 4], (10, 20, 30), range(5))), seen


def hof_map_builtin_and_method():
    acc = Account("m", 0)
    return list(map(str.upper, ["a", "b"])), list(map(acc.deposit, [1, 2, 3])), list(map(Vec, [1, 2]))


def hof_map_callback_raises():
    def parse(s):
        print("parse", s)
        return int(s)
    out = []
    for v in map(parse, ["1", "2", "x", "4"]):
        out.append(v)
    return out


def hof_dict_of_map():
    return dict(map(lambda kv: (kv[1], kv[0] * 2), enumerate("abc")))


def hof_filter_side_effects():
    return list(filter(_noisy_is_odd, range(6)))


def hof_filter_none_and_filterfalse():
    data = [0, 1, "", "a", None, [], [0], 0.0, 2]
    return list(filter(None, data)), list(itertools.filterfalse(_noisy_is_odd, [1, 2, 3, 4]))


def hof_sorted_key_side_effects():
    calls = []

    def key(w):
        calls.append(w)
        return (len(w), w)
    words = ["pear", "fig", "banana", "kiwi", "apple"]
    return sorted(words, key=key), sorted(words, key=key, reverse=True), calls


def hof_sorted_stability_reverse():
    recs = [("b", 2), ("a", 1), ("c", 2), ("d", 1)]
    return sorted(recs, key=lambda r: r[1]), sorted(recs, key=lambda r: r[1], reverse=True)


def hof_list_sort_in_place(xs):
    xs.sort(key=lambda v: (v % 3, -v))
    print("sorted once", xs)
    xs.sort(reverse=True)
    return None


def hof_sort_key_raises():
    def key(v):
        if v == 3:
            raise KeyError(f"no key for {v}")
        return -v
    return sorted([5, 3, 1], key=key)


def hof_list_sort_key_raises_leaves_list(xs):
    def key(v):
        print("key", v)
        if v == 0:
            raise ValueError("zero not allowed")
        return 1 / v
    xs.sort(key=key)


def hof_min_max_key_default():
    words = ["kiwi", "fig", "banana"]
    return (min(words, key=len), max(words, key=_noisy_len), min([], default="empty"),
            max([], key=len, default=None), max(3, 9, 4, key=lambda v: -v), min("zyx"))


def _noisy_len(s):
    print("len of", s)
    return len(s)


def hof_min_empty_error():
    return min([], key=len)


def hof_max_key_raises():
    return max([1, 2, "3"], key=lambda v: v + 1)


def hof_reduce():
    steps = []

    def mul(a, b):
        steps.append((a, b))
        return a * b
    return (functools.reduce(mul, [1, 2, 3, 4]), functools.reduce(mul, [2, 3], 10),
            functools.reduce(mul, [], 7), functools.reduce(mul, [5]), steps)


def hof_reduce_empty_error():
    return functools.reduce(operator.add, [])


def hof_starmap_accumulate():
    def power(base, exp):
        print("pow", base, exp)
        return base ** exp
    return (list(itertools.starmap(power, [(2, 3), (3, 2), (10, 0)])),
            list(itertools.accumulate([1, 2, 3, 4], lambda a, b: a * b)),
            list(itertools.accumulate([3, 1, 4], max, initial=2)),
            list(itertools.accumulate([1, 2, 3])))


def hof_groupby():
    data = ["apple", "avocado", "banana", "blueberry", "cherry", "apricot"]
    grouped = [(k, list(g)) for k, g in itertools.groupby(data, key=lambda s: s[0])]
    by_len = {k: len(list(g)) for k, g in itertools.groupby(sorted(data, key=len), key=len)}
    return grouped, by_len


def hof_takewhile_dropwhile():
    data = [1, 3, 5, 6, 7, 9]
    return (list(itertools.takewhile(_noisy_is_odd, data)),
            list(itertools.dropwhile(lambda v: v < 5, data)))


def hof_cmp_to_key():
    def cmp(a, b):
        print("cmp", a, b)
        return (a > b) - (a < b)
    by_abs = functools.cmp_to_key(lambda a, b: abs(a) - abs(b))
    return sorted([3, 1, 2], key=functools.cmp_to_key(cmp)), sorted([-5, 2, -1], key=by_abs)


def hof_iter_callable_sentinel():
    data = [3, 2, 1, 0, 5]

    def pop_front():
        v = data.pop(0)
        print("pop", v)
        return v
    return list(iter(pop_front, 0)), data


_FIB_CALLS = []


@functools.lru_cache(maxsize=None)
def _fib(n):
    _FIB_CALLS.append(n)
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def hof_lru_cache():
    r = _fib(15)
    r2 = _fib(10)
    info = _fib.cache_info()
    return r, r2, info.hits, info.misses, len(_FIB_CALLS)


def _reset_fib():
    _fib.cache_clear()
    _FIB_CALLS.clear()


def _observe_fib():
    return tuple(_fib.cache_info()), list(_FIB_CALLS)


@functools.lru_cache(maxsize=2)
def _bounded(x):
    print("compute", x)
    return x * 2


def hof_lru_cache_bounded():
    return [_bounded(v) for v in [1, 2, 1, 3, 1, 2]]


def _reset_bounded():
    _bounded.cache_clear()


def _observe_bounded():
    return tuple(_bounded.cache_info())


def hof_cache_and_cached_property():
    class Data:
        def __init__(self, xs):
            self.xs = xs

        @functools.cached_property
        def total(self):
            print("computing total")
            return sum(self.xs)
    d = Data([1, 2, 3])
    return d.total, d.total, "total" in vars(d)


def hof_any_all_short_circuit():
    return (any(_noisy_is_odd(v) for v in [2, 4, 5, 6]),
            all(_noisy_is_odd(v) for v in [1, 3, 4, 5]),
            any(map(_noisy_is_odd, [])), all([]))


def hof_sum_map_zip_chain():
    a = list(zip(map(_noisy_square, [1, 2, 3]), filter(_noisy_is_odd, [1, 2, 3, 5])))
    b = sum(map(lambda p: p[0] * p[1], a))
    c = list(itertools.chain.from_iterable(map(lambda n: range(n), [1, 2, 3])))
    return a, b, c


def hof_sorted_dict_items_by_value():
    scores = {"ann": 3, "bob": 1, "cy": 2}
    return (sorted(scores, key=scores.get), max(scores, key=scores.__getitem__),
            sorted(scores.items(), key=operator.itemgetter(1), reverse=True))


def hof_filter_callback_raises():
    def check(v):
        if v > 2:
            raise ValueError(f"too big: {v}")
        print("ok", v)
        return True
    return list(filter(check, [1, 2, 3, 4]))


def hof_defaultdict_python_factory():
    calls = []

    def factory():
        calls.append(len(calls))
        return [len(calls)]
    d = collections.defaultdict(factory)
    d["a"].append("x")
    d["b"]
    d["a"].append("y")
    return dict(d), calls, d.get("zzz"), "zzz" in d


def hof_map_lazy_with_generator_closure():
    factor = 2
    gen = (x * factor for x in range(3))
    factor = 10
    return list(map(lambda v: v + factor, gen))


CASES += [
    ("hof_map_side_effects", case(hof_map_side_effects)),
    ("hof_map_multiple_iterables", case(hof_map_multiple_iterables)),
    ("hof_map_builtin_and_method", case(hof_map_builtin_and_method)),
    ("hof_map_callback_raises", case(hof_map_callback_raises)),
    ("hof_dict_of_map", case(hof_dict_of_map)),
    ("hof_filter_side_effects", case(hof_filter_side_effects)),
    ("hof_filter_none_and_filterfalse", case(hof_filter_none_and_filterfalse)),
    ("hof_sorted_key_side_effects", case(hof_sorted_key_side_effects)),
    ("hof_sorted_stability_reverse", case(hof_sorted_stability_reverse)),
    ("hof_list_sort_in_place", lambda: (hof_list_sort_in_place, ([5, 3, 9, 1, 6, 4],), {})),
    ("hof_sort_key_raises", case(hof_sort_key_raises)),
    ("hof_list_sort_key_raises_leaves_list", lambda: (hof_list_sort_key_raises_leaves_list, ([3, 1, 0, 2],), {})),
    ("hof_min_max_key_default", case(hof_min_max_key_default)),
    ("hof_min_empty_error", case(hof_min_empty_error)),
    ("hof_max_key_raises", case(hof_max_key_raises)),
    ("hof_reduce", case(hof_reduce)),
    ("hof_reduce_empty_error", case(hof_reduce_empty_error)),
    ("hof_starmap_accumulate", case(hof_starmap_accumulate)),
    ("hof_groupby", case(hof_groupby)),
    ("hof_takewhile_dropwhile", case(hof_takewhile_dropwhile)),
    ("hof_cmp_to_key", case(hof_cmp_to_key)),
    ("hof_iter_callable_sentinel", case(hof_iter_callable_sentinel)),
    ("hof_cache_and_cached_property", case(hof_cache_and_cached_property)),
    ("hof_any_all_short_circuit", case(hof_any_all_short_circuit)),
    ("hof_sum_map_zip_chain", case(hof_sum_map_zip_chain)),
    ("hof_sorted_dict_items_by_value", case(hof_sorted_dict_items_by_value)),
    ("hof_filter_callback_raises", case(hof_filter_callback_raises)),
    ("hof_defaultdict_python_factory", case(hof_defaultdict_python_factory)),
    ("hof_map_lazy_with_generator_closure", case(hof_map_lazy_with_generator_closure)),
]

STATEFUL_CASES += [
    ("hof_lru_cache", hof_lru_cache, _observe_fib, _reset_fib),
    ("hof_lru_cache_bounded", hof_lru_cache_bounded, _observe_bounded, _reset_bounded),
]


# ==========================================================================================
# 4. Frame-sensitive builtins
# ==========================================================================================

class Animal:
    kind = "animal"

    def __init__(self, name):
        self.name = name
        self.sounds = []

    def speak(self):
        return f"{self.name} makes a sound"

    @classmethod
    def create(cls, name):
        return cls(name)

    @classmethod
    def family(cls):
        return [cls.__name__]


class Dog(Animal):
    kind = "dog"

    def __init__(self, name, breed):
        super().__init__(name)
        self.breed = breed

    def speak(self):
        base = super().speak()
        return base.replace("a sound", "woof") + f" ({super().kind})"

    @classmethod
    def family(cls):
        return super().family() + ["Dog"]


def frame_super_init_and_method():
    d = Dog("rex", "lab")
    return d.name, d.breed, d.speak(), Animal.create("fido").name


def frame_super_classmethod():
    return Dog.family(), Animal.family()


class _A:
    def hello(self):
        return ["A"]


class _B(_A):
    def hello(self):
        return ["B"] + super().hello()


class _C(_A):
    def hello(self):
        return ["C"] + super().hello()


class _D(_B, _C):
    def hello(self):
        return ["D"] + super().hello()


def frame_super_multiple_inheritance():
    return _D().hello(), [k.__name__ for k in _D.__mro__], super(_B, _D()).hello()


class _Outer:
    class Inner(Animal):
        def speak(self):
            return "inner:" + super().speak()

    def make(self):
        return self.Inner("nested").speak()


def frame_super_nested_class():
    return _Outer().make()


class _Mixin:
    def __init__(self, *args, **kwargs):
        print("Mixin before")
        super().__init__(*args, **kwargs)
        print("Mixin after")
        self.mixed = True


class _MixedDog(_Mixin, Dog):
    pass


def frame_super_cooperative_mixin():
    m = _MixedDog("max", "pug")
    return m.mixed, m.breed, m.speak()


def frame_super_in_generator_and_property():
    class Base2:
        def items(self):
            yield 1
            yield 2

        @property
        def label(self):
            return "base"

    class Child(Base2):
        def items(self):
            yield 0
            yield from super().items()

        @property
        def label(self):
            return super().label + "+child"
    c = Child()
    return list(c.items()), c.label


def frame_super_outside_method_error():
    def not_a_method():
        return super()
    return not_a_method()


def frame_locals_after_assign_and_delete():
    a = 1
    b = [2]
    snap1 = dict(locals())
    c = a + 1
    del a
    snap2 = sorted(locals())
    return sorted(snap1), snap2, locals()["c"]


def frame_locals_in_nested_with_freevars():
    outer_v = 10
    unused = "u"

    def inner(p):
        q = p + outer_v
        return sorted(locals().items())
    return inner(5), "unused" in locals(), unused


def frame_locals_in_comprehension():
    base = 3
    return [sorted(locals()) for _ in range(1)], {k: 0 for k in locals() if k != "nothing"}, base


def frame_vars_noarg_and_obj():
    x = 1
    y = "two"
    v = vars()
    b = Box(2, 3)
    return sorted(v), v["y"], sorted(vars(b).items()), vars(Coord) is not None


def frame_vars_error():
    return vars(42)


def frame_dir_noarg():
    alpha = 1
    beta = 2
    del alpha
    gamma = beta
    return dir(), gamma


def frame_dir_object():
    return [n for n in dir(Box(1, 1)) if not n.startswith("__")]


_GLOBAL_SETTING = "initial"


def frame_globals_keys():
    g = globals()
    return (g["__name__"], "frame_globals_keys" in g, g["_GLOBAL_SETTING"],
            g is frame_globals_keys.__globals__, g["Account"] is Account)


def frame_globals_write():
    globals()["_GLOBAL_SETTING"] = "changed"
    global _GLOBAL_COUNTER
    _GLOBAL_COUNTER = _GLOBAL_COUNTER + 1
    return _GLOBAL_SETTING, _GLOBAL_COUNTER


_GLOBAL_COUNTER = 0


def _reset_globals():
    global _GLOBAL_SETTING, _GLOBAL_COUNTER
    _GLOBAL_SETTING = "initial"
    _GLOBAL_COUNTER = 0


def _observe_globals():
    return _GLOBAL_SETTING, _GLOBAL_COUNTER


def frame_eval_uses_locals():
    x = 41
    y = [1, 2]
    return eval("x + 1"), eval("len(y) + x", {"len": len, "x": 0, "y": []}), eval("_GLOBAL_SETTING")


def frame_exec_with_namespace():
    x = 7
    ns = {"x": x}
    exec("y = x * 2\nz = [y] * 2", globals(), ns)
    return ns["y"], ns["z"], sorted(k for k in ns if k != "__builtins__")


def frame_exec_without_namespace():
    x = 5
    exec("w = x * 3")
    exec("x = 100")
    return x, locals().get("w"), sorted(locals())


def frame_eval_in_nested_function():
    a = 2

    def inner():
        b = 3
        return eval("b * 10"), eval("a") if "a" in locals() else "a not visible"
    return inner()


def frame_eval_name_error():
    x = 1
    return eval("x + undefined_name")


def frame_eval_syntax_error():
    return eval("1 +")


def frame_getframe_co_name():
    f = sys._getframe(0)
    return f.f_code.co_name, f.f_code.co_qualname, sys._getframe().f_lineno - _first(frame_getframe_co_name)


def _caller_name():
    return sys._getframe(1).f_code.co_name


def _caller_lineno():
    return sys._getframe(1).f_lineno


def frame_getframe_caller_name():
    def nested():
        return _caller_name()
    return _caller_name(), nested(), (lambda: _caller_name())()


def frame_getframe_caller_lineno():
    first = _first(frame_getframe_caller_lineno)
    a = _caller_lineno() - first
    b = (
        _caller_lineno() - first
    )
    return a, b


def frame_getframe_f_locals():
    p = 1
    q = "q"
    loc = sys._getframe().f_locals
    return sorted(k for k in loc), loc["p"], loc["q"]


def frame_f_locals_written():
    # 3.13 (PEP 667): f_locals writes through to the variables, and locals() is a new
    # snapshot each time; up to 3.12 both are one dict the writes do not reach the variables from.
    p = 1
    loc = sys._getframe().f_locals
    loc["p"] = 2
    loc["extra"] = 3
    first = locals()
    first["q"] = 4
    return p, sorted(loc), loc.get("extra"), sorted(locals()), "extra" in locals(), first is locals()


def _peek_caller_locals():
    return dict(sys._getframe(1).f_locals)


def frame_getframe_caller_locals():
    secret = 42
    other = [1]
    seen = _peek_caller_locals()
    return seen["secret"], seen["other"], sorted(seen)


def frame_getframe_f_back_chain():
    def level2():
        f = sys._getframe()
        names = []
        for _ in range(3):
            names.append(f.f_code.co_name)
            f = f.f_back
        return names

    def level1():
        return level2()
    return level1()


def frame_getframe_f_globals():
    f = sys._getframe()
    return f.f_globals is globals(), f.f_globals["__name__"], f.f_code.co_filename == __file__


def _who_called_me():
    frame = inspect.currentframe()
    try:
        return frame.f_code.co_name, frame.f_back.f_code.co_name
    finally:
        del frame


def frame_inspect_currentframe():
    here = inspect.currentframe().f_code.co_name
    return here, _who_called_me(), Animal.create("z").__class__.__name__


def frame_inspect_stack_names():
    def inner():
        return [fi.function for fi in inspect.stack(context=0)[:2]]
    return inner()


def frame_getframe_too_deep_in_lambda():
    return (lambda: sys._getframe(0).f_code.co_name)(), (lambda: _caller_name())()


def frame_exc_info_inside_and_outside():
    before = sys.exc_info()
    try:
        raise KeyError("k")
    except KeyError:
        t, v, tb = sys.exc_info()
        inside = (t.__name__, str(v), tb is not None, type(sys.exception()).__name__)
    after = sys.exc_info()
    return before, inside, after, sys.exception()


def _report_current_exception():
    t, v, _ = sys.exc_info()
    return None if t is None else (t.__name__, v.args)


def frame_exc_info_in_callee():
    outside = _report_current_exception()
    try:
        {}["missing"]
    except LookupError:
        inside = _report_current_exception()
        try:
            1 / 0
        except ZeroDivisionError:
            nested = _report_current_exception()
        restored = _report_current_exception()
    return outside, inside, nested, restored


def frame_exc_info_in_finally_and_generator():
    def gen():
        yield sys.exception()
        try:
            raise ValueError("in gen")
        except ValueError:
            yield type(sys.exception()).__name__
        yield sys.exception()

    out = []
    try:
        raise TypeError("outer")
    except TypeError:
        g = gen()
        out.append(type(next(g)).__name__)
        out.append(next(g))
        out.append(type(next(g)).__name__)
    try:
        try:
            raise IndexError("idx")
        finally:
            out.append(type(sys.exception()).__name__)
    except IndexError:
        pass
    return out


def frame_exception_chaining():
    try:
        try:
            raise KeyError("first")
        except KeyError as e:
            raise ValueError("second") from e
    except ValueError as e2:
        cause = (type(e2.__cause__).__name__, e2.__suppress_context__)
    try:
        try:
            1 / 0
        except ZeroDivisionError:
            raise RuntimeError("during handling")
    except RuntimeError as e3:
        context = (type(e3.__context__).__name__, str(e3.__context__), e3.__cause__)
    return cause, context


def frame_bare_reraise():
    def risky():
        try:
            raise OSError(2, "No such thing")
        except OSError:
            print("logging and re-raising")
            raise
    return risky()


def frame_warn_stacklevel1():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("careful", UserWarning)
        warnings.warn("old api", DeprecationWarning, stacklevel=1)
    first = _first(frame_warn_stacklevel1)
    return [(str(w.message), w.category.__name__, w.lineno - first, w.filename == __file__)
            for w in caught]


def _deprecated_helper(x):
    warnings.warn(f"helper({x}) is deprecated", DeprecationWarning, stacklevel=2)
    return x * 2


def _deep_helper():
    return _deprecated_wrapper_level()


def _deprecated_wrapper_level():
    warnings.warn("attributed two frames up", FutureWarning, stacklevel=3)
    return "deep"


def frame_warn_stacklevel2():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = _deprecated_helper(3)
        r2 = _deep_helper()
    first = _first(frame_warn_stacklevel2)
    return r, r2, [(str(w.message), w.category.__name__, w.lineno - first, w.filename == __file__)
                   for w in caught]


def frame_warn_as_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return _deprecated_helper(1)


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


_LOG = logging.getLogger("magpy.corpus.calls")
_LOG.propagate = False
_LOG.setLevel(logging.DEBUG)


def _log_helper(n):
    _LOG.warning("helper got %d", n)
    _LOG.debug("attributed to caller", stacklevel=2)


def frame_logging_records():
    handler = _ListHandler()
    _LOG.addHandler(handler)
    try:
        _LOG.info("hello %s", "world")
        _log_helper(5)
        try:
            1 / 0
        except ZeroDivisionError:
            _LOG.exception("failed")
    finally:
        _LOG.removeHandler(handler)
    first = _first(frame_logging_records)
    return [(r.funcName, r.lineno - first, r.getMessage(), r.levelname, r.exc_info is not None)
            for r in handler.records]


CASES += [
    ("frame_super_init_and_method", case(frame_super_init_and_method)),
    ("frame_super_classmethod", case(frame_super_classmethod)),
    ("frame_super_multiple_inheritance", case(frame_super_multiple_inheritance)),
    ("frame_super_nested_class", case(frame_super_nested_class)),
    ("frame_super_cooperative_mixin", case(frame_super_cooperative_mixin)),
    ("frame_super_in_generator_and_property", case(frame_super_in_generator_and_property)),
    ("frame_super_outside_method_error", case(frame_super_outside_method_error)),
    ("frame_locals_after_assign_and_delete", case(frame_locals_after_assign_and_delete)),
    ("frame_locals_in_nested_with_freevars", case(frame_locals_in_nested_with_freevars)),
    ("frame_locals_in_comprehension", case(frame_locals_in_comprehension)),
    ("frame_vars_noarg_and_obj", case(frame_vars_noarg_and_obj)),
    ("frame_vars_error", case(frame_vars_error)),
    ("frame_dir_noarg", case(frame_dir_noarg)),
    ("frame_dir_object", case(frame_dir_object)),
    ("frame_globals_keys", case(frame_globals_keys)),
    ("frame_eval_uses_locals", case(frame_eval_uses_locals)),
    ("frame_exec_with_namespace", case(frame_exec_with_namespace)),
    ("frame_exec_without_namespace", case(frame_exec_without_namespace)),
    ("frame_eval_in_nested_function", case(frame_eval_in_nested_function)),
    ("frame_eval_name_error", case(frame_eval_name_error)),
    ("frame_eval_syntax_error", case(frame_eval_syntax_error)),
    ("frame_getframe_co_name", case(frame_getframe_co_name)),
    ("frame_getframe_caller_name", case(frame_getframe_caller_name)),
    ("frame_getframe_caller_lineno", case(frame_getframe_caller_lineno)),
    ("frame_getframe_f_locals", case(frame_getframe_f_locals)),
    ("frame_f_locals_written", case(frame_f_locals_written)),
    ("frame_getframe_caller_locals", case(frame_getframe_caller_locals)),
    ("frame_getframe_f_back_chain", case(frame_getframe_f_back_chain)),
    ("frame_getframe_f_globals", case(frame_getframe_f_globals)),
    ("frame_inspect_currentframe", case(frame_inspect_currentframe)),
    ("frame_inspect_stack_names", case(frame_inspect_stack_names)),
    ("frame_getframe_in_lambda", case(frame_getframe_too_deep_in_lambda)),
    ("frame_exc_info_inside_and_outside", case(frame_exc_info_inside_and_outside)),
    ("frame_exc_info_in_callee", case(frame_exc_info_in_callee)),
    ("frame_exc_info_in_finally_and_generator", case(frame_exc_info_in_finally_and_generator)),
    ("frame_exception_chaining", case(frame_exception_chaining)),
    ("frame_bare_reraise", case(frame_bare_reraise)),
    ("frame_warn_stacklevel1", case(frame_warn_stacklevel1)),
    ("frame_warn_stacklevel2", case(frame_warn_stacklevel2)),
    ("frame_warn_as_error", case(frame_warn_as_error)),
    ("frame_logging_records", case(frame_logging_records)),
]

STATEFUL_CASES += [
    ("frame_globals_write", frame_globals_write, _observe_globals, _reset_globals),
]


# ==========================================================================================
# 5. Builtins and operators
# ==========================================================================================

def ops_int_arithmetic():
    return (7 // 2, -7 // 2, 7 % -3, -7 % 3, 2 ** -1, 2 ** 100, 7 / 2, divmod(-7, 2),
            int("42"), int("ff", 16), int("0b101", 0), (255).bit_length(), 10 ** 20 // 3,
            -(2 ** 63) >> 3, 1 << 70, ~5, 6 & 3, 6 | 3, 6 ^ 3)


def ops_float_arithmetic():
    nan = float("nan")
    return (0.1 + 0.2, 1e308 * 10, nan != nan, round(2.5), round(3.5), round(2.675, 2),
            (2.0).is_integer(), 7.5 // 2, -7.5 % 2, float("-inf") < 0, 1 / 3, 2.0 ** 0.5,
            float("1e-3"), int(-3.9), math.floor(-3.5), math.ceil(-3.5), math.trunc(3.9))


def ops_complex_arithmetic():
    z = (1 + 2j) * (3 - 1j)
    return z, abs(3 + 4j), complex("1+2j"), 1j ** 2, z.real, z.imag, z.conjugate(), (1 + 1j) / (1 - 1j)


def ops_bool_arithmetic():
    return True + True, True * 3, ~True, True & False, True | 2, -True, sum([True, True, False]), int(False)


def ops_zero_division_int():
    return 1 // 0


def ops_zero_division_float():
    return 1.0 / 0


def ops_zero_division_modulo():
    return 5 % 0


def ops_zero_division_divmod():
    return divmod(1.5, 0.0)


def ops_zero_negative_power():
    return 0.0 ** -1


def ops_complex_division_by_zero():
    return (1 + 1j) / 0


def ops_unsupported_add():
    return 1 + "a"


def ops_unsupported_sub_lists():
    return [1] - [1]


def ops_seq_mul_float():
    return "ab" * 2.0


def ops_bad_unary():
    return -"a"


def ops_ordering_mixed_types():
    return sorted([3, "a", 1])


def ops_int_overflow_float():
    return float(10 ** 400)


def ops_str_methods():
    s = "  Hello, World  "
    t = s.strip()
    return (t.lower(), t.upper(), t.split(", "), "-".join(["a", "b", "c"]), t.replace("l", "L", 2),
            t.find("o"), t.rfind("o"), t.find("zz"), t.partition(", "), t.rpartition("o"),
            t.startswith(("He", "x")), t.endswith("d"), "7".zfill(3), "ab".center(6, "*"),
            "hello world".title(), "ß".casefold(), "a,b,,c".split(","), "x y  z".split(),
            "abc".isalpha(), "12".isdigit(), t.count("l"), "tab\there".expandtabs(4),
            "Straße".encode("utf-8"), t.swapcase(), "a\nb\r\nc".splitlines(), s.lstrip(), s.rstrip())


def ops_str_errors():
    return "abc".index("z")


def ops_str_join_non_str():
    return ",".join(["a", 1, "b"])


class _Money:
    def __init__(self, cents):
        self.cents = cents

    def __format__(self, spec):
        print("format called with", repr(spec))
        if spec == "short":
            return f"${self.cents // 100}"
        return f"${self.cents / 100:{spec or '.2f'}}"

    def __repr__(self):
        return f"Money({self.cents})"

    def __str__(self):
        return f"{self.cents}c"


def ops_string_formatting():
    m = _Money(1234)
    name, n, pi = "ann", 42, math.pi
    width = 8
    return ("%s is %d years, pi=%.3f, %5s|%-5s|%x|%o|%e" % (name, n, pi, "r", "l", 255, 8, 12345.678),
            "%(a)s-%(b)03d" % {"a": "x", "b": 7},
            "{} {!r} {name} {0}".format("p", "q", name="N"),
            "{0[1]} {1.cents} {2:>{3}}".format([1, 2], m, "w", 5),
            f"{name!r:>{width}} {n:08.3f} {n:#x} {n:,} {pi=:.2f} {m} {m!r} {m:short} {m:.1f} {m:}",
            format(3.14159, ".2f"), format(1234567, "_"), format(m, "short"), str(m), repr(m),
            f"{'nested ' + name.upper():^15}", f"{1e-7:g} {0.5:%} {-3:+d}")


def ops_percent_format_errors():
    return "%d %d" % (1,)


def ops_percent_format_too_many():
    return "%s" % (1, 2)


def ops_str_format_missing_key():
    return "{missing}".format(present=1)


def ops_bytes_and_bytearray():
    b = b"abc" + b"\x00\xff"
    ba = bytearray(b"hello")
    ba[0] = ord("J")
    ba.extend(b"!!")
    ba += b"?"
    del ba[1]
    return (b, b.hex(), bytes.fromhex("deadbeef"), ba, bytes(ba), b[1:3], b[0], list(b"AB"),
            b"a,b".split(b","), (1024).to_bytes(4, "big"), int.from_bytes(b"\x01\x00", "little"),
            "héllo".encode("latin-1"), b"x" * 3, b"abc".upper(), memoryview(b"xyz")[1:].tobytes())


def ops_bytes_decode_error():
    return b"\xff\xfe\xfa".decode("utf-8")


def ops_list_methods():
    xs = [3, 1, 4]
    xs.append(1)
    xs.extend([5, 9])
    xs.insert(0, 2)
    xs.insert(100, 6)
    popped = [xs.pop(), xs.pop(0)]
    xs.remove(1)
    idx = xs.index(4)
    cnt = xs.count(1)
    ys = xs.copy()
    ys.reverse()
    zs = ys * 2 + [0]
    zs.clear()
    return xs, popped, idx, cnt, ys, zs, [1, 2] < [1, 3], [[0] * 2] * 2


def ops_list_remove_missing():
    xs = [1, 2]
    xs.remove(3)


def ops_list_index_missing():
    return [1, 2].index(5)


def ops_list_pop_empty():
    return [].pop()


def ops_list_pop_out_of_range():
    return [1].pop(5)


def ops_list_index_out_of_range():
    xs = [1, 2, 3]
    return xs[3]


def ops_dict_methods():
    d = {"a": 1, "b": 2}
    d.setdefault("c", 3)
    d.setdefault("a", 99)
    d.update({"d": 4}, e=5)
    popped = d.pop("b")
    missing_default = d.pop("zz", None)
    last = d.popitem()
    merged = d | {"a": 0, "f": 6}
    d |= {"g": 7}
    return (d, popped, missing_default, last, merged, list(d.keys()), list(d.values()),
            list(d.items()), dict.fromkeys("xy", 0), d.get("nope", "dflt"), "a" in d,
            list(reversed(d)), {**d, "a": -1})


def ops_dict_pop_missing():
    return {"a": 1}.pop("b")


def ops_dict_missing_key():
    d = {"a": 1}
    return d["b"]


def ops_dict_popitem_empty():
    return {}.popitem()


def ops_dict_mutation_during_iteration():
    d = {"a": 1, "b": 2}
    for k in d:
        d[k + k] = 0


def ops_set_methods():
    a, b = {1, 2, 3, 4}, {3, 4, 5}
    c = set(a)
    c.add(10)
    c.discard(1)
    c.discard(99)
    c.remove(2)
    fs = frozenset([1, 2])
    return (sorted(a | b), sorted(a & b), sorted(a - b), sorted(a ^ b), sorted(a.union([7])),
            a.issuperset({1, 2}), {1} < a, sorted(c), fs | {3}, len(fs), 3 in fs,
            sorted(a.intersection(b, {4})), a.isdisjoint({9}))


def ops_set_remove_missing():
    s = {1, 2}
    s.remove(5)


def ops_tuple_methods_and_unpacking():
    t = (1, 2, 2, 3)
    a, *rest = t
    *init, last = t
    (x, y), z = (1, 2), 3
    return t.count(2), t.index(3), t + (4,), t * 2, a, rest, init, last, x + y + z, tuple("ab")


def ops_unpack_too_many():
    a, b = (1, 2, 3)
    return a, b


def ops_unpack_not_enough():
    a, b, c = [1, 2]
    return a, b, c


def ops_unpack_non_iterable():
    a, b = 5
    return a, b


def ops_slicing():
    s = list(range(10))
    t = "abcdefgh"
    sl = slice(1, None, 3)
    return (s[2:5], s[::2], s[::-1], s[-3:], s[:-7:-2], s[100:], s[sl], t[::-2], t[-1:-4:-1],
            sl.indices(10), (1, 2, 3)[1:], range(10)[2:8:3], s[5:2], t[-100:2])


def ops_slice_assignment(xs):
    xs[1:3] = ["a", "b", "c", "d"]
    xs[::3] = [0] * len(xs[::3])
    del xs[-2:]
    del xs[::2]
    xs[len(xs):] = [99]
    return xs


def ops_extended_slice_wrong_size(xs):
    xs[::2] = [1, 2]


def ops_del_items_and_attributes():
    d = {"a": 1, "b": 2}
    xs = [1, 2, 3]
    obj = Box(1, 2)
    obj.extra = "e"
    del d["a"], xs[0]
    del obj.extra
    return d, xs, hasattr(obj, "extra")


def ops_del_missing_attribute():
    b = Box(1, 2)
    del b.nothing_here


def ops_unbound_local():
    x = 1
    del x
    return x


def ops_unbound_local_before_assignment():
    def f():
        if False:
            y = 1
        return y
    return f()


def ops_isinstance_family():
    import collections.abc as cabc
    b = Box(1, 1)
    setattr(b, "color", "red")
    return (isinstance(3, (str, int)), isinstance(True, int), issubclass(bool, (int,)),
            isinstance([], cabc.Iterable), isinstance(Deck([]), cabc.Sized), issubclass(Dog, Animal),
            hasattr(b, "color"), getattr(b, "color"), getattr(b, "nope", None), hasattr(b, "area"),
            isinstance(Square(1), Shape), issubclass(Square, (int, Shape)), type(b) is Box)


def ops_getattr_missing_error():
    return getattr(Box(1, 1), "missing")


def ops_isinstance_bad_arg():
    return isinstance(1, "int")


def ops_numeric_builtins():
    return (len("abc"), abs(-3.5), abs(-7), round(3.14159, 3), round(-0.5), round(1234, -2),
            divmod(17, 5), pow(3, 4, 5), pow(3, -1, 7), pow(2, 0.5), pow(-8, 1 / 3).real > 0,
            max(1, 5, 3), min([4, 2, 8]), sum([0.1] * 10), sum([1, 2], start=10), sum(range(101)),
            math.fsum([0.1] * 10), bin(10), hex(255), oct(8), int(3.99), float(7), bool([]))


def ops_pow_mod_zero():
    return pow(2, 3, 0)


def ops_sum_strings():
    return sum(["a", "b"], "")


def ops_zip_enumerate_reversed():
    return (list(zip("abc", [1, 2, 3], (True, False, None))), list(zip("abcd", [1, 2])),
            list(zip()), list(enumerate("xy", start=5)), list(reversed([1, 2, 3])),
            list(reversed(range(4))), list(reversed("ab")), list(zip(*[(1, 2), (3, 4)])),
            dict(zip("ab", range(2))), list(zip([1, 2], [3, 4], strict=True)))


def ops_zip_strict_error():
    return list(zip([1, 2, 3], [4, 5], strict=True))


def ops_zip_strict_longer_error():
    return list(zip([1], [4, 5, 6], strict=True))


def ops_chr_ord():
    return chr(65), ord("z"), chr(0x1F600), ord("€"), [chr(ord("a") + i) for i in range(3)]


def ops_ord_error():
    return ord("ab")


def ops_chr_error():
    return chr(-1)


def ops_hash_and_identity():
    t1, t2 = (1, 2, (3, 4)), (1, 2, (3, 4))
    a = []
    b = a
    c = []
    b.append(1)
    return (hash(t1) == hash(t2), hash(1) == hash(1.0) == hash(True), a is b, a is c, a == c + [1],
            None is None, hash(frozenset([1, 2])) == hash(frozenset([2, 1])), hash(-1), hash(10 ** 30) == hash(10 ** 30))


def ops_hash_unhashable():
    return hash([1, 2])


def ops_unhashable_dict_key():
    return {[1]: 2}


def ops_type_three_args():
    def double(self):
        return self.x * 2
    T = type("T", (Box,), {"x": 21, "double_x": double, "__repr__": lambda self: "T!"})
    t = T(1, 2)
    return t.double_x(), repr(t), T.__name__, [k.__name__ for k in T.__mro__], t.area(), isinstance(t, Box)


_MISSING_SENTINEL = object()


def _lookup(d, key, default=_MISSING_SENTINEL):
    if key in d:
        return d[key]
    if default is _MISSING_SENTINEL:
        raise LookupError(f"no {key!r}")
    return default


def ops_object_sentinel():
    d = {"a": None}
    local_sentinel = object()
    try:
        _lookup(d, "zz")
    except LookupError as e:
        err = str(e)
    return (_lookup(d, "a"), _lookup(d, "b", 0), _lookup(d, "c", None), local_sentinel is not object(),
            _lookup(d, "a", _MISSING_SENTINEL), err)


def ops_collections_counter():
    c = collections.Counter("abracadabra")
    c.update({"z": 2})
    c2 = collections.Counter(a=1, b=10)
    return (c.most_common(3), c["a"], c["missing"], sorted((c - c2).items()), sorted((c + c2).items()),
            sorted(c.elements())[:6], c.total(), sorted((c & c2).items()))


def ops_collections_defaultdict_deque():
    dl = collections.defaultdict(list)
    di = collections.defaultdict(int)
    dx = collections.defaultdict(lambda: "x")
    for w in ["apple", "avocado", "banana"]:
        dl[w[0]].append(w)
        di[w[0]] += 1
    dx["q"]
    dq = collections.deque([1, 2, 3], maxlen=4)
    dq.appendleft(0)
    dq.append(4)
    dq.rotate(1)
    left = dq.popleft()
    dq.extendleft([7, 8])
    return dict(dl), dict(di), dict(dx), list(dq), left, dq.maxlen, dq[1]


def ops_deque_pop_empty():
    return collections.deque().popleft()


def ops_ordereddict_chainmap():
    od = collections.OrderedDict.fromkeys("abc")
    od.move_to_end("a")
    od.move_to_end("c", last=False)
    cm = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
    cm["c"] = 4
    return list(od), od.popitem(last=False), cm["a"], cm["b"], sorted(cm), cm.maps[0]


def ops_math_functions():
    return (math.sqrt(16), math.isqrt(17), math.gcd(12, 18), math.lcm(4, 6), math.factorial(10),
            math.log(math.e), math.log(8, 2), math.log10(1000), math.prod([1, 2, 3, 4]), math.comb(5, 2),
            math.perm(5, 2), math.isclose(0.1 + 0.2, 0.3), math.inf > 10 ** 100, math.hypot(3, 4),
            math.copysign(1, -0.0), math.degrees(math.pi), math.isnan(math.nan), math.fmod(7, 3),
            math.dist((0, 0), (3, 4)), math.exp(0), math.atan2(1, 1) * 4)


def ops_math_domain_error():
    return math.sqrt(-1)


def ops_math_factorial_error():
    return math.factorial(-3)


def ops_operator_module():
    get1 = operator.itemgetter(1)
    get02 = operator.itemgetter(0, 2)
    by_owner = operator.attrgetter("owner")
    nested = operator.attrgetter("leaf.value")
    up = operator.methodcaller("replace", "a", "o")

    class Holder:
        leaf = Node(5)
    return (get1("xyz"), get02([1, 2, 3]), by_owner(Account("own")), nested(Holder()), up("banana"),
            operator.add(1, 2), operator.mul("a", 3), operator.neg(5), operator.contains([1], 1),
            operator.getitem({"k": "v"}, "k"), operator.truediv(1, 4), operator.lt(1, 2),
            operator.index(7), operator.concat([1], [2]), operator.not_(0), operator.iadd([1], [2]))


def ops_conversion_errors():
    return int("12x")


def ops_float_conversion_error():
    return float("abc")


def ops_range_and_iter():
    r = range(1, 10, 3)
    it = iter([1, 2])
    return (list(r), len(r), r[1], 7 in r, r.index(4), next(it), next(it), next(it, "done"),
            list(range(5, 0, -2)), range(0) == range(2, 2))


def ops_range_zero_step():
    return range(1, 10, 0)


def ops_next_exhausted():
    it = iter([])
    return next(it)


def ops_comprehensions_and_control():
    matrix = [[i * 3 + j for j in range(3)] for i in range(3)]
    flat = [v for row in matrix for v in row if v % 2 == 0]
    squares = {v: v * v for v in range(4)}
    uniq = sorted({v % 3 for v in range(10)})
    total = 0
    while (n := len(flat)) > 2:
        total += flat.pop()
    label = "big" if total > 10 else "small"
    return matrix, flat, squares, uniq, total, n, label, 1 < 2 < 3, 1 < 3 < 2


def ops_print_variants():
    print("a", "b", sep="-", end="!\n")
    print()
    print(1, [2, 3], {"k": (4,)}, None, 1.5, sep="|")
    print(*range(3))
    print(repr("quote'd"), str(b"by"), ascii("é"))
    return "printed"


def ops_try_finally_return_override():
    log = []

    def f():
        try:
            log.append("try")
            return "from try"
        finally:
            log.append("finally")

    def g():
        try:
            raise ValueError("lost")
        finally:
            return "finally wins"  # noqa: B012
    return f(), g(), log


class AppError(Exception):
    def __init__(self, code, msg):
        super().__init__(f"[{code}] {msg}")
        self.code = code


def ops_custom_exception_with_args():
    try:
        raise AppError(404, "not found")
    except AppError as e:
        caught = (e.code, str(e), e.args)
    raise AppError(500, f"wrapped {caught}")


def ops_assert_error():
    x = 3
    assert x < 2, f"x too big: {x}"


CASES += [
    ("ops_int_arithmetic", case(ops_int_arithmetic)),
    ("ops_float_arithmetic", case(ops_float_arithmetic)),
    ("ops_complex_arithmetic", case(ops_complex_arithmetic)),
    ("ops_bool_arithmetic", case(ops_bool_arithmetic)),
    ("ops_zero_division_int", case(ops_zero_division_int)),
    ("ops_zero_division_float", case(ops_zero_division_float)),
    ("ops_zero_division_modulo", case(ops_zero_division_modulo)),
    ("ops_zero_division_divmod", case(ops_zero_division_divmod)),
    ("ops_zero_negative_power", case(ops_zero_negative_power)),
    ("ops_complex_division_by_zero", case(ops_complex_division_by_zero)),
    ("ops_unsupported_add", case(ops_unsupported_add)),
    ("ops_unsupported_sub_lists", case(ops_unsupported_sub_lists)),
    ("ops_seq_mul_float", case(ops_seq_mul_float)),
    ("ops_bad_unary", case(ops_bad_unary)),
    ("ops_ordering_mixed_types", case(ops_ordering_mixed_types)),
    ("ops_int_overflow_float", case(ops_int_overflow_float)),
    ("ops_str_methods", case(ops_str_methods)),
    ("ops_str_errors", case(ops_str_errors)),
    ("ops_str_join_non_str", case(ops_str_join_non_str)),
    ("ops_string_formatting", case(ops_string_formatting)),
    ("ops_percent_format_errors", case(ops_percent_format_errors)),
    ("ops_percent_format_too_many", case(ops_percent_format_too_many)),
    ("ops_str_format_missing_key", case(ops_str_format_missing_key)),
    ("ops_bytes_and_bytearray", case(ops_bytes_and_bytearray)),
    ("ops_bytes_decode_error", case(ops_bytes_decode_error)),
    ("ops_list_methods", case(ops_list_methods)),
    ("ops_list_remove_missing", case(ops_list_remove_missing)),
    ("ops_list_index_missing", case(ops_list_index_missing)),
    ("ops_list_pop_empty", case(ops_list_pop_empty)),
    ("ops_list_pop_out_of_range", case(ops_list_pop_out_of_range)),
    ("ops_list_index_out_of_range", case(ops_list_index_out_of_range)),
    ("ops_dict_methods", case(ops_dict_methods)),
    ("ops_dict_pop_missing", case(ops_dict_pop_missing)),
    ("ops_dict_missing_key", case(ops_dict_missing_key)),
    ("ops_dict_popitem_empty", case(ops_dict_popitem_empty)),
    ("ops_dict_mutation_during_iteration", case(ops_dict_mutation_during_iteration)),
    ("ops_set_methods", case(ops_set_methods)),
    ("ops_set_remove_missing", case(ops_set_remove_missing)),
    ("ops_tuple_methods_and_unpacking", case(ops_tuple_methods_and_unpacking)),
    ("ops_unpack_too_many", case(ops_unpack_too_many)),
    ("ops_unpack_not_enough", case(ops_unpack_not_enough)),
    ("ops_unpack_non_iterable", case(ops_unpack_non_iterable)),
    ("ops_slicing", case(ops_slicing)),
    ("ops_slice_assignment", lambda: (ops_slice_assignment, (list(range(8)),), {})),
    ("ops_extended_slice_wrong_size", lambda: (ops_extended_slice_wrong_size, ([1, 2, 3, 4, 5],), {})),
    ("ops_del_items_and_attributes", case(ops_del_items_and_attributes)),
    ("ops_del_missing_attribute", case(ops_del_missing_attribute)),
    ("ops_unbound_local", case(ops_unbound_local)),
    ("ops_unbound_local_before_assignment", case(ops_unbound_local_before_assignment)),
    ("ops_isinstance_family", case(ops_isinstance_family)),
    ("ops_getattr_missing_error", case(ops_getattr_missing_error)),
    ("ops_isinstance_bad_arg", case(ops_isinstance_bad_arg)),
    ("ops_numeric_builtins", case(ops_numeric_builtins)),
    ("ops_pow_mod_zero", case(ops_pow_mod_zero)),
    ("ops_sum_strings", case(ops_sum_strings)),
    ("ops_zip_enumerate_reversed", case(ops_zip_enumerate_reversed)),
    ("ops_zip_strict_error", case(ops_zip_strict_error)),
    ("ops_zip_strict_longer_error", case(ops_zip_strict_longer_error)),
    ("ops_chr_ord", case(ops_chr_ord)),
    ("ops_ord_error", case(ops_ord_error)),
    ("ops_chr_error", case(ops_chr_error)),
    ("ops_hash_and_identity", case(ops_hash_and_identity)),
    ("ops_hash_unhashable", case(ops_hash_unhashable)),
    ("ops_unhashable_dict_key", case(ops_unhashable_dict_key)),
    ("ops_type_three_args", case(ops_type_three_args)),
    ("ops_object_sentinel", case(ops_object_sentinel)),
    ("ops_collections_counter", case(ops_collections_counter)),
    ("ops_collections_defaultdict_deque", case(ops_collections_defaultdict_deque)),
    ("ops_deque_pop_empty", case(ops_deque_pop_empty)),
    ("ops_ordereddict_chainmap", case(ops_ordereddict_chainmap)),
    ("ops_math_functions", case(ops_math_functions)),
    ("ops_math_domain_error", case(ops_math_domain_error)),
    ("ops_math_factorial_error", case(ops_math_factorial_error)),
    ("ops_operator_module", case(ops_operator_module)),
    ("ops_conversion_errors", case(ops_conversion_errors)),
    ("ops_float_conversion_error", case(ops_float_conversion_error)),
    ("ops_range_and_iter", case(ops_range_and_iter)),
    ("ops_range_zero_step", case(ops_range_zero_step)),
    ("ops_next_exhausted", case(ops_next_exhausted)),
    ("ops_comprehensions_and_control", case(ops_comprehensions_and_control)),
    ("ops_print_variants", case(ops_print_variants)),
    ("ops_try_finally_return_override", case(ops_try_finally_return_override)),
    ("ops_custom_exception_with_args", case(ops_custom_exception_with_args)),
    ("ops_assert_error", case(ops_assert_error)),
]


# ==========================================================================================
# 6. torch
# ==========================================================================================

def _t(seed, *shape, requires_grad=False):
    torch.manual_seed(seed)
    return torch.randn(*shape, requires_grad=requires_grad)


def _seeded(seed, factory):
    torch.manual_seed(seed)
    return factory()


def torch_arithmetic(a, b):
    c = (a + b) * 2 - a / (b.abs() + 1)
    d = a @ b.T
    return c, d, a ** 2, torch.sqrt(a.abs()), -a, a * 3.5 + 1, (a > b).sum(), torch.maximum(a, b)


def torch_inplace_on_args(a, b):
    a.add_(b)
    a.mul_(2)
    b.clamp_(min=0)
    a[0].zero_()
    return None


def torch_indexing(x):
    return (x[0], x[:, 1], x[x > 0], x[[0, 2]], x[-1, -1], x[1:, ::2], x[..., 0], x[None].shape,
            x[torch.tensor([True, False, True])])


def torch_index_assignment(x):
    x[0] = 0
    x[:, 1] += 1
    x[x < -0.5] = -1
    x[2, [0, 2]] = torch.tensor([7.0, 8.0])
    return x.clone()


def torch_views(x):
    v = x.view(2, 6)
    r = x.reshape(3, 2, 2)
    p = r.permute(2, 0, 1)
    t = x.transpose(0, 1)
    v[0, 0] = 100.0  # writes through the view into the argument
    return v.shape, r.shape, p.shape, t.contiguous(), p.is_contiguous(), x.flatten(), x.unsqueeze(1).shape, r.squeeze().shape


def torch_cat_stack(a, b):
    return (torch.cat([a, b]), torch.cat([a, b], dim=1), torch.stack([a, b]), torch.stack((a, b), dim=-1).shape,
            torch.chunk(a, 2, dim=1), torch.split(torch.cat([a, b]), [1, 3]))


def torch_reductions(x):
    mx = x.max(dim=1)
    return (x.sum(), x.mean(dim=0), mx.values, mx.indices, x.argmax(), x.std(), x.norm(), x.prod(dim=1),
            x.cumsum(0), x.min(), torch.sort(x[0]).values, x.abs().max().item(), torch.topk(x.flatten(), 2).indices)


def torch_item_tolist(x):
    return x.sum().item(), x.tolist(), x[0, 0].item(), x.int().tolist(), x.argmax().item() + 1, float(x.mean())


def torch_shape_arithmetic(x):
    n = x.size(0) * 2
    m = x.shape[-1] + 1
    flat = x.reshape(x.size(0) * x.size(1), -1)
    return n, m, x.numel(), x.dim(), x.shape == torch.Size([3, 4]), tuple(x.shape), flat.shape, len(x), x.size()


def torch_nn_linear(lin, x):
    return lin(x), lin.weight.shape, lin.in_features


def torch_nn_sequential(model, x):
    h = model(x)
    first = model[0](x)
    return h, first, len(model), [type(m).__name__ for m in model]


def torch_nn_modulelist(layers, x):
    outs = []
    for i, layer in enumerate(layers):
        x = torch.tanh(layer(x)) if i % 2 == 0 else layer(x)
        outs.append(x.shape[-1])
    return x, outs


def torch_nn_moduledict(heads, x):
    return {name: head(x) for name, head in heads.items()}, sorted(heads.keys()), heads["a"](x).sum().item()


def torch_functional(x, target):
    return (F.relu(x), F.softmax(x, dim=-1), F.log_softmax(x, dim=1), F.cross_entropy(x, target),
            F.mse_loss(x, torch.zeros_like(x)), F.layer_norm(x, x.shape[-1:]), F.gelu(x),
            F.pad(x, (1, 1)), F.one_hot(target, 4), F.normalize(x, dim=1), F.linear(x, torch.ones(2, 4)))


def torch_conv_pool(img, weight):
    y = F.conv2d(img, weight, padding=1)
    return y, F.max_pool2d(y, 2), F.avg_pool2d(y, 2).shape, F.adaptive_avg_pool2d(y, 1).flatten(1)


def torch_no_grad(w, x):
    with torch.no_grad():
        y = w * x
        w.add_(1.0)
    z = w * x
    return y.requires_grad, z.requires_grad, torch.is_grad_enabled(), y, z.detach()


def torch_backward(x, w):
    loss = ((x @ w).relu() ** 2).mean()
    loss.backward()
    return loss.detach(), x.grad.clone(), w.grad.clone(), x.grad is not None


def torch_backward_module(lin, x, target):
    out = lin(x)
    loss = F.mse_loss(out, target)
    loss.backward()
    return loss.item(), lin.weight.grad.clone(), lin.bias.grad.clone()


def torch_optimizer_step(lin, x):
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        loss = lin(x).pow(2).sum()
        loss.backward()
        opt.step()
    return lin.weight.detach().clone(), loss.item()


class _CountingModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.calls = 0
        self.last_batch = None
        self.history = []

    def forward(self, x):
        self.calls += 1
        self.last_batch = x.shape[0]
        y = self.proj(x)
        self.history.append(round(y.sum().item(), 4))
        return y


def torch_module_mutates_self(m, x):
    a = m(x)
    b = m(x * 2)
    return a, b, m.calls, m.last_batch, m.history


class _RunningMean(nn.Module):
    def __init__(self, n, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("num_batches", torch.tensor(0))

    def forward(self, x):
        if self.training:
            self.running_mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))
            self.num_batches += 1
        return x - self.running_mean


def torch_register_buffer_inplace(m, x):
    y1 = m(x)
    y2 = m(x + 1)
    m.eval()
    y3 = m(x)
    return y1, y2, y3, m.running_mean.clone(), int(m.num_batches), sorted(dict(m.named_buffers()))


def torch_batchnorm_train(bn, x):
    y = bn(x)
    return y, bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.item()


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.register_buffer("scale_buf", torch.tensor(2.0))
        self.aliases = {"w": "inner.weight"}

    @property
    def scale(self):
        return self.scale_buf * 1.5

    @property
    def out_features(self):
        return self.inner.out_features

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in self.__dict__.get("aliases", {}):
                obj = self
                for part in self.aliases[name].split("."):
                    obj = getattr(obj, part)
                return obj
            raise

    def forward(self, x):
        return self.inner(x) * self.scale


def torch_module_property_getattr(m, x):
    return m(x), m.scale, m.out_features, m.w.shape, m.scale_buf, hasattr(m, "nothing")


def torch_module_getattr_missing(m):
    return m.definitely_missing


class _Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.seen = []

    def _hook(self, mod, inp, out):
        print("hook", type(mod).__name__)
        self.seen.append(tuple(out.shape))
        return out * 0 + 1

    def forward(self, x):
        return self.lin(x) + 1


def torch_forward_hooks(m, x):
    # Handles carry a global id counter, so hooks are removed before the module is compared.
    h1 = m.lin.register_forward_hook(m._hook)
    h2 = m.lin.register_forward_pre_hook(lambda mod, inp: print("pre", tuple(inp[0].shape)))
    try:
        return m(x), m.seen
    finally:
        h1.remove()
        h2.remove()


def torch_shape_mismatch_error(a, b):
    return a + b


def torch_matmul_error(a, b):
    return a @ b


def torch_where_clamp_masked(x):
    return (torch.where(x > 0, x, torch.zeros_like(x)), x.clamp(-0.5, 0.5), x.masked_fill(x < 0, -9.0),
            torch.nonzero(x > 0.5), torch.any(x > 2).item(), torch.all(x.abs() < 10).item())


def torch_python_loop_over_tensor(x):
    total = 0.0
    rows = []
    for row in x:
        total += row.sum().item()
        if row.max() > 0:
            rows.append(row.argmax().item())
    return total, rows, [v for v in x[0].tolist() if v > 0]


def torch_dtypes(x):
    return (x.float().dtype, x.long(), x.to(torch.float64).dtype, (x > 0).int(), x.double().sum(),
            torch.arange(5, dtype=torch.int64) // 2, torch.tensor([1, 2]) / 2, x.type(torch.int32))


def torch_seeded_inside(n):
    torch.manual_seed(123)
    a = torch.rand(n)
    b = F.dropout(torch.ones(n), 0.5, training=True)
    c = torch.randint(0, 10, (n,))
    return a, b, c, torch.randperm(n)


def torch_control_flow_on_tensors(x):
    out = []
    s = x.sum()
    if s > 0:
        out.append("positive")
    else:
        out.append("non-positive")
    while x.abs().max() > 1:
        x = x / 2
        out.append("halved")
    return out, x, bool(x.any())


def torch_detach_clone_requires_grad(w):
    a = w * 2
    b = a.detach()
    c = w.clone()
    d = torch.ones(2, requires_grad=True)
    return a.requires_grad, b.requires_grad, c.requires_grad, a.grad_fn is not None, b.grad_fn, d.is_leaf, a.is_leaf


def torch_autograd_grad_accumulates(w):
    for k in range(3):
        (w * (k + 1)).sum().backward()
    g = w.grad.clone()
    w.grad = None
    return g, w.grad


def torch_functional_api_in_module_state(model, x):
    model.eval()
    with torch.no_grad():
        y_eval = model(x)
    model.train()
    y_train = model(x)
    return y_eval, y_train.shape, model.training, [m.training for m in model.modules()]


def _lin(seed, i, o):
    return _seeded(seed, lambda: nn.Linear(i, o))


CASES += [
    ("torch_arithmetic", lambda: (torch_arithmetic, (_t(0, 3, 3), _t(1, 3, 3)), {})),
    ("torch_inplace_on_args", lambda: (torch_inplace_on_args, (_t(2, 3, 2), _t(3, 3, 2)), {})),
    ("torch_indexing", lambda: (torch_indexing, (_t(4, 3, 3),), {})),
    ("torch_index_assignment", lambda: (torch_index_assignment, (_t(5, 3, 3),), {})),
    ("torch_views", lambda: (torch_views, (_t(6, 3, 4),), {})),
    ("torch_cat_stack", lambda: (torch_cat_stack, (_t(7, 2, 4), _t(8, 2, 4)), {})),
    ("torch_reductions", lambda: (torch_reductions, (_t(9, 3, 4),), {})),
    ("torch_item_tolist", lambda: (torch_item_tolist, (_t(10, 2, 3),), {})),
    ("torch_shape_arithmetic", lambda: (torch_shape_arithmetic, (_t(11, 3, 4),), {})),
    ("torch_nn_linear", lambda: (torch_nn_linear, (_lin(12, 4, 3), _t(13, 2, 4)), {})),
    ("torch_nn_sequential", lambda: (torch_nn_sequential, (
        _seeded(14, lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))), _t(15, 3, 4)), {})),
    ("torch_nn_modulelist", lambda: (torch_nn_modulelist, (
        _seeded(16, lambda: nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 3), nn.Linear(3, 2)])), _t(17, 2, 4)), {})),
    ("torch_nn_moduledict", lambda: (torch_nn_moduledict, (
        _seeded(18, lambda: nn.ModuleDict({"b": nn.Linear(3, 1), "a": nn.Linear(3, 2)})), _t(19, 2, 3)), {})),
    ("torch_functional", lambda: (torch_functional, (_t(20, 3, 4), torch.tensor([0, 3, 1])), {})),
    ("torch_conv_pool", lambda: (torch_conv_pool, (_t(21, 1, 2, 4, 4), _t(22, 3, 2, 3, 3)), {})),
    ("torch_no_grad", lambda: (torch_no_grad, (_t(23, 3, requires_grad=True), _t(24, 3)), {})),
    ("torch_backward", lambda: (torch_backward, (_t(25, 2, 3, requires_grad=True),
                                                 _t(26, 3, 2, requires_grad=True)), {})),
    ("torch_backward_module", lambda: (torch_backward_module, (_lin(27, 3, 2), _t(28, 4, 3), _t(29, 4, 2)), {})),
    ("torch_optimizer_step", lambda: (torch_optimizer_step, (_lin(30, 3, 2), _t(31, 4, 3)), {})),
    ("torch_module_mutates_self", lambda: (torch_module_mutates_self, (
        _seeded(32, _CountingModule), _t(33, 2, 3)), {})),
    ("torch_register_buffer_inplace", lambda: (torch_register_buffer_inplace, (_RunningMean(3), _t(34, 4, 3)), {})),
    ("torch_batchnorm_train", lambda: (torch_batchnorm_train, (nn.BatchNorm1d(3), _t(35, 5, 3)), {})),
    ("torch_module_property_getattr", lambda: (torch_module_property_getattr, (_seeded(36, _Scaled), _t(37, 1, 2)), {})),
    ("torch_module_getattr_missing", lambda: (torch_module_getattr_missing, (_seeded(38, _Scaled),), {})),
    ("torch_forward_hooks", lambda: (torch_forward_hooks, (_seeded(39, _Hooked), _t(40, 3, 2)), {})),
    ("torch_shape_mismatch_error", lambda: (torch_shape_mismatch_error, (_t(41, 3), _t(42, 4)), {})),
    ("torch_matmul_error", lambda: (torch_matmul_error, (_t(43, 2, 3), _t(44, 2, 3)), {})),
    ("torch_where_clamp_masked", lambda: (torch_where_clamp_masked, (_t(45, 3, 3),), {})),
    ("torch_python_loop_over_tensor", lambda: (torch_python_loop_over_tensor, (_t(46, 3, 3),), {})),
    ("torch_dtypes", lambda: (torch_dtypes, (_t(47, 2, 2) * 3,), {})),
    ("torch_seeded_inside", case(torch_seeded_inside, 6)),
    ("torch_control_flow_on_tensors", lambda: (torch_control_flow_on_tensors, (_t(48, 4) * 4,), {})),
    ("torch_detach_clone_requires_grad", lambda: (torch_detach_clone_requires_grad, (_t(49, 2, requires_grad=True),), {})),
    ("torch_autograd_grad_accumulates", lambda: (torch_autograd_grad_accumulates, (_t(50, 3, requires_grad=True),), {})),
    ("torch_functional_api_in_module_state", lambda: (torch_functional_api_in_module_state, (
        _seeded(51, lambda: nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.0), nn.BatchNorm1d(3))), _t(52, 4, 3)), {})),
]


# ==========================================================================================
# 7. More call paths: C code calling back into Python, dunders entered from C, frames seen
#    from callbacks, context managers, generators, custom autograd functions
# ==========================================================================================

def _frame_key(v):
    return (v, sys._getframe(1).f_code.co_name)


def xtra_getframe_from_callbacks():
    keyed = sorted([3, 1, 2], key=_frame_key)
    mapped = list(map(lambda v: sys._getframe(1).f_code.co_name, [0]))
    reduced = functools.reduce(lambda a, b: a + [sys._getframe(1).f_code.co_name], [1, 2], [])
    return keyed, mapped, reduced


class _Introspective:
    def __init__(self):
        self.init_caller = sys._getframe(1).f_code.co_name

    @property
    def prop_caller(self):
        return sys._getframe(1).f_code.co_name

    def __getattr__(self, name):
        return (name, sys._getframe(1).f_code.co_name)

    def __eq__(self, other):
        print("eq called from", sys._getframe(1).f_code.co_name)
        return True

    __hash__ = object.__hash__

    def __len__(self):
        return len(sys._getframe(1).f_code.co_name)


def xtra_getframe_from_dunders():
    obj = _Introspective()
    return obj.init_caller, obj.prop_caller, obj.dynamic, obj == 1, len(obj), [obj] == [obj, ]


def _warn_in_callback(v):
    warnings.warn(f"value {v}", UserWarning, stacklevel=2)
    return v


class _WarnOnInit:
    def __init__(self, x):
        warnings.warn("constructed", stacklevel=2)
        self.x = x


def xtra_warn_from_callbacks_and_init():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(map(_warn_in_callback, [1, 2]))
        _WarnOnInit(3)
    first = _first(xtra_warn_from_callbacks_and_init)
    return [(str(w.message), w.lineno - first) for w in caught]


def xtra_traceback_frames():
    import traceback

    def inner():
        return {}["nope"]

    def middle():
        return inner()
    try:
        middle()
    except KeyError as e:
        tb = traceback.extract_tb(e.__traceback__)
        first = _first(xtra_traceback_frames)
        return [(fs.name, fs.lineno - first, fs.line) for fs in tb]


class _Managed:
    def __init__(self, name, suppress=False):
        self.name = name
        self.suppress = suppress

    def __enter__(self):
        print("enter", self.name)
        return self.name.upper()

    def __exit__(self, et, ev, tb):
        print("exit", self.name, et.__name__ if et else None, sys.exception() is ev if et else None)
        return self.suppress


@contextlib.contextmanager
def _managed_gen(tag):
    print("setup", tag)
    try:
        yield tag * 2
    except ValueError as e:
        print("handled", e)
    finally:
        print("teardown", tag)


def xtra_context_managers():
    with _Managed("a") as a, _Managed("b", suppress=True) as b:
        print("body", a, b)
        raise KeyError("suppressed")
    with _managed_gen("g") as g:
        print("inside", g)
        raise ValueError("caught by generator")
    with contextlib.suppress(ZeroDivisionError):
        1 / 0
    return "after"


def xtra_context_manager_not_suppressing():
    with _Managed("c"):
        raise RuntimeError("escapes")


def xtra_generator_throw_close():
    log = []

    def gen():
        try:
            while True:
                try:
                    v = yield
                    log.append(("got", v))
                except ValueError as e:
                    log.append(("thrown", str(e)))
        finally:
            log.append("closed")
    g = gen()
    next(g)
    g.send(1)
    g.throw(ValueError("boom"))
    g.send(2)
    g.close()
    return log


def xtra_coroutine_driven_manually():
    class Ready:
        def __await__(self):
            got = yield "suspend"
            return got * 2

    async def inner(x):
        return x + await Ready()

    async def outer():
        a = await inner(1)
        return a * 10
    coro = outer()
    first = coro.send(None)
    try:
        coro.send(5)
    except StopIteration as e:
        return first, e.value


class _DefaultDict(dict):
    def __missing__(self, key):
        print("missing", key)
        return key * 2


def xtra_dict_subclass_missing():
    d = _DefaultDict(a="x")
    return d["a"], d["bc"], "{k1}-{a}".format_map(_DefaultDict(a=1, k1="v")), d.get("zz", "get-default")


class _Idx:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        print("index", self.v)
        return self.v

    def __float__(self):
        return self.v + 0.5


def xtra_index_protocol():
    xs = list("abcdef")
    return xs[_Idx(2)], xs[_Idx(1):_Idx(4)], bin(_Idx(5)), range(_Idx(3)), float(_Idx(1)), "ab" * _Idx(2)


class _Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        print("next ->", self.n)
        return self.n


def xtra_user_iterator_consumed_by_c():
    return list(_Countdown(3)), sum(_Countdown(4)), sorted(_Countdown(3)), dict.fromkeys(_Countdown(2)), max(_Countdown(3))


class _Slotted:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y


def xtra_slots():
    s = _Slotted(1, 2)
    s.x = 10
    ok = (s.x, s.y, hasattr(s, "__dict__"))
    s.z = 3
    return ok


@functools.singledispatch
def _describe(obj):
    return f"object:{type(obj).__name__}"


@_describe.register
def _(obj: int):
    return f"int:{obj}"


@_describe.register(list)
def _describe_list(obj):
    return "list:" + ",".join(_describe(v) for v in obj)


@functools.total_ordering
class _Weight:
    def __init__(self, kg):
        self.kg = kg

    def __eq__(self, other):
        return self.kg == other.kg

    def __lt__(self, other):
        print("lt", self.kg, other.kg)
        return self.kg < other.kg


def xtra_singledispatch_total_ordering():
    return (_describe(3), _describe("s"), _describe([1, "a", [2]]), _describe(True),
            _Weight(1) >= _Weight(2), _Weight(3) > _Weight(2), _Weight(2) <= _Weight(2))


def xtra_class_defined_in_function():
    factor = 3
    seen = []

    class Local:
        x = factor
        y = x * 2
        seen.append(sorted(k for k in locals() if not k.startswith("__")))

        def get(self):
            return self.y + factor

        def __repr__(self):
            return f"<{type(self).__qualname__}>"
    return Local().get(), Local.__qualname__, repr(Local()), seen, Local.__module__


def xtra_defaults_evaluated_at_def_time():
    log = []

    def mk(v):
        log.append(v)
        return v

    def f(a=mk(1), *, b=mk(2)):
        return a + b
    log.append("defined")
    return f(), f(10), f(b=5), log, f.__defaults__, f.__kwdefaults__


def xtra_callbacks_from_c_library():
    import bisect
    import heapq
    import json
    import re
    heap = []
    for w in [_Weight(5), _Weight(1), _Weight(3)]:
        heapq.heappush(heap, w)
    smallest = heapq.heappop(heap).kg
    pos = bisect.bisect_left([{"k": 1}, {"k": 4}, {"k": 9}], 5, key=lambda d: d["k"])
    sub = re.sub(r"\d+", lambda m: str(int(m.group()) * 2), "a1 b22 c333")
    dumped = json.dumps({"w": _Weight(7)}, default=lambda o: {"kg": o.kg}, sort_keys=True)
    loaded = json.loads('{"a": {"b": 1}}', object_hook=lambda d: sorted(d.items()))
    return smallest, pos, sub, dumped, loaded


class _Copyable:
    def __init__(self, items):
        self.items = items
        self.copied = 0

    def __copy__(self):
        print("shallow copy")
        new = _Copyable(self.items)
        new.copied = self.copied + 1
        return new

    def __deepcopy__(self, memo):
        import copy
        print("deep copy")
        new = _Copyable(copy.deepcopy(self.items, memo))
        new.copied = self.copied + 10
        return new


def xtra_copy_protocol():
    import copy
    orig = _Copyable([[1], [2]])
    s = copy.copy(orig)
    d = copy.deepcopy(orig)
    orig.items[0].append("x")
    return s.items, d.items, s.copied, d.copied, copy.deepcopy({"k": [orig.items]})["k"][0] == orig.items


def xtra_class_getitem_and_call_classmethod_from_instance():
    class Registry:
        seen = []

        def __class_getitem__(cls, item):
            cls.seen.append(item)
            return f"Registry[{item.__name__}]"
    return Registry[int], Registry[str], Registry.seen, list[int] == list[int], str(dict[str, int])


def xtra_super_first_arg_in_lambda_error():
    class P:
        def vals(self):
            return [1]

    class Q(P):
        def vals(self):
            return list(map(lambda x: super().vals(), [5]))
    return Q().vals()


def xtra_builtin_keyword_errors():
    return sorted(key=len)


def xtra_exec_defines_and_calls_function():
    ns = {}
    exec("def sq(v):\n    return v * v\nres = [sq(i) for i in range(4)]", ns)
    code = compile("a + b", "<expr>", "eval")
    return ns["res"], ns["sq"](9), eval(code, {"a": 1, "b": 2}), ns["sq"].__name__


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("custom forward", tuple(x.shape))
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        print("custom backward")
        (x,) = ctx.saved_tensors
        return grad * 2 * x


def torch_custom_autograd_function(x):
    y = _Square.apply(x).sum()
    y.backward()
    return y.detach(), x.grad.clone()


def torch_tensor_grad_hook(x):
    seen = []
    h = x.register_hook(lambda g: seen.append(g.clone()) or g * 10)
    (x * 3).sum().backward()
    h.remove()
    return seen, x.grad.clone()


def torch_module_apply_and_state_dict(model):
    visited = []

    def init(m):
        visited.append(type(m).__name__)
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                m.weight.fill_(0.5)
                m.bias.zero_()
    model.apply(init)
    sd = model.state_dict()
    return visited, list(sd), sd["0.weight"].sum().item(), sum(p.numel() for p in model.parameters())


@torch.no_grad()
def _no_grad_fn(x):
    return x * 2, torch.is_grad_enabled()


def torch_no_grad_decorator_and_enable_grad(x):
    y, inside = _no_grad_fn(x)
    with torch.no_grad():
        with torch.enable_grad():
            z = x * 2
        w = x * 2
    return y.requires_grad, inside, z.requires_grad, w.requires_grad


def torch_clip_grad_norm(lin, x):
    lin(x).sum().mul(100).backward()
    total = nn.utils.clip_grad_norm_(lin.parameters(), max_norm=1.0)
    return total, lin.weight.grad.clone(), lin.bias.grad.clone()


CASES += [
    ("xtra_getframe_from_callbacks", case(xtra_getframe_from_callbacks)),
    ("xtra_getframe_from_dunders", case(xtra_getframe_from_dunders)),
    ("xtra_warn_from_callbacks_and_init", case(xtra_warn_from_callbacks_and_init)),
    ("xtra_traceback_frames", case(xtra_traceback_frames)),
    ("xtra_context_managers", case(xtra_context_managers)),
    ("xtra_context_manager_not_suppressing", case(xtra_context_manager_not_suppressing)),
    ("xtra_generator_throw_close", case(xtra_generator_throw_close)),
    ("xtra_coroutine_driven_manually", case(xtra_coroutine_driven_manually)),
    ("xtra_dict_subclass_missing", case(xtra_dict_subclass_missing)),
    ("xtra_index_protocol", case(xtra_index_protocol)),
    ("xtra_user_iterator_consumed_by_c", case(xtra_user_iterator_consumed_by_c)),
    ("xtra_slots", case(xtra_slots)),
    ("xtra_singledispatch_total_ordering", case(xtra_singledispatch_total_ordering)),
    ("xtra_class_defined_in_function", case(xtra_class_defined_in_function)),
    ("xtra_defaults_evaluated_at_def_time", case(xtra_defaults_evaluated_at_def_time)),
    ("xtra_callbacks_from_c_library", case(xtra_callbacks_from_c_library)),
    ("xtra_copy_protocol", case(xtra_copy_protocol)),
    ("xtra_class_getitem", case(xtra_class_getitem_and_call_classmethod_from_instance)),
    ("xtra_super_first_arg_in_lambda_error", case(xtra_super_first_arg_in_lambda_error)),
    ("xtra_builtin_keyword_errors", case(xtra_builtin_keyword_errors)),
    ("xtra_exec_defines_and_calls_function", case(xtra_exec_defines_and_calls_function)),
    ("torch_custom_autograd_function", lambda: (torch_custom_autograd_function, (_t(53, 3, requires_grad=True),), {})),
    ("torch_tensor_grad_hook", lambda: (torch_tensor_grad_hook, (_t(54, 2, requires_grad=True),), {})),
    ("torch_module_apply_and_state_dict", lambda: (torch_module_apply_and_state_dict, (
        _seeded(55, lambda: nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))),), {})),
    ("torch_no_grad_decorator_and_enable_grad", lambda: (torch_no_grad_decorator_and_enable_grad, (
        _t(56, 2, requires_grad=True),), {})),
    ("torch_clip_grad_norm", lambda: (torch_clip_grad_norm, (_lin(57, 3, 2), _t(58, 4, 3)), {})),
]


# ==========================================================================================
# 8. Dunder contracts enforced by C, constructor errors, generator introspection, attention
# ==========================================================================================

class _BadDunders:
    def __init__(self, kind):
        self.kind = kind

    def __str__(self):
        return 42

    def __bool__(self):
        return 1

    def __len__(self):
        return "long"

    def __iter__(self):
        return [1, 2]

    def __eq__(self, other):
        raise RuntimeError(f"cannot compare {self.kind}")

    __hash__ = None


def dunder_str_returns_non_string():
    return str(_BadDunders("s"))


def dunder_bool_returns_int():
    return not _BadDunders("b")


def dunder_len_returns_str():
    return len(_BadDunders("l"))


def dunder_iter_returns_non_iterator():
    return list(_BadDunders("i"))


def dunder_eq_raises_inside_list_index():
    items = [1, _BadDunders("e"), 3]
    return items.index(3)


def dunder_hash_none():
    return {_BadDunders("h"): 1}


def ctor_missing_init_argument():
    return Account()


def ctor_too_many_init_arguments():
    return Box(1, 2, 3)


class _NoInit:
    pass


def ctor_no_init_with_arguments():
    return _NoInit(1)


def ctor_kwarg_to_new_only_class():
    return _OnlyNew(value=2).value, _OnlyNew(vlue=3)


def gen_introspection():
    def counter(n):
        i = 0
        while i < n:
            yield i
            i += 1
        return "done"
    g = counter(2)
    states = [inspect.getgeneratorstate(g)]
    next(g)
    states.append(inspect.getgeneratorstate(g))
    local_i = inspect.getgeneratorlocals(g)["i"]
    rest = list(g)
    states.append(inspect.getgeneratorstate(g))
    return (states, local_i, rest, type(g).__name__, inspect.isgenerator(g), g.__name__,
            g.__qualname__.split(".")[-1], g.gi_frame is None)


def gen_yield_from_return_value():
    def inner():
        x = yield 1
        yield x * 2
        return "inner-result"

    def outer():
        result = yield from inner()
        yield result
    g = outer()
    return [next(g), g.send(21), next(g)], list(g)


def gen_expression_scoping():
    xs = [1, 2, 3]
    g = (x * y for x in xs for y in range(x))
    xs = [100]  # the outermost iterable was already evaluated
    return list(g), list(g)


def closure_cells_and_class_cell():
    a = 1

    def f():
        return a
    a = 2

    class K:
        def who(self):
            return __class__.__name__
    return f(), [c.cell_contents for c in f.__closure__], K().who(), f.__code__.co_freevars


class _Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.d = d

    def forward(self, x, mask=None):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return x + self.out(scores.softmax(-1) @ v)


def torch_handwritten_attention(attn, x):
    causal = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    y = attn(x, mask=causal)
    y.sum().backward()
    return y, attn.qkv.weight.grad.abs().sum().item() > 0, attn(x).shape


def torch_embedding_gru(emb, ids):
    # The GRU is built here: its weak references to flat weights cannot be compared as an argument.
    torch.manual_seed(62)
    gru = nn.GRU(4, 3, batch_first=True)
    h, last = gru(emb(ids))
    return h, last, emb.weight.shape


def torch_inplace_on_view_of_arg(x):
    row = x[1]
    row.mul_(10)
    x.t()[0].fill_(-1)  # first column through a transposed view
    return x.sum()


CASES += [
    ("dunder_str_returns_non_string", case(dunder_str_returns_non_string)),
    ("dunder_bool_returns_int", case(dunder_bool_returns_int)),
    ("dunder_len_returns_str", case(dunder_len_returns_str)),
    ("dunder_iter_returns_non_iterator", case(dunder_iter_returns_non_iterator)),
    ("dunder_eq_raises_inside_list_index", case(dunder_eq_raises_inside_list_index)),
    ("dunder_hash_none", case(dunder_hash_none)),
    ("ctor_missing_init_argument", case(ctor_missing_init_argument)),
    ("ctor_too_many_init_arguments", case(ctor_too_many_init_arguments)),
    ("ctor_no_init_with_arguments", case(ctor_no_init_with_arguments)),
    ("ctor_kwarg_to_new_only_class", case(ctor_kwarg_to_new_only_class)),
    ("gen_introspection", case(gen_introspection)),
    ("gen_yield_from_return_value", case(gen_yield_from_return_value)),
    ("gen_expression_scoping", case(gen_expression_scoping)),
    ("closure_cells_and_class_cell", case(closure_cells_and_class_cell)),
    ("torch_handwritten_attention", lambda: (torch_handwritten_attention, (
        _seeded(59, lambda: _Attention(4)), _t(60, 2, 3, 4)), {})),
    ("torch_embedding_gru", lambda: (torch_embedding_gru, (
        _seeded(61, lambda: nn.Embedding(10, 4)), torch.tensor([[1, 5, 9], [0, 2, 2]])), {})),
    ("torch_inplace_on_view_of_arg", lambda: (torch_inplace_on_view_of_arg, (_t(63, 3, 3),), {})),
]


# ==========================================================================================
# 9. Frames seen from generators / properties, PEP 479, async protocols
# ==========================================================================================

class _Legacy:
    @property
    def old(self):
        warnings.warn("Legacy.old is deprecated", DeprecationWarning, stacklevel=2)
        return "old-value"


def frame_warn_from_property():
    obj = _Legacy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = obj.old
    first = _first(frame_warn_from_property)
    return v, [(str(w.message), w.category.__name__, w.lineno - first) for w in caught]


def frame_getframe_in_generator():
    def gen():
        yield sys._getframe(0).f_code.co_name, sys._getframe(1).f_code.co_name
        yield sys._getframe(1).f_code.co_name

    def resume(g):
        return next(g)
    g = gen()
    first = next(g)
    second = resume(g)
    return first, second


def gen_stopiteration_inside_generator():
    def gen():
        yield 1
        next(iter([]))  # StopIteration escaping a generator becomes RuntimeError (PEP 479)
        yield 2
    return list(gen())


def coro_async_for_and_with():
    log = []

    class Ticker:
        def __init__(self, n):
            self.n = n

        def __aiter__(self):
            return self

        async def __anext__(self):
            if self.n == 0:
                raise StopAsyncIteration
            self.n -= 1
            return self.n

    class Session:
        async def __aenter__(self):
            log.append("aenter")
            return self

        async def __aexit__(self, *exc):
            log.append(("aexit", exc[0].__name__ if exc[0] else None))
            return False

    async def agen():
        for i in range(2):
            yield i * 10

    async def main():
        async with Session():
            async for v in Ticker(3):
                log.append(v)
            log.append([x async for x in agen()])
        return "finished"
    coro = main()
    kind = (type(coro).__name__, inspect.iscoroutine(coro))
    try:
        coro.send(None)
    except StopIteration as e:
        return kind, e.value, log


CASES += [
    ("frame_warn_from_property", case(frame_warn_from_property)),
    ("frame_getframe_in_generator", case(frame_getframe_in_generator)),
    ("gen_stopiteration_inside_generator", case(gen_stopiteration_inside_generator)),
    ("coro_async_for_and_with", case(coro_async_for_and_with)),
]


# ==========================================================================================
# 10. Thread state and frames as seen from code that native functions call back
# ==========================================================================================

class _ExcAware:
    def __repr__(self):
        e = sys.exception()
        return f"<handling {type(e).__name__}: {e}>" if e is not None else "<calm>"


def frame_exc_info_seen_by_native_dunder():
    obj = _ExcAware()
    calm = repr(obj)
    try:
        raise ValueError("bad input")
    except ValueError:
        during = repr(obj)
        formatted = f"{obj!r}"
    return calm, during, formatted, repr(obj)


def frame_getframe_from_c_callbacks():
    import re
    names = []
    re.sub("a", lambda m: names.append(sys._getframe(1).f_code.co_name) or "b", "xa")
    d = collections.defaultdict(lambda: names.append(sys._getframe(1).f_code.co_name))
    d["k"]
    return names


CASES += [
    ("frame_exc_info_seen_by_native_dunder", case(frame_exc_info_seen_by_native_dunder)),
    ("frame_getframe_from_c_callbacks", case(frame_getframe_from_c_callbacks)),
]


# ==========================================================================================
# The tests
# ==========================================================================================

OBSERVERS = {}
for _name, _fn, _observe, _reset in STATEFUL_CASES:
    CASES.append((_name, case(_fn)))
    OBSERVERS[_name] = (_observe, _reset)


@pytest.mark.parametrize("name,setup", CASES, ids=[n for n, _ in CASES])
def test_calls(name, setup):
    observe, reset = OBSERVERS.get(name, (None, None))
    check(setup, observe=observe, reset=reset)


def test_corpus_calls_size():
    names = [n for n, _ in CASES]
    assert len(CASES) >= 170
    assert len(names) == len(set(names))
    assert set(OBSERVERS) <= set(names)
