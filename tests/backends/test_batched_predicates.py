"""Branch predicates read back together (magpy.backends.gpu.batched_predicates), checked on the CPU.

On a GPU each tensor ``if`` would drain the launch queue to read its predicate; gathered, a
run of them costs one read.  Here gathering is turned on for CPU tensors
(``batched_predicates.DEVICES``) so CI runs it: results against eager (first, repeated and fresh
calls, after the weights change), which conds are gathered, and where a group must end (a
predicate reading an earlier cond's result, an in-place write in between).
"""
from __future__ import annotations

import pytest
import torch

import magpy
from benchmarks.control_flow import BlockDrop, image
from magpy.backends.gpu import batched_predicates
from tests.harness.compile_harness import MOCK, MONITOR, Step, after, check_compiled


@pytest.fixture
def gathering(monkeypatch):
    """Gather predicates of CPU tensors; the number of conds each gathered graph reads at once."""
    monkeypatch.setattr(batched_predicates, "DEVICES", frozenset({"cpu", "cuda"}))
    groups = []
    gathered = batched_predicates.gathered

    def counting(gm):
        out = gathered(gm)
        if out is not gm:
            stacks = [n for n in out.graph.nodes if n.target is torch.stack]
            groups.append(len(stacks[0].args[0]))
        return out
    monkeypatch.setattr(batched_predicates, "gathered", counting)
    return groups


def blockdrop():
    torch.manual_seed(0)
    m = BlockDrop(4).eval()
    return m, m


def _images(seeds, expect):
    return [Step(f"image {s}", (lambda st, s=s: (image(s),)), expect=e, ctx=torch.no_grad)
            for s, e in zip(seeds, expect)]


def _scale(m):
    with torch.no_grad():
        m.policy[-1].bias.add_(0.3)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_blockdrop_reads_its_gates_at_once(gathering, backend):
    steps = _images(range(6), [MONITOR] + [MOCK] * 5) + [after(_scale, expect=MOCK, ctx=torch.no_grad)]
    trace = check_compiled(blockdrop, steps, backend=backend, rtol=1e-5, atol=1e-5)
    assert magpy.stats(trace.compiled).records == 1
    assert gathering and set(gathering) == {4}   # (the twin and the compiled graph: all four gates)


def test_cpu_predicates_are_not_gathered_by_default(monkeypatch):
    assert "cpu" not in batched_predicates.DEVICES
    seen = []
    gathered = batched_predicates.gathered

    def spy(gm):
        out = gathered(gm)
        seen.append(out is not gm)
        return out
    monkeypatch.setattr(batched_predicates, "gathered", spy)
    check_compiled(blockdrop, _images(range(3), [MONITOR, MOCK, MOCK]))
    assert seen and not any(seen)


def _chained():
    def f(x, w):
        if x.sum() > 0:
            x = x * 2
        if x.mean() > 0.1:   # (reads the first cond's result: read after it)
            x = x - 1
        if w[0] > 0:
            x = x + w
        return x
    return f, None


def _written_between():
    def f(x, g):
        v = g.view(3)
        if g[0] > 0:
            x = x * 2
        v.mul_(-1)             # (the next predicates read g after this write through a view)
        if g[1] > 0:
            x = x + 1
        if g[2] > 0:
            x = x - 1
        return x
    return f, None


def _calls(make, n=5):
    return [Step(f"call {i}", (lambda st, i=i: make(i)), seed=i, expect=MONITOR if i == 0 else MOCK,
                 ctx=torch.no_grad) for i in range(n)]


def test_a_predicate_reading_an_earlier_conds_result_is_read_after_it(gathering):
    check_compiled(_chained, _calls(lambda i: (torch.randn(4) + (i % 3 - 1), torch.randn(4))))
    assert not gathering   # (the first two cannot be read together; a group of one is no group)


def test_a_write_in_between_ends_the_group(gathering):
    check_compiled(_written_between, _calls(lambda i: (torch.randn(4), torch.randn(3))))
    assert not gathering   # (the first cond's group ends at v.mul_: one cond)
