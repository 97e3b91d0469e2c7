"""Segments (paper §5.3.1): a run cut into operator graphs around dynamic operations.

When the recording run meets a dynamic operation (``float(t)``, ``t.item()``, ``if t:``,
``print(t)``, an unannotated native), the current operator graph ends there
(``OpRecorder.cut``), the operation becomes an *eager step* of the record, and recording
goes on into the next graph.  The mock then runs: graph 1, the step on the values it needs,
graph 2, ... and finally reproduces the program state as for one graph.

What a step returns changes from call to call, so nothing computed from it may be baked
into the record.  Its result is *dynamic*: tracked by identity (kept alive, so ids stay
unique) through everything the program does with it:

=========================================  ==================================================
the program ...                            the record ...
=========================================  ==================================================
moves it (locals, containers, attributes,  writes its step variable where the final state
arguments, the return value)               holds it (``log.append(e1)``): no guard
computes from it natively (``x * 2``,      replays that computation as another step,
``f"{x:.3f}"``, ``round(x)``, ``max(x,1)``)  whose result is dynamic in turn
branches on it, or computes a result      checks it in the mock (``if not e2: MISS``):
that has no identity (a bool, a small int)  a *steering* value is guarded
feeds it (a float, or an int ``t.item()``  passes it to the graph as a 0-d tensor input: no
gave) to floating tensor arithmetic        check (a small int is followed by its shadow slot)
feeds it to a tensor operation otherwise   checks its value (the graph holds it as a constant)
does anything else with it (iterates it,   gives up: the call runs eagerly, as before
uses it as a key, ...)
gives it to an instruction that raises     checks it there (the exception, and the handler the
(``1 / n`` with ``n == 0``)                program runs, depend on its value)
=========================================  ==================================================

A check that fails in the mock before anything observable happened (only pure steps, no
input updated in place, no draw from a generator object of the program's) is a miss of that
record: the cache puts the process's generators back (``magpy.graphs.rng``) and tries the next
record or records again.  After an effect the call must not run again: the check then
carries a resume point, and a failure resumes the monitor there (``magpy.records.continuations``);
where the call cannot resume, the run gives up.  A step after an effect that raises on a later
call propagates its exception from the mock, or, where the program may handle it (an
``except``, ``finally`` or ``with`` covers the step in a live frame), resumes the monitor
there with it.  Steps see their arguments as they were at
the break (containers are copied then); program state changes are committed at the end of
the mock, so a step that is not pure may not follow changes of module attributes
(``sys.stdout``).

:class:`Capture` owns one recording run: the RefGraph and its builder, the operator
recorder, the breaker and the segmenter, and the monitor running the program under them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import operator
import types
from typing import Callable

import torch
import torch.fx as fx
from torch._C._dynamo.guards import GlobalStateGuard

from magpy.capture import annotations as ann
from magpy.capture.callees import checkpoint, warnings_logging
from magpy.capture.callees.numpy_arrays import Arrays
from magpy.capture.monitor import Monitor
from magpy.capture.refgraph import Breaker, RefGraph, RefGraphBuilder
from magpy.capture.refgraph.graph import is_immutable
from magpy.config import config
from magpy.errors import GraphBreak
from magpy.graphs import rng
from magpy.graphs.controlflow import Branches
from magpy.graphs.dynamic import Lifting, Shapes
from magpy.graphs.opgraph import OpRecorder, thread_modes
from magpy.records import continuations
from magpy.records.continuations import Resume, ResumePoint, Shadowed
from magpy.records.deferred_checks import DeferredChecks
from magpy.records.eager_steps import CONTAINERS, TAINT_DEPTH, Step, ambiguous, describe, leaves, picks
from magpy.records.graph_floats import GraphFloats
from magpy.records.index_reads import IndexReads
from magpy.records.resume_points import HANDLED_NOWHERE, ResumePoints, shadowed
from magpy.records.value_flow import ValueFlow


class Segmenter(ValueFlow):
    """Turns the dynamic operations of a recording run into eager steps (module docstring).

    The breaker calls :meth:`begin` when a dynamic operation starts; the step is complete when
    the native call it happened in returns (``on_call``) or, for an operation of an
    instruction itself (a truth test, ``FORMAT_VALUE``), when that instruction completes.
    Following the values steps compute through the run is its base,
    :class:`magpy.records.value_flow.ValueFlow`; its parts hold the floats read in the graph
    (``floats``), the checks that wait for a use (``deferred``), the resume points
    (``resume_points``) and the checks of ints read from tensors as indices (``indices``).
    """

    def __init__(self, recorder, breaker):
        super().__init__()
        self.recorder = recorder
        self.breaker = breaker
        self.steps: list[Step] = []
        self.dynamic: dict[int, str] = {}   # id(value) -> its step variable
        self.kept: list = []                # what steps gave, alive (so ids stay unique)
        self._pending = None                # (frame, GraphBreak) of the step under way
        self._ints: set[str] = set()        # step variables that always hold ints (graph inputs)
        self._vars = 0                      # step variables named so far
        self.effects = False                # an observable effect happened (checks need resume points)
        self.breaks: list[GraphBreak] = []
        self.floats = GraphFloats(self)
        self.deferred = DeferredChecks(self)
        self.resume_points = ResumePoints(self)
        self.indices = IndexReads(self)

    def begin(self, brk: GraphBreak) -> bool:
        """A dynamic operation is under way in the current frame: make it a step, if it can
        be one (False: the run gives up on segments)."""
        mon = self.breaker.monitor
        frame = mon.current if mon is not None else None
        if frame is None or not hasattr(frame, "info") or frame in self._callbacks:
            return False
        if self._pending is None:
            self._pending = (frame, brk)
            self.recorder._opaque += 1   # the step's own tensor work is not graph work
        return True

    def _finish(self) -> GraphBreak | None:
        pending, self._pending = self._pending, None
        self.recorder._opaque -= 1
        return pending[1]

    def step(self, fn, args, kwargs, result, brk: GraphBreak | None, pure: bool, call: bool = True,
             breaks: bool = True) -> None:
        """Record ``result = fn(*args, **kwargs)`` as a step.  A dynamic operation, or one on
        tensors, ends the current piece; a pure computation on dynamic values alone runs before
        it (it needs nothing the piece computes), and so does a dynamic operation that is no
        graph break (not ``breaks``: a read of an input's storage)."""
        var = self._new_var()
        floats = self.floats
        if floats.lazy and brk is None and not kwargs and floats.arithmetic(var, fn, args, result):
            return
        if floats.lazy:
            floats.realize_in(fn, getattr(fn, "__self__", None), args, kwargs)
        if brk is not None and pure and floats.read(var, fn, args, result, brk):
            return
        named = _tensor_parts(result, var)
        if any(self.graph_knows(t) for t, _ in named):
            # (``max(a, b)`` gives ``a`` itself: one tensor, two names)
            self.breaker.stop(brk or "an operation on a value computed eagerly that returns a graph's tensor")
            return
        breaking = brk is not None and breaks
        if breaking:
            self.breaks.append(brk)
        undoable = self.undoable()
        if rng.own_generator(kwargs):
            self.effects = True   # it drew from the program's generator object: magpy cannot put it back
        if not pure:
            if self.breaker.pending_module_writes():
                self.breaker.stop(brk or "an eager step after the program changed a module's attributes")
                return
            if not _external(fn) and self._mutable_inside((args, kwargs)):
                # It may change them: the mock would pass it copies, and write back the values
                # this run left, not the ones a later call's step makes.
                what = brk.reason if brk else describe(fn)
                self.breaker.stop(f"{what}, given a mutable object it may change")
                return
            self.effects = True
        given_back = not ambiguous(result) and [a for a in args if a is result]
        picked = given_back and id(result) in self.dynamic and picks(fn)
        if picked and not undoable:
            self.breaker.stop(f"{describe(fn)} gives back a value computed eagerly it was given")
            return
        met = self._met_again(fn, args, kwargs, result, given_back)
        if met is not None and not undoable:
            self.breaker.stop(f"{describe(fn)} gives an object an earlier eager step gave, after effects")
            return
        if breaking or not pure or any(isinstance(x, torch.Tensor) for x in leaves((args, kwargs))):
            try:
                self.recorder.cut()
            except Exception as e:  # noqa: BLE001 - the recorder's refusal (operands.Unsupported)
                # (why the break cannot be a step: a call that runs eagerly says both)
                self.breaker.stop(dataclasses.replace(brk, reason=f"{brk.reason} (no eager step there: {e})")
                                  if brk else str(e))
                return
        resume = None if undoable else self.resume_points.for_raise()
        if resume is HANDLED_NOWHERE:
            return
        self.steps.append(Step("call", self.before(), var, fn, self._freeze(args),
                               self._freeze(kwargs) if kwargs else None, brk, undoable, self.at(), resume,
                               made=self._makers(args, kwargs)))
        if picked:   # (max(n, m) is n or m: the same one must come back, it keeps its name)
            self.steps.append(Step("same", self.before(), None, None, (var, self.dynamic[id(result)])))
        if met is not None:   # (it keeps the earlier name, which the mock checks it is)
            self.steps.append(Step("same", self.before(), None, None, (var, met)))
        for t, expr in named:
            # A new tensor (``torch.from_numpy(a)``, a ScriptModule's output): later graphs
            # take it as an input, the mock gives it to the program.
            if id(t) not in self.recorder.eager:
                self.recorder.eager[id(t)] = expr
                self.kept.append(t)
        if isinstance(result, torch.Tensor) and _steady(fn):
            return   # (its metadata is the record's: reading it reads no value computed eagerly)
        self._result(result, var, call, type(result) is int and _int_result(fn), fresh=not given_back)

    def _met_again(self, fn, args: tuple, kwargs: dict | None, result, given_back) -> str | None:
        """The variable of the earlier step that gave ``result = fn(*args, **kwargs)``, an
        object this step was not given (``b.untyped_storage()`` is ``a``'s where ``b`` views
        ``a``): on a later call the two steps need not give one object, so the record checks
        that they do.  None where it is a new object, or one the step was given (``__enter__``
        gives back its ``self``)."""
        met = self.dynamic.get(id(result))
        if met is None or ambiguous(result) or given_back or getattr(fn, "__self__", None) is result \
                or (kwargs and any(v is result for v in kwargs.values())):
            return None
        return met

    def _new_var(self) -> str:
        self._vars += 1
        return f"e{self._vars - 1}"

    def graph_knows(self, t) -> bool:
        """Is tensor ``t`` one a graph has (read from outside or made by a piece)?"""
        return self.recorder.produced(t) is not None or self.recorder.refgraph.node_of(t) is not None

    def effect_step(self, fn, args: tuple, brk: GraphBreak) -> str | None:
        """``var = fn(*args)`` as a step whose effects and tensor results the caller tracks
        itself (``loss.backward()``, magpy.training.train_steps): the current piece ends here.  Its
        variable, or None when the run gives up on segments."""
        if self.floats.lazy:
            self.floats.realize_in(args)
        try:
            self.recorder.cut()
        except Exception as e:  # noqa: BLE001 - the recorder's refusal (operands.Unsupported)
            self.breaker.stop(str(e))
            return None
        self.breaks.append(brk)
        self.effects = True
        var = self._new_var()
        self.steps.append(Step("call", self.before(), var, fn, args, None, brk, False, self.at(),
                               made=self._makers(args, None)))
        return var

    def effect(self, fn, args: tuple, kwargs: dict | None, result, what: str) -> bool:
        """``result = fn(*args, **kwargs)`` as a step with an effect outside the program's
        objects and tensors (on the warnings machinery, magpy.capture.callees.warnings_logging) that
        the mock makes in program order without ending the graph; its result is a value
        computed eagerly.  False where it cannot be a step (inside a native's callback, during
        another step)."""
        frame = self.breaker.monitor.current
        if self._pending is not None or frame in self._callbacks or not hasattr(frame, "info"):
            return False
        if self.floats.lazy:
            self.floats.realize_in(args, kwargs)
        var = self._new_var()
        where = self.breaker.where(f"{what}, made again by every replay (not a graph break)")
        self.steps.append(Step("call", self.before(), var, fn, self._freeze(args),
                               self._freeze(kwargs) if kwargs else None, where, self.undoable(), self.at(),
                               made=self._makers(args, kwargs)))
        self.effects = True
        self._result(result, var, True, False)
        return True

    def _makers(self, args: tuple, kwargs: dict | None) -> dict:
        """id -> the piece that has made it so far, of the tensors among a step's arguments."""
        return {id(t): p for t in leaves((args, kwargs)) if isinstance(t, torch.Tensor)
                and (p := self.recorder.produced(t)) is not None}

    def at(self) -> tuple:
        """(file, function, line) of the program where the run is (a step's ``at``)."""
        f = self.breaker.monitor.current
        return (f.code.co_filename, f.code.co_name, f.line) if hasattr(f, "info") else ()

    def before(self) -> int:
        """The piece whose graph a step made now runs after."""
        return len(self.recorder.pieces) - 1

    def _result(self, v, var: str, call: bool, int_result: bool, fresh: bool = True) -> None:
        """Track step result ``v`` (``int_result``: from a callee that always gives an int, so
        it may become a graph input; not ``fresh``: an object the step was given, such as a
        constant ``min(n, 1.5)`` gave back, which has no identity of its own: checked)."""
        if int_result:
            self._ints.add(var)
        if id(v) in self.dynamic:
            return   # an eager value given back (``__enter__`` returns self): it keeps its name
        if ambiguous(v) or not fresh:
            frame = self.breaker.monitor.current
            if not call:   # an instruction's result: checked where the instruction ran
                self.check(v, var, completed=True)
            elif frame is not None and hasattr(frame, "info"):
                # Decided at the frame's next instruction: a statement call's result (print's
                # None) is just popped, and then nothing depends on it.
                self.deferred.wait(frame, var, v, int_result)
            else:
                self.check(v, var)
        else:
            self.dynamic[id(v)] = var
            self.kept.append(v)

    def lifted(self, args: tuple, kwargs: dict) -> tuple:
        """Per positional argument of the tensor operation being recorded: the variable of a
        float, or an int from a callee that always gives one, that an eager step computed (the
        graph takes it as an input, unchecked), else None."""
        marks = self.deferred.shadows(args, kwargs)
        names = []
        for i, a in enumerate(args):
            t = type(a)
            var = self.dynamic.get(id(a)) if t is float or t is int else None
            if t is int and var not in self._ints:
                var = None
            mark = marks[i] if marks is not None else None
            if var is None:
                var = self.deferred.lift(mark, a)
            lazy = self.floats.in_graph(a)
            names.append(lazy.standin if lazy is not None else var)
        return tuple(names)

    @contextlib.contextmanager
    def stepless(self, stop: Callable[[str], None]):
        """Record a region where no eager step can be made (a fork of control flow, a
        checkpointed function): a value computed eagerly that would become a constant of its
        graph calls ``stop(why)``; floats read in the graph are its tensors (an arm captures
        them); small ints whose checks wait for a use keep them (their shadows are not
        followed there)."""
        brk, rec = self.breaker, self.recorder
        saved = (brk.segmenter, rec.fixed, rec.lifted, rec.indexed)
        rec.indexed = None   # (no check of the record's own in a fork)
        self.deferred.clear()
        brk.segmenter = None   # a dynamic operation ends what the region records
        rec.lifted = self.floats.standins

        def fixed(v):
            if self.dynamic and self.is_dynamic(v):
                stop("a value computed eagerly used as a constant")
        rec.fixed = fixed
        try:
            yield
        finally:
            brk.segmenter, rec.fixed, rec.lifted, rec.indexed = saved

    def fix(self, v) -> None:
        """``v`` becomes a constant of a graph: if it is dynamic (or holds dynamic values),
        the record checks its value."""
        if self.dynamic and self.is_dynamic(v):
            if id(v) not in self.dynamic:
                self.breaker.stop("a container of values computed eagerly used by a tensor operation")
                return
            self.check(v)

    def check(self, v, var: str | None = None, completed: bool = False,
              slot: int | None = None) -> Step | None:
        """The record depends on the exact value of dynamic ``v``: check it in the mock
        (``completed``: the current instruction has run, a resume point runs it again from
        its inputs; ``slot``: the stack position there that holds ``v``, untracked).  The
        check's step, if it needs no resume point."""
        var = var or self.dynamic[id(v)]
        step = self._check("check", (var, v), completed, None if slot is None else (slot, var))
        # From here on the record holds it as a constant (a resume point took it as its variable).
        self.dynamic.pop(id(v), None)
        return step

    def _check(self, kind: str, args: tuple, completed: bool, slot=None) -> Step | None:
        if args[0] in self.floats.lazy:
            self.floats.realize(args[0], mid_run=True)
        if self.undoable():
            step = Step(kind, self.before(), None, None, args)
            self.steps.append(step)
            return step
        point = self.resume_points.for_check(completed, slot)
        if point is not None:
            self.steps.append(Step(kind, self.before(), None, None, args, resume=point))
        return None

    def undoable(self) -> bool:
        """Has nothing observable happened so far (a mock may still give up and the call run
        again): no I/O or unannotated native, no input updated in place?  (Numbers drawn from
        the process's generators are not observable: the call runs again from their state
        before the mock, magpy.graphs.rng.)"""
        return not self.effects and not self.recorder.inputs_updated()

    def finish(self) -> None:
        """The recording ended: the deferred checks never needed are dropped (graph inputs),
        and the floats read in the graph that the program still holds get their steps (the
        mock's final state names them)."""
        dropped = self.deferred.finish()
        self.steps[:] = [s for s in self.steps if id(s) not in dropped]
        self._raised = None   # (nor keep the program's objects its traceback holds alive)
        self.floats.finish()

    def _mutable_inside(self, v, depth: int = TAINT_DEPTH) -> bool:
        """Does ``v`` hold an object a native could change (not a value, tensor, function,
        class or module, nor an eager step's value)?"""
        t = type(v)
        if id(v) in self.dynamic or is_immutable(v) or isinstance(v, (torch.Tensor, *_STATIC)):
            return False
        if ann.is_global_random_state(v):   # the mock gives the step the object itself
            return False
        if t is tuple and depth:
            return any(self._mutable_inside(x, depth - 1) for x in v)
        if t is dict and depth and not v:
            return False
        if t is dict and depth == TAINT_DEPTH:   # the kwargs of the call itself
            return any(self._mutable_inside(x, depth - 1) for x in v.values())
        return True

    def _freeze(self, v, depth=TAINT_DEPTH):
        """A step's argument as it is now: containers copied (the program may change them
        later; the mock builds the copy), dynamic values as their variables (a later check
        makes the value a constant of what follows it, not of this step, which runs before),
        everything else itself."""
        var = self.dynamic.get(id(v))
        if var is not None:
            return continuations.Variable(var)
        t = type(v)
        if t is float:   # a lifted float (ReduceLROnPlateau's ``best``): the mock computes it
            return self.lifted_float(v) or v
        if not depth or t not in CONTAINERS:
            return v
        if t is dict:
            return {k: self._freeze(x, depth - 1) for k, x in v.items()}
        return t(self._freeze(x, depth - 1) for x in v)

    def lifted_float(self, v: float) -> Shadowed | None:
        """``v`` with its shadow where the run lifted it or computed it from lifted values."""
        shapes = self.recorder.shapes
        sh = shapes.float_shadow(v) if shapes is not None else None
        return shadowed(v, sh) if sh is not None else None

    def is_dynamic(self, v, depth: int = TAINT_DEPTH) -> bool:
        """Is ``v`` a dynamic value, or a container holding one?"""
        if id(v) in self.dynamic:
            return True
        t = type(v)
        if depth and (t in CONTAINERS):
            items = v.items() if t is dict else v
            if t is dict:
                return any(self.is_dynamic(k, depth - 1) or self.is_dynamic(x, depth - 1) for k, x in items)
            return any(self.is_dynamic(x, depth - 1) for x in items)
        return False


def _int_result(fn) -> bool:
    """Does native ``fn`` always give an int when it gives one (``t.item()`` of an integer
    tensor, ``int(t)``): its result can be a graph input of a fixed dtype."""
    if fn is int or fn is operator.index:
        return True
    return (getattr(fn, "__name__", None) in ("item", "__int__", "__index__")
            and isinstance(getattr(fn, "__self__", None), torch.Tensor))


_STATIC = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType, type, types.ModuleType)


def _steady(callee) -> bool:
    a, _ = ann.lookup(callee)
    return a is not None and a.steady


def _external(callee) -> bool:
    a, _ = ann.lookup(callee)
    return a is not None and a.external


def _tensor_parts(v, expr: str, depth: int = TAINT_DEPTH) -> list[tuple[torch.Tensor, str]]:
    """The tensors in a step's result ``v`` (named ``expr``), each with the expression that
    reaches it in tuples, lists and dicts."""
    if isinstance(v, torch.Tensor):
        return [(v, expr)]
    t = type(v)
    if not depth or t not in (list, tuple, dict):
        return []
    items = v.items() if t is dict else enumerate(v)
    return [part for k, x in items for part in _tensor_parts(x, f"{expr}[{k!r}]", depth - 1)]


class Capture:
    """One recording run: the RefGraph and its rule builder, the operator recorder, the
    breaker and the segmenter, and the monitor that runs the program under them."""

    def __init__(self, policy_for, lifting: Lifting | None = None):
        self.refgraph = RefGraph()
        self.breaker = Breaker(self.refgraph)
        self.builder = RefGraphBuilder(self.refgraph, self.breaker)
        self.recorder = OpRecorder(self.refgraph, self.breaker)
        self.segmenter = Segmenter(self.recorder, self.breaker)
        self.breaker.segmenter = self.segmenter
        self.recorder.fixed = self.segmenter.fix
        self.recorder.indexed = self.segmenter.indices.slice_bounds
        self.recorder.lifted = self.segmenter.lifted
        self.branches = Branches(self.builder, self.breaker, self.recorder, self.segmenter)
        self.recorder.branches = self.segmenter.resume_points.branches = self.branches
        self.arrays = Arrays(self.recorder, self.breaker)
        self.recorder.arrays = self.segmenter.resume_points.arrays = self.arrays
        observers = [self.builder, self.branches, self.segmenter, self.arrays]
        self.shapes = None
        if lifting is not None and lifting.armed(config.dynamic):
            self.shapes = self.recorder.shapes = Shapes(lifting, config.dynamic, self.refgraph)
            observers.append(self.shapes)
        self.monitor = Monitor(observers, policy=policy_for(self.recorder))
        self.monitor.on_fault = self.breaker.fail   # magpy's own failure: stop recording, run on
        for callee, handler in (*warnings_logging.intrinsics_for(self), *checkpoint.intrinsics_for(self)):
            self.monitor.policy.add_intrinsic(callee, handler)
        self.breaker.monitor = self.branches.monitor = self.arrays.monitor = self.monitor
        if self.shapes is not None:
            self.shapes.monitor = self.monitor
            self.shapes.eager_value = self.segmenter.is_dynamic
        self.entry_modes = thread_modes()   # grad mode, autocast (opgraph.thread_modes)

    @property
    def steps(self) -> list[Step]:
        return self.segmenter.steps

    @property
    def dynamic(self) -> dict[int, str]:
        return self.segmenter.dynamic

    @property
    def points(self) -> list[ResumePoint]:
        return self.segmenter.resume_points.points

    @property
    def new_functions(self) -> set[int]:
        return self.builder.new_functions

    @property
    def broken(self) -> GraphBreak | None:
        """The dynamic operation that ended recording (the call then runs eagerly), if any."""
        return self.breaker.brk

    def run(self, fn, args: tuple, kwargs: dict):
        """Run the program under the monitor; its real result."""
        shadows = self.shapes.argument_shadows(args, kwargs) if self.shapes is not None else None
        return self._recording(self.monitor.run_shadowed, fn, args, kwargs, shadows)

    def resume(self, resume: Resume):
        """Resume the frames of a failed check under the monitor (a continuation: effects
        have happened before it); the outermost frame's result."""
        self.segmenter.effects = True
        points = self.segmenter.resume_points
        points.rebuilt = continuations.rebuilt(resume)
        frames = points.resumed = tuple(continuations.frames(resume, self.monitor))
        for f in frames:
            self.builder.resumed(f)
        if self.shapes is not None:
            self.shapes.resumed(frames, resume.values())
        return self._recording(self.monitor.resume, frames)

    def _recording(self, run, *args, **kwargs):
        # What the guard checks of torch's global state: as the run found it (a continuation
        # resumes inside the call, under the grad mode the call had there).
        self.entry_state = GlobalStateGuard()
        try:
            with self.recorder:
                result = run(*args, **kwargs)
            # The grad mode (autocast) the call leaves: the mock's, whatever its graphs did.
            self.final_modes = thread_modes()
            return result
        finally:
            # What the call leaves running (a generator, a coroutine) runs on unrecorded.
            self.monitor.observers.clear()
            self.segmenter.finish()

    def graphs(self) -> list[fx.GraphModule | None]:
        """The finished graph of each piece (None: no operations), once code generation has
        chosen every piece's outputs."""
        return self.recorder.finish()

    def example_inputs(self, piece: int) -> list:
        """The values a piece's graph is compiled for: fake tensors with symbolic sizes where
        the run lifted dimensions."""
        values = [ph.meta["example_value"] for _, ph in self.recorder.pieces[piece].inputs]
        if self.lifted is None or not self.lifted.symbols:
            return values
        return [self.shapes.fake(v) if isinstance(v, torch.Tensor) else v for v in values]

    @property
    def lifted(self):
        """The run's :class:`magpy.graphs.dynamic.Shapes` if it lifted dimensions, else None."""
        return self.shapes if self.shapes is not None and self.shapes.active else None

