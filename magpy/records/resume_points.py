"""Resume points of a recording run: where the monitor takes the call back after effects.

A check that fails in the mock before anything observable happened is a miss, and the call
runs again; after an effect it must not, so the check carries a resume point
(:func:`magpy.records.continuations.take`), and so does a step after effects that may raise
where the program handles it.  Where the call cannot resume there, the run gives up.
"""
from __future__ import annotations

import types

import torch

from magpy.capture.monitor.observer import Entries, Items
from magpy.graphs.dynamic import IntFloat, Scalar, Walk, specialise, symbolic
from magpy.records import continuations
from magpy.records.continuations import ResumePoint, Shadowed

# A step where the program would handle its exception, but the call cannot resume there.
HANDLED_NOWHERE = object()


class ResumePoints:
    """The resume points a segmenter's run takes (module docstring), and what decides where
    it can take one."""

    def __init__(self, segmenter):
        self.segmenter = segmenter
        self.points: list[ResumePoint] = []
        self.rebuilt = frozenset()   # a continuation's: ids of the values its parent rebuilt
        self.resumed = ()            # a continuation's: its frames (continuations.frames), innermost first
        # magpy.capture.callees.numpy_arrays.Arrays: frames holding its arrays cannot be resume points
        self.arrays = None
        self.branches = None   # magpy.graphs.controlflow.Branches: a loop's variables end a resume point

    def for_check(self, completed: bool, slot=None) -> ResumePoint | None:
        """A resume point for a check after effects (``Segmenter.check``); None where the
        call cannot resume there (the run gives up)."""
        breaker = self.segmenter.breaker
        if self.arrays is not None and self.arrays.unresumable is not None:
            breaker.stop(f"a value computed eagerly decides the call after effects, where "
                         f"{self.arrays.unresumable}")
            return None
        try:
            return self.take(completed, slot)
        except Exception as e:  # noqa: BLE001 - Unresumable, or the recorder's refusal
            breaker.stop("a value computed eagerly decides the call (the record would check it) "
                         "after effects a failed check cannot take back, and the call cannot "
                         f"resume there: {e}")
            return None

    def for_raise(self):
        """Where a step after effects raises in a later call's mock and the program may handle
        it (an ``except``, ``finally`` or ``with`` covers it in a live frame): a resume point
        the monitor resumes from with that exception (None: nothing handles it, it propagates
        from the mock as from eager).  Where one would handle it but the call cannot resume
        there, the recording stops (the mock could not give the exception to the handler):
        :data:`HANDLED_NOWHERE`."""
        breaker = self.segmenter.breaker
        f = breaker.monitor.current
        while hasattr(f, "info") and f.info.handlers[f.lasti] is None:
            f = f.back
        if not hasattr(f, "info"):
            return None
        why = None
        if self.arrays is not None and self.arrays.unresumable is not None:
            why = self.arrays.unresumable
        elif not continuations.resumable(breaker.monitor, self.resumed):
            why = "its frames cannot be taken"   # (before take ends the piece and checks what it defers)
        else:
            try:
                return self.take(completed=False)
            except Exception as e:  # noqa: BLE001 - Unresumable, or the recorder's refusal
                why = str(e)
        breaker.stop("an operation on a value computed eagerly that may raise where the program "
                     f"handles it, after effects, and the call cannot resume there: {why}")
        return HANDLED_NOWHERE

    def take(self, completed: bool, slot=None) -> ResumePoint:
        """A resume point here (:func:`magpy.records.continuations.take`); raises where there is none."""
        seg = self.segmenter
        # A resume point holds the frames' values as they are: a small int whose check was
        # deferred would be baked into it, so those are checked after all; floats read in the
        # graph are variables of the mock there.
        seg.deferred.clear()
        seg.floats.realize_all()
        left = self.branches.left_by_loop() if self.branches is not None else None
        if left is not None:
            raise continuations.Unresumable(left)
        # The state here must be the graphs' work so far: end the piece here.
        rec = seg.recorder
        rec.cut()
        point = continuations.take(len(self.points), seg.breaker.monitor, seg.breaker.graph,
                                   seg.dynamic, completed, slot, produced=rec.produced,
                                   shadowed=self._taken,
                                   rebuilt=self.rebuilt, resumed=self.resumed)
        point.before = seg.before()
        point.made.update(rec.choices(list(point.made)))
        if rec.shapes is not None:
            point.stores = dict(rec.shapes.stores)
        self.points.append(point)
        return point

    def _taken(self, v, sh):
        """What a resume point takes for a frame's value ``v`` whose shadow is ``sh``
        (``continuations.take``'s ``shadowed``)."""
        passed = self.branches.passed_as(v, sh) if self.branches is not None and sh is not None else None
        if passed is not None:
            return passed
        shapes = self.segmenter.recorder.shapes
        if shapes is None:
            return None
        if type(v) is types.CellType and sh is None:   # (a cell's own shadow: the contents' then)
            try:
                sh = shapes.in_cell(v, v.cell_contents)
            except ValueError:
                return None   # (empty)
        return shadowed(v, sh)


def shadowed(v, sh) -> Shadowed | None:
    """What a resume point (or a step) takes for a frame's value ``v`` whose shadow is ``sh``: a
    lifted float or size (or one computed from them) the mock computes from the call's own; a
    container of them, or a value the shadow does not stand for, is baked in, so the record
    guards what it holds (None: ``v`` as it is)."""
    if not symbolic(sh):
        return None
    if type(sh) in (Scalar, torch.SymInt, IntFloat):
        held = v.cell_contents if type(v) is types.CellType else v   # (a frame's cell: its contents)
        if type(held) in (int, float) and (type(sh) is not IntFloat or type(held) is float):
            return Shadowed(held, sh)
    if (type(sh) is Items and type(v) in (tuple, list) and len(v) == len(sh)
            or type(sh) is Entries and type(v) is dict and sh.keys() <= v.keys()
            or type(sh) is Walk and continuations.walked_sequence(v, sh) is not None):
        return Shadowed(v, sh)   # (its items taken with theirs: continuations._Taker.take_slot)
    specialise(sh)
    return None
