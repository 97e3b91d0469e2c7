"""torch's higher-order operators in the operator graph: a tensor ``if`` as ``torch.cond``,
a loop as ``torch.while_loop``, a checkpointed function as ``tag_activation_checkpoint``.

Their functions are graphs of their own, made of the arms that recorded them
(``opgraph.Arm``); magpy.graphs.controlflow finds the jumps and runs the forks that record
the arms, and hands the result here, to become one operation of the current piece.  An
operator's outputs are new tensors, where the program may have a tensor from before it
(an arm, or a loop that did not run, left it as it was): :class:`Passes` tells the mock
which one it has on a run.
"""
from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx

from magpy.graphs.assertions import append_check

COUNTED = "magpy_counted_loop"
DEVICE = "magpy_device"   # a cond node's meta: the device type of its predicate


@dataclasses.dataclass(frozen=True)
class Passes:
    """A control flow operator's output that is a tensor from before it on some runs: an
    arm, or a loop that did not run, left the program's tensor as it was.  The program then
    has that very tensor, which the mock gives it: ``p`` when the truth of ``pred`` (a 0-d
    tensor of the graph) is ``when``, else ``otherwise`` (None: the operator's output)."""

    pred: torch.Tensor
    when: bool
    p: torch.Tensor
    otherwise: torch.Tensor | None = None

    def holds(self, t) -> bool:
        """Is ``t`` a tensor the program may have in the output's place?"""
        return t is self.p or t is self.otherwise


@dataclasses.dataclass(frozen=True)
class CountedLoop:
    """The operands of a ``while_loop`` that counts the steps of a ``for`` loop
    (:meth:`HigherOrderOperators.for_loop`), kept in its condition's ``meta[COUNTED]``: carried,
    the step count then ``carried`` tensors, ``buffers`` (one row per step) and ``outs`` (rows
    stored by index); then ``extra`` tensors, ``numbers`` (lifted) and ``lasts``: the tensors
    walked in step (``sliced``), or the length as a 0-d tensor made by ``torch.scalar_tensor``.
    Its trip count is known on the host before it starts (``magpy.backends.gpu.host_loops`` runs
    it so on a GPU, where reading the condition back every step would stall the launch queue).
    ``device``: the type of the device its tensors are on."""

    sliced: bool
    device: str
    carried: int
    buffers: int
    outs: int
    extra: int
    numbers: int
    lasts: int


class HigherOrderOperators:
    """The higher-order operators part of :class:`magpy.graphs.opgraph.OpRecorder`: it
    records into the recorder's current piece, and follows the tensors the operators pass
    through in its ``passes`` (id(output) -> :class:`Passes`)."""

    def cond(self, t, truth: bool, taken: tuple, other: tuple, outputs: list) -> None:
        """Record ``torch.cond`` on the truth of ``t``.  ``taken`` and ``other`` are ``(arm,
        the tensors it leaves in the frame's changed slots)``; the run took ``taken`` (the
        condition was ``truth``).  ``outputs`` are the tensors that stand for the cond's
        outputs: the taken arm's, or a stand-in where it left a tensor from before the jump
        (the program goes on with that very tensor; see magpy.graphs.controlflow).

        A cond's outputs are new tensors; where an arm leaves a tensor ``p`` from before the
        jump, the program has ``p`` itself, which the mock gives it when that arm runs
        (``passes``).  The run stops if a later operation writes either in place."""
        graph, piece = self.graph, self.piece
        piece.sync_modes()
        operands = _operands(taken, other)
        numbers = {**taken[0].numbers(), **other[0].numbers()}
        arms = (taken, other) if truth else (other, taken)
        checks = [arm.checks() for arm, _ in arms]
        branches = []
        for (arm, outs), first in zip(arms, (0, len(checks[0]))):
            name = f"_cond_arm{len(piece.submodules)}"
            piece.submodules[name] = arm.module(outs, operands, numbers, (checks[0] + checks[1], first))
            branches.append(graph.get_attr(name))
        pred = self.tensor_node(t)
        if t.dtype != torch.bool:
            pred = graph.call_function(torch.ne, (pred, 0))
        pred = graph.call_method("reshape", (pred, ()))
        inputs = (*map(self.tensor_node, operands), *self._numbers(numbers))
        node = graph.call_function(torch.ops.higher_order.cond, (pred, *branches, inputs))
        # where its predicate is read from (magpy.backends.gpu.batched_predicates)
        node.meta[DEVICE] = t.device.type
        piece.op_count += 1
        pred_t = torch.tensor(truth)
        self._keep.append(pred_t)
        self._made(pred_t, pred)
        self._twins_like(outputs, taken[1])
        for i, (out, a, b) in enumerate(zip(outputs, taken[1], other[1])):
            self._keep.append(out)
            self._made(out, graph.call_function(operator.getitem, (node, i)))
            made = taken[0].made(a), other[0].made(b)
            if made == (False, False):
                self.passes[id(out)] = Passes(pred_t, truth, a, b)
            elif not made[0]:
                self.passes[id(out)] = Passes(pred_t, truth, a)
            elif not made[1]:
                self.passes[id(out)] = Passes(pred_t, not truth, b)
        for i, check in enumerate(checks[0] + checks[1], len(outputs)):
            append_check(graph, graph.call_function(operator.getitem, (node, i)), check)

    def _numbers(self, numbers: dict) -> list:
        """The nodes of the current piece holding the lifted ``numbers`` (sources -> values)
        that an operator's arms read (``Arm.numbers``): its inputs."""
        return [self.piece.input(source, source, value) for source, value in numbers.items()]

    def checkpoint(self, body, outputs: list) -> None:
        """Record ``torch.utils.checkpoint``'s function, whose operations ``body`` (an arm)
        recorded and which gave the tensors ``outputs``, as one ``tag_activation_checkpoint``
        operation (magpy.capture.callees.checkpoint)."""
        if not all(body.made(t) or any(t is c for c in body.captures) for t in outputs):
            self.dynamic.stop("a checkpointed function returns a tensor it did not read or make")
            return
        graph, piece = self.graph, self.piece
        piece.sync_modes()
        name = f"_checkpointed{len(piece.submodules)}"
        numbers = body.numbers()
        piece.submodules[name] = body.module(outputs, body.captures, numbers)
        node = graph.call_function(torch.ops.higher_order.tag_activation_checkpoint,
                                   (graph.get_attr(name), *map(self.tensor_node, body.captures),
                                    *self._numbers(numbers)), {"use_reentrant": False})
        piece.op_count += 1
        for i, t in enumerate(outputs):
            self._keep.append(t)
            self._made(t, graph.call_function(operator.getitem, (node, i)))

    def while_loop(self, goes_on, carried: list, body, state: list, extra: list, outputs: list,
                   finals: list, unbound: list) -> None:
        """Record ``torch.while_loop`` (magpy.graphs.controlflow): ``goes_on`` (a 0-d bool tensor)
        says whether the loop runs its body on the ``carried`` tensors.  ``body`` is one
        iteration's arm: it reads ``state`` (the carried tensors as the iteration before left
        them, then whether it went on) and ``extra`` (tensors from before the loop) and gives
        ``outputs`` (the carried tensors anew) and its own ``goes_on``.  ``finals`` are what
        the run's loop left, the operator's outputs; when the loop does not run at all, the
        program keeps the carried tensors themselves, which the mock gives it (``passes``),
        but for those ``unbound`` says the program had not set (the loop's own variables)."""
        graph, piece = self.graph, self.piece
        piece.sync_modes()
        names = [f"_loop_{part}{len(piece.submodules)}" for part in ("test", "body")]
        numbers = body.numbers()
        piece.submodules[names[0]] = _loop_test(len(state) + len(extra) + len(numbers), len(state) - 1)
        piece.submodules[names[1]] = body.module(outputs + [body.goes_on], state + extra, numbers)
        node_of = self.tensor_node
        operands = _apart(graph, [*map(node_of, carried + [goes_on])],
                          [*map(node_of, extra), *self._numbers(numbers)])
        node = graph.call_function(torch.ops.higher_order.while_loop,
                                   (*map(graph.get_attr, names), *operands))
        piece.op_count += 1
        self._twins_like(finals, outputs)
        for i, (final, first, none) in enumerate(zip(finals, carried, unbound)):
            self._keep.append(final)
            self._made(final, graph.call_function(operator.getitem, (node, i)))
            if not none:
                self.passes[id(final)] = Passes(goes_on, False, first)

    def for_loop(self, over, rows: tuple, index, carried: list, body, state: list, extra: list,
                 outputs: list, items: list, finals: list, stacks: list, stores: list) -> None:
        """Record a ``for`` loop over the first dimension of the tensors ``over`` in step, or
        over a range of ``over`` steps (an int or SymInt), as ``torch.while_loop`` counting its
        steps (magpy.graphs.controlflow).  ``body`` is one step's arm, which read ``rows`` and the
        loop's index from ``index`` (see ``Arm.step_module``); ``carried`` are the carried
        tensors before the loop, ``finals`` what the run's loop left, ``stacks`` stand-ins of
        buffers holding the ``items`` of every step, one row per step (the operator's other
        outputs).  ``stores`` are the body's ``out[index] = value`` as ``(out, value)``: each
        ``out`` is an operand the operator gives back with its rows set, copied into ``out``
        (in place, as the loop did)."""
        graph, piece = self.graph, self.piece
        piece.sync_modes()
        sliced = type(over) is tuple
        names = [f"_loop_{part}{len(piece.submodules)}" for part in ("test", "body")]
        with self.paused():   # (magpy's own metadata reads: no size reads of the program)
            shapes = [((*t.shape,), {"dtype": t.dtype, "device": t.device}) for t in items]
            device = next((t.device for t in (*(over if sliced else ()), *carried, *items)
                           if isinstance(t, torch.Tensor)), None)
        ints = {"dtype": torch.int64, "device": device}
        if sliced:   # (all of one length: the loop's)
            lasts = list(map(self.tensor_node, over))
            length = graph.call_method("size", (lasts[0], 0))
        else:
            length = self.operands.arg(over)
            lasts = [graph.call_function(torch.scalar_tensor, (length,), ints)]
        outs = [self.tensor_node(out) for out, _ in stores]
        extra = [t for t in extra if not (sliced and any(t is x for x in over))]   # (step_module)
        numbers = self._numbers(body.numbers())
        operands = 1 + len(carried) + len(items) + len(outs) + len(extra) + len(numbers) + len(lasts)
        piece.submodules[names[0]] = _count_test(operands, CountedLoop(
            sliced, device.type if device is not None else "cpu", len(carried), len(items), len(outs),
            len(extra), len(numbers), len(lasts)))
        piece.submodules[names[1]] = body.step_module(rows, index, state, extra, outputs, items,
                                                      [v for _, v in stores], over if sliced else ())
        count = graph.call_function(torch.zeros, ((),), ints)
        buffers = [graph.call_function(torch.empty, ((length, *shape),), kw) for shape, kw in shapes]
        operands = _apart(graph, [count, *map(self.tensor_node, carried), *buffers, *outs],
                          [*map(self.tensor_node, extra), *numbers, *lasts])
        loop = torch.ops.higher_order.while_loop
        node = graph.call_function(loop, (*map(graph.get_attr, names), *operands))
        piece.op_count += 1
        self._twins_like(finals, outputs)
        for i, t in enumerate(finals + stacks, start=1):
            self._keep.append(t)
            self._made(t, graph.call_function(operator.getitem, (node, i)))
        for i, out in enumerate(outs, start=1 + len(finals) + len(stacks)):
            graph.call_method("copy_", (out, graph.call_function(operator.getitem, (node, i))))
        if self.shapes is not None and self.shapes.active:
            with self.paused():
                for t in stacks:
                    self.shapes.stacked(t, over[0] if sliced else over)

    def _twins_like(self, made: list, like: list) -> None:
        """With symbolic sizes: the operator's outputs ``made`` (the run's loop made them
        unobserved; a cond's stand-ins) get twins of the kind of the tensors ``like``, which
        the operator's graph made (otherwise their twins would be static, and a size the
        program reads of them a constant no guard checks)."""
        if self.shapes is not None and self.shapes.active:
            with self.paused():
                for t, x in zip(made, like):
                    if t is not x:
                        self.shapes.twin_like(t, x)

    def _record_stacked(self, name: str, ys, args, kwargs, out) -> None:
        """``torch.stack``/``torch.cat`` (``name``) of the tensors a recorded ``for`` loop
        appended to a list: the loop's buffer ``ys`` (one row per step), rearranged."""
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        d = dim % (ys.dim() if name == "stack" else ys.dim() - 1)
        node = self.tensor_node(ys)
        if d:
            node = self.graph.call_method("movedim", (node, 0, d))
        if name != "stack":
            node = self.graph.call_method("flatten", (node, d, d + 1))
        self._keep.append(out)
        self._made(out, self.graph.call_method("contiguous", (node,)))
        self.piece.op_count += 1
        if self.shapes is not None and self.shapes.active:
            self.shapes.propagate(_rearranged(name, d), (ys,), {}, out)

    def choices(self, ids) -> dict:
        """id -> the piece that made it, of the tensors the mock reads to choose what the
        tensors of ``ids`` are (``passes``: the predicates, the tensors passed through,
        recursively).  No operation writes those after their operator (the run stops), so
        their makers are the same at any point after it (a resume point's, ``ResumePoint.made``)."""
        out, todo = {}, [self.passes[i] for i in ids if i in self.passes]
        while todo:
            passes = todo.pop()
            for t in (passes.pred, passes.p, passes.otherwise):
                if t is None or id(t) in out:
                    continue
                out[id(t)] = self.made.get(id(t))
                if id(t) in self.passes:
                    todo.append(self.passes[id(t)])
        return {i: piece for i, piece in out.items() if piece is not None}


def _operands(taken: tuple, other: tuple) -> list:
    """A cond's tensor operands: what either arm (``(arm, outputs)``) read from before the
    jump, or leaves as it was, each once."""
    operands, seen = [], set()
    for arm, outs in (taken, other):
        for x in arm.captures + [o for o in outs if not arm.made(o)]:
            if id(x) not in seen:
                seen.add(id(x))
                operands.append(x)
    return operands


def _loop_test(n: int, goes_on: int) -> fx.GraphModule:
    """A ``while_loop`` condition over ``n`` operands: the one at ``goes_on`` (a copy: the
    operator's functions may not return their inputs)."""
    g = fx.Graph()
    inputs = [g.placeholder(f"op{i}") for i in range(n)]
    g.output(g.call_method("clone", (inputs[goes_on],)))
    return fx.GraphModule(torch.nn.Module(), g)


def _apart(graph: fx.Graph, carried: list, extra: list) -> tuple[tuple, tuple]:
    """A ``while_loop``'s carried and other operands, each node that comes again a clone:
    operands may not alias one another (torch rejects the graph), as where a carried tensor
    starts as one the body also reads unchanged."""
    seen: set = set()

    def once(node: fx.Node) -> fx.Node:
        again = node in seen
        seen.add(node)
        return graph.call_method("clone", (node,)) if again else node
    return tuple(map(once, carried)), tuple(map(once, extra))


def _count_test(n: int, layout: CountedLoop) -> fx.GraphModule:
    """A ``while_loop`` condition over ``n`` operands, the first a step count and the last a
    tensor ``x`` (``layout.sliced``: are steps of ``x``'s first dimension left?) or a loop's
    length (are steps left?)."""
    g = fx.Graph()
    inputs = [g.placeholder(f"op{i}") for i in range(n)]
    length = g.call_method("size", (inputs[-1], 0)) if layout.sliced else inputs[-1]
    g.output(g.call_function(torch.lt, (inputs[0], length)))
    gm = fx.GraphModule(torch.nn.Module(), g)
    gm.meta[COUNTED] = layout
    return gm


def _rearranged(name: str, d: int):
    """What ``torch.stack``/``torch.cat`` (``name``) along ``d`` of the rows of ``ys`` gives."""
    def rearrange(ys):
        t = ys.movedim(0, d) if d else ys
        return (t if name == "stack" else t.flatten(d, d + 1)).contiguous()
    return rearrange
