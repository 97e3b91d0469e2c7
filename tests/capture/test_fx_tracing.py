"""A recording while torch.fx traces in the same process (magpy.capture.callees.fx_tracing).

fx's ``Tracer.trace`` patches ``nn.Module.__call__`` and ``__getattr__`` for the whole process
while it traces, as magpy's background compiles do (AOTAutograd's ``make_fx``) beside the
program's thread.  Here the recording runs inside a trace's window, in the tracing thread
itself (from the tracer's ``call_module``), so the patches are surely there."""
import torch
from torch import nn

import magpy


def test_a_recording_during_an_fx_trace_looks_through_its_patches():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = magpy.compile(model, backend="eager")
    x = torch.randn(3, 4)
    got = []

    class Tracer(torch.fx.Tracer):
        def call_module(self, m, forward, args, kwargs):
            if not got:
                assert nn.Module.__call__ is not _ORIGINAL_CALL   # (the patch is on)
                got.append(compiled(x))
            return super().call_module(m, forward, args, kwargs)

    Tracer().trace(nn.Sequential(nn.Linear(2, 2)))
    assert nn.Module.__call__ is _ORIGINAL_CALL
    assert torch.equal(got[0], model(x))
    assert torch.equal(compiled(x), model(x))   # the record the traced window made
    stats = magpy.stats(compiled)
    assert (stats.monitor_runs, stats.mock_runs, stats.eager_runs) == (1, 1, 0), stats
    assert stats.break_reasons == [] and stats.breaks == {}, stats


_ORIGINAL_CALL = nn.Module.__call__
