"""Eager steps: what a record runs between its graphs, and the values they compute.

A step's result changes from call to call, so the segmenter (``magpy.records.segments``)
follows it by identity wherever it goes.  Its parts share what that rests on: the
:class:`Step` itself, which values have an identity of their own (:func:`ambiguous`), how
deep into containers a value computed eagerly is followed (:func:`leaves`), which natives
give back one of their arguments (:func:`picks`), and how messages name a step's callee.
"""
from __future__ import annotations

import dataclasses

from magpy.errors import GraphBreak
from magpy.graphs.opgraph import thread_modes
from magpy.records.continuations import ResumePoint

_SMALL_INTS = range(-5, 257)   # CPython's cached ints: the same object wherever they come from
CONTAINERS = (list, tuple, dict, set, frozenset)
TAINT_DEPTH = 4
# Natives that give back one of their arguments, which one depending on the values.
_PICKERS = (max, min)


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


def ambiguous(v) -> bool:
    """A value whose identity says nothing about where it came from (a cached singleton):
    it cannot be tracked by identity, so a step's result like this is checked instead."""
    t = type(v)
    return (v is None or t is bool or (t is int and v in _SMALL_INTS) or (t is str and len(v) <= 1)
            or (t is tuple and not v) or v is Ellipsis or v is NotImplemented)


def leaves(v, depth=TAINT_DEPTH):
    """The values in ``v`` and the containers it holds, down to ``depth``."""
    t = type(v)
    if depth and t in CONTAINERS:
        for x in (v.values() if t is dict else v):
            yield from leaves(x, depth - 1)
    else:
        yield v


def picks(fn) -> bool:
    """Does native ``fn`` give back one of its arguments (``max``, ``min``)?"""
    return any(fn is f for f in _PICKERS)


def describe(fn) -> str:
    """A step's callee as messages name it."""
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
