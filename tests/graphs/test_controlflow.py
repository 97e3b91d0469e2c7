"""Control flow operators: an ``if`` on tensor data recorded as one ``torch.cond``.

Every program runs through ``tests.harness.compile_harness.check_compiled`` (outputs, arguments and
program state compared with eager after each call; per-call MONITOR/MOCK expectations) with
inputs that take both arms across calls.  Where both arms can be recorded, the first call
records once and every later call, whichever arm it takes, is a mock run of one graph.
Where an arm cannot be (a print, an in-place update of program state, a ``return``), the
jump is a graph break as without control flow operators: still eager's results.
"""
import warnings

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    EAGER,
    MOCK,
    MONITOR,
    Step,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset(), magpy.config restored
)


def _signs(make, signs):
    """One call per sign: inputs whose condition is true (+1) or false (-1)."""
    return [Step(f"call {i} ({'true' if s > 0 else 'false'})", (lambda st, s=s: make(s)), seed=i + 1,
                 expect=MONITOR if i == 0 else MOCK) for i, s in enumerate(signs)]


def _positive(s):
    return (torch.randn(4, 8).abs() * s,)


SIGNS = [1, -1, -1, 1, -1, 1]


def _counts(compiled):
    st = magpy.stats(compiled)
    return st.monitor_runs, st.mock_runs, st.eager_runs, st.graphs_per_call


# ---------------------------------------------------------------------------- recorded as cond

def _if_else(x):
    if x.sum() > 0:
        y = torch.relu(x) * 2
    else:
        y = x - 1
    return y + 1


def _if_alone(x):
    y = x * 3
    if x.mean() > 0:
        y = torch.tanh(y)
    return y


def _kept_alias(x):
    identity = x
    if x.sum() > 0:
        x = torch.sigmoid(x) * 4
    return x + identity


def _ternary(x):
    y = x.exp() if x.sum() > 0 else x.neg()
    return y.sum(0)


def _two_ifs(x):
    if x.sum() > 0:
        x = x * 2
    if x.max() > 1:
        x = x - 1
    return x


class _Gated(nn.Module):
    """A BlockDrop-style network: a policy picks the residual blocks that run."""

    def __init__(self):
        super().__init__()
        self.policy = nn.Linear(8, 3)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)) for _ in range(3))

    def forward(self, x):
        gates = torch.sigmoid(self.policy(x.mean(0)))
        for i, block in enumerate(self.blocks):
            if gates[i] > 0.5:
                x = x + block(x)
        return x


def _nested(x):
    if x.sum() > 0:
        if x.max() > 2:
            x = x * 0.5
        else:
            x = x + 1
    else:
        x = -x
    return x


PROGRAMS = [_if_else, _if_alone, _kept_alias, _ternary, _two_ifs, _nested]


@pytest.mark.parametrize("program", PROGRAMS, ids=[f.__name__[1:] for f in PROGRAMS])
def test_both_arms_share_one_record(program):
    trace = check_compiled(lambda: (program, None), _signs(_positive, SIGNS))
    assert _counts(trace.compiled) == (1, len(SIGNS) - 1, 0, 1), magpy.stats(trace.compiled)


def test_gated_blocks_are_one_record_for_every_choice():
    def inputs(seed):
        torch.manual_seed(seed)
        return (torch.randn(5, 8) * 3,)
    # The inputs take 0 to 3 of the blocks.  (Under grad mode the arms would differ in
    # requires_grad: the jump stays a break.)
    seeds = [0, 1, 2, 3, 4, 5, 6, 7]
    steps = [Step(f"input {s}", (lambda st, s=s: inputs(s)), expect=MONITOR if i == 0 else MOCK, ctx=torch.no_grad)
             for i, s in enumerate(seeds)]

    def build():
        model = _Gated()
        with torch.no_grad():
            model.policy.weight.mul_(4)
        return model, model
    trace = check_compiled(build, steps)
    assert _counts(trace.compiled) == (1, 7, 0, 1), magpy.stats(trace.compiled)


def test_cond_under_inductor():
    trace = check_compiled(lambda: (_if_else, None), _signs(_positive, SIGNS[:4]), backend="inductor",
                           rtol=1e-5, atol=1e-5)
    assert _counts(trace.compiled) == (1, 3, 0, 1), magpy.stats(trace.compiled)


def test_switched_off_each_outcome_records():
    magpy.config.control_flow = False
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _signs(_positive, SIGNS)]
    trace = check_compiled(lambda: (_if_else, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.monitor_runs == 2 and st.eager_runs == 0, st


# ---------------------------------------------------------------------------- falls back to a break

def _prints(x):
    if x.sum() > 0:
        print("positive")
        x = x * 2
    return x


class _Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hits", torch.zeros(()))

    def forward(self, x):
        if x.sum() > 0:
            self.hits += 1
        return x * 2


def _returns(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def _stores(x, box):
    if x.sum() > 0:
        box.append(1)
    return x * 2


FALLBACKS = [
    pytest.param(lambda: (_prints, None), lambda s: _positive(s), id="print"),
    pytest.param(lambda: (lambda m: (m, m))(_Counts()), lambda s: _positive(s), id="buffer_updated"),
    pytest.param(lambda: (_returns, None), lambda s: _positive(s), id="return"),
    pytest.param(lambda: (_stores, None), lambda s: _positive(s) + ([],), id="list_append"),
]


@pytest.mark.parametrize("build, make", FALLBACKS)
def test_arm_with_an_effect_is_a_break(build, make):
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _signs(make, SIGNS)]
    trace = check_compiled(build, steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and st.monitor_runs == 2, st


FIRST_FALSE = [-1, 1, 1, -1, 1, -1]


@pytest.mark.parametrize("program", PROGRAMS, ids=[f.__name__[1:] for f in PROGRAMS])
def test_a_first_call_that_leaves_a_tensor_as_it_was_records_the_cond_too(program):
    # The recording goes on with that very tensor (``x`` itself, not a cond's new output):
    # reached through the slot the if left it in, it is the cond's output in the graph, and
    # the mock gives the program x itself when that arm runs.
    trace = check_compiled(lambda: (program, None), _signs(_positive, FIRST_FALSE))
    assert _counts(trace.compiled) == (1, len(FIRST_FALSE) - 1, 0, 1), magpy.stats(trace.compiled)


def _select(x, a, b):
    # Both arms leave a tensor from before the if: the program gets ``a`` or ``b`` itself.
    return a if x.sum() > 0 else b


def _select_scaled(x, a, b):
    chosen = a if x.sum() > 0 else b
    return chosen * 2 + x.sum()


@pytest.mark.parametrize("program", [_select, _select_scaled], ids=["itself", "computed-with"])
def test_choosing_between_tensors_from_before_the_if_is_one_cond(program):
    steps = [Step(f"call {i}", (lambda st, s=s: _positive(s) + (torch.randn(3), torch.randn(3))), seed=i + 1,
                  expect=MONITOR if i == 0 else MOCK) for i, s in enumerate(SIGNS)]
    trace = check_compiled(lambda: (program, None), steps)
    assert _counts(trace.compiled) == (1, len(SIGNS) - 1, 0, 1)
    a, b = torch.randn(3), torch.randn(3)
    if program is _select:
        for sign, expected in ((1, a), (-1, b)):
            assert trace.compiled(_positive(sign)[0], a, b) is expected


def _transposed_after(x):
    y = x * 2
    if x.mean() > 0:
        y = y.T @ x
    return y @ y.T   # (``.T`` of the tensor the if passed through: an operation on it)


def test_a_property_of_a_passed_through_tensor_is_followed():
    # (was: "a tensor an if left as it was is used where magpy cannot follow it (LOAD_ATTR)",
    # then a break at the if: 2 records and a failed check now and then)
    steps = [Step(f"call {i}", (lambda st, s=s: (torch.randn(8, 8).abs() * s,)), seed=i + 1,
                  expect=MONITOR if i == 0 else MOCK) for i, s in enumerate(FIRST_FALSE)]
    trace = check_compiled(lambda: (_transposed_after, None), steps)
    assert _counts(trace.compiled) == (1, len(FIRST_FALSE) - 1, 0, 1)


def _escapes(x, box):
    y = x * 3
    if x.mean() > 0:
        y = torch.tanh(y)
    box.append(y)    # stored where no shadow follows it
    return y


def test_a_passed_through_tensor_that_escapes_ends_recording_then_breaks():
    steps = [Step(f"call {i}", (lambda st, s=s: _positive(s) + ([],)), seed=i + 1, expect=ANY)
             for i, s in enumerate(FIRST_FALSE)]
    trace = check_compiled(lambda: (_escapes, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    # The first recording learns the if cannot be a cond; the next ones record each outcome.
    assert (st.monitor_runs, st.eager_runs, st.records) == (3, 0, 2), st


class _Scaled(nn.Module):
    """Each arm reads a different attribute: the guard covers both, whichever arm ran."""

    def __init__(self):
        super().__init__()
        self.up, self.down = 2.0, 3.0

    def forward(self, x):
        if x.sum() > 0:
            y = x * self.up
        else:
            y = x - self.down
        return y


def _set_down(m):
    m.down = 5.0


def test_the_guard_covers_what_the_arm_not_taken_read():
    steps = _signs(_positive, [1, -1, 1])
    steps.append(Step("after m.down = 5.0 (read by the arm not taken first)", (lambda st: _positive(-1)),
                      mutate=_set_down, seed=9, expect=MONITOR))
    steps += [Step(f"again {i}", (lambda st, s=s: _positive(s)), seed=10 + i, expect=MOCK)
              for i, s in enumerate([1, -1])]
    trace = check_compiled(lambda: (lambda m: (m, m))(_Scaled()), steps)
    assert magpy.stats(trace.compiled).eager_runs == 0


@pytest.mark.slow
def test_gated_blocks_under_inductor():
    def build():
        model = _Gated()
        with torch.no_grad():
            model.policy.weight.mul_(4)
        return model, model
    steps = [Step(f"input {s}", (lambda st, s=s: (torch.randn(5, 8) * 3,)), seed=s,
                  expect=MONITOR if s == 0 else MOCK, ctx=torch.no_grad) for s in range(6)]
    trace = check_compiled(build, steps, backend="inductor", rtol=1e-5, atol=1e-5)
    assert _counts(trace.compiled) == (1, 5, 0, 1), magpy.stats(trace.compiled)


def test_explain_lists_each_cond_with_its_line():
    torch.manual_seed(0)
    model = _Gated()
    with torch.no_grad():
        model.policy.weight.mul_(4)
        text = str(magpy.explain(magpy.compile(model, backend="eager"), torch.randn(5, 8) * 3))
    assert text.count("torch.cond, the run took the") == 3, text
    assert f"test_controlflow.py:{_Gated.forward.__code__.co_firstlineno + 3} (_Gated.forward)" in text, text


class _GatedConv(nn.Module):
    """Convolutional blocks: inductor would hand the conds channels-last activations."""

    def __init__(self):
        super().__init__()
        self.policy = nn.Linear(4, 2)
        self.stem = nn.Conv2d(4, 8, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(2))

    def forward(self, x):
        gates = torch.sigmoid(self.policy(x.mean((0, 2, 3))) * 4)
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            if gates[i] > 0.5:
                x = x + block(x)
        return x.mean((2, 3))


@pytest.mark.slow
def test_gated_convolutions_under_inductor():
    steps = [Step(f"input {s}", (lambda st: (torch.randn(2, 4, 16, 16),)), seed=s,
                  expect=MONITOR if s == 0 else MOCK, ctx=torch.no_grad) for s in range(6)]
    trace = check_compiled(lambda: (lambda m: (m, m))(_GatedConv()), steps, backend="inductor",
                           rtol=1e-4, atol=1e-4)
    assert _counts(trace.compiled) == (1, 5, 0, 1), magpy.stats(trace.compiled)


def test_a_backend_without_cond_keeps_the_break():
    # TorchScript cannot compile torch.cond: the if stays a break (no compile warning).
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _signs(_positive, SIGNS[:4])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trace = check_compiled(lambda: (_if_else, None), steps, backend="torchscript", fullgraph=False,
                               rtol=1e-5, atol=1e-5)
    st = magpy.stats(trace.compiled)
    assert st.monitor_runs == 2 and st.eager_runs == 0, st


def _escape_in_a_later_arm(x, box):
    y = x * 3
    if x.mean() > 0:          # a cond; when false, y passes through
        y = torch.tanh(y)
    if x.sum() > 100:         # never true here: its arm puts y in a tuple, where no shadow goes
        y = (y, box)[0] * 2
    return y + 1


def test_an_arm_that_escapes_a_passed_tensor_only_breaks_its_own_if():
    steps = [Step(f"call {i}", (lambda st, s=s: _positive(s) + ([],)), seed=i + 1, expect=ANY)
             for i, s in enumerate(FIRST_FALSE)]
    trace = check_compiled(lambda: (_escape_in_a_later_arm, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and st.records == 1 and st.monitor_runs == 1, st


# ---------------------------------------------------------------------------- with symbolic sizes

def _select_then_halve(x):
    # The if passes ``x`` (or ``-x``) through; the loop then reads it through ``Tensor.norm``,
    # torch's own Python (the operation it records is ``linalg.vector_norm``), and may not run.
    y = x if x.sum() > 0 else -x
    while y.norm() > 10:
        y = y * 0.5
    return y


def test_a_tensor_an_if_passed_through_enters_a_loop_that_may_not_run():
    # Every combination: passed through or not, loop run or not.  (The loop's output stood
    # for the if's output in the graph, and the mock gave back the argument itself.)
    scales = [1, -1, 100, -100, 2, -50]
    steps = [Step(f"scale {s}", (lambda st, s=s: (torch.ones(2, 8) * s,)), seed=i,
                  expect=MONITOR if i == 0 else MOCK) for i, s in enumerate(scales)]
    trace = check_compiled(lambda: (_select_then_halve, None), steps)
    assert magpy.stats(trace.compiled).records == 1
    x = torch.ones(2, 8)
    assert trace.compiled(x) is x


def _batches(sizes):
    """One call per batch size: the first two record (static, then symbolic), the rest are
    mock runs of the second."""
    return [Step(f"batch {b}", (lambda st, b=b, i=i: (torch.randn(b, 8) * (i + 1),)), seed=i,
                 expect=MONITOR if i < 2 else MOCK) for i, b in enumerate(sizes)]


def test_ifs_and_loops_with_symbolic_sizes():
    # BlockDrop gates, a selection and a while loop: once the batch size is symbolic, one
    # record serves every size and every outcome.
    def build():
        m = _Gated().eval()
        return (lambda x: _select_then_halve(m(x))), m
    with torch.no_grad():
        trace = check_compiled(build, _batches([2, 3, 5, 4, 7, 6, 9, 3, 12]))
    st = magpy.stats(trace.compiled)
    assert (st.records, st.graphs_per_call, st.eager_runs) == (2, 1, 0)


def _slices(x):
    # For a batch of 3 both arms give 2 rows; for other batches they differ.
    return x[:2] * 1 if x.sum() > 0 else x[1:] * 1


def test_arms_whose_sizes_agree_only_by_chance_are_not_merged():
    # Recorded with a symbolic batch of 3 from the first call: sizes 2 and s0 - 1, one cond
    # would be wrong for other batches, so the jump stays a break, and every call still gets
    # eager's result.
    magpy.config.dynamic = True
    sizes = [3, 3, 4, 5, 3, 6]
    steps = [Step(f"batch {b}", (lambda st, b=b, i=i: (torch.randn(b, 8) * (1 if i % 2 else -1),)),
                  seed=i, expect=ANY) for i, b in enumerate(sizes)]
    trace = check_compiled(lambda: (_slices, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0
    assert any("different kinds" in reason for reason in st.breaks), st.breaks


def _scaled_by_width(x):
    n = x.size(1)
    y = x[:, 0] * 1
    if x.sum() > 0:
        y = y * (n + 1)   # a symbolic size used in Python inside an arm
    else:
        y = y - 1
    return y


def test_a_symbolic_size_used_in_python_inside_an_arm():
    # The arm's graph held n + 1 as a constant no guard checked (wrong for other widths):
    # with symbolic sizes, such a use makes the jump a break.
    shapes = [(2, 3), (3, 4), (3, 5), (2, 6), (4, 7)]
    steps = [Step(f"{a}x{b} {'+' if s > 0 else '-'}", (lambda st, a=a, b=b, s=s: (torch.rand(a, b) * s,)),
                  seed=i, expect=ANY) for i, ((a, b), s) in enumerate((ab, s) for ab in shapes for s in (1, -1))]
    trace = check_compiled(lambda: (_scaled_by_width, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0


def _if_else_ends_the_body(x):
    h = x[:, 0] * 0
    for t in range(x.size(1)):
        h = h + x[:, t]
        if h.sum() > 0:   # the last statement of the loop's body: its first arm jumps back
            h = h * 0.9
        else:
            h = h - 0.1
    return h


def test_an_if_else_that_ends_a_loop_body_is_a_cond():
    signs = [1, -1, 1, 1, -1, -1]
    steps = [Step(f"sign {s}", (lambda st, s=s: (torch.randn(2, 4) * s + s,)), seed=i,
                  expect=MONITOR if i == 0 else MOCK) for i, s in enumerate(signs)]
    trace = check_compiled(lambda: (_if_else_ends_the_body, None), steps)
    assert magpy.stats(trace.compiled).records == 1
    assert sum("torch.cond" in c for c in magpy.explain(trace.compiled, torch.randn(2, 4)).control_flow) == 4


# ---------------------------------------------------------------------------- eager values in arms
# An arm computing with a value an eager step gave (or a small int whose check waits for a
# use) would hold what it computed as a constant: the fork stops there (wrong results before).

def _eager_float_in_arm(x):
    n = x.sum().tolist()          # an eager step
    if x.mean() > 0:
        y = x * (n * 2)           # Python arithmetic on it inside the arm
    else:
        y = x - 1
    return y


def _small_int_in_arm(x):
    k = (x > 0.5).sum().item()    # a small int, followed by its shadow outside forks
    if x.mean() > 0:
        y = x * k
    else:
        y = x - 1
    return y


def _varying(s):
    return (torch.rand(6) + s["n"],)


@pytest.mark.parametrize("program", [_eager_float_in_arm, _small_int_in_arm], ids=lambda f: f.__name__)
def test_values_computed_eagerly_are_never_constants_of_an_arm(program):
    def build():
        return program, {"n": 0.0}

    def shift(s):
        s["n"] += 0.3

    check_compiled(build, [first(_varying), again(), fresh(_varying, seed=2, expect=None),
                           after(shift, args=_varying, expect=None), fresh(_varying, seed=3, expect=None)],
                   fullgraph=False)


# ---------------------------------------------------------------------------- checks in arms and bodies

def _check_in_arm_unused(x):
    # The arm that checks keeps nothing the program uses after the if.
    h = x * 1.0
    if x.sum() > 0:
        pass
    else:
        if h[0, 0] > 0:
            raise KeyError("q")
    return torch.tanh(h)


def _check_in_arm_output_unused(x):
    h, g = x * 1.0, x
    if x.sum() > 0:
        g = h + 1
    else:
        if h[0, 0] > 0:
            raise KeyError("q")
        g = h - 1   # noqa: F841 - (the cond's output the program does not use)
    return torch.tanh(h)


def _check_in_arm_output_used(x):
    h = x * 1.0
    if x.sum() > 0:
        h = h + 1
    else:
        if h[0, 0] > 0:
            raise ValueError(f"a positive corner in {tuple(h.shape)}")
        h = h - 1
    return torch.tanh(h)


def _check_in_unrolled_loop(x):
    # (the program fuzzer's seed 2103593, shrunk)
    h = x * 1.0
    for row in x:
        if row.sum() > 0:
            continue
        if h[0, 0] > 0:
            raise KeyError("q")
    return torch.tanh(h)


def _check_in_long_loop(x):
    acc = torch.zeros(())
    for row in x:
        acc = acc + row.sum()
        if acc > 60:
            raise KeyError("q")
    return torch.tanh(x)


def _corner(sign_sum, sign_corner, rows=4):
    x = torch.randn(rows, 4).abs() * 0.1
    x[0, 0] = sign_corner
    x[1:] *= sign_sum
    x[1, 1:] = 3.0 * sign_sum * rows   # (the sum's sign, whatever the corner)
    return (x,)


# (sum's sign, corner's sign): the false arm raises where the corner is positive.
CHECKED_CALLS = [(-1, -1), (1, 1), (-1, 1), (-1, -1), (1, -1), (-1, 1)]


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("program", [_check_in_arm_unused, _check_in_arm_output_unused,
                                     _check_in_arm_output_used, _check_in_unrolled_loop],
                         ids=lambda f: f.__name__[1:])
def test_a_check_in_an_arm_raises_on_the_calls_it_fails(program, backend):
    # Checks in an arm are hoisted out of the cond: kept where the cond's outputs are unused
    # (AOTAutograd drops a cond no output of which is used, checks and all), and a failed one
    # is the program's own failure: that call runs eagerly, later ones use the record again.
    raises = [s == -1 and c == 1 for s, c in CHECKED_CALLS]
    steps = [Step(f"call {i}", (lambda st, s=s, c=c: _corner(s, c)),
                  expect=MONITOR if i == 0 else EAGER if r else MOCK)
             for i, ((s, c), r) in enumerate(zip(CHECKED_CALLS, raises))]
    trace = check_compiled(lambda: (program, None), steps, backend=backend, rtol=1e-5)
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.graph_count) == (1, 3, 2, 1), st


def test_a_check_in_a_long_loop_raises_on_the_calls_it_fails():
    # A loop operator's body cannot hoist its check: the loop is unrolled instead (the first
    # recording ends where it finds the check; the next call's makes the record).
    def rows(big):
        return (torch.randn(20, 4) + (3.0 if big else 0.0),)
    bigs = [False, False, True, False, True]
    expect = [MONITOR, MONITOR, EAGER, MOCK, EAGER]
    steps = [Step(f"call {i}", (lambda st, b=b: rows(b)), seed=i, expect=e)
             for i, (b, e) in enumerate(zip(bigs, expect))]
    trace = check_compiled(lambda: (_check_in_long_loop, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.graph_count) == (2, 1, 2, 1), st
    assert "an iteration checks a tensor's value" in str(magpy.explain(trace.compiled, *rows(False)))
