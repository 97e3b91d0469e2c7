"""Activation checkpointing in a recording run: the checkpointed function as a subgraph.

``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` run natively installs
saved-tensor hooks whose unpacking hands the program tensors of unknown origin, which ended
the recording (the call ran eagerly).  The recording run instead monitors ``fn(*args)``
like any other call (what it reads is guarded) and records its operations into a subgraph
of their own, which the graph calls through torch's ``tag_activation_checkpoint`` operator,
as torch.compile does: compiled, the partitioner recomputes the subgraph's activations in
the backward instead of saving them (run by the "eager" backend, the operator checkpoints).
The program's first call computes the values and gradients eager does; only that call
keeps the activations the checkpoint would have dropped.

The subgraph is all or nothing.  Inside it a dynamic operation, a value an eager step
computed, or an in-place update of a tensor from before the call ends the recording (the
call runs eagerly, as before); so do outputs other than tensors.  ``use_reentrant=True`` (or
not given, which is the same), a ``context_fn``, ``debug`` or a determinism check other than
the default keep running natively.
"""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch.utils import checkpoint as _ckpt

from magpy.capture.monitor import Observer

_CHECKPOINT = _ckpt.checkpoint
# checkpoint's own keywords and the values under which the subgraph is what it computes.
_OWN = {name: p.default for name, p in inspect.signature(_CHECKPOINT).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY}
_PLAIN = {"context_fn": _OWN["context_fn"], "determinism_check": _OWN["determinism_check"], "debug": False}


def intrinsics_for(capture) -> list:
    """``(callee, handler)`` for the recording run's call policy (``add_intrinsic``)."""
    def handler(monitor, args, kwargs):
        call = _plain_call(args, kwargs or {})
        # (Inside a fork of control flow it runs natively: a tensor of unknown origin stops it.)
        if call is None or capture.breaker.brk is not None or not monitor.observers or monitor.sandbox:
            return _CHECKPOINT(*args, **(kwargs or {}))
        fn, fargs, fkwargs = call
        out = _Body(capture).run(lambda: monitor.call(fn, fargs, fkwargs or None))
        capture.builder.recorded_by_intrinsic(_CHECKPOINT)
        return out
    return [(_CHECKPOINT, handler)]


def _plain_call(args: tuple, kwargs: dict):
    """``(fn, args, kwargs)`` of a non-reentrant checkpoint with default options, else None."""
    if not args or kwargs.get("use_reentrant", _OWN["use_reentrant"]) is not False:
        return None
    if any(k in kwargs and kwargs[k] != default for k, default in _PLAIN.items()):
        return None
    # (preserve_rng_state: the graph compiler functionalises random numbers either way.)
    rest = {k: v for k, v in kwargs.items() if k not in _OWN and k != "preserve_rng_state"}
    return args[0], args[1:], rest


class _Body(Observer):
    """One checkpointed call under way: its operations go to an arm of the current piece, and
    what would need an eager step inside it ends the recording instead."""

    def __init__(self, capture):
        self.capture = capture

    def run(self, call):
        cap = self.capture
        rec, brk = cap.recorder, cap.breaker
        with self._rules(), rec.arm(self) as arm:
            out = call()
        if brk.brk is None:
            outputs = list(out) if type(out) in (tuple, list) else [out]
            if not all(isinstance(t, torch.Tensor) for t in outputs):
                brk.stop("a checkpointed function returns something other than tensors")
            else:
                rec.checkpoint(arm, outputs)
        return out

    @contextlib.contextmanager
    def _rules(self):
        mon, seg = self.capture.monitor, self.capture.segmenter
        saved = mon.observers
        mon.observers = [o for o in mon.observers if o is not seg] + [self]
        try:
            with seg.stepless(self.stop):
                yield
        finally:
            mon.observers = saved

    def stop(self, why: str) -> None:
        """(Also the arm's rule for in-place updates of tensors from before.)"""
        self.capture.breaker.stop(f"{why} (in a checkpointed function)")

    def on_instruction(self, frame, ins, inputs, outputs):
        if self.capture.segmenter.unfollowed(ins.opname, inputs, outputs):
            self.stop(f"a value computed eagerly used ({ins.opname})")

    def on_call(self, frame, callee, args, kwargs, result, entered):
        if not entered and self.capture.segmenter.unfollowed_call(callee, args, kwargs, result):
            self.stop("a value computed eagerly given to a native function")
