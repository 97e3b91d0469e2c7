"""A training-loop fuzz campaign: many loops, counted and grouped by failure signature; the
first failing loops printed with their descriptions, and, with ``out``, each failing loop
written as a repro script (the first ones of each signature simplified)."""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import re
import sys
import time

import torch

import magpy
from tests.fuzz_train.generator import Loop, generate
from tests.fuzz_train.minimize import minimize
from tests.fuzz_train.runner import FAILURES, KINDS, Outcome, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINIMISED_PER_SIGNATURE = 2
SHOWN = 8   # failing loops printed in full

REPRO = '''\
"""magpy training-loop fuzz repro: loop seed {seed}, backend {backend!r}: {kind} at step {step}.

{description}

{outcome}

Run: python {name}   (edit SOURCE to shrink it further)
"""
import sys

sys.path[:0] = [{root!r}]   # the repository whose magpy and tests.fuzz_train ran it
from tests.fuzz_train.generator import Loop  # noqa: E402
from tests.fuzz_train.runner import run  # noqa: E402

LOOP = Loop(**{fields!r})

SOURCE = {source}

if __name__ == "__main__":
    outcome = run(LOOP, backend={backend!r}, ranks={ranks}, source=SOURCE)
    print(outcome.describe())
    sys.exit(outcome.kind in ("wrong", "crash", "hang"))
'''


def repro_text(loop: Loop, outcome: Outcome, backend: str, ranks: int, name: str) -> str:
    """A script that reruns ``loop`` and prints how it went."""
    text = "\n".join(outcome.describe().splitlines()[:40]).replace('"""', "'''")
    return REPRO.format(seed=loop.seed, backend=backend, kind=outcome.kind, step=outcome.step,
                        description=loop.describe(), outcome=text, name=name, root=ROOT,
                        fields=dataclasses.asdict(loop), source=_raw(loop.source()), ranks=ranks)


def _raw(text: str) -> str:
    q = "'" * 3
    if q in text or text.endswith("\\"):
        return repr(text)
    return f"r{q}\\\n{text}{q}"


def campaign(n: int, seed: int = 0, jobs: int = 1, backend: str = "eager", ranks: int = 1,
             out: str | None = None, minimize_s: float = 60.0, minutes: float | None = None,
             vs_torch_compile: bool = False, log=sys.stdout) -> dict:
    """Run loops ``seed`` .. ``seed + n - 1``; print and return the counts, the signatures
    with their seeds, the failing outcomes and the repro files."""
    start = time.monotonic()
    counts = collections.Counter({k: 0 for k in KINDS})
    flags = collections.Counter(unsteady=0, eager=0)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    eager_reasons: dict[str, list[int]] = collections.defaultdict(list)   # why magpy ran steps eagerly
    failing: dict[int, Outcome] = {}
    files = []
    if out:
        os.makedirs(out, exist_ok=True)
    seeds = iter(range(seed, seed + n))
    done = 0
    with concurrent.futures.ThreadPoolExecutor(max(jobs, 1)) as pool:
        pending = {}

        def submit():
            if minutes is not None and time.monotonic() - start > 60 * minutes:
                return
            s = next(seeds, None)
            if s is not None:
                pending[pool.submit(run, generate(s), backend, ranks, None, None, vs_torch_compile)] = s

        for _ in range(max(jobs, 1)):
            submit()
        while pending:
            finished, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                s = pending.pop(future)
                outcome = future.result()
                done += 1
                counts[outcome.kind] += 1
                flags["unsteady"] += outcome.unsteady
                if isinstance(outcome.stats, dict) and outcome.stats.get("eager_runs"):
                    flags["eager"] += 1
                    reasons = outcome.stats.get("break_reasons") or ["?"]
                    eager_reasons[_norm(reasons[-1])[:110]].append(s)
                if outcome.kind not in ("ok", "skipped"):
                    groups[outcome.signature].append(s)
                    failing[s] = outcome
                if done % 50 == 0:
                    print(f"[{done}/{n} {time.monotonic() - start:.0f}s] " + _counts(counts, flags), file=log,
                          flush=True)
                submit()
    if minutes is not None and done < n:
        print(f"stopped after {minutes} minutes: {done} of {n} loops run", file=log, flush=True)
    elapsed = time.monotonic() - start
    if out:
        for s in sorted(failing):
            if failing[s].kind in FAILURES:
                shrink = groups[failing[s].signature].index(s) < MINIMISED_PER_SIGNATURE
                files.append(_save(out, s, failing[s], backend, ranks, shrink, minimize_s, log))
    report = summary(counts, flags, groups, failing, elapsed, backend, ranks, eager_reasons)
    print(report, file=log, flush=True)
    if out:
        with open(os.path.join(out, "summary.txt"), "w") as f:
            f.write(report)
    return {"counts": dict(counts), "flags": dict(flags), "groups": dict(groups), "failing": failing,
            "files": files, "seconds": elapsed, "loops": done}


def _save(out: str, seed: int, outcome: Outcome, backend: str, ranks: int, shrink: bool, minimize_s: float,
          log) -> str:
    loop = generate(seed)
    if shrink and outcome.kind in ("wrong", "crash"):
        print(f"minimizing loop {seed} ({outcome.signature[:80]})", file=log, flush=True)
        loop, outcome = minimize(loop, outcome, backend, minimize_s, ranks)
    name = os.path.join(out, f"repro_{outcome.kind}_{seed}.py")
    with open(name, "w") as f:
        f.write(repro_text(loop, outcome, backend, ranks, name))
    return name


def _counts(counts, flags) -> str:
    return " ".join(f"{k}={counts[k]}" for k in KINDS) + f" | unsteady={flags['unsteady']} " \
        f"eager-runs={flags['eager']}"


def _norm(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", text)


def summary(counts, flags, groups, failing, elapsed: float, backend: str, ranks: int,
            eager_reasons: dict | None = None) -> str:
    """The campaign's figures, its failures grouped by signature (most frequent first), why
    magpy ran steps of some loops eagerly (not failures), and the first failing loops in full."""
    lines = [f"loops={sum(counts.values())} {_counts(counts, flags)} time={elapsed:.0f}s "
             f"(backend {backend}, ranks {ranks}, magpy {magpy.__version__}, torch {torch.__version__})"]
    for sig, seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"{len(seeds):5d}  {sig[:200]}\n       seeds {seeds[:10]}")
    if eager_reasons:
        lines.append("loops with steps magpy ran eagerly (not failures), by the last reason:")
        for reason, seeds in sorted(eager_reasons.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"{len(seeds):5d}  {reason}\n       seeds {seeds[:10]}")
    shown = [s for s in sorted(failing) if failing[s].kind in FAILURES][:SHOWN]
    for s in shown:
        lines.append(f"\n--- loop {s}: {generate(s).describe()}")
        lines += ["    " + line for line in failing[s].describe(detail_lines=8).splitlines()[:20]]
        lines.append(f"    (python -m tests.fuzz_train --show {s} prints its source)")
    return "\n".join(lines) + "\n"
