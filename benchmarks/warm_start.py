"""First-call time of a cold and a warm process: magpy vs torch.compile (Inductor).

    python -m benchmarks.warm_start [--models resnet101,bert] [--size bench|test] [--threads 1]
                                    [--compilers magpy,torch.compile] [--json PATH]

For each model and compiler, two fresh Python processes in turn build the model
(``benchmarks.models.MODELS``), compile it and time its first call under ``torch.no_grad()``
(recording and compiling included; imports and building the model are not), and the time
until the compiled graphs run: for torch.compile the first call itself; magpy compiles in
the background from the first reuse of a record (its first call is the recording and an
eager run), so its time is that of a first call, a second one, waiting for the compile
(``magpy.synchronize()``) and a third call, which runs the compiled graphs.  Both processes
share one new, empty ``TORCHINDUCTOR_CACHE_DIR`` (per model and compiler, so the first is
truly cold): the second finds what the first left in Inductor's on-disk caches (FX graph
cache, AOTAutograd cache, compiled kernels).  Each also reports torch's cache counters
(``torch._dynamo.utils.counters``), so "warm" is seen, not assumed: ``fx hit/miss`` are
Inductor's FX graph cache lookups, ``aot hit/miss`` AOTAutograd's.

``warm %`` is warm / cold of the time until compiled; the issue's target is under 10% for
every zoo model.  Processes run one at a time (a shared machine: use ``--threads 1``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPILERS = ("magpy", "torch.compile")
CACHE_COUNTERS = ("fxgraph", "autograd_cache")   # prefixes of torch's counters to report
DEFAULT_MODELS = ("resnet101", "densenet121", "bert", "deberta_v2", "align")


def child(model: str, compiler: str, size: str, threads: int | None) -> dict:
    """Run in the fresh process: the first call's wall time and the cache counters."""
    import torch
    from torch._dynamo.utils import counters

    import magpy
    from benchmarks.models import MODELS

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    net, args, kwargs = MODELS[model](size)
    compiled = magpy.compile(net) if compiler == "magpy" else torch.compile(net)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*args, **kwargs)
        first = time.perf_counter() - start
        if compiler == "magpy":
            compiled(*args, **kwargs)
            magpy.synchronize()
            compiled(*args, **kwargs)
        until_compiled = time.perf_counter() - start
    caches = {**counters["inductor"], **counters["aot_autograd"]}
    return {"first_s": first, "compiled_s": until_compiled,
            **{k: v for k, v in caches.items() if k.startswith(CACHE_COUNTERS)}}


def spawn(model: str, compiler: str, size: str, threads: int | None, cache_dir: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "benchmarks.warm_start", "--child", model, compiler, "--size", size]
    if threads:
        cmd += ["--threads", str(threads)]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model: str, compiler: str, size: str, threads: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="warm_start_") as cache_dir:
        cold = spawn(model, compiler, size, threads, cache_dir)
        warm = spawn(model, compiler, size, threads, cache_dir)
    return {"model": model, "compiler": compiler, "cold": cold, "warm": warm}


def row(result: dict) -> str:
    cold, warm = result["cold"], result["warm"]
    if "error" in cold or "error" in warm:
        error = cold.get("error") or warm.get("error")
        return f"| {result['model']} | {result['compiler']} | error: {error} |||||"

    def counts(r: dict, cache: str) -> str:
        return f"{r.get(cache + '_hit', 0)}/{r.get(cache + '_miss', 0)}" + \
            (f" ({r[cache + '_bypass']} bypassed)" if r.get(cache + "_bypass") else "")

    return (f"| {result['model']} | {result['compiler']} | {cold['first_s']:.1f} / {warm['first_s']:.1f} | "
            f"{cold['compiled_s']:.1f} / {warm['compiled_s']:.1f} | "
            f"{100 * warm['compiled_s'] / cold['compiled_s']:.0f}% | {counts(warm, 'fxgraph_cache')} | "
            f"{counts(warm, 'autograd_cache')} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--compilers", default=",".join(COMPILERS))
    parser.add_argument("--size", default="bench", choices=("bench", "test"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "COMPILER"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        print(json.dumps(child(*opts.child, opts.size, opts.threads)))
        return 0
    results = []
    print("| model | compiler | first call s, cold / warm | until compiled s, cold / warm | warm % | "
          "warm fx hit/miss | warm aot hit/miss |\n|---|---|---|---|---|---|---|", flush=True)
    for model in opts.models.split(","):
        for compiler in opts.compilers.split(","):
            results.append(measure(model, compiler, opts.size, opts.threads))
            print(row(results[-1]), flush=True)
            if opts.json:
                Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
