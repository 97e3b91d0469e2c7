"""Control flow operators: the ``for`` loop shapes of recurrent programs besides ``for x_t in
x`` and ``for t in range(n)`` recorded as one ``torch.while_loop`` (magpy.graphs.controlflow):
``for i, x_t in enumerate(x)``, ``for x_t, y_t in zip(x, y)``, ``for t, (x_t, y_t) in
enumerate(zip(x, y))``, ``for t in range(a, n, s)``
with a constant start and step, and ``out[t] = h`` into a tensor made before the loop.

As in tests/graphs/test_for_loops.py, every program runs through
``tests.harness.compile_harness.check_compiled`` with sequences whose length changes from call to
call: the first call records the loop unrolled, the second (the length changed) with a
symbolic length, where the loop is the operator, and every later length is a mock run of
that record.  A length of 0 or 1 is a record of its own (torch specialises those sizes) in
which the loop is unrolled.  Where the loop cannot be the operator, it is unrolled (a record
per length), the results are still eager's and ``magpy.explain`` says why.
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
LOOP = torch.ops.higher_order.while_loop
# Lengths, and what each call is: 1 records for itself, 2 and up share the second record.
# (Length 0: test_an_empty_sequence.)
LENGTHS = [3, 5, 4, 1, 9, 2, 7]
EXPECT = [MONITOR, MONITOR, MOCK, MONITOR, MOCK, MOCK, MOCK]
# A range from 1 has no length 1: no steps, no operations (torch.stack of no tensors raises in
# eager too).
FROM_TWO = [n for n in LENGTHS if n > 1], [e for n, e in zip(LENGTHS, EXPECT) if n > 1]


def _calls(make, lengths=LENGTHS, expect=EXPECT, ctx=None):
    return [Step(f"call {i} (length {n})", (lambda st, n=n: make(n)), seed=i + 1, expect=e, ctx=ctx)
            for i, (n, e) in enumerate(zip(lengths, expect))]


def _seq(n, width=4):
    return torch.randn(n, 2, width), torch.randn(2, width)


def _pair(n, width=4):
    return torch.randn(n, 2, width), torch.randn(n, 2, width), torch.randn(2, width)


def _loops(compiled) -> list[int]:
    """The number of ``while_loop`` operators in each record's graphs."""
    return [sum(n.target is LOOP for gm in rec.graphs for n in gm.graph.nodes)
            for rec in compiled._magpy_cache.records]


def _check(program, make, lengths=LENGTHS, expect=EXPECT, **kw):
    """``check_compiled`` over ``lengths``: a record per MONITOR call, the second's loop the operator."""
    trace = check_compiled(lambda: (program, None), _calls(make, lengths, expect), **kw)
    st = magpy.stats(trace.compiled)
    assert (st.records, st.eager_runs) == (expect.count(MONITOR), 0)
    assert sorted(_loops(trace.compiled)) == [0] * (st.records - 1) + [1]
    return trace


# ---------------------------------------------------------------------------- programs

def _enumerate_rnn(x, h):
    outs = []
    for i, xt in enumerate(x):   # (i unused)
        h = torch.tanh(xt + h * 0.5)
        outs.append(h)
    return h, torch.stack(outs)


def _enumerate_index(x, h):
    # The index reads a row of another tensor (the existing range-loop rule: y[i]).
    y = x.flip(0)
    for i, xt in enumerate(x):
        h = torch.sigmoid(xt - y[i] * h)
    return h


def _enumerate_from_one(x, h):
    # enumerate(x, 1): the index runs one ahead of the row.
    y = torch.cat([x, x[:1]])
    for i, xt in enumerate(x, 1):
        h = torch.tanh(xt + y[i] + h)
    return h


def _zip_rnn(x, y, h):
    outs = []
    for xt, yt in zip(x, y):
        h = torch.sigmoid(xt * yt - h)
        outs.append(h * 2)
    return h, torch.cat(outs, dim=1)


def _zip_three(x, y, h):
    for xt, yt, zt in zip(x, y, x * 0.5):
        h = h * 0.9 + xt - yt * zt
    return h


def _enumerate_of_zip(x, y, h):
    outs = []
    for t, (xt, yt) in enumerate(zip(x, y)):
        h = h * 0.9 + xt - yt
        outs.append(h)
    return h, torch.stack(outs)


def _enumerate_of_zip_from_one(x, y, h):
    z = torch.cat([x[:1], x])
    for t, (xt, yt) in enumerate(zip(x, y), 1):
        h = torch.tanh(xt - yt * z[t] + h)   # (the index one ahead of the rows)
    return h


def _range_by_two(x, h):
    for t in range(0, x.size(0), 2):
        h = torch.tanh(x[t] + h)
    return h


def _range_from_one(x, h):
    outs = []
    for t in range(1, x.shape[0]):
        h = torch.sigmoid(x[t] - h)
        outs.append(h)
    return h, torch.stack(outs)


def _range_from_one_by_three(x, h):
    for t in range(1, x.shape[1], 3):
        h = torch.tanh(x[:, t] + h)
    return h


def _store_rows(x, h):
    out = torch.zeros(x.shape[0], 2, 4)
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + h * 0.5)
        out[t] = h
    return out


def _store_before_the_update(x, h):
    out = torch.empty(x.shape)
    for t in range(x.shape[0]):
        out[t] = h   # (the state the step before left)
        h = torch.tanh(x[t] + h)
    return out, h


def _store_every_other_row(x, h):
    out = x.new_ones(x.shape)
    first = out[0]   # (a view of out from before the loop, read after it)
    for t in range(1, x.shape[0], 2):
        h = torch.sigmoid(x[t] - h)
        out[t] = h * 2
    return out, first + 1


def _store_by_enumerate(x, h):
    hs, cs = torch.zeros_like(x), torch.zeros_like(x)
    c = h
    for i, xt in enumerate(x):
        h, c = torch.tanh(xt + c), torch.sigmoid(h - xt)
        hs[i] = h
        cs[i] = c
    return hs - cs


def _batch_first(n, width=4):
    return torch.randn(2, n, width), torch.randn(2, width)


ALL = LENGTHS, EXPECT
PROGRAMS = [(_enumerate_rnn, _seq, ALL), (_enumerate_index, _seq, ALL), (_enumerate_from_one, _seq, ALL),
            (_zip_rnn, _pair, ALL), (_zip_three, _pair, ALL), (_enumerate_of_zip, _pair, ALL),
            (_enumerate_of_zip_from_one, _pair, ALL), (_range_by_two, _seq, ALL),
            (_range_from_one, _seq, FROM_TWO), (_range_from_one_by_three, _batch_first, FROM_TWO),
            (_store_rows, _seq, ALL), (_store_every_other_row, _seq, FROM_TWO),
            (_store_by_enumerate, _seq, ALL), (_store_before_the_update, _seq, ALL)]
STACKS = (_enumerate_rnn, _zip_rnn, _enumerate_of_zip, _range_from_one, _store_every_other_row)


@pytest.mark.parametrize("program, make, lengths", PROGRAMS, ids=lambda p: getattr(p, "__name__", "")[1:])
def test_every_length_shares_one_record(program, make, lengths):
    trace = _check(program, make, *lengths)
    e = magpy.explain(trace.compiled, *make(6))
    assert any(WHILE in c for c in e.control_flow), e.control_flow


@pytest.mark.parametrize("program, make", [p[:2] for p in PROGRAMS if p[0] not in STACKS],
                         ids=lambda p: getattr(p, "__name__", "")[1:])
def test_an_empty_sequence(program, make):
    # Iterating an empty tensor is a break (as for x_t in x always was): still eager's results,
    # and the later lengths still run the second record.
    steps = _calls(make, [3, 5, 0, 4, 6], [MONITOR, MONITOR, ANY, MOCK, MOCK])
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert 1 in _loops(trace.compiled)


def test_zip_of_tensors_whose_lengths_part_later():
    # The second record's operator walks x and y in step: a call where they differ misses it
    # (zip stops at the shorter one) and is exact.
    calls = [(3, 3, MONITOR), (5, 5, MONITOR), (6, 6, MOCK), (6, 4, MONITOR), (4, 7, ANY), (7, 7, MOCK)]
    steps = [Step(f"lengths {n}, {m}", (lambda st, n=n, m=m: (torch.randn(n, 2, 4), torch.randn(m, 2, 4),
                                                               torch.randn(2, 4))), seed=i, expect=e)
             for i, (n, m, e) in enumerate(calls)]
    trace = check_compiled(lambda: (_zip_three, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0


def test_repeated_calls_hit_the_record():
    steps = _calls(_pair, [3, 5], [MONITOR, MONITOR])
    steps += [Step("the same inputs again", steps[1].args, seed=2, expect=MOCK),
              Step("fresh inputs of that length", steps[1].args, seed=7, expect=MOCK)]
    trace = check_compiled(lambda: (_zip_rnn, None), steps)
    assert magpy.stats(trace.compiled).records == 2


def test_explain_names_the_loops():
    magpy.config.max_unroll = 2
    where = f"for at {__file__}:"
    for program, words in ((_enumerate_rnn, "over more slices than config.max_unroll=2 (enumerate)"),
                           (_zip_rnn, "over more slices than config.max_unroll=2 (zip)"),
                           (_enumerate_of_zip, "over more slices than config.max_unroll=2 (enumerate)"),
                           (_range_by_two, "over range(0, 10, 2), more steps than config.max_unroll=2")):
        e = magpy.explain(program, *(_pair if program in (_zip_rnn, _enumerate_of_zip) else _seq)(9))
        line = program.__code__.co_firstlineno + (2 if program is not _range_by_two else 1)
        assert f"{where}{line} ({program.__name__}): {WHILE} {words}" in e.control_flow, e.control_flow
        assert e.graph_count == 1 and not e.break_reasons


# ---------------------------------------------------------------------------- recurrent cells

class _Tagger(nn.Module):
    """Recurrent cells over a sequence, each step's state kept: the loop shapes of RNN code."""

    def __init__(self, cell, loop):
        super().__init__()
        self.cell, self.loop = cell(4, 6), loop
        self.lstm = cell is nn.LSTMCell

    def forward(self, x, y, h):
        state = (h, h * 0.5) if self.lstm else h
        return self.loop(self, x, y, state)

    def step(self, xt, state):
        state = self.cell(xt, state)
        return state, state[0] if self.lstm else state


def _by_enumerate(m, x, y, state):
    outs = []
    for i, xt in enumerate(x):
        state, h = m.step(xt + y[i], state)
        outs.append(h)
    return torch.stack(outs)


def _by_zip(m, x, y, state):
    outs = []
    for xt, yt in zip(x, y):
        state, h = m.step(xt * yt, state)
        outs.append(h)
    return torch.stack(outs)


def _by_enumerate_zip(m, x, y, state):
    outs = []
    for t, (xt, yt) in enumerate(zip(x, y)):
        state, h = m.step(xt * yt + x[t], state)
        outs.append(h)
    return torch.stack(outs)


def _by_stores(m, x, y, state):
    out = x.new_zeros(x.size(0), x.size(1), 6)
    for t in range(x.size(0)):
        state, out[t] = m.step(x[t] * y[t], state)   # (out[t] = h)
    return out


def _by_range(m, x, y, state):
    outs = []
    for t in range(0, x.size(0), 2):
        state, h = m.step(x[t] - y[t], state)
        outs.append(h)
    return torch.stack(outs)


def _tagger(cell, loop):
    def build():
        m = _Tagger(cell, loop)
        return m, m
    return build


def _cell_inputs(n):
    return torch.randn(n, 3, 4), torch.randn(n, 3, 4), torch.randn(3, 6)


CELL_LOOPS = [_by_enumerate, _by_zip, _by_enumerate_zip, _by_range, _by_stores]
CELL_LENGTHS = [3, 5, 4, 1, 9, 2]
CELL_EXPECT = [MONITOR, MONITOR, MOCK, MONITOR, MOCK, MOCK]


@pytest.mark.parametrize("loop", CELL_LOOPS, ids=lambda f: f.__name__[4:])
@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell], ids=["lstm", "gru"])
def test_recurrent_cells_without_grad(cell, loop):
    steps = _calls(_cell_inputs, CELL_LENGTHS, CELL_EXPECT, torch.no_grad)
    trace = check_compiled(_tagger(cell, loop), steps)
    st = magpy.stats(trace.compiled)
    assert (st.records, st.mock_runs, st.eager_runs) == (3, 3, 0)
    assert sorted(_loops(trace.compiled)) == [0, 0, 1]


@pytest.mark.parametrize("loop", CELL_LOOPS, ids=lambda f: f.__name__[4:])
def test_recurrent_cells_under_autograd_are_one_operator(loop):
    # Backend eager runs torch.while_loop's backward as eager does (tests/training/test_loops_autograd.py:
    # gradients; with Inductor its graph runs as eager): the first length unrolled, then one record.
    steps = _calls(_cell_inputs, [3, 5, 4], [MONITOR, MONITOR, MOCK])
    trace = check_compiled(_tagger(nn.LSTMCell, loop), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (2, 1, 0)
    assert sorted(_loops(trace.compiled)) == [0, 1]


def test_loops_under_inductor():
    magpy.config.on_backend_error = "raise"   # (a graph Inductor refused would run eagerly)
    for loop in CELL_LOOPS:
        magpy.reset()
        steps = _calls(_cell_inputs, [3, 5, 8, 4], [MONITOR, MONITOR, MOCK, MOCK], torch.no_grad)
        trace = check_compiled(_tagger(nn.GRUCell, loop), steps, backend="inductor", rtol=1e-5, atol=1e-5)
        assert magpy.stats(trace.compiled).records == 2
        assert sorted(_loops(trace.compiled)) == [0, 1]


def _walked_and_read_whole(x, h):
    for i, xt in enumerate(x):
        h = torch.tanh(xt + x[i] * 0.5 + h * x.mean(0))   # (x: walked, and an operand as a whole)
    return h


def _carried_from_a_read(x, h):
    y = h
    for xt in x:
        h = torch.tanh(xt + h * y)   # (y: the carried h's first value, read as it is)
    return h


def _while_carried_from_a_read(x, h):
    y = h
    while h.abs().sum() < x.size(0) * 10:
        h = h * 2 + y.abs() + 0.1
    return h


@pytest.mark.parametrize("program", [_walked_and_read_whole, _carried_from_a_read, _while_carried_from_a_read],
                         ids=lambda f: f.__name__[1:])
def test_operands_of_a_loop_that_are_one_tensor_compile_under_inductor(program):
    # An operator's operands may not alias one another: each is given once (a whole x the body
    # reads is the walked operand) or as a copy.
    magpy.config.on_backend_error = "raise"
    expect = [MONITOR, MONITOR, MOCK, MOCK] if program is not _while_carried_from_a_read else [MONITOR] + [ANY] * 3
    steps = _calls(_seq, [3, 5, 8, 4], expect, torch.no_grad)
    trace = check_compiled(lambda: (program, None), steps, backend="inductor", rtol=1e-5, atol=1e-5)
    assert 1 in _loops(trace.compiled)


# ---------------------------------------------------------------------------- stays unrolled

def _index_in_python(x, h):
    for i, xt in enumerate(x):
        h = h + xt * (1.0 if i == 0 else 0.5)   # the index steers Python
    return h


def _index_as_a_number(x, h):
    for i, xt in enumerate(x):
        h = h + xt * i   # the index as an operand, not a row
    return h


def _index_after(x, h):
    for i, xt in enumerate(x):
        h = h + xt
    return h * i


def _pairs_whole(x, h):
    for pair in enumerate(x):   # (the index reached through the pair: Python)
        h = h + pair[1]
    return h


def _zip_of_different_lengths(x, y, h):
    for xt, yt in zip(x, y[1:]):
        h = h + xt * yt
    return h


def _enumerate_of_zip_index_after(x, y, h):
    for t, (xt, yt) in enumerate(zip(x, y)):
        h = h * 0.9 + xt - yt
    return h * t   # (t unbound if the loop does not run)


def _enumerate_of_zip_start_by_keyword(x, y, h):
    for t, (xt, yt) in enumerate(zip(x, y), start=1):
        h = h * 0.9 + xt - yt
    return h


def _list_of_zip(x, y, h):
    for xt, yt in list(zip(x, y)):
        h = h * 0.9 + xt - yt
    return h


def _numbered(items):
    i = 0
    for item in items:
        yield i, item
        i += 1


def _enumerate_not_the_builtin(x, y, h):
    enumerate = _numbered   # (a Python generator by that name)
    for t, (xt, yt) in enumerate(zip(x, y)):
        h = h * 0.9 + xt - yt
    return h


def _zip_keeps_a_row(x, y, h):
    prev = h
    for xt, yt in zip(x, y):
        h = h + prev * yt
        prev = xt
    return h


def _range_next_row(x, h):
    for t in range(0, x.size(0) - 1, 2):
        h = h + x[t + 1]   # the index in Python arithmetic
    return h


def _range_reads_index_after(x, h):
    for t in range(1, x.size(0)):
        h = h + x[t]
    return h * t


def _range_from_the_end(x, h):
    for t in range(-2, x.size(0) - 2):
        h = h + x[t]   # (rows from the end first)
    return h


def _enumerate_from_the_end(x, h):
    for i, xt in enumerate(x, -1):
        h = h + xt * x[i]
    return h


def _store_reads_out(x, h):
    out = torch.zeros(x.shape[0], 2, 4)
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + out.mean())   # (reads what earlier steps stored)
        out[t] = h
    return out


def _store_into(x, h, out):
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + h)
        out[t] = h
    return h


def _store_another_dtype(x, h):
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + h)
        out[t] = h   # (converted)
    return out


def _store_a_column(x, h):
    out = torch.zeros(2, x.shape[0], 4)
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] + h)
        out[:, t] = h   # (only out[t] is the operator's)
    return out


UNROLLED = [(_index_in_python, _seq, "the loop's index is used in Python"),
            (_index_as_a_number, _seq, None), (_index_after, _seq, None),
            (_pairs_whole, _seq, "the loop's index is used in Python"),
            (_zip_of_different_lengths, _pair, "zip of tensors of different lengths"),
            (_zip_keeps_a_row, _pair, None),
            (_enumerate_of_zip_index_after, _pair, "t, unbound if the loop does not run, is read after it"),
            (_enumerate_of_zip_start_by_keyword, _pair, "inside another call than enumerate(zip(...))"),
            (_list_of_zip, _pair, "inside another call than enumerate(zip(...))"),
            (_enumerate_not_the_builtin, _pair, "inside another call than enumerate(zip(...))"),
            (_range_next_row, _seq, "the loop's index is used in Python"),
            (_range_reads_index_after, _seq, None), (_range_from_the_end, _seq, "a negative index"),
            (_enumerate_from_the_end, _seq, None),
            (_store_reads_out, _seq, "the loop's body reads a tensor it stores rows into"),
            (_store_another_dtype, _seq, "a row stored is not of the tensor's dtype and row shape"),
            (_store_a_column, _seq, "STORE_SUBSCR in a branch")]


def _seq_and_out(n):
    return (*_seq(n), torch.zeros(n, 2, 4))


def test_rows_stored_into_a_tensor_from_outside_are_unrolled():
    # A graph input (the caller's tensor), not made by the graph: the caller sees it updated.
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _calls(_seq_and_out, [3, 5, 6, 7])]
    trace = check_compiled(lambda: (_store_into, None), steps)
    assert not any(_loops(trace.compiled))
    conds = magpy.explain(trace.compiled, *_seq_and_out(6)).control_flow
    why = "a row is stored into a tensor the graph did not make before the loop"
    assert any(why in c for c in conds), conds


@pytest.mark.parametrize("program, make, why", UNROLLED, ids=lambda p: getattr(p, "__name__", "")[1:])
def test_a_loop_that_cannot_be_the_operator_is_unrolled(program, make, why):
    steps = [Step(s.name, s.args, seed=s.seed, expect=ANY) for s in _calls(make, [3, 5, 6, 7, 3])]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert not any(_loops(trace.compiled))
    conds = magpy.explain(trace.compiled, *make(6)).control_flow
    assert not any(WHILE in c for c in conds), conds
    assert why is None or any(why in c for c in conds), conds
