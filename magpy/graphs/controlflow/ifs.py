"""An ``if`` on tensor data recorded as one ``torch.cond`` (paper §6.2.2).

At a conditional jump whose condition is a tensor (``if x.sum() > 0:``) the recording run
does not break (magpy.records.segments would make the truth an eager step and the record serve
one outcome).  Both arms run as *forks* of the frame, each up to the instruction where
they meet (the join), under a :class:`~magpy.graphs.controlflow.sandbox.Sandbox` that stops a
fork before anything observable happens (its module says what an arm may do).

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
"""
from __future__ import annotations

import torch

from magpy.capture.monitor import NULL
from magpy.capture.monitor.observer import CALLS, RETURNS, Items, returns_to_caller, tracked
from magpy.capture.refgraph.graph import is_immutable
from magpy.graphs.controlflow.forks import MOVES, Forks, equal, jump_site, meta, place, set_shadow
from magpy.graphs.controlflow.operator_shadows import Passed
from magpy.graphs.dynamic import argument_shadows
from magpy.graphs.operands import LOOP_INDEX

# Tensor attributes that are metadata (a passed-through tensor and the cond's output agree).
_METADATA = frozenset({"shape", "dtype", "device", "ndim", "layout", "requires_grad", "is_cuda", "size",
                       "dim"})
_CELL_OPS = frozenset({"MAKE_CELL", "STORE_DEREF", "LOAD_DEREF"})
_PLAIN = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, torch.device)


class Ifs(Forks):
    """The ``if`` part of :class:`~magpy.graphs.controlflow.branches.Branches`: both arms forked and
    merged into a cond, and the :class:`Passed` shadows of the tensors an arm passed through
    followed where the program takes them (module docstring)."""

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
            self.conds.append(f"if at {place(frame)}: torch.cond, the run took the "
                              f"{'true' if truth else 'false'} arm")
        return why

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
                    return f"the arms give tensors of different kinds ({meta(a)} and {meta(b)})"
                outputs.setdefault((id(a), id(b)), [a, b, []])[2].append(i)
            elif not (type(a) is type(b) and is_immutable(a) and equal(a, b)):
                return f"the arms leave different Python values ({type(a).__name__}, {type(b).__name__})"
        if len({k[0] for k in outputs}) != len(outputs):
            return "a tensor of the taken arm pairs with different tensors of the other"
        if not (outputs or arm_t.checks() or arm_o.checks()):
            return None   # the arms' operations made nothing the program keeps or checks
        stand_ins, marks = [], []
        held = fork_t.locals + fork_t.stack
        for a, _, slots in outputs.values():
            if arm_t.made(a):
                stand_ins.append(a)
                continue
            with self.recorder.paused():
                out = a.detach()   # (only a key for the cond's output: never the program's)
            mark = Passed(out, held[slots[0]], jump_site(frame))
            marks.extend((i, mark) for i in slots)
            stand_ins.append(out)
        self.recorder.cond(t, truth, (arm_t, [a for a, _, _ in outputs.values()]),
                           (arm_o, [b for _, b, _ in outputs.values()]), stand_ins)
        for i, mark in marks:
            set_shadow(fork_t, i, mark)
            self.live[id(mark)] = mark
        return None

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
        if name in MOVES:
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
                                or returns_to_caller(frame, self._levels)):
            return   # to the calling instruction, or the call's result (see result)
        for m in marks:
            if id(m) not in consumed and id(m) not in passed:
                self._escaped(m, name)
                return

    def _escaped(self, mark, how: str) -> None:
        self._refuse(mark.site, f"a tensor an if left as it was is used where magpy cannot follow it ({how})")

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


def _bound_self(f, first, live: dict):
    """The :class:`Passed` shadow of the bound method a CALL calls, if ``first`` (the
    operation's first argument) is its ``self``."""
    for v, sh in zip(f.ins_inputs, f.ins_shadows):
        if (type(sh) is Passed and id(sh) in live and sh.value is first
                and getattr(v, "__self__", None) is first):
            return sh
    return None
