"""RefGraph update rules (paper §5.3): an observer of the monitor that turns each execution
state into ShadowNodes, reference edges and versions, and detects dynamic operations.

Reads from a node make child nodes (lazily, paper §4.1); structural reads (iteration,
``len``, unpacking) expand a container into all its elements; writes add versions; native
calls follow their annotation (Figure 12): unannotated or impure natives are dynamic.
"""
from __future__ import annotations

import array
import collections
import dataclasses
import operator
import os
import sys
import sysconfig
import types

import torch

from magpy.capture import annotations as ann
from magpy.capture.callees import builtin_standins, torchscript
from magpy.capture.monitor import Observer, bytecode, operators
from magpy.capture.monitor.frame import Frame
from magpy.capture.monitor.interpreter import attribute_access
from magpy.capture.monitor.protocols import NULL, py_method, type_lookup
from magpy.capture.refgraph.graph import (
    ATTR,
    CELL,
    CONST,
    DEREF,
    DICT,
    GETATTR,
    ITEM,
    VAR,
    Kind,
    RefGraph,
    ShadowVersion,
    is_immutable,
    is_namespace,
    same_state,
    slot_of,
    state_of,
)
from magpy.errors import GraphBreak

_MISSING = object()
# How a store changes a slot: SET stores, DEL deletes what must be there (else it raises), POP
# deletes what may be missing.  Slot relations besides the RefGraph's: CLEAR (the whole of it
# emptied), ADDED (items added at the end of a list, which the mock extends).
SET, DEL, POP = "set", "del", "pop"
CLEAR, ADDED = "clear", "added"
_HEAPTYPE = 1 << 9   # Py_TPFLAGS_HEAPTYPE: a class defined in Python (its attributes can change)
_MODULE_DICTS = ("_parameters", "_buffers", "_modules")
_METHOD_PARTS = ("__func__", "__self__")   # a bound method's C members
_CONTAINERS = (Kind.LIST, Kind.TUPLE, Kind.DICT, Kind.SET)
# What a native reading deep into cannot follow: a Python object (its __repr__, __eq__ ... run
# natively), a bound method with it (a method's repr is its object's).
_PYTHON_OBJECTS = (Kind.OBJECT, Kind.METHOD)
# Hashes that are the object's identity: a set holding such objects iterates in an order that
# follows their ids, and set operations on them run no Python code.
_ID_HASHES = (object.__hash__, torch.Tensor.__hash__)
# Special methods the monitor enters when they are Python code (magpy.capture.monitor.operators).
_ENTERED_DUNDERS = frozenset(
    {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__bool__", "__len__", "__iter__",
     "__hash__", *operators.UNARY}
    | {name for _, op, rop, _ in operators.BINARY for name in (op, rop, "__i" + op[2:])}
    | {name for _, name, _ in operators.COMPARE})


class Breaker:
    """The dynamic operations of a run, where the user's code did them.

    A dynamic operation that can be an eager step (``step=True``: a native call, a read of
    tensor data) goes to the segmenter, if any (``magpy.records.segments``); any other, or one the
    segmenter refuses, stops recording: ``brk`` is then the first such break.
    """

    def __init__(self, graph: RefGraph | None = None):
        self.brk: GraphBreak | None = None
        self.internal: BaseException | None = None   # magpy's own failure, if any
        self.monitor = None
        self.segmenter = None
        self.graph = graph
        self.sandbox = None   # magpy.graphs.controlflow.sandbox.Sandbox of a fork under way: a break stops it

    def fail(self, exc: BaseException) -> None:
        """magpy's machinery failed: stop recording; the program itself runs on unharmed."""
        if self.internal is None:
            self.internal = exc
            self("internal error in magpy's capture")

    def __call__(self, reason: str, step: bool = False, changes: bool = False) -> None:
        if self.sandbox is not None:
            self.sandbox.stop(reason)
        if self.brk is not None:
            return
        brk = self.where(reason)
        if changes:
            brk = dataclasses.replace(brk, changes=True)
        if step and self.segmenter is not None and self.segmenter.begin(brk):
            return
        self.brk = brk

    def stop(self, reason: str | GraphBreak) -> None:
        """Give up segments: the run ends as one that met ``reason`` (it runs eagerly)."""
        if self.sandbox is not None:
            self.sandbox.stop(str(reason))
        if self.brk is None:
            self.brk = reason if isinstance(reason, GraphBreak) else self.where(reason)

    def where(self, reason: str) -> GraphBreak:
        innermost = f = self.monitor.current if self.monitor is not None else None
        # Report the innermost frame that is the user's (not torch's own Python code).
        while f is not None and hasattr(f, "info") and _is_library_file(f.code.co_filename):
            f = f.back
        if f is None or not hasattr(f, "info"):
            f = innermost
        return GraphBreak(reason, f.code.co_filename, f.line) if f is not None else GraphBreak(reason)

    def pending_module_writes(self) -> bool:
        """Has the run so far changed a Python module's attributes or a globals dict (state an
        eager step may read, ``print`` reading ``sys.stdout``, which the mock only writes back
        at its end)?  A class's attributes are left out: natives read modules' state, and
        DistributedDataParallel's forward sets and resets ``_active_ddp_module`` on its class
        around every call, before its reducer's steps."""
        for node in self.graph.nodes[1:]:
            if isinstance(node.value, types.ModuleType) and len(node.versions) > 1:
                return True
            if node.kind is Kind.DICT and node.rel == CONST and not same_state(
                    state_of(node.value, node.kind), node.snapshot):
                return True
        return False


def _is_library_file(filename: str) -> bool:
    # torch's own Python code, the standard library (logging, contextlib ...) and magpy's
    # stand-ins of builtins: a break there is reported at the user's line that called into it.
    return "/torch/" in filename or filename.startswith(_STDLIB) or filename == builtin_standins.FILE


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


class RefGraphBuilder(Observer):
    """Updates a :class:`RefGraph` from the monitor's execution states."""

    def __init__(self, graph: RefGraph, breaker: Breaker):
        self.g = graph
        self.dynamic = breaker
        self.new_cells: set[int] = set()
        self.new_functions: set[int] = set()   # functions the run created (closures, lambdas)
        self.fixed_ids: set[int] = set()   # objects the guard fixes by identity as set members
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
                self._native_call(callee, args, kwargs, result)
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
        node = self.node(obj)
        if node is None:
            return
        for name, value in reads:
            child = self.g.child(node, GETATTR, name, value)   # (C members: no program code)
            if child is not None:
                self.expand(child)   # (the call takes all of a partial's arguments and keywords)

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
        fnode = self.node(fn) or self.g.const(fn)
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

    def _native_call(self, callee, args, kwargs, result):
        if ann.ends_recording(callee):
            self.dynamic("a magpy.disable() block")
            return
        if callee is next and args and self.opaque_contents(args[0], "next() of", step=True, changes=True):
            return
        if ann.records_itself(callee):
            return   # its effect is a step of its own (magpy.capture.callees.warnings_logging)
        a, bound = ann.lookup(callee)
        if a is None:
            if not ann.is_tensor_method(callee):
                self.dynamic(f"call to native {_describe(callee)} (no magpy annotation)", step=True)
                return
            a = ann.PURE  # a tensor method: recorded by __torch_function__; its arguments are read
        if not a.pure:
            self.dynamic(f"call to impure native {_describe(callee)}", step=True)
            return
        full = ((callee.__self__,) + tuple(args)) if bound else tuple(args)
        if self.hashed_call(callee, full) or self.changes_opaque(callee, a, full):
            return
        order_free = ann.set_order_free(callee)
        for i, v in enumerate(full):
            self.read_value(v, a.read_kind(i), callee)
            if not order_free:
                self.set_order(v, a.read_kind(i), _describe(callee))
        if kwargs:
            for v in kwargs.values():
                self.read_value(v, a.read_kind(len(full)), callee)
                if not order_free:
                    self.set_order(v, a.read_kind(len(full)), _describe(callee))
        if a.relation == "deref":
            _rel_deref(self, callee, result)
        elif a.relation is not None:
            _RELATIONS[a.relation](self, full, result)
        for i in a.inplace:
            if i == 0 and full:
                self.written_by(callee, full, kwargs)
            elif i < len(full):
                self.write(full[i])

    # ------------------------------------------------------------------ reads
    def node(self, v):
        return None if is_immutable(v) else self.g.node_of(v)

    def read_value(self, v, kind, what=None):
        """A native looked at ``v`` with ValueRead ``kind``."""
        if kind == ann.NONE or kind == ann.TYPE:
            return
        node = self.node(v)
        if node is None:
            return
        if self.opaque_contents(v, f"native {_describe(what)} reads", step=True):
            return
        if kind == ann.OPERAND:
            if node.kind in _CONTAINERS:
                self.expand(node, deep=True)
            return
        if node.kind in _PYTHON_OBJECTS and kind == ann.DEEP:
            self.dynamic(f"native {_describe(what)} reads an object of Python class "
                         f"{type(v).__qualname__}")
            return
        self.expand(node, deep=kind in (ann.DEEP, ann.ALL), objects=kind == ann.ALL)

    def expand(self, node, deep=False, _seen=None, objects=False):
        """The program read a container's structure: guard it, and every element is read.
        With ``objects``, a Python object's attributes are its elements (a copy reads them all)."""
        if node.kind not in _CONTAINERS and not (objects and node.kind is Kind.OBJECT):
            return
        if _seen is None:
            _seen = set()
        if node.id in _seen:
            return
        _seen.add(node.id)
        node.struct = True
        snap = node.snapshot
        items = snap.items() if type(snap) is dict else enumerate(snap)
        if node.kind is Kind.SET:
            # Its members are guarded by identity, in their order (codegen's shape check), so
            # each object member is a known object of the record, reached as a constant.
            for x in snap:
                if is_immutable(x):
                    continue
                if type_lookup(type(x), "__hash__") not in _ID_HASHES:
                    self.dynamic(f"a set of {type(x).__qualname__} (hashed by a Python __hash__) "
                                 "read as a whole")
                    return
                self.fixed_ids.add(id(x))
                if self.node(x) is None:
                    self.g.child(self.g.sn0, CONST, id(x), x)
            return
        rel = ATTR if node.kind is Kind.OBJECT else ITEM
        for k, v in items:
            child = self.g.child(node, rel, k, v)
            if deep and not objects and child is not None and child.kind in _PYTHON_OBJECTS:
                self.dynamic(f"a native reads an object of Python class {type(v).__qualname__}")
                return
            if deep:
                self.expand(child, True, _seen, objects)

    def set_order(self, v, kind, what):
        """``what`` looked at the iteration order of ``v``.  A set's order follows its
        members' hashes: fixed for values, but for objects hashed by identity (tensors,
        modules) only when the guard fixes which objects they are; otherwise another call's
        objects iterate in another order than the one the record baked in."""
        if kind in (ann.NONE, ann.TYPE) or not isinstance(v, (set, frozenset)):
            return
        for x in v:
            if is_immutable(x) or id(x) in self.fixed_ids:
                continue
            node = self.node(x)
            if node is None or node.kind is not Kind.STATIC or not node.read:
                self.dynamic(f"{what} depends on the iteration order of a set of "
                             f"{type(x).__qualname__} (it follows their ids)")
                return

    def read_item(self, node, key, value):
        """``value = container[key]`` on a node: a read of version 0 unless written since."""
        snap = node.snapshot
        if node.kind is Kind.DICT:
            try:
                if snap.get(key, _MISSING) is value and not self.g.overwritten(node, ITEM, key):
                    self.g.child(node, ITEM, key, value)
                elif key not in snap and (ITEM, key) not in node.written \
                        and type_lookup(type(node.value), "__missing__") is not NULL:
                    node.mark_absent(ITEM, key)   # (a defaultdict made it: not there before)
            except TypeError:
                pass
            return
        if node.kind not in (Kind.LIST, Kind.TUPLE):
            return
        if type(key) is slice:
            self.expand(node)
            return
        if not isinstance(key, int):
            return
        i = key if key >= 0 else len(snap) + key
        if key < 0:
            node.struct = True
        if 0 <= i < len(snap) and snap[i] is value:
            self.g.child(node, ITEM, i, value)
            return
        for j, v in enumerate(snap):  # the element moved since (insert, pop ...)
            if v is value:
                node.struct = True
                self.g.child(node, ITEM, j, value)
                return

    def read_attr(self, obj, name, value):
        """``value = obj.name`` where ``obj`` may be a node."""
        node = self.node(obj)
        if node is None or node.kind is Kind.VALUE:
            return
        if node.kind is Kind.TENSOR:
            # A leaf's .grad as the call found it (not one it wrote since): state it read.
            snap = node.snapshot
            if name in ann.TORCH_REFERENCES and snap is not None and snap.get(name, _MISSING) is value:
                self.g.child(node, ATTR, name, value)
            return
        if node.kind is Kind.METHOD:
            self._method_attr(node, obj, name, value)
            return
        tp = type(obj)
        if isinstance(obj, types.ModuleType):
            if not ann.is_builtin_module_attr(obj) and not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        if tp is types.FunctionType and name in obj.__dict__:
            # A function's own attribute (``step.calls``, ``fn.cache``): state as a module's
            # are, which the program or its caller changes.
            if not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        if name in attribute_access(tp).descriptors:
            return  # a property or Python descriptor: the monitor entered it
        if isinstance(obj, type):
            self._class_attr(obj, name, value)
            return
        d = getattr(obj, "__dict__", None)
        snap = node.snapshot if type(node.snapshot) is dict else None
        if type(d) is dict and (name in d or (snap is not None and name in snap)):
            if snap is not None and snap.get(name, _MISSING) is value \
                    and not self.g.overwritten(node, ATTR, name):
                self.g.child(node, ATTR, name, value)
            return
        getattr_fn = py_method(tp, "__getattr__")
        if getattr_fn in torchscript.NATIVE_GETATTRS and type_lookup(tp, name) is NULL:
            # A ScriptModule's __getattr__ (torch's, run natively) reads its C++ module, which
            # holds parameters, submodules and attributes alike: the guard asks it again.
            self.g.child(node, GETATTR, name, value)
            return
        if isinstance(obj, torch.nn.Module):
            for dname in _MODULE_DICTS:
                store = d.get(dname)
                if store is not None and name in store:
                    dnode = self.g.child(node, ATTR, dname, store)
                    self.read_item(dnode, name, value)
                    return
        for i, klass in enumerate(tp.__mro__):
            if name in klass.__dict__:
                if type(d) is dict:
                    node.mark_absent(ATTR, name)
                for before in tp.__mro__[:i]:
                    # Found on a base class: a class earlier in the MRO could gain it.
                    if self._mutable_class(before):
                        self.g.const(before).mark_absent(ATTR, name)
                self._class_attr(klass, name, klass.__dict__[name], raw=True)
                if type(klass.__dict__[name]) is types.MemberDescriptorType \
                        and (ATTR, name) not in node.written:
                    # A __slots__ attribute: the object's own value, as the call found it.
                    self.g.child(node, ATTR, name, value)
                return
        # Neither the object nor its class has it: a Python __getattr__ made the value.  The
        # monitor enters those; one that ran natively read unseen state.
        if getattr_fn is not None and getattr_fn is not torch.nn.Module.__getattr__ \
                and self.dynamic.monitor.policy.runs_natively(getattr_fn):
            self.dynamic(f"{tp.__qualname__}.{name} read through {getattr_fn.__qualname__}, "
                         "which runs natively")
            return
        # (where the object or a class gains it, __getattr__ is not asked)
        self.missing_attr(obj, name)

    def _method_attr(self, node, m, name, value):
        # A bound method's own members are its function and its object (the nodes that guard
        # it, RefGraph._method_parts); the rest of its attributes are its function's.  (The
        # method type's other entries, its special methods and ``__doc__``, run no program
        # code and say nothing the function's identity does not.)
        if name in _METHOD_PARTS:
            self.g.child(node, GETATTR, name, value)
        elif type_lookup(types.MethodType, name) is NULL:
            self.read_attr(m.__func__, name, value)

    def missing_attr(self, obj, name) -> None:
        """``obj`` has no attribute ``name`` (``getattr`` took its default, ``hasattr`` said
        False, an AttributeError): neither it nor a class of its MRO that can gain one may
        have it."""
        node = self.node(obj)
        if node is None or type(name) is not str or node.kind is Kind.TENSOR:
            return
        if node.kind is Kind.METHOD:
            self.missing_attr(obj.__func__, name)   # (looked up on its function)
            return
        d = getattr(obj, "__dict__", None)
        if node.kind in (Kind.OBJECT, Kind.STATIC) and type(d) in (dict, types.MappingProxyType) \
                and name not in (node.snapshot if type(node.snapshot) is dict else {}):
            node.mark_absent(ATTR, name)
        elif node.kind in _CONTAINERS and type(d) is dict:
            # A container subclass's instance attributes (a FrozenDict's): not its snapshot.
            self.g.child(node, ATTR, "__dict__", d).mark_absent(ITEM, name)
        for klass in (obj if isinstance(obj, type) else type(obj)).__mro__:
            if self._mutable_class(klass) and klass is not obj:
                self.g.const(klass).mark_absent(ATTR, name)

    def natively_made(self, tp) -> bool:
        """Does an attribute ``tp``'s instances lack come from a ``__getattr__`` that runs
        natively (reading state the monitor does not see)?"""
        getattr_fn = py_method(tp, "__getattr__")
        return getattr_fn is not None and self.dynamic.monitor.policy.runs_natively(getattr_fn)

    def native_failed(self, callee, args, kwargs) -> None:
        """A native call raised: what it read decided that (as for a call that returns), and
        a lookup found its key, item or attribute missing."""
        if ann.ends_recording(callee) or ann.records_itself(callee):
            return
        a, bound = ann.lookup(callee)
        if a is None and ann.is_tensor_method(callee):
            a = ann.PURE
        if a is None or not a.pure:
            return   # a dynamic operation: an eager step's exception (magpy.records.segments)
        full = ((callee.__self__,) + tuple(args)) if bound else tuple(args)
        if self.hashed_call(callee, full) or self.changes_opaque(callee, a, full):
            return
        for i, v in enumerate(full):
            self.read_value(v, a.read_kind(i), callee)
        for v in (kwargs or {}).values():
            self.read_value(v, a.read_kind(len(full)), callee)
        if a.relation == "attr" and len(full) >= 2:
            self.missing_attr(full[0], full[1])
        elif a.relation == "element" and full:
            self.missing_item(full[0], full[1] if len(full) > 1 else None)

    def missing_item(self, container, key) -> None:
        """``container[key]`` raised: a dict without the key, a sequence too short for it."""
        node = self.node(container)
        if node is None:
            return
        if node.kind is Kind.DICT:
            try:
                if key not in node.snapshot:
                    node.mark_absent(ITEM, key)
            except TypeError:
                pass   # an unhashable key: TypeError whatever the dict holds
        elif node.kind in (Kind.LIST, Kind.TUPLE):
            node.struct = True

    @staticmethod
    def _mutable_class(klass) -> bool:
        # C types cannot change; torch's classes are assumed not to be monkeypatched.
        return bool(klass.__flags__ & _HEAPTYPE) and not _is_library_file(
            getattr(sys.modules.get(klass.__module__), "__file__", None) or "")

    def _class_attr(self, klass, name, value, raw=False):
        """``value = klass.name``; with ``raw``, ``value`` is ``klass.__dict__[name]`` (an
        attribute lookup found it there).  What is guarded is what ``type.__getattribute__``
        looked at, so a guard can pass again: a data descriptor of the metaclass
        (``__name__``, ``__qualname__``: read by value), else the raw entry of the first class
        of the MRO (then the metaclass's) that has the name, and its absence before that."""
        if raw:
            if self._mutable_class(klass):
                self.g.child(self.g.const(klass), DICT, name, value)
            return
        meta = type(klass)
        desc = type_lookup(meta, name)
        if desc is not NULL and type_lookup(type(desc), "__set__") is not NULL:
            # A class's __dict__ is a new proxy at each read: the class's identity fixes it.
            if self._mutable_class(klass) and type(value) is not types.MappingProxyType:
                self.g.child(self.g.const(klass), ATTR, name, value)
            return
        lookup = klass.__mro__ + meta.__mro__
        for i, owner in enumerate(lookup):
            if name in owner.__dict__:
                for before in lookup[:i]:
                    if self._mutable_class(before):
                        self.g.const(before).mark_absent(ATTR, name)
                self._class_attr(owner, name, owner.__dict__[name], raw=True)
                return

    def hashes(self, container, keys, what: str) -> bool:
        """A native hashes ``keys`` into dict or set ``container`` (a lookup, a store; None:
        the keys of a new dict or set) and compares each with ``==`` to the members of equal
        hash.  Python ``__hash__`` and ``__eq__`` methods run there natively, so what they read
        is not seen: when they reach an object from outside the call (a key, a member), a
        changed attribute would give another result under a guard that passes.  That is a
        dynamic operation (True).  Hashing by identity or by a C slot runs no Python code."""
        parts = [p for k in keys for p in _key_parts(k)]
        members = () if container is None else (
            container.keys() if isinstance(container, dict) else container)
        runs = any(_python_hash(type(p)) or _python_eq(type(p)) for p in parts) or any(
            _python_eq(t) for t in set(map(type, members)))
        if not runs:
            return False
        outside = (container is not None and self.node(container) is not None) or any(
            self.node(x) is not None for x in (*parts, *members))
        if outside:
            self.dynamic(f"{what} runs a Python __hash__ or __eq__ of an object from outside the call")
        return outside

    def hashed_call(self, callee, full) -> bool:
        """``hashes`` for a native call (:data:`magpy.capture.annotations.HASHING_METHODS`)."""
        how = ann.hashing(callee)
        if how is None:
            return False
        kind, i = how
        if kind == "key":
            if i >= len(full) or not isinstance(full[0], _HASHED_CONTAINERS):
                return False
            return self.hashes(full[0], (full[i],), _describe(callee))
        into = full[0] if i and isinstance(full[0], _HASHED_CONTAINERS) else None
        keys = [x for arg in full[i:] if isinstance(arg, _CONTAINER_TYPES) for x in arg]
        return self.hashes(into, keys, _describe(callee))

    def python_dunder(self, obj, name):
        """A native operator on ``obj`` runs its Python ``name`` method, unmonitored."""
        node = self.node(obj)
        if node is None:
            return False
        fn = py_method(type(obj), name)
        if fn is None or (name in _ENTERED_DUNDERS and not self.dynamic.monitor.policy.runs_natively(fn)):
            return False  # native, or a Python method the monitor entered
        self.dynamic(f"{type(obj).__qualname__}.{name} (a Python method) called by a native operation")
        return True

    def changes_opaque(self, callee, a: ann.Annotation, full: tuple) -> bool:
        """Does native ``callee`` (annotation ``a``) change a mutable C object from outside the
        call that it is given (``deque.append``): an eager step that is an effect (True)."""
        what = f"native {_describe(callee)} changes"
        return any(self.opaque_contents(full[i], what, step=True, changes=True)
                   for i in a.inplace if i < len(full))

    def opaque_contents(self, v, what: str, step: bool = False, changes: bool = False) -> bool:
        """``what`` (a read, or a write: ``changes``) reaches the contents of ``v``, a mutable C
        container or iterator from outside the call (a deque, an ndarray, a list's iterator):
        the guard checks only its identity and the mock cannot make a change to it, so a read
        must not be baked in nor a write left out: a dynamic operation (True; ``step``: a native
        call's, an eager step, an effect where it ``changes`` ``v``).  (A continuation's frames
        hold iterators its mock makes anew where the check failed: those are the call's own,
        their items left guarded.)"""
        node = self.node(v)
        if (node is None or node.kind is not Kind.OPAQUE or not _mutable_opaque(v)
                or node.id in self.g.frame_iterators):
            return False
        self.dynamic(f"{what} a {type(v).__qualname__} from outside the call", step=step, changes=changes)
        return True

    # ------------------------------------------------------------------ writes
    def write(self, obj, rel=None, key=None, how=SET):
        """The program changed ``obj``: in slot ``(rel, key)`` (``how``: SET, DEL or POP, see
        :data:`_NATIVE_STORES`), or (``rel`` None) natively in ways not known slot by slot."""
        node = self.node(obj)
        if node is not None and not self.opaque_contents(obj, "a write to", changes=True):
            if py_method(type(obj), "__setattr__") in torchscript.NATIVE_SETATTRS:
                # The mock makes the writes it sees in snapshots of __dict__s; this one is not.
                self.dynamic(f"a write to {type(obj).__qualname__}, which keeps its attributes "
                             "in its C++ module")
            node.versions.append(ShadowVersion(node.versions[-1].refs))
            if rel == ATTR and node.snapshot is None and type(key) is str and (
                    is_namespace(obj) or slot_of(obj, key) is not None):
                # (a slot's presence is not in a __dict__ for the guard to check)
                node.stored(ATTR, key, how is not SET, must_exist=how is DEL and is_namespace(obj))
            elif node.kind is Kind.TENSOR:
                if rel == ATTR and key in (node.snapshot or ()):
                    # A leaf's .grad: replayed even where the call left it as found, since an
                    # eager step between (backward by the engine) may have set it.
                    node.stored(ATTR, key, how is not SET)
            elif node.snapshot is not None:
                self._stored(node, obj, rel, key, how)

    def _stored(self, node, obj, rel, key, how):
        deleted = how is not SET
        if rel is ADDED:
            return
        if rel is None or rel is CLEAR:
            node.rewritten_in_place(cleared=rel is CLEAR)
        elif rel == ATTR:
            self._stored_attr(node, obj, key, how)
        elif node.kind is Kind.LIST and type(key) is slice:
            node.rewritten_in_place(cleared=key == _ALL and not deleted)
        elif node.kind is Kind.LIST and isinstance(key, int) and not deleted:
            node.stored(ITEM, key if key >= 0 else key + len(obj))
        elif node.kind in (Kind.DICT, Kind.CELL):
            node.stored(rel, key, deleted, must_exist=how is DEL)
        else:
            node.rewritten_in_place()   # (a list's deleted item moves those after it)

    def _stored_attr(self, node, obj, name, how):
        """``obj.name = v`` (or ``del obj.name``): a slot of the dict the value went to (an
        nn.Module's parameters, buffers or submodules, else the instance ``__dict__``)."""
        d = getattr(obj, "__dict__", None)
        if type(d) is not dict or type(name) is not str:
            return
        if isinstance(obj, torch.nn.Module):
            for dname in _MODULE_DICTS:
                store = d.get(dname)
                dnode = node.children.get((ATTR, dname))
                if store is None or dnode is None or dnode.snapshot is None:
                    continue
                held = name in dnode.snapshot or (ITEM, name) in dnode.written
                if name in store or (how is not SET and held):
                    dnode.versions.append(ShadowVersion(dnode.versions[-1].refs))
                    dnode.stored(ITEM, name, how is not SET, must_exist=how is DEL)
                    return
        if how is not SET or name in d:
            node.stored(ATTR, name, how is not SET, must_exist=how is DEL)

    def written_by(self, callee, full, kwargs) -> None:
        """The slots a native that changes its first argument in place writes (setattr,
        ``d.setdefault(k, v)``, ``d.update(other)`` ...), else the whole of it."""
        method = _method_key(callee)
        try:
            slots = None if kwargs else _NATIVE_STORES.get(callee) or _NATIVE_STORES.get(method)
        except TypeError:   # (an unhashable callable a user annotated)
            slots = None
        if slots is None:
            slots = _added if method in _LIST_ADDITIONS else _whole
        for rel, key, how in slots(full):
            self.write(full[0], rel, key, how)


# --------------------------------------------------------------------------- instruction rules
def _load_global(b, frame, ins, inputs, outputs):
    value = outputs[-1]
    name = ins.argval
    g = frame.globals
    if name in g:
        b.read_item(b.g.const(g), name, value)   # (not one the call stored: RefGraph.overwritten)
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
        b.write(_cell_node(b, cell).value, CELL, None, DEL if ins.opname == "DELETE_DEREF" else SET)


def _for_iter(b, frame, ins, inputs, outputs):
    b.opaque_contents(inputs[0], "a for loop over", changes=True)


def _load_attr(b, frame, ins, inputs, outputs):
    b.read_attr(inputs[0], ins.argval, outputs[-1])


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
    if isinstance(container, dict) and b.hashes(container, (key,), "a dict lookup"):
        return
    node = b.node(container)
    if node is not None and node.kind in _CONTAINERS:
        b.read_item(node, key, outputs[0])
    elif node is not None and not b.opaque_contents(container, "an item read of"):
        b.python_dunder(container, "__getitem__")


def _binary_slice(b, frame, ins, inputs, outputs):
    container, start, stop = inputs
    _binary_subscr(b, frame, ins, (container, slice(start, stop)), outputs)


def _store_attr(b, frame, ins, inputs, outputs):
    b.write(inputs[1], ATTR, ins.argval)


def _store_subscr(b, frame, ins, inputs, outputs):
    if isinstance(inputs[1], dict) and b.hashes(inputs[1], (inputs[2],), "a dict store"):
        return
    if not b.opaque_contents(inputs[1], "an item store into", changes=True):
        b.python_dunder(inputs[1], "__setitem__")
        b.write(inputs[1], ITEM, _index_key(inputs[1], inputs[2]))


def _store_slice(b, frame, ins, inputs, outputs):
    value, container, start, stop = inputs
    _store_subscr(b, frame, ins, (value, container, slice(start, stop)), outputs)


def _delete_subscr(b, frame, ins, inputs, outputs):
    if isinstance(inputs[0], dict) and b.hashes(inputs[0], (inputs[1],), "a dict deletion"):
        return
    if not b.opaque_contents(inputs[0], "an item deletion from", changes=True):
        b.python_dunder(inputs[0], "__delitem__")
        b.write(inputs[0], ITEM, _index_key(inputs[0], inputs[1]), DEL)


def _delete_attr(b, frame, ins, inputs, outputs):
    b.write(inputs[0], ATTR, ins.argval, DEL)


def _store_global(b, frame, ins, inputs, outputs):
    b.write(frame.globals, ITEM, ins.argval, DEL if ins.opname == "DELETE_GLOBAL" else SET)


def _struct_read(position, dunder=None):
    def rule(b, frame, ins, inputs, outputs):
        v = inputs[position]
        node = b.node(v)
        if node is None or b.opaque_contents(v, f"{ins.opname} reads"):
            return
        if node.kind in _CONTAINERS:
            b.expand(node)
        elif dunder is not None:
            # The first of the protocol's methods the type has is the one called (truth:
            # ``__bool__``, else ``__len__``).
            for d in dunder:
                if type_lookup(type(v), d) is not NULL:
                    b.python_dunder(v, d)
                    return
    return rule


def _iterate(position):
    """The instruction iterates a value: a container's structure is read, a set's order too."""
    struct = _struct_read(position)

    def rule(b, frame, ins, inputs, outputs):
        struct(b, frame, ins, inputs, outputs)
        b.set_order(inputs[position], ann.STRUCT, ins.opname)
    return rule


def _expand_inputs(deep):
    """Every container input is read: element by element, or (``deep``) all the way down."""
    def rule(b, frame, ins, inputs, outputs):
        for v in inputs:
            node = b.node(v)
            if node is not None and node.kind in _CONTAINERS:
                b.expand(node, deep=deep)
            elif b.opaque_contents(v, f"{ins.opname} reads"):
                return
        for v in inputs:
            b.set_order(v, ann.STRUCT, ins.opname)
    return rule


def _binary_op(b, frame, ins, inputs, outputs):
    for v in inputs:
        node = b.node(v)
        if node is not None and node.kind in _CONTAINERS:
            b.expand(node, deep=True)
        elif b.opaque_contents(v, f"operator {ins.argrepr} reads"):
            return
        elif node is not None and node.kind is Kind.OBJECT:
            for name in _op_dunders(ins):
                if b.python_dunder(v, name):
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
    if isinstance(container, _HASHED_CONTAINERS) and b.hashes(container, (item,), "an 'in' test"):
        return
    _CONTAINS(b, frame, ins, inputs, outputs)


def _hashed_keys(keys):
    """A dict or set display (``{k: v}``, ``{k}``, comprehensions) hashes ``keys(inputs)``."""
    def rule(b, frame, ins, inputs, outputs):
        b.hashes(None, keys(inputs), "building a dict or set")
    return rule


def _is_op(b, frame, ins, inputs, outputs):
    a, c = inputs
    na, nc = b.node(a), b.node(c)
    if na is not None and nc is not None and na is not nc:
        na.distinct.append(nc)


def _format_value(b, frame, ins, inputs, outputs):
    v = inputs[0]
    b.set_order(v, ann.STRUCT, "formatting")
    node = b.node(v)
    if node is None:
        return
    if node.kind in _CONTAINERS:
        b.expand(node, deep=True)
    elif node.kind is Kind.OBJECT:
        for d in ("__format__", "__str__", "__repr__"):
            if b.python_dunder(v, d):
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
        b.missing_item(inputs[0], inputs[1])


def _attr_failed(b, frame, inputs, exc):
    if isinstance(exc, AttributeError):
        ins = frame.info.instructions[frame.lasti]
        b.missing_attr(inputs[0], ins.argval)


def _global_failed(b, frame, inputs, exc):
    if isinstance(exc, NameError):
        name = frame.info.instructions[frame.lasti].argval
        b.g.const(frame.globals).mark_absent(ITEM, name)
        b.g.const(frame.builtins).mark_absent(ITEM, name)


def _unpack_failed(b, frame, inputs, exc):
    node = b.node(inputs[0])
    if node is not None and node.kind in _CONTAINERS:
        b.expand(node)   # (too many or too few items: its length)


def _call_failed(b, frame, inputs, exc):
    # (keyword arguments are read as positional ones: the natives that fail on a lookup
    # take none; a Python callee's exception was first reported in its own frame)
    callee, args = bytecode.call_operands(inputs)
    if not isinstance(callee, (types.FunctionType, types.MethodType)):
        b.native_failed(callee, args, None)


_FAILED = {"BINARY_SUBSCR": _subscr_failed, "LOAD_ATTR": _attr_failed, "LOAD_METHOD": _attr_failed,
           "LOAD_GLOBAL": _global_failed, "UNPACK_SEQUENCE": _unpack_failed, "UNPACK_EX": _unpack_failed,
           "CALL": _call_failed}


# --------------------------------------------------------------------------- native relations
def _rel_attr(b, args, result):
    if len(args) >= 2 and type(args[1]) is str:
        obj, name = args[0], args[1]
        d = getattr(obj, "__dict__", None)
        if len(args) == 3 and result is args[2] and not hasattr(type(obj), name) and (
                type(d) is not dict or name not in d):
            b.missing_attr(obj, name)  # getattr(obj, name, default) took the default
            return
        b.read_attr(obj, name, result)


def _rel_hasattr(b, args, result):
    obj, name = args[0], args[1]
    node = b.node(obj)
    if node is None or type(name) is not str or node.kind is Kind.TENSOR:
        return  # a tensor's attributes come from its type
    if result:
        try:
            b.read_attr(obj, name, getattr(obj, name))
        except Exception:  # noqa: BLE001 - the attribute vanished; the guard will miss
            pass
    elif node.kind in (Kind.OBJECT, Kind.STATIC, Kind.METHOD) or not b.natively_made(type(obj)):
        b.missing_attr(obj, name)   # (a Python __getattr__ ran monitored: what it read is seen)
    else:
        b.dynamic(f"hasattr on {type(obj).__qualname__}")


def _rel_element(b, args, result):
    if not args:
        return
    node = b.node(args[0])
    if node is None or node.kind not in _CONTAINERS:
        return
    if node.kind is Kind.DICT and len(args) >= 2:
        if args[1] in node.snapshot:
            b.read_item(node, args[1], result)
        else:
            node.mark_absent(ITEM, args[1])
        return
    snap = node.snapshot
    for k, v in (snap.items() if node.kind is Kind.DICT else enumerate(snap)):
        if v is result:
            b.read_item(node, k, result)
            return
    b.expand(node)


def _rel_contextvar(b, args, result):
    node = b.node(args[0])
    if node is not None and node.kind is Kind.CONTEXTVAR and node.snapshot[0] is result:
        b.g.child(node, VAR, None, result)


def _rel_deref(b, ref, result):
    # A weakref read from outside: what it refers to now is guarded (its referent, or None).
    node = b.node(ref)
    if node is not None:
        b.g.child(node, DEREF, None, result)


def _rel_frame(b, args, result):
    # The monitor's frames of this call are the record's; the caller's frames outside it
    # (``sys._getframe(n)`` reaching past the compiled function) differ from call to call.
    if type(result) is not Frame:
        b.dynamic("sys._getframe reaches a frame outside the compiled call")


_RELATIONS = {"attr": _rel_attr, "frame": _rel_frame, "hasattr": _rel_hasattr, "element": _rel_element,
              "contextvar": _rel_contextvar}


_ALL = slice(None, None, None)   # ``L[:] = ...`` replaces everything


def _method_key(callee):
    """``(type, name)`` of a method of a builtin container, bound or not, else None."""
    owner = getattr(callee, "__self__", None)
    objclass = getattr(callee, "__objclass__", None)
    tp = objclass if objclass is not None else (type(owner) if owner is not None else None)
    name = getattr(callee, "__name__", None)
    if tp is None or name is None:
        return None
    for base in (dict, list, set):
        if issubclass(tp, base):
            return base, name
    if name in ("__setattr__", "__delattr__"):   # (``super().__setattr__``: object's, bound)
        return object, name
    return None


def _update_slots(full):
    # dict.update(other): other's keys (an iterable of pairs is consumed by now: not known).
    # Its keyword arguments are not in ``full``: the whole dict then.
    if len(full) == 2 and isinstance(full[1], dict):
        return [(ITEM, k, SET) for k in full[1]]
    return [(None, None, SET)]


def _slot(rel, how):
    return lambda a: [(rel, a[1], how)]


# Natives that change their first argument in place, slot by slot: args -> [(rel, key, how)]
# (see ``RefGraphBuilder.write``).  Any other changes it whole.
_NATIVE_STORES = {
    setattr: _slot(ATTR, SET), delattr: _slot(ATTR, DEL),
    (object, "__setattr__"): _slot(ATTR, SET), (object, "__delattr__"): _slot(ATTR, DEL),
    operator.setitem: _slot(ITEM, SET), operator.delitem: _slot(ITEM, DEL),
    **{(tp, "__setitem__"): _slot(ITEM, SET) for tp in (dict, list)},
    **{(tp, "__delitem__"): _slot(ITEM, DEL) for tp in (dict, list)},
    (dict, "setdefault"): _slot(ITEM, SET), (dict, "pop"): _slot(ITEM, POP),
    (dict, "update"): _update_slots,
    **{(tp, "clear"): (lambda a: [(CLEAR, None, SET)]) for tp in (dict, list, set)},
}
# List methods that only add items at the end (the mock extends the list).
_added = lambda a: [(ADDED, None, SET)]  # noqa: E731
_whole = lambda a: [(None, None, SET)]  # noqa: E731
_LIST_ADDITIONS = frozenset({(list, "append"), (list, "extend"), (list, "__iadd__")})


_HASHED_CONTAINERS = (dict, set, frozenset, type({}.keys()))
_CONTAINER_TYPES = (list, tuple, dict, set, frozenset)


def _key_parts(key, depth: int = 3):
    """The objects hashing ``key`` hashes: the key, and a tuple key's items."""
    yield key
    if type(key) is tuple and depth:
        for x in key:
            yield from _key_parts(x, depth - 1)


def _python_hash(tp) -> bool:
    fn = py_method(tp, "__hash__")
    return fn is not None and fn not in ann.STABLE_HASHES


def _python_eq(tp) -> bool:
    return py_method(tp, "__eq__") is not None


def _mutable_opaque(v) -> bool:
    """Is ``v`` a mutable C object whose value the guard cannot check: a container (numpy's
    only if it is loaded), a live view of one (a class's ``__dict__``), or an iterator (a
    list's, a generator, ``map``, ``itertools.count``: its position moves on each ``next``)?"""
    np = sys.modules.get("numpy")
    opaque = (bytearray, array.array, collections.deque, types.MappingProxyType)
    return isinstance(v, opaque if np is None else (*opaque, np.ndarray)) or hasattr(type(v), "__next__")


def _describe(callee) -> str:
    name = getattr(callee, "__qualname__", None) or getattr(callee, "__name__", None) or type(callee).__name__
    mod = getattr(callee, "__module__", None)
    owner = getattr(callee, "__self__", None)
    if ann.is_pybind(owner):   # bound to its function record, whose type name says nothing
        return f"{mod}.{callee.__name__}"
    if owner is not None and not isinstance(owner, types.ModuleType):
        return f"{type(owner).__qualname__}.{getattr(callee, '__name__', name)}"
    return f"{mod}.{name}" if mod and mod != "builtins" else name

