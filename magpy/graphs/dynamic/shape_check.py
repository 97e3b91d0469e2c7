"""What a record assumes of its lifted sizes and ints, as the conditions of its ``SHAPES``
check (``magpy.graphs.dynamic``): the tensor guard leaves the lifted sizes out and checks
the lifted ints by type only, so everything the recording relied on about their values is
said here once, over the symbols (``codegen.guard.write_shape_check`` writes the function)."""
from __future__ import annotations

from torch.utils._sympy.printers import PythonPrinter

from magpy.graphs.dynamic.lifted_shadows import IntFloat, SymInt
from magpy.graphs.dynamic.twins import Twins


class ShapeCheck:
    """The shape check of one recording: each symbol of ``twins`` loaded from its holder, the
    symbols' ranges, the guards the ShapeEnv collected (relations, outcomes, specialisations),
    the outcomes of comparisons of floats computed from lifted ints, and the strides that are
    expressions of the sizes."""

    def __init__(self, twins: Twins):
        self.twins = twins
        # Outcomes of branches on floats computed from lifted ints: (IntFloat of the predicate
        # as a bool, the outcome), checked after the ints' own conditions.
        self.outcomes: list[tuple[IntFloat, bool]] = []

    def require(self, predicate: IntFloat, held: bool) -> None:
        """The record holds where ``predicate``, over lifted ints only, is ``held``."""
        self.outcomes.append((predicate, held))

    def holders(self) -> list:
        """What the shape check loads its symbols from (its parameters): input tensors with
        lifted sizes, and the RefGraph nodes of lifted int arguments."""
        out = {}
        for o in self.twins.symbols.values():
            out.setdefault(id(o.holder), o.holder)
        return list(out.values())

    def conditions(self, names: dict[int, str]) -> tuple[list[str], list[str]]:
        """``(loads, conditions)`` of the shape check, as Python source: each symbol loaded
        from its tensor (``names``: id(tensor) -> its name), then the symbols' ranges, the
        guards the ShapeEnv collected (relations, outcomes, specialisations) and the strides
        that are expressions of the sizes."""
        twins, loads, conds = self.twins, [], []
        printer = PythonPrinter()
        for sym, o in twins.symbols.items():
            loads.append(f"{sym} = {o.load(names[id(o.holder)])}")
            vr = twins.env.var_to_range.get(sym)
            if vr is not None:
                conds += [f"{sym} {op} {int(bound)}" for op, bound in ((">=", vr.lower), ("<=", vr.upper))
                          if bound.is_Integer]
        conds += [f"({printer.doprint(g.expr)})" for g in twins.env.guards]
        conds += [f"({'' if held else 'not '}{c.render(self._int_source)})" for c, held in self.outcomes]
        for tid, (sn, dims, fake) in twins.inputs.items():
            if fake is None or tid not in names:
                continue
            for d, s in enumerate(fake.stride()):
                if type(s) is SymInt and not s.node.expr.is_number:
                    conds.append(f"{names[tid]}.stride({d}) == {printer.doprint(s.node.expr)}")
        return loads, conds

    def _int_source(self, s: SymInt) -> str:
        """SymInt ``s`` as Python source over the symbols (the shape check's names)."""
        return PythonPrinter().doprint(self.twins.env.replace(s.node.expr))

    def describe(self) -> list[str]:
        """The conditions, in words (explain), if anything is symbolic."""
        if not self.twins.symbols:
            return []
        loads, conds = self.conditions({id(t): f"t{i}" for i, t in enumerate(self.holders())})
        return [f"conditions: {' and '.join(conds) or 'none'}"]
