"""Run a fuzz program eagerly and through ``magpy.compile``, call by call, and classify.

Each side gets its own world (the program's source executed in a fresh namespace).  Before
call i both sides start from the same torch RNG state and grad mode; each runs call i's
snippet (which mutates the world and sets ``ARGS``), then the program.  After the call the
runner freezes what it returned or raised, the world's state (:data:`program.STATE`),
``torch.is_grad_enabled()`` and torch's RNG state, and compares.  The first difference ends
the run.

Under backend "eager" every value is compared bit for bit.  Under a compiling backend
(:func:`use_backend`, ``python -m tests.fuzz --backend inductor``) compiles run in the
foreground and the autopilot is off, so every mock call runs the backend's code, and float
values are compared within :data:`TOLERANCE` (a fused kernel rounds otherwise); ints, bools,
shapes, dtypes, exceptions and the program's control are still compared exactly.

Outcomes (:data:`KINDS`): ``ok``; ``wrong`` (same exception or none, different result or
state); ``crash`` (eager returned, magpy raised); ``raise-mismatch`` (eager raised, magpy
raised something else or returned); ``fallback`` (equal, but magpy's own machinery failed
and it ran the program eagerly: its RuntimeWarning); ``hang`` (over the time limit);
``invalid`` (the generator's fault: the world or a call snippet did not run); ``drift``
(a compiling backend: magpy's run differs, and ``torch.compile`` with the same backend, run
the same way, differs from eager at the same call in the same parts: a fused kernel's
rounding that the program then decides on, ``int(h.sum())`` of a sum that is 4 up to
rounding, not magpy's fault).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import traceback
import warnings

import torch

import magpy
import magpy.records.cache
from tests.fuzz.program import STATE

KINDS = ("ok", "wrong", "crash", "raise-mismatch", "fallback", "hang", "invalid", "drift")
TIME_LIMIT = 20.0   # seconds per program and side-by-side run (backend eager)
COMPILING_TIME_LIMIT = 180.0   # ... where each record's graphs compile first (C++ under Inductor)
BACKEND = "eager"   # what magpy_compiled compiles with (use_backend)
TOLERANCE: tuple[float, float] | None = None   # (rtol, atol) for float values; None: bit for bit
COMPILED_TOLERANCE = (1e-4, 1e-5)   # Inductor's float32 reorderings (as tests/backends/test_cuda.py)


def use_backend(name: str) -> None:
    """Fuzz magpy with backend ``name`` from now on (this process and the workers it forks):
    compiles in the foreground and no autopilot, so a mock runs the compiled code; floats
    compared within :data:`COMPILED_TOLERANCE` unless ``name`` is "eager"."""
    global BACKEND, TOLERANCE
    BACKEND = name
    exact = name == "eager"
    TOLERANCE = None if exact else COMPILED_TOLERANCE
    if not exact:
        magpy.config.background_compile = False
        magpy.config.autopilot = False


def time_limit_s() -> float:
    """Seconds a program may take under :data:`BACKEND`."""
    return TIME_LIMIT if BACKEND == "eager" else COMPILING_TIME_LIMIT


class Values:
    """A tensor's values (or a float): equal to another's bit for bit, or where
    :data:`TOLERANCE` is set and both are floating point, within it."""

    __slots__ = ("values", "text", "floating")

    def __init__(self, values, floating: bool):
        self.values, self.text, self.floating = values, repr(values), floating

    def __eq__(self, other) -> bool:
        if not isinstance(other, Values):
            return NotImplemented
        if self.text == other.text:
            return True
        if TOLERANCE is None or not (self.floating and other.floating):
            return False
        a, b = torch.tensor(self.values, dtype=torch.float64), torch.tensor(other.values, dtype=torch.float64)
        rtol, atol = TOLERANCE
        return a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)

    __hash__ = None

    def __repr__(self) -> str:
        return self.text


_NUMBER = re.compile(r"-?\d+\.(\d+)(?:e[-+]?\d+)?")


class Printed(str):
    """Text the program printed: equal to another's exactly, or where :data:`TOLERANCE` is
    set, word for word with the printed floats within it (and within a unit of the last
    digit printed: ``f"{v:.4f}"`` of values that differ in the 8th digit may differ in the 4th)."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        if str.__eq__(self, other) or TOLERANCE is None or not isinstance(other, Printed):
            return str.__eq__(self, other)
        words, other_words = _NUMBER.split(self), _NUMBER.split(other)
        a, b = _NUMBER.finditer(self), _NUMBER.finditer(other)
        return (words[::2] == other_words[::2]
                and all(_printed_close(x, y) for x, y in zip(a, b, strict=True)))

    __hash__ = str.__hash__


def _printed_close(x: re.Match, y: re.Match) -> bool:
    rtol, atol = TOLERANCE
    u, v = float(x.group(0)), float(y.group(0))
    last_digit = 10.0 ** -min(len(x.group(1)), len(y.group(1)))
    return abs(u - v) <= atol + rtol * abs(v) + last_digit


class Hang(BaseException):
    """The program ran over its time limit (a BaseException: programs catch Exception)."""


@dataclasses.dataclass
class Outcome:
    """How one program went."""

    kind: str
    signature: str = ""
    call: int = -1          # the call that differed
    detail: str = ""        # eager vs magpy, or the traceback
    eager_runs: int = 0     # magpy's eager runs (graph breaks and fallbacks)

    def describe(self) -> str:
        """A readable summary."""
        head = (self.signature or self.kind) + (f" (call {self.call})" if self.call >= 0 else "")
        return head + ("\n" + self.detail if self.detail else "")


def freeze(v, memo=None):
    """A plain, comparable, printable copy of ``v`` (tensors by dtype, shape,
    requires_grad and exact values; modules by attributes, parameters and buffers)."""
    memo = {} if memo is None else memo
    if isinstance(v, (int, str, bool, type(None))):
        return v
    if isinstance(v, float):
        return ("float", Values(v, True))
    if id(v) in memo:
        return ("seen", memo[id(v)])
    memo[id(v)] = len(memo)
    if isinstance(v, torch.Tensor):
        values = Values(v.detach().tolist(), v.is_floating_point() or v.is_complex())
        return ("tensor", str(v.dtype), tuple(v.shape), v.requires_grad, values)
    if isinstance(v, torch.nn.Module):
        attrs = {k: freeze(a, memo) for k, a in vars(v).items() if not k.startswith("_")}
        tensors = {k: freeze(t, memo) for k, t in list(v.named_parameters()) + list(v.named_buffers())}
        return ("module", type(v).__qualname__, v.training, attrs, tensors)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [freeze(x, memo) for x in v])
    if isinstance(v, dict):
        return ("dict", [(repr(k), freeze(x, memo)) for k, x in v.items()])
    if hasattr(v, "getvalue"):
        return ("text", Printed(v.getvalue()))
    if callable(v):
        return ("callable", getattr(v, "__qualname__", type(v).__qualname__))
    if hasattr(v, "__dict__"):
        return ("object", type(v).__qualname__, {k: freeze(a, memo) for k, a in vars(v).items()})
    return ("object", type(v).__qualname__, repr(v))


@dataclasses.dataclass
class After:
    """What one side's call produced and left."""

    returned: object = None
    raised: tuple | None = None      # (type name, message)
    error: BaseException | None = None
    state: dict = dataclasses.field(default_factory=dict)
    grad: bool = True
    rng: torch.Tensor | None = None
    is_arg: bool = False
    fell_back: str = ""              # magpy's warning that its machinery failed


def new_world(source: str) -> dict:
    ns = {"__name__": "fuzzprog"}
    exec(compile(source, "<fuzzprog>", "exec"), ns)
    return ns


def call_once(ns: dict, fn, snippet: str, rng, grad: bool) -> After:
    """Run ``snippet`` then ``fn(*ARGS)`` in ``ns`` from the given RNG state and grad mode."""
    torch.set_rng_state(rng)
    torch.set_grad_enabled(grad)
    exec(snippet, ns)
    args = ns["ARGS"]
    after = After()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args)
            after.returned = freeze(result)
            after.is_arg = result is args[0]
        except Hang:
            raise
        except Exception as e:  # noqa: BLE001 - the program's exception is part of its outcome
            after.raised = (type(e).__name__, str(e))
            after.error = e
    after.fell_back = next((str(w.message) for w in caught if _machinery_warning(w)), "")
    after.grad = torch.is_grad_enabled()
    after.rng = torch.get_rng_state()
    after.state = {name: freeze(ns.get(name)) for name in STATE}
    torch.set_grad_enabled(True)
    return after


def _machinery_warning(w) -> bool:
    text = str(w.message)
    return issubclass(w.category, RuntimeWarning) and text.startswith("magpy") and "eagerly" in text


def differences(a: After, b: After) -> list[str]:
    """What differs between eager's ``a`` and magpy's ``b`` (the parts' names)."""
    out = []
    if a.raised is None and a.returned != b.returned:
        out.append("result")
    if a.is_arg != b.is_arg:
        out.append("result-identity")
    out += [f"state:{part}" for part in _state_diffs(a.state, b.state)]
    if a.grad != b.grad:
        out.append("grad-mode")
    if not torch.equal(a.rng, b.rng):
        out.append("rng-state")
    return out


def _state_diffs(sa: dict, sb: dict) -> list[str]:
    out = []
    for name in STATE:
        va, vb = sa.get(name), sb.get(name)
        if va == vb:
            continue
        if isinstance(va, tuple) and va and va[0] == "module" and isinstance(vb, tuple) and vb[0] == "module":
            sub = [k for k in set(va[3]) | set(vb[3]) if va[3].get(k) != vb[3].get(k)]
            sub += [k for k in set(va[4]) | set(vb[4]) if va[4].get(k) != vb[4].get(k)]
            sub += ["training"] if va[2] != vb[2] else []
            out += [f"M.{k}" for k in sorted(sub)] or ["M"]
        else:
            out.append(name)
    return out


def magpy_frame(e: BaseException) -> str:
    """The innermost magpy function in ``e``'s traceback, following its causes."""
    seen = set()
    where = ""
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for frame, _ in traceback.walk_tb(e.__traceback__):
            module = frame.f_globals.get("__name__", "")
            if module.startswith("magpy.") and module not in ("magpy.records.cache", "magpy.api.compiled"):
                where = f"{module}.{frame.f_code.co_qualname}"
        e = e.__cause__ or e.__context__
    return where


def normalise(text: str) -> str:
    """A message without its particular numbers and shapes (its first line)."""
    text = text.split("\n")[0]
    text = re.sub(r"\(shape [^)]*\)|\[[^\]]*\]|-?\d+(\.\d+)?(e-?\d+)?", "#", text)
    return text[:160]


@contextlib.contextmanager
def magpy_frames_kept():
    """Keep magpy's own frames in the tracebacks of exceptions that leave a compiled call
    (it drops them as the program's exception would not show them), for the signature."""
    saved = magpy.records.cache.program_entries
    magpy.records.cache.program_entries = lambda tb: tb
    try:
        yield
    finally:
        magpy.records.cache.program_entries = saved


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(signum, frame):
        raise Hang()
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def magpy_compiled(fn):
    """What the fuzzer tests: ``magpy.compile`` with :data:`BACKEND` (eager unless
    :func:`use_backend` chose another) and the configuration as it is (``magpy.config``)."""
    return magpy.compile(fn, backend=BACKEND)


def check(source: str, calls: list, target: str, limit_s: float | None = None,
          compiler=magpy_compiled) -> Outcome:
    """Run the program of ``source`` with ``calls`` eagerly and through ``compiler``; the
    outcome.  ``limit_s``: seconds it may take (None: :func:`time_limit_s`)."""
    grad = torch.is_grad_enabled()
    rng = torch.get_rng_state()
    try:
        with time_limit(time_limit_s() if limit_s is None else limit_s), magpy_frames_kept():
            outcome = _check(source, calls, target, compiler)
            if outcome.kind == "wrong" and TOLERANCE is not None and compiler is magpy_compiled:
                outcome = _against_torch_compile(source, calls, target, outcome)
            return outcome
    except Hang:
        magpy.reset()
        return Outcome("hang", "hang: over the time limit")
    finally:
        torch.set_grad_enabled(grad)
        torch.set_rng_state(rng)


def _check(source: str, calls: list, target: str, compiler) -> Outcome:
    try:
        eager_ns, magpy_ns = new_world(source), new_world(source)
    except Exception as e:  # noqa: BLE001 - a generator bug
        return Outcome("invalid", f"world: {type(e).__name__}: {normalise(str(e))}")
    eager_fn = eager_ns[target]
    compiled = compiler(magpy_ns[target])
    fallback = ""
    for i, snippet in enumerate(calls):
        rng = torch.get_rng_state()
        try:
            a = call_once(eager_ns, eager_fn, snippet, rng, True)
            b = call_once(magpy_ns, compiled, snippet, rng, True)
        except Hang:
            raise
        except Exception as e:  # noqa: BLE001 - the call snippet itself failed
            return Outcome("invalid", f"call snippet: {type(e).__name__}: {normalise(str(e))}", i)
        torch.set_rng_state(a.rng)   # the next call goes on from eager's state
        outcome = compare(a, b, i)
        fallback = fallback or b.fell_back
        if outcome is not None:
            outcome.eager_runs = _eager_runs(compiled)
            return outcome
    runs = _eager_runs(compiled)
    if fallback:
        return Outcome("fallback", "fallback: " + normalise(fallback), detail=fallback, eager_runs=runs)
    return Outcome("ok", eager_runs=runs)


def _against_torch_compile(source: str, calls: list, target: str, wrong: Outcome) -> Outcome:
    """``wrong`` (magpy's outcome under a compiling backend), or drift where a reference
    differs from eager at the same call in the same parts: ``torch.compile`` with the same
    backend; or magpy again with every compiled graph checked, on each call, against itself run
    eagerly on copies of its inputs (:func:`checked_backend`), all within the tolerance: each
    graph computed what eager would have from what it was given, and the program decided on a
    rounding (seed 3001420: ``int(h.sum())`` of a sum that is 4 up to rounding)."""
    torch._dynamo.reset()
    reference = _check(source, calls[:wrong.call + 1], target, lambda fn: torch.compile(fn, backend=BACKEND))
    if _same_difference(reference, wrong):
        return _drift(wrong, reference, f"torch.compile (backend {BACKEND!r}) differs there as well")
    if not isinstance(BACKEND, str):
        return wrong
    errors: list[float] = []
    reference = _check(source, calls[:wrong.call + 1], target,
                       lambda fn: magpy.compile(fn, backend=checked_backend(BACKEND, errors)))
    if _same_difference(reference, wrong) and errors and max(errors) <= 1.0:
        why = (f"magpy differs there as well with each of its {len(errors)} graph calls within the "
               f"tolerance of the graph run eagerly (worst {max(errors):.2g})")
        return _drift(wrong, reference, why)
    return wrong


def _same_difference(reference: Outcome, wrong: Outcome) -> bool:
    return (reference.kind, reference.call, reference.signature) == ("wrong", wrong.call, wrong.signature)


def _drift(wrong: Outcome, reference: Outcome, why: str) -> Outcome:
    return Outcome("drift", wrong.signature.replace("wrong", "drift", 1), wrong.call,
                   f"{wrong.detail}\n{why}:\n{reference.detail}")


def checked_backend(name: str, errors: list):
    """magpy's backend ``name`` with each compiled graph run, on every call, beside the graph
    itself run eagerly on copies of its inputs (the RNG state restored between): the error of
    its outputs against those, in :data:`TOLERANCE`'s units, goes to ``errors`` (inf where
    the two cannot be compared)."""
    from magpy.backends import registry
    from magpy.graphs.opgraph import copy_graph_module
    compile_graph = registry.resolve(name)[1]

    def checked(gm, example_inputs):
        reference = copy_graph_module(gm)
        compiled = compile_graph(gm, example_inputs)

        def run(*args):
            rng = torch.get_rng_state()
            try:
                copies = [_copy(a) for a in args]
                want = reference(*copies)
            except Exception:  # noqa: BLE001 - the graph cannot run eagerly apart: no comparison
                want = None
            torch.set_rng_state(rng)
            got = compiled(*args)
            errors.append(float("inf") if want is None else _graph_error(want, got))
            return got
        return run
    checked.__name__ = name   # (magpy takes the named backend's path: its joint backward)
    return checked


def _copy(a):
    return a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a


def _graph_error(want, got) -> float:
    """The largest difference of ``got``'s floating outputs from ``want``'s in the tolerance's
    units; inf for any other difference."""
    from torch.utils import _pytree as pytree
    a, b = pytree.tree_leaves(want), pytree.tree_leaves(got)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    rtol, atol = TOLERANCE
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            worst = max(worst, 0.0 if x == y else float("inf"))
        elif x.shape != y.shape or x.dtype != y.dtype:
            return float("inf")
        elif x.is_floating_point():
            d = (x.detach().double() - y.detach().double()).abs() / (atol + rtol * x.detach().double().abs())
            worst = max(worst, float(d.max()) if d.numel() else 0.0)
        elif not torch.equal(x, y):
            return float("inf")
    return worst


def _eager_runs(compiled) -> int:
    return magpy.stats(compiled).eager_runs if hasattr(compiled, "_magpy_cache") else 0


def compare(a: After, b: After, i: int) -> Outcome | None:
    """The outcome of call ``i`` where eager's and magpy's differ, else None."""
    if a.raised is None and b.raised is not None:
        sig = f"crash: {b.raised[0]}: {normalise(b.raised[1])}"
        where = magpy_frame(b.error) or "?"
        return Outcome("crash", sig, i, f"innermost magpy frame: {where}\n{_tb(b.error)}")
    if a.raised is not None and a.raised != b.raised:
        got = "returned" if b.raised is None else f"{b.raised[0]}: {normalise(b.raised[1])}"
        sig = f"raise-mismatch: eager {a.raised[0]}, magpy {got}"
        detail = f"eager raised {a.raised}\nmagpy " + (_tb(b.error) if b.error else f"returned {b.returned}")
        return Outcome("raise-mismatch", sig, i, detail)
    diffs = differences(a, b)
    if diffs:
        detail = "\n".join(_side_by_side(a, b, d) for d in diffs)
        return Outcome("wrong", "wrong: " + ", ".join(diffs), i, detail + (f"\nmagpy fell back: {b.fell_back}"
                                                                            if b.fell_back else ""))
    return None


def _side_by_side(a: After, b: After, what: str) -> str:
    if what == "result":
        va, vb = a.returned, b.returned
    elif what == "result-identity":
        va, vb = a.is_arg, b.is_arg
    elif what == "grad-mode":
        va, vb = a.grad, b.grad
    elif what == "rng-state":
        return "  rng-state: differs"
    else:
        name = what.split(":", 1)[1].split(".")[0]
        va, vb = a.state.get(name), b.state.get(name)
    return f"  {what}:\n    eager {_short(va)}\n    magpy {_short(vb)}"


def _short(v) -> str:
    text = repr(v)
    return text if len(text) < 600 else text[:600] + "…"


def _tb(e: BaseException | None) -> str:
    return "".join(traceback.format_exception(e))[-4000:] if e is not None else ""
