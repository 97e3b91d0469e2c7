"""Where a run stops being a record: the dynamic operations the RefGraph rules detect, each
reported at the user's line that did it, as an eager step (magpy.records.segments) or as the
run's one break.  Kept apart from the rules because every part of them, and the recording
machinery around them, reports here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sysconfig
import types
from collections.abc import Iterator

from magpy.capture.callees import builtin_standins
from magpy.capture.refgraph.graph import CONST, Kind, RefGraph, same_state, state_of
from magpy.errors import GraphBreak


class Breaker:
    """The dynamic operations of a run, where the user's code did them.

    A dynamic operation that can be an eager step (``step=True``: a native call, a read of
    tensor data) goes to the segmenter, if any (``magpy.records.segments``); any other, or one the
    segmenter refuses, stops recording: ``brk`` is then the first such break.
    """

    def __init__(self, graph: RefGraph | None = None):
        self.brk: GraphBreak | None = None
        self.internal: BaseException | None = None   # magpy's own failure, if any
        self.monitor = None
        self.segmenter = None
        self.graph = graph
        self.sandbox = None   # magpy.graphs.controlflow.sandbox.Sandbox of a fork under way: a break stops it
        self._refused: list[str] | None = None

    def fail(self, exc: BaseException) -> None:
        """magpy's machinery failed: stop recording; the program itself runs on unharmed."""
        if self.internal is None:
            self.internal = exc
            self("internal error in magpy's capture")

    def __call__(self, reason: str, step: bool = False, changes: bool = False) -> None:
        if self._refused is not None and self.internal is None:
            self._refused.append(reason)
            return
        if self.sandbox is not None:
            self.sandbox.stop(reason)
        if self.brk is not None:
            return
        brk = self.where(reason)
        if changes:
            brk = dataclasses.replace(brk, changes=True)
        if step and self.segmenter is not None and self.segmenter.begin(brk):
            return
        self.brk = brk

    @contextlib.contextmanager
    def refusing(self) -> Iterator[list[str]]:
        """Dynamic operations in the block are magpy's own trial, not the program's (torch's
        numpy equivalent of what numpy computed): their reasons are collected in the list the
        block gets, and nothing is recorded for them."""
        saved, self._refused = self._refused, []
        try:
            yield self._refused
        finally:
            self._refused = saved

    def stop(self, reason: str | GraphBreak) -> None:
        """Give up segments: the run ends as one that met ``reason`` (it runs eagerly)."""
        if self.sandbox is not None:
            self.sandbox.stop(str(reason))
        if self.brk is None:
            self.brk = reason if isinstance(reason, GraphBreak) else self.where(reason)

    def where(self, reason: str) -> GraphBreak:
        innermost = f = self.monitor.current if self.monitor is not None else None
        # Report the innermost frame that is the user's (not torch's own Python code).
        while f is not None and hasattr(f, "info") and is_library_file(f.code.co_filename):
            f = f.back
        if f is None or not hasattr(f, "info"):
            f = innermost
        return GraphBreak(reason, f.code.co_filename, f.line) if f is not None else GraphBreak(reason)

    def pending_module_writes(self) -> bool:
        """Has the run so far changed a Python module's attributes or a globals dict (state an
        eager step may read, ``print`` reading ``sys.stdout``, which the mock only writes back
        at its end)?  A class's attributes are left out: natives read modules' state, and
        DistributedDataParallel's forward sets and resets ``_active_ddp_module`` on its class
        around every call, before its reducer's steps."""
        for node in self.graph.nodes[1:]:
            if isinstance(node.value, types.ModuleType) and len(node.versions) > 1:
                return True
            if node.kind is Kind.DICT and node.rel == CONST and not same_state(
                    state_of(node.value, node.kind), node.snapshot):
                return True
        return False


def is_library_file(filename: str) -> bool:
    """Is ``filename`` torch's own Python code, the standard library (logging, contextlib ...)
    or magpy's stand-ins of builtins?  A break there is reported at the user's line that called
    into it."""
    return "/torch/" in filename or filename.startswith(_STDLIB) or filename == builtin_standins.FILE


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
