"""One monitor run into one record: a Capture's RefGraph and operator graphs -> guard, mock,
compiled graphs.

A record is what the cache stores: its guard decides whether a call may reuse it; its
action is either the mock (which runs the compiled graphs, with the eager steps between
them, ``magpy.records.segments``) or, when the run met an operation that ended recording, running
the call eagerly (the guard then covers what the run read before it, which is what decided
that it would be met).  A continuation is a record of the rest of a call from a resume
point (``magpy.records.continuations``), made by :func:`capture_continuation`.

magpy's own machinery failing (a RefGraph rule, operator recording, code generation,
compiling the generated source ...) is not the program's error: the monitor run already is
the eager execution, so its result is returned, the record is dropped with one warning
naming the stage, and the callable runs eagerly from then on (``config.on_capture_error =
"raise"`` raises :class:`CaptureError` instead).  Exceptions of the program itself propagate
as they would eagerly.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import time
import types
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from magpy import logs
from magpy.backends import autopilot, background, registry
from magpy.backends.eager_twins import eager_twin
from magpy.backends.gpu import batched_predicates, cuda_graphs, host_loops
from magpy.capture import annotations, collector
from magpy.capture.callees import builtin_standins, fx_tracing, torchscript
from magpy.capture.monitor import Monitor, bytecode, code_info, generators, shared_default_policy
from magpy.capture.monitor.tracebacks import user_stacklevel
from magpy.capture.refgraph.graph import ARG, KWARG, Kind, is_immutable
from magpy.config import config
from magpy.errors import BackendError, BackendFailedWarning, CaptureError, CaptureFailedWarning, GraphBreak
from magpy.graphs import mode_stack, rng
from magpy.graphs.dynamic import Lifting
from magpy.graphs.opgraph import (
    CONTIGUOUS_OUTPUTS,
    START_MODES,
    copy_graph_module,
    repeatable,
    set_thread_modes,
    thread_modes,
    updated_in_place,
)
from magpy.records import continuations
from magpy.records.codegen import Generated, compile_source, generate, same_value
from magpy.records.codegen.guard import inputs_in_words, path_in_words, write_shape_check
from magpy.records.continuations import Resume
from magpy.records.segments import Capture
from magpy.training import backward, fsdp, train_steps


@dataclass
class Record:
    guard: object                  # (args, kwargs) -> (env, stamp) | None
    mock: object | None            # env -> result, or MISS (a check after an eager step failed); None: eager
    graphs: tuple                  # the compiled pieces' fx graphs, in the order the mock runs them
    guard_source: str
    mock_source: str | None
    graph_break: GraphBreak | None
    op_count: int
    make_fast: object = None       # stamp -> fast guard (args, kwargs) -> env | None
    fast_source: str | None = None
    diagnose: object = None        # (args, kwargs) -> why the guard fails, in words (logs)
    fast: object = None            # the fast guard of the last stamp
    misses: int = 0                # fast guard misses in a row that the full guard passed
    mutated: tuple = ()            # positions of graph inputs the run updated in place
    changed: bool = False          # the run changed objects it reached from outside
    steps: tuple = ()              # the eager steps between the graphs (magpy.records.eager_steps.Step)
    graph_pieces: tuple = ()       # the piece (Step.before) each of ``graphs`` was recorded as
    inputs: tuple = ()             # the guard's checks on the arguments, in words (explain)
    breaks: tuple = ()             # the dynamic operations that became steps (GraphBreak)
    # resume point -> the records of the call's rest from there (magpy.records.continuations), MRU first
    continuations: dict = dataclasses.field(default_factory=dict)
    # resume point -> what its continuations' recordings saw of their values, so what the next
    # one lifts (a float the rest of the call computes from, RAdam's ``rho_t``: a graph input)
    lifting_at: dict = dataclasses.field(default_factory=dict)
    effects: bool = False          # its mock has effects before it ends (a failure cannot re-run the call)
    lifted: tuple = ()             # its symbolic sizes, in words (magpy.graphs.dynamic)
    shape_source: str | None = None   # the guard's SHAPES check (symbolic sizes), if any
    conds: tuple = ()              # the ifs recorded as torch.cond, in words (magpy.graphs.controlflow)
    trials: tuple = ()             # its compiled graphs on trial against eager (magpy.backends.autopilot)
    deferred: background.Deferred | None = None   # its graphs' compile, until it is taken
    draws: bool = False            # its run drew random numbers (magpy.graphs.rng)
    entry_modes: tuple = ()        # torch's modes its guard passed under (a failed mock restores them)
    # why a check of its mock fails on calls like those it was recorded from: a call that it
    # and the other records miss runs eagerly instead of recording again (RecordCache.settle)
    unstable: str | None = None

    def match(self, args: tuple, kwargs: dict):
        """The mock's environment if this record covers the call, else None.  A compile
        finished in the background is taken first (it may change the guard's size check);
        the first hit starts it."""
        deferred = self.deferred
        if deferred is not None and deferred.claim():
            self.deferred = None   # taken once (one thread), even if taking raises (on_backend_error="raise")
            deferred.take(self, deferred.results())
        env = self._guard(args, kwargs)
        if env is not None and self.deferred is not None:
            self.deferred.start()
        return env

    def _guard(self, args: tuple, kwargs: dict):
        fast = self.fast
        if fast is not None:
            env = fast(args, kwargs)
            if env is not None:
                if config.verify_fast_guard:
                    hit = self.guard(args, kwargs)
                    _verify_fast(self, env, hit and hit[0], "the fast guard passed, the full guard")
                self.misses = 0
                return env
        hit = self.guard(args, kwargs)
        if hit is None:
            return None
        env, stamp = hit
        if self.make_fast is not None:
            self.misses += 1
            # A program that changes the state it reads on every call never hits the fast
            # guard: stop stamping for it.
            self.fast = self.make_fast(*stamp) if self.misses <= _MAX_FAST_MISSES else None
            if config.verify_fast_guard and self.fast is not None:
                _verify_fast(self, env, self.fast(args, kwargs), "a fresh stamp's fast guard")
        return env

    def repeats(self, other: "Record") -> bool:
        """Is this record ``other`` made again: the same guard, mock and graphs, the mock over
        the same constants?  (Made from a call whose guard ``other`` passed and whose mock
        missed it: a check of ``other``'s mock fails on calls like those it was recorded from,
        RecordCache.settle.)"""
        if (self.guard_source, self.mock_source, self.shape_source, str(self.graph_break)) != \
                (other.guard_source, other.mock_source, other.shape_source, str(other.graph_break)):
            return False
        if [_code(g) for g in self.graphs] != [_code(g) for g in other.graphs]:
            return False
        if self.mock is None or other.mock is None:
            return self.mock is other.mock
        mine, theirs = _constants(self.mock, {}), _constants(other.mock, {})
        return mine.keys() == theirs.keys() and all(
            a is theirs[k] or (is_immutable(a) and same_value(a, theirs[k])) for k, a in mine.items())


def _code(gm) -> str | None:
    return getattr(gm, "code", None)


def _constants(fn, found: dict) -> dict:
    """The globals generated function ``fn`` reads, by name, those of the functions it calls
    that were generated into its namespace too (a mock's continuations) in their place."""
    ns = fn.__globals__
    for name in fn.__code__.co_names:
        v = ns.get(name)
        if name in found or name.startswith("GRAPH"):   # (the graphs are compared by their code)
            continue
        if getattr(v, "__globals__", None) is ns:
            found[name] = None
            _constants(v, found)
        elif name in ns:
            found[name] = v
    return found


_MAX_FAST_MISSES = 4


class FastGuardMismatch(AssertionError):
    """Debug mode (``config.verify_fast_guard``): the fast and the full guard disagree."""


def _verify_fast(rec: Record, env, other, what: str) -> None:
    # Debug mode (tests): the fast and the full guard must agree, on the same values.
    if other is None or len(other) != len(env) or any(a is not b for a, b in zip(other, env)):
        raise FastGuardMismatch(f"magpy: {what} disagrees ({'failed' if other is None else 'other values'}):"
                                f"\n{rec.fast_source}\n{rec.guard_source}")


@functools.lru_cache(maxsize=None)
def _native_module(name: str) -> bool:
    # torch's own Python code runs natively (its tensor operations reach __torch_function__),
    # except nn.Module code, parametrizations and the old-style weight_norm/spectral_norm
    # (forward pre-hooks that set module.weight on every call), whose attribute reads and
    # writes are the program's.
    return (name == "torch" or name.startswith("torch.")) and not name.startswith(_MONITORED_TORCH) \
        or name.startswith("magpy.") or name == "inspect" or annotations.is_numpy_module(name)


# DistributedDataParallel's forward is the program's too: what it reads of the module is
# guarded, and each call it makes to its reducer (torch.distributed natives) is an eager step.
# torch.distributions' argument validation (``if not valid: raise ValueError``) becomes a
# check in the graph only where the monitor sees the jump.
_MONITORED_TORCH = ("torch.nn.modules", "torch.nn.utils.parametriz", "torch.nn.utils.weight_norm",
                    "torch.nn.utils.spectral_norm", "torch.nn.parallel.distributed",
                    "torch.distributions", "torch.utils._contextlib",
                    "torch.distributed.algorithms.join", *train_steps.MONITORED_TORCH)


# Library code whose is_compiling() branch only skips eager work that Dynamo cannot trace but
# the monitor runs like any other code: DistributedDataParallel's one-time lazy init (it sets
# up optimizers applied in backward), so a DDP module first called compiled is set up as in eager.
_EAGER_WORK_WHEN_COMPILING = frozenset({torch.nn.parallel.DistributedDataParallel._pre_forward.__code__})


def _compiling(monitor, args, kwargs):
    frame = monitor.current
    return frame is None or frame.code not in _EAGER_WORK_WHEN_COMPILING


_FUNCTION_APPLY = torch.autograd.Function.apply.__func__


def _custom_function(recorder):
    """``MyFunction.apply(...)`` of a custom ``autograd.Function``: one graph operation, so the
    user's ``backward`` computes its gradients (``OpRecorder.apply_function``).  torch calls
    ``forward`` from C; during the recording a subclass whose ``forward`` calls back into the
    monitor runs instead, so what the forward reads is guarded like any other code."""
    def intrinsic(monitor, args, kwargs):
        cls, *rest = args
        return recorder.apply_function(_graph_apply(cls), _monitored(monitor, cls).apply, tuple(rest), kwargs)
    return intrinsic


def _new_parameter(recorder):
    """``nn.Parameter(data)``: a new leaf sharing ``data``'s storage, made natively (torch does
    not report it as an operation).  Where the call leaves it behind (a module made lazily),
    the mock makes it the same way from the tensor its graph gives for ``data``."""
    def intrinsic(monitor, args, kwargs):
        param = torch.nn.Parameter(*args, **(kwargs or {}))
        data = args[0] if args else (kwargs or {}).get("data")
        if isinstance(data, torch.Tensor):
            recorder.wrapped[id(param)] = (data, param.requires_grad, param)   # (kept alive: ids stay its)
        return param
    return intrinsic


def _graph_apply(cls):
    # fx writes a torch-module callable into code by its dotted name, which Function.apply
    # (a classmethod) does not have: a function of ours is referenced as a global instead.
    def apply(*args, **kwargs):
        return cls.apply(*args, **kwargs)

    apply.__name__ = f"{cls.__name__}_apply"
    return apply


def _monitored(monitor, cls):
    forward = cls.forward

    def monitored_forward(*args, **kwargs):
        return monitor.call(forward, args, kwargs or None)

    return type(cls.__name__, (cls,), {"forward": staticmethod(monitored_forward),
                                       "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def _is_compiling_functions():
    import torch._dynamo
    return {torch.compiler.is_compiling, torch._dynamo.is_compiling, torch._utils.is_compiling}


@functools.lru_cache(maxsize=1)
def _base_policy():
    policy = shared_default_policy().copy()
    policy.native_module = _native_module
    # Libraries ask torch.compiler.is_compiling() to choose their graph-friendly code paths
    # (transformers skips data-dependent mask checks): a recording run is a compilation.
    for fn in _is_compiling_functions():
        policy.add_intrinsic(fn, _compiling)
    # Module attribute reads and writes (submodules, parameters) are modelled by the RefGraph rules.
    for fn in (torch.nn.Module.__getattr__, torch.nn.Module.__setattr__, torch.nn.Module.__delattr__):
        policy.run_natively(fn)
    for fn in annotations.MONITORED_TORCH_FUNCTIONS:
        policy.reroute(fn, builtin_standins.always(fn))   # entered as the program's own code
    policy.add_intrinsic(torch.autograd.Variable, _variable)
    for fn, intrinsic in mode_stack.INTRINSICS:   # (the recorder's mode is not the program's)
        policy.add_intrinsic(fn, intrinsic)
    # Scripted functions and scripted modules' forwards run their original Python, as under
    # torch.compile for functions: their tensor operations are recorded like any others.
    policy.substitute(torch.jit.ScriptFunction, torchscript.original_function)
    policy.substitute(torch._C.ScriptMethod, torchscript.original_method)
    policy.add_intrinsic(torch.jit.is_scripting, torchscript.is_scripting)
    fx_tracing.look_through_tracing()
    train_steps.add_to(policy)
    for callee, choose in builtin_standins.REROUTES:
        policy.reroute(callee, choose)
    for owner, name, choose in builtin_standins.METHOD_REROUTES:
        policy.reroute_method(owner, name, choose)
    # FSDP2's forward hooks: monitored stand-ins around an eager step of each (magpy.training.fsdp).
    for callee, stand_in in fsdp.STAND_INS:
        policy.reroute(callee, builtin_standins.always(stand_in))
    return policy


def _variable(monitor, args, kwargs):
    # Legacy Variable(t) is t.detach() (shared data and version counter, no grad_fn, a
    # Parameter gives a Tensor); called as such, the operation recorder sees it.
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        return monitor.call(torch.Tensor.detach, (args[0],), None)
    return torch.autograd.Variable(*args, **(kwargs or {}))


def resume_unrecorded(point, throw: BaseException | None = None):
    """The rest of a call from resume point ``point`` (a :class:`continuations.Resume`), run by
    the monitor without recording, under a recording's call policy: its frames' state was made
    under it (a profiler range the recording did not open, ``is_compiling()`` true)."""
    return Monitor(policy=record_policy()).resume(continuations.frames(point, None), throw)


def record_policy():
    """The call policy of a recording run: the default one, torch kept native, and the
    annotated Python functions (users' and the table's, e.g. ``copy.deepcopy``) run natively."""
    policy = _base_policy().copy()
    for fn in annotations.native_functions():
        policy.run_natively(fn)
    return policy


def capture(fn, args: tuple, kwargs: dict, backend, roots=(), errors: list | None = None,
            lifting: Lifting | None = None, fullgraph: bool = False) -> tuple[object, Record | None]:
    """Run ``fn(*args, **kwargs)`` under the monitor; return its result and its record.

    The result is the real one (the monitor run *is* the eager execution).  The record is
    None when magpy's own machinery failed and ``config.on_capture_error`` is "fallback"
    (a warning names the stage; ``errors``, if given, receives the :class:`CaptureError`).
    ``lifting``: the callable's memory of input sizes, to lift those that keep changing
    (None: the backend cannot compile symbolic sizes).  ``fullgraph``: a failure raises,
    whatever ``on_capture_error`` says (one graph or an exception).
    """
    with collector.full_collections_deferred():
        return _capture(fn, args, kwargs, backend, roots, errors, lifting, fullgraph)


def _capture(fn, args, kwargs, backend, roots, errors, lifting, fullgraph):
    try:
        with _stage("setting up the recording"):
            cap = _recording(fn, args, kwargs, roots, lifting)
            cap.branches.enabled = backend[0] not in registry.NO_CONDS
            cap.recorder.joint_backend = backend[0] in backward.BACKENDS
    except CaptureError as e:
        _capture_failed(e, errors, fullgraph)
        return fn(*args, **kwargs), None   # the program has not run yet: run it eagerly
    before = rng.state()
    result = cap.run(fn, args, kwargs)
    try:
        if cap.breaker.internal is not None:
            err = cap.breaker.internal
            raise _stage_error(_observer_stage(err), err) from err
        draws = rng.changed(before)
        rec, result = _make_record(cap, result, args, kwargs, backend, _parameter_names(fn), draws)
    except CaptureError as e:
        return result, _capture_failed(e, errors, fullgraph)
    if lifting is not None:
        lifting.saw(_inputs_seen(cap))
    return result, rec


def _inputs_seen(cap: Capture) -> list:
    """The nodes of the tensors, floats, ints and tuples the run read from outside."""
    return [sn for sn in cap.refgraph.nodes[1:]
            if sn.read and (sn.kind is Kind.TENSOR or type(sn.value) in (float, int, tuple))]


def _parameter_names(fn) -> list[str]:
    """The names of ``fn``'s positional parameters as a caller passes them (no ``self``)."""
    if isinstance(fn, torch.nn.Module):
        fn = fn.forward
    skip = 1 if isinstance(fn, types.MethodType) else 0
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return list(code.co_varnames[skip:code.co_argcount]) if code is not None else []


def capture_continuation(resume: Resume, backend, errors: list | None = None,
                         lifting: Lifting | None = None) -> tuple[object, Record | None]:
    """Resume the monitor on the frames of a failed check and record the rest of the call: a
    continuation, whose arguments are the frames' values (``Resume.values``).  ``lifting``:
    the resume point's (numbers that changed between its continuations are lifted)."""
    with collector.full_collections_deferred():
        return _capture_continuation(resume, backend, errors, lifting)


def _capture_continuation(resume, backend, errors, lifting):
    values = resume.values()
    try:
        with _stage("setting up the recording"):
            cap = Capture(_policy, lifting)
            cap.recorder.joint_backend = backend[0] in backward.BACKENDS
            for i, v in enumerate(values):
                # Plain values (a loop counter, a step's small int) are constants of the record;
                # tensors are checked as arguments are (a parent whose sizes are symbolic hands
                # on tensors of other sizes than the continuation's graphs were recorded for).
                cap.refgraph.root(ARG, i, v, read=is_immutable(v) or isinstance(v, torch.Tensor), anew=True)
    except CaptureError as e:
        _capture_failed(e, errors)
        return resume_unrecorded(resume), None
    before = rng.state()
    result = cap.resume(resume)
    try:
        if cap.breaker.internal is not None:
            err = cap.breaker.internal
            raise _stage_error(_observer_stage(err), err) from err
        names = [f"resumed value {i}" for i in range(len(values))]
        rec, result = _make_record(cap, result, values, {}, backend, names, rng.changed(before))
    except CaptureError as e:
        return result, _capture_failed(e, errors)
    if lifting is not None:
        lifting.saw(_inputs_seen(cap))
    return result, rec


def _recording(fn, args, kwargs, roots, lifting) -> Capture:
    """A capture whose RefGraph has the call's roots."""
    cap = Capture(_policy, lifting)
    g = cap.refgraph
    used = _used_parameters(fn)
    for i, a in enumerate(args):
        g.root(ARG, i, a, read=used is None or i >= len(used[0]) or used[0][i])
    for k, v in kwargs.items():
        g.root(KWARG, k, v, read=used is None or used[1].get(k, True))
    for obj in roots:
        g.const(obj)
    return cap


def _policy(recorder):
    policy = record_policy()
    policy.add_intrinsic(_FUNCTION_APPLY, _custom_function(recorder))
    policy.add_intrinsic(torch.nn.Parameter, _new_parameter(recorder))
    policy.add_intrinsic(torch.Tensor.backward, train_steps.backward_intrinsic(recorder))
    for step, intrinsic in fsdp.steps(recorder):
        policy.add_intrinsic(step, intrinsic)
    return policy


def _used_parameters(fn):
    """Which positional parameters / keywords of a plain function its code ever reads (an
    argument it never looks at needs no guard, paper §4.1); None when that is not known."""
    offset = 0
    if isinstance(fn, types.MethodType):
        fn, offset = fn.__func__, 1
    if type(fn) is not types.FunctionType:
        return None
    code = fn.__code__
    if {"locals", "vars", "_getframe", "currentframe"} & set(code.co_names):
        return None
    info = code_info(code)
    loaded = {info.localsplus[slot] for ins in info.instructions if ins is not None
              for slot in bytecode.fast_slots(bytecode.FAST_READS, ins)}
    loaded |= {ins.argval for ins in info.instructions if ins is not None
               and ins.opname in ("LOAD_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF")}
    loaded |= set(code.co_cellvars)
    params = code.co_varnames[offset:code.co_argcount]
    if code.co_flags & inspect.CO_VARARGS:
        return None
    return [name in loaded for name in params], {
        name: name in loaded for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]}


def _make_record(cap: Capture, result, args, kwargs, backend, names, draws: bool) -> tuple[Record, object]:
    """The record of a finished monitor run, and the result to hand back (see
    :func:`_native_twin`); each stage's failure is a :class:`CaptureError` naming it.
    ``draws``: the run drew random numbers."""
    g = cap.refgraph
    broken = cap.broken is not None
    if cap.shapes is not None:
        with _stage("finishing the symbolic sizes (dynamic)"):
            cap.shapes.finish([g for p in cap.recorder.pieces for g in p.graphs()])
    with _stage("finding what the call changed (RefGraph)"):
        g.finish()
        changed = bool(g.mock_nodes())
        inputs = tuple(inputs_in_words(g, names, cap.lifted))
    with _stage("generating the guard and mock (codegen)"):
        gen = generate(g, cap, cap.branches.result(result), len(args), tuple(kwargs), broken, names)
    with _stage("compiling the generated guard (compile_source)"):
        guard = compile_source(gen.guard_source, gen.namespace, "guard", f"guard {id(gen):x}")
        diagnose = _diagnosis(gen)
        make_fast = None
        if gen.fast_source is not None:
            make_fast = compile_source(gen.fast_source, gen.namespace, "make_fast", f"fast guard {id(gen):x}")
    fast = (make_fast, gen.fast_source, diagnose)
    op_count = cap.recorder.op_count
    if broken:
        return Record(guard, None, (), gen.guard_source, None, cap.broken, op_count, *fast,
                      changed=changed, breaks=tuple(cap.segmenter.breaks), inputs=inputs,
                      shape_source=_link_shape_check(gen, cap.lifted),
                      lifted=_lifted_words(cap.lifted, names)), result
    with _stage("closing the operator graphs (opgraph)"):
        graphs = cap.graphs()
    examples = [None if gm is None else cap.example_inputs(i) for i, gm in enumerate(graphs)]
    with _stage("compiling the graphs (backend)"):
        deferred, trials = _compiled(backend, graphs, examples, gen, cap.lifted, names, draws)
    shape_source = _link_shape_check(gen, cap.lifted)
    with _stage("compiling the generated mock (compile_source)"):
        mock = compile_source(gen.mock_source, gen.namespace, "mock", f"mock {id(gen):x}")
    env = cap.recorder.env_inputs()
    mutated = tuple(i for i, sn in enumerate(env) if updated_in_place(sn))
    rec = Record(guard, mock, tuple(gm for gm in graphs if gm is not None), gen.guard_source, gen.mock_source,
                 None, op_count, *fast, mutated=mutated, changed=changed, steps=tuple(cap.steps),
                 graph_pieces=tuple(i for i, gm in enumerate(graphs) if gm is not None), inputs=inputs,
                 breaks=tuple(cap.segmenter.breaks), effects=cap.segmenter.effects,
                 lifted=_lifted_words(cap.lifted, names),
                 shape_source=shape_source, conds=tuple(cap.branches.conds), trials=trials, deferred=deferred,
                 draws=draws, entry_modes=cap.entry_modes)
    if gen.lone_result:
        with _stage("handing back a native generator"):
            result = _native_twin(result)
    return rec, result


def _compiled(backend, graphs: list, examples: list, gen, lifted, names, draws: bool) -> tuple:
    """Compile a record's ``graphs`` (None for a piece without operations) and put them in
    its mock's place: in the background where that is on (their eager twins until then),
    else now.  ``(the background compile or None, the trials among them)``."""
    deferred = None
    if backend[0] != "eager" and config.background_compile and background.can_defer() and \
            (backend[0] in registry.DRAWS_NOTHING or not draws):
        deferred, compiled = _defer(backend, graphs, examples, gen, lifted, names)
    else:
        compiled = [None if gm is None else _compile_graph(backend, gm, ex)
                    for gm, ex in zip(graphs, examples)]
    return deferred, _link(gen, compiled)


def _lifted_words(lifted, names) -> tuple[str, ...]:
    """The record's lifted sizes and floats in words (once the backend added what it assumed);
    ``lifted``: the capture's :class:`magpy.graphs.dynamic.Shapes`, or None."""
    return tuple(lifted.describe(lambda sn: path_in_words(sn, names))) if lifted is not None else ()


def _link(gen, versions: list) -> tuple:
    """Put each graph's version in the mock's place; the trials among them (magpy.backends.autopilot),
    each told how to put the version it keeps there."""
    gen.link(versions)
    trials = tuple(fn for fn in versions if isinstance(fn, autopilot.Trial))
    for i, fn in enumerate(versions):
        if isinstance(fn, autopilot.Trial):
            fn.settle = functools.partial(gen.relink, i)
    return trials


def _link_shape_check(gen, lifted) -> str | None:
    """The guard's ``SHAPES`` check, written once the backend compiled the graphs (compiling
    may assume more of the lifted sizes, ``lifted``: the capture's Shapes); its source, or
    None where no size is symbolic."""
    if lifted is None or not lifted.symbols:
        return None
    with _stage("compiling the shape check (codegen)"):
        src = write_shape_check(lifted)
        _install_shape_check(gen, src)
    return src


def _install_shape_check(gen, src: str) -> None:
    check = compile_source(src, gen.namespace, "shapes", f"shapes {id(gen):x}")
    check.conditions = src.split("return ", 1)[1]   # what the diagnosis says it failed
    gen.namespace["SHAPES"] = check


# The fields of a record that are plain data (a saved program holds them as they are).
SAVED_FIELDS = ("op_count", "mutated", "changed", "graph_pieces", "inputs", "effects", "lifted", "conds",
                "draws", "entry_modes", "unstable")


def restore(sources: dict, fields: dict, namespace: dict, graphs: list, examples: list, backend,
            breaks: tuple, graph_break, steps: tuple) -> Record:
    """A record made in another process (magpy.api.persist): its generated ``sources`` (guard,
    fast guard, mock, shape check, diagnosis) compiled in ``namespace`` (the constants they
    name, found in this process), its ``graphs`` compiled now by ``backend`` for ``examples``,
    as :func:`_make_record` makes a record; ``fields``: the rest (:data:`SAVED_FIELDS`)."""
    gen = Generated(sources["guard"], sources["mock"], namespace, sources["fast"], sources["diagnose"])
    tag = f"{id(gen):x}"
    guard = compile_source(gen.guard_source, namespace, "guard", f"guard {tag}")
    make_fast = None if gen.fast_source is None else \
        compile_source(gen.fast_source, namespace, "make_fast", f"fast guard {tag}")
    fast = {"make_fast": make_fast, "fast_source": gen.fast_source, "diagnose": _diagnosis(gen)}
    if sources["shapes"] is not None:
        _install_shape_check(gen, sources["shapes"])
    if gen.mock_source is None:
        return Record(guard, None, (), gen.guard_source, None, graph_break, breaks=breaks,
                      shape_source=sources["shapes"], **fast, **fields)
    pieces = [None] * (max(fields["graph_pieces"], default=-1) + 1)
    inputs = list(pieces)
    for piece, gm, ex in zip(fields["graph_pieces"], graphs, examples):
        pieces[piece], inputs[piece] = gm, ex
    deferred, trials = _compiled(backend, pieces, inputs, gen, None, (), fields["draws"])
    if deferred is not None:
        deferred.start()   # (now: the program calls it next)
    mock = compile_source(gen.mock_source, namespace, "mock", f"mock {tag}")
    return Record(guard, mock, tuple(graphs), gen.guard_source, gen.mock_source, None, steps=steps,
                  breaks=breaks, shape_source=sources["shapes"], trials=trials, deferred=deferred, **fast,
                  **fields)


def _native_twin(result):
    """The result eager would have returned where the monitor's differs in type: a generator
    (coroutine, async generator) the call made and returned unstarted, held nowhere else in
    the program's state, is replaced by a native one (``type(g) is types.GeneratorType``; it
    runs natively, as eager's would).  The mock of later calls makes one the same way."""
    call = generators.native_call(result) if generators.is_monitored(result) else None
    if call is None:
        return result
    fn, args, kwargs = call
    return fn(*args, **kwargs)


def _diagnosis(gen):
    """The record's ``diagnose``, compiled on its first use (only MAGPY_LOGS=recompiles uses
    it: the recording does not pay for it).  A failure to make it never fails the call.  Its
    ``source`` is the generated source (a saved program holds it)."""
    compiled = []

    def diagnose(args, kwargs):
        if not compiled:
            try:
                compiled.append(compile_source(gen.diagnose_source, gen.namespace, "diagnose",
                                               f"diagnose {id(gen):x}"))
            except Exception as e:  # noqa: BLE001 - magpy's bug, reported in the log line
                why = f"(no diagnosis: {type(e).__name__}: {e})"
                compiled.append(lambda args, kwargs: why)
        return compiled[0](args, kwargs)

    diagnose.source = gen.diagnose_source
    return diagnose


def _compile_graph(backend, gm, example):
    """What runs in ``gm``'s place, compiled now, in the calling thread."""
    run, loops = _prepared(gm)
    twin = _twin(run, loops)
    # (not while the worker compiles: compilers share global state; a backend that runs the
    # graph draws numbers the program does not)
    with background.exclusive(), rng.kept():
        compiled = _attempt(backend, run, loops, example)
    return _version(backend, run, example, _ops(gm), compiled, twin)


def _defer(backend, graphs: list, examples: list, gen, lifted, names) -> tuple[background.Deferred, list]:
    """The compile of a record's graphs in the background (:mod:`magpy.backends.background`), under
    the grad and inference mode of the recording, and how the record takes its results; and
    the graphs' eager twins, which run until then."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    prepared = [None if gm is None else _prepared(gm) for gm in graphs]
    twins = [None if p is None else _twin(*p) for p in prepared]
    ops = [None if gm is None else _ops(gm) for gm in graphs]

    def job() -> list:
        with torch.inference_mode(inference), torch.autograd.set_grad_enabled(grad):
            return [None if p is None else _attempt(backend, *p, ex) for p, ex in zip(prepared, examples)]

    def take(rec: Record, results: list | Exception) -> None:
        if isinstance(results, Exception):   # the job itself failed: so did every graph
            results = [results] * len(graphs)
        versions, failure = [], None
        for n, result, twin, p, ex in zip(ops, results, twins, prepared, examples):
            try:
                versions.append(None if twin is None else _version(backend, p[0], ex, n, result, twin))
            except BackendError as e:   # on_backend_error="raise": raised once every graph has its place
                versions.append(twin)
                failure = failure or e
        rec.trials = _link(gen, versions)
        for trial in rec.trials:
            trial.report = deferred.report
        if lifted is not None:   # (a loaded record: its shape check as saved, record.restore)
            rec.shape_source = _link_shape_check(gen, lifted)
            rec.lifted = _lifted_words(lifted, names)
        if deferred.taken is not None:
            deferred.taken(sum(twin is not None for twin in twins))
        if failure is not None:
            raise failure

    deferred = background.Deferred(job, take, backend[0])
    return deferred, twins


def _prepared(gm) -> tuple:
    """``gm`` with the rewrites its eager twin and its compiled version both run
    (:func:`magpy.training.train_steps.number_arguments`; where it runs on a GPU, its control flow decided
    on the host: branch predicates read back together, counted loops stepped from the host,
    magpy.backends.gpu.batched_predicates and magpy.backends.gpu.host_loops), and the loops whoever runs it
    must hold (one set,
    shared by the twin and the compiled version: one warm-up and one capture each)."""
    train_steps.number_arguments(gm)
    return host_loops.lower(batched_predicates.gathered(gm))


def _twin(gm, loops: list) -> Callable:
    """The eager twin of ``gm`` (a :func:`_prepared` graph), taken before a backend may rewrite
    the graph."""
    twin = eager_twin(gm).forward
    return host_loops.Holding(twin, loops) if loops else twin


def _backend_for(backend, gm) -> tuple:
    """The backend that compiles ``gm``: "eager" where the chosen backend's gradients of what
    ``gm`` holds are not eager's (``registry.eager_gradients_only``): a loop stays one
    operator for every length, run as Python."""
    if registry.eager_gradients_only(gm, backend[0]):
        return registry.resolve("eager")
    return backend


def _attempt(backend, gm, loops: list, example):
    """``gm`` (a :func:`_prepared` graph, holding ``loops``) compiled by the backend, or the
    exception it failed with.  A compiling backend rewrites a copy (its passes fold constants,
    rewrite ``alpha``s ... in place): the record keeps its graph as recorded, which its eager
    twin may be running meanwhile and which ``magpy.save`` writes (compiled again in another
    process, it must give the same graph, and so the same cache key, as here)."""
    name, fn = _backend_for(backend, gm)
    before = thread_modes()
    try:
        # Traced under the modes it starts under, wherever the compile runs (after the call,
        # in the background): a graph of an optimizer's update that starts under no_grad,
        # compiled with grad on, took AOTAutograd's training path (Adamax's for-loop step
        # then failed in Inductor's code with a shape error, torch 2.13).
        set_thread_modes(gm.meta.get(START_MODES, before))
        start = time.perf_counter()
        compiled = fn(gm if name == "eager" else copy_graph_module(gm), example)
        if loops:
            compiled = host_loops.Holding(compiled, loops)
        if name != "eager" and gm.meta[CONTIGUOUS_OUTPUTS]:
            compiled = registry.EagerLayout(compiled, gm.meta[CONTIGUOUS_OUTPUTS])
        if config.cuda_graphs and not backward.has_backward(gm):
            compiled = cuda_graphs.wrap(compiled, example)
        logs.logger("graphs").info("compiled a graph of %d operations with %r in %.3f s", _ops(gm), name,
                                   time.perf_counter() - start)
        return compiled
    except Exception as e:  # noqa: BLE001 - any backend failure
        return e
    finally:
        # (a backend that traces the graph runs its mode nodes; failing midway it would leave
        # the modes the graph switched to)
        set_thread_modes(before)


def _version(backend, gm, example, ops: int, compiled, twin):
    """What runs in ``gm``'s place: ``compiled`` (on trial against its eager ``twin``, and on a
    GPU against itself replayed as a CUDA graph, where the autopilot is on); where the backend
    failed (``compiled`` is its exception), the twin with a warning, or :class:`BackendError`
    (``config.on_backend_error = "raise"``)."""
    name = _backend_for(backend, gm)[0]
    if isinstance(compiled, Exception):
        if config.on_backend_error == "raise":
            raise BackendError(f"backend {name!r} failed to compile the graph: {compiled!r}") from compiled
        warnings.warn(f"magpy: backend {name!r} failed to compile a graph ({type(compiled).__name__}: "
                      f"{compiled}); running the graph eagerly instead", BackendFailedWarning,
                      stacklevel=user_stacklevel())
        return twin
    if name != "eager" and config.autopilot:
        return autopilot.Trial(compiled, twin, name, ops, _replayed(gm, compiled, example),
                               paired=repeatable(gm) and not backward.has_backward(gm))
    return compiled


def _replayed(gm, compiled, example):
    """``compiled`` replayed as a CUDA graph, for the autopilot to try, where it qualifies and
    ``config.cuda_graphs`` did not already wrap it; else None."""
    if config.cuda_graphs or backward.has_backward(gm):
        return None
    replay = cuda_graphs.wrap(compiled, example)
    return replay if replay is not compiled else None


def _ops(gm) -> int:
    return sum(n.op.startswith("call") for n in gm.graph.nodes)


@contextlib.contextmanager
def _stage(name: str):
    """Any exception raised in the block is magpy's failure at stage ``name``."""
    try:
        yield
    except BackendError:
        raise   # on_backend_error="raise": the backend's own error
    except Exception as e:  # noqa: BLE001 - magpy's machinery, never the program
        raise _stage_error(name, e) from e


def _stage_error(name: str, err: BaseException) -> CaptureError:
    what = str(err) if isinstance(err, CaptureError) else f"{type(err).__name__}: {err}"
    return CaptureError(f"magpy failed {name}: {what}")


def _observer_stage(err: BaseException) -> str:
    """Where in magpy an error the observers caught was raised: its innermost magpy frame
    outside the monitor (a RefGraph rule, the operator recorder)."""
    where = "the observers"
    tb = err.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.startswith("magpy.") and not module.startswith("magpy.capture.monitor"):
            where = f"{module}.{tb.tb_frame.f_code.co_qualname}"
        tb = tb.tb_next
    return f"recording ({where})"


def machinery_failed(err: CaptureError, fullgraph: bool = False) -> None:
    """magpy's own machinery failed on a call: raise ``err`` if ``config.on_capture_error``
    is "raise" or the callable was compiled with ``fullgraph=True``, else warn (once per
    callable: its cache then runs it eagerly)."""
    if fullgraph or config.on_capture_error == "raise":
        raise err
    warnings.warn(f"{err}; running this callable eagerly from now on", CaptureFailedWarning,
                  stacklevel=user_stacklevel())


def _capture_failed(err: CaptureError, errors: list | None, fullgraph: bool = False) -> None:
    if errors is not None:
        errors.append(err)
    machinery_failed(err, fullgraph)
    return None
