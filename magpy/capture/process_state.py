"""Many callers: the concurrency model, and the process-wide state magpy changes.

A compiled callable is shared: a server calls it from many threads at once.  What holds:

- **Records** (``magpy.records.cache``) are read without locks and changed under one: a callable's
  records are an immutable tuple that a change (a new record, a reordering, a dropped one)
  replaces whole under the callable's lock, so a call tries a consistent snapshot.  A
  record's continuations change under the same lock.
- **Recordings are coalesced.**  One recording of a callable runs at a time.  A call that
  misses while another thread records runs eagerly meanwhile (its result is eager's); the
  thread that records first tries the records that landed since its own guards ran, so a
  miss that another thread already recorded is never recorded again.  A call that resumes
  after an eager step (``magpy.records.continuations``) does the same: it finishes unrecorded while
  another recording of the callable is under way.
- **The background compiler** (``magpy.backends.background``) runs one compile at a time in its
  worker; a record's compile is started once and taken once (by whichever call sees it
  done first), and a graph's trial against its eager twin (``magpy.backends.autopilot``) counts
  and decides under its own lock, once.
- **Thread-local state** (grad mode, inference mode, autocast, torch function modes such
  as magpy's operation recorder, trace functions) is the calling thread's own: a
  recording in one thread never sees another thread's modes, and restores its own on exit.
- **Process-wide state** (the recursion limit the monitor raises, the garbage collector's
  window, the interpreter's switch interval while a compile runs) is changed by a
  :class:`Held` change: the first holder changes it, later ones (in any thread,
  overlapping in any order) only count, and the last one to leave restores exactly what
  the first found, unless the program itself changed it meanwhile (then the program's
  value stays).  A process forked meanwhile keeps only the forking thread's holds.
- **Exceptions are attributed** (``magpy.records.cache``, ``magpy.records.record``): an exception raised by
  the program (its code, or an operation it called) reaches the caller unchanged; one
  raised by magpy's machinery is a :class:`magpy.errors.CaptureError` (the call runs
  eagerly, with one warning, unless ``config.on_capture_error = "raise"``).
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Callable

_ALL: weakref.WeakSet = weakref.WeakSet()


class Held:
    """A change of process-wide state, made while any session holds it.

    ``change()`` makes the change and returns what undoes it (or None: nothing to undo);
    it runs when the first holder enters, the undo when the last one leaves."""

    def __init__(self, change: Callable[[], Callable[[], None] | None]):
        self._change = change
        self._lock = threading.Lock()
        self._holders: dict[int, int] = {}   # thread ident -> its holds (nested sessions)
        self._undo: Callable[[], None] | None = None
        _ALL.add(self)

    def __enter__(self) -> Held:
        ident = threading.get_ident()
        with self._lock:
            if not self._holders:
                self._undo = self._change()
            self._holders[ident] = self._holders.get(ident, 0) + 1
        return self

    def __exit__(self, *exc) -> bool:
        ident = threading.get_ident()
        with self._lock:
            n = self._holders.pop(ident) - 1
            if n:
                self._holders[ident] = n
            elif not self._holders:
                self._end()
        return False

    def held(self) -> bool:
        """Does some session (in any thread) hold the change now?"""
        return bool(self._holders)

    def _end(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def _forked(self) -> None:
        # In a forked child only the forking thread lives on: the others' holds are gone.
        self._lock = threading.Lock()
        mine = self._holders.get(threading.get_ident())
        self._holders = {threading.get_ident(): mine} if mine else {}
        if not self._holders:
            self._end()


def _forked_child() -> None:
    for held in list(_ALL):
        held._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


# Each monitored frame costs a few host frames: the monitor keeps the program's own depth.
FRAMES_PER_CALL = 6


def _raise_recursion_limit() -> Callable[[], None]:
    old = sys.getrecursionlimit()
    raised = old * FRAMES_PER_CALL
    sys.setrecursionlimit(raised)

    def undo() -> None:
        if sys.getrecursionlimit() == raised:   # (else the program set its own limit meanwhile)
            sys.setrecursionlimit(old)

    return undo


RECURSION_HEADROOM = Held(_raise_recursion_limit)   # held by every monitor session
