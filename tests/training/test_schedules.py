"""Training steps with learning-rate schedules, compiled whole (issue 30, item 1): what
changes every step is data, not a new record.

A scheduler stepped inside the compiled step changes Python numbers every call: its
``last_epoch`` and ``_step_count`` (ints read from the scheduler: lifted from their second
value, 1 included, ``magpy.graphs.dynamic.twins.Twins.int_symbol``), the lr it computes from them with
Python arithmetic (``float(step) / float(warmup)``, ``0.5 * (1 + math.cos(...))``: an
``IntFloat`` the mock computes again from each call's ints and writes into ``param_groups``
and ``_last_lr``) and the lr the optimizer reads back (a lifted float, a graph input).  A
branch on them (``if current_step < num_warmup_steps``) whose arms only compute floats from
them (``magpy.graphs.dynamic.arms``) is kept whole, as a conditional expression the mock evaluates
(``(float(1 + s0) / 4.0) if (1 + s0 < 4) else max(0.0, ...)``); any other branch is guarded
by the outcome it took (``s0 + 1 < 4``), not by the value: a record serves every step on that
side of the branch.

So a scheduled step records: once for the first step (no optimizer state, no ``.grad``),
then once for every other step of a linear warm-up, and once per side of each other branch
of its schedule (cosine warm-up, whose decay arm calls ``math.cos``: warm-up and decay;
StepLR: a step at which the lr changes and one at which it does not), and every other step
is a mock run.  Each test compares against the same loop run eagerly after every
step: loss, parameters, gradients, optimizer and scheduler state, bit for bit under backend
"eager".
"""
import functools
import io
import math

import pytest
import torch
import transformers
from torch import nn

import magpy
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
    isolated,
)

transformers.logging.set_verbosity_error()


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(state):
    return torch.randn(6, 8), torch.randn(6, 4)


def _observe(state):
    """Everything a step changes: parameters and their .grad, optimizer and scheduler state."""
    model, opt, sched = state["model"], state["opt"], state["sched"]
    return ([(name, t, t.grad) for name, t in model.named_parameters()], opt.state_dict(),
            opt.param_groups[0]["lr"], _scheduler_state(sched))


def _scheduler_state(sched) -> dict:
    # (LambdaLR's state_dict holds its lambdas: functions, one per copy)
    return {k: v for k, v in sched.state_dict().items() if k != "lr_lambdas"}


def _step_fn(model, opt, sched, loss_fn=nn.functional.mse_loss, autocast=False):
    def train_step(*batch):
        *inputs, target = batch
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(*inputs), target)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.detach()
    return train_step


def _build(make_sched, make_opt=lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01)):
    def build():
        model = _mlp()
        opt = make_opt(model.parameters())
        sched = make_sched(opt)
        return _step_fn(model, opt, sched), {"model": model, "opt": opt, "sched": sched}
    return build


def _run(build, n, batch=_batch, **options):
    steps = [Step(f"train step {i + 1}", batch, seed=i, expect=ANY) for i in range(n)]
    trace = check_compiled(build, steps, fullgraph=False, observe=_observe, **options)
    st = magpy.stats(trace.compiled)
    assert st.eager_runs == 0 and st.breaks == {}, st
    return st


def _linear_warmup(opt):
    return transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=4, num_training_steps=30)


def test_linear_warmup_records_per_branch_not_per_step():
    # 14 steps: the first step, then one record for the warm-up steps (2-4) and the decay
    # (5-14) both; the lr changes at every step.
    st = _run(_build(_linear_warmup), 14)
    assert st.records == 2 and st.monitor_runs == 2 and st.mock_runs == 12, st


def test_cosine_warmup():
    # (its decay arm calls math.cos: the branch keeps one record per side)
    def cosine(opt):
        return transformers.get_cosine_schedule_with_warmup(opt, num_warmup_steps=3, num_training_steps=20)
    st = _run(_build(cosine), 12)
    assert st.records == 3 and st.mock_runs == 9, st


def test_lambda_lr_with_a_python_lambda():
    # No branch: one record serves every step after the first.
    st = _run(_build(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** epoch)), 10)
    assert st.records == 2 and st.mock_runs == 8, st


def test_step_lr():
    # StepLR's ``last_epoch % step_size``: a record for the steps that change the lr and one
    # for those that keep it, whatever the epoch; before those, the lr is a guarded value
    # until it has changed once (steps 1 and 2: no state, then the first lr; step 3 the
    # next lr, from then on lifted), and steps 4-12 replay: 5 records for any number of steps.
    st = _run(_build(lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)), 12)
    assert st.records == 5 and st.mock_runs == 7, st


def test_scheduler_state_changed_from_outside():
    # The program moves the schedule between steps (resuming a run): the next steps follow
    # the new epoch exactly, from the same records where the branch side is the same.
    def skip_ahead(state):
        state["sched"].last_epoch += 5
    build = _build(_linear_warmup)
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(6)]
    steps += [after(skip_ahead, _batch, expect=MOCK), fresh(_batch, seed=9, expect=MOCK)]
    check_compiled(build, steps, fullgraph=False, observe=_observe, expect_records=2)


# -- schedules that move the momentum: OneCycleLR --------------------------------------------------

def _one_cycle(opt):
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=40)


def _sgd(p):
    return torch.optim.SGD(p, lr=1e-2, momentum=0.9)


@pytest.mark.parametrize("make_opt", [_build.__defaults__[0], _sgd], ids=["adamw-betas", "sgd-momentum"])
def test_one_cycle_moves_the_momentum_as_data(make_opt):
    # issue 30: OneCycleLR writes ``group["betas"] = (momentum, *rest)`` (Adam) or
    # ``group["momentum"]`` (SGD) every step, and appends its lr to a list.  Before, a record
    # per step (the betas guarded by value), then eager from step 9.  Now the first step,
    # then one record per side of its phase branch (warm-up, annealing): the momentum is a
    # graph input (betas[0] lifted item by item, the tuple rebuilt by the mock; SGD's
    # ``momentum != 0`` guarded by its outcome).  30 steps, 3 records.
    st = _run(_build(_one_cycle, make_opt), 30)
    assert st.records == 3 and st.mock_runs == 27, st


def test_one_cycle_momentum_changed_from_outside():
    # The program sets the momentum between steps: other betas are the same records' data; a
    # momentum of 0 takes SGD's other side of ``momentum != 0`` (a record of its own).
    def betas(state):
        group = state["opt"].param_groups[0]
        group["betas"] = (0.5, group["betas"][1])

    def longer(state):
        state["opt"].param_groups[0]["betas"] += (0.1,)

    build = _build(_one_cycle)
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(4)]
    steps += [after(betas, _batch, expect=MOCK), fresh(_batch, seed=7, expect=MOCK),
              after(longer, _batch, expect=ANY)]
    check_compiled(build, steps, fullgraph=False, observe=_observe)


def test_sgd_momentum_set_to_zero_from_outside():
    # ``momentum != 0`` was guarded by its outcome: a momentum of 0 records the other side.
    def no_momentum(state):
        state["opt"].param_groups[0]["max_momentum"] = 0.0
        state["opt"].param_groups[0]["base_momentum"] = 0.0

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=MONITOR if i < 2 else MOCK)
             for i in range(4)]
    # (then the schedule's bounds change too: lifted from the next step, the mock computes
    # the momentum from them and the step)
    steps += [after(no_momentum, _batch, expect=MONITOR), fresh(_batch, seed=7, expect=MONITOR)]
    steps += [fresh(_batch, seed=i, expect=MOCK) for i in range(8, 11)]
    check_compiled(_build(_one_cycle, _sgd), steps, fullgraph=False, observe=_observe)


@pytest.mark.parametrize("make_opt", [_build.__defaults__[0], _sgd], ids=["adamw", "sgd-momentum"])
def test_cosine_annealing_lr(make_opt):
    # CosineAnnealingLR's recursive form, ``(1 + cos(pi * e / T)) / (1 + cos(pi * (e - 1) / T))
    # * (group["lr"] - eta_min) + eta_min``: a float of the lifted epoch and the lifted lr the
    # mock computes (the divisor guarded nonzero).  Before, a record per step, then eager from
    # step 9; now the first step, the others, and the side of its restart branch
    # (``(e - 1 - T) % (2 * T) == 0``) taken at epoch 11.
    def cosine(opt):
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    st = _run(_build(cosine, make_opt), 30)
    assert st.records == 3 and st.mock_runs == 27, st


def test_cosine_annealing_warm_restarts():
    # T_mult=2: the restarts' epoch arithmetic (math.log and math.floor of the lifted epoch)
    # is written by torch's sympy printer as math.floor(...): the mock's namespace lacked
    # ``math`` (NameError at step 5 after effects; the training-loop fuzzer found it).
    def restarts(opt):
        return torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=1e-4)
    st = _run(_build(restarts, _sgd), 12)
    assert st.records <= 6, st


def _plateau_build(metric):
    def build():
        model = _mlp()
        opt = _sgd(model.parameters())
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step(metric(loss))
            return loss.detach()
        return train_step, {"model": model, "opt": opt, "sched": sched}
    return build


def test_reduce_lr_on_plateau_with_a_float_the_program_computes():
    # A metric that never improves: the lr halves every other step.  ``float(group["lr"])``,
    # ``max(old_lr * factor, min_lr)`` and ``old_lr - new_lr > eps`` on the lifted lr: the
    # mock computes the new lr, the guard keeps the comparisons' outcomes.  Before, a record
    # per lr (8, then eager from step 9); now 5 for any number of steps (the first, the
    # bad-epoch count 0 then 1 (0 stays a constant), the lr changed, then lifted).
    st = _run(_plateau_build(lambda loss: 1.0), 20)
    assert st.records == 5 and st.mock_runs == 15, st


def test_reduce_lr_on_plateau_with_the_loss():
    # ``sched.step(loss.item())``: ``a < best * rel_eps`` compares a value an eager step read
    # from the loss with the lifted ``best``; the comparison is an eager step given ``best *
    # rel_eps`` as the mock computes it from each call's ``best``, its outcome checked (a
    # failed check resumes the monitor there).  Before, ``best`` was guarded by value: a
    # record per improvement, eager from step 9.  Now 4 records for any number of steps.
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=None) for i in range(24)]
    trace = check_compiled(_plateau_build(lambda loss: loss.item()), steps, fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    assert st.records <= 4 and st.eager_runs == 0 and st.mock_runs >= 14, st


class _Best:
    def __init__(self):
        self.best = math.inf
        self.kept = 0


def _keep_if_better(tracker):
    def f(x):
        v = (x * x).sum().item()
        if v < tracker.best * 0.99:   # (an eager step's float against the lifted best)
            tracker.best = v
            tracker.kept += 1
        return x * 2
    return f


def test_eager_value_compared_with_a_lifted_float_held_in_state():
    def build():
        tracker = _Best()
        return _keep_if_better(tracker), {"tracker": tracker}

    def sized(scale):
        return lambda state: (torch.full((4,), scale),)
    # improving, not improving, improving again, then the best changed from outside
    scales = [3.0, 2.0, 1.5, 1.6, 1.7, 1.0, 1.2, 0.5, 0.6, 0.4]
    steps = [Step(f"call {i + 1}: scale {s}", sized(s), expect=ANY) for i, s in enumerate(scales)]

    def reset_best(state):
        state["tracker"].best = 100.0
    steps += [after(reset_best, sized(1.0), expect=ANY), Step("then worse", sized(2.0), expect=ANY)]
    trace = check_compiled(build, steps, fullgraph=False, observe=lambda s: vars(s["tracker"]))
    st = magpy.stats(trace.compiled)
    assert st.records <= 3 and st.eager_runs == 0 and st.mock_runs >= 6, st


@pytest.mark.slow
def test_one_cycle_inductor():
    st = _run(_build(_one_cycle), 12, backend="inductor", rtol=1e-4, atol=1e-5)
    assert st.records == 3 and st.mock_runs == 9, st


# -- the mechanism, on a plain function ------------------------------------------------------------

class _Counter:
    def __init__(self):
        self.step = 0


def _scaled(counter, scale_fn):
    def f(x):
        counter.step += 1
        return x * scale_fn(counter.step)
    return f


def _warmup_scale(step, *, warmup):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(step - warmup) / 20.0)))


def _counter_build(scale_fn):
    def build():
        counter = _Counter()
        return _scaled(counter, scale_fn), {"counter": counter}
    return build


def _x(state):
    return (torch.randn(5),)


def test_float_of_a_counter_is_a_graph_input():
    # ``x * scale`` with scale computed from the counter through a partial: one record per
    # side of the warm-up branch, then mock runs whose graph takes each call's scale.
    scale = functools.partial(_warmup_scale, warmup=4)
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(9)]
    trace = check_compiled(_counter_build(scale), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.records == 3 and st.mock_runs == 6 and st.graph_count == 3, st


def test_counter_set_from_outside_between_calls():
    scale = functools.partial(_warmup_scale, warmup=4)

    def rewind(state):
        state["counter"].step = 1

    def jump(state):
        state["counter"].step = 40

    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(6)]
    steps += [after(rewind, _x, expect=MOCK), after(jump, _x, expect=MOCK), fresh(_x, seed=3, expect=MOCK)]
    check_compiled(_counter_build(scale), steps, fullgraph=False)


def test_max_of_an_int_and_a_float_guards_its_choice():
    # ``max(0, f)`` gives the int 0 where f <= 0: the record keeps which one it chose.
    def scale(step):
        return max(0, 1.0 - float(step) / 4.0)
    # Records: the first call; calls 2-3 (the float chosen); call 4 on (0.0 > 0 is false: the
    # int 0).
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(8)]
    trace = check_compiled(_counter_build(scale), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.records == 3 and st.mock_runs == 5, st


def test_power_of_a_counter():
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(6)]
    trace = check_compiled(_counter_build(lambda step: 0.5 ** step), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.mock_runs == 4, st


@pytest.mark.parametrize("root", [lambda v: v ** 0.5, math.sqrt], ids=["power", "sqrt"])
def test_root_of_a_float_computed_from_a_counter(root):
    # RAdam's ``bias_correction2 ** 0.5`` and ``_dispatch_sqrt``: a root of a lifted value the
    # guard requires nonnegative is computed by the mock (was: the counter guarded, a record
    # a call).
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(6)]
    trace = check_compiled(_counter_build(lambda step: root(1 - 0.999 ** step)), steps, fullgraph=False)
    st = magpy.stats(trace.compiled)
    assert st.records == 2 and st.mock_runs == 4, st


def _piecewise(step):
    # (a warm-up and a linear decay, written as people write them)
    if step < 4:
        lr = step / 4
    else:
        lr = max(0.0, (30 - step) / (30 - 4))
    return lr


def _rewind_to(step):
    def rewind(state):
        state["counter"].step = step
    rewind.__name__ = f"rewind_to_{step}"
    return rewind


def test_branch_whose_arms_compute_floats_is_one_record():
    # issue 30: ``if step < W: lr = ... else: lr = ...`` on the lifted counter is kept whole
    # (magpy.graphs.dynamic.arms): the first call, then one record for both sides (calls 2-3 warm
    # up, 4-9 decay, then back to the warm-up and on past the end of the decay: max's 0.0).
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=MONITOR if i < 2 else MOCK) for i in range(9)]
    steps += [after(_rewind_to(1), _x, expect=MOCK), after(_rewind_to(40), _x, expect=MOCK),
              fresh(_x, seed=5, expect=MOCK)]
    trace = check_compiled(_counter_build(_piecewise), steps, fullgraph=False, expect_records=2)
    assert magpy.stats(trace.compiled).mock_runs == 10


def test_returning_arms_are_one_record():
    # The same with a return in each arm (transformers' schedules' form) through a partial.
    def scale(step, *, warmup, total):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(8)]
    steps += [after(_rewind_to(2), _x, expect=MOCK)]
    check_compiled(_counter_build(functools.partial(scale, warmup=3, total=10)), steps, fullgraph=False,
                   expect_records=2)


# (each program's own, in its isolated namespace)
OUT = LOG = STORED = None


def _printing(step):
    if step < 4:
        lr = step / 4
        print("warming up", lr, file=OUT)
    else:
        lr = max(0.0, (30 - step) / 26)
    return lr


def _appending(step):
    if step < 4:
        lr = step / 4
    else:
        lr = max(0.0, (30 - step) / 26)
        LOG.append(lr)
    return lr


def _storing(step):
    global STORED
    if step < 4:
        lr = step / 4
        STORED = lr
    else:
        lr = max(0.0, (30 - step) / 26)
    return lr


@pytest.mark.parametrize("scale", [_printing, _appending, _storing], ids=["print", "append", "global-store"])
def test_arm_with_an_effect_keeps_one_record_per_outcome(scale):
    # An arm that does more than compute a number (a print, a list append, a global store)
    # is no conditional expression: the outcome is guarded, one record per side, exact.
    def build():
        fn, ns = isolated(scale, OUT=io.StringIO(), LOG=[], STORED=None)
        counter = _Counter()
        return _scaled(counter, fn), {"counter": counter, "ns": ns}

    def observe(state):
        ns = state["ns"]
        return state["counter"].step, ns["OUT"].getvalue(), list(ns["LOG"]), ns["STORED"]
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(7)]
    steps += [after(_rewind_to(1), _x, expect=ANY), fresh(_x, seed=5, expect=ANY)]
    trace = check_compiled(build, steps, fullgraph=False, observe=observe)
    st = magpy.stats(trace.compiled)
    assert st.records >= 3


class _Config:
    def __init__(self):
        self.betas = (0.9, 0.999)
        self.momentum = 0.5


def _betas_build():
    # ``b1, b2 = cfg.betas`` read from outside, a branch on ``momentum``, a list appended to
    def build():
        cfg = _Config()

        def f(x):
            b1, b2 = cfg.betas
            scales = []
            scales.append(1 - b1)
            y = x * scales[0] + b2
            if cfg.momentum != 0:
                y = y * cfg.momentum
            return y
        return f, {"cfg": cfg}
    return build


def test_tuple_item_read_from_outside_is_a_graph_input():
    # The first float of a tuple changes between calls: lifted from its second value, the
    # guard checks the tuple's type and length and its other float by value.
    def set_betas(b1, b2=0.999):
        def mutate(state):
            state["cfg"].betas = (b1, b2)
        mutate.__name__ = f"betas_{b1}_{b2}"
        return mutate

    def set_momentum(m):
        def mutate(state):
            state["cfg"].momentum = m
        mutate.__name__ = f"momentum_{m}"
        return mutate

    def three(state):
        state["cfg"].betas = (0.2, 0.999, 0.5)
    steps = [first(_x), after(set_betas(0.8), _x, expect=MONITOR), after(set_betas(0.7), _x, expect=MOCK),
             fresh(_x, seed=3, expect=MOCK), after(set_betas(0.7, 0.9), _x, expect=MONITOR),
             after(set_betas(0.6), _x, expect=MOCK), after(three, _x, expect=ANY)]
    # The momentum: lifted from its second value, ``momentum != 0`` guarded by its outcome.
    steps += [after(set_betas(0.5), _x, expect=ANY), after(set_momentum(0.25), _x, expect=MONITOR),
              after(set_momentum(0.75), _x, expect=MOCK), after(set_momentum(0.0), _x, expect=MONITOR),
              after(set_momentum(0.3), _x, expect=MOCK), after(set_momentum(0.0), _x, expect=MOCK)]
    check_compiled(_betas_build(), steps, fullgraph=False, observe=lambda s: (s["cfg"].betas, s["cfg"].momentum))


def _grown_build():
    # A list the call appends lifted floats to, read back through another frame's slot.
    def build():
        counter = _Counter()

        def scales(lst):
            lst.append(0.9 ** counter.step)
            return len(lst)

        def f(x):
            counter.step += 1
            lst = [1.0]
            holder = {"lst": lst}
            scales(lst)
            return x * holder["lst"][-1] + x * lst[1]
        return f, {"counter": counter}
    return build


def test_list_grown_with_lifted_floats():
    # ``lst.append(0.9 ** step)`` in a callee: the caller's slot still holds the list's
    # shadows from before it grew, so its read guards the value (one record per step here),
    # never a stale constant.
    steps = [Step(f"call {i + 1}", _x, seed=i, expect=ANY) for i in range(6)]
    check_compiled(_grown_build(), steps, fullgraph=False, observe=lambda s: s["counter"].step)


def test_recompile_diagnosis_names_the_missing_optimizer_state():
    # The first step's guard requires the optimizer state to lack the parameters' entries;
    # its diagnosis (MAGPY_LOGS=recompiles) says so in words, Parameter reprs and all.
    fn, state = _build(_linear_warmup)()
    compiled = magpy.compile(fn, backend="eager")
    batch = _batch(state)
    compiled(*batch)
    record = compiled._magpy_cache.records[0]
    why = record.diagnose(batch, {})
    assert why is not None and "no diagnosis" not in why and "expected" in why, why


# -- the fine-tuning step: a transformers BERT classifier from a small config -----------------------

def _bert_build(autocast=False, warmup=10, total=100):
    def build():
        config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                         num_labels=3)
        model = transformers.BertForSequenceClassification(config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        sched = transformers.get_linear_schedule_with_warmup(opt, warmup, total)

        def loss_fn(out, labels):
            return nn.functional.cross_entropy(out.logits.float(), labels)
        return _step_fn(model, opt, sched, loss_fn, autocast), {"model": model, "opt": opt, "sched": sched}
    return build


def _tokens(state):
    return torch.randint(0, 100, (4, 16)), torch.randint(0, 3, (4,))


def test_bert_fine_tuning_short():
    # Warm-up over 3 steps: the first step, then the warm-up and the decay in one record.
    st = _run(_bert_build(warmup=3, total=20), 6, _tokens)
    assert st.records == 2 and st.mock_runs == 4, st


@pytest.mark.slow
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_bert_fine_tuning_100_steps(autocast):
    # issue 30: one recording per step before (8 records, then eager from step 9); then one per
    # side of the warm-up branch (3 records); now the first step and one for all others.
    st = _run(_bert_build(autocast), 100, _tokens)
    assert st.records == 2 and st.monitor_runs == 2 and st.mock_runs == 98, st


@pytest.mark.slow
def test_bert_fine_tuning_inductor():
    st = _run(_bert_build(warmup=3, total=20), 8, _tokens, backend="inductor", rtol=1e-4, atol=1e-5)
    assert st.records == 2 and st.mock_runs == 6, st


def test_first_step_records_then_mocks():
    # (the harness's expectations, step by step, for the short linear warm-up)
    # (the scheduler steps at the end of each step: step i computes the lr of epoch i)
    steps = [Step("step 1: no optimizer state", _batch, seed=0, expect=MONITOR),
             Step("step 2: warm-up", _batch, seed=1, expect=MONITOR),
             Step("step 3: warm-up", _batch, seed=2, expect=MOCK),
             Step("step 4: decay", _batch, seed=3, expect=MOCK)]
    steps += [Step(f"step {i}: decay", _batch, seed=i, expect=MOCK) for i in range(5, 10)]
    check_compiled(_build(_linear_warmup), steps, fullgraph=False, observe=_observe, expect_records=2)


def _logging_build(logged, make_sched=_linear_warmup):
    def build():
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = make_sched(opt)
        log = []

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            if loss.item() > 1.0:
                log.append(logged(sched))
            return loss.detach()
        return train_step, {"model": model, "opt": opt, "sched": sched, "log": log}
    return build


def test_scheduled_step_with_a_break_after_the_scheduler():
    # ``loss.item()`` after the scheduler stepped is a break: the mock writes the schedule's
    # state from the call's ints before the eager step, and a branch on the loss resumes the
    # monitor from there: the continuation writes the state of its point, ``_last_lr`` (a
    # new list, which the point copies) computed from the call's epoch too.
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(12)]
    trace = check_compiled(_logging_build(lambda sched: "high loss"), steps, fullgraph=False,
                           observe=lambda s: (_observe(s), s["log"]))
    assert magpy.stats(trace.compiled).eager_runs == 0


@pytest.mark.parametrize("make_sched",
                         [_linear_warmup, lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.7)],
                         ids=["linear-warmup", "step-lr"])
def test_scheduled_lr_logged_through_a_list_is_guarded(make_sched):
    # ``log.append(sched.get_last_lr()[0])``: the lr reaches the log through the scheduler's
    # list, where its shadow does not follow; the mock would append the recorded lr (StepLR's
    # lifted ``lr * gamma`` did: a stale lr in the log), so the record guards it by value
    # instead (exact, one record per lr).
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(7)]
    check_compiled(_logging_build(lambda sched: sched.get_last_lr()[0], make_sched), steps, fullgraph=False,
                   observe=lambda s: (_observe(s), s["log"]))
