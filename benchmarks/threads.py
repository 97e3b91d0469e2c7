"""One compiled callable shared by many threads, as a server would call it (issue 29).

8 threads share one ``magpy.compile(model)`` and call it 60 times each, with batch sizes drawn
from 8 values; each result is compared with the eager model's.  Printed per backend: calls
that raised, wrong results, recordings (monitor runs) against the distinct misses they
covered (records kept), and the process's recursion limit afterwards.

    python -m benchmarks.threads [--backends eager,inductor] [--threads 8] [--calls 60]
"""
from __future__ import annotations

import argparse
import random
import sys
import threading
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/threads.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import magpy  # noqa: E402

BATCHES = (1, 2, 3, 4, 5, 6, 7, 8)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


def hammer(fn, reference, threads: int, calls: int, seed: int = 0) -> dict:
    """Call ``fn`` from ``threads`` threads, ``calls`` times each; what went wrong, counted."""
    inputs = {b: torch.randn(b, 16) for b in BATCHES}
    with torch.no_grad():
        expected = {b: reference(x) for b, x in inputs.items()}
    counts: Counter = Counter()
    errors: list[str] = []
    start = threading.Barrier(threads)

    def worker(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        start.wait()
        for _ in range(calls):
            b = rng.choice(BATCHES)
            try:
                with torch.no_grad():
                    out = fn(inputs[b])
            except Exception as e:  # noqa: BLE001 - counted and reported
                counts["exceptions"] += 1
                errors.append(f"{type(e).__name__}: {e}")
                continue
            counts["calls"] += 1
            if not torch.allclose(out, expected[b], atol=1e-5, rtol=1e-5):
                counts["wrong"] += 1

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"exceptions": counts["exceptions"], "wrong": counts["wrong"], "errors": Counter(errors)}


def measure(backend: str, threads: int, calls: int) -> dict:
    """The figures of one backend, in a fresh compiled callable."""
    limit = sys.getrecursionlimit()
    net = model()
    fast = magpy.compile(net, backend=backend)
    out = hammer(fast, net, threads, calls)
    magpy.synchronize()
    stats = magpy.stats(fast)
    out.update(recordings=stats.monitor_runs, records=stats.records, eager_runs=stats.eager_runs,
               mock_runs=stats.mock_runs, limit_before=limit, limit_after=sys.getrecursionlimit())
    # The same again, once recorded (a server's steady state): the calls the records served.
    again = hammer(fast, net, threads, calls, seed=1)
    out.update(again_exceptions=again["exceptions"], again_wrong=again["wrong"],
               again_mock_runs=stats.mock_runs - out["mock_runs"],
               again_recordings=stats.monitor_runs - out["recordings"])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="eager,inductor")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args(argv)
    for backend in args.backends.split(","):
        r = measure(backend, args.threads, args.calls)
        print(f"{backend}: {args.threads} threads x {args.calls} calls: {r['exceptions']} exceptions, "
              f"{r['wrong']} wrong, {r['recordings']} recordings for {r['records']} records "
              f"({len(BATCHES)} batch sizes), {r['mock_runs']} mock runs, {r['eager_runs']} eager runs "
              f"(while a recording ran), recursion limit {r['limit_before']} -> {r['limit_after']}; "
              f"again: {r['again_exceptions']} exceptions, {r['again_wrong']} wrong, {r['again_recordings']} "
              f"recordings, {r['again_mock_runs']} mock runs")
        for err, n in r["errors"].most_common(3):
            print(f"    {n} x {err[:160]}")


if __name__ == "__main__":
    main()
