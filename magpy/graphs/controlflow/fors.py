"""A ``for`` loop over tensors, or over a ``range`` longer than the unroll limit, recorded as one
``torch.while_loop`` (paper §6.2.2).

A ``for`` loop over a tensor (``for x_t in x:``, each step a slice of ``x``'s first
dimension) whose length is symbolic in the recording, or longer than
``config.max_unroll``, is recorded the same way as a ``while`` (magpy.graphs.controlflow.whiles),
as a ``while_loop`` that counts its steps: ``iter(x)`` runs unrecorded (its ``unbind``
would fix the length), two forks run the body on the first two slices, the second's
operations are the body graph with its slice read as ``x[i]``.  The loop variable is not
read after the loop (:class:`LoopLocal`).  An empty list the body appends one tensor to
per step (``outs.append(h)``) becomes a buffer the operator fills (:class:`Accumulated`);
after the loop only ``torch.stack`` or ``torch.cat`` may read it, which the graph takes
from that buffer.  Anything else a recording finds out too late (a read of the loop
variable or the list) ends it, and the next recording unrolls that loop
(``magpy.explain`` says why).

The other loop shapes of recurrent code are recorded the same way (a :class:`Walk` says
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

import gc
import operator

import torch

from magpy.capture.monitor import NULL
from magpy.capture.monitor.observer import Items, tracked
from magpy.config import config
from magpy.graphs.controlflow.carried import Slots, appended, carried_groups, entering
from magpy.graphs.controlflow.forks import MOVES, REFUSED, Forks, checks, jump_site, place, set_shadow
from magpy.graphs.controlflow.jumps import binding_of, for_loop
from magpy.graphs.controlflow.operator_shadows import Accumulated, LoopLocal
from magpy.graphs.controlflow.sandbox import Sandbox
from magpy.graphs.controlflow.walks import (
    RANGE_ITERATOR,
    WALKERS,
    Walk,
    iterating,
    range_words,
    ranging,
    restarted,
    walk_of,
    wrapped_walk,
)
from magpy.graphs.dynamic import Span
from magpy.graphs.operands import LOOP_INDEX

_STACKS = frozenset({"stack", "cat", "concat"})


class ForLoops(Forks):
    """The ``for`` part of :class:`~magpy.graphs.controlflow.branches.Branches` (module docstring):
    which loops it takes, their two steps and real run, and the uses after the loop of what
    it left (:class:`Accumulated` lists) and, in a fork, of a range loop's index."""

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
        found, over, ready = iterating(f, x)
        if found is None and wrapped_walk(f, x):
            self._note(f"for at {place(f)}: unrolled (zip or enumerate of tensors inside another call "
                       "than enumerate(zip(...)), e.g. list(zip(x, y)): not a walk recorded as one operator)")
        if found is None or any(t.dim() == 0 or t.size(0) < 2 for t in over):
            return False
        site = jump_site(f, ready)   # (where the loop's refusals are kept: its iterator made)
        if site in REFUSED:
            self._note(f"for at {place(f)}: unrolled ({REFUSED[site]})")
            return False
        if not all(self._symbolic_length(t) or t.size(0) > config.max_unroll for t in over):
            self._note(f"for at {place(f)}: unrolled ({x.size(0)} slices, a static length up to "
                       f"config.max_unroll={config.max_unroll})")
            return False
        if not self._one_length(over):
            self._note(f"for at {place(f)}: unrolled (zip of tensors of different lengths)")
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

    def _ranged(self, frame) -> None:
        """At ``iter(range(n))`` of a ``for`` loop: record it as a ``while_loop`` where ``n`` is
        symbolic or more than ``config.max_unroll`` (and the program is not inside a fork)."""
        found = for_loop(frame.info, frame.lasti)
        it = frame.stack[-1]
        if found is None or type(it) is not RANGE_ITERATOR or self.monitor.sandbox is not None:
            return
        _, (r,), pos = it.__reduce__()
        span = frame.ins_shadows[0] if type(frame.ins_shadows[0]) is Span else None
        if pos or len(r) < 2 or not self.recorder.forks_allowed():
            return
        if span is None and len(r) <= config.max_unroll:
            return
        if r.start < 0 or r[-1] < 0:   # (x[t] from the end: the operator's rows count from the start)
            self._note(f"for at {place(frame)}: unrolled (a negative index)")
            return
        if (config.control_flow and self.enabled and self.breaker.brk is None
                and jump_site(frame) not in REFUSED):
            self._record_range(frame, found, r, span)

    def _record_for(self, frame, over, found) -> str | None:
        """Record a ``for`` loop over the first dimension of the tensors ``over`` (``x``, or
        those ``enumerate``/``zip`` walk in step) as one ``torch.while_loop`` (module
        docstring).  Unlike other jumps, one that cannot be ends the recording: ``iter(x)`` ran
        unrecorded."""
        where, it = place(frame), frame.stack[-1]
        frame.pc = found[0]   # (after enumerate(x) or zip(x, y): their GET_ITER gives the object itself)
        walk = walk_of(it, over)
        why = self._counted(frame, walk, found) if walk else "its iterator is not over the tensors' slices"
        if why is not None:
            self._refuse(jump_site(frame), f"no while_loop for the for loop: {why}")
            return None
        self.conds.append(f"for at {where}: torch.while_loop over " + (
            "a symbolic number of slices" if self._symbolic_length(over[0])
            else f"more slices than config.max_unroll={config.max_unroll}") + WALKERS[type(it)][1])
        return None

    def _record_range(self, frame, found, r, span) -> None:
        """Record ``for i in range(n)`` as one ``torch.while_loop`` if its body can be one
        (module docstring); if not, the loop runs on, unrolled (``iter(range(n))`` was no
        tensor operation: nothing is lost)."""
        where = place(frame)
        why = self._counted(frame, ranging(r, span), found)
        if why is not None:
            self._note(f"for at {where}: unrolled ({why})")
            return
        if span is not None:
            span.taken = True
        self.conds.append(f"for at {where}: torch.while_loop over " + (
            range_words(r, "a symbolic n") if span is not None
            else f"{range_words(r, r.stop)}, more steps than config.max_unroll={config.max_unroll}"))

    def _counted(self, frame, walk, found) -> str | None:
        """:meth:`_for_operator`, with the loop's index (``walk.index``) read by the body's
        tensor operations as the step count (``LOOP_INDEX``)."""
        self._counting = walk.index is not None
        try:
            return self._for_operator(frame, walk, found)
        finally:
            self._counting = False

    def _for_operator(self, frame, walk: Walk, found) -> str | None:
        """Record the ``for`` loop of ``frame`` that takes the steps ``walk`` as one
        ``while_loop``; the reason it cannot be, or None."""
        head, body, exit = found
        binding = binding_of(frame.info, body, walk.values[0])
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
        why = checks(arm1, arm2)
        if why is not None:
            return why
        if not (len(frame.stack) == len(fork1.stack) == len(fork2.stack)):
            return "an iteration leaves a different stack"
        slots = Slots(*(self._graph_values(f) for f in (frame, fork1, fork2)))
        if any(slots.holds(row) or any(c is row for c in arm2.captures) for row in walk.rows[0]):
            return "an iteration keeps the slice of the one before"
        var = [i for slot in binding[1] for i in slots.step(slot)]
        # (a walk of n >= 2 slices runs its body at least once: a tensor it carries may begin
        # without requires_grad and gain it, as eager's does, under autograd)
        groups, why = carried_groups(slots.before, slots.after1, slots.after2, arm1, arm2, self._kind,
                                      gains_grad=torch.is_grad_enabled())
        filled = [(lst, a, b) for lst, a, b in zip(accs, items1, items2) if a or b]
        why = why or appended(filled, arm1, arm2, self._kind) or self._stored(writes1, writes2, arm1, arm2)
        if why is not None:
            return why
        stores = [(out, b) for (out, _), (_, b) in zip(writes1, writes2)]
        outs = [out for out, _ in stores]
        state = [slots.after1[g[0]] for g in groups]
        extra = [c for c in arm2.captures if all(c is not s for s in (*walk.rows[1], *state))]
        if any(arm1.made(c) for c in extra):
            return "an iteration reads a tensor the one before made but did not keep"
        firsts = [next((slots.before[i] for i in g if slots.before[i] is not NULL), NULL) for g in groups]
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
        self.recorder.for_loop(walk.over, walk.rows[1], walk.index, entering(firsts, state), arm2, state,
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
        own = frame.stack[-1] = restarted(it)
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
        site = jump_site(frame)
        for i in carried:
            set_shadow(frame, i, None)
        for i in var:
            frame.shadow_locals[i] = LoopLocal(site)
            self.loop_locals = True
        for lst, out in filled:
            mark = Accumulated(lst, out, site)
            self.accs[id(mark)] = mark
            frame.shadow_locals[next(i for i, v in enumerate(frame.locals) if v is lst)] = mark

    def _step(self, frame, walk: Walk, k: int, binding: tuple, found, accs):
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
        added = []
        for lst, n in zip(accs, sizes):
            added.append(lst[n:])
            del lst[n:]
        return arm, fork, why, added, sandbox.writes or []

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

    def _accumulator_use(self, frame, ins, consumed: set) -> None:
        """An :class:`Accumulated` list goes only to ``torch.stack``/``torch.cat`` (which took
        the buffer: ``consumed``) and moves between slots."""
        if ins.opname in MOVES:
            return
        for m in tracked(frame.ins_shadows, Accumulated, self.accs):
            if id(m) not in consumed:
                self._refuse(m.site, f"a list a for loop appended to is used after it ({ins.opname})")

    def _index_use(self, frame, ins, consumed: set) -> None:
        """In a fork of a range loop's body the index goes only into tensor operations (which
        took it: ``consumed``), moves between slots and is put in tuples of their arguments."""
        mark = LOOP_INDEX
        if not any(sh is mark or (type(sh) is Items and mark in sh) for sh in frame.ins_shadows):
            return
        if ins.opname in MOVES or id(mark) in consumed:
            return
        if ins.opname == "BUILD_TUPLE":
            frame.shadow_stack[-1] = Items(frame.ins_shadows)
            return
        self.monitor.sandbox.stop(f"the loop's index is used in Python ({ins.opname})")


def _only_in(lst: list, frame) -> bool:
    """Is the frame's one local variable holding ``lst`` its only reference (nothing else
    could read what a loop appends to it)?"""
    # (No closure over lst here: its cell would be a referrer.)
    return [id(v) for v in frame.locals].count(id(lst)) == 1 and gc.get_referrers(lst) == [frame.locals]


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():   # (magpy's own reads)
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
