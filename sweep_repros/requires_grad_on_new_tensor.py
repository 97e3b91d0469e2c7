"""mra (BREAK): ``torch.zeros_like(q).requires_grad_()`` on a tensor the graph made (MRA's
fallback when its CUDA kernel is missing) is a graph break, reported as "Tensor.requires_grad_
reads tensor data into Python" (it reads no data; the message misleads)."""
import torch

import magpy

torch.set_num_threads(1)


def f(q):
    out = torch.zeros_like(q).requires_grad_()
    return out + q * 2


q = torch.randn(2, 3)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    torch.testing.assert_close(compiled(q), f(q))
s = magpy.stats(compiled)
print(s.monitor_runs, s.mock_runs, s.eager_runs, s.graph_count, s.break_reasons[:1])
