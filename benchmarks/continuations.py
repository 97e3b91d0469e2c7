"""What a continuation miss costs: resuming the monitor at the break vs monitoring the call again.

    python -m benchmarks.continuations [--layers 12] [--repeat 5] [--threads 1]

The model (``BranchyStack``) updates a buffer in place on entry (an effect a failed check
cannot take back), runs ``--layers`` blocks (Linear, LayerNorm, GELU; hidden 256, 64 tokens)
and then takes a data-dependent branch (``if h.mean() > 0``) either after the *last* block
("late") or after the *first* ("early").  Inputs alternate between the two outcomes.

Per position and compiler, with backend "eager" (no graph compiler: the figures are
magpy's and dynamo's own machinery, not inductor's compile time), medians over ``--repeat``
fresh compilations:

* ``first call``: the recording call (outcome A).
* ``new outcome``: the first call with outcome B.  magpy: graph 1 runs, the check fails,
  the mock writes the state back and the monitor resumes at the branch, recording a
  continuation.  torch.compile: dynamo compiles the resume function's other path.
* ``full re-record``: what magpy paid before continuations for that call: monitoring the
  whole call again (a fresh magpy recording of the outcome-B call).
* ``steady A`` / ``steady B``: later calls (magpy: the record, and its continuation).

``eager`` is the plain model call.  Every result is checked against eager (outputs and
the buffer).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/continuations.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn as nn  # noqa: E402

import magpy  # noqa: E402


class Block(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.lin = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h):
        return h + torch.nn.functional.gelu(self.norm(self.lin(h)))


class BranchyStack(nn.Module):
    def __init__(self, layers: int, hidden: int, branch_after: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(layers))
        self.register_buffer("calls", torch.zeros(()))
        self.branch_after = branch_after

    def forward(self, x):
        self.calls.add_(1)                  # in place: a failed check cannot take it back
        h = x
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            if i == self.branch_after:
                h = h * 2 if h.mean() > 0 else h / 2
        return h


def _inputs(hidden: int):
    torch.manual_seed(1)
    base = torch.randn(1, 64, hidden)
    return base.abs() + 10, -(base.abs() + 10)   # outcome A (mean > 0), outcome B


def _build(layers: int, hidden: int, branch_after: int):
    torch.manual_seed(0)
    model = BranchyStack(layers, hidden, branch_after).eval()
    with torch.no_grad():
        for blk in model.blocks:          # keep the sign of the input through the blocks
            blk.lin.weight.copy_(torch.eye(hidden) * 0.5)
            blk.lin.bias.zero_()
    return model


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _steady(fn, x, n=20):
    times = []
    for _ in range(n):
        times.append(_timed(fn, x)[1])
    return statistics.median(times)


def measure(layers: int, hidden: int, branch_after: int, repeat: int) -> dict:
    a, b = _inputs(hidden)
    ref = _build(layers, hidden, branch_after)
    with torch.no_grad():
        want_a, want_b = ref(a), ref(b)
    rows = {"eager": {"steady A": _steady(ref, a), "steady B": _steady(ref, b)}}
    for name in ("magpy", "torch.compile"):
        samples = {k: [] for k in ("first call", "new outcome", "full re-record", "steady A", "steady B")}
        for _ in range(repeat):
            model = _build(layers, hidden, branch_after)
            if name == "magpy":
                magpy.reset()
                fast = magpy.compile(model, backend="eager")
            else:
                torch._dynamo.reset()
                fast = torch.compile(model, backend="eager")
            with torch.no_grad():
                got_a, t = _timed(fast, a)
                samples["first call"].append(t)
                got_b, t = _timed(fast, b)
                samples["new outcome"].append(t)
                assert torch.allclose(got_a, want_a) and torch.allclose(got_b, want_b), name
                samples["steady A"].append(_steady(fast, a))
                samples["steady B"].append(_steady(fast, b))
                assert float(model.calls) == 2 + 40, (name, float(model.calls))   # each call once
                if name == "magpy":
                    st = magpy.stats(fast)
                    assert st.eager_runs == 0 and st.monitor_runs == 2, st   # record + continuation
                    again = magpy.compile(_build(layers, hidden, branch_after), backend="eager")
                    samples["full re-record"].append(_timed(again, b)[1])
        rows[name] = {k: statistics.median(v) for k, v in samples.items() if v}
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    cols = ("first call", "new outcome", "full re-record", "steady A", "steady B")
    print(f"BranchyStack: {opts.layers} blocks, hidden {opts.hidden}, 64 tokens; backend eager; "
          f"ms, median of {opts.repeat} compilations\n")
    print(f"| branch | compiler | {' | '.join(cols)} |")
    print("|---|---|" + "---:|" * len(cols))
    for label, after in (("late", opts.layers - 1), ("early", 0)):
        with contextlib.redirect_stderr(io.StringIO()):   # dynamo's graph-break notes
            rows = measure(opts.layers, opts.hidden, after, opts.repeat)
        for name, row in rows.items():
            cells = [f"{row[c] * 1e3:.2f}" if c in row else "-" for c in cols]
            print(f"| {label} | {name} | {' | '.join(cells)} |")
        m = rows["magpy"]
        print(f"| {label} | resume / re-record | | {m['new outcome'] / m['full re-record']:.2f}x | | | |")


if __name__ == "__main__":
    main()
