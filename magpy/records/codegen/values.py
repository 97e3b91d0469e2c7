"""The mock's source of a value (paper §4.2): how the mock has again what the call left behind.

A value the run read from outside is loaded by its RefGraph path, one a graph or an eager
step made is that output, a size or float the run lifted is computed from this call's, and
an object the call created is built anew (a list, a closure, a class's instance as pickle
would), once however often the state refers to it.  The mock's steps, its final state and
its continuations all write their values this way, each into its own :class:`Block`.
"""
from __future__ import annotations

import collections
import copyreg
import types

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import NULL, generators
from magpy.capture.refgraph.graph import RefGraph, held_by_identity, is_immutable
from magpy.errors import CaptureError
from magpy.graphs.dynamic import IntFloat, Scalar, symbolic
from magpy.records.codegen.source import Names, is_literal, var
from magpy.records.continuations import Reduced, Shadowed, TakenFunction, Variable


class Block:
    """The code being written, the mock's body or a continuation's, in its two phases
    (``codegen.mock``), and the new objects it built: each block builds its own."""

    def __init__(self, point=None):
        self.lines: list[str] = []     # phase 1: graph outputs, new objects
        self.commits: list[str] = []   # phase 2: in-place updates of pre-existing objects
        self.built: dict[int, str] = {}   # id(new object) -> variable
        self.shared: set[int] = set()     # ids of new objects referenced more than once
        self.cells: list = []             # (variable, new cell) whose contents are still to be set
        # The names of the mock's variables it uses: a continuation loads them (None: the
        # mock's own body, where they are all in scope).
        self.used: set[str] | None = None if point is None else set()
        self.point = point   # the resume point whose state it writes back (None: the call's end)

    def commit(self, line: str) -> None:
        """An in-place update: written after everything that can fail (``codegen.mock``)."""
        self.commits.append(line)

    def code(self) -> list[str]:
        """Its lines: everything that can fail, then the in-place updates."""
        if not self.commits:
            return self.lines
        return (self.lines + ["    try:"] + ["    " + line for line in self.commits]
                + ["    except Exception as e:", "        raise COMMIT_FAILED from e"])


class ValueWriter:
    """Writes the source of values into the :class:`Block` being written (:attr:`block`)."""

    def __init__(self, g: RefGraph, recording, names: Names, refs: set):
        self.g, self.names, self.refs = g, names, refs
        self.rec = recording.recorder
        self.shapes = recording.lifted     # magpy.graphs.dynamic.Shapes if the run lifted anything
        self.dynamic = recording.dynamic   # id(value) -> variable of the step that made it
        self.new_functions = recording.new_functions
        self.block = Block()
        self._keep = []        # what the blocks built (their ids stay unique)
        self.made_then = None  # the makers of the tensors of the step whose call is being written
        # A leaf's accumulation buffer (magpy.training.backward): id(the .grad the run had
        # there) -> the mock's variable.
        self.buffers: dict[int, str] = {}

    def callee(self, fn) -> str:
        """The source of the function an eager step calls."""
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

    def load(self, node) -> str:
        """The variable of ``node``'s value, which the guard loads for the mock."""
        self.refs.add(node.id)
        return self.use(var(node))

    def use(self, name: str) -> str:
        """``name``, a variable of the mock, used by the code being written."""
        if self.block.used is not None:
            self.block.used.add(name.split("[")[0])
        return name

    def emit(self, line: str) -> None:
        """A line of the code being written, in its first phase."""
        self.block.lines.append(line)

    # ------------------------------------------------------------------ lifted sizes and floats
    def stored_value(self, holder, key, held) -> str | None:
        """The source of a size or lifted float the run stored into ``holder``'s attribute or
        item ``key``, which holds ``held`` in the state being written (the new call's size,
        computed from the sizes of its inputs; the float computed from its lifted value), or
        None."""
        s = self.stored_shadow(holder, key, held)
        # (The loads go before the code being written, built objects included: before commits.)
        return None if s is None else self.lifted(s, self.emit)

    def stored_shadow(self, holder, key, held):
        """The shadow of what :meth:`stored_value` writes, or None."""
        shapes = self.shapes
        if shapes is None or type(key) not in (str, int) or type(held) is Shadowed:
            return None   # (a value a resume point took with its shadow: expr computes it)
        point = self.block.point
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
        return f"({self.lifted(v.shadow, self.emit)})"

    def key(self, key) -> str:
        if is_literal(key):
            return repr(key)
        return self.expr(key)

    # ------------------------------------------------------------------ values
    def expr(self, v) -> str:
        """The source of ``v`` in the code being written."""
        name = self.dynamic.get(id(v)) or self.buffers.get(id(v))
        if name is not None:
            return self.use(name)
        if type(v) is Reduced:   # taken at a resume point
            return self.block.built.get(id(v)) or self.rebuild(v, v.parts)
        if type(v) is Variable:
            return self.use(v.name)
        if type(v) is TakenFunction:
            return self.block.built.get(id(v)) or self.function(v.original, v)
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
        built = self.block.built.get(id(v))
        if built is not None:
            self.block.shared.add(id(v))
            return built
        return self.build(v)

    def dynamic_inside(self, v) -> bool:
        return id(v) in self.dynamic or (type(v) is tuple and any(map(self.dynamic_inside, v)))

    def tensor(self, t) -> str:
        piece = self._maker(t)
        if piece is None and id(t) in self.rec.eager:   # a tensor an eager step gave back
            return self.use(self.rec.eager[id(t)])
        if piece is None and id(t) in self.rec.wrapped:   # nn.Parameter(data) the call made
            built = self.block.built.get(id(t))
            if built is not None:
                self.block.shared.add(id(t))
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
        if self.block.point is not None:
            return self.block.point.made.get(id(t))
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
                self.emit(f"    {name}.{attr} = {self.expr(value)}")
        return name

    def cell(self, c) -> str:
        """A closure cell the call created.  Its contents are filled in once every new
        object is built: a closure may hold itself (a recursive inner function)."""
        name = self.bind(c, "CELL()")
        self.block.cells.append((name, c))
        return name

    def fill_cells(self) -> None:
        """Set the contents of the cells the block built (:meth:`cell`), once its objects are."""
        cells = self.block.cells
        while cells:
            name, c = cells.pop()
            try:
                contents = c.cell_contents
            except ValueError:
                continue   # an empty cell (a variable not assigned yet)
            self.emit(f"    {name}.cell_contents = {self.cell_value(c, contents, self.emit)}")

    def cell_value(self, cell, contents, emit) -> str:
        """The source of closure cell ``cell``'s ``contents`` as the call leaves them: a size or
        lifted float the program put there computed from this call's (``emit(line)`` writes
        the loads), else the value (a resume point's state keeps the value: the cell's shadow
        is the run's last)."""
        shapes = self.shapes
        s = shapes.in_cell(cell, contents) if shapes is not None and self.block.point is None else None
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
        name = f"n{len(self.block.built)}"
        self.block.built[id(v)] = name
        self._keep.append(v)
        self.emit(f"    {name} = {source}")
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
                self.emit(f"    {name}.__setstate__({self.expr(state)})")
            else:
                # pickle's default: a __dict__ state, or (__dict__ state, __slots__ state).
                dstate, sstate = state if type(state) is tuple else (state, None)
                if dstate:
                    items = ", ".join(f"{self.key(k)}: {self.expr(x)}" for k, x in dstate.items())
                    self.emit(f"    {name}.__dict__.update({{{items}}})")
                for k, x in (sstate or {}).items():
                    self.emit(f"    setattr({name}, {k!r}, {self.expr(x)})")
        if listitems is not None:
            self.emit(f"    {name}.extend([{', '.join(self.expr(x) for x in listitems)}])")
        if dictitems is not None:
            for k, x in dictitems:
                self.emit(f"    {name}[{self.key(k)}] = {self.expr(x)}")
        return name


def _bound(fn) -> bool:
    """Is ``fn`` a builtin method bound to an object (not a module's function, nor a pybind11
    function, bound to its own function record: a Reducer's method is one, called on the
    reducer)?"""
    owner = getattr(fn, "__self__", None)
    return owner is not None and not isinstance(owner, (types.ModuleType, type)) and not ann.is_pybind(owner)
