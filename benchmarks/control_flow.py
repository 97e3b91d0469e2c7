"""Control flow: eager vs torch.compile vs magpy on a BlockDrop-style network and an LSTM
language model written as Python loops (paper §8.4).

    python -m benchmarks.control_flow [--model blockdrop|lstm|all] [--calls N] [--threads N] [--quick]
                                      [--json PATH]   (the rows, for python -m benchmarks.plots)
                                      [--device cuda]

**BlockDrop.** A policy network looks at the input and switches residual blocks on or off, so
different inputs run different block subsets through the Python ``if gates[i] > 0.5: x = x +
block(x)``. magpy records each such ``if`` on a tensor as one ``torch.cond``
(``magpy/graphs/controlflow/ifs.py``): one recording, one graph for every subset. The model (``BlockDrop``
below, random weights): a conv stem, ``--blocks`` residual blocks (conv-BN-ReLU-conv-BN, 32
channels, default 6) and a linear head, on 32x32 images at batch 8; the policy (conv, ReLU,
global pool, linear, sigmoid, mean over the batch) gives one 0-d gate per block. Its last layer
is standardised on calibration images (seeds distinct from the benchmark's) so each gate is on
for about half of the inputs; the header prints how many distinct block subsets the calls take.

**LSTM.** ``LSTMLanguageModel`` below (random weights): an embedding of 1000 tokens, ``--layers``
(default 3) layers of ``nn.LSTMCell`` with hidden size 256, each a Python ``for x_t in x:`` over
time that appends its output to a list stacked after the loop (the layout of PyTorch's
``benchmarks/fastrnns/custom_lstms.py``), and a linear decoder; batch 8, sequence lengths drawn
uniformly from 10..40 (``random.Random(0)``), a new length on most calls.  magpy records such a
loop as one ``torch.while_loop`` over the sequence once its length is symbolic (the second
length seen), so one record serves every later length; torch.compile unrolls the loop and
compiles again for each new length (until its recompile limit, then runs the frame eagerly).

``--calls`` calls (default 50) under ``torch.no_grad()`` in eval mode, input ``i`` drawn with
seed ``i``; every variant gets the same inputs: ``eager`` (the model), ``torch.compile``
(``torch.compile(model)``, default settings, after ``torch._dynamo.reset()``), ``magpy``
(``magpy.compile(model)``, default settings: backend inductor, graphs compiled in the
background from a record's first reuse while calls run their eager twins,
``magpy.backends.background``) and ``magpy-foreground`` (the same with
``magpy.config.background_compile = False``: compiled while recording, as torch.compile
does), each after ``magpy.reset()`` / in a fresh inductor cache
(``torch._inductor.utils.fresh_cache()``); a background compile still running after the
last call is waited for outside the timed calls.  ``--quick``: 10
calls, 3 blocks, 2 layers.
(Inductor 2.13 on CPU hands cond branches channels-last conv activations that the compiled
branch asserts to be contiguous; ``torch.compile(fn, fullgraph=True)`` of the same
``torch.cond`` fails alike.  magpy compiles graphs with conds without layout optimisation.)

Columns: ``total s``: all calls, compilations included (each call timed with
``benchmarks.device.now``: ``time.perf_counter`` after ``torch.cuda.synchronize()`` on a GPU; the
comparisons with eager outside the timed region).  ``median ms``: the
median of the last half of the calls.  ``steady ms``: once the calls are done and
``magpy.synchronize()`` has waited for a background compile, a warm-up pass (at least the
autopilot's trial) and then every input again, :data:`STEADY_PASSES` times, timed: their
median (outputs checked too; one pass of a few milliseconds was at the mercy of a GPU
machine's clocks).
``--device cuda``: the models and inputs on the GPU, and the variant ``torch.compile-ro``
(``torch.compile(model, mode="reduce-overhead")``: CUDA graphs) after torch.compile.
``speedup``: eager median / median.  ``total/tc``: total /
torch.compile's total.  ``compilations``: magpy: ``magpy.stats(c).monitor_runs`` recordings,
``graph_count`` graphs compiled and ``graphs_per_call`` of the last call, and for ``magpy``
the first call that ran what the background compile made (or "compiling past the end":
every call ran the eager twins); torch.compile:
``counters["stats"]["unique_graphs"]``, dynamo's graph breaks (``counters["graph_break"]``) and
the frames it skipped (``counters["frames"]`` total - ok: a break in a loop makes dynamo run the
whole ``forward`` eagerly, compiling only the functions it calls; the reasons are a footnote).
``correct``: every output ``torch.allclose`` to eager's (rtol = atol = 1e-4), else the number of
mismatching calls.  The machine is shared: ``--threads 1`` by default; compare ratios of one run.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import traceback

import torch
import torch._dynamo
import torch._inductor.config
from torch import nn
from torch._dynamo.utils import counters

import magpy
from benchmarks.device import add_argument as add_device_argument
from benchmarks.device import describe as describe_device
from benchmarks.device import now
from benchmarks.dynamic import _fmt, compile_cache, make, reset_compilers
from benchmarks.models._utils import example_image, init_resnet_style
from benchmarks.run import machine_info
from magpy.backends import autopilot

VARIANTS = ("eager", "torch.compile", "magpy-foreground", "magpy")
CUDA_VARIANTS = ("eager", "torch.compile", "torch.compile-ro", "magpy-foreground", "magpy")
RTOL = ATOL = 1e-4
BATCH, CHANNELS, IMAGE, CLASSES = 8, 32, 32, 10
STEADY_PASSES = 5    # timed passes over the inputs for ``steady ms``
GATE_SPREAD = 2.0    # std of each gate's logit over the calibration images
CALIBRATION = 64     # calibration images (seeds 10_000...)


class BlockDrop(nn.Module):
    def __init__(self, blocks: int):
        super().__init__()
        c = CHANNELS
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                          nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
            for _ in range(blocks))
        self.policy = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, blocks))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, CLASSES))

    def gates(self, x):
        return torch.sigmoid(self.policy(x).mean(0))   # one 0-d gate per block

    def forward(self, x):
        gates = self.gates(x)
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            if gates[i] > 0.5:
                x = x + block(x)
        return self.head(x)


class _LSTMLayer(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.cell = nn.LSTMCell(hidden, hidden)

    def forward(self, x, state):
        outs = []
        for xt in x:
            state = self.cell(xt, state)
            outs.append(state[0])
        return torch.stack(outs), state


class LSTMLanguageModel(nn.Module):
    def __init__(self, layers: int, vocab: int = 1000, hidden: int = 256):
        super().__init__()
        self.hidden = hidden
        self.emb = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(_LSTMLayer(hidden) for _ in range(layers))
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.emb(tokens)
        for layer in self.layers:
            z = x.new_zeros(x.size(1), self.hidden)
            x, _ = layer(x, (z, z))
        return self.dec(x)


LSTM_VOCAB, LSTM_LENGTHS = 1000, (10, 40)


def lstm_inputs(calls: int) -> list:
    rng = random.Random(0)
    lengths = [rng.randint(*LSTM_LENGTHS) for _ in range(calls)]
    return [torch.randint(0, LSTM_VOCAB, (n, BATCH), generator=torch.Generator().manual_seed(i))
            for i, n in enumerate(lengths)]


@torch.no_grad()
def build(blocks: int) -> BlockDrop:
    torch.manual_seed(0)
    model = BlockDrop(blocks)
    init_resnet_style(model)
    for block in model.blocks:      # keep the residual sum O(1) however many blocks run
        block[-1].weight.fill_(0.5)
    # standardise the policy's logits over calibration images: every gate on about half the time
    linear = model.policy[-1]
    logits = torch.stack([model.policy(image(10_000 + i)).mean(0) for i in range(CALIBRATION)])
    scale = GATE_SPREAD / logits.std(0)
    linear.weight.mul_(scale[:, None])
    linear.bias.sub_(logits.mean(0)).mul_(scale)
    return model.eval()


def image(seed: int) -> torch.Tensor:
    return example_image((BATCH, 3, IMAGE, IMAGE), seed=seed)


def _make(variant: str, model):
    if variant == "torch.compile-ro":   # CUDA graphs (on a CPU: torch.compile again)
        return torch.compile(model, mode="reduce-overhead")
    return make(variant.split("-")[0], model)


def run_variant(variant: str, model, inputs: list, reference: list | None) -> dict:
    """All calls timed one by one (compilations included), then, once magpy's background
    compile is done, the steady state: a warm-up pass (at least the autopilot's trial) and the
    inputs again, timed (``steady``: their median ms)."""
    row = {"variant": variant, "times": [], "steady": None, "mismatches": [], "max_diff": 0.0,
           "error": None, "compiled_by": None, "wait": 0.0}
    outputs, compiled = [], None
    magpy.config.background_compile = variant != "magpy-foreground"

    def checked(i: int, out) -> None:
        if reference is None:
            outputs.append(out)
            return
        if not torch.allclose(out, reference[i], rtol=RTOL, atol=ATOL) and i not in row["mismatches"]:
            row["mismatches"].append(i)
        row["max_diff"] = max(row["max_diff"], float((out - reference[i]).abs().max()))

    with compile_cache(variant):
        reset_compilers()
        try:
            compiled = _make(variant, model)
            for i, x in enumerate(inputs):
                t0 = now()
                out = compiled(x)
                row["times"].append(now() - t0)
                taken = variant == "magpy" and magpy.stats(compiled).compiled_in_background
                if taken and row["compiled_by"] is None:
                    row["compiled_by"] = i + 1   # this call put the compiled graphs in place
                checked(i, out)
            t0 = now()
            magpy.synchronize()
            row["wait"] = now() - t0   # a background compile still running after the calls
            for i in range(max(len(inputs), autopilot.TRIAL_CALLS)):
                compiled(inputs[i % len(inputs)])
            steady = []
            for rep in range(STEADY_PASSES):
                for i, x in enumerate(inputs):
                    t0 = now()
                    out = compiled(x)
                    steady.append(now() - t0)
                    if reference is not None and rep == 0:
                        checked(i, out)
            row["steady"] = statistics.median(steady) * 1e3
        except Exception as e:  # a failing variant is a result: report it and go on
            row["error"] = f"{type(e).__name__} at call {len(row['times'])}: {str(e).strip()[:300]}"
            traceback.print_exc()
        magpy.synchronize()   # (a background compile still running ends before the next variant)
        if variant.startswith("magpy") and compiled is not None:
            s = magpy.stats(compiled)
            row["compilations"] = (f"{s.monitor_runs} rec, {s.graph_count} graphs, {s.graphs_per_call}/call"
                                   + (f", {s.eager_runs} eager" if s.eager_runs else "")
                                   + _compiled_by(variant, row["compiled_by"], len(inputs)))
            row["note"] = (f"magpy stats: monitor_runs={s.monitor_runs} mock_runs={s.mock_runs} "
                           f"eager_runs={s.eager_runs} graph_count={s.graph_count} "
                           f"graphs_per_call={s.graphs_per_call} records={s.records}"
                           + (f" kept={s.kept}" if s.kept else "")   # (the autopilot's choices)
                           + "".join(f"\n  break: {str(r).splitlines()[0]}" for r in s.break_reasons))
        elif variant == "torch.compile":
            breaks, frames = counters.get("graph_break", {}), counters.get("frames", {})
            skipped = frames.get("total", 0) - frames.get("ok", 0)   # frames dynamo gave up on
            row["compilations"] = (f"{counters['stats'].get('unique_graphs', 0)} graphs, "
                                   f"{sum(breaks.values())} breaks, {skipped} frames skipped")
            reasons = {**breaks, **counters.get("unimplemented", {})}
            row["note"] = "torch.compile graph breaks / unsupported: " + (
                "; ".join(f"{n}x {_headings(k)}" for k, n in reasons.items()) or "none")
    reset_compilers()
    magpy.config.background_compile = True
    times = row["times"]
    row["total"] = sum(times) if times else None
    row["median"] = statistics.median(times[len(times) // 2:]) * 1e3 if times else None
    row["outputs"] = outputs
    return row


def _compiled_by(variant: str, call: int | None, calls: int) -> str:
    """When the background compile's graphs took over."""
    if variant != "magpy":
        return ""
    done = call is not None and call <= calls
    return f", compiled from call {call}" if done else ", compiling past the end"


def _headings(reason: str) -> str:
    """dynamo's reason without its explanations: 'Data-dependent branching -> graph break in loop'."""
    lines = [ln for ln in str(reason).splitlines() if ln.strip() and not ln[0].isspace()]
    return " -> ".join(ln for ln in lines if not ln.startswith(("***", "For more")))[:200]


def correct_cell(r: dict, calls: int) -> str:
    if r["error"]:
        return "ERROR"
    if r["variant"] == "eager":
        return "reference"
    return "yes" if not r["mismatches"] else f"NO ({len(r['mismatches'])}/{calls} calls)"


def print_table(rows: list[dict], calls: int) -> None:
    eager_med = rows[0]["median"]
    tc_total = next((r["total"] for r in rows if r["variant"] == "torch.compile"), None)
    head = ("variant", "total s", "median ms", "steady ms", "speedup", "total/tc", "compilations", "correct")
    cells = [(r["variant"], _fmt(r["total"], ".2f"), _fmt(r["median"], ".2f"), _fmt(r["steady"], ".2f"),
              _fmt(eager_med / r["median"] if eager_med and r["median"] else None, ".2f"),
              _fmt(r["total"] / tc_total if tc_total and r["total"] else None, ".2f"),
              r.get("compilations", "-"), correct_cell(r, calls)) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def line(values):
        return "  ".join(v.rjust(w) if 1 <= i <= 5 else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    print("\n".join([line(head), "-" * len(line(head))] + [line(c) for c in cells]))
    for r in rows:
        if r.get("note"):
            print(r["note"])
        if r["mismatches"] or (r["variant"] != "eager" and r["max_diff"]):
            print(f"{r['variant']}: max abs diff {r['max_diff']:.3g}, "
                  f"mismatching calls {r['mismatches'][:20]}")
        if r["error"]:
            print(f"{r['variant']}: {r['error']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, help="calls per variant (default 50; --quick 10)")
    parser.add_argument("--model", choices=("blockdrop", "lstm", "all"), default="all")
    parser.add_argument("--blocks", type=int, help="BlockDrop: residual blocks (default 6; --quick 3)")
    parser.add_argument("--layers", type=int, help="LSTM: layers (default 3; --quick 2)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1: the machine is shared)")
    parser.add_argument("--quick", action="store_true", help="10 calls, 3 blocks")
    parser.add_argument("--json", metavar="PATH", help="also write each model's rows (variant, total s, "
                        "median ms, compilations, correct) as JSON, for python -m benchmarks.plots")
    add_device_argument(parser)
    opts = parser.parse_args(argv)
    calls = opts.calls or (10 if opts.quick else 50)
    blocks = opts.blocks or (3 if opts.quick else 6)
    layers = opts.layers or (2 if opts.quick else 3)
    if calls < 2 or blocks < 1 or layers < 1:
        parser.error("--calls must be at least 2, --blocks and --layers at least 1")
    torch.set_num_threads(opts.threads)
    start = time.perf_counter()
    info = machine_info()
    load = info.get("loadavg")
    print(f"torch {info['torch']}, magpy {info['magpy']} (config.control_flow="
          f"{magpy.config.control_flow}); {info['cpu']}, threads {torch.get_num_threads()}, "
          f"device {describe_device(opts.device)}"
          + (f", load average {load[0]:.2f}" if load else ""))
    ok, tables = True, {}
    variants = CUDA_VARIANTS if opts.device.startswith("cuda") else VARIANTS
    if opts.model in ("blockdrop", "all"):
        model = build(blocks).to(opts.device)
        inputs = [image(i).to(opts.device) for i in range(calls)]
        with torch.no_grad():
            subsets = ["".join("1" if g > 0.5 else "0" for g in model.gates(x)) for x in inputs]
        print(f"BlockDrop: {blocks} blocks x {CHANNELS} channels, batch {BATCH}, {IMAGE}x{IMAGE} images; "
              f"{calls} calls, no_grad; inductor cache fresh per variant")
        print(f"{len(set(subsets))} distinct block subsets of {2 ** blocks} over {calls} calls "
              f"(blocks run per call: mean {statistics.mean(s.count('1') for s in subsets):.1f}); "
              f"first calls: {' '.join(subsets[:8])}\n", flush=True)
        ok &= compare(model, inputs, variants, tables.setdefault("blockdrop", []))
    if opts.model in ("lstm", "all"):
        torch.manual_seed(0)
        model = LSTMLanguageModel(layers).eval().to(opts.device)
        inputs = [x.to(opts.device) for x in lstm_inputs(calls)]
        lengths = [x.size(0) for x in inputs]
        print(f"LSTM language model: {layers} x LSTMCell(256), vocab {LSTM_VOCAB}, batch {BATCH}; "
              f"{calls} calls, "
              f"{len(set(lengths))} distinct lengths in {LSTM_LENGTHS[0]}..{LSTM_LENGTHS[1]} "
              f"(first calls: {' '.join(map(str, lengths[:8]))}), no_grad\n", flush=True)
        ok &= compare(model, inputs, variants, tables.setdefault("lstm", []))
    if opts.json:
        write_json(opts.json, info, vars(opts), tables, calls)
    print(f"\nwall time {time.perf_counter() - start:.1f} s")
    return 0 if ok else 1


def compare(model, inputs: list, variants=VARIANTS, rows: list | None = None) -> bool:
    """Run every variant on ``inputs`` (their rows appended to ``rows``), print the table; True
    if all were correct."""
    rows, reference = ([] if rows is None else rows), None
    with torch.no_grad():
        for variant in variants:
            print(f"  {variant} ...", flush=True)
            row = run_variant(variant, model, inputs, reference)
            if variant == "eager":
                reference = row["outputs"] if not row["error"] else None
            rows.append(row)
            print(f"  {variant} done in {sum(row['times']):.1f} s", flush=True)
    print()
    print_table(rows, len(inputs))
    print()
    return all(not r["error"] and not r["mismatches"] for r in rows)


def write_json(path: str, info: dict, options: dict, tables: dict[str, list[dict]], calls: int) -> None:
    """The rows of each model, without their outputs and per-call times (benchmarks/plots.py)."""
    keep = ("variant", "total", "median", "steady", "compilations", "error")
    models = {name: [{**{k: r.get(k) for k in keep}, "correct": correct_cell(r, calls)} for r in rows]
              for name, rows in tables.items()}
    with open(path, "w") as f:
        json.dump({"machine": info, "options": options, "calls": calls, "models": models}, f, indent=2,
                  default=str)


if __name__ == "__main__":
    sys.exit(main())
