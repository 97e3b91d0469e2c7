"""Deferred checks: a step's result that has no identity of its own is checked where it is used.

Such a result (``print``'s None, a small int: CPython shares them) cannot be followed by
identity, so the record checks it (``magpy.records.segments``), but only once the frame's
next instruction shows that something depends on it: a statement call's result is just
popped.  A small int a step returned (``n = t.item()``) goes further: its shadow, a
:class:`Deferred`, follows it, its check is appended where the step is, and dropped when the
recording ends if the program only moved the int and gave it to floating tensor arithmetic
(a graph input then): a new value reuses the record.  Any other use, or a shadow the monitor
cannot follow, keeps the check.
"""
from __future__ import annotations

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.observer import CALLS, RETURNS, returns_to_caller, tracked
from magpy.graphs.dynamic import argument_shadows

# Instructions that only move a value with its shadow (the monitor's SHADOW_MOVES) or drop it.
_SHADOW_MOVES = bytecode.FAST_MOVES | {"COPY", "SWAP", "POP_TOP"}


class Deferred:
    """The shadow of a small int an eager step returned, whose check (``step``) waits for a
    use (see :meth:`DeferredChecks.on_instruction`)."""

    __slots__ = ("var", "value", "step")

    def __init__(self, var: str, value: int):
        self.var, self.value, self.step = var, value, None

    def __repr__(self):
        return f"<deferred check {self.var} == {self.value}>"


class DeferredChecks:
    """The checks of a segmenter's run that wait for a use (module docstring): the step
    result the current call gave, and the small ints whose shadows the monitor follows."""

    def __init__(self, segmenter):
        self.segmenter = segmenter
        self.waiting: dict[int, Deferred] = {}   # id -> small int whose check waits for a use
        self._unchecked = None   # (frame, lasti, var, value, slot, Deferred) of a result not tracked yet
        self._lifted_now: set[int] = set()  # ids of those the operation just recorded took as inputs
        self._passed: dict[int, set] = {}   # id(frame) -> ids of those its call bound to parameters
        self._levels: dict[int, int] = {}   # id(frame) -> intrinsics under way when it was entered

    def wait(self, frame, var: str, v, deferrable: bool) -> None:
        """Step result ``v`` (``var``) of the call ``frame`` is making has no identity: decided
        at the frame's next instruction (``deferrable``: an int from a callee that always gives
        one, which may become a graph input: its shadow follows it)."""
        mark = Deferred(var, v) if deferrable else None
        # (The call has taken its inputs off the stack; its result goes on top.)
        self._unchecked = (frame, frame.lasti, var, v, len(frame.stack), mark)

    def on_instruction(self, frame, ins) -> None:
        """``frame`` completed ``ins``: the result waiting there gets its shadow (the call that
        made it completed) or is decided (the next instruction uses it, unless it pops it), and
        the deferred ints ``ins`` took are settled."""
        unchecked = self._unchecked
        if unchecked is not None and unchecked[0] is frame:
            if unchecked[1] == frame.lasti:
                self._place(frame, unchecked)
            else:
                self._unchecked = None
                if ins.opname != "POP_TOP":
                    self._defer(unchecked)
        if self.waiting:
            self._used(frame, ins)

    def raised(self, frame, moved: bool) -> None:
        """The instruction ``frame`` is at raised (``moved``: one that only moves its inputs):
        the result waiting there is decided as where it completes, and the deferred ints it
        took keep their checks."""
        unchecked = self._unchecked
        if unchecked is not None and unchecked[0] is frame and unchecked[1] != frame.lasti:
            self._unchecked = None
            _, _, var, v, slot, _ = unchecked
            if moved:   # (decided here as where it completes, not in the handler)
                self._defer(unchecked)
            else:
                self.segmenter.check(v, var, slot=slot)
        if moved:
            return   # (``raise e``: what a moved value is does not decide the exception)
        for mark in tracked(frame.ins_shadows, Deferred, self.waiting):
            self.waiting.pop(id(mark), None)   # (its check stays)

    def entered(self, caller, frame, level: int) -> None:
        """``frame`` was entered from ``caller``'s instruction with ``level`` intrinsics under
        way: the deferred ints it got as parameters are followed there (a native's callback
        gets none)."""
        self._levels[id(frame)] = level
        if self.waiting:
            bound = tracked(frame.shadow_locals or (), Deferred, self.waiting)
            if bound:
                self._passed.setdefault(id(caller), set()).update(id(m) for m in bound)

    def shadows(self, args: tuple, kwargs: dict) -> tuple | None:
        """The shadows of the positional ``args`` of the tensor operation being recorded, while
        checks wait (None: none wait, or the monitor cannot tell)."""
        if not self.waiting:
            return None
        frame = self.segmenter.breaker.monitor.current
        found = argument_shadows(frame, args, kwargs) if hasattr(frame, "info") else None
        return found[0] if found is not None else None

    def lift(self, mark, v) -> str | None:
        """The variable of int ``v`` whose shadow is ``mark``, if its check waits: the tensor
        operation being recorded takes it as a graph input, which keeps it waiting."""
        if type(mark) is Deferred and id(mark) in self.waiting and mark.value is v:
            self._lifted_now.add(id(mark))
            return mark.var
        return None

    def clear(self) -> None:
        """The checks waiting stay (the program may read the ints where no shadow goes, or
        their values are about to be baked in)."""
        self.waiting.clear()

    def finish(self) -> set[int]:
        """The recording ended: the ids of the checks never needed (graph inputs), to drop."""
        dropped = {id(m.step) for m in self.waiting.values()}
        self.waiting.clear()
        return dropped

    def _place(self, frame, unchecked) -> None:
        """The call that returned the int has completed: its result slot gets the shadow."""
        mark = unchecked[5]
        if mark is not None and frame.stack and frame.stack[-1] is mark.value:
            frame.shadow_stack[-1] = mark

    def _defer(self, unchecked) -> None:
        """The instruction after the call keeps the int: check it there, deferred if it may
        become a graph input and a failed check there is a miss."""
        frame, _, var, v, slot, mark = unchecked
        seg = self.segmenter
        undoable = mark is not None and seg.undoable()
        step = seg.check(v, var, completed=True, slot=slot)
        if undoable and step is not None:
            mark.step = step
            self.waiting[id(mark)] = mark

    def _used(self, frame, ins) -> None:
        """Settle the deferred ints instruction ``ins`` took: moves and graph inputs keep
        them deferred, any other use checks them."""
        name = ins.opname
        lifted, self._lifted_now = self._lifted_now, set()
        passed = self._passed.pop(id(frame), ()) if name in CALLS else ()
        if name in _SHADOW_MOVES:
            return
        marks = tracked(frame.ins_shadows, Deferred, self.waiting)
        if not marks or (name in RETURNS and returns_to_caller(frame, self._levels)):
            return
        for m in marks:
            if id(m) not in lifted and id(m) not in passed:
                self.waiting.pop(id(m), None)
