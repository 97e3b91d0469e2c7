"""The warnings and logging machinery in a recording run: effects of the record, made again
by every replay.

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

A ``logging.Logger`` call (``debug`` ... ``critical``, ``log``) is such an effect too: the
recording run works out the site ``findCaller`` would find (the program's frame, file, line
and function) and the mock hands the logger a record made there (:func:`log_at`), if the
logger is enabled for the level then, as ``Logger._log`` does.  A message that is not a
string, arguments holding tensors (formatting reads their data), ``exc_info``/``stack_info``
or a ``stacklevel`` past the compiled call leave the call to the monitor, as before.  A
library's log-once method (transformers' ``logger.warning_once``) is called again by the
mock: its cache makes it log the first time only, as in eager.
"""
from __future__ import annotations

import logging
import warnings

import torch
from torch.utils import _pytree as pytree

from magpy.capture import annotations as ann
from magpy.capture.monitor import intrinsics

# The machinery's state changes, replayed as they are (warnings.warn has its own handler).
_FILTERS = tuple(fn for fn in ann.WARNINGS_EFFECTS if fn is not warnings.warn)


def intrinsics_for(capture) -> list:
    """``(callee, handler)`` for the recording run's call policy (``add_intrinsic``): every
    call in :data:`magpy.capture.annotations.WARNINGS_EFFECTS`."""
    return [(warnings.warn, _warn(capture)), *((fn, _effect(capture, fn)) for fn in _FILTERS),
            *((fn, _log(capture, fn, level)) for fn, level in ann.LOGGING_EFFECTS.items()),
            *((fn, _log_once(capture, fn)) for fn in ann.once_logging_methods())]


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


def _log(capture, method, level):
    def handler(mon, args, kwargs):
        kwargs = kwargs or {}
        logger, *rest = args
        if level is None:   # Logger.log(level, msg, *args)
            rest = rest or [None]
            at, rest = rest[0], rest[1:]
        else:
            at = level
        site = intrinsics.log_site(mon, kwargs.get("stacklevel", 1)) if type(at) is int else None
        if site is None or not rest or _unloggable(rest[0], rest[1:], kwargs):
            return mon.enter(method, args, kwargs)
        made = (logger, at, site, rest[0], tuple(rest[1:]), kwargs.get("extra"))
        return _record(capture, mon, log_at, made, None, lambda: log_at(*made), lambda: None,
                       f"logging.Logger.{method.__name__}")
    return handler


def _log_once(capture, method):
    def handler(mon, args, kwargs):
        return _record(capture, mon, method, args, kwargs, lambda: method(*args, **(kwargs or {})),
                       lambda: _holds_tensors((args, kwargs)), f"logging.Logger.{method.__name__}")
    return handler


_LOG_KEYWORDS = frozenset({"extra", "stacklevel"})


def _unloggable(msg, args, kwargs) -> bool:
    """Must the monitor run this call as it is (what the mock would log could differ)?"""
    return (type(msg) is not str or not _LOG_KEYWORDS.issuperset(kwargs)
            or _holds_tensors((args, kwargs)) is not None)


def _holds_tensors(values) -> str | None:
    if any(isinstance(v, torch.Tensor) for v in pytree.tree_leaves(values)):
        return "with tensor arguments (formatting reads their data)"
    return None


def log_at(logger: logging.Logger, level: int, site: tuple, msg: str, args: tuple, extra) -> None:
    """``logger.log(level, msg, *args, extra=extra)`` made at ``site`` (file, line, function):
    the record ``Logger._log`` makes where ``findCaller`` finds that site."""
    if not logger.isEnabledFor(level):
        return
    filename, lineno, func = site if logging._srcfile else ("(unknown file)", 0, "(unknown function)")
    logger.handle(logger.makeRecord(logger.name, level, filename, lineno, msg, args, None, func, extra, None))


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
