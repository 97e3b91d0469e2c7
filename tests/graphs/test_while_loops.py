"""Control flow operators: a ``while`` loop on tensor data recorded as one ``torch.while_loop``.

Every program runs through ``tests.harness.compile_harness.check_compiled`` (outputs, arguments and
program state compared with eager after each call; per-call MONITOR/MOCK expectations) with
inputs that make the loop run a different number of times on each call, none included.
Where the loop can be an operator, the first call that enters it records and every later
call, whatever its trip count, is a mock run of one graph.  Where it cannot (the body
prints, counts in a Python variable, keeps the tensor of the iteration before), the loop's
test is a graph break as before: still eager's results.
"""
import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset(), magpy.config restored
)

WHILE = "torch.while_loop"


def _counts(compiled):
    st = magpy.stats(compiled)
    return st.monitor_runs, st.mock_runs, st.eager_runs, st.graphs_per_call


def _calls(make, scales, first=MONITOR):
    """One call per scale (inputs ``make(scale)``): the first records, the rest are mocks."""
    return [Step(f"call {i} (scale {s})", (lambda st, s=s: make(s)), seed=i + 1,
                 expect=first if i == 0 else MOCK) for i, s in enumerate(scales)]


# ---------------------------------------------------------------------------- programs

def _newton_sqrt(x):
    # Iterates until converged: as many times as the input needs; none for ones.
    y = x.clone()
    err = (y * y - x).abs().max()
    while err > 1e-4:
        y = 0.5 * (y + x / y)
        err = (y * y - x).abs().max()
    return y


def _halve_until_small(x):
    # ``while not`` (the jumps' other polarity); two carried tensors, one only a counter.
    steps = torch.zeros(())
    while not x.norm() < 1:
        x = x / 2
        steps = steps + 1
    return x, steps


def _nested_if(x):
    # A tensor if inside the body: a cond inside the loop's body graph.
    while x.sum() > 1:
        if x.max() > 4:
            x = x * 0.5
        else:
            x = x - 0.25
    return x


class _Refine(nn.Module):
    """Applies a layer until the update is small: the body reads parameters (guarded)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 8)
        with torch.no_grad():
            self.layer.weight.mul_(0.2)

    def forward(self, x):
        h = torch.tanh(self.layer(x))
        delta = h.abs().max()
        while delta > 1e-3:
            new = torch.tanh(self.layer(x) + 0.5 * h)
            delta = (new - h).abs().max()
            h = new
        return h


class _PerBlock(nn.Module):
    """A while loop in each block of a loop over blocks."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            while x.abs().max() > 2:
                x = x * 0.75
        return x


def _positive(s):
    return (torch.rand(6) * s + 0.5,)


def _vector(s):
    return (torch.randn(5) * s,)


def _wide(s):
    return (torch.randn(3, 8) * s,)


def _blocks(s):
    return (torch.randn(2, 4) * s,)


LOOPS = [
    (lambda: (_newton_sqrt, None), _positive, [10, 1, 100, 0, 3, 1000]),
    (lambda: (_halve_until_small, None), _vector, [10, 0.01, 300, 1, 0.1]),
    (lambda: (_nested_if, None), _positive, [4, 0.1, 8, 1, 0.05]),
    (lambda: (lambda m: (m, m))(_Refine()), _wide, [1, 3, 0.1, 10]),
    (lambda: (lambda m: (m, m))(_PerBlock()), _blocks, [5, 1, 0.1, 20]),
]


@pytest.mark.parametrize("build,make,scales", LOOPS,
                         ids=["newton", "while-not", "nested-if", "module", "per-block"])
def test_every_trip_count_shares_one_record(build, make, scales):
    with torch.no_grad():
        trace = check_compiled(build, _calls(make, scales))
    n = len(scales)
    assert _counts(trace.compiled) == (1, n - 1, 0, 1)
    assert magpy.stats(trace.compiled).graph_count == 1


def test_trip_counts_really_differ():
    # (The test above would prove little if every call looped as often.)
    def trips(x):
        y, n = x.clone(), 0
        while (y * y - x).abs().max() > 1e-4:
            y, n = 0.5 * (y + x / y), n + 1
        return n
    counts = {trips(_positive(s)[0]) for s in (10, 1, 100, 0, 3, 1000) for _ in range(1)}
    assert 0 in {trips(torch.ones(6))} and len(counts) >= 3


def test_no_trip_gives_the_tensor_itself():
    # The loop never runs: the program keeps what it had before it (here: an argument).
    def halve(x):
        while x.norm() > 1:
            x = x / 2
        return x
    steps = [Step("loops", lambda st: (torch.full((4,), 3.0),), expect=MONITOR),
             Step("no trip", lambda st: (torch.full((4,), 0.1),), expect=MOCK),
             Step("loops again", lambda st: (torch.full((4,), 30.0),), expect=MOCK)]
    trace = check_compiled(lambda: (halve, None), steps)
    x = torch.full((4,), 0.1)
    assert trace.compiled(x) is x


def _skips_first(x):
    # ``x`` is an argument: when the loop does not run, the result is ``x`` itself.
    while x.norm() > 1:
        x = x * 0.5
    return x


def test_a_first_call_that_does_not_enter_the_loop_records_it_too():
    # The recording run did not enter the loop: the body ran only in the forks, and the
    # program kept its tensor (an argument: ``out is x``) while the graph has the loop.
    steps = [Step(f"call {i} (scale {s})", (lambda st, s=s: (torch.rand(4) * s,)), seed=i,
                  expect=MONITOR if i == 0 else MOCK) for i, s in enumerate([0.1, 10, 0.2, 100])]
    trace = check_compiled(lambda: (_skips_first, None), steps)
    assert _counts(trace.compiled) == (1, 3, 0, 1)
    x = torch.full((4,), 0.1)
    assert trace.compiled(x) is x


def test_loop_under_inductor():
    trace = check_compiled(lambda: (_newton_sqrt, None), _calls(_positive, [10, 0, 100, 1]),
                           backend="inductor", rtol=1e-5, atol=1e-5)
    assert _counts(trace.compiled) == (1, 3, 0, 1)


def test_switched_off_each_trip_count_records():
    magpy.config.control_flow = False
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _calls(_positive, [10, 100, 1000])]
    trace = check_compiled(lambda: (_newton_sqrt, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).monitor_runs == 3


def test_explain_lists_the_loop_with_its_line():
    e = magpy.explain(_newton_sqrt, torch.rand(6) * 10 + 1)
    line = _newton_sqrt.__code__.co_firstlineno + 4
    assert e.graph_count == 1 and not e.break_reasons
    assert f"while at {__file__}:{line} (_newton_sqrt): {WHILE}" in str(e)


def test_a_backend_without_control_flow_operators_keeps_the_break():
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _calls(_positive, [10, 100])]
    trace = check_compiled(lambda: (_newton_sqrt, None), steps, backend="torchscript", fullgraph=False,
                           rtol=1e-5, atol=1e-5)
    assert magpy.stats(trace.compiled).breaks


# ---------------------------------------------------------------------------- still breaks

def _prints(x):
    while x.norm() > 1:
        print("halving")
        x = x / 2
    return x


def _counts_in_python(x):
    n = 0
    while x.norm() > 1:
        x = x / 2
        n += 1
    return x, n


def _keeps_the_previous(x):
    prev = x * 2
    while (x - prev).abs().max() > 1e-3:
        prev = x
        x = 0.5 * (x + 1 / x)
    return x


def _appends(x, out):
    while x.norm() > 1:
        x = x / 2
        out.append(x)
    return x


def _returns_early(x):
    while x.norm() > 1:
        x = x / 2
        if x.sum() < -100:
            return x
    return x


STILL_BREAKS = [
    (_prints, "print"),
    (_counts_in_python, "an iteration changes a Python value (int)"),
    (_keeps_the_previous, "an iteration sets a variable to a tensor from before it"),
    (_appends, "list.append"),
]


@pytest.mark.parametrize("program,why", STILL_BREAKS, ids=lambda p: getattr(p, "__name__", "")[1:])
def test_a_body_that_cannot_be_an_operator_is_a_break(program, why):
    extra = ([],) if program is _appends else ()
    steps = [Step(f"call {i}", (lambda st, s=s: (torch.rand(4) * s + 0.5,) + extra), seed=i, expect=ANY)
             for i, s in enumerate([10, 100, 1])]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0
    assert any(why in reason for reason in st.breaks), st.breaks


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_loop_under_autograd_is_an_operator(backend):
    # Its gradients are eager's, whether the loop runs or not (0 steps for s = 0.01 and 0.5).
    # With Inductor the graph runs as backend eager runs it (Inductor's backward of a
    # while_loop is not eager's): one record for every trip count still.
    magpy.config.background_compile = False
    compiled = magpy.compile(_halve_until_small, backend=backend)
    for s in [10, 100, 0.01, 1000, 3, 0.5, 50]:
        x = torch.randn(5) * s
        x_e, x_c = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_e, out_c = _halve_until_small(x_e), compiled(x_c)
        assert all(map(torch.equal, out_e, out_c)) and out_c[0].requires_grad
        (out_e[0] * torch.arange(5)).sum().backward()
        (out_c[0] * torch.arange(5)).sum().backward()
        assert torch.equal(x_e.grad, x_c.grad), s
    stats = magpy.stats(compiled)
    assert stats.records == 1 and not stats.breaks


def test_a_loop_that_returns_from_its_body_is_a_break():
    steps = [Step(f"call {i}", (lambda st, s=s: (torch.rand(4) * s + 0.5,)), seed=i, expect=ANY)
             for i, s in enumerate([10, 100])]
    trace = check_compiled(lambda: (_returns_early, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0


def _reads_its_own_variable_after(x):
    y = x * 1
    while y.norm() > 1:
        z = y * 0.5
        y = z
    return z   # unbound (UnboundLocalError) when the loop did not run


def test_a_variable_only_the_loop_sets_read_after_it_is_a_break():
    # The operator cannot leave ``z`` unbound when the loop does not run: reading it after
    # the loop ends that recording, and the loop is a break from then on.
    steps = [Step(f"call {i} (scale {s})", (lambda st, s=s: (torch.rand(4) * s,)), seed=i, expect=ANY)
             for i, s in enumerate([10, 0.1, 100, 0.2])]
    trace = check_compiled(lambda: (_reads_its_own_variable_after, None), steps, fullgraph=False)
    assert trace.results[1] == (None, None)   # both raised (the harness compared the exceptions)
    assert list(magpy.stats(trace.compiled).breaks) == ["Tensor.__bool__ reads tensor data into Python"]


def _size_after(x):
    y = x * 1
    while y.norm() > 1:
        y = y * 0.5
    return torch.ones(y.size(0)) * 3   # a size of the loop's output, read in Python


def test_a_size_of_the_loops_output_stays_symbolic():
    # The run's loop made y unobserved: its twin had static sizes, so y.size(0) was a
    # constant of the graph that no guard checked (wrong for other batches).
    steps = [Step(f"batch {b} {s}", (lambda st, b=b, s=s: (torch.rand(b, 8) * s * 5,)), seed=i,
                  expect=MONITOR if i < 2 else MOCK)
             for i, (b, s) in enumerate([(2, 1), (3, -1), (5, 1), (4, -1), (7, 1), (6, 1)])]
    trace = check_compiled(lambda: (_size_after, None), steps)
    assert magpy.stats(trace.compiled).records == 2
