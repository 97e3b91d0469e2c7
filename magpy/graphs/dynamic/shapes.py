"""One recording's symbolic sizes and lifted numbers as the monitor's observer follows them
(``magpy.graphs.dynamic``): the shadows it moves along with the values, and the one object the
recorder, the guard and the mock ask about them, over its parts (twins, shape check, lifted
floats, stores, number reads)."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

from magpy import logs
from magpy.capture.monitor import Observer
from magpy.capture.monitor.observer import ATTRIBUTE_LOADS, RETURNS
from magpy.capture.refgraph.graph import ARG, KWARG, REST
from magpy.graphs.dynamic.arms import Conditional
from magpy.graphs.dynamic.call_shadows import CallShadows
from magpy.graphs.dynamic.floats_from_ints import FloatsFromInts
from magpy.graphs.dynamic.lifted_floats import LiftedFloats
from magpy.graphs.dynamic.lifted_shadows import (
    SymInt,
    Walk,
    collect,
    holds,
    of_read,
    specialise,
    symbolic,
    with_shadow,
)
from magpy.graphs.dynamic.lifting import Lifting
from magpy.graphs.dynamic.number_reads import NumberReads
from magpy.graphs.dynamic.rules import CELL_OPS, RULES, argument_shadows, direct_read
from magpy.graphs.dynamic.shape_check import ShapeCheck
from magpy.graphs.dynamic.stores import Stores, stored_then
from magpy.graphs.dynamic.twins import Origin, Twins


def _never(value) -> bool:
    return False


class Shapes(CallShadows, FloatsFromInts, Observer):
    """The symbolic sizes and lifted numbers of one recording (see the package docstring): the
    observer moving their shadows, and what the recorder, the guard and the mock ask of its
    parts: the tensors' :class:`Twins` and the symbols, the :class:`ShapeCheck`, the
    :class:`LiftedFloats`, the :class:`Stores` into program state and the :class:`NumberReads`
    from it."""

    def __init__(self, lifting: Lifting, mode: bool | None, refgraph):
        self.lifting, self.mode, self.refgraph = lifting, mode, refgraph
        self.twins = Twins(lifting, mode, refgraph)
        self.check = ShapeCheck(self.twins)
        self.floats = LiftedFloats()
        self.stores = Stores()
        self.numbers = NumberReads(lifting, mode, refgraph, self.twins, self.floats, self.stores)
        self.monitor = None
        self.reads: list = []                    # this instruction's size reads: (result, twin's)
        self.matched = False                     # the recorder took this instruction's shadows
        self.passed: dict[int, set[int]] = {}    # id(frame) -> symbolic shadows its calls bound
        self.cells: dict[int, tuple] = {}        # id(cell) -> (cell, its content, the content's shadow)
        # id(list) -> (list, its items' shadows) of a list the call appended lifted values to
        # (``lrs.append(lr)``): a slot holding it with other shadows is out of date
        self.grown: dict[int, tuple] = {}
        # id(frame) -> the if on lifted ints (dynamic.arms.Conditional) whose taken arm runs there
        self.ifs: dict[int, Conditional] = {}
        self.levels: dict[int, int] = {}         # id(frame) -> intrinsics under way when it was entered
        self._raised = None                      # the exception last seen where it started
        # is a value one an eager step computed (magpy.records.segments)?
        self.eager_value = _never
        self._outputs = None                     # the output shadow slots of the instruction observed
        self._matched = False                    # whether a tensor operation took its inputs' shadows

    @property
    def active(self) -> bool:
        """Is anything lifted: a size or int (a symbol: from then on, every operation is
        propagated on the twins) or a float?"""
        return bool(self.twins.symbols or self.floats.nodes)

    @property
    def symbols(self) -> dict:
        """The symbols of the lifted sizes and ints, with their origins (:class:`Twins`)."""
        return self.twins.symbols

    def argument_shadows(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The shadows of the call's arguments (the RefGraph's roots): its lifted floats and ints."""
        positional = tuple(self._root_shadow(ARG, i, a) for i, a in enumerate(args))
        keywords = {k: self._root_shadow(KWARG, k, v) for k, v in kwargs.items()}
        return (positional, keywords) if self.floats.nodes or self.twins.ints else None

    def resumed(self, frames, values: tuple) -> None:
        """A continuation's frames, resumed on ``values`` (``Resume.values``: their locals
        and stacks in order, its arguments): the floats and ints lifted among them (their
        values changed between the point's continuations) get their shadows, and the frames
        run at the monitor's level (their callees return shadows to them).  Floats only: a
        continuation's guard does not check the conditions of int symbols (an int it returned,
        lifted, replayed the value of the continuation's recording: fuzz seed 2001305).  An
        iterator resumed with floats left to give (RAdam's comprehension over its ``rho_t``,
        resumed at the check of one) walks them as their shadows: those that changed between
        the continuations are lifted, not checked (a continuation a step, else)."""
        shadows = iter([self._root_shadow(ARG, i, v) if type(v) is float else self._walk_left(i, v)
                        for i, v in enumerate(values)])
        for f in frames:
            f.shadow_locals = [next(shadows) for _ in f.locals]
            f.shadow_stack = [next(shadows) for _ in f.stack]
            self.levels[id(f)] = 0

    def _walk_left(self, i: int, it) -> Walk | None:
        """The walk over what iterator ``it`` (the continuation's argument ``i``) has left to
        give, where the guard reads those items (``ITEMS_LEFT``) and some are lifted."""
        sn = self.refgraph.sn0.children.get((ARG, i))
        if sn is None or sn.id not in self.refgraph.frame_iterators:
            return None
        rest = sn.children.get((REST, None))
        items = self.numbers.tuple_items(rest) if rest is not None and type(rest.value) is tuple else None
        if items is None:
            return None
        for s in items:
            self.floats.remember(s)
        return Walk(rest.value, tuple(items))

    def _root_shadow(self, rel, key, value):
        sn = self.refgraph.sn0.children.get((rel, key))
        if type(value) not in (float, int) or sn is None or not self.lifting.scalar(self.mode, sn):
            return None
        if type(value) is int:
            return self.twins.int_symbol(sn)
        scalar = self.floats.lift(sn)
        self.floats.remember(scalar)
        return scalar

    # -- the tensor operations' side (the recorder's) -----------------------------------------
    def consider(self, t: torch.Tensor) -> None:
        """:meth:`Twins.consider`."""
        self.twins.consider(t)

    def fake(self, t: torch.Tensor) -> FakeTensor:
        """:meth:`Twins.fake`."""
        return self.twins.fake(t)

    def propagate(self, func, args, kwargs, out) -> None:
        """:meth:`Twins.propagate`."""
        self.twins.propagate(func, args, kwargs, out)

    def row_twin(self, t: torch.Tensor, x: torch.Tensor) -> None:
        """:meth:`Twins.row_twin`."""
        self.twins.row_twin(t, x)

    def twin_like(self, t: torch.Tensor, like: torch.Tensor) -> None:
        """:meth:`Twins.twin_like`."""
        self.twins.twin_like(t, like)

    def stacked(self, t: torch.Tensor, over) -> None:
        """:meth:`Twins.stacked`."""
        self.twins.stacked(t, over)

    def size_node(self, s: SymInt, recorder):
        """:meth:`Twins.size_node`."""
        return self.twins.size_node(s, recorder)

    def lifted_sizes(self, t: torch.Tensor) -> bool:
        """:meth:`Twins.lifted_sizes`."""
        return self.twins.lifted_sizes(t)

    def read(self, func, args, out) -> None:
        """A metadata read (``x.shape``, ``x.size(0)``) of a tensor with symbolic sizes."""
        t = args[0] if args else None
        fakes = self.twins.fakes
        if not isinstance(t, torch.Tensor) or id(t) not in fakes:
            return
        try:
            r = func(fakes[id(t)], *args[1:])
        except Exception:  # noqa: BLE001
            self.twins.specialise_all()
            return
        self.reads.append((out, r))

    def operation(self, func, name: str, args, kwargs) -> tuple | None:
        """``(func, name, args, kwargs)`` of the operation being recorded with their sizes'
        SymInts, if the instruction calling it is the program's own (its input shadows are
        theirs).  ``t[i]`` with a lifted ``i`` is ``torch.select(t, 0, i)``, as Dynamo writes it:
        ``Tensor.__getitem__`` reads the index with ``__index__``, which specialises it (a
        scheduler's ``sigmas[self.step_index]`` recorded once per step)."""
        f = self.monitor.current if self.monitor is not None else None
        if f is None or not hasattr(f, "ins_shadows") or not any(map(symbolic, f.ins_shadows)):
            return None
        shadows = argument_shadows(f, args, kwargs)
        if shadows is None:
            return None
        self.matched = True
        pos, kw = shadows
        args = tuple(with_shadow(a, s) for a, s in zip(args, pos))
        kwargs = {k: with_shadow(v, kw.get(k)) for k, v in kwargs.items()}
        if name == "__getitem__" and len(args) == 2 and type(args[1]) is SymInt and args[0].dim() > 0:
            return torch.select, "select", (args[0], 0, args[1]), kwargs
        return func, name, args, kwargs

    # -- observer --------------------------------------------------------------------------------
    def set_output(self, f, i, shadow) -> None:
        """Output ``i`` of the instruction just executed gets ``shadow`` (if it is symbolic)."""
        if symbolic(shadow):
            self._outputs[i] = shadow
            self.floats.remember(shadow)

    def on_enter(self, frame) -> None:
        # How many intrinsics deep the frame runs: a frame one deeper than its caller was
        # called back by native code, which gets its result without the shadow.
        self.levels[id(frame)] = self.monitor.in_intrinsic
        caller = self.monitor.current
        if caller is None or not self.active:
            return
        ids = self.passed.setdefault(id(caller), set())
        for s in frame.shadow_locals:
            collect(s, ids)

    def on_exception(self, frame, exc) -> None:
        # An instruction that raised decided on its inputs' values (``LST[n]`` past the end,
        # ``1 / n`` with n == 0): a path the program takes because it caught the exception
        # holds for those values only, so its symbolic inputs are specialised, as by an
        # instruction without a rule.  (Where the exception starts, not in the frames it
        # unwinds through, nor for magpy's own stop of a fork, a BaseException.)
        if self.ifs:
            self._abandon()
        if exc is self._raised or not self.active or not isinstance(exc, Exception):
            return
        self._raised = exc
        for s in getattr(frame, "ins_shadows", None) or ():
            specialise(s)

    def on_instruction(self, f, ins, inputs, outputs) -> None:
        self.numbers.observe(f, ins, inputs, outputs)
        if self.stores:
            self.stores.forget(f, ins, inputs)
        if not self.active:
            return
        self._shadows(f, ins, inputs, outputs)
        pending = self.ifs.get(id(f)) if self.ifs else None
        if pending is not None and pending.frame is f and f.pc == pending.end:
            self._arrived(pending)

    def _shadows(self, f, ins, inputs, outputs) -> None:
        """The output shadows of the instruction ``ins`` just executed."""
        reads, self.reads = self.reads, []
        in_sh = f.ins_shadows
        if self.grown:
            self._out_of_date(inputs, in_sh)
        n = len(outputs) if ins.opname not in RETURNS else 0
        self._outputs = _OutputShadows(f, n)
        if ins.opname in ATTRIBUTE_LOADS:
            self._attribute_load(f, outputs)
        if reads:
            self._claim(f, ins, inputs, outputs, reads)
        matched, self.matched = self.matched, False
        self._matched = matched
        if ins.opname in CELL_OPS and self._cell(f, ins, in_sh, outputs):
            return
        if matched or not any(map(symbolic, in_sh)):   # (a tensor operation took them)
            self.passed.pop(id(f), None)
            return
        rule = RULES.get(ins.opname)
        if rule is None or not rule(self, f, ins, inputs, outputs, in_sh):
            if logs.on("dynamic"):
                logs.logger("dynamic").info("%s specialised by %s at %s:%s",
                                            [s for s in in_sh if symbolic(s)], ins.opname,
                                            f.code.co_filename, f.f_lineno)
            for s in in_sh:
                specialise(s)
        self.passed.pop(id(f), None)

    def _attribute_load(self, f, outputs) -> None:
        """A property's (or a descriptor's) return of a lifted number lands on this load, its
        last output (``rules._returned``): the value keeps its shadow."""
        sh = self.monitor.ret_shadow
        if outputs and symbolic(sh) and holds(sh, outputs[-1]):
            self.set_output(f, len(outputs) - 1, sh)

    def _cell(self, f, ins, in_sh, outputs) -> bool:
        """Closure cells keep their content's shadow (a variable a nested function or a
        generator expression uses: ``(z.view(b, t) for z in qkv)``)."""
        cell = f.locals[ins.arg]
        if ins.opname != "LOAD_DEREF":   # STORE_DEREF, or MAKE_CELL of a parameter
            sh = in_sh[0] if ins.opname == "STORE_DEREF" else f.shadow_locals[ins.arg]
            if not symbolic(sh):
                self.cells.pop(id(cell), None)
                return False
            self.cells[id(cell)] = (cell, cell.cell_contents, sh)
            return True
        sh = self._cell_shadow(f, ins, outputs[0])
        if sh is not None:   # (else a number read from a cell from outside keeps its own)
            self.set_output(f, 0, sh)
        return True

    def _cell_shadow(self, f, ins, value):
        """The shadow kept for ``value``, the content of the closure cell LOAD_DEREF ``ins``
        read, or None."""
        return self.in_cell(f.locals[ins.arg], value)

    def in_cell(self, cell, value):
        """The shadow kept for ``value``, the content of closure cell ``cell`` (a size or lifted
        float the program put there), or None.  The mock writes such a content from the call's
        own sizes and floats: a closure that outlives the call (stored, returned) holds them."""
        entry = self.cells.get(id(cell))
        return entry[2] if entry is not None and entry[0] is cell and entry[1] is value else None

    def fork_reads(self) -> Observer:
        """The observer of this recording's forks (magpy.graphs.controlflow runs an arm, or a loop's
        step, without this one): see :class:`_ForkReads`."""
        return _ForkReads(self)

    def _claim(self, f, ins, inputs, outputs, reads) -> None:
        direct = direct_read(ins, inputs)
        for out, r in reads:
            if direct and outputs and outputs[-1] is out:
                self.set_output(f, len(outputs) - 1, of_read(r))
                direct = False
            else:
                specialise(of_read(r))

    def passed_on(self, f) -> bool:
        """Did the call ``f`` just made hand its lifted values only to the Python function it
        entered (whose parameters took their shadows)?"""
        passed = self.passed.get(id(f))
        if passed is None:
            return False
        found = set()
        for s in f.ins_shadows[1:]:
            collect(s, found)
        return found <= passed

    def finish(self, graphs) -> None:
        """End of the run.  Sizes read since the last instruction, by nobody the monitor saw,
        are specialised, and so are the sizes the call stored that the mock need not write
        (:meth:`Stores.settle`).  Then a last net under the shadows of lifted floats
        (:meth:`LiftedFloats.pin_constants`; not for sizes: equal small ints of other origins
        are common, and the twins already check every size an operation meets against its
        inputs' symbols)."""
        self._abandon()
        for _, r in self.reads:
            specialise(of_read(r))
        self.reads = []
        self.stores.settle(self.refgraph)
        self.floats.pin_constants(graphs)
        self.twins.lint()

    # -- the record's side (the guard's and the mock's) -------------------------------------------
    def sizes_and_strides(self, t: torch.Tensor) -> tuple[list, list]:
        """:meth:`Twins.sizes_and_strides`."""
        return self.twins.sizes_and_strides(t)

    def size_words(self, t: torch.Tensor) -> list:
        """:meth:`Twins.size_words`."""
        return self.twins.size_words(t)

    def expression(self, s: SymInt) -> tuple[list[tuple], str]:
        """:meth:`Twins.expression`."""
        return self.twins.expression(s)

    def holder_node(self, origin: Origin):
        """:meth:`Twins.holder_node`."""
        return self.twins.holder_node(origin)

    def holders(self) -> list:
        """:meth:`ShapeCheck.holders`."""
        return self.check.holders()

    def conditions(self, names: dict[int, str]) -> tuple[list[str], list[str]]:
        """:meth:`ShapeCheck.conditions`."""
        return self.check.conditions(names)

    def free_scalars(self) -> set[int]:
        """Node ids of the lifted floats and ints the guard does not check by value (the
        shape check holds what the record assumes of the ints), and of tuples holding such
        floats (:meth:`value_checks`)."""
        return self.floats.free() | set(self.twins.ints)

    def value_checks(self, node, name: str) -> list[str]:
        """:meth:`LiftedFloats.value_checks`."""
        return self.floats.value_checks(node, name)

    def constant_written(self, v) -> None:
        """:meth:`LiftedFloats.constant_written`."""
        self.floats.constant_written(v)

    def float_shadow(self, v):
        """:meth:`LiftedFloats.float_shadow`."""
        return self.floats.float_shadow(v)

    def stored(self, holder, key):
        """:meth:`Stores.shadow`."""
        return self.stores.shadow(holder, key)

    def stored_then(self, stores: dict, holder, key, held):
        """:func:`magpy.graphs.dynamic.stores.stored_then`."""
        return stored_then(stores, holder, key, held)

    def describe(self, words) -> list[str]:
        """The lifted dimensions, ints and floats and what the record assumes of them, in words
        (explain); ``words(node)`` names an input."""
        return self.twins.describe(words) + self.floats.describe(words) + self.check.describe()


class _ForkReads(Observer):
    """In a fork, the reads that give a lifted number its shadow: a closure cell's content,
    an attribute, a global, a dict item (:class:`NumberReads`).  A fork's tensor operations
    then take the number as the graph input it is, and a use in Python stops the fork
    (magpy.graphs.controlflow) but a move or a call of a Python function that takes it as a
    parameter (:meth:`Shapes.passed_on`); without its shadow, the arm's graph would hold its
    value as a constant that no guard checks (the record would serve other values of it,
    stale)."""

    def __init__(self, shapes: Shapes):
        self.shapes = shapes

    def on_enter(self, frame) -> None:
        self.shapes.on_enter(frame)

    def on_instruction(self, f, ins, inputs, outputs) -> None:
        shapes = self.shapes
        sh = shapes._cell_shadow(f, ins, outputs[0]) if ins.opname == "LOAD_DEREF" else None
        if sh is not None:   # (a number the call put in a cell: before one read from outside)
            f.shadow_stack[-1] = sh
        else:
            shapes.numbers.observe(f, ins, inputs, outputs)
        shapes.passed.pop(id(f), None)   # (the fork's observers saw the call: see passed_on)


class _OutputShadows:
    """The output shadow slots of the instruction just executed."""

    def __init__(self, f, n):
        self.f, self.n = f, n

    def __setitem__(self, i, shadow):
        if self.n == 0:
            self.f.ret_shadow = shadow
        else:
            self.f.shadow_stack[len(self.f.shadow_stack) - self.n + i] = shadow
