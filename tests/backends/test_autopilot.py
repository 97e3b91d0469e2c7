"""The autopilot (``magpy.backends.autopilot``): each compiled graph is timed against the same graph run
eagerly over its first calls, and the faster is kept.

The backends here are made slower (or faster) than eager by factors of hundreds, so the
decision does not depend on the machine's load; no test asserts a time.
"""
import logging
import time

import pytest
import torch

import magpy
from magpy import logs
from magpy.backends import autopilot
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture

TRIAL = autopilot.TRIAL_CALLS                                  # mock calls on trial, at most
PAIRED = autopilot.WARMUP_CALLS + autopilot.TIMED_CALLS        # ... of a graph that writes nothing
CALLS = TRIAL + 6                                              # mock calls per test


class Counting:
    """A backend whose compiled graphs count their calls; ``slow`` sleeps in each."""

    def __init__(self, compile_graph, name: str):
        self.compile_graph, self.__name__, self.calls = compile_graph, name, 0

    def __call__(self, gm, example_inputs):
        fn = self.compile_graph(gm, example_inputs)

        def run(*args):
            self.calls += 1
            return fn(*args)

        return run


def sleepy(gm, example_inputs):
    def run(*args):
        time.sleep(0.02)   # the graph itself takes microseconds
        return gm.forward(*args)

    return run


def folded(gm, example_inputs):
    """The graph ``x + 1 + 1 + ...`` as one addition (exact for integer values)."""
    adds = sum(n.op.startswith("call") for n in gm.graph.nodes)
    return lambda x: (x + float(adds),)


ADDS = 300


def many_adds(x):
    for _ in range(ADDS):
        x = x + 1
    return x


def small(x, w):
    return torch.relu(x @ w) * 2


def run_calls(fn, compiled, *args, calls=CALLS):
    """The first call records; the rest run the mock. Each result is the eager one."""
    for _ in range(calls + 1):
        got, want = compiled(*args), fn(*args)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.fixture
def autopilot_on():
    before = magpy.config.autopilot
    magpy.config.autopilot = True
    yield
    magpy.config.autopilot = before


def test_slow_backend_loses_to_eager(autopilot_on):
    backend = Counting(sleepy, "sleepy")
    compiled = magpy.compile(small, backend=backend)
    run_calls(small, compiled, torch.randn(4, 8), torch.randn(8, 3))
    assert magpy.stats(compiled).kept == {"eager": 1}
    # The compiled graph ran on the calls on trial only (each of them runs both versions: the
    # graph writes nothing); later calls run eagerly.
    assert compiled._magpy_cache.records[0].trials[0].paired
    assert backend.calls == PAIRED


def test_fast_backend_wins(autopilot_on, monkeypatch):
    monkeypatch.setattr(magpy.config, "max_unroll", ADDS)   # (folded counts the unrolled additions)
    backend = Counting(folded, "folded")
    compiled = magpy.compile(many_adds, backend=backend)
    run_calls(many_adds, compiled, torch.randint(-5, 5, (16,)).float())
    assert magpy.stats(compiled).kept == {"folded": 1}
    assert backend.calls == CALLS


def test_a_third_version_on_trial_wins_where_fastest():
    """On a GPU the compiled graph replayed as a CUDA graph is a third version on trial: each
    version runs on every third call, the fastest is kept, the losers' replay is let go."""
    ran = []

    def version(name, seconds):
        def run(*args):
            ran.append(name)
            time.sleep(seconds)
            return [args[0] + 1]
        return run
    trial = autopilot.Trial(version("compiled", 0.02), version("eager", 0.02), "backend", 1,
                            replayed=version("replayed", 0.0))
    for _ in range(3 * (autopilot.WARMUP_CALLS + autopilot.TIMED_CALLS)):
        assert torch.equal(trial(torch.zeros(2))[0], torch.ones(2))
    assert ran[:6] == ["compiled", "eager", "replayed"] * 2
    assert trial.winner == "backend + CUDA graphs"
    assert "backend + CUDA graphs" in trial.describe()
    losing = autopilot.Trial(version("compiled", 0.0), version("eager", 0.02), "backend", 1,
                             replayed=version("replayed", 0.02))
    for _ in range(3 * (autopilot.WARMUP_CALLS + autopilot.TIMED_CALLS)):
        losing(torch.zeros(2))
    assert losing.winner == "backend" and losing.versions[2] is None   # (its capture's pool let go)


def test_decided_graph_costs_nothing(autopilot_on):
    """Once decided, the mock calls the winner itself: the trial is out of the call path."""
    compiled = magpy.compile(small, backend=sleepy)
    run_calls(small, compiled, torch.randn(4, 8), torch.randn(8, 3))
    rec = compiled._magpy_cache.records[0]
    trial, = rec.trials
    assert trial.calls == PAIRED
    assert trial not in rec.mock.__globals__.values()


def test_switched_off():
    before = magpy.config.autopilot
    magpy.config.autopilot = False
    try:
        backend = Counting(sleepy, "sleepy")
        compiled = magpy.compile(small, backend=backend)
        run_calls(small, compiled, torch.randn(4, 8), torch.randn(8, 3), calls=4)
    finally:
        magpy.config.autopilot = before
    assert backend.calls == 4
    assert magpy.stats(compiled).kept == {}
    assert compiled._magpy_cache.records[0].trials == ()


def test_config_checks_its_value():
    with pytest.raises(ValueError, match="autopilot"):
        magpy.config.autopilot = "yes"


def test_eager_backend_has_nothing_to_try(autopilot_on):
    compiled = magpy.compile(small, backend="eager")
    run_calls(small, compiled, torch.randn(4, 8), torch.randn(8, 3), calls=2)
    assert compiled._magpy_cache.records[0].trials == ()


def accumulate(buf, x):
    buf.add_(x)
    return buf * 2


@pytest.mark.parametrize("backend", [sleepy, "inductor"])
def test_in_place_update_applied_once_per_call(autopilot_on, backend):
    """Each call runs one version: a graph that updates its input in place updates it once."""
    x = torch.arange(6.0)
    buf, ref = torch.zeros(6), torch.zeros(6)
    compiled = magpy.compile(accumulate, backend=backend)
    for _ in range(CALLS + 1):
        torch.testing.assert_close(compiled(buf, x), accumulate(ref, x), rtol=0, atol=0)
    torch.testing.assert_close(buf, ref, rtol=0, atol=0)
    assert sum(magpy.stats(compiled).kept.values()) == 1
    assert not compiled._magpy_cache.records[0].trials[0].paired


def residual(x, w):
    """ResNet's block: in-place updates of tensors the graph itself made."""
    y = torch.nn.functional.relu(x @ w, inplace=True)
    y += x
    torch.mul(y, 2, out=torch.empty_like(y)).tanh_()
    return y.mul_(0.5)


def test_graph_updating_only_its_own_tensors_is_tried_paired(autopilot_on):
    """Running it twice on the same inputs writes only what each run makes anew (before, any
    in-place operation made a graph unpaired, and ResNet's trial compared alternate calls)."""
    backend = Counting(sleepy, "sleepy")
    compiled = magpy.compile(residual, backend=backend)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    before = x.clone()
    run_calls(residual, compiled, x, w)
    assert torch.equal(x, before)
    assert compiled._magpy_cache.records[0].trials[0].paired
    assert magpy.stats(compiled).kept == {"eager": 1} and backend.calls == PAIRED


def writes_a_view_of_its_input(x):
    """The tensors updated are the graph's input itself or views of it."""
    x.contiguous().add_(1)
    x.detach().view(-1)[:2].mul_(2)
    torch.from_numpy(x.numpy()).add_(0.5)   # (the same memory through a storage of its own)
    return torch.nn.functional.relu(x[1:], inplace=True) * 2


@pytest.mark.parametrize("backend", [sleepy, "inductor"])
def test_graph_updating_a_view_of_its_input_is_not_paired(autopilot_on, backend):
    x, ref = torch.randn(3, 4), None
    ref = x.clone()
    compiled = magpy.compile(writes_a_view_of_its_input, backend=backend)
    for _ in range(CALLS + 1):
        torch.testing.assert_close(compiled(x), writes_a_view_of_its_input(ref), rtol=0, atol=0)
        torch.testing.assert_close(x, ref, rtol=0, atol=0)
    assert not compiled._magpy_cache.records[0].trials[0].paired


def test_paired_trial_compares_the_versions_on_the_same_inputs():
    """Work that depends on the inputs (a branch taken or not, a longer sequence) cannot make
    a slower version win a paired trial: alternate calls would give the compiled version every
    cheap input here, and its best time would win."""
    def version(per_unit):
        def run(units):
            time.sleep(per_unit * units)
            return [units]
        return run

    inputs = [1, 20] * (autopilot.WARMUP_CALLS + autopilot.TIMED_CALLS)
    kinds = {}
    for paired in (False, True):
        trial = autopilot.Trial(version(0.002), version(0.001), "slower", 1, paired=paired)
        for units in inputs:
            assert trial(units) == [units]
        kinds[paired] = trial.winner
        assert ("the same inputs" in trial.describe()) == paired
    assert kinds == {False: "slower", True: "eager"}


@pytest.mark.parametrize("eager_time, timed_calls, kept", [
    (1.5, autopilot.TIMED_CALLS, "backend"),          # clear: decided after the usual calls
    (1.02, autopilot.CLOSE_TIMED_CALLS, "backend"),   # close calls: more calls decide them
    (0.98, autopilot.CLOSE_TIMED_CALLS, "eager"),
])
def test_a_close_call_takes_more_timed_calls(monkeypatch, eager_time, timed_calls, kept):
    """A paired trial whose medians are within CLOSE_CALL of each other is not decided on three
    calls (a loaded machine moves each by more): it takes CLOSE_TIMED_CALLS, within the calls a
    trial may take. Time here is a clock the versions advance, so the test does not depend on load."""
    clock = [0.0]
    monkeypatch.setattr(autopilot, "_now", lambda: clock[0])

    def version(took):
        def run(x):
            clock[0] += took
            return [x]
        return run

    trial = autopilot.Trial(version(1.0), version(eager_time), "backend", 1, paired=True)
    calls = 0
    while trial.kept is None:
        assert trial(calls) == [calls]
        calls += 1
    assert calls == autopilot.WARMUP_CALLS + timed_calls <= autopilot.TRIAL_CALLS
    assert [len(t) for t in trial.times] == [timed_calls] * 2
    assert trial.winner == kept and f"best of {timed_calls};" in trial.describe()


def drop_blocks(x, w, gates):
    for i in range(gates.numel()):
        if gates[i] > 0:
            x = torch.tanh(x @ w) + x
    return x


def test_graph_with_branches_is_tried_paired(autopilot_on):
    """BlockDrop's shape: a tensor ``if`` per block, different blocks on each call; the slower
    version loses whatever blocks the calls take, results equal eager's throughout."""
    backend = Counting(sleepy, "sleepy")
    compiled = magpy.compile(drop_blocks, backend=backend)
    x, w = torch.randn(8, 8), torch.randn(8, 8) / 8
    for call in range(CALLS):
        gates = torch.tensor([(call >> b) & 1 for b in range(3)]) - 0.5
        torch.testing.assert_close(compiled(x, w, gates), drop_blocks(x, w, gates), rtol=1e-6, atol=1e-6)
    rec, = compiled._magpy_cache.records
    trial, = rec.trials
    assert trial.paired and magpy.stats(compiled).kept == {"eager": 1}
    assert backend.calls == PAIRED


def noisy(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) * 2


def test_graph_that_draws_random_numbers_is_not_paired(autopilot_on):
    """Running a version twice would draw twice: the program's next random numbers would differ."""
    compiled = magpy.compile(noisy, backend=sleepy)
    x = torch.ones(64)
    for seed in range(CALLS):
        torch.manual_seed(seed)
        got, after = compiled(x), torch.rand(1)
        torch.manual_seed(seed)
        torch.testing.assert_close(got, noisy(x), rtol=0, atol=0)
        torch.testing.assert_close(after, torch.rand(1), rtol=0, atol=0)
    assert not compiled._magpy_cache.records[0].trials[0].paired


def test_explain_and_log_show_the_decision(autopilot_on, caplog):
    logs.configure("perf")
    caplog.set_level(logging.INFO, logger="magpy")
    try:
        compiled = magpy.compile(small, backend=sleepy)
        args = torch.randn(4, 8), torch.randn(8, 3)
        run_calls(small, compiled, *args, calls=PAIRED - 1)
        assert "on trial" in str(magpy.explain(compiled, *args))
        assert not any("kept" in r.getMessage() for r in caplog.records)
        compiled(*args)
    finally:
        logs.configure(None)
    line, = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    assert "kept eager (sleepy" in line
    text = str(magpy.explain(compiled, *args))
    assert "autopilot" in text and "record 0 graph 0: 3 operations: kept eager" in text


def test_paired_trial_out_of_memory_starts_again_unpaired():
    """Two versions' memory at once may not fit on a GPU: the call gives the first version's
    result, and the trial goes on with one version per call (which fits, as calls did before)."""
    calls = []

    def compiled(x):
        calls.append("compiled")
        return [x + 1]

    def eager(x):
        calls.append("eager")
        if calls.count("eager") == 1 and "compiled" in calls[:-1]:   # (beside compiled's outputs)
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return [x + 1]

    trial = autopilot.Trial(compiled, eager, "backend", 1, paired=True)
    for _ in range(2 * (autopilot.WARMUP_CALLS + autopilot.TIMED_CALLS) + 1):
        assert torch.equal(trial(torch.zeros(2))[0], torch.ones(2))
    assert not trial.paired and trial.kept is not None
    assert [len(t) for t in trial.times] == [autopilot.TIMED_CALLS] * 2
