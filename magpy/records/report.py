"""What a compiled callable tells of itself: ``magpy.stats``, its logs and its warnings.

The cache (``magpy.records.cache``) decides what a call does; this module says so.  Counts
go to :class:`Stats`, lines to the ``MAGPY_LOGS`` topics (``magpy.logs``), and a warning is
given once per callable and reason: a program that breaks its graph on every call warns
once, not on every call.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

from magpy import logs
from magpy.backends.registry import SYMBOLIC
from magpy.capture.monitor.tracebacks import user_stacklevel
from magpy.errors import CacheLimitWarning, GraphBreakWarning, UnstableRecordWarning
from magpy.records.record import Record


@dataclasses.dataclass
class Stats:
    """What a compiled callable has done so far (``magpy.stats(compiled)``)."""

    monitor_runs: int = 0     # recording runs (first call, guard misses)
    mock_runs: int = 0        # guard hits that ran the mock and the compiled graph
    eager_runs: int = 0       # calls run eagerly (graph breaks, failures, over the limit)
    graph_count: int = 0      # graphs compiled
    graphs_per_call: int = 0  # graphs the last call ran (0: it ran eagerly or monitored)
    records: int = 0          # records in the cache now
    break_reasons: list = dataclasses.field(default_factory=list)
    # Why each recording after the first was made: what the newest record's guard found
    # different then, in words (explain's recompile history), oldest first.
    recompiles: list = dataclasses.field(default_factory=list)
    breaks: dict = dataclasses.field(default_factory=dict)   # reason -> dynamic operations run as eager steps
    # version ("eager", a backend) -> graphs that kept it after their trial (magpy.backends.autopilot)
    kept: dict = dataclasses.field(default_factory=dict)
    # graphs whose background compile is in place (magpy.backends.background)
    compiled_in_background: int = 0


class CacheReport:
    """The stats, logs and warnings of one compiled callable (``name()``: its name now)."""

    def __init__(self, name: Callable[[], str], stats: Stats):
        self.name = name
        self.stats = stats
        self.warned: set[str] = set()   # reasons already warned about

    def count_record(self, rec: Record) -> None:
        """A record that runs in pieces (or continues one): its graphs and breaks."""
        self.stats.graph_count += len(rec.graphs)
        for trial in rec.trials:
            trial.report = self.kept
        if rec.deferred is not None:
            rec.deferred.report = self.kept
            rec.deferred.taken = self.taken
        for brk in rec.breaks:
            self.stats.breaks[brk.reason] = self.stats.breaks.get(brk.reason, 0) + 1
            self.warn_break(brk, "runs in pieces (graphs with eager steps between them)")

    def taken(self, graphs: int) -> None:
        """A background compile's ``graphs`` are in place (magpy.backends.background)."""
        self.stats.compiled_in_background += graphs

    def kept(self, trial) -> None:
        """A graph's trial (magpy.backends.autopilot) is over: count and log the version it kept."""
        self.stats.kept[trial.winner] = self.stats.kept.get(trial.winner, 0) + 1
        logs.logger("perf").info("%s: graph of %s", self.name(), trial.describe())

    def warn_break(self, brk, what: str) -> None:
        """One warning per callable and reason, at the program's line that broke the graph."""
        if brk.reason in self.warned:
            return
        self.warned.add(brk.reason)
        # (the warning's text ends with the page that explains it: MagpyWarning)
        warnings.warn_explicit(f"magpy: {self.name()} {what} when it meets {brk.reason}; "
                               "magpy.stats(...).break_reasons lists them, fullgraph=True raises instead",
                               GraphBreakWarning, brk.filename, brk.lineno or 0)

    def unstable(self, why: str, plan: str) -> None:
        """Warn once (per callable and reason) that a record fails its own checks."""
        logs.logger("recompiles").info("%s: a record %s; %s", self.name(), why, plan)
        if why in self.warned:
            return
        self.warned.add(why)
        warnings.warn(f"magpy: {self.name()}: a record {why}, so an identical call would record again; "
                      f"{plan}", UnstableRecordWarning, stacklevel=user_stacklevel())

    def gave_up(self, reason: str) -> None:
        """The callable runs eagerly from now on, for ``reason``: log it and warn."""
        logs.logger("recompiles").info("%s: %s", self.name(), reason)
        # Named by its qualified name (a module's repr can be hundreds of lines), pointing at
        # the user's call.
        warnings.warn(f"magpy: {self.name()}: {reason}", CacheLimitWarning, stacklevel=user_stacklevel())

    def log_recompile(self, records: tuple[Record, ...], args, kwargs) -> None:
        """MAGPY_LOGS=recompiles: why each of ``records`` did not cover this call."""
        out = logs.logger("recompiles")
        for i, rec in enumerate(records):
            why = diagnosis(rec, args, kwargs)
            out.info("%s: recording again; record %d of %d: %s", self.name(), i + 1, len(records), why)

    def log_recording(self, rec: Record | None, seconds: float) -> None:
        if rec is None:
            return
        what = f"{len(rec.graphs)} graph(s), {rec.op_count} operations, {len(rec.breaks)} eager step(s)"
        if seconds > logs.SLOW_RECORDING_S:
            logs.logger("progress").info("%s: recorded and compiled in %.1f s (%s)", self.name(), seconds,
                                         what)
        logs.logger("perf").info("%s: recording took %.3f s (%s)", self.name(), seconds, what)
        for brk in rec.breaks:
            logs.logger("breaks").info("%s: eager step: %s", self.name(), brk)
        if rec.graph_break is not None:
            logs.logger("breaks").info("%s: runs eagerly: %s", self.name(), rec.graph_break)
        logs.logger("guards").info("%s: new record's guard:\n%s", self.name(), rec.guard_source)

    def log_retry(self, rec: Record) -> None:
        """MAGPY_LOGS=breaks: ``rec``'s recording ended at a break that records again next call."""
        logs.logger("breaks").info("%s: recording again next call: %s", self.name(), rec.graph_break)


def why_missed(last: Record, args, kwargs, lifted: bool) -> str:
    """What the last record's guard found different, and what to do about it (``lifted``:
    the backend compiles symbolic sizes)."""
    why = diagnosis(last, args, kwargs)
    fix = ("If a tensor size keeps changing, leave magpy.config.dynamic at None (automatic) or set it "
           "to True" + ("" if lifted else " with a backend that compiles symbolic "
                        f"sizes ({', '.join(sorted(SYMBOLIC))})")
           + "; if a Python value keeps changing, pass it as a tensor; or raise "
           "magpy.config.cache_size_limit.")
    return (f"The last record missed on: {why}. " if why else "") + fix


def diagnosis(rec: Record, args: tuple, kwargs: dict) -> str:
    """Why ``rec`` does not cover the call, in words (its guard's diagnosis)."""
    try:
        why = rec.diagnose(args, kwargs) if rec.diagnose is not None else None
    except Exception as e:  # noqa: BLE001 - a diagnosis must never break the call
        return f"(no diagnosis: {type(e).__name__}: {e})"
    return why or "the guard passed, then a check after an eager step failed"
