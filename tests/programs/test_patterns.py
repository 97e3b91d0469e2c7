"""Issue 16, "patterns that should be one graph": programs torch.compile captures whole (and a
few it refuses), compiled differentially against eager with ``fullgraph=True``.

Each program runs through ``tests.harness.compile_harness``: first call (monitor run), the identical
call again (must hit the record), fresh inputs of the same shapes, and a mutation of what it
reads (an input's dtype, an attribute, a global) that must record anew, never replay a stale
constant.
"""
import collections
import itertools
import operator
import random
import sys
import warnings

import numpy as np
import pytest
import torch

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
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    isolated,
    standard,
)

# ============================================================================ 1. metadata values
# Python values computed from tensor metadata, not data: constants of the record, since the
# guard fixes every input's dtype, device and shape.  A different dtype must record anew.

def _typed(s):
    return torch.randn(3, 4).to(s["float"]), torch.arange(4).to(s["int"])


def _to_double(s):
    s["float"] = torch.float64


def _to_int32(s):
    s["int"] = torch.int32


def _type_string(x, i):
    scale = 2.0 if x.type() == "torch.FloatTensor" else 3.0
    return x * scale + len(i.type())


def _type_of_other(x, i):
    return x + i.type(x.type())


def _promote(x, i):
    return x.to(torch.promote_types(x.dtype, i.dtype)) + i


def _result_type(x, i):
    return x.to(torch.result_type(x, i)) * i.to(torch.result_type(i, 2.5))


def _can_cast(x, i):
    return x * 2 if torch.can_cast(i.dtype, x.dtype) else x.to(i.dtype)


def _finfo(x, i):
    info = torch.finfo(x.dtype)
    return x.clamp(min=info.min, max=info.max) * info.eps + info.tiny + torch.iinfo(i.dtype).max


_NP_TO_TORCH = {np.float32: torch.float32, np.float64: torch.float64}


def _numpy_dtypes(x, i):
    np_dtype = np.float64 if x.dtype == torch.float64 else np.float32
    width = np.dtype(np_dtype).itemsize + np.finfo(np_dtype).eps
    return x.to(_NP_TO_TORCH[np_dtype]) * np.float32(width) + torch.tensor(np.ones(4, dtype=np_dtype)) + i


METADATA_PROGRAMS = [_type_string, _type_of_other, _promote, _result_type, _can_cast, _finfo, _numpy_dtypes]


@pytest.mark.parametrize("program", METADATA_PROGRAMS, ids=lambda f: f.__name__.lstrip("_"))
def test_metadata_values_are_constants_of_the_record(program):
    # torch.compile: one graph for t.type(), t.type(other.type()), promote_types, finfo/iinfo
    # and numpy dtypes; it breaks on result_type and can_cast ("torch.* op returned non-Tensor").
    def build():
        return program, {"float": torch.float32, "int": torch.int64}

    check_compiled(build, standard(_typed) + [
        after(_to_double, args=_typed), again(), after(_to_int32, args=_typed), again(),
    ], observe=lambda s: None, expect_graphs=3)


# ============================================================================ 2. min/max, index
# ``max(a, b)``/``min(a, b)`` of 0-d tensors: one graph (a cond handing over ``a`` or ``b``
# itself), tests/programs/test_more_patterns.py.

def _scalars(s):
    return torch.tensor(1.5), torch.tensor(2.5)


def _index_program(s):
    blocks, scales = s["blocks"], s["scales"]

    def forward(x):
        # list.index compares by identity first: modules have no __eq__, and x is found at
        # its own position without comparing tensors.
        i = blocks.index(s["chosen"])
        j = [x, x + 1].index(x)
        return blocks[i](x) * scales[i] + j

    return forward


def _choose_other(s):
    s["chosen"] = s["blocks"][0]


def _index_build():
    s = {"blocks": [torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.ReLU()], "scales": [1.0, 2.0, 3.0]}
    s["chosen"] = s["blocks"][1]
    return _index_program(s), s


def test_list_index_by_identity_is_one_graph():
    # torch.compile: one graph too.
    check_compiled(_index_build, standard(lambda s: (torch.randn(3, 4),)) + [after(_choose_other), again()],
                   observe=lambda s: s["chosen"], expect_graphs=2)


def test_list_index_comparing_tensors_is_an_eager_step():
    # [a, b].index(b) compares ``a == b`` and reads its truth: the call runs eagerly between
    # graphs and its result (a position) is checked.  torch.compile breaks there too
    # ("data-dependent branching").
    trace = check_compiled(lambda: (lambda a, b: [a, b].index(b) + a, None),
                           [first(_scalars), again(expect=MOCK), fresh(_scalars, expect=MOCK)],
                           fullgraph=False, expect_records=1)
    assert any("Tensor.__bool__" in reason for reason in trace.compiled._magpy_cache.stats.breaks)


def test_operator_index_of_a_tensor_is_checked_in_the_graph():
    # operator.index(k) reads k's value into Python (Tensor.__index__), a slice bound: the
    # graph checks that k holds it (torch.compile makes it one graph with an unbacked
    # symbolic int; magpy's graphs have no symbolic values yet).  Another k records anew.
    trace = check_compiled(lambda: (lambda x, k: x[:operator.index(k)] * 2, None),
                           [first(lambda s: (torch.randn(5), torch.tensor(3))), again(expect=MOCK),
                            fresh(lambda s: (torch.randn(5), torch.tensor(2)), expect=MONITOR)],
                           expect_records=2, expect_graphs=2)
    assert not trace.compiled._magpy_cache.stats.breaks


# ============================================================================ 3. assertions
# ``assert cond`` / ``torch._assert(cond, msg)`` on tensor data is recorded as an assertion
# operation of the graph (``aten._assert_async.msg``), not a break.  When it fails on a call
# that hits the record, the graph raises before the mock changed anything; magpy then runs
# that call eagerly, so the program raises its own AssertionError with eager's state, and the
# record stays (the next good call hits it again).

class Checked(torch.nn.Module):
    def __init__(self, check):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.low = 0.0
        self.check = check
        self.log = []

    def forward(self, x):
        self.log.append(x.shape[0])   # an effect before the assertion
        h = self.lin(x)
        self.check(self, x)
        return h.relu()


# Written as a user's module would be: pytest rewrites the assert statements of test modules.
_CHECKS = {"__name__": "user_checks", "torch": torch}
exec(compile(
    "def _assert_statement(m, x):\n"
    "    assert (x >= m.low).all(), 'input below the floor'\n"
    "def _torch_assert(m, x):\n"
    "    torch._assert((x >= m.low).all(), 'input below the floor')\n"
    "def _assert_not(m, x):\n"
    "    assert not (x < m.low).any()\n", "user_checks.py", "exec"), _CHECKS)
_assert_statement, _torch_assert, _assert_not = (
    _CHECKS["_assert_statement"], _CHECKS["_torch_assert"], _CHECKS["_assert_not"])


def _positive(s):
    return (torch.rand(3, 4) + 0.5,)


def _negative(s):
    return (torch.rand(3, 4) - 2.0,)


def _lower_floor(m):
    m.low = -5.0


@pytest.mark.parametrize("check", [_assert_statement, _torch_assert, _assert_not], ids=lambda f: f.__name__)
def test_assertion_on_tensor_data_is_in_the_graph(check):
    # torch.compile: one graph for the assert statement; it breaks on `assert not t.any()`
    # (data-dependent branching) and on torch._assert of a tensor (data-dependent guard).
    def build():
        m = Checked(check)
        return m, m

    trace = check_compiled(build, standard(_positive) + [
        Step("bad data: the assertion fails, the call runs eagerly", _negative, expect=EAGER),
        again(_positive, name="good data again (the record stays)"),
        after(_lower_floor, args=_negative), again(),
    ], observe=lambda m: (m.low, list(m.log)), expect_graphs=2)
    assert trace.stats["break_reasons"] == []
    nodes = trace.compiled._magpy_cache.records[0].graphs[0].graph.nodes
    assert any(n.target is torch.ops.aten._assert_async.msg for n in nodes)


def test_failed_assertion_message_and_type_are_eagers():
    fast = magpy.compile(Checked(_torch_assert), backend="eager", fullgraph=True)
    fast(torch.rand(3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # not magpy's failure: no warning
        with pytest.raises(AssertionError, match="^input below the floor$"):
            fast(torch.rand(3, 4) - 2.0)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.eager_runs, st.records) == (1, 1, 1)


class Validated(torch.nn.Module):
    """torch.distributions with argument validation, eager's default: each parameter and the
    value are checked (``if not valid: raise ValueError(...)`` in torch's own code)."""

    def __init__(self):
        super().__init__()
        self.log_scale = torch.nn.Parameter(torch.zeros(4))

    def forward(self, x, value):
        d = torch.distributions.Normal(x, self.log_scale.exp(), validate_args=True)
        return d.log_prob(value), d.entropy()


def _loc_and_value(s):
    return torch.randn(3, 4), torch.randn(3, 4)


def _zero_scale(m):
    with torch.no_grad():
        m.log_scale.fill_(float("-inf"))   # scale 0: not a valid Normal


def _unit_scale(m):
    with torch.no_grad():
        m.log_scale.zero_()


def test_distribution_argument_validation_is_checked_in_the_graph():
    # torch.compile switches validation off for the whole process instead
    # (Distribution.set_default_validate_args(False)); with validate_args=True it breaks.
    def build():
        m = Validated()
        return m, m

    trace = check_compiled(build, standard(_loc_and_value) + [
        after(_zero_scale, name="scale 0: eager's ValueError", expect=EAGER),
        after(_unit_scale, name="valid again (the record stays)", expect=MOCK),
    ], expect_graphs=1)
    nodes = trace.compiled._magpy_cache.records[0].graphs[0].graph.nodes
    assert sum(n.target is torch.ops.aten._assert_async.msg for n in nodes) == 3   # loc, scale, value


_RAISES = {"__name__": "user_raises", "torch": torch}
exec(compile(
    "def positive_or_raise(x):\n"
    "    y = x.log()\n"
    "    if not (x > 0).all():\n"
    "        raise ValueError(f'expected positive values, got shape {tuple(x.shape)} min {x.min()}')\n"
    "    return y * 2\n", "user_raises.py", "exec"), _RAISES)


def test_if_not_valid_raise_is_a_check_in_the_graph():
    # Any exception, with a message computed from the data: the check only tells that the
    # program raises there; the call then runs eagerly and raises the program's own error.
    trace = check_compiled(lambda: (_RAISES["positive_or_raise"], None), standard(_positive) + [
        Step("bad data: eager's ValueError", _negative, expect=EAGER), again(_positive),
    ], expect_graphs=1, expect_records=1)
    nodes = trace.compiled._magpy_cache.records[0].graphs[0].graph.nodes
    assert any(n.target is torch.ops.aten._assert_async.msg for n in nodes)


def _print_then_check(x):
    print("checking")
    if not (x > 0).all():
        raise ValueError("not positive")
    return x * 2


def test_a_check_after_an_effect_stays_a_break():
    # After the print a failed check could not run the call again: it stays an eager step.
    trace = check_compiled(lambda: (_print_then_check, None), [
        first(_positive), again(), Step("bad data", _negative, expect=None)], fullgraph=False)
    assert "Tensor.__bool__" in str(trace.compiled._magpy_cache.records[0].breaks)


# ============================================================================ 4. set algebra
# A set of objects read from outside is guarded by identity: the same members, in the same
# iteration order (a set's order follows its members' hashes, ids for tensors and modules).
# Sets built inside the call need no guard.  Iterating a set whose members' identities the guard
# does not fix (the call's arguments, tensors it made) is a break: another call's objects would
# iterate in another order than the one the record baked in.

class SetAlgebra(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.ReLU()
        self.frozen = {self.a, self.b, self.c}
        self.skip = {self.b}
        self.seen = set()

    def forward(self, x):
        active = (self.frozen - self.skip) & {self.a, self.c}
        total = 0
        for m in active:   # the other copy's modules iterate in their own order: a sum of two
            total = total + m(x)
        x = x + total
        self.seen = active | {self.c}         # a new set of objects left behind
        for m in [self.a, self.b, self.c]:
            if m in active:
                x = x * 2
        return x * len(self.frozen ^ self.skip) + len(active | self.skip) + (self.b in self.frozen)


def _skip_linear(m):
    m.skip = {m.a}


def _grow_frozen(m):
    m.frozen.add(torch.nn.Sigmoid())


def _rebuild_frozen(m):
    m.frozen = set(reversed(list(m.frozen)))


def test_set_algebra_on_modules_is_one_graph():
    # torch.compile: one graph too.
    def build():
        m = SetAlgebra()
        return m, m

    check_compiled(build, standard(lambda m: (torch.randn(2, 4),)) + [
        after(_skip_linear), again(), after(_grow_frozen), again(),
        after(_rebuild_frozen, expect=ANY), again(),
    ], observe=lambda m: (len(m.skip), len(m.frozen), m.seen == {m.a, m.c}))


class SetChain(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))
        self.chain = set(self.layers)

    def forward(self, x):
        for m in self.chain:
            x = m(x).tanh()
        return x


def test_set_order_is_guarded():
    # The result depends on the order: the same members in another order must not replay
    # the record.  (Compared with eager on the same objects: their ids give the order.)
    torch.manual_seed(0)
    m, x = SetChain(8), torch.randn(2, 4)
    fast = magpy.compile(m, backend="eager", fullgraph=True)
    assert torch.equal(fast(x), m(x)) and torch.equal(fast(x), m(x))
    order = list(m.chain)
    m.chain = set()
    for layer in reversed(order):   # the same modules, in an order this table may not keep
        m.chain.add(layer)
    reordered = list(m.chain) != order
    assert torch.equal(fast(x), m(x)) and torch.equal(fast(x), m(x))
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1 + reordered, 3 - reordered, 0)


class NoDecay(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.no_decay = {self.lin.bias}

    def forward(self, x):
        penalty = sum((p ** 2).sum() for p in self.parameters() if p not in self.no_decay)
        return self.lin(x) + penalty * 0.01


def _decay_all(m):
    m.no_decay = set()


def test_set_of_tensors_from_outside_is_one_graph():
    # torch.compile refuses: "Attempted to wrap a set with tensors".
    def build():
        m = NoDecay()
        return m, m

    check_compiled(build, standard(lambda m: (torch.randn(2, 4),)) + [after(_decay_all), again()],
                   observe=lambda m: None, expect_graphs=2)


def _six(s):
    return tuple(torch.randn(3) for _ in range(6))


def _iterate_set_of_arguments(*xs):
    out = xs[0] * 0
    for t in set(xs):
        out = out * 2 + t
    return out


def test_iterating_a_set_of_argument_tensors_is_a_break():
    # Six tensors' ids spread over the table: their order changes from call to call.  (Not a
    # check_compiled case: eager's copy holds other objects, so it iterates in another order.)
    # torch.compile makes one graph that iterates in insertion order, which is not eager's.
    fast = magpy.compile(_iterate_set_of_arguments, backend="eager")
    torch.manual_seed(0)
    for _ in range(8):
        xs = _six(None)
        assert torch.equal(fast(*xs), _iterate_set_of_arguments(*xs))
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.eager_runs, st.records) == (1, 7, 1)
    assert "iteration order of a set of Tensor" in st.break_reasons[0]


def _membership_only(x, y):
    s = {x, y}
    t = s - {y}
    return x * len(s) + (y in s) + len(t ^ {x}) + (x in t)


def test_set_membership_of_argument_tensors_is_one_graph():
    # len, in and set algebra do not depend on the order.  torch.compile: one graph.
    check_compiled(lambda: (_membership_only, None), standard(lambda s: (torch.randn(3), torch.randn(3))))


# ============================================================================ 5. Python idioms
# Classes made or instantiated inside forward, deques, chained iterables: one graph.

def _namedtuple_made_inside(x):
    # collections.namedtuple() builds its class with sys.intern, _tuplegetter, type() and
    # sys._getframe(1).f_globals['__name__'] (the module it is made in).
    P = collections.namedtuple("P", ["a", "b"])
    p = P(x, x + 1)
    return p.a * p.b, p._replace(a=x * 3).a, p._asdict()["b"], P.__module__


_Pair = collections.namedtuple("_Pair", "a b")


class _Point(_Pair):
    def total(self):
        return self.a + self.b


def _namedtuple_methods(x):
    p = _Point(x, x * 2)
    return p.total() * 2, _Pair(*p)


class _Plain:
    def __init__(self, x, k):
        self.x, self.k = x, k

    def out(self):
        return self.x * self.k


class _Empty:
    pass


class _AttrDict(dict):
    def __getattr__(self, name):
        return self[name]


def _classes_made_inside(x):
    o, e = _Plain(x, 3), _Empty()
    e.y = x - 1
    d = _AttrDict(h=x + 1)           # dict's own __new__/__init__: no Python code runs
    d["z"] = x * 2
    return o.out() + d.h + d["z"] + e.y, len(d), d


def _deque_methods(x):
    q = collections.deque([x], maxlen=3)
    q.append(x + 1)
    q.appendleft(x - 1)
    q.extend([x * 2])
    q.rotate(1)
    a, b = q.popleft(), q.pop()
    return a + b + sum(q), len(q), q[0] * 1


def _deque_as_a_sequence(x):
    q = collections.deque([1.0, 2.0, 3.0])
    q.insert(1, 1.5)
    q.remove(2.0)
    q.reverse()
    q[0] = q[0] - 1
    del q[-1]
    t = collections.deque([x, x * 2])
    t.insert(0, x - 1)
    return x * sum(q) + q.index(1.5) + q.count(2.0) + len(q.copy()), sum(t), t[1]


def _chain_from_iterable(x):
    parts = [[x, x + 1], [x * 2]]
    return sum(itertools.chain.from_iterable(parts)), list(itertools.chain(*parts))[1]


IDIOMS = [_namedtuple_made_inside, _namedtuple_methods, _classes_made_inside, _deque_methods,
          _deque_as_a_sequence, _chain_from_iterable]


@pytest.mark.parametrize("program", IDIOMS, ids=lambda f: f.__name__.lstrip("_"))
def test_python_idioms_are_one_graph(program):
    # torch.compile: one graph, except the deque ("Unsupported method call": rotate).
    check_compiled(lambda: (program, None), standard(lambda s: (torch.randn(3),)))


def _module_name_changes(ns):
    ns["__name__"] = "renamed"


def test_namedtuple_module_is_guarded():
    # The class's __module__ comes from the caller's globals (3.11): changing it records anew.
    # 3.12's namedtuple() asks sys._getframemodulename, the calling function's own
    # __module__, which renaming the globals leaves as it was: the record still serves.
    from_function = hasattr(sys, "_getframemodulename")
    check_compiled(lambda: isolated(_namedtuple_made_inside), standard(lambda s: (torch.randn(3),)) + [
        after(_module_name_changes, expect=MOCK if from_function else MONITOR), again()],
        observe=lambda ns: ns["__name__"])


def _frame_outside(x):
    return x * (sys._getframe(1) is not None)   # the caller's frame: magpy's own under magpy


def test_getframe_outside_the_call_is_a_break():
    trace = check_compiled(lambda: (_frame_outside, None),
                           [first(lambda s: (torch.randn(3),)), again(expect=EAGER)],
                           fullgraph=False, expect_records=1)
    assert "sys._getframe reaches a frame outside the compiled call" in trace.stats["break_reasons"][0]


# ============================================================================ 6. warnings
# warnings.warn in forward is one graph whose mock makes the warning again, and
# catch_warnings(): tests/programs/test_more_patterns.py.


# ============================================================================ 7. recurrent layers
# nn.RNN/LSTM/GRU are one operator of the graph (torch.lstm, torch.gru, torch.rnn_relu/tanh).
# Their forward checks its flat weights through weak references (_weights_have_changed): a
# weakref read from outside is guarded by identity, and what it refers to by the aliasing
# check ``ref() is weight``.

def _rnn_case(make, args):
    def build():
        m = make()
        return m, m
    return build, args


def _new_weight(m):
    m.weight_hh_l0 = torch.nn.Parameter(torch.randn_like(m.weight_hh_l0))


RNN_CASES = {
    "lstm_bidirectional_batch_first": _rnn_case(
        lambda: torch.nn.LSTM(4, 5, num_layers=2, batch_first=True, bidirectional=True),
        lambda m: (torch.randn(2, 3, 4),)),
    "lstm_given_h0_c0": _rnn_case(
        lambda: torch.nn.LSTM(4, 5, num_layers=2),
        lambda m: (torch.randn(3, 2, 4), (torch.randn(2, 2, 5), torch.randn(2, 2, 5)))),
    "gru_given_h0": _rnn_case(lambda: torch.nn.GRU(4, 5, bidirectional=True),
                              lambda m: (torch.randn(3, 2, 4), torch.randn(2, 2, 5))),
    "rnn_relu_batch_first": _rnn_case(lambda: torch.nn.RNN(4, 5, nonlinearity="relu", batch_first=True),
                                      lambda m: (torch.randn(2, 3, 4),)),
}


@pytest.mark.parametrize("case", RNN_CASES, ids=str)
def test_recurrent_layers_are_one_operator(case):
    # torch.compile refuses them with fullgraph=True (it does not trace RNN modules).
    build, args = RNN_CASES[case]
    trace = check_compiled(build, standard(args), observe=lambda m: None, expect_graphs=1)
    graph = trace.compiled._magpy_cache.records[0].graphs[0].graph
    ops = {n.target for n in graph.nodes if n.op == "call_function"}
    assert ops & {torch.lstm, torch.gru, torch.rnn_relu, torch.rnn_tanh}


def test_recurrent_layer_with_a_new_weight_records_anew():
    # A replaced weight fails the guard (``ref() is weight``).  The module then makes new weak
    # references to its weights (weakref.ref, an unannotated native: an eager step between
    # two graphs); the next call finds them made and is one graph again.
    build, args = RNN_CASES["lstm_given_h0_c0"]
    check_compiled(build, standard(args) + [after(_new_weight, args=args), again(expect=MONITOR), again()],
                   fullgraph=False, observe=lambda m: None, expect_graphs=3)


class LegacyVariable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        frozen = torch.autograd.Variable(self.w)     # old code: a detached view of the weight
        return x @ frozen.t() + torch.autograd.Variable(x).sum()


def test_legacy_variable_is_detach():
    args = lambda s: (torch.randn(2, 4, requires_grad=True),)   # noqa: E731
    check_compiled(lambda: (LegacyVariable(), None), standard(args), expect_graphs=1)


SCRIPT_OFFSET = 1.0


def _scripted_body(x: torch.Tensor, offset: float) -> torch.Tensor:
    return torch.relu(x) * 2 + offset


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # torch.jit.script is deprecated in 2.13
    _scripted = torch.jit.script(_scripted_body)


def _calls_scripted(x):
    return _scripted(x, SCRIPT_OFFSET) - 1


def test_jit_scripted_function_runs_its_python_in_the_graph():
    # As under torch.compile: the original Python runs under the monitor, its operations in
    # the graph (TorchScript forbids globals, so what it reads comes in as arguments).
    def shift(_):
        globals()["SCRIPT_OFFSET"] = 3.0

    try:
        args = lambda s: (torch.randn(3, 4),)   # noqa: E731
        check_compiled(lambda: (_calls_scripted, None), standard(args) + [after(shift), again()],
                       expect_graphs=2)
    finally:
        globals()["SCRIPT_OFFSET"] = 1.0


# ---------------------------------------------------------------------------- Python's random module

def _random_branch(x):
    if random.random() < 0.5:
        return x * 2
    return x - random.random()


def _random_scale(x):
    return x * random.random()


@pytest.mark.parametrize("program", [_random_branch, _random_scale], ids=["steers", "scales"])
def test_python_random_draws_new_numbers_on_every_replay(program):
    # The module-level functions are bound methods of random's hidden Random instance: a
    # replay must call them on that very instance (not on a copy rebuilt from its state,
    # which drew the same number every time: a silently wrong result).
    def run(fn):
        random.seed(1)
        outs = []
        for _ in range(8):
            before = random.getstate()
            out = fn(torch.ones(3))
            after = random.getstate()
            outs.append((out, before != after))
        return outs, random.random()
    compiled = magpy.compile(program, backend="eager")
    (want, want_next), (got, got_next) = run(program), run(compiled)
    assert all(torch.equal(a, b) and da == db for (a, da), (b, db) in zip(want, got)), (want, got)
    assert want_next == got_next
    st = magpy.stats(compiled)
    assert st.eager_runs == 0 and st.mock_runs >= 4, st


def _numpy_branch(x):
    if np.random.rand() < 0.5:
        return x * 2
    return x - np.random.rand()


def _numpy_scale(x):
    return x * np.random.randn()


def _numpy_uniform(x):
    return x + np.random.uniform(-1.0, 1.0)


@pytest.mark.parametrize("program", [_numpy_branch, _numpy_scale, _numpy_uniform],
                         ids=["steers", "scales", "with-arguments"])
def test_numpy_random_draws_new_numbers_on_every_replay(program):
    # np.random.rand and friends are methods of numpy's global RandomState: each replay
    # draws from that very object (an eager step), so the numbers are eager's under a seed.
    def run(fn):
        np.random.seed(1)
        outs = [fn(torch.ones(3)) for _ in range(8)]
        return outs, np.random.rand()
    compiled = magpy.compile(program, backend="eager")
    (want, want_next), (got, got_next) = run(program), run(compiled)
    assert all(torch.equal(a, b) for a, b in zip(want, got)), (want, got)
    assert want_next == got_next
    st = magpy.stats(compiled)
    assert st.eager_runs == 0 and st.mock_runs >= 4, st


# numpy on a tensor's .numpy(): torch operations in the graph, or a break in pieces where
# numpy's result has no torch equivalent: tests/programs/test_more_patterns.py.


def test_array_numpy_drew_given_to_torch_is_the_same_under_a_seed():
    def program(x):
        return x + torch.from_numpy(np.random.randn(3).astype(np.float32))
    compiled = magpy.compile(program, backend="eager")
    np.random.seed(3)
    want = [program(torch.ones(3)) for _ in range(5)]
    np.random.seed(3)
    got = [compiled(torch.ones(3)) for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    st = magpy.stats(compiled)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 4, 0)


# ============================================================================ 10. containers with Python
# reads
# A dict subclass whose __getitem__ is Python, reading its entries with super().__getitem__:
# transformers' ACT2FN makes a new activation module per read (ClassInstantier).  The guard
# reads the entry as the program did (dict.__getitem__), not through the override, which
# would give a new object every call (and the record would never be reused).

class _Instantier(collections.OrderedDict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


def _activations(x):
    return ACTIVATIONS["silu"](x) * ACTIVATIONS["gelu"](x)   # noqa: F821 - the isolated global


def _instantier():
    return _Instantier({"silu": torch.nn.SiLU, "gelu": (torch.nn.GELU, {"approximate": "tanh"})})


def _to_relu(ns):
    ns["ACTIVATIONS"]["silu"] = torch.nn.ReLU


def _to_exact_gelu(ns):
    ns["ACTIVATIONS"]["gelu"] = (torch.nn.GELU, {"approximate": "none"})


def test_entries_of_a_dict_whose_getitem_is_python_are_read_as_the_program_read_them():
    check_compiled(lambda: isolated(_activations, ACTIVATIONS=_instantier()),
                   standard(lambda s: (torch.randn(5),)) + [after(_to_relu), again(), after(_to_exact_gelu)],
                   observe=lambda ns: None)


def test_transformers_act2fn_is_one_record():
    from transformers.activations import ACT2FN

    class Gate(torch.nn.Module):
        def forward(self, x, gate):
            return x * ACT2FN["silu"](gate) + ACT2FN["gelu_new"](x)   # (as Qwen3-Next's norm)

    check_compiled(lambda: (Gate(), None), standard(lambda s: (torch.randn(2, 8), torch.randn(2, 8))),
                   expect_records=1)


# ============================================================================ 11. break reasons
# A dynamic operation that reads no tensor data says what it does instead (MRA's
# ``zeros_like(q).requires_grad_()`` was reported as reading tensor data).

def _new_leaf(q):
    k = torch.zeros_like(q).requires_grad_()
    return (q * 2).sum() + k.sum()


def test_a_break_on_autograd_state_says_so():
    trace = check_compiled(lambda: (_new_leaf, None),
                           [first(lambda s: (torch.randn(3),)), again(expect=None)], fullgraph=False)
    reasons = trace.stats["break_reasons"] + list(trace.stats.get("breaks", {}))
    assert any("Tensor.requires_grad_ reaches autograd outside the graph" in r for r in reasons), reasons
