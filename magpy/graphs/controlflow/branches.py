"""The observer that records control flow on tensor data as operators (magpy.graphs.controlflow):
:class:`Branches`, which the recorder asks at each read of a tensor's truth and each
``iter`` of a tensor whether it takes that jump or loop, and which checks each instruction
of the run and of its forks.  Its methods for each kind of jump live in its parts:
:class:`~magpy.graphs.controlflow.ifs.Ifs`, :class:`~magpy.graphs.controlflow.whiles.WhileLoops` and
:class:`~magpy.graphs.controlflow.fors.ForLoops`, on :class:`~magpy.graphs.controlflow.forks.Forks`.
"""
from __future__ import annotations

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import Observer, bytecode
from magpy.capture.monitor.observer import CALLS, tracked
from magpy.config import config
from magpy.graphs.controlflow.forks import MOVES, REFUSED, jump_site
from magpy.graphs.controlflow.fors import ForLoops
from magpy.graphs.controlflow.ifs import Ifs
from magpy.graphs.controlflow.jumps import arms, loop
from magpy.graphs.controlflow.operator_shadows import Accumulated, LoopLocal, Passed
from magpy.graphs.controlflow.whiles import WhileLoops
from magpy.graphs.dynamic import symbolic


class Branches(Ifs, WhileLoops, ForLoops, Observer):
    """Records tensor ``if``s of one recording run as ``torch.cond`` (magpy.graphs.controlflow.ifs),
    tensor ``while`` loops and ``for`` loops over tensors as ``torch.while_loop``
    (magpy.graphs.controlflow.whiles, magpy.graphs.controlflow.fors).

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
        if found is None or jump_site(f) in REFUSED:
            return False
        self._pending = (f, f.lasti, t, record, found)
        return True

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

    def _symbolic_use(self, frame, ins) -> bool:
        """In a fork, does the instruction use a symbolic size or lifted number other than by
        moving it, handing it to a tensor operation (which records it symbolically) or to a
        Python function as a parameter (whose instructions are watched the same way)?
        magpy.graphs.dynamic's observer, which would specialise such a use, does not watch forks:
        the arm's graph would hold the size as a constant that no guard checks."""
        shapes = self.recorder.shapes
        if shapes is None or not shapes.active:
            return False
        matched, shapes.matched = shapes.matched, False
        return not (matched or ins.opname in MOVES or not any(map(symbolic, frame.ins_shadows))
                    or ins.opname in CALLS and shapes.passed_on(frame))
