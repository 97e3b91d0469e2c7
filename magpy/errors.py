"""The errors magpy raises, and the record of why a call could not become one graph."""
from __future__ import annotations

import dataclasses
import linecache


class MagpyError(Exception):
    """Base class of magpy's own errors."""


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


class GraphBreakWarning(UserWarning):
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
