"""Writes (paper §5.3): a store into a node from outside adds a version, and marks the slot
it changed, so the mock replays just that change (a store, a deletion, a list extended, a
container rewritten whole).  Python stores come from instructions; a native's from its
annotation's InPlace, slot by slot where the native is known (``setattr``, ``dict.update``).
"""
from __future__ import annotations

import operator

import torch

from magpy.capture.callees import torchscript
from magpy.capture.monitor.protocols import py_method
from magpy.capture.refgraph.attributes import MODULE_DICTS
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import ATTR, ITEM, Kind, ShadowVersion, is_namespace, slot_of
from magpy.capture.refgraph.reads import Reads
from magpy.capture.refgraph.unseen import Unseen

# How a store changes a slot: SET stores, DEL deletes what must be there (else it raises), POP
# deletes what may be missing.  Slot relations besides the RefGraph's: CLEAR (the whole of it
# emptied), ADDED (items added at the end of a list, which the mock extends).
SET, DEL, POP = "set", "del", "pop"
CLEAR, ADDED = "clear", "added"


class Stores:
    """Adds the versions the program's writes to objects from outside make."""

    def __init__(self, breaker: Breaker, reads: Reads, unseen: Unseen):
        self.dynamic = breaker
        self.reads = reads
        self.unseen = unseen

    def write(self, obj, rel=None, key=None, how=SET):
        """The program changed ``obj``: in slot ``(rel, key)`` (``how``: SET, DEL or POP, see
        :data:`_NATIVE_STORES`), or (``rel`` None) natively in ways not known slot by slot."""
        node = self.reads.node(obj)
        if node is not None and not self.unseen.opaque_contents(obj, "a write to", changes=True):
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
            for dname in MODULE_DICTS:
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
# (see ``Stores.write``).  Any other changes it whole.
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
