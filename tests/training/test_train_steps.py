"""Training steps compiled whole: forward, ``loss.backward()``, optimizer update (issue 13).

Each test runs a train step on a compiled copy and on an eager twin (``check_compiled``:
built twice from the same seed) and compares, after every step, the loss, every parameter
and its ``.grad``, and the optimizer's state (momentum buffers, Adam moments, step counters)
bit-exactly with backend "eager", with ``allclose`` under Inductor.

A step records as one graph: forward, loss, ``loss.backward()`` (``magpy.training.backward``: the
gradients and the ``.grad`` accumulation are graph operations) and the optimizer update
(``tests/training/test_backward.py`` tests the eager backward step that remains where the backward cannot
be in the graph).  The first step finds no ``.grad`` and no optimizer state, the second finds
both: each records once; from the third on every step is a mock run (no monitor run, no
eager run).
"""
import warnings

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(state):
    return torch.randn(6, 8), torch.randn(6, 4)


def _steps(n: int = 5) -> list[Step]:
    """Step 1 and 2 record (no .grad and no optimizer state, then both); the rest are mocks."""
    expect = [MONITOR, MONITOR] + [MOCK] * (n - 2)
    return [Step(f"train step {i + 1}", _batch, seed=i, expect=e) for i, e in enumerate(expect)]


def _observe(state):
    """Everything a train step changes: parameters, buffers, their .grad, the optimizer state."""
    model, opt = state["model"], state["opt"]
    return ([(name, t, t.grad) for name, t in model.named_parameters()], list(model.buffers()),
            opt.state_dict(), state.get("log"))


def _trainer(model, opt, loss_fn=nn.functional.mse_loss, clip=None, scheduler=None):
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        return loss
    return train_step


def _build(make_opt, **kw):
    def build():
        model = _mlp()
        opt = make_opt(model.parameters())
        return _trainer(model, opt, **kw), {"model": model, "opt": opt}
    return build


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adamw(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


@pytest.mark.parametrize("make_opt", [_sgd, _adamw], ids=["sgd-momentum", "adamw"])
def test_step_compiled_whole(make_opt):
    trace = check_compiled(_build(make_opt), _steps(), fullgraph=False, observe=_observe,
                           expect_graphs=2, expect_records=2)
    stats = magpy.stats(trace.compiled)
    assert stats.eager_runs == 0 and stats.break_reasons == []
    assert stats.breaks == {}
    assert stats.graphs_per_call == 1   # forward, loss, backward, optimizer update


def test_optimizer_state_equal_after_steps():
    # The harness compares state_dict()s; this names what they hold after an AdamW step.
    trace = check_compiled(_build(_adamw), _steps(3), fullgraph=False, observe=_observe)
    opt = trace.compiled_state["opt"]
    state = opt.state[next(iter(trace.compiled_state["model"].parameters()))]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"} and state["step"].item() == 3.0


def test_fullgraph_takes_the_whole_step():
    # The backward is in the graph: fullgraph=True has no break to report.
    check_compiled(_build(_sgd), _steps(), fullgraph=True, observe=_observe, expect_records=2)


def test_explain_shows_one_graph():
    fn, state = _build(_sgd)()
    explanation = magpy.explain(fn, *_batch(state))
    assert "1 graph," in str(explanation) and "0 graph breaks" in str(explanation)
    assert "magpy_training_backward_gradients(" in explanation.graphs[0].code


def test_gradient_accumulation_two_micro_batches():
    def build():
        model = _mlp()
        opt = _sgd(model.parameters())

        def train_step(x, y):
            opt.zero_grad()
            for xs, ys in zip(x.chunk(2), y.chunk(2)):
                loss = nn.functional.mse_loss(model(xs), ys) / 2
                loss.backward()
            opt.step()
            return loss
        return train_step, {"model": model, "opt": opt}

    trace = check_compiled(build, _steps(), fullgraph=False, observe=_observe, expect_records=2)
    # Both forwards and backwards (the second adds into the first's .grad) and the update.
    assert magpy.stats(trace.compiled).breaks == {}
    assert magpy.stats(trace.compiled).graphs_per_call == 1


def test_accumulation_across_calls_without_zero_grad():
    # Each call adds its gradients to the .grad the last one left: the first call creates
    # them, the others accumulate; one record serves both, the .grad an accumulation buffer
    # the mock takes from the parameter or makes where it has none (magpy.training.backward).
    def build():
        model = _mlp()

        def accumulate(x, y):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        return accumulate, {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1)}

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=MOCK if i else MONITOR) for i in range(4)]
    check_compiled(build, steps, fullgraph=False, observe=_observe, expect_records=1)


def test_train_eval_switch():
    # Dropout and BatchNorm behave differently in train and eval mode: switching records once
    # per mode, switching back hits the record of that mode.
    def build():
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25),
                              nn.Linear(16, 4))
        opt = _sgd(model.parameters())
        return _trainer(model, opt), {"model": model, "opt": opt}

    def to_eval(state):
        state["model"].eval()

    def to_train(state):
        state["model"].train()

    steps = _steps(3) + [after(to_eval, _batch, expect=MONITOR),
                         Step("eval again", _batch, seed=7, expect=MOCK),
                         after(to_train, _batch, expect=MOCK)]
    check_compiled(build, steps, fullgraph=False, observe=_observe, expect_records=3)


@pytest.mark.parametrize("make_opt", [_sgd, _adamw], ids=["sgd-momentum", "adamw"])
def test_parameters_added_to_the_optimizer_later(make_opt):
    # A fine-tuning loop that unfreezes a layer: the optimizer starts with the head only, then
    # add_param_group adds the first layer (with a learning rate of its own).  That step
    # records (a group more), the next too (the new parameters' state is created), then mocks.
    # The mock rewrote the optimizer state in its own key order (a dict keyed by parameters,
    # whose order it compared with ==): magpy failed and ran the rest eagerly (issue 41).
    def build():
        model = _mlp()
        opt = make_opt(model[2].parameters())
        return _trainer(model, opt), {"model": model, "opt": opt}

    def unfreeze(state):
        state["opt"].add_param_group({"params": list(state["model"][0].parameters()), "lr": 0.02})

    steps = _steps(4) + [after(unfreeze, _batch, expect=MONITOR), Step("after", _batch, seed=8, expect=MONITOR)]
    steps += [Step(f"then {i}", _batch, seed=9 + i, expect=MOCK) for i in range(4)]
    check_compiled(build, steps, fullgraph=False, observe=_observe, expect_records=4)


def test_a_frozen_layer():
    def build():
        model = _mlp()
        model[0].requires_grad_(False)
        opt = _sgd(p for p in model.parameters() if p.requires_grad)
        return _trainer(model, opt), {"model": model, "opt": opt}

    check_compiled(build, _steps(6), fullgraph=False, observe=_observe, expect_records=2)


def test_clip_grad_norm():
    check_compiled(_build(_sgd, clip=0.5), _steps(), fullgraph=False, observe=_observe, expect_records=2)


def _scheduled_run(n: int = 6, make_opt=_sgd, **options):
    # The learning rate is a new float every other step; the results must still be eager's.
    def build():
        model = _mlp()
        opt = make_opt(model.parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return _trainer(model, opt, scheduler=sched), {"model": model, "opt": opt, "sched": sched}

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(n)]
    trace = check_compiled(build, steps, fullgraph=False,
                           observe=lambda s: (_observe(s), s["sched"].state_dict()), **options)
    assert magpy.stats(trace.compiled).eager_runs == 0
    return trace


def test_lr_scheduler_step():
    _scheduled_run()


def test_lr_scheduler_steady_state():
    # A float lr is lifted (a graph input; the scheduler's ``lr * gamma`` and its stores into
    # param_groups and _last_lr are computed by the mock) once it has changed: 4 records (no
    # optimizer state; lr not seen to change yet; each outcome of StepLR's
    # ``last_epoch % step_size``), then every step is a mock run, whatever its lr (5 values).
    st = magpy.stats(_scheduled_run(10).compiled)
    assert st.monitor_runs == 4 and st.mock_runs == 6, st


@pytest.mark.parametrize("make_opt", [_sgd, _adamw], ids=["sgd-momentum", "adamw"])
def test_float_lr_changed_between_steps(make_opt):
    # The program sets the lr between compiled steps (a scheduler outside the step, or by
    # hand): the first new lr records once more (it is lifted from then on), then every lr
    # is a mock run of one graph.
    def new_lr(state):
        for group in state["opt"].param_groups:
            group["lr"] = group["lr"] * 0.75

    steps = _steps(2) + [after(new_lr, _batch, expect=MONITOR)] + [after(new_lr, _batch, expect=MOCK)] * 4
    trace = check_compiled(_build(make_opt), steps, fullgraph=False, observe=_observe, expect_records=3)
    assert magpy.stats(trace.compiled).graphs_per_call == 1


@pytest.mark.parametrize("make_opt", [_sgd, _adamw], ids=["sgd-momentum", "adamw"])
def test_lr_scheduler_float_lr_inductor(make_opt):
    # Inductor takes the lifted lr as a 0-d tensor; SGD's ``alpha=-lr`` becomes a multiply
    # (AOTAutograd cannot read a tensor alpha), so the step stays compiled (no fallback warning).
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trace = _scheduled_run(8, make_opt, backend="inductor", rtol=1e-5, atol=1e-6)
    assert magpy.stats(trace.compiled).mock_runs >= 4


def test_bf16_autocast_step():
    # The forward under CPU autocast: the graph enters bfloat16 autocast where the step did,
    # so steady-state mock runs compute what eager computes (they ran in float32 before).
    def build():
        model = _mlp()
        opt = _sgd(model.parameters())

        def train_step(x, y):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = nn.functional.mse_loss(out.float(), y)
            loss.backward()
            opt.step()
            return loss
        return train_step, {"model": model, "opt": opt}

    trace = check_compiled(build, _steps(), fullgraph=False, observe=_observe, expect_records=2)
    assert magpy.stats(trace.compiled).graphs_per_call == 1


@pytest.mark.parametrize("make_opt", [lambda p: torch.optim.SGD(p, lr=torch.tensor(0.05), momentum=0.9),
                                      lambda p: torch.optim.AdamW(p, lr=torch.tensor(0.01), weight_decay=0.1)],
                         ids=["sgd-momentum", "adamw"])
def test_lr_scheduler_with_a_tensor_learning_rate(make_opt):
    # torch's advice for compiled optimizers: a tensor lr, which the scheduler updates in
    # place.  The steps replay one record for every lr (a float lr records per value, above),
    # and stay exact: AdamW's lr / bias correction of two 0-d tensors must divide in the lr's
    # dtype as eager does (in float64 it was off in the last bit after a few steps).
    def build():
        model = _mlp()
        opt = make_opt(model.parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        return _trainer(model, opt, scheduler=sched), {"model": model, "opt": opt, "sched": sched}

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(8)]
    trace = check_compiled(build, steps, fullgraph=False,
                           observe=lambda s: (_observe(s), s["sched"].state_dict()))
    st = magpy.stats(trace.compiled)
    # (2 recordings: no optimizer state, then the scheduler's epoch counter lifted from its
    # second value, 1, on: magpy.graphs.dynamic lifts a counter read from program state from 1 up)
    assert st.eager_runs == 0 and st.monitor_runs == 2 and st.mock_runs == 6, st


class _Scale(torch.autograd.Function):
    """y = 2x, whose backward (counted) gives 3 * grad: not the derivative of its forward."""

    backward_calls = 0

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        _Scale.backward_calls += 1
        return grad * 3


def test_custom_function_backward_runs():
    def build():
        model = _mlp()
        opt = _sgd(model.parameters())
        return _trainer(model, opt, loss_fn=lambda out, y: nn.functional.mse_loss(_Scale.apply(out), y)), \
            {"model": model, "opt": opt}

    _Scale.backward_calls = 0
    check_compiled(build, _steps(), fullgraph=False, observe=_observe, expect_records=2)
    assert _Scale.backward_calls == 10   # 5 eager steps and 5 compiled ones, each its own backward


def test_inductor_step():
    trace = check_compiled(_build(_adamw), _steps(4), backend="inductor", fullgraph=False, observe=_observe,
                           rtol=1e-5, atol=1e-6)
    assert magpy.stats(trace.compiled).eager_runs == 0
