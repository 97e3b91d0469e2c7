"""Control flow (paper §6.2.2): an ``if`` on tensor data recorded as one ``torch.cond``, a
``while`` loop on tensor data as one ``torch.while_loop``.

At a conditional jump whose condition is a tensor (``if x.sum() > 0:``) the recording run
does not break (magpy.segments would make the truth an eager step and the record serve
one outcome).  Both arms run as *forks* of the frame, each up to the instruction where
they meet (the join), under a :class:`Sandbox` that stops a fork before anything
observable happens:

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

At the join the arms must agree on every slot of the frame (locals and stack) but the
tensors: a slot they leave different holds a tensor in both, of the same dtype, shape,
device and ``requires_grad``; those are the outputs of ``cond(pred, arm_if_true,
arm_if_false, operands)``, whose operands are the tensors from before the jump that either
arm reads.  The frame then takes the taken fork's state and goes on from the join.  The
RefGraph builder watches both forks, so the guard covers what either arm read.

Where an arm leaves a slot's tensor ``p`` as it was (``if g: x = block(x)`` when ``g`` is
false), the program has ``p`` itself there, not a new tensor: the mock gives it ``p`` when
that arm runs.  If the run took that arm, the slot keeps ``p`` and gets a :class:`Passed`
shadow: operations reaching ``p`` through it (moves, calls, tensor operations) record the
cond's output, while other references to ``p`` record ``p``.  A use the shadow cannot
follow (stored, put in a container) ends recording; the next recording breaks at that
``if`` instead.  Returned from the call, it is the call's result as the mock picks it.

A ``while`` whose test reads a tensor's truth (the jump at its top and the one back at the
end of its body) is recorded from two iterations of its body, each a fork from the state
the one before left, under the same sandbox; the second fork's operations are the body
graph (the first's reads of the loop's variables may coincide with tensors from before the
loop, the second's cannot).  Between the state before the loop and after each iteration,
every slot but the loop's tensors must be equal; the slots that change (grouped by the
tensor they hold: ``h = new``) are the carried operands, whose tensor each iteration makes
anew with the same dtype, shape, strides and ``requires_grad``; whether the loop goes on is
carried too (a 0-d bool tensor).  The loop then runs for real on a copy of the frame,
unobserved but sandboxed, and the frame goes on after it.  A loop the run does not enter
leaves its tensors as they were (``Passed`` shadows, as an ``if`` does); a variable the body
sets that was unbound before the loop enters the operator as zeros and must not be read
after the loop (:class:`LoopLocal`), since a loop that does not run leaves it unbound.

A ``for`` loop over a tensor (``for x_t in x:``, each step a slice of ``x``'s first
dimension) whose length is symbolic in the recording, or longer than
``config.max_unroll``, is recorded the same way as a ``while_loop`` that counts its steps:
``iter(x)`` runs unrecorded (its ``unbind`` would fix the length), two forks run the body
on the first two slices, the second's operations are the body graph with its slice read
as ``x[i]``.  The loop variable is not read after the loop (:class:`LoopLocal`).  An empty
list the body appends one tensor to per step (``outs.append(h)``) becomes a buffer the
operator fills (:class:`Accumulated`); after the loop only ``torch.stack`` or ``torch.cat``
may read it, which the graph takes from that buffer.  Anything else a recording finds
out too late (a read of the loop variable or the list) ends it, and the next recording
unrolls that loop (``magpy.explain`` says why).

The other loop shapes of recurrent code are recorded the same way (a :class:`_Walk` says
what each step gives and how the operator's body reads it from its step count):

==============================================  ============================================
the loop                                        step ``k`` of the operator
==============================================  ============================================
``for x_t, y_t in zip(x, y):`` (tensors)        reads ``x[k]`` and ``y[k]``; the first sizes
                                                must be one (the guard keeps that), else
                                                the loop is unrolled
``for i, x_t in enumerate(x[, start]):``        reads ``x[k]``; ``start + k`` is the loop's
                                                index, as a range loop's
``for t in range(n)``, ``range(a, n, s)``       ``t = a + s * k``, which only tensor
(``n`` symbolic or above the unroll limit,      operations may read, as a row (``x[t]``,
``a`` and ``s`` constants)                      ``x[:, t]``); any other use of ``t`` (Python
                                                arithmetic, a comparison) unrolls the loop
``out[t] = h`` in the body of one of the two    ``out`` is carried: ``index_put`` sets its
above (``out`` made before the loop by the      row ``t``; after the operator its result is
same graph, contiguous, not read in the body,   copied into ``out`` (``copy_``, in place as
``h`` of its dtype and row shape)               the loop did)
==============================================  ============================================

``enumerate(x)`` and ``zip(x, y)`` run ``iter`` of the tensors inside the call: its
``unbind`` calls run unrecorded, and the loop is recorded once the call completes (the
``GET_ITER`` that follows gives the object itself).  The body's unpacking of each step's
value (``UNPACK_SEQUENCE`` and the stores) starts each fork with the items on the stack.
A fork does not run ``out[t] = h`` (:class:`Sandbox` takes it as a row store), the real
run does; a real run that stops midway puts ``out`` back as it was.
The operator's step count is ``len(range(a, n, s))`` computed on the symbolic ``n``; an
index below 0 (``x[-1]``, the last row) unrolls the loop.
"""
from __future__ import annotations

import contextlib
import dataclasses
import dis
import gc
import itertools
import math
import operator

import torch

from magpy import annotations as ann
from magpy import rng
from magpy.config import config
from magpy.dynamic import Span, argument_shadows, symbolic
from magpy.monitor import NULL, Observer, bytecode, generators, protocols
from magpy.monitor.observer import CALLS, RETURNS, Items, calling, returns_to_caller, tracked
from magpy.opgraph import LOOP_INDEX
from magpy.refgraph.graph import is_immutable

# Jumps and loops a recording found cannot be operators, (file, first line, function, offset)
# -> why (an if whose passed-through tensor escaped, a for loop explain names as unrolled).
_REFUSED: dict[tuple, str] = {}
# Tensor attributes that are metadata (a passed-through tensor and the cond's output agree).
_METADATA = frozenset({"shape", "dtype", "device", "ndim", "layout", "requires_grad", "is_cuda", "size",
                       "dim"})
_MOVES = bytecode.FAST_MOVES | {"COPY", "SWAP", "POP_TOP"}
_CELL_OPS = frozenset({"MAKE_CELL", "STORE_DEREF", "LOAD_DEREF"})
# A comprehension's additions to the container it builds, which sits on the stack from before
# an ``if`` in its body (3.12 inlines comprehensions into the frame, PEP 709): an arm that adds
# to it leaves another container than the other arm (``[t for t in x if t > 0]`` was a cond
# whose mock kept the recorded length).
_COMPREHENSION_ADDS = frozenset({"LIST_APPEND", "SET_ADD", "MAP_ADD"})

_STACKS = frozenset({"stack", "cat", "concat"})
_PLAIN = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, torch.device)
_STEP = object()      # (a for loop's variable in the slots the forks compare)
_ARRIVED = object()   # a fork's result: it reached the join
_LEFT = object()      # a fork's result: it went elsewhere


class ForkStopped(BaseException):
    """Stops a fork at a forbidden operation (not an ``Exception``: the program's own
    ``except Exception`` does not catch it, and :attr:`Sandbox.violation` says it happened)."""


def _arrive(f, arg):
    f.retval = _ARRIVED
    return True


def _leave(f, arg):
    f.retval = _LEFT
    return True


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


class Passed:
    """The shadow of a slot where the run's arm left tensor ``value`` as it was: reached
    through the slot, it is the cond's output, which ``out`` (a stand-in) holds."""

    __slots__ = ("out", "value", "site")

    def __init__(self, out, value, site):
        self.out, self.value, self.site = out, value, site

    def __repr__(self):
        return f"<tensor passed through the if at {self.site[0]}:{self.site[1]}>"


def _forward_jump(info, j: int) -> tuple | None:
    """For the forward conditional jump at code unit ``j``: ``(the truth that makes it jump,
    its target, the code unit after it, the last instruction before the target and its code
    unit)``; None if it is not one."""
    ins = info.instructions[j]
    jumps_if = bytecode.BRANCH_JUMPS.get(ins.opname) if ins is not None else None
    if jumps_if is None:
        return None
    _, target, fall = info.ops[j]
    last = target - 1
    while last > fall and info.instructions[last] is None:
        last -= 1
    return jumps_if, target, fall, last, info.instructions[last]


def arms(info, j: int) -> tuple[tuple[int, int, tuple], tuple[int, int, tuple]] | None:
    """For the conditional jump at code unit ``j``: the arm taken when the condition is
    true and the one taken when it is false, each ``(start, end, joins)``; None unless it is
    a forward ``if``/``else`` (or ``if`` alone) that ends in a join (the head of the loop
    whose body it ends, where both arms jump back there), or whose arms both return from
    the function the same way (their joins are those returns)."""
    jump = _forward_jump(info, j)
    if jump is None:
        return None
    jumps_if, target, fall, last, end = jump
    if end is not None and end.opname in RETURNS:
        return _returning_arms(info, jumps_if, fall, target, last)
    join = target
    other = (target, target)
    if end is not None and end.opname == bytecode.BACKWARD_JUMP:
        # An if/else ending a loop body: both arms jump back to the loop's head, the join.
        join = info.ops[last][1]
        back = _jump_back(info, target, join)
        if back is None or join >= j:
            return None
        other = (target, back + 1)
    elif end is not None and end.opname == bytecode.FORWARD_JUMP:
        join = info.ops[last][1]
        if join <= target:
            return None
        other = (target, join)
    through = (fall, target, (join,))
    other = (*other, (join,))
    return (other, through) if jumps_if else (through, other)


def _returning_arms(info, jumps_if: bool, fall: int, target: int, last: int):
    """Arms that both end in the same ``return`` statement: 3.12 copies a small block ending
    in a return (``return y + 1`` after an if/else) into each arm that reaches it.  Every
    copy of the return ending the fall-through arm -- the same instruction (the value on the
    stack, or the same constant) of the same source line -- is a join of its arm, where the
    frame is left by the same code.  (Returns of different statements stay a break.)"""
    end = len(info.instructions)
    through = (fall, target, _same_returns(info, last, fall, target))
    other = (target, end, _same_returns(info, last, target, end))
    if not other[2]:
        return None
    return (other, through) if jumps_if else (through, other)


def _same_returns(info, last: int, start: int, end: int) -> tuple:
    """The code units in ``[start, end)`` of copies of the return instruction at ``last``."""
    ret, line = info.instructions[last], info.lineno(last)
    return tuple(k for k in range(start, end) if (ins := info.instructions[k]) is not None
                 and (ins.opcode, ins.arg) == (ret.opcode, ret.arg) and info.lineno(k) == line)


class LoopLocal:
    """The shadow of a variable a ``while_loop``'s body set that was unbound before the loop
    at ``site``: reading it after the loop ends the recording (module docstring)."""

    __slots__ = ("site",)

    def __init__(self, site):
        self.site = site


class Accumulated:
    """The shadow of a list a ``for`` loop recorded as a ``while_loop`` appended to: ``items``
    (the tensors it holds after the loop), ``out`` (a stand-in of the buffer the operator
    filled with them), ``site`` (the loop's)."""

    __slots__ = ("lst", "items", "out", "site")

    def __init__(self, lst, out, site):
        self.lst, self.items, self.out, self.site = lst, list(lst), out, site


def for_loop(info, j: int) -> tuple[int, int, int] | None:
    """For the instruction at code unit ``j``: ``(head, body, exit)`` if it makes the iterator
    of a ``for`` loop (its next-step instruction at ``head``, the body from ``body``, leaving
    to ``exit``), else None."""
    ins = info.instructions[j]
    if ins is None or ins.opname != bytecode.ITER_MAKE:
        return None
    head = info.ops[j][2]
    nxt = info.instructions[head]
    if nxt is None or nxt.opname != bytecode.ITER_NEXT:
        return None
    _, exit, body = info.ops[head]
    return head, body, exit


def _jump_back(info, start: int, head: int) -> int | None:
    """The first code unit from ``start`` on that jumps back to ``head``, if any."""
    for i in range(start, len(info.instructions)):
        ins = info.instructions[i]
        if ins is not None and ins.opname == bytecode.BACKWARD_JUMP and info.ops[i][1] == head:
            return i
    return None


def loop(info, j: int) -> tuple[int, int, int, bool] | None:
    """For the conditional jump at code unit ``j``: ``(body, test, exit, back_if)`` if it is
    the test at the top of a ``while`` loop (the body runs from ``body`` to the test at its
    end, whose jump back at code unit ``test`` is taken when the condition's truth is
    ``back_if``; the loop leaves to ``exit``), else None."""
    jump = _forward_jump(info, j)
    if jump is None:
        return None
    jumps_if, exit, body, last, end = jump
    closing = _closing_test(info, body, exit, last, end)
    if closing is not None and closing[1] != jumps_if:
        return body, closing[0], exit, closing[1]
    return _entered_loop(info, jumps_if, exit, body)


def _entered_loop(info, enters_if: bool, body: int, fall: int) -> tuple[int, int, int, bool] | None:
    """A ``while`` whose test at the top jumps *into* the body (at ``body``) when the
    condition's truth is ``enters_if`` and else falls to a jump away (3.12, a ``while``
    nested in another loop): its body ends in the usual closing test, whose way out is
    the same jump as the one at ``fall``, so leaving from either is the same program."""
    back = _jump_back(info, body, body)
    if back is None:
        return None
    exit = info.ops[back][2]
    closing = _closing_test(info, body, exit, back, info.instructions[back])
    leave, out = info.instructions[fall], info.instructions[exit] if exit < len(info.instructions) else None
    if (closing is None or closing[1] != enters_if or leave is None or out is None
            or leave.opcode != out.opcode or leave.opcode not in _JUMP_OPCODES
            or info.ops[fall][1] != info.ops[exit][1]):
        return None
    return body, closing[0], exit, enters_if


_JUMP_OPCODES = frozenset(dis.hasjrel + dis.hasjabs)   # (by opcode: observed names may differ)


def _closing_test(info, body: int, exit: int, last: int, end) -> tuple[int, bool] | None:
    """The test ending a ``while`` body whose last instruction ``end`` is at code unit
    ``last``: ``(its code unit, the truth that goes on)``.  Either a conditional jump back to
    the body (3.11), or a conditional jump out to ``exit`` followed by a jump back (3.12,
    whose conditional jumps only go forward); None if ``end`` is neither."""
    if end is None:
        return None
    back_if = bytecode.LOOP_JUMPS.get(end.opname)
    if back_if is not None:
        return (last, back_if) if info.ops[last][1] == body else None
    if end.opname != bytecode.BACKWARD_JUMP or info.ops[last][1] != body:
        return None
    test = last - 1
    while test > body and info.instructions[test] is None:
        test -= 1
    ins = info.instructions[test]
    out_if = bytecode.BRANCH_JUMPS.get(ins.opname) if ins is not None else None
    if out_if is None or info.ops[test][1] != exit:
        return None
    return test, not out_if


def _region_table(ops: list, region: tuple[int, int], joins: tuple, arrive) -> list:
    """Dispatch table ``ops`` for running only ``region``: leaving it ends the run, and
    ``arrive`` runs instead of the instruction at each of ``joins``."""
    table = list(ops)
    for i, e in enumerate(table):
        if e is not None and not region[0] <= i < region[1]:
            table[i] = (_leave, None, i)
    for join in joins:
        table[join] = (arrive, None, join)
    return table


class Branches(Observer):
    """Records tensor ``if``s of one recording run as ``torch.cond`` (module docstring).

    The recorder asks :meth:`wants` when the program reads a tensor's truth; if the read
    is a branch this can take, the jump completes unbroken and :meth:`on_instruction` runs
    the forks; if they fail, it hands the truth to the breaker as a step after all.
    """

    def __init__(self, builder, breaker, recorder, segmenter):
        self.monitor = None   # set once the capture made its monitor
        self.builder, self.breaker = builder, breaker
        self.recorder, self.segmenter = recorder, segmenter
        self._pending = None   # (frame, lasti, tensor, its record method, regions) of the jump under way
        self.enabled = True    # the backend compiles conds (backends.NO_CONDS)
        self.loop_gradients = False   # ... and loops under autograd (backends.LOOP_GRADIENTS)
        self.conds: list[str] = []   # the ifs recorded as conds, in words (explain)
        self.live: dict[int, Passed] = {}    # the Passed shadows of the run
        self.consumed: set[int] = set()      # of those, the ones the operation just recorded took
        self._passed: dict[int, set] = {}    # id(frame) -> those its call bound to parameters
        self._levels: dict[int, int] = {}    # id(frame) -> intrinsics under way when it was entered
        self._cells: dict[int, tuple] = {}   # id(cell) -> (cell, its content, the content's Passed)
        self.loop_locals = False             # has a loop left a LoopLocal shadow in this run?
        self.accs: dict[int, Accumulated] = {}   # the Accumulated shadows of the run
        # Recording a range loop's body: its index has the shadow LOOP_INDEX (opgraph), which a
        # tensor operation taking it reads as the step count; any other use stops the fork.
        self._counting = False

    def wants(self, t: torch.Tensor) -> bool:
        """Is the truth of ``t`` being read by a jump this can record as a cond?"""
        if not (config.control_flow and self.enabled) or self.breaker.brk is not None:
            return False
        f = self.monitor.current
        if f is None or not hasattr(f, "info") or t.numel() != 1:
            return False
        found, record = loop(f.info, f.lasti), self._record_loop
        if found is None:
            found, record = arms(f.info, f.lasti), self._record
        if found is None or _site(f) in _REFUSED:
            return False
        self._pending = (f, f.lasti, t, record, found)
        return True

    def wants_iteration(self, x: torch.Tensor) -> bool:
        """Is ``x.unbind(0)`` being run for the iterator of a ``for`` loop this records as one
        ``torch.while_loop`` (``iter(x)``, or ``enumerate(x)``/``zip(x, y)`` whose result the
        loop takes)?  Then the recorder runs it unrecorded, and the loop is recorded once the
        instruction completes (module docstring)."""
        if not (config.control_flow and self.enabled) or self.breaker.brk is not None:
            return False
        f = self.monitor.current
        if self.monitor.sandbox is not None or f is None or not hasattr(f, "info"):
            return False
        pending = self._pending
        if pending is not None and pending[3] == self._record_for and pending[0] is f:
            return any(x is t for t in pending[2])   # zip(x, y)'s second tensor
        found, over, ready = _iterating(f, x)
        if found is None and _wrapped_walk(f, x):
            self._note(f"for at {_where(f)}: unrolled (zip or enumerate of tensors inside another call "
                       "than enumerate(zip(...)), e.g. list(zip(x, y)): not a walk recorded as one operator)")
        if found is None or any(t.dim() == 0 or t.size(0) < 2 for t in over):
            return False
        site = _site(f, ready)   # (where the loop's refusals are kept: its iterator made)
        if site in _REFUSED:
            self._note(f"for at {_where(f)}: unrolled ({_REFUSED[site]})")
            return False
        if not all(self._symbolic_length(t) or t.size(0) > config.max_unroll for t in over):
            self._note(f"for at {_where(f)}: unrolled ({x.size(0)} slices, a static length up to "
                       f"config.max_unroll={config.max_unroll})")
            return False
        if not self._one_length(over):
            self._note(f"for at {_where(f)}: unrolled (zip of tensors of different lengths)")
            return False
        self._pending = (f, ready, over, self._record_for, found)
        return True

    def _one_length(self, over: tuple) -> bool:
        """Are the first sizes of the tensors ``over`` (a ``zip`` walks in step) one?  (Symbolic
        ones: the guard keeps the outcome, as where the program compares them.)"""
        shapes = self.recorder.shapes
        sizes = [shapes.fake(t).shape[0] if shapes is not None and shapes.active else t.size(0) for t in over]
        return all(bool(n == sizes[0]) for n in sizes[1:])

    def _symbolic_length(self, x) -> bool:
        shapes = self.recorder.shapes
        if shapes is None or not shapes.active:
            return False
        n = shapes.fake(x).shape[0]
        return type(n) is torch.SymInt and bool(n.node.expr.free_symbols)

    def stacked(self, name: str, args: tuple) -> torch.Tensor | None:
        """For ``torch.stack``/``torch.cat`` (``name``) of a list a recorded ``for`` loop filled
        (:class:`Accumulated`): the stand-in of the operator's buffer, else None."""
        if not self.accs or name not in _STACKS or not args or type(args[0]) is not list:
            return None
        lst = args[0]
        for mark in self.accs.values():
            if mark.lst is lst and len(lst) == len(mark.items) and all(map(operator.is_, lst, mark.items)):
                self.consumed.add(id(mark))
                return mark.out
        return None

    # The monitor calls it like any observer (first among them: a failed branch becomes a
    # step that the segmenter completes at this very instruction).
    def on_enter(self, frame):
        self._levels[id(frame)] = self.monitor.in_intrinsic
        if self.live:
            bound = tracked(frame.shadow_locals or (), Passed, self.live)
            if bound:
                self._passed.setdefault(id(self.monitor.current), set()).update(id(m) for m in bound)

    def on_instruction(self, frame, ins, inputs, outputs):
        sandbox = self.monitor.sandbox
        if sandbox is not None:
            if self._symbolic_use(frame, ins):
                sandbox.stop(f"a symbolic size used in Python ({ins.opname})")
            if self.segmenter.unfollowed(ins.opname, inputs, outputs):
                sandbox.stop(f"a value computed eagerly used in a branch ({ins.opname})")
        consumed = self.consumed
        if self.live:
            self._follow(frame, ins)
        else:
            self.consumed = set()
        if self.accs:
            self._accumulator_use(frame, ins, consumed)
        if self._counting:
            self._index_use(frame, ins, consumed)
        elif ins.opname == bytecode.ITER_MAKE:
            self._ranged(frame)
        for slot in bytecode.fast_slots(bytecode.FAST_READS, ins) if self.loop_locals else ():
            mark = frame.shadow_locals[slot]
            if type(mark) is LoopLocal:
                name = frame.info.localsplus[slot]
                self._refuse(mark.site, f"{name}, unbound if the loop does not run, is read after it")
        pending = self._pending
        if pending is None or pending[0] is not frame or pending[1] != frame.lasti:
            return
        self._pending = None
        _, _, t, record, found = pending
        why = record(frame, t, found)
        if why is not None:
            self.breaker(f"Tensor.__bool__ reads tensor data into Python (no cond: {why})", step=True)

    def standing_in(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``args``/``kwargs`` of the tensor operation being recorded, with each tensor that
        arrives through a :class:`Passed` slot replaced by the stand-in of the cond's output;
        None if there is none."""
        if not self.live and not self._counting:
            return None
        f = self.monitor.current
        found = argument_shadows(f, args, kwargs) if hasattr(f, "info") else None
        if found is None:
            found = self._inside_torch(f, args, kwargs) if hasattr(f, "info") else None
        if found is None:
            return None
        pos, kw = found
        if args and pos[0] is None:   # ``t.method(...)``: the monitor calls the bound method
            pos = (_bound_self(f, args[0], self.live),) + tuple(pos[1:])

        def swap(v, sh):
            if type(sh) is Passed and id(sh) in self.live and sh.value is v:
                self.consumed.add(id(sh))
                return sh.out
            if sh is LOOP_INDEX and self._counting and type(v) is int:
                self.consumed.add(id(sh))
                return LOOP_INDEX
            if type(sh) is Items and type(v) is tuple and len(sh) == len(v):
                return tuple(map(swap, v, sh))
            return v
        args = tuple(swap(a, s) for a, s in zip(args, pos))
        return args, {k: swap(v, kw.get(k)) for k, v in kwargs.items()}

    def _inside_torch(self, f, args, kwargs) -> tuple[tuple, dict] | None:
        """The shadows of a tensor operation that a Python function of torch's own, run
        natively, calls with its arguments (``Tensor.norm`` calls ``torch.linalg.vector_norm``):
        a tensor the instruction calling it passed through a :class:`Passed` slot, and through
        no other of its inputs, arrives through that slot.  (Only where the call's other inputs
        are plain values: a container or object could hold that tensor too.)"""
        ins = f.info.instructions[f.lasti]
        if ins is None or ins.opname not in CALLS or not f.ins_inputs:
            return None
        callee = next((v for v in f.ins_inputs if callable(v)), None)
        if not (getattr(callee, "__module__", None) or "").startswith("torch"):
            return None
        marks, plain = [], []
        for v, sh in zip(f.ins_inputs, f.ins_shadows):
            if type(sh) is Passed and id(sh) in self.live:
                marks.append(sh)
            elif v is not callee:
                plain.append(v)
        if not marks or not all(isinstance(v, _PLAIN) or v is NULL for v in plain):
            return None

        def shadow(v):
            return next((m for m in marks if m.value is v and all(p is not v for p in plain)), None)
        return tuple(map(shadow, args)), {k: shadow(v) for k, v in kwargs.items()}

    def result(self, result):
        """The call's result for the mock: the stand-in of the cond's output if the call
        returns a tensor it reached through a :class:`Passed` slot."""
        out = self.passed_as(result, self.monitor.ret_shadow)
        return result if out is None else out

    def passed_as(self, v, sh):
        """The stand-in of the cond's output where ``v``, under shadow ``sh``, is a tensor an
        ``if`` passed through (a :class:`Passed` slot: the mock picks ``v`` or the operator's
        output for it, as the arms go on that call), else None.  What the call returns, and
        what a resume point takes for a frame's slot (the continuation must go on with the
        tensor the mock picked, not the one this run's arm left)."""
        return sh.out if type(sh) is Passed and id(sh) in self.live and sh.value is v else None

    def _follow(self, frame, ins) -> None:
        """A :class:`Passed` shadow must go only where it is followed (module docstring)."""
        name = ins.opname
        consumed, self.consumed = self.consumed, set()
        passed = self._passed.pop(id(frame), ()) if name in CALLS else ()
        if name in _MOVES:
            return
        if name in _CELL_OPS:
            self._cell(frame, ins)
            return
        marks = tracked(frame.ins_shadows, Passed, self.live)
        if not marks:
            return
        if name in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _METADATA:
            return
        if name == "LOAD_METHOD" and getattr(frame.stack[-1], "__self__", None) is marks[0].value:
            frame.shadow_stack[-1] = marks[0]   # the bound method: its self is still the slot's
            return
        if name in RETURNS and (frame.back is self.monitor.host_frame and len(marks) == 1
                                       or returns_to_caller(frame, self._levels) and calling(frame.back)):
            return   # to the calling instruction, or the call's result (see result)
        for m in marks:
            if id(m) not in consumed and id(m) not in passed:
                self._escaped(m, name)
                return

    def on_call(self, frame, callee, args, kwargs, result, entered):
        sandbox = self.monitor.sandbox
        unfollowed = sandbox is not None and not entered
        if unfollowed and self.segmenter.unfollowed_call(callee, args, kwargs, result):
            sandbox.stop(f"a value computed eagerly given to {getattr(callee, '__qualname__', callee)!s}"
                         " in a branch")
        if (self.live or self.loop_locals) and any(callee is f for f in ann.FRAME_READERS):
            how = getattr(callee, "__name__", "a frame reader")
            if self.live:
                self._escaped(next(iter(self.live.values())), how)
            marks = [m for m in frame.shadow_locals or () if type(m) is LoopLocal]
            if marks:
                self._refuse(marks[0].site, f"{how} may read a variable a loop left")

    def left_by_loop(self) -> str | None:
        """A resume point is to be taken here: it takes every live frame's variables, which
        its continuation may read.  One a loop left, whose value the record does not know
        (:class:`LoopLocal`: the real run's, never a graph's), is read as a frame reader
        reads it: the recording ends, unrolling that loop from the next one on; why, or None."""
        f = self.monitor.current
        while self.loop_locals and hasattr(f, "info"):
            for i, m in enumerate(f.shadow_locals or ()):
                if type(m) is LoopLocal:
                    why = f"a resume point after the loop takes {f.info.localsplus[i]}, which it left"
                    self._refuse(m.site, why)
                    return why
            f = f.back
        return None

    def _accumulator_use(self, frame, ins, consumed: set) -> None:
        """An :class:`Accumulated` list goes only to ``torch.stack``/``torch.cat`` (which took
        the buffer: ``consumed``) and moves between slots."""
        if ins.opname in _MOVES:
            return
        for m in tracked(frame.ins_shadows, Accumulated, self.accs):
            if id(m) not in consumed:
                self._refuse(m.site, f"a list a for loop appended to is used after it ({ins.opname})")

    def _symbolic_use(self, frame, ins) -> bool:
        """In a fork, does the instruction use a symbolic size or lifted number other than by
        moving it, handing it to a tensor operation (which records it symbolically) or to a
        Python function as a parameter (whose instructions are watched the same way)?
        magpy.dynamic's observer, which would specialise such a use, does not watch forks:
        the arm's graph would hold the size as a constant that no guard checks."""
        shapes = self.recorder.shapes
        if shapes is None or not shapes.active:
            return False
        matched, shapes.matched = shapes.matched, False
        return not (matched or ins.opname in _MOVES or not any(map(symbolic, frame.ins_shadows))
                    or ins.opname in CALLS and shapes.passed_on(frame))

    def _index_use(self, frame, ins, consumed: set) -> None:
        """In a fork of a range loop's body the index goes only into tensor operations (which
        took it: ``consumed``), moves between slots and is put in tuples of their arguments."""
        mark = LOOP_INDEX
        if not any(sh is mark or (type(sh) is Items and mark in sh) for sh in frame.ins_shadows):
            return
        if ins.opname in _MOVES or id(mark) in consumed:
            return
        if ins.opname == "BUILD_TUPLE":
            frame.shadow_stack[-1] = Items(frame.ins_shadows)
            return
        self.monitor.sandbox.stop(f"the loop's index is used in Python ({ins.opname})")

    def _escaped(self, mark, how: str) -> None:
        self._refuse(mark.site, f"a tensor an if left as it was is used where magpy cannot follow it ({how})")

    def _refuse(self, site, why: str) -> None:
        """End the recording (to be made again) and make the jump at ``site`` a break."""
        if self.monitor.sandbox is not None:
            self.monitor.sandbox.stop(why)   # in an arm: that arm's if is a break, nothing more
        _REFUSED[site] = why
        self.live.clear()
        self.accs.clear()
        brk = self.breaker.where(f"{why}; that jump is a break from the next recording on")
        self.breaker.stop(dataclasses.replace(brk, retry=True))

    def _cell(self, frame, ins) -> None:
        """A closure cell keeps its content's :class:`Passed` shadow (``_call_impl`` keeps its
        ``*args`` in one)."""
        cell = frame.locals[ins.arg]
        if ins.opname == "LOAD_DEREF":
            entry = self._cells.get(id(cell))
            if entry is not None and entry[0] is cell and entry[1] is frame.stack[-1]:
                frame.shadow_stack[-1] = entry[2]
            return
        sh = frame.ins_shadows[0] if ins.opname == "STORE_DEREF" else frame.shadow_locals[ins.arg]
        if tracked((sh,), Passed, self.live):
            self._cells[id(cell)] = (cell, cell.cell_contents, sh)
        else:
            self._cells.pop(id(cell), None)

    def _record(self, frame, t, found) -> str | None:
        """Run both arms and record the cond; the reason it cannot be, or None."""
        if_true, if_false = found
        truth = frame.pc == if_true[0]
        taken, other = (if_true, if_false) if truth else (if_false, if_true)
        with self._same_random_numbers() as drew:
            arm_o, fork_o, why = self._fork(frame, other[:2], other[2])
            if why is None:
                arm_t, fork_t, why = self._fork(frame, taken[:2], taken[2])
        if why is None and drew:
            why = "an arm draws random numbers"
        if why is None:
            why = self._merge(frame, t, truth, (arm_t, fork_t), (arm_o, fork_o))
        if why is None:
            self._adopt(frame, fork_t, fork_t.lasti)   # (the join it reached)
            self.conds.append(f"if at {_where(frame)}: torch.cond, the run took the "
                              f"{'true' if truth else 'false'} arm")
        return why

    def _record_loop(self, frame, t, found) -> str | None:
        """Record a ``while`` loop on tensor data as one ``torch.while_loop`` (module
        docstring); the reason it cannot be, or None."""
        body, test, exit, back_if = found
        with self._same_random_numbers() as drew:
            first = self._iterate(frame, body, test, back_if)
            second = self._iterate(first[1], body, test, back_if) if first[2] is None else first
        why = second[2] or ("the loop draws random numbers" if drew else None)
        if why is None:
            why = self._loop_operator(frame, t, first, second, found)
        if why is None:
            self.conds.append(f"while at {_where(frame)}: torch.while_loop")
        return why

    def _record_for(self, frame, over, found) -> str | None:
        """Record a ``for`` loop over the first dimension of the tensors ``over`` (``x``, or
        those ``enumerate``/``zip`` walk in step) as one ``torch.while_loop`` (module
        docstring).  Unlike other jumps, one that cannot be ends the recording: ``iter(x)`` ran
        unrecorded."""
        where, it = _where(frame), frame.stack[-1]
        frame.pc = found[0]   # (after enumerate(x) or zip(x, y): their GET_ITER gives the object itself)
        walk = _walk(it, over)
        why = self._counted(frame, walk, found) if walk else "its iterator is not over the tensors' slices"
        if why is not None:
            self._refuse(_site(frame), f"no while_loop for the for loop: {why}")
            return None
        self.conds.append(f"for at {where}: torch.while_loop over " + (
            "a symbolic number of slices" if self._symbolic_length(over[0])
            else f"more slices than config.max_unroll={config.max_unroll}") + _WALKERS[type(it)][1])
        return None

    def _record_range(self, frame, found, r, span) -> None:
        """Record ``for i in range(n)`` as one ``torch.while_loop`` if its body can be one
        (module docstring); if not, the loop runs on, unrolled (``iter(range(n))`` was no
        tensor operation: nothing is lost)."""
        where = _where(frame)
        why = self._counted(frame, _ranging(r, span), found)
        if why is not None:
            self._note(f"for at {where}: unrolled ({why})")
            return
        if span is not None:
            span.taken = True
        self.conds.append(f"for at {where}: torch.while_loop over " + (
            _range_words(r, "a symbolic n") if span is not None
            else f"{_range_words(r, r.stop)}, more steps than config.max_unroll={config.max_unroll}"))

    def _counted(self, frame, walk, found) -> str | None:
        """:meth:`_for_operator`, with the loop's index (``walk.index``) read by the body's
        tensor operations as the step count (``LOOP_INDEX``)."""
        self._counting = walk.index is not None
        try:
            return self._for_operator(frame, walk, found)
        finally:
            self._counting = False

    def _ranged(self, frame) -> None:
        """At ``iter(range(n))`` of a ``for`` loop: record it as a ``while_loop`` where ``n`` is
        symbolic or more than ``config.max_unroll`` (and the program is not inside a fork)."""
        found = for_loop(frame.info, frame.lasti)
        it = frame.stack[-1]
        if found is None or type(it) is not _RANGE_ITERATOR or self.monitor.sandbox is not None:
            return
        _, (r,), pos = it.__reduce__()
        span = frame.ins_shadows[0] if type(frame.ins_shadows[0]) is Span else None
        if pos or len(r) < 2 or not self.recorder.forks_allowed():
            return
        if span is None and len(r) <= config.max_unroll:
            return
        if r.start < 0 or r[-1] < 0:   # (x[t] from the end: the operator's rows count from the start)
            self._note(f"for at {_where(frame)}: unrolled (a negative index)")
            return
        if config.control_flow and self.enabled and self.breaker.brk is None and _site(frame) not in _REFUSED:
            self._record_range(frame, found, r, span)

    def _note(self, words: str) -> None:
        """An unrolled loop for explain, once (a loop in a loop meets it again)."""
        if words not in self.conds:
            self.conds.append(words)

    def _for_operator(self, frame, walk: _Walk, found) -> str | None:
        """Record the ``for`` loop of ``frame`` that takes the steps ``walk`` as one
        ``while_loop``; the reason it cannot be, or None."""
        head, body, exit = found
        binding = _binding(frame.info, body, walk.values[0])
        if binding is None:
            return "the loop stores its variables elsewhere than in local variables"
        shapes = self.recorder.shapes
        if shapes is not None and shapes.active and type(walk.over) is tuple:
            with self.recorder.paused():
                for rows in walk.rows:
                    for row, x in zip(rows, walk.over):
                        shapes.row_twin(row, x)
        accs = [v for v in frame.locals if type(v) is list and not v and _only_in(v, frame)]
        with self._same_random_numbers() as drew:
            arm1, fork1, why, items1, writes1 = self._step(frame, walk, 0, binding, found, accs)
            if why is None:
                arm2, fork2, why, items2, writes2 = self._step(fork1, walk, 1, binding, found, accs)
        if why is not None or drew:
            return why or "the loop draws random numbers"
        if not (len(frame.stack) == len(fork1.stack) == len(fork2.stack)):
            return "an iteration leaves a different stack"
        slots = _Slots(*(self._graph_values(f) for f in (frame, fork1, fork2)))
        if any(slots.holds(row) or any(c is row for c in arm2.captures) for row in walk.rows[0]):
            return "an iteration keeps the slice of the one before"
        var = [i for slot in binding[1] for i in slots.step(slot)]
        # (a walk of n >= 2 slices runs its body at least once: a tensor it carries may begin
        # without requires_grad and gain it, as eager's does, under autograd)
        groups, why = _carried_groups(slots.before, slots.after1, slots.after2, arm1, arm2, self._kind,
                                      gains_grad=self.loop_gradients and torch.is_grad_enabled())
        filled = [(lst, a, b) for lst, a, b in zip(accs, items1, items2) if a or b]
        why = why or _appended(filled, arm1, arm2, self._kind) or self._stored(writes1, writes2, arm1, arm2)
        if why is not None:
            return why
        stores = [(out, b) for (out, _), (_, b) in zip(writes1, writes2)]
        outs = [out for out, _ in stores]
        state = [slots.after1[g[0]] for g in groups]
        extra = [c for c in arm2.captures if all(c is not s for s in (*walk.rows[1], *state))]
        if any(arm1.made(c) for c in extra):
            return "an iteration reads a tensor the one before made but did not keep"
        firsts = [next((slots.before[i] for i in g if slots.before[i] is not NULL), NULL) for g in groups]
        read = [*walk.rows[0], *firsts, *extra, *outs]
        why = self._under_autograd(t for t in read if t is not NULL)
        if why is not None:
            return why
        real, why = self._run_real(frame, head, exit, [lst for lst, _, _ in filled], outs)
        held = slots.flat(real.locals + real.stack) if why is None else None
        if held is None:
            return why or "the loop leaves a different kind of value in a variable"
        finals = [held[g[0]] for g in groups]
        if any(held[i] is not t for g, t in zip(groups, finals) for i in g) or any(
                self.recorder.produced(t) is not None or t is v for t in finals for v in slots.before):
            return "the loop leaves a tensor from before it"
        with self.recorder.paused():
            stacks = [torch.stack(lst) for lst, _, _ in filled]
        self.recorder.for_loop(walk.over, walk.rows[1], walk.index, _entering(firsts, state), arm2, state,
                               extra, [slots.after2[g[0]] for g in groups], [b[0] for _, _, b in filled],
                               finals, stacks, stores)
        self._adopt(frame, real, exit)
        self._after_for(frame, {slots.slot[i] for g in groups for i in g}, {slots.slot[i] for i in var},
                        [(lst, out) for (lst, _, _), out in zip(filled, stacks)])
        return None

    def _stored(self, writes1: list, writes2: list, arm1, arm2) -> str | None:
        """Can the row stores ``out[t] = value`` of a loop's two steps (``(out, value)`` each)
        be the operator's: the same tensors each step, each once, contiguous tensors this
        piece's graph made before the loop (the operator's outputs are copied into them) that
        the body does not read (a fork does not run the stores, the operator does), given rows
        of their kind (``index_put`` converts nothing) that the step made or read?  The reason
        not."""
        ids = [id(o) for o, _ in writes1]
        if ids != [id(o) for o, _ in writes2] or len(set(ids)) < len(ids):
            return "the steps store rows into different tensors"
        for (out, a), (_, b) in zip(writes1, writes2):
            if arm1.made(out) or self.recorder.produced(out) is not self.recorder.piece:
                return "a row is stored into a tensor the graph did not make before the loop"
            if not out.is_contiguous():   # (index_put gives the operator's carried copy its layout)
                return "a row is stored into a strided tensor"
            if any(_shares_storage(c, out) for c in (*arm1.captures, *arm2.captures)):
                return "the loop's body reads a tensor it stores rows into"
            kind, row = self._kind(out), self._kind(b)
            if self._kind(a) != row or (row[0], row[1], row[3]) != (kind[0], kind[1][1:], kind[3]):
                return "a row stored is not of the tensor's dtype and row shape"
            if not (arm2.made(b) or any(b is c for c in arm2.captures)):
                return "a step stores a tensor it neither made nor read"
        return None

    def _run_real(self, frame, head, exit, lists: list, outs: list):
        """:meth:`_run_loop` for a ``for`` loop, on an iterator of its own (the program's is
        shared with the frame): a run that stops midway (a later step raises) leaves the
        program's iterator, the ``lists`` it appends to and the tensors ``outs`` it stores rows
        into as they were before the loop."""
        it = frame.stack[-1]
        own = frame.stack[-1] = _restarted(it)
        with self.recorder.paused():
            saved = [t.clone() for t in outs]
        try:
            real, why = self._run_loop(frame, head, exit, Sandbox(frozenset(map(id, lists)),
                                                                  writable=frozenset(map(id, outs)),
                                                                  iterators=(own,)))
        finally:
            frame.stack[-1] = it
        if why is not None:
            for lst in lists:
                lst.clear()   # (empty before the loop)
            with self.recorder.paused():
                for t, before in zip(outs, saved):
                    t.copy_(before)
        return real, why

    def _after_for(self, frame, carried: set, var: set, filled: list) -> None:
        """The shadows of the slots after a ``for`` loop recorded as a ``while_loop``: none for
        the ``carried`` (the run went on unobserved: new tensors), :class:`LoopLocal` for the
        loop variable's, :class:`Accumulated` for the lists the loop ``filled``."""
        site = _site(frame)
        for i in carried:
            _set_shadow(frame, i, None)
        for i in var:
            frame.shadow_locals[i] = LoopLocal(site)
            self.loop_locals = True
        for lst, out in filled:
            mark = Accumulated(lst, out, site)
            self.accs[id(mark)] = mark
            frame.shadow_locals[next(i for i, v in enumerate(frame.locals) if v is lst)] = mark

    def _step(self, frame, walk: _Walk, k: int, binding: tuple, found, accs):
        """Step ``k`` of ``walk`` through a ``for`` loop's body from ``frame``'s state, in a fork
        that stops back at the loop's head: ``(arm, fork, why not, the tensors it appended to
        each of the lists accs, its row stores (out, value))``; the lists are left as they were,
        the stores not run (:class:`Sandbox`).  The fork starts where the
        body binds the iterator's value (``binding``), with the value on the stack (unpacked
        where the body unpacks it); a loop's index in it has the shadow ``LOOP_INDEX``, which
        tensor operations read as the operator's step count."""
        head, _, exit = found
        start, _, unpacks = binding
        pushed = walk.pushed(k, unpacks)
        sizes = [len(lst) for lst in accs]
        counted = walk.index is not None
        sandbox = Sandbox(frozenset(map(id, accs)), [] if counted else None)
        frame.stack.extend(v for v, _ in pushed)
        frame.shadow_stack.extend(sh for _, sh in pushed)
        try:
            arm, fork, why = self._fork(frame, (start, exit), (head,), sandbox=sandbox, counted=counted)
        finally:
            del frame.stack[-len(pushed):]
            del frame.shadow_stack[-len(pushed):]
        appended = []
        for lst, n in zip(accs, sizes):
            appended.append(lst[n:])
            del lst[n:]
        return arm, fork, why, appended, sandbox.writes or []

    def _iterate(self, frame, body, test, back_if):
        """One iteration of the loop's body from ``frame``'s state, in a fork that stops at the
        test at its end: ``(arm, fork, None)`` or ``(None, None, why not)``; the arm's last
        operation gives whether the loop goes on (``arm.goes_on``)."""
        goes_on = []

        def at_test(f, arg):
            c = f.stack.pop()
            if not (isinstance(c, torch.Tensor) and math.prod(_meta(c)[1]) == 1):
                self.monitor.sandbox.stop("the loop's test is not on a tensor")
            goes_on.append(_goes_on(c, back_if))
            return _arrive(f, arg)
        arm, fork, why = self._fork(frame, (body, test), (test,), at_test)
        if why is None:
            arm.goes_on = goes_on[0]
        return arm, fork, why

    def _loop_operator(self, frame, t, first, second, found) -> str | None:
        """Compare the state before the loop and after one and two iterations, run the loop
        for real and put the ``while_loop`` into the graph."""
        (arm1, fork1, _), (arm2, fork2, _) = first, second
        body, _, exit, back_if = found
        if not (len(frame.stack) == len(fork1.stack) == len(fork2.stack)):
            return "an iteration leaves a different stack"
        before, after1, after2 = (self._graph_values(f) for f in (frame, fork1, fork2))
        groups, why = _carried_groups(before, after1, after2, arm1, arm2, self._kind)
        if why is not None:
            return why
        state = [after1[g[0]] for g in groups] + [arm1.goes_on]
        extra = [c for c in arm2.captures if all(c is not x for x in state)]
        if any(arm1.made(c) for c in extra):
            return "an iteration reads a tensor the one before made but did not keep"
        firsts = [next((before[i] for i in g if before[i] is not NULL), NULL) for g in groups]
        why = self._under_autograd(x for x in firsts + extra if x is not NULL)
        if why is not None:
            return why
        goes_on = _goes_on(t, back_if)
        outputs = [after2[g[0]] for g in groups]
        unbound = [f is NULL for f in firsts]
        # Variables the body sets before reading them enter the operator as zeros.
        entering = [_zeros_like(x) if f is NULL else f for f, x in zip(firsts, state)]
        if frame.pc != body:   # the loop does not run: the program keeps what it had
            finals = self._loop_not_run(frame, groups, firsts)
            self.recorder.while_loop(goes_on, entering, arm2, state, extra, outputs, finals, unbound)
            return None
        real, why = self._run_loop(frame, body, exit)
        if why is not None:
            return why
        held = real.locals + real.stack
        finals = [held[g[0]] for g in groups]
        if any(held[i] is not x for g, x in zip(groups, finals) for i in g) or any(
                self.recorder.produced(x) is not None or x is v for x in finals for v in before):
            return "the loop leaves a tensor from before it"
        self.recorder.while_loop(goes_on, entering, arm2, state, extra, outputs, finals, unbound)
        self._adopt(frame, real, exit)
        for i in (i for g in groups for i in g):   # (the run went on unobserved: new tensors)
            # Unbound if the loop does not run, which the mock cannot reproduce: a read after
            # the loop ends the recording (on_instruction).
            unbound = before[i] is NULL and i < len(frame.locals)
            _set_shadow(frame, i, LoopLocal(_site(frame)) if unbound else None)
            self.loop_locals |= unbound
        return None

    def _loop_not_run(self, frame, groups, firsts) -> list:
        """The stand-ins of a ``while_loop``'s outputs where the run did not enter the loop:
        each slot keeps its tensor, under a :class:`Passed` shadow (as an ``if`` that left it
        as it was); an unbound variable stays unbound (its stand-in only fills the place).
        ``firsts`` are the tensors as the graph knows them (an earlier if's output where that
        if passed the slot's tensor through), the shadows hold the slots' own."""
        finals, held = [], frame.locals + frame.stack
        for g, first in zip(groups, firsts):
            with self.recorder.paused():
                out = torch.zeros(()) if first is NULL else first.detach()   # (a key, never the program's)
            finals.append(out)
            if first is NULL:
                continue
            mark = Passed(out, held[g[0]], _site(frame))
            self.live[id(mark)] = mark
            for i in g:
                _set_shadow(frame, i, mark)
        return finals

    def _run_loop(self, frame, body, exit, sandbox: Sandbox | None = None):
        """Run the loop of ``frame`` for real, from ``body`` to ``exit``, on a copy of the
        frame, unobserved and unrecorded but under ``sandbox`` (the forks showed the iterations
        have no effects but those it allows, appending to lists and storing rows; should one
        have, this stops before it, leaving ``frame`` as it was): ``(the copy at exit, None)``
        or ``(None, why not)``."""
        mon, sandbox = self.monitor, sandbox or Sandbox()
        real = frame.copy(back=frame.back)
        saved = mon.observers, mon.sandbox
        mon.observers, mon.sandbox = [], sandbox
        try:
            with self.recorder.paused():
                real.ops = _region_table(mon.ops_for(frame.info), (body, exit), (exit,), _arrive)
                result = mon.execute(real)
        except ForkStopped:
            result = None
        except Exception as e:  # noqa: BLE001 - a later iteration raises: the loop stays a break
            sandbox.violation = sandbox.violation or f"an iteration raises {type(e).__name__}"
            result = None
        finally:
            mon.observers, mon.sandbox = saved
        if sandbox.violation is not None:
            return None, sandbox.violation
        if result is not _ARRIVED:
            return None, "the loop leaves its body (return, break)"
        return real, None

    @contextlib.contextmanager
    def _same_random_numbers(self):
        """Forks run code the program may not run: the generators are put back after them.
        Yields a list that is true afterwards if they drew numbers."""
        saved = rng.state()
        drew = []
        try:
            yield drew
        finally:
            if rng.changed(saved):
                drew.append(True)
            rng.restore(saved)

    def _fork(self, frame, region, joins, arrive=_arrive, sandbox: Sandbox | None = None,
              counted: bool = False):
        """Run the arm ``region`` of ``frame`` on a copy of it, to one of the ``joins``: ``(arm,
        fork, None)``, or ``(None, None, why not)``.  ``arrive`` runs instead of a join's
        instruction; the arm runs under ``sandbox`` (a loop body's: the lists it may append
        to); ``counted``: it is a range loop's body, whose tensor operations may read the step
        count."""
        sandbox = sandbox or Sandbox()
        fork = frame.copy(back=frame.back)
        fork.pc = region[0]
        with self._forking(sandbox):
            fork.ops = _region_table(self.monitor.ops_for(frame.info), region, joins, arrive)
            with self.recorder.arm(sandbox, counted) as arm:
                try:
                    result = self.monitor.execute(fork)
                except ForkStopped:
                    result = None
                except Exception as e:  # noqa: BLE001 - the arm fails on this input: not recordable
                    sandbox.violation = sandbox.violation or f"the arm raises {type(e).__name__}"
                    result = None
        if sandbox.violation is not None:
            return None, None, sandbox.violation
        if result is not _ARRIVED:
            return None, None, "an arm leaves the if (return, break, continue)"
        return arm, fork, None

    @contextlib.contextmanager
    def _forking(self, sandbox):
        mon, brk = self.monitor, self.breaker
        # (A fork inside a fork, for a nested if, puts the outer one's rules back after it.)
        saved = (mon.observers, mon.sandbox, torch.is_grad_enabled())
        shapes = self.recorder.shapes
        mon.observers = [self.builder, self] + ([shapes.fork_reads()] if shapes is not None else [])
        mon.sandbox = brk.sandbox = sandbox
        try:
            with self.segmenter.stepless(lambda why: sandbox.stop(f"{why} in a branch")):
                yield
        finally:
            mon.observers, outer, grad = saved
            mon.sandbox = brk.sandbox = outer
            torch._C._set_grad_enabled(grad)

    def _merge(self, frame, t, truth, taken, other) -> str | None:
        """Compare the forks at the join and put the cond into the graph."""
        (arm_t, fork_t), (arm_o, fork_o) = taken, other
        if len(fork_t.stack) != len(fork_o.stack):
            return "the arms leave different stacks"
        slots_t, slots_o = self._graph_values(fork_t), self._graph_values(fork_o)
        outputs: dict[tuple, list] = {}   # (id(a), id(b)) -> [a, b, slots]
        for i, (a, b) in enumerate(zip(slots_t, slots_o)):
            if a is b:
                continue
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                if self._kind(a) != self._kind(b):
                    return f"the arms give tensors of different kinds ({_meta(a)} and {_meta(b)})"
                outputs.setdefault((id(a), id(b)), [a, b, []])[2].append(i)
            elif not (type(a) is type(b) and is_immutable(a) and _equal(a, b)):
                return f"the arms leave different Python values ({type(a).__name__}, {type(b).__name__})"
        if len({k[0] for k in outputs}) != len(outputs):
            return "a tensor of the taken arm pairs with different tensors of the other"
        if not outputs:
            return None   # the arms' operations made nothing the program keeps
        stand_ins, marks = [], []
        held = fork_t.locals + fork_t.stack
        for a, _, slots in outputs.values():
            if arm_t.made(a):
                stand_ins.append(a)
                continue
            with self.recorder.paused():
                out = a.detach()   # (only a key for the cond's output: never the program's)
            mark = Passed(out, held[slots[0]], _site(frame))
            marks.extend((i, mark) for i in slots)
            stand_ins.append(out)
        self.recorder.cond(t, truth, (arm_t, [a for a, _, _ in outputs.values()]),
                           (arm_o, [b for _, b, _ in outputs.values()]), stand_ins)
        for i, mark in marks:
            _set_shadow(fork_t, i, mark)
            self.live[id(mark)] = mark
        return None

    def _under_autograd(self, tensors) -> str | None:
        """Why a loop that reads ``tensors`` cannot be an operator under autograd, or None."""
        if self.loop_gradients or not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors):
            return None
        return "the loop runs under autograd (its operator's gradients are eager's with backend eager only)"

    def _kind(self, t: torch.Tensor) -> tuple:
        """What tensors an operator's arms or steps give in one place must agree on: dtype,
        sizes and strides (symbolic ones as expressions over the recording's symbols, which
        the real tensors' sizes may match by chance), device, ``requires_grad``, layout."""
        shapes = self.recorder.shapes
        with torch._C.DisableTorchFunction():   # (magpy's own reads, not the program's)
            twin = shapes.fake(t) if shapes is not None and shapes.active else t
            return (t.dtype, _exprs(twin.shape), _exprs(twin.stride()), t.device, t.requires_grad, t.layout)

    def _graph_values(self, frame) -> list:
        """The values of ``frame``'s slots as the graph knows them: a tensor held through a
        :class:`Passed` slot is the earlier cond's output."""
        values = frame.locals + frame.stack
        shadows = frame.shadow_locals + frame.shadow_stack
        return [sh.out if type(sh) is Passed and id(sh) in self.live and sh.value is v else v
                for v, sh in zip(values, shadows)]

    def _adopt(self, frame, fork, join) -> None:
        """The frame goes on from the join in the taken fork's state."""
        frame.locals[:] = fork.locals
        frame.stack[:] = fork.stack
        if frame.shadow_stack is not None:
            frame.shadow_locals[:] = fork.shadow_locals
            frame.shadow_stack[:] = fork.shadow_stack
        frame.pc = join


def forget_refusals() -> None:
    """Forget which jumps and loops recordings found cannot be operators (``magpy.reset``)."""
    _REFUSED.clear()


def _set_shadow(frame, i: int, shadow) -> None:
    """Give slot ``i`` of ``frame`` (its locals, then its stack, as ``_graph_values`` lists
    them) ``shadow``."""
    n = len(frame.locals)
    if i < n:
        frame.shadow_locals[i] = shadow
    else:
        frame.shadow_stack[i - n] = shadow


def _where(frame) -> str:
    return f"{frame.code.co_filename}:{frame.f_lineno} ({frame.code.co_qualname})"


def _site(frame, at: int | None = None) -> tuple:
    """The jump or loop at ``frame``'s instruction (or code unit ``at``), across recordings."""
    code = frame.code
    return code.co_filename, code.co_firstlineno, code.co_qualname, frame.lasti if at is None else at


def _bound_self(f, first, live: dict):
    """The :class:`Passed` shadow of the bound method a CALL calls, if ``first`` (the
    operation's first argument) is its ``self``."""
    for v, sh in zip(f.ins_inputs, f.ins_shadows):
        if (type(sh) is Passed and id(sh) in live and sh.value is first
                and getattr(v, "__self__", None) is first):
            return sh
    return None


def _carried_groups(before, after1, after2, arm1, arm2, kind,
                    gains_grad: bool = False) -> tuple[list, str | None]:
    """The frame slots a loop carries, grouped by the tensor they hold (``h = new`` leaves
    two slots with one tensor), from the slots' values before the loop and after one and
    two iterations; or the reason they cannot be ``torch.while_loop`` operands.
    ``gains_grad``: a tensor that does not require grad before the loop may after the first
    iteration (the loop runs at least once, under autograd)."""
    groups: dict[int, list[int]] = {}
    for i, (v0, v1, v2) in enumerate(zip(before, after1, after2)):
        if v0 is v1 and v1 is v2:
            continue
        if isinstance(v1, torch.Tensor) and isinstance(v2, torch.Tensor) and (
                v0 is NULL or isinstance(v0, torch.Tensor)):
            why = _carried(v0, v1, v2, arm1, arm2, kind, gains_grad)
            if why is not None:
                return [], why
            groups.setdefault(id(v1), []).append(i)
        elif not (type(v0) is type(v1) is type(v2) and is_immutable(v0) and _equal(v0, v1)
                  and _equal(v1, v2)):
            return [], f"an iteration changes a Python value ({type(v0).__name__})"
    found = list(groups.values())
    for g in found:
        if any(after2[i] is not after2[g[0]] for i in g):
            return [], "variables that held one tensor after an iteration hold two after the next"
        if len({id(before[i]) for i in g if before[i] is not NULL}) > 1:
            return [], "variables that held different tensors before the loop hold one after an iteration"
    if len({id(after2[g[0]]) for g in found}) != len(found):
        return [], "variables that held different tensors after an iteration hold one after the next"
    return found, None


def _zeros_like(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=t.dtype, device=t.device)


def _carried(v0, v1, v2, arm1, arm2, kind, gains_grad: bool = False) -> str | None:
    """Can a variable that holds ``v0`` before the loop (NULL: unbound), ``v1`` after one
    iteration and ``v2`` after two be an operand of ``torch.while_loop``?  The reason not."""
    if not (arm1.made(v1) and arm2.made(v2)):
        return "an iteration sets a variable to a tensor from before it"
    first = v1 if v0 is NULL else v0
    k0, k1 = kind(first), kind(v1)
    if gains_grad and _gains_grad(k0, k1):
        k0 = k1
    if not k0 == k1 == kind(v2):
        return f"an iteration changes a tensor's kind ({_meta(first)} to {_meta(v1)})"
    if v0 is NULL and not v1.is_contiguous():
        return "an iteration sets a variable unbound before the loop to a strided tensor"
    return None


_REQUIRES_GRAD = 4   # the position of requires_grad in a kind (Branches._kind)


def _gains_grad(k0: tuple, k1: tuple) -> bool:
    """Do kinds ``k0`` and ``k1`` differ only in that ``k1`` requires grad?"""
    i = _REQUIRES_GRAD
    return not k0[i] and k1[i] and k0[:i] + k0[i + 1:] == k1[:i] + k1[i + 1:]


def _goes_on(c: torch.Tensor, back_if: bool) -> torch.Tensor:
    """Whether a loop whose test gave ``c`` goes on, as a new 0-d bool tensor (what
    ``torch.while_loop``'s condition returns); recorded like the program's operations."""
    return ((c != 0) if back_if else (c == 0)).reshape(())


def _meta(t: torch.Tensor) -> tuple:
    """``t``'s metadata in words (magpy's own read, not the program's)."""
    with torch._C.DisableTorchFunction():
        return t.dtype, tuple(t.shape), t.device, t.requires_grad, t.layout


def _exprs(sizes) -> tuple:
    return tuple(s.node.expr if isinstance(s, torch.SymInt) else s for s in sizes)


def _equal(a, b) -> bool:
    try:
        return bool(a == b) or (a != a and b != b)
    except Exception:  # noqa: BLE001 - an odd __eq__: not equal
        return False



_RANGE_ITERATOR = type(iter(range(0)))
_TUPLE_ITERATOR = type(iter(()))


def _iterated(it) -> tuple | None:
    """The tensors a tuple iterator that has not started goes over (``iter(x)`` of a tensor
    is one over ``x.unbind(0)``), else None."""
    if type(it) is not _TUPLE_ITERATOR:
        return None
    _, (items,), pos = it.__reduce__()
    return items if pos == 0 and all(isinstance(t, torch.Tensor) for t in items) else None


@dataclasses.dataclass(frozen=True)
class _Walk:
    """The steps of a ``for`` loop recorded as a ``while_loop``: ``over``, the tensors whose
    first dimension it walks in step, or (a range) its number of steps; ``values``, what the
    iterator gives on the first two steps, and ``rows``, the slices of ``over`` each holds;
    ``index``, ``(start, step)`` of the number each gives (range, enumerate) or None, and
    ``shadow``, a value's shadow (``LOOP_INDEX`` where that number is)."""

    over: object
    values: tuple
    rows: tuple
    index: tuple | None = None
    shadow: object = None

    def pushed(self, k: int, unpacks: bool) -> list:
        """The ``(value, shadow)`` pairs step ``k`` puts on the stack for the body: its value,
        or the value's items in the order ``UNPACK_SEQUENCE`` pushes them."""
        v = self.values[k]
        if not unpacks:
            return [(v, self.shadow)]
        return list(zip(reversed(v), reversed(self.shadow or (None,) * len(v))))


def _sliced(iterators, over: tuple) -> _Walk | None:
    """The walk of tuple iterators over the slices of the tensors ``over`` in step: each
    value the row of one slice of each (one tensor: the slice); None if they are not such
    iterators, not started."""
    items = [_iterated(i) for i in iterators]
    if len(items) != len(over) or any(s is None for s in items):
        return None
    rows = tuple(zip(*(s[:2] for s in items)))
    return _Walk(over, tuple(r if len(r) > 1 else r[0] for r in rows), rows)


def _walk_tuple(it, over):
    return _sliced([it], over)


def _walk_enumerate(it, over):
    """``enumerate`` of a tensor's slices or of a ``zip`` of them: each value after its number."""
    inner, start = it.__reduce__()[1]
    walk = _walk_zip(inner, over) if type(inner) is zip else _sliced([inner], over)
    if walk is None:
        return None
    values = tuple((start + k, v) for k, v in enumerate(walk.values))
    return _Walk(over, values, walk.rows, (start, 1), Items((LOOP_INDEX, None)))


def _walk_zip(it, over):
    return _sliced(it.__reduce__()[1], over)


# How a for loop recorded as a while_loop walks tensors, by its iterator's type: its _Walk,
# and the words explain adds.
_WALKERS = {_TUPLE_ITERATOR: (_walk_tuple, ""), enumerate: (_walk_enumerate, " (enumerate)"),
            zip: (_walk_zip, " (zip)")}


def _walk(it, over: tuple) -> _Walk | None:
    """The walk of ``it``, the iterator of a ``for`` loop over the slices of tensors ``over``
    (not started); None if it is none magpy knows."""
    walker = _WALKERS.get(type(it))
    return None if walker is None else walker[0](it, over)


def _range_words(r: range, end) -> str:
    """``r`` as explain names it, with ``end`` (words for a symbolic one) as its end."""
    return f"range({end})" if (r.start, r.step) == (0, 1) else f"range({r.start}, {end}, {r.step})"


def _ranging(r: range, span) -> _Walk:
    """The walk of ``range`` ``r``, whose end is ``span.stop`` (a SymInt) if ``span``: each
    step gives its index, the operator's number of steps is ``len(r)``."""
    if span is None:
        return _Walk(len(r), (r[0], r[1]), ((), ()), (r.start, r.step), LOOP_INDEX)
    with torch._C.DisableTorchFunction():   # (torch.sym_max is a torch function: magpy's own)
        n = torch.sym_max(-((r.start - span.stop) // r.step), 0)   # (len of a range, either sign)
    return _Walk(n, (r[0], r[1]), ((), ()), (r.start, r.step), LOOP_INDEX)


# The restart of an iterator the real run of a for loop takes, by type, from its __reduce__
# arguments (others: a range or tuple iterator).
_RESTARTS = {enumerate: lambda args: enumerate(_restarted(args[0]), args[1]),
             zip: lambda args: zip(*map(_restarted, args))}


def _restarted(it):
    """A copy of ``it``, a ``for`` loop's iterator that has not started: a range or tuple
    iterator, or ``enumerate``/``zip`` of those."""
    args = it.__reduce__()[1]
    again = _RESTARTS.get(type(it))
    return iter(args[0]) if again is None else again(args)


def _iterating(f, x) -> tuple:
    """``(the for loop, the tensors it walks the slices of in step, the code unit after which
    the loop's iterator is made)`` if ``x.unbind(0)`` runs for the iterator of a ``for`` loop
    of frame ``f``: ``iter(x)`` at its ``GET_ITER``, the call ``enumerate(x)``/``zip(x, y,
    ...)`` whose result that ``GET_ITER`` takes, or such a ``zip`` in ``enumerate(zip(x, y))``;
    else ``(None, (), None)``."""
    found = for_loop(f.info, f.lasti)
    if found is not None:
        return found, (x,), f.lasti
    call = _walk_call(f, x)
    ready = f.lasti if call is not None else None
    if call is not None and call[0] is zip and for_loop(f.info, f.info.ops[ready][2]) is None:
        ready = _enumerating(f)
    found = for_loop(f.info, f.info.ops[ready][2]) if ready is not None else None
    return (found, call[1], ready) if found is not None else (None, (), None)


def _walk_call(f, x) -> tuple | None:
    """``(callee, the tensors)`` of the call ``enumerate(x)``/``zip(x, y, ...)`` at ``f``'s
    instruction, if that is one."""
    ins = f.info.instructions[f.lasti]
    if ins is None or ins.opname != "CALL" or not f.ins_inputs:
        return None
    callee, args = bytecode.call_operands(f.ins_inputs)
    if callee is enumerate and len(args) == 2 and type(args[1]) is int and args[1] >= 0:
        args = args[:1]   # (a start: the index's, not a tensor; a negative one indexes from the end)
    tensors = all(isinstance(a, torch.Tensor) for a in args) and any(a is x for a in args)
    return (callee, args) if tensors and (callee is zip or callee is enumerate and len(args) == 1) else None


# What may come between the call of a zip and enumerate's call taking it: the start (a
# constant) and, before 3.12, the PRECALL.
_BEFORE_ENUMERATE = frozenset({"LOAD_CONST", "PRECALL"})


def _enumerating(f) -> int | None:
    """The code unit of the call ``enumerate(<the zip f's call makes>[, a constant start])``
    right after that call, the builtin ``enumerate`` (nothing of the program runs between
    the two calls); else None."""
    if not any(v is enumerate for v in f.stack[-2:]):   # (the callee beside its NULL, by version)
        return None
    consts = 0
    for at in _following(f):
        ins = f.info.instructions[at]
        if ins is None or ins.opname == "LOAD_CONST" and not (type(ins.argval) is int and ins.argval >= 0):
            return None
        if ins.opname == "CALL":
            return at if ins.arg == 1 + consts else None
        if ins.opname not in _BEFORE_ENUMERATE:
            return None
        consts += ins.opname == "LOAD_CONST"
    return None


# How many instructions after a zip/enumerate call a loop may start and still be the one it
# feeds through other calls (``enumerate(zip(x, y))``, ``list(zip(x, y))``).
_WRAPPED_WITHIN = 5


def _wrapped_walk(f, x) -> bool:
    """Is the call at ``f``'s instruction an ``enumerate``/``zip`` of tensors whose result
    another call wraps before a ``for`` loop takes it (not a walk :func:`_iterating` knows)?"""
    return _walk_call(f, x) is not None and any(for_loop(f.info, at) is not None for at in _following(f))


def _following(f):
    """The code units of the instructions after ``f``'s, up to ``_WRAPPED_WITHIN`` of them."""
    at = f.info.ops[f.lasti][2]
    for _ in range(_WRAPPED_WITHIN):
        if at is None or at >= len(f.info.instructions):
            return
        yield at
        at = f.info.ops[at][2]


def _binding(info, body: int, value) -> tuple | None:
    """How a ``for`` loop's body, from code unit ``body``, binds the iterator's ``value``:
    ``(the code unit the forks start at, the local variables' slots it stores, whether it
    unpacks the value first)``; None unless it stores into local variables (unpacking only
    tuples of as many, ``for t, (a, b) in ...`` too)."""
    ins = info.instructions[body]
    unpacks = _unpacks(ins, value)
    if ins is not None and ins.opname == "UNPACK_SEQUENCE" and not unpacks:
        return None
    start = info.ops[body][2] if unpacks else body
    slots, at, left = [], start, list(value) if unpacks else [value]   # the values still to store
    while left:
        store = info.instructions[at]
        if _unpacks(store, left[0]):   # (the fork runs this one: the value is a real tuple)
            left[:1] = left[0]
        elif store is not None and store.opname in bytecode.FAST_STORES:
            stored = bytecode.fast_slots(bytecode.FAST_WRITES, store)
            slots += stored
            del left[:len(stored)]
        else:
            return None
        at = info.ops[at][2]
    return start, slots, unpacks


def _unpacks(ins, value) -> bool:
    """Is ``ins`` an ``UNPACK_SEQUENCE`` of the tuple ``value``?"""
    return (ins is not None and ins.opname == "UNPACK_SEQUENCE" and type(value) is tuple
            and ins.arg == len(value) > 0)


def _only_in(lst: list, frame) -> bool:
    """Is the frame's one local variable holding ``lst`` its only reference (nothing else
    could read what a loop appends to it)?"""
    # (No closure over lst here: its cell would be a referrer.)
    return [id(v) for v in frame.locals].count(id(lst)) == 1 and gc.get_referrers(lst) == [frame.locals]


def _appended(filled: list, arm1, arm2, kind) -> str | None:
    """Each step appended one tensor its arm made, of one kind, to each list of ``filled``
    (``(list, what the first step appended, what the second did)``)?  The reason not."""
    for _, (a, *more1), (b, *more2) in ((f[0], f[1] or [None], f[2] or [None]) for f in filled):
        if more1 or more2 or not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return "an iteration appends something else than one tensor to a list"
        if not (arm1.made(a) and arm2.made(b)):
            return "an iteration appends a tensor from before it to a list"
        if kind(a) != kind(b):
            return "iterations append tensors of different kinds to a list"
    return None


def _appends_to(callee, args: tuple) -> int | None:
    """The id of the list ``callee(*args)`` appends to, if it is ``list.append``."""
    if callee is list.append:
        return id(args[0]) if args and type(args[0]) is list else None
    owner = getattr(callee, "__self__", None)
    return id(owner) if type(owner) is list and getattr(callee, "__name__", None) == "append" else None


class _Slots:
    """A frame's slot values before a loop and after one and two steps, where a slot holding
    a tuple of tensors (``state = (h, c)``) that the steps make anew counts as one slot per
    member: ``slot[i]`` is the frame slot of flat position ``i``."""

    def __init__(self, before: list, after1: list, after2: list):
        self.sizes = [len(b) if _tensor_tuples(a, b, c) else None for a, b, c in zip(before, after1, after2)]
        self.before, self.after1, self.after2 = (self.flat(v) for v in (before, after1, after2))
        self.slot = [i for i, n in enumerate(self.sizes) for _ in range(n or 1)]

    def flat(self, values: list) -> list | None:
        """``values`` (of the frame's slots) with the tuple slots' members in their place; None
        if such a slot holds something else."""
        out = []
        for v, n in zip(values, self.sizes):
            if n is None:
                out.append(v)
            elif type(v) is tuple and len(v) == n:
                out.extend(v)
            else:
                return None
        return out

    def holds(self, v) -> bool:
        return any(a is v for a in self.after2)

    def step(self, slot: int) -> list[int]:
        """The positions of the loop variable, frame slot ``slot``; they compare as unchanged
        (a step's input, not carried)."""
        var = [i for i, s in enumerate(self.slot) if s == slot]
        for i in var:
            self.before[i] = self.after1[i] = self.after2[i] = _STEP
        return var


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():   # (magpy's own reads)
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _tensor_tuples(*values) -> bool:
    """Are ``values`` tuples of one length holding tensors only, made anew by each step?"""
    if not all(type(v) is tuple for v in values) or values[1] is values[2]:
        return False
    n = len(values[0])
    return all(len(v) == n and all(isinstance(t, torch.Tensor) for t in v) for v in values)


def _entering(firsts: list, state: list) -> list:
    """The carried operands of a ``for`` loop's ``while_loop``: the tensors before it (a copy
    where one enters twice: ``state = (z, z)``; operands must not alias), zeros for a
    variable the loop sets before reading (recorded like the program's operations)."""
    seen, out = set(), []
    for f, s in zip(firsts, state):
        out.append(_zeros_like(s) if f is NULL else f.clone() if id(f) in seen else f)
        seen.add(id(f))
    return out
