"""The warnings machinery in a recording run: effects of the record, made again by every
replay.

A warning changes none of the program's objects: it goes to the warnings machinery (the
filters, the ``__warningregistry__`` in the globals of the warning's module, the
``showwarning`` hook), which decides on each call whether and how it is shown.  So for
``warnings.warn`` the recording run works out what it hands to ``warnings.warn_explicit``
(the message, the category, and the file, line, module and registry of the frame
``stacklevel`` names: a frame of the call, fixed by the record's code), and the mock hands
exactly that to ``warn_explicit`` on every replay.  ``catch_warnings()`` (made, entered,
left), ``simplefilter``, ``filterwarnings`` and ``resetwarnings`` change only the
machinery's state: each runs natively, and the mock calls it again with the same arguments
(a ``catch_warnings`` it made itself).  These are effect steps in program order among the
record's other steps (``print``, ...) that do not end the graph: they read no tensor.  The
filters, the "once"/"default"/"module" registries (whose version each filter change bumps)
and a ``catch_warnings(record=True)`` around the call see on every call what eager makes
them see.

A step runs before the operations of its graph, so a warning the filters turn into an
exception (``simplefilter("error")``) reaches the program with no later effect made: before
any effect the call runs again (and raises at the program's line); after one it propagates
from the mock.  What the mock could not make as eager does runs the call eagerly, warnings
and all, as before: a warning whose ``stacklevel`` reaches past the compiled call (its file
and line are the caller's, which differ from call to call) or whose message is not a string,
one of these calls that raises while recording, an exception leaving a ``catch_warnings``
block, any of them inside a native's callback; inside a tensor ``if``'s arm they make the
``if`` a break.
"""
from __future__ import annotations

import warnings

from magpy import annotations as ann
from magpy.monitor import intrinsics

# The machinery's state changes, replayed as they are (warnings.warn has its own handler).
_FILTERS = tuple(fn for fn in ann.WARNINGS_EFFECTS if fn is not warnings.warn)


def intrinsics_for(capture) -> list:
    """``(callee, handler)`` for the recording run's call policy (``add_intrinsic``): every
    call in :data:`magpy.annotations.WARNINGS_EFFECTS`."""
    return [(warnings.warn, _warn(capture)), *((fn, _effect(capture, fn)) for fn in _FILTERS)]


def _warn(capture):
    def warn(mon, args, kwargs):
        *site, module_globals, source, frame = intrinsics.warning_site(mon, args, kwargs)
        emit = emitter(module_globals)
        _record(capture, mon, emit, (*site, source), None, lambda: emit(*site, source),
                lambda: _unreplayable(site[0], frame), "warnings.warn")
    return warn


def _effect(capture, fn):
    def handler(mon, args, kwargs):
        return _record(capture, mon, fn, args, kwargs, lambda: fn(*args, **(kwargs or {})),
                       lambda: _exception_leaves(fn, args), f"warnings.{fn.__qualname__}")
    return handler


def _record(capture, mon, fn, args, kwargs, run, unreplayable, what: str):
    """Run the call for real (``run()``); while the run records, make it an effect step
    ``fn(*args, **kwargs)``, or end recording (the call runs eagerly) where it cannot be."""
    recording = bool(mon.observers) and capture.breaker.brk is None
    try:
        result = run()
    except BaseException:
        if recording:   # the program handles it or not: the call runs eagerly
            capture.breaker.stop(f"{what} raises (a filter turned a warning into an error)")
        raise
    if recording:
        try:
            why = unreplayable()
            if why is not None or not capture.segmenter.effect(fn, args, kwargs, result, what):
                capture.breaker.stop(f"{what} {why or 'inside a callback of a native function'}")
        except Exception as e:  # noqa: BLE001 - magpy's own failure: the call runs eagerly
            capture.breaker.fail(e)
    return result


def emitter(module_globals: dict):
    """``warnings.warn_explicit`` of a warning whose module has ``module_globals`` (the mock
    calls it with the rest of what the recording run found)."""
    def warn(message, category, filename, lineno, module, source):
        intrinsics.emit_warning(message, category, filename, lineno, module, module_globals, source)
    warn.__qualname__ = warn.__name__ = "warnings.warn"
    return warn


def _unreplayable(message, frame) -> str | None:
    """Why the mock could not make this warning again as eager would, or None."""
    if type(message) is not str:
        return f"with a {type(message).__name__} message (not a string)"
    if not hasattr(frame, "info"):
        return "with a stacklevel reaching past the compiled call"
    return None


def _exception_leaves(fn, args) -> str | None:
    if fn is warnings.catch_warnings.__exit__ and len(args) > 1 and args[1] is not None:
        return "with an exception leaving the block"
    return None
