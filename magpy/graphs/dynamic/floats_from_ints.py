"""Floats the program computes from lifted ints (``magpy.graphs.dynamic``): a learning-rate
schedule's ``float(step) / warmup``, ``math.cos(...)``, ``max(0.0, ...)``.  The mock computes
them again from each call's ints (``IntFloat``); where the program compares one, the guard
requires the outcome (a condition over the ints), not the ints' values; an ``if`` on the ints
whose arms only compute floats is kept whole (``magpy.graphs.dynamic.arms``)."""
from __future__ import annotations

import operator

from magpy.graphs.dynamic.arms import Conditional, evaluate_arms
from magpy.graphs.dynamic.lifted_shadows import IntFloat, SymInt, int_float, of_ints
from magpy.graphs.dynamic.rules import FLOAT_ARITY, NATIVE_FLOAT, float_parts


class FloatsFromInts:
    """How :class:`magpy.graphs.dynamic.Shapes` follows floats computed from lifted ints
    through native calls, comparisons and ifs.  A mixin: it sets the output shadows of the
    instruction Shapes observes (``set_output``) and keeps the requirements in its parts
    (``check``, ``floats``), the pending ifs in ``ifs``."""

    def _float_call(self, f, callee, args, shadows, out) -> bool:
        """``float(step)``, ``max(0.0, progress)``, ``math.cos(x)`` of floats computed from
        lifted ints (or of the ints): the mock computes the call again (``IntFloat``)."""
        name, types = next(((n, ts) for k, n, ts in NATIVE_FLOAT if k is callee), (None, ()))
        if name in ("max", "min") and len(args) == 2 and not all(type(a) is float for a in args):
            return self._choice(f, name, args, shadows, out)
        if len(args) not in FLOAT_ARITY.get(name, (1,)) or not all(type(a) in types for a in args):
            return False
        parts = float_parts(args, shadows, self.eager_value)
        if parts is None:
            return False
        # (cos and sin of an infinity raise, sqrt of a negative number: RAdam's rectification)
        if name == "MATH.sqrt" and (type(parts[0]) is str or not self.nonnegative(parts[0])):
            return False
        if name.startswith("MATH.") and not self._outcome(int_float(parts, "MATH.isfinite({})", True), True):
            return False
        self.set_output(f, 0, int_float(parts, f"{name}({', '.join(['{}'] * len(parts))})", out))
        return True

    def _choice(self, f, name, args, shadows, out) -> bool:
        """``max(0, factor)`` of an int and a float: which one it gives decides the result's
        type, so the guard keeps the choice (``factor > 0``: max takes the second where it is
        greater, min where it is less) and the result is the one chosen."""
        second = out is args[1] and out is not args[0]
        if not self.float_condition(shadows[::-1], args[::-1], ">" if name == "max" else "<", second):
            return False
        self.set_output(f, 0, shadows[1] if second else shadows[0])
        return True

    def float_condition(self, shadows, values, symbol: str, outcome) -> bool:
        """A comparison ``symbol`` of ``values`` (shadows ``shadows``), one a float computed
        from lifted ints, gave ``outcome``: the guard requires that outcome (the predicate
        over the ints), not the ints' values.  False where it cannot be said so."""
        if type(outcome) is not bool:
            return False
        parts = float_parts(values, shadows, self.eager_value)
        if parts is None:
            return False
        return self._outcome(int_float(parts, f"({{}} {symbol} {{}})", outcome), outcome)

    def nonzero(self, divisor) -> bool:
        """A float's divisor computed from lifted ints (CosineAnnealingLR's ``1 + cos(...)``),
        or a lifted int: the guard requires it nonzero (the mock never divides by zero)."""
        return self._against_zero(divisor, operator.ne, "!=")

    def nonnegative(self, base) -> bool:
        """A root's base computed from lifted values (RAdam's ``bias_correction2 ** 0.5``), or
        a lifted int: the guard requires it nonnegative (the mock takes no complex root)."""
        return self._against_zero(base, operator.ge, ">=")

    def _against_zero(self, part, compare, symbol: str) -> bool:
        """Does ``compare(part, 0)`` hold (``symbol`` its source)?  If so the guard requires it."""
        if type(part) is SymInt:
            return bool(compare(part, 0))   # (guards the outcome)
        return compare(part.value, 0) and self._outcome(int_float((part,), f"({{}} {symbol} 0)", True), True)

    def _outcome(self, predicate: IntFloat, held: bool) -> bool:
        """The guard requires ``predicate`` to be ``held``: over lifted ints, in the shape
        check; over one lifted float, among that float's checks (``LiftedFloats.require``).
        False where it cannot."""
        if of_ints(predicate):
            self.check.require(predicate, held)
            return True
        return self.floats.require(predicate, held)

    def conditional(self, f, values, shadows, symbol: str, outcome, cond) -> bool:
        """A comparison ``symbol`` of lifted ints ``values`` (shadows ``shadows``; ``cond``:
        the SymBool) gave ``outcome``, and a conditional jump takes it: if both arms only
        compute floats (``magpy.graphs.dynamic.arms``), the record keeps both and guards neither
        outcome; the slots they set get the conditional shadow where the taken arm ends.
        False (the caller guards the outcome) where it does not apply."""
        if type(outcome) is not bool or id(f) in self.ifs or not hasattr(f, "info"):
            return False
        parts = float_parts(values, shadows, self.eager_value)
        found = evaluate_arms(f, f.pc, outcome, self.eager_value) if parts is not None else None
        if found is None:
            return False
        end, results, loaded = found
        for name, value in loaded.items():
            self.refgraph.read_builtin(f.globals, f.builtins, name, value)
        self.ifs[id(f)] = Conditional(f, end, results, (parts, symbol), lambda: bool(cond))
        return True

    def _arrived(self, pending: Conditional) -> None:
        """The taken arm of a conditional ends: the slots the arms set get their shadows."""
        del self.ifs[id(pending.frame)]
        shadows = pending.arrived()
        if shadows is None:
            pending.fallback()
            return
        f = pending.frame
        for slot, sh in shadows:
            if slot is None:
                f.shadow_stack[-1] = sh
            else:
                f.shadow_locals[slot] = sh
            self.floats.remember(sh)

    def _abandon(self) -> None:
        """Conditionals whose taken arm did not end (an exception, the end of the run): their
        outcomes are guarded."""
        pending, self.ifs = self.ifs, {}
        for c in pending.values():
            c.fallback()
