"""Where the host time of one compiled call goes: guard, mock, graph (issue 28, items 3 and 6).

    python -m benchmarks.call_profile [--device cuda] [--model bert|mlp|resnet50] [--size test|bench]
                                      [--backend inductor|eager] [--cuda-graphs] [--calls N] [--top K]

At batch 1 on a GPU the host is the bottleneck, so what magpy adds to each call (the guard,
the mock's bookkeeping, a CUDA graph replay's input copies and checks) decides whether it
beats ``torch.compile(mode="reduce-overhead")``.  The model is compiled in the foreground,
warmed up past the autopilot's trial, then: the median of a whole call, the median of the
record's guard alone (``Record.match``), the same model under ``torch.compile`` (and its
reduce-overhead mode on a GPU) for comparison, and a cProfile of ``--calls`` calls, the
``--top`` functions by their own time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics

import torch

import magpy
from benchmarks.device import add_argument, describe, now, to_device
from benchmarks.gpu import BUILDERS, magpy_config


def _median_ms(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = now()
        fn()
        times.append(now() - t0)
    return 1e3 * statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_argument(p)
    p.add_argument("--model", default="bert", choices=sorted(BUILDERS))
    p.add_argument("--size", default="bench", choices=("test", "bench"))
    p.add_argument("--backend", default="inductor")
    p.add_argument("--cuda-graphs", action="store_true", help="magpy.config.cuda_graphs = True")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args(argv)
    model, args, kwargs = BUILDERS[a.model](a.size)
    model, args, kwargs = model.to(a.device), to_device(args, a.device), to_device(kwargs, a.device)
    print(f"{a.model} ({a.size}) on {describe(a.device)}, backend {a.backend}, cuda_graphs {a.cuda_graphs}")
    with torch.no_grad(), magpy_config(background_compile=False, cuda_graphs=a.cuda_graphs):
        compiled = magpy.compile(model, backend=a.backend)
        call = lambda: compiled(*args, **kwargs)   # noqa: E731
        for _ in range(20):   # the recording, the autopilot's trial, a CUDA graph's capture
            call()
        record = compiled._magpy_cache.records[0]
        rows = [("eager", _median_ms(lambda: model(*args, **kwargs), a.calls)),
                ("magpy call", _median_ms(call, a.calls)),
                ("magpy guard (Record.match)", _median_ms(lambda: record.match(args, kwargs), a.calls))]
        modes = ("default", "reduce-overhead") if a.device.startswith("cuda") else ("default",)
        for mode in modes:
            torch._dynamo.reset()
            tc = torch.compile(model, backend=a.backend, mode=None if mode == "default" else mode)
            for _ in range(5):
                tc(*args, **kwargs)
            rows.append((f"torch.compile {mode}", _median_ms(lambda: tc(*args, **kwargs), a.calls)))
        for name, ms in rows:
            print(f"  {name:32s} {ms:8.3f} ms")
        print(f"  magpy stats: {magpy.stats(compiled)}")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            call()
        now()
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
