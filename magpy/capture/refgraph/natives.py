"""Native calls (paper Figure 12): a native runs unmonitored, so what it read, related and
changed comes from its annotation (magpy.capture.annotations).  Its arguments are read as its
ValueRead says, its result related to them as its Relation says (``getattr``, ``hasattr``, an
element, a ContextVar's value, a weakref's referent), its InPlace arguments written; an
unannotated or impure native is a dynamic operation.
"""
from __future__ import annotations

import types

from magpy.capture import annotations as ann
from magpy.capture.monitor.frame import Frame
from magpy.capture.refgraph.attributes import AttributeReads
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import DEREF, ITEM, VAR, Kind, RefGraph
from magpy.capture.refgraph.reads import CONTAINERS, PYTHON_OBJECTS, Reads
from magpy.capture.refgraph.stores import Stores
from magpy.capture.refgraph.unseen import HASHED_CONTAINERS, Unseen

_CONTAINER_TYPES = (list, tuple, dict, set, frozenset)


class NativeCalls:
    """Updates the RefGraph for the calls of natives, as their annotations say."""

    def __init__(self, graph: RefGraph, breaker: Breaker, reads: Reads, attrs: AttributeReads,
                 unseen: Unseen, stores: Stores):
        self.g = graph
        self.dynamic = breaker
        self.reads = reads
        self.attrs = attrs
        self.unseen = unseen
        self.stores = stores

    def returned(self, callee, args, kwargs, result) -> None:
        """Native ``callee`` returned ``result``: what its annotation says it read, related and
        changed (Figure 12); unannotated or impure, it is dynamic."""
        if ann.ends_recording(callee):
            self.dynamic("a magpy.disable() block")
            return
        if callee is next and args and self.unseen.opaque_contents(
                args[0], "next() of", step=True, changes=True):
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
                self.reads.set_order(v, a.read_kind(i), _describe(callee))
        if kwargs:
            for v in kwargs.values():
                self.read_value(v, a.read_kind(len(full)), callee)
                if not order_free:
                    self.reads.set_order(v, a.read_kind(len(full)), _describe(callee))
        if a.relation == "deref":
            _rel_deref(self, callee, result)
        elif a.relation is not None:
            _RELATIONS[a.relation](self, full, result)
        for i in a.inplace:
            if i == 0 and full:
                self.stores.written_by(callee, full, kwargs)
            elif i < len(full):
                self.stores.write(full[i])

    def read_value(self, v, kind, what=None):
        """A native looked at ``v`` with ValueRead ``kind``."""
        if kind == ann.NONE or kind == ann.TYPE:
            return
        node = self.reads.node(v)
        if node is None:
            return
        if self.unseen.opaque_contents(v, f"native {_describe(what)} reads", step=True):
            return
        if kind == ann.OPERAND:
            if node.kind in CONTAINERS:
                self.reads.expand(node, deep=True)
            return
        if node.kind in PYTHON_OBJECTS and kind == ann.DEEP:
            self.dynamic(f"native {_describe(what)} reads an object of Python class "
                         f"{type(v).__qualname__}")
            return
        self.reads.expand(node, deep=kind in (ann.DEEP, ann.ALL), objects=kind == ann.ALL)

    def raised(self, callee, args, kwargs) -> None:
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
            self.attrs.missing_attr(full[0], full[1])
        elif a.relation == "element" and full:
            self.reads.missing_item(full[0], full[1] if len(full) > 1 else None)

    def hashed_call(self, callee, full) -> bool:
        """``hashes`` for a native call (:data:`magpy.capture.annotations.HASHING_METHODS`)."""
        how = ann.hashing(callee)
        if how is None:
            return False
        kind, i = how
        if kind == "key":
            if i >= len(full) or not isinstance(full[0], HASHED_CONTAINERS):
                return False
            return self.unseen.hashes(full[0], (full[i],), _describe(callee))
        into = full[0] if i and isinstance(full[0], HASHED_CONTAINERS) else None
        keys = [x for arg in full[i:] if isinstance(arg, _CONTAINER_TYPES) for x in arg]
        return self.unseen.hashes(into, keys, _describe(callee))

    def changes_opaque(self, callee, a: ann.Annotation, full: tuple) -> bool:
        """Does native ``callee`` (annotation ``a``) change a mutable C object from outside the
        call that it is given (``deque.append``): an eager step that is an effect (True)."""
        what = f"native {_describe(callee)} changes"
        return any(self.unseen.opaque_contents(full[i], what, step=True, changes=True)
                   for i in a.inplace if i < len(full))


def _rel_attr(n, args, result):
    if len(args) >= 2 and type(args[1]) is str:
        obj, name = args[0], args[1]
        d = getattr(obj, "__dict__", None)
        if len(args) == 3 and result is args[2] and not hasattr(type(obj), name) and (
                type(d) is not dict or name not in d):
            n.attrs.missing_attr(obj, name)  # getattr(obj, name, default) took the default
            return
        n.attrs.read_attr(obj, name, result)


def _rel_hasattr(n, args, result):
    obj, name = args[0], args[1]
    node = n.reads.node(obj)
    if node is None or type(name) is not str or node.kind is Kind.TENSOR:
        return  # a tensor's attributes come from its type
    if result:
        try:
            n.attrs.read_attr(obj, name, getattr(obj, name))
        except Exception:  # noqa: BLE001 - the attribute vanished; the guard will miss
            pass
    elif node.kind in (Kind.OBJECT, Kind.STATIC, Kind.METHOD) or not n.attrs.natively_made(type(obj)):
        n.attrs.missing_attr(obj, name)   # (a Python __getattr__ ran monitored: what it read is seen)
    else:
        n.dynamic(f"hasattr on {type(obj).__qualname__}")


def _rel_element(n, args, result):
    if not args:
        return
    node = n.reads.node(args[0])
    if node is None or node.kind not in CONTAINERS:
        return
    if node.kind is Kind.DICT and len(args) >= 2:
        if args[1] in node.snapshot:
            n.reads.read_item(node, args[1], result)
        else:
            node.mark_absent(ITEM, args[1])
        return
    snap = node.snapshot
    for k, v in (snap.items() if node.kind is Kind.DICT else enumerate(snap)):
        if v is result:
            n.reads.read_item(node, k, result)
            return
    n.reads.expand(node)


def _rel_contextvar(n, args, result):
    node = n.reads.node(args[0])
    if node is not None and node.kind is Kind.CONTEXTVAR and node.snapshot[0] is result:
        n.g.child(node, VAR, None, result)


def _rel_deref(n, ref, result):
    # A weakref read from outside: what it refers to now is guarded (its referent, or None).
    node = n.reads.node(ref)
    if node is not None:
        n.g.child(node, DEREF, None, result)


def _rel_frame(n, args, result):
    # The monitor's frames of this call are the record's; the caller's frames outside it
    # (``sys._getframe(n)`` reaching past the compiled function) differ from call to call.
    if type(result) is not Frame:
        n.dynamic("sys._getframe reaches a frame outside the compiled call")


_RELATIONS = {"attr": _rel_attr, "frame": _rel_frame, "hasattr": _rel_hasattr, "element": _rel_element,
              "contextvar": _rel_contextvar}


def _describe(callee) -> str:
    name = getattr(callee, "__qualname__", None) or getattr(callee, "__name__", None) or type(callee).__name__
    mod = getattr(callee, "__module__", None)
    owner = getattr(callee, "__self__", None)
    if ann.is_pybind(owner):   # bound to its function record, whose type name says nothing
        return f"{mod}.{callee.__name__}"
    if owner is not None and not isinstance(owner, types.ModuleType):
        return f"{type(owner).__qualname__}.{getattr(callee, '__name__', name)}"
    return f"{mod}.{name}" if mod and mod != "builtins" else name

