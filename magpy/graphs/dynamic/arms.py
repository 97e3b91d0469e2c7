"""An ``if`` on lifted ints whose arms only compute numbers (``magpy.graphs.dynamic``): one record
for both sides, instead of one per outcome.

A learning-rate schedule branches on its step (``if step < warmup: return float(step) /
warmup`` ... ``return max(0.0, (total - step) / (total - warmup))``).  Where the condition
compares lifted ints (or a lifted int and a constant) and each arm is straight-line code that
only loads local variables, constants and the builtins ``float``, ``max``, ``min`` and
``abs``, computes with them (``+ - *``, ``/`` by a nonzero constant, unary ``-``) and either
stores floats into local variables up to where the arms meet or returns a float, the record
keeps the whole ``if`` as a conditional expression the mock evaluates for each call's ints
(``(A if s0 < 4 else B)``, Python's own, which computes only the arm the program would) and
guards neither outcome.

Both arms are evaluated here, from the frame's state at the jump, by :func:`evaluate_arms`
(a small evaluator of that instruction subset, on the values and their shadows: no
program code runs); the monitor then runs the taken arm for real, and where it ends (the
join, or the return) the slots the arms set get the conditional shadow.  Anything else (a
store into program state, a call of anything else, another jump, an int result, a value
the evaluator cannot follow) keeps today's guard on the outcome.  The builtins an arm
loads are read in the RefGraph as the monitor's own loads are (``RefGraph.read_builtin``),
so the guard checks them for both arms.
"""
from __future__ import annotations

import math
import operator

import torch

from magpy.capture.monitor import NULL, bytecode, operators
from magpy.graphs.dynamic.lifted_shadows import IntFloat, SymInt, int_float

# The builtins an arm may call: (callee, its source, the argument types it takes, the ints'
# version: the same computation on SymInts, or None: not of lifted ints).
_CALLEES = ((float, "float", (int, float), None), (max, "max", (int, float), torch.sym_max),
            (min, "min", (int, float), torch.sym_min), (abs, "abs", (float,), None))
_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_NOOPS = frozenset({"NOP", "PRECALL", "CACHE", "EXTENDED_ARG"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST"})
_STORES = frozenset({"STORE_FAST", "STORE_FAST_STORE_FAST"})
_MAX_STEPS = 256


class Refused(Exception):
    """An arm does more than the evaluator follows."""


class _Arm:
    """Evaluates one arm: ``slots``, the frame's local variables as (value, shadow), the
    stack the arm pushed, the builtins it loaded (name -> value) and the slots it stored."""

    def __init__(self, frame, eager_value):
        self.frame, self.eager_value = frame, eager_value
        self.slots = list(zip(frame.locals, frame.shadow_locals))
        self.stack: list[tuple] = []
        self.builtins: dict[str, object] = {}
        self.stored: set[int] = set()

    def run(self, start: int, end: int | None) -> tuple[str, int, object]:
        """From code unit ``start`` until it reaches code unit ``end`` or beyond (the join) or
        returns: ``("join", where, None)`` or ``("return", its code unit, (value, shadow))``."""
        info, pc = self.frame.info, start
        for _ in range(_MAX_STEPS):
            if end is not None and pc >= end:
                if self.stack:
                    raise Refused("the arm leaves values on the stack")
                return "join", pc, None
            ins = info.instructions[pc]
            if ins is None:
                raise Refused("no instruction")
            if ins.opname == "RETURN_VALUE":
                if len(self.stack) != 1:
                    raise Refused("a return under other values")
                return "return", pc, self.stack[0]
            target = self._step(ins, info.ops[pc])
            if target is not None and target <= pc:
                raise Refused("a backward jump")
            pc = info.ops[pc][2] if target is None else target
        raise Refused("too long")

    def _step(self, ins, op):
        """Carry out ``ins``; the code unit it jumps to, or None."""
        name = ins.opname
        if name in _NOOPS:
            return None
        if name == "JUMP_FORWARD":
            return op[1]
        if name in _LOADS:
            for slot in bytecode.fast_slots(bytecode.FAST_READS, ins):
                self.stack.append(_number(self.slots[slot]))
        elif name in _STORES:
            for slot in bytecode.fast_slots(bytecode.FAST_WRITES, ins):
                self.slots[slot] = self._pop()
                self.stored.add(slot)
        elif name == "LOAD_CONST":
            self.stack.append(_number((ins.argval, None)))
        elif name == "LOAD_GLOBAL":
            self._load_global(ins.argval, op[1][1])
        elif name == "PUSH_NULL":
            self.stack.append((NULL, None))
        elif name == "BINARY_OP":
            b, a = self._pop(), self._pop()
            self.stack.append(self._binary(operators.BINARY[ins.arg % len(operators.BINARY)][0], a, b))
        elif name == "UNARY_NEGATIVE":
            self.stack.append(self._negative(self._pop()))
        elif name == "CALL":
            self._call(ins.arg)
        else:
            raise Refused(name)
        return None

    def _pop(self) -> tuple:
        if not self.stack:
            raise Refused("a value from before the if")
        return self.stack.pop()

    def _load_global(self, name: str, null: int) -> None:
        g, b = self.frame.globals, self.frame.builtins
        value = b.get(name) if name not in g else None
        if not any(value is c[0] for c in _CALLEES):
            raise Refused(f"global {name}")
        self.builtins[name] = value
        if null:
            self.stack.append((NULL, None))
        self.stack.append((value, None))

    def _binary(self, symbol, a, b):
        (x, sx), (y, sy) = a, b
        if type(x) is int and type(y) is int and symbol in _INT_OPS:
            op = _INT_OPS[symbol]
            return op(x, y), op(self._int(a), self._int(b)) if sx is not None or sy is not None else None
        if symbol not in _FLOAT_OPS or symbol == "/" and (sy is not None or not y):
            raise Refused(f"float {symbol}")   # (a divisor that could be zero raises)
        out = _FLOAT_OPS[symbol](x, y)
        return out, self._float((a, b), f"({{}} {symbol} {{}})", out)

    def _negative(self, a):
        x, sx = a
        if type(x) is int:
            return -x, -sx if sx is not None else None
        return -x, self._float((a,), "(-{})", -x)

    def _call(self, argc: int) -> None:
        args = [self._pop() for _ in range(argc)][::-1]
        below = [self._pop(), self._pop()]
        callees = [v for v, _ in below if v is not NULL]
        if len(callees) != 1:
            raise Refused("a method call")
        entry = next((c for c in _CALLEES if c[0] is callees[0]), None)
        if entry is None or not all(type(v) in entry[2] for v, _ in args):
            raise Refused("a call")
        fn, source, _, symbolic = entry
        values = [v for v, _ in args]
        out = fn(*values)
        if all(s is None for _, s in args):
            self.stack.append(_number((out, None)))
        elif all(type(v) is int for v in values) and type(out) is int and symbolic is not None:
            with torch._C.DisableTorchFunction():
                self.stack.append((out, symbolic(*map(self._int, args))))
        elif type(out) is float and (fn is float or all(type(v) is float for v in values)):
            # (max/min of an int and a float: its type would depend on the values)
            self.stack.append((out, self._float(args, f"{source}({', '.join(['{}'] * len(args))})", out)))
        else:
            raise Refused("a call")

    def _int(self, operand):
        """An int operand of SymInt arithmetic: its SymInt, or a constant the record holds."""
        v, s = operand
        if s is None and self.eager_value(v):
            raise Refused("a number an eager step computed")
        return v if s is None else s

    def _float(self, operands, template: str, out):
        """The shadow of float ``out`` computed as ``template`` from ``operands``: None if they
        are constants, else an IntFloat."""
        if type(out) is not float or not math.isfinite(out):
            raise Refused("not a finite float")
        if all(s is None for _, s in operands):
            return None
        return int_float(tuple(_part(o, self.eager_value) for o in operands), template, out)


def _part(operand, eager_value):
    """``operand`` (value, shadow) as a part of an IntFloat: its shadow, or the constant's
    source (a number the record holds: not one an eager step computed)."""
    v, s = operand
    if type(s) is IntFloat or type(s) is SymInt:
        return s
    if s is None and math.isfinite(v) and not eager_value(v):
        return repr(v)
    raise Refused("a value the record does not hold")


def _number(pair) -> tuple:
    """A value an arm may hold: an int or float (lifted, computed from lifted ints, or held)."""
    v, s = pair
    if type(v) not in (int, float) or s is not None and type(s) not in (IntFloat, SymInt):
        raise Refused("not a number")
    if type(s) is SymInt and type(v) is not int or type(s) is IntFloat and s.value is not v:
        raise Refused("an out-of-date shadow")
    return pair


class Conditional:
    """An ``if`` on lifted ints under way in ``frame``, both arms evaluated: ``end``, where
    the taken arm ends (the join's code unit, or its return's); ``results``, for each slot
    either arm stores (None: the returned value, the stack's top), the true and false arms'
    parts (``int_float``'s) and the taken arm's value; ``cond``, the condition's parts and
    symbol; ``fallback``, guards the outcome instead."""

    __slots__ = ("frame", "end", "results", "cond", "fallback")

    def __init__(self, frame, end, results, cond, fallback):
        self.frame, self.end, self.results, self.cond, self.fallback = frame, end, results, cond, fallback

    def arrived(self) -> list[tuple] | None:
        """At the end of the taken arm: ``[(slot, conditional shadow)]``; None if the frame's
        values are not the ones the evaluator found."""
        frame, out = self.frame, []
        for slot, (if_true, if_false, expected) in self.results.items():
            value = frame.stack[-1] if slot is None else frame.locals[slot]
            if type(value) is not float or value != expected:
                return None
            parts = (if_true, *self.cond[0], if_false)
            out.append((slot, int_float(parts, f"({{}} if ({{}} {self.cond[1]} {{}}) else {{}})", value)))
        return out


def evaluate_arms(frame, jump: int, outcome: bool, eager_value) -> tuple[int, dict, dict] | None:
    """Both arms of the conditional jump at code unit ``jump`` of ``frame`` (about to run:
    the frame is at the jump, the condition on the stack): ``(where the arm taken when the
    condition is ``outcome`` ends, {slot or None: (true arm's, false arm's)}, the builtins
    they load)``; None if they are not the pattern this follows (module docstring)."""
    info = frame.info
    ins = info.instructions[jump]
    jumps_if = bytecode.BRANCH_JUMPS.get(ins.opname) if ins is not None else None
    if jumps_if is None:
        return None
    _, target, fall = info.ops[jump]
    try:
        first = _Arm(frame, eager_value)
        kind, end_fall, ret_fall = first.run(fall, target)
        second = _Arm(frame, eager_value)
        kind2, end_jump, ret_jump = second.run(target, end_fall if kind == "join" else None)
    except (Refused, ArithmeticError):   # (float() of a huge int overflows)
        return None
    if kind2 != kind or kind == "join" and end_jump != end_fall:
        return None
    arms = {not jumps_if: (first, end_fall, ret_fall), jumps_if: (second, end_jump, ret_jump)}
    if kind == "return":
        pairs = {None: (arms[True][2], arms[False][2])}
    else:
        slots = arms[True][0].stored | arms[False][0].stored
        pairs = {s: (arms[True][0].slots[s], arms[False][0].slots[s]) for s in slots}
    try:
        results = {s: (_float_part(t, eager_value), _float_part(f, eager_value), (t, f)[not outcome][0])
                   for s, (t, f) in pairs.items()}
    except Refused:
        return None
    return arms[outcome][1], results, {**first.builtins, **second.builtins}


def _float_part(pair, eager_value):
    """An arm's float result as a part of the conditional: its IntFloat, or a constant's source."""
    if type(pair[0]) is not float:
        raise Refused("not a float")
    return _part(_number(pair), eager_value)
