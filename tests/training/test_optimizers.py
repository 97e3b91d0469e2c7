"""Foreach and fused optimizers in a compiled training step (issue 30, item 1): the learning
rate a scheduler changes every step is data, not a new record, whichever implementation
of the optimizer runs.

The for-loop optimizers hand the lr to per-tensor arithmetic (``param.mul_(1 - lr * wd)``,
``param.add_(grad, alpha=-lr)``), where a lifted float is a 0-d tensor graph input.  The
foreach ones hand it to ``torch._foreach_*`` operations (``_foreach_mul_(params, 1 - lr *
wd)``, ``_foreach_add_(params, grads, alpha=-lr)``, ``_foreach_addcdiv_(..., value=-lr)``),
the fused ones to ``torch._fused_adamw_(..., lr=lr)``: there it is a 0-d tensor input too
(``magpy.graphs.operands._operand_dtype``, ``_NUMBER_KEYWORDS``), where it was a value the guard
checked, a record per step until the cache limit, then eager.  Before that, the optimizer's
``torch.is_tensor(group["lr"])`` looks at the type only (``annotations.TYPE_READERS``).

Each optimizer test compares against the same loop run eagerly after every step (loss,
parameters, gradients, optimizer and scheduler state, lr), bit for bit under backend "eager";
the records are those of the for-loop optimizer (tests/training/test_schedules.py).
"""
import warnings

import pytest
import torch

import magpy
from magpy.training import fused_steps
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    Step,
    after,
    check_compiled,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture: magpy.reset() before each test
)
from tests.training.test_schedules import _batch, _build, _linear_warmup, _observe, _run, _step_fn

OPTIMIZERS = {
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01, fused=True),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "sgd-momentum-foreach": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, foreach=True),
    "sgd-momentum-fused": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=True),
    "rmsprop-foreach": lambda p: torch.optim.RMSprop(p, lr=1e-2, foreach=True),   # (value=-lr)
}


def _lambda_lr(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** epoch)


@pytest.mark.parametrize("make_opt", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_lambda_lr(make_opt):
    # The first step (no optimizer state), then one record for every later step.
    st = _run(_build(_lambda_lr, make_opt), 12)
    assert st.records == 2 and st.mock_runs == 10, st


@pytest.mark.parametrize("make_opt", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_linear_warmup(make_opt):
    # As the for-loop AdamW: the first step, then the warm-up and the decay in one record.
    st = _run(_build(_linear_warmup, make_opt), 14)
    assert st.records == 2 and st.monitor_runs == 2 and st.mock_runs == 12, st


@pytest.mark.parametrize("make_opt", [OPTIMIZERS["adamw-foreach"], OPTIMIZERS["adamw-fused"]],
                         ids=["foreach", "fused"])
def test_lr_and_schedule_changed_from_outside(make_opt):
    # The program sets the lr itself, then moves the schedule (resuming a run): the next
    # steps take the new numbers from the same record.
    def set_lr(state):
        state["opt"].param_groups[0]["lr"] = 0.05

    def skip_ahead(state):
        state["sched"].last_epoch += 5
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=ANY) for i in range(4)]
    steps += [after(set_lr, _batch, expect=MOCK), after(skip_ahead, _batch, expect=MOCK),
              fresh(_batch, seed=9, expect=MOCK)]
    check_compiled(_build(_linear_warmup, make_opt), steps, fullgraph=False, observe=_observe,
                   expect_records=2)


@pytest.mark.filterwarnings("error::magpy.BackendFailedWarning")
@pytest.mark.parametrize("name", ["adamw-foreach", "sgd-momentum-foreach"])
def test_inductor(name):
    # Compiled, not the eager twin: Adam's stacked step sizes (``_foreach_addcdiv_`` given a
    # tensor, which torch cannot trace) are rewritten for compiling backends
    # (``training.tensor_scalar_lists``).
    st = _run(_build(_lambda_lr, OPTIMIZERS[name]), 5, backend="inductor", rtol=1e-4, atol=1e-5)
    assert st.records == 2 and st.mock_runs == 3, st


@pytest.mark.slow
def test_inductor_fused(monkeypatch):
    # torch 2.13 has no meta kernel for ``_fused_adamw_.tensor_lr``: Inductor compiles the
    # kernel's arithmetic instead (training.fused_steps); before, the step's graph failed to
    # compile and ran as its eager twin, with a BackendFailedWarning.
    monkeypatch.setattr(magpy.config, "background_compile", False)
    monkeypatch.setattr(magpy.config, "autopilot", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        st = _run(_build(_lambda_lr, OPTIMIZERS["adamw-fused"]), 5, backend="inductor", rtol=1e-4, atol=1e-5)
    assert st.records == 2 and st.mock_runs == 3, st
    assert not [w for w in caught if issubclass(w.category, magpy.BackendFailedWarning)]


@pytest.mark.parametrize("lr_tensor", [False, True], ids=["float lr", "tensor lr"])
@pytest.mark.parametrize("options", [
    {"decoupled": True, "weight_decay": 0.01},
    {"decoupled": False, "weight_decay": 0.1, "amsgrad": True},
    {"decoupled": True, "weight_decay": 0.0, "maximize": True, "amsgrad": True},
    {"decoupled": True, "weight_decay": 0.01, "scaled": 1.0},    # GradScaler's found inf: no update
    {"decoupled": False, "weight_decay": 0.01, "scaled": 0.0},
], ids=["adamw", "adam-amsgrad", "maximize", "found-inf", "unscaled"])
def test_fused_adam_as_tensor_ops_does_what_the_kernel_does(options, lr_tensor):
    """``fused_steps.adam_step`` against ``torch._fused_adam(w)_`` itself, on every option the
    kernel takes (a GradScaler's scale and found-inf flag, amsgrad, maximize, both weight
    decays, a float or tensor learning rate): the same state within rounding."""
    options = dict(options)
    decoupled, scaled = options.pop("decoupled"), options.pop("scaled", None)
    shapes = [(4, 3), (5,), ()]

    def state():
        g = torch.Generator().manual_seed(1)
        lists = [[torch.randn(s, generator=g) for s in shapes] for _ in range(5)]
        lists[3] = [t.abs() for t in lists[3]]   # exp_avg_sqs
        lists[4] = [t.abs() for t in lists[4]] if options.get("amsgrad") else []   # max_exp_avg_sqs
        return lists + [[torch.tensor(float(k + 3)) for k in range(len(shapes))]]
    kwargs = dict(options, lr=torch.tensor(0.01) if lr_tensor else 0.01, beta1=0.9, beta2=0.999, eps=1e-8,
                  amsgrad=options.get("amsgrad", False), maximize=options.get("maximize", False))
    if scaled is not None:
        kwargs.update(grad_scale=torch.tensor(256.0), found_inf=torch.tensor(scaled))
    kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
    want, got = state(), state()
    kernel(*want, **kwargs)
    fused_steps.adam_step(*got, **kwargs, decoupled=decoupled)
    for a, b in zip(want, got):
        for x, y in zip(a, b):
            torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-7)
    if scaled == 1.0:   # (the state did not move: a check that cannot pass by accident)
        assert all(torch.equal(x, y) for x, y in zip(want[0], state()[0]))


# -- the mechanism, on a plain function ------------------------------------------------------------

def _mul(xs, ys, zs, lr):
    return torch._foreach_mul_(xs, 1 - lr * 0.01)


def _div(xs, ys, zs, lr):
    return torch._foreach_div_(xs, lr)


def _add(xs, ys, zs, lr):
    return torch._foreach_add_(xs, lr)


def _mul_out_of_place(xs, ys, zs, lr):
    return torch._foreach_mul(xs, lr)


def _add_alpha(xs, ys, zs, lr):
    return torch._foreach_add_(xs, ys, alpha=-lr)


def _sub_alpha(xs, ys, zs, lr):
    return torch._foreach_sub_(xs, ys, alpha=lr)


def _addcdiv_value(xs, ys, zs, lr):
    return torch._foreach_addcdiv_(xs, ys, zs, value=-lr)


def _addcmul_value(xs, ys, zs, lr):
    return torch._foreach_addcmul_(xs, ys, zs, value=lr)


OPS = [_mul, _div, _add, _mul_out_of_place, _add_alpha, _sub_alpha, _addcdiv_value, _addcmul_value]
# (tensor shapes, dtype): 0-d tensors among others compute with the lr rounded to their
# dtype, as with the number; half precision keeps the lr a guarded value (_operand_dtype).
LISTS = {"float32": ([(7,), (3, 5)], torch.float32), "float32-with-0d": ([(), (4,)], torch.float32),
         "float64-0d": ([(), ()], torch.float64)}
HALF = {"bfloat16": ([(7,), ()], torch.bfloat16), "float16": ([(6,)], torch.float16)}


def _lists_build(op, shapes, dtype):
    def build():
        group = {"lr": 0.1}
        xs = [torch.randn(s).to(dtype) for s in shapes]

        def step(ys, zs):
            lr = group["lr"]
            if torch.is_tensor(lr):   # (an optimizer's check: the type only)
                raise TypeError("lr must be a float")
            # (the lists' items read as an optimizer reads them: the graph's inputs)
            return op([x for x in xs], [y for y in ys], [z for z in zs], lr)
        return step, {"group": group, "xs": xs}
    return build


def _operands(shapes, dtype):
    def args(state):
        return ([torch.randn(s).to(dtype) for s in shapes], [torch.rand(s).to(dtype) + 0.5 for s in shapes])
    return args


def _lr_steps(args, calls: int, expect_later) -> list:
    def set_lr(i):
        def mutate(state):
            state["group"]["lr"] = 0.1 * 0.7 ** i
        mutate.__name__ = f"lr_{i}"
        return mutate
    return [Step("call 1", args, seed=0, expect=MONITOR)] + [
        after(set_lr(i), args, seed=i, expect=MONITOR if i == 1 else expect_later) for i in range(1, calls)]


@pytest.mark.parametrize("lists", LISTS.values(), ids=LISTS.keys())
@pytest.mark.parametrize("op", OPS, ids=[op.__name__.strip("_") for op in OPS])
def test_lifted_lr_of_a_foreach_operation_is_a_graph_input(op, lists):
    # The first call, the second (its lr lifted), then mock runs with each call's lr.
    shapes, dtype = lists
    steps = _lr_steps(_operands(shapes, dtype), 6, MOCK)
    steps.append(fresh(_operands(shapes, dtype), seed=7, expect=MOCK))
    check_compiled(_lists_build(op, shapes, dtype), steps, expect_records=2)


@pytest.mark.parametrize("lists", HALF.values(), ids=HALF.keys())
@pytest.mark.parametrize("op", OPS, ids=[op.__name__.strip("_") for op in OPS])
def test_half_precision_lists_stay_exact(op, lists):
    # (``_foreach_mul_``'s tensor overload rounds the lr to half first, its number overload
    # does not: the lr is a value the guard checks there)
    shapes, dtype = lists
    check_compiled(_lists_build(op, shapes, dtype), _lr_steps(_operands(shapes, dtype), 4, ANY))


@pytest.mark.filterwarnings("error::magpy.BackendFailedWarning")
def test_step_sizes_tensor_under_inductor():
    # ``torch._foreach_addcdiv_(xs, t1s, t2s, sizes)`` with ``sizes`` a 1-D tensor (foreach
    # Adam's stacked step sizes), which torch cannot trace: rewritten for Inductor as a
    # foreach multiply, divide and add.
    def build():
        xs = [torch.randn(5), torch.randn(2, 3)]

        def step(ys, zs, sizes):
            return torch._foreach_addcdiv_([x for x in xs], [y for y in ys], [z for z in zs], sizes)
        return step, {"xs": xs}

    def args(state):
        ys, zs = _operands([(5,), (2, 3)], torch.float32)(state)
        return ys, zs, torch.randn(2, dtype=torch.float64)
    steps = [Step("call 1", args, seed=0, expect=MONITOR), fresh(args, seed=1, expect=MOCK)]
    check_compiled(build, steps, backend="inductor", rtol=1e-5, atol=1e-6)


# Numbers an eager step computed (from a step count's ``.item()``, as NAdam's and Adamax's
# updates are) given to a number keyword or a foreach operation's scalar list: graph inputs,
# not values the mock checks (a failed check and a continuation on every call).

def _keyword_from_a_read(counts, xs, ys, zs):
    mu = 0.9 * (1.0 - 0.5 * 0.96 ** (counts[0].item() * 0.004))
    torch._foreach_add_(counts, 1.0)
    return xs[0].addcdiv_(ys[0], zs[0], value=-0.01 * (1.0 - mu))


def _scalar_list_from_reads(counts, xs, ys, zs):
    sizes = [-0.01 / (1 - 0.9 ** c.item()) for c in counts]
    torch._foreach_add_(counts, 1.0)
    return torch._foreach_addcdiv_(xs, ys, zs, sizes)


def _tensor_from_a_read(counts, xs, ys, zs):
    eta = torch.as_tensor(0.01 / ((1 + 1e-4 * 0.01 * counts[0].item()) ** 0.75))   # (ASGD's)
    torch._foreach_add_(counts, 1.0)
    return xs[0].sub_(ys[0] * eta)


def _scalars_each_from_reads(counts, xs, ys, zs):
    mus = [0.9 * (1.0 - 0.5 * 0.96 ** (c.item() * 0.004)) for c in counts]   # (NAdam's foreach)
    torch._foreach_add_(counts, 1.0)
    return torch._foreach_mul_(xs, mus)


@pytest.mark.parametrize("op", [_keyword_from_a_read, _scalar_list_from_reads, _tensor_from_a_read,
                                _scalars_each_from_reads],
                         ids=["keyword", "scalar-list", "as-tensor", "scalar-list-each"])
def test_numbers_computed_from_reads_are_graph_inputs(op):
    def build():
        counts = [torch.tensor(1.0), torch.tensor(1.0)]
        xs = [torch.randn(5), torch.randn(2, 3)]

        def step(ys, zs):
            # (the lists' items read as an optimizer reads them: the graph's inputs)
            return op([c for c in counts], [x for x in xs], [y for y in ys], [z for z in zs])
        return step, {"counts": counts, "xs": xs}
    args = _operands([(5,), (2, 3)], torch.float32)
    steps = [Step("call 1", args, seed=0, expect=MONITOR)]
    steps += [fresh(args, seed=i, expect=MOCK) for i in range(1, 6)]
    check_compiled(build, steps, fullgraph=False, expect_records=1)


# -- every optimizer torch has, for-loop and foreach: exact, whatever it records --------------

class _WithScale(torch.nn.Module):
    """A linear layer and a 0-d parameter (a learned temperature): optimizer state of 0-d
    tensors meets 0-d numbers, where float64 arithmetic rounds otherwise than eager's float32."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.scale = torch.nn.Parameter(torch.tensor(1.3))

    def forward(self, x):
        return self.lin(x) * self.scale


EVERY_OPTIMIZER = ("Adam", "AdamW", "NAdam", "Adamax", "RAdam", "ASGD", "Adagrad", "Adadelta", "RMSprop",
                   "Rprop", "SGD")
# The first step, then one record: those whose update takes the step count as data
# (magpy.training.train_steps._TENSOR_STEP) or has none, and those that read it as eager does (an eager
# step) where what they compute from it reaches the graph as inputs.
def every_optimizer_build(name: str, foreach: bool):
    """The build of the every-optimizer tests (and benchmarks/train_rows.py): a linear layer
    and a 0-d parameter, ``torch.optim.<name>``, LambdaLR stepped inside the step."""
    def build():
        model = _WithScale()
        opt = getattr(torch.optim, name)(model.parameters(), lr=1e-2, foreach=foreach)
        sched = _lambda_lr(opt)
        return _step_fn(model, opt, sched), {"model": model, "opt": opt, "sched": sched}
    return build


TWO_RECORDS = {(name, foreach) for name in ("Adam", "AdamW", "Adagrad", "Adadelta", "RMSprop", "Rprop", "SGD",
                                             "Adamax", "ASGD", "NAdam") for foreach in (False, True)}
# RAdam's steps turn at ``rho_t > 5`` (at step 6 here): two continuations from that check
# (the second lifts ``rho_t``: the for-loop step's cells that hold it, the foreach step's
# comprehension's iterator's floats still to come), then mock runs.  The foreach step took a
# continuation a step before its iterator's floats were lifted.
CONTINUED = {("RAdam", False), ("RAdam", True)}


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("name", EVERY_OPTIMIZER)
def test_every_optimizer_is_exact(name, foreach):
    # NAdam's ``mu_product *= mu`` (0-d state times the step's float) differed in the last bit
    # with the step count as a float64 tensor; its foreach and Adamax's foreach raised or
    # took another overload with lists of tensors (magpy.training.train_steps._step_value).
    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=None) for i in range(12)]
    trace = check_compiled(every_optimizer_build(name, foreach), steps, fullgraph=False, observe=_observe)
    st = magpy.stats(trace.compiled)
    # (RMSprop's for-loop ``addcdiv_(..., value=-lr)``: operands._NUMBER_KEYWORDS)
    if (name, foreach) in TWO_RECORDS:
        assert st.records == 2 and st.mock_runs == 10, st
    if (name, foreach) in CONTINUED:
        assert st.records == 2 and st.monitor_runs == 4 and st.mock_runs == 8, st


@pytest.mark.slow
@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("name", EVERY_OPTIMIZER)
def test_every_optimizer_under_inductor(name, foreach, monkeypatch):
    # The default backend, every graph compiled in the foreground and run compiled (the
    # autopilot off: no eager twin stands in): results, state and grad mode as eager's within
    # rounding, and as many records as with backend "eager".  Adamax's for-loop step failed
    # at its first compiled call (its update graph, which starts under no_grad, was compiled
    # with grad on: record._attempt compiles under the graph's start modes now).
    monkeypatch.setattr(magpy.config, "background_compile", False)
    monkeypatch.setattr(magpy.config, "autopilot", False)

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=None) for i in range(12)]
    trace = check_compiled(every_optimizer_build(name, foreach), steps, fullgraph=False, backend="inductor",
                           rtol=1e-4, atol=1e-5, observe=lambda s: (_observe(s), torch.is_grad_enabled()))
    st = magpy.stats(trace.compiled)
    if (name, foreach) in TWO_RECORDS:
        assert st.records == 2 and st.mock_runs == 10, st
    if (name, foreach) in CONTINUED:
        assert st.records == 2 and st.monitor_runs == 4 and st.mock_runs == 8, st


def test_graphs_are_compiled_under_the_modes_they_start_under():
    # An optimizer's update graph starts under no_grad (its step's decorator); the compile
    # runs after the call, under the caller's grad mode: the backend must trace it under
    # no_grad, as it runs (Inductor compiled Adamax's update as a training graph, and failed).
    seen = []

    def backend(gm, example_inputs):
        seen.append(torch.is_grad_enabled())
        return gm.forward

    steps = [Step(f"train step {i + 1}", _batch, seed=i, expect=None) for i in range(3)]
    check_compiled(every_optimizer_build("Adamax", False), steps, fullgraph=False, observe=_observe,
                   backend=backend)
    assert True in seen and False in seen, seen   # the forward with grad, the updates without
