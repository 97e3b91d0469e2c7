"""Reads of state from outside (paper §4.1): a value the program reached from outside has a
node, and reading from it makes child nodes, lazily, as version 0 found them.  An item read
makes one child; a structural read (iteration, ``len``, unpacking, a native taking the whole)
expands a container into all its elements, and a set's iteration order is read with it.
"""
from __future__ import annotations

import torch

from magpy.capture import annotations as ann
from magpy.capture.monitor.protocols import NULL, type_lookup
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import ATTR, CONST, ITEM, Kind, RefGraph, ShadowNode, is_immutable

MISSING = object()   # a key a snapshot lacks (where the value read may be None)
CONTAINERS = (Kind.LIST, Kind.TUPLE, Kind.DICT, Kind.SET)
# What a native reading deep into cannot follow: a Python object (its __repr__, __eq__ ... run
# natively), a bound method with it (a method's repr is its object's).
PYTHON_OBJECTS = (Kind.OBJECT, Kind.METHOD)
# Hashes that are the object's identity: a set holding such objects iterates in an order that
# follows their ids, and set operations on them run no Python code.
_ID_HASHES = (object.__hash__, torch.Tensor.__hash__)


class Reads:
    """What the program read of the containers it reached from outside; ``fixed_ids``, the
    objects the guard fixes by identity as set members."""

    def __init__(self, graph: RefGraph, breaker: Breaker):
        self.g = graph
        self.dynamic = breaker
        self.fixed_ids: set[int] = set()

    def node(self, v) -> ShadowNode | None:
        """The node of ``v`` if the program reached it from outside (an immutable value has
        none: it is guarded by value where it is read)."""
        return None if is_immutable(v) else self.g.node_of(v)

    def expand(self, node, deep=False, _seen=None, objects=False):
        """The program read a container's structure: guard it, and every element is read.
        With ``objects``, a Python object's attributes are its elements (a copy reads them all)."""
        if node.kind not in CONTAINERS and not (objects and node.kind is Kind.OBJECT):
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
            if deep and not objects and child is not None and child.kind in PYTHON_OBJECTS:
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
                if snap.get(key, MISSING) is value and not self.g.overwritten(node, ITEM, key):
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

