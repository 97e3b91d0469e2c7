"""jetmoe (BREAK, the whole call eager): JetMoE's router computes ``expert_size =
gates.long().sum(0).tolist()`` (per-expert token counts read into Python) and the experts do
``inputs.split(expert_size, dim=0)``: "an operation on a value computed eagerly that returns a
graph's tensor" at modeling_jetmoe.py:152, and the call runs eagerly (no graph at all), where the
``.tolist()`` could be an eager step between two graphs."""
import torch

import magpy

torch.set_num_threads(1)


def f(x, logits):
    top = logits.topk(1, dim=1).indices                                   # [tokens, 1]
    gates = torch.zeros(x.size(0), 3).scatter(1, top, 1)
    expert_size = gates.long().sum(0).tolist()                            # data into Python
    order = top.flatten().sort(0).indices
    parts = x[order].split(expert_size, dim=0)
    return torch.cat([p * (i + 1) for i, p in enumerate(parts)])


x, logits = torch.randn(8, 4), torch.randn(8, 3)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    torch.testing.assert_close(compiled(x, logits), f(x, logits))
s = magpy.stats(compiled)
print(s.monitor_runs, s.mock_runs, s.eager_runs, s.graph_count, s.break_reasons[:1])
