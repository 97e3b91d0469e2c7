"""A float read from tensor data (``t.item()``, ``float(t)``) that the graph computes itself.

``n = x.abs().max().item(); return x / n`` is one graph: the graph computes ``n`` as the 0-d
float64 tensor it would take the float as (``OpRecorder.record_number``), and floating
tensor arithmetic on ``n`` uses that tensor.  The mock makes the Python float only where the
program needs it (returned, stored, printed, compared): after the graph that computes it,
which ends there only if the program needs it before the call's end.  Each program runs
through the differential harness: first call, guard hit, fresh inputs, external state changed.
"""
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    MOCK,
    Step,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture
    standard,
)


def _x(s):
    return (torch.randn(3, 4),)


def _steps():
    return standard(_x) + [fresh(_x, seed=2), again()]


def _record(trace):
    (rec,) = trace.compiled._magpy_cache.records
    return rec


def _normalise(x):
    n = x.abs().max().item()
    return x / n - n * x


def test_a_float_into_tensor_arithmetic_is_one_graph_without_steps():
    trace = check_compiled(lambda: (_normalise, None), _steps(), expect_graphs=1, expect_records=1)
    assert _record(trace).steps == ()
    nodes = _record(trace).graphs[0].graph.nodes
    assert any(n.target == "to" and torch.float64 in n.args for n in nodes), list(nodes)


def _returned(x):
    n = float(x.sum())
    return x * n, n


def test_a_returned_float_is_made_after_the_graph():
    trace = check_compiled(lambda: (_returned, None), _steps(), expect_graphs=1, expect_records=1)
    assert [s.fn for s in _record(trace).steps] == [float]
    out = trace.compiled(torch.ones(2))
    assert type(out[1]) is float and out[1] == 2.0


class Stored(nn.Module):
    """The float kept in the module's state and in a log; read again on the next call."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.log = []
        self.peak = 0.0

    def forward(self, x):
        h = self.lin(x)
        m = h.detach().max().item()
        self.log.append(m)
        self.peak = m
        return h / m


def _new_log(m):
    m.log = ["replaced"]


def _scale_weights(m):
    with torch.no_grad():
        m.lin.weight.mul_(3)


def test_a_stored_float_is_the_programs_in_state():
    def build():
        m = Stored()
        return m, m

    trace = check_compiled(build, standard(_x) + [
        after(_new_log, expect=MOCK), again(), after(_scale_weights, expect=MOCK), fresh(_x, seed=3),
    ], observe=lambda m: (list(m.log), m.peak), expect_graphs=1)
    assert all(type(v) is float for v in trace.compiled.log[1:])


class ReadThenUpdate(nn.Module):
    """``n`` is read before the buffer it came from is updated in place: it keeps the old value."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        n = self.scale.item()
        self.scale.mul_(1.5)
        return x * n + self.scale


def test_a_float_read_before_an_in_place_update_keeps_its_value():
    def build():
        m = ReadThenUpdate()
        return m, m

    check_compiled(build, standard(_x) + [fresh(_x, seed=2), again()],
                   observe=lambda m: m.scale, expect_graphs=1, expect_records=1)


def _branches(x):
    s = x.abs().max().item()
    if x.sum() > 0:
        y = x / s
    else:
        y = x * s
    return y + 1


def _positive(s):
    return (torch.rand(3, 4) + 0.1,)


def _negative(s):
    return (-torch.rand(3, 4) - 0.1,)


def test_a_float_read_in_the_graph_is_used_inside_a_cond():
    trace = check_compiled(lambda: (_branches, None), [
        first(_positive), again(), Step("other branch", _negative, expect=MOCK),
        fresh(_positive, seed=3),
    ], expect_graphs=1, expect_records=1)
    assert _record(trace).steps == ()


def _python_use(x):
    n = x.max().item()
    y = x / n                  # computed by the first graph
    if n > 0.5:                # Python needs the number: the graph ends here
        return y * 2
    return y


def _large(s):
    return (torch.rand(3, 4) + 1.0,)


def _small(s):
    return (torch.rand(3, 4) * 0.1,)


def test_a_float_python_compares_ends_the_graph_there():
    trace = check_compiled(lambda: (_python_use, None), [
        first(_large), again(), Step("other outcome", _small, expect="monitor"), fresh(_large, seed=4),
        fresh(_small, seed=5),
    ], fullgraph=False, expect_records=2)
    records = trace.compiled._magpy_cache.records
    # ``x / n`` is in the first graph either way; ``y * 2`` in a second one where taken.
    assert sorted(len(r.graphs) for r in records) == [1, 2]
    assert all([b.reason for b in r.breaks] == ["Tensor.item reads tensor data into Python"] for r in records)


def _with_grad(x):
    n = x.abs().max().item()   # a Python number: no gradient flows through it
    return (x / n).sum()


def test_gradients_treat_the_float_as_a_constant():
    compiled = magpy.compile(_with_grad, backend="eager", fullgraph=True)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(3, 4, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        compiled(x).backward()
        _with_grad(y).backward()
        assert torch.equal(x.grad, y.grad), seed
    assert magpy.stats(compiled).monitor_runs == 1


def _half(x):
    h = x.to(torch.bfloat16)
    n = h.abs().max().item()
    return h * n, h / n


def test_low_precision_tensors_compute_as_with_the_number():
    check_compiled(lambda: (_half, None), _steps(), expect_graphs=1, expect_records=1)


def test_inductor_computes_the_float_in_its_kernel():
    trace = check_compiled(lambda: (_normalise, None), standard(_x), backend="inductor",
                           expect_graphs=1, expect_records=1)
    assert _record(trace).steps == ()


def _int_item(x):
    k = (x > 0).sum().item()   # an int: checked as before, not read in the graph
    return x * k


def test_an_int_read_is_not_a_float_read():
    trace = check_compiled(lambda: (_int_item, None), [first(_x), again()], fullgraph=False)
    assert "Tensor.item" in str(_record(trace).breaks)


def _scaled(x):
    return x * float(x.sum())


def test_new_sizes_replay_one_symbolic_record():
    compiled = magpy.compile(_scaled, backend="eager")
    for n in (2, 3, 4, 5, 6):
        x = torch.randn(n)
        assert torch.equal(compiled(x), _scaled(x)), n
    st = magpy.stats(compiled)
    assert (st.monitor_runs, st.eager_runs, st.graphs_per_call, st.breaks) == (2, 0, 1, {}), st


def _under_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x, x)
        s = float(y.sum())     # read inside the autocast the graph enters
    return y * s, s


def test_a_float_read_inside_autocast_is_computed_there():
    check_compiled(lambda: (_under_autocast, None), standard(lambda s: (torch.randn(4, 4),)),
                   expect_graphs=1, expect_records=1)


def _arithmetic(x):
    n = x.abs().max().item()
    m = -n * 2 + 1
    m -= 0.5                   # (in place on a float: a new float)
    lo = max(min(n, 1.5), 0.5)     # CPython's builtins: the first unless the second compares greater
    return (x - n) / (m / 3) * lo, m


def _large(s):
    return (torch.rand(3, 4) + 2,)


def _middle(s):
    return (torch.rand(3, 4) * 0.2 + 1.0,)


def test_python_arithmetic_on_the_float_stays_in_the_graph():
    # min(n, 1.5) gives back 1.5 for the large inputs, n for the middle ones: the graph
    # checks the pick, another pick records again (one graph each).
    trace = check_compiled(lambda: (_arithmetic, None), [
        first(_large), again(), fresh(_large, seed=2), Step("the other pick", _middle, expect="monitor"),
        again(), fresh(_large, seed=3), fresh(_middle, seed=4)], expect_graphs=2, expect_records=2)
    rec = trace.compiled._magpy_cache.records[0]
    assert [s.fn for s in rec.steps] == [float]   # m, returned: made after the graph


def _one_over(x):
    n = x.sum().item()
    return x * (1.0 / n)       # Python raises for n == 0, where a graph would give inf


def _zero_sum(s):
    return (torch.tensor([1.0, -1.0]),)


def test_a_division_by_the_float_stays_in_python():
    check_compiled(lambda: (_one_over, None), [
        first(lambda s: (torch.tensor([1.0, 2.0]),)), again(),
        Step("zero: ZeroDivisionError", _zero_sum, expect=None),
    ], fullgraph=False)


def _eager_min(x):
    n = x.sum().tolist()          # an eager step's float
    lo = min(n, 1.5)              # min gives back n or the constant: which one depends on n
    return x * lo


def test_min_of_a_value_computed_eagerly_is_never_a_constant():
    # (It was: the result, the constant 1.5 or n itself, was taken for a move.)
    check_compiled(lambda: (_eager_min, None), [
        first(lambda s: (torch.full((2,), 2.0),)), again(),
        Step("n below 1.5", lambda s: (torch.full((2,), 0.25),), expect=None),
        Step("above again", lambda s: (torch.full((2,), 3.0),), expect=None)], fullgraph=False)


def _eager_max(x):
    n, m = x.sum().tolist(), x.mean().tolist()   # two eager steps' floats
    lo = max(n, m)                               # n itself or m itself, by their values
    return x * lo, lo


def test_max_of_two_values_computed_eagerly_checks_which_comes_back():
    # The record checks that the same one comes back; the other pick records again.
    trace = check_compiled(lambda: (_eager_max, None), [
        first(lambda s: (torch.tensor([1.0, 2.0]),)), again(),
        Step("the other pick", lambda s: (torch.tensor([3.0, -5.0]),), expect="monitor"),
        Step("the first pick again", lambda s: (torch.tensor([0.5, 2.5]),), expect=MOCK),
        Step("the other pick again", lambda s: (torch.tensor([3.0, -7.0]),), expect=MOCK)], fullgraph=False)
    assert magpy.stats(trace.compiled).records == 2
