"""A ``while`` loop on tensor data recorded as one ``torch.while_loop`` (paper §6.2.2).

A ``while`` whose test reads a tensor's truth (the jump at its top and the one back at the
end of its body) is recorded from two iterations of its body, each a fork from the state
the one before left, under the sandbox an ``if``'s arms run under (magpy.graphs.controlflow.ifs);
the second fork's operations are the body graph (the first's reads of the loop's variables
may coincide with tensors from before the loop, the second's cannot).  Between the state
before the loop and after each iteration, every slot but the loop's tensors must be equal;
the slots that change (grouped by the tensor they hold: ``h = new``) are the carried
operands, whose tensor each iteration makes anew with the same dtype, shape, strides and
``requires_grad``; whether the loop goes on is carried too (a 0-d bool tensor).  The loop
then runs for real on a copy of the frame, unobserved but sandboxed, and the frame goes on
after it.  A loop the run does not enter leaves its tensors as they were (``Passed``
shadows, as an ``if`` does); a variable the body sets that was unbound before the loop
enters the operator as zeros and must not be read after the loop (:class:`LoopLocal`),
since a loop that does not run leaves it unbound.
"""
from __future__ import annotations

import math

import torch

from magpy.capture.monitor import NULL
from magpy.graphs.controlflow.carried import carried_groups, zeros_like
from magpy.graphs.controlflow.forks import Forks, arrive, checks, jump_site, meta, place, set_shadow
from magpy.graphs.controlflow.operator_shadows import LoopLocal, Passed


class WhileLoops(Forks):
    """The ``while`` part of :class:`~magpy.graphs.controlflow.branches.Branches` (module docstring),
    and the :class:`LoopLocal` shadows a loop leaves."""

    def _record_loop(self, frame, t, found) -> str | None:
        """Record a ``while`` loop on tensor data as one ``torch.while_loop`` (module
        docstring); the reason it cannot be, or None."""
        body, test, exit, back_if = found
        with self._same_random_numbers() as drew:
            first = self._iterate(frame, body, test, back_if)
            second = self._iterate(first[1], body, test, back_if) if first[2] is None else first
        why = second[2] or ("the loop draws random numbers" if drew else None) or checks(first[0], second[0])
        if why is None:
            why = self._loop_operator(frame, t, first, second, found)
        if why is None:
            self.conds.append(f"while at {place(frame)}: torch.while_loop")
        return why

    def _iterate(self, frame, body, test, back_if):
        """One iteration of the loop's body from ``frame``'s state, in a fork that stops at the
        test at its end: ``(arm, fork, None)`` or ``(None, None, why not)``; the arm's last
        operation gives whether the loop goes on (``arm.goes_on``)."""
        goes_on = []

        def at_test(f, arg):
            c = f.stack.pop()
            if not (isinstance(c, torch.Tensor) and math.prod(meta(c)[1]) == 1):
                self.monitor.sandbox.stop("the loop's test is not on a tensor")
            goes_on.append(_goes_on(c, back_if))
            return arrive(f, arg)
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
        groups, why = carried_groups(before, after1, after2, arm1, arm2, self._kind)
        if why is not None:
            return why
        state = [after1[g[0]] for g in groups] + [arm1.goes_on]
        extra = [c for c in arm2.captures if all(c is not x for x in state)]
        if any(arm1.made(c) for c in extra):
            return "an iteration reads a tensor the one before made but did not keep"
        firsts = [next((before[i] for i in g if before[i] is not NULL), NULL) for g in groups]
        goes_on = _goes_on(t, back_if)
        outputs = [after2[g[0]] for g in groups]
        unbound = [f is NULL for f in firsts]
        # Variables the body sets before reading them enter the operator as zeros.
        entering = [zeros_like(x) if f is NULL else f for f, x in zip(firsts, state)]
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
            set_shadow(frame, i, LoopLocal(jump_site(frame)) if unbound else None)
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
            mark = Passed(out, held[g[0]], jump_site(frame))
            self.live[id(mark)] = mark
            for i in g:
                set_shadow(frame, i, mark)
        return finals

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


def _goes_on(c: torch.Tensor, back_if: bool) -> torch.Tensor:
    """Whether a loop whose test gave ``c`` goes on, as a new 0-d bool tensor (what
    ``torch.while_loop``'s condition returns); recorded like the program's operations."""
    return ((c != 0) if back_if else (c == 0)).reshape(())
