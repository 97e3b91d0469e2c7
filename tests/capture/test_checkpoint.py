"""Activation checkpointing (``torch.utils.checkpoint``) as a subgraph (magpy.capture.callees.checkpoint).

The checkpointed function's operations are one ``tag_activation_checkpoint`` operation of the
graph, as under torch.compile: one graph, values and gradients equal to eager's on the first
call (monitor), repeated and fresh calls (mock), and after the module's weights change.
What the subgraph cannot hold keeps the call correct (eagerly, as before).
"""
import pytest
import torch
import transformers
from torch import nn
from torch.utils.checkpoint import checkpoint

import magpy
from tests.harness.compile_harness import (
    EAGER,
    MONITOR,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture
    standard,
)

HOP = torch.ops.higher_order.tag_activation_checkpoint


class Blocks(nn.Module):
    """Two checkpointed blocks (one with a keyword argument of its own) and a head."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))
        self.b = nn.Linear(6, 6)
        self.head = nn.Linear(6, 2)

    def scaled(self, h, scale=1.0):
        return torch.tanh(self.b(h)) * scale

    def forward(self, x):
        h = checkpoint(self.a, x, use_reentrant=False) + x
        h = checkpoint(self.scaled, h, use_reentrant=False, scale=0.5)
        return self.head(h)


def _x(s):
    return (torch.randn(3, 6, requires_grad=True),)


def _module(make=Blocks):
    def build():
        m = make()
        return m, m
    return build


def _grads(m):
    return {n: p.grad for n, p in m.named_parameters()}


def _backward(out):
    out.sum().backward()


def _hops(trace) -> int:
    (rec,) = trace.compiled._magpy_cache.records
    return sum(n.target is HOP for gm in rec.graphs for n in gm.graph.nodes)


def _scale_weights(m):
    with torch.no_grad():
        m.a[0].weight.mul_(2)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_checkpointed_blocks_are_subgraphs_of_one_graph(backend):
    steps = standard(_x) + [fresh(_x, seed=2), after(_scale_weights, expect="mock"), again()]
    trace = check_compiled(_module(), steps, backend=backend, observe=lambda m: m.state_dict(),
                           expect_graphs=1, expect_records=1)
    assert _hops(trace) == 2


def test_gradients_through_checkpointed_blocks_are_eagers():
    torch.manual_seed(0)
    model, twin = Blocks(), Blocks()
    twin.load_state_dict(model.state_dict())
    compiled = magpy.compile(model, backend="eager", fullgraph=True)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(3, 6, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        compiled(x).sum().backward()
        twin(y).sum().backward()
        assert torch.equal(x.grad, y.grad), seed
        for (n, g), g2 in zip(_grads(model).items(), _grads(twin).values()):
            assert torch.equal(g, g2), (seed, n)
    assert magpy.stats(compiled).monitor_runs == 1


def test_a_train_step_with_checkpointed_blocks_is_one_graph():
    def build():
        model = Blocks()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step, {"model": model, "opt": opt}

    def args(s):
        return torch.randn(4, 6), torch.randn(4, 2)

    # (The first step makes the optimizer's momentum buffers: the second records again.)
    trace = check_compiled(build, [first(args), again(expect=MONITOR), again(), fresh(args, seed=3)],
                           observe=lambda s: (s["model"].state_dict(), s["opt"].state_dict()),
                           fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.graphs_per_call == 1 and st.breaks == {} and st.eager_runs == 0, st


class Reentrant(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        return checkpoint(self.lin, x, use_reentrant=True) * 2


def test_reentrant_checkpoint_stays_correct():
    # use_reentrant=True runs natively, as before: the call runs eagerly, with eager's results.
    check_compiled(_module(Reentrant), [first(_x), again(expect=EAGER)], fullgraph=False)


class Printing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def block(self, x):
        print("inside the checkpoint")
        return self.lin(x).relu()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False) * 2


def test_a_break_inside_the_checkpointed_function_runs_the_call_eagerly():
    def build():
        m = Printing()
        return m, m

    trace = check_compiled(build, [first(_x), again(expect=EAGER)], fullgraph=False)
    assert "call to impure native print" in str(trace.stats["break_reasons"])


def test_transformers_gradient_checkpointing_is_one_graph():
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    # (use_cache stays on, the default: transformers logs a warning_once on every call, an
    # effect the mock makes again, magpy.capture.callees.warnings_logging.)

    def build():
        m = transformers.BertModel(cfg).train()
        m.gradient_checkpointing_enable()   # (transformers' default: use_reentrant=False)
        return (lambda ids: m(ids).last_hidden_state), m

    def ids(s):
        return (torch.randint(0, 100, (2, 8)),)

    trace = check_compiled(build, standard(ids) + [fresh(ids, seed=2)], observe=lambda m: None,
                           expect_graphs=1, expect_records=1)
    assert _hops(trace) == 2
