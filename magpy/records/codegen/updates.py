"""The mock's in-place updates of the objects that were there before the call (paper §4.2).

A pre-existing list, dict, object, cell ... the call changed is updated where it is, so
aliases held elsewhere see the change: the slots the program stored into or deleted,
where the result comes out as eager's (a dict's order of keys included), else the whole of
it, rewritten (which the RefGraph hears of: ``RefGraph.rewritten``).  They are the mock's
second phase, written after everything that can fail (``codegen.mock``).
"""
from __future__ import annotations

import torch

from magpy.capture.refgraph.graph import UNSET, Kind, same_key, state_of, stored_attributes
from magpy.errors import CaptureError
from magpy.records.codegen.values import ValueWriter


class UpdateWriter:
    """Writes the in-place updates into the block :class:`ValueWriter` is writing."""

    def __init__(self, values: ValueWriter):
        self.values = values
        self.g = values.g
        self.expr, self.key = values.expr, values.key   # (sources of values, in the block being written)

    def commit(self, line: str) -> None:
        """An update, in the block being written (``Block.commit``)."""
        self.values.block.commit(line)

    def update(self, node, now=None):
        """Write ``node``'s change: from its first state to ``now`` (``refgraph.state_of``'s
        form; default: its state now)."""
        v = self.values.load(node)
        k = node.kind
        snap = node.snapshot
        if now is None:
            now = state_of(node.value, k) if snap is not None else stored_attributes(node)
        if k is Kind.LIST:
            self.list_update(node, v, now, snap)
        elif k is Kind.DICT:
            self.dict_update(node, v, now, snap, mapping=v)
        elif snap is None:   # a module's, class's or __slots__' attributes
            self.attributes_update(node, v, now)
        elif k is Kind.OBJECT or isinstance(node.value, torch.nn.Module):
            self.commit(f"    d{node.id} = {v}.__dict__")
            self.dict_update(node, v, now, snap, mapping=f"d{node.id}")
        elif k is Kind.CELL:
            if now:
                contents = self.values.cell_value(node.value, now[0], self.commit)
                self.commit(f"    {v}.cell_contents = {contents}")
            else:
                self.commit(f"    del {v}.cell_contents")
        elif k is Kind.CONTEXTVAR:
            self.commit(f"    {v}.set({self.expr(None if now[0] is UNSET else now[0])})")
        elif k is Kind.TENSOR:   # a leaf's .grad (refgraph.tensor_state)
            # (None: an in-place update of a leaf made it a non-leaf, in the graph as in eager;
            # a non-leaf keeps no .grad)
            for key, val in (now or {}).items():
                self.commit(f"    {v}.{key} = {self.expr(val)}")
        elif k is Kind.SET:
            self.g.rewritten(node, now)
            self.commit(f"    {v}.clear(); {v}.update([{', '.join(self.expr(x) for x in now)}])")
        else:
            raise CaptureError(f"cannot reproduce the in-place change of a {type(node.value).__qualname__}")

    def attributes_update(self, node, v, now):
        """The attributes of a module, class or object's ``__slots__`` the program stored
        (``refgraph.stored_attributes``): set or deleted past any Python ``__setattr__`` (which
        the monitor followed to these stores)."""
        for key in dict.fromkeys(key for _, key in self.written(node)[0]):
            if key in now:
                value = self.values.stored_value(node.value, key, now[key]) or self.expr(now[key])
                self.commit(f"    SETATTR({v}, {key!r}, {value})")
            else:
                self.commit(f"    DELATTR_IF({v}, {key!r})")

    def list_update(self, node, v, now, snap):
        """A list's items the program stored into, by index, and those it added at the end
        (the guard fixes its length where an index is written); else all of it."""
        written, whole = self.written(node)
        slots = _slots(written)

        def item(i: int) -> str:   # (a size or lifted float the call appended: from this call's)
            return self.values.stored_value(node.value, i, now[i]) or self.expr(now[i])
        if not whole and len(now) >= len(snap) and all(
                a is b for i, (a, b) in enumerate(zip(now, snap)) if i not in slots):
            for i in sorted(i for i in slots if i < len(snap)):
                node.struct = True   # (eager's store raises past the end)
                self.commit(f"    {v}[{i}] = {item(i)}")
            if len(now) > len(snap):
                self.commit(f"    {v}.extend([{', '.join(map(item, range(len(snap), len(now))))}])")
        else:
            self.g.rewritten(node, now)
            self.commit(f"    {v}[:] = [{', '.join(map(item, range(len(now))))}]")

    def dict_update(self, node, v, now, snap, mapping):
        """Every slot the program stored into or deleted, whether or not it changed it (a
        later call may find it changed), where the order of the keys comes out as eager's:
        the keys it kept where they were, then the others in the order they came; else all
        of it, rewritten."""
        written, whole = self.written(node)
        slots = _slots(written)
        moved = {key for (_, key), deleted in written.items() if deleted}
        # (keys by dict lookup, by hash and identity: a list's ``in`` and ``!=`` would compare
        # tensor keys, an optimizer state's parameters, with ``==``)
        kept = dict.fromkeys(key for key in snap if key in now and key not in moved)
        expected = [*kept, *(key for key in now if key not in kept)]
        if whole or not all(map(same_key, now, expected)):
            self.g.rewritten(node, now)
            items = ", ".join(f"{self.key(key)}: {self.expr(val)}" for key, val in now.items())
            self.commit(f"    {mapping}.clear(); {mapping}.update({{{items}}})")
            return
        for key in snap:
            if key not in now:
                self.commit(f"    del {mapping}[{self.key(key)}]")
        for key in slots:
            if key not in snap and key not in now:   # stored, then deleted again
                self.commit(f"    {mapping}.pop({self.key(key)}, None)")
        for key, val in now.items():
            if key in moved:   # deleted, then stored again: at the end now
                self.commit(f"    {mapping}.pop({self.key(key)}, None)")
            size = self.values.stored_value(node.value, key, val)
            if size is not None:
                self.commit(f"    {mapping}[{self.key(key)}] = {size}")
            elif key not in snap or snap[key] is not val or key in slots:
                self.commit(f"    {mapping}[{self.key(key)}] = {self.expr(val)}")

    def written(self, node) -> tuple[dict, bool]:
        """``node``'s stores (``ShadowNode.written``) and whether a native rewrote it whole, in
        the state being written: the call's end, or a resume point's (not the stores after it)."""
        point = self.values.block.point
        if point is None:
            return node.written, node.whole
        return point.written.get(node.id, ({}, False))


def _slots(written: dict) -> set:
    """The keys (indices, names) of the slots the program stored into or deleted."""
    return {key for _, key in written}

