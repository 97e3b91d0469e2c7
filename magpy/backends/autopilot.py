"""Autopilot: keep a compiled graph only if it is faster than the same graph run eagerly.

A graph compiler is not always a win (on a small CPU Inductor can be ten times slower than
eager on some models), and ``torch.compile`` never checks.  magpy owns the call path and
the recorded fx graph is always at hand, so each compiled graph is put on trial over its
first calls: one warm-up call of each version, then :data:`TIMED_CALLS` timed calls of
each, alternated so that load on the machine hits both alike.  Every call runs exactly one
version (graphs may update their inputs in place: running both would apply that twice);
the eager version is the reference the compiled one must match, so either result serves.
That is the trial of a graph that writes; most are tried *paired* (below).
The faster (best time of each, ties to the compiled version) is then put where the mock
looks the graph up (:attr:`Trial.settle`), so later calls pay nothing for the trial.

Alternate calls take alternate inputs, and a graph's work can depend on them: a ``torch.cond``
runs a block or not, a record with lifted sizes serves a short sequence and a long one.  Best
times of different inputs then compare the inputs, not the versions (BlockDrop's eager twin
won with its best call, one with every block off: 0.44 ms against a call's 3.8 ms on a CPU).
A graph that can run twice on the same inputs without a trace (``opgraph.repeatable``:
nothing written in place, no random draw, no collective; no backward either; most inference
graphs) is therefore tried *paired*: each call on trial runs every version on its inputs, in
turn first, and returns the first one's result; after :data:`WARMUP_CALLS` such calls,
:data:`TIMED_CALLS` timed ones decide by the median over calls of each version's time
relative to the compiled one's.  (Where a second version runs out of memory beside the first
one's outputs, the call returns the first one's result and the trial starts again unpaired.)
A close call (medians within :data:`CLOSE_CALL` of each other) takes more timed calls, up to
:data:`CLOSE_TIMED_CALLS`, before it is decided: on a loaded CPU three paired calls of a model
that Inductor makes 1-7% faster than eager (torchvision's ViT-B/16) kept the slower version in
one run of five.

``magpy.config.autopilot`` (on by default) turns trials off for graphs compiled after it
is set; the "eager" backend has nothing to try.  On a GPU a compiled graph that qualifies for
a CUDA graph (``magpy.backends.gpu.cuda_graphs.wrap``) has a third version on trial, itself replayed as one
(its first call is its warm-up, its first timed call the capture: the best of its timed calls
is a replay), unless ``magpy.config.cuda_graphs`` already replays every graph that qualifies.

Calls from several threads share a trial: each takes its turn (which version, timed or not)
and adds its time under the trial's lock, and the thread that adds the last time decides,
once; calls made while it decides run their turn's version as any other.
"""
from __future__ import annotations

import statistics
import threading
from time import perf_counter
from typing import Callable

import torch

WARMUP_CALLS = 1   # untimed calls of each version first (lazy initialisation, allocator caches)
TIMED_CALLS = 3    # timed calls of each version

# The most calls a trial takes: one version per call, with three versions on trial (a paired
# trial takes WARMUP_CALLS + TIMED_CALLS, or + CLOSE_TIMED_CALLS on a close call).
TRIAL_CALLS = 3 * (WARMUP_CALLS + TIMED_CALLS)

CLOSE_CALL = 0.05   # a paired trial whose medians differ by less (relative) is a close call ...
CLOSE_TIMED_CALLS = TRIAL_CALLS - WARMUP_CALLS   # ... and takes this many timed calls in all


class Trial:
    """A compiled graph on trial against its eager twin, and on a GPU against itself replayed as
    a CUDA graph (``replayed``, a ``magpy.backends.gpu.cuda_graphs.Replay``: its first call is its warm-up,
    its first timed call the capture); callable like any of them."""

    __slots__ = ("versions", "names", "ops", "paired", "timed", "calls", "times", "kept", "settle", "report",
                 "lock")

    def __init__(self, compiled: Callable, eager: Callable, backend: str, ops: int,
                 replayed: Callable | None = None, paired: bool = False):
        self.versions = (compiled, eager) + ((replayed,) if replayed is not None else ())
        self.paired = paired       # every version runs on each call's inputs (module docstring)
        self.timed = TIMED_CALLS   # the timed calls a paired trial takes (more on a close call)
        # the versions' names: the backend's, "eager", the backend's + CUDA graphs
        self.names = (backend, "eager", f"{backend} + CUDA graphs")[:len(self.versions)]
        self.ops = ops             # the graph's operations (for the log line)
        self.calls = 0
        self.times = tuple([] for _ in self.versions)   # seconds per timed call of each version
        self.kept: int | None = None     # the index of the version kept once decided
        self.settle: Callable[[Callable], None] | None = None   # puts the winner in the mock's place
        self.report: Callable[[Trial], None] | None = None     # counts and logs the decision
        self.lock = threading.Lock()   # the turns and times of calls from several threads

    def __call__(self, *args):
        if self.kept is not None:   # not settled in a mock (called directly)
            return self.versions[self.kept](*args)
        n = self._turn()
        if self.paired:
            return self._paired(n, args)
        k = len(self.versions)
        which = n % k
        fn = self._version(which)
        if n < k * WARMUP_CALLS or n >= k * (WARMUP_CALLS + TIMED_CALLS):
            return fn(*args)
        start = _now()
        out = fn(*args)
        took = _now() - start
        with self.lock:
            self.times[which].append(took)
            last = sum(map(len, self.times)) == k * TIMED_CALLS
        if last:
            self.decide()
        return out

    def _paired(self, n: int, args):
        k = len(self.versions)
        if n >= WARMUP_CALLS + self.timed:   # (a call that raced the decision, or its extension)
            return self._version(0 if self.kept is None else self.kept)(*args)
        timed = n >= WARMUP_CALLS
        took, out = {}, None
        for which in [(n + j) % k for j in range(k)]:
            start = _now() if timed else 0.0
            try:
                result = self._version(which)(*args)
            except torch.OutOfMemoryError:
                if out is None:
                    raise   # (the call's own: its first version alone did not fit)
                self._unpair()
                return out
            took[which] = _now() - start if timed else 0.0
            out = result if out is None else out
        if not timed:
            return out
        with self.lock:
            for which, t in took.items():
                self.times[which].append(t)
            last = len(self.times[0]) == self.timed
        if last:
            self.decide()
        return out

    def _unpair(self) -> None:
        """Another version did not fit in memory beside the first one's outputs: the trial
        starts again with one version per call."""
        with self.lock:
            if self.paired:
                self.paired, self.calls = False, 0
                self.times = tuple([] for _ in self.versions)

    def _turn(self) -> int:
        # (a paired trial counts only the calls it takes: a close call's extension hands out
        # the turns after them, whatever calls raced its decision meanwhile)
        with self.lock:
            n = self.calls
            if not self.paired or n < WARMUP_CALLS + self.timed:
                self.calls = n + 1
        return n

    def _version(self, which: int) -> Callable:
        # (a replay that lost is let go once decided: a call that raced the decision runs the
        # compiled graph instead)
        return self.versions[which] or self.versions[0]

    def decide(self) -> None:
        if self.paired:   # each call's times relative to the compiled version's on the same inputs
            best = [statistics.median(t / c for t, c in zip(ts, self.times[0])) for ts in self.times]
            if self.timed < CLOSE_TIMED_CALLS and abs(min(best[1:]) - 1.0) < CLOSE_CALL:
                self.timed = CLOSE_TIMED_CALLS   # (decided when the last of them adds its times)
                return
        else:
            best = [min(t) for t in self.times]
        self.kept = min(range(len(best)), key=lambda i: (best[i], i))   # (ties to the compiled version)
        # A replay that lost gives back its capture's memory pool.
        self.versions = tuple(v if i < 2 or i == self.kept else None for i, v in enumerate(self.versions))
        if self.settle is not None:
            self.settle(self.versions[self.kept])
        if self.report is not None:
            self.report(self)

    @property
    def winner(self) -> str | None:
        """The name of the version kept ("eager", the backend's, or the backend's + CUDA graphs),
        None while on trial."""
        return None if self.kept is None else self.names[self.kept]

    def describe(self) -> str:
        """The decision in words, with the times it rests on."""
        if self.kept is None:
            k = len(self.versions)
            calls = WARMUP_CALLS + self.timed if self.paired else (WARMUP_CALLS + TIMED_CALLS) * k
            return (f"{self.ops} operations: on trial, {' vs '.join(self.names)} ({self.calls} of "
                    f"{calls} calls)")
        times = ", ".join(f"{name} {min(t) * 1e3:.3f} ms" for name, t in zip(self.names, self.times))
        how = "the same inputs each" if self.paired else "alternate calls"
        calls = len(self.times[0])
        return f"{self.ops} operations: kept {self.winner} ({times} per call, best of {calls}; {how})"


def _now() -> float:
    # CUDA kernels run asynchronously: the time of a call is the time until they finished.
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return perf_counter()
