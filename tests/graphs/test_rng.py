"""Random numbers as eager draws them (``magpy.graphs.rng``): whatever magpy does on a call (a
recording, the first reuse, a background compile landing, the autopilot's trial, a graph
break, a continuation, a mock that misses or fails and runs the call again), each random
operation returns eager's numbers and the generators end where eager leaves them.

Each test runs a program eagerly and compiled over many calls, from the same seed (reseeded
before every call, or once for the whole sequence), and compares every call's result and
the generators' state after it (``torch.get_rng_state()``, CUDA's too on a GPU).  Results
are bit-exact with backend "eager"; Inductor's fused arithmetic may differ from eager's in
the last bit, far below what other random numbers would change.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import magpy
from tests.harness.compile_harness import fresh_magpy  # noqa: F401 - autouse fixture

SEED = 1337
CALLS = 12   # a recording, the first reuse, the background compile landing, the whole trial and after

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def generators_state(device: str) -> tuple:
    cpu = torch.get_rng_state()
    return (cpu, torch.cuda.get_rng_state()) if device == "cuda" else (cpu,)


def calls(fn, args_of, n: int, device: str = "cpu", reseed: bool = True, between=None) -> list:
    """``fn``'s results and the generators' states after each of ``n`` calls (``args_of(i)``
    the arguments of call ``i``), reseeded before each call or once before all;
    ``between(i)`` runs after call ``i``."""
    out = []
    torch.manual_seed(SEED)
    for i in range(n):
        if reseed:
            torch.manual_seed(SEED)
        out.append((fn(*args_of(i)), generators_state(device)))
        if between is not None:
            between(i)
    return out


def same_draws(got: list, want: list, backend: str) -> None:
    for i, ((g, g_state), (w, w_state)) in enumerate(zip(got, want, strict=True)):
        for a, b in zip(g_state, w_state, strict=True):
            assert torch.equal(a, b), f"call {i}: the generators' state differs from eager's"
        tol = dict(rtol=0, atol=0) if backend == "eager" else dict(rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g, w, **tol, msg=lambda m: f"call {i}: {m}")


def differential(fn, args_of, backend: str, n: int = CALLS, device: str = "cpu", reseed: bool = True,
                 compiled_fn=None, compiled_args_of=None, tried: bool = True):
    """Run ``fn`` eagerly and compiled and compare every call; the compiled callable.  Where
    the program has state of its own, ``compiled_fn`` is a copy of ``fn`` to compile and
    ``compiled_args_of`` gives copies of the arguments.  ``tried``: Inductor's graphs are
    called often enough for the autopilot's trial to end."""
    want = calls(fn, args_of, n, device, reseed)
    compiled = magpy.compile(compiled_fn or fn, backend=backend)
    background = magpy.config.background_compile

    def landing(i):
        if background:   # a record's first reuse starts its compile: it lands on the call after
            assert magpy.synchronize(120)

    same_draws(calls(compiled, compiled_args_of or args_of, n, device, reseed, landing), want, backend)
    stats = magpy.stats(compiled)
    if background and backend == "inductor":
        assert stats.compiled_in_background
    if backend == "inductor" and tried:   # the autopilot's trial ran both versions, then kept one
        assert stats.kept
    return compiled


@pytest.fixture(params=[False, True], ids=["foreground", "background"])
def background(request):
    """Both ways graphs compile: while recording (the tests' default) and in the background
    worker from the first reuse on (the user's default)."""
    magpy.config.background_compile = request.param
    return request.param


BACKENDS = ["eager", "inductor"]


# --------------------------------------------------------------------------- the programs

def reparametrize(mu, logvar):
    # A VAE's sampling step, as ParityBench's models write it.
    std = logvar.mul(0.5).exp_()
    eps = std.new(std.size()).normal_()
    return eps.mul(std).add_(mu)


def reparametrize_like(mu, logvar):
    std = torch.exp(0.5 * logvar)
    return mu + torch.randn_like(std) * std


class Noisy(nn.Module):
    """Every common way to draw: dropout (module and functional), ``torch.rand``,
    ``randn_like``, ``bernoulli``, ``uniform_`` and ``normal_`` on a new tensor."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.4)

    def forward(self, x):
        h = self.drop(self.lin(x))
        h = h + torch.rand(h.shape, device=h.device) + torch.randn_like(h)
        h = h * torch.bernoulli(torch.full_like(h, 0.5))
        h = h + x.new(x.size()).normal_() + torch.empty_like(x).uniform_(-1, 1)
        return F.dropout(h, 0.2, self.training)


def two(i):
    return torch.randn(4, 6), torch.randn(4, 6)


def one(i):
    return (torch.randn(4, 6),)


# --------------------------------------------------------------------------- every call

def test_reparametrize_draws_eagers_numbers_on_every_call():
    # Reseeded before each call: the first reuse drew other numbers than eager's.
    compiled = differential(reparametrize, two, "eager")
    stats = magpy.stats(compiled)
    assert stats.monitor_runs == 1 and stats.mock_runs == CALLS - 1 and not stats.break_reasons


def test_reparametrize_with_inductor(background):
    differential(reparametrize, two, "inductor")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_kind_of_draw_in_training_mode(backend, background):
    torch.manual_seed(0)
    model = Noisy().train()
    differential(model, one, backend, compiled_fn=copy.deepcopy(model))


@pytest.mark.parametrize("backend", BACKENDS)
def test_unseeded_sequence_is_eagers_sequence(backend, background):
    # Seeded once: every call goes on from where the one before left the generator.
    torch.manual_seed(0)
    model = Noisy().train()
    differential(model, one, backend, reseed=False, compiled_fn=copy.deepcopy(model))


def test_train_and_eval_alternating():
    torch.manual_seed(0)
    model = Noisy()
    twin = copy.deepcopy(model)

    def run(m):
        def call(x, i):
            m.train(i % 3 != 2)   # eval every third call: no dropout there
            return m(x)
        return call

    xs = [torch.randn(4, 6) for _ in range(CALLS)]
    want = calls(run(model), lambda i: (xs[i], i), CALLS, reseed=False)
    got = calls(run(magpy.compile(twin, backend="eager")), lambda i: (xs[i], i), CALLS, reseed=False)
    same_draws(got, want, "eager")


# --------------------------------------------------------------------------- what the graph keeps

def draws_unused(x):
    torch.rand(3)   # its numbers are not used, but the generator moved on
    return x + torch.rand(x.shape)


def test_an_unused_draw_still_advances_the_generator():
    differential(draws_unused, one, "eager", reseed=False)


GEN = torch.Generator()


def from_generator(x, gen):
    return x + torch.rand(x.shape, generator=gen) + torch.rand(x.shape)


def test_an_explicit_generator_draws_its_own_sequence():
    # Neither reseeded: the graph must not replay the recording's numbers as a constant.
    own = [torch.Generator().manual_seed(7) for _ in range(2)]
    xs = [torch.randn(4, 6) for _ in range(CALLS)]
    compiled = differential(from_generator, lambda i: (xs[i], own[0]), "eager", reseed=False,
                            compiled_args_of=lambda i: (xs[i], own[1]))
    assert torch.equal(own[0].get_state(), own[1].get_state())
    assert magpy.stats(compiled).mock_runs == CALLS - 1


# --------------------------------------------------------------------------- calls that run again

def clipped_noise(x):
    noise = torch.rand(3, device=x.device)
    n = x.abs().max().item()
    return noise * min(n, 1.5)   # the graph checks which one min() gives back


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_record_that_misses_after_drawing(backend):
    # Every other call min() picks the other argument: the graph drew, then its check failed,
    # and the call tried the other record or recorded again, from the same numbers.
    def args_of(i):
        return (torch.rand(5) + (i % 2) * 2,)

    compiled = differential(clipped_noise, args_of, backend, reseed=False, tried=False)
    stats = magpy.stats(compiled)
    assert (stats.records, stats.graph_count, stats.break_reasons) == (2, 2, [])


def noisy_rows(x):
    # ViLT's visual embedding: a draw, then a branch on tensor data, in a loop over lists.
    outs = []
    for a, b in zip([1.0, 2.0], [3.0, 4.0]):
        noise = torch.rand(1)
        if x.sum() - a * 8 <= 0:
            outs.append(x * b + noise)
        else:
            outs.append(x - b)
    return torch.stack(outs)


def test_a_branch_after_a_draw_is_a_miss_not_an_effect():
    # A draw is taken back where a check fails: the other outcome is another record, where
    # a continuation would have been needed (and could not be written: the call ran eagerly).
    def args_of(i):
        return (torch.full((2, 4), (0.1, 1.5, 3.0)[i % 3]),)

    compiled = differential(noisy_rows, args_of, "eager", reseed=False)
    stats = magpy.stats(compiled)
    assert (stats.records, stats.mock_runs, stats.break_reasons) == (3, CALLS - 3, [])


def checked(x):
    noise = torch.rand(x.shape)
    torch._assert((x > 0).all(), "x must be positive")
    return x + noise


def test_a_failing_assertion_after_drawing():
    # The graph drew, then the program's assertion failed in the graph: the call runs
    # eagerly and raises, drawing once, as eager.
    compiled = magpy.compile(checked, backend="eager")
    x = torch.rand(4) + 1
    for call in (checked, compiled):   # (the record)
        call(x)
    for _ in range(3):
        states = []
        for call in (checked, compiled):
            torch.manual_seed(SEED)
            with pytest.raises(AssertionError, match="positive"):
                call(-x)
            states.append(torch.get_rng_state())
        assert torch.equal(*states)
    stats = magpy.stats(compiled)
    assert (stats.graph_count, stats.eager_runs, stats.break_reasons) == (1, 3, [])


def test_a_compiled_graph_that_fails_after_drawing():
    # The backend's callable drew, then failed: magpy runs the call eagerly, from where the
    # generator was before the graph.
    def breaks_after_drawing(gm, example_inputs):
        def run(*args):
            gm(*args)
            raise RuntimeError("the compiled graph failed")
        return run

    with pytest.warns(RuntimeWarning, match="compiled graph failed"):
        differential(reparametrize_like, two, breaks_after_drawing)


def test_a_backend_that_runs_the_graph_while_compiling(background):
    # (torch.jit.trace does: the torchscript backend's fallback.)  In the background it would
    # draw beside the program: a graph that draws compiles in the calling thread instead.
    def tracing(gm, example_inputs):
        gm(*example_inputs)
        return gm.forward

    differential(reparametrize_like, two, tracing, reseed=False)


# --------------------------------------------------------------------------- breaks, branches, loops

def around_a_break(x):
    a = x * torch.rand(x.shape)
    s = a.sum().item()          # a graph break: an eager step between two graphs
    b = torch.randn_like(x) * s
    if s > 0:                   # steered by the step: continuations where it changes
        b = b + torch.rand(x.shape)
    return F.dropout(a + b, 0.5, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_around_a_graph_break_and_its_continuations(backend):
    def args_of(i):
        return (torch.randn(4, 6) * (1 if i % 4 < 2 else -1),)

    compiled = differential(around_a_break, args_of, backend, reseed=False)
    assert magpy.stats(compiled).breaks


def branches(x):
    if x.sum() > 0:             # an arm that draws: a break, not a torch.cond of both arms
        y = x + torch.rand(x.shape)
    else:
        y = x - torch.randn(x.shape)
    for _ in range(3):          # a counted loop, unrolled
        y = F.dropout(y, 0.3, True)
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_in_branches_and_loops(backend):
    def args_of(i):
        return (torch.randn(4, 6) + (2 if i % 3 else -2),)

    differential(branches, args_of, backend, reseed=False)


def while_draws(x):
    while x.sum() < 10:         # a while on tensor data whose body draws: not a while_loop
        x = x + torch.rand(x.shape)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_in_a_while_loop_on_tensor_data(backend):
    differential(while_draws, one, backend, reseed=False)


# --------------------------------------------------------------------------- training

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.drop, self.l2 = nn.Linear(6, 8), nn.Dropout(0.3), nn.Linear(8, 2)

    def forward(self, x):
        return self.l2(self.drop(torch.relu(self.l1(x))))


def train_step(model, opt, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_train_step_with_dropout(backend, background):
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    xs = [torch.randn(4, 6) for _ in range(CALLS)]
    differential(train_step, lambda i: (model, opts[0], xs[i]), backend, reseed=False,
                 compiled_args_of=lambda i: (twin, opts[1], xs[i]))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


class Checkpointed(Net):
    def block(self, x):
        return self.drop(torch.relu(self.l1(x))) + torch.rand(8)

    def forward(self, x):
        return self.l2(checkpoint(self.block, x, use_reentrant=False))


def grad_step(model, x):
    model.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss.detach(), model.l1.weight.grad.clone()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpointed_function_that_draws(backend):
    # The backward recomputes the checkpointed function from the generators' state of the
    # forward: the same dropout mask, and the generators where eager leaves them.  (Inductor
    # does not compile random operations in a region its train step recomputes: that graph
    # runs eagerly.)
    torch.manual_seed(0)
    model = Checkpointed()
    twin = copy.deepcopy(model)
    xs = [torch.randn(4, 6) for _ in range(CALLS)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "magpy: backend 'inductor' failed", RuntimeWarning)
        compiled = differential(grad_step, lambda i: (model, xs[i]), backend, reseed=False,
                                compiled_args_of=lambda i: (twin, xs[i]), tried=False)
    assert magpy.stats(compiled).mock_runs == CALLS - 2


# --------------------------------------------------------------------------- CUDA

def on_cuda(args_of):
    return lambda i: tuple(t.cuda() for t in args_of(i))


@cuda
@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_draws(backend, background):
    torch.manual_seed(0)
    model = Noisy().cuda().train()

    def args_of(i):
        return (torch.randn(4, 6, device="cuda"),)

    differential(model, args_of, backend, device="cuda", compiled_fn=copy.deepcopy(model))
    magpy.reset()
    differential(reparametrize_like, on_cuda(two), backend, device="cuda", reseed=False)
    magpy.reset()   # (a check that fails after CUDA drew numbers: the call runs again from there)
    differential(clipped_noise, lambda i: (torch.rand(5, device="cuda") + (i % 2) * 2,), backend,
                 device="cuda", reseed=False, tried=False)


def cuda_branches(x):
    if x.sum() > 0:             # the recording runs both arms: the untaken one must not draw
        y = x + torch.rand(x.shape, device=x.device)
    else:
        y = x - torch.randn(x.shape, device=x.device)
    return y


@cuda
def test_cuda_draws_in_branches():
    def args_of(i):
        return (torch.randn(4, 6, device="cuda") + (2 if i % 3 else -2),)

    differential(cuda_branches, args_of, "eager", device="cuda", reseed=False)
