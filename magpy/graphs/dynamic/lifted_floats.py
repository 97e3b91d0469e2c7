"""The floats one recording lifted, and how its guard checks them (``magpy.graphs.dynamic``): a
lifted float is a graph input the guard checks by type, unless the run used it where a constant
had to stand (it is *pinned*: guarded by value); a comparison on it is guarded by its outcome."""
from __future__ import annotations

from torch.utils import _pytree as pytree

from magpy.graphs.dynamic.lifted_shadows import IntFloat, Items, Scalar, specialise


class LiftedFloats:
    """The lifted floats of one recording (RefGraph nodes, by id), the tuples read from outside
    that hold some, the outcomes the guard requires of them, and the shadow the run gave each
    float object."""

    def __init__(self):
        self.nodes: dict[int, object] = {}       # node id -> node of a lifted float
        self.pinned: set[int] = set()            # of those, the ones guarded by value after all
        # node id of a tuple read from outside -> node ids of its lifted floats (the guard
        # checks the tuple's type and length, and its other items by value)
        self.tuples: dict[int, set[int]] = {}
        # node id of a lifted float -> {condition source over it ({x}): the outcome it had}
        # (``momentum != 0``: the guard requires the outcome, not the value)
        self.outcomes: dict[int, dict[str, bool]] = {}
        # id(float) -> the lifted float's or IntFloat shadow the run gave that float object:
        # the mock writing it as a constant guards it (constant_written).
        self.by_object: dict[int, object] = {}

    def lift(self, sn) -> Scalar:
        """The float of node ``sn`` is lifted: its shadow."""
        self.nodes[sn.id] = sn
        return Scalar(sn, self.pinned)

    def lift_items(self, sn, lifted: list[bool], child) -> Items:
        """The tuple of node ``sn`` holds lifted floats (``lifted``: which items), each a node
        of its own (``child(i, item)``; every item gets one, for the guard to check the others
        by value): the tuple's shadow."""
        items, free = [], set()
        for i, (x, lift) in enumerate(zip(sn.value, lifted)):
            node = child(i, x)
            items.append(self.lift(node) if lift else None)
            if lift:
                free.add(node.id)
        self.tuples[sn.id] = free
        return Items(items)

    def remember(self, shadow) -> None:
        """A slot got ``shadow``: if it is a float's, that float object has it."""
        if type(shadow) is Scalar or type(shadow) is IntFloat:
            self.by_object[id(shadow.value)] = shadow

    def float_shadow(self, v):
        """The shadow of ``v``, a float the run lifted or computed from lifted values (None
        for anything else)."""
        sh = self.by_object.get(id(v)) if type(v) is float else None
        return sh if sh is not None and sh.value is v else None

    def constant_written(self, v) -> None:
        """The mock writes ``v`` as the constant it was (into program state, a return value,
        an eager step's argument): a float the run computed from lifted values, which reached
        it where its shadow did not follow (``log.append(sched.get_last_lr()[0])``), is
        guarded by value, so that the constant is right for every call the record serves."""
        if type(v) is tuple:
            for x in v:
                self.constant_written(x)
            return
        sh = self.float_shadow(v)
        if sh is not None:
            specialise(sh)

    def require(self, predicate: IntFloat, held: bool) -> bool:
        """The guard requires ``predicate`` over one lifted float (SGD's ``momentum != 0``,
        ReduceLROnPlateau's ``old_lr - new_lr > eps``) to be ``held``, among that float's checks
        (:meth:`value_checks`).  False where it is over several, or ints and floats (no one
        check loads them all)."""
        nodes = {s.node.id if type(s) is Scalar else None for s in predicate.ints}
        if len(nodes) != 1 or None in nodes:
            return False
        source = predicate.render(lambda s: f"({s.source})")   # (over ``{x}``, the float)
        self.outcomes.setdefault(nodes.pop(), {})[source] = held
        return True

    def free(self) -> set[int]:
        """Node ids of the lifted floats the guard does not check by value, and of tuples
        holding such floats (:meth:`value_checks`)."""
        free = set(self.nodes) - self.pinned
        return free | {t for t, items in self.tuples.items() if items & free}

    def value_checks(self, node, name: str) -> list[str]:
        """What the guard checks of free node ``node`` (variable ``name``) besides its type: a
        tuple's length, the outcomes of a float's comparisons."""
        if node.id in self.tuples:
            return [f"len({name}) == {len(node.value)}"]
        return [f"({'' if held else 'not '}{source.format(x=name)})"
                for source, held in self.outcomes.get(node.id, {}).items()]

    def pin_constants(self, graphs) -> None:
        """A last net under the shadows of lifted floats, at the end of the run: a float
        constant of the graphs (``graphs``: fx Graphs) equal to a lifted float may be one whose
        shadow got lost on the way, so that float is guarded by value (at worst, a record less
        general than it could be)."""
        floats = {sn.value: sn.id for nid, sn in self.nodes.items() if nid not in self.pinned}
        for graph in graphs if floats else ():
            for node in graph.nodes:
                for a in pytree.tree_leaves((node.args, node.kwargs)):
                    if type(a) is float and a in floats:
                        self.pinned.add(floats.pop(a))

    def describe(self, words) -> list[str]:
        """The lifted floats and how the guard checks each, in words (explain); ``words(node)``
        names an input."""
        return [f"{words(sn)} (float): "
                f"{'guarded by value (used in Python)' if nid in self.pinned else 'a graph input'}"
                for nid, sn in self.nodes.items()]
