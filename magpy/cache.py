"""Records per compiled callable (paper §6.1): most recently matched first, a monitor run on
a miss, and a limit after which the callable runs eagerly.

A record's guard or mock failing at call time is magpy's failure, not the program's.  What
may fail where, and what the call then does:

- the guard (and the fast guard) only load and compare values, running no program code:
  nothing has changed, so the call runs eagerly;
- the mock first runs the compiled graph and builds the new objects, then updates the
  pre-existing objects in place (plain stores, see ``codegen``).  A failure before the
  updates has left the program's Python state as it was; the graph may only have updated
  its tensor inputs in place, which their version counters tell, and only for the inputs the
  recording run updated (``Record.mutated``).  So if those counters did not move the call
  runs eagerly, exactly once.  If they moved, or the in-place updates themselves failed,
  the state is half-updated and running the program again would apply its effects twice:
  then, and only then, the call raises :class:`CaptureError` whatever
  ``config.on_capture_error`` says (restoring the tensors would need a copy on every call).

Either way the record is dropped and the callable runs eagerly from then on, with one
warning (or raises :class:`CaptureError` with ``on_capture_error="raise"``).
"""
from __future__ import annotations

import dataclasses
import time
import types
import warnings
import weakref

import torch

from magpy import continuations, logs, rng
from magpy.backends import SYMBOLIC
from magpy.codegen import MISS, MockCommitError, StepRaised
from magpy.config import config
from magpy.continuations import Resume
from magpy.dynamic import Lifting
from magpy.errors import BackendError, CaptureError, GraphBreakError, GraphBreakWarning, MagpyError
from magpy.monitor import Monitor
from magpy.monitor.tracebacks import frame_object, program_entries, user_stacklevel
from magpy.opgraph import failed_assertion, failed_own_check, set_thread_modes
from magpy.record import FastGuardMismatch, Record, capture, capture_continuation, machinery_failed
from magpy.refgraph.graph import tensor_version

_ALL_CACHES: weakref.WeakSet = weakref.WeakSet()


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
    breaks: dict = dataclasses.field(default_factory=dict)   # reason -> dynamic operations run as eager steps
    kept: dict = dataclasses.field(default_factory=dict)     # version ("eager", a backend) -> graphs that
    #                                                          kept it after their trial (magpy.autopilot)
    compiled_in_background: int = 0   # graphs whose background compile is in place (magpy.background)


class RecordCache:
    """The records of one compiled callable, and the call path that uses them."""

    def __init__(self, fn, backend, fullgraph: bool, roots=()):
        self.fn = fn
        self.backend = backend
        self.fullgraph = fullgraph
        self.roots = roots
        self.records: list[Record] = []
        self.stats = Stats()
        self.eager_reason: str | None = None   # set once the callable gave up compiling
        self.warned: set[str] = set()          # break reasons already warned about
        # The sizes recordings met, to lift those that change (backends that compile symbolic sizes).
        self.lifting = Lifting() if backend[0] in SYMBOLIC else None
        _ALL_CACHES.add(self)

    def __call__(self, args: tuple, kwargs: dict):
        try:
            return self.call(args, kwargs)
        except MagpyError:
            raise
        except BaseException as e:
            # The program's exception: its traceback shows the program's frames, under only
            # the compiled callable's and this frame (magpy's own entries are dropped).
            raise e.with_traceback(program_entries(e.__traceback__))

    def call(self, args: tuple, kwargs: dict):
        """The call: the first record whose guard passes runs its mock, else a miss."""
        self.stats.graphs_per_call = 0
        records = self.records
        for i, rec in enumerate(records):
            try:
                env = rec.match(args, kwargs)
            except (FastGuardMismatch, BackendError):
                # a magpy bug to see (config.verify_fast_guard), or a background compile's
                # failure with config.on_backend_error = "raise"
                raise
            except Exception as e:  # noqa: BLE001 - magpy's failure: nothing ran yet
                return self.failed(rec, "checking a record's guard", e, args, kwargs)
            if env is not None:
                if rec.mock is None:
                    self.promote(i)
                    self.stats.eager_runs += 1
                    return self.fn(*args, **kwargs)
                result = self.run_mock(rec, env, args, kwargs)
                if result is not MISS:
                    if i < len(records) and records[i] is rec:   # (not dropped by a failure)
                        self.promote(i)
                    return result
        return self.miss(args, kwargs)

    def promote(self, i: int) -> None:
        """Most recently matched first."""
        if i:
            self.records.insert(0, self.records.pop(i))

    def run_mock(self, rec: Record, env: tuple, args: tuple, kwargs: dict):
        """The mock's result; if it fails, the eager result when the program's state is as
        it was (module docstring)."""
        versions = [tensor_version(env[i]) for i in rec.mutated]   # usually none
        drawn = rng.state() if rec.draws else None   # put back where the call runs again (magpy.rng)
        try:
            result = rec.mock(env)
        except StepRaised as e:
            set_thread_modes(e.modes)
            self.stats.mock_runs += 1
            cause = e.__cause__
            at = rec.steps[e.step].at
            tb = cause.__traceback__
            if at:   # the program's line that ran the step, as eager's traceback shows it
                tb = types.TracebackType(tb, frame_object(*at), -1, at[2])
            raise cause.with_traceback(tb) from None
        except MockCommitError as e:
            set_thread_modes(rec.entry_modes)
            cause = e.__cause__
            raise self.half_done(rec, "the mock failed while updating objects in place", cause) from cause
        except Exception as e:  # noqa: BLE001 - the mock is magpy's code
            # (a graph may have switched grad mode or autocast before it failed)
            set_thread_modes(rec.entry_modes)
            unchanged = versions == [tensor_version(env[i]) for i in rec.mutated]
            if unchanged and any(failed_own_check(gm, e) for gm in rec.graphs):
                _rewind(drawn)
                return MISS   # the record's own check (made where nothing observable happened before it)
            if unchanged and any(failed_assertion(gm, e) for gm in rec.graphs):
                # The program's assertion failed (recorded only where nothing observable
                # happened before it, whatever the mock does after): the program runs eagerly
                # and raises its own exception; the record stays valid.
                _rewind(drawn)
                self.stats.eager_runs += 1
                return self.fn(*args, **kwargs)
            if rec.effects:
                raise self.half_done(rec, "the mock failed after effects it cannot take back", e) from e
            if not unchanged:
                what = "the compiled graph failed after updating tensors in place"
                raise self.half_done(rec, what, e) from e
            _rewind(drawn)
            return self.failed(rec, "running a record's mock", e, args, kwargs)
        if type(result) is Resume:
            self.stats.graphs_per_call += result.graphs
            return self.resume(rec, result)
        if result is MISS:   # the call runs again: under the modes it came with
            _rewind(drawn)
            set_thread_modes(rec.entry_modes)
        else:
            self.stats.mock_runs += 1
            self.stats.graphs_per_call += len(rec.graphs)
        return result

    def resume(self, rec: Record, point: Resume):
        """A check of ``rec`` failed after effects: the continuation recorded from there whose
        guard passes on the frames' values, else a monitor run from there that records one."""
        if point.throw is not None:
            # A step raised where the program may handle it: the rest runs monitored, unrecorded
            # (a continuation's guard would not tell one exception from another).
            self.stats.eager_runs += 1
            return Monitor().resume(continuations.frames(point, None), point.throw)
        values = point.values()
        conts = rec.continuations.setdefault(point.index, [])
        for i, cont in enumerate(conts):
            try:
                env = cont.match(values, {})
            except Exception as e:  # noqa: BLE001 - magpy's failure, after the call's effects
                raise self.half_done(rec, "checking a continuation's guard failed", e) from e
            if env is not None:
                if i:
                    conts.insert(0, conts.pop(i))
                if cont.mock is None:   # the rest of the call met an operation that ends recording
                    self.stats.eager_runs += 1
                    return Monitor().resume(continuations.frames(point, None))
                return self.run_mock(cont, env, values, {})
        if len(conts) >= config.cache_size_limit:
            self.stats.eager_runs += 1   # too many ways on from here: finish it unrecorded
            return Monitor().resume(continuations.frames(point, None))
        self.stats.monitor_runs += 1
        errors = []
        result, cont = capture_continuation(point, self.backend, errors)
        if cont is not None:
            conts.insert(0, cont)
            self.count_record(cont)
        return result

    def failed(self, rec: Record, stage: str, err: Exception, args: tuple, kwargs: dict):
        """magpy's ``stage`` failed on this call before it changed anything: drop the record
        and run the call (and later ones) eagerly, with one warning, or raise."""
        self.drop(rec)
        error = CaptureError(f"magpy failed {stage}: {type(err).__name__}: {err}")
        error.__cause__ = err
        machinery_failed(error)
        self.eager_reason = str(error)
        self.stats.break_reasons.append(self.eager_reason)
        self.stats.eager_runs += 1
        return self.fn(*args, **kwargs)

    def half_done(self, rec: Record, what: str, err: Exception) -> CaptureError:
        """The error of a mock that failed half way: the call can neither finish nor run again."""
        self.drop(rec)
        self.eager_reason = f"{what} ({type(err).__name__}: {err})"
        self.stats.break_reasons.append(self.eager_reason)
        return CaptureError(f"magpy: {what} ({type(err).__name__}: {err}); the program's state is partly "
                            "updated and running the call again would apply those updates twice")

    def drop(self, rec: Record) -> None:
        self.records.remove(rec)
        self.stats.records = len(self.records)

    def miss(self, args, kwargs):
        if self.eager_reason is None and len(self.records) >= config.cache_size_limit:
            self.give_up(f"{len(self.records)} records (magpy.config.cache_size_limit) did not cover "
                         f"this call; running eagerly from now on. {self.why_missed(args, kwargs)}")
        if self.eager_reason is not None:
            self.stats.eager_runs += 1
            return self.fn(*args, **kwargs)
        self.stats.monitor_runs += 1
        if self.records and logs.on("recompiles"):
            self.log_recompile(args, kwargs)
        errors = []
        start = time.perf_counter()
        result, rec = capture(self.fn, args, kwargs, self.backend, self.roots, errors, self.lifting)
        self.log_recording(rec, time.perf_counter() - start)
        if rec is None:
            self.eager_reason = str(errors[0])
            self.stats.break_reasons.append(self.eager_reason)
            return result
        if self.fullgraph and (rec.breaks or rec.graph_break):
            raise GraphBreakError((rec.breaks or (rec.graph_break,))[0])   # the first break
        if rec.graph_break is not None and rec.graph_break.retry:
            logs.logger("breaks").info("%s: recording again next call: %s", self.name(), rec.graph_break)
            return result
        if rec.graph_break is not None:
            self.stats.break_reasons.append(str(rec.graph_break))
            self.warn_break(rec.graph_break, "runs eagerly")
        else:
            self.count_record(rec)
        self.records.insert(0, rec)
        self.stats.records = len(self.records)
        return result

    def why_missed(self, args, kwargs) -> str:
        """What the last record's guard found different, and what to do about it."""
        rec = self.records[0]
        try:
            why = rec.diagnose(args, kwargs) if rec.diagnose is not None else None
        except Exception:  # noqa: BLE001 - a diagnosis must never break the call
            why = None
        fix = ("If a tensor size keeps changing, leave magpy.config.dynamic at None (automatic) or set it "
               "to True" + ("" if self.lifting is not None else " with a backend that compiles symbolic "
                            f"sizes ({', '.join(sorted(SYMBOLIC))})")
               + "; if a Python value keeps changing, pass it as a tensor; or raise "
               "magpy.config.cache_size_limit.")
        return (f"The last record missed on: {why}. " if why else "") + fix

    def log_recompile(self, args, kwargs) -> None:
        """MAGPY_LOGS=recompiles: why each record did not cover this call."""
        out = logs.logger("recompiles")
        for i, rec in enumerate(self.records):
            try:
                why = rec.diagnose(args, kwargs) if rec.diagnose is not None else None
            except Exception as e:  # noqa: BLE001 - a diagnosis must never break the call
                why = f"(no diagnosis: {type(e).__name__}: {e})"
            why = why or "the guard passed, then a check after an eager step failed"
            out.info("%s: recording again; record %d of %d: %s", self.name(), i + 1, len(self.records), why)

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
        """A background compile's ``graphs`` are in place (magpy.background)."""
        self.stats.compiled_in_background += graphs

    def kept(self, trial) -> None:
        """A graph's trial (magpy.autopilot) is over: count and log the version it kept."""
        self.stats.kept[trial.winner] = self.stats.kept.get(trial.winner, 0) + 1
        logs.logger("perf").info("%s: graph of %s", self.name(), trial.describe())

    def warn_break(self, brk, what: str) -> None:
        """One warning per callable and reason, at the program's line that broke the graph."""
        if brk.reason in self.warned:
            return
        self.warned.add(brk.reason)
        warnings.warn_explicit(f"magpy: {self.name()} {what} when it meets {brk.reason} "
                               "(see magpy.stats(...).break_reasons; fullgraph=True raises instead)",
                               GraphBreakWarning, brk.filename, brk.lineno or 0)

    def name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__qualname__

    def give_up(self, reason: str) -> None:
        logs.logger("recompiles").info("%s: %s", self.name(), reason)
        self.eager_reason = reason
        self.stats.break_reasons.append(reason)
        # Named by its qualified name (a module's repr can be hundreds of lines), pointing at
        # the user's call.
        warnings.warn(f"magpy: {self.name()}: {reason}", UserWarning, stacklevel=user_stacklevel())

    def clear(self) -> None:
        self.records.clear()
        if self.lifting is not None:
            self.lifting = Lifting()
        self.stats.records = 0
        self.eager_reason = None


def _rewind(drawn) -> None:
    """The call runs again after a mock that may have drawn numbers: from the same state."""
    if drawn is not None:
        rng.restore(drawn)


def reset_all() -> None:
    for cache in list(_ALL_CACHES):
        cache.clear()
