"""Observers: what the monitor reports, and the shadow slots it carries for them.

An observer sees every executed instruction with its input and output values, every call
(callee, arguments, result, and whether it was entered or run natively), every frame it
enters and every exception it unwinds.  While observers are attached, each frame has a
shadow slot beside every local and every stack value; the monitor moves shadows along with
the values (loads, stores, copies, swaps, arguments into a callee's parameters, a return
value back to the call site) and observers may set them on any output.  That is where the
RefGraph hangs provenance, independently of ``id()``.

An observer's exception is never the program's: it is raised by magpy's bookkeeping after
the program's own operation completed, so the monitor hands it to ``Monitor.on_fault`` (a
recording stops recording, the program runs on: ``Monitor.observer_failed``) instead of
unwinding it through the program's exception handlers.  Only an exception that is not an
``Exception`` (``KeyboardInterrupt``, ``SystemExit``: asynchronous, or a request to stop)
unwinds as the program's, as it would have wherever eager execution was when it came.
"""
import inspect

from magpy.capture.monitor import bytecode


class Items(tuple):
    """A shadow of a sequence: the shadows of its items, in order.  The monitor passes it
    through calls: a ``*args`` parameter's shadow, and ``f(*seq)`` spreading it over the
    callee's parameters."""


class Entries(dict):
    """A shadow of a keyword dict: the shadows of its values by key (``**kwargs``)."""


class Observer:
    """Base class: override the events you need; all default to doing nothing."""

    def on_instruction(self, frame, instruction, inputs, outputs):
        """After an instruction completed normally.

        ``instruction`` is the ``dis.Instruction``; ``inputs`` are the stack values it
        read, ``outputs`` the values at those stack positions afterwards (for RETURN_VALUE
        and YIELD_VALUE, the value leaving the frame).  Output shadows are
        ``frame.shadow_stack[-len(outputs):]``.
        """

    def on_call(self, frame, callee, args, kwargs, result, entered):
        """After a call from ``frame`` returned; ``entered`` tells if it was monitored."""

    def on_enter(self, frame):
        """A Python function's frame was created (parameters bound), before its first op."""

    def on_unwrap(self, frame, callee, reads):
        """``frame`` calls ``callee`` through what it holds (a ``functools.partial``'s function,
        arguments and keywords): ``reads``, the (attribute, value) pairs the monitor read."""

    def on_exception(self, frame, exc):
        """``exc`` is unwinding through ``frame`` (it may be handled there or propagate)."""


def _load_fast(f, arg, in_sh, out_sh, mon):
    out_sh[0] = f.shadow_locals[arg]


def _store_fast(f, arg, in_sh, out_sh, mon):
    f.shadow_locals[arg] = in_sh[0]


def _delete_fast(f, arg, in_sh, out_sh, mon):
    f.shadow_locals[arg] = None


def _copy(f, arg, in_sh, out_sh, mon):
    out_sh[-1] = in_sh[0]


def _swap(f, arg, in_sh, out_sh, mon):
    out_sh[0], out_sh[-1] = in_sh[-1], in_sh[0]


def _call(f, arg, in_sh, out_sh, mon):
    out_sh[0] = mon.ret_shadow


def _load_fast_and_clear(f, arg, in_sh, out_sh, mon):
    out_sh[0] = f.shadow_locals[arg]
    f.shadow_locals[arg] = None


def _end_send(f, arg, in_sh, out_sh, mon):
    out_sh[0] = in_sh[-1]


def _load_fast_load_fast(f, arg, in_sh, out_sh, mon):
    out_sh[0] = f.shadow_locals[arg >> 4]
    out_sh[1] = f.shadow_locals[arg & 15]


def _store_fast_load_fast(f, arg, in_sh, out_sh, mon):
    f.shadow_locals[arg >> 4] = in_sh[0]
    out_sh[0] = f.shadow_locals[arg & 15]


def _store_fast_store_fast(f, arg, in_sh, out_sh, mon):
    f.shadow_locals[arg >> 4] = in_sh[1]
    f.shadow_locals[arg & 15] = in_sh[0]


# How instructions that only move values move their shadows.  Every other output keeps the
# shadow of the input it *is* (same object, same stack position) or starts as None.
SHADOW_MOVES = {
    "LOAD_FAST": _load_fast, "STORE_FAST": _store_fast, "DELETE_FAST": _delete_fast,
    "COPY": _copy, "SWAP": _swap, "CALL": _call, "CALL_FUNCTION_EX": _call,
    "LOAD_FAST_AND_CLEAR": _load_fast_and_clear, "END_SEND": _end_send,
    "LOAD_FAST_LOAD_FAST": _load_fast_load_fast, "STORE_FAST_LOAD_FAST": _store_fast_load_fast,
    "STORE_FAST_STORE_FAST": _store_fast_store_fast, "CALL_KW": _call,
}
# The instructions that return from a frame (the value leaves it: RETURN_CONST's has no shadow).
RETURNS = frozenset({"RETURN_VALUE", "RETURN_CONST"})


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def returns_to_caller(f, levels: dict, attribute: bool = False) -> bool:
    """Does frame ``f``'s return instruction hand its value (and its shadow) to a calling
    instruction of its caller?  Not when it leaves the monitored call, ends a generator,
    returns to native code that called back into the program (``sorted(key=...)``, ``map``),
    or to an instruction that is not a call: a property's or descriptor's return lands on a
    ``LOAD_ATTR``, which the monitor gives no shadow; ``attribute``: an observer that gives
    it one itself (the value is the load's last output) counts that landing too.
    ``levels``: id(frame) -> the monitor's ``in_intrinsic`` when the frame was entered."""
    caller = f.back
    return (caller is not f.monitor.host_frame and not f.code.co_flags & _GENERATOR_FLAGS
            and levels.get(id(f)) == levels.get(id(caller), -1)
            and (calling(caller) or attribute and loading_attribute(caller)))


def tracked(shadows, kind: type, live: dict) -> list:
    """The shadows of type ``kind`` whose ids ``live`` holds, among ``shadows`` (inside the
    ``Items``/``Entries`` of ``*args``/``**kwargs`` too)."""
    found = []
    for sh in shadows:
        t = type(sh)
        if t is kind and id(sh) in live:
            found.append(sh)
        elif t is Items or t is Entries:
            found += tracked(sh if t is Items else sh.values(), kind, live)
    return found


CALLS = frozenset({"CALL", "CALL_FUNCTION_EX", "CALL_KW"})


# The instructions a property's or a descriptor's ``__get__``'s return lands on.
ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


def _executing(frame, opnames: frozenset) -> bool:
    """Is ``frame`` a monitored frame executing an instruction named in ``opnames``?"""
    return hasattr(frame, "info") and frame.info.instructions[frame.lasti].opname in opnames


def calling(frame) -> bool:
    """Is monitored ``frame`` executing a call instruction (so a return value lands on it)?"""
    return _executing(frame, CALLS)


def loading_attribute(frame) -> bool:
    """Is monitored ``frame`` executing an attribute load (which a property's return lands on)?"""
    return _executing(frame, ATTRIBUTE_LOADS)


def observed_ops(info):
    """The dispatch table of ``info`` with every handler wrapped to report to observers."""
    ops = []
    for entry, ins in zip(info.ops, info.instructions):
        if entry is None:
            ops.append(None)
            continue
        handler, arg, nxt = entry
        ops.append((_observe(handler, ins, bytecode.pops(ins.opname, ins.arg or 0)), arg, nxt))
    return ops


def _observe(handler, ins, npop):
    move = SHADOW_MOVES.get(ins.opname)

    def observed(f, arg):
        s = f.stack
        ss = f.shadow_stack
        base = len(s) - npop
        if npop:
            inputs = tuple(s[base:])
            in_sh = tuple(ss[base:])
        else:
            inputs = in_sh = ()
        f.ins_base = base
        f.ins_inputs = inputs
        f.ins_shadows = in_sh
        mon = f.monitor
        mon.ret_shadow = None
        if handler(f, arg):
            f.ret_shadow = in_sh[0] if in_sh else None
            del ss[base:]
            try:
                for ob in mon.observers:
                    ob.on_instruction(f, ins, inputs, (f.retval,))
            except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
                mon.observer_failed(e)
            return True
        outputs = tuple(s[base:])
        if npop:
            out_sh = [in_sh[j] if j < npop and outputs[j] is inputs[j] else None
                      for j in range(len(outputs))]
        else:
            out_sh = [None] * len(outputs)
        if move is not None:
            move(f, arg, in_sh, out_sh, mon)
        ss[base:] = out_sh
        try:
            for ob in mon.observers:
                ob.on_instruction(f, ins, inputs, outputs)
        except Exception as e:  # noqa: BLE001 - magpy's bookkeeping failed, not the program
            mon.observer_failed(e)
        return False

    return observed
