"""Which of a frame's plain local variables its code may still read from an instruction on.

A resume point (``magpy.records.continuations``) takes every live frame's locals; a value it cannot
take (a generator a ``zip`` left suspended, ``AveragedModel.update_parameters``'s
``self.parameters()`` after its loop) makes the call unresumable there, although the frame
never reads it again.  Backward liveness over the bytecode says which locals are dead at the
instruction the frame resumes at: the point drops them (the resumed frame has them unbound,
which no instruction on from there can observe).

Conservative by construction: every instruction may fall through and may raise into its
handler; a local a ``del`` removes counts as read (``del`` of an unbound local raises); cells
and free variables always count as live (a closure reads them); code that can see its own
locals (``locals()``, ``vars()``, ``exec``, ``eval``, ``dir()``, zero-argument ``super()``,
``sys._getframe``, ``inspect.currentframe``) keeps them all.
"""
from __future__ import annotations

import bisect
import dis
import functools
import types

from magpy.capture.monitor.frame import code_info

# Instructions by what they do to the locals they name, in order ("r": read, "w": write).
_EFFECTS = {
    "LOAD_FAST": "r", "LOAD_FAST_CHECK": "r", "LOAD_FAST_AND_CLEAR": "r", "DELETE_FAST": "r",
    "STORE_FAST": "w", "STORE_FAST_MAYBE_NULL": "w",
    # 3.13's pairs: both names, in the order the instruction uses them.
    "LOAD_FAST_LOAD_FAST": "rr", "STORE_FAST_LOAD_FAST": "wr", "STORE_FAST_STORE_FAST": "ww",
}
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs) | frozenset(getattr(dis, "hasjump", ()))
_INTROSPECTION = frozenset({"locals", "vars", "exec", "eval", "dir", "super", "_getframe", "currentframe",
                            "f_locals", "getframeinfo", "stack"})


def dead_locals(code: types.CodeType, index: int) -> frozenset[int]:
    """The slots (``co_varnames`` positions, cells excluded) of the locals no instruction
    from code unit ``index`` on can read before storing them again."""
    table = _live(code)
    if table is None:
        return frozenset()
    plain, starts, before, within = table
    k = bisect.bisect_right(starts, index) - 1
    if k < 0:
        return frozenset()
    # (inside an instruction, a later step of one the monitor runs in steps, 3.13's
    # COMPARE_OP and its bool: what it leaves live, and what it reads)
    live = before[k] if starts[k] == index else within[k]
    return frozenset(i for i in plain if not live >> i & 1)


@functools.lru_cache(maxsize=512)
def _live(code: types.CodeType) -> tuple[tuple, list, list, list] | None:
    """``(plain, starts, before, within)``: the slots of the locals that are no cells, and
    per instruction (by its first code unit) bit sets of the locals live before it and of
    those live within it (after it, or read by it); None for code that can see its own
    locals."""
    if _INTROSPECTION.intersection(code.co_names):
        return None
    cells = set(code.co_cellvars)
    plain = tuple(i for i, name in enumerate(code.co_varnames) if name not in cells)
    slots = {name: i for i, name in enumerate(code.co_varnames)}
    instructions = list(dis.get_instructions(code))
    at = [ins.offset // 2 for ins in instructions]
    position = {a: k for k, a in enumerate(at)}
    handlers = code_info(code).handlers   # (per code unit: the handler's, its depth, lasti)
    effects, succ = [], []
    for k, ins in enumerate(instructions):
        kinds = _EFFECTS.get(ins.opname, "")
        names = ins.argval if type(ins.argval) is tuple else (ins.argval,)
        effects.append([(kind, slots[name]) for kind, name in zip(kinds, names) if name in slots])
        nxt = {k + 1} if k + 1 < len(instructions) else set()
        if ins.opcode in _JUMPS and type(ins.argval) is int:
            nxt.add(_at_or_after(position, at, ins.argval // 2))
        handler = handlers[at[k]]
        if handler is not None:
            nxt.add(_at_or_after(position, at, handler[0]))
        succ.append(nxt)
    live = [0] * len(instructions)
    within = [0] * len(instructions)
    changed = True
    while changed:   # (backward: a few passes reach the fixed point)
        changed = False
        for k in range(len(instructions) - 1, -1, -1):
            out = 0
            for s in succ[k]:
                out |= live[s]
            within[k] = out
            for kind, slot in reversed(effects[k]):
                out = out & ~(1 << slot) if kind == "w" else out | 1 << slot
                within[k] |= 1 << slot if kind == "r" else 0
            if out != live[k]:
                live[k], changed = out, True
    return plain, at, live, within


def _at_or_after(position: dict, at: list, index: int) -> int:
    """The instruction at code unit ``index`` (the next one where ``index`` is a prefix's)."""
    while index not in position and index < at[-1]:
        index += 1
    return position.get(index, len(at) - 1)
