"""Dynamic shapes and scalars (paper §6.1, §6.2.1): a tensor dimension, an int argument or a
float that keeps changing becomes a symbol or a graph input of one record, instead of one
record per value.

*Which* is :class:`Lifting`'s choice, the callable's memory of the sizes and numbers its
recordings met at each input (by its path from the call's arguments or from outside): one
seen with ``config.dynamic_after`` (2) distinct values is lifted from then on
(``magpy.config.dynamic``: None, the default; True lifts the dimensions of every tensor
argument and every int and float argument from the first call; False never lifts).  Int
arguments become symbols like sizes; a float becomes a 0-d tensor input where it is only an
operand of float tensor arithmetic, else it is *pinned* (guarded by value).

*How*: a recording that lifts runs :class:`Shapes` beside the operator recorder.  Every
tensor the graphs see gets a fake twin (``FakeTensorMode`` with a ``ShapeEnv``): inputs get a
symbol for each lifted dimension, operation results get what the operation gives on the
twins.  The Python ints the program computes from sizes carry their symbolic value as the
*shadow* of their slot, which the monitor moves along with the value; so provenance never
depends on ``id()`` (``b = x.size(0)`` and a literal ``4`` are the same object):

=======================================  ================================================
the program ...                           the shadow ...
=======================================  ================================================
reads ``x.shape``, ``x.size(d)``,         is the twin's SymInt (a sequence's shadow is an
``len(x)``, ``x.numel()``                 ``Items`` of its items' shadows)
computes ``b * 4``, ``d // h``, ``-b``,   is the same computation on SymInts
``max(b, 1)``, ``(b, t, -1)``, ``s[1:]``
unpacks, stores, passes it to a Python    moves with it (monitor)
function, returns it to its caller
passes it to a tensor operation           becomes SymInt arithmetic in the graph (opgraph)
compares it, branches on it               the outcome is guarded (``s0 > 8``), not the value
does anything else with it (a store into  is *specialised*: the guard requires the value it
program state, a native call, a format,   has now (``Eq(s0, 6)``), as if it were not lifted
``range(b)``, the call's result)
=======================================  ================================================

Sizes the program reads where the monitor does not see the value land (inside native code)
are specialised too: an int of unknown origin never holds a lifted size unguarded.  The
record's guard checks its tensors without the lifted sizes and its lifted numbers by type,
then ``SHAPES`` (``codegen.guard.write_shape_check`` from :meth:`Shapes.conditions`: the
symbols' ranges, the relations torch and the program assumed, the specialisations).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import math
import operator

import sympy
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils import _pytree as pytree
from torch.utils._sympy.functions import CleanDiv, FloorDiv, Max, Min, Mod, PythonMod
from torch.utils._sympy.printers import PythonPrinter

from magpy import logs
from magpy.config import config
from magpy.monitor import Observer, operators
from magpy.monitor.observer import Entries, Items
from magpy.refgraph.graph import ARG, ATTR, KWARG

SymInt = torch.SymInt


# ----------------------------------------------------------------------------- which dimensions

class Lifting:
    """What one compiled callable's recordings saw of its inputs' sizes and float arguments
    (by path), and so what the next recording lifts: a dimension or float seen with
    ``config.dynamic_after`` distinct values (2 by default: at its second)."""

    def __init__(self):
        self.sizes: dict[tuple, list[set[int]]] = {}   # tensor input path -> per dimension, sizes recorded
        self.values: dict[tuple, set] = {}              # float or int path -> values recorded

    def armed(self, mode: bool | None) -> bool:
        """Could a recording lift anything?  (Else it runs without :class:`Shapes`.)"""
        return mode is True or (mode is None and bool(self.sizes or self.values))

    def scalar(self, mode: bool | None, sn) -> bool:
        """Is the float or int of node ``sn`` lifted (a graph input, not a guarded value)?"""
        if mode is not None:
            return mode
        seen = self.values.get(input_key(sn), ())
        return len({*seen, _value_key(sn.value)}) >= config.dynamic_after

    def dims(self, mode: bool | None, sn, t: torch.Tensor) -> frozenset[int]:
        """The dimensions of input tensor ``t`` (RefGraph node ``sn``) to lift."""
        if mode is False or t.dim() == 0:
            return frozenset()
        key = input_key(sn)
        if mode is True:
            lift = key[0][0] in (ARG, KWARG) and not isinstance(t, torch.nn.Parameter)
            return frozenset(range(t.dim())) if lift else frozenset()
        seen = self.sizes.get(key)
        if seen is None or len(seen) != t.dim():
            return frozenset()
        after = config.dynamic_after
        return frozenset(d for d, sizes in enumerate(seen) if len(sizes | {t.shape[d]}) >= after)

    def saw(self, inputs) -> None:
        """A recording's input tensors and float arguments (RefGraph nodes): remember their
        sizes and values."""
        for sn in inputs:
            key = input_key(sn)
            if type(sn.value) in (float, int):
                self.values.setdefault(key, set()).add(_value_key(sn.value))
                continue
            seen = self.sizes.get(key)
            if seen is None or len(seen) != sn.value.dim():   # (a new rank starts afresh)
                seen = self.sizes[key] = [set() for _ in range(sn.value.dim())]
            for sizes, n in zip(seen, sn.value.shape):
                if len(sizes) < _REMEMBERED:
                    sizes.add(n)


_REMEMBERED = 64   # distinct sizes kept per dimension (enough to count up to any sane threshold)


def _value_key(v):
    """Tells values apart as the guard does: an int from a float, -0.0 from 0.0, every NaN alike."""
    if type(v) is int:
        return ("int", v)
    return "nan" if v != v else (v, math.copysign(1, v))


def input_key(sn) -> tuple:
    """Where input node ``sn`` lives: its path of ``(relation, key)`` steps from the call."""
    steps = []
    while sn is not None and sn.parent is not None:
        key = sn.key
        try:
            hash(key)
        except TypeError:
            key = repr(key)
        steps.append((sn.rel, key))
        sn = sn.parent
    return tuple(reversed(steps)) or (("?", None),)


# ----------------------------------------------------------------------------- shadows

class Scalar:
    """The shadow of a lifted float argument: its RefGraph node.  ``pinned`` (shared by one
    recording) holds the nodes the program used other than as a tensor operation's operand:
    those are guarded by value after all."""

    __slots__ = ("node", "pinned")

    def __init__(self, node, pinned: set):
        self.node, self.pinned = node, pinned

    def __repr__(self):
        return f"<lifted float {self.node.value!r}>"


def symbolic(sh) -> bool:
    """Does shadow ``sh`` hold a symbolic size (an unspecialised SymInt, or items with one)?"""
    t = type(sh)
    if t is SymInt:
        return not sh.node.expr.is_number and bool(sh.node.shape_env.replace(sh.node.expr).free_symbols)
    if t is Items:
        return any(map(symbolic, sh))
    if t is Entries:
        return any(map(symbolic, sh.values()))
    if t is slice:
        return symbolic(sh.start) or symbolic(sh.stop) or symbolic(sh.step)
    if t is Scalar:
        return sh.node.id not in sh.pinned
    return False


def specialise(sh) -> None:
    """Make the guard require the values shadow ``sh`` holds now."""
    t = type(sh)
    if t is SymInt:
        int(sh)   # the ShapeEnv records Eq(expr, value) and replaces the expression from now on
    elif t is Items:
        for x in sh:
            specialise(x)
    elif t is Entries:
        for x in sh.values():
            specialise(x)
    elif t is slice:
        for x in (sh.start, sh.stop, sh.step):
            specialise(x)
    elif t is Scalar:
        sh.pinned.add(sh.node.id)


def with_shadow(value, sh):
    """``value`` with its ints replaced by the SymInts shadow ``sh`` holds for them."""
    if sh is None:
        return value
    t = type(sh)
    if t is SymInt:
        return sh if type(value) is int and sh.node.hint == value else value
    if t is Scalar:
        return sh if value is sh.node.value else value
    if t is Items and isinstance(value, (tuple, list)):
        if len(value) != len(sh):   # out of date: what it held is guarded instead
            specialise(sh)
            return value
        items = [with_shadow(v, s) for v, s in zip(value, sh)]
        return items if type(value) is list else tuple(items)
    if t is slice and type(value) is slice:
        return slice(with_shadow(value.start, sh.start), with_shadow(value.stop, sh.stop),
                     with_shadow(value.step, sh.step))
    return value


def _value(v, sh):
    return sh if type(sh) is SymInt else v


def _items(v, sh):
    """The item shadows of sequence ``v`` (shadow ``sh``), or None if they are not known."""
    if type(sh) is Items:
        if len(sh) == len(v):
            return tuple(sh)
        specialise(sh)   # out of date: what it held is guarded instead
        return None
    if sh is None and type(v) in (tuple, list, torch.Size):
        return (None,) * len(v)
    return None


# ----------------------------------------------------------------------------- instruction rules
# rule(shapes, frame, instruction, inputs, outputs, input shadows) -> True if it handled the
# symbolic shadows among the inputs (setting output shadows), False to specialise them.

def _int_result(out, r):
    """``r``, the symbolic twin of int ``out``, if it is one."""
    if type(out) is int and type(r) is SymInt and r.node.hint == out:
        return r
    return None


def _binary(sh, f, ins, inputs, outputs, in_sh):
    a, b = inputs
    out = outputs[0]
    if type(a) in (int, SymInt) and type(b) is int or type(a) is int and type(b) is int:
        op = operators.BINARY[ins.arg % len(operators.BINARY)][3]
        r = _int_result(out, op(_value(a, in_sh[0]), _value(b, in_sh[1])))
        if r is None:
            return False
        sh.set_output(f, 0, r)
        return True
    if ins.arg % len(operators.BINARY) == 0 and isinstance(out, (tuple, list)):   # s[:-1] + (h, d)
        left, right = _items(a, in_sh[0]), _items(b, in_sh[1])
        if left is None or right is None or len(left) + len(right) != len(out):
            return False
        sh.set_output(f, 0, Items(left + right))
        return True
    return False


def _compare(sh, f, ins, inputs, outputs, in_sh):
    a, b = inputs
    if not (type(a) is int and type(b) is int):
        return False
    bool(operators.COMPARE_OPS[ins.arg](_value(a, in_sh[0]), _value(b, in_sh[1])))   # guards the outcome
    return True


def _unary(op):
    def rule(sh, f, ins, inputs, outputs, in_sh):
        if type(inputs[0]) is not int:
            return False
        r = _int_result(outputs[0], op(in_sh[0]))
        if r is None:
            return False
        sh.set_output(f, 0, r)
        return True
    return rule


def _truth(sh, f, ins, inputs, outputs, in_sh):
    # ``if b:`` on a size: the guard keeps the outcome (b != 0), not the value.
    if type(inputs[0]) is not int:
        return False
    bool(in_sh[0])
    return True


def _subscript(sh, f, ins, inputs, outputs, in_sh):
    seq, index = inputs
    items = _items(seq, in_sh[0])
    if items is None or symbolic(in_sh[1]) or type(index) not in (int, slice):
        return False
    sh.set_output(f, 0, Items(items[index]) if type(index) is slice else items[index])
    return True


def _unpack(sh, f, ins, inputs, outputs, in_sh):
    items = _items(inputs[0], in_sh[0])
    if items is None or len(items) != len(outputs):
        return False
    for i, s in enumerate(reversed(items)):
        sh.set_output(f, i, s)
    return True


def _build(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, Items(in_sh))
    return True


def _append(sh, f, ins, inputs, outputs, in_sh):
    # LIST_APPEND / LIST_EXTEND: inputs are (list, ..., added); the list stays (output 0).
    lst = inputs[0]
    added = (in_sh[-1],) if ins.opname == "LIST_APPEND" else _items(inputs[-1], in_sh[-1])
    if added is None:
        return False
    before = _items(lst[:len(lst) - len(added)], in_sh[0])
    if before is None:
        return False
    sh.set_output(f, 0, Items(before + added))
    return True


def _to_tuple(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, in_sh[0])
    return True


def _slice(sh, f, ins, inputs, outputs, in_sh):
    sh.set_output(f, 0, slice(*in_sh) if len(in_sh) == 3 else slice(in_sh[0], in_sh[1]))
    return True


def _dict_merge(sh, f, ins, inputs, outputs, in_sh):
    # ``f(**kwargs)`` builds the dict it passes by merging: keep the values' shadows.
    before, added = in_sh[0], in_sh[-1]
    if any(s is not None and type(s) is not Entries for s in (before, added)):
        return False
    merged = inputs[-1]
    entries = {k: s for k, s in (before or {}).items() if k not in merged}
    sh.set_output(f, 0, Entries({**entries, **(added or {})}))
    return True


def _const_key_map(sh, f, ins, inputs, outputs, in_sh):
    # ``f(a=b, **kw)`` builds its keyword dict from constant keys: keep the values' shadows.
    sh.set_output(f, 0, Entries({k: s for k, s in zip(inputs[-1], in_sh[:-1]) if s is not None}))
    return True


def _build_map(sh, f, ins, inputs, outputs, in_sh):
    keys = inputs[0::2]
    if not all(type(k) is str for k in keys):
        return False
    sh.set_output(f, 0, Entries({k: s for k, s in zip(keys, in_sh[1::2]) if s is not None}))
    return True


def _store_attr(sh, f, ins, inputs, outputs, in_sh):
    # ``obj.n = b`` (``self.cumulative_length += t``) on an object from outside the call: the
    # mock writes the value from the new sizes instead of guarding it.
    value, obj = inputs
    s = in_sh[0]
    node = sh.refgraph.node_of(obj)
    if type(s) is not SymInt or type(value) is not int or node is None or in_sh[1] is not None:
        return False
    if getattr(obj, "__dict__", {}).get(ins.argval, None) is not value:
        return False   # (a property, a slot, a __setattr__ that stores elsewhere)
    sh.stores[(id(obj), ins.argval)] = (obj, value, s)
    return True


def _kept(sh, f, ins, inputs, outputs, in_sh):
    return True


def _returned(sh, f, ins, inputs, outputs, in_sh):
    # To the calling instruction (the monitor moves the shadow), unless it leaves the recorded
    # call, ends a generator, or returns to native code that called back into the program
    # (``sorted(key=...)``, ``map``: an intrinsic's callback).
    caller = f.back
    return (caller is not f.monitor.host_frame and not f.code.co_flags & _GENERATOR_FLAGS
            and sh.levels.get(id(f)) == sh.levels.get(id(caller), -1))


def _call(sh, f, ins, inputs, outputs, in_sh):
    return sh.called(f, inputs, outputs, in_sh)


_RULES = {
    "BINARY_OP": _binary, "COMPARE_OP": _compare, "UNARY_NEGATIVE": _unary(operator.neg),
    "UNARY_POSITIVE": _unary(operator.pos), "BINARY_SUBSCR": _subscript, "UNPACK_SEQUENCE": _unpack,
    "BUILD_TUPLE": _build, "BUILD_LIST": _build, "LIST_APPEND": _append, "LIST_EXTEND": _append,
    "LIST_TO_TUPLE": _to_tuple, "BUILD_SLICE": _slice, "DICT_MERGE": _dict_merge,
    "BUILD_CONST_KEY_MAP": _const_key_map, "BUILD_MAP": _build_map,
    "POP_JUMP_FORWARD_IF_TRUE": _truth, "POP_JUMP_FORWARD_IF_FALSE": _truth,
    "POP_JUMP_BACKWARD_IF_TRUE": _truth, "POP_JUMP_BACKWARD_IF_FALSE": _truth,
    "JUMP_IF_TRUE_OR_POP": _truth, "JUMP_IF_FALSE_OR_POP": _truth, "UNARY_NOT": _truth,
    "POP_JUMP_FORWARD_IF_NONE": _kept, "POP_JUMP_FORWARD_IF_NOT_NONE": _kept,
    "POP_JUMP_BACKWARD_IF_NONE": _kept, "POP_JUMP_BACKWARD_IF_NOT_NONE": _kept,
    "STORE_FAST": _kept, "POP_TOP": _kept, "COPY": _kept, "SWAP": _kept,
    "RETURN_VALUE": _returned, "CALL": _call, "CALL_FUNCTION_EX": _call, "STORE_ATTR": _store_attr,
}

_CELL_OPS = frozenset({"STORE_DEREF", "LOAD_DEREF", "MAKE_CELL"})
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
# Native callees that compute an int from ints: the same computation on SymInts.
_NATIVE_INT = {int: int, abs: abs, max: torch.sym_max, min: torch.sym_min, math.floor: math.floor,
               math.ceil: math.ceil, operator.add: operator.add, operator.sub: operator.sub,
               operator.mul: operator.mul, operator.floordiv: operator.floordiv, operator.mod: operator.mod,
               operator.neg: operator.neg, operator.index: operator.index}
# Native callees that rebuild a sequence with the same items.
_NATIVE_SEQ = (tuple, list, torch.Size)
# Metadata reads whose result the program gets directly: their result is the twin's.
_SIZE_ATTRS = frozenset({"shape"})
_SIZE_CALLS = frozenset({"size", "numel", "__len__", "stride", "dim", "nelement"})


# ----------------------------------------------------------------------------- the recording side

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
        self.scalars: dict[int, object] = {}     # node id -> node of a lifted float argument
        self.ints: dict[int, object] = {}        # node id -> node of a lifted int argument
        # (id(obj), name) -> (obj, value, SymInt) of a size the program stored into an object
        # from outside: the mock writes it from the new sizes.
        self.stores: dict[tuple, tuple] = {}
        self.lifted_shadows: dict[int, object] = {}   # node id -> shadow of a lifted attribute
        self.pinned: set[int] = set()            # of those, the ones guarded by value after all
        self.levels: dict[int, int] = {}         # id(frame) -> intrinsics under way when it was entered
        self._outputs = None                     # the output shadow slots of the instruction observed
        self._matched = False                    # whether a tensor operation took its inputs' shadows

    @property
    def active(self) -> bool:
        """Is anything lifted: a dimension (from then on, every operation is propagated on
        the twins) or a float argument?"""
        return bool(self.symbols or self.scalars)

    def argument_shadows(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The shadows of the call's arguments: its lifted floats (the RefGraph's roots)."""
        roots = self.refgraph.sn0.children

        def shadow(rel, key, value):
            sn = roots.get((rel, key))
            if type(value) not in (float, int) or sn is None or not self.lifting.scalar(self.mode, sn):
                return None
            if type(value) is int:
                return self._int_symbol(sn)
            self.scalars[sn.id] = sn
            return Scalar(sn, self.pinned)
        positional = tuple(shadow(ARG, i, a) for i, a in enumerate(args))
        keywords = {k: shadow(KWARG, k, v) for k, v in kwargs.items()}
        return (positional, keywords) if self.scalars or self.ints else None

    def _int_symbol(self, sn) -> SymInt | None:
        """A lifted int argument: a symbol backed by its value (0 and 1 stay constants)."""
        if sn.value in (0, 1):
            return None
        from torch._dynamo.source import ConstantSource  # (importing torch._dynamo takes a second)
        source = ConstantSource(f"int{len(self.symbols)}")
        sym = self.env.create_symbol(sn.value, source, dynamic_dim=DimDynamic.DYNAMIC)
        value = self.env.create_symintnode(sym, hint=sn.value, source=source)
        self.symbols[sym] = _Origin(sn, None, value, None)
        self.ints[sn.id] = sn
        return value

    def stored(self, node, name: str):
        """The SymInt the mock writes to attribute ``name`` of ``node``'s object, if the last
        write to it in the run stored a size (None: write the value as recorded)."""
        entry = self.stores.get((id(node.value), name))
        if entry is None or entry[0] is not node.value:
            return None
        if getattr(node.value, "__dict__", {}).get(name, None) is not entry[1]:
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
        shape check holds what the record assumes of the ints)."""
        return (set(self.scalars) - self.pinned) | set(self.ints)

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
        from torch._dynamo.source import ConstantSource  # (importing torch._dynamo takes a second)
        source = ConstantSource(f"in{len(self.inputs)}")   # names the symbols' origin in torch's messages
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
            if type(a) is Scalar:
                return a.node.value
            return self.fake(a) if isinstance(a, torch.Tensor) else a
        fargs, fkwargs = pytree.tree_map(twin, (tuple(args), dict(kwargs)))
        try:
            # The Python dispatcher runs the decompositions that keep sizes symbolic (as under
            # torch.compile); some C++ kernels would read concrete sizes (F.pad, baddbmm).
            with self.fake_mode, enable_python_dispatcher(), _quiet_fakes():
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
        shadows = _argument_shadows(f, args, kwargs)
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

    def on_enter(self, frame) -> None:
        # How many intrinsics deep the frame runs: a frame one deeper than its caller was
        # called back by native code, which gets its result without the shadow.
        self.levels[id(frame)] = self.monitor.in_intrinsic
        caller = self.monitor.current
        if caller is None or not self.active:
            return
        ids = self.passed.setdefault(id(caller), set())
        for s in frame.shadow_locals:
            _collect(s, ids)

    def on_instruction(self, f, ins, inputs, outputs) -> None:
        if ins.opname == "LOAD_ATTR" and type(outputs[0]) in (float, int):
            self._attribute(f, inputs[0], ins.argval, outputs[0])
        elif ins.opname in ("STORE_ATTR", "DELETE_ATTR") and self.stores:
            self.stores.pop((id(inputs[-1]), ins.argval), None)   # (the rule may record it again)
        if not self.active:
            return
        reads, self.reads = self.reads, []
        in_sh = f.ins_shadows
        n = len(outputs) if ins.opname != "RETURN_VALUE" else 0
        self._outputs = _OutputShadows(f, n)
        if reads:
            self._claim(f, ins, inputs, outputs, reads)
        matched, self.matched = self.matched, False
        self._matched = matched
        if ins.opname in _CELL_OPS and self._cell(f, ins, in_sh, outputs):
            return
        if matched or not any(map(symbolic, in_sh)):   # (a tensor operation took them)
            self.passed.pop(id(f), None)
            return
        rule = _RULES.get(ins.opname)
        if rule is None or not rule(self, f, ins, inputs, outputs, in_sh):
            if logs.on("dynamic"):
                logs.logger("dynamic").info("%s specialised by %s at %s:%s",
                                            [s for s in in_sh if symbolic(s)], ins.opname,
                                            f.code.co_filename, f.f_lineno)
            for s in in_sh:
                specialise(s)
        self.passed.pop(id(f), None)

    def _attribute(self, f, obj, name, value) -> None:
        """``obj.name`` read a number: one this call stored from sizes gets its SymInt back;
        one from outside the call (a RefGraph node) that changed between recordings is
        lifted (a float's shadow, or an int's symbol)."""
        stored = self.stores.get((id(obj), name))
        if stored is not None and stored[1] is value:
            f.shadow_stack[-1] = stored[2]
            return
        parent = self.refgraph.node_of(obj) if self.lifting.values else None
        sn = parent.children.get((ATTR, name)) if parent is not None else None
        if sn is None or sn.value is not value or self.mode is not None or not sn.read:
            return   # (dynamic=True lifts the arguments only, as torch.compile does)
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
        entry = self.cells.get(id(cell))
        if entry is not None and entry[0] is cell and entry[1] is outputs[0]:
            self.set_output(f, 0, entry[2])
        return True

    def _claim(self, f, ins, inputs, outputs, reads) -> None:
        direct = _direct_read(ins, inputs)
        for out, r in reads:
            if direct and outputs and outputs[-1] is out:
                self.set_output(f, len(outputs) - 1, Items(r) if isinstance(r, (tuple, list)) else r)
                direct = False
            else:
                specialise(Items(r) if isinstance(r, (tuple, list)) else r)

    def called(self, f, inputs, outputs, in_sh) -> bool:
        """A call with symbolic arguments: a tensor operation took them (the recorder matched
        this instruction), a Python function received them, or a native computes an int."""
        if self._matched:
            return True
        passed = self.passed.get(id(f))
        if passed is not None:
            found = set()
            for s in in_sh[1:]:
                _collect(s, found)
            return found <= passed
        callee, args = _callee(inputs)
        if callee is isinstance or callee is type:
            return True   # they look at the type only
        fn = _NATIVE_INT.get(callee) if _hashable(callee) else None
        out = outputs[0] if outputs else None
        if fn is not None and all(type(a) is int for a in args):
            try:
                # (torch.sym_max is a torch function: the operation recorder must not see it)
                with torch._C.DisableTorchFunction():
                    r = _int_result(out, fn(*(_value(a, s) for a, s in zip(args, in_sh[-len(args):]))))
            except Exception:  # noqa: BLE001
                r = None
            if r is not None:
                self.set_output(f, 0, r)
                return True
            return False
        if callee in _NATIVE_SEQ and len(args) == 1:
            items = _items(args[0], in_sh[-1])
            if items is not None and isinstance(out, (tuple, list)) and len(items) == len(out):
                self.set_output(f, 0, Items(items))
                return True
        if callee is len and len(args) == 1 and _items(args[0], in_sh[-1]) is not None:
            return True   # the length of a sequence of sizes is no size
        return False

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
        for _, r in self.reads:
            specialise(Items(r) if isinstance(r, (tuple, list)) else r)
        self.reads = []
        for (_, name), (obj, value, s) in self.stores.items():
            # A size stored where the object held that very value already is no change the
            # mock writes: the record keeps the value instead.
            snapshot = getattr(self.refgraph.node_of(obj), "snapshot", None)
            if not isinstance(snapshot, dict) or snapshot.get(name) is value:
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
        for tid, (sn, dims, fake) in self.inputs.items():
            if fake is None or tid not in names:
                continue
            for d, s in enumerate(fake.stride()):
                if type(s) is SymInt and not s.node.expr.is_number:
                    conds.append(f"{names[tid]}.stride({d}) == {printer.doprint(s.node.expr)}")
        return loads, conds

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


def _collect(sh, ids: set) -> None:
    t = type(sh)
    if t is SymInt or t is Scalar:
        ids.add(id(sh))
    elif t is Items or t is slice:
        for x in (sh if t is Items else (sh.start, sh.stop, sh.step)):
            _collect(x, ids)
    elif t is Entries:
        for x in sh.values():
            _collect(x, ids)


def _hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _callee(inputs) -> tuple:
    """The callable and positional arguments of a CALL's inputs."""
    from magpy.monitor import NULL
    if inputs and inputs[0] is NULL:
        return inputs[1], inputs[2:]
    return (inputs[0], inputs[1:]) if inputs else (None, ())


def _direct_read(ins, inputs) -> bool:
    """Does this instruction itself read a tensor's size (not native code inside it)?"""
    if ins.opname == "LOAD_ATTR":
        return ins.argval in _SIZE_ATTRS and isinstance(inputs[0], torch.Tensor)
    if ins.opname != "CALL":
        return False
    callee, args = _callee(inputs)
    name = getattr(callee, "__name__", None)
    if callee is len:
        return len(args) == 1 and isinstance(args[0], torch.Tensor)
    if name not in _SIZE_CALLS:
        return False
    owner = getattr(callee, "__self__", None)
    return isinstance(owner, torch.Tensor) or bool(args) and isinstance(args[0], torch.Tensor)


# How the operation's arguments sit among the instruction's inputs.
def _argument_shadows(f, args, kwargs):
    ins = f.info.instructions[f.lasti]
    inputs, shadows = f.ins_inputs, f.ins_shadows
    name = ins.opname
    if name == "CALL":
        nkw = len(kwargs)
        for n in (len(args), len(args) - 1):
            k = n + nkw
            if n < 0 or k > len(inputs):
                continue
            tail, tail_sh = inputs[len(inputs) - k:], shadows[len(shadows) - k:]
            got = args[len(args) - n:] + tuple(kwargs.values())
            if all(a is b for a, b in zip(tail, got)):
                pos = (None,) * (len(args) - n) + tuple(tail_sh[:n])
                return pos, dict(zip(kwargs, tail_sh[n:]))
        return None
    if name == "CALL_FUNCTION_EX":
        seq = inputs[-2] if ins.arg & 1 else inputs[-1]
        sh = shadows[-2] if ins.arg & 1 else shadows[-1]
        kw_sh = shadows[-1] if ins.arg & 1 and type(shadows[-1]) is Entries else {}
        if type(sh) is not Items or len(sh) != len(seq):
            sh = (None,) * len(seq)
        for skip in (0, 1):
            if len(args) - skip == len(seq) and all(a is b for a, b in zip(args[skip:], seq)):
                return (None,) * skip + tuple(sh), dict(kw_sh)
        return None
    order = _ORDERS.get(name)
    if order is None or kwargs:
        return None
    for perm in order:
        if len(perm) == len(args) == len(inputs) and all(args[i] is inputs[p] for i, p in enumerate(perm)):
            return tuple(shadows[p] for p in perm), {}
    return None


_ORDERS = {"BINARY_OP": ((0, 1), (1, 0)), "COMPARE_OP": ((0, 1), (1, 0)), "BINARY_SUBSCR": ((0, 1),),
           "STORE_SUBSCR": ((1, 2, 0),), "UNARY_NEGATIVE": ((0,),)}
