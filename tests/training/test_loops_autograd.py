"""Issue 30 item 3: loops with autograd.  A counted loop over a tensor's length (an LSTM cell
stepped ``for t in range(xs.size(0))``) under autograd is one ``torch.while_loop`` operator
for every length, its gradients eager's: with backend "eager", whose graph runs the operator's
backward as eager runs it.  The carried ``(h, c)`` begin as zeros that do not require grad and
require it after the first step, as eager's do (the walk runs at least twice: lengths 0 and 1
have records of their own).  With Inductor (the default) the operator is compiled, backward
included, with two workarounds of torch 2.13 faults (magpy.backends.loop_gradients): such
carries anchored to a parameter, and donated buffers off.
"""
import pytest
import torch

import magpy
from magpy.backends import registry

LENGTHS = [3, 5, 4, 9, 2, 7, 6, 8, 10, 11, 12, 13]


class CellLoop(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell
        self.out = torch.nn.Linear(16, 4)

    def forward(self, xs):
        h = xs.new_zeros(xs.size(1), 16)
        state = (h, xs.new_zeros(xs.size(1), 16)) if isinstance(self.cell, torch.nn.LSTMCell) else h
        for t in range(xs.size(0)):
            state = self.cell(xs[t], state)
        h = state[0] if isinstance(state, tuple) else state
        return self.out(h)


def _pair(cell_type):
    torch.manual_seed(0)
    eager = CellLoop(cell_type(8, 16))
    twin = CellLoop(cell_type(8, 16))
    twin.load_state_dict(eager.state_dict())
    return eager, twin


def _train_lengths(eager, compiled, twin, lengths, same=torch.equal):
    """Loss and gradients of each length, eager against compiled (bit for bit by default)."""
    for n in lengths:
        xs = torch.randn(n, 2, 8)
        eager.zero_grad()
        twin.zero_grad()
        want = eager(xs).square().sum()
        want.backward()
        got = compiled(xs).square().sum()
        got.backward()
        assert same(want, got), n
        for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
            assert same(p.grad, q.grad), (n, name)


@pytest.mark.parametrize("cell_type", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cell_loop_under_autograd_is_one_operator_for_every_length(cell_type):
    eager, twin = _pair(cell_type)
    compiled = magpy.compile(twin, backend="eager")
    _train_lengths(eager, compiled, twin, LENGTHS)
    stats = magpy.stats(compiled)
    assert stats.records <= 3, stats.records   # the first length unrolled, then a symbolic one
    assert stats.monitor_runs <= 3
    text = str(magpy.explain(compiled, torch.randn(6, 2, 8)))
    assert "torch.while_loop" in text and "unrolled" not in text, text


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cell_type", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cell_loop_under_autograd_is_compiled_by_inductor(monkeypatch, cell_type):
    # The default backend compiles the loop's graph, the operator's backward included (the
    # autopilot off: every call runs Inductor's code), gradients within float tolerance.
    monkeypatch.setattr(magpy.config, "background_compile", False)
    monkeypatch.setattr(magpy.config, "autopilot", False)
    loops = []
    compile_inductor = registry._compile_inductor

    def spy(gm, example_inputs):
        loops.extend(n for n in gm.graph.nodes if n.target is torch.ops.higher_order.while_loop)
        return compile_inductor(gm, example_inputs)
    monkeypatch.setattr(registry, "_compile_inductor", spy)
    eager, twin = _pair(cell_type)
    compiled = magpy.compile(twin, backend="inductor")
    _train_lengths(eager, compiled, twin, LENGTHS, same=_close)
    stats = magpy.stats(compiled)
    assert stats.records <= 3 and stats.mock_runs >= len(LENGTHS) - 3, stats
    assert len(loops) == 1   # the symbolic record's loop, compiled by Inductor
    text = str(magpy.explain(compiled, torch.randn(6, 2, 8)))
    assert "torch.while_loop" in text and "unrolled" not in text, text


class _LSTMNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 12, batch_first=True)
        self.head = torch.nn.Linear(12, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def test_recurrent_layer_under_autograd_runs_as_eager_runs_it(monkeypatch):
    # nn.LSTM's fused kernel under AOTAutograd: its backward failed at the first mock run,
    # after the step's effects (aot_eager: "expected all tensors_saved_with_vc_check to be
    # Tensors"; Inductor: "expected Tensor() for op mkldnn_rnn_layer"), found by the
    # training-loop fuzzer: the graph runs as backend "eager" runs it.
    monkeypatch.setattr(magpy.config, "background_compile", False)

    def build():
        torch.manual_seed(0)
        model = _LSTMNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return model, step

    (model_e, step_e), (model_c, step_c) = build(), build()
    compiled = magpy.compile(step_c, backend="aot_eager")
    for i in range(4):
        torch.manual_seed(i)
        x, y = torch.randn(3, 5, 6), torch.randn(3, 4)
        assert torch.allclose(step_e(x, y), compiled(x, y), rtol=1e-5, atol=1e-6)
        for p, q in zip(model_e.parameters(), model_c.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)
    st = magpy.stats(compiled)
    assert (st.records, st.mock_runs, st.eager_runs) == (2, 2, 0), st
