"""Tensors read only as indices: ``items[t]``, ``range(t)``, ``x[a:t]``.

A native that reads a 0-d integer tensor through its ``__index__`` (``PyNumber_Index``) picks
what it does by the int it reads, which is then a constant of the record: the record checks
it.  The graph checks it where it can (no graph break); else it is an eager step checked in
the mock (``magpy.records.segments``), as ``operator.index(t)`` in Python code is
(``ModuleList.__getitem__``).
"""
from __future__ import annotations

import operator

import torch

from magpy.errors import GraphBreak
from magpy.graphs.assertions import checks_in_graph

PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_INDEXED = (list, tuple, str, bytes, bytearray, range)   # (their subscripts read a key as an index)


def _sequence_key(inputs: tuple) -> tuple:
    return inputs[1:] if type(inputs[0]) in _INDEXED else ()


def _stored_key(inputs: tuple) -> tuple:
    # (STORE_SUBSCR's and STORE_SLICE's inputs are the value, the container, then the key)
    return inputs[2:] if type(inputs[1]) in _INDEXED else ()


def _arguments(inputs: tuple) -> tuple:
    return inputs


# Native operations that read tensor inputs only as indices: a sequence's subscript (read,
# store, deletion) its key (a slice's bounds), by instruction name; ``range`` and
# ``operator.index`` (``ModuleList.__getitem__``'s) their arguments, by the callee's id (a
# callee may not be hashable).
_INDEX_READS = {"BINARY_SUBSCR": _sequence_key, "BINARY_SLICE": _sequence_key, "DELETE_SUBSCR": _sequence_key,
                "STORE_SUBSCR": _stored_key, "STORE_SLICE": _stored_key,
                id(range): _arguments, id(operator.index): _arguments}


def index_inputs(op, inputs: tuple) -> list:
    """The tensors operation ``op`` (an instruction's name, or a native callee) read as indices
    among its ``inputs`` (empty where it is no such operation, or read them otherwise)."""
    read = _INDEX_READS.get(op if type(op) is str else id(op))
    if read is None:
        return []
    found = []
    for v in read(inputs):
        for x in (v.start, v.stop, v.step) if type(v) is slice else (v,):
            if type(x) in PLAIN_TENSORS:   # (a subclass may define its index in Python)
                found.append(x)
    return found


class IndexReads:
    """The checks of the ints a segmenter's run read from tensors as indices (module docstring)."""

    def __init__(self, segmenter):
        self.segmenter = segmenter

    def check_reads(self, tensors: list, brk: GraphBreak) -> None:
        """The operation under way read each of ``tensors`` only through its ``__index__``
        (``items[t]``, ``range(t)``): the record checks each int read, in the graph or as a
        step."""
        seg = self.segmenter
        for t in tensors:
            if seg.breaker.brk is not None:
                return
            with seg.recorder.paused():
                i = operator.index(t)
            if self._in_graph(t, i):
                continue
            seg.step(operator.index, (t,), None, i, brk, pure=True, call=False)
            brk = None   # (one break, however many reads)
            if seg.breaker.brk is None and id(i) in seg.dynamic:
                seg.check(i, completed=True)   # (an int too large to be ambiguous: checked all the same)

    def slice_bounds(self, args: tuple) -> tuple:
        """``x[a:t]`` (``Tensor.__getitem__``/``__setitem__``'s ``args``, the key second): torch
        reads a slice's 0-d integer tensor bound as an index, which the graph checks; ``args``
        with those ints (as they are where the graph cannot check one)."""
        key = args[1] if len(args) > 1 else None
        keys = key if type(key) is tuple else (key,)
        bounds = [b for k in keys if type(k) is slice for b in (k.start, k.stop, k.step)
                  if type(b) in PLAIN_TENSORS]
        if not bounds:
            return args
        with self.segmenter.recorder.paused():
            ints = {id(t): operator.index(t) for t in bounds}
        if not all(self._in_graph(t, ints[id(t)]) for t in bounds):
            return args

        def plain(k):
            return slice(*(ints.get(id(b), b) if type(b) in PLAIN_TENSORS else b
                           for b in (k.start, k.stop, k.step))) if type(k) is slice else k
        new = tuple(map(plain, keys))
        return (args[0], new if type(key) is tuple else new[0], *args[2:])

    def _in_graph(self, t: torch.Tensor, i: int) -> bool:
        """Check in the graph that tensor ``t`` holds index ``i`` (where it does not, the call
        misses the record), if the graph has ``t`` and nothing observable happened yet."""
        seg = self.segmenter
        rec = seg.recorder
        if rec._opaque or not seg.undoable() or not checks_in_graph(t) or not seg.graph_knows(t):
            return False
        file, _, line = seg.at()
        rec.check(rec.compute(torch.eq, (t, i)), f"{file}:{line} reads index {i} from a tensor")
        return True
