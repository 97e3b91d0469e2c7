"""Graph breaks as segments (DESIGN.md, "Graph breaks: segments and continuations").

A dynamic operation (``float(t)``, ``t.item()``, ``bool(t)``, ``print(t)``, ``f"{t}"``, an
unannotated native function) no longer makes the whole call run eagerly: the recording run cuts
the program into compiled graphs with the dynamic operation run eagerly between them, and later
calls replay guard -> graph 1 -> eager step -> graph 2 -> ... -> final state.  What is specified:

1. a call that runs as segments is a *mock* run (``mock_runs`` +1, ``eager_runs`` unchanged);
   a dynamic value that steers nothing (it goes into a list, a print, stored arithmetic) needs
   no further recording: repeated and fresh calls give ``monitor_runs == 1, eager_runs == 0``;
2. ``magpy.stats(c).graphs_per_call`` (graphs the last call ran; 0 for an eager call) and
   ``magpy.stats(c).breaks`` (break reason -> number of recorded segment breaks);
3. side effects around a break happen exactly once per call, in program order;
4. a bool that picks a branch is guarded: after both outcomes were seen once, alternating
   calls neither monitor again nor run eagerly (programs without effects before the branch);
5. breaks anywhere: top level, deep in submodules and helpers, in every block of a ModuleList,
   inside ``torch.no_grad()``, user context managers, try/finally, a generator;
6. ``fullgraph=True`` raises at the first break; one ``GraphBreakWarning`` per callable and
   reason, at the user's line;
7. correctness is never traded: external state mutated between calls (a global the branch
   compares to, an attribute read after the break, a replaced list) gives eager's results.

Every program runs through ``tests.harness.compile_harness.check_compiled`` (outputs, stdout, arguments
and program state compared with eager after each call) via :func:`check_segments`, which adds
the per-call ``graphs_per_call``/``breaks`` checks and two step expectations of its own.
"""
import contextlib
import dataclasses
import inspect
import warnings
import zlib

import pytest
import torch
from torch import nn

import magpy
import tests.harness.compile_harness as harness
from tests.harness.compile_harness import (
    MOCK,
    Step,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    globals_view,
    isolated,
)

# ============================================================================ harness additions

RECORDS = "records"      # a recording run, first record or continuation: monitor_runs +1, eager_runs +0
NOT_EAGER = "not eager"  # eager_runs +0; whether the call records again or replays is left open
MISSING = "<no such field in magpy.stats()>"


def _stat(compiled, field):
    return getattr(magpy.stats(compiled), field, MISSING)


def check_segments(build, steps, *, graphs=None, observe=None, backend="eager", **kwargs):
    """``check_compiled`` (``fullgraph=False``) plus what segments add.

    Steps may expect ``RECORDS`` or ``NOT_EAGER`` besides the harness's expectations.
    ``graphs``: the ``graphs_per_call`` every MOCK step must report (an int, or a ``(low, high)``
    range), or a list with one entry per step (``None``: not checked).  The returned trace has
    ``.per_call``: ``(graphs_per_call, breaks)`` read right after each compiled call.
    """
    own = {}
    plain = []
    for i, step in enumerate(steps):
        if step.expect in (RECORDS, NOT_EAGER):
            own[i] = step.expect
            step = dataclasses.replace(step, expect=None)
        plain.append(step)

    per_call = []
    real_call = harness._call

    def call(fn, args, kw, ctx, seed):   # the harness calls the eager copy, then the compiled one
        out = real_call(fn, args, kw, ctx, seed)
        if getattr(fn, "_magpy_cache", None) is not None:
            breaks = _stat(fn, "breaks")
            breaks = dict(breaks) if isinstance(breaks, dict) else breaks
            per_call.append((_stat(fn, "graphs_per_call"), breaks))
        return out

    harness._call = call
    try:
        trace = check_compiled(build, plain, backend=backend, fullgraph=False, observe=observe, **kwargs)
    finally:
        harness._call = real_call
    trace.per_call = per_call

    for i, kind in own.items():
        d = trace.deltas[i]
        where = f"step {i} ({steps[i].name})"
        assert d["eager_runs"] == 0, f"{where}: expected no eager run, magpy.stats increased by {d}"
        if kind == RECORDS:
            assert d["monitor_runs"] == 1, f"{where}: expected a recording run, magpy.stats increased by {d}"

    if graphs is not None:
        wanted = graphs if isinstance(graphs, list) else [graphs if s.expect == MOCK else None for s in steps]
        assert len(wanted) == len(steps)
        for i, want in enumerate(wanted):
            if want is None:
                continue
            got = per_call[i][0]
            where = f"step {i} ({steps[i].name})"
            assert got is not MISSING, f"{where}: magpy.stats() has no graphs_per_call"
            if isinstance(want, tuple):
                assert want[0] <= got <= want[1], \
                    f"{where}: graphs_per_call is {got}, expected {want[0]}..{want[1]}"
            else:
                assert got == want, f"{where}: graphs_per_call is {got}, expected {want}"
    return trace


def break_count(breaks, *needles):
    """How many recorded breaks have a reason containing one of ``needles``."""
    assert isinstance(breaks, dict), f"magpy.stats().breaks is {breaks!r}, not a dict"
    return sum(n for reason, n in breaks.items() if any(k in str(reason) for k in needles))


def assert_steady(trace, monitor_runs=1):
    """After the recording runs, nothing ran eagerly and nothing was monitored again."""
    st = magpy.stats(trace.compiled)
    assert (st.monitor_runs, st.eager_runs) == (monitor_runs, 0), (
        f"expected monitor_runs={monitor_runs}, eager_runs=0; magpy.stats says {st}")


def _line(fn, marker):
    """The line number of the source line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + k for k, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__qualname__}"
    return hits[0]


def _module(make):
    def build():
        m = make()
        return m, m
    return build


def _x(s):
    return (torch.randn(3, 4),)


FLOAT = ("Tensor.__float__",)
ITEM = ("Tensor.item",)
PRINT = ("print", "Tensor.__repr__")
FORMAT = ("Tensor.__format__",)
BOOL = ("Tensor.__bool__",)
TOLIST = ("Tensor.tolist",)

# ============================================================================ 1. non-steering breaks
# The dynamic value flows into a list, a dict, a print or stored arithmetic: nothing after the
# break depends on it, so one recording covers every later call with same-shape inputs.


class Probe(nn.Module):
    """Linear -> a dynamic operation on the hidden state -> Linear."""

    def __init__(self, probe):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)
        self.probe = probe            # a plain function stored on the instance: called unbound
        self.log = []
        self.summary = {}

    def forward(self, x):
        h = torch.tanh(self.a(x))
        self.probe(self, h)
        return self.b(h) * 2


def _log_float(m, h):
    m.log.append(float(h.norm()))


def _print_tensor(m, h):
    print(h)


def _print_item_formatted(m, h):
    print(f"{h.sum().item():.3f}")


def _float_arithmetic_stored(m, h):
    v = float(h.mean())
    m.summary["mean"] = v
    m.summary["scaled"] = 2 * v + 1       # Python arithmetic on the value, only stored


def _item_into_dict(m, h):
    m.summary["max"] = h.max().item()


def _fstring_stored(m, h):
    m.log.append(f"sum={h.sum()}")


def _tolist_stored(m, h):
    m.log.append(h.detach().tolist())


def _unannotated_native(m, h):
    m.log.append(zlib.adler32(b"rows %d" % h.shape[0]))


NON_STEERING = {
    "print_tensor": (_print_tensor, PRINT),
    "print_item_formatted": (_print_item_formatted, ITEM),
    "fstring_stored": (_fstring_stored, FORMAT),
    "tolist_stored": (_tolist_stored, TOLIST),
    "unannotated_native_function": (_unannotated_native, ("zlib.adler32",)),
}
# A float read from tensor data that the program only stores is computed by the graph and
# made in Python after it: one graph, no break.
IN_GRAPH = {"float_into_list": _log_float, "item_into_dict": _item_into_dict,
            "float_arithmetic_stored": _float_arithmetic_stored}


def _new_log(m):
    m.log = []                        # a replaced list: later appends go to the new one


def _scale_first_layer_in_place(m):
    with torch.no_grad():
        m.a.weight.mul_(1.5)          # tensor values are graph inputs: no new recording


def _replace_second_layer(m):
    m.b = nn.Linear(6, 3)             # read after the break: must not replay the old layer


def _check_probe(probe, graphs: int):
    trace = check_segments(_module(lambda: Probe(probe)), [
        first(_x), again(), fresh(_x), fresh(_x, seed=2), again(),
        after(_scale_first_layer_in_place, expect=MOCK),
        after(_replace_second_layer, expect=RECORDS), again(), fresh(_x, seed=3),
    ], observe=lambda m: (m.log, m.summary), graphs=graphs)
    assert_steady(trace, monitor_runs=2)
    st = magpy.stats(trace.compiled)
    assert st.mock_runs == 7, st
    compiled_first = sum(d["graph_count"] for d in trace.deltas[:6])
    assert compiled_first == graphs, f"the first recording compiled {compiled_first} graphs, not {graphs}; {st}"
    return trace


@pytest.mark.parametrize("case", NON_STEERING, ids=str)
def test_non_steering_break_replays_as_two_graphs(case):
    probe, reason = NON_STEERING[case]
    trace = _check_probe(probe, 2)
    assert break_count(trace.per_call[0][1], *reason) == 1


@pytest.mark.parametrize("case", IN_GRAPH, ids=str)
def test_stored_float_read_stays_in_one_graph(case):
    trace = _check_probe(IN_GRAPH[case], 1)
    assert trace.per_call[0][1] == {}
    steps = trace.compiled._magpy_cache.records[0].steps
    assert steps and all(s.fn is float for s in steps)   # the stored floats, made after the graph


def _top_level(x, log):
    h = x.sin() * 3
    log.append(h.sum().tolist())            # the break, in the compiled function itself
    return h.cos() + 1


def _new_log_list(s):
    s["log"] = ["new"]


def test_break_at_top_level_of_a_function():
    def args(s):
        return torch.randn(5), s["log"]

    trace = check_segments(lambda: (_top_level, {"log": []}), [
        first(args), again(), fresh(args), fresh(args, seed=2),
        after(_new_log_list, args=args, expect=NOT_EAGER), again(), fresh(args, seed=3),
    ], observe=lambda s: s["log"], graphs=2)
    assert sum(d["monitor_runs"] for d in trace.deltas[:4]) == 1
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert break_count(trace.per_call[0][1], *TOLIST) == 1


def _step_then_no_op_cast(x, log):
    h = x * 2
    box = [h]
    log.append(len(box))
    print(box)                      # a step given a list made in the call, holding h
    same = h.to(torch.float32)      # gives back h itself (already float32), in the next graph
    return same + 1


def test_step_given_a_tensor_a_later_operation_gives_back_unchanged():
    # The next graph's ``h.to(h.dtype)`` gives back ``h``: it stays the first graph's output,
    # which the print step is given (the mock named the later graph's output: an
    # UnboundLocalError after the print's effect).
    def args(s):
        return torch.randn(3), s["log"]

    check_segments(lambda: (_step_then_no_op_cast, {"log": []}), [
        first(args), again(), fresh(args), fresh(args, seed=2),
    ], observe=lambda s: s["log"])


def _step_then_in_place(x):
    a, b = x * 2, x + 1
    same = torch.equal(a, b)        # a step given both tensors of the first graph
    a.mul_(0.5)                     # ... which the next graph updates in place
    b.add_(1)
    return a, b, same


def test_step_given_tensors_a_later_graph_updates_in_place():
    # The step is given the first graph's outputs; the next graph's in-place updates make it
    # their maker by the end of the run (the mock named them before that graph had run: an
    # UnboundLocalError, then an eager fallback on every call).  GradScaler.unscale_ then
    # clip_grad_norm_ is this shape.
    def args(s):
        return (torch.randn(3),)

    check_segments(lambda: (_step_then_in_place, {}), [first(args), again(), fresh(args), fresh(args, seed=2)])


def _unpacks_a_split_of_a_data_shaped_tensor(x, m):
    # MochiAttnProcessor's shape: a size read of nonzero's result and the split after it are
    # eager steps; the tuple the split gave is unpacked
    y = x[:, torch.nonzero(m).flatten()]
    z = torch.nn.functional.pad(y, (0, 8 - y.size(1)))
    a, b = z.split_with_sizes((4, 4), dim=1)
    return a * 2, b + 1


def _unpacks_a_list_of_ints(x):
    lo, hi = torch.nonzero(x > 0).flatten().tolist()   # (too many values where 3 are positive)
    return x[lo:hi + 1] * 2, lo


def test_a_sequence_an_eager_step_gave_is_unpacked():
    """``a, b = seq`` of a tuple or list an eager step gave: its items are the step's, its
    length is checked (before, the whole call ran eagerly: "UNPACK_SEQUENCE on a value computed
    eagerly").  A list of another length raises the program's ValueError."""
    mask = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1])
    trace = check_segments(lambda: (_unpacks_a_split_of_a_data_shaped_tensor, {}), [
        first(lambda s: (torch.randn(2, 8), mask)), again(), fresh(lambda s: (torch.randn(2, 8), mask)),
    ])
    assert magpy.stats(trace.compiled).eager_runs == 0

    def ints(*values):
        return lambda s: (torch.tensor(values),)

    trace = check_segments(lambda: (_unpacks_a_list_of_ints, {}), [
        first(ints(-1.0, 2.0, -3.0, 4.0)), again(), fresh(ints(-2.0, 1.0, -1.0, 5.0)),
        fresh(ints(1.0, 2.0, -3.0, 4.0), expect=None),   # ValueError: too many values to unpack
        fresh(ints(-1.0, 2.0, -3.0, 4.0)),
    ])
    assert magpy.stats(trace.compiled).eager_runs == 0


class RunningMean(nn.Module):
    """A running average kept in a Python float: the value read from outside changes every call."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.ema = 0.0
        self.history = []

    def forward(self, x):
        h = self.lin(x)
        self.ema = 0.9 * self.ema + 0.1 * float(h.mean())
        self.history.append(self.ema)
        return h.relu()


def test_running_float_average_is_eagers():
    # Correctness only: whether the float read from outside is guarded (and the call records
    # again) is the implementation's choice; the history must be eager's, call after call.
    check_segments(_module(RunningMean), [
        first(_x), Step("2", _x, seed=1), Step("3", _x, seed=2), Step("4", _x, seed=3),
        Step("5", _x, seed=4),
    ], observe=lambda m: (m.ema, m.history))


# ============================================================================ 2. stats fields

def _two_breaks(x, log):
    h = x.relu()
    log.append(h.sum().tolist())
    g = h * 2
    log.append(f"{g.mean():.4f}")
    return g - 1


def _one_graph(x):
    return x.relu() * 2


def test_stats_graphs_per_call_and_breaks():
    fast = magpy.compile(_one_graph, backend="eager")
    fast(torch.randn(4))
    fast(torch.randn(4))
    st = magpy.stats(fast)
    assert _stat(fast, "graphs_per_call") == 1, st
    assert _stat(fast, "breaks") == {}, st

    log_e, log_c = [], []
    fast = magpy.compile(_two_breaks, backend="eager")
    x = torch.randn(4)
    assert torch.equal(fast(x, log_c), _two_breaks(x, log_e))
    assert _stat(fast, "graph_count") == 3, magpy.stats(fast)
    assert torch.equal(fast(x, log_c), _two_breaks(x, log_e))
    assert log_c == log_e
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 1, 0), st
    assert _stat(fast, "graphs_per_call") == 3, st
    breaks = _stat(fast, "breaks")
    assert break_count(breaks, *TOLIST) == 1 and break_count(breaks, *FORMAT) == 1, breaks
    assert sum(breaks.values()) == 2, breaks

    # An eager call (over the cache limit) ran no graph; the counts of recorded breaks stay.
    limit = magpy.config.cache_size_limit
    magpy.config.cache_size_limit = 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = torch.randn(6)
            assert torch.equal(fast(y, log_c), _two_breaks(y, log_e))
    finally:
        magpy.config.cache_size_limit = limit
    st = magpy.stats(fast)
    assert st.eager_runs == 1, st
    assert _stat(fast, "graphs_per_call") == 0, st
    assert _stat(fast, "breaks") == breaks
    assert torch.equal(fast(x, log_c), _two_breaks(x, log_e))
    assert _stat(fast, "graphs_per_call") == 3
    assert log_c == log_e


# ============================================================================ 3. side effects

class Effects(nn.Module):
    """Effects before and after a print between two layers: list appends, attribute writes,
    in-place buffer updates, an argument updated in place."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("acc", torch.zeros(4))
        self.events = []
        self.last = None

    def forward(self, x):
        self.events.append("start")
        self.steps.add_(1)
        x.mul_(2)
        h = self.a(x)
        self.acc.add_(h.detach().mean(0))
        print("between layers:", self.acc)    # the break: shows the first layer's work is done
        self.events.append("printed")
        self.acc.mul_(0.5)
        self.last = h.detach() * 1
        x.add_(1)
        out = self.b(h)
        self.steps.add_(1)
        self.events.append("end")
        return out


def _new_events_list(m):
    m.events = ["replaced"]


def test_effects_around_a_print_happen_once_in_order():
    trace = check_segments(_module(Effects), [
        first(_x), again(), fresh(_x), fresh(_x, seed=2), again(),
        after(_new_events_list, expect=NOT_EAGER), again(),
    ], observe=lambda m: (m.events, m.steps, m.acc, m.last), graphs=2)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0, st
    assert sum(d["monitor_runs"] for d in trace.deltas[:5]) == 1, trace.deltas


class Prints(nn.Module):
    """Prints at the very start, between the layers (a formatted float) and at the end."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        print("start")
        h = self.a(x)
        print("mid", f"{float(h.sum()):.4f}")
        out = self.b(h)
        print("end")
        return out


def test_prints_at_start_middle_and_end_once_per_call():
    trace = check_segments(_module(Prints), [first(_x), again(), fresh(_x), fresh(_x, seed=2), again()],
                           observe=lambda m: None)
    assert_steady(trace)


# ============================================================================ 4. branches on data
# ``if <tensor data>:`` picks a branch: the eager step's result steers what follows, so it is
# guarded.  The other outcome records a continuation once; then both replay.

def _sum_positive(m, h, x):
    return x.sum() > 0                    # a tensor: the ``if`` in forward reads it (Tensor.__bool__)


def _item_above_half(m, h, x):
    return x.mean().sigmoid().item() > 0.5


def _any_positive(m, h, x):
    return bool((h > 10).any()) or bool(x.mean() > 0)


class Branchy(nn.Module):
    """No effects before the branch; effects in each branch."""

    def __init__(self, cond):
        super().__init__()
        self.a, self.pos, self.neg = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.register_buffer("hits", torch.zeros(2))
        self.cond = cond
        self.taken = []

    def forward(self, x):
        h = self.a(x)
        if self.cond(self, h, x):
            out = self.pos(h)
            self.taken.append("pos")
            self.hits[0] += 1
        else:
            out = self.neg(h).relu()
            self.taken.append("neg")
            self.hits[1] += 1
        return out * 2


def _pos(s):
    return (torch.rand(3, 4) + 0.5,)


def _neg(s):
    return (torch.rand(3, 4) - 1.5,)


def _alternating(pos, neg):
    return [
        first(pos),
        again(),
        Step("other outcome: records once", neg, expect=RECORDS),
        Step("first outcome again", pos, seed=3, expect=MOCK),
        Step("second outcome again", neg, seed=4, expect=MOCK),
        again(name="second outcome, same inputs"),
        Step("first outcome, fresh", pos, seed=5, expect=MOCK),
        Step("second outcome, fresh", neg, seed=6, expect=MOCK),
        Step("first outcome, fresh again", pos, seed=7, expect=MOCK),
    ]


BRANCH_CONDITIONS = {"sum_positive": _sum_positive, "item_above_half": _item_above_half,
                     "bool_any_or": _any_positive}


@pytest.mark.parametrize("case", BRANCH_CONDITIONS, ids=str)
def test_branch_outcomes_alternate_without_recording_again(case):
    cond = BRANCH_CONDITIONS[case]
    graphs = 3 if cond is _any_positive else 2   # two bool reads: three graphs
    trace = check_segments(_module(lambda: Branchy(cond)), _alternating(_pos, _neg),
                           observe=lambda m: (m.taken, m.hits), graphs=graphs)
    assert_steady(trace, monitor_runs=2)


def test_branch_starting_with_the_other_outcome():
    trace = check_segments(_module(lambda: Branchy(_sum_positive)), _alternating(_neg, _pos),
                           observe=lambda m: (m.taken, m.hits), graphs=2)
    assert_steady(trace, monitor_runs=2)


class EffectsBeforeBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(()))
        self.seen = []

    def forward(self, x):
        self.seen.append(x.shape[0])
        self.total.add_(x.mean())
        h = self.a(x)
        if x.sum() > 0:
            self.seen.append("pos")
            return self.b(h)
        self.seen.append("neg")
        self.total.mul_(0.5)
        return h * -1


def test_effects_before_the_branch_are_not_repeated():
    # Correctness only (outputs and state after each call): the appends and the in-place
    # update before the branch happen exactly once per call, whichever outcome is new.
    check_segments(_module(EffectsBeforeBranch), [
        first(_pos), Step("other outcome", _neg, seed=1), Step("first again", _pos, seed=2),
        Step("second again", _neg, seed=3), again(expect=None), Step("first", _pos, seed=4),
        Step("second", _neg, seed=5),
    ], observe=lambda m: (m.seen, m.total))


THRESHOLD = 0.0


def _threshold_program(x):
    h = x * 3 + 1
    if h.mean() > THRESHOLD:
        return h.relu()
    return h.sigmoid() - 1


def _raise_threshold(ns):
    ns["THRESHOLD"] = 1e6


def _restore_threshold(ns):
    ns["THRESHOLD"] = 0.0


def test_global_threshold_of_a_branch_changed_between_calls():
    trace = check_segments(lambda: isolated(_threshold_program, THRESHOLD=0.0), [
        first(_pos), again(),
        after(_raise_threshold, expect=RECORDS), again(), fresh(_pos, seed=2),
        after(_restore_threshold, expect=MOCK), fresh(_pos, seed=3),
        Step("other outcome under the original threshold", _neg, seed=4, expect=RECORDS),
        Step("both outcomes replay", _pos, seed=5, expect=MOCK),
    ], observe=globals_view("THRESHOLD"), graphs=2)
    assert_steady(trace, monitor_runs=3)


def _halve_until_small(x):
    h = x * 1.0
    steps = 0
    while h.norm() > 1.0:
        h = h / 2
        steps += 1
    return h, steps


def _norm(scale):
    return lambda s: (nn.functional.normalize(torch.randn(4), dim=0) * scale,)


def test_data_dependent_while_loop():
    # Each loop test is a guarded branch: trip counts 2 (norm 3), 3 (norm 6), 0 (norm 0.5),
    # each recorded once, then replayed.
    trace = check_segments(lambda: (_halve_until_small, None), [
        first(_norm(3.0)), again(),
        Step("one more trip", _norm(6.0), seed=1, expect=RECORDS),
        Step("two trips again", _norm(3.0), seed=2, expect=MOCK),
        Step("three trips again", _norm(6.0), seed=3, expect=MOCK),
        Step("no trip", _norm(0.5), seed=4, expect=RECORDS),
        Step("no trip again", _norm(0.5), seed=5, expect=MOCK),
        Step("three trips", _norm(6.0), seed=6, expect=MOCK),
        Step("two trips", _norm(3.0), seed=7, expect=MOCK),
    ])
    assert [r[1] for r, _ in trace.results] == [2, 2, 3, 2, 3, 0, 0, 3, 2]
    assert_steady(trace, monitor_runs=3)


# ============================================================================ 5. breaks anywhere

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.lin(x)) + x


class BlockStack(nn.Module):
    """12 blocks, one dynamic operation after each: 13 graphs per call."""

    def __init__(self, style):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(12))
        self.head = nn.Linear(8, 2)
        self.style = style
        self.log = []

    def forward(self, x):
        h = x
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            if self.style == "float":
                self.log.append(h.norm().tolist())
            else:
                print(f"block {i}: {h.norm():.5f}")
        return self.head(h)


@pytest.mark.parametrize("style", ["float", "print"])
def test_break_in_every_block_of_a_module_list(style):
    def args(s):
        return (torch.randn(2, 8),)

    trace = check_segments(_module(lambda: BlockStack(style)), [
        first(args), again(), fresh(args), fresh(args, seed=2),
        after(_new_log, expect=NOT_EAGER), again(),
    ], observe=lambda m: m.log, graphs=(12, 13))
    assert sum(d["monitor_runs"] for d in trace.deltas[:4]) == 1
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert break_count(trace.per_call[0][1], *(TOLIST if style == "float" else FORMAT)) == 12


def _record_peak(log, h):
    log.append(h.abs().max().tolist())          # five frames below the compiled call


class DeepBlock(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.log = log                        # one list shared by the model and its blocks

    def forward(self, h):
        h = torch.relu(self.lin(h))
        self.inspect(h)
        return h + 1

    def inspect(self, h):
        _record_peak(self.log, h)


class Encoder(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.blocks = nn.ModuleList([DeepBlock(log), DeepBlock(log)])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x) * 0.5
        return x


class DeepModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.log = []
        self.encoder = Encoder(self.log)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def _new_shared_log(m):
    m.log = ["new"]
    for blk in m.encoder.blocks:
        blk.log = m.log


def test_break_deep_inside_submodules_and_helpers():
    trace = check_segments(_module(DeepModel), [
        first(_x), again(), fresh(_x), after(_new_shared_log, expect=NOT_EAGER), again(),
        fresh(_x, seed=3),
    ], observe=lambda m: (m.log, [b.log is m.log for b in m.encoder.blocks]),
        graphs=3)
    assert trace.deltas[1]["monitor_runs"] == trace.deltas[2]["monitor_runs"] == 0
    assert magpy.stats(trace.compiled).eager_runs == 0


class NoGradProbe(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.log = []
        self.shadow = None

    def forward(self, x):
        h = self.a(x)
        with torch.no_grad():
            ref = h * 2
            self.log.append(ref.norm().tolist())    # the break, with grad disabled
            ref2 = ref + 1                        # still without grad after it
        self.shadow = ref2
        return self.b(h) + ref2                   # grad again


def test_break_inside_no_grad():
    trace = check_segments(_module(NoGradProbe), [
        first(_x), again(), fresh(_x),
        first(_x, name="whole call under no_grad (records)", ctx=torch.no_grad), again(ctx=torch.no_grad),
        fresh(_x, seed=2, name="grad on again"),
    ], observe=lambda m: (m.log, m.shadow), graphs=2)
    assert trace.results[0][1].requires_grad and not trace.compiled.shadow.requires_grad
    assert_steady(trace, monitor_runs=2)


class Span:
    def __init__(self, events, name):
        self.events, self.name = events, name

    def __enter__(self):
        self.events.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc):
        self.events.append(f"exit {self.name}")
        return False


@contextlib.contextmanager
def _phase(events, name):
    events.append(f"begin {name}")
    try:
        yield name
    finally:
        events.append(f"end {name}")


class WithSpans(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.events = []

    def forward(self, x):
        with Span(self.events, "outer") as span:
            h = self.a(x)
            with _phase(self.events, "inner") as name:
                h = torch.tanh(h)
                self.events.append((name, h.sum().tolist()))     # the break, in two context managers
                h = h * 3
            h = self.b(h)
            self.events.append(span.name)
        return h


def _new_events(m):
    m.events = []


def test_break_inside_user_context_managers():
    trace = check_segments(_module(WithSpans), [
        first(_x), again(), fresh(_x), fresh(_x, seed=2), after(_new_events, expect=NOT_EAGER), again(),
    ], observe=lambda m: m.events, graphs=2)
    assert sum(d["monitor_runs"] for d in trace.deltas[:4]) == 1
    assert magpy.stats(trace.compiled).eager_runs == 0
    assert trace.compiled.events[:6] == ["enter outer", "begin inner", trace.compiled.events[2],
                                         "end inner", "outer", "exit outer"]


class TryFinally(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))
        self.events = []
        self.scales = {"double": 2.0}
        self.mode = "unknown"

    def forward(self, x):
        self.events.append("try")
        try:
            h = self.a(x)
            self.events.append(h.mean().tolist())    # the break, inside try
            try:
                scale = self.scales[self.mode]     # KeyError after the break, caught
            except KeyError:
                scale = 1.0
                self.events.append("no scale")
            h = self.b(h) * scale
        finally:
            self.events.append("finally")
            self.count.add_(1)
        return h


def _double_mode(m):
    m.mode = "double"


def test_break_inside_try_finally():
    trace = check_segments(_module(TryFinally), [
        first(_x), again(), fresh(_x), after(_double_mode, expect=RECORDS), again(), fresh(_x, seed=2),
    ], observe=lambda m: (m.events, m.count), graphs=2)
    assert_steady(trace, monitor_runs=2)


class GeneratorStages(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.log = []

    def stream(self, x):
        for stage in self.stages:
            x = torch.tanh(stage(x))
            self.log.append(x.abs().mean().tolist())   # the break, inside the generator
            yield x

    def forward(self, x):
        outs = []
        for h in self.stream(x):
            outs.append(h * 2)
        return torch.stack(outs).sum(0)


def _replace_last_stage(m):
    m.stages[2] = nn.Linear(4, 4)     # called after two breaks


def test_break_inside_a_generator_the_program_iterates():
    trace = check_segments(_module(GeneratorStages), [
        first(_x), again(), fresh(_x), fresh(_x, seed=2),
        after(_replace_last_stage, expect=RECORDS), again(), fresh(_x, seed=3),
    ], observe=lambda m: m.log, graphs=4)
    assert_steady(trace, monitor_runs=2)


# ============================================================================ 6. fullgraph, warnings

class TwoBreaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.log = []

    def forward(self, x):
        h = self.a(x)
        self.log.append(h.norm().tolist())    # <first break>
        self.log.append(f"{h.sum():.4f}")   # <second break>
        return self.b(h)


def test_fullgraph_raises_at_the_first_break():
    torch.manual_seed(0)
    eager = TwoBreaks()
    torch.manual_seed(0)
    m = TwoBreaks()
    fast = magpy.compile(m, backend="eager", fullgraph=True)
    x = torch.randn(3, 4)
    for _ in range(2):
        eager(x)
        with pytest.raises(magpy.GraphBreakError) as e:
            fast(x)
        assert "Tensor.tolist" in e.value.reason
        assert (e.value.filename, e.value.lineno) == (__file__, _line(TwoBreaks.forward, "<first break>"))
        assert m.log == eager.log     # the call ran to completion: both entries, once
    assert len(m.log) == 4


def _warnings_of(calls):
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(None):
        warnings.simplefilter("always")
        for call in calls:
            call()
    return [w for w in caught if issubclass(w.category, magpy.GraphBreakWarning)]


@pytest.mark.magpy_rerecords
def test_one_warning_per_callable_and_reason_at_the_users_line():
    torch.manual_seed(0)
    stack = BlockStack("float")
    fast = magpy.compile(stack, backend="eager")
    x = torch.randn(2, 8)
    caught = _warnings_of([lambda: fast(x)] * 3)   # twelve breaks per call, one reason, one line
    assert [(w.filename, w.lineno) for w in caught] == [
        (__file__, _line(BlockStack.forward, "self.log.append(h.norm().tolist())"))]
    assert "Tensor.tolist" in str(caught[0].message)

    other = magpy.compile(stack, backend="eager")   # another callable warns again
    assert len(_warnings_of([lambda: other(x), lambda: other(x)])) == 1

    fast = magpy.compile(TwoBreaks(), backend="eager")
    caught = _warnings_of([lambda: fast(x[:, :4])] * 3)
    assert sorted((w.filename, w.lineno) for w in caught) == [
        (__file__, _line(TwoBreaks.forward, "<first break>")),
        (__file__, _line(TwoBreaks.forward, "<second break>"))]


@pytest.mark.magpy_rerecords
def test_branch_outcomes_warn_once():
    fast = magpy.compile(Branchy(_sum_positive), backend="eager")
    p, n = _pos(None)[0], _neg(None)[0]
    caught = _warnings_of([lambda: fast(p), lambda: fast(n), lambda: fast(p), lambda: fast(n)])
    assert [(w.filename, w.lineno) for w in caught] == [
        (__file__, _line(Branchy.forward, "if self.cond(self, h, x):"))]


# ============================================================================ 7. a transformer-like stack

class TinyLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin, self.norm, self.act = nn.Linear(d, d), nn.LayerNorm(d), nn.GELU()

    def forward(self, x):
        return x + self.act(self.norm(self.lin(x)))


class TinyStack(nn.Module):
    """Embedding, 4 layers in a ModuleList with a logging forward hook each, a head."""

    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(TinyLayer(d) for _ in range(4))
        self.head = nn.Linear(d, vocab)
        self.log = []
        self.handles = [layer.register_forward_hook(self._log_norm) for layer in self.layers]

    def _log_norm(self, module, inputs, out):
        self.log.append(out.norm().tolist())

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def _ids(s):
    return (torch.randint(0, 32, (2, 5)),)


def _remove_third_hook(m):
    m.handles[2].remove()


def test_transformer_like_stack_with_logging_hooks():
    steps = [
        first(_ids), again(), fresh(_ids), fresh(_ids, seed=2),
        first(_ids, name="under no_grad (records)", ctx=torch.no_grad), again(ctx=torch.no_grad),
        fresh(_ids, seed=3, name="grad on again"),
        after(_new_log, expect=NOT_EAGER), again(),
        after(_remove_third_hook, expect=RECORDS), again(), fresh(_ids, seed=4),
    ]
    graphs = [None] * len(steps)
    for i in (1, 2, 3, 5, 6, 8):
        graphs[i] = 5
    graphs[10] = graphs[11] = 4
    trace = check_segments(_module(TinyStack), steps, observe=lambda m: m.log, graphs=graphs)
    assert len(trace.compiled.log) == 4 * 2 + 3 * 3
    assert trace.deltas[1]["monitor_runs"] == trace.deltas[3]["monitor_runs"] == 0
    assert break_count(trace.per_call[0][1], *TOLIST) == 4
    assert magpy.stats(trace.compiled).eager_runs == 0


# ============================================================================ 8. inductor
# Compiled C++ graphs; floats read back compare with allclose (the log as a tensor).

def test_inductor_float_log_between_layers():
    # The float is computed by the compiled graph (a 0-d float64 output) and made after it.
    trace = check_segments(_module(lambda: Probe(_log_float)), [first(_x), again(), fresh(_x)],
                           backend="inductor", observe=lambda m: torch.tensor(m.log), graphs=1)
    assert_steady(trace)
    assert all(type(v) is float for v in trace.compiled.log)


class BranchPrint(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.taken = []

    def forward(self, x):
        h = self.a(x)
        if x.mean() > 0:
            print("pos", (h > 100).any())   # a tensor printed between graphs
            self.taken.append("pos")
            return h.relu()
        self.taken.append("neg")
        return h.sigmoid()


def _very_pos(s):
    return (torch.rand(3, 4) + 20,)


def _very_neg(s):
    return (torch.rand(3, 4) - 20,)


def test_inductor_branch_alternation():
    trace = check_segments(_module(BranchPrint), [
        first(_very_pos, ctx=torch.no_grad), again(ctx=torch.no_grad),
        Step("other outcome", _very_neg, seed=1, expect=RECORDS, ctx=torch.no_grad),
        Step("first again", _very_pos, seed=2, expect=MOCK, ctx=torch.no_grad),
        Step("second again", _very_neg, seed=3, expect=MOCK, ctx=torch.no_grad),
    ], backend="inductor", observe=lambda m: m.taken, graphs=[None, 3, None, 3, 2])
    assert_steady(trace, monitor_runs=2)


# ============================================================================ sanity of the programs

def test_programs_really_break_today():
    # Each program above breaks the graph (magpy.explain sees a dynamic operation), so every
    # test exercises segments rather than a single graph.
    torch.manual_seed(0)
    cases = [(Probe(p), _x(None)) for p, _ in NON_STEERING.values()] + [
        (Effects(), _x(None)), (Branchy(_sum_positive), _pos(None)),
        (BlockStack("float"), (torch.randn(2, 8),)),
        (DeepModel(), _x(None)), (NoGradProbe(), _x(None)), (WithSpans(), _x(None)), (TryFinally(), _x(None)),
        (GeneratorStages(), _x(None)), (TinyStack(), _ids(None)), (BranchPrint(), _very_pos(None)),
    ]
    with contextlib.redirect_stdout(None):
        for m, args in cases:
            assert magpy.explain(m, *args).break_reasons, type(m).__name__
