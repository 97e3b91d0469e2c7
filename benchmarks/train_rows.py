"""The README's training rows on backend "inductor": records, runs and agreement with eager (issue 41).

    python -m benchmarks.train_rows [--rows a,b,...] [--backends eager,inductor] [--steps-scale F]
                                    [--json PATH]

The training rows of the README's table "Why magpy over torch.compile" (a BERT fine-tuning
step with a warm-up schedule, OneCycleLR, ReduceLROnPlateau, GradScaler, foreach and fused
AdamW, NAdam / Adamax / RAdam / ASGD, EMA with ``AveragedModel``, gradient accumulation) were
measured with backend "eager": the captured graphs run as plain Python.  Issue 41 asks for
them on the default backend, Inductor, with every mock run executing Inductor's code, so this
script sets ``magpy.config.background_compile = False`` (each graph is compiled before the
call that needs it returns) and ``magpy.config.autopilot = False`` (no trial that runs the
graph's eager twin instead), and runs with one thread.

Each row reuses its test's scenario builder (``tests/training``: a ``build() -> (fn, state)``
and the ``observe(state)`` the test compares), builds two twins from seed 0, compiles one with
``magpy.compile(fn, backend=...)`` and runs both for the row's steps, with the arguments and
the call seeded as ``tests.harness.compile_harness.check_compiled`` seeds them.  After every
step it compares the returned loss and ``observe(state)`` (parameters, ``.grad``, optimizer,
scheduler, scaler or averaged-model state) of the twins.

Columns:

* ``steps``: calls of each twin (the row's count times ``--steps-scale``, at least 2).
* ``records + cont. (per 100 steps)``: ``magpy.stats(compiled).records`` plus continuations
  (the stats' ``continuations`` if it has such a field, else ``monitor_runs - records``: a
  monitor run that resumed at a failed check adds no record), and in parentheses the monitor
  runs (recordings of either kind) per 100 steps.
* ``mock / eager runs``: ``mock_runs`` and ``eager_runs``.
* ``graphs per call``: ``stats.graphs_per_call`` after each mock run (one value, or the range).
* ``agreement with eager``: "bit-exact" if every compared tensor and number was equal at
  every step; else the largest relative difference over all steps and values (per tensor:
  max |compiled - eager| / max(max |eager|, tiny)), the step and value where it was (``loss``
  or a path into ``state``, the test's ``observe``: ``state[0]['0.weight'][2]`` is the
  ``.grad`` of parameter ``0.weight`` in its ``(name, tensor, .grad)``), the largest absolute
  difference, and whether every value was within rtol 1e-4 / atol 1e-5
  (``torch.allclose(compiled, eager)``, the tolerance the tests use for Inductor; rows under
  fp16/bf16 autocast: rtol 2e-2, atol 2e-3, marked "autocast").  A row that raised shows the
  exception instead.  A ``magpy.BackendFailedWarning`` (the backend could not compile a
  graph, which then runs as its eager twin) is noted: such a row's mock runs did not all
  execute Inductor's code.

Results are written as JSON to ``benchmarks/results/train_rows.json`` (``--json PATH``), with
each step's run kinds and differences.  The Inductor cache is the default persistent one: the
figures here are records and agreement, not compile times.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):  # run as `python benchmarks/train_rows.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import magpy  # noqa: E402
from benchmarks import run  # noqa: E402
from tests.training import test_accumulation, test_scaler, test_schedules  # noqa: E402
from tests.training.test_optimizers import OPTIMIZERS, _lambda_lr, every_optimizer_build  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "benchmarks" / "results" / "train_rows.json"
BACKENDS = ("eager", "inductor")
TOLERANCE = (1e-4, 1e-5)          # rtol, atol: the tests' for Inductor
AUTOCAST_TOLERANCE = (2e-2, 2e-3)  # rows under fp16/bf16 autocast
TINY = torch.finfo(torch.float32).tiny
MIN_STEPS = 2
COLUMNS = ("row", "backend", "steps", "records + cont. (per 100 steps)", "mock / eager runs",
           "graphs per call", "agreement with eager")


# ---------------------------------------------------------------------------------------------
# rows: the tests' scenarios


@dataclasses.dataclass(frozen=True)
class Row:
    """A README training row: its test's builder, step count and what is compared."""

    what: str
    build: Callable[[], Callable[[], tuple]]   # () -> the test's build() (made lazily)
    steps: int
    observe: Callable[[Any], Any]
    batch: Callable[[int], Callable] = lambda i: test_schedules._batch   # step index -> args(state)
    autocast: bool = False             # under fp16/bf16 autocast: the looser tolerance


def _rows() -> dict[str, Row]:
    sched = test_schedules
    rows = {
        "bert-finetune": Row("BERT fine-tuning, linear warm-up (10 of 100), AdamW",
                             lambda: sched._bert_build(warmup=10, total=100), 100, sched._observe,
                             batch=lambda i: sched._tokens),
        "one-cycle": Row("OneCycleLR, AdamW (momentum cycled)",
                         lambda: sched._build(sched._one_cycle), 24, sched._observe),
        "plateau": Row("ReduceLROnPlateau stepped with loss.item(), SGD",
                       lambda: sched._plateau_build(lambda loss: loss.item()), 24, sched._observe),
        # (test_scaler's scaled step has no scheduler: the README's "stepped with a scheduler"
        # is the AdamW rows')
        "grad-scaler": Row("GradScaler, fp16 autocast, AdamW",
                           lambda: test_scaler._scaled_build(torch.float16), 12, test_scaler._observe,
                           autocast=True),
    }
    for form in ("foreach", "fused"):
        rows[f"adamw-{form}"] = Row(f"AdamW {form}=True, LambdaLR",
                                    lambda form=form: sched._build(_lambda_lr, OPTIMIZERS[f"adamw-{form}"]),
                                    12, sched._observe)
    for name in ("NAdam", "Adamax", "RAdam", "ASGD"):
        for foreach in (False, True):
            key = f"{name.lower()}-{'foreach' if foreach else 'for-loop'}"
            rows[key] = Row(f"{name} foreach={foreach}, LambdaLR",
                            lambda name=name, foreach=foreach: every_optimizer_build(name, foreach), 12,
                            sched._observe)
    rows["ema"] = Row("AveragedModel (EMA) updated in the step, AdamW", test_scaler.averaged_model_build, 8,
                      test_scaler._observe)
    rows["accumulation"] = Row(
        "gradient accumulation, k=4, index passed in, SGD-momentum",
        lambda: test_accumulation._build(4, test_accumulation.OPTIMIZERS["sgd-momentum"], True), 32,
        test_accumulation._observe, batch=test_accumulation._micro_batch)
    return rows


ROWS = _rows()
# short names: `nadam` is both of its forms
GROUPS = {name: [f"{name}-for-loop", f"{name}-foreach"] for name in ("nadam", "adamax", "radam", "asgd")}


# ---------------------------------------------------------------------------------------------
# comparison


class Mismatch(Exception):
    """The twins' observed values differ in structure (a key, a length, a type, a None)."""


def _pairs(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The leaves of two nested values (dicts, lists, tuples), side by side."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            other = list(b)[:6] if isinstance(b, dict) else type(b).__name__
            raise Mismatch(f"{path or 'value'}: keys {list(a)[:6]} against {other}")
        return [p for k in a for p in _pairs(a[k], b[k], f"{path}[{k!r}]" if path else str(k))]
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            raise Mismatch(f"{path or 'value'}: {type(a).__name__} of {len(a)} against {type(b).__name__}")
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _pairs(x, y, f"{path}[{_label(i, x)}]")]
    return [(path or "value", a, b)]   # (a leaf: a tensor, a number, a string, None)


def _label(i: int, item: Any) -> str:
    # (name, tensor, .grad) items are named by their name, not their place in the list
    return repr(item[0]) if isinstance(item, tuple) and item and isinstance(item[0], str) else str(i)


def _leaf_difference(e: Any, c: Any, rtol: float, atol: float) -> tuple[float, float, bool]:
    """(largest absolute difference, relative difference, within tolerance) of one leaf."""
    if isinstance(e, (int, float)) and not isinstance(e, bool) and isinstance(c, (int, float)):
        e, c = torch.tensor(float(e)), torch.tensor(float(c))
    if not isinstance(e, torch.Tensor):
        if type(e) is not type(c) or e != c:
            raise Mismatch(f"{e!r} against {c!r}")
        return 0.0, 0.0, True
    if not isinstance(c, torch.Tensor) or e.shape != c.shape or e.dtype != c.dtype:
        raise Mismatch(f"tensor {tuple(e.shape)} {e.dtype} against {c!r:.80}")
    e64, c64 = e.detach().double(), c.detach().double()
    # (equal values, infinities included, and NaN against NaN are no difference)
    same = (e64 == c64) | (e64.isnan() & c64.isnan())
    if bool(same.all()):
        return 0.0, 0.0, True
    diff = torch.where(same, 0.0, (e64 - c64).abs())
    scale = e64.abs().nan_to_num(0.0, 0.0, 0.0).max().item() if e64.numel() else 0.0
    worst = diff.max().item()
    within = bool(torch.allclose(c64, e64, rtol=rtol, atol=atol, equal_nan=True))
    return worst, worst / max(scale, TINY), within


@dataclasses.dataclass
class Agreement:
    """How the compiled twin's values compare with eager's, over all steps so far."""

    exact: bool = True
    within: bool = True
    max_rel: float = 0.0
    max_abs: float = 0.0
    where: str | None = None           # the step and value of the largest relative difference
    first_inexact: int | None = None   # first step (1-based) with any difference
    first_outside: int | None = None   # first step outside the tolerance
    mismatch: str | None = None        # a difference in structure (first one)

    def add(self, step: int, eager: Any, compiled: Any, rtol: float, atol: float) -> dict:
        """Compare one step's values; returns that step's figures."""
        here = {"max_rel": 0.0, "max_abs": 0.0, "within": True}
        try:
            pairs = _pairs(eager, compiled)
        except Mismatch as e:
            pairs, here["mismatch"] = [], str(e)
        for path, e, c in pairs:
            try:
                worst, rel, within = _leaf_difference(e, c, rtol, atol)
            except Mismatch as m:
                here.setdefault("mismatch", f"{path}: {m}")
                continue
            here["max_abs"] = max(here["max_abs"], worst)
            here["within"] &= within
            if rel > here["max_rel"]:
                here["max_rel"], here["where"] = rel, path
        self._fold(step, here)
        return here

    def _fold(self, step: int, here: dict) -> None:
        if "mismatch" in here:
            here["within"] = False
            self.mismatch = self.mismatch or f"step {step}: {here['mismatch']}"
        if here["max_abs"] > 0 or "mismatch" in here:
            self.exact = False
            self.first_inexact = self.first_inexact or step
        if not here["within"]:
            self.within = False
            self.first_outside = self.first_outside or step
        self.max_abs = max(self.max_abs, here["max_abs"])
        if here["max_rel"] > self.max_rel:
            self.max_rel, self.where = here["max_rel"], f"step {step} {here['where']}"


# ---------------------------------------------------------------------------------------------
# running a row


RUN_KINDS = (("R", "monitor_runs"), ("m", "mock_runs"), ("e", "eager_runs"))


def _runs(compiled) -> tuple[int, ...]:
    st = magpy.stats(compiled)   # (a live object: copy its counters to compare before and after)
    return tuple(getattr(st, f) for _, f in RUN_KINDS)


def _kind(before: tuple, after: tuple) -> str:
    """What one call was: R a recording (monitor run), m a mock run, e eager, ? several or none."""
    kinds = [k for (k, _), b, a in zip(RUN_KINDS, before, after) if a > b]
    return kinds[0] if len(kinds) == 1 else "?"


def _twins(row: Row, backend: str):
    build = row.build()
    torch.manual_seed(0)
    fn_e, state_e = build()
    torch.manual_seed(0)
    fn_c, state_c = build()
    return fn_e, state_e, magpy.compile(fn_c, backend=backend), state_c


def _call(fn: Callable, args: tuple, seed: int) -> Any:
    torch.manual_seed(seed)   # (check_compiled's call seed: randomness in the step draws alike)
    return fn(*args)


def run_row(name: str, row: Row, backend: str, steps: int) -> dict:
    """Both twins for ``steps`` steps; the row's figures (or the exception it raised)."""
    rtol, atol = AUTOCAST_TOLERANCE if row.autocast and backend != "eager" else TOLERANCE
    result = {"row": name, "what": row.what, "backend": backend, "steps": steps, "rtol": rtol, "atol": atol,
              "autocast": row.autocast}
    agreement, per_step, kinds, graphs = Agreement(), [], [], set()
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=magpy.GraphBreakWarning)
        step, compiled, twin = 0, None, "build"
        try:
            fn_e, state_e, compiled, state_c = _twins(row, backend)
            for step in range(1, steps + 1):
                i = step - 1
                args_fn = row.batch(i)
                torch.manual_seed(i)   # (the step's seed, as the tests' Step(..., seed=i))
                args_e = tuple(args_fn(state_e))
                torch.manual_seed(i)
                args_c = tuple(args_fn(state_c))
                twin = "eager twin"
                out_e = _call(fn_e, args_e, 2000 + i)
                before, twin = _runs(compiled), "compiled twin"
                out_c = _call(compiled, args_c, 2000 + i)
                kinds.append(_kind(before, _runs(compiled)))
                if kinds[-1] == "m":
                    graphs.add(magpy.stats(compiled).graphs_per_call)
                per_step.append(agreement.add(step, {"loss": out_e, "state": row.observe(state_e)},
                                              {"loss": out_c, "state": row.observe(state_c)}, rtol, atol))
        except Exception as e:  # noqa: BLE001 - a failing row is a result, not the end of the run
            result["error"] = f"{type(e).__name__}: {_short(str(e))}"
            result["error_step"], result["error_in"] = step, twin
            result["traceback"] = traceback.format_exc(limit=-8)
    if compiled is not None:
        result.update(_stats(compiled))
    result.update(agreement=dataclasses.asdict(agreement), run_kinds="".join(kinds), per_step=per_step,
                  graphs_per_call=sorted(graphs), wall_s=round(time.perf_counter() - start, 2),
                  warnings=_warnings(caught))
    return result


def _stats(compiled) -> dict:
    st = magpy.stats(compiled)
    continuations = getattr(st, "continuations", None)
    return {"records": st.records, "monitor_runs": st.monitor_runs, "mock_runs": st.mock_runs,
            "eager_runs": st.eager_runs, "graph_count": st.graph_count,
            "continuations": continuations if continuations is not None else st.monitor_runs - st.records,
            "continuations_field": continuations is not None, "breaks": dict(st.breaks),
            "recompiles": list(st.recompiles), "kept": dict(st.kept)}


def _warnings(caught: list) -> dict:
    """Counts by category, and the distinct messages (3 at most) of magpy's: a backend failure
    above all, after which a graph runs as its eager twin."""
    out: dict[str, dict] = {}
    for w in caught:
        entry = out.setdefault(w.category.__name__, {"count": 0, "messages": []})
        entry["count"] += 1
        text = _short(str(w.message), 600)
        if issubclass(w.category, magpy.MagpyWarning) and len(entry["messages"]) < 3 \
                and text not in entry["messages"]:
            entry["messages"].append(text)
    return out


def runs(kinds: str) -> str:
    """Run kinds, run-length coded: "RRmmm" -> "R2 m3"."""
    groups = re.findall(r"((.)\2*)", kinds)
    return " ".join(f"{g[1]}{len(g[0])}" for g in groups) or "-"


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# reporting


def _per_100(r: dict) -> str:
    return f"{100 * r['monitor_runs'] / r['steps']:.1f}"


def agreement_cell(r: dict) -> str:
    a = r["agreement"]
    if "error" in r:
        return f"raised at step {r['error_step']} ({r['error_in']}): {_short(r['error'], 120)}"
    if a["exact"]:
        text = "bit-exact"
    else:
        text = f"max rel {a['max_rel']:.1e} ({a['where']}), max abs {a['max_abs']:.1e}, "
        if a["mismatch"]:
            text += f"structure differs: {_short(a['mismatch'], 80)}"
        elif a["within"]:
            text += f"within rtol {r['rtol']:g} / atol {r['atol']:g}"
        else:
            text += f"outside rtol {r['rtol']:g} / atol {r['atol']:g} from step {a['first_outside']}"
        if r["autocast"]:
            text += " (autocast)"
    failed = r["warnings"].get("BackendFailedWarning")
    if failed:
        # (the exception's type and words, from "failed to compile a graph (RuntimeError: ...)")
        why = "; ".join(_short(m.partition("a graph (")[2] or m, 70) for m in failed["messages"])
        text += f"; but {r['backend']} failed {failed['count']}x, eager twins ran: {why}"
    return text


def row_cells(r: dict) -> list[str]:
    cells = [r["row"], r["backend"], str(r["steps"])]
    if "records" not in r:
        return cells + ["-", "-", "-", agreement_cell(r)]
    graphs = r["graphs_per_call"]
    graphs_cell = ("-" if not graphs else str(graphs[0]) if len(graphs) == 1 else f"{graphs[0]}-{graphs[-1]}")
    return cells + [f"{r['records']} + {r['continuations']} ({_per_100(r)})",
                    f"{r['mock_runs']} / {r['eager_runs']}", graphs_cell, agreement_cell(r)]


def markdown_table(results: list[dict]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row_cells(r)) + " |" for r in results]
    return "\n".join(out)


def write_json(path: Path, info: dict, opts: argparse.Namespace, results: list[dict], wall_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"machine": info, "options": vars(opts), "wall_s": round(wall_s, 1),
            "config": {"background_compile": magpy.config.background_compile,
                       "autopilot": magpy.config.autopilot},
            "results": results}
    path.write_text(json.dumps(data, indent=2, default=str))


# ---------------------------------------------------------------------------------------------
# main


def _row_names(text: str, parser: argparse.ArgumentParser) -> list[str]:
    names = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        if name not in ROWS and name not in GROUPS:
            parser.error(f"unknown row {name!r}; choose from {', '.join([*ROWS, *GROUPS])}")
        names += GROUPS.get(name, [name])
    return list(dict.fromkeys(names))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(ROWS),
                        help="comma-separated, from: " + ",".join(ROWS) + " (nadam, adamax, radam, asgd: "
                             "both forms; default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated (default eager,inductor)")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help=f"multiplies every row's step count (at least {MIN_STEPS} steps)")
    parser.add_argument("--json", metavar="PATH", default=str(DEFAULT_JSON),
                        help=f"where to write the results (default: {DEFAULT_JSON})")
    opts = parser.parse_args(argv)
    opts.row_list = _row_names(opts.rows, parser)
    opts.backend_list = [b.strip() for b in opts.backends.split(",") if b.strip()]
    if opts.steps_scale <= 0 or not opts.backend_list:
        parser.error("--steps-scale must be positive and --backends not empty")
    return opts


def setup() -> None:
    # Every mock run executes the backend's compiled code: no background compile (whose calls
    # run the graph's eager twin until it is in place), no autopilot trial (which may keep eager).
    magpy.config.background_compile = False
    magpy.config.autopilot = False
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=magpy.GraphBreakWarning)


def main(argv=None) -> int:
    opts = parse_args(argv)
    setup()
    info = run.machine_info()
    print(f"torch {info['torch']}, python {info['python']}, transformers {info['transformers']}, magpy "
          f"{info['magpy']}; {info['cpu']}, {info['cpu_count']} cores, threads {info['threads']}; "
          f"background_compile off, autopilot off\n", flush=True)
    start, results = time.perf_counter(), []
    for name in opts.row_list:
        row = ROWS[name]
        steps = max(MIN_STEPS, round(row.steps * opts.steps_scale))
        for backend in opts.backend_list:
            magpy.reset()   # (each row's records are its own)
            r = run_row(name, row, backend, steps)
            results.append(r)
            print(f"{name} / {backend}: {r['wall_s']:.1f} s, {runs(r['run_kinds'])}: "
                  f"{agreement_cell(r)}", flush=True)
    wall = time.perf_counter() - start
    saved = argparse.Namespace(**{k: v for k, v in vars(opts).items() if not k.endswith("_list")})
    write_json(Path(opts.json), info, saved, results, wall)
    print("\n" + markdown_table(results))
    print(f"\nruns per step: R recording, m mock, e eager.  Total wall time {wall:.1f} s; wrote {opts.json}")
    failed = [r for r in results if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
