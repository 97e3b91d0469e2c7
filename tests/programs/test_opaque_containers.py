# ruff: noqa: F821 - BOX and IT are the globals each program is given (tests.harness.compile_harness.isolated)
"""Mutable C containers from outside the call: a deque, a numpy array, a bytearray, an
``array.array``.  The guard checks only their identity (their contents are not Python
objects it can compare) and the mock cannot replay a change to them, so every read or write
of their contents (an item read or store, iteration, ``in``, ``len``, arithmetic, a method
like ``deque.append``) is a dynamic operation, run as an eager step.  Before, an item read
was baked into the record and an item store or ``append`` was left out of the mock: the
repeated call gave the first call's value and the program's container stayed as it was.
Each case runs against eager, with the container changed from outside between calls.
"""
import array
import collections
import itertools

import numpy as np
import pytest
import torch

import magpy
from tests.harness.compile_harness import after, again, check_compiled, first, fresh, isolated


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


CONTAINERS = {
    "deque": lambda: collections.deque([1.0, 2.0, 3.0], maxlen=4),
    "ndarray": lambda: np.array([1.0, 2.0, 3.0]),
    "bytearray": lambda: bytearray(b"\x01\x02\x03"),
    "array": lambda: array.array("d", [1.0, 2.0, 3.0]),
}


def _item_read(x):
    return x * float(BOX[0])


def _item_store(x):
    BOX[1] = 7
    return x + 1


def _iteration(x):
    for v in BOX:
        x = x * float(v)
    return x


def _membership_and_length(x):
    return x * (7 in BOX) + len(BOX)


def _deque_methods(x):
    BOX.append(float(x.sum() > 0))
    BOX.rotate(1)
    return x * BOX[0]


def _changed(ns):
    ns["BOX"][0] = 5
    ns["BOX"][1] = 0


def _state(ns):
    return list(ns["BOX"])


def _x(s):
    return (torch.randn(3),)


def _steps():
    return [first(_x, expect=None), again(expect=None), after(_changed, expect=None), again(expect=None)]


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
@pytest.mark.parametrize("program", [_item_read, _item_store, _iteration, _membership_and_length],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_contents_of_a_mutable_c_container_from_outside_are_read_and_written_as_eager(kind, program):
    check_compiled(lambda: isolated(program, BOX=CONTAINERS[kind]()), _steps(), fullgraph=False,
                   observe=_state)


def test_deque_methods_on_a_deque_from_outside():
    check_compiled(lambda: isolated(_deque_methods, BOX=CONTAINERS["deque"]()), _steps(), fullgraph=False,
                   observe=_state)


def test_a_deque_made_in_the_call_is_still_one_graph():
    def program(x):
        q = collections.deque([x, x * 2], maxlen=3)
        q.insert(0, x - 1)
        q.append(x + 1)
        return sum(q), q[0]

    trace = check_compiled(lambda: (program, None), [first(_x), again()], expect_graphs=1)
    assert trace.stats["break_reasons"] == []


ITERATORS = {
    "list iterator": lambda: iter([1.0, 2.0, 3.0, 4.0, 5.0]),
    "itertools.count": lambda: itertools.count(1.0),
    # (ints are checked: a call that misses must not advance it twice)
    "itertools.count of ints": lambda: itertools.count(1),
    "map": lambda: map(float, range(1, 9)),
    "generator": lambda: (float(i) for i in range(1, 9)),
}


def _first_of_loop(x):
    for a in IT:
        x = x * a
        break
    return x


def _next(x):
    return x * next(IT) + next(IT, 0.0)


@pytest.mark.parametrize("kind", sorted(ITERATORS))
@pytest.mark.parametrize("program", [_first_of_loop, _next], ids=lambda f: f.__name__.lstrip("_"))
def test_an_iterator_from_outside_moves_on_as_in_eager(kind, program):
    # The iterator's position is its state: a record that baked its first items in gave them
    # again on every call (1, 1, 1 for eager's 1, 2, 3).
    steps = [first(_x, expect=None), again(expect=None), again(expect=None), again(expect=None)]
    # (each call's result shows the iterator's position: its objects do not compare)
    check_compiled(lambda: isolated(program, IT=ITERATORS[kind]()), steps, fullgraph=False,
                   observe=lambda ns: None)


def _logs(x):
    LOG.write(f"{float(x.sum()):.2f}\n")
    return x + 1


def test_a_program_writing_to_a_stringio_from_outside_is_not_given_up():
    # On 3.13 the fast guard detaches objects' dicts from their inline values; an io object's
    # __dict__ is read-only, and that raised inside the guard: every such program ran eagerly
    # from its second call on.  It now runs its mock (the write an eager step).
    import io
    steps = [first(_x), again(), fresh(_x), again()]
    trace = check_compiled(lambda: isolated(_logs, LOG=io.StringIO()), steps, fullgraph=False,
                           observe=lambda ns: ns["LOG"].getvalue())
    assert trace.stats["eager_runs"] == 0
