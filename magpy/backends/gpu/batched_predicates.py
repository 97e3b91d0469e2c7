"""Branch predicates read back together: one host sync for a run of tensor ``if`` s, not one each.

A ``torch.cond`` whose predicate lives on a GPU reads it back to the host before it can choose
a branch (Inductor's code, the eager twin and eager's own ``if`` alike): the host waits for
every kernel queued so far, and the GPU then idles while the host queues the branch's kernels.
BlockDrop's gates come from one policy network, yet each block reads its own: one drain of the
launch queue per block.

:func:`gathered` finds the ``cond`` s of a graph whose predicates are ready before the first of
them runs (they read no cond's result; what they need after that point are pure operations,
moved before it), stacks those predicates and copies them to the host at once; each ``cond``
(and the mock, which reads a predicate where an arm passes a tensor through) then reads a CPU
tensor.  The values are the same: the operations moved read nothing an operation in between
writes (the group ends at the first operation that writes in place or draws random numbers).
Only predicates on :data:`DEVICES` (``cuda``) are gathered; tests add ``cpu``.
"""
from __future__ import annotations

import operator

import torch
from torch import fx

from magpy.graphs.higher_order import DEVICE
from magpy.graphs.opgraph import writes

__all__ = ["DEVICES", "gathered"]

DEVICES = frozenset({"cuda"})

_COND = torch.ops.higher_order.cond
_CALLS = ("call_function", "call_method")


def gathered(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, or a copy of it whose first run of conds reads its predicates back at once."""
    if sum(_gatherable(n) for n in gm.graph.nodes) < 2:
        return gm
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    conds = [n for n in graph.nodes if _gatherable(n)]
    group, moved = _group(graph, conds)
    if len(group) < 2:
        return gm
    anchor = group[0]
    for node in moved:
        anchor.prepend(node)
    preds = list(dict.fromkeys(c.args[0] for c in group))
    with graph.inserting_before(anchor):
        stacked = graph.call_function(torch.stack, (preds,))
        host = graph.call_method("cpu", (stacked,))
        reads = [graph.call_function(operator.getitem, (host, i)) for i in range(len(preds))]
    readers = set(group) | {graph.output_node()}
    for pred, read in zip(preds, reads):
        pred.replace_all_uses_with(read, delete_user_cb=readers.__contains__)
    copy = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    copy.meta.update(gm.meta)
    return copy


def _gatherable(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is _COND and node.meta.get(DEVICE) in DEVICES


def _group(graph: fx.Graph, conds: list) -> tuple[list, list]:
    """The conds from the first on whose predicates can be read before it, and the nodes
    after it (in graph order) to move before it for that."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    anchor = conds[0]
    barrier = next((n for n in graph.nodes if order[n] > order[anchor] and n.op in _CALLS and writes(n)),
                   None)
    group, moved = [anchor], {}
    for cond in conds[1:]:
        if barrier is not None and order[cond] > order[barrier]:
            break
        chain = _chain(cond.args[0], order, order[anchor])
        if chain is None:
            break
        group.append(cond)
        moved.update(dict.fromkeys(chain))
    return group, sorted(moved, key=order.__getitem__)


def _chain(pred: fx.Node, order: dict, start: int) -> list | None:
    """The nodes after position ``start`` that ``pred`` needs, if all are pure operations
    that read no cond's result; else None."""
    need, todo = set(), [pred]
    while todo:
        node = todo.pop()
        if order[node] <= start or node in need:
            continue
        if node.op not in _CALLS or node.target is _COND or writes(node) \
                or any(a.target is _COND for a in node.all_input_nodes):
            return None
        need.add(node)
        todo.extend(node.all_input_nodes)
    return list(need)
