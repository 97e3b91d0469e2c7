"""Steady state in rounds: every variant compiled first, then all timed in turn, round after round.

    python -m benchmarks.interleaved [--device cuda|cpu] [--models mlp,bert,blockdrop,lstm]
                                     [--rounds 7] [--size bench|test] [--json PATH]

A machine's speed drifts: on lent H100s eager BlockDrop took 0.51 to 1.6 ms per call on one
day, and two magpy variants running the same compiled graph measured 0.82 and 1.33 ms one
after the other in one process (``benchmarks.gpu``, which times variant after variant, as
``torch.compile`` users would run them).  Variants timed minutes apart compare moments, not
compilers.  Here every variant of a model is compiled and warmed up first (magpy: its
background compile waited for and its autopilot trial over), then each round times every
variant over every input (``--calls`` passes, variants in a rotated order each round), and
each variant's time is compared with eager's *of the same round*.

Models: ``mlp`` (``benchmarks.gpu``'s 8 x Linear 256 + GELU, batch 1), ``bert`` and
``resnet50`` (the zoo's, at ``--size``), ``blockdrop`` (``benchmarks.control_flow``'s
BlockDrop, 6 blocks, its first 16 images) and ``lstm`` (its LSTM language model, 3 layers, 16
sequences of lengths 10..40), all under ``torch.no_grad()``. Variants: ``eager``,
``torch.compile`` (default mode), on a GPU ``torch.compile-ro`` (``mode="reduce-overhead"``),
``magpy`` (defaults) and on a GPU ``magpy-cudagraphs`` (``magpy.config.cuda_graphs = True``).
Every variant's outputs are compared with eager's (rtol = atol = 1e-3) once warmed up.

Columns: ``ms``: the median over rounds of each round's median call (``benchmarks.device.now``
around each call: the device's work and the host's dispatch); ``x eager``: the median over
rounds of eager's round median / the variant's (above 1: faster than eager); ``spread``: the
lowest and highest of those per-round ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch._dynamo

import magpy
from benchmarks import control_flow
from benchmarks.device import add_argument as add_device_argument
from benchmarks.device import describe as describe_device
from benchmarks.device import now, to_device
from benchmarks.dynamic import main_output
from benchmarks.gpu import build_mlp, magpy_config
from benchmarks.models import MODELS
from benchmarks.run import machine_info

MODEL_NAMES = ("mlp", "bert", "resnet50", "blockdrop", "lstm")
INPUTS = 16          # control-flow models: inputs per pass
TOLERANCE = 1e-3


def _one_call(build):
    """A builder of the zoo's form (``(model, args, kwargs)`` at a size), as a model and its
    one call."""
    def make(size: str):
        model, args, kwargs = build(size)
        return model.eval(), [(args, kwargs)]
    return make


def _blockdrop(size: str):
    return control_flow.build(6), [((control_flow.image(i),), {}) for i in range(INPUTS)]


def _lstm(size: str):
    torch.manual_seed(0)
    model = control_flow.LSTMLanguageModel(3).eval()
    return model, [((x,), {}) for x in control_flow.lstm_inputs(INPUTS)]


BUILDERS = {"mlp": _one_call(build_mlp), "bert": _one_call(MODELS["bert"]),
            "resnet50": _one_call(MODELS["resnet50"]), "blockdrop": _blockdrop, "lstm": _lstm}


# name -> (makes the variant from the model, magpy.config while it compiles, GPU only)
VARIANTS = {
    "eager": (lambda m: m, {}, False),
    "torch.compile": (torch.compile, {}, False),
    "torch.compile-ro": (lambda m: torch.compile(m, mode="reduce-overhead"), {}, True),
    "magpy": (magpy.compile, {}, False),
    "magpy-cudagraphs": (magpy.compile, {"cuda_graphs": True}, True),
}


def warm_up(fn, calls: list, reference: list) -> str:
    """Calls until compiled and decided; '' if its outputs equal eager's, else what differs."""
    for _ in range(3):
        for args, kwargs in calls:
            fn(*args, **kwargs)
        magpy.synchronize()
    for _ in range(magpy.backends.autopilot.TRIAL_CALLS):   # (the trials of records that reuse late)
        for args, kwargs in calls:
            fn(*args, **kwargs)
    worst = max(float((main_output(fn(*a, **k)) - r).abs().max()) for (a, k), r in zip(calls, reference))
    return "" if worst <= TOLERANCE else f"max abs diff {worst:.2e}"


def one_round(made: dict, calls: list, passes: int, offset: int) -> dict:
    """name -> the median ms of its calls in this round; variants in an order rotated by ``offset``."""
    names = list(made)
    names = names[offset % len(names):] + names[:offset % len(names)]
    medians = {}
    for name in names:
        fn, times = made[name], []
        for _ in range(passes):
            for args, kwargs in calls:
                t0 = now()
                fn(*args, **kwargs)
                times.append(now() - t0)
        medians[name] = statistics.median(times) * 1e3
    return medians


def measure(model_name: str, device: str, size: str, rounds: int, passes: int) -> list[dict]:
    model, calls = BUILDERS[model_name](size)
    model = model.to(device)
    calls = [(to_device(a, device), to_device(k, device)) for a, k in calls]
    torch._dynamo.reset()
    magpy.reset()
    with torch.no_grad():
        reference = [main_output(model(*a, **k)) for a, k in calls]
        made, wrong = {}, {}
        for name, (make, config, cuda_only) in VARIANTS.items():
            if cuda_only and not device.startswith("cuda"):
                continue
            print(f"  {model_name}: compiling and warming up {name} ...", flush=True)
            try:
                with magpy_config(**config):
                    fn = make(model)
                    wrong[name] = warm_up(fn, calls, reference)
                made[name] = fn
            except Exception as e:  # noqa: BLE001 - a variant that fails is a result; the others go on
                print(f"  {model_name}: {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        per_round = [one_round(made, calls, passes, r) for r in range(rounds)]
    rows = []
    for name in made:
        ms = [r[name] for r in per_round]
        ratios = [r["eager"] / r[name] for r in per_round]
        rows.append({"model": model_name, "variant": name, "ms": statistics.median(ms),
                     "x_eager": statistics.median(ratios), "spread": (min(ratios), max(ratios)),
                     "correct": wrong[name] or "yes", "kept": _kept(made[name])})
    return rows


def _kept(fn) -> str:
    try:
        kept = magpy.stats(fn).kept
    except Exception:  # noqa: BLE001 - not a magpy callable
        return ""
    return ", ".join(f"{k} {n}" for k, n in kept.items())


def print_table(rows: list[dict]) -> None:
    head = ("model", "variant", "ms", "x eager", "spread", "correct", "kept")
    cells = [(r["model"], r["variant"], f"{r['ms']:.3f}", f"{r['x_eager']:.2f}",
              f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f}", r["correct"], r["kept"]) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    for line in [head, tuple("-" * w for w in widths), *cells]:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,bert,blockdrop,lstm",
                        help=f"comma list of {', '.join(MODEL_NAMES)}")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of every variant (default 7)")
    parser.add_argument("--calls", type=int, default=None,
                        help="passes over the inputs per variant per round (default: 20 for a "
                             "one-input model, 2 for the control-flow ones)")
    parser.add_argument("--size", choices=("bench", "test"), default=None,
                        help="bert's zoo size (default: bench on a GPU, test on a CPU)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    add_device_argument(parser)
    opts = parser.parse_args(argv)
    names = [m for m in opts.models.split(",") if m]
    if not names or any(m not in MODEL_NAMES for m in names) or opts.rounds < 1:
        parser.error(f"--models takes a comma list of {', '.join(MODEL_NAMES)}; --rounds at least 1")
    torch.set_num_threads(opts.threads)
    size = opts.size or ("bench" if opts.device.startswith("cuda") else "test")
    info = machine_info()
    print(f"torch {info['torch']}, magpy {info['magpy']}; device {describe_device(opts.device)}; "
          f"{opts.rounds} rounds; bert size {size}", flush=True)
    rows = []
    for name in names:
        passes = opts.calls or (2 if name in ("blockdrop", "lstm") else 20)
        rows += measure(name, opts.device, size, opts.rounds, passes)
        print_table([r for r in rows if r["model"] == name])
        print(flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": info, "options": vars(opts), "rows": rows}, f, indent=2, default=str)
    return 0 if all(r["correct"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
