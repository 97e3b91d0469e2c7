"""Sizes and lifted floats the call stores into program state (``magpy.graphs.dynamic``):
``obj.n = b``, a scheduler's ``group["lr"] = lr``.  The mock writes such a value from each
call's own sizes and floats instead of the guard requiring the recorded one, and the call
reading it back gets its shadow back; a write the monitor did not see keeps the value."""
from __future__ import annotations

from magpy.capture.refgraph.graph import ATTR, ITEM, is_namespace, namespace_twin
from magpy.graphs.dynamic.lifted_shadows import Items, Scalar, specialise, symbolic


class Stores(dict):
    """``(id(holder), key) -> (holder, value, shadow)``: the last value with a shadow (a size's
    SymInt, a lifted float's) the call stored into an object's attribute ``key``, or item
    ``key`` of a dict or of a list or tuple it made (``rules._store`` records them)."""

    def forget(self, f, ins, inputs) -> None:
        """Instruction ``ins`` just wrote or deleted an attribute, an item or a global: what
        the call stored there before is gone (the rule may record the new value)."""
        if ins.opname in ("STORE_ATTR", "DELETE_ATTR"):
            self.pop((id(inputs[-1]), ins.argval), None)
        elif ins.opname in ("STORE_SUBSCR", "DELETE_SUBSCR"):
            self.pop(_subscript_key(inputs), None)
        elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            self.pop((id(f.globals), ins.argval), None)

    def shadow(self, holder, key):
        """The shadow (a SymInt, or a lifted float's ``Scalar``) of what the mock writes to
        attribute ``key`` of object ``holder``, item ``key`` of a dict or a list the call
        made, if the last write to it in the run stored a size or a lifted float's value
        (None: write the value as recorded)."""
        return stored_then(self, holder, key, _held(holder, key))

    def read_back(self, obj, name, value):
        """The shadow of ``value``, just read from ``obj``'s attribute or item ``name``, if the
        call stored it there (a tuple: its items' shadows, where it stored them), else None."""
        stored = self.get((id(obj), name))
        if stored is None and (twin := namespace_twin(obj)) is not None:
            stored = self.get((id(twin), name))   # (``MOD.N = b`` read as the global N)
        if stored is not None and stored[1] is value:
            return stored[2]
        if type(value) is not tuple or not self:
            return None
        entries = [self.get((id(value), i)) for i in range(len(value))]
        if not any(e is not None and e[0] is value for e in entries):
            return None
        return Items(e[2] if e is not None and e[0] is value else None for e in entries)

    def settle(self, refgraph) -> None:
        """End of the run: a size stored where the object held that very value already is no
        change the mock writes, so the record keeps the value instead (a lifted float put back
        where it was read needs nothing).  A list the call made has no snapshot: all new."""
        for (_, name), (obj, value, s) in self.items():
            holder = refgraph.node_of(obj)
            snapshot = getattr(holder, "snapshot", None)
            if type(obj) in (list, tuple) and holder is None:
                continue
            if holder is not None and is_namespace(obj):
                continue   # (a function's, class's or module's: UpdateWriter.attributes_update)
            if type(obj) is list and type(snapshot) is tuple:   # (a list from outside: a tuple snapshot)
                snapshot = list(snapshot)
            unchanged = _held(snapshot, name) is value
            if type(snapshot) not in (dict, list) or unchanged and not _read_back(holder, name, s):
                specialise(s)


def stored_then(stores: dict, holder, key, held):
    """:meth:`Stores.shadow` as of a moment of the run (a resume point, ``magpy.records.continuations``):
    ``stores`` a copy of the :class:`Stores` taken then, ``held`` what ``holder`` held at ``key``
    then (a continuation writes the state of its point, not the run's last)."""
    entry = stores.get((id(holder), key))
    if entry is None or entry[0] is not holder:
        return None
    if held is not entry[1]:
        # Written again where the monitor did not see it: the record keeps the value.
        specialise(entry[2])
        return None
    return entry[2] if symbolic(entry[2]) else None


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
    """The key of ``obj[key]`` written by STORE_SUBSCR (``value, obj, key``) or deleted by
    DELETE_SUBSCR (``obj, key``)."""
    obj, key = inputs[-2:]
    try:
        hash(key)
    except TypeError:
        key = None
    return id(obj), key
