"""Issue 31: legacy tensor constructors are factories, and ``x.new(x.size())`` is a shape.

``torch.FloatTensor([0.5])``, ``torch.Tensor([[1, 0, -1], ...])`` and
``torch.FloatTensor(mu.size()).normal_()`` were natives the recording could not see (a tensor
of unknown origin, so the call ran eagerly); the recording now enters a stand-in that makes
the same tensor with ``torch.tensor``/``torch.empty`` (magpy.capture.callees.builtin_standins), so each is
one graph.
``x.data.new(x.size())`` was recorded with the size written as a tuple, which ``new`` reads
as data: the mock made a tensor of another shape (a failing mock, or where it broadcast, a
silently wrong result).  Each program runs through ``tests.harness.compile_harness`` against eager.
"""
import pytest
import torch

import magpy
from tests.harness.compile_harness import (
    EAGER,
    after,
    again,
    check_compiled,
    first,
    fresh,
    isolated,
    standard,
)


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


def _x(s):
    return (torch.randn(2, 3),)


def _square(s):
    return (torch.randn(3, 3),)


def scale_by_legacy_data(x):
    return x * torch.FloatTensor([0.5]) + torch.LongTensor([1, 2, 3]) + torch.Tensor([[1, 0, -1], [2, 0, -2]])


def reparametrize(x):
    eps = torch.FloatTensor(x.size()).normal_()
    return x + eps * torch.DoubleTensor(2, 3).fill_(0.5).float()


def new_of_size(x):
    return x + x.data.new(x.size()).normal_() + x.new(x.size()).fill_(1.0)


def new_of_data(x):
    return x + x.new((2.0, 3.0)) + x.new([1.0, 2.0])


@pytest.mark.parametrize("program", [scale_by_legacy_data, reparametrize, new_of_size])
def test_legacy_constructors_are_one_graph(program):
    build = lambda: (program, None)   # noqa: E731
    check_compiled(build, standard(_x), expect_graphs=1, expect_records=1)


def test_new_of_a_size_is_a_shape_even_where_a_tuple_would_broadcast():
    # (2,) from a tuple broadcasts against (2, 2): the old record was silently wrong here.
    check_compiled(lambda: (new_of_data, None), standard(lambda s: (torch.randn(3, 2),)), expect_graphs=1)
    check_compiled(lambda: (new_of_size, None), standard(lambda s: (torch.randn(2, 2),)), expect_graphs=1)


def test_legacy_constructor_of_the_default_dtype_follows_a_changed_size():
    def program(x, n):
        return x.sum() + torch.Tensor(n, 2).fill_(1.0).sum()

    fn, g = isolated(program)
    build = lambda: (fn, None)   # noqa: E731
    check_compiled(build, [*standard(lambda s: (torch.randn(2, 3), 4)),
                           after(lambda s: None, lambda s: (torch.randn(2, 3), 5), name="another size")],
                   fullgraph=True)


def test_legacy_constructor_of_a_tensor_still_runs_eagerly_and_exactly():
    def program(x):
        return torch.FloatTensor(x) * 2   # (an alias of x: not a factory)

    steps = [first(_square, expect=None), again(expect=EAGER), fresh(_square, expect=EAGER)]
    trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    assert trace.stats["graph_count"] == 0


def test_legacy_constructors_under_inductor():
    check_compiled(lambda: (reparametrize, None), standard(_x), backend="inductor", expect_graphs=1)
    check_compiled(lambda: (new_of_size, None), standard(_square), backend="inductor", expect_graphs=1)
