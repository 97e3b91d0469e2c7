"""Where control flow goes, read from a code object's bytecode alone (magpy.graphs.controlflow): the
arms of an ``if`` and where they join, the body, closing test and exit of a ``while``, the
head, body and exit of a ``for`` and how its body binds each step's value.  The jump
instructions of each Python version come from magpy.capture.monitor.bytecode.
"""
from __future__ import annotations

import dis

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.observer import RETURNS


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


def binding_of(info, body: int, value) -> tuple | None:
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
