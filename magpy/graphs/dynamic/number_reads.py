"""Numbers a call reads from program state (``magpy.graphs.dynamic``): an attribute, a global,
a dict item or a closure cell holding a float or int that changed between recordings (an
optimizer's ``group["lr"]`` under an LR scheduler, a scheduler's ``last_epoch``) is lifted
where it is read, as an argument is where the call starts."""
from __future__ import annotations

from magpy.capture.refgraph.graph import ATTR, CELL, DICT, ITEM
from magpy.graphs.dynamic.lifted_floats import LiftedFloats
from magpy.graphs.dynamic.lifted_shadows import Items
from magpy.graphs.dynamic.lifting import Lifting
from magpy.graphs.dynamic.stores import Stores
from magpy.graphs.dynamic.twins import Twins

# Instructions that read a number from outside the call: an attribute, a global.
_READS = frozenset({"LOAD_ATTR", "LOAD_GLOBAL", "BINARY_SUBSCR", "LOAD_DEREF"})
# What such a read may lift: a number, or a tuple's floats (an optimizer's ``group["betas"]``).
_READ_TYPES = (float, int, tuple)


class NumberReads:
    """The reads of numbers from outside one recording's call, and the shadows of the ones it
    lifted (by RefGraph node: each read of one gets the same)."""

    def __init__(self, lifting: Lifting, mode: bool | None, refgraph, twins: Twins, floats: LiftedFloats,
                 stores: Stores):
        self.lifting, self.mode, self.refgraph = lifting, mode, refgraph
        self.twins, self.floats, self.stores = twins, floats, stores
        self.shadows: dict[int, object] = {}   # node id -> shadow of a lifted attribute or global

    def observe(self, f, ins, inputs, outputs) -> None:
        """Instruction ``ins`` just executed: if it read a number, its shadow."""
        if ins.opname in _READS and type(outputs[-1]) in _READ_TYPES:
            self._read(f, ins, inputs, outputs[-1])

    def _read(self, f, ins, inputs, value) -> None:
        """``obj.name``, a global or ``d[key]`` of a dict read a number: one this call stored
        from sizes gets its SymInt back; one from outside the call (a RefGraph node) that
        changed between recordings is lifted (a float's shadow, or an int's symbol).  An
        optimizer's ``group["lr"]`` is such a dict item: under an LR scheduler it changes."""
        where = _number_holder(f, ins, inputs, value)
        if where is None:
            return
        obj, rel, name = where
        stored = self.stores.read_back(obj, name, value)
        if stored is not None:
            f.shadow_stack[-1] = stored
            return
        sn = self._outside(obj, rel, name, value) if rel is not None else None
        if sn is None:
            return
        if type(value) is tuple:
            self._tuple_read(f, sn)
            return
        shadow = self.shadows.get(sn.id)
        if shadow is None and self.lifting.scalar(None, sn):
            shadow = self.floats.lift(sn) if type(value) is float else self.twins.int_symbol(sn)
            self.shadows[sn.id] = shadow
        if shadow is not None:
            f.shadow_stack[-1] = shadow
            self.floats.remember(shadow)

    def _outside(self, obj, rel, name, value):
        """The RefGraph node of ``value``, read from ``obj`` (``rel``, ``name``), if it is the
        value the call found there (None for one it put there itself)."""
        parent = self.refgraph.node_of(obj) if self.lifting.values else None
        sn = parent.children.get((rel, name)) if parent is not None else None
        if sn is None and parent is not None and rel == ATTR and isinstance(obj, type):
            sn = parent.children.get((DICT, name))   # (a class attribute: read from its dict)
        if sn is None or sn.value is not value or self.mode is not None or not sn.read:
            return None   # (dynamic=True lifts the arguments only, as torch.compile does)
        if self.refgraph.overwritten(parent, rel, name):
            return None   # the call's own value, though the object is the one it found (a small int)
        return sn

    def _tuple_read(self, f, sn) -> None:
        """A tuple from outside the call (node ``sn``) whose floats changed between recordings
        (an optimizer's ``group["betas"]``, which OneCycleLR moves every step): those floats
        are lifted, each a node of its own; the guard checks the tuple's type and length and
        its other items by value (:meth:`LiftedFloats.value_checks`)."""
        shadow = self.shadows.get(sn.id)
        if shadow is None:
            shadow = self.tuple_items(sn)
            if shadow is None:
                return
            self.shadows[sn.id] = shadow
        f.shadow_stack[-1] = shadow
        for s in shadow:
            self.floats.remember(s)

    def tuple_items(self, sn) -> Items | None:
        """The shadow of the tuple of node ``sn`` with the floats that changed between
        recordings lifted, each a node of its own (None if none changed)."""
        lifted = [self.lifting.item(sn, i) for i in range(len(sn.value))]
        if not any(lifted):
            return None
        return self.floats.lift_items(sn, lifted, lambda i, x: self.refgraph.child(sn, ITEM, i, x))


def _number_holder(f, ins, inputs, value) -> tuple | None:
    """``(object, relation, key)`` of what a number read reads: an attribute, a global, or a
    dict item under a string key (None for other subscripts).  The relation is None for an
    int dict item: it stays a guarded value, unless the call stored a size there itself
    (``d["n"] = b``, read back: :class:`magpy.graphs.dynamic.stores.Stores`)."""
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
