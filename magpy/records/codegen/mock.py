"""The mock (paper §4.2): runs the compiled graph and reproduces the final program state.

Pre-existing objects that changed are updated in place (so aliases held elsewhere see the
change), new objects are built, and the return value has the structure eager returned.  It
does so in two phases: first everything that can fail (the graph, building new objects,
which may run a class's ``__reduce__`` state code), then the in-place updates of
pre-existing objects, plain stores into their dicts, lists and cells.  So a mock that fails
has left the program's Python state as it was, and the cache can run the call eagerly
instead (see ``cache.py``).

Which nodes it updates, and which it rewrites whole, is the RefGraph's choice
(``RefGraph.mock_nodes``, ``ShadowNode.rewrite``); this module only writes them.
"""
from __future__ import annotations

import collections
import copyreg
import types

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import NULL, generators
from magpy.capture.refgraph.graph import (
    UNSET,
    Kind,
    RefGraph,
    held_by_identity,
    is_immutable,
    same_key,
    state_of,
    stored_attributes,
)
from magpy.errors import CaptureError
from magpy.graphs.dynamic import IntFloat, Scalar, symbolic
from magpy.graphs.opgraph import (
    InputSource,
    IntFloatInput,
    ScalarInput,
    int_tensor,
    scalar_tensor,
    set_thread_modes,
)
from magpy.records.codegen.source import Names, is_literal, value_checks, var
from magpy.records.continuations import Reduced, Resume, Shadowed, TakenFunction, Variable
from magpy.training import backward


class MockCommitError(Exception):
    """A mock failed while updating pre-existing objects in place, so the program's state is
    partly updated; ``__cause__`` is the error."""




class StepRaised(Exception):
    """An eager step raised the program's exception (``__cause__``) after effects that cannot
    be taken back: it propagates, with torch's modes restored to ``modes`` (as on entry:
    the program's ``with`` blocks it leaves restore them)."""

    def __init__(self, modes: tuple, step: int):
        super().__init__(modes, step)
        self.modes = modes
        self.step = step   # its index in the record's steps


def _setattr(obj, name: str, value) -> None:
    """``obj.name = value`` for a module, class or ``__slots__`` attribute, as ``object``'s
    (``type``'s) ``__setattr__`` does it: no Python ``__setattr__`` runs in the mock."""
    (type.__setattr__ if isinstance(obj, type) else object.__setattr__)(obj, name, value)


def _delattr_if(obj, name: str) -> None:
    """``del obj.name`` of an attribute the program stored, then deleted (as ``_setattr``)."""
    try:
        (type.__delattr__ if isinstance(obj, type) else object.__delattr__)(obj, name)
    except AttributeError:
        pass


class _Miss:
    """What a mock returns when a check after an eager step fails (before any effect)."""

    def __repr__(self):
        return "MISS"


MISS = _Miss()
# What mock code refers to by name.
NAMESPACE = {"FUNCTION": types.FunctionType, "CELL": types.CellType, "COMMIT_FAILED": MockCommitError,
             "MISS": MISS, "STEP_RAISED": StepRaised, "RESUME": Resume, "SCALAR": scalar_tensor,
             "INT_SCALAR": int_tensor, "SET_GRAD": torch._C._set_grad_enabled, "SET_MODES": set_thread_modes,
             "SETATTR": _setattr, "DELATTR_IF": _delattr_if, "GRAD_BUFFER": backward.grad_buffer}


class MockWriter:
    def __init__(self, g: RefGraph, recording, names: Names, refs: set):
        self.g, self.names, self.refs = g, names, refs
        self.rec = recording.recorder
        self.shapes = recording.lifted     # magpy.graphs.dynamic.Shapes if the run lifted anything
        self.steps = recording.steps
        self.dynamic = recording.dynamic             # id(value) -> variable of the step that made it
        self.entry_modes = recording.entry_modes     # torch's modes where the run began ...
        self.final_modes = recording.final_modes     # ... and ended (opgraph.thread_modes)
        self.modes = self.entry_modes                # the modes where the code being written is
        self.new_functions = recording.new_functions
        self.lines = []        # phase 1: graph outputs, new objects
        self.commits = []      # phase 2: in-place updates of pre-existing objects
        self._built = {}       # id(new object) -> variable
        self.shared = set()    # ids of new objects referenced more than once
        self._cells = []       # (variable, new cell) whose contents are still to be set
        self._keep = []
        self.used = None       # names of mock variables the code being written uses (continuations)
        self.point = None      # the resume point whose state the code being written writes back
        self.made_then = None  # the makers of the tensors of the step whose call is being written
        # A leaf's accumulation buffer (magpy.training.backward): id(the .grad the run had there) -> the
        # mock's variable, and (the leaf's node, the piece taking it) in order.
        self.buffers: dict[int, str] = {}
        self.buffered: list = []

    def write(self, result):
        """The mock's body: pieces and steps in program order, then the final state."""
        pieces = []
        last = self.rec.pieces[-1]
        for piece in self.rec.pieces:
            for step in self.steps:
                if step.before == piece.index:
                    if step.kind == "call":
                        self.switch(step.modes)
                    self.step(step)
            if piece.op_count:
                self.switch(piece.start_modes)
                ins = ", ".join(self.graph_input(source, ph, piece.index) for source, ph in piece.inputs)
                self.lines.append(f"    out{piece.index} = GRAPH{piece.index}({ins})")
                # A graph switches modes for its own operations, but one a backend compiled
                # need not leave them switched (AOTAutograd keeps them inside): the mock puts
                # those the program had where the graph ends (at the next step, where it was
                # cut; the last one's at the end of the call, ``final``).
                self.modes = piece.start_modes
                if piece is not last:
                    self.switch((piece.grad, piece.autocast))
            pieces, self.lines = pieces + self.lines, []
        return pieces + self.final(result)

    def switch(self, modes: tuple) -> None:
        """Put torch's thread-local modes as the program had them here (where the code being
        written has them otherwise: a ``with torch.no_grad():`` around a step alone, or left
        after the last graph, is in no graph)."""
        if modes == self.modes:
            return
        if modes[1] == self.modes[1]:
            self.lines.append(f"    SET_GRAD({modes[0]})")
        else:
            self.lines.append(f"    SET_MODES({self.names.const(modes)})")
        self.modes = modes

    def graph_input(self, source, ph, piece: int) -> str:
        """The mock's expression of a graph input (see ``Piece.inputs``; ``ph`` its placeholder
        in piece ``piece``)."""
        if backward.BUFFER in ph.meta:
            return self.buffer(source.expr, ph, piece)
        if isinstance(source, InputSource):
            return source.expr
        if isinstance(source, IntFloatInput):
            return f"SCALAR({self.lifted(source.shadow, self.lines.append)})"
        if isinstance(source, ScalarInput):
            value = self.load(source.node)
            return f"SCALAR({source.source.format(x=value)})" if type(source.node.value) is float else value
        return self.load(source)

    def buffer(self, name: str, ph, piece: int) -> str:
        """A leaf's accumulation buffer, taken before piece ``piece``'s graph runs
        (``backward.grad_buffer``): the mock's variable ``name``, which stands for the ``.grad``
        of the run from here on."""
        leaf, _ = ph.meta[backward.BUFFER]
        self.lines.append(f"    {name} = GRAD_BUFFER({self.load(leaf)})")
        self.buffers[id(ph.meta["example_value"])] = name
        self.buffered.append((leaf, piece))
        return name

    def step(self, step) -> None:
        """An eager step: its call on the values at the break, or a check of what it gave."""
        # A failed check after effects resumes the monitor there (magpy.records.continuations).
        miss = "MISS" if step.resume is None else f"cont{step.resume.index}(locals())"
        if step.kind == "check":
            name, value = step.args
            checks = " and ".join(value_checks(self.names, name, value))
            self.lines.append(f"    if not ({checks}): return {miss}")
        elif step.kind == "truth":
            name, truth = step.args
            self.lines.append(f"    if {'not ' if truth else ''}{name}: return {miss}")
        elif step.kind == "same":
            self.lines.append(f"    if {step.args[0]} is not {self.use(step.args[1])}: return {miss}")
        else:
            self.made_then = step.made
            try:
                args = [self.expr(a) for a in step.args]
                args += [f"{k}={self.expr(x)}" for k, x in (step.kwargs or {}).items()]
            finally:
                self.made_then = None
            where = f"   # {step.where.reason}" if step.where is not None else ""
            call = f"{self.callee(step.fn)}({', '.join(args)})"
            self.lines.append("    try:")
            self.lines.append(f"        {step.var} = {call}{where}")
            # The program's own exception: before any effect, the call may run again (it will
            # raise it itself); after one, it propagates from here (grad mode as on entry).
            index = self.steps.index(step)
            # Where the program may handle it, the monitor resumes there with it (a resume point).
            failed = ("return MISS" if step.undoable
                      else f"return cont{step.resume.index}(locals(), e)" if step.resume is not None
                      else f"raise STEP_RAISED({self.names.const(self.entry_modes)}, {index}) from e")
            self.lines.append(f"    except Exception as e: {failed}")

    def callee(self, fn) -> str:
        name = self.dynamic.get(id(fn))
        if name is not None:
            return self.use(name)
        node = self.g.node_of(fn)
        if node is not None:
            # Read from outside (``random.random``, the global Random's bound method): loaded
            # from there again, so it acts on the real object, never on a copy of it.
            return self.load(node)
        if _bound(fn) and hasattr(fn, "__name__"):
            # A bound method is made anew on each access: bind it to this call's object.
            return f"getattr({self.expr(fn.__self__)}, {fn.__name__!r})"
        return self.names.const(fn)

    def continuation(self, point) -> list[str]:
        """``cont{k}(m, throw=None)``: given the mock's variables ``m`` where check ``k`` failed
        (or step ``k`` raised ``throw``), write back the program state of the resume point and
        return its frames, built (a Resume)."""
        saved = self.lines, self.commits, self._built, self.shared, self._cells, self.used, self.point
        fresh = [], [], {}, set(), [], set(), point
        self.lines, self.commits, self._built, self.shared, self._cells, self.used, self.point = fresh
        try:
            for node, now in point.changed:
                self.update(node, now)
            changed = {node.id for node, _ in point.changed}
            for leaf, piece in self.buffered:
                if piece < point.before and leaf.id not in changed:
                    self.update(leaf, leaf.snapshot)
            frames = []
            values = [v for fs in point.frames for v in (*fs.locals, *fs.stack)]
            rebuilt = tuple(i for i, v in enumerate(values) if type(v) is Reduced)
            for fs in point.frames:
                local = ", ".join(self.expr(v) for v in fs.locals)
                stack = ", ".join(self.expr(v) for v in fs.stack)
                parts = ", ".join(self.names.const(x) for x in (fs.code, fs.globals, fs.builtins, fs.fn))
                frames.append(f"({parts}, [{local}], [{stack}], {fs.pc}, {fs.kwnames!r})")
            external = "".join(self.expr(v) + ", " for v in point.external)
            self.fill_cells()
            # (the monitor resumes under the point's modes, whatever the mock switched to since)
            modes = [f"    SET_MODES({self.names.const(point.modes)})"] if point.modes else []
            body = self.lines + self.commit_block() + modes
            head = [f"def cont{point.index}(m, throw=None):"]
            head += [f"    {name} = m[{name!r}]" for name in sorted(self.used)]
            ran = sum(1 for piece in self.rec.pieces[:point.before] if piece.op_count)
            frames = "".join(f + ", " for f in frames)
            resume = f"RESUME({point.index}, ({frames}), {ran}, ({external}), {rebuilt!r}, throw)"
            return head + body + [f"    return {resume}"]
        finally:
            self.lines, self.commits, self._built, self.shared, self._cells, self.used, self.point = saved

    def commit_block(self) -> list[str]:
        if not self.commits:
            return []
        return (["    try:"] + ["    " + line for line in self.commits]
                + ["    except Exception as e:", "        raise COMMIT_FAILED from e"])

    def final(self, result):
        for node in self.g.mock_nodes():
            self.update(node)
        for leaf, _ in self.buffered:
            if not leaf.changed:   # (a buffer made where the leaf had no .grad goes there)
                self.update(leaf)
        ret = self.expr(result)
        self.fill_cells()
        self.switch(self.final_modes)
        return self.lines + self.commit_block() + [f"    return {ret}"]

    def lone(self, v) -> bool:
        """Is ``v`` a new object the final state refers to once (the return value itself)?"""
        return id(v) in self._built and id(v) not in self.shared

    def commit(self, line: str) -> None:
        """An in-place update: written after everything that can fail (module docstring)."""
        self.commits.append(line)

    def load(self, node) -> str:
        self.refs.add(node.id)
        return self.use(var(node))

    def use(self, name: str) -> str:
        """``name``, a variable of the mock, used by the code being written."""
        if self.used is not None:
            self.used.add(name.split("[")[0])
        return name

    # ------------------------------------------------------------------ in-place updates
    def update(self, node, now=None):
        """Write ``node``'s change: from its first state to ``now`` (``refgraph.state_of``'s
        form; default: its state now)."""
        v = self.load(node)
        k = node.kind
        snap = node.snapshot
        if now is None:
            now = state_of(node.value, k) if snap is not None else stored_attributes(node)
        if k is Kind.LIST:
            self.list_update(node, v, now, snap)
        elif k is Kind.DICT:
            self.dict_update(node, v, now, snap, mapping=v)
        elif snap is None:   # a module's, class's or __slots__' attributes
            self.attributes_update(node, v, now)
        elif k is Kind.OBJECT or isinstance(node.value, torch.nn.Module):
            self.commit(f"    d{node.id} = {v}.__dict__")
            self.dict_update(node, v, now, snap, mapping=f"d{node.id}")
        elif k is Kind.CELL:
            if now:
                self.commit(f"    {v}.cell_contents = {self.cell_value(node.value, now[0], self.commit)}")
            else:
                self.commit(f"    del {v}.cell_contents")
        elif k is Kind.CONTEXTVAR:
            self.commit(f"    {v}.set({self.expr(None if now[0] is UNSET else now[0])})")
        elif k is Kind.TENSOR:   # a leaf's .grad (refgraph.tensor_state)
            # (None: an in-place update of a leaf made it a non-leaf, in the graph as in eager;
            # a non-leaf keeps no .grad)
            for key, val in (now or {}).items():
                self.commit(f"    {v}.{key} = {self.expr(val)}")
        elif k is Kind.SET:
            self.g.rewritten(node, now)
            self.commit(f"    {v}.clear(); {v}.update([{', '.join(self.expr(x) for x in now)}])")
        else:
            raise CaptureError(f"cannot reproduce the in-place change of a {type(node.value).__qualname__}")

    def attributes_update(self, node, v, now):
        """The attributes of a module, class or object's ``__slots__`` the program stored
        (``refgraph.stored_attributes``): set or deleted past any Python ``__setattr__`` (which
        the monitor followed to these stores)."""
        for key in dict.fromkeys(key for _, key in self.written(node)[0]):
            if key in now:
                value = self.stored_value(node.value, key, now[key]) or self.expr(now[key])
                self.commit(f"    SETATTR({v}, {key!r}, {value})")
            else:
                self.commit(f"    DELATTR_IF({v}, {key!r})")

    def list_update(self, node, v, now, snap):
        """A list's items the program stored into, by index, and those it added at the end
        (the guard fixes its length where an index is written); else all of it."""
        written, whole = self.written(node)
        slots = _slots(written)
        if not whole and len(now) >= len(snap) and all(
                a is b for i, (a, b) in enumerate(zip(now, snap)) if i not in slots):
            for i in sorted(i for i in slots if i < len(snap)):
                node.struct = True   # (eager's store raises past the end)
                self.commit(f"    {v}[{i}] = {self.expr(now[i])}")
            added = now[len(snap):]
            if added:
                self.commit(f"    {v}.extend([{', '.join(self.expr(x) for x in added)}])")
        else:
            self.g.rewritten(node, now)
            self.commit(f"    {v}[:] = [{', '.join(self.expr(x) for x in now)}]")

    def dict_update(self, node, v, now, snap, mapping):
        """Every slot the program stored into or deleted, whether or not it changed it (a
        later call may find it changed), where the order of the keys comes out as eager's:
        the keys it kept where they were, then the others in the order they came; else all
        of it, rewritten."""
        written, whole = self.written(node)
        slots = _slots(written)
        moved = {key for (_, key), deleted in written.items() if deleted}
        # (keys by dict lookup, by hash and identity: a list's ``in`` and ``!=`` would compare
        # tensor keys, an optimizer state's parameters, with ``==``)
        kept = dict.fromkeys(key for key in snap if key in now and key not in moved)
        expected = [*kept, *(key for key in now if key not in kept)]
        if whole or not all(map(same_key, now, expected)):
            self.g.rewritten(node, now)
            items = ", ".join(f"{self.key(key)}: {self.expr(val)}" for key, val in now.items())
            self.commit(f"    {mapping}.clear(); {mapping}.update({{{items}}})")
            return
        for key in snap:
            if key not in now:
                self.commit(f"    del {mapping}[{self.key(key)}]")
        for key in slots:
            if key not in snap and key not in now:   # stored, then deleted again
                self.commit(f"    {mapping}.pop({self.key(key)}, None)")
        for key, val in now.items():
            if key in moved:   # deleted, then stored again: at the end now
                self.commit(f"    {mapping}.pop({self.key(key)}, None)")
            size = self.stored_value(node.value, key, val)
            if size is not None:
                self.commit(f"    {mapping}[{self.key(key)}] = {size}")
            elif key not in snap or snap[key] is not val or key in slots:
                self.commit(f"    {mapping}[{self.key(key)}] = {self.expr(val)}")

    def written(self, node) -> tuple[dict, bool]:
        """``node``'s stores (``ShadowNode.written``) and whether a native rewrote it whole, in
        the state being written: the call's end, or a resume point's (not the stores after it)."""
        if self.point is None:
            return node.written, node.whole
        return self.point.written.get(node.id, ({}, False))

    def stored_value(self, holder, key, held) -> str | None:
        """The source of a size or lifted float the run stored into ``holder``'s attribute or
        item ``key``, which holds ``held`` in the state being written (the new call's size,
        computed from the sizes of its inputs; the float computed from its lifted value), or
        None."""
        s = self.stored_shadow(holder, key, held)
        # (The loads go before the code being written, built objects included: before commits.)
        return None if s is None else self.lifted(s, self.lines.append)

    def stored_shadow(self, holder, key, held):
        """The shadow of what :meth:`stored_value` writes, or None."""
        shapes = self.shapes
        if shapes is None or type(key) not in (str, int):
            return None
        point = self.point
        if point is None:
            return shapes.stored(holder, key)
        # (the point's copy of a list or dict the call made: the stores name the original)
        return shapes.stored_then(point.stores, point.originals.get(id(holder), holder), key, held)

    def built_anew(self, v: tuple) -> bool:
        """Does tuple ``v`` hold what the mock computes: an eager step's result, or a lifted
        value the run stored in it (OneCycleLR's betas)?"""
        return any(map(self.dynamic_inside, v)) or self.shapes is not None and any(
            self.stored_shadow(v, i, x) is not None for i, x in enumerate(v))

    def lifted(self, s, emit) -> str:
        """The source of the value whose shadow is ``s`` (a SymInt, a lifted float's Scalar,
        a float computed from lifted ints' IntFloat), computed from this call's sizes and
        floats; ``emit(line)`` writes the loads it needs."""
        if type(s) is Scalar:
            return s.source.format(x=self.load(s.node))
        if type(s) is IntFloat:
            return s.render(lambda i: self.lifted(i, emit))
        shapes = self.shapes
        origins, source = shapes.expression(s)
        for name, origin in origins:
            emit(f"    {name} = {origin.load(self.load(shapes.holder_node(origin)))}")
        return source

    def shadowed(self, v: Shadowed) -> str:
        """A value a resume point took with its shadow: computed from this call's sizes and
        floats while they are lifted (if the record came to guard them, it is a constant)."""
        if self.shapes is None or not symbolic(v.shadow):
            return self.expr(v.value)
        return f"({self.lifted(v.shadow, self.lines.append)})"

    def key(self, key) -> str:
        if is_literal(key):
            return repr(key)
        return self.expr(key)

    # ------------------------------------------------------------------ values
    def expr(self, v) -> str:
        name = self.dynamic.get(id(v)) or self.buffers.get(id(v))
        if name is not None:
            return self.use(name)
        if type(v) is Reduced:   # taken at a resume point
            return self._built.get(id(v)) or self.rebuild(v, v.parts)
        if type(v) is Variable:
            return self.use(v.name)
        if type(v) is TakenFunction:
            return self._built.get(id(v)) or self.function(v.original, v)
        if type(v) is Shadowed:
            return self.shadowed(v)
        if v is NULL or ann.is_global_random_state(v):   # (the object itself, never a copy)
            return self.names.const(v)
        if is_immutable(v) and not (type(v) is tuple and self.built_anew(v)):
            if self.shapes is not None:
                self.shapes.constant_written(v)
            return repr(v) if is_literal(v) else self.names.const(v)
        node = self.g.node_of(v)
        if node is not None:
            return self.load(node)
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        built = self._built.get(id(v))
        if built is not None:
            self.shared.add(id(v))
            return built
        return self.build(v)

    def dynamic_inside(self, v) -> bool:
        return id(v) in self.dynamic or (type(v) is tuple and any(map(self.dynamic_inside, v)))

    def tensor(self, t) -> str:
        piece = self._maker(t)
        if piece is None and id(t) in self.rec.eager:   # a tensor an eager step gave back
            return self.use(self.rec.eager[id(t)])
        if piece is None and id(t) in self.rec.wrapped:   # nn.Parameter(data) the call made
            built = self._built.get(id(t))
            if built is not None:
                self.shared.add(id(t))
                return built
            data, requires_grad, _ = self.rec.wrapped[id(t)]
            return self.bind(t, f"{self.names.const(type(t))}({self.expr(data)}, {requires_grad})")
        if piece is None:
            raise CaptureError(f"the call leaves behind a tensor of unknown origin (shape {tuple(t.shape)})")
        passes = self.rec.passes.get(id(t))
        if passes is not None and passes.otherwise is not None:   # never the operator's output itself
            otherwise = self.expr(passes.otherwise)
        else:
            otherwise = self.use(f"out{piece.index}[{piece.output(t)}]")
        if passes is None:
            return otherwise
        pred = self.tensor(passes.pred)
        return f"({self.expr(passes.p)} if bool({pred}) is {passes.when} else {otherwise})"

    def _maker(self, t):
        # (at a resume point, or in a step's call: the piece that had made it then; later
        # graphs have not run)
        if self.point is not None:
            return self.point.made.get(id(t))
        if self.made_then is not None:
            if id(t) in self.made_then:
                return self.made_then[id(t)]
            if id(t) in self.rec.eager:   # an eager step gave it (a later graph updates it in place)
                return None
        return self.rec.produced(t)

    def build(self, v) -> str:
        t = type(v)
        if t is types.BuiltinMethodType and _bound(v):
            return f"getattr({self.expr(v.__self__)}, {v.__name__!r})"   # made anew per object
        if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType,
                          types.MethodDescriptorType, types.WrapperDescriptorType)):
            if isinstance(v, types.FunctionType) and id(v) in self.new_functions:
                return self.function(v)
            return self.names.const(v)
        if held_by_identity(v):
            return self.names.const(v)
        if t is types.CellType:
            return self.cell(v)
        if t is torch._C.ScriptMethod:
            # A ScriptModule's __getattr__ caches the method it looked up in the module's dict.
            return self.bind(v, f"{self.names.const(v.owner)}._get_method({v.name!r})")
        if generators.is_monitored(v):
            return self.generator(v)
        if isinstance(v, torch.nn.Module):
            raise CaptureError(f"the call leaves behind an nn.Module it created ({t.__qualname__})")
        if t is list:
            items = (self.stored_value(v, i, x) or self.expr(x) for i, x in enumerate(v))
            return self.bind(v, f"[{', '.join(items)}]")
        if t is tuple:
            items = ", ".join(self.stored_value(v, i, x) or self.expr(x) for i, x in enumerate(v))
            return f"({items}{',' if len(v) == 1 else ''})"
        if t is dict:
            return self.bind(v, "{" + ", ".join(f"{self.key(k)}: {self.expr(x)}" for k, x in v.items()) + "}")
        if t is set:
            return self.bind(v, f"{{{', '.join(self.expr(x) for x in v)}}}" if v else "set()")
        if isinstance(v, tuple) and hasattr(t, "_fields") and hasattr(t, "_make"):
            return f"{self.names.const(t)}._make(({', '.join(self.expr(x) for x in v)},))"
        if isinstance(v, tuple) and t.__module__ == "torch.return_types":
            return f"{self.names.const(t)}(({', '.join(self.expr(x) for x in v)},))"
        if t is collections.OrderedDict:
            items = ", ".join(f"({self.key(k)}, {self.expr(x)})" for k, x in v.items())
            return self.bind(v, f"{self.names.const(t)}([{items}])")
        return self.reduce(v)

    def function(self, fn, taken: TakenFunction | None = None) -> str:
        """A function the call created (a closure, a lambda, a generator expression's body),
        made anew from its code, over this call's defaults and closure cells (``taken``:
        those a resume point took)."""
        cells = fn.__closure__ if taken is None else taken.cells
        defaults = fn.__defaults__ if taken is None else taken.defaults
        closure = f"({''.join(self.expr(c) + ', ' for c in cells)})" if cells else "None"
        code = fn.__code__
        name = self.bind(fn if taken is None else taken,
                         f"FUNCTION({self.names.const(code)}, {self.names.const(fn.__globals__)}, "
                         f"{fn.__name__!r}, {self.expr(defaults)}, {closure})")
        extras = {"__kwdefaults__": fn.__kwdefaults__, "__annotations__": fn.__annotations__,
                  "__dict__": fn.__dict__,
                  "__qualname__": fn.__qualname__ if fn.__qualname__ != code.co_qualname else None}
        for attr, value in extras.items():
            if value:
                self.lines.append(f"    {name}.{attr} = {self.expr(value)}")
        return name

    def cell(self, c) -> str:
        """A closure cell the call created.  Its contents are filled in once every new
        object is built: a closure may hold itself (a recursive inner function)."""
        name = self.bind(c, "CELL()")
        self._cells.append((name, c))
        return name

    def fill_cells(self) -> None:
        while self._cells:
            name, c = self._cells.pop()
            try:
                contents = c.cell_contents
            except ValueError:
                continue   # an empty cell (a variable not assigned yet)
            self.lines.append(f"    {name}.cell_contents = {self.cell_value(c, contents, self.lines.append)}")

    def cell_value(self, cell, contents, emit) -> str:
        """The source of closure cell ``cell``'s ``contents`` as the call leaves them: a size or
        lifted float the program put there computed from this call's (``emit(line)`` writes
        the loads), else the value (a resume point's state keeps the value: the cell's shadow
        is the run's last)."""
        s = self.shapes.in_cell(cell, contents) if self.shapes is not None and self.point is None else None
        return self.lifted(s, emit) if s is not None and symbolic(s) else self.expr(contents)

    def generator(self, gen) -> str:
        """A generator, coroutine or async generator the call created and returned (or
        stored) before running it: a native one, made by calling its function natively with
        the same arguments, as the program did.  One already started cannot be remade."""
        call = generators.native_call(gen)
        if call is None:
            raise CaptureError(f"the call leaves behind a {gen.kind} it already started "
                               f"({gen.__qualname__}); a running frame cannot be rebuilt")
        fn, args, kwargs = call
        items = [self.expr(a) for a in args]
        if kwargs:
            items.append("**{" + ", ".join(f"{k!r}: {self.expr(x)}" for k, x in kwargs.items()) + "}")
        return self.bind(gen, f"{self.expr(fn)}({', '.join(items)})")

    def bind(self, v, source) -> str:
        name = f"n{len(self._built)}"
        self._built[id(v)] = name
        self._keep.append(v)
        self.lines.append(f"    {name} = {source}")
        return name

    def reduce(self, v) -> str:
        """Build an object of a Python class the way pickle/copy would (``__reduce_ex__``)."""
        try:
            rv = v.__reduce_ex__(4)
        except Exception as e:  # noqa: BLE001 - anything unpicklable
            raise CaptureError(f"cannot rebuild a {type(v).__qualname__} the call created: {e}") from e
        return self.rebuild(v, rv)

    def rebuild(self, v, rv) -> str:
        """Build ``v`` from its reduction ``rv`` (callable, args, state, list items, dict items)."""
        if isinstance(rv, str) or len(rv) < 2:
            return self.names.const(v)
        fn, args = rv[0], rv[1]
        state = rv[2] if len(rv) > 2 else None
        listitems = rv[3] if len(rv) > 3 else None
        dictitems = rv[4] if len(rv) > 4 else None
        if fn is copyreg.__newobj__:
            cls, *rest = args
            k = self.names.const(cls)
            call = f"{k}.__new__({k}{''.join(', ' + self.expr(a) for a in rest)})"
        else:
            call = f"{self.names.const(fn)}({', '.join(self.expr(a) for a in args)})"
        name = self.bind(v, call)
        if state is not None:
            # (a value a resume point took is rebuilt from what it was: a list iterator's
            # position is set by its own __setstate__)
            if hasattr(v.original if type(v) is Reduced else v, "__setstate__"):
                self.lines.append(f"    {name}.__setstate__({self.expr(state)})")
            else:
                # pickle's default: a __dict__ state, or (__dict__ state, __slots__ state).
                dstate, sstate = state if type(state) is tuple else (state, None)
                if dstate:
                    items = ", ".join(f"{self.key(k)}: {self.expr(x)}" for k, x in dstate.items())
                    self.lines.append(f"    {name}.__dict__.update({{{items}}})")
                for k, x in (sstate or {}).items():
                    self.lines.append(f"    setattr({name}, {k!r}, {self.expr(x)})")
        if listitems is not None:
            self.lines.append(f"    {name}.extend([{', '.join(self.expr(x) for x in listitems)}])")
        if dictitems is not None:
            for k, x in dictitems:
                self.lines.append(f"    {name}[{self.key(k)}] = {self.expr(x)}")
        return name



def _slots(written: dict) -> set:
    """The keys (indices, names) of the slots the program stored into or deleted."""
    return {key for _, key in written}


def _bound(fn) -> bool:
    """Is ``fn`` a builtin method bound to an object (not a module's function, nor a pybind11
    function, bound to its own function record: a Reducer's method is one, called on the
    reducer)?"""
    owner = getattr(fn, "__self__", None)
    return owner is not None and not isinstance(owner, (types.ModuleType, type)) and not ann.is_pybind(owner)
