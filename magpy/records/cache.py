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

Many threads call one callable (``magpy.capture.process_state`` has the whole model): its records are a
tuple read without a lock and replaced under ``_lock``; one recording (or continuation
recording) runs at a time, under ``_recording``, and a call that misses meanwhile runs
eagerly rather than wait or record the same miss again.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
import types
import weakref
from collections.abc import Iterator

from torch._C._dynamo.guards import GlobalStateGuard

from magpy import logs
from magpy.backends.registry import SYMBOLIC
from magpy.capture.monitor.tracebacks import frame_object, program_entries
from magpy.capture.refgraph.graph import tensor_version
from magpy.config import config
from magpy.errors import BackendError, CaptureError, GraphBreakError, MagpyError
from magpy.graphs import rng
from magpy.graphs.assertions import failed_assertion, failed_own_check
from magpy.graphs.dynamic import Lifting
from magpy.graphs.opgraph import set_thread_modes
from magpy.records.codegen import MISS, MockCommitError, StepRaised
from magpy.records.continuations import Resume
from magpy.records.record import (
    FastGuardMismatch,
    Record,
    capture,
    capture_continuation,
    machinery_failed,
    resume_unrecorded,
)
from magpy.records.report import CacheReport, Stats, diagnosis, why_missed

_ALL_CACHES: weakref.WeakSet = weakref.WeakSet()


class RecordCache:
    """The records of one compiled callable, and the call path that uses them."""

    def __init__(self, fn, backend, fullgraph: bool, roots=()):
        self.fn = fn
        self.backend = backend
        self.fullgraph = fullgraph
        self.roots = roots
        # Read without a lock (a tuple, replaced whole), changed under ``_lock``; one recording
        # at a time, under ``_recording`` (magpy.capture.process_state).
        self.records: tuple[Record, ...] = ()
        self._lock = threading.Lock()
        self._recording = threading.Lock()
        self._recorder: int | None = None      # the thread that holds ``_recording``
        self._added = 0                        # records added so far (a miss tries those it missed)
        self.stats = Stats()
        self.report = CacheReport(self.name, self.stats)
        self.eager_reason: str | None = None   # set once the callable gave up compiling
        # The sizes recordings met, to lift those that change (backends that compile symbolic sizes).
        self.lifting = Lifting() if backend[0] in SYMBOLIC else None
        _ALL_CACHES.add(self)

    def __call__(self, args: tuple, kwargs: dict):
        try:
            return self.call(args, kwargs)
        except MagpyError:
            raise
        except BaseException as e:
            # The program's exception (raised by its code or an operation it called): magpy's
            # own stages turn their failures into MagpyErrors (magpy.records.record's stages, the
            # monitor's observers through Monitor.on_fault, the guard, the mock and the
            # bookkeeping here).  Its traceback shows the program's frames, under only the
            # compiled callable's and this frame (magpy's own entries are dropped).
            raise e.with_traceback(program_entries(e.__traceback__))

    def call(self, args: tuple, kwargs: dict):
        """The call: the first record whose guard passes runs its mock, else a miss."""
        self.stats.graphs_per_call = 0
        added = self._added
        result = self.try_records(self.records, args, kwargs)
        if result is MISS or type(result) is MockMisses:
            return self.missed(args, kwargs, added, result)
        return result

    def try_records(self, records: tuple, args: tuple, kwargs: dict):
        """The result of the first of ``records`` that covers the call, else MISS, or the
        :class:`MockMisses` where records' guards passed and their mocks missed it."""
        missed = MISS
        for rec in records:
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
                    self.promote(rec)
                    self.stats.eager_runs += 1
                    return self.fn(*args, **kwargs)
                result = self.run_mock(rec, env, args, kwargs)
                if result is not MISS:
                    self.promote(rec)
                    return result
                missed = MockMisses((*(() if missed is MISS else missed), rec))
        return missed

    def eager(self, args: tuple, kwargs: dict):
        self.stats.eager_runs += 1
        return self.fn(*args, **kwargs)

    def promote(self, rec: Record) -> None:
        """Most recently matched first."""
        records = self.records
        if records and records[0] is rec:
            return
        with self._lock:
            rest = _without(self.records, rec)
            if len(rest) < len(self.records):   # (not dropped by another thread meanwhile)
                self.records = (rec, *rest)

    def run_mock(self, rec: Record, env: tuple, args: tuple, kwargs: dict):
        """The mock's result; if it fails, the eager result when the program's state is as
        it was (module docstring)."""
        versions = [tensor_version(env[i]) for i in rec.mutated]   # usually none
        drawn = rng.state() if rec.draws else None   # put back where the call runs again (magpy.graphs.rng)
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
            return resume_unrecorded(point, point.throw)
        values = point.values()
        conts = rec.continuations.get(point.index, ())
        for cont in conts:
            try:
                env = cont.match(values, {})
            except Exception as e:  # noqa: BLE001 - magpy's failure, after the call's effects
                raise self.half_done(rec, "checking a continuation's guard failed", e) from e
            if env is not None:
                self.promote_continuation(rec, point.index, cont)
                if cont.mock is None:   # the rest of the call met an operation that ends recording
                    return self.finish_unrecorded(point)
                return self.run_mock(cont, env, values, {})
        if len(conts) >= config.cache_size_limit:
            return self.finish_unrecorded(point)   # too many ways on from here
        with self.sole_recording() as sole:
            if not sole:   # another thread records this callable now
                return self.finish_unrecorded(point)
            self.stats.monitor_runs += 1
            lifting = None
            if self.lifting is not None:
                lifting = rec.lifting_at.setdefault(point.index, Lifting())
            result, cont = capture_continuation(point, self.backend, [], lifting)
            if cont is not None:
                with self._lock:
                    rec.continuations[point.index] = (cont, *rec.continuations.get(point.index, ()))
                self.report.count_record(cont)
            return result

    @contextlib.contextmanager
    def sole_recording(self) -> Iterator[bool]:
        """Is the calling thread's the callable's only recording now?  If so, no other starts
        until the block ends."""
        if not self._recording.acquire(blocking=False):
            yield False
            return
        self._recorder = threading.get_ident()
        try:
            yield True
        finally:
            self._recorder = None
            self._recording.release()

    def finish_unrecorded(self, point: Resume):
        """The rest of a call from a failed check, run by the monitor without recording."""
        self.stats.eager_runs += 1
        return resume_unrecorded(point)

    def promote_continuation(self, rec: Record, index: int, cont: Record) -> None:
        """Most recently matched first, among the continuations from one resume point."""
        conts = rec.continuations[index]
        if conts[0] is not cont:
            with self._lock:
                rest = _without(rec.continuations[index], cont)
                rec.continuations[index] = (cont, *rest)

    def failed(self, rec: Record, stage: str, err: Exception, args: tuple, kwargs: dict):
        """magpy's ``stage`` failed on this call before it changed anything: drop the record
        and run the call (and later ones) eagerly, with one warning, or raise."""
        self.drop(rec)
        error = CaptureError(f"magpy failed {stage}: {type(err).__name__}: {err}")
        error.__cause__ = err
        machinery_failed(error, self.fullgraph)
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
        with self._lock:
            self.records = _without(self.records, rec)
            self.stats.records = len(self.records)

    def add(self, rec: Record) -> None:
        with self._lock:
            self.records = (rec, *self.records)
            self.stats.records = len(self.records)
            self._added += 1

    def adopt(self, records: list[Record]) -> None:
        """Take records made in another process (magpy.load), most recently used first."""
        for rec in reversed(records):
            if rec.graph_break is None:
                self.report.count_record(rec)
            self.add(rec)

    def missed(self, args, kwargs, added: int, misses=MISS):
        """No record covered the call (the records added before ``added`` were tried, those
        of ``misses`` passed their guards): record it, unless another thread records now (then
        it runs eagerly meanwhile) or an unstable record missed it (settle)."""
        if self.eager_reason is None and not _unstable(misses):
            with self.sole_recording() as sole:
                if sole:
                    # A record another thread added since this call tried them may cover it.
                    result = self.try_records(self.records, args, kwargs) if self._added != added else MISS
                    if result is MISS or (type(result) is MockMisses and not _unstable(result)):
                        return self.miss(args, kwargs, _both(misses, result))
                    if type(result) is not MockMisses:
                        return result
        return self.eager(args, kwargs)

    def miss(self, args, kwargs, misses=MISS):
        """A monitor run of the call that records it (under ``_recording``; ``misses``: the
        records whose guards passed and mocks missed it)."""
        if self.eager_reason is None and len(self.records) >= config.cache_size_limit:
            why = why_missed(self.records[0], args, kwargs, self.lifting is not None)
            self.give_up(f"{len(self.records)} records (magpy.config.cache_size_limit) did not cover "
                         f"this call; running eagerly from now on. {why}")
        if self.eager_reason is not None:
            self.stats.eager_runs += 1
            return self.fn(*args, **kwargs)
        self.stats.monitor_runs += 1
        if self.records:
            self.stats.recompiles.append(diagnosis(self.records[0], args, kwargs))
            if logs.on("recompiles"):
                self.report.log_recompile(self.records, args, kwargs)
        errors = []
        start = time.perf_counter()
        entry_state = GlobalStateGuard()   # (grad mode, autocast ...: the call may change them)
        result, rec = capture(self.fn, args, kwargs, self.backend, self.roots, errors, self.lifting,
                              self.fullgraph)
        if rec is None:
            self.eager_reason = str(errors[0])
            self.stats.break_reasons.append(self.eager_reason)
            return result
        try:
            self.report.log_recording(rec, time.perf_counter() - start)
            if self.settle(rec, args, kwargs, () if misses is MISS else misses, entry_state.check()):
                return result
            return self.keep(rec, result)
        except (MagpyError, Warning):
            raise   # (GraphBreakError with fullgraph=True; a warning the program made an error)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping, after the program ran
            error = CaptureError(f"magpy failed keeping a record: {type(e).__name__}: {e}")
            error.__cause__ = e
            self.eager_reason = str(error)
            machinery_failed(error, self.fullgraph)
            return result

    def settle(self, rec: Record, args: tuple, kwargs: dict, misses: tuple, same_state: bool) -> bool:
        """Does ``rec``, just recorded from this call, show that an identical call would record
        again?  Then settle on a plan that holds, warn once and drop ``rec`` (True):

        - it repeats a record whose guard passed and whose mock missed this call (same guard,
          mock, graphs and constants): a check of that record's mock fails on calls like the
          one it was made from.  From now on a call that record and the others miss runs
          eagerly (it is "unstable");
        - its own guard fails on this very call, which changed nothing the guard reads (no
          object it reached from outside, nor torch's global state: ``same_state``): every such
          call would record again.  The callable records no more; its records still serve.
        """
        twin = next((r for r in misses if rec.repeats(r)), None)
        if twin is not None:
            twin.unstable = ("the guard passed, then a check of the mock failed on a call like the one "
                             "it was recorded from")
            self.report.unstable(twin.unstable, "calls it misses run eagerly")
            self.stats.break_reasons.append(f"a record: {twin.unstable}; calls it misses run eagerly")
            return True
        if rec.changed or not same_state or rec.guard(args, kwargs) is not None:
            return False
        reason = f"its guard fails on the call it was recorded from: {diagnosis(rec, args, kwargs)}"
        self.report.unstable(reason, "running eagerly from now on where no record covers a call")
        self.eager_reason = f"a record {reason}"
        self.stats.break_reasons.append(self.eager_reason)
        return True

    def keep(self, rec: Record, result):
        """Add the record of a recording run, whose result was ``result``."""
        if self.fullgraph and (rec.breaks or rec.graph_break):
            raise GraphBreakError((rec.breaks or (rec.graph_break,))[0])   # the first break
        if rec.graph_break is not None and rec.graph_break.retry:
            self.report.log_retry(rec)
            return result
        if rec.graph_break is not None:
            self.stats.break_reasons.append(str(rec.graph_break))
            self.report.warn_break(rec.graph_break, "runs eagerly")
        else:
            self.report.count_record(rec)
        self.add(rec)
        return result

    def name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__qualname__

    def give_up(self, reason: str) -> None:
        """Run eagerly from now on, for ``reason``."""
        self.eager_reason = reason
        self.stats.break_reasons.append(reason)
        self.report.gave_up(reason)

    def clear(self) -> None:
        with self._lock:
            self.records = ()
            if self.lifting is not None:
                self.lifting = Lifting()
            self.stats.records = 0
            self.eager_reason = None

    def forked(self) -> None:
        """In a forked child: a recording another thread of the parent ran is gone with it."""
        if self._recording.locked() and self._recorder != threading.get_ident():
            self._recording = threading.Lock()
        self._lock = threading.Lock()


class MockMisses(tuple):
    """try_records' result where records' guards passed and their mocks missed the call."""


def _unstable(misses) -> bool:
    return misses is not MISS and any(r.unstable is not None for r in misses)


def _both(a, b):
    """Two try_records results' misses together."""
    if a is MISS or b is MISS:
        return b if a is MISS else a
    return MockMisses((*a, *b))


def _without(records: tuple, rec: Record) -> tuple:
    """``records`` less ``rec`` (by identity: a record's ``==`` compares its fields)."""
    return tuple(r for r in records if r is not rec)


def _rewind(drawn) -> None:
    """The call runs again after a mock that may have drawn numbers: from the same state."""
    if drawn is not None:
        rng.restore(drawn)


def reset_all() -> None:
    for cache in list(_ALL_CACHES):
        cache.clear()


def _forked_child() -> None:
    for cache in list(_ALL_CACHES):
        cache.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
