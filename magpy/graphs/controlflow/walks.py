"""The steps of a ``for`` loop recorded as a ``while_loop`` (magpy.graphs.controlflow.fors): which
iterators are walks over tensors' slices or a ``range`` (:func:`walk_of`, :func:`ranging`),
what each step gives and how the operator's body reads it from its step count
(:class:`Walk`), where the program makes such an iterator (:func:`iterating`), and a fresh
copy of it for the loop's real run (:func:`restarted`).
"""
from __future__ import annotations

import dataclasses

import torch

from magpy.capture.monitor import bytecode
from magpy.capture.monitor.observer import Items
from magpy.graphs.controlflow.jumps import for_loop
from magpy.graphs.operands import LOOP_INDEX

RANGE_ITERATOR = type(iter(range(0)))
_TUPLE_ITERATOR = type(iter(()))


def _iterated(it) -> tuple | None:
    """The tensors a tuple iterator that has not started goes over (``iter(x)`` of a tensor
    is one over ``x.unbind(0)``), else None."""
    if type(it) is not _TUPLE_ITERATOR:
        return None
    _, (items,), pos = it.__reduce__()
    return items if pos == 0 and all(isinstance(t, torch.Tensor) for t in items) else None


@dataclasses.dataclass(frozen=True)
class Walk:
    """The steps of a ``for`` loop recorded as a ``while_loop``: ``over``, the tensors whose
    first dimension it walks in step, or (a range) its number of steps; ``values``, what the
    iterator gives on the first two steps, and ``rows``, the slices of ``over`` each holds;
    ``index``, ``(start, step)`` of the number each gives (range, enumerate) or None, and
    ``shadow``, a value's shadow (``LOOP_INDEX`` where that number is)."""

    over: object
    values: tuple
    rows: tuple
    index: tuple | None = None
    shadow: object = None

    def pushed(self, k: int, unpacks: bool) -> list:
        """The ``(value, shadow)`` pairs step ``k`` puts on the stack for the body: its value,
        or the value's items in the order ``UNPACK_SEQUENCE`` pushes them."""
        v = self.values[k]
        if not unpacks:
            return [(v, self.shadow)]
        return list(zip(reversed(v), reversed(self.shadow or (None,) * len(v))))


def _sliced(iterators, over: tuple) -> Walk | None:
    """The walk of tuple iterators over the slices of the tensors ``over`` in step: each
    value the row of one slice of each (one tensor: the slice); None if they are not such
    iterators, not started."""
    items = [_iterated(i) for i in iterators]
    if len(items) != len(over) or any(s is None for s in items):
        return None
    rows = tuple(zip(*(s[:2] for s in items)))
    return Walk(over, tuple(r if len(r) > 1 else r[0] for r in rows), rows)


def _walk_tuple(it, over):
    return _sliced([it], over)


def _walk_enumerate(it, over):
    """``enumerate`` of a tensor's slices or of a ``zip`` of them: each value after its number."""
    inner, start = it.__reduce__()[1]
    walk = _walk_zip(inner, over) if type(inner) is zip else _sliced([inner], over)
    if walk is None:
        return None
    values = tuple((start + k, v) for k, v in enumerate(walk.values))
    return Walk(over, values, walk.rows, (start, 1), Items((LOOP_INDEX, None)))


def _walk_zip(it, over):
    return _sliced(it.__reduce__()[1], over)


# How a for loop recorded as a while_loop walks tensors, by its iterator's type: its Walk,
# and the words explain adds.
WALKERS = {_TUPLE_ITERATOR: (_walk_tuple, ""), enumerate: (_walk_enumerate, " (enumerate)"),
            zip: (_walk_zip, " (zip)")}


def walk_of(it, over: tuple) -> Walk | None:
    """The walk of ``it``, the iterator of a ``for`` loop over the slices of tensors ``over``
    (not started); None if it is none magpy knows."""
    walker = WALKERS.get(type(it))
    return None if walker is None else walker[0](it, over)


def range_words(r: range, end) -> str:
    """``r`` as explain names it, with ``end`` (words for a symbolic one) as its end."""
    return f"range({end})" if (r.start, r.step) == (0, 1) else f"range({r.start}, {end}, {r.step})"


def ranging(r: range, span) -> Walk:
    """The walk of ``range`` ``r``, whose end is ``span.stop`` (a SymInt) if ``span``: each
    step gives its index, the operator's number of steps is ``len(r)``."""
    if span is None:
        return Walk(len(r), (r[0], r[1]), ((), ()), (r.start, r.step), LOOP_INDEX)
    with torch._C.DisableTorchFunction():   # (torch.sym_max is a torch function: magpy's own)
        n = torch.sym_max(-((r.start - span.stop) // r.step), 0)   # (len of a range, either sign)
    return Walk(n, (r[0], r[1]), ((), ()), (r.start, r.step), LOOP_INDEX)


# The restart of an iterator the real run of a for loop takes, by type, from its __reduce__
# arguments (others: a range or tuple iterator).
_RESTARTS = {enumerate: lambda args: enumerate(restarted(args[0]), args[1]),
             zip: lambda args: zip(*map(restarted, args))}


def restarted(it):
    """A copy of ``it``, a ``for`` loop's iterator that has not started: a range or tuple
    iterator, or ``enumerate``/``zip`` of those."""
    args = it.__reduce__()[1]
    again = _RESTARTS.get(type(it))
    return iter(args[0]) if again is None else again(args)


def iterating(f, x) -> tuple:
    """``(the for loop, the tensors it walks the slices of in step, the code unit after which
    the loop's iterator is made)`` if ``x.unbind(0)`` runs for the iterator of a ``for`` loop
    of frame ``f``: ``iter(x)`` at its ``GET_ITER``, the call ``enumerate(x)``/``zip(x, y,
    ...)`` whose result that ``GET_ITER`` takes, or such a ``zip`` in ``enumerate(zip(x, y))``;
    else ``(None, (), None)``."""
    found = for_loop(f.info, f.lasti)
    if found is not None:
        return found, (x,), f.lasti
    call = _walk_call(f, x)
    ready = f.lasti if call is not None else None
    if call is not None and call[0] is zip and for_loop(f.info, f.info.ops[ready][2]) is None:
        ready = _enumerating(f)
    found = for_loop(f.info, f.info.ops[ready][2]) if ready is not None else None
    return (found, call[1], ready) if found is not None else (None, (), None)


def _walk_call(f, x) -> tuple | None:
    """``(callee, the tensors)`` of the call ``enumerate(x)``/``zip(x, y, ...)`` at ``f``'s
    instruction, if that is one."""
    ins = f.info.instructions[f.lasti]
    if ins is None or ins.opname != "CALL" or not f.ins_inputs:
        return None
    callee, args = bytecode.call_operands(f.ins_inputs)
    if callee is enumerate and len(args) == 2 and type(args[1]) is int and args[1] >= 0:
        args = args[:1]   # (a start: the index's, not a tensor; a negative one indexes from the end)
    tensors = all(isinstance(a, torch.Tensor) for a in args) and any(a is x for a in args)
    return (callee, args) if tensors and (callee is zip or callee is enumerate and len(args) == 1) else None


# What may come between the call of a zip and enumerate's call taking it: the start (a
# constant) and, before 3.12, the PRECALL.
_BEFORE_ENUMERATE = frozenset({"LOAD_CONST", "PRECALL"})


def _enumerating(f) -> int | None:
    """The code unit of the call ``enumerate(<the zip f's call makes>[, a constant start])``
    right after that call, the builtin ``enumerate`` (nothing of the program runs between
    the two calls); else None."""
    if not any(v is enumerate for v in f.stack[-2:]):   # (the callee beside its NULL, by version)
        return None
    consts = 0
    for at in _following(f):
        ins = f.info.instructions[at]
        if ins is None or ins.opname == "LOAD_CONST" and not (type(ins.argval) is int and ins.argval >= 0):
            return None
        if ins.opname == "CALL":
            return at if ins.arg == 1 + consts else None
        if ins.opname not in _BEFORE_ENUMERATE:
            return None
        consts += ins.opname == "LOAD_CONST"
    return None


# How many instructions after a zip/enumerate call a loop may start and still be the one it
# feeds through other calls (``enumerate(zip(x, y))``, ``list(zip(x, y))``).
_WRAPPED_WITHIN = 5


def wrapped_walk(f, x) -> bool:
    """Is the call at ``f``'s instruction an ``enumerate``/``zip`` of tensors whose result
    another call wraps before a ``for`` loop takes it (not a walk :func:`iterating` knows)?"""
    return _walk_call(f, x) is not None and any(for_loop(f.info, at) is not None for at in _following(f))


def _following(f):
    """The code units of the instructions after ``f``'s, up to ``_WRAPPED_WITHIN`` of them."""
    at = f.info.ops[f.lasti][2]
    for _ in range(_WRAPPED_WITHIN):
        if at is None or at >= len(f.info.instructions):
            return
        yield at
        at = f.info.ops[at][2]
