"""magpy on CUDA (issue 28), differential against eager as everywhere else.

Tests marked ``cuda`` need a GPU and are skipped without one (``pytest -m cuda`` runs only
them).  What a CPU can check of the same machinery runs everywhere, unmarked: device-aware
guards with ``meta`` tensors (a record made for one device misses for another), devices as
guarded values, a program that moves tensors to another device, and the device in the guard's
words (``magpy.explain``).

Inductor compiles cost seconds each on a GPU: only a few cases use that backend; the others use
backend "eager" (the same capture, guards and mocks, the graph run as plain Python).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import magpy
from magpy.backends import autopilot
from magpy.backends.gpu import cuda_graphs as cudagraphs
from tests.harness.compile_harness import (
    ANY,
    MOCK,
    MONITOR,
    after,
    again,
    check_compiled,
    first,
    fresh,
    fresh_magpy,  # noqa: F401 - autouse fixture
    standard,
)

CUDA = torch.cuda.is_available()
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
RTOL, ATOL = 1e-4, 1e-5   # inductor reorders float math


def needs_cuda(test):
    """Marked ``cuda`` and skipped where no CUDA device is available."""
    return pytest.mark.cuda(pytest.mark.skipif(not CUDA, reason="needs a CUDA device")(test))


def devices(value) -> list:
    """The devices of the tensors in ``value`` (nested tuples/lists/dicts), in order: ``same`` and
    ``close`` compare values, and a result on the wrong device must fail too."""
    if isinstance(value, torch.Tensor):
        return [value.device]
    if isinstance(value, (tuple, list)):
        return [d for v in value for d in devices(v)]
    if isinstance(value, dict):
        return [d for v in value.values() for d in devices(v)]
    if hasattr(value, "to_tuple"):   # transformers' ModelOutput
        return devices(value.to_tuple())
    return []


def same_devices(trace) -> None:
    for i, (eager, compiled) in enumerate(trace.results):
        assert devices(eager) == devices(compiled), f"step {i}: {devices(compiled)} vs eager {devices(eager)}"


def on(device):
    """An ``args`` of the harness: one [4, 8] tensor drawn on the CPU (seeded), moved to ``device``."""
    return lambda state: (torch.randn(4, 8).to(device),)


# ------------------------------------------------------------------------------ on any machine


def affine(x):
    return (x * 2).sin() + 1


def test_record_for_cpu_misses_for_meta():
    """The tensor guard checks the device: a record made for CPU inputs must not serve a meta
    tensor of the same shape and dtype (nor the other way round)."""
    compiled = magpy.compile(affine, backend="eager")
    x = torch.randn(4)
    assert torch.equal(compiled(x), affine(x))
    assert torch.equal(compiled(x), affine(x))
    meta = torch.empty(4, device="meta")
    out = compiled(meta)
    assert out.device.type == "meta" and out.shape == (4,)
    s = magpy.stats(compiled)
    assert (s.monitor_runs, s.records) == (2, 2), s
    out = compiled(meta)              # its own record now
    assert out.device.type == "meta"
    assert torch.equal(compiled(x), affine(x))   # and the CPU record still serves CPU inputs
    s = magpy.stats(compiled)
    assert (s.monitor_runs, s.mock_runs) == (2, 3), s


def to_device(x, device):
    return x.to(device) * 2


def test_device_argument_is_guarded_by_value():
    """A ``torch.device`` the program reads is guarded by value: a record that moved to one
    device must not replay for another."""
    compiled = magpy.compile(to_device, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        assert compiled(x, torch.device("cpu")).device.type == "cpu"
    out = compiled(x, torch.device("meta"))
    assert out.device.type == "meta"
    assert magpy.stats(compiled).monitor_runs == 2
    assert compiled(x, torch.device("cpu")).device.type == "cpu"


def split_devices(x):
    moved = x.to("meta")
    return moved * 2, x + 1


def test_program_moving_tensors_to_another_device():
    """A ``.to(device)`` inside the program is part of the graph: the mock's results are on the
    devices eager puts them on."""
    compiled = magpy.compile(split_devices, backend="eager")
    for seed in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        moved, kept = compiled(x)
        assert moved.device.type == "meta" and moved.shape == (3,)
        assert torch.equal(kept, x + 1)
    s = magpy.stats(compiled)
    assert (s.monitor_runs, s.mock_runs, s.eager_runs) == (1, 2, 0), s


def test_explain_names_the_device():
    """The guard's words (``magpy.explain``) say which device a tensor input must be on."""
    text = str(magpy.explain(affine, torch.empty(4, device="meta")))
    assert "meta" in text


def test_instruction_set_probe_only_for_graphs_with_cpu_kernels(monkeypatch):
    """Inductor's C++ instruction-set probe (magpy.backends.warm) runs for graphs of CPU tensors only:
    on a GPU machine its Python children cost ~50 s of a graph's first compile (48.5 s for an
    MLP of CUDA tensors, 0.8 s for torch.compile's)."""
    from magpy.backends import registry, warm
    probed = []
    monkeypatch.setattr(warm, "inductor_patch", lambda: probed.append(1) or {})
    gm = torch.fx.symbolic_trace(affine)
    registry._inductor_options(gm, [torch.empty(4, device="meta")])
    assert probed == []
    registry._inductor_options(gm, [torch.empty(4), torch.empty(4, device="meta")])
    registry._inductor_options(gm, [])
    assert probed == [1, 1]


def test_checks_go_into_graphs_only_on_the_cpu():
    """A failed in-graph check (``_assert_async``) on a GPU is a device-side assert that leaves
    the CUDA context unusable (seen on an H200: every later CUDA call of the process failed),
    so checks on GPU tensors read the value back instead (magpy.graphs.assertions.checks_in_graph)."""
    from magpy.graphs.assertions import checks_in_graph
    assert checks_in_graph(torch.ones(2), 1.5) and checks_in_graph()
    assert not checks_in_graph(torch.ones(2), torch.empty(2, device="meta"))


def _asserts_positive(x):
    assert (x > 0).all(), "not positive"
    return x * 2


def _clipped(x):
    n = x.abs().max().item()
    return x * min(n, 1.5)   # a check of which argument min() gives back


# ------------------------------------------------------------------------------ on a GPU


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + x


def small_on_cuda():
    return Small().cuda(), None


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compile_on_cuda(backend):
    trace = check_compiled(small_on_cuda, standard(on("cuda")), backend=backend, rtol=RTOL, atol=ATOL)
    same_devices(trace)


def function(fn):
    """A ``build`` for a plain function without state."""
    return lambda: (fn, None)


@needs_cuda
def test_record_on_cuda_misses_for_cpu_inputs():
    steps = [first(on("cuda")), again(), fresh(on("cuda")),
             fresh(on("cpu"), name="CPU input: the CUDA record must miss", expect=MONITOR),
             fresh(on("cuda"), seed=2, name="CUDA again: its record"),
             fresh(on("cpu"), seed=3, name="CPU again: its own record")]
    trace = check_compiled(function(affine), steps, expect_records=2)
    same_devices(trace)


@needs_cuda
@two_gpus
def test_record_on_cuda0_misses_for_cuda1():
    steps = [first(on("cuda:0")), again(),
             fresh(on("cuda:1"), name="cuda:1 input: the cuda:0 record must miss", expect=MONITOR),
             fresh(on("cuda:0"), seed=2), fresh(on("cuda:1"), seed=3)]
    trace = check_compiled(function(affine), steps, expect_records=2)
    same_devices(trace)


def round_trip(x):
    on_gpu = x.to("cuda")
    y = (on_gpu * 2).relu()
    return y.cpu() + 1, y


@needs_cuda
def test_program_moving_tensors_between_devices():
    """``.to("cuda")`` and ``.cpu()`` inside the program: graph operations, results on the
    devices eager puts them on."""
    trace = check_compiled(function(round_trip), standard(on("cpu")))
    same_devices(trace)


def host_reads(x):
    scale = x.sum().item()
    row = x[0].tolist()
    host = x.cpu()
    return x * scale, row, host.mean(), float(x.max())


@needs_cuda
def test_item_tolist_cpu_of_cuda_tensors():
    """Values read back to the host: an eager step (or a value kept in the graph), as on CPU."""
    steps = [first(on("cuda")), again(expect=ANY), fresh(on("cuda"), expect=ANY)]
    trace = check_compiled(function(host_reads), steps, fullgraph=False)
    same_devices(trace)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_inside_program(dtype):
    def build():
        w = torch.randn(8, 8, device="cuda")

        def mm(x):
            with torch.autocast("cuda", dtype=dtype):
                y = (x @ w).relu()
            return y, y.float() + x
        return mm, {"w": w}
    trace = check_compiled(build, standard(on("cuda")), rtol=1e-2, atol=1e-2)
    assert trace.results[0][1][0].dtype == dtype


def plain_mm(x, w):
    return x @ w + 1


@needs_cuda
def test_compiled_call_under_autocast():
    """The caller's autocast is part of the guard: a record made under it must not serve a call
    outside it (whose result is float32, not float16)."""
    fp16 = lambda: torch.autocast("cuda", dtype=torch.float16)  # noqa: E731
    args = lambda state: (torch.randn(4, 8, device="cuda"), torch.randn(8, 8, device="cuda"))  # noqa: E731
    steps = [first(args, ctx=fp16), again(ctx=fp16), fresh(args, ctx=fp16),
             fresh(args, seed=2, name="outside autocast: the record must miss", expect=MONITOR),
             fresh(args, seed=3, ctx=fp16, name="under autocast again: its record")]
    trace = check_compiled(function(plain_mm), steps, rtol=1e-2, atol=1e-2)
    assert trace.results[0][1].dtype == torch.float16 and trace.results[3][1].dtype == torch.float32


class Dropping(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(8, 8), nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)) * 2


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_dropout_in_training_draws_eagers_numbers(backend):
    """Dropout in training mode after ``torch.manual_seed``: the same mask as eager, and the
    CUDA generator left where eager leaves it, on every call (first, repeated, fresh)."""
    torch.manual_seed(0)
    model = Dropping().cuda().train()
    compiled = magpy.compile(model, backend=backend)
    for seed in (0, 0, 1):
        x = torch.randn(4, 8, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        torch.manual_seed(100 + seed)
        expected, state = model(x), torch.cuda.get_rng_state()
        torch.manual_seed(100 + seed)
        got = compiled(x)
        assert torch.equal(got, expected), f"seed {seed}: different dropout masks"
        assert torch.equal(torch.cuda.get_rng_state(), state), f"seed {seed}: generator left elsewhere"
    assert magpy.stats(compiled).mock_runs == 2


def side_stream(stream):
    def fn(x):
        event = torch.cuda.Event()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            y = x * 2
            event.record(stream)
        torch.cuda.current_stream().wait_event(event)
        return y + 1
    return fn


@needs_cuda
def test_stream_and_event_in_program():
    """Work queued on a side stream, joined by an event: the result eager computes (streams and
    events are eager steps or graph state, never dropped)."""
    trace = check_compiled(lambda: (side_stream(torch.cuda.Stream()), None),
                           [first(on("cuda")), again(expect=None), fresh(on("cuda"), expect=None)],
                           fullgraph=False)
    same_devices(trace)


def synchronizing(x):
    y = x * 2
    torch.cuda.synchronize()
    return y.sum(), y + 1


@needs_cuda
def test_synchronize_inside_program():
    trace = check_compiled(function(synchronizing),
                           [first(on("cuda")), again(expect=ANY), fresh(on("cuda"), expect=ANY)],
                           fullgraph=False)
    same_devices(trace)


@needs_cuda
def test_transformers_bert_on_cuda():
    """BertModel from a tiny config (benchmarks.models.hf.bert("test")), inductor, no_grad."""
    pytest.importorskip("transformers")
    from benchmarks.models import hf

    def build():
        model, inputs = hf.bert("test")
        return model.eval().cuda(), {k: v.cuda() for k, v in inputs.items()}
    kwargs = lambda inputs: dict(inputs)  # noqa: E731
    steps = [first(kwargs=kwargs, ctx=torch.no_grad), again(ctx=torch.no_grad)]
    trace = check_compiled(build, steps, backend="inductor", rtol=1e-3, atol=1e-3)
    same_devices(trace)


# ------------------------------------------------------------------------------ CUDA graphs


@pytest.fixture
def cuda_graphs():
    """``magpy.config.cuda_graphs`` on (fresh_magpy restores it), and a count of the replays."""
    magpy.config.cuda_graphs = True
    replays = []
    if CUDA:
        original = torch.cuda.CUDAGraph.replay

        def counted(graph):
            replays.append(graph)
            return original(graph)
        torch.cuda.CUDAGraph.replay = counted
    yield replays
    if CUDA:
        torch.cuda.CUDAGraph.replay = original


def test_cuda_graphs_option_is_a_flag():
    with pytest.raises(ValueError):
        magpy.config.cuda_graphs = "auto"
    assert magpy.config.cuda_graphs is False


def test_cuda_graphs_leave_cpu_graphs_alone(cuda_graphs):
    """On CPU tensors the option changes nothing: the graphs run as compiled."""
    check_compiled(lambda: (Small(), None), more_calls(on("cpu"), ctx=torch.no_grad))
    assert not cuda_graphs


class SimulatedGraph:
    """A capture on the CPU: replay() recomputes into the captured outputs from the captured
    inputs, as a CUDA graph does (same buffers, same addresses)."""

    def __init__(self, fn, inputs):
        self.fn, self.inputs = fn, inputs
        self.outputs = fn(*inputs)

    def replay(self):
        for out, new in zip(self.outputs, self.fn(*self.inputs)):
            out.copy_(new)


@pytest.fixture
def simulated(monkeypatch):
    """``magpy.backends.gpu.cuda_graphs`` on CPU tensors, with :class:`SimulatedGraph` captures: the list of
    captures made."""
    captures = []

    def capture(fn, inputs):
        captures.append(SimulatedGraph(fn, inputs))
        return captures[-1], captures[-1].outputs
    monkeypatch.setattr(cudagraphs, "captured", capture)
    monkeypatch.setattr(torch.cuda, "get_rng_state", torch.get_rng_state)
    return captures


def mlp_graph():
    torch.manual_seed(0)
    layer1, layer2 = nn.Linear(8, 16), nn.Linear(16, 8)
    params = [layer1.weight, layer1.bias, layer2.weight, layer2.bias]

    def graph(x, w1, b1, w2, b2):   # as backends return it: the graph's outputs as a list
        return [torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1, b1)), w2, b2)]
    return graph, params


def test_replay_reads_stable_inputs_in_place_and_copies_the_others(simulated):
    """The state machine of :class:`magpy.backends.gpu.cuda_graphs.Replay` on the CPU: plain first call,
    capture on the second, replays after; fresh inputs are copied in, results are copies that
    survive the next replay, a moved parameter makes a new capture."""
    graph, params = mlp_graph()
    replay = cudagraphs.Replay(graph)
    xs = [torch.randn(4, 8) for _ in range(6)]
    with torch.no_grad():
        outs = [replay(x, *params) for x in xs]
        assert len(simulated) == 1
        assert [i for i, _ in replay.fixed] == [1, 2, 3, 4]   # the parameters; x is copied in
        for x, out in zip(xs, outs):
            assert torch.equal(out[0], graph(x, *params)[0])
        params[0] = nn.Parameter(params[0].detach() * 2)      # a parameter at a new address
        assert torch.equal(replay(xs[0], *params)[0], graph(xs[0], *params)[0])
        assert len(simulated) == 2
        assert torch.equal(replay(xs[1], *params)[0], graph(xs[1], *params)[0])
        other = torch.randn(2, 8)                             # another shape: run plainly
        assert torch.equal(replay(other, *params)[0], graph(other, *params)[0])


def test_replay_runs_plainly_what_a_capture_would_get_wrong(simulated):
    """Graphs that update an input, draw random numbers or need autograd never get captured."""
    graph, params = mlp_graph()

    def updating(x, total):
        total.add_(x)
        return [total * 2]

    def dropping(x):
        return [torch.nn.functional.dropout(x, 0.5)]
    cases = [(updating, lambda: (torch.ones(3), torch.zeros(3)), torch.no_grad),
             (dropping, lambda: (torch.ones(3),), torch.no_grad),
             (graph, lambda: (torch.randn(4, 8), *params), torch.enable_grad)]
    for fn, args, mode in cases:
        replay = cudagraphs.Replay(fn)
        with mode():
            for _ in range(4):
                replay(*args())
        assert not simulated, fn.__name__


def more_calls(args, n=3, ctx=None):
    """first, again, then ``n`` fresh inputs: the capture is the second call, replays after."""
    return [first(args, ctx=ctx), again(ctx=ctx)] + [fresh(args, seed=s, ctx=ctx) for s in range(1, n + 1)]


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_cuda_graphs_replay_equals_eager(cuda_graphs, backend):
    trace = check_compiled(small_on_cuda, more_calls(on("cuda"), ctx=torch.no_grad), backend=backend,
                           rtol=RTOL, atol=ATOL, expect_records=1)
    same_devices(trace)
    assert cuda_graphs, "no CUDA graph was replayed"


@needs_cuda
def test_cuda_graph_outputs_survive_the_next_replay(cuda_graphs):
    torch.manual_seed(0)
    model = Small().cuda()
    compiled = magpy.compile(model, backend="eager")
    xs = [torch.randn(4, 8, device="cuda") for _ in range(5)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, out in zip(xs, outs):
            assert torch.allclose(out, model(x), rtol=RTOL, atol=ATOL)
    assert len(cuda_graphs) >= 2


def accumulate(x, total):
    total.add_(x)
    return total * 2


@needs_cuda
def test_cuda_graphs_skip_graphs_that_update_inputs(cuda_graphs):
    """A graph that updates an input in place runs as compiled (a capture would update its own
    copy of the input, not the program's tensor)."""
    def build():
        total = torch.zeros(4, 8, device="cuda")
        return (lambda x: accumulate(x, total)), {"total": total}
    check_compiled(build, more_calls(on("cuda")))
    assert not cuda_graphs


@needs_cuda
def test_cuda_graphs_skip_graphs_that_draw_random_numbers(cuda_graphs):
    """Dropout in training draws from the CUDA generator: a replay would repeat one draw."""
    torch.manual_seed(0)
    model = Dropping().cuda().train()
    compiled = magpy.compile(model, backend="eager")
    with torch.no_grad():
        outs = [compiled(torch.ones(4, 8, device="cuda")) for _ in range(4)]
    masks = {tuple((o != 0).flatten().tolist()) for o in outs}
    assert len(masks) > 1, "every call drew the same dropout mask"
    assert not cuda_graphs


@needs_cuda
def test_cuda_graphs_skip_graphs_that_need_autograd(cuda_graphs):
    """With grad on and parameters requiring grad, the outputs need their autograd graph."""
    torch.manual_seed(0)
    model = Small().cuda()
    compiled = magpy.compile(model, backend="eager")
    for seed in range(4):
        x = torch.randn(4, 8, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        out = compiled(x)
        assert out.grad_fn is not None
        assert torch.allclose(out, model(x), rtol=RTOL, atol=ATOL)
    assert not cuda_graphs


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_failing_check_on_cuda_leaves_cuda_usable(backend):
    """The program's assertion and magpy's own check (min() giving back the other argument)
    fail on CUDA tensors: the program's AssertionError, eager's results, and CUDA still works
    afterwards (no device-side assert)."""
    for program, calls in ((_asserts_positive, [1.0, 2.0, -1.0, 3.0]), (_clipped, [1.0, 1.0, 2.0, 0.5])):
        magpy.reset()
        compiled = magpy.compile(program, backend=backend)
        for v in calls:
            x = torch.full((3,), v, device="cuda")
            try:
                want = program(x)
            except AssertionError:
                with pytest.raises(AssertionError, match="not positive"):
                    compiled(x)
                continue
            torch.testing.assert_close(compiled(x), want)
        torch.cuda.synchronize()
        assert torch.ones(2, device="cuda").sum().item() == 2.0


# ------------------------------------------------- counted loops (magpy.backends.gpu.host_loops)


def lstm_lm_on_cuda():
    from benchmarks.control_flow import LSTMLanguageModel
    m = LSTMLanguageModel(2, vocab=50, hidden=32).eval().cuda()
    return m, m


@pytest.fixture
def loop_captures(monkeypatch):
    """The CUDA graphs magpy.backends.gpu.host_loops captured (one step of a counted loop each)."""
    made = []
    capture = cudagraphs.captured

    def counting(fn, inputs):
        made.append(fn)
        return capture(fn, inputs)
    monkeypatch.setattr(cudagraphs, "captured", counting)
    return made


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_counted_loops_replay_captured_steps(loop_captures, backend):
    """An LSTM language model's time loops on CUDA: each step one replay of a captured step
    (no condition read back), equal to eager over lengths that grow past the capture's room,
    and after its weights change in place."""
    def tokens(n):
        return lambda state: (torch.randint(0, 50, (n, 3), device="cuda"),)

    def scale(m):
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(0.9)
    steps = [first(tokens(5), ctx=torch.no_grad), fresh(tokens(7), expect=MONITOR, ctx=torch.no_grad)]
    steps += [fresh(tokens(n), seed=i, ctx=torch.no_grad) for i, n in enumerate([7, 12, 3, 40, 6], start=2)]
    steps.append(after(scale, args=tokens(9), expect=MOCK, ctx=torch.no_grad))
    trace = check_compiled(lstm_lm_on_cuda, steps, backend=backend, rtol=RTOL, atol=ATOL, expect_records=2)
    same_devices(trace)
    assert len(loop_captures) >= 2, "no step of a loop was captured"


# ------------------------- gathered predicates (magpy.backends.gpu.batched_predicates)


def blockdrop_on_cuda():
    from benchmarks.control_flow import BlockDrop
    torch.manual_seed(0)
    m = BlockDrop(4).eval().cuda()
    return m, m


@needs_cuda
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_gates_read_back_at_once(monkeypatch, backend):
    """BlockDrop on CUDA: its four gates read back to the host in one copy (each cond then
    reads a CPU predicate), equal to eager on every call."""
    from benchmarks.control_flow import image
    from magpy.backends.gpu import batched_predicates
    groups = []
    gathered = batched_predicates.gathered

    def counting(gm):
        out = gathered(gm)
        groups.extend(len(n.args[0]) for n in out.graph.nodes if out is not gm and n.target is torch.stack)
        return out
    monkeypatch.setattr(batched_predicates, "gathered", counting)

    def images(seed):
        return lambda state: (image(seed).cuda(),)
    steps = [first(images(0), ctx=torch.no_grad)] + [fresh(images(s), seed=s, ctx=torch.no_grad)
                                                     for s in range(1, 6)]
    trace = check_compiled(blockdrop_on_cuda, steps, backend=backend, rtol=RTOL, atol=ATOL, expect_records=1)
    same_devices(trace)
    assert groups and set(groups) == {4}


@needs_cuda
def test_autopilot_tries_blockdrop_paired(monkeypatch):
    """BlockDrop's graph (a cond per block) is tried with every version on each call's inputs;
    every result equals eager's, during the trial and after."""
    from benchmarks.control_flow import image
    monkeypatch.setattr(magpy.config, "autopilot", True)
    monkeypatch.setattr(magpy.config, "background_compile", False)
    model, _ = blockdrop_on_cuda()
    compiled = magpy.compile(model)
    with torch.no_grad():
        for seed in range(autopilot.TRIAL_CALLS + 2):
            x = image(seed).cuda()
            torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    trial, = compiled._magpy_cache.records[0].trials
    assert trial.paired and trial.kept is not None, trial.describe()


# --------------------------------------------------- the autopilot's third version: CUDA graphs


def test_autopilot_keeps_the_replay_where_fastest(simulated, monkeypatch):
    """Where a compiled graph qualifies for a CUDA graph (here: CPU tensors taken for CUDA ones,
    captures simulated), the autopilot tries it replayed beside the compiled graph and eager,
    and keeps the fastest; results equal eager's on every call."""
    import time

    from magpy.records import record
    replaying = []

    class FastReplay(SimulatedGraph):
        def replay(self):
            replaying.append(True)
            try:
                super().replay()
            finally:
                replaying.pop()

    def capture(fn, inputs):
        simulated.append(FastReplay(fn, inputs))
        return simulated[-1], simulated[-1].outputs

    def slow(fn):
        def run(*args):
            if not replaying:
                time.sleep(0.02)
            return fn(*args)
        return run
    twin = record._twin
    monkeypatch.setattr(cudagraphs, "captured", capture)
    monkeypatch.setattr(cudagraphs, "_static_cuda_tensor", lambda v: isinstance(v, torch.Tensor))
    monkeypatch.setattr(record, "_twin", lambda gm, loops: slow(twin(gm, loops)))
    monkeypatch.setattr(magpy.config, "autopilot", True)
    graph, params = mlp_graph()
    compiled = magpy.compile(lambda x, *ps: graph(x, *ps)[0], backend=lambda gm, ex: slow(gm.forward))
    with torch.no_grad():
        for i in range(14):
            x = torch.randn(4, 8)
            assert torch.equal(compiled(x, *params), graph(x, *params)[0]), i
    assert magpy.stats(compiled).kept == {"<lambda> + CUDA graphs": 1}, magpy.stats(compiled).kept
