"""``magpy.capture.monitor.liveness``: which plain locals a frame can still read from an instruction
on (a resume point leaves the others unbound).  Checked on the bytecode of every supported
Python version: each case names an instruction by what it does (the first ``LOAD_FAST`` of
a name, the first call of a global) and the locals dead there."""
from __future__ import annotations

import dis

from magpy.capture.monitor.liveness import dead_locals


def _dead_at(fn, opname: str, argval) -> set[str]:
    """The names of ``fn``'s locals dead at its first instruction ``opname`` naming ``argval``
    (3.13's pairs name two: either counts)."""
    code = fn.__code__
    for ins in dis.get_instructions(code):
        names = ins.argval if type(ins.argval) is tuple else (ins.argval,)
        if ins.opname.startswith(opname) and argval in names:
            return {code.co_varnames[i] for i in dead_locals(code, ins.offset // 2)}
    raise AssertionError(f"no {opname} {argval!r} in {fn.__name__}")


def _sink(*args):
    return args


def read_later(a, b):
    g = iter(a)
    _sink(b)
    return list(g)


def test_a_local_read_later_is_live_one_never_read_again_is_dead():
    dead = _dead_at(read_later, "LOAD_GLOBAL", "_sink")
    assert "g" not in dead and "a" in dead and "b" not in dead


def suspended_after_zip(a, b):
    pairs = []
    for x, y in zip(iter(a), b):
        pairs.append(x + y)
    _sink(pairs)
    return pairs


def test_loop_variables_are_dead_after_the_loop():
    dead = _dead_at(suspended_after_zip, "LOAD_GLOBAL", "_sink")
    assert {"x", "y", "a", "b"} <= dead and "pairs" not in dead


def stored_again(a):
    _sink()
    a = 1
    return a


def test_a_local_stored_before_its_next_read_is_dead():
    assert "a" in _dead_at(stored_again, "LOAD_GLOBAL", "_sink")


def deleted_later(a):
    _sink()
    del a


def test_a_local_deleted_later_is_live():
    # (``del`` of an unbound local raises UnboundLocalError)
    assert "a" not in _dead_at(deleted_later, "LOAD_GLOBAL", "_sink")


def read_in_the_handler(a, b):
    try:
        _sink(b)
    except ValueError:
        return a
    return b


def test_a_local_its_exception_handler_reads_is_live():
    assert "a" not in _dead_at(read_in_the_handler, "LOAD_GLOBAL", "_sink")


def read_in_a_loop(a, n):
    for _ in range(n):
        _sink(a)
        b = a   # noqa: F841 - a local never read: dead


def test_a_local_read_on_the_next_iteration_is_live():
    dead = _dead_at(read_in_a_loop, "LOAD_GLOBAL", "_sink")
    assert "a" not in dead and "b" in dead


def sees_its_locals(a):
    _sink()
    return locals()


def test_code_that_can_see_its_locals_keeps_them_all():
    assert _dead_at(sees_its_locals, "LOAD_GLOBAL", "_sink") == set()


def held_by_a_closure(a, b):
    def inner():
        return a
    _sink(b)
    return inner


def test_a_cell_always_counts_as_live():
    # (``a`` is a cell: the closure reads it, whatever the frame does)
    assert "a" not in _dead_at(held_by_a_closure, "LOAD_GLOBAL", "_sink")
