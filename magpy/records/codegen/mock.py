"""The mock (paper §4.2): runs the compiled graph and reproduces the final program state.

Pre-existing objects that changed are updated in place (so aliases held elsewhere see the
change), new objects are built, and the return value has the structure eager returned.  It
does so in two phases: first everything that can fail (the graph, building new objects,
which may run a class's ``__reduce__`` state code), then the in-place updates of
pre-existing objects, plain stores into their dicts, lists and cells.  So a mock that fails
has left the program's Python state as it was, and the cache can run the call eagerly
instead (see ``cache.py``).

Which nodes it updates, and which it rewrites whole, is the RefGraph's choice
(``RefGraph.mock_nodes``, ``ShadowNode.rewrite``); this module only writes them, in program
order: each value as ``codegen.values`` writes it, each in-place update as
``codegen.updates`` does.
"""
from __future__ import annotations

import types

import torch

from magpy.capture.refgraph.graph import RefGraph
from magpy.graphs.operands import InputSource, IntFloatInput, ScalarInput, int_tensor, scalar_tensor
from magpy.graphs.opgraph import set_thread_modes
from magpy.records.codegen.source import Names, value_checks
from magpy.records.codegen.updates import UpdateWriter
from magpy.records.codegen.values import Block, ValueWriter
from magpy.records.continuations import Reduced, Resume
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
    """Writes the mock: its graphs and eager steps in program order, then the final state,
    and the continuations of its resume points."""

    def __init__(self, g: RefGraph, recording, names: Names, refs: set):
        self.g, self.names = g, names
        self.values = ValueWriter(g, recording, names, refs)
        self.updates = UpdateWriter(self.values)
        self.rec = recording.recorder
        self.steps = recording.steps
        self.entry_modes = recording.entry_modes     # torch's modes where the run began ...
        self.final_modes = recording.final_modes     # ... and ended (opgraph.thread_modes)
        self.modes = self.entry_modes                # the modes where the code being written is
        # The leaves whose accumulation buffer (magpy.training.backward) the mock takes: (the
        # leaf's node, the piece taking it) in order.
        self.buffered: list = []

    def write(self, result):
        """The mock's body: pieces and steps in program order, then the final state."""
        last = self.rec.pieces[-1]
        emit = self.values.emit
        for piece in self.rec.pieces:
            for step in self.steps:
                if step.before == piece.index:
                    if step.kind == "call":
                        self.switch(step.modes)
                    self.step(step)
            if piece.op_count:
                self.switch(piece.start_modes)
                ins = ", ".join(self.graph_input(source, ph, piece.index) for source, ph in piece.inputs)
                emit(f"    out{piece.index} = GRAPH{piece.index}({ins})")
                # A graph switches modes for its own operations, but one a backend compiled
                # need not leave them switched (AOTAutograd keeps them inside): the mock puts
                # those the program had where the graph ends (at the next step, where it was
                # cut; the last one's at the end of the call, ``final``).
                self.modes = piece.start_modes
                if piece is not last:
                    self.switch((piece.grad, piece.autocast))
        return self.final(result)

    def switch(self, modes: tuple) -> None:
        """Put torch's thread-local modes as the program had them here (where the code being
        written has them otherwise: a ``with torch.no_grad():`` around a step alone, or left
        after the last graph, is in no graph)."""
        if modes == self.modes:
            return
        if modes[1] == self.modes[1]:
            self.values.emit(f"    SET_GRAD({modes[0]})")
        else:
            self.values.emit(f"    SET_MODES({self.names.const(modes)})")
        self.modes = modes

    def graph_input(self, source, ph, piece: int) -> str:
        """The mock's expression of a graph input (see ``Piece.inputs``; ``ph`` its placeholder
        in piece ``piece``)."""
        values = self.values
        if backward.BUFFER in ph.meta:
            return self.buffer(source.expr, ph, piece)
        if isinstance(source, InputSource):
            return source.expr
        if isinstance(source, IntFloatInput):
            return f"SCALAR({values.lifted(source.shadow, values.emit)})"
        if isinstance(source, ScalarInput):
            value = values.load(source.node)
            return f"SCALAR({source.source.format(x=value)})" if type(source.node.value) is float else value
        return values.load(source)

    def buffer(self, name: str, ph, piece: int) -> str:
        """A leaf's accumulation buffer, taken before piece ``piece``'s graph runs
        (``backward.grad_buffer``): the mock's variable ``name``, which stands for the ``.grad``
        of the run from here on."""
        leaf, _ = ph.meta[backward.BUFFER]
        self.values.emit(f"    {name} = GRAD_BUFFER({self.values.load(leaf)})")
        self.values.buffers[id(ph.meta["example_value"])] = name
        self.buffered.append((leaf, piece))
        return name

    def step(self, step) -> None:
        """An eager step: its call on the values at the break, or a check of what it gave."""
        values, emit = self.values, self.values.emit
        # A failed check after effects resumes the monitor there (magpy.records.continuations).
        miss = "MISS" if step.resume is None else f"cont{step.resume.index}(locals())"
        if step.kind == "check":
            name, value = step.args
            checks = " and ".join(value_checks(self.names, name, value))
            emit(f"    if not ({checks}): return {miss}")
        elif step.kind == "truth":
            name, truth = step.args
            emit(f"    if {'not ' if truth else ''}{name}: return {miss}")
        elif step.kind == "same":
            emit(f"    if {step.args[0]} is not {values.use(step.args[1])}: return {miss}")
        else:
            values.made_then = step.made
            try:
                args = [values.expr(a) for a in step.args]
                args += [f"{k}={values.expr(x)}" for k, x in (step.kwargs or {}).items()]
            finally:
                values.made_then = None
            where = f"   # {step.where.reason}" if step.where is not None else ""
            call = f"{values.callee(step.fn)}({', '.join(args)})"
            emit("    try:")
            emit(f"        {step.var} = {call}{where}")
            # The program's own exception: before any effect, the call may run again (it will
            # raise it itself); after one, it propagates from here (grad mode as on entry).
            index = self.steps.index(step)
            # Where the program may handle it, the monitor resumes there with it (a resume point).
            failed = ("return MISS" if step.undoable
                      else f"return cont{step.resume.index}(locals(), e)" if step.resume is not None
                      else f"raise STEP_RAISED({self.names.const(self.entry_modes)}, {index}) from e")
            emit(f"    except Exception as e: {failed}")

    def continuation(self, point) -> list[str]:
        """``cont{k}(m, throw=None)``: given the mock's variables ``m`` where check ``k`` failed
        (or step ``k`` raised ``throw``), write back the program state of the resume point and
        return its frames, built (a Resume)."""
        values = self.values
        body, values.block = values.block, Block(point)
        try:
            block = values.block
            for node, now in point.changed:
                self.updates.update(node, now)
            changed = {node.id for node, _ in point.changed}
            for leaf, piece in self.buffered:
                if piece < point.before and leaf.id not in changed:
                    self.updates.update(leaf, leaf.snapshot)
            frames = []
            taken = [v for fs in point.frames for v in (*fs.locals, *fs.stack)]
            rebuilt = tuple(i for i, v in enumerate(taken) if type(v) is Reduced)
            for fs in point.frames:
                local = ", ".join(values.expr(v) for v in fs.locals)
                stack = ", ".join(values.expr(v) for v in fs.stack)
                parts = ", ".join(self.names.const(x) for x in (fs.code, fs.globals, fs.builtins, fs.fn))
                frames.append(f"({parts}, [{local}], [{stack}], {fs.pc}, {fs.kwnames!r})")
            external = "".join(values.expr(v) + ", " for v in point.external)
            values.fill_cells()
            # (the monitor resumes under the point's modes, whatever the mock switched to since)
            modes = [f"    SET_MODES({self.names.const(point.modes)})"] if point.modes else []
            head = [f"def cont{point.index}(m, throw=None):"]
            head += [f"    {name} = m[{name!r}]" for name in sorted(block.used)]
            ran = sum(1 for piece in self.rec.pieces[:point.before] if piece.op_count)
            frames = "".join(f + ", " for f in frames)
            resume = f"RESUME({point.index}, ({frames}), {ran}, ({external}), {rebuilt!r}, throw)"
            return head + block.code() + modes + [f"    return {resume}"]
        finally:
            values.block = body

    def final(self, result):
        """The final state: the in-place updates, the new objects, the return value."""
        for node in self.g.mock_nodes():
            self.updates.update(node)
        for leaf, _ in self.buffered:
            if not leaf.changed:   # (a buffer made where the leaf had no .grad goes there)
                self.updates.update(leaf)
        ret = self.values.expr(result)
        self.values.fill_cells()
        self.switch(self.final_modes)
        return self.values.block.code() + [f"    return {ret}"]

    def lone(self, v) -> bool:
        """Is ``v`` a new object the final state refers to once (the return value itself)?"""
        block = self.values.block
        return id(v) in block.built and id(v) not in block.shared
