"""Which sizes and numbers a recording lifts: the callable's memory of what its recordings
met at each input path (``magpy.graphs.dynamic``)."""
from __future__ import annotations

import math

import torch

from magpy.capture.refgraph.graph import ARG, ITEM, KWARG, REST
from magpy.config import config


class Lifting:
    """What one compiled callable's recordings saw of its inputs' sizes and numbers (by path),
    and so what the next recording lifts: a dimension, int or float seen with
    ``config.dynamic_after`` distinct values (2 by default: at its second)."""

    def __init__(self):
        self.sizes: dict[tuple, list[set[int]]] = {}   # tensor input path -> per dimension, sizes recorded
        self.values: dict[tuple, set] = {}              # float or int path -> values recorded

    def armed(self, mode: bool | None) -> bool:
        """Could a recording lift anything?  (Else it runs without :class:`Shapes`.)"""
        return mode is True or (mode is None and bool(self.sizes or self.values))

    def scalar(self, mode: bool | None, sn) -> bool:
        """Is the float or int of node ``sn`` lifted (a graph input, not a guarded value)?"""
        if type(sn.value) is int and not _INT64[0] <= sn.value <= _INT64[1]:
            return False   # a symbol is an int64: a bigger int stays a guarded value
        if mode is not None:
            return mode
        return self._changed(input_key(sn), sn.value)

    def item(self, sn, i: int) -> bool:
        """Is float item ``i`` of the tuple of node ``sn`` (read from program state: an
        optimizer's ``group["betas"]``) lifted?  Its values are remembered by the tuple's path."""
        x = sn.value[i]
        key = input_key(sn)
        return i < _items(key) and type(x) is float and self._changed(key + ((ITEM, i),), x)

    def _changed(self, key: tuple, value) -> bool:
        seen = self.values.get(key, ())
        return len({*seen, _value_key(value)}) >= config.dynamic_after

    def dims(self, mode: bool | None, sn, t: torch.Tensor) -> frozenset[int]:
        """The dimensions of input tensor ``t`` (RefGraph node ``sn``) to lift."""
        if mode is False or t.dim() == 0:
            return frozenset()
        key = input_key(sn)
        if mode is True:
            lift = key[0][0] in (ARG, KWARG) and not isinstance(t, torch.nn.Parameter)
            return frozenset(range(t.dim())) if lift else frozenset()
        seen = self.sizes.get(key)
        if seen is None or len(seen) != t.dim():
            return frozenset()
        after = config.dynamic_after
        return frozenset(d for d, sizes in enumerate(seen) if len(sizes | {t.shape[d]}) >= after)

    def saw(self, inputs) -> None:
        """A recording's input tensors, floats, ints and tuples (RefGraph nodes): remember their
        sizes and values (a tuple's floats, by their paths from the tuple's)."""
        for sn in inputs:
            key = input_key(sn)
            if type(sn.value) in (float, int):
                self.values.setdefault(key, set()).add(_value_key(sn.value))
                continue
            if type(sn.value) is tuple:
                for i, x in enumerate(sn.value[:_items(key)]):
                    if type(x) is float:
                        self.values.setdefault(key + ((ITEM, i),), set()).add(_value_key(x))
                continue
            seen = self.sizes.get(key)
            if seen is None or len(seen) != sn.value.dim():   # (a new rank starts afresh)
                seen = self.sizes[key] = [set() for _ in range(sn.value.dim())]
            for sizes, n in zip(seen, sn.value.shape):
                if len(sizes) < _REMEMBERED:
                    sizes.add(n)


_INT64 = (-2 ** 63, 2 ** 63 - 1)
_TUPLE_ITEMS = 8    # the items of a tuple whose floats may be lifted (an optimizer's betas: 2)
_REMEMBERED = 64   # distinct sizes kept per dimension (enough to count up to any sane threshold)


def _items(key: tuple) -> int:
    """How many items of the tuple at path ``key`` may be lifted: every one of what a resumed
    iterator has left (one float per parameter, in RAdam's comprehension), else _TUPLE_ITEMS."""
    return 1 << 62 if key[-1][0] == REST else _TUPLE_ITEMS


def _value_key(v):
    """Tells values apart as the guard does: an int from a float, -0.0 from 0.0, every NaN alike."""
    if type(v) is int:
        return ("int", v)
    return "nan" if v != v else (v, math.copysign(1, v))


def input_key(sn) -> tuple:
    """Where input node ``sn`` lives: its path of ``(relation, key)`` steps from the call."""
    steps = []
    while sn is not None and sn.parent is not None:
        key = sn.key
        try:
            hash(key)
        except TypeError:
            key = repr(key)
        steps.append((sn.rel, key))
        sn = sn.parent
    return tuple(reversed(steps)) or (("?", None),)
