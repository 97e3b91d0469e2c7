"""What a call does with lifted values (``magpy.graphs.dynamic``): a tensor operation or a
Python function takes them as they are, a native function computes an int or a float from
them (its result's shadow), ``range``, ``zip``, ``dict.get`` and ``list.append`` move them;
any other native call has no rule, and specialises them."""
from __future__ import annotations

import torch

from magpy.capture.annotations import TYPE_READERS, passes_through
from magpy.capture.monitor import bytecode
from magpy.graphs.dynamic.lifted_shadows import (
    IntFloat,
    Items,
    Scalar,
    Span,
    SymInt,
    items_of,
    specialise,
    symbolic,
    value_of,
)
from magpy.graphs.dynamic.rules import NATIVE_INT, NATIVE_SEQ, dict_get, int_result, list_append, zip_walk


class CallShadows:
    """How :class:`magpy.graphs.dynamic.Shapes` follows lifted values through calls.  A mixin:
    it reads what Shapes knows of the instruction it observes (``_matched``, ``passed``), sets
    its output shadows (``set_output``), hands floats to ``_float_call``
    (:class:`~magpy.graphs.dynamic.floats_from_ints.FloatsFromInts`) and keeps the lists the
    call appended lifted floats to in ``grown``."""

    def called(self, f, inputs, outputs, in_sh) -> bool:
        """A call with symbolic arguments: a tensor operation took them (the recorder matched
        this instruction), a Python function received them, or a native computes an int."""
        if self._matched:
            return True
        if id(f) in self.passed:
            return self.passed_on(f)
        callee, args = bytecode.call_operands(inputs)
        if any(callee is f for f in TYPE_READERS):
            return True   # they look at the type only
        if outputs and passes_through(callee, args, outputs[0]):
            self.set_output(f, 0, in_sh[-1])
            return True
        got = dict_get(callee, args, in_sh[bytecode.call_layout(inputs)[0]], in_sh)
        if got is not False:
            self.set_output(f, 0, got)
            return True
        if callee is zip:
            walk = zip_walk(args, in_sh[len(in_sh) - len(args):])
            if walk is not None:
                self.set_output(f, 0, walk)
            return walk is not None
        stop = _range_end(callee, in_sh[len(in_sh) - len(args):])
        if stop is not None:
            self.set_output(f, 0, Span(stop))   # (a for loop over it may take it whole)
            return True
        lst = list_append(callee, args)
        if lst is not None:
            return self._appended(f, lst, in_sh[bytecode.call_layout(inputs)[0]], in_sh[-1])
        return self._native(f, callee, args, outputs[0] if outputs else None, in_sh)

    def _native(self, f, callee, args, out, in_sh) -> bool:
        """A native function called on lifted values: a float computed from them, an int
        computed from ints, or a sequence of them rebuilt."""
        floats = type(out) is float or any(type(a) is float for a in args)   # (max(0, 0.0) is 0)
        if floats and any(type(s) in (IntFloat, SymInt, Scalar) for s in in_sh):
            return self._float_call(f, callee, args, in_sh[len(in_sh) - len(args):], out)
        fn = next((v for k, v in NATIVE_INT if k is callee), None)
        if fn is not None and all(type(a) is int for a in args):
            try:
                # (torch.sym_max is a torch function: the operation recorder must not see it)
                with torch._C.DisableTorchFunction():
                    r = int_result(out, fn(*(value_of(a, s) for a, s in zip(args, in_sh[-len(args):]))))
            except Exception:  # noqa: BLE001
                r = None
            if r is not None:
                self.set_output(f, 0, r)
                return True
            return False
        if any(callee is c for c in NATIVE_SEQ) and len(args) == 1:
            items = items_of(args[0], in_sh[-1])
            if items is not None and isinstance(out, (tuple, list)) and len(items) == len(out):
                self.set_output(f, 0, Items(items))
                return True
        if callee is len and len(args) == 1 and items_of(args[0], in_sh[-1]) is not None:
            return True   # the length of a sequence of sizes is no size
        return False

    def _appended(self, f, lst, lst_shadow, added) -> bool:
        """``lst.append(x)`` (a schedule's ``lrs.append(lr)``): the list's item shadows, the
        slots of this frame that hold it and the :attr:`grown` list registry get ``x``'s.  Floats
        only: where the list reaches the mock without its item shadows, ``constant_written``
        guards a float it writes as a constant, but cannot find an int (one object per value:
        ``hist.append(x.shape[0])`` wrote the recording's size on every call)."""
        if type(added) not in (Scalar, IntFloat):
            return False
        before = items_of(lst[:-1], lst_shadow)
        if before is None:
            return False
        items = Items(before + (added,))
        for slots, shadows in ((f.locals, f.shadow_locals), (f.stack, f.shadow_stack)):
            for i, v in enumerate(slots):
                if v is lst:
                    shadows[i] = items
        self.grown[id(lst)] = (lst, items)
        self.floats.remember(added)
        return True

    def _out_of_date(self, inputs, in_sh) -> None:
        """An instruction takes a list the call appended lifted values to through a slot
        that does not hold its items' shadows (one that held the list before it grew, in
        another frame, or an object's attribute): those values are guarded instead."""
        for v, sh in zip(inputs, in_sh):
            entry = self.grown.get(id(v)) if type(v) is list else None
            if entry is not None and entry[0] is v and sh is not entry[1]:
                del self.grown[id(v)]
                specialise(entry[1])


def _range_end(callee, shadows: tuple) -> SymInt | None:
    """The end of ``range(*args)`` (``shadows``: its arguments') if it is symbolic and its
    start and step are not."""
    if callee is not range or not 0 < len(shadows) < 4:
        return None
    at = 0 if len(shadows) == 1 else 1
    stop, others = shadows[at], shadows[:at] + shadows[at + 1:]
    return stop if type(stop) is SymInt and not any(map(symbolic, others)) else None
