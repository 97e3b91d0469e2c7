"""Simplify a failing loop while it fails the same way.

A loop is a value per dimension, so shrinking it is trying the simplest value of each
dimension in turn (no scheduler, no clipping, no autocast, one micro-batch, a plain module,
no process group, SGD for-loop, ...) and keeping every change after which the loop still
fails the same way (the same kind; for a crash the same signature), to a fixpoint within a
time budget; first the steps after the failing one are cut.
"""
from __future__ import annotations

import dataclasses
import time

from tests.fuzz_train.generator import Loop
from tests.fuzz_train.runner import Outcome, run

# Each dimension's simplest values, simplest first (what a person would try by hand).
SIMPLEST = {
    "wrapper": ("plain",), "process_group": (False,), "scheduler": ("none",), "clip": ("none",),
    "amp": ("none",), "ema": ("none",), "eval_every": (0,), "add_group": (0,), "frozen": (False,),
    "decay_groups": (False,), "dropout": (False,), "accum": (1, 2), "accum_inner": (False,),
    "opt_extra": ({},), "fsdp_bf16": (False,), "reshard": (True,), "compiled": ("step",),
    "model": ("mlp",), "task": ("regression",), "optimizer": ("SGD", "SGD-momentum", "Adam"),
    "impl": ("forloop", "foreach"), "zero_where": ("first",), "zero_how": ("opt.zero_grad()",),
    "sched_in_step": (True,), "ema_buffers": (False,), "background": (False,), "autopilot": (True,),
    "frozen_in_opt": (True,), "ddp_compiled": ("inner",),
}


def same_failure(a: Outcome, b: Outcome) -> bool:
    """``b`` fails as ``a`` does: the same kind, and for a crash the same signature."""
    if a.kind != b.kind:
        return False
    return a.kind != "crash" or a.signature == b.signature


def minimize(loop: Loop, outcome: Outcome, backend: str = "eager", budget_s: float = 60.0,
             ranks: int = 1, log=None, sabotage: str | None = None) -> tuple[Loop, Outcome]:
    """The simplest loop found that fails as ``outcome`` does, and its outcome
    (``sabotage``: as :func:`runner.run`'s, for the minimizer's own test)."""
    deadline = time.monotonic() + budget_s
    best, best_outcome = loop, outcome

    def attempt(candidate: Loop) -> bool:
        nonlocal best, best_outcome
        if candidate == best or time.monotonic() >= deadline:
            return False
        got = run(candidate, backend=backend, ranks=ranks, sabotage=sabotage)
        if same_failure(outcome, got):
            if log:
                print(f"  minimize: kept {_changed(best, candidate)}", file=log, flush=True)
            best, best_outcome = candidate, got
            return True
        return False

    if outcome.step >= 0 and outcome.step + 1 < loop.steps:
        attempt(dataclasses.replace(loop, steps=outcome.step + 1))
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for name, values in SIMPLEST.items():
            for value in values:
                if getattr(best, name) == value:
                    break
                if attempt(dataclasses.replace(best, **{name: value})):
                    changed = True
                    break
        for key in list(best.opt_extra):
            extra = {k: v for k, v in best.opt_extra.items() if k != key}
            changed |= attempt(dataclasses.replace(best, opt_extra=extra))
        if best_outcome.step >= 0 and best_outcome.step + 1 < best.steps:
            changed |= attempt(dataclasses.replace(best, steps=best_outcome.step + 1))
    return best, best_outcome


def _changed(a: Loop, b: Loop) -> str:
    return ", ".join(f"{f.name}={getattr(b, f.name)!r}" for f in dataclasses.fields(Loop)
                     if getattr(a, f.name) != getattr(b, f.name))
