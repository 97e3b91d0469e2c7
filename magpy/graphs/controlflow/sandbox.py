"""The rules a fork of control flow runs under (magpy.graphs.controlflow): the :class:`Sandbox` stops a
fork before anything observable happens:

===================================================  =======================================
an arm ...                                           the fork ...
===================================================  =======================================
computes with tensors, sets local variables, calls   runs; its tensor operations go into
pure natives and Python code that does the same      the arm's own graph (``opgraph.Arm``)
stores an attribute, item, global or closure cell,   stops before it: the jump is a break
enters ``with``, imports, calls an impure native,    (an eager step), as without control
updates a tensor from before the jump in place      flow operators
(or a view of one: ``h[:, 0] += 1``), changes a
container with an in-place operator (``lst +=
[v]``), draws random numbers, or meets a break of
its own (``.item()``)
a nested tensor ``if``                               records a cond into the arm's graph
leaves the arm (``return``, ``break``, an            stops
exception)
===================================================  =======================================
"""
from __future__ import annotations

import itertools

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import NULL, bytecode, generators, protocols
from magpy.capture.refgraph.graph import is_immutable
from magpy.graphs.operands import LOOP_INDEX

# A comprehension's additions to the container it builds, which sits on the stack from before
# an ``if`` in its body (3.12 inlines comprehensions into the frame, PEP 709): an arm that adds
# to it leaves another container than the other arm (``[t for t in x if t > 0]`` was a cond
# whose mock kept the recorded length).
_COMPREHENSION_ADDS = frozenset({"LIST_APPEND", "SET_ADD", "MAP_ADD"})


class ForkStopped(BaseException):
    """Stops a fork at a forbidden operation (not an ``Exception``: the program's own
    ``except Exception`` does not catch it, and :attr:`Sandbox.violation` says it happened)."""


class Sandbox:
    """The rules a fork runs under: the monitor asks it before each native call (and tells it
    the call's result) and runs frames through its tables, whose effectful instructions stop
    the fork first.  Advancing an iterator is an effect unless the fork made it."""

    def __init__(self, appendable: frozenset = frozenset(), writes: list | None = None,
                 writable: frozenset = frozenset(), iterators: tuple = ()):
        self.violation: str | None = None
        self._tables: dict[int, tuple] = {}   # id(code info) -> (info, guarded table)
        self._cells: set[int] = set()         # ids of the cells frames made in the fork
        # The iterators the fork made (or a loop's real run was given), which it may advance:
        # id -> the iterator (kept, so that its id stays its own).
        self._iterators: dict[int, object] = {id(it): it for it in iterators}
        self.appendable = appendable          # ids of the lists a loop body may append to
        # A counted loop's body: its ``out[t] = value`` (``t`` the loop's index) as ``(out,
        # value)``, not run (Branches._for_operator makes them the operator's); the loop's real
        # run: the ids of the tensors it stores those rows into.
        self.writes, self.writable = writes, writable

    def stop(self, why: str):
        if self.violation is None:
            self.violation = why
        raise ForkStopped(why)

    def ops(self, info, table: list) -> list:
        """``table`` (the frame's observed dispatch table) with every effectful instruction
        stopping the fork before it runs."""
        entry = self._tables.get(id(info))
        if entry is None:
            guarded = [e if e is None or ins is None else (self._guard(e[0], ins.opname), e[1], e[2])
                       for e, ins in zip(table, info.instructions)]
            entry = self._tables[id(info)] = (info, guarded)
        return entry[1]

    def _guard(self, handler, opname: str):
        """``handler`` of instruction ``opname``, stopping the fork before an effect."""
        if opname == "STORE_SUBSCR" and (self.writes is not None or self.writable):
            return self._row_store(handler)
        if opname in bytecode.EFFECT_OPS or opname in _COMPREHENSION_ADDS:
            def refuse(f, arg):
                self.stop(f"{opname} in a branch")
            return refuse
        if opname in _ITERATOR_READS:
            return self._iterating(handler, opname)
        if opname in _ITERATOR_MAKES:
            return self._made(handler)
        if opname == "BINARY_OP":
            def operate(f, arg):
                left = f.stack[-2]
                if arg in bytecode.INPLACE_BINARY and _changed_in_place(left):
                    self.stop(f"an in-place operator on a {type(left).__qualname__} in a branch")
                return handler(f, arg)
            return operate
        if opname == bytecode.CELL_MAKE:
            def make(f, i):
                done = handler(f, i)
                self._cells.add(id(f.locals[i]))
                return done
            return make
        if opname in bytecode.CELL_WRITES:
            def write(f, i):
                if id(f.locals[i]) not in self._cells:
                    self.stop(f"{opname} of a variable from outside the branch")
                return handler(f, i)
            return write
        return handler

    def _iterating(self, handler, opname: str):
        """``handler`` of ``opname``, which advances the iterators among the top values of the
        stack it takes (``for v in it``, ``a, b = it``, ``f(*it)``): stopping the fork before it
        advances one the fork did not make (the program would advance it again)."""
        n = _ITERATOR_READS[opname]

        def advance(f, arg):
            for v in f.stack[-n:]:
                self._advancing(v, opname)
            return handler(f, arg)
        return advance

    def _made(self, handler):
        """``handler`` of an instruction making an iterator (``GET_ITER``) or a generator
        (``RETURN_GENERATOR``, whose frame the monitor runs under these rules): one the fork
        may advance, unless it is an iterator the instruction was given (``iter(it)`` is
        ``it``) or one a Python ``__iter__`` did not make here."""
        def make(f, arg):
            given = f.stack[-1] if f.stack else NULL
            done = handler(f, arg)
            made = f.retval if done else f.stack[-1]
            if made is not given and not generators.is_iterator(given) and (done or _native_iter(f, given)):
                self._iterators[id(made)] = made
            return done
        return make

    def _advancing(self, v, what) -> None:
        """Stop the fork if ``v`` is an iterator it did not make (``what`` advances it)."""
        if generators.is_iterator(v) and id(v) not in self._iterators:
            self.stop(f"{getattr(what, '__qualname__', what)!s} advances a {type(v).__qualname__} from "
                      "before the branch")

    def returned(self, callee, args: tuple, result) -> None:
        """A native call in a fork gave ``result``: an iterator the fork may advance if a maker
        (``zip``, ``enumerate``, ``map`` ...) made it over no iterator the fork may not."""
        if (callee in _ITERATOR_MAKERS and not (callee is iter and len(args) > 1)
                and generators.is_iterator(result)
                and not any(generators.is_iterator(a) and id(a) not in self._iterators for a in args)):
            self._iterators[id(result)] = result

    def _row_store(self, handler):
        """``STORE_SUBSCR`` in a counted loop: ``out[t] = value`` of tensors, ``t`` the loop's
        index, is taken (a fork) or run (the real run, for the tensors ``writable``)."""
        def store(f, arg):
            value, out, key = f.stack[-3:]
            if id(out) in self.writable:
                return handler(f, arg)
            if not (self.writes is not None and f.shadow_stack[-1] is LOOP_INDEX and type(key) is int
                    and isinstance(out, torch.Tensor) and isinstance(value, torch.Tensor)):
                self.stop("STORE_SUBSCR in a branch")
            self.writes.append((out, value))
            del f.stack[-3:]
            del f.shadow_stack[-3:]
            return False
        return store

    def check_call(self, callee, args: tuple) -> None:
        """A native call in a fork: only pure ones (tensor operations are checked by the
        recorder, which knows which tensors the arm made)."""
        if ann.is_tensor_method(callee):
            return
        if callee not in _ITERATOR_MAKERS:   # (they only wrap theirs: advancing theirs is checked)
            for v in (getattr(callee, "__self__", None), *args):
                self._advancing(v, callee)
        if self.appendable and _appends_to(callee, args) in self.appendable:
            return   # a for loop's accumulator (Branches._for_operator checks what went in)
        a, _ = ann.lookup(callee)
        if a is None or not a.pure or a.inplace:
            self.stop(f"{getattr(callee, '__qualname__', callee)!s} in a branch")


# Instructions that advance iterators among the top values of the stack, by name: how many.
_ITERATOR_READS = {bytecode.ITER_NEXT: 1, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "CONTAINS_OP": 1,
                   "LIST_EXTEND": 1, "SET_UPDATE": 1, "CALL_FUNCTION_EX": 2, "SEND": 2}
_ITERATOR_MAKES = frozenset({bytecode.ITER_MAKE, "GET_YIELD_FROM_ITER", "RETURN_GENERATOR"})
# Natives whose result is a new iterator over their arguments (iter(f, sentinel) calls f natively
# at each step: not one of them).
_ITERATOR_MAKERS = frozenset({iter, zip, enumerate, map, filter, reversed} | {
    v for v in vars(itertools).values() if isinstance(v, type) and protocols.type_lookup(v, "__next__")})


def _native_iter(f, v) -> bool:
    """Does ``iter(v)`` in frame ``f`` run natively (as the monitor's ``get_iter`` decides), not
    in a Python ``__iter__`` that may give an iterator it did not make?"""
    fn = protocols.py_method(type(v), "__iter__")
    return fn is None or f.monitor.policy.runs_natively(fn)


def _changed_in_place(left) -> bool:
    """Does an in-place operator (``lst += [v]``, ``d |= e``) change its left operand ``left``
    itself: an object the branch may not have made, which the fork would change before the
    program does?  (Not an immutable value, which it replaces, nor a tensor, whose update the
    recorder checks: opgraph.Arm.check.)"""
    return not (isinstance(left, torch.Tensor) or is_immutable(left))


def _appends_to(callee, args: tuple) -> int | None:
    """The id of the list ``callee(*args)`` appends to, if it is ``list.append``."""
    if callee is list.append:
        return id(args[0]) if args and type(args[0]) is list else None
    owner = getattr(callee, "__self__", None)
    return id(owner) if type(owner) is list and getattr(callee, "__name__", None) == "append" else None
