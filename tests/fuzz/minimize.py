"""Shrink a failing program while it fails the same way (same outcome signature).

A greedy delta-debugging pass to a fixpoint, within a time budget: drop the calls after the
one that failed, drop single calls and single statements of the calls' snippets, drop single
statements of the body (at any depth), replace a compound statement by its first block.
"""
from __future__ import annotations

import copy
import time

from tests.fuzz.program import Program
from tests.fuzz.runner import Outcome, check, magpy_compiled, time_limit_s


def minimize(program: Program, outcome: Outcome, budget_s: float = 60.0,
             compiler=magpy_compiled) -> tuple[Program, Outcome]:
    """The smallest program found that fails with ``outcome``'s signature (under
    ``compiler``, see :func:`runner.check`), and its outcome."""
    deadline = time.monotonic() + budget_s
    best, best_outcome = program, outcome
    if outcome.call >= 0:
        best = _with(best, calls=best.calls[:outcome.call + 1])

    def fails(candidate: Program):
        nonlocal best, best_outcome
        got = check(candidate.source(), candidate.calls, candidate.target, limit_s=time_limit_s() / 2,
                    compiler=compiler)
        if got.signature == outcome.signature:
            best, best_outcome = candidate, got
            return True
        return False

    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for candidate in _candidates(best):
            if time.monotonic() >= deadline:
                break
            if fails(candidate):
                changed = True
                break
    return best, best_outcome


def _with(program: Program, **fields) -> Program:
    new = copy.deepcopy(program)
    for name, value in fields.items():
        setattr(new, name, value)
    return new


def _candidates(program: Program):
    """Smaller variants of ``program``, biggest cuts first."""
    calls = program.calls
    for i in range(len(calls) - 1, 0, -1):
        yield _with(program, calls=calls[:i] + calls[i + 1:])
    for i, snippet in enumerate(calls):
        stmts = snippet.split("; ")
        for j in range(len(stmts) - 1):   # the last sets ARGS
            yield _with(program, calls=calls[:i] + ["; ".join(stmts[:j] + stmts[j + 1:])] + calls[i + 1:])
    for index, (_, node) in enumerate(program.nodes()):
        if not node.keep:
            yield _edit(program, index, lambda body, node: body.remove(node))
        if node.parts and not node.parts[0][0].startswith("while"):
            yield _edit(program, index, _unwrap)
    if program.module:
        yield _with(program, module=False)


def _edit(program: Program, index: int, change) -> Program:
    new = copy.deepcopy(program)
    for i, (body, node) in enumerate(new.nodes()):
        if i == index:
            change(body, node)
            break
    return new


def _unwrap(body: list, node) -> None:
    """Put a compound statement's first block (and its leading text) in its place."""
    at = body.index(node)
    lead = [type(node)(node.text)] if node.text else []
    body[at:at + 1] = lead + node.parts[0][1]
