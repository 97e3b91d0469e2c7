"""Continuations: resuming the monitor where a record's check failed, instead of re-running.

A record checks what steers the call after an eager step (``magpy.records.segments``).  When such
a check fails on a later call, the work before it has already happened (an I/O step, an
in-place update): running the call again would repeat it.  So at each check that follows
such an effect, the recording run takes a :class:`ResumePoint`: every live frame of the call
(innermost first: code, locals, value stack, the instruction to resume at) and the state of
every object from outside it changed so far, as it was then.  A failed check makes the
mock write that state back, build the frames' values (the way it builds new objects) and
return a :class:`Resume`; the cache then resumes the monitor on those frames (DESIGN.md:
deoptimization) and records a *continuation*: a record whose arguments are the frames'
values, tried first on the next failure at that point.

A frame chain can be resumed when every frame is a plain function frame (not a generator,
class body or callback of a native), each outer frame waits on a ``CALL`` whose callee *is*
the inner frame's function (so the callee's return value is the call's result), and the
call itself handles no exception (the one its caller handles is the resumed call's too).
Values are taken as they are at the point: containers are copied, objects of Python classes
and iterators are reduced (``__reduce_ex__``) then, so a list iterator resumes at the same
position (an iterator a parent's mock rebuilt for a continuation too: the continuation
advances it where its RefGraph does not see); objects from outside the call and values of
eager steps are themselves; a tensor is the graph output it was then (a later graph may
update the object in place), and where a tensor ``if`` passed it through, that ``if``'s output
as the mock picks it (``controlflow.shadows.Passed``); the tensors a reduced object holds (a ``for``
loop's rows in its iterator) are the continuation's arguments too, as its RefGraph cannot see
them there; a number the call computed from its lifted sizes and floats is computed from
the resumed call's (``Shadowed``), as are the sizes it stored into objects from outside, and
so are such numbers inside a ``**kwargs`` dict, an ``*args`` tuple or a frame's cell.  A
function the call made with a closure is made again over its cells as taken
(:class:`TakenFunction`), a generator it made and has not started is made again by calling
its function.  A local its frame never reads again from where it resumes is left unbound
(``magpy.capture.monitor.liveness``).  A continuation's frames are each other's callers while they
wait (the monitor resumes them one after the other), so its own resume points take them too.
What cannot be taken (a running generator the frame still reads, a new module) makes the
point unresumable, and the record does not check there (the call runs eagerly, as before).
"""
from __future__ import annotations

import dataclasses
import inspect
import types

import torch

from magpy.capture.monitor import NULL, Frame, bytecode, code_info, generators, liveness
from magpy.capture.monitor.observer import Entries, Items
from magpy.capture.monitor.protocols import py_method
from magpy.capture.refgraph.graph import RefGraph, held_by_identity, is_immutable
from magpy.graphs.dynamic import Walk
from magpy.graphs.opgraph import thread_modes

_CALLS = ("CALL", "CALL_FUNCTION_EX")
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_COPIED = (list, tuple, dict, set, frozenset)
_DEPTH = 32


@dataclasses.dataclass
class FrameState:
    """One frame at a resume point: what :func:`frames` needs to make it again."""

    code: types.CodeType
    fn: types.FunctionType | None
    globals: dict
    builtins: dict
    locals: list
    stack: list
    pc: int            # code unit to execute next
    kwnames: tuple


@dataclasses.dataclass
class ResumePoint:
    """The call's state at a check: its frames (innermost first) and the changed objects
    from outside with their state then (``(ShadowNode, state)``, ``state_of``'s form)."""

    index: int
    frames: list[FrameState]
    changed: list
    # Objects from outside the call the taken values hold (an iterator's modules), and the
    # tensors an object taken by its reduction holds (a ``for`` loop's rows, inside its
    # iterator, where a RefGraph sees nothing): the continuation gets them as arguments too,
    # so it reaches them as the parent did, and a continuation of its own can take them.
    external: list
    before: int = 0    # the piece whose graph the check precedes
    # The sizes and lifted floats stored into objects from outside so far (a copy of
    # ``magpy.graphs.dynamic.Shapes.stores`` then): the state written back is the point's.
    stores: dict = dataclasses.field(default_factory=dict)
    # id(tensor) -> the piece (``magpy.graphs.opgraph.Piece``) that had made it then, of the tensors
    # taken: a later graph may update one in place (``h *= 2`` is made anew by a piece after
    # the check, which never ran when the check fails).
    made: dict = dataclasses.field(default_factory=dict)
    # torch's thread-local modes there (``magpy.graphs.opgraph.thread_modes``): the mock may have
    # switched them for a step or graph it ran after (a ``no_grad`` block before the check).
    modes: tuple = ()
    # id(node) -> the node's stores then (``ShadowNode.written``, ``whole``), of the changed
    # nodes: the program's stores after the point are not the point's (a continuation writes
    # back only what had been stored by then).
    written: dict = dataclasses.field(default_factory=dict)
    # id(copy) -> the list or dict the call made that it copies: ``stores`` names the
    # original (a lifted value stored into a new list, a scheduler's ``_last_lr``).
    originals: dict = dataclasses.field(default_factory=dict)

    def where(self) -> str:
        """The innermost frame's line the call resumes at."""
        f = self.frames[0]
        return f"{f.code.co_filename}:{code_info(f.code).line(f.pc)} in {f.code.co_qualname}"


class Reduced:
    """An object taken at a resume point by its ``__reduce_ex__`` (its parts taken too)."""

    __slots__ = ("original", "parts")

    def __init__(self, original, parts: tuple):
        self.original = original
        self.parts = parts


class TakenFunction:
    """A function the call made with a closure (an optimizer's ``_compute_rect``), taken at a
    resume point: its defaults and closure cells taken (shared with the frames that hold
    them); the mock makes it again over them (``ValueWriter.function``)."""

    __slots__ = ("original", "defaults", "cells")

    def __init__(self, original, defaults, cells: tuple):
        self.original, self.defaults, self.cells = original, defaults, cells


class Shadowed:
    """A value at a resume point that the call computed from its lifted sizes or floats
    (``shadow``, magpy.graphs.dynamic): the mock computes it from this call's, as the graphs do
    (``value``: what the recording run had)."""

    __slots__ = ("value", "shadow")

    def __init__(self, value, shadow):
        self.value, self.shadow = value, shadow


class Variable:
    """A value at a resume point that the mock has in a variable (an eager step's result)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class Resume:
    """What a mock returns when a check with a resume point fails: the point's index and the
    frames' values, built (``(code, globals, builtins, fn, locals, stack, pc, kwnames)``)."""

    __slots__ = ("index", "frames", "graphs", "external", "rebuilt", "throw")

    def __init__(self, index: int, frames: tuple, graphs: int, external: tuple, rebuilt: tuple = (),
                 throw: BaseException | None = None):
        self.index = index
        self.frames = frames
        self.graphs = graphs       # how many graphs the mock ran before the check
        self.external = external   # ResumePoint.external, as this call has them
        self.rebuilt = rebuilt     # positions in values() of the objects the mock rebuilt (Reduced)
        self.throw = throw         # the exception a step raised there (the frames resume with it)

    def values(self) -> tuple:
        """Every local and stack value of every frame, in order, then the objects from outside
        they hold: the continuation's arguments."""
        return tuple(v for f in self.frames for v in (*f[4], *f[5])) + self.external


class Unresumable(Exception):
    """The call's state here cannot be taken (the reason is the message)."""


def take(index: int, monitor, graph: RefGraph, dynamic: dict, completed: bool, slot=None, *,
         produced, shadowed=None, rebuilt: frozenset = frozenset(), resumed: tuple = ()) -> ResumePoint:
    """The resume point of the call now, resuming the innermost frame's current instruction
    from its inputs (``completed``: it has run).  ``slot``: ``(position, variable)``, a value of
    that stack the mock has in a variable (an eager step's result).  ``produced(t)``: the
    piece that has made tensor ``t`` so far (``OpRecorder.produced``).  ``shadowed(v, sh)``:
    what to take for a frame's value ``v`` whose shadow is ``sh``: a :class:`Shadowed`, a value
    taken in its place (the output of a cond that passed tensor ``v`` through), or None:
    ``v`` itself.  ``rebuilt``: ids of the values from outside that a parent's mock
    rebuilt for this continuation (:func:`rebuilt`).  ``resumed``: a continuation's frames as
    :func:`frames` made them (the callers of the one resumed first wait on it: ``Monitor.resume``
    links them as callers).  Raises Unresumable."""
    chain = _chain(monitor, completed, resumed)
    taker = _Taker(graph, dynamic, rebuilt)
    frames = []
    for i, f in enumerate(chain):
        kwnames = f.kwnames
        if i == 0:   # from the instruction's inputs: it runs again
            stack, pc = f.stack[:f.ins_base] + list(f.ins_inputs), f.lasti
            shadows = None if f.shadow_stack is None else f.shadow_stack[:f.ins_base] + list(f.ins_shadows)
            kwnames = _kwnames_of(f)
        else:        # waiting on its call: the result is pushed on resuming
            base = len(f.stack) if _waits_on_resumed(f, chain[i - 1], resumed) else f.ins_base
            stack, pc = f.stack[:base], f.pc
            shadows = f.shadow_stack[:base] if f.shadow_stack is not None else None
        stack = _slots(taker, stack, shadows, shadowed)
        if i == 0 and slot is not None:
            stack[slot[0]] = Variable(slot[1])
        local, local_shadows = _live(f, f.lasti if i == 0 else f.pc)
        local = _slots(taker, local, local_shadows, shadowed)
        frames.append(FrameState(f.code, f.fn, f.globals, f.builtins, local, stack, pc, kwnames))
    changed = [(node, taker.take_state(node.snapshot, now)) for node, now in graph.changes()]
    direct = {id(v) for fs in frames for v in (*fs.locals, *fs.stack)}
    made = {i: p for i, p in ((i, produced(t)) for i, t in taker.tensors.items()) if p is not None}
    written = {node.id: (dict(node.written), node.whole) for node, _ in changed}
    return ResumePoint(index, frames, changed, [v for k, v in taker.external.items() if k not in direct],
                       made=made, modes=thread_modes(), written=written, originals=taker.originals)


def _live(f, index: int) -> tuple[list, list | None]:
    """Frame ``f``'s locals and their shadows as it resumes at code unit ``index``: the ones
    it never reads from there on unbound (a generator ``zip`` left suspended, which could
    not be taken, is not needed either: ``magpy.capture.monitor.liveness``)."""
    dead = liveness.dead_locals(f.code, index)
    if not dead:
        return f.locals, f.shadow_locals
    local = [NULL if j in dead else v for j, v in enumerate(f.locals)]
    shadows = f.shadow_locals
    if shadows is not None:
        shadows = [None if j in dead else s for j, s in enumerate(shadows)]
    return local, shadows


def _slots(taker, values, shadows, shadowed) -> list:
    """A frame's locals or stack, taken: a value with a shadow as ``shadowed`` says."""
    if shadowed is None or shadows is None or len(shadows) != len(values):
        return [taker.take(v) for v in values]
    return [taker.take_slot(v, sh, shadowed) for v, sh in zip(values, shadows)]


def resumable(monitor, resumed: tuple = ()) -> bool:
    """Could the call resume at the current instruction (its frame chain, its exceptions)?
    ``resumed``: as :func:`take`'s."""
    try:
        _chain(monitor, False, resumed)
    except Unresumable:
        return False
    return True


def _kwnames_of(f) -> tuple:
    """The keyword names a CALL at ``f.lasti`` was given (its handler has taken them from the
    frame by now): the ``KW_NAMES`` just before its call sequence (3.11: PRECALL, CALL)."""
    ins = f.info.instructions
    if ins[f.lasti].opname != "CALL":
        return f.kwnames
    n = len(bytecode.CALL_SEQUENCE)
    before = [i for i in ins[:f.lasti] if i is not None][-n:]
    if (len(before) == n and before[0].opname == "KW_NAMES"
            and tuple(i.opname for i in before[1:]) == bytecode.CALL_SEQUENCE[:-1]):
        return f.code.co_consts[before[0].arg]   # (dis does not resolve KW_NAMES' constant)
    return ()


def _chain(monitor, completed: bool, resumed: tuple = ()) -> list:
    f = monitor.current
    if completed and f.info.instructions[f.lasti].opname in _CALLS:
        raise Unresumable("the check follows a call that has run")
    chain = []
    while isinstance(f, Frame):
        if f.ns is not None or f.code.co_flags & _SUSPENDABLE or f.fn is None:
            raise Unresumable(f"frame {f.code.co_qualname} is a generator, a class body or exec'd code")
        if chain and not (_waits_on_resumed(f, chain[-1], resumed) or _waits_on(f, chain[-1])):
            raise Unresumable(f"{f.code.co_qualname} reached {chain[-1].code.co_qualname} not by a call")
        chain.append(f)
        f = f.back
    # (the exception the caller of the compiled callable handles is the resumed call's own)
    if len(monitor.exc_stack) != 1 or monitor.exc_stack[0][0] is not monitor.host_exc:
        raise Unresumable("an exception is being handled")
    return chain


def _waits_on_resumed(outer: Frame, inner: Frame, resumed) -> bool:
    """Is ``outer`` a frame a continuation resumed that still waits on the call whose result
    is ``inner``'s, resumed before it (``Monitor.resume``: its call's inputs are gone, its
    stack is the one it has while it waits)?"""
    return any(outer is a and inner is b for b, a in zip(resumed, resumed[1:]))


def _waits_on(outer: Frame, inner: Frame) -> bool:
    """Is ``outer`` executing a CALL whose result is ``inner``'s return value?"""
    if outer.info.instructions[outer.lasti].opname not in _CALLS:
        return False
    callee = bytecode.call_operands(outer.ins_inputs)[0]
    fn = inner.fn
    return (callee is fn or getattr(callee, "__func__", None) is fn
            or (not isinstance(callee, type) and py_method(type(callee), "__call__") is fn)
            or outer.monitor.policy.enters(callee, fn))   # (FSDP's hook: magpy.training.fsdp's stand-in)


def rebuilt(resume: Resume) -> frozenset:
    """The ids of the values of ``resume`` its mock rebuilt, whose own iterators among them
    a continuation's resume points take as the call's own (:func:`take`)."""
    values = resume.values()
    return frozenset(id(values[i]) for i in resume.rebuilt)


def _advanced(v, rebuilt: frozenset) -> bool:
    """Is ``v`` an iterator a parent's mock rebuilt for this continuation?  The run advances
    it where the RefGraph does not see it (``FOR_ITER``), so it is taken as it is now, like
    the call's own, not as the object the continuation's mock was given."""
    return id(v) in rebuilt and hasattr(type(v), "__next__")


class _Taker:
    """Takes values as they are now, keeping identities (a memo)."""

    def __init__(self, graph: RefGraph, dynamic: dict, rebuilt: frozenset = frozenset()):
        self.graph, self.dynamic, self.rebuilt = graph, dynamic, rebuilt
        self.memo: dict[int, object] = {}
        self.external: dict[int, object] = {}   # objects from outside the call met, by id
        self._reducing = 0   # how deep in the parts of a Reduced the value being taken is
        self.tensors: dict[int, torch.Tensor] = {}   # the call's own tensors met, by id
        self.originals: dict[int, object] = {}   # id(copy of a list or dict) -> the original
        self._keep = []

    def take_state(self, snap, now):
        """A changed object's state now (``state_of``'s form): what it held when the call
        found it is from outside, itself (the mock writes back only what changed; an object
        the run never read, a DDP module's process group, may not be rebuildable)."""
        if type(now) is dict and type(snap) is dict:
            return {k: v if k in snap and snap[k] is v else self.take(v) for k, v in now.items()}
        return self.take(now)

    def _take_function(self, v: types.FunctionType, depth: int) -> TakenFunction:
        got = self.memo[id(v)] = TakenFunction(v, None, ())
        self._keep.append(v)
        got.defaults = self.take(v.__defaults__, depth - 1)
        got.cells = tuple(self.take(c, depth - 1) for c in v.__closure__)
        return got

    def take_slot(self, v, sh, shadowed):
        """A value ``v`` whose shadow is ``sh``, as ``shadowed`` (:func:`take`'s) says."""
        got = shadowed(v, sh) if sh is not None or type(v) is types.CellType else None
        if type(got) is not Shadowed:
            return self.take(v if got is None else got)
        if type(v) is types.CellType:   # (a frame's cell holding the lr a comprehension reads)
            return self._take_cell(v, got)
        if type(got.shadow) is Walk:
            return self._take_walked(v, got.shadow, shadowed)
        if type(got.shadow) not in (Items, Entries):
            return got
        return self._take_items(v, got.shadow, shadowed)

    def _take_walked(self, it, walk: Walk, shadowed):
        """An iterator a ``for`` loop walks with its items' shadows (a comprehension resumed
        inside, over the floats its continuation lifted; a ``zip`` of lists of them): reduced,
        its sequences copied with the items still to come taken with theirs, so the mock hands
        the next continuation this call's values, not the recorded ones."""
        return self._walked(walked_sequence(it, walk), shadowed)

    def _walked(self, parts: tuple, shadowed):
        """The iterator ``walked_sequence`` described as ``parts``, taken."""
        make, it, rest = parts[0], parts[1], parts[-1]
        got = self.memo.get(id(it))
        if got is not None:
            return got
        self._keep.append(it)
        got = self.memo[id(it)] = Reduced(it, ())
        if make is zip:
            got.parts = (zip, tuple(self._walked(p, shadowed) for p in parts[2]), *parts[3:-1])
            return got
        seq, at = parts[2], parts[3]
        first = len(seq) - len(rest)
        copy = self._copy(seq, _DEPTH, lambda i, x: self.take(x) if i < first else
                          self.take_slot(x, rest[i - first], shadowed))
        got.parts = (iter, (copy,), at)
        return got

    def _take_cell(self, v: types.CellType, contents: Shadowed):
        # (taken before from a frame that holds it without the shadow, a comprehension's: the
        # same new cell, its contents computed)
        got = self.memo.get(id(v))
        if got is None:
            self._keep.append(v)
            got = self.memo[id(v)] = types.CellType()
        got.cell_contents = contents
        return got

    def _take_items(self, v, sh, shadowed):
        """A container of values computed from lifted ones (``**kwargs`` holding the lr): a
        copy whose items are taken with their shadows, so the mock computes them from the
        call's own.  Taken plainly before, it stays that copy: the mock writes its numbers as
        constants, which guards them (``Shapes.constant_written``)."""
        got = self.memo.get(id(v))
        if got is not None:
            return got
        self._keep.append(v)
        shadow_of = sh.get if type(v) is dict else sh.__getitem__
        return self._copy(v, _DEPTH, lambda key, x: self.take_slot(x, shadow_of(key), shadowed))

    def _copy(self, v, depth: int, item):
        """A copy of container ``v`` (one of ``_COPIED``) whose items are ``item(key or
        position, value)``; a list or dict is memoised before its items (which may hold it)."""
        t = type(v)
        if t is dict:
            got = self.memo[id(v)] = {}
            self.originals[id(got)] = v
            got.update({self.take(k, depth - 1): item(k, x) for k, x in v.items()})
            return got
        if t is list:
            got = self.memo[id(v)] = []
            self.originals[id(got)] = v
            got.extend(item(i, x) for i, x in enumerate(v))
            return got
        got = self.memo[id(v)] = t(item(i, x) for i, x in enumerate(v))
        return got

    def take(self, v, depth: int = _DEPTH):
        name = self.dynamic.get(id(v))
        if name is not None:   # an eager step's value: the mock's variable (the record may
            return Variable(name)   # hold it as a constant by the time the code is written)
        t = type(v)
        if self.graph.node_of(v) is not None and not _advanced(v, self.rebuilt):
            self.external[id(v)] = v
            return v
        if isinstance(v, torch.Tensor):
            self.tensors[id(v)] = v
            if self._reducing:   # (ResumePoint.external)
                self.external[id(v)] = v
            return v
        if v is NULL or (is_immutable(v) and t not in _COPIED) or depth == 0 or held_by_identity(v):
            return v
        got = self.memo.get(id(v))
        if got is not None:
            return got
        self._keep.append(v)
        if t in _COPIED:   # (a tuple of plain values too: it may hold an eager step's value)
            return self._copy(v, depth, lambda _, x: self.take(x, depth - 1))
        owner = getattr(v, "__self__", None) if t is types.BuiltinMethodType else None
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            pass   # a builtin method bound to an object (``x.clamp``): reduced below, getattr(obj, name)
        elif isinstance(v, (types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType)):
            if isinstance(v, types.FunctionType) and v.__closure__:
                return self._take_function(v, depth)
            return v
        if t is types.CellType:   # a frame's own cell (no closure over it is live): a new one
            got = self.memo[id(v)] = types.CellType()
            try:
                got.cell_contents = self.take(v.cell_contents, depth - 1)
            except ValueError:
                pass   # empty: the variable is not bound yet
            return got
        call = generators.native_call(v) if generators.is_monitored(v) else None
        if call is not None and not call[2]:
            # Not started: made again by calling its function natively with its arguments as
            # they are now (``self.parameters()`` taken before the loop over it).
            got = self.memo[id(v)] = Reduced(v, ())
            self._keep.append(v)
            got.parts = (call[0], tuple(self.take(a, depth - 1) for a in call[1]))
            return got
        if isinstance(v, (torch.nn.Module, types.GeneratorType, types.CoroutineType)):
            raise Unresumable(f"a {t.__qualname__} made in the call is live")
        try:
            rv = v.__reduce_ex__(4)
        except Exception as e:  # noqa: BLE001 - anything that cannot be pickled
            raise Unresumable(f"a {t.__qualname__} made in the call cannot be rebuilt: {e}") from e
        if isinstance(rv, str):
            return v
        # Items and entries come as iterators: take them now.
        rv = tuple(list(p) if i >= 3 and p is not None else p for i, p in enumerate(rv))
        got = self.memo[id(v)] = Reduced(v, ())
        self._reducing += 1
        try:
            got.parts = tuple(self.take(p, depth - 1) for p in rv)
        finally:
            self._reducing -= 1
        return got


def walked_sequence(it, walk: Walk) -> tuple | None:
    """How to take ``it``, an iterator whose items still to come are those ``walk`` has left
    (with their shadows): ``(iter, it, sequence, position, shadows)`` for an iterator over a
    list or tuple, ``(zip, it, [such parts], *state, shadows)`` for a ``zip`` of those; None
    for any other."""
    return _walked_parts(it, walk.values[walk.pos:], walk.shadows[walk.pos:])


def _walked_parts(it, values: tuple, shadows: tuple) -> tuple | None:
    try:
        r = it.__reduce__()
    except Exception:  # noqa: BLE001 - not reducible: not such an iterator
        return None
    if type(r) is not tuple or len(r) < 2 or type(r[1]) is not tuple:
        return None
    if r[0] is zip:
        if not all(type(row) is tuple and len(row) == len(r[1]) for row in values) or not all(
                type(s) is Items and len(s) == len(r[1]) for s in shadows):
            return None
        columns = [_walked_parts(p, tuple(row[k] for row in values), tuple(s[k] for s in shadows))
                   for k, p in enumerate(r[1])]
        return None if None in columns else (zip, it, columns, *r[2:], shadows)
    if r[0] is not iter or len(r) != 3 or len(r[1]) != 1 or type(r[2]) is not int:
        return None
    seq, at = r[1][0], r[2]
    if type(seq) not in (list, tuple) or len(seq) - at != len(values) or any(
            a is not b for a, b in zip(seq[at:], values)):
        return None
    return iter, it, seq, at, shadows


def frames(resume: Resume, monitor) -> list[Frame]:
    """Monitored frames made from a :class:`Resume`, innermost first."""
    out = []
    for code, globals_, builtins, fn, local, stack, pc, kwnames in resume.frames:
        f = Frame(code, globals_, builtins, fn, None, list(local), list(stack), 2 * pc, monitor)
        f.kwnames = kwnames
        if out:   # waiting on the call before ``pc``: an exception from it unwinds from there
            ins = f.info.instructions
            f.lasti = next(i for i in range(pc - 1, -1, -1) if ins[i] is not None)
        out.append(f)
    return out
