"""Programs that together execute every opcode of the running CPython (see test_monitor_opcodes).

Syntax only 3.12 compiles (PEP 695 type parameters) is in ``opcode_programs_312``, syntax only
3.13 compiles (PEP 696 type-parameter defaults) in ``opcode_programs_313``.  They live outside ``test_*``
modules so pytest's assertion rewriting leaves their bytecode
exactly as CPython compiles it.
"""
import asyncio
import sys

G = 0


def names_and_globals():
    global G
    G = 5
    x = G + 1
    del G
    try:
        return G
    except NameError as e:
        return x, str(e)


def cells():
    a = 1

    def inner():
        nonlocal a
        a += 1
        return a
    inner()
    b = 2
    del b
    try:
        return (lambda: b)()  # noqa: F821 - b is a deleted cell variable
    except NameError as e:
        return a, str(e)


def class_body():
    y = 10

    class C:
        y = 1
        z: int = 3

        def get(self):
            return y
        w = y

    class D:
        def m(self):
            return __class__
    del_ns = {}
    exec("v = 1\ndel v", del_ns)
    return C.w, C().get(), C.__annotations__, D().m() is D, "v" in del_ns


def exec_module_code():
    ns = {}
    exec("from math import *\nr: float = floor(2.5)", ns)
    exec(compile("1 + 1", "<s>", "single"), {})
    return ns["r"], ns["__annotations__"], "sqrt" in ns


def unpacking(seq):
    a, *b, c = seq
    d, e = b[:2]
    t = (*b, *seq)
    m = {**{"k": a}, "j": c}
    s = {*seq}
    return a, b, c, d, e, t, m, sorted(s), seq[1:3], seq[::-1]


def calls(*args, **kwargs):
    def f(p, q=2, *rest, r, **kw):
        return p, q, rest, r, kw
    return f(*args, r=1, **kwargs), f(1, r=2), f(1, 2, 3, r=4, s=5)


def strings(x):
    return f"{x!r}-{x!s}-{x!a}-{x:>6}-{x}", "%s" % x


def comparisons(a, b):
    return (a < b, a <= b, a == b, a != b, a > b, a >= b, a is b, a is not b, a in [b],
            a not in [b], not a, -a, +a, ~a, a and b, a or b)


def arithmetic(a, b):
    r = [a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, a << 1, a >> 1, a & b, a | b, a ^ b]
    c = a
    c += b; c -= 1; c *= 2; c //= 3; c %= 100; c **= 2; c <<= 1; c >>= 1; c &= 255; c |= 1
    c ^= 3
    return r, c


def comprehensions(n):
    return [i for i in range(n)], {i: i for i in range(n)}, {i % 3 for i in range(n)}, \
        list(i * 2 for i in range(n) if i)


def exceptions():
    out = []
    try:
        try:
            raise ValueError("a")
        finally:
            out.append("finally")
    except (ValueError, TypeError) as e:
        out.append(str(e))
    try:
        assert False, "msg"
    except AssertionError as e:
        out.append(str(e))
    try:
        raise KeyError("k") from ValueError("v")
    except KeyError as e:
        out.append(type(e.__cause__).__name__)
    try:
        try:
            raise ValueError
        except ValueError:
            raise
    except ValueError:
        out.append("reraised")
    return out


def exception_groups():
    out = []
    try:
        raise ExceptionGroup("g", [ValueError(1), TypeError(2), KeyError(3)])
    except* ValueError as e:
        out.append(repr(e))
    except* TypeError:
        out.append("type")
    except* KeyError:
        raise RuntimeError("from star")


class CM:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", exc[0]))
        return True


def withs():
    log = []
    with CM(log):
        pass
    with CM(log):
        raise ValueError
    return log


def matching(x):
    match x:
        case {"a": 1, **rest}:
            return "map", rest
        case [1, 2, *others]:
            return "seq", others
        case complex(real=r):
            return "cls", r
        case int() | float() as n if n > 0:
            return "num", n
        case _:
            return "other"


def generators_():
    def inner():
        got = yield 1
        yield got
        return "done"

    def outer():
        result = yield from inner()
        yield result
    g = outer()
    return next(g), g.send("sent"), next(g), list(x * 2 for x in range(3))


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


class AsyncCM:
    async def __aenter__(self):
        return "entered"

    async def __aexit__(self, *exc):
        return False


async def agen(n):
    for i in range(n):
        yield i


async def coro_body():
    out = []
    async for v in Ticker(3):
        out.append(v)
    async with AsyncCM() as e:
        out.append(e)
    out.append([v async for v in agen(3)])
    return out


def run_async():
    return asyncio.run(coro_body())


def build_slice_and_subscr(lst):
    lst[1:3] = [9, 9]
    del lst[0]
    d = {"a": 1}
    d["b"] = 2
    del d["a"]
    return lst, d, lst[::2]


def imports():
    import os.path as p
    from collections import OrderedDict as OD
    return p.basename("/x/y"), OD.__name__


def loops(n):
    total = 0
    i = 0
    while i < n:
        i += 1
        if i % 2:
            continue
        if i > 8:
            break
        total += i
    for j in range(3):
        if j is None:
            pass
        if j is not None:
            total += j
    return total


class Node:
    def __init__(self, value, nxt=None):
        self.value, self.next = value, nxt


def linked_list(n):
    head = None
    for i in range(n):
        head = Node(i, head)
    total = 0
    node = head
    while node is not None:
        total += node.value
        node = node.next
    waiting = None
    while waiting is None:
        waiting = total
    del head.next
    free = total

    class Reads:
        seen = free
    return {"total": total, "waiting": waiting, "seen": Reads.seen}, hasattr(head, "next")


def throw_into_yield_from():
    # 3.12 ends a yield from that a throw() finished in the frame itself (CLEANUP_THROW).
    def inner():
        try:
            yield 1
        except KeyError:
            return "caught"
        yield 2

    def outer():
        got = yield from inner()
        yield got
    g = outer()
    first = next(g)
    caught = g.throw(KeyError("k"))
    g2 = outer()
    next(g2)
    try:
        g2.throw(ValueError("v"))
    except ValueError as e:
        raised = str(e)
    return first, caught, raised


def maybe_unbound(flag, items):
    # A local the compiler cannot prove bound (3.12: LOAD_FAST_CHECK); slices of names
    # (3.12: BINARY_SLICE, STORE_SLICE); a comprehension variable shadowing a local (PEP 709).
    if flag:
        x = items[1:3]
    y = "outer"
    squares = [y * y for y in items]
    items[0:1] = [y]
    try:
        return x, squares, items, y
    except UnboundLocalError as e:
        return str(e), squares, items, y


class Base:
    def hello(self, n):
        return f"base {n}"

    @property
    def prop(self):
        return "prop"


class Derived(Base):
    def hello(self, n):
        # Zero- and two-argument super(), method and attribute forms (3.12: LOAD_SUPER_ATTR).
        return super().hello(n), super(Derived, self).hello(n + 1), super().prop, super(Derived, self).prop


def supers():
    return Derived().hello(1)


def walrus_and_lambda(xs):
    if (n := len(xs)) > 2:
        return n, list(map(lambda v, k=2: v * k, xs))
    return n


PROGRAMS = [
    (names_and_globals, ()), (cells, ()), (class_body, ()), (exec_module_code, ()),
    (unpacking, ([1, 2, 3, 4, 5],)), (calls, (1, 2, 3)), (strings, ("é",)),
    (comparisons, (3, 4)), (arithmetic, (7, 3)), (comprehensions, (5,)), (exceptions, ()),
    (exception_groups, ()), (withs, ()), (matching, ({"a": 1, "b": 2},)),
    (matching, ([1, 2, 3],)), (matching, (3 + 4j,)), (matching, (2.5,)), (matching, ("s",)),
    (generators_, ()), (run_async, ()), (build_slice_and_subscr, ([1, 2, 3, 4],)),
    (imports, ()), (loops, (20,)), (walrus_and_lambda, ([1, 2, 3],)), (linked_list, (4,)),
    (throw_into_yield_from, ()), (maybe_unbound, (True, [1, 2, 3, 4])), (maybe_unbound, (False, [5, 6])),
    (supers, ()),
]
if sys.version_info >= (3, 12):
    from tests.capture.opcode_programs_312 import PROGRAMS_312
    PROGRAMS += PROGRAMS_312
if sys.version_info >= (3, 13):
    from tests.capture.opcode_programs_313 import PROGRAMS_313
    PROGRAMS += PROGRAMS_313
