"""mamba, falcon_mamba, jamba (BREAK, whole call eager): magpy answers True to
``is_torchdynamo_compiling()`` during a recording, so transformers' Mamba mixers take their
``torch._higher_order_ops.associative_scan`` path (meant for Dynamo only); in eager the
scan's own implementation hands the program tensors magpy never saw: "a tensor of unknown
origin (shape (2, 64, 16)) reached an op" at modeling_mamba.py:237, and the whole call runs
eagerly (every call records again: monitor_runs 3 for 3 calls, no graph)."""
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import magpy

torch.set_num_threads(1)


def combine_fn(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def f(a, b):
    if torch.compiler.is_compiling():   # transformers: is_torchdynamo_compiling() and not exporting
        _, states = associative_scan(combine_fn, (a, b), dim=2, combine_mode="generic")
    else:
        states = []
        h = torch.zeros_like(b[:, :, 0])
        for i in range(a.shape[2]):
            h = a[:, :, i] * h + b[:, :, i]
            states.append(h)
        states = torch.stack(states, dim=2)
    return states.sum(-1)


a, b = torch.rand(2, 8, 6), torch.randn(2, 8, 6)
compiled = magpy.compile(f, backend="eager")
for _ in range(3):
    torch.testing.assert_close(compiled(a, b), f(a, b))
s = magpy.stats(compiled)
print(s.monitor_runs, s.mock_runs, s.eager_runs, s.graph_count, s.break_reasons[:1])
