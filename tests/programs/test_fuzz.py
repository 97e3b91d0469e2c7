"""The differential fuzzer (tests/fuzz) in CI: a fixed-seed sample of random programs,
each compared with eager call by call; and checks that the fuzzer itself sees differences.

A campaign: ``python -m tests.fuzz --n 10000 --out DIR [--backend inductor]`` (docs/layout.md,
"Testing")."""
import functools
import io

import pytest
import torch

from tests.fuzz import runner
from tests.fuzz.generator import generate
from tests.fuzz.minimize import minimize
from tests.fuzz.program import Node, Program
from tests.fuzz.runner import check, freeze

# The default run's slice (about 30 s on one core; 10,000 take about 12 minutes) and the
# rest of the sample it had, under -m slow (the default run must stay well under 15 minutes).
SAMPLE = range(20260, 20260 + 150)
SAMPLE_REST = range(20260 + 150, 20260 + 600)


def _repro(seed: int, outcome) -> str:
    program = generate(seed)
    summary = "\n".join(outcome.describe().splitlines()[:6])
    return (f"--- program seed {seed}: {summary}\n{program.function_source()}\n"
            f"calls: {program.calls}\n"
            f"(python -m tests.fuzz --n 1 --seed {seed} --out DIR writes it minimised)")


def _check_sample(seeds: range) -> None:
    failures = []
    for seed in seeds:
        program = generate(seed)
        outcome = check(program.source(), program.calls, program.target)
        if outcome.kind not in ("ok", "fallback"):
            failures.append(_repro(seed, outcome))
    head = f"{len(failures)} of {len(seeds)} programs differ from eager:\n\n"
    assert not failures, head + "\n\n".join(failures)


@pytest.mark.magpy_rerecords   # the calls change what guards read on purpose; the fuzzer compares with eager
def test_fuzz_sample_matches_eager():
    _check_sample(SAMPLE)


@pytest.mark.slow
@pytest.mark.magpy_rerecords
def test_fuzz_sample_rest_matches_eager():
    _check_sample(SAMPLE_REST)


@pytest.fixture
def under_inductor(monkeypatch):
    """The fuzzer's Inductor mode (runner.use_backend), undone after the test."""
    import magpy
    for name in ("background_compile", "autopilot"):
        monkeypatch.setattr(magpy.config, name, getattr(magpy.config, name))
    for name in ("BACKEND", "TOLERANCE"):
        monkeypatch.setattr(runner, name, getattr(runner, name))
    runner.use_backend("inductor")


@pytest.mark.slow   # about 5 s a program: each record's graphs compile as C++
@pytest.mark.magpy_rerecords
def test_fuzz_sample_matches_eager_under_inductor(under_inductor):
    """A slice of the campaign ``python -m tests.fuzz --backend inductor`` (docs/layout.md)."""
    failures = []
    for seed in range(3001000, 3001000 + 40):
        program = generate(seed)
        outcome = check(program.source(), program.calls, program.target)
        if outcome.kind not in ("ok", "fallback"):
            failures.append(_repro(seed, outcome))
    assert not failures, f"{len(failures)} of 40 programs differ from eager:\n\n" + "\n\n".join(failures)


def test_generator_is_deterministic_and_valid():
    for seed in range(200):
        a, b = generate(seed), generate(seed)
        assert a.source() == b.source() and a.calls == b.calls
        compile(a.source(), f"<seed {seed}>", "exec")


@pytest.mark.parametrize("profile", ["default", "nonneg"])
def test_programs_are_deterministic_in_eager(profile):
    # eager against eager: every difference the fuzzer reports is magpy's, none the program's
    for seed in range(40):
        program = generate(seed, profile)
        outcome = check(program.source(), program.calls, program.target, compiler=lambda fn: fn)
        assert outcome.kind == "ok", f"seed {seed}: {outcome.describe()}"


def _plus_one(fn):
    @functools.wraps(fn)
    def wrong(*args):
        out = fn(*args)
        return out + 1 if isinstance(out, torch.Tensor) else out
    return wrong


def _grad_off(fn):
    def leaky(*args):
        out = fn(*args)
        torch.set_grad_enabled(False)
        return out
    return leaky


def _swallow(fn):
    def swallow(*args):
        try:
            return fn(*args)
        except RuntimeError:
            return None
    return swallow


CALLS = ["X = torch.randn(2, 4, generator=GEN); ARGS = (X, 0.5, 1, 'pos')", "ARGS = (X, 0.5, 1, 'pos')"]
SOURCE_RETURNS_X = Program(0, False, [Node("return x * s")], CALLS).source()
SOURCE_RAISES = Program(0, False, [Node("raise RuntimeError('stop')")], CALLS).source()


@pytest.mark.parametrize("compiler, source, kind, signature", [
    (lambda fn: fn, SOURCE_RETURNS_X, "ok", ""),
    (_plus_one, SOURCE_RETURNS_X, "wrong", "wrong: result"),
    (_grad_off, SOURCE_RETURNS_X, "wrong", "wrong: grad-mode"),
    (_swallow, SOURCE_RAISES, "raise-mismatch", "raise-mismatch: eager RuntimeError, magpy returned"),
], ids=["same", "result", "grad-mode", "raise"])
def test_runner_sees_differences(compiler, source, kind, signature):
    outcome = check(source, CALLS, "f", compiler=compiler)
    assert (outcome.kind, outcome.signature) == (kind, signature)


def test_minimizer_keeps_the_failure_and_shrinks():
    program = generate(3)
    program.module, program.calls = False, CALLS
    wrong = check(program.source(), program.calls, "f", compiler=_grad_off)
    small, outcome = minimize(program, wrong, budget_s=30, compiler=_grad_off)
    assert outcome.signature == wrong.signature == "wrong: grad-mode"
    assert len(small.function_source()) < len(program.function_source())


@pytest.mark.parametrize("reference", ["same call, same parts", "another part", "equal to eager"])
def test_a_difference_torch_compile_shows_too_is_drift(monkeypatch, reference):
    """Under a compiling backend, a difference ``torch.compile`` with the same backend, run the
    same way, shows at the same call in the same parts is drift (program seed 3001420 under
    Inductor: ``int(h.sum())`` of a sum that is 4 up to rounding, truncated otherwise by a
    fused kernel); any other stays wrong."""
    wrong = runner.Outcome("wrong", "wrong: result", 2, "  result: eager 0.33 | magpy 0.25")
    theirs = {"same call, same parts": wrong, "another part": runner.Outcome("wrong", "wrong: state:N", 2),
              "equal to eager": runner.Outcome("ok")}[reference]
    compilers = []

    def fake_check(source, calls, target, compiler):
        compilers.append(compiler)
        return wrong if compiler is runner.magpy_compiled else theirs
    monkeypatch.setattr(runner, "_check", fake_check)
    monkeypatch.setattr(runner, "TOLERANCE", runner.COMPILED_TOLERANCE)
    outcome = check("", ["ARGS = ()"] * 4, "f")
    assert len(compilers) >= 2 and compilers[1] is not runner.magpy_compiled
    assert outcome.kind == ("drift" if reference == "same call, same parts" else "wrong"), outcome.describe()
    assert outcome.call == 2
    monkeypatch.setattr(runner, "TOLERANCE", None)   # backend "eager": bit for bit, no reference
    compilers.clear()
    assert check("", ["ARGS = ()"] * 4, "f").kind == "wrong" and len(compilers) == 1


def test_the_checked_backend_measures_each_graph_call_against_the_graph_run_eagerly(monkeypatch):
    """The drift reference of a compiling backend's wrong program (seed 3001420): magpy again,
    each compiled graph run beside itself run eagerly on copies of its inputs; a graph call
    off by more than the tolerance (a miscompile) counts above 1, and the reference then
    excuses nothing."""
    monkeypatch.setattr(runner, "TOLERANCE", runner.COMPILED_TOLERANCE)
    monkeypatch.setattr(runner.magpy.config, "background_compile", False)
    errors = []
    checked = runner.checked_backend("eager", errors)
    f = runner.magpy.compile(lambda x: (x * 2).softmax(0) + 1, backend=checked)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(f(x), (x * 2).softmax(0) + 1)
    assert len(errors) == 2 and max(errors) == 0.0, errors   # (the first call records)
    close, off = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.001])
    assert runner._graph_error((close,), (close + 1e-7,)) <= 1 < runner._graph_error((close,), (off,))
    assert runner._graph_error((torch.tensor([1, 2]),), (torch.tensor([1, 3]),)) == float("inf")


def test_a_compiling_backend_compares_floats_within_a_tolerance(monkeypatch):
    """Under Inductor (``--backend inductor``) a fused kernel may round otherwise: float values
    agree within the tolerance, everything else (ints, shapes, dtypes) still bit for bit."""
    floats, near, far = (freeze(torch.tensor(v)) for v in ([1.0, 2.0], [1.0, 2.0 + 1e-6], [1.0, 2.1]))
    ints, other_ints = freeze(torch.tensor([1, 2])), freeze(torch.tensor([1, 3]))
    # what a program printed: f"{v:.4f}" of values 6e-8 apart (seed 3001053 under Inductor)
    printed, near_printed = (freeze(io.StringIO(t)) for t in ("n 2: -3149.0256\n", "n 2: -3149.0254\n"))
    assert floats != near and ints != other_ints and printed != near_printed
    assert freeze(0.5) != freeze(0.5 + 1e-9)
    monkeypatch.setattr(runner, "TOLERANCE", runner.COMPILED_TOLERANCE)
    assert floats == near and freeze(0.5) == freeze(0.5 + 1e-9) and printed == near_printed
    assert printed != freeze(io.StringIO("n 3: -3149.0256\n"))   # the words and ints stay exact
    assert printed != freeze(io.StringIO("n 2: 3149.0256\n"))
    assert floats != far and ints != other_ints
    assert floats != freeze(torch.tensor([1.0, 2.0], dtype=torch.float64))   # the dtype differs
