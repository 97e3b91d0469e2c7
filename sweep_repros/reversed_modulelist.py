"""vits (BREAK, the whole call eager; the sweep lists it under NONDET because VITS draws noise in eval
mode): ``list(reversed(self.flows))`` over an ``nn.ModuleList``.  ``reversed()`` is a native
builtin that indexes the ModuleList through its Python ``__getitem__``; the modules it yields have
no path from the compiled module in magpy's RefGraph, so their parameters are "a tensor of unknown
origin (shape (64, 1, 1)) reached an op" (VITS: ``duration_predictor.flows.4.conv_pre.weight``,
from ``flows = list(reversed(self.flows))`` in ``VitsStochasticDurationPredictor.forward``), and the
whole call runs eagerly.  Iterating the ModuleList forwards records (reverse=False below)."""
import torch
from torch import nn

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


class Flows(nn.Module):
    def __init__(self):
        super().__init__()
        self.flows = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x, reverse: bool = True):
        flows = list(reversed(self.flows)) if reverse else list(self.flows)
        for flow in flows:
            x = flow(x).tanh()
        return x


torch.manual_seed(0)
model, x = Flows().eval(), torch.randn(2, 4)
for reverse in (False, True):
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x, reverse), model(x, reverse))
    s = magpy.stats(compiled)
    print(f"reverse={reverse}: stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count}",
          s.break_reasons[:1])
    magpy.reset()
