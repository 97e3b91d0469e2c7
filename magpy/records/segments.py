"""Segments (paper §5.3.1): a run cut into operator graphs around dynamic operations.

When the recording run meets a dynamic operation (``float(t)``, ``t.item()``, ``if t:``,
``print(t)``, an unannotated native), the current operator graph ends there
(``OpRecorder.cut``), the operation becomes an *eager step* of the record, and recording
goes on into the next graph.  The mock then runs: graph 1, the step on the values it needs,
graph 2, ... and finally reproduces the program state as for one graph.

What a step returns changes from call to call, so nothing computed from it may be baked
into the record.  Its result is *dynamic*: tracked by identity (kept alive, so ids stay
unique) through everything the program does with it:

=========================================  ==================================================
the program ...                            the record ...
=========================================  ==================================================
moves it (locals, containers, attributes,  writes its step variable where the final state
arguments, the return value)               holds it (``log.append(e1)``): no guard
computes from it natively (``x * 2``,      replays that computation as another step,
``f"{x:.3f}"``, ``round(x)``, ``max(x,1)``)  whose result is dynamic in turn
branches on it, or computes a result      checks it in the mock (``if not e2: MISS``):
that has no identity (a bool, a small int)  a *steering* value is guarded
feeds it (a float, or an int ``t.item()``  passes it to the graph as a 0-d tensor input: no
gave) to floating tensor arithmetic        check (a small int is followed by its shadow slot)
feeds it to a tensor operation otherwise   checks its value (the graph holds it as a constant)
does anything else with it (iterates it,   gives up: the call runs eagerly, as before
uses it as a key, ...)
gives it to an instruction that raises     checks it there (the exception, and the handler the
(``1 / n`` with ``n == 0``)                program runs, depend on its value)
=========================================  ==================================================

A check that fails in the mock before anything observable happened (only pure steps, no
input updated in place, no draw from a generator object of the program's) is a miss of that
record: the cache puts the process's generators back (``magpy.graphs.rng``) and tries the next
record or records again.  After an effect the call must not run again: the check then
carries a resume point, and a failure resumes the monitor there (``magpy.records.continuations``);
where the call cannot resume, the run gives up.  A step after an effect that raises on a later
call propagates its exception from the mock, or, where the program may handle it (an
``except``, ``finally`` or ``with`` covers the step in a live frame), resumes the monitor
there with it.  Steps see their arguments as they were at
the break (containers are copied then); program state changes are committed at the end of
the mock, so a step that is not pure may not follow changes of module attributes
(``sys.stdout``).

:class:`Capture` owns one recording run: the RefGraph and its builder, the operator
recorder, the breaker and the segmenter, and the monitor running the program under them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
import sys
import types
import weakref
from typing import Callable

import torch
import torch.fx as fx
from torch._C._dynamo.guards import GlobalStateGuard

from magpy.capture import annotations as ann
from magpy.capture.callees import checkpoint, warnings_logging
from magpy.capture.callees.numpy_arrays import Arrays
from magpy.capture.monitor import Monitor, Observer, bytecode, operators
from magpy.capture.monitor.observer import CALLS, RETURNS, Entries, Items, returns_to_caller, tracked
from magpy.capture.refgraph import Breaker, RefGraph, RefGraphBuilder
from magpy.capture.refgraph.graph import is_immutable
from magpy.config import config
from magpy.errors import GraphBreak
from magpy.graphs import rng
from magpy.graphs.controlflow import Branches
from magpy.graphs.dynamic import Lifting, Scalar, Shapes, argument_shadows, specialise, symbolic
from magpy.graphs.opgraph import OpRecorder, checks_in_graph, thread_modes
from magpy.records import continuations
from magpy.records.continuations import Resume, ResumePoint, Shadowed

_SMALL_INTS = range(-5, 257)   # CPython's cached ints: the same object wherever they come from
_CONTAINERS = (list, tuple, dict, set, frozenset)
_TAINT_DEPTH = 4


def ambiguous(v) -> bool:
    """A value whose identity says nothing about where it came from (a cached singleton):
    it cannot be tracked by identity, so a step's result like this is checked instead."""
    t = type(v)
    return (v is None or t is bool or (t is int and v in _SMALL_INTS) or (t is str and len(v) <= 1)
            or (t is tuple and not v) or v is Ellipsis or v is NotImplemented)


def format_value(which: int):
    """FORMAT_VALUE's work: the conversion (``!s``, ``!r``, ``!a``) then ``format``."""
    convert = (None, str, repr, ascii)[which]

    def fmt(v, spec=""):
        if convert is not None:
            v = convert(v)
        return v if not spec and type(v) is str else format(v, spec)
    fmt.__name__ = fmt.__qualname__ = f"format_value{'_' + convert.__name__ if convert else ''}"
    return fmt


def _build_string(*parts):
    return "".join(parts)


def _contains(invert):
    return (lambda a, b: b not in a) if invert else (lambda a, b: b in a)


_NOT_IN = _contains(True)
_NOT_IN.__name__ = _NOT_IN.__qualname__ = "not_contains"
_IN = _contains(False)
_IN.__name__ = _IN.__qualname__ = "contains"


def _slice_of(container, start, stop):
    # BINARY_SLICE's inputs are (container, start, stop).
    return container[start:stop]


def _swapped_contains(fn):
    # CONTAINS_OP's inputs are (item, container).
    def op(item, container):
        return fn(container, item)
    op.__name__ = op.__qualname__ = fn.__name__
    return op


# Instructions whose native work computes a new value from their inputs: how to replay it
# (``(instruction) -> callable(*inputs)``).  Their result is dynamic if an input is.
_COMPUTES = {
    "BINARY_OP": lambda ins: operators.BINARY[ins.arg][3] if ins.arg < len(operators.BINARY)
    else operators.INPLACE[ins.arg - len(operators.BINARY)],
    "COMPARE_OP": lambda ins: operators.COMPARE_OPS[ins.arg],
    "UNARY_NEGATIVE": lambda ins: operator.neg, "UNARY_POSITIVE": lambda ins: operator.pos,
    "UNARY_INVERT": lambda ins: operator.invert,
    "BINARY_SUBSCR": lambda ins: operator.getitem,
    "BINARY_SLICE": lambda ins: _slice_of,
    "CONTAINS_OP": lambda ins: _swapped_contains(_NOT_IN if ins.arg else _IN),
    "IS_OP": lambda ins: operator.is_not if ins.arg else operator.is_,
    "FORMAT_VALUE": lambda ins: format_value(ins.arg & 3),
    "BUILD_STRING": lambda ins: _build_string,
    "BUILD_SLICE": lambda ins: slice,
    "LOAD_ATTR": lambda ins: operator.attrgetter(ins.argval),
}
# Of those, the ones that look at an input only if it is itself dynamic (an attribute or an
# item of a container that merely holds dynamic values is that value, by identity): input
# positions that count whenever they hold a dynamic value anywhere, the others only directly.
_DEEP_INPUTS = {"LOAD_ATTR": (), "BINARY_SUBSCR": (1,), "BUILD_SLICE": (), "BINARY_SLICE": (1, 2)}
# Conditional jumps: the truth of their input (the first) steers the program.
_TRUTH = {"POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
          "POP_JUMP_BACKWARD_IF_FALSE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "UNARY_NOT", "TO_BOOL"}
_NONE_TESTS = {"POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE",
               "POP_JUMP_BACKWARD_IF_NOT_NONE"}
# Instructions that only move values (a dynamic value stays one), or call (see on_call).
_MOVES = bytecode.FAST_MOVES | {
    "LOAD_DEREF", "STORE_DEREF", "LOAD_CLOSURE", "LOAD_GLOBAL",
    "STORE_GLOBAL", "LOAD_NAME", "STORE_NAME", "LOAD_CONST", "POP_TOP", "COPY", "SWAP", "PUSH_NULL",
    "RETURN_VALUE", "YIELD_VALUE", "BUILD_TUPLE", "BUILD_LIST", "LIST_APPEND", "LIST_EXTEND",
    "LIST_TO_TUPLE", "STORE_ATTR", "PRECALL", "CALL", "KW_NAMES", "CALL_FUNCTION_EX", "RESUME", "NOP",
    "CACHE", "RETURN_GENERATOR", "SEND", "GET_YIELD_FROM_ITER", "BEFORE_WITH", "DICT_UPDATE",
    "DICT_MERGE", "POP_EXCEPT", "PUSH_EXC_INFO", "CHECK_EXC_MATCH", "RERAISE", "RAISE_VARARGS",
    "MAKE_FUNCTION", "MAKE_CELL", "COPY_FREE_VARS", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "STORE_SUBSCR", "DELETE_SUBSCR", "DELETE_ATTR", "EXTENDED_ARG", "PRINT_EXPR", "IMPORT_NAME",
    "IMPORT_FROM", "LOAD_BUILD_CLASS", "GET_ITER", "FOR_ITER", "UNPACK_SEQUENCE", "UNPACK_EX",
    # A method of a dynamic value is called with it as ``self``: the call is the step.
    "LOAD_METHOD",
    # Dicts: dynamic values are fine, dynamic keys are not (_key_inputs).
    "BUILD_MAP", "BUILD_CONST_KEY_MAP", "MAP_ADD",
    # Instructions 3.12 adds (observed names, see magpy.capture.monitor.bytecode).
    "RETURN_CONST", "END_SEND", "STORE_SLICE", "LOAD_SUPER_ATTR", "CLEANUP_THROW",
    "INTRINSIC_PRINT", "INTRINSIC_IMPORT_STAR", "INTRINSIC_STOPITERATION_ERROR", "LOAD_LOCALS",
    "LOAD_FROM_DICT_OR_DEREF", "LOAD_FROM_DICT_OR_GLOBALS",
}
# Of those, the ones that look inside their input's own value (its length, its items):
# fine for a container that holds dynamic values, not for a dynamic container itself.
_STRUCTURAL = {"GET_ITER", "FOR_ITER", "UNPACK_SEQUENCE", "UNPACK_EX", "LIST_EXTEND", "LIST_TO_TUPLE",
               "DICT_UPDATE", "DICT_MERGE", "CALL_FUNCTION_EX"}
# The inputs of an instruction that are keys (a dynamic key decides where a value goes).
_KEY_INPUTS = {"STORE_SUBSCR": lambda n: (2,), "DELETE_SUBSCR": lambda n: (1,), "MAP_ADD": lambda n: (0,),
               "STORE_SLICE": lambda n: (2, 3),
               "BUILD_MAP": lambda n: range(0, n, 2), "BUILD_CONST_KEY_MAP": lambda n: (n - 1,)}
# Instructions that only move their inputs, whatever they are (``raise e``, ``x.attr = n``): an
# exception they raise does not depend on a moved value computed eagerly.
_MOVES_ONLY = _MOVES - CALLS - _STRUCTURAL - _KEY_INPUTS.keys()


@dataclasses.dataclass
class Step:
    """One eager step of a record, in program order, run before piece ``before``'s graph.

    ``kind``: "call" (``var = fn(*args, **kwargs)``), "check" (the value bound to ``args[0]``
    must be ``args[1]``), "truth" (``args[0]``'s truth must be ``args[1]``), "same" (the
    variables ``args`` must hold the same object).
    """

    kind: str
    before: int
    var: str | None
    fn: object = None
    args: tuple = ()
    kwargs: dict | None = None
    where: GraphBreak | None = None   # the break that made it (None: computed from a dynamic value)
    undoable: bool = True             # nothing observable happened before it (see Segmenter.undoable)
    at: tuple = ()                    # (file, function, line) of the program where it happens
    resume: ResumePoint | None = None  # a failed check resumes the monitor here (after effects)
    # id(tensor) -> the piece that had made it when the step ran, of the tensors among a call's
    # arguments: a later graph may update one in place (``clip_grad_norm_`` after GradScaler's
    # unscale step) and be its maker at the end of the run, not here.
    made: dict = dataclasses.field(default_factory=dict)
    # torch's thread-local modes it runs under (grad mode, autocast): as the run had them here
    modes: tuple = dataclasses.field(default_factory=thread_modes)


class Segmenter(Observer):
    """Turns the dynamic operations of a recording run into eager steps (module docstring).

    The breaker calls :meth:`begin` when a dynamic operation starts; the step is complete when
    the native call it happened in returns (``on_call``) or, for an operation of an
    instruction itself (a truth test, ``FORMAT_VALUE``), when that instruction completes.
    """

    def __init__(self, recorder, breaker):
        self.recorder = recorder
        self.breaker = breaker
        self.steps: list[Step] = []
        self.dynamic: dict[int, str] = {}   # id(value) -> its step variable
        self._keep: list = []
        self._pending = None                # (frame, GraphBreak) of the step under way
        self._callbacks = weakref.WeakSet()  # frames a native (an intrinsic) called back into
        self._entered = None                # (frame, lasti) of an instruction that entered Python
        self._unchecked = None   # (frame, lasti, var, value, slot, Deferred) of a result not tracked yet
        self._raised = None      # the exception last raised (on_exception: settled where it was raised)
        self._ints: set[str] = set()        # step variables that always hold ints (graph inputs)
        self.deferred: dict[int, Deferred] = {}   # id -> small int whose check waits for a use
        self.lazy: dict[str, InGraph] = {}  # variable -> float read in the graph, not needed in Python yet
        self._vars = 0                      # step variables named so far
        self._lifted_now: set[int] = set()  # ids of those the operation just recorded took as inputs
        self._passed: dict[int, set] = {}   # id(frame) -> ids of those its call bound to parameters
        self._levels: dict[int, int] = {}   # id(frame) -> intrinsics under way when it was entered
        self.effects = False                # an observable effect happened (checks need resume points)
        self.points: list[ResumePoint] = []
        self.rebuilt = frozenset()   # a continuation's: ids of the values its parent rebuilt
        self.resumed = ()            # a continuation's: its frames (continuations.frames), innermost first
        self.breaks: list[GraphBreak] = []
        # magpy.capture.callees.numpy_arrays.Arrays: frames holding its arrays cannot be resume points
        self.arrays = None
        self.branches = None   # magpy.graphs.controlflow.Branches: a loop's variables end a resume point

    # ------------------------------------------------------------------ steps
    def begin(self, brk: GraphBreak) -> bool:
        """A dynamic operation is under way in the current frame: make it a step, if it can
        be one (False: the run gives up on segments)."""
        mon = self.breaker.monitor
        frame = mon.current if mon is not None else None
        if frame is None or not hasattr(frame, "info") or frame in self._callbacks:
            return False
        if self._pending is None:
            self._pending = (frame, brk)
            self.recorder._opaque += 1   # the step's own tensor work is not graph work
        return True

    def _finish(self) -> GraphBreak | None:
        pending, self._pending = self._pending, None
        self.recorder._opaque -= 1
        return pending[1]

    def _step(self, fn, args, kwargs, result, brk: GraphBreak | None, pure: bool, call: bool = True,
              breaks: bool = True) -> None:
        """Record ``result = fn(*args, **kwargs)`` as a step.  A dynamic operation, or one on
        tensors, ends the current piece; a pure computation on dynamic values alone runs before
        it (it needs nothing the piece computes), and so does a dynamic operation that is no
        graph break (not ``breaks``: a read of an input's storage)."""
        var = self._new_var()
        if self.lazy and brk is None and not kwargs and self._arithmetic_in_graph(var, fn, args, result):
            return
        if self.lazy:
            self._realize_in(fn, getattr(fn, "__self__", None), args, kwargs)
        if brk is not None and pure and self._read_in_graph(var, fn, args, result, brk):
            return
        named = _tensor_parts(result, var)
        if any(self._graph_knows(t) for t, _ in named):
            # (``max(a, b)`` gives ``a`` itself: one tensor, two names)
            self.breaker.stop(brk or "an operation on a value computed eagerly that returns a graph's tensor")
            return
        breaking = brk is not None and breaks
        if breaking:
            self.breaks.append(brk)
        undoable = self.undoable()
        if rng.own_generator(kwargs):
            self.effects = True   # it drew from the program's generator object: magpy cannot put it back
        if not pure:
            if self.breaker.pending_module_writes():
                self.breaker.stop(brk or "an eager step after the program changed a module's attributes")
                return
            if not _external(fn) and self._mutable_inside((args, kwargs)):
                # It may change them: the mock would pass it copies, and write back the values
                # this run left, not the ones a later call's step makes.
                what = brk.reason if brk else _describe(fn)
                self.breaker.stop(f"{what}, given a mutable object it may change")
                return
            self.effects = True
        given_back = not ambiguous(result) and [a for a in args if a is result]
        picked = given_back and id(result) in self.dynamic and _picks(fn)
        if picked and not undoable:
            self.breaker.stop(f"{_describe(fn)} gives back a value computed eagerly it was given")
            return
        met = self._met_again(fn, args, kwargs, result, given_back)
        if met is not None and not undoable:
            self.breaker.stop(f"{_describe(fn)} gives an object an earlier eager step gave, after effects")
            return
        if breaking or not pure or any(isinstance(x, torch.Tensor) for x in _leaves((args, kwargs))):
            try:
                self.recorder.cut()
            except Exception as e:  # noqa: BLE001 - the recorder's refusal (opgraph._Unsupported)
                # (why the break cannot be a step: a call that runs eagerly says both)
                self.breaker.stop(dataclasses.replace(brk, reason=f"{brk.reason} (no eager step there: {e})")
                                  if brk else str(e))
                return
        resume = None if undoable else self._raising_point()
        if resume is _HANDLED_NOWHERE:
            return
        self.steps.append(Step("call", self._before(), var, fn, self._freeze(args),
                               self._freeze(kwargs) if kwargs else None, brk, undoable, self._at(), resume,
                               made=self._makers(args, kwargs)))
        if picked:   # (max(n, m) is n or m: the same one must come back, it keeps its name)
            self.steps.append(Step("same", self._before(), None, None, (var, self.dynamic[id(result)])))
        if met is not None:   # (it keeps the earlier name, which the mock checks it is)
            self.steps.append(Step("same", self._before(), None, None, (var, met)))
        for t, expr in named:
            # A new tensor (``torch.from_numpy(a)``, a ScriptModule's output): later graphs
            # take it as an input, the mock gives it to the program.
            if id(t) not in self.recorder.eager:
                self.recorder.eager[id(t)] = expr
                self._keep.append(t)
        if isinstance(result, torch.Tensor) and _steady(fn):
            return   # (its metadata is the record's: reading it reads no value computed eagerly)
        self._result(result, var, call, type(result) is int and _int_result(fn), fresh=not given_back)

    def _met_again(self, fn, args: tuple, kwargs: dict | None, result, given_back) -> str | None:
        """The variable of the earlier step that gave ``result = fn(*args, **kwargs)``, an
        object this step was not given (``b.untyped_storage()`` is ``a``'s where ``b`` views
        ``a``): on a later call the two steps need not give one object, so the record checks
        that they do.  None where it is a new object, or one the step was given (``__enter__``
        gives back its ``self``)."""
        met = self.dynamic.get(id(result))
        if met is None or ambiguous(result) or given_back or getattr(fn, "__self__", None) is result \
                or (kwargs and any(v is result for v in kwargs.values())):
            return None
        return met

    def _new_var(self) -> str:
        self._vars += 1
        return f"e{self._vars - 1}"

    # ------------------------------------------------------------------ floats read in the graph
    # ``n = t.item()`` (``float(t)``) of a tensor a graph has need not end the graph: the graph
    # computes the float itself, as the 0-d float64 tensor it would take it as
    # (``OpRecorder.record_number``), and floating tensor arithmetic on ``n`` uses that tensor.
    # The step ``n = float(<that tensor>)`` is made only where the program needs the number
    # in Python (a check, a step, a resume point, the final state): there the piece ends.
    def _read_in_graph(self, var: str, fn, args: tuple, value, brk: GraphBreak) -> bool:
        """Keep the float ``value = fn(*args)`` read from tensor data in the graph, if it is one."""
        src = _number_source(fn, args, value)
        if src is None or self.recorder._opaque or not self._graph_knows(src):
            return False
        standin = self.recorder.record_number(src)
        if self.breaker.brk is None:
            self.lazy[var] = InGraph(Step("call", -1, var, float, (standin,), None, brk, True, self._at()),
                                     standin, value)
            self.dynamic[id(value)] = var
        return True

    def _arithmetic_in_graph(self, var: str, fn, args: tuple, value) -> bool:
        """Keep ``value = fn(*args)``, Python arithmetic on floats read in the graph (``n + 1``,
        ``2 * n``, ``n / 3``, ``max(n, 1e-8)``), in the graph too (float64 tensors compute as
        Python floats do)."""
        op = next((g for f, g in _GRAPH_ARITHMETIC if fn is f), None)
        if op is None or type(value) is not float or _picks(fn) and len(args) != 2:
            return False
        lazies = list(map(self._in_graph, args))
        if not any(lazies) or not all(lz is not None or _plain_number(a) and id(a) not in self.dynamic
                                      and self._lifted_float(a) is None for a, lz in zip(args, lazies)):
            return False   # (a lifted float would be a constant of the graph: a step takes it)
        if any(fn is f for f in _DIVISIONS) and (lazies[1] is not None or not args[1]):
            return False   # (Python raises for a zero divisor, where the graph gives inf)
        operands = tuple(a if lz is None else lz.standin for a, lz in zip(args, lazies))
        if self.recorder._opaque:
            return False
        given_back = [i for i, a in enumerate(args) if a is value]
        if given_back:
            return self._same_pick(fn, given_back[0], operands)
        standin = op(self.recorder.compute, *operands)
        if self.breaker.brk is not None:
            return True
        with self.recorder.paused():
            got = float(standin)
        if not _same_float(got, value):
            return False
        first = next(lz for lz in lazies if lz is not None)
        self.lazy[var] = InGraph(dataclasses.replace(first.step, var=var, args=(standin,)), standin, value)
        self.dynamic[id(value)] = var
        return True

    def _same_pick(self, fn, i: int, operands: tuple) -> bool:
        """``max``/``min`` gave back its argument ``i`` (a float read in the graph, which keeps
        its name, or a constant): the graph checks that the same argument comes back on each
        call (where it does not, the call misses the record and records again), if nothing
        observable happened yet."""
        if not self.undoable() or not checks_in_graph(*operands):
            return False
        a, b = operands
        rec = self.recorder
        second = rec.compute(operator.gt if fn is max else operator.lt, (b, a))   # CPython: b replaces a
        cond = second if i == 1 else rec.compute(torch.logical_not, (second,))
        file, _, line = self._at()
        rec.check(cond, f"{fn.__name__}() at {file}:{line} gives back its argument {i}")
        return True

    def _realize_in(self, *values) -> None:
        """The program hands ``values`` to Python: the floats among them get their steps."""
        for v in _leaves(values):
            lazy = self._in_graph(v)
            if lazy is not None:
                self._realize(lazy.step.var, mid_run=True)

    def _realize(self, var: str, mid_run: bool) -> None:
        """Float ``var`` read in the graph is needed in Python: its step, after the piece that
        computes it (ended here if it is the current one: a graph break, ``mid_run``)."""
        lazy = self.lazy.pop(var)
        rec = self.recorder
        if rec.produced(lazy.standin) is rec.piece:
            try:
                rec.cut()
            except Exception as e:  # noqa: BLE001 - the recorder's refusal (opgraph._Unsupported)
                why = f"{lazy.step.where.reason} (no eager step there: {e})"
                self.breaker.stop(dataclasses.replace(lazy.step.where, reason=why))
                return
            if mid_run:
                self.breaks.append(lazy.step.where)
        lazy.step.before, lazy.step.undoable = self._before(), self.undoable()
        self.steps.append(lazy.step)
        self._keep.append(lazy.value)

    def _graph_knows(self, t) -> bool:
        """Is tensor ``t`` one a graph has (read from outside or made by a piece)?"""
        return self.recorder.produced(t) is not None or self.recorder.refgraph.node_of(t) is not None

    def effect_step(self, fn, args: tuple, brk: GraphBreak) -> str | None:
        """``var = fn(*args)`` as a step whose effects and tensor results the caller tracks
        itself (``loss.backward()``, magpy.training.train_steps): the current piece ends here.  Its
        variable, or None when the run gives up on segments."""
        if self.lazy:
            self._realize_in(args)
        try:
            self.recorder.cut()
        except Exception as e:  # noqa: BLE001 - the recorder's refusal (opgraph._Unsupported)
            self.breaker.stop(str(e))
            return None
        self.breaks.append(brk)
        self.effects = True
        var = self._new_var()
        self.steps.append(Step("call", self._before(), var, fn, args, None, brk, False, self._at(),
                               made=self._makers(args, None)))
        return var

    def effect(self, fn, args: tuple, kwargs: dict | None, result, what: str) -> bool:
        """``result = fn(*args, **kwargs)`` as a step with an effect outside the program's
        objects and tensors (on the warnings machinery, magpy.capture.callees.warnings_logging) that the mock
        makes in
        program order without ending the graph; its result is a value computed eagerly.
        False where it cannot be a step (inside a native's callback, during another step)."""
        frame = self.breaker.monitor.current
        if self._pending is not None or frame in self._callbacks or not hasattr(frame, "info"):
            return False
        if self.lazy:
            self._realize_in(args, kwargs)
        var = self._new_var()
        where = self.breaker.where(f"{what}, made again by every replay (not a graph break)")
        self.steps.append(Step("call", self._before(), var, fn, self._freeze(args),
                               self._freeze(kwargs) if kwargs else None, where, self.undoable(), self._at(),
                               made=self._makers(args, kwargs)))
        self.effects = True
        self._result(result, var, True, False)
        return True

    def _makers(self, args: tuple, kwargs: dict | None) -> dict:
        """id -> the piece that has made it so far, of the tensors among a step's arguments."""
        return {id(t): p for t in _leaves((args, kwargs)) if isinstance(t, torch.Tensor)
                and (p := self.recorder.produced(t)) is not None}

    def _at(self) -> tuple:
        f = self.breaker.monitor.current
        return (f.code.co_filename, f.code.co_name, f.line) if hasattr(f, "info") else ()

    def _before(self) -> int:
        return len(self.recorder.pieces) - 1

    def _result(self, v, var: str, call: bool, int_result: bool, fresh: bool = True) -> None:
        """Track step result ``v`` (``int_result``: from a callee that always gives an int, so
        it may become a graph input; not ``fresh``: an object the step was given, such as a
        constant ``min(n, 1.5)`` gave back, which has no identity of its own: checked)."""
        if int_result:
            self._ints.add(var)
        if id(v) in self.dynamic:
            return   # an eager value given back (``__enter__`` returns self): it keeps its name
        if ambiguous(v) or not fresh:
            frame = self.breaker.monitor.current
            if not call:   # an instruction's result: checked where the instruction ran
                self.check(v, var, completed=True)
            elif frame is not None and hasattr(frame, "info"):
                # Decided at the frame's next instruction: a statement call's result (print's
                # None) is just popped, and then nothing depends on it.
                # (The call has taken its inputs off the stack; its result goes on top.)
                mark = Deferred(var, v) if int_result else None
                self._unchecked = (frame, frame.lasti, var, v, len(frame.stack), mark)
            else:
                self.check(v, var)
        else:
            self.dynamic[id(v)] = var
            self._keep.append(v)

    def lifted(self, args: tuple, kwargs: dict) -> tuple:
        """Per positional argument of the tensor operation being recorded: the variable of a
        float, or an int from a callee that always gives one, that an eager step computed (the
        graph takes it as an input, unchecked), else None."""
        marks = None
        if self.deferred:
            frame = self.breaker.monitor.current
            found = argument_shadows(frame, args, kwargs) if hasattr(frame, "info") else None
            marks = found[0] if found is not None else None
        names = []
        for i, a in enumerate(args):
            t = type(a)
            var = self.dynamic.get(id(a)) if t is float or t is int else None
            if t is int and var not in self._ints:
                var = None
            mark = marks[i] if marks is not None else None
            if var is None and type(mark) is Deferred and id(mark) in self.deferred and mark.value is a:
                var = mark.var
                self._lifted_now.add(id(mark))
            lazy = self._in_graph(a)
            names.append(lazy.standin if lazy is not None else var)
        return tuple(names)

    @contextlib.contextmanager
    def stepless(self, stop: Callable[[str], None]):
        """Record a region where no eager step can be made (a fork of control flow, a
        checkpointed function): a value computed eagerly that would become a constant of its
        graph calls ``stop(why)``; floats read in the graph are its tensors (an arm captures
        them); small ints whose checks wait for a use keep them (their shadows are not
        followed there)."""
        brk, rec = self.breaker, self.recorder
        saved = (brk.segmenter, rec.fixed, rec.lifted, rec.indexed)
        rec.indexed = None   # (no check of the record's own in a fork)
        self.deferred.clear()
        brk.segmenter = None   # a dynamic operation ends what the region records
        rec.lifted = self._read_in_graph_only

        def fixed(v):
            if self.dynamic and self.is_dynamic(v):
                stop("a value computed eagerly used as a constant")
        rec.fixed = fixed
        try:
            yield
        finally:
            brk.segmenter, rec.fixed, rec.lifted, rec.indexed = saved

    def _read_in_graph_only(self, args: tuple, kwargs: dict) -> tuple:
        """:meth:`lifted` inside :meth:`stepless`: only the floats the graph computes itself."""
        return tuple(lz.standin if lz is not None else None for lz in map(self._in_graph, args))

    def _in_graph(self, v) -> InGraph | None:
        """``v``'s entry if it is a float read in the graph not yet made in Python."""
        var = self.dynamic.get(id(v)) if type(v) is float else None
        return self.lazy.get(var) if var is not None else None

    def unfollowed(self, name: str, inputs, outputs) -> bool:
        """Does instruction ``name`` compute from a value computed eagerly (other than a tensor
        operation the graph recorded)?  A fork of control flow (magpy.graphs.controlflow) makes no
        steps: its result would be a constant of the arm."""
        return (bool(self.dynamic) and name not in _MOVES and any(map(self.is_dynamic, inputs))
                and not self._graph_made(outputs))

    def unfollowed_call(self, callee, args: tuple, kwargs: dict | None, result) -> bool:
        """:meth:`unfollowed` for a native call (a tensor operation the graph recorded with a
        float it computes itself is followed)."""
        if not self.dynamic or self._graph_made((result,)):
            return False
        values = (callee, getattr(callee, "__self__", None), *args, *(kwargs or {}).values())
        return any(map(self.is_dynamic, values))

    def fix(self, v) -> None:
        """``v`` becomes a constant of a graph: if it is dynamic (or holds dynamic values),
        the record checks its value."""
        if self.dynamic and self.is_dynamic(v):
            if id(v) not in self.dynamic:
                self.breaker.stop("a container of values computed eagerly used by a tensor operation")
                return
            self.check(v)

    def check(self, v, var: str | None = None, completed: bool = False,
              slot: int | None = None) -> Step | None:
        """The record depends on the exact value of dynamic ``v``: check it in the mock
        (``completed``: the current instruction has run, a resume point runs it again from
        its inputs; ``slot``: the stack position there that holds ``v``, untracked).  The
        check's step, if it needs no resume point."""
        var = var or self.dynamic[id(v)]
        step = self._check("check", (var, v), completed, None if slot is None else (slot, var))
        # From here on the record holds it as a constant (a resume point took it as its variable).
        self.dynamic.pop(id(v), None)
        return step

    def _check(self, kind: str, args: tuple, completed: bool, slot=None) -> Step | None:
        if args[0] in self.lazy:
            self._realize(args[0], mid_run=True)
        if self.undoable():
            step = Step(kind, self._before(), None, None, args)
            self.steps.append(step)
            return step
        if self.arrays is not None and self.arrays.unresumable is not None:
            self.breaker.stop(f"a value computed eagerly decides the call after effects, where "
                              f"{self.arrays.unresumable}")
            return
        try:
            point = self._point(completed, slot)
        except Exception as e:  # noqa: BLE001 - Unresumable, or the recorder's refusal
            self.breaker.stop("a value computed eagerly decides the call (the record would check it) "
                              "after effects a failed check cannot take back, and the call cannot "
                              f"resume there: {e}")
            return
        self.steps.append(Step(kind, self._before(), None, None, args, resume=point))

    def _point(self, completed: bool, slot=None) -> ResumePoint:
        """A resume point here (:func:`magpy.records.continuations.take`); raises where there is none."""
        # A resume point holds the frames' values as they are: a small int whose check was
        # deferred would be baked into it, so those are checked after all; floats read in the
        # graph are variables of the mock there.
        self.deferred.clear()
        for var in list(self.lazy):
            self._realize(var, mid_run=True)
        left = self.branches.left_by_loop() if self.branches is not None else None
        if left is not None:
            raise continuations.Unresumable(left)
        # The state here must be the graphs' work so far: end the piece here.
        self.recorder.cut()
        point = continuations.take(len(self.points), self.breaker.monitor, self.breaker.graph,
                                   self.dynamic, completed, slot, produced=self.recorder.produced,
                                   shadowed=self._taken,
                                   rebuilt=self.rebuilt, resumed=self.resumed)
        point.before = self._before()
        point.made.update(self.recorder.choices(list(point.made)))
        if self.recorder.shapes is not None:
            point.stores = dict(self.recorder.shapes.stores)
        self.points.append(point)
        return point

    def _taken(self, v, sh):
        """What a resume point takes for a frame's value ``v`` whose shadow is ``sh``
        (``continuations.take``'s ``shadowed``)."""
        passed = self.branches.passed_as(v, sh) if self.branches is not None and sh is not None else None
        if passed is not None:
            return passed
        shapes = self.recorder.shapes
        if shapes is None:
            return None
        if type(v) is types.CellType and sh is None:   # (a cell's own shadow: the contents' then)
            try:
                sh = shapes.in_cell(v, v.cell_contents)
            except ValueError:
                return None   # (empty)
        return _shadowed(v, sh)

    def _raising_point(self):
        """Where a step after effects raises in a later call's mock and the program may handle
        it (an ``except``, ``finally`` or ``with`` covers it in a live frame): a resume point
        the monitor resumes from with that exception (None: nothing handles it, it propagates
        from the mock as from eager).  Where one would handle it but the call cannot resume
        there, the recording stops (the mock could not give the exception to the handler):
        _HANDLED_NOWHERE."""
        f = self.breaker.monitor.current
        while hasattr(f, "info") and f.info.handlers[f.lasti] is None:
            f = f.back
        if not hasattr(f, "info"):
            return None
        why = None
        if self.arrays is not None and self.arrays.unresumable is not None:
            why = self.arrays.unresumable
        elif not continuations.resumable(self.breaker.monitor, self.resumed):
            why = "its frames cannot be taken"   # (before _point ends the piece and checks what it defers)
        else:
            try:
                return self._point(completed=False)
            except Exception as e:  # noqa: BLE001 - Unresumable, or the recorder's refusal
                why = str(e)
        self.breaker.stop("an operation on a value computed eagerly that may raise where the program "
                          f"handles it, after effects, and the call cannot resume there: {why}")
        return _HANDLED_NOWHERE

    def undoable(self) -> bool:
        """Has nothing observable happened so far (a mock may still give up and the call run
        again): no I/O or unannotated native, no input updated in place?  (Numbers drawn from
        the process's generators are not observable: the call runs again from their state
        before the mock, magpy.graphs.rng.)"""
        return not self.effects and not self.recorder.inputs_updated()

    # ------------------------------------------------------------------ events
    def on_exception(self, frame, exc):
        pending = self._pending
        if pending is not None and pending[0] is frame:
            # The operation raised: the program's control flow now depends on its exception.
            self.breaker.stop(self._finish())
            return
        if exc is self._raised or self.breaker.brk is not None or self.breaker.segmenter is not self:
            return   # unwinding on from the instruction that raised it, settled there (or stepless)
        self._raised = exc
        self._raising(frame)

    def _raising(self, frame) -> None:
        """The instruction ``frame`` is at raised (``on_instruction``, which settles what an
        instruction takes, never sees it): the exception, and so the path the program takes
        now, depends on the exact values computed eagerly it took, which the record checks
        there (a resume point runs it again, and it raises again)."""
        moved = frame.info.instructions[frame.lasti].opname in _MOVES_ONLY
        unchecked = self._unchecked
        if unchecked is not None and unchecked[0] is frame and unchecked[1] != frame.lasti:
            self._unchecked = None
            _, _, var, v, slot, _ = unchecked
            if moved:   # (decided here as where it completes, not in the handler)
                self._defer(unchecked)
            else:
                self.check(v, var, slot=slot)
        if moved:
            return   # (``raise e``: what a moved value is does not decide the exception)
        for mark in tracked(frame.ins_shadows, Deferred, self.deferred):
            self.deferred.pop(id(mark), None)   # (its check stays)
        for v in frame.ins_inputs:
            if self.breaker.brk is not None:
                return
            if id(v) in self.dynamic:
                self.check(v)
            elif self.is_dynamic(v):
                self.breaker.stop("an operation on a container of values computed eagerly raised")

    def on_enter(self, frame):
        mon = self.breaker.monitor
        if mon.in_intrinsic or mon.current in self._callbacks:
            self._callbacks.add(frame)
        self._levels[id(frame)] = mon.in_intrinsic
        if self.deferred:
            self._bound(mon.current, frame)

    # ------------------------------------------------------------------ deferred int checks
    # A small int a step returned (``n = t.item()``) cannot be tracked by identity (CPython
    # shares them), so its shadow, a :class:`Deferred`, follows it.  Its check is appended
    # where the step is, and dropped when the recording ends if the program only moved the
    # int and gave it to floating tensor arithmetic (a graph input then): a new value reuses
    # the record.  Any other use, or a shadow the monitor cannot follow, keeps the check.
    def _place(self, frame, unchecked) -> None:
        """The call that returned the int has completed: its result slot gets the shadow."""
        mark = unchecked[5]
        if mark is not None and frame.stack and frame.stack[-1] is mark.value:
            frame.shadow_stack[-1] = mark

    def _defer(self, unchecked) -> None:
        """The instruction after the call keeps the int: check it there, deferred if it may
        become a graph input and a failed check there is a miss."""
        frame, _, var, v, slot, mark = unchecked
        undoable = mark is not None and self.undoable()
        step = self.check(v, var, completed=True, slot=slot)
        if undoable and step is not None:
            mark.step = step
            self.deferred[id(mark)] = mark

    def _bound(self, caller, frame) -> None:
        """``frame`` was entered from ``caller``'s instruction: the deferred ints it got as
        parameters are followed there (a native's callback gets none)."""
        bound = tracked(frame.shadow_locals or (), Deferred, self.deferred)
        if bound:
            self._passed.setdefault(id(caller), set()).update(id(m) for m in bound)

    def _used(self, frame, ins) -> None:
        """Settle the deferred ints instruction ``ins`` took: moves and graph inputs keep
        them deferred, any other use checks them."""
        name = ins.opname
        lifted, self._lifted_now = self._lifted_now, set()
        passed = self._passed.pop(id(frame), ()) if name in CALLS else ()
        if name in _SHADOW_MOVES:
            return
        marks = tracked(frame.ins_shadows, Deferred, self.deferred)
        if not marks or (name in RETURNS and returns_to_caller(frame, self._levels)):
            return
        for m in marks:
            if id(m) not in lifted and id(m) not in passed:
                self.deferred.pop(id(m), None)

    def finish(self) -> None:
        """The recording ended: the deferred checks never needed are dropped (graph inputs),
        and the floats read in the graph that the program still holds get their steps (the
        mock's final state names them)."""
        dropped = {id(m.step) for m in self.deferred.values()}
        self.steps[:] = [s for s in self.steps if id(s) not in dropped]
        self.deferred.clear()
        self._raised = None   # (nor keep the program's objects its traceback holds alive)
        for var, lazy in list(self.lazy.items()):
            if self.breaker.brk is None and lazy.held():
                self._realize(var, mid_run=False)
            else:   # (no longer tracked: its id may be another object's once it is freed)
                self.dynamic.pop(id(self.lazy.pop(var).value), None)

    def on_call(self, frame, callee, args, kwargs, result, entered):
        if self.breaker.brk is not None:
            return
        if self.deferred and any(callee is f for f in ann.FRAME_READERS):
            self.deferred.clear()   # the program may read a deferred int where no shadow goes
        if entered:
            self._entered = (frame, frame.lasti) if hasattr(frame, "lasti") else None
            return
        if ann.records_itself(callee):
            return   # an effect step already (effect)
        pending = self._pending
        if pending is not None and pending[0] is frame:
            brk = self._finish()
            if self._reads_input_storage(callee, args, kwargs):
                why = f"{_describe(callee)} reads an input's storage: again on every call, before the graph"
                self._step(callee, args, kwargs, result, dataclasses.replace(brk, reason=why), pure=True,
                           breaks=False)
                return
            indices = _index_inputs(callee, args) if not kwargs else ()
            if not indices:
                self._step(callee, args, kwargs, result, brk, pure=_pure(callee) and not brk.changes)
                return
            self._index_steps(indices, brk)
        if self.breaker.brk is None and self.dynamic and (
                self.is_dynamic(callee) or self.is_dynamic(getattr(callee, "__self__", None))
                or any(map(self.is_dynamic, args))
                or (kwargs and any(map(self.is_dynamic, kwargs.values())))):
            # (a method bound to a value computed eagerly, ``a.sum()``, computes from it too)
            self._derived_call(frame, callee, args, kwargs, result)

    def _reads_input_storage(self, callee, args: tuple, kwargs: dict | None) -> bool:
        """Is ``callee`` ``t.untyped_storage`` or ``t.data_ptr`` of a tensor from outside the
        call (not one a graph made), before any effect?  Which storages the call's tensors
        share is then a pure read of its inputs, made like a guard before the graph, and not a
        graph break (where two give one storage, or compare equal, the record checks that)."""
        t = getattr(callee, "__self__", None)
        return (not args and not kwargs and type(t) in _PLAIN_TENSORS
                and getattr(callee, "__name__", None) in _STORAGE_READS and self.undoable()
                and self.recorder.produced(t) is None and self.recorder.refgraph.node_of(t) is not None)

    def _graph_made(self, values) -> bool:
        """Is this an operation the graph recorded (a tensor op taking an eager float as input;
        a foreach one gives a list)?"""
        first = values[0] if values else None
        if type(first) in (list, tuple) and first:
            first = first[0]
        return isinstance(first, torch.Tensor) and self.recorder.produced(first) is not None

    def _derived_call(self, frame, callee, args, kwargs, result):
        if self._graph_made((result,)):
            return
        if ann.passes_through(callee, args, result):
            return   # (a move: an optimizer's ``_stack_if_compiling`` of floats gives the list back)
        a, bound = ann.lookup(callee)
        if a is not None and not self.is_dynamic(callee):
            full = ((callee.__self__,) + tuple(args)) if bound else tuple(args)
            # (a method the table does not list as bound, ``ndarray.sum``, reads its object;
            # max and min compare the values they are given)
            owner_read = not bound and self.is_dynamic(getattr(callee, "__self__", None))
            if not (owner_read or _picks(callee) or self._reads_value(callee, a, full, kwargs)):
                return   # stores the value (list.append): a move
            if a.inplace or not a.pure:
                self.breaker.stop(f"{_describe(callee)} changes or keeps a value computed eagerly")
                return
        if frame in self._callbacks:
            self.breaker.stop("a value computed eagerly used inside a callback of a native function")
            return
        self._step(callee, args, kwargs, result, None, pure=a is not None or _pure(callee))

    def _reads_value(self, callee, a, full, kwargs) -> bool:
        for i, v in enumerate(full):
            if self._read_dynamic(callee, v, a.read_kind(i)):
                return True
        kind = a.read_kind(len(full))
        return bool(kwargs) and any(self._read_dynamic(callee, v, kind) for v in kwargs.values())

    def _read_dynamic(self, callee, v, kind: str) -> bool:
        """Does ``callee`` reading ``v`` as ``kind`` read a dynamic value?  Not where it only
        counts or moves the elements of a container of the program's (``len(args)`` of a tuple
        holding a tensor an eager step gave): tensors are graph values, known by identity."""
        if kind in (ann.NONE, ann.TYPE) or not self.is_dynamic(v):
            return False
        moves = kind == ann.STRUCT and any(callee is f for f in _MOVES_ELEMENTS)
        return not (moves and id(v) not in self.dynamic and self._only_tensors(v))

    def _only_tensors(self, v, depth: int = _TAINT_DEPTH) -> bool:
        """Are the dynamic values inside container ``v`` all tensors or floats (objects of
        their own, known by identity where they go)?"""
        if id(v) in self.dynamic:
            return isinstance(v, (torch.Tensor, float))
        if depth and type(v) in _CONTAINERS:
            items = (x for kv in v.items() for x in kv) if type(v) is dict else v
            return all(self._only_tensors(x, depth - 1) for x in items)
        return True

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.breaker.brk is not None:
            return
        unchecked = self._unchecked
        if unchecked is not None and unchecked[0] is frame:
            if unchecked[1] == frame.lasti:
                self._place(frame, unchecked)
            else:
                self._unchecked = None
                if ins.opname != "POP_TOP":
                    self._defer(unchecked)
        if self.deferred:
            self._used(frame, ins)
        pending = self._pending
        if pending is not None and pending[0] is frame:
            self._instruction_step(frame, ins, inputs, outputs)
            return
        if not self.dynamic:
            return
        entered, self._entered = self._entered, None
        name = ins.opname
        if name in _MOVES:
            self._move(frame, name, inputs)
            return
        deep = _DEEP_INPUTS.get(name)
        if deep is None:
            uses = any(map(self.is_dynamic, inputs))
        else:
            uses = any(id(v) in self.dynamic or (i in deep and self.is_dynamic(v))
                       for i, v in enumerate(inputs))
        if not uses or self._graph_made(outputs):
            return
        if frame in self._callbacks:
            self.breaker.stop("a value computed eagerly used inside a callback of a native function")
            return
        if entered == (frame, frame.lasti):
            return   # Python code did the work (a dunder): its own instructions were followed
        if name in _TRUTH:
            v = inputs[0]
            var = self.dynamic.get(id(v))
            if var is not None:
                self._check("truth", (var, bool(v)), completed=True)
            else:   # a container holding dynamic values: its truth is its length, a step checked
                self._step(operator.truth, (v,), None, bool(v), None, pure=True, call=False)
        elif name in _NONE_TESTS:
            pass   # a dynamic value is never None (None is checked where it is made)
        elif name in _COMPUTES:
            self._step(_COMPUTES[name](ins), inputs, None, outputs[0], None, pure=True, call=False)
        else:
            self.breaker.stop(f"{name} on a value computed eagerly")

    def _instruction_step(self, frame, ins, inputs, outputs):
        brk = self._finish()
        name = ins.opname
        if name in _TRUTH:
            v = inputs[0]
            with self.recorder.paused():
                truth = bool(v)
            self._step(operator.truth, (v,), None, truth, brk, pure=True, call=False)
        elif name == "FORMAT_VALUE":
            self._step(_COMPUTES[name](ins), inputs, None, outputs[0], brk, pure=True, call=False)
        elif _index_inputs(name, inputs):
            self._index_steps(_index_inputs(name, inputs), brk)
        else:
            self.breaker.stop(brk.reason)

    def _index_steps(self, tensors: list, brk: GraphBreak) -> None:
        """The operation under way read each of ``tensors`` only through its ``__index__``
        (``items[t]``, ``range(t)``): the record checks each int read, since it picked what the
        operation did, which is then a constant of the record.  The graph checks it where it
        can (no break); else it is a step checked in the mock, as ``operator.index(t)`` in
        Python code is (``ModuleList.__getitem__``)."""
        for t in tensors:
            if self.breaker.brk is not None:
                return
            with self.recorder.paused():
                i = operator.index(t)
            if self._index_in_graph(t, i):
                continue
            self._step(operator.index, (t,), None, i, brk, pure=True, call=False)
            brk = None   # (one break, however many reads)
            if self.breaker.brk is None and id(i) in self.dynamic:
                self.check(i, completed=True)   # (an int too large to be ambiguous: checked all the same)

    def index_bounds(self, args: tuple) -> tuple:
        """``x[a:t]`` (``Tensor.__getitem__``/``__setitem__``'s ``args``, the key second): torch
        reads a slice's 0-d integer tensor bound as an index, which the graph checks; ``args``
        with those ints (as they are where the graph cannot check one)."""
        key = args[1] if len(args) > 1 else None
        keys = key if type(key) is tuple else (key,)
        bounds = [b for k in keys if type(k) is slice for b in (k.start, k.stop, k.step)
                  if type(b) in _PLAIN_TENSORS]
        if not bounds:
            return args
        with self.recorder.paused():
            ints = {id(t): operator.index(t) for t in bounds}
        if not all(self._index_in_graph(t, ints[id(t)]) for t in bounds):
            return args

        def plain(k):
            return slice(*(ints.get(id(b), b) if type(b) in _PLAIN_TENSORS else b
                           for b in (k.start, k.stop, k.step))) if type(k) is slice else k
        new = tuple(map(plain, keys))
        return (args[0], new if type(key) is tuple else new[0], *args[2:])

    def _index_in_graph(self, t: torch.Tensor, i: int) -> bool:
        """Check in the graph that tensor ``t`` holds index ``i`` (where it does not, the call
        misses the record), if the graph has ``t`` and nothing observable happened yet."""
        rec = self.recorder
        if rec._opaque or not self.undoable() or not checks_in_graph(t) or not self._graph_knows(t):
            return False
        file, _, line = self._at()
        rec.check(rec.compute(torch.eq, (t, i)), f"{file}:{line} reads index {i} from a tensor")
        return True

    def _move(self, frame, name, inputs) -> None:
        if name in _STRUCTURAL and any(id(v) in self.dynamic for v in inputs):
            self.breaker.stop(f"{name} on a value computed eagerly")
            return
        if name == "YIELD_VALUE" and self.is_dynamic(inputs[0]) and not _monitored_consumer(frame):
            # A native consumer (sorted, max, sum ...) computes from what the generator yields,
            # unseen: its result would be baked into the record.
            self.breaker.stop("a generator yields a value computed eagerly to a native function")
            return
        keys = _KEY_INPUTS.get(name)
        for i in keys(len(inputs)) if keys is not None else ():
            if self.is_dynamic(inputs[i]):
                self.breaker.stop("a value computed eagerly used as a key")
                return

    def _mutable_inside(self, v, depth: int = _TAINT_DEPTH) -> bool:
        """Does ``v`` hold an object a native could change (not a value, tensor, function,
        class or module, nor an eager step's value)?"""
        t = type(v)
        if id(v) in self.dynamic or is_immutable(v) or isinstance(v, (torch.Tensor, *_STATIC)):
            return False
        if ann.is_global_random_state(v):   # the mock gives the step the object itself
            return False
        if t is tuple and depth:
            return any(self._mutable_inside(x, depth - 1) for x in v)
        if t is dict and depth and not v:
            return False
        if t is dict and depth == _TAINT_DEPTH:   # the kwargs of the call itself
            return any(self._mutable_inside(x, depth - 1) for x in v.values())
        return True

    def _freeze(self, v, depth=_TAINT_DEPTH):
        """A step's argument as it is now: containers copied (the program may change them
        later; the mock builds the copy), dynamic values as their variables (a later check
        makes the value a constant of what follows it, not of this step, which runs before),
        everything else itself."""
        var = self.dynamic.get(id(v))
        if var is not None:
            return continuations.Variable(var)
        t = type(v)
        if t is float:   # a lifted float (ReduceLROnPlateau's ``best``): the mock computes it
            return self._lifted_float(v) or v
        if not depth or t not in _CONTAINERS:
            return v
        if t is dict:
            return {k: self._freeze(x, depth - 1) for k, x in v.items()}
        return t(self._freeze(x, depth - 1) for x in v)

    def _lifted_float(self, v: float) -> Shadowed | None:
        """``v`` with its shadow where the run lifted it or computed it from lifted values."""
        shapes = self.recorder.shapes
        sh = shapes.float_shadow(v) if shapes is not None else None
        return _shadowed(v, sh) if sh is not None else None

    def is_dynamic(self, v, depth: int = _TAINT_DEPTH) -> bool:
        """Is ``v`` a dynamic value, or a container holding one?"""
        if id(v) in self.dynamic:
            return True
        t = type(v)
        if depth and (t in _CONTAINERS):
            items = v.items() if t is dict else v
            if t is dict:
                return any(self.is_dynamic(k, depth - 1) or self.is_dynamic(x, depth - 1) for k, x in items)
            return any(self.is_dynamic(x, depth - 1) for x in items)
        return False


_HANDLED_NOWHERE = object()   # (Segmenter._raising_point)

# Native operations that read tensor inputs only as indices (``PyNumber_Index``: a 0-d integer
# tensor's ``__index__``): a sequence's subscript (read, store, deletion) its key (a slice's
# bounds), by instruction name; ``range`` and ``operator.index`` (``ModuleList.__getitem__``'s)
# their arguments, by the callee's id (a callee may not be hashable).
_INDEXED = (list, tuple, str, bytes, bytearray, range)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
# Tensor methods that read where a tensor's data lives (Segmenter._reads_input_storage).
_STORAGE_READS = frozenset({"untyped_storage", "data_ptr"})


def _sequence_key(inputs: tuple) -> tuple:
    return inputs[1:] if type(inputs[0]) in _INDEXED else ()


def _stored_key(inputs: tuple) -> tuple:
    # (STORE_SUBSCR's and STORE_SLICE's inputs are the value, the container, then the key)
    return inputs[2:] if type(inputs[1]) in _INDEXED else ()


def _arguments(inputs: tuple) -> tuple:
    return inputs


_INDEX_READS = {"BINARY_SUBSCR": _sequence_key, "BINARY_SLICE": _sequence_key, "DELETE_SUBSCR": _sequence_key,
                "STORE_SUBSCR": _stored_key, "STORE_SLICE": _stored_key,
                id(range): _arguments, id(operator.index): _arguments}


def _index_inputs(op, inputs: tuple) -> list:
    """The tensors operation ``op`` (an instruction's name, or a native callee) read as indices
    among its ``inputs`` (empty where it is no such operation, or read them otherwise)."""
    read = _INDEX_READS.get(op if type(op) is str else id(op))
    if read is None:
        return []
    found = []
    for v in read(inputs):
        for x in (v.start, v.stop, v.step) if type(v) is slice else (v,):
            if type(x) in _PLAIN_TENSORS:   # (a subclass may define its index in Python)
                found.append(x)
    return found


def _shadowed(v, sh) -> Shadowed | None:
    """What a resume point takes for a frame's value ``v`` whose shadow is ``sh``: a lifted
    float or size (or one computed from them) the mock computes from the call's own; a
    container of them, or a value the shadow does not stand for, is baked in, so the record
    guards what it holds (None: ``v`` as it is)."""
    if not symbolic(sh):
        return None
    if type(sh) in (Scalar, torch.SymInt):
        held = v.cell_contents if type(v) is types.CellType else v   # (a frame's cell: its contents)
        if type(held) in (int, float):
            return Shadowed(held, sh)
    if (type(sh) is Items and type(v) in (tuple, list) and len(v) == len(sh)
            or type(sh) is Entries and type(v) is dict and sh.keys() <= v.keys()):
        return Shadowed(v, sh)   # (its items taken with theirs: continuations._Taker.take_slot)
    specialise(sh)
    return None


def _monitored_consumer(frame) -> bool:
    """Is the generator ``frame`` resumed by a ``for`` loop (or ``yield from``) of monitored code,
    which receives what it yields by identity?"""
    consumer = frame.back
    info = getattr(consumer, "info", None)
    return info is not None and info.instructions[consumer.lasti].opname in ("FOR_ITER", "SEND")


# Instructions that only move a value with its shadow (the monitor's SHADOW_MOVES) or drop it.
_SHADOW_MOVES = bytecode.FAST_MOVES | {"COPY", "SWAP", "POP_TOP"}


class Deferred:
    """The shadow of a small int an eager step returned, whose check (``step``) waits for a
    use (see ``Segmenter._place``)."""

    __slots__ = ("var", "value", "step")

    def __init__(self, var: str, value: int):
        self.var, self.value, self.step = var, value, None

    def __repr__(self):
        return f"<deferred check {self.var} == {self.value}>"


class InGraph:
    """A float read from tensor data that the graph computes itself (``standin``, see
    ``Segmenter._read_in_graph``); ``step`` makes it in Python once the program needs it."""

    __slots__ = ("step", "standin", "value")

    def __init__(self, step: Step, standin: torch.Tensor, value: float):
        self.step, self.standin, self.value = step, standin, value

    def held(self) -> bool:
        """Does anything but this record still hold the float (the program's state, its
        result)?  Then the mock must make it.  (References: ``self.value`` and the call's.)"""
        return sys.getrefcount(self.value) > 2


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


_NUMBER_READS = (float, torch.Tensor.item, torch.Tensor.__float__)
# Natives that give back one of their arguments, which one depending on the values.
_PICKERS = (max, min)


def _picks(fn) -> bool:
    return any(fn is f for f in _PICKERS)
# Python arithmetic on floats the graph computes, as graph operations: (function, how the
# graph computes it with ``compute(op, args)``).  In place on a float is not in place on its
# tensor; max and min keep the first item unless the second compares greater (less), as
# CPython's do.
def _operation(op):
    return lambda compute, *xs: compute(op, xs)


def _pick(compare):
    return lambda compute, a, b: compute(torch.where, (compute(compare, (b, a)), b, a))


_GRAPH_ARITHMETIC = (*((getattr(operator, prefix + name), _operation(getattr(operator, name)))
                       for name in ("add", "sub", "mul", "truediv") for prefix in ("", "i")),
                     (operator.neg, _operation(operator.neg)),
                     (max, _pick(operator.gt)), (min, _pick(operator.lt)))
_DIVISIONS = (operator.truediv, operator.itruediv)


def _plain_number(v) -> bool:
    """A float, or an int a float64 holds exactly, that is no eager step's value."""
    return type(v) is float or type(v) is int and abs(v) < 2 ** 53


def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1, a) == math.copysign(1, b) or a != a and b != b


def _int_result(fn) -> bool:
    """Does native ``fn`` always give an int when it gives one (``t.item()`` of an integer
    tensor, ``int(t)``): its result can be a graph input of a fixed dtype."""
    if fn is int or fn is operator.index:
        return True
    return (getattr(fn, "__name__", None) in ("item", "__int__", "__index__")
            and isinstance(getattr(fn, "__self__", None), torch.Tensor))
_STATIC = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType, type, types.ModuleType)


def _pure(callee) -> bool:
    a, _ = ann.lookup(callee)
    return (a is not None and a.pure) or ann.is_tensor_method(callee) or any(callee is f for f in _PURE_READS)


def _steady(callee) -> bool:
    a, _ = ann.lookup(callee)
    return a is not None and a.steady


def _external(callee) -> bool:
    a, _ = ann.lookup(callee)
    return a is not None and a.external


# Natives that count or move the elements of a container, reading none of them.
_MOVES_ELEMENTS = (len, list, tuple, iter, enumerate, zip, reversed)

# Natives that only read tensor data (through the tensor's own special methods).
_PURE_READS = (float, int, bool, complex, str, format, repr, operator.truth)


def _describe(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _tensor_parts(v, expr: str, depth: int = _TAINT_DEPTH) -> list[tuple[torch.Tensor, str]]:
    """The tensors in a step's result ``v`` (named ``expr``), each with the expression that
    reaches it in tuples, lists and dicts."""
    if isinstance(v, torch.Tensor):
        return [(v, expr)]
    t = type(v)
    if not depth or t not in (list, tuple, dict):
        return []
    items = v.items() if t is dict else enumerate(v)
    return [part for k, x in items for part in _tensor_parts(x, f"{expr}[{k!r}]", depth - 1)]


def _leaves(v, depth=_TAINT_DEPTH):
    t = type(v)
    if depth and t in _CONTAINERS:
        for x in (v.values() if t is dict else v):
            yield from _leaves(x, depth - 1)
    else:
        yield v




class Capture:
    """One recording run: the RefGraph and its rule builder, the operator recorder, the
    breaker and the segmenter, and the monitor that runs the program under them."""

    def __init__(self, policy_for, lifting: Lifting | None = None):
        self.refgraph = RefGraph()
        self.breaker = Breaker(self.refgraph)
        self.builder = RefGraphBuilder(self.refgraph, self.breaker)
        self.recorder = OpRecorder(self.refgraph, self.breaker)
        self.segmenter = Segmenter(self.recorder, self.breaker)
        self.breaker.segmenter = self.segmenter
        self.recorder.fixed = self.segmenter.fix
        self.recorder.indexed = self.segmenter.index_bounds
        self.recorder.lifted = self.segmenter.lifted
        self.branches = Branches(self.builder, self.breaker, self.recorder, self.segmenter)
        self.recorder.branches = self.segmenter.branches = self.branches
        self.arrays = Arrays(self.recorder, self.breaker)
        self.recorder.arrays = self.segmenter.arrays = self.arrays
        observers = [self.builder, self.branches, self.segmenter, self.arrays]
        self.shapes = None
        if lifting is not None and lifting.armed(config.dynamic):
            self.shapes = self.recorder.shapes = Shapes(lifting, config.dynamic, self.refgraph)
            observers.append(self.shapes)
        self.monitor = Monitor(observers, policy=policy_for(self.recorder))
        self.monitor.on_fault = self.breaker.fail   # magpy's own failure: stop recording, run on
        for callee, handler in (*warnings_logging.intrinsics_for(self), *checkpoint.intrinsics_for(self)):
            self.monitor.policy.add_intrinsic(callee, handler)
        self.breaker.monitor = self.branches.monitor = self.arrays.monitor = self.monitor
        if self.shapes is not None:
            self.shapes.monitor = self.monitor
            self.shapes.eager_value = self.segmenter.is_dynamic
        self.entry_modes = thread_modes()   # grad mode, autocast (opgraph.thread_modes)

    @property
    def steps(self) -> list[Step]:
        return self.segmenter.steps

    @property
    def dynamic(self) -> dict[int, str]:
        return self.segmenter.dynamic

    @property
    def points(self) -> list[ResumePoint]:
        return self.segmenter.points

    @property
    def new_functions(self) -> set[int]:
        return self.builder.new_functions

    @property
    def broken(self) -> GraphBreak | None:
        """The dynamic operation that ended recording (the call then runs eagerly), if any."""
        return self.breaker.brk

    def run(self, fn, args: tuple, kwargs: dict):
        """Run the program under the monitor; its real result."""
        shadows = self.shapes.argument_shadows(args, kwargs) if self.shapes is not None else None
        return self._recording(self.monitor.run_shadowed, fn, args, kwargs, shadows)

    def resume(self, resume: Resume):
        """Resume the frames of a failed check under the monitor (a continuation: effects
        have happened before it); the outermost frame's result."""
        self.segmenter.effects = True
        self.segmenter.rebuilt = continuations.rebuilt(resume)
        frames = self.segmenter.resumed = tuple(continuations.frames(resume, self.monitor))
        for f in frames:
            self.builder.resumed(f)
        if self.shapes is not None:
            self.shapes.resumed(frames, resume.values())
        return self._recording(self.monitor.resume, frames)

    def _recording(self, run, *args, **kwargs):
        # What the guard checks of torch's global state: as the run found it (a continuation
        # resumes inside the call, under the grad mode the call had there).
        self.entry_state = GlobalStateGuard()
        try:
            with self.recorder:
                result = run(*args, **kwargs)
            # The grad mode (autocast) the call leaves: the mock's, whatever its graphs did.
            self.final_modes = thread_modes()
            return result
        finally:
            # What the call leaves running (a generator, a coroutine) runs on unrecorded.
            self.monitor.observers.clear()
            self.segmenter.finish()

    def graphs(self) -> list[fx.GraphModule | None]:
        """The finished graph of each piece (None: no operations), once code generation has
        chosen every piece's outputs."""
        return self.recorder.finish()

    def example_inputs(self, piece: int) -> list:
        """The values a piece's graph is compiled for: fake tensors with symbolic sizes where
        the run lifted dimensions."""
        values = [ph.meta["example_value"] for _, ph in self.recorder.pieces[piece].inputs]
        if self.lifted is None or not self.lifted.symbols:
            return values
        return [self.shapes.fake(v) if isinstance(v, torch.Tensor) else v for v in values]

    @property
    def lifted(self):
        """The run's :class:`magpy.graphs.dynamic.Shapes` if it lifted dimensions, else None."""
        return self.shapes if self.shapes is not None and self.shapes.active else None
