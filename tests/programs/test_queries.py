"""Issue 31's smaller items: legacy casts, process queries and grad-mode decorators as one graph.

- ``t.type(torch.FloatTensor)`` (or its name) cast through a native the recorder saw only as
  an argument it could not take (a ``torch.tensortype``): the call ran eagerly.  The
  recording now enters a stand-in that makes the same cast with ``Tensor.to``
  (magpy.capture.callees.builtin_standins), which returns ``t`` itself where it has the type already, as
  eager does.
- ``torch.distributed.is_available()`` / ``is_initialized()`` were impure natives (eager
  steps, two pieces).  The first reads a constant of the build; the second is a read of the
  default process group that the guard repeats: a record made before
  ``init_process_group`` misses after it.
- ``@torch.no_grad()`` on a nested function, or ``torch.no_grad()(fn)``: torch's decorator
  machinery ran natively, an eager step; the monitor now follows it (torch.utils._contextlib),
  so the ``with`` inside it is the grad-mode switch it is anywhere else.
- ``a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()`` (and ``is``, and
  ``a.data_ptr()``), as libraries test aliasing: each read was a graph break, and where two
  tensors shared a storage, the second read's storage object took the first one's name, so a
  later call with two storages compared the first with itself: a silently wrong branch.  A
  step that gives an object an earlier step gave now checks that it does again
  (``Segmenter._met_again``), a storage's ``data_ptr`` is a pure read, and the reads of an
  input's storage are steps before the graph, not breaks: one graph, the comparison checked.
Each program runs through ``tests.harness.compile_harness`` against eager.
"""
import os
import socket

import pytest
import torch
import torch.distributed as dist

import magpy
from tests.harness.compile_harness import MONITOR, after, check_compiled, first, fresh, standard


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


def _x(s):
    return (torch.randn(2, 3),)


def _x_grad(s):
    return (torch.randn(2, 3, requires_grad=True),)


def cast_by_legacy_type(x):
    same = x.type(torch.FloatTensor)
    return same * 2 + x.type(torch.DoubleTensor).sum() + x.type("torch.LongTensor").float(), same is x


def cast_by_unbound_type(x):
    return torch.Tensor.type(x, torch.DoubleTensor) * 2


def distributed_queries(x):
    if dist.is_available() and dist.is_initialized():
        return x * dist.get_world_size() + 5
    return x * 2


def no_grad_decorated(x):
    @torch.no_grad()
    def inner(y):
        return y * 2

    return inner(x) + x


def no_grad_wrapping(x):
    def inner(y):
        return y * 2

    with torch.no_grad():
        on = torch.enable_grad()(inner)(x)
    return torch.no_grad()(inner)(x) + on


@pytest.mark.parametrize("program", [cast_by_legacy_type, cast_by_unbound_type])
def test_cast_to_a_legacy_type_is_one_graph(program):
    check_compiled(lambda: (program, None), standard(_x), expect_graphs=1, expect_records=1)


def test_distributed_queries_are_no_break():
    check_compiled(lambda: (distributed_queries, None), standard(_x), expect_graphs=1, expect_records=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available(), reason="torch built without torch.distributed")
def test_a_record_made_before_the_process_group_misses_after_it():
    compiled = magpy.compile(distributed_queries, backend="eager")
    x = torch.ones(2)
    assert torch.equal(compiled(x), x * 2)
    assert torch.equal(compiled(x), x * 2)   # the mock
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        assert torch.equal(compiled(x), x + 5)
        assert torch.equal(compiled(x), x + 5)
    finally:
        dist.destroy_process_group()
    assert torch.equal(compiled(x), x * 2)


@pytest.mark.parametrize("program", [no_grad_decorated, no_grad_wrapping])
def test_grad_mode_decorators_are_one_graph(program):
    check_compiled(lambda: (program, None), standard(_x_grad), expect_graphs=1, expect_records=1)


def shares_storage(a, b):
    if a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
        return a + 1
    return a - 1


def same_storage_object(a, b):
    return a * (2 if a.untyped_storage() is b.untyped_storage() else 3)


def same_address(a, b):
    return a + 1 if a.data_ptr() == b.data_ptr() else a - 1


def _views(s):
    x = torch.randn(4, 3)
    return x, x.view(3, 4)


def _apart(s):
    return torch.randn(4, 3), torch.randn(3, 4)


def _aliasing_switches():
    """Views of one storage (a record), fresh views (its mock), two storages (another record),
    then each again (each record's mock)."""
    return [first(_views), fresh(_views), fresh(_apart, seed=2, expect=MONITOR), fresh(_views, seed=3),
            fresh(_apart, seed=4)]


@pytest.mark.parametrize("program", [shares_storage, same_storage_object, same_address])
def test_storage_comparisons_are_checked_and_one_graph(program):
    check_compiled(lambda: (program, None), _aliasing_switches(), expect_graphs=2, expect_records=2)


@pytest.mark.parametrize("program", [shares_storage, same_storage_object])
def test_storage_comparisons_first_apart_then_views(program):
    steps = [first(_apart), fresh(_apart), fresh(_views, seed=2, expect=MONITOR), fresh(_apart, seed=3)]
    check_compiled(lambda: (program, None), steps, expect_graphs=2, expect_records=2)


class Tied(torch.nn.Module):
    """An encoder and a decoder whose weights may be tied (one Parameter)."""

    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(3, 3, bias=False)
        self.dec = torch.nn.Linear(3, 3, bias=False)
        self.dec.weight = self.enc.weight

    def forward(self, x):
        tied = self.enc.weight.untyped_storage().data_ptr() == self.dec.weight.untyped_storage().data_ptr()
        return self.dec(self.enc(x)) * (1 if tied else -1)


def test_untying_weights_records_again():
    def untie(m):
        m.dec.weight = torch.nn.Parameter(m.enc.weight.detach().clone())
    check_compiled(lambda: (m := Tied(), m), [*standard(_x), after(untie, _x), fresh(_x, seed=3)],
                   expect_records=2)


@pytest.mark.parametrize("program", [shares_storage, same_storage_object])
def test_two_storages_after_views_are_not_taken_for_one(program):
    # (whatever the pieces: a later call's two storages are never the recording's one)
    later = (_apart, _views, _apart)
    steps = [first(_views), *(fresh(args, seed=i, expect=None) for i, args in enumerate(later))]
    check_compiled(lambda: (program, None), steps, fullgraph=False)
