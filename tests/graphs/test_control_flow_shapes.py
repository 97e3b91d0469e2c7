"""Control flow operators with symbolic sizes: programs mixing conds, ``while`` and ``for``
loops with size reads and shape arithmetic around them, run over batch sizes that change and
inputs that take every outcome.  Every call must give eager's result (a size that became a
constant of a graph no guard checks was a silently wrong result three times while these
operators learnt symbolic sizes); how many records it takes is not the point here."""
import pytest
import torch
from torch import nn

from tests.harness.compile_harness import (
    ANY,
    Step,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset(), magpy.config restored
)

torch.manual_seed(0)
_LIN = nn.Linear(8, 8).eval()


def _p1(x):   # if then size read of cond output
    y = _LIN(x) if x.sum() > 0 else x * 2
    return y.reshape(y.size(0) * 2, -1)
def _p2(x):   # nested if with view using shape
    b = x.shape[0]
    if x.mean() > 0:
        if x.max() > 1:
            x = x.view(b, 2, -1).sum(1)
        else:
            x = x[:, :4] * 1
    else:
        x = x[:, 4:] + 1
    return x.sum(0), x.shape[0] + 0 * x.sum()
def _p3(x):   # while with shape-dependent body
    y = x.clone()
    while y.abs().sum() > y.shape[0]:
        y = y * 0.5
    return y
def _p4(x):   # for over rows with accumulation then size
    outs = []
    h = torch.zeros(x.size(1))
    for r in x:
        h = torch.tanh(r + h)
        outs.append(h * 1)
    s = torch.stack(outs)
    return s.new_ones(s.size(0), 1) * s.sum()
def _p5(x):   # range loop with batch-first rows and a cond inside body
    h = x[:, 0] * 0
    for t in range(x.size(1)):
        h = h + x[:, t]
        if h.sum() > 0:
            h = h * 0.9
        else:
            h = h - 0.1
    return h
def _p6(x):   # cond selecting between tensors of different symbolic sizes
    a, b = x[:-1], x[1:]
    y = a if x.sum() > 0 else b
    return y * y.size(0)
def _p7(x):   # loop output used in shape arithmetic
    y = x * 1
    while y.norm() > 3:
        y = y / 2
    n = y.numel()
    return y.flatten()[: n // 2]
def _p8(x):   # cond inside for-over-tensor body using extra tensor
    w = x.mean(0)
    outs = []
    for r in x:
        z = r * w if r.sum() > 0 else r - w
        outs.append(z)
    return torch.cat(outs)


PROGRAMS = [_p1, _p2, _p3, _p4, _p5, _p6, _p7, _p8]
BATCHES = [3, 5, 4, 7, 2, 6, 3, 9]


def _inputs(batch, sign):
    return (torch.randn(batch, 8) * sign + (0.5 if sign > 0 else -0.5),)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__[1:])
def test_every_batch_and_outcome_gives_eagers_result(program):
    steps = [Step(f"batch {b}, sign {s}", (lambda st, b=b, s=s: _inputs(b, s)), seed=10 * i + s, expect=ANY)
             for i, b in enumerate(BATCHES) for s in (1, -1, 3)]
    with torch.no_grad():
        check_compiled(lambda: (program, None), steps, fullgraph=False, rtol=1e-6, atol=1e-6)
