"""Issue 16, the remaining one-graph patterns: ``max``/``min`` of 0-d tensors, ``warnings``
in forward, numpy on tensors, and dict/set lookups whose keys hash in Python.

Each program runs through ``tests.harness.compile_harness`` against eager: first call (monitor run),
the identical call again (mock), fresh inputs, and a change of what it reads from outside.
"""
import enum
import sys
import warnings

import numpy as np
import pytest
import torch

import magpy
from tests.harness import compile_harness as harness
from tests.harness.compile_harness import after, again, check_compiled, first, fresh, graph_as_is, standard

EAGER, MONITOR = harness.EAGER, harness.MONITOR


@pytest.fixture(autouse=True)
def _no_records():
    """Every test starts with no records (tests.harness.compile_harness.fresh_magpy)."""
    magpy.reset()


# ============================================================================ 1. max / min
# Python's ``max(a, b)`` is ``a`` unless ``b > a`` (so NaN gives ``a``), and the program gets
# the very object.  The recording run enters a Python stand-in of max/min
# (magpy.capture.callees.builtin_standins),
# whose comparison is a tensor ``if``: one ``torch.cond`` whose mock hands over ``a`` or ``b``
# itself, never ``torch.maximum``'s new tensor.


def _pair(s):
    return torch.randn(()), torch.randn(())


def _nan_first(s):
    return torch.tensor(float("nan")), torch.tensor(1.0)


def _nan_second(s):
    return torch.tensor(1.0), torch.tensor(float("nan"))


def _ordered(s):
    return torch.tensor(-1.0), torch.tensor(2.0)


def _reversed(s):
    return torch.tensor(2.0), torch.tensor(-1.0)


def _equal(s):
    return torch.tensor(2.0), torch.tensor(2.0)


PAIRS = [fresh(_ordered), fresh(_reversed), fresh(_equal)]


def _max_min(a, b):
    return max(a, b) * 2, min(a, b) - 1


def _max_itself(a, b):
    return max(a, b)          # a or b itself: the harness compares which argument it is


def _min_itself(a, b):
    return min(a, b)


def _max_of_list(a, b):
    c = a * b
    return max([a, b, c]) + min((a, b, c)) + max(c, a, b)


@pytest.mark.parametrize("program", [_max_min, _max_itself, _min_itself, _max_of_list],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_max_min_of_0d_tensors_is_one_graph(program):
    # torch.compile: one graph too, but through torch.maximum (NaN propagates, a new tensor).
    check_compiled(lambda: (program, None), standard(_pair) + PAIRS, expect_graphs=1, expect_records=1)


@pytest.mark.parametrize("program", [_max_min, _max_itself, _min_itself, _max_of_list],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_max_min_with_nan_give_eagers_object(program):
    # (the harness's comparison takes NaN for a difference: compared here, NaN equal to NaN)
    fast = magpy.compile(program, backend="eager", fullgraph=True)
    for make in (_pair, _nan_first, _nan_second, _nan_first, _equal):
        a, b = make(None)
        want, got = program(a, b), fast(a, b)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        assert all(torch.equal(w, g) or (w.isnan().all() and g.isnan().all()) for w, g in zip(want, got))
        assert [[w is a, w is b] for w in want] == [[g is a, g is b] for g in got]
    assert (magpy.stats(fast).monitor_runs, magpy.stats(fast).mock_runs) == (1, 4)


def test_max_min_with_inductor():
    check_compiled(lambda: (_max_min, None), standard(_pair) + PAIRS, backend="inductor",
                   expect_graphs=1, expect_records=1)


def test_max_min_explain_lists_the_conds():
    ex = harness.explain_copy(lambda: (_max_of_list, None), _pair)
    assert ex.graph_count == 1 and not ex.break_reasons
    text = str(ex)
    assert text.count("torch.cond") == 6   # 2 comparisons per call of 3 items
    assert "max at " in text and "min at " in text and __file__ in text


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_max_min_backward_reaches_the_chosen_tensor(backend):
    def program(a, b):
        return max(a, b) * 3 + min(a, b)
    fast = magpy.compile(program, backend=backend, fullgraph=True)
    for seed in range(3):
        torch.manual_seed(seed)
        a, b = torch.randn((), requires_grad=True), torch.randn((), requires_grad=True)
        a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        fast(a, b).backward()
        program(a2, b2).backward()
        assert torch.equal(a.grad, a2.grad) and torch.equal(b.grad, b2.grad)
    assert (magpy.stats(fast).monitor_runs, magpy.stats(fast).mock_runs) == (1, 2)


def test_max_without_control_flow_is_a_checked_step():
    magpy.config.control_flow = False
    try:
        # (each outcome of the comparison is a record of its own)
        steps = [first(_ordered), again(), fresh(_ordered), fresh(_reversed, expect=MONITOR),
                 fresh(_reversed)]
        trace = check_compiled(lambda: (_max_itself, None), steps, fullgraph=False, expect_records=2)
    finally:
        magpy.config.control_flow = True
    assert trace.stats["eager_runs"] == 0


def _mixed(a, b):
    return max([a, b, 0.5])   # a float against tensors: the arms leave a float or a tensor


def test_max_mixing_numbers_runs_in_pieces():
    # The comparison with 0.5 cannot be a cond: an eager step whose truth the mock checks.
    trace = check_compiled(lambda: (_mixed, None), [first(_pair), again(), fresh(_ordered, expect=None),
                                                    fresh(lambda s: (torch.tensor(0.1), torch.tensor(0.2)),
                                                          expect=None)],
                           fullgraph=False)
    assert trace.stats["eager_runs"] == 0


def _max_then_inplace(a, b):
    m = max(a, b)
    m.add_(1)      # eager updates a or b itself
    return a, b


def test_max_then_updated_in_place_runs_eagerly():
    # The cond's output stands for a or b; updating it in place cannot be replayed.
    trace = check_compiled(lambda: (_max_then_inplace, None),
                           [first(_pair), again(expect=EAGER), fresh(_reversed, expect=EAGER)],
                           fullgraph=False, expect_records=1)
    assert "updates in place a tensor an if passed through" in trace.stats["break_reasons"][0]


def _max_of_sizes(x):
    return x.new_zeros(max(x.size(0), 2))   # no tensor among the items: the builtin runs


def test_max_of_ints_stays_native():
    check_compiled(lambda: (_max_of_sizes, None), standard(lambda s: (torch.randn(3),)), expect_graphs=1)


# ============================================================================ 4. hashing keys
# A dict or set lookup runs the key's Python __hash__ and the members' Python __eq__ natively:
# what they read is not guarded, so a changed attribute would replay a stale outcome.  Such a
# lookup reaching objects from outside the call runs the call eagerly (correct, not one graph).

class Key:
    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return 7

    def __eq__(self, other):
        return isinstance(other, Key) and self.v == other.v


def _keys():
    member, key = Key(1), Key(1)
    return {"d": {member: 2.0}, "s": {member}, "key": key, "member": member}


def _change_key(s):
    s["key"].v = 2


def _change_member(s):
    s["member"].v = 3


def _lookup(s):
    def forward(x):
        return x * s["d"][s["key"]] if s["key"] in s["d"] else x - 1
    return forward


def _get(s):
    return lambda x: x * s["d"].get(s["key"], 5.0)


def _keys_view(s):
    return lambda x: x * 2 if s["key"] in s["d"].keys() else x


def _contains_method(s):
    return lambda x: x * 2 if s["d"].__contains__(s["key"]) else x


def _set_member(s):
    return lambda x: x * 2 if s["key"] in s["s"] else x


def _new_key(s):
    return lambda x: x * 2 if Key(1) in s["d"] else x   # the members' __eq__ reads member.v


def _display(s):
    return lambda x: x * len({s["key"], s["member"]})  # equal keys: one member


LOOKUPS = [_lookup, _get, _keys_view, _contains_method, _set_member, _new_key, _display]


@pytest.mark.parametrize("program", LOOKUPS, ids=lambda f: f.__name__.lstrip("_"))
def test_python_hashed_keys_from_outside_run_eagerly(program):
    def build():
        s = _keys()
        return program(s), s
    x = lambda s: (torch.ones(3),)   # noqa: E731
    trace = check_compiled(build, [first(x), again(expect=EAGER), after(_change_key, expect=EAGER),
                                   after(_change_member, expect=EAGER), fresh(x, expect=EAGER)],
                           fullgraph=False, observe=lambda s: (s["key"].v, s["member"].v))
    assert "runs a Python __hash__ or __eq__ of an object from outside the call" in \
        trace.stats["break_reasons"][0]


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def _native_keys(s):
    def forward(x, t):
        # str, Enum (its __hash__ reads the name, which never changes) and tensor keys.
        red = Color.RED in s["colors"]
        return x * s["scale"]["a"] + s["by_color"][s["color"]] + s["by_tensor"][t] + red
    return forward


def _native_build():
    t = torch.tensor(1.0)
    s = {"scale": {"a": 2.0}, "by_color": {Color.RED: 1.0, Color.BLUE: 3.0}, "color": Color.RED,
         "by_tensor": {t: 4.0}, "colors": {Color.RED}, "t": t}
    return _native_keys(s), s


def _to_blue(s):
    s["color"] = Color.BLUE


def test_natively_hashed_keys_stay_one_graph():
    args = lambda s: (torch.randn(3), s["t"])   # noqa: E731
    check_compiled(_native_build, standard(args) + [after(_to_blue, args)], expect_graphs=2,
                   observe=lambda s: s["color"])


def test_keys_made_in_the_call_stay_one_graph():
    def program(x):
        d = {Key(1): 2.0}       # keys and members the call made: nothing from outside to guard
        return x * d[Key(1)]
    check_compiled(lambda: (program, None), standard(lambda s: (torch.randn(3),)), expect_graphs=1)


# ============================================================================ 2. warnings
# warnings.warn in forward is one graph: the mock hands what warnings.warn would hand to
# warnings.warn_explicit (message, category, the file, line and registry of the frame
# stacklevel names) to warn_explicit on every replay, so the filters and the module's
# __warningregistry__ decide as they do eagerly.

def _warns(x):
    warnings.warn("deprecated path", DeprecationWarning)
    return x * 2


def _warns_in_loop(x):
    for i in range(2):
        warnings.warn(f"step {i}")   # one location, two messages: two registry entries
    y = x + 1
    warnings.warn("after", FutureWarning, stacklevel=1)
    return y


def _deprecated_helper():
    warnings.warn("use something else", DeprecationWarning, stacklevel=2)   # the caller's line


def _warns_through_a_helper(x):
    _deprecated_helper()
    return x - 1


def _catches(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("hidden")
        y = x + 1
    warnings.warn("shown", stacklevel=1)   # the filter changes reset its registry entry
    return y * 2


def _catches_and_counts(x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("recorded")
        warnings.filterwarnings("ignore", message="not this")
        warnings.warn("not this one")
    return x * len(caught)


def _catches_with_an_action(x):
    with warnings.catch_warnings(action="ignore", category=FutureWarning):
        warnings.warn("a future warning", FutureWarning)
        warnings.warn("another", DeprecationWarning)
    warnings.resetwarnings()   # the program's own change of the filters, made on every call
    return x - 2


PROGRAMS = [_warns, _warns_in_loop, _warns_through_a_helper, _catches, _catches_and_counts,
            _catches_with_an_action]
ACTIONS = ["default", "always", "ignore", "once", "module", "error"]


def _warnings_of(fn, calls, actions):
    """Per call: (result or exception, [(message, category, filename, lineno)]), with the
    filter ``actions[i]`` set before call ``i`` (which also resets the registries' version)."""
    warnings.onceregistry.clear()   # process-wide ("once"): each copy starts afresh
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        for x, action in zip(calls, actions):
            warnings.resetwarnings()   # (programs may add filters of their own)
            warnings.simplefilter(action)
            try:
                out = fn(x)
            except Exception as e:  # noqa: BLE001 - a warning the "error" filter raised
                out = (type(e), str(e))
            seen.append((out, [(str(w.message), w.category, w.filename, w.lineno) for w in caught
                               if not issubclass(w.category, magpy.GraphBreakWarning)]))
            caught.clear()
    return seen


def _same_warnings(program, actions, **compile_kwargs):
    # Each copy has its own globals, so its own __warningregistry__.
    eager, _ = harness.isolated(program)
    compiled_fn, _ = harness.isolated(program)
    fast = magpy.compile(compiled_fn, backend="eager", **compile_kwargs)
    calls = [torch.randn(3) for _ in actions]
    want, got = _warnings_of(eager, calls, actions), _warnings_of(fast, calls, actions)
    for (out_e, seen_e), (out_c, seen_c) in zip(want, got):
        assert seen_c == seen_e
        assert (torch.equal(out_e, out_c) if isinstance(out_e, torch.Tensor) else out_e == out_c)
    return magpy.stats(fast)


@pytest.mark.parametrize("action", ACTIONS[:-1])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__.lstrip("_"))
def test_warnings_are_made_by_every_replay(program, action):
    # torch.compile: fullgraph=True refuses warnings.warn ("Attempted to call function marked
    # as skipped").
    st = _same_warnings(program, [action] * 3, fullgraph=True)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs, st.graph_count) == (1, 2, 0, 1)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__.lstrip("_"))
def test_warnings_follow_filter_changes_between_calls(program):
    # A filter change resets the registries (their version); "error" raises the warning at
    # the program's line: the mock's replay raises before any effect, so the call runs again.
    st = _same_warnings(program, ["default", "default", "error", "default", "default", "always", "error"])
    assert st.eager_runs == 0 and st.mock_runs >= 3


def test_warnings_explain_and_mock_source():
    ex = magpy.explain(_warns_in_loop, torch.randn(3))
    assert ex.graph_count == 1 and not ex.break_reasons
    assert sum("warnings.warn(...)  <- warnings.warn, made again by every replay" in line
               for line in ex.segments) == 3


class _Block(torch.nn.Module):
    """transformers style: a warning only when training with gradients."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        if self.training and x.requires_grad:
            warnings.warn("use_cache=True is incompatible with gradient checkpointing", UserWarning)
        return self.lin(x)


def _to_eval(m):
    m.eval()


def test_a_warning_when_training_is_one_graph():
    def run(ctx_action):
        build = lambda: (lambda m: (m, m))(_Block())   # noqa: E731
        args = lambda s: (torch.randn(2, 3, requires_grad=True),)   # noqa: E731
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(ctx_action)
            check_compiled(build, standard(args) + [after(_to_eval, args), again()], expect_graphs=2)
        return [(str(w.message), w.filename, w.lineno) for w in caught]
    seen = run("always")
    # eager and compiled each warned in the 3 training calls, at the program's line
    assert len(seen) == 6 and all(s == seen[0] for s in seen) and seen[0][1] == __file__


def _warns_for_the_caller(x):
    warnings.warn("your call", stacklevel=2)   # the caller's line: outside the compiled call
    return x + 2


def _warns_a_warning_object(x):
    warnings.warn(RuntimeWarning("an object"))
    return x + 3


def _exception_in_a_catch(x):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raise ValueError("inside")
    except ValueError:
        pass
    return x + 4


def test_an_exception_leaving_catch_warnings_runs_eagerly():
    st = _same_warnings(_exception_in_a_catch, ["always", "default", "default"])
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 0, 2)
    assert "with an exception leaving the block" in st.break_reasons[0]


def test_a_warning_object_runs_eagerly():
    st = _same_warnings(_warns_a_warning_object, ["always", "default", "default"])
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 0, 2)


# (The suite's re-record check wraps the cache's miss in a frame of its own, which a
# stacklevel reaching past the compiled call would name: off here.)
@pytest.mark.magpy_rerecords
def test_a_warning_for_the_caller_runs_eagerly():
    # Its file and line are the caller's, which differ from call to call: not replayed.
    # The recording run names the program's caller, not magpy's frames in between.
    fast = magpy.compile(_warns_for_the_caller, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast(torch.randn(3)); line = sys._getframe().f_lineno   # noqa: E702
        fast(torch.randn(3))
    assert [(w.filename, w.lineno) for w in caught if w.category is UserWarning][0] == (__file__, line)
    st = magpy.stats(fast)
    assert (st.monitor_runs, st.mock_runs, st.eager_runs) == (1, 0, 1)
    assert "warnings.warn with a stacklevel reaching past the compiled call" in st.break_reasons[0]


def _warns_in_a_branch(x):
    if x.sum() > 0:
        warnings.warn("positive")
        x = x * 2
    return x


def test_a_warning_in_a_tensor_if_is_a_break():
    # An arm with an effect: the if is an eager step (its truth checked), the warning made
    # by the mock where the run took that arm.
    fast = magpy.compile(_warns_in_a_branch, backend="eager", fullgraph=True)
    with pytest.raises(magpy.GraphBreakError, match="warn in a branch"):
        fast(torch.ones(3))
    _same_warnings(_warns_in_a_branch, ["always"] * 4)


# ============================================================================ 3. numpy on tensors
# numpy on a tensor's .numpy() is recorded as the equivalent torch operations where torch
# gives what numpy gives (dtype and shape, checked), as torch.compile's numpy translation
# does; the values are torch's, within rounding of numpy's (compared with allclose).

def _sqrt_round_trip(x):
    return torch.from_numpy(np.sqrt(x.numpy())) + 1


def _reductions(x):
    a = x.numpy()
    peak = torch.tensor(np.max(a, 1, keepdims=True))
    return torch.tensor(a.sum()) * torch.as_tensor(np.mean(a, axis=0)) + peak


def _exp_abs(x):
    y = x * 2   # a tensor the graph made
    return torch.from_numpy(np.exp(y.numpy()) * 2 - np.abs(y.numpy()) / 3)


def _helper(a):
    return np.tanh(-a)


def _through_a_function(x):
    return torch.from_numpy(_helper(x.numpy())).sum(0)


def _alias(x):
    t = torch.from_numpy(x.numpy())   # shares x's memory, as eager's does
    t.mul_(2)
    return t, x + 1


def _unbound_method(x):
    return torch.from_numpy(np.sqrt(torch.Tensor.numpy(x)))


NUMPY_PROGRAMS = [_sqrt_round_trip, _reductions, _exp_abs, _through_a_function, _alias, _unbound_method]


@pytest.mark.parametrize("program", NUMPY_PROGRAMS, ids=lambda f: f.__name__.lstrip("_"))
def test_numpy_on_tensors_is_one_graph(program):
    args = lambda s: (torch.rand(3, 4) + 0.5,)   # noqa: E731
    check_compiled(lambda: (program, None), standard(args) + [fresh(args, seed=5)], backend=graph_as_is,
                   expect_graphs=1, expect_records=1)


def test_numpy_keeps_numpys_dtypes():
    # np.sqrt of an integer array is float64 in numpy, and in torch._numpy (torch.sqrt's would
    # be float32): one graph computing in float64.  (Integer division, where the two disagree,
    # is a break: tests/capture/test_numpy_arrays.py.)
    program = lambda x: torch.from_numpy(np.sqrt(x.numpy())) * 2   # noqa: E731
    args = lambda s: (torch.arange(6),)   # noqa: E731
    trace = check_compiled(lambda: (program, None), standard(args), expect_graphs=1, expect_records=1)
    assert trace.results[0][1].dtype == torch.float64


def _array_method(x):
    a = x.numpy()
    return x * float(a.sum())   # a Python float of numpy's: the array leaves the graph


def _kept_array(x):
    a = x.numpy()
    return x + 1, a             # returned: the program has numpy's array itself


@pytest.mark.parametrize("program", [_array_method, _kept_array], ids=["to-python", "returned"])
def test_numpy_arrays_used_otherwise_run_in_pieces(program):
    args = lambda s: (torch.randn(4),)   # noqa: E731
    steps = [first(args), again(expect=MONITOR), again(), fresh(args), fresh(lambda s: (torch.randn(4) * 3,))]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False, expect_records=1)
    assert magpy.stats(trace.compiled).breaks == {"Tensor.numpy reads tensor data into Python": 1}


def _array_across_an_if(x):
    a = x.numpy()
    if x.sum() > 0:      # the array is live here: the if is a checked step, not a cond
        y = torch.from_numpy(np.sqrt(np.abs(a)))
    else:
        y = x * 2
    return y + torch.from_numpy(np.abs(a))


def _array_before_an_if(x):
    y = torch.from_numpy(np.abs(x.numpy()))   # no array left after this line
    if y.sum() > 2:
        y = y * 3
    return y


@pytest.mark.parametrize("program, graphs", [(_array_across_an_if, 4), (_array_before_an_if, 1)],
                         ids=["live", "dead"])
def test_numpy_arrays_and_tensor_ifs(program, graphs):
    big = lambda s: (torch.rand(3) + 1,)     # noqa: E731
    small = lambda s: (-torch.rand(3),)      # noqa: E731
    steps = [first(big), again(), fresh(big), fresh(small, expect=None), fresh(small), fresh(big)]
    trace = check_compiled(lambda: (program, None), steps, backend=graph_as_is, fullgraph=False,
                           expect_graphs=graphs)
    assert trace.stats["eager_runs"] == 0
