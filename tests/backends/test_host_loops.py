"""Counted loops driven from the host (magpy.backends.gpu.host_loops), checked on the CPU.

On a GPU a ``for`` loop's ``while_loop`` would read its condition back every step; lowered,
it runs its body ``steps`` times from Python, and on CUDA replays one captured step per step.
Here the lowering is turned on for CPU tensors (``host_loops.DEVICES``), and the capture is
simulated (a replay reruns the step on the same buffers, as a CUDA graph does), so the whole
path runs in CI: results against eager on first, repeated and fresh calls, after the weights
change, and the replay's state machine (warm-up, capture, room for longer loops, plain runs
where a capture would be wrong).  tests/backends/test_cuda.py runs the real thing on a GPU.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import magpy
from benchmarks.control_flow import LSTMLanguageModel
from magpy.backends.gpu import cuda_graphs, host_loops
from tests.harness.compile_harness import MOCK, MONITOR, Step, after, check_compiled


class Spy:
    """Counts what the lowered loops did: plain runs, captures, replays."""

    def __init__(self):
        self.plain = self.captures = self.replays = 0


@pytest.fixture
def on_cpu(counting, monkeypatch):
    """Lower counted loops of CPU tensors; count the host loops' plain runs."""
    monkeypatch.setattr(host_loops, "DEVICES", frozenset({"cpu", "cuda"}))
    return counting


@pytest.fixture
def counting(monkeypatch):
    """Count the host loops' plain runs."""
    spy = Spy()
    plain = host_loops.HostLoop._plain

    def counting(self, *args):
        spy.plain += 1
        return plain(self, *args)
    monkeypatch.setattr(host_loops.HostLoop, "_plain", counting)
    return spy


class SimulatedStep:
    """A captured step on the CPU: replay() runs the step again on the same buffers."""

    def __init__(self, fn, spy):
        self.fn, self.spy = fn, spy
        fn()

    def replay(self):
        self.spy.replays += 1
        self.fn()


@pytest.fixture
def simulated(on_cpu, monkeypatch):
    """Host loops that take CPU tensors for CUDA ones: warm-up, capture (simulated), replays."""
    spy = on_cpu
    init = host_loops.HostLoop.__init__

    def as_cuda(self, body, layout):
        init(self, body, dataclasses.replace(layout, device="cuda"))

    def capture(fn, inputs):
        spy.captures += 1
        return SimulatedStep(fn, spy), None
    monkeypatch.setattr(host_loops.HostLoop, "__init__", as_cuda)
    monkeypatch.setattr(cuda_graphs, "captured", capture)
    monkeypatch.setattr(torch.cuda, "get_rng_state", torch.get_rng_state)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    return spy


def lstm_lm():
    m = LSTMLanguageModel(2, vocab=50, hidden=16).eval()
    return m, m


def tokens(n):
    return (torch.randint(0, 50, (n, 3)),)


def _calls(lengths, expect):
    return [Step(f"length {n}", (lambda st, n=n: tokens(n)), seed=i + 1, expect=e, ctx=torch.no_grad)
            for i, (n, e) in enumerate(zip(lengths, expect))]


def _scale_weights(m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.9)


LENGTHS = [5, 7, 7, 12, 3, 40, 6]
EXPECT = [MONITOR, MONITOR] + [MOCK] * 5


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_lstm_language_model_runs_its_loops_from_the_host(on_cpu, backend, monkeypatch):
    # (the autopilot's paired trial would run the loops of both versions on its calls)
    monkeypatch.setattr(magpy.config, "autopilot", False)
    steps = _calls(LENGTHS, EXPECT) + [after(_scale_weights, expect=MOCK, ctx=torch.no_grad)]
    trace = check_compiled(lstm_lm, steps, backend=backend, rtol=1e-5, atol=1e-5)
    assert magpy.stats(trace.compiled).records == 2
    # both layers' loops, on every mock run (recording runs run the program's own loop)
    assert on_cpu.plain == 2 * (len(steps) - 2)


def test_cpu_loops_stay_operators_by_default(counting):
    assert "cpu" not in host_loops.DEVICES
    trace = check_compiled(lstm_lm, _calls([5, 7, 9], [MONITOR, MONITOR, MOCK]))
    assert magpy.stats(trace.compiled).records == 2
    assert counting.plain == 0


def test_loops_under_autograd_are_not_lowered(on_cpu):
    def build():
        cell = nn.GRUCell(4, 6)

        def f(x, h):
            for xt in x:
                h = cell(xt, h)
            return h
        return f, cell
    steps = [Step(f"length {n}", (lambda st, n=n: (torch.randn(n, 2, 4), torch.randn(2, 6))), seed=n,
                  expect=e) for n, e in [(3, MONITOR), (4, MONITOR), (6, MOCK)]]
    check_compiled(build, steps, fullgraph=False)
    assert on_cpu.plain == 0


def _stores():
    def f(x, y):
        out = x.new_zeros(x.size(0), 4)
        acc = y
        for t in range(x.size(0)):
            acc = torch.tanh(acc + x[t])
            out[t] = acc
        return out, acc
    return f, None


def _strided_range():
    def f(x, y):
        outs = []
        for t in range(0, x.size(0), 2):
            y = torch.tanh(y + x[t])
            outs.append(y)
        return torch.stack(outs), y
    return f, None


@pytest.mark.parametrize("program", [_stores, _strided_range], ids=["stores", "strided_range"])
def test_range_loops(on_cpu, program):
    lengths = [(5, MONITOR), (8, MONITOR), (11, MOCK), (3, MOCK)]
    steps = [Step(f"length {n}", (lambda st, n=n: (torch.randn(n, 4), torch.randn(4))), seed=n, expect=e,
                  ctx=torch.no_grad) for n, e in lengths]
    check_compiled(program, steps)
    assert on_cpu.plain == 2


def test_replays_one_captured_step_per_step(simulated):
    lengths = [5, 7, 7, 12, 3, 40, 6, 9]
    steps = _calls(lengths, [MONITOR, MONITOR] + [MOCK] * 6) + [after(_scale_weights, expect=MOCK,
                                                                      ctx=torch.no_grad)]
    trace = check_compiled(lstm_lm, steps, rtol=1e-5, atol=1e-5)
    assert magpy.stats(trace.compiled).records == 2
    # per layer: the first mock run is plain (the warm-up), the second captures with room for
    # 16 steps, 40 needs room again (64), the rest replay in one of those
    assert simulated.plain == 2
    assert simulated.captures == 2 * 2
    assert simulated.replays == 2 * sum([12, 3, 40, 6, 9, 9])


def test_a_moved_weight_captures_again(simulated):
    m, _ = lstm_lm()
    c = magpy.compile(m)
    xs = [tokens(n)[0] for n in (4, 5, 6, 6, 5)]
    with torch.no_grad():
        for x in xs[:4]:
            assert torch.allclose(c(x), m(x), atol=1e-6)
        captures = simulated.captures
        m.layers[0].cell.weight_hh = nn.Parameter(m.layers[0].cell.weight_hh * 0.5)   # a new tensor
        assert torch.allclose(c(xs[4]), m(xs[4]), atol=1e-6)
    assert simulated.captures > captures


def test_a_tensor_each_call_makes_is_copied_into_the_capture(simulated):
    """A decoder-like loop reading a tensor made before it on each call (at a new address every
    call): copied into the capture's own buffer, not captured again on every call."""
    def build():
        cell, proj = nn.GRUCell(4, 6), nn.Linear(4, 6)

        def f(x, h):
            memory = proj(x.mean(0))   # (made by each call, read by every step)
            for xt in x:
                h = cell(xt, h) + memory
            return h
        return f, cell
    lengths = [3, 4, 6, 5, 7, 6, 4, 5]
    steps = [Step(f"length {n}", (lambda st, n=n: (torch.randn(n, 2, 4), torch.randn(2, 6))), seed=i,
                  expect=MONITOR if i < 2 else MOCK, ctx=torch.no_grad) for i, n in enumerate(lengths)]
    check_compiled(build, steps)
    assert simulated.captures == 1 and simulated.plain == 1
    assert simulated.replays == sum(lengths[3:])
