"""Gradient accumulation as people write it (issue 30): a compiled micro-step

    def step(i, x, y):
        loss = loss_fn(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step(); opt.zero_grad(set_to_none=...)

called with the loop index ``i``, a Python int that changes every call.  ``i`` is lifted from
its second value, 1, on (a symbol of the ints from 1 up, ``magpy.graphs.dynamic.twins.Twins.int_symbol``),
and the branch on it is guarded by the side it takes (``(1 + s0) % k != 0``), not by the
value; ``i`` does not enter the graph, so the backward stays in it (one graph per call).

What is left is the program's own structure, one record each: the first call (``i`` still
a constant), the first optimizer step (no optimizer state yet: SGD's momentum buffers,
AdamW's moments, are made there), then the steady state: the accumulate-only micro-step and
the step.  Whether a parameter's ``.grad`` is None (after ``zero_grad(set_to_none=True)``)
or holds the gradients so far makes no record of its own: the graph adds into a buffer the
mock takes from ``.grad``, or makes where there is none (``magpy.training.backward``), so 4 records
for every ``k`` and both forms of ``zero_grad``.  Every call after the first ``2 * k``
micro-steps is a mock run.  Before, the micro-step after a step, finding no ``.grad``, was
a record of its own (5 for ``k=4`` and ``set_to_none=True``); before that, ``i`` was
guarded by value at 0 and 1 and lifted from 2, and the lifted int made the backward an
eager step (two graphs per call): 6 records.

Each test compares against the same loop run eagerly after every micro-step: loss,
parameters, gradients and optimizer state, bit for bit under backend "eager".
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
    after,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
)

OPTIMIZERS = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01),
}


def _observe(state):
    """Everything a micro-step changes: parameters and their .grad, the optimizer's state."""
    model, opt = state["model"], state["opt"]
    return [(name, t, t.grad) for name, t in model.named_parameters()], opt.state_dict()


def _build(k, make_opt, set_to_none):
    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = make_opt(model.parameters())

        def micro_step(i, x, y):
            loss = nn.functional.mse_loss(model(x), y) / k
            loss.backward()
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad(set_to_none=set_to_none)
            return loss.detach()
        return micro_step, {"model": model, "opt": opt}
    return build


def _micro_batch(i):
    return lambda state: (i, torch.randn(6, 8), torch.randn(6, 4))


# The first call, the first optimizer step, the steady accumulate-only and step records, for
# every k and either form of zero_grad (whatever .grad holds: magpy.training.backward's buffers).
RECORDS = 4


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeroed"])
@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_records_per_structure_not_per_step(k, opt, set_to_none):
    n = 4 * k
    steps = [Step(f"micro-step {i}", _micro_batch(i), seed=i, expect=ANY if i < 2 * k else MOCK)
             for i in range(n)]
    trace = check_compiled(_build(k, OPTIMIZERS[opt], set_to_none), steps, fullgraph=False, observe=_observe,
                           expect_records=RECORDS)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and st.breaks == {} and st.graphs_per_call == 1, st
    assert st.mock_runs == n - RECORDS, st


def test_first_micro_steps_record_then_every_call_replays():
    # (the harness's expectations, call by call, for k=4, SGD with momentum, set_to_none)
    k = 4
    expect = {0: MONITOR,   # no .grad
              1: MONITOR,   # i lifted (from 1), .grad present: the accumulate-only record
              3: MONITOR,   # the first step: no momentum buffers yet
              7: MONITOR}   # the step, momentum buffers present
    # (4, finding no .grad after zero_grad(set_to_none=True), replays 1: its .grad is a buffer)
    steps = [Step(f"micro-step {i}", _micro_batch(i), seed=i, expect=expect.get(i, MOCK)) for i in range(16)]
    check_compiled(_build(k, OPTIMIZERS["sgd-momentum"], True), steps, fullgraph=False, observe=_observe,
                   expect_records=4)


class _MicroSteps:
    def __init__(self):
        self.done = 0


def test_accumulation_counted_in_program_state():
    # The index kept by the program instead (``self.done += 1``): a counter read from state,
    # lifted from 1 too; the same records.
    k = 4

    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt, micro = OPTIMIZERS["sgd-momentum"](model.parameters()), _MicroSteps()

        def micro_step(x, y):
            loss = nn.functional.mse_loss(model(x), y) / k
            loss.backward()
            micro.done += 1
            if micro.done % k == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
            return loss.detach()
        return micro_step, {"model": model, "opt": opt, "micro": micro}
    steps = [Step(f"micro-step {i}", lambda state: (torch.randn(6, 8), torch.randn(6, 4)), seed=i,
                  expect=ANY if i < 2 * k else MOCK) for i in range(4 * k)]
    trace = check_compiled(build, steps, fullgraph=False, observe=lambda s: (_observe(s), s["micro"].done),
                           expect_records=RECORDS)
    assert magpy.stats(trace.compiled).graphs_per_call == 1


def test_state_changed_between_micro_steps():
    # From outside, between calls: the learning rate (guarded by value until it has changed,
    # then lifted: one record per side of the branch again), the loop index jumping ahead
    # (resuming a run: the same records), and a micro-step repeated with the same index.
    k = 2

    def lower_lr(state):
        state["opt"].param_groups[0]["lr"] *= 0.5

    steps = [Step(f"micro-step {i}", _micro_batch(i), seed=i, expect=ANY) for i in range(6)]
    steps += [after(lower_lr, _micro_batch(6), expect=ANY),
              Step("micro-step 7", _micro_batch(7), seed=7, expect=ANY),
              Step("micro-step 1000", _micro_batch(1000), seed=8, expect=ANY),
              Step("micro-step 1001", _micro_batch(1001), seed=9, expect=ANY),
              Step("micro-step 1001 again", _micro_batch(1001), seed=10, expect=ANY)]
    trace = check_compiled(_build(k, OPTIMIZERS["adamw"], True), steps, fullgraph=False, observe=_observe)
    assert magpy.stats(trace.compiled).eager_runs == 0


# -- the mechanism, on a plain function ------------------------------------------------------------

def _every_third(i, x):
    if (i + 1) % 3 == 0:
        return x * 2
    return x + 1


def test_int_argument_lifted_from_its_second_value_one():
    # i = 0 records (a constant), i = 1 lifts i (the ints from 1 up) on the side "not a
    # multiple of 3", i = 2 the other side; every later index replays one of those.
    def build():
        return _every_third, None
    steps = [Step(f"i={i}", lambda state, i=i: (i, torch.randn(3)), seed=i, expect=MONITOR if i < 3 else MOCK)
             for i in range(10)]
    check_compiled(build, steps, fullgraph=False, expect_records=3)


BROADCASTS = {   # program, input shape, values of n, records
    "rows": (lambda x, n: x + torch.ones(n, 1), (4,), [3, 1, 4, 1, 5, 2], 3),
    "same-or-one": (lambda x, n: x + torch.ones(n), (3,), [3, 1, 3, 1, 1, 3], 2),
}


@pytest.mark.parametrize("name", BROADCASTS)
def test_int_argument_one_as_a_size_is_told_apart_where_torch_needs_it(name):
    # Lifted at 1, an int used as a size that broadcasts: torch guards the symbol's value
    # there (``s0 == 1``), so a larger value records again rather than reuse the record
    # made for 1 (rows: 3 constant, then 1, then 4 and up).
    program, shape, values, records = BROADCASTS[name]

    def build():
        return program, None
    steps = [Step(f"n={n}", lambda state, n=n: (torch.randn(*shape), n), seed=j, expect=ANY)
             for j, n in enumerate(values)]
    trace = check_compiled(build, steps, fullgraph=False, expect_records=records)
    assert magpy.stats(trace.compiled).eager_runs == 0


# -- where the forward does take symbolic sizes, the backward stays an eager step -----------------

def _plain_build(weighted):
    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def train_step(i, x, y):
            opt.zero_grad(set_to_none=False)
            loss = nn.functional.mse_loss(model(x), y)
            if weighted:
                loss = loss * (i + 1)   # (the lifted int is an input of the forward)
            loss.backward()
            opt.step()
            return loss.detach()
        return train_step, {"model": model, "opt": opt}
    return build


@pytest.mark.parametrize("what", ["batch-size", "int-in-the-loss"])
def test_backward_of_a_forward_with_symbolic_sizes_stays_eager(what):
    # A batch size that changes is lifted (a symbolic size of the forward), and so is an int
    # the loss is multiplied by: the backward is an eager step between graphs, as before.
    weighted = what == "int-in-the-loss"

    def batch(i):
        rows = 6 if weighted else 3 + i
        return lambda state: (i, torch.randn(rows, 8), torch.randn(rows, 4))
    steps = [Step(f"step {i}", batch(i), seed=i, expect=ANY) for i in range(6)]
    trace = check_compiled(_plain_build(weighted), steps, fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and any("symbolic sizes" in reason for reason in st.breaks), st


# -- a .grad None or present: one record (magpy.training.backward's accumulation buffers) -----

def _bits(t):
    """A tensor's bits (``torch.equal`` takes -0.0 for 0.0 and no NaN for itself)."""
    return None if t is None else t.detach().view(torch.int32)


def _grads_observed(state):
    w = state["w"]
    return _bits(w.grad), _bits(state.get("held")), w.grad is state.get("held"), \
        [g is w.grad for g in state.get("seen", ())]


def _signed_zeros(state):
    # gradients with -0.0 and 0.0, which a -0.0 buffer keeps bit for bit
    x = torch.randn(4, 3)
    x[0] = -0.0
    x[1, 0] = 0.0
    return (x,)


def _hold_grad(state):
    state["w"].grad = state["held"] = torch.full((4, 3), -0.0)


def _drop_grad(state):
    state["w"].grad = None


def _accumulating(keep=False, clear_first=False):
    def build():
        w = nn.Parameter(torch.randn(4, 3))
        state = {"w": w, "seen": []}

        def accumulate(x):
            if clear_first:
                w.grad = None
            (w * x).sum().backward()
            if keep:
                state["seen"].append(w.grad)
        return accumulate, state
    return build


def test_grad_none_or_present_is_one_record():
    # The first call makes .grad; the others add into it, find none again (set to None from
    # outside), or add into a tensor the program holds (which sees the sums, as in eager);
    # one record for all.  A .grad laid out otherwise than AccumulateGrad makes it (strides
    # of a transpose) records again, adding into it in the graph.
    def transposed(state):
        state["w"].grad = state["held"] = torch.zeros(3, 4).t()

    steps = [Step("no .grad", _signed_zeros, seed=0, expect=MONITOR),
             Step(".grad present", _signed_zeros, seed=1, expect=MOCK),
             after(_drop_grad, _signed_zeros, seed=2, expect=MOCK),
             Step(".grad present again", _signed_zeros, seed=3, expect=MOCK),
             after(_hold_grad, _signed_zeros, seed=4, expect=MOCK),
             Step("the held .grad again", _signed_zeros, seed=5, expect=MOCK),
             after(transposed, _signed_zeros, seed=6, expect=MONITOR),
             after(_drop_grad, _signed_zeros, seed=7, expect=MOCK)]
    check_compiled(_accumulating(), steps, fullgraph=False, observe=_grads_observed, expect_records=2)


def test_grad_kept_by_the_program_is_the_buffer():
    # The program keeps the .grad it accumulated into: the mock leaves the same tensor there.
    steps = [Step("no .grad", _signed_zeros, seed=0, expect=MONITOR),
             Step(".grad present", _signed_zeros, seed=1, expect=MOCK),
             after(_drop_grad, _signed_zeros, seed=2, expect=MOCK),
             after(_hold_grad, _signed_zeros, seed=3, expect=MOCK)]
    check_compiled(_accumulating(keep=True), steps, fullgraph=False, observe=_grads_observed,
                   expect_records=1)


def test_grad_the_program_set_before_its_backward_is_no_buffer():
    # ``w.grad = None`` in the call, then backward: a new .grad every time, never an addition
    # into the one the call found (the held tensor keeps its zeros).
    steps = [Step("no .grad", _signed_zeros, seed=0, expect=MONITOR),
             after(_hold_grad, _signed_zeros, seed=1, expect=ANY),
             Step("again", _signed_zeros, seed=2, expect=ANY),
             after(_drop_grad, _signed_zeros, seed=3, expect=ANY)]
    check_compiled(_accumulating(clear_first=True), steps, fullgraph=False, observe=_grads_observed)


class _Firsts:
    def __init__(self):
        self.n = 0


def test_grad_looked_at_before_its_backward_stays_guarded():
    # The program branches on ``w.grad is None`` before its backward: that is guarded by
    # value (one record per side), the .grad is no buffer.
    def build():
        w, firsts = nn.Parameter(torch.randn(4, 3)), _Firsts()

        def accumulate(x):
            if w.grad is None:
                firsts.n += 1
            (w * x).sum().backward()
        return accumulate, {"w": w, "firsts": firsts}
    steps = [Step("no .grad", _signed_zeros, seed=0, expect=MONITOR),
             Step(".grad present", _signed_zeros, seed=1, expect=MONITOR),
             after(_drop_grad, _signed_zeros, seed=2, expect=ANY),
             Step(".grad present again", _signed_zeros, seed=3, expect=ANY),
             after(_drop_grad, _signed_zeros, seed=4, expect=ANY)]
    trace = check_compiled(build, steps, fullgraph=False,
                           observe=lambda s: (_grads_observed(s), s["firsts"].n))
    assert magpy.stats(trace.compiled).eager_runs == 0


def test_accumulated_grad_read_in_the_same_call():
    # clip_grad_norm_ after every backward reads the accumulated .grad in the graph (the
    # buffer after the addition), whether the micro-step found a .grad or not.
    k = 3

    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = OPTIMIZERS["adamw"](model.parameters())

        def micro_step(i, x, y):
            loss = nn.functional.mse_loss(model(x), y) / k
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
            return loss.detach(), norm
        return micro_step, {"model": model, "opt": opt}
    steps = [Step(f"micro-step {i}", _micro_batch(i), seed=i, expect=ANY if i < 2 * k else MOCK)
             for i in range(4 * k)]
    check_compiled(build, steps, fullgraph=False, observe=_observe, expect_records=4)


def test_two_backwards_in_one_call():
    # The first backward's .grad is the buffer; the second adds into the first's sum, in the
    # graph.
    def build():
        w = nn.Parameter(torch.randn(4, 3))

        def twice(x):
            (w * x).sum().backward()
            (w * x * x).sum().backward()
        return twice, {"w": w}
    steps = [Step("no .grad", _signed_zeros, seed=0, expect=MONITOR),
             Step(".grad present", _signed_zeros, seed=1, expect=MOCK),
             after(_drop_grad, _signed_zeros, seed=2, expect=MOCK),
             after(_hold_grad, _signed_zeros, seed=3, expect=MOCK)]
    check_compiled(build, steps, fullgraph=False, observe=_grads_observed, expect_records=1)


def test_accumulation_then_an_eager_step():
    # The loss read into Python between the backward and the optimizer step: the step's graph
    # takes the buffer (the first graph's sum) as its input.
    k = 4

    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = OPTIMIZERS["sgd-momentum"](model.parameters())
        log = []

        def micro_step(i, x, y):
            loss = nn.functional.mse_loss(model(x), y) / k
            loss.backward()
            log.append(loss.item())
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
        return micro_step, {"model": model, "opt": opt, "log": log}
    steps = [Step(f"micro-step {i}", _micro_batch(i), seed=i, expect=ANY if i < 2 * k else MOCK)
             for i in range(4 * k)]
    trace = check_compiled(build, steps, fullgraph=False, observe=lambda s: (_observe(s), s["log"]),
                           expect_records=RECORDS)
    assert magpy.stats(trace.compiled).eager_runs == 0


def test_grad_of_an_argument():
    # A leaf the caller passes, with or without a .grad; the call returns its .grad.
    def grad_of(x):
        (x * x).sum().backward()
        return x.grad

    def build():
        return grad_of, None

    def leaf(with_grad):
        def args(state):
            x = torch.randn(4, 3).requires_grad_()
            if with_grad:
                x.grad = torch.full((4, 3), -0.0)
            return (x,)
        return args
    steps = [Step("no .grad", leaf(False), seed=0, expect=MONITOR),
             Step("no .grad again", leaf(False), seed=1, expect=MOCK),
             Step("a .grad", leaf(True), seed=2, expect=MOCK)]
    check_compiled(build, steps, fullgraph=False, expect_records=1)


def test_some_grads_none_some_present():
    # One parameter's .grad dropped, the other's kept: each buffer as its leaf has it.
    def build():
        model = nn.Linear(3, 4)

        def accumulate(x):
            model(x).square().sum().backward()
        return accumulate, {"model": model}

    def drop_weight_grad(state):
        state["model"].weight.grad = None

    def observe(state):
        return [_bits(p.grad) for p in state["model"].parameters()]
    steps = [Step("no .grad", lambda s: (torch.randn(2, 3),), seed=0, expect=MONITOR),
             Step(".grad present", lambda s: (torch.randn(2, 3),), seed=1, expect=MOCK),
             after(drop_weight_grad, lambda s: (torch.randn(2, 3),), seed=2, expect=MOCK),
             Step(".grad present again", lambda s: (torch.randn(2, 3),), seed=3, expect=MOCK)]
    check_compiled(build, steps, fullgraph=False, observe=observe, expect_records=1)
