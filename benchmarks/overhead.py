"""Per-call overhead of magpy's guard + mock, side by side with torch.compile's.

Both compilers use backend="eager", so the compiled graph is run by the same fx-generated
Python in both: what differs is the dispatch around it (magpy: generated guard, then mock;
torch.compile: dynamo's guards and frame evaluation).  Target: magpy's overhead is no more
than torch.compile's.

    python -m benchmarks.overhead [--models mlp,resnet50] [--quick] [--threads 1] [--json PATH]
                                  [--device cuda]

Each measurement is a loop of calls between two reads of ``benchmarks.device.now`` (on a GPU it
synchronises first): per-call time averaged over the loop, the host's dispatch included.

Two overheads are reported per call:

* "vs eager": compiled call minus the plain eager call -- the headline.  It can be negative:
  the graph skips nn.Module.__call__ and Python forward code that eager runs.
* "dispatch": compiled call minus its own graph called directly with the inputs the backend
  saw (captured by a second compile with a recording backend) -- guard + mock (magpy) or
  guards + frame evaluation (torch.compile) alone.  "n/a" if the capture did not give one
  graph that can be called again.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/overhead.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn as nn  # noqa: E402

import magpy  # noqa: E402
from benchmarks.device import add_argument as add_device_argument  # noqa: E402
from benchmarks.device import describe as describe_device  # noqa: E402
from benchmarks.device import now, to_device  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402
from benchmarks.run import compare  # noqa: E402

VARIANTS = ("eager", "torch.compile", "magpy")


def build_mlp():
    """Tiny on purpose: a forward costs tens of microseconds, so per-call overhead dominates."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    return model.eval(), (torch.randn(8, 64),), {}


BUILDERS = {"mlp": build_mlp, "resnet50": lambda: MODELS["resnet50"]("test"),
            "bert": lambda: MODELS["bert"]("test")}


def compile_with(name, model, backend="eager"):
    if name == "eager":
        return model
    if name == "torch.compile":
        return torch.compile(model, backend=backend)
    return magpy.compile(model, backend=backend)


def calibrate(fn, target_s):
    """Calls per measurement so that one measurement takes about target_s."""
    n = 1
    while True:
        t0 = now()
        for _ in range(n):
            fn()
        elapsed = now() - t0
        if elapsed > 0.05:
            return max(1, round(n * target_s / elapsed))
        n *= 4


def measure(fns, repeats, target_s):
    """Median per-call microseconds of each fn.  Repeats are interleaved across the fns so that
    drift on a shared machine hits every variant alike; gc is off while timing (as in timeit)."""
    counts = {k: calibrate(f, target_s) for k, f in fns.items()}
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            n = counts[k]
            gc.collect()
            gc.disable()
            t0 = now()
            for _ in range(n):
                f()
            elapsed = now() - t0
            gc.enable()
            samples[k].append(elapsed / n * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}, counts


def capture_graph(variant, model, args, kwargs):
    """Compile again with a backend that records what it is given; return a zero-argument call of
    the graph alone, or None if there was not exactly one graph or it cannot be called again."""
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append((gm.forward, list(example_inputs)))
        return gm.forward  # what backend="eager" returns in both compilers

    torch._dynamo.reset()
    compile_with(variant, model, recording_backend)(*args, **kwargs)
    if len(graphs) != 1:
        print(f"note: {variant} made {len(graphs)} graphs, no 'dispatch' figure")
        return None
    forward, inputs = graphs[0]
    try:
        forward(*inputs)
    except Exception as e:
        print(f"note: {variant}'s graph cannot be called again on its example inputs ({e!r})")
        return None
    return lambda: forward(*inputs)


def bench_model(name, grad, repeats, target_s, device="cpu"):
    model, args, kwargs = BUILDERS[name]()
    model, args, kwargs = model.to(device), to_device(args, device), to_device(kwargs, device)
    shape = " ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))
    row = {"model": name, "input": shape, "grad": grad}
    with torch.set_grad_enabled(grad):
        expected = model(*args, **kwargs)
        # Graph captures first: each compile starts from a fresh dynamo cache (reset), so the timed
        # torch.compile below never has a leftover entry (other backend, other grad mode) to check.
        graph_fns = {v + " graph": capture_graph(v, model, args, kwargs) for v in VARIANTS[1:]}
        torch._dynamo.reset()
        compiled = {v: compile_with(v, model) for v in VARIANTS}
        fns, row["allclose"] = {}, {}
        for v, c in compiled.items():
            # The first call compiles (never timed); the second is the kind of call that is timed.
            outs = [c(*args, **kwargs) for _ in range(2)]
            row["allclose"][v] = all(compare(expected, o, rtol=1e-4, atol=1e-5).ok for o in outs)
            fns[v] = (lambda c: lambda: c(*args, **kwargs))(c)
        fns.update({k: f for k, f in graph_fns.items() if f is not None})
        us, counts = measure(fns, repeats, target_s)
        row["magpy stats"] = stats_dict(magpy.stats(compiled["magpy"]))
    row["us"], row["calls_per_measurement"] = us, counts
    for v in VARIANTS[1:]:
        row[v + " vs eager"] = us[v] - us["eager"]
        row[v + " dispatch"] = us[v] - us[v + " graph"] if v + " graph" in us else None
    row["magpy minus torch.compile"] = us["magpy"] - us["torch.compile"]
    row["ratio vs eager"] = ratio(row["magpy vs eager"], row["torch.compile vs eager"])
    row["ratio dispatch"] = ratio(row["magpy dispatch"], row["torch.compile dispatch"])
    return row


def ratio(a, b):
    # Only meaningful when torch.compile's overhead is positive; a negative one makes it nonsense.
    return None if a is None or b is None or b <= 0 else a / b


def stats_dict(stats):
    names = ("monitor_runs", "mock_runs", "eager_runs", "graph_count", "records")
    out = {n: getattr(stats, n) for n in names}
    if stats.break_reasons:
        out["break_reasons"] = [str(r) for r in stats.break_reasons]
    return out


def fmt(x, spec="+.1f"):
    return "n/a" if x is None else format(x, spec)


def report(rows):
    cols = [("model", 9, "<"), ("input", 17, "<"), ("grad", 5, "<"),
            ("eager us", 10, ">"), ("tc us", 10, ">"), ("magpy us", 10, ">"),
            ("m-tc us", 9, ">"), ("tc +us", 9, ">"), ("magpy +us", 10, ">"), ("ratio", 6, ">"),
            ("tc disp", 8, ">"), ("magpy disp", 10, ">"), ("ratio", 6, ">"), ("allclose e/tc/m", 16, ">")]
    header = " ".join(format(c, f"{a}{w}") for c, w, a in cols)
    print(header)
    print("-" * len(header))
    for r in rows:
        us = r["us"]
        cells = [r["model"], r["input"], "on" if r["grad"] else "off",
                 f"{us['eager']:.1f}", f"{us['torch.compile']:.1f}", f"{us['magpy']:.1f}",
                 fmt(r["magpy minus torch.compile"]),
                 fmt(r["torch.compile vs eager"]), fmt(r["magpy vs eager"]), fmt(r["ratio vs eager"], ".2f"),
                 fmt(r["torch.compile dispatch"]), fmt(r["magpy dispatch"]), fmt(r["ratio dispatch"], ".2f"),
                 "/".join("ok" if r["allclose"][v] else "FAIL" for v in VARIANTS)]
        print(" ".join(format(c, f"{a}{w}") for c, (_, w, a) in zip(cells, cols)))
    print("\nus: per call.  m-tc: magpy minus torch.compile -- the same ops either way, so this is the"
          "\ndifference in overhead (target <= 0).  +us: compiled minus eager.  disp: compiled minus its own"
          "\ngraph called directly (guard + mock for magpy).  ratio: magpy / torch.compile (target <= 1;"
          "\nn/a when torch.compile's is not positive).  allclose: the first (compiling) and second call of"
          "\neager / torch.compile / magpy against a separate eager call.")
    for r in rows:
        s = r["magpy stats"]
        print(f"magpy.stats {r['model']} grad {'on' if r['grad'] else 'off'}: "
              + ", ".join(f"{k}={v}" for k, v in s.items()))
        if s["mock_runs"] == 0:
            print("  !!! WARNING: mock_runs == 0 -- magpy's timing measured a FALLBACK (eager/monitor), "
                  "not guard + mock !!!")
        elif s["eager_runs"]:
            print(f"  !!! WARNING: {s['eager_runs']} eager fallback runs -- part of the timing is not "
                  "the mock !!!")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50,bert",
                        help="comma-separated: " + ",".join(BUILDERS))
    parser.add_argument("--quick", action="store_true", help="3 repeats of ~0.2 s instead of 7 of ~0.4 s")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1: overhead is single-threaded Python, and one "
                             "thread is steadier on a shared machine)")
    parser.add_argument("--no-grad-only", action="store_true", help="skip the grad-enabled rows")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    add_device_argument(parser)
    opts = parser.parse_args()
    names = opts.models.split(",")
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(BUILDERS)}")
    repeats, target_s = (3, 0.2) if opts.quick else (7, 0.4)
    torch.set_num_threads(opts.threads)

    print(f"torch {torch.__version__}, magpy {magpy.__version__}, threads {torch.get_num_threads()}, "
          f"backend 'eager', median of {repeats} x ~{target_s} s per variant, "
          f"device {describe_device(opts.device)}\n"
          "mlp: 3 x Linear(64, 64) + ReLU, batch 8; resnet50 / bert: the zoo's 'test' sizes\n"
          "(ResNet-50 at width 8 on a 64x64 image; BERT with 2 layers, hidden 32, 16 tokens)\n")
    rows = []
    for name in names:
        for grad in (False,) if opts.no_grad_only else (False, True):
            rows.append(bench_model(name, grad, repeats, target_s, opts.device))
    report(rows)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"threads": torch.get_num_threads(), "repeats": repeats,
                                               "torch": torch.__version__, "rows": rows}, indent=2))
        print(f"\nwrote {opts.json}")


if __name__ == "__main__":
    main()
