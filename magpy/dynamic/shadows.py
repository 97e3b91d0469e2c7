"""Shadows of lifted values, as the monitor carries them beside slots (``magpy.dynamic``):
SymInts of sizes and ints, ``Items``/``Entries`` of sequences and keyword dicts, ``Scalar``
of lifted floats; what is symbolic, and specialising."""
from __future__ import annotations

import torch

from magpy.monitor.observer import Entries, Items

SymInt = torch.SymInt


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


def value_of(v, sh):
    return sh if type(sh) is SymInt else v


def items_of(v, sh):
    """The item shadows of sequence ``v`` (shadow ``sh``), or None if they are not known."""
    if type(sh) is Items:
        if len(sh) == len(v):
            return tuple(sh)
        specialise(sh)   # out of date: what it held is guarded instead
        return None
    if sh is None and type(v) in (tuple, list, torch.Size):
        return (None,) * len(v)
    return None


def collect(sh, ids: set) -> None:
    t = type(sh)
    if t is SymInt or t is Scalar:
        ids.add(id(sh))
    elif t is Items or t is slice:
        for x in (sh if t is Items else (sh.start, sh.stop, sh.step)):
            collect(x, ids)
    elif t is Entries:
        for x in sh.values():
            collect(x, ids)


