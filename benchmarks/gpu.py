"""The GPU table (issue 28): eager, torch.compile, its CUDA graphs and magpy, side by side.

    python -m benchmarks.gpu [--device cuda|cpu] [--out DIR] [--quick] [--sections mlp,bert,...]
                             [--variants ...] [--size bench|test] [--calls N] [--budget-s S]
                             [--compile-threads N] [--threads N] [--train-model bert|resnet50] [--tf32]

One prepared run for a lent GPU machine (``PYTHONPATH=.`` from a checkout, the machine's own
torch; nothing is downloaded).  Sections, cheapest first, each a set of rows, one per variant:

==============  ================================================================================
section         what is called (batch 1 unless said; inference under ``torch.no_grad()``)
==============  ================================================================================
``mlp``         8 x (Linear(256, 256) + GELU) on a [1, 256] input: dispatch cost, nothing else
``bert``        the zoo's ``bert`` at ``--size`` (``benchmarks.models``; bench: 6 layers, hidden
                384, 256 tokens; needs ``transformers``, else the section records the error)
``resnet50``    the zoo's ``resnet50`` at ``--size`` (bench: ResNet-50, 224x224)
``blockdrop``   ``benchmarks.control_flow``'s BlockDrop (``if`` on a tensor per block), N calls
``lstm``        ``benchmarks.control_flow``'s LSTM language model (a Python loop over time, a
                new sequence length on most calls), N calls
``train``       ``benchmarks.train``'s whole train step (forward, ``backward()``, SGD) of
                ``--train-model`` (default bert; at test size with ``--quick``), batch 8
==============  ================================================================================

``--size`` is bench by default on a GPU and test on a CPU (a dry run of a few minutes).

Variants (``--variants`` picks some; eager always runs): ``eager``; ``torch.compile``
(inductor, default mode); ``torch.compile-ro``
(``mode="reduce-overhead"``: CUDA graphs; on a CPU the same as torch.compile, so left out);
``magpy-foreground`` (``magpy.config.background_compile = False``: graphs compiled while
recording, as torch.compile does); ``magpy`` (defaults: background compile, autopilot);
``magpy-cudagraphs`` (``magpy.config.cuda_graphs = True``: compiled graphs replayed as CUDA
graphs, ``magpy.backends.gpu.cuda_graphs``; GPU only; compiled in the foreground, as magpy-foreground, to
keep the run short: its figure is the steady state).  The train section runs eager, torch.compile and magpy.

Columns: ``steady ms``: the median call once compiled (magpy after ``magpy.synchronize()`` and
its autopilot trial; ``benchmarks.run.run_variant`` for mlp/bert/resnet50, the control-flow
``steady`` passes, the train step's timed steps).  ``until compiled s``: the first call for
torch.compile; for magpy a first call, a second (which starts the background compile) and the
wait for it (mlp/bert/resnet50); for control flow the variant's ``total s`` over the N calls,
compiles included (the paper's setting), plus the wait for a background compile still running
after them, with the call from which magpy ran compiled graphs;
for train the first two steps.  ``correct``: every output ``allclose`` to eager's (rtol = atol =
1e-3 for mlp/bert/resnet50, 1e-4 for control flow; train: ``benchmarks.train.check``).

Before the table, one untimed ``torch.compile`` of a tiny function starts Inductor's compile
workers and Triton (on a fresh GPU machine that costs most of a minute, once per process: the
JSON has it as ``inductor_warmup_s``), so no variant's compile time includes it.
``--compile-threads N`` sets ``torch._inductor.config.compile_threads``.

Timing: every timed call is bracketed by ``benchmarks.device.now`` (``torch.cuda.synchronize()``
then ``time.perf_counter``): host dispatch and device work together, medians.  TF32 is off
(``--tf32`` turns it on) so that compiled and eager float32 results compare at 1e-3.  Inductor
variants compile in a fresh, empty inductor cache each (cold compile times).

Robustness: a section or variant that raises is recorded with its error and the run goes on;
the JSON (``gpu.json``) and Markdown (``gpu.md``) in ``--out`` (default ``$OUT`` if set, else
``./gpu_results``) are rewritten after every variant, so a run killed by a time limit still
leaves what it measured.  ``--budget-s`` (default 330; 0: none): a variant not started by then
is recorded as skipped.  Progress lines carry the elapsed time.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/gpu.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.config  # noqa: E402
import torch._inductor.utils  # noqa: E402
from torch import nn  # noqa: E402

import magpy  # noqa: E402
from benchmarks import control_flow, run, train  # noqa: E402
from benchmarks.device import add_argument as add_device_argument  # noqa: E402
from benchmarks.device import describe as describe_device  # noqa: E402
from benchmarks.device import to_device  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402

SECTIONS = ("mlp", "bert", "resnet50", "blockdrop", "lstm", "train")
VARIANTS = ("eager", "torch.compile", "torch.compile-ro", "magpy-foreground", "magpy", "magpy-cudagraphs")
TRAIN_VARIANTS = ("eager", "torch.compile", "magpy")
CUDA_ONLY = ("torch.compile-ro", "magpy-cudagraphs")   # on a CPU they are their plain twins
# magpy.config while a variant runs
CONFIG = {"magpy-foreground": {"background_compile": False},
          "magpy-cudagraphs": {"cuda_graphs": True, "background_compile": False}}


# ---------------------------------------------------------------------------------------------
# the run: options, clock, results written as they come


@dataclasses.dataclass
class Run:
    device: str
    quick: bool
    out: Path
    budget_s: float
    train_model: str
    size: str
    variants: tuple
    calls: int | None
    start: float = dataclasses.field(default_factory=time.perf_counter)
    rows: list = dataclasses.field(default_factory=list)
    info: dict = dataclasses.field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def over_budget(self) -> bool:
        return bool(self.budget_s) and self.elapsed() > self.budget_s

    def say(self, text: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {text}", flush=True)

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.write()

    def write(self, complete: bool = False) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        data = {"machine": self.info, "device": self.device, "quick": self.quick, "complete": complete,
                "wall_s": self.elapsed(), "rows": self.rows}
        _replace(self.out / "gpu.json", json.dumps(data, indent=2, default=str))
        _replace(self.out / "gpu.md", markdown(self))


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


@contextlib.contextmanager
def magpy_config(**options):
    """``magpy.config`` with ``options`` set, restored after."""
    saved = {k: getattr(magpy.config, k) for k in options}
    for k, v in options.items():
        setattr(magpy.config, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(magpy.config, k, v)


def variants_for(r: Run, names=VARIANTS) -> list[str]:
    cuda = r.device.startswith("cuda")
    return [v for v in names if (v == "eager" or v in r.variants) and (cuda or v not in CUDA_ONLY)]


def skipped(section: str, variant: str, why: str) -> dict:
    return {"section": section, "variant": variant, "skipped": why}


# ---------------------------------------------------------------------------------------------
# sections


def build_mlp(size: str = "bench"):   # (one size: it is small on any device)
    """8 x (Linear(256, 256) + GELU), batch 1: a forward is a few kernel launches."""
    torch.manual_seed(0)
    layers = [m for _ in range(8) for m in (nn.Linear(256, 256), nn.GELU())]
    return nn.Sequential(*layers).eval(), (torch.randn(1, 256),), {}


BUILDERS = {"mlp": build_mlp, "bert": MODELS["bert"], "resnet50": MODELS["resnet50"]}
RUN_VARIANTS = {**run.VARIANTS, **{name: run.Variant(name, "magpy", "inductor")
                                    for name in ("magpy-foreground", "magpy-cudagraphs")}}


def forward_section(r: Run, section: str) -> None:
    """One zoo-style model through ``benchmarks.run.run_variant`` per variant."""
    try:
        model, args, kwargs = BUILDERS[section](r.size)
        model, args, kwargs = model.to(r.device), to_device(args, r.device), to_device(kwargs, r.device)
    except Exception as e:  # (no transformers on the machine, ...) the section is a result
        r.add({"section": section, "variant": "build", "error": f"{type(e).__name__}: {e}"})
        return
    timing = run.QUICK if r.quick else run.FULL
    with torch.no_grad():
        torch.manual_seed(0)
        reference = model(*args, **kwargs)
        for name in variants_for(r):
            if r.over_budget():
                r.add(skipped(section, name, "time budget spent"))
                continue
            r.say(f"{section}: {name} ...")
            with magpy_config(**CONFIG.get(name, {})):
                row = run.run_variant(RUN_VARIANTS[name], model, args, kwargs, reference, timing)
            r.add(_forward_row(section, row))
            r.say(f"{section}: {name} done: {_summary(r.rows[-1])}")


def _forward_row(section: str, row: dict) -> dict:
    return {"section": section, "variant": row["variant"], "steady_ms": row.get("median_ms"),
            "until_compiled_s": None if row["variant"] == "eager" else row.get("compile_s"),
            "first_call_s": row.get("first_call_s"), "correct": row.get("correct"),
            "max_abs_diff": row.get("max_abs_diff"), "graphs": row.get("graphs"),
            "graphs_per_call": row.get("graphs_per_call"), "kept": row.get("kept"),
            "notes": row.get("notes"), "error": row.get("error"), "traceback": row.get("traceback"),
            "break_reasons": row.get("break_reasons"), "repeats": row.get("repeats")}


def control_flow_section(r: Run, section: str) -> None:
    """BlockDrop or the LSTM LM through ``benchmarks.control_flow.run_variant``: N calls
    (compiles included), then the steady state."""
    calls = r.calls or (12 if r.quick else 50)
    try:
        if section == "blockdrop":
            model = control_flow.build(3 if r.quick else 6)
            inputs = [control_flow.image(i) for i in range(calls)]
        else:
            torch.manual_seed(0)
            model = control_flow.LSTMLanguageModel(2 if r.quick else 3).eval()
            inputs = control_flow.lstm_inputs(calls)
        model, inputs = model.to(r.device), [x.to(r.device) for x in inputs]
    except Exception as e:
        r.add({"section": section, "variant": "build", "error": f"{type(e).__name__}: {e}"})
        return
    reference = None
    with torch.no_grad():
        for name in variants_for(r):
            if r.over_budget():
                r.add(skipped(section, name, "time budget spent"))
                continue
            r.say(f"{section}: {name} ({calls} calls) ...")
            with magpy_config(**CONFIG.get(name, {})):
                row = control_flow.run_variant(name, model, inputs, reference)
            outputs = row.pop("outputs")
            if name == "eager":
                reference = outputs if not row["error"] else None
            r.add({"section": section, "variant": name, "calls": calls, "steady_ms": row["steady"],
                   "median_ms_second_half": row["median"], "total_s": row["total"],
                   "until_compiled_s": None if name == "eager" or row["total"] is None
                   else row["total"] + row["wait"],
                   "compiled_by_call": row["compiled_by"], "compilations": row.get("compilations"),
                   "correct": None if name == "eager" else not row["error"] and not row["mismatches"],
                   "mismatching_calls": row["mismatches"], "max_abs_diff": row["max_diff"],
                   "error": row["error"], "notes": [row.get("compilations"), row.get("note")]})
            r.say(f"{section}: {name} done: {_summary(r.rows[-1])}")


def train_section(r: Run, section: str) -> None:
    """``benchmarks.train.run_model``: eager, torch.compile and magpy train steps."""
    if r.over_budget():
        r.add(skipped(section, "all", "time budget spent"))
        return
    model = r.train_model
    size = "test" if r.quick else r.size
    opts = argparse.Namespace(opt="sgd", warmup=train.WARMUP, steps=train.QUICK_STEPS if r.quick else 10,
                              device=r.device,
                              variant_list=[train.VARIANTS[v] for v in variants_for(r, TRAIN_VARIANTS)])
    r.say(f"train: {model} ({size}), batch 8, sgd ...")
    try:
        rows = train.run_model(model, train.TASKS[model], opts, size, 8, log=r.say)
    except Exception as e:
        r.add({"section": section, "variant": "build", "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()})
        return
    for row in rows:
        r.add({"section": section, "variant": row["variant"], "model": f"{model} ({size}, batch 8)",
               "steady_ms": row.get("median_ms"),
               "until_compiled_s": None if row["variant"] == "eager" else _sum(row.get("step1_s"),
                                                                             row.get("step2_s")),
               "total_s": row.get("total_s"), "correct": row.get("correct"),
               "max_abs_diff": row.get("state_diff"), "graphs_per_call": row.get("graphs_per_step"),
               "kept": row.get("kept"), "notes": row.get("notes"), "error": row.get("error"),
               "problems": row.get("problems")})


def _sum(*xs):
    return None if any(x is None for x in xs) else sum(xs)


SECTION_RUNNERS = {"mlp": forward_section, "bert": forward_section, "resnet50": forward_section,
                   "blockdrop": control_flow_section, "lstm": control_flow_section, "train": train_section}


# ---------------------------------------------------------------------------------------------
# the table


COLUMNS = ("section", "variant", "steady ms", "vs eager", "until compiled s", "correct", "notes")


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _correct(row: dict) -> str:
    if row.get("skipped"):
        return "skipped"
    if row.get("error"):
        return "ERROR"
    if row["variant"] == "eager":
        return "reference"
    c = row.get("correct")
    diff = row.get("max_abs_diff")
    tail = f" ({diff:.1e})" if isinstance(diff, float) else ""
    return ("yes" if c else "NO" if c is False else "?") + tail


def _notes(row: dict) -> str:
    parts = []
    if row.get("skipped"):
        parts.append(row["skipped"])
    if row.get("error"):
        parts.append(str(row["error"])[:160])
    if row.get("compiled_by_call") is not None:
        parts.append(f"magpy compiled from call {row['compiled_by_call']}")
    if row.get("total_s") is not None and row.get("calls"):
        parts.append(f"total {row['total_s']:.2f} s / {row['calls']} calls")
    if row.get("first_call_s") is not None and row["variant"].startswith("magpy"):
        parts.append(f"first call {row['first_call_s']:.2f} s")
    if row.get("kept"):
        parts.append("kept " + ", ".join(f"{k} {n}" for k, n in row["kept"].items()))
    if row.get("graphs_per_call") is not None:
        parts.append(f"{row['graphs_per_call']} graphs/call")
    parts += [n for n in row.get("notes") or [] if n and "\n" not in n][:3]
    return "; ".join(parts).replace("|", "\\|")


def _number(x):
    return x if isinstance(x, (int, float)) else None


def _summary(row: dict) -> str:
    return (f"steady {_fmt(row.get('steady_ms'), '.3f')} ms, until compiled "
            f"{_fmt(row.get('until_compiled_s'), '.1f')} s, correct {_correct(row)}")


def markdown(r: Run) -> str:
    info = r.info
    eager = {row["section"]: row.get("steady_ms") for row in r.rows if row["variant"] == "eager"}
    lines = [f"# magpy on {describe_device(r.device)}", "",
             f"{info.get('date')}; torch {info.get('torch')}, python {info.get('python')}, "
             f"transformers {info.get('transformers')}, magpy {info.get('magpy')} "
             f"(commit {str(info.get('git_commit'))[:10]}{' dirty' if info.get('git_dirty') else ''}); "
             f"{'quick' if r.quick else 'full'} run, zoo size {info.get('size')}; TF32 {info.get('tf32')}; "
             f"inductor warm-up {_fmt(_number(info.get('inductor_warmup_s')), '.1f')} s; "
             f"wall {r.elapsed():.0f} s", "",
             "| " + " | ".join(COLUMNS) + " |",
             "|---|---|---:|---:|---:|---|---|"]
    for row in r.rows:
        e = eager.get(row["section"])
        s = row.get("steady_ms")
        lines.append("| " + " | ".join([
            row["section"], row["variant"], _fmt(s, ".3f"),
            _fmt(e / s if e and s else None, ".2f"), _fmt(row.get("until_compiled_s"), ".1f"),
            _correct(row), _notes(row)]) + " |")
    lines += ["", "steady ms: median call once compiled (magpy: after magpy.synchronize() and its "
              "autopilot trial).  vs eager: eager steady / steady.  until compiled s: torch.compile's "
              "first call; magpy's first call + second call + the wait for its background compile; "
              "control flow: total over the calls, compiles included, and the wait for a background compile "
              "after them; train: steps 1 + 2.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu_results",
                        help="directory for gpu.json and gpu.md (default: $OUT if set, else ./gpu_results)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer timed calls, 12 control-flow calls, smaller BlockDrop/LSTM, "
                             "train at test size")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help="comma-separated, from: " + ",".join(SECTIONS)
                        + " (default: all, in this order)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, from: " + ",".join(VARIANTS) + " (default: all; eager always "
                             "runs; torch.compile-ro only on a GPU)")
    parser.add_argument("--size", choices=("test", "bench"),
                        help="zoo size of bert, resnet50 (and train without --quick); default: bench on a "
                             "GPU, test on a CPU")
    parser.add_argument("--calls", type=int, help="control-flow calls per variant (default 50; --quick 12)")
    parser.add_argument("--compile-threads", type=int, help="torch._inductor.config.compile_threads")
    parser.add_argument("--threads", type=int,
                        help="torch.set_num_threads (default: torch's on a GPU, 1 on a CPU: a shared "
                             "machine's dry run, see benchmarks/run.py)")
    parser.add_argument("--budget-s", type=float, default=330.0,
                        help="start no variant after this many seconds (default 330; 0: no limit)")
    parser.add_argument("--train-model", default="bert", choices=tuple(train.TASKS))
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls and convolutions")
    opts = parser.parse_args(argv)
    opts.section_list = [s for s in opts.sections.split(",") if s]
    opts.variant_list = tuple(v for v in opts.variants.split(",") if v)
    for what, given, known in (("sections", opts.section_list, SECTIONS),
                               ("variants", opts.variant_list, VARIANTS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            parser.error(f"unknown {what} {unknown}; choose from {list(known)}")
    if opts.size is None:
        opts.size = "bench" if opts.device.startswith("cuda") else "test"
    return opts


def warm_up_inductor(device: str) -> float:
    """Seconds to compile a tiny function with inductor: the process's one-time start of the
    compile workers and Triton, kept out of every variant's compile time."""
    t0 = time.perf_counter()
    with torch._inductor.utils.fresh_cache():
        fn = torch.compile(lambda x: (x * 2).relu() + 1)
        fn(torch.randn(8, device=device))
    torch._dynamo.reset()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    opts = parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = opts.tf32
    torch.backends.cudnn.allow_tf32 = opts.tf32
    threads = opts.threads or (None if opts.device.startswith("cuda") else 1)
    if threads:
        torch.set_num_threads(threads)
    if opts.compile_threads:
        torch._inductor.config.compile_threads = opts.compile_threads
    r = Run(opts.device, opts.quick, Path(opts.out), opts.budget_s, opts.train_model, opts.size,
            opts.variant_list, opts.calls)
    r.info = dict(run.machine_info(), device=describe_device(opts.device), tf32=opts.tf32, size=opts.size,
                  compile_threads=torch._inductor.config.compile_threads,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    r.say(f"torch {r.info['torch']}, python {r.info['python']}, magpy {r.info['magpy']}, "
          f"transformers {r.info['transformers']}; device {r.info['device']}; size {opts.size}; "
          f"sections {','.join(opts.section_list)}; writing {r.out}")
    r.write()
    try:
        if len(variants_for(r)) > 1:   # (eager alone compiles nothing)
            r.info["inductor_warmup_s"] = warm_up_inductor(opts.device)
            r.say(f"inductor warm-up (compile workers, Triton): {r.info['inductor_warmup_s']:.1f} s")
    except Exception as e:  # the variants will show what fails
        r.info["inductor_warmup_s"] = f"{type(e).__name__}: {e}"
        r.say(f"inductor warm-up failed: {r.info['inductor_warmup_s']}")
    for section in opts.section_list:
        try:
            SECTION_RUNNERS[section](r, section)
        except Exception as e:  # a section that fails outside its variants: recorded, go on
            traceback.print_exc()
            r.add({"section": section, "variant": "section", "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()})
    r.write(complete=True)
    print()
    print(markdown(r), flush=True)
    wrong = [row for row in r.rows if row.get("correct") is False or row.get("error")]
    r.say(f"done: {len(r.rows)} rows, {len(wrong)} wrong or failed; wrote {r.out / 'gpu.json'}, "
          f"{r.out / 'gpu.md'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
