"""Following values computed eagerly: what the program does with one decides the record.

A value an eager step computed changes from call to call, so each instruction and native
call of a recording run that takes one is sorted here, as the table in
``magpy.records.segments`` says: a move (the final state names the value), a computation the
mock replays as another step, a check, or a give-up.  This is the segmenter's observer side.
"""
from __future__ import annotations

import dataclasses
import operator
import weakref

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import Observer, bytecode, operators
from magpy.capture.monitor.observer import CALLS
from magpy.records.eager_steps import CONTAINERS, TAINT_DEPTH, describe, picks
from magpy.records.index_reads import PLAIN_TENSORS, index_inputs


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


def _has_length(seq, n: int) -> bool:
    return len(seq) == n


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

# Natives that count or move the elements of a container, reading none of them.
_MOVES_ELEMENTS = (len, list, tuple, iter, enumerate, zip, reversed)
# Natives that only read tensor data (through the tensor's own special methods).
_PURE_READS = (float, int, bool, complex, str, format, repr, operator.truth)
# Tensor methods that read where a tensor's data lives (ValueFlow._reads_input_storage).
_STORAGE_READS = frozenset({"untyped_storage", "data_ptr"})


def _pure(callee) -> bool:
    """Does native ``callee`` only read its inputs (a step of it has no effect)?"""
    a, _ = ann.lookup(callee)
    return (a is not None and a.pure) or ann.is_tensor_method(callee) or any(callee is f for f in _PURE_READS)


def _monitored_consumer(frame) -> bool:
    """Is the generator ``frame`` resumed by a ``for`` loop (or ``yield from``) of monitored code,
    which receives what it yields by identity?"""
    consumer = frame.back
    info = getattr(consumer, "info", None)
    return info is not None and info.instructions[consumer.lasti].opname in ("FOR_ITER", "SEND")


class ValueFlow(Observer):
    """The observer side of :class:`magpy.records.segments.Segmenter`, its base (module
    docstring): each event may complete the step under way, make another, check a value or
    give up, so it works on the whole segmenter's state."""

    def __init__(self):
        self._callbacks = weakref.WeakSet()  # frames a native (an intrinsic) called back into
        self._entered = None                # (frame, lasti) of an instruction that entered Python
        self._raised = None      # the exception last raised (on_exception: settled where it was raised)

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
        self.deferred.raised(frame, moved)
        if moved:
            return   # (``raise e``: what a moved value is does not decide the exception)
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
        self.deferred.entered(mon.current, frame, mon.in_intrinsic)

    def on_call(self, frame, callee, args, kwargs, result, entered):
        if self.breaker.brk is not None:
            return
        if self.deferred.waiting and any(callee is f for f in ann.FRAME_READERS):
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
                why = f"{describe(callee)} reads an input's storage: again on every call, before the graph"
                self.step(callee, args, kwargs, result, dataclasses.replace(brk, reason=why), pure=True,
                          breaks=False)
                return
            indices = index_inputs(callee, args) if not kwargs else ()
            if not indices:
                self.step(callee, args, kwargs, result, brk, pure=_pure(callee) and not brk.changes)
                return
            self.indices.check_reads(indices, brk)
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
        return (not args and not kwargs and type(t) in PLAIN_TENSORS
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
            if not (owner_read or picks(callee) or self._reads_value(callee, a, full, kwargs)):
                return   # stores the value (list.append): a move
            if a.inplace or not a.pure:
                self.breaker.stop(f"{describe(callee)} changes or keeps a value computed eagerly")
                return
        if frame in self._callbacks:
            self.breaker.stop("a value computed eagerly used inside a callback of a native function")
            return
        self.step(callee, args, kwargs, result, None, pure=a is not None or _pure(callee))

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

    def _only_tensors(self, v, depth: int = TAINT_DEPTH) -> bool:
        """Are the dynamic values inside container ``v`` all tensors or floats (objects of
        their own, known by identity where they go)?"""
        if id(v) in self.dynamic:
            return isinstance(v, (torch.Tensor, float))
        if depth and type(v) in CONTAINERS:
            items = (x for kv in v.items() for x in kv) if type(v) is dict else v
            return all(self._only_tensors(x, depth - 1) for x in items)
        return True

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.breaker.brk is not None:
            return
        self.deferred.on_instruction(frame, ins)
        pending = self._pending
        if pending is not None and pending[0] is frame:
            self._instruction_step(frame, ins, inputs, outputs)
            return
        if not self.dynamic:
            return
        entered, self._entered = self._entered, None
        name = ins.opname
        if name in _MOVES:
            self._move(frame, name, inputs, outputs)
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
                self.step(operator.truth, (v,), None, bool(v), None, pure=True, call=False)
        elif name in _NONE_TESTS:
            pass   # a dynamic value is never None (None is checked where it is made)
        elif name in _COMPUTES:
            self.step(_COMPUTES[name](ins), inputs, None, outputs[0], None, pure=True, call=False)
        else:
            self.breaker.stop(f"{name} on a value computed eagerly")

    def _instruction_step(self, frame, ins, inputs, outputs):
        brk = self._finish()
        name = ins.opname
        if name in _TRUTH:
            v = inputs[0]
            with self.recorder.paused():
                truth = bool(v)
            self.step(operator.truth, (v,), None, truth, brk, pure=True, call=False)
        elif name == "FORMAT_VALUE":
            self.step(_COMPUTES[name](ins), inputs, None, outputs[0], brk, pure=True, call=False)
        elif index_inputs(name, inputs):
            self.indices.check_reads(index_inputs(name, inputs), brk)
        else:
            self.breaker.stop(brk.reason)

    def _unpack(self, seq, outputs) -> None:
        """``a, b = seq``, a tuple or list an eager step gave (``x.split_with_sizes(...)`` of a
        tensor whose shape follows its data): its items are subscripts of it, as ``seq[0]``
        would be, and its length is checked (the program raises where it differs)."""
        self.step(_has_length, (seq, len(outputs)), None, True, None, pure=True, call=False)
        for i, item in enumerate(reversed(outputs)):   # (item 0 is pushed last)
            self.step(operator.getitem, (seq, i), None, item, None, pure=True, call=False)

    def _move(self, frame, name, inputs, outputs) -> None:
        if name == "UNPACK_SEQUENCE" and id(inputs[0]) in self.dynamic and type(inputs[0]) in (tuple, list):
            self._unpack(inputs[0], outputs)
            return
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

