"""Floats read in the graph: ``n = t.item()`` of a tensor a graph has need not end the graph.

The graph computes the float itself, as the 0-d float64 tensor it would take it as
(``OpRecorder.record_number``), and floating tensor arithmetic on ``n`` uses that tensor.
The step ``n = float(<that tensor>)`` is made only where the program needs the number in
Python (a check, a step, a resume point, the final state): there the piece ends.  Until
then ``n`` is a value computed eagerly of the segmenter's (``magpy.records.segments``)
whose step waits here.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import sys
import types

import torch

from magpy.errors import GraphBreak
from magpy.graphs.assertions import checks_in_graph
from magpy.records.eager_steps import Step, leaves, picks

_NUMBER_READS = (float, torch.Tensor.item, torch.Tensor.__float__)


def _operation(op):
    return lambda compute, *xs: compute(op, xs)


def _pick(compare):
    return lambda compute, a, b: compute(torch.where, (compute(compare, (b, a)), b, a))


# Python arithmetic on floats the graph computes, as graph operations: (function, how the
# graph computes it with ``compute(op, args)``).  In place on a float is not in place on its
# tensor; max and min keep the first item unless the second compares greater (less), as
# CPython's do.
_GRAPH_ARITHMETIC = (*((getattr(operator, prefix + name), _operation(getattr(operator, name)))
                       for name in ("add", "sub", "mul", "truediv") for prefix in ("", "i")),
                     (operator.neg, _operation(operator.neg)),
                     (max, _pick(operator.gt)), (min, _pick(operator.lt)))
_DIVISIONS = (operator.truediv, operator.itruediv)


class InGraph:
    """A float read from tensor data that the graph computes itself (``standin``, see
    :meth:`GraphFloats.read`); ``step`` makes it in Python once the program needs it."""

    __slots__ = ("step", "standin", "value")

    def __init__(self, step: Step, standin: torch.Tensor, value: float):
        self.step, self.standin, self.value = step, standin, value

    def held(self) -> bool:
        """Does anything but this record still hold the float (the program's state, its
        result)?  Then the mock must make it.  (References: ``self.value`` and the call's.)"""
        return sys.getrefcount(self.value) > 2


class GraphFloats:
    """The floats of a segmenter's run read in the graph that the program has not needed in
    Python yet, by their variable (module docstring).  Each is a value computed eagerly of the
    segmenter's under that variable until its step is made."""

    def __init__(self, segmenter):
        self.segmenter = segmenter
        self.lazy: dict[str, InGraph] = {}   # variable -> float read in the graph, not needed in Python yet

    def read(self, var: str, fn, args: tuple, value, brk: GraphBreak) -> bool:
        """Keep the float ``value = fn(*args)`` read from tensor data in the graph, if it is one."""
        seg = self.segmenter
        src = _number_source(fn, args, value)
        if src is None or seg.recorder._opaque or not seg.graph_knows(src):
            return False
        standin = seg.recorder.record_number(src)
        if seg.breaker.brk is None:
            self._keep(Step("call", -1, var, float, (standin,), None, brk, True, seg.at()), standin, value)
        return True

    def arithmetic(self, var: str, fn, args: tuple, value) -> bool:
        """Keep ``value = fn(*args)``, Python arithmetic on floats read in the graph (``n + 1``,
        ``2 * n``, ``n / 3``, ``max(n, 1e-8)``), in the graph too (float64 tensors compute as
        Python floats do)."""
        seg = self.segmenter
        op = next((g for f, g in _GRAPH_ARITHMETIC if fn is f), None)
        if op is None or type(value) is not float or picks(fn) and len(args) != 2:
            return False
        lazies = list(map(self.in_graph, args))
        if not any(lazies) or not all(lz is not None or _plain_number(a) and id(a) not in seg.dynamic
                                      and seg.lifted_float(a) is None for a, lz in zip(args, lazies)):
            return False   # (a lifted float would be a constant of the graph: a step takes it)
        if any(fn is f for f in _DIVISIONS) and (lazies[1] is not None or not args[1]):
            return False   # (Python raises for a zero divisor, where the graph gives inf)
        operands = tuple(a if lz is None else lz.standin for a, lz in zip(args, lazies))
        if seg.recorder._opaque:
            return False
        given_back = [i for i, a in enumerate(args) if a is value]
        if given_back:
            return self._same_pick(fn, given_back[0], operands)
        standin = op(seg.recorder.compute, *operands)
        if seg.breaker.brk is not None:
            return True
        with seg.recorder.paused():
            got = float(standin)
        if not _same_float(got, value):
            return False
        first = next(lz for lz in lazies if lz is not None)
        self._keep(dataclasses.replace(first.step, var=var, args=(standin,)), standin, value)
        return True

    def _keep(self, step: Step, standin: torch.Tensor, value: float) -> None:
        self.lazy[step.var] = InGraph(step, standin, value)
        self.segmenter.dynamic[id(value)] = step.var

    def _same_pick(self, fn, i: int, operands: tuple) -> bool:
        """``max``/``min`` gave back its argument ``i`` (a float read in the graph, which keeps
        its name, or a constant): the graph checks that the same argument comes back on each
        call (where it does not, the call misses the record and records again), if nothing
        observable happened yet."""
        seg = self.segmenter
        if not seg.undoable() or not checks_in_graph(*operands):
            return False
        a, b = operands
        rec = seg.recorder
        second = rec.compute(operator.gt if fn is max else operator.lt, (b, a))   # CPython: b replaces a
        cond = second if i == 1 else rec.compute(torch.logical_not, (second,))
        file, _, line = seg.at()
        rec.check(cond, f"{fn.__name__}() at {file}:{line} gives back its argument {i}")
        return True

    def in_graph(self, v) -> InGraph | None:
        """``v``'s entry if it is a float read in the graph not yet made in Python."""
        var = self.segmenter.dynamic.get(id(v)) if type(v) is float else None
        return self.lazy.get(var) if var is not None else None

    def standins(self, args: tuple, kwargs: dict) -> tuple:
        """``Segmenter.lifted`` where no step can be made (``Segmenter.stepless``): only the
        floats the graph computes itself."""
        return tuple(lz.standin if lz is not None else None for lz in map(self.in_graph, args))

    def realize_in(self, *values) -> None:
        """The program hands ``values`` to Python: the floats among them get their steps."""
        for v in leaves(values):
            lazy = self.in_graph(v)
            if lazy is not None:
                self.realize(lazy.step.var, mid_run=True)

    def realize_all(self) -> None:
        """The program's state here must hold every float as a number (a resume point)."""
        for var in list(self.lazy):
            self.realize(var, mid_run=True)

    def realize(self, var: str, mid_run: bool) -> None:
        """Float ``var`` read in the graph is needed in Python: its step, after the piece that
        computes it (ended here if it is the current one: a graph break, ``mid_run``)."""
        lazy = self.lazy.pop(var)
        seg = self.segmenter
        rec = seg.recorder
        if rec.produced(lazy.standin) is rec.piece:
            try:
                rec.cut()
            except Exception as e:  # noqa: BLE001 - the recorder's refusal (operands.Unsupported)
                why = f"{lazy.step.where.reason} (no eager step there: {e})"
                seg.breaker.stop(dataclasses.replace(lazy.step.where, reason=why))
                return
            if mid_run:
                seg.breaks.append(lazy.step.where)
        lazy.step.before, lazy.step.undoable = seg.before(), seg.undoable()
        seg.steps.append(lazy.step)
        seg.kept.append(lazy.value)

    def finish(self) -> None:
        """The recording ended: the floats the program still holds get their steps (the mock's
        final state names them); the others are no longer tracked."""
        self.lint()
        seg = self.segmenter
        for var, lazy in list(self.lazy.items()):
            if seg.breaker.brk is None and lazy.held():
                self.realize(var, mid_run=False)
            else:   # (no longer tracked: its id may be another object's once it is freed)
                seg.dynamic.pop(id(self.lazy.pop(var).value), None)

    def lint(self) -> None:
        """Check that each float waiting here is the segmenter's value computed eagerly under
        its own variable (else the mock's final state would not name it, and :meth:`finish`
        would untrack another value)."""
        dynamic = self.segmenter.dynamic
        for var, lazy in self.lazy.items():
            if lazy.step.var != var or dynamic.get(id(lazy.value)) != var:
                raise RuntimeError(f"float {var} read in the graph is tracked as "
                                   f"{dynamic.get(id(lazy.value))!r}, its step makes {lazy.step.var!r}")


def _number_source(fn, args: tuple, value) -> torch.Tensor | None:
    """The floating tensor whose one element ``value = fn(*args)`` read (``t.item()``,
    ``float(t)``), if that is what the call was."""
    if type(value) is not float:
        return None
    if any(fn is f for f in _NUMBER_READS):
        t = args[0] if len(args) == 1 else None
    elif type(fn) is types.BuiltinMethodType and fn.__name__ in ("item", "__float__") and not args:
        t = fn.__self__
    else:
        return None
    # (A subclass may define what its number is in Python.)
    return t if type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_floating_point() else None


def _plain_number(v) -> bool:
    """A float, or an int a float64 holds exactly, that is no eager step's value."""
    return type(v) is float or type(v) is int and abs(v) < 2 ** 53


def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1, a) == math.copysign(1, b) or a != a and b != b
