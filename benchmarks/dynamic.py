"""Dynamic shapes: eager vs torch.compile vs magpy when every call has new input sizes.

Reproduces the MagPy paper's Figure 17 on this CPU:

    python -m benchmarks.dynamic [--models bert,deberta,resnet50,densenet121,generate] [--calls N]
                                 [--quick] [--threads N] [--json PATH] [--device cuda]

Each model is called ``--calls`` times (default 100) under ``torch.no_grad()`` in eval mode, with
input sizes drawn from ``random.Random(0)``; every variant gets the same sequence of inputs:

* ``bert``, ``deberta``: ``BertModel`` / ``DebertaV2Model`` from the zoo's bench configs
  (``benchmarks.models.hf``: 6 / 4 layers, hidden 384, random weights, nothing downloaded),
  called with ``input_ids`` only, batch uniform in [2, 16], sequence length in [32, 256].
* ``resnet50``, ``densenet121``: the zoo's own networks at full width (``benchmarks.models``),
  64x64 images, batch uniform in [2, 16].
* ``--quick``: 20 calls (unless ``--calls`` is given), batch in [2, 8], sequence length in [16, 64].

Variants, one after the other in the same process: ``eager`` (the model), ``torch.compile``
(``torch.compile(model)``: inductor with its default automatic dynamic shapes, after
``torch._dynamo.reset()``) and ``magpy`` (``magpy.compile(model)``: inductor, with the default
``magpy.config.dynamic = None``: a dimension seen with a second size becomes symbolic; its
default background compilation: calls run eager twins until a record's compile is done; after
``magpy.reset()``; a compile still running at the end is waited for, untimed).  The inductor
variants compile in a fresh, empty inductor cache (``torch._inductor.utils.fresh_cache()``), as
``benchmarks/run.py`` does, so neither reuses the other's kernels.

Columns:

* ``total s``: wall time of all the calls, compilations included (each call timed with
  ``benchmarks.device.now``: synchronised on a GPU; the comparisons with eager are outside the timed region).
* ``median ms``: the median call over the last half of the calls (the steady state).
* ``speedup``: eager median / variant median.
* ``total/tc``: variant total / torch.compile total (the paper's target for magpy: <= 1).
* ``compilations``: magpy: ``magpy.stats(c).monitor_runs`` (recordings), and the graphs compiled
  (``graph_count``); torch.compile: ``counters["stats"]["unique_graphs"]`` and the recompilations
  (dynamo's compilation metrics that carry a recompile reason).  The paper's target: at most 2
  per model.
* ``correct``: every call's output (``last_hidden_state`` for the transformers models, the logits
  for the CNNs) ``torch.allclose`` to eager's with rtol = atol = 1e-3: ``yes``, or the number of
  mismatching calls; ``ERROR`` if a call raised (the exception is a footnote).

The ``generate`` row is GPT-2 from a small config (n_embd 64, 2 layers, 4 heads, vocabulary 500,
512 positions) running greedy ``model.generate(x, max_new_tokens=64, do_sample=False,
pad_token_id=0)`` on an 8-token prompt at batch 1, three times; the compiled variants replace
``model.forward`` by ``torch.compile(forward)`` / ``magpy.compile(forward)`` (restored after).
There ``total s`` is the first generate() (it compiles), ``median ms`` the second generate()'s time
per new token (the steady state, if nothing compiles in it: the footnotes give every call's
tokens/s and compilations, so a third call shows whether the second was steady),
``compilations`` as above over all calls, and ``correct`` says whether every call produced the
same tokens as eager's.

Footnotes give magpy's stats per model (monitor_runs, mock_runs, eager_runs) and the calls at
which each compiler recorded or compiled.  The exit status is 1 if a variant mismatched or raised.
The machine is shared: use ``--threads 1`` (the default) and expect a few percent of noise.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as `python benchmarks/dynamic.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.utils  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import magpy  # noqa: E402
from benchmarks.device import add_argument as add_device_argument  # noqa: E402
from benchmarks.device import describe as describe_device  # noqa: E402
from benchmarks.device import now  # noqa: E402
from benchmarks.models import densenet, hf, resnet  # noqa: E402
from benchmarks.models._utils import calibrate_batchnorm, example_image  # noqa: E402
from benchmarks.run import machine_info, write_json  # noqa: E402

VARIANTS = ("eager", "torch.compile", "magpy")
RTOL = ATOL = 1e-3
IMAGE = 64          # image side: small, so 100 calls of a full-width CNN take a minute or two
PROMPT = 8          # generate: prompt tokens
NEW_TOKENS = 64     # generate: max_new_tokens
GENERATE_CALLS = 3  # the table uses the first two; the third shows whether the second was steady


@dataclasses.dataclass(frozen=True)
class Ranges:
    calls: int
    batch: tuple[int, int]   # inclusive, as random.randint
    seq: tuple[int, int]


FULL = Ranges(calls=100, batch=(2, 16), seq=(32, 256))
QUICK = Ranges(calls=20, batch=(2, 8), seq=(16, 64))


# ---------------------------------------------------------------------------------------------
# models


def _bert() -> torch.nn.Module:
    return hf.bert("bench")[0]


def _deberta() -> torch.nn.Module:
    return hf.deberta_v2("bench")[0]


def _cnn(factory: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        model = factory()
        # random weights with default BatchNorm statistics blow activations up; calibrate them
        # on images of the benchmark's size so eval-mode outputs stay O(1) (see _utils)
        return calibrate_batchnorm(model, example_image((8, 3, IMAGE, IMAGE)))
    return build


@dataclasses.dataclass(frozen=True)
class Spec:
    kind: str                              # "text" (input_ids) or "image"
    build: Callable[[], torch.nn.Module]


MODELS: dict[str, Spec] = {
    "bert": Spec("text", _bert),
    "deberta": Spec("text", _deberta),
    "resnet50": Spec("image", _cnn(lambda: resnet.resnet50(width=64))),
    "densenet121": Spec("image", _cnn(densenet.densenet121)),
}
ALL_MODELS = (*MODELS, "generate")


def draw_shapes(kind: str, ranges: Ranges) -> list[tuple[int, ...]]:
    """The input shape of every call: batch (and sequence length) from ``random.Random(0)``."""
    rng = random.Random(0)
    shapes = []
    for _ in range(ranges.calls):
        batch = rng.randint(*ranges.batch)
        shapes.append((batch, rng.randint(*ranges.seq)) if kind == "text" else (batch, 3, IMAGE, IMAGE))
    return shapes


def make_input(kind: str, shape: tuple[int, ...], index: int, vocab: int) -> torch.Tensor:
    if kind == "text":  # ids from 1: 0 is the pad id
        return torch.randint(1, vocab, shape, generator=torch.Generator().manual_seed(index))
    return example_image(shape, seed=index)


def call(fn, kind: str, x: torch.Tensor):
    return fn(input_ids=x) if kind == "text" else fn(x)


def main_output(out) -> torch.Tensor:
    """The tensor compared with eager's: the tensor itself, ``last_hidden_state`` or ``logits``."""
    if isinstance(out, torch.Tensor):
        return out
    for name in ("last_hidden_state", "logits"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"no tensor to compare in a {type(out).__name__}")


# ---------------------------------------------------------------------------------------------
# compilers


def make(variant: str, fn):
    if variant == "torch.compile":
        return torch.compile(fn)
    if variant == "magpy":
        return magpy.compile(fn)
    return fn


def reset_compilers() -> None:
    # both compilers start from nothing, so every variant pays its own compilations
    torch._dynamo.reset()
    counters.clear()
    _clear_dynamo_metrics()
    magpy.reset()


def _clear_dynamo_metrics() -> None:
    with contextlib.suppress(Exception):  # internal API: recompiles are a bonus, not needed
        torch._dynamo.utils.clear_compilation_metrics()


def compile_cache(variant: str):
    """A fresh inductor cache for the inductor variants (cold compiles, as in run.py)."""
    return torch._inductor.utils.fresh_cache() if variant != "eager" else contextlib.nullcontext()


def compilations(variant: str, compiled) -> int:
    """Compilations so far: magpy's recordings, or the graphs dynamo handed to inductor."""
    if variant == "magpy":
        return magpy.stats(compiled).monitor_runs
    if variant == "torch.compile":
        return counters["stats"].get("unique_graphs", 0)
    return 0


def dynamo_recompiles() -> int | None:
    try:
        return sum(1 for m in torch._dynamo.utils.get_compilation_metrics() if m.recompile_reason)
    except Exception:  # internal API
        return None


def compiler_info(variant: str, compiled) -> dict:
    if variant == "magpy":
        s = magpy.stats(compiled)
        return {"compilations": s.monitor_runs, "graphs": s.graph_count,
                "magpy_stats": {"monitor_runs": s.monitor_runs, "mock_runs": s.mock_runs,
                                "eager_runs": s.eager_runs, "graph_count": s.graph_count,
                                "records": s.records},
                "break_reasons": [str(r) for r in s.break_reasons]}
    if variant == "torch.compile":
        breaks = sum(counters.get("graph_break", {}).values())
        return {"compilations": counters["stats"].get("unique_graphs", 0),
                "recompiles": dynamo_recompiles(), "graph_breaks": breaks}
    return {}


def _warning_lines(caught) -> list[str]:
    seen: list[str] = []
    for w in caught:
        msg = f"{w.category.__name__}: {_first_line(w.message)}"
        if msg not in seen:
            seen.append(msg)
    return seen[:10]


def _first_line(text) -> str:
    text = str(text).strip()
    return text.splitlines()[0] if text else ""


def _error(e: BaseException, where: str) -> str:
    return f"{type(e).__name__} {where}: {_first_line(e)}"


# ---------------------------------------------------------------------------------------------
# the forward-call models


def run_variant(variant: str, model, spec: Spec, inputs: list, reference: list | None) -> dict:
    """Call ``variant``'s compiled model on every input, timing each call; compare with eager's
    outputs (``reference``; None for eager, whose outputs become the reference)."""
    row = {"variant": variant, "times_s": [], "mismatches": [], "max_abs_diff": 0.0,
           "compiled_at": [], "error": None, "traceback": None}
    outputs = []
    compiled = None
    with compile_cache(variant), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reset_compilers()
        try:
            compiled = make(variant, model)
            for i, x in enumerate(inputs):
                before = compilations(variant, compiled)
                t0 = now()
                out = call(compiled, spec.kind, x)
                row["times_s"].append(now() - t0)
                if compilations(variant, compiled) > before:
                    row["compiled_at"].append([i, list(x.shape)])
                out = main_output(out).detach()
                if reference is None:
                    outputs.append(out)
                else:
                    check(row, i, reference[i], out)
        except Exception as e:  # a failing variant is a result: report it and go on
            row["error"] = _error(e, f"at call {len(row['times_s'])}")
            row["traceback"] = traceback.format_exc()
        magpy.synchronize()   # (a background compile still running ends in this variant's cache)
        if compiled is not None:
            row.update(compiler_info(variant, compiled))
    row["warnings"] = _warning_lines(caught)
    summarise(row)
    row["outputs"] = outputs
    reset_compilers()
    return row


def check(row: dict, index: int, expected: torch.Tensor, actual: torch.Tensor) -> None:
    same_shape = expected.shape == actual.shape and expected.dtype == actual.dtype
    if same_shape and expected.is_floating_point():
        diff = float((expected.double() - actual.double()).abs().max()) if expected.numel() else 0.0
        row["max_abs_diff"] = max(row["max_abs_diff"], diff)
        ok = torch.allclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        ok = same_shape and torch.equal(actual, expected)
    if not ok:
        row["mismatches"].append(index)


def summarise(row: dict) -> None:
    times = row["times_s"]
    row["calls"] = len(times)
    row["total_s"] = sum(times) if times else None
    steady = times[len(times) // 2:]
    row["median_ms"] = statistics.median(steady) * 1e3 if steady else None


def run_forward_model(name: str, ranges: Ranges, device: str = "cpu") -> list[dict]:
    spec = MODELS[name]
    model = spec.build().eval().to(device)
    vocab = getattr(getattr(model, "config", None), "vocab_size", 0)
    shapes = draw_shapes(spec.kind, ranges)
    inputs = [make_input(spec.kind, s, i, vocab).to(device) for i, s in enumerate(shapes)]
    rows, reference = [], None
    with torch.no_grad():
        for variant in VARIANTS:
            print(f"  {name}: {variant} ...", flush=True)
            row = run_variant(variant, model, spec, inputs, reference)
            if variant == "eager":
                reference = row["outputs"] if row["error"] is None else None
            del row["outputs"]
            row.update(model=name, shapes=[list(s) for s in shapes])
            rows.append(row)
            _progress_done(name, row, sum(row["times_s"]))
    finish_rows(rows, reference_ok=reference is not None)
    return rows


def finish_rows(rows: list[dict], reference_ok: bool) -> None:
    """Speedups against eager and totals against torch.compile, and the ``correct`` cell."""
    by = {r["variant"]: r for r in rows}
    eager_med = by.get("eager", {}).get("median_ms")
    tc_total = by.get("torch.compile", {}).get("total_s")
    for r in rows:
        r["speedup"] = eager_med / r["median_ms"] if eager_med and r.get("median_ms") else None
        r["total_vs_tc"] = r["total_s"] / tc_total if tc_total and r.get("total_s") else None
        if "correct" not in r:  # generate rows set their own (same tokens)
            r["correct"] = _correct(r, reference_ok)


def _correct(r: dict, reference_ok: bool):
    if r["error"]:
        return False
    if r["variant"] == "eager":
        return True
    return not r["mismatches"] if reference_ok else None


# ---------------------------------------------------------------------------------------------
# generate


def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=512)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def generate(model, prompt: torch.Tensor) -> torch.Tensor:
    return model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)


def run_generate_variant(variant: str, model, prompt: torch.Tensor) -> dict:
    """``GENERATE_CALLS`` greedy generate() calls with ``model.forward`` replaced by the compiled
    forward; the compilations during each call are counted too."""
    row = {"variant": variant, "error": None, "traceback": None, "tokens": [], "times_s": [],
           "compilations_per_call": []}
    orig = model.forward
    compiled = None
    with compile_cache(variant), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reset_compilers()
        try:
            if variant != "eager":
                compiled = make(variant, orig)
                model.forward = compiled  # generate() calls self(...) -> self.forward
            for _ in range(GENERATE_CALLS):
                before = compilations(variant, compiled)
                t0 = now()
                tokens = generate(model, prompt)
                row["times_s"].append(now() - t0)
                row["tokens"].append(tokens)
                row["compilations_per_call"].append(compilations(variant, compiled) - before)
        except Exception as e:
            row["error"] = _error(e, f"in generate() call {len(row['times_s']) + 1}")
            row["traceback"] = traceback.format_exc()
        finally:
            # drop the instance attribute: the class's forward is back, as in the eager variant
            vars(model).pop("forward", None)
        if compiled is not None:
            row.update(compiler_info(variant, compiled))
    row["warnings"] = _warning_lines(caught)
    reset_compilers()
    return row


def summarise_generate(row: dict) -> None:
    """total: the first generate() (it compiles); median: the second's time per new token."""
    times, tokens = row["times_s"], row["tokens"]
    row["total_s"] = times[0] if times else None
    row["median_ms"] = None
    row["tokens_per_s"] = [(t.shape[1] - PROMPT) / s for t, s in zip(tokens, times)]
    if len(times) >= 2:
        row["new_tokens"] = tokens[1].shape[1] - PROMPT
        row["median_ms"] = times[1] / row["new_tokens"] * 1e3


def run_generate(ranges: Ranges, device: str = "cpu") -> list[dict]:
    model = build_gpt2().to(device)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, model.config.vocab_size, (1, PROMPT), generator=g).to(device)
    rows = []
    with torch.no_grad():
        for variant in VARIANTS:
            print(f"  generate: {variant} ...", flush=True)
            row = run_generate_variant(variant, model, prompt)
            summarise_generate(row)
            row["model"] = "generate"
            rows.append(row)
            _progress_done("generate", row, sum(row["times_s"]))
    eager = rows[0]["tokens"] if not rows[0]["error"] else None
    for r in rows:
        r["correct"] = False if r["error"] else _same_tokens(eager, r)
        r["tokens"] = [t.tolist() for t in r["tokens"]]
    finish_rows(rows, reference_ok=eager is not None)
    return rows


def _same_tokens(eager: list | None, row: dict) -> bool | None:
    if eager is None or len(row["tokens"]) != len(eager):
        return None
    return all(torch.equal(e, t) for e, t in zip(eager, row["tokens"]))


def _progress_done(name: str, row: dict, seconds: float) -> None:
    print(f"  {name}: {row['variant']} done in {seconds:.1f} s"
          + (f"  {row['error']}" if row["error"] else ""), flush=True)


# ---------------------------------------------------------------------------------------------
# reporting


COLUMNS = ("model", "variant", "total s", "median ms", "speedup", "total/tc", "compilations", "correct")
RIGHT = {2, 3, 4, 5}


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def compilations_cell(r: dict) -> str:
    if r.get("compilations") is None:
        return "-"
    if r["variant"] == "magpy":
        return f"{r['compilations']} rec, {r['graphs']} graphs"
    recompiles = r.get("recompiles")
    return f"{r['compilations']} graphs" + (f", {recompiles} recomp" if recompiles is not None else "")


def correct_cell(r: dict) -> str:
    if r.get("error"):
        return "ERROR"
    if r["correct"] is None:
        return "?"
    if r["variant"] == "eager":
        return "reference"
    if r["correct"]:
        return "yes"
    if r["model"] == "generate":
        return "NO (tokens differ)"
    return f"NO ({len(r['mismatches'])}/{r['calls']} calls)"


def table_lines(rows: list[dict]) -> list[str]:
    cells = [[r["model"], r["variant"], _fmt(r.get("total_s"), ".2f"), _fmt(r.get("median_ms"), ".2f"),
              _fmt(r.get("speedup"), ".2f"), _fmt(r.get("total_vs_tc"), ".2f"),
              compilations_cell(r), correct_cell(r)] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]

    def line(values):
        return "  ".join(v.rjust(w) if i in RIGHT else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [line(COLUMNS), "-" * len(line(COLUMNS))]
    for i, row in enumerate(cells):
        if i and row[0] != cells[i - 1][0]:
            out.append("")
        out.append(line(row))
    return out


def footnotes(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        where = f"{r['model']} / {r['variant']}"
        if r.get("magpy_stats"):
            s = r["magpy_stats"]
            out.append(f"{where}: stats monitor_runs={s['monitor_runs']} mock_runs={s['mock_runs']} "
                       f"eager_runs={s['eager_runs']} graph_count={s['graph_count']} records={s['records']}")
        if r.get("compiled_at"):
            at = ", ".join(f"#{i} {shape}" for i, shape in r["compiled_at"])
            out.append(f"{where}: compiled at calls {at}")
        if r.get("tokens_per_s"):
            rates = ", ".join(f"{x:.0f}" for x in r["tokens_per_s"])
            per_call = ", ".join(map(str, r["compilations_per_call"]))
            out.append(f"{where}: generate() calls 1..{len(r['tokens_per_s'])}: tokens/s {rates}; "
                       f"compilations {per_call}")
        if r.get("mismatches"):
            out.append(f"{where}: mismatching calls {r['mismatches'][:20]} "
                       f"(max abs diff {r['max_abs_diff']:.3g})")
        if r.get("graph_breaks"):
            out.append(f"{where}: {r['graph_breaks']} dynamo graph breaks")
        for reason in r.get("break_reasons") or []:
            out.append(f"{where}: break: {reason}")
        if r.get("error"):
            out.append(f"{where}: {r['error']}")
        if r["variant"] == "magpy":  # magpy's (cache limit...); everything is in the JSON
            out += [f"{where}: {w}" for w in r.get("warnings") or []]
    return out


def print_report(rows: list[dict]) -> None:
    print()
    print("\n".join(table_lines(rows)))
    notes = footnotes(rows)
    if notes:
        print()
        print("\n".join(notes))
    print(f"\ntotal s: all calls incl. compilation (generate: the first generate()).  median ms: median "
          f"of the last half of the calls (generate: second generate(), per new token).\nspeedup: eager "
          f"median / median.  total/tc: total / torch.compile's total.  compilations: magpy recordings "
          f"(monitor_runs) and graphs; torch.compile unique graphs and recompiles.\ncorrect: every "
          f"call allclose to eager (rtol={RTOL:g}, atol={ATOL:g}); generate: same tokens in every "
          "generate() call.  Paper's target: magpy <= 2 compilations, total/tc <= 1.")


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ALL_MODELS),
                        help="comma-separated, from: " + ",".join(ALL_MODELS) + " (default: all)")
    parser.add_argument("--calls", type=int,
                        help=f"calls per variant (default {FULL.calls}; --quick {QUICK.calls})")
    parser.add_argument("--quick", action="store_true",
                        help=f"batch {QUICK.batch}, sequence length {QUICK.seq}, {QUICK.calls} calls")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1: the machine is shared)")
    parser.add_argument("--json", metavar="PATH", help="write the rows (and machine information) here")
    add_device_argument(parser)
    opts = parser.parse_args(argv)
    opts.model_list = [m for m in opts.models.split(",") if m]
    unknown = [m for m in opts.model_list if m not in ALL_MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(ALL_MODELS)}")
    base = QUICK if opts.quick else FULL
    if opts.calls is not None and opts.calls < 2:
        parser.error("--calls must be at least 2")
    opts.ranges = dataclasses.replace(base, calls=opts.calls or base.calls)
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    torch.set_num_threads(opts.threads)
    start = time.perf_counter()
    info = machine_info()
    r = opts.ranges
    print(f"torch {info['torch']}, transformers {info['transformers']}, magpy {info['magpy']} "
          f"(config.dynamic={magpy.config.dynamic}); {info['cpu']}, threads {info['threads']}, "
          f"device {describe_device(opts.device)}")
    print(f"{r.calls} calls per variant; batch {list(r.batch)}, sequence length {list(r.seq)}, "
          f"images {IMAGE}x{IMAGE}; no_grad; inductor cache fresh per variant\n", flush=True)
    saved = {"models": opts.model_list, "ranges": dataclasses.asdict(r), "threads": opts.threads,
             "quick": opts.quick, "argv": sys.argv if argv is None else list(argv)}
    rows: list[dict] = []
    for name in opts.model_list:
        print(name, flush=True)
        rows += (run_generate(r, opts.device) if name == "generate"
                 else run_forward_model(name, r, opts.device))
        if opts.json:
            write_json(Path(opts.json), info, saved, rows, complete=False, wall_s=time.perf_counter() - start)
    wall = time.perf_counter() - start
    if opts.json:
        write_json(Path(opts.json), info, saved, rows, complete=True, wall_s=wall)
    print_report(rows)
    print(f"\nwall time {wall:.1f} s" + (f"; wrote {opts.json}" if opts.json else ""))
    return 0 if all(row["correct"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
