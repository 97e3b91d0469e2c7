"""The operator graph (paper §4.3): every tensor operation of the monitor run, as torch.fx.

Tensor operations are recorded where torch itself dispatches them, through a
``TorchFunctionMode`` active during the monitor run: that sees ``torch.*``, ``F.*``, Tensor
methods and operators alike, whether the monitored program or native code called them.
Tensors map to fx nodes by identity (every recorded tensor is kept alive while recording,
so identities stay unique).  A tensor an operation uses that no operation produced must
be one the program read from outside: it becomes a placeholder located by its RefGraph
node.  Anything else is a tensor of unknown origin, which ends capture.

Metadata reads (``x.shape``, ``x.dim()``) need no node: the guard fixes input metadata, so
they are constants of the record.  Reads of tensor *data* into Python (``x.item()``,
``bool(x)``) are dynamic operations (paper Figure 12, ValueRead).

A run that meets dynamic operations is cut into *pieces*, one fx graph each, with the
dynamic operations run eagerly between them (``magpy.records.segments``).  A tensor one piece
makes and a later one uses is an output of the first and an input of the second.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import operator
import typing

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from magpy.capture import annotations as ann
from magpy.capture.monitor import bytecode
from magpy.capture.refgraph.graph import RefGraph, is_immutable, tensor_version
from magpy.graphs import rng
from magpy.graphs.dynamic import IntFloat, Scalar, specialise

# Constants fx writes into the graph's code as their repr, which gives them back exactly (fx
# itself names inf, nan, torch and device); others are embedded by reference (_constant).
_LITERALS = frozenset({int, float, bool, str, bytes, type(None), type(Ellipsis), torch.dtype, torch.device,
                       torch.layout, torch.memory_format})


class LoopIndex:
    """An operation argument standing for the index of a ``for i in range(n)`` loop recorded
    as a ``while_loop`` (magpy.graphs.controlflow): the body graph's step count.  The one instance,
    ``LOOP_INDEX``, is also that index's shadow in the forks recording the body."""

    __slots__ = ()


LOOP_INDEX = LoopIndex()


class Piece:
    """One operator graph of a run: the operations between two eager steps (or the run's
    start and end).  Its inputs are tensors read from outside (a RefGraph node), made by an
    earlier piece, or made by an eager step; its outputs are the tensors later code uses."""

    def __init__(self, index: int):
        self.index = index
        self.graph = fx.Graph()
        self.inputs: list = []          # (source, placeholder); source: a ShadowNode or an InputSource
        self.outputs: list = []         # tensors, in output order
        self._out_index: dict[int, int] = {}
        self.placeholders: dict = {}    # source key -> placeholder
        self.nodes: dict[int, fx.Node] = {}   # id(tensor) -> its node in this graph
        self.op_count = 0
        self.grad = torch.is_grad_enabled()          # grad mode where the graph is now
        self.inference = torch.is_inference_mode_enabled()
        self.entered: list = []                      # (inference-mode context node, grad mode before)
        self.autocast = autocast_state()             # autocast where the graph is now
        self.autocasts: list = []                    # (autocast context nodes, autocast before)
        self.start_modes = thread_modes()            # the modes its graph starts under
        self.constants: dict[str, torch.Tensor] = {}   # tensors folded into the graph (_fold)
        self.submodules: dict[str, fx.GraphModule] = {}   # the arms of its conds

    def graphs(self) -> list[fx.Graph]:
        """This piece's graph and those of its control flow operators' arms and bodies."""
        return [self.graph] + [m.graph for sub in self.submodules.values() for m in sub.modules()
                               if isinstance(m, fx.GraphModule)]

    def output(self, t) -> int:
        """The output index of ``t``, a tensor this piece makes (made an output if new)."""
        i = self._out_index.get(id(t))
        if i is None:
            i = self._out_index[id(t)] = len(self.outputs)
            self.outputs.append(t)
        return i


class Arm(Piece):
    """The operations of one arm of a tensor ``if`` (magpy.graphs.controlflow): a graph of its own,
    whose inputs are the tensors from before the jump that it reads (``captures``, in order)
    and the lifted numbers it reads (``inputs``: the graph inputs of the piece around it, see
    :meth:`numbers`).  ``sandbox`` stops the arm's fork before an operation writes one of
    those tensors, or a view of one the arm made (``h[:, 0] += 1``): the fork's run is not
    the program's, which does it again."""

    def __init__(self, outer: Piece, sandbox, counted: bool = False):
        super().__init__(outer.index)
        self.captures: list = []
        # id(capture) -> its placeholder (``nodes`` moves on where an operation gives the
        # tensor itself back: ``x.contiguous()``)
        self.captured: dict[int, fx.Node] = {}
        self.storages: set[int] = set()   # the storages of the captures (their views share them)
        self.sandbox = sandbox
        self.goes_on = None   # a loop body's: the tensor telling whether the loop goes on after it
        self.counted = counted   # a range loop's body: its operations may read the step count
        self.count: fx.Node | None = None   # ... through this placeholder

    def count_node(self) -> fx.Node:
        """The step count of the range loop this arm is the body of (made if new)."""
        if not self.counted:
            raise _Unsupported("a loop's index used inside an if in its body")
        if self.count is None:
            self.count = self.graph.placeholder("count")
        return self.count

    def capture(self, t) -> fx.Node:
        ph = self.captured[id(t)] = self.nodes[id(t)] = self.graph.placeholder(f"c{len(self.captures)}")
        self.captures.append(t)
        self.storages.add(storage_id(t))
        return ph

    def made(self, t) -> bool:
        """Did this arm's operations make ``t`` (not a tensor from before it, which an operation
        may give back: ``x.contiguous()``)?"""
        return id(t) in self.nodes and id(t) not in self.captured

    def numbers(self) -> dict:
        """The lifted numbers this arm's operations read: their sources (what the mock loads),
        each with the value the graphs are compiled for.  The operator taking the arm passes
        them on as operands, the inputs of the piece around it."""
        return {source: ph.meta["example_value"] for source, ph in self.inputs}

    def _read(self, g: fx.Graph, numbers) -> dict:
        """The placeholders of graph ``g`` (the arm as an operator's function) for the lifted
        ``numbers`` (sources, of this arm and its sibling arms), as the arm's own placeholders
        map to them."""
        env = {}
        for i, source in enumerate(numbers):
            ph = g.placeholder(f"number{i}")
            if source in self.placeholders:
                env[self.placeholders[source]] = ph
        return env

    def check(self, func, args, kwargs) -> None:
        """Stop the fork before ``func`` writes a tensor from before the jump, or a tensor the
        arm made that shares its storage (a view of it: every tensor from outside that an
        operation of the arm read, the view's included, is a capture)."""
        for t in _written(func, ann.torch_name(func), args, kwargs):
            if not self.made(t) or storage_id(t) in self.storages:
                self.sandbox.stop(f"{ann.torch_name(func)} updates a tensor from before the branch")

    def checks(self) -> list[Check]:
        """The assertions this arm's operations recorded (the program's ``assert`` and
        ``raise`` checks, nested operators' hoisted ones)."""
        return [(n.args[1], n.meta[CHECK_DEVICE]) for n in self.graph.nodes if n.target is _ASSERT]

    def module(self, outputs: list, operands: list, numbers=(), checks: tuple[list, int] | None = None
               ) -> fx.GraphModule:
        """This arm as a cond branch: a graph of all the cond's ``operands`` (tensors), then
        the lifted ``numbers`` it or its sibling reads, giving ``outputs`` (tensors it made,
        or operands it left as they were).

        ``checks``: ``(the cond's checks, where this arm's own begin among them)``.  Its
        assertions are then hoisted, not kept: the branch gives, after ``outputs``, a 0-d bool
        per check, its own check's condition or true for its sibling's, which the graph around
        asserts.  An assertion inside a branch does not survive AOTAutograd where the
        cond's outputs are unused (nor is it told from other errors where it fails)."""
        g = fx.Graph()
        inputs = {id(x): g.placeholder(f"op{i}") for i, x in enumerate(operands)}
        env = {ph: inputs[i] for i, ph in self.captured.items()}
        env.update(self._read(g, numbers))
        held = []
        for node in self.graph.nodes:
            if checks is not None and node.target is _ASSERT:
                held.append(g.call_method("bool", (g.call_method("reshape", (env[node.args[0]], ())),)))
            elif node.op != "placeholder":
                env[node] = g.node_copy(node, env.__getitem__)
        results = []
        for t in outputs:
            n = env[self.nodes[id(t)]] if self.made(t) else inputs[id(t)]
            # A branch must not give back its input itself (cond's outputs are new tensors).
            results.append(g.call_method("clone", (n,)) if n.op == "placeholder" else n)
        if checks is not None:
            every, first = checks
            true = [g.call_function(torch.ones, ((),), {"dtype": torch.bool, "device": device})
                    for _, device in every]
            results += true[:first] + held + true[first + len(held):]
        g.output(tuple(results))
        return self._graph_module(g)

    def step_module(self, rows: tuple, index, state: list, extra: list, outputs: list,
                    items: list, stored: list, xs: tuple = ()) -> fx.GraphModule:
        """This arm as the body of a ``while_loop`` counting the steps of a ``for`` loop over
        the first dimension of tensors ``xs`` in step or over a range of ``n`` steps
        (magpy.graphs.controlflow): a graph of ``(count, *carried, *buffers, *outs, *extra,
        *numbers, *xs or n)``, where the arm read ``rows`` (one of each ``x``: ``x[count]``),
        the loop's index (as ``start + step * count``, ``index`` being ``(start, step)``),
        ``state`` (the carried tensors), ``extra`` and its lifted :meth:`numbers`, giving
        ``(count + 1, *outputs, *buffers with row count set to items, *outs with the row at
        the index set to stored)``.  A whole ``x`` the arm read is that operand (not one of
        ``extra``: an operand twice would alias itself)."""
        g = fx.Graph()
        count = g.placeholder("count")
        carried = [g.placeholder(f"carried{i}") for i in range(len(state))]
        buffers = [g.placeholder(f"buffer{i}") for i in range(len(items))]
        outs = [g.placeholder(f"out{i}") for i in range(len(stored))]
        inputs = {id(t): g.placeholder(f"extra{i}") for i, t in enumerate(extra)}
        env = self._read(g, self.numbers())
        overs = [g.placeholder(f"over{i}") for i in range(len(rows) or 1)]   # the xs, or n
        inputs.update((id(x), p) for x, p in zip(xs, overs))
        at = g.call_method("reshape", (count, (1,))) if rows else None
        for x, row in zip(overs, rows):
            inputs[id(row)] = g.call_method("squeeze", (g.call_function(torch.index_select, (x, 0, at)), 0))
        inputs.update((id(t), p) for t, p in zip(state, carried))
        env.update((ph, inputs[i]) for i, ph in self.captured.items())
        i = count if index in (None, (0, 1)) else g.call_function(
            torch.add, (g.call_function(torch.mul, (count, index[1])), index[0]))
        if self.count is not None:
            env[self.count] = i
        for node in self.graph.nodes:
            if node.op != "placeholder":
                env[node] = g.node_copy(node, env.__getitem__)
        def copied(t):
            return env[self.nodes[id(t)]]
        filled = [g.call_method("index_put", (b, (count,), copied(t))) for b, t in zip(buffers, items)]
        filled += [g.call_method("index_put", (o, (i,), copied(t))) for o, t in zip(outs, stored)]
        g.output((g.call_function(torch.add, (count, 1)), *map(copied, outputs), *filled))
        return self._graph_module(g)

    def _graph_module(self, g: fx.Graph) -> fx.GraphModule:
        root = torch.nn.Module()
        for name, t in self.constants.items():
            root.register_buffer(name, t)
        for name, arm in self.submodules.items():   # the arms of its own (nested) conds
            root.add_module(name, arm)
        return fx.GraphModule(root, g)


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


class ScalarInput:
    """A lifted float or int (its RefGraph node): a graph input, a float as a 0-d tensor;
    for a float, ``source`` is what the mock computes from it (``dynamic.Scalar``)."""

    __slots__ = ("node", "source")

    def __init__(self, node, source: str = "{x}"):
        self.node, self.source = node, source

    def __hash__(self):
        return hash(("scalar", self.node.id, self.source))

    def __eq__(self, other):
        return type(other) is ScalarInput and other.node is self.node and other.source == self.source


class IntFloatInput:
    """A float computed from lifted ints (``dynamic.IntFloat``) as a graph input: a 0-d
    tensor the mock computes from the call's ints (one per shadow)."""

    __slots__ = ("shadow",)

    def __init__(self, shadow):
        self.shadow = shadow


@dataclasses.dataclass(frozen=True)
class InputSource:
    """Where the mock finds a piece's input that is not read from outside: an expression
    over earlier pieces' outputs (``out0[3]``) or eager steps' results (``e2``)."""

    expr: str


class OpRecorder(TorchFunctionMode):
    """Records tensor operations into fx graphs while the monitor runs the program."""

    def __init__(self, refgraph: RefGraph, breaker):
        super().__init__()
        self.refgraph = refgraph
        self.dynamic = breaker
        self.pieces: list[Piece] = [Piece(0)]
        self.made: dict[int, Piece] = {}   # id(tensor) -> the piece whose operations made it
        self.eager: dict[int, str] = {}          # id(tensor) -> expression of the eager step that made it
        self.gradless: set[int] = set()          # ids of eager steps' tensors that never need grad
        # id(nn.Parameter the run made) -> (its data, requires_grad): the mock makes it anew
        self.wrapped: dict[int, tuple] = {}
        # ids of the tensors the graphs made whose shapes follow tensor data (nonzero, x[mask],
        # and what is computed from them): their sizes are data (ann.TORCH_DATA_SHAPED).
        self.data_shaped: set[int] = set()
        self._keep: list = []
        self._opaque = 0                                # inside an operation recorded whole
        # A Python value an eager step computed, about to become a constant of the graph:
        # ``fixed(value)`` makes the record check it (magpy.records.segments).  ``lifted(args)``: per
        # positional argument, the mock's variable of a number an eager step computed that the
        # graph may take as an input, or None.
        self.fixed = None
        self.lifted = None
        # ``indexed(args)``: a tensor subscript's arguments with its slices' 0-d tensor bounds
        # as the ints they are, which the graph checks (magpy.records.segments); else ``args``.
        self.indexed = None
        self.shapes = None   # magpy.graphs.dynamic.Shapes of a recording that may lift dimensions
        # Whether the operation being recorded takes Python numbers as 0-d tensor inputs: False,
        # or the dtype to cast them to (None: as they are), see _scalar_operands.
        self._operands = False
        self.branches = None   # magpy.graphs.controlflow.Branches: records tensor ifs as conds
        self.arrays = None     # magpy.capture.callees.numpy_arrays.Arrays: follows the arrays .numpy() gives
        # id(tensor a control flow operator gave) -> the tensors from before it that the
        # program has instead on some runs (see cond).
        self.passes: dict[int, Passes] = {}
        # the backend compiles graphs holding a backward (magpy.training.backward)
        self.joint_backend = False
        self.drew = False            # the operation being recorded drew random numbers (magpy.graphs.rng)

    @property
    def piece(self) -> Piece:
        """The piece operations are recorded into now."""
        return self.pieces[-1]

    @property
    def graph(self) -> fx.Graph:
        return self.pieces[-1].graph

    @property
    def op_count(self) -> int:
        return sum(p.op_count for p in self.pieces)

    def cut(self) -> bool:
        """End the current piece here (an eager step follows); False if it is still empty.
        Grad and inference mode are left as the run has them now."""
        piece = self.piece
        if not piece.op_count:
            return False
        self._sync_modes()   # (the program may have left a mode since the last operation)
        if piece.entered:
            raise _Unsupported("an eager step inside torch.inference_mode() entered in the graph")
        if piece.autocasts:
            # (the mock runs the step outside the graph, where the autocast it entered is not)
            raise _Unsupported("an eager step inside torch.autocast() entered in the graph")
        self.pieces.append(Piece(len(self.pieces)))
        return True

    def inputs_updated(self) -> bool:
        """Has a recorded operation updated a tensor read from outside in place?"""
        return any(map(updated_in_place, self.env_inputs()))

    def env_inputs(self) -> list:
        """The ShadowNodes of the tensors the graphs read from outside, first use first."""
        seen = {}
        for p in self.pieces:
            for sn, _ in p.inputs:
                if not isinstance(sn, (InputSource, ScalarInput, IntFloatInput)):
                    seen.setdefault(sn.id, sn)
        return list(seen.values())

    def paused(self):
        """A context in which torch operations run unrecorded (an eager step's own work)."""
        return _Paused(self)

    # ------------------------------------------------------------------ interception
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        piece = self.pieces[-1]
        if type(piece) is Arm:
            piece.check(func, args, kwargs)
        if self.dynamic.brk is not None or self._opaque:
            return func(*args, **kwargs)
        # Only func(...) itself may raise into the program: magpy's own work around it stops
        # recording instead.
        try:
            name = self._recorded_name(func, args, kwargs)
        except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
            self.dynamic.fail(e)
            name = None
        before = rng.state() if name is not None else None
        out = func(*args, **kwargs)
        self.drew = before is not None and rng.changed(before)
        if name is None and self.shapes is not None and args and isinstance(args[0], torch.Tensor):
            try:
                self._size_read(func, args, out)
            except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
                self.dynamic.fail(e)
        if name is not None:
            try:
                self._record_result(func, name, args, kwargs, out)
            except _Unsupported as e:
                self.dynamic(str(e))
            except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
                self.dynamic.fail(e)
        return out

    def _recorded_name(self, func, args, kwargs) -> str | None:
        """The name ``func`` is recorded under, or None when it is not a graph operation."""
        name = ann.torch_name(func)
        if self.data_shaped and (name in ann.TORCH_SIZE_READS or name in ann.TORCH_SIZED_RESULTS) and \
                any(id(a) in self.data_shaped for a in args[:2] if isinstance(a, torch.Tensor)):
            self.dynamic(f"{_qualname(func)} reads the size of a tensor whose shape follows tensor data",
                         step=True)
            return None
        if name in ann.TORCH_GRAD_MODE or name in ann.TORCH_METADATA or name in ann.TORCH_REFERENCES:
            return None   # graph state (_sync_modes records it where it matters), metadata, a .grad
        if rng.own_generator(kwargs):
            # A graph cannot hold the program's generator object: eager draws from it.
            self.dynamic(f"{_qualname(func)} draws from a torch.Generator the program passed", step=True)
            return None
        if name == "unbind" and args[1:] == (0,) and self.forks_allowed() and \
                self.branches.wants_iteration(args[0]):
            return None   # iter(x) of a for loop recorded as a while_loop (magpy.graphs.controlflow)
        if name in _GRAD_METADATA and self._grad_known(args[0]) and not _GRAD_METADATA[name](*args):
            # ``zero_grad(set_to_none=False)`` on each .grad: ``grad_fn`` is None for a tensor
            # that needs no grad; ``requires_grad_(flag)`` changes nothing where it is ``flag``
            # (an embedding's output made to require grad by a hook, as transformers does).
            return None
        if name in ann.TORCH_DYNAMIC:
            if name in ann.TORCH_TRUTH and self._assertion() is not None:
                return name   # recorded as an assertion if the truth lets the assertion pass
            if name in ann.TORCH_TRUTH and self.forks_allowed() and self.branches.wants(args[0]):
                return None   # a branch: recorded as a cond once the jump completes
            if name == "numpy" and self.arrays is not None and self.arrays.follows(args[0]):
                return None   # numpy on its array: torch operations (magpy.capture.callees.numpy_arrays)
            self.dynamic(f"{_qualname(func)} {ann.dynamic_reason(name)}", step=True)
            return None
        return name

    def forks_allowed(self) -> bool:
        """May control flow run forks of the program now?  (Not while it holds an array
        magpy.capture.callees.numpy_arrays follows: the forks run unfollowed.)"""
        return self.branches is not None and not (self.arrays is not None and self.arrays.holding())

    def _grad_known(self, t) -> bool:
        """Does the record know whether ``t`` needs grad (a tensor from outside, whose
        ``requires_grad`` the guard checks, one a graph made, or a gradient an eager backward
        wrote)?"""
        return self.refgraph.node_of(t) is not None or id(t) in self.made or id(t) in self.gradless

    def _assertion(self) -> tuple[bool, str] | None:
        """``(truth that passes, message)`` when the program reads a tensor's truth only to
        raise if it is wrong: ``assert c, msg``, ``if not c: raise ValueError(f"...")``, that
        is a conditional jump whose other path goes straight to a raise.  Only before anything
        observable happened: where the graph's check fails, the call runs again eagerly and
        the program raises its own exception (``magpy.records.cache``)."""
        mon = self.dynamic.monitor
        f = mon.current if mon is not None else None
        if f is None or not hasattr(f, "info"):
            return None
        code = f.info.instructions
        jump = code[f.lasti]
        jumps_if = bytecode.BRANCH_JUMPS.get(jump.opname) if jump is not None else None
        if jumps_if is None:
            return None
        # The raise is where the jump goes or where the code falls through (3.12 moves it
        # out of line), and the truth that passes is the one that goes the other way.
        _, target, fall = f.info.ops[f.lasti]
        path, passing = next(((p, truth) for p, truth in ((_raising_path(code, fall), jumps_if),
                                                           (_raising_path(code, target), not jumps_if))
                              if p is not None), (None, None))
        if path is None or not self._undoable():
            return None
        # The graph's message tells a failed check from other errors (failed_assertion).
        where = f"check failed at {f.code.co_filename}:{f.line}"
        ops = [ins.opname for ins in path]
        if not _raises_assertion_error(f, path[0]) or \
                ops[2:3 + len(bytecode.CALL_SEQUENCE)] != [*bytecode.CALL_SEQUENCE, "RAISE_VARARGS"]:
            return passing, where
        load = path[1]   # ``assert c, msg``: AssertionError's own message, where it is a string
        message = (load.argval if load.opname == "LOAD_CONST"
                   else f.locals[load.arg] if load.opname == "LOAD_FAST" else None)
        return passing, message if type(message) is str and message else where

    def _undoable(self) -> bool:
        """Has nothing observable happened in the call yet (a failed check may run it again)?"""
        segmenter = self.dynamic.segmenter
        return segmenter is None or segmenter.undoable()

    def _record_async_assertion(self, t) -> bool:
        """``torch._assert_async(t)``: an assertion of the graph (as ``assert c`` is, and with
        the same condition: only before anything observable happened), else False."""
        if not checks_in_graph(t) or t.numel() != 1 or not self._undoable():
            return False
        self._assert(t, _ASYNC_MESSAGE)
        return True

    def _record_assertion(self, func, t, truth) -> None:
        passing, message = self._assertion()
        if truth is not passing or not checks_in_graph(t):   # (the program raises it itself, eagerly)
            self.dynamic(f"{_qualname(func)} reads tensor data into Python", step=True)
            return
        self._assert(t, message, negated=not passing)

    def check(self, cond: torch.Tensor, what: str) -> None:
        """Record a check of the record's own that ``cond``, a bool tensor the graph has,
        holds (``what`` it means): where it does not, the call misses the record
        (:func:`failed_own_check`).  Only where nothing observable happened before it."""
        self._assert(cond, OWN_CHECK + what)

    def _assert(self, t, message: str, negated: bool = False) -> None:
        """The graph raises RuntimeError(``message``) where ``t`` (``not t``) is false."""
        self._sync_modes()
        cond = self.tensor_node(t)
        if negated:
            cond = self.graph.call_function(torch.logical_not, (cond,))
        _append_check(self.graph, cond, (message, t.device))
        self.piece.op_count += 1

    def _size_read(self, func, args, out) -> None:
        if ann.torch_name(func) in ann.TORCH_METADATA:
            shapes = self.shapes
            shapes.consider(args[0])
            if shapes.active:
                shapes.read(func, args, out)

    def _record_result(self, func, name, args, kwargs, out):
        if name in ann.TORCH_TRUTH:
            self._record_assertion(func, args[0], out)
            return
        if func is torch._assert_async and len(args) == 1 and not kwargs \
                and self._record_async_assertion(args[0]):
            return
        if not any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(out)) \
                and not _written(func, name, args, kwargs):   # (``x[i] = v`` gives None)
            # (a function of Python values, which the guard fixes where they come from tensors'
            # metadata: ``torch._assert(x.ndim == 4, ...)`` under the mode; an operator that
            # declined its operands, ``t == "Rep"``, read no data)
            if name in ann.TORCH_METADATA_RESULTS or out is NotImplemented \
                    or not _takes_tensors(args, kwargs):
                return
            self.dynamic(f"{_qualname(func)} returns a Python value computed from tensors", step=True)
            return
        self._record(func, name, args, kwargs, out)

    # ------------------------------------------------------------------ recording
    def _record(self, func, name, args, kwargs, out):
        self._sync_modes()
        if name in _SUBSCRIPTS and self.indexed is not None:
            args = self.indexed(args)
        ys = self.branches.stacked(name, args) if self.branches is not None else None
        if ys is not None:
            self._record_stacked(name, ys, args, kwargs, out)
            return
        if self.passes:
            for t in _written(func, name, args, kwargs):
                if any(id(t) == i or p.holds(t) for i, p in self.passes.items()):
                    raise _Unsupported(f"{name} updates in place a tensor an if passed through")
        if self.shapes is not None:
            # An input with lifted sizes makes its twin now, so that this very operation
            # (the first to use it) already runs on the twins.
            for t in pytree.tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor):
                    self.shapes.consider(t)
        shapes = self.shapes if self.shapes is not None and self.shapes.active else None
        if shapes is not None:
            symbolic = shapes.arguments(args, kwargs)
            if symbolic is not None:
                args, kwargs = symbolic
        # A number an eager step computed, or a lifted float argument, becomes an input where
        # it is an operand of floating tensor arithmetic.
        self._operands = _scalar_operands(name, args, kwargs)
        factory = name in _NUMBER_FACTORIES and self._operands is None
        steps = self.lifted(args, kwargs) if self._operands is not False and self.lifted is not None else ()
        steps = self._scalar_list_step(name, args, steps)
        keyword = self._keyword_step(name, args, kwargs)
        self._fix_constants(args, {k: v for k, v in kwargs.items() if k != keyword[0]}, steps)
        # A tensor an if passed through, reached through a slot the if left it in, is the
        # cond's output there (magpy.graphs.controlflow).
        nodes = self.branches.standing_in(args, kwargs) if self.branches is not None else None
        if nodes is not None:
            args, kwargs = nodes
        try:
            fargs = tuple(self._positional(name, a) if var is None else self._scalar_input(a, var)
                          if type(var) is not _ScalarList else self._scalar_list_input(a, var)
                          for a, var in zip(args, steps or (None,) * len(args)))
            self._operands = False
            fkwargs = {k: self._keyword(name, args, k, v, keyword) for k, v in kwargs.items()}
        except _Unsupported:
            if not _made_from_data(args, kwargs, out):
                raise
            self._fold(out)
            return
        owner = getattr(func, "__self__", None)
        # (Only a range loop's body that read its index has a count: the check stays off the
        # recording's common path.)
        indexed = getattr(self.piece, "count", None) is not None and any(
            a is LOOP_INDEX for a in pytree.tree_leaves((args, kwargs)))
        if indexed:
            node = self._row(name, args, kwargs, fargs)
        elif type(owner).__name__ == "getset_descriptor":
            node = self.graph.call_function(getattr, (fargs[0], name))
        elif factory and isinstance(fargs[0], fx.Node):
            # (ASGD's ``torch.as_tensor(lr / ...)``: the float64 input rounded as the factory
            # rounds the float; a copy, never the input itself)
            node = self.graph.call_method("to", (fargs[0],), {"device": out.device, "dtype": out.dtype,
                                                               "copy": True})
        elif ann.is_tensor_method(func) and args and isinstance(args[0], torch.Tensor):
            node = self.graph.call_method(name, fargs, fkwargs)
        else:
            node = self.graph.call_function(func, fargs, fkwargs)
        if self.drew:
            node.meta[DRAWS] = True
        self.piece.op_count += 1
        self._keep.append(out)
        if isinstance(out, torch.Tensor):
            self._made(out, node, kept=self._given_back(func, name, args, kwargs, out))
        elif isinstance(out, (tuple, list)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self._made(t, self.graph.call_function(operator.getitem, (node, i)))
        elif out is not None:
            raise _Unsupported(f"{_qualname(func)} returned {type(out).__name__}")
        self._follow_data_shapes(name, args, kwargs, out)
        if shapes is not None and shapes.symbols:
            if indexed:   # (every step gives its index's operations results of one kind: step 0's)
                args, kwargs = pytree.tree_map(lambda a: 0 if a is LOOP_INDEX else a, (args, kwargs))
            shapes.propagate(func, args, kwargs, out)

    def _follow_data_shapes(self, name, args, kwargs, out) -> None:
        """Mark the results of an operation whose shape follows tensor data: one of
        ann.TORCH_DATA_SHAPED, or any operation on such a tensor (conservatively: a size read
        of its result is then an eager step).  Not a tensor updated in place: its shape stays."""
        if not self.data_shaped and name not in ann.TORCH_DATA_SHAPED:
            return   # (the common case: every recorded operation passes here)
        leaves = pytree.tree_leaves((args, kwargs))
        shaping = args[:1] if name in ann.TORCH_SHAPE_OF_FIRST else leaves
        if not (ann.shaped_by_data(name, args, kwargs) or
                any(isinstance(t, torch.Tensor) and id(t) in self.data_shaped for t in shaping)):
            return
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and not any(t is a for a in leaves):
                self.data_shaped.add(id(t))

    def _row(self, name, args, kwargs, fargs) -> fx.Node:
        """``x[i]`` or ``x[:, i]`` with ``i`` a range loop's index: that row of ``x`` by the
        body's step count, an ``index_select`` (graph compilers trace it without reading the
        count into Python, which ``x[count]`` would)."""
        key = args[1] if name == "__getitem__" and len(args) == 2 and not kwargs else None
        keys = key if type(key) is tuple else (key,)
        dim = next((d for d, k in enumerate(keys) if k is LOOP_INDEX), None)
        whole = [type(k) is slice and k == slice(None) for k in keys]
        if dim is None or sum(whole) != len(keys) - 1:
            raise _Unsupported("a loop's index used other than as x[i] or x[:, i]")
        at = self.graph.call_method("reshape", (self.piece.count_node(), (1,)))
        row = self.graph.call_function(torch.index_select, (fargs[0], dim, at))
        return self.graph.call_method("squeeze", (row, dim))

    def apply_function(self, apply, run, args, kwargs):
        """``MyFunction.apply(*args)`` of a custom ``torch.autograd.Function``, carried out by
        ``run``: one graph operation calling ``apply`` (so its own ``backward`` computes
        gradients, in eager and under AOTAutograd), not the operations of its ``forward``."""
        self._opaque += 1
        try:
            out = run(*args, **(kwargs or {}))
        finally:
            self._opaque -= 1
        if self.dynamic.brk is None:
            try:
                with self.paused():   # (its run on the twins, magpy.graphs.dynamic, is not the program's)
                    self._record(apply, "apply", args, kwargs or {}, out)
            except _Unsupported as e:
                self.dynamic(str(e))
            except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
                self.dynamic.fail(e)
        return out

    def _fold(self, t) -> None:
        """``t`` was made from Python data computed inside the call (``torch.tensor`` of numpy
        arrays): that data depends only on guarded values, so ``t`` is a constant of the
        record, held by the graph module and copied on each run (the program may modify it)."""
        piece = self.piece
        name = f"_constant{len(piece.constants)}"
        piece.constants[name] = t.detach().clone()
        self._keep.append(t)
        self._made(t, self.graph.call_method("clone", (self.graph.get_attr(name),)))
        piece.op_count += 1

    def _made(self, t, node: fx.Node, kept: bool = False) -> None:
        """``node`` of the current piece gives ``t`` (``kept``: an earlier piece made it, and
        this operation gave it back unchanged: that piece stays its maker)."""
        piece = self.piece
        piece.nodes[id(t)] = node
        if kept or type(piece) is Arm and (id(t) in piece.captured or id(t) in self.made):
            # An arm's operation gave back a tensor from before it (``x.contiguous()``, also
            # where it read the tensor through a cond's stand-in): its maker stays (the arm's
            # are forgotten when it ends).
            return
        self.made[id(t)] = piece

    def _given_back(self, func, name: str, args: tuple, kwargs: dict, out) -> bool:
        """Did operation ``name`` give back ``out``, an argument an earlier piece made, without
        writing it (``x.to(x.dtype)``, ``x.contiguous()``)?  Its value is the earlier piece's:
        an eager step between them that took it is given that piece's output."""
        made = self.made.get(id(out))
        return (made is not None and made is not self.piece
                and any(out is a for a in pytree.tree_leaves((args, kwargs)))
                and not any(out is w for w in _written(func, name, args, kwargs)))

    def _fix_constants(self, args: tuple, kwargs: dict, steps: tuple) -> None:
        """The Python values the operation takes as constants are fixed before any of its
        nodes is made: fixing one may end the piece (a check of a value computed eagerly)."""
        if self.fixed is None:
            return
        constants = tuple(a for a, var in zip(args, steps or (None,) * len(args)) if var is None)
        for a in pytree.tree_leaves((constants, kwargs)):
            if not isinstance(a, (torch.Tensor, torch.SymInt, Scalar, IntFloat)) and a is not LOOP_INDEX:
                self.fixed(a)

    def _positional(self, name: str, a):
        """The graph argument of positional argument ``a`` of operation ``name``."""
        out = pytree.tree_map(self._arg, a)
        if type(a) is torch.Size and name in _SIZE_TYPED:
            return self.graph.call_function(torch.Size, (list(out),))
        return out

    def _arg(self, a):
        if isinstance(a, torch.Tensor):
            return self.tensor_node(a)
        if a is LOOP_INDEX:
            if type(self.piece) is not Arm:
                raise _Unsupported("a loop's index outside its body")
            return self.piece.count_node()
        if type(a) is torch.SymInt:
            return self.shapes.size_node(a, self)
        if type(a) is Scalar:
            return self._scalar_arg(a)
        if type(a) is IntFloat:
            return self._int_float_arg(a)
        if type(a) is slice and torch.SymInt in (type(a.start), type(a.stop), type(a.step)):
            return slice(self._arg(a.start), self._arg(a.stop), self._arg(a.step))
        if self.fixed is not None:
            self.fixed(a)
        if _literal(a):
            return a
        if is_immutable(a):
            # numpy scalars, enums, complex infinities ...: np.float64(2.0) is not 2.0 to torch.
            return self.graph.call_function(_constant(a), ())
        raise _Unsupported(f"tensor operation argument of type {type(a).__qualname__}")

    def _keyword(self, name: str, args: tuple, key: str, value, step: tuple = (None, None)):
        """The graph argument of keyword argument ``key``.  A lifted float that float tensor
        arithmetic reads as a Python number (:data:`_NUMBER_KEYWORDS`: an optimizer's
        ``param.add_(grad, alpha=-lr)``, ``torch._foreach_add_(params, grads, alpha=-lr)``,
        ``torch._foreach_addcdiv_(params, grads, avg, value=-lr)``, ``torch._fused_adamw_(...,
        lr=lr)``) is an input: a 0-d float64 tensor, which torch reads back as the very float
        (a Scalar or float parameter takes a 0-d tensor through ``.item()``; a fused
        optimizer's tensor-lr overload reads ``lr.item<double>()``), and so is one an eager
        step computed (``step``: the keyword and its variable, :meth:`_keyword_step`).  Where
        :func:`_operand_dtype` would not take a number operand as a tensor, it stays a value
        (compiling backends rewrite ``alpha`` into tensor arithmetic: ``training.tensor_alphas``)."""
        if key == step[0] or type(value) in (Scalar, IntFloat) and _NUMBER_KEYWORDS.get(name) == key:
            self._operands = None if _operand_dtype(args) is not False else False
            try:
                return self._scalar_input(value, step[1]) if key == step[0] else self._arg(value)
            finally:
                self._operands = False
        return pytree.tree_map(self._arg, value)

    def _scalar_list_step(self, name: str, args: tuple, steps: tuple) -> tuple:
        """``steps`` (:meth:`lifted`'s), with the variables of the scalar list of a foreach
        operation that takes one as a tensor too (:data:`_SCALAR_LIST_AT`) where eager steps
        computed every item (Adamax's step sizes ``[lr / bc * -1 for bc in bias_corrections]``,
        ``bc`` from the step counts' ``.item()``): the graph takes them as one input."""
        at, each = _SCALAR_LIST_AT.get(name, (None, False))
        if at is None or len(args) <= at or type(args[at]) not in (list, tuple) or self.lifted is None:
            return steps
        values = args[at]
        if not values or not all(type(v) is float for v in values) or any(map(ann.is_dtensor, args[0])):
            return steps   # (FSDP2's DTensor lists take no plain tensor of scalars)
        dtypes = None
        if each:   # (0-d tensors of the list's tensors' dtypes, float32 or float64 only)
            dtypes = tuple(getattr(t, "dtype", None) for t in args[0])
            if len(dtypes) != len(values) or not set(dtypes) <= {torch.float32, torch.float64}:
                return steps
        names = self.lifted(tuple(values), {})
        if not all(type(n) is str for n in names):
            return steps
        steps = list(steps or (None,) * len(args))
        steps[at] = _ScalarList(names, dtypes)
        return tuple(steps)

    def _scalar_list_input(self, values, scalars: _ScalarList):
        """Floats eager steps computed (their variables ``scalars.names``) as one 1-D float64
        tensor input, which the operation's ``.Tensor`` overload reads back as the same floats;
        or (``scalars.dtypes``) that input's items as 0-d tensors of the list's tensors' dtypes,
        with which the operation's ``.List`` overload computes as with the numbers."""
        source = InputSource(f"SCALAR(({', '.join(scalars.names)},))")
        node = self._placeholder(source, source, scalar_tensor(list(values)))
        if scalars.dtypes is None:
            return node
        items = self.graph.call_method("unbind", (node,))
        return [self.graph.call_method("to", (self.graph.call_function(operator.getitem, (items, i)), dtype))
                for i, dtype in enumerate(scalars.dtypes)]

    def _keyword_step(self, name: str, args: tuple, kwargs: dict) -> tuple:
        """``(keyword, variable)`` of the number keyword of operation ``name`` whose float an
        eager step computed (NAdam's ``param.addcdiv_(grad, denom, value=-lr * (1 - mu) / (1 -
        mu_product))``, ``mu`` from the step count's ``.item()``): a graph input, not a value
        the mock checks; else ``(None, None)``."""
        key = _NUMBER_KEYWORDS.get(name)
        value = kwargs.get(key) if key is not None else None
        if type(value) is not float or self.lifted is None or _operand_dtype(args) is False:
            return None, None
        (var,) = self.lifted((value,), {})
        return (key, var) if type(var) is str else (None, None)

    def _scalar_arg(self, a: Scalar):
        """A lifted float argument: a graph input where it is an operand of float tensor
        arithmetic, else its value (which the guard then checks)."""
        if self._operands is False:
            specialise(a)
            return a.value
        return self._scalar_input(a.value, ScalarInput(a.node, a.source))

    def _int_float_arg(self, a: IntFloat):
        """A float computed from lifted ints: a graph input where it is an operand of float
        tensor arithmetic, else its value (its ints then guarded by value)."""
        if self._operands is False:
            specialise(a)
            return a.value
        return self._scalar_input(a.value, IntFloatInput(a))

    def _scalar_input(self, value: float | int, source) -> fx.Node:
        """A number as a 0-d tensor (a float as float64, an int as int64): an input the mock
        has in a variable (``source`` its name), a lifted argument (a :class:`ScalarInput`),
        or the graph's own tensor (``source`` a tensor: a float read from graph data, see
        :meth:`record_number`); cast to the operation's dtype where ``_scalar_operands`` says."""
        if isinstance(source, torch.Tensor):
            node = self.tensor_node(source)
        else:
            real = type(value) is float
            if type(source) is str:
                source = InputSource(f"{'SCALAR' if real else 'INT_SCALAR'}({source})")
            node = self._placeholder(source, source, scalar_tensor(value) if real else int_tensor(value))
        cast = self._operands
        return node if cast is None else self.graph.call_method("to", (node, cast))

    def int_input(self, node, value) -> fx.Node:
        """The placeholder of a lifted int argument (its RefGraph ``node``); ``value`` is its
        SymInt, what the graph is compiled for."""
        source = ScalarInput(node)
        return self._placeholder(source, source, value)

    def _placeholder(self, key, source, example) -> fx.Node:
        """The current piece's input from ``source`` (one per ``key``), made if new; the
        backend compiles it for ``example``."""
        piece = self.piece
        ph = piece.placeholders.get(key)
        if ph is None:
            ph = piece.placeholders[key] = self.graph.placeholder(f"in{len(piece.inputs)}")
            ph.meta["example_value"] = example
            piece.inputs.append((source, ph))
        return ph

    def tensor_node(self, t) -> fx.Node:
        """The fx node holding ``t`` in the current piece: the op that made it, or a
        placeholder for a tensor from outside, from an earlier piece or from an eager step."""
        piece = self.piece
        node = piece.nodes.get(id(t))
        if node is not None:
            return node
        if type(piece) is Arm:
            return piece.capture(t)
        made = self.made.get(id(t))
        if made is not None:
            key = source = InputSource(f"out{made.index}[{made.output(t)}]")
        elif id(t) in self.eager:
            key = source = InputSource(self.eager[id(t)])
        else:
            source = self.refgraph.node_of(t)
            if source is None:
                raise _Unsupported(f"a tensor of unknown origin (shape {tuple(t.shape)}) reached an op")
            key = source.id
        ph = self._placeholder(key, source, t)
        piece.nodes[id(t)] = ph
        return ph

    def _sync_modes(self):
        # Grad and inference mode switched by the program (``with torch.no_grad():``,
        # ``torch.inference_mode()``) become graph nodes, as Dynamo does, so the compiled graph
        # records autograd (and makes inference tensors) exactly where eager did.
        piece = self.piece
        inference = torch.is_inference_mode_enabled()
        if inference != piece.inference:
            if inference:
                ctx = self.graph.call_function(_enter_inference_mode, (True,))
                piece.entered.append((ctx, piece.grad))
                piece.grad = False
            elif piece.entered:
                ctx, piece.grad = piece.entered.pop()
                self.graph.call_function(_exit_inference_mode, (ctx,))
            piece.inference = inference
        now = torch.is_grad_enabled()
        if now != piece.grad:
            self.graph.call_function(torch._C._set_grad_enabled, (now,))
            piece.grad = now
        self._sync_autocast(piece)

    def _sync_autocast(self, piece: Piece) -> None:
        # ``with torch.autocast(...)`` in the program: the graph enters and leaves it where the
        # program did (Dynamo's nodes), so its operations run in the autocast dtype as in eager.
        now = autocast_state()
        if now == piece.autocast:
            return
        while piece.autocasts and now != piece.autocast:   # back out to an enclosing state
            nodes, piece.autocast = piece.autocasts.pop()
            for ctx in reversed(nodes):
                self.graph.call_function(_exit_autocast, (ctx,))
        if now != piece.autocast:
            nodes = [self.graph.call_function(_enter_autocast, (device, dtype, on, None))
                     for device, (on, dtype), was in zip(AUTOCAST_DEVICES, now, piece.autocast)
                     if (on, dtype) != was]
            piece.autocasts.append((nodes, piece.autocast))
            piece.autocast = now

    @contextlib.contextmanager
    def arm(self, sandbox, counted: bool = False):
        """Record into a new :class:`Arm` of the current piece while the block runs
        (``counted``: a range loop's body)."""
        arm = Arm(self.piece, sandbox, counted)
        self.pieces.append(arm)
        try:
            yield arm
        finally:
            self.pieces.pop()
            for i in arm.nodes:
                if self.made.get(i) is arm:
                    del self.made[i]

    def cond(self, t, truth: bool, taken: tuple, other: tuple, outputs: list) -> None:
        """Record ``torch.cond`` on the truth of ``t``.  ``taken`` and ``other`` are ``(arm,
        the tensors it leaves in the frame's changed slots)``; the run took ``taken`` (the
        condition was ``truth``).  ``outputs`` are the tensors that stand for the cond's
        outputs: the taken arm's, or a stand-in where it left a tensor from before the jump
        (the program goes on with that very tensor; see magpy.graphs.controlflow).

        A cond's outputs are new tensors; where an arm leaves a tensor ``p`` from before the
        jump, the program has ``p`` itself, which the mock gives it when that arm runs
        (``passes``).  The run stops if a later operation writes either in place."""
        self._sync_modes()
        graph, piece = self.graph, self.piece
        operands, seen = [], set()
        for arm, outs in (taken, other):
            for x in arm.captures + [o for o in outs if not arm.made(o)]:
                if id(x) not in seen:
                    seen.add(id(x))
                    operands.append(x)
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
            _append_check(graph, graph.call_function(operator.getitem, (node, i)), check)

    def _numbers(self, numbers: dict) -> list:
        """The nodes of the current piece holding the lifted ``numbers`` (sources -> values)
        that an operator's arms read (:meth:`Arm.numbers`): its inputs."""
        return [self._placeholder(source, source, value) for source, value in numbers.items()]

    def checkpoint(self, body: Arm, outputs: list) -> None:
        """Record ``torch.utils.checkpoint``'s function, whose operations ``body`` recorded
        and which gave the tensors ``outputs``, as one ``tag_activation_checkpoint``
        operation (magpy.capture.callees.checkpoint)."""
        if not all(body.made(t) or any(t is c for c in body.captures) for t in outputs):
            self.dynamic.stop("a checkpointed function returns a tensor it did not read or make")
            return
        self._sync_modes()
        graph, piece = self.graph, self.piece
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

    def while_loop(self, goes_on, carried: list, body: Arm, state: list, extra: list, outputs: list,
                   finals: list, unbound: list) -> None:
        """Record ``torch.while_loop`` (magpy.graphs.controlflow): ``goes_on`` (a 0-d bool tensor)
        says whether the loop runs its body on the ``carried`` tensors.  ``body`` is one
        iteration's arm: it reads ``state`` (the carried tensors as the iteration before left
        them, then whether it went on) and ``extra`` (tensors from before the loop) and gives
        ``outputs`` (the carried tensors anew) and its own ``goes_on``.  ``finals`` are what
        the run's loop left, the operator's outputs; when the loop does not run at all, the
        program keeps the carried tensors themselves, which the mock gives it (``passes``),
        but for those ``unbound`` says the program had not set (the loop's own variables)."""
        self._sync_modes()
        graph, piece = self.graph, self.piece
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

    def for_loop(self, over, rows: tuple, index, carried: list, body: Arm, state: list, extra: list,
                 outputs: list, items: list, finals: list, stacks: list, stores: list) -> None:
        """Record a ``for`` loop over the first dimension of the tensors ``over`` in step, or
        over a range of ``over`` steps (an int or SymInt), as ``torch.while_loop`` counting its
        steps (magpy.graphs.controlflow).  ``body`` is one step's arm, which read ``rows`` and the
        loop's index from ``index`` (see :meth:`Arm.step_module`); ``carried`` are the carried
        tensors before the loop, ``finals`` what the run's loop left, ``stacks`` stand-ins of
        buffers holding the ``items`` of every step, one row per step (the operator's other
        outputs).  ``stores`` are the body's ``out[index] = value`` as ``(out, value)``: each
        ``out`` is an operand the operator gives back with its rows set, copied into ``out``
        (in place, as the loop did)."""
        self._sync_modes()
        graph, piece = self.graph, self.piece
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
            length = self._arg(over)
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

    def stands_for(self, t, same) -> None:
        """Tensor ``t``, made where the recorder does not see (``torch.from_numpy`` of an array
        magpy.capture.callees.numpy_arrays follows), holds what graph tensor ``same`` holds: operations on
        ``t``, and
        the mock, take ``same``'s node."""
        self._keep.append(t)
        self._made(t, self.tensor_node(same))

    def produced(self, t) -> Piece | None:
        """The piece whose operations made ``t`` (not an input), if any."""
        return self.made.get(id(t))

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

    def knows(self, t) -> bool:
        """Can the mock name tensor ``t`` (read from outside, made by a graph or a step)?"""
        return self.refgraph.node_of(t) is not None or id(t) in self.made or id(t) in self.eager

    def eager_tensor(self, t, expr: str, gradless: bool = False) -> None:
        """``t`` was made by an eager step: later graphs take it as an input, the mock's ``expr``
        (``gradless``: on every run, a tensor that needs no grad: a gradient the engine wrote)."""
        self.eager[id(t)] = expr
        if gradless:
            self.gradless.add(id(t))
        self._keep.append(t)

    def piece_inputs(self) -> list:
        """The values the current piece takes as inputs (tensors, numbers as 0-d tensors)."""
        return [ph.meta["example_value"] for _, ph in self.piece.inputs]

    def record_call(self, fn, args: tuple, out) -> None:
        """Record ``out = fn(*args)``, which magpy computed itself (paused), as an operation of
        the current piece (``magpy.training.backward``'s backward); a failure ends recording."""
        try:
            self._record(fn, fn.__name__, args, {}, out)
        except Exception as e:  # noqa: BLE001 - magpy's failure, never the program's
            self.dynamic.fail(e)

    def record_number(self, t: torch.Tensor) -> torch.Tensor:
        """``float(t)`` kept in the graph (magpy.records.segments): its operations recorded, and the
        tensor standing for the number in the graph returned."""
        for fn, rest in _NUMBER_READ:
            t = self.compute(fn, (t, *rest))
        return t

    def compute(self, fn, args: tuple):
        """``fn(*args)`` computed for the program by magpy (unrecorded) and recorded as an
        operation of the current piece; its result."""
        with self.paused():
            out = fn(*args)
            self.record_call(fn, args, out)
        return out

    def finish(self) -> list[fx.GraphModule | None]:
        """Close every piece's graph with its outputs, leaving grad and inference mode as the
        run did; None for a piece without operations."""
        self._sync_modes()
        return [_close(p) if p.op_count else None for p in self.pieces]


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


@dataclasses.dataclass(frozen=True)
class CountedLoop:
    """The operands of a ``while_loop`` that counts the steps of a ``for`` loop
    (:meth:`Recorder.for_loop`), kept in its condition's ``meta[COUNTED]``: carried, the step
    count then ``carried`` tensors, ``buffers`` (one row per step) and ``outs`` (rows stored by
    index); then ``extra`` tensors, ``numbers`` (lifted) and ``lasts``: the tensors walked in
    step (``sliced``), or the length as a 0-d tensor made by ``torch.scalar_tensor``.  Its
    trip count is known on the host before it starts (``magpy.backends.gpu.host_loops`` runs it so on a GPU,
    where reading the condition back every step would stall the launch queue).  ``device``:
    the type of the device its tensors are on."""

    sliced: bool
    device: str
    carried: int
    buffers: int
    outs: int
    extra: int
    numbers: int
    lasts: int


COUNTED = "magpy_counted_loop"
DEVICE = "magpy_device"   # a cond node's meta: the device type of its predicate
CHECK_DEVICE = "magpy_check_device"   # an assertion's meta: the device of the tensor it checks
Check = tuple[str, torch.device]   # an assertion of a graph: its message, the device of what it checks


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


def copy_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` whose graph can be rewritten without changing ``gm``'s (it shares its
    constants and the graph modules of its operators' arms)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    copy = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    copy.meta.update(gm.meta)
    return copy


def _close(piece: Piece) -> fx.GraphModule:
    piece.graph.output(tuple(piece.nodes[id(t)] for t in piece.outputs))
    piece.graph.eliminate_dead_code(_is_impure)
    root = torch.nn.Module()
    for name, t in piece.constants.items():
        root.register_buffer(name, t)
    for name, arm in piece.submodules.items():
        root.add_module(name, arm)
    gm = fx.GraphModule(root, piece.graph)
    # The layout eager gave (backends.EagerLayout keeps it).
    gm.meta[CONTIGUOUS_OUTPUTS] = tuple(i for i, t in enumerate(piece.outputs) if t.is_contiguous())
    gm.meta[GRAD_OUTPUTS] = tuple(i for i, t in enumerate(piece.outputs) if t.requires_grad)
    gm.meta[START_MODES] = piece.start_modes
    return gm


class _Paused:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        self.recorder._opaque += 1

    def __exit__(self, *exc):
        self.recorder._opaque -= 1


_SUBSCRIPTS = frozenset({"__getitem__", "__setitem__"})
# GraphModule.meta key: the positions of the outputs the recording run made contiguous.
CONTIGUOUS_OUTPUTS = "magpy_contiguous_outputs"
# GraphModule.meta key: the positions of the outputs that needed grad in the recording run.
GRAD_OUTPUTS = "magpy_grad_outputs"
# GraphModule.meta key: the thread modes (thread_modes) the graph starts under, which the
# mock switches to before it runs and a backend that traces it compiles it under.
START_MODES = "magpy_start_modes"
# Node.meta key: the operation drew random numbers in the recording run (magpy.graphs.rng).
DRAWS = "magpy_draws"


def updated_in_place(sn) -> bool:
    """Has the tensor of input node ``sn`` been updated in place since the run reached it?"""
    return tensor_version(sn.value) != sn.tensor_version


def scalar_tensor(value: float) -> torch.Tensor:
    """A float as the 0-d tensor a graph takes it as."""
    return torch.tensor(value, dtype=torch.float64)


# ``float(t)`` as a graph computes it: the 0-d float64 tensor a graph takes that float as
# (scalar_tensor), without autograd history (a Python number has none) and copied (an
# in-place update of ``t`` after the read must not reach it).  Torch's own operations, so
# the graph stays cacheable (AOTAutograd's cache bypasses graphs calling Python functions).
_NUMBER_READ = ((torch.Tensor.detach, ()), (torch.Tensor.to, (torch.float64, False, True)),
                (torch.Tensor.reshape, ((),)))


def int_tensor(value: int) -> torch.Tensor:
    """An int as the 0-d tensor a graph takes it as."""
    return torch.tensor(value, dtype=torch.int64)


def _scalar_operands(name: str, args: tuple, kwargs: dict):
    """May operation ``name`` take its Python number operands as 0-d tensors, and cast to
    what?  False: no; else see :func:`_operand_dtype`.  A tensor made of one float
    (:data:`_NUMBER_FACTORIES`, given its dtype and device at most) takes it as it is: the
    graph casts it as the factory would."""
    if name in _NUMBER_FACTORIES:
        one = len(args) == 1 and type(args[0]) in (float, Scalar, IntFloat)
        return None if one and kwargs.keys() <= {"dtype", "device"} else False
    return _operand_dtype(args) if name in _LIFTABLE else False


def _operand_dtype(args: tuple):
    """How the arithmetic of ``args`` takes a Python number as a 0-d tensor: False, it may
    not; None, as it is; a dtype, cast to it first.

    Floating tensor arithmetic with a tensor that has dimensions computes with a 0-d float64
    or int64 tensor exactly as with the number (the same dtype and values): None.  Between
    0-d tensors the float64 one would decide the result dtype, so the number is cast to the
    tensor's float32 or float64 first (the precision the operation computes in with a
    number); half precision computes in float32, not cast.

    A foreach operation's (``torch._foreach_mul_(params, 1 - lr * wd)``: tensor lists) is
    the dtype of all its tensors, float32 or float64, else False.  Its ``.Tensor`` overload
    runs per tensor as ``t.mul_(other)`` (CPU's kernels always take that path), and a 0-d
    tensor of ``t``'s own dtype gives what the number gives, whatever ``t``'s dimensions
    (the number is rounded to that dtype either way); an operation that reads it back as a
    number (``_foreach_add_``'s Scalar overload: ``.item()``) gets the same float.  In half
    precision the ``.Tensor`` overload multiplies by the number rounded to half first, where
    the number's own overload does not: False (tests/training/test_optimizers.py checks
    these bit for bit)."""
    if args and type(args[0]) in (list, tuple):   # (a foreach operation)
        dtypes = {t.dtype for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        return dtype if dtype in (torch.float32, torch.float64) else False
    tensors = [t for t in args if isinstance(t, torch.Tensor)]
    if not tensors or not all(t.is_floating_point() for t in tensors):
        return False
    if any(t.dim() for t in tensors):
        return None
    dtype = tensors[0].dtype
    return dtype if dtype in (torch.float32, torch.float64) else False


def storage_id(t: torch.Tensor) -> int | None:
    """The identity of ``t``'s storage, which its views share (None for a tensor without one,
    sparse or a subclass: two such count as sharing, the cautious answer)."""
    with torch._C.DisableTorchFunction():   # (magpy's own read, not the program's)
        try:
            return t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError, TypeError):
            return None


def _takes_tensors(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves((args, kwargs)))


def _written(func, name: str, args: tuple, kwargs: dict) -> list:
    """The tensors operation ``func`` (named ``name``) writes in place."""
    if kwargs and kwargs.get("out") is not None:
        written = pytree.tree_leaves(kwargs["out"])
    elif (name.endswith("_") and not name.endswith("__") or name in _INPLACE_DUNDERS
          or _inplace(func, args, kwargs)):
        # (a list of them: ``torch._foreach_add_``; lists: ``torch._fused_adamw_``)
        written = pytree.tree_leaves(args[:_WRITES_LEADING.get(name, 1)])
    else:
        return []
    return [t for t in written if isinstance(t, torch.Tensor)]


def _inplace(func, args: tuple, kwargs: dict) -> bool:
    """Does ``func`` write its first argument because its ``inplace`` parameter is true in this
    call (``F.relu(x, inplace=True)``, ``F.hardtanh(x, -1, 1, True)``)?"""
    at = _inplace_parameter(func)
    if at is None:
        return False
    return bool(kwargs.get("inplace", args[at] if at < len(args) else False))


_INPLACE_PARAMETERS: dict = {}   # func -> the position of its ``inplace`` parameter, or None


def _inplace_parameter(func) -> int | None:
    try:
        return _INPLACE_PARAMETERS[func]
    except KeyError:
        pass
    except TypeError:   # (unhashable)
        return None
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):   # (a native without a signature)
        names = []
    at = _INPLACE_PARAMETERS[func] = names.index("inplace") if "inplace" in names else None
    return at


# Tensor methods that update their first argument in place (besides ``name_``).
_INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                              "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                              "__ilshift__", "__irshift__", "__imatmul__"})
# Operations that read a torch.Size argument as a shape but a tuple as data (fx writes a
# torch.Size constant as a tuple): ``x.new(x.size())``.
_SIZE_TYPED = frozenset({"new"})
# Keyword arguments that operations read as a Python number and that may be a 0-d tensor
# (see OpRecorder._keyword): ``self + alpha * other`` (``-`` for sub) and ``self + value *
# t1 / t2`` (``* t2`` for addcmul), per tensor of the lists of a foreach operation; a fused
# optimizer's learning rate.
_NUMBER_KEYWORDS = {
    **dict.fromkeys(("add", "add_", "sub", "sub_", "_foreach_add", "_foreach_add_", "_foreach_sub",
                     "_foreach_sub_"), "alpha"),
    **dict.fromkeys(("addcdiv", "addcdiv_", "addcmul", "addcmul_", "_foreach_addcdiv", "_foreach_addcdiv_",
                     "_foreach_addcmul", "_foreach_addcmul_"), "value"),
    **dict.fromkeys(("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"), "lr")}


class _ScalarList(typing.NamedTuple):
    """A foreach operation's scalar list that eager steps computed: their variables, and the
    dtypes of its 0-d tensors (None: one 1-D float64 tensor)."""

    names: tuple
    dtypes: tuple | None


# Foreach operations whose list of numbers at that position may be tensors (see
# OpRecorder._scalar_list_step): one 1-D tensor (``.Tensor``, read back into doubles), or
# (True) one 0-d tensor per tensor of the first list (``.List``: NAdam's ``_foreach_mul_(
# mu_products, mus)``).
_SCALAR_LIST_AT = {
    **dict.fromkeys(("_foreach_addcdiv_", "_foreach_addcdiv", "_foreach_addcmul_", "_foreach_addcmul"),
                    (3, False)),
    **dict.fromkeys(("_foreach_mul_", "_foreach_mul", "_foreach_div_", "_foreach_div", "_foreach_add_",
                     "_foreach_add", "_foreach_sub_", "_foreach_sub"), (1, True))}
# Tensors made of one float (keywords: see OpRecorder._record): a float an eager step computed
# or a lifted one is a graph input, rounded to the result's dtype in the graph.
_NUMBER_FACTORIES = frozenset({"as_tensor", "tensor", "scalar_tensor"})
# Operations whose Python number operands may be 0-d tensors (see _scalar_operands); the
# foreach ones have a ``.Tensor`` overload taking it (``torch._foreach_mul_(params, t)``).
_LIFTABLE = frozenset({"__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__",
                       "__rmul__", "__imul__", "__truediv__", "__rdiv__", "__rtruediv__", "__itruediv__",
                       "add", "sub", "mul", "div", "true_divide", "add_", "sub_", "mul_", "div_",
                       "_foreach_add", "_foreach_add_", "_foreach_mul", "_foreach_mul_", "_foreach_div",
                       "_foreach_div_",
                       # (Adam's ``exp_avg.lerp_(grad, 1 - beta1)`` and ``beta1 ** step``)
                       "lerp", "lerp_", "__rpow__"})
# In-place operations that write more than their first argument (their schemas' ``!``): name ->
# how many leading arguments (tensors or lists of them).  They return nothing and are recorded
# for that effect: the optimizers' fused kernels; GradScaler's unscale (the gradients and the
# found-inf flag) and scale update (the scale and its growth tracker).
_WRITES_LEADING = {"_fused_adam_": 5, "_fused_adamw_": 5, "_fused_sgd_": 3, "_fused_adagrad_": 4,
                   "_amp_foreach_non_finite_check_and_unscale_": 2, "_amp_update_scale_": 2}


# Autograd metadata reads and writes that are constants or no-ops, given the tensor's known
# requires_grad and the other arguments: name -> (tensor, *arguments) -> whether it is not one.
_GRAD_METADATA = {"grad_fn": lambda t: t.requires_grad,
                  "requires_grad_": lambda t, requires_grad=True: requires_grad != t.requires_grad}


class _Unsupported(Exception):
    pass


def _made_from_data(args, kwargs, out) -> bool:
    """A tensor factory given only Python data (no tensors), not needing autograd."""
    return (isinstance(out, torch.Tensor) and not out.requires_grad
            and not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs))))


def _literal(v) -> bool:
    """Does fx's code for the constant ``v`` give back ``v`` itself, of its own type?"""
    t = type(v)
    if t in _LITERALS:
        return True
    if t is complex:   # repr(complex(inf, nan)) == "(inf+nanj)": "nanj" is no name
        return math.isfinite(v.real) and math.isfinite(v.imag)
    if t is tuple or t is list:   # torch.Size is written as a tuple: it is not a literal
        return all(_literal(x) for x in v)
    if t is slice:
        return _literal(v.start) and _literal(v.stop) and _literal(v.step)
    return False


def _constant(value):
    """A graph node's target returning ``value``: fx names it a global of the graph's code,
    so the value is the object itself, not its repr (backends trace through the call)."""
    def constant():
        return value
    return constant


# ``assert`` on a tensor becomes this operation: it raises RuntimeError(message) when the
# condition is false, on every run of the graph.
_ASSERT = torch.ops.aten._assert_async.msg
# (torch._assert_async's own message, which the graph's assertion raises in its place)
_ASYNC_MESSAGE = "Expected Tensor with single nonzero value, but got zero"
_RAISING_PATH = 200   # code units a raising path may take (building an f-string message)
# Instructions that leave a straight-line path (it might not reach its raise).
_LEAVES_PATH = ("JUMP", "RETURN", "YIELD", "FOR_ITER", "SEND", "RERAISE")


# The message of the record's own checks (OpRecorder.check), as opposed to the program's.
OWN_CHECK = "magpy: this call takes another path than the recorded one: "


def checks_in_graph(*values) -> bool:
    """May a check on these values be an assertion of the graph?  Only on the CPU: a failed
    ``_assert_async`` on a GPU is a device-side assert, which leaves the CUDA context unusable
    for the rest of the process; there the check reads the value back (an eager step), as the
    program's own ``if`` does."""
    return all(v.device.type == "cpu" for v in values if isinstance(v, torch.Tensor))


def _append_check(graph: fx.Graph, cond: fx.Node, check: Check) -> None:
    """Append to ``graph`` the assertion that ``cond`` holds (``check``: its message, and the
    device it is on, which an operator hoisting it from an arm needs: Arm.module)."""
    node = graph.call_function(_ASSERT, (cond, check[0]))
    node.meta[CHECK_DEVICE] = check[1]


def failed_own_check(gm: fx.GraphModule | None, exc: BaseException) -> bool:
    """Did running ``gm`` raise ``exc`` because one of the record's own checks failed?"""
    return OWN_CHECK in str(exc) and failed_assertion(gm, exc)


def failed_assertion(gm: fx.GraphModule | None, exc: BaseException) -> bool:
    """Did running ``gm`` raise ``exc`` because one of its recorded assertions failed?  That is
    the program's own failure: eager raises AssertionError there."""
    if gm is None or not isinstance(exc, (RuntimeError, AssertionError)):
        return False
    text = str(exc)
    return any(n.target is _ASSERT and n.args[1] in text for n in gm.graph.nodes)


def _raising_path(code: list, start: int) -> list | None:
    """The instructions from ``start`` up to a ``raise`` (its last), if the code goes there
    straight, else None."""
    path = []
    for ins in code[start:start + _RAISING_PATH]:
        if ins is None:
            continue
        if any(part in ins.opname for part in _LEAVES_PATH):
            return None
        path.append(ins)
        if ins.opname == "RAISE_VARARGS":
            return path if ins.arg else None   # (a bare ``raise`` re-raises what is handled)
    return None


def _raises_assertion_error(frame, ins) -> bool:
    """Does ``ins`` load the builtin AssertionError (not a global shadowing its name)?"""
    if ins.opname == "LOAD_ASSERTION_ERROR":
        return True
    return (ins.opname == "LOAD_GLOBAL" and ins.argval == "AssertionError"
            and "AssertionError" not in frame.globals
            and frame.builtins.get("AssertionError") is AssertionError)


# Tensor methods named like Python's special methods that write their tensor (``__getitem__``,
# ``__rsub__`` and the like read it).
_WRITING_DUNDERS = frozenset({"__setitem__", "__delitem__"} | {
    f"__i{op}__" for op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift",
                            "rshift", "and", "or", "xor")})


def writes(node: fx.Node) -> bool:
    """Does ``node`` change state: write a tensor in place (``add_``, ``__setitem__``,
    ``copy_``, an ``out=`` or ``inplace=True`` one) or draw random numbers (advancing the
    program's generators)?  Such a node is never dead, and nothing is moved across it."""
    if DRAWS in node.meta:
        return True
    if node.op == "call_function" and (node.kwargs.get("out") is not None
                                       or _inplace(node.target, node.args, node.kwargs)):
        return True
    if node.op == "call_method":
        dunder = node.target.startswith("__") and node.target.endswith("__")
        return node.target in _WRITING_DUNDERS if dunder else node.target.endswith("_")
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        return name.endswith("_") and not name.endswith("__") or node.target in _EFFECTS
    return False


def repeatable(gm: fx.GraphModule) -> bool:
    """Can ``gm`` run twice on the same inputs with nothing to show for it but the time?  No
    operation in it or in its branches and loop bodies writes (:func:`writes`: in place, random
    numbers, grad-mode switches) or talks to other processes."""
    for node in gm.graph.nodes:
        if writes(node) or node.op == "call_function" and _communicates(node.target):
            return False
        if node.op == "get_attr":
            sub = getattr(gm, node.target, None)
            if isinstance(sub, fx.GraphModule) and not repeatable(sub):
                return False
    return True


def _communicates(target) -> bool:
    # torch.distributed's collectives, functional or not: once per call on every rank.
    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', target)}"
    return "distributed" in name or "c10d" in name


def _is_impure(node: fx.Node) -> bool:
    # Never dead: what writes, the graph's inputs and output, and (conservatively) every
    # special method of a tensor (``x[i]`` unused may still raise on another call's sizes).
    return writes(node) or node.op in ("placeholder", "output") or (
        node.op == "call_method" and node.target.startswith("__") and node.target.endswith("__"))


_enter_inference_mode = torch.autograd.grad_mode._enter_inference_mode
_exit_inference_mode = torch.autograd.grad_mode._exit_inference_mode
_enter_autocast = torch.amp.autocast_mode._enter_autocast
_exit_autocast = torch.amp.autocast_mode._exit_autocast
_EFFECTS = (torch._C._set_grad_enabled, _enter_inference_mode, _exit_inference_mode, _enter_autocast,
            _exit_autocast, _ASSERT)

# The device types whose autocast a graph follows (autocast_state).
AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple:
    """Per device type of :data:`AUTOCAST_DEVICES`: whether autocast is on, and its dtype."""
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES)


def thread_modes() -> tuple:
    """torch's thread-local modes that the program switches and the graphs follow: grad mode
    and autocast (inference mode is entered and left inside a graph, never across a step)."""
    return torch.is_grad_enabled(), autocast_state()


def set_thread_modes(modes: tuple) -> None:
    """Switch to ``modes`` (:func:`thread_modes`' form)."""
    grad, autocast = modes
    torch._C._set_grad_enabled(grad)
    for device, (on, dtype) in zip(AUTOCAST_DEVICES, autocast):
        torch.set_autocast_enabled(device, on)
        torch.set_autocast_dtype(device, dtype)


def _qualname(func) -> str:
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor":
        return f"Tensor.{owner.__name__}"
    qual = getattr(func, "__qualname__", None) or repr(func)
    return qual.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "torch.")
