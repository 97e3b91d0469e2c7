"""What the RefGraph cannot hold: code a native runs unmonitored (a Python ``__hash__`` or
``__eq__`` hashing keys, a Python special method an operator calls) reads state the monitor
does not see, and the contents of a mutable C object (a deque, an ndarray, an iterator) are
state the guard cannot check nor the mock change.  Where they reach objects from outside the
call, the operation is dynamic.
"""
from __future__ import annotations

import array
import collections
import sys
import types

from magpy.capture import annotations as ann
from magpy.capture.monitor import operators
from magpy.capture.monitor.protocols import py_method
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import Kind, RefGraph
from magpy.capture.refgraph.reads import Reads

# What a lookup, a store or an ``in`` test hashes its keys into.
HASHED_CONTAINERS = (dict, set, frozenset, type({}.keys()))
# Special methods the monitor enters when they are Python code (magpy.capture.monitor.operators).
_ENTERED_DUNDERS = frozenset(
    {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__bool__", "__len__", "__iter__",
     "__hash__", *operators.UNARY}
    | {name for _, op, rop, _ in operators.BINARY for name in (op, rop, "__i" + op[2:])}
    | {name for _, name, _ in operators.COMPARE})


class Unseen:
    """Detects the operations whose reads or writes the RefGraph cannot hold."""

    def __init__(self, graph: RefGraph, breaker: Breaker, reads: Reads):
        self.g = graph
        self.dynamic = breaker
        self.reads = reads

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
        outside = (container is not None and self.reads.node(container) is not None) or any(
            self.reads.node(x) is not None for x in (*parts, *members))
        if outside:
            self.dynamic(f"{what} runs a Python __hash__ or __eq__ of an object from outside the call")
        return outside

    def python_dunder(self, obj, name):
        """A native operator on ``obj`` runs its Python ``name`` method, unmonitored."""
        node = self.reads.node(obj)
        if node is None:
            return False
        fn = py_method(type(obj), name)
        if fn is None or (name in _ENTERED_DUNDERS and not self.dynamic.monitor.policy.runs_natively(fn)):
            return False  # native, or a Python method the monitor entered
        self.dynamic(f"{type(obj).__qualname__}.{name} (a Python method) called by a native operation")
        return True

    def opaque_contents(self, v, what: str, step: bool = False, changes: bool = False) -> bool:
        """``what`` (a read, or a write: ``changes``) reaches the contents of ``v``, a mutable C
        container or iterator from outside the call (a deque, an ndarray, a list's iterator):
        the guard checks only its identity and the mock cannot make a change to it, so a read
        must not be baked in nor a write left out: a dynamic operation (True; ``step``: a native
        call's, an eager step, an effect where it ``changes`` ``v``).  (A continuation's frames
        hold iterators its mock makes anew where the check failed: those are the call's own,
        their items left guarded.)"""
        node = self.reads.node(v)
        if (node is None or node.kind is not Kind.OPAQUE or not _mutable_opaque(v)
                or node.id in self.g.frame_iterators):
            return False
        self.dynamic(f"{what} a {type(v).__qualname__} from outside the call", step=step, changes=changes)
        return True


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

