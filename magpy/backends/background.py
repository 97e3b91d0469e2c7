"""Background compilation: a record's graphs run eagerly while the backend compiles them.

A backend compile takes seconds (Inductor on this CPU: 1-15 s per graph), an eager run of
the same fx graph milliseconds, and the eager twin of every graph is at hand.  So a call
never waits for a compiler: a record's graphs start as their eager twins, the first call
that reuses the record (a guard hit) hands the compile of all its graphs to one worker
thread (:class:`Deferred`), and calls go on eagerly until it is done; the next call that
tries the record puts the compiled versions in the mock's place before its guard runs
(through ``magpy.backends.autopilot``'s trial where that is on).  A record that is never reused
(the first record of a size that the next call makes symbolic) is never compiled.
``magpy.config.background_compile = False`` compiles at recording time, in the calling
thread, as ``torch.compile`` does.

Why a thread is safe here:

- The worker holds two locks for a whole compile: magpy's (:func:`exclusive`), which a
  compile in the calling thread holds too, and Dynamo's compile lock, which
  ``torch.compile``'s frame conversion holds: two compilers never overlap, so global
  compiler configuration one patches is never seen by another (magpy's lock first, then
  Dynamo's, in both threads).  What runs alongside a compile is eager execution: mock runs
  (eager twins, compiled graphs of other records) and recordings, which build their fx
  graphs directly and read none of the configuration a compile patches (Inductor's own,
  AOTAutograd's ``unlift_effect_tokens``/``selective_decompose``, fx's node-meta
  preservation, which only fx tracers read).  fx's tracers patch ``nn.Module`` for the whole
  process while they trace; in the worker they do not (magpy.backends.fx_patches).
- The thread-local state a compile depends on (grad mode, inference mode) is the record's,
  set again in the worker; a record made under autocast compiles in the foreground.
- A record's graphs are compiled by one job, so the record's shape environment (symbolic
  sizes) is touched by one thread at a time: the worker while it compiles, the calling
  thread after.  Compiling may assume more of the sizes; the guard's size check is
  rewritten before the guard that lets the compiled graphs run, so no call that passed
  the old check runs them.
- A process that ends drops the compiles not started yet, waits for the one running and
  lets the worker end, before any atexit handler runs: the interpreter would otherwise
  stop the worker inside the compiler's C++ code, or inside torch's deallocator of a
  tensor a finished job held, which aborts the process (``terminate called without an
  active exception``).
- A compile that runs longer than ``magpy.config.compile_timeout`` (a backend that hangs)
  is given up: its record's graphs run their eager twins for good (with one warning, as for
  a backend that failed), and so do the compiles queued behind it while it runs on;
  ``magpy.synchronize()`` and the process's exit stop waiting for it, and a compile in the
  calling thread waits for it at most that long (then the call's record is not made:
  ``magpy.records.record``).  A thread cannot be stopped from outside, so the worker runs on until
  the backend returns; what it returns then is dropped.
- A ``KeyboardInterrupt`` or other exception that is not an ``Exception`` raised by a
  compile in the worker (no signal is delivered there: it is the backend's) fails that
  compile like any other error.
- A process forked while the worker compiles (``DataLoader`` workers, ``multiprocessing``
  with "fork") has no worker but would inherit magpy's lock held: the child starts with a
  lock, a queue and a worker of its own; its records keep running their eager twins.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future, InvalidStateError, wait
from typing import Callable, Iterator

import torch
from torch._dynamo.convert_frame import compile_lock

from magpy.backends import fx_patches
from magpy.capture import collector, process_state
from magpy.config import config

_lock = threading.RLock()                        # held by every compile
_starting = threading.RLock()                    # starting the worker, a record's compile, taking it
_jobs: queue.SimpleQueue = queue.SimpleQueue()   # (future, job) for the worker, in order
_STOP = None                                     # the worker's last item (_drain)
_unfinished: set[Future] = set()                 # submitted, not yet done (synchronize, reset)
_worker: threading.Thread | None = None
_running: tuple[Future, float] | None = None     # the compile in the worker now, and when it began
_stuck: Future | None = None                     # a compile given up that has not returned yet
_POLL = 0.05   # seconds between looks for an overdue compile while waiting (compile_timeout set)


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Held by a compile in the calling thread: none runs in the worker meanwhile.  Waits at
    most ``config.compile_timeout`` for the worker's compile (TimeoutError)."""
    timeout = config.compile_timeout
    if not _lock.acquire(timeout=-1 if timeout is None else timeout):
        raise TimeoutError(f"another compile ran longer than magpy.config.compile_timeout ({timeout} s)")
    try:
        yield
    finally:
        _lock.release()


def can_defer() -> bool:
    """Can graphs recorded now compile in the worker?  Not under autocast, whose state is
    per thread and changes what a compile makes of the graph."""
    return not any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))


def submit(job: Callable[[], object]) -> Future:
    """Run ``job()`` in the worker (one at a time, in order, under both locks)."""
    global _worker
    future: Future = Future()
    _unfinished.add(future)
    future.add_done_callback(_unfinished.discard)
    _jobs.put((future, job))
    with _starting:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="magpy-compile", daemon=True)
            _worker.start()
    return future


# While a compile runs, the interpreter hands the GIL over at least this often (seconds):
# each torch operation of the calling thread's eager run releases the GIL and then waits
# for the worker to give it back, by default up to 5 ms per operation.  BlockDrop's calls
# (about 60 small operations, 6.8 ms eager) during the Python-heavy part of a compile:
# 16.8 ms median at 0.1 ms, 12.9 ms at 20 µs, the compile as long (14.6 / 14.9 s).
SWITCH_INTERVAL = 0.00002
NICENESS = 10   # the worker's (and its compiler processes') CPU priority below the caller's


def _work() -> None:
    try:   # Linux: a thread's niceness is its own, inherited by the processes it starts
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
    except (AttributeError, OSError):  # pragma: no cover - other platforms
        pass
    while (item := _jobs.get()) is not _STOP:
        _run(*item)
        del item   # (the job may hold the last references to its record's tensors)


def _run(future: Future, job: Callable[[], object]) -> None:
    """Run one job, unless ``magpy.reset()`` cancelled it or it was given up (_expire)
    before it started."""
    global _running, _stuck
    if future.done() or not future.set_running_or_notify_cancel():
        return
    _running = (future, time.monotonic())
    try:
        with (_lock, compile_lock, collector.full_collections_deferred(), _FAST_SWITCHING,
              fx_patches.kept_to_this_thread()):
            out = job()
    except Exception as e:  # noqa: BLE001 - handed to the calling thread (Deferred.results)
        _settle(future.set_exception, e)
    except BaseException as e:  # noqa: BLE001 - not a signal (those go to the main thread): the backend's
        failure = RuntimeError(f"the compile was interrupted by {type(e).__name__}: {e}")
        failure.__cause__ = e
        _settle(future.set_exception, failure)
    else:
        _settle(future.set_result, out)
    finally:
        _running, _stuck = None, None


def _settle(setter: Callable, value) -> None:
    try:
        setter(value)
    except InvalidStateError:   # given up already (_expire): what it made is dropped
        pass


def _expire() -> None:
    """Give up the compile that has run longer than ``config.compile_timeout``, and, while
    it runs on, every compile queued behind it (module docstring)."""
    global _stuck
    running, timeout = _running, config.compile_timeout
    if running is not None and timeout is not None and time.monotonic() - running[1] > timeout:
        _stuck = running[0]
        _settle(running[0].set_exception, TimeoutError(
            f"the compile ran longer than magpy.config.compile_timeout ({timeout} s)"))
    if _stuck is not None:
        for future in list(_unfinished):
            if not future.running():
                _settle(future.set_exception, TimeoutError("queued behind a compile that ran longer than "
                                                           f"magpy.config.compile_timeout ({timeout} s)"))


def _switch_often() -> Callable[[], None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    fast = sys.getswitchinterval()   # (as the interpreter rounds it)

    def undo() -> None:
        if sys.getswitchinterval() == fast:   # (else the program set its own meanwhile)
            sys.setswitchinterval(interval)

    return undo


_FAST_SWITCHING = process_state.Held(_switch_often)   # while a compile runs (magpy.capture.process_state)


def synchronize(timeout: float | None = None) -> bool:
    """Wait until every compile started in the background has finished (each compiled graph
    takes over at its record's next call); False if ``timeout`` seconds passed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        _expire()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        step = left if config.compile_timeout is None else min(_POLL, _POLL if left is None else left)
        _, not_done = wait(list(_unfinished), timeout=step)
        if not not_done:
            return True
        if left is not None and left <= step:
            return False


def cancel_queued() -> None:
    """Drop the compiles that have not started (``magpy.reset()`` dropped their records)."""
    for future in list(_unfinished):
        future.cancel()


def _drain() -> None:
    """At exit: drop the compiles not started, wait for the one running, and let the worker
    end.  A worker still alive when the interpreter finalizes dies where it next waits for
    the GIL, and a tensor it frees there (a finished job's closure) releases the GIL inside
    torch's C++ deallocator: the thread's forced unwinding through it aborts the process."""
    cancel_queued()
    synchronize()
    worker = _worker
    if worker is not None and worker.is_alive() and _stuck is None:   # (a stuck one never ends)
        _jobs.put(_STOP)
        worker.join()


# Before any atexit handler: Inductor's (registered when a compile first imports it, so
# after magpy's and run before it) shut down its compile workers, under a running compile.
getattr(threading, "_register_atexit", atexit.register)(_drain)


def _anew_in_child() -> None:
    global _lock, _starting, _jobs, _unfinished, _worker, _running, _stuck
    _lock, _starting, _jobs, _unfinished = threading.RLock(), threading.RLock(), queue.SimpleQueue(), set()
    _worker = _running = _stuck = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_anew_in_child)


class Deferred:
    """The compile of one record's graphs, started in the worker by the record's first reuse.

    ``job()`` compiles them (one compiled callable, or the exception, per graph);
    ``take(record, results)``, called by the record in the calling thread once the job is
    done and before its next guard, puts them in the mock's place (``results``: the job's
    list, or the exception the job itself failed with); ``report`` is handed to
    the trials it makes (``magpy.backends.autopilot``), ``taken(graphs)`` counts them (``magpy.stats``)."""

    __slots__ = ("job", "take", "backend", "future", "report", "taken", "claimed")

    def __init__(self, job: Callable[[], list], take: Callable, backend: str):
        self.job, self.take, self.backend = job, take, backend
        self.future: Future | None = None
        self.report: Callable | None = None
        self.taken: Callable[[int], None] | None = None
        self.claimed = False

    def start(self) -> None:
        """Hand the compile to the worker (again, if ``magpy.reset()`` cancelled it); once,
        whichever threads start it."""
        with _starting:
            if self.future is None or self.future.cancelled():
                self.future = submit(self.job)

    def done(self) -> bool:
        future = self.future
        return future is not None and future.done() and not future.cancelled()

    def claim(self) -> bool:
        """Is the calling thread the one to take the finished (or given up) compile's results
        (the first to ask once it is done)?"""
        if self.future is not None and not self.future.done():
            _expire()
        if not self.done():
            return False
        with _starting:
            claimed, self.claimed = self.claimed, True
        return not claimed

    def results(self) -> list | Exception:
        """The job's results, or the exception the job itself failed with."""
        try:
            return self.future.result()
        except Exception as e:  # noqa: BLE001 - magpy's own failure: ``take`` keeps every graph eager
            return e

    def describe(self) -> str:
        """The compile's state, in words (``explain``)."""
        if self.future is None:
            return f"running eagerly until the record's first reuse starts its {self.backend} compile"
        return f"compiling with {self.backend} in the background, running eagerly meanwhile"
