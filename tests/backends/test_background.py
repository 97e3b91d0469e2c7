"""Background compilation (``magpy.backends.background``): a record's graphs run as their eager twins
until the record's first reuse starts their compile in a worker thread; the compiled graphs
take over at the call after it finished, before that call's guard runs.

The backend here notes where and how it compiled and counts the calls of what it compiled,
so each test knows which version ran; ``magpy.synchronize()`` makes the timing
deterministic.  Every result is compared with eager's.
"""
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torch import nn

import magpy
from magpy.backends import background
from magpy.backends.eager_twins import PYTHON_CONTROL_FLOW, eager_twin
from magpy.records import cache as magpy_cache
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture

WORKER = "magpy-compile"


@pytest.fixture(autouse=True)
def background_default():
    magpy.config.background_compile = True   # the default (tests/conftest.py turns it off)


class Noting:
    """A backend noting each compile's thread and grad mode; what it compiles counts its
    calls.  ``fail``: raise instead; ``gate``: an event each compile waits for."""

    def __init__(self, fail: bool = False, gate: threading.Event | None = None):
        self.__name__ = "noting"
        self.fail, self.gate = fail, gate
        self.entered = threading.Event()   # a compile has begun
        self.compiles: list[tuple[str, bool]] = []
        self.intervals: list[float] = []   # the interpreter's switch interval during each compile
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(60)
        self.compiles.append((threading.current_thread().name, torch.is_grad_enabled()))
        self.intervals.append(sys.getswitchinterval())
        if self.fail:
            raise RuntimeError("the backend broke")

        def run(*args):
            self.calls += 1
            return gm.forward(*args)

        return run


def same(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def affine(x, w):
    return torch.relu(x @ w) + 1


def compiled_and_reused(backend):
    """``affine`` compiled with ``backend``, called twice (a recording, then the first reuse,
    which starts the compile; both eager's results) and the compile waited for; with its inputs."""
    c = magpy.compile(affine, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    same(c(x, w), affine(x, w))
    same(c(x, w), affine(x, w))
    assert magpy.synchronize(60)
    return c, x, w


@pytest.fixture
def no_trial():
    """Compiled graphs run on every call from the start (no autopilot alternation)."""
    magpy.config.autopilot = False


def test_first_call_compiles_nothing_first_reuse_compiles_in_the_worker(no_trial):
    backend = Noting()
    c = magpy.compile(affine, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    same(c(x, w), affine(x, w))
    assert backend.compiles == [] and magpy.stats(c).graph_count == 1
    same(c(x, w), affine(x, w))          # first reuse: the compile starts, the eager twin runs
    assert magpy.synchronize(60)
    assert backend.compiles == [(WORKER, True)] and backend.calls == 0
    assert magpy.stats(c).compiled_in_background == 0
    x2 = torch.randn(4, 3)
    same(c(x2, w), affine(x2, w))        # the compiled graph takes over
    assert backend.calls == 1 and magpy.stats(c).compiled_in_background == 1
    w.mul_(-1)                           # changed state: still the compiled graph, eager's result
    same(c(x2, w), affine(x2, w))
    assert backend.calls == 2 and len(backend.compiles) == 1
    assert magpy.stats(c).monitor_runs == 1


def test_the_gil_changes_hands_more_often_only_while_a_compile_runs(no_trial):
    # Each torch operation of a call releases the GIL and waits to get it back from the worker.
    before = sys.getswitchinterval()
    backend = Noting()
    compiled_and_reused(backend)
    assert before > background.SWITCH_INTERVAL
    assert backend.intervals == [pytest.approx(background.SWITCH_INTERVAL)]
    assert sys.getswitchinterval() == before


def test_compile_runs_under_the_recording_grad_mode(no_trial):
    backend = Noting()
    model = nn.Linear(3, 2)
    c = magpy.compile(model, backend=backend)
    x = torch.randn(5, 3)
    with torch.no_grad():
        same(c(x), model(x))
        same(c(x), model(x))
    assert magpy.synchronize(60)
    assert backend.compiles == [(WORKER, False)]
    with torch.no_grad():
        model.weight.add_(1.0)
        same(c(x), model(x))
    assert backend.calls == 1


def test_a_record_never_reused_is_never_compiled(no_trial):
    backend = Noting()                   # fixed sizes: one record per size
    c = magpy.compile(affine, backend=backend)
    w = torch.randn(3, 5)
    for n in (2, 3, 4):
        x = torch.randn(n, 3)
        same(c(x, w), affine(x, w))
    assert magpy.synchronize(60)
    assert backend.compiles == [] and magpy.stats(c).records == 3
    x = torch.randn(3, 3)
    same(c(x, w), affine(x, w))          # the size-3 record's first reuse
    assert magpy.synchronize(60)
    assert len(backend.compiles) == 1


def test_off_compiles_while_recording_in_the_calling_thread(no_trial):
    magpy.config.background_compile = False
    backend = Noting()
    c = magpy.compile(affine, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    same(c(x, w), affine(x, w))
    assert backend.compiles == [(threading.current_thread().name, True)]
    same(c(x, w), affine(x, w))
    assert backend.calls == 1


def test_a_failed_background_compile_warns_once_and_runs_eagerly():
    backend = Noting(fail=True)
    c, x, w = compiled_and_reused(backend)
    with pytest.warns(RuntimeWarning, match="backend 'noting' failed to compile a graph"):
        same(c(x, w), affine(x, w))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same(c(x, w), affine(x, w))
    assert magpy.stats(c).mock_runs == 3


def test_a_failed_background_compile_raises_once_when_asked():
    magpy.config.on_backend_error = "raise"
    backend = Noting(fail=True)
    c, x, w = compiled_and_reused(backend)
    with pytest.raises(magpy.BackendError, match="the backend broke"):
        c(x, w)
    same(c(x, w), affine(x, w))          # the graph has its eager twin in its place


def test_a_compile_job_that_fails_itself_leaves_every_graph_eager(monkeypatch):
    # Not one graph's backend failing (that is a result), but the job around them: magpy's
    # own failure in the worker.  Each graph keeps its twin, with the backend-failure warning.
    from magpy.records import record

    def broken(backend, gm, loops, example):
        raise RuntimeError("the job broke")

    monkeypatch.setattr(record, "_attempt", broken)
    backend = Noting()
    c, x, w = compiled_and_reused(backend)
    with pytest.warns(RuntimeWarning, match="failed to compile a graph.*the job broke"):
        same(c(x, w), affine(x, w))
    w.mul_(2)
    same(c(x, w), affine(x, w))
    assert backend.compiles == [] and magpy.stats(c).mock_runs == 3


def test_conditions_the_compile_adds_apply_before_the_compiled_graph_runs(no_trial, monkeypatch):
    # A backend that compiles for symbolic sizes and assumes one (as Inductor may).
    monkeypatch.setattr(magpy_cache, "SYMBOLIC", magpy_cache.SYMBOLIC | {"assuming"})
    backend = Noting()
    backend.__name__ = "assuming"
    compile_graph = Noting.__call__

    def assuming(self, gm, example_inputs):
        n = example_inputs[0].shape[0]
        assert isinstance(n, torch.SymInt)
        if n <= 6:                       # the size at recording is 5: assumes n <= 6
            pass
        return compile_graph(self, gm, example_inputs)

    monkeypatch.setattr(Noting, "__call__", assuming)
    c = magpy.compile(affine, backend=backend)
    w = torch.randn(3, 5)
    for n in (4, 5):                     # a record, then a symbolic record
        x = torch.randn(n, 3)
        same(c(x, w), affine(x, w))
    assert magpy.synchronize(60) and backend.compiles == []
    x = torch.randn(6, 3)
    same(c(x, w), affine(x, w))          # the symbolic record's first reuse
    assert magpy.synchronize(60) and magpy.stats(c).records == 2
    assert len(backend.compiles) == 1
    x = torch.randn(3, 3)
    same(c(x, w), affine(x, w))
    assert backend.calls == 1
    x = torch.randn(9, 3)                # passes the old size check, fails the compile's
    same(c(x, w), affine(x, w))
    assert backend.calls == 1 and magpy.stats(c).records == 3


def test_reset_drops_compiles_not_started(no_trial):
    gate = threading.Event()
    backend = Noting(gate=gate)
    c1, c2 = magpy.compile(affine, backend=backend), magpy.compile(lambda x: x.sin() * 2, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    try:
        c1(x, w), c1(x, w)               # its compile starts and waits at the gate
        assert backend.entered.wait(60)
        c2(x), c2(x)                     # queued behind it
        magpy.reset()
    finally:
        gate.set()
    assert magpy.synchronize(60)
    assert len(backend.compiles) == 1


def test_explain_says_which_records_are_not_compiled_yet():
    backend = Noting()
    c = magpy.compile(affine, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    c(x, w)
    text = str(magpy.explain(c, x, w))
    assert "record 0: running eagerly until the record's first reuse starts its noting compile" in text
    c(x, w)
    assert magpy.synchronize(60)
    c(x, w)
    text = str(magpy.explain(c, x, w))
    assert "record 0 graph 0: " in text and "on trial, noting vs eager" in text
    assert "first reuse" not in text


def test_a_process_ending_during_a_compile_exits_cleanly(tmp_path):
    script = tmp_path / "ends_while_compiling.py"
    script.write_text(textwrap.dedent("""
        import time, torch, magpy
        torch.set_num_threads(1)
        layers = [torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                      torch.nn.ReLU()) for _ in range(6)]
        c = magpy.compile(torch.nn.Sequential(*layers).eval())       # inductor
        x = torch.randn(2, 8, 16, 16)
        with torch.no_grad():
            c(x)
            c(x)                           # its compile starts in the worker
        time.sleep(1.5)                    # (without waiting for it, 9 of 10 such runs aborted)
        print("done", flush=True)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done" in out.stdout and "terminate" not in out.stderr


def test_a_process_ending_with_compiles_queued_ends_the_worker_before_exit_handlers(tmp_path):
    # The worker, if still alive while the interpreter finalizes, frees a finished job's
    # tensors there and dies inside torch's deallocator: 5 of 6 runs of such a program
    # aborted ("terminate called without an active exception") before magpy ended it first.
    script = tmp_path / "ends_with_queued_compiles.py"
    script.write_text(textwrap.dedent("""
        import atexit, threading, torch, magpy
        cell = torch.nn.LSTMCell(8, 8)

        def f(x, h, c):
            outs = []
            for x_t in x:
                h, c = cell(x_t, (h, c))
                outs.append(h)
            return torch.stack(outs)

        @atexit.register
        def report():   # an exit handler of the program's: magpy's exit handling is over
            alive = any(t.name == "magpy-compile" for t in threading.enumerate())
            print("worker alive:", alive, flush=True)

        h = c = torch.zeros(2, 8)
        with torch.no_grad():
            for _ in range(2):
                magpy.reset()                  # cancels queued compiles of the records it drops
                cf = magpy.compile(f)
                for n in (5, 7, 9, 11):
                    x = torch.randn(n, 2, 8)
                    torch.testing.assert_close(cf(x, h, c), f(x, h, c))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "worker alive: False" in out.stdout and "terminate" not in out.stderr


def _compile_in_the_foreground(queue):
    magpy.config.background_compile = False
    c = magpy.compile(lambda x: x.cos() + 1, backend=Noting())
    x = torch.randn(3)
    queue.put(bool(torch.equal(c(x), x.cos() + 1)))


def test_a_process_forked_during_a_compile_compiles_on_its_own(no_trial):
    import multiprocessing
    gate = threading.Event()
    backend = Noting(gate=gate)
    c = magpy.compile(affine, backend=backend)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    try:
        c(x, w), c(x, w)
        assert backend.entered.wait(60)  # the worker holds magpy's lock, waiting at the gate
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        child = ctx.Process(target=_compile_in_the_foreground, args=(results,))
        child.start()
        child.join(60)
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive and child.exitcode == 0 and results.get(timeout=10)
    finally:
        gate.set()
    assert magpy.synchronize(60)


# ----------------------------------------------------------------- eager twins

def gated(x, gate_w, block_w):
    if (x @ gate_w).mean() > 0:
        x = x + torch.tanh(x @ block_w)
        if x.sum() > 0:
            x = x * 2
    return x


def newton(x):
    y = x.clone()
    while ((y * y - x).abs().max() > 1e-4):
        y = 0.5 * (y + x / y)
    return y


def _targets(gm, op: str) -> list:
    """The targets of ``gm``'s nodes of kind ``op`` and of the graphs its get_attrs give
    (an eager twin's are bound ``forward``s)."""
    found = []
    for node in gm.graph.nodes:
        if node.op == op:
            found.append(node.target)
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            value = getattr(value, "__self__", value)
            if isinstance(value, torch.fx.GraphModule):
                found += _targets(value, op)
    return found


@pytest.mark.parametrize("fn, make", [
    (gated, lambda s: (torch.randn(3, 4, generator=s), torch.randn(4, 1, generator=s),
                       torch.randn(4, 4, generator=s))),
    (newton, lambda s: (torch.rand(5, generator=s) + 0.5,)),
])
def test_eager_twin_runs_control_flow_as_python(fn, make):
    gen = torch.Generator().manual_seed(0)
    graph = magpy.explain(fn, *make(gen)).graphs[0]
    ops = _targets(graph, "call_function")
    assert any(op in PYTHON_CONTROL_FLOW for op in ops)
    twin = eager_twin(graph)
    assert not any(op in PYTHON_CONTROL_FLOW for op in _targets(twin, "call_function"))
    outcomes = set()
    for _ in range(12):
        args = make(gen)
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        assert len(placeholders) == len(args)
        got, want = twin(*args), graph(*args)
        for a, b in zip(got, want):
            same(a, b)
        outcomes.add(tuple(round(float(t.sum()), 3) for t in got))
    assert len(outcomes) > 1


def test_a_loop_that_does_not_run_gives_new_tensors_in_the_twin():
    graph = magpy.explain(newton, torch.rand(5) + 0.5).graphs[0]
    x = torch.ones(5)                    # converged from the start: the body never runs
    outs = eager_twin(graph)(x)
    assert all(o is not x for o in outs)
    same(outs[0], x)


class Recurrent(nn.Module):
    """An LSTM layer over time, outputs appended per step and stacked (a ``for`` loop that
    magpy records as one ``while_loop`` writing a buffer row by row)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(4, 6)

    def forward(self, x):
        h = x.new_zeros(x.size(1), 6)
        state, outs = (h, h), []
        for xt in x:
            state = self.cell(xt, state)
            outs.append(state[0])
        return torch.stack(outs)


def test_the_twin_writes_a_loops_own_buffer_in_place_and_the_graph_stays_functional():
    torch.manual_seed(0)
    model = Recurrent().eval()
    magpy.config.dynamic = True          # a symbolic length: the loop is one while_loop
    with torch.no_grad():
        graph = magpy.explain(model, torch.randn(5, 2, 4)).graphs[0]
        methods = _targets(graph, "call_method")
        assert "index_put" in methods and "index_put_" not in methods
        assert "index_put_" in _targets(eager_twin(graph), "call_method")
        assert "index_put_" not in _targets(graph, "call_method")   # the backend's graph is not touched
        c = magpy.compile(model, backend="eager")    # the eager backend runs the twin
        for n in (5, 3, 9, 2):
            x = torch.randn(n, 2, 4)
            same(c(x), model(x))
        assert magpy.stats(c).monitor_runs == 1


def test_a_train_step_compiles_in_the_background_with_inductor_and_trains_as_eager():
    # The whole step (forward, backward, SGD with momentum) is one joint graph; its compile
    # runs in the worker under the recording's grad mode.  Two copies of the model train on
    # the same batches: eager, and compiled with the defaults.
    def make():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def stepper(model, opt):
        def train_step(x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return train_step

    (model, opt), (ref, ref_opt) = make(), make()
    step, ref_step = magpy.compile(stepper(model, opt)), stepper(ref, ref_opt)
    gen = torch.Generator().manual_seed(1)
    for i in range(8):
        x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)
        torch.testing.assert_close(step(x, y), ref_step(x, y), rtol=1e-4, atol=1e-5)
        if i == 2:
            assert magpy.synchronize(600)   # step 3 reused step 2's record: its compile is done
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    st = magpy.stats(step)
    assert st.compiled_in_background == 1 and st.graphs_per_call == 1 and st.monitor_runs == 2


def test_a_transformers_model_with_its_defaults_compiles_in_the_background():
    # BERT as users build it (SDPA attention, default settings), magpy's defaults: inductor,
    # automatic dynamic sizes, background compilation.  Every call is compared with eager.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    c = magpy.compile(model)
    gen = torch.Generator().manual_seed(0)

    def check(length: int):
        ids = torch.randint(0, 100, (2, length), generator=gen)
        got, want = c(input_ids=ids), model(input_ids=ids)
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=1e-4, atol=1e-4)

    with torch.no_grad():
        check(8)
        check(8)                         # first reuse: the compile starts
        assert magpy.synchronize(600)
        check(8)                         # the compiled graph takes over
        assert magpy.stats(c).compiled_in_background == 1
        model.embeddings.word_embeddings.weight.mul_(1.5)   # changed state
        check(8)
        for length in (12, 16, 9):       # a new length: a symbolic record, its own compile
            check(length)
        assert magpy.synchronize(600)
        check(11)
    st = magpy.stats(c)
    assert st.monitor_runs == 2 and st.compiled_in_background == 2 and st.eager_runs == 0
