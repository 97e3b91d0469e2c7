"""Issue 16, the remaining one-graph patterns: ``max``/``min`` of 0-d tensors, ``warnings``
in forward, numpy on tensors, and dict/set lookups whose keys hash in Python.

Each program runs through ``tests.compile_harness`` against eager: first call (monitor run),
the identical call again (mock), fresh inputs, and a change of what it reads from outside.
"""
import enum

import pytest
import torch

import magpy
from tests.compile_harness import EAGER, after, again, check_compiled, explain_copy, first, fresh, standard


@pytest.fixture(autouse=True)
def _no_records():
    """Every test starts with no records (tests.compile_harness.fresh_magpy)."""
    magpy.reset()


# ============================================================================ 1. max / min
# Python's ``max(a, b)`` is ``a`` unless ``b > a`` (so NaN gives ``a``), and the program gets
# the very object.  The recording run enters a Python stand-in of max/min (magpy.standins),
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
    ex = explain_copy(lambda: (_max_of_list, None), _pair)
    assert ex.graph_count == 1 and not ex.break_reasons
    text = str(ex)
    assert text.count("torch.cond") == 6   # 2 comparisons per call of 3 items
    assert "max at " in text and "min at " in text and __file__ in text


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
