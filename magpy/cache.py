"""Records per compiled callable (paper §6.1): most recently matched first, a monitor run on
a miss, and a limit after which the callable runs eagerly."""
from __future__ import annotations

import dataclasses
import warnings
import weakref

from magpy.config import config
from magpy.errors import GraphBreakError
from magpy.record import Record, capture

_ALL_CACHES: weakref.WeakSet = weakref.WeakSet()


@dataclasses.dataclass
class Stats:
    """What a compiled callable has done so far (``magpy.stats(compiled)``)."""

    monitor_runs: int = 0     # recording runs (first call, guard misses)
    mock_runs: int = 0        # guard hits that ran the mock and the compiled graph
    eager_runs: int = 0       # calls run eagerly (graph breaks, failures, over the limit)
    graph_count: int = 0      # graphs compiled
    records: int = 0          # records in the cache now
    break_reasons: list = dataclasses.field(default_factory=list)


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
        _ALL_CACHES.add(self)

    def __call__(self, args: tuple, kwargs: dict):
        records = self.records
        for i, rec in enumerate(records):
            env = rec.match(args, kwargs)
            if env is not None:
                if i:
                    records.insert(0, records.pop(i))
                if rec.mock is None:
                    self.stats.eager_runs += 1
                    return self.fn(*args, **kwargs)
                self.stats.mock_runs += 1
                return rec.mock(env)
        return self.miss(args, kwargs)

    def miss(self, args, kwargs):
        if self.eager_reason is None and len(self.records) >= config.cache_size_limit:
            self.give_up(f"{len(self.records)} records (magpy.config.cache_size_limit) did not cover "
                         "this call; running eagerly from now on")
        if self.eager_reason is not None:
            self.stats.eager_runs += 1
            return self.fn(*args, **kwargs)
        self.stats.monitor_runs += 1
        result, rec = capture(self.fn, args, kwargs, self.backend, self.roots)
        if rec is None:
            self.eager_reason = "capture failed"
            self.stats.break_reasons.append("capture failed (see the warning)")
            return result
        if rec.graph_break is not None:
            self.stats.break_reasons.append(str(rec.graph_break))
            if self.fullgraph:
                raise GraphBreakError(rec.graph_break)
        elif rec.graph is not None:
            self.stats.graph_count += 1
        self.records.insert(0, rec)
        self.stats.records = len(self.records)
        return result

    def give_up(self, reason: str) -> None:
        self.eager_reason = reason
        self.stats.break_reasons.append(reason)
        warnings.warn(f"magpy: {getattr(self.fn, '__qualname__', self.fn)}: {reason}", UserWarning,
                      stacklevel=4)

    def clear(self) -> None:
        self.records.clear()
        self.stats.records = 0
        self.eager_reason = None


def reset_all() -> None:
    for cache in list(_ALL_CACHES):
        cache.clear()
