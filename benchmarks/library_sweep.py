"""What the diffusers and torchvision sweeps share: one model's checks, its verdict, timing, tables.

``benchmarks.diffusers_sweep`` and ``benchmarks.torchvision_sweep`` each list :class:`Case` s
(a builder of a small model with random weights, its inputs, and inputs of a new shape); this
module runs them the same way, so the two libraries' tables read alike and alike the
transformers sweep's (``benchmarks.transformers_sweep``, whose verdict names and time limit
it reuses).  Why each check:

* ``fullgraph``: ``magpy.compile(model, backend="eager", fullgraph=True)`` called once: one
  graph, or the exception that says where the graph would break.  Beside it the same model
  through ``torch.compile(model, fullgraph=True, backend=<counter>)``: the counting backend
  (:class:`GraphCounter`) records how many graphs dynamo handed it and runs them as they are
  (``gm.forward``); when ``fullgraph=True`` raises, the count without it.
* ``default``: ``magpy.compile(model, backend="eager")`` called 3 times on identical inputs,
  then once on inputs of a new shape (``new_inputs``: batch 2 instead of 1).  magpy's invariant
  is that an identical call never records again: more than one monitor run over the 3 calls is
  a ``GUARD_MISS``.  Backend "eager" runs the very operations eager runs, so every call's
  output must be bit-exact (``torch.equal`` on every tensor of the output structure).

Everything runs in eval mode under ``torch.no_grad()`` with ``magpy.config.background_compile``
off (graphs compile while recording, so later calls run them, deterministically).  Verdicts,
worst first: ``CRASH`` (magpy raised where eager did not), ``WRONG`` (a result differs from
eager's; ``NONDET`` instead when eager is not repeatable), ``TIMEOUT``, ``FALLBACK`` (magpy's
capture failed and it ran the call eagerly), ``BREAK`` (graph breaks, eager runs, or
``fullgraph=True`` raised), ``GUARD_MISS``, ``ONE_GRAPH``; ``SKIP`` when the model cannot be
built or run eagerly at the sweep's sizes (a limit of the sweep, not a magpy finding).

:func:`time_case` is the timing column: eager, ``torch.compile`` (default: Inductor) and
``magpy.compile`` (default: Inductor) on the same model and inputs in one process, each called
until warm, then timed in interleaved rounds; the median ms per call.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import magpy  # noqa: E402
from benchmarks.torchvision_ops import define_torchvision_schemas  # noqa: E402
from benchmarks.transformers_survey import _first_line, _short_path  # noqa: E402
from benchmarks.transformers_sweep import SweepTimeout, time_limit  # noqa: E402

VERDICTS = ("CRASH", "WRONG", "TIMEOUT", "FALLBACK", "BREAK", "GUARD_MISS", "NONDET", "ONE_GRAPH", "SKIP")
EAGER_LIMIT_S = 10.0  # an eager call slower than this is skipped as "slow" (the sweep calls it ~12 times)

Inputs = tuple[tuple, dict]


# ---------------------------------------------------------------------------------------------
# torchvision without its C++ operators


def import_torchvision():
    """``torchvision``, importable against a torch it was not built for (its operators'
    schemas defined first where its C extension does not load: :mod:`benchmarks.torchvision_ops`;
    their kernels stay missing, so detection models cannot run).  Raises ``ImportError`` when
    torchvision is not installed or does not import."""
    if importlib.util.find_spec("torchvision") is None:
        raise ImportError("torchvision is not installed (pip install --no-deps torchvision==0.28.0)")
    define_torchvision_schemas()
    try:
        import torchvision
    except RuntimeError as exc:
        raise ImportError(f"torchvision does not import: {_first_line(exc)}") from exc
    return torchvision


def torchvision_importable() -> bool:
    try:
        import_torchvision()
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------------------------------------
# cases and results


@dataclasses.dataclass
class Case:
    """One model of a library: how to build it small, and what to call it with."""

    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], Inputs]  # the 3 identical calls
    new_inputs: Callable[[], Inputs] | None  # the call with a new shape (batch 2)
    family: str = ""
    skip: str | None = None  # a reason not to run it at all (left out by design)


class Skip(Exception):
    """The sweep cannot run this model (not a magpy finding)."""

    def __init__(self, stage: str, reason: str):
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason = stage, reason


@dataclasses.dataclass
class Result:
    name: str
    family: str = ""
    verdict: str = ""
    reason: str = ""
    skip_stage: str | None = None
    params: int | None = None
    eager_ms: float | None = None
    magpy_full_graphs: int | None = None  # fullgraph=True: graphs, None when it raised
    magpy_full_error: str | None = None
    tc_full_graphs: int | None = None  # torch.compile(fullgraph=True): graphs, None when it raised
    tc_graphs: int | None = None  # torch.compile without fullgraph, when fullgraph raised
    tc_error: str | None = None
    monitor_runs_3: int | None = None  # monitor runs over the 3 identical calls
    records_3: int | None = None
    records_4: int | None = None  # after the call with a new shape
    graphs_per_call: int | None = None  # on the last identical call
    eager_runs: int | None = None
    breaks: list = dataclasses.field(default_factory=list)
    recompiles: list = dataclasses.field(default_factory=list)
    equal: list = dataclasses.field(default_factory=list)  # per call: first, repeated x2, new shape
    deterministic: bool = True
    warnings: list = dataclasses.field(default_factory=list)
    error: str | None = None
    traceback: str | None = None
    wall_s: float = 0.0


# ---------------------------------------------------------------------------------------------
# outputs


def tensors(out) -> list[torch.Tensor]:
    """Every tensor of an output structure, in order (tuples, lists, dicts, diffusers'
    ``BaseOutput``, dataclasses, distribution objects with tensor attributes)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # (BaseOutput is an OrderedDict)
        return [t for v in out.values() for t in tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in tensors(v)]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return [t for f in dataclasses.fields(out) for t in tensors(getattr(out, f.name))]
    if hasattr(out, "__dict__") and not isinstance(out, torch.nn.Module):
        return [
            t
            for v in vars(out).values()
            if isinstance(v, (torch.Tensor, tuple, list, dict))
            for t in tensors(v)
        ]
    return []


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Bit-exact: the same number of tensors, each ``torch.equal`` (NaNs in the same places)."""
    if len(a) != len(b) or not a:
        return False
    return all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and (torch.equal(x, y) or torch.equal(torch.nan_to_num(x, 7.0), torch.nan_to_num(y, 7.0)))
        for x, y in zip(a, b)
    )


def call(fn, inputs: Inputs):
    args, kwargs = inputs
    return fn(*args, **kwargs)


def describe(exc: BaseException) -> str:
    """One line: the exception's type and first line, and the innermost frame."""
    if isinstance(exc, magpy.GraphBreakError):
        brk = exc.graph_break
        src = f": `{brk.source}`" if brk.source else ""
        return f"graph break: {brk.reason} at {_short_path(brk.filename)}:{brk.lineno}{src}"
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" [{_short_path(frame.filename)}:{frame.lineno}]" if frame else ""
    return f"{type(exc).__name__}: {_first_line(exc)[:300] or '(no message)'}{where}"


class GraphCounter:
    """A ``torch.compile`` backend that counts the graphs it is given and runs them as they are."""

    def __init__(self):
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        self.ops += sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)
        return gm.forward


# ---------------------------------------------------------------------------------------------
# one model


def _build(case: Case, res: Result):
    try:
        torch.manual_seed(0)
        model = case.build().eval()
    except SweepTimeout:
        raise
    except Exception as exc:
        raise Skip("build", describe(exc)) from exc
    res.params = sum(p.numel() for p in model.parameters())
    return model


def _eager(model, case: Case, res: Result):
    """Eager outputs on the inputs (twice: is it repeatable?) and on the new-shape inputs."""
    inputs = case.inputs()
    new = case.new_inputs() if case.new_inputs else None
    try:
        t0 = time.perf_counter()
        ref = tensors(call(model, inputs))
        res.eager_ms = 1000 * (time.perf_counter() - t0)
        if res.eager_ms > 1000 * EAGER_LIMIT_S:
            raise Skip("slow", f"eager call {res.eager_ms / 1000:.1f} s > {EAGER_LIMIT_S} s")
        res.deterministic = same(ref, tensors(call(model, inputs)))
        ref_new = tensors(call(model, new)) if new else None
    except (Skip, SweepTimeout):
        raise
    except Exception as exc:
        raise Skip("eager", describe(exc)) from exc
    if not ref:
        raise Skip("eager", f"no tensor in the output ({type(ref).__name__})")
    return inputs, new, ref, ref_new


def _fullgraph(model, inputs, ref, res: Result) -> None:
    try:
        compiled = magpy.compile(model, backend="eager", fullgraph=True)
        out = tensors(call(compiled, inputs))
        res.magpy_full_graphs = magpy.stats(compiled).graph_count
        if not same(out, ref) and res.deterministic:
            res.magpy_full_error = "WRONG: fullgraph output differs from eager"
    except SweepTimeout:
        raise
    except Exception as exc:
        res.magpy_full_error = describe(exc)
    finally:
        magpy.reset()


def _torch_compile(model, inputs, res: Result) -> None:
    import torch._dynamo

    counter = GraphCounter()
    torch._dynamo.reset()
    try:
        call(torch.compile(model, fullgraph=True, backend=counter), inputs)
        res.tc_full_graphs = counter.graphs
    except SweepTimeout:
        raise
    except Exception as exc:
        res.tc_error = describe(exc)
        counter = GraphCounter()
        torch._dynamo.reset()
        try:
            call(torch.compile(model, backend=counter), inputs)
            res.tc_graphs = counter.graphs
        except SweepTimeout:
            raise
        except Exception as exc2:
            res.tc_error += f" | without fullgraph: {describe(exc2)}"
    finally:
        torch._dynamo.reset()


def _default(model, inputs, new, ref, ref_new, res: Result) -> None:
    compiled = magpy.compile(model, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _ in range(3):
                res.equal.append(same(tensors(call(compiled, inputs)), ref))
            s = magpy.stats(compiled)
            res.monitor_runs_3, res.records_3 = s.monitor_runs, s.records
            res.graphs_per_call, res.eager_runs = s.graphs_per_call, s.eager_runs
            if new is not None:
                res.equal.append(same(tensors(call(compiled, new)), ref_new))
                res.records_4 = magpy.stats(compiled).records
        except SweepTimeout:
            raise
        except Exception as exc:
            res.error = describe(exc)
            res.traceback = traceback.format_exc()
    s = magpy.stats(compiled)
    res.breaks = list(dict.fromkeys(_first_line(b) for b in s.break_reasons))
    res.recompiles = [_first_line(r) for r in s.recompiles][:5]
    res.warnings = list(dict.fromkeys(f"{w.category.__name__}: {_first_line(w.message)}" for w in caught))


def verdict(res: Result) -> tuple[str, str]:
    """The worst finding of a checked model, and its reason in one line."""
    if res.error:
        return ("TIMEOUT" if res.error.startswith("SweepTimeout") else "CRASH"), res.error
    calls = ("first", "repeated", "repeated", "new shape")
    wrong = [c for c, ok in zip(calls, res.equal) if not ok]
    if wrong and res.deterministic:
        return "WRONG", f"the {wrong[0]} call differs from eager (torch.equal)"
    capture = [
        w for w in res.warnings if "magpy" in w.lower() and ("capture" in w.lower() or "failed" in w.lower())
    ]
    if any("capture failed" in b or "magpy failed" in b for b in res.breaks) or (capture and res.eager_runs):
        return "FALLBACK", capture[0] if capture else res.breaks[0]
    if res.eager_runs or res.breaks or (res.graphs_per_call or 0) > 1:
        text = (
            res.breaks[0]
            if res.breaks
            else f"{res.graphs_per_call} graphs per call, {res.eager_runs} eager runs"
        )
        more = f" (+{len(res.breaks) - 1} more)" if len(res.breaks) > 1 else ""
        return "BREAK", text + more
    if res.magpy_full_error:
        return "BREAK", f"fullgraph=True: {res.magpy_full_error}"
    if (res.monitor_runs_3 or 0) > 1:
        why = f": {res.recompiles[0]}" if res.recompiles else ""
        return "GUARD_MISS", f"{res.monitor_runs_3} monitor runs for 3 identical calls{why}"
    if wrong:
        return "NONDET", "eager is not repeatable on these inputs: results not compared"
    return "ONE_GRAPH", ""


def run_case(case: Case, timeout: float = 180.0, torch_compile: bool = True) -> Result:
    """Every check of one model; never raises (a failure of the sweep itself is a SKIP)."""
    res = Result(case.name, case.family)
    t0 = time.perf_counter()
    try:
        if case.skip:
            raise Skip("left out", case.skip)
        with warnings.catch_warnings(), time_limit(timeout), torch.no_grad():
            warnings.simplefilter("ignore")
            model = _build(case, res)
            inputs, new, ref, ref_new = _eager(model, case, res)
            _fullgraph(model, inputs, ref, res)
            if torch_compile:
                _torch_compile(model, inputs, res)
            _default(model, inputs, new, ref, ref_new, res)
        res.verdict, res.reason = verdict(res)
    except Skip as exc:
        res.verdict, res.skip_stage, res.reason = "SKIP", exc.stage, exc.reason
    except SweepTimeout as exc:
        res.verdict, res.reason = "TIMEOUT", f"over {timeout:.0f} s ({exc})"
    except Exception as exc:  # the sweep's own failure: report it, go on
        res.verdict, res.skip_stage, res.reason = "SKIP", "sweep", describe(exc)
        res.traceback = traceback.format_exc()
    finally:
        magpy.reset()
        gc.collect()
    res.wall_s = time.perf_counter() - t0
    return res


# ---------------------------------------------------------------------------------------------
# timing


@dataclasses.dataclass
class Timing:
    name: str
    eager_ms: float | None = None
    torch_compile_ms: float | None = None
    magpy_ms: float | None = None
    tc_compile_s: float | None = None
    magpy_compile_s: float | None = None
    magpy_records: int | None = None
    magpy_kept: str | None = None   # what the autopilot kept per graph: "inductor", "eager"
    error: str | None = None

    @property
    def magpy_vs_eager(self) -> float | None:
        return self.eager_ms / self.magpy_ms if self.eager_ms and self.magpy_ms else None


def time_case(case: Case, rounds: int = 7, calls: int = 5) -> Timing:
    """Median ms per call of eager, ``torch.compile`` and ``magpy.compile`` (both Inductor)."""
    import torch._dynamo

    t = Timing(case.name)
    background = magpy.config.background_compile
    magpy.config.background_compile = False
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            model = case.build().eval()
            inputs = case.inputs()
            torch._dynamo.reset()
            variants = {"eager": model}
            t0 = time.perf_counter()
            variants["torch.compile"] = tc = torch.compile(model)
            for _ in range(3):
                call(tc, inputs)
            t.tc_compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            variants["magpy"] = mc = magpy.compile(model)
            for _ in range(3):
                call(mc, inputs)
            t.magpy_compile_s = time.perf_counter() - t0
            t.magpy_records = magpy.stats(mc).records
            for _ in range(magpy.backends.autopilot.TRIAL_CALLS):   # (untimed: a paired trial call runs
                call(mc, inputs)                                     # both versions)
            samples: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(rounds):  # interleaved: the shared machine's load hits every variant alike
                for key, fn in variants.items():
                    call(fn, inputs)
                    for _ in range(calls):
                        s = time.perf_counter()
                        call(fn, inputs)
                        samples[key].append(1000 * (time.perf_counter() - s))
            t.eager_ms, t.torch_compile_ms, t.magpy_ms = (statistics.median(samples[k]) for k in variants)
            t.magpy_kept = ", ".join(f"{name} {n}" if n > 1 else name
                                     for name, n in sorted(magpy.stats(mc).kept.items())) or "-"
    except Exception as exc:
        t.error = describe(exc)
    finally:
        magpy.config.background_compile = background
        magpy.reset()
        torch._dynamo.reset()
        gc.collect()
    return t


def timing_table(rows: list[Timing]) -> str:
    header = [
        "model",
        "eager ms",
        "torch.compile ms",
        "magpy ms",
        "magpy/eager",
        "magpy kept",
        "tc compile s",
        "magpy compile s",
        "note",
    ]
    body = []

    def f(v):
        return f"{v:.2f}" if v is not None else "-"

    for r in rows:
        note = r.error or (
            "SLOWER THAN EAGER" if r.magpy_ms and r.eager_ms and r.magpy_ms > r.eager_ms else ""
        )
        body.append(
            [
                r.name,
                f(r.eager_ms),
                f(r.torch_compile_ms),
                f(r.magpy_ms),
                f"{r.magpy_vs_eager:.2f}x" if r.magpy_vs_eager else "-",
                r.magpy_kept or "-",
                f(r.tc_compile_s),
                f(r.magpy_compile_s),
                note,
            ]
        )
    return _grid(header, body)


# ---------------------------------------------------------------------------------------------
# report


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), "-" * len(line(header))] + [line(r) for r in rows])


def _n(v) -> str:
    return "-" if v is None else str(v)


def tc_column(r: Result) -> str:
    """torch.compile's graphs: ``1`` (fullgraph), ``N*`` (fullgraph raised; N without it), ``err``."""
    if r.tc_full_graphs is not None:
        return str(r.tc_full_graphs)
    if r.tc_graphs is not None:
        return f"{r.tc_graphs}*"
    return "err" if r.tc_error else "-"


def magpy_full_column(r: Result) -> str:
    if r.magpy_full_graphs is not None and not r.magpy_full_error:
        return str(r.magpy_full_graphs)
    return "err" if r.magpy_full_error else "-"


def table(results: list[Result], width: int = 110) -> str:
    header = [
        "model",
        "verdict",
        "params",
        "eager ms",
        "magpy full",
        "tc full",
        "rec 3 calls",
        "rec +shape",
        "equal",
        "wall s",
        "reason",
    ]
    rows = []
    for r in results:
        verdict_text = r.verdict if r.verdict != "SKIP" else f"SKIP({r.skip_stage})"
        reason = r.reason if len(r.reason) <= width else r.reason[: width - 3] + "..."
        equal = "".join("=" if ok else "x" for ok in r.equal) or "-"
        rows.append(
            [
                r.name,
                verdict_text,
                f"{r.params / 1e6:.2f}M" if r.params else "-",
                f"{r.eager_ms:.0f}" if r.eager_ms is not None else "-",
                magpy_full_column(r),
                tc_column(r),
                _n(r.monitor_runs_3),
                _n(r.records_4),
                equal,
                f"{r.wall_s:.1f}",
                reason,
            ]
        )
    return _grid(header, rows)


def summary(results: list[Result]) -> str:
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    ran = [r for r in results if r.verdict != "SKIP"]
    lines = [
        f"{len(results)} models: {len(ran)} built, ran eagerly and were compiled; {counts['SKIP']} skipped",
        "verdicts: " + ", ".join(f"{v} {n}" for v, n in counts.items() if n),
    ]
    magpy_one = sum(r.magpy_full_graphs == 1 and not r.magpy_full_error for r in ran)
    tc_one = sum(r.tc_full_graphs == 1 for r in ran)
    lines.append(
        f"fullgraph=True, one graph: magpy {magpy_one} of {len(ran)}, torch.compile {tc_one} of {len(ran)}"
    )
    for v in VERDICTS:
        if v in ("ONE_GRAPH",) or not counts[v]:
            continue
        group: dict[str, list[str]] = {}
        for r in results:
            if r.verdict == v:
                key = r.reason[:160] if v != "SKIP" else f"{r.skip_stage}: {r.reason[:140]}"
                group.setdefault(key, []).append(r.name)
        lines.append(f"\n{v} ({counts[v]}), by reason:")
        for reason, names in sorted(group.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(names):3d}x {reason}\n        {', '.join(names)}")
    tc_fail = [
        f"{r.name} ({tc_column(r)}: {(r.tc_error or '')[:100]})" for r in ran
        if r.tc_full_graphs is None and r.tc_error   # (no error: --no-torch-compile)
    ]
    if tc_fail:
        lines.append(f"\ntorch.compile(fullgraph=True) raised on {len(tc_fail)}:")
        lines.extend(f"  {t}" for t in tc_fail)
    ok = [r.name for r in results if r.verdict == "ONE_GRAPH"]
    if ok:
        lines.append(f"\nONE_GRAPH ({len(ok)}): {', '.join(ok)}")
    return "\n".join(lines)


def write_json(path: str | None, rows: list) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1, default=str))


def sweep(
    cases: list[Case], timeout: float, torch_compile: bool = True, json_path: str | None = None, log=print
) -> list[Result]:
    """Run every case in turn, one line per model as it finishes."""
    results = []
    for i, case in enumerate(cases):
        r = run_case(case, timeout, torch_compile)
        results.append(r)
        v = r.verdict if r.verdict != "SKIP" else f"SKIP({r.skip_stage})"
        log(
            f"  [{i + 1}/{len(cases)}] {case.name:34s} {v:18s} {r.wall_s:6.1f} s  "
            f"magpy full {magpy_full_column(r):3s} tc {tc_column(r):4s} {r.reason[:110]}"
        )
        write_json(json_path, results)
    return results


def select(cases: list[Case], names: str | None, limit: int | None) -> list[Case]:
    if names:
        wanted = [n for n in names.split(",") if n]
        by_name = {c.name: c for c in cases}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise SystemExit(f"unknown models: {', '.join(missing)} (--list shows them)")
        cases = [by_name[n] for n in wanted]
    return cases[:limit] if limit else cases


def arguments(description: str, what: str) -> argparse.ArgumentParser:
    """The options every library sweep takes (``what``: how its ``--models`` names are called)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help=f"comma-separated {what} (default: all)")
    p.add_argument("--limit", type=int, help="only the first N models")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per model (default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (after every model)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip the torch.compile graph count")
    p.add_argument("--timing", action="store_true", help="only the Inductor timing of TIMED (or --models)")
    p.add_argument("--list", action="store_true", help="print the model names and exit")
    return p


def begin(opts: argparse.Namespace, library) -> float:
    """A sweep's run begins: one thread, compiles in the foreground, the versions and backends
    printed (``library``: the module swept); its start time."""
    torch.set_num_threads(1)
    magpy.config.background_compile = False
    backends = "Inductor (magpy's and torch.compile's default)" if opts.timing else "magpy backend 'eager'"
    print(f"torch {torch.__version__}, {library.__name__} {library.__version__}, one thread, {backends}",
          flush=True)
    return time.perf_counter()


def end(start: float) -> None:
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")


def run(opts: argparse.Namespace, all_cases: list[Case], timed: tuple) -> list[Result] | None:
    """``--timing``: the timing table of ``timed`` (or ``--models``), printed (None); else the
    sweep of the chosen cases, its table and summary printed (its results)."""
    if opts.timing:
        rows = []
        for c in select(all_cases, opts.models or ",".join(timed), opts.limit):
            rows.append(time_case(c))
            print(f"  {c.name}: {rows[-1]}", flush=True)
        print("\n" + timing_table(rows))
        return None
    chosen = select(all_cases, opts.models, opts.limit)
    results = sweep(chosen, opts.timeout, not opts.no_torch_compile, opts.json)
    print("\n" + table(results))
    print("\n" + summary(results))
    return results
