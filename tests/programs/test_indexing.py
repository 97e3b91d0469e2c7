"""Issue 31: a 0-d integer tensor used as a Python index (``Tensor.__index__``), as one graph.

``items[t]`` of a list or tuple (``t = x.argmax()``), ``items[:t]``, ``items[t] = v``,
``del items[t]``, ``range(t)``, ``x[:, :lengths.max()]`` (torch reads the bound) and
``self.heads[t]`` (``ModuleList.__getitem__`` calls ``operator.index(t)``) read the tensor's
value inside a native (``list.__getitem__``, ``range``): the recording ended there, or the read
was an eager step between two graphs.  The index read is data, so the record checks it: in the
graph (an assertion: where a later call reads another index, the call misses the record and
records again), or, after an observable effect, as an eager step whose check resumes the
monitor.  Each program runs through ``tests.harness.compile_harness`` against eager: the same index
again (mock), another index (a new record), and back (the first record's mock).
"""
import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (  # noqa: F401 - fresh_magpy: autouse fixture
    ANY,
    MOCK,
    MONITOR,
    after,
    check_compiled,
    first,
    fresh,
    fresh_magpy,
    isolated,
)


def _picking(k: int):
    """Arguments whose ``x.sum(0).argmax()`` is ``k``."""
    def args(state):
        x = torch.randn(2, 3)
        x[:, k] += 10
        return (x,)
    return args


def _switching(*, expect_first=MOCK):
    """Index 0 (a record), again, fresh inputs with index 0 (its mock), index 2 (another
    record), fresh ones with index 0 and 2 again (each record's mock)."""
    return [first(_picking(0)), fresh(_picking(0)), fresh(_picking(0), seed=2, expect=expect_first),
            fresh(_picking(2), seed=3, expect=MONITOR), fresh(_picking(0), seed=4),
            fresh(_picking(2), seed=5)]


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(3, 3) for _ in range(3))

    def forward(self, x):
        return self.heads[x.sum(0).argmax()](x)


def from_list(x):
    parts = [x * 1, x * 2, x - 3]
    return parts[x.sum(0).argmax()] + 1


def from_tuple_slice(x):
    t = x.sum(0).argmax()
    parts = (x + 1, x * 2, x - 3)
    return torch.cat(parts[: t + 1]), "abc"[t]


def counted_loop(x):
    acc = x
    for i in range(x.sum(0).argmax() + 1):
        acc = acc * 2 + i
    return acc


def stored_at(x):
    parts = [x, x * 2, x * 3]
    t = x.sum(0).argmax()
    parts[t] = x - 1
    del parts[t - 1]
    return parts


@pytest.mark.parametrize("program", [from_list, from_tuple_slice, counted_loop, stored_at])
def test_an_index_read_from_a_tensor_is_one_graph(program):
    check_compiled(lambda: (program, None), _switching(), expect_graphs=2, expect_records=2)


def test_a_module_list_picked_by_a_tensor_is_one_graph():
    check_compiled(lambda: (m := Heads(), m), _switching(), expect_graphs=2, expect_records=2)


def test_a_replaced_head_records_again():
    def replace(m):
        m.heads[0] = nn.Linear(3, 3)
    check_compiled(lambda: (m := Heads(), m),
                   [first(_picking(0)), fresh(_picking(0)), after(replace, _picking(0)),
                    fresh(_picking(0), seed=2)], expect_records=2)


TABLE = []   # (each copy of the program gets its own: isolated)


def from_global_list(x):
    return TABLE[x.sum(0).argmax()] * x


def into_global_list(x):
    t = x.sum(0).argmax()
    TABLE[t] = x[0]
    TABLE[t + 1:t + 2] = [x[1]]
    return x


def test_a_global_list_stored_into_at_a_tensor_index():
    # (the mock makes the stores again, at the indices the graph checks)
    def build():
        return isolated(into_global_list, TABLE=[torch.ones(3), torch.arange(3.0), torch.zeros(3)])
    check_compiled(build, [first(_picking(0)), fresh(_picking(0)), fresh(_picking(1), seed=2, expect=MONITOR),
                           fresh(_picking(0), seed=3), fresh(_picking(1), seed=4)],
                   observe=lambda ns: ns["TABLE"])


def test_a_global_list_indexed_by_a_tensor_is_guarded():
    def change(ns):   # (another shape: a graph input of the record for index 0 no more)
        ns["TABLE"][0] = torch.full((1,), 7.0)

    def swap(ns):   # (the same shapes: the mock reads the list's items where they are now)
        ns["TABLE"].reverse()

    def build():
        fn, ns = isolated(from_global_list, TABLE=[torch.ones(3), torch.arange(3.0), torch.zeros(3)])
        return fn, ns
    check_compiled(build, [first(_picking(0)), fresh(_picking(0)), fresh(_picking(1), seed=2, expect=MONITOR),
                           after(change, _picking(0)), fresh(_picking(0), seed=3),
                           after(swap, _picking(1), expect=ANY), fresh(_picking(2), seed=4, expect=ANY)],
                   observe=lambda ns: ns["TABLE"])


def after_an_update(x, log):
    x.add_(1)   # an input updated in place: a failed check cannot call again, it resumes
    log.append("called")
    return [x * 1, x * 2, x * 3][x.sum(0).argmax()]


def _with_log(k, seed=0, expect=MOCK):
    pick = _picking(k)
    return fresh(lambda log: (*pick(log), log), seed=seed, expect=expect, name=f"index {k}, seed {seed}")


def test_an_index_read_after_an_effect_resumes_where_it_differs():
    # (after the update the check is an eager step: where it fails, the monitor resumes there)
    check_compiled(lambda: (after_an_update, []),
                   [_with_log(0, expect=MONITOR), _with_log(0, seed=1), _with_log(2, seed=2, expect=ANY),
                    _with_log(0, seed=3), _with_log(2, seed=4)], fullgraph=False)


def test_explain_shows_the_check_in_the_graph():
    text = str(magpy.explain(from_list, _picking(1)(None)[0]))
    assert "1 graph" in text and "0 graph breaks" in text and "_assert_async" in text


def trimmed(x, lengths):
    y = x[:, : lengths.max()] * 2
    y[: lengths.min(), 1:] = 0
    return y


def _lengths(*ls):
    return lambda s: (torch.randn(3, 6), torch.tensor(ls))


def test_a_tensor_sliced_up_to_a_tensor_is_one_graph():
    # torch reads a slice's 0-d tensor bound itself (its __index__, in C++): the recording ended
    # there ("tensor operation argument of type slice"); the graph now checks the bound.
    steps = [first(_lengths(2, 4, 3)), fresh(_lengths(3, 4, 2)),
             fresh(_lengths(2, 5, 3), seed=2, expect=MONITOR), fresh(_lengths(4, 2, 3), seed=3),
             fresh(_lengths(5, 2, 2), seed=4)]
    check_compiled(lambda: (trimmed, None), steps, expect_graphs=2, expect_records=2)


# int(t) / t.item() feeding ints that only size or index tensors: not one graph yet (magpy's
# graphs have no data-dependent sizes), but each read is an eager step whose int the record
# checks: equal to eager as the count changes, a new record per count.
def sized_by_data(x):
    n = int((x > 0).sum())
    k = x.sum(0).argmax().item()
    return torch.zeros(n) + 1, x[:, : k + 1], x.reshape(int(torch.tensor(2)), -1)


def test_ints_read_from_tensors_that_size_tensors_are_checked_steps():
    later = [fresh(_picking(k), seed=seed, expect=ANY) for k, seed in ((0, 1), (2, 2), (0, 3))]
    trace = check_compiled(lambda: (sized_by_data, None), [first(_picking(0)), *later], fullgraph=False)
    reason = "Tensor.__int__ reads tensor data into Python"
    assert any(reason in r for r in trace.compiled._magpy_cache.stats.breaks)
