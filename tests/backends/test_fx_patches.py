"""torch.fx traces in magpy's compile worker leave the program's threads alone
(magpy.backends.fx_patches).

A trace held open in the worker (the traced ``forward`` waits) while this thread calls a
module of its own: with fx's process-wide patches on, the call goes through the worker's
tracer, whose ``call_module`` raises ``NameError: module is not installed as a submodule``."""
import threading

import torch
from torch import nn

from magpy.backends import background

_ORIGINAL_CALL = nn.Module.__call__


def test_a_trace_in_the_worker_patches_nothing_this_thread_sees():
    inside, release = threading.Event(), threading.Event()

    class Traced(nn.Module):
        def forward(self, x):
            inside.set()
            assert release.wait(30)
            return x + 1

    def trace():
        return torch.fx.Tracer().trace(Traced())

    future = background.submit(trace)
    try:
        assert inside.wait(30), "the worker's trace did not start"
        layer = nn.Linear(2, 3)
        x = torch.randn(4, 2)
        assert torch.equal(layer(x), x @ layer.weight.T + layer.bias)
        assert nn.Module.__call__ is _ORIGINAL_CALL
    finally:
        release.set()
    graph = future.result(30)
    assert [n.op for n in graph.nodes] == ["placeholder", "call_function", "output"]
    assert nn.Module.__call__ is _ORIGINAL_CALL
