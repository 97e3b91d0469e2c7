"""Many callers (``magpy.capture.process_state``): compiled callables shared by threads, overlapping monitor
sessions, forked processes, and grad modes entered per thread.  Every result is compared
with eager's; process-wide state must come back exactly as it was."""
import gc
import os
import sys
import threading
import time

import pytest
import torch

import magpy
from benchmarks.threads import hammer, model
from magpy.backends import autopilot, background
from magpy.capture import collector
from magpy.capture import process_state as sessions
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture


def process_state() -> tuple:
    """What magpy changes process-wide or per thread, as one comparable value."""
    return (sys.getrecursionlimit(), sys.getswitchinterval(), gc.isenabled(), gc.get_threshold(),
            gc.get_freeze_count(), torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
            sys.gettrace(), sys.getprofile(), torch._C._len_torch_function_stack())


def run_threads(target, n: int) -> None:
    """``target(k)`` in ``n`` threads at once; the first exception any raised is raised here."""
    errors = []

    def run(k):
        try:
            target(k)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    pool = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    if errors:
        raise errors[0]


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_eight_threads_share_one_compiled_model(backend):
    # issue 29: 8 threads x 60 calls, batch sizes from 8 values, the defaults a user gets
    # (background compile, autopilot on).
    magpy.config.background_compile = True
    limit = sys.getrecursionlimit()
    if backend == "inductor":
        # Inductor's compile_fx raises the limit to 2000 itself (under torch.compile too):
        # what is checked is that magpy's sessions leave it as they found it.
        sys.setrecursionlimit(max(limit, 2000))
    try:
        before = process_state()
        net = model()
        fast = magpy.compile(net, backend=backend)
        out = hammer(fast, net, threads=8, calls=60)
        assert magpy.synchronize(120)
        assert (out["exceptions"], out["wrong"]) == (0, 0), out["errors"]
        stats = magpy.stats(fast)
        assert stats.monitor_runs == stats.records   # one recording per distinct miss
        assert process_state() == before
    finally:
        sys.setrecursionlimit(limit)


def test_threads_missing_alike_run_eagerly_while_one_records():
    # The first recording waits in its backend; the others miss the same way meanwhile.
    gate, entered = threading.Event(), threading.Event()

    def backend(gm, example_inputs):
        if not entered.is_set():
            entered.set()
            assert gate.wait(60)
        return gm.forward

    def f(x):
        return torch.relu(x) * 2 + 1

    c = magpy.compile(f, backend=backend)
    x = torch.randn(4, 3)
    recorder = threading.Thread(target=c, args=(x,))
    recorder.start()
    assert entered.wait(60)
    results = []
    run_threads(lambda k: results.append(c(x)), 6)
    gate.set()
    recorder.join(60)
    assert all(torch.equal(r, f(x)) for r in results)
    stats = magpy.stats(c)
    assert (stats.monitor_runs, stats.eager_runs) == (1, 6)
    assert torch.equal(c(x), f(x)) and magpy.stats(c).mock_runs == 1


def test_overlapping_sessions_in_threads_restore_the_recursion_limit():
    # Two callables recording at once in two threads, their monitor sessions overlapping and
    # ending in either order: the headroom is given once and taken back after the last.
    limit = sys.getrecursionlimit()
    inside, leave = threading.Barrier(2), [threading.Event(), threading.Event()]
    seen = []

    def program(x, k):
        inside.wait(60)                    # both sessions are open now
        seen.append(sys.getrecursionlimit())
        leave[k].wait(60)                  # the first one in leaves first
        return x + k

    compiled = [magpy.compile(program, backend="eager") for _ in range(2)]
    x = torch.randn(3)
    pool = [threading.Thread(target=compiled[k], args=(x, k)) for k in range(2)]
    for t in pool:
        t.start()
    for k in range(2):
        while len(seen) < 2:
            threading.Event().wait(0.01)
        leave[k].set()
        pool[k].join(60)
    assert seen == [limit * sessions.FRAMES_PER_CALL] * 2
    assert sys.getrecursionlimit() == limit


def test_a_held_change_is_undone_after_the_last_holder_in_any_order():
    state = []
    held = sessions.Held(lambda: state.append("on") or (lambda: state.append("off")))
    first_in = threading.Event()
    second_in = threading.Event()
    first_out = threading.Event()

    def first():
        with held:
            first_in.set()
            assert second_in.wait(10)
        first_out.set()

    def second():
        assert first_in.wait(10)
        with held:
            second_in.set()
            assert first_out.wait(10)
            assert state == ["on"]         # the first holder left; the change stays

    run_threads(lambda k: (first, second)[k](), 2)
    assert state == ["on", "off"] and not held.held()


def test_the_programs_own_recursion_limit_stays():
    def f(x):
        sys.setrecursionlimit(2345)
        return x + 1

    limit = sys.getrecursionlimit()
    try:
        c = magpy.compile(f, backend="eager")
        c(torch.randn(2))
        assert sys.getrecursionlimit() == 2345   # as eager leaves it
    finally:
        sys.setrecursionlimit(limit)


def test_several_compiled_callables_in_several_threads():
    nets = [model() for _ in range(3)]
    for i, net in enumerate(nets):
        with torch.no_grad():
            net[0].weight.mul_(i + 1)
    fns = [lambda x: x.sin() * 2, lambda x: torch.cat([x, x]).sum(0)]
    programs = [*nets, *fns]
    compiled = [magpy.compile(p, backend="eager") for p in programs]
    inputs = [torch.randn(b, 16) for b in (2, 3, 5)]
    with torch.no_grad():
        expected = [[p(x) for x in inputs] for p in programs]
    before = process_state()

    def worker(k):
        for i in range(40):
            j, n = (i + k) % len(programs), (i * 7 + k) % len(inputs)
            with torch.no_grad():
                got = compiled[j](inputs[n])
            assert torch.allclose(got, expected[j][n], atol=1e-6), (j, n)

    run_threads(worker, 6)
    assert process_state() == before


def test_grad_and_inference_mode_entered_per_thread_do_not_leak():
    net = model().train()
    fast = magpy.compile(net, backend="eager")
    x = torch.randn(4, 16)
    modes = {0: torch.inference_mode, 1: torch.no_grad, 2: torch.enable_grad}

    def worker(k):
        kind = k % 3
        for _ in range(20):
            with modes[kind]():
                out = fast(x)
                assert torch.is_grad_enabled() == (kind == 2)
                assert torch.is_inference_mode_enabled() == (kind == 0)
            assert out.is_inference() == (kind == 0)
            assert (out.grad_fn is not None) == (kind == 2)
            with modes[kind]():
                assert torch.allclose(out, net(x))
            assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()

    before = process_state()
    run_threads(worker, 6)
    assert process_state() == before


@pytest.mark.parametrize("paired", [False, True])
def test_a_trial_called_from_threads_decides_once(paired):
    decided = []

    def version(x):
        time.sleep(0.002)   # (calls of the threads overlap)
        return x + 1

    trial = autopilot.Trial(version, version, "fake", 1, paired=paired)
    trial.report = decided.append

    def worker(k):
        for i in range(50):
            assert trial(i) == i + 1

    run_threads(worker, 8)
    assert decided == [trial] and trial.kept is not None
    timed = autopilot.TIMED_CALLS if not paired else trial.timed   # (a close call takes more)
    assert timed in (autopilot.TIMED_CALLS, autopilot.CLOSE_TIMED_CALLS)
    assert [len(t) for t in trial.times] == [timed] * 2


def test_a_finished_background_compile_is_taken_by_one_thread():
    taken = []
    d = background.Deferred(lambda: [], lambda rec, results: taken.append(results), "fake")
    d.start()
    assert magpy.synchronize(60)
    claims = []
    run_threads(lambda k: claims.append(d.claim()), 8)
    assert sorted(claims) == [False] * 7 + [True]


class Doubling(torch.utils.data.Dataset):
    def __init__(self, fn):
        self.fn = fn

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return self.fn(torch.full((3,), float(i)))


def twice_plus_one(x):
    return x * 2 + 1


def test_a_dataloader_forks_workers_after_the_background_worker_started():
    magpy.config.background_compile = True
    c = magpy.compile(twice_plus_one, backend=lambda gm, ex: gm.forward)
    x = torch.randn(3)
    c(x)
    c(x)                                   # first reuse: the worker compiles
    assert magpy.synchronize(60)
    loader = torch.utils.data.DataLoader(Doubling(c), batch_size=2, num_workers=2,
                                         multiprocessing_context="fork")
    got = torch.cat(list(loader))
    want = torch.cat([twice_plus_one(torch.full((3,), float(i)))[None] for i in range(8)])
    assert torch.equal(got, want)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_during_another_threads_recording_leaves_the_child_whole():
    # The parent forks while a thread records (in its backend): the child has no such
    # thread, so it must not inherit that recording's lock, gc window or headroom.
    gate, entered = threading.Event(), threading.Event()

    def backend(gm, example_inputs):
        entered.set()
        assert gate.wait(60)
        return gm.forward

    c = magpy.compile(twice_plus_one, backend=backend)
    x = torch.randn(3)
    gc_before, limit = gc.get_freeze_count(), sys.getrecursionlimit()
    recorder = threading.Thread(target=c, args=(x,))
    recorder.start()
    assert entered.wait(60) and collector.is_open()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: records its own call, eagerly-equal; state as before
        ok = False
        try:
            gate.set()   # (its own backend calls must not wait: no thread will set it here)
            ok = (not collector.is_open() and gc.get_freeze_count() == gc_before
                  and sys.getrecursionlimit() == limit and torch.equal(c(x), twice_plus_one(x))
                  and magpy.stats(c).monitor_runs == 2)
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    gate.set()
    recorder.join(60)
    assert answer == b"1"
    assert torch.equal(c(x), twice_plus_one(x)) and not collector.is_open()
