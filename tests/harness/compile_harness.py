"""Differential harness for ``magpy.compile``: compiled vs eager, call by call.

A case is a zero-argument ``build()`` returning a fresh ``(fn, state)``: ``fn`` is the program
(a function, a bound method or an ``nn.Module``) and ``state`` is everything the program can
see or change besides its return value (a dict of globals, a module, objects, lists, tensors).
``check_compiled`` builds two independent copies, runs one eagerly and one through
``magpy.compile``, and walks a sequence of :class:`Step`\\ s.  Each step

1. applies its ``mutate(state)`` to both copies (the mutation under test, made from outside
   between two calls),
2. builds the arguments from each copy's state (``args(state)``; seeded identically, so
   ``torch.randn`` inside gives equal values to both copies),
3. calls both programs (inside ``ctx()`` if given, e.g. ``torch.no_grad``),
4. compares the return value (or the raised exception), what was printed, the arguments
   afterwards, the identity relations of the result (returns an argument / a state object
   itself) and ``observe(state)`` -- with :func:`tests.harness.differential.same` for backend
   ``"eager"`` (bit-exact), or with :func:`close` (tight ``allclose``) for compiling backends,
5. checks what ``magpy.stats`` says the call was: ``MONITOR`` (a recording run), ``MOCK``
   (guard hit, the compiled graph ran), ``EAGER`` (fallback), ``ANY`` (monitor or mock, not
   eager: used where recording again and hitting a record are both correct), or ``None``.

Typical sequence: ``first(args)`` (monitor run), ``again()`` (same argument objects: guard hit
-> mock), ``fresh(args)`` (new inputs of the same shapes: mock), then ``after(mutate, ...)``.

Programs that read or write globals must not share the test module's namespace between the
two copies: :func:`isolated` re-creates a function over a private copy of its globals.

:class:`RehitCheck` (on for the whole suite, see ``tests/conftest.py``) fails a test whose
recording runs leave records that the identical call would not hit: silent recompiles.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import types
from typing import Any, Callable

import pytest
import torch

import magpy
from magpy.records.cache import RecordCache
from tests.harness.differential import same

MONITOR = "monitor"   # guard miss / first call: a recording run
MOCK = "mock"         # guard hit: the record's mock ran the compiled graph
EAGER = "eager"       # fallback: ran eagerly
ANY = "any"           # exactly one of monitor / mock, never eager

STAT_FIELDS = ("monitor_runs", "mock_runs", "eager_runs", "records", "graph_count")

REPEAT = object()     # ``Step.args`` value: call again with the previous step's argument objects


def _no_args(state):
    return ()


@dataclasses.dataclass
class Step:
    """One call of the sequence."""

    name: str
    args: Any = _no_args                      # state -> tuple of positional args, or REPEAT
    kwargs: Callable[[Any], dict] | None = None
    mutate: Callable[[Any], None] | None = None   # applied to both copies before the call
    expect: str | None = None                 # MONITOR / MOCK / EAGER / ANY / None
    seed: int = 0                             # torch seed for building args (and the call)
    ctx: Callable[[], Any] | None = None      # context manager factory around both calls


def first(args=_no_args, kwargs=None, *, name="first call (monitor run)", expect=MONITOR, ctx=None) -> Step:
    return Step(name, args, kwargs, expect=expect, ctx=ctx)


def again(args=REPEAT, kwargs=None, *, name="repeated call (guard hit -> mock)", expect=MOCK,
          seed=0, ctx=None) -> Step:
    return Step(name, args, kwargs, expect=expect, seed=seed, ctx=ctx)


def fresh(args, kwargs=None, *, seed=1, name="fresh inputs, same shapes (mock)", expect=MOCK,
          ctx=None) -> Step:
    return Step(name, args, kwargs, expect=expect, seed=seed, ctx=ctx)


def after(mutate, args=REPEAT, kwargs=None, *, name=None, expect=MONITOR, seed=0, ctx=None) -> Step:
    label = name or f"after {getattr(mutate, '__name__', 'mutation')}"
    return Step(label, args, kwargs, mutate=mutate, expect=expect, seed=seed, ctx=ctx)


def standard(args, kwargs=None, *, ctx=None) -> list[Step]:
    """first call, the same call again, then fresh inputs of the same shapes."""
    return [first(args, kwargs, ctx=ctx), again(ctx=ctx), fresh(args, kwargs, ctx=ctx)]


# ----------------------------------------------------------------------------- comparison

def graph_as_is(gm, example_inputs):
    """A backend running the fx graph as it is: backend "eager", but ``check_compiled`` then
    compares with allclose (numpy's kernels and torch's round differently)."""
    return gm.forward


def close(a: Any, b: Any, rtol: float = 1.3e-6, atol: float = 1e-5, _seen: set | None = None) -> bool:
    """Like :func:`same`, but tensors of floating dtype compare with ``allclose``."""
    if _seen is None:
        _seen = set()
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return False
        if a.dtype != b.dtype or a.shape != b.shape or a.requires_grad != b.requires_grad:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(torch.allclose(a.detach(), b.detach(), rtol=rtol, atol=atol, equal_nan=True))
        return bool(torch.equal(a.detach(), b.detach()))
    key = (id(a), id(b))
    if key in _seen:
        return True
    ta, tb = type(a), type(b)
    if ta is not tb and (ta.__qualname__ != tb.__qualname__ or ta.__module__ != tb.__module__):
        return False
    if isinstance(a, dict):
        _seen.add(key)
        if all(isinstance(k, (int, str, bytes, bool, float, type(None), tuple)) for k in a):
            if list(a.keys()) != list(b.keys()):
                return False
        elif len(a) != len(b):
            return False
        return all(close(x, y, rtol, atol, _seen) for x, y in zip(a.values(), b.values()))
    if isinstance(a, (list, tuple)):
        _seen.add(key)
        return len(a) == len(b) and all(close(x, y, rtol, atol, _seen) for x, y in zip(a, b))
    plain = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, types.CodeType,
             types.GeneratorType, BaseException)
    if hasattr(a, "__dict__") and not isinstance(a, plain):
        _seen.add(key)
        return close(vars(a), vars(b), rtol, atol, _seen)
    return same(a, b)


def _short(value: Any, limit: int = 600) -> str:
    try:
        text = repr(value)
    except Exception as e:  # noqa: BLE001 - a repr failure must not hide the real failure
        text = f"<repr failed: {e!r}>"
    return text if len(text) <= limit else text[:limit] + "...]"


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def _identity_profile(result: Any, roots: list) -> list:
    """Which roots (arguments, state values) the result -- or its top-level items -- *is*."""
    def hits(v):
        if isinstance(v, _IMMUTABLE):   # identity of ints/strs/... is an interpreter detail
            return []
        return [i for i, r in enumerate(roots) if v is r]
    profile = [hits(result)]
    if isinstance(result, (list, tuple)):
        profile += [hits(v) for v in result]
    return profile


def _roots(args: tuple, kwargs: dict, state: Any) -> list:
    roots = list(args) + list(kwargs.values())
    if isinstance(state, dict):
        roots += [v for k, v in state.items() if not (isinstance(k, str) and k.startswith("__"))]
    elif state is not None:
        roots.append(state)
    return roots


# ----------------------------------------------------------------------------- isolation

def isolated(fn: Callable, **globals_: Any) -> tuple[Callable, dict]:
    """``fn`` re-created over a private copy of its globals, with ``globals_`` set in it.

    Returns ``(new_fn, namespace)``: the program's global reads and writes (``global z``) go to
    ``namespace``, never to the test module.  Helpers the program calls by name still run over
    the original module's globals, so an isolated program should touch its globals directly.
    """
    ns = dict(fn.__globals__)
    ns.update(globals_)
    new = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new, ns


def globals_view(*names: str) -> Callable[[dict], dict]:
    """An ``observe`` for an isolated namespace: the named globals (missing ones as a marker)."""
    return lambda ns: {n: ns.get(n, "<unset>") for n in names}


# ----------------------------------------------------------------------------- the check

@pytest.fixture(autouse=True)
def fresh_magpy():
    """Import into a test module to start every test with no records (``magpy.reset()``) and
    leave ``magpy.config`` as the test found it."""
    magpy.reset()
    saved = dataclasses.replace(magpy.config)
    yield
    for f in dataclasses.fields(saved):
        setattr(magpy.config, f.name, getattr(saved, f.name))


def stats_snapshot(compiled: Any) -> dict:
    st = magpy.stats(compiled)
    snap = {f: getattr(st, f) for f in STAT_FIELDS}
    for f, v in snap.items():
        assert isinstance(v, int) and not isinstance(v, bool), f"magpy.stats().{f} is {v!r}, not an int"
    snap["break_reasons"] = list(st.break_reasons)
    return snap


@dataclasses.dataclass
class Trace:
    """What ``check_compiled`` saw; tests may add their own assertions."""

    compiled: Any
    eager_fn: Any
    compiled_fn: Any
    eager_state: Any
    compiled_state: Any
    results: list = dataclasses.field(default_factory=list)   # (eager result, compiled result)
    deltas: list = dataclasses.field(default_factory=list)    # per step: {field: increase}
    stats: dict | None = None                                  # final snapshot


def _call(fn, args, kwargs, ctx, seed):
    """(result, exception, stdout) of one call."""
    torch.manual_seed(seed)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), (ctx() if ctx is not None else contextlib.nullcontext()):
        try:
            return fn(*args, **kwargs), None, out.getvalue()
        except Exception as e:  # noqa: BLE001 - an exception is a result to compare
            return None, e, out.getvalue()


def _check_expect(step: Step, delta: dict, fullgraph: bool) -> str | None:
    d_mon, d_mock, d_eager = delta["monitor_runs"], delta["mock_runs"], delta["eager_runs"]
    if step.expect is None:
        return None
    if step.expect == MONITOR:
        ok = d_mon == 1 and d_mock == 0 and d_eager == 0
        if ok and fullgraph:
            ok = delta["records"] == 1 and delta["graph_count"] == 1
            if not ok:
                return ("a fullgraph monitor run must add exactly one record and compile exactly one graph, "
                        f"stats increased by {delta}")
    elif step.expect == MOCK:
        ok = (d_mock == 1 and d_mon == 0 and d_eager == 0
              and delta["records"] == 0 and delta["graph_count"] == 0)
    elif step.expect == EAGER:
        ok = d_eager == 1 and d_mock == 0
    elif step.expect == ANY:
        ok = d_mon + d_mock == 1 and d_eager == 0
    else:  # pragma: no cover - a typo in a test
        raise ValueError(f"unknown expectation {step.expect!r}")
    if not ok:
        return f"expected a {step.expect} run, but magpy.stats increased by {delta}"
    return None


def check_compiled(build: Callable[[], tuple], steps: list[Step], *, backend: Any = "eager",
                   fullgraph: bool = True, observe: Callable[[Any], Any] | None = None,
                   expect_graphs: int | None = None, expect_records: int | None = None,
                   rtol: float = 1.3e-6, atol: float = 1e-5, compile_kwargs: dict | None = None) -> Trace:
    """Run ``steps`` on an eager copy and a compiled copy of ``build()``; assert they agree.

    ``observe(state)`` picks the program state to compare after each call (default: the whole
    state).  Values compare bit-exactly for ``backend="eager"``, else with ``rtol``/``atol``.
    ``expect_graphs`` / ``expect_records``: final ``magpy.stats`` ``graph_count`` / ``records``.
    """
    exact = backend == "eager"
    equal = same if exact else (lambda a, b: close(a, b, rtol, atol))
    observe = observe or (lambda s: s)

    torch.manual_seed(0)
    fn_e, state_e = build()
    torch.manual_seed(0)
    fn_c, state_c = build()
    assert state_e is None or state_e is not state_c, "build() must return fresh state each time"
    compiled = magpy.compile(fn_c, backend=backend, fullgraph=fullgraph, **(compile_kwargs or {}))
    trace = Trace(compiled, fn_e, fn_c, state_e, state_c)

    prev_e = prev_c = None
    for i, step in enumerate(steps):
        where = f"step {i} ({step.name})"
        if step.mutate is not None:
            torch.manual_seed(1000 + i)
            step.mutate(state_e)
            torch.manual_seed(1000 + i)
            step.mutate(state_c)
        if step.args is REPEAT:
            assert prev_e is not None, f"{where}: REPEAT needs a previous step"
            (args_e, kwargs_e), (args_c, kwargs_c) = prev_e, prev_c
        else:
            torch.manual_seed(step.seed)
            args_e, kwargs_e = tuple(step.args(state_e)), (step.kwargs(state_e) if step.kwargs else {})
            torch.manual_seed(step.seed)
            args_c, kwargs_c = tuple(step.args(state_c)), (step.kwargs(state_c) if step.kwargs else {})
        prev_e, prev_c = (args_e, kwargs_e), (args_c, kwargs_c)
        assert equal((args_e, kwargs_e), (args_c, kwargs_c)), f"{where}: the two copies got different inputs"

        res_e, err_e, out_e = _call(fn_e, args_e, kwargs_e, step.ctx, 2000 + i)
        before = stats_snapshot(compiled)
        res_c, err_c, out_c = _call(compiled, args_c, kwargs_c, step.ctx, 2000 + i)
        after_ = stats_snapshot(compiled)
        delta = {f: after_[f] - before[f] for f in STAT_FIELDS}
        trace.results.append((res_e, res_c))
        trace.deltas.append(delta)

        if err_c is not None and err_e is None:
            raise AssertionError(f"{where}: compiled call raised, eager returned {_short(res_e)}") from err_c
        if err_e is not None:
            assert err_c is not None, f"{where}: eager raised {err_e!r}, compiled returned {_short(res_c)}"
            assert type(err_e) is type(err_c) and str(err_e) == str(err_c), \
                f"{where}: eager raised {err_e!r}, compiled raised {err_c!r}"
        else:
            assert equal(res_e, res_c), \
                f"{where}: different results\n  eager:    {_short(res_e)}\n  compiled: {_short(res_c)}"
            prof_e = _identity_profile(res_e, _roots(args_e, kwargs_e, state_e))
            prof_c = _identity_profile(res_c, _roots(args_c, kwargs_c, state_c))
            assert prof_e == prof_c, (f"{where}: result identity differs (which argument/state objects the "
                                      f"result is): eager {prof_e}, compiled {prof_c}")
        assert out_e == out_c, f"{where}: different stdout\n  eager:    {out_e!r}\n  compiled: {out_c!r}"
        assert equal((args_e, kwargs_e), (args_c, kwargs_c)), (
            f"{where}: arguments differ afterwards\n  eager:    {_short((args_e, kwargs_e))}"
            f"\n  compiled: {_short((args_c, kwargs_c))}")
        obs_e, obs_c = observe(state_e), observe(state_c)
        assert equal(obs_e, obs_c), (f"{where}: program state differs afterwards\n  eager:    {_short(obs_e)}"
                                     f"\n  compiled: {_short(obs_c)}")
        problem = _check_expect(step, delta, fullgraph)
        assert problem is None, f"{where}: {problem}; break_reasons={after_['break_reasons']}"

    trace.stats = stats_snapshot(compiled)
    if expect_graphs is not None:
        assert trace.stats["graph_count"] == expect_graphs, \
            f"expected {expect_graphs} compiled graphs, magpy.stats says {trace.stats}"
    if expect_records is not None:
        assert trace.stats["records"] == expect_records, \
            f"expected {expect_records} records, magpy.stats says {trace.stats}"
    return trace


def explain_copy(build: Callable[[], tuple], args: Callable[[Any], tuple], kwargs=None, seed: int = 0):
    """``magpy.explain`` on a third, independent copy (explain runs the program once)."""
    torch.manual_seed(0)
    fn, state = build()
    torch.manual_seed(seed)
    a = tuple(args(state))
    kw = kwargs(state) if kwargs else {}
    return magpy.explain(fn, *a, **kw)


# ----------------------------------------------------------------------------- silent recompiles

class RehitCheck:
    """Finds records that a repeated identical call would not hit (silent recompiles).

    While active, each recording run of any compiled callable whose call left everything it
    reached from outside as it found it (``Record.changed`` is False) must leave a record
    whose full guard passes on the very same arguments right away: the guard checks what the
    call read, and none of that changed.  A guard that fails there never passes, so every
    such call records anew.  The guard runs no program code, so the check changes nothing a
    test observes, and it costs one guard evaluation per recording run.
    """

    def __init__(self):
        self.problems: list[str] = []
        self._miss = None

    def __enter__(self) -> "RehitCheck":
        self._miss, self._settle = miss, settle = RecordCache.miss, RecordCache.settle
        problems = self.problems

        def checked_miss(cache, args, kwargs, *misses):
            before = {id(r) for r in cache.records}
            result = miss(cache, args, kwargs, *misses)
            for rec in cache.records:
                if id(rec) not in before and not rec.changed and rec.guard(args, kwargs) is None:
                    problems.append(f"{cache.name()}: the identical call would record again; its guard:\n"
                                    f"{rec.guard_source}")
            return result

        def checked_settle(cache, rec, *args):
            # magpy's own check of the invariant (an unstable record, magpy.records.cache): a problem
            # here too, though magpy then runs such calls eagerly.
            settled = settle(cache, rec, *args)
            if settled:
                problems.append(f"{cache.name()}: a record fails its own checks on the call it was recorded "
                                f"from (magpy settled on eager); its guard:\n{rec.guard_source}")
            return settled

        RecordCache.miss, RecordCache.settle = checked_miss, checked_settle
        return self

    def __exit__(self, *exc) -> None:
        RecordCache.miss, RecordCache.settle = self._miss, self._settle
