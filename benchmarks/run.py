"""End-to-end benchmark: eager vs torch.compile vs magpy on the model zoo.

    python -m benchmarks.run [--suite default|transformers] [--models bert,resnet101] [--size bench|test]
                             [--variants ...] [--quick] [--threads N] [--device cuda] [--json PATH]
                             [--warm-cache] [--no-fail]

Every model of ``benchmarks.models.MODELS`` (default: all but resnet50, which stays
selectable) is built once (``torch.manual_seed(0)``; batch size 1, the builders' inputs)
and run under ``torch.no_grad()`` by each variant:

==========================  ==========================================================
variant                     what is called
==========================  ==========================================================
``eager``                   the model itself (always run: the reference)
``torch.compile-eager``     ``torch.compile(model, backend="eager")``
``magpy-eager``             ``magpy.compile(model, backend="eager")``
``torch.compile``           ``torch.compile(model, backend="inductor")``
``magpy``                   ``magpy.compile(model, backend="inductor")``
``torch.compile-ro``        ``torch.compile(model, mode="reduce-overhead")``: CUDA graphs
                            (default with ``--device cuda`` only)
==========================  ==========================================================

``--device cuda`` builds the models and inputs on the GPU; every timed call ends with
``torch.cuda.synchronize()`` (``benchmarks.device.now``).

The ``-eager`` variants run the captured fx graph as plain Python, so they isolate what
capture and dispatch cost (dynamo's guards / frame evaluation vs magpy's guard + mock).

Per variant:

* ``compile s``: wall time until the compiled graphs run: torch.compile's first call (it
  records and compiles; for ``eager`` it is just the first call); magpy's first call (it
  records and runs the graphs eagerly), a second call (which starts the compile in the
  background, ``magpy.backends.background``) and the wait for that compile (``magpy.synchronize()``).
  The JSON has the first call alone as ``first_call_s``.  Inductor variants compile in a
  fresh, empty inductor cache (``torch._inductor.utils.fresh_cache``: a new cache directory
  and cleared in-memory code caches), so neither compiler reuses the other's (or an earlier run's) kernels;
  ``--warm-cache`` uses the normal persistent cache instead (compile times then mean little).
* ``median ms``: after ``warmup`` calls, calls are timed one by one with
  ``time.perf_counter`` (gc disabled while timing) until the time budget is spent, at least
  ``min`` and at most ``max`` calls (default 5 s, 10..200 calls; ``--quick``: 1 s, 5..50).
  Variants of a model are timed one after the other, not interleaved: on a shared machine,
  expect a few percent of noise.
  magpy variants warm up for at least ``magpy.backends.autopilot.TRIAL_CALLS`` calls: the autopilot's
  trial (compiled graph vs the same graph run eagerly) is over before the timed calls.
* ``speedup``: eager median / variant median.
* ``kept``: magpy's autopilot decisions (``magpy.stats(compiled).kept``): how many graphs
  kept their compiled version (the backend's name) and how many run eagerly, the faster.
* ``graphs``: magpy: ``magpy.stats(compiled).graph_count``, and beside it ``(N/call)`` where the
  stats have ``graphs_per_call`` (the graphs one call runs); the notes say whether the calls ran
  the mock (``mock_runs > 0``) or fell back to eager (``eager_runs > 0``: the break reasons are
  printed as footnotes).  torch.compile: ``torch._dynamo.utils.counters["stats"]["unique_graphs"]``
  after ``torch._dynamo.reset()`` and ``counters.clear()`` before the variant (dynamo adds one per
  graph it hands to the backend, recompilations included); the graph-break reasons are the
  ``counters["graph_break"]`` and ``counters["unimplemented"]`` keys.
* ``correct``: every tensor of the output structure (tuples, lists, dicts, ``ModelOutput``s,
  dataclasses; the structure and types must match too) is ``allclose`` to a separate eager call
  with rtol = atol = 1e-3 (inductor reorders float math), on the first call and again on a
  later call with the same inputs (after the timed calls).  ``max abs diff`` is over both.
  A model with a ``log_snapshot()`` method (``bert_log``: the per-layer norms its hooks append to
  a Python list) also has that list compared after each of the two calls (floats within the same
  tolerances, same length), as ``log`` in the problems.

``--suite transformers`` runs the transformers corpus of GitHub issue 9 instead
(``benchmarks.models.hf_zoo``: 40 architectures with default settings, SDPA attention, at
test size only) with the variants ``eager``, ``torch.compile`` and ``magpy`` (inductor) by
default, and writes ``benchmarks/results/run_transformers.json``.  Its text inputs are cut to
batch size 1 (``hf_zoo.batch_one``: the padded row, so the masking path still runs), and
outputs are compared after ``hf_zoo.plain`` (a ``DynamicCache`` in ``past_key_values`` is
compared by its tensors).  magpy runs with ``fullgraph=False`` as in the default suite: a
model that breaks runs eagerly (graphs 0; the reason is a footnote).
``python -m benchmarks.transformers_survey`` is the quicker one-graph/correctness view.

On a machine shared with other busy processes, timings with torch's default thread count
(one OpenMP thread per core) can be 10-50x too slow: each parallel operator waits at a barrier
for a thread that the OS has descheduled (measured here: DenseNet-121 at 2 threads, 90 ms
alone, 5.7 s next to another 2-thread torch process; 100 ms at ``--threads 1``).  The script
warns when the load average is high at the start, stores the load average around each
variant in the JSON, and notes "noisy" where the median is over 1.5x the fastest call; use
``--threads 1`` on a shared machine.

A variant that raises is recorded with its error and the run goes on.  The exit status is 1
if any variant is incorrect or raised (``--no-fail``: always 0).  Results (and machine
information) are written as JSON to ``benchmarks/results/run.json`` (``--json PATH``), after
every model, so an interrupted run keeps what it measured.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/run.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.utils  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import magpy  # noqa: E402
from benchmarks.device import add_argument as add_device_argument  # noqa: E402
from benchmarks.device import describe as describe_device  # noqa: E402
from benchmarks.device import now, to_device  # noqa: E402
from benchmarks.models import MODELS, hf_zoo  # noqa: E402
from magpy.backends import autopilot  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "benchmarks" / "results" / "run.json"
DEFAULT_MODELS = [m for m in MODELS if m != "resnet50"]
TRANSFORMERS_JSON = REPO / "benchmarks" / "results" / "run_transformers.json"
TRANSFORMERS_VARIANTS = ("eager", "torch.compile", "magpy")
RTOL = ATOL = 1e-3
NOISY = 1.5   # a median this many times the fastest call gets a "noisy" note


# ---------------------------------------------------------------------------------------------
# variants


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    compiler: str        # "eager", "torch.compile" or "magpy"
    backend: str | None  # the compiler's backend
    mode: str | None = None   # torch.compile's mode ("reduce-overhead": CUDA graphs)

    def make(self, model):
        if self.compiler == "eager":
            return model
        if self.compiler == "torch.compile":
            return torch.compile(model, backend=self.backend, mode=self.mode)
        if self.compiler == "magpy":
            return magpy.compile(model, backend=self.backend)
        raise ValueError(f"unknown compiler {self.compiler!r}")


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("eager", "eager", None),
    Variant("torch.compile-eager", "torch.compile", "eager"),
    Variant("magpy-eager", "magpy", "eager"),
    Variant("torch.compile", "torch.compile", "inductor"),
    Variant("magpy", "magpy", "inductor"),
    Variant("torch.compile-ro", "torch.compile", "inductor", mode="reduce-overhead"),
)}
# torch.compile-ro (mode="reduce-overhead") replays CUDA graphs; on a CPU it is torch.compile again
CUDA_ONLY_VARIANTS = ("torch.compile-ro",)


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup: int        # untimed calls after the first one
    budget_s: float    # time budget of the timed calls
    min_repeats: int
    max_repeats: int


FULL = Timing(warmup=5, budget_s=5.0, min_repeats=10, max_repeats=200)
QUICK = Timing(warmup=2, budget_s=1.0, min_repeats=5, max_repeats=50)


# ---------------------------------------------------------------------------------------------
# comparing outputs


@dataclasses.dataclass
class Comparison:
    ok: bool = True
    max_abs_diff: float = 0.0
    tensors: int = 0
    problems: list = dataclasses.field(default_factory=list)

    def fail(self, path: str, what: str) -> None:
        self.ok = False
        self.problems.append(f"{path}: {what}")


def compare(expected, actual, rtol: float = RTOL, atol: float = ATOL) -> Comparison:
    """Compare two output structures: every tensor ``allclose`` (NaNs equal), same structure.

    Walks tensors, tuples/lists (namedtuples), mappings (``ModelOutput``), dataclasses and
    scalars.  ``max_abs_diff`` is the largest |expected - actual| over the floating tensors'
    finite elements (``inf`` if NaN/inf positions differ).
    """
    result = Comparison()
    _compare(expected, actual, "out", result, rtol, atol)
    return result


def _compare(e, a, path, res: Comparison, rtol, atol) -> None:
    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            return res.fail(path, f"expected a tensor, got {type(a).__name__}")
        res.tensors += 1
        if e.shape != a.shape:
            return res.fail(path, f"shape {tuple(a.shape)} != expected {tuple(e.shape)}")
        if e.dtype != a.dtype:
            return res.fail(path, f"dtype {a.dtype} != expected {e.dtype}")
        e, a = e.detach().cpu(), a.detach().cpu()
        if e.is_quantized:
            e, a = e.dequantize(), a.dequantize()
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(e, a):
                res.max_abs_diff = max(res.max_abs_diff, _max_abs_diff(e.double(), a.double()))
                res.fail(path, "integer/bool values differ")
            return None
        diff = _max_abs_diff(e, a)
        res.max_abs_diff = max(res.max_abs_diff, diff)
        if not torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
            res.fail(path, f"not allclose (max abs diff {diff:.3g})")
        return None
    if type(e) is not type(a):
        return res.fail(path, f"type {type(a).__name__} != expected {type(e).__name__}")
    if isinstance(e, Mapping):
        if list(e.keys()) != list(a.keys()):
            return res.fail(path, f"keys {list(a.keys())} != expected {list(e.keys())}")
        for k in e:
            _compare(e[k], a[k], f"{path}[{k!r}]", res, rtol, atol)
        return None
    if isinstance(e, (tuple, list)):
        if len(e) != len(a):
            return res.fail(path, f"length {len(a)} != expected {len(e)}")
        for i, (x, y) in enumerate(zip(e, a)):
            _compare(x, y, f"{path}[{i}]", res, rtol, atol)
        return None
    if dataclasses.is_dataclass(e) and not isinstance(e, type):
        for f in dataclasses.fields(e):
            _compare(getattr(e, f.name), getattr(a, f.name), f"{path}.{f.name}", res, rtol, atol)
        return None
    if isinstance(e, float):
        if not (math.isclose(e, a, rel_tol=rtol, abs_tol=atol) or (math.isnan(e) and math.isnan(a))):
            res.fail(path, f"{a!r} != expected {e!r}")
        return None
    try:
        equal = bool(e == a)
    except Exception as exc:  # an object without a usable ==
        return res.fail(path, f"cannot compare {type(e).__name__}: {exc!r}")
    if not equal:
        res.fail(path, f"{a!r} != expected {e!r}")
    return None


def _max_abs_diff(e: torch.Tensor, a: torch.Tensor) -> float:
    """max |e - a| over the finite elements; inf if the non-finite elements differ."""
    if e.numel() == 0:
        return 0.0
    fin = torch.isfinite(e)
    if not torch.equal(fin, torch.isfinite(a)):
        return math.inf
    nan = torch.isnan(e)
    if not torch.equal(nan, torch.isnan(a)) or not torch.equal(e[~fin & ~nan], a[~fin & ~nan]):
        return math.inf
    if not (e.is_complex() or a.is_complex()):
        e, a = e.double(), a.double()
    d = (e[fin] - a[fin]).abs()
    return float(d.max()) if d.numel() else 0.0


# ---------------------------------------------------------------------------------------------
# running one variant


def time_calls(fn, timing: Timing) -> list[float]:
    """Seconds per call: at least ``min_repeats`` calls, then more until the budget is spent."""
    times: list[float] = []
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        while len(times) < timing.max_repeats and (
                len(times) < timing.min_repeats or time.perf_counter() - start < timing.budget_s):
            t0 = now()
            fn()
            times.append(now() - t0)
    finally:
        gc.enable()
    return times


def _loadavg() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _first_line(text: str) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def graph_info(variant: Variant, compiled) -> dict:
    """Graphs and graph-break information of a compiled variant after its calls."""
    if variant.compiler == "magpy":
        s = magpy.stats(compiled)
        per_call = getattr(s, "graphs_per_call", None)  # newer magpy: the graphs one call runs
        info = {"graphs": s.graph_count,
                "magpy_stats": {"monitor_runs": s.monitor_runs, "mock_runs": s.mock_runs,
                                "eager_runs": s.eager_runs, "graph_count": s.graph_count,
                                "records": s.records},
                "break_reasons": [str(r) for r in s.break_reasons]}
        kept = getattr(s, "kept", None)   # magpy.backends.autopilot: version -> graphs that kept it
        if kept is not None:
            info["kept"] = dict(kept)
        if per_call is not None:
            info["graphs_per_call"] = per_call
            info["magpy_stats"]["graphs_per_call"] = per_call
        notes = []
        if s.eager_runs:
            notes.append(f"EAGER FALLBACK ({s.eager_runs} eager runs)")
        elif s.mock_runs:
            notes.append("mock")
        else:
            notes.append("no mock runs")
        if s.monitor_runs > 1:
            notes.append(f"{s.monitor_runs} monitor runs")
        info["notes"] = notes
        return info
    if variant.compiler == "torch.compile":
        reasons = {}
        for category in ("graph_break", "unimplemented"):
            for msg, n in counters.get(category, {}).items():
                reasons[str(msg)] = reasons.get(str(msg), 0) + n
        graphs = counters["stats"].get("unique_graphs", 0)
        notes = []
        if reasons:
            notes.append(f"{sum(reasons.values())} dynamo graph-break reasons")
        return {"graphs": graphs, "break_reasons": [f"{n}x {m}" for m, n in reasons.items()],
                "dynamo_counters": {k: dict(v) for k, v in counters.items()
                                    if k in ("stats", "frames", "recompiles", "resumes")},
                "notes": notes}
    return {"graphs": None, "break_reasons": [], "notes": []}


def _warmup(variant: Variant, timing: Timing) -> int:
    """Warm-up calls: for magpy, at least its autopilot's trial (the calls that time the
    compiled graphs against eager), so the timed calls run the version it kept."""
    if variant.compiler == "magpy" and magpy.config.autopilot:
        return max(timing.warmup, autopilot.TRIAL_CALLS)
    return timing.warmup


def _identity(out):
    return out


def run_variant(variant: Variant, model, args, kwargs, reference, timing: Timing,
                cold_cache: bool = True, normalize=None, reference_log=None) -> dict:
    """Compile, time and check one variant.  ``normalize`` maps outputs (and ``reference``)
    before they are compared (the transformers suite: ``hf_zoo.plain``).  ``reference_log``: the
    eager call's ``model.log_snapshot()``, compared with the snapshot after each checked call."""
    normalize = normalize or _identity
    reference = normalize(reference)

    def check(out) -> Comparison:
        c = compare(reference, normalize(out))
        if reference_log is not None:
            _compare(reference_log, model.log_snapshot(), "log", c, RTOL, ATOL)
        return c

    row = {"variant": variant.name, "compiler": variant.compiler, "backend": variant.backend,
           "compile_s": None, "median_ms": None, "min_ms": None, "max_ms": None, "repeats": 0,
           "speedup": None, "graphs": None, "correct": None, "max_abs_diff": None,
           "checks": {}, "break_reasons": [], "notes": [], "warnings": [], "error": None,
           "loadavg_before": _loadavg()}
    if reference_log is not None:
        row["log_checked"] = True
    cache = (torch._inductor.utils.fresh_cache() if cold_cache and variant.backend == "inductor"
             else contextlib.nullcontext())
    compiled, caught, stage = None, [], "compile"
    try:
        with cache, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch._dynamo.reset()
            counters.clear()
            torch.manual_seed(0)
            compiled = variant.make(model)
            stage = "first call"
            t0 = now()
            out = compiled(*args, **kwargs)
            row["first_call_s"] = now() - t0
            checks = {"first call": check(out)}
            del out
            if variant.compiler == "magpy":
                compiled(*args, **kwargs)   # the first reuse starts the compile in the background
                magpy.synchronize()
            row["compile_s"] = now() - t0
            stage = "warm-up / timed calls"
            for _ in range(_warmup(variant, timing)):
                compiled(*args, **kwargs)
            times = time_calls(lambda: compiled(*args, **kwargs), timing)
            stage = "later call"
            out = compiled(*args, **kwargs)
            checks["later call"] = check(out)
            del out
        row["repeats"] = len(times)
        row["median_ms"] = statistics.median(times) * 1e3
        row["min_ms"], row["max_ms"] = min(times) * 1e3, max(times) * 1e3
        if row["median_ms"] > NOISY * row["min_ms"]:
            row["notes"].append(f"noisy: median {row['median_ms'] / row['min_ms']:.1f}x min")
        row["checks"] = {k: {"ok": c.ok, "max_abs_diff": c.max_abs_diff, "tensors": c.tensors,
                             "problems": c.problems[:10]} for k, c in checks.items()}
        row["correct"] = all(c.ok for c in checks.values())
        row["max_abs_diff"] = max(c.max_abs_diff for c in checks.values())
        for k, c in checks.items():
            if not c.ok:
                row["notes"].append(f"{k} WRONG: {c.problems[0]}")
            if c.tensors == 0:
                row["notes"].append(f"{k}: no tensors compared")
    except Exception as e:
        row["error"] = f"{type(e).__name__} in {stage}: {_first_line(e) or type(e).__name__}"
        row["traceback"] = traceback.format_exc()
        row["correct"] = False
        row["notes"].append("ERROR")
    seen = []
    for w in caught:
        msg = f"{w.category.__name__}: {w.message}"
        if msg not in seen:
            seen.append(msg)
    row["warnings"] = seen[:20]
    row["loadavg_after"] = _loadavg()
    if compiled is not None:
        try:
            info = graph_info(variant, compiled)
        except Exception as e:  # stats of a broken variant: report, keep going
            info = {"graphs": None, "break_reasons": [], "notes": [f"stats failed: {e!r}"]}
        row["notes"] = info.pop("notes") + row["notes"]
        row.update(info)
    compiled = None  # drop the compiled callable (and its graphs) before the next variant
    torch._dynamo.reset()
    magpy.reset()
    gc.collect()
    return row


def build_model(suite: str, name: str, size: str, device: str = "cpu") -> tuple:
    """``(model, args, kwargs)`` on ``device``: the default zoo at ``size``, or a transformers
    model at batch 1."""
    if suite == "transformers":
        model, args, kwargs = hf_zoo.HF_ZOO[name]()
        args, kwargs = hf_zoo.batch_one(args, kwargs)
    else:
        model, args, kwargs = MODELS[name](size)
    return model.to(device), to_device(args, device), to_device(kwargs, device)


def run_model(name: str, size: str, variants: list[Variant], timing: Timing, cold_cache: bool,
              suite: str = "default", device: str = "cpu") -> list[dict]:
    base = {"model": name, "size": size, "device": device}
    normalize = hf_zoo.plain if suite == "transformers" else None
    t0 = time.perf_counter()
    try:
        torch.manual_seed(0)
        model, args, kwargs = build_model(suite, name, size, device)
    except Exception as e:
        err = f"{type(e).__name__} while building: {_first_line(e)}"
        return [dict(base, variant=v.name, error=err, correct=False, notes=["ERROR"],
                     traceback=traceback.format_exc()) for v in variants]
    base["build_s"] = time.perf_counter() - t0
    base["inputs"] = describe_inputs(args, kwargs)
    rows = []
    with torch.no_grad():
        torch.manual_seed(0)
        reference = model(*args, **kwargs)
        # a model that logs Python values (bert_log's hooks): the log is compared too
        reference_log = model.log_snapshot() if hasattr(model, "log_snapshot") else None
        for v in variants:
            print(f"  {name}: {v.name} ...", end="", flush=True)
            t1 = time.perf_counter()
            row = dict(base, **run_variant(v, model, args, kwargs, reference, timing, cold_cache, normalize,
                                           reference_log))
            row["variant_wall_s"] = time.perf_counter() - t1
            rows.append(row)
            print(f" {row['variant_wall_s']:.1f} s" + (f"  {row['error']}" if row["error"] else ""),
                  flush=True)
    eager = next((r for r in rows if r["variant"] == "eager" and r.get("median_ms")), None)
    for r in rows:
        if eager and r.get("median_ms"):
            r["speedup"] = eager["median_ms"] / r["median_ms"]
    del model, args, kwargs, reference, reference_log
    torch._dynamo.reset()
    magpy.reset()
    gc.collect()
    return rows


def describe_inputs(args, kwargs) -> str:
    parts = [str(list(a.shape)) for a in args if isinstance(a, torch.Tensor)]
    parts += [f"{k}{list(v.shape)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# reporting


def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import transformers
        tf_version = transformers.__version__
    except Exception:
        tf_version = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                                    text=True, timeout=10).stdout.strip())
    except Exception:
        commit, dirty = None, None
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": tf_version,
        "magpy": magpy.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "threads": torch.get_num_threads(),
    }


COLUMNS = ("model", "variant", "compile s", "median ms", "speedup vs eager", "graphs", "kept", "correct",
           "notes")


def table_cells(rows: list[dict]) -> tuple[list[list[str]], list[str]]:
    """The table's cells, and footnotes (break reasons, errors, warnings of magpy)."""
    cells, footnotes = [], []

    def note(text: str) -> str:
        footnotes.append(text)
        return f"[{len(footnotes)}]"

    for r in rows:
        notes = list(r.get("notes") or [])
        refs = []
        if r.get("error"):
            refs.append(note(f"{r['model']} / {r['variant']}: {r['error']}"))
        if r.get("break_reasons"):
            reasons = r["break_reasons"]
            if r.get("compiler") == "torch.compile":  # dynamo's are long: their first lines (JSON: all)
                reasons = [_first_line(b) for b in reasons]
            text = "\n      ".join(reasons)
            refs.append(note(f"{r['model']} / {r['variant']} break reasons:\n      {text}"))
        if r.get("compiler") == "magpy" and r.get("warnings"):
            text = "\n      ".join(r["warnings"])
            refs.append(note(f"{r['model']} / {r['variant']} warnings:\n      {text}"))
        if r.get("correct") is True:
            correct = f"yes ({r['max_abs_diff']:.1e})"
        elif r.get("error"):
            correct = "ERROR"
        elif r.get("correct") is False:
            diff = r.get("max_abs_diff")
            correct = "NO" + (f" ({diff:.1e})" if diff is not None else "")
        else:
            correct = "?"
        cells.append([
            r["model"], r["variant"],
            _fmt(r.get("compile_s"), ".3f"), _fmt(r.get("median_ms"), ".2f"),
            _fmt(r.get("speedup"), ".2f"), _graphs_cell(r), _kept_cell(r),
            correct, "; ".join(notes + refs)])
    return cells, footnotes


def _graphs_cell(r: dict) -> str:
    """Total graphs, and for magpy with ``graphs_per_call`` in its stats also ``(N/call)``."""
    if r.get("graphs") is None:
        return "-"
    per_call = r.get("graphs_per_call")
    if per_call is None:
        return str(r["graphs"])
    if isinstance(per_call, float):  # an average over calls
        per_call = f"{per_call:.0f}" if per_call.is_integer() else f"{per_call:.1f}"
    return f"{r['graphs']} ({per_call}/call)"


def _kept_cell(r: dict) -> str:
    """magpy's autopilot: how many graphs kept each version ("inductor 2, eager 1")."""
    kept = r.get("kept")
    return ", ".join(f"{k} {n}" for k, n in sorted(kept.items(), key=lambda kv: -kv[1])) if kept else "-"


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict]) -> None:
    cells, footnotes = table_cells(rows)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    right = {2, 3, 4, 5}

    def line(values):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    print(line(COLUMNS))
    print("-" * len(line(COLUMNS)))
    prev = None
    for row in cells:
        if prev is not None and row[0] != prev:
            print()
        prev = row[0]
        print(line(row))
    if footnotes:
        print()
        for i, f in enumerate(footnotes, 1):
            print(f"[{i}] {f}")


def markdown_table(rows: list[dict]) -> str:
    cells, _ = table_cells(rows)
    out = ["| " + " | ".join(COLUMNS) + " |",
           "|" + "|".join("---:" if i in (2, 3, 4, 5) else "---" for i in range(len(COLUMNS))) + "|"]
    for row in cells:
        row = row[:-1] + [row[-1].replace("|", "\\|")]
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def problems(rows: list[dict]) -> list[str]:
    """magpy rows that are wrong, fall back, raise, or are slower than torch.compile (same backend)."""
    out = []
    by_key = {(r["model"], r["variant"]): r for r in rows}
    for r in rows:
        where = f"{r['model']} / {r['variant']}"
        if r.get("error"):
            out.append(f"{where}: error: {r['error']}")
        elif r.get("correct") is False:
            out.append(f"{where}: INCORRECT (max abs diff {r.get('max_abs_diff')}): "
                       + "; ".join(p for c in r.get("checks", {}).values() for p in c["problems"][:3]))
        if r.get("compiler") != "magpy":
            continue
        s = r.get("magpy_stats") or {}
        if s.get("eager_runs"):
            out.append(f"{where}: falls back to eager ({s['eager_runs']} eager runs): "
                       + " | ".join(r.get("break_reasons") or ["(no reason recorded)"]))
        if s.get("monitor_runs", 0) > 1:
            out.append(f"{where}: {s['monitor_runs']} monitor runs for identical calls")
        tc = by_key.get((r["model"], r["variant"].replace("magpy", "torch.compile")))
        if tc and tc.get("median_ms") and r.get("median_ms") and r["median_ms"] > tc["median_ms"]:
            out.append(f"{where}: slower than {tc['variant']}: {r['median_ms']:.2f} ms vs "
                       f"{tc['median_ms']:.2f} ms ({r['median_ms'] / tc['median_ms'] - 1:+.1%})")
    return out


def write_json(path: Path, info: dict, opts: dict, rows: list[dict], complete: bool, wall_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"machine": info, "options": opts, "complete": complete, "wall_s": wall_s,
            "rtol": RTOL, "atol": ATOL, "rows": rows}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="default", choices=("default", "transformers"),
                        help="default: the model zoo below; transformers: benchmarks.models.hf_zoo "
                             "(test size, batch 1; variants eager,torch.compile,magpy by default)")
    parser.add_argument("--models",
                        help="comma-separated, from: " + ",".join(MODELS) + " (default: all but resnet50); "
                             "with --suite transformers from: " + ",".join(hf_zoo.HF_ZOO) + " (default: all)")
    parser.add_argument("--size", choices=("test", "bench"),
                        help="default suite: bench (default) or test; the transformers suite has test only")
    parser.add_argument("--variants",
                        help="comma-separated, from: " + ",".join(VARIANTS)
                        + " (default: all; transformers suite: " + ",".join(TRANSFORMERS_VARIANTS)
                        + "; eager is always run: it is the reference)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.warmup} warm-up calls, {QUICK.min_repeats}..{QUICK.max_repeats} timed "
                             f"calls in ~{QUICK.budget_s:g} s (default {FULL.warmup}, "
                             f"{FULL.min_repeats}..{FULL.max_repeats} in ~{FULL.budget_s:g} s)")
    parser.add_argument("--warmup", type=int, help="override the number of warm-up calls")
    parser.add_argument("--budget", type=float, help="override the timing budget per variant (s)")
    parser.add_argument("--min-repeats", type=int, help="override the minimum number of timed calls")
    parser.add_argument("--max-repeats", type=int, help="override the maximum number of timed calls")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's default)")
    add_device_argument(parser)
    parser.add_argument("--json", metavar="PATH",
                        help=f"where to write the results (default: {DEFAULT_JSON}; transformers suite: "
                             f"{TRANSFORMERS_JSON})")
    parser.add_argument("--warm-cache", action="store_true",
                        help="compile with the persistent inductor cache (default: a fresh empty one "
                             "per inductor variant, so compile times are cold and comparable)")
    parser.add_argument("--no-fail", action="store_true",
                        help="exit 0 even if a variant is incorrect or raised")
    opts = parser.parse_args(argv)
    transformers_suite = opts.suite == "transformers"
    known = hf_zoo.HF_ZOO if transformers_suite else MODELS
    if opts.models is None:
        opts.models = ",".join(hf_zoo.HF_ZOO if transformers_suite else DEFAULT_MODELS)
    if opts.variants is None:
        cuda = opts.device.startswith("cuda")
        opts.variants = ",".join(TRANSFORMERS_VARIANTS if transformers_suite else
                                 (v for v in VARIANTS if cuda or v not in CUDA_ONLY_VARIANTS))
    if opts.size is None:
        opts.size = "test" if transformers_suite else "bench"
    elif transformers_suite and opts.size != "test":
        parser.error("--suite transformers has only --size test")
    if opts.json is None:
        opts.json = str(TRANSFORMERS_JSON if transformers_suite else DEFAULT_JSON)
    opts.model_list = [m for m in opts.models.split(",") if m]
    unknown = [m for m in opts.model_list if m not in known]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(known)}")
    names = [v for v in opts.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if "eager" not in names:
        names.insert(0, "eager")
    opts.variant_list = [VARIANTS[v] for v in VARIANTS if v in names]  # canonical order
    base = QUICK if opts.quick else FULL
    opts.timing = Timing(
        warmup=base.warmup if opts.warmup is None else opts.warmup,
        budget_s=base.budget_s if opts.budget is None else opts.budget,
        min_repeats=base.min_repeats if opts.min_repeats is None else opts.min_repeats,
        max_repeats=base.max_repeats if opts.max_repeats is None else opts.max_repeats)
    if opts.timing.min_repeats < 1 or opts.timing.max_repeats < opts.timing.min_repeats:
        parser.error("need 1 <= --min-repeats <= --max-repeats")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    start = time.perf_counter()
    info = machine_info()
    saved = {"suite": opts.suite, "models": opts.model_list, "size": opts.size,
             "variants": [v.name for v in opts.variant_list],
             "quick": opts.quick, "timing": dataclasses.asdict(opts.timing), "threads": opts.threads,
             "cold_cache": not opts.warm_cache, "device": opts.device,
             "argv": sys.argv if argv is None else list(argv)}
    json_path = Path(opts.json)
    print(f"torch {info['torch']}, python {info['python']}, transformers {info['transformers']}, "
          f"magpy {info['magpy']}; {info['cpu']}, {info['cpu_count']} cores, threads {info['threads']}; "
          f"device {describe_device(opts.device)}")
    t = opts.timing
    print(f"suite {opts.suite}, size {opts.size}, batch 1, no_grad; {t.warmup} warm-up calls, median of "
          f"{t.min_repeats}..{t.max_repeats} calls in ~{t.budget_s:g} s; inductor cache "
          f"{'warm (persistent)' if opts.warm_cache else 'cold (fresh per variant)'}\n", flush=True)

    load, cores = info["loadavg"], info["cpu_affinity"] or info["cpu_count"] or 1
    if load and load[0] > 0.5 * cores and torch.get_num_threads() > 1:
        print(f"WARNING: load average {load[0]:.2f} on {cores} cores before starting: with "
              f"{torch.get_num_threads()} threads, timings can be far too slow (OpenMP barriers wait for "
              "descheduled threads); consider --threads 1\n", flush=True)
    rows: list[dict] = []
    for name in opts.model_list:
        print(f"{name} ({opts.size})", flush=True)
        rows += run_model(name, opts.size, opts.variant_list, opts.timing, cold_cache=not opts.warm_cache,
                          suite=opts.suite, device=opts.device)
        write_json(json_path, info, saved, rows, complete=False, wall_s=time.perf_counter() - start)
    wall = time.perf_counter() - start
    write_json(json_path, info, saved, rows, complete=True, wall_s=wall)

    print()
    print_table(rows)
    print("\ncompile s: wall time until the compiled graphs run (torch.compile: its first call; magpy: "
          "a first call, a second that starts the background compile, and the wait for it).  median ms: per call.  "
          "speedup: eager median / variant median.\ngraphs: magpy.stats graph_count"
          + (" (N/call: graphs_per_call)" if any(r.get("graphs_per_call") is not None for r in rows) else "")
          + ", or dynamo's counters['stats']['unique_graphs'].  correct: first and a later call allclose "
          f"to eager (rtol={RTOL:g}, atol={ATOL:g}); max abs diff in parentheses"
          + ("; log_snapshot() lists compared too" if any(r.get("log_checked") for r in rows) else "")
          + ".\n")
    print("markdown:\n")
    print(markdown_table(rows))
    found = problems(rows)
    print("\nmagpy problems:" if found else "\nmagpy problems: none")
    for p in found:
        print("  - " + p)
    print(f"\ntotal wall time {wall:.1f} s; wrote {json_path}")
    failed = [r for r in rows if r.get("correct") is not True]
    if failed and not opts.no_fail:
        print(f"FAIL: {len(failed)} variant(s) incorrect or raised: "
              + ", ".join(f"{r['model']}/{r['variant']}" for r in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
