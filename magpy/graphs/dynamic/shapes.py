"""One recording's symbolic sizes: fake twins, symbols and their origins, the observer that
moves shadows, and what the guard and mock need (``magpy.graphs.dynamic``)."""
from __future__ import annotations

import contextlib
import logging
import operator

import sympy
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils import _pytree as pytree
from torch.utils._sympy.functions import CleanDiv, FloorDiv, Max, Min, Mod, PythonMod
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.printers import PythonPrinter

from magpy import logs
from magpy.capture.annotations import TYPE_READERS, passes_through
from magpy.capture.monitor import Observer, bytecode
from magpy.capture.monitor.observer import RETURNS
from magpy.capture.refgraph.graph import ARG, ATTR, CELL, DICT, ITEM, KWARG, is_namespace, namespace_twin
from magpy.graphs.dynamic.arms import Conditional, evaluate_arms
from magpy.graphs.dynamic.lifted_shadows import (
    IntFloat,
    Items,
    Scalar,
    Span,
    SymInt,
    collect,
    int_float,
    items_of,
    of_ints,
    of_read,
    specialise,
    symbolic,
    value_of,
    with_shadow,
)
from magpy.graphs.dynamic.lifting import Lifting
from magpy.graphs.dynamic.rules import (
    CELL_OPS,
    FLOAT_ARITY,
    NATIVE_FLOAT,
    NATIVE_INT,
    NATIVE_SEQ,
    RULES,
    argument_shadows,
    dict_get,
    direct_read,
    float_parts,
    int_result,
    list_append,
    zip_walk,
)

# Instructions that read a number from outside the call: an attribute, a global.
_READS = frozenset({"LOAD_ATTR", "LOAD_GLOBAL", "BINARY_SUBSCR", "LOAD_DEREF"})
# What such a read may lift: a number, or a tuple's floats (an optimizer's ``group["betas"]``).
_READ_TYPES = (float, int, tuple)


def _held(holder, key):
    """What ``holder`` holds at ``key`` now (an attribute of an object, an item of a dict or
    list), or None."""
    if type(holder) is dict:
        return holder.get(key)
    if type(holder) in (list, tuple):
        return holder[key] if type(key) is int and key < len(holder) else None
    return getattr(holder, "__dict__", {}).get(key, None)


def _read_back(holder, key, s) -> bool:
    """Is shadow ``s`` the lifted float read from ``holder``'s ``key`` itself?"""
    return type(s) is Scalar and s.source == "{x}" and any(
        holder.children.get((rel, key)) is s.node for rel in (ATTR, ITEM))


def _subscript_key(inputs) -> tuple:
    """The ``stores`` key of ``obj[key]`` written by STORE_SUBSCR (``value, obj, key``) or
    deleted by DELETE_SUBSCR (``obj, key``)."""
    obj, key = inputs[-2:]
    try:
        hash(key)
    except TypeError:
        key = None
    return id(obj), key


def _never(value) -> bool:
    return False


def _number_holder(f, ins, inputs, value) -> tuple | None:
    """``(object, relation, key)`` of what a number read reads: an attribute, a global, or a
    dict item under a string key (None for other subscripts).  The relation is None for an
    int dict item: it stays a guarded value, unless the call stored a size there itself
    (``d["n"] = b``, read back: :attr:`Shapes.stores`)."""
    if ins.opname == "LOAD_ATTR":
        return inputs[0], ATTR, ins.argval
    if ins.opname == "LOAD_GLOBAL":
        return f.globals, ITEM, ins.argval
    if ins.opname == "LOAD_DEREF":   # (a continuation's cell, RAdam's ``rho_t``; a closure's)
        return f.locals[ins.arg], CELL, None
    obj, key = inputs
    if type(obj) is not dict or type(key) is not str:
        return None
    return obj, ITEM if type(value) in (float, tuple) else None, key


class _Origin:
    """Where a symbol's value comes from: ``what`` ("size" or "stride") of dimension ``dim``
    of the input tensor ``holder``, or (``what`` None) the int whose RefGraph node is
    ``holder``.  ``value``: its SymInt.  (torch makes stride symbols of its own for the
    twins of non-contiguous inputs.)"""

    __slots__ = ("holder", "dim", "value", "what")

    def __init__(self, holder, dim, value, what="size"):
        self.holder, self.dim, self.value, self.what = holder, dim, value, what

    def load(self, name: str) -> str:
        """Source loading the value from the holder's variable ``name``."""
        return name if self.what is None else f"{name}.{self.what}({self.dim})"


class Shapes(Observer):
    """The symbolic sizes of one recording (see the module docstring)."""

    def __init__(self, lifting: Lifting, mode: bool | None, refgraph):
        self.lifting, self.mode, self.refgraph = lifting, mode, refgraph
        self.env = ShapeEnv(duck_shape=False)
        self.fake_mode = FakeTensorMode(shape_env=self.env)
        self.monitor = None
        self.fakes: dict[int, FakeTensor] = {}
        self._keep: list = []
        self.symbols: dict[sympy.Symbol, _Origin] = {}
        self.inputs: dict[int, tuple] = {}       # id(input tensor) -> (node, lifted dims, twin)
        self.reads: list = []                    # this instruction's size reads: (result, twin's)
        self.matched = False                     # the recorder took this instruction's shadows
        self.passed: dict[int, set[int]] = {}    # id(frame) -> symbolic shadows its calls bound
        self.cells: dict[int, tuple] = {}        # id(cell) -> (cell, its content, the content's shadow)
        self.scalars: dict[int, object] = {}     # node id -> node of a lifted float
        # node id of a tuple read from outside -> node ids of its lifted floats (the guard
        # checks the tuple's type and length, and its other items by value)
        self.tuples: dict[int, set[int]] = {}
        # node id of a lifted float -> {condition source over it ({x}): the outcome it had}
        # (``momentum != 0``: the guard requires the outcome, not the value)
        self.outcomes: dict[int, dict[str, bool]] = {}
        self.pinned: set[int] = set()            # of those, the ones guarded by value after all
        self.ints: dict[int, object] = {}        # node id -> node of a lifted int
        # (id(obj), name) -> (obj, value, SymInt) of a size the program stored into an object
        # from outside: the mock writes it from the new sizes.
        self.stores: dict[tuple, tuple] = {}
        self.lifted_shadows: dict[int, object] = {}   # node id -> shadow of a lifted attribute or global
        # id(list) -> (list, its items' shadows) of a list the call appended lifted values to
        # (``lrs.append(lr)``): a slot holding it with other shadows is out of date
        self.grown: dict[int, tuple] = {}
        # Outcomes of branches on floats computed from lifted ints: (IntFloat of the predicate
        # as a bool, the outcome), checked by the shape check after the ints' own conditions.
        self.float_outcomes: list[tuple[IntFloat, bool]] = []
        # id(frame) -> the if on lifted ints (dynamic.arms.Conditional) whose taken arm runs there
        self.ifs: dict[int, Conditional] = {}
        # id(float) -> the lifted float's or IntFloat shadow the run gave that float object:
        # the mock writing it as a constant guards it (constant_written).
        self.floats: dict[int, object] = {}
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
        return bool(self.symbols or self.scalars)

    def argument_shadows(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The shadows of the call's arguments (the RefGraph's roots): its lifted floats and ints."""
        positional = tuple(self._root_shadow(ARG, i, a) for i, a in enumerate(args))
        keywords = {k: self._root_shadow(KWARG, k, v) for k, v in kwargs.items()}
        return (positional, keywords) if self.scalars or self.ints else None

    def resumed(self, frames, values: tuple) -> None:
        """A continuation's frames, resumed on ``values`` (``Resume.values``: their locals
        and stacks in order, its arguments): the floats and ints lifted among them (their
        values changed between the point's continuations) get their shadows, and the frames
        run at the monitor's level (their callees return shadows to them).  Floats only: a
        continuation's guard does not check the conditions of int symbols (an int it returned,
        lifted, replayed the value of the continuation's recording: fuzz seed 2001305)."""
        shadows = iter([self._root_shadow(ARG, i, v) if type(v) is float else None
                        for i, v in enumerate(values)])
        for f in frames:
            f.shadow_locals = [next(shadows) for _ in f.locals]
            f.shadow_stack = [next(shadows) for _ in f.stack]
            self.levels[id(f)] = 0

    def _root_shadow(self, rel, key, value):
        sn = self.refgraph.sn0.children.get((rel, key))
        if type(value) not in (float, int) or sn is None or not self.lifting.scalar(self.mode, sn):
            return None
        if type(value) is int:
            return self._int_symbol(sn)
        self.scalars[sn.id] = sn
        scalar = Scalar(sn, self.pinned)
        self._remember(scalar)
        return scalar

    def _int_symbol(self, sn) -> SymInt | None:
        """A lifted int (an argument, or a counter read from program state: a scheduler's
        ``last_epoch``, a step count): a symbol backed by its value.  0 stays a constant (as
        torch specialises sizes); a value above 1 gets a size's symbol, from 2 up, and a
        negative one a symbol of the negative ints: a record serves the ints of one sign (the
        guard checks the range), where torch's reasoning about sizes holds for the positive.
        1 gets a symbol of the ints from 1 up: an int that counts (a loop index passed to a
        compiled step, a counter) has 1 for its second value, and the record it makes there
        serves every later step; where torch needs 1 told apart (broadcasting a size) it
        guards the symbol's value."""
        one = sn.value == 1
        if sn.value == 0:
            return None
        source = _source(f"int{len(self.symbols)}")
        negative = sn.value < 0
        sym = self.env.create_symbol(sn.value, source, dynamic_dim=DimDynamic.DYNAMIC,
                                     positive=None if negative or one else True,
                                     do_not_specialize_zero_one=one)
        if negative or one:
            self.env.constrain_symbol_range(sym, -int_oo if negative else 1, -1 if negative else int_oo)
        value = self.env.create_symintnode(sym, hint=sn.value, source=source)
        self.symbols[sym] = _Origin(sn, None, value, None)
        self.ints[sn.id] = sn
        return value

    def stored(self, holder, key):
        """The shadow (a SymInt, or a lifted float's ``Scalar``) of what the mock writes to
        attribute ``key`` of object ``holder``, item ``key`` of a dict or a list the call
        made, if the last write to it in the run stored a size or a lifted float's value
        (None: write the value as recorded)."""
        return self.stored_then(self.stores, holder, key, _held(holder, key))

    def stored_then(self, stores: dict, holder, key, held):
        """:meth:`stored` as of a moment of the run (a resume point, ``magpy.records.continuations``):
        ``stores`` a copy of :attr:`stores` taken then, ``held`` what ``holder`` held at ``key``
        then (a continuation writes the state of its point, not the run's last)."""
        entry = stores.get((id(holder), key))
        if entry is None or entry[0] is not holder:
            return None
        if held is not entry[1]:
            # Written again where the monitor did not see it: the record keeps the value.
            specialise(entry[2])
            return None
        return entry[2] if symbolic(entry[2]) else None

    def expression(self, s: SymInt) -> tuple[list[tuple], str]:
        """``s`` as Python source over its symbols, and the symbols' origins ``(name, origin)``
        (the mock loads each from its holder before using the source)."""
        expr = self.env.replace(s.node.expr)
        origins = [(str(sym), self.symbols[sym]) for sym in sorted(expr.free_symbols, key=str)]
        return origins, PythonPrinter().doprint(expr)

    def holder_node(self, origin):
        """The RefGraph node of a symbol's holder (an input tensor's, or the int's own)."""
        return origin.holder if origin.what is None else self.inputs[id(origin.holder)][0]

    def free_scalars(self) -> set[int]:
        """Node ids of the lifted floats and ints the guard does not check by value (the
        shape check holds what the record assumes of the ints), and of tuples holding such
        floats (:meth:`value_checks`)."""
        free = set(self.scalars) - self.pinned
        return free | {t for t, items in self.tuples.items() if items & free} | set(self.ints)

    def value_checks(self, node, name: str) -> list[str]:
        """What the guard checks of free node ``node`` (variable ``name``) besides its type: a
        tuple's length, the outcomes of a float's comparisons."""
        if node.id in self.tuples:
            return [f"len({name}) == {len(node.value)}"]
        return [f"({'' if held else 'not '}{source.format(x=name)})"
                for source, held in self.outcomes.get(node.id, {}).items()]

    # -- twins -----------------------------------------------------------------------------------
    def consider(self, t: torch.Tensor) -> None:
        """A tensor the recorder meets: an input whose dimensions are lifted gets its twin now."""
        if id(t) in self.fakes or id(t) in self.inputs:
            return
        sn = self.refgraph.node_of(t)
        if sn is None:
            return
        dims = self.lifting.dims(self.mode, sn, t)
        dims = frozenset(d for d in dims if t.shape[d] > 1)   # 0 and 1 stay specialised
        if not dims:
            self.inputs[id(t)] = (sn, dims, None)
            return
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                                                      for d in range(t.dim())])
        source = _source(f"in{len(self.inputs)}")
        fake = self.fake_mode.from_tensor(t, symbolic_context=ctx, source=source)
        for d in dims:
            self.symbols[fake.size(d).node.expr] = _Origin(t, d, fake.size(d))
        for d, s in enumerate(fake.stride()):
            if type(s) is SymInt and s.node.expr.is_Symbol and s.node.expr not in self.symbols:
                self.symbols[s.node.expr] = _Origin(t, d, s, "stride")
        self.inputs[id(t)] = (sn, dims, fake)
        self._bind(t, fake)

    def fake(self, t: torch.Tensor) -> FakeTensor:
        """``t``'s twin (a static one for a tensor made before any dimension was lifted)."""
        f = self.fakes.get(id(t))
        if f is None:
            self.consider(t)
            f = self.fakes.get(id(t))
        if f is None:
            f = self.fake_mode.from_tensor(t, static_shapes=True)
            self._bind(t, f)
        return f

    def _bind(self, t, fake) -> None:
        self.fakes[id(t)] = fake
        self._keep.append(t)

    def propagate(self, func, args, kwargs, out) -> None:
        """Run the operation on the twins: its results' twins."""
        def twin(a):
            if type(a) is Scalar or type(a) is IntFloat:
                return a.value
            return self.fake(a) if isinstance(a, torch.Tensor) else a
        fargs, fkwargs = pytree.tree_map(twin, (tuple(args), dict(kwargs)))
        try:
            # The Python dispatcher runs the decompositions that keep sizes symbolic (as under
            # torch.compile); some C++ kernels would read concrete sizes (F.pad, baddbmm).
            # The twins' run is magpy's own work: no torch function mode sees it (the
            # recorder's is active where magpy records an operation it ran itself, the
            # backward of ``magpy.training.backward``).
            with torch._C.DisableTorchFunction(), self.fake_mode, enable_python_dispatcher(), _quiet_fakes():
                r = func(*fargs, **fkwargs)
        except Exception as e:  # noqa: BLE001 - sizes torch cannot say symbolically (data-dependent)
            logs.logger("dynamic").info("every lifted size specialised: %s failed on symbolic sizes (%s: %s)",
                                        getattr(func, "__name__", func), type(e).__name__, str(e)[:200])
            self.specialise_all()
            r = None
        outs = pytree.tree_leaves(out)
        twins = pytree.tree_leaves(r) if r is not None else []
        for i, t in enumerate(outs):
            if not isinstance(t, torch.Tensor) or id(t) in self.inputs:
                continue
            f = twins[i] if len(twins) == len(outs) else None
            if not isinstance(f, FakeTensor) or f.dim() != t.dim() or f.dtype != t.dtype:
                self.fakes.pop(id(t), None)
                f = self.fake(t)
            self._bind(t, f)

    def row_twin(self, t: torch.Tensor, x: torch.Tensor) -> None:
        """``t`` is a row of ``x`` (a step of a loop over it, sliced where no operation was
        recorded): its twin is a row of ``x``'s twin."""
        with self.fake_mode:
            fake = self.fake(x)[0]
        self._bind(t, fake)

    def twin_like(self, t: torch.Tensor, like: torch.Tensor) -> None:
        """``t`` (a control flow operator's output, made where no operation was recorded) is of
        ``like``'s kind: its twin gets the sizes and strides of ``like``'s."""
        f = self.fake(like)
        with self.fake_mode:
            fake = torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=f.device)
        self._bind(t, fake)

    def stacked(self, t: torch.Tensor, over) -> None:
        """``t`` holds one row per step of a loop over the first dimension of tensor ``over``,
        or over ``range(over)``: its twin's first size is that of ``over``'s twin, or ``over``."""
        n = self.fake(over).shape[0] if isinstance(over, torch.Tensor) else over
        with self.fake_mode:
            fake = torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=t.device)
        self._bind(t, fake)

    def specialise_all(self) -> None:
        for origin in list(self.symbols.values()):
            specialise(origin.value)

    def read(self, func, args, out) -> None:
        """A metadata read (``x.shape``, ``x.size(0)``) of a tensor with symbolic sizes."""
        t = args[0] if args else None
        if not isinstance(t, torch.Tensor) or id(t) not in self.fakes:
            return
        try:
            r = func(self.fakes[id(t)], *args[1:])
        except Exception:  # noqa: BLE001
            self.specialise_all()
            return
        self.reads.append((out, r))

    def arguments(self, args, kwargs) -> tuple[tuple, dict] | None:
        """``args``/``kwargs`` of the operation being recorded with their sizes' SymInts, if the
        instruction calling it is the program's own (its input shadows are theirs)."""
        f = self.monitor.current if self.monitor is not None else None
        if f is None or not hasattr(f, "ins_shadows") or not any(map(symbolic, f.ins_shadows)):
            return None
        shadows = argument_shadows(f, args, kwargs)
        if shadows is None:
            return None
        self.matched = True
        pos, kw = shadows
        return (tuple(with_shadow(a, s) for a, s in zip(args, pos)),
                {k: with_shadow(v, kw.get(k)) for k, v in kwargs.items()})

    # -- observer --------------------------------------------------------------------------------
    def set_output(self, f, i, shadow) -> None:
        """Output ``i`` of the instruction just executed gets ``shadow`` (if it is symbolic)."""
        if symbolic(shadow):
            self._outputs[i] = shadow
            self._remember(shadow)

    def _remember(self, shadow) -> None:
        if type(shadow) is Scalar or type(shadow) is IntFloat:
            self.floats[id(shadow.value)] = shadow

    def constant_written(self, v) -> None:
        """The mock writes ``v`` as the constant it was (into program state, a return value,
        an eager step's argument): a float the run computed from lifted values, which reached
        it where its shadow did not follow (``log.append(sched.get_last_lr()[0])``), is
        guarded by value, so that the constant is right for every call the record serves."""
        if type(v) is tuple:
            for x in v:
                self.constant_written(x)
            return
        sh = self.float_shadow(v)
        if sh is not None:
            specialise(sh)

    def float_shadow(self, v):
        """The shadow of ``v``, a float the run lifted or computed from lifted values (None
        for anything else)."""
        sh = self.floats.get(id(v)) if type(v) is float else None
        return sh if sh is not None and sh.value is v else None

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
        if ins.opname in _READS and type(outputs[-1]) in _READ_TYPES:
            self._number_read(f, ins, inputs, outputs[-1])
        elif ins.opname in ("STORE_ATTR", "DELETE_ATTR") and self.stores:
            self.stores.pop((id(inputs[-1]), ins.argval), None)   # (the rule may record it again)
        elif ins.opname in ("STORE_SUBSCR", "DELETE_SUBSCR") and self.stores:
            self.stores.pop(_subscript_key(inputs), None)
        elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") and self.stores:
            self.stores.pop((id(f.globals), ins.argval), None)
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

    def _number_read(self, f, ins, inputs, value) -> None:
        """``obj.name``, a global or ``d[key]`` of a dict read a number: one this call stored
        from sizes gets its SymInt back; one from outside the call (a RefGraph node) that
        changed between recordings is lifted (a float's shadow, or an int's symbol).  An
        optimizer's ``group["lr"]`` is such a dict item: under an LR scheduler it changes."""
        where = _number_holder(f, ins, inputs, value)
        if where is None:
            return
        obj, rel, name = where
        stored = self.stores.get((id(obj), name))
        if stored is None and (twin := namespace_twin(obj)) is not None:
            stored = self.stores.get((id(twin), name))   # (``MOD.N = b`` read as the global N)
        if stored is not None and stored[1] is value:
            f.shadow_stack[-1] = stored[2]
            return
        if type(value) is tuple and self.stores and self._stored_tuple(f, value):
            return
        if rel is None:
            return
        parent = self.refgraph.node_of(obj) if self.lifting.values else None
        sn = parent.children.get((rel, name)) if parent is not None else None
        if sn is None and parent is not None and rel == ATTR and isinstance(obj, type):
            sn = parent.children.get((DICT, name))   # (a class attribute: read from its dict)
        if sn is None or sn.value is not value or self.mode is not None or not sn.read:
            return   # (dynamic=True lifts the arguments only, as torch.compile does)
        if self.refgraph.overwritten(parent, rel, name):
            return   # the call's own value, though the object is the one it found (a small int)
        if type(value) is tuple:
            self._tuple_read(f, sn)
            return
        shadow = self.lifted_shadows.get(sn.id)
        if shadow is None and self.lifting.scalar(None, sn):
            if type(value) is float:
                self.scalars[sn.id] = sn
                shadow = Scalar(sn, self.pinned)
            else:
                shadow = self._int_symbol(sn)
            self.lifted_shadows[sn.id] = shadow
        if shadow is not None:
            f.shadow_stack[-1] = shadow
            self._remember(shadow)

    def _stored_tuple(self, f, value) -> bool:
        """A tuple the call stored with lifted items (:meth:`stored`), read back: its items'
        shadows."""
        entries = [self.stores.get((id(value), i)) for i in range(len(value))]
        if not any(e is not None and e[0] is value for e in entries):
            return False
        f.shadow_stack[-1] = Items(e[2] if e is not None and e[0] is value else None for e in entries)
        return True

    def _tuple_read(self, f, sn) -> None:
        """A tuple from outside the call (node ``sn``) whose floats changed between recordings
        (an optimizer's ``group["betas"]``, which OneCycleLR moves every step): those floats
        are lifted, each a node of its own; the guard checks the tuple's type and length and
        its other items by value (:meth:`value_checks`)."""
        shadow = self.lifted_shadows.get(sn.id)
        if shadow is None:
            lifted = [self.lifting.item(sn, i) for i in range(len(sn.value))]
            if not any(lifted):
                return
            items, free = [], set()
            for i, (x, lift) in enumerate(zip(sn.value, lifted)):
                child = self.refgraph.child(sn, ITEM, i, x)
                items.append(Scalar(child, self.pinned) if lift else None)
                if lift:
                    self.scalars[child.id] = child
                    free.add(child.id)
            self.tuples[sn.id] = free
            shadow = self.lifted_shadows[sn.id] = Items(items)
        f.shadow_stack[-1] = shadow
        for s in shadow:
            self._remember(s)

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

    def called(self, f, inputs, outputs, in_sh) -> bool:
        """A call with symbolic arguments: a tensor operation took them (the recorder matched
        this instruction), a Python function received them, or a native computes an int."""
        if self._matched:
            return True
        if id(f) in self.passed:
            return self.passed_on(f)
        callee, args = bytecode.call_operands(inputs)
        if any(callee is f for f in TYPE_READERS):
            return True   # they look at the type only
        if outputs and passes_through(callee, args, outputs[0]):
            self.set_output(f, 0, in_sh[-1])
            return True
        got = dict_get(callee, args, in_sh[bytecode.call_layout(inputs)[0]], in_sh)
        if got is not False:
            self.set_output(f, 0, got)
            return True
        if callee is zip:
            walk = zip_walk(args, in_sh[len(in_sh) - len(args):])
            if walk is not None:
                self.set_output(f, 0, walk)
            return walk is not None
        stop = _range_end(callee, in_sh[len(in_sh) - len(args):])
        if stop is not None:
            self.set_output(f, 0, Span(stop))   # (a for loop over it may take it whole)
            return True
        lst = list_append(callee, args)
        if lst is not None:
            return self._appended(f, lst, in_sh[bytecode.call_layout(inputs)[0]], in_sh[-1])
        out = outputs[0] if outputs else None
        floats = type(out) is float or any(type(a) is float for a in args)   # (max(0, 0.0) is 0)
        if floats and any(type(s) in (IntFloat, SymInt, Scalar) for s in in_sh):
            return self._float_call(f, callee, args, in_sh[len(in_sh) - len(args):], out)
        fn = next((v for k, v in NATIVE_INT if k is callee), None)
        if fn is not None and all(type(a) is int for a in args):
            try:
                # (torch.sym_max is a torch function: the operation recorder must not see it)
                with torch._C.DisableTorchFunction():
                    r = int_result(out, fn(*(value_of(a, s) for a, s in zip(args, in_sh[-len(args):]))))
            except Exception:  # noqa: BLE001
                r = None
            if r is not None:
                self.set_output(f, 0, r)
                return True
            return False
        if any(callee is c for c in NATIVE_SEQ) and len(args) == 1:
            items = items_of(args[0], in_sh[-1])
            if items is not None and isinstance(out, (tuple, list)) and len(items) == len(out):
                self.set_output(f, 0, Items(items))
                return True
        if callee is len and len(args) == 1 and items_of(args[0], in_sh[-1]) is not None:
            return True   # the length of a sequence of sizes is no size
        return False

    def _appended(self, f, lst, lst_shadow, added) -> bool:
        """``lst.append(x)`` (a schedule's ``lrs.append(lr)``): the list's item shadows, the
        slots of this frame that hold it and the :attr:`grown` list registry get ``x``'s.  Floats
        only: where the list reaches the mock without its item shadows, :meth:`constant_written`
        guards a float it writes as a constant, but cannot find an int (one object per value:
        ``hist.append(x.shape[0])`` wrote the recording's size on every call)."""
        if type(added) not in (Scalar, IntFloat):
            return False
        before = items_of(lst[:-1], lst_shadow)
        if before is None:
            return False
        items = Items(before + (added,))
        for slots, shadows in ((f.locals, f.shadow_locals), (f.stack, f.shadow_stack)):
            for i, v in enumerate(slots):
                if v is lst:
                    shadows[i] = items
        self.grown[id(lst)] = (lst, items)
        self._remember(added)
        return True

    def _out_of_date(self, inputs, in_sh) -> None:
        """An instruction takes a list the call appended lifted values to through a slot
        that does not hold its items' shadows (one that held the list before it grew, in
        another frame, or an object's attribute): those values are guarded instead."""
        for v, sh in zip(inputs, in_sh):
            entry = self.grown.get(id(v)) if type(v) is list else None
            if entry is not None and entry[0] is v and sh is not entry[1]:
                del self.grown[id(v)]
                specialise(entry[1])

    def _float_call(self, f, callee, args, shadows, out) -> bool:
        """``float(step)``, ``max(0.0, progress)``, ``math.cos(x)`` of floats computed from
        lifted ints (or of the ints): the mock computes the call again (``IntFloat``)."""
        name, types = next(((n, ts) for k, n, ts in NATIVE_FLOAT if k is callee), (None, ()))
        if name in ("max", "min") and len(args) == 2 and not all(type(a) is float for a in args):
            return self._choice(f, name, args, shadows, out)
        if len(args) not in FLOAT_ARITY.get(name, (1,)) or not all(type(a) in types for a in args):
            return False
        parts = float_parts(args, shadows, self.eager_value)
        if parts is None:
            return False
        # (cos and sin of an infinity raise, sqrt of a negative number: RAdam's rectification)
        if name == "MATH.sqrt" and (type(parts[0]) is str or not self.nonnegative(parts[0])):
            return False
        if name.startswith("MATH.") and not self._outcome(int_float(parts, "MATH.isfinite({})", True), True):
            return False
        self.set_output(f, 0, int_float(parts, f"{name}({', '.join(['{}'] * len(parts))})", out))
        return True

    def _choice(self, f, name, args, shadows, out) -> bool:
        """``max(0, factor)`` of an int and a float: which one it gives decides the result's
        type, so the guard keeps the choice (``factor > 0``: max takes the second where it is
        greater, min where it is less) and the result is the one chosen."""
        second = out is args[1] and out is not args[0]
        if not self.float_condition(shadows[::-1], args[::-1], ">" if name == "max" else "<", second):
            return False
        self.set_output(f, 0, shadows[1] if second else shadows[0])
        return True

    def float_condition(self, shadows, values, symbol: str, outcome) -> bool:
        """A comparison ``symbol`` of ``values`` (shadows ``shadows``), one a float computed
        from lifted ints, gave ``outcome``: the guard requires that outcome (the predicate
        over the ints), not the ints' values.  False where it cannot be said so."""
        if type(outcome) is not bool:
            return False
        parts = float_parts(values, shadows, self.eager_value)
        if parts is None:
            return False
        return self._outcome(int_float(parts, f"({{}} {symbol} {{}})", outcome), outcome)

    def nonzero(self, divisor) -> bool:
        """A float's divisor computed from lifted ints (CosineAnnealingLR's ``1 + cos(...)``),
        or a lifted int: the guard requires it nonzero (the mock never divides by zero)."""
        return self._against_zero(divisor, operator.ne, "!=")

    def nonnegative(self, base) -> bool:
        """A root's base computed from lifted values (RAdam's ``bias_correction2 ** 0.5``), or
        a lifted int: the guard requires it nonnegative (the mock takes no complex root)."""
        return self._against_zero(base, operator.ge, ">=")

    def _against_zero(self, part, compare, symbol: str) -> bool:
        """Does ``compare(part, 0)`` hold (``symbol`` its source)?  If so the guard requires it."""
        if type(part) is SymInt:
            return bool(compare(part, 0))   # (guards the outcome)
        return compare(part.value, 0) and self._outcome(int_float((part,), f"({{}} {symbol} 0)", True), True)

    def _outcome(self, predicate: IntFloat, held: bool) -> bool:
        """The guard requires ``predicate`` to be ``held``: over lifted ints, in the shape
        check; over one lifted float (SGD's ``momentum != 0``, ReduceLROnPlateau's ``old_lr -
        new_lr > eps``), among that float's checks (:meth:`value_checks`).  False where it
        is over several, or ints and floats (no one check loads them all)."""
        if of_ints(predicate):
            self.float_outcomes.append((predicate, held))
            return True
        nodes = {s.node.id if type(s) is Scalar else None for s in predicate.ints}
        if len(nodes) != 1 or None in nodes:
            return False
        source = predicate.render(lambda s: f"({s.source})")   # (over ``{x}``, the float)
        self.outcomes.setdefault(nodes.pop(), {})[source] = held
        return True

    def conditional(self, f, values, shadows, symbol: str, outcome, cond) -> bool:
        """A comparison ``symbol`` of lifted ints ``values`` (shadows ``shadows``; ``cond``:
        the SymBool) gave ``outcome``, and a conditional jump takes it: if both arms only
        compute floats (``magpy.graphs.dynamic.arms``), the record keeps both and guards neither
        outcome; the slots they set get the conditional shadow where the taken arm ends.
        False (the caller guards the outcome) where it does not apply."""
        if type(outcome) is not bool or id(f) in self.ifs or not hasattr(f, "info"):
            return False
        parts = float_parts(values, shadows, self.eager_value)
        found = evaluate_arms(f, f.pc, outcome, self.eager_value) if parts is not None else None
        if found is None:
            return False
        end, results, loaded = found
        for name, value in loaded.items():
            self.refgraph.read_builtin(f.globals, f.builtins, name, value)
        self.ifs[id(f)] = Conditional(f, end, results, (parts, symbol), lambda: bool(cond))
        return True

    def _arrived(self, pending) -> None:
        """The taken arm of a conditional ends: the slots the arms set get their shadows."""
        del self.ifs[id(pending.frame)]
        shadows = pending.arrived()
        if shadows is None:
            pending.fallback()
            return
        f = pending.frame
        for slot, sh in shadows:
            if slot is None:
                f.shadow_stack[-1] = sh
            else:
                f.shadow_locals[slot] = sh
            self._remember(sh)

    def _abandon(self) -> None:
        """Conditionals whose taken arm did not end (an exception, the end of the run): their
        outcomes are guarded."""
        pending, self.ifs = self.ifs, {}
        for c in pending.values():
            c.fallback()

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

    def size_node(self, s: SymInt, recorder):
        """An argument of the recorder's graph computing SymInt ``s`` from the input tensors'
        sizes and the lifted int arguments; a plain int, guarded, where the expression has no
        fx form."""
        graph = recorder.graph

        def leaf(sym):
            o = self.symbols[sym]
            if o.what is None:
                return recorder.int_input(o.holder, o.value)
            return graph.call_method(o.what, (recorder.tensor_node(o.holder), o.dim))
        node = sym_fx(self.env.replace(s.node.expr), leaf, graph.call_function)
        return int(s) if node is None else node

    def finish(self, graphs) -> None:
        """End of the run.  Sizes read since the last instruction, by nobody the monitor saw,
        are specialised.  Then a last net under the shadows of lifted floats: a float constant
        of the graphs (``graphs``: fx Graphs) equal to a lifted float may be one whose shadow got
        lost on the way, so that float is guarded by value (at worst, a record less general
        than it could be).  (Not for sizes: equal small ints of other origins are common, and
        the twins already check every size an operation meets against its inputs' symbols.)"""
        self._abandon()
        for _, r in self.reads:
            specialise(of_read(r))
        self.reads = []
        for (_, name), (obj, value, s) in self.stores.items():
            # A size stored where the object held that very value already is no change the
            # mock writes: the record keeps the value instead (a lifted float put back where
            # it was read needs nothing).  A list the call made has no snapshot: all new.
            holder = self.refgraph.node_of(obj)
            snapshot = getattr(holder, "snapshot", None)
            if type(obj) in (list, tuple) and holder is None:
                continue
            if holder is not None and is_namespace(obj):
                continue   # (a function's, class's or module's: MockWriter.attributes_update)
            unchanged = isinstance(snapshot, dict) and snapshot.get(name) is value
            if not isinstance(snapshot, dict) or unchanged and not _read_back(holder, name, s):
                specialise(s)
        floats = {sn.value: sn.id for nid, sn in self.scalars.items() if nid not in self.pinned}
        for graph in graphs if floats else ():
            for node in graph.nodes:
                for a in pytree.tree_leaves((node.args, node.kwargs)):
                    if type(a) is float and a in floats:
                        self.pinned.add(floats.pop(a))

    # -- the record's side -----------------------------------------------------------------------
    def sizes_and_strides(self, t: torch.Tensor) -> tuple[list, list]:
        """What the tensor guard fixes of input ``t``: sizes and strides, None where symbolic."""
        entry = self.inputs.get(id(t))
        if entry is None or entry[2] is None:
            return list(t.size()), list(t.stride())
        fake = entry[2]
        return ([None if self._free(s) else int(t.size(d)) for d, s in enumerate(fake.size())],
                [None if self._free(s) else int(t.stride(d)) for d, s in enumerate(fake.stride())])

    def size_words(self, t: torch.Tensor) -> list:
        """``t``'s sizes for people: a lifted one by its symbol (``[s0, 16]``)."""
        entry = self.inputs.get(id(t))
        if entry is None or entry[2] is None:
            return list(t.shape)
        return [str(self.env.replace(s.node.expr)) if self._free(s) else int(t.size(d))
                for d, s in enumerate(entry[2].size())]

    def lifted_sizes(self, t: torch.Tensor) -> bool:
        """Has tensor ``t`` a symbolic size: an input's lifted dimension, or a result's made from
        one (by its twin)?"""
        f = self.fakes.get(id(t))
        return f is not None and any(map(self._free, f.shape))

    def _free(self, s) -> bool:
        return type(s) is SymInt and bool(self.env.replace(s.node.expr).free_symbols)

    def holders(self) -> list:
        """What the shape check loads its symbols from (its parameters): input tensors with
        lifted sizes, and the RefGraph nodes of lifted int arguments."""
        out = {}
        for o in self.symbols.values():
            out.setdefault(id(o.holder), o.holder)
        return list(out.values())

    def conditions(self, names: dict[int, str]) -> tuple[list[str], list[str]]:
        """``(loads, conditions)`` of the shape check, as Python source: each symbol loaded
        from its tensor (``names``: id(tensor) -> its name), then the symbols' ranges, the
        guards the ShapeEnv collected (relations, outcomes, specialisations) and the strides
        that are expressions of the sizes."""
        loads, conds = [], []
        printer = PythonPrinter()
        for sym, o in self.symbols.items():
            loads.append(f"{sym} = {o.load(names[id(o.holder)])}")
            vr = self.env.var_to_range.get(sym)
            if vr is not None:
                conds += [f"{sym} {op} {int(bound)}" for op, bound in ((">=", vr.lower), ("<=", vr.upper))
                          if bound.is_Integer]
        conds += [f"({printer.doprint(g.expr)})" for g in self.env.guards]
        conds += [f"({'' if held else 'not '}{c.render(self._int_source)})"
                  for c, held in self.float_outcomes]
        for tid, (sn, dims, fake) in self.inputs.items():
            if fake is None or tid not in names:
                continue
            for d, s in enumerate(fake.stride()):
                if type(s) is SymInt and not s.node.expr.is_number:
                    conds.append(f"{names[tid]}.stride({d}) == {printer.doprint(s.node.expr)}")
        return loads, conds

    def _int_source(self, s: SymInt) -> str:
        """SymInt ``s`` as Python source over the symbols (the shape check's names)."""
        return PythonPrinter().doprint(self.env.replace(s.node.expr))

    def describe(self, words) -> list[str]:
        """The lifted dimensions and what the record assumes of them, in words (explain);
        ``words(node)`` names an input."""
        out = []
        for sym, o in self.symbols.items():
            expr = self.env.replace(sym)
            state = f"dynamic, {sym}" if expr.free_symbols else f"specialised to {expr}"
            if o.what is None:
                where = f"{words(o.holder)} (int)"
            else:
                where = f"{words(self.inputs[id(o.holder)][0])}.{o.what}({o.dim})"
            out.append(f"{where}: {state}")
        for nid, sn in self.scalars.items():
            state = "guarded by value (used in Python)" if nid in self.pinned else "a graph input"
            out.append(f"{words(sn)} (float): {state}")
        if not self.symbols:
            return out
        loads, conds = self.conditions({id(t): f"t{i}" for i, t in enumerate(self.holders())})
        out.append(f"conditions: {' and '.join(conds) or 'none'}")
        return out


class _ForkReads(Observer):
    """In a fork, the reads that give a lifted number its shadow: a closure cell's content,
    an attribute, a global, a dict item (:meth:`Shapes._number_read`).  A fork's tensor
    operations then take the number as the graph input it is, and a use in Python stops the
    fork (magpy.graphs.controlflow) but a move or a call of a Python function that takes it as a
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
        elif ins.opname in _READS and type(outputs[-1]) in _READ_TYPES:
            shapes._number_read(f, ins, inputs, outputs[-1])
        shapes.passed.pop(id(f), None)   # (the fork's observers saw the call: see passed_on)


def _range_end(callee, shadows: tuple) -> SymInt | None:
    """The end of ``range(*args)`` (``shadows``: its arguments') if it is symbolic and its
    start and step are not."""
    if callee is not range or not 0 < len(shadows) < 4:
        return None
    at = 0 if len(shadows) == 1 else 1
    stop, others = shadows[at], shadows[:at] + shadows[at + 1:]
    return stop if type(stop) is SymInt and not any(map(symbolic, others)) else None


def sym_fx(expr, leaf, call):
    """fx arguments computing sympy ``expr`` (None where it has no fx form): ``leaf(symbol)``
    gives a symbol's node, ``call(op, args)`` adds an operation."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return leaf(expr)
    op = _SYMPY_OPS.get(type(expr))
    if op is None or type(expr) is sympy.Pow and not (expr.exp.is_Integer and expr.exp > 0):
        return None
    args = [sym_fx(a, leaf, call) for a in expr.args]
    if any(a is None for a in args):
        return None
    node = args[0]
    for a in args[1:]:
        node = call(op, (node, a))
    return node


_SYMPY_OPS = {sympy.Add: operator.add, sympy.Mul: operator.mul, FloorDiv: operator.floordiv,
              CleanDiv: operator.floordiv, Mod: operator.mod, PythonMod: operator.mod,
              sympy.Pow: operator.pow, Max: torch.sym_max, Min: torch.sym_min}


def _source(name: str):
    """A symbol's source for the ShapeEnv (it names the symbol's origin in torch's messages)."""
    from torch._dynamo.source import ConstantSource  # (importing torch._dynamo takes a second)
    return ConstantSource(name)


@contextlib.contextmanager
def _quiet_fakes():
    # FakeTensor logs a meta function's failure with its traceback at ERROR level; here that
    # failure is expected (magpy specialises the sizes instead), not the user's concern.
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    saved = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(saved)


class _OutputShadows:
    """The output shadow slots of the instruction just executed."""

    def __init__(self, f, n):
        self.f, self.n = f, n

    def __setitem__(self, i, shadow):
        if self.n == 0:
            self.f.ret_shadow = shadow
        else:
            self.f.shadow_stack[len(self.f.shadow_stack) - self.n + i] = shadow


