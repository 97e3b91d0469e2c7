"""Mixed precision with ``GradScaler`` and EMA weights in a compiled training step (issue 30).

``torch.amp.GradScaler``'s Python code is followed like the optimizer's
(``training.MONITORED_TORCH``): its scale multiplies the loss in the graph, ``unscale_``'s
``_amp_foreach_non_finite_check_and_unscale_`` (in place, on the gradients and the found-inf
flag: ``opgraph._WRITES_LEADING``) and ``update``'s ``_amp_update_scale_`` are graph
operations, and ``step`` reads the found-inf flag back (``.item()``: eager reads it too) to
decide whether the optimizer steps: a record per outcome, guarded by it.  Its
``sum(v.item() for v in ...)`` is written out as a loop (``training._maybe_opt_step``) so the
monitor sees it.  Every test compares with the same loop run eagerly after each step:
parameters, gradients, optimizer state and the scaler's state, bit for bit under backend
"eager".
"""
import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    Step,
    after,
    check_compiled,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
)
from tests.training.test_schedules import _batch, _mlp


def _observe(state):
    model, opt = state["model"], state["opt"]
    if "scaler" in state:
        extra = state["scaler"].state_dict()
    elif "averaged" in state:
        extra = state["averaged"].state_dict()
    else:
        extra = [t.clone() for t in state["ema"]]
    return [(n, t, _nan_marked(t.grad)) for n, t in model.named_parameters()], opt.state_dict(), extra


def _nan_marked(grad):
    # (an overflowing step leaves NaN gradients, in eager as compiled: compared as a mark)
    return None if grad is None else torch.where(grad.isnan(), -7.0, grad)


def _scaled_build(dtype):
    def build():
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=dtype):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            return loss.detach()
        return train_step, {"model": model, "opt": opt, "scaler": scaler}
    return build


def _overflowing(state):
    x, y = _batch(state)
    # (an infinite loss; its gradient overflows half precision on the way back)
    return x, y * 1e30


def _steps(n, batch=_batch):
    return [Step(f"train step {i + 1}", batch, seed=i, expect=ANY) for i in range(n)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_scaled_step_records_once_for_finite_steps(dtype):
    trace = check_compiled(_scaled_build(dtype), _steps(12), fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.mock_runs == 10 and st.eager_runs == 0, st
    # the found-inf read is the one eager step: a graph before it and one after
    assert st.graphs_per_call == 2 and set(st.breaks) == {"Tensor.item reads tensor data into Python"}, st


def test_overflowing_step_skips_the_update_as_eager_does():
    # Steps 4 and 9 overflow: the optimizer does not step and the scale backs off; the step
    # after one has a record of its own (the flag's other outcome), later steps reuse both.
    steps = _steps(12)
    for i in (3, 8):
        steps[i] = Step(f"train step {i + 1} (overflows)", _overflowing, seed=i, expect=ANY)
    trace = check_compiled(_scaled_build(torch.float16), steps, fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and st.records <= 4 and st.mock_runs >= 8, st


def test_scaled_step_under_inductor():
    # (in float32: Inductor rounds bf16 intermediates its own way, and AdamW's normalised
    # updates carry that into every parameter; the scaler's graph operations are what is tested)
    trace = check_compiled(_scaled_build(torch.float32), _steps(6), fullgraph=False, observe=_observe,
                           backend="inductor")
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.eager_runs == 0, st


def _ema_build(decay=0.99):
    def build():
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ema = [p.detach().clone() for p in model.parameters()]

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            with torch.no_grad():
                for e, p in zip(ema, model.parameters()):
                    e.mul_(decay).add_(p, alpha=1 - decay)
            return loss.detach()
        return train_step, {"model": model, "opt": opt, "ema": ema}
    return build


def test_ema_weights_updated_in_the_step():
    trace = check_compiled(_ema_build(), _steps(8), fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.mock_runs == 6 and st.graphs_per_call == 1, st


def averaged_model_build(use_buffers: bool = False):
    """A step that updates ``torch.optim.swa_utils.AveragedModel`` (EMA) after AdamW's step
    (the tests below and benchmarks/train_rows.py)."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    def build():
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=use_buffers)

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            averaged.update_parameters(model)
            return loss.detach()
        return train_step, {"model": model, "opt": opt, "averaged": averaged}
    return build


@pytest.mark.parametrize("use_buffers", [False, True], ids=["parameters", "buffers"])
def test_averaged_model_updated_in_the_step(use_buffers):
    # ``AveragedModel.update_parameters`` reads its ``n_averaged`` buffer back twice after the
    # optimizer's effects, each a check with a resume point: at the first, the generators it
    # made (``self.parameters()``) have not started (the mock makes them again); at the
    # second, ``zip`` has left one suspended, which the frame never reads again (a dead local:
    # magpy.capture.monitor.liveness).  Before, "a generator made in the call is live": eager from
    # step 3.
    trace = check_compiled(averaged_model_build(use_buffers), _steps(8), fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.mock_runs == 6 and st.eager_runs == 0, st


def test_averaged_model_restarted_from_outside():
    # The program restarts the average (``n_averaged`` zeroed, as after a swap of the averaged
    # weights): the next step copies the parameters again, as eager does (its check fails
    # after the optimizer's effects: the rest of the step resumes from there), then steps
    # average again.
    def restart(state):
        state["averaged"].n_averaged.zero_()
    steps = _steps(4) + [after(restart, _batch, seed=20, expect=ANY)] + _steps(3)
    trace = check_compiled(averaged_model_build(), steps, fullgraph=False, observe=_observe)
    assert magpy.stats(trace.compiled).eager_runs == 0
