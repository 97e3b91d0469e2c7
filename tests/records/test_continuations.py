"""Continuations: a check that fails after effects resumes the monitor at the break.

Each program does something that cannot be taken back (I/O, an in-place buffer update, a
list append, an attribute write) and then reads tensor data that steers it.  Calls with
both outcomes, alternating, must match eager (outputs, program state, printed text: each
effect exactly once); the first call of each new outcome resumes at the break and records
a continuation, later ones replay it.
"""
from __future__ import annotations

import contextlib
import copy
import io
import threading

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture
from tests.harness.differential import same


def _run(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return result, out.getvalue()


def _compare(build, inputs, *, monitor_runs, eager_runs=0, graphs=None):
    """Build two copies, run one eagerly and one compiled on each input, compare results,
    state (the module's buffers and attributes) and printed text after every call."""
    eager, compiled_model = build(), build()
    compiled = magpy.compile(compiled_model, backend="eager")
    for i, x in enumerate(inputs):
        got, printed = _run(compiled, x.clone())
        want, printed_e = _run(eager, x.clone())
        where = f"call {i} ({x.flatten()[:2].tolist()})"
        assert same(got, want), f"{where}: {got} != {want}"
        assert printed == printed_e, f"{where}: printed {printed!r}, eagerly {printed_e!r}"
        assert same(_state(compiled_model), _state(eager)), f"{where}: state differs"
        if graphs is not None and i > 1:
            assert magpy.stats(compiled).graphs_per_call >= graphs, (where, magpy.stats(compiled))
    st = magpy.stats(compiled)
    assert (st.monitor_runs, st.eager_runs) == (monitor_runs, eager_runs), st
    return compiled


def _state(m):
    return {k: v for k, v in vars(m).items() if not k.startswith("_") or k == "_buffers"}


def _alternating(n=8, shape=(2, 4)):
    return [torch.full(shape, 1.0 + i) * (1 if i % 2 == 0 else -1) for i in range(n)]


class PrintThenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.events = []

    def forward(self, x):
        h = self.lin(x)
        print("after lin", tuple(h.shape))     # I/O: a failed check cannot take it back
        self.events.append("lin")
        if h.sum() > 0:
            self.events.append("pos")
            return h.relu() * 2
        self.events.append("neg")
        return h.tanh() - 1


def _sign_flip(i):
    return torch.full((2, 4), 3.0 + i) * (1 if i % 2 == 0 else -1)


def _identity(lin):
    """Make ``lin`` the identity, so the branch follows the input's sign."""
    with torch.no_grad():
        lin.weight.copy_(torch.eye(4))
        lin.bias.zero_()


def _pos_neg_build():
    torch.manual_seed(0)
    m = PrintThenBranch()
    _identity(m.lin)
    return m


def test_branch_after_print_alternates_without_repeating_the_print():
    inputs = [_sign_flip(i) for i in range(8)]
    compiled = _compare(_pos_neg_build, inputs, monitor_runs=2)
    rec = compiled._magpy_cache.records[0]
    assert len(rec.continuations) == 1 and len(next(iter(rec.continuations.values()))) == 1
    assert "cont0(locals())" in rec.mock_source


class Counter(nn.Module):
    """A buffer updated in place, then a branch three frames down."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.inner = Inner()

    def forward(self, x):
        self.calls.add_(1)                      # in place: a failed check cannot take it back
        return self.inner(x) + self.calls


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.pick(self.lin(x), scale=2.0)

    def pick(self, h, scale):
        return _helper(h, scale)


def _helper(h, scale):
    if h.mean() > 0:                            # three frames below forward
        return h * scale
    return -h


def _counter_build():
    torch.manual_seed(1)
    m = Counter()
    _identity(m.inner.lin)
    return m


def test_branch_three_frames_down_after_an_in_place_update():
    inputs = [_sign_flip(i) for i in range(8)]
    compiled = _compare(_counter_build, inputs, monitor_runs=2)
    assert float(compiled.calls) == 8


class EarlyExit(nn.Module):
    """A loop over a ModuleList that logs each block and stops when the activation is small."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        self.log = []

    def forward(self, x):
        h = x
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            self.log.append(i)
            print("block", i)
            if h.abs().max() < 1.0:             # data-dependent early exit after effects
                break
        return h


def _early_build():
    torch.manual_seed(2)
    m = EarlyExit()
    with torch.no_grad():
        for b in m.blocks:
            b.weight.copy_(torch.eye(4) * 0.5)
            b.bias.zero_()
    return m


def test_early_exit_from_a_module_list_loop_resumes_inside_the_loop():
    # 8 -> 4 -> 2 -> 1 -> 0.5: the exit block depends on the input's scale.
    inputs = [torch.full((1, 4), v) for v in (3.0, 0.7, 3.0, 12.0, 0.7, 12.0, 3.0)]
    compiled = _compare(_early_build, inputs, monitor_runs=3)
    conts = compiled._magpy_cache.records[0].continuations
    assert sum(len(c) for c in conts.values()) == 2, conts


class ScaleAfterEffect(nn.Module):
    """A value read after an effect becomes a constant of the graph (a clamp bound): a check
    that fails whenever the value changes, so every new value resumes (correct, never
    repeated effects)."""

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        print("in")
        s = float(x.sum())
        self.history.append(s)
        return x.clamp(max=s)


def test_a_value_that_changes_every_call_resumes_every_call():
    inputs = [torch.full((2,), float(i + 1)) for i in range(4)] + [torch.full((2,), 1.0)]
    compiled = _compare(ScaleAfterEffect, inputs, monitor_runs=4)
    assert magpy.stats(compiled).mock_runs == 1   # the last input's value was seen before


class SmallIntAfterEffect(nn.Module):
    """A step's result with no identity (a small int) checked after an effect: the resumed
    frame gets the new value in the slot the step's result went to."""

    def __init__(self):
        super().__init__()
        self.events = []

    def forward(self, x):
        self.events.append("start")
        print("start")
        n = int(x.argmax())
        self.events.append(n)
        return x[: n + 1] * 2


def test_a_small_int_result_is_resumed_into_its_stack_slot():
    inputs = [torch.tensor([0.0, 5.0, 1.0]), torch.tensor([5.0, 0.0, 1.0]), torch.tensor([0.0, 5.0, 1.0]),
              torch.tensor([0.0, 1.0, 5.0]), torch.tensor([5.0, 0.0, 1.0])]
    _compare(SmallIntAfterEffect, inputs, monitor_runs=3)


class UnreadUnpicklable(nn.Module):
    """The module the call changes holds an attribute the call never reads that cannot be
    pickled (a lock here; a DDP module's process group): the resume point takes the module's
    changed attribute, not that one."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        self.called = False

    def forward(self, x):
        self.called = True
        print("called")
        if x.sum() > 0:
            print("positive")   # an effect in the arm: the if stays a check (not a cond)
            return x * 2
        return x - 1


def test_a_changed_module_with_an_unpicklable_attribute_resumes():
    inputs = [_sign_flip(i) for i in range(6)]
    compiled = _compare(UnreadUnpicklable, inputs, monitor_runs=2)
    assert magpy.stats(compiled).mock_runs == 4


class NotResumable(nn.Module):
    """A branch inside a generator the program iterates, after an effect: the generator's
    frame cannot be rebuilt, so the call runs eagerly (correctly)."""

    def forward(self, x):
        print("go")
        return sum(self.parts(x))

    def parts(self, x):
        for row in x:
            yield row * 2 if row.sum() > 0 else row


def test_a_branch_that_cannot_resume_runs_eagerly(monkeypatch):
    # As a torch.cond (magpy.graphs.controlflow) the branch needs no resume point: switched off here.
    monkeypatch.setattr(magpy.config, "control_flow", False)
    inputs = [torch.ones(2, 2), -torch.ones(2, 2), torch.ones(2, 2)]
    compiled = _compare(NotResumable, inputs, monitor_runs=1, eager_runs=2)
    assert "cannot resume there" in magpy.stats(compiled).break_reasons[0]


def test_the_same_branch_as_a_cond_compiles():
    inputs = [torch.ones(2, 2), -torch.ones(2, 2), torch.ones(2, 2)]
    _compare(NotResumable, inputs, monitor_runs=1, eager_runs=0)


@pytest.mark.parametrize("backend", ["inductor"])
def test_continuations_with_inductor(backend):
    m_e, m_c = _pos_neg_build(), _pos_neg_build()
    compiled = magpy.compile(m_c, backend=backend)
    for i in range(4):
        x = _sign_flip(i)
        got, printed = _run(compiled, x.clone())
        want, printed_e = _run(m_e, x.clone())
        assert torch.allclose(got, want) and printed == printed_e and m_c.events == m_e.events
    st = magpy.stats(compiled)
    assert (st.monitor_runs, st.eager_runs, st.mock_runs) == (2, 0, 2), st
    assert copy.copy(st.graphs_per_call) >= 2


class Scoped(nn.Module):
    """Branches after effects inside ``with torch.no_grad()``, a user context manager and a
    ``try/finally``: the resumed frames hold the managers' ``__exit__`` on their stacks."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.events = []

    def forward(self, x):
        with torch.no_grad(), Tracker(self.events):
            h = self.lin(x)
            print("inside")
            try:
                if h.sum() > 0:
                    h = h * 2
                else:
                    h = h - 3
            finally:
                self.events.append("finally")
        return h + 1, torch.is_grad_enabled()


class Tracker:
    def __init__(self, events):
        self.events = events

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


def _scoped_build():
    torch.manual_seed(3)
    m = Scoped()
    _identity(m.lin)
    return m


def test_branch_inside_with_blocks_and_try_finally_resumes(monkeypatch):
    monkeypatch.setattr(magpy.config, "control_flow", False)   # (else the branch is a cond)
    inputs = [_sign_flip(i) for i in range(6)]
    _compare(_scoped_build, inputs, monitor_runs=2)
    monkeypatch.setattr(magpy.config, "control_flow", True)
    _compare(_scoped_build, inputs, monitor_runs=1)


def _list_loop_branch(x):
    """A branch inside ``for i, (a, b) in enumerate(zip(list, list))`` after an effect (a draw
    from the global generator), as in ViLT's visual embedding.  The list iterators resume at
    their positions, and a continuation's own resume point sees the iterator the continuation
    advanced (a third outcome gave three rows instead of two where it did not)."""
    outs = []
    for i, (a, b) in enumerate(zip([1.0, 2.0], [3.0, 4.0])):
        noise = torch.rand(1)
        if x.sum() - a * 8 <= 0:
            outs.append(x * b + noise)
        else:
            outs.append(x - b)
    return torch.stack(outs)


def test_a_branch_in_a_loop_over_lists_gives_eagers_results_on_every_outcome():
    compiled = magpy.compile(_list_loop_branch, backend="eager")
    for v in (0.1, 1.5, 3.0, 0.1, 1.5, 3.0):
        x = torch.full((2, 4), v)
        torch.manual_seed(0)
        want = _list_loop_branch(x)
        torch.manual_seed(0)
        got = compiled(x)
        assert same(got, want), (v, got, want)
    assert magpy.stats(compiled).monitor_runs >= 1
