"""The garbage collector while magpy records or compiles: the older heap is not walked again.

Recording a call and compiling its graphs allocate many small objects (frames of the monitor,
nodes, Inductor's IR), enough to trigger full (generation 2) collections, and a full collection
walks every object of the process: with torch and transformers imported, 0.4-0.7 million of
them, about 0.2 s here each.  That was 40% of a fresh process's first call of BERT (0.47 s,
0.27 s without it) and 0.8 s of its cold compile, spent scanning objects that existed before
magpy started and that magpy does not touch.

While magpy records or compiles (:func:`full_collections_deferred`, from the first to the
last of those running in any thread), full collections do not walk the older objects: magpy
moves them to the collector's permanent generation (``gc.freeze()``) and back at the end
(``gc.unfreeze()``), so the objects made meanwhile are collected as usual, in every
generation, and what becomes garbage among the older ones waits for the first full
collection after the window (nothing is lost).  Where objects are frozen already (a program
that froze its heap itself, which unfreezing would undo; CPython 3.12 also keeps its immortal
objects there), magpy instead puts generation 2's threshold out of reach for the window:
only young collections run, and the full collection that was due comes after it.  A process
that disabled the collector is left alone.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from magpy.capture.process_state import Held

OUT_OF_REACH = 1 << 30   # generation 2's threshold where the heap cannot be frozen


def _open_window() -> Callable[[], None] | None:
    """Open the window (the first recording or compile, in any thread); what closes it."""
    if not gc.isenabled():
        return None
    return _freeze() if gc.get_freeze_count() == 0 else _raise_threshold()


# Held from the first to the last recording or compile running, in any thread (magpy.capture.process_state).
_WINDOW = Held(_open_window)


@contextlib.contextmanager
def full_collections_deferred() -> Iterator[None]:
    """Within: full collections do not walk the objects made before (module docstring)."""
    with _WINDOW:
        yield


def is_open() -> bool:
    """Is a recording or compile under way in some thread (the window open)?"""
    return _WINDOW.held()


def _freeze() -> Callable[[], None]:
    gc.freeze()
    return gc.unfreeze


def _raise_threshold() -> Callable[[], None]:
    saved = gc.get_threshold()
    gc.set_threshold(*saved[:2], OUT_OF_REACH)
    return lambda: gc.set_threshold(*saved)
