"""The errors magpy raises, and the record of why a call could not become one graph."""
from __future__ import annotations

import dataclasses
import linecache

# The troubleshooting entry that explains each of magpy's errors and warnings (by class; the
# most specific class listed wins).  Errors carry it as a note (shown under the message in a
# traceback, leaving ``str(error)``, which magpy and programs reuse, as it is); warnings
# append it to their text.  tests/api/test_docs.py checks that every anchor exists on the page.
DOCS_PAGE = "docs/troubleshooting.md"
HELP = {
    "MagpyError": "magpy-errors",
    "GraphBreakError": "graph-break-error",
    "CaptureError": "capture-failed",
    "BackendError": "backend-error",
    "MagpyWarning": "magpy-warnings",
    "GraphBreakWarning": "graph-break-warning",
    "CaptureFailedWarning": "capture-failed",
    "BackendFailedWarning": "backend-failed",
    "CacheLimitWarning": "cache-size-limit",
    "UnstableRecordWarning": "unstable-record",
    "SaveError": "save-error",
    "LoadError": "load-error",
    "NotSavedWarning": "not-saved",
}


def help_link(cls: type) -> str:
    """``see docs/troubleshooting.md#anchor`` for a magpy error or warning class."""
    anchor = next(HELP[k.__name__] for k in cls.__mro__ if k.__name__ in HELP)
    return f"see {DOCS_PAGE}#{anchor}"


class MagpyError(Exception):
    """Base class of magpy's own errors."""

    def __init__(self, *args):
        super().__init__(*args)
        self.add_note(help_link(type(self)))


class MagpyWarning(UserWarning):
    """Base class of the warnings magpy issues itself; the text names the page that explains it."""

    def __str__(self) -> str:
        return f"{super().__str__()} ({help_link(type(self))})"


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """A dynamic operation met during a monitor run, and where the user's code did it."""

    reason: str
    filename: str = "<unknown>"
    lineno: int | None = 0   # None: the instruction has no line (CPython's f_lineno may be None)
    retry: bool = False   # the next call records again (this run learnt how to do better)
    changes: bool = False   # it changes state from outside the call: its eager step is an effect

    @property
    def source(self) -> str:
        """The user's source line, stripped (empty when the file is not readable)."""
        return linecache.getline(self.filename, self.lineno).strip() if self.lineno is not None else ""

    def __str__(self) -> str:
        where = self.filename if self.lineno is None else f"{self.filename}:{self.lineno}"
        src = self.source
        return f"{self.reason} at {where}" + (f"\n    {src}" if src else "")


class GraphBreakWarning(MagpyWarning):
    """A compiled callable runs a call eagerly because of a dynamic operation (once per
    callable and reason, located at the program's line that did it)."""


class GraphBreakError(MagpyError):
    """``fullgraph=True`` and the program did something that cannot be in one graph."""

    def __init__(self, brk: GraphBreak):
        super().__init__(f"cannot capture one graph: {brk}")
        self.graph_break = brk
        self.reason, self.filename, self.lineno = brk.reason, brk.filename, brk.lineno


class CaptureError(MagpyError):
    """magpy's capture machinery failed on this program (it then runs eagerly by default)."""


class BackendError(MagpyError, ValueError):
    """A backend is unknown, missing an optional dependency, or failed to compile a graph."""


class CaptureFailedWarning(MagpyWarning, RuntimeWarning):
    """magpy's own machinery failed on a call (``config.on_capture_error = "fallback"``): the
    callable runs eagerly from then on."""


class BackendFailedWarning(MagpyWarning, RuntimeWarning):
    """A backend failed to compile a graph (``config.on_backend_error = "fallback"``): that
    graph runs eagerly."""


class CacheLimitWarning(MagpyWarning):
    """``config.cache_size_limit`` records did not cover a call: the callable runs eagerly
    from then on."""


class UnstableRecordWarning(MagpyWarning):
    """A record fails its own checks on a call like the one it was recorded from: an identical
    call would record again.  magpy runs such calls eagerly instead (once per callable and
    reason)."""


class SaveError(MagpyError):
    """``magpy.save`` cannot save the compiled callable (nothing recorded yet, a backend
    given as a function, no record that can travel)."""


class LoadError(MagpyError):
    """``magpy.load`` refuses a file: not one magpy wrote, damaged or changed on disk, made
    with another torch, Python, magpy or machine, or from another program than the one given."""


class NotSavedWarning(MagpyWarning):
    """``magpy.save`` left records out (each named with why): the calls they covered record
    again in the loading process."""
