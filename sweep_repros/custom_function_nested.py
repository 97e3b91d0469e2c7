"""reformer (BREAK, the whole call eager; the sweep lists it under NONDET because LSH hashing draws
random rotations): a custom ``autograd.Function`` applied *inside another one's forward*.
Reformer runs its layers inside ``_ReversibleFunction.apply`` (reversible residuals), and each
LSH attention layer calls ``ReverseSort.apply`` there.  ``opgraph.OpRecorder.apply_function``
records the outer apply as one graph operation and runs its forward without recording (``_opaque``),
but the inner apply tries to record itself anyway; its arguments were made by unrecorded
operations: "a tensor of unknown origin (shape (2, 4, 16, 16)) reached an op" at
modeling_reformer.py:635, and the whole call runs eagerly."""
import torch
from torch.autograd import Function

import magpy

torch.set_num_threads(1)
magpy.config.verify_fast_guard = True


class Inner(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Outer(Function):
    @staticmethod
    def forward(ctx, x):
        y = x + 1                  # made while the outer Function runs: not recorded
        return Inner.apply(y) - 1

    @staticmethod
    def backward(ctx, g):
        return g * 2


def f(x):
    return Outer.apply(x * 3).sum(-1)


x = torch.randn(4, 5)
for mode in ("no_grad", "grad"):
    compiled = magpy.compile(f, backend="eager")
    with torch.set_grad_enabled(mode == "grad"):
        for _ in range(3):
            torch.testing.assert_close(compiled(x), f(x))
    s = magpy.stats(compiled)
    print(mode, f"stats {s.monitor_runs}/{s.mock_runs}/{s.eager_runs}/{s.graph_count}", s.break_reasons[:1])
    magpy.reset()
