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

The recorder's parts hold an idea each: which torch calls are graph operations
(``interception``), an operation's arguments as the graph's (``operands``), control flow as
torch's higher-order operators (``higher_order``), and checks as the graph's assertions
(``assertions``).
"""
from __future__ import annotations

import contextlib
import inspect
import operator

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from magpy.capture import annotations as ann
from magpy.capture.refgraph.graph import RefGraph, tensor_version
from magpy.graphs.assertions import ASSERT, CHECK_DEVICE, Assertions, Check
from magpy.graphs.higher_order import HigherOrderOperators, Passes
from magpy.graphs.interception import Interception, qualname
from magpy.graphs.operands import LOOP_INDEX, InputSource, IntFloatInput, Operands, ScalarInput, Unsupported


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
        self.storages = Storages()   # the memory of its tensor inputs (their views share it)

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

    def input(self, key, source, example) -> fx.Node:
        """This piece's input from ``source`` (one per ``key``), made if new; the backend
        compiles it for ``example``."""
        ph = self.placeholders.get(key)
        if ph is None:
            ph = self.placeholders[key] = self.graph.placeholder(f"in{len(self.inputs)}")
            ph.meta["example_value"] = example
            self.inputs.append((source, ph))
            if isinstance(example, torch.Tensor):
                self.storages.add(example)
        return ph

    def made(self, t) -> bool:
        """Did this piece's operations make ``t``?"""
        return id(t) in self.nodes

    def owns(self, tensors) -> bool:
        """Did this piece's operations make all of ``tensors`` in storage of their own, none a
        view of an input?  An update of such a tensor in place is undone by running the graph
        again: :func:`repeatable`.  (An input added later cannot share that storage: what could
        make a view of it outside the graph is an eager step, which ends the piece.)"""
        return all(self.made(t) and memory_span(t) is not None and not self.storages.shares(t)
                   for t in tensors)

    def count_node(self) -> fx.Node:
        """The step count of the range loop whose body this is (:meth:`Arm.count_node`)."""
        raise Unsupported("a loop's index outside its body")

    def check(self, func, args, kwargs) -> None:
        """Before ``func`` runs on ``args``: a piece records whatever it writes (an arm may not
        write what it did not make, :meth:`Arm.check`)."""

    def sync_modes(self) -> None:
        """Follow the grad, inference and autocast modes the program is in now (it may have
        switched them since the last operation)."""
        # Grad and inference mode switched by the program (``with torch.no_grad():``,
        # ``torch.inference_mode()``) become graph nodes, as Dynamo does, so the compiled graph
        # records autograd (and makes inference tensors) exactly where eager did.
        inference = torch.is_inference_mode_enabled()
        if inference != self.inference:
            if inference:
                ctx = self.graph.call_function(_enter_inference_mode, (True,))
                self.entered.append((ctx, self.grad))
                self.grad = False
            elif self.entered:
                ctx, self.grad = self.entered.pop()
                self.graph.call_function(_exit_inference_mode, (ctx,))
            self.inference = inference
        now = torch.is_grad_enabled()
        if now != self.grad:
            self.graph.call_function(torch._C._set_grad_enabled, (now,))
            self.grad = now
        self._sync_autocast()

    def _sync_autocast(self) -> None:
        # ``with torch.autocast(...)`` in the program: the graph enters and leaves it where the
        # program did (Dynamo's nodes), so its operations run in the autocast dtype as in eager.
        now = autocast_state()
        if now == self.autocast:
            return
        while self.autocasts and now != self.autocast:   # back out to an enclosing state
            nodes, self.autocast = self.autocasts.pop()
            for ctx in reversed(nodes):
                self.graph.call_function(_exit_autocast, (ctx,))
        if now != self.autocast:
            nodes = [self.graph.call_function(_enter_autocast, (device, dtype, on, None))
                     for device, (on, dtype), was in zip(AUTOCAST_DEVICES, now, self.autocast)
                     if (on, dtype) != was]
            self.autocasts.append((nodes, self.autocast))
            self.autocast = now


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
        self.sandbox = sandbox
        self.goes_on = None   # a loop body's: the tensor telling whether the loop goes on after it
        self.counted = counted   # a range loop's body: its operations may read the step count
        self.count: fx.Node | None = None   # ... through this placeholder

    def count_node(self) -> fx.Node:
        """The step count of the range loop this arm is the body of (made if new)."""
        if not self.counted:
            raise Unsupported("a loop's index used inside an if in its body")
        if self.count is None:
            self.count = self.graph.placeholder("count")
        return self.count

    def capture(self, t) -> fx.Node:
        ph = self.captured[id(t)] = self.nodes[id(t)] = self.graph.placeholder(f"c{len(self.captures)}")
        self.captures.append(t)
        self.storages.add(t)   # (with its inputs': an arm writes no view of either)
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
            if not self.made(t) or self.storages.shares(t):
                self.sandbox.stop(f"{ann.torch_name(func)} updates a tensor from before the branch")

    def checks(self) -> list[Check]:
        """The assertions this arm's operations recorded (the program's ``assert`` and
        ``raise`` checks, nested operators' hoisted ones)."""
        return [(n.args[1], n.meta[CHECK_DEVICE]) for n in self.graph.nodes if n.target is ASSERT]

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
            if checks is not None and node.target is ASSERT:
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


class OpRecorder(HigherOrderOperators, Assertions, Interception):
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
        self.operands = Operands(self)   # the graph arguments of the operation being recorded
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
        piece.sync_modes()   # (the program may have left a mode since the last operation)
        if piece.entered:
            raise Unsupported("an eager step inside torch.inference_mode() entered in the graph")
        if piece.autocasts:
            # (the mock runs the step outside the graph, where the autocast it entered is not)
            raise Unsupported("an eager step inside torch.autocast() entered in the graph")
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

    def _record_result(self, func, name, args, kwargs, out):
        if name in ann.TORCH_TRUTH:
            if not self._record_assertion(args[0], out):   # (the program raises it itself, eagerly)
                self.dynamic(f"{qualname(func)} reads tensor data into Python", step=True)
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
            self.dynamic(f"{qualname(func)} returns a Python value computed from tensors", step=True)
            return
        self._record(func, name, args, kwargs, out)

    # ------------------------------------------------------------------ recording
    def _record(self, func, name, args, kwargs, out):
        """Record ``out = func(*args, **kwargs)``, operation ``name``, into the current piece."""
        self.piece.sync_modes()
        if name in _SUBSCRIPTS and self.indexed is not None:
            args = self.indexed(args)
        ys = self.branches.stacked(name, args) if self.branches is not None else None
        if ys is not None:
            self._record_stacked(name, ys, args, kwargs, out)
            return
        written = _written(func, name, args, kwargs)
        if self.passes:
            for t in written:
                if any(id(t) == i or p.holds(t) for i, p in self.passes.items()):
                    raise Unsupported(f"{name} updates in place a tensor an if passed through")
        shapes = self._symbolic_shapes(args, kwargs)
        if shapes is not None:
            symbolic = shapes.operation(func, name, args, kwargs)
            if symbolic is not None:
                func, name, args, kwargs = symbolic
        factory, steps, keyword = self.operands.steps(name, args, kwargs)
        # A tensor an if passed through, reached through a slot the if left it in, is the
        # cond's output there (magpy.graphs.controlflow).
        nodes = self.branches.standing_in(args, kwargs) if self.branches is not None else None
        if nodes is not None:
            args, kwargs = nodes
        try:
            fargs, fkwargs = self.operands.graph_arguments(name, args, kwargs, steps, keyword)
        except Unsupported:
            if not _made_from_data(args, kwargs, out):
                raise
            self._fold(out)
            return
        indexed = self.operands.reads_loop_index(args, kwargs)
        node = (self.operands.row(name, args, kwargs, fargs) if indexed
                else self._call_node(func, name, args, fargs, fkwargs, factory, out))
        if self.drew:
            node.meta[DRAWS] = True
        elif written and self.piece.owns(written):
            node.meta[WRITES_OWN] = True
        self.piece.op_count += 1
        self._keep.append(out)
        self._results(func, name, args, kwargs, out, node)
        self._follow_data_shapes(name, args, kwargs, out)
        if shapes is not None and shapes.symbols:
            if indexed:   # (every step gives its index's operations results of one kind: step 0's)
                args, kwargs = pytree.tree_map(lambda a: 0 if a is LOOP_INDEX else a, (args, kwargs))
            shapes.propagate(func, args, kwargs, out)

    def _symbolic_shapes(self, args, kwargs):
        """The recording's Shapes where they are active (its operations run on twins with
        symbolic sizes), else None."""
        if self.shapes is None:
            return None
        # An input with lifted sizes makes its twin now, so that this very operation
        # (the first to use it) already runs on the twins.
        for t in pytree.tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                self.shapes.consider(t)
        return self.shapes if self.shapes.active else None

    def _call_node(self, func, name: str, args: tuple, fargs: tuple, fkwargs: dict, factory: bool,
                   out) -> fx.Node:
        """The node calling ``func`` (named ``name``) on the graph arguments ``fargs`` and
        ``fkwargs`` (``factory``: a tensor of one number the graph takes as an input)."""
        graph = self.graph
        if type(getattr(func, "__self__", None)).__name__ == "getset_descriptor":
            return graph.call_function(getattr, (fargs[0], name))
        if factory and isinstance(fargs[0], fx.Node):
            # (ASGD's ``torch.as_tensor(lr / ...)``: the float64 input rounded as the factory
            # rounds the float; a copy, never the input itself)
            return graph.call_method("to", (fargs[0],), {"device": out.device, "dtype": out.dtype,
                                                         "copy": True})
        if ann.is_tensor_method(func) and args and isinstance(args[0], torch.Tensor):
            return graph.call_method(name, fargs, fkwargs)
        return graph.call_function(func, fargs, fkwargs)

    def _results(self, func, name: str, args: tuple, kwargs: dict, out, node: fx.Node) -> None:
        """``node`` gives ``out``, the operation's result: a tensor, or tensors in a tuple or list."""
        if isinstance(out, torch.Tensor):
            self._made(out, node, kept=self._given_back(func, name, args, kwargs, out))
        elif isinstance(out, (tuple, list)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self._made(t, self.graph.call_function(operator.getitem, (node, i)))
        elif out is not None:
            raise Unsupported(f"{qualname(func)} returned {type(out).__name__}")

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
            except Unsupported as e:
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

    def int_input(self, node, value) -> fx.Node:
        """The placeholder of a lifted int argument (its RefGraph ``node``); ``value`` is its
        SymInt, what the graph is compiled for."""
        source = ScalarInput(node)
        return self.piece.input(source, source, value)

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
                raise Unsupported(f"a tensor of unknown origin (shape {tuple(t.shape)}) reached an op")
            key = source.id
        ph = piece.input(key, source, t)
        piece.nodes[id(t)] = ph
        return ph

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

    def stands_for(self, t, same) -> None:
        """Tensor ``t``, made where the recorder does not see (``torch.from_numpy`` of an array
        magpy.capture.callees.numpy_arrays follows), holds what graph tensor ``same`` holds: operations on
        ``t``, and the mock, take ``same``'s node."""
        self._keep.append(t)
        self._made(t, self.tensor_node(same))

    def produced(self, t) -> Piece | None:
        """The piece whose operations made ``t`` (not an input), if any."""
        return self.made.get(id(t))

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
        self.piece.sync_modes()
        return [_close(p) if p.op_count else None for p in self.pieces]


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
# Node.meta key: the operation writes in place only tensors its graph made in storage of their
# own (``F.relu(conv(x), inplace=True)``, ``out += identity``): Piece.owns.
WRITES_OWN = "magpy_writes_own"


def updated_in_place(sn) -> bool:
    """Has the tensor of input node ``sn`` been updated in place since the run reached it?"""
    return tensor_version(sn.value) != sn.tensor_version


# ``float(t)`` as a graph computes it: the 0-d float64 tensor a graph takes that float as
# (scalar_tensor), without autograd history (a Python number has none) and copied (an
# in-place update of ``t`` after the read must not reach it).  Torch's own operations, so
# the graph stays cacheable (AOTAutograd's cache bypasses graphs calling Python functions).
_NUMBER_READ = ((torch.Tensor.detach, ()), (torch.Tensor.to, (torch.float64, False, True)),
                (torch.Tensor.reshape, ((),)))


class Storages:
    """The memory of a piece's (or an arm's) tensor inputs, and whether another tensor shares
    it.  By address range, not storage object: ``torch.from_numpy(x.numpy())`` shares ``x``'s
    memory through a storage of its own."""

    def __init__(self):
        self.spans: list[tuple[int, int]] = []
        self.unknown = False   # an input without memory of its own (sparse, a subclass)

    def add(self, t: torch.Tensor) -> None:
        span = memory_span(t)
        if span is None:
            self.unknown = True
        else:
            self.spans.append(span)

    def shares(self, t: torch.Tensor) -> bool:
        """Does ``t``'s memory overlap an input's?  (A tensor without memory of its own shares
        with an input without either: the cautious answer.)"""
        span = memory_span(t)
        if span is None:
            return self.unknown
        lo, hi = span
        return any(a < hi and lo < b for a, b in self.spans)


def memory_span(t: torch.Tensor) -> tuple[int, int] | None:
    """The addresses of ``t``'s storage, ``[start, end)`` (None for a tensor without one)."""
    with torch._C.DisableTorchFunction():   # (magpy's own read, not the program's)
        try:
            st = t.untyped_storage()
            start = st.data_ptr()
            return start, start + max(st.nbytes(), 1)
        except (RuntimeError, NotImplementedError, TypeError):
            return None


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
# In-place operations that write more than their first argument (their schemas' ``!``): name ->
# how many leading arguments (tensors or lists of them).  They return nothing and are recorded
# for that effect: the optimizers' fused kernels; GradScaler's unscale (the gradients and the
# found-inf flag) and scale update (the scale and its growth tracker).
_WRITES_LEADING = {"_fused_adam_": 5, "_fused_adamw_": 5, "_fused_sgd_": 3, "_fused_adagrad_": 4,
                   "_amp_foreach_non_finite_check_and_unscale_": 2, "_amp_update_scale_": 2}


def _made_from_data(args, kwargs, out) -> bool:
    """A tensor factory given only Python data (no tensors), not needing autograd."""
    return (isinstance(out, torch.Tensor) and not out.requires_grad
            and not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs))))


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
    numbers, grad-mode switches) what the graph did not make itself (:data:`WRITES_OWN`), or
    talks to other processes."""
    for node in gm.graph.nodes:
        if writes(node) and not node.meta.get(WRITES_OWN) \
                or node.op == "call_function" and _communicates(node.target):
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
            _exit_autocast, ASSERT)

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
