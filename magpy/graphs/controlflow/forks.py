"""Forks (magpy.graphs.controlflow): a region of a frame's code run on a copy of the frame, under a
:class:`~magpy.graphs.controlflow.sandbox.Sandbox`, up to the instruction where it joins the rest
(an ``if``'s arm, a loop's body), and a loop run for real on a copy, unobserved but
sandboxed.  :class:`Forks` holds that machinery and what the parts of
:class:`~magpy.graphs.controlflow.branches.Branches` built on it share: the frame's slots as the
graph knows them, the kind of tensor an operator's arms or steps must agree on, and the
refusals (the jumps and loops recordings found cannot be operators).
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from magpy.capture.monitor import bytecode
from magpy.graphs import rng
from magpy.graphs.controlflow.operator_shadows import Passed
from magpy.graphs.controlflow.sandbox import ForkStopped, Sandbox

# Jumps and loops a recording found cannot be operators, (file, first line, function, offset)
# -> why (an if whose passed-through tensor escaped, a for loop explain names as unrolled).
REFUSED: dict[tuple, str] = {}
# Instructions that only move values between slots (their shadows move with them).
MOVES = bytecode.FAST_MOVES | {"COPY", "SWAP", "POP_TOP"}
_ARRIVED = object()   # a fork's result: it reached the join
_LEFT = object()      # a fork's result: it went elsewhere


def arrive(f, arg):
    """Run instead of a join's instruction: the fork reached the join."""
    f.retval = _ARRIVED
    return True


def _leave(f, arg):
    f.retval = _LEFT
    return True


def _region_table(ops: list, region: tuple[int, int], joins: tuple, arrive) -> list:
    """Dispatch table ``ops`` for running only ``region``: leaving it ends the run, and
    ``arrive`` runs instead of the instruction at each of ``joins``."""
    table = list(ops)
    for i, e in enumerate(table):
        if e is not None and not region[0] <= i < region[1]:
            table[i] = (_leave, None, i)
    for join in joins:
        table[join] = (arrive, None, join)
    return table


class Forks:
    """The fork machinery of :class:`~magpy.graphs.controlflow.branches.Branches`, whose parts (ifs,
    whiles, fors) are built on it; ``Branches.__init__`` sets the state they share."""

    def _refuse(self, site, why: str) -> None:
        """End the recording (to be made again) and make the jump at ``site`` a break."""
        if self.monitor.sandbox is not None:
            self.monitor.sandbox.stop(why)   # in an arm: that arm's if is a break, nothing more
        REFUSED[site] = why
        self.live.clear()
        self.accs.clear()
        brk = self.breaker.where(f"{why}; that jump is a break from the next recording on")
        self.breaker.stop(dataclasses.replace(brk, retry=True))

    def _note(self, words: str) -> None:
        """An unrolled loop for explain, once (a loop in a loop meets it again)."""
        if words not in self.conds:
            self.conds.append(words)

    def _fork(self, frame, region, joins, arrive=arrive, sandbox: Sandbox | None = None,
              counted: bool = False):
        """Run the arm ``region`` of ``frame`` on a copy of it, to one of the ``joins``: ``(arm,
        fork, None)``, or ``(None, None, why not)``.  ``arrive`` runs instead of a join's
        instruction; the arm runs under ``sandbox`` (a loop body's: the lists it may append
        to); ``counted``: it is a range loop's body, whose tensor operations may read the step
        count."""
        sandbox = sandbox or Sandbox()
        fork = frame.copy(back=frame.back)
        fork.pc = region[0]
        with self._forking(sandbox):
            fork.ops = _region_table(self.monitor.ops_for(frame.info), region, joins, arrive)
            with self.recorder.arm(sandbox, counted) as arm:
                try:
                    result = self.monitor.execute(fork)
                except ForkStopped:
                    result = None
                except Exception as e:  # noqa: BLE001 - the arm fails on this input: not recordable
                    sandbox.violation = sandbox.violation or f"the arm raises {type(e).__name__}"
                    result = None
        if sandbox.violation is not None:
            return None, None, sandbox.violation
        if result is not _ARRIVED:
            return None, None, "an arm leaves the if (return, break, continue)"
        return arm, fork, None

    @contextlib.contextmanager
    def _forking(self, sandbox):
        mon, brk = self.monitor, self.breaker
        # (A fork inside a fork, for a nested if, puts the outer one's rules back after it.)
        saved = (mon.observers, mon.sandbox, torch.is_grad_enabled())
        shapes = self.recorder.shapes
        mon.observers = [self.builder, self] + ([shapes.fork_reads()] if shapes is not None else [])
        mon.sandbox = brk.sandbox = sandbox
        try:
            with self.segmenter.stepless(lambda why: sandbox.stop(f"{why} in a branch")):
                yield
        finally:
            mon.observers, outer, grad = saved
            mon.sandbox = brk.sandbox = outer
            torch._C._set_grad_enabled(grad)

    @contextlib.contextmanager
    def _same_random_numbers(self):
        """Forks run code the program may not run: the generators are put back after them.
        Yields a list that is true afterwards if they drew numbers."""
        saved = rng.state()
        drew = []
        try:
            yield drew
        finally:
            if rng.changed(saved):
                drew.append(True)
            rng.restore(saved)

    def _run_loop(self, frame, body, exit, sandbox: Sandbox | None = None):
        """Run the loop of ``frame`` for real, from ``body`` to ``exit``, on a copy of the
        frame, unobserved and unrecorded but under ``sandbox`` (the forks showed the iterations
        have no effects but those it allows, appending to lists and storing rows; should one
        have, this stops before it, leaving ``frame`` as it was): ``(the copy at exit, None)``
        or ``(None, why not)``."""
        mon, sandbox = self.monitor, sandbox or Sandbox()
        real = frame.copy(back=frame.back)
        saved = mon.observers, mon.sandbox
        mon.observers, mon.sandbox = [], sandbox
        try:
            with self.recorder.paused():
                real.ops = _region_table(mon.ops_for(frame.info), (body, exit), (exit,), arrive)
                result = mon.execute(real)
        except ForkStopped:
            result = None
        except Exception as e:  # noqa: BLE001 - a later iteration raises: the loop stays a break
            sandbox.violation = sandbox.violation or f"an iteration raises {type(e).__name__}"
            result = None
        finally:
            mon.observers, mon.sandbox = saved
        if sandbox.violation is not None:
            return None, sandbox.violation
        if result is not _ARRIVED:
            return None, "the loop leaves its body (return, break)"
        return real, None

    def _kind(self, t: torch.Tensor) -> tuple:
        """What tensors an operator's arms or steps give in one place must agree on: dtype,
        sizes and strides (symbolic ones as expressions over the recording's symbols, which
        the real tensors' sizes may match by chance), device, ``requires_grad``, layout."""
        shapes = self.recorder.shapes
        with torch._C.DisableTorchFunction():   # (magpy's own reads, not the program's)
            twin = shapes.fake(t) if shapes is not None and shapes.active else t
            return (t.dtype, _exprs(twin.shape), _exprs(twin.stride()), t.device, t.requires_grad, t.layout)

    def _graph_values(self, frame) -> list:
        """The values of ``frame``'s slots as the graph knows them: a tensor held through a
        :class:`Passed` slot is the earlier cond's output."""
        values = frame.locals + frame.stack
        shadows = frame.shadow_locals + frame.shadow_stack
        return [sh.out if type(sh) is Passed and id(sh) in self.live and sh.value is v else v
                for v, sh in zip(values, shadows)]

    def _adopt(self, frame, fork, join) -> None:
        """The frame goes on from the join in the taken fork's state."""
        frame.locals[:] = fork.locals
        frame.stack[:] = fork.stack
        if frame.shadow_stack is not None:
            frame.shadow_locals[:] = fork.shadow_locals
            frame.shadow_stack[:] = fork.shadow_stack
        frame.pc = join


def checks(*bodies) -> str | None:
    """Why a loop whose iterations' arms are ``bodies`` cannot be an operator if they check
    a tensor's value (``assert``, ``if ...: raise``), else None.  (A check inside a
    ``while_loop`` body is lost where the loop's outputs are unused; a cond hoists its arms'
    checks out instead, see OpRecorder.cond.)"""
    if any(arm.checks() for arm in bodies):
        return "an iteration checks a tensor's value (assert or raise)"
    return None


def forget_refusals() -> None:
    """Forget which jumps and loops recordings found cannot be operators (``magpy.reset``)."""
    REFUSED.clear()


def set_shadow(frame, i: int, shadow) -> None:
    """Give slot ``i`` of ``frame`` (its locals, then its stack, as ``Forks._graph_values``
    lists them) ``shadow``."""
    n = len(frame.locals)
    if i < n:
        frame.shadow_locals[i] = shadow
    else:
        frame.shadow_stack[i - n] = shadow


def place(frame) -> str:
    """Where ``frame`` is, in words (explain's)."""
    return f"{frame.code.co_filename}:{frame.f_lineno} ({frame.code.co_qualname})"


def jump_site(frame, at: int | None = None) -> tuple:
    """The jump or loop at ``frame``'s instruction (or code unit ``at``), across recordings."""
    code = frame.code
    return code.co_filename, code.co_firstlineno, code.co_qualname, frame.lasti if at is None else at


def meta(t: torch.Tensor) -> tuple:
    """``t``'s metadata in words (magpy's own read, not the program's)."""
    with torch._C.DisableTorchFunction():
        return t.dtype, tuple(t.shape), t.device, t.requires_grad, t.layout


def _exprs(sizes) -> tuple:
    return tuple(s.node.expr if isinstance(s, torch.SymInt) else s for s in sizes)


def equal(a, b) -> bool:
    """Are the values ``a`` and ``b`` equal (NaN to NaN too)?"""
    try:
        return bool(a == b) or (a != a and b != b)
    except Exception:  # noqa: BLE001 - an odd __eq__: not equal
        return False
