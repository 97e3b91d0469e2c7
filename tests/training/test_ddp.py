"""DistributedDataParallel with magpy (issue 13): two processes, gloo on loopback.

The tests spawn ``WORLD`` ranks (``torch.multiprocessing``, a free port on 127.0.0.1, a hard
time limit: a hang fails the test); the backend-"eager" ones share one launch.  Every rank
trains two twins in one process group, built from the same seed: an eager DDP model, and the
same model with magpy in one of three places:

- ``inside``: ``DDP(magpy.compile(model))``: DDP runs eagerly around the compiled module;
- ``outside``: ``magpy.compile(DDP(model))``: DDP's own forward is monitored; its reducer
  calls (``prepare_for_forward``, ``_rebuild_buckets``, ``prepare_for_backward``, the
  logger's) are eager steps between graphs;
- ``step``: ``magpy.compile(train_step)`` with ``zero_grad``, the DDP forward, the loss,
  ``loss.backward()`` (an eager step: the real autograd engine, so DDP's gradient all-reduce
  hooks fire in it) and ``opt.step()``;
- ``plain``: the same step of a model DDP does not wrap, in the process group (every script
  ``torchrun`` launches has one: the backward is an eager step all the same).

Each rank draws different data (seeded by rank), so equal gradients on both ranks are the
all-reduce's work.  The ranks report, after every step, both twins' losses, parameters,
gradients, buffers and optimizer state, ``magpy.stats`` of the compiled callable and how
often the reducer called the DDP communication hook (a counting all-reduce hook, where
registered) and DDP's own flags; the tests compare them here: bit-exact with backend "eager",
``allclose`` with "inductor".  A last scenario calls a collective itself.
"""
from __future__ import annotations

import copy
import datetime
import os
import socket
import tempfile
import time
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import magpy
from tests.harness.compile_harness import STAT_FIELDS, RehitCheck, close, stats_snapshot
from tests.harness.differential import same

WORLD = 2
# Seconds for one launch of the ranks, compilation included (Inductor compiles 9 graphs per
# rank; with a cold cache on 2 busy cores that alone takes a minute).
TIMEOUT = {"eager": 120.0, "inductor": 300.0}
STEPS = 5
ZERO_GRAD_STEPS = 20

# magpy.stats deltas of one call (see _kind).
RECORD, CONTINUATION, MOCK = "record", "continuation", "mock"
# The reducer calls DDP's forward makes: each an eager step of a compiled DDP forward.
REDUCER_STEPS = {f"call to impure native torch._C._distributed_c10d.{name}"
                 for name in ("set_runtime_stats_and_log", "prepare_for_forward", "_rebuild_buckets",
                              "prepare_for_backward")}
BACKWARD = ("loss.backward() runs eagerly between graphs (a process group is initialized: DDP's reducer "
            "hooks the gradients in the engine)")


# ----------------------------------------------------------------------------- the ranks

def _launch(scenarios: list[tuple], backend: str = "eager", table: dict | None = None, world: int = WORLD,
            timeout: float | None = None) -> list[dict]:
    """Run ``scenarios`` (``(name, *arguments)``: ``table[name before any "["](rank, backend,
    *arguments)``, this module's SCENARIOS unless given, tests/training/test_fsdp.py has its own) on
    ``world`` spawned ranks; each rank's reports, by scenario name.  Fails the test if they
    take longer than ``timeout`` (TIMEOUT of the backend unless given)."""
    timeout = TIMEOUT[backend] if timeout is None else timeout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        ranks = mp.start_processes(_rank, args=(port, out, scenarios, backend, world, table or SCENARIOS),
                                   nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ranks.join(timeout=max(deadline - time.monotonic(), 0.0)):
                if time.monotonic() >= deadline:
                    pytest.fail(f"the {world} ranks did not finish within {timeout:.0f} s")
        finally:
            for p in ranks.processes:
                if p.is_alive():
                    p.kill()
        return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(world)]


def _rank(rank: int, port: int, out: str, scenarios: list[tuple], backend: str, world: int,
          table: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", magpy.GraphBreakWarning)
    magpy.config.verify_fast_guard = True   # as the suite runs (tests/conftest.py)
    # A collective that waits for a rank that is gone raises instead of blocking.
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        reports = {}
        for name, *spec in scenarios:
            magpy.reset()
            with RehitCheck() as rehit:
                reports[name] = table[name.split("[")[0]](rank, backend, *spec)
            reports[name]["rehit"] = rehit.problems
        torch.save(reports, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- models and twins

def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _convnet() -> nn.Module:
    # BatchNorm's running statistics are buffers DDP broadcasts from rank 0 before each forward.
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 4))


ARCHS = {"mlp": (_mlp, (6, 8)), "convnet": (_convnet, (4, 3, 8, 8))}
OPTIMS = {"sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
          "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)}


def _counting_allreduce(calls: list, bucket):
    # DDP's default all-reduce (average over ranks), counted.
    calls[0] += 1
    return default_hooks.allreduce_hook(None, bucket)


class _Twin:
    """A model, its DDP wrapper and optimizer, and the train step, with magpy placed by
    ``mode`` (module docstring; "eager": nowhere, "eager-plain": nowhere and no DDP).
    ``compiled``: what magpy.stats reads."""

    def __init__(self, mode: str, arch: str, optim: str, count_hooks: bool, backend: str,
                 zero_grad: str = "first"):
        torch.manual_seed(0)
        self.model = ARCHS[arch][0]()
        inner = magpy.compile(self.model, backend=backend) if mode == "inside" else self.model
        self.ddp = ddp = inner if mode in ("plain", "eager-plain") else DDP(inner)
        self.hook_calls = [0]
        if count_hooks:
            ddp.register_comm_hook(self.hook_calls, _counting_allreduce)
        forward = magpy.compile(ddp, backend=backend) if mode == "outside" else ddp
        self.opt = opt = OPTIMS[optim](self.model.parameters())
        first, last = zero_grad_calls(zero_grad, opt, ddp)

        def train_step(x, y):
            first()
            loss = nn.functional.mse_loss(forward(x), y)
            loss.backward()
            opt.step()
            last()
            return loss

        self.step = magpy.compile(train_step, backend=backend) if mode in ("step", "plain") else train_step
        self.compiled = {"inside": inner, "outside": forward, "step": self.step, "plain": self.step}.get(mode)

    def state(self) -> dict:
        """Everything a train step changes, copied."""
        return {"params": [(n, p.detach().clone(), None if p.grad is None else p.grad.clone())
                           for n, p in self.model.named_parameters()],
                "buffers": [(n, b.clone()) for n, b in self.model.named_buffers()],
                "opt": copy.deepcopy(self.opt.state_dict()), "hook_calls": self.hook_calls[0],
                # DDP's own flags (``_lazy_init_ran``, ``require_forward_param_sync`` ...)
                "ddp": {k: v for k, v in vars(self.ddp).items() if type(v) in (bool, int, float, str)}}


def zero_grad_calls(where: str, opt, model) -> tuple:
    """(what a train step calls first, what it calls last) to clear the gradients ``where``
    (ZERO_GRAD's names): the places training loops put ``zero_grad``."""
    clear = {"first": opt.zero_grad, "last": opt.zero_grad, "module last": model.zero_grad,
             "to zeros last": lambda: opt.zero_grad(set_to_none=False)}[where]
    return (clear, _nothing) if where == "first" else (_nothing, clear)


def _nothing():
    pass


# Where a train step clears the gradients (issue 41: a step with it last trained a wrong model
# from its fourth call in any process with a process group).
ZERO_GRAD = ("first", "last", "module last", "to zeros last")


def _train(rank: int, backend: str, mode: str, arch: str, optim: str, count_hooks: bool,
           zero_grad: str = "first", n: int = STEPS) -> dict:
    eager = _Twin("eager-plain" if mode == "plain" else "eager", arch, optim, count_hooks, backend, zero_grad)
    compiled = _Twin(mode, arch, optim, count_hooks, backend, zero_grad)
    data = torch.Generator().manual_seed(100 + rank)
    steps = []
    for _ in range(n):
        x, y = torch.randn(ARCHS[arch][1], generator=data), torch.randn(ARCHS[arch][1][0], 4, generator=data)
        loss_e = eager.step(x.clone(), y.clone()).detach()
        loss_c = compiled.step(x.clone(), y.clone()).detach()
        steps.append({"eager": (loss_e, eager.state()), "compiled": (loss_c, compiled.state()),
                      "stats": stats_snapshot(compiled.compiled)})
    return _report(steps, compiled.compiled)


def _report(steps: list[dict], compiled) -> dict:
    stats = magpy.stats(compiled)
    return {"steps": steps, "graphs_per_call": stats.graphs_per_call, "breaks": stats.breaks,
            "break_reasons": stats.break_reasons}


def _sync_and_branch(x, total):
    dist.all_reduce(total)   # in place: the sum over the ranks
    if bool((total > 20).all()):
        return x * 2
    return x - 1


def _collective(rank: int, backend: str) -> dict:
    # A collective the program calls itself is an effect: it runs once per call, in program
    # order, also when a check after it fails (the call resumes there, it is not run again).
    compiled = magpy.compile(_sync_and_branch, backend=backend)
    total_e, total_c = torch.full((3,), rank + 1.0), torch.full((3,), rank + 1.0)
    steps = []
    for i in range(STEPS):
        x = torch.full((3,), float(i))
        out_e, out_c = _sync_and_branch(x, total_e), compiled(x, total_c)
        steps.append({"eager": (out_e, total_e.clone()), "compiled": (out_c, total_c.clone()),
                      "stats": stats_snapshot(compiled)})
    return _report(steps, compiled)


SCENARIOS = {"train": _train, "collective": _collective}


# ----------------------------------------------------------------------------- checks

def _kind(before: dict, after: dict) -> str:
    """What a call was, from its magpy.stats deltas."""
    d = {f: after[f] - before.get(f, 0) for f in STAT_FIELDS}
    if d["eager_runs"]:
        return "eager"
    if d["monitor_runs"] == 1 and d["mock_runs"] == 0:
        return RECORD if d["records"] == 1 else CONTINUATION   # (a continuation adds no record)
    if d == {**{f: 0 for f in STAT_FIELDS}, "mock_runs": 1}:
        return MOCK
    return f"unexpected stats delta {d}"


def _check(reports: list[dict], kinds: list[str], exact: bool = True) -> None:
    """Every rank: the compiled twin equal to the eager twin after every step (within float
    tolerance unless ``exact``), each call of the kind expected, no silent re-recording."""
    equal = same if exact else (lambda a, b: close(a, b, rtol=1e-4, atol=1e-5))
    for rank, report in enumerate(reports):
        assert report["rehit"] == [], report["rehit"]
        before = {}
        for i, step in enumerate(report["steps"]):
            assert equal(step["eager"], step["compiled"]), (
                f"rank {rank}, step {i + 1}: the compiled twin differs from the eager one\n"
                f"  eager:    {step['eager']}\n  compiled: {step['compiled']}")
            got = _kind(before, step["stats"])
            assert got == kinds[i], (f"rank {rank}, step {i + 1}: a {got} call, expected {kinds[i]}; "
                                     f"break_reasons={report['break_reasons']}")
            before = step["stats"]


def _check_all_reduced(reports: list[dict], hooks: bool) -> None:
    """After every step every rank holds rank 0's (averaged) gradients and parameters, though
    their losses differ: the all-reduce ran in the compiled twin (``hooks``: it called the
    counting communication hook in every step; _check compared the counts with eager's)."""
    for i, (r0, *others) in enumerate(zip(*(r["steps"] for r in reports))):
        loss0, state0 = r0["compiled"]
        for r1 in others:
            loss1, state1 = r1["compiled"]
            assert not torch.equal(loss0, loss1), f"step {i + 1}: two ranks trained on the same data"
            for (name, p0, g0), (_, p1, g1) in zip(state0["params"], state1["params"]):
                assert same(g0, g1) and torch.equal(p0, p1), f"step {i + 1}: {name} differs across ranks"
    if hooks:
        for r in reports:
            calls = [0] + [s["compiled"][1]["hook_calls"] for s in r["steps"]]
            assert all(a < b for a, b in zip(calls, calls[1:])), f"communication hook calls: {calls[1:]}"


@pytest.fixture(scope="module")
def eager_backend_reports():
    """One launch of the ranks for every backend-"eager" scenario (startup is most of a
    scenario's cost)."""
    return _launch([
        ("train[inside]", "inside", "mlp", "sgd", True),
        ("train[outside]", "outside", "mlp", "sgd", True),
        ("train[step]", "step", "mlp", "sgd", True),
        ("train[step-adamw]", "step", "mlp", "adamw", False),
        ("train[step-convnet]", "step", "convnet", "sgd", False),
        ("collective",),
        *((f"train[{mode}-{where}]", mode, "mlp", "sgd", False, where, ZERO_GRAD_STEPS)
          for mode in ("step", "outside") for where in ZERO_GRAD[1:]),
    ])


def _scenario(reports, name) -> list[dict]:
    return [r[name] for r in reports]


def test_compiled_module_inside_ddp(eager_backend_reports):
    # DDP's forward runs eagerly around the compiled module: one graph, a mock from the second call.
    reports = _scenario(eager_backend_reports, "train[inside]")
    _check(reports, [RECORD] + [MOCK] * (STEPS - 1))
    _check_all_reduced(reports, hooks=True)
    for r in reports:
        assert r["graphs_per_call"] == 1 and r["breaks"] == {} and r["break_reasons"] == []


# magpy.compile(DDP(model)) and the compiled train step record twice: the first call finds
# DDP's lazy init not run (it runs in the recording) and, for the step, no .grad and no
# optimizer state; the reducer rebuilds its buckets in the second forward
# (``_rebuild_buckets()`` is True once), so on the third call that record's check of it fails
# after the reducer's first effects and a continuation records the rest of the call.  From
# the fourth call on every call is a mock run.
RECORDS_THEN_MOCKS = [RECORD, RECORD, CONTINUATION] + [MOCK] * (STEPS - 3)


def test_compiled_ddp_module(eager_backend_reports):
    reports = _scenario(eager_backend_reports, "train[outside]")
    _check(reports, RECORDS_THEN_MOCKS)
    _check_all_reduced(reports, hooks=True)
    for r in reports:
        assert r["graphs_per_call"] == 1 and set(r["breaks"]) == REDUCER_STEPS and r["break_reasons"] == []


@pytest.mark.parametrize("name", ["train[step]", "train[step-adamw]", "train[step-convnet]"])
def test_compiled_train_step(eager_backend_reports, name):
    # Three graphs per call: forward (until prepare_for_backward), loss, optimizer update.
    reports = _scenario(eager_backend_reports, name)
    _check(reports, RECORDS_THEN_MOCKS)
    _check_all_reduced(reports, hooks=name == "train[step]")
    for r in reports:
        assert r["graphs_per_call"] == 3 and r["break_reasons"] == []
        assert REDUCER_STEPS | {BACKWARD} <= set(r["breaks"])


@pytest.mark.parametrize("where", ZERO_GRAD[1:])
@pytest.mark.parametrize("mode", ["step", "outside"])
def test_zero_grad_at_the_end(eager_backend_reports, mode, where):
    # The gradients cleared at the end of the step: each call finds .grad as the last left
    # it, and the engine's backward sets it in between.  Exact on both ranks over 20 steps.
    reports = _scenario(eager_backend_reports, f"train[{mode}-{where}]")
    _check(reports, RECORDS_THEN_MOCKS + [MOCK] * (ZERO_GRAD_STEPS - STEPS))
    _check_all_reduced(reports, hooks=False)


def test_collective_called_by_the_program(eager_backend_reports):
    # The 4th call's total passes 20: the check after the all-reduce fails and the call
    # resumes there (a continuation) instead of running the all-reduce again.
    reports = _scenario(eager_backend_reports, "collective")
    _check(reports, [RECORD, MOCK, MOCK, CONTINUATION, MOCK])
    for r in reports:
        assert r["break_reasons"] == []


def test_inductor_train_step():
    reports = _scenario(_launch([("train[step]", "step", "mlp", "sgd", True)], backend="inductor"),
                        "train[step]")
    _check(reports, RECORDS_THEN_MOCKS, exact=False)
    _check_all_reduced(reports, hooks=True)
    for r in reports:
        assert r["graphs_per_call"] == 3 and r["break_reasons"] == []


# Issue 41's table: where zero_grad sits, for a model DDP does not wrap, a compiled step of a
# DDP model and a compiled DDP module; SGD with momentum and AdamW.
TABLE = [(f"train[{mode}-{optim}-{where}]", mode, "mlp", optim, False, where, ZERO_GRAD_STEPS)
         for mode in ("plain", "step", "outside") for optim in ("sgd", "adamw") for where in ZERO_GRAD]


def _kinds(report: dict) -> list[str]:
    """What each call of a scenario was (_kind)."""
    stats = [{}] + [step["stats"] for step in report["steps"]]
    return [_kind(a, b) for a, b in zip(stats, stats[1:])]


def _check_table(reports: list[dict], exact: bool) -> None:
    """Every scenario of TABLE: equal to eager after every one of its 20 steps on every rank,
    the same kinds of call on every rank, none eager, the last 10 mock runs; DDP's ranks
    hold the same parameters."""
    for name, mode, *_ in TABLE:
        rs = _scenario(reports, name)
        kinds = _kinds(rs[0])
        assert "eager" not in kinds and kinds[-10:] == [MOCK] * 10, (name, kinds)
        _check(rs, kinds, exact=exact)
        if mode != "plain":
            _check_all_reduced(rs, hooks=False)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_zero_grad_table(world, backend):
    # Over 20 steps on every rank, wherever the step clears the gradients: bit for bit with
    # backend "eager", within rounding with Inductor.
    _check_table(_launch(TABLE, backend=backend, world=world, timeout=1800.0), exact=backend == "eager")
