"""Differential corpus: the core Python 3.11 language, natively vs. under the monitor.

PYTEST_DONT_REWRITE -- the user functions below use ``assert``; keep their real bytecode.

Every case is a module-level (or nested) *user function* run once natively and once under
``magpy.capture.monitor.run``; the harness compares results / exceptions (type and message),
stdout, argument state afterwards and, for cases touching module globals or class
attributes, an ``observe()`` snapshot (``HOOKS`` gives the observe/reset pair).
"""
import asyncio
import collections
import contextlib
import dataclasses
import enum
import functools
import io
import itertools
import sys

import pytest

from tests.harness.differential import case, check

# =========================================================================================
# control flow
# =========================================================================================

def cf_if_chain(xs):
    out = []
    for x in xs:
        if x < 0:
            out.append("neg")
        elif x == 0:
            out.append("zero")
        elif x < 10:
            out.append("small")
        else:
            out.append("big")
    return out


def cf_while_else(limits):
    res = []
    for n in limits:
        i = 0
        while i < n:
            if i * i > 50:
                res.append(("break", i))
                break
            i += 1
        else:
            res.append(("else", i))
    return res


def cf_for_else_search(items, targets):
    res = []
    for t in targets:
        for idx, it in enumerate(items):
            if it == t:
                res.append(("found", idx))
                break
        else:
            res.append(("missing", t))
    return res


def cf_nested_break_continue():
    out = []
    for i in range(5):
        if i == 1:
            continue
        for j in range(5):
            if j > i:
                break
            if (i + j) % 2:
                continue
            out.append((i, j))
        else:
            out.append(("inner-exhausted", i))
    return out


def cf_early_return(rows):
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if v < 0:
                return ("negative", r, c, v)
    return ("ok", sum(sum(row) for row in rows))


def cf_while_true_continue(n):
    total = 0
    i = 0
    while True:
        i += 1
        if i > n:
            break
        if i % 3 == 0:
            continue
        total += i
    return total, i


def cf_chained_compare():
    calls = []

    def f(x):
        calls.append(x)
        return x

    r = [f(1) < f(2) < f(3), f(3) < f(2) < f(1), 1 < 2 > 0 != 5 == 5, 0 <= 0 < 1 <= 1,
         "a" < "b" < "c" > "a", f(5) == f(5) is not None]
    return r, calls


def cf_and_or_operands():
    log = []

    def t(v):
        log.append(v)
        return v

    a = t(0) or t("") or t([]) or t("last")
    b = t(1) and t("x") and t(None) and t("never")
    c = t(0) and t("never")
    d = t([1]) or t("never")
    e = not t(0)
    f = (t(0) or t(2)) and (t(3) or t("never"))
    return [a, b, c, d, e, f], log


def cf_ternary(xs):
    res = []
    for x in xs:
        res.append("even" if x % 2 == 0 else "odd3" if x % 3 == 0 else "odd")
    return res, ("pos" if xs else "empty"), ("pos" if () else "empty")


def cf_identity_membership():
    a = [1, 2]
    b = a
    c = [1, 2]
    d = {"k": 1}
    return [a is b, a is c, a is not c, a == c, 2 in a, 3 not in a, "k" in d, 1 in d,
            None is None, "ell" in "hello", "" in "x", (1, 2) in [(1, 2)], 1 in {1.0}]


class _ContainsOnly:
    def __contains__(self, x):
        return x == 7


class _IterOnly:
    def __iter__(self):
        return iter((1, 2, 3))


class _GetitemOnly:
    def __getitem__(self, i):
        if i >= 3:
            raise IndexError(i)
        return i * 10


def cf_membership_protocols():
    return [7 in _ContainsOnly(), 3 in _ContainsOnly(), 2 in _IterOnly(), 5 not in _IterOnly(),
            20 in _GetitemOnly(), 9 in _GetitemOnly(), list(_GetitemOnly())]


def cf_in_non_iterable():
    return 1 in 5


class _Falsy:
    def __bool__(self):
        return False


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def cf_truthiness_protocols():
    out = []
    for obj in (_Falsy(), _Sized(0), _Sized(3), 0.0, "", "x", [], [0], None, object):
        if obj:
            out.append(True)
        else:
            out.append(False)
    return out, bool(_Sized(2)), not _Falsy()


class _BadBool:
    def __bool__(self):
        return 1


def cf_bad_bool():
    if _BadBool():
        return "truthy"
    return "falsy"


def cf_compare_type_error():
    return sorted([3, "a", 1])


def cf_compare_lt_error():
    return 1 < "a"


def cf_dict_changed_during_iteration():
    d = {"a": 1, "b": 2}
    for k in d:
        d[k + k] = 0
    return d


def cf_tuple_aug_assign(t):
    t[0] += [99]
    return t


def cf_loop_targets():
    class Box:
        pass
    box = Box()
    d = {}
    seq = [0, 0, 0]
    for box.attr in range(3):
        pass
    for d["k"] in "xyz":
        pass
    for i, seq[i] in enumerate("abc"):
        pass
    for last in []:
        pass
    return box.attr, d, seq, i


def cf_loop_var_after_loop():
    for i in range(3):
        pass
    j = "untouched"
    for j in ():
        pass
    return i, j


def cf_arith_semantics():
    return [-7 // 2, -7 % 2, 7 // -2, 7 % -2, 2 ** -1, divmod(-9, 4), round(2.5), round(3.5),
            10 ** 30 + 1, ~5, -5 >> 1, 1 << 70, True + True, 0.1 + 0.2, 7 / 2, -(2 ** 63),
            int("-12"), 3 * "ab", [0] * 3, abs(-3.5), 5 & 3 | 8 ^ 1, 1e308 * 10, -0.0]


class _Vec:
    def __init__(self, *xs):
        self.xs = list(xs)

    def __add__(self, other):
        if isinstance(other, _Vec):
            return _Vec(*[a + b for a, b in zip(self.xs, other.xs)])
        if isinstance(other, int):
            return _Vec(*[a + other for a in self.xs])
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, int):
            return _Vec(*[other * 100 + a for a in self.xs])
        return NotImplemented

    def __eq__(self, other):
        return isinstance(other, _Vec) and self.xs == other.xs

    def __lt__(self, other):
        return sum(self.xs) < sum(other.xs)

    __hash__ = None


def cf_operator_overloading():
    a, b = _Vec(1, 2), _Vec(10, 20)
    c = a + b
    d = a + 1
    e = 1 + a
    a += b              # no __iadd__: falls back to __add__ and rebinds
    try:
        a + "s"
    except TypeError as err:
        msg = str(err)
    return c.xs, d.xs, e.xs, a.xs, msg, a == _Vec(11, 22), a != b, b > _Vec(0), sorted([b, c, d])[0].xs


def cf_iadd_list_aliasing():
    a = [1]
    b = a
    a += [2]            # list.__iadd__ mutates in place
    t = (1,)
    u = t
    t += (2,)           # tuple: new object
    return a, b, a is b, t, u, t is u


def cf_del_statements():
    xs = list(range(8))
    del xs[1:3]
    del xs[::2]
    d = {"a": 1, "b": 2, "c": 3}
    del d["b"]

    class Box:
        pass
    box = Box()
    box.p, box.q = 1, 2
    del box.p
    x, y = 1, 2
    del x, y
    try:
        del d["zz"]
    except KeyError as e:
        err = str(e)
    return xs, d, vars(box), err, "x" in dir()


def cf_slicing_semantics():
    s = list(range(10))
    out = [s[2:5], s[::-3], s[-3:], s[:100], s[8:2:-2], "hello"[::-1], (1, 2, 3)[1:]]
    s[1:4] = ["a"]
    s[-2:] = []
    t = list(range(6))
    t[::2] = "xyz"
    out += [s, t]
    try:
        t[::2] = [1, 2]
    except ValueError as e:
        out.append(str(e))
    out.append(s[slice(1, None, 2)])
    return out


class _Idx:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


class _DefaultDict(dict):
    def __missing__(self, key):
        return f"missing:{key}"


class _Generic:
    def __class_getitem__(cls, item):
        return (cls.__name__, item)


def cf_index_missing_classgetitem():
    xs = list("abcdef")
    d = _DefaultDict(a=1)
    return (xs[_Idx(2)], xs[_Idx(1):_Idx(4)], list(range(_Idx(3))), d["a"], d["zz"],
            d.get("zz"), _Generic[int], hex(_Idx(255)), "ab" * _Idx(2))


def cf_star_subscript():
    class Rec:
        def __getitem__(self, key):
            return key
    r = Rec()
    idx = (1, 2)
    return r[*idx], r[0, *idx], r[1:2, ...], r[()]


# =========================================================================================
# exceptions
# =========================================================================================

def ex_else_finally_ok():
    log = []
    try:
        log.append("try")
        r = 10 // 2
    except ZeroDivisionError:
        log.append("except")
        r = None
    else:
        log.append("else")
    finally:
        log.append("finally")
    return r, log


def ex_else_finally_err():
    log = []
    try:
        log.append("try")
        r = 10 // 0
    except ZeroDivisionError as e:
        log.append(("except", str(e)))
        r = None
    else:
        log.append("else")
    finally:
        log.append("finally")
    return r, log


def ex_try_finally_propagates(log):
    try:
        log.append("try")
        {}["nope"]
    finally:
        log.append("finally")
    log.append("unreachable")


def ex_finally_after_return(log):
    try:
        log.append("try")
        return "from-try"
    finally:
        log.append("finally")


def ex_return_in_finally_swallows():
    try:
        raise ValueError("lost")
    finally:
        return "finally wins"


def ex_finally_overrides_return():
    try:
        return "try"
    finally:
        return "finally"


def ex_except_tuple_and_order():
    res = []
    for thunk in (lambda: {}["k"], lambda: [][0], lambda: 1 / 0, lambda: int("x")):
        try:
            thunk()
        except (KeyError, IndexError) as e:
            res.append(("lookup", type(e).__name__))
        except ArithmeticError as e:
            res.append(("arith", type(e).__name__))
        except Exception as e:
            res.append(("other", type(e).__name__, str(e)))
    return res


def ex_except_first_match_wins():
    try:
        {}["x"]
    except LookupError:
        return "LookupError first"
    except KeyError:
        return "KeyError second"


def ex_except_name_unbound():
    try:
        1 / 0
    except ZeroDivisionError as e:
        pass
    return e


def ex_except_dynamic_class():
    classes = [ValueError, IndexError]
    out = []
    for i, exc in enumerate((ValueError("a"), KeyError("b"))):
        try:
            raise exc
        except classes[i]:
            out.append(("matched", i))
        except Exception:
            out.append(("fallthrough", i))
    return out


def ex_except_non_exception_class():
    try:
        raise ValueError("v")
    except 5:
        return "impossible"


def ex_raise_non_exception():
    raise 5


def ex_raise_class_instantiates():
    try:
        raise ValueError
    except ValueError as e:
        return type(e).__name__, e.args, str(e)


def ex_nested_handlers():
    log = []
    try:
        try:
            {}["missing"]
        except IndexError:
            log.append("wrong")
        finally:
            log.append("inner-finally")
    except LookupError as e:
        log.append(("outer", type(e).__name__, str(e)))
    return log


def ex_bare_reraise():
    try:
        try:
            raise ValueError("orig")
        except ValueError:
            raise
    except ValueError as e:
        return str(e), e.__context__, e.__cause__


def ex_bare_raise_no_active():
    raise


def ex_reraise_after_inner_handler():
    try:
        try:
            raise KeyError("A")
        except KeyError:
            try:
                raise ValueError("B")
            except ValueError:
                pass
            raise
    except Exception as e:
        return type(e).__name__, str(e)


def ex_raise_from():
    try:
        try:
            int("abc")
        except ValueError as e:
            raise KeyError("k") from e
    except KeyError as k:
        return (type(k.__cause__).__name__, str(k.__cause__), type(k.__context__).__name__,
                k.__suppress_context__)


def ex_raise_from_none():
    try:
        try:
            [][3]
        except IndexError:
            raise RuntimeError("clean") from None
    except RuntimeError as r:
        return r.__cause__, type(r.__context__).__name__, r.__suppress_context__


def ex_implicit_chaining():
    try:
        try:
            1 / 0
        except ZeroDivisionError:
            {}["inner"]
    except KeyError as e:
        ctx = e.__context__
        return (str(e), type(ctx).__name__, str(ctx), e.__cause__, e.__suppress_context__,
                ctx.__context__)


def ex_chain_escapes():
    try:
        int("zz")
    except ValueError as e:
        raise LookupError("wrapped") from e


def ex_break_in_finally():
    out = []
    for i in range(5):
        try:
            if i == 2:
                raise ValueError(i)
            out.append(i)
        finally:
            if i == 2:
                break
    return out, sys.exc_info()[0]


def ex_continue_in_finally():
    out = []
    for i in range(4):
        try:
            if i % 2:
                raise KeyError(i)
            out.append(i)
        finally:
            continue
    return out


def ex_break_continue_in_try_finally():
    log = []
    for i in range(4):
        try:
            if i == 1:
                continue
            if i == 3:
                break
            log.append(("body", i))
        finally:
            log.append(("fin", i))
    return log


def ex_error_in_finally_replaces():
    try:
        try:
            raise ValueError("first")
        finally:
            raise TypeError("second")
    except Exception as e:
        return type(e).__name__, str(e), type(e.__context__).__name__, str(e.__context__)


def ex_return_in_except():
    log = []

    def inner():
        try:
            raise ValueError("v")
        except ValueError:
            log.append("except")
            return "from-except"
        finally:
            log.append("finally")

    return inner(), log, sys.exc_info()


def ex_sys_exc_info():
    out = [sys.exc_info()[0], sys.exception()]
    try:
        raise TypeError("t")
    except TypeError:
        t, v, tb = sys.exc_info()
        out.append((t.__name__, str(v), tb is not None, sys.exception() is v))
        try:
            raise ValueError("inner")
        except ValueError:
            out.append(sys.exc_info()[0].__name__)
        out.append(sys.exc_info()[0].__name__)
    out.append(sys.exc_info())
    return out


def _current_exc_name():
    e = sys.exc_info()[1]
    return None if e is None else (type(e).__name__, str(e))


def ex_exc_info_in_callee():
    before = _current_exc_name()
    try:
        raise KeyError("x")
    except KeyError:
        during = _current_exc_name()
    return before, during, _current_exc_name()


def ex_exception_attributes():
    try:
        raise OSError(2, "No such file", "f.txt")
    except OSError as e:
        e.add_note("note one")
        e.add_note("note two")
        return (type(e).__name__, e.args, e.errno, e.strerror, e.filename, str(e),
                e.__notes__, e.__traceback__ is not None, e.__traceback__.tb_next)


def ex_group_partial():
    log = []
    try:
        try:
            raise ExceptionGroup("eg", [ValueError("v1"), TypeError("t1"), ValueError("v2")])
        except* ValueError as eg:
            log.append(("V", [str(e) for e in eg.exceptions], str(eg), type(eg).__name__))
    except* TypeError as eg:
        log.append(("T", [str(e) for e in eg.exceptions], str(eg)))
    return log


def ex_group_unhandled_remainder():
    try:
        try:
            raise ExceptionGroup("many", [ValueError("v"), KeyError("k"), OSError("o")])
        except* ValueError:
            pass
        except* OSError:
            pass
    except ExceptionGroup as g:
        return str(g), [(type(e).__name__, str(e)) for e in g.exceptions]


def ex_group_reraise():
    log = []
    try:
        try:
            raise ExceptionGroup("top", [ValueError("a"), TypeError("b")])
        except* ValueError:
            log.append("saw V")
            raise
        except* TypeError:
            log.append("saw T")
    except ExceptionGroup as g:
        log.append((g.message, [str(e) for e in g.exceptions]))
    return log


def ex_group_naked_exception():
    try:
        raise ValueError("naked")
    except* ValueError as eg:
        seen = type(eg).__name__, str(eg), [str(e) for e in eg.exceptions]
    return seen


def ex_group_raise_new_in_star():
    out = []
    try:
        try:
            raise ExceptionGroup("g", [KeyError("k")])
        except* KeyError:
            raise RuntimeError("replacement")
    except Exception as e:
        out.append((type(e).__name__, str(e), repr(e.__context__)))
    try:
        try:
            raise ExceptionGroup("g2", [KeyError("k"), ValueError("v"), OSError("o")])
        except* KeyError:
            raise RuntimeError("from K")
        except* ValueError:
            raise TypeError("from V")
    except Exception as g:
        out.append((type(g).__name__, str(g), repr(g)))
    return out


def ex_group_nested_split():
    seen = []
    try:
        raise ExceptionGroup("outer", [ValueError("a"),
                                       ExceptionGroup("inner", [ValueError("b"), KeyError("c")])])
    except* ValueError as eg:
        seen.append(("V", repr(eg)))
    except* KeyError as eg:
        seen.append(("K", repr(eg)))
    return seen


def ex_group_escapes():
    try:
        raise ExceptionGroup("esc", [ValueError("x"), TypeError("y")])
    except* ValueError:
        pass


def ex_assert_message(x):
    assert x > 0, f"x must be positive, got {x}"
    return x


def ex_assert_no_message():
    values = [1, 2]
    assert len(values) == 3
    return "unreachable"


def ex_assert_passes_and_caught():
    assert [1], "never"
    try:
        assert 0 > 1, ("tuple", "message")
    except AssertionError as e:
        return e.args


class AppError(Exception):
    def __init__(self, code, msg):
        super().__init__(f"[{code}] {msg}")
        self.code = code


class NotFound(AppError):
    pass


class Shouty(Exception):
    def __str__(self):
        return "SHOUT: " + " ".join(map(str, self.args)).upper()


def ex_custom_hierarchy():
    res = []
    for c in (404, 500):
        try:
            if c == 404:
                raise NotFound(c, "nope")
            raise AppError(c, "boom")
        except NotFound as e:
            res.append(("nf", e.code, str(e)))
        except AppError as e:
            res.append(("app", e.code, str(e), e.args, isinstance(e, Exception)))
    return res


def ex_custom_escapes():
    raise NotFound(418, "teapot")


def ex_custom_str_escapes():
    raise Shouty("quiet", 3)


def ex_keyerror_messages():
    msgs = []
    for key in ("missing", 3, (1, 2), ""):
        try:
            {"present": 1}[key]
        except KeyError as e:
            msgs.append((str(e), e.args))
    try:
        {}.pop("p")
    except KeyError as e:
        msgs.append(str(e))
    try:
        set().remove(9)
    except KeyError as e:
        msgs.append(str(e))
    return msgs


def ex_keyerror_escapes():
    d = {"a": 1}
    return d["b"]


def ex_indexerror_messages():
    msgs = []
    for thunk in (lambda: [1, 2][5], lambda: (1,)[-3], lambda: "ab"[9], lambda: [].pop(),
                  lambda: range(3)[7], lambda: b"x"[4]):
        try:
            thunk()
        except IndexError as e:
            msgs.append(str(e))
    return msgs


def ex_indexerror_escapes():
    xs = [1, 2, 3]
    return xs[3]


class _Plain:
    def __init__(self):
        self.here = 1


def ex_attributeerror_messages():
    msgs = []
    for thunk in (lambda: (1).foo, lambda: _Plain().missing, lambda: sys.no_such_attr,
                  lambda: "s".nope, lambda: None.x, lambda: _Plain.clsattr):
        try:
            thunk()
        except AttributeError as e:
            msgs.append(str(e))
    try:
        obj = object()
        obj.x = 1
    except AttributeError as e:
        msgs.append(str(e))
    try:
        del _Plain().nothere
    except AttributeError as e:
        msgs.append(str(e))
    return msgs


def ex_attributeerror_escapes():
    p = _Plain()
    return p.absent


def ex_zerodivision_messages():
    msgs = []
    for thunk in (lambda: 1 / 0, lambda: 1 // 0, lambda: 1 % 0, lambda: 1.0 / 0,
                  lambda: divmod(3, 0), lambda: 0 ** -1, lambda: 2.0 % 0.0):
        try:
            thunk()
        except ZeroDivisionError as e:
            msgs.append(str(e))
    return msgs


def ex_zerodivision_escapes(a, b):
    return a // b


def ex_typeerror_operand_messages():
    msgs = []
    five, nothing = 5, None
    for thunk in (lambda: 1 + "a", lambda: "a" * 1.5, lambda: [] - [], lambda: -"x",
                  lambda: len(five), lambda: five(), lambda: five[0], lambda: nothing[0],
                  lambda: {}[[]],
                  lambda: hash([]), lambda: iter(3), lambda: int([]), lambda: abs("x"),
                  lambda: "a" < 1, lambda: next([1])):
        try:
            thunk()
        except TypeError as e:
            msgs.append(str(e))
    return msgs


def _two(a, b, *, c=3):
    return a, b, c


def _posonly(a, /, b):
    return a, b


def _kwonly(*, req):
    return req


def ex_call_binding_errors():
    msgs = []
    attempts = [
        (_two, (1,), {}), (_two, (1, 2, 3), {}), (_two, (1, 2), {"d": 4}),
        (_two, (1,), {"a": 2}), (_two, (1, 2), {"c": 9}), (_posonly, (), {"a": 1, "b": 2}),
        (_kwonly, (), {}), (_kwonly, (1,), {}), (_two, (), {}), (lambda: 0, (1,), {}),
    ]
    for fn, args, kwargs in attempts:
        try:
            msgs.append(("ok", fn(*args, **kwargs)))
        except TypeError as e:
            msgs.append(str(e))
    return msgs


def ex_call_arity_escapes():
    return _two(1, 2, 3, 4)


def ex_unbound_local():
    if False:
        x = 1
    return x


def ex_name_error():
    return undefined_thing_xyz + 1  # noqa: F821


def ex_free_var_unbound():
    def inner():
        return v
    r = []
    try:
        inner()
    except NameError as e:
        r.append((type(e).__name__, str(e)))
    v = "now bound"
    r.append(inner())
    return r


def _tb_summary(exc, anchor_fn):
    import traceback
    first = anchor_fn.__code__.co_firstlineno
    return [(fs.name, fs.lineno - first) for fs in traceback.extract_tb(exc.__traceback__)]


def _raiser_level2(v):
    return {"k": 1}[v]


def _raiser_level1(v):
    return _raiser_level2(v) + 1


def ex_traceback_frames():
    try:
        _raiser_level1("missing")
    except KeyError as e:
        names = [name for name, _ in _tb_summary(e, ex_traceback_frames)]
        lines = _tb_summary(e, ex_traceback_frames)[0]
        return names, lines, e.__traceback__.tb_frame.f_code.co_name


def ex_exc_info_in_finally():
    seen = []

    def inner():
        try:
            raise ValueError("in flight")
        finally:
            e = sys.exc_info()[1]
            seen.append(None if e is None else (type(e).__name__, str(e)))
    try:
        inner()
    except ValueError:
        pass
    try:
        pass
    finally:
        seen.append(sys.exc_info()[1])
    return seen


def ex_exception_through_native_callback():
    out = []
    try:
        list(map(lambda x: 10 // x, [5, 0, 1]))
    except ZeroDivisionError as e:
        out.append(str(e))
    try:
        sorted(["a", 3, "b"], key=lambda v: v.upper())
    except AttributeError as e:
        out.append(str(e))
    try:
        dict.fromkeys(_CountdownRaising(3))
    except RuntimeError as e:
        out.append(str(e))
    return out


class _CountdownRaising:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise RuntimeError("iterator exploded")
        self.n -= 1
        return self.n


# =========================================================================================
# with statements
# =========================================================================================

class Recorder:
    """Context manager that logs enter/exit into a shared list."""

    def __init__(self, log, name, suppress=False):
        self.log, self.name, self.suppress = log, name, suppress

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self.name.upper()

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", self.name, et.__name__ if et else None,
                         str(ev) if ev is not None else None, tb is not None))
        return self.suppress


class _EnterFails:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter-fails")
        raise RuntimeError("cannot enter")

    def __exit__(self, *exc):
        self.log.append("exit-should-not-run")


class _ExitRaises:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        raise ValueError(f"exit saw {et.__name__ if et else None}")


class _ExitTruthy:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return 1


def wi_basic(log):
    with Recorder(log, "a") as v:
        log.append(("body", v))
    return v


def wi_suppress(log):
    with Recorder(log, "s", suppress=True):
        log.append("before")
        raise KeyError("swallowed")
    log.append("after")
    return "continued"


def wi_no_suppress(log):
    with Recorder(log, "n"):
        log.append("before")
        [][1]
    log.append("unreachable")


def wi_nested_multi(log):
    with Recorder(log, "outer") as a, Recorder(log, "inner", suppress=True) as b:
        log.append(("body", a, b))
        raise ValueError("boom")
    return "after"


def wi_return_inside(log):
    with Recorder(log, "r") as v:
        return "returned " + v


def wi_break_continue_inside(log):
    for i in range(4):
        with Recorder(log, f"loop{i}"):
            if i == 1:
                continue
            if i == 2:
                break
            log.append(("body", i))
    return i


def wi_enter_raises(log):
    try:
        with _EnterFails(log):
            log.append("body-should-not-run")
    except RuntimeError as e:
        return str(e)


def wi_exit_raises():
    try:
        with _ExitRaises():
            raise KeyError("body")
    except ValueError as e:
        return str(e), type(e.__context__).__name__


def wi_exit_truthy_nonbool():
    with _ExitTruthy():
        raise IndexError("hidden")
    return "suppressed by truthy 1"


def wi_not_a_cm():
    with 5:
        pass


def wi_missing_exit():
    class HalfCM:
        def __enter__(self):
            return self
    with HalfCM():
        pass


@contextlib.contextmanager
def _managed(log, name):
    log.append(("setup", name))
    try:
        yield name * 2
    except KeyError as e:
        log.append(("handled", str(e)))
    finally:
        log.append(("teardown", name))


def wi_contextmanager(log):
    with _managed(log, "x") as v:
        log.append(("body", v))
    with _managed(log, "y"):
        raise KeyError("inside")
    return "after both"


def wi_contextmanager_reraises(log):
    with _managed(log, "z"):
        raise ValueError("not handled by generator")


def wi_contextlib_suppress():
    out = []
    for i in range(3):
        with contextlib.suppress(KeyError, IndexError):
            out.append(("start", i))
            (lambda: {}["k"], lambda: [][0], lambda: None)[i]()
            out.append(("end", i))
    return out


def wi_exitstack(log):
    with contextlib.ExitStack() as stack:
        for name in ("a", "b"):
            log.append(("got", stack.enter_context(Recorder(log, name))))
        stack.callback(log.append, "callback-1")
        stack.callback(lambda: log.append("callback-2"))
    with contextlib.ExitStack() as stack:
        stack.enter_context(Recorder(log, "kept"))
        moved = stack.pop_all()
    log.append("after pop_all")
    moved.close()
    return len(log)


def wi_exitstack_suppresses(log):
    def swallow(et, ev, tb):
        log.append(("swallow", et.__name__))
        return True
    with contextlib.ExitStack() as stack:
        stack.push(swallow)
        stack.enter_context(Recorder(log, "inner"))
        raise ZeroDivisionError("inside stack")
    return "suppressed"


def wi_targets():
    class Pair:
        def __enter__(self):
            return (1, [2, 3])

        def __exit__(self, *a):
            return False

    class Holder:
        pass
    h = Holder()
    d = {}
    with Pair() as (a, [b, c]):
        pass
    with Pair() as h.attr, Pair() as d["k"]:
        pass
    return a, b, c, h.attr, d


def wi_redirect_stdout():
    buf = io.StringIO()
    print("before")
    with contextlib.redirect_stdout(buf):
        print("captured", 1)
    print("after")
    return buf.getvalue()


# =========================================================================================
# closures and cells
# =========================================================================================

def cl_counter_factory():
    def make(start):
        count = start

        def inc(step=1):
            nonlocal count
            count += step
            return count
        return inc
    a, b = make(0), make(100)
    return [a(), a(), b(5), a(10), b()]


def cl_nonlocal_two_levels():
    x = "outer"

    def mid():
        def inner():
            nonlocal x
            x = x + "+inner"
            return x
        r = inner()
        return r, x
    return mid(), x


def cl_late_binding():
    fs = []
    for i in range(3):
        fs.append(lambda: i)
    return [f() for f in fs]


def cl_default_arg_binding():
    fs = [lambda i=i: i * 10 for i in range(3)]
    return [f() for f in fs], [f(7) for f in fs]


def cl_shared_cell():
    def make():
        value = []

        def push(x):
            value.append(x)

        def reset():
            nonlocal value
            old, value = value, []
            return old
        return push, reset, lambda: list(value)
    push, reset, peek = make()
    push(1)
    push(2)
    a = peek()
    old = reset()
    push(3)
    return a, old, peek()


def cl_cell_contents():
    a, b = "A", ["B"]

    def f():
        return a, b
    return (f.__code__.co_freevars, [c.cell_contents for c in f.__closure__],
            f.__code__.co_cellvars)


def cl_argument_captured():
    def make(arg, *rest, **kw):
        return lambda: (arg, rest, kw)
    return make(1, 2, 3, k=4)()


def cl_class_body_sees_enclosing():
    x = "enclosing"

    class K:
        y = x
        z = [x for _ in range(2)]

        def method(self):
            return x
    x = "rebound"
    return K.y, K.z, K().method()


_SHADOW = "global"


def cl_class_body_global_quirk():
    _SHADOW = "function-local"  # noqa: F841 - not visible from the class body below

    class K:
        a = _SHADOW
        _SHADOW = "class"
        b = _SHADOW
    return K.a, K.b


def cl_del_local():
    x = 1
    y = x + 1
    del x
    try:
        return x
    except UnboundLocalError as e:
        msg = str(e)
    x = 5
    return msg, x, y


def cl_del_local_escapes():
    z = [1]
    del z
    z.append(2)


def cl_del_cell():
    v = "cell"

    def inner():
        return v
    first = inner()
    del v
    try:
        inner()
    except NameError as e:
        return first, type(e).__name__, str(e)


def cl_del_cell_escapes():
    w = 1

    def reader():
        return w
    del w
    return reader()


def cl_recursive_inner():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)
    return fact(10), fact.__code__.co_freevars


def cl_closure_sees_later_assignment():
    def get():
        return later
    later = "assigned after def"
    return get()


def cl_nonlocal_in_loop_closures():
    total = 0
    adders = []
    for i in range(1, 4):
        def add(i=i):
            nonlocal total
            total += i
            return total
        adders.append(add)
    return [a() for a in adders], total


def cl_nonlocal_through_class():
    hits = 0

    class Tracker:
        def hit(self, n=1):
            nonlocal hits
            hits += n
            return hits
    t = Tracker()
    t.hit()
    t.hit(5)
    return hits, Tracker.hit.__code__.co_freevars


_G_COUNTER = 0
_G_ITEMS = []


def _reset_globals():
    global _G_COUNTER, _G_ITEMS
    _G_COUNTER = 0
    _G_ITEMS = []
    globals().pop("_G_CREATED", None)
    globals().pop("_G_TEMP", None)


def _observe_globals():
    return {"counter": _G_COUNTER, "items": list(_G_ITEMS),
            "created": globals().get("_G_CREATED", "<absent>"),
            "temp": globals().get("_G_TEMP", "<absent>")}


def cl_global_write():
    global _G_COUNTER
    for _ in range(3):
        _G_COUNTER += 2
    _G_ITEMS.append(_G_COUNTER)
    return _G_COUNTER


def cl_global_create():
    global _G_CREATED
    _G_CREATED = {"made": "inside"}
    return _G_CREATED["made"]


def cl_global_in_nested():
    def bump():
        global _G_COUNTER
        _G_COUNTER += 10

    def read():
        return _G_COUNTER
    bump()
    bump()
    return read()


def cl_global_del():
    global _G_TEMP
    _G_TEMP = 1
    del _G_TEMP
    return _G_TEMP


# =========================================================================================
# comprehensions
# =========================================================================================

def co_list_with_conditions(xs):
    return [x * x for x in xs if x % 2 if x > 2], [x if x > 0 else -x for x in xs]


def co_set_and_dict():
    words = ["apple", "bob", "cat", "apple", "dog"]
    lengths = {len(w) for w in words}
    index = {w: i for i, w in enumerate(words)}
    inverted = {v: k for k, v in {"a": 1, "b": 2, "c": 1}.items()}
    return lengths, index, inverted


def co_genexp_consumers():
    xs = range(10)
    return (sum(x for x in xs if x % 3), max((x * 7) % 10 for x in xs), any(x > 8 for x in xs),
            all(x < 5 for x in xs), tuple(x for x in "abc"))


def co_nested():
    matrix = [[1, 2, 3], [4, 5, 6]]
    transposed = [[row[i] for row in matrix] for i in range(3)]
    flat = [v for row in matrix for v in row if v != 4]
    pairs = [(x, y) for x in range(4) for y in range(x) if (x + y) % 2]
    return transposed, flat, pairs


def co_closure_over_enclosing(scale):
    offset = 3
    fns = {name: (lambda v, n=n: v * n * scale + offset) for n, name in enumerate("abc")}
    return [fns[k](2) for k in "abc"], [[scale * offset + j for j in range(i)] for i in range(3)]


def co_lambdas_late_binding():
    fs = [lambda: i for i in range(3)]
    gs = [(lambda j: lambda: j)(i) for i in range(3)]
    return [f() for f in fs], [g() for g in gs]


def co_scope_isolation():
    x = "outer"
    ys = [x for x in range(3)]
    return x, ys


def co_class_body_scope_error():
    class K:
        n = 3
        xs = [1, 2]
        ys = [x * n for x in xs]  # noqa: F821 - class scope invisible in comprehension
    return K.ys


def co_first_iterable_eager():
    try:
        (x for x in 1)
    except TypeError as e:
        eager = str(e)
    g = (1 / x for x in [1, 0])
    first = next(g)
    try:
        next(g)
    except ZeroDivisionError as e:
        lazy = str(e)
    return eager, first, lazy


def co_error_inside_comprehension():
    return [10 // x for x in (5, 2, 0, 1)]


def co_dict_duplicate_keys_order():
    d = {k % 3: k for k in range(7)}
    return list(d.items()), {**{"b": 1, "a": 2}, "b": 3}


def co_mutating_outer_list():
    seen = []
    out = [seen.append(x) or len(seen) for x in "abcd"]
    return out, seen


# =========================================================================================
# generator functions
# =========================================================================================

def ge_next_basic():
    def g():
        yield 1
        yield 2
        return "done"
    it = g()
    a = next(it)
    b = next(it)
    try:
        next(it)
    except StopIteration as e:
        c = ("stop", e.value, e.args)
    return a, b, c, next(it, "default")


def ge_send():
    def acc():
        total = 0
        while True:
            x = yield total
            if x is None:
                break
            total += x
        return total
    g = acc()
    out = [next(g), g.send(5), g.send(7)]
    try:
        g.send(None)
    except StopIteration as e:
        out.append(e.value)
    return out


def ge_send_unstarted():
    def g():
        yield 1
    return g().send("x")


def ge_throw_caught():
    log = []

    def g():
        while True:
            try:
                yield "ready"
            except ValueError as e:
                log.append(("caught", str(e)))
                yield "recovered"
    it = g()
    out = [next(it), it.throw(ValueError("v1")), next(it), it.throw(ValueError("v2"))]
    it.close()
    return out, log


def ge_throw_uncaught():
    def g():
        yield 1
        yield 2
    it = g()
    next(it)
    it.throw(KeyError("thrown in"))


def ge_throw_unstarted():
    log = []

    def g():
        try:
            yield 1
        finally:
            log.append("finally-should-not-run")
    it = g()
    try:
        it.throw(ValueError("early"))
    except ValueError as e:
        return str(e), log, next(it, "exhausted")


def ge_close_finally():
    log = []

    def g():
        try:
            yield 1
            yield 2
        except GeneratorExit:
            log.append("GeneratorExit")
            raise
        finally:
            log.append("finally")
    it = g()
    next(it)
    it.close()
    it.close()
    return log, next(it, "closed")


def ge_close_ignored():
    def g():
        try:
            yield 1
        finally:
            yield 2
    it = g()
    next(it)
    try:
        it.close()
    except RuntimeError as e:
        return str(e)


def ge_close_return_value():
    def g():
        try:
            yield 1
        except GeneratorExit:
            return "ignored value"
    it = g()
    next(it)
    return it.close()


def ge_yield_from_delegation():
    log = []

    def inner():
        try:
            x = yield "i1"
            log.append(("inner got", x))
            y = yield "i2"
            log.append(("inner got", y))
        except KeyError as e:
            log.append(("inner caught", str(e)))
            yield "i-recovered"
        return "inner-result"

    def outer():
        r = yield from inner()
        log.append(("outer got", r))
        yield "o-final"

    it = outer()
    out = [next(it), it.send("s1"), it.throw(KeyError("k")), next(it)]
    out.append(next(it, "end"))
    return out, log


def ge_yield_from_iterables():
    def g():
        yield from [1, 2]
        yield from "ab"
        yield from range(3, 5)
        r = yield from iter(())
        yield r
    return list(g())


def ge_yield_from_list_send():
    def g():
        yield from [1, 2, 3]
    it = g()
    next(it)
    return it.send("not None")


def ge_return_value_via_stopiteration():
    def g(n):
        for i in range(n):
            yield i
        return n * 100
    it = g(2)
    vals = []
    while True:
        try:
            vals.append(next(it))
        except StopIteration as e:
            return vals, e.value


def ge_stopiteration_inside():
    def g():
        yield 1
        raise StopIteration("leaks")
    try:
        return list(g())
    except RuntimeError as e:
        return str(e), type(e.__cause__).__name__, str(e.__cause__)


def ge_next_in_generator_exhausted():
    def g(it):
        while True:
            yield next(it)
    return list(g(iter([1, 2])))


def _countdown(n):
    while n > 0:
        yield n
        n -= 1


def ge_consumed_by_list():
    return list(_countdown(5))


def ge_consumed_by_sum():
    return sum(_countdown(100)), sum(x * x for x in _countdown(4))


def ge_consumed_by_zip():
    return list(zip(_countdown(3), "abcdef", _countdown(10)))


def ge_consumed_by_dict():
    def pairs():
        for i, ch in enumerate("xyz"):
            yield ch, i
    return dict(pairs())


def ge_consumed_by_join():
    def words():
        yield "alpha"
        yield "beta"
        yield "gamma"
    return "-".join(words()), "".join(w[0] for w in words())


def ge_consumed_by_sorted_max():
    def vals():
        yield from (5, 3, 9, 1)
    return sorted(vals()), sorted(vals(), reverse=True), max(vals()), min(vals(), key=lambda v: -v)


def ge_infinite_islice():
    def naturals():
        n = 0
        while True:
            yield n
            n += 1
    evens = (n for n in naturals() if n % 2 == 0)
    return list(itertools.islice(evens, 5)), list(itertools.islice(naturals(), 3, 10, 3))


def ge_closure_generator():
    def make(mult):
        def gen(n):
            for i in range(n):
                yield i * mult
        return gen
    g3 = make(3)
    return list(g3(4)), list(make(-1)(2))


def ge_try_finally_consumer_break():
    log = []

    def g():
        try:
            for i in range(10):
                log.append(("yield", i))
                yield i
        finally:
            log.append("cleanup")
    it = g()
    for v in it:
        if v == 2:
            break
    log.append("after loop")
    it.close()
    return log


def ge_already_executing():
    def g():
        yield next(me)
    me = g()
    try:
        next(me)
    except ValueError as e:
        return str(e)


def ge_pipeline():
    def source():
        yield from range(1, 11)

    def evens(it):
        for x in it:
            if x % 2 == 0:
                yield x

    def squares(it):
        for x in it:
            yield x * x
    return list(squares(evens(source())))


def ge_recursive_tree_walk():
    tree = ("a", [("b", [("d", [])]), ("c", [("e", []), ("f", [])])])

    def walk(node, depth=0):
        name, children = node
        yield depth, name
        for child in children:
            yield from walk(child, depth + 1)
    return list(walk(tree))


def ge_generator_state_attrs():
    def g():
        yield 1
    it = g()
    return (it.__name__, it.__qualname__.split(".")[-1], it.gi_running,
            it.gi_frame is not None, next(it), list(it), it.gi_frame)


def ge_genexp_methods():
    g = (x * 2 for x in range(5))
    first = next(g)
    second = g.send(None)
    try:
        g.throw(KeyError("into genexp"))
    except KeyError as e:
        thrown = str(e)
    return first, second, thrown, list(g)


def ge_with_inside_generator_closed():
    log = []

    def g():
        with Recorder(log, "gen-cm"):
            yield 1
            yield 2
    it = g()
    first = next(it)
    it.close()
    return first, log


def ge_return_in_try_finally():
    log = []

    def g():
        try:
            yield "a"
            return "ret"
        finally:
            log.append("finally before StopIteration")
    it = g()
    next(it)
    try:
        next(it)
    except StopIteration as e:
        return e.value, log


def ge_yield_in_except_block():
    def g():
        try:
            raise KeyError("in gen")
        except KeyError as e:
            got = yield ("handling", str(e), type(sys.exc_info()[1]).__name__)
            yield ("still handling", got, type(sys.exc_info()[1]).__name__)
        yield ("after", sys.exc_info()[1])
    it = g()
    out = [next(it)]
    out.append(("caller sees", sys.exc_info()[1]))
    out.append(it.send("v"))
    out.append(next(it))
    return out


# =========================================================================================
# unpacking
# =========================================================================================

def un_basic_and_swap():
    a, b = 1, 2
    a, b = b, a
    (c, d), e = "xy", [3]
    x = y = [0]
    x.append(1)
    return a, b, c, d, e, y


def un_starred():
    a, *b, c = range(6)
    *d, e = [1]
    f, *g = "hello"
    first, *_, last = (10, 20, 30, 40)
    return a, b, c, d, e, f, g, first, last


def un_nested():
    data = [(1, (2, 3)), (4, (5, 6))]
    out = []
    for i, (j, k) in data:
        out.append(i + j * k)
    (p, [q, *r]), s = ((7, [8, 9, 10]), {"only": 1})
    return out, p, q, r, s


def un_too_few():
    a, b, c = [1, 2]
    return a, b, c


def un_too_many():
    a, b = (1, 2, 3)
    return a, b


def un_non_iterable():
    a, b = 5
    return a, b


def un_star_too_few():
    a, b, *c, d = "ab"
    return a, b, c, d


def un_error_messages():
    msgs = []
    for src in ([1], [1, 2, 3, 4], None, "abc", iter([1, 2, 3]), {1: 2, 3: 4}):
        try:
            x, y = src
            msgs.append(("ok", x, y))
        except (ValueError, TypeError) as e:
            msgs.append((type(e).__name__, str(e)))
    return msgs


def un_from_iterators():
    a, b, c = (x * 2 for x in range(3))
    d, e = {"k1": 1, "k2": 2}
    f, g = {"k1": 1, "k2": 2}.items()
    h, *i = iter(range(4))
    return a, b, c, d, e, f, g, h, i


def _collect(*args, **kwargs):
    return args, kwargs


def un_star_calls():
    args = [1, 2]
    kw = {"x": 1}
    return [_collect(*args), _collect(0, *args, 3, *"ab"), _collect(**kw, y=2),
            _collect(*args, **kw, **{"z": 3}), _collect(*range(2), *(), **{}),
            _two(*[1], **{"b": 2, "c": 5})]


def un_displays():
    a, b = [1, 2], (3, 4)
    d1, d2 = {"x": 1, "y": 2}, {"y": 20, "z": 30}
    return ([*a, *b, 5], (*a, *"cd"), {*a, *b}, {**d1, **d2, "w": 0}, {"y": -1, **d1},
            [*range(3)], (*a,), [*{"k": 1}])


def un_call_star_errors():
    msgs = []
    attempts = [lambda: _collect(*5), lambda: _collect(**[1]), lambda: _collect(**{1: 2}),
                lambda: _collect(x=1, **{"x": 2}), lambda: _two(1, b=2, **{"b": 3}),
                lambda: [*None], lambda: {**[1, 2]}]
    for thunk in attempts:
        try:
            msgs.append(("ok", thunk()))
        except TypeError as e:
            msgs.append(str(e))
    return msgs


def un_duplicate_kw_escapes():
    return _collect(a=1, **{"a": 2})


def un_evaluation_order():
    log = []

    class Obj:
        pass
    o = Obj()
    o.x, o.y = 1, 2
    o.x, o.y = o.y, o.x
    lst = [0, 1, 2]
    i = 0
    i, lst[i] = 2, "set"      # i is assigned first, then lst[2]

    def t(v):
        log.append(v)
        return v
    first, second = ["a"], ["b"]
    t(first)[0], t(second)[0] = t(1), t(2)
    return vars(o), lst, log, first, second, i


def un_star_in_for_and_with_nesting():
    out = []
    for head, *tail in ["abc", "de", "f"]:
        out.append((head, tail))
    for (a, *b), c in [((1, 2, 3), 4)]:
        out.append((a, b, c))
    return out


# =========================================================================================
# f-strings
# =========================================================================================

class _Fancy:
    def __init__(self, v):
        self.v = v

    def __repr__(self):
        return f"Fancy<{self.v}>"

    def __str__(self):
        return f"fancy {self.v}"

    def __format__(self, spec):
        return f"[{spec or 'nospec'}:{self.v}]"


def fs_conversions():
    s = "café"
    f = _Fancy(1)
    return [f"{s!r}", f"{s!s}", f"{s!a}", f"{f}", f"{f!r}", f"{f!s}", f"{f:abc}", f"{f!r:>12}",
            f"{'quoted'!r:^10}", f"{ {'a': 1}['a'] }"]


def fs_format_specs():
    x = 3.14159265
    w, p = 10, 3
    n = 1234567
    return [f"{x:{w}.{p}f}|", f"{x:<{w}.2e}|", f"{n:,}", f"{n:_x}", f"{255:#010b}", f"{0.25:%}",
            f"{-5:+05d}", f"{'s':*^7}", f"{n:>{w}}", f"{x:.{p}}", f"{True:d}", f"{12:c}"]


def fs_equals_specifier():
    x, name = 42, "magpy"
    f = _Fancy("eq")
    return [f"{x=}", f"{x = }", f"{name=!s}", f"{x=:>6}", f"{f=}", f"{f=!s}", f"{x * 2 = }",
            f"{name.upper()=}"]


def fs_nested_expressions():
    items = {"a": [1, 2], "b": []}
    return [f"{len(items)} keys: {', '.join(f'{k}={len(v)}' for k, v in items.items())}",
            f"{'yes' if items['b'] else 'no'}", f"{{literal}} {items['a'][-1]}",
            f"{3 + 4j}", f"{None!r} {b'x'}", f"{[1, 2]!s:>8}"]


def fs_format_error():
    v = "text"
    return f"{v:d}"


class _BadFormat:
    def __format__(self, spec):
        return 42


def fs_format_returns_non_str():
    return f"{_BadFormat()}"


def fs_format_builtin_and_method():
    import datetime
    d = datetime.date(2024, 2, 29)
    return [format(d, "%Y/%m/%d"), f"{d:%A %d %B}", "{0}-{1!r}-{k:>3}".format(1, "b", k=7),
            "%s=%05.1f %r" % ("v", 2.345, "x"), format(_Fancy(3), "z")]


# =========================================================================================
# structural pattern matching
# =========================================================================================

class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Consts:
    LIMIT = 10
    NAME = "magpy"


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


class BadArgs:
    __match_args__ = ["x"]

    def __init__(self):
        self.x = 1


@dataclasses.dataclass
class Line:
    start: Point
    end: Point
    label: str = ""


def pm_literals():
    def classify(v):
        match v:
            case 0:
                return "zero"
            case 1.5:
                return "one-and-half"
            case "hi" | "hello":
                return "greeting"
            case None:
                return "none"
            case True:
                return "true"
            case -3:
                return "minus three"
            case b"raw":
                return "bytes"
            case 2 + 3j:
                return "complex"
            case _:
                return "other"
    return [classify(v) for v in (0, 1.5, "hi", "hello", None, True, 1, -3, b"raw", 2 + 3j, 0.0,
                                  False)]


def pm_capture_and_wildcard():
    def f(v):
        match v:
            case [x, _, _]:
                return ("triple", x)
            case other:
                return ("other", other)
    return [f([1, 2, 3]), f("abc"), f((9, 8, 7)), f(5)]


def pm_value_patterns():
    def f(v):
        match v:
            case Color.RED:
                return "red"
            case Consts.LIMIT:
                return "limit"
            case Consts.NAME:
                return "name"
            case Color():
                return "some color"
            case _:
                return "?"
    return [f(Color.RED), f(Color.GREEN), f(10), f("magpy"), f(1)]


def pm_sequence_patterns():
    def f(v):
        match v:
            case []:
                return "empty"
            case [x]:
                return ("one", x)
            case [1, *rest]:
                return ("starts with 1", rest)
            case [*init, "end"]:
                return ("ends", init)
            case [a, [b, c], *_]:
                return ("nested", a, b, c)
            case (x, y):
                return ("pair", x, y)
            case _:
                return "nomatch"
    return [f([]), f([7]), f([1, 2, 3]), f(("a", "end")), f([0, [5, 6], 9]), f((3, 4)),
            f("ab"), f(range(2)), f({1: 2}), f(iter([1]))]


def pm_mapping_patterns():
    def f(v):
        match v:
            case {"type": "point", "x": x, "y": y}:
                return ("point", x, y)
            case {"type": "meta", **rest}:
                return ("meta", rest)
            case {1: one, Consts.NAME: n}:
                return ("keys", one, n)
            case {}:
                return "any mapping"
            case _:
                return "not a mapping"
    return [f({"type": "point", "x": 1, "y": 2, "z": 3}), f({"type": "meta", "a": 1, "b": 2}),
            f({1: "I", "magpy": "M"}), f({"type": "point", "x": 1}), f([("type", "point")]),
            f(collections.OrderedDict(type="meta"))]


def pm_class_positional():
    def f(v):
        match v:
            case Point(0, 0):
                return "origin"
            case Point(x, 0):
                return ("on x axis", x)
            case Point(x, y=5):
                return ("y is five", x)
            case Point(x, y):
                return ("point", x, y)
    return [f(Point(0, 0)), f(Point(3, 0)), f(Point(1, 5)), f(Point(2, 2)), f((0, 0))]


def pm_class_keyword():
    class Cfg:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    def f(v):
        match v:
            case Cfg(mode="fast", level=lv):
                return ("fast", lv)
            case Cfg(mode=m, missing=_):
                return ("has missing", m)
            case Cfg(mode=m):
                return ("mode", m)
            case object(real=r, imag=i):
                return ("complex-like", r, i)
    return [f(Cfg(mode="fast", level=3)), f(Cfg(mode="slow")), f(Cfg(mode="x", missing=0)),
            f(3 + 4j), f("nothing")]


def pm_builtin_types():
    def f(v):
        match v:
            case bool(b):
                return ("bool", b)
            case int(i) if i > 100:
                return ("big int", i)
            case int(i):
                return ("int", i)
            case float(x) | complex(real=x):
                return ("number", x)
            case str(s):
                return ("str", s.upper())
            case list([first, *_]):
                return ("list", first)
            case dict({"k": val}):
                return ("dict", val)
            case tuple():
                return "tuple"
            case _:
                return "?"
    return [f(True), f(500), f(5), f(2.5), f(1j), f("s"), f([9, 8]), f({"k": "v"}), f(()),
            f(set())]


def pm_or_and_as():
    def f(v):
        match v:
            case (0 | 1 | 2) as small:
                return ("small", small)
            case [("a" | "b") as letter, *_] as whole:
                return ("letter", letter, whole)
            case Point(x=0 | 1 as px) | Point(y=0 | 1 as px):
                return ("near axis", px)
            case str() as s if len(s) > 3:
                return ("long", s)
            case _:
                return "?"
    return [f(1), f(["b", 2]), f(Point(1, 9)), f(Point(9, 0)), f("long str"), f("no"), f(7)]


def pm_guards():
    log = []

    def check_guard(v):
        log.append(("guard", v))
        return v > 2

    def f(v):
        match v:
            case [x, y] if check_guard(x):
                return ("guarded", x, y)
            case [x, y]:
                return ("unguarded", x, y)
            case _:
                return "?"
    res = [f([5, 1]), f([1, 5]), f("ab")]
    match [1, 2]:
        case [a, b] if a > b:
            leaked = "matched"
        case _:
            leaked = ("guard failed, bindings kept", a, b)
    return res, log, leaked


def pm_dataclass():
    def f(v):
        match v:
            case Line(Point(0, 0), end, label=""):
                return ("from origin", end.x, end.y)
            case Line(start=Point(x1, y1), end=Point(x2, y2), label=lbl) if lbl:
                return ("labelled", x1 + x2, y1 + y2, lbl)
            case Line():
                return "some line"
    return [f(Line(Point(0, 0), Point(3, 4))), f(Line(Point(1, 1), Point(2, 2), "L")),
            f(Line(Point(1, 1), Point(2, 2))), Line.__match_args__]


def pm_too_many_positional():
    match Point(1, 2):
        case Point(a, b, c):
            return a, b, c


def pm_no_match_args_positional():
    match _Plain():
        case _Plain(x):
            return x


def pm_non_special_builtin_positional():
    match 1j:
        case complex(c):
            return c


def pm_builtin_too_many():
    match 5:
        case int(a, b):
            return a, b


def pm_match_args_not_tuple():
    match BadArgs():
        case BadArgs(x):
            return x


def pm_called_non_class():
    fn = len

    class NS:
        f = fn
    match [1]:
        case NS.f():
            return "?"


def pm_duplicate_attribute():
    match Point(1, 2):
        case Point(a, x=b):
            return a, b


def pm_no_case_matches():
    result = "unset"
    for v in (1, 2):
        match v:
            case 2:
                result = "two"
            case 3:
                result = "three"
    match "fallthrough":
        case "nothing":
            result = "changed"
    return result


def pm_expression_evaluator():
    def ev(node):
        match node:
            case ("num", n):
                return n
            case ("neg", x):
                return -ev(x)
            case ("add" | "mul" as op, lhs, rhs):
                a, b = ev(lhs), ev(rhs)
                return a + b if op == "add" else a * b
            case _:
                raise ValueError(f"bad node {node!r}")
    expr = ("add", ("num", 2), ("mul", ("neg", ("num", 3)), ("num", 4)))
    try:
        ev(("div", 1, 2))
    except ValueError as e:
        err = str(e)
    return ev(expr), err


def pm_custom_mapping():
    log = []

    class Lazy(collections.abc.Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            log.append(("getitem", k))
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    def f(m):
        match m:
            case {"a": 1, "b": b}:
                return ("ab", b)
            case {"a": a}:
                return ("a", a)
    return [f(Lazy({"a": 1, "b": 2})), f(Lazy({"a": 5}))], log


# =========================================================================================
# walrus
# =========================================================================================

def wa_while_condition():
    chunks = iter(["ab", "cd", "", "never"])
    out = []
    while (chunk := next(chunks)):
        out.append(chunk.upper())
    return out, chunk


def wa_comprehension_binding():
    data = [3, 8, 1, 9]
    big = [y for x in data if (y := x * 2) > 5]
    return big, y


def wa_any_witness():
    xs = [1, 4, 7, 10]
    if any((hit := x) > 5 for x in xs):
        return "found", hit
    return "none", None


def wa_if_chain_and_nested():
    import re
    results = []
    for s in ("key=value", "number 42", "plain"):
        if (m := re.match(r"(\w+)=(\w+)", s)) is not None:
            results.append(("kv", m.group(1), m.group(2)))
        elif (n := re.search(r"\d+", s)):
            results.append(("num", int(n.group())))
        else:
            results.append(("plain", (length := len(s)), length + 1))
    return results


# =========================================================================================
# lambdas, decorators, recursion
# =========================================================================================

def lr_lambda_defaults_closures():
    base = 10
    add = lambda x, y=base: x + y  # noqa: E731
    base = 20
    get_base = lambda: base  # noqa: E731
    kw = lambda *a, k=1, **rest: (a, k, rest)  # noqa: E731
    return add(1), add(1, 2), get_base(), kw(1, 2, k=3, z=4), (lambda: (lambda: base * 2)())()


def lr_sorted_key_lambda():
    people = [("ann", 31), ("bob", 25), ("cid", 31), ("dee", 19)]
    return (sorted(people, key=lambda p: (-p[1], p[0])), max(people, key=lambda p: p[1]),
            list(map(lambda p: p[0].title(), people)), list(filter(lambda p: p[1] > 20, people)))


def lr_decorator_with_args():
    calls = []

    def repeat(times, tag="r"):
        def deco(fn):
            def wrapper(*a, **k):
                calls.append((tag, fn.__name__))
                return [fn(*a, **k) for _ in range(times)]
            return wrapper
        return deco

    @repeat(3, tag="x")
    def square(v):
        return v * v
    return square(4), calls, square.__name__


def lr_stacked_decorators():
    order = []

    def deco(name):
        order.append(("make", name))

        def apply(fn):
            order.append(("apply", name))

            def wrapper(x):
                order.append(("call", name))
                return f"{name}({fn(x)})"
            return wrapper
        return apply

    @deco("outer")
    @deco("inner")
    def f(x):
        return x
    return f("v"), order


def lr_functools_wraps():
    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            """wrapper doc"""
            return ("logged", fn(*a, **k))
        return wrapper

    @logged
    def documented(a, b=2):
        """The real docstring."""
        return a + b
    return (documented(1), documented.__name__, documented.__doc__,
            documented.__wrapped__(5), documented.__qualname__.split(".")[-1])


_REGISTRY = []


def _reset_registry():
    _REGISTRY.clear()


def _observe_registry():
    return list(_REGISTRY)


def register(cls):
    _REGISTRY.append(cls.__name__)
    cls.registered = True
    return cls


def lr_class_decorator():
    @register
    class A:
        pass

    def add_repr(cls):
        cls.__repr__ = lambda self: f"<{type(self).__name__} {vars(self)}>"
        return cls

    @register
    @add_repr
    class B:
        def __init__(self):
            self.v = 1
    return repr(B()), A.registered, B.registered


def lr_method_decorators():
    def trace(fn):
        def wrapper(self, *a):
            self.log.append(fn.__name__)
            return fn(self, *a)
        return wrapper

    class Svc:
        def __init__(self):
            self.log = []

        @trace
        def ping(self):
            return "pong"

        @trace
        def echo(self, v):
            return v
    s = Svc()
    return s.ping(), s.echo(3), s.log


def lr_lru_cache():
    calls = []

    @functools.lru_cache(maxsize=None)
    def fib(n):
        calls.append(n)
        return n if n < 2 else fib(n - 1) + fib(n - 2)
    return fib(60), len(calls), fib.cache_info().hits


def lr_partial_and_reduce():
    def power(base, exp):
        return base ** exp
    square = functools.partial(power, exp=2)
    cube_of_2 = functools.partial(power, 2)
    return square(7), cube_of_2(3), functools.reduce(lambda a, b: a * 10 + b, [1, 2, 3], 0)


def lr_mutable_default():
    def append_to(v, acc=[]):
        acc.append(v)
        return acc
    append_to(1)
    return append_to(2), append_to.__defaults__


def lr_function_attributes():
    def f(a: int, b: "str" = "x", *args, c: float = 1.0, **kw) -> list:
        """doc"""
        return a
    f.custom = "attr"
    return (f.__name__, f.__qualname__, f.__defaults__, f.__kwdefaults__, f.__annotations__,
            f.__code__.co_varnames, f.__code__.co_argcount, f.__code__.co_kwonlyargcount,
            f.__doc__, f.custom, f.__module__)


def lr_signature_binding():
    def f(a, b=2, /, c=3, *args, d, e=5, **kw):
        return a, b, c, args, d, e, kw
    return [f(1, d=4), f(1, 2, 3, 4, 5, d=0, z=9), f(*"xy", c="C", d="D", **{"e": "E", "b": "kwb"}),
            f(1, **{"d": 1, "c": 7})]


def lr_factorial(n):
    return 1 if n <= 1 else n * lr_factorial(n - 1)


def _is_even(n):
    return True if n == 0 else _is_odd(n - 1)


def _is_odd(n):
    return False if n == 0 else _is_even(n - 1)


def lr_mutual_recursion():
    return _is_even(200), _is_odd(199), _is_even(7)


def lr_recursive_walk():
    data = {"a": [1, {"b": 2, "c": [3, 4, (5, 6)]}], "d": {"e": {"f": 7}}, "g": "str"}

    def walk(obj, path=()):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from walk(v, path + (k,))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                yield from walk(v, path + (i,))
        else:
            yield path, obj

    def total(obj):
        if isinstance(obj, int):
            return obj
        if isinstance(obj, dict):
            return sum(total(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(map(total, obj))
        return 0
    return list(walk(data)), total(data)


def lr_deep_recursion():
    def depth(n):
        if n == 0:
            return [0]
        r = depth(n - 1)
        r.append(n)
        return r
    return len(depth(200)), depth(200)[-1]


def lr_recursion_with_exception():
    def dive(n):
        if n == 0:
            raise ValueError("bottom")
        try:
            return dive(n - 1)
        finally:
            trail.append(n)
    trail = []
    try:
        dive(50)
    except ValueError as e:
        return str(e), trail[:3], len(trail)


# =========================================================================================
# classes defined inside functions
# =========================================================================================

def cls_methods_basic():
    class Account:
        interest = 0.5

        def __init__(self, owner, balance=0):
            self.owner = owner
            self.balance = balance

        def deposit(self, amount):
            if amount <= 0:
                raise ValueError(f"bad amount {amount}")
            self.balance += amount
            return self

        def __repr__(self):
            return f"Account({self.owner!r}, {self.balance})"
    a = Account("ann").deposit(10).deposit(5)
    try:
        a.deposit(-1)
    except ValueError as e:
        err = str(e)
    Account.interest = 1.5
    return repr(a), err, a.interest, vars(a), Account.__name__, Account.__qualname__


def cls_super_zero_arg():
    class Base:
        def __init__(self, v):
            self.v = v

        def describe(self):
            return f"Base({self.v})"

    class Child(Base):
        def __init__(self, v, w):
            super().__init__(v * 2)
            self.w = w

        def describe(self):
            return "Child+" + super().describe()
    c = Child(1, 2)
    return c.describe(), vars(c)


def cls_super_mro_diamond():
    trail = []

    class A:
        def hello(self):
            trail.append("A")
            return ["A"]

    class B(A):
        def hello(self):
            trail.append("B")
            return ["B"] + super().hello()

    class C(A):
        def hello(self):
            trail.append("C")
            return ["C"] + super().hello()

    class D(B, C):
        def hello(self):
            trail.append("D")
            return ["D"] + super().hello()
    return D().hello(), [k.__name__ for k in D.__mro__], trail


def cls_super_nested_class():
    class Outer:
        class Inner(dict):
            def __setitem__(self, k, v):
                super().__setitem__(k, v * 2)

        def make(self):
            d = self.Inner()
            d["a"] = 5
            return d

    class Sub(Outer):
        def make(self):
            d = super().make()
            d["b"] = 1
            return d
    return dict(Sub().make()), Outer.Inner.__qualname__.split(".", 1)[1]


def cls_super_classmethod_and_explicit():
    class A:
        @classmethod
        def create(cls):
            return ("A.create", cls.__name__)

    class B(A):
        @classmethod
        def create(cls):
            return ("B.create",) + super().create()

        def explicit(self):
            return super(B, self).create()
    return B.create(), B().explicit()


def cls_super_no_args_error():
    def not_a_method():
        return super()
    return not_a_method()


def cls_dunder_class_reference():
    class K:
        def which(self):
            return __class__

        def name(self):
            return __class__.__name__

    class Sub(K):
        pass
    s = Sub()
    return s.which() is K, type(s) is Sub, s.name(), K.which.__code__.co_freevars


def cls_class_vs_instance_attrs():
    class Counter:
        count = 0
        shared = []

        def __init__(self):
            Counter.count += 1
            self.count = Counter.count * 10
            self.shared.append(self.count)
    a, b = Counter(), Counter()
    del a.count
    return a.count, b.count, Counter.count, Counter.shared, "count" in vars(b)


def cls_metaclass_full():
    log = []

    class Meta(type):
        @classmethod
        def __prepare__(mcs, name, bases, **kw):
            log.append(("prepare", name, kw))
            return {"injected": 42}

        def __new__(mcs, name, bases, ns, **kw):
            log.append(("new", name, sorted(k for k in ns if not k.startswith("__"))))
            cls = super().__new__(mcs, name, bases, ns)
            cls.tag = kw.get("tag")
            return cls

        def __init__(cls, name, bases, ns, **kw):
            super().__init__(name, bases, ns)
            log.append(("init", name))

        def __call__(cls, *a, **k):
            log.append(("call", cls.__name__, a))
            return super().__call__(*a, **k)

    class Base(metaclass=Meta, tag="t1"):
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v + self.injected

    class Derived(Base):
        extra = 1
    obj = Base(1)
    d = Derived(2)
    return log, obj.get(), d.get(), Base.tag, Derived.tag, type(Derived).__name__


def cls_metaclass_prepare_ordering():
    class OrderedMeta(type):
        @classmethod
        def __prepare__(mcs, name, bases):
            return collections.OrderedDict()

        def __new__(mcs, name, bases, ns):
            cls = super().__new__(mcs, name, bases, dict(ns))
            cls.order = [k for k in ns if not k.startswith("__")]
            return cls

    class Fields(metaclass=OrderedMeta):
        zeta = 1
        alpha = 2

        def mid(self):
            pass
        beta = 3
    return Fields.order


def cls_init_subclass():
    registry = []

    class Plugin:
        def __init_subclass__(cls, /, key=None, **kw):
            super().__init_subclass__(**kw)
            registry.append((cls.__name__, key))

    class A(Plugin, key="a"):
        pass

    class B(A):
        pass
    try:
        class C(Plugin, bogus=1):
            pass
    except TypeError as e:
        err = str(e)
    return registry, err


def cls_set_name_descriptor():
    class Field:
        def __set_name__(self, owner, name):
            self.owner, self.name = owner.__name__, name

        def __get__(self, obj, objtype=None):
            if obj is None:
                return self
            return obj.__dict__.get("_" + self.name, "unset")

        def __set__(self, obj, value):
            obj.__dict__["_" + self.name] = value * 2

    class Rec:
        a = Field()
        b = Field()
    r = Rec()
    r.a = 5
    return r.a, r.b, Rec.a.name, Rec.b.owner, sorted(vars(r))


def cls_property():
    class Temp:
        def __init__(self):
            self._c = 0

        @property
        def celsius(self):
            return self._c

        @celsius.setter
        def celsius(self, v):
            if v < -273:
                raise ValueError("too cold")
            self._c = v

        @celsius.deleter
        def celsius(self):
            self._c = None

        @property
        def fahrenheit(self):
            return self._c * 9 / 5 + 32
    t = Temp()
    t.celsius = 100
    out = [t.celsius, t.fahrenheit]
    for bad in (lambda: setattr(t, "fahrenheit", 1), lambda: setattr(t, "celsius", -300)):
        try:
            bad()
        except (AttributeError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
    del t.celsius
    out.append(t._c)
    return out


def cls_classmethod_staticmethod():
    class Shape:
        sides = 0

        def __init__(self, name):
            self.name = name

        @classmethod
        def make(cls, *a):
            return cls(*a)

        @staticmethod
        def area_unit(x):
            return x * x

        @classmethod
        def describe(cls):
            return f"{cls.__name__} with {cls.sides} sides"

    class Square(Shape):
        sides = 4
    sq = Square.make("sq")
    return (type(sq).__name__, sq.name, Square.area_unit(3), sq.area_unit(4), Square.describe(),
            sq.describe(), Shape.describe())


def cls_slots():
    class P:
        __slots__ = ("x", "y")

        def __init__(self, x):
            self.x = x
    p = P(1)
    out = [p.x, hasattr(p, "__dict__"), P.__slots__]
    for thunk in (lambda: setattr(p, "z", 3), lambda: p.y):
        try:
            thunk()
        except AttributeError as e:
            out.append(str(e))
    p.y = 2
    out.append((p.x, p.y))
    return out


def cls_dataclass():
    @dataclasses.dataclass(order=True)
    class Item:
        price: float
        name: str = "unnamed"
        tags: list = dataclasses.field(default_factory=list, compare=False)

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        x: int
    a, b = Item(2.5, "b"), Item(1.0)
    a.tags.append("t")
    f = Frozen(1)
    try:
        f.x = 2
    except dataclasses.FrozenInstanceError as e:
        err = (type(e).__name__, str(e))
    return (repr(a), repr(b), a > b, sorted([a, b])[0].name, a == Item(2.5, "b", ["other"]),
            dataclasses.asdict(a), [fl.name for fl in dataclasses.fields(Item)], err, hash(f) == hash(Frozen(1)))


def cls_dataclass_post_init_and_repr():
    @dataclasses.dataclass
    class Range:
        lo: int
        hi: int
        size: int = dataclasses.field(init=False)

        def __post_init__(self):
            if self.lo > self.hi:
                raise ValueError(f"lo {self.lo} > hi {self.hi}")
            self.size = self.hi - self.lo
    r = Range(2, 9)
    try:
        Range(5, 1)
    except ValueError as e:
        err = str(e)
    try:
        Range(1)
    except TypeError as e:
        err2 = str(e)
    return r.size, repr(r), err, err2, dataclasses.replace(r, hi=20).size


def cls_getattr_hooks():
    log = []

    class Proxy:
        def __init__(self, target):
            object.__setattr__(self, "_target", target)

        def __getattr__(self, name):
            log.append(("getattr", name))
            if name.startswith("bad"):
                raise AttributeError(f"no {name} here")
            return getattr(self._target, name)

        def __setattr__(self, name, value):
            log.append(("setattr", name))
            setattr(self._target, name, value)

    class Target:
        def __init__(self):
            self.real = 1
    t = Target()
    p = Proxy(t)
    p.made = 2
    out = [p.real, p.made, hasattr(p, "bad_thing"), getattr(p, "bad_x", "dflt")]
    try:
        p.bad_y
    except AttributeError as e:
        out.append(str(e))
    return out, log, vars(t)


def cls_container_protocols():
    class Deck:
        def __init__(self, cards):
            self.cards = list(cards)

        def __len__(self):
            return len(self.cards)

        def __getitem__(self, i):
            if isinstance(i, slice):
                return Deck(self.cards[i])
            return self.cards[i]

        def __setitem__(self, i, v):
            self.cards[i] = v

        def __delitem__(self, i):
            del self.cards[i]

        def __iter__(self):
            return iter(self.cards)

        def __reversed__(self):
            return iter(self.cards[::-1])

        def __call__(self, n):
            return self.cards[:n]
    d = Deck("abcdef")
    d[0] = "A"
    del d[1]
    return (len(d), d[1:3].cards, d[-1], list(reversed(d)), d(2), "c" in d, [c for c in d],
            d[::2].cards)


def cls_hash_eq():
    class Key:
        def __init__(self, k):
            self.k = k

        def __eq__(self, other):
            return isinstance(other, Key) and self.k.lower() == other.k.lower()

        def __hash__(self):
            return hash(self.k.lower())

    class NoHash:
        def __eq__(self, other):
            return True
    d = {Key("A"): 1}
    d[Key("a")] = 2
    try:
        {NoHash(): 1}
    except TypeError as e:
        err = str(e)
    return len(d), list(d.values()), Key("X") in {Key("x")}, err


def cls_abstract():
    import abc

    class Base(abc.ABC):
        @abc.abstractmethod
        def run(self):
            ...

        @abc.abstractmethod
        def stop(self):
            ...

    class Half(Base):
        def run(self):
            return "run"

    class Full(Half):
        def stop(self):
            return "stop"
    try:
        Half()
    except TypeError as e:
        err = str(e)
    return err, Full().run(), Full().stop(), isinstance(Full(), Base)


def cls_enum_and_namedtuple():
    class Suit(enum.Enum):
        HEARTS = "h"
        SPADES = "s"

    class Flag(enum.IntFlag):
        R = 4
        W = 2
    Pt = collections.namedtuple("Pt", "x y")
    p = Pt(1, y=2)
    return (Suit("h").name, [s.value for s in Suit], Suit.SPADES is Suit["SPADES"],
            int(Flag.R | Flag.W), p, p._replace(x=9), p._asdict(), p.x + p[1])


def cls_body_executes_code():
    class Table:
        squares = {}
        for i in range(4):
            squares[i] = i * i
        del i
        if len(squares) > 3:
            big = True
        else:
            big = False
        doubled = list(map(lambda v: v * 2, squares.values()))
    return Table.squares, Table.big, Table.doubled, hasattr(Table, "i")


def cls_annotations_and_qualname():
    class Ann:
        a: int
        b: str = "x"

        def m(self) -> None:
            pass
    return (Ann.__annotations__, Ann.b, hasattr(Ann, "a"), Ann.m.__qualname__.split(".")[-2:],
            Ann.__module__, Ann.__doc__)


def cls_instance_of_local_class_returned():
    class Node:
        def __init__(self, v, nxt=None):
            self.v, self.nxt = v, nxt
    head = None
    for v in range(3):
        head = Node(v, head)
    return head


def cls_private_name_mangling():
    class Secret:
        def __init__(self):
            self.__hidden = "h"
            self._single = "s"

        def reveal(self):
            return self.__hidden

    class Sub(Secret):
        def peek(self):
            try:
                return self.__hidden
            except AttributeError as e:
                return str(e)
    s = Sub()
    return s.reveal(), s.peek(), sorted(vars(s)), s._Secret__hidden


def cls_super_in_comprehension_and_generator():
    class Base:
        def items(self):
            return [1, 2]

    class Child(Base):
        def gen(self):
            for v in super().items():
                yield v * 10

        def comp(self):
            return [super().items() for _ in range(1)]
    c = Child()
    try:
        c.comp()
    except (TypeError, RuntimeError) as e:
        err = (type(e).__name__, str(e))
    return list(c.gen()), err


def cls_global_from_class_body():
    class K:
        global _G_CREATED
        _G_CREATED = "set from class body"
        local_attr = _G_CREATED + "!"
    return K.local_attr, hasattr(K, "_G_CREATED")


def cls_metaclass_is_function():
    seen = []

    def meta(name, bases, ns):
        seen.append((name, bases, sorted(k for k in ns if not k.startswith("__"))))
        return {"built_by": "function", **{k: v for k, v in ns.items() if not k.startswith("__")}}

    class NotAClass(metaclass=meta):
        a = 1

        def m(self):
            return 2
    return type(NotAClass).__name__, NotAClass["built_by"], NotAClass["a"], seen


def cls_generic_mro_entries():
    import typing
    T = typing.TypeVar("T")

    class Box(typing.Generic[T]):
        def __init__(self, v: T):
            self.v = v

    class Marker:
        def __mro_entries__(self, bases):
            return (dict,)

    class FromMarker(Marker()):
        pass
    return ([k.__name__ for k in Box.__mro__], Box[int](3).v, Box.__orig_bases__ is not None,
            [k.__name__ for k in FromMarker.__mro__], FromMarker.__orig_bases__[0].__class__.__name__)


def cls_init_returns_value():
    class Weird:
        def __init__(self):
            return 42
    return Weird()


def cls_new_and_init_interplay():
    log = []

    class Singleton:
        _instance = None

        def __new__(cls, *args):
            log.append(("new", args))
            if cls._instance is None:
                cls._instance = super().__new__(cls)
            return cls._instance

        def __init__(self, v):
            log.append(("init", v))
            self.v = v

    class Other:
        def __new__(cls):
            return "not an instance"

        def __init__(self):
            log.append("never")
    a, b = Singleton(1), Singleton(2)
    return a is b, a.v, Other(), log


# =========================================================================================
# imports inside functions
# =========================================================================================

def im_import_module():
    import json
    import os
    return os.sep, os.path.join("a", "b"), json.dumps({"k": [1, 2]})


def im_import_as():
    import collections.abc as cabc
    import os.path
    import os.path as p
    return p.basename("/x/y.txt"), p is os.path, issubclass(list, cabc.Sequence)


def im_from_import():
    from collections import OrderedDict
    from collections import defaultdict as dd
    from math import floor, pi
    od = OrderedDict(a=1)
    od.move_to_end("a", last=False)
    d = dd(list)
    d["x"].append(1)
    return list(od.items()), dict(d), floor(pi * 100)


def im_exec_star():
    ns = {}
    exec("from math import *", ns)
    return ns["sqrt"](16.0), ns["pi"], "__builtins__" in ns, "_private" in ns, ns["floor"](2.7)


def im_missing_name():
    from collections import no_such_name  # noqa: F401
    return "unreachable"


def im_missing_module():
    import no_such_module_for_magpy_tests  # noqa: F401
    return "unreachable"


def im_missing_submodule():
    try:
        import os.not_a_submodule  # noqa: F401
    except ModuleNotFoundError as e:
        return type(e).__name__, str(e), e.name


def im_relative_import():
    from .. import differential
    from ..differential import same
    return differential.__name__, same([1], [1])


def im_submodule_binding():
    import xml.etree.ElementTree
    root = xml.etree.ElementTree.fromstring("<a><b>t</b></a>")
    return root.find("b").text, xml.etree.__name__


def im_importlib_and_dunder():
    import importlib
    mod = importlib.import_module("json.decoder")
    m2 = __import__("os.path", fromlist=["join"])
    return mod.__name__, m2.join("p", "q"), __name__


# =========================================================================================
# async
# =========================================================================================

async def _aval(x):
    await asyncio.sleep(0)
    return x * 2


def as_asyncio_run():
    async def main():
        a = await _aval(1)
        b = await _aval(a)
        return [a, b]
    return asyncio.run(main())


def as_asyncio_gather():
    log = []

    async def worker(name, n):
        for i in range(n):
            log.append((name, i))
            await asyncio.sleep(0)
        return name * n

    async def main():
        return await asyncio.gather(worker("a", 2), worker("b", 3), worker("c", 1))
    return asyncio.run(main()), log


def as_asyncio_exception():
    async def fails():
        await asyncio.sleep(0)
        raise KeyError("from coroutine")

    async def main():
        try:
            await fails()
        except KeyError as e:
            caught = str(e)
        await fails()
        return caught
    return asyncio.run(main())


def _drive(coro):
    """Run a coroutine whose awaits complete synchronously (or only yield None)."""
    try:
        while True:
            coro.send(None)
    except StopIteration as stop:
        return stop.value


class Ticket:
    def __init__(self, v):
        self.v = v

    def __await__(self):
        got = yield ("ticket", self.v)
        return (self.v, got)


def as_manual_drive_custom_awaitable():
    async def co():
        r1 = await Ticket(1)
        r2 = await Ticket(2)
        return [r1, r2]
    c = co()
    yielded = []
    try:
        y = c.send(None)
        while True:
            yielded.append(y)
            y = c.send(f"reply{len(yielded)}")
    except StopIteration as stop:
        return yielded, stop.value


def as_manual_drive_simple():
    async def add(a, b):
        return a + b

    async def outer():
        x = await add(1, 2)
        y = await add(x, 10)
        return x, y
    c = outer()
    try:
        c.send(None)
    except StopIteration as stop:
        return stop.value, c.cr_frame


def as_coroutine_throw_close():
    log = []

    async def co():
        try:
            await Ticket("w")
        except ValueError as e:
            log.append(("caught", str(e)))
            await Ticket("x")
        finally:
            log.append("finally")
    c = co()
    first = c.send(None)
    second = c.throw(ValueError("into coro"))
    c.close()
    return first, second, log


class AsyncCM:
    def __init__(self, log, suppress=False):
        self.log, self.suppress = log, suppress

    async def __aenter__(self):
        self.log.append("aenter")
        return "resource"

    async def __aexit__(self, et, ev, tb):
        self.log.append(("aexit", et.__name__ if et else None))
        return self.suppress


def as_async_with(log):
    async def main():
        async with AsyncCM(log) as r:
            log.append(("body", r))
        async with AsyncCM(log, suppress=True):
            raise KeyError("suppressed")
        return "done"
    return _drive(main())


def as_async_with_not_cm():
    async def main():
        async with 5:
            pass
    return _drive(main())


class ACount:
    def __init__(self, n):
        self.n = n
        self.i = 0

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.i >= self.n:
            raise StopAsyncIteration
        self.i += 1
        return self.i


def as_async_for():
    async def main():
        out = []
        async for v in ACount(4):
            if v == 2:
                continue
            out.append(v)
        else:
            out.append("else")
        async for v in ACount(10):
            if v > 2:
                break
        return out, v
    return _drive(main())


def as_async_generator_iteration():
    async def agen(n):
        for i in range(n):
            await Ticket_none()
            yield i * i

    async def main():
        res = [v async for v in agen(4)]
        res2 = [v async for v in agen(5) if v % 2]
        total = 0
        async for v in agen(3):
            total += v
        return res, res2, total
    return asyncio.run(main())


class Ticket_none:
    def __await__(self):
        yield
        return None


def as_async_generator_methods():
    log = []

    async def agen():
        try:
            x = yield "first"
            log.append(("sent", x))
            try:
                yield "second"
            except ValueError as e:
                log.append(("thrown", str(e)))
                yield "after-throw"
            yield "third"
        finally:
            log.append("agen finally")

    async def main():
        g = agen()
        out = [await g.__anext__(), await g.asend("hello"), await g.athrow(ValueError("bad")),
               await g.asend(None)]
        await g.aclose()
        try:
            await g.__anext__()
        except StopAsyncIteration:
            out.append("exhausted")
        return out
    return _drive(main()), log


def as_await_non_awaitable():
    async def main():
        await 5
    c = main()
    try:
        c.send(None)
    except TypeError as e:
        return str(e)


def as_async_comprehension_and_await_in_comp():
    async def double(v):
        return v * 2

    async def main():
        return [await double(x) for x in range(3)], {k: await double(k) for k in "ab"}
    return _drive(main())


def as_async_exitstack():
    log = []

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            r = await stack.enter_async_context(AsyncCM(log))
            stack.callback(log.append, "sync-callback")
            log.append(("body", r))
        return log
    return asyncio.run(main())


def as_coroutine_attributes():
    async def sample():
        return 1
    c = sample()
    info = (type(c).__name__, c.__name__, c.cr_running, asyncio.iscoroutine(c))
    c.close()
    return info, asyncio.iscoroutinefunction(sample)


# =========================================================================================
# globals, builtins
# =========================================================================================

_GREETING = "hello"
_CONFIG = {"debug": False}


def gl_read_globals():
    return _GREETING.upper(), _CONFIG["debug"], len(_G_ITEMS)


def _reset_config():
    _CONFIG.clear()
    _CONFIG["debug"] = False


def _observe_config():
    return dict(_CONFIG)


def gl_mutate_global_container():
    _CONFIG["debug"] = True
    _CONFIG.setdefault("level", 3)
    return sorted(_CONFIG)


def gl_globals_contents():
    g = globals()
    return (g["__name__"], "gl_globals_contents" in g, g["_GREETING"], "sys" in g,
            g is globals(), "__builtins__" in g)


def gl_shadow_builtin_via_global():
    g = globals()
    before = abs(-3)
    g["abs"] = lambda x: ("shadowed", x)
    try:
        during = abs(-3)
    finally:
        del g["abs"]
    return before, during, abs(-4)


def gl_builtins_module_fallback():
    import builtins
    builtins.zz_magpy_injected = "from builtins"
    try:
        seen = zz_magpy_injected  # noqa: F821
    finally:
        del builtins.zz_magpy_injected
    try:
        zz_magpy_injected  # noqa: F821
    except NameError as e:
        gone = str(e)
    return seen, gone


def gl_local_shadows_builtin():
    def uses_before_assign():
        n = len([1, 2])
        len = 5  # noqa: F841
        return n
    list = [3, 1, 2]  # noqa: A001
    out = [sorted(list)]
    try:
        uses_before_assign()
    except UnboundLocalError as e:
        out.append(str(e))
    return out


def gl_undefined_global():
    global _NEVER_DEFINED_GLOBAL
    return _NEVER_DEFINED_GLOBAL  # noqa: F821


def gl_builtin_names_resolve():
    return (len("abc"), max(1, 5), isinstance(True, int), type(None).__name__,
            __builtins__ is not None, __name__, __doc__ is not None)


# =========================================================================================
# printing
# =========================================================================================

def pr_basic():
    print("hello", 1, 2.5, None, [1, "a"], {"k": (1,)})
    print()
    print("no newline", end="")
    print(" <- continued")
    return "printed"


def pr_sep_end_file():
    print("a", "b", "c", sep="|", end="!\n")
    print(*range(5), sep=", ", file=sys.stdout)
    print("x", sep="", end="", flush=True)
    print(file=sys.stdout)
    print(sep="-")


def pr_reprs_and_str():
    class R:
        def __repr__(self):
            return "R()"

        def __str__(self):
            return "str of R"
    print(R(), [R()], (R(),), f"{R()!r}")
    print(repr("quote's"), b"bytes", 3 + 0j, 1e-10, 10 ** 20, True)


def pr_before_exception():
    for i in range(3):
        print("line", i)
    raise ValueError("after printing")


def pr_stdout_write_and_writelines():
    n = sys.stdout.write("direct write\n")
    sys.stdout.writelines(["w1\n", "w2\n"])
    print("n =", n)


def pr_print_in_generator_and_callback():
    def g():
        for i in range(2):
            print("gen yields", i)
            yield i
    total = sum(g())
    list(map(print, ["m1", "m2"]))
    return total


# =========================================================================================
# frame introspection (locals / eval / exec / vars / dir)
# =========================================================================================

def in_locals(a, b=2):
    c = a + b
    snapshot = dict(locals())
    return sorted(snapshot.items())


def in_eval_implicit_scope():
    x, y = 3, 4
    return eval("x * y + len(_GREETING)"), eval("[i for i in range(x)]")


def in_exec_namespaces():
    ns = {"base": 10}
    exec("def f(v):\n    return v + base\nresult = f(5)", ns)
    loc = {}
    exec("z = 1 + 1", {}, loc)
    return ns["result"], loc


def in_vars_and_dir():
    alpha = 1
    beta = "b"
    return sorted(vars()), dir()


def in_exec_does_not_rebind_fast_locals():
    a = 1
    exec("a = 5; b = 6")
    snapshot = locals()
    return a, snapshot.get("b"), snapshot["a"]


def in_class_body_locals():
    class K:
        a = 1
        b = a + 1
        snapshot = sorted(k for k in locals() if not k.startswith("__"))
        names = sorted(k for k in vars() if not k.startswith("__"))
    return K.snapshot, K.names, K.__module__, K.__qualname__


def in_kwargs_entry(a, b=2, *rest, key="k", **extra):
    return a, b, rest, key, sorted(extra.items())


def in_getframe():
    frame = sys._getframe()
    return frame.f_code.co_name, frame.f_locals.get("frame") is frame


# =========================================================================================
# the case list
# =========================================================================================

CASES = [
    # control flow
    ("cf_if_chain", case(cf_if_chain, (-5, 0, 3, 10, 99))),
    ("cf_while_else", case(cf_while_else, (3, 20, 0))),
    ("cf_for_else_search", case(cf_for_else_search, ("a", "b", "c"), ("b", "z", "c"))),
    ("cf_nested_break_continue", case(cf_nested_break_continue)),
    ("cf_early_return", case(cf_early_return, ((1, 2), (3, -4), (-5,)))),
    ("cf_while_true_continue", case(cf_while_true_continue, 10)),
    ("cf_chained_compare", case(cf_chained_compare)),
    ("cf_and_or_operands", case(cf_and_or_operands)),
    ("cf_ternary", case(cf_ternary, (1, 2, 3, 9, 10))),
    ("cf_identity_membership", case(cf_identity_membership)),
    ("cf_membership_protocols", case(cf_membership_protocols)),
    ("cf_in_non_iterable", case(cf_in_non_iterable)),
    ("cf_truthiness_protocols", case(cf_truthiness_protocols)),
    ("cf_bad_bool", case(cf_bad_bool)),
    ("cf_compare_type_error", case(cf_compare_type_error)),
    ("cf_compare_lt_error", case(cf_compare_lt_error)),
    ("cf_dict_changed_during_iteration", case(cf_dict_changed_during_iteration)),
    ("cf_tuple_aug_assign", lambda: (cf_tuple_aug_assign, (([1], "x"),), {})),
    ("cf_loop_targets", case(cf_loop_targets)),
    ("cf_loop_var_after_loop", case(cf_loop_var_after_loop)),
    ("cf_arith_semantics", case(cf_arith_semantics)),
    ("cf_operator_overloading", case(cf_operator_overloading)),
    ("cf_iadd_list_aliasing", case(cf_iadd_list_aliasing)),
    ("cf_del_statements", case(cf_del_statements)),
    ("cf_slicing_semantics", case(cf_slicing_semantics)),
    ("cf_index_missing_classgetitem", case(cf_index_missing_classgetitem)),
    ("cf_star_subscript", case(cf_star_subscript)),
    # exceptions
    ("ex_else_finally_ok", case(ex_else_finally_ok)),
    ("ex_else_finally_err", case(ex_else_finally_err)),
    ("ex_try_finally_propagates", lambda: (ex_try_finally_propagates, ([],), {})),
    ("ex_finally_after_return", lambda: (ex_finally_after_return, ([],), {})),
    ("ex_return_in_finally_swallows", case(ex_return_in_finally_swallows)),
    ("ex_finally_overrides_return", case(ex_finally_overrides_return)),
    ("ex_except_tuple_and_order", case(ex_except_tuple_and_order)),
    ("ex_except_first_match_wins", case(ex_except_first_match_wins)),
    ("ex_except_name_unbound", case(ex_except_name_unbound)),
    ("ex_except_dynamic_class", case(ex_except_dynamic_class)),
    ("ex_except_non_exception_class", case(ex_except_non_exception_class)),
    ("ex_raise_non_exception", case(ex_raise_non_exception)),
    ("ex_raise_class_instantiates", case(ex_raise_class_instantiates)),
    ("ex_nested_handlers", case(ex_nested_handlers)),
    ("ex_bare_reraise", case(ex_bare_reraise)),
    ("ex_bare_raise_no_active", case(ex_bare_raise_no_active)),
    ("ex_reraise_after_inner_handler", case(ex_reraise_after_inner_handler)),
    ("ex_raise_from", case(ex_raise_from)),
    ("ex_raise_from_none", case(ex_raise_from_none)),
    ("ex_implicit_chaining", case(ex_implicit_chaining)),
    ("ex_chain_escapes", case(ex_chain_escapes)),
    ("ex_break_in_finally", case(ex_break_in_finally)),
    ("ex_continue_in_finally", case(ex_continue_in_finally)),
    ("ex_break_continue_in_try_finally", case(ex_break_continue_in_try_finally)),
    ("ex_error_in_finally_replaces", case(ex_error_in_finally_replaces)),
    ("ex_return_in_except", case(ex_return_in_except)),
    ("ex_sys_exc_info", case(ex_sys_exc_info)),
    ("ex_exc_info_in_callee", case(ex_exc_info_in_callee)),
    ("ex_exception_attributes", case(ex_exception_attributes)),
    ("ex_group_partial", case(ex_group_partial)),
    ("ex_group_unhandled_remainder", case(ex_group_unhandled_remainder)),
    ("ex_group_reraise", case(ex_group_reraise)),
    ("ex_group_naked_exception", case(ex_group_naked_exception)),
    ("ex_group_raise_new_in_star", case(ex_group_raise_new_in_star)),
    ("ex_group_nested_split", case(ex_group_nested_split)),
    ("ex_group_escapes", case(ex_group_escapes)),
    ("ex_assert_message", case(ex_assert_message, -5)),
    ("ex_assert_no_message", case(ex_assert_no_message)),
    ("ex_assert_passes_and_caught", case(ex_assert_passes_and_caught)),
    ("ex_custom_hierarchy", case(ex_custom_hierarchy)),
    ("ex_custom_escapes", case(ex_custom_escapes)),
    ("ex_custom_str_escapes", case(ex_custom_str_escapes)),
    ("ex_keyerror_messages", case(ex_keyerror_messages)),
    ("ex_keyerror_escapes", case(ex_keyerror_escapes)),
    ("ex_indexerror_messages", case(ex_indexerror_messages)),
    ("ex_indexerror_escapes", case(ex_indexerror_escapes)),
    ("ex_attributeerror_messages", case(ex_attributeerror_messages)),
    ("ex_attributeerror_escapes", case(ex_attributeerror_escapes)),
    ("ex_zerodivision_messages", case(ex_zerodivision_messages)),
    ("ex_zerodivision_escapes", case(ex_zerodivision_escapes, 7, 0)),
    ("ex_typeerror_operand_messages", case(ex_typeerror_operand_messages)),
    ("ex_call_binding_errors", case(ex_call_binding_errors)),
    ("ex_call_arity_escapes", case(ex_call_arity_escapes)),
    ("ex_unbound_local", case(ex_unbound_local)),
    ("ex_name_error", case(ex_name_error)),
    ("ex_free_var_unbound", case(ex_free_var_unbound)),
    ("ex_traceback_frames", case(ex_traceback_frames)),
    ("ex_exc_info_in_finally", case(ex_exc_info_in_finally)),
    ("ex_exception_through_native_callback", case(ex_exception_through_native_callback)),
    # with
    ("wi_basic", lambda: (wi_basic, ([],), {})),
    ("wi_suppress", lambda: (wi_suppress, ([],), {})),
    ("wi_no_suppress", lambda: (wi_no_suppress, ([],), {})),
    ("wi_nested_multi", lambda: (wi_nested_multi, ([],), {})),
    ("wi_return_inside", lambda: (wi_return_inside, ([],), {})),
    ("wi_break_continue_inside", lambda: (wi_break_continue_inside, ([],), {})),
    ("wi_enter_raises", lambda: (wi_enter_raises, ([],), {})),
    ("wi_exit_raises", case(wi_exit_raises)),
    ("wi_exit_truthy_nonbool", case(wi_exit_truthy_nonbool)),
    ("wi_not_a_cm", case(wi_not_a_cm)),
    ("wi_missing_exit", case(wi_missing_exit)),
    ("wi_contextmanager", lambda: (wi_contextmanager, ([],), {})),
    ("wi_contextmanager_reraises", lambda: (wi_contextmanager_reraises, ([],), {})),
    ("wi_contextlib_suppress", case(wi_contextlib_suppress)),
    ("wi_exitstack", lambda: (wi_exitstack, ([],), {})),
    ("wi_exitstack_suppresses", lambda: (wi_exitstack_suppresses, ([],), {})),
    ("wi_targets", case(wi_targets)),
    ("wi_redirect_stdout", case(wi_redirect_stdout)),
    # closures and cells
    ("cl_counter_factory", case(cl_counter_factory)),
    ("cl_nonlocal_two_levels", case(cl_nonlocal_two_levels)),
    ("cl_late_binding", case(cl_late_binding)),
    ("cl_default_arg_binding", case(cl_default_arg_binding)),
    ("cl_shared_cell", case(cl_shared_cell)),
    ("cl_cell_contents", case(cl_cell_contents)),
    ("cl_argument_captured", case(cl_argument_captured)),
    ("cl_class_body_sees_enclosing", case(cl_class_body_sees_enclosing)),
    ("cl_class_body_global_quirk", case(cl_class_body_global_quirk)),
    ("cl_del_local", case(cl_del_local)),
    ("cl_del_local_escapes", case(cl_del_local_escapes)),
    ("cl_del_cell", case(cl_del_cell)),
    ("cl_del_cell_escapes", case(cl_del_cell_escapes)),
    ("cl_recursive_inner", case(cl_recursive_inner)),
    ("cl_closure_sees_later_assignment", case(cl_closure_sees_later_assignment)),
    ("cl_nonlocal_in_loop_closures", case(cl_nonlocal_in_loop_closures)),
    ("cl_nonlocal_through_class", case(cl_nonlocal_through_class)),
    ("cl_global_write", case(cl_global_write)),
    ("cl_global_create", case(cl_global_create)),
    ("cl_global_in_nested", case(cl_global_in_nested)),
    ("cl_global_del", case(cl_global_del)),
    # comprehensions
    ("co_list_with_conditions", case(co_list_with_conditions, (1, 2, 3, 4, 5, -7, 9))),
    ("co_set_and_dict", case(co_set_and_dict)),
    ("co_genexp_consumers", case(co_genexp_consumers)),
    ("co_nested", case(co_nested)),
    ("co_closure_over_enclosing", case(co_closure_over_enclosing, 5)),
    ("co_lambdas_late_binding", case(co_lambdas_late_binding)),
    ("co_scope_isolation", case(co_scope_isolation)),
    ("co_class_body_scope_error", case(co_class_body_scope_error)),
    ("co_first_iterable_eager", case(co_first_iterable_eager)),
    ("co_error_inside_comprehension", case(co_error_inside_comprehension)),
    ("co_dict_duplicate_keys_order", case(co_dict_duplicate_keys_order)),
    ("co_mutating_outer_list", case(co_mutating_outer_list)),
    # generators
    ("ge_next_basic", case(ge_next_basic)),
    ("ge_send", case(ge_send)),
    ("ge_send_unstarted", case(ge_send_unstarted)),
    ("ge_throw_caught", case(ge_throw_caught)),
    ("ge_throw_uncaught", case(ge_throw_uncaught)),
    ("ge_throw_unstarted", case(ge_throw_unstarted)),
    ("ge_close_finally", case(ge_close_finally)),
    ("ge_close_ignored", case(ge_close_ignored)),
    ("ge_close_return_value", case(ge_close_return_value)),
    ("ge_yield_from_delegation", case(ge_yield_from_delegation)),
    ("ge_yield_from_iterables", case(ge_yield_from_iterables)),
    ("ge_yield_from_list_send", case(ge_yield_from_list_send)),
    ("ge_return_value_via_stopiteration", case(ge_return_value_via_stopiteration)),
    ("ge_stopiteration_inside", case(ge_stopiteration_inside)),
    ("ge_next_in_generator_exhausted", case(ge_next_in_generator_exhausted)),
    ("ge_consumed_by_list", case(ge_consumed_by_list)),
    ("ge_consumed_by_sum", case(ge_consumed_by_sum)),
    ("ge_consumed_by_zip", case(ge_consumed_by_zip)),
    ("ge_consumed_by_dict", case(ge_consumed_by_dict)),
    ("ge_consumed_by_join", case(ge_consumed_by_join)),
    ("ge_consumed_by_sorted_max", case(ge_consumed_by_sorted_max)),
    ("ge_infinite_islice", case(ge_infinite_islice)),
    ("ge_closure_generator", case(ge_closure_generator)),
    ("ge_try_finally_consumer_break", case(ge_try_finally_consumer_break)),
    ("ge_already_executing", case(ge_already_executing)),
    ("ge_pipeline", case(ge_pipeline)),
    ("ge_recursive_tree_walk", case(ge_recursive_tree_walk)),
    ("ge_generator_state_attrs", case(ge_generator_state_attrs)),
    ("ge_genexp_methods", case(ge_genexp_methods)),
    ("ge_with_inside_generator_closed", case(ge_with_inside_generator_closed)),
    ("ge_return_in_try_finally", case(ge_return_in_try_finally)),
    ("ge_yield_in_except_block", case(ge_yield_in_except_block)),
    # unpacking
    ("un_basic_and_swap", case(un_basic_and_swap)),
    ("un_starred", case(un_starred)),
    ("un_nested", case(un_nested)),
    ("un_too_few", case(un_too_few)),
    ("un_too_many", case(un_too_many)),
    ("un_non_iterable", case(un_non_iterable)),
    ("un_star_too_few", case(un_star_too_few)),
    ("un_error_messages", case(un_error_messages)),
    ("un_from_iterators", case(un_from_iterators)),
    ("un_star_calls", case(un_star_calls)),
    ("un_displays", case(un_displays)),
    ("un_call_star_errors", case(un_call_star_errors)),
    ("un_duplicate_kw_escapes", case(un_duplicate_kw_escapes)),
    ("un_evaluation_order", case(un_evaluation_order)),
    ("un_star_in_for_and_with_nesting", case(un_star_in_for_and_with_nesting)),
    # f-strings
    ("fs_conversions", case(fs_conversions)),
    ("fs_format_specs", case(fs_format_specs)),
    ("fs_equals_specifier", case(fs_equals_specifier)),
    ("fs_nested_expressions", case(fs_nested_expressions)),
    ("fs_format_error", case(fs_format_error)),
    ("fs_format_returns_non_str", case(fs_format_returns_non_str)),
    ("fs_format_builtin_and_method", case(fs_format_builtin_and_method)),
    # pattern matching
    ("pm_literals", case(pm_literals)),
    ("pm_capture_and_wildcard", case(pm_capture_and_wildcard)),
    ("pm_value_patterns", case(pm_value_patterns)),
    ("pm_sequence_patterns", case(pm_sequence_patterns)),
    ("pm_mapping_patterns", case(pm_mapping_patterns)),
    ("pm_class_positional", case(pm_class_positional)),
    ("pm_class_keyword", case(pm_class_keyword)),
    ("pm_builtin_types", case(pm_builtin_types)),
    ("pm_or_and_as", case(pm_or_and_as)),
    ("pm_guards", case(pm_guards)),
    ("pm_dataclass", case(pm_dataclass)),
    ("pm_too_many_positional", case(pm_too_many_positional)),
    ("pm_no_match_args_positional", case(pm_no_match_args_positional)),
    ("pm_builtin_too_many", case(pm_builtin_too_many)),
    ("pm_non_special_builtin_positional", case(pm_non_special_builtin_positional)),
    ("pm_match_args_not_tuple", case(pm_match_args_not_tuple)),
    ("pm_called_non_class", case(pm_called_non_class)),
    ("pm_duplicate_attribute", case(pm_duplicate_attribute)),
    ("pm_no_case_matches", case(pm_no_case_matches)),
    ("pm_expression_evaluator", case(pm_expression_evaluator)),
    ("pm_custom_mapping", case(pm_custom_mapping)),
    # walrus
    ("wa_while_condition", case(wa_while_condition)),
    ("wa_comprehension_binding", case(wa_comprehension_binding)),
    ("wa_any_witness", case(wa_any_witness)),
    ("wa_if_chain_and_nested", case(wa_if_chain_and_nested)),
    # lambdas, decorators, recursion
    ("lr_lambda_defaults_closures", case(lr_lambda_defaults_closures)),
    ("lr_sorted_key_lambda", case(lr_sorted_key_lambda)),
    ("lr_decorator_with_args", case(lr_decorator_with_args)),
    ("lr_stacked_decorators", case(lr_stacked_decorators)),
    ("lr_functools_wraps", case(lr_functools_wraps)),
    ("lr_class_decorator", case(lr_class_decorator)),
    ("lr_method_decorators", case(lr_method_decorators)),
    ("lr_lru_cache", case(lr_lru_cache)),
    ("lr_partial_and_reduce", case(lr_partial_and_reduce)),
    ("lr_mutable_default", case(lr_mutable_default)),
    ("lr_function_attributes", case(lr_function_attributes)),
    ("lr_signature_binding", case(lr_signature_binding)),
    ("lr_factorial", case(lr_factorial, 200)),
    ("lr_mutual_recursion", case(lr_mutual_recursion)),
    ("lr_recursive_walk", case(lr_recursive_walk)),
    ("lr_deep_recursion", case(lr_deep_recursion)),
    ("lr_recursion_with_exception", case(lr_recursion_with_exception)),
    # classes
    ("cls_methods_basic", case(cls_methods_basic)),
    ("cls_super_zero_arg", case(cls_super_zero_arg)),
    ("cls_super_mro_diamond", case(cls_super_mro_diamond)),
    ("cls_super_nested_class", case(cls_super_nested_class)),
    ("cls_super_classmethod_and_explicit", case(cls_super_classmethod_and_explicit)),
    ("cls_super_no_args_error", case(cls_super_no_args_error)),
    ("cls_dunder_class_reference", case(cls_dunder_class_reference)),
    ("cls_class_vs_instance_attrs", case(cls_class_vs_instance_attrs)),
    ("cls_metaclass_full", case(cls_metaclass_full)),
    ("cls_metaclass_prepare_ordering", case(cls_metaclass_prepare_ordering)),
    ("cls_init_subclass", case(cls_init_subclass)),
    ("cls_set_name_descriptor", case(cls_set_name_descriptor)),
    ("cls_property", case(cls_property)),
    ("cls_classmethod_staticmethod", case(cls_classmethod_staticmethod)),
    ("cls_slots", case(cls_slots)),
    ("cls_dataclass", case(cls_dataclass)),
    ("cls_dataclass_post_init_and_repr", case(cls_dataclass_post_init_and_repr)),
    ("cls_getattr_hooks", case(cls_getattr_hooks)),
    ("cls_container_protocols", case(cls_container_protocols)),
    ("cls_hash_eq", case(cls_hash_eq)),
    ("cls_abstract", case(cls_abstract)),
    ("cls_enum_and_namedtuple", case(cls_enum_and_namedtuple)),
    ("cls_body_executes_code", case(cls_body_executes_code)),
    ("cls_annotations_and_qualname", case(cls_annotations_and_qualname)),
    ("cls_instance_of_local_class_returned", case(cls_instance_of_local_class_returned)),
    ("cls_private_name_mangling", case(cls_private_name_mangling)),
    ("cls_super_in_comprehension_and_generator", case(cls_super_in_comprehension_and_generator)),
    ("cls_global_from_class_body", case(cls_global_from_class_body)),
    ("cls_metaclass_is_function", case(cls_metaclass_is_function)),
    ("cls_generic_mro_entries", case(cls_generic_mro_entries)),
    ("cls_init_returns_value", case(cls_init_returns_value)),
    ("cls_new_and_init_interplay", case(cls_new_and_init_interplay)),
    # imports
    ("im_import_module", case(im_import_module)),
    ("im_import_as", case(im_import_as)),
    ("im_from_import", case(im_from_import)),
    ("im_exec_star", case(im_exec_star)),
    ("im_missing_name", case(im_missing_name)),
    ("im_missing_module", case(im_missing_module)),
    ("im_missing_submodule", case(im_missing_submodule)),
    ("im_relative_import", case(im_relative_import)),
    ("im_submodule_binding", case(im_submodule_binding)),
    ("im_importlib_and_dunder", case(im_importlib_and_dunder)),
    # async
    ("as_asyncio_run", case(as_asyncio_run)),
    ("as_asyncio_gather", case(as_asyncio_gather)),
    ("as_asyncio_exception", case(as_asyncio_exception)),
    ("as_manual_drive_custom_awaitable", case(as_manual_drive_custom_awaitable)),
    ("as_manual_drive_simple", case(as_manual_drive_simple)),
    ("as_coroutine_throw_close", case(as_coroutine_throw_close)),
    ("as_async_with", lambda: (as_async_with, ([],), {})),
    ("as_async_with_not_cm", case(as_async_with_not_cm)),
    ("as_async_for", case(as_async_for)),
    ("as_async_generator_iteration", case(as_async_generator_iteration)),
    ("as_async_generator_methods", case(as_async_generator_methods)),
    ("as_await_non_awaitable", case(as_await_non_awaitable)),
    ("as_async_comprehension_and_await_in_comp", case(as_async_comprehension_and_await_in_comp)),
    ("as_async_exitstack", case(as_async_exitstack)),
    ("as_coroutine_attributes", case(as_coroutine_attributes)),
    # globals
    ("gl_read_globals", case(gl_read_globals)),
    ("gl_mutate_global_container", case(gl_mutate_global_container)),
    ("gl_globals_contents", case(gl_globals_contents)),
    ("gl_shadow_builtin_via_global", case(gl_shadow_builtin_via_global)),
    ("gl_builtins_module_fallback", case(gl_builtins_module_fallback)),
    ("gl_local_shadows_builtin", case(gl_local_shadows_builtin)),
    ("gl_undefined_global", case(gl_undefined_global)),
    ("gl_builtin_names_resolve", case(gl_builtin_names_resolve)),
    # printing
    ("pr_basic", case(pr_basic)),
    ("pr_sep_end_file", case(pr_sep_end_file)),
    ("pr_reprs_and_str", case(pr_reprs_and_str)),
    ("pr_before_exception", case(pr_before_exception)),
    ("pr_stdout_write_and_writelines", case(pr_stdout_write_and_writelines)),
    ("pr_print_in_generator_and_callback", case(pr_print_in_generator_and_callback)),
    # frame introspection
    ("in_locals", case(in_locals, 1)),
    ("in_eval_implicit_scope", case(in_eval_implicit_scope)),
    ("in_exec_namespaces", case(in_exec_namespaces)),
    ("in_vars_and_dir", case(in_vars_and_dir)),
    ("in_exec_does_not_rebind_fast_locals", case(in_exec_does_not_rebind_fast_locals)),
    ("in_class_body_locals", case(in_class_body_locals)),
    ("in_kwargs_entry", case(in_kwargs_entry, 1, 3, 4, key="K", z=26, y=25)),
    ("in_getframe", case(in_getframe)),
]

_GLOBAL_HOOKS = (_observe_globals, _reset_globals)
HOOKS = {
    "cl_global_write": _GLOBAL_HOOKS,
    "cl_global_create": _GLOBAL_HOOKS,
    "cl_global_in_nested": _GLOBAL_HOOKS,
    "cl_global_del": _GLOBAL_HOOKS,
    "gl_read_globals": _GLOBAL_HOOKS,
    "gl_undefined_global": _GLOBAL_HOOKS,
    "cls_global_from_class_body": _GLOBAL_HOOKS,
    "lr_class_decorator": (_observe_registry, _reset_registry),
    "gl_mutate_global_container": (_observe_config, _reset_config),
}


@pytest.mark.parametrize("name,setup", CASES, ids=[n for n, _ in CASES])
def test_language(name, setup):
    observe, reset = HOOKS.get(name, (None, None))
    check(setup, observe=observe, reset=reset)


def test_corpus_language_size():
    names = [n for n, _ in CASES]
    assert len(CASES) >= 170
    assert len(set(names)) == len(names)
    assert set(HOOKS) <= set(names)
