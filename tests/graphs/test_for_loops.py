"""Control flow operators: a ``for`` loop over a tensor's first dimension, or over
``range(n)`` indexing tensors with its index, recorded as one ``torch.while_loop`` that counts
its steps.

Every program runs through ``tests.harness.compile_harness.check_compiled`` (outputs, arguments and
program state compared with eager after each call; per-call MONITOR/MOCK expectations) with
sequences whose length changes from call to call.  With automatic dynamic sizes the first
call records the loop unrolled for its length; the second, seeing the length change, records
it with a symbolic length, where the loop becomes the operator: every later length is a mock
run of that record.  Where the loop cannot be an operator (the body prints, the program reads
the loop's variable or list after it), the recording ends, the loop is unrolled from the next
recording on, and the results are still eager's.
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


def _lengths(make, lengths, expect=None):
    """One call per sequence length: the first two record (unrolled, then symbolic), the
    rest are mock runs of the second record (``expect``: per call, instead)."""
    expect = expect or [MONITOR, MONITOR] + [MOCK] * (len(lengths) - 2)
    return [Step(f"call {i} (length {n})", (lambda st, n=n: make(n)), seed=i + 1, expect=e)
            for i, (n, e) in enumerate(zip(lengths, expect))]


def _seq(n, width=4):
    return torch.randn(n, 2, width), torch.randn(2, width)


# ---------------------------------------------------------------------------- programs

def _rnn(x, h):
    # Carried h; one output per step, stacked after the loop.
    outs = []
    for xt in x:
        h = torch.tanh(xt + h * 0.5)
        outs.append(h * 2)
    return h, torch.stack(outs)


def _cat_along_1(x, h):
    outs = []
    for xt in x:
        h = torch.sigmoid(xt - h)
        outs.append(h)
    return torch.cat(outs, dim=1), torch.stack(outs, 1)


def _no_list(x, h):
    # Only carried state, and a tensor from before the loop read on every step.
    scale = h.abs() + 1
    for xt in x:
        h = h * 0.9 + xt / scale
    return h


class _Layer(nn.Module):
    """One recurrent layer over time, state carried as a tuple (custom_lstms style)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, state):
        outs = []
        for xt in x:
            state = self.cell(xt, state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outs), state


class _LM(nn.Module):
    """A stacked LSTM (or GRU) language model over ``nn.LSTMCell``s, a Python loop per layer."""

    def __init__(self, cell=nn.LSTMCell, vocab=30, hidden=8, layers=2):
        super().__init__()
        self.hidden = hidden
        self.emb = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([_Layer(cell(hidden, hidden)) for _ in range(layers)])
        self.dec = nn.Linear(hidden, vocab)
        self.lstm = cell is nn.LSTMCell

    def forward(self, tokens):
        x = self.emb(tokens)
        for layer in self.layers:
            z = x.new_zeros(x.size(1), self.hidden)
            x, _ = layer(x, (z, z) if self.lstm else z)
        return self.dec(x)


def _tokens(n):
    return (torch.randint(0, 30, (n, 3)),)


def _lm(cell):
    def build():
        m = _LM(cell).eval()
        return m, m
    return build


LENGTHS = [3, 5, 4, 9, 2, 7]


def _range_rnn(x, h):
    # for t in range(len): x[t] reads the step's row.
    outs = []
    for t in range(x.size(0)):
        h = torch.tanh(x[t] + h * 0.5)
        outs.append(h)
    return torch.stack(outs)


def _range_batch_first(x, h):
    # Batch first: the length is a later dimension, read from x.shape, the row is x[:, t].
    steps = x.shape[1]
    for t in range(steps):
        h = torch.sigmoid(x[:, t] - h)
    return h


def _batch_first(n, width=4):
    return torch.randn(2, n, width), torch.randn(2, width)


@pytest.mark.parametrize("program", [_rnn, _cat_along_1, _no_list, _range_rnn], ids=lambda p: p.__name__[1:])
def test_every_length_shares_one_record(program):
    trace = check_compiled(lambda: (program, None), _lengths(_seq, LENGTHS))
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.records) == (2, len(LENGTHS) - 2, 0, 2)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell], ids=["lstm", "gru"])
def test_recurrent_language_model(cell):
    with torch.no_grad():
        trace = check_compiled(_lm(cell), _lengths(_tokens, LENGTHS))
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.records, st.graphs_per_call) == (2, 4, 2, 1)
    with torch.no_grad():
        e = magpy.explain(trace.compiled, *_tokens(6))
    assert sum(WHILE in c for c in e.control_flow) == 2, e.control_flow


def test_a_range_loop_over_a_later_dimension():
    trace = check_compiled(lambda: (_range_batch_first, None), _lengths(_batch_first, LENGTHS))
    assert magpy.stats(trace.compiled).records == 2
    e = magpy.explain(trace.compiled, *_batch_first(6))
    assert any(f"{WHILE} over range(a symbolic n)" in c for c in e.control_flow), e.control_flow


def test_range_loops_under_inductor():
    for program, make in ((_range_rnn, _seq), (_range_batch_first, _batch_first)):
        magpy.reset()
        trace = check_compiled(lambda program=program: (program, None), _lengths(make, [3, 5, 8, 4]),
                               backend="inductor", rtol=1e-5, atol=1e-5)
        assert magpy.stats(trace.compiled).records == 2


def _width_after(x, h):
    for xt in x:
        h = torch.tanh(xt + h)
    return torch.zeros(h.size(1))   # a size of the loop's output, read in Python


def test_a_size_of_the_loops_output_stays_symbolic():
    # Batch and length both change: the carried h has a symbolic width.
    sizes = [(3, 4), (5, 6), (4, 5), (9, 3), (2, 7)]
    steps = [Step(f"{n}x{w}", (lambda st, n=n, w=w: (torch.randn(n, 2, w), torch.randn(2, w))), seed=i,
                  expect=MONITOR if i < 2 else MOCK) for i, (n, w) in enumerate(sizes)]
    trace = check_compiled(lambda: (_width_after, None), steps)
    assert magpy.stats(trace.compiled).records == 2


def _asserts_each_row(x, h):
    outs = []
    for xt in x:
        torch._assert(xt.sum() < 100, "a big row")   # (pytest does not rewrite it as it does assert)
        h = torch.tanh(xt + h)
        outs.append(h)
    return torch.stack(outs)


def test_a_step_that_raises_in_the_real_run_raises_as_in_eager():
    # The forks pass (steps 0 and 1); the loop's real run raises at step 3.  The program's
    # iterator must not have moved: the call goes on and raises there, as eager does (it
    # skipped the step and returned 4 rows).
    magpy.config.max_unroll = 0
    compiled = magpy.compile(_asserts_each_row, backend="eager")
    x, h = _seq(5)
    x[3] += 1000
    with pytest.raises(AssertionError, match="a big row"):
        _asserts_each_row(x, h)
    with pytest.raises(AssertionError, match="a big row"):
        compiled(x, h)
    x, h = _seq(5)
    assert torch.equal(compiled(x, h), _asserts_each_row(x, h))


def test_the_loop_really_is_the_operator():
    # With control flow operators off, each length records (the test above would fail).
    magpy.config.control_flow = False
    steps = [Step(s.name, s.args, seed=s.seed, expect=MONITOR) for s in _lengths(_seq, [3, 5, 6, 7])]
    trace = check_compiled(lambda: (_rnn, None), steps)
    assert magpy.stats(trace.compiled).records == 4


def test_a_long_static_loop_is_the_operator_from_the_first_call():
    magpy.config.max_unroll = 4
    e = magpy.explain(_rnn, *_seq(6))
    assert e.graph_count == 1 and not e.break_reasons
    line = _rnn.__code__.co_firstlineno + 3
    assert f"for at {__file__}:{line} (_rnn): {WHILE} over more slices than config.max_unroll=4" \
        in e.control_flow
    assert magpy.explain(_rnn, *_seq(4)).control_flow == [   # up to max_unroll: unrolled
        f"for at {__file__}:{line} (_rnn): unrolled (4 slices, a static length up to config.max_unroll=4)"]


def test_explain_names_the_symbolic_length():
    compiled = magpy.compile(_rnn, backend="eager")
    for n in (3, 5):
        compiled(*_seq(n))
    conds = magpy.explain(compiled, *_seq(6)).control_flow
    assert any(f"{WHILE} over a symbolic number of slices" in c for c in conds)


def test_external_state_changes_reach_the_loop():
    # A weight updated in place between calls is a graph input of the loop's body.
    def bump(m):
        with torch.no_grad():
            m.layers[0].cell.weight_hh.mul_(1.5)
    steps = _lengths(_tokens, [3, 5, 6])
    steps.append(Step("after updating a weight", lambda st: _tokens(7), seed=9, expect=MOCK, mutate=bump))
    with torch.no_grad():
        check_compiled(_lm(nn.LSTMCell), steps)


def test_loop_under_inductor():
    with torch.no_grad():
        trace = check_compiled(_lm(nn.LSTMCell), _lengths(_tokens, [3, 5, 8, 4]), backend="inductor",
                               rtol=1e-5, atol=1e-5)
    assert magpy.stats(trace.compiled).records == 2


# ---------------------------------------------------------------------------- stays unrolled

def _reads_the_variable_after(x, h):
    for xt in x:
        h = h + xt
    return h * xt


def _reads_the_list_after(x, h):
    outs = []
    for xt in x:
        h = h + xt
        outs.append(h)
    return torch.stack(outs) / len(outs)   # the length, a Python int, in tensor arithmetic


def _prints(x, h):
    for xt in x:
        print("step")
        h = h + xt
    return h


def _keeps_the_slice(x, h):
    prev = h
    for xt in x:
        h = h + prev
        prev = xt
    return h


def _appends_twice(x, h):
    outs = []
    for xt in x:
        h = h + xt
        outs.append(h)
        outs.append(h * 2)
    return torch.stack(outs)


def _breaks_out(x, h):
    for xt in x:
        h = h + xt
        if h.sum() > 100:   # (never: but the arm that leaves the loop cannot be recorded)
            break
    return h


def _index_in_python(x, h):
    for t in range(x.size(0)):
        h = h + x[t] * (1 if t == 0 else 0.5)   # the index steers Python
    return h


def _index_as_a_number(x, h):
    for t in range(x.size(0)):
        h = h + x[t] * t   # the index as an operand, not a row
    return h


def _next_row(x, h):
    for t in range(x.size(0) - 1):
        h = h + x[t + 1]
    return h


def _length_in_python(x, h):
    n = x.size(0)
    for t in range(n):
        h = h + x[t] * (n * 0.5)   # the (symbolic) length in Python arithmetic in the body
    return h


def _reads_the_index_after(x, h):
    for t in range(x.size(0)):
        h = h + x[t]
    return h * t


UNROLLED = [_reads_the_variable_after, _reads_the_list_after, _prints, _keeps_the_slice, _appends_twice,
            _breaks_out, _index_in_python, _index_as_a_number, _next_row, _reads_the_index_after,
            _length_in_python]


@pytest.mark.parametrize("program", UNROLLED, ids=lambda p: p.__name__[1:])
def test_a_loop_that_cannot_be_the_operator_is_unrolled(program, capsys):
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _lengths(_seq, [3, 5, 6, 7, 3])]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert not any(WHILE in c for c in magpy.explain(trace.compiled, *_seq(6)).control_flow)


def test_a_loop_under_autograd_is_an_operator_with_backend_eager():
    # (its gradients are eager's there: tests/training/test_loops_autograd.py; Inductor runs its graph as
    # eager)
    cell = nn.GRUCell(4, 4)

    def step(x, h):
        for xt in x:
            h = cell(xt, h)
        return h
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _lengths(_seq, [3, 5, 6])]
    trace = check_compiled(lambda: (step, None), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (2, 1, 0)   # the first length unrolled, then one
