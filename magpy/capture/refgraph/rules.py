"""RefGraph update rules (paper §5.3): an observer of the monitor that turns each execution
state into ShadowNodes, reference edges and versions, and detects dynamic operations.

Each instruction's rule (``_RULES``) says what it read or wrote, through the parts that hold
one idea each: reads from a node make child nodes (lazily, paper §4.1; ``reads``, and
``attributes`` for attribute lookups); structural reads (iteration, ``len``, unpacking) expand
a container into all its elements; writes add versions (``stores``); native calls follow their
annotation (Figure 12, ``natives``): unannotated or impure natives are dynamic, as is what runs
or changes where neither monitor nor guard can see it (``unseen``).
"""
from __future__ import annotations

import operator
import types

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor import Observer, bytecode
from magpy.capture.monitor.protocols import NULL, type_lookup
from magpy.capture.refgraph.attributes import AttributeReads
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import ATTR, CELL, GETATTR, ITEM, Kind, RefGraph
from magpy.capture.refgraph.natives import NativeCalls
from magpy.capture.refgraph.reads import CONTAINERS, Reads
from magpy.capture.refgraph.stores import DEL, SET, Stores
from magpy.capture.refgraph.unseen import HASHED_CONTAINERS, Unseen


class RefGraphBuilder(Observer):
    """Updates a :class:`RefGraph` from the monitor's execution states."""

    def __init__(self, graph: RefGraph, breaker: Breaker):
        self.g = graph
        self.dynamic = breaker
        self.reads = Reads(graph, breaker)
        self.attrs = AttributeReads(graph, breaker, self.reads)
        self.unseen = Unseen(graph, breaker, self.reads)
        self.stores = Stores(breaker, self.reads, self.unseen)
        self.natives = NativeCalls(graph, breaker, self.reads, self.attrs, self.unseen, self.stores)
        self.new_cells: set[int] = set()
        self.new_functions: set[int] = set()   # functions the run created (closures, lambdas)
        self._recorded = None   # a native whose next call an intrinsic recorded itself
        self._unwinding = None  # the exception last reported unwinding
        self._keep = []

    def recorded_by_intrinsic(self, callee) -> None:
        """The call of native ``callee`` about to be reported was followed by its intrinsic
        (``torch.utils.checkpoint``'s function monitored, magpy.capture.callees.checkpoint): no native
        rule."""
        self._recorded = callee

    # ------------------------------------------------------------------ events
    # Observer events run inside the monitored program: an error here must never surface as
    # the program's own exception, so each event stops recording instead.
    def on_enter(self, frame):
        if self.dynamic.brk is None:
            try:
                self._enter(frame)
            except Exception as e:  # noqa: BLE001
                self.dynamic.fail(e)

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.dynamic.brk is None:
            rule = _RULES.get(ins.opname)
            if rule is not None:
                try:
                    rule(self, frame, ins, inputs, outputs)
                except Exception as e:  # noqa: BLE001
                    self.dynamic.fail(e)

    def on_exception(self, frame, exc):
        # An operation that raised read what made it fail (an index past the end, a missing
        # key or attribute): a path the program takes because it caught that exception
        # depends on it, and the guard checks it.  Only where the exception starts (its first
        # report), not in the frames it unwinds through afterwards.  (Not magpy's own stop of
        # a fork, a BaseException raised before the operation ran, nor another that is no
        # failure of the operation's reads.)
        if exc is self._unwinding:
            return
        self._unwinding = exc
        if self.dynamic.brk is None and hasattr(frame, "info") and isinstance(exc, Exception):
            rule = _FAILED.get(frame.info.instructions[frame.lasti].opname)
            if rule is not None:
                try:
                    rule(self, frame, frame.ins_inputs, exc)
                except Exception as e:  # noqa: BLE001
                    self.dynamic.fail(e)

    def on_call(self, frame, callee, args, kwargs, result, entered):
        if self._recorded is not None and callee is self._recorded:
            self._recorded = None
            return
        if not entered and self.dynamic.brk is None:
            try:
                self.natives.returned(callee, args, kwargs, result)
            except Exception as e:  # noqa: BLE001
                self.dynamic.fail(e)

    def on_unwrap(self, frame, callee, reads):
        if self.dynamic.brk is None:
            try:
                self._unwrapped(callee, reads)
            except Exception as e:  # noqa: BLE001
                self.dynamic.fail(e)

    def _unwrapped(self, obj, reads):
        # A partial's function, arguments and keywords steer the call as much as its type:
        # the guard checks them (a schedule's ``partial(f, num_warmup_steps=4)`` replaced by
        # one with 8 must not replay the record of 4).  (A partial the call made itself has
        # no node: nothing to check.)
        node = self.reads.node(obj)
        if node is None:
            return
        for name, value in reads:
            child = self.g.child(node, GETATTR, name, value)   # (C members: no program code)
            if child is not None:
                self.reads.expand(child)   # (the call takes all of a partial's arguments and keywords)

    def _enter(self, frame):
        self.resumed(frame)
        fn = frame.fn
        if fn is not None and (fn.__defaults__ or fn.__kwdefaults__) and id(fn) not in self.new_functions:
            self._defaults(fn, frame.locals)

    def resumed(self, frame) -> None:
        """A frame the run starts in (entered, or resumed by a continuation): its globals dict
        and closure cells are state from outside, known as found before the program's first
        store into them (a continuation's ``Z = h.sum().item()`` before any global read is a
        change the mock writes)."""
        self.g.const(frame.globals)
        fn = frame.fn
        for cell in (fn.__closure__ or ()) if fn is not None else ():
            if id(cell) not in self.new_cells and self.g.node_of(cell) is None:   # (_cell_node)
                self.g.const(cell)

    def _defaults(self, fn, local):
        # Parameters bound from defaults read the function's __defaults__ / __kwdefaults__,
        # which the program may replace or (for mutable defaults) change between calls.
        code = fn.__code__
        fnode = self.reads.node(fn) or self.g.const(fn)
        d = fn.__defaults__
        if d:
            first = code.co_argcount - len(d)
            self._read_defaults(fnode, "__defaults__", d,
                                [j for j, v in enumerate(d) if local[first + j] is v])
        kd = fn.__kwdefaults__
        if kd:
            start = code.co_argcount
            names = code.co_varnames[start:start + code.co_kwonlyargcount]
            self._read_defaults(fnode, "__kwdefaults__", kd,
                                [n for i, n in enumerate(names) if n in kd and local[start + i] is kd[n]])

    def _read_defaults(self, fnode, name, defaults, used):
        if not used:
            return
        dnode = self.g.child(fnode, ATTR, name, defaults)
        if dnode.kind is not Kind.VALUE:   # a tuple of immutables is guarded whole, by value
            for key in used:
                self.g.child(dnode, ITEM, key, defaults[key])


# --------------------------------------------------------------------------- instruction rules
def _load_global(b, frame, ins, inputs, outputs):
    value = outputs[-1]
    name = ins.argval
    g = frame.globals
    if name in g:
        b.reads.read_item(b.g.const(g), name, value)   # (not one the call stored: RefGraph.overwritten)
    else:
        b.g.read_builtin(g, frame.builtins, name, value)


def _load_deref(b, frame, ins, inputs, outputs):
    cell = frame.locals[ins.arg]
    if type(cell) is types.CellType and id(cell) not in b.new_cells:
        b.g.child(_cell_node(b, cell), CELL, None, outputs[-1])


def _cell_node(b, cell):
    # (a cell the call was given, a continuation's argument: that node, not the recording's
    # own cell by identity)
    return b.g.node_of(cell) or b.g.const(cell)


def _make_cell(b, frame, ins, inputs, outputs):
    cell = frame.locals[ins.arg]
    b.new_cells.add(id(cell))
    b._keep.append(cell)


def _make_function(b, frame, ins, inputs, outputs):
    b.new_functions.add(id(outputs[0]))
    b._keep.append(outputs[0])


def _store_deref(b, frame, ins, inputs, outputs):
    cell = frame.locals[ins.arg]
    if id(cell) not in b.new_cells:
        b.stores.write(_cell_node(b, cell).value, CELL, None, DEL if ins.opname == "DELETE_DEREF" else SET)


def _for_iter(b, frame, ins, inputs, outputs):
    b.unseen.opaque_contents(inputs[0], "a for loop over", changes=True)


def _load_attr(b, frame, ins, inputs, outputs):
    b.attrs.read_attr(inputs[0], ins.argval, outputs[-1])


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _index_key(container, key):
    """``key`` as a list or tuple took it: a 0-d integer tensor (a slice's bound) as the int its
    ``__index__`` gives, which the record checks (magpy.records.segments)."""
    if not isinstance(container, (list, tuple)):
        return key
    with torch._C.DisableTorchFunction():   # (magpy's own read, not the program's)
        if type(key) is slice:
            bounds = (key.start, key.stop, key.step)
            if any(type(x) in _PLAIN_TENSORS for x in bounds):
                return slice(*(operator.index(x) if type(x) in _PLAIN_TENSORS else x for x in bounds))
            return key
        return operator.index(key) if type(key) in _PLAIN_TENSORS else key


def _binary_subscr(b, frame, ins, inputs, outputs):
    container, key = inputs
    key = _index_key(container, key)
    if isinstance(container, dict) and b.unseen.hashes(container, (key,), "a dict lookup"):
        return
    node = b.reads.node(container)
    if node is not None and node.kind in CONTAINERS:
        b.reads.read_item(node, key, outputs[0])
    elif node is not None and not b.unseen.opaque_contents(container, "an item read of"):
        b.unseen.python_dunder(container, "__getitem__")


def _binary_slice(b, frame, ins, inputs, outputs):
    container, start, stop = inputs
    _binary_subscr(b, frame, ins, (container, slice(start, stop)), outputs)


def _store_attr(b, frame, ins, inputs, outputs):
    b.stores.write(inputs[1], ATTR, ins.argval)


def _store_subscr(b, frame, ins, inputs, outputs):
    if isinstance(inputs[1], dict) and b.unseen.hashes(inputs[1], (inputs[2],), "a dict store"):
        return
    if not b.unseen.opaque_contents(inputs[1], "an item store into", changes=True):
        b.unseen.python_dunder(inputs[1], "__setitem__")
        b.stores.write(inputs[1], ITEM, _index_key(inputs[1], inputs[2]))


def _store_slice(b, frame, ins, inputs, outputs):
    value, container, start, stop = inputs
    _store_subscr(b, frame, ins, (value, container, slice(start, stop)), outputs)


def _delete_subscr(b, frame, ins, inputs, outputs):
    if isinstance(inputs[0], dict) and b.unseen.hashes(inputs[0], (inputs[1],), "a dict deletion"):
        return
    if not b.unseen.opaque_contents(inputs[0], "an item deletion from", changes=True):
        b.unseen.python_dunder(inputs[0], "__delitem__")
        b.stores.write(inputs[0], ITEM, _index_key(inputs[0], inputs[1]), DEL)


def _delete_attr(b, frame, ins, inputs, outputs):
    b.stores.write(inputs[0], ATTR, ins.argval, DEL)


def _store_global(b, frame, ins, inputs, outputs):
    b.stores.write(frame.globals, ITEM, ins.argval, DEL if ins.opname == "DELETE_GLOBAL" else SET)


def _struct_read(position, dunder=None):
    def rule(b, frame, ins, inputs, outputs):
        v = inputs[position]
        node = b.reads.node(v)
        if node is None or b.unseen.opaque_contents(v, f"{ins.opname} reads"):
            return
        if node.kind in CONTAINERS:
            b.reads.expand(node)
        elif dunder is not None:
            # The first of the protocol's methods the type has is the one called (truth:
            # ``__bool__``, else ``__len__``).
            for d in dunder:
                if type_lookup(type(v), d) is not NULL:
                    b.unseen.python_dunder(v, d)
                    return
    return rule


def _iterate(position):
    """The instruction iterates a value: a container's structure is read, a set's order too."""
    struct = _struct_read(position)

    def rule(b, frame, ins, inputs, outputs):
        struct(b, frame, ins, inputs, outputs)
        b.reads.set_order(inputs[position], ann.STRUCT, ins.opname)
    return rule


def _expand_inputs(deep):
    """Every container input is read: element by element, or (``deep``) all the way down."""
    def rule(b, frame, ins, inputs, outputs):
        for v in inputs:
            node = b.reads.node(v)
            if node is not None and node.kind in CONTAINERS:
                b.reads.expand(node, deep=deep)
            elif b.unseen.opaque_contents(v, f"{ins.opname} reads"):
                return
        for v in inputs:
            b.reads.set_order(v, ann.STRUCT, ins.opname)
    return rule


def _binary_op(b, frame, ins, inputs, outputs):
    for v in inputs:
        node = b.reads.node(v)
        if node is not None and node.kind in CONTAINERS:
            b.reads.expand(node, deep=True)
        elif b.unseen.opaque_contents(v, f"operator {ins.argrepr} reads"):
            return
        elif node is not None and node.kind is Kind.OBJECT:
            for name in _op_dunders(ins):
                if b.unseen.python_dunder(v, name):
                    return


_COMPARE = {"==": ("eq", "eq"), "!=": ("ne", "ne"), "<": ("lt", "gt"), "<=": ("le", "ge"),
            ">": ("gt", "lt"), ">=": ("ge", "le")}
_BINARY = {"+": "add", "-": "sub", "*": "mul", "@": "matmul", "/": "truediv", "//": "floordiv", "%": "mod",
           "**": "pow", "<<": "lshift", ">>": "rshift", "&": "and", "|": "or", "^": "xor"}


def _op_dunders(ins):
    """The Python methods an operator may call on either operand (forward, reflected, in-place)."""
    if ins.opname == "COMPARE_OP":
        return [f"__{n}__" for n in _COMPARE.get(ins.argval, ())]
    sym = ins.argrepr
    inplace = sym.endswith("=")   # BINARY_OP's in-place forms: "+=", "//=" ...
    op = _BINARY.get(sym[:-1] if inplace else sym)
    if op is None:
        return []
    return [f"__{op}__", f"__r{op}__"] + ([f"__i{op}__"] if inplace else [])


_CONTAINS = _struct_read(1, ("__contains__",))


def _contains_op(b, frame, ins, inputs, outputs):
    item, container = inputs
    if isinstance(container, HASHED_CONTAINERS) and b.unseen.hashes(container, (item,), "an 'in' test"):
        return
    _CONTAINS(b, frame, ins, inputs, outputs)


def _hashed_keys(keys):
    """A dict or set display (``{k: v}``, ``{k}``, comprehensions) hashes ``keys(inputs)``."""
    def rule(b, frame, ins, inputs, outputs):
        b.unseen.hashes(None, keys(inputs), "building a dict or set")
    return rule


def _is_op(b, frame, ins, inputs, outputs):
    a, c = inputs
    na, nc = b.reads.node(a), b.reads.node(c)
    if na is not None and nc is not None and na is not nc:
        na.distinct.append(nc)


def _format_value(b, frame, ins, inputs, outputs):
    v = inputs[0]
    b.reads.set_order(v, ann.STRUCT, "formatting")
    node = b.reads.node(v)
    if node is None:
        return
    if node.kind in CONTAINERS:
        b.reads.expand(node, deep=True)
    elif node.kind is Kind.OBJECT:
        for d in ("__format__", "__str__", "__repr__"):
            if b.unseen.python_dunder(v, d):
                return


_TRUTH = _struct_read(0, ("__bool__", "__len__"))
_RULES = {
    "LOAD_GLOBAL": _load_global, "LOAD_DEREF": _load_deref, "LOAD_CLASSDEREF": _load_deref,
    "LOAD_FROM_DICT_OR_DEREF": _load_deref, "BINARY_SLICE": _binary_slice, "STORE_SLICE": _store_slice,
    "MAKE_CELL": _make_cell, "MAKE_FUNCTION": _make_function,
    "STORE_DEREF": _store_deref, "DELETE_DEREF": _store_deref,
    "LOAD_ATTR": _load_attr, "LOAD_METHOD": _load_attr, "FOR_ITER": _for_iter,
    "BINARY_SUBSCR": _binary_subscr, "STORE_SUBSCR": _store_subscr, "DELETE_SUBSCR": _delete_subscr,
    "STORE_ATTR": _store_attr, "DELETE_ATTR": _delete_attr,
    "STORE_GLOBAL": _store_global, "DELETE_GLOBAL": _store_global,
    "GET_ITER": _iterate(0), "UNPACK_SEQUENCE": _iterate(0), "UNPACK_EX": _iterate(0),
    "LIST_EXTEND": _iterate(1), "SET_UPDATE": _struct_read(1), "DICT_UPDATE": _struct_read(1),
    "DICT_MERGE": _struct_read(1), "CONTAINS_OP": _contains_op,
    "BUILD_MAP": _hashed_keys(lambda inputs: inputs[::2]), "BUILD_SET": _hashed_keys(lambda inputs: inputs),
    "MAP_ADD": _hashed_keys(lambda inputs: inputs[-2:-1]),
    "SET_ADD": _hashed_keys(lambda inputs: inputs[-1:]),
    "POP_JUMP_FORWARD_IF_TRUE": _TRUTH, "POP_JUMP_FORWARD_IF_FALSE": _TRUTH,
    "POP_JUMP_BACKWARD_IF_TRUE": _TRUTH, "POP_JUMP_BACKWARD_IF_FALSE": _TRUTH,
    "JUMP_IF_TRUE_OR_POP": _TRUTH, "JUMP_IF_FALSE_OR_POP": _TRUTH, "UNARY_NOT": _TRUTH,
    "TO_BOOL": _TRUTH,
    "COMPARE_OP": _binary_op, "BINARY_OP": _binary_op, "IS_OP": _is_op,
    "FORMAT_VALUE": _format_value, "BUILD_STRING": _expand_inputs(True),
    "CALL_FUNCTION_EX": _expand_inputs(False),
}


# --------------------------------------------------------------------------- failed instructions
# What an instruction that raised read: ``(builder, frame, inputs, exc)``.
def _subscr_failed(b, frame, inputs, exc):
    if isinstance(exc, (IndexError, KeyError)):
        b.reads.missing_item(inputs[0], inputs[1])


def _attr_failed(b, frame, inputs, exc):
    if isinstance(exc, AttributeError):
        ins = frame.info.instructions[frame.lasti]
        b.attrs.missing_attr(inputs[0], ins.argval)


def _global_failed(b, frame, inputs, exc):
    if isinstance(exc, NameError):
        name = frame.info.instructions[frame.lasti].argval
        b.g.const(frame.globals).mark_absent(ITEM, name)
        b.g.const(frame.builtins).mark_absent(ITEM, name)


def _unpack_failed(b, frame, inputs, exc):
    node = b.reads.node(inputs[0])
    if node is not None and node.kind in CONTAINERS:
        b.reads.expand(node)   # (too many or too few items: its length)


def _call_failed(b, frame, inputs, exc):
    # (keyword arguments are read as positional ones: the natives that fail on a lookup
    # take none; a Python callee's exception was first reported in its own frame)
    callee, args = bytecode.call_operands(inputs)
    if not isinstance(callee, (types.FunctionType, types.MethodType)):
        b.natives.raised(callee, args, None)


_FAILED = {"BINARY_SUBSCR": _subscr_failed, "LOAD_ATTR": _attr_failed, "LOAD_METHOD": _attr_failed,
           "LOAD_GLOBAL": _global_failed, "UNPACK_SEQUENCE": _unpack_failed, "UNPACK_EX": _unpack_failed,
           "CALL": _call_failed}
