"""Issue 31's smaller items: legacy casts, process queries and grad-mode decorators as one graph.

- ``t.type(torch.FloatTensor)`` (or its name) cast through a native the recorder saw only as
  an argument it could not take (a ``torch.tensortype``): the call ran eagerly.  The
  recording now enters a stand-in that makes the same cast with ``Tensor.to``
  (magpy.standins), which returns ``t`` itself where it has the type already, as eager does.
- ``torch.distributed.is_available()`` / ``is_initialized()`` were impure natives (eager
  steps, two pieces).  The first reads a constant of the build; the second is a read of the
  default process group that the guard repeats: a record made before
  ``init_process_group`` misses after it.
- ``@torch.no_grad()`` on a nested function, or ``torch.no_grad()(fn)``: torch's decorator
  machinery ran natively, an eager step; the monitor now follows it (torch.utils._contextlib),
  so the ``with`` inside it is the grad-mode switch it is anywhere else.
Each program runs through ``tests.compile_harness`` against eager.
"""
import os
import socket

import pytest
import torch
import torch.distributed as dist

import magpy
from tests.compile_harness import check_compiled, standard


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
