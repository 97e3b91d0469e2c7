"""A comprehension's filter on tensor data (``[t for t in x if t > 0]``).

CPython 3.12 inlines comprehensions into their frame (PEP 709): the list being built sits on
the frame's stack from before the filter's ``if``, and an arm that adds to it (``LIST_APPEND``,
``SET_ADD``, ``MAP_ADD``) was taken for an arm without effects, so the ``if`` became a
``torch.cond`` whose mock kept the recorded number of items: a silently wrong result on 3.12
and 3.13 whenever another call's filter let another number of items through.  The filter is
now a checked eager step there, as on 3.11.  Each program runs against eager over calls
whose filter lets through a different number of items (CI runs this file on every version).
"""
import pytest
import torch

import magpy
from tests.harness.compile_harness import ANY, check_compiled, first, fresh


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


def list_filter(x):
    ys = [t for t in x if t > 0]
    return x * len(ys)


def set_filter(x):
    ys = {i for i, t in enumerate(x) if t > 0}
    return x * len(ys) + sum(ys)


def dict_filter(x):
    ys = {i: t * 2 for i, t in enumerate(x) if t < 0}
    return x + sum(ys.values(), torch.zeros(())) + len(ys)


def filter_after_an_effect(x):
    B.mul_(0.5)   # noqa: F821 - the program's global (tests.harness.compile_harness.isolated)
    return x * len([t for t in x if t > 0])


def _values(*vs):
    return lambda s: (torch.tensor(vs),)


CALLS = [first(_values(1.0, 1.0)), fresh(_values(2.0, 3.0)), fresh(_values(1.0, -1.0), expect=ANY),
         fresh(_values(-1.0, 2.0), expect=ANY), fresh(_values(-1.0, -1.0), expect=None),
         fresh(_values(1.0, 1.0), expect=None)]


@pytest.mark.parametrize("program", [list_filter, set_filter, dict_filter], ids=lambda f: f.__name__)
def test_a_comprehension_filter_on_tensor_data_gives_eagers_result(program):
    check_compiled(lambda: (program, None), CALLS, fullgraph=False)


def test_a_comprehension_filter_after_an_effect():
    from tests.harness.compile_harness import globals_view, isolated
    check_compiled(lambda: isolated(filter_after_an_effect, B=torch.ones(2)), CALLS, fullgraph=False,
                   observe=globals_view("B"))
