"""The eager twin of a recorded graph: the same operations run one by one, as eager would.

Every compiled graph has one: it runs while the graph compiles in the background
(``magpy.background``), it is what ``magpy.autopilot`` times the compiled graph against,
and it replaces a graph the backend failed to compile.  For most graphs it is the fx
``GraphModule`` itself.  A graph with control flow operators is run with Python's own
``if`` and ``while`` instead: calling ``torch.ops.higher_order.cond`` / ``while_loop``
eagerly goes through the higher-order operators' Python dispatch on every call (the
BlockDrop benchmark's graph with 6 conds: 4.27 ms per call with the operators, 3.92 ms as
Python, the model itself 3.84 ms).  The Python versions below follow the operators' dense
kernels (``cond_op_dense``, ``while_loop_dense`` in ``torch._higher_order_ops``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import fx


def _cond(pred: torch.Tensor, true_fn: Callable, false_fn: Callable, operands: tuple):
    return true_fn(*operands) if pred else false_fn(*operands)


def _while_loop(cond_fn: Callable, body_fn: Callable, carried: tuple, additional: tuple) -> tuple:
    if not cond_fn(*carried, *additional):
        # (the operator's outputs are new tensors even when the body never runs)
        return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in carried)
    while True:
        carried = body_fn(*carried, *additional)
        if not cond_fn(*carried, *additional):
            return carried


# Operator -> its Python version (same arguments: the branches/body/test are submodules).
PYTHON_CONTROL_FLOW: dict = {
    torch.ops.higher_order.cond: _cond,
    torch.ops.higher_order.while_loop: _while_loop,
}


def eager_twin(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, or where it has control flow operators (at any depth), a copy of it that runs
    them as Python control flow.  The copy shares ``gm``'s parameters and constants."""
    if not _has_control_flow(gm):
        return gm
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    attrs = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target in PYTHON_CONTROL_FLOW:
            node.target = PYTHON_CONTROL_FLOW[node.target]
        if node.op == "get_attr":
            value = _attr(gm, node.target)
            attrs[node.target] = eager_twin(value) if isinstance(value, fx.GraphModule) else value
    return fx.GraphModule(attrs, graph, class_name=type(gm).__name__)


def _has_control_flow(gm: fx.GraphModule) -> bool:
    return any(n.op == "call_function" and n.target in PYTHON_CONTROL_FLOW for n in gm.graph.nodes)


def _attr(gm: fx.GraphModule, target: str):
    value = gm
    for name in target.split("."):
        value = getattr(value, name)
    return value
