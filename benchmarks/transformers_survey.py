"""Which transformers models does magpy compile to one graph, and why not? (GitHub issue 9)

    python -m benchmarks.transformers_survey [--models gpt2,t5] [--backend eager] [--modes no_grad,grad]
                                             [--torch-compile] [--markdown] [--json PATH]

For every model of ``benchmarks.models.hf_zoo`` (default settings, test size) and each grad mode
(``torch.no_grad()`` and grad enabled; a fresh model and a fresh ``magpy.compile`` per mode),
``magpy.compile(model, backend=..., fullgraph=True)`` is called three times: on the example
inputs (first call: the monitor run), on the same inputs again (a guard hit: the mock), and on
fresh inputs of the same shapes and dtypes (``hf_zoo.fresh_inputs``: ids re-drawn in range,
floats re-drawn).  Each output is compared with eager's for the same inputs: every tensor of
the output structure (``ModelOutput``, tuples, dicts, dataclasses, and ``Cache`` objects via
``hf_zoo.plain``) allclose with atol 1e-5, rtol 1e-4.  As in the tests,
``magpy.config.verify_fast_guard`` is on (``--no-verify-fast-guard``: off), so a fast guard that
disagrees with the full guard raises ``FastGuardMismatch``.

Columns: ``one graph`` (``magpy.stats``: monitor_runs 1, mock_runs 2, eager_runs 0,
graph_count 1), ``correct`` (all three calls match eager), ``stats`` (monitor/mock/eager/graphs),
``capture s`` (wall time of the first call), optionally ``torch.compile`` (the same three calls
through ``torch.compile(model, fullgraph=True, backend="eager")``) and ``reason``: the
``GraphBreakError``'s reason and the transformers line that did it, the first line of any
other exception, magpy's warning when a capture failed, or what the statistics or the
comparison got wrong.  The full reasons follow the table, then a summary grouping the models
by reason.  A model that fails in any way is reported and the survey goes on; the exit status
is 0 unless the arguments are wrong.  The test module ``tests/models/test_transformers_models.py``
asserts the same checks through ``check_magpy``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/transformers_survey.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

import magpy  # noqa: E402
from benchmarks.models import hf_zoo  # noqa: E402
from benchmarks.run import compare  # noqa: E402

ATOL, RTOL = 1e-5, 1e-4
EXPECTED_STATS = (1, 2, 0, 1)   # monitor_runs, mock_runs, eager_runs, graph_count for 3 calls
CALLS = ("first", "repeated", "fresh")
MODES = ("no_grad", "grad")


# ---------------------------------------------------------------------------------------------
# one model, one grad mode


@dataclasses.dataclass
class CallCheck:
    """One call compared with eager."""
    call: str
    ok: bool
    max_abs_diff: float
    problems: list[str]


@dataclasses.dataclass
class ModeResult:
    """Three calls of one compiled model in one grad mode."""
    model: str
    mode: str                               # "no_grad" or "grad"
    compiler: str                           # "magpy" or "torch.compile"
    checks: list[CallCheck] = dataclasses.field(default_factory=list)
    stats: tuple[int, int, int, int] | None = None   # magpy: monitor, mock, eager, graphs
    break_reasons: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None                # readable first line of what stopped the calls
    error_call: str | None = None
    error_where: str | None = None          # innermost frame of an exception that is not a graph break
    traceback: str | None = None
    capture_s: float | None = None

    @property
    def correct(self) -> bool:
        return len(self.checks) == len(CALLS) and all(c.ok for c in self.checks)

    @property
    def one_graph(self) -> bool:
        return self.stats == EXPECTED_STATS if self.compiler == "magpy" else self.error is None

    @property
    def ok(self) -> bool:
        return self.correct and self.one_graph and self.error is None

    def reason(self) -> str:
        """Why this is not one correct graph, in one line ("" if it is)."""
        if self.error:
            return f"{_stage(self.error_call)}: {self.error}"
        wrong = next((c for c in self.checks if not c.ok), None)
        if wrong:
            return f"WRONG on the {wrong.call} call: {wrong.problems[0] if wrong.problems else '?'}"
        if self.compiler == "magpy" and self.stats != EXPECTED_STATS:
            return _stats_reason(self)
        return ""


def _stats_reason(r: ModeResult) -> str:
    monitor, mock, eager, graphs = r.stats or (0, 0, 0, 0)
    magpy_warning = next((w for w in r.warnings if "magpy" in w), None)
    if r.break_reasons:
        text = _first_line(r.break_reasons[0])
        if "capture failed" in text and magpy_warning:
            text = magpy_warning
        return text
    if monitor > 1:
        return (f"guard missed: {monitor} monitor runs for {len(CALLS)} calls "
                f"({mock} mock runs; repeated/fresh inputs were recorded again)")
    if graphs != 1:
        return f"{graphs} graphs compiled" + (f"; {magpy_warning}" if magpy_warning else "")
    return f"stats {r.stats} != {EXPECTED_STATS}" + (f"; {magpy_warning}" if magpy_warning else "")


def _stage(call: str | None) -> str:
    """``"first call"`` for a call, ``"build"``/``"compile"`` for the steps before the calls."""
    return f"{call} call" if call in CALLS else str(call)


def _first_line(text) -> str:
    text = str(text).strip()
    return text.splitlines()[0] if text else ""


def _short_path(filename: str) -> str:
    """``.../site-packages/transformers/models/x.py`` -> ``transformers/models/x.py``."""
    for marker in ("site-packages/", "dist-packages/", "/work/main/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def describe_error(exc: BaseException) -> str:
    """One readable line: a graph break's reason and the user's line, or the exception's first line."""
    if isinstance(exc, magpy.GraphBreakError):
        brk = exc.graph_break
        src = f": `{brk.source}`" if brk.source else ""
        return f"graph break: {brk.reason} at {_short_path(brk.filename)}:{brk.lineno}{src}"
    return f"{type(exc).__name__}: {_first_line(exc) or '(no message)'}"


def _grad_context(mode: str):
    return torch.no_grad() if mode == "no_grad" else contextlib.nullcontext()


def _three_calls(result: ModeResult, compiled, model, args: tuple, kwargs: dict) -> None:
    """Call ``compiled`` on the first, repeated and fresh inputs; compare each with eager."""
    fresh_args, fresh_kwargs = hf_zoo.fresh_inputs(args, kwargs)
    inputs = {"first": (args, kwargs), "repeated": (args, kwargs), "fresh": (fresh_args, fresh_kwargs)}
    with _grad_context(result.mode):
        for call in CALLS:
            a, k = inputs[call]
            expected = model(*a, **k)
            result.error_call = call
            t0 = time.perf_counter()
            out = compiled(*a, **k)
            if call == "first":
                result.capture_s = time.perf_counter() - t0
            c = compare(hf_zoo.plain(expected), hf_zoo.plain(out), rtol=RTOL, atol=ATOL)
            result.checks.append(CallCheck(call, c.ok, c.max_abs_diff, c.problems[:5]))
    result.error_call = None


def _run(name: str, mode: str, compiler: str, make) -> ModeResult:
    """Build ``name``, compile it with ``make(model)``, make the three calls; never raises."""
    result = ModeResult(name, mode, compiler)
    compiled = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result.error_call = "build"
            model, args, kwargs = hf_zoo.HF_ZOO[name]()
            result.error_call = "compile"
            compiled = make(model)
            _three_calls(result, compiled, model, args, kwargs)
        except Exception as exc:
            result.error = describe_error(exc)
            result.traceback = traceback.format_exc()
            if not isinstance(exc, magpy.GraphBreakError):
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                result.error_where = f"{_short_path(frame.filename)}:{frame.lineno} in {frame.name}"
    result.warnings = list(dict.fromkeys(f"{w.category.__name__}: {_first_line(w.message)}" for w in caught))
    if compiler == "magpy" and compiled is not None:
        s = magpy.stats(compiled)
        result.stats = (s.monitor_runs, s.mock_runs, s.eager_runs, s.graph_count)
        result.break_reasons = [str(b) for b in s.break_reasons]
    return result


def check_magpy(name: str, mode: str = "no_grad", backend: str = "eager") -> ModeResult:
    """``magpy.compile(model, backend=backend, fullgraph=True)``: three calls in grad ``mode``."""
    try:
        return _run(name, mode, "magpy", lambda m: magpy.compile(m, backend=backend, fullgraph=True))
    finally:
        magpy.reset()
        gc.collect()


def check_torch_compile(name: str, mode: str = "no_grad") -> ModeResult:
    """``torch.compile(model, fullgraph=True, backend="eager")``: the same three calls."""
    torch._dynamo.reset()
    try:
        return _run(name, mode, "torch.compile", lambda m: torch.compile(m, fullgraph=True, backend="eager"))
    finally:
        torch._dynamo.reset()
        gc.collect()


# ---------------------------------------------------------------------------------------------
# the table


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "NO"


def _row(r: ModeResult, tc: ModeResult | None) -> list[str]:
    stats = "/".join(map(str, r.stats)) if r.stats else "-"
    row = [r.model, r.mode, _yes_no(r.one_graph), _yes_no(r.correct) if r.checks else "-", stats,
           "-" if r.capture_s is None else f"{r.capture_s:.2f}"]
    if tc is not None:
        row.append("ok" if tc.ok else ("WRONG" if tc.error is None else "fails"))
    row.append(r.reason())
    return row


def table(results: list[tuple[ModeResult, ModeResult | None]], width: int = 110) -> str:
    """A fixed-width table; the reason column is cut at ``width`` characters (see footnotes)."""
    header = ["model", "grad", "one graph", "correct", "stats", "capture s"]
    if any(tc is not None for _, tc in results):
        header.append("torch.compile")
    header.append("reason")
    rows = [_row(r, tc) for r, tc in results]
    rows = [row[:-1] + [row[-1] if len(row[-1]) <= width else row[-1][:width - 3] + "..."] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), "-" * len(line(header))] + [line(row) for row in rows])


def markdown(results: list[tuple[ModeResult, ModeResult | None]]) -> str:
    header = ["model", "grad", "one graph", "correct", "stats", "capture s"]
    if any(tc is not None for _, tc in results):
        header.append("torch.compile")
    header.append("reason")
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r, tc in results:
        cells = _row(r, tc)
        cells[-1] = cells[-1].replace("|", "\\|")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(results: list[tuple[ModeResult, ModeResult | None]]) -> str:
    """Counts per mode, then the distinct reasons with the models that hit them."""
    lines = []
    for mode in dict.fromkeys(r.mode for r, _ in results):
        rs = [r for r, _ in results if r.mode == mode]
        lines.append(f"{mode}: {sum(r.ok for r in rs)}/{len(rs)} one graph and correct; "
                     f"{sum(r.one_graph for r in rs)} one graph, {sum(r.correct for r in rs)} correct")
        tcs = [tc for r, tc in results if r.mode == mode and tc is not None]
        if tcs:
            lines.append(f"{mode}: torch.compile(fullgraph=True, backend='eager'): "
                         f"{sum(tc.ok for tc in tcs)}/{len(tcs)} ok")
    by_reason: dict[str, list[str]] = {}
    for r, _ in results:
        if not r.ok:
            by_reason.setdefault(_generic(r.reason()), []).append(f"{r.model}/{r.mode}")
    if by_reason:
        lines.append("\nreasons (most frequent first):")
        for reason, where in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(where):3d}x {reason}\n        {', '.join(where)}")
    return "\n".join(lines)


def _generic(reason: str) -> str:
    """A reason without the call it happened on, so that the same cause groups together."""
    for prefix in ("first call: ", "repeated call: ", "fresh call: "):
        reason = reason.removeprefix(prefix)
    return reason


def footnotes(results: list[tuple[ModeResult, ModeResult | None]]) -> str:
    """Full reasons: magpy's break reasons with source lines, and torch.compile's errors."""
    out = []
    for r, tc in results:
        details = []
        if r.error and r.error_call:
            details.append(f"magpy: {_stage(r.error_call)}: {r.error}"
                           + (f" (raised at {r.error_where})" if r.error_where else ""))
        if not r.error:  # a GraphBreakError's reason is the error itself
            details += [f"magpy break: {b}" for b in r.break_reasons]
        details += [f"magpy {c.call} call WRONG: " + "; ".join(c.problems[:3]) for c in r.checks if not c.ok]
        details += [f"warning: {w}" for w in r.warnings if "magpy" in w][:3]
        if tc is not None and not tc.ok:
            details.append(f"torch.compile: {tc.reason()}"
                           + (f" (raised at {tc.error_where})" if tc.error_where else ""))
        if details:
            out.append(f"{r.model} / {r.mode}:\n    " + "\n    ".join(details))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(hf_zoo.HF_ZOO),
                        help="comma-separated, from: " + ",".join(hf_zoo.HF_ZOO) + " (default: all)")
    parser.add_argument("--backend", default="eager", help="magpy backend (default: %(default)s)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from: no_grad,grad")
    parser.add_argument("--torch-compile", action="store_true",
                        help="also run torch.compile(fullgraph=True, backend='eager') for comparison")
    parser.add_argument("--no-verify-fast-guard", dest="verify_fast_guard", action="store_false",
                        help="do not set magpy.config.verify_fast_guard (default: set, as the tests do: "
                             "every fast-guard hit is cross-checked with the full guard)")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    parser.add_argument("--json", metavar="PATH", help="write every result (with tracebacks) as JSON")
    opts = parser.parse_args(argv)
    opts.model_list = [m for m in opts.models.split(",") if m]
    unknown = [m for m in opts.model_list if m not in hf_zoo.HF_ZOO]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(hf_zoo.HF_ZOO)}")
    opts.mode_list = [m for m in opts.modes.split(",") if m]
    if not opts.mode_list or set(opts.mode_list) - set(MODES):
        parser.error(f"--modes: choose from {list(MODES)}")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    start = time.perf_counter()
    magpy.config.verify_fast_guard = opts.verify_fast_guard
    print(f"torch {torch.__version__}, magpy backend {opts.backend!r}, fullgraph=True, verify_fast_guard="
          f"{opts.verify_fast_guard}; {len(opts.model_list)} models x {opts.mode_list}", flush=True)
    results: list[tuple[ModeResult, ModeResult | None]] = []
    for name in opts.model_list:
        for mode in opts.mode_list:
            t0 = time.perf_counter()
            r = check_magpy(name, mode, opts.backend)
            tc = check_torch_compile(name, mode) if opts.torch_compile else None
            results.append((r, tc))
            print(f"  {name:12s} {mode:8s} {'ok' if r.ok else 'FAIL':4s} {time.perf_counter() - t0:6.1f} s  "
                  f"{r.reason()[:120]}", flush=True)
    print("\n" + table(results))
    print("\nstats: magpy.stats monitor_runs/mock_runs/eager_runs/graph_count (one graph: 1/2/0/1).  "
          "capture s: the first call.")
    if opts.markdown:
        print("\nmarkdown:\n\n" + markdown(results))
    notes = footnotes(results)
    if notes:
        print("\ndetails:\n" + notes)
    print("\n" + summary(results))
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")
    if opts.json:
        rows = [{"magpy": dataclasses.asdict(r), "reason": r.reason(), "ok": r.ok,
                 "torch_compile": dataclasses.asdict(tc) if tc else None} for r, tc in results]
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json).write_text(json.dumps(rows, indent=2, default=str))
        print(f"wrote {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
