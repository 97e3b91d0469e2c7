"""The sweep's NONDET models (vit_mae, vilt, univnet, vits, reformer: random ops in eval mode, so
eager is not repeatable and the sweep cannot compare): with the global RNG seeded the same way
before the eager call and before each compiled call, does magpy's graph draw the same numbers?

    PYTHONPATH=/work/h1 python sweep_repros/random_ops_seeded.py [model types]
"""
import sys

import torch

import magpy
from benchmarks import transformers_sweep as sweep
from benchmarks.models import hf_zoo
from benchmarks.run import compare

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True

for name in (sys.argv[1:] or ["vit_mae", "vilt", "univnet", "vits", "reformer"]):
    res = sweep.SweepResult(name)
    model, kwargs, _ = sweep.prepare(name, res)
    compiled = magpy.compile(model, backend="eager")
    fresh = hf_zoo.fresh_inputs((), kwargs)[1]
    for call, k in (("first", kwargs), ("repeated", kwargs), ("fresh", fresh)):
        with torch.no_grad():
            torch.manual_seed(123)
            expected = model(**k)
            torch.manual_seed(123)
            got = compiled(**k)
            torch.manual_seed(123)
            again = model(**k)
        repeatable = compare(hf_zoo.plain(expected), hf_zoo.plain(again), rtol=0, atol=0).ok
        c = compare(hf_zoo.plain(expected), hf_zoo.plain(got), rtol=1e-4, atol=1e-5)
        print(f"{name:10s} {call:8s} eager repeatable when seeded: {repeatable}; magpy matches: {c.ok} "
              f"{c.problems[:1]}")
    s = magpy.stats(compiled)
    print(f"{name:10s} stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count}",
          s.break_reasons[:1])
    magpy.reset()
