"""The public API: ``compile``, ``explain``, ``stats``, ``reset``."""
from __future__ import annotations

import copy
import dataclasses
import functools
import types
from typing import Any, Callable

import torch

from magpy import arrays, backends, background, controlflow, explain_html
from magpy.cache import RecordCache, Stats, reset_all
from magpy.dynamic import Lifting
from magpy.errors import GraphBreak
from magpy.monitor import bytecode
from magpy.monitor.frame import unsupported_python_message
from magpy.monitor.interpreter import UnsupportedPythonError
from magpy.record import capture


class CompiledModule(torch.nn.Module):
    """Stands in for a compiled ``nn.Module``: calling it runs the compiled ``module(...)``.

    It shares the original module's state (its ``__dict__``: parameters, submodules,
    ``training``, hooks), so ``state_dict()``, ``train()``/``eval()``, ``to()`` and attribute
    access act on the original; other methods of the original's class are forwarded.

    Each compiled module is an instance of a subclass made for its original's class
    (:func:`compiled_module`): of this class first, then of the original's, so that
    ``isinstance`` and the original's methods (``save_pretrained``, ``generate``) see the module
    they were given (methods run on the compiled module, so their ``self(...)`` is compiled),
    and its ``forward`` has the original ``forward``'s name, docstring and signature, which
    libraries inspect (transformers' Trainer keeps only the dataset columns and labels its
    parameters name).
    """

    __slots__ = ("_orig_mod", "_magpy_cache")

    def __init__(self, module: torch.nn.Module, cache: RecordCache):  # noqa: D107
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_magpy_cache", cache)
        object.__setattr__(self, "__dict__", module.__dict__)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_orig_mod"), name)

    def __call__(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    def forward(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"


def compiled_module(module: torch.nn.Module, cache: RecordCache) -> CompiledModule:
    """``module`` compiled: a :class:`CompiledModule` of a subclass named after its class."""
    cls = type(module)
    if type(cls) is not type(CompiledModule):
        # A class of another metaclass: TorchScript's modules keep their state and methods in
        # C++, and their Python class is not one to extend (nor its forward to wrap).
        return CompiledModule(module, cache)

    @functools.wraps(cls.forward)
    def forward(self, *args, **kwargs):
        return self._magpy_cache(args, kwargs)

    # A class per call, not cached per original class: a cache would keep every class
    # (a test's local one too) alive through its forward's __wrapped__.
    namespace = {"__slots__": (), "forward": forward, "__module__": __name__,
                 "__doc__": CompiledModule.__doc__}
    name = f"Compiled{cls.__name__}"
    try:
        sub = type(name, (CompiledModule, cls), namespace)
    except TypeError:   # a layout the two bases cannot share (__slots__)
        sub = type(name, (CompiledModule,), namespace)
    # (made past the module class's own __new__: FSDP2's builds an instance of the class it
    # wraps from the arguments)
    compiled = object.__new__(sub)
    CompiledModule.__init__(compiled, module, cache)
    return compiled


def compile(fn: Callable | None = None, *, backend: str | Callable = "inductor", fullgraph: bool = False):
    """Compile a function, method or ``nn.Module`` with magpy; usable as a decorator.

    The first call runs the program under the monitor and records a guard, a mock and an
    operator graph compiled by ``backend`` ("eager", "inductor", or a callable
    ``(gm, example_inputs) -> callable``); later calls whose guard passes run the mock.
    A call that meets a dynamic operation runs eagerly, or, with ``fullgraph=True``,
    raises :class:`magpy.GraphBreakError` naming the operation and the source line.
    """
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph)
    if not callable(fn):
        raise TypeError("magpy.compile needs a callable (function, method or nn.Module), "
                        f"got {type(fn).__name__}")
    if not bytecode.SUPPORTED:
        raise UnsupportedPythonError(unsupported_python_message())
    resolved = backends.resolve(backend)
    if isinstance(fn, CompiledModule) or hasattr(fn, "_magpy_cache"):
        fn = _original(fn)
    if isinstance(fn, torch.nn.Module):
        return compiled_module(fn, RecordCache(fn, resolved, fullgraph, roots=_roots(fn)))
    if type(fn) is functools.partial:
        return _compile_partial(fn, backend, fullgraph)
    cache = RecordCache(fn, resolved, fullgraph, roots=_roots(fn))

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        return cache(args, kwargs)

    compiled._magpy_cache = cache
    return compiled


def _compile_partial(p: functools.partial, backend, fullgraph: bool):
    """A ``functools.partial`` compiled as its function, the partial's arguments given to it on
    each call: they are arguments the guard checks (a module as ``p.func`` is a root, its state
    guarded; ``p.keywords`` can change between calls)."""
    inner = compile(p.func, backend=backend, fullgraph=fullgraph)

    @functools.wraps(p)
    def compiled(*args, **kwargs):
        return inner(*p.args, *args, **{**p.keywords, **kwargs})

    compiled._magpy_cache = inner._magpy_cache
    return compiled


def _original(compiled):
    if isinstance(compiled, CompiledModule):
        return object.__getattribute__(compiled, "_orig_mod")
    cache = getattr(compiled, "_magpy_cache", None)
    # functools.wraps keeps what was compiled (a partial's cache holds its function)
    return getattr(compiled, "__wrapped__", cache.fn) if cache is not None else compiled


def _roots(fn) -> tuple:
    # Objects the compiled callable itself holds: reads from them are reads of SN #0.
    if isinstance(fn, types.MethodType):
        return (fn.__self__,)
    return (fn,)   # a function, an nn.Module, an object with __call__


def stats(compiled) -> Stats:
    """Counters of a compiled callable: monitor runs, mock runs, eager runs, graphs, records."""
    return cache_of(compiled, "magpy.stats").stats


def cache_of(compiled, who: str) -> RecordCache:
    """The records of ``compiled``, a callable ``magpy.compile`` returned; ``who`` (the API
    asking) names it in the TypeError raised for any other object."""
    cache = getattr(compiled, "_magpy_cache", None)
    if cache is None:
        raise TypeError(f"{who} needs a callable returned by magpy.compile")
    return cache


def synchronize(timeout: float | None = None) -> bool:
    """Wait until every graph compile running or queued in the background has finished
    (``magpy.config.background_compile``): each compiled graph then takes over at its
    record's next call.  False if ``timeout`` seconds passed first."""
    return background.synchronize(timeout)


def reset() -> None:
    """Drop every record of every compiled callable (the next calls record again, as the
    first did: which ifs, loops and ``.numpy()`` sites could not be recorded is forgotten)."""
    reset_all()
    background.cancel_queued()
    controlflow.forget_refusals()
    arrays.forget_refusals()


@dataclasses.dataclass(repr=False)
class Explanation:
    """What magpy makes of one call.  ``print()`` it for a summary (graphs, operations, breaks,
    the guarded inputs in words, the segments); :meth:`full` adds the generated code."""

    graph_count: int
    graphs: list
    op_count: int
    break_reasons: list
    guard_source: str
    mock_source: str | None
    result: Any = None
    fast_guard_source: str | None = None   # the stamped fast form of the guard (see codegen)
    eager: bool = False                    # the call runs eagerly (the last break ended recording)
    segments: list = dataclasses.field(default_factory=list)   # the mock's graphs and steps, in order
    inputs: list = dataclasses.field(default_factory=list)     # the guard's checks on the inputs, in words
    dynamic: list = dataclasses.field(default_factory=list)    # the symbolic sizes, in words (magpy.dynamic)
    shape_check_source: str | None = None  # the guard's check of the symbolic sizes (SHAPES)
    control_flow: list = dataclasses.field(default_factory=list)   # ifs, loops as operators
    autopilot: list = dataclasses.field(default_factory=list)  # a compiled callable's graph trials, in words
    recompiles: list = dataclasses.field(default_factory=list)  # why a compiled callable recorded again

    def __repr__(self) -> str:
        counts = f"graphs={self.graph_count}, ops={self.op_count}, breaks={len(self.break_reasons)}"
        return f"Explanation({counts}{', eager' * self.eager})"

    def __str__(self) -> str:
        return "\n".join(self.summary())

    def summary(self) -> list[str]:
        """The summary's lines (what ``print`` shows)."""
        out = [f"magpy.explain: {self.graph_count} graph{'s' * (self.graph_count != 1)}, "
               f"{self.op_count} tensor operations, {len(self.break_reasons)} graph breaks"
               + (" (the call runs eagerly)" if self.eager else "")]
        if self.inputs:
            out.append("guarded inputs:")
            out += [f"  {line}" for line in self.inputs]
        if self.dynamic:
            out.append("dynamic sizes:")
            out += [f"  {line}" for line in self.dynamic]
        for i, gm in enumerate(self.graphs):
            out.append(f"graph {i}: {_op_summary(gm)}")
        if self.control_flow:
            out.append("control flow:")
            out += [f"  {line}" for line in self.control_flow]
        for i, b in enumerate(self.break_reasons):
            last = self.eager and i == len(self.break_reasons) - 1
            out.append(f"break ({'ends recording: the call runs eagerly' if last else 'eager step'}): {b}")
        if self.autopilot:
            out.append("compiled graphs (background compile, then compiled vs eager, the faster kept; "
                       "magpy.config.background_compile, autopilot):")
            out += [f"  {line}" for line in self.autopilot]
        if self.recompiles:
            out.append("recompiles (why each recording after the first was made):")
            out += [f"  {i + 2}: {line}" for i, line in enumerate(self.recompiles)]
        if len(self.segments) > 1:
            out.append("segments (what the mock runs, in order):")
            out += [f"  {line}" for line in self.segments]
        sizes = [f"guard {_lines(self.guard_source)} lines"]
        if self.fast_guard_source:
            sizes.append(f"fast guard {_lines(self.fast_guard_source)}")
        if self.mock_source:
            sizes.append(f"mock {_lines(self.mock_source)}")
        out.append(f"generated code: {', '.join(sizes)} (print(explanation.full()) shows it)")
        return out

    def html(self, path=None, title: str = "magpy.explain") -> str:
        """One self-contained HTML page of this explanation (``magpy.explain_html``): the call
        as a timeline of graphs and eager steps with the user's lines, each graph's operations
        by kind, the guards in words, a compiled callable's recompile history, the generated
        source.  Written to ``path`` if given; returned either way."""
        page = explain_html.render(self, title)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def full(self) -> str:
        """The summary, then each graph's code, the guard, the fast guard and the mock."""
        out = self.summary()
        for i, gm in enumerate(self.graphs):
            out.append(f"--- graph {i} ---\n{gm.code.strip()}")
        out.append(f"--- guard ---\n{self.guard_source}")
        if self.shape_check_source:
            out.append(f"--- shape check (SHAPES) ---\n{self.shape_check_source}")
        if self.fast_guard_source:
            out.append(f"--- fast guard ---\n{self.fast_guard_source}")
        if self.mock_source:
            out.append(f"--- mock ---\n{self.mock_source}")
        return "\n".join(out)


def _lines(src: str) -> int:
    return src.count("\n") + 1


def _op_summary(gm) -> str:
    """``52 operations (conv2d 20, batch_norm 20, relu 17, ...)``: the most frequent first."""
    counts: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.op.startswith("call"):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            counts[name] = counts.get(name, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    listed = ", ".join(f"{k} {v}" for k, v in top[:6]) + (", ..." if len(top) > 6 else "")
    return f"{sum(counts.values())} operations ({listed})" if counts else "0 operations"


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """Run ``fn(*args, **kwargs)`` once under the monitor and report what magpy records.

    The call really runs (its side effects happen), as with ``torch._dynamo.explain``.  For
    a compiled callable, the sizes its calls were seen to change are symbolic, as in its
    next record.
    """
    target = _original(fn)
    if not callable(target):
        raise TypeError(f"magpy.explain needs a callable, got {type(target).__name__}")
    cache = getattr(fn, "_magpy_cache", None)
    lifting = copy.deepcopy(cache.lifting) if cache is not None and cache.lifting is not None else Lifting()
    result, rec = capture(target, args, kwargs, backends.resolve("eager"), _roots(target), lifting=lifting)
    if rec is None:
        return Explanation(0, [], 0, [GraphBreak("capture failed")], "", None, result)
    graphs = list(rec.graphs)
    breaks = list(rec.breaks) + ([rec.graph_break] if rec.graph_break is not None else [])
    return Explanation(len(graphs), graphs, rec.op_count, breaks, rec.guard_source, rec.mock_source, result,
                       rec.fast_source, rec.graph_break is not None, _segments(rec), list(rec.inputs),
                       list(rec.lifted) + _static_backend(cache), rec.shape_source,
                       control_flow=list(rec.conds), autopilot=_trials(cache),
                       recompiles=list(cache.stats.recompiles) if cache is not None else [])


def _trials(cache) -> list[str]:
    """The trials of a compiled callable's graphs (magpy.autopilot), one line each, and the
    records whose graphs are not compiled yet (magpy.background)."""
    if cache is None:
        return []
    return [line for r, rec in enumerate(cache.records) for line in
            ([f"record {r}: {rec.deferred.describe()}"] if rec.deferred is not None else [])
            + [f"record {r} graph {g}: {trial.describe()}" for g, trial in enumerate(rec.trials)]]


def _static_backend(cache) -> list[str]:
    """What explain says of a compiled callable whose backend cannot take symbolic sizes."""
    if cache is None or cache.lifting is not None:
        return []
    return [f"backend {cache.backend[0]!r} compiles fixed sizes: one record per input size "
            f"(symbolic sizes need one of {', '.join(sorted(backends.SYMBOLIC))})"]


def _segments(rec) -> list[str]:
    """One line per graph and eager step of a record, in the order its mock runs them."""
    lines, graphs = [], iter(range(len(rec.graphs)))
    ran = -1
    for step in (*rec.steps, None):
        before = step.before if step is not None else float("inf")
        # Graphs of the pieces before this step (empty pieces compiled nothing).
        while ran + 1 < len(rec.graphs) and rec.graph_pieces[ran + 1] < before:
            ran = next(graphs)
            ops = sum(n.op.startswith("call") for n in rec.graphs[ran].graph.nodes)
            lines.append(f"graph {ran}: {ops} operations")
        if step is None:
            break
        lines.append(_step_line(step))
    return lines


def _step_line(step) -> str:
    if step.kind == "call":
        name = getattr(step.fn, "__qualname__", None) or type(step.fn).__qualname__
        why = f"  <- {step.where}" if step.where is not None else "  (computed from an eager value)"
        return f"step {step.var} = {name}(...){why}".replace("\n", " ")
    what = {"check": f"check {step.args[0]} == {step.args[1]!r}", "truth": f"check bool({step.args[0]}) is "
            f"{step.args[1]}", "same": f"check {step.args[0]} is {step.args[1]}"}[step.kind]
    if step.resume is not None:
        return f"{what}; if not, resume the monitor at {step.resume.where()}"
    return f"{what}; if not, the call misses this record"
