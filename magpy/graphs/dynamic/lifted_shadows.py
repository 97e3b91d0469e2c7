"""Shadows of lifted values, as the monitor carries them beside slots (``magpy.graphs.dynamic``):
SymInts of sizes and ints, ``Items``/``Entries`` of sequences and keyword dicts, ``Scalar``
of lifted floats; what is symbolic, and specialising."""
from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from magpy.capture.monitor.observer import Entries, Items

SymInt = torch.SymInt


class Scalar:
    """The shadow of a lifted float (an argument, attribute, global or dict item), or of a
    float the program computed from one with Python arithmetic on constants (an optimizer's
    ``-lr``, a scheduler's ``lr * gamma``): the lifted float's RefGraph node, ``source``
    (the computation as Python source, ``{x}`` standing for the lifted value: the mock
    computes it from each call's value, with the program's own float arithmetic) and
    ``value``, the float the recording run computed.  ``pinned`` (shared by one recording)
    holds the nodes the program used other than as a tensor operation's operand or in such
    arithmetic: those are guarded by value after all."""

    __slots__ = ("node", "pinned", "source", "value")

    def __init__(self, node, pinned: set, source: str = "{x}", value=None):
        self.node, self.pinned, self.source = node, pinned, source
        self.value = node.value if value is None else value

    def derive(self, source: str, value) -> "Scalar":
        """The shadow of ``value``, computed from the lifted value as ``source``."""
        return Scalar(self.node, self.pinned, source, value)

    def __repr__(self):
        return f"<lifted float {self.value!r}: {self.source}>"


class IntFloat:
    """The shadow of a float the program computed from lifted ints with Python arithmetic (a
    learning-rate schedule's ``float(current_step) / float(max(1, warmup))``), and maybe
    lifted floats (CosineAnnealingLR's ``ratio(epoch) * (group["lr"] - eta_min)``): ``ints``,
    the SymInts (and lifted floats' ``Scalar``) it was computed from; ``source``, the
    computation as Python source, ``{0}``,
    ``{1}`` ... standing for them (the mock computes it from each call's ints with the
    program's own float operations, in the program's order); ``value``, the float the
    recording run computed.  It holds no symbol of its own: a use it cannot follow
    specialises its ints, and a branch on it is guarded by its outcome, a condition over them
    (``Shapes.float_condition``)."""

    __slots__ = ("ints", "source", "value")

    def __init__(self, ints: tuple, source: str, value: float):
        self.ints, self.source, self.value = ints, source, value

    def render(self, int_source) -> str:
        """The source of the float, ``int_source(SymInt)`` giving each int's."""
        return self.source.format(*(f"({int_source(i)})" for i in self.ints))

    def __repr__(self):
        return f"<float {self.value!r} of ints: {self.source}>"


def int_float(parts: tuple, template: str, value) -> IntFloat:
    """The shadow of a float computed as ``template`` (``{0}``, ``{1}``: each of ``parts``)
    from ``parts``: IntFloat shadows, SymInts, lifted floats' Scalars and constants' sources
    (str)."""
    ints, sources = [], []
    for p in parts:
        if type(p) is IntFloat:
            sources.append(p.source.format(*(f"{{{len(ints) + i}}}" for i in range(len(p.ints)))))
            ints += p.ints
        elif type(p) is SymInt or type(p) is Scalar:
            sources.append(f"{{{len(ints)}}}")
            ints.append(p)
        else:
            sources.append(p)
    return IntFloat(tuple(ints), template.format(*sources), value)


class Span:
    """The shadow of ``range(n)`` with ``n`` symbolic (its ``stop``, a SymInt).  A ``for`` loop
    over it that magpy.graphs.controlflow records as one operator ``takes`` it: nothing else does
    with the range what would fix ``n``."""

    __slots__ = ("stop", "taken")

    def __init__(self, stop):
        self.stop, self.taken = stop, False

    def __repr__(self):
        return f"<range({self.stop})>"


class Walk:
    """The shadow of an iterator over lists or tuples whose items' shadows are known
    (``iter(seq)``, ``zip(a, b)``) as a ``for`` loop walks it: ``values``, what each step
    gives (a row of items for ``zip``), ``shadows``, their shadows, ``pos``, steps taken."""

    __slots__ = ("values", "shadows", "pos")

    def __init__(self, values: tuple, shadows: tuple):
        self.values, self.shadows, self.pos = values, shadows, 0

    def step(self, v):
        """The shadow of ``v``, the iterator's next value; None if it is not the one expected
        (something else advanced the iterator: the walk is lost)."""
        if self.pos >= len(self.values):
            return None
        expected = self.values[self.pos]
        same = v is expected or (type(v) is tuple and type(expected) is tuple and len(v) == len(expected)
                                 and all(a is b for a, b in zip(v, expected)))
        if not same:
            return None
        self.pos += 1
        return self.shadows[self.pos - 1]

    def __repr__(self):
        return f"<walk {self.pos}/{len(self.values)}>"


def _parts(sh):
    """The shadows a container shadow holds (its items, values, slice bounds, range end)."""
    t = type(sh)
    if t is Span:
        return () if sh.taken else (sh.stop,)
    if t is Items:
        return sh
    if t is Entries:
        return sh.values()
    if t is slice:
        return (sh.start, sh.stop, sh.step)
    if t is Walk:
        return sh.shadows[sh.pos:]
    if t is IntFloat:
        return sh.ints
    return ()


def of_ints(sh) -> bool:
    """Is float shadow ``sh`` computed from lifted ints only (an IntFloat without lifted
    floats: the shape check can say a condition on it)?"""
    return type(sh) is IntFloat and not any(type(i) is Scalar for i in sh.ints)


def symbolic(sh) -> bool:
    """Does shadow ``sh`` hold a symbolic size (an unspecialised SymInt, or items with one)?"""
    t = type(sh)
    if t is SymInt:
        return not sh.node.expr.is_number and bool(sh.node.shape_env.replace(sh.node.expr).free_symbols)
    if t is Scalar:
        return sh.node.id not in sh.pinned
    return any(map(symbolic, _parts(sh)))


def specialise(sh) -> None:
    """Make the guard require the values shadow ``sh`` holds now."""
    t = type(sh)
    if t is SymInt:
        if free_unbacked_symbols(sh):
            # A size that follows tensor data (``nonzero``'s): no input fixes it, and the value
            # the program has is read by an eager step on each call (OpRecorder.data_shaped).
            return
        int(sh)   # the ShapeEnv records Eq(expr, value) and replaces the expression from now on
    elif t is Scalar:
        sh.pinned.add(sh.node.id)
    for x in _parts(sh):
        specialise(x)


def of_read(r):
    """The shadow of what a size read gave: a SymInt, or a sequence's items (``x.shape``)."""
    return Items(r) if isinstance(r, (tuple, list)) else r


def with_shadow(value, sh):
    """``value`` with its ints replaced by the SymInts shadow ``sh`` holds for them."""
    if sh is None:
        return value
    t = type(sh)
    if t is SymInt:
        return sh if type(value) is int and sh.node.hint == value else value
    if t is Scalar or t is IntFloat:
        return sh if value is sh.value else value
    if t is Items and isinstance(value, (tuple, list)):
        if len(value) != len(sh):   # out of date: what it held is guarded instead
            specialise(sh)
            return value
        items = [with_shadow(v, s) for v, s in zip(value, sh)]
        # (a torch.Size stays one: Tensor.new reads a tuple as data)
        return items if type(value) is list else torch.Size(items) if type(value) is torch.Size \
            else tuple(items)
    if t is slice and type(value) is slice:
        return slice(with_shadow(value.start, sh.start), with_shadow(value.stop, sh.stop),
                     with_shadow(value.step, sh.step))
    return value


def holds(sh, v) -> bool:
    """Is ``v`` the number that the lifted number's shadow ``sh`` stands for?"""
    if type(sh) is SymInt:
        return type(v) is int and sh.node.hint == v
    return type(sh) in (Scalar, IntFloat) and type(v) is type(sh.value) and v == sh.value


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
    """Add the ids of the SymInts and lifted floats shadow ``sh`` holds to ``ids``."""
    if type(sh) is SymInt or type(sh) is Scalar:
        ids.add(id(sh))
    for x in _parts(sh):
        collect(x, ids)


