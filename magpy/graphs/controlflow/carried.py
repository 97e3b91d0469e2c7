"""What a loop recorded as a ``while_loop`` carries (magpy.graphs.controlflow.whiles,
magpy.graphs.controlflow.fors): from the frame's slot values before the loop and after one and two
iterations (each a fork), the slots that change, grouped by the tensor they hold, whether
they can be the operator's operands, and what a ``for`` loop's steps appended to lists.
"""
from __future__ import annotations

import torch

from magpy.capture.monitor import NULL
from magpy.capture.refgraph.graph import is_immutable
from magpy.graphs.controlflow.forks import equal, meta

_STEP = object()      # (a for loop's variable in the slots the forks compare)


class Slots:
    """A frame's slot values before a loop and after one and two steps, where a slot holding
    a tuple of tensors (``state = (h, c)``) that the steps make anew counts as one slot per
    member: ``slot[i]`` is the frame slot of flat position ``i``."""

    def __init__(self, before: list, after1: list, after2: list):
        self.sizes = [len(b) if _tensor_tuples(a, b, c) else None for a, b, c in zip(before, after1, after2)]
        self.before, self.after1, self.after2 = (self.flat(v) for v in (before, after1, after2))
        self.slot = [i for i, n in enumerate(self.sizes) for _ in range(n or 1)]

    def flat(self, values: list) -> list | None:
        """``values`` (of the frame's slots) with the tuple slots' members in their place; None
        if such a slot holds something else."""
        out = []
        for v, n in zip(values, self.sizes):
            if n is None:
                out.append(v)
            elif type(v) is tuple and len(v) == n:
                out.extend(v)
            else:
                return None
        return out

    def holds(self, v) -> bool:
        return any(a is v for a in self.after2)

    def step(self, slot: int) -> list[int]:
        """The positions of the loop variable, frame slot ``slot``; they compare as unchanged
        (a step's input, not carried)."""
        var = [i for i, s in enumerate(self.slot) if s == slot]
        for i in var:
            self.before[i] = self.after1[i] = self.after2[i] = _STEP
        return var


def _tensor_tuples(*values) -> bool:
    """Are ``values`` tuples of one length holding tensors only, made anew by each step?"""
    if not all(type(v) is tuple for v in values) or values[1] is values[2]:
        return False
    n = len(values[0])
    return all(len(v) == n and all(isinstance(t, torch.Tensor) for t in v) for v in values)


def carried_groups(before, after1, after2, arm1, arm2, kind,
                    gains_grad: bool = False) -> tuple[list, str | None]:
    """The frame slots a loop carries, grouped by the tensor they hold (``h = new`` leaves
    two slots with one tensor), from the slots' values before the loop and after one and
    two iterations; or the reason they cannot be ``torch.while_loop`` operands.
    ``gains_grad``: a tensor that does not require grad before the loop may after the first
    iteration (the loop runs at least once, under autograd)."""
    groups: dict[int, list[int]] = {}
    for i, (v0, v1, v2) in enumerate(zip(before, after1, after2)):
        if v0 is v1 and v1 is v2:
            continue
        if isinstance(v1, torch.Tensor) and isinstance(v2, torch.Tensor) and (
                v0 is NULL or isinstance(v0, torch.Tensor)):
            why = _carried(v0, v1, v2, arm1, arm2, kind, gains_grad)
            if why is not None:
                return [], why
            groups.setdefault(id(v1), []).append(i)
        elif not (type(v0) is type(v1) is type(v2) and is_immutable(v0) and equal(v0, v1)
                  and equal(v1, v2)):
            return [], f"an iteration changes a Python value ({type(v0).__name__})"
    found = list(groups.values())
    for g in found:
        if any(after2[i] is not after2[g[0]] for i in g):
            return [], "variables that held one tensor after an iteration hold two after the next"
        if len({id(before[i]) for i in g if before[i] is not NULL}) > 1:
            return [], "variables that held different tensors before the loop hold one after an iteration"
    if len({id(after2[g[0]]) for g in found}) != len(found):
        return [], "variables that held different tensors after an iteration hold one after the next"
    return found, None


def _carried(v0, v1, v2, arm1, arm2, kind, gains_grad: bool = False) -> str | None:
    """Can a variable that holds ``v0`` before the loop (NULL: unbound), ``v1`` after one
    iteration and ``v2`` after two be an operand of ``torch.while_loop``?  The reason not."""
    if not (arm1.made(v1) and arm2.made(v2)):
        return "an iteration sets a variable to a tensor from before it"
    first = v1 if v0 is NULL else v0
    k0, k1 = kind(first), kind(v1)
    if gains_grad and _gains_grad(k0, k1):
        k0 = k1
    if not k0 == k1 == kind(v2):
        return f"an iteration changes a tensor's kind ({meta(first)} to {meta(v1)})"
    if v0 is NULL and not v1.is_contiguous():
        return "an iteration sets a variable unbound before the loop to a strided tensor"
    return None


_REQUIRES_GRAD = 4   # the position of requires_grad in a kind (Branches._kind)


def _gains_grad(k0: tuple, k1: tuple) -> bool:
    """Do kinds ``k0`` and ``k1`` differ only in that ``k1`` requires grad?"""
    i = _REQUIRES_GRAD
    return not k0[i] and k1[i] and k0[:i] + k0[i + 1:] == k1[:i] + k1[i + 1:]


def zeros_like(t: torch.Tensor) -> torch.Tensor:
    """What a variable the loop sets before reading it enters the operator as."""
    return torch.zeros(t.shape, dtype=t.dtype, device=t.device)


def entering(firsts: list, state: list) -> list:
    """The carried operands of a ``for`` loop's ``while_loop``: the tensors before it (a copy
    where one enters twice: ``state = (z, z)``; operands must not alias), zeros for a
    variable the loop sets before reading (recorded like the program's operations)."""
    seen, out = set(), []
    for f, s in zip(firsts, state):
        out.append(zeros_like(s) if f is NULL else f.clone() if id(f) in seen else f)
        seen.add(id(f))
    return out


def appended(filled: list, arm1, arm2, kind) -> str | None:
    """Each step appended one tensor its arm made, of one kind, to each list of ``filled``
    (``(list, what the first step appended, what the second did)``)?  The reason not."""
    for _, (a, *more1), (b, *more2) in ((f[0], f[1] or [None], f[2] or [None]) for f in filled):
        if more1 or more2 or not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return "an iteration appends something else than one tensor to a list"
        if not (arm1.made(a) and arm2.made(b)):
            return "an iteration appends a tensor from before it to a list"
        if kind(a) != kind(b):
            return "iterations append tensors of different kinds to a list"
    return None
