"""Checks as assertions of the graph: a read of a tensor's truth only to raise if it is
wrong, and the record's own checks of the path it recorded.

``assert c, msg`` (or ``if not c: raise ValueError(...)``) on tensor data would otherwise be
an eager step, a read of the data into Python that cuts the graph in two.  As an assertion,
the graph raises where the check fails, and the call runs again eagerly, where the program
raises its own exception (magpy.records.cache): only where nothing observable happened
before the check, and only on the CPU (a failed assertion on a GPU is a device-side assert).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from magpy.capture.monitor import bytecode

# ``assert`` on a tensor becomes this operation: it raises RuntimeError(message) when the
# condition is false, on every run of the graph.
ASSERT = torch.ops.aten._assert_async.msg
CHECK_DEVICE = "magpy_check_device"   # an assertion's meta: the device of the tensor it checks
Check = tuple[str, torch.device]   # an assertion of a graph: its message, the device of what it checks
# The message of the record's own checks (Assertions.check), as opposed to the program's.
OWN_CHECK = "magpy: this call takes another path than the recorded one: "
# (torch._assert_async's own message, which the graph's assertion raises in its place)
_ASYNC_MESSAGE = "Expected Tensor with single nonzero value, but got zero"
_RAISING_PATH = 200   # code units a raising path may take (building an f-string message)
# Instructions that leave a straight-line path (it might not reach its raise).
_LEAVES_PATH = ("JUMP", "RETURN", "YIELD", "FOR_ITER", "SEND", "RERAISE")


class Assertions:
    """The assertions part of :class:`magpy.graphs.opgraph.OpRecorder`: it records into the
    recorder's current piece, and asks its breaker (``dynamic``) where the run is."""

    def _assertion(self) -> tuple[bool, str] | None:
        """``(truth that passes, message)`` when the program reads a tensor's truth only to
        raise if it is wrong: ``assert c, msg``, ``if not c: raise ValueError(f"...")``, that
        is a conditional jump whose other path goes straight to a raise.  Only before anything
        observable happened: where the graph's check fails, the call runs again eagerly and
        the program raises its own exception (``magpy.records.cache``)."""
        mon = self.dynamic.monitor
        f = mon.current if mon is not None else None
        if f is None or not hasattr(f, "info"):
            return None
        code = f.info.instructions
        jump = code[f.lasti]
        jumps_if = bytecode.BRANCH_JUMPS.get(jump.opname) if jump is not None else None
        if jumps_if is None:
            return None
        # The raise is where the jump goes or where the code falls through (3.12 moves it
        # out of line), and the truth that passes is the one that goes the other way.
        _, target, fall = f.info.ops[f.lasti]
        path, passing = next(((p, truth) for p, truth in ((_raising_path(code, fall), jumps_if),
                                                           (_raising_path(code, target), not jumps_if))
                              if p is not None), (None, None))
        if path is None or not self._undoable():
            return None
        # The graph's message tells a failed check from other errors (failed_assertion).
        where = f"check failed at {f.code.co_filename}:{f.line}"
        ops = [ins.opname for ins in path]
        if not _raises_assertion_error(f, path[0]) or \
                ops[2:3 + len(bytecode.CALL_SEQUENCE)] != [*bytecode.CALL_SEQUENCE, "RAISE_VARARGS"]:
            return passing, where
        load = path[1]   # ``assert c, msg``: AssertionError's own message, where it is a string
        message = (load.argval if load.opname == "LOAD_CONST"
                   else f.locals[load.arg] if load.opname == "LOAD_FAST" else None)
        return passing, message if type(message) is str and message else where

    def _undoable(self) -> bool:
        """Has nothing observable happened in the call yet (a failed check may run it again)?"""
        segmenter = self.dynamic.segmenter
        return segmenter is None or segmenter.undoable()

    def _record_async_assertion(self, t) -> bool:
        """``torch._assert_async(t)``: an assertion of the graph (as ``assert c`` is, and with
        the same condition: only before anything observable happened), else False."""
        if not checks_in_graph(t) or t.numel() != 1 or not self._undoable():
            return False
        self._assert(t, _ASYNC_MESSAGE)
        return True

    def _record_assertion(self, t, truth) -> bool:
        """The truth ``truth`` of ``t`` read only to raise if it is wrong (:meth:`_assertion`):
        an assertion of the graph where the run passed it, else False (the program raises
        it itself, eagerly)."""
        passing, message = self._assertion()
        if truth is not passing or not checks_in_graph(t):
            return False
        self._assert(t, message, negated=not passing)
        return True

    def check(self, cond: torch.Tensor, what: str) -> None:
        """Record a check of the record's own that ``cond``, a bool tensor the graph has,
        holds (``what`` it means): where it does not, the call misses the record
        (:func:`failed_own_check`).  Only where nothing observable happened before it."""
        self._assert(cond, OWN_CHECK + what)

    def _assert(self, t, message: str, negated: bool = False) -> None:
        """The graph raises RuntimeError(``message``) where ``t`` (``not t``) is false."""
        piece = self.piece
        piece.sync_modes()
        cond = self.tensor_node(t)
        if negated:
            cond = piece.graph.call_function(torch.logical_not, (cond,))
        append_check(piece.graph, cond, (message, t.device))
        piece.op_count += 1


def checks_in_graph(*values) -> bool:
    """May a check on these values be an assertion of the graph?  Only on the CPU: a failed
    ``_assert_async`` on a GPU is a device-side assert, which leaves the CUDA context unusable
    for the rest of the process; there the check reads the value back (an eager step), as the
    program's own ``if`` does."""
    return all(v.device.type == "cpu" for v in values if isinstance(v, torch.Tensor))


def append_check(graph: fx.Graph, cond: fx.Node, check: Check) -> None:
    """Append to ``graph`` the assertion that ``cond`` holds (``check``: its message, and the
    device it is on, which an operator hoisting it from an arm needs: Arm.module)."""
    node = graph.call_function(ASSERT, (cond, check[0]))
    node.meta[CHECK_DEVICE] = check[1]


def failed_own_check(gm: fx.GraphModule | None, exc: BaseException) -> bool:
    """Did running ``gm`` raise ``exc`` because one of the record's own checks failed?"""
    return OWN_CHECK in str(exc) and failed_assertion(gm, exc)


def failed_assertion(gm: fx.GraphModule | None, exc: BaseException) -> bool:
    """Did running ``gm`` raise ``exc`` because one of its recorded assertions failed?  That is
    the program's own failure: eager raises AssertionError there."""
    if gm is None or not isinstance(exc, (RuntimeError, AssertionError)):
        return False
    text = str(exc)
    return any(n.target is ASSERT and n.args[1] in text for n in gm.graph.nodes)


def _raising_path(code: list, start: int) -> list | None:
    """The instructions from ``start`` up to a ``raise`` (its last), if the code goes there
    straight, else None."""
    path = []
    for ins in code[start:start + _RAISING_PATH]:
        if ins is None:
            continue
        if any(part in ins.opname for part in _LEAVES_PATH):
            return None
        path.append(ins)
        if ins.opname == "RAISE_VARARGS":
            return path if ins.arg else None   # (a bare ``raise`` re-raises what is handled)
    return None


def _raises_assertion_error(frame, ins) -> bool:
    """Does ``ins`` load the builtin AssertionError (not a global shadowing its name)?"""
    if ins.opname == "LOAD_ASSERTION_ERROR":
        return True
    return (ins.opname == "LOAD_GLOBAL" and ins.argval == "AssertionError"
            and "AssertionError" not in frame.globals
            and frame.builtins.get("AssertionError") is AssertionError)
