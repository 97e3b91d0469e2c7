"""Autopilot: keep a compiled graph only if it is faster than the same graph run eagerly.

A graph compiler is not always a win (on a small CPU Inductor can be ten times slower than
eager on some models), and ``torch.compile`` never checks.  magpy owns the call path and
the recorded fx graph is always at hand, so each compiled graph is put on trial over its
first calls: one warm-up call of each version, then :data:`TIMED_CALLS` timed calls of
each, alternated so that load on the machine hits both alike.  Every call runs exactly one
version (graphs may update their inputs in place: running both would apply that twice);
the eager version is the reference the compiled one must match, so either result serves.
The faster (best time of each, ties to the compiled version) is then put where the mock
looks the graph up (:attr:`Trial.settle`), so later calls pay nothing for the trial.

``magpy.config.autopilot`` (on by default) turns trials off for graphs compiled after it
is set; the "eager" backend has nothing to try.  On a GPU a compiled graph that qualifies for
a CUDA graph (``magpy.cudagraphs.wrap``) has a third version on trial, itself replayed as one
(its first call is its warm-up, its first timed call the capture: the best of its timed calls
is a replay), unless ``magpy.config.cuda_graphs`` already replays every graph that qualifies.

Calls from several threads share a trial: each takes its turn (which version, timed or not)
and adds its time under the trial's lock, and the thread that adds the last time decides,
once; calls made while it decides run their turn's version as any other.
"""
from __future__ import annotations

import threading
from time import perf_counter
from typing import Callable

import torch

WARMUP_CALLS = 1   # untimed calls of each version first (lazy initialisation, allocator caches)
TIMED_CALLS = 3    # timed calls of each version

# Calls on trial of a compiled graph against eager: the compiled version runs on even ones, the
# eager one on odd ones (with a third version, on every third).
TRIAL_CALLS = 2 * (WARMUP_CALLS + TIMED_CALLS)


class Trial:
    """A compiled graph on trial against its eager twin, and on a GPU against itself replayed as
    a CUDA graph (``replayed``, a ``magpy.cudagraphs.Replay``: its first call is its warm-up,
    its first timed call the capture); callable like any of them."""

    __slots__ = ("versions", "names", "ops", "calls", "times", "kept", "settle", "report", "lock")

    def __init__(self, compiled: Callable, eager: Callable, backend: str, ops: int,
                 replayed: Callable | None = None):
        self.versions = (compiled, eager) + ((replayed,) if replayed is not None else ())
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
        k = len(self.versions)
        with self.lock:
            n = self.calls
            self.calls = n + 1
        which = n % k
        fn = self.versions[which]
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

    def decide(self) -> None:
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
            return (f"{self.ops} operations: on trial, {' vs '.join(self.names)} ({self.calls} of "
                    f"{len(self.versions) * (WARMUP_CALLS + TIMED_CALLS)} calls)")
        times = ", ".join(f"{name} {min(t) * 1e3:.3f} ms" for name, t in zip(self.names, self.times))
        return f"{self.ops} operations: kept {self.winner} ({times} per call, best of {TIMED_CALLS})"


def _now() -> float:
    # CUDA kernels run asynchronously: the time of a call is the time until they finished.
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return perf_counter()
