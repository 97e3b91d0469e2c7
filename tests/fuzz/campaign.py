"""A fuzz campaign: many programs, counted and grouped by failure signature, each failing
program written as a standalone repro (the first ones of each signature minimised)."""
from __future__ import annotations

import collections
import multiprocessing
import os
import sys
import time
import warnings

import torch

import magpy
from tests.fuzz import runner
from tests.fuzz.generator import generate
from tests.fuzz.minimize import minimize
from tests.fuzz.program import Program
from tests.fuzz.runner import KINDS, Outcome, check

MINIMISED_PER_SIGNATURE = 2
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPRO = '''\
"""magpy fuzz repro: program seed {seed}, {kind} at call {call}.

{signature}

{detail}

Run: python {name}
"""
import sys

sys.path[:0] = [{root!r}]   # the repository whose magpy and tests.fuzz ran it
from tests.fuzz.runner import check, use_backend  # noqa: E402

SOURCE = {source}

CALLS = [
{calls}
]

if __name__ == "__main__":
    use_backend({backend!r})
    outcome = check(SOURCE, CALLS, {target!r})
    print(outcome.describe())
    sys.exit(outcome.kind != "ok")
'''


PROFILE = "default"   # the generator's profile in this process (set by campaign(), inherited by workers)


def run_one(seed: int) -> tuple[int, Outcome]:
    """Generate and check the program of ``seed``."""
    program = generate(seed, PROFILE)
    return seed, check(program.source(), program.calls, program.target)


def repro_text(program: Program, outcome: Outcome, name: str) -> str:
    """A standalone script that reruns ``program`` and prints how it went."""
    calls = "\n".join(f"    {c!r}," for c in program.calls)
    detail = "\n".join(line for line in outcome.detail.splitlines()[-40:]).replace('"""', "'''")
    return REPRO.format(seed=program.seed, kind=outcome.kind, call=outcome.call, signature=outcome.signature,
                        detail=detail, name=name, root=ROOT, source=_raw(program.source()), calls=calls,
                        target=program.target, backend=runner.BACKEND)


def _raw(text: str) -> str:
    """``text`` as a raw triple-quoted literal (readable in the repro), else its repr."""
    q = "'" * 3
    if q in text or text.endswith("\\"):
        return repr(text)
    return f"r{q}\\\n{text}{q}"


def _quiet_worker() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def campaign(n: int, seed: int = 0, jobs: int = 1, out: str | None = None, minimize_s: float = 60.0,
             profile: str = "default", minutes: float | None = None, log=sys.stdout,
             backend: str = "eager") -> dict:
    """Run programs ``seed`` .. ``seed + n - 1`` of the generator's ``profile`` through magpy
    with ``backend`` (:func:`runner.use_backend`); print counts and signatures; return the
    counts, the signatures with their seeds and the repro files.  With ``minutes``, stop
    starting programs after that long (the summary covers those run)."""
    global PROFILE
    PROFILE = profile
    runner.use_backend(backend)
    start = time.monotonic()
    counts = collections.Counter({k: 0 for k in KINDS})
    groups: dict[str, list[int]] = collections.defaultdict(list)
    files = []
    eager_runs = 0
    if out:
        os.makedirs(out, exist_ok=True)
    _quiet_worker()
    seeds = range(seed, seed + n)
    if jobs > 1:
        pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_quiet_worker)
        results = pool.imap_unordered(run_one, seeds, chunksize=4)
    else:
        pool, results = None, map(run_one, seeds)
    done = 0
    for s, outcome in results:
        done += 1
        counts[outcome.kind] += 1
        eager_runs += outcome.eager_runs
        if outcome.kind != "ok":
            groups[outcome.signature].append(s)
            if out:
                files.append(_save(out, s, outcome, len(groups[outcome.signature]) <= MINIMISED_PER_SIGNATURE,
                                   minimize_s))
        if done % 250 == 0:
            print(f"[{done}/{n} {time.monotonic() - start:.0f}s] " + _counts(counts), file=log, flush=True)
        if minutes is not None and time.monotonic() - start > 60 * minutes:
            print(f"stopping after {minutes} minutes: {done} of {n} programs run", file=log, flush=True)
            break
    if pool is not None:
        pool.terminate()
    elapsed = time.monotonic() - start
    report = summary(counts, groups, elapsed, eager_runs)
    print(report, file=log, flush=True)
    if out:
        with open(os.path.join(out, "summary.txt"), "w") as f:
            f.write(report)
    return {"counts": dict(counts), "groups": dict(groups), "files": files, "seconds": elapsed}


def _save(out: str, seed: int, outcome: Outcome, shrink: bool, minimize_s: float) -> str:
    program = generate(seed, PROFILE)
    if shrink and outcome.kind in ("wrong", "crash", "raise-mismatch", "fallback"):
        program, outcome = minimize(program, outcome, minimize_s)
    name = os.path.join(out, f"repro_{outcome.kind}_{seed}.py")
    with open(name, "w") as f:
        f.write(repro_text(program, outcome, name))
    return name


def _counts(counts) -> str:
    return " ".join(f"{k}={counts[k]}" for k in KINDS)


def summary(counts, groups, elapsed: float, eager_runs: int) -> str:
    """The campaign's figures and its failures grouped by signature, most frequent first."""
    lines = [f"programs={sum(counts.values())} {_counts(counts)} magpy-eager-runs={eager_runs} "
             f"time={elapsed:.0f}s (magpy {magpy.__version__}, torch {torch.__version__}, "
             f"backend {runner.BACKEND}, background_compile={magpy.config.background_compile}, "
             f"autopilot={magpy.config.autopilot}, profile {PROFILE})"]
    for sig, seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"{len(seeds):5d}  {sig}\n       seeds {seeds[:8]}")
    return "\n".join(lines) + "\n"
