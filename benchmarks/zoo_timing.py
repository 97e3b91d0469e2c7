"""Eager forward time of every model in the zoo.

    python -m benchmarks.zoo_timing [--size bench] [--repeat 20] [--threads N] [names...]

Builds each model, runs a few warm-up forwards under ``torch.no_grad()``, then prints the
median / min / max of ``--repeat`` timed forwards (milliseconds, batch size 1).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.models import MODELS, SIZES


def time_forward(model, args, kwargs, repeat: int, warmup: int = 3) -> list[float]:
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*args, **kwargs)
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(*args, **kwargs)
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def describe_inputs(args, kwargs) -> str:
    parts = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
    parts += ["%s%s" % (k, tuple(v.shape)) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return " ".join(str(p) for p in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to time (default: all)")
    parser.add_argument("--size", default="bench")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: torch's default)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)

    jobs = []
    for name in opts.names or list(MODELS):
        jobs.append((name, opts.size))
        if not opts.names and opts.size == "bench" and "bench12" in SIZES[name]:
            jobs.append((name, "bench12"))

    print("threads: %d, torch %s" % (torch.get_num_threads(), torch.__version__))
    header = "%-12s %-8s %10s %10s %10s %9s  %s" % (
        "model", "size", "median ms", "min ms", "max ms", "params M", "inputs")
    print(header)
    print("-" * len(header))
    for name, size in jobs:
        model, args, kwargs = MODELS[name](size)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        times = time_forward(model, args, kwargs, opts.repeat)
        print("%-12s %-8s %10.1f %10.1f %10.1f %9.2f  %s" % (
            name, size, statistics.median(times), min(times), max(times), params,
            describe_inputs(args, kwargs)), flush=True)
        del model


if __name__ == "__main__":
    main()
